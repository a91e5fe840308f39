//! `deploymentPlan.disruptionBudget` (API reference rule 22b): the bound of the routers'
//! PodDisruptionBudget, judged as the API server judges a PodDisruptionBudget's spec
//! (`k8s.io/kubernetes/pkg/apis/policy/validation`: at most one of `minAvailable` and
//! `maxUnavailable`, each a count ≥ 0 or a percentage of at most 100 %), plus what only makes
//! sense here: no bound with `enabled: false` or with placement `Every`.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::messages as msg;
use crate::types::{DeploymentPlan, Placement};

use super::checks::Validator;
use super::field_error::ErrorType;

impl Validator {
    /// The disruption budget of `plan`.
    pub(super) fn disruption_budget(&mut self, plan: &DeploymentPlan) {
        let Some(b) = &plan.disruption_budget else { return };
        let base = "spec.deploymentPlan.disruptionBudget";
        for (field, v) in [("maxUnavailable", &b.max_unavailable), ("minAvailable", &b.min_available)] {
            if let Some(v) = v {
                self.int_or_percent(&format!("{base}.{field}"), v);
            }
        }
        if b.max_unavailable.is_some() && b.min_available.is_some() {
            self.push(format_args!("{base}.minAvailable"), ErrorType::Forbidden, None, msg::BUDGET_ONE_OF);
        }
        let bound = b.max_unavailable.is_some() || b.min_available.is_some();
        if bound && b.enabled == Some(false) {
            self.push(format_args!("{base}"), ErrorType::Forbidden, None, msg::BUDGET_DISABLED_WITH_BOUND);
        }
        if bound && plan.placement == Some(Placement::Every) {
            self.push(format_args!("{base}"), ErrorType::Forbidden, None, msg::BUDGET_WITH_EVERY);
        }
    }

    /// A count ≥ 0 or a percentage `<digits>%` of at most 100 (apimachinery's
    /// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`).
    fn int_or_percent(&mut self, path: &str, v: &IntOrString) {
        match v {
            IntOrString::Int(i) if *i < 0 => {
                self.push(
                    path,
                    ErrorType::Invalid,
                    Some(Value::from(*i)),
                    "must be greater than or equal to 0",
                );
            }
            IntOrString::Int(_) => {}
            IntOrString::String(s) => match percent(s) {
                None => self.push(
                    path,
                    ErrorType::Invalid,
                    Some(Value::from(s.as_str())),
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%', \
                     or '93%')",
                ),
                Some(p) if p > 100 => self.push(
                    path,
                    ErrorType::Invalid,
                    Some(Value::from(s.as_str())),
                    "must not be greater than 100%",
                ),
                Some(_) => {}
            },
        }
    }
}

/// The number of a percent string `<digits>%` (`None` for any other string, or a number too
/// large for `u64`, which is over 100 anyway: `Some(u64::MAX)`).
pub(crate) fn percent(s: &str) -> Option<u64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::percent;

    #[test]
    fn percent_strings_are_digits_and_a_percent_sign() {
        assert_eq!(percent("25%"), Some(25));
        assert_eq!(percent("0%"), Some(0));
        assert_eq!(percent("100%"), Some(100));
        assert_eq!(percent("99999999999999999999999%"), Some(u64::MAX));
        for bad in ["%", "25", "-1%", "1.5%", " 5%", "5 %", "five%"] {
            assert_eq!(percent(bad), None, "{bad}");
        }
    }
}
