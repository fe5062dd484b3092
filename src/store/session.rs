//! The session and the single `agent_state` row.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// First session and the state row, in the migration that creates the schema.
pub(crate) fn bootstrap(conn: &Connection, now: Millis) -> Result<()> {
    conn.execute(
        "INSERT INTO sessions (started_at, reason) VALUES (?1, 'database created')",
        params![now],
    )?;
    let session = conn.last_insert_rowid();
    conn.execute(
        "INSERT INTO agent_state (id, session_id) VALUES (1, ?1)",
        params![session],
    )?;
    Ok(())
}

pub fn current(conn: &Connection) -> Result<i64> {
    Ok(
        conn.query_row("SELECT session_id FROM agent_state WHERE id = 1", [], |r| {
            r.get(0)
        })?,
    )
}

/// Start a new session and make it current. Old conversation rows stay for audit.
pub fn start_new(conn: &Connection, reason: &str, now: Millis) -> Result<i64> {
    conn.execute(
        "INSERT INTO sessions (started_at, reason) VALUES (?1, ?2)",
        params![now, reason],
    )?;
    let id = conn.last_insert_rowid();
    conn.execute(
        "UPDATE agent_state SET session_id = ?1 WHERE id = 1",
        params![id],
    )?;
    Ok(id)
}

/// When the current session began.
pub fn started_at(conn: &Connection, session: i64) -> Result<Millis> {
    Ok(conn.query_row(
        "SELECT started_at FROM sessions WHERE id = ?1",
        params![session],
        |r| r.get(0),
    )?)
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentState {
    pub session_id: i64,
    pub last_run_finished_at: Option<Millis>,
    pub last_success_at: Option<Millis>,
    pub last_llm_call_at: Option<Millis>,
    pub last_llm_error: Option<String>,
    pub last_llm_error_at: Option<Millis>,
    pub last_demand: Option<String>,
    pub last_fleet: Option<String>,
    pub poll_snapshot: Option<String>,
    pub poll_at: Option<Millis>,
}

impl AgentState {
    /// Why the last pass's demand probe failed (its stored reading is an `error`), if it did:
    /// the fleet is held meanwhile.
    pub fn last_demand_error(&self) -> Option<String> {
        self.last_demand
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .and_then(|v| v["error"].as_str().map(String::from))
    }
}

pub fn state(conn: &Connection) -> Result<AgentState> {
    Ok(conn.query_row(
        "SELECT session_id, last_run_finished_at, last_success_at, last_llm_call_at,
                last_llm_error, last_llm_error_at, last_demand, last_fleet, poll_snapshot, poll_at
         FROM agent_state WHERE id = 1",
        [],
        |r| {
            Ok(AgentState {
                session_id: r.get(0)?,
                last_run_finished_at: r.get(1)?,
                last_success_at: r.get(2)?,
                last_llm_call_at: r.get(3)?,
                last_llm_error: r.get(4)?,
                last_llm_error_at: r.get(5)?,
                last_demand: r.get(6)?,
                last_fleet: r.get(7)?,
                poll_snapshot: r.get(8)?,
                poll_at: r.get(9)?,
            })
        },
    )?)
}

pub fn record_run_finished(conn: &Connection, ok: bool, now: Millis) -> Result<()> {
    if ok {
        conn.execute(
            "UPDATE agent_state SET last_run_finished_at = ?1, last_success_at = ?1 WHERE id = 1",
            params![now],
        )?;
    } else {
        conn.execute(
            "UPDATE agent_state SET last_run_finished_at = ?1 WHERE id = 1",
            params![now],
        )?;
    }
    Ok(())
}

/// An LLM call went through (`error` None) or failed.
pub fn record_llm_outcome(conn: &Connection, error: Option<&str>, now: Millis) -> Result<()> {
    if error.is_none() {
        // The end of a failure is said as its start was (a drill: only `doctor` went green).
        let (last, at): (Option<String>, Option<Millis>) = conn.query_row(
            "SELECT last_llm_error, last_llm_error_at FROM agent_state WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if let (Some(last), Some(at)) = (last, at) {
            log::info!(
                target: crate::journal::NOTICE,
                "the model answers again (its last failure, {}: {})",
                crate::clock::rfc3339(at),
                crate::text::clip(&last, 200)
            );
        }
    }
    match error {
        None => conn.execute(
            "UPDATE agent_state SET last_llm_call_at = ?1, last_llm_error = NULL WHERE id = 1",
            params![now],
        )?,
        Some(e) => conn.execute(
            "UPDATE agent_state SET last_llm_error = ?1, last_llm_error_at = ?2 WHERE id = 1",
            params![e, now],
        )?,
    };
    Ok(())
}

pub fn set_last_observed(conn: &Connection, demand: Option<&str>, fleet: &str) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET last_demand = COALESCE(?1, last_demand), last_fleet = ?2 WHERE id = 1",
        params![demand, fleet],
    )?;
    Ok(())
}

pub fn set_poll_snapshot(conn: &Connection, snapshot: &str, now: Millis) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET poll_snapshot = ?1, poll_at = ?2 WHERE id = 1",
        params![snapshot, now],
    )?;
    Ok(())
}

/// How many passes in a row saw low demand (idle live workers, nothing queued) and a
/// backlog (work queued while every live worker is busy). The observe step advances them
/// once per run (`run::observe::advance_streaks`); the rules read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Streaks {
    pub low_demand_passes: u32,
    pub backlog_passes: u32,
}

/// The streaks and the run that last advanced them.
pub fn streaks(conn: &Connection) -> Result<(Streaks, Option<i64>)> {
    Ok(conn.query_row(
        "SELECT low_demand_passes, backlog_passes, streaks_run FROM agent_state WHERE id = 1",
        [],
        |r| {
            Ok((
                Streaks {
                    low_demand_passes: r.get(0)?,
                    backlog_passes: r.get(1)?,
                },
                r.get(2)?,
            ))
        },
    )?)
}

/// The floor's memory (`policy::floor::Memory` as JSON), None before the floor first ran.
pub fn floor_memory(conn: &Connection) -> Result<Option<String>> {
    Ok(conn.query_row(
        "SELECT floor_memory FROM agent_state WHERE id = 1",
        [],
        |r| r.get(0),
    )?)
}

pub fn set_floor_memory(conn: &Connection, json: &str) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET floor_memory = ?1 WHERE id = 1",
        params![json],
    )?;
    Ok(())
}

pub fn set_streaks(conn: &Connection, s: Streaks, run_id: i64) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET low_demand_passes = ?1, backlog_passes = ?2, streaks_run = ?3
         WHERE id = 1",
        params![s.low_demand_passes, s.backlog_passes, run_id],
    )?;
    Ok(())
}
