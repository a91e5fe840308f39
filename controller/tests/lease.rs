//! Leader election on the real API server, in process: a leader cut off from the API
//! demotes itself at its renew deadline, before a follower may take over, so two replicas
//! never lead at once; a released Lease is taken over faster than an expired one could be.
//! Figures are printed; assertions use margins derived from the configured [`Timing`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use qdr_controller::lease::{Elector, Timing};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(250),
    }
}

/// A TCP proxy to the API server that can be cut: existing connections dropped, new ones
/// accepted and held open without an answer (a black hole: a request waits for ever).
async fn proxy(target: u16, cut: Arc<AtomicBool>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let watcher_conns = conns.clone();
        let watcher_cut = cut.clone();
        tokio::spawn(async move {
            while !watcher_cut.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            for c in watcher_conns.lock().unwrap().drain(..) {
                c.abort();
            }
        });
        let mut held = Vec::new();
        loop {
            let Ok((mut inbound, _)) = l.accept().await else { return };
            if cut.load(Ordering::SeqCst) {
                held.push(inbound); // never answered
                continue;
            }
            conns.lock().unwrap().push(tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            }));
        }
    });
    port
}

async fn client_via(cp: &qdr_tests::ControlPlane, port: Option<u16>) -> kube::Client {
    let kc = Kubeconfig::read_from(cp.kubeconfig()).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap();
    if let Some(p) = port {
        cfg.cluster_url = format!("https://127.0.0.1:{p}").parse().unwrap();
    }
    cfg.read_timeout = Some(Duration::from_secs(1));
    cfg.connect_timeout = Some(Duration::from_secs(1));
    kube::Client::try_from(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_leader_demotes_before_anyone_takes_over() {
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("lease").await;
    let api_port: u16 = cp.server().rsplit(':').next().unwrap().parse().unwrap();
    let cut = Arc::new(AtomicBool::new(false));
    let via = proxy(api_port, cut.clone()).await;
    let a = Arc::new(Elector::new(
        Api::<Lease>::namespaced(client_via(cp, Some(via)).await, &ns.name),
        "l",
        "a",
        timing(),
    ));
    let b = Arc::new(Elector::new(
        Api::<Lease>::namespaced(client_via(cp, None).await, &ns.name),
        "l",
        "b",
        timing(),
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (ra, rb) = (a.subscribe(), b.subscribe());
    let ta = tokio::spawn({
        let (a, s) = (a.clone(), stop_rx.clone());
        async move { a.run(s).await }
    });
    // A leads first.
    let start = Instant::now();
    while !*ra.borrow() {
        assert!(start.elapsed() < Duration::from_secs(10), "a never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (stop_b_tx, stop_b_rx) = tokio::sync::watch::channel(false);
    let tb = tokio::spawn({
        let b = b.clone();
        async move { b.run(stop_b_rx).await }
    });
    // For a whole lease duration, B must not take over from a healthy leader.
    let watched = Instant::now();
    while watched.elapsed() < timing().lease_duration {
        assert!(*ra.borrow() && !*rb.borrow(), "b took over from a healthy leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Cut A off the API and record both replicas' view every millisecond.
    let t_cut = Instant::now();
    cut.store(true, Ordering::SeqCst);
    let (mut a_demoted, mut b_leads, mut overlap) = (None, None, 0);
    while t_cut.elapsed() < Duration::from_secs(8) {
        let (la, lb) = (*ra.borrow(), *rb.borrow());
        if la && lb {
            overlap += 1;
        }
        if !la && a_demoted.is_none() {
            a_demoted = Some(t_cut.elapsed());
        }
        if lb && b_leads.is_none() {
            b_leads = Some(t_cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (a_demoted, b_leads) = (a_demoted.expect("a never demoted"), b_leads.expect("b never took over"));
    eprintln!(
        "partition: leader demoted itself {a_demoted:?} after the cut, follower led {b_leads:?} after it"
    );
    assert_eq!(overlap, 0, "both replicas led at once");
    // Safety: the cut-off leader stops before any follower may take over, which a follower
    // does only after seeing the Lease unchanged for a whole lease duration.
    assert!(a_demoted < timing().lease_duration, "{a_demoted:?}");
    assert!(b_leads > a_demoted);

    // Graceful hand-back: B stops and releases; A (reconnected) takes over within ~1 retry period.
    cut.store(false, Ordering::SeqCst);
    let _ = stop_b_tx.send(true);
    tb.await.unwrap();
    let released = Instant::now();
    b.release().await;
    // A's proxy drops connections accepted while cut; new ones go through now.
    let mut took = None;
    while released.elapsed() < Duration::from_secs(6) {
        if *ra.borrow() {
            took = Some(released.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = took.expect("a did not take the released lease");
    eprintln!("release: the other replica led {took:?} after the release");
    // Released, not expired: without the release, A could take over only after seeing the
    // record unchanged for a lease duration, and B's last renewal was at most one retry
    // period before it stopped.
    let expiry_at_best = timing().lease_duration - timing().retry_period;
    assert!(took < expiry_at_best, "{took:?}, expiry would give {expiry_at_best:?}");
    let _ = stop_tx.send(true);
    ta.await.unwrap();
}

/// Regression: leadership won before anyone subscribed must not be lost (a watch `send`
/// with no receiver does not store the value).
#[tokio::test]
async fn leadership_won_before_subscribing_is_visible() {
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("lease-late").await;
    let e = Arc::new(Elector::new(
        Api::<Lease>::namespaced(cp.client().await.unwrap(), &ns.name),
        "late",
        "x",
        timing(),
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn({
        let e = e.clone();
        async move { e.run(stop_rx).await }
    });
    // Wait until the Lease names us, then subscribe.
    let leases: Api<Lease> = ns.api();
    let start = Instant::now();
    while leases.get_opt("late").await.unwrap().and_then(|l| l.spec?.holder_identity).as_deref() != Some("x")
    {
        assert!(start.elapsed() < 2 * timing().lease_duration, "x never took the Lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The Lease names x; x's own view follows within the renew deadline at the latest.
    let rx = e.subscribe();
    let seen = Instant::now();
    while !*rx.borrow() {
        assert!(seen.elapsed() < timing().renew_deadline, "the won election was lost");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(true);
    run.await.unwrap();
}

/// A demoted leader's writes are fenced: a write in flight when the partition starts is
/// abandoned at the fence deadline (the start of the last renew plus the renew deadline,
/// before any follower may lead), and writes after the demotion are refused before they
/// are sent, so none reaches the API server once the follower leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_demoted_leaders_writes_are_fenced() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("fence").await;
    let api_port: u16 = cp.server().rsplit(':').next().unwrap().parse().unwrap();
    let cut = Arc::new(AtomicBool::new(false));
    let via = proxy(api_port, cut.clone()).await;
    let fence = qdr_controller::fence::Fence::default();
    let a = Arc::new(
        Elector::new(Api::<Lease>::namespaced(client_via(cp, Some(via)).await, &ns.name), "l", "a", timing())
            .with_fence(fence.clone()),
    );
    // A's reconcilers' client: through the same proxy, fenced, with no read timeout of
    // its own short enough to end a stalled write first.
    let kc = Kubeconfig::read_from(cp.kubeconfig()).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap();
    cfg.cluster_url = format!("https://127.0.0.1:{via}").parse().unwrap();
    cfg.read_timeout = Some(Duration::from_secs(60));
    let fenced = qdr_controller::fence::client(cfg, &fence).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(fenced, &ns.name);
    let cm = |name: &str| ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        ..Default::default()
    };
    // Not leading yet: refused before sending.
    let early = cms.create(&PostParams::default(), &cm("before")).await.unwrap_err();
    assert!(early.to_string().contains("refused before sending"), "{early}");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let ra = a.subscribe();
    let ta = tokio::spawn({
        let a = a.clone();
        async move { a.run(stop_rx).await }
    });
    let start = Instant::now();
    while !*ra.borrow() {
        assert!(start.elapsed() < Duration::from_secs(10), "a never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cms.create(&PostParams::default(), &cm("while-leading")).await.unwrap();
    // The partition: a write now stalls in the black hole until the fence ends it.
    let deadline = fence.open_until().expect("open while leading");
    cut.store(true, Ordering::SeqCst);
    let t_cut = Instant::now();
    // The proxy drops the pooled connection within milliseconds (nothing sent on it after
    // that is forwarded); a write that fails on it at once is tried again, on a new
    // connection into the black hole.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stalled = loop {
        let e = cms.create(&PostParams::default(), &cm("in-flight")).await.unwrap_err();
        if e.to_string().contains("fenced") {
            break e;
        }
    };
    let ended = Instant::now();
    eprintln!("fence: a write in flight at the partition was abandoned {:?} after it", ended - t_cut);
    assert!(stalled.to_string().contains("abandoned at the lease deadline"), "{stalled}");
    assert!(ended >= deadline && ended < t_cut + timing().renew_deadline + Duration::from_secs(1));
    assert!(ended - t_cut < timing().lease_duration, "ended before any follower may lead");
    // Demoted (at the same deadline); healed, A's writes are refused without being sent.
    while *ra.borrow() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cut.store(false, Ordering::SeqCst);
    let late = cms.create(&PostParams::default(), &cm("after-demotion")).await.unwrap_err();
    assert!(late.to_string().contains("refused before sending"), "{late}");
    let server: Api<ConfigMap> = ns.api();
    assert!(server.get_opt("while-leading").await.unwrap().is_some());
    for name in ["before", "in-flight", "after-demotion"] {
        assert!(server.get_opt(name).await.unwrap().is_none(), "{name} reached the API server");
    }
    let _ = stop_tx.send(true);
    ta.await.unwrap();
}

/// Followers wait for the lease duration the holder wrote in the Lease, not their own.
#[tokio::test]
async fn followers_honour_the_holders_lease_duration() {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("lease-duration").await;
    let leases: Api<Lease> = ns.api();
    // Another replica, started with a 6 s lease (twice ours), holds it and then stops
    // renewing (crashed).
    let theirs = Duration::from_secs(6);
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let lease = Lease {
        metadata: kube::api::ObjectMeta { name: Some("d".into()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some("other".into()),
            lease_duration_seconds: Some(theirs.as_secs() as i32),
            renew_time: Some(now.clone()),
            acquire_time: Some(now),
            ..Default::default()
        }),
    };
    leases.create(&kube::api::PostParams::default(), &lease).await.unwrap();
    let e = Arc::new(Elector::new(leases.clone(), "d", "me", timing()));
    let rx = e.subscribe();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let run = tokio::spawn({
        let e = e.clone();
        async move { e.run(stop_rx).await }
    });
    while !*rx.borrow() {
        assert!(started.elapsed() < theirs * 3, "never took over the expired lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    eprintln!(
        "lease duration: took over {took:?} after starting (holder's duration {theirs:?}, ours {:?})",
        timing().lease_duration
    );
    // Not after its own 3 s: after the holder's 6 s of an unchanged record.
    assert!(took >= theirs, "{took:?}");
    let _ = stop_tx.send(true);
    run.await.unwrap();
}

/// A follower whose look at the Lease stalls (a connection to the API server that went
/// silent, which the client would wait on for its whole read timeout, 295 s by default)
/// gives that look up within its renew deadline and looks again: when the leader goes, it
/// takes over in seconds, not minutes. The follower's client has kube's default timeouts,
/// as the controller's has.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_look_stalls_still_takes_over() {
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("lease-stall").await;
    let api_port: u16 = cp.server().rsplit(':').next().unwrap().parse().unwrap();
    let cut = Arc::new(AtomicBool::new(false));
    let via = proxy(api_port, cut.clone()).await;
    let a = Arc::new(Elector::new(
        Api::<Lease>::namespaced(client_via(cp, None).await, &ns.name),
        "l",
        "a",
        timing(),
    ));
    let kc = Kubeconfig::read_from(cp.kubeconfig()).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap();
    cfg.cluster_url = format!("https://127.0.0.1:{via}").parse().unwrap();
    let b = Arc::new(Elector::new(
        Api::<Lease>::namespaced(kube::Client::try_from(cfg).unwrap(), &ns.name),
        "l",
        "b",
        timing(),
    ));
    let (stop_a_tx, stop_a_rx) = tokio::sync::watch::channel(false);
    let (stop_b_tx, stop_b_rx) = tokio::sync::watch::channel(false);
    let (ra, rb) = (a.subscribe(), b.subscribe());
    let ta = tokio::spawn({
        let a = a.clone();
        async move { a.run(stop_a_rx).await }
    });
    let start = Instant::now();
    while !*ra.borrow() {
        assert!(start.elapsed() < Duration::from_secs(10), "a never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tb = tokio::spawn({
        let b = b.clone();
        async move { b.run(stop_b_rx).await }
    });
    while b.last_contact().is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "b never looked at the Lease");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // B's connection goes silent: its next look stalls on a connection the proxy holds
    // without an answer, even once the proxy lets new connections through again.
    cut.store(true, Ordering::SeqCst);
    let looked = b.last_contact();
    tokio::time::sleep(timing().retry_period * 4).await;
    cut.store(false, Ordering::SeqCst);
    assert_eq!(b.last_contact(), looked, "b's look did not stall");
    // The leader goes (stops and releases the Lease).
    let _ = stop_a_tx.send(true);
    ta.await.unwrap();
    a.release().await;
    let released = Instant::now();
    // B gives its stalled look up within its renew deadline, then looks again at the
    // released Lease and leads: well within this bound, and never at the client's 295 s.
    let bound = timing().renew_deadline + timing().lease_duration * 2;
    while !*rb.borrow() {
        assert!(
            released.elapsed() < bound,
            "b did not take the released Lease within {bound:?}: its stalled look was not given up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("stalled follower: led {:?} after the release", released.elapsed());
    let _ = stop_b_tx.send(true);
    tb.await.unwrap();
}

/// A leader that stands down at shutdown leaves the Lease released, even when one of its
/// renews is in flight as it stops: the renew must not land after the release (naming it
/// holder again, so followers wait for expiry) nor between the release's read and write
/// (the release refused with a conflict). Renewing every 20 ms keeps a renew in flight at
/// almost any moment; each of the rounds stops at a different point of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_standing_down_mid_renew_leaves_the_lease_released() {
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("lease-stand-down").await;
    let client = cp.client().await.unwrap();
    let t = Timing {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(20),
    };
    let leases: Api<Lease> = ns.api();
    let mut held = Vec::new();
    for round in 0..20u64 {
        let name = format!("stand-down-{round}");
        let e = Arc::new(Elector::new(Api::namespaced(client.clone(), &ns.name), &name, "a", t.clone()));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let run = tokio::spawn({
            let e = e.clone();
            async move { e.run(stop_rx).await }
        });
        let mut leading = e.subscribe();
        tokio::time::timeout(t.lease_duration, leading.wait_for(|l| *l)).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(100 + 7 * round)).await;
        let _ = stop_tx.send(true);
        e.stand_down(run).await;
        // Whatever the stand-down left stays: look again after a few retry periods.
        tokio::time::sleep(5 * t.retry_period).await;
        let holder = leases.get(&name).await.unwrap().spec.and_then(|s| s.holder_identity);
        if holder.is_some() {
            held.push(round);
        }
    }
    eprintln!("stand-down mid-renew: the Lease still held after {} of 20 rounds", held.len());
    assert!(held.is_empty(), "the Lease still named the stopped leader after rounds {held:?}");
}

/// A write the client took while the term was open and had not sent when it ended (the
/// process stopped between the fence's check and the socket, a SIGSTOP or a frozen node,
/// and resumed past its renew deadline) never reaches the API server: the connection's task
/// that would write it does not run once the fence is closed. On one thread, the fence is
/// closed right after the request passed its check and was handed to the connection, before
/// that connection's task runs: where a stopped process resumes.
#[tokio::test(flavor = "current_thread")]
async fn a_write_taken_before_the_term_ended_is_not_sent_after_it() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("taken").await;
    let fence = qdr_controller::fence::Fence::default();
    fence.hold_until(Instant::now() + Duration::from_secs(120));
    let kc = Kubeconfig::read_from(cp.kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(qdr_controller::fence::client(cfg, &fence).unwrap(), &ns.name);
    let cm = |name: &str| ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        ..Default::default()
    };
    // A write on an open term goes through, and leaves an idle connection in the pool.
    cms.create(&PostParams::default(), &cm("open")).await.unwrap();
    // The request is checked (the client's buffer task calls the fenced service) on its
    // first poll's wake-up, and handed to the pooled connection on the second poll; the
    // connection's task runs only once this task yields. The fence closes in between.
    let (pp, object) = (PostParams::default(), cm("taken"));
    let mut taken = Box::pin(cms.create(&pp, &object));
    let mut polls = 0;
    let answer = std::future::poll_fn(|cx| {
        let p = taken.as_mut().poll(cx);
        if p.is_pending() {
            polls += 1;
            if polls == 2 {
                fence.close();
            }
        }
        p
    })
    .await;
    let server: Api<ConfigMap> = ns.api();
    assert!(server.get_opt("open").await.unwrap().is_some());
    let e = match answer {
        Ok(created) => {
            panic!("a write taken before the term ended was sent after it: {:?}", created.metadata)
        }
        Err(e) => e.to_string(),
    };
    assert!(!e.contains("refused before sending"), "closed before the check, the test proves nothing: {e}");
    assert!(server.get_opt("taken").await.unwrap().is_none(), "{e}");
    eprintln!("fence: a write taken before the term ended was not sent after it: {e}");
}
