//! Every example of `deploy/examples` starts, and its routers pass their readiness probe.

use std::time::{Duration, Instant};

use qdr_tests::routers::{self, apply, router_pods};
use serde_json::{Value, json};

use crate::{cluster, condition_of, controllers, get_ic, open_connections, shown};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_starts_and_its_routers_pass_their_readiness_probe() {
    let cp = cluster().await;
    let ns = cp.namespace("examples").await;
    let examples = qdr_tests::workspace_root().join("deploy/examples");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&examples)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
    {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let mut doc: Value = serde_saphyr::from_str(&text).unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        // AntiAffinity puts each router on a node of its own; there is one real node here.
        if doc["spec"]["deploymentPlan"]["placement"] == "AntiAffinity" {
            doc["spec"]["deploymentPlan"]["size"] = json!(1);
        }
        apply(cp, &ns.name, &doc);
        names.push(name);
    }
    names.sort();
    assert_eq!(names, ["edge-routers", "router-mesh", "secure-router"]);
    for name in &names {
        let ready = routers::wait_ready(cp, &ns.name, name, &controllers());
        let pods = router_pods(&ns, name).await;
        say!("example {name}: {} router(s) Ready ({ready:.1?} more)", pods.len());
        assert!(!pods.is_empty());
    }
    // The edge example's uplink names the interior example's Service, `router-mesh`.
    for (pod, _) in router_pods(&ns, "edge-routers").await {
        qdr_tests::eventually(&format!("{pod}'s uplink to router-mesh"), Duration::from_secs(90), || async {
            open_connections(cp, &ns.name, &pod, "edge")
                .iter()
                .any(|c| c["host"] == "router-mesh:45672")
                .then_some(())
        })
        .await;
    }
    // Every example's mesh as the controller reports it: connected, with its columns and
    // its topology.
    // `Connected` may still count a router as starting (Ready, no link yet: JOIN_GRACE);
    // every router is judged once its links open or the grace is over.
    for name in &names {
        qdr_tests::eventually(
            &format!("example {name} MeshConnected Connected, no router starting"),
            Duration::from_secs(90),
            || async {
                let ic = get_ic(cp, &ns.name, name);
                let (_, reason, message) = condition_of(&ic, "MeshConnected");
                (reason == "Connected" && !message.contains("starting")).then_some(())
            },
        )
        .await;
    }
    let wide = shown(cp, &["get", "interconnect", "-n", &ns.name, "-o", "wide"]);
    for summary in ["1/1 uplinked", "3/3 connected", "1/1 connected"] {
        assert!(wide.contains(summary), "{summary}: {wide}");
    }
    let bin = qdr_tests::components::binary("kubectl-qdr");
    for name in &names {
        let out = std::process::Command::new(&bin)
            .env("KUBECONFIG", cp.kubeconfig())
            .args(["topology", name, "-n", &ns.name])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        say!("kubectl qdr topology {name}\n{}", String::from_utf8_lossy(&out.stdout));
    }
}
