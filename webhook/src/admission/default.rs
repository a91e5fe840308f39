//! Defaulting: an Interconnect with [`qdr_api::apply_defaults`] applied, and the JSON Patch
//! the mutating webhook returns, made only of `add` operations written from the raw JSON
//! texts. It must never remove or change what the user wrote; it does not validate.

use qdr_api::Interconnect;
use serde_json::value::RawValue;

/// `ic` with [`qdr_api::apply_defaults`] applied in place under its own name: what
/// [`qdr_api::defaults`] returns, without copying the spec.
pub(super) fn defaulted(mut ic: Interconnect) -> Interconnect {
    let name = ic.metadata.name.clone().unwrap_or_default();
    qdr_api::apply_defaults(&name, &mut ic.spec);
    ic
}

/// The JSON Patch text from the stored `spec` (its raw JSON; `None`: absent) to the
/// defaulted one (`after`, the defaulted spec as JSON), keeping only `add` operations:
/// defaults never remove or change what the user wrote, even where the typed round trip
/// would (unknown fields, number formats, explicit nulls). Empty when there is nothing to add.
pub(super) fn defaulting_patch(spec: Option<&RawValue>, after: &RawValue) -> Vec<u8> {
    // Room for most of `after` added, with the operations' own text: no regrowth.
    let mut out = Vec::with_capacity(after.get().len() + 512);
    match spec {
        Some(before) => adds(before, after, &mut String::from("/spec"), &mut out),
        None => add(&mut out, "/spec", after),
    }
    finish(out)
}

/// The `add` operations of the JSON Patch from `before` to `after` (JSON texts), as JSON
/// Patch text (RFC 6902; empty when there are none): the operations
/// `json_patch::diff(before, after)` lists, in its order, with its paths, without its
/// `remove`s and `replace`s. So every member of `after` missing from `before` (objects
/// compared name by name, arrays index by index) is added whole, written as `after`'s own
/// text. Only the containers on the way to a difference are split, never parsed into
/// values: members equal as text are skipped unread.
pub fn add_operations(before: &RawValue, after: &RawValue) -> Vec<u8> {
    let mut out = Vec::new();
    adds(before, after, &mut String::new(), &mut out);
    finish(out)
}

/// `,{"op":"add",...}` operations as a JSON array (the first comma becomes `[`).
fn finish(mut out: Vec<u8>) -> Vec<u8> {
    if !out.is_empty() {
        out[0] = b'[';
        out.push(b']');
    }
    out
}

/// Writes `,{"op":"add","path":pointer,"value":value}`.
fn add(out: &mut Vec<u8>, pointer: &str, value: &RawValue) {
    out.extend_from_slice(br#",{"op":"add","path":"#);
    if pointer.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        serde_json::to_writer(&mut *out, pointer).expect("a string serializes");
    } else {
        // Nothing to escape (the usual field names): written as it is.
        out.push(b'"');
        out.extend_from_slice(pointer.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(br#","value":"#);
    out.extend_from_slice(value.get().as_bytes());
    out.push(b'}');
}

/// An object member's name: borrowed from the JSON text, or decoded when it holds escapes.
#[derive(PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
struct Name<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);

/// One level of a JSON text: an object's members (sorted by name, as `serde_json::Map`
/// orders them; the last of duplicate names wins, as there), an array's items, or anything
/// else.
enum Level<'a> {
    Object(Members<'a>),
    Array(Vec<&'a RawValue>),
    Other,
}

impl<'a> Level<'a> {
    /// Splits `raw` one level deep (valid JSON: the API server's, or serde_json's own).
    fn of(raw: &'a RawValue) -> Level<'a> {
        let text = raw.get();
        match text.trim_start().as_bytes().first() {
            Some(b'{') => serde_json::from_str(text).map_or(Level::Other, Level::Object),
            Some(b'[') => serde_json::from_str(text).map_or(Level::Other, Level::Array),
            _ => Level::Other,
        }
    }
}

/// An object's members, sorted by name, one per name (the last one written): a sorted
/// `Vec` rather than a `BTreeMap`, which took a node allocation and a rebalancing per member
/// on the mutating webhook's every review.
struct Members<'a>(Vec<(Name<'a>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The value of member `name`.
    fn get(&self, name: &Name<'_>) -> Option<&'a RawValue> {
        (self.0.binary_search_by(|(n, _)| n.0.as_ref().cmp(name.0.as_ref())).ok()).map(|i| self.0[i].1)
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Members<'a>, M::Error> {
                let mut members: Vec<(Name<'a>, &'a RawValue)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                // Stable: of equal names the last written stays last, and is the one kept.
                members.sort_by(|a, b| a.0.cmp(&b.0));
                members.dedup_by(|later, earlier| {
                    let same = later.0 == earlier.0;
                    if same {
                        std::mem::swap(later, earlier);
                    }
                    same
                });
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// Writes `,{"op":"add",...}` for each member of `after` missing from `before` under
/// `pointer` (a JSON Pointer), the first comma to be replaced by `[`.
fn adds(before: &RawValue, after: &RawValue, pointer: &mut String, out: &mut Vec<u8>) {
    if before.get() == after.get() {
        return;
    }
    let len = pointer.len();
    match (Level::of(before), Level::of(after)) {
        (Level::Object(b), Level::Object(a)) => {
            for (Name(key), value) in a.0 {
                pointer.push('/');
                if key.contains(['~', '/']) {
                    pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                } else {
                    pointer.push_str(&key);
                }
                match b.get(&Name(key)) {
                    Some(old) => adds(old, value, pointer, out),
                    None => add(out, pointer, value),
                }
                pointer.truncate(len);
            }
        }
        (Level::Array(b), Level::Array(a)) => {
            for (i, value) in a.into_iter().enumerate() {
                use std::fmt::Write as _;
                let _ = write!(pointer, "/{i}");
                match b.get(i) {
                    Some(old) => adds(old, value, pointer, out),
                    None => add(out, pointer, value),
                }
                pointer.truncate(len);
            }
        }
        // Equal, or a `replace`: never a default's.
        _ => {}
    }
}

#[cfg(test)]
mod name_tests {
    use super::Name;
    use std::borrow::Cow;

    #[test]
    fn names_are_borrowed_unless_escaped() {
        let m: std::collections::BTreeMap<Name<'_>, u8> =
            serde_json::from_str(r#"{"plain":1,"a\u003cb":2}"#).unwrap();
        let kinds: Vec<(String, bool)> =
            m.keys().map(|Name(n)| (n.to_string(), matches!(n, Cow::Borrowed(_)))).collect();
        assert_eq!(kinds, [("a<b".to_string(), false), ("plain".to_string(), true)]);
    }
}
