//! The API server's share of validation: CEL rules (`x-kubernetes-validations`) and the
//! `required` lists that the Rust types cannot express, attached to the schema derived
//! from [`crate::types`]. [`crate::validate`] enforces each of these with the same
//! meaning and the same message text (from [`crate::messages`]); the tests prove the two
//! agree. Only CEL and schema rules live here.
//!
//! A location is a path in the `openAPIV3Schema`: `spec.listeners[]` is the item schema of
//! `spec.listeners`, `""` the root.

use serde_json::{Value, json};

use crate::messages as msg;
use crate::spec::{AUTO_PROFILES, CONNECTOR_LISTS, DEFAULT_LIVENESS_PORT, LISTENER_LISTS};

/// One CEL rule and where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct CelRule {
    /// Stable identifier, used in tests and docs.
    pub id: &'static str,
    /// Schema location (see the module docs).
    pub location: String,
    /// The CEL expression; `self` is the value at `location`.
    pub rule: String,
    /// What the API server prints when the rule fails.
    pub message: String,
    /// Path, relative to `location`, that the error is reported at.
    pub field_path: Option<String>,
    /// `FieldValueForbidden`, `FieldValueRequired`, ... (default `FieldValueInvalid`).
    pub reason: Option<&'static str>,
}

/// Fields whose values are written into the router's configuration as strings, by schema
/// location: none may contain NUL (CEL `config-no-nul`).
pub fn config_strings() -> Vec<String> {
    let mut v = Vec::new();
    for l in LISTENER_LISTS {
        for f in ["host", "saslMechanisms", "sslProfile"] {
            v.push(format!("spec.{l}[].{f}"));
        }
    }
    for c in CONNECTOR_LISTS {
        for f in ["host", "sslProfile"] {
            v.push(format!("spec.{c}[].{f}"));
        }
    }
    for f in ["ciphers", "protocols"] {
        v.push(format!("spec.sslProfiles[].{f}"));
    }
    for f in ["prefix", "pattern"] {
        v.push(format!("spec.addresses[].{f}"));
    }
    for f in ["address", "containerId", "connection", "externalAddress"] {
        v.push(format!("spec.autoLinks[].{f}"));
    }
    for f in ["prefix", "pattern", "containerId", "connection", "addExternalPrefix", "delExternalPrefix"] {
        v.push(format!("spec.linkRoutes[].{f}"));
    }
    v
}

/// `required` lists added to item schemas (fields that are plain values in Rust so that
/// absence reaches `validate` as a field error instead of failing the decode).
pub fn required_fields() -> Vec<(String, Vec<&'static str>)> {
    let mut v = Vec::new();
    for l in LISTENER_LISTS {
        v.push((format!("spec.{l}[]"), vec!["port"]));
    }
    for c in CONNECTOR_LISTS {
        v.push((format!("spec.{c}[]"), vec!["host", "port"]));
    }
    v.push(("spec.sslProfiles[]".into(), vec!["name"]));
    v.push(("spec.autoLinks[]".into(), vec!["address", "direction"]));
    v.push(("spec.linkRoutes[]".into(), vec!["direction"]));
    v
}

/// `metadata.name`: a DNS-1035 label (at most 63 characters, starting with a letter).
pub const NAME_PATTERN: &str = "^[a-z]([-a-z0-9]*[a-z0-9])?$";

const DNS_SUBDOMAIN_RE: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
const ROLE_IS_EDGE: &str =
    "(has(self.deploymentPlan) && has(self.deploymentPlan.role) && self.deploymentPlan.role == 'edge')";

fn rule(id: &'static str, location: &str, rule: String, message: String) -> CelRule {
    CelRule { id, location: location.into(), rule, message, field_path: None, reason: None }
}

