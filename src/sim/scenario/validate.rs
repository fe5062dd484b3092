//! The checks serde cannot make, one function per section in the order they run (the first
//! error found is the one reported), and the limits they hold every number to. Each error
//! names what is wrong as a key (`hosts.boot_mins`) or an entry of an array (`event #3
//! repeat_mins`); the config's locator finds its line.

use super::{
    repetitions, Action, ActionKind, Bids, Expect, Hosts, Market, PricePath, Scenario, Start,
};
use crate::config::locate;

/// The longest simulation: a (leap) year, in hours.
pub const MAX_HOURS: f64 = 24.0 * 366.0;
/// The shortest, in minutes: one timer period; a shorter run has no timer tick to speak of
/// and its report would check nothing (`--hours 1e-300` ran no pass and PASSED).
pub const MIN_MINUTES: f64 = 5.0;
/// Proofs/h the market may offer at most.
pub const MAX_RATE: f64 = 100_000.0;
/// Proofs the market may be expected to offer within the simulated hours (the sum of rate x
/// duration): every one is drawn, queued and tallied.
pub const MAX_ARRIVALS: f64 = 20_000_000.0;
/// Operator actions (each trigger of a burst, message and reset) scheduled within the
/// simulated hours, counting every repetition: each becomes an event row.
pub const MAX_ACTIONS: u64 = 2_000_000;
/// Characters of text those actions carry in all (a burst's reason is stored per trigger).
pub const MAX_ACTION_TEXT: u64 = 100_000_000;
pub const MAX_OFFERS: u32 = 10_000;
/// `[start]` counts (proofs pending, instances, wakes) at most.
pub const MAX_START: u32 = 100_000;
pub const MAX_EVENT_COUNT: u32 = 100_000;
pub const MAX_EVERY_MS: u64 = 3_600_000;
/// Entries of any list (`market.rate`, `hosts.gpus`, windows, events) at most.
pub const MAX_ENTRIES: usize = 10_000;
const MAX_EXPIRE_MINS: f64 = 7.0 * 24.0 * 60.0;
const MAX_BOOT_MINS: f64 = 24.0 * 60.0;
const MAX_CURIO_START_SECS: f64 = 3_600.0;
const MAX_PER_DAY: f64 = 1_000.0;
const MAX_GPU_RATE: f64 = 10_000.0;
const MAX_DPH: f64 = 1_000.0;
const MAX_SHARE_WEIGHT: f64 = 1_000.0;
/// The text of a message or a burst's reason, as `fleetagent message` allows.
const MAX_TEXT_CHARS: usize = crate::trigger::MAX_MESSAGE_CHARS;

/// Simulated hours (the scenario's or `--hours`) within bounds: at least one timer period,
/// at most a year, a finite number.
pub fn check_hours(hours: f64) -> Result<(), String> {
    if !(hours.is_finite() && hours * 60.0 >= MIN_MINUTES && hours <= MAX_HOURS) {
        return Err(format!(
            "must be at least 5 minutes (one timer period, 0.0834 h) and at most {MAX_HOURS} \
             (a year), got {}",
            num(hours)
        ));
    }
    Ok(())
}

impl Scenario {
    /// The checks [`parse`](super::parse) makes, on a scenario built in code (no lines to name).
    pub fn check(&self) -> Result<(), String> {
        validate(self).map_err(|e| e.bare())
    }

    /// The work `hours` of this scenario make (market arrivals, operator actions), within
    /// the stated limits; for a `--hours` that overrides the scenario's own.
    pub fn check_work(&self, hours: f64) -> Result<(), String> {
        work(self, hours).map_err(|e| e.bare())
    }
}

/// What is wrong, and where: a dotted key (`hosts.boot_mins`), or an entry of an array
/// (`event`, `market.rate`, `hosts.gpus`) by its index and the field within it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Invalid {
    key: &'static str,
    index: Option<usize>,
    field: Option<&'static str>,
    msg: String,
}

impl Invalid {
    fn key(key: &'static str, msg: String) -> Invalid {
        Invalid {
            key,
            index: None,
            field: None,
            msg,
        }
    }

