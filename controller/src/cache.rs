//! What the controller watches and keeps in memory, and which events wake a reconcile.
//!
//! Every owned kind is watched **only through the operator's label**
//! (`app.kubernetes.io/managed-by=qdr-operator`), so unrelated Secrets, ConfigMaps, Services,
//! ServiceAccounts and Roles of the cluster neither reach the controller nor take memory:
//!
//! | kind | watch | kept |
//! |---|---|---|
//! | Interconnect | all | full object |
//! | Deployment, DaemonSet | labelled ours | without the pod spec (template hashes, replicas, status counts) |
//! | Secret | labelled ours | full object (generated credentials are renewed from it) |
//! | Secret | all, metadata only | name only (user-provided Secrets a spec names: existence, and a wake-up when one appears or is renewed) |
//! | Pod | label `interconnect_cr` | metadata and status (routers' readiness and scheduling) |
//! | ServiceAccount, Role, RoleBinding, Service, ConfigMap, Ingress | labelled ours, metadata only | metadata |
//!
//! No store keeps `managedFields`: the wake-up rules read them from each event first.
//!
//! Observe and apply read these stores instead of the API server: a pass over a converged
//! Interconnect makes no reads at all. A name missing from a labelled store is looked up with
//! one GET (metadata only), because an object without our label may stand there (a user's,
//! or one the Go operator wrote): the ownership rule of [`crate::reconcile::apply`] holds.
//!
//! **Wake-ups** ([`owned_wake`], [`pod_wake`], [`user_secret`]): the controller's own writes do not wake it. An
//! event on a child whose newest `managedFields` entry is the controller's, strictly newer
//! than every other manager's (one-second resolution: a tie wakes), is the echo of a write
//! whose response the reconcile already used, and is dropped; deletions always wake. An
//! Interconnect wakes its reconcile only when its `metadata.generation` changes (not on the
//! controller's own status writes); a router pod only when its phase, readiness, scheduling
//! or deletion changes. So no debounce is needed and a spec change is reconciled at once.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use qdr_api::Interconnect;

use crate::owner::{FIELD_MANAGER, MANAGED_BY};

/// The label every child carries, and the only one owned-kind watches select on.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The label selector of the owned-kind watches: `app.kubernetes.io/managed-by=qdr-operator`.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// How long a written object ([`Written`]) can stand in for the store's copy: the watch
/// event of a write arrives within milliseconds; this bounds the case where a relist skips
/// it.
pub const WRITTEN_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// `(namespace, name)`.
type NamespacedName = (String, String);

/// Read-your-writes for the kinds a pass decides from (the workloads and the generated
/// Secrets): the objects the controller wrote, as the API server returned them, until the
/// store has caught up. A reconcile that runs before the echo of the previous one's write
/// arrives would otherwise see the old object: an old rollout as complete (and promote a CA
/// too early), old credentials (and roll the pod template back).
///
/// For Interconnects the status the controller wrote is what is kept: a pass must compare
/// its new status (and decide its Events) against the last one written, not an older one.
#[derive(Debug)]
pub struct Written<K> {
    entries: Mutex<HashMap<NamespacedName, (std::time::Instant, Arc<K>)>>,
    /// Whether a stored copy of the same `metadata.generation` has caught up (workloads:
    /// what a pass reads of them, spec and rollout, is per generation), or only a greater
    /// one (Interconnects: the controller's status writes keep the generation).
    same_generation_caught_up: bool,
}

impl<K> Default for Written<K> {
    fn default() -> Self {
        Written { entries: Mutex::default(), same_generation_caught_up: true }
    }
}

impl<K> Written<K> {
    /// For objects whose writes by the controller keep their generation (status writes):
    /// only a stored copy with the same `resourceVersion`, or a greater generation, has
    /// caught up.
    pub fn status_writes() -> Self {
        Written { entries: Mutex::default(), same_generation_caught_up: false }
    }
}

