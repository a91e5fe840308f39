//! Stage 3, **apply**: write [`Children`] to the API server and prune what is no longer
//! wanted.
//!
//! * **ownership before every write**: a child name in its labelled store ([`crate::cache`])
//!   is judged from the store; a name a create found taken before
//!   ([`crate::cache::Outside`]) is read first (one metadata GET); any other name, missing
//!   from its store, is **created** with a conditional server-side apply ([`create`]): the
//!   API server refuses it (409) when any object holds the name, so the create is the check,
//!   and only a refused one is read. An object that exists and is not controlled by this
//!   Interconnect (controller owner reference with its uid) is a [`Conflict`]: it is never
//!   written, a foreign ServiceAccount `default` or Service `broker` is never taken over, and
//!   garbage collection never deletes what was not ours. A conflict known before the writes
//!   stops the pass before any write; one a create finds stops it there, and the
//!   ConfigMaps, Secrets and workload this pass created are deleted again
//!   ([`Writer::undo`]), so nothing routers would run with is left. Either way every name not yet written is then read, so the condition
//!   lists every conflict;
//! * **order**: ServiceAccount, Role, RoleBinding, the ConfigMaps and Secrets, the workload
//!   (its new pods read the new files), the Service and the Ingresses or Routes;
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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::build::{Children, Secrets, WorkloadChange};
use super::observe::{Observed, WorkloadState};
use super::types::{Applied, Conflict, Generation, Ownership, WorkloadStatus, api_message};
use crate::builders::{Exposure, Workload};
use crate::cache::{Cache, Cached};
use crate::managed_fields::Adoption;
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

/// Server-side applies `obj` with `force` under [`FIELD_MANAGER`]; returns the stored object,
/// whose `resourceVersion` is remembered as the controller's own ([`crate::cache::OwnWrites`]).
async fn ssa<K: Child>(client: &kube::Client, cache: &Cache, ns: &str, obj: &K) -> Result<K, Error> {
    let name = obj.name_any();
    let pending = cache.own.begin(&cache.drift, &K::kind(&()), ns, &name);
    let applied = Api::<K>::namespaced(client.clone(), ns)
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map_err(|source| Error::Apply { kind: K::kind(&()).into_owned(), name, source })?;
    pending.record(applied.meta());
    Ok(applied)
}

/// The field manager of [`take_over_ports`]: a name of its own, so its `Update` entry is
/// never taken for the Go operator's ([`crate::managed_fields::LEGACY_MANAGERS`]).
pub(crate) const PORTS_MANAGER: &str = "qdr-operator-ports";

/// Server-side applies the Service and makes its `spec.ports` exactly the desired list.
///
/// Server-side apply merges list-map entries by key (`port`, `protocol`) and never
/// removes an entry another manager owns: a port someone added stays, and someone's edit of
/// an entry's `port` leaves an entry whose `name` collides with the one applied, which the
/// API server refuses (`spec.ports[1].name: Duplicate value`) on every apply, for ever.
/// The children are ours, so the controller takes the field over as a whole: when the
/// apply is refused as invalid, or the answer shows ports that are not the desired ones,
/// `spec.ports` is replaced by the desired list ([`take_over_ports`]) and applied again.
async fn apply_service(w: &mut Writer<'_>, desired: &Service) -> Result<Put<()>, Error> {
    let (client, cache, ns) = (w.client, w.cache, w.o.namespace());
    let applied = match w.put(desired, false).await {
        Ok(Put::Written(applied)) => applied,
        Ok(Put::Taken(c)) => return Ok(Put::Taken(c)),
        Err(Error::Apply { source: kube::Error::Api(s), .. }) if s.code == 422 => {
            take_over_ports(client, cache, ns, desired).await?;
            ssa(client, cache, ns, desired).await?
        }
        Err(e) => return Err(e),
    };
    if !crate::builders::same_ports(desired, &applied) {
        take_over_ports(client, cache, ns, desired).await?;
        ssa(client, cache, ns, desired).await?;
    }
    Ok(Put::Written(()))
}