    fn entry(key: &'static str, index: usize, field: Option<&'static str>, msg: String) -> Invalid {
        Invalid {
            key,
            index: Some(index),
            field,
            msg,
        }
    }

    /// `hosts.offers`, `market.rate #2`, `event #3 repeat_mins` (entries count from 1).
    fn name(&self) -> String {
        match (self.index, self.field) {
            (None, _) => self.key.to_string(),
            (Some(i), None) => format!("{} #{}", self.key, i + 1),
            (Some(i), Some(f)) => format!("{} #{} {f}", self.key, i + 1),
        }
    }

    /// Laid out at its line in `text`: the key's; for an entry of an array, its field's,
    /// else the entry's own.
    pub(super) fn in_text(&self, text: &str) -> String {
        let line = match self.index {
            None => locate::key_line(text, self.key),
            Some(index) => locate::entry_line(text, self.key, index, self.field),
        };
        locate::at_line(line, &self.name(), &self.msg)
    }

    /// Without a text to name a line of (a scenario built in code).
    fn bare(&self) -> String {
        locate::at_line(None, &self.name(), &self.msg)
    }
}

/// A number as the errors show it: `0.5`, `1e-300`, `NaN` (never 300 digits).
fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e16).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// A finite number within [lo, hi].
fn within(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && v >= lo && v <= hi
}

pub(super) fn validate(s: &Scenario) -> Result<(), Invalid> {
    name_and_hours(s)?;
    market(&s.market)?;
    hosts(&s.hosts)?;
    windows(s)?;
    if let Some(p) = &s.price {
        price(p)?;
    }
    bids(&s.bids)?;
    start(&s.start)?;
    fleet_fits_the_offers(&s.start, &s.hosts)?;
    events(&s.events)?;
    expect(&s.expect)?;
    if s.price.is_none() {
        for (key, set) in [
            (
                "expect.max_unprofitable_launches",
                s.expect.max_unprofitable_launches.is_some(),
            ),
            (
                "expect.min_profit_share_of_oracle",
                s.expect.min_profit_share_of_oracle.is_some(),
            ),
            (
                "expect.max_unprofitable_instance_hours",
                s.expect.max_unprofitable_instance_hours.is_some(),
            ),
            (
                "expect.max_loss_instance_hours",
                s.expect.max_loss_instance_hours.is_some(),
            ),
        ] {
            if set {
                return bad(key, "needs a [price] table (no price is modelled)".into());
            }
        }
    }
    work(s, s.hours)
}

/// FIL/USD at most this.
const MAX_FIL_USD: f64 = 1_000_000.0;
/// FIL per proof at most this.
const MAX_ASK_FIL: f64 = 1_000.0;

/// `[price]`: both paths, from hour 0, hours in order, positive values within bounds.
fn price(p: &PricePath) -> Result<(), Invalid> {
    for (key, path, max, unit) in [
        ("price.fil_usd", &p.fil_usd, MAX_FIL_USD, "USD/FIL"),
        ("price.ask_fil", &p.ask_fil, MAX_ASK_FIL, "FIL/proof"),
    ] {
        if path.is_empty() || path.len() > MAX_ENTRIES {
            return bad(
                key,
                format!(
                    "needs between 1 and {MAX_ENTRIES} [hour, {unit}] pairs, got {}",
                    path.len()
                ),
            );
        }
        let mut last = 0.0;
        for (i, (h, v)) in path.iter().enumerate() {
            let first_at_zero = i > 0 || *h == 0.0;
            let ok =
                first_at_zero && within(*h, last, MAX_HOURS) && within(*v, 0.0, max) && *v > 0.0;
            if !ok {
                return Err(Invalid::entry(
                    key,
                    i,
                    None,
                    format!(
                        "pairs must be [hour, {unit}] starting at hour 0, hours in order within                          0..={MAX_HOURS}, values > 0 and at most {max}, got [{}, {}]",
                        num(*h),
                        num(*v)
                    ),
                ));
            }
            last = *h;
        }
    }
    Ok(())
}

