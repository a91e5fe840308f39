//! Compact stores: what the controller keeps of the kinds it holds one or two of per
//! Interconnect and only looks up, instead of kube-runtime's reflector copies.
//!
//! kube-runtime's reflector keeps each object as an `Arc<K>` (408 bytes inline for a
//! `PartialObjectMeta`, 456 for a Secret), its labels in a `BTreeMap` (one 544-byte node
//! however few they are) and a key of four strings: about 1.6 KB per metadata object once
//! the strings are counted, 20 MB for the six metadata kinds at 2,000 Interconnects. The
//! entries here keep the same answers in boxed slices:
//! * [`MetaStore`] (ServiceAccounts, Roles, RoleBindings, Services, ConfigMaps, Ingresses,
//!   PodDisruptionBudgets):
//!   a [`Slim`], about 300 bytes;
//! * [`SecretStore`] (Secrets labelled ours): a [`StoredSecret`], the [`Slim`] metadata with
//!   every owner reference, the [`crate::credentials::STEP_AT`] annotation, the type and
//!   the data;
//! * [`DeploymentStore`], [`DaemonSetStore`]: a [`StoredWorkload`], the [`Slim`] metadata,
//!   the uid, replicas, the pod template's annotations and the status counts;
//! * [`ReplicaSetStore`] (router ReplicaSets, metadata only): a [`StoredOwned`], the
//!   [`Slim`] metadata and the uid;
//! * [`PodStore`] (router pods): a [`StoredPod`], the [`Slim`] metadata and what observing
//!   the routers reads of the spec and status.
//!
//! Each keeps its own index of the objects by Interconnect ([`super::index`]), and swaps a
//! (re)list in whole when it is done, as kube-runtime's stores do.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetStatus, Deployment, DeploymentSpec, DeploymentStatus, ReplicaSet,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use super::index::ByOwner;
use super::slim::SELECTED_LABELS;
use crate::labels;

/// `(namespace, name)` of a stored object.
pub(crate) type Key<'a> = (&'a str, &'a str);