/// Replaces `spec.ports` of the Service by the desired list (a merge patch under
/// [`PORTS_MANAGER`]): entries others added or changed are gone, node ports of entries
/// kept are kept by the API server.
async fn take_over_ports(
    client: &kube::Client,
    cache: &Cache,
    ns: &str,
    desired: &Service,
) -> Result<(), Error> {
    let name = desired.name_any();
    let ports = desired.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    // A JSON merge patch (RFC 7386) replaces a list as a whole.
    let patch = serde_json::json!({"spec": {"ports": ports}});
    let pp = PatchParams { field_manager: Some(PORTS_MANAGER.into()), ..Default::default() };
    let pending = cache.own.begin(&cache.drift, "Service", ns, &name);
    let patched = Api::<Service>::namespaced(client.clone(), ns)
        .patch(&name, &pp, &Patch::Merge(patch))
        .await
        .map_err(|source| Error::Update { kind: "Service".into(), name, source })?;
    pending.record(patched.meta());
    Ok(())
}

/// A child's name no read vouched for: missing from its labelled store, and no create found
/// it taken ([`crate::cache::Outside`]). Written with [`create`]; read only to list every
/// conflict of a pass that found one.
#[derive(Debug)]
struct Unread {
    resource: ApiResource,
    name: String,
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
struct Found {
    conflicts: Vec<Conflict>,
    adoptions: Vec<Adoption>,
    unread: Vec<Unread>,
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
    async fn look<K: Child + Cached>(
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
async fn read<K: Child>(
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
async fn conflicts_among(
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
async fn look_up(
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
    found.look::<Role>(client, cache, o, &children.role.name_any()).await?;
    found.look::<RoleBinding>(client, cache, o, &children.role_binding.name_any()).await?;
    found.look::<ConfigMap>(client, cache, o, &children.router_config_map.name_any()).await?;
    if let Some(cm) = &children.sasl_config_map {
        found.look::<ConfigMap>(client, cache, o, &cm.name_any()).await?;
    }
    found.look::<Service>(client, cache, o, &children.service.name_any()).await?;
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
async fn create<K: Child>(
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
enum Put<K> {
    /// Applied (or created): the API server's answer.
    Written(K),
    /// Its name is held by an object this Interconnect does not control: not written.
    Taken(Conflict),
}

/// Writes the children of one pass in order: a name [`Unread`] is created first
/// ([`create`]), any other applied.
struct Writer<'a> {
    client: &'a kube::Client,
    cache: &'a Cache,
    o: &'a ValidatedInterconnect,
    /// Names not read and not yet written.
    unread: Vec<Unread>,
    /// Children whose fields written by the Go operator were taken over (`Kind name`).
    adopted: Vec<String>,
    /// What this pass created (kind, name, uid), for [`Writer::undo`].
    created: Vec<(ApiResource, String, Option<String>)>,
}

impl Writer<'_> {
    /// Whether `kind` `name` is [`Unread`]; it is no longer once asked.
    fn take_unread(&mut self, kind: &str, name: &str) -> bool {
        let at = self.unread.iter().position(|u| u.resource.kind == kind && u.name == name);
        at.map(|i| self.unread.remove(i)).is_some()
    }

    /// Takes over the fields the Go operator wrote on a child of ours ([`Adoption`]).
    async fn adopt(&mut self, a: Adoption) -> Result<(), Error> {
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
    async fn put<K: Child>(&mut self, obj: &K, stale_if_ours: bool) -> Result<Put<K>, Error> {
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

    /// Deletes the ConfigMaps, Secrets, workload, Ingresses and Routes this pass created
    /// (newest first; each with its uid as precondition, a 404 or 409 means it is gone or is
    /// another object already), and forgets the copies kept of them
    /// ([`crate::cache::Written`]): a pass that ends early leaves nothing it made that
    /// routers would run with, so no configuration, credentials or routers exist for an
    /// Interconnect whose name is taken, and a users Secret created by a pass that ran
    /// without its routers is made again, and reported, by the next one. A ServiceAccount,
    /// Role, RoleBinding or Service it created stays: they run nothing, the controller holds
    /// no permission to delete them (`deploy/`), and they are collected with the
    /// Interconnect.
    async fn undo(&mut self) -> Result<(), Error> {
        let ns = self.o.namespace();
        for (resource, name, uid) in std::mem::take(&mut self.created).into_iter().rev() {
            if !matches!(
                resource.kind.as_str(),
                "ConfigMap" | "Secret" | "Deployment" | "DaemonSet" | "Ingress" | "Route"
            ) {
                continue;
            }
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid, resource_version: None }),
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
            match resource.kind.as_str() {
                "Deployment" => self.cache.written_deployments.forget(ns, &name),
                "DaemonSet" => self.cache.written_daemon_sets.forget(ns, &name),
                "Secret" => self.cache.written_secrets.forget(ns, &name),
                _ => {}
            }
        }
        Ok(())
    }

    /// Ends a pass whose write of a child found `taken`: deletes what the pass created
    /// ([`Writer::undo`]), and reads the names not yet written, so that every conflict is
    /// reported.
    async fn stop(mut self, taken: Conflict) -> Result<Applied, Error> {
        self.undo().await?;
        let mut conflicts = vec![taken];
        conflicts.extend(conflicts_among(self.client, self.cache, self.o, self.unread).await?);
        Ok(Applied { conflicts, adopted: self.adopted, ..Applied::default() })
    }
}

/// `s`, the controller's replacement of a generated Secret, with what others added to the
/// metadata of `current` (the Secret as read just before): their labels and annotations
/// (under the controller's own labels, and with the rotation-step annotation set or removed
/// as `s` says), finalizers and `immutable`.
pub(crate) fn keeping_others(current: Secret, s: &Secret) -> Secret {
    let mut out = s.clone();
    let mut labels = current.metadata.labels.unwrap_or_default();
    labels.extend(s.metadata.labels.clone().unwrap_or_default());
    out.metadata.labels = Some(labels);
    let mut annotations = current.metadata.annotations.unwrap_or_default();
    annotations.remove(crate::credentials::STEP_AT);
    annotations.extend(s.metadata.annotations.clone().unwrap_or_default());
    out.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    out.metadata.finalizers = current.metadata.finalizers;
    out.immutable = current.immutable;
    out
}

/// Replaces the generated Secret `s` (its `resourceVersion` is the precondition: a Secret
/// changed since the pass observed it is refused with 409). The store keeps only what a
/// pass decides from ([`crate::cache`]), so the Secret is read first and the replacement
/// keeps what others added to its metadata ([`keeping_others`]): one read per renewal or
/// rotation step, none per pass.
async fn replace_secret(client: &kube::Client, cache: &Cache, ns: &str, s: &Secret) -> Result<Secret, Error> {
    let name = s.name_any();
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let current = (api.get_opt(&name).await).map_err(|source| Error::Get {
        kind: "Secret".into(),
        name: name.clone(),
        source,
    })?;
    // Gone meanwhile: the replace is refused with 404, as it was before the read.
    let s = current.map_or_else(|| s.clone(), |c| keeping_others(c, s));
    let pending = cache.own.begin(&cache.drift, "Secret", ns, &name);
    let replaced = api
        .replace(&name, &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &s)
        .await
        .map_err(|source| Error::Update { kind: "Secret".into(), name, source })?;
    pending.record(replaced.meta());
    Ok(replaced)
}

/// Creates `obj`, observed missing. An object of its name is never overwritten: a 409 means
/// the observation was stale (a watch event not yet arrived), and [`Error::Exists`] stops
/// the pass before anything built from that observation (the credentials hash of the pod
/// template) is written.
async fn create_if_missing<K: Child>(
    client: &kube::Client,
    cache: &Cache,
    ns: &str,
    obj: &K,
) -> Result<K, Error> {
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let pending = cache.own.begin(&cache.drift, &K::kind(&()), ns, &obj.name_any());
    match Api::<K>::namespaced(client.clone(), ns).create(&pp, obj).await {
        Ok(created) => {
            pending.record(created.meta());
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::Exists { kind: K::kind(&()).into_owned(), name: obj.name_any() })
        }
        Err(source) => Err(Error::Create { kind: K::kind(&()).into_owned(), name: obj.name_any(), source }),
    }
}

/// Deletes those of `children` (kind `K`, labelled as children of `o`) that `o` controls
/// and are not in `keep`. Returns them as `Kind name`; a 404 means someone was faster.
async fn delete_orphans<K: Child>(
    client: &kube::Client,
    o: &ValidatedInterconnect,
    children: Vec<ObjectMeta>,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let api: Api<K> = Api::namespaced(client.clone(), o.namespace());
    let kind = K::kind(&());
    let mut deleted = Vec::new();
    for meta in children {
        let controlled = o.controls(meta.owner_references.as_deref().unwrap_or_default());
        let name = meta.name.clone().unwrap_or_default();
        if !controlled || keep.contains(&name) {
            continue;
        }
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(format!("{kind} {name}")),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Delete { kind: kind.to_string(), name, source }),
        }
    }
    Ok(deleted)
}

/// Prunes kind `K` from its labelled store ([`delete_orphans`]).
async fn prune<K: Child + Cached>(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let children = cache.labelled::<K>(o.namespace(), &o.children_labels());
    delete_orphans::<K>(client, o, children, keep).await
}

/// Prunes Routes, which are not watched: they are listed (metadata only).
async fn prune_routes(
    client: &kube::Client,
    o: &ValidatedInterconnect,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let children = Api::<Route>::namespaced(client.clone(), o.namespace())
        .list_metadata(&ListParams::default().labels(&o.children_selector()))
        .await
        .map_err(|source| Error::List { kind: "Route".into(), source })?
        .items
        .into_iter()
        .map(|m| m.metadata)
        .collect();
    delete_orphans::<Route>(client, o, children, keep).await
}

/// The names of the children applied, by the kinds that can become orphans.
#[derive(Debug, Default)]
struct Keep {
    deployments: BTreeSet<String>,
    daemon_sets: BTreeSet<String>,
    ingresses: BTreeSet<String>,
    secrets: BTreeSet<String>,
    /// `None` when Routes are not served (Ingresses are used): nothing to prune.
    routes: Option<BTreeSet<String>>,
}

impl Keep {
    /// Deletes every child of `o` that is not kept (the Deployment after `Any` → `Every`,
    /// the Ingress of a listener no longer exposed, ...).
    async fn prune(
        &self,
        client: &kube::Client,
        cache: &Cache,
        o: &ValidatedInterconnect,
    ) -> Result<Vec<String>, Error> {
        let mut pruned = prune::<Deployment>(client, cache, o, &self.deployments).await?;
        pruned.extend(prune::<DaemonSet>(client, cache, o, &self.daemon_sets).await?);
        pruned.extend(prune::<Ingress>(client, cache, o, &self.ingresses).await?);
        // Only what the controller generates: credentials (labelled) and the default users
        // Secret. A users Secret the user named, created and owned by an earlier release, is
        // theirs and never deleted here.
        let secrets = cache
            .labelled::<Secret>(o.namespace(), &o.children_labels())
            .into_iter()
            .filter(|m| {
                m.labels.as_ref().is_some_and(|l| l.contains_key(crate::credentials::GENERATED_LABEL))
                    || m.name.as_deref() == Some(o.default_users_secret().as_str())
            })
            .collect();
        pruned.extend(delete_orphans::<Secret>(client, o, secrets, &self.secrets).await?);
        if let Some(routes) = &self.routes {
            pruned.extend(prune_routes(client, o, routes).await?);
        }
        Ok(pruned)
    }
}

/// A fingerprint of everything [`apply`] would write for `children` (each child's JSON),
/// or `None` when Secrets are to be created or replaced, or a generated Secret's name is
/// taken (never skipped).
///
/// A pass whose children have the fingerprint of the last full apply of the same
/// generation, with no drift marked since ([`crate::cache::Drift`]), skips the applies:
/// they would all be no-ops. Such passes are woken by router pods and by the workload
/// controller's status, and cost only their status write. A full apply still runs at least
/// every [`super::RESYNC`].
fn fingerprint(children: &Children) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let s = &children.secrets;
    if !s.create.is_empty() || !s.update.is_empty() || !s.conflicts.is_empty() {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut add = |v: serde_json::Result<Vec<u8>>| v.ok().hash(&mut h);
    add(serde_json::to_vec(&children.service_account));
    add(serde_json::to_vec(&children.role));
    add(serde_json::to_vec(&children.role_binding));
    add(serde_json::to_vec(&children.router_config_map));
    add(serde_json::to_vec(&children.sasl_config_map));
    add(Ok(vec![u8::from(matches!(children.workload, WorkloadChange::Hold(_)))]));
    match children.workload.built() {
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
/// counts. `None` when a child is missing from its store (deleted by someone, or a watch
/// event not yet arrived): then apply.
fn unchanged(cache: &Cache, o: &ValidatedInterconnect, children: &Children) -> Option<Applied> {
    let ns = o.namespace();
    let all_stored = cache.meta::<ServiceAccount>(ns, &children.service_account.name_any()).is_some()
        && cache.meta::<Role>(ns, &children.role.name_any()).is_some()
        && cache.meta::<RoleBinding>(ns, &children.role_binding.name_any()).is_some()
        && cache.meta::<ConfigMap>(ns, &children.router_config_map.name_any()).is_some()
        && (children.sasl_config_map.iter()).all(|cm| cache.meta::<ConfigMap>(ns, &cm.name_any()).is_some())
        && cache.meta::<Service>(ns, &children.service.name_any()).is_some()
        && match &children.exposure {
            Exposure::Ingresses(list) => {
                list.iter().all(|i| cache.meta::<Ingress>(ns, &i.name_any()).is_some())
            }
            Exposure::Routes(_) => true,
        };
    if !all_stored {
        return None;
    }
    let held = matches!(children.workload, WorkloadChange::Hold(_));
    Some(Applied {
        workload: stored_status(cache, o, children.workload.built())?,
        held,
        ..Applied::default()
    })
}

/// The counts of the stored workload of `built`'s kind, from the store; `None` when it is
/// not there.
fn stored_status(cache: &Cache, o: &ValidatedInterconnect, built: &Workload) -> Option<WorkloadStatus> {
    Some(match built {
        Workload::Deployment(d) => {
            WorkloadStatus::of_deployment(d, cache.deployment(o.namespace(), o.name())?.as_ref())
        }
        Workload::DaemonSet(_) => {
            WorkloadStatus::of_daemon_set(cache.daemon_set(o.namespace(), o.name())?.as_ref())
        }
    })
}

/// The counts of whichever workload is stored under `o`'s name (a Deployment first), for a
/// held pass after a placement change; `None` when neither is stored.
fn running_status(cache: &Cache, o: &ValidatedInterconnect) -> Option<WorkloadStatus> {
    let (ns, name) = (o.namespace(), o.name());
    if let Some(d) = cache.deployment(ns, name) {
        return Some(WorkloadStatus::of_deployment(&d, &d));
    }
    cache.daemon_set(ns, name).map(|d| WorkloadStatus::of_daemon_set(&d))
}

/// [`apply`], or, when every write would be a no-op, only what it would report.
///
/// The applies are skipped when the generation was reconciled before, the workload needs
/// no take-over, no child of `o` drifted since its last successful full apply in this term,
/// every child is in its store, and the children have that apply's [`fingerprint`] (no
/// Secret to create or replace), less than [`super::RESYNC`] ago. A successful full apply
/// is recorded in the term's memo and clears the drift mark seen before it (a mark made
/// during the apply stays), unless a name was in the way; a failed one leaves the mark.
///
/// # Errors
/// As [`apply`].
///
/// `secrets_written` collects the names of the Secrets created or replaced, also when a later
/// write fails: the notices of those changes (a CA rotation step, new passwords) must reach
/// their users whatever happens to the rest of the pass.
pub(crate) async fn apply_or_reuse(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    observed: &Observed,
    children: Children,
    generation: Generation,
    secrets_written: &mut BTreeSet<String>,
) -> Result<Applied, Error> {
    let key = o.namespaced_name();
    let fingerprint = fingerprint(&children);
    let wanted = wanted_config_maps(cache, o, &children.router_config_map, children.sasl_config_map.as_ref());
    let drift = cache.drift.marked(&key);
    let adopting = matches!(observed.workload, Ownership::Ours(_, Some(_)));
    let reusable = match fingerprint {
        Some(f) if drift.is_none() && generation == Generation::Reconciled && !adopting => {
            cache.applied.is_current(&key, o.uid(), o.generation(), f, super::RESYNC)
        }
        _ => false,
    };
    let mut applied = match reusable.then(|| unchanged(cache, o, &children)).flatten() {
        Some(applied) => applied,
        None => {
            let mut applied =
                apply(client, cache, o, children, &observed.workload, generation, secrets_written).await?;
            if !applied.conflicts.is_empty() {
                return Ok(applied);
            }
            cache.drift.clear(&key, drift);
            if let Some(f) = fingerprint {
                cache.applied.record(&key, o.uid(), o.generation(), f);
            }
            applied.again = cache.drift.marked(&key).is_some();
            applied
        }
    };
    // ConfigMaps are pruned in every pass, not only a new generation's: a router
    // configuration of an earlier revision goes once no router mounts it, in whichever pass
    // sees that (the last old router's deletion wakes one).
    applied.pruned.extend(prune::<ConfigMap>(client, cache, o, &wanted).await?);
    Ok(applied)
}

/// The ConfigMaps `o` keeps: the current router configuration and the SASL ConfigMap, and
/// every ConfigMap a router pod of `o` still mounts (the configuration of an earlier revision
/// while its routers run, or the `<name>-router-config` of releases before content-addressed
/// names).
fn wanted_config_maps(
    cache: &Cache,
    o: &ValidatedInterconnect,
    router_config_map: &ConfigMap,
    sasl_config_map: Option<&ConfigMap>,
) -> BTreeSet<String> {
    let selector = o.selector();
    let selector: Vec<(&str, &str)> = selector.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut wanted = cache.mounted_config_maps(o.namespace(), &selector);
    wanted.insert(router_config_map.name_any());
    wanted.extend(sasl_config_map.map(ResourceExt::name_any));
    wanted
}

/// Writes the workload `w` (unless `held`: then it is kept from pruning as it is), and
/// returns its counts.
async fn write_workload(
    writer: &mut Writer<'_>,
    keep: &mut Keep,
    w: Workload,
    held: bool,
) -> Result<Put<WorkloadStatus>, Error> {
    let (cache, o) = (writer.cache, writer.o);
    Ok(Put::Written(match w {
        w if held => {
            // Whichever kind runs the routers is kept: after a placement change it is the
            // other kind (the spec's is not written while held).
            keep.deployments.insert(o.name().to_string());
            keep.daemon_sets.insert(o.name().to_string());
            stored_status(cache, o, &w).or_else(|| running_status(cache, o)).unwrap_or_default()
        }
        Workload::Deployment(d) => {
            keep.deployments.insert(d.name_any());
            let applied = match writer.put(d.as_ref(), true).await? {
                Put::Written(applied) => applied,
                Put::Taken(c) => return Ok(Put::Taken(c)),
            };
            let status = WorkloadStatus::of_deployment(&d, &applied);
            cache.written_deployments.record(applied);
            status
        }
        Workload::DaemonSet(d) => {
            keep.daemon_sets.insert(d.name_any());
            let applied = match writer.put(d.as_ref(), true).await? {
                Put::Written(applied) => applied,
                Put::Taken(c) => return Ok(Put::Taken(c)),
            };
            let status = WorkloadStatus::of_daemon_set(&applied);
            cache.written_daemon_sets.record(applied);
            status
        }
    }))
}

/// Applies every child of `o` (see the module docs for the rules), and for a
/// [`Generation::New`] deletes the children it no longer wants.
///
/// When a name is taken by an object `o` does not control, [`Applied::conflicts`] lists
/// every such name (starting with what observe found under the workload's name,
/// `workload`), and nothing is written after the write that found it, and what the pass
/// created for the routers is deleted ([`Writer::undo`]); when the look-up found it,
/// nothing is written at all.
///
/// # Errors
/// The first failed read or write, as an [`Error`] naming kind and name; [`Error::Exists`]
/// when the workload, missing from its store, exists and is ours (the pass was built
/// without it).
async fn apply(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    children: Children,
    workload: &Ownership<WorkloadState>,
    generation: Generation,
    secrets_written: &mut BTreeSet<String>,
) -> Result<Applied, Error> {
    let Found { mut conflicts, adoptions, unread } = look_up(client, cache, o, &children, workload).await?;
    if !conflicts.is_empty() {
        conflicts.extend(conflicts_among(client, cache, o, unread).await?);
        return Ok(Applied { conflicts, ..Applied::default() });
    }
    let mut w = Writer { client, cache, o, unread, adopted: Vec::new(), created: Vec::new() };
    for a in adoptions {
        w.adopt(a).await?;
    }
    let Children {
        service_account,
        role,
        role_binding,
        router_config_map,
        sasl_config_map,
        secrets: Secrets { create, update, keep: keep_secrets, conflicts: _ },
        workload,
        service,
        exposure,
    } = children;
    // Ends the pass when the write found the name taken, or the workload it was built
    // without: either way, without what it created.
    macro_rules! put {
        ($write:expr) => {
            match $write.await {
                Ok(Put::Written(written)) => written,
                Ok(Put::Taken(c)) => return w.stop(c).await,
                Err(e @ Error::Exists { .. }) => {
                    w.undo().await?;
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        };
    }
    let ns = o.namespace();
    let mut keep = Keep { secrets: keep_secrets, ..Keep::default() };
    put!(w.put(&service_account, false));
    put!(w.put(&role, false));
    put!(w.put(&role_binding, false));
    let (workload, held) = match workload {
        WorkloadChange::Apply(w) => (w, false),
        WorkloadChange::Hold(w) => (w, true),
    };
    // Before the workload: a router started from the new template reads the new
    // file. A held workload keeps the configuration its pods were started with.
    if !held {
        put!(w.put(&router_config_map, false));
    }
    if let Some(cm) = &sasl_config_map {
        put!(w.put(cm, false));
    }
    for s in &create {
        let created = create_if_missing(client, cache, ns, s).await?;
        w.created.push((ApiResource::erase::<Secret>(&()), s.name_any(), created.metadata.uid.clone()));
        cache.written_secrets.record(created);
        secrets_written.insert(s.name_any());
    }
    for s in &update {
        cache.written_secrets.record(replace_secret(client, cache, ns, s).await?);
        secrets_written.insert(s.name_any());
    }
    let workload = put!(write_workload(&mut w, &mut keep, workload, held));
    put!(apply_service(&mut w, &service));
    match exposure {
        Exposure::Ingresses(list) => {
            for i in &list {
                keep.ingresses.insert(i.name_any());
                put!(w.put(i, false));
            }
        }
        Exposure::Routes(list) => {
            let routes = keep.routes.insert(BTreeSet::new());
            for r in &list {
                routes.insert(r.name_any());
                put!(w.put(r, false));
            }
        }
    }
    let pruned = match generation {
        Generation::New => keep.prune(client, cache, o).await?,
        Generation::Reconciled => Vec::new(),
    };
    Ok(Applied { workload, pruned, conflicts: Vec::new(), adopted: w.adopted, held, again: false })
}
