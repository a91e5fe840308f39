//! The rules of each field and list item of a spec (API reference rules 2–13 and 16–22a): the
//! deployment plan, listeners, connectors, sslProfiles, addresses, link routes, auto links
//! and resources, each judged where it stands. Rules across items are [`super::unique`]'s.

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

use crate::messages as msg;
use crate::spec::{AUTO_PROFILES, LinkRole, is_no_users};
use crate::types::{Connector, InterconnectSpec, Listener, Role};

use super::checks::{Validator, nonempty};
use super::field_error::{At, ErrorType, FieldError};
use super::names::{is_dns_label, is_dns_subdomain, is_iana_svc_name};

impl Validator {
    pub(super) fn spec(&mut self, spec: &InterconnectSpec) {
        let edge = spec.deployment_plan.as_ref().and_then(|p| p.role.as_ref()) == Some(&Role::Edge);
        if let Some(plan) = &spec.deployment_plan {
            self.opt_string("spec.deploymentPlan.image", &plan.image, 1024, false);
            self.range("spec.deploymentPlan.size", plan.size, 1, 16);
            self.resources(plan.resources.as_ref());
            self.scheduling(plan);
            self.disruption_budget(plan);
            if let Some(r) = &plan.role {
                self.enumeration(
                    "spec.deploymentPlan.role",
                    r.as_str(),
                    r.is_supported(),
                    Role::SUPPORTED,
                    "",
                );
            }
            if let Some(p) = &plan.placement {
                self.enumeration(
                    "spec.deploymentPlan.placement",
                    p.as_str(),
                    p.is_supported(),
                    crate::types::Placement::SUPPORTED,
                    if p.as_str() == "Node" {
                        " (Node placement was never implemented by the Go operator: use Every for one router per node)"
                    } else {
                        ""
                    },
                );
                if *p == crate::types::Placement::Every && plan.size.is_some_and(|s| s != 1) {
                    self.push(
                        "spec.deploymentPlan.size",
                        ErrorType::Forbidden,
                        None,
                        msg::EVERY_WITHOUT_SIZE,
                    );
                }
            }
            self.secret_name("spec.deploymentPlan.issuer", &plan.issuer);
            self.range("spec.deploymentPlan.livenessPort", plan.liveness_port, 1, 65535);
            if let Some(t) = &plan.service_type {
                self.enumeration(
                    "spec.deploymentPlan.serviceType",
                    t.as_str(),
                    t.is_supported(),
                    crate::types::ServiceType::SUPPORTED,
                    "",
                );
            }
        }

        if let Some(users) = &spec.users {
            self.string("spec.users", users, 253, false);
            if !users.is_empty() && !is_no_users(users) && !is_dns_subdomain(users) {
                self.push(
                    "spec.users",
                    ErrorType::Invalid,
                    Some(users.as_str().into()),
                    msg::USERS_SECRET_NAME,
                );
            }
        }
        self.opt_string("spec.issuer", &spec.issuer, 253, false);

        if let Some(l) = &spec.listeners
            && l.is_empty()
        {
            self.push(
                "spec.listeners",
                ErrorType::Invalid,
                Some(Value::Array(vec![])),
                "must have at least 1 item: remove the field to get the default listeners",
            );
        }
        for (role, list) in spec.listener_lists() {
            let name = role.listeners_field();
            self.max_items(format_args!("spec.{name}"), list, 32);
            for (i, l) in list.iter().flatten().enumerate() {
                self.listener(At::new(name, i), l);
            }
        }
        for (role, list) in spec.connector_lists() {
            let name = role.connectors_field();
            self.max_items(format_args!("spec.{name}"), list, 64);
            for (i, c) in list.iter().flatten().enumerate() {
                self.connector(At::new(name, i), c);
            }
        }

        // Role rules (CEL: edge-without-*, interior-without-edge-connectors).
        if edge {
            let forbidden = [
                (LinkRole::InterRouter.listeners_field(), nonempty(&spec.inter_router_listeners)),
                (LinkRole::Edge.listeners_field(), nonempty(&spec.edge_listeners)),
                (LinkRole::InterRouter.connectors_field(), nonempty(&spec.inter_router_connectors)),
            ];
            for (list, present) in forbidden {
                if present {
                    self.push(format!("spec.{list}"), ErrorType::Forbidden, None, msg::edge_forbids(list));
                }
            }
        } else if nonempty(&spec.edge_connectors) {
            self.push(
                "spec.edgeConnectors",
                ErrorType::Forbidden,
                None,
                msg::INTERIOR_WITHOUT_EDGE_CONNECTORS,
            );
        }

        self.unique_ports(spec);
        self.unique_names(
            spec.every_listener()
                .map(|(r, i, x)| (At::new(r.listeners_field(), i).field("name"), x.name.as_deref())),
            msg::LISTENER_NAMES_UNIQUE,
        );
        self.unique_names(
            spec.every_connector()
                .map(|(r, i, x)| (At::new(r.connectors_field(), i).field("name"), x.name.as_deref())),
            msg::CONNECTOR_NAMES_UNIQUE,
        );
        self.port_name_collisions(spec);
        self.entity_names_unique(spec);

        // sslProfiles and references to them.
        self.max_items("spec.sslProfiles", &spec.ssl_profiles, 32);
        let mut defined: HashMap<&str, usize> = HashMap::new();
        for (i, p) in spec.ssl_profiles.iter().flatten().enumerate() {
            let path = At::new("sslProfiles", i);
            if p.name.is_empty() {
                self.push(
                    format_args!("{path}.name"),
                    ErrorType::Required,
                    None,
                    "every sslProfile needs a name",
                );
            } else if p.name.len() > 63 {
                self.push(
                    format_args!("{path}.name"),
                    ErrorType::TooLong,
                    None,
                    "may not be more than 63 characters",
                );
            } else if !is_dns_label(&p.name) {
                self.push(
                    format_args!("{path}.name"),
                    ErrorType::Invalid,
                    Some(p.name.as_str().into()),
                    "must be lowercase letters, digits and '-', starting and ending with a letter or digit",
                );
            } else if defined.insert(&p.name, i).is_some() {
                self.push(
                    format_args!("{path}.name"),
                    ErrorType::Duplicate,
                    Some(p.name.as_str().into()),
                    msg::SSL_PROFILE_NAMES_UNIQUE,
                );
            }
            self.secret_name(format_args!("{path}.credentials"), &p.credentials);
            self.secret_name(format_args!("{path}.caCert"), &p.ca_cert);
            self.opt_string(format_args!("{path}.ciphers"), &p.ciphers, 1024, true);
            self.opt_string(format_args!("{path}.protocols"), &p.protocols, 256, true);
        }
        let refs =
            spec.every_listener().map(|(r, i, x)| (r.listeners_field(), i, x.ssl_profile.as_deref())).chain(
                spec.every_connector().map(|(r, i, x)| (r.connectors_field(), i, x.ssl_profile.as_deref())),
            );
        let mut missing = Vec::new();
        for (list, i, r) in refs {
            if let Some(r) = r
                && !AUTO_PROFILES.contains(&r)
                && !spec.ssl_profiles.iter().flatten().any(|p| p.name == r)
            {
                missing.push(FieldError::new(
                    format!("spec.{list}[{i}].sslProfile"),
                    ErrorType::Invalid,
                    Some(r.into()),
                    format!("no sslProfile named {r:?} in sslProfiles {}", msg::SSL_PROFILE_UNDEFINED_HINT),
                ));
            }
        }
        self.errors.extend(missing);

        self.max_items("spec.addresses", &spec.addresses, 256);
        for (i, a) in spec.addresses.iter().flatten().enumerate() {
            let path = At::new("addresses", i);
            self.opt_string(format_args!("{path}.prefix"), &a.prefix, 1024, true);
            self.opt_string(format_args!("{path}.pattern"), &a.pattern, 1024, true);
            if a.prefix.is_some() == a.pattern.is_some() {
                self.push(path, ErrorType::Invalid, None, msg::PREFIX_XOR_PATTERN);
            }
            if let Some(d) = &a.distribution {
                self.enumeration(
                    format_args!("{path}.distribution"),
                    d.as_str(),
                    d.is_supported(),
                    crate::types::Distribution::SUPPORTED,
                    "",
                );
            }
            self.range(format_args!("{path}.ingressPhase"), a.ingress_phase, 0, 9);
            self.range(format_args!("{path}.egressPhase"), a.egress_phase, 0, 9);
            self.range(format_args!("{path}.priority"), a.priority, 0, 9);
        }

        self.max_items("spec.autoLinks", &spec.auto_links, 256);
        for (i, a) in spec.auto_links.iter().flatten().enumerate() {
            let path = At::new("autoLinks", i);
            if a.address.is_empty() {
                self.push(
                    format_args!("{path}.address"),
                    ErrorType::Required,
                    None,
                    "the address to link is required",
                );
            } else {
                self.string(format_args!("{path}.address"), &a.address, 1024, true);
            }
            self.direction(format_args!("{path}.direction"), &a.direction);
            self.opt_string(format_args!("{path}.containerId"), &a.container_id, 253, true);
            self.opt_string(format_args!("{path}.connection"), &a.connection, 253, true);
            self.opt_string(format_args!("{path}.externalAddress"), &a.external_address, 1024, true);
            self.range(format_args!("{path}.phase"), a.phase, 0, 9);
            self.container_xor_connection(path, a.container_id.is_some(), a.connection.is_some());
        }

        self.max_items("spec.linkRoutes", &spec.link_routes, 256);
        for (i, r) in spec.link_routes.iter().flatten().enumerate() {
            let path = At::new("linkRoutes", i);
            self.opt_string(format_args!("{path}.prefix"), &r.prefix, 1024, true);
            self.opt_string(format_args!("{path}.pattern"), &r.pattern, 1024, true);
            if r.prefix.is_some() == r.pattern.is_some() {
                self.push(path, ErrorType::Invalid, None, msg::PREFIX_XOR_PATTERN);
            }
            self.direction(format_args!("{path}.direction"), &r.direction);
            self.opt_string(format_args!("{path}.containerId"), &r.container_id, 253, true);
            self.opt_string(format_args!("{path}.connection"), &r.connection, 253, true);
            self.opt_string(format_args!("{path}.addExternalPrefix"), &r.add_external_prefix, 1024, true);
            self.opt_string(format_args!("{path}.delExternalPrefix"), &r.del_external_prefix, 1024, true);
            self.container_xor_connection(path, r.container_id.is_some(), r.connection.is_some());
        }
    }

