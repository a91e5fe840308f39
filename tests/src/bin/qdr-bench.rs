//! `make bench`: every benchmark of the project, one table with the figures and the targets.
//! Each figure is the median of several runs (`QDR_BENCH_RUNS`, default 3) with min and max.
//! Absolute figures on a shared 2-core machine are noisy: the load generator, the webhook,
//! the API server and etcd all share the same cores.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use qdr_tests::rbac::Install;
use qdr_tests::{ControlPlane, Options, Process};
use serde_json::{Value, json};

struct Row {
    what: String,
    runs: Vec<f64>,
    unit: &'static str,
    target: String,
}

impl Row {
    /// A one-run row of a mean time in `seconds`, printed in milliseconds, with no target.
    fn mean_ms(what: String, seconds: f64) -> Row {
        Row { what, runs: vec![seconds * 1000.0], unit: "ms", target: String::new() }
    }

    /// A one-run row of `value` in `unit`, with no target.
    fn once(what: impl Into<String>, value: f64, unit: &'static str) -> Row {
        Row { what: what.into(), runs: vec![value], unit, target: String::new() }
    }

    fn stats(&self) -> (f64, f64, f64) {
        let mut v = self.runs.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[v.len() / 2], v[0], v[v.len() - 1])
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn peak_rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn cpu_seconds(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn small() -> qdr_api::Interconnect {
    serde_json::from_value(json!({"metadata": {"name": "router-mesh", "namespace": "ns"},
        "spec": {"deploymentPlan": {"size": 3, "role": "interior", "placement": "Any"}}}))
    .unwrap()
}

/// Every list near its maxItems.
fn large() -> qdr_api::Interconnect {
    let listeners: Vec<Value> = (0..30)
        .map(|i| json!({"name": format!("l{i}"), "port": 10000 + i, "sslProfile": format!("p{}", i % 30)}))
        .collect();
    let conns = |base: i32, n: i32| {
        (0..n).map(|i| json!({"name": format!("c{}", base + i), "host": format!("h{i}.example"), "port": 20000 + base + i})).collect::<Vec<_>>()
    };
    let spec = json!({
        "deploymentPlan": {"size": 3},
        "listeners": listeners,
        "interRouterListeners": [{"port": 55671, "sslProfile": "p0"}],
        "edgeListeners": [{"port": 45672}],
        "sslProfiles": (0..30).map(|i| json!({"name": format!("p{i}"), "mutualAuth": i % 2 == 0})).collect::<Vec<_>>(),
        "connectors": conns(0, 60),
        "interRouterConnectors": conns(100, 60),
        "addresses": (0..250).map(|i| json!({"prefix": format!("a{i}"), "distribution": "closest"})).collect::<Vec<_>>(),
        "autoLinks": (0..250).map(|i| json!({"address": format!("q{i}"), "direction": "in", "connection": "c0"})).collect::<Vec<_>>(),
        "linkRoutes": (0..250).map(|i| json!({"prefix": format!("r{i}"), "direction": "out", "containerId": "broker"})).collect::<Vec<_>>(),
    });
    let ic: qdr_api::Interconnect =
        serde_json::from_value(json!({"metadata": {"name": "big", "namespace": "ns"}, "spec": spec}))
            .unwrap();
    assert!(
        qdr_api::validate(&qdr_api::defaults(&ic)).is_empty(),
        "{:?}",
        qdr_api::validate(&qdr_api::defaults(&ic))
    );
    ic
}

/// Nanoseconds per call of `f`, for a run of about 0.5 s.
fn per_call(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_millis(500) {
        f();
        n += 1;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn review(i: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": format!("00000000-0000-0000-0000-{i:012}"),
        "kind": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "kind": "Interconnect"},
        "resource": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "resource": "interconnects"},
        "name": "router-mesh", "namespace": "ns", "operation": "CREATE", "object": serde_json::to_value(small()).unwrap()}}))
    .unwrap()
}

/// Closed loop: `conns` connections sending as fast as answered for `dur`. Returns req/s
/// and the requests answered per CPU-second the server (process `server`) used meanwhile:
/// its throughput per core, whether or not this load generator kept it busy.
async fn saturate(
    client: &reqwest::Client,
    url: &str,
    conns: usize,
    dur: Duration,
    server: u32,
) -> (f64, f64) {
    let body = Arc::new(review(1));
    let cpu_before = cpu_seconds(server);
    let start = Instant::now();
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let (c, u, b) = (client.clone(), url.to_string(), body.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while start.elapsed() < dur {
                    if c.post(&u)
                        .body(b.as_ref().clone())
                        .send()
                        .await
                        .and_then(|r| r.error_for_status())
                        .is_ok()
                    {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let cpu = (cpu_seconds(server) - cpu_before).max(0.01);
    (total as f64 / start.elapsed().as_secs_f64(), total as f64 / cpu)
}

/// [`fixed_rate`] on a thread of its own running a single-threaded runtime (sends,
/// responses and the send timer on one thread: no hand-offs between the generator's threads
/// on its core count as webhook latency), with a client of its own trusting `ca_pem`.
fn fixed_rate_on_own_thread(
    ca_pem: &str,
    url: &str,
    rate: u64,
    dur: Duration,
) -> Result<(Vec<Duration>, u64), Box<dyn std::error::Error>> {
    let (ca_pem, url) = (ca_pem.to_string(), url.to_string());
    let run = std::thread::spawn(move || -> Result<(Vec<Duration>, u64), String> {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(async {
            let client = reqwest::Client::builder()
                .add_root_certificate(
                    reqwest::Certificate::from_pem(ca_pem.as_bytes()).map_err(|e| e.to_string())?,
                )
                .pool_max_idle_per_host(64)
                .build()
                .map_err(|e| e.to_string())?;
            // Warm the pool, so connection set-up is not measured.
            for _ in 0..8 {
                let _ = client.post(&url).body(review(0)).send().await;
            }
            Ok(fixed_rate(&client, &url, rate, dur).await)
        })
    });
    Ok(run.join().map_err(|_| "the load generator thread panicked")??)
}

/// Open loop at `rate` req/s for `dur`; latency measured from the scheduled send time (no
/// coordinated omission). Returns sorted latencies and the error count.
async fn fixed_rate(client: &reqwest::Client, url: &str, rate: u64, dur: Duration) -> (Vec<Duration>, u64) {
    let body = Arc::new(review(2));
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let start = tokio::time::Instant::now();
    let n = (dur.as_secs_f64() * rate as f64) as u64;
    let mut tasks = Vec::with_capacity(n as usize);
    for i in 0..n {
        let scheduled = start + interval * i as u32;
        // tokio's timer has a 1 ms resolution: sleep to just before the slot, then yield
        // until it, so the generator's own lateness does not count as webhook latency.
        tokio::time::sleep_until(scheduled - Duration::from_micros(1500)).await;
        while tokio::time::Instant::now() < scheduled {
            tokio::task::yield_now().await;
        }
        let (c, u, b) = (client.clone(), url.to_string(), body.clone());
        tasks.push(tokio::spawn(async move {
            let ok =
                c.post(&u).body(b.as_ref().clone()).send().await.and_then(|r| r.error_for_status()).is_ok();
            (scheduled.elapsed(), ok)
        }));
    }
    let mut lat = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (d, ok) = t.await.unwrap();
        lat.push(d);
        if !ok {
            errors += 1;
        }
    }
    lat.sort();
    (lat, errors)
}

async fn webhook_rows(
    rows: &mut Vec<Row>,
    runs: usize,
    bin_dir: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let pki = qdr_tests::Pki::new()?;
    let dir = tempfile::tempdir()?;
    let cert = pki.serving("127.0.0.1", &["127.0.0.1"])?;
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem)?;
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem)?;
    let port = free_port();
    // The webhook on CPU 0, this process (the load generator) on the others, when there
    // are two or more: the figures are the webhook's, per core, not the generator's.
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let pinned = cpus >= 2 && which("taskset");
    let mut cmd = if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", "0"]).arg(bin_dir.join("qdr-webhook"));
        c
    } else {
        Command::new(bin_dir.join("qdr-webhook"))
    };
    if pinned {
        pin_process(1..cpus);
    }
    // No API server here: the handler alone, without the SubjectAccessReviews of Secret
    // references (which need one; the API server group runs the webhook with them).
    cmd.env("RUST_LOG", "warn").args([
        "--authorize-secret-references=false",
        "--tls-mode=files",
        &format!("--tls-dir={}", dir.path().display()),
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--health-listen=127.0.0.1:{}", free_port()),
    ]);
    let p = Process::spawn("qdr-webhook", cmd, &dir.path().join("webhook.log"))?;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca_pem().as_bytes())?)
        .pool_max_idle_per_host(64)
        .build()?;
    let url_v = format!("https://127.0.0.1:{port}/validate");
    let url_m = format!("https://127.0.0.1:{port}/mutate");
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.post(&url_v).body(review(0)).send().await.is_err() {
        if Instant::now() > deadline {
            return Err(format!("webhook did not come up:\n{}", p.log_tail(20)).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each webhook's requests per CPU-second, for the ratio to the null webhook's.
    let mut ours_per_cpu: Vec<(&str, Vec<f64>)> = Vec::new();
    for (name, url) in [("validate", &url_v), ("mutate", &url_m)] {
        let (mut sat, mut per_cpu) = (Vec::new(), Vec::new());
        let mut p50s: Vec<Vec<f64>> = vec![Vec::new(); 6];
        for _ in 0..runs {
            let (rate, per_core) = saturate(&client, url, 32, Duration::from_secs(3), p.pid()).await;
            sat.push(rate);
            per_cpu.push(per_core);
            for (i, rate) in [1000u64, 2000].into_iter().enumerate() {
                let (lat, errors) =
                    fixed_rate_on_own_thread(pki.ca_pem(), url, rate, Duration::from_secs(3))?;
                if errors > 0 {
                    eprintln!("warning: {errors} failed requests at {rate} req/s on /{name}");
                }
                for (j, q) in [0.5, 0.99, 0.999].into_iter().enumerate() {
                    p50s[i * 3 + j].push(percentile(&lat, q).as_secs_f64() * 1000.0);
                }
            }
        }
        rows.push(Row {
            what: format!(
                "webhook /{name}: throughput at saturation (32 conns), {}",
                if pinned { "webhook on 1 core, load generator on the others" } else { "shared cores" }
            ),
            runs: sat,
            unit: "req/s",
            target: String::new(),
        });
        ours_per_cpu.push((name, per_cpu.clone()));
        rows.push(Row {
            what: format!("webhook /{name}: requests per CPU-second of the webhook at saturation (per core)"),
            runs: per_cpu,
            unit: "req/s",
            target: "≥ 35000".into(),
        });
        for (i, rate) in [1000, 2000].into_iter().enumerate() {
            for (j, q) in ["p50", "p99", "p99.9"].into_iter().enumerate() {
                let target = if rate == 2000 && q == "p99" { "≤ 1 ms" } else { "" };
                rows.push(Row {
                    what: format!("webhook /{name}: {q} latency at {rate} req/s"),
                    runs: p50s[i * 3 + j].clone(),
                    unit: "ms",
                    target: target.into(),
                });
            }
        }
    }
    rows.push(Row {
        what: "webhook peak RSS".into(),
        runs: vec![peak_rss_mib(p.pid())],
        unit: "MiB",
        target: "≤ 32".into(),
    });
    p.stop(Duration::from_secs(2));
    // The same load on the null webhook (same TLS and HTTP stack, no checks), on the same
    // core: what the stack and this load generator allow, the ceiling of the rows above.
    let null_port = free_port();
    let mut cmd = if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", "0"]).arg(bin_dir.join("qdr-null-webhook"));
        c
    } else {
        Command::new(bin_dir.join("qdr-null-webhook"))
    };
    cmd.arg(format!("127.0.0.1:{null_port}")).arg(dir.path().join("tls.crt")).arg(dir.path().join("tls.key"));
    let null = Process::spawn("qdr-null-webhook", cmd, &dir.path().join("null-webhook.log"))?;
    let null_url = format!("https://127.0.0.1:{null_port}/validate");
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.post(&null_url).body(review(0)).send().await.is_err() {
        if Instant::now() > deadline {
            return Err(format!("the null webhook did not come up:\n{}", null.log_tail(20)).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut sat, mut per_cpu) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (rate, per_core) = saturate(&client, &null_url, 32, Duration::from_secs(3), null.pid()).await;
        sat.push(rate);
        per_cpu.push(per_core);
    }
    rows.push(Row {
        what: "  the null webhook at saturation, same load (the stack's and this generator's ceiling)".into(),
        runs: sat,
        unit: "req/s",
        target: String::new(),
    });
    // The same figure as a share of what the stack allows on this machine: the absolute
    // target above assumes a core on which the null webhook does well over 35,000.
    let null_row = Row {
        what: "  the null webhook: requests per CPU-second at saturation".into(),
        runs: per_cpu,
        unit: "req/s",
        target: String::new(),
    };
    let null_median = null_row.stats().0;
    rows.push(null_row);
    for (name, ours) in ours_per_cpu {
        rows.push(Row {
            what: format!("  webhook /{name} ÷ the null webhook, requests per CPU-second"),
            runs: ours.iter().map(|o| o / null_median).collect(),
            unit: "×",
            target: String::new(),
        });
    }
    null.stop(Duration::from_secs(2));
    if pinned {
        pin_process(0..cpus);
    }
    Ok(())
}

fn which(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Sets the CPU affinity of every thread of this process (the tokio workers included).
fn pin_process(cpus: std::ops::Range<usize>) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
    for t in tasks.flatten() {
        let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else { continue };
        let _ = Command::new("taskset")
            .args(["-p", "-c", &format!("{}-{}", cpus.start, cpus.end - 1), &tid.to_string()])
            .output();
    }
}

fn interconnect_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    )
}

