//! Routers on simulated nodes (real kube-scheduler, kwok in place of kubelets): `Every` runs
//! one router per node and follows a node added; `AntiAffinity` with more routers than nodes
//! reports the unplaced ones with the scheduler's reason (condition and one Warning Event
//! per change) until a node is added; resources that fit no node are reported the same way;
//! scaling down and `Any` are followed by `status.pods` and `kubectl wait`.
//!
//! A placement change keeps the old routers until the new ones are Ready (make before break),
//! and evictions through the PodDisruptionBudget take one router at a time; budgets the
//! admin made are kept, and a placement change keeps one over the routers that serve
//! ([`budgets`]).
//!
//! The scheduling fields of `deploymentPlan` put routers where they say: on a tainted node
//! with a toleration and a node selector, and spread over zones with a topology spread
//! constraint beside the operator's anti-affinity.
//!
//! This binary has its own control plane with [`NODES`] nodes in two zones and one tainted
//! node ([`setup`]). Only [`placement_follows_the_nodes`] adds a node later; the other tests
//! do not depend on the count.
//! [`evictions_take_one_router_at_a_time`] cordons every node for the moment of two requests.
//!
//! A router pod the node failed (evicted, refused at admission) is no router
//! ([`a_router_pod_the_node_failed_is_no_router`]).

#[path = "scheduling/budgets.rs"]
mod budgets;
mod common;

use std::time::Duration;

use common::{condition_with_reason, events, eventually, interconnects};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use qdr_tests::TestNamespace;
use serde_json::{Value, json};

/// Simulated nodes at start.
const NODES: usize = 3;

/// How long scheduling plus kwok plus a reconcile may take on a loaded 2-core machine.
const SETTLE: Duration = Duration::from_secs(60);

static CONTROLLER: common::SharedController = common::SharedController::new();

/// A node beside the [`NODES`], tainted `qdr-test/dedicated=messaging:NoSchedule` and
/// labelled `qdr-test/pool: messaging`: only pods that tolerate the taint run there.
const TAINTED: &str = "dedicated-0";
/// The zone label of `node-0` (`zone-a`) and of `node-1` and `node-2` (`zone-b`).
const ZONE: &str = "topology.kubernetes.io/zone";

static LAYOUT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Held by [`placement_follows_the_nodes`] throughout (it counts the scheduler's messages,
/// which name cordoned nodes) and by every test while it cordons a node.
pub(crate) static CORDONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The control plane, with the node layout every test of this binary sees from its
/// start: [`NODES`] nodes in two zones and the [`TAINTED`] node.
async fn setup() -> &'static qdr_tests::ControlPlane {
    let cp = CONTROLLER.start(NODES, "scheduling-system", "scheduling-0").await;
    LAYOUT
        .get_or_init(|| async {
            cp.add_node(TAINTED).await.unwrap();
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cp.client().await.unwrap());
            let taint = json!({"metadata": {"labels": {"qdr-test/pool": "messaging"}},
                               "spec": {"taints": [{"key": "qdr-test/dedicated", "value": "messaging",
                                                    "effect": "NoSchedule"}]}});
            nodes.patch(TAINTED, &PatchParams::default(), &Patch::Merge(&taint)).await.unwrap();
            for (node, zone) in [("node-0", "zone-a"), ("node-1", "zone-b"), ("node-2", "zone-b")] {
                let label = json!({"metadata": {"labels": {ZONE: zone}}});
                nodes.patch(node, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
            }
        })
        .await;
    cp
}

