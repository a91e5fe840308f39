//! Running the reconciler: the kube-runtime [`Controller`] over Interconnects and their
//! children, and [`run_while_leading`], which runs it exactly while this replica holds the
//! Lease.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use qdr_api::Interconnect;
use tokio::sync::watch;

use crate::reconcile::{Context, error_policy, reconcile};

/// Debounce of reconcile triggers: a burst of child events (every apply echoes back) costs
/// one reconcile.
pub const DEBOUNCE: Duration = Duration::from_millis(500);
/// Reconciles run at once.
pub const CONCURRENCY: u16 = 16;

fn api<K>(client: &kube::Client, ns: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if ns.is_empty() { Api::all(client.clone()) } else { Api::namespaced(client.clone(), ns) }
}

/// Runs the controller over the Interconnects of `namespace` (empty: all namespaces) until
/// its watches end. Dropping the future stops it at once.
pub async fn run_controller(ctx: Arc<Context>, namespace: &str) {
    let client = &ctx.client;
    let ns = namespace;
    let wc = watcher::Config::default();
    let cfg = kube::runtime::controller::Config::default().debounce(DEBOUNCE).concurrency(CONCURRENCY);
    let controller = Controller::new(api::<Interconnect>(client, ns), wc.clone());
    let store = controller.store();
    controller
        .with_config(cfg)
        .owns(api::<Deployment>(client, ns), wc.clone())
        .owns(api::<DaemonSet>(client, ns), wc.clone())
        .owns(api::<Service>(client, ns), wc.clone())
        .owns(api::<ConfigMap>(client, ns), wc.clone())
        .owns(api::<Ingress>(client, ns), wc.clone())
        .owns(api::<ServiceAccount>(client, ns), wc.clone())
        .owns(api::<Role>(client, ns), wc.clone())
        .owns(api::<RoleBinding>(client, ns), wc.clone())
        // Secrets: the Interconnect that controls one (generated), and every Interconnect
        // whose spec references it (user-provided: a missing one appearing, a renewal).
        .watches(api::<Secret>(client, ns), wc.clone(), move |secret: Secret| {
            let ns = secret.metadata.namespace.clone().unwrap_or_default();
            let name = secret.metadata.name.clone().unwrap_or_default();
            let owner = secret
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|r| r.controller == Some(true) && r.kind == "Interconnect")
                .map(|r| ObjectRef::new(&r.name).within(&ns))
                .collect::<Vec<_>>();
            let referencing = store
                .state()
                .into_iter()
                .filter(|ic| {
                    ic.metadata.namespace.as_deref() == Some(ns.as_str()) && references_secret(ic, &name)
                })
                .map(|ic| ObjectRef::from_obj(ic.as_ref()));
            owner.into_iter().chain(referencing).collect::<Vec<_>>()
        })
        .watches(api::<Pod>(client, ns), wc.clone().labels("interconnect_cr"), |pod: Pod| {
            let name = pod.metadata.labels.as_ref().and_then(|l| l.get("interconnect_cr")).cloned();
            name.map(|n| ObjectRef::new(&n).within(pod.metadata.namespace.as_deref().unwrap_or_default()))
        })
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Whether the effective spec of `ic` names Secret `name` (users, credentials, caCert,
/// issuer).
pub fn references_secret(ic: &Interconnect, name: &str) -> bool {
    let ic = qdr_api::defaults(ic);
    ic.users_secret().as_deref() == Some(name)
        || ic.issuer_secret() == name
        || ic
            .spec
            .ssl_profiles
            .iter()
            .flatten()
            .any(|p| p.credentials.as_deref() == Some(name) || p.ca_cert.as_deref() == Some(name))
}

/// Runs `work()` while `leading` is true, and drops it the moment `leading` turns false
/// (a lost Lease stops reconciling at once, mid-reconcile included); runs it again on the
/// next election. Returns when `stop` turns true (after dropping `work`), or when the
/// election ends (its sender is dropped).
///
/// `work` should not end by itself; if it does while still leading, it is started again
/// after `restart_delay`.
pub async fn run_while_leading<F, Fut>(
    mut leading: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
    restart_delay: Duration,
    mut work: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        // Follow until elected or stopped.
        while !*leading.borrow_and_update() {
            if *stop.borrow() {
                return;
            }
            tokio::select! {
                changed = leading.changed() => if changed.is_err() { return },
                _ = stop.changed() => {},
            }
        }
        if *stop.borrow() {
            return;
        }
        // Lead until the Lease is lost (false) or the election ends (true: return).
        let lost = async {
            while *leading.borrow_and_update() {
                if leading.changed().await.is_err() {
                    return true;
                }
            }
            false
        };
        let stopped = async {
            while !*stop.borrow_and_update() {
                if stop.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = work() => tokio::time::sleep(restart_delay).await,
            ended = lost => if ended { return },
            _ = stopped => return,
        }
    }
}
