//! One review from bytes to [`Reply`]: the AdmissionReview decoded (a malformed one answered
//! in plain text or in-band), the kind and operation checked, then defaults, validation and
//! ratcheting run in the order the module docs table. It owns that order and nothing else:
//! reading, defaulting, validating and shaping the answer are the sibling modules'.

use kube::core::admission::{META_API_VERSION_V1, META_KIND, Operation};
use qdr_api::{FieldError, Interconnect};

use super::default::{defaulted, defaulting_patch};
use super::request::{Object, names, same_spec};
use super::respond::{
    GROUP, KIND, Outcome, Pending, Reply, Webhook, bad_request_for_uid, denied_invalid, deny, reply,
    response_for, text,
};
use super::validate::{
    Checks, carried_warning, checked, checked_serialized, new_warnings, references_to_check,
};
use crate::decode::{Request, Review, UidOnly};

/// Handles one AdmissionReview request body for `webhook` with the default [`Checks`].
pub fn handle(webhook: Webhook, body: &[u8]) -> Reply {
    handle_with(webhook, body, &Checks::default())
}

/// Handles one AdmissionReview request body for `webhook` under `checks` (see the module
/// docs). Pure; a reply with [`Reply::pending`] still needs its Secret references
/// authorized.
pub fn handle_with(webhook: Webhook, body: &[u8], checks: &Checks) -> Reply {
    let review: Review<'_> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) if e.is_syntax() || e.is_eof() => return text(format!("malformed JSON: {e}")),
        Err(e) => return text(format!("expected an admission.k8s.io/v1 AdmissionReview: {e}")),
    };
    if review.api_version != META_API_VERSION_V1 || review.kind != META_KIND {
        return text(format!(
            "expected an admission.k8s.io/v1 AdmissionReview, got apiVersion {:?} kind {:?}",
            review.api_version, review.kind
        ));
    }
    let Some(raw) = review.request else { return text("AdmissionReview has no request") };
    match serde_json::from_str::<Request<'_>>(raw.get()) {
        Ok(req) => answer(webhook, &req, checks),
        // Answer in-band when the request at least has a uid.
        Err(e) => match serde_json::from_str::<UidOnly>(raw.get()) {
            Ok(u) => bad_request_for_uid(&u.uid, format!("the admission request does not decode: {e}")),
            Err(_) => text(format!("expected an admission.k8s.io/v1 AdmissionReview: {e}")),
        },
    }
}