    pub(super) fn listener(&mut self, path: impl fmt::Display + Copy, l: &Listener) {
        if let Some(name) = &l.name {
            let p = format_args!("{path}.name");
            if name.is_empty() {
                self.push(p, ErrorType::Invalid, Some("".into()), "must not be empty");
            } else if name.len() > 15 {
                self.push(p, ErrorType::TooLong, None, "may not be more than 15 characters");
            } else if !is_iana_svc_name(name) {
                self.push(
                    p,
                    ErrorType::Invalid,
                    Some(name.as_str().into()),
                    format!(
                        "{}: lowercase letters, digits and '-', at least one letter, no leading, trailing or double \
                         '-'",
                        msg::LISTENER_NAME_IANA
                    ),
                );
            }
        }
        self.opt_string(format_args!("{path}.host"), &l.host, 253, true);
        self.port(format_args!("{path}.port"), l.port);
        self.range(format_args!("{path}.cost"), l.cost, 1, i32::MAX);
        self.opt_string(format_args!("{path}.sslProfile"), &l.ssl_profile, 63, true);
        self.opt_string(format_args!("{path}.saslMechanisms"), &l.sasl_mechanisms, 256, true);
        self.range(format_args!("{path}.linkCapacity"), l.link_capacity, 1, i32::MAX);
    }

