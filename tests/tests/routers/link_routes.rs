//! Link routes: a broker attached through a route-container connector carries messages both
//! ways.

use std::time::{Duration, Instant};

use qdr_tests::ControlPlane;
use qdr_tests::routers::{self, Receiver, apply, json_lines, kubectl, qdmanage, router_pods, send, url};
use serde_json::{Value, json};

use crate::{cluster, controllers, open_connections};

/// The JSON lines `tests/amqp/peer.py` printed so far in pod `pod`.
pub(crate) fn peer_events(cp: &ControlPlane, ns: &str, pod: &str) -> Vec<Value> {
    json_lines(&kubectl(cp, &["logs", "-n", ns, pod]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_route_to_a_broker_carries_messages_both_ways() {
    let cp = cluster().await;
    let ns = cp.namespace("linkroute").await;
    crate::start_broker(cp, &ns.name);
    // The router reaches it by the Service name with a route-container connector; prefix
    // `queue` (the router's pattern `queue.#`: `queue.orders` matches) is link-routed to it in
    // both directions.
    apply(
        cp,
        &ns.name,
        &routers::interconnect(
            "routed",
            json!({
                "deploymentPlan": {"size": 1},
                "connectors": [{"name": "broker", "host": "broker", "port": 5672, "routeContainer": true}],
                "linkRoutes": [
                    {"prefix": "queue", "direction": "in", "connection": "broker"},
                    {"prefix": "queue", "direction": "out", "connection": "broker"},
                ],
            }),
        ),
    );
    routers::wait_ready(cp, &ns.name, "routed", &controllers());
    let (pod, ip) = router_pods(&ns, "routed").await.remove(0);
    let t = Instant::now();
    let up =
        qdr_tests::eventually("the connector to the broker to open", Duration::from_secs(90), || async {
            let up = open_connections(cp, &ns.name, &pod, "route-container");
            (!up.is_empty()).then_some(up)
        })
        .await;
    assert_eq!(up[0]["host"], "broker:5672", "{up:?}");
    say!("route-container connection to broker:5672 open ({:.1?})", t.elapsed());
    let routes = qdmanage(cp, &ns.name, &pod, &["query", "--type=linkRoute"]).expect("qdmanage");
    let mut active: Vec<(String, String)> = routes
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["operStatus"] == "active")
        .map(|r| (r["prefix"].as_str().unwrap_or("").into(), r["direction"].as_str().unwrap_or("").into()))
        .collect();
    active.sort();
    assert_eq!(active, [("queue".into(), "in".into()), ("queue".into(), "out".into())], "{routes}");

    // In: each message is accepted by the broker itself (link routing passes the outcome
    // through), which stored it from a link the router attached.
    send(&url(&ip, 5672), "queue.orders", 0..3, "order-", Duration::from_secs(60), &[]);
    let events = peer_events(cp, &ns.name, "broker");
    let stored: Vec<&str> =
        events.iter().filter(|e| e["stored"] == "queue.orders").filter_map(|e| e["body"].as_str()).collect();
    assert_eq!(stored, ["order-0", "order-1", "order-2"], "{events:?}");
    assert!(
        events.iter().any(|e| e["attach"] == "receiver"
            && e["address"] == "queue.orders"
            && e["container"] == pod.as_str()),
        "the broker's link for queue.orders did not come from router {pod}: {events:?}"
    );
    // Out: a receiver at the router drains the broker's queue, in order.
    let receiver = Receiver::attach(&url(&ip, 5672), "queue.orders", 3, &[]);
    assert_eq!(receiver.bodies(), ["order-0", "order-1", "order-2"]);
    let events = peer_events(cp, &ns.name, "broker");
    let delivered = events.iter().filter(|e| e["delivered"] == "queue.orders").count();
    assert_eq!(delivered, 3, "{events:?}");
    say!("link route: 3 messages into the broker and 3 out, through router {pod}");
}
