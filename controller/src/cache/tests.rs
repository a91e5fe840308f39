//! Pure tests of what wakes a reconcile and of read-your-writes.

use std::sync::Arc;

use super::memo::Seen;
use super::memo::{Drift, Outside, OwnWrites};
use super::wake::{Listed, Relist, pod_state};
use super::written::Written;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
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

fn owned(rv: &str, generation: Option<i64>, annotations: &[(&str, &str)]) -> ObjectMeta {
    let mut m = meta(&[]);
    m.resource_version = Some(rv.into());
    m.generation = generation;
    m.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    m
}

#[test]
fn only_the_resource_version_a_write_returned_is_an_echo() {
    let (own, drift) = (OwnWrites::default(), Drift::default());
    let record = |kind: &str, m: &ObjectMeta| {
        own.begin(&drift, kind, "ns", m.name.as_deref().unwrap_or_default()).record(m)
    };
    // Never written in this term: someone else's (or the start of a term).
    assert_eq!(own.judge("Deployment", &owned("10", Some(2), &[])), Seen::Changed);
    record("Deployment", &owned("10", Some(2), &[]));
    assert_eq!(own.judge("Deployment", &owned("10", Some(2), &[])), Seen::Echo);
    // The workload controller's status (same generation and metadata), and the revision
    // annotation it sets: not drift.
    assert_eq!(own.judge("Deployment", &owned("11", Some(2), &[])), Seen::StatusOnly);
    let revised = owned("12", Some(2), &[("deployment.kubernetes.io/revision", "3")]);
    assert_eq!(own.judge("Deployment", &revised), Seen::StatusOnly);
    // A JSON-patch removal of a probe: a new generation, no managedFields trace: changed.
    assert_eq!(own.judge("Deployment", &owned("13", Some(3), &[])), Seen::Changed);
    // An annotation someone added: changed.
    assert_eq!(own.judge("Deployment", &owned("14", Some(2), &[("team", "a")])), Seen::Changed);
    // Kinds without a generation: any other version is a change.
    record("Service", &owned("20", None, &[]));
    assert_eq!(own.len(), 2);
    assert_eq!(own.judge("Service", &owned("20", None, &[])), Seen::Echo);
    assert_eq!(own.len(), 1, "its echo seen, a Service's entry is not kept");
    assert_eq!(own.judge("Service", &owned("21", None, &[])), Seen::Changed);
    // An echo that came before the write's answer (held) is not kept either.
    let pending = own.begin(&drift, "ConfigMap", "ns", "mesh");
    assert_eq!(own.judge("ConfigMap", &owned("30", None, &[])), Seen::Held);
    pending.record(&owned("30", None, &[]));
    assert_eq!(own.len(), 1);
    assert_eq!(drift.marked("ns/mesh"), None, "the held echo is no drift");
    // Kinds are apart; a deletion forgets.
    assert_eq!(own.judge("ConfigMap", &owned("20", None, &[])), Seen::Changed);
    own.forget("Service", &owned("21", None, &[]));
    assert_eq!(own.len(), 1);
}

