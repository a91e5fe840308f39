//! The webhook alone (`QDR_BENCH_ONLY=webhook`): the release webhook on its own core under a
//! closed-loop saturation and an open-loop fixed rate, its throughput per CPU-second,
//! latency percentiles and peak memory, beside the null webhook's ceiling on the same stack.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qdr_tests::Process;

use crate::fixtures::review;
use crate::measure::{cpu_seconds, free_port, peak_rss_mib, percentile, pin_process, which};
use crate::table::Row;

/// How long each load runs: 3 s (1 s in the smoke mode).
fn window() -> Duration {
    crate::scaled(Duration::from_secs(3), Duration::from_secs(1))
}

/// Closed loop: `conns` connections sending as fast as answered for `dur`. Returns req/s
/// and the requests answered per CPU-second the server (process `server`) used meanwhile:
/// its throughput per core, whether or not this load generator kept it busy.
pub(crate) async fn saturate(
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
pub(crate) fn fixed_rate_on_own_thread(
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
pub(crate) async fn fixed_rate(
    client: &reqwest::Client,
    url: &str,
    rate: u64,
    dur: Duration,
) -> (Vec<Duration>, u64) {
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

pub(crate) async fn webhook_rows(
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
            let (rate, per_core) = saturate(&client, url, 32, window(), p.pid()).await;
            sat.push(rate);
            per_cpu.push(per_core);
            for (i, rate) in [1000u64, 2000].into_iter().enumerate() {
                let (lat, errors) = fixed_rate_on_own_thread(pki.ca_pem(), url, rate, window())?;
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
        let (rate, per_core) = saturate(&client, &null_url, 32, window(), null.pid()).await;
        sat.push(rate);
        per_cpu.push(per_core);
    }
    let null_rate = crate::table::median(&sat);
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
    crate::table::machine(format!(
        "a plain HTTPS client (32 connections) gets {null_rate:.0} requests/s from the null webhook, {null_median:.0} per CPU-second of it"
    ));
    rows.push(null_row);
    for (name, ours) in ours_per_cpu {
        rows.push(Row {
            what: format!("  webhook /{name} ÷ the null webhook, requests per CPU-second"),
            runs: ours.iter().map(|o| o / null_median).collect(),
            unit: "×",
            target: "≥ 0.6".into(),
        });
    }
    null.stop(Duration::from_secs(2));
    if pinned {
        pin_process(0..cpus);
    }
    Ok(())
}