/// Answers one decoded request under `checks` (see the module docs).
pub fn answer(webhook: Webhook, req: &Request<'_>, checks: &Checks) -> Reply {
    if webhook == Webhook::Validate
        && let Some(reply) = super::links::answer(req, k8s_openapi::jiff::Timestamp::now())
    {
        return reply;
    }
    if req.kind.group != GROUP || req.kind.kind != KIND {
        let message = format!(
            "this webhook admits only {GROUP} {KIND} objects, not {}/{} {}",
            req.kind.group, req.kind.version, req.kind.kind
        );
        return reply(deny(&req.uid, 400, "BadRequest", message), Outcome::BadRequest);
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return reply(response_for(&req.uid), Outcome::Allowed);
    }
    let Some(raw) = req.object else {
        return reply(
            deny(&req.uid, 400, "BadRequest", "request.object is missing".into()),
            Outcome::BadRequest,
        );
    };
    let undecodable = |e: serde_json::Error| {
        bad_request_for_uid(&req.uid, format!("the admission request does not decode: {e}"))
    };
    let object = match Object::of(raw) {
        Ok(o) => o,
        Err(e) => return undecodable(e),
    };
    let old = match (&req.operation, req.old_object) {
        (Operation::Update, Some(o)) => match Object::of(o) {
            Ok(o) => Some(o),
            Err(e) => return undecodable(e),
        },
        _ => None,
    };
    if let Some(old) = &old
        && same_spec(old.parts.spec, object.parts.spec)
    {
        return unchanged_spec(webhook, req, object, checks);
    }
    let (name, stand_in) = names(&object, req);
    // The stored object, defaulted, when it decodes.
    let old_effective = old.and_then(|o| o.into_interconnect().ok()).map(defaulted);
    // The stored object's violations, computed only when the new object has some.
    let ratcheted = |effective: &Interconnect, errors: Vec<FieldError>| match &old_effective {
        Some(old) if !errors.is_empty() => {
            let stored = checks.violations(old);
            let old_json = serde_json::to_value(old).expect("serializes");
            let new_json = serde_json::to_value(effective).expect("serializes");
            crate::ratchet::ratchet(errors, &new_json, &stored, &old_json)
        }
        _ => (errors, Vec::new()),
    };
    let pending = |effective: &Interconnect, errors: Vec<FieldError>, warnings: Vec<String>| {
        if !checks.authorize_references {
            return None;
        }
        let references = references_to_check(effective, old_effective.as_ref());
        (!references.is_empty()).then(|| Pending {
            user: req.user_info.clone(),
            namespace: req.namespace.clone().unwrap_or_default(),
            references,
            uid: req.uid.clone(),
            name: name.clone(),
            errors,
            warnings,
        })
    };
    let raw_spec = object.parts.spec;
    match (webhook, object.into_interconnect()) {
        // Not ours to reject: validation (schema and webhook) reports it with its path.
        (Webhook::Mutate, Err(_)) => reply(response_for(&req.uid), Outcome::Allowed),
        (Webhook::Mutate, Ok(ic)) => {
            // Deny here already: the mutating webhook runs before the API server's schema
            // and CEL checks, which stop at the first failing layer. Answering now lists every
            // problem at once; the validating webhook still checks the final object.
            let (effective, spec, errors) = checked_serialized(ic, stand_in.as_deref(), checks);
            let (introduced, _) = ratcheted(&effective, errors);
            if !introduced.is_empty() {
                let mut r = reply(denied_invalid(&req.uid, &name, &introduced, &[]), Outcome::Denied);
                r.pending = pending(&effective, introduced, Vec::new());
                return r;
            }
            // Defaults under the object's own name: none derived from a name not yet picked.
            let patch = defaulting_patch(raw_spec, &spec);
            let mut response = response_for(&req.uid);
            if !patch.is_empty() {
                // What kube-core's `with_patch` stores, written in one pass;
                // [`Reply::to_bytes`] and [`review_json`] add `patchType: JSONPatch`.
                response.patch = Some(patch);
            }
            reply(response, Outcome::Allowed)
        }
        (Webhook::Validate, Err(err)) => reply(denied_invalid(&req.uid, &name, &[err], &[]), Outcome::Denied),
        (Webhook::Validate, Ok(ic)) => {
            let (effective, errors) = checked(ic, stand_in.as_deref(), checks);
            let (introduced, carried) = ratcheted(&effective, errors);
            let old_defaulted = old_effective.as_ref();
            let mut warns = new_warnings(&effective, old_defaulted);
            warns.extend(carried.iter().map(carried_warning));
            let mut r = if introduced.is_empty() {
                let mut response = response_for(&req.uid);
                if !warns.is_empty() {
                    response.warnings = Some(warns.clone());
                }
                reply(response, Outcome::Allowed)
            } else {
                reply(denied_invalid(&req.uid, &name, &introduced, &warns), Outcome::Denied)
            };
            r.pending = pending(&effective, introduced, warns);
            r
        }
    }
}

/// An UPDATE that leaves the spec as stored (metadata or status only): always admitted and
/// never patched, and its references are not checked again; the validating webhook lists
/// the stored violations as warnings.
fn unchanged_spec(webhook: Webhook, req: &Request<'_>, object: Object<'_>, checks: &Checks) -> Reply {
    let mut response = response_for(&req.uid);
    if webhook == Webhook::Validate
        && let Ok(ic) = object.into_interconnect()
    {
        let warns: Vec<String> = checks.violations(&defaulted(ic)).iter().map(carried_warning).collect();
        if !warns.is_empty() {
            response.warnings = Some(warns);
        }
    }
    reply(response, Outcome::Allowed)
}
