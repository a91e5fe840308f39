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
/// defaulted one, keeping only `add` operations: defaults never remove or change what the
/// user wrote, even where the typed round trip would (unknown fields, number formats,
/// explicit nulls). Empty when there is nothing to add. The defaulted spec is serialized
/// once, with its members' places in the text noted ([`Spanned`]), so the walk never
/// parses it again.
pub(super) fn defaulting_patch(spec: Option<&RawValue>, defaulted: &Interconnect) -> Vec<u8> {
    let after = Spanned::of(&defaulted.spec);
    let mut out = Vec::new();
    match spec {
        Some(before) => adds(before, after.root(), &mut String::from("/spec"), &mut out),
        None => add(&mut out, "/spec", after.text()),
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

/// [`add_operations`] from `before` to `after` serialized by serde_json, without parsing
/// that text: the same operations as `add_operations(before, &to_raw_value(after))`.
pub fn add_operations_of(before: &RawValue, after: &impl serde::Serialize) -> Vec<u8> {
    let after = Spanned::of(after);
    let mut out = Vec::new();
    adds(before, after.root(), &mut String::new(), &mut out);
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

/// Writes `,{"op":"add","path":pointer,"value":value}` (`value`: JSON text).
fn add(out: &mut Vec<u8>, pointer: &str, value: &str) {
    out.extend_from_slice(br#",{"op":"add","path":"#);
    serde_json::to_writer(&mut *out, pointer).expect("a string serializes");
    out.extend_from_slice(br#","value":"#);
    out.extend_from_slice(value.as_bytes());
    out.push(b'}');
}

/// An object member's name: borrowed from the JSON text, or decoded when it holds escapes.
#[derive(PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
struct Name<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);

/// One level of a JSON text: an object's members (by name, as `serde_json::Map` orders
/// them; the last of duplicate names wins, as there), an array's items, or anything else.
enum Level<'a, T> {
    Object(std::collections::BTreeMap<Name<'a>, T>),
    Array(Vec<T>),
    Other,
}

/// A JSON value that can be split one level deep: its text, and its members or items.
trait Json<'a>: Copy {
    /// The value's JSON text.
    fn text(self) -> &'a str;
    /// Its members or items, each a value of the same kind.
    fn level(self) -> Level<'a, Self>;
}

impl<'a> Json<'a> for &'a RawValue {
    fn text(self) -> &'a str {
        self.get()
    }

    /// Parses one level of the text (valid JSON: the API server's, or serde_json's own).
    fn level(self) -> Level<'a, Self> {
        let text = self.get();
        match text.trim_start().as_bytes().first() {
            Some(b'{') => serde_json::from_str(text).map_or(Level::Other, Level::Object),
            Some(b'[') => serde_json::from_str(text).map_or(Level::Other, Level::Array),
            _ => Level::Other,
        }
    }
}

/// Writes `,{"op":"add",...}` for each member of `after` missing from `before` under
/// `pointer` (a JSON Pointer), the first comma to be replaced by `[`.
fn adds<'a>(before: &RawValue, after: impl Json<'a>, pointer: &mut String, out: &mut Vec<u8>) {
    if before.get() == after.text() {
        return;
    }
    let len = pointer.len();
    match (before.level(), after.level()) {
        (Level::Object(b), Level::Object(a)) => {
            for (Name(key), value) in a {
                pointer.push('/');
                if key.contains(['~', '/']) {
                    pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                } else {
                    pointer.push_str(&key);
                }
                match b.get(&Name(key)) {
                    Some(old) => adds(old, value, pointer, out),
                    None => add(out, pointer, value.text()),
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
                    None => add(out, pointer, value.text()),
                }
                pointer.truncate(len);
            }
        }
        // Equal, or a `replace`: never a default's.
        _ => {}
    }
}

/// A value serialized by serde_json (compact) with the place in the text of every value
/// in it: [`Spanned::root`] splits like a [`RawValue`] without parsing the text again.
struct Spanned {
    text: String,
    /// Every value, containers before what they hold.
    nodes: Vec<Node>,
}

/// One value of a [`Spanned`] text: its bytes `start..end`, and for a container what it
/// holds (members as their name's text, quotes included, and the value's node).
struct Node {
    start: usize,
    end: usize,
    kind: Kind,
}

enum Kind {
    Object(Vec<((usize, usize), usize)>),
    Array(Vec<usize>),
    Scalar,
}

/// A value of a [`Spanned`] text.
#[derive(Clone, Copy)]
struct At<'a>(&'a Spanned, usize);

