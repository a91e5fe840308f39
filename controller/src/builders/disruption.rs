//! The PodDisruptionBudget of the routers, and whether the operator makes one at all
//! ([`budget`]).

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::Placement;

use super::pod::POD_TEMPLATE_HASH;
use crate::validated::ValidatedInterconnect;

/// What the operator does about the routers' PodDisruptionBudget, as the `DisruptionBudget`
/// condition reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Budget {
    /// It makes PodDisruptionBudget `<name>` with this bound (`maxUnavailable: 1`,
    /// `minAvailable: 50%`); `retiring` while it covers a Deployment's routers that serve
    /// until a placement change to `Every` completes.
    Managed {
        /// The bound, as written in the budget (`maxUnavailable: 1`).
        bound: String,
        /// Whether it covers the routers of a Deployment being replaced by a DaemonSet.
        retiring: bool,
    },
    /// Budgets of someone else's (the cluster admin's), by name, select the routers or take
    /// the name `<name>`: the operator makes none, so that no router is selected by two
    /// (the Eviction API refuses every eviction of a pod that two budgets select, 500
    /// "This pod has more than one PodDisruptionBudget").
    Admin(Vec<String>),
    /// `disruptionBudget.enabled: false`.
    Disabled,
    /// None is needed: one router and no bound set (a budget of one blocks every drain), or
    /// placement `Every` (the reason, as a phrase).
    NotNeeded(&'static str),
}

/// What the operator does about the routers' budget ([`Budget`]) and the budget to apply,
/// if any. `retiring` is `spec.replicas` of this Interconnect's Deployment while placement
/// `Every` replaces it (make before break: its routers are the ones that serve until the
/// DaemonSet's are Ready); `admin` the budgets of someone else's that select the routers
/// ([`crate::cache::Cache::admin_budgets`]), which win over everything but
/// `enabled: false`.
///
/// The default budget, `maxUnavailable: 1` for two or more routers of `Any` and
/// `AntiAffinity`, evicts one router at a time in a node drain or a cluster autoscaler's
/// scale-down and waits for its replacement to be Ready before the next (the Eviction API
/// answers 429 meanwhile).
pub fn budget(
    o: &ValidatedInterconnect,
    retiring: Option<i32>,
    admin: &[String],
) -> (Budget, Option<PodDisruptionBudget>) {
    let plan = o.plan();
    let given = plan.disruption_budget.clone().unwrap_or_default();
    if given.enabled == Some(false) {
        return (Budget::Disabled, None);
    }
    if !admin.is_empty() {
        return (Budget::Admin(admin.to_vec()), None);
    }
    let one = IntOrString::Int(1);
    let (max_unavailable, min_available, retiring) = match plan.placement {
        Some(Placement::Every) if retiring.is_some_and(|r| r >= 2) => (Some(one), None, true),
        Some(Placement::Every) => {
            return (
                Budget::NotNeeded(
                    "placement Every: kubectl drain --ignore-daemonsets leaves a DaemonSet's routers running",
                ),
                None,
            );
        }
        _ if given.max_unavailable.is_none() && given.min_available.is_none() => {
            if plan.size.unwrap_or(1) < 2 {
                return (Budget::NotNeeded("one router: a budget would block every drain"), None);
            }
            (Some(one), None, false)
        }
        _ => (given.max_unavailable, given.min_available, false),
    };
    let bound = match (&max_unavailable, &min_available) {
        (Some(v), _) => format!("maxUnavailable: {}", shown(v)),
        (None, Some(v)) => format!("minAvailable: {}", shown(v)),
        (None, None) => String::new(),
    };
    let pdb = PodDisruptionBudget {
        metadata: o.meta(o.name()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable,
            min_available,
            selector: Some(selector(o)),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
        }),
        ..Default::default()
    };
    (Budget::Managed { bound, retiring }, Some(pdb))
}

/// The budget's selector: the routers' labels, and only pods a Deployment made (they
/// carry `pod-template-hash`; a DaemonSet's carry `controller-revision-hash`), so that
/// through a placement change between the two kinds the budget never selects a DaemonSet's
/// router (the disruption controller cannot count those: it reads the scale subresource of
/// their controller, which a DaemonSet lacks, and allows no eviction at all).
fn selector(o: &ValidatedInterconnect) -> LabelSelector {
    LabelSelector {
        match_labels: Some(o.selector()),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: POD_TEMPLATE_HASH.into(),
            operator: "Exists".into(),
            values: None,
        }]),
    }
}

/// An int-or-string as written in YAML.
fn shown(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => format!("{s:?}"),
    }
}
