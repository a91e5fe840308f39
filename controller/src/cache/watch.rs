//! The watches of one namespace (or all), the stores they fill, and the kube-runtime
//! [`Controller`] they drive: which kind is watched how is tabled in [`super`].

use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, predicates, watcher};
use qdr_api::Interconnect;

use super::memo::{AppliedMemo, Drift, OwnWrites, SecretReferences};
use super::meta_store::{Compact, Entry, PodStore, ReplicaSetStore, SecretStore};
use super::names::SecretNames;
use super::slim::{slim, slim_budget, slim_policy, slim_workload};
use super::stores::Cache;
use super::wake::{
    Listed, Relist, Versions, interconnect_controller, interconnect_seen, owned_wake, pod_wake,
    replica_set_wake, user_secret, written_stored,
};
use super::written::Written;
use crate::health::Health;
use crate::labels;

fn api<K>(client: &kube::Client, ns: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if ns.is_empty() { Api::all(client.clone()) } else { Api::namespaced(client.clone(), ns) }
}

/// A kind a watch can follow: namespaced, decodable, shared across tasks.
trait Watchable:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A watch of the objects of `K` selected by `wc` kept in a [`Compact`] store of `E`s
/// (`K = PartialObjectMeta<X>`: a metadata watch), and the objects that wake their owner
/// ([`watched`]). Nothing is cut from the events: an `E` takes only what it keeps. With
/// `written` (a kind with read-your-writes), each event the store has kept ends the copy
/// of the write it shows ([`written_stored`]).
fn reflect_compact<K, E>(
    c: (&kube::Client, &Arc<Health>),
    ns: &str,
    wc: &watcher::Config,
    wake: impl FnMut(&watcher::Event<K>) -> bool + Send + 'static,
    written: Option<Arc<Written<K>>>,
) -> (Compact<K, E>, impl Stream<Item = Result<K, watcher::Error>> + Send + 'static)
where
    K: Watchable,
    E: Entry<K>,
{
    let store = Compact::default();
    let writer = store.clone();
    let mut stored = written.map(written_stored);
    let woken = watched(c, ns, wc, wake, store.clone(), move |e| {
        writer.apply_watcher_event(e);
        if let Some(stored) = &mut stored {
            stored(e);
        }
    });
    (store, woken)
}

/// The labelled metadata watch of a child kind `X` ([`reflect_compact`] into a
/// [`super::meta_store::MetaStore`]), woken by [`owned_wake`].
fn reflect_meta<X>(
    c: (&kube::Client, &Arc<Health>),
    ns: &str,
    ours: &watcher::Config,
    own: &Arc<OwnWrites>,
    drift: &Arc<Drift>,
) -> (
    super::meta_store::MetaStore<X>,
    impl Stream<Item = Result<PartialObjectMeta<X>, watcher::Error>> + Send + 'static,
)
where
    PartialObjectMeta<X>: Watchable,
    X: Send + Sync + 'static,
{
    reflect_compact(c, ns, ours, owned_wake(own.clone(), drift.clone(), None), None)
}

/// The watch of [`reflect_compact`]: `wake` judges each event as the API server sent it
/// (with `managedFields`), and `apply` puts it in the store (whose entries take only what
/// they keep), which `view` reads (to tell what a relist changed).
fn watched<K>(
    (client, health): (&kube::Client, &Arc<Health>),
    ns: &str,
    wc: &watcher::Config,
    mut wake: impl FnMut(&watcher::Event<K>) -> bool + Send + 'static,
    view: impl Versions<K> + Send + 'static,
    mut apply: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Watchable,
{
    let mut relist = Relist::default();
    let (health, namespace) = (health.clone(), ns.to_string());
    watcher(api::<K>(client, ns), wc.clone())
        .default_backoff()
        .map(move |event| {
            health.watch_result(&namespace, K::plural(&()), event.as_ref().map(drop));
            let event = match event {
                Err(e) => return vec![Err(e)],
                Ok(event) => event,
            };
            match &event {
                watcher::Event::Init => tracing::debug!(namespace, kind = %K::plural(&()), "relist began"),
                watcher::Event::InitDone => {
                    tracing::debug!(namespace, kind = %K::plural(&()), "relist stored")
                }
                _ => {}
            }
            let mut out = Vec::new();
            let woke = match relist.see(&view, &event) {
                Listed::Judge => wake(&event),
                Listed::Unchanged => false,
                Listed::Gone(gone) => {
                    for o in gone {
                        // The stored copy carries its last version seen, not the revision
                        // of its deletion: without a version, what the controller wrote of
                        // that name since is forgotten too (`Written::deleted`).
                        let mut deleted = o.clone();
                        deleted.meta_mut().resource_version = None;
                        if wake(&watcher::Event::Delete(deleted)) {
                            out.push(Ok(o));
                        }
                    }
                    false
                }
            };
            apply(&event);
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o)
                    if woke =>
                {
                    out.push(Ok(o));
                }
                _ => {}
            }
            out
        })
        .flat_map(futures::stream::iter)
}

