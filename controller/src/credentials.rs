//! TLS credentials for sslProfiles, issued and kept current by the operator with
//! [`qdr_certs::pki`] (where the Go operator asked cert-manager and never renewed anything).
//!
//! What is generated:
//! * the Interconnect's CA, Secret `<name>-ca` (or the Secret named by
//!   `deploymentPlan.issuer`, which is used and never written);
//! * for a profile with `generateCaCert`: its own CA in Secret `caCert`;
//! * for a profile with `generateCredentials`: a certificate in Secret `credentials`, signed
//!   by the profile's CA when `mutualAuth`, else by the Interconnect's CA, for the Service's
//!   names (`<name>`, `<name>.<ns>`, `<name>.<ns>.svc`, `<name>.<ns>.svc.cluster.local`; no
//!   name with an empty domain, unlike the Go operator), with the signer's trust bundle as
//!   `ca.crt`.
//!
//! Generated Secrets carry [`GENERATED_LABEL`] and a controller owner reference to the
//! Interconnect; only those are ever rewritten. A Secret the spec names that exists without
//! them is user-provided: read and mounted, never written, renewed or deleted.
//!
//! ## Lifecycle ([`plan`], pure, at most one CA step per CA and pass)
//! * **Renew**: a generated certificate past [`RENEW_FRACTION`] of its lifetime, not signed
//!   by its signer's key (checked by signature, so a CA re-keyed under the same name counts
//!   as a new signer), not a certificate, or whose key does not match, is re-issued (new key).
//! * **CA rotation with overlap**, for a generated CA past [`RENEW_FRACTION`] of its life:
//!   1. *stage*: a next CA is made (`next.crt`/`next.key`) and added to the trust bundle
//!      (`ca.crt` = active + next); every leaf gets the new bundle as its `ca.crt`;
//!   2. *promote*, once every leaf carries that bundle, the routers run it (rolled out) and
//!      [`Lifetimes::overlap`] has passed since the stage: the next CA becomes active; leaves
//!      are re-signed by it (still trusting both);
//!   3. *retire*, once every leaf is signed by the active CA, rolled out, and the overlap has
//!      passed since the promotion: the old CA leaves the bundle, and the leaves' `ca.crt`
//!      follow.
//!
//!   The time of the last step is the Secret's [`STEP_AT`] annotation; each step is a
//!   [`CredentialChange`] that gives the earliest date of the next, for the owners of
//!   clients outside the Interconnect that trust the bundle or hold certificates of the CA.
//! * **A lost CA** (its Secret deleted, `tls.key` removed or not matching `tls.crt`, `tls.crt`
//!   not a CA certificate) whose certificate is still valid in the leaves' `ca.crt` (or its
//!   own): the same three steps, starting from a stage that keeps the old certificate trusted
//!   (the new pair is staged as both `tls.*` and `next.*`, and signs nothing until the
//!   promotion). With nothing left to keep trusted (an expired CA, nothing issued yet) a new
//!   CA replaces it at once.
//!
//! A router never has to accept a peer certificate from a CA it does not trust yet: a new
//! CA is trusted everywhere before it signs, and the old one is trusted until nothing it
//! signed is served.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::keys::{key_matches, signed_by};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use qdr_certs::pki::{CertInfo, CertKey, new_ca, new_leaf, split_bundle};

use crate::human;
use crate::validated::ValidatedInterconnect;

/// Default lifetime of generated CAs (flag `--router-ca-lifetime`).
pub const CA_LIFETIME: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// Default lifetime of generated router certificates (flag `--router-cert-lifetime`).
pub const CERT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// Fraction of a lifetime after which a generated certificate or CA is replaced.
pub(crate) const RENEW_FRACTION: f64 = 2.0 / 3.0;
/// The default [`Lifetimes::overlap`] is the CA lifetime divided by this: 10, so 182.5 days
/// for the default 5 years. Both waits of a rotation (stage → promote → retire) then take a
/// fifth of the lifetime, inside the third that is left after the stage at
/// [`RENEW_FRACTION`], leaving the last 2/15 (8 months by default) for slow rollouts.
pub const OVERLAP_DIVISOR: u32 = 10;
/// A user-provided certificate expiring within this raises a Warning Event.
pub(crate) const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

