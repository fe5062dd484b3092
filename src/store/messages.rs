//! The conversation: every message the model saw or said, with its token count computed
//! once at insert.

use anyhow::Result;
use rusqlite::{params, Connection};
use serde::Serialize;

use crate::clock::Millis;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: i64,
    pub session_id: i64,
    pub run_id: Option<i64>,
    pub role: String,
    pub kind: String,
    pub content: String,
    pub tokens: i64,
    /// JSON array of `{id, name, arguments}` on assistant messages that call tools.
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    pub gist: Option<String>,
    pub gist_tokens: Option<i64>,
    pub event_id: Option<i64>,
    pub created_at: Millis,
}

/// A message to insert (the id and time are the store's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewMessage<'a> {
    pub session_id: i64,
    pub run_id: Option<i64>,
    pub role: &'a str,
    pub kind: &'a str,
    pub content: &'a str,
    pub tokens: i64,
    pub tool_calls: Option<&'a str>,
    pub tool_call_id: Option<&'a str>,
    pub tool_name: Option<&'a str>,
    pub gist: Option<&'a str>,
    pub gist_tokens: Option<i64>,
    pub event_id: Option<i64>,
}

pub fn insert(conn: &Connection, m: &NewMessage<'_>, now: Millis) -> Result<i64> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO messages (session_id, run_id, role, kind, content, tokens, tool_calls,
                               tool_call_id, tool_name, gist, gist_tokens, event_id, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    stmt.execute(params![
        m.session_id,
        m.run_id,
        m.role,
        m.kind,
        m.content,
        m.tokens,
        m.tool_calls,
        m.tool_call_id,
        m.tool_name,
        m.gist,
        m.gist_tokens,
        m.event_id,
        now
    ])?;
    Ok(conn.last_insert_rowid())
}

pub const COLS: &str = "id, session_id, run_id, role, kind, content, tokens, tool_calls,
    tool_call_id, tool_name, gist, gist_tokens, event_id, created_at";

pub fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        id: r.get(0)?,
        session_id: r.get(1)?,
        run_id: r.get(2)?,
        role: r.get(3)?,
        kind: r.get(4)?,
        content: r.get(5)?,
        tokens: r.get(6)?,
        tool_calls: r.get(7)?,
        tool_call_id: r.get(8)?,
        tool_name: r.get(9)?,
        gist: r.get(10)?,
        gist_tokens: r.get(11)?,
        event_id: r.get(12)?,
        created_at: r.get(13)?,
    })
}

/// The last `limit` messages (of one session, or of all), oldest first.
pub fn tail(conn: &Connection, session: Option<i64>, limit: i64) -> Result<Vec<Message>> {
    let mut rows = match session {
        Some(s) => {
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLS} FROM messages WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2"
            ))?;
            let v = stmt
                .query_map(params![s, limit], row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            v
        }
        None => {
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLS} FROM messages ORDER BY id DESC LIMIT ?1"
            ))?;
            let v = stmt
                .query_map(params![limit], row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            v
        }
    };
    rows.reverse();
    Ok(rows)
}

/// The messages of one run, in order.
pub fn of_run(conn: &Connection, run_id: i64) -> Result<Vec<Message>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM messages WHERE run_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt
        .query_map(params![run_id], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}
