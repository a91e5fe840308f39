//! Stage 3, **apply**: write [`Children`] to the API server and prune what is no longer
//! wanted.
//!
//! * **ownership first**: before anything is written, every child name is looked up, in the
//!   labelled store ([`crate::cache`]) or, when it is not there, with one metadata GET (an
//!   object without our label may hold the name); an object that exists and is not
//!   controlled by this Interconnect (controller owner reference with its uid) is a
//!   [`Conflict`], and then nothing at all is applied: a foreign ServiceAccount `default` or
//!   Service `broker` is never taken over, and garbage collection never deletes what was not
//!   ours;
//! * **adoption**: a child of ours that the Go operator wrote (an `Update` entry of its
//!   manager in `managedFields`) has those fields moved to this controller's `Apply` entry
//!   first ([`crate::managed_fields`]), so the apply removes the ones it does not set;
//! * every child is server-side applied with `force` under [`FIELD_MANAGER`], so the API
//!   server computes the drift and no comparison code exists; missing Secrets are created
//!   (a 409 leaves the existing one alone and ends the pass as stale: [`Error::is_stale`]),
//!   generated Secrets due for renewal are replaced with the observed `resourceVersion` as
//!   precondition;
//! * [`Children`] is destructured without `..`: a new child that is never applied does not
//!   compile;
//! * pruning is one generic function over (kind, names to keep): it takes the kind's
//!   objects with the children's labels from the store (Routes: a metadata LIST), and
//!   deletes what this Interconnect controls and no longer wants. A 404 on delete means someone was faster, for every kind alike.

use std::collections::BTreeSet;
use std::fmt::Debug;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::build::{Children, Secrets};
use crate::builders::{Exposure, Workload};
use crate::cache::Cache;
use crate::managed_fields::Adoption;
use crate::owner::{FIELD_MANAGER, MANAGED_BY, Owner};
use crate::route::Route;

