//! The router workload: writing the Deployment or DaemonSet (or keeping it as it is while a
//! placement change is held), and its counts from the API server's answer or the stores. It
//! does not build the workload (build does) and does not delete the other kind ([`super::prune`]).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::ResourceExt;

use super::prune::Keep;
use super::write::{Error, Put, Writer};
use crate::builders::Workload;
use crate::cache::Cache;
use crate::reconcile::types::WorkloadStatus;
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

/// Writes the workload `w` (unless `held`: then it is kept from pruning as it is), and
/// returns its counts.
pub(super) async fn write_workload(
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
