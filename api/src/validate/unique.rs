//! The rules across items (API reference rules 14, 15, 15a and 23): ports, names and
//! container port names unique across the listener and connector lists. Each item alone is
//! [`super::fields`]' to judge.

use std::collections::HashMap;

use crate::messages as msg;
use crate::spec::{DEFAULT_LIVENESS_PORT, LinkRole};
use crate::types::InterconnectSpec;

use super::checks::Validator;
use super::field_error::{At, ErrorType};

impl Validator {
    /// Ports unique across the liveness port and all listeners (CEL: listener-ports-unique).
    pub(super) fn unique_ports(&mut self, spec: &InterconnectSpec) {
        let liveness = spec.deployment_plan.as_ref().and_then(|p| p.liveness_port);
        // The first user of each port: a listener, or None for the liveness port.
        let mut seen: HashMap<i32, Option<At<'_>>> = HashMap::new();
        seen.insert(liveness.unwrap_or(DEFAULT_LIVENESS_PORT), None);
        for (role, i, l) in spec.every_listener() {
            if l.port == 0 {
                continue;
            }
            let path = At::new(role.listeners_field(), i).field("port");
            match seen.get(&l.port) {
                Some(first) => {
                    let first = match (first, liveness) {
                        (Some(at), _) => at.relative(),
                        (None, Some(_)) => "deploymentPlan.livenessPort".into(),
                        (None, None) => format!(
                            "the liveness port (deploymentPlan.livenessPort default {DEFAULT_LIVENESS_PORT})"
                        ),
                    };
                    let detail =
                        format!("port {} is already used by {first}: {}", l.port, msg::LISTENER_PORTS_UNIQUE);
                    self.push(path, ErrorType::Duplicate, Some(l.port.into()), detail);
                }
                None => {
                    seen.insert(l.port, Some(path));
                }
            }
        }
    }

    pub(super) fn unique_names<'a>(
        &mut self,
        names: impl Iterator<Item = (At<'a>, Option<&'a str>)>,
        what: &str,
    ) {
        let mut seen: HashMap<&str, At<'a>> = HashMap::new();
        for (path, name) in names {
            let Some(name) = name else { continue };
            match seen.get(name) {
                Some(first) => {
                    let detail = format!("{what}: {} has the same name", first.relative());
                    self.push(path, ErrorType::Duplicate, Some(name.into()), detail);
                }
                None => {
                    seen.insert(name, path);
                }
            }
        }
    }

    /// A name used by entities of two kinds (listener, connector, sslProfile), or the
    /// rendered health listener's name (CEL: entity-names-unique), or one in the operator's
    /// own names (CEL: reserved-names). Duplicates within one kind are the
    /// listener/connector/sslProfile uniqueness rules' to report.
    pub(super) fn entity_names_unique(&mut self, spec: &InterconnectSpec) {
        // The first entity of each name: its kind and path (None: the health listener).
        let mut first: HashMap<&str, (&str, Option<At<'_>>)> = HashMap::new();
        first.insert(msg::HEALTH_LISTENER, ("health", None));
        let listeners = spec
            .every_listener()
            .map(|(r, i, x)| ("listener", At::new(r.listeners_field(), i).field("name"), x.name.as_deref()));
        let connectors = spec.every_connector().map(|(r, i, x)| {
            ("connector", At::new(r.connectors_field(), i).field("name"), x.name.as_deref())
        });
        let profiles = spec
            .ssl_profiles
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, p)| ("sslProfile", At::new("sslProfiles", i).field("name"), Some(p.name.as_str())));
        for (kind, path, name) in listeners.chain(connectors).chain(profiles) {
            let Some(name) = name.filter(|n| !n.is_empty()) else { continue };
            if name.starts_with(msg::RESERVED_NAME_PREFIX) {
                self.push(path, ErrorType::Invalid, Some(name.into()), msg::RESERVED_NAME);
                continue;
            }
            match first.get(name) {
                Some((k, _)) if *k == kind => {}
                Some((_, at)) => {
                    let at =
                        at.map_or_else(|| "the health listener the operator renders".into(), At::relative);
                    let detail = format!("{}: {at} has the same name", msg::ENTITY_NAMES_UNIQUE);
                    self.push(path, ErrorType::Duplicate, Some(name.into()), detail);
                }
                None => {
                    first.insert(name, (kind, Some(path)));
                }
            }
        }
    }

    /// Validate-only: an unnamed normal or inter-router listener gets container port name
    /// `port-<N>`; a named listener may not take that name.
    pub(super) fn port_name_collisions(&mut self, spec: &InterconnectSpec) {
        // Only normal and inter-router listeners become container ports.
        let in_pod = |r: &LinkRole| *r != LinkRole::Edge;
        // `port-<N>` as the pod builder writes it: N in decimal, no sign, no leading zero.
        let generated_port = |name: &str| {
            let digits = name.strip_prefix("port-")?;
            let plain = digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
            plain.then(|| digits.parse::<i32>().ok()).flatten()
        };
        let generated = |port: i32| {
            spec.every_listener()
                .any(|(r, _, l)| in_pod(&r) && l.name.is_none() && l.port != 0 && l.port == port)
        };
        for (role, i, l) in spec.every_listener().filter(|(r, _, _)| in_pod(r)) {
            if let Some(n) = &l.name
                && generated_port(n).is_some_and(generated)
            {
                self.push(
                    format!("spec.{}[{i}].name", role.listeners_field()),
                    ErrorType::Duplicate,
                    Some(n.as_str().into()),
                    msg::GENERATED_PORT_NAME_TAKEN,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Interconnect, validate};

    /// The fields `validate` reports for listeners `(name, port)` on the defaults' pod.
    fn duplicates(listeners: &[(Option<&str>, i32)]) -> Vec<String> {
        let listeners: Vec<_> =
            listeners.iter().map(|(n, p)| serde_json::json!({"name": n, "port": p})).collect();
        let ic: Interconnect = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m"}, "spec": {"listeners": listeners}}))
        .unwrap();
        (validate(&ic).into_iter())
            .filter(|e| e.detail == crate::messages::GENERATED_PORT_NAME_TAKEN)
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn a_name_is_taken_only_as_the_pod_builder_writes_it() {
        assert_eq!(duplicates(&[(None, 5), (Some("port-5"), 6)]), ["spec.listeners[1].name"]);
        for other in ["port-05", "port-+5", "port-5x", "port-", "Port-5", "port-6"] {
            assert!(duplicates(&[(None, 5), (Some(other), 6)]).is_empty(), "{other}");
        }
        // A named listener's own port names no container port `port-N`.
        assert!(duplicates(&[(Some("a"), 5), (Some("port-5"), 6)]).is_empty());
    }
}
