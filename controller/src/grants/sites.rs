//! Each grant's own CA, the listener's trust of the live grants' CAs, and revocation: how a
//! deleted or ended [`AccessGrant`] cuts its site off while every other site stays linked.
//!
//! * **A CA per grant.** Secret `<grant>-site-ca` ([`site_ca_secret`]), controlled by the
//!   grant, holds a CA made for that grant alone; it signs the grant's site certificates
//!   and nothing else. Its certificate is in the grant's `status.siteCA`.
//! * **Trust.** Once an Interconnect has a grant, the sslProfile of each listener a grant
//!   links to (`offer_of`) trusts a file of the links Secret instead of its CA Secret's
//!   `ca.crt`: [`site_trust_key`](qdr_api::router_config::site_trust_key), the profile's
//!   own bundle followed by the CA of every live grant of that role ([`trusted`]). The links Secret is not in the credentials hash, so
//!   a grant added or gone changes that file and restarts nothing (qdrouterd 1.19 reads a
//!   listener's trust file at each TLS handshake). Switching the profile to that file is a
//!   change of its configuration: it rolls the routers once, at the Interconnect's first
//!   grant, and stays while the links Secret holds such a file (no roll back when the last
//!   grant goes).
//! * **Revocation**, in two passes:
//!   1. the grant is gone (deleted, or ended): its CA leaves the trust file, and every
//!      router pod gets the file's digest in its annotation [`SITES_TRUST`]. A change of a
//!      pod's metadata makes the kubelet sync the pod, which rewrites its Secret volumes at
//!      once rather than at its next periodic sync (a minute or more);
//!   2. once every running router pod carries that digest, [`REFRESH_PAUSE`] after it was
//!      written, each router pod that still holds a connection of a site no live grant
//!      names ([`revoked_holders`]: its certificate's subject carries
//!      [`SITE_ORGANIZATION`](qdr_api::links::token::SITE_ORGANIZATION)) is deleted. qdrouterd
//!      1.19 keeps an accepted connection whatever its trust becomes, and refuses to close an
//!      inter-router or edge connection through management (`403`), so the router holding
//!      it must stop; the others keep serving. The site's next handshake, with any router,
//!      fails.
//!
//!   The bound from the grant's deletion to the site's connection closed: one pass,
//!   [`REFRESH_PAUSE`], then the pod's stop (its preStop pause,
//!   [`crate::builders::PRE_STOP_PAUSE`]). Only connections the controller has read are
//!   found: a router with more than [`crate::mesh::MAX_DETAILED`] inter-router and edge
//!   connections may hide one until a later read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use qdr_api::LinkRole;
use qdr_api::links::AccessGrant;
use qdr_api::links::token::site_of_user;
use qdr_certs::pki::{CertInfo, CertKey, new_ca};
use sha2::Digest;

use super::{NotReady, ends, link_role, not_ready, site_identity};

/// Pod annotation: the digest of the sites' trust files the pod's routers should read now
/// (`<digest> <unix seconds when written>`). Writing it makes the kubelet refresh the pod's
/// Secret volumes at once; its time says when a router may be assumed to read the new files.
pub const SITES_TRUST: &str = "qdr-operator.io/sites-trust";
/// How long after a pod got the current [`SITES_TRUST`] its routers are taken to read the
/// new trust file: the kubelet's sync of an updated pod rewrites its Secret volumes in well
/// under a second; this leaves room on a loaded node.
pub const REFRESH_PAUSE: Duration = Duration::from_secs(3);
/// How long a grant's CA lives when the grant does not end: ten years.
pub const SITE_CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The name of grant `grant`'s CA Secret: `<grant>-site-ca`.
pub fn site_ca_secret(grant: &str) -> String {
    format!("{grant}-site-ca")
}