/// CEL: the names set in the spec lists `lists`, concatenated.
fn names_in(lists: &[&str]) -> String {
    lists
        .iter()
        .map(|l| format!("(has(self.{l}) ? self.{l}.filter(x, has(x.name)).map(x, x.name) : [])"))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// Most entries in `resources.limits` and `resources.requests` (each).
pub const MAX_RESOURCES: usize = 16;

/// The format of a Kubernetes quantity (controller-gen's pattern for `resource.Quantity`).
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Every CEL rule of the CRD.
pub fn cel_rules() -> Vec<CelRule> {
    let mut rules = Vec::new();

    rules.push(CelRule {
        field_path: Some(".size".into()),
        reason: Some("FieldValueForbidden"),
        ..rule(
            "every-without-size",
            "spec.deploymentPlan",
            "!(has(self.placement) && self.placement == 'Every' && has(self.size) && self.size != 1)".into(),
            msg::EVERY_WITHOUT_SIZE.into(),
        )
    });

    let budget = "spec.deploymentPlan.disruptionBudget";
    rules.push(CelRule {
        field_path: Some(".minAvailable".into()),
        reason: Some("FieldValueForbidden"),
        ..rule(
            "disruption-budget-one-bound",
            budget,
            "!(has(self.maxUnavailable) && has(self.minAvailable))".into(),
            msg::BUDGET_ONE_OF.into(),
        )
    });
    rules.push(CelRule {
        reason: Some("FieldValueForbidden"),
        ..rule(
            "disruption-budget-disabled",
            budget,
            "!(has(self.enabled) && !self.enabled && (has(self.maxUnavailable) || has(self.minAvailable)))"
                .into(),
            msg::BUDGET_DISABLED_WITH_BOUND.into(),
        )
    });
    rules.push(CelRule {
        field_path: Some(".disruptionBudget".into()),
        reason: Some("FieldValueForbidden"),
        ..rule(
            "disruption-budget-not-every",
            "spec.deploymentPlan",
            "!(has(self.placement) && self.placement == 'Every' && has(self.disruptionBudget) && \
             (has(self.disruptionBudget.maxUnavailable) || has(self.disruptionBudget.minAvailable)))"
                .into(),
            msg::BUDGET_WITH_EVERY.into(),
        )
    });

    for (id, list) in [
        ("edge-without-inter-router-listeners", "interRouterListeners"),
        ("edge-without-edge-listeners", "edgeListeners"),
        ("edge-without-inter-router-connectors", "interRouterConnectors"),
    ] {
        rules.push(CelRule {
            field_path: Some(format!(".{list}")),
            reason: Some("FieldValueForbidden"),
            ..rule(
                id,
                "spec",
                format!("!{ROLE_IS_EDGE} || !has(self.{list}) || size(self.{list}) == 0"),
                msg::edge_forbids(list),
            )
        });
    }
    rules.push(CelRule {
        field_path: Some(".edgeConnectors".into()),
        reason: Some("FieldValueForbidden"),
        ..rule(
            "interior-without-edge-connectors",
            "spec",
            format!("{ROLE_IS_EDGE} || !has(self.edgeConnectors) || size(self.edgeConnectors) == 0"),
            msg::INTERIOR_WITHOUT_EDGE_CONNECTORS.into(),
        )
    });

    let ports = LISTENER_LISTS
        .iter()
        .map(|l| format!("(has(self.{l}) ? self.{l}.filter(l, has(l.port)).map(l, l.port) : [])"))
        .chain(std::iter::once(format!(
            "[has(self.deploymentPlan) && has(self.deploymentPlan.livenessPort) ? \
             self.deploymentPlan.livenessPort : {DEFAULT_LIVENESS_PORT}]"
        )))
        .collect::<Vec<_>>()
        .join(" + ");
    rules.push(rule(
        "listener-ports-unique",
        "spec",
        format!("({ports}).all(p, ({ports}).filter(q, q == p).size() == 1)"),
        format!(
            "{} (default {DEFAULT_LIVENESS_PORT}): change the duplicated port",
            msg::LISTENER_PORTS_UNIQUE
        ),
    ));

    for (id, lists, what) in [
        ("listener-names-unique", LISTENER_LISTS, msg::LISTENER_NAMES_UNIQUE),
        ("connector-names-unique", CONNECTOR_LISTS, msg::CONNECTOR_NAMES_UNIQUE),
    ] {
        let names = names_in(&lists);
        rules.push(rule(
            id,
            "spec",
            format!("({names}).all(n, ({names}).filter(m, m == n).size() == 1)"),
            format!("{what}: rename the duplicate"),
        ));
    }

    let (listeners, connectors) = (names_in(&LISTENER_LISTS), names_in(&CONNECTOR_LISTS));
    let profiles = "(has(self.sslProfiles) ? self.sslProfiles.map(p, p.name) : [])";
    let health = msg::HEALTH_LISTENER;
    rules.push(rule(
        "entity-names-unique",
        "spec",
        format!(
            "({listeners}).all(n, n != '{health}' && !(n in ({connectors})) && !(n in {profiles})) && \
             ({connectors}).all(n, n != '{health}' && !(n in {profiles})) && !('{health}' in {profiles})"
        ),
        msg::ENTITY_NAMES_UNIQUE.into(),
    ));

    let reserved = msg::RESERVED_NAME_PREFIX;
    rules.push(rule(
        "reserved-names",
        "spec",
        format!("({listeners} + {connectors} + {profiles}).all(n, !n.startsWith('{reserved}'))"),
        msg::RESERVED_NAME.into(),
    ));

    let auto = AUTO_PROFILES.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(", ");
    for list in LISTENER_LISTS.iter().chain(CONNECTOR_LISTS.iter()) {
        rules.push(CelRule {
            field_path: Some(format!(".{list}")),
            ..rule(
                "ssl-profile-defined",
                "spec",
                format!(
                    "!has(self.{list}) || self.{list}.all(x, !has(x.sslProfile) || x.sslProfile in [{auto}] || \
                     (has(self.sslProfiles) && self.sslProfiles.exists(p, p.name == x.sslProfile)))"
                ),
                format!(
                    "every sslProfile named in {list} must be defined in sslProfiles {}",
                    msg::SSL_PROFILE_UNDEFINED_HINT
                ),
            )
        });
    }
    rules.push(rule(
        "ssl-profile-names-unique",
        "spec.sslProfiles",
        "self.all(p, self.exists_one(q, q.name == p.name))".into(),
        msg::SSL_PROFILE_NAMES_UNIQUE.into(),
    ));

    for list in ["addresses", "linkRoutes"] {
        rules.push(rule(
            "prefix-xor-pattern",
            &format!("spec.{list}[]"),
            "has(self.prefix) != has(self.pattern)".into(),
            msg::PREFIX_XOR_PATTERN.into(),
        ));
    }
    for list in ["linkRoutes", "autoLinks"] {
        rules.push(CelRule {
            reason: Some("FieldValueForbidden"),
            ..rule(
                "container-id-xor-connection",
                &format!("spec.{list}[]"),
                "!(has(self.containerId) && has(self.connection))".into(),
                msg::CONTAINER_ID_XOR_CONNECTION.into(),
            )
        });
    }

    for l in LISTENER_LISTS {
        rules.push(rule(
            "listener-name-iana",
            &format!("spec.{l}[].name"),
            "self.matches('[a-z]') && !self.contains('--')".into(),
            format!("{}: include at least one letter and no '--'", msg::LISTENER_NAME_IANA),
        ));
    }

    rules.push(rule(
        "users-secret-name",
        "spec.users",
        format!(
            "self.lowerAscii() == 'none' || self.lowerAscii() == 'false' || self.matches('{DNS_SUBDOMAIN_RE}')"
        ),
        msg::USERS_SECRET_NAME.into(),
    ));

    for loc in config_strings() {
        rules.push(rule("config-no-nul", &loc, r"!self.matches('\\x00')".into(), msg::CONFIG_NUL.into()));
    }
    rules
}

/// Adds CEL rule `r` to the `x-kubernetes-validations` of its location in `schema`.
pub(crate) fn add_rule(schema: &mut Value, r: &CelRule) {
    let mut entry = json!({"rule": r.rule, "message": r.message});
    if let Some(fp) = &r.field_path {
        entry["fieldPath"] = json!(fp);
    }
    if let Some(reason) = r.reason {
        entry["reason"] = json!(reason);
    }
    let n = node(schema, &r.location);
    match n.get_mut("x-kubernetes-validations").and_then(Value::as_array_mut) {
        Some(list) => list.push(entry),
        None => n["x-kubernetes-validations"] = json!([entry]),
    }
}

/// Runs `edit` on the `openAPIV3Schema` of every version of `crd`, as JSON.
///
/// # Panics
/// When the schema is missing or `edit` leaves it malformed (programming errors the CRD
/// tests catch).
pub(crate) fn edit_schema(
    crd: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    edit: impl Fn(&mut Value),
) {
    for version in &mut crd.spec.versions {
        let schema = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .expect("kube derives an openAPIV3Schema");
        let mut value = serde_json::to_value(&*schema).expect("schema serializes");
        edit(&mut value);
        *schema = serde_json::from_value(value).expect("the rules keep the schema well-formed");
    }
}

pub(crate) fn node<'a>(schema: &'a mut Value, location: &str) -> &'a mut Value {
    let mut cur = schema;
    if location.is_empty() {
        return cur;
    }
    for seg in location.split('.') {
        let (name, item) = match seg.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (seg, false),
        };
        cur = cur
            .get_mut("properties")
            .and_then(|p| p.get_mut(name))
            .unwrap_or_else(|| panic!("schema has no property {name} at {location}"));
        if item {
            cur = cur.get_mut("items").unwrap_or_else(|| panic!("{name} at {location} is not an array"));
        }
    }
    cur
}