fn interconnects(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &interconnect_resource())
}

fn ic_obj(name: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}}}),
    )
    .unwrap()
}

/// [`ic_obj`] as the mutating webhook stores it: with every default
/// ([`qdr_api::defaults`]).
fn ic_defaulted(name: &str) -> DynamicObject {
    let raw: qdr_api::Interconnect =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}}}))
            .unwrap();
    let mut v = serde_json::to_value(qdr_api::defaults(&raw)).unwrap();
    v["apiVersion"] = json!("interconnectedcloud.github.io/v1alpha1");
    v["kind"] = json!("Interconnect");
    serde_json::from_value(v).unwrap()
}

async fn kubectl_ok(cp: &ControlPlane, args: &[&str]) {
    let out = cp.kubectl().args(args).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn api_server_rows(
    rows: &mut Vec<Row>,
    runs: usize,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = cp.client().await?;
    let with = cp.namespace("bench-webhook").await;
    let without = cp.namespace("bench-plain").await;
    kubectl_ok(cp, &["label", "ns", &with.name, "qdr-operator.test/webhook=bench"]).await;
    let system = cp.namespace("bench-system").await;
    let port = free_port();
    let health = free_port();
    // The null webhook: the same TLS stack, answers `allowed` at once, registered the same
    // way (one validating and one mutating configuration, by URL) for its own namespace.
    let null_ns = cp.namespace("bench-null").await;
    kubectl_ok(cp, &["label", "ns", &null_ns.name, "qdr-operator.test/webhook=null"]).await;
    let null_port = free_port();
    let pair = cp.issue_serving_cert(&["127.0.0.1"])?;
    let (crt, key) = (cp.dir().join("null-webhook.crt"), cp.dir().join("null-webhook.key"));
    std::fs::write(&crt, &pair.cert_pem)?;
    std::fs::write(&key, &pair.key_pem)?;
    let mut cmd = Command::new(bin_dir.join("qdr-null-webhook"));
    cmd.arg(format!("127.0.0.1:{null_port}")).arg(&crt).arg(&key);
    let null = Process::spawn("qdr-null-webhook", cmd, &cp.dir().join("null-webhook.log"))?;
    let rules = json!([{"apiGroups": ["interconnectedcloud.github.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["interconnects"]}]);
    let entry = |n: &str, label: &str, port: u16, path: &str| {
        json!({"name": n, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
        "rules": rules, "namespaceSelector": {"matchLabels": {"qdr-operator.test/webhook": label}}, "clientConfig": {"url": format!("https://127.0.0.1:{port}/{path}")}})
    };
    let ca_bundle = base64::engine::Engine::encode(&base64::engine::general_purpose::STANDARD, cp.ca_pem());
    let null_entry = |n: &str, path: &str| {
        let mut e = entry(n, "null", null_port, path);
        e["clientConfig"]["caBundle"] = json!(ca_bundle);
        e
    };
    let configs = [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench-v"}, "webhooks": [entry("v.bench.io", "bench", port, "validate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "bench-m"}, "webhooks": [entry("m.bench.io", "bench", port, "mutate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench-null-v"}, "webhooks": [null_entry("v.null.bench.io", "validate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "bench-null-m"}, "webhooks": [null_entry("m.null.bench.io", "mutate")]}),
    ];
    for o in configs {
        let mut child = cp
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()?;
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), o.to_string().as_bytes())?;
        child.wait()?;
    }
    // As its ServiceAccount, with `deploy/`'s RBAC for these configurations.
    let install =
        Install { validating: "bench-v".into(), mutating: "bench-m".into(), ..Install::new(&system.name) };
    let ids = cp.install_rbac(&install)?;
    let mut cmd = Command::new(bin_dir.join("qdr-webhook"));
    cmd.env("KUBECONFIG", &ids.webhook).env("RUST_LOG", "warn").args([
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--health-listen=127.0.0.1:{health}"),
        &format!("--namespace={}", system.name),
        "--extra-san=127.0.0.1",
        "--validating-config=bench-v",
        "--mutating-config=bench-m",
        "--check-interval=1s",
    ]);
    let wh = Process::spawn("qdr-webhook-bench", cmd, &cp.dir().join("webhook-bench.log"))?;
    let api_with = interconnects(&client, &with.name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe =
            api_with.create(&PostParams { dry_run: true, ..Default::default() }, &ic_obj("probe")).await;
        if probe.is_ok_and(|o| o.data["spec"]["users"] == "probe-users") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("webhooks never answered:\n{}", wh.log_tail(20)).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The API server calls the null webhooks once their configurations reached it: its
    // metrics then name them.
    let api_null = interconnects(&client, &null_ns.name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let _ = api_null.create(&PostParams { dry_run: true, ..Default::default() }, &ic_obj("probe")).await;
        if metrics_text(&client).await.contains("m.null.bench.io") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the null webhooks were never called:\n{}", null.log_tail(20)).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let api_without = interconnects(&client, &without.name);
    let webhook_metrics = || async move {
        match reqwest::get(format!("http://127.0.0.1:{health}/metrics")).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    let connections_before = webhook_connections(&webhook_metrics().await);
    let defaulted_ns = cp.namespace("bench-defaulted").await;
    let api_defaulted = interconnects(&client, &defaulted_ns.name);
    // Four variants, interleaved so all see the same machine load: through both webhooks;
    // no webhook, the same request; no webhook, the object the webhooks would store (its
    // defaults written by the client), which isolates the cost of the calls themselves from
    // the cost of storing a larger object; through both null webhooks, the same request.
    let apis = [&api_with, &api_without, &api_defaulted, &api_null];
    let q =
        create_latencies(apis, runs, "c", |name, k| if k == 2 { ic_defaulted(name) } else { ic_obj(name) })
            .await?;
    // The cluster admin's calls (and the probes before them) only: the identities' rows
    // below time theirs apart.
    let apiserver_view = histogram_means(&metrics_text(&client).await, API_SERVER_WEBHOOK_TIME, "name");
    let own_view = histogram_means(&webhook_metrics().await, WEBHOOK_HANDLER_TIME, "operation");
    let identity_rows = identity_rows(
        cp,
        [&with.name, &without.name, &defaulted_ns.name, &null_ns.name],
        runs,
        &format!("http://127.0.0.1:{health}/metrics"),
    )
    .await?;
    let metrics = webhook_metrics().await;
    let connections = webhook_connections(&metrics) - connections_before;
    for line in metrics.lines().filter(|l| l.starts_with("qdr_webhook_connections_total")) {
        eprintln!("webhook connections since it started (probes included): {line}");
    }
    let diff = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a - b).collect::<Vec<f64>>();
    for (k, label) in [
        "both webhooks",
        "no webhook",
        "no webhook, object with the webhooks' defaults",
        "both null webhooks (allowed at once)",
    ]
    .into_iter()
    .enumerate()
    {
        for (j, p) in ["p50", "p99"].into_iter().enumerate() {
            rows.push(Row {
                what: format!("create through the API server, {label}: {p}"),
                runs: q[k][j].clone(),
                unit: "ms",
                target: String::new(),
            });
        }
    }
    rows.push(Row {
        what: "  added by the webhook calls at p50 (vs the same stored object)".into(),
        runs: diff(&q[0][0], &q[2][0]),
        unit: "ms",
        target: "≤ 1".into(),
    });
    rows.push(Row {
        what: "  added by the webhook calls at p99 (vs the same stored object)".into(),
        runs: diff(&q[0][1], &q[2][1]),
        unit: "ms",
        target: "≤ 3".into(),
    });
    rows.push(Row {
        what: "  added by the webhooks and their defaults at p50 (vs the bare request)".into(),
        runs: diff(&q[0][0], &q[1][0]),
        unit: "ms",
        target: String::new(),
    });
    for (j, p) in ["p50", "p99"].into_iter().enumerate() {
        rows.push(Row {
            what: format!("  added by the null webhook calls at {p} (vs the bare request)"),
            runs: diff(&q[3][j], &q[1][j]),
            unit: "ms",
            target: String::new(),
        });
    }
    for (j, p) in ["p50", "p99"].into_iter().enumerate() {
        let ours = diff(&q[0][j], &q[2][j]);
        let null = diff(&q[3][j], &q[1][j]);
        rows.push(Row {
            what: format!("  added by our webhooks ÷ added by the null webhooks, {p}"),
            runs: ours.iter().zip(&null).map(|(a, b)| a / b).collect(),
            unit: "×",
            target: "≤ 1.15".into(),
        });
    }
    rows.push(Row {
        what: "  ratio with / without (same stored object, p50)".into(),
        runs: q[0][0].iter().zip(&q[2][0]).map(|(a, b)| a / b).collect(),
        unit: "×",
        target: String::new(),
    });
    rows.extend(apiserver_view.into_iter().map(|(name, mean)| {
        Row::mean_ms(format!("  one call of {name} as the API server times it (mean, cluster admin)"), mean)
    }));
    rows.extend(own_view.into_iter().map(|(name, mean)| {
        Row::mean_ms(format!("  one /{name} as the webhook times its handler (mean, cluster admin)"), mean)
    }));
    rows.extend(identity_rows);
    rows.push(Row {
        what: format!("  TLS connections (handshakes) the API server opened for {} reviews", runs * 150 * 2),
        runs: vec![connections],
        unit: "",
        target: "≤ 2 (connections reused)".into(),
    });
    wh.stop(Duration::from_secs(2));
    null.stop(Duration::from_secs(2));
    Ok(())
}

/// The API server's histogram of one webhook call (from sending the review to having
/// applied its answer), by webhook `name`.
const API_SERVER_WEBHOOK_TIME: &str = "apiserver_admission_webhook_admission_duration_seconds";

/// Our webhook's histogram of one review as its handler times it, by `operation`.
const WEBHOOK_HANDLER_TIME: &str = "qdr_webhook_request_duration_seconds";

/// The API server's `/metrics`.
async fn metrics_text(client: &kube::Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).expect("static request");
    client.request_text(req).await.unwrap_or_default()
}

/// `sum / count` of histogram `name` in a Prometheus text exposition, by the value of
/// label `by` (summed over the other labels).
fn histogram_means(text: &str, name: &str, by: &str) -> Vec<(String, f64)> {
    means_between(&Default::default(), &histogram_sums(text, name, by))
}

/// `(sum, count)` of histogram `name` in a Prometheus text exposition, by the value of
/// label `by` (summed over the other labels).
fn histogram_sums(text: &str, name: &str, by: &str) -> std::collections::BTreeMap<String, (f64, f64)> {
    let mut acc: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for line in text.lines() {
        let (is_sum, rest) = if let Some(r) = line.strip_prefix(&format!("{name}_sum{{")) {
            (true, r)
        } else if let Some(r) = line.strip_prefix(&format!("{name}_count{{")) {
            (false, r)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let key = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{by}=\"")))
            .map(|v| v.trim_end_matches('"').to_string())
            .unwrap_or_default();
        let e = acc.entry(key).or_default();
        if is_sum {
            e.0 += value;
        } else {
            e.1 += value;
        }
    }
    acc
}

/// The mean of each histogram over what was observed between two [`histogram_sums`].
fn means_between(
    before: &std::collections::BTreeMap<String, (f64, f64)>,
    after: &std::collections::BTreeMap<String, (f64, f64)>,
) -> Vec<(String, f64)> {
    after
        .iter()
        .map(|(k, &(s, n))| {
            let (s0, n0) = before.get(k).copied().unwrap_or_default();
            (k.clone(), (s - s0, n - n0))
        })
        .filter(|(_, (_, n))| *n > 0.0)
        .map(|(k, (s, n))| (k, s / n))
        .collect()
}

/// `qdr_webhook_connections_total` summed over its labels, in the webhook's exposition.
fn webhook_connections(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("qdr_webhook_connections_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The controller's `User-Agent` prefix (what the audit log is filtered by).
const CONTROLLER_AGENT: &str = "qdr-controller/";

/// Requests the controller made so far, as the audit log counts them.
fn controller_requests(cp: &ControlPlane) -> Vec<qdr_tests::AuditEvent> {
    cp.requests_by(CONTROLLER_AGENT)
}

/// `verb resource[/subresource]` → count and the API server's mean time for one (from
/// receiving it to answering, audit timestamps), largest count first.
fn breakdown(events: &[qdr_tests::AuditEvent]) -> Vec<(String, usize, Duration)> {
    let mut by: std::collections::BTreeMap<String, (usize, Duration)> = Default::default();
    for e in events {
        let what = match &e.object_ref {
            Some(r) if !r.subresource.is_empty() => format!("{} {}/{}", e.verb, r.resource, r.subresource),
            Some(r) => format!("{} {}", e.verb, r.resource),
            None => format!("{} {}", e.verb, e.request_uri),
        };
        let entry = by.entry(what).or_default();
        entry.0 += 1;
        entry.1 += e.latency().unwrap_or_default();
    }
    let mut v: Vec<_> = by.into_iter().map(|(w, (n, total))| (w, n, total / n.max(1) as u32)).collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}

/// Starts the release controller watching `ns`, as the `qdr-controller` ServiceAccount of
/// `lease_ns` with `deploy/`'s RBAC; returns it and that ServiceAccount's kubeconfig.
fn start_controller(
    cp: &ControlPlane,
    bin_dir: &Path,
    ns: &str,
    lease_ns: &str,
    log: &str,
) -> Result<(Process, PathBuf), Box<dyn std::error::Error>> {
    let lease = format!("bench-{ns}");
    let ids = cp.install_rbac(&Install { lease: lease.clone(), ..Install::new(lease_ns) })?;
    let mut cmd = Command::new(bin_dir.join("qdr-controller"));
    cmd.env("KUBECONFIG", &ids.controller).env("RUST_LOG", "warn").args([
        &format!("--lease-namespace={lease_ns}"),
        "--identity=bench",
        &format!("--lease-name={lease}"),
        &format!("--watch-namespace={ns}"),
        &format!("--health-listen=127.0.0.1:{}", free_port()),
        // Simulated routers: nobody answers at their addresses.
        "--observe-mesh=off",
    ]);
    Ok((Process::spawn("qdr-controller-bench", cmd, &cp.dir().join(log))?, ids.controller))
}

/// Creates `n` Interconnects `ic-0` … in `api`, 16 at a time.
async fn create_interconnects(api: &Api<DynamicObject>, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let creates: Vec<_> = (0..n)
        .map(|i| {
            let (api, sem) = (api.clone(), sem.clone());
            tokio::spawn(async move {
                let _p = sem.acquire().await.unwrap();
                api.create(&PostParams::default(), &ic_obj(&format!("ic-{i}"))).await.map(|_| ())
            })
        })
        .collect();
    for c in creates {
        c.await??;
    }
    Ok(())
}

/// Waits until `want` Interconnects of `api` report `observedGeneration` 1 (at most
/// `limit`), following them with a watch (polling lists of hundreds of objects would load
/// the API server being measured); returns when the first one did and when all did, from
/// `start`.
async fn converged(
    api: &Api<DynamicObject>,
    want: usize,
    start: Instant,
    limit: Duration,
    ctl: &Process,
) -> Result<(Duration, Duration), Box<dyn std::error::Error>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let mut events = watcher(api.clone(), watcher::Config::default()).applied_objects().boxed();
    let mut seen: std::collections::BTreeMap<String, Value> = Default::default();
    let count = |seen: &std::collections::BTreeMap<String, Value>| {
        seen.values().filter(|status| status["observedGeneration"] == 1).count()
    };
    let mut first = None;
    let deadline = tokio::time::Instant::from_std(start + limit);
    loop {
        let done = count(&seen);
        if done > 0 && first.is_none() {
            first = Some(start.elapsed());
        }
        if done >= want {
            return Ok((first.unwrap_or_default(), start.elapsed()));
        }
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(o))) => {
                seen.insert(o.metadata.name.clone().unwrap_or_default(), o.data["status"].clone());
            }
            Ok(Some(Err(e))) => eprintln!("warning: Interconnect watch: {e}"),
            Ok(None) => return Err("the Interconnect watch ended".into()),
            Err(_) => {
                let stuck: Vec<String> = seen
                    .iter()
                    .filter(|(_, status)| status["observedGeneration"] != 1)
                    .take(3)
                    .map(|(name, status)| format!("{name} {status}"))
                    .collect();
                return Err(format!(
                    "only {done}/{want} converged in {limit:?}; e.g. {stuck:?}\ncontroller log:\n{}",
                    ctl.log_tail(30)
                )
                .into());
            }
        }
    }
}

/// One convergence run's figures.
struct Convergence {
    /// The namespace the Interconnects and their children are in.
    namespace: String,
    /// The controller's ServiceAccount kubeconfig.
    kubeconfig: PathBuf,
    seconds: f64,
    /// Requests the controller made until all converged (and 2 s more).
    requests: usize,
    requests_per_ic: f64,
    change: Vec<Duration>,
    rss: f64,
    cpu: f64,
    server_cpu: f64,
    breakdown: Vec<(String, usize, Duration)>,
}

/// `n` Interconnects created at once, then the controller started: time until all
/// converged, the controller's requests per Interconnect (audit log, by user agent), then
/// `changes` spec changes one after the other, each timed until the Deployment shows it
/// (seen through a watch).
async fn converge(
    cp: &'static ControlPlane,
    bin_dir: &Path,
    n: usize,
    changes: usize,
    label: &str,
) -> Result<Convergence, Box<dyn std::error::Error>> {
    let client = cp.client().await?;
    let ns = cp.namespace(label).await;
    let system = cp.namespace("bench-ctl").await;
    let api = interconnects(&client, &ns.name);
    create_interconnects(&api, n).await?;
    let before = controller_requests(cp).len();
    let server_cpu = || cp.server_pids().iter().map(|p| cpu_seconds(*p)).sum::<f64>();
    let server_cpu_before = server_cpu();
    let start = Instant::now();
    let (ctl, kubeconfig) =
        start_controller(cp, bin_dir, &ns.name, &system.name, &format!("controller-{label}.log"))?;
    let limit = Duration::from_secs(60 + n as u64 / 5);
    let (_, all) = converged(&api, n, start, limit, &ctl).await?;
    let server_cpu = server_cpu() - server_cpu_before;
    // Let the last status writes' echoes arrive, so what they cause is counted too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let made: Vec<_> = controller_requests(cp).into_iter().skip(before).collect();
    if made.is_empty() {
        return Err(format!("the audit log shows no request of the controller ({label})").into());
    }

    let deps: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), &ns.name);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn(async move {
        use futures::StreamExt;
        use kube::runtime::WatchStreamExt;
        let mut events =
            kube::runtime::watcher(deps, kube::runtime::watcher::Config::default()).applied_objects().boxed();
        while let Some(Ok(d)) = events.next().await {
            let replicas = d.spec.as_ref().and_then(|s| s.replicas);
            if tx.send((d.metadata.name.unwrap_or_default(), replicas, Instant::now())).is_err() {
                break;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await; // the watch's initial list
    while rx.try_recv().is_ok() {}
    let mut change = Vec::new();
    for i in 0..changes.min(n) {
        let name = format!("ic-{i}");
        let t = Instant::now();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deploymentPlan": {"size": 2}}})),
        )
        .await?;
        let seen = loop {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some((n, Some(2), at))) if n == name => break at,
                Ok(Some(_)) => continue,
                _ => return Err(format!("{name}: the Deployment never showed 2 replicas").into()),
            }
        };
        change.push(seen.duration_since(t));
    }
    watch.abort();
    change.sort();
    let run = Convergence {
        namespace: ns.name.clone(),
        kubeconfig,
        seconds: all.as_secs_f64(),
        requests: made.len(),
        requests_per_ic: made.len() as f64 / n as f64,
        change,
        rss: peak_rss_mib(ctl.pid()),
        cpu: cpu_seconds(ctl.pid()),
        server_cpu,
        breakdown: breakdown(&made),
    };
    ctl.stop(Duration::from_secs(5));
    Ok(run)
}

/// The kinds the controller writes for an Interconnect, as `(group, version, kind, plural)`.
const CHILD_KINDS: &[(&str, &str, &str, &str)] = &[
    ("", "v1", "ServiceAccount", "serviceaccounts"),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("apps", "v1", "Deployment", "deployments"),
    ("", "v1", "Service", "services"),
    ("networking.k8s.io", "v1", "Ingress", "ingresses"),
];

/// The API server's own write throughput for the controller's mix: every child the
/// controller wrote in `from` (labelled ours) is written again into a new namespace by a
/// plain client with no controller logic, as the controller's ServiceAccount (`kubeconfig`:
/// so the API server checks its Roles and RoleBindings for escalation the same way), or as
/// the cluster admin (`None`: no escalation checks, which `system:masters` skips),
/// [`qdr_controller::runtime::CONCURRENCY`] at a time, the way the controller writes them
/// (server-side apply, `POST` for Secrets), plus one status write per Interconnect (to
/// copies made beforehand, not timed). Returns requests per second.
async fn plain_throughput(
    cp: &'static ControlPlane,
    from: &str,
    kubeconfig: Option<&Path>,
) -> Result<f64, Box<dyn std::error::Error>> {
    let admin = cp.client().await?;
    let client = match kubeconfig {
        Some(path) => kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(path)?,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?,
        )?,
        None => admin.clone(),
    };
    let to = cp.namespace("bench-plain-writes").await;
    let mut writes: Vec<(ApiResource, Value)> = Vec::new();
    for (group, version, kind, plural) in CHILD_KINDS {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let lp = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=qdr-operator");
        for o in Api::<DynamicObject>::namespaced_with(client.clone(), from, &ar).list(&lp).await?.items {
            let mut v = serde_json::to_value(&o)?;
            let meta = json!({"name": v["metadata"]["name"], "labels": v["metadata"]["labels"],
                              "annotations": v["metadata"]["annotations"]});
            v["metadata"] = meta;
            if let Some(m) = v.as_object_mut() {
                m.remove("status");
            }
            if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("clusterIP"); // allocated by the API server
                spec.remove("clusterIPs");
            }
            v["apiVersion"] = json!(ar.api_version);
            v["kind"] = json!(kind);
            writes.push((ar.clone(), v));
        }
    }
    let ics = interconnects(&admin, from);
    let copies = interconnects(&client, &to.name);
    let mut statuses = Vec::new();
    for ic in ics.list(&Default::default()).await?.items {
        let name = ic.metadata.name.clone().unwrap_or_default();
        interconnects(&admin, &to.name).create(&PostParams::default(), &ic_obj(&name)).await?;
        statuses.push((name, ic.data["status"].clone()));
    }
    let total = writes.len() + statuses.len();
    let sem = Arc::new(tokio::sync::Semaphore::new(usize::from(qdr_controller::runtime::CONCURRENCY)));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for (ar, obj) in writes {
        let (client, ns, sem) = (client.clone(), to.name.clone(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            let api = Api::<DynamicObject>::namespaced_with(client, &ns, &ar);
            let obj: DynamicObject = serde_json::from_value(obj)?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            if ar.kind == "Secret" {
                api.create(&PostParams::default(), &obj).await?;
            } else {
                api.patch(&name, &PatchParams::apply("bench-plain").force(), &Patch::Apply(&obj)).await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for (name, status) in statuses {
        let (api, sem) = (copies.clone(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
                .await?;
            Ok(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// What each of the controller's stores keeps per Interconnect, as JSON bytes (the size of
/// what it holds serialized, an approximation of its memory): every kind the controller
/// watches, listed from namespace `ns` of `n` converged Interconnects and cut the way its
/// store cuts it (`controller/src/cache/meta_store.rs`): the Interconnects without
/// `managedFields`; for every child, the name, namespace, `resourceVersion`, `generation`,
/// the labels lookups select by and the controller owner reference (a Secret: every owner
/// reference, the rotation-step annotation, its type and data; a workload: replicas, the pod
/// template's annotations, the status without conditions).
async fn store_bytes(
    cp: &'static ControlPlane,
    ns: &str,
    n: usize,
) -> Result<Vec<(String, f64)>, Box<dyn std::error::Error>> {
    const SELECTED: &[&str] =
        &["interconnect_cr", "app.kubernetes.io/managed-by", "application", "qdr-operator.io/credentials"];
    let client = cp.client().await?;
    let mut out = Vec::new();
    let ic_kind = ("interconnectedcloud.github.io", "v1alpha1", "Interconnect", "interconnects");
    for (group, version, kind, plural) in CHILD_KINDS.iter().chain([&ic_kind]) {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let mut lp = kube::api::ListParams::default();
        if *kind != "Interconnect" {
            lp = lp.labels("app.kubernetes.io/managed-by=qdr-operator");
        }
        let mut bytes = 0usize;
        for o in Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar).list(&lp).await?.items {
            let mut v = serde_json::to_value(&o)?;
            if *kind == "Interconnect" {
                if let Some(m) = v["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
                bytes += serde_json::to_vec(&v)?.len();
                continue;
            }
            let m = &v["metadata"];
            let labels: serde_json::Map<String, Value> = (m["labels"].as_object().into_iter().flatten())
                .filter(|(k, _)| SELECTED.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let owners: Vec<Value> = (m["ownerReferences"].as_array().into_iter().flatten())
                .filter(|r| *kind == "Secret" || r["controller"] == true)
                .cloned()
                .collect();
            let mut kept = json!({"metadata": {"name": m["name"], "namespace": m["namespace"],
                "resourceVersion": m["resourceVersion"], "generation": m["generation"],
                "labels": labels, "ownerReferences": owners}});
            match *kind {
                "Secret" => {
                    kept["metadata"]["annotations"] = json!({"qdr-operator.io/ca-rotation-step-at": m["annotations"]["qdr-operator.io/ca-rotation-step-at"]});
                    kept["type"] = v["type"].take();
                    kept["data"] = v["data"].take();
                }
                "Deployment" => {
                    kept["spec"] = json!({"replicas": v["spec"]["replicas"],
                        "template": {"metadata": {"annotations": v["spec"]["template"]["metadata"]["annotations"]}}});
                    if let Some(st) = v["status"].as_object_mut() {
                        st.remove("conditions");
                    }
                    kept["status"] = v["status"].take();
                }
                _ => {}
            }
            bytes += serde_json::to_vec(&kept)?.len();
        }
        out.push((kind.to_string(), bytes as f64 / n as f64));
    }
    Ok(out)
}

/// Interconnects of the large convergence run.
const BIG: usize = 2000;

async fn convergence_rows(
    rows: &mut Vec<Row>,
    runs: usize,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    const N: usize = 500;
    let (mut all, mut requests, mut p50, mut p99, mut rss, mut cpu, mut server) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut throughput, mut closeness, mut as_admin) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let c = converge(cp, bin_dir, N, 50, &format!("bench-converge-{run}")).await?;
        let plain = plain_throughput(cp, &c.namespace, Some(&c.kubeconfig)).await?;
        throughput.push(plain);
        as_admin.push(plain_throughput(cp, &c.namespace, None).await?);
        closeness.push(c.seconds / (c.requests as f64 / plain));
        eprintln!(
            "run {run}: {N} converged in {:.1} s, {:.2} requests each; the plain client: {plain:.0} requests/s",
            c.seconds, c.requests_per_ic
        );
        for (what, count, mean) in &c.breakdown {
            eprintln!("  {what}: {count}, {:.1} ms each (API server)", mean.as_secs_f64() * 1000.0);
        }
        all.push(c.seconds);
        requests.push(c.requests_per_ic);
        p50.push(percentile(&c.change, 0.5).as_secs_f64() * 1000.0);
        p99.push(percentile(&c.change, 0.99).as_secs_f64() * 1000.0);
        rss.push(c.rss);
        cpu.push(c.cpu);
        server.push(c.server_cpu / c.seconds);
    }
    rows.push(Row {
        what: format!("controller: {N} Interconnects created at once, all converged"),
        runs: all,
        unit: "s",
        target: "≤ 9".into(),
    });
    rows.push(Row {
        what: format!("controller: API requests per converged Interconnect ({N}, audit log)"),
        runs: requests,
        unit: "",
        target: "≤ 15".into(),
    });
    rows.push(Row {
        what: format!(
            "  the API server's own write throughput, the same writes by a plain client ({} at a time)",
            qdr_controller::runtime::CONCURRENCY
        ),
        runs: throughput,
        unit: "req/s",
        target: String::new(),
    });
    rows.push(Row {
        what: "  the same writes as the cluster admin (no escalation checks of Roles and RoleBindings)"
            .into(),
        runs: as_admin,
        unit: "req/s",
        target: String::new(),
    });
    rows.push(Row {
        what: "  converge time ÷ the controller's requests at that throughput (1 = the server's limit)"
            .into(),
        runs: closeness,
        unit: "×",
        target: String::new(),
    });
    rows.push(Row {
        what: "controller: spec change → updated child, p50 (50 changes)".into(),
        runs: p50,
        unit: "ms",
        target: "≤ 100".into(),
    });
    rows.push(Row {
        what: "controller: spec change → updated child, p99 (50 changes)".into(),
        runs: p99,
        unit: "ms",
        target: "≤ 300".into(),
    });
    rows.push(Row {
        what: "controller peak RSS (500)".into(),
        runs: rss,
        unit: "MiB",
        target: "≤ 48".into(),
    });
    rows.push(Row {
        what: "controller CPU time for the whole run (500)".into(),
        runs: cpu,
        unit: "s",
        target: String::new(),
    });
    rows.push(Row {
        what: "  kube-apiserver + etcd CPU while converging (cores busy of the machine's)".into(),
        runs: server,
        unit: "cores",
        target: String::new(),
    });

    big_convergence_rows(rows, bin_dir, cp).await
}

/// One convergence of [`BIG`] Interconnects: its time, requests, the API server's CPU, the
/// controller's peak RSS and what each store keeps per Interconnect
/// (`QDR_BENCH_ONLY=controller-2000` runs only this).
async fn big_convergence_rows(
    rows: &mut Vec<Row>,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    let c = converge(cp, bin_dir, BIG, 0, "bench-converge-big").await?;
    let stores = store_bytes(cp, &c.namespace, BIG).await?;
    rows.push(Row {
        what: format!("controller: {BIG} Interconnects created at once, all converged"),
        runs: vec![c.seconds],
        unit: "s",
        target: "≤ 36".into(),
    });
    rows.push(Row {
        what: format!("controller: API requests per converged Interconnect ({BIG})"),
        runs: vec![c.requests_per_ic],
        unit: "",
        target: "≤ 15".into(),
    });
    rows.push(Row {
        what: format!("  kube-apiserver + etcd CPU while converging {BIG}"),
        runs: vec![c.server_cpu / c.seconds],
        unit: "cores",
        target: String::new(),
    });
    rows.push(Row {
        what: format!("controller peak RSS ({BIG})"),
        runs: vec![c.rss],
        unit: "MiB",
        target: "≤ 96".into(),
    });
    for (kind, bytes) in stores {
        rows.push(Row {
            what: format!("  {kind} store per Interconnect ({BIG}; JSON bytes of what it keeps)"),
            runs: vec![bytes],
            unit: "B",
            target: String::new(),
        });
    }
    Ok(())
}

/// Controller RSS and start-to-first-reconcile over 50 Interconnects, without and then with
/// 5,000 unrelated Secrets and 5,000 unrelated ConfigMaps (4 KiB of data each, no labels)
/// in the watched namespace.
async fn unrelated_rows(
    rows: &mut Vec<Row>,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    const N: usize = 50;
    const EACH: usize = 5000;
    let client = cp.client().await?;
    let ns = cp.namespace("bench-unrelated").await;
    let system = cp.namespace("bench-ctl").await;
    let api = interconnects(&client, &ns.name);
    create_interconnects(&api, N).await?;
    let measure = |log: &'static str| {
        let (ns, system, api) = (ns.name.clone(), system.name.clone(), api.clone());
        async move {
            let start = Instant::now();
            let (ctl, _) = start_controller(cp, bin_dir, &ns, &system, log)?;
            let (first, _) = converged(&api, N, start, Duration::from_secs(120), &ctl).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let rss = peak_rss_mib(ctl.pid());
            ctl.stop(Duration::from_secs(5));
            // Back to unreconciled, for the second start.
            Ok::<_, Box<dyn std::error::Error>>((first.as_secs_f64() * 1000.0, rss))
        }
    };
    let (first_without, rss_without) = measure("controller-unrelated-0.log").await?;
    let data = "x".repeat(4096);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns.name);
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..EACH {
        let (s, c, sem, data) = (secrets.clone(), config_maps.clone(), sem.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            let name = format!("unrelated-{i}");
            let secret: k8s_openapi::api::core::v1::Secret =
                serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"data": data}}))
                    .unwrap();
            let cm: k8s_openapi::api::core::v1::ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}, "data": {"data": data}})).unwrap();
            s.create(&PostParams::default(), &secret).await?;
            c.create(&PostParams::default(), &cm).await.map(|_| ())
        }));
    }
    for t in tasks {
        t.await??;
    }
    // Status cleared, so the second start reconciles all of them again.
    for i in 0..N {
        api.patch_status(&format!("ic-{i}"), &PatchParams::default(), &Patch::Merge(json!({"status": null})))
            .await?;
    }
    let (first_with, rss_with) = measure("controller-unrelated-1.log").await?;
    rows.push(Row::once(format!("controller peak RSS, {N} Interconnects alone"), rss_without, "MiB"));
    rows.push(Row {
        what: format!(
            "controller peak RSS, {N} Interconnects + {EACH} Secrets + {EACH} ConfigMaps (4 KiB, unrelated)"
        ),
        runs: vec![rss_with],
        unit: "MiB",
        target: String::new(),
    });
    rows.push(Row {
        what: "  RSS growth from the unrelated objects".into(),
        runs: vec![rss_with - rss_without],
        unit: "MiB",
        target: "≤ 5".into(),
    });
    rows.push(Row {
        what: "controller start → first Interconnect reconciled, alone".into(),
        runs: vec![first_without],
        unit: "ms",
        target: String::new(),
    });
    rows.push(Row::once(
        "controller start → first Interconnect reconciled, with the unrelated objects",
        first_with,
        "ms",
    ));
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runs: usize = std::env::var("QDR_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    // The release binaries `make bench` builds beside this one.
    let bin_dir = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(qdr_tests::images::bin_dir);
    let mut rows = Vec::new();

    for (label, ic) in [("small (3-router example)", small()), ("large (every list near maxItems)", large())]
    {
        let mut dv = Vec::new();
        let mut render = Vec::new();
        let effective = qdr_api::defaults(&ic);
        for _ in 0..runs {
            dv.push(
                per_call(|| {
                    let d = qdr_api::defaults(std::hint::black_box(&ic));
                    std::hint::black_box(qdr_api::validate(&d));
                }) / 1000.0,
            );
            render.push(
                per_call(|| {
                    std::hint::black_box(qdr_controller_render(&effective));
                }) / 1000.0,
            );
        }
        rows.push(Row {
            what: format!("defaults + validate, {label}"),
            runs: dv,
            unit: "µs",
            target: String::new(),
        });
        rows.push(Row {
            what: format!("router config rendering, {label}"),
            runs: render,
            unit: "µs",
            target: String::new(),
        });
    }

    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let only = std::env::var("QDR_BENCH_ONLY").unwrap_or_default();
        if only.is_empty() || only == "webhook" {
            webhook_rows(&mut rows, runs, &bin_dir).await?;
        }
        if only == "webhook" {
            return Ok(());
        }
        let cp: &'static ControlPlane = Box::leak(Box::new(
            ControlPlane::start(Options {
                state_dir: None,
                controller_manager: false,
                nodes: 0,
                audit: true,
                webhook_client_cert: false,
                real_nodes: 0,
            })
            .await?,
        ));
        cp.install_crd().await;
        if only.is_empty() || only == "apiserver" {
            api_server_rows(&mut rows, runs, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "controller" {
            convergence_rows(&mut rows, runs, &bin_dir, cp).await?;
        }
        if only == "controller-2000" {
            big_convergence_rows(&mut rows, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "unrelated" {
            unrelated_rows(&mut rows, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "day-two" {
            day_two_rows(&mut rows).await?;
        }
        if only.is_empty() || only == "mesh-2000" {
            mesh_scale_rows(&mut rows, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "mesh" {
            mesh_rows(&mut rows, runs).await?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;

    println!(
        "\nqdr-operator benchmarks: {} cores, {runs} runs per figure (median [min – max]).",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    println!(
        "Warning: absolute figures on a shared machine are noisy; here the load generator, the webhook, the API server and etcd share the same cores.\n"
    );
    println!("| benchmark | median | min – max | unit | target |\n|---|---:|---:|---|---|");
    for r in &rows {
        let (m, lo, hi) = r.stats();
        println!("| {} | {m:.3} | {lo:.3} – {hi:.3} | {} | {} |", r.what, r.unit, r.target);
    }
    println!(
        "\nThe Go operator is not run side by side: the Go module proxy answers 403 for every version of \
         github.com/interconnectedcloud/qdr-operator, so it cannot be built here."
    );
    Ok(())
}

/// `runs` rounds of 150 creates into each of the four `apis`, interleaved so all see the same
/// machine load: object `<prefix>-<run>-<i>` made by `object(name, k)` for `apis[k]`. Per
/// api, each round's p50 and p99 in ms (`[k][0]`, `[k][1]`).
async fn create_latencies(
    apis: [&Api<DynamicObject>; 4],
    runs: usize,
    prefix: &str,
    object: impl Fn(&str, usize) -> DynamicObject,
) -> Result<[[Vec<f64>; 2]; 4], kube::Error> {
    let mut q: [[Vec<f64>; 2]; 4] = Default::default();
    for run in 0..runs {
        let mut lat: [Vec<Duration>; 4] = Default::default();
        for i in 0..150 {
            let name = format!("{prefix}-{run}-{i}");
            for (k, api) in apis.into_iter().enumerate() {
                let obj = object(&name, k);
                let t = Instant::now();
                api.create(&PostParams::default(), &obj).await?;
                lat[k].push(t.elapsed());
            }
        }
        for (k, l) in lat.iter_mut().enumerate() {
            l.sort();
            q[k][0].push(percentile(l, 0.5).as_secs_f64() * 1000.0);
            q[k][1].push(percentile(l, 0.99).as_secs_f64() * 1000.0);
        }
    }
    Ok(q)
}

/// An Interconnect that names the users Secret `bench-users` (and, once defaulted, only
/// Secrets derived from nothing but that): the same Secret for every object, as a team's
/// Interconnects share theirs.
fn ic_with_users(name: &str, defaulted: bool) -> DynamicObject {
    let raw = typed_with_users(name);
    let mut v = serde_json::to_value(if defaulted { qdr_api::defaults(&raw) } else { raw }).unwrap();
    v["apiVersion"] = json!("interconnectedcloud.github.io/v1alpha1");
    v["kind"] = json!("Interconnect");
    serde_json::from_value(v).unwrap()
}

/// [`ic_with_users`] as the typed object, before defaults.
fn typed_with_users(name: &str) -> qdr_api::Interconnect {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}, "users": "bench-users"}}),
    )
    .unwrap()
}

/// A client of the cluster admin's kubeconfig impersonating `user`.
async fn client_as(cp: &ControlPlane, user: &str) -> Result<kube::Client, Box<dyn std::error::Error>> {
    let kc = kube::config::Kubeconfig::read_from(cp.kubeconfig())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".into()]);
    Ok(kube::Client::try_from(config)?)
}

/// The SubjectAccessReviews the webhook (`qdr-webhook/` clients) has sent so far.
fn webhook_reviews(cp: &ControlPlane) -> usize {
    cp.requests_by("qdr-webhook/")
        .iter()
        .filter(|e| e.object_ref.as_ref().is_some_and(|o| o.resource == "subjectaccessreviews"))
        .count()
}

/// The creates of [`api_server_rows`] as two users who are not cluster admins, in the same
/// four namespaces (`[ours, none, none with defaults, null]`): a namespace admin (every verb
/// on Interconnects and Secrets) and a user allowed to `get` only the Secrets the objects
/// name. Rows: what our webhooks add ÷ what the null webhooks add, at p50 and p99, and the
/// SubjectAccessReviews per create (the first review for the namespace answers for the
/// admin; the narrow user's is refused, then the named Secret is asked; both answers are
/// reused for `--authorization-cache-*-ttl`).
async fn identity_rows(
    cp: &'static ControlPlane,
    namespaces: [&str; 4],
    runs: usize,
    webhook_metrics_url: &str,
) -> Result<Vec<Row>, Box<dyn std::error::Error>> {
    // Names every object of the loop below refers to, derived ones included.
    let names: std::collections::BTreeSet<String> = (0..runs)
        .flat_map(|run| (0..150).map(move |i| format!("n-{run}-{i}")))
        .chain(["probe".to_string()])
        .flat_map(|n| {
            qdr_api::defaults(&typed_with_users(&n)).secret_uses().into_iter().map(|(_, name, _)| name)
        })
        .collect();
    let roles = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "bench-ns-admin"},
         "rules": [{"apiGroups": ["interconnectedcloud.github.io"], "resources": ["interconnects"], "verbs": ["*"]},
                   {"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "bench-narrow"},
         "rules": [{"apiGroups": ["interconnectedcloud.github.io"], "resources": ["interconnects"], "verbs": ["create", "get"]},
                   {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": names}]}]});
    let out = qdr_tests::components::kubectl_stdin(cp, &["apply", "-f", "-"], &roles.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for ns in namespaces {
        for (user, role) in [("bench-ns-admin", "bench-ns-admin"), ("bench-narrow", "bench-narrow")] {
            kubectl_ok(
                cp,
                &[
                    "create",
                    "rolebinding",
                    user,
                    "-n",
                    ns,
                    &format!("--clusterrole={role}"),
                    &format!("--user={user}"),
                ],
            )
            .await;
        }
    }
    let mut rows = Vec::new();
    // Object names: `a-…` for the admin, `n-…` (the names the narrow role lists) for the other.
    for (user, label, prefix) in [
        ("bench-ns-admin", "a namespace admin", "a"),
        ("bench-narrow", "a user allowed only the named Secrets", "n"),
    ] {
        let client = client_as(cp, user).await?;
        let apis: Vec<Api<DynamicObject>> = namespaces.iter().map(|ns| interconnects(&client, ns)).collect();
        // Until the bindings are seen.
        let deadline = Instant::now() + Duration::from_secs(30);
        while apis[0]
            .create(&PostParams { dry_run: true, ..Default::default() }, &ic_with_users("probe", false))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(format!("{user} could never create through the webhooks").into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reviews_before = webhook_reviews(cp);
        let admin = cp.client().await?;
        let webhook_sums = || async {
            let text = match reqwest::get(webhook_metrics_url).await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            histogram_sums(&text, WEBHOOK_HANDLER_TIME, "operation")
        };
        let (api_before, own_before) = (
            histogram_sums(&metrics_text(&admin).await, API_SERVER_WEBHOOK_TIME, "name"),
            webhook_sums().await,
        );
        let q = create_latencies([&apis[0], &apis[1], &apis[2], &apis[3]], runs, prefix, |name, k| {
            ic_with_users(name, k == 2)
        })
        .await?;
        let (api_after, own_after) = (
            histogram_sums(&metrics_text(&admin).await, API_SERVER_WEBHOOK_TIME, "name"),
            webhook_sums().await,
        );
        tokio::time::sleep(Duration::from_secs(1)).await; // the audit log's last lines
        let reviews = webhook_reviews(cp) - reviews_before;
        for (j, p) in ["p50", "p99"].into_iter().enumerate() {
            let ours: Vec<f64> = q[0][j].iter().zip(&q[2][j]).map(|(a, b)| a - b).collect();
            let null: Vec<f64> = q[3][j].iter().zip(&q[1][j]).map(|(a, b)| a - b).collect();
            rows.push(Row {
                what: format!("  as {label}: added by our webhooks ÷ added by the null webhooks, {p}"),
                runs: ours.iter().zip(&null).map(|(a, b)| a / b).collect(),
                unit: "×",
                target: if j == 0 && user == "bench-ns-admin" { "≤ 1.3".into() } else { String::new() },
            });
        }
        rows.push(Row {
            what: format!(
                "  as {label}: SubjectAccessReviews per create through our webhooks (two calls each)"
            ),
            runs: vec![reviews as f64 / (runs * 150) as f64],
            unit: "",
            target: String::new(),
        });
        // Where the time goes: each call as the API server times it (its patch applied
        // included) and as our handler does.
        let timed = means_between(&api_before, &api_after)
            .into_iter()
            .map(|(name, mean)| (format!("one call of {name} as the API server times it"), mean))
            .chain(
                means_between(&own_before, &own_after)
                    .into_iter()
                    .map(|(name, mean)| (format!("one /{name} as the webhook times its handler"), mean)),
            );
        rows.extend(timed.map(|(what, mean)| Row::mean_ms(format!("  as {label}: {what} (mean)"), mean)));
    }
    Ok(rows)
}

/// Day two with live traffic on real routers (`qdr_tests::day_two`, the scenario of
/// `tests/tests/day_two.rs`), once (about 4 minutes): for each operation the longest gap
/// between two acknowledgements (s) and the acknowledged messages lost (must be 0). Needs a
/// real node (root) and the router image (`make router-image`).
async fn day_two_rows(rows: &mut Vec<Row>) -> Result<(), Box<dyn std::error::Error>> {
    let cp: &'static ControlPlane = Box::leak(Box::new(
        ControlPlane::start(Options { audit: true, real_nodes: 1, ..Options::default() }).await?,
    ));
    let controllers = qdr_tests::day_two::start_controllers(cp).await;
    let controllers: Vec<&qdr_tests::Process> = controllers.iter().collect();
    let ns: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("live").await));
    let rate = qdr_tests::day_two::RATE;
    for step in qdr_tests::day_two::run(cp, ns, &controllers, |_| ()).await {
        let t = &step.traffic;
        rows.push(Row {
            what: format!(
                "day two at {rate} msg/s, {}: longest gap between acknowledgements ({} sent, {} acknowledged, {} received)",
                step.what, t.sent, t.acknowledged, t.received
            ),
            runs: vec![t.longest_gap_s],
            unit: "s",
            target: String::new(),
        });
        rows.push(Row {
            what: format!("day two at {rate} msg/s, {}: acknowledged messages lost", step.what),
            runs: vec![t.lost as f64],
            unit: "messages",
            target: "0".into(),
        });
    }
    Ok(())
}

/// The value of the unlabelled series `name` in an OpenMetrics text, if present.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Resident memory of process `pid` in MiB, from `/proc/<pid>/status`.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// What reading the routers costs (`docs/mesh-status.md`), on real routers on the real node
/// (root and the router image, as [`day_two_rows`]): one Interconnect of 3 interior routers
/// read by one release controller. At rest for [`MESH_REST`]: routers asked per minute, the
/// controller's CPU (ms per minute) and resident memory; per read, its duration; and `runs`
/// times, a router pod deleted: the time until `MeshConnected` leaves `Connected`, and
/// until it is `Connected` again.
async fn mesh_rows(rows: &mut Vec<Row>, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let cp: &'static ControlPlane = Box::leak(Box::new(
        ControlPlane::start(Options { audit: false, real_nodes: 1, ..Options::default() }).await?,
    ));
    qdr_tests::routers::routers_on_real_node(cp)?;
    qdr_tests::routers::import_router_image(cp)?;
    cp.install_crd().await;
    let health = qdr_tests::components::free_port();
    let controller = qdr_tests::routers::start_controller_on(cp, "qdr-controller-mesh", health, &[])?;
    let ns: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("cost").await));
    let ic = qdr_tests::routers::interconnect(
        "cost",
        json!({"deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"}}),
    );
    qdr_tests::routers::check_client()?;
    let applied = Instant::now();
    qdr_tests::routers::apply(cp, &ns.name, &ic);
    let ready = qdr_tests::routers::wait_ready(cp, &ns.name, "cost", &[&controller]);
    // The first message across the mesh: anycast from router 0 to a receiver on router 1,
    // sent as soon as the routers are Ready (the sender retries until the address has a
    // route, as a client would).
    let pods = qdr_tests::routers::router_pods(ns, "cost").await;
    let url = |i: usize| qdr_tests::routers::url(&pods[i].1, 5672);
    let receiver = qdr_tests::routers::Receiver::attach(&url(1), "closest/first", 1, &[]);
    qdr_tests::routers::send(&url(0), "closest/first", 0..1, "first-", Duration::from_secs(60), &[]);
    let first_message = applied.elapsed();
    if receiver.bodies() != ["first-0"] {
        return Err("the first message did not arrive".into());
    }
    rows.push(Row {
        what: "apply → 3 real interior routers Ready".into(),
        runs: vec![ready.as_secs_f64()],
        unit: "s",
        target: String::new(),
    });
    rows.push(Row::once(
        "apply → first message across the 3-router mesh (router 0 → router 1)",
        first_message.as_secs_f64(),
        "s",
    ));
    let reason = || {
        let out = qdr_tests::routers::kubectl(
            cp,
            &[
                "get",
                "interconnect",
                "cost",
                "-n",
                &ns.name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"MeshConnected\")].reason}",
            ],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let until = |want: fn(&str) -> bool, limit: Duration| async move {
        let t = Instant::now();
        while !want(&reason()) && t.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        t.elapsed()
    };
    until(|r| r == "Connected", Duration::from_secs(120)).await;
    let scrape = || qdr_tests::components::http_get(health, "/metrics").map(|(_, b)| b).unwrap_or_default();
    let (before, cpu_before) = (scrape(), cpu_seconds(controller.pid()));
    // The moments reads end (the read counter moves), polled every 250 ms: the period
    // between reads, free of where the window's edges fall.
    let started = Instant::now();
    let mut last = metric(&before, "qdr_mesh_read_duration_seconds_count").unwrap_or(0.0);
    let mut ends = Vec::new();
    while started.elapsed() < MESH_REST {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = metric(&scrape(), "qdr_mesh_read_duration_seconds_count").unwrap_or(last);
        if now > last {
            ends.push(started.elapsed().as_secs_f64());
            last = now;
        }
    }
    let (after, cpu_after) = (scrape(), cpu_seconds(controller.pid()));
    let minutes = MESH_REST.as_secs_f64() / 60.0;
    let delta = |name: &str| metric(&after, name).unwrap_or(0.0) - metric(&before, name).unwrap_or(0.0);
    let periods: Vec<f64> = ends.windows(2).map(|w| w[1] - w[0]).collect();
    if periods.is_empty() {
        return Err(format!("{} reads in {MESH_REST:?} at rest: too few to time", ends.len()).into());
    }
    let per_read =
        delta("qdr_mesh_router_reads_total") / delta("qdr_mesh_read_duration_seconds_count").max(1.0);
    rows.push(Row {
        what: format!(
            "mesh reads at rest, 1 Interconnect of 3 real routers: time between reads ({} reads in {:.0} s)",
            ends.len(),
            MESH_REST.as_secs_f64()
        ),
        runs: periods.clone(),
        unit: "s",
        target: "60 (the resync)".into(),
    });
    rows.push(Row {
        what: "mesh reads at rest: routers asked per minute (routers per read × 60 s ÷ time between reads)"
            .into(),
        runs: periods.iter().map(|p| per_read * 60.0 / p).collect(),
        unit: "routers/min",
        target: "≤ 3".into(),
    });
    let reads = delta("qdr_mesh_read_duration_seconds_count");
    rows.push(Row {
        what: "mesh read of 3 real routers (TLS connect + 3 QUERYs each, concurrently): mean duration".into(),
        runs: vec![if reads > 0.0 {
            1000.0 * delta("qdr_mesh_read_duration_seconds_sum") / reads
        } else {
            0.0
        }],
        unit: "ms",
        target: String::new(),
    });
    rows.push(Row {
        what: "controller CPU at rest with 1 Interconnect of 3 real routers read".into(),
        runs: vec![1000.0 * (cpu_after - cpu_before) / minutes],
        unit: "ms CPU/min",
        target: String::new(),
    });
    rows.push(Row::once(
        "controller resident memory with 1 Interconnect of 3 real routers read",
        rss_mib(controller.pid()),
        "MiB",
    ));
    let (mut noticed, mut recovered) = (Vec::new(), Vec::new());
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cp.client().await?, &ns.name);
    for _ in 0..runs {
        let list = pods.list(&kube::api::ListParams::default().labels("application=cost")).await?;
        let victim = list
            .items
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.metadata.name.clone());
        let Some(victim) = victim else { break };
        pods.delete(&victim, &kube::api::DeleteParams::default()).await?;
        let t = Instant::now();
        until(|r| r != "Connected", Duration::from_secs(60)).await;
        noticed.push(t.elapsed().as_secs_f64());
        until(|r| r == "Connected", Duration::from_secs(180)).await;
        recovered.push(t.elapsed().as_secs_f64());
    }
    rows.push(Row {
        what: "a router pod deleted → MeshConnected no longer Connected".into(),
        runs: noticed,
        unit: "s",
        target: String::new(),
    });
    rows.push(Row {
        what: "a router pod deleted → MeshConnected Connected again (replacement started and linked)".into(),
        runs: recovered,
        unit: "s",
        target: String::new(),
    });
    Ok(())
}

