//! Links to other clusters' routers (docs/multi-cluster.md), the offering side: each
//! [`AccessGrant`] gets a token, Secret `<grant>-token` in its namespace, controlled by the
//! grant (so deleting the grant deletes the token), for the one remote site it names.
//!
//! The token ([`qdr_api::links::token`]) holds:
//! * every address of the Interconnect's routers the controller can see, in the order a
//!   site tries them: the grant's `externalHosts`, then the Service's load-balancer
//!   ingress (IPs and host names); each with the port of the role's listener;
//! * the trust bundle of the CA of the role's listener profile (two CAs while it rotates),
//!   then the root above that CA (`ca.crt`; [`crate::credentials`]' `root` module): the
//!   routers serve their certificate with the CA's certificate cross-signed by the root, so
//!   a site keeps verifying them across every rotation of the CA without a new token;
//! * a client certificate and key for that site alone, signed by the grant's own CA
//!   ([`sites`]: Secret `<grant>-site-ca`, whose key never leaves this cluster): subject
//!   `CN=<site>.<grant>.<namespace>, O=qdr-operator-site`, `clientAuth` only, valid until
//!   the grant ends or for a year, re-issued at [`RENEW_FRACTION`] of its life, when the
//!   grant's CA, the listener's trust bundle or the addresses change;
//! * the role, the addresses, the expiry, the site, the grant and the cost, in clear text
//!   (annotations).
//!
//! One CA per grant is what makes a grant revocable: the listener trusts each live grant's
//! CA beside its own ([`sites`]), so taking one out refuses that site's next connection and
//! no other.
//!
//! What the grant needs of its Interconnect: interior, valid, and for `inter-router` its
//! first inter-router listener; for `edge` its first edge listener; either with a profile
//! that has a CA the operator generates and `mutualAuth`, so that the site's certificate is
//! checked. Anything missing is the grant's `Ready=False` with the reason.

pub mod expiry;
pub mod sites;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use qdr_api::links::token::{
    CA_KEY, CERT_KEY, COST_ANNOTATION, ENDPOINTS_ANNOTATION, EXPIRES_ANNOTATION, GRANT_ANNOTATION, KEY_KEY,
    ROLE_ANNOTATION, SITE_ANNOTATION, SITE_ORGANIZATION, TOKEN_LABEL, TOKEN_TYPE, format_endpoints,
    site_of_user,
};
use qdr_api::links::{AccessGrant, AccessGrantStatus, Endpoint, GrantRole, expiry_seconds, validate_grant};
use qdr_api::{Interconnect, LinkRole, Role};
use qdr_certs::pki::{CertInfo, CertKey, new_client_leaf};

use crate::validated::{FIELD_MANAGER, ValidatedInterconnect};

/// How often a grant is looked at again without a change (its Interconnect's Service may
/// have gained a load-balancer address).
pub const RESYNC: Duration = Duration::from_secs(300);
/// How long a grant waits before it is looked at again after a failure.
pub const RETRY: Duration = Duration::from_secs(10);
/// How long a grant waits for its listener's CA to get its root (`CAPreparing`) before it
/// looks again: the Interconnect's pass that adds it runs as soon as the grant exists.
pub const ROOT_WAIT: Duration = Duration::from_secs(2);
/// How long a site's certificate lives at most when the grant does not end sooner.
pub const SITE_CERT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// The share of a site certificate's life after which it is re-issued.
pub const RENEW_FRACTION: f64 = 2.0 / 3.0;

/// The token Secret's name of grant `name`.
pub fn token_secret(name: &str) -> String {
    format!("{name}-token")
}

/// The subject common name of a site's certificate (`<site>.<grant>.<namespace>`): what
/// the routers' connection rows report as the site's user.
pub fn site_identity(site: &str, grant: &str, namespace: &str) -> String {
    format!("{site}.{grant}.{namespace}")
}

/// Why a grant has no token, for its `Ready=False` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    /// One CamelCase word.
    pub reason: &'static str,
    /// What to do.
    pub message: String,
}

fn not_ready(reason: &'static str, message: impl Into<String>) -> NotReady {
    NotReady { reason, message: message.into() }
}