impl<K: Resource> Written<K> {
    /// Records `obj`, just written (the API server's answer), without its `managedFields`.
    pub fn record(&self, mut obj: K) {
        obj.meta_mut().managed_fields = None;
        let key =
            (obj.meta().namespace.clone().unwrap_or_default(), obj.meta().name.clone().unwrap_or_default());
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (std::time::Instant::now(), Arc::new(obj)));
    }

    /// Forgets the written copy of `stored`'s name once the watch delivered that write or a
    /// later generation (see [`Written::pick`]).
    pub fn observed(&self, stored: &K) {
        let m = stored.meta();
        let key = (m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default());
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.get(&key).is_some_and(|(_, ours)| self.caught_up(m, ours.meta())) {
            entries.remove(&key);
        }
    }

    fn caught_up(&self, s: &ObjectMeta, o: &ObjectMeta) -> bool {
        s.resource_version == o.resource_version
            || s.generation
                .zip(o.generation)
                .is_some_and(|(sg, og)| sg > og || (sg == og && self.same_generation_caught_up))
    }

    /// Forgets `ns/name` (it was deleted).
    pub fn forget(&self, ns: &str, name: &str) {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).remove(&(ns.to_string(), name.to_string()));
    }

    /// The fresher of `stored` (the store's copy of `ns/name`) and the written one: the
    /// written one until the store shows the same `resourceVersion` or, for kinds with a
    /// `metadata.generation`, at least the same generation; at most [`WRITTEN_TTL`].
    pub fn pick(&self, ns: &str, name: &str, stored: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ns.to_string(), name.to_string());
        let Some((at, ours)) = entries.get(&key) else { return stored };
        let caught_up = stored.as_ref().is_some_and(|s| self.caught_up(s.meta(), ours.meta()));
        if caught_up || at.elapsed() > WRITTEN_TTL {
            entries.remove(&key);
            return stored;
        }
        Some(ours.clone())
    }
}

/// The stores of one leadership term (see the module docs). Built by
/// [`crate::runtime::run_controller`]; the stores are complete once [`Cache::is_ready`].
#[derive(Clone)]
pub struct Cache {
    /// Deployments labelled ours.
    pub deployments: Store<Deployment>,
    /// DaemonSets labelled ours.
    pub daemon_sets: Store<DaemonSet>,
    /// Router pods (label `interconnect_cr`), with `spec` dropped.
    pub pods: Store<Pod>,
    /// Secrets labelled ours (generated ones).
    pub secrets: Store<Secret>,
    /// The names of every Secret of the watched namespaces.
    pub secret_names: Arc<SecretNames>,
    /// ServiceAccounts labelled ours.
    pub service_accounts: Store<PartialObjectMeta<ServiceAccount>>,
    /// Roles labelled ours.
    pub roles: Store<PartialObjectMeta<Role>>,
    /// RoleBindings labelled ours.
    pub role_bindings: Store<PartialObjectMeta<RoleBinding>>,
    /// Services labelled ours.
    pub services: Store<PartialObjectMeta<Service>>,
    /// ConfigMaps labelled ours.
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    /// Ingresses labelled ours.
    pub ingresses: Store<PartialObjectMeta<Ingress>>,
    /// Deployments written in this term, until the store catches up.
    pub written_deployments: Arc<Written<Deployment>>,
    /// DaemonSets written in this term, until the store catches up.
    pub written_daemon_sets: Arc<Written<DaemonSet>>,
    /// Secrets created or replaced in this term, until the store catches up.
    pub written_secrets: Arc<Written<Secret>>,
    /// Interconnects whose status was written in this term, until the store catches up.
    pub written_interconnects: Arc<Written<Interconnect>>,
    /// Interconnects whose children changed under them since their last full apply.
    pub drift: Arc<Drift>,
    /// The last full apply of each Interconnect in this term.
    pub applied: Arc<AppliedMemo>,
    /// Set once every store has listed ([`Cache::is_ready`]).
    pub listed: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").finish_non_exhaustive()
    }
}

/// What the stores know of a Secret.
#[derive(Debug, Clone)]
pub enum SecretLookup {
    /// Labelled ours: the whole object.
    Ours(Arc<Secret>),
    /// It exists without our label (user-provided): read it to use it.
    Other,
    /// No Secret of that name exists.
    Missing,
}

fn key<K: Resource<DynamicType = ()>>(ns: &str, name: &str) -> ObjectRef<K> {
    ObjectRef::new(name).within(ns)
}

fn matches(meta: &ObjectMeta, ns: &str, selector: &[(&str, &str)]) -> bool {
    meta.namespace.as_deref() == Some(ns)
        && selector.iter().all(|(k, v)| meta.labels.as_ref().and_then(|l| l.get(*k)).is_some_and(|x| x == v))
}

