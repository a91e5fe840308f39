//! What the CRD's schema may not refuse: every object the Go operator's last CRD
//! (`qdr-operator.v0.4.0`, [`go_schema`]) could store.
//!
//! OLM replaces a CRD only after checking every stored object against the new CRD's
//! `openAPIV3Schema` (its types, enums, bounds, patterns and `required` lists; not its CEL
//! rules): one object the new schema refuses fails the InstallPlan ("updated validation is
//! too restrictive"), and the upgrade from the Go operator with it. The Go operator's schema
//! checked types and little else, so [`relax`] moves every value rule of this CRD that the Go
//! operator's did not have, at a field the Go operator's had, out of the schema and into a
//! CEL rule with the same meaning:
//!
//! * a `pattern`, `minimum`, `maximum` or `minLength`, and an item's `required` field;
//! * an `enum`: the schema keeps the union of both enums (`placement` gains `Node`) and a CEL
//!   rule admits only this CRD's values (an `enum` the Go schema lacked, `serviceType`'s, goes
//!   to CEL whole);
//! * a `maxLength` below [`MIN_NAME_LENGTH`] (listener names, 15): the schema keeps
//!   [`MIN_NAME_LENGTH`] and CEL the rest;
//! * `metadata.name`'s pattern and length, as a CEL rule at the root.
//!
//! The API server and the webhook judge new and changed objects by every rule as before
//! (the webhook by `crate::validate`, which never depended on where a rule is enforced), and
//! both ratchet on update: an object the Go operator stored is kept as it is, stays editable
//! (an update that leaves a field as it was is admitted), and is not reconciled until it is
//! valid (`SpecValid=False`). Size bounds stay in the schema (`maxLength` from
//! [`MIN_NAME_LENGTH`] up, `maxItems`, `maxProperties`): the CEL rules' cost is estimated from
//! them, and no Go object the operator could run exceeds them. So do the quantity patterns of
//! `resources` (the Go operator's `cpu` and `memory` were strings, and one that is no quantity
//! failed every apply of its Deployment: no such object ever ran).

use serde_json::{Value, json};

/// The `openAPIV3Schema` of the Go operator's last CRD (`api/data/`, see its NOTICE).
pub fn go_schema() -> Value {
    serde_json::from_str(include_str!("../data/go-operator-v0.4.0.schema.json"))
        .expect("the Go schema is JSON")
}

/// The shortest `maxLength` the schema keeps for a string the Go operator's schema left
/// unbounded: a name of at most 63 characters (a DNS label) is one a Go object could have
/// used; shorter limits (a listener name's 15) are CEL's.
pub const MIN_NAME_LENGTH: u64 = 63;

/// Moves out of `schema` (this CRD's `openAPIV3Schema`, rules applied) every value rule the
/// Go operator's schema did not have (see the module docs), each into a CEL rule.
pub fn relax(schema: &mut Value) {
    let go = go_schema();
    // metadata.name: the Go operator's CRD did not restrict it.
    let name = &mut schema["properties"]["metadata"]["properties"]["name"];
    let pattern = name.as_object_mut().and_then(|n| n.remove("pattern"));
    let max = name.as_object_mut().and_then(|n| n.remove("maxLength"));
    if let (Some(Value::String(p)), Some(max)) = (pattern, max) {
        push_rule(
            schema,
            json!({"rule": format!("size(self.metadata.name) <= {max} && self.metadata.name.matches('{}')", cel_string(&p)),
                   "message": format!("metadata.name must be a DNS-1035 label: at most {max} lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"),
                   "fieldPath": ".metadata.name"}),
        );
    }
    walk(schema.get_mut("properties").and_then(|p| p.get_mut("spec")), go["properties"].get("spec"), "spec");
}

/// Relaxes the object schema `ours` at `location` against the Go operator's `go`: its own
/// `required` list, each property's value rules, then each property's object or item schema.
fn walk(ours: Option<&mut Value>, go: Option<&Value>, location: &str) {
    let (Some(ours), Some(go)) = (ours, go) else { return };
    let go_required = required(go);
    let mut rules = Vec::new();
    if let Some(required) = ours.get_mut("required").and_then(Value::as_array_mut) {
        let (keep, drop): (Vec<Value>, Vec<Value>) =
            required.drain(..).partition(|f| f.as_str().is_some_and(|f| go_required.contains(&f)));
        *required = keep;
        for f in drop.iter().filter_map(Value::as_str) {
            rules.push(json!({"rule": format!("has(self.{f})"), "message": "Required value",
                              "fieldPath": format!(".{f}"), "reason": "FieldValueRequired"}));
        }
    }
    if ours.get("required").and_then(Value::as_array).is_some_and(Vec::is_empty) {
        ours.as_object_mut().map(|o| o.remove("required"));
    }
    let names: Vec<String> = ours
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.keys().cloned())
        .collect();
    for f in names {
        let Some(go_field) = go.get("properties").and_then(|p| p.get(&f)) else { continue };
        let field = &mut ours["properties"][&f];
        relax_field(field, go_field);
        match (field.get("type").and_then(Value::as_str), go_field.get("type").and_then(Value::as_str)) {
            (Some("object"), Some("object")) => walk(Some(field), Some(go_field), &format!("{location}.{f}")),
            (Some("array"), Some("array")) => {
                walk(field.get_mut("items"), go_field.get("items"), &format!("{location}.{f}[]"))
            }
            _ => {}
        }
    }
    for r in rules {
        push_rule(ours, r);
    }
}