/// The listener of `o` a site of `link`'s role dials and its sslProfile: the first listener
/// of the role, which must have a profile with `mutualAuth` and a CA the operator
/// generates (the site's certificate is checked; the token carries that CA's bundle).
///
/// # Errors
/// [`NotReady`] `NotInterior`, `NoListener` or `NoMutualTls`.
pub(crate) fn offer_of(
    o: &ValidatedInterconnect,
    link: LinkRole,
) -> Result<(i32, qdr_api::SslProfile), NotReady> {
    if o.spec().role() != Role::Interior {
        return Err(not_ready("NotInterior", "only an interior Interconnect can let other sites in"));
    }
    let listener = o.spec().listeners_of(link).iter().flatten().next().ok_or_else(|| {
        not_ready("NoListener", format!("the Interconnect has no {} to link to", link.listeners_field()))
    })?;
    let profile = (listener.ssl_profile.as_deref())
        .and_then(|p| o.spec().ssl_profiles.iter().flatten().find(|s| s.name == p))
        .filter(|p| p.mutual_auth == Some(true) && p.generate_ca_cert == Some(true) && p.ca_cert.is_some())
        .ok_or_else(|| {
            not_ready(
                "NoMutualTls",
                format!(
                    "the first of the Interconnect's {} (port {}) has no sslProfile with mutualAuth and a CA the \
                     operator generates, so a site's certificate could not be checked: give it one (for edge: \
                     sslProfile with mutualAuth, saslMechanisms EXTERNAL, authenticatePeer)",
                    link.listeners_field(),
                    listener.port
                ),
            )
        })?;
    Ok((listener.port, profile.clone()))
}

/// The listener role a grant of `role` links to.
pub(crate) fn link_role(role: &GrantRole) -> LinkRole {
    match role {
        GrantRole::Edge => LinkRole::Edge,
        _ => LinkRole::InterRouter,
    }
}

/// What the grant's Interconnect offers for the grant's role ([`offer_of`]): the port a
/// site dials and the CA Secret whose bundle the token carries.
fn offer(ic: &Interconnect, role: &GrantRole) -> Result<(i32, String), NotReady> {
    let o = ValidatedInterconnect::new(ic).map_err(|e| {
        not_ready("InterconnectInvalid", format!("the Interconnect is not valid, so it links nothing: {e}"))
    })?;
    let (port, profile) = offer_of(&o, link_role(role))?;
    Ok((port, profile.ca_cert.unwrap_or_default()))
}

/// The addresses of the token: `externalHosts` first, then the load-balancer ingress of
/// Service `service` (when it has any), each once, at most
/// [`qdr_api::links::token::MAX_ENDPOINTS`].
pub fn endpoints(grant: &AccessGrant, port: i32, service: Option<&Service>) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = Vec::new();
    let mut add = |host: &str, port: i32, source: &str| {
        if !host.is_empty() && !out.iter().any(|e| e.host == host && e.port == port) {
            out.push(Endpoint { host: host.into(), port, source: source.into() });
        }
    };
    for h in &grant.spec.external_hosts {
        add(&h.host, h.port.unwrap_or(port), "externalHosts");
    }
    let ingress =
        service.and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.clone()).unwrap_or_default();
    for i in &ingress {
        let p = (i.ports.iter().flatten()).find(|p| p.port == port).map_or(port, |p| p.port);
        if let Some(ip) = &i.ip {
            add(ip, p, "LoadBalancer");
        }
        if let Some(host) = &i.hostname {
            add(host, p, "LoadBalancer");
        }
    }
    out.truncate(qdr_api::links::token::MAX_ENDPOINTS);
    out
}

/// How long after its token was issued a grant that lists no site yet keeps its
/// Interconnect's routers read every [`SITE_RECHECK`] instead of every mesh resync (60 s),
/// so the site shows in `status.linked` within seconds of its admin applying the token.
/// Bounded so a grant never used costs at most this many reads: 180 at 5 s.
pub const SITE_WAIT: Duration = Duration::from_secs(15 * 60);
/// The wait between reads of the routers while a grant awaits its site ([`awaits_site`]).
pub const SITE_RECHECK: Duration = Duration::from_secs(5);

