//! The launch rules, one function each: from the snapshot and its [`Facts`], how many
//! launches and why, or nothing. [`super::combine`] takes the first in its precedence that
//! asks for any.

use super::{CallKind, Facts, Launch, Mode, BACKLOG_STEP_PASSES, FULLY_SATURATED, SURPLUS_MARGIN};
use crate::fleet::{num, Snapshot};

/// WORKERS DEAD: work queued and no live worker. Enough to reach the need counting what is
/// coming (not what boots longer than a normal boot: it may never come, and every minute
/// without a worker costs), at least one, at most `policy.emergency_launch_max`; nothing
/// when what is coming covers the need, so a booting fleet already sized to the target is not
/// doubled while it boots.
pub(super) fn workers_dead(_s: &Snapshot, f: &Facts) -> Option<Launch> {
    let k = f.known.as_ref()?;
    let coming = k.projected - k.slow_pph;
    if !(k.d.workers_dead() && k.need.max(1.0) > coming) {
        return None;
    }
    let n = ((k.need - coming) / k.rate).ceil().max(1.0) as u32;
    Some(Launch {
        n: n.min(f.config.policy.emergency_launch_max.max(1)),
        // What the rule counts as coming, and what it does not (a re-test read "60 p/h
        // coming" beside a launch made because none of it was counted).
        why: format!(
            "rules: WORKERS DEAD: {} proofs queued and no live worker; {} p/h coming{}",
            k.queued,
            num(coming),
            if k.slow_pph > 0.0 {
                format!(
                    " ({} p/h more booting past a normal boot or unconfirmed by vast.ai, not counted)",
                    num(k.slow_pph)
                )
            } else {
                String::new()
            }
        ),
        kind: CallKind::Emergency,
        emergency: true,
    })
}

/// A deficit: a backlog the rules confirm (`Known::confirmed`: on a saturated fleet, on
/// risen demand, or long enough) with nothing of ours coming. One more at a time, one more
/// every [`BACKLOG_STEP_PASSES`] the backlog lasts: the market's rate is unknown (Curio
/// buffers at most 8), and every surplus instance is paid to sit idle. On a saturated fleet
/// whose last quarter shows demand risen, or whose backlog has lasted 2 x
/// [`BACKLOG_STEP_PASSES`], the deficit is sized from what it does now, half as much again.
/// Toward the target, never past it, at most `policy.launch_window_max`; an instance that no
/// longer makes its margin adds one launch, its replacement.
pub(super) fn deficit(s: &Snapshot, f: &Facts) -> Option<Launch> {
    let k = f.known.as_ref()?;
    let backlog_passes = f.streaks.backlog_passes;
    // What is booting is waited for, unless vast.ai's 429 cut the last plan short: its
    // refused launches are still owed (counting what boots, toward the target as below).
    let owed = s.rate_limited_owed;
    if (k.coming != 0 && owed == 0) || !k.confirmed(backlog_passes) {
        return None;
    }
    let (load, rate, projected) = (&k.load, k.rate, k.projected);
    let step = if load.utilisation >= FULLY_SATURATED
        && (load.rising || backlog_passes >= 2 * BACKLOG_STEP_PASSES)
    {
        (((load.observed * 1.5).max(load.working + rate) - projected) / rate)
            .ceil()
            .max(1.0) as u32
    } else {
        1 + backlog_passes / BACKLOG_STEP_PASSES
    };
    let n = if k.target > 0.0 {
        if projected >= k.target {
            0
        } else {
            (((k.target - projected) / rate).ceil().max(1.0) as u32).min(step)
        }
    } else {
        step
    };
    let n = n.min(f.config.policy.launch_window_max.max(1));
    let n = if k.coming != 0 { n.min(owed) } else { n };
    let why = format!(
        "rules: backlog of {} for {} passes with every live worker busy; {}/h done",
        k.d.backlog_signal(),
        backlog_passes,
        k.d.completed_1h
    );
    Some(match k.losing.first() {
        Some((r, cost)) if n > 0 => Launch {
            n: n + 1,
            why: format!(
                "{why}; and one to replace instance {} (${cost:.4}/proof leaves less than policy.min_margin)",
                r.vast_id.unwrap_or(0)
            ),
            kind: CallKind::Deficit,
            emergency: false,
        },
        _ => Launch {
            n,
            why,
            kind: CallKind::Deficit,
            emergency: false,
        },
    })
}

