//! Compact stores: what the controller keeps of the kinds it holds one or two of per
//! Interconnect and only looks up, instead of kube-runtime's reflector copies.
//!
//! kube-runtime's reflector keeps each object as an `Arc<K>` (408 bytes inline for a
//! `PartialObjectMeta`, 456 for a Secret), its labels in a `BTreeMap` (one 544-byte node
//! however few they are) and a key of four strings: about 1.6 KB per metadata object once
//! the strings are counted, 20 MB for the six metadata kinds at 2,000 Interconnects. The
//! entries here keep the same answers in boxed slices:
//! * [`MetaStore`] (ServiceAccounts, Roles, RoleBindings, Services, ConfigMaps, Ingresses,
//!   PodDisruptionBudgets):
//!   a [`Slim`], about 300 bytes;
//! * [`SecretStore`] (Secrets labelled ours): a [`StoredSecret`], the [`Slim`] metadata with
//!   every owner reference, the [`crate::credentials::STEP_AT`] annotation, the type and
//!   the data;
//! * [`DeploymentStore`], [`DaemonSetStore`]: a [`StoredWorkload`], the [`Slim`] metadata,
//!   the uid, replicas, the pod template's annotations and the status counts;
//! * [`ReplicaSetStore`] (router ReplicaSets, metadata only): a [`StoredOwned`], the
//!   [`Slim`] metadata and the uid.
//!
//! Both swap a (re)list in whole when it is done, as kube-runtime's stores do.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetStatus, Deployment, DeploymentSpec, DeploymentStatus, ReplicaSet,
};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use super::slim::SELECTED_LABELS;

/// `(namespace, name)`.
pub(crate) type Key = (Box<str>, Box<str>);

