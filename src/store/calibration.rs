//! The per-model calibration of our prompt-token estimate (table `token_calibration`, one row
//! per model: the ratio the budget is divided by, how many samples made it, when), and the
//! recent reported/estimate figures of `llm_calls` it is checked against. The arithmetic that
//! makes a ratio from samples is `prompt::calibration`'s; this file only reads and writes.

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::Millis;

/// One model's row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// At least 1.0 (the table's CHECK).
    pub ratio: f64,
    pub samples: i64,
    pub updated_at: Millis,
}

/// The model's calibration, `None` before its first sample.
pub fn get(conn: &Connection, model: &str) -> Result<Option<Calibration>> {
    Ok(conn
        .query_row(
            "SELECT ratio, samples, updated_at FROM token_calibration WHERE model = ?1",
            params![model],
            |r| {
                Ok(Calibration {
                    ratio: r.get(0)?,
                    samples: r.get(1)?,
                    updated_at: r.get(2)?,
                })
            },
        )
        .optional()?)
}

/// The model's ratio alone (`None` before its first sample).
pub fn ratio(conn: &Connection, model: &str) -> Result<Option<f64>> {
    Ok(get(conn, model)?.map(|c| c.ratio))
}

/// Store the model's new ratio (raised to 1.0 if below), one more sample.
pub fn record(conn: &Connection, model: &str, ratio: f64, at: Millis) -> Result<()> {
    let ratio = if ratio.is_finite() {
        ratio.max(1.0)
    } else {
        1.0
    };
    conn.execute(
        "INSERT INTO token_calibration (model, ratio, samples, updated_at) VALUES (?1, ?2, 1, ?3)
         ON CONFLICT (model) DO UPDATE SET ratio = excluded.ratio, samples = samples + 1,
                                           updated_at = excluded.updated_at",
        params![model, ratio, at],
    )?;
    Ok(())
}

/// No provider count this far above our estimate is a count of the prompt (a cumulative
/// count, a cache's, a broken server's `10^12`): such a count is no sample, and the readers
/// of `llm_calls` leave it out. Real tokenizers stay well below it (Qwen and SmolLM count
/// 10-19 % above o200k on our prompts); one count of 10^12 once held every prompt to a third
/// of its budget for 50 calls, the conversation dropped.
pub const MAX_RATIO: f64 = 3.0;

/// The largest reported/estimate ratio among the newest `limit` calls that reported usage
/// (any model: `llm_calls` does not name it), and how many calls that was; of those, how
/// many reported a count over [`MAX_RATIO`] times the estimate (`impossible`, left out of the
/// maximum).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Measured {
    pub calls: i64,
    pub max_ratio: Option<f64>,
    pub impossible: i64,
}

pub fn measured(conn: &Connection, limit: i64) -> Result<Measured> {
    Ok(conn.query_row(
        "SELECT COUNT(*) FILTER (WHERE ratio <= ?2), MAX(ratio) FILTER (WHERE ratio <= ?2),
                COUNT(*) FILTER (WHERE ratio > ?2)
         FROM (SELECT CAST(prompt_tokens_reported AS REAL) / prompt_tokens_est AS ratio
               FROM llm_calls
               WHERE prompt_tokens_reported IS NOT NULL AND prompt_tokens_est > 0
               ORDER BY id DESC LIMIT ?1)",
        params![limit, MAX_RATIO],
        |r| {
            Ok(Measured {
                calls: r.get(0)?,
                max_ratio: r.get(1)?,
                impossible: r.get(2)?,
            })
        },
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{llm_calls, runs, test_store};

    #[test]
    fn a_model_is_calibrated_on_its_own_row() {
        let (_dir, s) = test_store(0);
        assert_eq!(get(&s.conn, "qwen2.5-coder").unwrap(), None);
        record(&s.conn, "qwen2.5-coder", 1.19, 1_000).unwrap();
        record(&s.conn, "smollm2", 1.25, 1_500).unwrap();
        record(&s.conn, "qwen2.5-coder", 1.2, 2_000).unwrap();
        assert_eq!(
            get(&s.conn, "qwen2.5-coder").unwrap(),
            Some(Calibration {
                ratio: 1.2,
                samples: 2,
                updated_at: 2_000
            })
        );
        assert_eq!(ratio(&s.conn, "smollm2").unwrap(), Some(1.25));
        assert_eq!(ratio(&s.conn, "gpt-4.1-mini").unwrap(), None);
        // Below 1.0 (or nonsense) is stored as 1.0: the table refuses less.
        record(&s.conn, "gpt-4.1-mini", 0.9, 3_000).unwrap();
        record(&s.conn, "x", f64::NAN, 3_000).unwrap();
        assert_eq!(ratio(&s.conn, "gpt-4.1-mini").unwrap(), Some(1.0));
        assert_eq!(ratio(&s.conn, "x").unwrap(), Some(1.0));
        // The CHECK holds for anyone else writing.
        assert!(s
            .conn
            .execute(
                "INSERT INTO token_calibration (model, ratio, updated_at) VALUES ('y', 0.5, 0)",
                [],
            )
            .is_err());
    }

    #[test]
    fn the_measured_maximum_is_over_the_newest_reporting_calls() {
        let (_dir, s) = test_store(0);
        assert_eq!(measured(&s.conn, 50).unwrap(), Measured::default());
        let run = runs::create(&s.conn, 1, 1, 1, runs::StartedBy::Tick, 0).unwrap();
        let call = |est: u64, reported: Option<i64>| {
            llm_calls::insert(
                &s.conn,
                &llm_calls::Call {
                    run_id: run,
                    round: 1,
                    messages: 3,
                    estimate: est,
                    tools_estimate: 700,
                    usage: reported.map(|r| (r, 10)),
                    latency_ms: 5,
                    attempts: 1,
                    ..Default::default()
                },
            )
            .unwrap()
        };
        call(1000, Some(1300));
        call(1000, None);
        call(2683, Some(3131));
        call(1000, Some(900));
        let m = measured(&s.conn, 50).unwrap();
        assert_eq!(m.calls, 3);
        assert_eq!(m.max_ratio, Some(1.3));
        // Only the newest two that reported: 3131/2683 is the larger.
        let m = measured(&s.conn, 2).unwrap();
        assert_eq!(m.calls, 2);
        assert!((m.max_ratio.unwrap() - 3131.0 / 2683.0).abs() < 1e-12);
        // A count no tokenizer makes is counted apart, never the maximum.
        call(1000, Some(1_000_000_000_000));
        let m = measured(&s.conn, 50).unwrap();
        assert_eq!((m.calls, m.max_ratio, m.impossible), (3, Some(1.3), 1));
    }
}
