//! Read-your-writes: the objects the controller wrote, until the watch delivers them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

/// How long a written object ([`Written`]) can stand in for the store's copy: the watch
/// event of a write arrives within milliseconds; this bounds the case where a relist skips
/// it.
pub(crate) const WRITTEN_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// `(namespace, name)`.
type NamespacedName = (String, String);

/// The entry key of `m`: its namespace and name (empty when unset).
fn key(m: &ObjectMeta) -> NamespacedName {
    (m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default())
}

/// Read-your-writes for the kinds a pass decides from (the workloads and the generated
/// Secrets): the objects the controller wrote, as the API server returned them, until the
/// store has caught up. A reconcile that runs before the echo of the previous one's write
/// arrives would otherwise see the old object: an old rollout as complete (and promote a CA
/// too early), old credentials (and roll the pod template back).
///
/// For Interconnects the status the controller wrote is what is kept: a pass must compare
/// its new status (and decide its Events) against the last one written, not an older one.
#[derive(Debug)]
pub(crate) struct Written<K> {
    entries: Mutex<HashMap<NamespacedName, (std::time::Instant, Arc<K>)>>,
    /// The objects the controller deleted again ([`Written::undone`]): when, and the uid.
    undone: Mutex<HashMap<NamespacedName, (std::time::Instant, Option<String>)>>,
    /// Whether a stored copy of the same `metadata.generation` has caught up (workloads:
    /// what a pass reads of them, spec and rollout, is per generation), or only a greater
    /// one (Interconnects: the controller's status writes keep the generation).
    same_generation_caught_up: bool,
    /// What is dropped from an answer before it is kept: what the store drops of the kind.
    slim: fn(&mut K),
}

impl<K: Resource> Default for Written<K> {
    fn default() -> Self {
        Written::slimmed(super::slim::slim)
    }
}

impl<K: Resource> Written<K> {
    /// Like [`Written::default`], keeping of each answer what `slim` leaves (the same as the
    /// kind's store: a written Deployment without its pod spec).
    pub(crate) fn slimmed(slim: fn(&mut K)) -> Self {
        Written { entries: Mutex::default(), undone: Mutex::default(), same_generation_caught_up: true, slim }
    }

    /// For objects whose writes by the controller keep their generation (status writes):
    /// only a stored copy with the same `resourceVersion`, or a greater generation, has
    /// caught up.
    pub(crate) fn status_writes() -> Self {
        Written {
            entries: Mutex::default(),
            undone: Mutex::default(),
            same_generation_caught_up: false,
            slim: super::slim::slim,
        }
    }

