//! The stored objects of each Interconnect, by namespace and the value of their
//! `interconnect_cr` label: what a pass looks up of one Interconnect (its router pods, the
//! children a prune lists) without scanning every object of the store. At 2,000
//! Interconnects a scan of the pods' store compared 6,000 pods' namespaces and labels for
//! every pass, an eighth of the controller's CPU at rest (`make bench`,
//! `QDR_BENCH_ONLY=mesh-2000`, a perf profile).

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;

use crate::labels;

/// `(namespace, name)`.
type Key = (Box<str>, Box<str>);

/// The names of the objects of each `(namespace, interconnect_cr label)`, kept in step with
/// a store by the same watch events ([`OwnerIndex::apply_watcher_event`]; a (re)list is
/// swapped in whole when it is done, as the stores do).
#[derive(Debug, Default)]
pub(crate) struct OwnerIndex {
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    current: Names,
    listing: Option<Names>,
}

#[derive(Debug, Default)]
struct Names {
    /// `(namespace, label value)` → the names of its objects.
    by_owner: HashMap<Key, BTreeSet<Box<str>>>,
    /// `(namespace, name)` → its label value.
    owner_of: HashMap<Key, Box<str>>,
}

impl Names {
    fn insert(&mut self, meta: &ObjectMeta) {
        self.remove(meta);
        let (ns, name) =
            (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
        let Some(owner) = meta.labels.as_ref().and_then(|l| l.get(labels::INTERCONNECT)) else { return };
        self.by_owner.entry((ns.into(), owner.as_str().into())).or_default().insert(name.into());
        self.owner_of.insert((ns.into(), name.into()), owner.as_str().into());
    }

    fn remove(&mut self, meta: &ObjectMeta) {
        let ns: Box<str> = meta.namespace.as_deref().unwrap_or_default().into();
        let name: Box<str> = meta.name.as_deref().unwrap_or_default().into();
        let Some(owner) = self.owner_of.remove(&(ns.clone(), name.clone())) else { return };
        let key = (ns, owner);
        if let Some(names) = self.by_owner.get_mut(&key) {
            names.remove(&name);
            if names.is_empty() {
                self.by_owner.remove(&key);
            }
        }
    }
}

impl OwnerIndex {
    /// Applies one watch event of the store it indexes.
    pub(crate) fn apply_watcher_event<K: Resource>(&self, event: &watcher::Event<K>) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) => st.current.insert(o.meta()),
            watcher::Event::Delete(o) => st.current.remove(o.meta()),
            watcher::Event::Init => st.listing = Some(Names::default()),
            watcher::Event::InitApply(o) => st.listing.get_or_insert_with(Names::default).insert(o.meta()),
            watcher::Event::InitDone => st.current = st.listing.take().unwrap_or_default(),
        }
    }

    /// The names of the objects in `ns` labelled `interconnect_cr=owner`, by name.
    pub(crate) fn names(&self, ns: &str, owner: &str) -> Vec<Box<str>> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        (st.current.by_owner.get(&(ns.into(), owner.into())))
            .map_or_else(Vec::new, |n| n.iter().cloned().collect())
    }
}

/// The `interconnect_cr` value `selector` asks for, when it asks for one.
pub(crate) fn owner_selected<'a>(selector: &[(&str, &'a str)]) -> Option<&'a str> {
    selector.iter().find(|(k, _)| *k == labels::INTERCONNECT).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(ns: &str, name: &str, owner: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.labels = owner.map(|o| [(labels::INTERCONNECT.to_string(), o.to_string())].into());
        p
    }

    #[test]
    fn the_index_follows_applies_deletes_relabels_and_relists() {
        let index = OwnerIndex::default();
        let apply = |p: Pod| index.apply_watcher_event(&watcher::Event::Apply(p));
        apply(pod("a", "m-1", Some("m")));
        apply(pod("a", "m-2", Some("m")));
        apply(pod("b", "m-3", Some("m")));
        apply(pod("a", "free", None));
        assert_eq!(index.names("a", "m"), ["m-1".into(), "m-2".into()] as [Box<str>; 2]);
        assert_eq!(index.names("b", "m"), ["m-3".into()] as [Box<str>; 1]);
        apply(pod("a", "m-2", Some("n")));
        assert_eq!(index.names("a", "m"), ["m-1".into()] as [Box<str>; 1], "relabelled");
        assert_eq!(index.names("a", "n"), ["m-2".into()] as [Box<str>; 1]);
        index.apply_watcher_event(&watcher::Event::Delete(pod("a", "m-1", Some("m"))));
        assert!(index.names("a", "m").is_empty());
        // A relist is swapped in whole when done: until then the old answers stand.
        index.apply_watcher_event(&watcher::Event::<Pod>::Init);
        index.apply_watcher_event(&watcher::Event::InitApply(pod("a", "m-9", Some("m"))));
        assert_eq!(index.names("a", "n"), ["m-2".into()] as [Box<str>; 1]);
        index.apply_watcher_event(&watcher::Event::<Pod>::InitDone);
        assert_eq!(index.names("a", "m"), ["m-9".into()] as [Box<str>; 1]);
        assert!(index.names("a", "n").is_empty(), "gone in the relist");
    }
}
