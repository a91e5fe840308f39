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
//! | `Progressing` | a rollout is under way (`True`) or complete (`False`) |
//! | `Degraded` | the last reconcile failed (`reason` names the stage) |

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use qdr_api::{Interconnect, InterconnectStatus};
use serde_json::json;

use super::apply::Applied;
use super::observe::Observed;
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

/// The status of a reconciled Interconnect.
pub fn desired(o: &Owner, observed: &Observed, applied: &Applied) -> InterconnectStatus {
    let generation = o.generation();
    let prev = o.ic().status.clone().unwrap_or_default();
    let pc = &prev.conditions;
    let w = applied.workload;
    let is_available = w.current && w.available >= w.desired;
    let progressing = !w.current || w.updated < w.desired;
    let is_ready = is_available && !progressing && w.ready >= w.desired;
    let msg =
        format!("{}/{} routers ready, {} updated, {} available", w.ready, w.desired, w.updated, w.available);
    InterconnectStatus {
        conditions: vec![
            condition(SPEC_VALID, true, "Valid", "the spec passed validation", generation, pc),
            condition(
                READY,
                is_ready,
                if is_ready { "RoutersReady" } else { "RoutersNotReady" },
                &msg,
                generation,
                pc,
            ),
            condition(
                AVAILABLE,
                is_available,
                if is_available { "MinimumRoutersAvailable" } else { "RoutersUnavailable" },
                &msg,
                generation,
                pc,
            ),
            condition(
                PROGRESSING,
                progressing,
                if progressing { "RollingOut" } else { "Complete" },
                &msg,
                generation,
                pc,
            ),
            condition(DEGRADED, false, "ReconcileSucceeded", "all children applied", generation, pc),
        ],
        observed_generation: Some(generation),
        pods: observed.pods.clone(),
        replicas: Some(w.desired),
        ready_replicas: Some(w.ready),
        updated_replicas: Some(w.updated),
    }
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

/// Writes `status` unless the stored one is the [`same`]. Returns whether it wrote.
///
/// # Errors
/// [`Error::Write`] when the patch is refused.
pub async fn write(
    client: &kube::Client,
    ic: &Interconnect,
    status: InterconnectStatus,
) -> Result<bool, Error> {
    if ic.status.as_ref().is_some_and(|old| same(old, &status)) {
        return Ok(false);
    }
    let api: Api<Interconnect> = Api::namespaced(client.clone(), &ic.namespace().unwrap_or_default());
    api.patch_status(&ic.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .map_err(Error::Write)?;
    Ok(true)
}
