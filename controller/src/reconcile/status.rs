//! Stage 4, **status**: the conditions and counts of an Interconnect, computed purely from
//! what was observed and applied, and written (merge patch of the status subresource) only
//! when they changed, ignoring condition timestamps.
//!
//! Conditions follow the Kubernetes API conventions (one entry per type, `observedGeneration`,
//! `lastTransitionTime` kept while the status stays the same):
//!
//! | type | True when |
//! |---|---|
//! | `SpecValid` | the effective spec passed [`qdr_api::validate`] |
//! | `Ready` | every desired router is ready and none is being rolled |
//! | `Available` | every desired router is available |
//! | `Progressing` | a rollout is under way or a Secret the routers need is missing (`True`), or complete (`False`) |
//! | `Degraded` | the last reconcile failed, or a child's name is taken by a foreign object |
//!
//! Every reason the controller sets, by condition:
//!
//! | condition | reasons |
//! |---|---|
//! | `SpecValid` | `Valid`, `InvalidSpec` |
//! | `Ready` | `RoutersReady`, `RoutersNotReady`, `Unschedulable`, `MissingSecret`, `ConflictingObject`, `InvalidSpec` |
//! | `Available` | `MinimumRoutersAvailable`, `RoutersUnavailable`, `Unschedulable`, `ConflictingObject` |
//! | `Progressing` | `RollingOut`, `Complete`, `MissingSecret`, `ConflictingObject` |
//! | `Degraded` | `ReconcileSucceeded`, `ReconcileFailed`, `ConflictingObject` |

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use qdr_api::{Interconnect, InterconnectStatus, MAX_STATUS_PODS};
use serde_json::json;

use super::apply::Applied;
use super::build::CredentialsReport;
use super::observe::{Observed, Unschedulable};
use crate::owner::Owner;

/// Condition type: the spec passed validation.
pub const SPEC_VALID: &str = "SpecValid";
/// Condition type: every router ready.
pub const READY: &str = "Ready";
/// Condition type: every router available.
pub const AVAILABLE: &str = "Available";
/// Condition type: a rollout is under way.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the last reconcile failed.
pub const DEGRADED: &str = "Degraded";

/// Reason: a child's name is taken by an object this Interconnect does not control.
pub const CONFLICTING_OBJECT: &str = "ConflictingObject";
/// Reason: a Secret the spec references is missing or lacks a key the router reads.
pub const MISSING_SECRET: &str = "MissingSecret";

/// Reason: router pods the scheduler cannot place (their `PodScheduled=False` condition).
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// Longest condition message written (the API's limit is 32 KiB).
pub const MAX_MESSAGE: usize = 32 * 1024;

/// Why writing the status failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The status patch was refused.
    #[error("writing status: {0}")]
    Write(#[source] kube::Error),
}

/// A condition of `type_` for `generation`, keeping the previous transition time when the
/// status is unchanged.
pub fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
    prev: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last = prev
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.chars().take(MAX_MESSAGE).collect(),
        observed_generation: Some(generation),
        last_transition_time: last,
    }
}

/// The message of the [`CONFLICTING_OBJECT`] conditions: every conflict and what to do.
pub fn conflicts_message(applied: &Applied) -> String {
    let list = applied.conflicts.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    format!("{list}: nothing was applied; rename the Interconnect or remove the objects in the way")
}

/// The message of the [`MISSING_SECRET`] conditions: every unmet reference.
pub fn missing_message(report: &CredentialsReport) -> String {
    let list = report.unmet.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    format!("{list}: the routers cannot start until it is created")
}

/// The message of the [`UNSCHEDULABLE`] conditions, such as `1 of 4 routers cannot be
/// scheduled: 0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. ...`:
/// the count of unplaced router pods, the number of routers wanted (`desired`, or more while
/// a rollout has extra pods) and the scheduler's distinct reasons, joined by `; `.
pub fn unschedulable_message(u: &Unschedulable, desired: i32) -> String {
    let pods = count(&u.pods);
    let of = desired.max(pods);
    let noun = if of == 1 { "router" } else { "routers" };
    format!("{pods} of {of} {noun} cannot be scheduled: {}", u.reasons.join("; "))
}