/// The CA in Secret `s` (`tls.crt`, `tls.key`), when it is a CA valid at `now` and until
/// `until` (the grant's end; `None`: it does not end, so a year ahead).
pub fn site_ca(s: Option<&Secret>, until: Option<SystemTime>, now: SystemTime) -> Option<CertKey> {
    let d = s?.data.as_ref()?;
    let text = |k: &str| d.get(k).and_then(|b| String::from_utf8(b.0.clone()).ok());
    let pair = CertKey { cert_pem: text("tls.crt")?, key_pem: text("tls.key")? };
    let info = CertInfo::parse(&pair.cert_pem).ok()?;
    let need = until.unwrap_or(now + super::SITE_CERT_LIFETIME).max(now);
    (info.is_ca && info.not_before <= now && info.not_after > need).then_some(pair)
}

/// A new CA Secret for grant `g` (controlled by it), valid until the grant ends plus a day,
/// or [`SITE_CA_LIFETIME`].
///
/// # Errors
/// [`NotReady`] `CACannotSign` when the CA cannot be made.
pub fn new_site_ca(g: &AccessGrant, now: SystemTime) -> Result<Secret, NotReady> {
    let lifetime = ends(g).map_or(SITE_CA_LIFETIME, |e| {
        e.duration_since(now).unwrap_or_default() + Duration::from_secs(24 * 3600)
    });
    let ca = new_ca("qdr-operator-site", now, lifetime)
        .map_err(|e| not_ready("CACannotSign", format!("making the grant's CA failed: {e}")))?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(site_ca_secret(&g.name_any())),
            namespace: g.metadata.namespace.clone(),
            owner_references: g.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(ca.cert_pem.into_bytes())),
            ("tls.key".to_string(), ByteString(ca.key_pem.into_bytes())),
        ])),
        ..Default::default()
    })
}

/// The CA of grant `g`: its Secret's, or a new one written now (created, never overwritten
/// while valid: a second controller that raced this one keeps the first CA). An unusable
/// CA (ended, or too short for the grant) is replaced, which re-issues the site's token.
///
/// # Errors
/// A [`kube::Error`] from the API server; `Ok(Err(NotReady))` when no CA can be made.
pub async fn ensure_site_ca(
    secrets: &Api<Secret>,
    g: &AccessGrant,
    now: SystemTime,
) -> Result<Result<CertKey, NotReady>, kube::Error> {
    let name = site_ca_secret(&g.name_any());
    let existing = secrets.get_opt(&name).await?;
    if let Some(ca) = site_ca(existing.as_ref(), ends(g), now) {
        return Ok(Ok(ca));
    }
    let fresh = match new_site_ca(g, now) {
        Ok(s) => s,
        Err(why) => return Ok(Err(why)),
    };
    let written = match existing {
        Some(old) => {
            let mut fresh = fresh;
            fresh.metadata.resource_version = old.metadata.resource_version;
            secrets.replace(&name, &PostParams::default(), &fresh).await
        }
        None => secrets.create(&PostParams::default(), &fresh).await,
    };
    let written = match written {
        Ok(s) => s,
        // Another writer won: its CA is the one.
        Err(kube::Error::Api(e)) if e.code == 409 => secrets.get(&name).await?,
        Err(e) => return Err(e),
    };
    Ok(site_ca(Some(&written), ends(g), now)
        .ok_or_else(|| not_ready("CACannotSign", "the grant's CA is unusable")))
}

/// Whether grant `g` lets its site in at `now`: not being deleted, not ended.
pub fn live(g: &AccessGrant, now: SystemTime) -> bool {
    g.metadata.deletion_timestamp.is_none() && ends(g).is_none_or(|e| e > now)
}

/// The CA certificates the listener of role `link` trusts besides its own bundle: the
/// `status.siteCA` of every live grant of that role among `grants` (one Interconnect's),
/// in the grants' name order.
pub fn trusted(grants: &[std::sync::Arc<AccessGrant>], link: LinkRole, now: SystemTime) -> Vec<String> {
    let mut out: Vec<(String, String)> = grants
        .iter()
        .filter(|g| live(g, now))
        .filter(|g| {
            link_role(g.spec.role.as_ref().unwrap_or(&qdr_api::links::GrantRole::InterRouter)) == link
        })
        .filter_map(|g| Some((g.name_any(), g.status.as_ref()?.site_ca.clone()?)))
        .filter(|(_, pem)| CertInfo::parse(pem).is_ok_and(|i| i.is_ca))
        .collect();
    out.sort();
    out.into_iter().map(|(_, pem)| pem).collect()
}

