//! LLM requests: one row per call, our prompt-token estimate beside what the provider
//! reported (and how much of it came from the server's prompt cache), and where the
//! request's history started.

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

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
    /// Of those, the calls whose server said how much came from its prompt cache, the sum
    /// of their reported prompt tokens and of the cached part (`None` when none said).
    pub with_cache: i64,
    pub reported_with_cache: Option<i64>,
    pub cached: Option<i64>,
}

/// Over the newest `limit` calls whose provider reported a possible usage (a prompt count
/// over `calibration::MAX_RATIO` times our estimate is none: `calibration::measured` counts
/// those).
pub fn reported_usage(conn: &Connection, limit: i64) -> Result<ReportedUsage> {
    Ok(conn.query_row(
        "SELECT COUNT(*), SUM(prompt_tokens_est), SUM(prompt_tokens_reported), MAX(prompt_tokens_est),
                COUNT(prompt_tokens_cached),
                SUM(prompt_tokens_reported) FILTER (WHERE prompt_tokens_cached IS NOT NULL),
                SUM(prompt_tokens_cached)
         FROM (SELECT prompt_tokens_est, prompt_tokens_reported, prompt_tokens_cached FROM llm_calls
               WHERE prompt_tokens_reported IS NOT NULL
                 AND CAST(prompt_tokens_reported AS REAL) <= prompt_tokens_est * ?2
               ORDER BY id DESC LIMIT ?1)",
        params![limit, super::calibration::MAX_RATIO],
        |r| {
            Ok(ReportedUsage {
                calls: r.get(0)?,
                estimated: r.get(1)?,
                reported: r.get(2)?,
                max_estimated: r.get(3)?,
                with_cache: r.get(4)?,
                reported_with_cache: r.get(5)?,
                cached: r.get(6)?,
            })
        },
    )?)
}

/// The estimate of the newest call (`None` before any).
pub fn last_estimated(conn: &Connection) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT prompt_tokens_est FROM llm_calls ORDER BY id DESC LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?)
}

/// One model request as recorded.
#[derive(Debug, Clone, Default)]
pub struct Call<'a> {
    pub run_id: i64,
    pub at: Millis,
    pub round: u32,
    pub messages: usize,
    pub estimate: u64,
    /// Of `estimate`, our estimate of the tools (`doctor`'s tools_in_prompt check).
    pub tools_estimate: u64,
    /// What the server reported: prompt and completion tokens (`None`: no usage).
    pub usage: Option<(i64, i64)>,
    /// Of the reported prompt tokens, those the server took from its prompt cache (`None`:
    /// it said nothing about a cache).
    pub cached: Option<i64>,
    /// The shape of the request's history (`prompt::context::Shape`): the earliest earlier
    /// run it held, and the newest shown with tool outputs as placeholders. The next request
    /// keeps it while it fits.
    pub history_from_run: Option<i64>,
    pub history_compacted_through_run: Option<i64>,
    pub latency_ms: i64,
    pub attempts: u32,
    /// Set when the request failed.
    pub error: Option<&'a str>,
    /// Why the answer ran nothing though the request succeeded (sql/0017): `cut`, `as_text`
    /// or `empty`.
    pub unusable: Option<&'static str>,
}

/// How many of each kind, in the order first seen.
pub type KindCounts = Vec<(String, i64)>;

/// The model's last `n` answered requests when each of them was unusable (sql/0017): when
/// the first of them was sent, and how many of each kind (`cut`, `as_text`, `empty`). None
/// while fewer than `n` answered or one of them was usable.
pub fn all_unusable(conn: &Connection, n: i64) -> Result<Option<(Millis, KindCounts)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT at, unusable FROM llm_calls WHERE outcome = 'ok' ORDER BY id DESC LIMIT ?1",
    )?;
    let rows = stmt
        .query_map([n], |r| {
            Ok((r.get::<_, Millis>(0)?, r.get::<_, Option<String>>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if (rows.len() as i64) < n || rows.iter().any(|(_, u)| u.is_none()) {
        return Ok(None);
    }
    let first = rows.iter().map(|(at, _)| *at).min().unwrap_or_default();
    let mut kinds: Vec<(String, i64)> = Vec::new();
    for (_, kind) in rows.into_iter() {
        let kind = kind.unwrap_or_default();
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, c)) => *c += 1,
            None => kinds.push((kind, 1)),
        }
    }
    Ok(Some((first, kinds)))
}

