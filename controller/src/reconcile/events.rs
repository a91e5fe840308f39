//! Stage 5, **events**: what a pass changed that a user should hear about, as Kubernetes
//! Events on the Interconnect (events.k8s.io/v1, reporting controller `qdr-operator`). The
//! [`Change`]s are worked out purely from the whole pass ([`for_pass`]) and published once
//! its status is written, so an Event is never sent for a change that was not made. Events
//! are sent on transitions only, never once per pass.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::events::{Event, EventType};
use qdr_api::{Interconnect, InterconnectStatus};

use super::build::Report;
use super::observe::Observed;
use super::status::{
    ADMIN_BUDGET, APPLYING, CONFIG_APPLIED, CONFIG_REFUSED, DISRUPTION_BUDGET, MAX_MESSAGE, MESH_CONNECTED,
    conflicts_message, missing_message, problem_message,
};
use super::types::{
    CONFLICTING_OBJECT, DEGRADED, INVALID_SPEC, MISSING_SECRET, READY, RECONCILE_FAILED, SPEC_VALID,
    UNSCHEDULABLE,
};
use super::{Pass, Reconciled};
use crate::credentials::CredentialChange;
use crate::recorder::Recorder;
use crate::validated::namespaced_name;

/// How often at most a user-provided certificate's coming expiry is warned about.
pub(crate) const EXPIRY_WARNING_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// A change worth an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// Warning `InvalidSpec`: the spec of this generation is invalid (every violation).
    InvalidSpec(String),
    /// `ConfigChanged`: the router configuration changed in what a running router cannot
    /// take, so the routers roll; `live` when the rest is written to running routers (the
    /// note then says which part forced the roll).
    ConfigChanged {
        /// Whether the configuration has live entities ([`qdr_api::router_config::Rendered::live`]).
        live: bool,
        /// What changed ([`crate::builders::CONFIG_ROLLED_BY`]: the spec fields).
        by: String,
    },
    /// Warning `ConfigRolled`: a router refused a configuration while running at
    /// [`super::types::LIVE_TRIES`] visits in a row, so the routers roll to start from it
    /// (its short hash).
    ConfigRolled(String),
    /// Warning `ConfigRestored`: routers held live entities other than their configuration's
    /// (changed outside the operator), which were put back ([`super::read::MeshRead::restored`]).
    ConfigRestored(Vec<String>),
    /// `Scaled`: the number of routers changed.
    Scaled {
        /// Replicas before.
        from: i32,
        /// Replicas now.
        to: i32,
    },
    /// `Pruned`: children no longer wanted were deleted (`Kind name` each).
    Pruned(Vec<String>),
    /// Warning `ReconcileFailed`: a stage failed (the stage and the API server's message).
    ReconcileFailed(String),
    /// Warning `ConflictingObject`: a child's name is taken by a foreign object; nothing
    /// was applied.
    ConflictingObject(String),
    /// Warning `MissingSecret`: a referenced Secret is missing or lacks keys.
    MissingSecret(String),
    /// Warning `InvalidSecret` or `CertificateExpired` (the reason): a referenced Secret
    /// holds what cannot be used (the condition message).
    SecretProblem(&'static str, String),
    /// `CredentialsChanged`: a mounted Secret changed, so the routers roll.
    CredentialsChanged,
    /// `CertificateRenewed` or `CARotation`: generated credentials were renewed or a CA
    /// rotation step was taken.
    Credential(CredentialChange),
    /// Warning `CertificateExpiring`: a user-provided certificate expires soon.
    CertificateExpiring(String),
    /// Warning `Unschedulable`: router pods cannot be scheduled (the condition message:
    /// count and the scheduler's reasons).
    Unschedulable(String),
    /// `Scheduled`: every router pod is scheduled again after [`Change::Unschedulable`].
    Scheduled,
    /// `Adopted`: children written by the Go operator were taken over (`Kind name` each).
    Adopted(Vec<String>),
    /// Warning `Partitioned` or `EdgeNotUplinked` (the reason): the routers report a mesh
    /// that was connected as split, or an edge without its uplink (the condition message).
    MeshBroken(String, String),
    /// `MeshConnected`: the routers report one mesh again after [`Change::MeshBroken`] (or
    /// after the links formed at a start).
    MeshConnected(String),
    /// `ConfigApplied`: every router runs a new configuration, written to them while they
    /// run (docs/live-configuration.md); the condition's message.
    ConfigApplied(String),
    /// Warning `ConfigRefused`: a router refused a live entity; the condition's message.
    ConfigRefused(String),
    /// `AdminDisruptionBudget`: budgets of someone else's select the routers, so the
    /// operator makes none; the `DisruptionBudget` condition's message.
    AdminBudget(String),
    /// Warning `RouterIdClash`: a router of another site has an own router's id; its pod
    /// was replaced ([`crate::mesh::id_clashes`]): `pod (other)` each.
    RouterIdClash(Vec<String>),
}