/// What [`MetaStore`] keeps of one object: what [`super::slim::slim_meta`] keeps, in
/// boxed slices and with only the controller's owner reference (the one every lookup
/// reads: who controls it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slim {
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    /// The labels of [`SELECTED_LABELS`] it carries, shared with every entry that carries
    /// the same ([`LABELS`]).
    labels: Arc<[(&'static str, Text)]>,
    /// Its controller owner reference, shared with every entry that has the same
    /// ([`CONTROLLERS`]).
    controller: Option<Arc<Controller>>,
    deletion_timestamp: Option<Time>,
}

impl Slim {
    fn of(meta: &ObjectMeta) -> Slim {
        let labels: Vec<(&'static str, Text)> = meta
            .labels
            .iter()
            .flatten()
            .filter_map(|(k, v)| {
                let kept = SELECTED_LABELS.iter().find(|s| **s == k.as_str())?;
                Some((*kept, text(v)))
            })
            .collect();
        let labels = intern(&LABELS, &labels[..], |l| l.into());
        let controller =
            meta.owner_references.iter().flatten().find(|r| r.controller == Some(true)).map(|r| {
                let c: Controller =
                    (text(&r.api_version), text(&r.kind), r.name.as_str().into(), r.uid.as_str().into());
                intern(&CONTROLLERS, &c, |c| Arc::new(c.clone()))
            });
        Slim {
            resource_version: meta.resource_version.as_deref().map(Into::into),
            generation: meta.generation,
            labels,
            controller,
            deletion_timestamp: meta.deletion_timestamp.clone(),
        }
    }

    /// The value of its label `key`, when it carries it (one of [`SELECTED_LABELS`]).
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| &**v)
    }

    /// Whether it carries every `selector` label.
    fn has(&self, selector: &[(&str, &str)]) -> bool {
        selector.iter().all(|(k, v)| self.labels.iter().any(|(lk, lv)| lk == k && &**lv == *v))
    }

    /// The metadata this entry stands for (`namespace`, `name` from its key).
    fn meta(&self, (namespace, name): Key<'_>) -> ObjectMeta {
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
type Controller = (Text, Text, Box<str>, Box<str>);

/// A string a store keeps: one of [`KNOWN_TEXT`] without an allocation of its own, any
/// other boxed.
type Text = std::borrow::Cow<'static, str>;

/// The values most stored objects share: their owners' API versions and kinds, and the
/// values of the labels the operator writes on every child.
const KNOWN_TEXT: [&str; 12] = [
    "interconnectedcloud.github.io/v1alpha1",
    "Interconnect",
    "apps/v1",
    "ReplicaSet",
    "DaemonSet",
    "Deployment",
    labels::MANAGED_BY,
    "true",
    "True",
    "False",
    "kubernetes.io/tls",
    "Opaque",
];

/// `s` as a [`Text`], borrowed when it is one of `known`.
fn known(s: &str, known: &[&'static str]) -> Text {
    known.iter().find(|k| **k == s).map_or_else(|| Text::Owned(s.into()), |k| Text::Borrowed(k))
}

/// `s` as a [`Text`] ([`KNOWN_TEXT`]).
fn text(s: &str) -> Text {
    known(s, &KNOWN_TEXT)
}

fn key_of(meta: &ObjectMeta) -> Key<'_> {
    (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

/// One stored object of kind `K`: built from the watched object, it answers lookups.
pub(crate) trait Entry<K>: Sized + Send + Sync + 'static {
    /// What is kept of `obj`.
    fn of(obj: &K) -> Self;
    /// Its metadata as kept.
    fn slim(&self) -> &Slim;
    /// Its `resourceVersion`.
    fn resource_version(&self) -> Option<&str> {
        self.slim().resource_version.as_deref()
    }
    /// The metadata it stands for (`key`: its namespace and name).
    fn meta(&self, key: Key<'_>) -> ObjectMeta;
    /// The object it stands for.
    fn object(&self, key: Key<'_>) -> K;
}

impl<X> Entry<PartialObjectMeta<X>> for Slim {
    fn of(obj: &PartialObjectMeta<X>) -> Self {
        Slim::of(&obj.metadata)
    }

    fn slim(&self) -> &Slim {
        self
    }

    fn meta(&self, key: Key<'_>) -> ObjectMeta {
        Slim::meta(self, key)
    }

    fn object(&self, key: Key<'_>) -> PartialObjectMeta<X> {
        PartialObjectMeta { types: None, metadata: Slim::meta(self, key), _phantom: PhantomData }
    }
}

/// The objects of a store, or of a (re)list under way, by namespace: each namespace's name
/// is kept once, and a lookup by namespace and name borrows both (a key of two boxed
/// strings per object cost an allocation per lookup and a copy of the namespace per object).
#[derive(Debug)]
struct Objects<E> {
    namespaces: HashMap<Box<str>, Namespace<E>>,
}

/// The objects of one namespace, and their index by Interconnect.
#[derive(Debug)]
struct Namespace<E> {
    by_name: HashMap<Box<str>, E>,
    /// The names of each Interconnect's objects ([`Compact::labelled`]).
    by_owner: ByOwner,
}

impl<E> Default for Objects<E> {
    fn default() -> Self {
        Objects { namespaces: HashMap::new() }
    }
}

impl<E> Objects<E> {
    fn get(&self, (ns, name): Key<'_>) -> Option<&E> {
        self.namespaces.get(ns)?.by_name.get(name)
    }

    fn insert<K>(&mut self, (ns, name): Key<'_>, e: E)
    where
        E: Entry<K>,
    {
        let space = match self.namespaces.get_mut(ns) {
            Some(space) => space,
            None => self
                .namespaces
                .entry(ns.into())
                .or_insert_with(|| Namespace { by_name: HashMap::new(), by_owner: ByOwner::default() }),
        };
        let old = space.by_name.get(name).map(|o| o.slim().label(labels::INTERCONNECT));
        let new = e.slim().label(labels::INTERCONNECT);
        if old != Some(new) {
            space.by_owner.remove(name, old.flatten());
            space.by_owner.insert(name, new);
        }
        match space.by_name.get_mut(name) {
            Some(stored) => *stored = e,
            None => {
                space.by_name.insert(name.into(), e);
            }
        }
    }

    fn remove<K>(&mut self, (ns, name): Key<'_>)
    where
        E: Entry<K>,
    {
        let Some(space) = self.namespaces.get_mut(ns) else { return };
        if let Some(old) = space.by_name.remove(name) {
            space.by_owner.remove(name, old.slim().label(labels::INTERCONNECT));
        }
        if space.by_name.is_empty() {
            self.namespaces.remove(ns);
        }
    }

    /// Every stored object with its key.
    fn iter(&self) -> impl Iterator<Item = (Key<'_>, &E)> {
        (self.namespaces.iter())
            .flat_map(|(ns, space)| space.by_name.iter().map(move |(name, e)| ((&**ns, &**name), e)))
    }

    /// Gives back the room a list's growth left unused.
    fn shrink_to_fit(&mut self) {
        self.namespaces.shrink_to_fit();
        for space in self.namespaces.values_mut() {
            space.by_name.shrink_to_fit();
            space.by_owner.shrink_to_fit();
        }
    }
}

#[derive(Debug)]
struct State<E> {
    objects: Objects<E>,
    /// A (re)list under way: what it has listed so far, swapped in whole when it is done
    /// (as kube-runtime's stores do), so lookups never see half a list.
    listing: Option<Objects<E>>,
}

impl<E> Default for State<E> {
    fn default() -> Self {
        State { objects: Objects::default(), listing: None }
    }
}

/// A compact store of kind `K` (see the module docs), each object kept as an `E`, filled by
/// [`Compact::apply_watcher_event`] from a watch; cheap to clone (shared).
#[derive(Debug)]
pub(crate) struct Compact<K, E> {
    state: Arc<RwLock<State<E>>>,
    listed: Arc<AtomicBool>,
    kind: PhantomData<fn() -> K>,
}

/// The metadata store of kind `X`.
pub(crate) type MetaStore<X> = Compact<PartialObjectMeta<X>, Slim>;

/// The store of the Secrets labelled ours.
pub(crate) type SecretStore = Compact<Secret, StoredSecret>;

impl<K, E> Clone for Compact<K, E> {
    fn clone(&self) -> Self {
        Compact { state: self.state.clone(), listed: self.listed.clone(), kind: PhantomData }
    }
}

impl<K, E> Default for Compact<K, E> {
    fn default() -> Self {
        Compact { state: Arc::default(), listed: Arc::default(), kind: PhantomData }
    }
}

impl<K: Resource<DynamicType = ()>, E: Entry<K>> Compact<K, E> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State<E>> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event: an object applied or deleted, or a step of a (re)list.
    pub(crate) fn apply_watcher_event(&self, event: &watcher::Event<K>) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) => st.objects.insert(key_of(o.meta()), E::of(o)),
            watcher::Event::Delete(o) => st.objects.remove(key_of(o.meta())),
            watcher::Event::Init => st.listing = Some(Objects::default()),
            watcher::Event::InitApply(o) => {
                st.listing.get_or_insert_with(Objects::default).insert(key_of(o.meta()), E::of(o));
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
        self.read().objects.get((ns, name)).map(|e| e.meta((ns, name)))
    }

    /// The object `ns/name`, as far as the store keeps it.
    pub(crate) fn object(&self, ns: &str, name: &str) -> Option<K> {
        self.read().objects.get((ns, name)).map(|e| e.object((ns, name)))
    }

    /// The `resourceVersion` of `ns/name` (outer `None`: not stored).
    pub(crate) fn version(&self, ns: &str, name: &str) -> Option<Option<String>> {
        self.read().objects.get((ns, name)).map(|e| e.resource_version().map(Into::into))
    }

    /// The metadata of every stored object in namespace `ns` carrying every `selector`
    /// label (a label the store does not keep never matches). Only the matches are turned
    /// into metadata.
    pub(crate) fn labelled(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<ObjectMeta> {
        self.matching(ns, selector, |k, e| e.meta(k))
    }

    /// Every stored object in namespace `ns` carrying every `selector` label, as
    /// [`Compact::labelled`] finds them, each made by `make` from its key and entry.
    fn matching<T>(&self, ns: &str, selector: &[(&str, &str)], make: impl Fn(Key<'_>, &E) -> T) -> Vec<T> {
        let st = self.read();
        let Some(space) = st.objects.namespaces.get(ns) else { return Vec::new() };
        if let Some(owner) = super::index::owner_selected(selector) {
            return (space.by_owner.names(owner).iter())
                .filter_map(|name| {
                    let e = space.by_name.get(&**name).filter(|e| e.slim().has(selector))?;
                    Some(make((ns, name), e))
                })
                .collect();
        }
        (space.by_name.iter())
            .filter(|(_, e)| e.slim().has(selector))
            .map(|(name, e)| make((ns, name), e))
            .collect()
    }

    /// Every stored object in namespace `ns` carrying every `selector` label.
    pub(crate) fn objects(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<K> {
        self.matching(ns, selector, |k, e| e.object(k))
    }

    /// Every stored object (for what a relist finds gone).
    pub(crate) fn all(&self) -> Vec<K> {
        let st = self.read();
        st.objects.iter().map(|(k, e)| e.object(k)).collect()
    }

    /// How many objects are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.read().objects.iter().count()
    }
}

/// What [`SecretStore`] keeps of a Secret: its metadata as [`Slim`] keeps it, plus every
/// owner reference (a Secret a user's object also owns keeps that reference when it is
/// rewritten), the [`crate::credentials::STEP_AT`] and [`crate::credentials::seal::SEAL`]
/// annotations (the only ones a pass reads), when it was last written (as one
/// `managedFields` entry's time), its type and data. Other labels, annotations and finalizers are not kept: a rewrite
/// reads the Secret first and keeps them ([`crate::reconcile::apply`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredSecret {
    meta: Slim,
    owners: Owners,
    step_at: Option<Box<str>>,
    /// The [`crate::credentials::seal::SEAL`] annotation.
    seal: Option<Box<str>>,
    /// When it was last written ([`crate::credentials::seal::last_written`]), given back as
    /// the time of its one `managedFields` entry.
    written: Option<Time>,
    type_: Option<Text>,
    /// `None`: the Secret has no `data`.
    data: Option<SharedData>,
}

/// The owner references of a stored Secret.
#[derive(Debug, Clone, PartialEq)]
enum Owners {
    /// None.
    None,
    /// Only its controller, which its [`Slim`] keeps, with this `blockOwnerDeletion`: a
    /// generated Secret's (an Interconnect's reference), kept without a second copy.
    Controller(Option<bool>),
    /// Any others, each whole.
    All(Box<[OwnerReference]>),
}

impl Owners {
    fn of(refs: Option<&[OwnerReference]>) -> Owners {
        match refs.unwrap_or_default() {
            [] => Owners::None,
            [only] if only.controller == Some(true) => Owners::Controller(only.block_owner_deletion),
            all => Owners::All(all.into()),
        }
    }
}

/// A key and its value (an annotation).
type Pair = (Box<str>, Box<str>);

/// One key of a Secret's data and its value, shared with every equal value
/// ([`shared_value`]).
type Datum = (DataKey, Arc<[u8]>);

/// A key of a generated Secret's data: the usual ones ([`KNOWN_KEYS`]) without an
/// allocation of their own.
type DataKey = Text;

/// The keys most generated Secrets have.
const KNOWN_KEYS: [&str; 6] = ["tls.crt", "tls.key", "ca.crt", "next.crt", "next.key", "root.crt"];

fn data_key(k: &str) -> DataKey {
    known(k, &KNOWN_KEYS)
}

/// Equal values the stores hold, each once: a set of `Arc<T>` a store entry takes its value
/// from ([`Shared::intern`]). Values no entry holds any more are dropped once the set has
/// doubled since the last sweep (1,024 at least), so a set is at most about twice what the
/// entries hold. One set per kind of value, process-wide ([`SECRET_VALUES`], [`LABELS`],
/// [`CONTROLLERS`], [`NODES`], [`CONFIG_MAP_VOLUMES`], [`READINESS_GATES`]): values are
/// only shared, never changed, so leaders of two terms in one process may share them.
#[derive(Debug)]
struct Shared<T: ?Sized> {
    set: std::collections::HashSet<Arc<T>>,
    /// Sweep when the set grows past this.
    sweep_at: usize,
}

impl<T: ?Sized> Default for Shared<T> {
    fn default() -> Self {
        Shared { set: Default::default(), sweep_at: 0 }
    }
}

impl<T: ?Sized + std::hash::Hash + Eq> Shared<T> {
    /// `v`, shared with an equal value held already; else made by `make` and kept.
    fn intern(&mut self, v: &T, make: impl FnOnce(&T) -> Arc<T>) -> Arc<T> {
        if let Some(found) = self.set.get(v) {
            return found.clone();
        }
        if self.set.len() >= self.sweep_at {
            self.set.retain(|v| Arc::strong_count(v) > 1);
            self.sweep_at = (2 * self.set.len()).max(1024);
        }
        let value = make(v);
        self.set.insert(value.clone());
        value
    }
}

/// A process-wide [`Shared`] set.
type SharedSet<T> = std::sync::LazyLock<std::sync::Mutex<Shared<T>>>;

/// `v` from `set` ([`Shared::intern`]).
fn intern<T: ?Sized + std::hash::Hash + Eq>(
    set: &SharedSet<T>,
    v: &T,
    make: impl FnOnce(&T) -> Arc<T>,
) -> Arc<T> {
    set.lock().unwrap_or_else(|e| e.into_inner()).intern(v, make)
}

/// The values of the Secrets' data: a CA's certificate is its own Secret's `tls.crt` and
/// `ca.crt` and the `ca.crt` of every certificate it signs (6 of the 19 values of an
/// Interconnect's generated Secrets with management on, 7.4 MB of the Secret store's 19 MB
/// of data at 2,000 Interconnects in a heaptrack profile).
static SECRET_VALUES: SharedSet<[u8]> = std::sync::LazyLock::new(Default::default);

/// The selected labels of stored objects ([`Slim`]): every child of an Interconnect carries
/// the same ones, and the pods of one workload too.
static LABELS: SharedSet<[(&'static str, Text)]> = std::sync::LazyLock::new(Default::default);

/// The controller owner references of stored objects ([`Slim`]): every child of an
/// Interconnect names it, the pods of one ReplicaSet name that.
static CONTROLLERS: SharedSet<Controller> = std::sync::LazyLock::new(Default::default);

/// `v`, shared with an equal value a stored Secret holds already ([`SECRET_VALUES`]), in
/// its [`packed`] form.
fn shared_value(v: &[u8]) -> Arc<[u8]> {
    let packed = packed(v);
    intern(&SECRET_VALUES, &packed, |v| v.into())
}

/// A value of [`packed`]'s: kept as it came.
const RAW: u8 = 0;
/// A value of [`packed`]'s: PEM blocks kept as their labels and DER.
const PEM_BLOCKS: u8 = 1;

/// How a stored Secret keeps value `v`: PEM text (certificates, keys, CA bundles, as rcgen
/// and most tools write it: 64 columns, `\n` line ends, no headers) as each block's label and
/// DER, a third smaller (a P-256 certificate 480 bytes rather than 700, its key 138 rather
/// than 241: about 4 MB of the Secret store's 11.7 MB of values at 2,000 Interconnects); any other value as
/// it came. The first byte says which ([`RAW`], [`PEM_BLOCKS`]). Only PEM that
/// [`unpacked`] gives back byte for byte is packed, so a value reads back exactly as the API
/// server holds it.
fn packed(v: &[u8]) -> Vec<u8> {
    blocks_packed(v).filter(|p| unpacked(p) == v).unwrap_or_else(|| [&[RAW][..], v].concat())
}

/// `v`'s PEM blocks as [`packed`] keeps them, when `v` is PEM without headers whose labels
/// and DER fit the lengths kept (`None` otherwise); not yet checked to read back as `v`.
fn blocks_packed(v: &[u8]) -> Option<Vec<u8>> {
    let blocks = pem::parse_many(v).ok().filter(|b| !b.is_empty())?;
    let mut out = vec![PEM_BLOCKS];
    for b in &blocks {
        if b.headers().iter().next().is_some() {
            return None;
        }
        let (tag_len, der_len) = (u8::try_from(b.tag().len()).ok()?, u32::try_from(b.contents().len()).ok()?);
        out.push(tag_len);
        out.extend_from_slice(b.tag().as_bytes());
        out.extend_from_slice(&der_len.to_le_bytes());
        out.extend_from_slice(b.contents());
    }
    Some(out)
}

/// The value [`packed`] kept as `p`.
fn unpacked(p: &[u8]) -> Vec<u8> {
    match p.split_first() {
        Some((&PEM_BLOCKS, mut rest)) => {
            let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
            let mut text = String::new();
            // Each block: its label's length (1 byte), the label, the DER's length (4 bytes,
            // little-endian), the DER. `packed` wrote it and read it back, so it is whole.
            while let Some((&tag_len, after)) = rest.split_first() {
                let Some((tag, after)) = after.split_at_checked(usize::from(tag_len)) else { break };
                let Some((len, after)) = after.split_first_chunk::<4>() else { break };
                let len = usize::try_from(u32::from_le_bytes(*len)).unwrap_or(usize::MAX);
                let Some((der, after)) = after.split_at_checked(len) else { break };
                text.push_str(&pem::encode_config(&pem::Pem::new(String::from_utf8_lossy(tag), der), config));
                rest = after;
            }
            text.into_bytes()
        }
        Some((_, raw)) => raw.to_vec(),
        None => Vec::new(),
    }
}

/// A Secret's data whose values are shared with the equal values the Secret store holds
/// ([`SECRET_VALUES`]): how a [`StoredSecret`] keeps its data, and what a long-lived holder
/// keeps of a stored Secret's data without a copy of it (the reader's plan of a mesh at rest
/// keeps its management CA's, [`crate::reconcile::read`]). About 100 bytes for a CA's three values, where a
/// [`crate::credentials::Data`] copy of them took about 2.1 KB (heaptrack: 4.2 MB at 2,000
/// Interconnects).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SharedData(Box<[Datum]>);

impl SharedData {
    /// `d`, its values shared.
    pub(crate) fn of(d: &crate::credentials::Data) -> Self {
        SharedData(d.iter().map(|(k, v)| (data_key(k), shared_value(&v.0))).collect())
    }

    /// A copy of the data, to use and drop.
    pub(crate) fn data(&self) -> crate::credentials::Data {
        self.0.iter().map(|(k, v)| (k.to_string(), ByteString(unpacked(v)))).collect()
    }
}

impl Entry<Secret> for StoredSecret {
    fn of(s: &Secret) -> Self {
        let annotations = s.metadata.annotations.as_ref();
        StoredSecret {
            meta: Slim::of(&s.metadata),
            owners: Owners::of(s.metadata.owner_references.as_deref()),
            step_at: annotations.and_then(|a| a.get(crate::credentials::STEP_AT)).map(|v| v.as_str().into()),
            seal: annotations.and_then(|a| a.get(crate::credentials::seal::SEAL)).map(|v| v.as_str().into()),
            written: crate::credentials::seal::last_written_time(&s.metadata).cloned(),
            type_: s.type_.as_deref().map(text),
            data: s.data.as_ref().map(SharedData::of),
        }
    }

    fn slim(&self) -> &Slim {
        &self.meta
    }

    fn meta(&self, key: Key<'_>) -> ObjectMeta {
        let mut m = self.meta.meta(key);
        match &self.owners {
            Owners::None => m.owner_references = None,
            Owners::Controller(blocks) => {
                m.owner_references.iter_mut().flatten().for_each(|r| r.block_owner_deletion = *blocks);
            }
            Owners::All(all) => m.owner_references = Some(all.to_vec()),
        }
        let annotations: BTreeMap<String, String> =
            [(crate::credentials::STEP_AT, &self.step_at), (crate::credentials::seal::SEAL, &self.seal)]
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_string(), v.as_deref()?.to_string())))
                .collect();
        m.annotations = (!annotations.is_empty()).then_some(annotations);
        m.managed_fields = self.written.as_ref().map(|t| {
            vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                time: Some(t.clone()),
                ..Default::default()
            }]
        });
        m
    }

    fn object(&self, key: Key<'_>) -> Secret {
        Secret {
            metadata: self.meta(key),
            type_: self.type_.as_deref().map(Into::into),
            data: self.data.as_ref().map(SharedData::data),
            ..Secret::default()
        }
    }
}

/// The pod conditions a [`StoredPod`] keeps: what observing routers reads
/// ([`crate::reconcile::observe::RouterPod::of`], `Unschedulable::of`).
const KEPT_CONDITIONS: [&str; 4] = ["ContainersReady", "Ready", "PodScheduled", crate::builders::LINKED];

/// What the store of router pods ([`PodStore`]) keeps of a pod: its metadata as [`Slim`]
/// keeps it (labels it is selected by, its controller, `deletionTimestamp`), the
/// [`crate::grants::sites::SITES_TRUST`] annotation, of its spec the node, the ConfigMaps
/// it mounts (volume and ConfigMap names) and its readiness gates, of its status the pod IP,
/// the phase and the conditions of [`KEPT_CONDITIONS`]: what observing the routers reads
/// ([`crate::reconcile::observe`]) and pruning old router configurations
/// ([`super::Cache::mounted_config_maps`]). Not the rest of the spec, the container
/// statuses, the other IPs, conditions, annotations and owner references. A
/// kube-runtime store kept each pod as a whole `Pod` (1.1 KB inline before its strings,
/// with a `PodSpec` inside even when slimmed).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredPod {
    meta: Slim,
    sites_trust: Option<Box<str>>,
    /// Shared with the other pods of the node ([`NODES`]).
    node: Option<Arc<str>>,
    /// `(volume name, ConfigMap name)` of each ConfigMap volume, shared with the other pods
    /// that mount the same ([`CONFIG_MAP_VOLUMES`]).
    config_maps: Arc<[(Box<str>, Box<str>)]>,
    /// The condition types of `spec.readinessGates`; `None`: the spec has none. Shared with
    /// the other pods that have the same ([`READINESS_GATES`]).
    readiness_gates: Option<Arc<[Box<str>]>>,
    ip: Option<Box<str>>,
    /// `status.phase`, one of [`PHASES`]; `None` also for a value the API does not define.
    phase: Option<&'static str>,
    conditions: Box<[StoredCondition]>,
}

/// The pod phases of the Kubernetes API (`PodStatus.phase`), as [`StoredPod`] keeps them.
const PHASES: [&str; 5] = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];

/// One kept pod condition.
#[derive(Debug, Clone, PartialEq)]
struct StoredCondition {
    type_: &'static str,
    status: Text,
    last_transition_time: Option<Time>,
    reason: Option<Text>,
    message: Option<Box<str>>,
}

/// Whether pod `p` is active: not in a terminal phase (`Failed`: evicted, refused at
/// admission by its kubelet, or its containers exited with `restartPolicy: Never`;
/// `Succeeded`). A terminal pod's router has exited for good, and it stays until pod garbage
/// collection (kube-controller-manager's `--terminated-pod-gc-threshold`, 12,500 by default)
/// or someone deletes it; its ReplicaSet or DaemonSet no longer counts it and runs a
/// replacement (the ReplicaSet controller's `FilterActivePods`), so it is no router either.
pub(crate) fn active(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Failed" | "Succeeded"))
}

/// The nodes of stored pods ([`StoredPod`]).
static NODES: SharedSet<str> = std::sync::LazyLock::new(Default::default);

/// The ConfigMap volumes of stored pods ([`StoredPod`]): the pods of one workload mount the
/// same.
static CONFIG_MAP_VOLUMES: SharedSet<[(Box<str>, Box<str>)]> = std::sync::LazyLock::new(Default::default);

/// The readiness gates of stored pods ([`StoredPod`]): every router pod has the same.
static READINESS_GATES: SharedSet<[Box<str>]> = std::sync::LazyLock::new(Default::default);

/// The store of the router pods.
pub(crate) type PodStore = Compact<Pod, StoredPod>;

impl Entry<Pod> for StoredPod {
    fn of(p: &Pod) -> Self {
        let (spec, status) = (p.spec.as_ref(), p.status.as_ref());
        let boxed = |s: &Option<String>| s.as_deref().map(Into::into);
        let config_maps: Vec<(Box<str>, Box<str>)> =
            (spec.and_then(|s| s.volumes.as_ref()).into_iter().flatten())
                .filter_map(|v| Some((v.name.as_str().into(), v.config_map.as_ref()?.name.as_str().into())))
                .collect();
        StoredPod {
            meta: Slim::of(&p.metadata),
            sites_trust: (p.metadata.annotations.as_ref())
                .and_then(|a| a.get(crate::grants::sites::SITES_TRUST))
                .map(|v| v.as_str().into()),
            node: spec.and_then(|s| s.node_name.as_deref()).map(|n| intern(&NODES, n, |n| n.into())),
            config_maps: intern(&CONFIG_MAP_VOLUMES, &config_maps[..], |v| v.into()),
            readiness_gates: spec.and_then(|s| s.readiness_gates.as_ref()).map(|g| {
                let types: Vec<Box<str>> = g.iter().map(|g| g.condition_type.as_str().into()).collect();
                intern(&READINESS_GATES, &types[..], |t| t.into())
            }),
            ip: status.and_then(|s| boxed(&s.pod_ip)),
            phase: status.and_then(|s| PHASES.iter().find(|p| s.phase.as_deref() == Some(**p)).copied()),
            conditions: (status.and_then(|s| s.conditions.as_ref()).into_iter().flatten())
                .filter_map(|c| {
                    Some(StoredCondition {
                        type_: KEPT_CONDITIONS.iter().find(|t| **t == c.type_)?,
                        status: text(&c.status),
                        last_transition_time: c.last_transition_time.clone(),
                        reason: c.reason.as_deref().map(text),
                        message: boxed(&c.message),
                    })
                })
                .collect(),
        }
    }

    fn slim(&self) -> &Slim {
        &self.meta
    }

    fn meta(&self, key: Key<'_>) -> ObjectMeta {
        let mut m = self.meta.meta(key);
        m.annotations = (self.sites_trust.as_ref())
            .map(|t| [(crate::grants::sites::SITES_TRUST.to_string(), t.to_string())].into());
        m
    }

    fn object(&self, key: Key<'_>) -> Pod {
        use k8s_openapi::api::core::v1::{
            ConfigMapVolumeSource, PodCondition, PodReadinessGate, PodSpec, PodStatus, Volume,
        };
        let text = |s: &Option<Box<str>>| s.as_deref().map(Into::into);
        let volumes: Vec<Volume> = (self.config_maps.iter())
            .map(|(volume, config_map)| Volume {
                name: volume.to_string(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        let has_spec = !volumes.is_empty() || self.node.is_some() || self.readiness_gates.is_some();
        let conditions: Vec<PodCondition> = (self.conditions.iter())
            .map(|c| PodCondition {
                type_: c.type_.into(),
                status: c.status.to_string(),
                last_transition_time: c.last_transition_time.clone(),
                reason: c.reason.as_deref().map(Into::into),
                message: text(&c.message),
                ..Default::default()
            })
            .collect();
        let has_status = self.ip.is_some() || self.phase.is_some() || !conditions.is_empty();
        Pod {
            metadata: self.meta(key),
            spec: has_spec.then(|| PodSpec {
                volumes: (!volumes.is_empty()).then_some(volumes),
                node_name: self.node.as_deref().map(Into::into),
                readiness_gates: (self.readiness_gates.as_ref())
                    .map(|g| g.iter().map(|t| PodReadinessGate { condition_type: t.to_string() }).collect()),
                ..Default::default()
            }),
            status: has_status.then(|| PodStatus {
                pod_ip: text(&self.ip),
                phase: self.phase.map(Into::into),
                conditions: (!conditions.is_empty()).then_some(conditions),
                ..Default::default()
            }),
        }
    }
}

/// What a workload store keeps of a Deployment or DaemonSet: its metadata as [`Slim`]
/// keeps it, `spec.replicas`, the pod template's annotations (the config and credentials
/// hashes) and the status counts (`S`, without conditions): what observing it and its
/// status read ([`crate::reconcile::observe`]). Not the pod template's spec (a
/// `Deployment` is 2,400 bytes before anything it points to).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredWorkload<S> {
    meta: Slim,
    /// Its `uid`: its pods (and a Deployment's ReplicaSets) name it by uid
    /// ([`crate::reconcile::observe::Workloads`]).
    uid: Option<Box<str>>,
    replicas: Option<i32>,
    template_annotations: Option<Box<[Pair]>>,
    status: Option<Box<S>>,
}

/// The two workload kinds, as [`StoredWorkload`] reads and rebuilds them.
pub(crate) trait Workload: Resource<DynamicType = ()> + Sized {
    /// The kind's status.
    type Status: Clone + Send + Sync + 'static;
    /// `spec.replicas`, `spec.template` and `status`.
    fn parts(&self) -> (Option<i32>, Option<&PodTemplateSpec>, Option<&Self::Status>);
    /// `status` without its conditions (nothing reads them from the store).
    fn without_conditions(status: &Self::Status) -> Self::Status;
    /// A workload of `metadata`, `replicas` (Deployments) and `template`, with `status`.
    fn build(
        metadata: ObjectMeta,
        replicas: Option<i32>,
        template: PodTemplateSpec,
        status: Option<Self::Status>,
    ) -> Self;
}

impl Workload for Deployment {
    type Status = DeploymentStatus;

    fn parts(&self) -> (Option<i32>, Option<&PodTemplateSpec>, Option<&DeploymentStatus>) {
        let spec = self.spec.as_ref();
        (spec.and_then(|s| s.replicas), spec.map(|s| &s.template), self.status.as_ref())
    }

    fn without_conditions(status: &DeploymentStatus) -> DeploymentStatus {
        DeploymentStatus { conditions: None, ..status.clone() }
    }

    fn build(
        metadata: ObjectMeta,
        replicas: Option<i32>,
        template: PodTemplateSpec,
        status: Option<DeploymentStatus>,
    ) -> Self {
        Deployment {
            metadata,
            spec: Some(DeploymentSpec { replicas, template, ..Default::default() }),
            status,
        }
    }
}

impl Workload for DaemonSet {
    type Status = DaemonSetStatus;

    fn parts(&self) -> (Option<i32>, Option<&PodTemplateSpec>, Option<&DaemonSetStatus>) {
        (None, self.spec.as_ref().map(|s| &s.template), self.status.as_ref())
    }

    fn without_conditions(status: &DaemonSetStatus) -> DaemonSetStatus {
        DaemonSetStatus { conditions: None, ..status.clone() }
    }

    fn build(
        metadata: ObjectMeta,
        _replicas: Option<i32>,
        template: PodTemplateSpec,
        status: Option<DaemonSetStatus>,
    ) -> Self {
        DaemonSet { metadata, spec: Some(DaemonSetSpec { template, ..Default::default() }), status }
    }
}

impl<K: Workload + Send + Sync + 'static> Entry<K> for StoredWorkload<K::Status> {
    fn of(w: &K) -> Self {
        let (replicas, template, status) = w.parts();
        let annotations = template.and_then(|t| t.metadata.as_ref()?.annotations.as_ref());
        StoredWorkload {
            meta: Slim::of(w.meta()),
            uid: w.meta().uid.as_deref().map(Into::into),
            replicas,
            template_annotations: annotations
                .map(|a| a.iter().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect()),
            status: status.map(|s| Box::new(K::without_conditions(s))),
        }
    }

    fn slim(&self) -> &Slim {
        &self.meta
    }

    fn meta(&self, key: Key<'_>) -> ObjectMeta {
        ObjectMeta { uid: self.uid.as_deref().map(Into::into), ..self.meta.meta(key) }
    }

    fn object(&self, key: Key<'_>) -> K {
        let annotations = self
            .template_annotations
            .as_ref()
            .map(|a| a.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta { annotations, ..ObjectMeta::default() }),
            spec: None,
        };
        K::build(Entry::<K>::meta(self, key), self.replicas, template, self.status.as_deref().cloned())
    }
}

/// What the ReplicaSet store keeps of one (a metadata watch): its metadata as [`Slim`]
/// keeps it (with its controller reference: the Deployment that made it, by uid) and its
/// own `uid`, which its pods name ([`crate::reconcile::observe::Workloads`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredOwned {
    meta: Slim,
    uid: Option<Box<str>>,
}

