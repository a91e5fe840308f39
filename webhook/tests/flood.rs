//! The webhook cannot be starved: 64 clients sending maximum-size bodies without pause and
//! 1,000 garbage bodies, straight to the admission port (as any pod could), while real
//! admission requests go through the API server. The process must not die, its peak RSS
//! must stay under the memory limit `deploy/` gives it, and every real review must be
//! answered. The figures (peak RSS, the real reviews' p50/p99) are printed for the notes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::post;
use kube::api::{Api, DynamicObject, PostParams};
use qdr_webhook::server::MAX_BODY_BYTES;
use serde_json::{Value, json};

/// Flooding clients with maximum-size bodies.
const FLOODERS: usize = 64;
/// Garbage bodies in all.
const GARBAGE: usize = 1000;
/// Real admission requests (Interconnect creates through the API server).
const REAL: usize = 60;
/// The least time the flood runs.
const FLOOD_FOR: Duration = Duration::from_secs(15);

/// An AdmissionReview of `object` (and `old` on UPDATE).
fn review(op: &str, object: Value, old: Option<Value>) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "flood", "operation": op, "name": "flood", "namespace": "flood",
        "kind": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "kind": "Interconnect"},
        "resource": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "resource": "interconnects"},
        "userInfo": {"username": "flooder"}, "object": object, "oldObject": old}})
}

/// `review` padded (in an annotation, which the webhook skips) to just under the limit.
fn padded(mut review: Value) -> Vec<u8> {
    let size = serde_json::to_vec(&review).unwrap().len();
    let pad = MAX_BODY_BYTES.saturating_sub(size + 64);
    for o in ["object", "oldObject"] {
        if review["request"][o].is_object() {
            review["request"][o]["metadata"]["annotations"] = json!({"pad": "p".repeat(pad)});
            break;
        }
    }
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() <= MAX_BODY_BYTES, "{} bytes", body.len());
    body
}

/// A spec with every list at the most items the webhook decodes, each item with long
/// strings: the most typed memory one body can make.
fn heavy_spec(max_items: usize, field: usize) -> Value {
    let s = |i: usize, tag: &str| format!("{tag}-{i}-{}", "v".repeat(field));
    let listeners: Vec<Value> = (0..max_items)
        .map(|i| {
            json!({"name": s(i, "l"), "host": s(i, "h"), "port": 1000 + i, "sslProfile": s(i, "p"),
                        "saslMechanisms": s(i, "m"), "authenticatePeer": true})
        })
        .collect();
    let connectors: Vec<Value> = (0..max_items)
        .map(|i| json!({"name": s(i, "c"), "host": s(i, "h"), "port": 2000 + i, "sslProfile": s(i, "p")}))
        .collect();
    let addresses: Vec<Value> = (0..max_items)
        .map(|i| json!({"prefix": s(i, "a"), "distribution": "closest", "waypoint": true}))
        .collect();
    let links: Vec<Value> = (0..max_items)
        .map(|i| json!({"prefix": s(i, "r"), "direction": "in", "connection": s(i, "c"), "containerId": s(i, "x")}))
        .collect();
    let auto: Vec<Value> = (0..max_items)
        .map(|i| json!({"address": s(i, "q"), "direction": "out", "connection": s(i, "c"), "containerId": s(i, "x")}))
        .collect();
    let profiles: Vec<Value> = (0..max_items)
        .map(|i| json!({"name": s(i, "p"), "credentials": s(i, "s"), "caCert": s(i, "ca"), "ciphers": s(i, "x")}))
        .collect();
    json!({"users": "u", "listeners": listeners, "interRouterListeners": listeners, "edgeListeners": listeners,
           "connectors": connectors, "interRouterConnectors": connectors, "edgeConnectors": connectors,
           "addresses": addresses, "linkRoutes": links, "autoLinks": auto, "sslProfiles": profiles})
}

fn ic(spec: Value) -> Value {
    json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
           "metadata": {"name": "flood", "namespace": "flood"}, "spec": spec})
}

