//! OpenShift `Route` (`route.openshift.io/v1`), typed with only the fields the controller
//! writes. Routes are used instead of Ingresses where that API is served (Go operator
//! parity); the type is not compiled into k8s-openapi, so it is declared here.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The part of an OpenShift `RouteSpec` the controller sets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "route.openshift.io",
    version = "v1",
    kind = "Route",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    /// The Service the Route sends traffic to.
    pub to: RouteTargetReference,
    /// The Service port (by number) the Route targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<RoutePort>,
    /// How TLS is terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
}

/// `spec.to`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RouteTargetReference {
    /// Always `Service`.
    pub kind: String,
    /// The Service name.
    pub name: String,
}

/// `spec.port`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoutePort {
    /// The Service port number or name.
    pub target_port: IntOrString,
}

/// `spec.tls`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    /// `edge`, `passthrough` or `reencrypt`.
    pub termination: String,
    /// What happens to plain HTTP: `None`, `Allow` or `Redirect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_edge_termination_policy: Option<String>,
}
