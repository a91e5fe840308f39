//! The PodDisruptionBudget of the routers.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::Placement;

use crate::validated::ValidatedInterconnect;

/// PodDisruptionBudget `<name>` for a Deployment of more than one router (`Any` and
/// `AntiAffinity` with `size` ≥ 2): `maxUnavailable: 1`, so a node drain or a cluster
/// autoscaler evicts one router at a time and waits for its replacement to be Ready before the
/// next (the Eviction API answers 429 meanwhile). `unhealthyPodEvictionPolicy: AlwaysAllow`:
/// a router that is not Ready serves nothing and never blocks a drain. `None` for one router
/// (a budget of one would block every drain) and for `Every` (a DaemonSet's routers are one per
/// node, which `kubectl drain --ignore-daemonsets` leaves running, and the disruption
/// controller cannot count a DaemonSet's pods for `maxUnavailable`).
pub fn disruption_budget(o: &ValidatedInterconnect) -> Option<PodDisruptionBudget> {
    let plan = o.plan();
    if plan.placement == Some(Placement::Every) || plan.size.unwrap_or(1) < 2 {
        return None;
    }
    Some(PodDisruptionBudget {
        metadata: o.meta(o.name()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(o.selector()), ..Default::default() }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..Default::default()
        }),
        ..Default::default()
    })
}
