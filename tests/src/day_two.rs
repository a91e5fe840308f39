//! Day two with live traffic on real routers, shared by the test `tests/tests/day_two.rs`
//! (which fails on a lost acknowledged message) and `qdr-bench` (which prints the figures):
//! a mesh of 3 interior routers on the real node, made by two `qdr-controller`
//! replicas (one leads) with short credential lifetimes, while a client sends through the
//! mesh's Service at [`RATE`] messages a second with acknowledgements and a receiver reads,
//! both reconnecting as clients do ([`crate::routers::Steady`]).
//!
//! One after the other ([`run`]): scale 3 → 5 → 3; a configuration change (an address,
//! written into the running routers: no roll, [`LIVE_CHANGE`]); the
//! leading controller killed (the other takes over and reconciles a scale); a router
//! certificate renewal (at 2/3 of [`CERT`], then a roll); a full CA rotation (stage at 2/3 of
//! [`CA`], promote, retire, each step a roll, at least [`OVERLAP`] apart).
//!
//! And, on its own mesh ([`placements`]): `Any` → `Every` → `AntiAffinity` → `Any` under the
//! same traffic, each change make before break.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::json;

use crate::routers::{self, READY_WAIT, Steady, Traffic, apply, rolled_out, service_ip, url, watch_ready};
use crate::{ControlPlane, Process, TestNamespace};

/// The step of [`run`] that changes an address, which the controller writes into the running
/// routers: no router restarts, so no client reconnects.
pub const LIVE_CHANGE: &str = "configuration change (live)";
/// Router certificate lifetime: renewed at 2/3, 100 s after issue.
pub const CERT: Duration = Duration::from_secs(150);
/// CA lifetime: the next CA is staged at 2/3, 160 s after the CA was made.
pub const CA: Duration = Duration::from_secs(240);
/// Least time between the CA's steps.
pub const OVERLAP: Duration = Duration::from_secs(10);
/// Messages a second.
pub const RATE: u32 = 20;
/// The Interconnect's name.
pub const NAME: &str = "live";

/// One operation under traffic and what the client saw.
#[derive(Debug, Clone)]
pub struct Step {
    /// What was done, e.g. `scale 3 to 5 to 3`.
    pub what: &'static str,
    /// From the operation's start until the mesh had settled again.
    pub took: Duration,
    /// The client's counts (sent, acknowledged, received, lost, the longest gap).
    pub traffic: Traffic,
    /// The fewest Ready routers seen meanwhile.
    pub fewest_ready: usize,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({:.1?}): {}; fewest Ready routers {}",
            self.what, self.took, self.traffic, self.fewest_ready
        )
    }
}

/// Prepares `cp` (a control plane with a real node): the AMQP client is checked, the real
/// node opened to routers, the router image imported, the CRD installed, and two
/// controllers (`day-two-0`, `day-two-1`) started with [`CERT`], [`CA`] and [`OVERLAP`].
///
/// # Panics
/// When any of that fails.
pub async fn start_controllers(cp: &ControlPlane) -> [Process; 2] {
    routers::check_client().expect("the AMQP client");
    routers::routers_on_real_node(cp).expect("untainting the real node");
    routers::import_router_image(cp).expect("the router image");
    cp.install_crd().await;
    let lifetimes = [
        format!("--router-cert-lifetime={}s", CERT.as_secs()),
        format!("--router-ca-lifetime={}s", CA.as_secs()),
        format!("--router-ca-overlap={}s", OVERLAP.as_secs()),
    ];
    let args: Vec<&str> = lifetimes.iter().map(String::as_str).collect();
    [0, 1].map(|i| routers::start_controller(cp, &format!("day-two-{i}"), &args).expect("a controller"))
}

