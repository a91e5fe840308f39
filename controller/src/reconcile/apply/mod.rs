//! Stage 3, **apply**: write [`Children`] to the API server and prune what is no longer
//! wanted. This module orders the writes of one pass and decides when a pass may skip them;
//! how a child is written and who holds a name is [`write`]'s, and each kind with rules of
//! its own has a module: [`secrets`], [`workload`], [`exposure`] (the Service), [`prune`].
//!
//! * **ownership before every write**: a child name in its labelled store ([`crate::cache`])
//!   is judged from the store; a name a create found taken before
//!   ([`crate::cache::Outside`]) is read first (one metadata GET); any other name, missing
//!   from its store, is **created** with a conditional server-side apply ([`write::create`]): the
//!   API server refuses it (409) when any object holds the name, so the create is the check,
//!   and only a refused one is read. An object that exists and is not controlled by this
//!   Interconnect (controller owner reference with its uid) is a [`Conflict`]: it is never
//!   written, a foreign ServiceAccount `default` or Service `broker` is never taken over, and
//!   garbage collection never deletes what was not ours. A conflict known before the writes
//!   stops the pass before any write; one a create finds stops it there, and the
//!   ConfigMaps, Secrets and workload this pass created are deleted again
//!   ([`write::Writer::undo`]), so nothing routers would run with is left. Either way every name not yet written is then read, so the condition
//!   lists every conflict;
//! * **order**: ServiceAccount, Role, RoleBinding, the ConfigMaps and Secrets, the workload
//!   (its new pods read the new files), the PodDisruptionBudget, the Service and the
//!   Ingresses or Routes;
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
//!   deletes what this Interconnect controls and no longer wants. A 404 on delete means
//!   someone was faster, for every kind alike;
//! * **make before break**: after a placement change the workload of the other kind keeps
//!   its routers until the new one has all of them Ready ([`workload::retire_previous`], in
//!   every pass), whatever the generation.

mod exposure;
mod prune;
pub(super) mod secrets;
mod workload;
mod write;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::ApiResource;

use crate::builders::{Exposure, Workload};
use crate::cache::Cache;
use crate::reconcile::build::{Children, Secrets, WorkloadChange};
use crate::reconcile::observe::{Observed, WorkloadState};
use crate::reconcile::types::{Applied, Generation, Ownership};
use crate::validated::ValidatedInterconnect;
use exposure::apply_service;
use prune::{Keep, prune};
use secrets::{create_if_missing, replace_secret};
use workload::{retire_previous, stored_status, write_workload};
pub(crate) use write::Error;
use write::{Found, Put, Writer, conflicts_among, look_up};

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
    add(serde_json::to_vec(&children.disruption_budget));
    add(serde_json::to_vec(&children.network_policy));
    add(serde_json::to_vec(&children.service));
    add(serde_json::to_vec(&children.links_secret));
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
        && (children.role.iter()).all(|r| cache.meta::<Role>(ns, &r.name_any()).is_some())
        && (children.role_binding.iter()).all(|r| cache.meta::<RoleBinding>(ns, &r.name_any()).is_some())
        && cache.meta::<ConfigMap>(ns, &children.router_config_map.name_any()).is_some()
        && (children.sasl_config_map.iter()).all(|cm| cache.meta::<ConfigMap>(ns, &cm.name_any()).is_some())
        && cache.meta::<Service>(ns, &children.service.name_any()).is_some()
        && (children.links_secret.iter()).all(|s| cache.meta::<Secret>(ns, &s.name_any()).is_some())
        && (children.disruption_budget.iter())
            .all(|p| cache.meta::<PodDisruptionBudget>(ns, &p.name_any()).is_some())
        && (children.network_policy.iter()).all(|p| cache.meta::<NetworkPolicy>(ns, &p.name_any()).is_some())
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