#[test]
fn an_echo_seen_before_the_answer_is_held_and_dropped() {
    let (own, drift) = (OwnWrites::default(), Drift::default());
    // A create: its echo comes before its answer; held (no wake, no mark), then dropped.
    let create = own.begin(&drift, "ConfigMap", "ns", "mesh");
    assert_eq!(own.judge("ConfigMap", &owned("30", None, &[])), Seen::Held);
    create.record(&owned("30", None, &[]));
    assert_eq!(drift.marked("ns/mesh"), None, "its own echo is not drift");
    // Nothing kept once the echo is seen (a relist shows that version again as unchanged,
    // by the store, before any judge).
    assert_eq!(own.len(), 0);
    // Someone else's write seen while ours is in flight: marked when the answer differs.
    let apply = own.begin(&drift, "ConfigMap", "ns", "mesh");
    assert_eq!(own.judge("ConfigMap", &owned("31", None, &[])), Seen::Held);
    assert_eq!(own.judge("ConfigMap", &owned("32", None, &[])), Seen::Held);
    apply.record(&owned("32", None, &[]));
    assert!(drift.marked("ns/mesh").is_some(), "version 31 was someone else's");
    // A failed write: everything held was someone else's.
    let drift = Drift::default();
    let failed = own.begin(&drift, "ConfigMap", "ns", "mesh");
    assert_eq!(own.judge("ConfigMap", &owned("33", None, &[])), Seen::Held);
    drop(failed);
    assert!(drift.marked("ns/mesh").is_some());
    // Nothing pending: an unknown version is a change at once.
    assert_eq!(own.judge("ConfigMap", &owned("34", None, &[])), Seen::Changed);
    // A failed create of an object never written leaves nothing behind.
    let own = OwnWrites::default();
    drop(own.begin(&drift, "Secret", "ns", "ca"));
    assert_eq!(own.len(), 0);
}

#[test]
fn a_drift_mark_is_cleared_only_by_an_apply_that_saw_it() {
    let drift = Drift::default();
    assert_eq!(drift.marked("ns/mesh"), None);
    drift.mark(&meta(&[]));
    let seen = drift.marked("ns/mesh");
    assert!(seen.is_some());
    // A failed apply clears nothing: the mark stays for the next pass.
    assert_eq!(drift.marked("ns/mesh"), seen);
    // A new mark while the apply ran: the apply's clear leaves it.
    drift.mark(&meta(&[]));
    drift.clear("ns/mesh", seen);
    assert!(drift.marked("ns/mesh").is_some(), "a change during the apply is not lost");
    let seen = drift.marked("ns/mesh");
    drift.clear("ns/mesh", seen);
    assert_eq!(drift.marked("ns/mesh"), None);
    let mut foreign = meta(&[]);
    foreign.owner_references.as_mut().unwrap()[0].controller = Some(false);
    drift.mark(&foreign);
    assert_eq!(drift.marked("ns/mesh"), None, "only a controller reference counts");
    drift.mark(&meta(&[]));
    drift.forget("ns/mesh");
    assert_eq!(drift.marked("ns/mesh"), None);
}

fn svc(name: &str, rv: &str) -> PartialObjectMeta<Service> {
    let mut m = meta(&[]);
    m.name = Some(name.into());
    m.resource_version = Some(rv.into());
    PartialObjectMeta { types: None, metadata: m, _phantom: std::marker::PhantomData }
}

/// A first list, then a relist after a gap, seen by [`Relist`] before each event reaches
/// the store that `view` reads and `apply` fills.
fn relist_scenario(
    view: &impl super::wake::Versions<PartialObjectMeta<Service>>,
    mut apply: impl FnMut(&kube::runtime::watcher::Event<PartialObjectMeta<Service>>),
) {
    use kube::runtime::watcher::Event;
    let mut relist = Relist::default();
    let mut feed = |e: Event<PartialObjectMeta<Service>>, relist: &mut Relist| {
        let seen = relist.see(view, &e);
        apply(&e);
        seen
    };
    // The first list: everything is judged.
    assert!(matches!(feed(Event::Init, &mut relist), Listed::Unchanged));
    assert!(matches!(feed(Event::InitApply(svc("a", "1")), &mut relist), Listed::Judge));
    assert!(matches!(feed(Event::InitApply(svc("b", "2")), &mut relist), Listed::Judge));
    assert!(matches!(feed(Event::InitDone, &mut relist), Listed::Gone(g) if g.is_empty()));
    // A relist after a gap: `a` unchanged, `b` deleted meanwhile, `c` new.
    feed(Event::Init, &mut relist);
    assert!(matches!(feed(Event::InitApply(svc("a", "1")), &mut relist), Listed::Unchanged));
    assert!(matches!(feed(Event::InitApply(svc("c", "5")), &mut relist), Listed::Judge));
    match feed(Event::InitDone, &mut relist) {
        Listed::Gone(gone) => {
            let names: Vec<_> = gone.iter().map(|o| o.metadata.name.clone().unwrap()).collect();
            assert_eq!(names, ["b"]);
            // What wakes the owner of the gone object: its controller reference.
            assert_eq!(gone[0].metadata.owner_references, meta(&[]).owner_references);
        }
        other => panic!("expected the gone objects, got {other:?}"),
    }
    assert!(matches!(feed(Event::Apply(svc("a", "7")), &mut relist), Listed::Judge));
}

