//! Server-side apply and ownership: the one way a child is written. It judges who holds
//! each name (the stores, a metadata GET where a create found it taken), writes a child by
//! server-side apply or, for a name no read vouched for, by a conditional apply that creates
//! ([`create`]), and undoes what a pass created when it stops. It knows no kind of child in
//! particular: the Service's ports, Secrets, the workload and pruning are its siblings'.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::builders::{Exposure, Workload};
use crate::cache::{Cache, Cached};
use crate::managed_fields::Adoption;
use crate::reconcile::build::Children;
use crate::reconcile::observe::WorkloadState;
use crate::reconcile::types::{Applied, Conflict, Ownership, api_message};
use crate::route::Route;
use crate::validated::{FIELD_MANAGER, ValidatedInterconnect};

/// Why applying failed. Every variant names the child (`kind`, `name`) and carries the API
/// server's error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A server-side apply was refused.
    #[error("applying {kind} {name}: {}", api_message(.source))]
    Apply { kind: String, name: String, source: kube::Error },
    /// Creating a generated Secret failed (other than "already exists").
    #[error("creating {kind} {name}: {}", api_message(.source))]
    Create { kind: String, name: String, source: kube::Error },
    /// An object observed missing exists (409 on create): the pass ran on a stale
    /// observation and is retried at once ([`Error::is_stale`]).
    #[error("{kind} {name} appeared since it was observed missing")]
    Exists { kind: String, name: String },
    /// Listing a kind for pruning failed.
    #[error("listing {kind} to prune: {}", api_message(.source))]
    List { kind: String, source: kube::Error },
    /// Looking up who holds a child's name failed.
    #[error("reading {kind} {name}: {}", api_message(.source))]
    Get { kind: String, name: String, source: kube::Error },
    /// Replacing a generated Secret failed (409: it changed since it was observed), or
    /// taking over managed fields failed.
    #[error("updating {kind} {name}: {}", api_message(.source))]
    Update { kind: String, name: String, source: kube::Error },
    /// Deleting an orphan failed.
    #[error("deleting {kind} {name}: {}", api_message(.source))]
    Delete { kind: String, name: String, source: kube::Error },
}

