//! Ratcheting: which violations of an UPDATE the stored object already had.
//!
//! The API server ratchets CRD schema and CEL rules by comparing the value at a field path
//! in the old and the new object. A path with a list index (`spec.listeners[2].port`) names
//! a *position*, and positions move: deleting `listeners[0]` turns the stored
//! `listeners[2]` into `listeners[1]`. Compared by index, the stored violation is then not
//! found and a change that fixes nothing about that listener is denied.
//!
//! So a violation is identified by [`identity`]: its path with every list index replaced
//! by the key of the item at that index (a listener's or profile's `name`, an address's
//! `prefix` or `pattern`, an auto link's `address` and `direction`, a listener without a
//! name by `host:port`, any other item by its whole value). A violation is **carried** when
//! the stored object has one of the same identity and type, with the same offending value;
//! for causes that show no value (`Required`, `Forbidden`, `TooLong`) the values found at
//! the two paths must be equal, so the value under the same path cannot change unnoticed.

use qdr_api::FieldError;
use serde_json::Value;

/// One step of a field path: a field name or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
}

/// Splits `spec.listeners[1].port` into its steps; `None` when it is not of that form.
fn steps(path: &str) -> Option<Vec<Step>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            out.push(Step::Field(name.to_string()));
        }
        while let Some(stripped) = rest.strip_prefix('[') {
            let end = stripped.find(']')?;
            out.push(Step::Index(stripped[..end].parse().ok()?));
            rest = &stripped[end + 1..];
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// The key of a list item (see the module docs).
fn item_key(item: &Value) -> String {
    let s = |k: &str| {
        item.get(k).filter(|v| !v.is_null()).map(|v| v.as_str().map_or(v.to_string(), String::from))
    };
    if let Some(name) = s("name") {
        return format!("name={name}");
    }
    for k in ["prefix", "pattern", "address"] {
        if let Some(v) = s(k) {
            let direction = s("direction").map(|d| format!(",direction={d}")).unwrap_or_default();
            return format!("{k}={v}{direction}");
        }
    }
    if let Some(port) = s("port") {
        return format!("{}:{port}", s("host").unwrap_or_default());
    }
    item.to_string()
}

/// The identity of `path` in `object` (the defaulted object as JSON): each list index
/// replaced by the key of its item, and the value found there (`None` when the path does
/// not resolve).
pub fn identity(path: &str, object: &Value) -> (String, Option<Value>) {
    let Some(steps) = steps(path) else { return (path.to_string(), None) };
    let mut at = Some(object);
    let mut id = String::new();
    for step in steps {
        match step {
            Step::Field(f) => {
                if !id.is_empty() {
                    id.push('.');
                }
                id.push_str(&f);
                at = at.and_then(|v| v.get(&f));
            }
            Step::Index(i) => {
                let item = at.and_then(|v| v.get(i));
                match item {
                    Some(item) => id.push_str(&format!("[{}]", item_key(item))),
                    None => id.push_str(&format!("[{i}]")),
                }
                at = item;
            }
        }
    }
    (id, at.cloned())
}

/// Splits `new` (violations of `new_object`) into those the update introduces or changes
/// and those `stored` (violations of `old_object`) already had, by [`identity`]. Both
/// objects are the defaulted ones the violations were found in.
pub fn ratchet(
    new: Vec<FieldError>,
    new_object: &Value,
    stored: &[FieldError],
    old_object: &Value,
) -> (Vec<FieldError>, Vec<FieldError>) {
    let old: Vec<(&FieldError, (String, Option<Value>))> =
        stored.iter().map(|o| (o, identity(&o.field, old_object))).collect();
    new.into_iter().partition(|e| {
        let (id, value) = identity(&e.field, new_object);
        !old.iter().any(|(o, (old_id, old_value))| {
            *old_id == id
                && o.error_type == e.error_type
                && match (&e.bad_value, &o.bad_value) {
                    (Some(a), Some(b)) => a == b,
                    (None, None) => value == *old_value,
                    _ => false,
                }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdr_api::ErrorType;
    use serde_json::json;

    fn err(field: &str, t: ErrorType, v: Option<Value>) -> FieldError {
        FieldError { field: field.into(), error_type: t, bad_value: v, detail: "d".into() }
    }

    fn listeners(l: Value) -> Value {
        json!({"metadata": {"name": "mesh"}, "spec": {"listeners": l}})
    }

    #[test]
    fn paths_are_identified_by_the_keys_of_their_items() {
        let o = listeners(json!([{"name": "a", "port": 1}, {"port": 5672, "host": "0.0.0.0"}]));
        assert_eq!(
            identity("spec.listeners[0].port", &o),
            ("spec.listeners[name=a].port".into(), Some(json!(1)))
        );
        assert_eq!(identity("spec.listeners[1]", &o).0, "spec.listeners[0.0.0.0:5672]");
        assert_eq!(identity("spec.listeners[7].port", &o), ("spec.listeners[7].port".into(), None));
        let a = json!({"spec": {"addresses": [{"prefix": "q", "distribution": "x"}],
            "autoLinks": [{"address": "q1", "direction": "in"}]}});
        assert_eq!(identity("spec.addresses[0].distribution", &a).0, "spec.addresses[prefix=q].distribution");
        assert_eq!(identity("spec.autoLinks[0]", &a).0, "spec.autoLinks[address=q1,direction=in]");
        assert_eq!(identity("metadata.name", &o).0, "metadata.name");
    }

    #[test]
    fn deleting_an_earlier_item_keeps_a_later_violation_carried() {
        let old = listeners(json!([{"name": "a", "port": 1}, {"name": "b", "port": 70000}]));
        let stored = [err("spec.listeners[1].port", ErrorType::Invalid, Some(json!(70000)))];
        let new = listeners(json!([{"name": "b", "port": 70000}]));
        let (introduced, carried) = ratchet(
            vec![err("spec.listeners[0].port", ErrorType::Invalid, Some(json!(70000)))],
            &new,
            &stored,
            &old,
        );
        assert!(introduced.is_empty(), "{introduced:?}");
        assert_eq!(carried.len(), 1);
    }

    #[test]
    fn fixing_one_of_two_and_moving_one_are_allowed_but_a_new_value_is_not() {
        let old = listeners(json!([{"name": "a", "port": 70000}, {"name": "b", "port": 70001}]));
        let stored = [
            err("spec.listeners[0].port", ErrorType::Invalid, Some(json!(70000))),
            err("spec.listeners[1].port", ErrorType::Invalid, Some(json!(70001))),
        ];
        // Fix `a`: `b` keeps its violation, carried.
        let fixed = listeners(json!([{"name": "a", "port": 1}, {"name": "b", "port": 70001}]));
        let (i, c) = ratchet(
            vec![err("spec.listeners[1].port", ErrorType::Invalid, Some(json!(70001)))],
            &fixed,
            &stored,
            &old,
        );
        assert!(i.is_empty() && c.len() == 1);
        // Move `b` first: still carried.
        let moved = listeners(json!([{"name": "b", "port": 70001}, {"name": "a", "port": 70000}]));
        let new = vec![
            err("spec.listeners[0].port", ErrorType::Invalid, Some(json!(70001))),
            err("spec.listeners[1].port", ErrorType::Invalid, Some(json!(70000))),
        ];
        let (i, c) = ratchet(new, &moved, &stored, &old);
        assert!(i.is_empty() && c.len() == 2, "{i:?}");
        // Another bad value for `b`: introduced.
        let worse = listeners(json!([{"name": "a", "port": 70000}, {"name": "b", "port": 70002}]));
        let new = vec![err("spec.listeners[1].port", ErrorType::Invalid, Some(json!(70002)))];
        let (i, _) = ratchet(new, &worse, &stored, &old);
        assert_eq!(i.len(), 1);
        // A listener renamed into the bad position is a new violation, not the stored one.
        let other = listeners(json!([{"name": "c", "port": 70000}, {"name": "b", "port": 70001}]));
        let new = vec![err("spec.listeners[0].port", ErrorType::Invalid, Some(json!(70000)))];
        let (i, _) = ratchet(new, &other, &stored, &old);
        assert_eq!(i.len(), 1);
    }

    #[test]
    fn value_less_causes_compare_the_value_at_the_path() {
        let old = listeners(json!([{"name": "a", "host": "x".repeat(300)}]));
        let stored = [err("spec.listeners[0].host", ErrorType::TooLong, None)];
        let same = old.clone();
        let e = || vec![err("spec.listeners[0].host", ErrorType::TooLong, None)];
        assert!(ratchet(e(), &same, &stored, &old).0.is_empty());
        let changed = listeners(json!([{"name": "a", "host": "y".repeat(301)}]));
        assert_eq!(ratchet(e(), &changed, &stored, &old).0.len(), 1, "a new too-long value is denied");
    }
}