impl Cache {
    /// Whether every store holds its first complete list (a reconcile before that could
    /// take a missing entry for a missing object). Not awaited by reconciles: the stores
    /// fill only while the controller polls its watches, which it stops doing while every
    /// reconcile slot is taken.
    pub fn is_ready(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.listed.load(Ordering::Relaxed) {
            return true; // a store, once listed, stays complete (relists swap in whole)
        }
        let all = async {
            let _ = futures::join!(
                self.deployments.wait_until_ready(),
                self.daemon_sets.wait_until_ready(),
                self.pods.wait_until_ready(),
                self.secrets.wait_until_ready(),
                self.service_accounts.wait_until_ready(),
                self.roles.wait_until_ready(),
                self.role_bindings.wait_until_ready(),
                self.services.wait_until_ready(),
                self.config_maps.wait_until_ready(),
                self.ingresses.wait_until_ready(),
            );
        };
        let ready = self.secret_names.is_ready() && futures::FutureExt::now_or_never(all).is_some();
        if ready {
            self.listed.store(true, Ordering::Relaxed);
        }
        ready
    }

    /// Secret `ns/name` as far as the stores know it.
    pub fn secret(&self, ns: &str, name: &str) -> SecretLookup {
        if let Some(s) = self.written_secrets.pick(ns, name, self.secrets.get(&key(ns, name))) {
            return SecretLookup::Ours(s);
        }
        if self.secret_names.contains(ns, name) { SecretLookup::Other } else { SecretLookup::Missing }
    }

    /// The metadata of the labelled child `ns/name` of kind `kind` (`ServiceAccount`,
    /// `Role`, `RoleBinding`, `Service`, `ConfigMap`, `Ingress`, `Deployment`,
    /// `DaemonSet`, `Secret`), or `None` when it is not in the store (it may still exist
    /// without our label) or the kind is not cached (`Route`).
    pub fn meta(&self, kind: &str, ns: &str, name: &str) -> Option<ObjectMeta> {
        match kind {
            "ServiceAccount" => self.service_accounts.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "Role" => self.roles.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "RoleBinding" => self.role_bindings.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "Service" => self.services.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "ConfigMap" => self.config_maps.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "Ingress" => self.ingresses.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "Deployment" => self.deployments.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "DaemonSet" => self.daemon_sets.get(&key(ns, name)).map(|o| o.metadata.clone()),
            "Secret" => self.secrets.get(&key(ns, name)).map(|o| o.metadata.clone()),
            _ => None,
        }
    }

    /// The metadata of every cached object of kind `kind` in `ns` carrying all the
    /// `selector` labels, or `None` when the kind is not cached (`Route`: list it).
    pub fn labelled(&self, kind: &str, ns: &str, selector: &[(&str, &str)]) -> Option<Vec<ObjectMeta>> {
        fn pick<K: Resource + Clone>(store: &Store<K>, ns: &str, selector: &[(&str, &str)]) -> Vec<ObjectMeta>
        where
            K::DynamicType: Eq + Hash + Clone,
        {
            store.state_filter(|o| matches(o.meta(), ns, selector)).iter().map(|o| o.meta().clone()).collect()
        }
        Some(match kind {
            "ServiceAccount" => pick(&self.service_accounts, ns, selector),
            "Role" => pick(&self.roles, ns, selector),
            "RoleBinding" => pick(&self.role_bindings, ns, selector),
            "Service" => pick(&self.services, ns, selector),
            "ConfigMap" => pick(&self.config_maps, ns, selector),
            "Ingress" => pick(&self.ingresses, ns, selector),
            "Deployment" => pick(&self.deployments, ns, selector),
            "DaemonSet" => pick(&self.daemon_sets, ns, selector),
            "Secret" => pick(&self.secrets, ns, selector),
            _ => return None,
        })
    }

    /// Deployment `ns/name` labelled ours: the store's copy, or the one just written.
    pub fn deployment(&self, ns: &str, name: &str) -> Option<Arc<Deployment>> {
        self.written_deployments.pick(ns, name, self.deployments.get(&key(ns, name)))
    }