impl Error {
    /// The API server's error, when the failure is one.
    pub(crate) fn source_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Apply { source, .. }
            | Error::Create { source, .. }
            | Error::List { source, .. }
            | Error::Get { source, .. }
            | Error::Update { source, .. }
            | Error::Delete { source, .. } => Some(source),
            Error::Exists { .. } => None,
        }
    }

    /// Whether the pass failed only because its observation was stale ([`Error::Exists`], or
    /// a 409 replacing a generated Secret): nothing is wrong, the next pass will see more.
    pub(crate) fn is_stale(&self) -> bool {
        matches!(self, Error::Exists { .. })
            || matches!(self, Error::Update { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

/// A namespaced, typed child object.
pub(super) trait Child:
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

/// Server-side applies `obj` with `force` under [`FIELD_MANAGER`]; returns the stored object,
/// whose `resourceVersion` is remembered as the controller's own ([`crate::cache::OwnWrites`]).
pub(super) async fn ssa<K: Child>(
    client: &kube::Client,
    cache: &Cache,
    ns: &str,
    obj: &K,
) -> Result<K, Error> {
    let name = obj.name_any();
    let pending = cache.own.begin(&cache.drift, &K::kind(&()), ns, &name);
    let applied = Api::<K>::namespaced(client.clone(), ns)
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map_err(|source| Error::Apply { kind: K::kind(&()).into_owned(), name, source })?;
    pending.record(applied.meta());
    Ok(applied)
}

/// A child's name no read vouched for: missing from its labelled store, and no create found
/// it taken ([`crate::cache::Outside`]). Written with [`create`]; read only to list every
/// conflict of a pass that found one.
#[derive(Debug)]
pub(super) struct Unread {
    pub(super) resource: ApiResource,
    pub(super) name: String,
}

impl Unread {
    fn of<K: Child>(name: &str) -> Unread {
        Unread { resource: ApiResource::erase::<K>(&()), name: name.into() }
    }
}

/// What the look-up of the children's names found: objects in the way, objects of ours
/// whose fields the Go operator wrote (to be taken over before the apply), and names not
/// read.
#[derive(Debug, Default)]
pub(super) struct Found {
    pub(super) conflicts: Vec<Conflict>,
    pub(super) adoptions: Vec<Adoption>,
    pub(super) unread: Vec<Unread>,
}

impl Found {
    fn add<T>(&mut self, ownership: Ownership<T>) {
        match ownership {
            Ownership::Free | Ownership::Ours(_, None) | Ownership::Unverified => {}
            Ownership::Ours(_, Some(a)) => self.adoptions.push(a),
            Ownership::Foreign(c) => self.conflicts.push(c),
        }
    }

    /// Looks up `name` of kind `K`: in its labelled store; with one metadata GET when a
    /// create found it taken before ([`crate::cache::Outside`], forgotten when the store
    /// shows it or the read finds nothing); else it is left [`Unread`].
    pub(super) async fn look<K: Child + Cached>(
        &mut self,
        client: &kube::Client,
        cache: &Cache,
        o: &ValidatedInterconnect,
        name: &str,
    ) -> Result<(), Error> {
        let (kind, ns) = (K::kind(&()), o.namespace());
        match cache.meta::<K>(ns, name) {
            Some(meta) => {
                cache.outside.remove(&kind, ns, name);
                self.add(judge::<K>(o, name, meta));
            }
            None if cache.outside.contains(&kind, ns, name) => {
                let found = read::<K>(client, o, name).await?;
                if matches!(found, Ownership::Free) {
                    cache.outside.remove(&kind, ns, name);
                }
                self.add(found);
            }
            None => self.unread.push(Unread::of::<K>(name)),
        }
        Ok(())
    }
}

/// Who holds `name` of kind `K`, judged from its metadata `meta`.
fn judge<K: Child>(o: &ValidatedInterconnect, name: &str, meta: ObjectMeta) -> Ownership {
    match Conflict::of(o, &K::kind(&()), name, meta.owner_references.as_deref().unwrap_or_default()) {
        Some(c) => Ownership::Foreign(c),
        None => Ownership::Ours((), Adoption::of::<K>(&meta, FIELD_MANAGER)),
    }
}

/// Who holds `name` of kind `K`, from one metadata GET.
pub(super) async fn read<K: Child>(
    client: &kube::Client,
    o: &ValidatedInterconnect,
    name: &str,
) -> Result<Ownership, Error> {
    let found = Api::<K>::namespaced(client.clone(), o.namespace())
        .get_metadata_opt(name)
        .await
        .map_err(|source| Error::Get { kind: K::kind(&()).into_owned(), name: name.into(), source })?;
    Ok(match found {
        Some(m) => judge::<K>(o, name, m.metadata),
        None => Ownership::Free,
    })
}

/// The conflicts among `unread` names (one metadata GET each), remembered in
/// [`crate::cache::Outside`]: so that a pass that found one conflict lists every one.
pub(super) async fn conflicts_among(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    unread: Vec<Unread>,
) -> Result<Vec<Conflict>, Error> {
    let ns = o.namespace();
    let mut conflicts = Vec::new();
    for Unread { resource, name } in unread {
        let found = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource)
            .get_metadata_opt(&name)
            .await
            .map_err(|source| Error::Get { kind: resource.kind.clone(), name: name.clone(), source })?;
        let Some(meta) = found else { continue };
        let refs = meta.metadata.owner_references.as_deref().unwrap_or_default();
        if let Some(c) = Conflict::of(o, &resource.kind, &name, refs) {
            cache.outside.insert(&resource.kind, ns, &name);
            conflicts.push(c);
        }
    }
    Ok(conflicts)
}

/// Who holds each name of `children`: known conflicts and adoptions, and the names not
/// read. The workload's name was already looked at by observe.
pub(super) async fn look_up(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    children: &Children,
    workload: &Ownership<WorkloadState>,
) -> Result<Found, Error> {
    let mut found = Found::default();
    match (workload, children.workload.built()) {
        (Ownership::Unverified, Workload::Deployment(_)) => {
            found.unread.push(Unread::of::<Deployment>(o.name()))
        }
        (Ownership::Unverified, Workload::DaemonSet(_)) => {
            found.unread.push(Unread::of::<DaemonSet>(o.name()))
        }
        (known, _) => found.add(known.clone()),
    }
    found.look::<ServiceAccount>(client, cache, o, &children.service_account.name_any()).await?;
    if let Some(role) = &children.role {
        found.look::<Role>(client, cache, o, &role.name_any()).await?;
    }
    if let Some(binding) = &children.role_binding {
        found.look::<RoleBinding>(client, cache, o, &binding.name_any()).await?;
    }
    found.look::<ConfigMap>(client, cache, o, &children.router_config_map.name_any()).await?;
    if let Some(cm) = &children.sasl_config_map {
        found.look::<ConfigMap>(client, cache, o, &cm.name_any()).await?;
    }
    found.look::<Service>(client, cache, o, &children.service.name_any()).await?;
    if let Some(pdb) = &children.disruption_budget {
        found.look::<PodDisruptionBudget>(client, cache, o, &pdb.name_any()).await?;
    }
    if let Some(policy) = &children.network_policy {
        found.look::<NetworkPolicy>(client, cache, o, &policy.name_any()).await?;
    }
    match &children.exposure {
        Exposure::Ingresses(list) => {
            for i in list {
                found.look::<Ingress>(client, cache, o, &i.name_any()).await?;
            }
        }
        Exposure::Routes(list) => {
            for r in list {
                // Routes are not watched: always read by name.
                found.add(read::<Route>(client, o, &r.name_any()).await?);
            }
        }
    }
    found.conflicts.extend(children.secrets.conflicts.iter().cloned());
    Ok(found)
}

/// The `resourceVersion` precondition that turns a server-side apply into a create: no
/// object ever has it (etcd's revisions of written objects start above 1), so the API
/// server refuses the apply with 409 Conflict when any object holds the name, and creates
/// the object otherwise, under [`FIELD_MANAGER`]'s `Apply` entry as any apply would.
///
/// A `POST` would check the same in one request, but leave an `Update` entry in
/// `managedFields`: every later apply would then have to move those fields to the apply
/// entry first, or never remove them.
const CREATE_ONLY: &str = "1";

/// Creates `obj` with a conditional server-side apply ([`CREATE_ONLY`]). `None` when an
/// object holds its name (409): nothing was written.
pub(super) async fn create<K: Child>(
    client: &kube::Client,
    cache: &Cache,
    ns: &str,
    obj: &K,
) -> Result<Option<K>, Error> {
    let mut obj = obj.clone();
    obj.meta_mut().resource_version = Some(CREATE_ONLY.into());
    match ssa(client, cache, ns, &obj).await {
        Ok(created) => Ok(Some(created)),
        Err(Error::Apply { source: kube::Error::Api(s), .. }) if s.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The outcome of writing one child.
pub(super) enum Put<K> {
    /// Applied (or created): the API server's answer.
    Written(K),
    /// Its name is held by an object this Interconnect does not control: not written.
    Taken(Conflict),
}

/// Writes the children of one pass in order: a name [`Unread`] is created first
/// ([`create`]), any other applied.
pub(super) struct Writer<'a> {
    pub(super) client: &'a kube::Client,
    pub(super) cache: &'a Cache,
    pub(super) o: &'a ValidatedInterconnect,
    /// Names not read and not yet written.
    pub(super) unread: Vec<Unread>,
    /// Children whose fields written by the Go operator were taken over (`Kind name`).
    pub(super) adopted: Vec<String>,
    /// What this pass created (kind, name, uid), for [`Writer::undo`].
    pub(super) created: Vec<(ApiResource, String, Option<String>)>,
}

impl Writer<'_> {
    /// Whether `kind` `name` is [`Unread`]; it is no longer once asked.
    pub(super) fn take_unread(&mut self, kind: &str, name: &str) -> bool {
        let at = self.unread.iter().position(|u| u.resource.kind == kind && u.name == name);
        at.map(|i| self.unread.remove(i)).is_some()
    }

    /// Takes over the fields the Go operator wrote on a child of ours ([`Adoption`]).
    pub(super) async fn adopt(&mut self, a: Adoption) -> Result<(), Error> {
        let ns = self.o.namespace();
        let pending = self.cache.own.begin(&self.cache.drift, a.kind(), ns, a.name());
        let written = a.write(self.client, ns).await.map_err(|source| Error::Update {
            kind: "managed fields of".into(),
            name: a.what.clone(),
            source,
        })?;
        pending.record(&written);
        self.adopted.push(a.what);
        Ok(())
    }

    /// Writes `obj`: server-side applies it, or, when its name is [`Unread`], creates it. A
    /// refused create reads who holds the name: a foreign object is [`Put::Taken`] (and
    /// remembered: [`crate::cache::Outside`]); a child of ours is applied (after the
    /// take-over of the Go operator's fields), unless `stale_if_ours`, when the pass was
    /// built without it: [`Error::Exists`], and the next pass reads it.
    pub(super) async fn put<K: Child>(&mut self, obj: &K, stale_if_ours: bool) -> Result<Put<K>, Error> {
        let (client, cache, ns) = (self.client, self.cache, self.o.namespace());
        let (kind, name) = (K::kind(&()), obj.name_any());
        if self.take_unread(&kind, &name) {
            if let Some(created) = create(client, cache, ns, obj).await? {
                self.created.push((ApiResource::erase::<K>(&()), name, created.meta().uid.clone()));
                return Ok(Put::Written(created));
            }
            match read::<K>(client, self.o, &name).await? {
                Ownership::Foreign(c) => {
                    cache.outside.insert(&kind, ns, &name);
                    return Ok(Put::Taken(c));
                }
                Ownership::Ours(..) if stale_if_ours => {
                    cache.outside.insert(&kind, ns, &name);
                    return Err(Error::Exists { kind: kind.into_owned(), name });
                }
                Ownership::Ours(_, Some(a)) => self.adopt(a).await?,
                // Ours without the Go operator's fields, or deleted since: the apply does it.
                Ownership::Ours(_, None) | Ownership::Free | Ownership::Unverified => {}
            }
        }
        Ok(Put::Written(ssa(client, cache, ns, obj).await?))
    }

    /// Deletes the ConfigMaps, Secrets, NetworkPolicy, workload, Ingresses and Routes this pass created
    /// (newest first; each with its uid as precondition, a 404 or 409 means it is gone or is
    /// another object already), and forgets the copies kept of them
    /// ([`crate::cache::Written`]): a pass that ends early leaves nothing it made that
    /// routers would run with, so no configuration, credentials or routers exist for an
    /// Interconnect whose name is taken, and a users Secret created by a pass that ran
    /// without its routers is made again, and reported, by the next one. The next pass sees
    /// them gone even before the watch delivers their deletions
    /// ([`crate::cache::Written::undone`]). A ServiceAccount,
    /// Role, RoleBinding or Service it created stays: they run nothing, the controller holds
    /// no permission to delete them (`deploy/`), and they are collected with the
    /// Interconnect.
    pub(super) async fn undo(&mut self) -> Result<(), Error> {
        let ns = self.o.namespace();
        for (resource, name, uid) in std::mem::take(&mut self.created).into_iter().rev() {
            if !matches!(
                resource.kind.as_str(),
                "ConfigMap" | "Secret" | "NetworkPolicy" | "Deployment" | "DaemonSet" | "Ingress" | "Route"
            ) {
                continue;
            }
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: uid.clone(), resource_version: None }),
                ..DeleteParams::background()
            };
            match Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &resource)
                .delete(&name, &dp)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(source) => return Err(Error::Delete { kind: resource.kind, name, source }),
            }
            // Gone for the next pass too, even before the watch delivers the deletion.
            match resource.kind.as_str() {
                "Deployment" => self.cache.written_deployments.undone(ns, &name, uid),
                "DaemonSet" => self.cache.written_daemon_sets.undone(ns, &name, uid),
                "Secret" => self.cache.written_secrets.undone(ns, &name, uid),
                _ => {}
            }
        }
        Ok(())
    }

    /// Ends a pass whose write of a child found `taken`: deletes what the pass created
    /// ([`Writer::undo`]), and reads the names not yet written, so that every conflict is
    /// reported.
    pub(super) async fn stop(mut self, taken: Conflict) -> Result<Applied, Error> {
        self.undo().await?;
        let mut conflicts = vec![taken];
        conflicts.extend(conflicts_among(self.client, self.cache, self.o, self.unread).await?);
        Ok(Applied { conflicts, adopted: self.adopted, ..Applied::default() })
    }
}
