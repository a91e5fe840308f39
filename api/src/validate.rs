//! Validation: one pure function that returns every violation at once.
//!
//! Each [`FieldError`] has the shape of an apimachinery `field.Error`: a path such as
//! `spec.listeners[1].port`, a type (Required, Invalid, ...), the bad value and a detail
//! message, and prints the way the API server prints its own field errors. [`validate`]
//! enforces every schema constraint and CEL rule of the CRD (see [`crate::rules`]) with the
//! same meaning, plus the rules listed under "validate-only" in the API reference.

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

use crate::messages as msg;
use crate::spec::{AUTO_PROFILES, DEFAULT_LIVENESS_PORT, LinkRole, is_no_users};
use crate::types::{Connector, Interconnect, InterconnectSpec, Listener, Role};

/// The kind of a field error, as in `k8s.io/apimachinery/pkg/util/validation/field`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// A required field is absent or empty.
    Required,
    /// A value is malformed or out of range.
    Invalid,
    /// A value that must be unique is repeated.
    Duplicate,
    /// A value is not one of the supported values.
    NotSupported,
    /// A field may not be set in this context.
    Forbidden,
    /// A list has more items than allowed.
    TooMany,
    /// A string is longer than allowed.
    TooLong,
}

impl ErrorType {
    /// The `reason` of a `metav1.StatusCause` (`FieldValueInvalid`, ...).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::TooLong => "FieldValueTooLong",
        }
    }

    /// The text apimachinery prints for the type (`Invalid value`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooMany => "Too many",
            ErrorType::TooLong => "Too long",
        }
    }
}

/// Longest offending value a message shows, in characters (of its JSON text).
pub const MAX_SHOWN_VALUE: usize = 256;

/// One violation: where, what kind, the offending value and what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Path of the field, e.g. `spec.listeners[1].port`.
    pub field: String,
    /// The kind of violation.
    pub error_type: ErrorType,
    /// The offending value, when the type shows one (Invalid, Duplicate, NotSupported, TooMany).
    pub bad_value: Option<Value>,
    /// What is wrong and how to fix it.
    pub detail: String,
}

impl FieldError {
    fn new(
        field: String,
        error_type: ErrorType,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError { field, error_type, bad_value, detail: detail.into() }
    }