impl<X> Entry<PartialObjectMeta<X>> for StoredOwned {
    fn of(obj: &PartialObjectMeta<X>) -> Self {
        StoredOwned { meta: Slim::of(&obj.metadata), uid: obj.metadata.uid.as_deref().map(Into::into) }
    }

    fn slim(&self) -> &Slim {
        &self.meta
    }

    fn meta(&self, key: Key<'_>) -> ObjectMeta {
        ObjectMeta { uid: self.uid.as_deref().map(Into::into), ..self.meta.meta(key) }
    }

    fn object(&self, key: Key<'_>) -> PartialObjectMeta<X> {
        PartialObjectMeta {
            types: None,
            metadata: Entry::<PartialObjectMeta<X>>::meta(self, key),
            _phantom: PhantomData,
        }
    }
}

/// The store of the router ReplicaSets (label `interconnect_cr`, metadata only).
pub(crate) type ReplicaSetStore = Compact<PartialObjectMeta<ReplicaSet>, StoredOwned>;

/// The store of the Deployments labelled ours.
pub(crate) type DeploymentStore = Compact<Deployment, StoredWorkload<DeploymentStatus>>;

/// The store of the DaemonSets labelled ours.
pub(crate) type DaemonSetStore = Compact<DaemonSet, StoredWorkload<DaemonSetStatus>>;

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

    /// PEM the way rcgen writes it is kept as DER, smaller, and read back byte for byte; a
    /// CA bundle too; anything else (CRLF line ends, headers, text, bytes) as it came.
    #[test]
    fn a_pem_value_is_kept_as_der_and_read_back_exactly() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(vec!["mesh.ns.svc".into()]).unwrap().self_signed(&key).unwrap();
        let other = rcgen::CertificateParams::new(vec!["other".into()]).unwrap().self_signed(&key).unwrap();
        let (cert_pem, key_pem) = (cert.pem(), key.serialize_pem());
        let bundle = format!("{}{}", cert.pem(), other.pem());
        for (what, v) in [("certificate", &cert_pem), ("key", &key_pem), ("bundle", &bundle)] {
            let p = packed(v.as_bytes());
            assert_eq!(p[0], PEM_BLOCKS, "{what}");
            assert!(p.len() * 10 < v.len() * 7, "{what}: {} bytes kept of {}", p.len(), v.len());
            assert_eq!(unpacked(&p), v.as_bytes(), "{what}");
        }
        let crlf = cert_pem.replace('\n', "\r\n");
        let headers = key_pem.replacen('\n', "\nProc-Type: 4,ENCRYPTED\n\n", 1);
        let blank_line_between = format!("{}\n{}", cert.pem(), other.pem());
        let no_final_newline = cert_pem.trim_end().to_string();
        for v in [
            crlf.as_bytes(),
            headers.as_bytes(),
            blank_line_between.as_bytes(),
            no_final_newline.as_bytes(),
            b"a password",
            b"",
            &[0xff, 0x00, 0x2d, 0x2d][..],
            b"-----BEGIN X-----\nnot base64\n-----END X-----\n",
        ] {
            let p = packed(v);
            assert_eq!(unpacked(&p), v, "{}", String::from_utf8_lossy(v));
            assert_eq!(p[0], RAW, "{}", String::from_utf8_lossy(v));
        }
        // Equal values are shared in their packed form.
        assert!(Arc::ptr_eq(&shared_value(cert_pem.as_bytes()), &shared_value(cert.pem().as_bytes())));
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
        assert_eq!(store.labelled("ns", &[("interconnect_cr", "mesh")]).len(), 1);
        assert!(store.labelled("ns", &[("interconnect_cr", "other")]).is_empty());
        assert!(store.labelled("other-ns", &[("interconnect_cr", "mesh")]).is_empty());
        assert!(store.labelled("ns", &[("team", "a")]).is_empty(), "a label not kept never matches");
    }

    #[test]
    fn a_stored_secret_gives_back_what_a_pass_reads() {
        use crate::credentials::STEP_AT;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "mesh-ca", "namespace": "ns", "resourceVersion": "7", "uid": "s-1",
                "labels": {"interconnect_cr": "mesh", "qdr-operator.io/credentials": "true", "backup": "daily"},
                "annotations": {STEP_AT: "2026-01-01T00:00:00Z", "note": "n"},
                "finalizers": ["keep"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "o-1"},
                    {"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                     "name": "mesh", "uid": "u-1", "controller": true}]},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": ""}}))
        .unwrap();
        let store = SecretStore::default();
        store.apply_watcher_event(&Event::Apply(secret.clone()));
        let back = store.object("ns", "mesh-ca").expect("stored");
        assert_eq!(back.data, secret.data, "data whole, empty values too");
        assert_eq!(back.type_, secret.type_);
        assert_eq!(back.metadata.owner_references, secret.metadata.owner_references, "every owner reference");
        assert_eq!(back.metadata.resource_version.as_deref(), Some("7"));
        let labels: Vec<_> = back.metadata.labels.iter().flatten().map(|(k, _)| k.as_str()).collect();
        assert_eq!(labels, ["interconnect_cr", "qdr-operator.io/credentials"]);
        let annotations = back.metadata.annotations.expect("the step annotation");
        assert_eq!(annotations.keys().collect::<Vec<_>>(), [STEP_AT]);
        assert!(back.metadata.finalizers.is_none(), "read again before a rewrite");
        // A generated Secret's one reference, its controller's, comes back whole.
        for blocks in [Some(true), Some(false), None] {
            let mut generated = secret.clone();
            let mut only = secret.metadata.owner_references.clone().unwrap()[1].clone();
            only.block_owner_deletion = blocks;
            generated.metadata.owner_references = Some(vec![only]);
            store.apply_watcher_event(&Event::Apply(generated.clone()));
            let back = store.object("ns", "mesh-ca").unwrap();
            assert_eq!(back.metadata.owner_references, generated.metadata.owner_references);
        }
        let bare: Secret =
            serde_json::from_value(json!({"metadata": {"name": "bare", "namespace": "ns"}})).unwrap();
        store.apply_watcher_event(&Event::Apply(bare));
        let back = store.object("ns", "bare").unwrap();
        assert!(
            back.data.is_none()
                && back.metadata.annotations.is_none()
                && back.metadata.owner_references.is_none()
        );
    }

    /// A router pod as a kubelet reports it: the stored pod gives back what observing it
    /// reads (the same [`RouterPod`], unschedulable reasons, mounted ConfigMaps and phase)
    /// and nothing else of its spec and status; a pod the kubelet failed stays failed.
    #[test]
    fn a_stored_pod_gives_back_what_observing_it_reads() {
        use crate::reconcile::observe::{RouterPod, Unschedulable, Workloads};
        let pod = |scheduled: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "mesh-5d8f-r0", "namespace": "ns", "resourceVersion": "11", "uid": "p-1",
                    "labels": {"interconnect_cr": "mesh", "application": "mesh", "pod-template-hash": "5d8f"},
                    "annotations": {crate::grants::sites::SITES_TRUST: "abc 1700000000", "other": "x"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "mesh-5d8f",
                                         "uid": "rs-1", "controller": true}]},
                "spec": {
                    "nodeName": "node-1",
                    "containers": [{"name": "mesh", "image": "router", "env": [{"name": "X", "value": "y"}]}],
                    "readinessGates": [{"conditionType": crate::builders::LINKED}],
                    "volumes": [
                        {"name": "router-config", "configMap": {"name": "mesh-router-config-0123", "defaultMode": 420}},
                        {"name": "ssl-0-credentials", "secret": {"secretName": "mesh-tls"}},
                        {"name": "sasl-config", "configMap": {"name": "mesh-sasl-config"}},
                    ],
                },
                "status": {
                    "phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}], "hostIP": "10.1.0.1",
                    "conditions": [
                        {"type": "PodReadyToStartContainers", "status": "True"},
                        {"type": "Initialized", "status": "True"},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
                        {"type": crate::builders::LINKED, "status": "True"},
                        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:06Z"},
                        scheduled,
                    ],
                    "containerStatuses": [{"name": "mesh", "ready": true, "restartCount": 0, "image": "router",
                                           "imageID": "sha256:1", "containerID": "containerd://1"}],
                },
            }))
            .unwrap()
        };
        let workloads =
            Workloads { daemon_set: None, replica_sets: [("mesh-5d8f".into(), "rs-1".into())].into() };
        let unscheduled = json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": "0/3 nodes are available"});
        for p in [pod(json!({"type": "PodScheduled", "status": "True"})), pod(unscheduled)] {
            let store = PodStore::default();
            store.apply_watcher_event(&Event::Apply(p.clone()));
            let back = store.objects("ns", &[("interconnect_cr", "mesh"), ("application", "mesh")]);
            assert_eq!(back.len(), 1);
            let back = &back[0];
            let router = RouterPod::of(back, &workloads);
            assert_eq!(router, RouterPod::of(&p, &workloads));
            assert!(router.owned && router.ready && router.gated && router.linked && router.ip.is_some());
            assert_eq!(Unschedulable::of([back]), Unschedulable::of([&p]));
            let mounted = |p: &Pod| -> Vec<String> {
                (p.spec.iter().flat_map(|s| s.volumes.iter().flatten()))
                    .filter_map(|v| Some(v.config_map.as_ref()?.name.clone()))
                    .collect()
            };
            assert_eq!(mounted(back), ["mesh-router-config-0123", "mesh-sasl-config"]);
            let spec = back.spec.as_ref().unwrap();
            assert!(spec.containers.is_empty(), "no containers kept");
            let status = back.status.as_ref().unwrap();
            assert!(
                status.container_statuses.is_none() && status.pod_ips.is_none() && status.host_ip.is_none()
            );
            assert_eq!(status.phase.as_deref(), Some("Running"));
            assert!(super::active(back));
            let types: Vec<&str> = status.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
            assert_eq!(types, ["ContainersReady", crate::builders::LINKED, "Ready", "PodScheduled"]);
            let annotations = back.metadata.annotations.clone().unwrap();
            assert_eq!(annotations.keys().collect::<Vec<_>>(), [crate::grants::sites::SITES_TRUST]);
            assert!(back.metadata.labels.as_ref().unwrap().get("pod-template-hash").is_none());
        }
        // The pods of one workload on one node share what they have alike.
        let scheduled = || pod(json!({"type": "PodScheduled", "status": "True"}));
        let (one, other) = (StoredPod::of(&scheduled()), StoredPod::of(&scheduled()));
        assert!(Arc::ptr_eq(one.node.as_ref().unwrap(), other.node.as_ref().unwrap()));
        assert!(Arc::ptr_eq(&one.config_maps, &other.config_maps));
        assert!(Arc::ptr_eq(one.readiness_gates.as_ref().unwrap(), other.readiness_gates.as_ref().unwrap()));
        assert!(matches!(one.conditions[0].status, Text::Borrowed("True")), "a known value, not allocated");
        // Evicted: the phase a kubelet leaves it in is kept, so the pod is no router.
        let mut evicted = scheduled();
        let status = evicted.status.as_mut().unwrap();
        (status.phase, status.reason) = (Some("Failed".into()), Some("Evicted".into()));
        let store = PodStore::default();
        store.apply_watcher_event(&Event::Apply(evicted));
        let back = store.object("ns", "mesh-5d8f-r0").unwrap();
        assert_eq!(back.status.as_ref().unwrap().phase.as_deref(), Some("Failed"));
        assert!(!super::active(&back));
        // A pod with nothing of it kept: no spec, no status.
        let bare: Pod = serde_json::from_value(
            json!({"metadata": {"name": "x", "namespace": "ns"}, "spec": {"containers": []}}),
        )
        .unwrap();
        let store = PodStore::default();
        store.apply_watcher_event(&Event::Apply(bare));
        let back = store.object("ns", "x").unwrap();
        assert!(back.spec.is_none() && back.status.is_none());
    }

    /// The store's index follows an object relabelled to another Interconnect, deleted, and
    /// a relist (swapped in whole when done).
    #[test]
    fn a_labelled_lookup_follows_relabels_deletes_and_relists() {
        let store = MetaStore::<ConfigMap>::default();
        let labelled = |name: &str, owner: &str| {
            let mut o = cm(name, "1");
            o.metadata.labels = Some([("interconnect_cr".to_string(), owner.to_string())].into());
            o
        };
        let names = |owner: &str| -> Vec<String> {
            let mut n: Vec<String> = store
                .labelled("ns", &[("interconnect_cr", owner)])
                .into_iter()
                .filter_map(|m| m.name)
                .collect();
            n.sort();
            n
        };
        store.apply_watcher_event(&Event::Apply(labelled("a", "m")));
        store.apply_watcher_event(&Event::Apply(labelled("b", "m")));
        store.apply_watcher_event(&Event::Apply(labelled("b", "m")));
        assert_eq!(names("m"), ["a", "b"]);
        store.apply_watcher_event(&Event::Apply(labelled("b", "n")));
        assert_eq!((names("m"), names("n")), (vec!["a".to_string()], vec!["b".to_string()]), "relabelled");
        store.apply_watcher_event(&Event::Apply(cm("a", "2")));
        assert!(names("m").is_empty(), "its label taken off");
        store.apply_watcher_event(&Event::Delete(labelled("b", "n")));
        assert!(names("n").is_empty());
        store.apply_watcher_event(&Event::Init);
        store.apply_watcher_event(&Event::InitApply(labelled("c", "m")));
        store.apply_watcher_event(&Event::Apply(labelled("d", "m")));
        assert_eq!(names("m"), ["d"], "the relist is not seen before it is done");
        store.apply_watcher_event(&Event::InitDone);
        assert_eq!(names("m"), ["c"]);
    }

    /// The selected labels and the controller reference of stored entries are kept once for
    /// every entry that has equal ones (the children of one Interconnect), and stand for
    /// the same metadata.
    #[test]
    fn equal_labels_and_controllers_are_kept_once() {
        let meta = |name: &str, owner: &str, uid: &str| -> ObjectMeta {
            serde_json::from_value(json!({"name": name, "namespace": "ns",
                "labels": {"application": owner, "interconnect_cr": owner, "other": name},
                "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1",
                    "kind": "Interconnect", "name": owner, "uid": uid, "controller": true}]}))
            .unwrap()
        };
        let (a, b) = (Slim::of(&meta("mesh-tls", "mesh", "u-1")), Slim::of(&meta("mesh-ca", "mesh", "u-1")));
        assert!(Arc::ptr_eq(&a.labels, &b.labels), "the same labels, kept once");
        assert!(Arc::ptr_eq(a.controller.as_ref().unwrap(), b.controller.as_ref().unwrap()));
        let other = Slim::of(&meta("hub-tls", "hub", "u-2"));
        assert_eq!(other.label("application"), Some("hub"));
        assert_ne!(other.controller, a.controller);
        // Another Interconnect of the same name (recreated: a new uid) has its own reference.
        let again = Slim::of(&meta("mesh-tls", "mesh", "u-3"));
        assert!(Arc::ptr_eq(&a.labels, &again.labels));
        assert!(!Arc::ptr_eq(a.controller.as_ref().unwrap(), again.controller.as_ref().unwrap()));
        let back = b.meta(("ns", "mesh-ca"));
        assert_eq!(back.labels.unwrap().len(), 2, "only the selected labels");
        let r = &back.owner_references.unwrap()[0];
        assert_eq!((r.name.as_str(), r.uid.as_str(), r.controller), ("mesh", "u-1", Some(true)));
    }

    /// Equal values of stored Secrets are kept once; values nothing holds any more are
    /// swept once the set has doubled.
    #[test]
    fn equal_secret_values_are_kept_once_and_swept_when_unused() {
        let secret = |name: &str, data: serde_json::Value| -> Secret {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "data": data}))
                .unwrap()
        };
        // "Q0EgY2VydA==" is "CA cert".
        let ca = StoredSecret::of(&secret(
            "mesh-ca",
            json!({"tls.crt": "Q0EgY2VydA==", "ca.crt": "Q0EgY2VydA=="}),
        ));
        let leaf = StoredSecret::of(&secret("mesh-tls", json!({"ca.crt": "Q0EgY2VydA==", "x": "eA=="})));
        let value = |s: &StoredSecret, k: &str| {
            s.data.iter().flat_map(|d| d.0.iter()).find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap()
        };
        assert!(Arc::ptr_eq(&value(&ca, "tls.crt"), &value(&ca, "ca.crt")));
        assert!(Arc::ptr_eq(&value(&ca, "ca.crt"), &value(&leaf, "ca.crt")));
        assert_eq!(unpacked(&value(&leaf, "ca.crt")), b"CA cert");
        assert!(matches!(leaf.data.as_ref().unwrap().0[0].0, DataKey::Borrowed("ca.crt")), "a known key");
        // A holder's copy of a stored Secret's data shares its values, and gives the data back.
        let data = ca.object(("ns", "mesh-ca")).data.unwrap();
        let held = SharedData::of(&data);
        assert!(Arc::ptr_eq(&held.0[0].1, &value(&ca, "ca.crt")), "shared, not copied");
        assert!(Arc::ptr_eq(&held.0[1].1, &value(&ca, "tls.crt")), "shared, not copied");
        assert_eq!(held.data(), data);

        let mut values = Shared::<[u8]>::default();
        let kept = values.intern(b"kept", |v| v.into());
        assert!(Arc::ptr_eq(&kept, &values.intern(b"kept", |v| v.into())));
        for i in 0..1100 {
            drop(values.intern(format!("gone {i}").as_bytes(), |v| v.into()));
        }
        assert!(values.set.len() < 1024, "swept at 1,024: {}", values.set.len());
        assert!(values.set.contains(&b"kept"[..]), "a value still held is kept");
    }

    #[test]
    fn a_stored_workload_gives_back_what_observing_it_reads() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "mesh", "namespace": "ns", "resourceVersion": "9", "generation": 3,
                "labels": {"interconnect_cr": "mesh", "app.kubernetes.io/name": "qdrouterd"},
                "annotations": {"deployment.kubernetes.io/revision": "2"},
                "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1",
                    "kind": "Interconnect", "name": "mesh", "uid": "u-1", "controller": true}]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"application": "mesh"}},
                "template": {"metadata": {"annotations": {"qdr-operator.io/config-hash": "c1",
                    "qdr-operator.io/credentials-hash": "k1"}, "labels": {"application": "mesh"}},
                    "spec": {"containers": [{"name": "router", "image": "qdrouterd"}]}}},
            "status": {"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2,
                "availableReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]}}))
        .unwrap();
        let store = DeploymentStore::default();
        store.apply_watcher_event(&Event::Apply(d.clone()));
        let back = store.object("ns", "mesh").expect("stored");
        let spec = back.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        let template = spec.template.metadata.as_ref().unwrap();
        assert_eq!(
            template.annotations,
            d.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().annotations
        );
        assert!(spec.template.spec.is_none(), "no pod spec");
        let status = back.status.as_ref().unwrap();
        assert_eq!(
            (
                status.observed_generation,
                status.updated_replicas,
                status.ready_replicas,
                status.available_replicas
            ),
            (Some(3), Some(3), Some(2), Some(2))
        );
        assert!(status.conditions.is_none());
        assert_eq!(back.metadata.generation, Some(3));
        assert_eq!(back.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(back.metadata.owner_references, d.metadata.owner_references);
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "edge", "namespace": "ns", "generation": 1},
            "spec": {"selector": {}, "template": {"metadata": {"annotations": {"a": "b"}}}},
            "status": {"desiredNumberScheduled": 2, "numberReady": 1, "currentNumberScheduled": 2,
                "numberMisscheduled": 0, "numberAvailable": 1, "observedGeneration": 1}}))
        .unwrap();
        let store = DaemonSetStore::default();
        store.apply_watcher_event(&Event::Apply(ds.clone()));
        let back = store.object("ns", "edge").unwrap();
        assert_eq!(back.status, ds.status);
        assert_eq!(
            back.spec.unwrap().template.metadata.unwrap().annotations,
            ds.spec.unwrap().template.metadata.unwrap().annotations
        );
    }
}
