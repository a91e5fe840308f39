//! High availability with real controller processes: only the Lease holder reconciles;
//! after SIGTERM the leader releases the Lease and another replica takes over faster than
//! expiry allows; after SIGKILL another replica takes over once the Lease expires. Each
//! time, a change made after the failure is reconciled by the new leader. Figures are
//! printed; assertions use margins derived from the configured lease timing.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, interconnects};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use qdr_tests::Process;
use serde_json::json;

/// Matches `start_controller`'s `--lease-duration`.
const LEASE: Duration = Duration::from_secs(4);
/// Matches `start_controller`'s `--retry-period`.
const RETRY: Duration = Duration::from_millis(500);

async fn holder(leases: &Api<Lease>) -> Option<String> {
    common::holder_of(leases, "ha-lease").await
}

/// How long after `since` the Lease names a holder other than `old` (polled every 20 ms;
/// panics after `limit`).
async fn takeover(leases: &Api<Lease>, old: &str, since: Instant, limit: Duration) -> (String, Duration) {
    common::takeover_of(leases, "ha-lease", old, since, limit).await
}

async fn scale_and_time(
    ns: &qdr_tests::TestNamespace,
    size: i32,
    replicas: &[(String, Process)],
) -> Duration {
    let start = Instant::now();
    interconnects(&ns.client, &ns.name)
        .patch(
            "ha",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deploymentPlan": {"size": size}}})),
        )
        .await
        .unwrap();
    let deps: Api<Deployment> = ns.api();
    loop {
        let d = deps.get_opt("ha").await.ok().flatten();
        if d.is_some_and(|d| d.spec.as_ref().unwrap().replicas == Some(size)) {
            return start.elapsed();
        }
        if start.elapsed() > Duration::from_secs(30) {
            let logs: Vec<String> = replicas
                .iter()
                .map(|(id, p)| format!("--- {id} (exited: {:?})\n{}", p.exited(), p.log_tail(40)))
                .collect();
            panic!("replicas {size} not reconciled in 30 s\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_sigterm_and_after_sigkill() {
    let cp = qdr_tests::shared_with_controller_manager().await;
    cp.install_crd().await;
    let system = cp.namespace("ha-system").await;
    let ns = cp.namespace("ha").await;
    let leases: Api<Lease> = system.api();
    let mut replicas: Vec<(String, Process)> = ["ha-a", "ha-b"]
        .iter()
        .map(|id| (id.to_string(), common::start_controller(cp, &system.name, "ha-lease", id)))
        .collect();

    let obj: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "ha"}, "spec": {"deploymentPlan": {"size": 1}}}),
    )
    .unwrap();
    interconnects(&ns.client, &ns.name).create(&PostParams::default(), &obj).await.unwrap();
    scale_and_time(&ns, 2, &replicas).await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    let credentials_hash = || async {
        let d = deployments.get("ha").await.unwrap();
        d.spec.unwrap().template.metadata.unwrap().annotations.unwrap()["qdr-operator.io/credentials-hash"]
            .clone()
    };
    let hash_before = credentials_hash().await;

    // Graceful: SIGTERM the leader; once it has exited, change the spec.
    let leader = eventually("a leader", Duration::from_secs(20), || holder(&leases)).await;
    let i = replicas.iter().position(|(id, _)| *id == leader).unwrap();
    let (_, p) = replicas.remove(i);
    let t0 = Instant::now();
    p.signal(libc::SIGTERM);
    let (_, graceful_takeover) = takeover(&leases, &leader, t0, 4 * LEASE).await;
    assert!(p.wait_exit(Duration::from_secs(10)), "leader did not exit on SIGTERM");
    let exited = t0.elapsed();
    let graceful = scale_and_time(&ns, 3, &replicas).await;

    // Crash: a third replica joins, then the current leader is SIGKILLed.
    replicas.push(("ha-c".into(), common::start_controller(cp, &system.name, "ha-lease", "ha-c")));
    let leader = eventually("a leader", Duration::from_secs(20), || holder(&leases)).await;
    // Let ha-c start and observe the Lease: wait until its log shows it running.
    let c = &replicas.last().unwrap().1;
    eventually("ha-c running", Duration::from_secs(20), || async {
        c.log_tail(50).contains("exposure through").then_some(())
    })
    .await;
    let i = replicas.iter().position(|(id, _)| *id == leader).unwrap();
    let (_, p) = replicas.remove(i);
    let t1 = Instant::now();
    p.signal(libc::SIGKILL);
    let (_, crash_takeover) = takeover(&leases, &leader, t1, 6 * LEASE).await;
    assert!(p.wait_exit(Duration::from_secs(5)));
    let crash = scale_and_time(&ns, 4, &replicas).await;
    // Every replica keys the credentials hash with the one key the first made: no leader
    // change rolls the routers.
    assert_eq!(credentials_hash().await, hash_before, "a failover changed the credentials hash");
    let keys: Api<k8s_openapi::api::core::v1::Secret> = system.api();
    let key = keys.get("qdr-controller-hash-key").await.unwrap();
    assert_eq!(key.immutable, Some(true));
    assert_eq!(key.data.unwrap()["key"].0.len(), 32);
    eprintln!(
        "failover: graceful (SIGTERM) Lease taken over {graceful_takeover:?} after the signal, leader exited in \
         {exited:?}, next change reconciled {graceful:?} after that; crash (SIGKILL) Lease taken over \
         {crash_takeover:?} after the kill, next change reconciled {crash:?} after that (lease {LEASE:?}, retry \
         {RETRY:?})"
    );
    // Released, not expired: a follower takes an unreleased Lease only after seeing it
    // unchanged for a lease duration, counted from at most one retry period after the last
    // renewal, and the signal came at most one retry period after that renewal.
    assert!(graceful_takeover < LEASE - 2 * RETRY, "graceful takeover took {graceful_takeover:?}");
    // Expired: within the lease duration plus one follower retry, with one more lease
    // duration of slack for a loaded machine.
    assert!(crash_takeover < 2 * LEASE + RETRY, "crash takeover took {crash_takeover:?}");
}