    pub(super) fn connector(&mut self, path: impl fmt::Display + Copy, c: &Connector) {
        if let Some(name) = &c.name {
            let p = format_args!("{path}.name");
            if name.is_empty() {
                self.push(p, ErrorType::Invalid, Some("".into()), "must not be empty");
            } else if name.len() > 63 {
                self.push(p, ErrorType::TooLong, None, "may not be more than 63 characters");
            } else if !is_dns_label(name) {
                self.push(
                    p,
                    ErrorType::Invalid,
                    Some(name.as_str().into()),
                    "must be lowercase letters, digits and '-', starting and ending with a letter or digit",
                );
            }
        }
        if c.host.is_empty() {
            self.push(
                format_args!("{path}.host"),
                ErrorType::Required,
                None,
                "the host to connect to is required",
            );
        } else {
            self.string(format_args!("{path}.host"), &c.host, 253, true);
        }
        self.port(format_args!("{path}.port"), c.port);
        self.range(format_args!("{path}.cost"), c.cost, 1, i32::MAX);
        self.opt_string(format_args!("{path}.sslProfile"), &c.ssl_profile, 63, true);
        self.range(format_args!("{path}.linkCapacity"), c.link_capacity, 1, i32::MAX);
    }

    pub(super) fn direction(&mut self, path: impl fmt::Display + Copy, d: &Option<crate::types::Direction>) {
        match d {
            None => self.push(path, ErrorType::Required, None, "direction is required: in or out"),
            Some(d) => {
                self.enumeration(path, d.as_str(), d.is_supported(), crate::types::Direction::SUPPORTED, "")
            }
        }
    }

