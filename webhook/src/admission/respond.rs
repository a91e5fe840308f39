//! Every answer the webhook gives, in the API server's shapes: the [`Reply`] (HTTP status,
//! AdmissionReview or plain text, metric outcome), the 422 `Invalid` denial with one cause
//! per violation, the AdmissionReview bytes, and the final reply once the Secret references
//! are authorized. It decides nothing about an object: the causes and warnings come in.

use std::collections::BTreeSet;

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::Status;
use kube::core::admission::{AdmissionResponse, META_API_VERSION_V1, META_KIND};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use qdr_api::{ErrorType, FieldError};
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
    /// Secret references still to be authorized as the requesting user: the reply is final
    /// only after [`Reply::authorized`] (or [`Reply::unauthorizable`]). `None`: final now.
    pub pending: Option<Pending>,
    /// A Link still to be judged against its token and Interconnect: the reply is final only
    /// after [`LinkPending::judged`]. `None`: final now.
    pub link: Option<LinkPending>,
}

/// What the server must read to judge a Link: its token Secret and its Interconnect, both
/// in the Link's namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkPending {
    /// The request's uid.
    pub(super) uid: String,
    /// The Link (its name and spec).
    pub(super) link: qdr_api::links::Link,
    /// The namespace to read in.
    pub namespace: String,
}

impl LinkPending {
    /// The token Secret's name.
    pub fn token_secret(&self) -> &str {
        &self.link.spec.token_secret
    }

    /// The Interconnect's name.
    pub fn interconnect(&self) -> &str {
        &self.link.spec.interconnect
    }
}

/// The Secret references of a review that the requesting user must be allowed to read
/// (see `docs/hardening.md`, "Multi-tenant clusters"), with what a denial must still say.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// Who asked (`request.userInfo`).
    pub user: UserInfo,
    /// The object's namespace, where the Secrets are.
    pub namespace: String,
    /// `(field, Secret name)` for every reference to check, in field order.
    pub references: Vec<(String, String)>,
    /// The request's uid.
    pub(super) uid: String,
    /// The object's name, for the denial's message.
    pub(super) name: String,
    /// The violations that deny it already (empty when it is allowed so far).
    pub(super) errors: Vec<FieldError>,
    /// The warnings the final reply carries.
    pub(super) warnings: Vec<String>,
}

impl Pending {
    /// The distinct Secret names to check.
    pub fn secrets(&self) -> BTreeSet<&str> {
        self.references.iter().map(|(_, n)| n.as_str()).collect()
    }
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
    /// The body as sent: the AdmissionReview JSON (the JSON value [`review_json`] gives,
    /// written in one pass) or the text.
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.body {
            Body::Review(r) => {
                // The patch's base64 text needs no JSON escaping: written straight after the
                // rest, into the same buffer, rather than scanned by the serializer.
                let base64_len = r.patch.as_ref().map_or(0, |p| p.len().div_ceil(3) * 4);
                let mut out = Vec::with_capacity(256 + base64_len);
                serde_json::to_writer(&mut out, &ReviewOut::of(r)).expect("a review serializes");
                if let Some(patch) = &r.patch {
                    // `...}}` becomes `...,"patch":"<base64>","patchType":"JSONPatch"}}`.
                    out.truncate(out.len() - 2);
                    out.extend_from_slice(br#","patch":""#);
                    let start = out.len();
                    out.resize(start + base64_len, 0);
                    let n = base64::engine::general_purpose::STANDARD
                        .encode_slice(patch, &mut out[start..])
                        .expect("the buffer holds the base64 text");
                    out.truncate(start + n);
                    out.extend_from_slice(br#"","patchType":"JSONPatch"}}"#);
                }
                out
            }
            Body::Text(t) => t.clone().into_bytes(),
        }
    }

    /// The final reply, given the referenced Secrets the user may not `get`: unchanged when
    /// `unreadable` names none of them; otherwise `422 Invalid` with every other violation
    /// and one `FieldValueForbidden` cause per field naming an unreadable Secret (an
    /// authorization failure about a field is a field error, as the API server's own
    /// admission plugins report them).
    pub fn authorized(mut self, unreadable: &BTreeSet<String>) -> Reply {
        let Some(p) = self.pending.take() else { return self };
        let user = if p.user.username.as_deref().unwrap_or_default().is_empty() {
            "the requesting user".to_string()
        } else {
            format!("user {:?}", p.user.username.as_deref().unwrap_or_default())
        };
        let forbidden: Vec<FieldError> = p
            .references
            .iter()
            .filter(|(_, secret)| unreadable.contains(secret))
            .map(|(field, secret)| FieldError {
                field: field.clone(),
                error_type: ErrorType::Forbidden,
                bad_value: None,
                detail: format!(
                    "{user} may not get Secret {secret:?} in namespace {:?}: the routers mount every Secret \
                     an Interconnect names, so naming one requires the right to read it",
                    p.namespace
                ),
            })
            .collect();
        if forbidden.is_empty() {
            return self;
        }
        let mut errors = p.errors;
        errors.extend(forbidden);
        reply(denied_invalid(&p.uid, &p.name, &errors, &p.warnings), Outcome::Denied)
    }

    /// The final reply when the references could not be checked (the API server did not
    /// answer the SubjectAccessReviews): denied with `500 InternalError` and the reason, so
    /// an unchecked reference is never admitted.
    pub fn unauthorizable(mut self, reason: &str) -> Reply {
        let Some(p) = self.pending.take() else { return self };
        let mut r = response_for(&p.uid);
        r.allowed = false;
        r.result = Status::failure(
            &format!(
                "could not check that the Secrets this Interconnect names may be read by its author: {reason}"
            ),
            "InternalError",
        )
        .with_code(500);
        reply(r, Outcome::BadRequest)
    }
}

/// The AdmissionReview [`Reply::to_bytes`] writes: `response`'s fields as kube-core
/// serializes them, borrowed (no copy of the response, no intermediate JSON value), except
/// `patch` and `patchType`, which [`Reply::to_bytes`] appends (a patch is always a JSON
/// Patch: this crate sets `patch` to [`super::add_operations`]' text).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    status: &'a Status,
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    audit_annotations: &'a std::collections::HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a Vec<String>>,
}

