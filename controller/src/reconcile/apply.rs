//! Stage 3, **apply**: write [`Children`] to the API server and prune what is no longer
//! wanted.
//!
//! * **ownership first**: before anything is written, every child name is looked up
//!   (metadata only); an object that exists and is not controlled by this Interconnect
//!   (controller owner reference with its uid) is a [`Conflict`], and then nothing at all is
//!   applied: a foreign ServiceAccount `default` or Service `broker` is never taken over,
//!   and garbage collection never deletes what was not ours;
//! * **adoption**: a child of ours that the Go operator wrote (an `Update` entry of its
//!   manager in `managedFields`) has those fields moved to this controller's `Apply` entry
//!   first ([`crate::managed_fields`]), so the apply removes the ones it does not set;
//! * every child is server-side applied with `force` under [`FIELD_MANAGER`], so the API
//!   server computes the drift and no comparison code exists; missing Secrets are created
//!   (a 409 leaves the existing one alone), generated Secrets due for renewal are replaced
//!   with the observed `resourceVersion` as precondition;
//! * [`Children`] is destructured without `..`: a new child that is never applied does not
//!   compile;
//! * pruning is one generic function over (kind, names to keep): it lists the kind by the
//!   children's labels (metadata only), and deletes what this Interconnect controls and no
//!   longer wants. A 404 on delete means someone was faster, for every kind alike.

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
use crate::managed_fields::Adoption;
use crate::owner::{FIELD_MANAGER, Owner};
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
async fn conflict<K: Child>(
    client: &kube::Client,
    o: &Owner,
    name: &str,
) -> Result<(Option<Conflict>, Option<Adoption>), Error> {
    let meta = Api::<K>::namespaced(client.clone(), o.namespace())
        .get_metadata_opt(name)
        .await
        .map_err(|source| Error::Get { kind: K::kind(&()).into_owned(), name: name.into(), source })?;
    let Some(meta) = meta else { return Ok((None, None)) };
    match Conflict::of(o, &K::kind(&()), name, meta.owner_references()) {
        Some(c) => Ok((Some(c), None)),
        None => Ok((None, Adoption::of::<K>(&meta.metadata, FIELD_MANAGER))),
    }
}

/// Every child of `children` whose name is taken by an object `o` does not control, and
/// every one of ours to adopt; the workload was already looked at by observe.
async fn conflicts(
    client: &kube::Client,
    o: &Owner,
    children: &Children,
    workload: (Option<Conflict>, Option<Adoption>),
) -> Result<Found, Error> {
    let mut found = Found::default();
    found.extend(workload);
    found.extend(conflict::<ServiceAccount>(client, o, &children.service_account.name_any()).await?);
    found.extend(conflict::<Role>(client, o, &children.role.name_any()).await?);
    found.extend(conflict::<RoleBinding>(client, o, &children.role_binding.name_any()).await?);
    if let Some(cm) = &children.sasl_config_map {
        found.extend(conflict::<ConfigMap>(client, o, &cm.name_any()).await?);
    }
    found.extend(conflict::<Service>(client, o, &children.service.name_any()).await?);
    match &children.exposure {
        Exposure::Ingresses(list) => {
            for i in list {
                found.extend(conflict::<Ingress>(client, o, &i.name_any()).await?);
            }
        }
        Exposure::Routes(list) => {
            for r in list {
                found.extend(conflict::<Route>(client, o, &r.name_any()).await?);
            }
        }
    }
    Ok(found)
}

/// Replaces the generated Secret `s` (its `resourceVersion` is the precondition).
async fn replace_secret(client: &kube::Client, ns: &str, s: &Secret) -> Result<(), Error> {
    let name = s.name_any();
    Api::<Secret>::namespaced(client.clone(), ns)
        .replace(&name, &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, s)
        .await
        .map(|_| ())
        .map_err(|source| Error::Update { kind: "Secret".into(), name, source })
}

/// Creates `obj` unless an object of its name exists (409 is success: never overwritten).
async fn create_if_missing<K: Child>(client: &kube::Client, ns: &str, obj: &K) -> Result<(), Error> {
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match Api::<K>::namespaced(client.clone(), ns).create(&pp, obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(source) => Err(Error::Create { kind: K::kind(&()).into_owned(), name: obj.name_any(), source }),
    }
}

/// Deletes the objects of kind `ar` labelled as children of `o`, controlled by it, and not
/// in `keep`. Returns them as `Kind name`.
async fn prune(
    client: &kube::Client,
    o: &Owner,
    ar: &ApiResource,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), o.namespace(), ar);
    let list = api
        .list_metadata(&ListParams::default().labels(&o.children_selector()))
        .await
        .map_err(|source| Error::List { kind: ar.kind.clone(), source })?;
    let mut deleted = Vec::new();
    for obj in list.items {
        let controlled = o.controls(obj.owner_references());
        let name = obj.name_any();
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
    o: &Owner,
    children: Children,
    workload: (Option<Conflict>, Option<Adoption>),
    prune_orphans: bool,
) -> Result<Applied, Error> {
    let Found { conflicts, adoptions } = conflicts(client, o, &children, workload).await?;
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
        create_if_missing(client, ns, s).await?;
    }
    for s in &update {
        replace_secret(client, ns, s).await?;
    }
    for name in keep_secrets {
        keep.insert::<Secret>(name);
    }
    let workload = match workload {
        Workload::Deployment(d) => {
            keep.insert::<Deployment>(d.name_any());
            WorkloadStatus::of_deployment(&d, &ssa(client, ns, d.as_ref()).await?)
        }
        Workload::DaemonSet(d) => {
            keep.insert::<DaemonSet>(d.name_any());
            WorkloadStatus::of_daemon_set(&ssa(client, ns, d.as_ref()).await?)
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
            pruned.extend(prune(client, o, ar, names).await?);
        }
    }
    Ok(Applied { workload, pruned, conflicts: Vec::new(), adopted })
}
