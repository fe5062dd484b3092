//! The conversation: every message the model saw or said, with its token count computed
//! once at insert.

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};
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
    /// A tool result's error code (`ToolResult::error_code`).
    pub error_code: Option<&'a str>,
}

pub fn insert(conn: &Connection, m: &NewMessage<'_>, now: Millis) -> Result<i64> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO messages (session_id, run_id, role, kind, content, tokens, tool_calls,
                               tool_call_id, tool_name, gist, gist_tokens, event_id, created_at,
                               error_code)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
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
        now,
        m.error_code
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

/// The text of the model's newest `limit` turns in a session (empty for a turn that only
/// called tools), and whether the turn called tools, newest first: a bounded walk back along
/// the session's index.
pub fn model_texts(conn: &Connection, session_id: i64, limit: i64) -> Result<Vec<(String, bool)>> {
    // The model's messages are its answers and tool calls: each read newest first through
    // `messages_kind`, so a session of rules notes alone (an install without a model) reads
    // nothing (by role, the whole session was walked: 47 ms at a year of passes).
    let mut stmt = conn.prepare_cached(
        "SELECT content, is_call FROM (
            SELECT * FROM (SELECT id, content, 1 AS is_call FROM messages
                            WHERE session_id = ?1 AND kind = 'tool_call' AND role = 'assistant'
                            ORDER BY id DESC LIMIT ?2)
            UNION ALL
            SELECT * FROM (SELECT id, content, 0 FROM messages
                            WHERE session_id = ?1 AND kind = 'answer' AND role = 'assistant'
                            ORDER BY id DESC LIMIT ?2))
         ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![session_id, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
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

/// The newest message of any of these kinds in the current session, with its run.
pub fn latest_of_kinds(conn: &Connection, kinds: &[&str]) -> Result<Option<Latest>> {
    let mut best: Option<(i64, Latest)> = None;
    for kind in kinds {
        let row: Option<(i64, Latest)> = conn
            .query_row(
                "SELECT id, run_id, content FROM messages WHERE session_id = (SELECT session_id FROM agent_state)
                   AND kind = ?1 AND content <> '' ORDER BY id DESC LIMIT 1",
                [kind],
                |r| {
                    Ok((
                        r.get(0)?,
                        Latest {
                            run_id: r.get(1)?,
                            content: r.get(2)?,
                        },
                    ))
                },
            )
            .optional()?;
        if let Some(r) = row {
            if best.as_ref().is_none_or(|b| r.0 > b.0) {
                best = Some(r);
            }
        }
    }
    Ok(best.map(|b| b.1))
}

/// A message found by [`latest_of_kinds`], with the run that wrote it (None: written outside
/// a run).
#[derive(Debug, Clone, PartialEq)]
pub struct Latest {
    pub run_id: Option<i64>,
    pub content: String,
}

/// An operator message and the model's first answer after it, if any came.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorAnswer {
    pub run_id: Option<i64>,
    pub created_at: Millis,
    pub message: String,
    pub answer: Option<String>,
}

/// The note stored after an answer with no text and no tool call (the model reads it in later
/// prompts; `operator_answers` shows it as the answer it was).
pub const EMPTY_ANSWER_NOTE: &str =
    "Your answer was empty: no text and no tool call, so nothing ran. Call tools to act, or say in one line why nothing is needed.";

/// The newest `limit` operator messages of a session, newest first, with their answers (an
/// empty answer's note reads `(the model answered nothing)`).
pub fn operator_answers(
    conn: &Connection,
    session_id: i64,
    limit: i64,
) -> Result<Vec<OperatorAnswer>> {
    let mut stmt = conn.prepare(
        "SELECT m.run_id, m.created_at, m.content,
                (SELECT CASE a.kind WHEN 'answer' THEN a.content ELSE '(the model answered nothing)' END
                   FROM messages a WHERE a.session_id = m.session_id
                   AND (a.kind = 'answer' OR (a.kind = 'note' AND a.content = ?3))
                   AND a.id > m.id ORDER BY a.id LIMIT 1)
         FROM messages m WHERE m.session_id = ?1 AND m.kind = 'operator' ORDER BY m.id DESC LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![session_id, limit, EMPTY_ANSWER_NOTE], |r| {
            Ok(OperatorAnswer {
                run_id: r.get(0)?,
                created_at: r.get(1)?,
                message: r.get(2)?,
                answer: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{session, test_store};

    /// sql/0007 gives the tool results written before it their error code, which the report
    /// counts the model's invalid calls by.
    #[test]
    fn migration_7_gives_older_tool_results_their_error_code() {
        let conn = Connection::open_in_memory().unwrap();
        for sql in &crate::store::MIGRATIONS[..6] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch("INSERT INTO sessions (id, started_at, reason) VALUES (1, 0, 'x')")
            .unwrap();
        let rows = [
            ("tool", r#"{"error":"invalid_args","message":"x"}"#),
            ("tool", r#"{"error":"rate_limited"}"#),
            ("tool", r#"{"ok":true}"#),
            ("tool", "not json"),
            ("user", r#"{"error":"invalid_args"}"#),
        ];
        for (role, content) in rows {
            conn.execute(
                "INSERT INTO messages (session_id, role, kind, content, tokens, created_at)
                 VALUES (1, ?1, 'tool_result', ?2, 1, 0)",
                params![role, content],
            )
            .unwrap();
        }
        conn.execute_batch(crate::store::MIGRATIONS[6]).unwrap();
        let mut st = conn
            .prepare("SELECT error_code FROM messages ORDER BY id")
            .unwrap();
        let codes: Vec<Option<String>> = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            codes,
            vec![
                Some("invalid_args".into()),
                Some("rate_limited".into()),
                None,
                None,
                None
            ]
        );
        assert_eq!(
            crate::store::report::model_messages(&conn)
                .unwrap()
                .invalid_calls,
            1
        );
    }

    fn say(conn: &Connection, session_id: i64, kind: &str, content: &str, now: Millis) -> i64 {
        let role = if kind == "operator" {
            "user"
        } else {
            "assistant"
        };
        insert(
            conn,
            &NewMessage {
                session_id,
                role,
                kind,
                content,
                ..Default::default()
            },
            now,
        )
        .unwrap()
    }

    #[test]
    fn latest_of_kinds_takes_the_newest_of_the_current_session() {
        let (_dir, s) = test_store(0);
        assert_eq!(
            latest_of_kinds(&s.conn, &["answer", "rules"]).unwrap(),
            None
        );
        say(&s.conn, 1, "answer", "first", 1);
        say(&s.conn, 1, "rules", "second", 2);
        say(&s.conn, 1, "observation", "seen", 3);
        assert_eq!(
            latest_of_kinds(&s.conn, &["answer", "rules"])
                .unwrap()
                .map(|l| (l.run_id, l.content)),
            Some((None, "second".into()))
        );
        assert_eq!(
            latest_of_kinds(&s.conn, &["observation"])
                .unwrap()
                .map(|l| l.content),
            Some("seen".into())
        );
        // An empty answer (cut, or calls only) says nothing: the floor's note after it does.
        say(&s.conn, 1, "answer", "", 4);
        say(&s.conn, 1, "floor", "Floor: launched 3 (WORKERS DEAD)", 5);
        say(&s.conn, 1, "answer", "", 6);
        assert_eq!(
            latest_of_kinds(&s.conn, &["answer", "rules", "floor"])
                .unwrap()
                .map(|l| l.content),
            Some("Floor: launched 3 (WORKERS DEAD)".into())
        );
        // A new session hides the old one's messages.
        session::start_new(&s.conn, "test", 4).unwrap();
        assert_eq!(
            latest_of_kinds(&s.conn, &["answer", "rules"]).unwrap(),
            None
        );
    }

    #[test]
    fn operator_answers_pair_each_message_with_the_next_answer() {
        let (_dir, s) = test_store(0);
        say(&s.conn, 1, "operator", "scale down", 10);
        say(&s.conn, 1, "answer", "stopping two", 11);
        say(&s.conn, 1, "answer", "done", 12);
        say(&s.conn, 1, "operator", "why?", 13);
        let got = operator_answers(&s.conn, 1, 5).unwrap();
        assert_eq!(
            got,
            vec![
                OperatorAnswer {
                    run_id: None,
                    created_at: 13,
                    message: "why?".into(),
                    answer: None,
                },
                OperatorAnswer {
                    run_id: None,
                    created_at: 10,
                    message: "scale down".into(),
                    answer: Some("stopping two".into()),
                },
            ]
        );
        assert_eq!(operator_answers(&s.conn, 1, 1).unwrap().len(), 1);
        assert!(operator_answers(&s.conn, 2, 5).unwrap().is_empty());
    }
}
