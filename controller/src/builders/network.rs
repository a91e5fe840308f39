//! The NetworkPolicy of the routers ([`network_policy`]), and whether the operator makes one
//! at all.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::{LinkRole, ServiceType};

use super::settings::Settings;
use crate::labels;
use crate::validated::ValidatedInterconnect;

/// What the operator does about the routers' NetworkPolicy, as the `NetworkPolicy`
/// condition reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// It makes NetworkPolicy `<name>`: `open` the router ports it admits from anywhere
    /// (the health port, client listeners, inter-router and edge listeners reached from
    /// outside the cluster), `routers` those it admits only from router pods, `management`
    /// the port it admits only from the controller's pods.
    Managed {
        /// Ports admitted from anywhere, ascending.
        open: Vec<i32>,
        /// Ports admitted only from this operator's router pods, ascending.
        routers: Vec<i32>,
        /// The management port, when the routers listen on it.
        management: Option<i32>,
    },
    /// NetworkPolicies of someone else's (the cluster admin's) that select the routers and
    /// admit something, by name: the operator makes none, so that it never admits what
    /// they keep out (policies add up: a connection any of them admits is admitted).
    Admin(Vec<String>),
    /// `networkPolicy.enabled: false`.
    Disabled,
}

/// The label selector of every router pod this operator runs, in any namespace: the inter-
/// router and edge ports admit them (another Interconnect's routers linking in).
pub fn router_pods() -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            [(labels::COMPONENT, labels::COMPONENT_VALUE), (labels::MANAGED_BY_KEY, labels::MANAGED_BY)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        match_expressions: None,
    }
}

/// What the operator does about the routers' NetworkPolicy ([`Policy`]) and the policy to
/// apply, if any. `admin` names the NetworkPolicies of someone else's that select the routers
/// and admit something ([`crate::cache::Cache::admin_policies`]); they win over everything
/// but `enabled: false`.
///
/// The policy selects the routers (`application`, `interconnect_cr`) and admits, on TCP:
/// * from anywhere: the health and metrics port (`livenessPort`: the kubelet's probes come
///   from the node, which only an `ipBlock` could name, and Prometheus from its own
///   namespace), every client listener (`listeners`), and each inter-router or edge
///   listener that something carries in from outside the cluster: a `NodePort` or
///   `LoadBalancer` Service, an OpenShift Route (`expose: true` where Routes are served:
///   TLS passthrough), or AccessGrants that offer it to other sites. An Ingress
///   (`expose: true` elsewhere) does not count: it carries HTTP, not AMQP;
/// * from this operator's router pods of any namespace ([`router_pods`]): the other
///   inter-router and edge listeners (the Interconnect's own routers, and edge or interior
///   routers of other Interconnects that connect to them);
/// * from the controller's pods only: the management port
///   ([`qdr_api::router_config::MANAGEMENT_PORT`]) when the routers listen on it.
///
/// Every other port of the routers is closed to every pod. Egress is not restricted
/// (connectors reach whatever their `host` names).
pub fn network_policy(
    o: &ValidatedInterconnect,
    settings: &Settings,
    admin: &[String],
) -> (Policy, Option<NetworkPolicy>) {
    let given = o.plan().network_policy.clone().unwrap_or_default();
    if given.enabled == Some(false) {
        return (Policy::Disabled, None);
    }
    if !admin.is_empty() {
        return (Policy::Admin(admin.to_vec()), None);
    }
    let outside = matches!(o.plan().service_type, Some(ServiceType::NodePort | ServiceType::LoadBalancer));
    let granted: Vec<&str> = o.site_trust().iter().map(|(profile, _)| profile.as_str()).collect();
    let mut open = vec![o.spec().liveness_port()];
    let mut routers = Vec::new();
    for (role, _, l) in o.spec().every_listener() {
        let offered = l.ssl_profile.as_deref().is_some_and(|p| granted.contains(&p));
        match role {
            LinkRole::Normal => open.push(l.port),
            _ if outside || (settings.routes && l.expose == Some(true)) || offered => open.push(l.port),
            _ => routers.push(l.port),
        }
    }
    open.sort_unstable();
    open.dedup();
    routers.sort_unstable();
    routers.dedup();
    routers.retain(|p| !open.contains(p));
    let management = o.management().then_some(qdr_api::router_config::MANAGEMENT_PORT);
    let ports = |ports: &[i32]| {
        ports
            .iter()
            .map(|p| NetworkPolicyPort {
                port: Some(IntOrString::Int(*p)),
                protocol: Some("TCP".into()),
                end_port: None,
            })
            .collect::<Vec<_>>()
    };
    let mut rules = vec![NetworkPolicyIngressRule { from: None, ports: Some(ports(&open)) }];
    if !routers.is_empty() {
        rules.push(NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector::default()),
                pod_selector: Some(router_pods()),
                ip_block: None,
            }]),
            ports: Some(ports(&routers)),
        });
    }
    if let Some(port) = management {
        let c = &settings.controller_pods;
        rules.push(NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector {
                    match_labels: Some([(NAMESPACE_NAME.to_string(), c.namespace.clone())].into()),
                    match_expressions: None,
                }),
                pod_selector: Some(LabelSelector {
                    match_labels: Some(c.labels.clone()),
                    match_expressions: None,
                }),
                ip_block: None,
            }]),
            ports: Some(ports(&[port])),
        });
    }
    let policy = NetworkPolicy {
        metadata: o.meta(o.name()),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector { match_labels: Some(o.selector()), match_expressions: None }),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(rules),
            egress: None,
        }),
    };
    (Policy::Managed { open, routers, management }, Some(policy))
}

/// The label every namespace carries with its own name (set by the API server since
/// Kubernetes 1.22): how a policy names one namespace.
pub const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
