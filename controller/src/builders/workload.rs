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

/// How a Deployment rolls: the default (25 % surge, 25 % unavailable) except for
/// `AntiAffinity`, whose routers spread one per node within a revision (`matchLabelKeys:
/// [pod-template-hash]`, Kubernetes 1.33): a new router goes up first and an old one goes
/// only once it is Ready (`maxSurge: 1`, `maxUnavailable: 0`), so all `size` routers serve
/// throughout a roll, a single one included. (Earlier releases rolled `maxSurge: 0`,
/// `maxUnavailable: 1` because a surge pod had no node to go to: `size` 1 was down on every
/// roll.)
fn strategy(placement: Option<Placement>) -> Option<DeploymentStrategy> {
    (placement == Some(Placement::AntiAffinity)).then(|| DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    })
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
                strategy: strategy(plan.placement),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
}
