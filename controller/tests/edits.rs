//! Other people's edits, on a real control plane with simulated nodes: a JSON-patch removal
//! (which leaves no trace in `managedFields`), Service port, type and extra-port edits, a
//! Service deleted across an API server restart; apply failures reported with the API
//! server's message; Events per occurrence; conditions through a roll; metrics and
//! namespace deletion; the `scale` subresource. Each repair time is printed; assertions on
//! time use margins derived from the controller's own timings ([`RESYNC`]).

mod common;

use std::time::{Duration, Instant};

use common::{condition_with_reason, create_interconnect, eventually, interconnects};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use qdr_controller::reconcile::RESYNC;
use serde_json::{Value, json};
use tokio::sync::RwLock;

static CONTROLLER: common::SharedController = common::SharedController::new();
/// The API server restart test holds it for writing, every other test for reading, each for
/// its whole run (set-up included), so the restart never falls into another test.
static APISERVER: RwLock<()> = RwLock::const_new(());
const NODES: usize = 3;

/// A repair done by a wake-up, not by the periodic full apply, comes well within this.
fn repair_margin() -> Duration {
    RESYNC / 10
}

async fn setup() -> &'static qdr_tests::ControlPlane {
    CONTROLLER.start(NODES, "controller-system", "controller-0").await
}

async fn patch_spec(ns: &qdr_tests::TestNamespace, name: &str, spec: Value) {
    interconnects(&ns.client, &ns.name)
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec})))
        .await
        .unwrap();
}

fn kubectl(cp: &qdr_tests::ControlPlane, args: &[&str]) -> (bool, String) {
    let out = cp.kubectl().args(args).output().expect("kubectl");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// `kubectl -n <ns> patch <kind> <name> --type=<type> -p <patch>`, which must succeed.
fn kubectl_patch(cp: &qdr_tests::ControlPlane, ns: &str, kind: &str, name: &str, type_: &str, patch: &str) {
    let (ok, out) = kubectl(cp, &["-n", ns, "patch", kind, name, &format!("--type={type_}"), "-p", patch]);
    assert!(ok, "kubectl patch {kind} {name}: {out}");
}

/// The Interconnect once its status reports `generation` with `Ready=True`.
async fn ready_at_generation(ns: &qdr_tests::TestNamespace, name: &str) -> DynamicObject {
    let ics = interconnects(&ns.client, &ns.name);
    eventually(&format!("{name} Ready at its generation"), Duration::from_secs(90), || async {
        let o = ics.get(name).await.ok()?;
        let generation = o.metadata.generation?;
        let ready = o.data["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        (ready && o.data["status"]["observedGeneration"] == generation).then_some(o)
    })
    .await
}

fn ports(s: &Service) -> Vec<(Option<String>, i32)> {
    let mut v: Vec<_> =
        s.spec.iter().flat_map(|s| s.ports.iter().flatten()).map(|p| (p.name.clone(), p.port)).collect();
    v.sort();
    v
}

/// Waits until `check` holds for Service `name`, returning how long it took.
async fn service_until(
    ns: &qdr_tests::TestNamespace,
    name: &str,
    what: &str,
    check: impl Fn(&Service) -> bool,
) -> Duration {
    let api: Api<Service> = ns.api();
    let started = Instant::now();
    eventually(what, repair_margin(), || async {
        let s = api.get_opt(name).await.ok()??;
        check(&s).then_some(())
    })
    .await;
    started.elapsed()
}

#[tokio::test]
async fn removals_port_edits_types_and_foreign_ports_are_repaired() {
    let _shared = APISERVER.read().await;
    let cp = setup().await;
    let ns = cp.namespace("edits").await;
    create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 1}})).await;
    ready_at_generation(&ns, "mesh").await;
    let n = ns.name.as_str();
    let deployments: Api<Deployment> = ns.api();
    let probe = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|p| p.containers[0].liveness_probe.is_some())
    };

    // 1. A removal by JSON patch: no managedFields entry moves; the resourceVersion does.
    kubectl_patch(
        cp,
        n,
        "deploy",
        "mesh",
        "json",
        r#"[{"op":"remove","path":"/spec/template/spec/containers/0/livenessProbe"}]"#,
    );
    let started = Instant::now();
    eventually("the liveness probe back", repair_margin(), || async {
        probe(&deployments.get("mesh").await.ok()?).then_some(())
    })
    .await;
    eprintln!("repair: JSON-patch removal of the liveness probe undone in {:?}", started.elapsed());

    // 2. A Service port edited (5672 → 9999): the apply's list-map merge would collide on
    //    the port name; the controller takes `spec.ports` over.
    let services: Api<Service> = ns.api();
    let desired = ports(&services.get("mesh").await.unwrap());
    assert!(desired.iter().any(|(_, p)| *p == 5672), "{desired:?}");
    kubectl_patch(
        cp,
        n,
        "svc",
        "mesh",
        "json",
        r#"[{"op":"replace","path":"/spec/ports/0/port","value":9999}]"#,
    );
    let took = service_until(&ns, "mesh", "the Service ports repaired", |s| ports(s) == desired).await;
    eprintln!("repair: Service port 5672 -> 9999 undone in {took:?}");
    // Not wedged: a later size change is applied and observed.
    patch_spec(&ns, "mesh", json!({"deploymentPlan": {"size": 2}})).await;
    let o = ready_at_generation(&ns, "mesh").await;
    let degraded =
        o.data["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Degraded").cloned();
    assert_eq!(degraded.unwrap()["status"], "False", "{o:?}");
    assert_eq!(deployments.get("mesh").await.unwrap().spec.unwrap().replicas, Some(2));

    // 3. A NodePort type set by someone else, with serviceType unset: back to ClusterIP.
    kubectl_patch(cp, n, "svc", "mesh", "strategic", r#"{"spec":{"type":"NodePort"}}"#);
    let took = service_until(&ns, "mesh", "the Service type back to ClusterIP", |s| {
        s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ClusterIP")
            && s.spec.iter().flat_map(|s| s.ports.iter().flatten()).all(|p| p.node_port.is_none())
    })
    .await;
    eprintln!("repair: Service type NodePort reverted to ClusterIP in {took:?}");

    // 4. An extra port added by someone else: removed.
    kubectl_patch(
        cp,
        n,
        "svc",
        "mesh",
        "json",
        r#"[{"op":"add","path":"/spec/ports/-","value":{"name":"extra","port":9000,"targetPort":9000}}]"#,
    );
    let took = service_until(&ns, "mesh", "the extra port removed", |s| ports(s) == desired).await;
    eprintln!("repair: extra Service port removed in {took:?}");
}

