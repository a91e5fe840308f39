//! Running the reconciler: the kube-runtime [`Controller`] over Interconnects and their
//! children, and [`run_while_leading`], which runs it exactly while this replica holds the
//! Lease.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, predicates, watcher};
use qdr_api::Interconnect;
use tokio::sync::watch;

use crate::cache::{
    Cache, Drift, MANAGED_BY_LABEL, SecretReferences, Written, forget_deleted, managed_selector, pod_state,
    slim_pod, slim_secret_name, triggers,
};
use crate::reconcile::{Context, error_policy, reconcile};

/// Reconciles run at once.
pub const CONCURRENCY: u16 = 16;

fn api<K>(client: &kube::Client, ns: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if ns.is_empty() { Api::all(client.clone()) } else { Api::namespaced(client.clone(), ns) }
}

/// A reflector over the objects of `K` selected by `wc` (full objects, each passed through
/// `slim` before it is stored), and the events it saw.
fn reflect<K>(
    client: &kube::Client,
    ns: &str,
    wc: &watcher::Config,
    slim: fn(&mut K),
) -> (Store<K>, impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api::<K>(client, ns), wc.clone()).default_backoff().modify(slim).reflect(writer);
    (store, events)
}

/// [`reflect`] for metadata only.
fn reflect_meta<K>(
    client: &kube::Client,
    ns: &str,
    wc: &watcher::Config,
    slim: fn(&mut PartialObjectMeta<K>),
) -> (
    Store<PartialObjectMeta<K>>,
    impl Stream<Item = Result<watcher::Event<PartialObjectMeta<K>>, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api::<PartialObjectMeta<K>>(client, ns), wc.clone())
        .default_backoff()
        .modify(slim)
        .reflect(writer);
    (store, events)
}

fn keep_all<K>(_: &mut K) {}

/// Runs the controller over the Interconnects of `namespace` (empty: all namespaces) until
/// its watches end. Dropping the future stops it at once.
///
/// What is watched, what is cached and which events wake a reconcile is described in
/// [`crate::cache`]; there is no debounce: the controller's own writes do not wake it.
pub async fn run_controller(ctx: Arc<Context>, namespace: &str) {
    let client = &ctx.client;
    let ns = namespace;
    let all = watcher::Config::default();
    let ours = watcher::Config::default().labels(&managed_selector());
    let (ic_store, ic_writer) = reflector::store();
    let interconnects = watcher(api::<Interconnect>(client, ns), all.clone())
        .default_backoff()
        .reflect(ic_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());

    let (deployments, deployment_events) = reflect::<Deployment>(client, ns, &ours, keep_all);
    let (daemon_sets, daemon_set_events) = reflect::<DaemonSet>(client, ns, &ours, keep_all);
    let (secrets, secret_events) = reflect::<Secret>(client, ns, &ours, keep_all);
    let (pods, pod_events) = reflect::<Pod>(client, ns, &all.clone().labels("interconnect_cr"), slim_pod);
    let (secret_names, secret_name_events) = reflect_meta::<Secret>(client, ns, &all, slim_secret_name);
    let (service_accounts, sa_events) = reflect_meta::<ServiceAccount>(client, ns, &ours, keep_all);
    let (roles, role_events) = reflect_meta::<Role>(client, ns, &ours, keep_all);
    let (role_bindings, rb_events) = reflect_meta::<RoleBinding>(client, ns, &ours, keep_all);
    let (services, service_events) = reflect_meta::<Service>(client, ns, &ours, keep_all);
    let (config_maps, cm_events) = reflect_meta::<ConfigMap>(client, ns, &ours, keep_all);
    let (ingresses, ingress_events) = reflect_meta::<Ingress>(client, ns, &ours, keep_all);
    let drift: Arc<Drift> = Arc::default();
    let (written_deployments, written_daemon_sets, written_secrets) =
        (Arc::default(), Arc::default(), Arc::default());
    let deployment_events = forget_deleted(deployment_events, Arc::clone(&written_deployments));
    let daemon_set_events = forget_deleted(daemon_set_events, Arc::clone(&written_daemon_sets));
    let secret_events = forget_deleted(secret_events, Arc::clone(&written_secrets));
    let cache = Cache {
        deployments,
        daemon_sets,
        pods,
        secrets,
        secret_names,
        service_accounts,
        roles,
        role_bindings,
        services,
        config_maps,
        ingresses,
        written_deployments,
        written_daemon_sets,
        written_secrets,
        written_interconnects: Arc::new(Written::status_writes()),
        drift: Arc::clone(&drift),
        applied: Arc::default(),
    };
    let ctx = Arc::new(ctx.for_term(cache));

    // User-provided Secrets (without our label): every Interconnect whose spec names one
    // (a missing one appearing, a renewal). Ours come through the labelled watch.
    let references = Arc::new(SecretReferences::default());
    let store = ic_store.clone();
    let user_secrets = secret_name_events.filter_map(|e| {
        futures::future::ready(match e {
            Ok(watcher::Event::Apply(s) | watcher::Event::Delete(s)) => {
                let ours = s.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).is_some();
                (!ours).then_some(Ok(s))
            }
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
    });
    let cfg = kube::runtime::controller::Config::default().concurrency(CONCURRENCY);
    Controller::for_stream(interconnects, ic_store)
        .with_config(cfg)
        .owns_stream(triggers(deployment_events, drift.clone()))
        .owns_stream(triggers(daemon_set_events, drift.clone()))
        .owns_stream(triggers(secret_events, drift.clone()))
        .owns_stream(triggers(sa_events, drift.clone()))
        .owns_stream(triggers(role_events, drift.clone()))
        .owns_stream(triggers(rb_events, drift.clone()))
        .owns_stream(triggers(service_events, drift.clone()))
        .owns_stream(triggers(cm_events, drift.clone()))
        .owns_stream(triggers(ingress_events, drift.clone()))
        .watches_stream(user_secrets, move |secret: PartialObjectMeta<Secret>| {
            let ns = secret.metadata.namespace.clone().unwrap_or_default();
            let name = secret.metadata.name.clone().unwrap_or_default();
            references.referencing(&store, &ns, &name)
        })
        .watches_stream(
            pod_events.touched_objects().predicate_filter(pod_state, PredicateConfig::default()),
            |pod: Pod| {
                let name = pod.metadata.labels.as_ref().and_then(|l| l.get("interconnect_cr")).cloned();
                name.map(|n| ObjectRef::new(&n).within(pod.metadata.namespace.as_deref().unwrap_or_default()))
            },
        )
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|r| {
            // Failed reconciles are logged by `reconcile`; a failing watch is logged here
            // (it is retried with backoff).
            if let Err(kube::runtime::controller::Error::QueueError(e)) = r {
                tracing::warn!(error = %e, "watch failed");
            }
            futures::future::ready(())
        })
        .await;
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
