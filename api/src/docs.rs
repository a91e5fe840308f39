//! The API reference (`docs/api-reference.md`), generated from the CRD itself: one section
//! per object at its `kubectl explain` path, each field with its type, whether it is
//! required, its default (taken from [`crate::defaults`], not restated), enum values, bounds,
//! patterns and length limits, and every CEL rule's message placed at the field it guards;
//! an example per top-level list.

use std::fmt::Write as _;

use serde_json::Value;

use crate::{Interconnect, crd, defaults};

/// Path of the committed reference, relative to the repository root.
pub const DOCS_PATH: &str = "docs/api-reference.md";

/// A schema bound as written for a reader: a whole number without `.0` (schemars writes an
/// integer field's bounds as floats, `1.0`), any other number as JSON has it.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// `s`'s constraints, as one table cell.
fn constraints(s: &Value) -> String {
    constraint_list(s).join("; ").replace('|', "\\|")
}

/// `s`'s constraints, one phrase each: enum values, bounds, lengths, entries, items,
/// pattern, the constraints of a map's values, and the CEL rules of a field that is not an
/// object.
fn constraint_list(s: &Value) -> Vec<String> {
    let mut c = Vec::new();
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        let vals: Vec<String> = e
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
        c.push(format!("one of {}", vals.join(", ")));
    }
    match (s.get("minimum").map(number), s.get("maximum").map(number)) {
        (Some(a), Some(b)) => c.push(format!("{a}–{b}")),
        (Some(a), None) => c.push(format!("≥ {a}")),
        (None, Some(b)) => c.push(format!("≤ {b}")),
        _ => {}
    }
    if let Some(n) = s.get("minLength") {
        c.push(format!("min length {n}"));
    }
    if let Some(n) = s.get("maxLength") {
        c.push(format!("max length {n}"));
    }
    if let Some(n) = s.get("minProperties") {
        c.push(format!("min entries {n}"));
    }
    if let Some(n) = s.get("maxProperties") {
        c.push(format!("max entries {n}"));
    }
    if let Some(v) = s.get("additionalProperties").filter(|v| v.is_object()) {
        let each = constraint_list(v);
        if !each.is_empty() {
            c.push(format!("each value: {}", each.join(", ")));
        }
    }
    if let Some(n) = s.get("minItems") {
        c.push(format!("min items {n}"));
    }
    if let Some(n) = s.get("maxItems") {
        c.push(format!("max items {n}"));
    }
    if let Some(p) = s.get("pattern").and_then(Value::as_str) {
        c.push(format!("pattern `{p}`"));
    }
    // An object's own rules are listed in its section, not in its parent's row.
    let rules = if s.get("properties").is_some() { None } else { s.get("x-kubernetes-validations") };
    for r in rules.and_then(Value::as_array).into_iter().flatten() {
        if r.get("fieldPath").is_none() {
            c.push(format!("rule: {}", r["message"].as_str().unwrap_or_default()));
        }
    }
    c
}

fn type_of(s: &Value) -> String {
    match s.get("type").and_then(Value::as_str) {
        Some("array") => format!("[]{}", s.get("items").map(type_of).unwrap_or_default()),
        Some("object") if s.get("properties").is_some() => "object".into(),
        Some("object") => match s.get("additionalProperties").filter(|v| v.is_object()).map(type_of) {
            Some(t) if t != "any" => format!("map[string]{t}"),
            _ => "map".into(),
        },
        Some(t) => t.into(),
        None if s.get("x-kubernetes-int-or-string").is_some() => "int-or-string".into(),
        None => "any".into(),
    }
}

