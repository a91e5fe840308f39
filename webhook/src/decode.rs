//! Decoding an AdmissionReview with one copy of the object at most.
//!
//! The review is read into [`Request`], whose `object` and `oldObject` stay raw JSON text
//! borrowed from the body (`serde_json::value::RawValue`): no `serde_json::Value` of a
//! whole object is ever built. Of an object, [`Parts`] then reads only the metadata the
//! checks use (name, generateName, namespace; `managedFields`, annotations and the rest
//! are skipped without allocating) and `spec`, still raw. [`scan`] walks the raw spec
//! without allocating for its values and refuses a list or object larger than any the CRD
//! admits, before [`decode_spec`] builds the typed spec. So the memory a review takes is its
//! body plus a typed spec bounded by the CRD's largest list (see `docs/hardening.md`).

use std::sync::LazyLock;

use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::GroupVersionKind;
use kube::core::admission::Operation;
use qdr_api::{ErrorType, FieldError, InterconnectSpec};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The envelope: `apiVersion`, `kind` and the raw `request`.
#[derive(Debug, Deserialize)]
pub struct Review<'a> {
    /// Must be `admission.k8s.io/v1`.
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// Must be `AdmissionReview`.
    #[serde(default)]
    pub kind: String,
    /// The request, decoded on its own so a request with only a uid can be answered in-band.
    #[serde(borrow, default)]
    pub request: Option<&'a RawValue>,
}

/// The fields of `request` the webhook reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    /// Echoed in the response.
    pub uid: String,
    /// The kind of the object (only Interconnects are admitted here).
    pub kind: GroupVersionKind,
    /// The object's name (empty for a `generateName` create).
    #[serde(default)]
    pub name: String,
    /// The object's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// Who asked: the subject of the Secret reference checks.
    #[serde(default)]
    pub user_info: UserInfo,
    /// The object as it would be stored, raw.
    #[serde(borrow, default)]
    pub object: Option<&'a RawValue>,
    /// The stored object (UPDATE), raw.
    #[serde(borrow, default)]
    pub old_object: Option<&'a RawValue>,
}

/// Only the uid of a request, for answering one that does not decode otherwise.
#[derive(Debug, Deserialize)]
pub struct UidOnly {
    /// The request's uid.
    pub uid: String,
}

/// The metadata the checks read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// `metadata.name`.
    #[serde(default)]
    pub name: Option<String>,
    /// `metadata.generateName`.
    #[serde(default)]
    pub generate_name: Option<String>,
    /// `metadata.namespace`.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// An object split into its metadata and its raw spec.
#[derive(Debug, Deserialize)]
pub struct Parts<'a> {
    /// The metadata the checks read.
    #[serde(default)]
    pub metadata: Meta,
    /// The spec, raw (`None` when absent or `null`).
    #[serde(borrow, default)]
    pub spec: Option<&'a RawValue>,
}

impl<'a> Parts<'a> {
    /// Splits `object`. Errors: it is not a JSON object, or its metadata has the wrong types.
    pub fn of(object: &'a RawValue) -> Result<Parts<'a>, serde_json::Error> {
        serde_json::from_str(object.get())
    }
}

/// The limits [`scan`] enforces, read from the CRD's schema in one walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most items of any list, and keys of any object: the largest `maxItems` or
    /// `maxProperties` of the CRD (1024 today), and at least 256 for the keys of an object
    /// (a spec's objects have far fewer fields).
    pub items: usize,
    /// The longest string (value or key), in bytes: the largest `maxLength` of the CRD (1024
    /// today; every string of the spec has one but the names of resource claims, which
    /// Kubernetes keeps far shorter), and at least 1024.
    pub string: usize,
}

/// The [`Limits`] of the CRD; computed once, at the first use (the server forces it at
/// start-up so no review pays for it).
pub static LIMITS: LazyLock<Limits> = LazyLock::new(|| {
    let crd = serde_json::to_value(qdr_api::crd()).expect("the CRD serializes");
    let mut limits = Limits { items: 256, string: 1024 };
    let mut stack = vec![&crd];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v.as_u64()) {
                        ("maxItems" | "maxProperties", Some(n)) => {
                            limits.items = limits.items.max(n as usize)
                        }
                        ("maxLength", Some(n)) => limits.string = limits.string.max(n as usize),
                        _ => {}
                    }
                    stack.push(v);
                }
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    limits
});