    /// Records `obj`, just written (the API server's answer), slimmed like its store's
    /// copies (at least without its `managedFields`).
    pub(crate) fn record(&self, mut obj: K) {
        (self.slim)(&mut obj);
        let key = key(obj.meta());
        self.undone.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (std::time::Instant::now(), Arc::new(obj)));
    }

    /// [`Written::record`], then [`Written::observed`] with `stored`, the store's copy now:
    /// the watch can deliver a write's echo before the write's answer comes, and nothing
    /// else would end a copy the store already shows before the next pick.
    pub(crate) fn record_seen(&self, obj: K, stored: Option<&K>) {
        self.record(obj);
        if let Some(stored) = stored {
            self.observed(stored);
        }
    }

    /// Forgets the written copy of `stored`'s name once the watch delivered that write or a
    /// later generation (see [`Written::pick`]).
    pub(crate) fn observed(&self, stored: &K) {
        self.observed_meta(stored.meta());
    }

    /// [`Written::observed`] by the stored object's metadata (its namespace, name,
    /// `resourceVersion` and generation are what is compared).
    pub(crate) fn observed_meta(&self, m: &ObjectMeta) {
        let key = key(m);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.get(&key).is_some_and(|(_, ours)| self.caught_up(m, ours.meta())) {
            entries.remove(&key);
        }
    }

    /// Whether the stored `s` has caught up with the written `o`: the same version, a later
    /// one (someone changed it after the controller: [`revision_order`]; without this, a
    /// change by another client that the watch delivers after the echo of the controller's
    /// write was missed would leave the written copy in use for [`WRITTEN_TTL`], and every
    /// replace of a generated Secret refused with 409), or, by generation, as
    /// [`Written::pick`] says.
    fn caught_up(&self, s: &ObjectMeta, o: &ObjectMeta) -> bool {
        s.resource_version == o.resource_version
            || revision_order(s.resource_version.as_deref(), o.resource_version.as_deref())
                == Some(std::cmp::Ordering::Greater)
            || s.generation
                .zip(o.generation)
                .is_some_and(|(sg, og)| sg > og || (sg == og && self.same_generation_caught_up))
    }

    /// Whether a written copy of `m`'s name is kept (a relist's object worth remembering
    /// until the relist is stored: [`super::wake::written_stored`]).
    pub(crate) fn holds(&self, m: &ObjectMeta) -> bool {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key(m))
    }

    /// Forgets `ns/name` (it was deleted).
    pub(crate) fn forget(&self, ns: &str, name: &str) {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).remove(&(ns.to_string(), name.to_string()));
    }

    /// Records that the controller deleted `ns/name` (the object of `uid`) again, after it
    /// created it in the same pass (a pass that ended early undoes what it made): the written
    /// copy is forgotten, and until the store no longer shows that object, or for at most
    /// [`WRITTEN_TTL`], [`Written::gone`] says it is gone and [`Written::pick`] finds nothing.
    /// A next pass that ran before the watch delivered the deletion would otherwise plan with
    /// the deleted object (a management CA that no longer exists).
    pub(crate) fn undone(&self, ns: &str, name: &str, uid: Option<String>) {
        let key = (ns.to_string(), name.to_string());
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        self.undone.lock().unwrap_or_else(|e| e.into_inner()).insert(key, (std::time::Instant::now(), uid));
    }

    /// Whether `stored` (the store's copy of `ns/name`) is an object the controller deleted
    /// ([`Written::undone`]) and the store has not caught up: the same uid (any object of the
    /// name when the deletion's uid is not known), within [`WRITTEN_TTL`]. Settled (forgotten)
    /// once the store shows nothing or another object.
    pub(crate) fn gone(&self, ns: &str, name: &str, stored: Option<&K>) -> bool {
        let mut undone = self.undone.lock().unwrap_or_else(|e| e.into_inner());
        if undone.is_empty() {
            return false;
        }
        let key = (ns.to_string(), name.to_string());
        let Some((at, uid)) = undone.get(&key) else { return false };
        let same = stored.is_some_and(|s| uid.is_none() || s.meta().uid == *uid);
        if same && at.elapsed() <= WRITTEN_TTL {
            return true;
        }
        undone.remove(&key);
        false
    }

    /// Forgets the written copy of the object whose deletion the watch delivered (`deleted`,
    /// its last metadata), unless that copy was written after the deletion
    /// ([`written_since`]): an object of the same name made again (a pass that ended early
    /// deletes what it created, and the next one creates it again) must not look missing
    /// because the watch delivers the first one's deletion late. The deletion of an object
    /// the controller deleted again ([`Written::undone`]) settles that record.
    pub(crate) fn deleted(&self, deleted: &ObjectMeta) {
        let key = key(deleted);
        let mut undone = self.undone.lock().unwrap_or_else(|e| e.into_inner());
        if undone.get(&key).is_some_and(|(_, uid)| uid.is_none() || *uid == deleted.uid) {
            undone.remove(&key);
        }
        drop(undone);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.get(&key).is_some_and(|(_, ours)| !written_since(ours.meta(), deleted)) {
            entries.remove(&key);
        }
    }

    /// The fresher of `stored` (the store's copy of `ns/name`) and the written one: the
    /// written one until the store shows the same or a later `resourceVersion` or, for kinds
    /// with a `metadata.generation`, at least the same generation; at most [`WRITTEN_TTL`].
    /// Without a written copy, nothing when `stored` is an object the controller deleted
    /// again and the store still shows ([`Written::gone`]).
    pub(crate) fn pick(&self, ns: &str, name: &str, stored: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ns.to_string(), name.to_string());
        let Some((at, ours)) = entries.get(&key) else {
            drop(entries);
            return if self.gone(ns, name, stored.as_deref()) { None } else { stored };
        };
        let caught_up = stored.as_ref().is_some_and(|s| self.caught_up(s.meta(), ours.meta()));
        if caught_up || at.elapsed() > WRITTEN_TTL {
            entries.remove(&key);
            return stored;
        }
        Some(ours.clone())
    }
}

/// Whether `ours` (the metadata a write of the controller's returned) is of an object
/// written after `deleted` (the last metadata of an object of that name, as its deletion
/// event carries it) was deleted: a later `resourceVersion` ([`revision_order`]; the
/// deletion event carries the revision of the deletion, later than every version of the
/// deleted object), or another `uid`. When neither tells, it is not.
pub(crate) fn written_since(ours: &ObjectMeta, deleted: &ObjectMeta) -> bool {
    let other_object = ours.uid.is_some() && deleted.uid.is_some() && ours.uid != deleted.uid;
    let later = revision_order(ours.resource_version.as_deref(), deleted.resource_version.as_deref());
    other_object || later == Some(std::cmp::Ordering::Greater)
}

/// The order of `resourceVersion`s `a` and `b` (of objects of one resource), as the
/// Kubernetes API defines it since 1.35 (KEP-5504, Comparable Resource Version; client-go's
/// `resourceversion.CompareResourceVersion`): each a positive decimal integer of any length
/// without leading zeros, compared as numbers (by length, then digit by digit). `None` when
/// either is missing or of another form (before KEP-5504 the API conventions called it
/// opaque, and a server not backed by etcd may give any string): then only equality tells,
/// and callers take neither as the later.
pub(crate) fn revision_order(a: Option<&str>, b: Option<&str>) -> Option<std::cmp::Ordering> {
    fn version(v: Option<&str>) -> Option<&str> {
        v.filter(|v| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|c| c.is_ascii_digit()))
    }
    let (a, b) = (version(a)?, version(b)?);
    Some(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}
