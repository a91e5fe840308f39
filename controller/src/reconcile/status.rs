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
//! | `Progressing` | a rollout or placement change is under way or a Secret the routers need is missing (`True`), or complete (`False`); `False` `ProgressDeadlineExceeded` when a placement change's new routers are not all Ready within [`PLACEMENT_DEADLINE`] |
//! | `Degraded` | the last reconcile failed, or a child's name is taken by a foreign object |
//! | `MeshConnected` | (routers read) every router reaches every other, edges uplinked ([`with_mesh`]) |
//! | `ConfigApplied` | (routers read) every router runs the current configuration |
//! | `DisruptionBudget` | a PodDisruptionBudget guards the routers: the operator's, or the admin's ([`with_budget`]) |
//! | `NetworkPolicy` | a NetworkPolicy governs who reaches the routers: the operator's, or the admin's ([`with_policy`]) |
//!
//! Every reason the controller sets, by condition: [`crate::reasons::CONDITIONS`] (checked by
//! [`condition_of`] in debug builds).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use qdr_api::{Interconnect, InterconnectStatus, MAX_STATUS_PODS};

use super::read::MeshRead;
use crate::mesh::{Mode, Observation};
use serde_json::json;

use super::build::CredentialsReport;
use super::observe::{Observed, Unschedulable};
use super::types::{
    AVAILABLE, Applied, CERTIFICATE_EXPIRED, CONFLICTING_OBJECT, DEGRADED, Generation, INVALID_SECRET,
    INVALID_SPEC, MISSING_SECRET, PLACEMENT_DEADLINE, PROGRESS_DEADLINE_EXCEEDED, PROGRESSING, Previous,
    READY, RECONCILE_FAILED, SPEC_VALID, UNSCHEDULABLE,
};
use super::{Error as PassError, Pass};
use crate::builders::{Budget, Policy};
use crate::references::Problem;
use crate::validated::ValidatedInterconnect;
use qdr_api::router_config::short_hash as short;

/// Longest condition message written (the API's limit is 32 KiB).
pub(crate) const MAX_MESSAGE: usize = 32 * 1024;

/// Why writing the status failed: the merge patch of the status subresource was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status: {}", super::types::api_message(.0))]
    Write(#[source] kube::Error),
}

impl Error {
    /// Whether the Interconnect or its namespace is gone or going
    /// ([`super::types::is_going_away`]).
    pub(crate) fn is_going_away(&self) -> bool {
        match self {
            Error::Write(e) => super::types::is_going_away(e),
        }
    }
}

/// Whether the stored status reports the current generation as reconciled without error
/// (`Degraded=False` at this `observedGeneration`) and not held: a pass that held the
/// routers for a missing or invalid Secret (`Progressing` `MissingSecret`/`InvalidSecret`)
/// kept what it would otherwise prune (the other workload kind after a placement change), so
/// the generation counts as new until a pass applies it whole.
pub(crate) fn generation(ic: &Interconnect) -> Generation {
    let generation = ic.metadata.generation.unwrap_or_default();
    let conditions = || ic.status.iter().flat_map(|s| &s.conditions);
    let reconciled = conditions()
        .any(|c| c.type_ == DEGRADED && c.status == "False" && c.observed_generation == Some(generation));
    let held = conditions()
        .any(|c| c.type_ == PROGRESSING && [MISSING_SECRET, INVALID_SECRET].contains(&c.reason.as_str()));
    if reconciled && !held { Generation::Reconciled } else { Generation::New }
}