/// Since when the model's requests have failed without a good answer between (the first
/// failed request after the last good one), and how many failed since; None while the last
/// request answered.
pub fn failing_since(conn: &Connection) -> Result<Option<(Millis, i64)>> {
    let (first, n): (Option<Millis>, i64) = conn.query_row(
        "SELECT min(at), count(*) FROM llm_calls
          WHERE outcome = 'error'
            AND at > coalesce((SELECT max(at) FROM llm_calls WHERE outcome = 'ok'), -1)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(first.map(|f| (f, n)))
}

/// Record one model request.
pub fn insert(conn: &Connection, c: &Call<'_>) -> Result<()> {
    conn.execute(
        "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est, prompt_tokens_reported,
                                completion_tokens, latency_ms, attempts, outcome, error,
                                prompt_tokens_cached, history_from_run, history_compacted_through_run,
                                tools_tokens_est, unusable)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        params![
            c.run_id,
            c.at,
            c.round,
            c.messages as i64,
            c.estimate as i64,
            c.usage.map(|u| u.0),
            c.usage.map(|u| u.1),
            c.latency_ms,
            c.attempts,
            if c.error.is_some() { "error" } else { "ok" },
            c.error,
            c.cached,
            c.history_from_run,
            c.history_compacted_through_run,
            c.tools_estimate as i64,
            c.unusable,
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

/// The shape of the newest request's history: its earliest run and the newest run shown as
/// placeholders (`(None, None)` before any request). Runs of another session are older than
/// every run of the current one, so an old session's shape keeps nothing out.
pub fn last_history(conn: &Connection) -> Result<(Option<i64>, Option<i64>)> {
    Ok(conn
        .query_row(
            "SELECT history_from_run, history_compacted_through_run FROM llm_calls
             ORDER BY id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or_default())
}

/// How much of the prompts the servers took from their prompt caches, over every call that
/// said (`sim`'s report): all of them, and all but the first (the first finds nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheFigures {
    /// Calls that reported a cached figure, and the sums of their prompt and cached tokens.
    pub calls: i64,
    pub prompt: i64,
    pub cached: i64,
    /// The same without the first of them.
    pub prompt_after_first: i64,
    pub cached_after_first: i64,
}

impl CacheFigures {
    /// cached / prompt over every call that said, rounded to 4 places; `None` without one.
    pub fn share(&self) -> Option<f64> {
        share(self.cached, self.prompt)
    }
    /// The same without the first call.
    pub fn share_after_first(&self) -> Option<f64> {
        share(self.cached_after_first, self.prompt_after_first)
    }
}

fn share(cached: i64, prompt: i64) -> Option<f64> {
    (prompt > 0).then(|| (cached.min(prompt) as f64 / prompt as f64 * 1e4).round() / 1e4)
}

pub fn cache_figures(conn: &Connection) -> Result<CacheFigures> {
    Ok(conn.query_row(
        "WITH c AS (SELECT id, prompt_tokens_reported AS p, prompt_tokens_cached AS k FROM llm_calls
                    WHERE prompt_tokens_cached IS NOT NULL AND prompt_tokens_reported IS NOT NULL)
         SELECT COUNT(*), COALESCE(SUM(p), 0), COALESCE(SUM(k), 0),
                COALESCE(SUM(p) FILTER (WHERE id > (SELECT MIN(id) FROM c)), 0),
                COALESCE(SUM(k) FILTER (WHERE id > (SELECT MIN(id) FROM c)), 0)
         FROM c",
        [],
        |r| {
            Ok(CacheFigures {
                calls: r.get(0)?,
                prompt: r.get(1)?,
                cached: r.get(2)?,
                prompt_after_first: r.get(3)?,
                cached_after_first: r.get(4)?,
            })
        },
    )?)
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
        assert_eq!(last_estimated(&s.conn).unwrap(), None);
        let tally = crate::store::tally::counts(&s.conn, &crate::store::tally::LLM_CALLS);
        assert_eq!(tally.unwrap().values().sum::<i64>(), 0);
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
                with_cache: 0,
                reported_with_cache: None,
                cached: None,
            }
        );
        assert_eq!(reported_usage(&s.conn, 1).unwrap().estimated, Some(2000));
        assert_eq!(last_estimated(&s.conn).unwrap(), Some(300));
        let tally = crate::store::tally::counts(&s.conn, &crate::store::tally::LLM_CALLS);
        let tally: Vec<(String, i64)> = tally.unwrap().into_iter().collect();
        assert_eq!(tally, vec![("calls".into(), 4), ("estimated".into(), 3800)]);
    }

    #[test]
    fn the_cache_share_counts_only_calls_whose_server_said() {
        let (_dir, s) = test_store(0);
        let run = runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 0).unwrap();
        assert_eq!(cache_figures(&s.conn).unwrap(), CacheFigures::default());
        assert_eq!(CacheFigures::default().share(), None);
        assert_eq!(last_history(&s.conn).unwrap(), (None, None));
        let mut c = Call {
            run_id: run,
            estimate: 1000,
            usage: Some((1000, 10)),
            cached: Some(0),
            history_from_run: Some(7),
            history_compacted_through_run: Some(9),
            ..Call::default()
        };
        insert(&s.conn, &c).unwrap();
        assert_eq!(last_history(&s.conn).unwrap(), (Some(7), Some(9)));
        c.cached = Some(900);
        c.history_from_run = None;
        c.history_compacted_through_run = None;
        insert(&s.conn, &c).unwrap();
        assert_eq!(last_history(&s.conn).unwrap(), (None, None));
        // A server that says nothing about its cache, and a failed call: left out.
        c.cached = None;
        insert(&s.conn, &c).unwrap();
        insert(
            &s.conn,
            &Call {
                run_id: run,
                usage: None,
                error: Some("HTTP 500"),
                ..Call::default()
            },
        )
        .unwrap();
        c.usage = Some((2000, 10));
        c.cached = Some(1800);
        insert(&s.conn, &c).unwrap();
        let f = cache_figures(&s.conn).unwrap();
        assert_eq!(
            f,
            CacheFigures {
                calls: 3,
                prompt: 4000,
                cached: 2700,
                prompt_after_first: 3000,
                cached_after_first: 2700,
            }
        );
        assert_eq!((f.share(), f.share_after_first()), (Some(0.675), Some(0.9)));
        let u = reported_usage(&s.conn, 100).unwrap();
        assert_eq!(
            (u.calls, u.with_cache, u.reported_with_cache, u.cached),
            (4, 3, Some(4000), Some(2700))
        );
    }
}
