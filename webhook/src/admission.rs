//! AdmissionReview handling, pure: bytes in, an HTTP status and a typed
//! [`AdmissionResponse`] out. No I/O, so a dry-run request can have no side effect.
//!
//! The review is decoded as `kube::core::admission::AdmissionReview<DynamicObject>`, so
//! `operation`, `old_object`, `dry_run` and `sub_resource` are typed; the object is then
//! decoded as an [`Interconnect`] with the path of any type error.
//!
//! | input | answer |
//! |---|---|
//! | not JSON, not an `admission.k8s.io/v1` AdmissionReview, no `request`, no `request.uid` | HTTP 400, a plain-text reason (there is no uid to answer) |
//! | a request with a uid that does not decode (no `kind`, malformed `metadata`) | 200, `allowed: false`, code 400, the reason |
//! | a review of something other than an Interconnect | 200, `allowed: false`, code 400, the reason |
//! | DELETE or CONNECT | 200, allowed (nothing to check) |
//! | CREATE or UPDATE without `request.object` | 200, `allowed: false`, code 400 |
//! | an object that does not decode (`port: "x"`) | mutate: allowed, no patch; validate: 422 `Invalid` with a cause at the field |
//! | mutate, valid object | allowed, with the JSON Patch that adds what [`qdr_api::defaults`] adds |
//! | mutate, invalid object | 422 `Invalid` with every cause (before the API server's schema checks, which would hide the rest) |
//! | validate | allowed with warnings, or 422 `Invalid`, one cause per violation, every cause also in `message` |
//! | UPDATE that leaves `spec` as it was (labels, annotations, finalizers, status) | allowed, no patch; validate adds the stored violations as warnings |
//! | UPDATE of a spec whose `oldObject` already broke rules | **ratcheting**: only violations the update introduces or changes deny (compared by the identity of the offending item, type and value: [`crate::ratchet`]); the carried ones are warnings |
//! | CREATE with `metadata.generateName` and no name | validated under a stand-in name (`generateName` cut to 58 characters + 5 characters, the server's rule); mutate adds only the defaults that do not derive from the name |
//!
//! Ratcheting keeps objects written by the Go operator (which validated almost nothing)
//! updatable: they can be labelled, annotated, have a finalizer removed, or be fixed one
//! violation at a time. The controller still reconciles only valid specs (`SpecValid=False`
//! for the others), so nothing unsafe is deployed.

use base64::Engine as _;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::{DynamicObject, Status};
use qdr_api::{FieldError, Interconnect, defaults, validate, warnings};
use serde_json::Value;

/// API group of Interconnects.
pub const GROUP: &str = "interconnectedcloud.github.io";
/// Kind of Interconnects.
pub const KIND: &str = "Interconnect";

/// Which of the two webhooks a review is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Webhook {
    /// The mutating (defaulting) webhook, `POST /mutate`.
    Mutate,
    /// The validating webhook, `POST /validate`.
    Validate,
}

impl Webhook {
    /// `mutate` or `validate` (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Mutate => "mutate",
            Webhook::Validate => "validate",
        }
    }
}

/// How a review ended (metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Allowed (possibly with a patch or warnings).
    Allowed,
    /// Denied because the object is invalid.
    Denied,
    /// The review itself was malformed (HTTP 400, or a denial with code 400).
    BadRequest,
}

impl Outcome {
    /// `allowed`, `denied` or `bad_request`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::BadRequest => "bad_request",
        }
    }
}

/// The HTTP answer to one review.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// HTTP status: 200 with an AdmissionReview, or 400 with a plain-text reason.
    pub http_status: u16,
    /// The body.
    pub body: Body,
    /// For metrics.
    pub outcome: Outcome,
}

/// A reply body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// An AdmissionReview carrying this response.
    Review(Box<AdmissionResponse>),
    /// A plain-text error.
    Text(String),
}

impl Reply {
    /// The body as sent: the AdmissionReview JSON (see [`review_json`]) or the text.
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.body {
            Body::Review(r) => serde_json::to_vec(&review_json(r)).expect("a review serializes"),
            Body::Text(t) => t.clone().into_bytes(),
        }
    }
}

