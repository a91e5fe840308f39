//! The mesh reader against routers that misbehave on purpose (`qdr_tests::amqp_peer`): every
//! hostile answer ends as a short reason within the read's timeout, and an honest router
//! with 10,000 clients is read whole, a page at a time. The last test runs the controller
//! process under the same routers (on pods of a control plane, at loopback addresses) and
//! checks its memory, its health and that every other namespace is still served.

use std::sync::Arc;
use std::time::{Duration, Instant};

use qdr_controller::mesh::reader::{Plan, Target, observe, read_router};
use qdr_controller::mesh::{Observation, pool::Pool};
use qdr_tests::amqp_peer::{self, Script};

/// The read timeout these tests give: short, so the slow cases are quick.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Time allowed an honest read, or a visit that writes a router's live entities, in the
/// tests of what it reads or writes (not of how long it takes): a read of 10,000 clients is
/// 40 pages and a visit a few dozen round trips, which a loaded 2-core machine running a
/// debug build (CI, stop 89: 10,000 clients counted by the heap test) stretches past
/// [`TIMEOUT`].
const VISIT_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest a reason may be: the reader cuts router text to 256 bytes, and adds its own words.
const MAX_REASON: usize = 600;

async fn peer(script: Script) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (addr, amqp_peer::serve(listener, None, script))
}

/// What reading the peer of `script` with `timeout` ends with, and how long it took.
async fn read(
    script: Script,
    timeout: Duration,
) -> (Result<qdr_controller::mesh::RouterView, String>, Duration) {
    let (addr, task) = peer(script).await;
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let result = read_router(stream, "hostile-test", timeout, None, None).await.map_err(|e| e.to_string());
    let took = started.elapsed();
    task.abort();
    (result, took)
}

/// The most heap one read of a router may take (one message held by the guard, its payload,
/// the client's copy, a decoded page, the connection's buffers: docs/mesh-status.md, "A
/// router is not trusted"), whatever the router sends.
const READ_HEAP_BOUND: u64 = 8 << 20;

/// Reads the peer of `script` with `timeout` on a thread of its own (a current-thread
/// runtime, the peer on another thread): what the read ended with, the most heap it took
/// and how long it took.
fn read_counted(
    script: Script,
    timeout: Duration,
) -> (Result<qdr_controller::mesh::RouterView, String>, u64, Duration) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let peer_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let (addr, task) = peer(script).await;
            addr_tx.send(addr).unwrap();
            let _ = stop_rx.await;
            task.abort();
        });
    });
    let addr = addr_rx.recv().unwrap();
    let reader = std::thread::spawn(move || {
        // The read on this thread alone, so what it allocates is all it allocates
        // (allocation-counter counts by thread).
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let started = Instant::now();
        let mut result = Err(String::new());
        let heap = allocation_counter::measure(|| {
            result = rt.block_on(async {
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                // Its connectors asked for too: the largest round of requests (four queries).
                let linking = qdr_controller::mesh::reader::Linking::default();
                (read_router(stream, "heap-test", timeout, Some(&linking), None).await)
                    .map_err(|e| e.to_string())
            });
        });
        (result, heap.bytes_max, started.elapsed())
    });
    let out = reader.join().unwrap();
    let _ = stop_tx.send(());
    peer_thread.join().unwrap();
    out
}

/// Each way a router's bytes could make the client decode far more than they weigh is
/// refused before it is decoded, and no read (hostile or honest) takes more than
/// [`READ_HEAP_BOUND`] of heap.
#[test]
fn no_answer_makes_a_read_take_more_than_its_heap_bound() {
    let cases: Vec<(&str, Script, Option<&str>)> = vec![
        (
            "message-annotations of 15 lists of 65,535 nulls",
            Script::AnnotationBomb(honest_mesh_router(0)),
            Some("message-annotations with more than 64 items"),
        ),
        (
            "message-annotations holding an array of 10,000,000 nulls in 10 bytes",
            Script::NullArray(honest_mesh_router(0), 10_000_000),
            Some("message-annotations with more than 64 items"),
        ),
        (
            "application-properties of 100,000 entries",
            Script::PropertiesBomb(honest_mesh_router(0), 100_000),
            Some("application-properties with more than 64 items"),
        ),
        (
            // The most a round of requests lets a router send: an answer just under the
            // message bound to each of its four queries, all in flight at once.
            "every answer of a round a status of 1,000,000 bytes",
            Script::Status(1_000_000),
            Some("answered 500"),
        ),
        ("an honest router with 10,000 clients", Script::Honest(honest_mesh_router(10_000)), None),
    ];
    for (what, script, refused) in cases {
        // A hostile answer is cut at once; an honest one is given the time its 40 pages take.
        let timeout = if refused.is_some() { TIMEOUT } else { VISIT_TIMEOUT };
        let (result, peak, took) = read_counted(script, timeout);
        println!(
            "{what}: peak heap {:.2} MiB, {took:.1?}: {:?}",
            peak as f64 / (1 << 20) as f64,
            result.as_ref().map(|v| v.clients)
        );
        match refused {
            Some(says) => {
                let why = result.expect_err(what);
                assert!(why.contains(says), "{what}: {why}");
                assert!(why.len() <= MAX_REASON, "{what}: a reason of {} bytes", why.len());
            }
            None => assert!(result.is_ok(), "{what}: {result:?}"),
        }
        assert!(peak < READ_HEAP_BOUND, "{what}: the read took {peak} bytes of heap");
        assert!(took <= 2 * timeout, "{what}: took {took:?}");
    }
}

