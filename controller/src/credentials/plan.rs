//! The entry point of credentials: which Secrets an Interconnect generates
//! ([`generated`]), and [`plan`], which reads what exists and runs each owned CA's rotation
//! step, then each leaf's issuance. It owns the order (CAs before the leaves they sign) and
//! which Secrets are the operator's; the steps themselves are [`super::rotate`] and
//! [`super::issue`].

use std::time::SystemTime;

use super::issue::leaf_step;
use super::lifetimes::Lifetimes;
use super::root::{ROOT_CRT, root_step};
use super::rotate::ca_step;
use super::secrets::Existing;
use super::work::{CredentialsError, Leaf, Plan, Routers, Work};
use crate::validated::ValidatedInterconnect;

/// The Secrets `o` generates, each with the spec field that makes it generated, in spec
/// order: the Interconnect's CA (`<name>-ca`, unless `deploymentPlan.issuer` names one) when
/// a generated certificate is signed by it, each `generateCaCert` profile's `caCert`, and
/// each `generateCredentials` profile's `credentials`. A name may appear twice only for one
/// CA shared by profiles; [`qdr_api::validate`] refuses any other repeat.
pub(crate) fn generated(o: &ValidatedInterconnect) -> Vec<(String, String)> {
    let profiles: Vec<_> = o.spec().ssl_profiles.iter().flatten().collect();
    let ic_ca = o.issuer_secret();
    let mut out = Vec::new();
    if o.spec().user_issuer().is_none() && o.ic().issuer_signs() {
        out.push((ic_ca, "spec.deploymentPlan.issuer".to_string()));
    }
    for (i, p) in profiles.iter().enumerate() {
        if p.generate_ca_cert == Some(true)
            && let Some(ca) = &p.ca_cert
        {
            out.push((ca.clone(), format!("spec.sslProfiles[{i}].caCert")));
        }
        if p.generate_credentials == Some(true)
            && let Some(c) = &p.credentials
        {
            out.push((c.clone(), format!("spec.sslProfiles[{i}].credentials")));
        }
    }
    out
}

/// What every generated credential of `o` needs at `now`: missing Secrets created, due
/// renewals and CA rotation steps (see the module docs). `routers` says whether routers run
/// and whether they run the credentials observed now: CA promotion and retirement wait for
/// [`Routers::RolledOut`]; a CA that is missing while routers run this configuration (which
/// mounts the certificates it signed, so it existed) is lost, not new.
///
/// A leaf whose signer is missing or cannot sign is not issued: the caller reports the
/// missing Secret (or key).
///
/// # Errors
/// [`CredentialsError::Certificate`] when generation fails.
pub(crate) fn plan(
    o: &ValidatedInterconnect,
    existing: &Existing,
    now: SystemTime,
    lifetimes: Lifetimes,
    routers: Routers,
) -> Result<Plan, CredentialsError> {
    let mut w = Work {
        o,
        existing,
        data: existing.iter().map(|(n, s)| (n.clone(), s.data.clone().unwrap_or_default())).collect(),
        plan: Plan::default(),
        steps: Default::default(),
    };
    let profiles: Vec<_> = o.spec().ssl_profiles.iter().flatten().collect();
    let ic_ca = o.issuer_secret();
    let leaves: Vec<Leaf> = profiles
        .iter()
        .filter(|p| p.generate_credentials == Some(true))
        .filter_map(|p| {
            let signer = if p.mutual_auth == Some(true) {
                p.ca_cert.clone().unwrap_or_else(|| ic_ca.clone())
            } else {
                ic_ca.clone()
            };
            Some(Leaf { secret: p.credentials.clone()?, signer })
        })
        .filter(|l| w.ours(&l.secret))
        .collect();

    // CAs the operator owns: the Interconnect's (unless the user names an issuer) when a
    // leaf needs it, and every profile CA with generateCaCert.
    let mut cas: Vec<String> = Vec::new();
    if o.spec().user_issuer().is_none() && leaves.iter().any(|l| l.signer == ic_ca) {
        cas.push(ic_ca.clone());
    }
    for p in &profiles {
        if p.generate_ca_cert == Some(true)
            && let Some(ca) = &p.ca_cert
            && !cas.contains(ca)
        {
            cas.push(ca.clone());
        }
    }
    cas.retain(|c| w.ours(c));
    for ca in &cas {
        let signed: Vec<&Leaf> = leaves.iter().filter(|l| &l.signer == ca).collect();
        ca_step(&mut w, ca, &signed, now, lifetimes, routers)?;
    }
    // CAs other sites trust (a listener an AccessGrant offers: `o.site_trust()`), or that
    // did once: a root above them, and their current certificate cross-signed by it, in
    // the same pass as any promotion and before the leaves that carry it.
    let offered: Vec<&str> = (o.site_trust().iter())
        .filter_map(|(p, _)| profiles.iter().find(|s| s.name == *p)?.ca_cert.as_deref())
        .collect();
    for ca in &cas {
        let rooted = w.get(ca).is_some_and(|d| d.contains_key(ROOT_CRT));
        if rooted || offered.contains(&ca.as_str()) {
            root_step(&mut w, ca, now)?;
        }
    }
    for leaf in &leaves {
        leaf_step(&mut w, leaf, now, lifetimes)?;
    }
    Ok(w.plan)
}
