//! The Secrets an Interconnect depends on, with the spec field that names each and the keys
//! the router reads from it; which of them are missing; and the fingerprint of the mounted
//! ones, which rolls the routers when their files change (qdrouterd 1.19 reads certificate
//! files and the SASL database only at start).

use std::collections::BTreeMap;

use sha2::Digest;

use crate::credentials::Data;
use crate::validated::ValidatedInterconnect;
use qdr_api::router_config::keys_read;

/// A Secret the routers mount or the operator reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Secret name.
    pub secret: String,
    /// The spec field naming it, as a field path (`spec.sslProfiles[0].credentials`).
    pub field: String,
    /// Keys that must be present (`tls.crt`, `tls.key`, `ca.crt`); empty: any content.
    pub keys: Vec<&'static str>,
    /// Whether the router pods mount it (the issuer CA is only read by the operator).
    pub mounted: bool,
}

/// Every Secret `o` depends on, in spec order: the SASL users Secret, each profile's
/// `credentials` and (when the configuration reads it) `caCert`, and the user's issuer CA
/// when generated credentials are signed by it.
pub fn references(o: &ValidatedInterconnect) -> Vec<Reference> {
    let mut out = Vec::new();
    if let Some(users) = o.users_secret() {
        out.push(Reference { secret: users, field: "spec.users".into(), keys: vec![], mounted: true });
    }
    for (i, p) in o.spec().ssl_profiles.iter().flatten().enumerate() {
        if let Some(cred) = &p.credentials {
            out.push(Reference {
                secret: cred.clone(),
                field: format!("spec.sslProfiles[{i}].credentials"),
                keys: keys_read(p, cred),
                mounted: true,
            });
        }
        if let Some(ca) = p.ca_cert.as_ref().filter(|ca| Some(*ca) != p.credentials.as_ref()) {
            let keys = keys_read(p, ca);
            if !keys.is_empty() {
                out.push(Reference {
                    secret: ca.clone(),
                    field: format!("spec.sslProfiles[{i}].caCert"),
                    keys,
                    mounted: true,
                });
            }
        }
    }
    if let Some(issuer) = o.spec().user_issuer() {
        let signs = o
            .spec()
            .ssl_profiles
            .iter()
            .flatten()
            .any(|p| p.generate_credentials == Some(true) && p.mutual_auth != Some(true));
        if signs {
            out.push(Reference {
                secret: issuer.to_string(),
                field: "spec.deploymentPlan.issuer".into(),
                keys: vec!["tls.crt", "tls.key"],
                mounted: false,
            });
        }
    }
    out
}

/// A dependency that is not met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmet {
    /// The reference.
    pub reference: Reference,
    /// The keys it lacks; empty when the Secret does not exist at all.
    pub missing_keys: Vec<&'static str>,
}

impl std::fmt::Display for Unmet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.reference;
        if self.missing_keys.is_empty() {
            write!(f, "Secret {} ({}) does not exist", r.secret, r.field)
        } else {
            write!(f, "Secret {} ({}) has no {}", r.secret, r.field, self.missing_keys.join(", "))
        }
    }
}

/// The references of `refs` that `secrets` (effective data by name; absent = missing) does
/// not satisfy.
pub fn unmet(refs: &[Reference], secrets: &BTreeMap<String, Data>) -> Vec<Unmet> {
    refs.iter()
        .filter_map(|r| match secrets.get(&r.secret) {
            None => Some(Unmet { reference: r.clone(), missing_keys: vec![] }),
            Some(d) => {
                let missing: Vec<&'static str> =
                    r.keys.iter().copied().filter(|k| d.get(*k).is_none_or(|v| v.0.is_empty())).collect();
                (!missing.is_empty()).then(|| Unmet { reference: r.clone(), missing_keys: missing })
            }
        })
        .collect()
}

/// SHA-256 (hex) of the content of every mounted Secret of `refs`: names, keys and values,
/// sorted; a missing Secret counts as missing. Equal content, equal fingerprint.
pub fn fingerprint(refs: &[Reference], secrets: &BTreeMap<String, Data>) -> String {
    let mut names: Vec<&str> = refs.iter().filter(|r| r.mounted).map(|r| r.secret.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut h = sha2::Sha256::new();
    for name in names {
        h.update(name.as_bytes());
        h.update([0]);
        match secrets.get(name) {
            None => h.update(b"\x01missing"),
            Some(d) => {
                for (k, v) in d {
                    h.update(k.as_bytes());
                    h.update([0]);
                    h.update((v.0.len() as u64).to_be_bytes());
                    h.update(&v.0);
                }
            }
        }
        h.update([0xff]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
