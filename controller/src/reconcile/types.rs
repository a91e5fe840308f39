//! What several stages share: condition types and reasons, the ownership of a child's name,
//! what applying did, and whether the generation is new. A stage module imports only the
//! stages before it and this module (observe → build → apply → status → events), so the
//! types that travel forward through a pass live here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::managed_fields::Adoption;
use crate::validated::ValidatedInterconnect;

/// Condition type: the effective spec passed [`qdr_api::validate`].
pub(crate) const SPEC_VALID: &str = "SpecValid";
/// Condition type: every desired router is ready and none is being rolled.
pub(crate) const READY: &str = "Ready";
/// Condition type: every desired router is available.
pub(crate) const AVAILABLE: &str = "Available";
/// Condition type: a rollout is under way (or a Secret the routers need is missing).
pub(crate) const PROGRESSING: &str = "Progressing";
/// Condition type: the last reconcile failed, or a child's name is taken.
pub(crate) const DEGRADED: &str = "Degraded";

/// Reason: the effective spec breaks a rule (`SpecValid=False`, `Ready=False`, and the
/// Warning Event).
pub(crate) const INVALID_SPEC: &str = "InvalidSpec";
/// Reason: a stage of the last reconcile failed (`Degraded=True`, and `Ready=False` when a
/// child could not be applied; the Warning Event).
pub(crate) const RECONCILE_FAILED: &str = "ReconcileFailed";
/// Reason: a child's name is taken by an object this Interconnect does not control.
pub(crate) const CONFLICTING_OBJECT: &str = "ConflictingObject";
/// Reason: a Secret the spec references is missing or lacks a key the router reads.
pub(crate) const MISSING_SECRET: &str = "MissingSecret";
/// Reason: a certificate a referenced Secret holds has expired (`Ready=False`).
pub(crate) const CERTIFICATE_EXPIRED: &str = "CertificateExpired";
/// Reason: a referenced Secret holds something the router cannot read: not a certificate,
/// or a key of another certificate (`Ready=False`, `Progressing=True`).
pub(crate) const INVALID_SECRET: &str = "InvalidSecret";
/// Reason: router pods the scheduler cannot place (their `PodScheduled=False` condition).
pub(crate) const UNSCHEDULABLE: &str = "Unschedulable";
/// Reason (`Progressing=False`): the workload a placement change made has not had all its
/// routers Ready within [`PLACEMENT_DEADLINE`]; the one it replaces keeps running. The name
/// is the Deployment controller's for the same state (`progressDeadlineSeconds`).
pub(crate) const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";

/// How long the workload a placement change made (`Any` ↔ `Every`: a Deployment replaced by a
/// DaemonSet or back) may take to have all its routers Ready before `Progressing` turns
/// `False` with [`PROGRESS_DEADLINE_EXCEEDED`]. The replaced workload is never deleted
/// before then, nor after: both run until the new one is whole (make before break). Ten
/// minutes, the Deployment controller's default `progressDeadlineSeconds`.
pub const PLACEMENT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// Visits in a row that may find a router of the current template refusing a live entity
/// of one configuration before the routers are rolled to start from it
/// ([`crate::builders::RESTARTED_FOR`]): with the reader's backoff ([`super::MESH_RECHECK`]
/// doubling: 2, 4, 8, 16 s) about half a minute of retries. Rolled once per configuration:
/// a router that refuses it after the roll too is left refusing, with `ConfigApplied=False`
/// saying so. A router that does not answer is not counted (`Reader::tries`).
pub const LIVE_TRIES: u32 = 5;

/// The API server's own words for a failed request, as `kubectl` prints them: the
/// `Status` message (which names the object and, for a refused write, the field, such as
/// `Service "mesh" is invalid: spec.ports[1].name: Duplicate value: "5672"`) with its code
/// and reason; any other error (transport, decoding) as it displays. Never a `Debug` dump.
pub(crate) fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => format!("{} ({} {})", s.message, s.code, s.reason),
        kube::Error::Api(s) => format!("{} {}", s.code, s.reason),
        other => other.to_string(),
    }
}

/// Whether `e` says the namespace is being deleted (`403 Forbidden`, cause
/// `NamespaceTerminating`) or the namespace or the Interconnect itself is already gone
/// (`404` for `namespaces` or `interconnects`; a 404 for another kind, such as an API that
/// is not served, stays an error): the end of an Interconnect's life, not a failure.
pub(crate) fn is_going_away(e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else { return false };
    let kind = s.details.as_ref().map(|d| d.kind.as_str()).unwrap_or_default();
    (s.code == 404 && matches!(kind, "namespaces" | "interconnects"))
        || (s.code == 403
            && (s.message.contains("because it is being terminated")
                || s.details.iter().flat_map(|d| &d.causes).any(|c| c.reason == "NamespaceTerminating")))
}

