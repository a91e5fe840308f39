//! Which watch events wake a reconcile, judged before they reach a store, and what an
//! event ends once its store keeps it ([`written_stored`]). What a store keeps of an object
//! is [`super::slim`]'s.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::memo::{Drift, OwnWrites, SecretReferences, Seen};
use super::written::Written;
use crate::labels;

/// What an Interconnect's watch event does before the store keeps it (Interconnects wake
/// passes by generation, `predicates::generation`, not here): a deletion makes `forget`
/// forget what is remembered of it; an applied one updates the Secret references it names
/// (`references`).
pub(crate) fn interconnect_seen(
    event: &watcher::Event<qdr_api::Interconnect>,
    references: &SecretReferences,
    forget: &mut impl FnMut(&qdr_api::Interconnect),
) {
    match event {
        watcher::Event::Delete(ic) => forget(ic),
        watcher::Event::Apply(ic) | watcher::Event::InitApply(ic) => references.see(ic),
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

/// What the watch events of a kind with read-your-writes (Interconnects' status writes;
/// Deployments, DaemonSets and generated Secrets) do once their store keeps them: each
/// applied object ends the copy of the write it shows (`written`, [`Written::observed`]).
/// After the store, never before it, so a pass never finds the copy gone and the store's
/// copy still the older one: the pass would take the older one for the object as it is (a
/// Secret replaced again and refused with 409, a workload's rollout misread, a management
/// CA taken for lost and rotated).
///
/// A (re)list is stored when it is done: the compact store and kube-runtime's both keep a
/// relist's `InitApply` objects aside and swap them in whole at `InitDone`. So the copies a
/// relist shows end at its `InitDone`: the returned closure keeps, from `Init` to
/// `InitDone`, the metadata (name, `resourceVersion`, generation) of each listed object
/// that has a written copy, and nothing of the others.
///
/// For Interconnects it is also what ends the copy at all: the echo of a status write
/// keeps the generation, so it wakes no pass, and a pass is what else would drop the copy
/// ([`Written::pick`]). Without it, the copy of every Interconnect's last status write was
/// kept until its next pass, up to the resync period (`reconcile::RESYNC`, 5 minutes then)
/// later: at 2,000 Interconnects, 11 MB of heap at the peak (heaptrack: the decoded answers
/// and their map).
pub(crate) fn written_stored<K>(written: Arc<Written<K>>) -> impl FnMut(&watcher::Event<K>) + Send + 'static
where
    K: Resource + Send + Sync + 'static,
{
    let mut listed: Vec<ObjectMeta> = Vec::new();
    move |event| match event {
        watcher::Event::Apply(o) => written.observed(o),
        watcher::Event::Init => listed.clear(),
        watcher::Event::InitApply(o) => {
            let m = o.meta();
            if written.holds(m) {
                listed.push(ObjectMeta {
                    namespace: m.namespace.clone(),
                    name: m.name.clone(),
                    resource_version: m.resource_version.clone(),
                    generation: m.generation,
                    ..ObjectMeta::default()
                });
            }
        }
        watcher::Event::InitDone => {
            for m in listed.drain(..) {
                written.observed_meta(&m);
            }
            listed.shrink_to_fit();
        }
        watcher::Event::Delete(_) => {}
    }
}

/// The wake-up rule of an owned kind: an applied object wakes its owner unless it is the
/// echo of the controller's own write (its `resourceVersion` is the one that write
/// returned, [`OwnWrites`]); a deletion always wakes. Deletions and changes that are not
/// [`Seen::StatusOnly`] are marked in `drift`; `written` (the kinds with read-your-writes)
/// forgets what a deletion ends (an applied object ends its copy only once stored,
/// [`written_stored`]). The start and end of a (re)list wake nothing
/// themselves; [`super::watch`] judges what a relist shows against the store.
pub(crate) fn owned_wake<K>(
    own: Arc<OwnWrites>,
    drift: Arc<Drift>,
    written: Option<Arc<Written<K>>>,
) -> impl FnMut(&watcher::Event<K>) -> bool + Send + 'static
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let kind = K::kind(&()).into_owned();
    move |event| match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => match own.judge(&kind, o.meta()) {
            Seen::Echo | Seen::Held => false,
            Seen::StatusOnly => true,
            Seen::Changed => {
                drift.mark(o.meta());
                true
            }
        },
        watcher::Event::Delete(o) => {
            let m = o.meta();
            if let Some(w) = &written {
                w.deleted(m);
            }
            own.forget(&kind, m);
            drift.mark(m);
            true
        }
        watcher::Event::Init | watcher::Event::InitDone => false,
    }
}

/// What a (re)list shows against the store, for [`super::watch`]. A watch that breaks for
/// longer than the API server keeps its history (an API server restart, a long network
/// gap) starts over with a list: objects deleted meanwhile are simply absent from it, and
/// objects changed meanwhile come as `InitApply`. This compares each listed object with the
/// store (an unchanged `resourceVersion` is nothing new) and, when the list is done, names
/// the stored objects it did not contain: they are gone, and wake their owners like a
/// deletion.
#[derive(Debug, Default)]
pub(crate) struct Relist {
    listed: HashSet<(String, String)>,
}

