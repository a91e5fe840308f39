//! A root above a CA that other sites trust, so that the CA's rotation does not cut them
//! off (docs/multi-cluster.md, "A's CA rotation").
//!
//! A site linked with an AccessGrant's token trusts the bundle the token carried when its
//! admin applied it. Without more, the first CA rotation after that (stage, promote: the
//! routers' certificates are then signed by a CA the token never named) would cut the site
//! off until its admin applies the token again. So the CA of a listener profile offered to
//! other sites (a profile of `site_trust()`, or a CA that has a root already: [`super::plan()`])
//! also holds, in its own Secret:
//! * `root.crt`/`root.key` ([`ROOT_CRT`], [`ROOT_KEY`]): a root CA made once, for
//!   [`ROOT_LIFETIME`], which signs nothing but the cross-signed certificates below;
//! * `cross.crt` ([`CROSS_CRT`]): the CA's current certificate issued again by the root
//!   ([`qdr_certs::pki::cross_sign`]), re-made in the same pass as a promotion.
//!
//! Each router certificate the CA signs is written as the leaf followed by `cross.crt`
//! ([`chain`]), the chain qdrouterd sends (proton reads `certFile` with OpenSSL's
//! `SSL_CTX_use_certificate_chain_file`), and each token carries the root after the bundle.
//! A leaf that its CA's current cross-signed certificate did not sign (a lost CA's leaves,
//! until the promotion re-signs them) is served alone.
//! A peer that trusts the CA itself (the Interconnect's own routers) finds it by name and
//! key; a site that trusts only an old generation and the root verifies through the
//! cross-signed certificate. The keys never leave the Secret: routers mount only its
//! `ca.crt`.
//!
//! The root is replaced only when it no longer outlives the CA's current certificate (every
//! other CA generation, by default a decade); that one change needs each site's admin to
//! apply its token again, as a token of a new grant would.

use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use qdr_certs::pki::{CertInfo, cross_sign, new_root, split_bundle};

use super::inspect::{ca_pair, is_signed_by, key_of};
use super::secrets::{Data, text};
use super::work::{CredentialsError, Work};

/// Secret key of the root's certificate in a rooted CA Secret.
pub const ROOT_CRT: &str = "root.crt";
/// Secret key of the root's private key.
pub(crate) const ROOT_KEY: &str = "root.key";
/// Secret key of the CA's current certificate cross-signed by the root.
pub(crate) const CROSS_CRT: &str = "cross.crt";
/// How long a root lives: ten years, two default CA lifetimes.
pub const ROOT_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Gives CA Secret `name` (its data as this pass left it) a root and a `cross.crt` of its
/// current `tls.crt`, when either is missing or stale. Nothing when the Secret holds no
/// usable CA pair: [`super::rotate`] mends that first.
///
/// # Errors
/// [`CredentialsError::Certificate`] when making the root or signing fails.
pub(super) fn root_step(w: &mut Work<'_>, name: &str, now: SystemTime) -> Result<(), CredentialsError> {
    let Some(d) = w.get(name).cloned() else { return Ok(()) };
    let Ok(Some(ca)) = ca_pair(&d, "tls.crt", "tls.key", now) else { return Ok(()) };
    let ca_info = CertInfo::parse(&ca.cert_pem)?;
    let mut out = d.clone();
    let root = match ca_pair(&d, ROOT_CRT, ROOT_KEY, now) {
        Ok(Some(r)) if CertInfo::parse(&r.cert_pem).is_ok_and(|i| i.not_after >= ca_info.not_after) => r,
        _ => {
            let r = new_root(&format!("{name}-root"), now, ROOT_LIFETIME.max(ca_lifetime(&ca_info) * 2))?;
            out.insert(ROOT_CRT.into(), ByteString(r.cert_pem.clone().into_bytes()));
            out.insert(ROOT_KEY.into(), ByteString(r.key_pem.clone().into_bytes()));
            r
        }
    };
    let current = text(&out, CROSS_CRT).is_some_and(|x| {
        is_signed_by(&x, &root.cert_pem)
            && key_of(&x, &ca.key_pem).is_ok()
            && CertInfo::parse(&x).is_ok_and(|i| i.subject_cn == ca_info.subject_cn)
    });
    if !current {
        out.insert(CROSS_CRT.into(), ByteString(cross_sign(&ca, &root)?.into_bytes()));
    }
    if out != d {
        let step = w.step_of(name);
        w.write(name, out, step);
    }
    Ok(())
}

fn ca_lifetime(i: &CertInfo) -> Duration {
    i.not_after.duration_since(i.not_before).unwrap_or_default()
}

/// The chain a router certificate `cert` (PEM, its first certificate the leaf) is served
/// with, given its signer's Secret data: the leaf, then the signer's `cross.crt` when the
/// signer is rooted and that certificate's key signed the leaf; else the leaf alone.
/// Normalized PEM, so it compares equal to what was written.
pub(super) fn chain(signer: &Data, cert: &str) -> String {
    let leaf = split_bundle(cert).into_iter().next().unwrap_or_default();
    match text(signer, CROSS_CRT).filter(|x| is_signed_by(&leaf, x)) {
        Some(x) => format!("{leaf}{}", split_bundle(&x).concat()),
        None => leaf,
    }
}

/// The root certificate of a CA Secret's data, if it has one: what a token carries after
/// the bundle.
pub(crate) fn root_of(d: &Data) -> Option<String> {
    text(d, ROOT_CRT).filter(|r| !split_bundle(r).is_empty())
}