/// Secret key of a staged (trusted, not yet signing) CA certificate.
pub(crate) const NEXT_CRT: &str = "next.crt";
/// Secret key of the staged CA's private key.
pub(crate) const NEXT_KEY: &str = "next.key";
/// Annotation of a generated CA Secret in the middle of a rotation: when its last step
/// (stage or promote) was taken, RFC 3339. The next step waits [`Lifetimes::overlap`] from it.
pub const STEP_AT: &str = "qdr-operator.io/ca-rotation-step-at";

/// Lifetimes of what the operator generates, and the grace period of CA rotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// CA lifetime (`--router-ca-lifetime`).
    pub ca: Duration,
    /// Router certificate lifetime (`--router-cert-lifetime`).
    pub cert: Duration,
    /// Least time between a CA's stage and its promotion, and between the promotion and the
    /// retirement of the old CA (`--router-ca-overlap`), on top of the rollout gates.
    pub overlap: Duration,
}

impl Lifetimes {
    /// `ca` and `cert` with the default overlap (`ca` / [`OVERLAP_DIVISOR`]).
    pub fn new(ca: Duration, cert: Duration) -> Self {
        Lifetimes { ca, cert, overlap: ca / OVERLAP_DIVISOR }
    }

    /// Checks that both waits of a rotation fit in what is left of the old CA's life after
    /// the stage (`2 × overlap < (1 − RENEW_FRACTION) × ca`).
    ///
    /// # Errors
    /// A sentence naming the flags and the largest overlap that fits.
    pub fn check(&self) -> Result<(), String> {
        let left = self.ca.mul_f64(1.0 - RENEW_FRACTION);
        if self.overlap * 2 >= left {
            return Err(format!(
                "--router-ca-overlap={} is too long for --router-ca-lifetime={}: a rotation starts at 2/3 of \
                 the CA's lifetime and waits the overlap twice, so it must be less than {}",
                humantime::format_duration(self.overlap),
                humantime::format_duration(self.ca),
                humantime::format_duration(Duration::from_secs((left / 2).as_secs()))
            ));
        }
        Ok(())
    }
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes::new(CA_LIFETIME, CERT_LIFETIME)
    }
}

/// Why credentials could not be issued.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CredentialsError {
    /// Certificate generation failed.
    #[error(transparent)]
    Certificate(#[from] qdr_certs::Error),
}

/// Secret data.
pub(crate) type Data = BTreeMap<String, ByteString>;

/// The existing Secrets the spec names, by name (what the caller read from the namespace).
pub(crate) type Existing = BTreeMap<String, Secret>;

/// Label on every Secret the controller generated (CA or certificate), so that they can be
/// told from user-provided ones.
pub(crate) const GENERATED_LABEL: &str = "qdr-operator.io/credentials";

/// Whether `s` carries [`GENERATED_LABEL`] (generated by some Interconnect).
pub(crate) fn is_generated(s: &Secret) -> bool {
    s.metadata.labels.as_ref().is_some_and(|l| l.contains_key(GENERATED_LABEL))
}

/// Whether `s` was generated by the controller for `o` (labelled and controlled by it):
/// only such Secrets are rewritten.
pub(crate) fn is_generated_by(s: &Secret, o: &ValidatedInterconnect) -> bool {
    is_generated(s)
        && s.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == o.uid() && r.controller == Some(true))
}

