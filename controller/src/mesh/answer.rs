//! A management `QUERY` answer decoded into bounded, typed rows.
//!
//! qdrouterd 1.19 answers a `QUERY` with an `amqp-value` map `{attributeNames: [..],
//! results: [[..], ..]}`: one row per entity, the values in the order of the names. The
//! reader asks for a few attributes and at most [`MAX_ROWS`] rows a page, so an answer is
//! decoded straight into a [`Table`] that holds no more than that: at most
//! [`MAX_ATTRIBUTES`] names and cells a row, every text cut to [`MAX_TEXT`] bytes, and any
//! list or map inside a cell dropped unread (as [`Cell::Other`]). Nothing here recurses over
//! the router's nesting beyond what [`super::wire`] let through ([`super::wire::MAX_DEPTH`]
//! levels).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Rows accepted in one answer: the `count` every paged query asks for.
pub const MAX_ROWS: usize = 256;
/// Attribute names, and cells of a row, accepted in one answer.
pub const MAX_ATTRIBUTES: usize = 16;
/// Bytes kept of any text a router sends (an id, a container, a status description),
/// cut at a character boundary: the longest Kubernetes name (253) and a little.
pub const MAX_TEXT: usize = 256;

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
    text
}

/// One value of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// `null`, or no value (a row shorter than the names).
    Null,
    /// A boolean.
    Bool(bool),
    /// Any integer (unsigned ones above `i64::MAX` saturate).
    Int(i64),
    /// A string or symbol, cut to [`MAX_TEXT`] bytes.
    Text(String),
    /// Anything else (a list, a map, binary, a float, a timestamp …), not kept.
    Other,
}

