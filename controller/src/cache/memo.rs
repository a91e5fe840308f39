//! What the controller remembers between passes within one leadership term: drift marks,
//! the last full apply of each Interconnect, and the Secrets each spec references.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use qdr_api::Interconnect;

/// Interconnects (`namespace/name`) whose children someone else changed or deleted since
/// their last full apply: their next pass applies everything again. See
/// [`crate::reconcile::apply::fingerprint`].
#[derive(Debug, Default)]
pub(crate) struct Drift {
    owners: Mutex<BTreeSet<String>>,
}

impl Drift {
    /// Marks the Interconnect controlling `meta` (if any).
    pub(crate) fn mark(&self, meta: &ObjectMeta) {
        let ns = meta.namespace.clone().unwrap_or_default();
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        for r in meta.owner_references.iter().flatten() {
            if r.controller == Some(true) && r.kind == "Interconnect" {
                owners.insert(format!("{ns}/{}", r.name));
            }
        }
    }

    /// Whether `key` was marked, clearing the mark.
    pub(crate) fn take(&self, key: &str) -> bool {
        self.owners.lock().unwrap_or_else(|e| e.into_inner()).remove(key)
    }
}

/// The last full apply of each Interconnect (`namespace/name`): its uid, generation, the
/// [`crate::reconcile::apply::fingerprint`] of what was applied, and when.
#[derive(Debug, Default)]
pub(crate) struct AppliedMemo {
    entries: Mutex<HashMap<String, (String, i64, u64, std::time::Instant)>>,
}

impl AppliedMemo {
    /// Records a full apply.
    pub(crate) fn record(&self, key: &str, uid: &str, generation: i64, fingerprint: u64) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.into(), (uid.into(), generation, fingerprint, std::time::Instant::now()));
    }

    /// Whether the last full apply of `key` was this uid, generation and fingerprint, less
    /// than `max_age` ago.
    pub(crate) fn is_current(
        &self,
        key: &str,
        uid: &str,
        generation: i64,
        fingerprint: u64,
        max_age: std::time::Duration,
    ) -> bool {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).get(key).is_some_and(|(u, g, f, at)| {
            u == uid && *g == generation && *f == fingerprint && at.elapsed() < max_age
        })
    }
}

/// The Secret names each Interconnect's effective spec references, computed once per
/// generation (defaulting every Interconnect for every Secret event would cost
/// Interconnects × Secrets defaulting runs at start).
#[derive(Debug, Default)]
pub(crate) struct SecretReferences {
    by_uid: Mutex<HashMap<String, (i64, BTreeSet<String>)>>,
}

impl SecretReferences {
    /// The Interconnects in `store` of namespace `ns` whose effective spec names Secret
    /// `name`.
    pub(crate) fn referencing(
        &self,
        store: &Store<Interconnect>,
        ns: &str,
        name: &str,
    ) -> Vec<ObjectRef<Interconnect>> {
        let mut memo = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        store
            .state_filter(|ic| ic.metadata.namespace.as_deref() == Some(ns))
            .into_iter()
            .filter(|ic| {
                let uid = ic.metadata.uid.clone().unwrap_or_default();
                let generation = ic.metadata.generation.unwrap_or_default();
                let entry = memo
                    .entry(uid)
                    .and_modify(|e| {
                        if e.0 != generation {
                            *e = (generation, qdr_api::defaults(ic).secret_names());
                        }
                    })
                    .or_insert_with(|| (generation, qdr_api::defaults(ic).secret_names()));
                entry.1.contains(name)
            })
            .map(|ic| ObjectRef::from_obj(ic.as_ref()))
            .collect()
    }
}
