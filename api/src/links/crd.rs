//! The CustomResourceDefinitions of [`AccessGrant`] and [`Link`]: the schema derived from
//! the types, bounds on every string, and the CEL rules of [`cel_rules`] (each one a rule of
//! [`super::validate`] too, with the same message).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::validate::{EXPIRY_FORMAT, MAX_SITE};
use super::{AccessGrant, Link};
use crate::rules::{CelRule, NAME_PATTERN, node, reflow_descriptions, strip_defaults};

/// Path of the committed AccessGrant CRD, relative to the repository root.
pub const GRANT_CRD_PATH: &str = "deploy/crds/accessgrants.interconnectedcloud.github.io.yaml";
/// Path of the committed Link CRD, relative to the repository root.
pub const LINK_CRD_PATH: &str = "deploy/crds/links.interconnectedcloud.github.io.yaml";

/// A DNS-1123 subdomain (a Secret's name).
const SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A DNS-1123 label.
const LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A host name or an IP address (v4 or v6), loosely: [`super::validate::is_host`] decides.
const HOST_PATTERN: &str = r"^[A-Za-z0-9.:-]+$";
/// The duration format of `spec.expiry`.
const EXPIRY_PATTERN: &str = "^([0-9]{1,9}h)?([0-9]{1,9}m)?([0-9]{1,9}s)?$";

fn cel(
    id: &'static str,
    location: &str,
    rule: &str,
    message: &str,
    field_path: Option<&str>,
    reason: Option<&'static str>,
) -> CelRule {
    CelRule {
        id,
        location: location.into(),
        rule: rule.into(),
        message: message.into(),
        field_path: field_path.map(Into::into),
        reason,
    }
}

/// Every CEL rule of the two CRDs, as `(kind, rule)`.
pub fn cel_rules() -> Vec<(&'static str, CelRule)> {
    vec![
        (
            "AccessGrant",
            cel(
                "grant-expiry-format",
                "spec.expiry",
                &format!(
                    "self.matches('{EXPIRY_PATTERN}') && self != '' && duration(self) >= duration('60s') && \
                     duration(self) <= duration('{}s')",
                    super::validate::MAX_EXPIRY_SECONDS
                ),
                EXPIRY_FORMAT,
                None,
                None,
            ),
        ),
        (
            "AccessGrant",
            cel(
                "grant-edge-no-cost",
                "spec",
                "!(has(self.cost) && has(self.role) && self.role == 'edge')",
                "an edge link has no cost (qdrouterd applies cost to inter-router connections only)",
                Some(".cost"),
                Some("FieldValueForbidden"),
            ),
        ),
        (
            "AccessGrant",
            cel(
                "grant-site-immutable",
                "spec",
                "self.site == oldSelf.site && self.interconnect == oldSelf.interconnect",
                "site and interconnect are immutable: a grant is for one site into one Interconnect (make another grant)",
                Some(".site"),
                Some("FieldValueForbidden"),
            ),
        ),
    ]
}

fn finish(crd: &mut CustomResourceDefinition, kind: &str, shape: impl Fn(&mut Value)) {
    crate::rules::edit_schema(crd, |value| {
        strip_defaults(value);
        reflow_descriptions(value);
        value["properties"]["metadata"] = json!({
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 63, "pattern": NAME_PATTERN}}
        });
        shape(value);
        for (_, r) in cel_rules().iter().filter(|(k, _)| *k == kind) {
            crate::rules::add_rule(value, r);
        }
    });
}

fn string(schema: &mut Value, loc: &str, max: usize, pattern: Option<&str>) {
    let n = node(schema, loc);
    n["maxLength"] = json!(max);
    if let Some(p) = pattern {
        n["pattern"] = json!(p);
    }
}

fn cost(schema: &mut Value, loc: &str) {
    node(schema, loc)["minimum"] = json!(1);
}

/// The AccessGrant CRD.
pub fn grant_crd() -> CustomResourceDefinition {
    let mut crd = AccessGrant::crd();
    finish(&mut crd, "AccessGrant", |s| {
        string(s, "spec.interconnect", 63, Some(NAME_PATTERN));
        string(s, "spec.site", MAX_SITE, Some(LABEL_PATTERN));
        string(s, "spec.expiry", 32, None);
        string(s, "spec.externalHosts[].host", 253, Some(HOST_PATTERN));
        cost(s, "spec.cost");
        let port = node(s, "spec.externalHosts[].port");
        port["minimum"] = json!(1);
        port["maximum"] = json!(65535);
    });
    crd
}

/// The Link CRD.
pub fn link_crd() -> CustomResourceDefinition {
    let mut crd = Link::crd();
    finish(&mut crd, "Link", |s| {
        string(s, "spec.interconnect", 63, Some(NAME_PATTERN));
        string(s, "spec.tokenSecret", 253, Some(SUBDOMAIN_PATTERN));
        cost(s, "spec.cost");
    });
    crd
}

/// A CRD as YAML, as committed.
pub fn crd_yaml_of(crd: &CustomResourceDefinition) -> String {
    let body = serde_saphyr::to_string(crd).expect("CRD serializes to YAML");
    format!(
        "# Generated by `cargo run -p qdr-api --bin crdgen` from api/src/links. Do not edit: run `make crd`.\n{body}"
    )
}