/// What [`MetaStore`] keeps of one object: what [`super::slim::slim_meta`] keeps, in
/// boxed slices and with only the controller's owner reference (the one every lookup
/// reads: who controls it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slim {
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    /// The labels of [`SELECTED_LABELS`] it carries.
    labels: Box<[(&'static str, Box<str>)]>,
    /// Its controller owner reference.
    controller: Option<Box<Controller>>,
    deletion_timestamp: Option<Time>,
}

impl Slim {
    fn of(meta: &ObjectMeta) -> Slim {
        let labels = meta
            .labels
            .iter()
            .flatten()
            .filter_map(|(k, v)| {
                let kept = SELECTED_LABELS.iter().find(|s| **s == k.as_str())?;
                Some((*kept, v.as_str().into()))
            })
            .collect();
        let controller =
            meta.owner_references.iter().flatten().find(|r| r.controller == Some(true)).map(|r| {
                Box::new((
                    r.api_version.as_str().into(),
                    r.kind.as_str().into(),
                    r.name.as_str().into(),
                    r.uid.as_str().into(),
                ))
            });
        Slim {
            resource_version: meta.resource_version.as_deref().map(Into::into),
            generation: meta.generation,
            labels,
            controller,
            deletion_timestamp: meta.deletion_timestamp.clone(),
        }
    }

    /// Whether it carries every `selector` label.
    fn has(&self, selector: &[(&str, &str)]) -> bool {
        selector.iter().all(|(k, v)| self.labels.iter().any(|(lk, lv)| lk == k && &**lv == *v))
    }

    /// The metadata this entry stands for (`namespace`, `name` from its key).
    fn meta(&self, (namespace, name): &Key) -> ObjectMeta {
        let labels: BTreeMap<String, String> =
            self.labels.iter().map(|(k, v)| ((*k).to_string(), v.to_string())).collect();
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            resource_version: self.resource_version.as_deref().map(Into::into),
            generation: self.generation,
            labels: (!labels.is_empty()).then_some(labels),
            owner_references: self.controller.as_ref().map(|c| {
                vec![OwnerReference {
                    api_version: c.0.to_string(),
                    kind: c.1.to_string(),
                    name: c.2.to_string(),
                    uid: c.3.to_string(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]
            }),
            deletion_timestamp: self.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        }
    }
}

/// `(apiVersion, kind, name, uid)` of a controller owner reference.
type Controller = (Box<str>, Box<str>, Box<str>, Box<str>);

fn key_of(meta: &ObjectMeta) -> Key {
    (meta.namespace.as_deref().unwrap_or_default().into(), meta.name.as_deref().unwrap_or_default().into())
}

/// One stored object of kind `K`: built from the watched object, it answers lookups.
pub(crate) trait Entry<K>: Sized + Send + Sync + 'static {
    /// What is kept of `obj`.
    fn of(obj: &K) -> Self;
    /// Its metadata as kept.
    fn slim(&self) -> &Slim;
    /// Its `resourceVersion`.
    fn resource_version(&self) -> Option<&str> {
        self.slim().resource_version.as_deref()
    }
    /// The metadata it stands for (`key`: its namespace and name).
    fn meta(&self, key: &Key) -> ObjectMeta;
    /// The object it stands for.
    fn object(&self, key: &Key) -> K;
}

impl<X> Entry<PartialObjectMeta<X>> for Slim {
    fn of(obj: &PartialObjectMeta<X>) -> Self {
        Slim::of(&obj.metadata)
    }

    fn slim(&self) -> &Slim {
        self
    }

    fn meta(&self, key: &Key) -> ObjectMeta {
        Slim::meta(self, key)
    }

    fn object(&self, key: &Key) -> PartialObjectMeta<X> {
        PartialObjectMeta { types: None, metadata: Slim::meta(self, key), _phantom: PhantomData }
    }
}

#[derive(Debug)]
struct State<E> {
    objects: HashMap<Key, E>,
    /// A (re)list under way: what it has listed so far, swapped in whole when it is done
    /// (as kube-runtime's stores do), so lookups never see half a list.
    listing: Option<HashMap<Key, E>>,
}

impl<E> Default for State<E> {
    fn default() -> Self {
        State { objects: HashMap::new(), listing: None }
    }
}

/// A compact store of kind `K` (see the module docs), each object kept as an `E`, filled by
/// [`Compact::apply_watcher_event`] from a watch; cheap to clone (shared).
#[derive(Debug)]
pub(crate) struct Compact<K, E> {
    state: Arc<RwLock<State<E>>>,
    /// The stored objects of each Interconnect, for [`Compact::labelled`].
    index: Arc<super::index::OwnerIndex>,
    listed: Arc<AtomicBool>,
    kind: PhantomData<fn() -> K>,
}

/// The metadata store of kind `X`.
pub(crate) type MetaStore<X> = Compact<PartialObjectMeta<X>, Slim>;

/// The store of the Secrets labelled ours.
pub(crate) type SecretStore = Compact<Secret, StoredSecret>;

impl<K, E> Clone for Compact<K, E> {
    fn clone(&self) -> Self {
        Compact {
            state: self.state.clone(),
            index: self.index.clone(),
            listed: self.listed.clone(),
            kind: PhantomData,
        }
    }
}

impl<K, E> Default for Compact<K, E> {
    fn default() -> Self {
        Compact { state: Arc::default(), index: Arc::default(), listed: Arc::default(), kind: PhantomData }
    }
}

impl<K: Resource<DynamicType = ()>, E: Entry<K>> Compact<K, E> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State<E>> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event: an object applied or deleted, or a step of a (re)list.
    pub(crate) fn apply_watcher_event(&self, event: &watcher::Event<K>) {
        self.index.apply_watcher_event(event);
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) => {
                st.objects.insert(key_of(o.meta()), E::of(o));
            }
            watcher::Event::Delete(o) => {
                st.objects.remove(&key_of(o.meta()));
            }
            watcher::Event::Init => st.listing = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                st.listing.get_or_insert_with(HashMap::new).insert(key_of(o.meta()), E::of(o));
            }
            watcher::Event::InitDone => {
                let mut listed = st.listing.take().unwrap_or_default();
                listed.shrink_to_fit();
                st.objects = listed;
                self.listed.store(true, Ordering::Release);
            }
        }
    }

    /// Whether the first list is complete.
    pub(crate) fn is_ready(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The metadata of `ns/name`, as far as the store keeps it.
    pub(crate) fn get(&self, ns: &str, name: &str) -> Option<ObjectMeta> {
        let key: Key = (ns.into(), name.into());
        self.read().objects.get(&key).map(|e| e.meta(&key))
    }

    /// The object `ns/name`, as far as the store keeps it.
    pub(crate) fn object(&self, ns: &str, name: &str) -> Option<K> {
        let key: Key = (ns.into(), name.into());
        self.read().objects.get(&key).map(|e| e.object(&key))
    }

    /// The `resourceVersion` of `ns/name` (outer `None`: not stored).
    pub(crate) fn version(&self, ns: &str, name: &str) -> Option<Option<String>> {
        let key: Key = (ns.into(), name.into());
        self.read().objects.get(&key).map(|e| e.resource_version().map(Into::into))
    }

    /// The metadata of every stored object in namespace `ns` carrying every `selector`
    /// label (a label the store does not keep never matches). Only the matches are turned
    /// into metadata.
    pub(crate) fn labelled(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<ObjectMeta> {
        if let Some(owner) = super::index::owner_selected(selector) {
            let names = self.index.names(ns, owner);
            let st = self.read();
            return (names.into_iter())
                .filter_map(|name| {
                    let key: Key = (ns.into(), name);
                    st.objects.get(&key).filter(|e| e.slim().has(selector)).map(|e| e.meta(&key))
                })
                .collect();
        }
        let st = self.read();
        (st.objects.iter())
            .filter(|((namespace, _), e)| &**namespace == ns && e.slim().has(selector))
            .map(|(k, e)| e.meta(k))
            .collect()
    }

    /// Every stored object (for what a relist finds gone).
    pub(crate) fn all(&self) -> Vec<K> {
        let st = self.read();
        st.objects.iter().map(|(k, e)| e.object(k)).collect()
    }

    /// How many objects are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.read().objects.len()
    }
}