#[test]
fn a_relist_wakes_for_what_changed_or_went_and_not_for_the_rest() {
    let (store, mut writer) = kube::runtime::reflector::store::<PartialObjectMeta<Service>>();
    relist_scenario(&store, |e| writer.apply_watcher_event(e));
    let compact = super::meta_store::MetaStore::<Service>::default();
    let writer = compact.clone();
    relist_scenario(&compact, |e| writer.apply_watcher_event(e));
    assert_eq!(compact.len(), 2, "a and c");
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

/// A kind without a generation (a generated Secret): the written copy stands in until the
/// store shows that version or a later one. A change by someone else delivered after the
/// echo of the write was missed (the echo came before the answer) must not leave the written
/// copy in use: every replace built from it would be refused with 409 until the TTL.
#[test]
fn a_written_secret_stands_in_until_the_store_shows_that_version_or_a_later_one() {
    let secret = |rv: &str| -> Secret {
        serde_json::from_value(
            json!({"metadata": {"name": "mesh-ca", "namespace": "ns", "resourceVersion": rv}}),
        )
        .unwrap()
    };
    let written = Written::<Secret>::default();
    written.record(secret("20"));
    let older = Some(Arc::new(secret("18")));
    assert_eq!(
        written.pick("ns", "mesh-ca", older).unwrap().metadata.resource_version.as_deref(),
        Some("20")
    );
    let later = Some(Arc::new(secret("25")));
    assert_eq!(
        written.pick("ns", "mesh-ca", later).unwrap().metadata.resource_version.as_deref(),
        Some("25")
    );
    assert!(written.pick("ns", "mesh-ca", None).is_none(), "forgotten once caught up");
}

/// A pass that ends early deletes the Secrets it created ([`crate::reconcile::apply`]'s
/// undo) and the next pass creates them again, under the same names. The watch delivers the
/// deletion of the first after the second was written: it must not make the second look
/// missing (CI, stop 89: the next pass found the management CA "lost", replaced it and rolled
/// the routers a second time). Only the deletion of the very object written is forgotten.
#[test]
fn the_deletion_of_an_earlier_object_of_the_name_keeps_the_one_written_since() {
    let secret = |uid: &str, rv: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": "mesh-ca", "namespace": "ns", "uid": uid,
            "resourceVersion": rv, "labels": {"app.kubernetes.io/managed-by": "qdr-operator"}}}))
        .unwrap()
    };
    let written = Arc::new(Written::<Secret>::default());
    let (own, drift) = (Arc::new(OwnWrites::default()), Arc::new(Drift::default()));
    let mut wake = super::wake::owned_wake(own.clone(), drift.clone(), Some(written.clone()));
    // Created by the pass that ended early, deleted by its undo; created again.
    written.record(secret("second", "20"));
    own.begin(&drift, "Secret", "ns", "mesh-ca").record(&secret("second", "20").metadata);
    assert!(wake(&kube::runtime::watcher::Event::Delete(secret("first", "19"))), "a deletion wakes");
    let kept = written.pick("ns", "mesh-ca", None).expect("the Secret written since is kept");
    assert_eq!(kept.metadata.uid.as_deref(), Some("second"));
    // The echo of the second create is still known as the controller's own.
    assert_eq!(own.judge("Secret", &secret("second", "20").metadata), Seen::Echo);
    // Its own deletion forgets it.
    wake(&kube::runtime::watcher::Event::Delete(secret("second", "21")));
    assert!(written.pick("ns", "mesh-ca", None).is_none(), "deleted: forgotten");
    // A relist that finds the name gone gives no deletion revision (`watch.rs`): forgotten.
    written.record(secret("third", "30"));
    let mut gone = secret("third", "30");
    (gone.metadata.uid, gone.metadata.resource_version) = (None, None);
    wake(&kube::runtime::watcher::Event::Delete(gone));
    assert!(written.pick("ns", "mesh-ca", None).is_none(), "gone from a relist: forgotten");
}