/// Whether grant `g` awaits its site at `now`: its token is issued (`Ready` `True`, since
/// less than [`SITE_WAIT`]) and no router reports a connection of the site
/// (`status.connections` 0 or absent).
pub fn awaits_site(g: &AccessGrant, now: SystemTime) -> bool {
    let Some(status) = &g.status else { return false };
    if status.connections.unwrap_or(0) > 0 {
        return false;
    }
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready" && c.status == "True");
    ready.is_some_and(|c| {
        let since: SystemTime = c.last_transition_time.0.into();
        now.duration_since(since).is_ok_and(|d| d < SITE_WAIT) || since > now
    })
}

/// When grant `g` ends, from its creation and `expiry`; `None`: never.
pub fn ends(g: &AccessGrant) -> Option<SystemTime> {
    let created: SystemTime = g.metadata.creation_timestamp.as_ref()?.0.into();
    let secs = expiry_seconds(g.spec.expiry.as_deref()?)?;
    Some(created + Duration::from_secs(secs))
}

fn text(d: &BTreeMap<String, ByteString>, k: &str) -> Option<String> {
    d.get(k).and_then(|b| String::from_utf8(b.0.clone()).ok())
}

fn rfc3339(t: SystemTime) -> String {
    Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default()
}

/// The token to write for grant `g` (`None`: the existing one is current) and when to look
/// again. Pure: `ca` is the data of the listener profile's CA Secret (its trust bundle goes
/// into the token), `site_ca` the grant's own CA ([`sites::site_ca`]), which signs the
/// site's certificate, `existing` the token Secret.
///
/// # Errors
/// [`NotReady`] when the listener's CA Secret is missing or holds no certificate, signing
/// fails, or no address is known.
pub fn plan_token(
    g: &AccessGrant,
    ca: Option<&BTreeMap<String, ByteString>>,
    site_ca: &CertKey,
    eps: &[Endpoint],
    existing: Option<&Secret>,
    now: SystemTime,
) -> Result<(Option<Secret>, SystemTime), NotReady> {
    let ns = g.metadata.namespace.clone().unwrap_or_default();
    let name = g.name_any();
    let role = g.spec.role.clone().unwrap_or(GrantRole::InterRouter);
    if eps.is_empty() {
        return Err(not_ready(
            "NoEndpoints",
            "no address of the routers is known outside the cluster: set deploymentPlan.serviceType LoadBalancer on \
             the Interconnect, or name the address in spec.externalHosts",
        ));
    }
    let ca = ca.ok_or_else(|| {
        not_ready("NoCA", "the CA Secret of the role's listener profile does not exist yet")
    })?;
    let bundle =
        crate::credentials::bundle(ca).filter(|b| !qdr_certs::pki::split_bundle(b).is_empty()).ok_or_else(
            || not_ready("NoCA", "the CA Secret of the role's listener profile holds no certificate yet"),
        )?;
    // The bundle, then the root above the CA (`credentials::root`): what keeps the site
    // verifying the routers after the CA rotates.
    let root = crate::credentials::root_of(ca).unwrap_or_default();
    let trust = format!(
        "{}{}",
        qdr_certs::pki::split_bundle(&bundle).concat(),
        qdr_certs::pki::split_bundle(&root).concat()
    );
    let ends = ends(g);
    let endpoint_text = format_endpoints(eps.iter().map(|e| (e.host.as_str(), e.port as u16)));
    let cost = g.spec.cost.unwrap_or(1).to_string();
    let identity = site_identity(&g.spec.site, &name, &ns);
    // The current token is kept while it is signed by the signer, for the same names and
    // addresses, before its renew point, trusting the current bundle.
    let data = existing.and_then(|s| s.data.clone()).unwrap_or_default();
    let annotations = existing.and_then(|s| s.metadata.annotations.clone()).unwrap_or_default();
    let current = text(&data, CERT_KEY).and_then(|c| CertInfo::parse(&c).ok().map(|i| (c, i)));
    if let Some((pem, info)) = &current
        && crate::credentials::is_signed_by(pem, &site_ca.cert_pem)
        && info.subject_cn == identity
        && now < info.point(RENEW_FRACTION)
        && text(&data, CA_KEY).as_deref() == Some(trust.as_str())
        && annotations.get(ENDPOINTS_ANNOTATION) == Some(&endpoint_text)
        && annotations.get(COST_ANNOTATION) == Some(&cost)
        && annotations.get(ROLE_ANNOTATION).map(String::as_str) == Some(role.as_str())
    {
        return Ok((None, info.point(RENEW_FRACTION)));
    }
    let lifetime = match ends {
        Some(e) => e.duration_since(now).unwrap_or_default().min(SITE_CERT_LIFETIME),
        None => SITE_CERT_LIFETIME,
    };
    let leaf = new_client_leaf(site_ca, &identity, SITE_ORGANIZATION, now, lifetime)
        .map_err(|e| not_ready("CACannotSign", format!("signing the site's certificate failed: {e}")))?;
    let info = CertInfo::parse(&leaf.cert_pem).map_err(|e| not_ready("CACannotSign", e.to_string()))?;
    let mut ann = BTreeMap::from([
        (ROLE_ANNOTATION.to_string(), role.as_str().to_string()),
        (ENDPOINTS_ANNOTATION.to_string(), endpoint_text),
        (SITE_ANNOTATION.to_string(), g.spec.site.clone()),
        (GRANT_ANNOTATION.to_string(), format!("{ns}/{name}")),
        (COST_ANNOTATION.to_string(), cost),
    ]);
    if let Some(e) = ends {
        ann.insert(EXPIRES_ANNOTATION.to_string(), rfc3339(e));
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(token_secret(&name)),
            namespace: Some(ns),
            labels: Some(BTreeMap::from([(TOKEN_LABEL.to_string(), "true".to_string())])),
            annotations: Some(ann),
            owner_references: g.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some(TOKEN_TYPE.into()),
        data: Some(BTreeMap::from([
            (CA_KEY.to_string(), ByteString(trust.into_bytes())),
            (CERT_KEY.to_string(), ByteString(leaf.cert_pem.into_bytes())),
            (KEY_KEY.to_string(), ByteString(leaf.key_pem.into_bytes())),
        ])),
        ..Default::default()
    };
    Ok((Some(secret), info.point(RENEW_FRACTION)))
}