/// The value rules of a property (schema `field`) that the Go operator's schema
/// (`go_field`) lacks, moved from `field`'s schema to CEL rules on
/// `field` itself, so that the API server's ratcheting keeps them from judging an update that
/// leaves this field as it was.
fn relax_field(field: &mut Value, go_field: &Value) {
    let mut rules = Vec::new();
    let Some(map) = field.as_object_mut() else { return };
    if let Some(Value::String(p)) = map.get("pattern").cloned().filter(|_| go_field.get("pattern").is_none())
    {
        map.remove("pattern");
        let rule = format!("self.matches('{}')", cel_string(&p));
        rules.push(json!({"rule": rule, "message": format!("must match the pattern `{p}`")}));
    }
    if let Some(Value::Array(values)) = map.get("enum").cloned() {
        let go_values: Vec<Value> =
            go_field.get("enum").and_then(Value::as_array).cloned().unwrap_or_default();
        let extra: Vec<&Value> = go_values.iter().filter(|v| !values.contains(v)).collect();
        if go_values.is_empty() || !extra.is_empty() {
            let union: Vec<Value> = values.iter().cloned().chain(extra.into_iter().cloned()).collect();
            if go_values.is_empty() {
                map.remove("enum");
            } else {
                map.insert("enum".into(), Value::Array(union));
            }
            let shown: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
            let quoted: Vec<String> = shown.iter().map(|v| format!("'{v}'")).collect();
            rules.push(json!({"rule": format!("self in [{}]", quoted.join(", ")),
                              "message": format!("supported values: {}", shown.join(", "))}));
        }
    }
    for (keyword, op, words) in [("minimum", ">=", "at least"), ("maximum", "<=", "at most")] {
        let ours = map.get(keyword).and_then(Value::as_f64);
        if let Some(b) = ours.filter(|b| go_field.get(keyword).and_then(Value::as_f64) != Some(*b)) {
            map.remove(keyword);
            let b = b as i64;
            rules.push(json!({"rule": format!("self {op} {b}"), "message": format!("must be {words} {b}")}));
        }
    }
    if let Some(min) =
        map.get("minLength").and_then(Value::as_u64).filter(|_| go_field.get("minLength").is_none())
    {
        map.remove("minLength");
        let message = format!("must be at least {min} characters long");
        rules.push(json!({"rule": format!("size(self) >= {min}"), "message": message}));
    }
    if let Some(max) = map.get("maxLength").and_then(Value::as_u64).filter(|m| *m < MIN_NAME_LENGTH) {
        map.insert("maxLength".into(), json!(MIN_NAME_LENGTH));
        let message = format!("must be at most {max} characters long");
        rules.push(json!({"rule": format!("size(self) <= {max}"), "message": message}));
    }
    for r in rules {
        push_rule(field, r);
    }
}

/// The `required` list of the object schema `schema` (empty when it has none).
pub fn required(schema: &Value) -> Vec<&str> {
    schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
}

/// `s` as the body of a single-quoted CEL string literal.
fn cel_string(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "\\'")
}

/// Adds `rule` to the `x-kubernetes-validations` of `node`.
fn push_rule(node: &mut Value, rule: Value) {
    match node.get_mut("x-kubernetes-validations").and_then(Value::as_array_mut) {
        Some(list) => list.push(rule),
        None => node["x-kubernetes-validations"] = json!([rule]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API server takes only these `reason`s in a CEL rule (a CRD with another is refused).
    #[test]
    fn every_cel_reason_is_one_the_api_server_takes() {
        fn walk(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    for r in m.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten()
                    {
                        out.extend(r.get("reason").and_then(Value::as_str).map(String::from));
                    }
                    m.values().for_each(|c| walk(c, out));
                }
                Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
                _ => {}
            }
        }
        let mut reasons = Vec::new();
        walk(&serde_json::to_value(crate::crd()).unwrap(), &mut reasons);
        let allowed =
            ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"];
        assert!(reasons.iter().all(|r| allowed.contains(&r.as_str())), "{reasons:?}");
    }

    #[test]
    fn cel_strings_escape_backslashes_and_quotes() {
        assert_eq!(cel_string(r"^a\.b'$"), r"^a\\.b\'$");
    }

    /// Every value rule the Go schema lacked leaves the schema, and the rules the Go schema
    /// had (role's enum, size's bounds, the connectors' `required`) stay.
    #[test]
    fn only_what_the_go_schema_lacked_moves() {
        let crd = serde_json::to_value(crate::crd()).unwrap();
        let s = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let plan = &s["properties"]["spec"]["properties"]["deploymentPlan"]["properties"];
        assert_eq!(plan["placement"]["enum"], json!(["Any", "Every", "AntiAffinity", "Node"]));
        assert!(plan["serviceType"].get("enum").is_none());
        assert_eq!(plan["role"]["enum"], json!(["interior", "edge"]));
        assert_eq!(
            (plan["size"]["minimum"].as_f64(), plan["size"]["maximum"].as_f64()),
            (Some(1.0), Some(16.0))
        );
        let listener = &s["properties"]["spec"]["properties"]["listeners"]["items"];
        assert!(listener.get("required").is_none(), "{listener}");
        assert!(listener["properties"]["name"].get("pattern").is_none());
        assert_eq!(listener["properties"]["name"]["maxLength"], MIN_NAME_LENGTH);
        let connector = &s["properties"]["spec"]["properties"]["connectors"]["items"];
        assert_eq!(connector["required"], json!(["host", "port"]));
        assert!(s["properties"]["metadata"]["properties"]["name"].get("pattern").is_none());
    }
}