fn honest_mesh_router(clients: usize) -> Arc<amqp_peer::Answers> {
    Arc::new(amqp_peer::honest("router-b", "interior", &["router-a", "router-c"], clients))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_router_is_read_with_its_links_and_clients() {
    let (view, took) = read(Script::Honest(honest_mesh_router(2)), VISIT_TIMEOUT).await;
    let view = view.unwrap();
    println!("honest router read in {took:.1?}");
    assert_eq!(&*view.id, "router-b");
    let peers: Vec<&str> = view.inter_router.iter().map(|l| &*l.peer).collect();
    assert_eq!(peers, ["router-a", "router-c"]);
    assert_eq!(view.clients, 2);
    assert_eq!(view.reaches.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_clients_are_read_a_page_at_a_time() {
    let (view, took) = read(Script::Honest(honest_mesh_router(10_000)), VISIT_TIMEOUT).await;
    let view = view.unwrap();
    println!("router with 10,000 clients read in {took:.1?} ({} pages)", 10_002usize.div_ceil(256));
    assert_eq!(view.clients, 10_000);
    assert_eq!(view.inter_router.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_answer_ends_as_a_short_reason_within_the_timeout() {
    let cases: Vec<(&str, Script, &[&str])> = vec![
        (
            "10,000 connections in one answer",
            Script::IgnoresCount(honest_mesh_router(10_000)),
            &["more than 256 rows", "larger than", "more than 16384 items"],
        ),
        (
            "983 KB of message annotations",
            Script::AnnotationBomb(honest_mesh_router(0)),
            &["message-annotations with more than 64 items"],
        ),
        (
            "an array of 4,294,967,295 nulls in message annotations",
            Script::NullArray(honest_mesh_router(0), u32::MAX),
            &["message-annotations with more than 64 items"],
        ),
        (
            "100,000 application properties",
            Script::PropertiesBomb(honest_mesh_router(0), 100_000),
            &["application-properties with more than 64 items"],
        ),
        ("a 100,000-deep list", Script::DeepList(100_000), &["nested deeper than 16"]),
        // Decoded, it aborted the whole controller (a stack overflow): found by fuzz_answers.rs.
        ("a described value in the body", Script::Described, &["a described value inside a message section"]),
        ("a 1,500-deep map in a detach", Script::DeepPerformative(1_500), &["nested deeper than 16"]),
        ("a 100,000-deep map in a detach", Script::DeepPerformative(100_000), &["a frame of"]),
        ("a 512 MiB body", Script::Huge(512 << 20), &["a message larger than 1048576 bytes"]),
        ("a body trickled a byte a second", Script::Trickle(honest_mesh_router(0)), &["no answer within 2s"]),
        ("a peer that accepts and never speaks", Script::Silent, &["no answer within 2s"]),
        // Closed with requests unread, the connection is reset: read as an end or a reset.
        (
            "a peer that closes mid-frame",
            Script::CloseMidFrame,
            &["closed the connection mid-frame", "the connection ended mid-frame: Connection reset"],
        ),
        ("garbage bytes", Script::Garbage, &["not an AMQP 1.0 protocol header"]),
        ("a non-200 status with a 1 MiB description", Script::Status(1 << 20), &["larger than"]),
        ("a non-200 status with a 100 KB description", Script::Status(100_000), &["answered 500: xxxx"]),
    ];
    for (what, script, says) in cases {
        let (result, took) = read(script, TIMEOUT).await;
        let why = result.expect_err(what);
        println!("{what}: {:.1?}: {why}", took);
        assert!(says.iter().any(|s| why.contains(s)), "{what}: {why}");
        assert!(why.len() <= MAX_REASON, "{what}: a reason of {} bytes", why.len());
        // The deadline is the read's timeout, and nothing is read after it: twice the
        // timeout is ample on a loaded machine, and a reader that hung would pass it.
        assert!(took <= 2 * TIMEOUT, "{what}: took {took:?}");
    }
}

/// The live entities the routers of `spec` (defaulted) hold, as the controller gives them to
/// a visit (`reconcile/read.rs`), with a made-up configuration hash.
fn live_entities(spec: serde_json::Value) -> qdr_controller::mesh::reader::Live {
    use qdr_controller::mesh::live;
    let mut spec: qdr_api::InterconnectSpec = serde_json::from_value(spec).unwrap();
    qdr_api::apply_defaults("live", &mut spec);
    let config = qdr_api::router_config::router_config(&spec).with_management_listener();
    qdr_controller::mesh::reader::Live {
        desired: Arc::new(live::desired(&config)),
        keep: Arc::new(live::start_up_names(&config)),
        hash: "1".repeat(64),
    }
}

/// The live entities of a spec written into an honest router: created once, read back as
/// held, and nothing written at the next visit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_router_takes_the_live_entities_and_holds_them_at_the_next_visit() {
    let want = live_entities(serde_json::json!({
        "deploymentPlan": {"role": "interior"},
        "listeners": [{"port": 5672}, {"name": "extra", "port": 5673}],
        "addresses": [{"prefix": "a", "distribution": "multicast"}, {"prefix": "b"}],
        "connectors": [{"name": "broker", "host": "broker", "port": 5672, "routeContainer": true, "cost": 2}],
        "linkRoutes": [{"prefix": "queue", "direction": "in", "connection": "broker"}],
        "autoLinks": [{"address": "jobs", "direction": "out", "connection": "broker"}],
    }));
    let answers = Arc::new(amqp_peer::honest("router-live", "interior", &[], 0));
    let visit = || async {
        let (addr, task) = peer(Script::Honest(answers.clone())).await;
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let view = read_router(stream, "live-test", VISIT_TIMEOUT, None, Some(&want)).await;
        task.abort();
        view.unwrap().live.unwrap()
    };
    let first = visit().await;
    assert!(first.applied && first.refused.is_none(), "{first:?}");
    assert_eq!((first.created, first.deleted), (want.desired.len(), 0));
    assert_eq!(want.desired.len(), 7, "2 listeners, 2 addresses, a connector, a link route, an auto-link");
    let again = visit().await;
    assert!(again.applied, "{again:?}");
    assert_eq!((again.created, again.deleted), (0, 0), "read back as held: nothing to write");
}

/// One visit of the router `pod` at `addr` through [`observe`], as the controller makes it:
/// its live entities `want` written, under `fence` when given.
async fn visit_as_the_controller(
    addr: std::net::SocketAddr,
    pool: &Pool,
    pod: &str,
    want: qdr_controller::mesh::reader::Live,
    fence: Option<&qdr_controller::fence::Fence>,
) -> Observation {
    let target = [Target {
        pod: pod.into(),
        ip: Some(addr.ip().to_string()),
        ready: true,
        linking: None,
        live: Some(want),
        checked: None,
    }];
    let plan = Plan {
        port: addr.port(),
        namespace: pod,
        pool,
        timeout: VISIT_TIMEOUT,
        deadline: tokio::time::Instant::now() + VISIT_TIMEOUT,
        tls: None,
        fence,
        recheck: qdr_controller::mesh::live::RECHECK,
    };
    observe(&target, &plan).await.remove(pod).unwrap()
}

/// A visit of router `pod` at `addr` as the controller makes it, given the last whole read
/// of its live entities (`checked`) and how long that is relied on (`recheck`): what it
/// did to them.
async fn visit_checked(
    addr: std::net::SocketAddr,
    pod: &str,
    want: &qdr_controller::mesh::reader::Live,
    checked: Option<qdr_controller::mesh::live::Checked>,
    recheck: Duration,
) -> qdr_controller::mesh::live::Outcome {
    let pool = Pool::new(2, 2);
    let target = [Target {
        pod: pod.into(),
        ip: Some(addr.ip().to_string()),
        ready: true,
        linking: None,
        live: Some(want.clone()),
        checked,
    }];
    let plan = Plan {
        port: addr.port(),
        namespace: pod,
        pool: &pool,
        timeout: VISIT_TIMEOUT,
        deadline: tokio::time::Instant::now() + VISIT_TIMEOUT,
        tls: None,
        fence: None,
        recheck,
    };
    match observe(&target, &plan).await.remove(pod) {
        Some(Observation::Answered(v)) => *v.live.expect("live entities were given"),
        other => panic!("{other:?}"),
    }
}

/// Reading only what changed: a visit to the same router process, for the same
/// configuration, within the recheck of a whole read of its live entities does not ask for
/// them again (none of their six queries); once the recheck is over, or when the router
/// restarted since (its `uptimeSeconds` counts from a later start), they are read whole
/// again and the new read vouches from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_read_whole_recently_is_not_asked_for_its_live_entities_again() {
    use qdr_controller::mesh::live::RECHECK;
    let want = live_entities(serde_json::json!({
        "deploymentPlan": {"role": "interior"},
        "addresses": [{"prefix": "a", "distribution": "multicast"}],
    }));
    let id = "router-recheck";
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let up_since = |ago: u64| {
        Script::Honest(Arc::new(amqp_peer::started_at(amqp_peer::honest(id, "interior", &[], 0), now - ago)))
    };
    let asked = || amqp_peer::queries(id, "router.config.address");

    let (addr, task) = peer(up_since(600)).await;
    let first = visit_checked(addr, id, &want, None, RECHECK).await;
    assert!(first.applied && first.created > 0, "{first:?}");
    let checked = first.checked.expect("a whole read that found the configuration vouches");
    let read_whole = asked();
    assert!(read_whole >= 1, "the first visit reads the addresses");

    let again = visit_checked(addr, id, &want, Some(checked), RECHECK).await;
    assert!(again.applied && (again.created, again.deleted) == (0, 0), "{again:?}");
    assert_eq!(again.checked, Some(checked), "it still relies on the first read");
    assert_eq!(asked(), read_whole, "the same process within the recheck: not asked again");

    let over = visit_checked(addr, id, &want, Some(checked), Duration::ZERO).await;
    assert!(over.applied, "{over:?}");
    assert!(asked() > read_whole, "the recheck over: asked again");
    assert_ne!(over.checked, Some(checked), "the new read vouches from now on");
    task.abort();

    // The same router id, up for 1 s only: a restarted router.
    let before = asked();
    let (addr, task) = peer(up_since(1)).await;
    let restarted = visit_checked(addr, id, &want, Some(checked), RECHECK).await;
    assert!(restarted.applied, "{restarted:?}");
    assert!(asked() > before, "a restarted router is read whole at once");
    task.abort();
}

/// One writer: a visit whose leadership term is over (its fence closed) sends no `CREATE`
/// or `DELETE` to the router and ends as not leading; the same visit under an open fence
/// writes every entity, and an unfenced one then finds them all held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visit_outside_the_leadership_term_writes_nothing_to_the_router() {
    use qdr_controller::fence::Fence;
    let want = live_entities(serde_json::json!({
        "deploymentPlan": {"role": "interior"},
        "addresses": [{"prefix": "a", "distribution": "multicast"}, {"prefix": "b"}],
        "connectors": [{"name": "broker", "host": "broker", "port": 5672, "routeContainer": true}],
    }));
    let answers = Arc::new(amqp_peer::honest("router-fenced", "interior", &[], 0));
    let (addr, task) = peer(Script::Honest(answers)).await;
    let pool = Pool::new(2, 2);
    let visit = |fence: Option<Fence>| {
        let (want, pool) = (want.clone(), &pool);
        async move { visit_as_the_controller(addr, pool, "router-fenced", want, fence.as_ref()).await }
    };
    let closed = Fence::default();
    match visit(Some(closed)).await {
        Observation::Unreachable(why) => assert!(why.contains("not leading"), "{why}"),
        other => panic!("a fenced visit answered {other:?}"),
    }
    let open = Fence::default();
    open.hold_until(tokio::time::Instant::now() + Duration::from_secs(60));
    let Observation::Answered(view) = visit(Some(open)).await else { panic!("the leader's visit") };
    let outcome = view.live.unwrap();
    // Nothing was written by the fenced visit: the leader's creates them all.
    assert_eq!((outcome.created, outcome.deleted), (want.desired.len(), 0), "{outcome:?}");
    assert!(outcome.applied);
    let Observation::Answered(view) = visit(None).await else { panic!("the next visit") };
    assert_eq!(view.live.unwrap().created, 0);
    task.abort();
}

/// What the controller keeps of one read of 256 routers (the most it reads) that each
/// report a distinct id of the longest kept length for every node and link (255 nodes, 256
/// inter-router and 256 edge links): before the views are interned (each router's copy of
/// every id) and after ([`qdr_controller::reconcile::intern`]: an id once, at most
/// [`qdr_controller::mesh::MAX_FOREIGN_IDS`] not of the pods). Measured on this thread.
#[test]
fn the_views_of_256_hostile_routers_are_kept_within_their_budget() {
    use qdr_controller::mesh::{Link, Mode, RouterView, router_id};
    use std::collections::BTreeMap;
    let pods: Vec<String> = (0..256).map(|i| format!("router-mesh-production-{i:05x}")).collect();
    let hostile = |r: usize, k: usize| router_id(&format!("{r:03}-{k:04}-{}", "x".repeat(80)));
    let links = |r: usize, from: usize| -> Vec<Link> {
        (0..256)
            .map(|k| Link { peer: hostile(r, from + k).into(), outgoing: k % 2 == 0, encrypted: true })
            .collect()
    };
    let build = || -> BTreeMap<String, Observation> {
        (pods.iter().enumerate())
            .map(|(i, pod)| {
                let view = RouterView {
                    id: pod.as_str().into(),
                    mode: Mode::Interior,
                    reaches: (0..255).map(|k| hostile(i, k).into()).collect(),
                    inter_router: links(i, 1000),
                    edge: links(i, 2000),
                    clients: 0,
                    links_blocked: 0,
                    deliveries_stuck: 0,
                    live: None,
                    deferred: 0,
                    routed: false,
                    detailed: (0..qdr_controller::mesh::MAX_DETAILED)
                        .map(|k| qdr_controller::mesh::Connection {
                            peer: hostile(i, k).into(),
                            outgoing: true,
                            role: "inter-router",
                            host: "h".repeat(qdr_controller::mesh::MAX_DETAIL_TEXT),
                            tls: Some("t".repeat(qdr_controller::mesh::MAX_DETAIL_TEXT)),
                            uptime: Some(1),
                            user: Some("u".repeat(qdr_controller::mesh::MAX_DETAIL_TEXT)),
                        })
                        .collect(),
                };
                (pod.clone(), Observation::Answered(view))
            })
            .collect()
    };
    let mut raw = BTreeMap::new();
    let before = allocation_counter::measure(|| raw = build()).bytes_current;
    drop(raw);
    let mut kept = BTreeMap::new();
    let after = allocation_counter::measure(|| {
        kept = qdr_controller::reconcile::intern(build(), pods.iter().map(String::as_str));
    })
    .bytes_current;
    let mib = |b: i64| b as f64 / (1 << 20) as f64;
    println!(
        "one read of 256 hostile routers kept: {:.1} MiB as answered, {:.1} MiB interned",
        mib(before),
        mib(after)
    );
    assert!(after < 6 << 20, "{:.1} MiB", mib(after));
    assert!(after * 3 < before, "interning keeps {:.1} of {:.1} MiB", mib(after), mib(before));
    drop(kept);
}

/// Two specs whose live entities differ in the connector `broker` (its cost), which takes
/// the link route and the auto-link naming it along: a visit from the first to the second
/// deletes three entities, then creates three.
fn broker_specs() -> (qdr_controller::mesh::reader::Live, qdr_controller::mesh::reader::Live) {
    let spec = |cost: i64, extra: &[&str]| {
        let mut addresses = vec![serde_json::json!({"prefix": "a", "distribution": "multicast"})];
        addresses.extend(extra.iter().map(|p| serde_json::json!({"prefix": p})));
        live_entities(serde_json::json!({
            "deploymentPlan": {"role": "interior"},
            "addresses": addresses,
            "connectors": [{"name": "broker", "host": "broker", "port": 5672, "routeContainer": true, "cost": cost}],
            "linkRoutes": [{"prefix": "queue", "direction": "in", "connection": "broker"}],
            "autoLinks": [{"address": "jobs", "direction": "out", "connection": "broker"}],
        }))
    };
    (spec(2, &[]), spec(3, &["refused-here"]))
}

/// What the honest peer of router `id` holds: (entity, name, cost) for each entity.
fn held_by(id: &str) -> Vec<(String, String, Option<i64>)> {
    (amqp_peer::held(id).into_iter())
        .map(|((entity, name), a)| (entity, name, a.get("cost").and_then(serde_json::Value::as_i64)))
        .collect()
}

/// No half-applied change: a visit whose connection is cut after its first `DELETE` (the
/// auto-link gone, nothing created yet) ends saying what the router lacks, the reader reads
/// it again at the first recheck, and the next visit puts everything back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visit_cut_between_its_deletes_and_its_creates_says_what_is_missing() {
    use qdr_controller::reconcile::{MESH_RECHECK, half_applied, unsettled_after};
    let (old, new) = broker_specs();
    let answers = Arc::new(amqp_peer::honest("router-cut", "interior", &[], 0));
    let pool = Pool::new(2, 2);
    let visit = |script: Script, want: qdr_controller::mesh::reader::Live| {
        let pool = &pool;
        async move {
            let (addr, task) = peer(script).await;
            let o = visit_as_the_controller(addr, pool, "router-cut", want, None).await;
            task.abort();
            o
        }
    };
    let Observation::Answered(_) = visit(Script::Honest(answers.clone()), old.clone()).await else {
        panic!("the first visit")
    };
    let before = held_by("router-cut");
    assert_eq!(before.len(), old.desired.len());
    let cut = visit(Script::CutAfterWrites(answers.clone(), 1), new.clone()).await;
    let Observation::Unreachable(why) = &cut else { panic!("a cut visit answered {cut:?}") };
    println!("cut visit: {why}");
    assert!(half_applied(&cut), "{why}");
    assert!(why.starts_with("1 live entities missing until the next visit (autoLink "), "{why}");
    assert_eq!(held_by("router-cut").len(), before.len() - 1, "the auto-link went, nothing came");
    // Read again at the first recheck, however long the mesh had been unsettled.
    let next =
        qdr_controller::reconcile::recheck(unsettled_after(6, false, true, true), Duration::from_secs(60));
    assert_eq!(next, MESH_RECHECK);
    let again = visit(Script::Honest(answers), new.clone()).await;
    let Observation::Answered(view) = again else { panic!("the next visit: {again:?}") };
    assert!(view.live.unwrap().applied);
    assert_eq!(held_by("router-cut").len(), new.desired.len());
}

/// A refused `CREATE` undoes the visit: the router holds what it held before, attributes
/// and all (the changed connector back at its old cost, not the new one the visit made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_create_leaves_the_router_with_its_old_entities() {
    let (old, new) = broker_specs();
    let answers = Arc::new(amqp_peer::honest("router-refuses", "interior", &[], 0));
    let visit = |script: Script, want: qdr_controller::mesh::reader::Live| async move {
        let (addr, task) = peer(script).await;
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let view = read_router(stream, "refuse-test", VISIT_TIMEOUT, None, Some(&want)).await;
        task.abort();
        view.unwrap().live.unwrap()
    };
    assert!(visit(Script::Honest(answers.clone()), old.clone()).await.applied);
    let before = held_by("router-refuses");
    let refused = visit(Script::RefuseCreate(answers.clone(), "refused-here".into()), new).await;
    println!("refused visit: {refused:?}");
    assert!(refused.refused.as_deref().is_some_and(|r| r.contains("400")), "{refused:?}");
    assert!(!refused.applied);
    assert_eq!(held_by("router-refuses"), before, "the router keeps its old entities");
    let (_, broker, cost) = before.iter().find(|(e, _, _)| e == "connector").unwrap();
    assert_eq!((broker.as_str(), *cost), ("broker", Some(2)));
}

