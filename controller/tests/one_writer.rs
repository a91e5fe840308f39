//! One writer to the routers, with real controller processes and a stand-in router: a
//! leader stopped in the middle of a visit writes nothing once another leads. Its own test
//! binary (its own control plane): the other tests' controllers watch every namespace.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, holder_of, interconnects, takeover_of};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use qdr_tests::Process;
use serde_json::json;

/// Matches the controllers' `--lease-duration` (`common::controller_command_for`).
const LEASE: Duration = Duration::from_secs(4);

/// The shared control plane with the CRD, namespace `<name>` for the Interconnect, and the
/// install of controllers that watch it and elect a leader by Lease `<name>-lease` in
/// namespace `<name>-system`: the Interconnect's namespace, the Leases, the install.
async fn setup(
    name: &str,
) -> (&'static qdr_tests::ControlPlane, qdr_tests::TestNamespace, Api<Lease>, qdr_tests::rbac::Install) {
    let cp = qdr_tests::shared_with_controller_manager().await;
    cp.install_crd().await;
    let system = cp.namespace(&format!("{name}-system")).await;
    let ns = cp.namespace(name).await;
    let install = qdr_tests::rbac::Install {
        lease: format!("{name}-lease"),
        watch: vec![ns.name.clone()],
        ..qdr_tests::rbac::Install::new(&system.name)
    };
    (cp, ns, system.api(), install)
}

/// One writer to the routers: a leader stopped (SIGSTOP) in the middle of a visit that
/// writes a router's live entities, slowly, loses the Lease; the next leader's first visit
/// brings the router to the spec whatever the first left half written; and once resumed
/// (SIGCONT), the deposed leader sends the router nothing more: its term's fence closed
/// while it was stopped. The router is a stand-in (`qdr_tests::amqp_peer`) over TLS with the
/// Interconnect's management certificate, answering each write 250 ms late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_mid_visit_writes_nothing_once_another_leads() {
    use qdr_tests::amqp_peer::{self, Script};
    let (cp, ns, leases, install) = setup("writer").await;
    let spawn = |id: &str| {
        let cmd = common::controller_command_observing(cp, &install, id, common::free_port(), true);
        Process::spawn(id, cmd, &cp.dir().join(format!("{id}.log"))).unwrap()
    };
    let a = spawn("writer-a");
    let t = Instant::now();
    while holder_of(&leases, "writer-lease").await.as_deref() != Some("writer-a") {
        assert!(t.elapsed() < Duration::from_secs(30), "writer-a not leading:\n{}", a.log_tail(30));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = spawn("writer-b");
    let address = |p: &str| json!({"prefix": p});
    let spec = |prefixes: &[String]| {
        json!({"deploymentPlan": {"role": "interior", "size": 1},
               "addresses": prefixes.iter().map(|p| address(p)).collect::<Vec<_>>()})
    };
    common::create_interconnect(&ns, "writer", spec(&["first".to_string()])).await;
    let pod = common::pods_of(&ns, "writer", 1).await.remove(0);
    let tls = common::router_tls(&ns, "writer").await;
    let answers = std::sync::Arc::new(amqp_peer::honest(&pod, "interior", &[], 0));
    let slow = Duration::from_millis(250);
    let peer = common::router_at("127.9.0.1", &tls, Script::SlowWrites(answers, slow)).await;
    common::run_pod(&ns, &pod, "127.9.0.1").await;
    common::condition_with_reason(&ns, "writer", "ConfigApplied", "Applied").await;

    // Twelve more addresses: a visit of twelve CREATEs, 3 s at the router's pace.
    let many: Vec<String> =
        (0..13).map(|i| if i == 0 { "first".into() } else { format!("more-{i}") }).collect();
    let before = amqp_peer::writes(&pod).len();
    interconnects(&ns.client, &ns.name)
        .patch("writer", &PatchParams::default(), &Patch::Merge(json!({"spec": spec(&many)})))
        .await
        .unwrap();
    let first = eventually("the visit under way", Duration::from_secs(20), || async {
        let w = amqp_peer::writes(&pod);
        (w.len() >= before + 2).then(|| w[before].clone())
    })
    .await;
    a.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let written_by_a = amqp_peer::writes(&pod).len() - before;
    let (next, took) = takeover_of(&leases, "writer-lease", "writer-a", stopped, 6 * LEASE).await;
    assert_eq!(next, "writer-b");
    // The next leader's first visit completes the change, whatever writer-a left.
    common::condition_with_reason(&ns, "writer", "ConfigApplied", "Applied").await;
    let held = amqp_peer::held(&pod);
    let addresses = held.keys().filter(|(entity, _)| entity == "router.config.address").count();
    assert_eq!(addresses, many.len(), "{held:?}");
    // writer-a resumes: whatever it was doing, it writes nothing more.
    a.signal(libc::SIGCONT);
    let resumed = Instant::now();
    tokio::time::sleep(2 * LEASE).await;
    let writes = amqp_peer::writes(&pod);
    let of_a: Vec<&amqp_peer::Write> =
        writes[before..].iter().filter(|w| w.connection == first.connection).collect();
    let b_first = writes[before..].iter().find(|w| w.connection != first.connection).map(|w| w.at);
    // Late: received after writer-b's first write, which comes at least a lease after the
    // stop (a write writer-a sent just before it was stopped arrives long before that, however
    // loaded the machine; one it sent after it resumed, after writer-b's visit).
    let late: Vec<&&amqp_peer::Write> = of_a.iter().filter(|w| b_first.is_some_and(|b| w.at > b)).collect();
    eprintln!(
        "one writer: writer-a sent {} writes, {written_by_a} of them received by the SIGSTOP; writer-b took the Lease {took:?} \
         after it and wrote {} more; writer-a resumed {:?} later and sent nothing",
        of_a.len(),
        writes.len() - before - of_a.len(),
        resumed - stopped,
    );
    assert!(late.is_empty(), "writer-a wrote after it was stopped: {late:?}");
    assert!(b_first.is_some(), "writer-b wrote nothing");
    assert_eq!(amqp_peer::held(&pod), held, "the router holds what writer-b left");
    assert!(a.exited().is_none() && b.exited().is_none());
    peer.abort();
    for p in [a, b] {
        p.stop(Duration::from_secs(10));
    }
}