/// A text value of Secret data.
pub(crate) fn text(d: &Data, key: &str) -> Option<String> {
    d.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// Answers of [`signed_by`] and [`key_matches`] by a keyed hash of their arguments: every
/// pass over every Interconnect asks them again for the same certificates, and each answer
/// costs a signature check or a key load (tens of microseconds). The hash is SipHash with a
/// per-process random key, so no one can aim a collision at it; the memo is emptied when it
/// holds [`VERDICTS_MAX`] answers.
struct Verdicts {
    state: std::hash::RandomState,
    seen: std::sync::Mutex<std::collections::HashMap<u64, bool>>,
}

/// Most answers [`Verdicts`] keeps (16 bytes each, 2 per certificate and pass).
const VERDICTS_MAX: usize = 65_536;

fn verdict(kind: &str, a: &str, b: &str, answer: impl FnOnce() -> bool) -> bool {
    use std::hash::BuildHasher;
    static VERDICTS: std::sync::OnceLock<Verdicts> = std::sync::OnceLock::new();
    let v =
        VERDICTS.get_or_init(|| Verdicts { state: std::hash::RandomState::new(), seen: Default::default() });
    let key = v.state.hash_one((kind, a, b));
    if let Some(known) = v.seen.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return *known;
    }
    let known = answer();
    let mut seen = v.seen.lock().unwrap_or_else(|e| e.into_inner());
    if seen.len() >= VERDICTS_MAX {
        seen.clear();
    }
    seen.insert(key, known);
    known
}

/// Whether `cert_pem` is signed by the key of `issuer_pem` ([`crate::keys::signed_by`]),
/// remembered.
pub(crate) fn is_signed_by(cert_pem: &str, issuer_pem: &str) -> bool {
    verdict("signed", cert_pem, issuer_pem, || signed_by(cert_pem, issuer_pem))
}

/// Whether `key_pem` is the key of `cert_pem` ([`crate::keys::key_matches`]), remembered;
/// `Err` with what is wrong (not remembered).
pub(crate) fn key_of(cert_pem: &str, key_pem: &str) -> Result<(), String> {
    if verdict("key", cert_pem, key_pem, || key_matches(cert_pem, key_pem).is_ok()) {
        return Ok(());
    }
    key_matches(cert_pem, key_pem)
}

/// The CA pair under `crt`/`key` when it can sign at `now`: a CA certificate, not expired,
/// with its own key. `Err` says what is wrong with it; `Ok(None)`: the keys are absent.
fn ca_pair(d: &Data, crt: &str, key: &str, now: SystemTime) -> Result<Option<CertKey>, String> {
    let (cert_pem, key_pem) = match (text(d, crt), text(d, key)) {
        (None, None) => return Ok(None),
        (None, Some(_)) => return Err(format!("it has no {crt}")),
        (Some(_), None) => return Err(format!("it has no {key}")),
        (Some(c), Some(k)) => (c, k),
    };
    let info = CertInfo::parse(&cert_pem).map_err(|_| format!("its {crt} is not a certificate"))?;
    if !info.is_ca {
        return Err(format!("its {crt} is not a CA certificate"));
    }
    if info.not_after <= now {
        return Err(format!("its CA expired at {}", human::date(info.not_after)));
    }
    key_of(&cert_pem, &key_pem).map_err(|_| format!("its {key} does not belong to {crt}"))?;
    Ok(Some(CertKey { cert_pem, key_pem }))
}

/// The pair of a CA Secret that signs at `now`: its `tls.crt` and `tls.key`, unless they are
/// also the staged pair (`next.crt`: a lost CA's replacement, trusted but not signing until
/// its promotion).
fn signing_pair(d: &Data, now: SystemTime) -> Option<CertKey> {
    ca_pair(d, "tls.crt", "tls.key", now)
        .ok()
        .flatten()
        .filter(|p| text(d, NEXT_CRT).as_ref() != Some(&p.cert_pem))
}

