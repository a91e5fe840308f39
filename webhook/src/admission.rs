//! AdmissionReview handling, pure: bytes in, an HTTP status and a typed
//! [`AdmissionResponse`] out. No I/O, so a dry-run request can have no side effect.
//!
//! The review is decoded by [`crate::decode`]: the request's fields typed, its objects left
//! raw, then only their name, namespace and spec read, the spec scanned against the CRD's
//! largest list and string and decoded as an [`InterconnectSpec`] with the path of any type
//! error. So a review holds its body and one bounded typed spec per object.
//!
//! | input | answer |
//! |---|---|
//! | not JSON, not an `admission.k8s.io/v1` AdmissionReview, no `request`, no `request.uid` | HTTP 400, a plain-text reason (there is no uid to answer) |
//! | a request with a uid that does not decode (no `kind`, malformed `metadata`) | 200, `allowed: false`, code 400, the reason |
//! | a review of something other than an Interconnect | 200, `allowed: false`, code 400, the reason |
//! | DELETE or CONNECT | 200, allowed (nothing to check) |
//! | CREATE or UPDATE without `request.object` | 200, `allowed: false`, code 400 |
//! | an object that does not decode (`port: "x"`), or a list, object or string longer than any the CRD admits | mutate: allowed, no patch; validate: 422 `Invalid` with a cause at the field (`TooMany`, `TooLong` for the limits) |
//! | mutate, valid object | allowed, with the JSON Patch that adds what [`qdr_api::defaults`] adds |
//! | mutate, invalid object | 422 `Invalid` with every cause (before the API server's schema checks, which would hide the rest) |
//! | validate | allowed with warnings, or 422 `Invalid`, one cause per violation (at most [`MAX_CAUSES`]), every cause also in `message` |
//! | an image outside [`Checks::images`] | a `Forbidden` cause at `spec.deploymentPlan.image`, ratcheted like any other |
//! | CREATE, or UPDATE that names a Secret for a use the stored object did not ([`qdr_api::SecretUse`]: a new name, a more powerful field, a CA that starts signing) or changes the image | validate (and a mutate denial) carries a [`Pending`] of the Secret references the requesting user must be allowed to read; the server asks the API server ([`crate::authorize`]) and [`Reply::authorized`] adds a `Forbidden` cause per unreadable one |
//! | UPDATE that leaves `spec` as it was (labels, annotations, finalizers, status) | allowed, no patch; validate adds the stored violations as warnings |
//! | UPDATE of a spec whose `oldObject` already broke rules | **ratcheting**: only violations the update introduces or changes deny (compared by the identity of the offending item, type and value: [`crate::ratchet`]); the carried ones are warnings |
//! | CREATE with `metadata.generateName` and no name | validated under a stand-in name (`generateName` cut to 58 characters + 5 characters, the server's rule); mutate adds only the defaults that do not derive from the name |
//!
//! Ratcheting keeps objects written by the Go operator (which validated almost nothing)
//! updatable: they can be labelled, annotated, have a finalizer removed, or be fixed one
//! violation at a time. The controller still reconciles only valid specs (`SpecValid=False`
//! for the others), so nothing unsafe is deployed.

