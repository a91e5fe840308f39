//! The names of the Secrets the operator generates (API reference rule 25): each must be one
//! of its own, not a Secret the spec names for another use. It judges no user-provided
//! Secret's name format (that is [`super::checks`]).

use crate::types::Interconnect;

use super::checks::Validator;
use super::field_error::ErrorType;

/// What the operator generates into a Secret, for [`Validator::generated_secrets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Generated {
    /// The SASL users Secret (generated when missing).
    Users,
    /// A CA: the Interconnect's, or a `generateCaCert` profile's (several profiles may share one).
    Ca,
    /// A `generateCredentials` profile's certificate.
    Certificate,
}

impl Generated {
    fn what(self) -> &'static str {
        match self {
            Generated::Users => "the SASL users (with passwords)",
            Generated::Ca => "a CA",
            Generated::Certificate => "a router certificate",
        }
    }
}

impl Validator {
    /// Every Secret the operator writes needs a name of its own: the users Secret, the
    /// Interconnect's CA (`<name>-ca`, when it signs generated certificates and no
    /// `deploymentPlan.issuer` is set), each `generateCaCert` profile's `caCert` and each
    /// `generateCredentials` profile's `credentials`. Two certificates, or a certificate and a
    /// CA, or users and either, in one Secret would overwrite each other on every reconcile
    /// and roll the routers for ever. One CA shared by profiles is allowed.
    pub(super) fn generated_secrets(&mut self, ic: &Interconnect) {
        let spec = &ic.spec;
        let mut seen: Vec<(String, String, Generated)> = Vec::new();
        if let Some(users) = ic.users_secret() {
            seen.push((users, "spec.users".into(), Generated::Users));
        }
        let ic_ca = ic.issuer_secret();
        let signs = spec
            .ssl_profiles
            .iter()
            .flatten()
            .filter(|p| p.generate_credentials == Some(true))
            .any(|p| p.mutual_auth != Some(true) || p.ca_cert.as_ref().is_none_or(|c| *c == ic_ca));
        if spec.user_issuer().is_none() && signs {
            let path = "the Interconnect's CA, <name>-ca (spec.deploymentPlan.issuer is not set)".to_string();
            seen.push((ic_ca, path, Generated::Ca));
        }
        for (i, p) in spec.ssl_profiles.iter().flatten().enumerate() {
            let mut mine = Vec::new();
            if p.generate_ca_cert == Some(true)
                && let Some(ca) = &p.ca_cert
            {
                mine.push((ca.clone(), format!("spec.sslProfiles[{i}].caCert"), Generated::Ca));
            }
            if p.generate_credentials == Some(true)
                && let Some(c) = &p.credentials
            {
                mine.push((c.clone(), format!("spec.sslProfiles[{i}].credentials"), Generated::Certificate));
            }
            for (name, path, kind) in mine {
                let clash = seen
                    .iter()
                    .find(|(n, _, k)| *n == name && !(*k == Generated::Ca && kind == Generated::Ca));
                if let Some((_, other, other_kind)) = clash {
                    let other = other.trim_start_matches("spec.").to_string();
                    let detail = format!(
                        "the operator generates {} into this Secret, and {} into the same Secret for {other}: they \
                         would overwrite each other on every reconcile; give each generated Secret its own name",
                        kind.what(),
                        other_kind.what()
                    );
                    self.push(path.clone(), ErrorType::Duplicate, Some(name.as_str().into()), detail);
                } else {
                    seen.push((name, path, kind));
                }
            }
        }
    }
}
