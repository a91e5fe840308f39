//! The store of a kind the controller only looks up by name or label (ServiceAccounts,
//! Roles, RoleBindings, Services, ConfigMaps, Ingresses: one or two per Interconnect each):
//! a compact copy of what those lookups read, not the object.
//!
//! kube-runtime's reflector keeps each object as an `Arc<PartialObjectMeta<K>>` (408 bytes
//! inline), its labels in a `BTreeMap` (one 544-byte node however few they are) and a key
//! of four strings: about 1.6 KB per object once the strings are counted, 20 MB at 2,000
//! Interconnects. A [`Slim`] entry keeps the same answers in about 300 bytes.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use super::wake::SELECTED_LABELS;

/// `(namespace, name)`.
type Key = (Box<str>, Box<str>);

/// What [`MetaStore`] keeps of one object: what [`super::wake::slim_meta`] keeps, in
/// boxed slices and with only the controller's owner reference (the one every lookup
/// reads: who controls it).
#[derive(Debug, Clone, PartialEq)]
struct Slim {
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

#[derive(Debug, Default)]
struct State {
    objects: HashMap<Key, Slim>,
    /// A (re)list under way: what it has listed so far, swapped in whole when it is done
    /// (as kube-runtime's stores do), so lookups never see half a list.
    listing: Option<HashMap<Key, Slim>>,
}

/// The compact store of kind `K`'s metadata (see the module docs), filled by
/// [`MetaStore::apply_watcher_event`] from a metadata watch; cheap to clone (shared).
#[derive(Debug)]
pub(crate) struct MetaStore<K> {
    state: Arc<RwLock<State>>,
    listed: Arc<AtomicBool>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for MetaStore<K> {
    fn clone(&self) -> Self {
        MetaStore { state: self.state.clone(), listed: self.listed.clone(), kind: PhantomData }
    }
}

impl<K> Default for MetaStore<K> {
    fn default() -> Self {
        MetaStore { state: Arc::default(), listed: Arc::default(), kind: PhantomData }
    }
}

impl<K: Resource<DynamicType = ()>> MetaStore<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event: an object applied or deleted, or a step of a (re)list.
    pub(crate) fn apply_watcher_event(&self, event: &watcher::Event<PartialObjectMeta<K>>) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) => {
                st.objects.insert(key_of(&o.metadata), Slim::of(&o.metadata));
            }
            watcher::Event::Delete(o) => {
                st.objects.remove(&key_of(&o.metadata));
            }
            watcher::Event::Init => st.listing = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                st.listing
                    .get_or_insert_with(HashMap::new)
                    .insert(key_of(&o.metadata), Slim::of(&o.metadata));
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
        self.read().objects.get(&key).map(|s| s.meta(&key))
    }

    /// The `resourceVersion` of `ns/name` (outer `None`: not stored).
    pub(crate) fn version(&self, ns: &str, name: &str) -> Option<Option<String>> {
        let key: Key = (ns.into(), name.into());
        self.read().objects.get(&key).map(|s| s.resource_version.as_deref().map(Into::into))
    }

    /// The metadata of every stored object for which `keep` is true.
    pub(crate) fn filter(&self, mut keep: impl FnMut(&ObjectMeta) -> bool) -> Vec<ObjectMeta> {
        let st = self.read();
        st.objects.iter().map(|(k, s)| s.meta(k)).filter(|m| keep(m)).collect()
    }

    /// Every stored object, as metadata-only objects (for what a relist finds gone).
    pub(crate) fn all(&self) -> Vec<PartialObjectMeta<K>> {
        self.filter(|_| true)
            .into_iter()
            .map(|metadata| PartialObjectMeta { types: None, metadata, _phantom: PhantomData })
            .collect()
    }

    /// How many objects are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.read().objects.len()
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
}
