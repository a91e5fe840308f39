//! Changes written into running routers (`QDR_BENCH_ONLY=live`, docs/live-configuration.md):
//! one Interconnect of 3 real interior routers on the real node, a steady client through its
//! Service, and a run of address changes, each written into the running routers; then one
//! change a running router cannot take (a roll), for comparison.

use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams};
use qdr_tests::ControlPlane;
use qdr_tests::routers::{self, Steady, url};
use serde_json::{Value, json};

use crate::measure::{cpu_seconds, percentile};
use crate::table::Row;

/// Address changes written live, one after the other.
const CHANGES: usize = 20;
/// Messages a second of the steady client (as the day-two benchmark).
const RATE: u32 = 20;

/// The spec: 3 interior routers, one client listener, `addresses`, and the edge listener's
/// port (a start-up change when it changes).
fn spec(addresses: Value, edge_port: u16) -> Value {
    routers::interconnect(
        "change",
        json!({
            "deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"},
            "listeners": [{"port": 5672}],
            "edgeListeners": [{"port": edge_port}],
            "addresses": addresses,
        }),
    )
}

/// Whether `ic` reports its current generation applied on every router.
fn applied(ic: &qdr_api::Interconnect) -> bool {
    let generation = ic.metadata.generation;
    (ic.status.iter().flat_map(|s| &s.conditions)).any(|c| {
        c.type_ == "ConfigApplied"
            && c.status == "True"
            && c.reason == "Applied"
            && c.observed_generation == generation
    })
}

/// Applies `manifest` (server-side, as `kubectl apply --server-side` would) and returns the
/// time until every router runs it, polled every 25 ms.
async fn change(
    ics: &Api<qdr_api::Interconnect>,
    manifest: &Value,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let t = Instant::now();
    ics.patch("change", &PatchParams::apply("qdr-bench").force(), &Patch::Apply(manifest)).await?;
    while t.elapsed() < Duration::from_secs(120) {
        if ics.get("change").await.is_ok_and(|ic| applied(&ic)) {
            return Ok(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err("a change not applied on every router within 120 s".into())
}

/// What a change written live costs and what a roll costs, on 3 real routers with a client
/// sending [`RATE`] acknowledged messages a second through the Service: spec change →
/// `ConfigApplied` (every router answered it holds the change, read back) p50 and p99 over
/// [`CHANGES`] address changes (3 in the smoke mode); client connections dropped per change; controller CPU per
/// change (above its CPU at rest over as long); then one edge-listener change (a roll):
/// reconnects, longest gap, time to applied.
pub(crate) async fn live_rows(rows: &mut Vec<Row>) -> Result<(), Box<dyn std::error::Error>> {
    let changes = crate::scaled(CHANGES, 3);
    // The real node is the machine's one (a lock): every real-node group shares it.
    let cp: &'static ControlPlane = qdr_tests::shared_with_real_node().await;
    routers::routers_on_real_node(cp)?;
    routers::import_router_image(cp)?;
    routers::check_client()?;
    cp.install_crd().await;
    let controller = routers::start_controller(cp, "qdr-controller-live", &[])?;
    let ns: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("change").await));
    let ics: Api<qdr_api::Interconnect> = ns.api();
    let base = json!([{"prefix": "closest", "distribution": "closest"}]);
    routers::apply(cp, &ns.name, &spec(base.clone(), 45680));
    routers::wait_ready(cp, &ns.name, "change", &[&controller]);
    routers::config_applied(ns, "change").await;
    let ip = routers::service_ip(ns, "change").await;
    let log = cp.dir().join("live-steady.log");
    let steady = Steady::start(&url(&ip, 5672), "closest/change", RATE, &log);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut took = Vec::new();
    let cpu_start = cpu_seconds(controller.pid());
    let started = Instant::now();
    for i in 0..changes {
        let addresses = json!([{"prefix": "closest", "distribution": "closest"},
                               {"prefix": format!("bench-{i}"), "distribution": "multicast"}]);
        took.push(change(&ics, &spec(addresses, 45680)).await?);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (busy, cpu_busy) = (started.elapsed(), cpu_seconds(controller.pid()) - cpu_start);
    // The controller at rest for as long: its reads and resyncs, which the changes ride on.
    let cpu_rest_start = cpu_seconds(controller.pid());
    tokio::time::sleep(busy).await;
    let cpu_rest = cpu_seconds(controller.pid()) - cpu_rest_start;
    let traffic = steady.finish();

    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    rows.push(Row {
        what: format!(
            "live change (an address) on 3 real routers: spec change → applied on every router, read back, p50 of {changes}"
        ),
        runs: vec![ms(percentile(&took, 0.5))],
        unit: "ms",
        target: String::new(),
    });
    rows.push(Row {
        what: format!(
            "live change on 3 real routers: spec change → applied on every router, p99 of {changes}"
        ),
        runs: vec![ms(percentile(&took, 0.99))],
        unit: "ms",
        target: "≤ 1000".into(),
    });
    rows.push(Row {
        what: format!(
            "live change at {RATE} msg/s: client connections dropped per change ({changes} changes: {traffic})"
        ),
        runs: vec![(traffic.sender_reconnects + traffic.receiver_reconnects) as f64 / changes as f64],
        unit: "reconnects",
        target: "0".into(),
    });
    rows.push(Row {
        what: format!("live change: acknowledged messages lost over {changes} changes"),
        runs: vec![traffic.lost as f64],
        unit: "messages",
        target: "0".into(),
    });
    rows.push(Row {
        what: format!(
            "live change: controller CPU per change, above its CPU at rest ({:.0} ms in {:.0} s of changes, {:.0} ms at rest)",
            cpu_busy * 1000.0,
            busy.as_secs_f64(),
            cpu_rest * 1000.0
        ),
        runs: vec![((cpu_busy - cpu_rest) * 1000.0 / changes as f64).max(0.0)],
        unit: "ms CPU",
        target: String::new(),
    });

    // For comparison: a change a running router cannot take rolls the 3 routers.
    let steady = Steady::start(&url(&ip, 5672), "closest/change", RATE, &cp.dir().join("roll-steady.log"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rolled = change(&ics, &spec(base, 45681)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let traffic = steady.finish();
    rows.push(Row {
        what: format!(
            "start-up change (the edge listener), a roll of 3 routers: client reconnects ({traffic})"
        ),
        runs: vec![(traffic.sender_reconnects + traffic.receiver_reconnects) as f64],
        unit: "reconnects",
        target: String::new(),
    });
    rows.push(Row::once(
        "start-up change, a roll of 3 routers: spec change → applied on every router",
        rolled.as_secs_f64(),
        "s",
    ));
    // The real node is shared with the next groups, which run their own routers.
    qdr_tests::routers::stop_routers(cp, &[&ns.name])?;
    controller.stop(Duration::from_secs(10));
    Ok(())
}
