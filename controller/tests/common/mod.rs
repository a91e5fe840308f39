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
        // Simulated nodes: nobody answers at the pods' addresses.
        "--observe-mesh=off",
    ]);
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
