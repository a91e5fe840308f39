//! Reading the routers (`QDR_BENCH_ONLY=mesh`): one Interconnect of real routers on the
//! real node read by one release controller, at rest and through a router pod's deletion.

use std::time::{Duration, Instant};

use kube::api::Api;
use qdr_tests::ControlPlane;
use serde_json::json;

use crate::measure::{cpu_seconds, metric, rss_mib};
use crate::phases::{PHASES, Phases};
use crate::table::Row;

/// What reading the routers costs (`docs/mesh-status.md`), on real routers on the real node
/// (root and the router image, as [`crate::day_two::day_two_rows`]): one Interconnect of 3 interior routers
/// read by one release controller. At rest for [`MESH_REST`]: routers asked per minute, the
/// controller's CPU (ms per minute) and resident memory; per read, its duration; and `runs`
/// times, a router pod deleted: the time until `MeshConnected` names its replacement as
/// starting (it stays `Connected`: a deleted router is routine), and until it is `3/3` again.
pub(crate) async fn mesh_rows(rows: &mut Vec<Row>, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    // The real node is the machine's one (a lock): every real-node group shares it.
    let cp: &'static ControlPlane = qdr_tests::shared_with_real_node().await;
    qdr_tests::routers::routers_on_real_node(cp)?;
    qdr_tests::routers::import_router_image(cp)?;
    cp.install_crd().await;
    let health = qdr_tests::components::free_port();
    let controller = qdr_tests::routers::start_controller_on(cp, "qdr-controller-mesh", health, &[])?;
    let ns: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("cost").await));
    qdr_tests::routers::check_client()?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cp.client().await?, &ns.name);
    let phases = Phases::watch(pods.clone(), "");
    // `runs` Interconnects applied one after another, each deleted once measured but the
    // last ("cost"), which the rest of the benchmark reads.
    let mut firsts: Vec<FirstMessage> = Vec::new();
    for i in 0..runs {
        let name = if i + 1 == runs { "cost".to_string() } else { format!("first-{i}") };
        firsts.push(first_message(cp, ns, &controller, &name, &phases).await?);
        if i + 1 < runs {
            qdr_tests::routers::kubectl(
                cp,
                &["delete", "interconnect", &name, "-n", &ns.name, "--wait=false"],
            );
        }
    }
    let column = |f: &dyn Fn(&FirstMessage) -> f64| firsts.iter().map(f).collect::<Vec<f64>>();
    rows.push(Row {
        what: "  apply → the Deployment created (webhook, controller's first pass)".into(),
        runs: column(&|f| f.deployment),
        unit: "s",
        target: String::new(),
    });
    for (i, phase) in PHASES.iter().enumerate() {
        rows.push(Row {
            what: format!("  apply → every router pod: {phase}"),
            runs: column(&|f| f.phases[i]),
            unit: "s",
            target: String::new(),
        });
    }
    rows.push(Row {
        what: "apply → 3 real interior routers Ready (the Interconnect's Ready condition)".into(),
        runs: column(&|f| f.ready),
        unit: "s",
        target: String::new(),
    });
    rows.push(Row {
        what: "  apply → the bench's receiver attached to router 1 (started once the pods have addresses, retrying)".into(),
        runs: column(&|f| f.attached),
        unit: "s",
        target: String::new(),
    });
    rows.push(Row {
        what: "apply → first message across the 3-router mesh (router 0 → router 1, acknowledged; clients waiting from the start)".into(),
        runs: column(&|f| f.first),
        unit: "s",
        target: "≤ 5".into(),
    });
    // `reason message` of MeshConnected.
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
                "jsonpath={.status.conditions[?(@.type==\"MeshConnected\")].reason} {.status.conditions[?(@.type==\"MeshConnected\")].message}",
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
    until(|r| r.starts_with("Connected "), Duration::from_secs(120)).await;
    let scrape = || qdr_tests::components::http_get(health, "/metrics").map(|(_, b)| b).unwrap_or_default();
    let (before, cpu_before) = (scrape(), cpu_seconds(controller.pid()));
    // The moments reads end (the read counter moves), polled every 250 ms: the period
    // between reads, free of where the window's edges fall.
    let started = Instant::now();
    let mut last = metric(&before, "qdr_mesh_read_duration_seconds_count").unwrap_or(0.0);
    let mut ends = Vec::new();
    // The smoke mode: 15 s, too short for two reads at rest (the period is then infinite).
    let rest = crate::scaled(MESH_REST, Duration::from_secs(15));
    while started.elapsed() < rest {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = metric(&scrape(), "qdr_mesh_read_duration_seconds_count").unwrap_or(last);
        if now > last {
            ends.push(started.elapsed().as_secs_f64());
            last = now;
        }
    }
    let (after, cpu_after) = (scrape(), cpu_seconds(controller.pid()));
    let minutes = rest.as_secs_f64() / 60.0;
    let delta = |name: &str| metric(&after, name).unwrap_or(0.0) - metric(&before, name).unwrap_or(0.0);
    let mut periods: Vec<f64> = ends.windows(2).map(|w| w[1] - w[0]).collect();
    if periods.is_empty() && crate::smoke() {
        periods.push(f64::INFINITY);
    } else if periods.is_empty() {
        return Err(format!("{} reads in {rest:?} at rest: too few to time", ends.len()).into());
    }
    let per_read =
        delta("qdr_mesh_router_reads_total") / delta("qdr_mesh_read_duration_seconds_count").max(1.0);
    rows.push(Row {
        what: format!(
            "mesh reads at rest, 1 Interconnect of 3 real routers: time between reads ({} reads in {:.0} s)",
            ends.len(),
            rest.as_secs_f64()
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
        what: "mesh read of 3 real routers (TLS connect + 3 QUERYs each, and 5 of their live entities, concurrently): mean duration".into(),
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
    let mut replaced: Vec<Vec<f64>> = vec![Vec::new(); PHASES.len()];
    for _ in 0..runs {
        let list = pods.list(&kube::api::ListParams::default().labels("application=cost")).await?;
        let victim = list
            .items
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.metadata.name.clone());
        let Some(victim) = victim else { break };
        let t = Instant::now();
        pods.delete(&victim, &kube::api::DeleteParams::default()).await?;
        // A deleted router is routine: the mesh stays Connected, naming the replacement as
        // starting (docs/mesh-status.md), until it is linked.
        until(|r| r.contains("starting"), Duration::from_secs(60)).await;
        noticed.push(t.elapsed().as_secs_f64());
        until(|r| r.starts_with("Connected 3/3") && !r.contains("starting"), Duration::from_secs(180)).await;
        recovered.push(t.elapsed().as_secs_f64());
        let limit = Instant::now() + Duration::from_secs(60);
        while phases.since(t)[PHASES.len() - 1].is_none() && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The replacement is the one pod first seen after the deletion.
        for (i, at) in phases.since(t).into_iter().enumerate() {
            replaced[i].push(secs(at));
        }
    }
    for (phase, runs) in PHASES.iter().zip(replaced) {
        rows.push(Row {
            what: format!("  a router pod deleted → its replacement: {phase}"),
            runs,
            unit: "s",
            target: String::new(),
        });
    }
    rows.push(Row {
        what: "a router pod deleted → MeshConnected names its replacement starting".into(),
        runs: noticed,
        unit: "s",
        target: String::new(),
    });
    rows.push(Row {
        what: "a router pod deleted → MeshConnected 3/3 linked again (replacement started and linked)".into(),
        runs: recovered,
        unit: "s",
        target: "≤ 3".into(),
    });
    // The real node is shared with the next groups, which run their own controller and
    // routers.
    qdr_tests::routers::stop_routers(cp, &[&ns.name])?;
    controller.stop(Duration::from_secs(10));
    Ok(())
}

/// How long the mesh benchmark leaves a connected mesh at rest.
pub(crate) const MESH_REST: Duration = Duration::from_secs(200);

/// `at` in seconds; infinite when the phase was not reached.
fn secs(at: Option<Duration>) -> f64 {
    at.map_or(f64::INFINITY, |d| d.as_secs_f64())
}

/// What one apply took, in seconds from `kubectl apply`: [`first_message`].
struct FirstMessage {
    deployment: f64,
    phases: [f64; PHASES.len()],
    ready: f64,
    attached: f64,
    first: f64,
}

/// Applies Interconnect `name` (3 interior routers) and sends the first message across its
/// mesh once it is Ready: anycast from router 0 to a receiver on router 1, the sender
/// retrying until the address has a route, as a client would.
async fn first_message(
    cp: &'static ControlPlane,
    ns: &qdr_tests::TestNamespace,
    controller: &qdr_tests::Process,
    name: &str,
    phases: &Phases,
) -> Result<FirstMessage, Box<dyn std::error::Error>> {
    let ic = qdr_tests::routers::interconnect(
        name,
        json!({"deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"}}),
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    let applied = Instant::now();
    let created = {
        let (deployments, name) = (deployments.clone(), name.to_string());
        tokio::spawn(async move {
            while !matches!(deployments.get_opt(&name).await, Ok(Some(_))) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            applied.elapsed()
        })
    };
    qdr_tests::routers::apply(cp, &ns.name, &ic);
    // The clients start as soon as the pods have addresses, as clients already waiting for
    // the service would: each retries until its router accepts it, and the sender's message
    // goes once the mesh gives the address a route (qdrouterd grants credit then).
    let routers = loop {
        let routers = qdr_tests::routers::router_pods(ns, name).await;
        if routers.len() == 3 {
            break routers;
        }
        if applied.elapsed() > Duration::from_secs(120) {
            return Err(format!("{name}: 3 router pods with an address not there after 120 s").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let url = |i: usize| qdr_tests::routers::url(&routers[i].1, 5672);
    let (to, from) = (url(1), url(0));
    let receiving = std::thread::spawn(move || receive_first(&to, applied));
    let sending = std::thread::spawn(move || {
        while Instant::now() < applied + Duration::from_secs(120) {
            let out = qdr_tests::routers::client(
                "send",
                &from,
                "closest/first",
                &["--count", "1", "--body-prefix", "first-", "--timeout", "30"],
            )
            .output();
            if out.is_ok_and(|o| o.status.success()) {
                return Some(applied.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    });
    let ready = qdr_tests::routers::wait_ready(cp, &ns.name, name, &[controller]);
    let first = sending.join().map_err(|_| "the sender panicked")?.ok_or("the first message was not sent")?;
    let (attached, body) = receiving.join().map_err(|_| "the receiver panicked")??;
    if body != "first-0" {
        return Err(format!("the first message did not arrive: {body:?}").into());
    }
    let limit = Instant::now() + Duration::from_secs(60);
    while phases.since(applied)[PHASES.len() - 1].is_none() && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(FirstMessage {
        deployment: created.await?.as_secs_f64(),
        phases: phases.since(applied).map(secs),
        ready: ready.as_secs_f64(),
        attached: attached.as_secs_f64(),
        first: first.as_secs_f64(),
    })
}

/// The client's `receive` of one message at `url`, started again until its router accepts
/// it: when it attached (since `applied`) and the body it received.
fn receive_first(url: &str, applied: Instant) -> Result<(Duration, String), String> {
    use std::io::BufRead;
    while applied.elapsed() < Duration::from_secs(120) {
        let mut child =
            qdr_tests::routers::client("receive", url, "closest/first", &["--count", "1", "--timeout", "60"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())?;
        let stdout = child.stdout.take().ok_or("no output")?;
        let mut lines = std::io::BufReader::new(stdout).lines().map_while(Result::ok);
        let first: serde_json::Value =
            lines.next().and_then(|l| serde_json::from_str(&l).ok()).unwrap_or_default();
        if first["ready"] == true {
            let attached = applied.elapsed();
            let body: serde_json::Value =
                lines.next().and_then(|l| serde_json::from_str(&l).ok()).unwrap_or_default();
            let _ = child.wait();
            return Ok((attached, body["body"].as_str().unwrap_or_default().to_string()));
        }
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("no receiver attached at {url} within 120 s"))
}