    /// DaemonSet `ns/name` labelled ours: the store's copy, or the one just written.
    pub fn daemon_set(&self, ns: &str, name: &str) -> Option<Arc<DaemonSet>> {
        self.written_daemon_sets.pick(ns, name, self.daemon_sets.get(&key(ns, name)))
    }

    /// The router pods in `ns` carrying every `selector` label.
    pub fn pods(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<Arc<Pod>> {
        self.pods.state_filter(|p| matches(&p.metadata, ns, selector))
    }
}

/// Whether the newest write recorded in `meta.managedFields` is the controller's
/// ([`FIELD_MANAGER`]), strictly newer than every other manager's entry. Entries without a
/// time count as newest (never an echo).
pub fn last_written_by_us(meta: &ObjectMeta) -> bool {
    let Some(entries) = meta.managed_fields.as_ref() else { return false };
    let ours =
        entries.iter().filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER)).map(|e| e.time.as_ref());
    let Some(newest_ours) = ours.max().flatten() else { return false };
    entries
        .iter()
        .filter(|e| e.manager.as_deref() != Some(FIELD_MANAGER))
        .all(|e| e.time.as_ref().is_some_and(|t| t.0 < newest_ours.0))
}

/// Whether the writes newer than the controller's last one (by `managedFields` time, a tie
/// counting as newer) all went to the `status` subresource: a workload controller reporting,
/// not someone changing what the controller applied.
pub fn status_only(meta: &ObjectMeta) -> bool {
    let Some(entries) = meta.managed_fields.as_ref() else { return false };
    let ours = entries
        .iter()
        .filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER))
        .filter_map(|e| e.time.as_ref());
    let Some(newest_ours) = ours.max() else { return false };
    entries
        .iter()
        .filter(|e| e.manager.as_deref() != Some(FIELD_MANAGER))
        .filter(|e| e.time.as_ref().is_none_or(|t| t.0 >= newest_ours.0))
        .all(|e| e.subresource.as_deref() == Some("status"))
}

/// Interconnects (`namespace/name`) whose children someone else changed or deleted since
/// their last full apply: their next pass applies everything again. See
/// [`crate::reconcile::apply::fingerprint`].
#[derive(Debug, Default)]
pub struct Drift {
    owners: Mutex<BTreeSet<String>>,
}

impl Drift {
    /// Marks the Interconnect controlling `meta` (if any).
    pub fn mark(&self, meta: &ObjectMeta) {
        let ns = meta.namespace.clone().unwrap_or_default();
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        for r in meta.owner_references.iter().flatten() {
            if r.controller == Some(true) && r.kind == "Interconnect" {
                owners.insert(format!("{ns}/{}", r.name));
            }
        }
    }

    /// Whether `key` was marked, clearing the mark.
    pub fn take(&self, key: &str) -> bool {
        self.owners.lock().unwrap_or_else(|e| e.into_inner()).remove(key)
    }
}

/// The wake-up rule of an owned kind: an applied object wakes its owner unless it is the
/// echo of the controller's own write ([`last_written_by_us`]); a deletion always wakes.
/// Deletions and changes that are not [`status_only`] are marked in `drift`; `written` (the
/// kinds with read-your-writes) forgets what the watch has caught up with. The start of a
/// (re)list wakes nothing; its objects are judged like any other.
pub fn owned_wake<K>(
    drift: Arc<Drift>,
    written: Option<Arc<Written<K>>>,
) -> impl FnMut(&watcher::Event<K>) -> bool + Send + 'static
where
    K: Resource + Send + Sync + 'static,
{
    move |event| match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
            if let Some(w) = &written {
                w.observed(o);
            }
            if last_written_by_us(o.meta()) {
                return false;
            }
            if !status_only(o.meta()) {
                drift.mark(o.meta());
            }
            true
        }
        watcher::Event::Delete(o) => {
            if let Some(w) = &written {
                let m = o.meta();
                w.forget(m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default());
            }
            drift.mark(o.meta());
            true
        }
        watcher::Event::Init | watcher::Event::InitDone => false,
    }
}