/// `[bids]`.
fn bids(b: &Bids) -> Result<(), Invalid> {
    if !within(b.outbid_per_day, 0.0, MAX_PER_DAY) {
        return bad(
            "bids.outbid_per_day",
            format!(
                "must be between 0 and {MAX_PER_DAY}, got {}",
                num(b.outbid_per_day)
            ),
        );
    }
    if !within(b.resume_share, 0.0, 1.0) {
        return bad(
            "bids.resume_share",
            format!("must be between 0 and 1, got {}", num(b.resume_share)),
        );
    }
    let (lo, hi) = b.resume_mins;
    if !(within(lo, 0.0, MAX_EXPIRE_MINS) && within(hi, lo, MAX_EXPIRE_MINS)) {
        return bad(
            "bids.resume_mins",
            format!(
                "must be [low, high] minutes with 0 <= low <= high <= {MAX_EXPIRE_MINS}, got                  [{}, {}]",
                num(lo),
                num(hi)
            ),
        );
    }
    if b.waves.len() > MAX_ENTRIES {
        return bad(
            "bids.wave",
            format!("has {} waves; at most {MAX_ENTRIES}", b.waves.len()),
        );
    }
    for (i, w) in b.waves.iter().enumerate() {
        if !within(w.at_hours, 0.0, MAX_HOURS) {
            return Err(Invalid::entry(
                "bids.wave",
                i,
                Some("at_hours"),
                format!("must be between 0 and {MAX_HOURS}, got {}", num(w.at_hours)),
            ));
        }
        if w.count == 0 || w.count > MAX_START {
            return Err(Invalid::entry(
                "bids.wave",
                i,
                Some("count"),
                format!("must be between 1 and {MAX_START}, got {}", w.count),
            ));
        }
    }
    Ok(())
}

fn bad(key: &'static str, msg: String) -> Result<(), Invalid> {
    Err(Invalid::key(key, msg))
}

/// The name and the hours.
fn name_and_hours(s: &Scenario) -> Result<(), Invalid> {
    if s.name.trim().is_empty() {
        return bad("name", "must not be empty".into());
    }
    // One line of text: a newline in it split the report's first line (and could forge one).
    if s.name
        .chars()
        .any(|c| c.is_control() || crate::text::is_hidden(c))
    {
        return bad(
            "name",
            "must be one line of printable text (no newline, tab or control character)".into(),
        );
    }
    check_hours(s.hours).or_else(|m| bad("hours", m))
}

/// `[market]`.
fn market(m: &Market) -> Result<(), Invalid> {
    if m.rate.is_empty() {
        return bad(
            "market.rate",
            "needs at least one [hour, proofs/h] pair".into(),
        );
    }
    if m.rate.len() > MAX_ENTRIES {
        return bad(
            "market.rate",
            format!("has {} pairs; at most {MAX_ENTRIES}", m.rate.len()),
        );
    }
    let mut last = 0.0;
    for (i, (h, r)) in m.rate.iter().enumerate() {
        // Each hour after the one before: a repeated hour's first pair was silently ignored.
        let in_order = within(*h, last, MAX_HOURS) && (i == 0 || *h > last);
        if !in_order || !within(*r, 0.0, MAX_RATE) {
            return Err(Invalid::entry(
                "market.rate",
                i,
                None,
                format!(
                    "pairs must be [hour, proofs/h] with hours rising within 0..={MAX_HOURS} \
                     and rates within 0..={MAX_RATE}, got [{}, {}]",
                    num(*h),
                    num(*r)
                ),
            ));
        }
        last = *h;
    }
    if !(within(m.expire_mins, 0.0, MAX_EXPIRE_MINS) && m.expire_mins > 0.0) {
        return bad(
            "market.expire_mins",
            format!(
                "must be > 0 and at most {MAX_EXPIRE_MINS} (a week), got {}",
                num(m.expire_mins)
            ),
        );
    }
    Ok(())
}