/// Patches `spec.deploymentPlan.size` of Interconnect [`NAME`].
fn scale(cp: &ControlPlane, ns: &str, size: usize) {
    let patch = json!({"spec": {"deploymentPlan": {"size": size}}}).to_string();
    let out =
        routers::kubectl(cp, &["patch", "-n", ns, "interconnect", NAME, "--type", "merge", "-p", &patch]);
    assert!(out.status.success(), "scaling to {size}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Waits until [`NAME`] has `size` Ready routers and nothing else.
async fn settled(cp: &ControlPlane, ns: &TestNamespace, size: usize) {
    rolled_out(cp, ns, NAME, size).await;
    crate::eventually(&format!("{size} Ready routers"), READY_WAIT, || async {
        (routers::ready_routers(ns, NAME).await == size).then_some(())
    })
    .await;
}

/// A Secret's `key` as text ("" when missing).
pub fn text(s: &Secret, key: &str) -> String {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// One operation under steady traffic: starts the client, waits 3 s, runs `op`, waits 3 s
/// for the traffic to settle, stops the client.
async fn under_traffic<F, Fut>(
    cp: &ControlPlane,
    ns: &'static TestNamespace,
    what: &'static str,
    op: F,
) -> Step
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ip = service_ip(ns, NAME).await;
    let log = cp.dir().join(format!("steady-{}.log", what.replace(' ', "-")));
    let steady = Steady::start(&url(&ip, 5672), "closest/live", RATE, &log);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (stop, fewest) = watch_ready(ns, NAME);
    let t = Instant::now();
    op().await;
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let fewest_ready = fewest.await.unwrap();
    Step { what, took, traffic: steady.finish(), fewest_ready }
}

/// Creates the mesh of 3 in `ns` and runs the day-two operations one after the other under
/// traffic, calling `each` with every [`Step`] as it ends (a test asserts there, a benchmark
/// records). `controllers` are the two from [`start_controllers`]; the leading one is killed
/// and restarted on the way. Takes about 3.5 minutes.
///
/// # Panics
/// When the mesh is not Ready, an operation does not complete in its time, or `each` panics.
pub async fn run(
    cp: &'static ControlPlane,
    ns: &'static TestNamespace,
    controllers: &[&Process],
    mut each: impl FnMut(&Step),
) -> Vec<Step> {
    let spec = |prefix: &str| {
        routers::interconnect(
            NAME,
            json!({
                "deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"},
                "listeners": [{"port": 5672}],
                "addresses": [{"prefix": "closest", "distribution": "closest"}, {"prefix": prefix}],
            }),
        )
    };
    apply(cp, &ns.name, &spec("first"));
    let ready = routers::wait_ready(cp, &ns.name, NAME, controllers);
    eprintln!("day two: 3 interior routers Ready {ready:.1?} after apply");
    let secrets: Api<Secret> = ns.api();
    let (leaf, ca) = ("live-inter-router-credentials", "live-inter-router-ca");
    let first_leaf = text(&secrets.get(leaf).await.unwrap(), "tls.crt");
    let first_ca = text(&secrets.get(ca).await.unwrap(), "tls.crt");
    let mut steps = Vec::new();
    let mut record = |step: Step| {
        eprintln!("day two: {step}");
        each(&step);
        steps.push(step);
    };

    record(
        under_traffic(cp, ns, "scale 3 to 5 to 3", || async {
            scale(cp, &ns.name, 5);
            settled(cp, ns, 5).await;
            scale(cp, &ns.name, 3);
            settled(cp, ns, 3).await;
        })
        .await,
    );

    record(
        under_traffic(cp, ns, LIVE_CHANGE, || async {
            apply(cp, &ns.name, &spec("second"));
            settled(cp, ns, 3).await;
            routers::config_applied(ns, NAME).await;
        })
        .await,
    );

    record(
        under_traffic(cp, ns, "leading controller killed", || async {
            let leases: Api<Lease> = Api::namespaced(ns.client.clone(), "qdr-operator");
            let lease = leases.get("qdr-operator-controller").await.unwrap();
            let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            let leader = controllers.iter().find(|p| p.name() == holder).expect("a leading controller");
            leader.signal(libc::SIGKILL);
            eprintln!("day two: killed the leader {holder}");
            scale(cp, &ns.name, 4);
            settled(cp, ns, 4).await;
            scale(cp, &ns.name, 3);
            settled(cp, ns, 3).await;
            leader.restart(Duration::from_secs(1)).expect("restarting the killed controller");
        })
        .await,
    );

    record(
        under_traffic(cp, ns, "router certificate renewal", || async {
            crate::eventually("the router certificate's renewal", CERT, || async {
                let now = text(&secrets.get(leaf).await.ok()?, "tls.crt");
                (now != first_leaf).then_some(())
            })
            .await;
            settled(cp, ns, 3).await;
        })
        .await,
    );

    record(
        under_traffic(cp, ns, "CA rotation", || async {
            crate::eventually("the CA rotation's last step", CA + 4 * OVERLAP + READY_WAIT, || async {
                let s = secrets.get(ca).await.ok()?;
                let bundle = text(&s, "ca.crt").matches("BEGIN CERTIFICATE").count();
                (text(&s, "tls.crt") != first_ca && text(&s, "next.crt").is_empty() && bundle == 1)
                    .then_some(())
            })
            .await;
            settled(cp, ns, 3).await;
        })
        .await,
    );
    steps
}

/// Waits until [`NAME`] runs only in a `kind` (`Deployment` or `DaemonSet`), the other kind
/// gone, with `size` routers, all Ready, no other router pod left (not even a terminating
/// one: its clients' reconnects belong to this step), and `Ready` for its current generation.
async fn only_in(cp: &ControlPlane, ns: &TestNamespace, kind: &str, size: usize) {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::Pod;
    let (deployments, daemon_sets): (Api<Deployment>, Api<DaemonSet>) = (ns.api(), ns.api());
    let pods: Api<Pod> = ns.api();
    let ready_now = || {
        let jsonpath = r#"jsonpath={.metadata.generation} {.status.conditions[?(@.type=="Ready")].observedGeneration} {.status.conditions[?(@.type=="Ready")].status}"#;
        let out = routers::kubectl(cp, &["get", "interconnect", NAME, "-n", &ns.name, "-o", jsonpath]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let f: Vec<&str> = text.split_whitespace().collect();
        f.len() == 3 && f[0] == f[1] && f[2] == "True"
    };
    let what = format!("{NAME} only in a {kind} with {size} Ready routers");
    let deadline = Instant::now() + READY_WAIT;
    loop {
        let deployment = deployments.get_opt(NAME).await.ok().flatten().is_some();
        let daemon_set = daemon_sets.get_opt(NAME).await.ok().flatten().is_some();
        let kinds_ok = match kind {
            "Deployment" => deployment && !daemon_set,
            _ => daemon_set && !deployment,
        };
        let all = pods
            .list(&kube::api::ListParams::default().labels(&format!("application={NAME}")))
            .await
            .map_or(usize::MAX, |l| l.items.len());
        if kinds_ok && all == size && routers::ready_routers(ns, NAME).await == size && ready_now() {
            return;
        }
        if Instant::now() > deadline {
            let show =
                |args: &[&str]| String::from_utf8_lossy(&routers::kubectl(cp, args).stdout).into_owned();
            panic!(
                "timed out waiting for {what}:\n{}\n{}",
                show(&["get", "deploy,ds,pods", "-n", &ns.name, "-o", "wide"]),
                show(&["get", "interconnect", NAME, "-n", &ns.name, "-o", "jsonpath={.status.conditions}"])
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Placement changes under traffic, one after the other on a mesh of interior routers
/// [`NAME`] made in `ns`: `Any` (2 routers) → `Every` (a DaemonSet: one router on the one
/// node) → `AntiAffinity` (1) → `Any` (1). Each replaces the workload or rolls it; the old
/// routers must serve until the new ones are Ready (make before break), so a test asserts
/// that the fewest Ready routers seen is at least 1 and nothing acknowledged is lost.
/// `each` is called with every [`Step`] as it ends. About 3 minutes.
///
/// # Panics
/// When the mesh is not Ready, a change does not complete within [`READY_WAIT`], or `each`
/// panics.
pub async fn placements(
    cp: &'static ControlPlane,
    ns: &'static TestNamespace,
    controllers: &[&Process],
    mut each: impl FnMut(&Step),
) -> Vec<Step> {
    let spec = |plan: serde_json::Value| {
        routers::interconnect(
            NAME,
            json!({
                "deploymentPlan": plan,
                "listeners": [{"port": 5672}],
                "addresses": [{"prefix": "closest", "distribution": "closest"}],
            }),
        )
    };
    let any = json!({"role": "interior", "size": 2, "placement": "Any"});
    apply(cp, &ns.name, &spec(any));
    routers::wait_ready(cp, &ns.name, NAME, controllers);
    only_in(cp, ns, "Deployment", 2).await;
    let mut steps = Vec::new();
    let changes: [(&'static str, serde_json::Value, &str, usize); 3] = [
        ("placement Any (2) to Every", json!({"role": "interior", "placement": "Every"}), "DaemonSet", 1),
        (
            "placement Every to AntiAffinity (1)",
            json!({"role": "interior", "size": 1, "placement": "AntiAffinity"}),
            "Deployment",
            1,
        ),
        // Any (1), as the figures have been measured since: scaling up with the template,
        // the Deployment controller first scales the AntiAffinity ReplicaSet, whose second
        // router cannot be scheduled on the one node (with the image's auto_mesh.py, which
        // the controller no longer uses, that Pending pod kept every new router waiting).
        (
            "placement AntiAffinity (1) to Any (1)",
            json!({"role": "interior", "size": 1, "placement": "Any"}),
            "Deployment",
            1,
        ),
    ];
    for (what, plan, kind, size) in changes {
        let step = under_traffic(cp, ns, what, || async {
            apply(cp, &ns.name, &spec(plan));
            only_in(cp, ns, kind, size).await;
        })
        .await;
        eprintln!("placements: {step}");
        each(&step);
        steps.push(step);
    }
    steps
}