/// A store of every `K` that `config` selects in `ns` (whole objects), and the stream of
/// those that appear, change or go (the wake-ups), its health reported as `what`. With `on`
/// false (the kind's CRD is not installed), an empty store, listed, and no events.
fn store_all<K: Watchable>(
    (client, health): (&kube::Client, &Arc<Health>),
    ns: &str,
    config: watcher::Config,
    what: &'static str,
    on: bool,
) -> (Store<K>, futures::stream::BoxStream<'static, Result<K, watcher::Error>>) {
    let (store, mut writer) = reflector::store();
    if !on {
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        return (store, futures::stream::empty().boxed());
    }
    let (health, namespace) = (health.clone(), ns.to_string());
    let events = watcher(api::<K>(client, ns), config)
        .default_backoff()
        .inspect(move |event| health.watch_result(&namespace, what, event.as_ref().map(drop)))
        .reflect(writer)
        .touched_objects();
    (store, events.boxed())
}

/// Whether an object with metadata `meta` is an Interconnect's child: labelled ours
/// ([`labels::MANAGED_BY_KEY`]) and controlled by an Interconnect. The stores of every
/// PodDisruptionBudget and NetworkPolicy ([`store_others`]) keep none: they answer which
/// objects select an Interconnect's routers without being its own (an admin's), and an
/// Interconnect's budget and policy select its own routers only. At 2,000 Interconnects they
/// were 4,000 of the two stores' entries, each scanned by every pass.
pub(crate) fn interconnect_child(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    let group = <qdr_api::Interconnect as kube::Resource>::group(&());
    labelled_ours(meta.labels.as_ref())
        && meta.owner_references.iter().flatten().any(|r| {
            r.controller == Some(true)
                && r.kind == <qdr_api::Interconnect as kube::Resource>::kind(&())
                && r.api_version.split('/').next() == Some(&*group)
        })
}

/// Whether `labels` carry the operator's managed-by label ([`labels::MANAGED_BY_KEY`]).
fn labelled_ours(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels.and_then(|l| l.get(labels::MANAGED_BY_KEY)).is_some_and(|v| v == labels::MANAGED_BY)
}

/// A store of every object of kind `K` in namespace `ns` (empty: all) but the Interconnects'
/// own ([`interconnect_child`]), each cut by `slim` as it arrives, and the stream of those
/// that are not ours (no managed-by label of ours) appearing, changing or going; `what`
/// names the watch in the health report.
fn store_others<K: Watchable>(
    (client, health): (&kube::Client, &Arc<Health>),
    ns: &str,
    config: watcher::Config,
    what: &'static str,
    slim: fn(&mut K),
) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send + 'static) {
    let (store, writer) = reflector::store();
    let (health, namespace) = (health.clone(), ns.to_string());
    let events = watcher(api::<K>(client, ns), config)
        .default_backoff()
        .inspect(move |event| health.watch_result(&namespace, what, event.as_ref().map(drop)))
        .try_filter_map(move |mut event| {
            match &mut event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
                    slim(o)
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            // An Interconnect's own is not kept: listed, it is left out; changed, it is
            // taken out (should it have been someone else's before).
            let event = match event {
                watcher::Event::InitApply(o) if interconnect_child(o.meta()) => None,
                watcher::Event::Apply(o) if interconnect_child(o.meta()) => Some(watcher::Event::Delete(o)),
                event => Some(event),
            };
            futures::future::ready(Ok(event))
        })
        .reflect(writer)
        .touched_objects()
        .try_filter(|o: &K| futures::future::ready(!labelled_ours(o.meta().labels.as_ref())));
    (store, events)
}

