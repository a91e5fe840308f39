//! What the API server checks, without an API server: the CRD's `openAPIV3Schema` (types,
//! enums, bounds, patterns, required fields, unknown fields) through the `jsonschema`
//! crate, and its `x-kubernetes-validations` through kube-cel.
//!
//! The schema is first rewritten into plain JSON Schema (draft 4) the way the API server
//! reads it: `nullable: true` admits `null`, `x-kubernetes-int-or-string` admits an integer
//! or a string, objects with `properties` reject unknown fields (the API server prunes or,
//! with `fieldValidation=Strict` as kubectl sends, rejects them), and the root gains
//! `apiVersion`, `kind` and `metadata`. Not emulated: Kubernetes formats (`int32` bounds),
//! list-type uniqueness, metadata validation and CEL cost limits.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::cel::{CompiledSchema, Validator as CelValidator, compile_schema};
use serde_json::{Value, json};

/// Which check reported an [`OfflineError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The structural schema (types, enums, bounds, patterns, required, unknown fields).
    Schema,
    /// A CEL rule (`x-kubernetes-validations`).
    Cel,
}

/// One rejection.
#[derive(Debug, Clone, PartialEq)]
pub struct OfflineError {
    /// Dotted path of the offending field (`spec.listeners[0].port`; `""` for the root).
    pub path: String,
    /// What the check said.
    pub message: String,
    /// Which check it was.
    pub check: Check,
}

impl std::fmt::Display for OfflineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.message.starts_with("unknown field ") {
            // As the API server's strict field validation says it: the path is in the message.
            return f.write_str(&self.message);
        }
        write!(f, "{}: {}", if self.path.is_empty() { "<root>" } else { &self.path }, self.message)
    }
}

/// The CRD's schema and CEL rules, compiled once.
pub struct OfflineValidator {
    schema: jsonschema::Validator,
    cel: CompiledSchema,
}

impl std::fmt::Debug for OfflineValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfflineValidator").finish_non_exhaustive()
    }
}

impl Default for OfflineValidator {
    fn default() -> Self {
        Self::for_crd(&crate::crd()).expect("the generated CRD compiles")
    }
}

impl OfflineValidator {
    /// Compiles the first served version of `crd`.
    ///
    /// # Errors
    /// A message when the CRD has no schema or the rewritten schema does not compile.
    pub fn for_crd(crd: &CustomResourceDefinition) -> Result<Self, String> {
        let schema = crd
            .spec
            .versions
            .iter()
            .find(|v| v.served)
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .ok_or("CRD has no openAPIV3Schema")?;
        let raw = serde_json::to_value(schema).map_err(|e| e.to_string())?;
        let mut plain = raw.clone();
        to_json_schema(&mut plain);
        if let Some(props) = plain.get_mut("properties").and_then(Value::as_object_mut) {
            props.insert("apiVersion".into(), json!({"type": "string"}));
            props.insert("kind".into(), json!({"type": "string"}));
            props.entry("metadata").or_insert_with(|| json!({"type": "object"}));
        }
        let schema = jsonschema::draft4::new(&plain).map_err(|e| e.to_string())?;
        Ok(OfflineValidator { schema, cel: compile_schema(&raw) })
    }

    /// Every rejection the API server would give `object` (a whole Interconnect as JSON),
    /// schema errors first. Empty when it would be accepted.
    pub fn check(&self, object: &Value) -> Vec<OfflineError> {
        let join = |path: &str, p: &str| if path.is_empty() { p.to_string() } else { format!("{path}.{p}") };
        let mut out: Vec<OfflineError> = self
            .schema
            .iter_errors(object)
            .flat_map(|e| {
                let path = pointer_to_path(e.instance_path().as_str());
                match e.kind() {
                    // The API server reports a missing property at the property, not its parent.
                    jsonschema::error::ValidationErrorKind::Required { property: Value::String(p) } => {
                        vec![OfflineError {
                            path: join(&path, p),
                            message: e.to_string(),
                            check: Check::Schema,
                        }]
                    }
                    // And an unknown one as strict field validation does: one per field.
                    jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => unexpected
                        .iter()
                        .map(|p| {
                            let field = join(&path, p);
                            let message = format!("unknown field {field:?}");
                            OfflineError { path: field, message, check: Check::Schema }
                        })
                        .collect(),
                    _ => vec![OfflineError { path, message: e.to_string(), check: Check::Schema }],
                }
            })
            .collect();
        if let Err(errs) = CelValidator::new().validate_compiled(&self.cel, object, None) {
            out.extend(errs.into_vec().into_iter().map(|e| OfflineError {
                // A root rule's `fieldPath` (`.metadata.name`) is reported without its dot.
                path: e.field_path.trim_start_matches('.').to_string(),
                message: e.message.clone(),
                check: Check::Cel,
            }));
        }
        out
    }
}

/// `/spec/listeners/0/port` → `spec.listeners[0].port`.
fn pointer_to_path(p: &str) -> String {
    let mut out = String::new();
    for seg in p.split('/').filter(|s| !s.is_empty()) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    out
}

/// Rewrites OpenAPI v3 + Kubernetes extensions into draft-4 JSON Schema, recursively.
fn to_json_schema(v: &mut Value) {
    let Some(map) = v.as_object_mut() else { return };
    if map.remove("x-kubernetes-int-or-string") == Some(Value::Bool(true)) {
        map.insert("anyOf".into(), json!([{"type": "integer"}, {"type": "string"}]));
    }
    if map.remove("nullable") == Some(Value::Bool(true)) {
        if let Some(t) = map.get("type").cloned() {
            map.insert("type".into(), json!([t, "null"]));
        }
        if let Some(Value::Array(e)) = map.get_mut("enum") {
            e.push(Value::Null);
        }
    }
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if map.contains_key("properties") && !preserve && !map.contains_key("additionalProperties") {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    // Kubernetes' formats (int32, int64, ...) are not JSON Schema formats.
    if matches!(
        map.get("format").and_then(Value::as_str),
        Some("int32" | "int64" | "double" | "float" | "byte")
    ) {
        map.remove("format");
    }
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Some(props) = child.as_object_mut() {
                    props.values_mut().for_each(to_json_schema);
                }
            }
            "items" | "additionalProperties" => to_json_schema(child),
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(list) = child.as_array_mut() {
                    list.iter_mut().for_each(to_json_schema);
                }
            }
            _ => {}
        }
    }
}
