//! What the controller remembers between passes within one leadership term: drift marks,
//! the last full apply of each Interconnect, and the Secrets each spec references.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use qdr_api::Interconnect;

/// Interconnects (`namespace/name`) whose children someone else changed or deleted since
/// their last successful full apply: their next pass applies everything again. See
/// `crate::reconcile::apply::fingerprint`.
///
/// A mark is a counter: [`Drift::marked`] reads it before a full apply, and
/// [`Drift::clear`] removes it after the apply succeeded, only when no new mark arrived
/// meanwhile. A failed apply, a failed status write or a pass that ends as stale leaves it,
/// so the next pass applies again.
#[derive(Debug, Default)]
pub(crate) struct Drift {
    owners: Mutex<HashMap<String, u64>>,
}

impl Drift {
    /// Marks the Interconnect controlling `meta` (if any).
    pub(crate) fn mark(&self, meta: &ObjectMeta) {
        let ns = meta.namespace.clone().unwrap_or_default();
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        for r in meta.owner_references.iter().flatten() {
            if r.controller == Some(true) && r.kind == "Interconnect" {
                *owners.entry(format!("{ns}/{}", r.name)).or_default() += 1;
            }
        }
    }

    /// The mark of `key` (`None`: no drift since its last successful full apply).
    pub(crate) fn marked(&self, key: &str) -> Option<u64> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner()).get(key).copied()
    }

    /// Clears the mark of `key` after a successful full apply that started when it was
    /// `seen` ([`Drift::marked`]); a mark made since stays.
    pub(crate) fn clear(&self, key: &str, seen: Option<u64>) {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        if owners.get(key).copied() == seen {
            owners.remove(key);
        }
    }

    /// Forgets `key` (the Interconnect was deleted).
    pub(crate) fn forget(&self, key: &str) {
        self.owners.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// `kind/namespace/name` of a child, one allocation (none of the three holds a `/`).
type ChildKey = Box<str>;

fn key_of(kind: &str, ns: &str, name: &str) -> ChildKey {
    format!("{kind}/{ns}/{name}").into_boxed_str()
}

/// What a watch event shows relative to the controller's last write of that object
/// ([`OwnWrites::judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The `resourceVersion` the controller's own write returned: its echo.
    Echo,
    /// A later version with the same `metadata.generation` and the same labels,
    /// annotations and owner references as written: only the status moved (a workload
    /// controller reporting). Only for kinds with a generation (workloads).
    StatusOnly,
    /// An unknown version while a write of the controller's to that object is in flight:
    /// most often that write's own echo, arriving before the write's answer. It is judged
    /// when the answer (or the failure) comes ([`PendingWrite`]).
    Held,
    /// Anything else: someone changed or removed something, or the controller never
    /// wrote this object in this term.
    Changed,
}

/// The `resourceVersion` (and, for workloads, generation and metadata) of the controller's
/// last write of each child in this term, as the API server's answer gave it: a watch event
/// is the controller's echo only when it carries that exact `resourceVersion`. Unlike
/// `managedFields` times (moved only when a manager sets a field, at one-second
/// resolution, on the API server's clock), this cannot take someone else's removal of a
/// field for the controller's own write.
///
/// The watch and the write's answer travel on different connections, so a write's echo
/// can be seen before its answer. A write is therefore announced before it is sent
/// ([`OwnWrites::begin`]); events of that object with an unknown version are held until
/// the answer comes, then dropped when they carry the answer's version and marked as drift
/// otherwise. Without this, under load most first applies would be followed by a second
/// full apply woken by their own echoes.
#[derive(Debug, Default)]
pub(crate) struct OwnWrites {
    entries: Mutex<HashMap<ChildKey, Entry>>,
}

/// What is known of one child.
#[derive(Debug, Default)]
struct Entry {
    /// The controller's last write, as answered.
    written: Option<Stamp>,
    /// Writes announced and not yet answered.
    pending: u32,
    /// Events seen while a write was pending: their version, and the metadata that names
    /// the owner to mark when they turn out not to be the echo.
    held: Vec<(Option<String>, ObjectMeta)>,
}

/// What identifies one written version of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    resource_version: Option<String>,
    generation: Option<i64>,
    metadata: u64,
}

/// Annotations other controllers legitimately set on our children (not drift).
const FOREIGN_ANNOTATIONS: &[&str] = &["deployment.kubernetes.io/revision"];

impl Stamp {
    fn of(meta: &ObjectMeta) -> Stamp {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        meta.labels.hash(&mut h);
        for (k, v) in meta.annotations.iter().flatten() {
            if !FOREIGN_ANNOTATIONS.contains(&k.as_str()) {
                (k, v).hash(&mut h);
            }
        }
        serde_json::to_string(&meta.owner_references).unwrap_or_default().hash(&mut h);
        Stamp {
            resource_version: meta.resource_version.clone(),
            generation: meta.generation,
            metadata: h.finish(),
        }
    }
}

