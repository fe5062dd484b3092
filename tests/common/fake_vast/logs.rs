//! Container logs: a request_logs call hands out a result_url that answers 404 a few times
//! before it serves the text.

use serde_json::{json, Value};

use super::faults::FakeReply;
use super::routes::{error, ok};
use super::state::{LogObject, State};
use super::FakeVast;

impl FakeVast {
    pub fn set_log_text(&self, id: u64, text: &str) {
        self.lock().log_texts.insert(id, text.into());
    }

    /// How many times a fresh `result_url` answers 404 before serving the text (default 3).
    pub fn set_log_misses(&self, n: u32) {
        self.lock().log_misses = n;
    }
}

impl State {
    pub(super) fn request_logs(&mut self, id: u64, body: &str) -> FakeReply {
        if !self.instances.contains_key(&id) {
            return error(404, "invalid_id", "Invalid instance id.");
        }
        let b: Value = serde_json::from_str(body).unwrap_or(json!({}));
        let tail = match b.get("tail") {
            Some(Value::String(s)) => s.trim().parse().unwrap_or(1000),
            Some(v) => v.as_u64().unwrap_or(1000) as usize,
            None => 1000,
        };
        let text = self.log_texts.get(&id).cloned().unwrap_or_else(|| {
            (1..=5)
                .map(|n| format!("instance {id} log line {n}\n"))
                .collect()
        });
        let lines: Vec<&str> = text.lines().collect();
        let kept = lines[lines.len().saturating_sub(tail)..].join("\n") + "\n";
        self.counter += 1;
        let token = format!("{id:x}{:08x}", self.counter);
        self.log_objects.insert(
            token.clone(),
            LogObject {
                text: kept,
                misses_left: self.log_misses,
            },
        );
        ok(json!({
            "success": true,
            "result_url": format!("{}/instance_logs/{token}.log", self.base_url),
            "msg": "Logs are being prepared; fetch result_url.",
        }))
    }

    pub(super) fn log_file(&mut self, token: &str) -> FakeReply {
        let not_yet = FakeReply {
            content_type: "application/xml".into(),
            ..FakeReply::text(404, "<Error><Code>NoSuchKey</Code></Error>")
        };
        match self.log_objects.get_mut(token) {
            Some(o) if o.misses_left > 0 => {
                o.misses_left -= 1;
                not_yet
            }
            Some(o) => FakeReply::text(200, &o.text),
            None => not_yet,
        }
    }
}