/// `[hosts]`, its GPUs included.
fn hosts(h: &Hosts) -> Result<(), Invalid> {
    if h.offers == 0 || h.offers > MAX_OFFERS {
        return bad(
            "hosts.offers",
            format!("must be between 1 and {MAX_OFFERS}, got {}", h.offers),
        );
    }
    if h.gpus.is_empty() || h.gpus.len() > 100 {
        return bad(
            "hosts.gpus",
            format!("needs between 1 and 100 GPUs, got {}", h.gpus.len()),
        );
    }
    for (i, g) in h.gpus.iter().enumerate() {
        let gpu = |field, msg: String| Err(Invalid::entry("hosts.gpus", i, Some(field), msg));
        if g.name.trim().is_empty() {
            return gpu("name", "must not be empty".into());
        }
        if !(within(g.rate, 0.0, MAX_GPU_RATE) && g.rate > 0.0) {
            return gpu(
                "rate",
                format!(
                    "{}: proofs/h must be > 0 and at most {MAX_GPU_RATE}, got {}",
                    g.name,
                    num(g.rate)
                ),
            );
        }
        let (lo, hi) = g.dph;
        if !(within(lo, 0.0, MAX_DPH) && lo > 0.0 && within(hi, lo, MAX_DPH)) {
            return gpu(
                "dph",
                format!(
                    "{}: must be [low, high] $/h with 0 < low <= high <= {MAX_DPH}, got [{}, {}]",
                    g.name,
                    num(lo),
                    num(hi)
                ),
            );
        }
        if !(within(g.share, 0.0, MAX_SHARE_WEIGHT) && g.share > 0.0) {
            return gpu(
                "share",
                format!(
                    "{}: must be > 0 and at most {MAX_SHARE_WEIGHT}, got {}",
                    g.name,
                    num(g.share)
                ),
            );
        }
    }
    let (median, p90) = h.boot_mins;
    if !(within(median, 0.0, MAX_BOOT_MINS) && median > 0.0 && within(p90, median, MAX_BOOT_MINS)) {
        return bad(
            "hosts.boot_mins",
            format!(
                "must be [median, p90] minutes with 0 < median <= p90 <= {MAX_BOOT_MINS}, \
                 got [{}, {}]",
                num(median),
                num(p90)
            ),
        );
    }
    for (key, v) in [("hosts.boot_fail", h.boot_fail), ("hosts.stuck", h.stuck)] {
        if !within(v, 0.0, 1.0) {
            return bad(key, format!("must be between 0 and 1, got {}", num(v)));
        }
    }
    // Shares of the same boots: together at most all of them (0.6 and 0.6 ran as 0.6 and 0.4).
    if h.boot_fail + h.stuck > 1.0 {
        return bad(
            "hosts.boot_fail",
            format!(
                "and hosts.stuck are shares of the same boots: together at most 1, got {} + {}",
                num(h.boot_fail),
                num(h.stuck)
            ),
        );
    }
    for (key, v) in [
        ("hosts.offline_per_day", h.offline_per_day),
        ("hosts.crash_per_day", h.crash_per_day),
    ] {
        if !within(v, 0.0, MAX_PER_DAY) {
            return bad(
                key,
                format!("must be between 0 and {MAX_PER_DAY}, got {}", num(v)),
            );
        }
    }
    let (lo, hi) = h.curio_start_secs;
    if !(within(lo, 0.0, MAX_CURIO_START_SECS) && within(hi, lo, MAX_CURIO_START_SECS)) {
        return bad(
            "hosts.curio_start_secs",
            format!(
                "must be [low, high] seconds with 0 <= low <= high <= {MAX_CURIO_START_SECS}, \
                 got [{}, {}]",
                num(lo),
                num(hi)
            ),
        );
    }
    let (lo, hi) = h.reliability;
    if !(within(lo, 0.0, 1.0) && within(hi, lo, 1.0)) {
        return bad(
            "hosts.reliability",
            format!(
                "must be [low, high] with 0 <= low <= high <= 1, got [{}, {}]",
                num(lo),
                num(hi)
            ),
        );
    }
    Ok(())
}

