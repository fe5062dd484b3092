//! The create and the state or label changes of one instance (`PUT` on an ask or an
//! instance), apart from [`super`]'s sending and retrying.

use serde_json::Value;

use super::{as_id, create_body, excerpt, HttpVastClient, Method, Withhold};
use crate::vast::{CreateRequest, VastError};

impl HttpVastClient {
    /// The create itself (see [`VastClient::create_instance`]).
    pub(super) fn create(
        &self,
        req: &CreateRequest,
        withhold: Withhold<'_>,
    ) -> Result<u64, VastError> {
        let body = create_body(req);
        let path = format!("/api/v0/asks/{}/", req.offer_id);
        let mut turn = self.create_gate.turn();
        let answer = self.send(
            Method::Put,
            &path,
            Some(&body),
            Some((Some(&mut turn), withhold)),
        )?;
        drop(turn);
        let contract = answer.field("new_contract").and_then(as_id);
        if answer.ok() && !answer.success_false() {
            return match contract {
                Some(id) => Ok(id),
                None => Err(self.decode(&format!(
                    "create of offer {} answered HTTP {} without `new_contract`; it may have \
                     rented an instance: {}",
                    req.offer_id,
                    answer.status,
                    excerpt(&answer.text)
                ))),
            };
        }
        if let Some(new_contract) = contract {
            return Err(VastError::CreateFailed {
                new_contract,
                msg: self.scrub(&answer.msg()),
            });
        }
        let code = answer.code();
        let gone = match answer.status {
            404 => code == "no_such_ask" || code == "invalid_args",
            410 => code == "no_such_ask" || code.is_empty(),
            _ => false,
        };
        if gone {
            return Err(VastError::NoSuchAsk(req.offer_id));
        }
        Err(self.api_error(&answer))
    }

    /// `PUT /api/v0/instances/{id}/` with a state or label change.
    pub(super) fn manage(&self, id: u64, body: Value) -> Result<(), VastError> {
        self.manage_unless(id, body, None)
    }

    /// [`Self::manage`], `withhold` asked before each attempt.
    pub(super) fn manage_unless(
        &self,
        id: u64,
        body: Value,
        withhold: Option<Withhold<'_>>,
    ) -> Result<(), VastError> {
        let path = format!("/api/v0/instances/{id}/");
        let answer = self.send(Method::Put, &path, Some(&body), withhold.map(|w| (None, w)))?;
        if matches!(answer.code().as_str(), "no_such_instance" | "not_found") {
            return Err(VastError::NoSuchInstance(id));
        }
        self.expect_ok(&answer).map(|_| ())
    }
}
