//! Waking the agent, the incident's "bursts of duplicate runs" and "state changes did not wake
//! it" fixes: every waker (`trigger`, `message`, `reset-session`, `poll`, `sim`) commits an
//! event row first, then rings the doorbell (appends a line; the path unit starts `run`
//! while the file exists). Nothing here decides anything, and it stays cheap: no tokenizer, no
//! network client. `run` waits until the doorbell has been quiet for the most urgent waiting
//! priority's window ([`debounce`]) and claims everything at once, so a burst is one pass.

pub mod debounce;

use std::path::Path;

use anyhow::{Context, Result};

use crate::clock::{rfc3339, Millis};
use crate::doorbell::{Doorbell, FileDoorbell};
use crate::store::{events, session, wakes, Store};

/// Longer operator messages are refused: they must fit the prompt with room to spare.
pub const MAX_MESSAGE_CHARS: usize = 8_000;

/// Commit an event (`kind` `trigger`, `message`, `poll`, ...) where `place` says, then ring
/// the doorbell in `dir`. In this host's outbox (still no network) the `run` the doorbell
/// starts forwards it to the leader, or without `[ha]` makes it an event.
#[allow(clippy::too_many_arguments)]
pub fn record(
    store: &Store,
    dir: &Path,
    place: Recorded,
    priority: u8,
    kind: &str,
    reason: &str,
    body: Option<&str>,
    now: Millis,
) -> Result<i64> {
    let what = if kind == "message" {
        "the message"
    } else {
        "the event"
    };
    let id = if place != Recorded::Event {
        events::insert_outbox(&store.conn, priority, kind, reason, body, now)
    } else {
        events::insert(&store.conn, priority, kind, reason, body, now)
    }
    .with_context(|| format!("cannot record {what}"))?;
    ring(dir, id, priority, reason, now)?;
    Ok(id)
}

/// Where [`record`] put an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// An event of this database.
    Event,
    /// A row of this host's outbox (`[ha] enabled`): an event of the leader's (under another
    /// id) once a `run` or `poll` here forwards it.
    Outbox,
    /// The outbox, the config unread (`cmd::open_for_event`): forwarded under `[ha]`, else
    /// made an event of this database by the next `run` here (`events::take_outbox`).
    OutboxConfigUnread,
}

/// What [`record`] returned, named for the operator, and what comes of it then.
pub fn recorded_as(place: Recorded, id: i64) -> (String, &'static str) {
    match place {
        Recorded::Event => (format!("event {id}"), ""),
        Recorded::Outbox => (
            format!("outbox row {id}"),
            " (the next run or poll here forwards it to the leading host)",
        ),
        Recorded::OutboxConfigUnread => (
            format!("outbox row {id}"),
            " (the config unread: the next run here forwards it to the leading host under [ha], or makes it an event)",
        ),
    }
}

/// Append the event's line to the doorbell in `dir`, after its commit.
pub fn ring(dir: &Path, id: i64, priority: u8, reason: &str, now: Millis) -> Result<()> {
    crate::faults::point("trigger-after-insert")?;
    ring_on(&FileDoorbell::new(dir), id, priority, reason, now)
}

/// Append the event's line to this doorbell, after its commit.
pub fn ring_on(
    doorbell: &dyn Doorbell,
    id: i64,
    priority: u8,
    reason: &str,
    now: Millis,
) -> Result<()> {
    doorbell
        // The line is for a human reading the file; the event keeps the whole reason (a
        // 120 KB reason grew the file by as much at every ring).
        .ring(&format!(
            "{} P{priority} event={id} {}",
            rfc3339(now),
            crate::text::clip(reason, 200)
        ))
        .with_context(|| {
            format!("event {id} is recorded but the doorbell could not be rung; the timer will pick it up")
        })
}

/// An operator message: its text checked against [`MAX_MESSAGE_CHARS`] (`Err` with the
/// usage message), and the short reason the event row carries.
pub fn message_reason(text: &str) -> std::result::Result<String, String> {
    if !text
        .chars()
        .any(|c| !c.is_whitespace() && !crate::text::is_hidden(c))
    {
        // The model would read "Operator message: " and nothing (control and formatting
        // characters do not reach it).
        return Err("the message has no visible character".into());
    }
    let n = text.chars().count();
    if n > MAX_MESSAGE_CHARS {
        return Err(format!(
            "the message is {n} characters; the limit is {MAX_MESSAGE_CHARS}"
        ));
    }
    Ok(format!(
        "operator message: {}",
        text.chars().take(60).collect::<String>()
    ))
}

/// What a reset did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reset {
    pub old_session: i64,
    pub new_session: i64,
    pub cancelled_wakes: usize,
    pub event_id: i64,
}

/// `reset-session`, the incident's "a reset left the agent silent" fix: a new session, wakes
/// cancelled (unless `keep_wakes`), and a P0 event committed, then the doorbell rung, so the
/// agent always runs next.
pub fn reset_session(
    store: &mut Store,
    doorbell: &dyn Doorbell,
    keep_wakes: bool,
    now: Millis,
) -> Result<Reset> {
    let tx = store.immediate()?;
    let old = session::current(&tx)?;
    let new = session::start_new(&tx, "reset-session by operator", now)?;
    let cancelled = if keep_wakes {
        0
    } else {
        wakes::cancel_pending(&tx, now)?
    };
    let reason = format!(
        "session reset by operator (session {old} -> {new}, {cancelled} pending wake(s) cancelled)"
    );
    let id = events::insert(&tx, 0, "reset", &reason, None, now)?;
    tx.commit()?;
    ring_on(doorbell, id, 0, &reason, now)?;
    Ok(Reset {
        old_session: old,
        new_session: new,
        cancelled_wakes: cancelled,
        event_id: id,
    })
}
