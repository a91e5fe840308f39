//! The size bounds of a whole Interconnect (API reference rule 26): the stored spec and the
//! router configuration rendered from it. It checks no single field.

use crate::types::Interconnect;

use super::checks::Validator;
use super::field_error::ErrorType;

/// Longest JSON of a stored `spec`, in bytes. etcd refuses a request over 1.5 MiB (its
/// default `--max-request-bytes`, 1,572,864) with `etcdserver: request is too large`,
/// naming no field; a stored object can hold its spec twice (`kubectl apply` keeps a copy
/// in the `last-applied-configuration` annotation) besides metadata, managed fields and
/// status. 512 KiB twice leaves half a MiB for the rest.
pub const MAX_SPEC_BYTES: usize = 512 * 1024;

/// Longest rendered router configuration, in bytes: a ConfigMap holds at most 1 MiB
/// (1,048,576 bytes) of keys and values, and the configuration's key is
/// [`crate::router_config::CONFIG_FILE`].
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024 - crate::router_config::CONFIG_FILE.len();

/// `n` with a thousands separator (`1,234,567`).
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Validator {
    /// What must fit where it is stored: the spec in etcd ([`MAX_SPEC_BYTES`]) and the
    /// rendered router configuration (of the defaulted spec) in a ConfigMap
    /// ([`MAX_CONFIG_BYTES`]). `defaulted`: `ic` is already defaulted. `spec_json_len`: the
    /// length of `ic.spec` as compact JSON when the caller knows it (measured here when not).
    pub(super) fn sizes(&mut self, ic: &Interconnect, defaulted: bool, spec_json_len: Option<usize>) {
        let spec = spec_json_len.unwrap_or_else(|| crate::router_config::json_len(&ic.spec));
        if spec > MAX_SPEC_BYTES {
            self.push(
                "spec",
                ErrorType::TooLong,
                None,
                format!(
                    "may not be more than {} bytes as JSON (it is {}): the stored object must fit etcd's request \
                     limit; split the routers' configuration over several Interconnects",
                    grouped(MAX_SPEC_BYTES),
                    grouped(spec)
                ),
            );
            return; // the configuration of such a spec is not worth rendering
        }
        let config = if defaulted {
            // Most specs are far too small to matter: no rendering when the bound fits.
            if crate::router_config::rendered_len_bound(&ic.spec, spec) <= MAX_CONFIG_BYTES {
                return;
            }
            crate::router_config::router_config(&ic.spec).rendered_len()
        } else {
            crate::router_config::router_config(&crate::defaults(ic).spec).rendered_len()
        };
        if config > MAX_CONFIG_BYTES {
            self.push(
                "spec",
                ErrorType::TooLong,
                None,
                format!(
                    "the rendered router configuration would be {} bytes; a ConfigMap holds at most {} (each \
                     '$' takes 9): shorten or split the lists",
                    grouped(config),
                    grouped(MAX_CONFIG_BYTES)
                ),
            );
        }
    }
}