/// Why applying failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A server-side apply was refused.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        /// Kind of the child.
        kind: String,
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Creating a generated Secret failed (other than "already exists").
    #[error("creating {kind} {name}: {source}")]
    Create {
        /// Kind of the child.
        kind: String,
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// An object observed missing exists (409 on create): the pass ran on a stale
    /// observation and is retried at once ([`Error::is_stale`]).
    #[error("{kind} {name} appeared since it was observed missing")]
    Exists {
        /// Kind of the child.
        kind: String,
        /// Its name.
        name: String,
    },
    /// Listing a kind for pruning failed.
    #[error("listing {kind} to prune: {source}")]
    List {
        /// The kind.
        kind: String,
        /// The API error.
        source: kube::Error,
    },
    /// Looking up a child's owner failed.
    #[error("reading {kind} {name}: {source}")]
    Get {
        /// Kind of the child.
        kind: String,
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Replacing a generated Secret failed (409: it changed since it was observed).
    #[error("updating {kind} {name}: {source}")]
    Update {
        /// Kind of the child.
        kind: String,
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Deleting an orphan failed.
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        /// Kind of the orphan.
        kind: String,
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
}

impl Error {
    /// Whether the pass failed only because its observation was stale ([`Error::Exists`], or
    /// a 409 replacing a generated Secret): nothing is wrong, the next pass will see more.
    pub fn is_stale(&self) -> bool {
        matches!(self, Error::Exists { .. })
            || matches!(self, Error::Update { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

/// The workload's counts, read from the object the apply returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadStatus {
    /// Routers wanted (`replicas`, or nodes scheduled for a DaemonSet).
    pub desired: i32,
    /// Routers whose pods are ready.
    pub ready: i32,
    /// Routers running the current pod template.
    pub updated: i32,
    /// Routers available (ready for `minReadySeconds`).
    pub available: i32,
    /// Whether the workload controller has observed the applied generation, so the counts
    /// describe the applied spec.
    pub current: bool,
}

impl WorkloadStatus {
    fn of_deployment(desired: &Deployment, applied: &Deployment) -> Self {
        let st = applied.status.clone().unwrap_or_default();
        WorkloadStatus {
            desired: desired.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ready: st.ready_replicas.unwrap_or(0),
            updated: st.updated_replicas.unwrap_or(0),
            available: st.available_replicas.unwrap_or(0),
            current: st.observed_generation >= applied.metadata.generation,
        }
    }

    fn of_daemon_set(applied: &DaemonSet) -> Self {
        let st = applied.status.clone().unwrap_or_default();
        WorkloadStatus {
            desired: st.desired_number_scheduled,
            ready: st.number_ready,
            updated: st.updated_number_scheduled.unwrap_or(0),
            available: st.number_available.unwrap_or(0),
            current: st.observed_generation >= applied.metadata.generation,
        }
    }
}

pub use super::observe::Conflict;

/// What applying did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The workload's counts after the apply.
    pub workload: WorkloadStatus,
    /// Orphans deleted, as `Kind name`.
    pub pruned: Vec<String>,
    /// Objects in the way: when not empty, nothing was applied.
    pub conflicts: Vec<Conflict>,
    /// Children whose fields written by the Go operator were taken over (`Kind name`): the
    /// apply then removed the ones this controller does not set.
    pub adopted: Vec<String>,
}

/// The kinds that can become orphans, each with the names to keep.
struct Keep(Vec<(ApiResource, BTreeSet<String>)>);

impl Keep {
    fn new(routes: bool) -> Self {
        let mut kinds = vec![
            ApiResource::erase::<Deployment>(&()),
            ApiResource::erase::<DaemonSet>(&()),
            ApiResource::erase::<Ingress>(&()),
            ApiResource::erase::<ConfigMap>(&()),
            ApiResource::erase::<Secret>(&()),
        ];
        if routes {
            kinds.push(ApiResource::erase::<Route>(&()));
        }
        Keep(kinds.into_iter().map(|k| (k, BTreeSet::new())).collect())
    }

    fn insert<K: Resource<DynamicType = ()>>(&mut self, name: impl Into<String>) {
        let kind = K::kind(&());
        if let Some((_, names)) = self.0.iter_mut().find(|(ar, _)| ar.kind == kind) {
            names.insert(name.into());
        }
    }
}

/// A namespaced, typed child object.
trait Child:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Serialize
    + DeserializeOwned
    + Clone
    + Debug
{
}

impl<K> Child for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + Debug
{
}

/// Server-side applies `obj` with `force` under [`FIELD_MANAGER`]; returns the stored object.
async fn ssa<K: Child>(client: &kube::Client, ns: &str, obj: &K) -> Result<K, Error> {
    let name = obj.name_any();
    Api::<K>::namespaced(client.clone(), ns)
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map_err(|source| Error::Apply { kind: K::kind(&()).into_owned(), name, source })
}

/// What the look-up of the children's names found: objects in the way, and objects of ours
/// whose fields the Go operator wrote (to be taken over before the apply).
#[derive(Debug, Default)]
struct Found {
    conflicts: Vec<Conflict>,
    adoptions: Vec<Adoption>,
}

impl Found {
    fn extend(&mut self, (conflict, adoption): (Option<Conflict>, Option<Adoption>)) {
        self.conflicts.extend(conflict);
        self.adoptions.extend(adoption);
    }
}

/// The [`Conflict`] of `name` of kind `K` (an existing object that `o` does not control), or
/// else its [`Adoption`] when the Go operator wrote it.
///
/// A child in the labelled store is judged from there; one missing from it is looked up
/// (metadata only), since an object without our label may hold the name.
async fn conflict<K: Child>(
    client: &kube::Client,
    cache: &Cache,
    o: &Owner,
    name: &str,
) -> Result<(Option<Conflict>, Option<Adoption>), Error> {
    let kind = K::kind(&());
    let meta = match cache.meta(&kind, o.namespace(), name) {
        Some(meta) => meta,
        None => {
            let found = Api::<K>::namespaced(client.clone(), o.namespace())
                .get_metadata_opt(name)
                .await
                .map_err(|source| Error::Get { kind: kind.to_string(), name: name.into(), source })?;
            match found {
                Some(m) => m.metadata,
                None => return Ok((None, None)),
            }
        }
    };
    match Conflict::of(o, &kind, name, meta.owner_references.as_deref().unwrap_or_default()) {
        Some(c) => Ok((Some(c), None)),
        None => Ok((None, Adoption::of::<K>(&meta, FIELD_MANAGER))),
    }
}

/// Every child of `children` whose name is taken by an object `o` does not control, and
/// every one of ours to adopt; the workload was already looked at by observe.
async fn conflicts(
    client: &kube::Client,
    cache: &Cache,
    o: &Owner,
    children: &Children,
    workload: (Option<Conflict>, Option<Adoption>),
) -> Result<Found, Error> {
    let mut found = Found::default();
    found.extend(workload);
    found.extend(conflict::<ServiceAccount>(client, cache, o, &children.service_account.name_any()).await?);
    found.extend(conflict::<Role>(client, cache, o, &children.role.name_any()).await?);
    found.extend(conflict::<RoleBinding>(client, cache, o, &children.role_binding.name_any()).await?);
    if let Some(cm) = &children.sasl_config_map {
        found.extend(conflict::<ConfigMap>(client, cache, o, &cm.name_any()).await?);
    }
    found.extend(conflict::<Service>(client, cache, o, &children.service.name_any()).await?);
    match &children.exposure {
        Exposure::Ingresses(list) => {
            for i in list {
                found.extend(conflict::<Ingress>(client, cache, o, &i.name_any()).await?);
            }
        }
        Exposure::Routes(list) => {
            for r in list {
                found.extend(conflict::<Route>(client, cache, o, &r.name_any()).await?);
            }
        }
    }
    Ok(found)
}

/// Replaces the generated Secret `s` (its `resourceVersion` is the precondition).
async fn replace_secret(client: &kube::Client, ns: &str, s: &Secret) -> Result<Secret, Error> {
    let name = s.name_any();
    Api::<Secret>::namespaced(client.clone(), ns)
        .replace(&name, &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, s)
        .await
        .map_err(|source| Error::Update { kind: "Secret".into(), name, source })
}

/// Creates `obj`, observed missing. An object of its name is never overwritten: a 409 means
/// the observation was stale (a watch event not yet arrived), and [`Error::Exists`] stops
/// the pass before anything built from that observation (the credentials hash of the pod
/// template) is written.
async fn create_if_missing<K: Child>(client: &kube::Client, ns: &str, obj: &K) -> Result<K, Error> {
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match Api::<K>::namespaced(client.clone(), ns).create(&pp, obj).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::Exists { kind: K::kind(&()).into_owned(), name: obj.name_any() })
        }
        Err(source) => Err(Error::Create { kind: K::kind(&()).into_owned(), name: obj.name_any(), source }),
    }
}

/// Deletes the objects of kind `ar` labelled as children of `o`, controlled by it, and not
/// in `keep`. Returns them as `Kind name`.
///
/// The labelled stores answer for every cached kind; Routes are listed.
async fn prune(
    client: &kube::Client,
    cache: &Cache,
    o: &Owner,
    ar: &ApiResource,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), o.namespace(), ar);
    let selector = [("interconnect_cr", o.name()), (crate::cache::MANAGED_BY_LABEL, MANAGED_BY)];
    let children = match cache.labelled(&ar.kind, o.namespace(), &selector) {
        Some(found) => found,
        None => api
            .list_metadata(&ListParams::default().labels(&o.children_selector()))
            .await
            .map_err(|source| Error::List { kind: ar.kind.clone(), source })?
            .items
            .into_iter()
            .map(|m| m.metadata)
            .collect(),
    };
    let mut deleted = Vec::new();
    for meta in children {
        let controlled = o.controls(meta.owner_references.as_deref().unwrap_or_default());
        let name = meta.name.clone().unwrap_or_default();
        if !controlled || keep.contains(&name) {
            continue;
        }
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(format!("{} {name}", ar.kind)),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Delete { kind: ar.kind.clone(), name, source }),
        }
    }
    Ok(deleted)
}