/// Starts nothing yet: builds the watches of namespace `ns` (empty: all namespaces), the
/// [`Cache`] their stores fill, and the [`Controller`] over Interconnects that they wake
/// (owned kinds, user-provided Secrets by the specs that name them, router pods by their
/// `interconnect_cr` label). Polling the controller runs the watches; each watch reports
/// its health (listed, failing) to `health`. `links_on`: the AccessGrant and Link CRDs are
/// installed (else their stores stay empty: [`crate::runtime::links_installed`]). `gone` is
/// called with each Interconnect that was deleted (or is found missing when its watch lists
/// again), after the term's memos of it were dropped.
pub(crate) fn watch(
    client: &kube::Client,
    health: &Arc<Health>,
    ns: &str,
    links_on: bool,
    gone: impl Fn(&Interconnect) + Send + 'static,
) -> (Cache, Controller<Interconnect>) {
    let c = (client, health);
    let all = watcher::Config::default();
    let ours = watcher::Config::default().labels(&labels::managed_selector());
    let (ic_store, ic_writer) = reflector::store();
    let drift: Arc<Drift> = Arc::default();
    let applied: Arc<AppliedMemo> = Arc::default();
    let references = Arc::new(SecretReferences::default());
    let written_interconnects = Arc::new(Written::status_writes());
    let interconnects = {
        let (health, namespace) = (health.clone(), ns.to_string());
        let (reader, mut relist) = (ic_writer.as_reader(), Relist::default());
        let (drift, applied, references, written) =
            (drift.clone(), applied.clone(), references.clone(), written_interconnects.clone());
        let (index, stored_written) = (references.clone(), written.clone());
        // What the term remembers of an Interconnect goes with it, and so does what the
        // process remembers (`gone`: metrics, failures, Event series).
        let mut forget = move |ic: &Interconnect| {
            let (ns, name) = (ic.metadata.namespace.clone().unwrap_or_default(), ic.name_any());
            let key = format!("{ns}/{name}");
            drift.forget(&key);
            applied.forget(&key);
            references.forget(ic.metadata.uid.as_deref().unwrap_or_default());
            written.forget(&ns, &name);
            gone(ic);
        };
        watcher(api::<Interconnect>(client, ns), all.clone())
            .default_backoff()
            .inspect(move |event| {
                health.watch_result(&namespace, "interconnects", event.as_ref().map(drop));
                let Ok(event) = event else { return };
                if let Listed::Gone(list) = relist.see(&reader, event) {
                    list.iter().for_each(&mut forget);
                }
                interconnect_seen(event, &index, &mut forget);
            })
            // The stored Interconnects keep no `managedFields` (most of their metadata once
            // the controller has written their status).
            .map_ok(|mut event| {
                match &mut event {
                    watcher::Event::Apply(ic)
                    | watcher::Event::InitApply(ic)
                    | watcher::Event::Delete(ic) => slim(ic),
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
                event
            })
            .reflect(ic_writer)
            .inspect_ok(written_stored(stored_written))
            .applied_objects()
            .predicate_filter(predicates::generation, PredicateConfig::default())
    };

    let own: Arc<OwnWrites> = Arc::default();
    let (written_deployments, written_daemon_sets, written_secrets) = (
        Arc::new(Written::slimmed(slim_workload)),
        Arc::new(Written::slimmed(slim_workload)),
        Arc::new(Written::default()),
    );
    let (deployments, deployment_events) = reflect_compact::<Deployment, _>(
        c,
        ns,
        &ours,
        owned_wake(own.clone(), drift.clone(), Some(written_deployments.clone())),
        Some(written_deployments.clone()),
    );
    let (daemon_sets, daemon_set_events) = reflect_compact::<DaemonSet, _>(
        c,
        ns,
        &ours,
        owned_wake(own.clone(), drift.clone(), Some(written_daemon_sets.clone())),
        Some(written_daemon_sets.clone()),
    );
    let (secrets, secret_events): (SecretStore, _) = reflect_compact::<Secret, _>(
        c,
        ns,
        &ours,
        owned_wake(own.clone(), drift.clone(), Some(written_secrets.clone())),
        Some(written_secrets.clone()),
    );
    let (service_accounts, sa_events) = reflect_meta::<ServiceAccount>(c, ns, &ours, &own, &drift);
    let (roles, role_events) = reflect_meta::<Role>(c, ns, &ours, &own, &drift);
    let (role_bindings, rb_events) = reflect_meta::<RoleBinding>(c, ns, &ours, &own, &drift);
    let (services, service_events) = reflect_meta::<Service>(c, ns, &ours, &own, &drift);
    let (config_maps, cm_events) = reflect_meta::<ConfigMap>(c, ns, &ours, &own, &drift);
    let (ingresses, ingress_events) = reflect_meta::<Ingress>(c, ns, &ours, &own, &drift);
    let (disruption_budgets, pdb_events) = reflect_meta::<PodDisruptionBudget>(c, ns, &ours, &own, &drift);
    let (network_policies, policy_events) = reflect_meta::<NetworkPolicy>(c, ns, &ours, &own, &drift);
    let (pods, pod_events): (PodStore, _) =
        reflect_compact::<Pod, _>(c, ns, &all.clone().labels(labels::INTERCONNECT), pod_wake(), None);
    // The router ReplicaSets link a Deployment to its pods by uid; one appearing or going
    // wakes its Interconnect (its pods may have been seen first).
    let (replica_sets, rs_events): (ReplicaSetStore, _) = reflect_compact::<PartialObjectMeta<ReplicaSet>, _>(
        c,
        ns,
        &all.clone().labels(labels::INTERCONNECT),
        replica_set_wake(),
        None,
    );
    // A Secret appearing, changing or going wakes the Interconnects whose spec names it:
    // a user-provided one (a missing one appearing, a renewal), and one generated by another
    // Interconnect (a CA it rotates that this one trusts); its controller is woken by the
    // labelled watch, which knows its own writes from others'.
    let secret_names = Arc::new(SecretNames::default());
    // Changes made while the watch was down (seen when it lists again) wake as well.
    let any_secret = {
        let (names, health, namespace) = (secret_names.clone(), health.clone(), ns.to_string());
        watcher(api::<PartialObjectMeta<Secret>>(client, ns), all.clone())
            .default_backoff()
            .map(move |event| {
                health.watch_result(&namespace, "secrets (all, metadata)", event.as_ref().map(drop));
                let woken: Vec<Result<PartialObjectMeta<Secret>, watcher::Error>> = match event {
                    Err(e) => vec![Err(e)],
                    Ok(event) => names.apply(event).into_iter().map(Ok).collect(),
                };
                futures::stream::iter(woken)
            })
            .flatten()
    };
    // Every PodDisruptionBudget, by its selector, and every NetworkPolicy, by what says
    // whether it selects routers and admits something: one that is not ours appearing,
    // changing or going wakes the Interconnects of its namespace (whether it selects their
    // routers decides whether they make their own: `Cache::admin_budgets`,
    // `Cache::admin_policies`).
    let (all_budgets, any_budget) =
        store_others::<PodDisruptionBudget>(c, ns, all.clone(), "poddisruptionbudgets (all)", slim_budget);
    let (all_policies, any_policy) =
        store_others::<NetworkPolicy>(c, ns, all.clone(), "networkpolicies (all)", slim_policy);
    // Every Link, and every token Secret (by its label): a Link appearing, changing or
    // going wakes the Interconnect it names; a token, the Interconnects of the Links that
    // name it.
    let (links, link_events) = store_all::<qdr_api::links::Link>(c, ns, all.clone(), "links", links_on);
    let token_selector = format!("{}=true", qdr_api::links::token::TOKEN_LABEL);
    let (tokens, token_events) =
        store_all::<Secret>(c, ns, all.clone().labels(&token_selector), "link tokens", links_on);
    let (grants, grant_events) =
        store_all::<qdr_api::links::AccessGrant>(c, ns, all.clone(), "accessgrants", links_on);
    let ic_reader = ic_store.clone();
    let ic_policy_reader = ic_store.clone();
    let link_reader = links.clone();
    let cache = Cache {
        deployments,
        daemon_sets,
        pods,
        replica_sets,
        secrets,
        secret_names,
        service_accounts,
        roles,
        role_bindings,
        services,
        config_maps,
        ingresses,
        disruption_budgets,
        all_budgets,
        network_policies,
        all_policies,
        links,
        tokens,
        grants,
        written_deployments,
        written_daemon_sets,
        written_secrets,
        written_interconnects,
        interconnects: ic_store.clone(),
        own,
        drift,
        applied,
        outside: Arc::default(),
        listed: Arc::default(),
    };

    let controller = Controller::for_stream(interconnects, ic_store)
        .owns_stream(deployment_events)
        .owns_stream(daemon_set_events)
        .owns_stream(secret_events)
        .owns_stream(sa_events)
        .owns_stream(role_events)
        .owns_stream(rb_events)
        .owns_stream(service_events)
        .owns_stream(cm_events)
        .owns_stream(ingress_events)
        .owns_stream(pdb_events)
        .owns_stream(policy_events)
        .watches_stream(any_secret, move |secret: PartialObjectMeta<Secret>| {
            let ns = secret.metadata.namespace.clone().unwrap_or_default();
            let name = secret.metadata.name.clone().unwrap_or_default();
            let controller = (!user_secret(&secret)).then(|| interconnect_controller(&secret)).flatten();
            references.referencing(&ns, &name, controller.as_deref())
        })
        .watches_stream(any_budget, move |pdb: PodDisruptionBudget| {
            let ns = pdb.metadata.namespace.clone().unwrap_or_default();
            (ic_reader.state().iter())
                .filter(|ic| ic.metadata.namespace.as_deref() == Some(ns.as_str()))
                .map(|ic| ObjectRef::from_obj(ic.as_ref()))
                .collect::<Vec<_>>()
        })
        .watches_stream(any_policy, move |policy: NetworkPolicy| {
            let ns = policy.metadata.namespace.clone().unwrap_or_default();
            (ic_policy_reader.state().iter())
                .filter(|ic| ic.metadata.namespace.as_deref() == Some(ns.as_str()))
                .map(|ic| ObjectRef::from_obj(ic.as_ref()))
                .collect::<Vec<_>>()
        })
        .watches_stream(link_events, |link: qdr_api::links::Link| {
            let ns = link.metadata.namespace.clone().unwrap_or_default();
            Some(ObjectRef::new(&link.spec.interconnect).within(&ns))
        })
        .watches_stream(grant_events, |grant: qdr_api::links::AccessGrant| {
            let ns = grant.metadata.namespace.clone().unwrap_or_default();
            Some(ObjectRef::new(&grant.spec.interconnect).within(&ns))
        })
        .watches_stream(token_events, move |token: Secret| {
            let ns = token.metadata.namespace.clone().unwrap_or_default();
            let name = token.metadata.name.clone().unwrap_or_default();
            (link_reader.state().iter())
                .filter(|l| {
                    l.metadata.namespace.as_deref() == Some(ns.as_str()) && l.spec.token_secret == name
                })
                .map(|l| ObjectRef::new(&l.spec.interconnect).within(&ns))
                .collect::<Vec<_>>()
        })
        .watches_stream(rs_events, |rs: PartialObjectMeta<ReplicaSet>| {
            let name = rs.metadata.labels.as_ref().and_then(|l| l.get(labels::INTERCONNECT)).cloned();
            name.map(|n| ObjectRef::new(&n).within(rs.metadata.namespace.as_deref().unwrap_or_default()))
        })
        .watches_stream(pod_events, |pod: Pod| {
            let name = pod.metadata.labels.as_ref().and_then(|l| l.get(labels::INTERCONNECT)).cloned();
            name.map(|n| ObjectRef::new(&n).within(pod.metadata.namespace.as_deref().unwrap_or_default()))
        });
    (cache, controller)
}