use std::collections::BTreeSet;

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::Status;
use kube::core::admission::{AdmissionResponse, META_API_VERSION_V1, META_KIND, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use qdr_api::{
    ErrorType, FieldError, ImagePolicy, Interconnect, InterconnectSpec, validate_defaulted, warnings,
};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::decode::{Parts, Request, Review, UidOnly, decode_spec, scan};

/// API group of Interconnects.
pub const GROUP: &str = "interconnectedcloud.github.io";
/// Kind of Interconnects.
pub const KIND: &str = "Interconnect";

/// The cluster's settings of the checks (pure data; the webhook's flags).
#[derive(Debug, Clone)]
pub struct Checks {
    /// Allowed router images (`--allowed-router-images`); default: any.
    pub images: ImagePolicy,
    /// Whether the Secret references are checked as the requesting user
    /// (`--authorize-secret-references`; default: yes): when not, no reply carries
    /// [`Reply::pending`], and nothing is gathered for it.
    pub authorize_references: bool,
}

impl Default for Checks {
    /// Any image; Secret references checked.
    fn default() -> Self {
        Checks { images: ImagePolicy::default(), authorize_references: true }
    }
}

impl Checks {
    /// Every violation of the defaulted `effective`: [`qdr_api::validate`] (as
    /// [`validate_defaulted`]: `effective` is defaulted) plus the image policy.
    fn violations(&self, effective: &Interconnect) -> Vec<FieldError> {
        let mut errors = validate_defaulted(effective);
        errors.extend(self.images.check(effective));
        errors
    }
}

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
    uid: String,
    name: String,
    errors: Vec<FieldError>,
    warnings: Vec<String>,
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
            Body::Review(r) => serde_json::to_vec(&ReviewOut::of(r)).expect("a review serializes"),
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
/// serializes them, borrowed (no copy of the response, no intermediate JSON value), with
/// `patch` as base64 and `patchType: JSONPatch` beside it (a patch is always a JSON Patch:
/// this crate sets `patch` to [`add_operations`]' text).
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
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
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
                patch: r.patch.as_ref().map(|p| base64::engine::general_purpose::STANDARD.encode(p)),
                patch_type: r.patch.as_ref().map(|_| "JSONPatch"),
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

fn text(reason: impl Into<String>) -> Reply {
    Reply { http_status: 400, body: Body::Text(reason.into()), outcome: Outcome::BadRequest, pending: None }
}

fn reply(response: AdmissionResponse, outcome: Outcome) -> Reply {
    Reply { http_status: 200, body: Body::Review(Box::new(response)), outcome, pending: None }
}

/// An allowing response to the request with `uid`.
fn response_for(uid: &str) -> AdmissionResponse {
    let mut r = AdmissionResponse::invalid("");
    r.uid = uid.into();
    r.allowed = true;
    r.result = Status::default();
    r
}

/// A denial of a request that only has a uid (it did not decode).
fn bad_request_for_uid(uid: &str, message: String) -> Reply {
    reply(deny(uid, 400, "BadRequest", message), Outcome::BadRequest)
}

fn deny(uid: &str, code: u16, reason: &str, message: String) -> AdmissionResponse {
    let mut r = response_for(uid);
    r.allowed = false;
    r.result = Status::failure(&message, reason).with_code(code);
    r
}

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

/// An object of a review: its metadata and typed spec (or why the spec is not one).
struct Object<'a> {
    parts: Parts<'a>,
    spec: Result<InterconnectSpec, FieldError>,
}

impl<'a> Object<'a> {
    /// Splits and decodes `raw`; the error is for a request that does not decode.
    fn of(raw: &'a RawValue) -> Result<Object<'a>, serde_json::Error> {
        let parts = Parts::of(raw)?;
        let spec = match parts.spec {
            Some(s) => scan(s).and_then(|()| decode_spec(Some(s))),
            None => decode_spec(None),
        };
        Ok(Object { parts, spec })
    }

    /// The Interconnect, when its spec decoded (or why not), made of this object's own
    /// metadata and spec: the typed spec is moved, never copied.
    fn into_interconnect(self) -> Result<Interconnect, FieldError> {
        let spec = self.spec?;
        let mut ic = Interconnect::new("", spec);
        let meta = self.parts.metadata;
        (ic.metadata.name, ic.metadata.generate_name, ic.metadata.namespace) =
            (meta.name, meta.generate_name, meta.namespace);
        Ok(ic)
    }
}

/// `ic` with [`qdr_api::apply_defaults`] applied in place under its own name: what
/// [`qdr_api::defaults`] returns, without copying the spec.
fn defaulted(mut ic: Interconnect) -> Interconnect {
    let name = ic.metadata.name.clone().unwrap_or_default();
    qdr_api::apply_defaults(&name, &mut ic.spec);
    ic
}

/// Whether two raw specs are the same JSON: equal text (the API server encodes both the
/// same way), or equal values once both are within the scan's limits.
fn same_spec(a: Option<&RawValue>, b: Option<&RawValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if a.get() == b.get() => true,
        (Some(a), Some(b)) => {
            scan(a).is_ok()
                && scan(b).is_ok()
                && serde_json::from_str::<Value>(a.get()).ok() == serde_json::from_str::<Value>(b.get()).ok()
        }
        _ => false,
    }
}