/// Ahead of a rise the day's history shows (`Forecast::ahead`, only where the profile is
/// believed: enough history, and the last hours came out as it foretold): from a normal boot
/// before it, rent what the forecast less two Poisson deviations needs beyond what works and
/// comes (so a flat day's noise rents nothing), each instance only while the forecast would
/// keep it busy enough to pay (`Forecast::break_even`), the next instance profitable; at
/// most `policy.launch_window_max`. Nothing for dead workers (WORKERS
/// DEAD answers them) nor with ProofShare off.
pub(super) fn ahead(_s: &Snapshot, f: &Facts) -> Option<Launch> {
    let k = f.known.as_ref()?;
    let fc = k.forecast?;
    let ahead = fc.ahead;
    if k.d.workers_dead() || k.d.proofshare_disabled() || !k.profitable_next {
        return None;
    }
    let sure = ahead - 2.0 * ahead.max(1.0).sqrt();
    let n = ((sure - k.projected) / k.rate + 1.0 - fc.break_even).floor();
    if n < 1.0 {
        return None;
    }
    let at = chrono::DateTime::from_timestamp_millis(fc.ahead_at)
        .map(|t| t.format("%H:%M UTC").to_string())
        .unwrap_or_default();
    Some(Launch {
        n: (n as u32).min(f.config.policy.launch_window_max.max(1)),
        why: format!(
            "rules: the day's history expects {} p/h from {at} (a normal boot from now); {} p/h of ours working and coming",
            num(ahead),
            num(k.projected)
        ),
        kind: CallKind::Ahead,
        emergency: false,
    })
}

/// The seed: no live worker, nothing of ours coming, nothing queued, with a target or a price
/// and the next instance profitable: one instance, since Curio asks the market for work only
/// while a ProofShare node lives.
pub(super) fn seed(_s: &Snapshot, f: &Facts) -> Option<Launch> {
    let k = f.known.as_ref()?;
    let d = k.d;
    let wanted = (k.target > 0.0 || k.priced)
        && k.profitable_next
        && !d.proofshare_disabled()
        && d.live_workers() == 0
        && k.projected <= 0.0
        && k.queued == 0;
    wanted.then(|| Launch {
        n: 1,
        why: "rules: no worker lives: one instance so Curio can ask the market for work".into(),
        kind: CallKind::Seed,
        emergency: false,
    })
}

/// The outbid bids this pass destroys come back, as many as the demand still needs.
pub(super) fn outbid_replacement(_s: &Snapshot, f: &Facts) -> Option<Launch> {
    let k = f.known.as_ref()?;
    if k.outbid == 0 || k.d.proofshare_disabled() {
        return None;
    }
    let n = if k.need > k.projected {
        (((k.need - k.projected) / k.rate).ceil() as u32).min(k.outbid)
    } else {
        0
    };
    Some(Launch {
        n,
        why: format!(
            "rules: replacing {} outbid bid(s) destroyed this pass; {} p/h coming of {} needed",
            k.outbid,
            num(k.projected),
            num(k.need)
        ),
        kind: CallKind::Replace,
        emergency: k.d.workers_dead(),
    })
}

/// Instances that no longer make their margin (the price fell, or their measured rate is
/// low), nothing of ours booting: rent profitable replacements for what the fleet would lack
/// without them (their capacity is not counted as staying), so that they can go (the surplus
/// rule takes them once idle and covered). Full mode only.
pub(super) fn unprofitable_replacement(s: &Snapshot, f: &Facts) -> Option<Launch> {
    let k = f.known.as_ref()?;
    let d = k.d;
    let (r, cost) = k.losing.first()?;
    if f.mode != Mode::Full
        || k.coming != 0
        || d.workers_dead()
        || d.proofshare_disabled()
        || !k.profitable_next
    {
        return None;
    }
    let losing_pph: f64 = k.losing.iter().map(|(r, _)| s.rate_of(r, f.config)).sum();
    let want = k.load.hour * SURPLUS_MARGIN;
    let short = want - (k.projected - losing_pph);
    let n = if short > 0.0 {
        ((short / k.rate).ceil() as u32).min(k.losing.len() as u32)
    } else {
        0
    };
    Some(Launch {
        n,
        why: format!(
            "rules: {} instance(s) no longer make policy.min_margin (instance {} at ${cost:.4}/proof): renting profitable replacements before they go",
            k.losing.len(),
            r.vast_id.unwrap_or(0)
        ),
        kind: CallKind::Unprofitable,
        emergency: false,
    })
}