/// Waits until Interconnect `name` reports `ready` routers Ready out of `ready` wanted,
/// `status.pods` lists exactly the router pods that run, and `Ready` is `want_ready`;
/// returns its status.
async fn settled(ns: &TestNamespace, name: &str, ready: usize, want_ready: bool) -> Value {
    let ics = interconnects(&ns.client, &ns.name);
    let pods: Api<Pod> = ns.api();
    let want = if want_ready { "True" } else { "False" };
    eventually(&format!("{name}: {ready} routers ready, Ready={want}"), SETTLE, || async {
        let status = ics.get(name).await.ok()?.data["status"].clone();
        let running: Vec<String> = pods
            .list(&ListParams::default().labels(&format!("application={name}")))
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .map(|p| p.metadata.name.unwrap_or_default())
            .collect();
        let listed: Vec<String> = serde_json::from_value(status["pods"].clone()).unwrap_or_default();
        let ready_cond = status["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
        (status["readyReplicas"] == ready
            && running.len() == ready
            && running.iter().all(|p| listed.contains(p))
            && ready_cond["status"] == want)
            .then_some(status)
    })
    .await
}

/// The names of `list`.
fn names_of<K: kube::Resource>(list: Vec<K>) -> Vec<String> {
    list.into_iter().filter_map(|o| o.meta().name.clone()).collect()
}

/// The node of every running router pod of `name`.
async fn nodes_of(ns: &TestNamespace, name: &str) -> Vec<String> {
    let pods: Api<Pod> = ns.api();
    let list = pods.list(&ListParams::default().labels(&format!("application={name}"))).await.unwrap();
    let mut nodes: Vec<String> =
        list.items.into_iter().filter_map(|p| p.spec.and_then(|s| s.node_name)).collect();
    nodes.sort();
    nodes
}

#[tokio::test]
async fn placement_follows_the_nodes() {
    let _no_cordon = CORDONS.lock().await;
    let cp = setup().await;
    let ns = cp.namespace("sched-nodes").await;
    common::create_interconnect(
        &ns,
        "edge",
        json!({"deploymentPlan": {"role": "edge", "placement": "Every"}}),
    )
    .await;
    common::create_interconnect(
        &ns,
        "spread",
        json!({"deploymentPlan": {"size": 4, "placement": "AntiAffinity"}}),
    )
    .await;

    // Every: one router per node.
    settled(&ns, "edge", NODES, true).await;
    assert_eq!(nodes_of(&ns, "edge").await, ["node-0", "node-1", "node-2"]);
    let ds: DaemonSet = ns.api::<DaemonSet>().get("edge").await.unwrap();
    assert_eq!(ds.status.unwrap().desired_number_scheduled, NODES as i32);

    // AntiAffinity 4 on 3 nodes: 3 Ready, 1 reported with the scheduler's reason.
    let cond = condition_with_reason(&ns, "spread", "Ready", "Unschedulable").await;
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.starts_with("1 of 4 routers cannot be scheduled: 0/4 nodes are available: ")
            && message.contains("1 node(s) had untolerated taint {qdr-test/dedicated: messaging}")
            && message.contains("3 node(s) didn't match pod anti-affinity rules"),
        "{message}"
    );
    assert_eq!(cond["status"], "False");
    let status = settled(&ns, "spread", 3, false).await;
    assert_eq!(status["replicas"], 4);
    let mut distinct = nodes_of(&ns, "spread").await;
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "at most one router per node: {distinct:?}");
    eventually("an Unschedulable Warning", SETTLE, || async {
        (events(&ns, "Unschedulable").await >= 1).then_some(())
    })
    .await;

    // A fourth node: Every follows, AntiAffinity places its fourth router.
    cp.add_node("node-3").await.unwrap();
    settled(&ns, "edge", NODES + 1, true).await;
    assert_eq!(nodes_of(&ns, "edge").await, ["node-0", "node-1", "node-2", "node-3"]);
    let status = settled(&ns, "spread", 4, true).await;
    assert_eq!(status["pods"].as_array().unwrap().len(), 4);
    eventually("a Scheduled event", SETTLE, || async { (events(&ns, "Scheduled").await >= 1).then_some(()) })
        .await;
    // One Warning per change of the scheduler's message, not per pass (the router pods
    // alone woke dozens): the first message, and at most one more while node-3 is added
    // but not yet Ready (the scheduler then says `1 node(s) had untolerated taint
    // {node.kubernetes.io/not-ready: }`).
    let warnings = events(&ns, "Unschedulable").await;
    assert!((1..=2).contains(&warnings), "one Warning per change of the message, not per pass: {warnings}");

    // Scale down: status follows.
    let patch = json!({"spec": {"deploymentPlan": {"size": 2}}});
    interconnects(&ns.client, &ns.name)
        .patch("spread", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let status = settled(&ns, "spread", 2, true).await;
    assert_eq!(status["pods"].as_array().unwrap().len(), 2, "{status:#}");
    assert_eq!(status["replicas"], 2);
}