/// The other order of the same race: the pass that ended early deleted the Secrets it created
/// (undo), and the next pass runs before the watch delivers those deletions. The store still
/// shows them, so that pass must read them as missing, or it plans with a CA that is gone
/// (CI, stop 101's warm run: the next pass created new credentials and users but kept the
/// deleted CA, a third found that CA "lost", and the adopted routers rolled twice). Only the
/// very object deleted reads as missing: one made again since under the name is the store's.
#[test]
fn a_secret_a_pass_deleted_again_is_missing_until_the_store_shows_it_gone() {
    let secret = |uid: &str, rv: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": "mesh-ca", "namespace": "ns", "uid": uid,
            "resourceVersion": rv}}))
        .unwrap()
    };
    let written = Written::<Secret>::default();
    written.record(secret("first", "20"));
    written.undone("ns", "mesh-ca", Some("first".into()));
    // The store has not caught up with the deletion: still the deleted object.
    let stale = secret("first", "20");
    assert!(written.gone("ns", "mesh-ca", Some(&stale)), "the deleted object is gone");
    assert!(written.pick("ns", "mesh-ca", Some(Arc::new(stale.clone()))).is_none());
    // Someone made another object of the name since: that one is there.
    let other = secret("other", "25");
    assert!(!written.gone("ns", "mesh-ca", Some(&other)));
    let picked = written.pick("ns", "mesh-ca", Some(Arc::new(other))).expect("the new object");
    assert_eq!(picked.metadata.uid.as_deref(), Some("other"));
    // Once the store showed something else, the deletion is settled: nothing is hidden.
    assert!(!written.gone("ns", "mesh-ca", Some(&stale)), "settled");
    // A write of the controller's since the deletion stands, whatever the store shows.
    written.undone("ns", "mesh-ca", Some("first".into()));
    written.record(secret("second", "30"));
    assert!(!written.gone("ns", "mesh-ca", Some(&stale)));
    let picked = written.pick("ns", "mesh-ca", Some(Arc::new(stale.clone()))).expect("the written one");
    assert_eq!(picked.metadata.uid.as_deref(), Some("second"));
    // The watch's deletion of the undone object settles it too.
    let fresh = Written::<Secret>::default();
    fresh.undone("ns", "mesh-ca", Some("first".into()));
    fresh.deleted(&secret("first", "21").metadata);
    assert!(!fresh.gone("ns", "mesh-ca", Some(&stale)), "the watch delivered the deletion");
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
fn a_written_status_is_forgotten_when_the_watch_delivers_it_without_a_pass() {
    // Interconnects wake passes by generation only, so the echo of a status write wakes no
    // pass that would `pick` (and forget) the written copy: the watch event itself must.
    let written = Arc::new(Written::<Interconnect>::status_writes());
    let mut stored = super::wake::written_stored(written.clone());
    let refs = super::memo::SecretReferences::default();
    let mut forgotten = Vec::new();
    let mut forget = |ic: &Interconnect| forgotten.push(ic.name_any());
    written.record(interconnect("20", 1, "True"));
    // An older version (a relist of before the write) leaves it standing in.
    let older = watcher::Event::Apply(interconnect("18", 1, "False"));
    super::wake::interconnect_seen(&older, &refs, &mut forget);
    stored(&older);
    assert!(written.pick("ns", "mesh", None).is_some(), "kept while the store is behind");
    // The write's echo: forgotten at once, not at the next pass (up to RESYNC later).
    let echo = watcher::Event::Apply(interconnect("20", 1, "True"));
    super::wake::interconnect_seen(&echo, &refs, &mut forget);
    stored(&echo);
    assert!(written.pick("ns", "mesh", None).is_none(), "forgotten when the watch delivered the write");
    // The same from a relist, once it is stored (at its end).
    written.record(interconnect("30", 1, "True"));
    let relisted = watcher::Event::InitApply(interconnect("30", 1, "True"));
    stored(&watcher::Event::Init);
    super::wake::interconnect_seen(&relisted, &refs, &mut forget);
    stored(&relisted);
    assert!(written.pick("ns", "mesh", None).is_some(), "kept until the relist is stored");
    stored(&watcher::Event::InitDone);
    assert!(written.pick("ns", "mesh", None).is_none(), "forgotten when a relist showed the write");
    assert!(forgotten.is_empty(), "nothing deleted");
    // The echo came before the write's answer: the store shows it when the answer is kept.
    let echoed = interconnect("40", 1, "True");
    written.record_seen(interconnect("40", 1, "True"), Some(&echoed));
    assert!(written.pick("ns", "mesh", None).is_none(), "an answer the store already shows is not kept");
    written.record_seen(interconnect("41", 1, "True"), Some(&echoed));
    assert!(written.pick("ns", "mesh", None).is_some(), "one the store does not show yet is kept");
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

fn ic(name: &str, uid: &str, generation: i64, spec: serde_json::Value) -> Interconnect {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "generation": generation}, "spec": spec}))
    .unwrap()
}

