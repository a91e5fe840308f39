//! Admission of the objects of links across clusters (docs/multi-cluster.md): a `Link`
//! and a token Secret (a Secret labelled [`TOKEN_LABEL`]`=true`, which the validating
//! webhook selects by that label only).
//!
//! | object | answer |
//! |---|---|
//! | token Secret, CREATE or UPDATE | every problem of [`read_token`] (wrong type, missing key, malformed annotation, expired) as a 422 `Invalid`, at its path in the Secret |
//! | Link, CREATE or UPDATE | [`validate_link`]'s violations at once; when none, a [`LinkPending`]: the server reads the token Secret and the Interconnect by name, then [`LinkPending::judged`] adds [`validate_link_refs`]'s (no such token, a token of the wrong role for the Interconnect, an expired or malformed token) |
//! | DELETE | allowed |
//!
//! An Interconnect that does not exist yet is no violation (it may be applied next); the
//! controller then judges the Link again in every pass and says why in its `Configured`
//! condition.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::core::admission::Operation;
use qdr_api::FieldError;
use qdr_api::links::token::{TOKEN_LABEL, read_token};
use qdr_api::links::{Link, validate_link, validate_link_refs};

use super::respond::{
    GROUP, LinkPending, Outcome, Reply, bad_request_for_uid, denied_invalid_of, reply, response_for,
};
use crate::decode::Request;

impl LinkPending {
    /// The final reply, given the token Secret (`None`: it does not exist) and whether the
    /// Interconnect is interior (`None`: it does not exist or is not valid) at `now`.
    pub fn judged(&self, token: Option<&Secret>, interior: Option<bool>, now: Timestamp) -> Reply {
        let read = token.map(|t| read_token(t, now));
        let errors = match &read {
            None => validate_link_refs(&self.link, None, interior),
            Some(Ok(t)) => validate_link_refs(&self.link, Some(Ok(t)), interior),
            Some(Err(e)) => validate_link_refs(&self.link, Some(Err(e)), interior),
        };
        verdict(&self.uid, "Link", GROUP, &name_of(&self.link.metadata.name), &errors)
    }
}

/// The final reply when the token or the Interconnect could not be read (the API server did
/// not answer): refused, as the webhook's `failurePolicy: Fail` would, with why.
pub fn unreadable(link: &LinkPending, why: &str) -> Reply {
    let message = format!("the webhook could not read the Link's token Secret or Interconnect: {why}");
    reply(super::respond::deny(&link.uid, 503, "ServiceUnavailable", message), Outcome::Denied)
}

fn name_of(name: &Option<String>) -> String {
    name.clone().unwrap_or_default()
}

fn verdict(uid: &str, kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Reply {
    if errors.is_empty() {
        reply(response_for(uid), Outcome::Allowed)
    } else {
        reply(denied_invalid_of(group, kind, uid, name, errors, &[]), Outcome::Denied)
    }
}

/// Answers a request for a Link or a Secret (see the module docs); `None` for any other
/// kind.
pub fn answer(req: &Request<'_>, now: Timestamp) -> Option<Reply> {
    let link = req.kind.group == GROUP && req.kind.kind == "Link";
    let secret = req.kind.group.is_empty() && req.kind.kind == "Secret";
    if !link && !secret {
        return None;
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Some(reply(response_for(&req.uid), Outcome::Allowed));
    }
    let Some(raw) = req.object else {
        return Some(bad_request_for_uid(&req.uid, "request.object is missing".into()));
    };
    if secret {
        let s: Secret = match serde_json::from_str(raw.get()) {
            Ok(s) => s,
            Err(e) => return Some(bad_request_for_uid(&req.uid, format!("the Secret does not decode: {e}"))),
        };
        let labelled =
            s.metadata.labels.as_ref().and_then(|l| l.get(TOKEN_LABEL)).is_some_and(|v| v == "true");
        if !labelled {
            return Some(reply(response_for(&req.uid), Outcome::Allowed));
        }
        let errors = read_token(&s, now).err().unwrap_or_default();
        return Some(verdict(&req.uid, "Secret", "", &name_of(&s.metadata.name), &errors));
    }
    let l: Link = match serde_json::from_str(raw.get()) {
        Ok(l) => l,
        Err(e) => return Some(bad_request_for_uid(&req.uid, format!("the Link does not decode: {e}"))),
    };
    let errors = validate_link(&l);
    if !errors.is_empty() {
        return Some(verdict(&req.uid, "Link", GROUP, &name_of(&l.metadata.name), &errors));
    }
    let namespace = req.namespace.clone().or_else(|| l.metadata.namespace.clone()).unwrap_or_default();
    let mut r = reply(response_for(&req.uid), Outcome::Allowed);
    r.link = Some(LinkPending { uid: req.uid.clone(), link: l, namespace });
    Some(r)
}