impl Change {
    /// Whether this reports a change the pass made (a roll, a scale, pruned or adopted
    /// objects, a credential step), which a later pass will not see as a change; not a
    /// state that every pass re-derives and reports once (an invalid spec, a conflict, a
    /// missing Secret, scheduling, a coming expiry).
    pub(crate) fn is_made(&self) -> bool {
        matches!(
            self,
            Change::ConfigChanged { .. }
                | Change::ConfigRolled(_)
                | Change::ConfigRestored(_)
                | Change::Scaled { .. }
                | Change::Pruned(_)
                | Change::CredentialsChanged
                | Change::Credential(_)
                | Change::Adopted(_)
                | Change::RouterIdClash(_)
        )
    }

    /// The Event to publish.
    pub(crate) fn event(&self) -> Event {
        let (type_, reason, note) = match self {
            Change::InvalidSpec(m) => (EventType::Warning, INVALID_SPEC, m.clone()),
            Change::ConfigChanged { live: false, by } => (
                EventType::Normal,
                "ConfigChanged",
                format!("router configuration changed ({by}): rolling the routers"),
            ),
            Change::ConfigChanged { live: true, by } => (
                EventType::Normal,
                "ConfigChanged",
                format!(
                    "router configuration changed in what a running router cannot take ({by}): rolling the \
                     routers"
                ),
            ),
            Change::ConfigRolled(hash) => (
                EventType::Warning,
                "ConfigRolled",
                format!(
                    "a router refused configuration {hash} while running at {} visits in a row (see the \
                     ConfigApplied condition): rolling the routers to start from it",
                    super::types::LIVE_TRIES
                ),
            ),
            Change::ConfigRestored(routers) => (
                EventType::Warning,
                "ConfigRestored",
                format!(
                    "live entities changed outside the operator were put back to the configuration: {}",
                    routers.join("; ")
                ),
            ),
            Change::Scaled { from, to } => {
                (EventType::Normal, "Scaled", format!("routers scaled from {from} to {to}"))
            }
            Change::Pruned(objs) => (
                EventType::Normal,
                "Pruned",
                format!("deleted objects no longer wanted: {}", objs.join(", ")),
            ),
            Change::ConflictingObject(m) => (EventType::Warning, CONFLICTING_OBJECT, m.clone()),
            Change::ReconcileFailed(m) => (EventType::Warning, RECONCILE_FAILED, m.clone()),
            Change::MissingSecret(m) => (EventType::Warning, MISSING_SECRET, m.clone()),
            Change::SecretProblem(reason, m) => (EventType::Warning, *reason, m.clone()),
            Change::CredentialsChanged => (
                EventType::Normal,
                "CredentialsChanged",
                "mounted certificates or users changed: rolling the routers".into(),
            ),
            Change::Credential(c @ CredentialChange::Renewed { .. }) => {
                (EventType::Normal, "CertificateRenewed", c.to_string())
            }
            Change::Credential(c @ CredentialChange::CaReplaced { .. }) => {
                (EventType::Warning, "CAReplaced", c.to_string())
            }
            Change::Credential(c @ CredentialChange::PasswordsChanged(_)) => {
                (EventType::Warning, "PasswordsChanged", c.to_string())
            }
            Change::Credential(c) => (EventType::Normal, "CARotation", c.to_string()),
            Change::CertificateExpiring(m) => (EventType::Warning, "CertificateExpiring", m.clone()),
            Change::Unschedulable(m) => (EventType::Warning, UNSCHEDULABLE, m.clone()),
            Change::Scheduled => (EventType::Normal, "Scheduled", "every router is scheduled".into()),
            Change::MeshBroken(reason, m) => (EventType::Warning, reason.as_str(), m.clone()),
            Change::MeshConnected(m) => (EventType::Normal, MESH_CONNECTED, m.clone()),
            Change::ConfigApplied(m) => (EventType::Normal, CONFIG_APPLIED, m.clone()),
            Change::ConfigRefused(m) => (EventType::Warning, "ConfigRefused", m.clone()),
            Change::AdminBudget(m) => (EventType::Normal, "AdminDisruptionBudget", m.clone()),
            Change::RouterIdClash(pods) => (
                EventType::Warning,
                "RouterIdClash",
                format!(
                    "a router of another site has the id of this router, so the two cannot link: replaced the pod \
                     (its new name is its new id): {}",
                    pods.join(", ")
                ),
            ),
            Change::Adopted(objs) => (
                EventType::Normal,
                "Adopted",
                format!(
                    "took over the fields the Go operator wrote (those this controller does not set were removed): {}",
                    objs.join(", ")
                ),
            ),
        };
        debug_assert!(
            crate::reasons::is_event_reason(
                if type_ == EventType::Warning { "Warning" } else { "Normal" },
                reason
            ),
            "Event reason {reason} is not in qdr_controller::reasons::EVENTS (and the book's troubleshooting page)"
        );
        Event {
            type_,
            reason: reason.into(),
            // Cut to the API's limit by the recorder.
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        }
    }
}

