//! Real routers through the operator: the router image built from source
//! (`tools/router-image/build.sh`) runs as pods on the real node (`qdr_tests::routers`), made
//! by `qdr-controller` from Interconnects, and real AMQP clients
//! (`tests/amqp/client.py`, Debian's Proton) and the image's own `qdmanage` talk to them.
//!
//! One real node runs here, so every router of a test shares it: placement `Any` and `Every`
//! (one router) run as they would anywhere; `AntiAffinity` gets one router per node, so its
//! example runs with one router. The real node's CoreDNS resolves Service names, so edge
//! uplinks and connectors name Services as users write them.

use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use qdr_controller::mesh;
use qdr_tests::routers::{
    self, ROUTER_IMAGE, Receiver, Steady, apply, client, json_lines, kubectl, qdmanage, rolled_out,
    router_pods, send, service_ip, url, watch_ready,
};
use qdr_tests::{ControlPlane, Process, TestNamespace};
use serde_json::{Value, json};

static START: OnceLock<Instant> = OnceLock::new();

macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[{:6.1}s] {}", START.get_or_init(Instant::now).elapsed().as_secs_f64(), format!($($arg)*))
    };
}

static READY: tokio::sync::OnceCell<Process> = tokio::sync::OnceCell::const_new();

/// The controllers running, for their logs.
fn controllers() -> Vec<&'static Process> {
    READY.get().into_iter().collect()
}

/// The control plane with the real node open to routers, the router image imported, the CRD
/// installed and one controller running.
async fn cluster() -> &'static ControlPlane {
    let cp = qdr_tests::shared_with_real_node().await;
    READY
        .get_or_init(|| async {
            routers::check_client().expect("the AMQP client");
            let t = Instant::now();
            routers::routers_on_real_node(cp).expect("untainting the real node");
            routers::import_router_image(cp).expect("the router image");
            say!("router image built (or cached) and imported in {:.1?}", t.elapsed());
            cp.install_crd().await;
            routers::start_controller(cp, "qdr-controller-0", &[]).expect("the controller")
        })
        .await;
    cp
}

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

/// The Dockerfile of the published image, from the router sources' `qdr-image/`.
fn dockerfile() -> (String, std::path::PathBuf) {
    let out = std::process::Command::new(routers::build_script()).arg("--sources").output().unwrap();
    assert!(out.status.success(), "router sources: {}", String::from_utf8_lossy(&out.stderr));
    let dir = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (std::fs::read_to_string(dir.join("qdr-image/Dockerfile")).unwrap(), dir.join("qdr-image"))
}

