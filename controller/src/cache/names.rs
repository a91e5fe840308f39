//! The names of every Secret in the watched namespaces.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

/// The names (`namespace/name`) of every Secret in the watched namespaces, from a
/// metadata-only watch: whether a user-provided Secret exists, at a few dozen bytes a
/// Secret (no metadata is kept).
#[derive(Debug, Default)]
pub(crate) struct SecretNames {
    state: Mutex<NamesState>,
}

#[derive(Debug, Default)]
struct NamesState {
    names: std::collections::HashSet<String>,
    listing: std::collections::HashSet<String>,
    ready: bool,
}

impl SecretNames {
    /// Follows one watch event (a relist replaces the names when it is done).
    pub(crate) fn apply(&self, event: &watcher::Event<PartialObjectMeta<Secret>>) {
        let name = |s: &PartialObjectMeta<Secret>| {
            format!(
                "{}/{}",
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default()
            )
        };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => st.listing.clear(),
            watcher::Event::InitApply(s) => {
                st.listing.insert(name(s));
            }
            watcher::Event::InitDone => {
                st.names = std::mem::take(&mut st.listing);
                st.names.shrink_to_fit();
                st.ready = true;
            }
            watcher::Event::Apply(s) => {
                st.names.insert(name(s));
            }
            watcher::Event::Delete(s) => {
                st.names.remove(&name(s));
            }
        }
    }

    /// Whether Secret `ns/name` exists.
    pub(crate) fn contains(&self, ns: &str, name: &str) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).names.contains(&format!("{ns}/{name}"))
    }

    /// Whether the first list is complete.
    pub(crate) fn is_ready(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).ready
    }
}
