//! Faults survived, nothing lost. While 300 Interconnects converge (created through both
//! admission webhooks, two webhook replicas, two controller replicas, all as their
//! ServiceAccounts), kube-apiserver is restarted, then etcd, then the leading controller is
//! SIGKILLed, then its successor is paused past its renew deadline, then the webhook's TLS
//! Secret is deleted while admission requests keep coming. At the end every Interconnect has
//! exactly its children (none missing, none extra), its status is current, no process
//! panicked, and every admission request made while the Secret was gone succeeded. The
//! counts are printed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use qdr_api::Interconnect;
use qdr_controller::builders;
use qdr_controller::validated::ValidatedInterconnect;
use qdr_tests::{ControlPlane, Process};
use serde_json::json;

/// Interconnects converging while the faults happen.
const ICS: usize = 300;
/// Lease timing of the controller replicas (`--lease-duration`, `--retry-period`).
const LEASE: Duration = Duration::from_secs(4);
/// `--renew-deadline` of the controller replicas.
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
/// How long every Interconnect may take to converge after the last fault.
const CONVERGE: Duration = Duration::from_secs(300);

fn interconnects(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn start_controller(cp: &ControlPlane, install: &qdr_tests::rbac::Install, id: &str) -> Process {
    let ids = cp.install_rbac(install).unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_qdr-controller"));
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", ids.controller).env("RUST_LOG", "info,kube=warn").args([
        &format!("--lease-namespace={}", install.namespace),
        &format!("--identity={id}"),
        &format!("--lease-duration={}s", LEASE.as_secs()),
        &format!("--renew-deadline={}s", RENEW_DEADLINE.as_secs()),
        "--retry-period=500ms",
        &format!("--health-listen=127.0.0.1:{}", common::free_port()),
        "--default-image=quay.io/interconnectedcloud/qdrouterd:1.19.0",
        "--observe-mesh=off",
    ]);
    Process::spawn(id, cmd, &cp.dir().join(format!("{id}.log"))).unwrap()
}

/// The children `ic` must have, as `Kind` → names: what the builders make for its spec.
fn expected(ic: &Interconnect) -> BTreeMap<&'static str, BTreeSet<String>> {
    // The controller adds its management profile and listener whether or not it reads the
    // routers.
    let (o, management) = ValidatedInterconnect::new(ic).unwrap().with_management();
    management.unwrap();
    let one = |n: &str| BTreeSet::from([n.to_string()]);
    let mut m = BTreeMap::from([
        ("ServiceAccount", one(o.name())),
        // Only for routers that read the pod list (issue 72): none of these do.
        ("Role", builders::router_rbac(&o).map(|(r, _)| r.metadata.name.unwrap()).into_iter().collect()),
        (
            "RoleBinding",
            builders::router_rbac(&o).map(|(_, b)| b.metadata.name.unwrap()).into_iter().collect(),
        ),
        ("Deployment", one(o.name())),
        ("Service", one(o.name())),
        ("Secret", o.ic().secret_names()),
        ("Ingress", builders::ingresses(&o).iter().filter_map(|i| i.metadata.name.clone()).collect()),
        (
            "PodDisruptionBudget",
            builders::budget(&o, None, &[]).1.and_then(|p| p.metadata.name).into_iter().collect(),
        ),
    ]);
    let mut config_maps = one(&o.router_config_name(&o.rendered_config().startup_hash));
    config_maps.extend(builders::sasl_config_map(&o).and_then(|cm| cm.metadata.name));
    m.insert("ConfigMap", config_maps);
    m
}

/// Every object of `kind` labelled as ours in `ns`, as Interconnect → names.
async fn children(client: &kube::Client, ns: &str, ar: &ApiResource) -> BTreeMap<String, BTreeSet<String>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=qdr-operator");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for o in api.list_metadata(&lp).await.unwrap().items {
        let owner =
            o.metadata.labels.as_ref().and_then(|l| l.get("interconnect_cr")).cloned().unwrap_or_default();
        out.entry(owner).or_default().insert(o.metadata.name.unwrap_or_default());
    }
    out
}