/// Checks that no list and no object in `spec` has more than [`Limits::items`] items or
/// keys and no string is longer than [`Limits::string`] bytes, without building anything but a path.
/// So the typed spec decoded next is bounded whatever the body. Errors: `TooMany` or
/// `TooLong` at the first such field (the API server would refuse the object by the CRD's
/// own `maxItems` and `maxLength`), or `Invalid` at `spec` when it is not JSON (cannot
/// happen for text the review decoded from).
pub fn scan(spec: &RawValue) -> Result<(), FieldError> {
    let mut state = State { path: Vec::new(), over: None, max: LIMITS.items, max_string: LIMITS.string };
    let mut de = serde_json::Deserializer::from_str(spec.get());
    match Scan(&mut state).deserialize(&mut de) {
        Ok(()) => Ok(()),
        Err(_) if state.over == Some(Over::Items) => Err(FieldError {
            field: render(&state.path),
            error_type: ErrorType::TooMany,
            bad_value: None,
            detail: format!("must have at most {} items", state.max),
        }),
        Err(_) if state.over == Some(Over::String) => Err(FieldError {
            field: render(&state.path),
            error_type: ErrorType::TooLong,
            bad_value: None,
            detail: format!("may not be more than {} bytes", state.max_string),
        }),
        Err(e) => Err(FieldError {
            field: "spec".into(),
            error_type: ErrorType::Invalid,
            bad_value: None,
            detail: e.to_string(),
        }),
    }
}

/// Decodes the typed spec from raw text. Errors: a type error at its path (`spec.…`).
pub fn decode_spec(spec: Option<&RawValue>) -> Result<InterconnectSpec, FieldError> {
    let Some(spec) = spec else {
        return Err(FieldError {
            field: "spec".into(),
            error_type: ErrorType::Required,
            bad_value: None,
            detail: String::new(),
        });
    };
    // Most specs decode: only a failed decoding is done again to find the path, so the
    // common case does not pay for the path tracking.
    if let Ok(decoded) = serde_json::from_str(spec.get()) {
        return Ok(decoded);
    }
    let mut de = serde_json::Deserializer::from_str(spec.get());
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        FieldError {
            field: if path == "." { "spec".into() } else { format!("spec.{path}") },
            error_type: ErrorType::Invalid,
            bad_value: None,
            detail: e.into_inner().to_string(),
        }
    })
}

