//! What is wrong with an object and what must be said about it: the violations under the
//! cluster's [`Checks`] (validated under a stand-in name for `generateName`), the warnings a
//! write introduces, carried violations as warnings, and the Secret references the requesting
//! user must be allowed to read. It shapes no answer: [`super::respond`] does.

use qdr_api::{
    FieldError, ImagePolicy, Interconnect, validate_defaulted, validate_defaulted_sized, warnings,
};
use serde_json::value::RawValue;

use super::default::defaulted;

/// The cluster's settings of the checks (pure data; the webhook's flags).
#[derive(Debug, Clone)]
pub struct Checks {
    /// Allowed router images (`--allowed-router-images`); default: any.
    pub images: ImagePolicy,
    /// Whether the Secret references are checked as the requesting user
    /// (`--authorize-secret-references`; default: yes): when not, no reply carries
    /// [`super::Reply::pending`], and nothing is gathered for it.
    pub authorize_references: bool,
}

impl Default for Checks {
    /// Any image; Secret references checked.
    fn default() -> Self {
        Checks { images: ImagePolicy::default(), authorize_references: true }
    }
}

impl Checks {
    /// Every violation of the defaulted `effective`: [`qdr_api::validate`] (as
    /// [`validate_defaulted`]: `effective` is defaulted) plus the image policy.
    pub(super) fn violations(&self, effective: &Interconnect) -> Vec<FieldError> {
        self.violations_sized(effective, None)
    }

    /// [`Checks::violations`], given the length of `effective.spec` as compact JSON when the
    /// caller has serialized it ([`qdr_api::validate_defaulted_sized`]).
    fn violations_sized(&self, effective: &Interconnect, spec_json_len: Option<usize>) -> Vec<FieldError> {
        let mut errors = match spec_json_len {
            Some(len) => validate_defaulted_sized(effective, len),
            None => validate_defaulted(effective),
        };
        errors.extend(self.images.check(effective));
        errors
    }
}

/// The defaulted `ic` (under its own name) and its violations under `checks`, validated
/// under `stand_in` when given (defaulted once more under that name, so the derived Secret
/// names are checked).
pub(super) fn checked(
    ic: Interconnect,
    stand_in: Option<&str>,
    checks: &Checks,
) -> (Interconnect, Vec<FieldError>) {
    let under_stand_in = stand_in.map(|n| under(&ic, n, checks));
    let effective = defaulted(ic);
    let errors = under_stand_in.unwrap_or_else(|| checks.violations(&effective));
    (effective, errors)
}

/// [`checked`], with the defaulted spec as compact JSON besides (what the defaulting patch
/// is made from): serialized once, and its length given to the size check.
pub(super) fn checked_serialized(
    ic: Interconnect,
    stand_in: Option<&str>,
    checks: &Checks,
) -> (Interconnect, Box<RawValue>, Vec<FieldError>) {
    let under_stand_in = stand_in.map(|n| under(&ic, n, checks));
    let effective = defaulted(ic);
    let spec = serde_json::value::to_raw_value(&effective.spec).expect("a spec serializes");
    let errors =
        under_stand_in.unwrap_or_else(|| checks.violations_sized(&effective, Some(spec.get().len())));
    (effective, spec, errors)
}

/// The violations of `ic` defaulted and validated under the name `stand_in`.
fn under(ic: &Interconnect, stand_in: &str, checks: &Checks) -> Vec<FieldError> {
    let mut named = ic.clone();
    named.metadata.name = Some(stand_in.into());
    checks.violations(&defaulted(named))
}

/// The references of `effective` the requesting user must be allowed to read: on CREATE
/// all of them; on UPDATE each whose (use, Secret) pair the stored object did not have
/// ([`qdr_api::SecretUse`]: a Secret named anew, moved to a more powerful field such as
/// `caCert` → `issuer`, or a generated name such as `<name>-ca` that starts to sign), or all
/// of them when the image changes (a new image reads every mounted Secret). Names derived
/// from a name not yet picked (`generateName`) are left out: they are checked by the
/// validating webhook, which sees the picked name.
pub(super) fn references_to_check(
    effective: &Interconnect,
    old: Option<&Interconnect>,
) -> Vec<(String, String)> {
    let mut refs = effective.secret_uses();
    if effective.metadata.name.as_deref().unwrap_or_default().is_empty() {
        let (users, issuer) = (effective.spec.users.is_some(), effective.spec.user_issuer().is_some());
        refs.retain(|(f, _, _)| match f.as_str() {
            "spec.users" => users,
            "spec.deploymentPlan.issuer" => issuer,
            _ => true,
        });
    }
    if let Some(old) = old {
        let image = |ic: &Interconnect| ic.spec.deployment_plan.as_ref().and_then(|p| p.image.clone());
        if image(old) == image(effective) {
            let before: std::collections::BTreeSet<(qdr_api::SecretUse, String)> =
                old.secret_uses().into_iter().map(|(_, name, usage)| (usage, name)).collect();
            refs.retain(|(_, name, usage)| !before.contains(&(*usage, name.clone())));
        }
    }
    refs.into_iter().map(|(field, name, _)| (field, name)).collect()
}

/// The warnings of `effective` that the stored object `old` (defaulted; on UPDATE) did not
/// already have: a risky state is announced once, by the write that introduces it (the
/// create that adds a default, the update that changes it), not on every later update.
pub(super) fn new_warnings(effective: &Interconnect, old: Option<&Interconnect>) -> Vec<String> {
    let warns = warnings(effective);
    let Some(old) = old else { return warns };
    let before = warnings(old);
    warns.into_iter().filter(|w| !before.contains(w)).collect()
}

/// Longest warning, in characters (the API guidance, also what kubectl users read).
pub const MAX_WARNING: usize = 120;

/// The warning for a violation carried over from the stored object: the violation as the API
/// server's own ratcheting warnings show it (`path: Type value: detail`), cut to
/// [`MAX_WARNING`] characters (the whole text is in the `SpecValid` condition).
pub fn carried_warning(e: &FieldError) -> String {
    let full = e.to_string();
    if full.chars().count() <= MAX_WARNING {
        return full;
    }
    let mut cut: String = full.chars().take(MAX_WARNING - 1).collect();
    cut.push('…');
    cut
}
