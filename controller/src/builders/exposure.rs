//! Ingresses or OpenShift Routes for exposed listeners.

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend,
    IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::Listener;

use super::settings::Settings;
use crate::route::{Route, RoutePort, RouteSpec, RouteTargetReference, TlsConfig};
use crate::validated::ValidatedInterconnect;

/// Exposed listeners of every kind, with their Ingress or Route name
/// `<name>-<listener name or port>`.
fn exposed(o: &ValidatedInterconnect) -> impl Iterator<Item = (String, &Listener)> + '_ {
    o.spec()
        .every_listener()
        .map(|(_, _, l)| l)
        .filter(|l| l.expose == Some(true))
        .map(|l| (format!("{}-{}", o.name(), listener_suffix(l)), l))
}

/// What names an exposed listener's objects after the Interconnect's name: its name, or
/// its port.
fn listener_suffix(l: &Listener) -> String {
    l.name.clone().unwrap_or_else(|| l.port.to_string())
}

/// The Ingress host of an exposed listener: one DNS label, `<name>-<suffix>` when that is at
/// most 63 characters; otherwise the name is cut and the first 8 hex digits of its SHA-256
/// keep hosts of different Interconnects apart: `<name cut>-<hash>-<suffix>`, 63 characters.
/// (`name` is a DNS-1035 label of at most 63 characters and `suffix` a listener name of at
/// most 15 or a port of at most 5 digits, so there is always room.)
pub(crate) fn host_label(name: &str, suffix: &str) -> String {
    let full = format!("{name}-{suffix}");
    if full.len() <= 63 {
        return full;
    }
    use sha2::Digest;
    let hash: String =
        sha2::Sha256::digest(name.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect();
    let keep = 63 - suffix.len() - hash.len() - 2;
    let cut = name[..keep].trim_end_matches('-');
    format!("{cut}-{hash}-{suffix}")
}

/// Ingresses (networking.k8s.io/v1) `<name>-<listener name or port>` for exposed listeners.
pub fn ingresses(o: &ValidatedInterconnect) -> Vec<Ingress> {
    exposed(o)
        .map(|(name, l)| Ingress {
            metadata: o.meta(&name),
            spec: Some(IngressSpec {
                rules: Some(vec![IngressRule {
                    host: Some(host_label(o.name(), &listener_suffix(l))),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![HTTPIngressPath {
                            path: Some("/".into()),
                            path_type: "Prefix".into(),
                            backend: IngressBackend {
                                service: Some(IngressServiceBackend {
                                    name: o.name().into(),
                                    port: Some(ServiceBackendPort { number: Some(l.port), name: None }),
                                }),
                                ..Default::default()
                            },
                        }],
                    }),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
}

/// OpenShift Routes `<name>-<listener name or port>` for exposed listeners, used instead of
/// Ingresses when that API is served: TLS passthrough for listeners with an sslProfile, edge
/// termination with redirect otherwise (Go operator parity).
pub fn routes(o: &ValidatedInterconnect) -> Vec<Route> {
    exposed(o)
        .map(|(name, l)| {
            let (termination, insecure) =
                if l.ssl_profile.is_some() { ("passthrough", "None") } else { ("edge", "Redirect") };
            let mut route = Route::new(
                &name,
                RouteSpec {
                    to: RouteTargetReference { kind: "Service".into(), name: o.name().into() },
                    port: Some(RoutePort { target_port: IntOrString::Int(l.port) }),
                    tls: Some(TlsConfig {
                        termination: termination.into(),
                        insecure_edge_termination_policy: Some(insecure.into()),
                    }),
                },
            );
            route.metadata = o.meta(&name);
            route
        })
        .collect()
}

/// How exposed listeners leave the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Exposure {
    /// networking.k8s.io/v1 Ingresses.
    Ingresses(Vec<Ingress>),
    /// OpenShift Routes (where `route.openshift.io/v1` is served).
    Routes(Vec<Route>),
}

/// [`ingresses`] or [`routes`], as `s` says the cluster serves.
pub fn exposure(o: &ValidatedInterconnect, s: &Settings) -> Exposure {
    if s.routes { Exposure::Routes(routes(o)) } else { Exposure::Ingresses(ingresses(o)) }
}