/// The status of a reconciled Interconnect.
pub fn desired(
    o: &Owner,
    observed: &Observed,
    applied: &Applied,
    report: &CredentialsReport,
) -> InterconnectStatus {
    let generation = o.generation();
    let prev = o.ic().status.clone().unwrap_or_default();
    let pc = &prev.conditions;
    if !applied.conflicts.is_empty() {
        let msg = conflicts_message(applied);
        let c = |type_: &str, ok: bool| condition(type_, ok, CONFLICTING_OBJECT, &msg, generation, pc);
        return InterconnectStatus {
            conditions: vec![
                condition(SPEC_VALID, true, "Valid", "the spec passed validation", generation, pc),
                c(READY, false),
                c(AVAILABLE, false),
                c(PROGRESSING, false),
                c(DEGRADED, true),
            ],
            observed_generation: Some(generation),
            pods: capped(&observed.pods),
            pod_count: Some(count(&observed.pods)),
            ..prev
        };
    }
    let w = applied.workload;
    let is_available = w.current && w.available >= w.desired;
    // A rollout is pending until every wanted router runs the current template and is
    // available (never "Complete" with routers unavailable).
    let rolling = !w.current || w.updated < w.desired || !is_available;
    let is_ready = is_available && !rolling && w.ready >= w.desired && report.unmet.is_empty();
    let msg =
        format!("{}/{} routers ready, {} updated, {} available", w.ready, w.desired, w.updated, w.available);
    let missing = (!report.unmet.is_empty()).then(|| format!("{}; {msg}", missing_message(report)));
    let unschedulable = (!observed.unschedulable.is_empty())
        .then(|| unschedulable_message(&observed.unschedulable, w.desired));
    let (ready_reason, progressing_reason) = match (&missing, &unschedulable, is_ready, rolling) {
        (Some(_), _, _, _) => (MISSING_SECRET, MISSING_SECRET),
        (None, Some(_), _, true) => (UNSCHEDULABLE, "RollingOut"),
        (None, Some(_), _, false) => (UNSCHEDULABLE, "Complete"),
        (None, None, true, _) => ("RoutersReady", "Complete"),
        (None, None, false, true) => ("RoutersNotReady", "RollingOut"),
        (None, None, false, false) => ("RoutersNotReady", "Complete"),
    };
    // A router that cannot be scheduled is never ready, whatever the workload counts say.
    let is_ready = is_ready && unschedulable.is_none();
    let detail = missing.as_deref().or(unschedulable.as_deref()).unwrap_or(&msg);
    let (available_reason, available_message) = match (is_available, &unschedulable) {
        (true, _) => ("MinimumRoutersAvailable", msg.as_str()),
        (false, Some(u)) => (UNSCHEDULABLE, u.as_str()),
        (false, None) => ("RoutersUnavailable", msg.as_str()),
    };
    InterconnectStatus {
        conditions: vec![
            condition(SPEC_VALID, true, "Valid", "the spec passed validation", generation, pc),
            condition(READY, is_ready, ready_reason, detail, generation, pc),
            condition(AVAILABLE, is_available, available_reason, available_message, generation, pc),
            condition(PROGRESSING, rolling || missing.is_some(), progressing_reason, detail, generation, pc),
            condition(DEGRADED, false, "ReconcileSucceeded", "all children applied", generation, pc),
        ],
        observed_generation: Some(generation),
        pods: capped(&observed.pods),
        pod_count: Some(count(&observed.pods)),
        replicas: Some(w.desired),
        ready_replicas: Some(w.ready),
        updated_replicas: Some(w.updated),
    }
}

/// The first [`MAX_STATUS_PODS`] of `pods` (sorted by name): a longer list would fail the
/// whole status write against the schema's `maxItems`.
pub fn capped(pods: &[String]) -> Vec<String> {
    pods[..pods.len().min(MAX_STATUS_PODS)].to_vec()
}

fn count(pods: &[String]) -> i32 {
    i32::try_from(pods.len()).unwrap_or(i32::MAX)
}

/// The status of an Interconnect whose spec is invalid: `SpecValid=False` with `message`
/// (every violation), `Ready=False`; counts and pods as before.
pub fn invalid(ic: &Interconnect, message: &str) -> InterconnectStatus {
    let generation = ic.metadata.generation.unwrap_or_default();
    let prev = ic.status.clone().unwrap_or_default();
    InterconnectStatus {
        conditions: vec![
            condition(SPEC_VALID, false, "InvalidSpec", message, generation, &prev.conditions),
            condition(
                READY,
                false,
                "InvalidSpec",
                "the spec is invalid; see SpecValid",
                generation,
                &prev.conditions,
            ),
        ],
        observed_generation: Some(generation),
        ..prev
    }
}

/// The stored status with `Degraded=True`, reason `ReconcileFailed` and `message` (the
/// failed stage and its error); every other condition as it was.
pub fn failed(ic: &Interconnect, message: &str) -> InterconnectStatus {
    let generation = ic.metadata.generation.unwrap_or_default();
    let prev = ic.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> =
        prev.conditions.iter().filter(|c| c.type_ != DEGRADED).cloned().collect();
    conditions.push(condition(DEGRADED, true, "ReconcileFailed", message, generation, &prev.conditions));
    InterconnectStatus { conditions, ..prev }
}

/// Status equality that ignores condition timestamps.
pub fn same(a: &InterconnectStatus, b: &InterconnectStatus) -> bool {
    let strip = |s: &InterconnectStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(a) == strip(b)
}

/// Writes `status` unless the stored one is the [`same`]. Returns the object as written,
/// or `None` when nothing needed writing.
///
/// # Errors
/// [`Error::Write`] when the patch is refused.
pub async fn write(
    client: &kube::Client,
    ic: &Interconnect,
    status: InterconnectStatus,
) -> Result<Option<Interconnect>, Error> {
    if ic.status.as_ref().is_some_and(|old| same(old, &status)) {
        return Ok(None);
    }
    let api: Api<Interconnect> = Api::namespaced(client.clone(), &ic.namespace().unwrap_or_default());
    api.patch_status(&ic.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .map(Some)
        .map_err(Error::Write)
}
