//! `history`: the conversation as stored: observations, operator messages, the model's
//! answers and tool calls with their results; with `--run N`, that run's ledger rows too.
//!
//! `--run N` of a run that does not exist is an error naming the highest run id, exit 1 as for
//! `wakes cancel` of an unknown id: the flag is well formed and names what the database does
//! not hold, which is the database's answer (the same command is right once run N exists), not
//! a usage error (exit 2, for what is wrong whatever the database holds).

use anyhow::{bail, Result};

use crate::cli::HistoryArgs;
use crate::clock::rfc3339;
use crate::cmd::App;
use crate::store::{messages, runs, session};

pub fn run(app: &App, args: &HistoryArgs) -> Result<()> {
    let (config, _d, store) = super::open_for_report(app)?;
    let mut empty = "no messages yet".to_string();
    let rows = match args.run {
        Some(run) => {
            let Some(r) = runs::get(&store.conn, run)? else {
                match runs::recent(&store.conn, 1)?.first() {
                    Some(last) => bail!(
                        "run {run} does not exist: the highest run id is {} (`fleetagent inspect` lists the recent runs)",
                        last.id
                    ),
                    None => bail!("run {run} does not exist: no run has been recorded yet"),
                }
            };
            let days = config.config.run.retention_days;
            let pruned = if days > 0 && app.now() - r.started_at > days as i64 * 86_400_000 {
                format!(" (or they were pruned: run.retention_days = {days})")
            } else {
                String::new()
            };
            empty = format!(
                "run {run} ({}{}) stored no messages{pruned}",
                r.status.as_str(),
                r.verdict
                    .map(|v| format!(", {}", v.as_str()))
                    .unwrap_or_default()
            );
            messages::of_run(&store.conn, run)?
        }
        None => {
            let session = if args.all {
                None
            } else {
                Some(session::current(&store.conn)?)
            };
            messages::tail(&store.conn, session, args.limit)?
        }
    };
    if args.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|m| {
                serde_json::json!({
                    "id": m.id,
                    "session_id": m.session_id,
                    "run_id": m.run_id,
                    "role": m.role,
                    "kind": m.kind,
                    "content": m.content,
                    "tokens": m.tokens,
                    "tool_calls": m.tool_calls.as_deref().and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok()),
                    "tool_call_id": m.tool_call_id,
                    "tool_name": m.tool_name,
                    "created_at": rfc3339(m.created_at),
                })
            })
            .collect();
        crate::outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if rows.is_empty() {
        crate::outln!("{empty}");
    }
    let mut last_run = None;
    for m in &rows {
        if m.run_id != last_run {
            crate::outln!(
                "--- run {} (session {}) {}",
                m.run_id
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
                m.session_id,
                rfc3339(m.created_at)
            );
            last_run = m.run_id;
        }
        let who = match (m.role.as_str(), m.kind.as_str()) {
            ("user", "operator") => "operator".to_string(),
            ("user", kind) => kind.to_string(),
            ("assistant", _) => "model".to_string(),
            ("tool", _) => format!("result {}", m.tool_name.as_deref().unwrap_or("?")),
            (role, _) => role.to_string(),
        };
        if !m.content.is_empty() {
            for (i, line) in m.content.lines().enumerate() {
                let label = if i == 0 { who.as_str() } else { "" };
                crate::outln!("{label:>12} | {line}");
            }
        }
        if let Some(calls) = &m.tool_calls {
            if let Ok(serde_json::Value::Array(items)) = serde_json::from_str(calls) {
                for c in items {
                    // `sent`: what the model sent where the conversation shows `{}`.
                    // One line: a model's tool name or arguments may hold newlines.
                    let name = crate::text::clip(c["name"].as_str().unwrap_or("?"), 80);
                    let call = match c["sent"].as_str() {
                        Some(sent) => format!("{name}({sent}) [shown to the model as {{}}]"),
                        None => format!("{name}({})", c["arguments"].as_str().unwrap_or("")),
                    };
                    crate::outln!("{:>12} | {}", "calls", crate::text::clip(&call, 2_000));
                }
            }
        }
    }
    if let Some(run) = args.run {
        ledger(&store.conn, run)?;
    }
    Ok(())
}

/// The run's actions as the ledger holds them, one line each as the journal said it: a
/// refusal with its guardrail and figures, a failure with vast.ai's error (the notes keep
/// the tools' answers cut short, and `inspect` only the newest 20 actions: a walkthrough).
fn ledger(conn: &rusqlite::Connection, run: i64) -> Result<()> {
    let actions = crate::store::actions::of_run(conn, run)?;
    if actions.is_empty() {
        return Ok(());
    }
    crate::outln!("--- the ledger of run {run} ({} action(s))", actions.len());
    for a in &actions {
        let line = crate::policy::action_lines::quoted_line(a);
        crate::outln!("{:>12} | {} {}", a.outcome, rfc3339(a.created_at), line);
        // Whole, where the line cuts it: a guardrail's answer, vast.ai's error.
        if let Some(detail) = a.detail.as_deref().filter(|_| a.outcome != "ok") {
            crate::outln!("{:>12} | {}", "", crate::text::clip(detail, 2_000));
        }
    }
    Ok(())
}
