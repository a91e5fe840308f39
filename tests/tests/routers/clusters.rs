//! Two clusters linked with a token, each with its own API server, controller and webhook.
//!
//! Cluster A is this binary's control plane with the real node, where A's routers run.
//! Cluster B is a second control plane with a simulated node and its own controller and
//! webhook; B's router pods run for real on the real node through
//! [`qdr_tests::stand_in::StandIn`] (one real node per machine: its module says why), and
//! B's controller reaches them at the address B's pods report. Only the token (copied as B's
//! admin would apply it) and the routers' TCP cross: B's controller and webhook hold no
//! credentials of A.

use std::time::{Duration, Instant};

use qdr_tests::components;
use qdr_tests::routers::{self, Receiver, apply, router_pods, send, url};
use qdr_tests::{ControlPlane, Options};
use serde_json::{Value, json};

use crate::{cluster, controllers};
use qdr_tests::links::{api, condition, grant_token, listed, portable, settled};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_api_servers_linked_by_a_token_carry_messages_and_report_both_ends() {
    let cp_a = cluster().await;
    let a = cp_a.namespace("clusters-a").await;
    // Cluster B: its own API server, controller and webhook.
    let t = Instant::now();
    let cp_b: &'static ControlPlane =
        Box::leak(Box::new(ControlPlane::start(Options { nodes: 1, ..Default::default() }).await.unwrap()));
    cp_b.install_crd().await;
    let b_system = cp_b.namespace("b-system").await;
    let b = cp_b.namespace("clusters-b").await;
    let client_b = cp_b.client().await.unwrap();
    let (validate, mutate) = (components::free_port(), components::free_port());
    let reg = components::register(&client_b, "b", validate, mutate).await;
    let webhooks = [validate, mutate].map(|p| components::start_replica(cp_b, &b_system.name, &reg, p, &[]));
    for w in &webhooks {
        components::wait_ready(w, Duration::from_secs(60)).await;
    }
    components::label_namespace(cp_b, &b.name, "b");
    components::wait_admission_works(cp_b, &b.name, Duration::from_secs(60)).await;
    let controller_b = routers::start_controller(cp_b, "qdr-controller-b", &[]).expect("B's controller");
    say!("cluster B (API server, controller, webhook) up in {:.1?}", t.elapsed());

    // A offers: an interior Interconnect and a grant for site b.
    apply(cp_a, &a.name, &routers::interconnect("hub", json!({"deploymentPlan": {"size": 1}})));
    routers::wait_ready(cp_a, &a.name, "hub", &controllers());
    let host = format!("hub.{}.svc.cluster.local", a.name);
    let token = grant_token(cp_a, &a, "site-b", "b", &host, json!({"expiry": "720h"})).await;
    settled(cp_a, &a, "hub", 1).await;

    // B refuses at apply what cannot work, through its own webhook: a Link naming a token
    // not applied yet, and the token for an edge Interconnect.
    let link = |ic: &str| qdr_tests::links::link(&format!("to-hub-{ic}"), ic, "site-b-token");
    let refused = |manifest: &Value| {
        let out =
            components::kubectl_stdin(cp_b, &["apply", "-n", &b.name, "-f", "-"], &manifest.to_string());
        assert!(!out.status.success(), "applied: {manifest}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let why = refused(&link("spoke"));
    assert!(why.contains("spec.tokenSecret") && why.contains("no such Secret"), "{why}");
    apply(cp_b, &b.name, &portable(&token));
    apply(
        cp_b,
        &b.name,
        &routers::interconnect(
            "leaf",
            json!({"deploymentPlan": {"role": "edge", "size": 1}, "edgeConnectors": [{"host": "nowhere", "port": 45672}]}),
        ),
    );
    let why = refused(&link("leaf"));
    assert!(
        why.contains("an inter-router token links an interior Interconnect, and this one is edge"),
        "{why}"
    );

    // B links out: the Link, then the Interconnect its routers dial from.
    let applied = Instant::now();
    apply(cp_b, &b.name, &link("spoke"));
    apply(cp_b, &b.name, &routers::interconnect("spoke", json!({"deploymentPlan": {"size": 1}})));
    let stand_in =
        qdr_tests::stand_in::StandIn::start(client_b.clone(), &b.name, "spoke", a.client.clone(), &a.name);
    let spoke = stand_in.wait(1, Duration::from_secs(120)).await;
    say!("B's router runs on the real node after {:.1?}: {spoke:?}", applied.elapsed());
    let links = api(&b, "Link", "links");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let l = links.get("to-hub-spoke").await.unwrap();
        if condition(&l, "Operational").is_some_and(|c| c["status"] == "True") {
            break l.data["status"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "B's Link is not Operational: {}\nB's controller:\n{}",
            l.data["status"],
            controller_b.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    say!("B: token applied → Link Operational in {:.1?}: {status}", applied.elapsed());
    let hub = router_pods(&a, "hub").await;
    assert_eq!(status["remoteRouter"], hub[0].0);
    assert!(status["tlsProtocol"].as_str().is_some_and(|p| p.starts_with("TLS")), "{status}");

    // Messages both ways, acknowledged: a receiver at each end, a sender at the other.
    let spoke_ip = spoke.values().next().unwrap().clone();
    let (hub_url, spoke_url) = (url(&hub[0].1, 5672), url(&spoke_ip, 5672));
    let at_hub = Receiver::attach(&hub_url, "clusters/to-a", 5, &[]);
    send(&spoke_url, "clusters/to-a", 0..5, "b-to-a-", Duration::from_secs(60), &[]);
    assert_eq!(at_hub.bodies().len(), 5);
    let at_spoke = Receiver::attach(&spoke_url, "clusters/to-b", 5, &[]);
    send(&hub_url, "clusters/to-b", 0..5, "a-to-b-", Duration::from_secs(60), &[]);
    assert_eq!(at_spoke.bodies().len(), 5);
    say!("B: token applied → messages both ways in {:.1?}", applied.elapsed());

    // A sees the site, by its certificate's identity.
    listed(&a, "site-b", &format!("b.site-b.{}", a.name), Duration::from_secs(120)).await;
    say!("A: token applied → the grant lists site b in {:.1?}", applied.elapsed());
    drop(stand_in);
    drop(controller_b);
    cp_b.stop();
}
