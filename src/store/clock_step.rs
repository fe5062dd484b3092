//! A wall clock that stepped back (NTP correcting a fast clock, a VM restored from a
//! snapshot) leaves the ledger dated in the future: launches counted in the launch window
//! until the clock caught up (an empty fleet, WORKERS DEAD, every launch refused
//! `rate_limited` for hours), instances under `policy.min_rental_mins` for as long. A pass
//! re-dates such rows to its own now: they happened before it, and the window and the
//! rental protections then count them from now, as recent, never for the length of the
//! step.
//!
//! The other way, a clock that ran behind vast.ai's and is set right steps forward, and what
//! it dated in its slow hours reads that much older (more launches let through the window,
//! instances a few minutes old stopped as past `policy.min_rental_mins`, a pause ended).
//! Its skew was measured against vast.ai's `Date` ([`store_skew`]): the first listing that
//! finds the two agree again dates those rows later by the step ([`redate_slow_hours`]).

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::Millis;

/// A time this far after now was not written by this clock as it reads now.
pub const CLOCK_STEP_MS: Millis = 60_000;

/// What [`redate_future`] changed: rows, and how far ahead the furthest was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Redated {
    pub rows: usize,
    pub ahead_ms: Millis,
}

/// The times of `actions` and `instances` more than [`CLOCK_STEP_MS`] after `now`, set to
/// `now`. `None` when there were none.
pub fn redate_future(conn: &Connection, now: Millis) -> Result<Option<Redated>> {
    let limit = now + CLOCK_STEP_MS;
    // Every pass asks, so it asks cheaply: the ledger's newest row and the live instances
    // (each pass stamps them) are dated ahead after a step, if anything is; the whole tables
    // are rewritten only then. Reading them whole was 15 % of a simulated week.
    let newest: Option<Millis> = conn
        .prepare_cached(
            "SELECT MAX(created_at, COALESCE(finished_at, 0)) FROM actions
              ORDER BY id DESC LIMIT 1",
        )?
        .query_row([], |r| r.get(0))
        .optional()?;
    let live: Option<Millis> = conn
        .prepare_cached(
            "SELECT MAX(MAX(created_at, state_since, COALESCE(last_seen_at, 0)))
               FROM instances WHERE gone_at IS NULL",
        )?
        .query_row([], |r| r.get(0))?;
    let furthest = newest.max(live).filter(|t| *t > limit);
    let Some(furthest) = furthest else {
        return Ok(None);
    };
    let mut rows = 0;
    rows += conn.execute(
        "UPDATE actions SET created_at = MIN(created_at, ?2),
                            finished_at = MIN(finished_at, ?2)
          WHERE created_at > ?1 OR finished_at > ?1",
        params![limit, now],
    )?;
    rows += conn.execute(
        "UPDATE instances SET created_at = MIN(created_at, ?2), state_since = MIN(state_since, ?2),
                              last_seen_at = MIN(last_seen_at, ?2), gone_at = MIN(gone_at, ?2)
          WHERE created_at > ?1 OR state_since > ?1 OR last_seen_at > ?1 OR gone_at > ?1",
        params![limit, now],
    )?;
    rows += conn.execute(
        "UPDATE operator_stops_in_flight SET typed_at = ?2 WHERE typed_at > ?1",
        params![limit, now],
    )?;

    Ok(Some(Redated {
        rows,
        ahead_ms: furthest - now,
    }))
}

/// This host's clock and vast.ai's (its answers' `Date`) further apart than this are named:
/// more than a slow answer and `Date`'s truncation to the second could make.
pub const CLOCK_SKEW_MAX_MS: Millis = 60_000;

/// How far this host's clock runs ahead of vast.ai's by the last measurement, when past
/// [`CLOCK_SKEW_MAX_MS`], and since when (this clock's time the measurements began to find it
/// so). A clock stepped forward ends a pause and the operator's hold early and empties the
/// launch window (a walkthrough: +25 h, and a pass rented two instances seconds after the
/// operator's `pause --for 1h`): what was dated before it ran ahead is judged on vast.ai's
/// time as well, the stricter of the two winning, until the clock is set right. What it
/// dated itself since is in its own terms (a re-test: a `pause --for 5s` typed 2 h ahead
/// lasted the 2 h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ahead {
    pub ms: Millis,
    pub since: Millis,
}