/// The Events of a pass, in order, given the status it led to (`new`; `None` when it left
/// the status alone). Warnings about a state (invalid spec, conflict, missing Secret) are
/// sent once per generation, judged from the stored status; the scheduling Events on each
/// change of that state; a user certificate's coming expiry once per
/// [`EXPIRY_WARNING_INTERVAL`] (remembered in `expiry`).
pub(crate) fn for_pass(
    ic: &Interconnect,
    pass: &Pass,
    new: Option<&InterconnectStatus>,
    expiry: &ExpiryWarnings,
) -> Vec<Change> {
    let r = match pass {
        Pass::Wait(_) => return Vec::new(),
        Pass::Invalid(message) => return invalid_spec(ic, message).into_iter().collect(),
        Pass::Reconciled(r) => r,
    };
    let Reconciled { observed, report, applied, .. } = r.as_ref();
    if !applied.conflicts.is_empty() {
        return conflicting(ic, &conflicts_message(applied)).into_iter().collect();
    }
    let mut changes = planned(observed, report);
    if let Some(m) = r.mesh.as_ref().filter(|m| !m.restored.is_empty()) {
        changes.push(Change::ConfigRestored(m.restored.clone()));
    }
    if applied.held {
        // Nothing rolled: the workload was left as it was.
        changes.retain(|c| {
            !matches!(
                c,
                Change::ConfigChanged { .. }
                    | Change::ConfigRolled(_)
                    | Change::CredentialsChanged
                    | Change::Scaled { .. }
            )
        });
    }
    if !r.clashes.is_empty() {
        changes.push(Change::RouterIdClash(
            r.clashes.iter().map(|c| format!("{} ({})", c.pod, c.other)).collect(),
        ));
    }
    if !applied.adopted.is_empty() {
        changes.push(Change::Adopted(applied.adopted.clone()));
    }
    if !applied.pruned.is_empty() {
        changes.push(Change::Pruned(applied.pruned.clone()));
    }
    if !report.credentials.unmet.is_empty() {
        changes.extend(missing_secret(ic, &missing_message(&report.credentials, applied.held)));
    } else if let Some((reason, message)) = problem_message(&report.credentials, applied.held) {
        changes.extend((!reported(ic, READY, reason)).then_some(Change::SecretProblem(reason, message)));
    }
    changes.extend(new.and_then(|new| scheduling(ic, new)));
    changes.extend(new.and_then(|new| mesh(ic, new)));
    changes.extend(new.and_then(|new| config(ic, new)));
    changes.extend(new.and_then(|new| admin_budget(ic, new)));
    changes.extend(expiry.due(ic, &report.credentials.expiring));
    changes
}

/// The Event of a failed pass: Warning `ReconcileFailed` with `message`, unless the stored
/// status already reports exactly this failure (one Warning per distinct failure, not one
/// per retry; the retries are counted in the metrics).
pub(crate) fn for_failure(ic: &Interconnect, message: &str) -> Vec<Change> {
    let reported = ic.status.iter().flat_map(|s| &s.conditions).any(|c| {
        c.type_ == DEGRADED
            && c.reason == RECONCILE_FAILED
            && c.message == message.chars().take(MAX_MESSAGE).collect::<String>()
    });
    if reported { Vec::new() } else { vec![Change::ReconcileFailed(message.into())] }
}