fn child_key(kind: &str, meta: &ObjectMeta) -> ChildKey {
    key_of(kind, meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

/// A write of the controller's announced with [`OwnWrites::begin`]: [`PendingWrite::record`]
/// gives the answer; dropped without one (the write failed or was abandoned), every event
/// held meanwhile is someone else's and is marked as drift.
#[must_use = "a pending write is finished by record, or by drop when the write failed"]
pub(crate) struct PendingWrite<'a> {
    own: &'a OwnWrites,
    drift: &'a Drift,
    key: Option<ChildKey>,
}

impl PendingWrite<'_> {
    /// Records `meta`, as the API server answered the write.
    pub(crate) fn record(mut self, meta: &ObjectMeta) {
        if let Some(key) = self.key.take() {
            self.own.finish(key, Some(Stamp::of(meta)), self.drift);
        }
    }
}

impl Drop for PendingWrite<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.own.finish(key, None, self.drift);
        }
    }
}

impl OwnWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ChildKey, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Announces a write of the controller's to the `kind` `ns/name`, before it is sent;
    /// events held meanwhile are judged against `drift` when it is finished.
    pub(crate) fn begin<'a>(
        &'a self,
        drift: &'a Drift,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> PendingWrite<'a> {
        let key = key_of(kind, ns, name);
        self.lock().entry(key.clone()).or_default().pending += 1;
        PendingWrite { own: self, drift, key: Some(key) }
    }

    /// Ends a pending write with its `answer` (none: it failed): held events with the
    /// answer's version are its echo; any other is marked in `drift`.
    fn finish(&self, key: ChildKey, answer: Option<Stamp>, drift: &Drift) {
        let echo = answer.as_ref().and_then(|a| a.resource_version.clone());
        let held = {
            let mut entries = self.lock();
            let entry = entries.entry(key.clone()).or_default();
            entry.pending = entry.pending.saturating_sub(1);
            let forgettable = answer.as_ref().is_some_and(|a| a.generation.is_none());
            if answer.is_some() {
                entry.written = answer;
            }
            let held = std::mem::take(&mut entry.held);
            // As in [`OwnWrites::judge`]: once its echo is seen, the entry of a kind without
            // a generation is no longer needed.
            let echoed = echo.is_some() && held.iter().any(|(v, _)| *v == echo);
            if entry.pending == 0 && (entry.written.is_none() || (echoed && forgettable)) {
                entries.remove(&key);
            }
            held
        };
        for (version, meta) in held {
            if version.is_none() || version != echo {
                drift.mark(&meta);
            }
        }
    }

    /// What the event carrying `meta` (of a `kind`) shows (see [`Seen`]); a
    /// [`Seen::Held`] event is kept until the pending write is finished.
    pub(crate) fn judge(&self, kind: &str, meta: &ObjectMeta) -> Seen {
        let mut entries = self.lock();
        let key = child_key(kind, meta);
        let Some(entry) = entries.get_mut(&key) else { return Seen::Changed };
        let now = Stamp::of(meta);
        match &entry.written {
            Some(ours)
                if ours.resource_version.is_some() && now.resource_version == ours.resource_version =>
            {
                // Its echo seen, a kind without a generation needs the entry no more: any
                // later version is a change either way. Workloads keep theirs (to tell a
                // status update from a change).
                if ours.generation.is_none() && entry.pending == 0 {
                    entries.remove(&key);
                }
                return Seen::Echo;
            }
            Some(ours)
                if ours.generation.is_some()
                    && now.generation == ours.generation
                    && now.metadata == ours.metadata =>
            {
                return Seen::StatusOnly;
            }
            _ => {}
        }
        if entry.pending > 0 {
            let owner = ObjectMeta {
                namespace: meta.namespace.clone(),
                owner_references: meta.owner_references.clone(),
                ..ObjectMeta::default()
            };
            entry.held.push((now.resource_version, owner));
            Seen::Held
        } else {
            Seen::Changed
        }
    }

    /// Forgets the object of `meta` (deleted), unless a write to it is pending or the write
    /// remembered is of an object of that name made after the deletion (a later
    /// `resourceVersion`: the watch delivered an earlier object's deletion late, and the
    /// echo of the write is still to come).
    pub(crate) fn forget(&self, kind: &str, meta: &ObjectMeta) {
        let mut entries = self.lock();
        let key = child_key(kind, meta);
        let deleted = meta.resource_version.as_deref();
        let written_since = |w: &Stamp| {
            super::written::revision_order(w.resource_version.as_deref(), deleted)
                == Some(std::cmp::Ordering::Greater)
        };
        match entries.get_mut(&key) {
            Some(entry) if entry.written.as_ref().is_some_and(written_since) => {}
            Some(entry) if entry.pending > 0 => entry.written = None,
            Some(_) => {
                entries.remove(&key);
            }
            None => {}
        }
    }

    /// How many objects are remembered (for tests and the memory figures).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The last full apply of each Interconnect (`namespace/name`): its uid, generation, the
