//! Every condition reason and every Event reason the controller emits: the one list the
//! troubleshooting page of the book (`docs/troubleshooting.md`) is checked against
//! (`tests/tests/docs.rs`), so a new reason without a line there fails `make test`.
//!
//! The lists are kept true by the code that emits them: every condition the controller
//! builds goes through `reconcile::status::condition_of`, and every Event through
//! `Change::event`, which both check (in debug builds, so in every test) that the reason is
//! listed here; a unit test builds one Event of each kind and compares the sets both ways.

/// Condition types, each with every reason the controller sets on it (any status), in the
/// order the troubleshooting page gives them. Condition types are the Kubernetes API
/// conventions' (`Ready`, `Available`, `Progressing`, `Degraded`) and the operator's own
/// (`SpecValid`, `DisruptionBudget`, `NetworkPolicy`; with the routers read, `MeshConnected` and
/// `ConfigApplied`).
pub const CONDITIONS: &[(&str, &[&str])] = &[
    ("SpecValid", &["Valid", "InvalidSpec"]),
    (
        "Ready",
        &[
            "RoutersReady",
            "RoutersNotReady",
            "Unschedulable",
            "MissingSecret",
            "InvalidSecret",
            "CertificateExpired",
            "ConflictingObject",
            "InvalidSpec",
            "ReconcileFailed",
            "Partitioned",
            "EdgeNotUplinked",
        ],
    ),
    ("Available", &["MinimumRoutersAvailable", "RoutersUnavailable", "Unschedulable", "ConflictingObject"]),
    (
        "Progressing",
        &[
            "RollingOut",
            "Complete",
            "MissingSecret",
            "InvalidSecret",
            "ConflictingObject",
            "ProgressDeadlineExceeded",
        ],
    ),
    ("Degraded", &["ReconcileSucceeded", "ReconcileFailed", "ConflictingObject"]),
    (
        "MeshConnected",
        &[
            "Connected",
            "LinksMissing",
            "Partitioned",
            "EdgeNotUplinked",
            "RouterUnreachable",
            "NoRouters",
            "NotObserved",
        ],
    ),
    ("ConfigApplied", &["Applied", "RollingOut", "Applying", "Refused", "NoRouters"]),
    ("DisruptionBudget", &["Managed", "AdminBudget", "Disabled", "NotNeeded"]),
    ("NetworkPolicy", &["Managed", "AdminPolicy", "Disabled"]),
];

/// Every Event reason, with its type (`Normal` or `Warning`), in the order the
/// troubleshooting page gives them. Events are published on the Interconnect by the
/// leading replica (reporting controller `qdr-operator`), at most once per change.
pub const EVENTS: &[(&str, &str)] = &[
    ("Warning", "InvalidSpec"),
    ("Warning", "ConflictingObject"),
    ("Warning", "ReconcileFailed"),
    ("Warning", "MissingSecret"),
    ("Warning", "InvalidSecret"),
    ("Warning", "CertificateExpired"),
    ("Warning", "CertificateExpiring"),
    ("Warning", "Unschedulable"),
    ("Normal", "Scheduled"),
    ("Normal", "ConfigChanged"),
    ("Normal", "CredentialsChanged"),
    ("Normal", "Scaled"),
    ("Normal", "Pruned"),
    ("Normal", "Adopted"),
    ("Normal", "CertificateRenewed"),
    ("Normal", "CARotation"),
    ("Warning", "CAReplaced"),
    ("Warning", "PasswordsChanged"),
    ("Warning", "Partitioned"),
    ("Warning", "EdgeNotUplinked"),
    ("Normal", "MeshConnected"),
    ("Normal", "ConfigApplied"),
    ("Warning", "ConfigRefused"),
    ("Warning", "ConfigRolled"),
    ("Normal", "AdminDisruptionBudget"),
    ("Warning", "ConfigRestored"),
    ("Warning", "RouterIdClash"),
];

/// Every Event reason published on an AccessGrant or a Link (not on an Interconnect: so not
/// in [`EVENTS`] nor the troubleshooting page's table; docs/multi-cluster.md gives them).
pub const LINK_EVENTS: &[(&str, &str)] = &[("Warning", "GrantExpiring"), ("Warning", "LinkExpiring")];

/// Whether `reason` is listed for condition `type_` in [`CONDITIONS`].
pub fn is_condition_reason(type_: &str, reason: &str) -> bool {
    CONDITIONS.iter().any(|(t, reasons)| *t == type_ && reasons.contains(&reason))
}

/// Whether (`type_`, `reason`) is listed in [`EVENTS`].
pub fn is_event_reason(type_: &str, reason: &str) -> bool {
    EVENTS.iter().any(|&(t, r)| t == type_ && r == reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_reason_is_listed_twice() {
        for (t, reasons) in CONDITIONS {
            let mut seen = std::collections::BTreeSet::new();
            assert!(reasons.iter().all(|r| seen.insert(*r)), "{t}: a reason twice");
        }
        let mut seen = std::collections::BTreeSet::new();
        assert!(EVENTS.iter().all(|(_, r)| seen.insert(*r)), "an Event reason twice");
        assert!(is_condition_reason("Ready", "Unschedulable") && !is_condition_reason("Ready", "Applied"));
        assert!(is_event_reason("Warning", "CAReplaced") && !is_event_reason("Normal", "CAReplaced"));
    }

    /// The API reference and `kubectl explain` describe `status.conditions` from the CRD:
    /// it names every condition type the controller sets.
    #[test]
    fn the_crd_names_every_condition_type() {
        let crd = serde_json::to_value(qdr_api::crd()).unwrap();
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let said = status["properties"]["conditions"]["description"].as_str().unwrap();
        for (t, _) in CONDITIONS {
            assert!(said.contains(&format!("`{t}`")), "status.conditions does not name {t}: {said}");
        }
    }
}