/// Adds [`cel_rules`] and [`required_fields`] to an `openAPIV3Schema` derived from the
/// types.
///
/// # Panics
/// When a location names no property of the schema (a programming error caught by the
/// unit tests).
pub fn apply(schema: &mut Value) {
    strip_defaults(schema);
    reflow_descriptions(schema);
    // metadata.name names the router Service, so it must be a DNS-1035 label. A CRD schema
    // may restrict metadata.name (and nothing else in metadata) with maxLength and pattern.
    schema["properties"]["metadata"] = json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 63, "pattern": NAME_PATTERN}}
    });
    for r in cel_rules() {
        add_rule(schema, &r);
    }
    // Quantities: the API server does not check them in a CRD (`cpu: abc` was stored, and
    // every apply of the Deployment failed). A CEL `isQuantity` over these maps exceeds the
    // cost budget (int-or-string values have no size bound the estimator uses), so the
    // format is a schema pattern, as controller-gen writes for `resource.Quantity`.
    for m in ["limits", "requests"] {
        let map = node(schema, &format!("spec.deploymentPlan.resources.{m}"));
        map["maxProperties"] = json!(MAX_RESOURCES);
        map["additionalProperties"]["pattern"] = json!(QUANTITY_PATTERN);
    }
    // The scheduling and metadata maps (issue 57): bounded like every list of the spec.
    for m in ["nodeSelector", "podLabels", "podAnnotations", "serviceAnnotations"] {
        node(schema, &format!("spec.deploymentPlan.{m}"))["maxProperties"] =
            json!(crate::validate::MAX_METADATA_ENTRIES);
    }
    let spread = "spec.deploymentPlan.topologySpreadConstraints[]";
    for (loc, max) in [
        (format!("{spread}.matchLabelKeys"), crate::validate::MAX_SELECTOR_TERMS),
        (format!("{spread}.labelSelector.matchExpressions"), crate::validate::MAX_SELECTOR_TERMS),
        (format!("{spread}.labelSelector.matchExpressions[].values"), crate::validate::MAX_SELECTOR_VALUES),
    ] {
        node(schema, &loc)["maxItems"] = json!(max);
    }
    for (loc, fields) in required_fields() {
        let n = node(schema, &loc);
        let req = n.as_object_mut().expect("object schema").entry("required").or_insert_with(|| json!([]));
        for f in fields {
            req.as_array_mut().expect("required is a list").push(json!(f));
        }
    }
    // Last: what the Go operator's CRD could store, this one's schema never refuses (OLM
    // checks stored objects against it before an upgrade); the rules it lacked move to CEL.
    crate::legacy::relax(schema);
}