/// `d` as one Markdown table cell: on one line, with `|` escaped, and `<` and `>` outside
/// code spans as HTML entities: Kubernetes' own descriptions (e.g. a toleration's
/// `<key,value,effect>`) and help texts (`<svc>`) would otherwise be read as HTML tags by
/// the book. Also used by the flags reference (`qdr_startup::flags_reference`).
pub fn table_cell(d: &str) -> String {
    let line = d.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|");
    let mut out = String::with_capacity(line.len());
    let mut code = false;
    for c in line.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// The default of the field at `path` (e.g. `spec.deploymentPlan.role`) for an Interconnect
/// named `<name>` with an empty spec, as [`defaults`] fills it.
fn default_at(defaulted: &Value, path: &str) -> Option<String> {
    let mut cur = defaulted;
    for seg in path.split('.') {
        cur = cur.get(seg)?;
    }
    match cur {
        Value::Array(_) | Value::Object(_) => Some("see description".into()),
        Value::String(s) => Some(format!("`{s}`")),
        v => Some(format!("`{v}`")),
    }
}

fn section(
    out: &mut String,
    explain: &str,
    path: &str,
    s: &Value,
    defaulted: &Value,
    queue: &mut Vec<(String, String, Value)>,
) {
    let _ = writeln!(out, "### {explain}\n");
    if let Some(d) = s.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "{}\n", table_cell(d));
    }
    let rules: Vec<&Value> =
        s.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().collect();
    let required: Vec<&str> =
        s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let Some(props) = s.get("properties").and_then(Value::as_object) else { return };
    let _ = writeln!(
        out,
        "| Field | Type | Required | Default | Constraints | Description |\n|---|---|---|---|---|---|"
    );
    for (name, p) in props {
        let child = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        let mut cons = constraints(p);
        for r in &rules {
            if r.get("fieldPath").and_then(Value::as_str) == Some(&format!(".{name}")) {
                let m = r["message"].as_str().unwrap_or_default().replace('|', "\\|");
                cons = if cons.is_empty() { format!("rule: {m}") } else { format!("{cons}; rule: {m}") };
            }
        }
        let default = if path.contains("[]") || !child.starts_with("spec.") {
            None
        } else {
            default_at(defaulted, &child)
        };
        let nested =
            p.get("properties").is_some() || p.get("items").and_then(|i| i.get("properties")).is_some();
        let field = if nested {
            let anchor = format!("{explain}.{name}").replace('.', "");
            format!("[`{name}`](#{})", anchor.to_lowercase())
        } else {
            format!("`{name}`")
        };
        let _ = writeln!(
            out,
            "| {field} | {} | {} | {} | {} | {} |",
            type_of(p),
            if required.contains(&name.as_str()) { "yes" } else { "no" },
            default.unwrap_or_default(),
            cons,
            table_cell(p.get("description").and_then(Value::as_str).unwrap_or_default())
        );
        if nested {
            let inner = p.get("items").filter(|i| i.get("properties").is_some()).unwrap_or(p).clone();
            let inner_path = if p.get("items").is_some() { format!("{child}[]") } else { child.clone() };
            queue.push((format!("{explain}.{name}"), inner_path, inner));
        }
    }
    let object_rules: Vec<&&Value> = rules.iter().filter(|r| r.get("fieldPath").is_none()).collect();
    if !object_rules.is_empty() {
        let _ = writeln!(out, "\nRules checked by the API server on this object:\n");
        for r in object_rules {
            let _ = writeln!(out, "- {}", r["message"].as_str().unwrap_or_default());
        }
    }
    out.push('\n');
}

