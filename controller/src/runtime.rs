//! Running the reconciler: the kube-runtime [`kube::runtime::Controller`] over Interconnects and their
//! children, and [`run_while_leading`], which runs it exactly while this replica holds the
//! Lease.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;

use crate::cache::Cache;
use crate::reconcile::{Context, error_policy, reconcile};

/// Reconciles run at once. A pass is a chain of writes, each waiting on the API server; the
/// Role and RoleBinding creates wait longest (the API server checks them for privilege
/// escalation with consistent LISTs of the namespace's RoleBindings: 100–150 ms each under
/// load, `make bench`), so 32 passes in flight keep the API server busy where 16 left it
/// half idle (500 Interconnects converged in 10.9 s instead of 13.2 s, with the API server at
/// 1.56 of 2 cores instead of 0.85).
pub const CONCURRENCY: u16 = 32;

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
    let process = ctx.clone();
    let links_on = links_installed(&ctx.client, namespace).await;
    let (cache, controller) =
        crate::cache::watch(&ctx.client, &ctx.health, namespace, links_on, move |ic| process.forget(ic));
    let ctx = Arc::new(ctx.for_term(cache));
    // A follower publishes no per-Interconnect series: frozen values would outlive the term.
    let _series = ctx.metrics.interconnect_series_guard();
    let term = ctx.clone();
    let _term = ctx.health.term(namespace, move || term.cache.as_ref().is_some_and(Cache::is_ready));
    let cfg = kube::runtime::controller::Config::default().concurrency(CONCURRENCY);
    // A read of the routers that ended (run off the reconcile path) reconciles its
    // Interconnect, which takes the new answers.
    let mesh_reads = ctx.mesh.subscribe(namespace);
    // The AccessGrants of the same namespaces, in the same term (`crate::grants`).
    let client = ctx.client.clone();
    let grants = async move {
        if links_on {
            crate::grants::run(client, namespace).await;
        }
    };
    let interconnects = controller
        .with_config(cfg)
        .reconcile_on(mesh_reads)
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|r| {
            // Failed reconciles are logged by `reconcile`; a failing watch is logged here
            // (it is retried with backoff).
            if let Err(kube::runtime::controller::Error::QueueError(e)) = r {
                tracing::warn!(error = %e, "watch failed");
            }
            futures::future::ready(())
        });
    futures::future::join(interconnects, grants).await;
}

/// Whether the AccessGrant and Link CRDs are installed (the API server serves both kinds).
/// Without them (the controller upgraded before its CRDs), links across clusters are off for
/// the term, with a warning, and everything else runs: a watch of a kind the API server does
/// not serve would keep the controller's stores from ever being listed. Any answer but "not
/// found" counts as installed (the watches then report what is wrong).
pub async fn links_installed(client: &kube::Client, namespace: &str) -> bool {
    use kube::api::{Api, ListParams};
    let params = ListParams::default().limit(1);
    fn missing<T>(r: &Result<T, kube::Error>) -> bool {
        matches!(r, Err(kube::Error::Api(e)) if e.code == 404)
    }
    fn api<K>(client: &kube::Client, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        if namespace.is_empty() {
            Api::all(client.clone())
        } else {
            Api::namespaced(client.clone(), namespace)
        }
    }
    let grants = api::<qdr_api::links::AccessGrant>(client, namespace).list_metadata(&params).await;
    let links = api::<qdr_api::links::Link>(client, namespace).list_metadata(&params).await;
    let on = !missing(&grants) && !missing(&links);
    if !on {
        tracing::warn!(
            "the AccessGrant and Link CRDs are not installed: links across clusters are off until the controller \
             restarts with them installed"
        );
    }
    on
}

/// Runs `work()` while `leading` is true, and drops it the moment `leading` turns false
/// (a lost Lease stops reconciling at once, mid-reconcile included); runs it again on the
/// next election. Returns when `stop` turns true (after dropping `work`), or when the
/// election ends (its sender is dropped).
///
/// Every value sent on `leading` is a change of term ([`crate::lease::Elector`] sends
/// `true` when a term begins and `false` when it ends, nothing in between), so any send
/// seen while working ends the work, even when its value is `true` again: a leader that
/// missed its renew deadline and took its own Lease back before this task looked would
/// otherwise go on with the passes of the term it lost. The work of the new term starts
/// at once.
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
        // Lead until the term ends: any send (false, or false then true again, which the
        // channel shows as one change) means this term's work is over; `true` when the
        // election ended (return).
        let lost = async { leading.changed().await.is_err() };
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
