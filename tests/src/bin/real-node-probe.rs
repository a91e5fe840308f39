//! Test helper for `tests/tests/real_node.rs`: starts a control plane with the real node,
//! runs one pod on it until it is Running, prints the node's record (JSON, one line), then
//! `panic` (the process ends by a panic: the exit hook must clean up) or `wait` (sleeps until
//! killed: a SIGKILLed owner, cleaned up by the next real node's start).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    assert!(mode == "panic" || mode == "wait", "usage: real-node-probe panic|wait");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let cp = rt.block_on(async {
        let cp = qdr_tests::ControlPlane::start(qdr_tests::Options { real_nodes: 1, ..Default::default() })
            .await
            .expect("control plane with a real node");
        let pods: Api<Pod> = Api::namespaced(cp.client().await.unwrap(), "default");
        pods.create(&PostParams::default(), &qdr_tests::real_node::pause_pod("probe")).await.expect("pod");
        qdr_tests::eventually("the probe pod Running", Duration::from_secs(60), || {
            let pods = pods.clone();
            async move {
                let p = pods.get("probe").await.ok()?;
                (p.status?.phase.as_deref() == Some("Running")).then_some(())
            }
        })
        .await;
        cp
    });
    // Never dropped, like the shared control plane of a test binary: only the exit hook can
    // clean up after the panic.
    let cp: &'static qdr_tests::ControlPlane = Box::leak(Box::new(cp));
    let record = cp.real_node().expect("a real node").record();
    println!("{}", serde_json::to_string(record).expect("a record serializes"));
    if mode == "panic" {
        panic!("real-node-probe: panicking with the real node running, as a failing test would");
    }
    std::thread::sleep(Duration::from_secs(600));
}