/// What a generated CA Secret's data (`d`) gives a client of the routers at `now`: the pair
/// that signs (none while a lost CA's replacement waits for its promotion) and the trust
/// bundle (every CA a router's certificate may be signed by). The controller's reader of
/// the routers' management ([`crate::mesh::management`]) signs its client certificate with
/// the one and verifies the routers with the other.
pub(crate) fn signer_and_trust(d: &Data, now: SystemTime) -> Option<(CertKey, String)> {
    Some((signing_pair(d, now)?, bundle(d)?))
}

/// The trust bundle of a CA Secret: its `ca.crt`, else its `tls.crt`.
fn bundle(d: &Data) -> Option<String> {
    text(d, "ca.crt").or_else(|| text(d, "tls.crt"))
}

/// The CA certificates of `pem` still valid at `now`, normalized.
fn valid_cas(pem: &str, now: SystemTime) -> Vec<String> {
    split_bundle(pem)
        .into_iter()
        .filter(|c| CertInfo::parse(c).is_ok_and(|i| i.is_ca && i.not_after > now))
        .collect()
}

fn data(entries: &[(&str, &str)]) -> Data {
    entries.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()
}

fn secret(o: &ValidatedInterconnect, name: &str, d: Data, step_at: Option<SystemTime>) -> Secret {
    let new =
        Secret { metadata: o.meta(name), type_: Some("kubernetes.io/tls".into()), ..Default::default() };
    rewritten(o, &new, d, step_at)
}

/// The generated Secret `old` (or one about to be created: [`secret`]) with data `d`, this
/// Interconnect's labels and [`GENERATED_LABEL`], and the [`STEP_AT`] annotation of `step_at`
/// (removed when `None`), for a `PUT` with `old`'s `resourceVersion` as precondition. The
/// rest of `old`'s metadata is kept as it is; only this Interconnect's labels are put back
/// if someone removed them. `old` is the store's copy, which holds only what a pass decides
/// from: the labels, annotations and finalizers others added (a backup tool, a policy
/// engine) are taken from the Secret as read just before the `PUT`
/// (`crate::reconcile::apply::secrets::keeping_others`), so they survive renewals.
fn rewritten(o: &ValidatedInterconnect, old: &Secret, d: Data, step_at: Option<SystemTime>) -> Secret {
    let mut s = old.clone();
    s.metadata.managed_fields = None;
    s.data = Some(d);
    s.string_data = None;
    let labels = s.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(o.labels());
    labels.insert(GENERATED_LABEL.into(), "true".into());
    match step_at {
        Some(t) => {
            s.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(STEP_AT.into(), timestamp(t));
        }
        None => {
            if let Some(a) = s.metadata.annotations.as_mut() {
                a.remove(STEP_AT);
            }
        }
    }
    s
}

/// RFC 3339 with the fraction of a second (tests use overlaps of seconds).
fn timestamp(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default()
}

/// The [`STEP_AT`] annotation of `s`, if it parses.
fn step_at(s: &Secret) -> Option<SystemTime> {
    let v = s.metadata.annotations.as_ref()?.get(STEP_AT)?;
    v.parse::<k8s_openapi::jiff::Timestamp>().ok().map(SystemTime::from)
}

/// The DNS names of router certificates.
pub(crate) fn dns_names(o: &ValidatedInterconnect) -> Vec<String> {
    let (n, ns) = (o.name(), o.namespace());
    vec![n.to_string(), format!("{n}.{ns}"), format!("{n}.{ns}.svc"), format!("{n}.{ns}.svc.cluster.local")]
}