/// A fingerprint of everything [`apply`] would write for `children` (each child's JSON),
/// or `None` when Secrets are to be created or replaced (never skipped).
///
/// A pass whose children have the fingerprint of the last full apply of the same
/// generation, with no drift marked since ([`crate::cache::Drift`]), skips the applies:
/// they would all be no-ops. Such passes are woken by router pods and by the workload
/// controller's status, and cost only their status write. A full apply still runs at least
/// every [`super::RESYNC`].
pub fn fingerprint(children: &Children) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    if !children.secrets.create.is_empty() || !children.secrets.update.is_empty() {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut add = |v: serde_json::Result<Vec<u8>>| v.ok().hash(&mut h);
    add(serde_json::to_vec(&children.service_account));
    add(serde_json::to_vec(&children.role));
    add(serde_json::to_vec(&children.role_binding));
    add(serde_json::to_vec(&children.sasl_config_map));
    match &children.workload {
        Workload::Deployment(d) => add(serde_json::to_vec(d)),
        Workload::DaemonSet(d) => add(serde_json::to_vec(d)),
    }
    add(serde_json::to_vec(&children.service));
    match &children.exposure {
        Exposure::Ingresses(list) => add(serde_json::to_vec(list)),
        Exposure::Routes(list) => add(serde_json::to_vec(list)),
    }
    children.secrets.keep.hash(&mut h);
    Some(h.finish())
}

