//! A wall clock that stepped back (NTP correcting a fast clock, a VM restored from a
//! snapshot) leaves the ledger dated in the future: launches counted in the launch window
//! until the clock caught up (an empty fleet, WORKERS DEAD, every launch refused
//! `rate_limited` for hours), instances under `policy.min_rental_mins` for as long. A pass
//! re-dates such rows to its own now: they happened before it, and the window and the
//! rental protections then count them from now, as recent, never for the length of the
//! step.

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
                              last_seen_at = MIN(last_seen_at, ?2)
          WHERE created_at > ?1 OR state_since > ?1 OR last_seen_at > ?1",
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

/// The skew beyond [`CLOCK_SKEW_MAX_MS`] as one line for the journal, the agent and `doctor`;
/// None within it.
pub fn skew_line(skew_ms: Millis) -> Option<String> {
    if skew_ms.abs() <= CLOCK_SKEW_MAX_MS {
        return None;
    }
    // To the nearest minute: `Date` counts whole seconds, so two hours measure 7199.4 s
    // as often as 7200.4 (and read 1h59m).
    let by = crate::clock::human_duration((skew_ms.abs() + 30_000) / 60_000 * 60_000);
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
            ""
        }
    ))
}

/// Store the skew a listing measured when it moved beyond what an operator would tell apart
/// ([`skew_changed`]); the stored skew before it. What a pass and `poll` do with each
/// measurement.
pub fn store_skew(conn: &Connection, skew: Millis) -> Result<Option<Millis>> {
    let before = crate::store::ops::vast_health(conn)?.clock_skew_ms;
    if skew_changed(before, Some(skew)) {
        crate::store::ops::record_clock_skew(conn, Some(skew))?;
    }
    Ok(before)
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
        let r = redate_future(&s.conn, now).unwrap().unwrap();
        assert_eq!(
            r,
            Redated {
                rows: 2,
                ahead_ms: 7_200_000
            }
        );
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