#[test]
fn a_secret_wakes_every_interconnect_that_names_it_but_its_controller() {
    let refs = super::memo::SecretReferences::default();
    let trusting = json!({"sslProfiles": [{"name": "peer", "caCert": "mesh-inter-router-ca"}]});
    refs.see(&ic("mesh", "u1", 1, json!({})));
    refs.see(&ic("client", "u2", 1, trusting.clone()));
    let names = |r: Vec<kube::runtime::reflector::ObjectRef<Interconnect>>| {
        let mut n: Vec<String> = r.into_iter().map(|r| r.name).collect();
        n.sort();
        n
    };
    // The generated CA of `mesh` (defaults name it) wakes `client`, not `mesh`, which its
    // own labelled watch wakes.
    assert_eq!(names(refs.referencing("ns", "mesh-inter-router-ca", Some("mesh"))), ["client"]);
    assert_eq!(names(refs.referencing("ns", "mesh-inter-router-ca", None)), ["client", "mesh"]);
    assert!(refs.referencing("other", "mesh-inter-router-ca", None).is_empty());
    // A new generation that names it no more: no longer woken; a deleted Interconnect neither.
    refs.see(&ic("client", "u2", 2, json!({})));
    assert!(refs.referencing("ns", "mesh-inter-router-ca", Some("mesh")).is_empty());
    refs.see(&ic("client", "u2", 3, trusting));
    assert_eq!(names(refs.referencing("ns", "mesh-inter-router-ca", Some("mesh"))), ["client"]);
    refs.forget("u2");
    assert!(refs.referencing("ns", "mesh-inter-router-ca", Some("mesh")).is_empty());
}

#[test]
fn a_name_outside_the_stores_is_remembered_by_kind_namespace_and_name_until_forgotten() {
    let outside = Outside::default();
    assert!(!outside.contains("Service", "ns", "broker"));
    outside.insert("Service", "ns", "broker");
    assert!(outside.contains("Service", "ns", "broker"));
    assert!(!outside.contains("Deployment", "ns", "broker"), "another kind");
    assert!(!outside.contains("Service", "other", "broker"), "another namespace");
    outside.remove("Deployment", "ns", "broker");
    assert!(outside.contains("Service", "ns", "broker"), "removing another kind keeps it");
    outside.remove("Service", "ns", "broker");
    assert!(!outside.contains("Service", "ns", "broker"));
}

