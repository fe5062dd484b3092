//! The conversation history a prompt is built from, read newest first and only as far as the
//! assembler asks (see context.rs).

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::llm::{Role, ToolCall};

use super::messages::{self, Message};

/// A message as stored, with its token count.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub id: i64,
    pub role: Role,
    pub content: String,
    pub tokens: u64,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    /// For tool results: the placeholder text used when compacted, and its tokens.
    pub compacted: Option<(String, u64)>,
    /// An operator message (kept longest).
    pub operator: bool,
}

/// One earlier run's messages as the source gives them: all of an action run, or only the
/// operator messages, the model's answers and the notes about them of any other run.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRun {
    pub run_id: i64,
    pub messages: Vec<Stored>,
}

pub trait HistorySource {
    /// The next older run, or None at the end. Errors are database errors.
    fn next_older(&mut self) -> anyhow::Result<Option<HistoryRun>>;
    /// Operator messages no later answer followed, newest first, at most `limit`.
    fn unanswered_operator(&mut self, limit: usize) -> anyhow::Result<Vec<Stored>>;
}

/// Runs of one session before a given run, newest first.
pub struct DbHistory<'c> {
    conn: &'c Connection,
    session_id: i64,
    before_run: i64,
    cursor: i64,
}

impl<'c> DbHistory<'c> {
    pub fn new(conn: &'c Connection, session_id: i64, before_run: i64) -> Self {
        DbHistory {
            conn,
            session_id,
            before_run,
            cursor: before_run,
        }
    }
}

pub fn role_of(text: &str) -> Role {
    match text {
        "system" => Role::System,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        _ => Role::User,
    }
}

/// A stored row as the assembler sees it.
pub fn to_stored(m: &Message) -> Stored {
    let tool_calls: Vec<ToolCall> = m
        .tool_calls
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    let compacted = match (&m.gist, m.gist_tokens) {
        (Some(g), Some(t)) => Some((g.clone(), t.max(0) as u64)),
        _ => None,
    };
    Stored {
        id: m.id,
        role: role_of(&m.role),
        content: m.content.clone(),
        tokens: m.tokens.max(0) as u64,
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        tool_name: m.tool_name.clone(),
        compacted,
        operator: m.kind == "operator",
    }
}

impl HistorySource for DbHistory<'_> {
    fn next_older(&mut self) -> Result<Option<HistoryRun>> {
        let row: Option<(i64, Option<String>)> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, verdict FROM runs WHERE session_id = ?1 AND id < ?2 AND in_prompt = 1
                 ORDER BY id DESC LIMIT 1",
            )?;
            let mut rows = stmt.query_map(params![self.session_id, self.cursor], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            rows.next().transpose()?
        };
        let Some((run_id, verdict)) = row else {
            return Ok(None);
        };
        self.cursor = run_id;
        let all = messages::of_run(self.conn, run_id)?;
        let whole = verdict.as_deref() == Some("action") || verdict.is_none();
        let messages = all
            .iter()
            .filter(|m| whole || matches!(m.kind.as_str(), "operator" | "answer" | "note"))
            .map(to_stored)
            .collect();
        Ok(Some(HistoryRun { run_id, messages }))
    }

    fn unanswered_operator(&mut self, limit: usize) -> Result<Vec<Stored>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM messages m WHERE m.session_id = ?1 AND m.kind = 'operator' AND m.run_id < ?2
               AND NOT EXISTS (SELECT 1 FROM messages a WHERE a.session_id = ?1 AND a.kind = 'answer'
                               AND a.id > m.id)
             ORDER BY m.id DESC LIMIT ?3",
            messages::COLS
                .split(',')
                .map(|c| format!("m.{}", c.trim()))
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
        let rows = stmt
            .query_map(
                params![self.session_id, self.before_run, limit as i64],
                messages::row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows.iter().map(to_stored).collect())
    }
}
