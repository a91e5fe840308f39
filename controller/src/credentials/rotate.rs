//! One CA's step per pass: made when new, staged, promoted and retired when due (the
//! three-step rotation with overlap of the module docs), or recovered when lost. It
//! writes only the CA's own Secret; the leaves it signs follow in [`super::issue`].

use std::time::SystemTime;

use k8s_openapi::ByteString;
use qdr_certs::pki::{CertInfo, CertKey, new_ca, split_bundle};

use super::change::CredentialChange;
use super::inspect::{bundle, ca_pair, is_signed_by, valid_cas};
use super::lifetimes::{Lifetimes, RENEW_FRACTION};
use super::secrets::{Data, NEXT_CRT, NEXT_KEY, data, step_at, text};
use super::work::{CredentialsError, Leaf, Routers, Work};

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

pub(super) fn ca_step(
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