impl<'a> ReviewOut<'a> {
    fn of(r: &'a AdmissionResponse) -> Self {
        ReviewOut {
            api_version: META_API_VERSION_V1,
            kind: META_KIND,
            response: ResponseOut {
                uid: &r.uid,
                allowed: r.allowed,
                status: &r.result,
                audit_annotations: &r.audit_annotations,
                warnings: r.warnings.as_ref(),
            },
        }
    }
}

/// The `admission.k8s.io/v1` AdmissionReview JSON of `response`, with `patch` as the
/// base64 string the API documents (kube-core serializes its bytes as a number array,
/// kube-rs issue 1781) and `patchType: JSONPatch` beside it. [`Reply::to_bytes`] writes the
/// same JSON.
pub fn review_json(response: &AdmissionResponse) -> Value {
    let mut review = serde_json::to_value(response.clone().into_review()).expect("a review serializes");
    review["apiVersion"] = META_API_VERSION_V1.into();
    review["kind"] = META_KIND.into();
    if let Some(patch) = &response.patch {
        review["response"]["patch"] = base64::engine::general_purpose::STANDARD.encode(patch).into();
        review["response"]["patchType"] = "JSONPatch".into();
    }
    review
}

pub(super) fn text(reason: impl Into<String>) -> Reply {
    Reply {
        http_status: 400,
        body: Body::Text(reason.into()),
        outcome: Outcome::BadRequest,
        pending: None,
        link: None,
    }
}

pub(super) fn reply(response: AdmissionResponse, outcome: Outcome) -> Reply {
    Reply { http_status: 200, body: Body::Review(Box::new(response)), outcome, pending: None, link: None }
}

/// An allowing response to the request with `uid`.
pub(super) fn response_for(uid: &str) -> AdmissionResponse {
    let mut r = AdmissionResponse::invalid("");
    r.uid = uid.into();
    r.allowed = true;
    r.result = Status::default();
    r
}

/// A denial of a request that only has a uid (it did not decode).
pub(super) fn bad_request_for_uid(uid: &str, message: String) -> Reply {
    reply(deny(uid, 400, "BadRequest", message), Outcome::BadRequest)
}

pub(super) fn deny(uid: &str, code: u16, reason: &str, message: String) -> AdmissionResponse {
    let mut r = response_for(uid);
    r.allowed = false;
    r.result = Status::failure(&message, reason).with_code(code);
    r
}

/// Most causes a denial lists: a spec with more violations gets the first ones and a last
/// cause saying how many more there are (so a spec of a thousand bad items cannot make an
/// answer of megabytes; every real spec has far fewer).
pub const MAX_CAUSES: usize = 100;

/// The 422 `Invalid` answer, shaped like the API server's own field errors: one cause per
/// violation (at most [`MAX_CAUSES`]), every cause also in `message`.
pub(super) fn denied_invalid(
    uid: &str,
    name: &str,
    errors: &[FieldError],
    warns: &[String],
) -> AdmissionResponse {
    denied_invalid_of(GROUP, KIND, uid, name, errors, warns)
}

/// [`denied_invalid`] for an object of `group` and `kind` (a Link, a token Secret).
pub(super) fn denied_invalid_of(
    group: &str,
    kind: &str,
    uid: &str,
    name: &str,
    errors: &[FieldError],
    warns: &[String],
) -> AdmissionResponse {
    let mut listed: Vec<FieldError> = errors.iter().take(MAX_CAUSES).cloned().collect();
    if errors.len() > MAX_CAUSES {
        listed.push(FieldError {
            field: "spec".into(),
            error_type: ErrorType::TooMany,
            bad_value: Some(errors.len().into()),
            detail: format!(
                "violations: only the first {MAX_CAUSES} are listed; fix them and apply again to see the rest"
            ),
        });
    }
    let errors = &listed[..];
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
    let mut r = response_for(uid);
    r.allowed = false;
    r.result = Status {
        status: Some(StatusSummary::Failure),
        code: 422,
        reason: "Invalid".into(),
        message: if group.is_empty() {
            format!("{kind} {name:?} is invalid: {aggregate}")
        } else {
            format!("{kind}.{group} {name:?} is invalid: {aggregate}")
        },
        details: Some(StatusDetails {
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
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
