//! Day two with live traffic on real routers (`qdr_tests::day_two`): a mesh of 3 made by two
//! `qdr-controller` replicas with short credential lifetimes, under a client sending
//! with acknowledgements through the mesh's Service, through scale 3 → 5 → 3, a configuration
//! change written into the running routers (no client may reconnect), the leading controller killed, a router certificate renewal and a full CA rotation.
//! No acknowledged message may be lost, and something must go through in each; the counts and
//! the longest gap between two acknowledgements are printed (figures, not assertions; `make
//! bench` reports them too).
//!
//! And across clusters, on the same controllers: a site linked with a token keeps its
//! messages flowing through a full rotation of the offering side's CA, without its admin
//! applying anything again.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use qdr_tests::links::{api, condition, grant_token, link_site, settled};
use qdr_tests::routers::{self, Receiver, send, service_ip, url};
use qdr_tests::{ControlPlane, Process, TestNamespace, day_two};
use serde_json::json;

static CONTROLLERS: OnceLock<[Process; 2]> = OnceLock::new();
static START: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// The control plane with the real node, and the two controllers with short lifetimes
/// (started once for both tests).
async fn cluster() -> (&'static ControlPlane, Vec<&'static Process>) {
    let cp = qdr_tests::shared_with_real_node().await;
    START
        .get_or_init(|| async {
            let _ = CONTROLLERS.set(day_two::start_controllers(cp).await);
        })
        .await;
    (cp, CONTROLLERS.get().unwrap().iter().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_mesh_keeps_every_acknowledged_message_through_day_two() {
    let (cp, controllers) = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("live").await));
    let steps = day_two::run(cp, ns, &controllers, |step| {
        assert_eq!(step.traffic.lost, 0, "{}: acknowledged messages lost: {}", step.what, step.traffic);
        assert!(step.traffic.acknowledged > 0, "{}: nothing went through: {}", step.what, step.traffic);
        if step.what == day_two::LIVE_CHANGE {
            let reconnects = step.traffic.sender_reconnects + step.traffic.receiver_reconnects;
            assert_eq!(reconnects, 0, "{}: a client reconnected: {}", step.what, step.traffic);
        }
    })
    .await;
    assert_eq!(steps.len(), 5);
}

/// Cluster A's hub (one router) lets site b in with a token; b's spoke links to it through
/// the hub's Service. Then, under traffic from b to A, A's inter-router CA rotates fully
/// (stage at 2/3 of [`day_two::CA`], promote, retire: the hub's certificate is signed by a
/// CA that b's token never named). b applies nothing again: its link must stay up, nothing
/// acknowledged may be lost, and a message must cross after the rotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_site_keeps_flowing_through_a_rotation_of_the_offering_sides_ca() {
    let (cp, controllers) = cluster().await;
    let a = cp.namespace("rotate-a").await;
    let b = cp.namespace("rotate-b").await;
    routers::apply(cp, &a.name, &routers::interconnect("hub", json!({"deploymentPlan": {"size": 1}})));
    routers::wait_ready(cp, &a.name, "hub", &controllers);
    let secrets: Api<Secret> = a.api();
    let ca_name = "hub-inter-router-ca";
    let first_ca = day_two::text(&secrets.get(ca_name).await.unwrap(), "tls.crt");
    let host = format!("hub.{}.svc.cluster.local", a.name);
    let token = grant_token(cp, &a, "site-b", "b", &host, json!({})).await;
    settled(cp, &a, "hub", 1).await;
    let trusted = day_two::text(&token, qdr_api::links::token::CA_KEY);
    assert!(trusted.contains(first_ca.trim()), "the token trusts the hub's CA");
    link_site(cp, &b.name, &token, "site-b");
    routers::wait_ready(cp, &b.name, "spoke", &controllers);
    let links = api(&b, "Link", "links");
    let operational = || async {
        let l = links.get("to-hub").await.unwrap();
        condition(&l, "Operational").is_some_and(|c| c["status"] == "True").then_some(l)
    };
    qdr_tests::eventually("the Link Operational", Duration::from_secs(120), operational).await;

    let (spoke_url, hub_url) =
        (url(&service_ip(&b, "spoke").await, 5672), url(&service_ip(&a, "hub").await, 5672));
    let log = cp.dir().join("steady-across-ca-rotation.log");
    let steady = routers::Steady::across(&spoke_url, &hub_url, "rotate/steady", day_two::RATE, &log);
    let t = Instant::now();
    let rotated = qdr_tests::eventually(
        "the hub's CA rotated (promoted and retired)",
        day_two::CA + 4 * day_two::OVERLAP + routers::READY_WAIT,
        || async {
            let s = secrets.get(ca_name).await.ok()?;
            let now = day_two::text(&s, "tls.crt");
            let bundle = day_two::text(&s, "ca.crt").matches("BEGIN CERTIFICATE").count();
            (now != first_ca && day_two::text(&s, "next.crt").is_empty() && bundle == 1).then_some(now)
        },
    )
    .await;
    settled(cp, &a, "hub", 1).await;
    eprintln!("across: the hub's CA rotated {:.1?} after the traffic started", t.elapsed());
    // The site never trusted the new CA itself: what it was given is what it holds.
    assert!(!trusted.contains(rotated.trim()), "the site's token names the new CA");
    // Operational on A's router of now (the Link's status follows the next read of B's
    // routers after A's last roll).
    let hub = routers::router_pods(&a, "hub").await;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let l = links.get("to-hub").await.unwrap();
        let up = condition(&l, "Operational").is_some_and(|c| c["status"] == "True");
        if up && l.data["status"]["remoteRouter"] == hub[0].0.as_str() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Link is not Operational on {} after the rotation: {}",
            hub[0].0,
            l.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let traffic = steady.finish();
    eprintln!("across: A's CA rotation under traffic from site b: {traffic}");
    assert_eq!(traffic.lost, 0, "acknowledged messages lost: {traffic}");
    let at_hub = Receiver::attach(&hub_url, "rotate/after", 3, &[]);
    send(&spoke_url, "rotate/after", 0..3, "after-", Duration::from_secs(60), &[]);
    assert_eq!(at_hub.bodies().len(), 3, "messages across after the rotation");
}
