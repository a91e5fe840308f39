//! Pure tests of what wakes a reconcile and of read-your-writes.

use std::sync::Arc;

use super::wake::{last_written_by_us, pod_state, status_only};
use super::{Drift, Written};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use qdr_api::Interconnect;
use serde_json::json;

/// Metadata with `managedFields` entries `(manager, subresource, time)`.
fn meta(entries: &[(&str, &str, &str)]) -> ObjectMeta {
    let fields: Vec<_> = entries
        .iter()
        .map(|(m, sub, t)| {
            let mut e = json!({"manager": m, "operation": "Update", "time": t});
            if !sub.is_empty() {
                e["subresource"] = json!(sub);
            }
            e
        })
        .collect();
    serde_json::from_value(json!({"name": "mesh", "namespace": "ns", "managedFields": fields,
        "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
            "name": "mesh", "uid": "u1", "controller": true}]}))
    .unwrap()
}

#[test]
fn only_a_strictly_newest_write_of_ours_is_an_echo() {
    // Created by us: the echo of our own apply.
    assert!(last_written_by_us(&meta(&[("qdr-operator", "", "2026-01-01T00:00:05Z")])));
    // A workload controller's status after ours: wakes.
    assert!(!last_written_by_us(&meta(&[
        ("qdr-operator", "", "2026-01-01T00:00:05Z"),
        ("kube-controller-manager", "status", "2026-01-01T00:00:06Z"),
    ])));
    // The same second: a tie wakes (one-second resolution).
    assert!(!last_written_by_us(&meta(&[
        ("qdr-operator", "", "2026-01-01T00:00:05Z"),
        ("kube-controller-manager", "status", "2026-01-01T00:00:05Z"),
    ])));
    // Someone else's older write, then ours: our response already reflected it.
    assert!(last_written_by_us(&meta(&[
        ("kubectl-edit", "", "2026-01-01T00:00:04Z"),
        ("qdr-operator", "", "2026-01-01T00:00:05Z"),
    ])));
    // Nothing of ours, or no managedFields at all: wakes.
    assert!(!last_written_by_us(&meta(&[("kubectl", "", "2026-01-01T00:00:05Z")])));
    assert!(!last_written_by_us(&ObjectMeta::default()));
}

#[test]
fn status_writes_after_ours_are_not_drift_but_spec_writes_are() {
    let status = meta(&[
        ("qdr-operator", "", "2026-01-01T00:00:05Z"),
        ("kube-controller-manager", "status", "2026-01-01T00:00:07Z"),
    ]);
    assert!(status_only(&status));
    let edited = meta(&[
        ("qdr-operator", "", "2026-01-01T00:00:05Z"),
        ("kube-controller-manager", "status", "2026-01-01T00:00:07Z"),
        ("kubectl-edit", "", "2026-01-01T00:00:08Z"),
    ]);
    assert!(!status_only(&edited));
    // An older edit, overwritten by our later apply, is not drift any more.
    let repaired = meta(&[
        ("kubectl-edit", "", "2026-01-01T00:00:04Z"),
        ("qdr-operator", "", "2026-01-01T00:00:05Z"),
        ("kube-controller-manager", "status", "2026-01-01T00:00:07Z"),
    ]);
    assert!(status_only(&repaired));
}

#[test]
fn drift_marks_the_controlling_interconnect_once() {
    let drift = Drift::default();
    drift.mark(&meta(&[]));
    assert!(drift.take("ns/mesh"));
    assert!(!drift.take("ns/mesh"), "taken once");
    let mut foreign = meta(&[]);
    foreign.owner_references.as_mut().unwrap()[0].controller = Some(false);
    drift.mark(&foreign);
    assert!(!drift.take("ns/mesh"), "only a controller reference counts");
}

fn deployment(rv: &str, generation: i64) -> Deployment {
    serde_json::from_value(json!({"metadata": {"name": "mesh", "namespace": "ns",
        "resourceVersion": rv, "generation": generation}}))
    .unwrap()
}

#[test]
fn a_written_workload_stands_in_until_the_store_shows_its_generation() {
    let written = Written::<Deployment>::default();
    written.record(deployment("20", 3));
    // The store still has generation 2: the written one is fresher.
    let stale = Some(Arc::new(deployment("15", 2)));
    assert_eq!(written.pick("ns", "mesh", stale).unwrap().metadata.generation, Some(3));
    // Missing from the store (its first watch event not yet arrived): the written one.
    assert_eq!(written.pick("ns", "mesh", None).unwrap().metadata.resource_version.as_deref(), Some("20"));
    // The store caught up (same generation, a later status): the store's, and forgotten.
    let current = Some(Arc::new(deployment("22", 3)));
    assert_eq!(written.pick("ns", "mesh", current).unwrap().metadata.resource_version.as_deref(), Some("22"));
    assert!(written.pick("ns", "mesh", None).is_none(), "forgotten once caught up");
    // Deleted: forgotten.
    written.record(deployment("30", 4));
    written.forget("ns", "mesh");
    assert!(written.pick("ns", "mesh", None).is_none());
}

fn interconnect(rv: &str, generation: i64, ready: &str) -> Interconnect {
    serde_json::from_value(json!({"metadata": {"name": "mesh", "namespace": "ns",
        "resourceVersion": rv, "generation": generation}, "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "r", "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    .unwrap()
}

#[test]
fn a_written_status_stands_in_until_the_store_shows_that_write_or_a_newer_spec() {
    let ready = |ic: &Interconnect| ic.status.as_ref().unwrap().conditions[0].status.clone();
    let written = Written::<Interconnect>::status_writes();
    written.record(interconnect("20", 1, "True"));
    // Same generation, another resourceVersion (the write's echo not yet arrived): ours.
    let stale = Some(Arc::new(interconnect("18", 1, "False")));
    assert_eq!(ready(&written.pick("ns", "mesh", stale).unwrap()), "True");
    // The store shows that very write: the store's.
    let echoed = Some(Arc::new(interconnect("20", 1, "True")));
    assert_eq!(written.pick("ns", "mesh", echoed).unwrap().metadata.resource_version.as_deref(), Some("20"));
    // A newer spec in the store beats an older written status.
    written.record(interconnect("25", 1, "True"));
    let newer = Some(Arc::new(interconnect("26", 2, "False")));
    assert_eq!(written.pick("ns", "mesh", newer).unwrap().metadata.generation, Some(2));
}

#[test]
fn pod_wake_ups_follow_readiness_scheduling_and_deletion_only() {
    let pod = |ip: &str, ready: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": {"phase": "Running", "podIP": ip,
            "conditions": [{"type": "Ready", "status": ready}, {"type": "PodScheduled", "status": "True"}]}}))
        .unwrap()
    };
    assert_eq!(pod_state(&pod("10.0.0.1", "True")), pod_state(&pod("10.0.0.2", "True")), "an IP is not news");
    assert_ne!(pod_state(&pod("10.0.0.1", "True")), pod_state(&pod("10.0.0.1", "False")));
    let mut deleting = pod("10.0.0.1", "True");
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
    assert_ne!(pod_state(&pod("10.0.0.1", "True")), pod_state(&deleting));
}