/// `[[vast_429]]` and `[[probe_outage]]`.
fn windows(s: &Scenario) -> Result<(), Invalid> {
    for (key, windows) in [("vast_429", &s.vast_429), ("probe_outage", &s.probe_outage)] {
        if windows.len() > MAX_ENTRIES {
            return bad(
                key,
                format!("has {} windows; at most {MAX_ENTRIES}", windows.len()),
            );
        }
        for (i, w) in windows.iter().enumerate() {
            let window = |field, msg: String| Err(Invalid::entry(key, i, Some(field), msg));
            if !within(w.at_hours, 0.0, MAX_HOURS) {
                return window(
                    "at_hours",
                    format!("must be between 0 and {MAX_HOURS}, got {}", num(w.at_hours)),
                );
            }
            if !(within(w.hours, 0.0, MAX_HOURS) && w.hours > 0.0) {
                return window(
                    "hours",
                    format!("must be > 0 and at most {MAX_HOURS}, got {}", num(w.hours)),
                );
            }
            if !within(w.share, 0.0, 1.0) {
                return window(
                    "share",
                    format!("must be between 0 and 1, got {}", num(w.share)),
                );
            }
        }
    }
    Ok(())
}

/// `[start]`.
fn start(st: &Start) -> Result<(), Invalid> {
    for (key, v) in [
        ("start.pending", st.pending),
        ("start.live", st.live),
        ("start.loading", st.loading),
        ("start.loading_stuck", st.loading_stuck),
        ("start.dead", st.dead),
        ("start.wakes", st.wakes),
    ] {
        if v > MAX_START {
            return bad(key, format!("must be at most {MAX_START}, got {v}"));
        }
    }
    if st.loading_stuck > st.loading {
        return bad(
            "start.loading_stuck",
            format!(
                "cannot exceed start.loading ({}), got {}",
                st.loading, st.loading_stuck
            ),
        );
    }
    Ok(())
}

/// The fleet at the start fits the offers of `[hosts]`.
fn fleet_fits_the_offers(st: &Start, h: &Hosts) -> Result<(), Invalid> {
    // Each starting instance rents an offer, and one offer holds the account's instance
    // that is not ours.
    let fleet = st.live + st.loading + st.dead;
    if fleet >= h.offers {
        let key = [
            ("start.live", st.live),
            ("start.dead", st.dead),
            ("start.loading", st.loading),
        ]
        .into_iter()
        .max_by_key(|(_, v)| *v)
        .map_or("start.live", |(k, _)| k);
        return bad(
            key,
            format!(
                "start.live + start.loading + start.dead is {fleet}: each rents one of the \
                 {} offers (hosts.offers) and one holds the account's foreign instance, so at \
                 most {}",
                h.offers,
                h.offers - 1
            ),
        );
    }
    Ok(())
}

/// `[[event]]`.
fn events(events: &[Action]) -> Result<(), Invalid> {
    if events.len() > MAX_ENTRIES {
        return bad(
            "event",
            format!("has {} entries; at most {MAX_ENTRIES}", events.len()),
        );
    }
    for (i, a) in events.iter().enumerate() {
        let event = |field, msg: String| Err(Invalid::entry("event", i, Some(field), msg));
        if !within(a.at_mins, 0.0, MAX_HOURS * 60.0) {
            return event(
                "at_mins",
                format!(
                    "must be between 0 and {}, got {}",
                    MAX_HOURS * 60.0,
                    num(a.at_mins)
                ),
            );
        }
        if a.priority > 2 {
            return event("priority", format!("must be 0, 1 or 2, got {}", a.priority));
        }
        if a.count > MAX_EVENT_COUNT || (a.kind == ActionKind::Triggers && a.count == 0) {
            return event(
                "count",
                format!("must be between 1 and {MAX_EVENT_COUNT}, got {}", a.count),
            );
        }
        if a.every_ms > MAX_EVERY_MS {
            return event(
                "every_ms",
                format!(
                    "must be at most {MAX_EVERY_MS} (an hour), got {}",
                    a.every_ms
                ),
            );
        }
        if !(a.repeat_mins == 0.0 || within(a.repeat_mins, 1.0, MAX_HOURS * 60.0)) {
            return event(
                "repeat_mins",
                format!(
                    "must be 0 (once) or between 1 and {} minutes, got {}",
                    MAX_HOURS * 60.0,
                    num(a.repeat_mins)
                ),
            );
        }
        let text = a.text.as_deref().unwrap_or("");
        if text.chars().count() > MAX_TEXT_CHARS {
            return event(
                "text",
                format!(
                    "is {} characters; at most {MAX_TEXT_CHARS}",
                    text.chars().count()
                ),
            );
        }
        if a.kind == ActionKind::Message && text.trim().is_empty() {
            return event("text", "a message needs text".into());
        }
    }
    Ok(())
}

