//! What is dropped before an object is stored, and what a store keeps: `managedFields`
//! always, and of workloads everything but what the lookups and rollouts
//! read. It decides no wake-up ([`super::wake`] does, before an object is slimmed) and
//! keeps no store ([`super::meta_store`], [`super::written`] call it).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::Resource;

use crate::labels;

/// Drops `managedFields` before an object is stored (wake-ups are decided before).
pub(crate) fn slim<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// The labels the stores keep: the ones their lookups select by (children by
/// `interconnect_cr` and the managed-by label, router pods also by `application`, generated
/// Secrets by [`crate::credentials::GENERATED_LABEL`]).
pub(crate) const SELECTED_LABELS: &[&str] =
    &[labels::INTERCONNECT, labels::MANAGED_BY_KEY, labels::APPLICATION, crate::credentials::GENERATED_LABEL];

/// What is kept of the metadata of a workload the controller just wrote (read-your-writes): name, namespace, the [`SELECTED_LABELS`],
/// owner references (whose it is), `resourceVersion` and `generation` (read-your-writes,
/// rollouts) and `deletionTimestamp`. Annotations, `uid`, `creationTimestamp`, finalizers
/// and `managedFields` are dropped. The compact stores ([`super::meta_store`]) keep the
/// same from each event by themselves. Wake-ups judge the event as it came, before this.
pub(crate) fn slim_meta<K: Resource>(o: &mut K) {
    let m = o.meta_mut();
    m.managed_fields = None;
    m.annotations = None;
    m.uid = None;
    m.creation_timestamp = None;
    m.finalizers = None;
    m.generate_name = None;
    if let Some(l) = m.labels.as_mut() {
        l.retain(|k, _| SELECTED_LABELS.contains(&k.as_str()));
    }
}

/// [`slim_meta`] but the `uid` (its pods and ReplicaSets name it by uid), and the pod
/// template's `spec` of a workload: a pass reads only its uid, replicas, the template's
/// annotations (config and credentials hashes), generation and status.
pub(crate) fn slim_workload<K: Resource + PodTemplated>(o: &mut K) {
    let uid = o.meta_mut().uid.take();
    slim_meta(o);
    o.meta_mut().uid = uid;
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

/// What the store of every PodDisruptionBudget keeps ([`super::stores::Cache::admin_budgets`]):
/// its metadata as [`slim_meta`] keeps it and its selector; not its bound or status.
pub(crate) fn slim_budget(p: &mut k8s_openapi::api::policy::v1::PodDisruptionBudget) {
    let selector = p.spec.as_ref().and_then(|s| s.selector.clone());
    p.spec = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec { selector, ..Default::default() });
    p.status = None;
    slim_meta(p);
}

/// What the store of every NetworkPolicy keeps ([`super::stores::Cache::admin_policies`]):
/// its metadata as [`slim_meta`] keeps it, its pod selector and policy types, and whether it
/// admits anything (one empty ingress rule in place of its rules, or none); not its peers,
/// ports or egress rules.
pub(crate) fn slim_policy(p: &mut k8s_openapi::api::networking::v1::NetworkPolicy) {
    use k8s_openapi::api::networking::v1::{NetworkPolicyIngressRule, NetworkPolicySpec};
    p.spec = p.spec.take().map(|s| NetworkPolicySpec {
        pod_selector: s.pod_selector,
        policy_types: s.policy_types,
        ingress: s
            .ingress
            .map(|rules| rules.into_iter().take(1).map(|_| NetworkPolicyIngressRule::default()).collect()),
        egress: None,
    });
    slim_meta(p);
}
