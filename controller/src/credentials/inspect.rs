//! Reading the certificates and keys in a Secret's data: whether a certificate is signed by
//! a CA and a key belongs to a certificate (answers remembered), which pair of a CA Secret
//! signs, its trust bundle, and expiries. Pure reads: nothing here makes a key or a Secret.

use std::time::SystemTime;

use qdr_certs::pki::{CertInfo, CertKey, split_bundle};

use super::secrets::{Data, NEXT_CRT, text};
use crate::human;
use crate::keys::{key_matches, signed_by};

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
pub(super) fn ca_pair(d: &Data, crt: &str, key: &str, now: SystemTime) -> Result<Option<CertKey>, String> {
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
pub(super) fn signing_pair(d: &Data, now: SystemTime) -> Option<CertKey> {
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
pub(crate) fn bundle(d: &Data) -> Option<String> {
    text(d, "ca.crt").or_else(|| text(d, "tls.crt"))
}

/// The CA certificates of `pem` still valid at `now`, normalized.
pub(super) fn valid_cas(pem: &str, now: SystemTime) -> Vec<String> {
    split_bundle(pem)
        .into_iter()
        .filter(|c| CertInfo::parse(c).is_ok_and(|i| i.is_ca && i.not_after > now))
        .collect()
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