/// What [`SecretStore`] keeps of a Secret: its metadata as [`Slim`] keeps it, plus every
/// owner reference (a Secret a user's object also owns keeps that reference when it is
/// rewritten), the [`crate::credentials::STEP_AT`] and [`crate::credentials::seal::SEAL`]
/// annotations (the only ones a pass reads), when it was last written (as one
/// `managedFields` entry's time), its type and data. Other labels, annotations and finalizers are not kept: a rewrite
/// reads the Secret first and keeps them ([`crate::reconcile::apply`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredSecret {
    meta: Slim,
    owners: Box<[OwnerReference]>,
    step_at: Option<Box<str>>,
    /// The [`crate::credentials::seal::SEAL`] annotation.
    seal: Option<Box<str>>,
    /// When it was last written ([`crate::credentials::seal::last_written`]), given back as
    /// the time of its one `managedFields` entry.
    written: Option<Time>,
    type_: Option<Box<str>>,
    /// `None`: the Secret has no `data`.
    data: Option<Box<[Datum]>>,
}

/// A key and its value (an annotation).
type Pair = (Box<str>, Box<str>);

/// One key of a Secret's data and its value.
type Datum = (Box<str>, Box<[u8]>);

impl Entry<Secret> for StoredSecret {
    fn of(s: &Secret) -> Self {
        let annotations = s.metadata.annotations.as_ref();
        StoredSecret {
            meta: Slim::of(&s.metadata),
            owners: s.metadata.owner_references.clone().unwrap_or_default().into_boxed_slice(),
            step_at: annotations.and_then(|a| a.get(crate::credentials::STEP_AT)).map(|v| v.as_str().into()),
            seal: annotations.and_then(|a| a.get(crate::credentials::seal::SEAL)).map(|v| v.as_str().into()),
            written: crate::credentials::seal::last_written_time(&s.metadata).cloned(),
            type_: s.type_.as_deref().map(Into::into),
            data: s.data.as_ref().map(|d| {
                d.iter().map(|(k, v)| (k.as_str().into(), v.0.clone().into_boxed_slice())).collect()
            }),
        }
    }

