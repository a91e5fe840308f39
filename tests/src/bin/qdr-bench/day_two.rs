//! Day-two operations on real routers with live traffic (`QDR_BENCH_ONLY=day-two`): for
//! every step of `qdr_tests::day_two`, the longest gap between acknowledgements and the
//! acknowledged messages lost.

use qdr_tests::{ControlPlane, Options};

use crate::table::Row;

/// Day two with live traffic on real routers (`qdr_tests::day_two`, the scenario of
/// `tests/tests/day_two.rs`), once (about 4 minutes): for each operation the longest gap
/// between two acknowledgements (s) and the acknowledged messages lost (must be 0). Needs a
/// real node (root) and the router image (`make router-image`).
pub(crate) async fn day_two_rows(rows: &mut Vec<Row>) -> Result<(), Box<dyn std::error::Error>> {
    let cp: &'static ControlPlane = Box::leak(Box::new(
        ControlPlane::start(Options { audit: true, real_nodes: 1, ..Options::default() }).await?,
    ));
    let controllers = qdr_tests::day_two::start_controllers(cp).await;
    let controllers: Vec<&qdr_tests::Process> = controllers.iter().collect();
    let ns: &'static qdr_tests::TestNamespace = Box::leak(Box::new(cp.namespace("live").await));
    let rate = qdr_tests::day_two::RATE;
    for step in qdr_tests::day_two::run(cp, ns, &controllers, |_| ()).await {
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
    }
    Ok(())
}
