//! TLS credentials for sslProfiles, issued by the operator with [`qdr_certs::pki`] where the
//! Go operator asked cert-manager:
//!
//! * the Interconnect's CA, Secret `<name>-ca` (or the Secret named by
//!   `deploymentPlan.issuer`, which is used and never written);
//! * for a profile with `generateCaCert`: its own CA in Secret `caCert`;
//! * for a profile with `generateCredentials`: a certificate in Secret `credentials`, signed
//!   by the profile's CA when `mutualAuth`, else by the Interconnect's CA, for the Service's
//!   names (`<name>`, `<name>.<ns>`, `<name>.<ns>.svc`, `<name>.<ns>.svc.cluster.local`; no
//!   name with an empty domain, unlike the Go operator), with the signer as `ca.crt`.
//!
//! Only missing Secrets are made; existing ones are never overwritten.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use qdr_certs::pki::{CertKey, new_ca, new_leaf};

use crate::owner::Owner;

/// Lifetime of generated CAs.
pub const CA_LIFETIME: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// Lifetime of generated router certificates.
pub const CERT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why credentials could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A Secret the spec names as a CA does not hold `tls.crt` and `tls.key`.
    #[error("Secret {0:?} must exist and hold tls.crt and tls.key of a CA")]
    MissingCa(String),
    /// Certificate generation failed.
    #[error(transparent)]
    Certificate(#[from] qdr_certs::Error),
}

/// The existing Secrets' data, by name (what the caller read from the namespace).
pub type Existing = BTreeMap<String, BTreeMap<String, ByteString>>;

fn pair(existing: &Existing, name: &str) -> Option<CertKey> {
    let d = existing.get(name)?;
    let s = |k: &str| d.get(k).map(|b| String::from_utf8_lossy(&b.0).into_owned());
    Some(CertKey { cert_pem: s("tls.crt")?, key_pem: s("tls.key")? })
}

/// Label on every Secret the controller generated (CA or certificate), so that they can be
/// told from user-provided ones.
pub const GENERATED_LABEL: &str = "qdr-operator.io/credentials";

fn secret(o: &Owner, name: &str, data: &[(&str, &str)]) -> Secret {
    let mut s = Secret {
        metadata: o.meta(name),
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    };
    s.metadata.labels.get_or_insert_with(BTreeMap::new).insert(GENERATED_LABEL.into(), "true".into());
    s
}

/// The DNS names of router certificates.
pub fn dns_names(o: &Owner) -> Vec<String> {
    let (n, ns) = (o.name(), o.namespace());
    vec![n.to_string(), format!("{n}.{ns}"), format!("{n}.{ns}.svc"), format!("{n}.{ns}.svc.cluster.local")]
}

/// The Secrets to create so that every generated credential of `o` exists, valid from
/// `now`. `existing` holds the data of the Secrets that exist (by name).
///
/// # Errors
/// [`CredentialsError::MissingCa`] when a CA to sign with is named but absent.
pub fn missing_secrets(
    o: &Owner,
    existing: &Existing,
    now: SystemTime,
) -> Result<Vec<Secret>, CredentialsError> {
    let mut out = Vec::new();
    let mut made: Existing = BTreeMap::new();
    let lookup = |made: &Existing, name: &str| pair(made, name).or_else(|| pair(existing, name));
    let profiles: Vec<_> = o.spec().ssl_profiles.iter().flatten().collect();

    let needs_ic_ca = profiles.iter().any(|p| {
        p.generate_credentials == Some(true)
            && p.mutual_auth != Some(true)
            && p.credentials.as_ref().is_some_and(|c| !existing.contains_key(c))
    });
    let ic_ca_name = o.issuer_secret();
    if needs_ic_ca && lookup(&made, &ic_ca_name).is_none() {
        if o.spec().user_issuer().is_some() {
            return Err(CredentialsError::MissingCa(ic_ca_name));
        }
        let ca = new_ca(&format!("{}-ca", o.name()), now, CA_LIFETIME)?;
        out.push(secret(
            o,
            &ic_ca_name,
            &[("tls.crt", &ca.cert_pem), ("tls.key", &ca.key_pem), ("ca.crt", &ca.cert_pem)],
        ));
        made.insert(ic_ca_name.clone(), out.last().unwrap().data.clone().unwrap());
    }
    for p in &profiles {
        if p.generate_ca_cert == Some(true)
            && let Some(ca_name) = &p.ca_cert
            && lookup(&made, ca_name).is_none()
        {
            let ca = new_ca(&format!("{}-{}-ca", o.name(), p.name), now, CA_LIFETIME)?;
            out.push(secret(
                o,
                ca_name,
                &[("tls.crt", &ca.cert_pem), ("tls.key", &ca.key_pem), ("ca.crt", &ca.cert_pem)],
            ));
            made.insert(ca_name.clone(), out.last().unwrap().data.clone().unwrap());
        }
    }
    for p in &profiles {
        let Some(cred) = p.credentials.as_ref().filter(|_| p.generate_credentials == Some(true)) else {
            continue;
        };
        if existing.contains_key(cred) || made.contains_key(cred) {
            continue;
        }
        let signer_name = if p.mutual_auth == Some(true) {
            p.ca_cert.clone().unwrap_or_else(|| ic_ca_name.clone())
        } else {
            ic_ca_name.clone()
        };
        let signer =
            lookup(&made, &signer_name).ok_or_else(|| CredentialsError::MissingCa(signer_name.clone()))?;
        let leaf = new_leaf(&signer, &dns_names(o), now, CERT_LIFETIME)?;
        out.push(secret(
            o,
            cred,
            &[("tls.crt", &leaf.cert_pem), ("tls.key", &leaf.key_pem), ("ca.crt", &signer.cert_pem)],
        ));
        made.insert(cred.clone(), out.last().unwrap().data.clone().unwrap());
    }
    Ok(out)
}