/// The status a pass leads to, or `None` when it leaves the status alone (a pass that
/// waited: the object is being deleted, the stores are listing, the observation was stale).
pub(crate) fn of(ic: &Interconnect, pass: &Result<Pass, PassError>) -> Option<InterconnectStatus> {
    match pass {
        Ok(Pass::Wait(_)) => None,
        Ok(Pass::Invalid(message)) => Some(for_invalid_spec(ic, message)),
        Ok(Pass::Reconciled(r)) => {
            let s = desired(&r.ic, &r.observed, &r.applied, &r.report.credentials);
            let s = match r.applied.conflicts.is_empty() {
                true => with_policy(with_budget(s, &r.ic, &r.report.budget), &r.ic, &r.report.policy),
                false => s,
            };
            Some(match &r.mesh {
                Some(m) if r.applied.conflicts.is_empty() => {
                    with_mesh(s, &r.ic, &r.observed, m, &r.report.config, r.report.roll.rolled_by.as_deref())
                }
                _ => s,
            })
        }
        Err(e) => Some(for_failure(ic, &e.to_string(), matches!(e, PassError::Apply(_)))),
    }
}

/// A condition of `type_` for `generation`, keeping the previous transition time when the
/// status is unchanged.
pub(crate) fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
    prev: &[Condition],
) -> Condition {
    condition_of(type_, if ok { "True" } else { "False" }, reason, message, generation, prev)
}

