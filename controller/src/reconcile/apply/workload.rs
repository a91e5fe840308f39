//! The router workload: writing the Deployment or DaemonSet (or keeping it as it is while a
//! placement change is held), its counts from the API server's answer or the stores, and,
//! after a placement change, deleting the workload of the other kind only once the new one
//! has all its routers Ready ([`retire_previous`]: make before break). It does not build the
//! workload (build does).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams};

use super::prune::delete_orphans;
use super::write::{Error, Put, Writer};
use crate::builders::Workload;
use crate::cache::Cache;
use crate::reconcile::types::{Generation, Previous, WorkloadStatus};
use crate::validated::ValidatedInterconnect;

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

/// The counts of the stored workload of `built`'s kind, from the store; `None` when it is
/// not there.
pub(super) fn stored_status(
    cache: &Cache,
    o: &ValidatedInterconnect,
    built: &Workload,
) -> Option<WorkloadStatus> {
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
pub(super) fn running_status(cache: &Cache, o: &ValidatedInterconnect) -> Option<WorkloadStatus> {
    let (ns, name) = (o.namespace(), o.name());
    if let Some(d) = cache.deployment(ns, name) {
        return Some(WorkloadStatus::of_deployment(&d, &d));
    }
    cache.daemon_set(ns, name).map(|d| WorkloadStatus::of_daemon_set(&d))
}

/// Writes the workload `w` (unless `held`: then whichever kind runs is left as it is), and
/// returns its counts.
pub(super) async fn write_workload(
    writer: &mut Writer<'_>,
    w: Workload,
    held: bool,
) -> Result<Put<WorkloadStatus>, Error> {
    let (cache, o) = (writer.cache, writer.o);
    Ok(Put::Written(match w {
        // After a placement change the routers may run in the other kind (the spec's is not
        // written while held); neither is pruned in a held pass.
        w if held => stored_status(cache, o, &w).or_else(|| running_status(cache, o)).unwrap_or_default(),
        Workload::Deployment(d) => {
            let applied = match writer.put(d.as_ref(), true).await? {
                Put::Written(applied) => applied,
                Put::Taken(c) => return Ok(Put::Taken(c)),
            };
            let status = WorkloadStatus::of_deployment(&d, &applied);
            cache.written_deployments.record(applied);
            status
        }
        Workload::DaemonSet(d) => {
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

/// How long ago `created` (a `creationTimestamp`) was; zero when not known or in the future.
fn age(created: Option<&Time>) -> Duration {
    created
        .and_then(|t| {
            let ms = k8s_openapi::jiff::Timestamp::now().duration_since(t.0).as_millis();
            u64::try_from(ms).ok()
        })
        .map_or(Duration::ZERO, Duration::from_millis)
}

/// The workload of kind `K` named like `o`, when `o` controls it and it lacks the
/// children's labels (the Go operator's): labelled (a merge patch of `metadata.labels`), so
/// that its store holds it from now on. `None` when there is none, or it is labelled already.
async fn label_unlabelled<K>(
    client: &kube::Client,
    o: &ValidatedInterconnect,
) -> Result<Option<ObjectMeta>, Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), o.namespace());
    let kind = K::kind(&()).to_string();
    let name = o.name().to_string();
    let meta = match api.get_metadata_opt(&name).await {
        Ok(m) => m.map(|m| m.metadata),
        Err(source) => return Err(Error::Get { kind, name, source }),
    };
    let Some(meta) = meta.filter(|m| o.controls(m.owner_references.as_deref().unwrap_or_default())) else {
        return Ok(None);
    };
    let labels = o.children_labels();
    let labelled =
        labels.iter().all(|(k, v)| meta.labels.as_ref().and_then(|l| l.get(*k)).is_some_and(|x| x == v));
    if labelled {
        return Ok(None);
    }
    let patch = serde_json::json!({"metadata": {"labels": BTreeMap::from(labels)}});
    match api.patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(m) => Ok(Some(m.metadata)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(source) => Err(Error::Update { kind, name, source }),
    }
}

/// How long a placement change has waited for its new workload (created `new`), with the
/// workload of the other kind created `other`: since the later of the two. A change back
/// (A → B → A') finds the workload of A' made long ago, before B's: timed from its creation
/// it would report `ProgressDeadlineExceeded` at once; timed from B's, it waits at most as
/// long as B stood.
fn placement_wait(new: Option<&Time>, other: Option<&Time>) -> Duration {
    age(new).min(age(other))
}

/// After a placement change (`Any` ↔ `Every`; the workload's kind changes, its name stays the
/// Interconnect's): deletes the workloads of the other kind that `o` controls once `status`,
/// the counts of the one built (a Deployment when `deployment`, else a DaemonSet), is
/// [`WorkloadStatus::complete`]; until then keeps them and reports the one that runs as
/// [`Previous`]. Called in every pass that applied or reused
/// the workload (not a held one): the new workload's status change wakes the pass that
/// prunes. Returns the deleted ones as `Kind name`.
///
/// The routers of both run meanwhile under the same labels, so the Service sends clients to
/// either and new interior routers mesh with the old ones.
///
/// The Go operator's workloads carry none of the operator's labels, so no store shows one of
/// the other kind: in a pass of a new generation (a placement change is one) the other kind
/// is read by name, and one `o` controls is given the children's labels, which puts it in
/// its store like one the operator made ([`label_unlabelled`]).
///
/// # Errors
/// [`Error::Delete`] when a delete is refused (a 404 is someone being faster); [`Error::Get`]
/// or [`Error::Update`] when reading or labelling the Go operator's workload fails.
pub(super) async fn retire_previous(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    deployment: bool,
    status: WorkloadStatus,
    generation: Generation,
) -> Result<(Vec<String>, Option<Previous>), Error> {
    let (ns, name, labels) = (o.namespace(), o.name(), o.children_labels());
    let controlled = |m: &ObjectMeta| o.controls(m.owner_references.as_deref().unwrap_or_default());
    let others: Vec<ObjectMeta> = match deployment {
        true => cache.labelled::<DaemonSet>(ns, &labels),
        false => cache.labelled::<Deployment>(ns, &labels),
    };
    let mut others: Vec<ObjectMeta> = others.into_iter().filter(controlled).collect();
    if others.is_empty() && generation == Generation::New {
        let found = match deployment {
            true => label_unlabelled::<DaemonSet>(client, o).await?,
            false => label_unlabelled::<Deployment>(client, o).await?,
        };
        others.extend(found);
    }
    let Some(first) = others.first() else { return Ok((Vec::new(), None)) };
    if status.complete() {
        let keep = BTreeSet::new();
        let pruned = match deployment {
            true => delete_orphans::<DaemonSet>(client, o, others, &keep).await?,
            false => delete_orphans::<Deployment>(client, o, others, &keep).await?,
        };
        return Ok((pruned, None));
    }
    let other = first.name.clone().unwrap_or_default();
    let (kind, ready, created) = match deployment {
        true => (
            "DaemonSet",
            cache.daemon_set(ns, &other).and_then(|d| d.status.as_ref().map(|s| s.number_ready)),
            cache.deployment(ns, name).and_then(|d| d.metadata.creation_timestamp.clone()),
        ),
        false => (
            "Deployment",
            cache.deployment(ns, &other).and_then(|d| d.status.as_ref().and_then(|s| s.ready_replicas)),
            cache.daemon_set(ns, name).and_then(|d| d.metadata.creation_timestamp.clone()),
        ),
    };
    let waiting = placement_wait(created.as_ref(), first.creation_timestamp.as_ref());
    Ok((Vec::new(), Some(Previous { kind, name: other, ready: ready.unwrap_or(0), waiting })))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    use super::placement_wait;

    fn ago(secs: i64) -> Time {
        Time(Timestamp::now() - SignedDuration::from_secs(secs))
    }

    /// Issue 72: a change back to the kind that ran before (A → B → A') is timed from B's
    /// workload, not from A's creation long ago (which reported `ProgressDeadlineExceeded`
    /// at once).
    #[test]
    fn a_change_back_is_timed_from_the_workload_it_replaces() {
        let back = placement_wait(Some(&ago(86_400)), Some(&ago(30)));
        assert!(back >= Duration::from_secs(29) && back < Duration::from_secs(60), "{back:?}");
        let forward = placement_wait(Some(&ago(20)), Some(&ago(86_400)));
        assert!(forward >= Duration::from_secs(19) && forward < Duration::from_secs(60), "{forward:?}");
        assert_eq!(placement_wait(None, Some(&ago(5))), Duration::ZERO, "not known: nothing waited");
    }
}
