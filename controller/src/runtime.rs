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
    Cache, Drift, SecretNames, SecretReferences, Written, managed_selector, owned_wake, pod_wake, slim,
    slim_pod, slim_workload, user_secret,
};
use crate::health::Health;
use crate::reconcile::{Context, error_policy, reconcile};

/// Reconciles run at once.
pub const CONCURRENCY: u16 = 16;

fn api<K>(client: &kube::Client, ns: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if ns.is_empty() { Api::all(client.clone()) } else { Api::namespaced(client.clone(), ns) }
}

/// A watch of the objects of `K` selected by `wc` (`K = PartialObjectMeta<X>` watches
/// metadata only) kept in a store, and the objects that wake their owner. `wake` judges each
/// event as the API server sent it (with `managedFields`); `slim` then drops what the store
/// does not need.
fn reflect<K>(
    (client, health): (&kube::Client, &Arc<Health>),
    ns: &str,
    wc: &watcher::Config,
    slim: fn(&mut K),
    mut wake: impl FnMut(&watcher::Event<K>) -> bool + Send + 'static,
) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send + 'static)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, mut writer) = reflector::store();
    let (health, namespace) = (health.clone(), ns.to_string());
    let woken = watcher(api::<K>(client, ns), wc.clone()).default_backoff().filter_map(move |event| {
        health.watch_result(&namespace, K::plural(&()), event.as_ref().map(drop));
        futures::future::ready(match event {
            Err(e) => Some(Err(e)),
            Ok(mut event) => {
                let woke = wake(&event);
                match &mut event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
                        slim(o)
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
                writer.apply_watcher_event(&event);
                match event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o)
                        if woke =>
                    {
                        Some(Ok(o))
                    }
                    _ => None,
                }
            }
        })
    });
    (store, woken)
}

/// Runs the controllers over the Interconnects of `namespaces` (empty: all namespaces), one
/// [`run_controller`] per namespace, each with its own watches and stores, until they end.
/// Dropping the future stops them at once.
pub async fn run_controllers(ctx: Arc<Context>, namespaces: &[String]) {
    if namespaces.is_empty() {
        return run_controller(ctx, "").await;
    }
    futures::future::join_all(namespaces.iter().map(|ns| run_controller(ctx.clone(), ns))).await;
}

/// Runs the controller over the Interconnects of `namespace` (empty: all namespaces) until
/// its watches end. Dropping the future stops it at once.
///
/// What is watched, what is cached and which events wake a reconcile is described in
/// [`crate::cache`]; there is no debounce: the controller's own writes do not wake it.
pub async fn run_controller(ctx: Arc<Context>, namespace: &str) {
    let client = &ctx.client;
    let ns = namespace;
    let c = (client, &ctx.health);
    let all = watcher::Config::default();
    let ours = watcher::Config::default().labels(&managed_selector());
    let (ic_store, ic_writer) = reflector::store();
    let health = ctx.health.clone();
    let interconnects = watcher(api::<Interconnect>(client, ns), all.clone())
        .default_backoff()
        .inspect({
            let namespace = ns.to_string();
            move |event| health.watch_result(&namespace, "interconnects", event.as_ref().map(drop))
        })
        .reflect(ic_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());

    let drift: Arc<Drift> = Arc::default();
    let (written_deployments, written_daemon_sets, written_secrets) =
        (Arc::new(Written::default()), Arc::new(Written::default()), Arc::new(Written::default()));
    let (deployments, deployment_events) = reflect::<Deployment>(
        c,
        ns,
        &ours,
        slim_workload,
        owned_wake(drift.clone(), Some(written_deployments.clone())),
    );
    let (daemon_sets, daemon_set_events) = reflect::<DaemonSet>(
        c,
        ns,
        &ours,
        slim_workload,
        owned_wake(drift.clone(), Some(written_daemon_sets.clone())),
    );
    let (secrets, secret_events) =
        reflect::<Secret>(c, ns, &ours, slim, owned_wake(drift.clone(), Some(written_secrets.clone())));
    let (service_accounts, sa_events) =
        reflect::<PartialObjectMeta<ServiceAccount>>(c, ns, &ours, slim, owned_wake(drift.clone(), None));
    let (roles, role_events) =
        reflect::<PartialObjectMeta<Role>>(c, ns, &ours, slim, owned_wake(drift.clone(), None));
    let (role_bindings, rb_events) =
        reflect::<PartialObjectMeta<RoleBinding>>(c, ns, &ours, slim, owned_wake(drift.clone(), None));
    let (services, service_events) =
        reflect::<PartialObjectMeta<Service>>(c, ns, &ours, slim, owned_wake(drift.clone(), None));
    let (config_maps, cm_events) =
        reflect::<PartialObjectMeta<ConfigMap>>(c, ns, &ours, slim, owned_wake(drift.clone(), None));
    let (ingresses, ingress_events) =
        reflect::<PartialObjectMeta<Ingress>>(c, ns, &ours, slim, owned_wake(drift.clone(), None));
    let (pods, pod_events) =
        reflect::<Pod>(c, ns, &all.clone().labels("interconnect_cr"), slim_pod, pod_wake());
    // User-provided Secrets (without our label) wake the Interconnects whose spec names
    // them (a missing one appearing, a renewal); ours come through the labelled watch.
    let secret_names = Arc::new(SecretNames::default());
    let names = secret_names.clone();
    let (health, namespace) = (ctx.health.clone(), ns.to_string());
    let user_secrets = watcher(api::<PartialObjectMeta<Secret>>(client, ns), all.clone())
        .default_backoff()
        .filter_map(move |event| {
            health.watch_result(&namespace, "secrets (all, metadata)", event.as_ref().map(drop));
            futures::future::ready(match event {
                Err(e) => Some(Err(e)),
                Ok(event) => {
                    names.apply(&event);
                    match event {
                        watcher::Event::Apply(s) | watcher::Event::Delete(s) if user_secret(&s) => {
                            Some(Ok(s))
                        }
                        _ => None,
                    }
                }
            })
        });
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
        listed: Arc::default(),
    };
    let ctx = Arc::new(ctx.for_term(cache));
    let term = ctx.clone();
    let _term = ctx.health.term(ns, move || term.cache.as_ref().is_some_and(Cache::is_ready));

    let references = Arc::new(SecretReferences::default());
    let store = ic_store.clone();
    let cfg = kube::runtime::controller::Config::default().concurrency(CONCURRENCY);
    Controller::for_stream(interconnects, ic_store)
        .with_config(cfg)
        .owns_stream(deployment_events)
        .owns_stream(daemon_set_events)
        .owns_stream(secret_events)
        .owns_stream(sa_events)
        .owns_stream(role_events)
        .owns_stream(rb_events)
        .owns_stream(service_events)
        .owns_stream(cm_events)
        .owns_stream(ingress_events)
        .watches_stream(user_secrets, move |secret: PartialObjectMeta<Secret>| {
            let ns = secret.metadata.namespace.clone().unwrap_or_default();
            let name = secret.metadata.name.clone().unwrap_or_default();
            references.referencing(&store, &ns, &name)
        })
        .watches_stream(pod_events, |pod: Pod| {
            let name = pod.metadata.labels.as_ref().and_then(|l| l.get("interconnect_cr")).cloned();
            name.map(|n| ObjectRef::new(&n).within(pod.metadata.namespace.as_deref().unwrap_or_default()))
        })
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