fn resource(kind: &str) -> ApiResource {
    let (group, version, plural) = match kind {
        "Deployment" => ("apps", "v1", "deployments"),
        "DaemonSet" => ("apps", "v1", "daemonsets"),
        "Role" => ("rbac.authorization.k8s.io", "v1", "roles"),
        "RoleBinding" => ("rbac.authorization.k8s.io", "v1", "rolebindings"),
        "Ingress" => ("networking.k8s.io", "v1", "ingresses"),
        "PodDisruptionBudget" => ("policy", "v1", "poddisruptionbudgets"),
        "ServiceAccount" => ("", "v1", "serviceaccounts"),
        "Service" => ("", "v1", "services"),
        "ConfigMap" => ("", "v1", "configmaps"),
        "Secret" => ("", "v1", "secrets"),
        other => panic!("unknown kind {other}"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Whether `o`'s status describes its current generation, reconciled without error.
fn current(o: &DynamicObject) -> bool {
    let generation = o.metadata.generation;
    let conditions = o.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
    o.data["status"]["observedGeneration"].as_i64() == generation
        && ["Degraded", "Ready", "Available", "Progressing", "SpecValid"].iter().all(|t| {
            conditions.iter().any(|c| c["type"] == *t && c["observedGeneration"].as_i64() == generation)
        })
        && conditions.iter().any(|c| c["type"] == "Degraded" && c["status"] == "False")
        && o.data["status"]["replicas"].as_i64() == Some(1)
}

/// The last lines of `p`'s log about its leadership (elections, demotions, terms).
fn leadership(p: &Process) -> String {
    p.log_lines_with(&["leader", "leading", "lease"], 20)
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("qdr-operator-controller")
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hundred_interconnects_survive_restarts_a_killed_leader_and_a_deleted_secret() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = qdr_tests::shared().await;
    cp.install_crd().await;
    let client = cp.client().await.unwrap();
    let system = cp.namespace("faults-system").await;
    let ns = cp.namespace("faults").await;
    let (port_a, port_b) = (common::free_port(), common::free_port());
    let reg = common::register(&client, "faults", port_a, port_b).await;
    common::label_namespace(cp, &ns.name, "faults");
    let install = common::install(&system.name, &reg);
    let webhooks =
        [port_a, port_b].map(|p| common::start_replica(cp, &system.name, &reg, p, &["--check-interval=1s"]));
    for w in &webhooks {
        common::wait_ready(w, Duration::from_secs(60)).await;
    }
    common::wait_admission_works(cp, &ns.name, Duration::from_secs(60)).await;
    let mut controllers: Vec<(String, Process)> = ["faults-0", "faults-1"]
        .iter()
        .map(|id| (id.to_string(), start_controller(cp, &install, id)))
        .collect();

    // 300 Interconnects, created through both webhooks while the faults begin.
    let started = Instant::now();
    let ics = interconnects(&client, &ns.name);
    let creator = {
        let ics = ics.clone();
        tokio::spawn(async move {
            futures::stream::iter(0..ICS)
                .map(|i| {
                    let ics = ics.clone();
                    async move {
                        let obj: DynamicObject = serde_json::from_value(json!({
                            "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                            "metadata": {"name": format!("ic-{i:03}")}, "spec": {}}))
                        .unwrap();
                        // The API server may be restarting: retry until stored.
                        loop {
                            match ics.create(&PostParams::default(), &obj).await {
                                Ok(_) => return,
                                Err(kube::Error::Api(s)) if s.code == 409 => return,
                                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                            }
                        }
                    }
                })
                .buffer_unordered(8)
                .collect::<Vec<()>>()
                .await;
        })
    };

    // 1. kube-apiserver, 2. etcd, each restarted once while objects are being created.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cp.restart_apiserver().await.unwrap();
    let apiserver_restarted = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cp.restart_etcd().await.unwrap();
    let etcd_restarted = started.elapsed();
    creator.await.unwrap();
    let created = started.elapsed();

    // 3. The leading controller SIGKILLed; the other takes over once the Lease expires.
    let leases: Api<Lease> = system.api();
    let leader = qdr_tests::eventually("a leader", Duration::from_secs(30), || holder(&leases)).await;
    let i = controllers.iter().position(|(id, _)| *id == leader).unwrap();
    let (_, killed) = controllers.remove(i);
    killed.signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let successor = qdr_tests::eventually("a new leader", LEASE * 4, || async {
        holder(&leases).await.filter(|h| *h != leader)
    })
    .await;
    let takeover = killed_at.elapsed();

    // 4. The new leader paused (a stalled node) past its renew deadline while the
    //    Interconnects converge: it demotes itself, its writes in flight are abandoned, and
    //    it must lead again (no other replica is left) and finish the work.
    let lead = &controllers.iter().find(|(id, _)| *id == successor).unwrap().1;
    let count = |needle: &str| lead.log_lines_with(&[needle], usize::MAX).lines().count();
    let (demotions, terms) = (count("could not renew the lease in time"), count("leading: reconciling"));
    lead.signal(libc::SIGSTOP);
    tokio::time::sleep(RENEW_DEADLINE + Duration::from_secs(1)).await;
    lead.signal(libc::SIGCONT);
    // It takes its own Lease back at its first attempt the API server answers.
    let resumed = Instant::now();
    while count("could not renew the lease in time") == demotions || count("leading: reconciling") == terms {
        assert!(
            resumed.elapsed() < LEASE * 8,
            "the paused leader did not demote itself and lead a new term within {:?}:\n{}",
            LEASE * 8,
            leadership(lead)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let paused = leadership(lead);

    // 5. The webhook's TLS Secret deleted while admission requests keep coming.
    let secrets: Api<Secret> = system.api();
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (ics, ok, failed, errors, stop) =
            (ics.clone(), ok.clone(), failed.clone(), errors.clone(), stop.clone());
        tokio::spawn(async move {
            let dry = PostParams { dry_run: true, ..Default::default() };
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                    "metadata": {"name": format!("dry-{n}")}, "spec": {}}))
                .unwrap();
                match ics.create(&dry, &obj).await {
                    Ok(o) if o.data["spec"]["users"] == format!("dry-{n}-users") => {
                        ok.fetch_add(1, Ordering::SeqCst)
                    }
                    Ok(o) => {
                        errors.lock().unwrap().push(format!("not defaulted: {}", o.data["spec"]));
                        failed.fetch_add(1, Ordering::SeqCst)
                    }
                    Err(e) => {
                        errors.lock().unwrap().push(e.to_string());
                        failed.fetch_add(1, Ordering::SeqCst)
                    }
                };
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = secrets.get(qdr_tests::rbac::DEPLOY_WEBHOOK_SECRET).await.unwrap().data;
    secrets.delete(qdr_tests::rbac::DEPLOY_WEBHOOK_SECRET, &Default::default()).await.unwrap();
    let deleted_at = Instant::now();
    let restored = qdr_tests::eventually("the Secret restored", Duration::from_secs(30), || async {
        secrets.get_opt(qdr_tests::rbac::DEPLOY_WEBHOOK_SECRET).await.ok().flatten()
    })
    .await;
    let restored_after = deleted_at.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await; // requests after the restore, too
    stop.store(true, Ordering::SeqCst);
    load.await.unwrap();
    assert_eq!(restored.data, before, "the Secret came back with other material (a new CA)");

    // Convergence: every Interconnect current, with exactly its children.
    let deadline = Instant::now() + CONVERGE;
    let stored = loop {
        let list = ics.list(&ListParams::default()).await.unwrap().items;
        let stored: Vec<DynamicObject> = list
            .into_iter()
            .filter(|o| o.metadata.name.as_deref().is_some_and(|n| n.starts_with("ic-")))
            .collect();
        let pending = stored.iter().filter(|o| !current(o)).count();
        if stored.len() == ICS && pending == 0 {
            break stored;
        }
        assert!(
            Instant::now() < deadline,
            "{} stored, {pending} not current after {CONVERGE:?}; the first of them:\n{}\nleadership:\n{}\nleader log:\n{}",
            stored.len(),
            stored
                .iter()
                .filter(|o| !current(o))
                .take(3)
                .map(|o| format!(
                    "{} generation {:?}: {}",
                    o.name_any(),
                    o.metadata.generation,
                    o.data["status"]
                ))
                .collect::<Vec<_>>()
                .join("\n"),
            controllers.iter().map(|(_, p)| leadership(p)).collect::<Vec<_>>().join("\n"),
            controllers.iter().map(|(_, p)| p.log_tail(30)).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let converged = started.elapsed();
    let mut by_kind: BTreeMap<&str, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for kind in [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "Deployment",
        "DaemonSet",
        "Service",
        "Ingress",
        "PodDisruptionBudget",
    ] {
        by_kind.insert(kind, children(&client, &ns.name, &resource(kind)).await);
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for o in &stored {
        let ic: Interconnect = serde_json::from_value(serde_json::to_value(o).unwrap()).unwrap();
        let name = o.metadata.name.clone().unwrap();
        let want = expected(&ic);
        for (kind, have) in &by_kind {
            let have = have.get(&name).cloned().unwrap_or_default();
            let want = want.get(kind).cloned().unwrap_or_default();
            *counts.entry(kind).or_default() += have.len();
            if have != want {
                wrong.push(format!("{name} {kind}: have {have:?}, want {want:?}"));
            }
        }
    }
    let owners: BTreeSet<&String> = by_kind.values().flat_map(|m| m.keys()).collect();
    let strays: Vec<&&String> = owners.iter().filter(|o| !o.starts_with("ic-")).collect();
    assert!(strays.is_empty(), "children of no stored Interconnect: {strays:?}");
    assert!(wrong.is_empty(), "{} wrong child sets:\n{}", wrong.len(), wrong.join("\n"));

    let mut panics = Vec::new();
    for (name, log) in controllers
        .iter()
        .map(|(id, p)| (id.clone(), p.log_path().to_path_buf()))
        .chain([(leader.clone(), killed.log_path().to_path_buf())])
        .chain(webhooks.iter().map(|w| (format!("webhook:{}", w.port), w.process.log_path().to_path_buf())))
    {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("panicked at") {
            panics.push(name);
        }
    }
    let alive = controllers.iter().all(|(_, p)| p.exited().is_none())
        && webhooks.iter().all(|w| w.process.exited().is_none());
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    println!(
        "faults: {ICS} Interconnects created in {created:?} (kube-apiserver restarted at {apiserver_restarted:?}, etcd at \
         {etcd_restarted:?}); leader {leader} SIGKILLed, {successor} took over after {takeover:?}; webhook Secret \
         deleted and restored after {restored_after:?} with the same CA; admission requests meanwhile: {ok} ok, {failed} \
         failed; all converged {converged:?} after the start; children: {counts:?}; the paused leader:\n{paused}"
    );
    assert!(panics.is_empty(), "panicked: {panics:?}");
    assert!(alive, "a process exited");
    assert_eq!(
        failed,
        0,
        "admission requests failed while the Secret was gone: {:?}",
        errors.lock().unwrap()
    );
    assert!(ok >= 10, "too few admission requests ({ok}) to say anything");
    assert_eq!(counts["Deployment"], ICS);
    assert_eq!(counts["DaemonSet"], 0);
}