/// How long the mesh benchmark leaves a connected mesh at rest.
const MESH_REST: Duration = Duration::from_secs(200);

/// Renders the router configuration of an effective spec (the controller's renderer).
fn qdr_controller_render(ic: &qdr_api::Interconnect) -> String {
    qdr_api::router_config::router_config(&ic.spec).render()
}

/// Interconnects of the mesh benchmark at scale, and routers of each.
const SCALE_ICS: usize = 2000;
const SCALE_ROUTERS: usize = 3;
/// Namespaces they are spread over (reads are shared fairly across namespaces).
const SCALE_NAMESPACES: usize = 20;
/// How long the connected meshes are left at rest while the controller is measured: one
/// resync period at this scale (`resync(6000)`, 5 minutes) and a half minute, so every
/// mesh is read at least once.
const SCALE_REST: Duration = Duration::from_secs(330);

/// The cost of reading the routers at scale (`QDR_BENCH_ONLY=mesh-2000`): 2,000
/// Interconnects of 3 interior routers each over 20 namespaces, read by one release
/// controller with `--observe-mesh=on`. The routers are stand-ins
/// ([`qdr_tests::amqp_peer`]) that speak the real protocol over TLS with each
/// Interconnect's generated management certificate and answer as honest qdrouterd 1.19
/// routers of a full mesh, one wildcard listener for 6,000 loopback addresses
/// (`127.10.0.0/16`, never the simulated nodes' addresses). Router pods are created by the
/// benchmark as the Deployment controller would (controlled by a ReplicaSet named after the
/// Interconnect's Deployment) and made Ready at their address an hour ago, so no router is
/// still joining. Rows: time to all `MeshConnected`, then at rest for [`SCALE_REST`]: reads
/// and routers asked per second, the controller's CPU, its peak RSS and status writes per
/// minute.
async fn mesh_scale_rows(
    rows: &mut Vec<Row>,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use qdr_tests::amqp_peer::{self, Script};
    use std::collections::HashMap;
    use std::net::IpAddr;
    use std::sync::RwLock;

    let client = cp.client().await?;
    let system = cp.namespace("bench-mesh-ctl").await;
    let mut namespaces = Vec::new();
    for _ in 0..SCALE_NAMESPACES {
        namespaces.push(cp.namespace("bench-mesh").await.name.clone());
    }
    let per_ns = SCALE_ICS / SCALE_NAMESPACES;
    // (namespace, Interconnect) of IC number i.
    let place = |i: usize| (namespaces[i / per_ns].clone(), format!("ic-{}", i % per_ns));
    let ip_of = |i: usize, r: usize| {
        let k = i * SCALE_ROUTERS + r + 1;
        format!("127.10.{}.{}", k / 250, k % 250 + 1)
    };
    let pod_name = |name: &str, r: usize| format!("{name}-5d8f7b9c6d-r{r}xyz");

    // The stand-ins: one listener, answered by address once the Interconnect's certificate exists.
    type Peers = HashMap<IpAddr, (Option<Arc<rustls::ServerConfig>>, Script)>;
    let answers: Arc<RwLock<Peers>> = Arc::default();
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", 55670)).await?;
    let peers = {
        let answers = answers.clone();
        amqp_peer::serve_by_address(
            listener,
            Arc::new(move |ip| answers.read().unwrap_or_else(|e| e.into_inner()).get(&ip).cloned()),
        )
    };

    let install = Install { lease: "bench-mesh".into(), ..Install::new(&system.name) };
    let ids = cp.install_rbac(&install)?;
    let health = free_port();
    let mut cmd = Command::new(bin_dir.join("qdr-controller"));
    cmd.env("KUBECONFIG", &ids.controller).env("RUST_LOG", "warn").args([
        &format!("--lease-namespace={}", system.name),
        "--identity=bench",
        "--lease-name=bench-mesh",
        &format!("--health-listen=127.0.0.1:{health}"),
        "--observe-mesh=on",
    ]);
    let ctl = Process::spawn("qdr-controller-mesh-scale", cmd, &cp.dir().join("controller-mesh-scale.log"))?;
    let pid = ctl.pid();

    let started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..SCALE_ICS {
        let (ns, name) = place(i);
        let (client, sem) = (client.clone(), sem.clone());
        let ips: Vec<String> = (0..SCALE_ROUTERS).map(|r| ip_of(i, r)).collect();
        let pods: Vec<String> = (0..SCALE_ROUTERS).map(|r| pod_name(&name, r)).collect();
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            let ic: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                "metadata": {"name": name},
                "spec": {"deploymentPlan": {"role": "interior", "size": SCALE_ROUTERS}}}))?;
            interconnects(&client, &ns).create(&PostParams::default(), &ic).await?;
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let since = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
            for (pod, ip) in pods.iter().zip(&ips) {
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": pod, "labels": {"application": name, "interconnect_cr": name},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": format!("{name}-5d8f7b9c6d"), "uid": "00000000-0000-0000-0000-000000000001",
                                     "controller": true}]},
                    "spec": {"containers": [{"name": name, "image": "quay.io/interconnectedcloud/qdrouterd:1.19.0"}]}}))?;
                api.create(&PostParams::default(), &p).await?;
                let status = json!({"status": {
                    "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since.to_string()}]}});
                api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&status)).await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    let created = started.elapsed();

    // Each Interconnect's routers answer once its management certificate exists.
    let tls_of = |s: &Secret| -> Option<Arc<rustls::ServerConfig>> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
        let data = s.data.as_ref()?;
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&data.get("tls.crt")?.0).collect::<Result<_, _>>().ok()?;
        let key = PrivateKeyDer::from_pem_slice(&data.get("tls.key")?.0).ok()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .ok()?;
        Some(Arc::new(config))
    };
    let mut answered = vec![false; SCALE_ICS];
    let deadline = Instant::now() + Duration::from_secs(600);
    while answered.iter().any(|a| !a) {
        if Instant::now() > deadline {
            return Err(format!(
                "{} management certificates missing",
                answered.iter().filter(|a| !**a).count()
            )
            .into());
        }
        for (n, ns) in namespaces.iter().enumerate() {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
            for s in secrets.list(&kube::api::ListParams::default()).await?.items {
                let Some(name) = s
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| n.strip_suffix("-qdr-operator-management-credentials"))
                else {
                    continue;
                };
                let Some(i) =
                    name.strip_prefix("ic-").and_then(|i| i.parse::<usize>().ok()).map(|i| n * per_ns + i)
                else {
                    continue;
                };
                if answered[i] {
                    continue;
                }
                let Some(tls) = tls_of(&s) else { continue };
                let pods: Vec<String> = (0..SCALE_ROUTERS).map(|r| pod_name(name, r)).collect();
                let mut table = answers.write().unwrap_or_else(|e| e.into_inner());
                for (r, pod) in pods.iter().enumerate() {
                    let others: Vec<&str> = pods.iter().filter(|p| *p != pod).map(String::as_str).collect();
                    let script = Script::Honest(Arc::new(amqp_peer::honest(pod, "interior", &others, 0)));
                    table.insert(ip_of(i, r).parse()?, (Some(tls.clone()), script));
                }
                answered[i] = true;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Every mesh connected, as the controller reports it.
    let connected = |ic: &DynamicObject| {
        ic.data["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "MeshConnected" && c["status"] == "True"))
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let mut n = 0;
        for ns in &namespaces {
            n += interconnects(&client, ns)
                .list(&kube::api::ListParams::default())
                .await?
                .items
                .iter()
                .filter(|ic| connected(ic))
                .count();
        }
        if n == SCALE_ICS {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{n}/{SCALE_ICS} meshes connected after 900 s").into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let all_connected = started.elapsed();

    // At rest: status writes counted by a watch of every Interconnect, reads by the
    // controller's own counters.
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watch = {
        let writes = writes.clone();
        let api = Api::<DynamicObject>::all_with(client.clone(), &interconnect_resource());
        let rv = api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        tokio::spawn(async move {
            use futures::TryStreamExt;
            let Ok(stream) = api.watch(&kube::api::WatchParams::default(), &rv).await else { return };
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(e)) = stream.try_next().await {
                if matches!(e, kube::api::WatchEvent::Modified(_)) {
                    writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        })
    };
    let scrape = || qdr_tests::components::http_get(health, "/metrics").map(|(_, b)| b).unwrap_or_default();
    let (before, cpu_before, at) = (scrape(), cpu_seconds(pid), Instant::now());
    tokio::time::sleep(SCALE_REST).await;
    let (after, cpu_after, window) = (scrape(), cpu_seconds(pid), at.elapsed().as_secs_f64());
    let status_writes = writes.load(std::sync::atomic::Ordering::SeqCst);
    watch.abort();
    peers.abort();
    let delta = |name: &str| metric(&after, name).unwrap_or(0.0) - metric(&before, name).unwrap_or(0.0);
    let (rss, rss_now) = (peak_rss_mib(pid), rss_mib(pid));
    ctl.stop(Duration::from_secs(5));

    let what = format!("{SCALE_ICS} Interconnects × {SCALE_ROUTERS} routers (stand-ins), mesh read");
    rows.push(Row {
        what: format!("mesh at scale: {what}: created (Interconnects and router pods)"),
        runs: vec![created.as_secs_f64()],
        unit: "s",
        target: String::new(),
    });
    rows.push(Row::once("mesh at scale: start → every mesh MeshConnected", all_connected.as_secs_f64(), "s"));
    rows.push(Row::once(
        format!("mesh at scale, at rest ({:.0} s): reads of an Interconnect per second", window),
        delta("qdr_mesh_read_duration_seconds_count") / window,
        "reads/s",
    ));
    rows.push(Row::once(
        "mesh at scale, at rest: routers asked per second",
        delta("qdr_mesh_router_reads_total") / window,
        "routers/s",
    ));
    rows.push(Row {
        what: "mesh at scale, at rest: controller CPU".into(),
        runs: vec![(cpu_after - cpu_before) / window],
        unit: "cores",
        target: "≤ 0.1".into(),
    });
    rows.push(Row {
        what: "mesh at scale: controller peak RSS".into(),
        runs: vec![rss],
        unit: "MiB",
        target: "≤ 96".into(),
    });
    let passes = delta("qdr_controller_reconcile_duration_seconds_count");
    rows.push(Row {
        what: "mesh at scale, at rest: reconcile passes per second".into(),
        runs: vec![passes / window],
        unit: "passes/s",
        target: String::new(),
    });
    rows.push(Row::once(
        "mesh at scale, at rest: mean reconcile pass",
        1000.0 * delta("qdr_controller_reconcile_duration_seconds_sum") / passes.max(1.0),
        "ms",
    ));
    rows.push(Row::once(
        "mesh at scale, at rest: controller CPU per router asked (all of it: reads and passes)",
        1000.0 * (cpu_after - cpu_before) / delta("qdr_mesh_router_reads_total").max(1.0),
        "ms",
    ));
    rows.push(Row::once("mesh at scale, at rest: controller RSS at the end", rss_now, "MiB"));
    rows.push(Row {
        what: "mesh at scale, at rest: status writes per minute".into(),
        runs: vec![status_writes as f64 * 60.0 / window],
        unit: "writes/min",
        target: "0".into(),
    });
    Ok(())
}
