//! AdmissionReview handling, pure: bytes in, an HTTP status and a typed
//! `AdmissionResponse` out. No I/O, so a dry-run request can have no side effect.
//!
//! The review is decoded by [`crate::decode`]: the request's fields typed, its objects left
//! raw, then only their name, namespace and spec read, the spec scanned against the CRD's
//! largest list and string and decoded as an [`InterconnectSpec`](qdr_api::InterconnectSpec) with the path of any type
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
//!
//! The handler's parts, one job each: `answer` takes the review apart and runs the others in
//! order; `request` reads the objects of a request; `default` applies the defaults and
//! writes the patch; `validate` lists the violations (ratcheted), the warnings and the
//! Secret references to authorize; `respond` shapes every answer.

mod answer;
mod default;
pub mod links;
mod request;
mod respond;
mod validate;

pub use answer::{answer, handle, handle_with};
pub use default::add_operations;
pub use respond::{
    Body, GROUP, KIND, LinkPending, MAX_CAUSES, Outcome, Pending, Reply, Webhook, review_json,
};
pub use validate::{Checks, MAX_WARNING, carried_warning};