    /// The message without the field path: `Invalid value: 70000: must be ...`, as
    /// apimachinery's `ErrorBody` prints it. A value longer than [`MAX_SHOWN_VALUE`]
    /// characters is cut there and ends with `…`, so a huge offending value cannot make a
    /// huge message.
    pub fn body(&self) -> String {
        let mut s = self.error_type.as_str().to_string();
        let show_value = matches!(
            self.error_type,
            ErrorType::Invalid | ErrorType::Duplicate | ErrorType::NotSupported | ErrorType::TooMany
        );
        if let (true, Some(v)) = (show_value, &self.bad_value) {
            s.push_str(": ");
            let shown = v.to_string();
            if shown.chars().count() > MAX_SHOWN_VALUE {
                s.extend(shown.chars().take(MAX_SHOWN_VALUE));
                s.push('…');
            } else {
                s.push_str(&shown);
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Validates an Interconnect (its `metadata.name` and `spec`) and returns every violation,
/// in field order; an empty list means valid. Pure: it reads nothing but its argument.
///
/// The rendered-size check measures the configuration of `defaults(ic)`; for an object that
/// is already what [`crate::defaults`] returns, [`validate_defaulted`] gives the same answer
/// without defaulting it again.
pub fn validate(ic: &Interconnect) -> Vec<FieldError> {
    validate_with(ic, false)
}

/// [`validate`] of an Interconnect that is already what [`crate::defaults`] returns (as the
/// webhook and the controller always validate): the router configuration whose size is
/// checked is rendered from `ic.spec` as it is, not from a defaulted copy. Given an object
/// that is not defaulted, every check but that one is the same, and that one measures the
/// configuration without the defaults' entries.
pub fn validate_defaulted(ic: &Interconnect) -> Vec<FieldError> {
    validate_with(ic, true)
}

fn validate_with(ic: &Interconnect, defaulted: bool) -> Vec<FieldError> {
    let mut v = Validator::default();
    let name = ic.metadata.name.as_deref().unwrap_or_default();
    if !is_dns1035_label(name) {
        v.push(
            "metadata.name",
            ErrorType::Invalid,
            Some(name.into()),
            "must be at most 63 lowercase letters, digits and '-', start with a letter and end with a letter \
             or digit: it names the router Service, Deployment and container",
        );
    } else if RESERVED_NAMES.contains(&name) {
        v.push(
            "metadata.name",
            ErrorType::Invalid,
            Some(name.into()),
            "every namespace holds a ServiceAccount with this name, and the routers' ServiceAccount is named \
             after the Interconnect (the controller never takes over an object it does not own, so this \
             Interconnect could never run): choose another name",
        );
    }
    v.spec(&ic.spec);
    v.generated_secrets(ic);
    v.sizes(ic, defaulted);
    v.errors
}

/// What the operator generates into a Secret, for [`Validator::generated_secrets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Generated {
    /// The SASL users Secret (generated when missing).
    Users,
    /// A CA: the Interconnect's, or a `generateCaCert` profile's (several profiles may share one).
    Ca,
    /// A `generateCredentials` profile's certificate.
    Certificate,
}

impl Generated {
    fn what(self) -> &'static str {
        match self {
            Generated::Users => "the SASL users (with passwords)",
            Generated::Ca => "a CA",
            Generated::Certificate => "a router certificate",
        }
    }
}

/// Names an Interconnect cannot have because every namespace already holds an object of
/// that name among its children's: the ServiceAccount `default`.
pub const RESERVED_NAMES: [&str; 1] = ["default"];

/// Longest JSON of a stored `spec`, in bytes. etcd refuses a request over 1.5 MiB (its
/// default `--max-request-bytes`, 1,572,864) with `etcdserver: request is too large`,
/// naming no field; a stored object can hold its spec twice (`kubectl apply` keeps a copy
/// in the `last-applied-configuration` annotation) besides metadata, managed fields and
/// status. 512 KiB twice leaves half a MiB for the rest.
pub const MAX_SPEC_BYTES: usize = 512 * 1024;

/// Longest rendered router configuration, in bytes: a ConfigMap holds at most 1 MiB
/// (1,048,576 bytes) of keys and values, and the configuration's key is
/// [`crate::router_config::CONFIG_FILE`].
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024 - crate::router_config::CONFIG_FILE.len();

/// `n` with a thousands separator (`1,234,567`).
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Validates a spec alone (no `metadata.name` check).
pub fn validate_spec(spec: &InterconnectSpec) -> Vec<FieldError> {
    let mut v = Validator::default();
    v.spec(spec);
    v.errors
}

/// The path of an item of a list, `spec.<list>[<index>]`, with an optional field after it
/// (`.<field>`): formatted only when a violation is reported at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct At<'a> {
    list: &'a str,
    index: usize,
    field: &'static str,
}

impl<'a> At<'a> {
    pub(crate) fn new(list: &'a str, index: usize) -> Self {
        At { list, index, field: "" }
    }

    /// This item's `field`.
    fn field(self, field: &'static str) -> Self {
        At { field, ..self }
    }