/// A change to generated credentials, for an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CredentialChange {
    /// A certificate was re-issued; `until` was the old one's expiry.
    Renewed {
        /// The Secret.
        secret: String,
        /// Why: `renew point reached`, `signer's key changed`, `names changed`, ...
        why: &'static str,
        /// Expiry of the replaced certificate, if it parsed.
        until: Option<SystemTime>,
    },
    /// Step 1: a next CA was staged in the trust bundle.
    CaStaged {
        /// The CA Secret.
        secret: String,
        /// The earliest moment of the promotion.
        promote_after: SystemTime,
        /// Why the active CA was lost, when this stage recovers it.
        lost: Option<String>,
    },
    /// Step 2: the staged CA became the signing CA.
    CaPromoted {
        /// The CA Secret.
        secret: String,
        /// The earliest moment the old CA leaves the bundle.
        retire_after: SystemTime,
    },
    /// Step 3: old CAs left the trust bundle.
    CaRetired(String),
    /// A lost CA with nothing left to keep trusted (its Secret and every leaf it signed gone,
    /// or all expired) was replaced at once (Warning): the running routers still mount the
    /// old CA, so old and new routers refuse each other until the rollout completes (the
    /// note says so).
    CaReplaced {
        /// The CA Secret.
        secret: String,
        /// What was wrong with it.
        why: String,
    },
    /// The users Secret was missing while routers ran: new passwords were generated
    /// (Warning).
    PasswordsChanged(String),
}

impl CredentialChange {
    /// The Secret that changed.
    pub(crate) fn secret(&self) -> &str {
        match self {
            CredentialChange::Renewed { secret, .. }
            | CredentialChange::CaStaged { secret, .. }
            | CredentialChange::CaPromoted { secret, .. }
            | CredentialChange::CaReplaced { secret, .. } => secret,
            CredentialChange::CaRetired(secret) | CredentialChange::PasswordsChanged(secret) => secret,
        }
    }
}

impl std::fmt::Display for CredentialChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialChange::Renewed { secret, why, until } => {
                write!(f, "renewed the certificate in Secret {secret} ({why}")?;
                match until {
                    Some(t) => write!(f, "; it was valid until {})", human::date(*t)),
                    None => write!(f, ")"),
                }
            }
            CredentialChange::CaStaged { secret, promote_after, lost } => {
                if let Some(why) = lost {
                    write!(
                        f,
                        "CA rotation 1/3: the CA in Secret {secret} was lost ({why}); the certificates it signed stay \
                         trusted and "
                    )?;
                } else {
                    write!(f, "CA rotation 1/3: ")?;
                }
                write!(
                    f,
                    "a new CA is staged in Secret {secret}: ca.crt now holds the old and the new CA. Clients that \
                     verify these routers must trust the new ca.crt before {}: from then on (once every router runs \
                     it) the new CA signs the routers' certificates",
                    human::date(*promote_after)
                )
            }
            CredentialChange::CaPromoted { secret, retire_after } => write!(
                f,
                "CA rotation 2/3: the new CA in Secret {secret} now signs; the old CA stays trusted until at least \
                 {}. Client certificates signed by the old CA must be re-issued from the new one (tls.crt, \
                 tls.key of the Secret) before then",
                human::date(*retire_after)
            ),
            CredentialChange::CaRetired(s) => write!(
                f,
                "CA rotation 3/3: the old CA left the trust bundle of Secret {s}; only the new CA is trusted"
            ),
            CredentialChange::CaReplaced { secret, why } => write!(
                f,
                "the CA in Secret {secret} was replaced at once ({why}): nothing it signed was left to keep trusted, \
                 so every certificate it signed is re-issued by the new CA and the routers roll. Until that rollout \
                 completes, routers started before it trust only the old CA and routers started after it only the \
                 new one: links between an old and a new router are refused, and clients must trust the new \
                 ca.crt to reach the new routers"
            ),
            CredentialChange::PasswordsChanged(s) => write!(
                f,
                "Secret {s} (spec.users) was missing, so new passwords were generated for its users and the \
                 routers roll onto them: clients must use the passwords now in the Secret"
            ),
        }
    }
}