    fn slim(&self) -> &Slim {
        &self.meta
    }

    fn meta(&self, key: &Key) -> ObjectMeta {
        let mut m = self.meta.meta(key);
        m.owner_references = (!self.owners.is_empty()).then(|| self.owners.to_vec());
        let annotations: BTreeMap<String, String> =
            [(crate::credentials::STEP_AT, &self.step_at), (crate::credentials::seal::SEAL, &self.seal)]
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_string(), v.as_deref()?.to_string())))
                .collect();
        m.annotations = (!annotations.is_empty()).then_some(annotations);
        m.managed_fields = self.written.as_ref().map(|t| {
            vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                time: Some(t.clone()),
                ..Default::default()
            }]
        });
        m
    }

    fn object(&self, key: &Key) -> Secret {
        Secret {
            metadata: self.meta(key),
            type_: self.type_.as_deref().map(Into::into),
            data: self
                .data
                .as_ref()
                .map(|d| d.iter().map(|(k, v)| (k.to_string(), ByteString(v.to_vec()))).collect()),
            ..Secret::default()
        }
    }
}

/// What a workload store keeps of a Deployment or DaemonSet: its metadata as [`Slim`]
/// keeps it, `spec.replicas`, the pod template's annotations (the config and credentials
/// hashes) and the status counts (`S`, without conditions): what observing it and its
/// status read ([`crate::reconcile::observe`]). Not the pod template's spec (a
/// `Deployment` is 2,400 bytes before anything it points to).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredWorkload<S> {
    meta: Slim,
    /// Its `uid`: its pods (and a Deployment's ReplicaSets) name it by uid
    /// ([`crate::reconcile::observe::Workloads`]).
    uid: Option<Box<str>>,
    replicas: Option<i32>,
    template_annotations: Option<Box<[Pair]>>,
    status: Option<Box<S>>,
}

/// The two workload kinds, as [`StoredWorkload`] reads and rebuilds them.
pub(crate) trait Workload: Resource<DynamicType = ()> + Sized {
    /// The kind's status.
    type Status: Clone + Send + Sync + 'static;
    /// `spec.replicas`, `spec.template` and `status`.
    fn parts(&self) -> (Option<i32>, Option<&PodTemplateSpec>, Option<&Self::Status>);
    /// `status` without its conditions (nothing reads them from the store).
    fn without_conditions(status: &Self::Status) -> Self::Status;
    /// A workload of `metadata`, `replicas` (Deployments) and `template`, with `status`.
    fn build(
        metadata: ObjectMeta,
        replicas: Option<i32>,
        template: PodTemplateSpec,
        status: Option<Self::Status>,
    ) -> Self;
}

impl Workload for Deployment {
    type Status = DeploymentStatus;

    fn parts(&self) -> (Option<i32>, Option<&PodTemplateSpec>, Option<&DeploymentStatus>) {
        let spec = self.spec.as_ref();
        (spec.and_then(|s| s.replicas), spec.map(|s| &s.template), self.status.as_ref())
    }

    fn without_conditions(status: &DeploymentStatus) -> DeploymentStatus {
        DeploymentStatus { conditions: None, ..status.clone() }
    }

    fn build(
        metadata: ObjectMeta,
        replicas: Option<i32>,
        template: PodTemplateSpec,
        status: Option<DeploymentStatus>,
    ) -> Self {
        Deployment {
            metadata,
            spec: Some(DeploymentSpec { replicas, template, ..Default::default() }),
            status,
        }
    }
}

impl Workload for DaemonSet {
    type Status = DaemonSetStatus;

