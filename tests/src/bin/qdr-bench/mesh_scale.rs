//! Reading the routers at scale (`QDR_BENCH_ONLY=mesh-2000`): 2,000 Interconnects of 3
//! stand-in routers that speak the real protocol, read by one release controller.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use qdr_tests::rbac::Install;
use qdr_tests::{ControlPlane, Process};
use serde_json::json;

use crate::fixtures::{interconnect_resource, interconnects};
use crate::measure::{cpu_seconds, free_port, metric, peak_rss_mib, rss_mib};
use crate::table::Row;

/// Interconnects of the mesh benchmark at scale, and routers of each.
pub(crate) const SCALE_ICS: usize = 2000;

pub(crate) const SCALE_ROUTERS: usize = 3;

/// Namespaces they are spread over (reads are shared fairly across namespaces).
pub(crate) const SCALE_NAMESPACES: usize = 20;

/// How long the connected meshes are left at rest while the controller is measured: 5 minutes
/// and a half, so every mesh is read several times (`resync(6000)`: once a minute) and the
/// reads of a whole resync period of the earlier, slower rates would fit too.
pub(crate) const SCALE_REST: Duration = Duration::from_secs(330);

/// The cost of reading the routers at scale (`QDR_BENCH_ONLY=mesh-2000`): 2,000
/// Interconnects of 3 interior routers each over 20 namespaces, read by one release
/// controller with `--observe-mesh=on`. The routers are stand-ins
/// ([`qdr_tests::amqp_peer`]) that speak the real protocol over TLS with each
/// Interconnect's generated management certificate and answer as honest qdrouterd 1.19
/// routers of a full mesh, a listener at each of 6,000 loopback addresses
/// (`127.10.0.0/16`, never the simulated nodes' addresses nor the controller tests'). Router pods are created by the
/// benchmark as the Deployment controller would (controlled by a ReplicaSet that the
/// Interconnect's Deployment controls, by uid) and made Ready at their address an hour ago, so no router is
/// still joining. Rows: time to all `MeshConnected`, then at rest for [`SCALE_REST`]: reads
/// and routers asked per second, the controller's CPU, its peak RSS and status writes per
/// minute.
pub(crate) async fn mesh_scale_rows(
    rows: &mut Vec<Row>,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use qdr_tests::amqp_peer::{self, Script};
    use std::collections::HashMap;
    use std::net::IpAddr;
    use std::sync::RwLock;

    // The smoke mode: 20 Interconnects over 2 namespaces, 15 s at rest.
    let (ics, spread, rest) =
        crate::scaled((SCALE_ICS, SCALE_NAMESPACES, SCALE_REST), (20, 2, Duration::from_secs(15)));
    let client = cp.client().await?;
    let system = cp.namespace("bench-mesh-ctl").await;
    let mut namespaces = Vec::new();
    for _ in 0..spread {
        namespaces.push(cp.namespace("bench-mesh").await.name.clone());
    }
    let per_ns = ics / spread;
    // (namespace, Interconnect) of IC number i.
    let place = |i: usize| (namespaces[i / per_ns].clone(), format!("ic-{}", i % per_ns));
    let ip_of = |i: usize, r: usize| {
        let k = i * SCALE_ROUTERS + r + 1;
        format!("127.10.{}.{}", k / 250, k % 250 + 1)
    };
    let pod_name = |name: &str, r: usize| format!("{name}-5d8f7b9c6d-r{r}xyz");

    // The stand-ins, answered by address once the Interconnect's certificate exists.
    type Peers = HashMap<IpAddr, (Option<Arc<rustls::ServerConfig>>, Script)>;
    let answers: Arc<RwLock<Peers>> = Arc::default();
    // A listener at each router's own address, not one at every address (`0.0.0.0`): the
    // controller tests hold the management port at their own loopback addresses
    // (`127.1.0.0/16` to `127.5.0.0/16`) while the benchmark's smoke run goes on beside them,
    // and a wildcard listener on a port takes that port at every address.
    let pick: amqp_peer::ByAddress = {
        let answers = answers.clone();
        Arc::new(move |ip| answers.read().unwrap_or_else(|e| e.into_inner()).get(&ip).cloned())
    };
    let mut peers = Vec::with_capacity(ics * SCALE_ROUTERS);
    for i in 0..ics {
        for r in 0..SCALE_ROUTERS {
            let ip = ip_of(i, r);
            let listener = tokio::net::TcpListener::bind((ip.as_str(), 55670))
                .await
                .map_err(|e| format!("a stand-in router at {ip}:55670: {e}"))?;
            peers.push(amqp_peer::serve_by_address(listener, pick.clone()));
        }
    }

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
    for i in 0..ics {
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
            // The ReplicaSet the Deployment controller would make, controlled by the
            // Deployment (pods are routers only through that chain of uids).
            let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), &ns);
            let waited = Instant::now();
            let deployment_uid = loop {
                if let Some(uid) = deployments.get_opt(&name).await?.and_then(|d| d.metadata.uid) {
                    break uid;
                }
                if waited.elapsed() > Duration::from_secs(600) {
                    return Err(format!("no Deployment {ns}/{name}").into());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            let labels = json!({"application": name, "interconnect_cr": name});
            let rs: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-5d8f7b9c6d"), "labels": labels,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                                  "uid": deployment_uid, "controller": true}]},
                "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"containers": [{"name": "router", "image": "quay.io/interconnectedcloud/qdrouterd:1.19.0"}]}}}}))?;
            let rs = Api::namespaced(client.clone(), &ns).create(&PostParams::default(), &rs).await?;
            let rs_uid = rs.metadata.uid.unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let since = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
            for (pod, ip) in pods.iter().zip(&ips) {
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": pod, "labels": labels,
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": format!("{name}-5d8f7b9c6d"), "uid": rs_uid,
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
        let data = s.data.as_ref()?;
        amqp_peer::server_tls(&data.get("tls.crt")?.0, &data.get("tls.key")?.0)
    };
    let mut answered = vec![false; ics];
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
                    let answers = Arc::new(amqp_peer::honest(pod, "interior", &others, 0));
                    // Each router answers through the others too, as a linked mesh's do.
                    amqp_peer::routable(&answers);
                    let script = Script::Honest(answers);
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
        if n == ics {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{n}/{ics} meshes connected after 900 s").into());
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
    // A profiler over the window at rest, when asked (docs/development.md, "Profiling the
    // controller at scale"): the window is what the CPU rows measure, and a fixed delay from
    // the start lands elsewhere on a loaded machine.
    let profiler = match std::env::var("QDR_BENCH_PROFILE") {
        Ok(cmd) if !cmd.is_empty() => {
            eprintln!("mesh at scale: at rest, running QDR_BENCH_PROFILE with QDR_BENCH_PID={pid}");
            Some(Command::new("sh").arg("-c").arg(cmd).env("QDR_BENCH_PID", pid.to_string()).spawn()?)
        }
        _ => None,
    };
    tokio::time::sleep(rest).await;
    let (after, cpu_after, window) = (scrape(), cpu_seconds(pid), at.elapsed().as_secs_f64());
    let status_writes = writes.load(std::sync::atomic::Ordering::SeqCst);
    if let Some(mut p) = profiler {
        // It ends by itself (a profiler given a duration); one still running is interrupted,
        // as a profiler writes what it has on SIGINT.
        if p.try_wait()?.is_none() {
            eprintln!("mesh at scale: QDR_BENCH_PROFILE still runs after the window; interrupting it");
            let _ = Command::new("kill").args(["-INT", &p.id().to_string()]).status();
        }
        let _ = p.wait();
    }
    watch.abort();
    peers.iter().for_each(tokio::task::JoinHandle::abort);
    let delta = |name: &str| metric(&after, name).unwrap_or(0.0) - metric(&before, name).unwrap_or(0.0);
    let (rss, rss_now) = (peak_rss_mib(pid), rss_mib(pid));
    ctl.stop(Duration::from_secs(5));

    let what = format!("{ics} Interconnects × {SCALE_ROUTERS} routers (stand-ins), mesh read");
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
    let asked = delta("qdr_mesh_router_reads_total") / window;
    rows.push(Row::once(
        "mesh at scale, at rest: routers asked per connection (a linked mesh is read through one)",
        delta("qdr_mesh_router_reads_total") / delta("qdr_mesh_router_connections_total").max(1.0),
        "routers",
    ));
    rows.push(Row {
        what: format!(
            "mesh at scale, at rest: time between two reads of one mesh ({} routers ÷ routers asked per second)",
            ics * SCALE_ROUTERS
        ),
        runs: vec![(ics * SCALE_ROUTERS) as f64 / asked.max(0.001)],
        unit: "s",
        target: "≤ 60".into(),
    });
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
    // What the CPU target allows per router at one read a minute of every router: 0.1
    // core ÷ (6,000 routers ÷ 60 s).
    if let Some(last) = rows.last_mut() {
        last.target = format!("≤ {:.1}", 0.1 * 60.0 * 1000.0 / (ics * SCALE_ROUTERS) as f64);
    }
    rows.push(Row::once("mesh at scale, at rest: controller RSS at the end", rss_now, "MiB"));
    rows.push(Row {
        what: "mesh at scale, at rest: status writes per minute".into(),
        runs: vec![status_writes as f64 * 60.0 / window],
        unit: "writes/min",
        target: "0".into(),
    });
    Ok(())
}