    pub(super) fn container_xor_connection(
        &mut self,
        path: impl fmt::Display + Copy,
        container: bool,
        connection: bool,
    ) {
        if container && connection {
            self.push(path, ErrorType::Forbidden, None, msg::CONTAINER_ID_XOR_CONNECTION);
        }
    }

    /// `resources`: every value a quantity, at most [`crate::rules::MAX_RESOURCES`] entries
    /// per map, each request ≤ its limit (CEL: resources-quantities, requests-within-limits).
    pub(super) fn resources(&mut self, r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) {
        let Some(r) = r else { return };
        let base = "spec.deploymentPlan.resources";
        let mut parsed: [HashMap<&str, crate::quantity::Quantity>; 2] = [HashMap::new(), HashMap::new()];
        for (i, (field, map)) in [("limits", &r.limits), ("requests", &r.requests)].into_iter().enumerate() {
            let Some(map) = map else { continue };
            if map.len() > crate::rules::MAX_RESOURCES {
                self.push(
                    format!("{base}.{field}"),
                    ErrorType::TooMany,
                    None,
                    format!("must have at most {} items", crate::rules::MAX_RESOURCES),
                );
            }
            for (k, v) in map {
                match crate::quantity::Quantity::parse(&v.0) {
                    Ok(q) => {
                        parsed[i].insert(k.as_str(), q);
                    }
                    Err(why) => self.push(
                        format!("{base}.{field}[{k}]"),
                        ErrorType::Invalid,
                        Some(v.0.as_str().into()),
                        format!("{why}: {}", msg::RESOURCES_QUANTITY),
                    ),
                }
            }
        }
        let [limits, requests] = &parsed;
        let mut over: Vec<(&str, String)> = requests
            .iter()
            .filter(|(k, q)| limits.get(*k).is_some_and(|l| *q > l))
            .map(|(k, _)| (*k, format!("{base}.requests[{k}]")))
            .collect();
        over.sort();
        for (k, path) in over {
            let value = r.requests.as_ref().and_then(|m| m.get(k)).map(|q| q.0.as_str().into());
            let limit = r.limits.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone()).unwrap_or_default();
            self.push(
                path,
                ErrorType::Invalid,
                value,
                format!("{} (limit {limit})", msg::REQUESTS_WITHIN_LIMITS),
            );
        }
    }
}
