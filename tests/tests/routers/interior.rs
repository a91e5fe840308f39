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
        assert_eq!((&*view.id, view.mode), (pod.as_str(), mesh::Mode::Interior));
        assert_eq!(view.inter_router.len(), 2, "{pod}: {view:?}");
        assert!(view.inter_router.iter().all(|l| l.encrypted), "{pod}: {view:?}");
        assert_eq!(view.reaches.len(), 2, "{pod}: {view:?}");
    }
    let report = mesh::assess(mesh::Mode::Interior, &observations);
    assert_eq!((report.condition.status, report.condition.reason), ("True", "Connected"), "{report:?}");
    assert_eq!(report.groups.len(), 1);
    // A listener that authenticates its peers refuses the reader (no SASL): reported, not hung.
    let stream = tokio::net::TcpStream::connect((pods[0].1.as_str(), 5673)).await.unwrap();
    match mesh::reader::read_router(stream, "test", Duration::from_secs(10), None, None).await {
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

/// The operator's inter-router connectors of `pod`'s router (`qdr-operator-mesh-<peer>`):
/// (name, host), by name.
fn operator_connectors(cp: &qdr_tests::ControlPlane, ns: &str, pod: &str) -> Vec<(String, String)> {
    let all = qdmanage(cp, ns, pod, &["query", "--type=connector"]).unwrap_or(Value::Null);
    let mut out: Vec<(String, String)> = (all.as_array().into_iter().flatten())
        .filter(|c| c["role"] == "inter-router")
        .filter_map(|c| Some((c["name"].as_str()?.to_string(), c["host"].as_str()?.to_string())))
        .filter(|(n, _)| n.starts_with(mesh::links::PREFIX))
        .collect();
    out.sort();
    out
}

/// (name, uid, restart count) of each router pod of `name` that runs (has an IP) and is
/// not terminating, by name.
async fn incarnations(ns: &qdr_tests::TestNamespace, name: &str) -> Vec<(String, String, i32)> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = ns.api();
    let list =
        pods.list(&kube::api::ListParams::default().labels(&format!("application={name}"))).await.unwrap();
    let mut out: Vec<(String, String, i32)> = (list.items.iter())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().is_some_and(|s| s.pod_ip.is_some()))
        .map(|p| {
            let restarts = (p.status.as_ref().and_then(|s| s.container_statuses.as_ref()))
                .map_or(0, |c| c.iter().map(|c| c.restart_count).sum());
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.uid.clone().unwrap_or_default(),
                restarts,
            )
        })
        .collect();
    out.sort();
    out
}