/// The `admission.k8s.io/v1` AdmissionReview JSON of `response`, with `patch` as the
/// base64 string the API documents (kube-core serializes its bytes as a number array,
/// kube-rs issue 1781).
pub fn review_json(response: &AdmissionResponse) -> Value {
    let mut review = serde_json::to_value(response.clone().into_review()).expect("a review serializes");
    review["apiVersion"] = META_API_VERSION_V1.into();
    review["kind"] = META_KIND.into();
    if let Some(patch) = &response.patch {
        review["response"]["patch"] = base64::engine::general_purpose::STANDARD.encode(patch).into();
    }
    review
}

fn text(reason: impl Into<String>) -> Reply {
    Reply { http_status: 400, body: Body::Text(reason.into()), outcome: Outcome::BadRequest }
}

fn reply(response: AdmissionResponse, outcome: Outcome) -> Reply {
    Reply { http_status: 200, body: Body::Review(Box::new(response)), outcome }
}

/// A denial of a request that only has a uid (it did not decode).
fn bad_request_for_uid(uid: &str, message: String) -> Reply {
    let mut r = AdmissionResponse::invalid(&message);
    r.uid = uid.into();
    r.result = Status::failure(&message, "BadRequest").with_code(400);
    reply(r, Outcome::BadRequest)
}

fn deny(
    req: &AdmissionRequest<DynamicObject>,
    code: u16,
    reason: &str,
    message: String,
) -> AdmissionResponse {
    let mut r = AdmissionResponse::from(req);
    r.allowed = false;
    r.result = Status::failure(&message, reason).with_code(code);
    r
}

/// Handles one AdmissionReview request body for `webhook`.
pub fn handle(webhook: Webhook, body: &[u8]) -> Reply {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) if e.is_syntax() || e.is_eof() => return text(format!("malformed JSON: {e}")),
        Err(e) => {
            // Answer in-band when the request at least has a uid.
            let uid = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.pointer("/request/uid").and_then(Value::as_str).map(String::from));
            return match uid {
                Some(uid) => bad_request_for_uid(&uid, format!("the admission request does not decode: {e}")),
                None => text(format!("expected an admission.k8s.io/v1 AdmissionReview: {e}")),
            };
        }
    };
    if review.types.api_version != META_API_VERSION_V1 || review.types.kind != META_KIND {
        return text(format!(
            "expected an admission.k8s.io/v1 AdmissionReview, got apiVersion {:?} kind {:?}",
            review.types.api_version, review.types.kind
        ));
    }
    match review.try_into() {
        Ok(req) => answer(webhook, &req),
        Err(_) => text("AdmissionReview has no request"),
    }
}