/// [`condition`] with any status (`True`, `False`, `Unknown`).
pub(crate) fn condition_of(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: i64,
    prev: &[Condition],
) -> Condition {
    debug_assert!(
        crate::reasons::is_condition_reason(type_, reason),
        "condition {type_} reason {reason} is not in qdr_controller::reasons::CONDITIONS (and the book's troubleshooting page)"
    );
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
pub(crate) fn conflicts_message(applied: &Applied) -> String {
    let list = applied.conflicts.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    format!(
        "{list}: left alone, and this Interconnect is not reconciled while they are in the way; rename the \
         Interconnect or remove them"
    )
}

/// The message of the [`MISSING_SECRET`] conditions: every unmet reference, and whether the
/// running routers were `held` (left on their last pod template) meanwhile.
pub(crate) fn missing_message(report: &CredentialsReport, held: bool) -> String {
    let list = report.unmet.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    if held {
        format!(
            "{list}: the running routers are left as they are (no rollout) until it exists again; new routers \
             cannot start without it"
        )
    } else {
        format!("{list}: the routers cannot start until it is created")
    }
}

/// The reason and message of the conditions for Secrets that exist but hold what cannot be
/// used ([`INVALID_SECRET`], before [`CERTIFICATE_EXPIRED`]), or `None`; `held` as in
/// [`missing_message`].
pub(crate) fn problem_message(report: &CredentialsReport, held: bool) -> Option<(&'static str, String)> {
    let of = |expired: bool| {
        report
            .problems
            .iter()
            .filter(|j| matches!(j.problem, Problem::Expired(_)) == expired)
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    let (invalid, expired) = (of(false), of(true));
    if !invalid.is_empty() {
        let then = if held {
            "the running routers are left as they are (no rollout) until it is fixed; new routers could not start"
        } else {
            "the routers cannot start until it is fixed"
        };
        return Some((INVALID_SECRET, format!("{}: {then}", invalid.join("; "))));
    }
    (!expired.is_empty()).then(|| {
        let what = "clients reject an expired certificate: replace it (the operator renews only the certificates \
                    it generates)";
        (CERTIFICATE_EXPIRED, format!("{}: {what}", expired.join("; ")))
    })
}

/// The message of the [`UNSCHEDULABLE`] conditions, such as `1 of 4 routers cannot be
/// scheduled: 0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. ...`:
/// the count of unplaced router pods, the number of routers wanted (`desired`, or more while
/// a rollout has extra pods) and the scheduler's distinct reasons, joined by `; `.
pub(crate) fn unschedulable_message(u: &Unschedulable, desired: i32) -> String {
    let pods = count(&u.pods);
    let of = desired.max(pods);
    let noun = if of == 1 { "router" } else { "routers" };
    format!("{pods} of {of} {noun} cannot be scheduled: {}", u.reasons.join("; "))
}

/// What the status messages add while a placement change's replaced workload runs, such as
/// `; placement change: DaemonSet mesh keeps its 1 ready router until Deployment mesh has
/// all its routers ready (waiting 2m 5s)`, and past [`PLACEMENT_DEADLINE`] `...; the
/// deadline of 10m passed: see why the new routers are not ready (Events, pods)`.
pub(crate) fn previous_message(p: &Previous) -> String {
    let new = if p.kind == "Deployment" { "DaemonSet" } else { "Deployment" };
    let noun = if p.ready == 1 { "router" } else { "routers" };
    let secs = p.waiting.as_secs();
    let mut m = format!(
        "; placement change: {} {} keeps its {} ready {noun} until {new} {} has all its routers ready (waiting {}m {}s)",
        p.kind,
        p.name,
        p.ready,
        p.name,
        secs / 60,
        secs % 60
    );
    if p.waiting >= PLACEMENT_DEADLINE {
        m.push_str(&format!(
            "; the deadline of {}m passed: see why the new routers are not ready (Events, pods)",
            PLACEMENT_DEADLINE.as_secs() / 60
        ));
    }
    m
}

/// The status of a reconciled Interconnect.
pub(crate) fn desired(
    o: &ValidatedInterconnect,
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
            selector: Some(selector_string(o)),
            ..prev
        };
    }
    let w = applied.workload;
    // Availability is the routers' own, whatever generation the workload controller has
    // observed: a new generation (a config change) does not make running routers
    // unavailable, so `Available` does not drop for the moment before it is observed.
    let is_available = w.available >= w.desired;
    // Router pods beyond the desired number (in the pod store, or still counted by the
    // workload controller, whichever is behind), or shutting down: old routers remain.
    let extra = [count(&observed.pods), w.ready, w.available].into_iter().max().unwrap_or(0) - w.desired;
    let old = extra.max(observed.terminating).max(0);
    // A rollout is pending until every wanted router runs the current template and is
    // available, and no old router remains (never "Complete" with routers unavailable or
    // with an old pod still terminating).
    let rolling =
        !w.current || w.updated < w.desired || !is_available || old > 0 || applied.previous.is_some();
    let is_ready = is_available
        && !rolling
        && w.ready >= w.desired
        && report.unmet.is_empty()
        && report.problems.is_empty();
    let mut msg =
        format!("{}/{} routers ready, {} updated, {} available", w.ready, w.desired, w.updated, w.available);
    if old > 0 {
        let noun = if old == 1 { "old router" } else { "old routers" };
        msg.push_str(&format!(", {old} {noun} still running or shutting down"));
    }
    let missing = (!report.unmet.is_empty())
        .then(|| (MISSING_SECRET, format!("{}; {msg}", missing_message(report, applied.held))))
        .or_else(|| problem_message(report, applied.held).map(|(r, m)| (r, format!("{m}; {msg}"))));
    let unschedulable = (!observed.unschedulable.is_empty())
        .then(|| unschedulable_message(&observed.unschedulable, w.desired));
    let (ready_reason, progressing_reason) = match (&missing, &unschedulable, is_ready, rolling) {
        (Some((CERTIFICATE_EXPIRED, _)), _, _, true) => (CERTIFICATE_EXPIRED, "RollingOut"),
        (Some((CERTIFICATE_EXPIRED, _)), _, _, false) => (CERTIFICATE_EXPIRED, "Complete"),
        (Some((reason, _)), _, _, _) => (*reason, *reason),
        (None, Some(_), _, true) => (UNSCHEDULABLE, "RollingOut"),
        (None, Some(_), _, false) => (UNSCHEDULABLE, "Complete"),
        (None, None, true, _) => ("RoutersReady", "Complete"),
        (None, None, false, true) => ("RoutersNotReady", "RollingOut"),
        (None, None, false, false) => ("RoutersNotReady", "Complete"),
    };
    // A router that cannot be scheduled is never ready, whatever the workload counts say.
    let is_ready = is_ready && unschedulable.is_none();
    let mut detail =
        missing.as_ref().map(|(_, m)| m.as_str()).or(unschedulable.as_deref()).unwrap_or(&msg).to_string();
    if let Some(p) = &applied.previous {
        detail.push_str(&previous_message(p));
    }
    let detail = detail.as_str();
    // An expired certificate is served: nothing is held or waits for it.
    let blocked = missing.as_ref().is_some_and(|(r, _)| *r != CERTIFICATE_EXPIRED);
    let (available_reason, available_message) = match (is_available, &unschedulable) {
        (true, _) => ("MinimumRoutersAvailable", msg.as_str()),
        (false, Some(u)) => (UNSCHEDULABLE, u.as_str()),
        (false, None) => ("RoutersUnavailable", msg.as_str()),
    };
    // A placement change whose new routers have not all come up in time: the replaced ones
    // keep running, and Progressing says the change is stuck (as a Deployment past its
    // progressDeadlineSeconds does).
    let stalled = !blocked && applied.previous.as_ref().is_some_and(|p| p.waiting >= PLACEMENT_DEADLINE);
    let progressing = match stalled {
        true => condition(PROGRESSING, false, PROGRESS_DEADLINE_EXCEEDED, detail, generation, pc),
        false => condition(PROGRESSING, rolling || blocked, progressing_reason, detail, generation, pc),
    };
    InterconnectStatus {
        conditions: vec![
            condition(SPEC_VALID, true, "Valid", "the spec passed validation", generation, pc),
            condition(READY, is_ready, ready_reason, detail, generation, pc),
            condition(AVAILABLE, is_available, available_reason, available_message, generation, pc),
            progressing,
            condition(DEGRADED, false, "ReconcileSucceeded", "all children applied", generation, pc),
        ],
        observed_generation: Some(generation),
        pods: capped(&observed.pods),
        pod_count: Some(count(&observed.pods)),
        replicas: Some(w.desired),
        ready_replicas: Some(w.ready),
        updated_replicas: Some(w.updated),
        selector: Some(selector_string(o)),
        // Filled by [`with_mesh`] when the routers are read.
        config_hash: None,
        mesh: None,
        routers: vec![],
    }
}

