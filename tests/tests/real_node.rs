//! The real node (`qdr_tests::real_node`): it runs pods for real, and whatever it changed on
//! the host is undone when the control plane stops, when its process panics, and — for an
//! owner that was SIGKILLed — by the next real node's start. The two tests take turns: there
//! is one real node per machine, and the checks look at host-wide state.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use qdr_tests::real_node::{self, Record};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn forward_rules() -> String {
    let out = Command::new("iptables").args(["-S", "FORWARD"]).output().expect("iptables");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_node_runs_restricted_pods_and_leaves_nothing_when_stopped() {
    let _turn = TURN.lock().await;
    let began = Instant::now();
    let cp = qdr_tests::ControlPlane::start(qdr_tests::Options { real_nodes: 1, ..Default::default() })
        .await
        .unwrap_or_else(|e| panic!("control plane with a real node: {e}"));
    let real = cp.real_node().expect("a real node");
    eprintln!(
        "control plane with the real node Ready in {:.1?} (node {:.1?} after containerd started)",
        began.elapsed(),
        real.startup
    );
    let record: Record = real.record().clone();
    assert!(forward_rules().contains(&format!("-A FORWARD -i {0} ! -o {0} -j DROP", real_node::BRIDGE)));

    // The ServiceAccount admission plugin refuses pods until the namespace's default
    // ServiceAccount exists; kube-controller-manager makes it within seconds.
    let pods: Api<Pod> = Api::namespaced(cp.client().await.unwrap(), "default");
    let created = Instant::now();
    qdr_tests::eventually("the pod admitted", Duration::from_secs(30), || {
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &real_node::pause_pod("restricted")).await.ok() }
    })
    .await;
    let pod = qdr_tests::eventually("the pod Running", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let p = pods.get("restricted").await.ok()?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        }
    })
    .await;
    eprintln!("pod created → Running in {:.1?}", created.elapsed());
    let status = pod.status.unwrap();
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some(real_node::NODE));
    assert!(status.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("10.88.0.")), "{:?}", status.pod_ip);
    // A token is mounted (the ServiceAccount admission plugin runs).
    let volumes = pod.spec.unwrap().volumes.unwrap_or_default();
    assert!(volumes.iter().any(|v| v.name.starts_with("kube-api-access-")), "{volumes:?}");
    // The API server reaches the kubelet (logs go API server → kubelet on the bridge address).
    pods.logs("restricted", &LogParams::default()).await.expect("kubectl logs through the kubelet");
    // kube-proxy programs a Service for it (its chains must go at stop too).
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(cp.client().await.unwrap(), "default");
    let svc = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "restricted"},
        "spec": {"selector": {"app": "restricted"}, "ports": [{"port": 80}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    qdr_tests::eventually("kube-proxy's chain for the Service", Duration::from_secs(30), || async {
        let out = Command::new("iptables").args(["-t", "nat", "-S"]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).contains("default/restricted").then_some(())
    })
    .await;
    // While it runs, the host holds the node's parts.
    assert!(!real_node::leftovers(&record).is_empty());

    cp.stop();
    let left = real_node::leftovers(&record);
    assert!(left.is_empty(), "left on the host after stop:\n{}", left.join("\n"));
    assert!(!forward_rules().contains(real_node::BRIDGE));
}

/// Runs `real-node-probe <mode>` and returns it with the record it printed.
fn probe(mode: &str) -> (std::process::Child, Record) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_real-node-probe"))
        .arg(mode)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting real-node-probe");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("probe output");
    let record = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("real-node-probe {mode} printed no record ({e}): {line:?}"));
    (child, record)
}

fn wait_exit(child: &mut std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "real-node-probe did not exit in {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_or_killed_owner_leaves_nothing_behind() {
    let _turn = TURN.lock().await;
    // A panic with the node running (the control plane never dropped, as a test binary's
    // shared one): the exit hook cleans up.
    let (mut child, record) = probe("panic");
    let status = wait_exit(&mut child, Duration::from_secs(120));
    assert_eq!(status.code(), Some(101), "the probe ends by its panic");
    let left = real_node::leftovers(&record);
    assert!(left.is_empty(), "left on the host after a panic:\n{}", left.join("\n"));

    // SIGKILL: no hook runs, so the shims, containers, bridge and rules stay...
    let (mut child, record) = probe("wait");
    child.kill().unwrap();
    wait_exit(&mut child, Duration::from_secs(30));
    let left = real_node::leftovers(&record);
    assert!(left.iter().any(|l| l.starts_with("bridge ")), "{left:?}");
    assert!(
        left.iter().any(|l| l.starts_with("process ")),
        "the pod's processes outlive their owner: {left:?}"
    );
    // ...until the next real node starts: it cleans up after the dead owner first.
    let dir = tempfile::tempdir().unwrap();
    let host = real_node::Host::prepare(dir.path(), Duration::from_secs(60)).expect("the next real node");
    let next = host.record().clone();
    drop(host);
    let left: Vec<String> =
        real_node::leftovers(&record).into_iter().chain(real_node::leftovers(&next)).collect();
    assert!(left.is_empty(), "left on the host after the next start:\n{}", left.join("\n"));
}