/// Answers one decoded request (see the module docs).
pub fn answer(webhook: Webhook, req: &AdmissionRequest<DynamicObject>) -> Reply {
    if req.kind.group != GROUP || req.kind.kind != KIND {
        let message = format!(
            "this webhook admits only {GROUP} {KIND} objects, not {}/{} {}",
            req.kind.group, req.kind.version, req.kind.kind
        );
        return reply(deny(req, 400, "BadRequest", message), Outcome::BadRequest);
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return reply(AdmissionResponse::from(req), Outcome::Allowed);
    }
    let Some(object) = &req.object else {
        return reply(deny(req, 400, "BadRequest", "request.object is missing".into()), Outcome::BadRequest);
    };
    let raw = serde_json::to_value(object).expect("a decoded object serializes");
    let old = match req.operation {
        Operation::Update => req.old_object.as_ref().map(|o| serde_json::to_value(o).expect("serializes")),
        _ => None,
    };
    if let Some(old) = &old
        && old.get("spec") == raw.get("spec")
    {
        return unchanged_spec(webhook, req, &raw);
    }
    let (name, stand_in) = names(object, req);
    let decoded: Result<Interconnect, _> = serde_path_to_error::deserialize(&raw);
    // The stored object's violations, computed only when the new object has some.
    let ratcheted = |effective: &Interconnect, errors: Vec<FieldError>| match &old {
        Some(old) if !errors.is_empty() => {
            let (stored, old_effective) = stored_violations(old);
            let new_effective = serde_json::to_value(effective).expect("serializes");
            crate::ratchet::ratchet(errors, &new_effective, &stored, &old_effective)
        }
        _ => (errors, Vec::new()),
    };
    match (webhook, decoded) {
        // Not ours to reject: validation (schema and webhook) reports it with its path.
        (Webhook::Mutate, Err(_)) => reply(AdmissionResponse::from(req), Outcome::Allowed),
        (Webhook::Mutate, Ok(ic)) => {
            // Deny here already: the mutating webhook runs before the API server's schema
            // and CEL checks, which stop at the first failing layer. Answering now lists every
            // problem at once; the validating webhook still checks the final object.
            let (effective, errors) = checked(&ic, stand_in.as_deref());
            let (introduced, _) = ratcheted(&effective, errors);
            if !introduced.is_empty() {
                return reply(denied_invalid(req, &name, &introduced, &[]), Outcome::Denied);
            }
            // Defaults under the object's own name: none derived from a name not yet picked.
            let ops = defaulting_patch(raw.get("spec"), &effective);
            let mut response = AdmissionResponse::from(req);
            if !ops.0.is_empty() {
                response = response.with_patch(ops).expect("a JSON patch serializes");
            }
            reply(response, Outcome::Allowed)
        }
        (Webhook::Validate, Err(e)) => {
            let path = e.path().to_string();
            let err = FieldError {
                field: if path == "." { "spec".into() } else { path },
                error_type: qdr_api::ErrorType::Invalid,
                bad_value: None,
                detail: e.into_inner().to_string(),
            };
            reply(denied_invalid(req, &name, &[err], &[]), Outcome::Denied)
        }
        (Webhook::Validate, Ok(ic)) => {
            let (effective, errors) = checked(&ic, stand_in.as_deref());
            let (introduced, carried) = ratcheted(&effective, errors);
            let mut warns = new_warnings(&effective, old.as_ref());
            warns.extend(carried.iter().map(carried_warning));
            if !introduced.is_empty() {
                return reply(denied_invalid(req, &name, &introduced, &warns), Outcome::Denied);
            }
            let mut response = AdmissionResponse::from(req);
            if !warns.is_empty() {
                response.warnings = Some(warns);
            }
            reply(response, Outcome::Allowed)
        }
    }
}

/// The warnings of `effective` that the stored object `old` (on UPDATE) did not already
/// have: a risky state is announced once, by the write that introduces it (the create that
/// adds a default, the update that changes it), not on every later update.
fn new_warnings(effective: &Interconnect, old: Option<&Value>) -> Vec<String> {
    let warns = warnings(effective);
    let Some(old) = old.and_then(|o| serde_json::from_value::<Interconnect>(o.clone()).ok()) else {
        return warns;
    };
    let before = warnings(&qdr_api::defaults(&old));
    warns.into_iter().filter(|w| !before.contains(w)).collect()
}

/// The name to report and, for a `generateName` create without a name, the stand-in name
/// to validate under: `generateName` cut to 58 characters plus 5 characters, as the API
/// server completes it (`names.SimpleNameGenerator`).
fn names(object: &DynamicObject, req: &AdmissionRequest<DynamicObject>) -> (String, Option<String>) {
    match (&object.metadata.name, &object.metadata.generate_name) {
        (Some(n), _) if !n.is_empty() => (n.clone(), None),
        (_, Some(g)) if !g.is_empty() => {
            let base: String = g.chars().take(58).collect();
            (g.clone(), Some(format!("{base}x0x0x")))
        }
        _ => (req.name.clone(), None),
    }
}

/// The defaulted `ic` (under its own name) and its violations, validated under `stand_in`
/// when given (defaulted once more under that name, so the derived Secret names are checked).
fn checked(ic: &Interconnect, stand_in: Option<&str>) -> (Interconnect, Vec<FieldError>) {
    let effective = defaults(ic);
    let errors = match stand_in {
        None => validate(&effective),
        Some(n) => {
            let mut named = ic.clone();
            named.metadata.name = Some(n.into());
            validate(&defaults(&named))
        }
    };
    (effective, errors)
}

