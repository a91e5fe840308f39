//! The controller converging (`QDR_BENCH_ONLY=controller`, `controller-2000`): Interconnects
//! created in one namespace and timed until every one reports `observedGeneration`, with the
//! requests the controller made (from the audit log), its CPU and memory, and the plain
//! API-server throughput that bounds it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use qdr_tests::rbac::Install;
use qdr_tests::{ControlPlane, Process};
use serde_json::{Value, json};

use crate::fixtures::{ic_obj, interconnects};
use crate::measure::{cpu_seconds, free_port, peak_rss_mib, percentile};
use crate::memory::store_bytes;
use crate::table::Row;

/// The controller's `User-Agent` prefix (what the audit log is filtered by).
pub(crate) const CONTROLLER_AGENT: &str = "qdr-controller/";

/// Requests the controller made so far, as the audit log counts them.
pub(crate) fn controller_requests(cp: &ControlPlane) -> Vec<qdr_tests::AuditEvent> {
    cp.requests_by(CONTROLLER_AGENT)
}

/// `verb resource[/subresource]` → count and the API server's mean time for one (from
/// receiving it to answering, audit timestamps), largest count first.
pub(crate) fn breakdown(events: &[qdr_tests::AuditEvent]) -> Vec<(String, usize, Duration)> {
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
pub(crate) fn start_controller(
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
pub(crate) async fn create_interconnects(
    api: &Api<DynamicObject>,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
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
pub(crate) async fn converged(
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
pub(crate) struct Convergence {
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
pub(crate) async fn converge(
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
pub(crate) const CHILD_KINDS: &[(&str, &str, &str, &str)] = &[
    ("", "v1", "ServiceAccount", "serviceaccounts"),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("apps", "v1", "Deployment", "deployments"),
    ("", "v1", "Service", "services"),
    ("networking.k8s.io", "v1", "Ingress", "ingresses"),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
];

/// The API server's own write throughput for the controller's mix: every child the
/// controller wrote in `from` (labelled ours) is written again into a new namespace by a
/// plain client with no controller logic, as the controller's ServiceAccount (`kubeconfig`:
/// so the API server checks its Roles and RoleBindings for escalation the same way), or as
/// the cluster admin (`None`: no escalation checks, which `system:masters` skips),
/// [`qdr_controller::runtime::CONCURRENCY`] at a time, the way the controller writes them
/// (server-side apply, `POST` for Secrets), plus one status write per Interconnect (to
/// copies made beforehand, not timed). Returns requests per second.
pub(crate) async fn plain_throughput(
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

/// Interconnects of the large convergence run.
pub(crate) const BIG: usize = 2000;

pub(crate) async fn convergence_rows(
    rows: &mut Vec<Row>,
    runs: usize,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    // The smoke mode: 20 Interconnects.
    let n: usize = crate::scaled(500, 20);
    let (mut all, mut requests, mut p50, mut p99, mut rss, mut cpu, mut server) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut throughput, mut closeness, mut as_admin) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let c = converge(cp, bin_dir, n, 50, &format!("bench-converge-{run}")).await?;
        let plain = plain_throughput(cp, &c.namespace, Some(&c.kubeconfig)).await?;
        throughput.push(plain);
        as_admin.push(plain_throughput(cp, &c.namespace, None).await?);
        closeness.push(c.seconds / (c.requests as f64 / plain));
        eprintln!(
            "run {run}: {n} converged in {:.1} s, {:.2} requests each; the plain client: {plain:.0} requests/s",
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
    crate::table::machine(format!(
        "a plain client writes {:.0} requests/s to the API server (the controller's mix, {} at a time, as the cluster admin; {:.0} as the controller's ServiceAccount)",
        crate::table::median(&as_admin),
        qdr_controller::runtime::CONCURRENCY,
        crate::table::median(&throughput)
    ));
    rows.push(Row {
        what: format!("controller: {n} Interconnects created at once, all converged"),
        runs: all,
        unit: "s",
        target: "≤ 9".into(),
    });
    rows.push(Row {
        what: format!("controller: API requests per converged Interconnect ({n}, audit log)"),
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
        what: format!("controller peak RSS ({n})"),
        runs: rss,
        unit: "MiB",
        target: "≤ 48".into(),
    });
    rows.push(Row {
        what: format!("controller CPU time for the whole run ({n})"),
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
pub(crate) async fn big_convergence_rows(
    rows: &mut Vec<Row>,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    // The smoke mode: 20.
    let big = crate::scaled(BIG, 20);
    let c = converge(cp, bin_dir, big, 0, "bench-converge-big").await?;
    let stores = store_bytes(cp, &c.namespace, big).await?;
    rows.push(Row {
        what: format!("controller: {big} Interconnects created at once, all converged"),
        runs: vec![c.seconds],
        unit: "s",
        target: "≤ 36".into(),
    });
    rows.push(Row {
        what: format!("controller: API requests per converged Interconnect ({big})"),
        runs: vec![c.requests_per_ic],
        unit: "",
        target: "≤ 15".into(),
    });
    rows.push(Row {
        what: format!("  kube-apiserver + etcd CPU while converging {big}"),
        runs: vec![c.server_cpu / c.seconds],
        unit: "cores",
        target: String::new(),
    });
    rows.push(Row {
        what: format!("controller peak RSS ({big})"),
        runs: vec![c.rss],
        unit: "MiB",
        target: "≤ 96".into(),
    });
    for (kind, bytes) in stores {
        rows.push(Row {
            what: format!("  {kind} store per Interconnect ({big}; JSON bytes of what it keeps)"),
            runs: vec![bytes],
            unit: "B",
            target: String::new(),
        });
    }
    Ok(())
}
