//! The workload running the routers: a Deployment or a DaemonSet.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::Placement;

use super::annotations::Roll;
use super::pod::pod_template;
use super::settings::Settings;
use crate::validated::ValidatedInterconnect;
use qdr_api::router_config::Rendered;

/// The workload: a Deployment for placement Any and AntiAffinity, a DaemonSet for Every.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// `size` routers.
    Deployment(Box<Deployment>),
    /// One router per node.
    DaemonSet(Box<DaemonSet>),
}

impl Workload {
    /// The pod template, whichever the kind (`None` only for a workload without a spec,
    /// which [`workload`] never builds).
    pub fn template(&self) -> Option<&PodTemplateSpec> {
        match self {
            Workload::Deployment(d) => d.spec.as_ref().map(|s| &s.template),
            Workload::DaemonSet(d) => d.spec.as_ref().map(|s| &s.template),
        }
    }
}

/// How a Deployment rolls, whatever its placement: one router at a time, a new one first
/// (`maxSurge: 1`) and an old one only once the new one is Ready, which means linked
/// (`maxUnavailable: 0`), so all `size` routers serve throughout a roll, a single one
/// included. `AntiAffinity`'s routers spread one per node within a revision (`matchLabelKeys:
/// [pod-template-hash]`, Kubernetes 1.33), so its surge router has a node to go to. (Earlier
/// releases rolled `AntiAffinity` `maxSurge: 0`, `maxUnavailable: 1`, so `size` 1 was down on
/// every roll; and `Any` with the Deployment's default, 25 % surge and 25 % unavailable, which
/// takes 2 of 4 routers at once and 4 of 16.) Not in the pod template: changing it rolls no
/// router.
fn strategy() -> DeploymentStrategy {
    DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    }
}

/// Deployment or DaemonSet `<name>` running `config` (the rest as [`pod_template`]).
pub fn workload(
    o: &ValidatedInterconnect,
    s: &Settings,
    config: &Rendered,
    credentials_hash: &str,
    bundles: &BTreeSet<String>,
    roll: &Roll,
) -> Workload {
    let plan = o.plan();
    let template = pod_template(o, s, config, credentials_hash, bundles, roll);
    let selector = LabelSelector { match_labels: Some(o.selector()), ..Default::default() };
    if plan.placement == Some(Placement::Every) {
        Workload::DaemonSet(Box::new(DaemonSet {
            metadata: o.meta(o.name()),
            spec: Some(DaemonSetSpec { selector, template, ..Default::default() }),
            ..Default::default()
        }))
    } else {
        Workload::Deployment(Box::new(Deployment {
            metadata: o.meta(o.name()),
            spec: Some(DeploymentSpec {
                replicas: Some(plan.size.unwrap_or(1)),
                selector,
                template,
                strategy: Some(strategy()),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
}