/// The maximum-size bodies: the heaviest typed spec (CREATE, and UPDATE with a stored
/// object as heavy, which ratcheting compares), a spec of one huge string, and a list far
/// over the CRD's largest (refused by the scan before decoding).
fn max_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let max = qdr_webhook::decode::LIMITS.items;
    let mut heavy = Vec::new();
    // The longest item strings that keep the body under the limit.
    for field in (0..200).rev().step_by(10) {
        let body = serde_json::to_vec(&review("CREATE", ic(heavy_spec(max, field)), None)).unwrap();
        if body.len() + 1024 < MAX_BODY_BYTES {
            heavy = body;
            break;
        }
    }
    assert!(!heavy.is_empty());
    let half = heavy_spec(max / 2, 40);
    let update = padded(review(
        "UPDATE",
        ic(half.clone()),
        Some(ic(json!({"users": "v", "addresses": half["addresses"]}))),
    ));
    let string =
        serde_json::to_vec(&review("CREATE", ic(json!({"users": "x".repeat(MAX_BODY_BYTES - 1024)})), None))
            .unwrap();
    let items = (MAX_BODY_BYTES - 1024) / 3;
    let many = format!("[{}{{}}]", "{},".repeat(items - 1));
    let array = serde_json::to_vec(&review("CREATE", ic(json!({"listeners": "LIST"})), None))
        .unwrap()
        .iter()
        .map(|&b| b as char)
        .collect::<String>()
        .replacen("\"LIST\"", &many, 1)
        .into_bytes();
    vec![
        ("heavy", padded(serde_json::from_slice(&heavy).unwrap())),
        ("update", update),
        ("string", string),
        ("array", array),
    ]
}

/// Garbage: random bytes, truncated JSON, JSON that is not a review, deep nesting.
fn garbage(i: usize) -> Vec<u8> {
    match i % 4 {
        0 => (0..4096).map(|j| ((i * 31 + j * 17) % 251) as u8).collect(),
        1 => b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":".to_vec(),
        2 => br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"g","object":[1,2,3]}}"#.to_vec(),
        _ => format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
    }
}

/// VmRSS and VmHWM (peak) of `pid`, in KiB.
fn memory(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The webhook container's memory limit in `deploy/`, in KiB.
fn deploy_memory_limit() -> u64 {
    let text = std::fs::read_to_string(qdr_tests::workspace_root().join("deploy/base/webhook.yaml")).unwrap();
    let line = text.lines().find(|l| l.contains("limits:") && l.contains("memory")).expect("a memory limit");
    let mi: u64 = line
        .split("memory:")
        .nth(1)
        .unwrap()
        .trim()
        .trim_end_matches(['}', ' '])
        .trim_end_matches("Mi")
        .parse()
        .unwrap();
    mi * 1024
}

/// Samples the RSS of `pid` every 20 ms until `stop`; the thread returns the peak, in KiB.
fn sample_peak(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::SeqCst) {
            if let Some((rss, _)) = memory(pid) {
                peak = peak.max(rss);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    })
}

/// [`REAL`] Interconnect creates through the API server (both webhooks), one after the
/// other, in `ns`: the latencies of those admitted (each stored with the mutating webhook's
/// default) and the failures.
async fn real_creates(cp: &qdr_tests::ControlPlane, ns: &str) -> (Vec<Duration>, Vec<String>) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        cp.client().await.unwrap(),
        ns,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "interconnectedcloud.github.io",
            "v1alpha1",
            "Interconnect",
        )),
    );
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    for i in 0..REAL {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
            "metadata": {"name": format!("real-{i}")}, "spec": {"deploymentPlan": {"size": 1}}}))
        .unwrap();
        let t = Instant::now();
        match api.create(&PostParams::default(), &obj).await {
            Ok(created) => {
                latencies.push(t.elapsed());
                assert_eq!(
                    created.data["spec"]["users"],
                    format!("real-{i}-users"),
                    "defaulted by the webhook"
                );
            }
            Err(e) => failures.push(format!("real-{i}: {e}")),
        }
    }
    latencies.sort();
    (latencies, failures)
}

/// How many of `statuses` had each answer (`error` for no answer).
fn count(statuses: &[Result<u16, String>]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for s in statuses {
        *counts.entry(s.as_ref().map_or_else(|_| "error".to_string(), ToString::to_string)).or_insert(0) += 1;
    }
    counts
}

/// The `p` quantile of sorted `latencies`.
fn quantile(latencies: &[Duration], p: f64) -> Option<Duration> {
    let n = latencies.len();
    (n > 0).then(|| latencies[((n as f64 * p).ceil() as usize).clamp(1, n) - 1])
}

