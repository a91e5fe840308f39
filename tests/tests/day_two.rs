//! Day two with live traffic on real routers (`qdr_tests::day_two`): a mesh of 3 made by two
//! `qdr-controller` replicas with short credential lifetimes, under a client sending
//! with acknowledgements through the mesh's Service, through scale 3 → 5 → 3, a configuration
//! change written into the running routers (no client may reconnect), the leading controller killed, a router certificate renewal and a full CA rotation.
//! No acknowledged message may be lost, and something must go through in each; the counts and
//! the longest gap between two acknowledgements are printed (figures, not assertions; `make
//! bench` reports them too).

use std::sync::OnceLock;

use qdr_tests::{Process, TestNamespace, day_two};

static CONTROLLERS: OnceLock<[Process; 2]> = OnceLock::new();

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_mesh_keeps_every_acknowledged_message_through_day_two() {
    let cp = qdr_tests::shared_with_real_node().await;
    if CONTROLLERS.get().is_none() {
        let _ = CONTROLLERS.set(day_two::start_controllers(cp).await);
    }
    let controllers: Vec<&Process> = CONTROLLERS.get().unwrap().iter().collect();
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
