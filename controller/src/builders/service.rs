//! The routers' Service.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::Listener;

use crate::validated::ValidatedInterconnect;

/// Service-port name of a listener: its name, or the port number (Go operator parity).
pub(crate) fn service_port_name(l: &Listener) -> String {
    l.name.clone().unwrap_or_else(|| l.port.to_string())
}

/// Service `<name>`: one port per listener of every kind, the Service type when set.
pub fn service(o: &ValidatedInterconnect) -> Service {
    let ports = o
        .spec()
        .every_listener()
        .map(|(_, _, l)| ServicePort {
            name: Some(service_port_name(l)),
            protocol: Some("TCP".into()),
            port: l.port,
            target_port: Some(IntOrString::Int(l.port)),
            ..Default::default()
        })
        .collect();
    let mut metadata = o.meta(o.name());
    metadata.annotations = o.plan().service_annotations.clone().filter(|a| !a.is_empty());
    Service {
        metadata,
        spec: Some(ServiceSpec {
            selector: Some(o.selector()),
            ports: Some(ports),
            // Always set (the API's default when unset), so a type someone else set is
            // taken back by the next apply.
            type_: Some(o.plan().service_type.map_or_else(|| "ClusterIP".into(), |t| t.as_str().to_string())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether the Service `live` (as the API server answered) has exactly the ports of
/// `desired`: the same entries by name, port, protocol, target port and app protocol, in
/// any order. Node ports are the API server's to allocate and are not compared.
pub fn same_ports(desired: &Service, live: &Service) -> bool {
    let entries = |s: &Service| {
        let mut v: Vec<_> = s
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .map(|p| {
                let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
                let target = match target {
                    IntOrString::Int(i) => i.to_string(),
                    IntOrString::String(s) => s,
                };
                (p.name.clone(), p.port, protocol, target, p.app_protocol.clone())
            })
            .collect();
        v.sort();
        v
    };
    entries(desired) == entries(live)
}