/// The whole reference. `examples` are (file name, Interconnect YAML) pairs; the first one
/// that sets a top-level list gives that list's example.
pub fn reference(examples: &[(String, String)]) -> String {
    let crd = crd();
    let v = &crd.spec.versions[0];
    let schema =
        serde_json::to_value(v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("schema"))
            .expect("json");
    let empty: Interconnect =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "<name>"}, "spec": {}}))
            .expect("empty");
    let defaulted = serde_json::to_value(defaults(&empty)).expect("json");

    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!-- Generated by `make docs` (cargo run -p qdr-api --bin docgen) from the CRD. Do not edit. -->\n\n\
         # Interconnect API reference\n\n\
         `{}/{}` `{}` (short name `{}`), namespaced. Every section below is a `kubectl explain` path; \
         `kubectl explain interconnect.spec.deploymentPlan` shows the same descriptions. Defaults are \
         those of the defaulting webhook for an Interconnect named `<name>`; the reasons behind each rule \
         and default are in [validation-and-defaults.md](validation-and-defaults.md).\n",
        crd.spec.group,
        v.name,
        crd.spec.names.kind,
        crd.spec.names.short_names.clone().unwrap_or_default().join(", ")
    );
    let mut queue = vec![("interconnect".to_string(), String::new(), schema.clone())];
    let mut i = 0;
    while i < queue.len() {
        let (explain, path, s) = queue[i].clone();
        section(&mut out, &explain, &path, &s, &defaulted, &mut queue);
        i += 1;
    }
    let _ = writeln!(out, "## Examples\n");
    let spec_props = schema["properties"]["spec"]["properties"].as_object().cloned().unwrap_or_default();
    for (name, p) in &spec_props {
        if p.get("type").and_then(Value::as_str) != Some("array") {
            continue;
        }
        let found = examples.iter().find_map(|(file, yaml)| {
            let v: Value = serde_saphyr::from_str(yaml).ok()?;
            let list = v.get("spec")?.get(name)?.clone();
            Some((file.clone(), list))
        });
        if let Some((file, list)) = found {
            let mut snippet = serde_json::Map::new();
            snippet.insert(name.clone(), list);
            let yaml = serde_saphyr::to_string(&Value::Object(snippet)).unwrap_or_default();
            let _ = writeln!(out, "### `spec.{name}`\n\nFrom `{file}`:\n\n```yaml\n{}```\n", yaml);
        }
    }
    for (crd, what) in [
        (crate::links::grant_crd(), "lets one named remote site link into an interior Interconnect"),
        (crate::links::link_crd(), "makes an Interconnect dial another cluster with a token"),
    ] {
        let v = &crd.spec.versions[0];
        let schema = serde_json::to_value(
            v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("schema"),
        )
        .expect("json");
        let kind = crd.spec.names.kind.clone();
        let _ = writeln!(
            out,
            "# {kind} API reference\n\n`{}/{}` `{kind}` (short name `{}`), namespaced: {what} \
             ([Linking Interconnects across clusters](multi-cluster.md)). No field has a default.\n",
            crd.spec.group,
            v.name,
            crd.spec.names.short_names.clone().unwrap_or_default().join(", ")
        );
        let mut queue = vec![(kind.to_lowercase(), String::new(), schema)];
        let mut i = 0;
        while i < queue.len() {
            let (explain, path, s) = queue[i].clone();
            section(&mut out, &explain, &path, &s, &Value::Null, &mut queue);
            i += 1;
        }
    }
    out
}

/// The example manifests of the repository (`deploy/examples/*.yaml`, then the Go operator's
/// in `api/tests/data/go-operator/`), by file name, sorted.
pub fn repository_examples() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in ["deploy/examples", "api/tests/data/go-operator"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "yaml"));
        files.sort();
        for f in files {
            if let Ok(text) = std::fs::read_to_string(&f) {
                out.push((format!("{dir}/{}", f.file_name().unwrap_or_default().to_string_lossy()), text));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integer bounds read as integers, and a map's value rules are said at the map
    /// (`resources.limits` and `requests`: a quantity's pattern).
    #[test]
    fn bounds_and_map_values_are_written_for_a_reader() {
        let port = serde_json::json!({"type": "integer", "minimum": 1.0, "maximum": 65535.0});
        assert_eq!(constraints(&port), "1–65535");
        assert_eq!(constraints(&serde_json::json!({"minimum": 0.5})), "≥ 0.5");
        let limits = serde_json::json!({
            "type": "object", "maxProperties": 16,
            "additionalProperties": {"x-kubernetes-int-or-string": true, "pattern": "^a|b$"}
        });
        assert_eq!(type_of(&limits), "map[string]int-or-string");
        assert_eq!(constraints(&limits), "max entries 16; each value: pattern `^a\\|b$`");
        let text = reference(&[]);
        assert!(!text.contains(".0–"), "a float bound in the reference");
        let row = text.lines().find(|l| l.starts_with("| `limits` |")).expect("the limits row");
        assert!(row.contains("each value: pattern"), "{row}");
    }
}