/// The trust file of a profile: its own bundle, then each grant's CA, each ending in a
/// newline.
pub fn trust_file(own: &str, sites: &[String]) -> String {
    let mut out = String::new();
    for pem in std::iter::once(own).chain(sites.iter().map(String::as_str)) {
        out.push_str(pem.trim_end());
        out.push('\n');
    }
    out
}

/// The digest of the sites' trust files (`key → content` of the links Secret's
/// `sites.` entries): 16 hex digits of their SHA-256.
pub fn digest(files: &BTreeMap<String, ByteString>) -> String {
    let mut h = sha2::Sha256::new();
    for (k, v) in files.iter().filter(|(k, _)| k.starts_with("sites.")) {
        h.update(k.as_bytes());
        h.update([0]);
        h.update(&v.0);
        h.update([0]);
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A [`SITES_TRUST`] value: `<digest> <unix seconds>`.
pub fn stamp(digest: &str, at: SystemTime) -> String {
    format!("{digest} {}", at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs())
}

/// The digest and time of a [`SITES_TRUST`] value.
pub fn read_stamp(v: &str) -> Option<(&str, SystemTime)> {
    let (d, t) = v.split_once(' ')?;
    Some((d, SystemTime::UNIX_EPOCH + Duration::from_secs(t.parse().ok()?)))
}

/// The router pods (of `observations`, by pod) holding an incoming connection of a site
/// that no live grant among `grants` names: a connection whose user is a site certificate's
/// subject ([`site_of_user`]) with an identity no live grant of `namespace` has.
pub fn revoked_holders(
    grants: &[std::sync::Arc<AccessGrant>],
    observations: &BTreeMap<String, crate::mesh::Observation>,
    namespace: &str,
    now: SystemTime,
) -> BTreeSet<String> {
    let allowed: BTreeSet<String> = (grants.iter())
        .filter(|g| live(g, now))
        .map(|g| site_identity(&g.spec.site, &g.name_any(), namespace))
        .collect();
    let mut out = BTreeSet::new();
    for (pod, o) in observations {
        let crate::mesh::Observation::Answered(v) = o else { continue };
        let revoked = v.detailed.iter().any(|c| {
            !c.outgoing && c.user.as_deref().and_then(site_of_user).is_some_and(|id| !allowed.contains(id))
        });
        if revoked {
            out.insert(pod.clone());
        }
    }
    out
}

/// What the revocation step of a pass does ([`plan`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforce {
    /// Pods to annotate with the current [`SITES_TRUST`].
    pub stamp: Vec<String>,
    /// Pods to delete: they hold a revoked site's connection and read the current trust.
    pub delete: Vec<String>,
    /// When to look again (a stamp's pause not over yet).
    pub next: Option<Duration>,
}

/// The revocation step (see the module docs), pure: `pods` are the running router pods with
/// their [`SITES_TRUST`] value, `holders` those holding a revoked site's connection
/// ([`revoked_holders`]), `digest` the trust files' ([`digest`]).
pub fn plan(
    pods: &[(String, Option<String>)],
    holders: &BTreeSet<String>,
    digest: &str,
    now: SystemTime,
) -> Enforce {
    let mut e = Enforce::default();
    let mut all_current = true;
    for (pod, value) in pods {
        match value.as_deref().and_then(read_stamp) {
            Some((d, at)) if d == digest => {
                let ready = at + REFRESH_PAUSE;
                if let Ok(left) = ready.duration_since(now)
                    && !left.is_zero()
                {
                    all_current = false;
                    e.next = Some(e.next.map_or(left, |n| n.min(left)));
                }
            }
            _ => {
                all_current = false;
                e.stamp.push(pod.clone());
                e.next = Some(e.next.map_or(REFRESH_PAUSE, |n| n.min(REFRESH_PAUSE)));
            }
        }
    }
    if all_current {
        e.delete = pods.iter().filter(|(p, _)| holders.contains(p)).map(|(p, _)| p.clone()).collect();
    }
    e
}

/// Runs the revocation step of one Interconnect's pass: annotates `e.stamp` with `stamp`,
/// deletes `e.delete` ([`replace_router_pods`]).
pub async fn enforce(client: &kube::Client, namespace: &str, e: &Enforce, stamp: &str) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for p in &e.stamp {
        let patch = serde_json::json!({"metadata": {"annotations": {SITES_TRUST: stamp}}});
        if let Err(err) = pods.patch(p, &PatchParams::default(), &Patch::Merge(patch)).await {
            tracing::warn!(pod = %p, error = %err, "could not stamp the sites' trust on a router pod");
        }
    }
    replace_router_pods(client, namespace, &e.delete, "it holds a connection of a site whose grant is gone")
        .await;
}

