//! Real routers through the operator: the router image built from source
//! (`tools/router-image/build.sh`) runs as pods on the real node (`qdr_tests::routers`), made
//! by `qdr-controller` from Interconnects, and real AMQP clients
//! (`tests/amqp/client.py`, Debian's Proton) and the image's own `qdmanage` talk to them.
//!
//! One real node runs here, so every router of a test shares it: placement `Any` and `Every`
//! (one router) run as they would anywhere; `AntiAffinity` gets one router per node, so its
//! example runs with one router. The real node's CoreDNS resolves Service names, so edge
//! uplinks and connectors name Services as users write them.
//!
//! One test program (one real node), one file per concern: the mesh (`interior.rs`), edges,
//! TLS, link routes, rollouts, the status the routers' view gives, the examples and the
//! image. This file holds what they share: the cluster with one controller, and reading an
//! Interconnect's status and a router's connections.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use qdr_controller::mesh;
use qdr_tests::routers::{self, qdmanage};
use qdr_tests::{ControlPlane, Process};
use serde_json::Value;

static START: OnceLock<Instant> = OnceLock::new();

macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[{:6.1}s] {}", crate::START.get_or_init(Instant::now).elapsed().as_secs_f64(), format!($($arg)*))
    };
}

static READY: tokio::sync::OnceCell<Process> = tokio::sync::OnceCell::const_new();

/// The controllers running, for their logs.
fn controllers() -> Vec<&'static Process> {
    READY.get().into_iter().collect()
}

/// The control plane with the real node open to routers, the router image imported, the CRD
/// installed and one controller running.
async fn cluster() -> &'static ControlPlane {
    let cp = qdr_tests::shared_with_real_node().await;
    READY
        .get_or_init(|| async {
            routers::check_client().expect("the AMQP client");
            let t = Instant::now();
            routers::routers_on_real_node(cp).expect("untainting the real node");
            routers::import_router_image(cp).expect("the router image");
            say!("router image built (or cached) and imported in {:.1?}", t.elapsed());
            cp.install_crd().await;
            routers::start_controller(cp, "qdr-controller-0", &[]).expect("the controller")
        })
        .await;
    cp
}

/// The `connection` entities of `pod`'s router with role `role` that are open.
fn open_connections(cp: &ControlPlane, ns: &str, pod: &str, role: &str) -> Vec<Value> {
    match qdmanage(cp, ns, pod, &["query", "--type=connection"]) {
        Ok(Value::Array(all)) => {
            all.into_iter().filter(|c| c["role"] == role && c["opened"] == true).collect()
        }
        _ => Vec::new(),
    }
}

/// Starts the test broker in namespace `ns`: `tests/amqp/peer.py` (a queue per address) in
/// pod `broker` of the router image, which has Proton's Python binding, behind Service
/// `broker` on port 5672. What it stores and delivers is in its log
/// (`link_routes::peer_events`).
fn start_broker(cp: &ControlPlane, ns: &str) {
    use qdr_tests::routers::{ROUTER_IMAGE, apply};
    use serde_json::json;
    let script = std::fs::read_to_string(qdr_tests::workspace_root().join("tests/amqp/peer.py")).unwrap();
    apply(
        cp,
        ns,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "peer"},
                                "data": {"peer.py": script}}),
    );
    apply(
        cp,
        ns,
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "broker", "labels": {"app": "broker"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "peer", "image": ROUTER_IMAGE, "imagePullPolicy": "Never",
                    "command": ["python3", "-u", "/peer/peer.py", "--listen", "0.0.0.0:5672"],
                    "ports": [{"containerPort": 5672}],
                    "volumeMounts": [{"name": "peer", "mountPath": "/peer"}],
                }],
                "volumes": [{"name": "peer", "configMap": {"name": "peer"}}],
            },
        }),
    );
    apply(
        cp,
        ns,
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "broker"},
                                "spec": {"selector": {"app": "broker"}, "ports": [{"port": 5672}]}}),
    );
}

/// Interconnect `name` as JSON (`kubectl get -o json`).
fn get_ic(cp: &ControlPlane, ns: &str, name: &str) -> Value {
    let out = routers::kubectl(cp, &["get", "interconnect", name, "-n", ns, "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// Condition `type_` of `ic` as (status, reason, message).
fn condition_of(ic: &Value, type_: &str) -> (String, String, String) {
    let c = ic["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == type_);
    let field = |k: &str| c.and_then(|c| c[k].as_str()).unwrap_or_default().to_string();
    (field("status"), field("reason"), field("message"))
}

/// Whether `ic`'s mesh is `Connected` with every router judged: a read while a router is
/// still joining (Ready, not linked yet: within `JOIN_GRACE`) says `Connected` with "N
/// starting", and the next may then name a link not yet opened.
fn mesh_settled(ic: &Value) -> bool {
    let (_, reason, message) = condition_of(ic, "MeshConnected");
    reason == "Connected" && !message.contains("starting")
}

/// `kubectl <args>`'s standard output, printed.
fn shown(cp: &ControlPlane, args: &[&str]) -> String {
    let out = routers::kubectl(cp, args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    say!("kubectl {}\n{text}", args.join(" "));
    text
}

/// What each of `pods` answers the controller's mesh reader (`mesh::reader::observe`, two
/// at a time, on the plain listener 5672).
async fn observe(pods: &[(String, String)]) -> std::collections::BTreeMap<String, mesh::Observation> {
    let targets: Vec<mesh::reader::Target> = pods
        .iter()
        .map(|(pod, ip)| mesh::reader::Target {
            pod: pod.clone(),
            ip: Some(ip.clone()),
            ready: true,
            linking: None,
            live: None,
            checked: None,
        })
        .collect();
    let pool = mesh::pool::Pool::new(2, 2);
    let plan = mesh::reader::Plan {
        port: 5672,
        namespace: "test",
        pool: &pool,
        timeout: Duration::from_secs(10),
        deadline: tokio::time::Instant::now() + Duration::from_secs(60),
        tls: None,
        fence: None,
        recheck: mesh::live::RECHECK,
    };
    mesh::reader::observe(&targets, &plan).await
}

mod across;
mod clusters;
mod edges;
mod examples;
mod image;
mod interior;
mod link_routes;
mod live;
mod normalise;
mod revoke;
mod rollouts;
mod status;
mod tls;