/// `[expect]`.
fn expect(e: &Expect) -> Result<(), Invalid> {
    for (key, v) in [
        ("expect.max_hours_below_target", e.max_hours_below_target),
        (
            "expect.max_hours_below_target_over_oracle",
            e.max_hours_below_target_over_oracle,
        ),
        ("expect.min_served_share", e.min_served_share),
        ("expect.max_dollars_per_proof", e.max_dollars_per_proof),
        (
            "expect.max_cost_ratio_to_oracle",
            e.max_cost_ratio_to_oracle,
        ),
        (
            "expect.reset_answered_within_secs",
            e.reset_answered_within_secs,
        ),
        ("expect.max_silence_mins", e.max_silence_mins),
        ("expect.min_fallback_share", e.min_fallback_share),
        ("expect.max_passes_per_hour", e.max_passes_per_hour),
        ("expect.max_spend_in_dead_hours", e.max_spend_in_dead_hours),
        (
            "expect.max_unprofitable_instance_hours",
            e.max_unprofitable_instance_hours,
        ),
        ("expect.max_loss_instance_hours", e.max_loss_instance_hours),
        (
            "expect.min_profit_share_of_oracle",
            e.min_profit_share_of_oracle,
        ),
        ("expect.max_outbid_replace_mins", e.max_outbid_replace_mins),
    ] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                return bad(key, format!("must be a number >= 0, got {}", num(v)));
            }
        }
    }
    Ok(())
}

/// The work of `hours` of this scenario, within the limits: the market's expected arrivals
/// and the operator actions scheduled (every trigger of a burst, every repetition).
fn work(s: &Scenario, hours: f64) -> Result<(), Invalid> {
    let arrivals = s.expected_arrivals(hours);
    if !arrivals.is_finite() || arrivals > MAX_ARRIVALS {
        return Err(Invalid::key(
            "market.rate",
            format!(
                "in {} h the market would offer about {arrivals:.0} proofs (at most \
                 {MAX_ARRIVALS}); lower the rates or shorten the hours",
                num(hours)
            ),
        ));
    }
    let mut actions: u64 = 0;
    let mut text: u64 = 0;
    // Per entry: (actions, characters, repetitions), to name the one that adds the most.
    let mut each = Vec::with_capacity(s.events.len());
    for a in &s.events {
        let reps = repetitions(a, hours);
        let per = match a.kind {
            ActionKind::Triggers => a.count as u64,
            _ => 1,
        };
        let n = reps.saturating_mul(per);
        // A burst's reason gets " #N" (and is "state change" when unset).
        let chars = match (a.kind, a.text.as_deref()) {
            (ActionKind::Triggers, t) => t.map_or(12, |t| t.chars().count()) as u64 + 8,
            (_, t) => t.map_or(0, |t| t.chars().count()) as u64,
        };
        let c = n.saturating_mul(chars);
        actions = actions.saturating_add(n);
        text = text.saturating_add(c);
        each.push((n, c, reps));
    }
    let (what, by_text) = if actions > MAX_ACTIONS {
        (
            format!("would fire {actions} actions (at most {MAX_ACTIONS})"),
            false,
        )
    } else if text > MAX_ACTION_TEXT {
        (
            format!("would carry {text} characters of text (at most {MAX_ACTION_TEXT} in all)"),
            true,
        )
    } else {
        return Ok(());
    };
    let (i, &(n, c, reps)) = each
        .iter()
        .enumerate()
        .max_by_key(|(_, (n, c, _))| if by_text { *c } else { *n })
        .expect("some event fires");
    let a = &s.events[i];
    let how = match a.kind {
        ActionKind::Triggers => format!("count {} x {reps} repetitions", a.count),
        _ => format!("{reps} repetitions"),
    };
    let mine = if by_text {
        format!("{c} characters, {how}")
    } else {
        format!("{n} actions, {how}")
    };
    Err(Invalid::entry(
        "event",
        i,
        None,
        format!(
            "in {} h the events {what}, this one {mine}; lower the count, repeat less \
             often or shorten the hours",
            num(hours)
        ),
    ))
}
