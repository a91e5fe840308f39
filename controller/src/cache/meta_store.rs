//! Compact stores: what the controller keeps of the kinds it holds one or two of per
//! Interconnect and only looks up, instead of kube-runtime's reflector copies.
//!
//! kube-runtime's reflector keeps each object as an `Arc<K>` (408 bytes inline for a
//! `PartialObjectMeta`, 456 for a Secret), its labels in a `BTreeMap` (one 544-byte node
//! however few they are) and a key of four strings: about 1.6 KB per metadata object once
//! the strings are counted, 20 MB for the six metadata kinds at 2,000 Interconnects. The
//! entries here keep the same answers in boxed slices:
//! * [`MetaStore`] (ServiceAccounts, Roles, RoleBindings, Services, ConfigMaps, Ingresses):
//!   a [`Slim`], about 300 bytes;
//! * [`SecretStore`] (Secrets labelled ours): a [`StoredSecret`], the [`Slim`] metadata with
//!   every owner reference, the [`crate::credentials::STEP_AT`] annotation, the type and
//!   the data.
//!
//! Both swap a (re)list in whole when it is done, as kube-runtime's stores do.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use super::wake::SELECTED_LABELS;

/// `(namespace, name)`.
pub(crate) type Key = (Box<str>, Box<str>);

/// What [`MetaStore`] keeps of one object: what [`super::wake::slim_meta`] keeps, in
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
    /// Its `resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// The metadata it stands for (`key`: its namespace and name).
    fn meta(&self, key: &Key) -> ObjectMeta;
    /// The object it stands for.
    fn object(&self, key: &Key) -> K;
}

impl<X> Entry<PartialObjectMeta<X>> for Slim {
    fn of(obj: &PartialObjectMeta<X>) -> Self {
        Slim::of(&obj.metadata)
    }

    fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
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
    listed: Arc<AtomicBool>,
    kind: PhantomData<fn() -> K>,
}

/// The metadata store of kind `X`.
pub(crate) type MetaStore<X> = Compact<PartialObjectMeta<X>, Slim>;

/// The store of the Secrets labelled ours.
pub(crate) type SecretStore = Compact<Secret, StoredSecret>;

impl<K, E> Clone for Compact<K, E> {
    fn clone(&self) -> Self {
        Compact { state: self.state.clone(), listed: self.listed.clone(), kind: PhantomData }
    }
}

impl<K, E> Default for Compact<K, E> {
    fn default() -> Self {
        Compact { state: Arc::default(), listed: Arc::default(), kind: PhantomData }
    }
}

impl<K: Resource<DynamicType = ()>, E: Entry<K>> Compact<K, E> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State<E>> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event: an object applied or deleted, or a step of a (re)list.
    pub(crate) fn apply_watcher_event(&self, event: &watcher::Event<K>) {
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

    /// The metadata of every stored object for which `keep` is true.
    pub(crate) fn filter(&self, mut keep: impl FnMut(&ObjectMeta) -> bool) -> Vec<ObjectMeta> {
        let st = self.read();
        st.objects.iter().map(|(k, e)| e.meta(k)).filter(|m| keep(m)).collect()
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
/// rewritten), the [`crate::credentials::STEP_AT`] annotation (the only one a pass reads),
/// its type and data. Other labels, annotations and finalizers are not kept: a rewrite
/// reads the Secret first and keeps them ([`crate::reconcile::apply`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredSecret {
    meta: Slim,
    owners: Box<[OwnerReference]>,
    step_at: Option<Box<str>>,
    type_: Option<Box<str>>,
    /// `None`: the Secret has no `data`.
    data: Option<Box<[Datum]>>,
}

/// One key of a Secret's data and its value.
type Datum = (Box<str>, Box<[u8]>);

impl Entry<Secret> for StoredSecret {
    fn of(s: &Secret) -> Self {
        let annotations = s.metadata.annotations.as_ref();
        StoredSecret {
            meta: Slim::of(&s.metadata),
            owners: s.metadata.owner_references.clone().unwrap_or_default().into_boxed_slice(),
            step_at: annotations.and_then(|a| a.get(crate::credentials::STEP_AT)).map(|v| v.as_str().into()),
            type_: s.type_.as_deref().map(Into::into),
            data: s.data.as_ref().map(|d| {
                d.iter().map(|(k, v)| (k.as_str().into(), v.0.clone().into_boxed_slice())).collect()
            }),
        }
    }

    fn resource_version(&self) -> Option<&str> {
        self.meta.resource_version.as_deref()
    }

    fn meta(&self, key: &Key) -> ObjectMeta {
        let mut m = self.meta.meta(key);
        m.owner_references = (!self.owners.is_empty()).then(|| self.owners.to_vec());
        m.annotations = self
            .step_at
            .as_ref()
            .map(|v| BTreeMap::from([(crate::credentials::STEP_AT.to_string(), v.to_string())]));
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
        let selected =
            store.filter(|m| m.labels.as_ref().is_some_and(|l| l.get("interconnect_cr").is_some()));
        assert_eq!(selected.len(), 1);
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
}
