//! Links to other clusters' routers (docs/multi-cluster.md), the using side: which
//! [`Link`]s of an Interconnect its routers dial, from each Link's token Secret, and what
//! each Link's status says. Pure: the reconcile passes in the Links and tokens from its
//! stores.
//!
//! A valid Link (its spec, its token: [`qdr_api::links::token::read_token`], and the token's
//! role against the Interconnect's: [`qdr_api::links::validate_link_refs`]) renders a
//! connector to the token's first endpoint and an sslProfile over the token's files, both
//! live ([`qdr_api::router_config::RouterConfig::with_links`]); its files go into the links
//! Secret ([`qdr_api::router_config::links_secret`]), which the routers mount from the
//! Interconnect's first Link on. An invalid Link renders nothing and says why in its
//! `Configured` condition.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use qdr_api::links::token::{CA_KEY, CERT_KEY, KEY_KEY, read_token};
use qdr_api::links::{Link, validate_link, validate_link_refs};
use qdr_api::router_config::{LinkConnector, link_key};

/// What one Link comes to.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// The Link's name.
    pub link: String,
    /// `metadata.generation` of the Link.
    pub generation: Option<i64>,
    /// The connector it renders, or why it renders none (every violation, `; `-separated).
    pub outcome: Result<LinkConnector, String>,
    /// The token's site, when the token reads.
    pub site: Option<String>,
    /// When the token ends (RFC 3339), when it says.
    pub expires: Option<String>,
}

/// Condition `type_` of a Link's or an AccessGrant's status, its `lastTransitionTime` kept
/// from `before` (the stored conditions) while its status is unchanged, else `now`.
pub fn condition_kept(
    before: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    let kept = (before.iter().find(|c| c.type_ == type_ && c.status == status))
        .map(|c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: kept.unwrap_or(Time(now)),
    }
}

/// The Links of one Interconnect, judged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    /// Every Link, by name.
    pub judged: Vec<Judged>,
    /// The links Secret's data: `<link>.ca.crt`, `<link>.tls.crt`, `<link>.tls.key` of every
    /// valid Link.
    pub files: BTreeMap<String, ByteString>,
}

impl Resolved {
    /// The connectors of the valid Links, by Link name.
    pub fn connectors(&self) -> Vec<LinkConnector> {
        self.judged.iter().filter_map(|j| j.outcome.as_ref().ok().cloned()).collect()
    }
}

/// Judges `links` (each with its token Secret, if it exists) for an Interconnect whose
/// routers are interior (`interior`) at time `now`.
pub fn resolve(links: &[(Arc<Link>, Option<Arc<Secret>>)], interior: bool, now: Timestamp) -> Resolved {
    let mut out = Resolved::default();
    for (link, secret) in links {
        let name = link.metadata.name.clone().unwrap_or_default();
        let mut errors = validate_link(link);
        let token = secret.as_ref().map(|s| read_token(s, now));
        let refs = match &token {
            None => validate_link_refs(link, None, Some(interior)),
            Some(Ok(t)) => validate_link_refs(link, Some(Ok(t)), Some(interior)),
            Some(Err(e)) => validate_link_refs(link, Some(Err(e)), Some(interior)),
        };
        errors.extend(refs);
        let (site, expires) = match &token {
            Some(Ok(t)) => (Some(t.site.clone()), t.expires.map(|e| e.to_string())),
            _ => (None, None),
        };
        let outcome = match (&token, errors.is_empty()) {
            (Some(Ok(t)), true) => {
                let (host, port) = t.endpoints[0].clone();
                let data = secret.as_ref().and_then(|s| s.data.clone()).unwrap_or_default();
                for key in [CA_KEY, CERT_KEY, KEY_KEY] {
                    if let Some(v) = data.get(key) {
                        out.files.insert(link_key(&name, key), v.clone());
                    }
                }
                Ok(LinkConnector {
                    link: name.clone(),
                    inter_router: t.role == qdr_api::links::GrantRole::InterRouter,
                    host,
                    port,
                    cost: link.spec.cost.or(Some(t.cost)),
                    verify_hostname: link.spec.verify_hostname.unwrap_or(true),
                })
            }
            _ => Err(crate::validated::summary(&errors)),
        };
        out.judged.push(Judged { link: name, generation: link.metadata.generation, outcome, site, expires });
    }
    out
}

