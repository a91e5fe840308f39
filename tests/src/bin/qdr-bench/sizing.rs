//! What one router costs (`QDR_BENCH_ONLY=sizing`, docs/sizing.md): a real router of the
//! router image on the real node, idle, holding 1,000 idle client connections, and carrying
//! a steady acknowledged flow; its resident memory (VmRSS of `qdrouterd`, what a memory
//! request must cover) and its CPU (from `/proc/<pid>/stat`, averaged over a window), each
//! read on the host. The figures the default router `resources` and the sizing page come
//! from.

use std::time::{Duration, Instant};

use qdr_tests::ControlPlane;
use qdr_tests::routers::{self, Steady, url};
use serde_json::json;

use crate::measure::{cpu_seconds, rss_mib};
use crate::table::Row;

/// Idle client connections held open at once.
const CONNECTIONS: usize = 1000;
/// How long CPU is averaged over, for each state.
const WINDOW: Duration = Duration::from_secs(30);
/// Messages a second of the loaded state: a sender with acknowledgements and a receiver.
const RATE: u32 = 200;

/// Average CPU of `pid` over [`WINDOW`] (3 s in the smoke mode), in millicores, and its
/// resident memory after it.
async fn sample(pid: u32) -> (f64, f64) {
    let (t, cpu) = (Instant::now(), cpu_seconds(pid));
    tokio::time::sleep(crate::scaled(WINDOW, Duration::from_secs(3))).await;
    let used = cpu_seconds(pid) - cpu;
    (used / t.elapsed().as_secs_f64() * 1000.0, rss_mib(pid))
}

/// One interior router (the defaults' listeners) on the real node, read in three states:
/// idle 30 s after Ready; holding [`CONNECTIONS`] idle AMQP connections (one client process);
/// carrying [`RATE`] acknowledged messages a second. Needs a real node (root) and the router
/// image (`make router-image`).
pub(crate) async fn sizing_rows(rows: &mut Vec<Row>) -> Result<(), Box<dyn std::error::Error>> {
    // The real node is the machine's one (a lock): every real-node group shares it.
    let cp: &'static ControlPlane = qdr_tests::shared_with_real_node().await;
    routers::routers_on_real_node(cp)?;
    routers::import_router_image(cp)?;
    routers::check_client()?;
    cp.install_crd().await;
    let controller = routers::start_controller(cp, "qdr-controller-sizing", &[])?;
    let ns: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("sizing").await));
    routers::apply(cp, &ns.name, &routers::interconnect("sized", json!({"deploymentPlan": {"size": 1}})));
    routers::wait_ready(cp, &ns.name, "sized", &[&controller]);
    let (pod, ip) = routers::router_pods(ns, "sized").await.remove(0);
    let pid = routers::router_pid(&pod).ok_or("no qdrouterd process for the router pod")?;
    // The smoke mode: 50 connections, 2 s pauses.
    let (connections, settle) = crate::scaled((CONNECTIONS, 10), (50, 2));
    tokio::time::sleep(Duration::from_secs(3 * settle)).await;
    let (idle_cpu, idle_mib) = sample(pid).await;

    // Idle connections: one client process holding them all.
    let log = cp.dir().join("sizing-idle.log");
    let cmd = routers::client("idle", &url(&ip, 5672), "-", &["--count", &connections.to_string()]);
    let held = qdr_tests::Process::spawn("idle-connections", cmd, &log)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&format!("{{\"open\": {connections}}}")) {
            break;
        }
        if text.contains("error") || held.exited().is_some() || Instant::now() > deadline {
            return Err(format!("{connections} idle connections not open: {text}").into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let (held_cpu, held_mib) = sample(pid).await;
    held.signal(libc::SIGTERM);
    held.wait_exit(Duration::from_secs(10));

    // A steady flow through the router (sender and receiver both on it).
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let steady = Steady::start(&url(&ip, 5672), "closest/sized", RATE, &cp.dir().join("sizing-steady.log"));
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let (flow_cpu, flow_mib) = sample(pid).await;
    let traffic = steady.finish();

    let per_thousand = (held_mib - idle_mib) * 1000.0 / connections as f64;
    for (what, value, unit) in [
        ("router (one interior, defaults' listeners) idle: resident memory".to_string(), idle_mib, "MiB"),
        ("router idle: CPU (its reads by the controller included)".to_string(), idle_cpu, "millicores"),
        (format!("router holding {connections} idle client connections: resident memory"), held_mib, "MiB"),
        ("router: memory per 1,000 idle client connections".to_string(), per_thousand, "MiB"),
        (format!("router holding {connections} idle client connections: CPU"), held_cpu, "millicores"),
        (
            format!(
                "router at {RATE} msg/s acknowledged ({} sent, {} acknowledged, {} lost): CPU",
                traffic.sent, traffic.acknowledged, traffic.lost
            ),
            flow_cpu,
            "millicores",
        ),
        (format!("router at {RATE} msg/s: resident memory"), flow_mib, "MiB"),
    ] {
        rows.push(Row::once(what, value, unit));
    }
    // The real node is shared with the next groups, which run their own routers.
    routers::stop_routers(cp, &[&ns.name])?;
    controller.stop(Duration::from_secs(10));
    Ok(())
}
