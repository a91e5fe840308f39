//! Replicas that start at the same time against an absent Secret end with exactly one CA:
//! the create is optimistic, the losers adopt the winner's CA and serve its certificate.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use qdr_certs::pki::{CertInfo, verify_leaf};
use qdr_certs::rotation::{Material, plan};
use qdr_certs::store::{SecretStore, Written};
use qdr_certs::{CertManager, CertResolver, Policy, Step};

const TRIALS: usize = 10;
const REPLICAS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn simultaneous_first_start_makes_exactly_one_ca() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("certs-race").await;
    let policy = Policy::new("race-ca", vec!["svc.ns.svc".into()]);
    let mut lost_total = 0;
    for trial in 0..TRIALS {
        let secret = format!("race-{trial}");
        let clients =
            futures::future::join_all((0..REPLICAS).map(|_| async { cp.client().await.unwrap() })).await;
        let stores: Vec<SecretStore> = clients
            .iter()
            .map(|c| SecretStore::new(Api::<Secret>::namespaced(c.clone(), &ns.name), &secret))
            .collect();

        // Every replica reads the absent Secret before any of them writes (the worst case
        // of a simultaneous start), then all write their own new CA at once.
        let seen = futures::future::join_all(stores.iter().map(|s| s.get())).await;
        assert!(seen.iter().all(|s| matches!(s, Ok(None))), "trial {trial}: the Secret exists already");
        let proposals: Vec<Material> = (0..REPLICAS)
            .map(|_| plan(&Material::default(), SystemTime::now(), &policy, &|_| true).unwrap().unwrap().1)
            .collect();
        let writes =
            futures::future::join_all(stores.iter().zip(&proposals).map(|(s, m)| s.write(None, m))).await;
        let outcomes: Vec<Written> = writes.into_iter().map(|w| w.unwrap()).collect();
        assert_eq!(
            outcomes.iter().filter(|w| **w == Written::Done).count(),
            1,
            "trial {trial}: {outcomes:?}"
        );
        lost_total += outcomes.iter().filter(|w| **w == Written::Lost).count();

        // Each replica then runs its normal reconcile: the losers adopt the winner's CA.
        let managers: Vec<Arc<CertManager>> = clients
            .into_iter()
            .map(|c| {
                Arc::new(CertManager::new(c, &ns.name, &secret, policy.clone(), vec![], CertResolver::new()))
            })
            .collect();
        for r in futures::future::join_all(managers.iter().map(|m| m.reconcile())).await {
            r.unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        }
        let creates: usize =
            managers.iter().map(|m| m.steps().iter().filter(|(s, _)| *s == Step::Create).count()).sum();
        assert_eq!(creates, 0, "trial {trial}: a replica replaced the winner's CA");

        let m = qdr_certs::store::decode(&ns.api::<Secret>().get(&secret).await.unwrap());
        assert_eq!(m.bundle.len(), 1, "trial {trial}: exactly one CA in the bundle");
        let ca = CertInfo::parse(&m.ca.unwrap().cert_pem).unwrap();
        for (i, mgr) in managers.iter().enumerate() {
            let leaf = mgr
                .resolver()
                .cert_pem()
                .unwrap_or_else(|| panic!("trial {trial}: replica {i} serves nothing"));
            assert_eq!(
                CertInfo::parse(&leaf).unwrap().issuer_cn,
                ca.subject_cn,
                "trial {trial}: replica {i}"
            );
            verify_leaf(&leaf, &m.bundle.concat(), "svc.ns.svc", SystemTime::now()).unwrap();
            mgr.serving_trusted().unwrap();
        }
    }
    eprintln!(
        "{TRIALS} trials of {REPLICAS} simultaneous replicas: one CA each time, {lost_total} creates lost and adopted"
    );
    assert_eq!(lost_total, TRIALS * (REPLICAS - 1));
}

/// The unsynchronized version: replicas just start and reconcile at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn replicas_reconciling_at_once_agree_on_one_ca() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("certs-start").await;
    let policy = Policy::new("start-ca", vec!["svc.ns.svc".into()]);
    for trial in 0..TRIALS {
        let secret = format!("start-{trial}");
        let managers: Vec<Arc<CertManager>> = futures::future::join_all((0..REPLICAS).map(|_| async {
            let c = cp.client().await.unwrap();
            Arc::new(CertManager::new(c, &ns.name, &secret, policy.clone(), vec![], CertResolver::new()))
        }))
        .await;
        for r in futures::future::join_all(managers.iter().map(|m| m.reconcile())).await {
            r.unwrap();
        }
        let creates: usize =
            managers.iter().map(|m| m.steps().iter().filter(|(s, _)| *s == Step::Create).count()).sum();
        assert_eq!(creates, 1, "trial {trial}");
        let served: Vec<String> = managers.iter().map(|m| m.resolver().cert_pem().unwrap()).collect();
        assert!(
            served.windows(2).all(|w| w[0] == w[1]),
            "trial {trial}: replicas serve different certificates"
        );
    }
}

/// A deleted Secret is written back by a replica with what it serves (same CA, same
/// certificate: the caBundle the API server holds stays right), not replaced by a new CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_secret_is_restored_from_what_is_served() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("certs-restore").await;
    let client = cp.client().await.unwrap();
    let policy = Policy::new("restore-ca", vec!["svc.ns.svc".into()]);
    let resolver = CertResolver::new();
    let manager = CertManager::new(client.clone(), &ns.name, "restore", policy, vec![], resolver.clone());
    assert_eq!(manager.reconcile().await.unwrap(), vec![Step::Create]);
    let api: Api<Secret> = Api::namespaced(client, &ns.name);
    let before = api.get("restore").await.unwrap().data;
    let served = resolver.cert_pem();
    api.delete("restore", &Default::default()).await.unwrap();
    assert_eq!(manager.reconcile().await.unwrap(), vec![Step::Restore]);
    assert_eq!(api.get("restore").await.unwrap().data, before, "not the same material");
    assert_eq!(resolver.cert_pem(), served, "the served certificate changed");
    assert_eq!(manager.reconcile().await.unwrap(), vec![], "nothing more to do");
}
