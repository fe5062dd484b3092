//! Which route a request is, and how it is answered: a queued failure first, then the rate
//! limit, then auth, then the route's handler, whose answer a queued lost answer may replace.

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::faults::FakeReply;
use super::state::State;
use super::SeenRequest;

/// The routes the fake serves, each with its one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// POST /api/v0/bundles/
    Offers,
    /// PUT /api/v0/asks/{id}/
    Create,
    /// GET /api/v1/instances/
    ListV1,
    /// GET /api/v0/instances/ (deprecated: 410)
    ListV0,
    /// GET /api/v0/instances/{id}/
    Show,
    /// PUT /api/v0/instances/{id}/ (state, label)
    Manage,
    /// DELETE /api/v0/instances/{id}/
    Destroy,
    /// PUT /api/v0/instances/request_logs/{id}/
    RequestLogs,
    /// PUT /api/v0/instances/bid_price/{id}/
    ChangeBid,
    /// GET of a `result_url` (no auth)
    LogFile,
    /// Anything else: 404
    Other,
}

pub(super) enum Outcome {
    Reply(FakeReply),
    /// Handled now, sent after the delay (`FakeVast::answer_late`).
    Late(FakeReply, std::time::Duration),
    Hold,
}

pub(super) fn error(status: u16, code: &str, msg: &str) -> FakeReply {
    FakeReply::json(status, json!({"success": false, "error": code, "msg": msg}))
}

pub(super) fn ok(body: Value) -> FakeReply {
    FakeReply::json(200, body)
}

impl State {
    pub(super) fn handle(
        &mut self,
        method: &str,
        url: &str,
        body: String,
        authorization: Option<String>,
    ) -> Outcome {
        let now = self.clock.now_ms();
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let (route, id) = route_of(method, path);
        let mut outcome =
            self.dispatch(route, id, path, query, &body, authorization.as_deref(), now);
        if let Some(delay) = self.late.get_mut(&route).and_then(VecDeque::pop_front) {
            if let Outcome::Reply(r) = outcome {
                outcome = Outcome::Late(r, delay);
            }
        }
        let status = match &outcome {
            Outcome::Reply(r) | Outcome::Late(r, _) => r.status,
            Outcome::Hold => 0,
        };
        self.log.push(SeenRequest {
            method: method.into(),
            route,
            path: path.into(),
            query: query.into(),
            body,
            authorization,
            at_ms: now,
            status,
        });
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        route: Route,
        id: Option<String>,
        path: &str,
        query: &str,
        body: &str,
        authorization: Option<&str>,
        now: i64,
    ) -> Outcome {
        if let Some(reply) = self.before.get_mut(&route).and_then(VecDeque::pop_front) {
            return if reply.hang {
                Outcome::Hold
            } else {
                Outcome::Reply(reply)
            };
        }
        if let Some(reply) = self.rate_check(route, now) {
            return Outcome::Reply(reply);
        }
        if !matches!(route, Route::LogFile | Route::Other) && !self.authorized(route, authorization)
        {
            return Outcome::Reply(error(
                self.auth_error_status,
                "auth_error",
                "Invalid user key",
            ));
        }
        let num = id
            .as_deref()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        let reply = match route {
            Route::Offers => match self.search_quota.as_mut() {
                Some((0, reset)) => FakeReply::search_quota_exceeded(&reset.clone()),
                Some((left, _)) => {
                    *left -= 1;
                    self.search(body)
                }
                None => self.search(body),
            },
            Route::ChangeBid => self.change_bid(num, body),
            Route::Create => self.create(num, body, now),
            Route::ListV1 => self.list(query),
            Route::ListV0 => error(
                410,
                "deprecated_endpoint",
                "This endpoint is deprecated. Use /api/v1/instances/ instead.",
            ),
            Route::Show => self.show(num),
            Route::Manage => self.manage(num, body),
            Route::Destroy => self.destroy(num),
            Route::RequestLogs => self.request_logs(num, body),
            Route::LogFile => self.log_file(id.as_deref().unwrap_or("")),
            Route::Other => FakeReply {
                content_type: "text/html".into(),
                ..FakeReply::text(404, &format!("<html><body>Not Found: {path}</body></html>"))
            },
        };
        if let Some(replaced) = self.after.get_mut(&route).and_then(VecDeque::pop_front) {
            return if replaced.hang {
                Outcome::Hold
            } else {
                Outcome::Reply(replaced)
            };
        }
        Outcome::Reply(reply)
    }

    fn authorized(&self, route: Route, authorization: Option<&str>) -> bool {
        let Some(key) = &self.api_key else {
            return true;
        };
        match authorization {
            // Offer search works anonymously; a wrong key is still refused.
            None => route == Route::Offers,
            Some(h) => h.strip_prefix("Bearer ") == Some(key.as_str()),
        }
    }
}

fn route_of(method: &str, path: &str) -> (Route, Option<String>) {
    let id_of = |rest: &str| -> Option<String> {
        let id = rest.strip_suffix('/')?;
        (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_string())
    };
    match method {
        "POST" if path == "/api/v0/bundles/" => return (Route::Offers, None),
        "GET" if path == "/api/v1/instances/" => return (Route::ListV1, None),
        "GET" if path == "/api/v0/instances/" => return (Route::ListV0, None),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/api/v0/asks/") {
        if let (Some(id), "PUT") = (id_of(rest), method) {
            return (Route::Create, Some(id));
        }
    }
    if let Some(rest) = path.strip_prefix("/api/v0/instances/request_logs/") {
        if let (Some(id), "PUT") = (id_of(rest), method) {
            return (Route::RequestLogs, Some(id));
        }
    }
    if let Some(rest) = path.strip_prefix("/api/v0/instances/bid_price/") {
        if let (Some(id), "PUT") = (id_of(rest), method) {
            return (Route::ChangeBid, Some(id));
        }
    }
    if let Some(rest) = path.strip_prefix("/api/v0/instances/") {
        if let Some(id) = id_of(rest) {
            match method {
                "GET" => return (Route::Show, Some(id)),
                "PUT" => return (Route::Manage, Some(id)),
                "DELETE" => return (Route::Destroy, Some(id)),
                _ => {}
            }
        }
    }
    if let Some(token) = path
        .strip_prefix("/instance_logs/")
        .and_then(|r| r.strip_suffix(".log"))
    {
        if method == "GET" {
            return (Route::LogFile, Some(token.to_string()));
        }
    }
    (Route::Other, None)
}
