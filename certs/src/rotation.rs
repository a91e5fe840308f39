//! The rotation state machine: pure, one step at a time.
//!
//! The Secret holds the *material*: the active CA (signs the serving certificate), an
//! optional staged next CA, the trust bundle (what the webhook configurations' `caBundle`
//! carries), the serving certificate and when the active CA was promoted. [`plan`] looks
//! at the material, the time and whether the live `caBundle` already trusts the staged CA,
//! and returns the single next step with the material it produces:
//!
//! 1. **Create**: no usable CA: make one and a serving certificate; the bundle keeps every
//!    still-valid CA it had, so replicas serving an older chain are not cut off.
//! 2. **Stage** (trust): the active CA reached its renew point: make the next CA and add it
//!    to the bundle. Nothing is served from it yet.
//! 3. **Promote** (serve): the staged CA is in the live `caBundle` of every webhook
//!    configuration and has soaked for [`Policy::soak`]: it becomes active and signs a new
//!    serving certificate. The old CA stays in the bundle.
//! 4. **Retire**: [`Policy::retire_grace`] after a promotion, every replica has had time to
//!    load the new serving certificate: CAs other than the active and staged ones leave the
//!    bundle.
//! 5. **Renew**: the serving certificate is missing, not from the active CA, for other
//!    names, or past its renew point: issue a new one.
//!
//! Each step is written with optimistic concurrency, so any replica may drive it; a replica
//! that loses the race re-reads and plans again.

use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::pki::{CertInfo, CertKey, new_ca, new_leaf, split_bundle};

/// Default CA lifetime: one year.
pub const CA_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// Default serving-certificate lifetime: 90 days.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// Fraction of a lifetime after which a certificate is replaced.
pub const RENEW_FRACTION: f64 = 2.0 / 3.0;
/// Default time a staged CA must have been trusted before it signs anything.
pub const SOAK: Duration = Duration::from_secs(10);
/// Default time after a promotion before the old CA leaves the bundle.
pub const RETIRE_GRACE: Duration = Duration::from_secs(60);

/// Lifetimes and timing of rotation. [`Policy::new`] gives the production defaults; tests
/// shorten them to seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Common-name prefix of generated CAs.
    pub ca_name: String,
    /// Names (DNS or IP) the serving certificate must carry, in order.
    pub sans: Vec<String>,
    /// CA lifetime.
    pub ca_lifetime: Duration,
    /// Serving-certificate lifetime.
    pub leaf_lifetime: Duration,
    /// Fraction of a lifetime at which to renew ([`RENEW_FRACTION`]).
    pub renew_fraction: f64,
    /// How long a staged CA soaks in the trusted bundle before promotion.
    pub soak: Duration,
    /// How long after a promotion the old CA stays trusted.
    pub retire_grace: Duration,
}

impl Policy {
    /// Production defaults for a serving certificate with these names.
    pub fn new(ca_name: impl Into<String>, sans: Vec<String>) -> Self {
        Policy {
            ca_name: ca_name.into(),
            sans,
            ca_lifetime: CA_LIFETIME,
            leaf_lifetime: LEAF_LIFETIME,
            renew_fraction: RENEW_FRACTION,
            soak: SOAK,
            retire_grace: RETIRE_GRACE,
        }
    }
}

/// Everything the Secret stores.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Material {
    /// The CA that signs the serving certificate.
    pub ca: Option<CertKey>,
    /// A CA that is trusted but does not sign yet.
    pub next_ca: Option<CertKey>,
    /// Trusted CA certificates, one PEM each, in order.
    pub bundle: Vec<String>,
    /// The serving certificate.
    pub leaf: Option<CertKey>,
    /// When `ca` became active (absent for the first CA).
    pub promoted_at: Option<SystemTime>,
}

impl Material {
    /// The trust bundle as one PEM text (the `caBundle` value).
    pub fn bundle_pem(&self) -> String {
        self.bundle.concat()
    }
}

/// The step [`plan`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// New CA and serving certificate.
    Create,
    /// New CA added to the bundle, not yet signing.
    Stage,
    /// Staged CA now signs the serving certificate.
    Promote,
    /// Old CAs removed from the bundle.
    Retire,
    /// New serving certificate from the active CA.
    Renew,
    /// The Secret was deleted while a replica served from it: that replica wrote the same
    /// CAs and certificate back (not chosen by [`plan`]; nothing rotates, so the `caBundle`
    /// the API server holds stays right and no admission request fails).
    Restore,
}

