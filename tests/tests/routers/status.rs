//! The status the routers' own view gives: `MeshConnected`, the topology and the counts, and
//! a link blocked between two routers named until it is back.

use std::time::{Duration, Instant};

use qdr_controller::mesh;
use qdr_tests::routers::{self, apply, router_pods};
use serde_json::{Value, json};

use crate::{cluster, condition_of, controllers, get_ic, mesh_settled, shown};

/// Every version of Interconnect `name` from now on, as JSON, in the order the API server
/// stored them (a watch, listed first: it returns once the current version is in).
async fn watch_statuses(
    ns: &qdr_tests::TestNamespace,
    name: &str,
) -> std::sync::Arc<std::sync::Mutex<Vec<Value>>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api: kube::Api<qdr_api::Interconnect> = kube::Api::namespaced(ns.client.clone(), &ns.name);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api, config).applied_objects().boxed();
    let first = stream.next().await.expect("a watch").expect("the Interconnect listed");
    seen.lock().unwrap().push(serde_json::to_value(first).unwrap());
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Some(Ok(ic)) = stream.next().await {
            kept.lock().unwrap().push(serde_json::to_value(ic).unwrap());
        }
    });
    seen
}

/// The controller reads every router over its own management listener (mutual TLS) and
/// reports the mesh they see: connected with every link listed; a router deleted is named
/// until its replacement joins; a configuration change is `ConfigApplied=False` until every
/// router runs it; an edge whose uplink is refused keeps the Interconnect from `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_reports_the_mesh_the_routers_see() {
    let cp = cluster().await;
    let ns = cp.namespace("seen").await;
    let spec = |prefix: &str| {
        json!({"deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"},
               "addresses": [{"prefix": prefix, "distribution": "closest"}]})
    };
    apply(cp, &ns.name, &routers::interconnect("seen", spec("closest")));
    let ready = routers::wait_ready(cp, &ns.name, "seen", &controllers());
    say!("3 interior routers Ready, mesh connected, {ready:.1?} after apply");
    // Reads run beside the passes: at Ready the routers may still be joining (pending,
    // `Unknown`), never split (`False` would keep Ready false); then they are read linked.
    let ic = get_ic(cp, &ns.name, "seen");
    let (status, reason, message) = condition_of(&ic, "MeshConnected");
    say!("at Ready: MeshConnected {status} {reason}: {message}");
    assert_ne!(status, "False", "{reason}: {message}");
    let t = Instant::now();
    // Every router linked (none still joining: `3/3`, not `1/3 …; 2 starting`).
    let ic = qdr_tests::eventually("MeshConnected Connected, 3/3", Duration::from_secs(90), || async {
        let ic = get_ic(cp, &ns.name, "seen");
        let all = ic["status"]["mesh"]["summary"] == "3/3 connected";
        (condition_of(&ic, "MeshConnected").1 == "Connected" && all).then_some(ic)
    })
    .await;
    say!("Connected {:.1?} after Ready", t.elapsed());
    assert_eq!(ic["status"]["mesh"]["summary"], "3/3 connected", "{}", ic["status"]);
    // Each router is read on its own, a moment apart: a pair's link can be counted by one
    // side's read and not yet by the other's (the pair is linked either way), and a routing
    // table (`reached`) fills a moment after the links open. Each router counts both of its
    // own links and both other routers by the next read (due MESH_RESYNC after the last).
    let next_read = 2 * qdr_controller::reconcile::MESH_RESYNC;
    let ic = qdr_tests::eventually("every router to count its two links", next_read, || async {
        let ic = get_ic(cp, &ns.name, "seen");
        let full = ic["status"]["routers"].as_array().is_some_and(|rs| {
            rs.len() == 3 && rs.iter().all(|r| r["interRouterLinks"] == 2 && r["reached"] == 2)
        });
        full.then_some(ic)
    })
    .await;
    let pods = router_pods(&ns, "seen").await;
    let routers = ic["status"]["routers"].as_array().expect("status.routers").clone();
    assert_eq!(routers.len(), 3, "{routers:?}");
    for (r, (pod, _)) in routers.iter().zip(&pods) {
        assert_eq!(
            (r["pod"].as_str(), r["id"].as_str(), r["mode"].as_str()),
            (Some(pod.as_str()), Some(pod.as_str()), Some("interior"))
        );
        assert_eq!(r["node"], qdr_tests::real_node::NODE, "{r}");
        // Counts only: the status does not grow with the pairs of routers.
        assert_eq!(
            (&r["interRouterLinks"], &r["edgeLinks"], &r["reached"]),
            (&json!(2), &json!(0), &json!(2)),
            "{r}"
        );
        assert!(r.get("links").is_none() && r.get("clientConnections").is_none(), "{r}");
        assert_eq!(r["configHash"], ic["status"]["configHash"], "{r}");
    }
    assert_eq!(condition_of(&ic, "ConfigApplied").0, "True");
    let wide = shown(cp, &["get", "interconnect", "seen", "-n", &ns.name, "-o", "wide"]);
    assert!(wide.contains("3/3 connected") && wide.contains("True"), "{wide}");

    // The management listener takes only a certificate of the Interconnect's management
    // CA: a plain connection, and TLS without a client certificate, are refused.
    let ip = pods[0].1.clone();
    let plain = tokio::net::TcpStream::connect((ip.as_str(), 55670)).await.unwrap();
    let refused = mesh::reader::read_router(plain, "test", Duration::from_secs(10), None, None).await;
    assert!(refused.is_err(), "a plain connection read the router: {refused:?}");
    say!("management listener, plain: refused ({:.100})", format!("{refused:?}"));

    // The controller reads a linked mesh through one connection. Asked as it asks them, with
    // a client certificate of the management CA: the first router on a connection of its
    // own, the other two through it over the mesh (`_topo/0/<id>/$management`), each
    // answering for itself what a connection of its own gets.
    let tls = management_tls(cp, &ns.name, "seen");
    let pool = mesh::pool::Pool::new(4, 4);
    let plan = |namespace| mesh::reader::Plan {
        port: 55670,
        namespace,
        pool: &pool,
        timeout: Duration::from_secs(10),
        deadline: tokio::time::Instant::now() + Duration::from_secs(30),
        tls: Some(&tls),
        fence: None,
        recheck: mesh::live::RECHECK,
    };
    let target = |(pod, ip): &(String, String)| mesh::reader::Target {
        pod: pod.clone(),
        ip: Some(ip.clone()),
        ready: true,
        linking: None,
        live: None,
        checked: None,
    };
    let answered = |seen: std::collections::BTreeMap<String, mesh::Observation>| {
        (seen.into_values())
            .map(|o| match o {
                mesh::Observation::Answered(v) => v,
                other => panic!("not answered: {other:?}"),
            })
            .collect::<Vec<_>>()
    };
    let all: Vec<_> = pods.iter().map(target).collect();
    let through = answered(mesh::reader::observe(&all, &plan(&ns.name)).await);
    assert_eq!(through.iter().map(|v| v.routed).collect::<Vec<_>>(), [false, true, true]);
    for (v, p) in through.iter().zip(&pods) {
        let own = answered(mesh::reader::observe(&[target(p)], &plan(&ns.name)).await).remove(0);
        assert_eq!((&*v.id, own.routed), (p.0.as_str(), false), "{own:?}");
        assert_eq!(
            (&v.reaches, v.inter_router.len(), v.mode),
            (&own.reaches, own.inter_router.len(), own.mode),
            "{v:?} against {own:?}"
        );
    }
    say!("the mesh read through one connection: {} routers, 2 of them through the first", through.len());

    // A router deleted, as a rollout or a drain does: routine, so nothing is reported
    // split. The old router is shutting down (not read), its replacement pending (no IP,
    // not Ready) and then joining (Ready, no link yet) until it links.
    let events = |reason: &str| {
        let out = routers::kubectl(cp, &["get", "events", "-n", &ns.name, "-o", "json"]);
        let all: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let list = all["items"].as_array().cloned().unwrap_or_default();
        list.into_iter()
            .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == "seen")
            .collect::<Vec<_>>()
    };
    // Warnings sent while the mesh first formed are not this step's.
    let warned_before = events("Partitioned").len();
    let victim = pods[1].0.clone();
    let deleted = Instant::now();
    let out = routers::kubectl(cp, &["delete", "pod", &victim, "-n", &ns.name, "--wait=false"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: std::cell::RefCell<Vec<(String, String)>> = std::cell::RefCell::default();
    let ic = qdr_tests::eventually("the replacement linked", Duration::from_secs(120), || async {
        let ic = get_ic(cp, &ns.name, "seen");
        let (status, reason, message) = condition_of(&ic, "MeshConnected");
        let mut seen = seen.borrow_mut();
        if seen.last().is_none_or(|(r, m)| *r != reason || *m != message) {
            say!("{:.1?} after the deletion: MeshConnected {status} {reason}: {message}", deleted.elapsed());
            seen.push((reason.clone(), message.clone()));
        }
        let listed: Vec<&str> = ic["status"]["routers"]
            .as_array()
            .map(|rs| rs.iter().filter_map(|r| r["pod"].as_str()).collect())
            .unwrap_or_default();
        let replaced = listed.len() == 3 && !listed.contains(&victim.as_str());
        (replaced && reason == "Connected" && message == "3/3 interior routers linked to each other")
            .then_some(ic)
    })
    .await;
    let seen = seen.into_inner();
    assert!(
        seen.iter().all(|(reason, _)| reason != "Partitioned" && reason != "EdgeNotUplinked"),
        "a routine deletion was reported as a split: {seen:?}"
    );
    // Nothing of the deletion is left in the status (a merge patch keeps what it does not
    // name), and no Warning was sent.
    let mesh = &ic["status"]["mesh"];
    assert!(mesh.get("missingLinks").is_none() && mesh.get("unreachable").is_none(), "{mesh}");
    assert_eq!(mesh["summary"], "3/3 connected", "{mesh}");
    let after = events("Partitioned");
    assert_eq!(after.len(), warned_before, "a Warning for a routine deletion: {after:?}");
    let ready = routers::wait_ready(cp, &ns.name, "seen", &controllers());
    say!("connected again, {:.1?} after the deletion ({ready:.1?} in the last wait)", deleted.elapsed());

    // A configuration change: not applied until every router runs it. An address is written
    // into the running routers in about 0.1 s, so the status that shows the new hash first
    // may be replaced before a poll sees it: every status written is watched instead.
    let before = ic["status"]["configHash"].as_str().unwrap().to_string();
    let statuses = watch_statuses(&ns, "seen").await;
    apply(cp, &ns.name, &routers::interconnect("seen", spec("nearest")));
    let rolling =
        qdr_tests::eventually("the new configuration's first status", Duration::from_secs(60), || async {
            let seen = statuses.lock().unwrap();
            seen.iter()
                .find(|ic| {
                    let hash = ic["status"]["configHash"].as_str().unwrap_or_default();
                    hash != before && !hash.is_empty()
                })
                .map(|ic| condition_of(ic, "ConfigApplied"))
        })
        .await;
    assert_eq!(rolling.0, "False", "{rolling:?}");
    say!("configuration changed: ConfigApplied {} {}: {}", rolling.0, rolling.1, rolling.2);
    let applied = qdr_tests::eventually(
        "every router to run the new configuration",
        Duration::from_secs(180),
        || async {
            let ic = get_ic(cp, &ns.name, "seen");
            (condition_of(&ic, "ConfigApplied").0 == "True").then_some(ic)
        },
    )
    .await;
    let hash = applied["status"]["configHash"].clone();
    assert!(
        applied["status"]["routers"].as_array().unwrap().iter().all(|r| r["configHash"] == hash),
        "{}",
        applied["status"]
    );
    shown(cp, &["describe", "interconnect", "seen", "-n", &ns.name]);
    // The rolled routers are read once they have joined (a read before says "N starting").
    qdr_tests::eventually("the rolled mesh settled", Duration::from_secs(90), || async {
        mesh_settled(&get_ic(cp, &ns.name, "seen")).then_some(())
    })
    .await;

    // The topology, through the real kubectl's plugin lookup (`kubectl-qdr` on the PATH).
    let bin_dir = qdr_tests::components::binary("kubectl-qdr").parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let topology = |format: &str| {
        // A plugin takes no flag before its name, so the kubeconfig goes in the environment.
        let kubectl = cp.kubectl().get_program().to_owned();
        let out = std::process::Command::new(kubectl)
            .env("PATH", &path)
            .env("KUBECONFIG", cp.kubeconfig())
            .args(["qdr", "topology", "seen", "-n", &ns.name, "-o", format])
            .output()
            .expect("kubectl qdr runs");
        assert!(out.status.success(), "kubectl qdr topology: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        say!("kubectl qdr topology seen -o {format}\n{text}");
        text
    };
    let text = topology("text");
    assert!(text.starts_with("Interconnect seen: 3/3 connected (MeshConnected True Connected"), "{text}");
    let pods: Vec<String> = router_pods(&ns, "seen").await.into_iter().map(|(p, _)| p).collect();
    for p in &pods {
        assert!(
            text.contains(&format!("  {p}  interior  node {}", qdr_tests::real_node::NODE)),
            "{p}: {text}"
        );
    }
    assert_eq!(text.matches("─── ").count(), 6, "three links, each listed under both its ends: {text}");
    let mermaid = topology("mermaid");
    assert_eq!(mermaid.matches("---|inter-router|").count(), 3, "{mermaid}");
    let dot = topology("dot");
    assert!(dot.starts_with("digraph \"seen\" {") && dot.matches(" -> ").count() == 3, "{dot}");

    // An edge whose uplink is refused (nothing serves that name) is not Ready, and says why.
    apply(
        cp,
        &ns.name,
        &routers::interconnect(
            "stray",
            json!({"deploymentPlan": {"role": "edge", "size": 1},
                   "edgeConnectors": [{"name": "uplink", "host": "no-such-hub", "port": 45672}]}),
        ),
    );
    let stuck = qdr_tests::eventually(
        "the stray edge to be reported not uplinked",
        Duration::from_secs(120),
        || async {
            let ic = get_ic(cp, &ns.name, "stray");
            let (mesh, ready) = (condition_of(&ic, "MeshConnected"), condition_of(&ic, "Ready"));
            // The router answers before its readiness probe passes: wait for both.
            (mesh.1 == "EdgeNotUplinked" && ready.1 != "RoutersNotReady").then_some((mesh, ready))
        },
    )
    .await;
    assert_eq!(stuck.0.0, "False", "{stuck:?}");
    assert!(stuck.0.2.contains("stray-"), "the message names the edge router: {stuck:?}");
    assert_eq!((stuck.1.0.as_str(), stuck.1.1.as_str()), ("False", "EdgeNotUplinked"), "{stuck:?}");
    shown(cp, &["get", "interconnect", "-n", &ns.name, "-o", "wide"]);
}

/// Traffic between two routers of a mesh of 3 blocked in one router's network namespace
/// (every TCP segment to or from the other refused with a reset): the link between them is
/// named as missing while they still reach each other through the third, and the mesh is
/// `Connected` again once the block is lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_blocked_between_two_routers_is_named_until_it_is_back() {
    let cp = cluster().await;
    let ns = cp.namespace("blocked").await;
    apply(
        cp,
        &ns.name,
        &routers::interconnect(
            "blocked",
            json!({"deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"}}),
        ),
    );
    routers::wait_ready(cp, &ns.name, "blocked", &controllers());
    qdr_tests::eventually("MeshConnected Connected", Duration::from_secs(90), || async {
        mesh_settled(&get_ic(cp, &ns.name, "blocked")).then_some(())
    })
    .await;
    let pods = router_pods(&ns, "blocked").await;
    let ((a, _), (b, b_ip)) = (&pods[0], &pods[1]);
    let pid = routers::router_pid(a).unwrap_or_else(|| panic!("no qdrouterd process of {a}"));
    let rules: [[&str; 10]; 2] = [
        ["-s", b_ip, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset", "-m", "comment"],
        ["-d", b_ip, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset", "-m", "comment"],
    ];
    let blocked = Instant::now();
    for (chain, rule) in ["INPUT", "OUTPUT"].iter().zip(&rules) {
        let mut args = vec!["-I", chain];
        args.extend(rule.iter().copied());
        args.extend(["--comment", "qdr-operator test"]);
        routers::iptables_in(pid, &args);
    }
    let (x, y) = if a < b { (a, b) } else { (b, a) };
    let named = qdr_tests::eventually("the blocked link to be named", Duration::from_secs(90), || async {
        let ic = get_ic(cp, &ns.name, "blocked");
        let (status, reason, message) = condition_of(&ic, "MeshConnected");
        // The blocked pair: a read while a router was still joining may name another one.
        (reason == "LinksMissing" && message.contains(&format!("{x} – {y}"))).then_some((
            status,
            message,
            ic["status"]["mesh"]["missingLinks"].clone(),
        ))
    })
    .await;
    say!(
        "traffic {a} ⇄ {b} refused: MeshConnected {} LinksMissing after {:.1?}: {}",
        named.0,
        blocked.elapsed(),
        named.1
    );
    assert_eq!(named.0, "True", "the third router still links them: {named:?}");
    assert!(named.1.contains(&format!("{x} – {y}")), "{named:?}");
    assert_eq!(named.2, json!([{"from": x, "to": y}]), "{named:?}");
    let wide = shown(cp, &["get", "interconnect", "blocked", "-n", &ns.name, "-o", "wide"]);
    assert!(wide.contains("3/3 connected"), "{wide}");
    // Lifted: the routers link again.
    for (chain, rule) in ["INPUT", "OUTPUT"].iter().zip(&rules) {
        let mut args = vec!["-D", chain];
        args.extend(rule.iter().copied());
        args.extend(["--comment", "qdr-operator test"]);
        routers::iptables_in(pid, &args);
    }
    let lifted = Instant::now();
    qdr_tests::eventually("the link to come back", Duration::from_secs(120), || async {
        mesh_settled(&get_ic(cp, &ns.name, "blocked")).then_some(())
    })
    .await;
    say!("block lifted: Connected again after {:.1?}", lifted.elapsed());

    // The management port refused on every router (as a tenant's default-deny
    // NetworkPolicy would): nothing is known of the mesh, which says so, and Ready is left
    // to the pods, whose routers still carry messages.
    let management = ["-p", "tcp", "--dport", "55670", "-j", "REJECT", "--reject-with", "tcp-reset"];
    let pids: Vec<u32> = pods
        .iter()
        .map(|(p, _)| routers::router_pid(p).unwrap_or_else(|| panic!("no qdrouterd process of {p}")))
        .collect();
    for pid in &pids {
        let mut args = vec!["-I", "INPUT"];
        args.extend(management);
        routers::iptables_in(*pid, &args);
    }
    let refused = Instant::now();
    let (unknown, ready) =
        qdr_tests::eventually("the routers reported unreachable", Duration::from_secs(120), || async {
            let ic = get_ic(cp, &ns.name, "blocked");
            let (mesh, ready) = (condition_of(&ic, "MeshConnected"), condition_of(&ic, "Ready"));
            (mesh.1 == "RouterUnreachable").then_some((mesh, ready))
        })
        .await;
    say!(
        "management port refused on every router: MeshConnected {} {} after {:.1?}: {}; Ready {} {}",
        unknown.0,
        unknown.1,
        refused.elapsed(),
        unknown.2,
        ready.0,
        ready.1
    );
    assert_eq!(unknown.0, "Unknown", "{unknown:?}");
    assert_eq!((ready.0.as_str(), ready.1.as_str()), ("True", "RoutersReady"), "{ready:?}");
    for pid in &pids {
        let mut args = vec!["-D", "INPUT"];
        args.extend(management);
        routers::iptables_in(*pid, &args);
    }
    qdr_tests::eventually("the routers read again", Duration::from_secs(120), || async {
        mesh_settled(&get_ic(cp, &ns.name, "blocked")).then_some(())
    })
    .await;
}

/// The TLS client the controller reads Interconnect `name`'s routers with, from its
/// management CA Secret (a client certificate of that CA, the routers verified for
/// `<name>.<namespace>.svc`).
fn management_tls(cp: &qdr_tests::ControlPlane, ns: &str, name: &str) -> mesh::management::Tls {
    use base64::Engine;
    let secret = mesh::management::ca_secret(name);
    let out = routers::kubectl(cp, &["get", "secret", &secret, "-n", ns, "-o", "json"]);
    let secret: Value = serde_json::from_slice(&out.stdout).expect("the management CA Secret");
    let data = (secret["data"].as_object().expect("its data").iter())
        .map(|(k, v)| {
            let bytes =
                base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or_default()).unwrap();
            (k.clone(), k8s_openapi::ByteString(bytes))
        })
        .collect();
    mesh::management::tls(&format!("{name}.{ns}.svc"), &data, std::time::SystemTime::now())
        .expect("the TLS client")
}