/// The violations of the stored object (`oldObject`) and its defaulted form as JSON (where
/// their paths point); none when it does not decode.
fn stored_violations(old: &Value) -> (Vec<FieldError>, Value) {
    match serde_json::from_value::<Interconnect>(old.clone()) {
        Ok(ic) => {
            let effective = defaults(&ic);
            (validate(&effective), serde_json::to_value(&effective).expect("serializes"))
        }
        Err(_) => (Vec::new(), Value::Null),
    }
}

/// Longest warning, in characters (the API guidance, also what kubectl users read).
pub const MAX_WARNING: usize = 120;

/// The warning for a violation carried over from the stored object: the violation as the API
/// server's own ratcheting warnings show it (`path: Type value: detail`), cut to
/// [`MAX_WARNING`] characters (the whole text is in the `SpecValid` condition).
pub fn carried_warning(e: &FieldError) -> String {
    let full = e.to_string();
    if full.chars().count() <= MAX_WARNING {
        return full;
    }
    let mut cut: String = full.chars().take(MAX_WARNING - 1).collect();
    cut.push('…');
    cut
}

/// An UPDATE that leaves the spec as stored (metadata or status only): always admitted and
/// never patched; the validating webhook lists the stored violations as warnings.
fn unchanged_spec(webhook: Webhook, req: &AdmissionRequest<DynamicObject>, raw: &Value) -> Reply {
    let mut response = AdmissionResponse::from(req);
    if webhook == Webhook::Validate
        && let Ok(ic) = serde_json::from_value::<Interconnect>(raw.clone())
    {
        let warns: Vec<String> = validate(&defaults(&ic)).iter().map(carried_warning).collect();
        if !warns.is_empty() {
            response.warnings = Some(warns);
        }
    }
    reply(response, Outcome::Allowed)
}

/// The JSON Patch from the stored `spec` to the defaulted one, keeping only `add`
/// operations: defaults never remove or change what the user wrote, even where the typed
/// round trip would (unknown fields, number formats, explicit nulls).
fn defaulting_patch(spec: Option<&Value>, defaulted: &Interconnect) -> json_patch::Patch {
    let mut before = serde_json::Map::new();
    if let Some(spec) = spec {
        before.insert("spec".into(), spec.clone());
    }
    let mut after = serde_json::Map::new();
    after.insert("spec".into(), serde_json::to_value(&defaulted.spec).expect("a spec serializes"));
    let patch = json_patch::diff(&Value::Object(before), &Value::Object(after));
    json_patch::Patch(
        patch.0.into_iter().filter(|op| matches!(op, json_patch::PatchOperation::Add(_))).collect(),
    )
}

/// The 422 `Invalid` answer, shaped like the API server's own field errors: one cause per
/// violation, every cause also in `message`.
fn denied_invalid(
    req: &AdmissionRequest<DynamicObject>,
    name: &str,
    errors: &[FieldError],
    warns: &[String],
) -> AdmissionResponse {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let aggregate = if lines.len() == 1 { lines[0].clone() } else { format!("[{}]", lines.join(", ")) };
    let causes = errors
        .iter()
        .map(|e| StatusCause {
            reason: e.error_type.reason().into(),
            message: e.body(),
            field: e.field.clone(),
        })
        .collect();
    let mut r = AdmissionResponse::from(req);
    r.allowed = false;
    r.result = Status {
        status: Some(StatusSummary::Failure),
        code: 422,
        reason: "Invalid".into(),
        message: format!("{KIND}.{GROUP} {name:?} is invalid: {aggregate}"),
        details: Some(StatusDetails {
            name: name.into(),
            group: GROUP.into(),
            kind: KIND.into(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        }),
        metadata: None,
    };
    if !warns.is_empty() {
        r.warnings = Some(warns.to_vec());
    }
    r
}
