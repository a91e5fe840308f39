//! The objects of one admission request, read: each object's metadata and its spec decoded
//! (bounded, through [`crate::decode`]) into an Interconnect, whether an update leaves the
//! spec as it was, and the name to report and validate under. It reads; it judges nothing.

use qdr_api::{FieldError, Interconnect, InterconnectSpec};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::decode::{Parts, Request, decode_spec, scan};

/// An object of a review: its metadata and typed spec (or why the spec is not one).
pub(super) struct Object<'a> {
    /// Its metadata and raw spec.
    pub(super) parts: Parts<'a>,
    /// The typed spec, or the field error that stopped its decoding.
    pub(super) spec: Result<InterconnectSpec, FieldError>,
}

impl<'a> Object<'a> {
    /// Splits and decodes `raw`; the error is for a request that does not decode.
    pub(super) fn of(raw: &'a RawValue) -> Result<Object<'a>, serde_json::Error> {
        let parts = Parts::of(raw)?;
        let spec = match parts.spec {
            Some(s) => scan(s).and_then(|()| decode_spec(Some(s))),
            None => decode_spec(None),
        };
        Ok(Object { parts, spec })
    }

    /// The Interconnect, when its spec decoded (or why not), made of this object's own
    /// metadata and spec: the typed spec is moved, never copied.
    pub(super) fn into_interconnect(self) -> Result<Interconnect, FieldError> {
        let spec = self.spec?;
        let mut ic = Interconnect::new("", spec);
        let meta = self.parts.metadata;
        (ic.metadata.name, ic.metadata.generate_name, ic.metadata.namespace) =
            (meta.name, meta.generate_name, meta.namespace);
        Ok(ic)
    }
}

/// Whether two raw specs are the same JSON: equal text (the API server encodes both the
/// same way), or equal values once both are within the scan's limits.
pub(super) fn same_spec(a: Option<&RawValue>, b: Option<&RawValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if a.get() == b.get() => true,
        (Some(a), Some(b)) => {
            scan(a).is_ok()
                && scan(b).is_ok()
                && serde_json::from_str::<Value>(a.get()).ok() == serde_json::from_str::<Value>(b.get()).ok()
        }
        _ => false,
    }
}

/// The name to report and, for a `generateName` create without a name, the stand-in name
/// to validate under: `generateName` cut to 58 characters plus 5 characters, as the API
/// server completes it (`names.SimpleNameGenerator`).
pub(super) fn names(object: &Object<'_>, req: &Request<'_>) -> (String, Option<String>) {
    let meta = &object.parts.metadata;
    match (&meta.name, &meta.generate_name) {
        (Some(n), _) if !n.is_empty() => (n.clone(), None),
        (_, Some(g)) if !g.is_empty() => {
            let base: String = g.chars().take(58).collect();
            (g.clone(), Some(format!("{base}x0x0x")))
        }
        _ => (req.name.clone(), None),
    }
}