    fn parts(&self) -> (Option<i32>, Option<&PodTemplateSpec>, Option<&DaemonSetStatus>) {
        (None, self.spec.as_ref().map(|s| &s.template), self.status.as_ref())
    }

    fn without_conditions(status: &DaemonSetStatus) -> DaemonSetStatus {
        DaemonSetStatus { conditions: None, ..status.clone() }
    }

    fn build(
        metadata: ObjectMeta,
        _replicas: Option<i32>,
        template: PodTemplateSpec,
        status: Option<DaemonSetStatus>,
    ) -> Self {
        DaemonSet { metadata, spec: Some(DaemonSetSpec { template, ..Default::default() }), status }
    }
}

impl<K: Workload + Send + Sync + 'static> Entry<K> for StoredWorkload<K::Status> {
    fn of(w: &K) -> Self {
        let (replicas, template, status) = w.parts();
        let annotations = template.and_then(|t| t.metadata.as_ref()?.annotations.as_ref());
        StoredWorkload {
            meta: Slim::of(w.meta()),
            uid: w.meta().uid.as_deref().map(Into::into),
            replicas,
            template_annotations: annotations
                .map(|a| a.iter().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect()),
            status: status.map(|s| Box::new(K::without_conditions(s))),
        }
    }

    fn slim(&self) -> &Slim {
        &self.meta
    }

    fn meta(&self, key: &Key) -> ObjectMeta {
        ObjectMeta { uid: self.uid.as_deref().map(Into::into), ..self.meta.meta(key) }
    }

    fn object(&self, key: &Key) -> K {
        let annotations = self
            .template_annotations
            .as_ref()
            .map(|a| a.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta { annotations, ..ObjectMeta::default() }),
            spec: None,
        };
        K::build(Entry::<K>::meta(self, key), self.replicas, template, self.status.as_deref().cloned())
    }
}

/// What the ReplicaSet store keeps of one (a metadata watch): its metadata as [`Slim`]
/// keeps it (with its controller reference: the Deployment that made it, by uid) and its
/// own `uid`, which its pods name ([`crate::reconcile::observe::Workloads`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredOwned {
    meta: Slim,
    uid: Option<Box<str>>,
}

impl<X> Entry<PartialObjectMeta<X>> for StoredOwned {
    fn of(obj: &PartialObjectMeta<X>) -> Self {
        StoredOwned { meta: Slim::of(&obj.metadata), uid: obj.metadata.uid.as_deref().map(Into::into) }
    }

    fn slim(&self) -> &Slim {
        &self.meta
    }

    fn meta(&self, key: &Key) -> ObjectMeta {
        ObjectMeta { uid: self.uid.as_deref().map(Into::into), ..self.meta.meta(key) }
    }

    fn object(&self, key: &Key) -> PartialObjectMeta<X> {
        PartialObjectMeta {
            types: None,
            metadata: Entry::<PartialObjectMeta<X>>::meta(self, key),
            _phantom: PhantomData,
        }
    }
}

/// The store of the router ReplicaSets (label `interconnect_cr`, metadata only).
pub(crate) type ReplicaSetStore = Compact<PartialObjectMeta<ReplicaSet>, StoredOwned>;

/// The store of the Deployments labelled ours.
pub(crate) type DeploymentStore = Compact<Deployment, StoredWorkload<DeploymentStatus>>;

