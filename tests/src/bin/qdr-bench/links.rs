//! Links across clusters (`QDR_BENCH_ONLY=links`): real routers on the real node, one
//! release controller serving both sides (two namespaces stand for two clusters, as in
//! `tests/tests/routers/across.rs`; only the token crosses).

use std::time::{Duration, Instant};

use qdr_tests::ControlPlane;
use qdr_tests::links::{api, grant_token, link_site, listed, settled};
use qdr_tests::routers::{self, Receiver, qdmanage, router_pods, send, url};
use serde_json::json;

use crate::table::Row;

/// Open inter-router connections of router pod `pod` of `ns`, as it reports them.
fn inter_router(cp: &ControlPlane, ns: &str, pod: &str) -> Option<usize> {
    let rows = qdmanage(cp, ns, pod, &["query", "--type=connection"]).ok()?;
    Some(rows.as_array()?.iter().filter(|c| c["role"] == "inter-router" && c["opened"] == true).count())
}

/// What linking a site costs in time, `runs` times on one offering hub (an interior
/// Interconnect of one router): a grant's token applied on the other side with its Link and
/// an Interconnect of one router (docs/multi-cluster.md's three steps) → the first message
/// from the site's router to a receiver on the hub's, acknowledged; → the grant listing the
/// site; and the grant deleted → the site's inter-router connection closed (the revocation:
/// one pass, the 3 s pause for the trust file, the hub router's 5 s preStop).
pub(crate) async fn links_rows(rows: &mut Vec<Row>, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    // The real node is the machine's one (a lock): every real-node group shares it.
    let cp: &'static ControlPlane = qdr_tests::shared_with_real_node().await;
    routers::routers_on_real_node(cp)?;
    routers::import_router_image(cp)?;
    cp.install_crd().await;
    routers::check_client()?;
    let health = qdr_tests::components::free_port();
    let controller = routers::start_controller_on(cp, "qdr-controller-links", health, &[])?;
    let a: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("links-a").await));
    routers::apply(cp, &a.name, &routers::interconnect("hub", json!({"deploymentPlan": {"size": 1}})));
    routers::wait_ready(cp, &a.name, "hub", &[&controller]);
    let host = format!("hub.{}.svc.cluster.local", a.name);
    let (mut first, mut operational, mut listing, mut closed) = (vec![], vec![], vec![], vec![]);
    for i in 0..runs {
        let grant = format!("site-{i}");
        let token = grant_token(cp, a, &grant, &format!("s{i}"), &host, json!({})).await;
        // The first grant rolls the hub once (its listener then trusts the sites' file).
        settled(cp, a, "hub", 1).await;
        routers::wait_ready(cp, &a.name, "hub", &[&controller]);
        let b = cp.namespace(&format!("links-b{i}")).await;
        let hub = router_pods(a, "hub").await.remove(0);
        let address = format!("links/first-{i}");
        let at_hub = Receiver::attach(&url(&hub.1, 5672), &address, 1, &[]);
        let applied = Instant::now();
        link_site(cp, &b.name, &token, &grant);
        let spoke = loop {
            if let Some(p) = router_pods(&b, "spoke").await.into_iter().next() {
                break p;
            }
            if applied.elapsed() > Duration::from_secs(120) {
                return Err("the site's router got no IP".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        send(&url(&spoke.1, 5672), &address, 0..1, "first-", Duration::from_secs(120), &[]);
        first.push(applied.elapsed().as_secs_f64());
        if at_hub.bodies() != ["first-0"] {
            return Err("the first message did not arrive".into());
        }
        let links = api(&b, "Link", "links");
        loop {
            let l = links.get("to-hub").await?;
            if qdr_tests::links::condition(&l, "Operational").is_some_and(|c| c["status"] == "True") {
                break;
            }
            if applied.elapsed() > Duration::from_secs(120) {
                return Err(format!("the Link is not Operational: {}", l.data["status"]).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        operational.push(applied.elapsed().as_secs_f64());
        listed(a, &grant, &format!("s{i}.{grant}.{}", a.name), Duration::from_secs(120)).await;
        listing.push(applied.elapsed().as_secs_f64());
        if std::env::var_os("QDR_BENCH_LOG").is_some() {
            eprintln!(
                "run {i}: listed after {:.1?}; controller:\n{}",
                applied.elapsed(),
                controller.log_tail(60)
            );
        }
        // The revocation.
        let deleted = Instant::now();
        api(a, "AccessGrant", "accessgrants").delete(&grant, &Default::default()).await?;
        while inter_router(cp, &b.name, &spoke.0) != Some(0) {
            if deleted.elapsed() > Duration::from_secs(120) {
                return Err("the revoked site is still linked".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        closed.push(deleted.elapsed().as_secs_f64());
        // Measured: its router goes, so the next site's run meets only the hub's.
        routers::stop_routers(cp, &[&b.name])?;
    }
    let row = |what: &str, runs: Vec<f64>, target: &str| Row {
        what: what.into(),
        runs,
        unit: "s",
        target: target.into(),
    };
    rows.push(row(
        "link across: token, Link and a 1-router Interconnect applied → first message site → hub, acknowledged",
        first,
        "",
    ));
    rows.push(row("link across: token applied → Link Operational", operational, ""));
    rows.push(row(
        "link across: token applied → the grant lists the site",
        listing,
        "≤ 15 (5 s reads while awaited)",
    ));
    rows.push(row(
        "link across: grant deleted → the site's connection closed (revocation)",
        closed,
        "≤ 68 (the tests' bound: 3 s pause + 5 s preStop + 60 s margin)",
    ));
    // The real node is shared with the next groups, which run their own controller and
    // routers.
    routers::stop_routers(cp, &[&a.name])?;
    controller.stop(Duration::from_secs(10));
    Ok(())
}
