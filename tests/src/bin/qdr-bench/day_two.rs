//! Day-two operations on real routers with live traffic (`QDR_BENCH_ONLY=day-two`): for
//! every step of `qdr_tests::day_two` (its `run`, then its `placements`), the longest gap
//! between acknowledgements, the acknowledged messages lost and the clients' reconnects.

use qdr_tests::ControlPlane;

use crate::table::Row;

/// Day two with live traffic on real routers (`qdr_tests::day_two`, the scenario of
/// `tests/tests/day_two.rs`), once (about 4 minutes): for each operation the longest gap
/// between two acknowledgements (s), the acknowledged messages lost (must be 0) and the
/// clients' reconnects; then the placement changes. Needs a
/// real node (root) and the router image (`make router-image`).
pub(crate) async fn day_two_rows(rows: &mut Vec<Row>) -> Result<(), Box<dyn std::error::Error>> {
    // The real node is the machine's one (a lock): every real-node group shares it.
    let cp: &'static ControlPlane = qdr_tests::shared_with_real_node().await;
    let controllers = qdr_tests::day_two::start_controllers(cp).await;
    let controllers: Vec<&qdr_tests::Process> = controllers.iter().collect();
    let ns: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("live").await));
    let rate = qdr_tests::day_two::RATE;
    let mut steps = qdr_tests::day_two::run(cp, ns, &controllers, |_| ()).await;
    // The placement changes with controllers of the default certificate lifetimes: the short
    // ones above would add a renewal's roll in the middle.
    for c in &controllers {
        c.stop(std::time::Duration::from_secs(10));
    }
    let placement = qdr_tests::routers::start_controller(cp, "placements-0", &[])?;
    let moved: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("moves").await));
    steps.extend(qdr_tests::day_two::placements(cp, moved, &[&placement], |_| ()).await);
    // The real node is shared with the next groups, which run their own controller and
    // routers.
    qdr_tests::routers::stop_routers(cp, &[&ns.name, &moved.name])?;
    placement.stop(std::time::Duration::from_secs(10));
    for step in steps {
        let t = &step.traffic;
        rows.push(Row {
            what: format!(
                "day two at {rate} msg/s, {}: longest gap between acknowledgements ({} sent, {} acknowledged, {} received)",
                step.what, t.sent, t.acknowledged, t.received
            ),
            runs: vec![t.longest_gap_s],
            unit: "s",
            target: String::new(),
        });
        rows.push(Row {
            what: format!("day two at {rate} msg/s, {}: acknowledged messages lost", step.what),
            runs: vec![t.lost as f64],
            unit: "messages",
            target: "0".into(),
        });
        rows.push(Row {
            what: format!(
                "day two at {rate} msg/s, {}: client reconnects (sender + receiver; fewest Ready routers {})",
                step.what, step.fewest_ready
            ),
            runs: vec![(t.sender_reconnects + t.receiver_reconnects) as f64],
            unit: "reconnects",
            target: String::new(),
        });
    }
    Ok(())
}