/// The status of Link `j` as the routers of its Interconnect report it (`observations`, by
/// pod), its stored status `old` (whose conditions keep their transition times while their
/// status holds) at `now`, for generation `j.generation`.
///
/// * `Configured`: `True` (`Rendered`) when the Link is valid and its connector is in the
///   configuration; else `False` with every violation (reason `Invalid`).
/// * `Operational`: `True` (`Connected`) when a router holds an open outgoing connection to
///   the connector's `host:port` (qdrouterd's `connection.host`), with how many of the
///   routers that answered do; `False` (`NotConnected`) otherwise, or `Unknown`
///   (`NotRead`) when no router answered.
pub fn status(
    j: &Judged,
    cert_expiry: Option<String>,
    observations: &BTreeMap<String, crate::mesh::Observation>,
    old: Option<&qdr_api::links::LinkStatus>,
    now: Timestamp,
) -> qdr_api::links::LinkStatus {
    use crate::mesh::Observation;
    let before = old.map_or(&[][..], |o| &o.conditions[..]);
    let condition = |type_: &str, status: &str, reason: &str, message: String| {
        condition_kept(before, type_, status, reason, message, j.generation, now)
    };
    let mut st = qdr_api::links::LinkStatus {
        observed_generation: j.generation,
        site: j.site.clone(),
        certificate_expires_at: cert_expiry,
        ..Default::default()
    };
    match &j.outcome {
        Err(why) => {
            st.conditions.push(condition("Configured", "False", "Invalid", why.clone()));
            st.conditions.push(condition(
                "Operational",
                "False",
                "NotConfigured",
                "the Link renders no connector until it is valid".into(),
            ));
        }
        Ok(c) => {
            let endpoint = if c.host.contains(':') {
                format!("[{}]:{}", c.host, c.port)
            } else {
                format!("{}:{}", c.host, c.port)
            };
            let plain = format!("{}:{}", c.host, c.port);
            st.endpoint = Some(endpoint.clone());
            st.cost = c.cost.filter(|_| c.inter_router);
            st.conditions.push(condition(
                "Configured",
                "True",
                "Rendered",
                format!(
                    "connector {}{} to {endpoint} in the routers' configuration",
                    qdr_api::router_config::LINK_PREFIX,
                    c.link
                ),
            ));
            let answered: Vec<&crate::mesh::RouterView> = (observations.values())
                .filter_map(|o| match o {
                    Observation::Answered(v) => Some(v),
                    _ => None,
                })
                .collect();
            let dials = |d: &&crate::mesh::Connection| d.outgoing && (d.host == plain || d.host == endpoint);
            let up: Vec<&crate::mesh::Connection> =
                (answered.iter()).flat_map(|v| v.detailed.iter()).filter(dials).collect();
            if answered.is_empty() {
                st.conditions.push(condition(
                    "Operational",
                    "Unknown",
                    "NotRead",
                    "no router of the Interconnect has answered the controller yet".into(),
                ));
            } else if let Some(first) = up.iter().max_by_key(|d| d.uptime) {
                st.remote_router = Some(first.peer.to_string());
                st.uptime_seconds = first.uptime.and_then(|u| i64::try_from(u).ok());
                st.tls_protocol = first.tls.clone();
                let routers = (answered.iter()).filter(|v| v.detailed.iter().any(|d| dials(&d))).count();
                st.conditions.push(condition(
                    "Operational",
                    "True",
                    "Connected",
                    format!(
                        "{routers} of {} routers hold a connection to {endpoint} (router {})",
                        answered.len(),
                        first.peer
                    ),
                ));
            } else {
                st.conditions.push(condition(
                    "Operational",
                    "False",
                    "NotConnected",
                    format!("none of {} routers holds a connection to {endpoint}", answered.len()),
                ));
            }
        }
    }
    st
}