/// Matches the controllers' `--renew-deadline` (`common::controller_command_for`): a leader's
/// fence closes at most this long after the start of its last renew.
const RENEW_DEADLINE: Duration = Duration::from_secs(3);

/// One writer at every point of a write: a leader stopped (SIGSTOP) at [`STOPS`] moments of
/// visits that write a router's live entities as fast as it answers, each time held stopped
/// past its renew deadline, sends nothing after it resumes (SIGCONT) on any connection it
/// had opened: a `CREATE` or `DELETE` checked against the fence before the stop and still
/// on its way through the AMQP client's tasks is refused at the socket, not sent late. One
/// controller and a stand-in router over TLS that answers at once; the moments are random,
/// so that some fall between a write's check and its bytes leaving the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_at_any_point_of_its_writes_sends_none_of_them_after() {
    use qdr_tests::amqp_peer::{self, Script};
    const STOPS: usize = 12;
    let (cp, ns, leases, install) = setup("stopped").await;
    let cmd = common::controller_command_observing(cp, &install, "stopped-a", common::free_port(), true);
    let a = Process::spawn("stopped-a", cmd, &cp.dir().join("stopped-a.log")).unwrap();
    // Sixty addresses a round, the other round's sixty: a visit of 120 writes.
    let set = |round: usize| -> Vec<String> { (0..60).map(|i| format!("round-{}-{i}", round % 2)).collect() };
    let spec = |prefixes: &[String]| {
        json!({"deploymentPlan": {"role": "interior", "size": 1},
               "addresses": prefixes.iter().map(|p| json!({"prefix": p})).collect::<Vec<_>>()})
    };
    common::create_interconnect(&ns, "stopped", spec(&set(0))).await;
    let pod = common::pods_of(&ns, "stopped", 1).await.remove(0);
    let tls = common::router_tls(&ns, "stopped").await;
    let answers = std::sync::Arc::new(amqp_peer::honest(&pod, "interior", &[], 0));
    let peer = common::router_at("127.9.0.2", &tls, Script::Honest(answers)).await;
    common::run_pod(&ns, &pod, "127.9.0.2").await;
    let holds = |round: usize| {
        let pod = pod.clone();
        async move {
            let want: std::collections::BTreeSet<String> = set(round).into_iter().collect();
            let held: std::collections::BTreeSet<String> = amqp_peer::held(&pod)
                .into_iter()
                .filter(|((entity, _), _)| entity == "router.config.address")
                .filter_map(|(_, attributes)| attributes.get("prefix")?.as_str().map(String::from))
                .collect();
            (held == want).then_some(())
        }
    };
    eventually("the first visit applied", Duration::from_secs(60), || holds(0)).await;
    let mut late = Vec::new();
    let mut stopped_mid_visit = 0;
    for round in 1..=STOPS {
        let before = amqp_peer::writes(&pod).len();
        interconnects(&ns.client, &ns.name)
            .patch("stopped", &PatchParams::default(), &Patch::Merge(json!({"spec": spec(&set(round))})))
            .await
            .unwrap();
        let started = Instant::now();
        while amqp_peer::writes(&pod).len() == before {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "round {round}: no write:\n{}",
                a.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_micros(rand::random_range(0..20_000))).await;
        a.signal(libc::SIGSTOP);
        let written = amqp_peer::writes(&pod).len() - before;
        stopped_mid_visit += usize::from(written < 120);
        // Past the renew deadline (the fence's end at the latest), with a margin for a loaded
        // machine to deliver what had left before the stop.
        tokio::time::sleep(RENEW_DEADLINE + Duration::from_secs(1)).await;
        let opened = amqp_peer::connections();
        a.signal(libc::SIGCONT);
        let resumed = Instant::now();
        // Whatever was queued leaves at once on resuming; the next term's writes need the
        // Lease again and come on connections of their own.
        eventually(&format!("round {round} applied by the next term"), Duration::from_secs(60), || {
            holds(round)
        })
        .await;
        let writes = amqp_peer::writes(&pod);
        late.extend(
            writes[before..]
                .iter()
                .filter(|w| w.at > resumed && w.connection <= opened)
                .cloned()
                .map(|w| (round, w)),
        );
    }
    eprintln!(
        "one writer: {STOPS} stops, {stopped_mid_visit} of them mid-visit; {} writes sent after a resume",
        late.len()
    );
    assert!(late.is_empty(), "writes sent after the leader resumed past its fence: {late:?}");
    assert!(stopped_mid_visit > 0, "no stop fell in a visit: the test proves nothing");
    assert!(a.exited().is_none(), "{}", a.log_tail(30));
    assert!(holder_of(&leases, "stopped-lease").await.is_some());
    peer.abort();
    a.stop(Duration::from_secs(10));
}
