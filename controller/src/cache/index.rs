//! The stored objects of each Interconnect, by namespace and the value of their
//! `interconnect_cr` label: what a pass looks up of one Interconnect (its router pods, the
//! children a prune lists) without scanning every object of the store. At 2,000
//! Interconnects a scan of the pods' store compared 6,000 pods' namespaces and labels for
//! every pass, an eighth of the controller's CPU at rest (`make bench`,
//! `QDR_BENCH_ONLY=mesh-2000`, a perf profile).
//!
//! It lives beside the objects it indexes, under the same lock
//! ([`super::meta_store::Compact`]), and is told each object's label before and after a
//! change, so it keeps no map back from an object to its label. Each Interconnect's names
//! are a small `Vec` (one to a few names each: a `BTreeSet` took a 200-byte node for one
//! name). The index of every compact store took 11.5 MB at 2,000 Interconnects in a
//! heaptrack profile when it kept that map and sets.

use std::collections::HashMap;

use crate::labels;

/// `(namespace, interconnect_cr label value)`.
type Owner = (Box<str>, Box<str>);

/// The names of the objects of each `(namespace, interconnect_cr label)`.
#[derive(Debug, Default)]
pub(crate) struct ByOwner {
    names: HashMap<Owner, Vec<Box<str>>>,
}

impl ByOwner {
    /// Records that object `ns/name` is labelled `owner` (nothing when `None`).
    pub(crate) fn insert(&mut self, ns: &str, name: &str, owner: Option<&str>) {
        let Some(owner) = owner else { return };
        let names = self.names.entry((ns.into(), owner.into())).or_default();
        if let Err(at) = names.binary_search_by(|n| (**n).cmp(name)) {
            names.insert(at, name.into());
        }
    }

    /// Records that object `ns/name`, labelled `owner`, is gone or relabelled.
    pub(crate) fn remove(&mut self, ns: &str, name: &str, owner: Option<&str>) {
        let Some(owner) = owner else { return };
        let key: Owner = (ns.into(), owner.into());
        let Some(names) = self.names.get_mut(&key) else { return };
        if let Ok(at) = names.binary_search_by(|n| (**n).cmp(name)) {
            names.remove(at);
        }
        if names.is_empty() {
            self.names.remove(&key);
        }
    }

    /// The names of the objects in `ns` labelled `interconnect_cr=owner`, by name.
    pub(crate) fn names(&self, ns: &str, owner: &str) -> &[Box<str>] {
        self.names.get(&(ns.into(), owner.into())).map_or(&[], Vec::as_slice)
    }

    /// Gives back the room a list's growth left unused.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.names.shrink_to_fit();
        self.names.values_mut().for_each(Vec::shrink_to_fit);
    }
}

/// The `interconnect_cr` value `selector` asks for, when it asks for one.
pub(crate) fn owner_selected<'a>(selector: &[(&str, &'a str)]) -> Option<&'a str> {
    selector.iter().find(|(k, _)| *k == labels::INTERCONNECT).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_follows_inserts_removes_and_relabels() {
        let mut index = ByOwner::default();
        index.insert("a", "m-2", Some("m"));
        index.insert("a", "m-1", Some("m"));
        index.insert("a", "m-1", Some("m"));
        index.insert("b", "m-3", Some("m"));
        index.insert("a", "free", None);
        assert_eq!(
            index.names("a", "m"),
            ["m-1".into(), "m-2".into()] as [Box<str>; 2],
            "by name, once each"
        );
        assert_eq!(index.names("b", "m"), ["m-3".into()] as [Box<str>; 1]);
        // Relabelled: out of the old, into the new.
        index.remove("a", "m-2", Some("m"));
        index.insert("a", "m-2", Some("n"));
        assert_eq!(index.names("a", "m"), ["m-1".into()] as [Box<str>; 1], "relabelled");
        assert_eq!(index.names("a", "n"), ["m-2".into()] as [Box<str>; 1]);
        index.remove("a", "m-1", Some("m"));
        assert!(index.names("a", "m").is_empty());
        assert!(!index.names.contains_key(&("a".into(), "m".into())), "an empty entry is dropped");
        index.remove("a", "free", None);
        index.remove("c", "x", Some("m"));
        assert_eq!(index.names("b", "m"), ["m-3".into()] as [Box<str>; 1]);
    }
}