#[test]
fn the_router_image_is_laid_out_as_qdr_images_dockerfile_says() {
    let archive = routers::image_archive().expect("the router image");
    let image = qdr_tests::images::read_config(&archive).unwrap();
    let (dockerfile, qdr_image) = dockerfile();
    let mut workdir = String::new();
    let mut copied = Vec::new();
    for line in dockerfile.lines() {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "CMD" => {
                let cmd: Vec<String> = serde_json::from_str(rest).expect("CMD in exec form");
                assert_eq!(image.cmd, cmd);
            }
            "ENV" => {
                let (k, v) = rest.split_once('=').unwrap();
                let v = if v.starts_with("${") { "1.19.0" } else { v }; // ARG version: the tag
                assert!(image.env.contains(&format!("{k}={v}")), "{k}={v} not in {:?}", image.env);
            }
            "WORKDIR" => workdir = rest.to_string(),
            "EXPOSE" => {
                let mut want: Vec<String> = rest.split(' ').map(|p| format!("{p}/tcp")).collect();
                want.sort();
                assert_eq!(image.exposed_ports, want);
            }
            "COPY" => copied.push(rest.split(' ').map(String::from).collect::<Vec<_>>()),
            _ => {}
        }
    }
    assert_eq!(image.working_dir, workdir, "the last WORKDIR");
    assert_eq!(copied, [vec!["./scripts/*".to_string(), "/home/qdrouterd/bin/".to_string()]]);
    let scripts: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(qdr_image.join("scripts"))
        .unwrap()
        .flatten()
        .map(|s| (format!("/home/qdrouterd/bin/{}", s.file_name().to_string_lossy()), s.path()))
        .collect();
    let paths: Vec<&str> = scripts.iter().map(|(p, _)| p.as_str()).collect();
    let in_image = qdr_tests::images::layer_files(&archive, &paths).unwrap();
    for (path, source) in &scripts {
        let (mode, bytes) = in_image.get(path).unwrap_or_else(|| panic!("{path} missing"));
        assert_eq!(bytes, &std::fs::read(source).unwrap(), "{path} differs from qdr-image's");
        assert_eq!(mode & 0o111, 0o111, "{path} is not executable");
    }
    // What the scripts and the router need from the base: qdrouterd on PATH, python3 with
    // Proton's and the router's modules, hostname, saslpasswd2 and the SASL plugins.
    for f in [
        "/usr/sbin/qdrouterd",
        "/usr/bin/qdmanage",
        "/usr/bin/qdstat",
        "/usr/bin/hostname",
        "/usr/sbin/saslpasswd2",
    ] {
        assert!(image.files.iter().any(|x| x == f), "{f} missing from the image");
    }
    for f in [
        "/qpid_dispatch/management/client.py",
        "/proton/utils.py",
        "/sasl2/libplain.so",
        "/sasl2/libsasldb.so",
    ] {
        assert!(image.files.iter().any(|x| x.contains(f)), "no *{f}* in the image");
    }
    assert!(!image.files.iter().any(|x| x == "/usr/bin/sh"), "/bin/sh must be a link to bash, as on Fedora");
    assert!(image.files.iter().any(|x| x == "/usr/bin/bash"), "no bash in the image");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listeners_verify_names_and_client_certificates() {
    let cp = cluster().await;
    let ns = cp.namespace("tls").await;
    apply(
        cp,
        &ns.name,
        &routers::interconnect(
            "tls",
            json!({
                "deploymentPlan": {"size": 1},
                "listeners": [
                    {"port": 5672},
                    {"name": "amqps", "port": 5671, "sslProfile": "server-tls"},
                    {"name": "mtls", "port": 5674, "sslProfile": "mutual-tls", "authenticatePeer": true,
                     "saslMechanisms": "EXTERNAL"},
                ],
                "sslProfiles": [{"name": "server-tls"}, {"name": "mutual-tls", "mutualAuth": true}],
            }),
        ),
    );
    routers::wait_ready(cp, &ns.name, "tls", &controllers());
    let pods = router_pods(&ns, "tls").await;
    let ip = pods[0].1.clone();
    let secrets: Api<Secret> = ns.api();
    let data = |s: &Secret, k: &str| s.data.as_ref().and_then(|d| d.get(k)).map(|b| b.0.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let server = secrets.get("tls-server-tls-credentials").await.unwrap();
    let server_ca = file("server-ca.crt", &data(&server, "ca.crt"));
    let query = |port: u16, options: &[&str]| {
        client("query", &format!("amqps://{ip}:{port}"), "org.apache.qpid.dispatch.router", options)
            .output()
            .unwrap()
    };

    // amqps with the generated credentials: the router's name is verified.
    let service_name = format!("tls.{}.svc", ns.name);
    let ok = query(5671, &["--ca", &server_ca, "--verify-host", "--sni", &service_name]);
    assert!(ok.status.success(), "amqps as {service_name}: {:?}", json_lines(&ok));
    let wrong = query(5671, &["--ca", &server_ca, "--verify-host", "--sni", "elsewhere.example"]);
    assert!(!wrong.status.success(), "a certificate for {service_name} was accepted as elsewhere.example");

    // Mutual TLS with EXTERNAL: a client certificate from the profile's generated CA logs in,
    // one from another CA is refused.
    let ca = secrets.get("tls-mutual-tls-ca").await.unwrap();
    let (cert, key) = qdr_tests::keys::issued_by(&data(&ca, "tls.crt"), &data(&ca, "tls.key"), "alice");
    let (cert, key) = (file("alice.crt", cert.as_bytes()), file("alice.key", key.as_bytes()));
    let mutual = secrets.get("tls-mutual-tls-credentials").await.unwrap();
    let mutual_ca = file("mutual-ca.crt", &data(&mutual, "ca.crt"));
    let good = query(5674, &["--ca", &mutual_ca, "--cert", &cert, "--key", &key, "--mech", "EXTERNAL"]);
    assert!(good.status.success(), "alice's certificate from the profile's CA: {:?}", json_lines(&good));
    let other_key = openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
    let other_ca = qdr_tests::keys::certificate(&other_key, None, "someone else's CA");
    let (cert, key) = qdr_tests::keys::issued_by(
        other_ca.as_bytes(),
        &other_key.private_key_to_pem_pkcs8().unwrap(),
        "mallory",
    );
    let (cert, key) = (file("mallory.crt", cert.as_bytes()), file("mallory.key", key.as_bytes()));
    let refused = query(5674, &["--ca", &mutual_ca, "--cert", &cert, "--key", &key, "--mech", "EXTERNAL"]);
    assert!(!refused.status.success(), "a certificate from another CA was let in");
    let none = query(5674, &["--ca", &mutual_ca, "--mech", "EXTERNAL"]);
    assert!(!none.status.success(), "no client certificate was let in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_anti_affinity_router_serves_throughout_a_roll() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("solo").await));
    let spec = |extra: &str| {
        routers::interconnect(
            "solo",
            json!({
                "deploymentPlan": {"size": 1, "placement": "AntiAffinity"},
                "listeners": [{"port": 5672}],
                "addresses": [{"prefix": "closest", "distribution": "closest"}, {"prefix": extra}],
            }),
        )
    };
    apply(cp, &ns.name, &spec("before"));
    routers::wait_ready(cp, &ns.name, "solo", &controllers());
    let ip = service_ip(ns, "solo").await;
    let steady =
        Steady::start(&url(&ip, 5672), "closest/solo", 20, &cp.dir().join(format!("{}-steady.log", ns.name)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (stop, fewest) = watch_ready(ns, "solo");
    // A configuration change rolls the router.
    apply(cp, &ns.name, &spec("after"));
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
    let spec = |prefix: &str, memory: &str| {
        routers::interconnect(
            "rev",
            json!({
                "deploymentPlan": {"size": 1, "placement": "Any",
                                   "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}}},
                "listeners": [{"port": 5672}],
                "addresses": [{"prefix": "closest", "distribution": "closest"}, {"prefix": prefix}],
            }),
        )
    };
    apply(cp, &ns.name, &spec("old-revision", "256Mi"));
    routers::wait_ready(cp, &ns.name, "rev", &controllers());
    let old = router_pods(ns, "rev").await;
    assert_eq!(old.len(), 1);
    let old_pod = old[0].0.clone();

    // A new revision whose router cannot start (4 MiB of memory): the rollout stays half-way,
    // the old router keeps running. (Not an unschedulable one: the image's auto_mesh.py waits
    // for every router pod to have an address before the router starts, so an old router
    // restarted beside a Pending one would never start.)
    apply(cp, &ns.name, &spec("new-revision", "4Mi"));
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

    // What the old router mounts still holds its own configuration (an in-place update of a
    // shared ConfigMap would reach it within the kubelet's sync period).
    let mounted = pods.get(&old_pod).await.unwrap().spec.unwrap().volumes.unwrap_or_default();
    let mounted =
        mounted.iter().find(|v| v.name == "router-config").and_then(|v| v.config_map.clone()).unwrap().name;
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = ns.api();
    let cm = config_maps.get(&mounted).await.expect("the old router's ConfigMap is kept");
    let text = cm.data.unwrap_or_default().into_values().collect::<String>();
    assert!(text.contains("old-revision") && !text.contains("new-revision"), "{mounted}: {text}");
    assert_eq!(cm.immutable, Some(true), "{mounted} is not immutable");

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
    apply(cp, &ns.name, &spec("third-revision", "256Mi"));
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

/// What each of `pods` answers the controller's mesh reader (`mesh::reader::observe`, two
/// at a time, on the plain listener 5672).
async fn observe(pods: &[(String, String)]) -> std::collections::BTreeMap<String, mesh::Observation> {
    let targets: Vec<mesh::reader::Target> = pods
        .iter()
        .map(|(pod, ip)| mesh::reader::Target { pod: pod.clone(), ip: Some(ip.clone()), ready: true })
        .collect();
    let pool = mesh::pool::Pool::new(2, 2);
    let plan = mesh::reader::Plan {
        port: 5672,
        namespace: "test",
        pool: &pool,
        timeout: Duration::from_secs(10),
        deadline: tokio::time::Instant::now() + Duration::from_secs(60),
        tls: None,
    };
    mesh::reader::observe(&targets, &plan).await
}

/// The `connection` entities of `pod`'s router with role `role` that are open.
fn open_connections(cp: &ControlPlane, ns: &str, pod: &str, role: &str) -> Vec<Value> {
    match qdmanage(cp, ns, pod, &["query", "--type=connection"]) {
        Ok(Value::Array(all)) => {
            all.into_iter().filter(|c| c["role"] == role && c["opened"] == true).collect()
        }
        _ => Vec::new(),
    }
}

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

/// The JSON lines `tests/amqp/peer.py` printed so far in pod `pod`.
fn peer_events(cp: &ControlPlane, ns: &str, pod: &str) -> Vec<Value> {
    json_lines(&kubectl(cp, &["logs", "-n", ns, pod]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_route_to_a_broker_carries_messages_both_ways() {
    let cp = cluster().await;
    let ns = cp.namespace("linkroute").await;
    // The broker: tests/amqp/peer.py (a queue per address) in a pod of the router image,
    // which has Proton's Python binding, behind Service `broker`.
    let script = std::fs::read_to_string(qdr_tests::workspace_root().join("tests/amqp/peer.py")).unwrap();
    apply(
        cp,
        &ns.name,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "peer"},
                                "data": {"peer.py": script}}),
    );
    apply(
        cp,
        &ns.name,
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "broker", "labels": {"app": "broker"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "peer", "image": ROUTER_IMAGE, "imagePullPolicy": "Never",
                    "command": ["python3", "-u", "/peer/peer.py", "--listen", "0.0.0.0:5672"],
                    "ports": [{"containerPort": 5672}],
                    "volumeMounts": [{"name": "peer", "mountPath": "/peer"}],
                }],
                "volumes": [{"name": "peer", "configMap": {"name": "peer"}}],
            },
        }),
    );
    apply(
        cp,
        &ns.name,
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "broker"},
                                "spec": {"selector": {"app": "broker"}, "ports": [{"port": 5672}]}}),
    );
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