/// The webhook as the tests' image holds it: the binary built with the tests
/// ([`qdr_tests::images::operator_binary`]; `make bench` measures the release one).
fn image_binary() -> std::path::PathBuf {
    qdr_tests::images::operator_binary(&qdr_tests::images::WEBHOOK).expect("qdr-webhook built with the tests")
}

/// The floods of this binary take turns: each measures the webhook's memory alone.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_large_and_garbage_bodies_do_not_starve_real_reviews() {
    let _serial = SERIAL.lock().await;
    let cp = qdr_tests::shared().await;
    let common::Served { ns, replica, .. } =
        common::serve_program(&image_binary(), cp, "flood", &["--check-interval=1s"]).await;
    let port = replica.port;
    let pid = replica.process.pid();
    let (idle_rss, _) = memory(pid).unwrap();

    let bodies = Arc::new(max_bodies());
    for (name, b) in bodies.iter() {
        eprintln!("flood body {name}: {} bytes", b.len());
    }
    let cfg = common::see_any_cert();
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, statuses) = (Arc::new(AtomicUsize::new(0)), Arc::new(std::sync::Mutex::new(Vec::new())));
    let mut threads = Vec::new();
    for t in 0..FLOODERS {
        let (bodies, cfg, stop, sent, statuses) =
            (bodies.clone(), cfg.clone(), stop.clone(), sent.clone(), statuses.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = t;
            while !stop.load(Ordering::SeqCst) {
                let (_, body) = &bodies[i % bodies.len()];
                let path = if i % 2 == 0 { "/validate" } else { "/mutate" };
                let status = post(port, &cfg, path, body);
                statuses.lock().unwrap().push(status);
                sent.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
        }));
    }
    let garbage_done = Arc::new(AtomicUsize::new(0));
    for t in 0..16 {
        let (cfg, done) = (cfg.clone(), garbage_done.clone());
        threads.push(std::thread::spawn(move || {
            for i in (t..GARBAGE).step_by(16) {
                let status = post(port, &cfg, "/validate", &garbage(i));
                assert!(matches!(status, Ok(400) | Ok(200) | Ok(408)), "garbage {i}: {status:?}");
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // Memory, sampled while the flood runs.
    let sampler = sample_peak(pid, stop.clone());
    // Let the flood reach full pressure, then send the real reviews.
    let flood_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (latencies, failures) = real_creates(cp, &ns).await;
    while (garbage_done.load(Ordering::SeqCst) < GARBAGE || flood_started.elapsed() < FLOOD_FOR)
        && replica.process.exited().is_none()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let sampled_peak = sampler.join().unwrap();
    assert!(replica.process.exited().is_none(), "the webhook died:\n{}", replica.process.log_tail(30));
    let (_, hwm) = memory(pid).unwrap();
    let pct = |p: f64| quantile(&latencies, p);
    let counts = count(&statuses.lock().unwrap());
    let limit = deploy_memory_limit();
    eprintln!(
        "flood: {} maximum-size bodies ({FLOODERS} clients; answers {counts:?}) and {GARBAGE} garbage bodies; {} real \
         creates answered, p50 {:?}, p99 {:?}, max {:?}; webhook RSS idle {} KiB, peak {} KiB (sampled {} KiB), \
         limit {} KiB",
        sent.load(Ordering::SeqCst),
        latencies.len(),
        pct(0.5),
        pct(0.99),
        latencies.last(),
        idle_rss,
        hwm,
        sampled_peak,
        limit
    );
    assert!(failures.is_empty(), "real reviews failed: {failures:#?}");
    assert!(hwm < limit, "peak RSS {hwm} KiB is over the container limit {limit} KiB");
    assert!(sent.load(Ordering::SeqCst) >= FLOODERS, "the flood did not run");
}

/// Secrets each flood review names: 30 profiles with a `credentials` and a `caCert` each,
/// and the 4 the defaults add (the `default` and `inter-router` profiles' generated
/// credentials, CA and issuer): as many as a valid spec can name, near enough.
const NAMED: usize = 64;

/// A valid CREATE review by `user` naming [`NAMED`] Secrets: each costs the webhook a
/// SubjectAccessReview per Secret when `user` may not read the namespace's Secrets.
fn reference_heavy(user: &str) -> Vec<u8> {
    let profiles: Vec<Value> = (0..(NAMED - 4) / 2)
        .map(|i| json!({"name": format!("p{i}"), "credentials": format!("tls-{i}"), "caCert": format!("ca-{i}")}))
        .collect();
    let mut r = review("CREATE", ic(json!({"users": "none", "sslProfiles": profiles})), None);
    r["request"]["userInfo"] = json!({"username": user, "groups": ["system:authenticated"]});
    serde_json::to_vec(&r).unwrap()
}

/// Concurrent streams of each flood connection: the server's limit per connection.
const STREAMS: usize = qdr_webhook::server::HTTP2_STREAMS as usize;

/// 64 clients of one pod (their own address, 127.0.0.2), each an HTTP/2 connection keeping
/// 32 reviews in flight, post reviews that each name 64 Secrets, each as another user (so no answer can be reused, and each review costs 65
/// SubjectAccessReviews), straight to the admission port, while real creates go through the
/// API server (from 127.0.0.1). The permits are held through the reference checks, so the
/// webhook's memory stays bounded; the lanes serve the two addresses in turn, so every real
/// review is answered within the API server's timeout (the creates succeed). Figures are
/// printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_heavy_floods_from_a_pod_do_not_starve_real_reviews() {
    let _serial = SERIAL.lock().await;
    let cp = qdr_tests::shared().await;
    let common::Served { ns, replica, .. } =
        common::serve_program(&image_binary(), cp, "refflood", &["--check-interval=1s"]).await;
    let port = replica.port;
    let pid = replica.process.pid();
    let (idle_rss, _) = memory(pid).unwrap();
    // Each flood review leaves every Secret it names to check.
    let reply = qdr_webhook::admission::handle_with(
        qdr_webhook::admission::Webhook::Validate,
        &reference_heavy("u"),
        &Default::default(),
    );
    let named = reply.pending.as_ref().map(|p| p.secrets().len());
    assert_eq!(named, Some(NAMED), "{:?}", reply.pending);
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(std::sync::Mutex::new(Vec::new()));
    let pod = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let mut connections = Vec::new();
    for c in 0..FLOODERS {
        let body: Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync> =
            Arc::new(move |i| reference_heavy(&format!("u{c}-{i}")));
        connections.push(tokio::spawn(common::h2_flood(
            pod,
            port,
            "/validate",
            STREAMS,
            body,
            stop.clone(),
            statuses.clone(),
        )));
    }
    let sampler = sample_peak(pid, stop.clone());
    let flood_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (latencies, failures) = real_creates(cp, &ns).await;
    while flood_started.elapsed() < FLOOD_FOR && replica.process.exited().is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for c in connections {
        c.await.unwrap().expect("a flood connection");
    }
    let sampled_peak = sampler.join().unwrap();
    let flood_time = flood_started.elapsed();
    let sent = statuses.lock().unwrap().len();
    assert!(replica.process.exited().is_none(), "the webhook died:\n{}", replica.process.log_tail(30));
    let (_, hwm) = memory(pid).unwrap();
    let reviews = cp
        .audit()
        .iter()
        .filter(|e| e.counts() && e.object_ref.as_ref().is_some_and(|o| o.resource == "subjectaccessreviews"))
        .count();
    let counts = count(&statuses.lock().unwrap());
    let pct = |p: f64| quantile(&latencies, p);
    let limit = deploy_memory_limit();
    eprintln!(
        "reference flood: {sent} reviews of {NAMED} Secrets each on {FLOODERS} HTTP/2 connections of {STREAMS} \
         streams from 127.0.0.2 in {flood_time:.1?} (answers {counts:?}); {reviews} SubjectAccessReviews in the \
         audit log; {} real creates answered, p50 {:?}, p99 {:?}, max {:?}; webhook RSS idle {idle_rss} KiB, peak \
         {hwm} KiB (sampled {sampled_peak} KiB), limit {limit} KiB",
        latencies.len(),
        pct(0.5),
        pct(0.99),
        latencies.last(),
    );
    assert!(failures.is_empty(), "real reviews failed: {failures:#?}");
    assert!(hwm < limit, "peak RSS {hwm} KiB is over the container limit {limit} KiB");
    assert!(sent >= FLOODERS, "the flood did not run");
    assert!(reviews > 10 * NAMED, "the flood's reviews were not checked: {reviews} SubjectAccessReviews");
}
