//! The Secrets an Interconnect depends on, with the spec field that names each and the keys
//! the router reads from it; which of them are missing; and the fingerprint of the mounted
//! ones, which rolls the routers when their files change (qdrouterd 1.19 reads certificate
//! files and the SASL database only at start).

use std::collections::{BTreeMap, BTreeSet};

use std::time::SystemTime;

use hmac::Mac;

use crate::credentials::Data;
use crate::hash_key::HashKey;
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
    /// Whether only `keys` are mounted (the trust bundle of a generated CA named by
    /// `caCert`), not the whole Secret: only they count in the fingerprint.
    pub projected: bool,
}

/// Every Secret `o` depends on, in spec order: the SASL users Secret, each profile's
/// `credentials` and (when the configuration reads it) `caCert`, a user's `caCert` that
/// signs a profile's generated credentials, and the user's issuer CA when generated
/// credentials are signed by it. A `caCert` in `bundles` (a generated CA, of this or another
/// Interconnect) is read for its trust bundle, `ca.crt`.
pub fn references(o: &ValidatedInterconnect, bundles: &BTreeSet<String>) -> Vec<Reference> {
    let mut out = Vec::new();
    if let Some(users) = o.users_secret() {
        out.push(Reference {
            secret: users,
            field: "spec.users".into(),
            keys: vec![],
            mounted: true,
            projected: false,
        });
    }
    for (i, p) in o.spec().ssl_profiles.iter().flatten().enumerate() {
        if let Some(cred) = &p.credentials {
            out.push(Reference {
                secret: cred.clone(),
                field: format!("spec.sslProfiles[{i}].credentials"),
                keys: keys_read(p, cred),
                mounted: true,
                projected: false,
            });
        }
        if let Some(ca) = p.ca_cert.as_ref().filter(|ca| Some(*ca) != p.credentials.as_ref()) {
            let mut keys = keys_read(p, ca);
            let projected = keys == ["tls.crt"] && bundles.contains(ca);
            if projected {
                keys = vec!["ca.crt"];
            }
            let field = format!("spec.sslProfiles[{i}].caCert");
            if !keys.is_empty() {
                out.push(Reference { secret: ca.clone(), field, keys, mounted: true, projected });
            } else if p.generate_credentials == Some(true) && p.generate_ca_cert != Some(true) {
                // The user's CA signs the generated credentials: read by the operator.
                let keys = vec!["tls.crt", "tls.key"];
                out.push(Reference { secret: ca.clone(), field, keys, mounted: false, projected: false });
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
                projected: false,
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

/// HMAC-SHA256 under `key` (hex) of the content of every mounted Secret of `refs`: names,
/// keys and values, sorted (only the mounted keys of a [`Reference::projected`] one); a
/// missing Secret counts as missing. Equal content, equal fingerprint; without the key it
/// reveals nothing of the content ([`crate::hash_key`]).
pub fn fingerprint(key: &HashKey, refs: &[Reference], secrets: &BTreeMap<String, Data>) -> String {
    // Per Secret: `None` when it is mounted whole, else the keys mounted.
    let mut mounted: BTreeMap<&str, Option<Vec<&str>>> = BTreeMap::new();
    for r in refs.iter().filter(|r| r.mounted) {
        let entry = mounted.entry(r.secret.as_str()).or_insert_with(|| r.projected.then(Vec::new));
        match (entry.as_mut(), r.projected) {
            (Some(keys), true) => keys.extend(r.keys.iter().copied()),
            (Some(_), false) => *entry = None,
            (None, _) => {}
        }
    }
    let mut h = key.mac();
    for (name, only) in mounted {
        h.update(name.as_bytes());
        h.update(&[0]);
        match secrets.get(name) {
            None => h.update(b"\x01missing"),
            Some(d) => {
                for (k, v) in d.iter().filter(|(k, _)| only.as_ref().is_none_or(|o| o.contains(&k.as_str())))
                {
                    h.update(k.as_bytes());
                    h.update(&[0]);
                    h.update(&(v.0.len() as u64).to_be_bytes());
                    h.update(&v.0);
                }
            }
        }
        h.update(&[0xff]);
    }
    h.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// What is wrong with a Secret that exists and has every key a [`Reference`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The certificate in `tls.crt` (or every CA of `ca.crt`) is no longer valid: its
    /// `notAfter`.
    Expired(SystemTime),
    /// The content is not what the router reads: what is wrong, as a phrase
    /// (`tls.crt is not a PEM certificate`, `tls.key does not belong to tls.crt`).
    Invalid(String),
}

/// A reference whose Secret has a [`Problem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// The reference.
    pub reference: Reference,
    /// What is wrong.
    pub problem: Problem,
}

impl std::fmt::Display for Judged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.reference;
        match &self.problem {
            Problem::Expired(t) => write!(
                f,
                "the certificate in Secret {} ({}) expired at {}",
                r.secret,
                r.field,
                crate::human::date(*t)
            ),
            Problem::Invalid(what) => write!(f, "Secret {} ({}): {what}", r.secret, r.field),
        }
    }
}

/// The first problem of the keys `r` reads in `d`: `tls.crt` must hold a certificate valid
/// at `now`, `tls.key` its private key, `ca.crt` at least one certificate, one of them valid.
fn problem(r: &Reference, d: &Data, now: SystemTime) -> Option<Problem> {
    use qdr_certs::pki::{CertInfo, split_bundle};
    let text = |k: &str| d.get(k).map(|v| String::from_utf8_lossy(&v.0).into_owned());
    if r.keys.contains(&"tls.crt")
        && let Some(cert) = text("tls.crt")
    {
        let Ok(info) = CertInfo::parse(&cert) else {
            return Some(Problem::Invalid("tls.crt is not a PEM certificate".into()));
        };
        if r.keys.contains(&"tls.key")
            && let Some(key) = text("tls.key")
            && let Err(e) = crate::credentials::key_of(&cert, &key)
        {
            return Some(Problem::Invalid(format!("tls.key: {e}")));
        }
        if info.not_after <= now {
            return Some(Problem::Expired(info.not_after));
        }
    }
    if r.keys.contains(&"ca.crt")
        && let Some(bundle) = text("ca.crt")
    {
        let infos: Vec<CertInfo> =
            split_bundle(&bundle).iter().filter_map(|c| CertInfo::parse(c).ok()).collect();
        let Some(last) = infos.iter().map(|i| i.not_after).max() else {
            return Some(Problem::Invalid("ca.crt is not a PEM certificate".into()));
        };
        if last <= now {
            return Some(Problem::Expired(last));
        }
    }
    None
}

/// The references of `refs` whose Secret in `secrets` exists with its keys (see [`unmet`])
/// but holds an invalid or expired certificate or a key of another certificate, at `now`.
pub fn judge(refs: &[Reference], secrets: &BTreeMap<String, Data>, now: SystemTime) -> Vec<Judged> {
    refs.iter()
        .filter_map(|r| {
            let problem = problem(r, secrets.get(&r.secret)?, now)?;
            Some(Judged { reference: r.clone(), problem })
        })
        .collect()
}
