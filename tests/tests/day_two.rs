//! Day two with live traffic on real routers: a mesh of 3 interior routers on the real node,
//! made by two release `qdr-controller` replicas (one leads) with short credential lifetimes,
//! while a client sends through the mesh's Service at a steady rate with acknowledgements and
//! a receiver reads, both reconnecting as clients do (`qdr_tests::routers::Steady`).
//!
//! One after the other: scale 3 → 5 → 3; a configuration change (a roll); the leading
//! controller killed (the other takes over and reconciles a scale); a router certificate
//! renewal (at 2/3 of [`CERT`], then a roll); a full CA rotation (stage at 2/3 of [`CA`],
//! promote, retire, each step a roll, at least [`OVERLAP`] apart). For each: the messages sent,
//! acknowledged and received, and the longest gap between two acknowledgements, printed; no
//! acknowledged message may be lost. The gaps are figures, not assertions.

use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use qdr_tests::routers::{
    self, READY_WAIT, Steady, Traffic, apply, rolled_out, service_ip, url, watch_ready,
};
use qdr_tests::{ControlPlane, Process, TestNamespace};
use serde_json::json;

static START: OnceLock<Instant> = OnceLock::new();

macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[{:6.1}s] {}", START.get_or_init(Instant::now).elapsed().as_secs_f64(), format!($($arg)*))
    };
}

/// Router certificate lifetime: renewed at 2/3, 100 s after issue.
const CERT: Duration = Duration::from_secs(150);
/// CA lifetime: the next CA is staged at 2/3, 160 s after the CA was made.
const CA: Duration = Duration::from_secs(240);
/// Least time between the CA's steps.
const OVERLAP: Duration = Duration::from_secs(10);
/// Messages a second.
const RATE: u32 = 20;

static CONTROLLERS: OnceLock<[Process; 2]> = OnceLock::new();

async fn cluster() -> &'static ControlPlane {
    let cp = qdr_tests::shared_with_real_node().await;
    if CONTROLLERS.get().is_none() {
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
        let started = [0, 1]
            .map(|i| routers::start_controller(cp, &format!("day-two-{i}"), &args).expect("a controller"));
        let _ = CONTROLLERS.set(started);
    }
    cp
}

fn controllers() -> Vec<&'static Process> {
    CONTROLLERS.get().map(|c| c.iter().collect()).unwrap_or_default()
}

/// Patches `spec.deploymentPlan.size` of Interconnect `live`.
fn scale(cp: &ControlPlane, ns: &str, size: usize) {
    let patch = json!({"spec": {"deploymentPlan": {"size": size}}}).to_string();
    let out =
        routers::kubectl(cp, &["patch", "-n", ns, "interconnect", "live", "--type", "merge", "-p", &patch]);
    assert!(out.status.success(), "scaling to {size}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Waits until `live` has `size` Ready routers and nothing else.
async fn settled(cp: &ControlPlane, ns: &TestNamespace, size: usize) {
    rolled_out(cp, ns, "live", size).await;
    qdr_tests::eventually(&format!("{size} Ready routers"), READY_WAIT, || async {
        (routers::ready_routers(ns, "live").await == size).then_some(())
    })
    .await;
}

/// A Secret's `key` as text ("" when missing).
fn text(s: &Secret, key: &str) -> String {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// One operation under steady traffic: starts the client, runs `op`, waits 3 s for the
/// traffic to settle, stops the client; prints the counts and the fewest Ready routers.
async fn under_traffic<F, Fut>(cp: &ControlPlane, ns: &'static TestNamespace, what: &str, op: F) -> Traffic
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ip = service_ip(ns, "live").await;
    let log = cp.dir().join(format!("steady-{}.log", what.replace(' ', "-")));
    let steady = Steady::start(&url(&ip, 5672), "closest/live", RATE, &log);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (stop, fewest) = watch_ready(ns, "live");
    let t = Instant::now();
    op().await;
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let fewest = fewest.await.unwrap();
    let traffic = steady.finish();
    say!("{what} ({took:.1?}): {traffic}; fewest Ready routers {fewest}");
    assert_eq!(traffic.lost, 0, "{what}: acknowledged messages lost: {traffic}");
    assert!(traffic.acknowledged > 0, "{what}: nothing went through: {traffic}");
    traffic
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_mesh_keeps_every_acknowledged_message_through_day_two() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("live").await));
    let spec = |prefix: &str| {
        routers::interconnect(
            "live",
            json!({
                "deploymentPlan": {"role": "interior", "size": 3, "placement": "Any"},
                "listeners": [{"port": 5672}],
                "addresses": [{"prefix": "closest", "distribution": "closest"}, {"prefix": prefix}],
            }),
        )
    };
    apply(cp, &ns.name, &spec("first"));
    let ready = routers::wait_ready(cp, &ns.name, "live", &controllers());
    say!("3 interior routers Ready {ready:.1?} after apply");
    let secrets: Api<Secret> = ns.api();
    let (leaf, ca) = ("live-inter-router-credentials", "live-inter-router-ca");
    let first_leaf = text(&secrets.get(leaf).await.unwrap(), "tls.crt");
    let first_ca = text(&secrets.get(ca).await.unwrap(), "tls.crt");

    under_traffic(cp, ns, "scale 3 to 5 to 3", || async {
        scale(cp, &ns.name, 5);
        settled(cp, ns, 5).await;
        scale(cp, &ns.name, 3);
        settled(cp, ns, 3).await;
    })
    .await;

    under_traffic(cp, ns, "configuration change", || async {
        apply(cp, &ns.name, &spec("second"));
        settled(cp, ns, 3).await;
    })
    .await;

    under_traffic(cp, ns, "leading controller killed", || async {
        let leases: Api<Lease> = Api::namespaced(ns.client.clone(), "qdr-operator");
        let lease = leases.get("qdr-operator-controller").await.unwrap();
        let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        let leader = controllers().into_iter().find(|p| p.name() == holder).expect("a leading controller");
        leader.signal(libc::SIGKILL);
        say!("killed the leader {holder}");
        scale(cp, &ns.name, 4);
        settled(cp, ns, 4).await;
        scale(cp, &ns.name, 3);
        settled(cp, ns, 3).await;
        leader.restart(Duration::from_secs(1)).expect("restarting the killed controller");
    })
    .await;

    under_traffic(cp, ns, "router certificate renewal", || async {
        qdr_tests::eventually("the router certificate's renewal", CERT, || async {
            let now = text(&secrets.get(leaf).await.ok()?, "tls.crt");
            (now != first_leaf).then_some(())
        })
        .await;
        settled(cp, ns, 3).await;
    })
    .await;

    under_traffic(cp, ns, "CA rotation", || async {
        qdr_tests::eventually("the CA rotation's last step", CA + 4 * OVERLAP + READY_WAIT, || async {
            let s = secrets.get(ca).await.ok()?;
            let bundle = text(&s, "ca.crt").matches("BEGIN CERTIFICATE").count();
            (text(&s, "tls.crt") != first_ca && text(&s, "next.crt").is_empty() && bundle == 1).then_some(())
        })
        .await;
        settled(cp, ns, 3).await;
    })
    .await;
}
