//! The names of every Secret in the watched namespaces, and which Secret events wake their
//! Interconnects.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Secret;
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::watcher;

/// The names (`namespace/name`) of every Secret in the watched namespaces, from a
/// metadata-only watch: whether a user-provided Secret exists, at a few dozen bytes a
/// Secret (its name and a number for its `resourceVersion`; no other metadata is kept).
#[derive(Debug, Default)]
pub(crate) struct SecretNames {
    state: Mutex<NamesState>,
}

#[derive(Debug, Default)]
struct NamesState {
    /// `namespace/name` → [`version`] of its `resourceVersion`.
    names: HashMap<String, u64>,
    /// What the list under way has listed so far.
    listing: HashMap<String, u64>,
    /// Whether a list has completed.
    ready: bool,
}

fn key(s: &PartialObjectMeta<Secret>) -> String {
    format!(
        "{}/{}",
        s.metadata.namespace.as_deref().unwrap_or_default(),
        s.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A `resourceVersion` as a number: the etcd revision it is (a hash of the string for one
/// that is not a number, which the API server never sends; only equality matters).
fn version(s: &PartialObjectMeta<Secret>) -> u64 {
    let rv = s.metadata.resource_version.as_deref().unwrap_or_default();
    rv.parse().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one(rv)
    })
}

/// A name-only Secret for `key` (`namespace/name`): what a deletion seen only through a
/// re-list wakes with.
fn named(key: &str) -> PartialObjectMeta<Secret> {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    PartialObjectMeta::<Secret> {
        metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..ObjectMeta::default() },
        ..Default::default()
    }
}

impl SecretNames {
    /// Follows one watch event and returns the Secrets whose change must wake the
    /// Interconnects that name them: each one added, changed or deleted, also when the watch
    /// had to list again (its resource version expired, the API server restarted) and the
    /// change happened in the gap, as the owned kinds' watches do
    /// ([`super::wake::Relist`]): a listed Secret that is new or has another
    /// `resourceVersion`, and, once the list is done, each known Secret it no longer has.
    /// The first list wakes nothing (every Interconnect is reconciled at start).
    pub(crate) fn apply(
        &self,
        event: watcher::Event<PartialObjectMeta<Secret>>,
    ) -> Vec<PartialObjectMeta<Secret>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => {
                st.listing.clear();
                Vec::new()
            }
            watcher::Event::InitApply(s) => {
                let (k, v) = (key(&s), version(&s));
                let changed = st.ready && st.names.get(&k) != Some(&v);
                st.listing.insert(k, v);
                if changed { vec![s] } else { Vec::new() }
            }
            watcher::Event::InitDone => {
                let listed = std::mem::take(&mut st.listing);
                let gone: Vec<PartialObjectMeta<Secret>> = if st.ready {
                    st.names.keys().filter(|k| !listed.contains_key(*k)).map(|k| named(k)).collect()
                } else {
                    Vec::new()
                };
                st.names = listed;
                st.names.shrink_to_fit();
                st.ready = true;
                gone
            }
            watcher::Event::Apply(s) => {
                st.names.insert(key(&s), version(&s));
                vec![s]
            }
            watcher::Event::Delete(s) => {
                st.names.remove(&key(&s));
                vec![s]
            }
        }
    }

    /// Whether Secret `ns/name` exists.
    pub(crate) fn contains(&self, ns: &str, name: &str) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).names.contains_key(&format!("{ns}/{name}"))
    }

    /// Whether the first list is complete.
    pub(crate) fn is_ready(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(ns: &str, name: &str, rv: &str) -> PartialObjectMeta<Secret> {
        let mut s = named(&format!("{ns}/{name}"));
        s.metadata.resource_version = Some(rv.into());
        s
    }

    fn names(woken: &[PartialObjectMeta<Secret>]) -> Vec<String> {
        let mut v: Vec<String> = woken.iter().map(key).collect();
        v.sort();
        v
    }

    /// A re-list wakes exactly what changed while the watch was down: a Secret changed,
    /// one created and one deleted in the gap; the unchanged ones and the first list wake
    /// nothing.
    #[test]
    fn a_relist_wakes_what_changed_in_the_gap() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let n = SecretNames::default();
        // The first list.
        assert!(n.apply(Init).is_empty());
        for (name, rv) in [("tls", "10"), ("users", "11"), ("ca", "12")] {
            assert!(n.apply(InitApply(secret("a", name, rv))).is_empty(), "the first list wakes nothing");
        }
        assert!(n.apply(InitDone).is_empty());
        assert!(n.is_ready() && n.contains("a", "tls"));
        // Live events wake.
        assert_eq!(names(&n.apply(Apply(secret("a", "tls", "13")))), ["a/tls"]);
        // The watch expires; meanwhile `users` changed, `ca` was deleted, `new` created.
        assert!(n.apply(Init).is_empty());
        let mut woken = Vec::new();
        for (name, rv) in [("tls", "13"), ("users", "20"), ("new", "21")] {
            woken.extend(n.apply(InitApply(secret("a", name, rv))));
        }
        woken.extend(n.apply(InitDone));
        assert_eq!(names(&woken), ["a/ca", "a/new", "a/users"]);
        assert!(!n.contains("a", "ca") && n.contains("a", "new"));
        // A deletion seen live.
        assert_eq!(names(&n.apply(Delete(secret("a", "new", "22")))), ["a/new"]);
        assert!(!n.contains("a", "new"));
    }
}