/// What [`plan`] decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Plan {
    /// Secrets to create (they are missing).
    pub create: Vec<Secret>,
    /// Generated Secrets to rewrite (renewal, rotation); each carries the observed
    /// `resourceVersion`, so a concurrent writer makes the write fail instead of being lost.
    pub update: Vec<Secret>,
    /// What changed, for Events.
    pub changes: Vec<CredentialChange>,
    /// The next moment something generated is due (a renew point, the end of an overlap),
    /// for the requeue.
    pub next_renewal: Option<SystemTime>,
}

/// Working state: effective data by name, and which Secrets were written this pass.
struct Work<'a> {
    o: &'a ValidatedInterconnect,
    existing: &'a Existing,
    data: BTreeMap<String, Data>,
    plan: Plan,
}

impl Work<'_> {
    fn get(&self, name: &str) -> Option<&Data> {
        self.data.get(name)
    }

    /// Whether `name` may be written: missing, or generated by this Interconnect.
    fn ours(&self, name: &str) -> bool {
        self.existing.get(name).is_none_or(|s| is_generated_by(s, self.o))
    }

    fn write(&mut self, name: &str, d: Data, step_at: Option<SystemTime>) {
        self.data.insert(name.to_string(), d.clone());
        match self.existing.get(name) {
            None => {
                self.plan.create.retain(|c| c.metadata.name.as_deref() != Some(name));
                self.plan.create.push(secret(self.o, name, d, step_at));
            }
            Some(old) => {
                self.plan.update.retain(|c| c.metadata.name.as_deref() != Some(name));
                self.plan.update.push(rewritten(self.o, old, d, step_at));
            }
        }
    }

    fn due(&mut self, at: SystemTime) {
        self.plan.next_renewal = Some(self.plan.next_renewal.map_or(at, |t| t.min(at)));
    }
}

/// A generated leaf: its Secret and the Secret of its signer.
struct Leaf {
    secret: String,
    signer: String,
}

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

/// Whether routers of the Interconnect run this configuration, and on what credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routers {
    /// No router runs this configuration: none runs yet, or they run another one (a profile
    /// was added, say). Whether a missing CA existed before cannot be told, so it is made as
    /// new, silently.
    Unknown,
    /// Routers run, not (all) on the credentials observed now: a CA step other than a
    /// stage waits.
    Rolling,
    /// Routers run the credentials observed now (the workload's rollout is complete with
    /// the current credentials fingerprint): CA promotion and retirement may proceed.
    RolledOut,
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
    for leaf in &leaves {
        leaf_step(&mut w, leaf, now, lifetimes)?;
    }
    Ok(w.plan)
}

/// One CA's state, read from its Secret.
struct CaState {
    data: Data,
    /// The signing pair, or what is wrong with it (`Ok(None)`: the Secret is missing).
    active: Result<Option<CertKey>, String>,
    /// The staged pair (a broken one counts as none and is made again).
    next: Option<CertKey>,
    /// The trust bundle.
    trust: String,
    /// When the last rotation step was taken.
    since: Option<SystemTime>,
}

fn ca_state(w: &Work<'_>, name: &str, now: SystemTime) -> CaState {
    let data = w.get(name).cloned().unwrap_or_default();
    let exists = w.existing.contains_key(name);
    let active = match ca_pair(&data, "tls.crt", "tls.key", now) {
        Ok(None) if exists => Err("it has no tls.crt and tls.key".to_string()),
        other => other,
    };
    let next = ca_pair(&data, NEXT_CRT, NEXT_KEY, now).ok().flatten();
    let trust = bundle(&data).unwrap_or_default();
    let since = w.existing.get(name).and_then(step_at);
    CaState { data, active, next, trust, since }
}