/// The router pods' label selector as a string, `k=v,k=v` in key order: `status.selector`,
/// the scale subresource's `labelSelectorPath`.
pub(crate) fn selector_string(o: &ValidatedInterconnect) -> String {
    o.selector().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The first [`MAX_STATUS_PODS`] of `pods` (sorted by name): a longer list would fail the
/// whole status write against the schema's `maxItems`.
pub(crate) fn capped(pods: &[String]) -> Vec<String> {
    pods[..pods.len().min(MAX_STATUS_PODS)].to_vec()
}

fn count(pods: &[String]) -> i32 {
    i32::try_from(pods.len()).unwrap_or(i32::MAX)
}

/// The status of an Interconnect whose spec is invalid: `SpecValid=False` with `message`
/// (every violation), `Ready=False`; counts and pods as before.
pub(crate) fn for_invalid_spec(ic: &Interconnect, message: &str) -> InterconnectStatus {
    let generation = ic.metadata.generation.unwrap_or_default();
    let prev = ic.status.clone().unwrap_or_default();
    InterconnectStatus {
        conditions: vec![
            condition(SPEC_VALID, false, INVALID_SPEC, message, generation, &prev.conditions),
            condition(
                READY,
                false,
                INVALID_SPEC,
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
/// failed stage and the API server's own message); when a child could not be applied
/// (`unapplied`), `Ready=False` too (the routers may not be what the spec asks for: a
/// Service without the listener's port serves nothing). Every other condition, and
/// `observedGeneration` (which never claims a generation whose children were not all
/// applied), as they were.
pub(crate) fn for_failure(ic: &Interconnect, message: &str, unapplied: bool) -> InterconnectStatus {
    let generation = ic.metadata.generation.unwrap_or_default();
    let prev = ic.status.clone().unwrap_or_default();
    let pc = &prev.conditions;
    let replaced = |t: &str| t == DEGRADED || (unapplied && t == READY);
    let mut conditions: Vec<Condition> = pc.iter().filter(|c| !replaced(&c.type_)).cloned().collect();
    if unapplied {
        let why = "a child could not be applied; see Degraded";
        conditions.push(condition(READY, false, RECONCILE_FAILED, why, generation, pc));
    }
    conditions.push(condition(DEGRADED, true, RECONCILE_FAILED, message, generation, pc));
    InterconnectStatus { conditions, ..prev }
}

/// Status equality that ignores condition timestamps.
pub(crate) fn equal_ignoring_times(a: &InterconnectStatus, b: &InterconnectStatus) -> bool {
    let strip = |s: &InterconnectStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(a) == strip(b)
}

/// `status` as a JSON merge patch (RFC 7386) that leaves nothing of the stored status
/// behind: a merge patch keeps every key it does not name, inside objects too, so the
/// fields the types leave out when absent or empty are named as `null` (removed): `mesh`,
/// `routers`, `configHash`, and `mesh.missingLinks`, `mesh.missingLinkCount` and
/// `mesh.unreachable`. Lists are
/// replaced whole.
pub(crate) fn merge_patch(status: &InterconnectStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        for k in ["mesh", "routers", "configHash"] {
            o.entry(k).or_insert(serde_json::Value::Null);
        }
        if let Some(mesh) = o.get_mut("mesh").and_then(|m| m.as_object_mut()) {
            for k in ["missingLinks", "missingLinkCount", "unreachable"] {
                mesh.entry(k).or_insert(serde_json::Value::Null);
            }
        }
    }
    v
}

/// Writes `status` unless the stored one is [`equal_ignoring_times`]. Returns the object as written,
/// or `None` when nothing needed writing.
///
/// # Errors
/// [`Error::Write`] when the patch is refused.
pub(crate) async fn write(
    client: &kube::Client,
    ic: &Interconnect,
    status: InterconnectStatus,
) -> Result<Option<Interconnect>, Error> {
    if ic.status.as_ref().is_some_and(|old| equal_ignoring_times(old, &status)) {
        return Ok(None);
    }
    let api: Api<Interconnect> = Api::namespaced(client.clone(), &ic.namespace().unwrap_or_default());
    api.patch_status(
        &ic.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": merge_patch(&status)})),
    )
    .await
    .map(Some)
    .map_err(Error::Write)
}

/// Type of the condition that says whether the routers form one mesh, as they report it.
pub(crate) const MESH_CONNECTED: &str = "MeshConnected";
/// Type of the condition that says whether every router runs the current configuration.
pub(crate) const CONFIG_APPLIED: &str = "ConfigApplied";
/// `ConfigApplied` reason while live entities are being written to the routers of the
/// current template, or those not read since are not known to hold them.
pub(crate) const APPLYING: &str = "Applying";
/// `ConfigApplied` reason when a router refused a live entity (docs/live-configuration.md).
pub(crate) const CONFIG_REFUSED: &str = "Refused";
/// `MeshConnected` reason when the routers are not read (docs/mesh-status.md).
pub(crate) const NOT_OBSERVED: &str = "NotObserved";

/// `status` (of [`desired`]) with what the routers report (`read`) and whether they run
/// the configuration `config`: `configHash`, `mesh`, `routers`, the conditions
/// `MeshConnected` and `ConfigApplied`, and `Ready` turned `False` (with the mesh's reason
/// and message) when the routers' pods are ready but the mesh is not connected
/// (`MeshConnected=False`). `Unknown` (a router that did not answer, routers not read) does
/// not change `Ready`: the pods' readiness stands (docs/mesh-status.md, "Simulated nodes").
pub(crate) fn with_mesh(
    mut status: InterconnectStatus,
    o: &ValidatedInterconnect,
    observed: &Observed,
    read: &MeshRead,
    config: &qdr_api::router_config::Rendered,
    rolled_by: Option<&str>,
) -> InterconnectStatus {
    use qdr_api::{
        MAX_STATUS_NAMED, MAX_STATUS_REASON, MAX_STATUS_ROUTERS, MeshStatus, MissingLink, RouterStatus,
    };
    let generation = o.generation();
    let prev = o.ic().status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let current = short(&config.hash);
    let prefix = o.router_config_prefix();
    let current_map = o.router_config_name(&config.startup_hash);
    let outcome = |p: &super::observe::RouterPod| match read.observations.get(&p.name) {
        Some(Observation::Answered(v)) => v.live.as_ref(),
        _ => None,
    };
    // The configuration a router runs: that of the ConfigMap its pod mounts; with live
    // entities, for a pod of the current template, the one whose live entities it answered
    // it holds (none until it answered).
    let hash_of = |p: &super::observe::RouterPod| {
        if config.live && p.config_map.as_deref() == Some(current_map.as_str()) {
            return outcome(p).filter(|l| l.applied).map(|l| short(&l.hash).to_string());
        }
        p.config_map.as_deref().and_then(|m| m.strip_prefix(&prefix)).map(String::from)
    };
    let n = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
    let reason = |why: &str| crate::mesh::answer::cut(why.to_string(), MAX_STATUS_REASON);
    // Counts only (no per-pair lists, no client or delivery counts: docs/mesh-status.md, "A
    // status of bounded size"), so the status changes when the mesh does and no more often.
    let routers: Vec<RouterStatus> = (observed.routers.iter().take(MAX_STATUS_ROUTERS))
        .map(|p| {
            let mut r = RouterStatus {
                pod: p.name.clone(),
                node: p.node.clone(),
                config_hash: hash_of(p),
                ..Default::default()
            };
            match read.observations.get(&p.name) {
                Some(Observation::Answered(v)) => {
                    r.id = Some(v.id.to_string());
                    r.mode = Some(match v.mode {
                        Mode::Interior => "interior".into(),
                        Mode::Edge => "edge".into(),
                    });
                    r.reached = Some(n(v.reaches.len()));
                    r.inter_router_links = Some(n(v.inter_router.len()));
                    r.edge_links = Some(n(v.edge.len()));
                    if v.mode == Mode::Edge {
                        r.uplink = v.edge.iter().filter(|l| l.outgoing).map(|l| l.peer.to_string()).min();
                    }
                }
                Some(Observation::Unreachable(why)) => r.error = Some(reason(why)),
                // Not asked yet; or not read at all, which the condition says once.
                Some(Observation::Pending(_)) | None => {}
            }
            r
        })
        .collect();
    let rep = &read.report;
    let edge = o.spec().role() == qdr_api::Role::Edge;
    let mut summary = match (&read.blocked, edge) {
        (Some(_), _) => "not read".to_string(),
        (None, false) => format!("{}/{} connected", rep.interiors_connected, rep.interiors_expected),
        (None, true) => format!("{}/{} uplinked", rep.edges_uplinked, rep.edges_expected),
    };
    if !rep.unreachable.is_empty() {
        summary.push_str(&format!(", {} not answering", rep.unreachable.len()));
    }
    let mut unreachable: Vec<String> = (rep.unreachable.iter())
        .take(MAX_STATUS_NAMED)
        .map(|(p, why)| format!("{p}: {}", reason(why)))
        .collect();
    if rep.unreachable.len() > MAX_STATUS_NAMED {
        unreachable.push(format!("and {} more", rep.unreachable.len() - MAX_STATUS_NAMED));
    }
    status.config_hash = Some(current.to_string());
    status.mesh = Some(MeshStatus {
        summary,
        interiors_expected: n(rep.interiors_expected),
        interiors_connected: n(rep.interiors_connected),
        edges_expected: n(rep.edges_expected),
        edges_uplinked: n(rep.edges_uplinked),
        missing_links: (rep.missing_links.iter())
            .take(MAX_STATUS_NAMED)
            .map(|(a, b)| MissingLink { from: a.clone(), to: b.clone() })
            .collect(),
        missing_link_count: n(rep.links_missing),
        remote_routers: n(crate::mesh::remote_routers(&read.observations)),
        unreachable,
    });
    status.routers = routers;

    let (mesh_status, mesh_reason, mesh_message) = match &read.blocked {
        Some(why) => ("Unknown", NOT_OBSERVED, format!("the routers are not read: {why}")),
        None => (rep.condition.status, rep.condition.reason, rep.condition.message.clone()),
    };
    // Whether every router runs the current configuration (and no old one still runs):
    // every pod, not only those listed.
    let total = observed.routers.len();
    let hashes: Vec<(&str, Option<String>)> =
        observed.routers.iter().map(|p| (p.name.as_str(), hash_of(p))).collect();
    let running = hashes.iter().filter(|(_, h)| h.as_deref() == Some(current)).count();
    let why_not = |p: &super::observe::RouterPod, h: &Option<String>| {
        let current_template = p.config_map.as_deref() == Some(current_map.as_str());
        match (outcome(p), h) {
            (Some(l), _) if current_template && l.refused.is_some() => {
                format!("{} refused {}", p.name, reason(l.refused.as_deref().unwrap_or_default()))
            }
            (_, None)
                if config.live
                    && current_template
                    && let Some(o @ Observation::Unreachable(why)) = read.observations.get(&p.name)
                    && super::read::half_applied(o) =>
            {
                format!("{}: {}", p.name, reason(why))
            }
            (_, None) if config.live && current_template => format!("{} not written yet", p.name),
            (_, h) => format!("{} runs {}", p.name, h.as_deref().unwrap_or("another")),
        }
    };
    let others: Vec<String> = (observed.routers.iter().zip(&hashes))
        .filter(|(_, (_, h))| h.as_deref() != Some(current))
        .take(8)
        .map(|(p, (_, h))| why_not(p, h))
        .collect();
    let refused = (observed.routers.iter()).any(|p| {
        p.config_map.as_deref() == Some(current_map.as_str())
            && outcome(p).is_some_and(|l| l.refused.is_some())
    });
    // Routers of another configuration's template run: a roll of the configuration.
    let other_config = observed.routers.iter().any(|p| p.config_map.as_deref() != Some(current_map.as_str()));
    let rolling = observed.terminating > 0 || other_config;
    let applied = total > 0 && running == total && observed.terminating == 0;
    let mut config_message = format!("{running}/{total} routers run configuration {current}");
    if !others.is_empty() {
        config_message.push_str(&format!(" ({})", others.join(", ")));
    }
    if observed.terminating > 0 {
        config_message.push_str(&format!("; {} old routers shutting down", observed.terminating));
    }
    // What forced a roll of the configuration, while it runs.
    if let Some(by) = rolled_by.filter(|_| other_config && !applied) {
        let cannot = if config.live { ", which a running router cannot take" } else { "" };
        config_message.push_str(&format!("; rolling the routers: {by} changed{cannot}"));
    }
    let config_reason = if applied {
        "Applied"
    } else if total == 0 {
        "NoRouters"
    } else if refused {
        CONFIG_REFUSED
    } else if rolling || !config.live {
        "RollingOut"
    } else {
        APPLYING
    };

    let mut conditions: Vec<Condition> = status
        .conditions
        .drain(..)
        .filter(|c| c.type_ != MESH_CONNECTED && c.type_ != CONFIG_APPLIED)
        .collect();
    // A mesh that is not connected keeps an otherwise ready Interconnect from Ready; and when
    // its routers are not Ready because they wait for their readiness gate (running, not
    // linked), the mesh says why better than "not ready".
    let waiting = observed.routers.iter().any(|p| p.waits_for_gate());
    let not_linked = |c: &Condition| c.status == "True" || (waiting && c.reason == "RoutersNotReady");
    if mesh_status == "False"
        && let Some(ready) = conditions.iter_mut().find(|c| c.type_ == READY && not_linked(c))
    {
        *ready = condition(READY, false, mesh_reason, &mesh_message, generation, prev);
    }
    conditions.push(condition_of(MESH_CONNECTED, mesh_status, mesh_reason, &mesh_message, generation, prev));
    conditions.push(condition(CONFIG_APPLIED, applied, config_reason, &config_message, generation, prev));
    status.conditions = conditions;
    status
}

/// Type of the condition that says which NetworkPolicy governs who reaches the routers.
pub(crate) const NETWORK_POLICY: &str = "NetworkPolicy";

/// `status` with the `NetworkPolicy` condition of what the build did about the routers'
/// NetworkPolicy ([`Policy`]): `True` when a policy governs them (`Managed`, with the ports
/// and who may reach them, or `AdminPolicy` naming the admin's), `False` with `Disabled`.
pub(crate) fn with_policy(
    mut status: InterconnectStatus,
    o: &ValidatedInterconnect,
    policy: &Policy,
) -> InterconnectStatus {
    let prev = o.ic().status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let list = |ports: &[i32]| ports.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    let (ok, reason, message) = match policy {
        Policy::Managed { open, routers, management } => {
            let mut parts = vec![format!("ports {} from anywhere", list(open))];
            if !routers.is_empty() {
                parts.push(format!("{} from router pods", list(routers)));
            }
            if let Some(port) = management {
                parts.push(format!("{port} from the controller's pods"));
            }
            (
                true,
                "Managed",
                format!("NetworkPolicy {}: {}; every other port closed", o.name(), parts.join("; ")),
            )
        }
        Policy::Admin(names) => {
            let (noun, verb) =
                if names.len() == 1 { ("NetworkPolicy", "selects") } else { ("NetworkPolicies", "select") };
            (
                true,
                "AdminPolicy",
                format!(
                    "{noun} {} {verb} the routers and admit{} connections: the operator makes none (policies add \
                     up, so its own would admit what they keep out)",
                    names.join(", "),
                    if names.len() == 1 { "s" } else { "" }
                ),
            )
        }
        Policy::Disabled => (
            false,
            "Disabled",
            "spec.deploymentPlan.networkPolicy.enabled is false: no NetworkPolicy".to_string(),
        ),
    };
    status.conditions.push(condition(NETWORK_POLICY, ok, reason, &message, o.generation(), prev));
    status
}

/// Type of the condition that says which PodDisruptionBudget guards the routers.
pub(crate) const DISRUPTION_BUDGET: &str = "DisruptionBudget";
/// `DisruptionBudget` reason when budgets of someone else's select the routers.
pub(crate) const ADMIN_BUDGET: &str = "AdminBudget";

/// `status` with the `DisruptionBudget` condition of what the build did about the routers'
/// PodDisruptionBudget ([`Budget`]): `True` when a budget guards them (`Managed`, or
/// `AdminBudget` naming the admin's), `False` when none does (`Disabled`, `NotNeeded`).
pub(crate) fn with_budget(
    mut status: InterconnectStatus,
    o: &ValidatedInterconnect,
    budget: &Budget,
) -> InterconnectStatus {
    let prev = o.ic().status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let (ok, reason, message) = match budget {
        Budget::Managed { bound, retiring: false } => {
            (true, "Managed", format!("PodDisruptionBudget {}: {bound}", o.name()))
        }
        Budget::Managed { bound, retiring: true } => (
            true,
            "Managed",
            format!(
                "PodDisruptionBudget {}: {bound}, over the routers of Deployment {} until the DaemonSet's are ready \
                 (placement change to Every)",
                o.name(),
                o.name()
            ),
        ),
        Budget::Admin(names) => {
            let (noun, verb) = if names.len() == 1 {
                ("PodDisruptionBudget", "selects")
            } else {
                ("PodDisruptionBudgets", "select")
            };
            (
                true,
                ADMIN_BUDGET,
                format!(
                    "{noun} {} {verb} the routers: the operator makes none (the Eviction API refuses to evict a pod \
                     that two budgets select)",
                    names.join(", ")
                ),
            )
        }
        Budget::Disabled => (
            false,
            "Disabled",
            "spec.deploymentPlan.disruptionBudget.enabled is false: no PodDisruptionBudget".to_string(),
        ),
        Budget::NotNeeded(why) => (false, "NotNeeded", format!("no PodDisruptionBudget: {why}")),
    };
    status.conditions.push(condition(DISRUPTION_BUDGET, ok, reason, &message, o.generation(), prev));
    status
}