/// A router whose live entities (what the controller writes into it,
/// docs/live-configuration.md) flood the answers costs the controller its byte budget and
/// no more: the visit ends with why, within the timeout, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_flooding_its_live_entities_is_cut_at_the_budget() {
    use qdr_controller::mesh::live::{Kind, MAX_HELD_BYTES};
    use qdr_controller::mesh::reader::Live;
    let mut answers = amqp_peer::honest("router-f", "interior", &[], 0);
    let long = "a".repeat(250);
    let names = Kind::Address.attributes();
    let rows: Vec<serde_json::Value> = (0..4096)
        .map(|i| {
            let mut row = vec![serde_json::json!(format!("{i:05}{long}"))];
            row.extend((1..names.len()).map(|_| serde_json::json!(long)));
            serde_json::Value::Array(row)
        })
        .collect();
    answers.insert(
        "router.config.address".into(),
        serde_json::json!({"attributeNames": names, "results": rows}),
    );
    let (addr, task) = peer(Script::Honest(Arc::new(answers))).await;
    let live =
        Live { desired: Arc::new(Vec::new()), keep: Arc::new(Default::default()), hash: "0".repeat(64) };
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let result = read_router(stream, "hostile-test", TIMEOUT, None, Some(&live)).await;
    let took = started.elapsed();
    task.abort();
    let why = result.expect_err("a flood of live entities is refused").to_string();
    println!("4,096 addresses of 2.3 KB each: refused in {took:.1?}: {why}");
    assert!(why.contains(&format!("pass {MAX_HELD_BYTES} bytes")), "{why}");
    assert!(why.len() <= MAX_REASON, "a reason of {} bytes", why.len());
    assert!(took <= 2 * TIMEOUT, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_routers_of_one_namespace_do_not_delay_another_namespace() {
    // 40 silent routers in one namespace, one honest router in another, read at once with
    // the controller's pool (8 slots, 4 a namespace).
    let (silent, silent_task) = peer(Script::Silent).await;
    let (honest, honest_task) = peer(Script::Honest(honest_mesh_router(0))).await;
    let pool = Pool::new(8, 4);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let plan = |namespace, port| Plan {
        port,
        namespace,
        pool: &pool,
        timeout: TIMEOUT,
        deadline,
        tls: None,
        fence: None,
        recheck: qdr_controller::mesh::live::RECHECK,
    };
    let silent_targets: Vec<Target> = (0..40)
        .map(|i| Target {
            pod: format!("silent-{i}"),
            ip: Some(silent.ip().to_string()),
            ready: true,
            linking: None,
            live: None,
            checked: None,
        })
        .collect();
    let honest_target = [Target {
        pod: "router-b".into(),
        ip: Some(honest.ip().to_string()),
        ready: true,
        linking: None,
        live: None,
        checked: None,
    }];
    let (silent_plan, honest_plan) = (plan("tenant-a", silent.port()), plan("tenant-b", honest.port()));
    let silent_read = observe(&silent_targets, &silent_plan);
    let honest_read = async {
        // Start once the silent routers hold their share.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let seen = observe(&honest_target, &honest_plan).await;
        (seen, started.elapsed())
    };
    let started = Instant::now();
    let (silent_seen, (honest_seen, honest_took)) = tokio::join!(silent_read, honest_read);
    let silent_took = started.elapsed();
    println!("honest router read in {honest_took:.1?} beside 40 silent ones (those took {silent_took:.1?})");
    assert!(matches!(honest_seen["router-b"], Observation::Answered(_)), "{honest_seen:?}");
    // Read without waiting for any silent router's timeout.
    assert!(honest_took < TIMEOUT, "the honest router waited {honest_took:?}");
    // The silent ones, 4 at a time: 10 rounds of the timeout.
    assert!(silent_took >= 10 * TIMEOUT, "{silent_took:?}: more than 4 slots for one namespace");
    assert!(silent_seen.values().all(|o| matches!(o, Observation::Unreachable(_))));
    silent_task.abort();
    honest_task.abort();
}

mod common;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use qdr_tests::ControlPlane;
use serde_json::json;

/// The management port every router pod is read on.
const MANAGEMENT_PORT: u16 = common::ROUTER_MANAGEMENT_PORT;
/// The controller's own read timeout (`qdr_controller::reconcile::READ_TIMEOUT`).
const READ_TIMEOUT: Duration = qdr_controller::reconcile::READ_TIMEOUT;

/// A controller process that reads the routers (`--observe-mesh=on`), as
/// `common::controller_command_for` starts one otherwise.
fn start_reading_controller(cp: &ControlPlane, system: &str, health: u16) -> qdr_tests::Process {
    let install =
        qdr_tests::rbac::Install { lease: "hostile".into(), ..qdr_tests::rbac::Install::new(system) };
    let ids = cp.install_rbac(&install).expect("installing deploy/'s RBAC");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_qdr-controller"));
    cmd.env("KUBECONFIG", ids.controller).env("RUST_LOG", "info,kube=warn").args([
        &format!("--lease-namespace={system}"),
        "--lease-name=hostile",
        "--identity=hostile-0",
        "--lease-duration=4s",
        "--renew-deadline=3s",
        "--retry-period=500ms",
        &format!("--health-listen=127.0.0.1:{health}"),
        "--default-image=quay.io/interconnectedcloud/qdrouterd:1.19.0",
        "--observe-mesh=on",
    ]);
    qdr_tests::Process::spawn("hostile-0", cmd, &cp.dir().join("hostile-0.log")).expect("start controller")
}

/// The controller's peak resident memory (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// Peak RSS the controller (a debug build) may reach while it reads the hostile routers
/// below: its resting size (about 30 MiB) plus 8 reads at once at their bound (about 3 MiB
/// each: a message held by the guard, the client's copy, a page of rows), with room for
/// the allocator.
const RSS_BOUND_MIB: f64 = 96.0;

/// A controller process reading routers that misbehave in every way at once (one pod per
/// way), 200 hostile routers in another namespace (silent, or sending 983 KB
/// of message annotations), and honest routers in a third: the
/// hostile ones end as `RouterUnreachable` with short reasons, the honest mesh is read
/// within its timeout and an Interconnect created meanwhile becomes Ready, `/livez` stays
/// 200 and the process stays up, within its memory bound. A look-alike pod with a router's
/// labels is not read, and a foreign Secret in the management CA's place stops the reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_process_survives_hostile_routers_and_serves_every_other_namespace() {
    let cp = qdr_tests::shared_with_controller_manager().await;
    cp.install_crd().await;
    let system = cp.namespace("hostile-system").await;
    let health = common::free_port();
    let controller = start_reading_controller(cp, &system.name, health);
    let pid = controller.pid();
    common::eventually("/readyz", Duration::from_secs(30), || async {
        (common::http_get(health, "/readyz").await?.0 == 200).then_some(())
    })
    .await;
    // /livez is sampled all along from here.
    let livez_failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let failures = livez_failures.clone();
        tokio::spawn(async move {
            loop {
                if common::http_get(health, "/livez").await.map(|r| r.0) != Some(200) {
                    failures.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let mut tasks = Vec::new();

    // One router per way of misbehaving.
    let evil = cp.namespace("hostile-evil").await;
    let scripts: Vec<(&str, Script)> = vec![
        ("a 100,000-deep list", Script::DeepList(100_000)),
        ("a deep map in a detach", Script::DeepPerformative(1_500)),
        ("a 512 MiB body", Script::Huge(512 << 20)),
        ("a body trickled", Script::Trickle(honest_mesh_router(0))),
        ("accepts and never speaks", Script::Silent),
        ("closes mid-frame", Script::CloseMidFrame),
        ("garbage", Script::Garbage),
        ("a 500 with a 1 MiB description", Script::Status(1 << 20)),
        ("10,000 connections at once", Script::IgnoresCount(honest_mesh_router(10_000))),
        ("983 KB of message annotations", Script::AnnotationBomb(honest_mesh_router(0))),
        ("an array of 4,294,967,295 nulls", Script::NullArray(honest_mesh_router(0), u32::MAX)),
        ("100,000 application properties", Script::PropertiesBomb(honest_mesh_router(0), 100_000)),
    ];
    common::create_interconnect(
        &evil,
        "evil",
        json!({"deploymentPlan": {"role": "interior", "size": scripts.len()}}),
    )
    .await;
    let evil_pods = common::pods_of(&evil, "evil", scripts.len()).await;
    let tls = common::router_tls(&evil, "evil").await;
    let started = Instant::now();
    for (i, (pod, (_, script))) in evil_pods.iter().zip(scripts.iter()).enumerate() {
        let ip = format!("127.1.0.{}", i + 1);
        tasks.push(common::router_at(&ip, &tls, script.clone()).await);
        common::run_pod(&evil, pod, &ip).await;
    }

    // 200 hostile routers in another namespace (12 Interconnects of 16 and one of 8), each
    // answering every query with its worst: alternately silence and 983 KB of message
    // annotations that would decode to about 75 MB.
    let quiet = cp.namespace("hostile-quiet").await;
    let sizes: Vec<usize> = [16; 12].into_iter().chain([8]).collect();
    for (i, size) in sizes.iter().enumerate() {
        common::create_interconnect(
            &quiet,
            &format!("quiet-{i}"),
            json!({"deploymentPlan": {"role": "interior", "size": size}}),
        )
        .await;
    }
    let mut silent = 0;
    for (i, size) in sizes.iter().enumerate() {
        let name = format!("quiet-{i}");
        let quiet_tls = common::router_tls(&quiet, &name).await;
        for pod in common::pods_of(&quiet, &name, *size).await {
            silent += 1;
            let ip = format!("127.2.{}.{}", silent / 200, silent % 200 + 1);
            let listener = tokio::net::TcpListener::bind((ip.as_str(), MANAGEMENT_PORT)).await.unwrap();
            let script = if silent % 2 == 0 {
                Script::Silent
            } else {
                Script::AnnotationBomb(Arc::new(amqp_peer::honest(&pod, "interior", &[], 0)))
            };
            tasks.push(amqp_peer::serve(listener, Some(quiet_tls.clone()), script));
            common::run_pod(&quiet, &pod, &ip).await;
        }
    }
    assert_eq!(silent, 200);

    // An honest mesh of three in a third namespace, and a look-alike pod beside it.
    let good = cp.namespace("hostile-good").await;
    common::create_interconnect(&good, "good", json!({"deploymentPlan": {"role": "interior", "size": 3}}))
        .await;
    let good_pods = common::pods_of(&good, "good", 3).await;
    let good_tls = common::router_tls(&good, "good").await;
    let pods: Api<Pod> = good.api();
    let lookalike: Pod = serde_json::from_value(json!({
        "metadata": {"name": "good-lookalike", "labels": {"application": "good", "interconnect_cr": "good"}},
        "spec": {"containers": [{"name": "sleep", "image": "busybox", "command": ["sleep", "infinity"]}]}}))
    .unwrap();
    pods.create(&Default::default(), &lookalike).await.unwrap();
    common::run_pod(&good, "good-lookalike", "127.3.0.100").await;
    tasks.push(
        common::router_at(
            "127.3.0.100",
            &good_tls,
            Script::Honest(Arc::new(amqp_peer::honest("good-lookalike", "interior", &[], 0))),
        )
        .await,
    );
    // A look-alike ReplicaSet named like the Deployment's (`good-<alphanumerics>`), with the
    // router labels, controlled by something else: kube-controller-manager makes its pod,
    // which answers as an honest router would.
    let decoy: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "decoy"}})).unwrap();
    let decoy = good.api().create(&Default::default(), &decoy).await.unwrap();
    let labels = json!({"application": "good", "interconnect_cr": "good"});
    let forged: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "good-forged", "labels": labels,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "decoy",
                                          "uid": decoy.metadata.uid, "controller": true}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"forged": "yes"}},
                 "template": {"metadata": {"labels": {"application": "good", "interconnect_cr": "good", "forged": "yes"}},
                              "spec": {"containers": [{"name": "sleep", "image": "busybox"}]}}}}))
    .unwrap();
    good.api().create(&Default::default(), &forged).await.unwrap();
    let forged_pod = common::eventually("the forged ReplicaSet's pod", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default().labels("forged=yes")).await.ok()?;
        list.items.into_iter().next()?.metadata.name
    })
    .await;
    common::run_pod(&good, &forged_pod, "127.3.0.101").await;
    let forged_answers = Arc::new(amqp_peer::honest(&forged_pod, "interior", &[], 0));
    tasks.push(common::router_at("127.3.0.101", &good_tls, Script::Honest(forged_answers)).await);
    let honest_at = Instant::now();
    for (i, pod) in good_pods.iter().enumerate() {
        let ip = format!("127.3.0.{}", i + 1);
        let peers: Vec<&str> = good_pods.iter().filter(|p| *p != pod).map(String::as_str).collect();
        let answers = Arc::new(amqp_peer::honest(pod, "interior", &peers, 1));
        tasks.push(common::router_at(&ip, &good_tls, Script::Honest(answers)).await);
        common::run_pod(&good, pod, &ip).await;
    }
    // Read within its timeout, though 4 slots are held by silent routers and the others by
    // the hostile ones: at most one read's time for a slot, then its own. A read that comes
    // while some of the pods are still starting says so ("N starting") and is read again
    // soon; those are judged within the join grace at the latest.
    let connected = common::eventually(
        "the honest mesh read",
        3 * READ_TIMEOUT + qdr_controller::reconcile::JOIN_GRACE,
        || async {
            let m = common::mesh_connected(&good, "good").await?;
            (m.1 == "Connected" && !m.2.contains("starting")).then_some(m)
        },
    )
    .await;
    println!("honest mesh Connected {:.1?} after its pods ran: {}", honest_at.elapsed(), connected.2);
    assert_eq!(connected.2, "3/3 interior routers linked to each other");
    let ic = common::interconnects(&good.client, &good.name).get("good").await.unwrap();
    let listed: Vec<&str> =
        ic.data["status"]["routers"].as_array().unwrap().iter().filter_map(|r| r["pod"].as_str()).collect();
    assert_eq!(
        listed,
        good_pods.iter().map(String::as_str).collect::<Vec<_>>(),
        "neither the look-alike pod nor the forged ReplicaSet's pod is listed"
    );
    // Ready means linked: each honest router's pod gets the readiness gate; neither the
    // look-alike pod nor the forged ReplicaSet's pod is written to.
    for pod in &good_pods {
        common::linked_with_reason(&good, pod, "Linked").await;
    }
    for pod in ["good-lookalike", forged_pod.as_str()] {
        assert_eq!(common::linked_condition(&good, pod).await, None, "{pod} was written to");
    }

    // A new Interconnect elsewhere becomes Ready in normal time.
    let fresh = cp.namespace("hostile-fresh").await;
    let created = Instant::now();
    common::create_interconnect(&fresh, "fresh", json!({"deploymentPlan": {"role": "interior", "size": 1}}))
        .await;
    let fresh_pod = common::pods_of(&fresh, "fresh", 1).await.remove(0);
    let fresh_tls = common::router_tls(&fresh, "fresh").await;
    tasks.push(
        common::router_at(
            "127.4.0.1",
            &fresh_tls,
            Script::Honest(Arc::new(amqp_peer::honest(&fresh_pod, "interior", &[], 0))),
        )
        .await,
    );
    common::run_pod(&fresh, &fresh_pod, "127.4.0.1").await;
    common::condition_with_reason(&fresh, "fresh", "Ready", "RoutersReady").await;
    println!("a new Interconnect Ready {:.1?} after it was created", created.elapsed());

    // Every hostile router ends as not answering, each with a short reason: within two whole
    // reads of the mesh (its routers read `MAX_PER_NAMESPACE` at a time, each within
    // `READ_TIMEOUT`; the first read may find pods still starting) and the recheck between.
    let rounds = scripts.len().div_ceil(qdr_controller::reconcile::MAX_PER_NAMESPACE) as u32;
    let judged_within = 2 * rounds * READ_TIMEOUT + qdr_controller::reconcile::MESH_RECHECK + READ_TIMEOUT;
    let (status, reason, message) =
        common::eventually("the hostile routers judged", judged_within, || async {
            let m = common::mesh_connected(&evil, "evil").await?;
            let ic = common::interconnects(&evil.client, &evil.name).get("evil").await.ok()?;
            let errors =
                ic.data["status"]["routers"].as_array()?.iter().filter(|r| r["error"].is_string()).count();
            (m.1 == "RouterUnreachable" && errors == scripts.len()).then_some(m)
        })
        .await;
    println!(
        "hostile routers: MeshConnected {status} {reason} {:.1?} after they ran: {message}",
        started.elapsed()
    );
    assert_eq!(status, "Unknown");
    let ic = common::interconnects(&evil.client, &evil.name).get("evil").await.unwrap();
    for (r, (what, _)) in ic.data["status"]["routers"].as_array().unwrap().iter().zip(&scripts) {
        let error = r["error"].as_str().unwrap();
        println!("  {what}: {error}");
        assert!(error.len() <= MAX_REASON, "{what}: {} bytes", error.len());
    }
    assert!(message.len() <= qdr_controller::mesh::MAX_MESSAGE, "{} bytes", message.len());
    // None of the hostile routers answered: none is Ready.
    for pod in &evil_pods {
        let linked = common::linked_condition(&evil, pod).await;
        assert!(linked.as_ref().is_none_or(|(status, _)| status != "True"), "{pod}: {linked:?}");
    }
    let (_, reason, message) = common::eventually("the silent routers judged", 60 * READ_TIMEOUT, || async {
        common::mesh_connected(&quiet, "quiet-12").await.filter(|m| m.1 == "RouterUnreachable")
    })
    .await;
    println!("200 hostile routers: {reason}: {:.300}", message);

    // A foreign Secret in the management CA's place: not used, and said so.
    let foreign = cp.namespace("hostile-foreign").await;
    let secrets: Api<Secret> = foreign.api();
    let planted: Secret =
        serde_json::from_value(json!({"metadata": {"name": "planted-qdr-operator-management-ca"},
        "stringData": {"tls.crt": "not a certificate", "tls.key": "not a key"}}))
        .unwrap();
    secrets.create(&Default::default(), &planted).await.unwrap();
    common::create_interconnect(
        &foreign,
        "planted",
        json!({"deploymentPlan": {"role": "interior", "size": 1}}),
    )
    .await;
    let (status, reason, message) =
        common::eventually("the foreign CA refused", Duration::from_secs(60), || async {
            common::mesh_connected(&foreign, "planted").await
        })
        .await;
    println!("a foreign management CA Secret: MeshConnected {status} {reason}: {message}");
    assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "NotObserved"));
    assert!(message.contains("not the management CA this Interconnect generated"), "{message}");

    // The management CA forged in place, owner reference, label and all (what anyone who
    // may update Secrets in the namespace can write), with a valid CA of the forger's: not
    // used either, for its content is not the controller's own.
    common::create_interconnect(
        &foreign,
        "forged",
        json!({"deploymentPlan": {"role": "interior", "size": 1}}),
    )
    .await;
    let ca_name = "forged-qdr-operator-management-ca";
    let genuine = common::eventually("the generated management CA", Duration::from_secs(30), || async {
        let s = secrets.get_opt(ca_name).await.ok()??;
        s.metadata.annotations.as_ref()?.contains_key("qdr-operator.io/seal").then_some(s)
    })
    .await;
    let forger_ca = {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let mut forged = genuine.clone();
    let data = forged.data.get_or_insert_with(Default::default);
    data.insert("tls.crt".into(), k8s_openapi::ByteString(forger_ca.0.clone().into_bytes()));
    data.insert("tls.key".into(), k8s_openapi::ByteString(forger_ca.1.into_bytes()));
    data.insert("ca.crt".into(), k8s_openapi::ByteString(forger_ca.0.into_bytes()));
    forged.metadata.managed_fields = None;
    secrets.replace(ca_name, &Default::default(), &forged).await.unwrap();
    let (status, reason, message) =
        common::eventually("the forged CA refused", Duration::from_secs(60), || async {
            common::mesh_connected(&foreign, "forged").await.filter(|m| m.2.contains("no valid seal"))
        })
        .await;
    println!("a management CA forged in place: MeshConnected {status} {reason}: {message}");
    assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "NotObserved"));
    assert!(message.contains(ca_name), "{message}");
    // Its router runs: it cannot be read for a reason only the tenant can mend, so the gate is
    // set unchecked rather than holding it out of service.
    // (The forged CA changed what the routers mount: a new ReplicaSet's pod may be there too.)
    let pods: Api<Pod> = foreign.api();
    // Each look runs the router pods listed that are not yet running, as a kubelet would, and
    // passes once one of them has its gate set. (Between the old pod's deletion and the new
    // one's creation the list can be empty; once the new pod runs the Deployment deletes the
    // old one, so a pod listed may be gone by the time it is run.)
    let running = std::sync::Mutex::new(std::collections::BTreeSet::new());
    common::eventually("a forged router's gate set NotChecked", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default().labels("interconnect_cr=forged")).await.ok()?;
        for p in &list.items {
            let name = p.name_any();
            let count = running.lock().unwrap().len();
            if !running.lock().unwrap().contains(&name)
                && common::run_pod_if_present(&foreign, &name, &format!("127.4.0.{}", count + 2)).await
            {
                running.lock().unwrap().insert(name);
            }
        }
        for p in &list.items {
            let linked = common::linked_condition(&foreign, &p.name_any()).await;
            if linked == Some(("True".into(), "NotChecked".into())) {
                return Some(());
            }
        }
        None
    })
    .await;

    // Alive, live all along, ready, within its memory bound.
    assert!(controller.exited().is_none(), "the controller process exited");
    assert_eq!(common::http_get(health, "/readyz").await.map(|r| r.0), Some(200));
    sampler.abort();
    let failures = livez_failures.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(failures, 0, "/livez failed {failures} times");
    let peak = peak_rss_mib(pid);
    println!("controller peak RSS {peak:.1} MiB (bound {RSS_BOUND_MIB} MiB)");
    assert!(peak > 0.0 && peak < RSS_BOUND_MIB, "peak RSS {peak:.1} MiB");
    for t in tasks {
        t.abort();
    }
}

