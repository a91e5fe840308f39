//! Links across clusters with a token, on real routers: an AccessGrant in one namespace
//! issues the token, which is copied (as an admin of the other cluster would apply it) into
//! another namespace, where a Link makes that namespace's Interconnect dial the first. Two
//! namespaces of one control plane stand for the two clusters here (the controller that
//! serves both never reads the first namespace's objects for the second: only the copied
//! token crosses); two control planes are `tests/tests/clusters.rs`'s.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use qdr_tests::links::{api, condition, grant_token, link, link_site, listed, portable, settled};
use qdr_tests::routers::{self, Receiver, apply, router_pods, send, url};
use serde_json::json;

use crate::{cluster, controllers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_links_two_networks_that_carry_messages_both_ways() {
    let cp = cluster().await;
    let a = cp.namespace("across-a").await;
    let b = cp.namespace("across-b").await;
    apply(cp, &a.name, &routers::interconnect("hub", json!({"deploymentPlan": {"size": 1}})));
    routers::wait_ready(cp, &a.name, "hub", &controllers());
    // The address the other side dials: the hub's Service by its cluster name, which the
    // routers' certificate names (a NAT address the admin names, as `externalHosts`).
    let host = format!("hub.{}.svc.cluster.local", a.name);
    let token = grant_token(cp, &a, "site-b", "b", &host, json!({"expiry": "720h"})).await;
    settled(cp, &a, "hub", 1).await;
    let secrets: Api<Secret> = a.api();
    let ann = token.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann[qdr_api::links::token::ENDPOINTS_ANNOTATION], format!("{host}:55671"));
    assert_eq!(ann[qdr_api::links::token::ROLE_ANNOTATION], "inter-router");
    assert!(ann.contains_key(qdr_api::links::token::EXPIRES_ANNOTATION), "{ann:?}");

    // The other side: the token applied, then the Link, then the Interconnect (so its
    // routers mount the links Secret from their start, and never roll for it).
    let applied = Instant::now();
    link_site(cp, &b.name, &token, "site-b");
    routers::wait_ready(cp, &b.name, "spoke", &controllers());
    let links = api(&b, "Link", "links");
    let deadline = Instant::now() + Duration::from_secs(120);
    let link = loop {
        let l = links.get("to-hub").await.unwrap();
        if condition(&l, "Operational").is_some_and(|c| c["status"] == "True") {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "the Link is not Operational: {}\ncontroller:\n{}",
            l.data["status"],
            controllers()[0].log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    say!("token applied → Link Operational in {:.1?}: {}", applied.elapsed(), link.data["status"]);
    assert_eq!(condition(&link, "Configured").unwrap()["status"], "True");
    let hub = router_pods(&a, "hub").await;
    assert_eq!(link.data["status"]["remoteRouter"], hub[0].0, "{}", link.data["status"]);
    assert!(link.data["status"]["tlsProtocol"].as_str().is_some_and(|p| p.starts_with("TLS")));
    assert_eq!(link.data["status"]["site"], "b");
    // The routers hold what they were given as it was written (a link's sslProfile read back
    // otherwise would be deleted and created again at every visit, and its connection with it).
    let took = routers::config_applied(&b, "spoke").await;
    say!("spoke ConfigApplied after {took:.1?} more");

    // The offering side lists the site linked in, by its certificate's identity.
    let status = listed(&a, "site-b", &format!("b.site-b.{}", a.name), Duration::from_secs(90)).await;
    assert_eq!(status["linked"][0]["router"], hub[0].0);
    say!("token applied → the grant lists the site in {:.1?}", applied.elapsed());
    // Each side's Interconnect counts the other's router apart from its own.
    for (ns, name) in [(&a, "hub"), (&b, "spoke")] {
        let ics = api(ns, "Interconnect", "interconnects");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ic = ics.get(name).await.unwrap();
            let mesh = &ic.data["status"]["mesh"];
            if mesh["remoteRouters"] == 1 {
                assert_eq!(mesh["summary"], "1/1 connected", "MESH stays about its own routers: {mesh}");
                break;
            }
            assert!(Instant::now() < deadline, "{name} counts no remote router: {mesh}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // Messages both ways, each acknowledged.
    let spoke = router_pods(&b, "spoke").await;
    let (hub_url, spoke_url) = (url(&hub[0].1, 5672), url(&spoke[0].1, 5672));
    let at_hub = Receiver::attach(&hub_url, "across/to-a", 5, &[]);
    send(&spoke_url, "across/to-a", 0..5, "b-to-a-", Duration::from_secs(60), &[]);
    assert_eq!(at_hub.bodies().len(), 5);
    let at_spoke = Receiver::attach(&spoke_url, "across/to-b", 5, &[]);
    send(&hub_url, "across/to-b", 0..5, "a-to-b-", Duration::from_secs(60), &[]);
    assert_eq!(at_spoke.bodies().len(), 5);
    say!("token applied → messages both ways in {:.1?}", applied.elapsed());

    // Renewal under traffic: a new token (the old one deleted, the grant issues another with
    // a new certificate and key) applied on the other side changes the routers' files in
    // place; nothing restarts, no client reconnects, nothing is lost.
    let log = tempfile::NamedTempFile::new().unwrap();
    let steady = routers::Steady::across(&spoke_url, &hub_url, "across/steady", 20, log.path());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let old_cert = token.data.as_ref().unwrap()[qdr_api::links::token::CERT_KEY].clone();
    secrets.delete("site-b-token", &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let renewed = loop {
        if let Some(t) = secrets.get_opt("site-b-token").await.unwrap()
            && t.data.as_ref().is_some_and(|d| d[qdr_api::links::token::CERT_KEY] != old_cert)
        {
            break t;
        }
        assert!(Instant::now() < deadline, "no new token");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let reapplied = Instant::now();
    apply(cp, &b.name, &portable(&renewed));
    // The kubelet refreshes a mounted Secret at its next sync of the pod (a minute at most).
    let new_pem =
        String::from_utf8(renewed.data.as_ref().unwrap()[qdr_api::links::token::CERT_KEY].0.clone()).unwrap();
    let file = format!(
        "{}/{}",
        qdr_api::router_config::LINKS_DIR,
        qdr_api::router_config::link_key("to-hub", "tls.crt")
    );
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let out = routers::kubectl(cp, &["exec", "-n", &b.name, &spoke[0].0, "--", "cat", &file]);
        if String::from_utf8_lossy(&out.stdout) == new_pem {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the router's file is not renewed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    say!("renewed token applied → the routers' files renewed in {:.1?}", reapplied.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let traffic = steady.finish();
    say!("renewal under traffic: {traffic}");
    if (traffic.lost, traffic.sender_reconnects, traffic.receiver_reconnects) != (0, 0, 0) {
        let show = |args: &[&str]| String::from_utf8_lossy(&routers::kubectl(cp, args).stdout).into_owned();
        panic!(
            "{traffic}\npods:\n{}{}{}{}events:\n{}{}routers:\n{}{}controller:\n{}",
            show(&["get", "pods", "-n", &a.name, "-o", "wide"]),
            show(&["get", "pods", "-n", &b.name, "-o", "wide"]),
            show(&["get", "pods", "-n", &a.name, "-o", LAST_STATE]),
            show(&["logs", "-n", &a.name, "-l", "application=hub", "--previous", "--tail=40"]),
            show(&["get", "events", "-n", &a.name]),
            show(&["get", "events", "-n", &b.name]),
            show(&["logs", "-n", &a.name, "-l", "application=hub", "--tail=30"]),
            show(&["logs", "-n", &b.name, "-l", "application=spoke", "--tail=30"]),
            controllers()[0].log_tail(60)
        );
    }
    assert!(traffic.acknowledged > 20, "{traffic}");
    let after = router_pods(&b, "spoke").await;
    assert_eq!(after[0].0, spoke[0].0, "the spoke's router was not replaced");
    let pod: k8s_openapi::api::core::v1::Pod = b.api().get(&spoke[0].0).await.unwrap();
    let restarts = pod.status.and_then(|s| s.container_statuses).map(|c| c[0].restart_count);
    assert_eq!(restarts, Some(0), "the spoke's router restarted");
    let l = links.get("to-hub").await.unwrap();
    assert_eq!(condition(&l, "Operational").unwrap()["status"], "True", "{}", l.data["status"]);
}

/// An edge grant: the hub's edge listener with mutual TLS, a token of role `edge`, and an
/// edge Interconnect of the other side that uplinks through its Link alone (no
/// `edgeConnectors`): the Link turns Operational, the grant lists the site, messages cross
/// both ways with acknowledgements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_grant_uplinks_an_edge_interconnect_of_another_site() {
    let cp = cluster().await;
    let a = cp.namespace("edge-across-a").await;
    let b = cp.namespace("edge-across-b").await;
    apply(
        cp,
        &a.name,
        &routers::interconnect(
            "hub",
            json!({"deploymentPlan": {"size": 1},
                   "sslProfiles": [{"name": "edges", "mutualAuth": true}],
                   "edgeListeners": [{"port": 45672, "sslProfile": "edges", "authenticatePeer": true,
                                      "saslMechanisms": "EXTERNAL"}]}),
        ),
    );
    routers::wait_ready(cp, &a.name, "hub", &controllers());
    let host = format!("hub.{}.svc.cluster.local", a.name);
    let token = grant_token(cp, &a, "site-e", "e", &host, json!({"role": "edge"})).await;
    let ann = token.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann[qdr_api::links::token::ROLE_ANNOTATION], "edge");
    assert_eq!(ann[qdr_api::links::token::ENDPOINTS_ANNOTATION], format!("{host}:45672"));
    settled(cp, &a, "hub", 1).await;

    apply(cp, &b.name, &portable(&token));
    let applied = Instant::now();
    apply(cp, &b.name, &link("to-hub", "leaf", "site-e-token"));
    apply(
        cp,
        &b.name,
        &routers::interconnect("leaf", json!({"deploymentPlan": {"role": "edge", "size": 1}})),
    );
    routers::wait_ready(cp, &b.name, "leaf", &controllers());
    let links = api(&b, "Link", "links");
    let link = qdr_tests::eventually("the edge Link Operational", Duration::from_secs(120), || async {
        let l = links.get("to-hub").await.unwrap();
        condition(&l, "Operational").is_some_and(|c| c["status"] == "True").then_some(l)
    })
    .await;
    say!("edge token applied → Link Operational in {:.1?}: {}", applied.elapsed(), link.data["status"]);
    let hub = router_pods(&a, "hub").await;
    assert_eq!(link.data["status"]["remoteRouter"], hub[0].0, "{}", link.data["status"]);
    assert!(link.data["status"]["tlsProtocol"].as_str().is_some_and(|p| p.starts_with("TLS")));
    let status = listed(&a, "site-e", &format!("e.site-e.{}", a.name), Duration::from_secs(90)).await;
    assert_eq!(status["linked"][0]["router"], hub[0].0);
    say!("edge token applied → the grant lists the site in {:.1?}", applied.elapsed());
    // Messages both ways, each acknowledged (the receivers count only what they accepted).
    let leaf = router_pods(&b, "leaf").await;
    let at_hub = Receiver::attach(&url(&hub[0].1, 5672), "edge/to-a", 5, &[]);
    let at_leaf = Receiver::attach(&url(&leaf[0].1, 5672), "edge/to-b", 5, &[]);
    send(&url(&leaf[0].1, 5672), "edge/to-a", 0..5, "up-", Duration::from_secs(60), &[]);
    send(&url(&hub[0].1, 5672), "edge/to-b", 0..5, "down-", Duration::from_secs(60), &[]);
    assert_eq!(at_hub.bodies().len(), 5);
    assert_eq!(at_leaf.bodies().len(), 5);
    say!("edge token applied → messages both ways in {:.1?}", applied.elapsed());
    // The edge side's mesh is its uplink: MeshConnected, and the hub counted as remote.
    let ics = api(&b, "Interconnect", "interconnects");
    let mesh = qdr_tests::eventually("the leaf uplinked", Duration::from_secs(90), || async {
        let ic = ics.get("leaf").await.unwrap();
        (ic.data["status"]["mesh"]["remoteRouters"] == 1).then(|| ic.data["status"]["mesh"].clone())
    })
    .await;
    assert_eq!(mesh["summary"], "1/1 uplinked", "{mesh}");
}

/// `kubectl get pods -o` this: each pod's containers' last state (why the kubelet restarted one).
pub const LAST_STATE: &str =
    "jsonpath={range .items[*]}{.metadata.name}{' '}{.status.containerStatuses[*].lastState}{'\\n'}{end}";

/// A site outside Kubernetes: `kubectl qdr site-config` turns a grant's token into a
/// qdrouterd configuration and certificate files, run here by a bare pod of the router image
/// that the operator does not manage (as a VM would run it): it links in, the grant lists it
/// by its certificate's identity, and messages cross. It is given the hub router's pod name
/// as its router id, the clash two same-named Interconnects in two clusters can have: the
/// hub's pod is replaced (Warning `RouterIdClash`), and the site links to its successor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_outside_kubernetes_links_with_a_token_and_is_listed_by_the_grant() {
    let cp = cluster().await;
    let a = cp.namespace("vm-site").await;
    apply(cp, &a.name, &routers::interconnect("hub", json!({"deploymentPlan": {"size": 1}})));
    routers::wait_ready(cp, &a.name, "hub", &controllers());
    let host = format!("hub.{}.svc.cluster.local", a.name);
    let token = grant_token(cp, &a, "site-vm", "vm", &host, json!({})).await;
    settled(cp, &a, "hub", 1).await;
    let taken = router_pods(&a, "hub").await[0].0.clone();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token.json");
    std::fs::write(&file, portable(&token).to_string()).unwrap();
    let out_dir = dir.path().join("site");
    let out = std::process::Command::new(qdr_tests::components::binary("kubectl-qdr"))
        .args(["site-config", "-f"])
        .arg(&file)
        .arg("--dir")
        .arg(&out_dir)
        .args(["--cert-dir", "/etc/site-certs", "--id", &taken])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |f: &str| std::fs::read_to_string(out_dir.join(f)).unwrap();
    let config = read("qdrouterd.json");
    assert!(config.contains(&host) && config.contains("\"verifyHostname\": true"), "{config}");
    // The machine: the router image, qdrouterd on the written files, nothing of the operator.
    apply(
        cp,
        &a.name,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vm-config"},
                "data": {"qdrouterd.json": config}}),
    );
    apply(
        cp,
        &a.name,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vm-certs"},
                "stringData": {"ca.crt": read("ca.crt"), "tls.crt": read("tls.crt"), "tls.key": read("tls.key")}}),
    );
    apply(
        cp,
        &a.name,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vm", "labels": {"app": "vm"}},
            "spec": {"automountServiceAccountToken": false, "containers": [{
                "name": "qdrouterd", "image": routers::ROUTER_IMAGE, "imagePullPolicy": "Never",
                "command": ["qdrouterd", "-c", "/etc/site-config/qdrouterd.json"],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/site-config"},
                                 {"name": "certs", "mountPath": "/etc/site-certs"}]}],
            "volumes": [{"name": "config", "configMap": {"name": "vm-config"}},
                        {"name": "certs", "secret": {"secretName": "vm-certs"}}]}}),
    );
    let applied = Instant::now();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = a.api();
    let deadline = Instant::now() + Duration::from_secs(90);
    let vm_ip = loop {
        let p = pods.get("vm").await.unwrap();
        let status = p.status.unwrap_or_default();
        if status.phase.as_deref() == Some("Running")
            && let Some(ip) = status.pod_ip
        {
            break ip;
        }
        assert!(Instant::now() < deadline, "the site's router does not run: {status:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // The clash: the hub's pod of that name is replaced, and the Event says why.
    let hub = qdr_tests::eventually(
        "the hub's pod with the site's id replaced",
        Duration::from_secs(120),
        || async {
            let hub = router_pods(&a, "hub").await;
            (hub.len() == 1 && hub[0].0 != taken).then_some(hub)
        },
    )
    .await;
    say!("the hub's pod {taken} (the site's id) replaced {:.1?} after the site started", applied.elapsed());
    let clash = routers::kubectl(cp, &["get", "events", "-n", &a.name, "-o", "json"]);
    let clash = String::from_utf8_lossy(&clash.stdout).to_string();
    assert!(
        clash.contains("RouterIdClash") && clash.contains(&taken),
        "no RouterIdClash Event naming {taken}"
    );
    let identity = format!("vm.site-vm.{}", a.name);
    let status = qdr_tests::eventually(
        "the grant lists the site on the new hub router",
        Duration::from_secs(180),
        || {
            let identity = identity.clone();
            let a = &a;
            let new = hub[0].0.clone();
            async move {
                let s = listed(a, "site-vm", &identity, Duration::from_secs(120)).await;
                (s["linked"][0]["router"] == new.as_str()).then_some(s)
            }
        },
    )
    .await;
    assert_eq!(status["linked"][0]["remote"], taken.as_str(), "the router id the site's configuration gives");
    say!("the site outside Kubernetes listed by the grant {:.1?} after it started", applied.elapsed());
    routers::wait_ready(cp, &a.name, "hub", &controllers());
    let at_hub = Receiver::attach(&url(&hub[0].1, 5672), "vm/to-a", 3, &[]);
    send(&url(&vm_ip, 5672), "vm/to-a", 0..3, "vm-", Duration::from_secs(60), &[]);
    assert_eq!(at_hub.bodies().len(), 3);
}