/// `/readyz` follows the API connection and, on the leader, the watches; `/livez` stays ok
/// when the API server is unreachable (a restart would not help).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_follow_the_api_connection_and_the_election() {
    let cp = qdr_tests::shared_with_controller_manager().await;
    cp.install_crd().await;
    let system = cp.namespace("probe-system").await;
    let leases: Api<Lease> = system.api();
    let ports = [common::free_port(), common::free_port()];
    // Watching only their own namespace: the failover test's Interconnects are not theirs.
    let install = qdr_tests::rbac::Install {
        lease: "ha-lease".into(),
        watch: vec![system.name.clone()],
        ..qdr_tests::rbac::Install::new(&system.name)
    };
    let spawn = |id: &str, port: u16| {
        let cmd = common::controller_command_for(cp, &install, id, port);
        Process::spawn(id, cmd, &cp.dir().join(format!("{id}.log"))).unwrap()
    };
    let (a, b) = (spawn("probe-a", ports[0]), spawn("probe-b", ports[1]));
    let leader = eventually("a leader", Duration::from_secs(20), || holder(&leases)).await;
    for (port, id) in ports.iter().zip(["probe-a", "probe-b"]) {
        let role = if id == leader { "leader" } else { "follower" };
        eventually(&format!("{role} {id} ready"), Duration::from_secs(30), || async {
            (common::http_get(*port, "/readyz").await? == (200, "ok".into())).then_some(())
        })
        .await;
        assert_eq!(common::http_get(*port, "/livez").await, Some((200, "ok".into())), "{id}");
    }

    // A replica whose API server does not answer: not ready, saying why; still live.
    let dead = format!("https://127.0.0.1:{}", common::free_port());
    let kubeconfig = std::fs::read_to_string(cp.kubeconfig()).unwrap().replace(cp.server(), &dead);
    let path = cp.dir().join("probe-dead.kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let port = common::free_port();
    let mut cmd = common::controller_command_for(cp, &install, "probe-dead", port);
    cmd.env("KUBECONFIG", &path);
    let p = Process::spawn("probe-dead", cmd, &cp.dir().join("probe-dead.log")).unwrap();
    let (status, body) =
        eventually("probe-dead answering", Duration::from_secs(20), || common::http_get(port, "/readyz"))
            .await;
    assert_eq!((status, body.as_str()), (503, "not ready: no answer from the API server yet"));
    assert_eq!(common::http_get(port, "/livez").await, Some((200, "ok".into())));
    assert!(p.exited().is_none(), "exited without an API server:\n{}", p.log_tail(20));
    for r in [a, b, p] {
        r.stop(Duration::from_secs(10));
    }
}

