//! The `llm_calls` table: one row per request to the model, with the estimate beside the
//! provider's reported usage.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// Record one model request (`error` set when it failed).
#[allow(clippy::too_many_arguments)]
pub fn insert(
    conn: &Connection,
    run_id: i64,
    at: Millis,
    round: u32,
    messages: usize,
    estimate: u64,
    usage: Option<(i64, i64)>,
    latency_ms: i64,
    attempts: u32,
    error: Option<&str>,
) -> Result<()> {
    conn.execute(
        "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est, prompt_tokens_reported,
                                completion_tokens, latency_ms, attempts, outcome, error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            run_id,
            at,
            round,
            messages as i64,
            estimate as i64,
            usage.map(|u| u.0),
            usage.map(|u| u.1),
            latency_ms,
            attempts,
            if error.is_some() { "error" } else { "ok" },
            error
        ],
    )?;
    Ok(())
}
