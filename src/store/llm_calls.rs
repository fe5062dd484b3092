//! LLM requests: one row per call, our prompt-token estimate beside what the provider
//! reported.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// How our estimate compared with the provider's count over recent calls that reported usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportedUsage {
    /// Calls counted (at most the limit asked for).
    pub calls: i64,
    /// Sums of their prompt tokens, estimated and reported (`None` when no call counted).
    pub estimated: Option<i64>,
    pub reported: Option<i64>,
    /// The largest estimate among them.
    pub max_estimated: Option<i64>,
}

/// Over the newest `limit` calls whose provider reported usage.
pub fn reported_usage(conn: &Connection, limit: i64) -> Result<ReportedUsage> {
    Ok(conn.query_row(
        "SELECT COUNT(*), SUM(prompt_tokens_est), SUM(prompt_tokens_reported), MAX(prompt_tokens_est)
         FROM (SELECT prompt_tokens_est, prompt_tokens_reported FROM llm_calls
               WHERE prompt_tokens_reported IS NOT NULL ORDER BY id DESC LIMIT ?1)",
        params![limit],
        |r| {
            Ok(ReportedUsage {
                calls: r.get(0)?,
                estimated: r.get(1)?,
                reported: r.get(2)?,
                max_estimated: r.get(3)?,
            })
        },
    )?)
}

/// Every call ever made, for the metrics counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// The estimate of the newest call (`None` before any).
    pub last_estimated: Option<i64>,
    /// The sum of every call's estimate (`None` before any).
    pub estimated: Option<i64>,
    pub calls: i64,
}

pub fn totals(conn: &Connection) -> Result<Totals> {
    Ok(conn.query_row(
        "SELECT (SELECT prompt_tokens_est FROM llm_calls ORDER BY id DESC LIMIT 1),
                SUM(prompt_tokens_est), COUNT(*) FROM llm_calls",
        [],
        |r| {
            Ok(Totals {
                last_estimated: r.get(0)?,
                estimated: r.get(1)?,
                calls: r.get(2)?,
            })
        },
    )?)
}

/// Record one model request (`error` set when it failed): our estimate of its prompt and,
/// within it, of its tools.
#[allow(clippy::too_many_arguments)]
pub fn insert(
    conn: &Connection,
    run_id: i64,
    at: Millis,
    round: u32,
    messages: usize,
    estimate: u64,
    tools_estimate: u64,
    usage: Option<(i64, i64)>,
    latency_ms: i64,
    attempts: u32,
    error: Option<&str>,
) -> Result<()> {
    conn.execute(
        "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est, tools_tokens_est,
                                prompt_tokens_reported, completion_tokens, latency_ms, attempts,
                                outcome, error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            run_id,
            at,
            round,
            messages as i64,
            estimate as i64,
            tools_estimate as i64,
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

/// One recent call that reported usage, as `doctor`'s tools_in_prompt check reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub run_id: i64,
    pub at: Millis,
    /// Our estimate of the whole prompt, and of its tools.
    pub estimated: i64,
    pub tools_estimated: i64,
    /// What the server counted.
    pub reported: i64,
    /// The model's answers in that call's run made a tool call through the API.
    pub run_called_a_tool: bool,
}

/// Of the newest `limit` calls (bounded, however many rows the table holds), those that went
/// through and reported a prompt count (0 is "not reported": some servers fill only part of
/// `usage`) and carry a tools estimate, newest first.
pub fn recent_counted(conn: &Connection, limit: i64) -> Result<Vec<Counted>> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.run_id, c.at, c.prompt_tokens_est, c.tools_tokens_est, c.prompt_tokens_reported,
                EXISTS (SELECT 1 FROM messages m WHERE m.run_id = c.run_id
                          AND m.role = 'assistant' AND m.kind = 'tool_call')
         FROM (SELECT * FROM llm_calls ORDER BY id DESC LIMIT ?1) c
         WHERE c.outcome = 'ok' AND c.prompt_tokens_reported > 0 AND c.tools_tokens_est > 0
         ORDER BY c.id DESC",
    )?;
    let rows = stmt
        .query_map(params![limit], |r| {
            Ok(Counted {
                run_id: r.get(0)?,
                at: r.get(1)?,
                estimated: r.get(2)?,
                tools_estimated: r.get(3)?,
                reported: r.get(4)?,
                run_called_a_tool: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{runs, test_store};

    fn call(conn: &Connection, run: i64, est: i64, reported: Option<i64>) {
        conn.execute(
            "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est,
                                    prompt_tokens_reported, latency_ms, attempts, outcome)
             VALUES (?1, 0, 1, 3, ?2, ?3, 10, 1, 'ok')",
            params![run, est, reported],
        )
        .unwrap();
    }

    #[test]
    fn empty_table() {
        let (_dir, s) = test_store(0);
        assert_eq!(
            reported_usage(&s.conn, 100).unwrap(),
            ReportedUsage::default()
        );
        assert_eq!(totals(&s.conn).unwrap(), Totals::default());
    }

    #[test]
    fn usage_counts_only_the_newest_calls_that_reported() {
        let (_dir, s) = test_store(0);
        let run = runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 0).unwrap();
        call(&s.conn, run, 1000, Some(900));
        call(&s.conn, run, 500, None);
        call(&s.conn, run, 2000, Some(1700));
        call(&s.conn, run, 300, None);
        assert_eq!(
            reported_usage(&s.conn, 100).unwrap(),
            ReportedUsage {
                calls: 2,
                estimated: Some(3000),
                reported: Some(2600),
                max_estimated: Some(2000),
            }
        );
        assert_eq!(reported_usage(&s.conn, 1).unwrap().estimated, Some(2000));
        assert_eq!(
            totals(&s.conn).unwrap(),
            Totals {
                last_estimated: Some(300),
                estimated: Some(3800),
                calls: 4,
            }
        );
    }
}