/// A step of the scanned path: a key or an index.
#[derive(Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// `spec.listeners[3].x` from the steps under `spec`.
fn render(path: &[Step]) -> String {
    let mut s = String::from("spec");
    for step in path {
        match step {
            Step::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Which limit a scan stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    Items,
    String,
}

/// What the scan knows: where it is, and which limit it stopped at (the path then names
/// the list, object or string over it).
struct State {
    path: Vec<Step>,
    over: Option<Over>,
    max: usize,
    max_string: usize,
}

/// The scanning visitor.
struct Scan<'s>(&'s mut State);

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        if v.len() > self.0.max_string {
            self.0.over = Some(Over::String);
            return Err(E::custom("too long"));
        }
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let state = self.0;
        let mut i = 0;
        loop {
            state.path.push(Step::Index(i));
            let more = seq.next_element_seed(Scan(state))?.is_some();
            state.path.pop();
            if !more {
                return Ok(());
            }
            i += 1;
            if i > state.max {
                state.over = Some(Over::Items);
                return Err(de::Error::custom("too many items"));
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        let mut n = 0;
        while let Some(key) = map.next_key::<String>()? {
            if key.len() > state.max_string {
                state.over = Some(Over::String);
                return Err(de::Error::custom("too long"));
            }
            state.path.push(Step::Key(key));
            map.next_value_seed(Scan(state))?;
            state.path.pop();
            n += 1;
            if n > state.max {
                state.over = Some(Over::Items);
                return Err(de::Error::custom("too many keys"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_string()).unwrap()
    }

    #[test]
    fn the_limits_are_the_crds_largest() {
        assert_eq!(LIMITS.items, 1024, "update docs/hardening.md if the CRD's largest list changes");
        assert_eq!(LIMITS.string, 1024, "update docs/hardening.md if the CRD's longest string changes");
    }

    #[test]
    fn scan_names_the_first_string_over_the_limit() {
        let long = "x".repeat(LIMITS.string + 1);
        let e = scan(&raw(&format!(r#"{{"users": "u", "listeners": [{{"host": "{long}"}}]}}"#))).unwrap_err();
        assert_eq!((e.field.as_str(), e.error_type), ("spec.listeners[0].host", ErrorType::TooLong));
        let e = scan(&raw(&format!(r#"{{"deploymentPlan": {{"{long}": 1}}}}"#))).unwrap_err();
        assert_eq!((e.field.as_str(), e.error_type), ("spec.deploymentPlan", ErrorType::TooLong));
        assert_eq!(scan(&raw(&format!(r#"{{"users": "{}"}}"#, "x".repeat(LIMITS.string)))), Ok(()));
    }

    #[test]
    fn scan_accepts_specs_within_the_limit_and_names_the_first_list_over_it() {
        let max = LIMITS.items;
        let ok = format!(
            r#"{{"addresses": [{}], "x": {{"a": [1, "s", null, true, 1.5]}}}}"#,
            vec!["{}"; max].join(",")
        );
        assert_eq!(scan(&raw(&ok)), Ok(()));
        let over = format!(
            r#"{{"deploymentPlan": {{}}, "listeners": [{{}}, {{"x": [{}]}}]}}"#,
            vec!["1"; max + 1].join(",")
        );
        let e = scan(&raw(&over)).unwrap_err();
        assert_eq!(e.field, "spec.listeners[1].x");
        assert_eq!(e.error_type, ErrorType::TooMany);
        assert_eq!(e.to_string(), format!("spec.listeners[1].x: Too many: must have at most {max} items"));
        let keys: Vec<String> = (0..=max).map(|i| format!(r#""k{i}": 0"#)).collect();
        let e = scan(&raw(&format!(r#"{{"users": "u", "deploymentPlan": {{{}}}}}"#, keys.join(","))))
            .unwrap_err();
        assert_eq!(e.field, "spec.deploymentPlan");
        let e = scan(&raw(&format!("{{{}}}", keys.join(",")))).unwrap_err();
        assert_eq!((e.field.as_str(), e.error_type), ("spec", ErrorType::TooMany));
    }

    #[test]
    fn specs_decode_with_the_path_of_a_type_error() {
        assert!(decode_spec(Some(&raw(r#"{"listeners": [{"port": 5672}]}"#))).is_ok());
        let e = decode_spec(Some(&raw(r#"{"listeners": [{"port": "x"}]}"#))).unwrap_err();
        assert_eq!(e.field, "spec.listeners[0].port");
        assert_eq!(decode_spec(Some(&raw("5"))).unwrap_err().field, "spec");
        assert_eq!(decode_spec(None).unwrap_err().error_type, ErrorType::Required);
    }

    #[test]
    fn parts_skip_what_the_checks_do_not_read() {
        let o = raw(
            r#"{"metadata": {"name": "a", "managedFields": [{"fieldsV1": {"f:spec": {}}}], "labels": {"x": "y"}},
                "spec": {"users": "u"}, "status": {"anything": 1}}"#,
        );
        let p = Parts::of(&o).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("a"));
        assert_eq!(p.spec.unwrap().get(), r#"{"users": "u"}"#);
        assert!(Parts::of(&raw(r#"{"metadata": {"name": 5}}"#)).is_err());
        assert!(Parts::of(&raw("5")).is_err());
        assert!(Parts::of(&raw(r#"{"spec": null}"#)).unwrap().spec.is_none());
    }
}