/// Rewrites every `description` in the schema with [`paragraphs`], so `kubectl explain`
/// and the API reference wrap the text themselves instead of printing the doc comments'
/// source line breaks mid-sentence.
pub(crate) fn reflow_descriptions(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(text) if key == "description" => *text = paragraphs(text),
                    _ => reflow_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(reflow_descriptions),
        _ => {}
    }
}

/// Joins the source line breaks of a doc comment into paragraphs: lines inside a paragraph
/// become one line (joined by a space); a blank line stays a paragraph break (`"\n\n"`),
/// and a list item (a line starting with `- `, `* ` or `1. `) starts a line of its own, its
/// continuation lines joined to it. Trailing spaces are dropped. Idempotent.
///
/// ```
/// # use qdr_api::rules::paragraphs;
/// assert_eq!(paragraphs("One sentence\nbroken here.\n\n- a\n  b\n- c"), "One sentence broken here.\n\n- a b\n- c");
/// ```
pub fn paragraphs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if out.is_empty() {
        } else if blank {
            out.push_str("\n\n");
        } else if is_list_item(line) {
            out.push('\n');
        } else {
            out.push(' ');
        }
        blank = false;
        out.push_str(line);
    }
    out
}

/// Whether a (trimmed) line starts a Markdown list item: `- `, `* ` or digits then `. `.
pub fn is_list_item(line: &str) -> bool {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    line.starts_with("- ") || line.starts_with("* ") || (digits > 0 && line[digits..].starts_with(". "))
}

/// Removes the `default` values schemars emits for `#[serde(default)]` fields: defaults are
/// the webhook's job ([`crate::defaults`]), and a schema default of `0` or `""` would both
/// violate the field's own bounds and hide absence from `validate`.
pub(crate) fn strip_defaults(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("default");
            // `Option<Enum>` gets a `null` enum member; `nullable: true` already admits null,
            // and a listed "null" only confuses `Unsupported value` messages.
            if let Some(Value::Array(e)) = map.get_mut("enum") {
                e.retain(|v| !v.is_null());
            }
            for (key, v) in map.iter_mut() {
                if key == "properties" {
                    if let Value::Object(props) = v {
                        props.values_mut().for_each(strip_defaults);
                    }
                } else {
                    strip_defaults(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_defaults),
        _ => {}
    }
}
