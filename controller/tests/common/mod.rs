//! Running real `qdr-controller` processes against the test control plane.
#![allow(dead_code, unused_imports)]

use std::process::Command;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use qdr_tests::rbac::Install;
use qdr_tests::{ControlPlane, Process};

pub use qdr_tests::components::{
    Replica, free_port, install, kubectl_stdin, label_namespace, register, start_replica,
    wait_admission_works, wait_ready,
};

/// Starts a controller replica with a fast Lease (`lease`, 4 s / 3 s / 0.5 s).
pub fn start_controller(cp: &ControlPlane, lease_ns: &str, lease: &str, identity: &str) -> Process {
    start_controller_on(cp, lease_ns, lease, identity, free_port())
}

/// [`start_controller`] with its health and metrics listener on `health`.
pub fn start_controller_on(
    cp: &ControlPlane,
    lease_ns: &str,
    lease: &str,
    identity: &str,
    health: u16,
) -> Process {
    start_controller_with(cp, lease_ns, lease, identity, health, &[])
}

/// [`start_controller_on`] with `extra` flags.
pub fn start_controller_with(
    cp: &ControlPlane,
    lease_ns: &str,
    lease: &str,
    identity: &str,
    health: u16,
    extra: &[String],
) -> Process {
    let mut cmd = controller_command(cp, lease_ns, lease, identity, health);
    cmd.args(extra);
    Process::spawn(identity, cmd, &cp.dir().join(format!("{identity}.log"))).expect("start controller")
}

/// The command [`start_controller_on`] runs: as the `qdr-controller` ServiceAccount of
/// `lease_ns`, bound by `deploy/`'s RBAC ([`ControlPlane::install_rbac`]).
pub fn controller_command(
    cp: &ControlPlane,
    lease_ns: &str,
    lease: &str,
    identity: &str,
    health: u16,
) -> Command {
    let install = Install { lease: lease.into(), ..Install::new(lease_ns) };
    controller_command_for(cp, &install, identity, health)
}

/// The command of a controller replica of `install` (its RBAC applied, its Lease, its
/// ServiceAccount; `--watch-namespaces` when it watches a list).
pub fn controller_command_for(cp: &ControlPlane, install: &Install, identity: &str, health: u16) -> Command {
    controller_command_observing(cp, install, identity, health, false)
}

/// [`controller_command_for`], reading the routers when `observe` (`--observe-mesh=on`:
/// stand-in routers answer at the pods' addresses).
pub fn controller_command_observing(
    cp: &ControlPlane,
    install: &Install,
    identity: &str,
    health: u16,
    observe: bool,
) -> Command {
    let ids = cp.install_rbac(install).expect("installing deploy/'s RBAC");
    let (lease_ns, lease) = (&install.namespace, &install.lease);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qdr-controller"));
    if !install.watch.is_empty() {
        cmd.arg(format!("--watch-namespaces={}", install.watch.join(",")));
    }
    cmd.env("KUBECONFIG", ids.controller).env("RUST_LOG", "info,kube=warn").args([
        &format!("--lease-namespace={lease_ns}"),
        &format!("--lease-name={lease}"),
        &format!("--identity={identity}"),
        "--lease-duration=4s",
        "--renew-deadline=3s",
        "--retry-period=500ms",
        &format!("--health-listen=127.0.0.1:{health}"),
        "--default-image=quay.io/interconnectedcloud/qdrouterd:1.19.0",
    ]);
    // Simulated nodes: nobody answers at the pods' addresses, unless stand-ins do.
    cmd.arg(if observe { "--observe-mesh=on" } else { "--observe-mesh=off" });
    cmd
}

/// `GET http://127.0.0.1:<port><path>` → (status, body).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await.ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

pub fn interconnects(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

pub use qdr_tests::eventually;

/// The controller's `qdr_controller_reconciles_total` from its metrics on port `health`.
pub async fn reconciles(health: u16) -> Option<u64> {
    let body = metrics_text(health).await?;
    body.lines().find_map(|l| l.strip_prefix("qdr_controller_reconciles_total ")?.trim().parse().ok())
}

/// How many times an event with `reason` was recorded in the namespace (events.k8s.io/v1;
/// the recorder folds repeats of one reason into a series on one object).
pub async fn events(ns: &qdr_tests::TestNamespace, reason: &str) -> usize {
    let api: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    let items = api.list(&ListParams::default()).await.unwrap().items;
    items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count as usize))
        .sum()
}

