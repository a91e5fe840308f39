//! Disruption budgets that coexist with the ones cluster admins already run (issue 72): a
//! PodDisruptionBudget of the admin's that selects the routers (under the operator's name or
//! another) is kept, the operator makes none, says so, and a node drain goes through; the
//! operator's budget keeps covering the routers that serve through a placement change, and
//! never selects a DaemonSet's pods.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::Selector;
use serde_json::json;

use super::{SETTLE, names_of, settled, setup};
use crate::common::{self, condition_with_reason, events, eventually, interconnects};

/// A PodDisruptionBudget of the admin's, `name`, over the pods labelled `selector`.
async fn admin_budget(
    ns: &qdr_tests::TestNamespace,
    name: &str,
    selector: serde_json::Value,
    bound: serde_json::Value,
) {
    let budgets: Api<PodDisruptionBudget> = ns.api();
    let mut spec = json!({"selector": {"matchLabels": selector}});
    spec.as_object_mut().unwrap().extend(bound.as_object().unwrap().clone());
    let pdb = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    budgets.create(&PostParams::default(), &pdb).await.unwrap();
}

/// The running pods a budget's selector selects.
async fn selected(ns: &qdr_tests::TestNamespace, pdb: &PodDisruptionBudget) -> Vec<Pod> {
    let selector: Selector = pdb.spec.clone().unwrap().selector.unwrap().try_into().unwrap();
    let pods: Api<Pod> = ns.api();
    let list = pods.list(&ListParams::default().labels_from(&selector)).await.unwrap();
    list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// The admin's budget under the operator's name: kept, not a conflict; under another name:
/// the operator makes none (else every eviction of a router is answered 500, "more than one
/// PodDisruptionBudget"), and `kubectl drain` of a node with a router goes through. The
/// `DisruptionBudget` condition names the admin's budget, and one Event says so.
#[tokio::test]
async fn an_admins_budget_is_kept_and_a_drain_goes_through() {
    // Held from the start: the drain cordons a node (and is judged on the state just settled).
    let _cordons = super::CORDONS.lock().await;
    let cp = setup().await;
    let ns = cp.namespace("sched-admin-pdb").await;
    let budgets: Api<PodDisruptionBudget> = ns.api();
    // Under the operator's name, made before the Interconnect (as an admin of the Go
    // operator's routers did).
    admin_budget(&ns, "same", json!({"application": "same"}), json!({"minAvailable": 1})).await;
    common::create_interconnect(&ns, "same", json!({"deploymentPlan": {"size": 2}})).await;
    settled(&ns, "same", 2, true).await;
    let cond = condition_with_reason(&ns, "same", "DisruptionBudget", "AdminBudget").await;
    assert_eq!(cond["status"], "True", "{cond}");
    assert!(cond["message"].as_str().unwrap().contains("PodDisruptionBudget same"), "{cond}");
    let kept = budgets.get("same").await.unwrap();
    assert!(kept.metadata.owner_references.is_none(), "the admin's budget was taken over: {kept:?}");
    assert_eq!(
        kept.spec.unwrap().min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );

    // Under another name, made after the Interconnect: the operator's own is deleted.
    common::create_interconnect(&ns, "other", json!({"deploymentPlan": {"size": 2}})).await;
    settled(&ns, "other", 2, true).await;
    eventually("the operator's budget for other", SETTLE, || async { budgets.get_opt("other").await.ok()? })
        .await;
    admin_budget(&ns, "other-routers", json!({"interconnect_cr": "other"}), json!({"maxUnavailable": 1}))
        .await;
    eventually("the operator's budget deleted", SETTLE, || async {
        budgets.get_opt("other").await.ok()?.is_none().then_some(())
    })
    .await;
    let cond = condition_with_reason(&ns, "other", "DisruptionBudget", "AdminBudget").await;
    assert!(cond["message"].as_str().unwrap().contains("PodDisruptionBudget other-routers"), "{cond}");
    // The Event of a pass is published after its status is written: it may land just after
    // the condition is read.
    eventually("one AdminDisruptionBudget Event for each Interconnect", SETTLE, || async {
        (events(&ns, "AdminDisruptionBudget").await >= 2).then_some(())
    })
    .await;
    let admins = budgets.get("other-routers").await.unwrap();
    eventually("the admin's budget allows one disruption", SETTLE, || async {
        let p = budgets.get_opt("other-routers").await.ok()??;
        (p.status.as_ref()?.disruptions_allowed == 1).then_some(())
    })
    .await;
    assert_eq!(selected(&ns, &admins).await.len(), 2);

    // A drain of the node of one router, through the Eviction API (only this Interconnect's
    // pods: other tests run routers on the same nodes).
    let pods: Api<Pod> = ns.api();
    let list = pods.list(&ListParams::default().labels("application=other")).await.unwrap();
    let node = list.items[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let out = qdr_tests::routers::kubectl(
        cp,
        &["drain", &node, "--pod-selector=application=other", "--ignore-daemonsets", "--timeout=90s"],
    );
    let uncordon = qdr_tests::routers::kubectl(cp, &["uncordon", &node]);
    assert!(uncordon.status.success(), "{}", String::from_utf8_lossy(&uncordon.stderr));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubectl drain failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("evicted"), "{stdout}");
    settled(&ns, "other", 2, true).await;

    // The admin's budget goes: the operator makes its own again.
    budgets.delete("other-routers", &Default::default()).await.unwrap();
    let cond = condition_with_reason(&ns, "other", "DisruptionBudget", "Managed").await;
    assert_eq!(cond["status"], "True", "{cond}");
    eventually("the operator's budget made again", SETTLE, || async { budgets.get_opt("other").await.ok()? })
        .await;
}

/// Through a placement change the budget covers the routers that serve: `Any` (3) →
/// `Every` keeps the Deployment's budget while the Deployment's routers are the only Ready
/// ones (it was pruned in the same pass); `Every` → `Any` (2) makes a budget that selects
/// the Deployment's pods only, never the DaemonSet's (whose scale the disruption controller
/// cannot read: `SyncFailed`, no disruption allowed).
#[tokio::test]
async fn a_placement_change_keeps_a_budget_over_the_routers_that_serve() {
    let cp = setup().await;
    let ns = cp.namespace("sched-overlap").await;
    let budgets: Api<PodDisruptionBudget> = ns.api();
    let ics = interconnects(&ns.client, &ns.name);
    common::create_interconnect(&ns, "move", json!({"deploymentPlan": {"size": 3, "placement": "Any"}}))
        .await;
    settled(&ns, "move", 3, true).await;
    let cpus = (qdr_tests::NODE_CAPACITY.0.parse::<u32>().unwrap() * 4).to_string();
    let patch = json!({"spec": {"deploymentPlan": {"placement": "Every", "size": null,
                                                   "resources": {"requests": {"cpu": cpus}}}}});
    ics.patch("move", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let ds: Api<DaemonSet> = ns.api();
    eventually("the DaemonSet made", SETTLE, || async { ds.get_opt("move").await.ok()? }).await;
    // Several passes (the DaemonSet's status and pods wake them): the budget stays, over
    // the Deployment's three routers, one disruption allowed.
    for _ in 0..10 {
        let pdb = budgets.get_opt("move").await.unwrap().expect("the budget was pruned during the overlap");
        let on = selected(&ns, &pdb).await;
        assert!(on.iter().all(|p| !owned_by(p, "DaemonSet")), "the budget selects the DaemonSet's pods");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    eventually("one disruption allowed over the old routers", SETTLE, || async {
        let p = budgets.get_opt("move").await.ok()??;
        (p.status.as_ref()?.disruptions_allowed == 1 && p.status.as_ref()?.expected_pods == 3).then_some(())
    })
    .await;
    // Requests that fit: the DaemonSet's routers come up, the Deployment goes, and its
    // budget with it.
    let patch = json!({"spec": {"deploymentPlan": {"resources": {"requests": {"cpu": "100m"}}}}});
    ics.patch("move", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let deployments: Api<Deployment> = ns.api();
    eventually("the Deployment and its budget gone", SETTLE, || async {
        let gone = deployments.get_opt("move").await.ok()?.is_none()
            && budgets.get_opt("move").await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
    let cond = condition_with_reason(&ns, "move", "DisruptionBudget", "NotNeeded").await;
    assert_eq!(cond["status"], "False", "{cond}");

    // Back to Any (2) whose routers cannot be scheduled: the DaemonSet's routers serve, and
    // the new budget selects none of them.
    let patch = json!({"spec": {"deploymentPlan": {"placement": "Any", "size": 2,
                                                   "resources": {"requests": {"cpu": cpus}}}}});
    ics.patch("move", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let pdb = eventually("the budget of the new Deployment", SETTLE, || async {
        let p = budgets.get_opt("move").await.ok()??;
        // Once the disruption controller has looked at it.
        (p.status.as_ref()?.observed_generation == p.metadata.generation).then_some(p)
    })
    .await;
    assert!(ds.get_opt("move").await.unwrap().is_some(), "the DaemonSet serves meanwhile");
    let on = selected(&ns, &pdb).await;
    assert!(
        on.iter().all(|p| !owned_by(p, "DaemonSet")),
        "the budget selects the DaemonSet's pods: {:?}",
        names_of(on)
    );
    let failed =
        (pdb.status.iter().flat_map(|s| s.conditions.iter().flatten())).find(|c| c.reason == "SyncFailed");
    assert!(failed.is_none(), "the disruption controller cannot count the pods: {failed:?}");
    let patch = json!({"spec": {"deploymentPlan": {"resources": {"requests": {"cpu": "100m"}}}}});
    ics.patch("move", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    settled(&ns, "move", 2, true).await;
}

/// Whether a controller of kind `kind` owns `p`.
fn owned_by(p: &Pod, kind: &str) -> bool {
    p.metadata.owner_references.iter().flatten().any(|r| r.kind == kind && r.controller == Some(true))
}

/// Issue 72: a workload of the other kind that the Go operator made (its labels, not the
/// operator's) is retired after a placement change like one the operator made: here a Go
/// DaemonSet of an Interconnect whose spec now asks for `Any`, found on the next change of
/// the spec, goes once the Deployment's routers are Ready.
#[tokio::test]
async fn a_go_operators_workload_of_the_other_kind_is_retired() {
    let cp = setup().await;
    let ns = cp.namespace("sched-go-kind").await;
    let ics = interconnects(&ns.client, &ns.name);
    common::create_interconnect(&ns, "legacy", json!({"deploymentPlan": {"size": 1, "placement": "Any"}}))
        .await;
    settled(&ns, "legacy", 1, true).await;
    let uid = ics.get("legacy").await.unwrap().metadata.uid.unwrap();
    // The Go operator's DaemonSet for `placement: Every`: its two labels, its controller
    // reference, no managed-by label.
    let labels = json!({"application": "legacy", "interconnect_cr": "legacy"});
    let go: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "legacy", "labels": labels,
                     "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1",
                                          "kind": "Interconnect", "name": "legacy", "uid": uid,
                                          "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "legacy", "image": "quay.io/interconnectedcloud/qdrouterd:1.13.0"}]}}}
    }))
    .unwrap();
    let ds: Api<DaemonSet> = ns.api();
    ds.create(&PostParams::default(), &go).await.unwrap();
    // A change of the spec: the pass of the new generation finds it.
    let patch = json!({"spec": {"deploymentPlan": {"size": 2}}});
    ics.patch("legacy", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually("the Go operator's DaemonSet retired", SETTLE, || async {
        ds.get_opt("legacy").await.ok()?.is_none().then_some(())
    })
    .await;
    settled(&ns, "legacy", 2, true).await;
}