/// When a `CertificateExpiring` Warning was last sent, by `namespace/name/secret`.
#[derive(Debug, Default)]
pub(crate) struct ExpiryWarnings {
    sent: Mutex<HashMap<String, Instant>>,
}

impl ExpiryWarnings {
    /// Forgets the warnings about Interconnect `key` (`namespace/name`, deleted).
    pub(crate) fn forget(&self, key: &str) {
        let prefix = format!("{key}/");
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| !k.starts_with(&prefix));
    }

    /// Whether a Warning about `key` (`namespace/interconnect/<what>`) is due: none was sent
    /// in the last [`EXPIRY_WARNING_INTERVAL`]; marks it sent when so.
    pub(crate) fn due_key(&self, key: String) -> bool {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let due = sent.get(&key).is_none_or(|t| now.duration_since(*t) >= EXPIRY_WARNING_INTERVAL);
        if due {
            sent.insert(key, now);
        }
        due
    }

    /// `CertificateExpiring` Warnings for `expiring` (Secret, line), each at most once per
    /// [`EXPIRY_WARNING_INTERVAL`] per Interconnect and Secret.
    fn due(&self, ic: &Interconnect, expiring: &[(String, String)]) -> Vec<Change> {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        expiring
            .iter()
            .filter(|(secret, _)| {
                let k = format!("{}/{secret}", namespaced_name(ic));
                let due = sent.get(&k).is_none_or(|t| now.duration_since(*t) >= EXPIRY_WARNING_INTERVAL);
                if due {
                    sent.insert(k, now);
                }
                due
            })
            .map(|(_, line)| Change::CertificateExpiring(line.clone()))
            .collect()
    }
}

/// `InvalidSpec` with `message` (every violation), unless the stored status already reports
/// this generation as invalid (one Warning per generation, not one per pass).
fn invalid_spec(ic: &Interconnect, message: &str) -> Option<Change> {
    (!reported(ic, SPEC_VALID, INVALID_SPEC)).then(|| Change::InvalidSpec(message.into()))
}

/// Whether the stored status already has condition `type_` with `reason` at the current
/// generation (a Warning was sent for it: one per generation, not one per pass).
fn reported(ic: &Interconnect, type_: &str, reason: &str) -> bool {
    let generation = ic.metadata.generation.unwrap_or_default();
    ic.status
        .iter()
        .flat_map(|s| &s.conditions)
        .any(|c| c.type_ == type_ && c.reason == reason && c.observed_generation == Some(generation))
}

/// `ConflictingObject` with `message`, once per generation.
fn conflicting(ic: &Interconnect, message: &str) -> Option<Change> {
    (!reported(ic, DEGRADED, CONFLICTING_OBJECT)).then(|| Change::ConflictingObject(message.into()))
}

/// `MissingSecret` with `message`, once per generation.
fn missing_secret(ic: &Interconnect, message: &str) -> Option<Change> {
    (!reported(ic, READY, MISSING_SECRET)).then(|| Change::MissingSecret(message.into()))
}

/// The scheduling Event of a pass, one per change of that state: `Unschedulable` when the
/// new status's `Ready` condition says routers cannot be scheduled and the stored one did
/// not say exactly that (a new count or a new scheduler reason is a change), `Scheduled`
/// when the stored one did and the new one does not. Comparing the two statuses (not memory)
/// keeps this right across restarts and leader changes.
pub(crate) fn scheduling(ic: &Interconnect, new: &InterconnectStatus) -> Option<Change> {
    let unschedulable = |s: Option<&InterconnectStatus>| {
        s.into_iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == READY && c.reason == UNSCHEDULABLE)
            .map(|c| c.message.clone())
    };
    match (unschedulable(ic.status.as_ref()), unschedulable(Some(new))) {
        (old, Some(now)) if old.as_ref() != Some(&now) => Some(Change::Unschedulable(now)),
        (Some(_), None) => Some(Change::Scheduled),
        _ => None,
    }
}

