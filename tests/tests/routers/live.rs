//! Changes written into running routers (docs/live-configuration.md): with a sender and a
//! receiver holding their connections through a mesh of three, an address, a connector with
//! a link route to the test broker, an auto-link and a listener are added and removed again;
//! after each, every router pod is the one it was (same uid, no restart), the change is in
//! effect (the router routes by it); an address deleted by hand is put back; and at the end
//! the clients never reconnected and lost nothing acknowledged. Then a change a running router cannot take still rolls the routers,
//! and the Event says why.

use std::time::{Duration, Instant};

use qdr_tests::TestNamespace;
use qdr_tests::routers::{
    self, Steady, apply, client, config_applied, json_lines, kubectl, pod_identities, qdmanage, router_pods,
    send, service_ip, url,
};
use serde_json::{Value, json};

use crate::link_routes::peer_events;
use crate::{cluster, controllers, get_ic, mesh_settled, start_broker};

const NAME: &str = "changing";

/// The spec with `extra`'s fields set over the base one.
fn spec(extra: Value) -> Value {
    let mut spec = json!({
        "deploymentPlan": {"size": 3, "placement": "Any"},
        "listeners": [{"port": 5672}],
        "addresses": [{"prefix": "closest", "distribution": "closest"}],
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    routers::interconnect(NAME, spec)
}

/// The `name`s of entity `kind` every router of `pods` holds (`qdmanage query`), per router.
fn held(cp: &qdr_tests::ControlPlane, ns: &str, pods: &[(String, String)], kind: &str) -> Vec<Vec<Value>> {
    pods.iter()
        .map(|(pod, _)| match qdmanage(cp, ns, pod, &["query", &format!("--type={kind}")]) {
            Ok(Value::Array(all)) => all,
            other => panic!("qdmanage query {kind} on {pod}: {other:?}"),
        })
        .collect()
}

/// Reasons and messages of the Events on the Interconnect.
fn events(cp: &qdr_tests::ControlPlane, ns: &str) -> Vec<(String, String)> {
    let out = kubectl(cp, &["get", "events", "-n", ns, "-o", "json"]);
    let all: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (all["items"].as_array().into_iter().flatten())
        .filter(|e| e["involvedObject"]["kind"] == "Interconnect")
        .map(|e| (e["reason"].as_str().unwrap_or("").into(), e["message"].as_str().unwrap_or("").into()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_changes_keep_every_router_and_every_client_connection() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("liveconf").await));
    start_broker(cp, &ns.name);
    apply(cp, &ns.name, &spec(json!({})));
    routers::wait_ready(cp, &ns.name, NAME, &controllers());
    qdr_tests::eventually("the mesh of three linked", Duration::from_secs(120), || async {
        mesh_settled(&get_ic(cp, &ns.name, NAME)).then_some(())
    })
    .await;
    config_applied(ns, NAME).await;
    let before = pod_identities(ns, NAME).await;
    assert_eq!(before.len(), 3);
    let pods = router_pods(ns, NAME).await;
    let ip = service_ip(ns, NAME).await;
    let steady = Steady::start(
        &url(&ip, 5672),
        "closest/changing",
        20,
        &cp.dir().join(format!("{}-steady.log", ns.name)),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let same_routers = |step: &str, now: &[(String, String, i32)]| {
        assert_eq!(now, before.as_slice(), "{step}: a router pod was replaced or restarted");
    };
    let mut took = Vec::new();

    // An address: every router routes a mobile address under its prefix by its distribution.
    let t = Instant::now();
    apply(
        cp,
        &ns.name,
        &spec(json!({"addresses": [{"prefix": "closest", "distribution": "closest"},
                                   {"prefix": "fanout", "distribution": "multicast"}]})),
    );
    config_applied(ns, NAME).await;
    took.push(("address", t.elapsed()));
    same_routers("address", &pod_identities(ns, NAME).await);
    for (pod, pod_ip) in &pods {
        let receiver = routers::Receiver::attach(&url(pod_ip, 5672), "fanout/news", 1, &["--timeout", "5"]);
        let out = client("query", &url(pod_ip, 5672), "org.apache.qpid.dispatch.router.address", &[])
            .output()
            .unwrap();
        let results =
            json_lines(&out).first().and_then(|v| v["results"].as_array().cloned()).unwrap_or_default();
        let address =
            results.iter().find(|a| a["name"] == "M0fanout/news" || a["identity"] == "M0fanout/news");
        assert_eq!(
            address.map(|a| a["distribution"].clone()),
            Some(json!("multicast")),
            "{pod} does not route fanout/news by the new address: {results:?}"
        );
        drop(receiver);
    }

    // A connector to the broker and a link route over it: a message to queue.* is accepted
    // by the broker itself.
    let broker =
        json!({"connectors": [{"name": "broker", "host": "broker", "port": 5672, "routeContainer": true}]});
    let routed = |more: Value| {
        let mut s = broker.clone();
        s["linkRoutes"] = json!([{"prefix": "queue", "direction": "in", "connection": "broker"}]);
        for (k, v) in more.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let t = Instant::now();
    apply(cp, &ns.name, &spec(routed(json!({}))));
    config_applied(ns, NAME).await;
    took.push(("connector and link route", t.elapsed()));
    same_routers("connector and link route", &pod_identities(ns, NAME).await);
    send(&url(&pods[0].1, 5672), "queue.orders", 0..2, "order-", Duration::from_secs(60), &[]);
    let stored: Vec<String> = (peer_events(cp, &ns.name, "broker").iter())
        .filter(|e| e["stored"] == "queue.orders")
        .filter_map(|e| e["body"].as_str().map(String::from))
        .collect();
    assert_eq!(stored, ["order-0", "order-1"], "the link route did not reach the broker");

    // An auto-link: messages to `jobs` go to the broker's queue `jobs`.
    let t = Instant::now();
    apply(
        cp,
        &ns.name,
        &spec(routed(
            json!({"autoLinks": [{"address": "jobs", "direction": "out", "connection": "broker"}]}),
        )),
    );
    config_applied(ns, NAME).await;
    took.push(("auto-link", t.elapsed()));
    same_routers("auto-link", &pod_identities(ns, NAME).await);
    send(&url(&pods[1].1, 5672), "jobs", 0..2, "job-", Duration::from_secs(60), &[]);
    qdr_tests::eventually("the broker to store the jobs", Duration::from_secs(30), || async {
        let events = peer_events(cp, &ns.name, "broker");
        (events.iter().filter(|e| e["stored"] == "jobs").count() == 2).then_some(())
    })
    .await;

    // A listener: every router accepts connections on the new port.
    let t = Instant::now();
    apply(cp, &ns.name, &spec(json!({"listeners": [{"port": 5672}, {"name": "extra", "port": 5673}]})));
    config_applied(ns, NAME).await;
    took.push(("listener (and the rest removed)", t.elapsed()));
    same_routers("listener", &pod_identities(ns, NAME).await);
    for (pod, pod_ip) in &pods {
        let out =
            client("query", &url(pod_ip, 5673), "org.apache.qpid.dispatch.router", &[]).output().unwrap();
        assert!(out.status.success(), "{pod} does not listen on 5673: {:?}", json_lines(&out));
    }
    // The broker's connector, link route and auto-link went with that change.
    for kind in ["connector", "linkRoute", "autoLink"] {
        for (i, entities) in held(cp, &ns.name, &pods, kind).iter().enumerate() {
            let left: Vec<&Value> = entities
                .iter()
                .filter(|e| !e["name"].as_str().unwrap_or("").starts_with("qdr-operator-mesh-"))
                .collect();
            assert!(left.is_empty(), "{} still holds {kind}: {left:?}", pods[i].0);
        }
    }

    // Back to the start: the listener and the address go; a connection is refused on 5673.
    let t = Instant::now();
    apply(cp, &ns.name, &spec(json!({})));
    config_applied(ns, NAME).await;
    took.push(("listener and address removed", t.elapsed()));
    same_routers("removals", &pod_identities(ns, NAME).await);
    for (pod, pod_ip) in &pods {
        let out = client("query", &url(pod_ip, 5673), "org.apache.qpid.dispatch.router", &["--timeout", "3"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{pod} still listens on 5673");
    }
    let prefixes: Vec<Vec<String>> = held(cp, &ns.name, &pods, "address")
        .iter()
        .map(|all| all.iter().filter_map(|a| a["prefix"].as_str().map(String::from)).collect())
        .collect();
    assert!(prefixes.iter().all(|p| p == &["closest".to_string()]), "addresses left: {prefixes:?}");

    // By hand: an address deleted with qdmanage is put back at the first visit that reads
    // the router's entities whole (at the latest a resync after the controller's
    // `--live-recheck`).
    let closest = |pod: &str| {
        let all = qdmanage(cp, &ns.name, pod, &["query", "--type=address"]).unwrap_or_default();
        all.as_array()
            .into_iter()
            .flatten()
            .find(|a| a["prefix"] == "closest")
            .and_then(|a| a["name"].as_str().map(String::from))
    };
    let name = closest(&pods[0].0).expect("the address closest");
    // qdmanage answers a DELETE with nothing on its output: not JSON.
    let out = kubectl(
        cp,
        &[
            "exec",
            "-n",
            &ns.name,
            &pods[0].0,
            "--",
            "qdmanage",
            "delete",
            "--type=address",
            &format!("--name={name}"),
        ],
    );
    assert!(out.status.success(), "qdmanage delete: {}", String::from_utf8_lossy(&out.stderr));
    // A visit may come between the delete and this query (the mesh is read again 2 s after a
    // change while it settles) and have put it back already: the Event below says it did.
    let gone = closest(&pods[0].0).is_none();
    let t = Instant::now();
    // The controller's resync of a connected mesh (`MESH_RESYNC`, controller/src/reconcile/read.rs):
    // the first read at least LIVE_RECHECK after the last whole read of the router's
    // entities reads them again, which comes at most a resync after the recheck is over.
    let resync = Duration::from_secs(60);
    qdr_tests::eventually(
        "the address deleted by hand put back",
        qdr_tests::routers::LIVE_RECHECK + resync + Duration::from_secs(30),
        || async { (closest(&pods[0].0).as_deref() == Some(name.as_str())).then_some(()) },
    )
    .await;
    say!(
        "an address deleted by hand with qdmanage put back {:.1?} later (resync {resync:?}; seen missing: {gone})",
        t.elapsed()
    );
    // Published by the pass after that visit, or by the recorder's retries of a create the
    // API server did not answer (`recorder::RETRY_DELAYS`, about half a minute) on a loaded
    // machine.
    let retries = qdr_controller::recorder::RETRY_SPAN;
    qdr_tests::eventually("a ConfigRestored Event", retries + Duration::from_secs(30), || async {
        let all = events(cp, &ns.name);
        all.into_iter().find(|(reason, m)| {
            reason == "ConfigRestored" && m.contains(&format!("{}: 1 created", pods[0].0))
        })
    })
    .await;
    same_routers("by hand", &pod_identities(ns, NAME).await);

    tokio::time::sleep(Duration::from_secs(2)).await;
    let traffic = steady.finish();
    for (what, t) in &took {
        say!("live change, {what}: applied on every router {t:.1?} after apply");
    }
    say!("clients through 5 live changes: {traffic}");
    assert_eq!(traffic.lost, 0, "acknowledged messages lost: {traffic}");
    assert_eq!(
        (traffic.sender_reconnects, traffic.receiver_reconnects),
        (0, 0),
        "a client connection was closed by a live change: {traffic}"
    );
    assert!(traffic.acknowledged >= 20, "too little went through: {traffic}");
    assert!(
        events(cp, &ns.name).iter().any(|(reason, _)| reason == "ConfigApplied"),
        "no ConfigApplied Event: {:?}",
        events(cp, &ns.name)
    );

    // A change of what a router reads only at start (its edge listener) rolls the routers,
    // and the Event says so.
    apply(cp, &ns.name, &spec(json!({"edgeListeners": [{"port": 45699}]})));
    qdr_tests::eventually("the routers rolled", routers::READY_WAIT, || async {
        let now = pod_identities(ns, NAME).await;
        (now.len() == 3 && now.iter().all(|p| !before.iter().any(|b| b.1 == p.1))).then_some(())
    })
    .await;
    config_applied(ns, NAME).await;
    let rolled = events(cp, &ns.name);
    assert!(
        rolled.iter().any(|(reason, message)| reason == "ConfigChanged"
            && message.contains("cannot take (spec.edgeListeners)")),
        "no ConfigChanged Event naming why the routers rolled: {rolled:?}"
    );
}