/// The credentials hash key outlives the Lease: it is owned by the controller's
/// ServiceAccount, not the Lease, so deleting the Lease (a common way to force a failover)
/// leaves it; deleting the key makes the replicas put the same key back (nothing rolls); a
/// key replaced with another is read again by the replicas (the routers then roll once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hash_key_outlives_the_lease_and_the_replicas_follow_it() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::DeleteParams;
    let cp = qdr_tests::shared_with_controller_manager().await;
    cp.install_crd().await;
    let system = cp.namespace("hk-system").await;
    let ns = cp.namespace("hk").await;
    let replicas: Vec<Process> = ["hk-a", "hk-b"]
        .iter()
        .map(|id| common::start_controller(cp, &system.name, "hk-lease", id))
        .collect();
    let keys: Api<Secret> = system.api();
    let key = eventually("the hash key", Duration::from_secs(30), || async {
        keys.get_opt("qdr-controller-hash-key").await.ok().flatten()
    })
    .await;
    let owners = key.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!((owners[0].kind.as_str(), owners[0].name.as_str()), ("ServiceAccount", "qdr-controller"));
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = system.api();
    assert_eq!(Some(owners[0].uid.clone()), sa.get("qdr-controller").await.unwrap().metadata.uid);
    let bytes = |s: &Secret| s.data.as_ref().unwrap()["key"].0.clone();

    let obj: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "hk"}, "spec": {"deploymentPlan": {"size": 1}}}),
    )
    .unwrap();
    interconnects(&ns.client, &ns.name).create(&PostParams::default(), &obj).await.unwrap();
    let deployments: Api<Deployment> = ns.api();
    let credentials_hash = || async {
        let d = deployments.get_opt("hk").await.ok()??;
        Some(d.spec?.template.metadata?.annotations?.get("qdr-operator.io/credentials-hash")?.clone())
    };
    let first = eventually("the routers' Deployment", Duration::from_secs(30), credentials_hash).await;

    // The Lease deleted: the garbage collector has nothing to delete, a replica leads again.
    let leases: Api<Lease> = system.api();
    leases.delete("hk-lease", &DeleteParams::default()).await.unwrap();
    eventually("a leader again", Duration::from_secs(30), || async {
        leases.get_opt("hk-lease").await.ok()??.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;
    tokio::time::sleep(2 * LEASE).await;
    let kept = keys.get("qdr-controller-hash-key").await.unwrap();
    assert_eq!(kept.metadata.uid, key.metadata.uid, "the key went with the Lease");

    // The key deleted: put back, with the same bytes.
    keys.delete("qdr-controller-hash-key", &DeleteParams::default()).await.unwrap();
    let back = eventually("the key made again", Duration::from_secs(30), || async {
        keys.get_opt("qdr-controller-hash-key").await.ok()?.filter(|s| s.metadata.uid != key.metadata.uid)
    })
    .await;
    assert_eq!(bytes(&back), bytes(&key), "a new key: the routers would roll");
    assert_eq!(back.metadata.owner_references, key.metadata.owner_references);

    // The key replaced by another (the replicas race to put theirs back: try until ours
    // stands).
    let other = vec![9u8; 32];
    let replaced: Secret = serde_json::from_value(json!({
        "metadata": {"name": "qdr-controller-hash-key"}, "immutable": true,
        "data": {"key": k8s_openapi::ByteString(other.clone())}}))
    .unwrap();
    eventually("another key in place", Duration::from_secs(30), || async {
        let _ = keys.delete("qdr-controller-hash-key", &DeleteParams::default()).await;
        let _ = keys.create(&PostParams::default(), &replaced).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = keys.get_opt("qdr-controller-hash-key").await.ok()??;
        (bytes(&now) == other).then_some(())
    })
    .await;
    // A reconcile now keys the same mounted data with the new key.
    scale_and_time_named(&ns, "hk", 2).await;
    let second = eventually("a new credentials hash", Duration::from_secs(30), || async {
        credentials_hash().await.filter(|h| *h != first)
    })
    .await;
    assert_ne!(first, second);
    assert_eq!(
        bytes(&keys.get("qdr-controller-hash-key").await.unwrap()),
        other,
        "a replica put its key back"
    );
    for (i, p) in replicas.iter().enumerate() {
        assert!(p.exited().is_none(), "replica {i} exited:\n{}", p.log_tail(30));
    }
}

/// Sets Interconnect `name`'s size and waits until its Deployment has it.
async fn scale_and_time_named(ns: &qdr_tests::TestNamespace, name: &str, size: i32) {
    interconnects(&ns.client, &ns.name)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deploymentPlan": {"size": size}}})),
        )
        .await
        .unwrap();
    let deps: Api<Deployment> = ns.api();
    eventually("the size reconciled", Duration::from_secs(30), || async {
        let d = deps.get_opt(name).await.ok()??;
        (d.spec?.replicas == Some(size)).then_some(())
    })
    .await;
}