/// The stores of every budget and policy leave out an Interconnect's own: labelled ours
/// and controlled by an Interconnect, both; an object with only one of the two (an admin's
/// copy of our label, an admin's object another controller owns, an Interconnect's that
/// is not its controller) is kept.
#[test]
fn only_an_interconnects_own_children_are_left_out_of_the_admin_stores() {
    use super::watch::interconnect_child;
    let of = |labelled: bool, kind: &str, api_version: &str, controller: bool| -> ObjectMeta {
        let labels = if labelled {
            json!({crate::labels::MANAGED_BY_KEY: crate::labels::MANAGED_BY})
        } else {
            json!({"team": "ops"})
        };
        serde_json::from_value(json!({"name": "mesh", "namespace": "ns", "labels": labels,
            "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "mesh", "uid": "u",
                                 "controller": controller}]}))
        .unwrap()
    };
    let ic = "interconnectedcloud.github.io/v1alpha1";
    assert!(interconnect_child(&of(true, "Interconnect", ic, true)));
    assert!(!interconnect_child(&of(false, "Interconnect", ic, true)), "not labelled ours");
    assert!(!interconnect_child(&of(true, "Interconnect", ic, false)), "owned, not controlled");
    assert!(!interconnect_child(&of(true, "Deployment", "apps/v1", true)), "controlled by another kind");
    assert!(!interconnect_child(&of(true, "Interconnect", "example.com/v1", true)), "another group's kind");
    assert!(!interconnect_child(&ObjectMeta::default()), "nothing at all");
}

/// The generated Secret `ns/mesh-ca` at `rv`, labelled as the operator's: what the
/// read-your-writes tests write and see echoed.
fn managed_ca_secret(rv: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": "mesh-ca", "namespace": "ns", "uid": "u",
        "resourceVersion": rv, "labels": {"app.kubernetes.io/managed-by": "qdr-operator"}}}))
    .unwrap()
}

/// An owned kind's written copy (a Deployment, a DaemonSet, a generated Secret) ends once
/// its store keeps the event that shows the write ([`super::wake::written_stored`], run by
/// `watch::reflect_compact` after the store), not when the event is judged: judged first,
/// a pass in between found neither the written copy nor the write in the store, and took
/// the older stored copy for the object as it is (stop 95, noticed).
#[test]
fn an_owned_kinds_written_copy_ends_once_the_store_keeps_its_echo_not_when_it_is_judged() {
    let secret = managed_ca_secret;
    let written = Arc::new(Written::<Secret>::default());
    let (own, drift) = (Arc::new(OwnWrites::default()), Arc::new(Drift::default()));
    let mut wake = super::wake::owned_wake(own.clone(), drift.clone(), Some(written.clone()));
    let mut stored = super::wake::written_stored(written.clone());
    written.record(secret("20"));
    own.begin(&drift, "Secret", "ns", "mesh-ca").record(&secret("20").metadata);
    let echo = watcher::Event::Apply(secret("20"));
    assert!(!wake(&echo), "the echo of the controller's own write wakes nothing");
    // Judged, not yet stored: a pass now reads the store's older copy, so the written one
    // must still stand in.
    let before_store = Some(Arc::new(secret("18")));
    assert_eq!(
        written.pick("ns", "mesh-ca", before_store).unwrap().metadata.resource_version.as_deref(),
        Some("20"),
        "judging the echo ended the written copy before the store kept it"
    );
    // Stored: the written copy ends, with no pass.
    stored(&echo);
    assert!(written.pick("ns", "mesh-ca", None).is_none(), "the store kept the echo: forgotten");
    // An older version stored (a relist of before the write) ends nothing.
    written.record(secret("30"));
    for event in [watcher::Event::Init, watcher::Event::InitApply(secret("25")), watcher::Event::InitDone] {
        stored(&event);
    }
    assert!(written.pick("ns", "mesh-ca", None).is_some(), "kept while the store is behind");
}

