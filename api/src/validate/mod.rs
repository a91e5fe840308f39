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
    validate_with(ic, false)
}

/// [`validate`] of an Interconnect that is already what [`crate::defaults`] returns (as the
/// webhook and the controller always validate): the router configuration whose size is
/// checked is rendered from `ic.spec` as it is, not from a defaulted copy. Given an object
/// that is not defaulted, every check but that one is the same, and that one measures the
/// configuration without the defaults' entries.
pub fn validate_defaulted(ic: &Interconnect) -> Vec<FieldError> {
    validate_with(ic, true)
}

fn validate_with(ic: &Interconnect, defaulted: bool) -> Vec<FieldError> {
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
    v.sizes(ic, defaulted);
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