/// An object with a child's name that this Interconnect does not control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Its kind, such as `ServiceAccount`.
    pub kind: String,
    /// Its name (the child's name).
    pub name: String,
    /// Its controller as `Kind name`, if it has one.
    pub controller: Option<String>,
}

impl Conflict {
    /// The conflict of an existing object `kind`/`name` with owner references `refs`, or
    /// `None` when `ic` controls it (a controller reference with its uid).
    pub fn of(
        ic: &ValidatedInterconnect,
        kind: &str,
        name: &str,
        refs: &[OwnerReference],
    ) -> Option<Conflict> {
        if ic.controls(refs) {
            return None;
        }
        let controller =
            refs.iter().find(|r| r.controller == Some(true)).map(|r| format!("{} {}", r.kind, r.name));
        Some(Conflict { kind: kind.into(), name: name.into(), controller })
    }
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.controller {
            Some(c) => write!(f, "{} {} exists and is controlled by {c}", self.kind, self.name),
            None => {
                write!(f, "{} {} exists and is not controlled by this Interconnect", self.kind, self.name)
            }
        }
    }
}

/// Who holds a child's name.
#[derive(Debug, Clone, Default)]
pub(crate) enum Ownership<T = ()> {
    /// No object has the name.
    #[default]
    Free,
    /// A child of this Interconnect has it: what was read of it (`T`), and the take-over
    /// of its fields when the Go operator wrote them.
    Ours(T, Option<Adoption>),
    /// An object this Interconnect does not control has it: nothing may be applied.
    Foreign(Conflict),
    /// Not read: the labelled store does not show it and no create found it taken. Built
    /// as if nothing had the name, and written with a conditional create
    /// ([`super::apply`]), which the API server refuses when an object has it.
    Unverified,
}

impl<T> Ownership<T> {
    /// What was read of the child, when it is ours.
    pub(crate) fn ours(&self) -> Option<&T> {
        match self {
            Ownership::Ours(t, _) => Some(t),
            _ => None,
        }
    }
}

/// Whether this pass reconciles a generation for the first time. Orphans are pruned only
/// then, and the applies are never skipped then; decided from the stored status by
/// [`super::status::generation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Generation {
    /// The stored status does not report this generation as reconciled without error.
    New,
    /// `Degraded=False` at this `observedGeneration`: reconciled before.
    Reconciled,
}

/// The workload's counts after the apply, read from the object the API server returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadStatus {
    /// Routers wanted (`replicas`, or nodes scheduled for a DaemonSet).
    pub desired: i32,
    /// Routers whose pods are ready.
    pub ready: i32,
    /// Routers running the current pod template.
    pub updated: i32,
    /// Routers available (ready for `minReadySeconds`).
    pub available: i32,
    /// Whether the workload controller has observed the applied generation, so the counts
    /// describe the applied spec.
    pub current: bool,
}

impl WorkloadStatus {
    /// Whether every wanted router (at least one) runs the current template and is Ready,
    /// as the workload controller reports it for the applied generation: what a placement
    /// change waits for before the replaced workload is deleted. A DaemonSet that no node
    /// takes (`desired` 0) is never complete: deleting the routers it replaces would leave none.
    pub fn complete(&self) -> bool {
        self.current && self.desired >= 1 && self.ready >= self.desired && self.updated >= self.desired
    }
}

/// The workload of the other kind that still runs routers after a placement change, kept
/// until the new one is [`WorkloadStatus::complete`] (make before break).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Previous {
    /// `Deployment` or `DaemonSet`.
    pub kind: &'static str,
    /// Its name (the Interconnect's).
    pub name: String,
    /// Its Ready routers, from its status.
    pub ready: i32,
    /// How long the new workload has existed (from its `creationTimestamp`; zero when not
    /// known), against [`PLACEMENT_DEADLINE`].
    pub waiting: std::time::Duration,
}

/// What applying did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The workload's counts after the apply.
    pub workload: WorkloadStatus,
    /// Orphans deleted, as `Kind name`.
    pub pruned: Vec<String>,
    /// The workload a placement change replaces, while it still runs (`None` once pruned,
    /// and while the new workload is held).
    pub previous: Option<Previous>,
    /// Objects in the way: when not empty, nothing was written after the write that found
    /// one, and what the pass created for the routers was deleted again; nothing at all was
    /// written when the look-up before the writes found one.
    pub conflicts: Vec<Conflict>,
    /// Children whose fields written by the Go operator were taken over (`Kind name`): the
    /// apply then removed the ones this controller does not set.
    pub adopted: Vec<String>,
    /// Whether the workload and its router configuration were left as they were, because a
    /// Secret the new pods would mount is missing.
    pub held: bool,
    /// Whether someone else changed a child while it was being written (a drift mark the
    /// apply did not see is left, [`crate::cache::OwnWrites`]): the Interconnect is
    /// reconciled again at once, not at the next resync.
    pub again: bool,
}
