//! AdmissionReview handling, pure: bytes in, HTTP status and JSON out. No I/O, so a
//! dry-run request can have no side effect.
//!
//! | input | answer |
//! |---|---|
//! | not JSON, not an object, another kind or version, no `request`, no `request.uid` | HTTP 400, a plain-text reason (there is no uid to answer) |
//! | a review of something other than an Interconnect | 200, `allowed: false`, code 400, the reason |
//! | DELETE or CONNECT | 200, allowed (nothing to check) |
//! | CREATE or UPDATE without `request.object` | 200, `allowed: false`, code 400 |
//! | an object that does not decode (`port: "x"`) | mutate: allowed, no patch; validate: 422 `Invalid` with a cause at the field |
//! | mutate, valid object | allowed, with the JSON Patch that adds what [`qdr_api::defaults`] adds |
//! | mutate, invalid object | 422 `Invalid` with every cause (before the API server's schema checks, which would hide the rest) |
//! | validate | allowed with warnings, or 422 `Invalid`, one cause per violation, every cause also in `message` |

use qdr_api::{FieldError, Interconnect, defaults, validate, warnings};
use serde_json::{Value, json};

/// API group of Interconnects.
pub const GROUP: &str = "interconnectedcloud.github.io";
/// Kind of Interconnects.
pub const KIND: &str = "Interconnect";

/// Which webhook a review is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// The mutating (defaulting) webhook, `POST /mutate`.
    Mutate,
    /// The validating webhook, `POST /validate`.
    Validate,
}

impl Operation {
    /// `mutate` or `validate` (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Mutate => "mutate",
            Operation::Validate => "validate",
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
    /// The body: AdmissionReview JSON (200) or the reason (400).
    pub body: Body,
    /// For metrics.
    pub outcome: Outcome,
}

/// A reply body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// An AdmissionReview with `response`.
    Review(Value),
    /// A plain-text error.
    Text(String),
}

fn bad_http(reason: impl Into<String>) -> Reply {
    Reply { http_status: 400, body: Body::Text(reason.into()), outcome: Outcome::BadRequest }
}

fn review(response: Value, outcome: Outcome) -> Reply {
    Reply {
        http_status: 200,
        body: Body::Review(
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        ),
        outcome,
    }
}

/// Handles one AdmissionReview request body.
pub fn handle(op: Operation, body: &[u8]) -> Reply {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return bad_http(format!("malformed JSON: {e}")),
    };
    if v.get("apiVersion").and_then(Value::as_str) != Some("admission.k8s.io/v1")
        || v.get("kind").and_then(Value::as_str) != Some("AdmissionReview")
    {
        return bad_http(format!(
            "expected an admission.k8s.io/v1 AdmissionReview, got apiVersion {} kind {}",
            v.get("apiVersion").unwrap_or(&Value::Null),
            v.get("kind").unwrap_or(&Value::Null)
        ));
    }
    let Some(req) = v.get("request").filter(|r| r.is_object()) else {
        return bad_http("AdmissionReview has no request");
    };
    let Some(uid) = req.get("uid").and_then(Value::as_str) else {
        return bad_http("AdmissionReview request has no uid");
    };
    let deny = |code: u16, reason: &str, message: String| {
        review(
            json!({"uid": uid, "allowed": false,
                   "status": {"status": "Failure", "code": code, "reason": reason, "message": message}}),
            Outcome::BadRequest,
        )
    };
    let kind = req.get("kind").cloned().unwrap_or(Value::Null);
    if kind.get("group").and_then(Value::as_str) != Some(GROUP)
        || kind.get("kind").and_then(Value::as_str) != Some(KIND)
    {
        return deny(
            400,
            "BadRequest",
            format!("this webhook admits only {GROUP} {KIND} objects, not {kind}"),
        );
    }
    match req.get("operation").and_then(Value::as_str) {
        Some("CREATE" | "UPDATE") => {}
        Some(_) => return review(json!({"uid": uid, "allowed": true}), Outcome::Allowed),
        None => return deny(400, "BadRequest", "request.operation is missing".into()),
    }
    let Some(object) = req.get("object").filter(|o| o.is_object()) else {
        return deny(400, "BadRequest", "request.object is missing".into());
    };
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();

    let decoded: Result<Interconnect, _> = serde_path_to_error::deserialize(object);
    match (op, decoded) {
        (Operation::Mutate, Err(_)) => {
            // Not ours to reject: validation (schema and webhook) reports it with its path.
            review(json!({"uid": uid, "allowed": true}), Outcome::Allowed)
        }
        (Operation::Mutate, Ok(ic)) => {
            // Deny here already: the mutating webhook runs before the API server's schema
            // and CEL checks, which stop at the first failing layer. Answering now lists every
            // problem at once; the validating webhook still checks the final object.
            let effective = defaults(&ic);
            let errors = validate(&effective);
            if !errors.is_empty() {
                return invalid(uid, &name, &errors, &[]);
            }
            let after = merged(object, &effective);
            let ops = add_only(json_patch::diff(object, &after));
            let mut resp = json!({"uid": uid, "allowed": true});
            if !ops.0.is_empty() {
                let bytes = serde_json::to_vec(&ops).expect("patch serializes");
                use base64::Engine as _;
                resp["patchType"] = json!("JSONPatch");
                resp["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
            review(resp, Outcome::Allowed)
        }
        (Operation::Validate, Err(e)) => {
            let path = e.path().to_string();
            let err = FieldError {
                field: if path == "." { "spec".into() } else { path },
                error_type: qdr_api::ErrorType::Invalid,
                bad_value: None,
                detail: e.into_inner().to_string(),
            };
            invalid(uid, &name, &[err], &[])
        }
        (Operation::Validate, Ok(ic)) => {
            let effective = defaults(&ic);
            let errors = validate(&effective);
            let warns = warnings(&effective);
            if errors.is_empty() {
                let mut resp = json!({"uid": uid, "allowed": true});
                if !warns.is_empty() {
                    resp["warnings"] = json!(warns);
                }
                review(resp, Outcome::Allowed)
            } else {
                invalid(uid, &name, &errors, &warns)
            }
        }
    }
}

/// `object` with its spec replaced by the defaulted one (other fields untouched).
fn merged(object: &Value, defaulted: &Interconnect) -> Value {
    let mut after = object.clone();
    after["spec"] = serde_json::to_value(&defaulted.spec).expect("spec serializes");
    after
}

/// Keeps only `add` operations: defaults never remove or change what the user wrote, even
/// where the typed round trip would (unknown fields, number formats, explicit nulls).
fn add_only(patch: json_patch::Patch) -> json_patch::Patch {
    json_patch::Patch(
        patch.0.into_iter().filter(|op| matches!(op, json_patch::PatchOperation::Add(_))).collect(),
    )
}

/// The 422 `Invalid` answer, shaped like the API server's own field errors.
fn invalid(uid: &str, name: &str, errors: &[FieldError], warns: &[String]) -> Reply {
    let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let aggregate = if lines.len() == 1 { lines[0].clone() } else { format!("[{}]", lines.join(", ")) };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.error_type.reason(), "field": e.field, "message": e.body()}))
        .collect();
    let mut resp = json!({
        "uid": uid,
        "allowed": false,
        "status": {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": format!("{KIND}.{GROUP} {name:?} is invalid: {aggregate}"),
            "details": {"name": name, "group": GROUP, "kind": KIND, "causes": causes},
        },
    });
    if !warns.is_empty() {
        resp["warnings"] = json!(warns);
    }
    review(resp, Outcome::Denied)
}