/// Reads the condition `type_` of Interconnect `name` once it has `reason`.
pub async fn condition_with_reason(
    ns: &qdr_tests::TestNamespace,
    name: &str,
    type_: &str,
    reason: &str,
) -> serde_json::Value {
    let ics = interconnects(&ns.client, &ns.name);
    eventually(&format!("{type_} reason {reason}"), Duration::from_secs(30), || async {
        let o = ics.get(name).await.ok()?;
        let conds = o.data["status"]["conditions"].as_array()?.clone();
        conds.into_iter().find(|c| c["type"] == type_ && c["reason"] == reason)
    })
    .await
}

/// The text exposition of the controller's metrics on `health`.
pub async fn metrics_text(health: u16) -> Option<String> {
    http_get(health, "/metrics").await.map(|(_, body)| body)
}

/// A Route CRD (`route.openshift.io/v1`): what the controller discovers as OpenShift.
const ROUTE_CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"routes.route.openshift.io"},
 "spec":{"group":"route.openshift.io","scope":"Namespaced",
  "names":{"plural":"routes","singular":"route","kind":"Route"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#;

/// Installs [`ROUTE_CRD`] and waits until it is established.
pub fn install_route_crd(cp: &ControlPlane) {
    cp.kubectl_stdin(&["apply", "-f", "-"], ROUTE_CRD).expect("applying the Route CRD");
    cp.kubectl_stdin(
        &["wait", "--for=condition=Established", "crd/routes.route.openshift.io", "--timeout=30s"],
        "",
    )
    .expect("the Route CRD is established");
}

/// One controller per test binary on a control plane with simulated nodes: started by the
/// first test that asks, its health and metrics port kept for the others.
pub struct SharedController {
    process: tokio::sync::OnceCell<(Process, u16)>,
}

impl SharedController {
    pub const fn new() -> Self {
        Self { process: tokio::sync::OnceCell::const_new() }
    }

    /// The shared control plane with `nodes` simulated nodes and the CRD installed, and a
    /// controller replica (identity `identity`, Lease in a namespace named after `system`)
    /// running on it.
    pub async fn start(&self, nodes: usize, system: &str, identity: &str) -> &'static ControlPlane {
        self.start_with(nodes, system, identity, &[]).await
    }

    /// [`SharedController::start`] with `extra` flags for the controller.
    pub async fn start_with(
        &self,
        nodes: usize,
        system: &str,
        identity: &str,
        extra: &[String],
    ) -> &'static ControlPlane {
        let cp = qdr_tests::shared_with_nodes(nodes).await;
        cp.install_crd().await;
        self.process
            .get_or_init(|| async {
                let ns = cp.namespace(system).await.name.clone();
                let health = free_port();
                (start_controller_with(cp, &ns, "qdr-operator-controller", identity, health, extra), health)
            })
            .await;
        cp
    }

    /// The health and metrics port of the started controller.
    pub fn health(&self) -> u16 {
        self.process.get().expect("SharedController::start first").1
    }
}

/// Creates Interconnect `name` with `spec` in `ns`.
pub async fn create_interconnect(ns: &qdr_tests::TestNamespace, name: &str, spec: serde_json::Value) {
    let o: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": name}, "spec": spec}))
    .unwrap();
    interconnects(&ns.client, &ns.name).create(&kube::api::PostParams::default(), &o).await.unwrap();
}

/// The text of key `key` of Secret `s` (empty when it has none).
pub fn secret_text(s: &k8s_openapi::api::core::v1::Secret, key: &str) -> String {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// The routers' management port (`qdr_controller::mesh::management::MANAGEMENT_PORT`).
pub const ROUTER_MANAGEMENT_PORT: u16 = 55670;

/// The pods of Interconnect `name` once there are `n`, by name.
pub async fn pods_of(ns: &qdr_tests::TestNamespace, name: &str, n: usize) -> Vec<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    eventually(&format!("{n} pods of {name}"), Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default().labels(&format!("interconnect_cr={name}"))).await.ok()?;
        let mut names: Vec<String> = list.items.into_iter().filter_map(|p| p.metadata.name).collect();
        names.sort();
        (names.len() == n).then_some(names)
    })
    .await
}