/// Answers one decoded request under `checks` (see the module docs).
pub fn answer(webhook: Webhook, req: &Request<'_>, checks: &Checks) -> Reply {
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
            let (effective, errors) = checked(ic, stand_in.as_deref(), checks);
            let (introduced, _) = ratcheted(&effective, errors);
            if !introduced.is_empty() {
                let mut r = reply(denied_invalid(&req.uid, &name, &introduced, &[]), Outcome::Denied);
                r.pending = pending(&effective, introduced, Vec::new());
                return r;
            }
            // Defaults under the object's own name: none derived from a name not yet picked.
            let patch = defaulting_patch(raw_spec, &effective);
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

/// The references of `effective` the requesting user must be allowed to read: on CREATE
/// all of them; on UPDATE each whose (use, Secret) pair the stored object did not have
/// ([`qdr_api::SecretUse`]: a Secret named anew, moved to a more powerful field such as
/// `caCert` → `issuer`, or a generated name such as `<name>-ca` that starts to sign), or all
/// of them when the image changes (a new image reads every mounted Secret). Names derived
/// from a name not yet picked (`generateName`) are left out: they are checked by the
/// validating webhook, which sees the picked name.
fn references_to_check(effective: &Interconnect, old: Option<&Interconnect>) -> Vec<(String, String)> {
    let mut refs = effective.secret_uses();
    if effective.metadata.name.as_deref().unwrap_or_default().is_empty() {
        let (users, issuer) = (effective.spec.users.is_some(), effective.spec.user_issuer().is_some());
        refs.retain(|(f, _, _)| match f.as_str() {
            "spec.users" => users,
            "spec.deploymentPlan.issuer" => issuer,
            _ => true,
        });
    }
    if let Some(old) = old {
        let image = |ic: &Interconnect| ic.spec.deployment_plan.as_ref().and_then(|p| p.image.clone());
        if image(old) == image(effective) {
            let before: std::collections::BTreeSet<(qdr_api::SecretUse, String)> =
                old.secret_uses().into_iter().map(|(_, name, usage)| (usage, name)).collect();
            refs.retain(|(_, name, usage)| !before.contains(&(*usage, name.clone())));
        }
    }
    refs.into_iter().map(|(field, name, _)| (field, name)).collect()
}

/// The warnings of `effective` that the stored object `old` (defaulted; on UPDATE) did not
/// already have: a risky state is announced once, by the write that introduces it (the
/// create that adds a default, the update that changes it), not on every later update.
fn new_warnings(effective: &Interconnect, old: Option<&Interconnect>) -> Vec<String> {
    let warns = warnings(effective);
    let Some(old) = old else { return warns };
    let before = warnings(old);
    warns.into_iter().filter(|w| !before.contains(w)).collect()
}

/// The name to report and, for a `generateName` create without a name, the stand-in name
/// to validate under: `generateName` cut to 58 characters plus 5 characters, as the API
/// server completes it (`names.SimpleNameGenerator`).
fn names(object: &Object<'_>, req: &Request<'_>) -> (String, Option<String>) {
    let meta = &object.parts.metadata;
    match (&meta.name, &meta.generate_name) {
        (Some(n), _) if !n.is_empty() => (n.clone(), None),
        (_, Some(g)) if !g.is_empty() => {
            let base: String = g.chars().take(58).collect();
            (g.clone(), Some(format!("{base}x0x0x")))
        }
        _ => (req.name.clone(), None),
    }
}

/// The defaulted `ic` (under its own name) and its violations under `checks`, validated
/// under `stand_in` when given (defaulted once more under that name, so the derived Secret
/// names are checked).
fn checked(ic: Interconnect, stand_in: Option<&str>, checks: &Checks) -> (Interconnect, Vec<FieldError>) {
    let under_stand_in = stand_in.map(|n| {
        let mut named = ic.clone();
        named.metadata.name = Some(n.into());
        checks.violations(&defaulted(named))
    });
    let effective = defaulted(ic);
    let errors = under_stand_in.unwrap_or_else(|| checks.violations(&effective));
    (effective, errors)
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

/// The JSON Patch text from the stored `spec` (its raw JSON; `None`: absent) to the
/// defaulted one, keeping only `add` operations: defaults never remove or change what the
/// user wrote, even where the typed round trip would (unknown fields, number formats,
/// explicit nulls). Empty when there is nothing to add.
fn defaulting_patch(spec: Option<&RawValue>, defaulted: &Interconnect) -> Vec<u8> {
    let after = serde_json::value::to_raw_value(&defaulted.spec).expect("a spec serializes");
    let mut out = Vec::new();
    match spec {
        Some(before) => adds(before, &after, &mut String::from("/spec"), &mut out),
        None => add(&mut out, "/spec", &after),
    }
    finish(out)
}

/// The `add` operations of the JSON Patch from `before` to `after` (JSON texts), as JSON
/// Patch text (RFC 6902; empty when there are none): the operations
/// `json_patch::diff(before, after)` lists, in its order, with its paths, without its
/// `remove`s and `replace`s. So every member of `after` missing from `before` (objects
/// compared name by name, arrays index by index) is added whole, written as `after`'s own
/// text. Only the containers on the way to a difference are split, never parsed into
/// values: members equal as text are skipped unread.
pub fn add_operations(before: &RawValue, after: &RawValue) -> Vec<u8> {
    let mut out = Vec::new();
    adds(before, after, &mut String::new(), &mut out);
    finish(out)
}

/// `,{"op":"add",...}` operations as a JSON array (the first comma becomes `[`).
fn finish(mut out: Vec<u8>) -> Vec<u8> {
    if !out.is_empty() {
        out[0] = b'[';
        out.push(b']');
    }
    out
}

/// Writes `,{"op":"add","path":pointer,"value":value}`.
fn add(out: &mut Vec<u8>, pointer: &str, value: &RawValue) {
    out.extend_from_slice(br#",{"op":"add","path":"#);
    serde_json::to_writer(&mut *out, pointer).expect("a string serializes");
    out.extend_from_slice(br#","value":"#);
    out.extend_from_slice(value.get().as_bytes());
    out.push(b'}');
}

/// An object member's name: borrowed from the JSON text, or decoded when it holds escapes.
#[derive(PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
struct Name<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);

/// One level of a JSON text: an object's members (by name, as `serde_json::Map` orders
/// them; the last of duplicate names wins, as there), an array's items, or anything else.
enum Level<'a> {
    Object(std::collections::BTreeMap<Name<'a>, &'a RawValue>),
    Array(Vec<&'a RawValue>),
    Other,
}

impl<'a> Level<'a> {
    /// Splits `raw` one level deep (valid JSON: the API server's, or serde_json's own).
    fn of(raw: &'a RawValue) -> Level<'a> {
        let text = raw.get();
        match text.trim_start().as_bytes().first() {
            Some(b'{') => serde_json::from_str(text).map_or(Level::Other, Level::Object),
            Some(b'[') => serde_json::from_str(text).map_or(Level::Other, Level::Array),
            _ => Level::Other,
        }
    }
}

/// Writes `,{"op":"add",...}` for each member of `after` missing from `before` under
/// `pointer` (a JSON Pointer), the first comma to be replaced by `[`.
fn adds(before: &RawValue, after: &RawValue, pointer: &mut String, out: &mut Vec<u8>) {
    if before.get() == after.get() {
        return;
    }
    let len = pointer.len();
    match (Level::of(before), Level::of(after)) {
        (Level::Object(b), Level::Object(a)) => {
            for (Name(key), value) in a {
                pointer.push('/');
                if key.contains(['~', '/']) {
                    pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                } else {
                    pointer.push_str(&key);
                }
                match b.get(&Name(key)) {
                    Some(old) => adds(old, value, pointer, out),
                    None => add(out, pointer, value),
                }
                pointer.truncate(len);
            }
        }
        (Level::Array(b), Level::Array(a)) => {
            for (i, value) in a.into_iter().enumerate() {
                use std::fmt::Write as _;
                let _ = write!(pointer, "/{i}");
                match b.get(i) {
                    Some(old) => adds(old, value, pointer, out),
                    None => add(out, pointer, value),
                }
                pointer.truncate(len);
            }
        }
        // Equal, or a `replace`: never a default's.
        _ => {}
    }
}

/// Most causes a denial lists: a spec with more violations gets the first ones and a last
/// cause saying how many more there are (so a spec of a thousand bad items cannot make an
/// answer of megabytes; every real spec has far fewer).
pub const MAX_CAUSES: usize = 100;

/// The 422 `Invalid` answer, shaped like the API server's own field errors: one cause per
/// violation (at most [`MAX_CAUSES`]), every cause also in `message`.
fn denied_invalid(uid: &str, name: &str, errors: &[FieldError], warns: &[String]) -> AdmissionResponse {
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

#[cfg(test)]
mod name_tests {
    use super::Name;
    use std::borrow::Cow;

    #[test]
    fn names_are_borrowed_unless_escaped() {
        let m: std::collections::BTreeMap<Name<'_>, u8> =
            serde_json::from_str(r#"{"plain":1,"a\u003cb":2}"#).unwrap();
        let kinds: Vec<(String, bool)> =
            m.keys().map(|Name(n)| (n.to_string(), matches!(n, Cow::Borrowed(_)))).collect();
        assert_eq!(kinds, [("a<b".to_string(), false), ("plain".to_string(), true)]);
    }
}