/// Deletes router pods `pods` of `namespace` so their workload makes new ones (a revoked
/// site's connection held, a router id taken twice: [`crate::mesh::id_clashes`]), each
/// logged with `why`; a failure is logged and retried by the next pass, which finds the
/// same reason again.
pub async fn replace_router_pods(client: &kube::Client, namespace: &str, pods: &[String], why: &str) {
    use k8s_openapi::api::core::v1::Pod;
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for p in pods {
        tracing::info!(pod = %p, why, "replacing a router pod");
        if let Err(err) = api.delete(p, &Default::default()).await {
            tracing::warn!(pod = %p, why, error = %err, "could not replace a router pod");
        }
    }
}

/// The listener profiles of `o` that trust the sites, with the CAs of the live grants of
/// their listener's role (`grants`, the Interconnect's): one per role ([`LinkRole::InterRouter`],
/// [`LinkRole::Edge`]) whose first listener a grant could link to (`offer_of`), once `on`
/// (the Interconnect has a grant, or its links Secret holds a sites' file already). A profile
/// serving both roles is listed once, with both roles' CAs.
pub fn profiles(
    o: &crate::validated::ValidatedInterconnect,
    grants: &[std::sync::Arc<AccessGrant>],
    on: bool,
    now: SystemTime,
) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    if !on {
        return out;
    }
    for link in [LinkRole::InterRouter, LinkRole::Edge] {
        let Ok((_, profile)) = super::offer_of(o, link) else { continue };
        let cas = trusted(grants, link, now);
        match out.iter_mut().find(|(p, _)| *p == profile.name) {
            Some((_, all)) => all.extend(cas),
            None => out.push((profile.name, cas)),
        }
    }
    out
}

/// The links Secret's sites' files of `o` ([`qdr_api::router_config::site_trust_key`]): for
/// each profile of [`profiles`], its own trust bundle as `secrets` (the Secrets' data after
/// this pass, by name) hold it, then the grants' CAs. A profile whose bundle is not there
/// yet gets no file (its routers cannot start before it is).
pub fn trust_files(
    o: &crate::validated::ValidatedInterconnect,
    secrets: &BTreeMap<String, crate::credentials::Data>,
) -> BTreeMap<String, ByteString> {
    let mut out = BTreeMap::new();
    for (name, cas) in o.site_trust() {
        let Some(p) = o.spec().ssl_profiles.iter().flatten().find(|p| p.name == *name) else { continue };
        let Some((secret, key)) = qdr_api::router_config::ca_cert_source(p) else { continue };
        let Some(own) =
            secrets.get(secret).and_then(|d| d.get(key)).and_then(|b| std::str::from_utf8(&b.0).ok())
        else {
            continue;
        };
        let file = trust_file(own, cas);
        out.insert(qdr_api::router_config::site_trust_key(name), ByteString(file.into_bytes()));
    }
    out
}