/// The Event notes (with their series counts) of `reason` in the namespace.
async fn notes(ns: &qdr_tests::TestNamespace, reason: &str) -> Vec<(String, i32)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    let mut items = api.list(&ListParams::default()).await.unwrap().items;
    items.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect()
}

async fn wait_note(ns: &qdr_tests::TestNamespace, reason: &str, contains: &str) {
    eventually(&format!("a {reason} Event with {contains:?}"), Duration::from_secs(60), || async {
        notes(ns, reason).await.iter().any(|(n, _)| n.contains(contains)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn every_event_says_what_happened() {
    let _shared = APISERVER.read().await;
    let cp = setup().await;
    let ns = cp.namespace("events").await;
    create_interconnect(&ns, "ev", json!({"deploymentPlan": {"size": 3, "placement": "AntiAffinity"}})).await;
    ready_at_generation(&ns, "ev").await;
    // 3 → 5 on 3 nodes: two routers cannot be placed.
    patch_spec(&ns, "ev", json!({"deploymentPlan": {"size": 5}})).await;
    wait_note(&ns, "Scaled", "routers scaled from 3 to 5").await;
    wait_note(&ns, "Unschedulable", "2 of 5 routers cannot be scheduled").await;
    // 5 → 4: one.
    patch_spec(&ns, "ev", json!({"deploymentPlan": {"size": 4}})).await;
    wait_note(&ns, "Scaled", "routers scaled from 5 to 4").await;
    wait_note(&ns, "Unschedulable", "1 of 4 routers cannot be scheduled").await;
    // 4 → 2: all placed.
    patch_spec(&ns, "ev", json!({"deploymentPlan": {"size": 2}})).await;
    wait_note(&ns, "Scaled", "routers scaled from 4 to 2").await;
    wait_note(&ns, "Scheduled", "every router is scheduled").await;
    ready_at_generation(&ns, "ev").await;
    // Any → Every → Any: each Pruned Event names what was pruned.
    patch_spec(&ns, "ev", json!({"deploymentPlan": {"size": null, "placement": "Every"}})).await;
    wait_note(&ns, "Pruned", "Deployment ev").await;
    patch_spec(&ns, "ev", json!({"deploymentPlan": {"size": 1, "placement": "Any"}})).await;
    wait_note(&ns, "Pruned", "DaemonSet ev").await;
    let scaled = notes(&ns, "Scaled").await;
    eprintln!(
        "events: Scaled {scaled:?}; Unschedulable {:?}; Pruned {:?}",
        notes(&ns, "Unschedulable").await,
        notes(&ns, "Pruned").await
    );
    // One Event per occurrence, each with its own message (no series folded across them).
    assert!(scaled.iter().all(|(_, count)| *count == 1), "{scaled:?}");
}

#[tokio::test]
async fn conditions_do_not_flicker_through_a_roll() {
    use futures::StreamExt;
    let _shared = APISERVER.read().await;
    let cp = setup().await;
    let ns = cp.namespace("roll").await;
    create_interconnect(&ns, "roll", json!({"deploymentPlan": {"size": 2}})).await;
    ready_at_generation(&ns, "roll").await;
    // Every status write from here on.
    let ics = interconnects(&ns.client, &ns.name);
    let wc = kube::runtime::watcher::Config::default().fields("metadata.name=roll");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let watch = tokio::spawn({
        let seen = seen.clone();
        kube::runtime::watcher(ics.clone(), wc).for_each(move |e| {
            if let Ok(kube::runtime::watcher::Event::Apply(o) | kube::runtime::watcher::Event::InitApply(o)) =
                e
            {
                seen.lock().unwrap().push(o.data["status"].clone());
            }
            futures::future::ready(())
        })
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A change a running router cannot take (its edge listener): every router is replaced.
    patch_spec(&ns, "roll", json!({"edgeListeners": [{"port": 45699}]})).await;
    let o = ready_at_generation(&ns, "roll").await;
    eventually("the roll complete", Duration::from_secs(60), || async {
        let o = ics.get("roll").await.ok()?;
        (o.data["status"]["updatedReplicas"] == 2 && o.data["status"]["podCount"] == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let statuses = seen.lock().unwrap().clone();
    let cond = |s: &Value, t: &str| -> Option<String> {
        s["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| c["status"].as_str().unwrap_or_default().to_string())
    };
    eprintln!(
        "roll: {} status writes watched through the roll to generation {:?}",
        statuses.len(),
        o.metadata.generation
    );
    assert!(statuses.len() >= 2, "{statuses:?}");
    for s in &statuses {
        assert_eq!(cond(s, "Available").as_deref(), Some("True"), "Available dropped during the roll: {s}");
        if cond(s, "Ready").as_deref() == Some("True") {
            assert_eq!(s["podCount"], s["replicas"], "Ready with old routers left: {s}");
            assert!(s["readyReplicas"].as_i64() <= s["replicas"].as_i64(), "Ready while {s}");
        }
    }
}

/// `qdr_controller_reconcile_errors_total`, all categories.
async fn errors_total() -> u64 {
    let text = common::metrics_text(CONTROLLER.health()).await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("qdr_controller_reconcile_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn apply_failures_are_reported_and_deleted_interconnects_leave_nothing() {
    let _shared = APISERVER.read().await;
    let cp = setup().await;
    // An apply the API server refuses: a quota of no Services.
    let ns = cp.namespace("quota").await;
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "no-services"}, "spec": {"hard": {"services": "0"}}}),
    )
    .unwrap();
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = ns.api();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    // In force once the quota controller has recorded what is used.
    eventually("the quota in force", Duration::from_secs(30), || async {
        let q = quotas.get("no-services").await.ok()?;
        q.status?.used?.contains_key("services").then_some(())
    })
    .await;
    create_interconnect(&ns, "q", json!({"deploymentPlan": {"size": 1}})).await;
    let services: Api<Service> = ns.api();
    let degraded = eventually("Degraded reason ReconcileFailed", Duration::from_secs(60), || async {
        let o = interconnects(&ns.client, &ns.name).get("q").await.ok()?;
        let found = o.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ReconcileFailed" && c["type"] == "Degraded")
            .cloned();
        if found.is_none() && services.get_opt("q").await.ok().flatten().is_some() {
            panic!("the Service was created despite the quota: {:?}", o.data["status"]);
        }
        found
    })
    .await;
    let message = degraded["message"].as_str().unwrap();
    eprintln!("failure: Degraded message {message:?}");
    assert!(message.contains("applying Service q") && message.contains("no-services"), "{message}");
    assert!(!message.contains("Status {") && !message.contains("ErrorResponse"), "a Debug dump: {message}");
    let o = interconnects(&ns.client, &ns.name).get("q").await.unwrap();
    assert!(
        o.data["status"]["observedGeneration"].as_i64() < o.metadata.generation,
        "{:?}",
        o.data["status"]
    );
    let ready = condition_with_reason(&ns, "q", "Ready", "ReconcileFailed").await;
    assert_eq!(ready["status"], "False");
    let warnings = notes(&ns, "ReconcileFailed").await;
    assert_eq!(warnings.len(), 1, "one Warning for the failure, not one per retry: {warnings:?}");
    quotas.delete("no-services", &DeleteParams::default()).await.unwrap();
    ready_at_generation(&ns, "q").await;

    // A namespace deleted with an Interconnect in it: no reconcile errors, and its metric
    // series goes with it.
    let before = errors_total().await;
    let gone = cp.namespace("gone").await;
    create_interconnect(
        &gone,
        "tls",
        json!({"deploymentPlan": {"size": 1},
        "sslProfiles": [{"name": "s", "generateCredentials": true}],
        "listeners": [{"port": 5671, "sslProfile": "s"}]}),
    )
    .await;
    ready_at_generation(&gone, "tls").await;
    let series = format!("namespace=\"{}\"", gone.name);
    let health = CONTROLLER.health();
    eventually("the expiry series", Duration::from_secs(30), || async {
        common::metrics_text(health).await?.contains(&series).then_some(())
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(gone.client.clone());
    namespaces.delete(&gone.name, &DeleteParams::default()).await.unwrap();
    eventually("the namespace gone", Duration::from_secs(90), || async {
        namespaces.get_opt(&gone.name).await.ok()?.is_none().then_some(())
    })
    .await;
    eventually("the expiry series removed", Duration::from_secs(30), || async {
        (!common::metrics_text(health).await?.contains(&series)).then_some(())
    })
    .await;
    let after = errors_total().await;
    eprintln!("namespace deletion: reconcile errors {before} -> {after}");
    assert_eq!(after, before, "deleting a namespace counted reconcile errors");
}

#[tokio::test]
async fn kubectl_scale_sets_the_size_and_is_refused_for_every() {
    let _shared = APISERVER.read().await;
    let cp = setup().await;
    let ns = cp.namespace("scale").await;
    create_interconnect(&ns, "s", json!({"deploymentPlan": {"size": 1}})).await;
    ready_at_generation(&ns, "s").await;
    let (ok, out) = kubectl(cp, &["-n", &ns.name, "scale", "interconnect", "s", "--replicas=3"]);
    assert!(ok, "{out}");
    let deployments: Api<Deployment> = ns.api();
    eventually("the Deployment at 3", Duration::from_secs(30), || async {
        (deployments.get("s").await.ok()?.spec?.replicas == Some(3)).then_some(())
    })
    .await;
    let o = ready_at_generation(&ns, "s").await;
    assert_eq!(o.data["spec"]["deploymentPlan"]["size"], 3);
    // The scale subresource reads back: replicas from the size, the pods' selector.
    let (ok, out) =
        kubectl(cp, &["-n", &ns.name, "get", "interconnect", "s", "--subresource=scale", "-o", "json"]);
    assert!(ok, "{out}");
    let scale: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(scale["spec"]["replicas"], 3, "{scale}");
    assert_eq!(scale["status"]["replicas"], 3, "{scale}");
    assert_eq!(scale["status"]["selector"], "application=s,interconnect_cr=s", "{scale}");
    // placement Every: a DaemonSet has no size; the API server refuses it with our message.
    create_interconnect(&ns, "e", json!({"deploymentPlan": {"placement": "Every"}})).await;
    let (ok, out) = kubectl(cp, &["-n", &ns.name, "scale", "interconnect", "e", "--replicas=2"]);
    eprintln!("scale Every: {}", out.trim());
    assert!(!ok, "{out}");
    assert!(out.contains("size must not be set with placement Every"), "{out}");
    // The schema's range holds for the subresource too.
    let (ok, out) = kubectl(cp, &["-n", &ns.name, "scale", "interconnect", "s", "--replicas=17"]);
    assert!(!ok && out.contains("less than or equal to 16"), "{out}");
}

#[tokio::test]
async fn a_service_deleted_while_the_api_server_restarts_comes_back() {
    let _alone = APISERVER.write().await;
    let cp = setup().await;
    let ns = cp.namespace("restart").await;
    create_interconnect(&ns, "r", json!({"deploymentPlan": {"size": 1}})).await;
    ready_at_generation(&ns, "r").await;
    cp.restart_apiserver().await.unwrap();
    // At once, before the controller's watches are back (they start over with a list).
    let services: Api<Service> = ns.api();
    services.delete("r", &DeleteParams::default()).await.unwrap();
    let deleted = Instant::now();
    eventually("the Service back", repair_margin(), || async { services.get_opt("r").await.ok()?.map(drop) })
        .await;
    eprintln!(
        "repair: Service deleted right after an API server restart recreated in {:?}",
        deleted.elapsed()
    );
}