/// `crate::reconcile::apply::fingerprint` of what was applied, and when.
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

    /// Forgets `key` (the Interconnect was deleted).
    pub(crate) fn forget(&self, key: &str) {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// Which Interconnects' effective specs name each Secret: an index kept from the
/// Interconnect watch ([`SecretReferences::see`] once per generation: defaulting every
/// Interconnect for every Secret event would cost Interconnects × Secrets defaulting runs),
/// so a Secret event finds the Interconnects to wake without scanning them.
#[derive(Debug, Default)]
pub(crate) struct SecretReferences {
    index: Mutex<ReferenceIndex>,
}

#[derive(Debug, Default)]
struct ReferenceIndex {
    /// uid → what is indexed of that Interconnect.
    by_uid: HashMap<Box<str>, Indexed>,
    /// `namespace/name` of a Secret → uids of the Interconnects that reference it (most
    /// often one: a `Vec`, not a set).
    by_secret: HashMap<Box<str>, Vec<Box<str>>>,
}

/// One indexed Interconnect.
#[derive(Debug)]
struct Indexed {
    generation: i64,
    namespace: Box<str>,
    name: Box<str>,
    /// The Secret names its effective spec references.
    secrets: Box<[Box<str>]>,
}

fn secret_key(ns: &str, name: &str) -> Box<str> {
    format!("{ns}/{name}").into_boxed_str()
}

impl ReferenceIndex {
    fn remove(&mut self, uid: &str) {
        let Some(gone) = self.by_uid.remove(uid) else { return };
        for name in &gone.secrets {
            let key = secret_key(&gone.namespace, name);
            if let Some(uids) = self.by_secret.get_mut(&key) {
                uids.retain(|u| &**u != uid);
                if uids.is_empty() {
                    self.by_secret.remove(&key);
                }
            }
        }
    }
}

impl SecretReferences {
    /// Indexes the Secret names of `ic` (a watch event), unless its generation is indexed.
    pub(crate) fn see(&self, ic: &Interconnect) {
        let uid = ic.metadata.uid.as_deref().unwrap_or_default();
        let generation = ic.metadata.generation.unwrap_or_default();
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        if index.by_uid.get(uid).is_some_and(|i| i.generation == generation) {
            return;
        }
        index.remove(uid);
        let secrets: Box<[Box<str>]> =
            qdr_api::defaults(ic).secret_names().into_iter().map(String::into_boxed_str).collect();
        let namespace = ic.metadata.namespace.as_deref().unwrap_or_default();
        for name in &secrets {
            let uids = index.by_secret.entry(secret_key(namespace, name)).or_default();
            if !uids.iter().any(|u| &**u == uid) {
                uids.push(uid.into());
                uids.shrink_to_fit();
            }
        }
        let name = ic.metadata.name.as_deref().unwrap_or_default().into();
        index.by_uid.insert(uid.into(), Indexed { generation, namespace: namespace.into(), name, secrets });
    }

    /// The Interconnects of namespace `ns` whose effective spec names Secret `name`, except
    /// the one named `except` (the Secret's controller, which its own watch wakes).
    pub(crate) fn referencing(
        &self,
        ns: &str,
        name: &str,
        except: Option<&str>,
    ) -> Vec<ObjectRef<Interconnect>> {
        let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let Some(uids) = index.by_secret.get(&secret_key(ns, name)) else { return Vec::new() };
        uids.iter()
            .filter_map(|uid| index.by_uid.get(uid))
            .filter(|i| except != Some(&*i.name))
            .map(|i| ObjectRef::new(&i.name).within(&i.namespace))
            .collect()
    }

    /// Forgets the Interconnect with `uid` (deleted).
    pub(crate) fn forget(&self, uid: &str) {
        self.index.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
    }
}

/// Children's names (`(kind, namespace, name)`) to read by name before they are written:
/// an object the labelled stores do not show holds them (a user's object, one the Go
/// operator wrote, or one of ours the store has not caught up with).
///
/// A child missing from its store is created first ([`crate::reconcile::apply`]): a
/// conditional create is itself the check that no object holds the name. When it is
/// refused, the name goes here, and later passes read it (metadata) before writing anything,
/// as before, until the store shows it or the read finds nothing.
#[derive(Debug, Default)]
pub(crate) struct Outside {
    names: Mutex<BTreeSet<ChildKey>>,
}

impl Outside {
    /// Remembers that an object of `kind` holds `ns/name` outside the stores.
    pub(crate) fn insert(&self, kind: &str, ns: &str, name: &str) {
        self.names.lock().unwrap_or_else(|e| e.into_inner()).insert(key_of(kind, ns, name));
    }

    /// Whether `ns/name` of `kind` is to be read by name.
    pub(crate) fn contains(&self, kind: &str, ns: &str, name: &str) -> bool {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        !names.is_empty() && names.contains(&key_of(kind, ns, name))
    }

    /// Forgets `ns/name` of `kind` (the store shows it, or nothing holds it any more).
    pub(crate) fn remove(&self, kind: &str, ns: &str, name: &str) {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if !names.is_empty() {
            names.remove(&key_of(kind, ns, name));
        }
    }
}