impl Ahead {
    /// `at`, dated by this clock, as vast.ai's clock would have dated it: moved by the skew
    /// when dated before the clock ran ahead (never past `now`), else as it is.
    pub fn recent(&self, at: Millis, now: Millis) -> Millis {
        if at < self.since {
            (at + self.ms).min(now)
        } else {
            at
        }
    }
}

pub fn ahead(conn: &Connection) -> Result<Option<Ahead>> {
    let row: Option<(Option<Millis>, Option<Millis>)> = conn
        .prepare_cached(
            "SELECT vast_clock_skew_ms, vast_clock_skew_since_ms FROM agent_state WHERE id = 1",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(match row {
        Some((Some(ms), since)) if ms > CLOCK_SKEW_MAX_MS => Some(Ahead {
            ms,
            // Unknown start: everything is read as dated before (the stricter).
            since: since.unwrap_or(Millis::MAX),
        }),
        _ => None,
    })
}

/// How far apart two clocks are (`ms`, either sign), to the nearest minute: `Date` counts
/// whole seconds, so two hours measure 7199.4 s as often as 7200.4 (and read 1h59m).
pub fn to_the_minute(ms: Millis) -> String {
    crate::clock::human_duration((ms.abs() + 30_000) / 60_000 * 60_000)
}

/// The skew beyond [`CLOCK_SKEW_MAX_MS`] as one line for the journal, the agent and `doctor`;
/// None within it.
pub fn skew_line(skew_ms: Millis) -> Option<String> {
    if skew_ms.abs() <= CLOCK_SKEW_MAX_MS {
        return None;
    }
    let by = to_the_minute(skew_ms);
    let (side, step) = if skew_ms > 0 {
        ("ahead of", "back")
    } else {
        ("behind", "forward")
    };
    Some(format!(
        "this host's clock is {by} {side} vast.ai's (the Date of its answers): the ages fleetagent takes from vast.ai (an adopted instance's, `instances list`'s) are off by that much, and when the clock is set right its step {step} moves the launch window, policy.min_rental_mins, policy.stuck_loading_mins and vast.stopped_max_hours by {by}{}; set the clock right (timedatectl; an NTP client such as systemd-timesyncd or chrony)",
        if skew_ms < 0 {
            " (they end early: instances stopped or relaunched before their time)"
        } else {
            " (meanwhile a pause, the operator's hold, the launch window and the wakes are judged on vast.ai's time too, so that none ends early)"
        }
    ))
}

/// What [`store_skew`] found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stored {
    /// The skew stored before this measurement.
    pub before: Option<Millis>,
    /// A clock that ran behind vast.ai's and was set right since the last measurement: the
    /// rows dated while it ran behind, dated later by the step ([`redate_slow_hours`]).
    pub forward: Option<Redated>,
    /// A clock that stepped back since the last measurement: the rows it dated ahead of its
    /// new now, dated earlier by the step ([`redate_stepped_back`]); `ahead_ms` the step.
    pub back: Option<Redated>,
}

