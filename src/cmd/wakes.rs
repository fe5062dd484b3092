//! `wakes add|list|cancel`: scheduled checks, served by the next pass after they are due.

use anyhow::{Context, Result};

use crate::cli::{WakeAddArgs, WakesCommand};
use crate::clock::{human_duration, rfc3339};
use crate::cmd::App;
use crate::error::usage;
use crate::store::wakes;
use crate::wakes::{too_far_ahead, wake_json, BY_OPERATOR, MAX_OPERATOR_AHEAD_MS};

pub fn run(app: &App, cmd: &WakesCommand) -> Result<()> {
    match cmd {
        WakesCommand::Add(a) => add(app, a),
        WakesCommand::List(a) => {
            let (_c, _d, store) = super::open_for_report(app)?;
            let rows = wakes::list(&store.conn, a.all, 200)?;
            if a.json {
                let v: Vec<serde_json::Value> = rows.iter().map(wake_json).collect();
                crate::outln!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            if rows.is_empty() {
                crate::outln!("no {}wakes", if a.all { "" } else { "pending " });
            }
            // A simulation's wakes as of its last pass, as `inspect` reads them.
            let now = super::inspect::as_of(app, &store)?;
            for w in rows {
                let when = if w.due_at <= now {
                    format!("due {} ago", human_duration(now - w.due_at))
                } else {
                    format!("in {}", human_duration(w.due_at - now))
                };
                crate::outln!(
                    "{:>5}  {}  {:<9}  {:<14}  by {:<8}  {}",
                    w.id,
                    rfc3339(w.due_at),
                    w.status,
                    when,
                    w.created_by,
                    crate::text::clip(&w.reason, 200)
                );
            }
            Ok(())
        }
        WakesCommand::Cancel(a) => {
            let (_c, _d, mut store) = super::open_shared(app, "wakes cancel")?;
            // All or none: a wrong id among several cancels nothing (the error names it).
            let tx = store.immediate()?;
            for id in &a.ids {
                wakes::cancel(&tx, *id, app.now())?;
            }
            tx.commit()?;
            store.fence("wakes cancel")?;
            for id in &a.ids {
                crate::outln!("wake {id} cancelled");
            }
            Ok(())
        }
    }
}

/// A wake's time as given: a delay from when it is recorded, or a time.
enum Due {
    In(i64),
    At(i64),
}

fn add(app: &App, a: &WakeAddArgs) -> Result<()> {
    let asked = app.now();
    // Relative: from when it is recorded; absolute: as given.
    let due = match (&a.in_, &a.at) {
        (Some(d), None) => {
            let d = crate::clock::parse_duration(d).map_err(|e| usage(format!("--in: {e}")))?;
            if too_far_ahead(d.as_millis() as i128) {
                return Err(usage(format!(
                    "--in {:?}: at most {} ahead",
                    a.in_.as_deref().unwrap_or_default().trim(),
                    human_duration(MAX_OPERATOR_AHEAD_MS)
                )));
            }
            Due::In(d.as_millis() as i64)
        }
        (None, Some(t)) => {
            let due = chrono::DateTime::parse_from_rfc3339(t.trim())
                .map_err(|e| {
                    usage(format!(
                        "--at {t:?}: not an RFC 3339 time ({e}); e.g. 2026-11-29T18:30:00Z"
                    ))
                })?
                .timestamp_millis();
            if too_far_ahead(due.saturating_sub(asked) as i128) {
                return Err(usage(format!(
                    "--at {t:?}: at most {} ahead",
                    human_duration(MAX_OPERATOR_AHEAD_MS)
                )));
            }
            Due::At(due)
        }
        _ => return Err(usage("give exactly one of --in or --at")),
    };
    let (_c, _d, mut store) = super::open_shared(app, "wakes add")?;
    // Dated once the store is open (and, with several hosts, the lease taken): a pull of the
    // shared state starts this host's own clock's hours then (`ha::mirror`).
    let now = app.now();
    let due = match due {
        Due::In(ms) => now + ms,
        Due::At(at) => at,
    };
    let id = wakes::add(&store.conn, due, a.reason.trim(), BY_OPERATOR, None, now)
        .context("cannot record the wake")?;
    store.fence("wakes add")?;
    crate::outln!(
        "wake {id} due {} ({}): {}",
        rfc3339(due),
        relative(due, now),
        crate::text::clip(&a.reason, 200)
    );
    if let Some(note) =
        crate::wakes::far_ahead_note(due - now, &format!("fleetagent wakes cancel {id}"))
    {
        crate::outln!("{note}");
    }
    Ok(())
}

fn relative(due: i64, now: i64) -> String {
    if due <= now {
        format!(
            "already due; the next run takes it, {} overdue",
            human_duration(now - due)
        )
    } else {
        format!("in {}", human_duration(due - now))
    }
}