struct GrantContext {
    client: kube::Client,
}

fn condition(g: &AccessGrant, status: &str, reason: &str, message: String) -> Condition {
    condition_of(g, "Ready", status, reason, message)
}

fn condition_of(g: &AccessGrant, type_: &str, status: &str, reason: &str, message: String) -> Condition {
    let before = g.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    crate::site_links::condition_kept(
        before,
        type_,
        status,
        reason,
        message,
        g.metadata.generation,
        Timestamp::now(),
    )
}

/// How long before its end a grant says so: its `Expiring` condition turns `True`, the
/// controller sends the Warning `GrantExpiring` (once a day) and the alert
/// `QdrLinkExpiring` fires a week before.
pub const EXPIRING_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// The grant's `Expiring` condition at `now` (`True`, `Ending`, within
/// [`EXPIRING_WINDOW`] of its end; else `False`, `NotEnding`) and when it turns, if it will.
pub fn expiring(g: &AccessGrant, now: SystemTime) -> (Condition, Option<SystemTime>) {
    match ends(g) {
        Some(end) if end <= now + EXPIRING_WINDOW => {
            let left = end.duration_since(now).unwrap_or_default();
            let message = format!(
                "the grant ends in {} (at {}): the site is cut off then; make a new grant and hand its token to the \
                 site's admin before",
                crate::human::duration(left),
                rfc3339(end)
            );
            (condition_of(g, "Expiring", "True", "Ending", message), None)
        }
        Some(end) => {
            let message = format!("the grant ends at {}", rfc3339(end));
            (condition_of(g, "Expiring", "False", "NotEnding", message), Some(end - EXPIRING_WINDOW))
        }
        None => (condition_of(g, "Expiring", "False", "NotEnding", "the grant does not end".into()), None),
    }
}

