//! Edge routers: uplinks through the interior Service's name, messages between edges.

use std::time::{Duration, Instant};

use qdr_controller::mesh;
use qdr_tests::routers::{self, Receiver, apply, qdmanage, router_pods, send, url};
use serde_json::json;

use crate::{cluster, controllers, get_ic, mesh_settled, observe, open_connections, shown};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_routers_uplink_through_the_service_name_and_carry_messages_between_edges() {
    let cp = cluster().await;
    let ns = cp.namespace("edges").await;
    // The interior router's defaults include the edge listener on 45672; the edges name the
    // interior's Service, `hub`, as a user would (the cluster DNS resolves it through the
    // pod's search path).
    apply(
        cp,
        &ns.name,
        &routers::interconnect("hub", json!({"deploymentPlan": {"role": "interior", "size": 1}})),
    );
    apply(
        cp,
        &ns.name,
        &routers::interconnect(
            "leaf",
            json!({
                "deploymentPlan": {"role": "edge", "size": 2, "placement": "Any"},
                "edgeConnectors": [{"name": "uplink", "host": "hub", "port": 45672}],
            }),
        ),
    );
    for name in ["hub", "leaf"] {
        let ready = routers::wait_ready(cp, &ns.name, name, &controllers());
        say!("{name} Ready ({ready:.1?} more)");
    }
    let hub = router_pods(&ns, "hub").await;
    let leaves = router_pods(&ns, "leaf").await;
    assert_eq!((hub.len(), leaves.len()), (1, 2), "{hub:?} {leaves:?}");

    // Each edge router's uplink is open, to the Service by name; the interior sees both edges.
    for (pod, _) in &leaves {
        let t = Instant::now();
        let up =
            qdr_tests::eventually(&format!("{pod}'s uplink to open"), Duration::from_secs(90), || async {
                let up = open_connections(cp, &ns.name, pod, "edge");
                (!up.is_empty()).then_some(up)
            })
            .await;
        assert_eq!(up.len(), 1, "{pod}: {up:?}");
        assert_eq!(
            (up[0]["dir"].as_str(), up[0]["host"].as_str()),
            (Some("out"), Some("hub:45672")),
            "{up:?}"
        );
        say!("{pod}: uplink to hub:45672 open ({:.1?})", t.elapsed());
    }
    let edges = open_connections(cp, &ns.name, &hub[0].0, "edge");
    let mut peers: Vec<&str> = edges.iter().filter_map(|c| c["container"].as_str()).collect();
    peers.sort();
    let mut want: Vec<&str> = leaves.iter().map(|(p, _)| p.as_str()).collect();
    want.sort();
    assert_eq!(peers, want, "the interior's edge connections: {edges:?}");
    let report = mesh::assess(mesh::Mode::Edge, &observe(&leaves).await);
    assert_eq!((report.condition.reason, report.edges_uplinked), ("Connected", 2), "{report:?}");
    say!("mesh reader: {}", report.condition.message);
    // The controller reports the same: both edges uplinked, each to the hub's router.
    let leaf = qdr_tests::eventually("leaf MeshConnected Connected", Duration::from_secs(60), || async {
        let ic = get_ic(cp, &ns.name, "leaf");
        mesh_settled(&ic).then_some(ic)
    })
    .await;
    assert_eq!(leaf["status"]["mesh"]["summary"], "2/2 uplinked", "{}", leaf["status"]);
    for r in leaf["status"]["routers"].as_array().unwrap() {
        assert_eq!(r["mode"], "edge", "{r}");
        assert_eq!(
            (&r["uplink"], &r["edgeLinks"], &r["interRouterLinks"]),
            (&json!(hub[0].0), &json!(1), &json!(0)),
            "{r}"
        );
    }
    shown(cp, &["get", "interconnect", "-n", &ns.name, "-o", "wide"]);

    // Edge → interior → the other edge: a receiver on leaf 1, a sender on leaf 0. Edge
    // routers never connect to each other, and the interior counts the messages out to the
    // receiving edge (its router-wide `deliveriesEgress`; a management reply counts too).
    let egress = || {
        let router = qdmanage(cp, &ns.name, &hub[0].0, &["query", "--type=router"]).expect("qdmanage");
        router[0]["deliveriesEgress"].as_i64().expect("deliveriesEgress")
    };
    let before = egress();
    let receiver = Receiver::attach(&url(&leaves[1].1, 5672), "closest/between-edges", 5, &[]);
    send(&url(&leaves[0].1, 5672), "closest/between-edges", 0..5, "hop-", Duration::from_secs(60), &[]);
    assert_eq!(receiver.bodies(), (0..5).map(|i| format!("hop-{i}")).collect::<Vec<_>>());
    let forwarded = egress() - before;
    assert!(forwarded >= 5, "the interior sent out {forwarded} deliveries for 5 messages");
    say!("edge → interior → edge: 5 messages");
}