/// The Event of a transition of `MeshConnected` from the stored status to `new`, once per
/// transition: Warning (its reason) when a mesh that was connected (`True`) is reported
/// split or an edge loses its uplink (`False`); `MeshConnected` when a mesh reported `False`
/// is connected again. The links forming at a start (no condition, or `Unknown`, then
/// `False` for a moment) warn of nothing.
pub(crate) fn mesh(ic: &Interconnect, new: &InterconnectStatus) -> Option<Change> {
    let of = |s: Option<&InterconnectStatus>| {
        s.into_iter().flat_map(|s| &s.conditions).find(|c| c.type_ == MESH_CONNECTED).cloned()
    };
    let (old, now) = (of(ic.status.as_ref())?, of(Some(new))?);
    match (old.status.as_str(), now.status.as_str()) {
        ("True", "False") => Some(Change::MeshBroken(now.reason, now.message)),
        ("False", "True") => Some(Change::MeshConnected(now.message)),
        _ => None,
    }
}

/// The Event of `ConfigApplied` between the stored status and `new`, once per transition:
/// `ConfigApplied` when every router runs the configuration after live writes (the stored
/// condition was `False` with reason `Applying` or `Refused`: a roll's end is not one),
/// Warning `ConfigRefused` when the condition turns `Refused` or names another refusal.
pub(crate) fn config(ic: &Interconnect, new: &InterconnectStatus) -> Option<Change> {
    let of = |s: Option<&InterconnectStatus>| {
        s.into_iter().flat_map(|s| &s.conditions).find(|c| c.type_ == CONFIG_APPLIED).cloned()
    };
    let now = of(Some(new))?;
    let old = of(ic.status.as_ref());
    let old_reason = old.as_ref().filter(|o| o.status == "False").map(|o| o.reason.as_str());
    match (now.status.as_str(), now.reason.as_str()) {
        ("True", _) if matches!(old_reason, Some(APPLYING | CONFIG_REFUSED)) => {
            Some(Change::ConfigApplied(now.message))
        }
        ("False", CONFIG_REFUSED) if old.is_none_or(|o| o.message != now.message) => {
            Some(Change::ConfigRefused(now.message))
        }
        _ => None,
    }
}

/// The Event of the `DisruptionBudget` condition turning `AdminBudget`, or naming other
/// budgets, between the stored status and `new`: once per change (comparing the statuses
/// keeps this right across restarts and leader changes).
pub(crate) fn admin_budget(ic: &Interconnect, new: &InterconnectStatus) -> Option<Change> {
    let of = |s: Option<&InterconnectStatus>| {
        (s.into_iter().flat_map(|s| &s.conditions))
            .find(|c| c.type_ == DISRUPTION_BUDGET && c.reason == ADMIN_BUDGET)
            .map(|c| c.message.clone())
    };
    match (of(ic.status.as_ref()), of(Some(new))) {
        (old, Some(now)) if old.as_ref() != Some(&now) => Some(Change::AdminBudget(now)),
        _ => None,
    }
}

/// What applying the build over the `observed` workload changes: the config (a new hash),
/// the mounted credentials (a new fingerprint), the number of replicas (Deployments), and
/// renewed or rotated credentials.
pub(crate) fn planned(observed: &Observed, report: &Report) -> Vec<Change> {
    let mut changes: Vec<Change> =
        report.credentials.changes.iter().cloned().map(Change::Credential).collect();
    let Some(old) = observed.workload.ours() else { return changes };
    if old.config_hash.as_ref().is_some_and(|h| *h != report.config.startup_hash) {
        let by = report.roll.rolled_by.clone().unwrap_or_else(|| super::build::UNNAMED_CHANGE.into());
        changes.push(Change::ConfigChanged { live: report.config.live, by });
    }
    if let Some(hash) = &report.roll.restarted_for
        && old.roll.restarted_for.as_ref() != Some(hash)
    {
        changes.push(Change::ConfigRolled(hash.clone()));
    }
    if old.credentials_hash.as_ref().is_some_and(|h| *h != report.credentials.fingerprint) {
        changes.push(Change::CredentialsChanged);
    }
    if let Some(new) = report.replicas
        && old.replicas != Some(new)
    {
        changes.push(Change::Scaled { from: old.replicas.unwrap_or(0), to: new });
    }
    changes
}

/// Publishes one Event per change on `ic`. A failure is logged, never fatal: Events are
/// best effort.
pub(crate) async fn publish(
    recorder: &Recorder,
    ic: &Interconnect,
    changes: impl IntoIterator<Item = Change>,
) {
    let reference = ic.object_ref(&());
    for change in changes {
        tracing::debug!(reason = %change.event().reason, note = ?change.event().note, "event");
        if let Err(e) = recorder.publish(&change.event(), &reference).await {
            tracing::warn!(error = %e, reason = %change.event().reason, "could not publish event");
        }
    }
}