#[tokio::test]
async fn any_placement_is_ready_and_kubectl_wait_returns() {
    let cp = setup().await;
    let ns = cp.namespace("sched-any").await;
    common::create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 3, "placement": "Any"}}))
        .await;
    let out = cp
        .kubectl()
        .args(["wait", "--for=condition=Ready", "interconnect/mesh", "-n", &ns.name])
        .arg(format!("--timeout={}s", SETTLE.as_secs()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = settled(&ns, "mesh", 3, true).await;
    assert_eq!(status["pods"].as_array().unwrap().len(), 3);
    assert_eq!(nodes_of(&ns, "mesh").await.len(), 3, "every router is bound to a node");
}

#[tokio::test]
async fn resources_that_fit_no_node_are_reported() {
    let cp = setup().await;
    let ns = cp.namespace("sched-cpu").await;
    let cpus = qdr_tests::NODE_CAPACITY.0.parse::<u32>().unwrap() * 4;
    common::create_interconnect(
        &ns,
        "big",
        json!({"deploymentPlan": {"size": 1, "resources": {"requests": {"cpu": cpus.to_string()}}}}),
    )
    .await;
    let cond = condition_with_reason(&ns, "big", "Ready", "Unschedulable").await;
    let message = cond["message"].as_str().unwrap();
    assert!(message.starts_with("1 of 1 router cannot be scheduled: 0/"), "{message}");
    assert!(message.contains("Insufficient cpu"), "{message}");
    let available = condition_with_reason(&ns, "big", "Available", "Unschedulable").await;
    assert_eq!(available["status"], "False");

    // Fixing the request schedules the router: Ready, and a Scheduled event.
    let patch = json!({"spec": {"deploymentPlan": {"resources": {"requests": {"cpu": "100m"}}}}});
    interconnects(&ns.client, &ns.name)
        .patch("big", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    settled(&ns, "big", 1, true).await;
    eventually("a Scheduled event", SETTLE, || async { (events(&ns, "Scheduled").await >= 1).then_some(()) })
        .await;
}

/// Make before break: `Any` → `Every` whose new routers cannot be scheduled keeps the
/// Deployment's routers running, and the status says why both exist; once the new routers
/// are Ready, the Deployment goes.
#[tokio::test]
async fn a_placement_change_keeps_the_old_routers_until_the_new_ones_are_ready() {
    let cp = setup().await;
    let ns = cp.namespace("sched-move").await;
    common::create_interconnect(&ns, "move", json!({"deploymentPlan": {"size": 2, "placement": "Any"}}))
        .await;
    settled(&ns, "move", 2, true).await;
    let ics = interconnects(&ns.client, &ns.name);
    let cpus = qdr_tests::NODE_CAPACITY.0.parse::<u32>().unwrap() * 4;
    let patch = json!({"spec": {"deploymentPlan": {"placement": "Every", "size": null,
                                                   "resources": {"requests": {"cpu": cpus.to_string()}}}}});
    ics.patch("move", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let want = "placement change: Deployment move keeps its 2 ready routers until DaemonSet move has all its routers ready";
    let message = eventually("Progressing names the placement change", SETTLE, || async {
        let o = ics.get("move").await.ok()?;
        let conds = o.data["status"]["conditions"].as_array()?.clone();
        let c = conds.into_iter().find(|c| c["type"] == "Progressing" && c["status"] == "True")?;
        c["message"]
            .as_str()
            .filter(|m| m.contains(want) && m.contains("cannot be scheduled"))
            .map(str::to_string)
    })
    .await;
    assert!(message.contains("Insufficient cpu"), "{message}");
    let ds: Api<DaemonSet> = ns.api();
    assert!(ds.get_opt("move").await.unwrap().is_some(), "the DaemonSet is made first");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    // Several passes (the DaemonSet's status and pods wake them): the Deployment stays.
    for _ in 0..10 {
        let d = deployments.get_opt("move").await.unwrap().expect("the running Deployment was deleted");
        assert!(d.metadata.deletion_timestamp.is_none(), "the running Deployment is being deleted");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(qdr_tests::routers::ready_routers(&ns, "move").await, 2, "the old routers serve meanwhile");

    // Requests that fit: the DaemonSet's routers come up, then the Deployment goes.
    let patch = json!({"spec": {"deploymentPlan": {"resources": {"requests": {"cpu": "100m"}}}}});
    ics.patch("move", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually("the Deployment gone and Ready", SETTLE, || async {
        let gone = deployments.get_opt("move").await.ok()?.is_none();
        let o = ics.get("move").await.ok()?;
        let conds = o.data["status"]["conditions"].as_array()?.clone();
        let ready = conds.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        (gone && ready).then_some(())
    })
    .await;
    assert!(events(&ns, "Pruned").await >= 1, "a Pruned event names the Deployment");
}

/// A node drain evicts one router at a time: the PodDisruptionBudget the controller owns
/// (`maxUnavailable: 1`) makes the API server refuse a second eviction (429) until the first
/// router's replacement is Ready; with one router the budget is pruned.
#[tokio::test]
async fn evictions_take_one_router_at_a_time() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let cp = setup().await;
    // Held from the start: the state the evictions are judged on is the one just settled.
    let _cordons = CORDONS.lock().await;
    let ns = cp.namespace("sched-evict").await;
    common::create_interconnect(&ns, "drain", json!({"deploymentPlan": {"size": 3, "placement": "Any"}}))
        .await;
    settled(&ns, "drain", 3, true).await;
    let budgets: Api<PodDisruptionBudget> = ns.api();
    let pdb = eventually("the PodDisruptionBudget allows one disruption", SETTLE, || async {
        let p = budgets.get_opt("drain").await.ok()??;
        (p.status.as_ref()?.disruptions_allowed == 1).then_some(p)
    })
    .await;
    let spec = pdb.spec.clone().unwrap();
    assert_eq!(spec.max_unavailable, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)));
    let owner = &pdb.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Interconnect", Some(true)));

    let pods: Api<Pod> = Api::namespaced(cp.client_without_retries().await.unwrap(), &ns.name);
    let routers =
        names_of(pods.list(&ListParams::default().labels("application=drain")).await.unwrap().items);
    let evict = |name: String| {
        let pods = pods.clone();
        async move { pods.evict(&name, &Default::default()).await }
    };
    // Every node cordoned first, as a drain does (kwok would otherwise make a replacement
    // Ready within milliseconds, before the second request). Then two evictions at once, as
    // `kubectl drain` sends them: the API server lets one through and refuses the other
    // (429), whose router is needed until the first one's replacement is Ready. (A client
    // without kube's retry layer, which would resend the refused eviction until allowed.)
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ns.client.clone());
    let all_nodes = names_of(nodes.list(&ListParams::default()).await.unwrap().items);
    let cordon = |on: bool| {
        let (nodes, all_nodes) = (nodes.clone(), all_nodes.clone());
        async move {
            for n in &all_nodes {
                let patch = json!({"spec": {"unschedulable": on}});
                nodes.patch(n, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            }
        }
    };
    cordon(true).await;
    let (first, second) = futures::join!(evict(routers[0].clone()), evict(routers[1].clone()));
    cordon(false).await;
    let refused = |r: &Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 429);
    assert!(
        (first.is_ok() && refused(&second)) || (refused(&first) && second.is_ok()),
        "one eviction allowed, one refused with 429: {first:?}, {second:?}"
    );
    let left = if first.is_ok() { routers[1].clone() } else { routers[0].clone() };
    // Once the first router's replacement is Ready, the next eviction goes through.
    settled(&ns, "drain", 3, true).await;
    eventually("the second eviction, once the first router is back", SETTLE, || async {
        evict(left.clone()).await.ok()
    })
    .await;

    // One router: no budget (it would block every drain).
    let ics = interconnects(&ns.client, &ns.name);
    let patch = json!({"spec": {"deploymentPlan": {"size": 1}}});
    ics.patch("drain", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually("the PodDisruptionBudget pruned", SETTLE, || async {
        budgets.get_opt("drain").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A router pod the node failed (evicted under pressure, or refused at admission: phase
/// `Failed`, as kubelets leave them until pod garbage collection) is no router: its
/// ReplicaSet no longer counts it and makes a replacement, and the status lists only the
/// pods that run, as the Deployment counts them. (A CI run saw evicted pods
/// reported as routers "starting" for minutes.)
#[tokio::test]
async fn a_router_pod_the_node_failed_is_no_router() {
    let cp = setup().await;
    let ns = cp.namespace("sched-failed").await;
    common::create_interconnect(&ns, "failed", json!({"deploymentPlan": {"size": 2, "placement": "Any"}}))
        .await;
    settled(&ns, "failed", 2, true).await;
    let pods: Api<Pod> = ns.api();
    let routers =
        names_of(pods.list(&ListParams::default().labels("application=failed")).await.unwrap().items);
    let evicted = routers[0].clone();
    // What a kubelet writes when it evicts a pod under disk pressure (kwok leaves a pod that
    // is not Pending alone).
    let status = json!({"status": {"phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: ephemeral-storage.",
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"}]}});
    pods.patch_status(&evicted, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let ics = interconnects(&ns.client, &ns.name);
    let status = eventually("the failed pod replaced and left out of the status", SETTLE, || async {
        let status = ics.get("failed").await.ok()?.data["status"].clone();
        let listed: Vec<String> = serde_json::from_value(status["pods"].clone()).unwrap_or_default();
        let replaced =
            pods.list(&ListParams::default().labels("application=failed")).await.ok()?.items.len() == 3;
        (replaced && listed.len() == 2 && !listed.contains(&evicted) && status["readyReplicas"] == 2)
            .then_some(status)
    })
    .await;
    let ready = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
    assert_eq!(ready["status"], "True", "{status}");
    // And it stays so: later passes do not bring the failed pod back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed: Vec<String> =
        serde_json::from_value(ics.get("failed").await.unwrap().data["status"]["pods"].clone()).unwrap();
    assert!(!listed.contains(&evicted), "{listed:?}");
}

/// Issue 57: tolerations and a node selector take routers to a tainted node (and without
/// the toleration they stay Pending, with the scheduler's reason); a zone spread beside
/// `AntiAffinity` puts them in both zones, one per node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduling_fields_put_routers_where_they_say() {
    let _cp = setup().await;
    let ns = _cp.namespace("sched-fields").await;
    let pool = json!({"qdr-test/pool": "messaging"});
    // The node selector alone: the only matching node is tainted.
    common::create_interconnect(
        &ns,
        "dedicated",
        json!({"deploymentPlan": {"size": 2, "nodeSelector": pool, "priorityClassName": "system-cluster-critical"}}),
    )
    .await;
    let cond = condition_with_reason(&ns, "dedicated", "Ready", "Unschedulable").await;
    let message = cond["message"].as_str().unwrap();
    assert!(message.contains("untolerated taint {qdr-test/dedicated: messaging}"), "{message}");
    // With the toleration: both routers there, Ready.
    let patch = json!({"spec": {"deploymentPlan": {"tolerations": [
        {"key": "qdr-test/dedicated", "operator": "Equal", "value": "messaging", "effect": "NoSchedule"}]}}});
    interconnects(&ns.client, &ns.name)
        .patch("dedicated", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    settled(&ns, "dedicated", 2, true).await;
    assert_eq!(nodes_of(&ns, "dedicated").await, [TAINTED, TAINTED]);
    let pods: Api<Pod> = ns.api();
    let list = pods.list(&ListParams::default().labels("application=dedicated")).await.unwrap();
    for p in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.priority_class_name.as_deref(), Some("system-cluster-critical"));
        assert!(spec.priority.is_some_and(|v| v > 1_000_000), "the class was resolved: {:?}", spec.priority);
    }

    // A zone spread beside AntiAffinity: 3 routers, one per node, in both zones (without the
    // spread both could not be told apart; with maxSkew 1 over zone-a (1 node) and zone-b
    // (2 nodes) a fourth would stay Pending).
    common::create_interconnect(
        &ns,
        "zones",
        json!({"deploymentPlan": {"size": 3, "placement": "AntiAffinity",
               "podLabels": {"team": "payments"},
               "topologySpreadConstraints": [
                   {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]}}),
    )
    .await;
    settled(&ns, "zones", 3, true).await;
    let nodes = nodes_of(&ns, "zones").await;
    assert_eq!(nodes, ["node-0", "node-1", "node-2"], "one per node");
    let list = pods.list(&ListParams::default().labels("application=zones,team=payments")).await.unwrap();
    assert_eq!(list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count(), 3);
    // A fourth: zone-a would hold 2 against zone-b's 2 (skew 0), but anti-affinity leaves
    // no node in zone-a, and zone-b would hold 3 against 1 (skew 2 > 1): Pending, both
    // rules named by the scheduler.
    let patch = json!({"spec": {"deploymentPlan": {"size": 4}}});
    interconnects(&ns.client, &ns.name)
        .patch("zones", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let cond = condition_with_reason(&ns, "zones", "Ready", "Unschedulable").await;
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.contains("didn't match pod anti-affinity rules")
            && message.contains("didn't match pod topology spread constraints"),
        "{message}"
    );
    settled(&ns, "zones", 3, false).await;
}