fn ca_step(
    w: &mut Work<'_>,
    name: &str,
    leaves: &[&Leaf],
    now: SystemTime,
    lifetimes: Lifetimes,
    routers: Routers,
) -> Result<(), CredentialsError> {
    let rolled_out = routers == Routers::RolledOut;
    let st = ca_state(w, name, now);
    let leaf_data: Vec<Option<Data>> = leaves.iter().map(|l| w.get(&l.secret).cloned()).collect();
    // Every leaf that exists carries the bundle (a missing one is issued with it).
    let distributed = leaf_data.iter().flatten().all(|d| text(d, "ca.crt").as_deref() == Some(&st.trust));
    // The overlap since the last step has passed (a Secret from before the annotation
    // counts from the certificate that step introduced).
    let waited = |w: &mut Work<'_>, from: Option<SystemTime>| {
        let open = from.map(|t| t + lifetimes.overlap);
        match open {
            Some(t) if now < t => {
                w.due(t);
                false
            }
            _ => true,
        }
    };
    if let Some(next) = st.next.clone() {
        // Staged: promote.
        let from = st.since.or_else(|| CertInfo::parse(&next.cert_pem).ok().map(|i| i.not_before));
        if distributed && rolled_out && waited(w, from) {
            let mut d = st.data.clone();
            d.remove(NEXT_CRT);
            d.remove(NEXT_KEY);
            d.insert("tls.crt".into(), ByteString(next.cert_pem.into_bytes()));
            d.insert("tls.key".into(), ByteString(next.key_pem.into_bytes()));
            w.write(name, d, Some(now));
            w.due(now + lifetimes.overlap);
            w.plan.changes.push(CredentialChange::CaPromoted {
                secret: name.into(),
                retire_after: now + lifetimes.overlap,
            });
        }
        return Ok(());
    }
    let active = match st.active.clone() {
        Ok(Some(a)) => a,
        // Lost, not new: leaves it signed exist, or routers run a configuration that mounts
        // leaves it signed.
        Ok(None)
            if leaf_data.iter().any(Option::is_some)
                || (routers != Routers::Unknown && !leaves.is_empty()) =>
        {
            return recover(w, name, &st, &leaf_data, "it does not exist".into(), now, lifetimes);
        }
        Ok(None) => {
            // New.
            let ca = new_ca(name, now, lifetimes.ca)?;
            w.write(
                name,
                data(&[("tls.crt", &ca.cert_pem), ("tls.key", &ca.key_pem), ("ca.crt", &ca.cert_pem)]),
                None,
            );
            w.due(CertInfo::parse(&ca.cert_pem)?.point(RENEW_FRACTION));
            return Ok(());
        }
        Err(why) => return recover(w, name, &st, &leaf_data, why, now, lifetimes),
    };
    let info = CertInfo::parse(&active.cert_pem)?;
    // Anything else in the bundle (an old CA, an expired one) leaves it once nothing it
    // signed is served and the overlap has passed.
    if split_bundle(&st.trust) != split_bundle(&active.cert_pem) {
        let all_signed = leaf_data.iter().all(|d| {
            d.as_ref().and_then(|d| text(d, "tls.crt")).is_some_and(|c| is_signed_by(&c, &active.cert_pem))
        });
        let from = st.since.or(Some(info.not_before));
        if all_signed && distributed && rolled_out && waited(w, from) {
            let mut d = st.data.clone();
            d.insert("ca.crt".into(), ByteString(active.cert_pem.clone().into_bytes()));
            w.write(name, d, None);
            w.plan.changes.push(CredentialChange::CaRetired(name.into()));
        }
        return Ok(());
    }
    let renew_at = info.point(RENEW_FRACTION);
    if now >= renew_at {
        let next = new_ca(name, now, lifetimes.ca)?;
        let mut d = st.data.clone();
        d.insert(NEXT_CRT.into(), ByteString(next.cert_pem.clone().into_bytes()));
        d.insert(NEXT_KEY.into(), ByteString(next.key_pem.into_bytes()));
        d.insert("ca.crt".into(), ByteString(format!("{}{}", active.cert_pem, next.cert_pem).into_bytes()));
        w.write(name, d, Some(now));
        w.due(now + lifetimes.overlap);
        w.plan.changes.push(CredentialChange::CaStaged {
            secret: name.into(),
            promote_after: now + lifetimes.overlap,
            lost: None,
        });
    } else {
        w.due(renew_at);
    }
    Ok(())
}