/// The store of the DaemonSets labelled ours.
pub(crate) type DaemonSetStore = Compact<DaemonSet, StoredWorkload<DaemonSetStatus>>;

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;

    fn cm(name: &str, rv: &str) -> PartialObjectMeta<ConfigMap> {
        serde_json::from_value(json!({"metadata": {
            "name": name, "namespace": "ns", "resourceVersion": rv, "generation": 4, "uid": "c-1",
            "creationTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"],
            "deletionTimestamp": "2026-01-02T00:00:00Z",
            "labels": {"interconnect_cr": "mesh", "app.kubernetes.io/managed-by": "qdr-operator",
                       "app.kubernetes.io/name": "qdrouterd", "team": "a"},
            "annotations": {"note": "n"},
            "managedFields": [{"manager": "m", "operation": "Apply"}],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "o-1"},
                {"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                 "name": "mesh", "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]}}))
        .unwrap()
    }

    #[test]
    fn a_lookup_answers_what_the_lookups_read_and_nothing_else() {
        let store = MetaStore::<ConfigMap>::default();
        store.apply_watcher_event(&Event::Apply(cm("mesh-router-config", "12")));
        let m = store.get("ns", "mesh-router-config").expect("stored");
        assert_eq!(m.name.as_deref(), Some("mesh-router-config"));
        assert_eq!(m.namespace.as_deref(), Some("ns"));
        assert_eq!(m.resource_version.as_deref(), Some("12"));
        assert_eq!(m.generation, Some(4));
        assert!(m.deletion_timestamp.is_some());
        let labels: Vec<_> = m.labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(labels, ["app.kubernetes.io/managed-by=qdr-operator", "interconnect_cr=mesh"]);
        let owners = m.owner_references.expect("the controller reference");
        assert_eq!(owners.len(), 1, "only the controller reference");
        assert_eq!(
            (owners[0].kind.as_str(), owners[0].name.as_str(), owners[0].uid.as_str(), owners[0].controller),
            ("Interconnect", "mesh", "u-1", Some(true))
        );
        assert_eq!(owners[0].api_version, "interconnectedcloud.github.io/v1alpha1");
        assert!(m.annotations.is_none() && m.managed_fields.is_none() && m.uid.is_none());
        assert!(m.finalizers.is_none() && m.creation_timestamp.is_none());
        assert_eq!(store.version("ns", "mesh-router-config"), Some(Some("12".into())));
        assert_eq!(store.version("ns", "missing"), None);
        assert!(store.get("other-ns", "mesh-router-config").is_none(), "by namespace and name");
        store.apply_watcher_event(&Event::Delete(cm("mesh-router-config", "13")));
        assert!(store.get("ns", "mesh-router-config").is_none());
    }

    #[test]
    fn a_list_is_swapped_in_whole_when_it_is_done() {
        let store = MetaStore::<ConfigMap>::default();
        assert!(!store.is_ready());
        store.apply_watcher_event(&Event::Init);
        store.apply_watcher_event(&Event::InitApply(cm("a", "1")));
        assert!(store.get("ns", "a").is_none(), "half a list is not shown");
        store.apply_watcher_event(&Event::InitDone);
        assert!(store.is_ready());
        assert_eq!(store.len(), 1);
        // A relist that no longer holds `a` but holds `b`: `a` stays until it is done.
        store.apply_watcher_event(&Event::Init);
        store.apply_watcher_event(&Event::InitApply(cm("b", "2")));
        assert!(store.get("ns", "a").is_some() && store.get("ns", "b").is_none());
        store.apply_watcher_event(&Event::InitDone);
        assert!(store.get("ns", "a").is_none() && store.get("ns", "b").is_some());
        assert!(store.is_ready(), "stays ready across relists");
        assert_eq!(store.labelled("ns", &[("interconnect_cr", "mesh")]).len(), 1);
        assert!(store.labelled("ns", &[("interconnect_cr", "other")]).is_empty());
        assert!(store.labelled("other-ns", &[("interconnect_cr", "mesh")]).is_empty());
        assert!(store.labelled("ns", &[("team", "a")]).is_empty(), "a label not kept never matches");
    }

    #[test]
    fn a_stored_secret_gives_back_what_a_pass_reads() {
        use crate::credentials::STEP_AT;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "mesh-ca", "namespace": "ns", "resourceVersion": "7", "uid": "s-1",
                "labels": {"interconnect_cr": "mesh", "qdr-operator.io/credentials": "true", "backup": "daily"},
                "annotations": {STEP_AT: "2026-01-01T00:00:00Z", "note": "n"},
                "finalizers": ["keep"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "o-1"},
                    {"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                     "name": "mesh", "uid": "u-1", "controller": true}]},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": ""}}))
        .unwrap();
        let store = SecretStore::default();
        store.apply_watcher_event(&Event::Apply(secret.clone()));
        let back = store.object("ns", "mesh-ca").expect("stored");
        assert_eq!(back.data, secret.data, "data whole, empty values too");
        assert_eq!(back.type_, secret.type_);
        assert_eq!(back.metadata.owner_references, secret.metadata.owner_references, "every owner reference");
        assert_eq!(back.metadata.resource_version.as_deref(), Some("7"));
        let labels: Vec<_> = back.metadata.labels.iter().flatten().map(|(k, _)| k.as_str()).collect();
        assert_eq!(labels, ["interconnect_cr", "qdr-operator.io/credentials"]);
        let annotations = back.metadata.annotations.expect("the step annotation");
        assert_eq!(annotations.keys().collect::<Vec<_>>(), [STEP_AT]);
        assert!(back.metadata.finalizers.is_none(), "read again before a rewrite");
        let bare: Secret =
            serde_json::from_value(json!({"metadata": {"name": "bare", "namespace": "ns"}})).unwrap();
        store.apply_watcher_event(&Event::Apply(bare));
        let back = store.object("ns", "bare").unwrap();
        assert!(
            back.data.is_none()
                && back.metadata.annotations.is_none()
                && back.metadata.owner_references.is_none()
        );
    }
    #[test]
    fn a_stored_workload_gives_back_what_observing_it_reads() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "mesh", "namespace": "ns", "resourceVersion": "9", "generation": 3,
                "labels": {"interconnect_cr": "mesh", "app.kubernetes.io/name": "qdrouterd"},
                "annotations": {"deployment.kubernetes.io/revision": "2"},
                "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1",
                    "kind": "Interconnect", "name": "mesh", "uid": "u-1", "controller": true}]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"application": "mesh"}},
                "template": {"metadata": {"annotations": {"qdr-operator.io/config-hash": "c1",
                    "qdr-operator.io/credentials-hash": "k1"}, "labels": {"application": "mesh"}},
                    "spec": {"containers": [{"name": "router", "image": "qdrouterd"}]}}},
            "status": {"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2,
                "availableReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]}}))
        .unwrap();
        let store = DeploymentStore::default();
        store.apply_watcher_event(&Event::Apply(d.clone()));
        let back = store.object("ns", "mesh").expect("stored");
        let spec = back.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        let template = spec.template.metadata.as_ref().unwrap();
        assert_eq!(
            template.annotations,
            d.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().annotations
        );
        assert!(spec.template.spec.is_none(), "no pod spec");
        let status = back.status.as_ref().unwrap();
        assert_eq!(
            (
                status.observed_generation,
                status.updated_replicas,
                status.ready_replicas,
                status.available_replicas
            ),
            (Some(3), Some(3), Some(2), Some(2))
        );
        assert!(status.conditions.is_none());
        assert_eq!(back.metadata.generation, Some(3));
        assert_eq!(back.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(back.metadata.owner_references, d.metadata.owner_references);
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "edge", "namespace": "ns", "generation": 1},
            "spec": {"selector": {}, "template": {"metadata": {"annotations": {"a": "b"}}}},
            "status": {"desiredNumberScheduled": 2, "numberReady": 1, "currentNumberScheduled": 2,
                "numberMisscheduled": 0, "numberAvailable": 1, "observedGeneration": 1}}))
        .unwrap();
        let store = DaemonSetStore::default();
        store.apply_watcher_event(&Event::Apply(ds.clone()));
        let back = store.object("ns", "edge").unwrap();
        assert_eq!(back.status, ds.status);
        assert_eq!(
            back.spec.unwrap().template.metadata.unwrap().annotations,
            ds.spec.unwrap().template.metadata.unwrap().annotations
        );
    }
}