async fn write_status(
    api: &Api<AccessGrant>,
    g: &AccessGrant,
    status: AccessGrantStatus,
) -> Result<(), kube::Error> {
    let old = g.status.clone().unwrap_or_default();
    // The Interconnect's pass owns what the routers report (connections, linked, lastSeen);
    // the grant's CA stays known while a pass cannot look at it.
    let site_ca = status.site_ca.clone().or_else(|| old.site_ca.clone());
    let mut new = AccessGrantStatus {
        site_ca,
        connections: old.connections,
        linked: old.linked.clone(),
        last_seen: old.last_seen.clone(),
        ..status
    };
    new.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    if new == old {
        return Ok(());
    }
    let patch = serde_json::json!({"status": new});
    api.patch_status(&g.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await.map(drop)
}

async fn reconcile(g: Arc<AccessGrant>, ctx: Arc<GrantContext>) -> Result<Action, kube::Error> {
    let ns = g.metadata.namespace.clone().unwrap_or_default();
    let name = g.name_any();
    if g.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let grants: Api<AccessGrant> = Api::namespaced(ctx.client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let now = SystemTime::now();
    let mut status = AccessGrantStatus { observed_generation: g.metadata.generation, ..Default::default() };
    let fail = |why: NotReady, mut status: AccessGrantStatus| {
        status.conditions = vec![condition(&g, "False", why.reason, why.message)];
        status
    };
    let errors = validate_grant(&g);
    if !errors.is_empty() {
        let why = not_ready("Invalid", crate::validated::summary(&errors));
        write_status(&grants, &g, fail(why, status)).await?;
        return Ok(Action::await_change());
    }
    let ends = ends(&g);
    status.expires_at = ends.map(rfc3339);
    if ends.is_some_and(|e| e <= now) {
        // The grant has ended: its token goes, and with it the site's way in.
        let _ = secrets.delete(&token_secret(&name), &Default::default()).await;
        let why = not_ready(
            "Expired",
            "the grant has ended: its token was deleted (make a new grant to let the site in again)",
        );
        write_status(&grants, &g, fail(why, status)).await?;
        return Ok(Action::await_change());
    }
    let role = g.spec.role.clone().unwrap_or(GrantRole::InterRouter);
    let ics: Api<Interconnect> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(ic) = ics.get_opt(&g.spec.interconnect).await? else {
        let why = not_ready(
            "InterconnectNotFound",
            format!("no Interconnect {} in this namespace", g.spec.interconnect),
        );
        write_status(&grants, &g, fail(why, status)).await?;
        return Ok(Action::requeue(RETRY));
    };
    let (port, ca_name) = match offer(&ic, &role) {
        Ok(o) => o,
        Err(why) => {
            write_status(&grants, &g, fail(why, status)).await?;
            return Ok(Action::requeue(RESYNC));
        }
    };
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let service = services.get_opt(&g.spec.interconnect).await?;
    let eps = endpoints(&g, port, service.as_ref());
    status.endpoints = eps.clone();
    let site_ca = match sites::ensure_site_ca(&secrets, &g, now).await? {
        Ok(ca) => ca,
        Err(why) => {
            write_status(&grants, &g, fail(why, status)).await?;
            return Ok(Action::requeue(RETRY));
        }
    };
    status.site_ca = Some(site_ca.cert_pem.clone());
    let ca = secrets.get_opt(&ca_name).await?;
    // A CA the operator generates gets its root at the Interconnect's pass that follows the
    // first grant (`credentials::root`): a token without it would cut the site off at the
    // CA's first rotation.
    if ca.as_ref().is_some_and(|s| {
        crate::credentials::is_generated(s)
            && s.data.as_ref().is_none_or(|d| crate::credentials::root_of(d).is_none())
    }) {
        let why = not_ready(
            "CAPreparing",
            format!(
                "the CA Secret {ca_name} of the role's listener profile gets a root for other sites at the \
                 Interconnect's next pass; the token follows"
            ),
        );
        write_status(&grants, &g, fail(why, status)).await?;
        return Ok(Action::requeue(ROOT_WAIT));
    }
    let ca = ca.and_then(|s| s.data);
    let existing = secrets.get_opt(&token_secret(&name)).await?;
    let planned = plan_token(&g, ca.as_ref(), &site_ca, &eps, existing.as_ref(), now);
    let (written, renew_at) = match planned {
        Err(why) => {
            write_status(&grants, &g, fail(why, status)).await?;
            return Ok(Action::requeue(RETRY));
        }
        Ok((Some(secret), at)) => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let s = secrets.patch(&token_secret(&name), &params, &Patch::Apply(&secret)).await?;
            (s, at)
        }
        Ok((None, at)) => (existing.unwrap_or_default(), at),
    };
    let cert = written.data.as_ref().and_then(|d| text(d, CERT_KEY));
    status.certificate_expires_at = cert.and_then(|c| CertInfo::parse(&c).ok()).map(|i| rfc3339(i.not_after));
    status.token_secret = Some(token_secret(&name));
    status.conditions = vec![condition(
        &g,
        "True",
        "Issued",
        format!(
            "token Secret {} holds {} address(es) and a certificate for site {}: apply it in the site's namespace, \
             then a Link naming it",
            token_secret(&name),
            eps.len(),
            g.spec.site
        ),
    )];
    let (expiring, turns) = expiring(&g, now);
    status.conditions.push(expiring);
    write_status(&grants, &g, status).await?;
    let renew_at = turns.map_or(renew_at, |t| t.min(renew_at));
    let next = renew_at.duration_since(now).unwrap_or_default().min(RESYNC);
    Ok(Action::requeue(next.max(Duration::from_secs(1))))
}

fn error_policy(_g: Arc<AccessGrant>, e: &kube::Error, _ctx: Arc<GrantContext>) -> Action {
    tracing::warn!(error = %e, "reconciling an AccessGrant failed");
    Action::requeue(RETRY)
}

/// Runs the AccessGrant controller over `namespace` (empty: all) until its watches end: one
/// reconcile per grant change, its token's change, and at the token's renew point.
pub async fn run(client: kube::Client, namespace: &str) {
    let (grants, tokens): (Api<AccessGrant>, Api<Secret>) = if namespace.is_empty() {
        (Api::all(client.clone()), Api::all(client.clone()))
    } else {
        (Api::namespaced(client.clone(), namespace), Api::namespaced(client.clone(), namespace))
    };
    let token_selector = format!("{TOKEN_LABEL}=true");
    Controller::new(grants, watcher::Config::default())
        .owns(tokens, watcher::Config::default().labels(&token_selector))
        .run(reconcile, error_policy, Arc::new(GrantContext { client }))
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// The site's connections as the routers of its Interconnect report them (`observations`,
/// by pod): every open inter-router or edge connection authenticated as the grant's site
/// (its certificate's subject, [`site_of_user`]), the first 16 listed.
pub fn site_connections(
    g: &AccessGrant,
    observations: &BTreeMap<String, crate::mesh::Observation>,
) -> Vec<qdr_api::links::SiteConnection> {
    let ns = g.metadata.namespace.clone().unwrap_or_default();
    let identity = site_identity(&g.spec.site, &g.name_any(), &ns);
    let of_site = |c: &&crate::mesh::Connection| {
        !c.outgoing && c.user.as_deref().and_then(site_of_user) == Some(identity.as_str())
    };
    let mut out = Vec::new();
    for (pod, o) in observations {
        let crate::mesh::Observation::Answered(v) = o else { continue };
        for c in v.detailed.iter().filter(of_site) {
            out.push(qdr_api::links::SiteConnection {
                router: pod.clone(),
                remote: c.peer.to_string(),
                user: c.user.clone().unwrap_or_default(),
                uptime_seconds: c.uptime.and_then(|u| i64::try_from(u).ok()),
            });
        }
    }
    out
}

/// Writes what the routers report of each grant of an Interconnect (`connections`,
/// `linked`, `lastSeen`: a merge patch of only those fields of the status, which the
/// grant's own reconcile keeps), when the count or the connections changed (uptime alone
/// is not written). A failed write is logged and made again by the next pass.
pub(crate) async fn write_linked(
    client: &kube::Client,
    grants: &[Arc<AccessGrant>],
    observations: &BTreeMap<String, crate::mesh::Observation>,
) {
    for g in grants {
        let mut linked = site_connections(g, observations);
        let count = i32::try_from(linked.len()).unwrap_or(i32::MAX);
        linked.truncate(16);
        let old = g.status.clone().unwrap_or_default();
        let key = |l: &[qdr_api::links::SiteConnection]| -> Vec<(String, String)> {
            l.iter().map(|c| (c.router.clone(), c.remote.clone())).collect()
        };
        if old.connections == Some(count) && key(&old.linked) == key(&linked) {
            continue;
        }
        let mut patch = serde_json::json!({"status": {"connections": count, "linked": linked}});
        if count > 0 {
            patch["status"]["lastSeen"] = serde_json::json!(Timestamp::now().to_string());
        }
        let api: Api<AccessGrant> =
            Api::namespaced(client.clone(), g.metadata.namespace.as_deref().unwrap_or_default());
        if let Err(e) = api.patch_status(&g.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await {
            tracing::warn!(grant = %g.name_any(), error = %e, "could not write the grant's linked sites");
        }
    }
}

#[cfg(test)]
mod tests;
