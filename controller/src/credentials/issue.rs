//! One router certificate (a `generateCredentials` profile's leaf) per pass: issued when
//! missing, re-issued when its signer or key changed, a name it must carry is missing, or its
//! renew point passed, and given its signer's current trust bundle and, when the signer is
//! rooted for other sites ([`super::root`]), its cross-signed certificate as the chain
//! after the leaf. It writes only the leaf's Secret, never a CA.

use std::time::SystemTime;

use k8s_openapi::ByteString;
use qdr_certs::pki::{CertInfo, new_leaf};

use super::change::CredentialChange;
use super::inspect::{bundle, ca_pair, is_signed_by, key_of, signing_pair};
use super::lifetimes::{Lifetimes, RENEW_FRACTION};
use super::root::chain;
use super::secrets::{NEXT_CRT, NEXT_KEY, data, text};
use super::work::{CredentialsError, Leaf, Work};
use crate::validated::ValidatedInterconnect;

/// The names of router certificates: the Service's DNS names, then every address the
/// Interconnect's AccessGrants advertise to other clusters (host names and IP addresses,
/// [`ValidatedInterconnect::advertised`]), so a site that dials one verifies it.
fn dns_names(o: &ValidatedInterconnect) -> Vec<String> {
    let (n, ns) = (o.name(), o.namespace());
    let mut names = vec![
        n.to_string(),
        format!("{n}.{ns}"),
        format!("{n}.{ns}.svc"),
        format!("{n}.{ns}.svc.cluster.local"),
    ];
    for a in o.advertised() {
        if !names.contains(a) {
            names.push(a.clone());
        }
    }
    names
}

pub(super) fn leaf_step(
    w: &mut Work<'_>,
    leaf: &Leaf,
    now: SystemTime,
    lifetimes: Lifetimes,
) -> Result<(), CredentialsError> {
    let Some(signer_data) = w.get(&leaf.signer).cloned() else { return Ok(()) };
    let Some(trust) = bundle(&signer_data) else { return Ok(()) };
    let signer = signing_pair(&signer_data, now);
    let sans = dns_names(w.o);
    let current = w.get(&leaf.secret).cloned();
    let cert = current.as_ref().and_then(|d| text(d, "tls.crt"));
    let old = cert.as_deref().and_then(|c| CertInfo::parse(c).ok());
    let reissue: Option<Option<&'static str>> = match (&cert, &old, &signer) {
        (None, _, _) => Some(None),
        (Some(_), None, _) => Some(Some("tls.crt is not a certificate")),
        // A signer that cannot sign (a CA being recovered) keeps the leaves it signed.
        (_, _, None) => None,
        (Some(c), Some(i), Some(s)) => {
            let key = current.as_ref().and_then(|d| text(d, "tls.key")).unwrap_or_default();
            if !is_signed_by(c, &s.cert_pem) {
                Some(Some("signer's key changed"))
            } else if key_of(c, &key).is_err() {
                Some(Some("tls.key does not belong to tls.crt"))
            } else if sans.iter().any(|n| !i.sans.contains(n)) {
                // A name that leaves (a grant deleted) stays until the next renewal: a
                // re-issue would roll every router, and with it every other site's link.
                Some(Some("names changed"))
            } else if now >= i.point(RENEW_FRACTION) {
                Some(Some("renew point reached"))
            } else {
                None
            }
        }
    };
    // A missing leaf of a CA being recovered is signed by the staged CA: the bundle it
    // comes with trusts it, and nothing else could start the routers.
    let signing = signer.or_else(|| {
        (cert.is_none()).then(|| ca_pair(&signer_data, NEXT_CRT, NEXT_KEY, now).ok().flatten()).flatten()
    });
    if let (Some(why), Some(signing)) = (reissue, &signing) {
        let new = new_leaf(signing, &sans, now, lifetimes.cert)?;
        w.due(CertInfo::parse(&new.cert_pem)?.point(RENEW_FRACTION));
        let served = chain(&signer_data, &new.cert_pem);
        w.write(
            &leaf.secret,
            data(&[("tls.crt", &served), ("tls.key", &new.key_pem), ("ca.crt", &trust)]),
            None,
        );
        if let Some(why) = why {
            w.plan.changes.push(CredentialChange::Renewed {
                secret: leaf.secret.clone(),
                why,
                until: old.as_ref().map(|i| i.not_after),
            });
        }
        return Ok(());
    }
    if let Some(i) = &old {
        w.due(i.point(RENEW_FRACTION));
    }
    // The same leaf, with its signer's current trust bundle and chain (a root made for
    // other sites, [`super::root`]).
    if let Some(mut d) = current {
        let served = cert.as_deref().map(|c| chain(&signer_data, c));
        let mut changed = false;
        if let Some(served) = served.filter(|s| Some(s) != cert.as_ref()) {
            d.insert("tls.crt".into(), ByteString(served.into_bytes()));
            changed = true;
        }
        if text(&d, "ca.crt").as_deref() != Some(trust.as_str()) {
            d.insert("ca.crt".into(), ByteString(trust.into_bytes()));
            changed = true;
        }
        if changed {
            w.write(&leaf.secret, d, None);
        }
    }
    Ok(())
}
