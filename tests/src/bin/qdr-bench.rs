//! `make bench`: every benchmark of the project, one table with the figures and the targets.
//! Each figure is the median of several runs (`QDR_BENCH_RUNS`, default 3) with min and max.
//! Absolute figures on a shared 2-core machine are noisy: the load generator, the webhook,
//! the API server and etcd all share the same cores.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use qdr_tests::{ControlPlane, Options, Process};
use serde_json::{Value, json};

struct Row {
    what: String,
    runs: Vec<f64>,
    unit: &'static str,
    target: String,
}

impl Row {
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

/// Closed loop: `conns` connections sending as fast as answered for `dur`. Returns req/s.
async fn saturate(client: &reqwest::Client, url: &str, conns: usize, dur: Duration) -> f64 {
    let body = Arc::new(review(1));
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
    total as f64 / start.elapsed().as_secs_f64()
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
        tokio::time::sleep_until(scheduled).await;
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
    let mut cmd = Command::new(bin_dir.join("qdr-webhook"));
    cmd.env("RUST_LOG", "warn").args([
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
    for (name, url) in [("validate", &url_v), ("mutate", &url_m)] {
        let mut sat = Vec::new();
        let mut p50s: Vec<Vec<f64>> = vec![Vec::new(); 6];
        for _ in 0..runs {
            sat.push(saturate(&client, url, 32, Duration::from_secs(3)).await);
            for (i, rate) in [1000u64, 2000].into_iter().enumerate() {
                let (lat, errors) = fixed_rate(&client, url, rate, Duration::from_secs(3)).await;
                if errors > 0 {
                    eprintln!("warning: {errors} failed requests at {rate} req/s on /{name}");
                }
                for (j, q) in [0.5, 0.99, 0.999].into_iter().enumerate() {
                    p50s[i * 3 + j].push(percentile(&lat, q).as_secs_f64() * 1000.0);
                }
            }
        }
        rows.push(Row {
            what: format!("webhook /{name}: throughput at saturation (32 conns)"),
            runs: sat,
            unit: "req/s",
            target: "≥ 10000".into(),
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
    Ok(())
}

fn interconnects(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn ic_obj(name: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}}}),
    )
    .unwrap()
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
    let rules = json!([{"apiGroups": ["interconnectedcloud.github.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["interconnects"]}]);
    let entry = |n: &str, path: &str| {
        json!({"name": n, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
        "rules": rules, "namespaceSelector": {"matchLabels": {"qdr-operator.test/webhook": "bench"}}, "clientConfig": {"url": format!("https://127.0.0.1:{port}/{path}")}})
    };
    let v = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench-v"}, "webhooks": [entry("v.bench.io", "validate")]});
    let m = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "bench-m"}, "webhooks": [entry("m.bench.io", "mutate")]});
    for o in [v, m] {
        let mut child = cp
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()?;
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), o.to_string().as_bytes())?;
        child.wait()?;
    }
    let mut cmd = Command::new(bin_dir.join("qdr-webhook"));
    cmd.env("KUBECONFIG", cp.kubeconfig()).env("RUST_LOG", "warn").args([
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
    let api_without = interconnects(&client, &without.name);
    let (mut p_with, mut p_without, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let mut lat = [Vec::new(), Vec::new()];
        for i in 0..150 {
            // Interleaved, so both see the same machine load.
            for (k, api) in [&api_with, &api_without].into_iter().enumerate() {
                let t = Instant::now();
                api.create(&PostParams::default(), &ic_obj(&format!("c-{run}-{i}"))).await?;
                lat[k].push(t.elapsed());
            }
        }
        for l in &mut lat {
            l.sort();
        }
        let (a, b) = (
            percentile(&lat[0], 0.5).as_secs_f64() * 1000.0,
            percentile(&lat[1], 0.5).as_secs_f64() * 1000.0,
        );
        p_with.push(a);
        p_without.push(b);
        ratio.push(a / b);
    }
    let added: Vec<f64> = p_with.iter().zip(&p_without).map(|(a, b)| a - b).collect();
    rows.push(Row {
        what: "create through the API server, both webhooks: p50".into(),
        runs: p_with,
        unit: "ms",
        target: String::new(),
    });
    rows.push(Row {
        what: "create through the API server, no webhook: p50".into(),
        runs: p_without,
        unit: "ms",
        target: String::new(),
    });
    rows.push(Row {
        what: "  added by the webhooks at p50".into(),
        runs: added,
        unit: "ms",
        target: "≤ 2".into(),
    });
    rows.push(Row { what: "  ratio with / without".into(), runs: ratio, unit: "×", target: String::new() });
    wh.stop(Duration::from_secs(2));
    Ok(())
}

async fn convergence_rows(
    rows: &mut Vec<Row>,
    runs: usize,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    const N: usize = 500;
    let client = cp.client().await?;
    let (mut all, mut change, mut rss, mut cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let ns = cp.namespace(&format!("bench-converge-{run}")).await;
        let system = cp.namespace("bench-ctl").await;
        let api = interconnects(&client, &ns.name);
        // Create 500 Interconnects at once, then start the controller.
        let sem = Arc::new(tokio::sync::Semaphore::new(16));
        let creates: Vec<_> = (0..N)
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
        let mut cmd = Command::new(bin_dir.join("qdr-controller"));
        cmd.env("KUBECONFIG", cp.kubeconfig()).env("RUST_LOG", "warn").args([
            &format!("--lease-namespace={}", system.name),
            "--identity=bench",
            &format!("--watch-namespace={}", ns.name),
            &format!("--health-listen=127.0.0.1:{}", free_port()),
        ]);
        let start = Instant::now();
        let ctl = Process::spawn(
            "qdr-controller-bench",
            cmd,
            &cp.dir().join(format!("controller-bench-{run}.log")),
        )?;
        loop {
            let list = api.list(&ListParams::default()).await?;
            let done = list.items.iter().filter(|o| o.data["status"]["observedGeneration"] == 1).count();
            if done == N {
                break;
            }
            if start.elapsed() > Duration::from_secs(300) {
                let stuck: Vec<String> = list
                    .items
                    .iter()
                    .filter(|o| o.data["status"]["observedGeneration"] != 1)
                    .take(3)
                    .map(|o| format!("{} {}", o.metadata.name.clone().unwrap_or_default(), o.data["status"]))
                    .collect();
                return Err(format!(
                    "only {done}/{N} converged in 300 s; e.g. {stuck:?}\ncontroller log:\n{}",
                    ctl.log_tail(30)
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        all.push(start.elapsed().as_secs_f64());
        // Spec change → updated child, p50 over 20 changes.
        let deps: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), &ns.name);
        let mut lat = Vec::new();
        for i in 0..20 {
            let name = format!("ic-{i}");
            let t = Instant::now();
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"deploymentPlan": {"size": 2}}})),
            )
            .await?;
            while deps.get(&name).await?.spec.and_then(|s| s.replicas) != Some(2) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            lat.push(t.elapsed());
        }
        lat.sort();
        change.push(percentile(&lat, 0.5).as_secs_f64() * 1000.0);
        rss.push(peak_rss_mib(ctl.pid()));
        cpu.push(cpu_seconds(ctl.pid()));
        ctl.stop(Duration::from_secs(5));
    }
    rows.push(Row {
        what: format!("controller: {N} Interconnects created at once, all converged"),
        runs: all,
        unit: "s",
        target: "≤ 60".into(),
    });
    rows.push(Row {
        what: "controller: spec change → updated child, p50".into(),
        runs: change,
        unit: "ms",
        target: String::new(),
    });
    rows.push(Row { what: "controller peak RSS".into(), runs: rss, unit: "MiB", target: "≤ 64".into() });
    rows.push(Row {
        what: "controller CPU time for the whole run".into(),
        runs: cpu,
        unit: "s",
        target: String::new(),
    });
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runs: usize = std::env::var("QDR_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| qdr_tests::workspace_root().join("target"));
    let bin_dir = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| target.join("release"));
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
        let cp: &'static ControlPlane = Box::leak(Box::new(
            ControlPlane::start(Options { state_dir: None, controller_manager: false, nodes: 0 }).await?,
        ));
        cp.install_crd().await;
        if only.is_empty() || only == "apiserver" {
            api_server_rows(&mut rows, runs, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "controller" {
            convergence_rows(&mut rows, runs, &bin_dir, cp).await?;
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
    Ok(())
}

/// Renders the router configuration of an effective spec (the controller's renderer).
fn qdr_controller_render(ic: &qdr_api::Interconnect) -> String {
    qdr_controller::router_config::router_config(&ic.spec).render()
}