    /// The path without the leading `spec.` (how a detail names another field).
    fn relative(self) -> String {
        let full = self.to_string();
        full.trim_start_matches("spec.").to_string()
    }
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spec.{}[{}]", self.list, self.index)?;
        if !self.field.is_empty() {
            write!(f, ".{}", self.field)?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, without the length limit.
fn is_label_chars(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 label of at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_label_chars(s)
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// A DNS-1123 subdomain of at most 253 characters (Secret and ConfigMap names).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_chars)
}

/// An IANA service name (`IANA_SVC_NAME`): at most 15 characters of `[a-z0-9-]`, at least
/// one letter, no leading, trailing or double '-'. Required of container port names.
pub fn is_iana_svc_name(s: &str) -> bool {
    s.len() <= 15 && is_label_chars(s) && s.bytes().any(|b| b.is_ascii_lowercase()) && !s.contains("--")
}

/// A value the router's configuration can carry: anything but NUL (the configuration is
/// JSON-escaped; the router keeps values as C strings).
pub fn is_config_safe(s: &str) -> bool {
    !s.contains('\0')
}

/// Whether an optional list has at least one item.
fn nonempty<T>(list: &Option<Vec<T>>) -> bool {
    list.as_ref().is_some_and(|l| !l.is_empty())
}

fn supported_list(values: &[&str]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    format!("supported values: {}", quoted.join(", "))
}

impl Validator {
    /// Records a violation; `field` is formatted only here, so a path costs nothing until
    /// something at it is wrong.
    fn push(
        &mut self,
        field: impl fmt::Display,
        t: ErrorType,
        value: Option<Value>,
        detail: impl Into<String>,
    ) {
        self.errors.push(FieldError::new(field.to_string(), t, value, detail));
    }

    /// Length bounds and, for config values (`config`), the character rule.
    fn string(&mut self, path: impl fmt::Display + Copy, s: &str, max: usize, config: bool) {
        if s.is_empty() {
            self.push(path, ErrorType::Invalid, Some(s.into()), "must not be empty");
        } else if s.chars().count() > max {
            self.push(path, ErrorType::TooLong, None, format!("may not be more than {max} characters"));
        }
        if config && !is_config_safe(s) {
            self.push(path, ErrorType::Invalid, Some(s.into()), msg::CONFIG_NUL);
        }
    }

    fn opt_string(&mut self, path: impl fmt::Display + Copy, s: &Option<String>, max: usize, config: bool) {
        if let Some(s) = s {
            self.string(path, s, max, config);
        }
    }

    fn secret_name(&mut self, path: impl fmt::Display + Copy, s: &Option<String>) {
        if let Some(s) = s {
            self.string(path, s, 253, false);
            if !s.is_empty() && s.len() <= 253 && !is_dns_subdomain(s) {
                self.push(
                    path,
                    ErrorType::Invalid,
                    Some(s.as_str().into()),
                    "must be a Secret name: lowercase letters, digits, '-' and '.', starting and ending with a \
                     letter or digit",
                );
            }
        }
    }

    fn range(&mut self, path: impl fmt::Display + Copy, v: Option<i32>, min: i32, max: i32) {
        if let Some(v) = v
            && !(min..=max).contains(&v)
        {
            self.push(
                path,
                ErrorType::Invalid,
                Some(v.into()),
                format!("must be between {min} and {max}, inclusive"),
            );
        }
    }

    fn port(&mut self, path: impl fmt::Display + Copy, port: i32) {
        if port == 0 {
            self.push(path, ErrorType::Required, None, "a port between 1 and 65535 is required");
        } else {
            self.range(path, Some(port), 1, 65535);
        }
    }

    fn enumeration(
        &mut self,
        path: impl fmt::Display + Copy,
        value: &str,
        supported: bool,
        values: &[&str],
        hint: &str,
    ) {
        if !supported {
            let mut detail = supported_list(values);
            if !hint.is_empty() {
                detail.push_str(hint);
            }
            self.push(path, ErrorType::NotSupported, Some(value.into()), detail);
        }
    }

    fn max_items<T>(&mut self, path: impl fmt::Display, list: &Option<Vec<T>>, max: usize) {
        if let Some(l) = list
            && l.len() > max
        {
            self.push(
                path,
                ErrorType::TooMany,
                Some(l.len().into()),
                format!("must have at most {max} items"),
            );
        }
    }

    /// What must fit where it is stored: the spec in etcd ([`MAX_SPEC_BYTES`]) and the
    /// rendered router configuration (of the defaulted spec) in a ConfigMap
    /// ([`MAX_CONFIG_BYTES`]). `defaulted`: `ic` is already defaulted.
    fn sizes(&mut self, ic: &Interconnect, defaulted: bool) {
        let spec = crate::router_config::json_len(&ic.spec);
        if spec > MAX_SPEC_BYTES {
            self.push(
                "spec",
                ErrorType::TooLong,
                None,
                format!(
                    "may not be more than {} bytes as JSON (it is {}): the stored object must fit etcd's request \
                     limit; split the routers' configuration over several Interconnects",
                    grouped(MAX_SPEC_BYTES),
                    grouped(spec)
                ),
            );
            return; // the configuration of such a spec is not worth rendering
        }
        let config = if defaulted {
            // Most specs are far too small to matter: no rendering when the bound fits.
            if crate::router_config::rendered_len_bound(&ic.spec, spec) <= MAX_CONFIG_BYTES {
                return;
            }
            crate::router_config::router_config(&ic.spec).rendered_len()
        } else {
            crate::router_config::router_config(&crate::defaults(ic).spec).rendered_len()
        };
        if config > MAX_CONFIG_BYTES {
            self.push(
                "spec",
                ErrorType::TooLong,
                None,
                format!(
                    "the rendered router configuration would be {} bytes; a ConfigMap holds at most {} (each \
                     '$' takes 9): shorten or split the lists",
                    grouped(config),
                    grouped(MAX_CONFIG_BYTES)
                ),
            );
        }
    }

    fn spec(&mut self, spec: &InterconnectSpec) {
        let edge = spec.deployment_plan.as_ref().and_then(|p| p.role.as_ref()) == Some(&Role::Edge);
        if let Some(plan) = &spec.deployment_plan {
            self.opt_string("spec.deploymentPlan.image", &plan.image, 1024, false);
            self.range("spec.deploymentPlan.size", plan.size, 1, 16);
            self.resources(plan.resources.as_ref());
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

    fn listener(&mut self, path: impl fmt::Display + Copy, l: &Listener) {
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

    fn connector(&mut self, path: impl fmt::Display + Copy, c: &Connector) {
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

    fn direction(&mut self, path: impl fmt::Display + Copy, d: &Option<crate::types::Direction>) {
        match d {
            None => self.push(path, ErrorType::Required, None, "direction is required: in or out"),
            Some(d) => {
                self.enumeration(path, d.as_str(), d.is_supported(), crate::types::Direction::SUPPORTED, "")
            }
        }
    }

    fn container_xor_connection(
        &mut self,
        path: impl fmt::Display + Copy,
        container: bool,
        connection: bool,
    ) {
        if container && connection {
            self.push(path, ErrorType::Forbidden, None, msg::CONTAINER_ID_XOR_CONNECTION);
        }
    }

    /// Ports unique across the liveness port and all listeners (CEL: listener-ports-unique).
    fn unique_ports(&mut self, spec: &InterconnectSpec) {
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

    /// Every Secret the operator writes needs a name of its own: the users Secret, the
    /// Interconnect's CA (`<name>-ca`, when it signs generated certificates and no
    /// `deploymentPlan.issuer` is set), each `generateCaCert` profile's `caCert` and each
    /// `generateCredentials` profile's `credentials`. Two certificates, or a certificate and a
    /// CA, or users and either, in one Secret would overwrite each other on every reconcile
    /// and roll the routers for ever. One CA shared by profiles is allowed.
    fn generated_secrets(&mut self, ic: &Interconnect) {
        let spec = &ic.spec;
        let mut seen: Vec<(String, String, Generated)> = Vec::new();
        if let Some(users) = ic.users_secret() {
            seen.push((users, "spec.users".into(), Generated::Users));
        }
        let ic_ca = ic.issuer_secret();
        let signs = spec
            .ssl_profiles
            .iter()
            .flatten()
            .filter(|p| p.generate_credentials == Some(true))
            .any(|p| p.mutual_auth != Some(true) || p.ca_cert.as_ref().is_none_or(|c| *c == ic_ca));
        if spec.user_issuer().is_none() && signs {
            let path = "the Interconnect's CA, <name>-ca (spec.deploymentPlan.issuer is not set)".to_string();
            seen.push((ic_ca, path, Generated::Ca));
        }
        for (i, p) in spec.ssl_profiles.iter().flatten().enumerate() {
            let mut mine = Vec::new();
            if p.generate_ca_cert == Some(true)
                && let Some(ca) = &p.ca_cert
            {
                mine.push((ca.clone(), format!("spec.sslProfiles[{i}].caCert"), Generated::Ca));
            }
            if p.generate_credentials == Some(true)
                && let Some(c) = &p.credentials
            {
                mine.push((c.clone(), format!("spec.sslProfiles[{i}].credentials"), Generated::Certificate));
            }
            for (name, path, kind) in mine {
                let clash = seen
                    .iter()
                    .find(|(n, _, k)| *n == name && !(*k == Generated::Ca && kind == Generated::Ca));
                if let Some((_, other, other_kind)) = clash {
                    let other = other.trim_start_matches("spec.").to_string();
                    let detail = format!(
                        "the operator generates {} into this Secret, and {} into the same Secret for {other}: they \
                         would overwrite each other on every reconcile; give each generated Secret its own name",
                        kind.what(),
                        other_kind.what()
                    );
                    self.push(path.clone(), ErrorType::Duplicate, Some(name.as_str().into()), detail);
                } else {
                    seen.push((name, path, kind));
                }
            }
        }
    }

    fn unique_names<'a>(&mut self, names: impl Iterator<Item = (At<'a>, Option<&'a str>)>, what: &str) {
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
    /// rendered health listener's name (CEL: entity-names-unique). Duplicates within one
    /// kind are the listener/connector/sslProfile uniqueness rules' to report.
    fn entity_names_unique(&mut self, spec: &InterconnectSpec) {
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

    /// `resources`: every value a quantity, at most [`crate::rules::MAX_RESOURCES`] entries
    /// per map, each request ≤ its limit (CEL: resources-quantities, requests-within-limits).
    fn resources(&mut self, r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) {
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

    /// Validate-only: an unnamed normal or inter-router listener gets container port name
    /// `port-<N>`; a named listener may not take that name.
    fn port_name_collisions(&mut self, spec: &InterconnectSpec) {
        // Only normal and inter-router listeners become container ports.
        let in_pod = |r: &LinkRole| *r != LinkRole::Edge;
        let generated: Vec<String> = spec
            .every_listener()
            .filter(|(r, _, l)| in_pod(r) && l.name.is_none() && l.port != 0)
            .map(|(_, _, l)| format!("port-{}", l.port))
            .collect();
        for (role, i, l) in spec.every_listener().filter(|(r, _, _)| in_pod(r)) {
            if let Some(n) = &l.name
                && generated.contains(n)
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
mod shown_value_tests {
    use super::*;

    #[test]
    fn long_offending_values_are_cut_in_messages() {
        let e = |v: &str| FieldError::new("spec.users".into(), ErrorType::Invalid, Some(v.into()), "d");
        assert_eq!(e("abc").body(), r#"Invalid value: "abc": d"#);
        let long = e(&"x".repeat(3 * 1024 * 1024)).body();
        assert!(long.chars().count() < MAX_SHOWN_VALUE + 40, "{} characters", long.len());
        assert!(long.starts_with(r#"Invalid value: "xxx"#) && long.ends_with("…: d"), "{long:.80}");
    }
}