/// The wake-up rule of router pods: a change of [`pod_state`] (phase, readiness,
/// scheduling, deletion), and every deletion.
pub fn pod_wake() -> impl FnMut(&watcher::Event<Pod>) -> bool + Send + 'static {
    let mut seen: HashMap<String, u64> = HashMap::new();
    move |event| match event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let state = pod_state(p).unwrap_or_default();
            seen.insert(uid, state) != Some(state)
        }
        watcher::Event::Delete(p) => {
            seen.remove(p.metadata.uid.as_deref().unwrap_or_default());
            true
        }
        watcher::Event::Init | watcher::Event::InitDone => false,
    }
}

/// The wake-up rule of the all-Secrets watch: a Secret without our label (user-provided)
/// appearing, changing or going. The initial list wakes nothing (every Interconnect is
/// reconciled at start anyway).
pub fn user_secret(s: &PartialObjectMeta<Secret>) -> bool {
    s.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).is_none()
}

/// Drops `managedFields` before an object is stored (wake-ups are decided before).
pub fn slim<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// [`slim`], and the pod template's `spec` of a workload: a pass reads only its replicas,
/// the template's annotations (config and credentials hashes), generation and status.
pub fn slim_workload<K: Resource + PodTemplated>(o: &mut K) {
    slim(o);
    o.drop_pod_spec();
}

/// Workloads whose stored pod template can lose its `spec`.
pub trait PodTemplated {
    /// Removes `spec.template.spec`.
    fn drop_pod_spec(&mut self);
}

impl PodTemplated for Deployment {
    fn drop_pod_spec(&mut self) {
        if let Some(s) = self.spec.as_mut() {
            s.template.spec = None;
        }
    }
}

impl PodTemplated for DaemonSet {
    fn drop_pod_spec(&mut self) {
        if let Some(s) = self.spec.as_mut() {
            s.template.spec = None;
        }
    }
}

/// The last full apply of each Interconnect (`namespace/name`): its uid, generation, the
/// [`crate::reconcile::apply::fingerprint`] of what was applied, and when.
#[derive(Debug, Default)]
pub struct AppliedMemo {
    entries: Mutex<HashMap<String, (String, i64, u64, std::time::Instant)>>,
}

impl AppliedMemo {
    /// Records a full apply.
    pub fn record(&self, key: &str, uid: &str, generation: i64, fingerprint: u64) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.into(), (uid.into(), generation, fingerprint, std::time::Instant::now()));
    }

    /// Whether the last full apply of `key` was this uid, generation and fingerprint, less
    /// than `max_age` ago.
    pub fn same(
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

/// What of a router pod the status reports: whether it is being deleted, its phase, and its
/// `Ready` and `PodScheduled` conditions (status and message). A pod event that changes none
/// of these (an IP assigned, a probe time) wakes nothing. For
/// [`kube::runtime::WatchStreamExt::predicate_filter`].
pub fn pod_state(p: &Pod) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    p.metadata.deletion_timestamp.is_some().hash(&mut h);
    if let Some(st) = &p.status {
        st.phase.hash(&mut h);
        for c in st.conditions.iter().flatten() {
            if c.type_ == "Ready" || c.type_ == "PodScheduled" {
                (&c.type_, &c.status, &c.message).hash(&mut h);
            }
        }
    }
    Some(h.finish())
}

/// Drops what a cached router pod does not need (`spec`, `managedFields`, annotations).
pub fn slim_pod(p: &mut Pod) {
    p.spec = None;
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
}

/// The names (`namespace/name`) of every Secret in the watched namespaces, from a
/// metadata-only watch: whether a user-provided Secret exists, at a few dozen bytes a
/// Secret (no metadata is kept).
#[derive(Debug, Default)]
pub struct SecretNames {
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
    pub fn apply(&self, event: &watcher::Event<PartialObjectMeta<Secret>>) {
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
    pub fn contains(&self, ns: &str, name: &str) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).names.contains(&format!("{ns}/{name}"))
    }

    /// Whether the first list is complete.
    pub fn is_ready(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).ready
    }
}

/// The Secret names each Interconnect's effective spec references, computed once per
/// generation (defaulting every Interconnect for every Secret event would cost
/// Interconnects × Secrets defaulting runs at start).
#[derive(Debug, Default)]
pub struct SecretReferences {
    by_uid: Mutex<HashMap<String, (i64, BTreeSet<String>)>>,
}

impl SecretReferences {
    /// The Interconnects in `store` of namespace `ns` whose effective spec names Secret
    /// `name`.
    pub fn referencing(
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