/// Writes the status of every Link of `o` ([`status`]) that changed (a merge patch of the
/// `status` subresource; a change of uptime alone is not written). A failed write is logged
/// and made again by the next pass.
pub(crate) async fn write_statuses(
    client: &kube::Client,
    links: &[(Arc<Link>, Option<Arc<Secret>>)],
    resolved: &Resolved,
    observations: &BTreeMap<String, crate::mesh::Observation>,
    namespace: &str,
) {
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<Link> = Api::namespaced(client.clone(), namespace);
    let now = Timestamp::now();
    for j in &resolved.judged {
        let Some((link, token)) =
            links.iter().find(|(l, _)| l.metadata.name.as_deref() == Some(j.link.as_str()))
        else {
            continue;
        };
        let cert = token
            .as_ref()
            .and_then(|t| t.data.as_ref()?.get(CERT_KEY).cloned())
            .and_then(|b| String::from_utf8(b.0).ok())
            .and_then(|pem| crate::credentials::not_after(&pem))
            .map(|t| k8s_openapi::jiff::Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default());
        let new = status(j, cert, observations, link.status.as_ref(), now);
        let mut same = new.clone();
        same.uptime_seconds = link.status.as_ref().and_then(|s| s.uptime_seconds);
        if link.status.as_ref() == Some(&same) {
            continue;
        }
        let patch = serde_json::json!({"status": new});
        if let Err(e) = api.patch_status(&j.link, &PatchParams::default(), &Patch::Merge(patch)).await {
            tracing::warn!(link = %j.link, namespace, error = %e, "could not write the Link's status");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdr_api::links::token::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";

    fn link(name: &str, token: &str, extra: serde_json::Value) -> Arc<Link> {
        let mut spec = serde_json::json!({"interconnect": "spoke", "tokenSecret": token});
        spec.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Link",
                "metadata": {"name": name, "namespace": "b", "generation": 2}, "spec": spec
            }))
            .unwrap(),
        )
    }

    fn token(role: &str, expires: &str) -> Arc<Secret> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "t", "annotations": {
                    ROLE_ANNOTATION: role, ENDPOINTS_ANNOTATION: "hub.example.com:55671,10.0.0.1:30001",
                    EXPIRES_ANNOTATION: expires, SITE_ANNOTATION: "b", GRANT_ANNOTATION: "a/b", COST_ANNOTATION: "4"}},
                "type": TOKEN_TYPE,
                "data": {CA_KEY: base64(CERT), CERT_KEY: base64(CERT), KEY_KEY: base64(KEY)}
            }))
            .unwrap(),
        )
    }

    fn base64(s: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn now() -> Timestamp {
        "2026-11-29T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_valid_link_dials_the_first_endpoint_with_its_files_and_the_rest_say_why_not() {
        let links = vec![
            (link("ok", "t", serde_json::json!({})), Some(token("inter-router", "2027-01-01T00:00:00Z"))),
            (
                link("cheap", "t", serde_json::json!({"cost": 9, "verifyHostname": false})),
                Some(token("inter-router", "2027-01-01T00:00:00Z")),
            ),
            (link("edge", "t", serde_json::json!({})), Some(token("edge", "2027-01-01T00:00:00Z"))),
            (link("old", "t", serde_json::json!({})), Some(token("inter-router", "2026-01-01T00:00:00Z"))),
            (link("none", "missing", serde_json::json!({})), None),
        ];
        let r = resolve(&links, true, now());
        let ok = r.judged[0].outcome.as_ref().unwrap();
        assert_eq!(
            (ok.host.as_str(), ok.port, ok.cost, ok.verify_hostname),
            ("hub.example.com", 55671, Some(4), true)
        );
        let cheap = r.judged[1].outcome.as_ref().unwrap();
        assert_eq!(
            (cheap.cost, cheap.verify_hostname),
            (Some(9), false),
            "the Link's own cost and check win"
        );
        assert!(
            r.judged[2].outcome.as_ref().unwrap_err().contains("an edge token links an edge Interconnect")
        );
        assert!(r.judged[3].outcome.as_ref().unwrap_err().contains("has expired"));
        assert!(r.judged[4].outcome.as_ref().unwrap_err().contains("no such Secret"));
        assert_eq!(r.connectors().len(), 2);
        let keys: Vec<&str> = r.files.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["cheap.ca.crt", "cheap.tls.crt", "cheap.tls.key", "ok.ca.crt", "ok.tls.crt", "ok.tls.key"]
        );
        assert_eq!(r.judged[0].site.as_deref(), Some("b"));
        let edge = resolve(&links[2..3], false, now());
        assert!(edge.judged[0].outcome.is_ok(), "an edge token on an edge Interconnect");
    }
}