/// What [`Relist::see`] makes of one event.
#[derive(Debug)]
pub(crate) enum Listed<K> {
    /// Judge it by the kind's wake-up rule.
    Judge,
    /// Listed again unchanged: nothing happened to it.
    Unchanged,
    /// The list is done; these stored objects were not in it.
    Gone(Vec<K>),
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// What [`Relist`] reads of a store: kube-runtime's [`Store`], or a
/// [`super::meta_store::MetaStore`].
pub(crate) trait Versions<K> {
    /// The `resourceVersion` of the stored `ns/name` (outer `None`: not stored).
    fn version(&self, ns: &str, name: &str) -> Option<Option<String>>;
    /// Every stored object.
    fn all(&self) -> Vec<K>;
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Versions<K> for Store<K> {
    fn version(&self, ns: &str, name: &str) -> Option<Option<String>> {
        self.get(&ObjectRef::new(name).within(ns)).map(|s| s.meta().resource_version.clone())
    }

    fn all(&self) -> Vec<K> {
        self.state().into_iter().map(|o| o.as_ref().clone()).collect()
    }
}

impl<K, E> Versions<K> for super::meta_store::Compact<K, E>
where
    K: Resource<DynamicType = ()>,
    E: super::meta_store::Entry<K>,
{
    fn version(&self, ns: &str, name: &str) -> Option<Option<String>> {
        super::meta_store::Compact::version(self, ns, name)
    }

    fn all(&self) -> Vec<K> {
        super::meta_store::Compact::all(self)
    }
}

impl Relist {
    /// Sees one event, before it reaches `store`.
    pub(crate) fn see<K, S>(&mut self, store: &S, event: &watcher::Event<K>) -> Listed<K>
    where
        K: Resource<DynamicType = ()>,
        S: Versions<K>,
    {
        match event {
            watcher::Event::Init => {
                self.listed.clear();
                Listed::Unchanged
            }
            watcher::Event::InitApply(o) => {
                let (ns, name) = name_of(o.meta());
                let stored = store.version(&ns, &name);
                self.listed.insert((ns, name));
                match stored {
                    Some(v) if v == o.meta().resource_version => Listed::Unchanged,
                    _ => Listed::Judge,
                }
            }
            watcher::Event::InitDone => {
                let listed = std::mem::take(&mut self.listed);
                Listed::Gone(
                    store.all().into_iter().filter(|o| !listed.contains(&name_of(o.meta()))).collect(),
                )
            }
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => Listed::Judge,
        }
    }
}

/// The wake-up rule of router pods: a change of [`pod_state`] (phase, readiness,
/// scheduling, deletion), and every deletion.
pub(crate) fn pod_wake() -> impl FnMut(&watcher::Event<Pod>) -> bool + Send + 'static {
    let mut seen: HashMap<String, u64> = HashMap::new();
    move |event| match event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let state = pod_state(p).unwrap_or_default();
            seen.insert(uid, state) != Some(state)
        }
        watcher::Event::Delete(p) => {
            seen.remove(p.metadata.uid.as_deref().unwrap_or_default());
            true
        }
        watcher::Event::Init | watcher::Event::InitDone => false,
    }
}

/// The wake-up rule of the router ReplicaSets: one seen for the first time (by uid), or
/// deleted, wakes its Interconnect (its pods are routers only through it,
/// [`crate::reconcile::observe::Workloads`], and their events may come first); its status
/// and scale changes do not (its pods' own events say what changed).
pub(crate) fn replica_set_wake<K: Resource>() -> impl FnMut(&watcher::Event<K>) -> bool + Send + 'static {
    let mut seen: HashSet<String> = HashSet::new();
    move |event| match event {
        watcher::Event::Apply(r) | watcher::Event::InitApply(r) => {
            seen.insert(r.meta().uid.clone().unwrap_or_default())
        }
        watcher::Event::Delete(r) => {
            seen.remove(r.meta().uid.as_deref().unwrap_or_default());
            true
        }
        watcher::Event::Init | watcher::Event::InitDone => false,
    }
}

/// Whether a Secret of the all-Secrets watch is user-provided (without our label); the
/// initial list wakes nothing (every Interconnect is reconciled at start anyway).
pub(crate) fn user_secret(s: &PartialObjectMeta<Secret>) -> bool {
    s.metadata.labels.as_ref().and_then(|l| l.get(labels::MANAGED_BY_KEY)).is_none()
}

/// The name of the Interconnect that controls `s` (its controller owner reference), if any.
pub(crate) fn interconnect_controller(s: &PartialObjectMeta<Secret>) -> Option<String> {
    s.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == "Interconnect")
        .map(|r| r.name.clone())
}

/// What of a router pod the status reports: whether it is being deleted, its phase, and its
/// `Ready`, `ContainersReady` (a router that runs but waits for its readiness gate is read
/// then) and `PodScheduled` conditions (status and message). A pod event that changes none
/// of these (an IP assigned, a probe time) wakes nothing. For
/// [`kube::runtime::WatchStreamExt::predicate_filter`].
pub(crate) fn pod_state(p: &Pod) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    p.metadata.deletion_timestamp.is_some().hash(&mut h);
    if let Some(st) = &p.status {
        st.phase.hash(&mut h);
        for c in st.conditions.iter().flatten() {
            if c.type_ == "Ready" || c.type_ == "ContainersReady" || c.type_ == "PodScheduled" {
                (&c.type_, &c.status, &c.message).hash(&mut h);
            }
        }
    }
    Some(h.finish())
}