/// What a pass wrote before it ended, whether or not it ended in an error
/// ([`apply_or_reuse`]).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The names of the Secrets created or replaced.
    pub(crate) secrets: BTreeSet<String>,
    /// The workload was applied (not held): a scaling, a new configuration or new
    /// credentials reached the routers' Deployment or DaemonSet.
    pub(crate) workload: bool,
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
/// `progress` records what was written (the Secrets created or replaced, the workload), also
/// when a later write fails: the notices of those changes (a CA rotation step, new
/// passwords, a scaling, a configuration rollout) must reach their users whatever happens to
/// the rest of the pass, since the next pass finds them made.
pub(crate) async fn apply_or_reuse(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    observed: &Observed,
    children: Children,
    generation: Generation,
    progress: &mut Progress,
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
    let deployment = matches!(children.workload.built(), Workload::Deployment(_));
    let mut applied = match reusable.then(|| unchanged(cache, o, &children)).flatten() {
        Some(applied) => applied,
        None => {
            let mut applied =
                apply(client, cache, o, children, &observed.workload, generation, progress).await?;
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
    // The workload a placement change replaces goes once the new one is whole, in whichever
    // pass sees that (make before break); a held pass touches neither.
    if !applied.held {
        let (pruned, previous) =
            retire_previous(client, cache, o, deployment, applied.workload, generation).await?;
        applied.pruned.extend(pruned);
        applied.previous = previous;
    }
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

/// Applies every child of `o` (see the module docs for the rules), and for a
/// [`Generation::New`] deletes the children it no longer wants.
///
/// When a name is taken by an object `o` does not control, [`Applied::conflicts`] lists
/// every such name (starting with what observe found under the workload's name,
/// `workload`), and nothing is written after the write that found it, and what the pass
/// created for the routers is deleted ([`write::Writer::undo`]); when the look-up found it,
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
    progress: &mut Progress,
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
        disruption_budget,
        network_policy,
        service,
        exposure,
        links_secret,
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
    if let Some(role) = &role {
        keep.roles.insert(role.name_any());
        put!(w.put(role, false));
    }
    if let Some(binding) = &role_binding {
        keep.role_bindings.insert(binding.name_any());
        put!(w.put(binding, false));
    }
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
        tracing::debug!(namespace = ns, secret = %s.name_any(), version = ?created.metadata.resource_version, "created");
        w.created.push((ApiResource::erase::<Secret>(&()), s.name_any(), created.metadata.uid.clone()));
        cache.written_secrets.record(created);
        progress.secrets.insert(s.name_any());
    }
    for s in &update {
        let replaced = replace_secret(client, cache, ns, s).await?;
        tracing::debug!(namespace = ns, secret = %s.name_any(), version = ?replaced.metadata.resource_version, "replaced");
        cache.written_secrets.record(replaced);
        progress.secrets.insert(s.name_any());
    }
    // Before the workload: a router that mounts it for the first time finds the files.
    if let Some(s) = &links_secret {
        keep.secrets.insert(s.name_any());
        put!(w.put(s, false));
    }
    // Before the workload: routers started from this pass's template are never reachable on
    // a port the policy closes.
    if let Some(policy) = &network_policy {
        keep.network_policies.insert(policy.name_any());
        put!(w.put(policy, false));
    }
    let workload = put!(write_workload(&mut w, workload, held));
    progress.workload = !held;
    if let Some(pdb) = &disruption_budget {
        keep.disruption_budgets.insert(pdb.name_any());
        put!(w.put(pdb, false));
    }
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
        // The budget and the policy depend on more than the spec (an admin's budget or
        // policy appearing or going, a placement change's Deployment retired): pruned in
        // every pass, from their stores.
        Generation::Reconciled => {
            let mut pruned = prune::<PodDisruptionBudget>(client, cache, o, &keep.disruption_budgets).await?;
            pruned.extend(prune::<NetworkPolicy>(client, cache, o, &keep.network_policies).await?);
            pruned
        }
    };
    Ok(Applied {
        workload,
        pruned,
        previous: None,
        conflicts: Vec::new(),
        adopted: w.adopted,
        held,
        again: false,
    })
}
