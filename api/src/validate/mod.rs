//! Validation: one pure function that returns every violation at once.
//!
//! Each [`FieldError`] has the shape of an apimachinery `field.Error`: a path such as
//! `spec.listeners[1].port`, a type (Required, Invalid, ...), the bad value and a detail
//! message, and prints the way the API server prints its own field errors. [`validate`]
//! enforces every schema constraint and CEL rule of the CRD (see [`crate::rules`]) with the
//! same meaning, plus the rules listed under "validate-only" in the API reference.
//!
//! One module per rule family, as the API reference numbers the rules: [`fields`] (each
//! field and item), [`unique`] (across items), [`generated`] (the generated Secrets'
//! names), [`sizes`] (the whole object); [`checks`] holds the collector and its per-value
//! checks, [`names`] the name formats, [`field_error`] the shape of a violation. This module
//! runs them in order and owns the name rules of `metadata.name` (rules 1 and 24).

mod checks;
mod disruption;
mod field_error;
mod fields;
mod generated;
mod names;
mod scheduling;
mod sizes;
mod unique;

use crate::types::{Interconnect, InterconnectSpec};

use checks::Validator;
pub(crate) use disruption::percent;
pub(crate) use field_error::At;
pub use field_error::{ErrorType, FieldError, MAX_SHOWN_VALUE};
pub(crate) use names::{is_dns_label, is_dns_subdomain, is_dns1035_label, is_qualified_name};
pub use scheduling::{
    MAX_ANNOTATION_BYTES, MAX_METADATA_ENTRIES, MAX_SELECTOR_TERMS, MAX_SELECTOR_VALUES,
    MAX_SPREAD_CONSTRAINTS, MAX_TOLERATIONS,
};
pub use sizes::{MAX_CONFIG_BYTES, MAX_SPEC_BYTES};

/// Validates an Interconnect (its `metadata.name` and `spec`) and returns every violation,
/// in field order; an empty list means valid. Pure: it reads nothing but its argument.
///
/// The rendered-size check measures the configuration of `defaults(ic)`; for an object that
/// is already what [`crate::defaults`] returns, [`validate_defaulted`] gives the same answer
/// without defaulting it again.
pub fn validate(ic: &Interconnect) -> Vec<FieldError> {
    validate_with(ic, false, None)
}

/// [`validate`] of an Interconnect that is already what [`crate::defaults`] returns (as the
/// webhook and the controller always validate): the router configuration whose size is
/// checked is rendered from `ic.spec` as it is, not from a defaulted copy. Given an object
/// that is not defaulted, every check but that one is the same, and that one measures the
/// configuration without the defaults' entries.
pub fn validate_defaulted(ic: &Interconnect) -> Vec<FieldError> {
    validate_with(ic, true, None)
}

/// [`validate_defaulted`] for a caller that has already serialized `ic.spec`: the size check
/// takes `spec_json_len`, the length in bytes of `ic.spec` as compact JSON (what
/// `serde_json::to_vec(&ic.spec)` writes), instead of serializing the spec once more. The
/// mutating webhook serializes the defaulted spec for its patch anyway. Given another length,
/// only the spec size check ([`MAX_SPEC_BYTES`]) and the bound that spares rendering the
/// configuration see that length; every other check is the same.
pub fn validate_defaulted_sized(ic: &Interconnect, spec_json_len: usize) -> Vec<FieldError> {
    validate_with(ic, true, Some(spec_json_len))
}

fn validate_with(ic: &Interconnect, defaulted: bool, spec_json_len: Option<usize>) -> Vec<FieldError> {
    let mut v = Validator::default();
    let name = ic.metadata.name.as_deref().unwrap_or_default();
    if !is_dns1035_label(name) {
        v.push(
            "metadata.name",
            ErrorType::Invalid,
            Some(name.into()),
            "must be at most 63 lowercase letters, digits and '-', start with a letter and end with a letter \
             or digit: it names the router Service, Deployment and container",
        );
    } else if RESERVED_NAMES.contains(&name) {
        v.push(
            "metadata.name",
            ErrorType::Invalid,
            Some(name.into()),
            "every namespace holds a ServiceAccount with this name, and the routers' ServiceAccount is named \
             after the Interconnect (the controller never takes over an object it does not own, so this \
             Interconnect could never run): choose another name",
        );
    }
    v.spec(&ic.spec);
    v.generated_secrets(ic);
    v.sizes(ic, defaulted, spec_json_len);
    v.errors
}

/// Names an Interconnect cannot have because every namespace already holds an object of
/// that name among its children's: the ServiceAccount `default`.
pub const RESERVED_NAMES: [&str; 1] = ["default"];

/// Validates a spec alone (no `metadata.name` check).
pub fn validate_spec(spec: &InterconnectSpec) -> Vec<FieldError> {
    let mut v = Validator::default();
    v.spec(spec);
    v.errors
}
