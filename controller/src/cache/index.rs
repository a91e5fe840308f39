//! The stored objects of each Interconnect, by namespace and the value of their
//! `interconnect_cr` label: what a pass looks up of one Interconnect (its router pods, the
//! children a prune lists) without scanning every object of the store. At 2,000
//! Interconnects a scan of the pods' store compared 6,000 pods' namespaces and labels for
//! every pass, an eighth of the controller's CPU at rest (`make bench`,
//! `QDR_BENCH_ONLY=mesh-2000`, a perf profile).
//!
//! It lives beside the objects it indexes, under the same lock
//! ([`super::meta_store::Compact`]), one per namespace, and is told each object's label
//! before and after a change: it keeps no map back from an object to its label and no
//! namespace with each name. Each Interconnect's names are a small sorted `Vec` (a
//! `BTreeSet` took a 200-byte node for one name). With that map and sets, the index of
//! every compact store took 11.5 MB at 2,000 Interconnects (a heaptrack profile).

use std::collections::HashMap;

use crate::labels;

/// The names of the objects of one namespace by the value of their `interconnect_cr` label.
#[derive(Debug, Default)]
pub(crate) struct ByOwner {
    names: HashMap<Box<str>, Vec<Box<str>>>,
}

impl ByOwner {
    /// Records that object `name` is labelled `owner` (nothing when `None`).
    pub(crate) fn insert(&mut self, name: &str, owner: Option<&str>) {
        let Some(owner) = owner else { return };
        let names = match self.names.get_mut(owner) {
            Some(names) => names,
            None => self.names.entry(owner.into()).or_default(),
        };
        if let Err(at) = names.binary_search_by(|n| (**n).cmp(name)) {
            names.insert(at, name.into());
        }
    }

    /// Records that object `name`, labelled `owner`, is gone or relabelled.
    pub(crate) fn remove(&mut self, name: &str, owner: Option<&str>) {
        let Some(owner) = owner else { return };
        let Some(names) = self.names.get_mut(owner) else { return };
        if let Ok(at) = names.binary_search_by(|n| (**n).cmp(name)) {
            names.remove(at);
        }
        if names.is_empty() {
            self.names.remove(owner);
        }
    }

    /// The names of the objects labelled `interconnect_cr=owner`, by name.
    pub(crate) fn names(&self, owner: &str) -> &[Box<str>] {
        self.names.get(owner).map_or(&[], Vec::as_slice)
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
        index.insert("m-2", Some("m"));
        index.insert("m-1", Some("m"));
        index.insert("m-1", Some("m"));
        index.insert("free", None);
        assert_eq!(index.names("m"), ["m-1".into(), "m-2".into()] as [Box<str>; 2], "by name, once each");
        // Relabelled: out of the old, into the new.
        index.remove("m-2", Some("m"));
        index.insert("m-2", Some("n"));
        assert_eq!(index.names("m"), ["m-1".into()] as [Box<str>; 1], "relabelled");
        assert_eq!(index.names("n"), ["m-2".into()] as [Box<str>; 1]);
        index.remove("m-1", Some("m"));
        assert!(index.names("m").is_empty());
        assert!(!index.names.contains_key("m"), "an empty entry is dropped");
        index.remove("free", None);
        index.remove("x", Some("o"));
        assert_eq!(index.names("n"), ["m-2".into()] as [Box<str>; 1]);
    }
}