fn usable(ck: &Option<CertKey>, now: SystemTime) -> Option<CertInfo> {
    let info = CertInfo::parse(&ck.as_ref()?.cert_pem).ok()?;
    (info.not_after > now).then_some(info)
}

/// The next step for `m` at `now`, or `None` when nothing is due. `trusted_live(pem)` says
/// whether the CA certificate `pem` is in the live `caBundle` of every webhook
/// configuration.
///
/// # Errors
/// [`Error::Certificate`] if a certificate cannot be made.
pub fn plan(
    m: &Material,
    now: SystemTime,
    policy: &Policy,
    trusted_live: &dyn Fn(&str) -> bool,
) -> Result<Option<(Step, Material)>, Error> {
    let Some(ca_info) = usable(&m.ca, now) else {
        let ca = new_ca(&policy.ca_name, now, policy.ca_lifetime)?;
        let leaf = new_leaf(&ca, &policy.sans, now, policy.leaf_lifetime)?;
        let mut bundle: Vec<String> = m
            .bundle
            .iter()
            .filter(|pem| CertInfo::parse(pem).is_ok_and(|i| i.not_after > now))
            .cloned()
            .collect();
        bundle.push(ca.cert_pem.clone());
        return Ok(Some((
            Step::Create,
            Material { ca: Some(ca), next_ca: None, bundle, leaf: Some(leaf), promoted_at: Some(now) },
        )));
    };

    if let (Some(next), Some(next_info)) = (&m.next_ca, usable(&m.next_ca, now))
        && now >= next_info.not_before + backdate(policy.ca_lifetime) + policy.soak
        && trusted_live(&next.cert_pem)
    {
        let leaf = new_leaf(next, &policy.sans, now, policy.leaf_lifetime)?;
        let mut bundle = m.bundle.clone();
        if !bundle.contains(&next.cert_pem) {
            bundle.push(next.cert_pem.clone());
        }
        return Ok(Some((
            Step::Promote,
            Material {
                ca: Some(next.clone()),
                next_ca: None,
                bundle,
                leaf: Some(leaf),
                promoted_at: Some(now),
            },
        )));
    }

    let keep = |pem: &String| {
        Some(pem) == m.ca.as_ref().map(|c| &c.cert_pem)
            || Some(pem) == m.next_ca.as_ref().map(|c| &c.cert_pem)
    };
    let grace_over = m.promoted_at.is_none_or(|t| now >= t + policy.retire_grace);
    if grace_over && m.bundle.iter().any(|pem| !keep(pem)) {
        let mut out = m.clone();
        out.bundle.retain(keep);
        return Ok(Some((Step::Retire, out)));
    }

    let ca = m.ca.as_ref().expect("usable() checked ca");
    if m.next_ca.is_none() && now >= ca_info.point(policy.renew_fraction) {
        let next = new_ca(&policy.ca_name, now, policy.ca_lifetime)?;
        let mut out = m.clone();
        out.bundle.push(next.cert_pem.clone());
        out.next_ca = Some(next);
        return Ok(Some((Step::Stage, out)));
    }

    let leaf_ok = usable(&m.leaf, now).is_some_and(|l| {
        l.issuer_cn == ca_info.subject_cn && l.sans == policy.sans && now < l.point(policy.renew_fraction)
    }) && m.bundle.contains(&ca.cert_pem);
    if !leaf_ok {
        let mut out = m.clone();
        out.leaf = Some(new_leaf(ca, &policy.sans, now, policy.leaf_lifetime)?);
        if !out.bundle.contains(&ca.cert_pem) {
            out.bundle.push(ca.cert_pem.clone());
        }
        return Ok(Some((Step::Renew, out)));
    }
    Ok(None)
}

/// The backdate [`crate::pki`] applies to a certificate of this lifetime; the soak is
/// measured from the real creation time, not the backdated `notBefore`.
fn backdate(lifetime: Duration) -> Duration {
    (lifetime / 10).min(Duration::from_secs(300))
}

/// Parses a bundle text into one PEM per certificate (see [`split_bundle`]).
pub fn parse_bundle(pem: &str) -> Vec<String> {
    split_bundle(pem)
}