/// What [`apply`] would report without writing anything, from the stores: the workload's
/// counts. `None` when the workload is not in the store (then apply).
pub fn unchanged(cache: &Cache, o: &Owner, children: &Children) -> Option<Applied> {
    let workload = match &children.workload {
        Workload::Deployment(d) => {
            WorkloadStatus::of_deployment(d, cache.deployment(o.namespace(), o.name())?.as_ref())
        }
        Workload::DaemonSet(_) => {
            WorkloadStatus::of_daemon_set(cache.daemon_set(o.namespace(), o.name())?.as_ref())
        }
    };
    Some(Applied { workload, ..Applied::default() })
}

/// Applies every child of `o` unless one of their names is taken by an object `o` does not
/// control (then nothing is written and [`Applied::conflicts`] lists them, starting with
/// what observe found under the workload's name, `workload`); takes over the fields the Go
/// operator wrote on children of ours ([`crate::managed_fields`]); when
/// `prune_orphans`, deletes the children it no longer wants (the Deployment after `Any` →
/// `Every`, the Ingress of a listener no longer exposed, ...).
///
/// # Errors
/// The first failed read or write, as an [`Error`] naming kind and name.
pub async fn apply(
    client: &kube::Client,
    cache: &Cache,
    o: &Owner,
    children: Children,
    workload: (Option<Conflict>, Option<Adoption>),
    prune_orphans: bool,
) -> Result<Applied, Error> {
    let Found { conflicts, adoptions } = conflicts(client, cache, o, &children, workload).await?;
    if !conflicts.is_empty() {
        return Ok(Applied { conflicts, ..Applied::default() });
    }
    let mut adopted = Vec::new();
    for a in adoptions {
        a.write(client, o.namespace()).await.map_err(|source| Error::Update {
            kind: "managed fields of".into(),
            name: a.what.clone(),
            source,
        })?;
        adopted.push(a.what);
    }
    let Children {
        service_account,
        role,
        role_binding,
        sasl_config_map,
        secrets: Secrets { create, update, keep: keep_secrets },
        workload,
        service,
        exposure,
        router_config: _, // carried by the workload's pod template
        credentials: _,   // reported, not applied
    } = children;
    let ns = o.namespace();
    let mut keep = Keep::new(matches!(exposure, Exposure::Routes(_)));
    ssa(client, ns, &service_account).await?;
    ssa(client, ns, &role).await?;
    ssa(client, ns, &role_binding).await?;
    if let Some(cm) = &sasl_config_map {
        keep.insert::<ConfigMap>(cm.name_any());
        ssa(client, ns, cm).await?;
    }
    for s in &create {
        cache.written_secrets.record(create_if_missing(client, ns, s).await?);
    }
    for s in &update {
        cache.written_secrets.record(replace_secret(client, ns, s).await?);
    }
    for name in keep_secrets {
        keep.insert::<Secret>(name);
    }
    let workload = match workload {
        Workload::Deployment(d) => {
            keep.insert::<Deployment>(d.name_any());
            let applied = ssa(client, ns, d.as_ref()).await?;
            let status = WorkloadStatus::of_deployment(&d, &applied);
            cache.written_deployments.record(applied);
            status
        }
        Workload::DaemonSet(d) => {
            keep.insert::<DaemonSet>(d.name_any());
            let applied = ssa(client, ns, d.as_ref()).await?;
            let status = WorkloadStatus::of_daemon_set(&applied);
            cache.written_daemon_sets.record(applied);
            status
        }
    };
    ssa(client, ns, &service).await?;
    match exposure {
        Exposure::Ingresses(list) => {
            for i in &list {
                keep.insert::<Ingress>(i.name_any());
                ssa(client, ns, i).await?;
            }
        }
        Exposure::Routes(list) => {
            for r in &list {
                keep.insert::<Route>(r.name_any());
                ssa(client, ns, r).await?;
            }
        }
    }
    let mut pruned = Vec::new();
    if prune_orphans {
        for (ar, names) in &keep.0 {
            pruned.extend(prune(client, cache, o, ar, names).await?);
        }
    }
    Ok(Applied { workload, pruned, conflicts: Vec::new(), adopted })
}