/// A CA Secret that cannot sign (`why`): the CAs still valid in its bundle and in its
/// leaves' `ca.crt` stay trusted beside a staged replacement, which is promoted and the old
/// ones retired like any rotation. With none left, a new CA replaces it at once.
fn recover(
    w: &mut Work<'_>,
    name: &str,
    st: &CaState,
    leaf_data: &[Option<Data>],
    why: String,
    now: SystemTime,
    lifetimes: Lifetimes,
) -> Result<(), CredentialsError> {
    let mut old: Vec<String> = Vec::new();
    let bundles =
        std::iter::once(st.trust.clone()).chain(leaf_data.iter().flatten().filter_map(|d| text(d, "ca.crt")));
    for b in bundles {
        for c in valid_cas(&b, now) {
            if !old.contains(&c) {
                old.push(c);
            }
        }
    }
    let why = format!("Secret {name}: {why}");
    let next = new_ca(name, now, lifetimes.ca)?;
    if old.is_empty() {
        w.write(
            name,
            data(&[("tls.crt", &next.cert_pem), ("tls.key", &next.key_pem), ("ca.crt", &next.cert_pem)]),
            None,
        );
        w.due(CertInfo::parse(&next.cert_pem)?.point(RENEW_FRACTION));
        w.plan.changes.push(CredentialChange::CaReplaced { secret: name.into(), why });
        return Ok(());
    }
    let trust = format!("{}{}", old.concat(), next.cert_pem);
    // A `kubernetes.io/tls` Secret must hold tls.crt and tls.key: the staged pair is both the
    // Secret's pair and `next.*`, which marks it as not signing yet ([`signing_pair`]) until
    // the promotion removes `next.*`.
    w.write(
        name,
        data(&[
            ("tls.crt", &next.cert_pem),
            ("tls.key", &next.key_pem),
            ("ca.crt", &trust),
            (NEXT_CRT, &next.cert_pem),
            (NEXT_KEY, &next.key_pem),
        ]),
        Some(now),
    );
    w.due(now + lifetimes.overlap);
    w.plan.changes.push(CredentialChange::CaStaged {
        secret: name.into(),
        promote_after: now + lifetimes.overlap,
        lost: Some(why),
    });
    Ok(())
}

fn leaf_step(
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
            } else if i.sans != sans {
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
        w.write(
            &leaf.secret,
            data(&[("tls.crt", &new.cert_pem), ("tls.key", &new.key_pem), ("ca.crt", &trust)]),
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
    if let Some(mut d) = current
        && text(&d, "ca.crt").as_deref() != Some(trust.as_str())
    {
        d.insert("ca.crt".into(), ByteString(trust.into_bytes()));
        w.write(&leaf.secret, d, None);
    }
    Ok(())
}

/// The expiry of the first certificate of `pem`.
pub(crate) fn not_after(pem: &str) -> Option<SystemTime> {
    CertInfo::parse(pem).ok().map(|i| i.not_after)
}

/// The earliest expiry among the certificates (`tls.crt`, and every CA in `ca.crt`) of
/// `secrets`.
pub(crate) fn earliest_expiry<'a>(secrets: impl IntoIterator<Item = &'a Data>) -> Option<SystemTime> {
    secrets
        .into_iter()
        .flat_map(|d| {
            let leaf = text(d, "tls.crt").and_then(|c| not_after(&c));
            let cas = text(d, "ca.crt").map(|b| split_bundle(&b)).unwrap_or_default();
            leaf.into_iter().chain(cas.iter().filter_map(|c| not_after(c)).collect::<Vec<_>>())
        })
        .min()
}