/// Issue 57: a router that cannot be scheduled keeps no other from starting. The image's
/// auto-mesh discovery waited until every pod labelled as a router had an IP; the
/// controller now links the routers that run. On the one real node, an `AntiAffinity` mesh
/// of two has one router Ready and the other named as starting; scaled to one, the mesh is
/// whole without a restart. A mesh of two beside a look-alike Pending pod (the label alone)
/// links at once, each pair by one operator connector, which follows a replaced router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routers_start_and_link_without_their_pending_peers() {
    let cp = cluster().await;
    let ns = cp.namespace("apart").await;
    let spec = |placement: &str, size: i32| json!({"deploymentPlan": {"role": "interior", "size": size, "placement": placement}});
    let t = Instant::now();
    apply(cp, &ns.name, &routers::interconnect("apart", spec("AntiAffinity", 2)));
    // One router fits the node; the other stays Pending. The one that runs starts and
    // is Ready (before, it waited in auto_mesh.py until its liveness probe killed it).
    qdr_tests::eventually("the scheduled router Ready", Duration::from_secs(120), || async {
        (routers::ready_routers(&ns, "apart").await == 1).then_some(())
    })
    .await;
    say!("AntiAffinity(2) on one node: one router Ready {:.1?} after apply", t.elapsed());
    let pods = router_pods(&ns, "apart").await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    let (ic, message) = qdr_tests::eventually(
        "MeshConnected naming the router not running",
        Duration::from_secs(120),
        || async {
            let ic = crate::get_ic(cp, &ns.name, "apart");
            let (_, reason, message) = crate::condition_of(&ic, "MeshConnected");
            (reason == "Connected" && message.contains("1 starting") && message.contains("no pod IP yet"))
                .then_some((ic, message))
        },
    )
    .await;
    say!("MeshConnected: {message}; Ready: {:?}", crate::condition_of(&ic, "Ready"));
    // The pending pod is named: it is the one of the two that has no IP.
    let all = routers::kubectl(cp, &["get", "pods", "-n", &ns.name, "-l", "application=apart", "-o", "name"]);
    let pending: Vec<String> = String::from_utf8_lossy(&all.stdout)
        .lines()
        .map(|l| l.trim_start_matches("pod/").to_string())
        .filter(|p| *p != pods[0].0)
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(message.contains(&pending[0]), "{message}");
    // No API token in a router pod.
    let pod = routers::kubectl(cp, &["get", "pod", &pods[0].0, "-n", &ns.name, "-o", "json"]);
    let pod: Value = serde_json::from_slice(&pod.stdout).unwrap();
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false, "{}", pod["spec"]);
    let mounts = pod["spec"]["containers"][0]["volumeMounts"].to_string();
    assert!(!mounts.contains("serviceaccount"), "{mounts}");
    let before = incarnations(&ns, "apart").await;

    // Scaled to the number of nodes: whole, with the router that ran untouched.
    apply(cp, &ns.name, &routers::interconnect("apart", spec("AntiAffinity", 1)));
    let ic = qdr_tests::eventually("one router, mesh whole", Duration::from_secs(120), || async {
        let ic = crate::get_ic(cp, &ns.name, "apart");
        let (status, reason, message) = crate::condition_of(&ic, "MeshConnected");
        let whole = status == "True" && reason == "Connected" && !message.contains("starting");
        (whole && crate::condition_of(&ic, "Ready").0 == "True").then_some(ic)
    })
    .await;
    say!("scaled to 1: MeshConnected {:?}", crate::condition_of(&ic, "MeshConnected"));
    assert_eq!(incarnations(&ns, "apart").await, before, "the router that ran was restarted or replaced");

    // Two routers beside a Pending look-alike (the label alone): both start and link.
    let look_alike = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "look-alike", "labels": {"application": "twins"}},
        "spec": {"nodeSelector": {"no-such-label": "x"},
                 "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "c", "image": "registry.invalid/none:1",
                                 "securityContext": {"allowPrivilegeEscalation": false,
                                                     "capabilities": {"drop": ["ALL"]}}}]},
    });
    apply(cp, &ns.name, &look_alike);
    apply(cp, &ns.name, &routers::interconnect("twins", spec("Any", 2)));
    let ready = routers::wait_ready(cp, &ns.name, "twins", &controllers());
    let ic = qdr_tests::eventually("twins linked", Duration::from_secs(120), || async {
        let ic = crate::get_ic(cp, &ns.name, "twins");
        (crate::mesh_settled(&ic) && ic["status"]["mesh"]["summary"] == "2/2 connected").then_some(ic)
    })
    .await;
    say!("Any(2) beside a Pending look-alike: Ready in {ready:.1?}, {}", ic["status"]["mesh"]["summary"]);
    let pods = router_pods(&ns, "twins").await;
    let pods: Vec<(String, String)> = pods.into_iter().filter(|(p, _)| p != "look-alike").collect();
    assert_eq!(pods.len(), 2, "{pods:?}");
    // One connector per pair, on the router whose name sorts later, to the other's IP.
    let (first, second) = (&pods[0], &pods[1]);
    assert_eq!(operator_connectors(cp, &ns.name, &first.0), []);
    let want = vec![(format!("{}{}", mesh::links::PREFIX, first.0), first.1.clone())];
    assert_eq!(operator_connectors(cp, &ns.name, &second.0), want);

    // The earlier router replaced: the later one dials the new one, and no longer the old.
    let out = routers::kubectl(cp, &["delete", "pod", &first.0, "-n", &ns.name, "--wait=false"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let replaced = Instant::now();
    // The old router's connector goes once its attempt in flight to the vanished IP ends
    // (mesh::links::busy): at worst Linux's TCP connect timeout (tcp_syn_retries 6: 127 s),
    // then the router's reconnect delay (5 s) and the controller's recheck (2 s); the margin
    // is for a loaded node.
    let bound = Duration::from_secs(127 + 5 + 2) + Duration::from_secs(60);
    let (now, held) = qdr_tests::eventually("the replacement linked", bound, || async {
        let now: Vec<(String, String)> =
            router_pods(&ns, "twins").await.into_iter().filter(|(p, _)| p != "look-alike").collect();
        if now.len() != 2 || now.iter().any(|(p, _)| *p == first.0) {
            return None;
        }
        let ic = crate::get_ic(cp, &ns.name, "twins");
        let linked = crate::mesh_settled(&ic) && ic["status"]["mesh"]["summary"] == "2/2 connected";
        let mut held = Vec::new();
        for (p, _) in &now {
            held.extend(operator_connectors(cp, &ns.name, p));
        }
        (linked && held.len() == 1).then_some((now, held))
    })
    .await;
    say!("replacement linked {:.1?} after the deletion: {held:?}", replaced.elapsed());
    let (earlier, later) = (&now[0], &now[1]);
    assert_eq!(held, [(format!("{}{}", mesh::links::PREFIX, earlier.0), earlier.1.clone())], "{now:?}");
    assert_eq!(operator_connectors(cp, &ns.name, &later.0).len(), 1, "held by the later name");
}