/// Interconnect `name` as JSON (`kubectl get -o json`).
fn get_ic(cp: &ControlPlane, ns: &str, name: &str) -> Value {
    let out = routers::kubectl(cp, &["get", "interconnect", name, "-n", ns, "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// Condition `type_` of `ic` as (status, reason, message).
fn condition_of(ic: &Value, type_: &str) -> (String, String, String) {
    let c = ic["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == type_);
    let field = |k: &str| c.and_then(|c| c[k].as_str()).unwrap_or_default().to_string();
    (field("status"), field("reason"), field("message"))
}

/// Whether `ic`'s mesh is `Connected` with every router judged: a read while a router is
/// still joining (Ready, not linked yet: within `JOIN_GRACE`) says `Connected` with "N
/// starting", and the next may then name a link not yet opened.
fn mesh_settled(ic: &Value) -> bool {
    let (_, reason, message) = condition_of(ic, "MeshConnected");
    reason == "Connected" && !message.contains("starting")
}

/// `kubectl <args>`'s standard output, printed.
fn shown(cp: &ControlPlane, args: &[&str]) -> String {
    let out = routers::kubectl(cp, args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    say!("kubectl {}\n{text}", args.join(" "));
    text
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
    let refused = mesh::reader::read_router(plain, "test", Duration::from_secs(10)).await;
    assert!(refused.is_err(), "a plain connection read the router: {refused:?}");
    say!("management listener, plain: refused ({:.100})", format!("{refused:?}"));

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

    // A configuration change: not applied until every router runs it.
    let before = ic["status"]["configHash"].as_str().unwrap().to_string();
    apply(cp, &ns.name, &routers::interconnect("seen", spec("nearest")));
    let rolling =
        qdr_tests::eventually("the new configuration's first status", Duration::from_secs(60), || async {
            let ic = get_ic(cp, &ns.name, "seen");
            let hash = ic["status"]["configHash"].as_str().unwrap_or_default().to_string();
            (hash != before && !hash.is_empty()).then(|| condition_of(&ic, "ConfigApplied"))
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
