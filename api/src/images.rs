//! The router image policy: which `spec.deploymentPlan.image` values a cluster admits.
//!
//! An Interconnect author chooses the image of pods that mount the Secrets the spec names
//! (SASL users, TLS keys), so in a cluster where authors are not fully trusted the admin
//! limits the images, as Gatekeeper or Kyverno image policies do for Pods. The webhook's
//! `--allowed-router-images` is a list of [`ImagePattern`]s; the default (an empty list)
//! allows any image, so objects written for the Go operator keep working.
//!
//! An absent `image` is not checked: the controller then runs its own configured default
//! image, which the cluster admin chose.

use crate::Interconnect;

/// The router image the controller runs when a spec names none (its `--default-image`
/// default; the OLM bundle lists it among its related images): qdrouterd 1.19.0 as the Go
/// operator's default repository publishes it.
pub const DEFAULT_ROUTER_IMAGE: &str = "quay.io/interconnectedcloud/qdrouterd:1.19.0";
use crate::validate::{ErrorType, FieldError};

/// One allowed-image pattern, matched against the whole image reference as written in the
/// spec (no registry or tag is added, so `qdrouterd` and `docker.io/library/qdrouterd` are
/// different references): `*` matches any run of characters, `/` and `:` included, and every
/// other character matches itself. So `quay.io/interconnectedcloud/qdrouterd:*` allows every
/// tag of one repository, `registry.example.com/*` everything under one registry (write the
/// `/`: `registry.example.com*` would also allow `registry.example.com.evil.io/x`), and a
/// pattern without `*` exactly one reference (`...@sha256:<digest>` pins a digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePattern(String);

impl ImagePattern {
    /// Parses a pattern. Errors: empty, or whitespace in it (an image reference has none).
    pub fn parse(s: &str) -> Result<ImagePattern, String> {
        if s.is_empty() {
            return Err("an image pattern may not be empty".into());
        }
        if s.chars().any(char::is_whitespace) {
            return Err(format!("image pattern {s:?} contains whitespace"));
        }
        Ok(ImagePattern(s.to_string()))
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `image` matches: glob matching with `*` only, by the two-pointer algorithm
    /// with one backtrack point (no recursion; at worst the product of the two lengths).
    pub fn matches(&self, image: &str) -> bool {
        let (p, s) = (self.0.as_bytes(), image.as_bytes());
        let (mut pi, mut si) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while si < s.len() {
            if pi < p.len() && p[pi] == b'*' {
                star = Some((pi, si));
                pi += 1;
            } else if pi < p.len() && p[pi] == s[si] {
                pi += 1;
                si += 1;
            } else if let Some((sp, ss)) = star {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == b'*')
    }
}

/// The images a cluster admits: any, or those matching one of a list of [`ImagePattern`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImagePolicy {
    patterns: Vec<ImagePattern>,
}

impl ImagePolicy {
    /// Any image (the default, as the Go operator).
    pub fn any() -> ImagePolicy {
        ImagePolicy::default()
    }

    /// Only images matching one of `patterns`; an empty list is [`ImagePolicy::any`].
    pub fn only(patterns: Vec<ImagePattern>) -> ImagePolicy {
        ImagePolicy { patterns }
    }

    /// Whether every image is admitted.
    pub fn allows_any(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The patterns, in the order given.
    pub fn patterns(&self) -> &[ImagePattern] {
        &self.patterns
    }

    /// The violation of `ic` under this policy: `Forbidden` at `spec.deploymentPlan.image`
    /// naming the image and the allowed patterns, or `None` when the image is absent or
    /// allowed.
    pub fn check(&self, ic: &Interconnect) -> Option<FieldError> {
        let image = ic.spec.deployment_plan.as_ref()?.image.as_deref()?;
        if self.allows_any() || self.patterns.iter().any(|p| p.matches(image)) {
            return None;
        }
        let allowed: Vec<&str> = self.patterns.iter().map(ImagePattern::as_str).collect();
        // The image is shown in the detail (Forbidden causes carry no value), cut so a long
        // reference cannot make the message large.
        let shown: String = image.chars().take(crate::MAX_SHOWN_VALUE).collect();
        Some(FieldError {
            field: "spec.deploymentPlan.image".into(),
            error_type: ErrorType::Forbidden,
            bad_value: None,
            detail: format!(
                "image {shown:?} is not allowed in this cluster: it must match one of {allowed:?} \
                 (the webhook's --allowed-router-images); remove the field to run the operator's default image"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ImagePattern {
        ImagePattern::parse(s).unwrap()
    }

    #[test]
    fn globs_match_whole_references() {
        let repo = p("quay.io/interconnectedcloud/qdrouterd:*");
        assert!(repo.matches("quay.io/interconnectedcloud/qdrouterd:1.19.0"));
        assert!(repo.matches("quay.io/interconnectedcloud/qdrouterd:"));
        assert!(!repo.matches("quay.io/interconnectedcloud/qdrouterd"));
        assert!(!repo.matches("quay.io/interconnectedcloud/qdrouterd-evil:1"));
        let registry = p("registry.example.com/*");
        assert!(registry.matches("registry.example.com/a/b:c"));
        assert!(!registry.matches("registry.example.com.evil.io/x"));
        assert!(!registry.matches("evil.io/registry.example.com/x"));
        let exact = p("qdrouterd@sha256:abc");
        assert!(exact.matches("qdrouterd@sha256:abc"));
        assert!(!exact.matches("qdrouterd@sha256:abcd"));
        assert!(!exact.matches("x-qdrouterd@sha256:abc"));
        let middle = p("*/qdr/*:1.*");
        assert!(middle.matches("r.io/qdr/router:1.19"));
        assert!(!middle.matches("r.io/qdr/router:2.0"));
        assert!(p("*").matches("anything/at:all"));
        assert!(p("a*b*c").matches("aXbYbZc") && !p("a*b*c").matches("aXbYbZ"));
    }

    #[test]
    fn many_stars_do_not_backtrack_exponentially() {
        // A recursive matcher takes exponential time here; this one returns at once.
        let pattern = p(&format!("{}b", "*a".repeat(30)));
        assert!(!pattern.matches(&"a".repeat(1024)));
        assert!(pattern.matches(&format!("{}b", "a".repeat(1024))));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(ImagePattern::parse("").is_err());
        assert!(ImagePattern::parse("a b").unwrap_err().contains("whitespace"));
    }

    #[test]
    fn the_policy_checks_only_a_set_image() {
        let ic = |image: Option<&str>| {
            let mut spec = crate::InterconnectSpec::default();
            if let Some(i) = image {
                spec.deployment_plan =
                    Some(crate::DeploymentPlan { image: Some(i.into()), ..Default::default() });
            }
            Interconnect::new("mesh", spec)
        };
        let policy = ImagePolicy::only(vec![p("registry.example.com/*")]);
        assert_eq!(policy.check(&ic(None)), None, "absent: the controller's default image");
        assert_eq!(policy.check(&ic(Some("registry.example.com/qdr:1"))), None);
        let e = policy.check(&ic(Some("evil.io/qdr:1"))).unwrap();
        assert_eq!(e.field, "spec.deploymentPlan.image");
        assert_eq!(e.error_type, ErrorType::Forbidden);
        assert!(e.detail.contains("\"evil.io/qdr:1\"") && e.detail.contains("registry.example.com/*"), "{e}");
        assert_eq!(ImagePolicy::any().check(&ic(Some("evil.io/qdr:1"))), None);
        assert!(ImagePolicy::only(vec![]).allows_any());
    }
}
