//! Routers through rollouts: a single router serving throughout a roll, placement changes
//! under traffic (make before break), a placement change held while a Secret is missing, and
//! an old-revision router restarted mid-rollout keeping its configuration.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use qdr_tests::routers::{
    self, READY_WAIT, Steady, apply, client, json_lines, qdmanage, rolled_out, router_pods, service_ip, url,
    watch_ready,
};
use qdr_tests::{ControlPlane, TestNamespace};
use serde_json::json;

use crate::{cluster, controllers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_anti_affinity_router_serves_throughout_a_roll() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("solo").await));
    // The edge listener's port: a change a running router cannot take (it rolls).
    let spec = |edge_port: u16| {
        routers::interconnect(
            "solo",
            json!({
                "deploymentPlan": {"size": 1, "placement": "AntiAffinity"},
                "listeners": [{"port": 5672}],
                "edgeListeners": [{"port": edge_port}],
                "addresses": [{"prefix": "closest", "distribution": "closest"}],
            }),
        )
    };
    apply(cp, &ns.name, &spec(45680));
    routers::wait_ready(cp, &ns.name, "solo", &controllers());
    let ip = service_ip(ns, "solo").await;
    let steady =
        Steady::start(&url(&ip, 5672), "closest/solo", 20, &cp.dir().join(format!("{}-steady.log", ns.name)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (stop, fewest) = watch_ready(ns, "solo");
    // A start-up configuration change rolls the router.
    apply(cp, &ns.name, &spec(45681));
    rolled_out(cp, ns, "solo", 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let fewest = fewest.await.unwrap();
    let traffic = steady.finish();
    say!("AntiAffinity size 1, config roll through Service solo: {traffic}; fewest Ready routers {fewest}");
    assert!(fewest >= 1, "no router was Ready during the roll");
    assert_eq!(traffic.lost, 0, "acknowledged messages lost: {traffic}");
    assert!(traffic.acknowledged >= 20, "too little went through: {traffic}");
}

/// `Any` → `Every` → `AntiAffinity` → `Any` under steady acknowledged traffic
/// (`qdr_tests::day_two::placements`): at every sample (every 200 ms) at least one router
/// of the Interconnect is Ready, and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_changes_keep_a_router_ready_and_lose_nothing() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("placements").await));
    let steps = qdr_tests::day_two::placements(cp, ns, &controllers(), |step| {
        say!("{step}");
        assert!(step.fewest_ready >= 1, "{}: no router was Ready at some moment: {step}", step.what);
        assert_eq!(step.traffic.lost, 0, "{}: acknowledged messages lost: {}", step.what, step.traffic);
        assert!(step.traffic.acknowledged > 0, "{}: nothing went through: {}", step.what, step.traffic);
    })
    .await;
    assert_eq!(steps.len(), 3);
}

/// The reasons of Interconnect `name`'s conditions.
fn reasons(cp: &ControlPlane, ns: &str, name: &str) -> String {
    let out = routers::kubectl(
        cp,
        &["get", "interconnect", name, "-n", ns, "-o", "jsonpath={.status.conditions[*].reason}"],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_change_while_a_secret_is_missing_keeps_the_running_routers() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("held").await));
    let key = openssl::pkey::PKey::from_ec_key(
        openssl::ec::EcKey::generate(
            &openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let cert = qdr_tests::keys::certificate(&key, None, "held");
    let tls = Secret {
        metadata: kube::api::ObjectMeta { name: Some("held-tls".into()), ..Default::default() },
        string_data: Some(
            [
                ("tls.crt".to_string(), cert),
                ("tls.key".to_string(), String::from_utf8(key.private_key_to_pem_pkcs8().unwrap()).unwrap()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let secrets: Api<Secret> = ns.api();
    secrets.create(&PostParams::default(), &tls).await.unwrap();
    let spec = |placement: &str| {
        routers::interconnect(
            "held",
            json!({
                "deploymentPlan": {"placement": placement, "size": 1},
                "listeners": [{"port": 5672}, {"name": "amqps", "port": 5671, "sslProfile": "user-tls"}],
                "sslProfiles": [{"name": "user-tls", "credentials": "held-tls"}],
            }),
        )
    };
    apply(cp, &ns.name, &spec("Any"));
    routers::wait_ready(cp, &ns.name, "held", &controllers());
    let before = router_pods(ns, "held").await;
    assert_eq!(before.len(), 1);

    // The Secret goes, then the placement changes: the running router stays.
    secrets.delete("held-tls", &Default::default()).await.unwrap();
    apply(cp, &ns.name, &spec("Every"));
    qdr_tests::eventually("MissingSecret reported", Duration::from_secs(60), || async {
        reasons(cp, &ns.name, "held").contains("MissingSecret").then_some(())
    })
    .await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    let daemon_sets: Api<k8s_openapi::api::apps::v1::DaemonSet> = ns.api();
    // Two readiness periods: a pruned Deployment or a new DaemonSet would show by then.
    for _ in 0..20 {
        assert!(deployments.get_opt("held").await.unwrap().is_some(), "the running Deployment was pruned");
        assert!(
            daemon_sets.get_opt("held").await.unwrap().is_none(),
            "a DaemonSet that cannot mount its Secret"
        );
        assert_eq!(router_pods(ns, "held").await, before, "the running router changed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ip = &before[0].1;
    let alive = client("query", &url(ip, 5672), "org.apache.qpid.dispatch.router", &[]).output().unwrap();
    assert!(alive.status.success(), "the held router answers: {:?}", json_lines(&alive));
    assert_eq!(routers::ready_routers(ns, "held").await, 1);

    // The Secret is back: the DaemonSet replaces the Deployment.
    let mut again = tls.clone();
    again.metadata.resource_version = None;
    secrets.create(&PostParams::default(), &again).await.unwrap();
    let deadline = Instant::now() + routers::READY_WAIT;
    loop {
        let gone = deployments.get_opt("held").await.unwrap().is_none();
        let ds = daemon_sets.get_opt("held").await.unwrap();
        let ready = ds.and_then(|d| d.status).map(|s| s.number_ready).unwrap_or(0);
        if gone && ready == 1 {
            break;
        }
        if Instant::now() > deadline {
            let show =
                |args: &[&str]| String::from_utf8_lossy(&routers::kubectl(cp, args).stdout).into_owned();
            panic!(
                "the DaemonSet's router not Ready or the Deployment not gone:\n{}\n{}\n{}",
                show(&["get", "all", "-n", &ns.name, "-o", "wide"]),
                show(&["get", "interconnect", "held", "-n", &ns.name, "-o", "yaml"]),
                controllers().iter().map(|p| p.log_tail(30)).collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_of_the_old_revision_restarted_mid_rollout_keeps_its_configuration() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("revisions").await));
    // Each revision differs in its edge listener's port, which a running router cannot take:
    // each has a configuration (a ConfigMap) of its own, and its address goes with it.
    let spec = |prefix: &str, memory: &str, edge_port: u16| {
        routers::interconnect(
            "rev",
            json!({
                "deploymentPlan": {"size": 1, "placement": "Any",
                                   "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}}},
                "listeners": [{"port": 5672}],
                "edgeListeners": [{"port": edge_port}],
                "addresses": [{"prefix": "closest", "distribution": "closest"}, {"prefix": prefix}],
            }),
        )
    };
    apply(cp, &ns.name, &spec("old-revision", "256Mi", 45680));
    routers::wait_ready(cp, &ns.name, "rev", &controllers());
    let old = router_pods(ns, "rev").await;
    assert_eq!(old.len(), 1);
    let old_pod = old[0].0.clone();

    // A new revision whose router cannot start (4 MiB of memory): the rollout stays half-way,
    // the old router keeps running. (A router that cannot start, rather than one that cannot
    // be scheduled: the unschedulable case is `interior.rs`'s
    // `routers_start_and_link_without_their_pending_peers`.)
    apply(cp, &ns.name, &spec("new-revision", "4Mi", 45681));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    qdr_tests::eventually(
        "a failing router of the new revision with an address",
        Duration::from_secs(90),
        || async {
            let list = pods.list(&kube::api::ListParams::default().labels("application=rev")).await.ok()?;
            list.items
                .iter()
                .filter(|p| p.metadata.name.as_deref() != Some(old_pod.as_str()))
                .any(|p| p.status.as_ref().is_some_and(|s| s.pod_ip.is_some()))
                .then_some(())
        },
    )
    .await;

    // What the old router mounts still holds its own configuration: the controller writes
    // only the current revision's ConfigMap (an in-place update of a shared ConfigMap would
    // reach it within the kubelet's sync period), and live entities only to its routers.
    let mounted = pods.get(&old_pod).await.unwrap().spec.unwrap().volumes.unwrap_or_default();
    let mounted =
        mounted.iter().find(|v| v.name == "router-config").and_then(|v| v.config_map.clone()).unwrap().name;
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = ns.api();
    let cm = config_maps.get(&mounted).await.expect("the old router's ConfigMap is kept");
    let text = cm.data.unwrap_or_default().into_values().collect::<String>();
    assert!(text.contains("old-revision") && !text.contains("new-revision"), "{mounted}: {text}");

    // The old router stops and its container starts again in the same pod.
    let out = routers::kubectl(cp, &["exec", "-n", &ns.name, &old_pod, "--", "kill", "-TERM", "1"]);
    assert!(out.status.success(), "kill: {}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + routers::READY_WAIT;
    loop {
        let status = pods.get(&old_pod).await.unwrap().status.unwrap_or_default();
        let restarted = status.container_statuses.iter().flatten().any(|c| c.restart_count >= 1);
        let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        if restarted && ready {
            break;
        }
        if Instant::now() > deadline {
            let show = |args: &[&str]| {
                let out = routers::kubectl(cp, args);
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
            };
            panic!(
                "the old router did not restart and become Ready:\n{}\n{}\n{}\n{}",
                show(&["describe", "pod", "-n", &ns.name, &old_pod]),
                show(&["logs", "-n", &ns.name, &old_pod, "--previous", "--tail=20"]),
                show(&["get", "cm,pods", "-n", &ns.name, "-o", "wide"]),
                controllers().iter().map(|p| p.log_tail(20)).collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let prefixes =
        qdmanage(cp, &ns.name, &old_pod, &["query", "--type=org.apache.qpid.dispatch.router.config.address"])
            .expect("qdmanage");
    let prefixes: Vec<&str> =
        prefixes.as_array().unwrap().iter().filter_map(|a| a["prefix"].as_str()).collect();
    assert!(
        prefixes.contains(&"old-revision"),
        "the restarted old router lost its configuration: {prefixes:?}"
    );
    assert!(
        !prefixes.contains(&"new-revision"),
        "the restarted old router read the new configuration: {prefixes:?}"
    );

    // A revision that starts: once its rollout is over, only its ConfigMap (and the SASL
    // one) is left; the earlier ones are pruned.
    apply(cp, &ns.name, &spec("third-revision", "256Mi", 45682));
    rolled_out(cp, ns, "rev", 1).await;
    qdr_tests::eventually("the earlier router configurations pruned", Duration::from_secs(60), || async {
        let names: Vec<String> = config_maps
            .list(&kube::api::ListParams::default().labels("interconnect_cr=rev"))
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        (names.len() == 2 && names.iter().any(|n| n == "rev-sasl-config")).then_some(())
    })
    .await;
}

/// The readiness gate `qdr-operator.io/linked` of pod `p`, and whether its `ContainersReady`
/// and `Ready` conditions are `True`: (containers ready, linked reason when `True`, Ready).
fn gate_of(p: &k8s_openapi::api::core::v1::Pod) -> (bool, Option<String>, bool) {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let is_true = |t: &str| conditions.iter().any(|c| c.type_ == t && c.status == "True");
    let linked = (conditions.iter())
        .find(|c| c.type_ == "qdr-operator.io/linked" && c.status == "True")
        .map(|c| c.reason.clone().unwrap_or_default());
    (is_true("ContainersReady"), linked, is_true("Ready"))
}

/// Ready means linked: a router rolled in while the old routers refuse every new
/// inter-router connection (in their network namespaces, both ways: their own link stays up)
/// runs, its containers ready, but is not Ready — the rollout waits, both old routers stay —
/// through the join grace and two rechecks of the controller's reads; once the block is
/// lifted it links, the controller finds it linked (reason `Linked`), it becomes Ready and the
/// rollout goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_router_is_not_ready_until_linked() {
    use k8s_openapi::api::core::v1::Pod;
    use qdr_controller::reconcile::{JOIN_GRACE, MESH_RECHECK};
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("gated").await));
    // The edge listener's port: a change a running router cannot take (it rolls).
    let spec = |edge_port: u16| {
        routers::interconnect(
            "gated",
            json!({"deploymentPlan": {"role": "interior", "size": 2, "placement": "Any"},
                   "edgeListeners": [{"port": edge_port}]}),
        )
    };
    apply(cp, &ns.name, &spec(45690));
    routers::wait_ready(cp, &ns.name, "gated", &controllers());
    let pods: Api<Pod> = ns.api();
    let old: Vec<String> = router_pods(ns, "gated").await.into_iter().map(|(p, _)| p).collect();
    for p in &old {
        let pod = pods.get(p).await.unwrap();
        assert_eq!(gate_of(&pod).1.as_deref(), Some("Linked"), "{p}: a new mesh's router is gated too");
    }
    let block = |op: &str| {
        for p in &old {
            let pid = routers::router_pid(p).unwrap_or_else(|| panic!("no qdrouterd process of {p}"));
            for chain in ["INPUT", "OUTPUT"] {
                routers::iptables_in(
                    pid,
                    &[
                        op,
                        chain,
                        "-p",
                        "tcp",
                        "--dport",
                        "55671",
                        "--syn",
                        "-j",
                        "REJECT",
                        "--reject-with",
                        "tcp-reset",
                    ],
                );
            }
        }
    };
    block("-I");
    apply(cp, &ns.name, &spec(45691));
    let list = ListParams::default().labels("application=gated");
    let new = qdr_tests::eventually("the rolled router running", READY_WAIT, || async {
        let all = pods.list(&list).await.ok()?;
        all.items.into_iter().find(|p| !old.contains(&p.name_any()) && gate_of(p).0).map(|p| p.name_any())
    })
    .await;
    let running = Instant::now();
    let hold = JOIN_GRACE + 2 * MESH_RECHECK;
    while running.elapsed() < hold {
        let p = pods.get(&new).await.unwrap();
        let (containers, linked, ready) = gate_of(&p);
        assert!(containers, "{new}: its containers stopped");
        assert!(linked.is_none() && !ready, "{new} Ready though it cannot link: {:?}", p.status);
        let left = router_pods(ns, "gated").await.into_iter().filter(|(p, _)| old.contains(p)).count();
        assert_eq!(left, 2, "an old router went before the new one was linked");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    say!("a rolled router unable to link: running and not Ready for {hold:?}, both old routers kept");
    block("-D");
    let lifted = Instant::now();
    qdr_tests::eventually("the rolled router linked", READY_WAIT, || async {
        let p = pods.get(&new).await.ok()?;
        let (_, linked, ready) = gate_of(&p);
        (linked.as_deref() == Some("Linked") && ready).then_some(())
    })
    .await;
    say!("block lifted: linked and Ready {:.1?} later", lifted.elapsed());
    rolled_out(cp, ns, "gated", 2).await;
    for (p, _) in router_pods(ns, "gated").await {
        assert!(!old.contains(&p), "{p} not rolled");
        assert_eq!(gate_of(&pods.get(&p).await.unwrap()).1.as_deref(), Some("Linked"), "{p}");
    }
}
