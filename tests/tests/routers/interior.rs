//! An interior mesh of three: anycast and multicast across routers, SASL authentication,
//! the mesh as the operator reads it, and address prefixes with every character the image's
//! scripts could mangle kept as written.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use qdr_controller::mesh;
use qdr_tests::routers::{self, Receiver, apply, client, json_lines, qdmanage, router_pods, send, url};
use serde_json::{Value, json};

use crate::{cluster, controllers, observe};

/// What a router knows of `address` (the `router.address` entity with key `key`, such as
/// `M0multicast/x` for a mobile address in phase 0): its `remoteCount`, the receivers on
/// other routers.
fn remote_count(ip: &str, key: &str) -> i64 {
    let out =
        client("query", &url(ip, 5672), "org.apache.qpid.dispatch.router.address", &[]).output().unwrap();
    json_lines(&out)
        .first()
        .and_then(|v| v["results"].as_array().cloned())
        .into_iter()
        .flatten()
        .find(|a| a["name"] == key || a["identity"] == key)
        .and_then(|a| a["remoteCount"].as_i64())
        .unwrap_or(0)
}

/// Address prefixes with every character the image's scripts could mangle: `$` (the
/// image's `expandvars.py`), spaces, quotes, `#` (a comment to the config reader), braces
/// (inline configuration to `configure.sh`) and non-ASCII.
const ODD_PREFIXES: [&str; 4] = ["cost/$HOME/${POD_IP}/$", "a b 'c' \"d\"", "#hash{brace}", "grüße/日本"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interior_mesh_of_three_routes_anycast_and_multicast_authenticates_and_keeps_values() {
    let cp = cluster().await;
    let ns = cp.namespace("mesh").await;
    let secrets: Api<Secret> = ns.api();
    let users = Secret {
        metadata: kube::api::ObjectMeta { name: Some("mesh-people".into()), ..Default::default() },
        string_data: Some([("alice".to_string(), "s3cret-$HOME".to_string())].into()),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &users).await.unwrap();
    let mut addresses = vec![
        json!({"prefix": "closest", "distribution": "closest"}),
        json!({"prefix": "multicast", "distribution": "multicast"}),
    ];
    addresses.extend(ODD_PREFIXES.iter().map(|p| json!({"prefix": p, "distribution": "balanced"})));
    let applied = Instant::now();
    apply(
        cp,
        &ns.name,
        &routers::interconnect(
            "mesh",
            json!({
                "deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"},
                "users": "mesh-people",
                "listeners": [
                    {"port": 5672},
                    {"port": 5673, "authenticatePeer": true, "saslMechanisms": "PLAIN"},
                ],
                "addresses": addresses,
            }),
        ),
    );
    let ready = routers::wait_ready(cp, &ns.name, "mesh", &controllers());
    say!("3 interior routers Ready {ready:.1?} after apply");
    let pods = router_pods(&ns, "mesh").await;
    assert_eq!(pods.len(), 3, "{pods:?}");

    // Each router sees the other two (and itself) as router nodes.
    for (pod, _) in &pods {
        let t = Instant::now();
        // A full mesh: the other two are direct neighbours (no next hop), not reached through
        // a third router as right after start.
        let direct = |n: &Value| n["nextHop"].is_null() || n["nextHop"] == "(self)";
        let nodes = qdr_tests::eventually(
            &format!("{pod} to see 3 routers directly"),
            Duration::from_secs(90),
            || async {
                match qdmanage(cp, &ns.name, pod, &["query", "--type=router.node"]) {
                    Ok(Value::Array(nodes)) if nodes.len() == 3 && nodes.iter().all(direct) => Some(nodes),
                    _ => None,
                }
            },
        )
        .await;
        let ids: Vec<&str> = nodes.iter().filter_map(|n| n["id"].as_str()).collect();
        say!("{pod} sees {ids:?} ({:.1?})", t.elapsed());
    }
    // The mesh runs over the default inter-router listener: TLS with generated credentials.
    let connections = qdmanage(cp, &ns.name, &pods[0].0, &["query", "--type=connection"]).expect("qdmanage");
    let inter: Vec<&Value> =
        connections.as_array().unwrap().iter().filter(|c| c["role"] == "inter-router").collect();
    assert_eq!(inter.len(), 2, "router 0's inter-router connections: {connections}");
    for c in inter {
        assert_eq!(c["isEncrypted"], true, "an inter-router connection without TLS: {c}");
    }
    // The controller's mesh reader (fe2o3-amqp) reads each router once and judges the mesh.
    let observations = observe(&pods).await;
    for (pod, o) in &observations {
        let mesh::Observation::Answered(view) = o else { panic!("reading {pod}: {o:?}") };
        assert_eq!((view.id.as_str(), view.mode), (pod.as_str(), mesh::Mode::Interior));
        assert_eq!(view.inter_router.len(), 2, "{pod}: {view:?}");
        assert!(view.inter_router.iter().all(|l| l.encrypted), "{pod}: {view:?}");
        assert_eq!(view.reaches.len(), 2, "{pod}: {view:?}");
    }
    let report = mesh::assess(mesh::Mode::Interior, &observations);
    assert_eq!((report.condition.status, report.condition.reason), ("True", "Connected"), "{report:?}");
    assert_eq!(report.groups.len(), 1);
    // A listener that authenticates its peers refuses the reader (no SASL): reported, not hung.
    let stream = tokio::net::TcpStream::connect((pods[0].1.as_str(), 5673)).await.unwrap();
    match mesh::reader::read_router(stream, "test", Duration::from_secs(10)).await {
        Err(mesh::reader::ReadError::Amqp(e)) => say!("mesh reader on the PLAIN listener: refused ({e:.80})"),
        other => panic!("the reader got through an authenticating listener: {other:?}"),
    }
    say!("mesh reader: {}", report.condition.message);
    let ip = |i: usize| pods[i].1.as_str();

    // Anycast: a receiver on router 1, a sender on router 0.
    let receiver = Receiver::attach(&url(ip(1), 5672), "closest/orders", 5, &[]);
    send(&url(ip(0), 5672), "closest/orders", 0..5, "order-", Duration::from_secs(60), &[]);
    let first_message = applied.elapsed();
    assert_eq!(receiver.bodies(), (0..5).map(|i| format!("order-{i}")).collect::<Vec<_>>());
    say!("anycast 0 → 1 delivered; apply → first message across the mesh: {first_message:.1?}");

    // Multicast: receivers on routers 1 and 2 each get every message sent to router 0.
    let r1 = Receiver::attach(&url(ip(1), 5672), "multicast/news", 4, &[]);
    let r2 = Receiver::attach(&url(ip(2), 5672), "multicast/news", 4, &[]);
    qdr_tests::eventually("router 0 to know both multicast receivers", Duration::from_secs(60), || async {
        (remote_count(ip(0), "M0multicast/news") == 2).then_some(())
    })
    .await;
    // Every receiver gets every message. Presettled multicast is at most once: a router
    // drops a presettled copy whose path changes under it (a 2-core machine under load can
    // miss a hello and re-route for a moment). So a body missing from a receiver is sent
    // again, up to 5 rounds; the rounds needed are printed. Copies that arrive twice are
    // counted, not failed: qdrouterd 1.19's multicast forwarder excludes only the routers
    // in a message's trace, so in a full mesh each receiving router also forwards a copy
    // to the other (src/router_core/forwarder.c, qdr_forward_multicast_CT).
    let want: std::collections::BTreeSet<String> = (0..4).map(|i| format!("news-{i}")).collect();
    let (mut r1, mut r2) = (r1, r2);
    let mut rounds = 0;
    loop {
        let (got1, got2) = (r1.distinct(), r2.distinct());
        let missing: Vec<usize> = (0..4)
            .filter(|i| {
                let body = format!("news-{i}");
                !got1.contains(&body) || !got2.contains(&body)
            })
            .collect();
        if missing.is_empty() {
            break;
        }
        rounds += 1;
        assert!(rounds <= 5, "multicast: news-{missing:?} not received by both receivers in 5 rounds");
        for i in missing {
            send(
                &url(ip(0), 5672),
                "multicast/news",
                i..i + 1,
                "news-",
                Duration::from_secs(30),
                &["--presettled"],
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && (r1.distinct() != want || r2.distinct() != want) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    say!("multicast 0 → 1, 2: every message to both receivers in {rounds} round(s)");
    for (i, r) in [(1, r1), (2, r2)] {
        let (got, repeats) = r.bodies_and_repeats();
        assert_eq!(
            got.into_iter().collect::<std::collections::BTreeSet<_>>(),
            want,
            "receiver on router {i}"
        );
        if repeats > 0 {
            say!("multicast receiver on router {i}: {repeats} message(s) arrived twice");
        }
    }

    // The users Secret is the SASL database: the right password is accepted over PLAIN, a
    // wrong one and an unknown user refused. The image's create_sasldb.sh puts users in the
    // realm APPLICATION_NAME (the Interconnect's name).
    let login = |user: &str, password: &str| {
        client(
            "query",
            &url(ip(0), 5673),
            "org.apache.qpid.dispatch.router",
            &["--user", user, "--password", password, "--mech", "PLAIN"],
        )
        .output()
        .unwrap()
    };
    let good = login("alice@mesh", "s3cret-$HOME");
    assert!(good.status.success(), "alice with her password: {:?}", json_lines(&good));
    for (user, password) in [("alice@mesh", "s3cret"), ("mallory@mesh", "s3cret-$HOME"), ("alice@mesh", "")] {
        let bad = login(user, password);
        assert!(!bad.status.success(), "{user} with {password:?} was let in");
        let text = json_lines(&bad).first().map(|v| v["error"].to_string()).unwrap_or_default();
        assert!(text.contains("uthentication") || text.contains("SASL"), "{user}: {text}");
    }

    // Every odd prefix arrives as written, on every router, read back through management.
    for (pod, _) in &pods {
        let got =
            qdmanage(cp, &ns.name, pod, &["query", "--type=org.apache.qpid.dispatch.router.config.address"])
                .expect("qdmanage query");
        let prefixes: Vec<&str> =
            got.as_array().unwrap().iter().filter_map(|a| a["prefix"].as_str()).collect();
        for want in ODD_PREFIXES {
            assert!(prefixes.contains(&want), "{pod}: {want:?} not among {prefixes:?}");
        }
    }
}