/// Makes pod `name` look running, with address `ip`, as a kubelet would: Ready for an hour.
/// Panics when the pod is not there.
pub async fn run_pod(ns: &qdr_tests::TestNamespace, name: &str, ip: &str) {
    assert!(run_pod_if_present(ns, name, ip).await, "pod {name} not found");
}

/// [`run_pod`] for a pod that may have been deleted since it was listed (a rollout's old pod):
/// false when it is not there; panics on any other error.
pub async fn run_pod_if_present(ns: &qdr_tests::TestNamespace, name: &str, ip: &str) -> bool {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    let since = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
    let status = serde_json::json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since.to_string()},
                       {"type": "PodScheduled", "status": "True", "lastTransitionTime": since.to_string()}]}});
    match pods.patch_status(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await
    {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 404 => false,
        Err(e) => panic!("running pod {name}: {e}"),
    }
}

/// Pod `name`'s readiness gate condition `qdr-operator.io/linked`, as (status, reason), when
/// it has one.
pub async fn linked_condition(ns: &qdr_tests::TestNamespace, name: &str) -> Option<(String, String)> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    let p = pods.get(name).await.ok()?;
    let c = p.status?.conditions?.into_iter().find(|c| c.type_ == qdr_controller::builders::LINKED)?;
    Some((c.status, c.reason.unwrap_or_default()))
}

/// Waits until pod `name`'s readiness gate `qdr-operator.io/linked` is `True` with `reason`.
pub async fn linked_with_reason(ns: &qdr_tests::TestNamespace, name: &str, reason: &str) {
    eventually(&format!("{name} linked ({reason})"), Duration::from_secs(60), || async {
        (linked_condition(ns, name).await? == ("True".to_string(), reason.to_string())).then_some(())
    })
    .await;
}

/// A TLS server configuration with Interconnect `name`'s generated management certificate,
/// once it exists: what its routers present.
pub async fn router_tls(ns: &qdr_tests::TestNamespace, name: &str) -> std::sync::Arc<rustls::ServerConfig> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = ns.api();
    let secret_name = format!("{name}-qdr-operator-management-credentials");
    let s =
        eventually(&secret_name, Duration::from_secs(30), || async { secrets.get(&secret_name).await.ok() })
            .await;
    qdr_tests::amqp_peer::server_tls(
        secret_text(&s, "tls.crt").as_bytes(),
        secret_text(&s, "tls.key").as_bytes(),
    )
    .expect("the management certificate makes a TLS server configuration")
}

/// A peer at `ip`:55670 with `tls`, running `script`.
pub async fn router_at(
    ip: &str,
    tls: &std::sync::Arc<rustls::ServerConfig>,
    script: qdr_tests::amqp_peer::Script,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind((ip, ROUTER_MANAGEMENT_PORT)).await.unwrap();
    qdr_tests::amqp_peer::serve(listener, Some(tls.clone()), script)
}

/// `MeshConnected` of Interconnect `name`: (status, reason, message).
pub async fn mesh_connected(ns: &qdr_tests::TestNamespace, name: &str) -> Option<(String, String, String)> {
    let ic = interconnects(&ns.client, &ns.name).get(name).await.ok()?;
    let c =
        ic.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "MeshConnected")?.clone();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// The holder of Lease `name`, if any.
pub async fn holder_of(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
    name: &str,
) -> Option<String> {
    leases.get_opt(name).await.ok().flatten()?.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// How long after `since` Lease `name` names a holder other than `old` (polled every 20 ms;
/// panics after `limit`).
pub async fn takeover_of(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
    name: &str,
    old: &str,
    since: std::time::Instant,
    limit: Duration,
) -> (String, Duration) {
    loop {
        if let Some(h) = holder_of(leases, name).await.filter(|h| h != old) {
            return (h, since.elapsed());
        }
        assert!(since.elapsed() < limit, "no replica took the Lease from {old} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