impl Spanned {
    /// `value` serialized, its values' places noted.
    fn of(value: &impl serde::Serialize) -> Spanned {
        let pos = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut writer = Counted { out: Vec::with_capacity(1024), pos: pos.clone() };
        let mut spans = Spans { pos, nodes: Vec::new(), open: Vec::new(), last: None };
        let mut ser = serde_json::Serializer::with_formatter(&mut writer, &mut spans);
        value.serialize(&mut ser).expect("a spec serializes");
        let text = String::from_utf8(writer.out).expect("serde_json writes UTF-8");
        let mut nodes = spans.nodes;
        if spans.last.is_none_or(|n| nodes[n].start != 0) {
            nodes.insert(0, Node { start: 0, end: text.len(), kind: Kind::Scalar });
        }
        Spanned { text, nodes }
    }

    fn text(&self) -> &str {
        &self.text
    }

    /// The whole value (node 0: the outermost container, or the scalar).
    fn root(&self) -> At<'_> {
        At(self, 0)
    }
}

impl<'a> Json<'a> for At<'a> {
    fn text(self) -> &'a str {
        let n = &self.0.nodes[self.1];
        &self.0.text[n.start..n.end]
    }

    fn level(self) -> Level<'a, Self> {
        let (spanned, node) = (self.0, &self.0.nodes[self.1]);
        match &node.kind {
            Kind::Object(members) => Level::Object(
                (members.iter())
                    .filter_map(|&((s, e), v)| {
                        Some((serde_json::from_str(&spanned.text[s..e]).ok()?, At(spanned, v)))
                    })
                    .collect(),
            ),
            Kind::Array(items) => Level::Array(items.iter().map(|&i| At(spanned, i)).collect()),
            Kind::Scalar => Level::Other,
        }
    }
}

/// The output of a [`Spanned`] serialization, its length shared with the [`Spans`].
struct Counted {
    out: Vec<u8>,
    pos: std::rc::Rc<std::cell::Cell<usize>>,
}

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.extend_from_slice(buf);
        self.pos.set(self.out.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// serde_json's compact formatter, noting where each value begins and ends.
struct Spans {
    pos: std::rc::Rc<std::cell::Cell<usize>>,
    nodes: Vec<Node>,
    /// The containers open: node, the current member's name, where its value began.
    open: Vec<(usize, (usize, usize), usize)>,
    /// The container that ended last.
    last: Option<usize>,
}

impl Spans {
    fn begin(&mut self, kind: Kind) {
        let at = self.pos.get();
        self.nodes.push(Node { start: at, end: at, kind });
        self.open.push((self.nodes.len() - 1, (0, 0), 0));
    }

    fn end(&mut self) {
        if let Some((n, _, _)) = self.open.pop() {
            self.nodes[n].end = self.pos.get();
            self.last = Some(n);
        }
    }

    fn value_begins(&mut self) {
        let at = self.pos.get();
        if let Some(o) = self.open.last_mut() {
            o.2 = at;
        }
        self.last = None;
    }

    /// The node of the value that just ended: the container that ended last if it began
    /// where the value did, else a scalar.
    fn value_ends(&mut self) -> Option<usize> {
        let (_, _, start) = *self.open.last()?;
        match self.last.take() {
            Some(n) if self.nodes[n].start == start => Some(n),
            _ => {
                self.nodes.push(Node { start, end: self.pos.get(), kind: Kind::Scalar });
                Some(self.nodes.len() - 1)
            }
        }
    }
}

impl serde_json::ser::Formatter for &mut Spans {
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(Kind::Object(Vec::new()));
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b"}")?;
        self.end();
        Ok(())
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        let at = self.pos.get();
        if let Some(o) = self.open.last_mut() {
            o.1 = (at, at);
        }
        Ok(())
    }

    fn end_object_key<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        let at = self.pos.get();
        if let Some(o) = self.open.last_mut() {
            o.1.1 = at;
        }
        Ok(())
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b":")?;
        self.value_begins();
        Ok(())
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        if let Some(v) = self.value_ends()
            && let Some(&(n, key, _)) = self.open.last()
            && let Kind::Object(members) = &mut self.nodes[n].kind
        {
            members.push((key, v));
        }
        Ok(())
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(Kind::Array(Vec::new()));
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b"]")?;
        self.end();
        Ok(())
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        self.value_begins();
        Ok(())
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        if let Some(v) = self.value_ends()
            && let Some(&(n, _, _)) = self.open.last()
            && let Kind::Array(items) = &mut self.nodes[n].kind
        {
            items.push(v);
        }
        Ok(())
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