/// A relist shows its objects to the store only when it is done (`InitDone`: the compact
/// store and kube-runtime's both swap the list in whole), so a written copy the relist shows
/// ends then, not at its `InitApply`: ended there, a pass between the two found neither the
/// written copy nor the object in the store, and took a generated Secret for lost (a
/// management CA "lost" 0.8 s after it was written, stop 96's warm run).
#[test]
fn a_relisted_written_copy_ends_when_the_relist_is_stored_not_when_it_is_listed() {
    let secret = managed_ca_secret;
    let store = super::meta_store::SecretStore::default();
    store.apply_watcher_event(&watcher::Event::Init);
    store.apply_watcher_event(&watcher::Event::InitDone);
    let written = Arc::new(Written::<Secret>::default());
    written.record(secret("20"));
    let stored = |store: &super::meta_store::SecretStore| store.object("ns", "mesh-ca").map(Arc::new);
    let relist = [watcher::Event::Init, watcher::Event::InitApply(secret("20")), watcher::Event::InitDone];
    let mut stored_events = super::wake::written_stored(written.clone());
    for (i, event) in relist.iter().enumerate() {
        store.apply_watcher_event(event);
        stored_events(event);
        let seen = written.pick("ns", "mesh-ca", stored(&store));
        assert_eq!(
            seen.and_then(|s| s.metadata.resource_version.clone()).as_deref(),
            Some("20"),
            "after {:?} a pass found neither the written copy nor the stored Secret",
            ["Init", "InitApply", "InitDone"][i]
        );
    }
    assert_eq!(store.object("ns", "mesh-ca").unwrap().metadata.resource_version.as_deref(), Some("20"));
    assert!(written.pick("ns", "mesh-ca", None).is_none(), "the stored relist ended the written copy");
}

/// resourceVersions are ordered as Kubernetes defines it since 1.35 (KEP-5504, Comparable
/// Resource Version): positive decimal integers of any length without leading zeros,
/// compared as numbers; any other form is only equal or not. Versions past `u64::MAX` are
/// ordered too (where a `u64` parse left them unordered: the written copy stood in for a
/// newer stored one, and a late deletion forgot a write made after it), and a version with
/// a leading zero is not (where the parse ordered it).
#[test]
fn resource_versions_are_ordered_as_the_api_defines_them_at_any_length() {
    const MAX: &str = "18446744073709551615"; // u64::MAX
    const PAST: &str = "18446744073709551616";
    const LATER: &str = "18446744073709551617";
    let secret = |rv: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": "mesh-ca", "namespace": "ns", "uid": "u",
            "resourceVersion": rv}}))
        .unwrap()
    };
    // Read-your-writes: a stored copy of a later version has caught up with the written one.
    let written = Written::<Secret>::default();
    written.record(secret(PAST));
    let picked = written.pick("ns", "mesh-ca", Some(Arc::new(secret(LATER)))).unwrap();
    assert_eq!(picked.metadata.resource_version.as_deref(), Some(LATER), "the later stored copy");
    // A deletion delivered late (of an earlier version) keeps a write made since.
    assert!(super::written::written_since(&secret(PAST).metadata, &secret(MAX).metadata));
    assert!(!super::written::written_since(&secret(MAX).metadata, &secret(PAST).metadata));
    // Leading zeros are not a version the API gives: not ordered.
    assert!(!super::written::written_since(&secret("020").metadata, &secret("19").metadata));
    // The memo of own writes: a late deletion of an earlier version keeps the write's echo known.
    let (own, drift) = (OwnWrites::default(), Drift::default());
    own.begin(&drift, "Secret", "ns", "mesh-ca").record(&secret(LATER).metadata);
    own.forget("Secret", &secret(PAST).metadata);
    assert_eq!(own.judge("Secret", &secret(LATER).metadata), Seen::Echo, "the write made since is kept");
}
