//! Which watch events wake a reconcile, and what is dropped before an object is stored.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use super::memo::Drift;
use super::written::Written;
use crate::labels;
use crate::validated::FIELD_MANAGER;

/// Whether the newest write recorded in `meta.managedFields` is the controller's
/// ([`FIELD_MANAGER`]), strictly newer than every other manager's entry. Entries without a
/// time count as newest (never an echo).
pub(crate) fn last_written_by_us(meta: &ObjectMeta) -> bool {
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
pub(crate) fn status_only(meta: &ObjectMeta) -> bool {
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

/// The wake-up rule of an owned kind: an applied object wakes its owner unless it is the
/// echo of the controller's own write ([`last_written_by_us`]); a deletion always wakes.
/// Deletions and changes that are not [`status_only`] are marked in `drift`; `written` (the
/// kinds with read-your-writes) forgets what the watch has caught up with. The start of a
/// (re)list wakes nothing; its objects are judged like any other.
pub(crate) fn owned_wake<K>(
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
pub(crate) fn pod_wake() -> impl FnMut(&watcher::Event<Pod>) -> bool + Send + 'static {
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
pub(crate) fn user_secret(s: &PartialObjectMeta<Secret>) -> bool {
    s.metadata.labels.as_ref().and_then(|l| l.get(labels::MANAGED_BY_KEY)).is_none()
}

/// Drops `managedFields` before an object is stored (wake-ups are decided before).
pub(crate) fn slim<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// [`slim`], and the pod template's `spec` of a workload: a pass reads only its replicas,
/// the template's annotations (config and credentials hashes), generation and status.
pub(crate) fn slim_workload<K: Resource + PodTemplated>(o: &mut K) {
    slim(o);
    o.drop_pod_spec();
}

/// Workloads whose stored pod template can lose its `spec`.
pub(crate) trait PodTemplated {
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

/// What of a router pod the status reports: whether it is being deleted, its phase, and its
/// `Ready` and `PodScheduled` conditions (status and message). A pod event that changes none
/// of these (an IP assigned, a probe time) wakes nothing. For
/// [`kube::runtime::WatchStreamExt::predicate_filter`].
pub(crate) fn pod_state(p: &Pod) -> Option<u64> {
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
pub(crate) fn slim_pod(p: &mut Pod) {
    p.spec = None;
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
}
