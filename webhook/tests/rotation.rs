//! Certificate rotation under load: two replicas (the validating configuration calls A, the
//! mutating one calls B, so every request passes through both), lifetimes of seconds,
//! creates and updates through the API server for over a minute, across several
//! serving-certificate rotations and at least one CA rotation: no request may fail.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

/// Changes of the Secret: (when, serving certificate DER, CA PEM).
type SecretLog = Arc<Mutex<Vec<(Instant, Vec<u8>, String)>>>;
/// Changes of what one replica serves: (when, serving certificate DER).
type ProbeLog = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

/// Load duration: at least a minute, so every rotation step happens under load.
const LOAD: Duration = Duration::from_secs(65);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_under_load_fails_no_admission_request() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = qdr_tests::shared().await;
    cp.install_crd().await;
    let client = cp.client().await.unwrap();
    let webhook_ns = cp.namespace("rotation-system").await.name.clone();
    let ns_guard = cp.namespace("rotation").await;
    let ns = ns_guard.name.clone();
    let (port_a, port_b) = (common::free_port(), common::free_port());
    let reg = common::register(&client, "rotation", port_a, port_b).await;
    common::label_namespace(cp, &ns, "rotation");
    let fast = [
        "--ca-lifetime=45s",
        "--cert-lifetime=9s",
        "--ca-soak=2s",
        "--ca-retire-grace=4s",
        "--check-interval=500ms",
    ];
    let a = common::start_replica(cp, &webhook_ns, &reg, port_a, &fast);
    let b = common::start_replica(cp, &webhook_ns, &reg, port_b, &fast);
    common::wait_ready(&a, Duration::from_secs(60)).await;
    common::wait_ready(&b, Duration::from_secs(60)).await;
    common::wait_admission_works(cp, &ns, Duration::from_secs(60)).await;

    // The Secret belongs to the ValidatingWebhookConfiguration: deleting the install (kubectl
    // delete -k, helm uninstall) deletes it with the configuration.
    let vwc: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration =
        Api::all(client.clone()).get(&reg.validating).await.unwrap();
    let tls_secret: Secret =
        Api::namespaced(client.clone(), &webhook_ns).get("qdr-webhook-tls").await.unwrap();
    let owners = tls_secret.metadata.owner_references.unwrap_or_default();
    assert!(
        owners.iter().any(|o| o.kind == "ValidatingWebhookConfiguration"
            && o.name == reg.validating
            && Some(&o.uid) == vwc.metadata.uid.as_ref()),
        "{owners:?}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();

    // What the Secret says, as it changes: (time, leaf DER, CA PEM).
    let secret_log: SecretLog = Arc::default();
    let observer = {
        let api: Api<Secret> = Api::namespaced(client.clone(), &webhook_ns);
        let log = secret_log.clone();
        tokio::spawn(async move {
            let cfg = watcher::Config::default().fields("metadata.name=qdr-webhook-tls");
            let mut events = watcher(api, cfg).boxed();
            while let Some(Ok(ev)) = events.next().await {
                if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = ev {
                    let m = qdr_certs::store::decode(&s);
                    let (Some(leaf), Some(ca)) = (m.leaf, m.ca) else { continue };
                    let der = qdr_certs::pki::first_der(&leaf.cert_pem).unwrap();
                    let mut log = log.lock().unwrap();
                    if log.last().is_none_or(|(_, d, _)| *d != der) {
                        log.push((Instant::now(), der, ca.cert_pem));
                    }
                }
            }
        })
    };

    // What each replica serves, probed every 50 ms: (time, leaf DER) at each change.
    let tls = common::see_any_cert();
    let probe_logs: Vec<ProbeLog> = vec![Arc::default(), Arc::default()];
    let probers: Vec<_> = [port_a, port_b]
        .into_iter()
        .zip(probe_logs.clone())
        .map(|(port, log)| {
            let (stop, tls) = (stop.clone(), tls.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(der) = common::served_leaf(port, &tls) {
                        let mut log = log.lock().unwrap();
                        if log.last().is_none_or(|(_, d)| *d != der) {
                            log.push((Instant::now(), der));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();

    // The load: 4 workers creating and then updating Interconnects through the API server.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    );
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            let (ok, failed, errors) = (ok.clone(), failed.clone(), errors.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while start.elapsed() < LOAD {
                    let name = format!("load-{w}-{i}");
                    i += 1;
                    let obj: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                        "metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}}
                    }))
                    .unwrap();
                    let created = api.create(&PostParams::default(), &obj).await;
                    let updated = match created {
                        Ok(_) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                            let patch = json!({"spec": {"deploymentPlan": {"size": 2}}});
                            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
                        }
                        Err(e) => Err(e),
                    };
                    match updated {
                        Ok(()) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            let mut errs = errors.lock().unwrap();
                            if errs.len() < 5 {
                                errs.push(format!("{:.1?} {name}: {e}", start.elapsed()));
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    for p in probers {
        p.join().unwrap();
    }
    observer.abort();

    let secret_log = secret_log.lock().unwrap().clone();
    let leaf_rotations = secret_log.len().saturating_sub(1);
    let ca_rotations = secret_log.windows(2).filter(|w| w[0].2 != w[1].2).count();
    // Time from each new leaf appearing in the Secret to every replica serving it.
    let mut propagation: Vec<Duration> = Vec::new();
    for (t, der, _) in secret_log.iter().skip(1) {
        let per_replica: Vec<Option<Instant>> = probe_logs
            .iter()
            .map(|log| log.lock().unwrap().iter().find(|(_, d)| d == der).map(|(tr, _)| *tr))
            .collect();
        if let Some(latest) =
            per_replica.iter().copied().collect::<Option<Vec<_>>>().and_then(|v| v.into_iter().max())
        {
            propagation.push(latest.saturating_duration_since(*t));
        }
    }
    propagation.sort();
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    let served: HashMap<usize, usize> =
        probe_logs.iter().enumerate().map(|(i, l)| (i, l.lock().unwrap().len())).collect();
    eprintln!(
        "rotation under load: {} requests ({ok} ok, {failed} failed) in {:.0?}; {leaf_rotations} serving-certificate \
         rotations, {ca_rotations} CA rotations; certificates seen per replica {served:?}; new certificate on every \
         replica after p50 {:?}, max {:?} ({} samples, 50 ms probe resolution)",
        ok + failed,
        LOAD,
        propagation.get(propagation.len() / 2),
        propagation.last(),
        propagation.len(),
    );
    assert_eq!(failed, 0, "failed admission requests: {:#?}", errors.lock().unwrap());
    assert!(ok > 200, "too little load: {ok}");
    assert!(leaf_rotations >= 3, "only {leaf_rotations} serving-certificate rotations");
    assert!(ca_rotations >= 1, "no CA rotation");
    assert!(
        !propagation.is_empty() && propagation.len() + 1 >= leaf_rotations,
        "rotations not observed on both replicas"
    );
    links_are_judged_at_apply(&client, &ns).await;
    permissions_are_exactly_what_deploy_grants(cp, &webhook_ns);
    drop(ns_guard);
    drop((a, b));
}

/// The replicas ran as the `qdr-webhook` ServiceAccount bound by `deploy/`'s RBAC through
/// its whole life cycle (Secret created, read, watched, rotated; caBundles patched): nothing
/// was refused, and every permission `deploy/` grants it was used.
fn permissions_are_exactly_what_deploy_grants(cp: &qdr_tests::ControlPlane, webhook_ns: &str) {
    use qdr_tests::rbac::{deploy_rbac, granted, used};
    let user = format!("system:serviceaccount:{webhook_ns}:qdr-webhook");
    let (used, forbidden) = used(&cp.audit(), &user);
    assert!(forbidden.is_empty(), "requests refused by deploy/'s RBAC:\n{}", forbidden.join("\n"));
    let granted = granted(&deploy_rbac(cp).unwrap(), "qdr-webhook");
    let show = |ps: Vec<&qdr_tests::rbac::Permission>| {
        ps.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    eprintln!("webhook permissions used: {}", show(used.iter().collect()));
    let unused: Vec<_> = granted.iter().filter(|p| !used.contains(*p)).collect();
    assert!(unused.is_empty(), "granted by deploy/ but never used: {}", show(unused));
    let beyond: Vec<_> = used.iter().filter(|p| !granted.contains(*p)).collect();
    assert!(beyond.is_empty(), "used without a grant in deploy/: {}", show(beyond));
}

/// Through the API server, as `kubectl apply` meets them: a Link whose token does not exist
/// is refused with its cause at `spec.tokenSecret` (the webhook read the token Secret and the
/// Interconnect by name, as its ServiceAccount), and an expired token Secret is refused with
/// its cause at its expiry annotation.
async fn links_are_judged_at_apply(client: &kube::Client, ns: &str) {
    use qdr_api::links::token::*;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Link"),
        "links",
    );
    let links: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let link: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Link",
        "metadata": {"name": "to-elsewhere"}, "spec": {"interconnect": "load-0-0", "tokenSecret": "missing"}
    }))
    .unwrap();
    let err = links.create(&PostParams::default(), &link).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("spec.tokenSecret") && text.contains("no such Secret"), "{text}");
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let token: Secret = serde_json::from_value(json!({
        "metadata": {"name": "expired-token", "labels": {TOKEN_LABEL: "true"}, "annotations": {
            ROLE_ANNOTATION: "inter-router", ENDPOINTS_ANNOTATION: "hub.example:55671",
            EXPIRES_ANNOTATION: "2020-01-01T00:00:00Z", SITE_ANNOTATION: "b"}},
        "type": TOKEN_TYPE,
        "stringData": {CA_KEY: pem, CERT_KEY: pem, KEY_KEY: pem.replace("CERTIFICATE", "PRIVATE KEY")}
    }))
    .unwrap();
    let err = Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &token)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("token-expires") && text.contains("has expired"), "{text}");
}
