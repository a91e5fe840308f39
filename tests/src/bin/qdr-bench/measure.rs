//! Reading a figure off a process or a text: CPU seconds and resident memory from `/proc`,
//! percentiles, time per call, free ports, CPU pinning, and sums and means of Prometheus
//! histograms in a text exposition. It starts nothing and prints nothing.

use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub(crate) fn peak_rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Nanoseconds per call of `f`, for a run of about 0.5 s.
pub(crate) fn per_call(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_millis(500) {
        f();
        n += 1;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

pub(crate) fn which(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Sets the CPU affinity of every thread of this process (the tokio workers included).
pub(crate) fn pin_process(cpus: std::ops::Range<usize>) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
    for t in tasks.flatten() {
        let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else { continue };
        let _ = Command::new("taskset")
            .args(["-p", "-c", &format!("{}-{}", cpus.start, cpus.end - 1), &tid.to_string()])
            .output();
    }
}

/// The API server's `/metrics`.
pub(crate) async fn metrics_text(client: &kube::Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).expect("static request");
    client.request_text(req).await.unwrap_or_default()
}

/// `sum / count` of histogram `name` in a Prometheus text exposition, by the value of
/// label `by` (summed over the other labels).
pub(crate) fn histogram_means(text: &str, name: &str, by: &str) -> Vec<(String, f64)> {
    means_between(&Default::default(), &histogram_sums(text, name, by))
}

/// `(sum, count)` of histogram `name` in a Prometheus text exposition, by the value of
/// label `by` (summed over the other labels).
pub(crate) fn histogram_sums(
    text: &str,
    name: &str,
    by: &str,
) -> std::collections::BTreeMap<String, (f64, f64)> {
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
pub(crate) fn means_between(
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
pub(crate) fn webhook_connections(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("qdr_webhook_connections_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of the unlabelled series `name` in an OpenMetrics text, if present.
pub(crate) fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Resident memory of process `pid` in MiB, from `/proc/<pid>/status`.
pub(crate) fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