impl Cell {
    /// The text, when this is one.
    pub fn text(&self) -> Option<&str> {
        match self {
            Cell::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, when this is a non-negative one.
    pub fn count(&self) -> Option<u64> {
        match self {
            Cell::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        }
    }
}

struct CellVisitor;

impl<'de> Visitor<'de> for CellVisitor {
    type Value = Cell;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AMQP value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Cell, E> {
        Ok(Cell::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Cell, E> {
        Ok(Cell::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Cell, E> {
        Ok(Cell::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Cell, E> {
        Ok(Cell::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Cell, E> {
        Ok(Cell::Int(i64::try_from(v).unwrap_or(i64::MAX)))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Cell, E> {
        Ok(Cell::Other)
    }
    fn visit_char<E: de::Error>(self, _: char) -> Result<Cell, E> {
        Ok(Cell::Other)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Cell, E> {
        let mut end = v.len().min(MAX_TEXT + 1);
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        Ok(Cell::Text(cut(v[..end].to_string(), MAX_TEXT)))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Cell, E> {
        Ok(Cell::Text(cut(v, MAX_TEXT)))
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Cell, E> {
        Ok(Cell::Other)
    }
    fn visit_byte_buf<E: de::Error>(self, _: Vec<u8>) -> Result<Cell, E> {
        Ok(Cell::Other)
    }
    /// serde_amqp hands an array over as a newtype: its elements are read and dropped.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Cell, D::Error> {
        d.deserialize_seq(CellVisitor)?;
        Ok(Cell::Other)
    }
    // A list or map is read and dropped, element by element (serde_amqp's `IgnoredAny`
    // reads nothing, so it cannot be used to skip). The nesting was bounded before
    // decoding ([`super::wire::MAX_DEPTH`]).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cell, A::Error> {
        while seq.next_element::<Cell>()?.is_some() {}
        Ok(Cell::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Cell, A::Error> {
        while map.next_entry::<Cell, Cell>()?.is_some() {}
        Ok(Cell::Other)
    }
}

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CellVisitor)
    }
}

/// A list of at most `max` values of `T`.
struct Bounded<T> {
    items: Vec<T>,
}

struct BoundedVisitor<T> {
    max: usize,
    what: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for BoundedVisitor<T> {
    type Value = Bounded<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of at most {} {}", self.max, self.what)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bounded<T>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max));
        while let Some(item) = seq.next_element()? {
            if items.len() == self.max {
                return Err(de::Error::custom(format!("more than {} {}", self.max, self.what)));
            }
            items.push(item);
        }
        Ok(Bounded { items })
    }

    /// serde_amqp hands an AMQP array over as a newtype.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Bounded<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

fn bounded<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
    max: usize,
    what: &'static str,
) -> Result<Vec<T>, D::Error> {
    let visitor = BoundedVisitor { max, what, _t: std::marker::PhantomData };
    Ok(d.deserialize_any(visitor)?.items)
}

struct Names(Vec<Cell>);
impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded(d, MAX_ATTRIBUTES, "attribute names").map(Names)
    }
}

struct Row(Vec<Cell>);
impl<'de> Deserialize<'de> for Row {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded(d, MAX_ATTRIBUTES, "values in a row").map(Row)
    }
}

struct Rows(Vec<Row>);
impl<'de> Deserialize<'de> for Rows {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded(d, MAX_ROWS, "rows").map(Rows)
    }
}

/// The rows of one `QUERY` answer, by attribute name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    /// `attributeNames`, in order. `None` when the answer had none.
    pub names: Option<Vec<String>>,
    /// `results`; `None` when the answer had none.
    pub rows: Option<Vec<Vec<Cell>>>,
}

impl Table {
    /// Position of attribute `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.names.as_ref()?.iter().position(|n| n == name)
    }
}

struct TableVisitor;

impl<'de> Visitor<'de> for TableVisitor {
    type Value = Table;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of attributeNames and results")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Table, A::Error> {
        let mut table = Table::default();
        let mut keys = 0usize;
        while let Some(key) = map.next_key::<Cell>()? {
            keys += 1;
            if keys > MAX_ATTRIBUTES {
                return Err(de::Error::custom(format!("more than {MAX_ATTRIBUTES} keys")));
            }
            match key.text() {
                Some("attributeNames") => {
                    let names = map.next_value::<Names>()?.0;
                    let names = names.into_iter().map(|n| match n {
                        Cell::Text(t) => Ok(t),
                        _ => Err(de::Error::custom("an attribute name is not a string")),
                    });
                    table.names = Some(names.collect::<Result<_, _>>()?);
                }
                Some("results") => {
                    table.rows = Some(map.next_value::<Rows>()?.0.into_iter().map(|r| r.0).collect());
                }
                _ => {
                    map.next_value::<Cell>()?;
                }
            }
        }
        Ok(table)
    }

    // Any other body (an error answer may carry a string, or nothing) is an empty table:
    // the status is judged first, and an empty table is "no attributeNames list".
    fn visit_unit<E: de::Error>(self) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_char<E: de::Error>(self, _: char) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Table, E> {
        Ok(Table::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Table, A::Error> {
        while seq.next_element::<Cell>()?.is_some() {}
        Ok(Table::default())
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Table, D::Error> {
        d.deserialize_seq(CellVisitor)?;
        Ok(Table::default())
    }
}

impl<'de> Deserialize<'de> for Table {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TableVisitor)
    }
}

impl Table {
    /// A table from the JSON form of an answer (the recorded answers in the tests, the
    /// stand-in routers of the benchmark) as a router answers a query for the attributes
    /// `only`: those columns, in that order (absent ones `null`); strings, booleans and
    /// integers kept, anything else [`Cell::Other`]; the same bounds as the AMQP decoding.
    ///
    /// # Errors
    /// More rows than [`MAX_ROWS`] or attributes than [`MAX_ATTRIBUTES`], names that are
    /// not strings, a row that is not a list.
    pub fn from_json(answer: &serde_json::Value, only: &[&str]) -> Result<Table, String> {
        use serde_json::Value as Json;
        let cell = |v: Option<&Json>| match v {
            None | Some(Json::Null) => Cell::Null,
            Some(Json::Bool(b)) => Cell::Bool(*b),
            Some(Json::Number(n)) => n.as_i64().map_or(Cell::Other, Cell::Int),
            Some(Json::String(s)) => Cell::Text(cut(s.clone(), MAX_TEXT)),
            Some(_) => Cell::Other,
        };
        if only.len() > MAX_ATTRIBUTES {
            return Err(format!("more than {MAX_ATTRIBUTES} attribute names"));
        }
        let names: Option<Vec<&str>> = match answer.get("attributeNames") {
            Some(Json::Array(names)) => Some(
                names
                    .iter()
                    .map(|n| n.as_str().ok_or("an attribute name is not a string"))
                    .collect::<Result<_, _>>()?,
            ),
            _ => None,
        };
        let rows = match (answer.get("results"), &names) {
            (Some(Json::Array(rows)), Some(names)) if rows.len() <= MAX_ROWS => Some(
                rows.iter()
                    .map(|r| match r {
                        Json::Array(cells) => Ok(only
                            .iter()
                            .map(|a| cell(names.iter().position(|n| n == a).and_then(|i| cells.get(i))))
                            .collect()),
                        _ => Err("a result row is not a list".to_string()),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            (Some(Json::Array(rows)), Some(_)) => {
                return Err(format!("{} rows, more than {MAX_ROWS}", rows.len()));
            }
            (Some(Json::Array(rows)), None) => Some(vec![Vec::new(); rows.len().min(MAX_ROWS)]),
            _ => None,
        };
        Ok(Table { names: names.map(|_| only.iter().map(|a| a.to_string()).collect()), rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The amqp-value body of a `router.node` answer as qdrouterd 1.19's Python agent
    /// encodes it (Proton 0.37: a map32 of a list32 of str8 and a list32 of list32 rows).
    const PYTHON_AGENT_BODY: &str = "005377d10000005500000004a10e6174747269627574654e616d6573d00000000800000001a1026964a107726573756c7473d00000002600000002d00000000c00000001a1066d6573682d30d00000000c00000001a1066d6573682d31";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn the_python_agents_answer_decodes() {
        let bytes = hex(PYTHON_AGENT_BODY);
        let body: fe2o3_amqp::types::messaging::AmqpValue<Table> = serde_amqp::from_slice(&bytes).unwrap();
        assert_eq!(body.0.names, Some(vec!["id".to_string()]));
        assert_eq!(
            body.0.rows,
            Some(vec![vec![Cell::Text("mesh-0".into())], vec![Cell::Text("mesh-1".into())]])
        );
        let table: Table = serde_amqp::from_slice(&bytes[3..]).unwrap();
        assert_eq!(table, body.0);
    }

    /// The whole message as Proton 0.37's Python binding encodes the agent's answer.
    const PYTHON_AGENT_MESSAGE: &str = "00537045005373c01f064040a116616d71703a2f5f746f706f2f302f782f74656d702e3140405301005374d10000003000000004a10a737461747573436f64658100000000000000c8a1117374617475734465736372697074696f6ea1024f4b";

    #[test]
    fn the_python_agents_whole_message_decodes() {
        use fe2o3_amqp::types::messaging::message::__private::Deserializable;
        use fe2o3_amqp::types::messaging::{Body, Message};
        let mut bytes = hex(PYTHON_AGENT_MESSAGE);
        bytes.extend(hex(PYTHON_AGENT_BODY));
        let m: Deserializable<Message<Body<Table>>> = serde_amqp::from_slice(&bytes).unwrap();
        let Body::Value(v) = m.0.body else { panic!("{:?}", m.0.body) };
        assert_eq!(v.0.names, Some(vec!["id".to_string()]));
    }
}