impl Stored {
    /// What a repair of [`store_skew`] did, one line each for the journal and the agent
    /// ([`forward_line`], [`back_line`]): a pass's, `poll`'s and the listing a pass makes
    /// before its claim say the same.
    pub fn repaired_lines(&self) -> Vec<String> {
        [self.forward.map(forward_line), self.back.map(back_line)]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Store the skew a listing measured when it moved beyond what an operator would tell apart
/// ([`skew_changed`]), and when this host's clock began to run off vast.ai's. A clock that
/// ran behind by more than [`CLOCK_SKEW_MAX_MS`] and now reads at least [`CLOCK_STEP_MS`]
/// nearer vast.ai's was set right (a step forward): what was dated since it began to run
/// behind is dated later by that step. What a pass and `poll` do with each measurement;
/// `now` is this host's time.
pub fn store_skew(conn: &Connection, skew: Millis, now: Millis) -> Result<Stored> {
    let before = crate::store::ops::vast_health(conn)?.clock_skew_ms;
    let since: Option<Millis> = conn
        .prepare_cached("SELECT vast_clock_skew_since_ms FROM agent_state WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    let mut forward = None;
    if let (Some(b), Some(since)) = (before, since) {
        let step = skew - b;
        if b < -CLOCK_SKEW_MAX_MS && step > CLOCK_STEP_MS {
            let rows = redate_slow_hours(conn, since, step, now)?;
            forward = Some(Redated {
                rows,
                ahead_ms: step,
            });
        }
    }
    // A clock already ahead that steps further ahead: what it dated since it ran ahead is in
    // the old clock's terms and would read that much older (a pause, a hold, the window
    // ending at once: a re-test); dated later by the step, as the slow hours above, it is in
    // the clock's terms again, and what came before still reads on vast.ai's time (`Ahead`).
    if let (Some(b), Some(since)) = (before, since) {
        let step = skew - b;
        if b > CLOCK_SKEW_MAX_MS && step > CLOCK_STEP_MS {
            redate_slow_hours(conn, since, step, now)?;
        }
    }
    // A measured step back: what it left dated ahead is dated by the step, exactly (a pause
    // and a wake typed before it kept their ends, which then came the step late).
    let step_back = before
        .map(|b| skew - b)
        .filter(|step| *step < -CLOCK_STEP_MS);
    let off = |s: Millis| s.abs() > CLOCK_SKEW_MAX_MS;
    let mut back = None;
    // The earliest of the rows a step back dates earlier, as dated then: they are in the slow
    // clock's terms from there on, and a clock that now runs behind and is later set right
    // must date them later with the rest (right, then 2h back, then right ran a wake of
    // before the step at once: the soak's repro).
    let mut earliest_back: Option<Millis> = None;
    if let Some(step) = step_back {
        earliest_back = earliest_ahead(conn, now)?.map(|t| (t + step).min(now));
        // From a clock already off, with the start of its off hours known: every row written
        // since is in that clock's terms (a pause typed for 4h at the start of three hours
        // 2h ahead no longer read ahead when the clock was set right, and ended 2h late:
        // the re-test). From a right clock, only the rows it left ahead can be told apart.
        let off_since = since.filter(|_| before.is_some_and(off));
        let rows = match off_since {
            Some(since) => redate_slow_hours(conn, since, step, now)?,
            None => redate_stepped_back(conn, step, now)?,
        };
        if rows > 0 {
            back = Some(Redated {
                rows,
                ahead_ms: -step,
            });
        }
    }
    if skew_changed(before, Some(skew)) {
        crate::store::ops::record_clock_skew(conn, Some(skew))?;
    }
    let same_side = before.is_some_and(|b| off(b) && off(skew) && (b > 0) == (skew > 0));
    // While off on one side the slow hours keep their start, and take in a further step back
    // (its rows are dated at a now earlier than that start: a re-test stepped 2h, then 3h):
    // the start moves back by that step, as the rows before it did.
    let since_now = match (off(skew), same_side && forward.is_none()) {
        (false, _) => None,
        (true, true) => Some(since.map_or(now, |s| (s + step_back.unwrap_or(0)).min(now))),
        (true, false) => Some(now),
    }
    .map(|s| earliest_back.map_or(s, |e| s.min(e)));
    if since_now != since {
        conn.prepare_cached("UPDATE agent_state SET vast_clock_skew_since_ms = ?1 WHERE id = 1")?
            .execute(params![since_now])?;
    }
    Ok(Stored {
        before,
        forward,
        back,
    })
}

/// The times of `actions`, `instances`, the pause, the operator's stops in flight, `events`
/// and pending `wakes` at or after `since` (when this host's clock began to run behind
/// vast.ai's), dated `by` later but never after `now` (a pause's end and a wake's due time by
/// the whole step): the clock was set right by a step of `by`, and they would otherwise read
/// that much older (the launch window letting more launches go, instances stopped within
/// `policy.min_rental_mins`, a pause ending early, a hold lost). A negative `by` dates them
/// earlier the same way (a step back: [`store_skew`], [`redate_stepped_back`]). The rows
/// changed.
pub fn redate_slow_hours(
    conn: &Connection,
    since: Millis,
    by: Millis,
    now: Millis,
) -> Result<usize> {
    let mut rows = conn.execute(
        "UPDATE actions SET created_at = CASE WHEN created_at >= ?1 THEN MIN(created_at + ?2, ?3) ELSE created_at END,
                            finished_at = CASE WHEN finished_at >= ?1 THEN MIN(finished_at + ?2, ?3) ELSE finished_at END
          WHERE created_at >= ?1 OR finished_at >= ?1",
        params![since, by, now],
    )?;
    rows += conn.execute(
        "UPDATE instances SET created_at = CASE WHEN created_at >= ?1 THEN MIN(created_at + ?2, ?3) ELSE created_at END,
                              state_since = CASE WHEN state_since >= ?1 THEN MIN(state_since + ?2, ?3) ELSE state_since END,
                              last_seen_at = CASE WHEN last_seen_at >= ?1 THEN MIN(last_seen_at + ?2, ?3) ELSE last_seen_at END,
                              gone_at = CASE WHEN gone_at >= ?1 THEN MIN(gone_at + ?2, ?3) ELSE gone_at END
          WHERE created_at >= ?1 OR state_since >= ?1 OR last_seen_at >= ?1 OR gone_at >= ?1",
        params![since, by, now],
    )?;
    // The pause's end was set ahead of the clock: it moves with the step, whatever `now`.
    rows += conn.execute(
        "UPDATE agent_state SET paused_at = MIN(paused_at + ?2, ?3), paused_until = paused_until + ?2
          WHERE id = 1 AND paused_at >= ?1",
        params![since, by, now],
    )?;
    // An operator's stop still marked in flight (a killed command's: its hold), the events
    // (a `resume` or `message` ends a hold only when it is dated after the stop), and the
    // wakes (one added for 30 minutes came out 90 minutes overdue): a re-test.
    rows += conn.execute(
        "UPDATE operator_stops_in_flight SET typed_at = MIN(typed_at + ?2, ?3) WHERE typed_at >= ?1",
        params![since, by, now],
    )?;
    rows += conn.execute(
        "UPDATE events SET created_at = MIN(created_at + ?2, ?3),
                           not_before = CASE WHEN not_before >= ?1 THEN not_before + ?2 ELSE not_before END
          WHERE created_at >= ?1",
        params![since, by, now],
    )?;
    rows += conn.execute(
        "UPDATE wakes SET created_at = MIN(created_at + ?2, ?3), due_at = due_at + ?2
          WHERE created_at >= ?1 AND status = 'pending'",
        params![since, by, now],
    )?;
    Ok(rows)
}

/// The times more than [`CLOCK_STEP_MS`] after `now` (dated before a step back of `-by`
/// that a listing measured: nothing written since reads so far ahead) of `actions`,
/// `instances`, the pause, the operator's stops in flight, `events` and pending `wakes`,
/// dated `by` (negative) earlier: the times they happened, never after now; a pause's end,
/// a wake's due time and an event's `not_before` by the whole step, so that a pause typed
/// for 30 minutes before the step still ends 30 minutes after it was typed (it ended the
/// step late: a re-test stepped 2h, then 3h behind, then right). Rows written before the
/// step that read no further ahead than that are not told from rows written after it, and
/// are kept. The rows changed.
pub fn redate_stepped_back(conn: &Connection, by: Millis, now: Millis) -> Result<usize> {
    // The same re-dating as the slow hours', from the first time past the limit.
    redate_slow_hours(conn, now + CLOCK_STEP_MS + 1, by, now)
}

/// The earliest time of a row [`redate_stepped_back`] would date earlier (its creation's, or
/// a pause's start), None when there is none.
fn earliest_ahead(conn: &Connection, now: Millis) -> Result<Option<Millis>> {
    let limit = now + CLOCK_STEP_MS;
    Ok(conn
        .prepare_cached(
            "SELECT MIN(t) FROM (
                 SELECT MIN(created_at) AS t FROM actions WHERE created_at > ?1
                 UNION ALL SELECT MIN(created_at) FROM instances WHERE created_at > ?1
                 UNION ALL SELECT paused_at FROM agent_state WHERE id = 1 AND paused_at > ?1
                 UNION ALL SELECT MIN(typed_at) FROM operator_stops_in_flight WHERE typed_at > ?1
                 UNION ALL SELECT MIN(created_at) FROM events WHERE created_at > ?1
                 UNION ALL SELECT MIN(created_at) FROM wakes WHERE created_at > ?1 AND status = 'pending')",
        )?
        .query_row(params![limit], |r| r.get(0))?)
}

/// The line a pass and `poll` say at warning when [`store_skew`] dated rows earlier.
pub fn back_line(r: Redated) -> String {
    format!(
        "this host's clock stepped back by {} against vast.ai's: {} row(s) of launches, stops, instances, events, wakes and the pause it had dated ahead of its new time are dated that much earlier (never after now), so that a pause or a wake set before the step ends when it was meant to",
        to_the_minute(r.ahead_ms),
        r.rows
    )
}

/// The line a pass and `poll` say at warning when [`store_skew`] dated rows later.
pub fn forward_line(r: Redated) -> String {
    format!(
        "this host's clock stepped forward by {} to vast.ai's (it ran behind, and was set right): {} row(s) of launches, stops, instances, events, wakes and the pause dated while it ran behind are dated that much later (never after now), so that the launch window, policy.min_rental_mins, the operator hold and the pause count them as they happened",
        to_the_minute(r.ahead_ms),
        r.rows
    )
}

/// Two measurements of the skew that an operator would not tell apart (a slow answer,
/// `Date`'s truncation): a pass and `poll` write only a change beyond it.
pub fn skew_changed(before: Option<Millis>, now: Option<Millis>) -> bool {
    match (before, now) {
        (Some(a), Some(b)) => (a - b).abs() > 5_000,
        (a, b) => a.is_some() != b.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    /// A clock 2 h ahead that steps to 3 h ahead: a pause it typed while 2 h ahead moves with
    /// the step, so it does not end an hour early (a re-test: it ended at once, as did the
    /// window and the hold); what came before it ran ahead still reads on vast.ai's time.
    #[test]
    fn a_clock_ahead_that_steps_further_keeps_what_it_dated_in_its_terms() {
        const MIN: Millis = 60_000;
        let start: Millis = 1_800_000_000_000;
        let (_dir, s) = test_store(start);
        let c = &s.conn;
        let typed = start + 10 * MIN;
        c.execute(
            "UPDATE agent_state SET vast_clock_skew_ms = 7200000, vast_clock_skew_since_ms = ?1,
                    paused_at = ?2, paused_until = ?3, paused_reason = 'r' WHERE id = 1",
            params![start, typed, typed + 30 * MIN],
        )
        .unwrap();
        // Ten minutes after the pause, the clock reads an hour later than it would have.
        let now = typed + 10 * MIN + 60 * MIN;
        store_skew(c, 3 * 3_600_000, now).unwrap();
        let pause = crate::store::ops::paused(c, now)
            .unwrap()
            .expect("still paused");
        assert_eq!(pause.until, Some(typed + 90 * MIN));
        assert!(crate::store::ops::paused(c, typed + 91 * MIN)
            .unwrap()
            .is_none());
        assert_eq!(ahead(c).unwrap().map(|a| a.since), Some(start));
    }

    #[test]
    fn rows_dated_after_now_are_dated_now_and_the_rest_kept() {
        let (_dir, s) = test_store(0);
        let now = 10_000_000;
        for (label, at) in [
            ("past", now - 600_000),
            ("moment", now + 30_000),
            ("ahead", now + 7_200_000),
        ] {
            s.conn
                .execute(
                    "INSERT INTO actions (kind, outcome, actor, label, created_at, finished_at)
                     VALUES ('launch', 'ok', 'rules', ?1, ?2, ?2)",
                    params![label, at],
                )
                .unwrap();
            s.conn
                .execute(
                    "INSERT INTO instances (label, state, created_at, state_since)
                     VALUES (?1, 'proving', ?2, ?2)",
                    params![label, at],
                )
                .unwrap();
        }
        // Rented and gone while the clock ran ahead: gone now, not hours from now (its
        // spend read as running until then).
        s.conn
            .execute(
                "INSERT INTO instances (label, state, created_at, state_since, gone_at)
                 VALUES ('gone', 'gone', ?1, ?1, ?2)",
                params![now + 3_600_000, now + 7_000_000],
            )
            .unwrap();
        let r = redate_future(&s.conn, now).unwrap().unwrap();
        assert_eq!(
            r,
            Redated {
                rows: 3,
                ahead_ms: 7_200_000
            }
        );
        let gone: (Millis, Millis) = s
            .conn
            .query_row(
                "SELECT created_at, gone_at FROM instances WHERE label = 'gone'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(gone, (now, now));
        let at = |table: &str, label: &str| -> Millis {
            s.conn
                .query_row(
                    &format!("SELECT created_at FROM {table} WHERE label = ?1"),
                    [label],
                    |r| r.get(0),
                )
                .unwrap()
        };
        for table in ["actions", "instances"] {
            assert_eq!(at(table, "past"), now - 600_000);
            assert_eq!(at(table, "moment"), now + 30_000, "within a minute: kept");
            assert_eq!(at(table, "ahead"), now);
        }
        assert_eq!(redate_future(&s.conn, now).unwrap(), None);
    }

    /// The drill: the clock ran two hours behind vast.ai's (a pass dated what it did, and the
    /// rows the step back left in the future, by it), then was set right. What was dated in
    /// the slow hours is dated later by the step, never after now; the rest is kept.
    #[test]
    fn a_clock_set_right_after_running_behind_dates_its_slow_hours_later() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let step = 7_200_000;
        let slow = 50_000_000; // this host's time in the slow hours
        assert_eq!(store_skew(c, 200, slow - 1_000).unwrap().forward, None);
        // The first listing that measured it: the slow hours begin.
        let first = store_skew(c, -step, slow).unwrap();
        assert_eq!((first.before, first.forward), (Some(200), None));
        let insert = |label: &str, at: Millis| {
            c.execute(
                "INSERT INTO actions (kind, outcome, actor, label, created_at, finished_at)
                 VALUES ('launch', 'ok', 'rules', ?1, ?2, ?2)",
                params![label, at],
            )
            .unwrap();
            c.execute(
                "INSERT INTO instances (label, state, created_at, state_since)
                 VALUES (?1, 'proving', ?2, ?2)",
                params![label, at],
            )
            .unwrap();
        };
        insert("before", slow - 3_600_000);
        insert("slow", slow + 60_000);
        insert("late", slow + 3_000_000);
        // Rented before the slow hours and gone in them: it billed the step longer than
        // its rows read.
        c.execute(
            "INSERT INTO instances (label, state, created_at, state_since, gone_at)
             VALUES ('gone', 'gone', ?1, ?1, ?2)",
            params![slow - 600_000, slow + 200_000],
        )
        .unwrap();
        let pause = crate::store::ops::Pause {
            since: slow + 60_000,
            until: Some(slow + 3_660_000),
            reason: "maintenance".into(),
        };
        crate::store::ops::set_pause(c, &pause).unwrap();
        // A `resume` typed, a wake added, a stop marked in flight, all in the slow hours.
        c.execute(
            "INSERT INTO events (priority, kind, reason, created_at) VALUES (0, 'resume', 'go', ?1)",
            params![slow + 90_000],
        )
        .unwrap();
        c.execute(
            "INSERT INTO wakes (due_at, reason, created_at, created_by, status)
             VALUES (?1, 'look', ?2, 'operator', 'pending')",
            params![slow + 1_890_000, slow + 90_000],
        )
        .unwrap();
        crate::store::actions::operator_stop_typed(c, slow + 100_000, 7, 0).unwrap();
        // Still behind, measured again: nothing moves, the hours keep their start.
        assert_eq!(
            store_skew(c, -step + 900, slow + 120_000).unwrap().forward,
            None
        );
        // Set right: vast.ai's Date agrees with this host's clock again.
        let now = slow + 600_000 + step + 1_000;
        let r = store_skew(c, 300, now).unwrap().forward.unwrap();
        assert_eq!(
            r.ahead_ms,
            step + 300,
            "from the skew stored (900 ms is no change)"
        );
        assert_eq!(
            r.rows, 9,
            "two actions, three instances, the pause, the stop in flight, the event, the wake"
        );
        let at = |table: &str, label: &str| -> Millis {
            c.query_row(
                &format!("SELECT created_at FROM {table} WHERE label = ?1"),
                [label],
                |r| r.get(0),
            )
            .unwrap()
        };
        for table in ["actions", "instances"] {
            assert_eq!(at(table, "before"), slow - 3_600_000, "{table}: kept");
            assert_eq!(at(table, "slow"), slow + 60_000 + r.ahead_ms, "{table}");
            assert_eq!(at(table, "late"), now, "{table}: never after now");
        }
        let one = |sql: &str| -> Millis { c.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            one("SELECT gone_at - created_at FROM instances WHERE label = 'gone'"),
            800_000 + r.ahead_ms,
            "the hours it billed"
        );
        assert_eq!(
            one("SELECT created_at FROM events"),
            slow + 90_000 + r.ahead_ms
        );
        assert_eq!(
            one("SELECT due_at FROM wakes"),
            slow + 1_890_000 + r.ahead_ms
        );
        assert_eq!(
            one("SELECT typed_at FROM operator_stops_in_flight"),
            slow + 100_000 + r.ahead_ms
        );
        let pause = crate::store::ops::paused(c, now).unwrap().unwrap();
        assert_eq!(
            pause.until,
            Some(slow + 3_660_000 + r.ahead_ms),
            "the hour it was paused for"
        );
        let since: Option<Millis> = c
            .query_row(
                "SELECT vast_clock_skew_since_ms FROM agent_state",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(since, None, "within a minute: no slow hours");
        assert_eq!(store_skew(c, 300, now + 60_000).unwrap().forward, None);
        assert!(forward_line(r).starts_with("this host's clock stepped forward by 2h00m"));
    }

    /// A stop typed on the slow clock and answered after the clock was set right is dated
    /// from its mark, which the repair dated with the rest (by its slow typed time it read
    /// two hours old and held nothing: a re-test).
    #[test]
    fn a_stop_that_lands_after_the_repair_is_dated_from_its_repaired_mark() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let (slow, step) = (50_000_000, 7_200_000);
        store_skew(c, -step, slow).unwrap();
        let mark = crate::store::actions::operator_stop_typed(c, slow + 1_000, 7, 0).unwrap();
        let now = slow + step + 5_000;
        store_skew(c, 0, now).unwrap().forward.unwrap();
        let answered = now + 3_000;
        crate::store::actions::insert(
            c,
            &crate::store::actions::NewAction {
                kind: "destroy",
                outcome: "ok",
                actor: "operator",
                instance_id: Some(7),
                label: Some("fleetagent-r1-aa"),
                tool_call_id: Some("operator-1"),
                ..Default::default()
            },
            answered,
        )
        .unwrap();
        crate::store::actions::date_operator_stop(c, "operator-1", mark).unwrap();
        let (created, finished): (Millis, Millis) = c
            .query_row(
                "SELECT created_at, finished_at FROM actions WHERE actor = 'operator'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((created, finished), (slow + 1_000 + step, answered));
    }

    /// Behind by 2h, then a further hour back (the slow hours' rows now dated before their
    /// first measurement), then right: those rows are dated later too (a re-test saw none).
    #[test]
    fn a_clock_further_behind_before_it_is_set_right_keeps_its_slow_hours() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let t0 = 50_000_000;
        store_skew(c, -7_200_000, t0).unwrap();
        let t1 = t0 - 3_000_000; // an hour further back, 10 minutes on
        store_skew(c, -10_800_000, t1).unwrap();
        c.execute(
            "INSERT INTO actions (kind, outcome, actor, label, created_at, finished_at)
             VALUES ('launch', 'ok', 'rules', 'x', ?1, ?1)",
            params![t1 + 10_000],
        )
        .unwrap();
        let now = t1 + 10_800_000 + 60_000;
        let r = store_skew(c, 0, now).unwrap().forward.unwrap();
        assert_eq!((r.ahead_ms, r.rows), (10_800_000, 1));
        let at: Millis = c
            .query_row("SELECT created_at FROM actions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(at, t1 + 10_000 + 10_800_000);
    }

    /// Pause and wake typed on a clock off vast.ai's, each for 30 minutes, ten minutes
    /// before the clock stepped back; `true_at` is vast.ai's time when they were typed.
    fn pause_and_wake(c: &Connection, host_at: Millis) {
        let pause = crate::store::ops::Pause {
            since: host_at,
            until: Some(host_at + 1_800_000),
            reason: "maintenance".into(),
        };
        crate::store::ops::set_pause(c, &pause).unwrap();
        c.execute(
            "INSERT INTO wakes (due_at, reason, created_at, created_by, status)
             VALUES (?1, 'look', ?2, 'operator', 'pending')",
            params![host_at + 1_800_000, host_at],
        )
        .unwrap();
    }

    fn pause_and_wake_ends(c: &Connection) -> (Millis, Millis) {
        c.query_row(
            "SELECT paused_until, (SELECT due_at FROM wakes) FROM agent_state",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    /// Two hours ahead of vast.ai's, then set right (a step back): the pause and the wake
    /// typed ten minutes before end 20 minutes after it, not two hours and 20 minutes.
    #[test]
    fn a_pause_typed_on_a_fast_clock_ends_when_it_was_meant_to_after_the_step_back() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let (fast, step) = (50_000_000, 7_200_000);
        store_skew(c, step, fast).unwrap();
        pause_and_wake(c, fast + 600_000);
        let now = fast + 1_200_000 - step; // vast.ai's time, ten minutes after they were typed
        let stored = store_skew(c, 0, now).unwrap();
        assert_eq!(stored.forward, None);
        let back = stored.back.unwrap();
        assert_eq!(
            (back.rows, back.ahead_ms),
            (2, step),
            "the pause and the wake"
        );
        assert_eq!(pause_and_wake_ends(c), (now + 1_200_000, now + 1_200_000));
        assert!(back_line(back).starts_with("this host's clock stepped back by 2h00m"));
    }

    /// The re-test: behind by 2h, a pause and a wake of 30 minutes, an hour further back ten
    /// minutes later, then right: they end 20 minutes after it (they ended 59 minutes late).
    #[test]
    fn a_pause_typed_before_a_further_step_back_ends_when_it_was_meant_to() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let t0 = 50_000_000;
        store_skew(c, -7_200_000, t0).unwrap();
        pause_and_wake(c, t0 + 60_000);
        let t1 = t0 + 660_000 - 3_600_000; // an hour further back, ten minutes on
        let stored = store_skew(c, -10_800_000, t1).unwrap();
        assert_eq!(stored.back.map(|b| b.rows), Some(2));
        // Set right five minutes on: 15 minutes of the 30 are left.
        let now = t1 + 300_000 + 10_800_000;
        assert!(store_skew(c, 0, now).unwrap().forward.is_some());
        assert_eq!(pause_and_wake_ends(c), (now + 900_000, now + 900_000));
    }

    /// Two hours ahead for three hours, a four-hour pause and wake typed at its start, then
    /// set right: they end an hour later, not three (they no longer read ahead of the new
    /// time, so only the start of the fast hours tells them apart: the re-test).
    #[test]
    fn a_long_pause_typed_on_a_fast_clock_ends_when_it_was_meant_to() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let (fast, step) = (50_000_000, 7_200_000);
        store_skew(c, 0, fast - 60_000).unwrap();
        store_skew(c, step, fast).unwrap();
        let pause = crate::store::ops::Pause {
            since: fast,
            until: Some(fast + 4 * 3_600_000),
            reason: "maintenance".into(),
        };
        crate::store::ops::set_pause(c, &pause).unwrap();
        c.execute(
            "INSERT INTO wakes (due_at, reason, created_at, created_by, status)
             VALUES (?1, 'look', ?2, 'operator', 'pending')",
            params![fast + 4 * 3_600_000, fast],
        )
        .unwrap();
        store_skew(c, step + 500, fast + 3_600_000).unwrap(); // still ahead an hour on
        let now = fast + 3 * 3_600_000 - step; // set right three hours on
        assert!(store_skew(c, 0, now).unwrap().back.is_some());
        assert_eq!(pause_and_wake_ends(c), (now + 3_600_000, now + 3_600_000));
    }

    /// Right, then two hours back (a VM restored from a snapshot), then right again: the
    /// pause and the wake typed ten minutes before the step end when they were meant to (the
    /// soak's repro: the wake, dated back at the step and left out of the slow hours, ran at
    /// once when the clock was set right).
    #[test]
    fn a_pause_typed_before_a_step_back_from_a_right_clock_survives_the_clock_set_right() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let (t, step) = (50_000_000, 7_200_000);
        store_skew(c, 0, t).unwrap();
        pause_and_wake(c, t + 600_000); // both end at t + 40m
        let slow = t + 1_200_000 - step; // the step back, twenty minutes on
        assert_eq!(
            store_skew(c, -step, slow).unwrap().back.map(|b| b.rows),
            Some(2)
        );
        let now = t + 1_500_000; // set right five minutes later
        assert!(store_skew(c, 0, now).unwrap().forward.is_some());
        assert_eq!(pause_and_wake_ends(c), (t + 2_400_000, t + 2_400_000));
    }

    #[test]
    fn a_skew_over_a_minute_is_named_with_its_side_and_what_it_moves() {
        assert_eq!(skew_line(CLOCK_SKEW_MAX_MS), None);
        assert_eq!(skew_line(-1_500), None, "a slow answer, Date's truncation");
        let ahead = skew_line(3_600_000).unwrap();
        assert!(
            ahead.starts_with("this host's clock is 1h00m ahead of vast.ai's"),
            "{ahead}"
        );
        assert!(
            ahead.contains("its step back moves the launch window"),
            "{ahead}"
        );
        assert!(skew_line(7_199_400)
            .unwrap()
            .starts_with("this host's clock is 2h00m ahead"));
        let behind = skew_line(-140_000).unwrap();
        assert!(
            behind.starts_with("this host's clock is 2m behind vast.ai's"),
            "{behind}"
        );
        assert!(behind.contains("its step forward moves") && behind.contains("end early"));
        assert!(!skew_changed(Some(90_000), Some(91_500)));
        assert!(skew_changed(Some(90_000), Some(10)));
        assert!(skew_changed(None, Some(10)) && skew_changed(Some(10), None));
        assert!(!skew_changed(None, None));
    }
}