/// How the tests of a mesh read stand-in routers at loopback addresses on `port`: plain TCP,
/// unfenced, [`VISIT_TIMEOUT`] a router, slots of `pool`.
fn plain_plan<'a>(port: u16, namespace: &'a str, pool: &'a Pool) -> Plan<'a> {
    Plan {
        port,
        namespace,
        pool,
        timeout: VISIT_TIMEOUT,
        deadline: tokio::time::Instant::now() + VISIT_TIMEOUT,
        tls: None,
        fence: None,
        recheck: qdr_controller::mesh::live::RECHECK,
    }
}

/// Routers of a linked mesh are read through one connection: the first router on its own,
/// then every router its routing table lists, through it (`_topo/0/<id>/$management`).
/// What it does not list, and a router the mesh does not reach (its request link refused),
/// are read each on a connection of its own. Writes reach the router asked, not the one
/// the connection was made to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_mesh_is_read_through_one_connection_and_the_rest_directly() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    let ids = ["through-0", "through-1", "through-2", "through-3"];
    // 0 lists 1 and 2 (its neighbours); 3 is on its own. 2 is listed, but the mesh does not
    // carry requests to it (not routable here).
    let peers: [&[&str]; 4] = [&["through-1", "through-2"], &["through-0"], &["through-0"], &[]];
    let answers: Vec<Arc<amqp_peer::Answers>> = (ids.iter().zip(peers))
        .map(|(id, peers)| Arc::new(amqp_peer::honest(id, "interior", peers, 0)))
        .collect();
    for i in [0, 1, 3] {
        amqp_peer::routable(&answers[i]);
    }
    // One wildcard listener; each router at its own loopback address; connections counted.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let ip = |i: usize| format!("127.4.0.{}", i + 1);
    let connections: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let (counted, scripts) = (connections.clone(), answers.clone());
    let task = amqp_peer::serve_by_address(
        listener,
        Arc::new(move |addr| {
            let i = usize::from(match addr {
                std::net::IpAddr::V4(v4) => v4.octets()[3],
                std::net::IpAddr::V6(_) => return None,
            })
            .checked_sub(1)
            .filter(|i| *i < 4)?;
            counted[i].fetch_add(1, SeqCst);
            Some((None, Script::Honest(scripts[i].clone())))
        }),
    );
    let want = live_entities(serde_json::json!({
        "deploymentPlan": {"role": "interior"},
        "addresses": [{"prefix": "through", "distribution": "closest"}],
    }));
    let targets: Vec<Target> = (0..4)
        .map(|i| Target {
            pod: ids[i].into(),
            ip: Some(ip(i)),
            ready: true,
            linking: None,
            live: (i == 1).then(|| want.clone()),
            checked: None,
        })
        .collect();
    let pool = Pool::new(4, 4);
    let plan = plain_plan(port, "through", &pool);
    let seen = observe(&targets, &plan).await;
    let views: Vec<&qdr_controller::mesh::RouterView> = ids
        .iter()
        .map(|id| match &seen[*id] {
            Observation::Answered(v) => v,
            other => panic!("{id}: {other:?}"),
        })
        .collect();
    assert_eq!(
        views.iter().map(|v| (&*v.id, v.routed)).collect::<Vec<_>>(),
        [("through-0", false), ("through-1", true), ("through-2", false), ("through-3", false)],
    );
    let counts: Vec<u64> = connections.iter().map(|c| c.load(SeqCst)).collect();
    assert_eq!(counts, [1, 0, 1, 1], "connections per router");
    // What the routed router answered is its own, and its live entities were written to it.
    assert_eq!(views[1].reaches.iter().map(|r| &**r).collect::<Vec<_>>(), ["through-0"]);
    let live = views[1].live.as_ref().expect("live entities were given");
    assert!(live.applied && live.created == want.desired.len(), "{live:?}");
    assert_eq!(amqp_peer::held("through-1").len(), want.desired.len());
    assert!(amqp_peer::held("through-0").is_empty());

    // Every router listed and reachable: one connection in all.
    amqp_peer::routable(&answers[2]);
    let before: Vec<u64> = connections.iter().map(|c| c.load(SeqCst)).collect();
    let seen = observe(&targets[..3], &plan).await;
    let after: Vec<u64> = connections.iter().map(|c| c.load(SeqCst)).collect();
    let routed: Vec<bool> = (seen.values())
        .map(|o| match o {
            Observation::Answered(v) => v.routed,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(routed, [false, true, true]);
    assert_eq!((0..4).map(|i| after[i] - before[i]).collect::<Vec<_>>(), [1, 0, 0, 0]);
    // The second visit found router 1's entities held: nothing written again.
    let Observation::Answered(v) = &seen["through-1"] else { unreachable!() };
    let live = v.live.as_ref().expect("live entities were given");
    assert!(live.applied && live.created == 0 && live.deleted == 0, "{live:?}");
    task.abort();
}

/// A connected mesh at rest costs each router one round of requests: one `flow` giving
/// credit for its answers, then its four queries (router, routing table, connections,
/// connectors) at once, sent pre-settled so the router sends no disposition of its own.
/// Before, each query waited for its answer, each answer was followed by a `flow`, and each
/// request by the router's `disposition`: 13 flows and 12 settlements more for this mesh of
/// three, the frames the profile at rest put a fifth of the controller's CPU in
/// (docs/mesh-status.md, "Cost at scale").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mesh_at_rest_is_read_in_one_round_of_requests_a_router() {
    let ids = ["frames-0", "frames-1", "frames-2"];
    let answers: Vec<Arc<amqp_peer::Answers>> = (0..3)
        .map(|i| {
            let peers: Vec<&str> = (0..3).filter(|j| *j != i).map(|j| ids[j]).collect();
            Arc::new(amqp_peer::honest(ids[i], "interior", &peers, 0))
        })
        .collect();
    for a in &answers {
        amqp_peer::routable(a);
    }
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let scripts = answers.clone();
    let task = amqp_peer::serve_by_address(
        listener,
        Arc::new(move |addr| match addr {
            std::net::IpAddr::V4(v4) if (1..=3).contains(&v4.octets()[3]) => {
                Some((None, Script::Honest(scripts[usize::from(v4.octets()[3]) - 1].clone())))
            }
            _ => None,
        }),
    );
    let targets: Vec<Target> = (0..3)
        .map(|i| Target {
            pod: ids[i].into(),
            ip: Some(format!("127.5.0.{}", i + 1)),
            ready: true,
            linking: Some(Default::default()),
            live: None,
            checked: None,
        })
        .collect();
    let pool = Pool::new(4, 4);
    let plan = plain_plan(port, "frames", &pool);
    let seen = observe(&targets, &plan).await;
    for id in ids {
        assert!(matches!(&seen[id], Observation::Answered(_)), "{id}: {:?}", seen[id]);
    }
    let received = amqp_peer::received(port);
    let frames: Vec<(&str, u64)> = received.iter().map(|(k, v)| (*k, *v)).collect();
    // One connection (open, begin, close); a reply link and a request link, and a request
    // link to each router asked through the first; one flow and four queries a router.
    assert_eq!(
        frames,
        [("attach", 4), ("begin", 1), ("close", 1), ("flow", 3), ("open", 1), ("transfer", 12)],
        "frames the routers received",
    );
    task.abort();
}
