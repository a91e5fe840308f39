//! Proves the control-plane harness is real: objects created through `kube::Client`
//! are seen by kubectl, kube-controller-manager makes ReplicaSets and collects garbage,
//! simulated nodes get pods scheduled by kube-scheduler and made Ready by kwok, and child
//! processes die with the test process.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/none:1"}]}
            }
        }
    }))
    .expect("valid deployment")
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn objects_created_through_kube_are_seen_by_kubectl() {
    let cp = qdr_tests::shared().await;
    eprintln!("control plane ready in {:.2?} (etcd spawn to /readyz + namespace default)", cp.startup);
    let ns = cp.namespace("smoke").await;

    let cms: Api<ConfigMap> = ns.api();
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("smoke-config".into());
    cm.data = Some([("key".to_string(), "value".to_string())].into());
    cms.create(&PostParams::default(), &cm).await.expect("create configmap");
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("smoke-deploy")).await.expect("create deployment");

    let out =
        cp.kubectl().args(["get", "deploy", "-n", &ns.name, "-o", "name"]).output().expect("run kubectl");
    assert!(out.status.success(), "kubectl failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "deployment.apps/smoke-deploy");

    let out = cp
        .kubectl()
        .args(["get", "cm", "smoke-config", "-n", &ns.name, "-o", "jsonpath={.data.key}"])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "value");

    // And the other way round: what kubectl creates, the client reads.
    let out = cp
        .kubectl()
        .args(["create", "configmap", "from-kubectl", "-n", &ns.name, "--from-literal=a=b"])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl failed: {}", String::from_utf8_lossy(&out.stderr));
    let got = cms.get("from-kubectl").await.expect("configmap made by kubectl");
    assert_eq!(got.data.unwrap()["a"], "b");
}

#[tokio::test]
async fn the_server_is_a_real_kube_apiserver_with_rbac() {
    let cp = qdr_tests::shared().await;
    let out = cp.kubectl().args(["version", "-o", "json"]).output().expect("run kubectl");
    assert!(out.status.success(), "kubectl version failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.33.13", "pinned build with version stamp");
    // RBAC is enforced: an ordinary user may not list secrets.
    let out = cp
        .kubectl()
        .args(["auth", "can-i", "list", "secrets", "--as", "jane", "-A"])
        .output()
        .expect("run kubectl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn controller_manager_creates_replicasets_and_collects_garbage() {
    let cp = qdr_tests::shared_with_controller_manager().await;
    let ns = cp.namespace("kcm").await;

    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("web")).await.expect("create deployment");
    let rss: Api<ReplicaSet> = ns.api();
    eventually("a ReplicaSet for deployment web", Duration::from_secs(60), || async {
        rss.list(&ListParams::default().labels("app=web"))
            .await
            .map(|l| {
                l.items.iter().any(|rs| {
                    rs.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "Deployment" && o.name == "web")
                })
            })
            .unwrap_or(false)
    })
    .await;

    let cms: Api<ConfigMap> = ns.api();
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = cms.create(&PostParams::default(), &owner).await.expect("create owner");
    let mut child = ConfigMap::default();
    child.metadata.name = Some("child".into());
    child.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().expect("uid"),
        ..Default::default()
    }]);
    cms.create(&PostParams::default(), &child).await.expect("create child");
    cms.delete("owner", &DeleteParams::background()).await.expect("delete owner");
    eventually("garbage collection of the child ConfigMap", Duration::from_secs(90), || async {
        matches!(cms.get_opt("child").await, Ok(None))
    })
    .await;
}

#[tokio::test]
async fn simulated_nodes_run_scheduled_pods_to_ready() {
    let began = Instant::now();
    let cp = qdr_tests::shared_with_nodes(2).await;
    eprintln!(
        "two simulated nodes Ready {:.2?} after asking (control plane included if it was not up)",
        began.elapsed()
    );
    let ns = cp.namespace("nodes").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("sim")).await.expect("create deployment");
    let pods: Api<Pod> = ns.api();
    eventually(
        "2 pods bound to simulated nodes, Running and Ready with a pod IP",
        Duration::from_secs(60),
        || async {
            let items = pods
                .list(&ListParams::default().labels("app=sim"))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            items.len() == 2
                && items.iter().all(|p| {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default();
                    let st = p.status.clone().unwrap_or_default();
                    let ready =
                        st.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
                    node.starts_with("node-")
                        && st.phase.as_deref() == Some("Running")
                        && ready
                        && st.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("10.244."))
                })
        },
    )
    .await;

    // What a failed test prints first: the disk, the nodes' conditions, the pods' phases.
    let state = cp.state_of(&ns.name);
    eprintln!("{state}");
    assert!(state.contains("Avail"), "df's header: {state}");
    assert!(state.contains("node-0: Ready") && state.contains("node-1: Ready"), "{state}");
    let running = state.lines().filter(|l| l.starts_with("sim-") && l.contains(" Running ")).count();
    assert_eq!(running, 2, "{state}");

    // A node added later is Ready with the labels and capacity of the others; removing it
    // deletes the Node.
    cp.add_node("extra").await.expect("add node");
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let extra = nodes.get("extra").await.expect("node extra");
    assert_eq!(extra.metadata.labels.unwrap()["kubernetes.io/hostname"], "extra");
    let cpu = extra.status.unwrap().allocatable.unwrap()["cpu"].0.clone();
    assert_eq!(cpu, qdr_tests::NODE_CAPACITY.0);
    cp.remove_node("extra").await.expect("remove node");
    eventually("node extra deleted", Duration::from_secs(30), || async {
        matches!(nodes.get_opt("extra").await, Ok(None))
    })
    .await;
}

#[test]
fn a_missing_binary_is_a_loud_error_naming_the_build_command() {
    let empty = tempfile::tempdir().unwrap();
    let err = qdr_tests::Testbin::from_dir(empty.path().to_path_buf()).unwrap_err().to_string();
    assert!(err.contains("make testbin"), "{err}");
    assert!(err.contains("etcd"), "{err}");
}

#[test]
fn children_die_with_the_test_process() {
    use std::io::BufRead;
    let mut probe = std::process::Command::new(env!("CARGO_BIN_EXE_orphan-probe"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start probe");
    let mut line = String::new();
    std::io::BufReader::new(probe.stdout.take().unwrap()).read_line(&mut line).expect("read pid");
    let pid: i32 = line.trim().parse().expect("pid");
    let alive = |pid: i32| {
        // A zombie still has a /proc entry; read its state.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
            .unwrap_or(false)
    };
    assert!(alive(pid), "sleep child should be running");
    probe.kill().expect("SIGKILL the probe");
    probe.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "child {pid} outlived its parent");
        std::thread::sleep(Duration::from_millis(50));
    }
}
