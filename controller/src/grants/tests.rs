//! The offering side's pure parts: the token a grant gets, the grants' CAs, the listener's
//! trust of them and the revocation step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use qdr_api::LinkRole;
use qdr_api::links::token::{CA_KEY, CERT_KEY, SITE_ORGANIZATION, site_of_user};
use qdr_api::links::{AccessGrant, Endpoint};
use qdr_certs::pki::{CertInfo, new_ca, verify_leaf};
use serde_json::json;

use super::sites::{self, REFRESH_PAUSE};
use super::*;
use crate::mesh::{Connection, Mode, Observation, RouterView};

fn grant(name: &str, extra: serde_json::Value) -> AccessGrant {
    let mut g = json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "AccessGrant",
        "metadata": {"name": name, "namespace": "a", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": {"interconnect": "hub", "site": name.trim_start_matches("g-")}
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        g[k] = v;
    }
    serde_json::from_value(g).unwrap()
}

fn at() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000) // 2026-11-18
}

fn listener_ca() -> BTreeMap<String, ByteString> {
    let ca = new_ca("listener", at() - Duration::from_secs(3600), Duration::from_secs(86400 * 400)).unwrap();
    BTreeMap::from([
        ("tls.crt".to_string(), ByteString(ca.cert_pem.clone().into_bytes())),
        ("tls.key".to_string(), ByteString(ca.key_pem.into_bytes())),
        ("ca.crt".to_string(), ByteString(ca.cert_pem.into_bytes())),
    ])
}

fn text(s: &Secret, k: &str) -> String {
    String::from_utf8(s.data.as_ref().unwrap()[k].0.clone()).unwrap()
}

fn eps() -> Vec<Endpoint> {
    vec![Endpoint { host: "hub.example.com".into(), port: 55671, source: "externalHosts".into() }]
}

#[test]
fn a_site_certificate_is_signed_by_the_grants_own_ca_for_client_use_only_and_marked_as_a_sites() {
    let g = grant("g-b", json!({}));
    let site_ca = sites::site_ca(Some(&sites::new_site_ca(&g, at()).unwrap()), None, at()).unwrap();
    let listener = listener_ca();
    let (token, _) = plan_token(&g, Some(&listener), &site_ca, &eps(), None, at()).unwrap();
    let token = token.unwrap();
    let cert = text(&token, CERT_KEY);
    assert!(crate::credentials::is_signed_by(&cert, &site_ca.cert_pem));
    let listener_pem = String::from_utf8(listener["tls.crt"].0.clone()).unwrap();
    assert!(!crate::credentials::is_signed_by(&cert, &listener_pem), "the listener's CA signs no site");
    assert_eq!(text(&token, CA_KEY), listener_pem, "the site trusts the routers' CA");
    assert_eq!(CertInfo::parse(&cert).unwrap().subject_cn, "b.g-b.a");
    // clientAuth alone: no TLS client takes it for a server's certificate.
    assert!(verify_leaf(&cert, &site_ca.cert_pem, "b.g-b.a", at()).is_err());
    // The organization marks it: what the routers report as its user is told apart.
    let user = format!("O={SITE_ORGANIZATION},CN=b.g-b.a");
    assert_eq!(site_of_user(&user), Some("b.g-b.a"));
    // Kept while current; a new CA of the grant re-issues it.
    let (kept, _) = plan_token(&g, Some(&listener), &site_ca, &eps(), Some(&token), at()).unwrap();
    assert!(kept.is_none());
    let other = sites::site_ca(Some(&sites::new_site_ca(&g, at()).unwrap()), None, at()).unwrap();
    let (again, _) = plan_token(&g, Some(&listener), &other, &eps(), Some(&token), at()).unwrap();
    assert!(again.is_some_and(|t| crate::credentials::is_signed_by(&text(&t, CERT_KEY), &other.cert_pem)));
    // No listener CA yet: NoCA.
    let none = plan_token(&g, None, &site_ca, &eps(), None, at()).unwrap_err();
    assert_eq!(none.reason, "NoCA");
    // A listener CA with a root above it: the token trusts the bundle, then the root, and
    // the root's arrival re-issues a token that lacked it.
    let root = qdr_certs::pki::new_root("root", at(), Duration::from_secs(86400 * 3650)).unwrap();
    let mut rooted = listener.clone();
    rooted.insert(crate::credentials::ROOT_CRT.into(), ByteString(root.cert_pem.clone().into_bytes()));
    let (with_root, _) = plan_token(&g, Some(&rooted), &site_ca, &eps(), Some(&token), at()).unwrap();
    assert_eq!(text(&with_root.unwrap(), CA_KEY), format!("{listener_pem}{}", root.cert_pem));
}

#[test]
fn a_grants_ca_is_kept_while_it_outlives_the_grant() {
    let g = grant("g-b", json!({"spec": {"interconnect": "hub", "site": "b", "expiry": "720h"}}));
    let secret = sites::new_site_ca(&g, at()).unwrap();
    assert_eq!(secret.metadata.name.as_deref(), Some("g-b-site-ca"));
    assert_eq!(secret.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-g-b");
    let end = ends(&g).unwrap();
    assert!(sites::site_ca(Some(&secret), Some(end), at()).is_some());
    // Not a CA that ends before the grant, nor a missing one.
    assert!(sites::site_ca(Some(&secret), Some(end + Duration::from_secs(3 * 86400)), at()).is_none());
    assert!(sites::site_ca(None, Some(end), at()).is_none());
}

fn with_ca(mut g: AccessGrant, pem: &str) -> Arc<AccessGrant> {
    g.status = Some(qdr_api::links::AccessGrantStatus { site_ca: Some(pem.into()), ..Default::default() });
    Arc::new(g)
}

fn ca_pem(name: &str) -> String {
    new_ca(name, at(), Duration::from_secs(86400)).unwrap().cert_pem
}

#[test]
fn the_listener_trusts_the_cas_of_live_grants_of_its_role_only() {
    let (b, c, e, old, gone) = (ca_pem("b"), ca_pem("c"), ca_pem("e"), ca_pem("old"), ca_pem("gone"));
    let grants = vec![
        with_ca(grant("g-c", json!({})), &c),
        with_ca(grant("g-b", json!({})), &b),
        with_ca(grant("g-e", json!({"spec": {"interconnect": "hub", "site": "e", "role": "edge"}})), &e),
        // Ended on 2026-11-02, before `at()`.
        with_ca(
            grant("g-old", json!({"spec": {"interconnect": "hub", "site": "old", "expiry": "24h"}})),
            &old,
        ),
        with_ca(
            grant(
                "g-gone",
                json!({"metadata": {"name": "g-gone", "namespace": "a",
            "creationTimestamp": "2026-11-01T00:00:00Z", "deletionTimestamp": "2026-11-17T00:00:00Z"}}),
            ),
            &gone,
        ),
        with_ca(grant("g-bad", json!({})), "not a certificate"),
    ];
    assert_eq!(sites::trusted(&grants, LinkRole::InterRouter, at()), vec![b.clone(), c.clone()], "by name");
    assert_eq!(sites::trusted(&grants, LinkRole::Edge, at()), vec![e]);
    let file = sites::trust_file("OWN\n", std::slice::from_ref(&b));
    assert!(
        file.starts_with("OWN\n-----BEGIN CERTIFICATE-----") && file.ends_with("-----END CERTIFICATE-----\n")
    );
    let digest = |f: &str| sites::digest(&BTreeMap::from([("sites.p.ca.crt".into(), ByteString(f.into()))]));
    assert_ne!(digest(&file), digest(&sites::trust_file("OWN\n", &[b, c])));
}

#[test]
fn an_interconnect_with_a_grant_trusts_the_sites_from_its_links_secret() {
    let ic: qdr_api::Interconnect = serde_json::from_value(json!({
        "metadata": {"name": "hub", "namespace": "a", "uid": "u"}, "spec": {}}))
    .unwrap();
    let o = ValidatedInterconnect::new(&ic).unwrap();
    let b = ca_pem("b");
    let grants = vec![with_ca(grant("g-b", json!({})), &b)];
    assert!(sites::profiles(&o, &grants, false, at()).is_empty(), "no grant ever: nothing changes");
    let trust = sites::profiles(&o, &grants, true, at());
    assert_eq!(trust.len(), 1, "the default edge listener has no mutual TLS: {trust:?}");
    let profile = trust[0].0.clone();
    assert_eq!(trust[0].1, vec![b.clone()]);
    let o = o.with_site_trust(trust);
    assert!(o.links_mounted());
    let config = o.router_config().render();
    let file = format!("{}/sites.{profile}.ca.crt", qdr_api::router_config::LINKS_DIR);
    assert!(config.contains(&file), "{config}");
    // The links Secret's file: the profile's own bundle, then the grant's CA.
    let p = o.spec().ssl_profiles.iter().flatten().find(|p| p.name == profile).unwrap();
    let (secret, key) = qdr_api::router_config::ca_cert_source(p).unwrap();
    let secrets = BTreeMap::from([(
        secret.to_string(),
        BTreeMap::from([(key.to_string(), ByteString(b"OWN".to_vec()))]),
    )]);
    let files = sites::trust_files(&o, &secrets);
    let content = String::from_utf8(files[&format!("sites.{profile}.ca.crt")].0.clone()).unwrap();
    assert_eq!(content, sites::trust_file("OWN", &[b]));
    assert!(sites::trust_files(&o, &BTreeMap::new()).is_empty(), "no bundle yet, no file");
}

fn view(pod: &str, connections: &[(&str, bool)]) -> (String, Observation) {
    let detailed = connections
        .iter()
        .map(|(user, outgoing)| Connection {
            peer: Arc::from("peer"),
            outgoing: *outgoing,
            role: "inter-router",
            host: String::new(),
            tls: None,
            uptime: None,
            user: Some(user.to_string()),
        })
        .collect();
    let v = RouterView {
        id: Arc::from(pod),
        mode: Mode::Interior,
        reaches: BTreeSet::new(),
        inter_router: Vec::new(),
        edge: Vec::new(),
        clients: 0,
        links_blocked: 0,
        deliveries_stuck: 0,
        live: None,
        detailed,
        deferred: 0,
        routed: false,
    };
    (pod.to_string(), Observation::Answered(v))
}

#[test]
fn the_routers_holding_a_connection_of_a_site_whose_grant_is_gone_are_found() {
    let grants = vec![with_ca(grant("g-c", json!({})), &ca_pem("c"))];
    let site = |id: &str| format!("O={SITE_ORGANIZATION},CN={id}");
    let observations: BTreeMap<String, Observation> = [
        view("hub-0", &[(&site("b.g-b.a"), false)]), // grant g-b is gone
        view("hub-1", &[(&site("c.g-c.a"), false)]), // g-c lives
        view("hub-2", &[("CN=hub.a.svc", false)]),   // one of the Interconnect's own routers
        view("hub-3", &[(&site("b.g-b.a"), true)]),  // its own outgoing link, not a site's
    ]
    .into_iter()
    .collect();
    let holders = sites::revoked_holders(&grants, &observations, "a", at());
    assert_eq!(holders, BTreeSet::from(["hub-0".to_string()]));
}

#[test]
fn a_router_restarts_only_once_every_router_was_told_the_new_trust_a_pause_ago() {
    let holders = BTreeSet::from(["hub-0".to_string()]);
    let now = at();
    let old = Some(sites::stamp("old", now - Duration::from_secs(600)));
    // Not told yet: told now, nothing deleted, back after the pause.
    let pods = vec![("hub-0".to_string(), old.clone()), ("hub-1".to_string(), None)];
    let e = sites::plan(&pods, &holders, "new", now);
    assert_eq!((e.stamp.len(), e.delete.len(), e.next), (2, 0, Some(REFRESH_PAUSE)));
    // Told a second ago: wait for the rest of the pause.
    let told = Some(sites::stamp("new", now - Duration::from_secs(1)));
    let pods = vec![("hub-0".to_string(), told.clone()), ("hub-1".to_string(), told)];
    let e = sites::plan(&pods, &holders, "new", now);
    assert!(e.stamp.is_empty() && e.delete.is_empty());
    assert_eq!(e.next, Some(REFRESH_PAUSE - Duration::from_secs(1)));
    // Past the pause: the holder goes, the other stays.
    let later = Some(sites::stamp("new", now - REFRESH_PAUSE));
    let pods = vec![("hub-0".to_string(), later.clone()), ("hub-1".to_string(), later)];
    let e = sites::plan(&pods, &holders, "new", now);
    assert_eq!((e.stamp.len(), e.delete, e.next), (0, vec!["hub-0".to_string()], None));
    assert_eq!(sites::read_stamp(&sites::stamp("d", now)), Some(("d", now)), "whole seconds");
}

#[test]
fn a_grant_says_it_is_expiring_thirty_days_before_its_end() {
    // Created 2026-11-01; `at()` is 2026-11-18.
    let g = grant("g-b", json!({"spec": {"interconnect": "hub", "site": "b", "expiry": "1000h"}}));
    let (c, turns) = expiring(&g, at());
    assert_eq!((c.type_.as_str(), c.status.as_str(), c.reason.as_str()), ("Expiring", "True", "Ending"));
    assert!(c.message.contains("the grant ends in") && turns.is_none(), "{}", c.message);
    let far = grant("g-b", json!({"spec": {"interconnect": "hub", "site": "b", "expiry": "8760h"}}));
    let (c, turns) = expiring(&far, at());
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "NotEnding"));
    assert_eq!(turns, Some(ends(&far).unwrap() - EXPIRING_WINDOW), "looked at again when it turns");
    let never = grant("g-b", json!({}));
    assert_eq!(expiring(&never, at()).1, None);
}

#[test]
fn grants_and_link_tokens_that_end_are_gauged_and_warned_about_within_the_window() {
    use super::expiry::{ends_of, warning};
    let grants = vec![
        Arc::new(grant("g-b", json!({"spec": {"interconnect": "hub", "site": "b", "expiry": "1000h"}}))),
        Arc::new(grant("g-never", json!({}))),
    ];
    let links = crate::site_links::Resolved {
        judged: vec![crate::site_links::Judged {
            link: "to-hub".into(),
            generation: None,
            outcome: Err(String::new()),
            site: None,
            expires: Some("2027-06-01T00:00:00Z".into()),
        }],
        ..Default::default()
    };
    let ends = ends_of(&grants, &links);
    let names: Vec<(&str, &str)> = ends.iter().map(|(k, n, _)| (*k, n.as_str())).collect();
    assert_eq!(names, [("AccessGrant", "g-b"), ("Link", "to-hub")], "the grant that never ends is left out");
    let (reason, note) = warning("AccessGrant", "g-b", ends[0].2, at()).unwrap();
    assert_eq!(reason, "GrantExpiring");
    assert!(note.contains("AccessGrant g-b ends in"), "{note}");
    assert!(warning("Link", "to-hub", ends[1].2, at()).is_none(), "months ahead: no warning yet");
    let (reason, note) = warning("Link", "to-hub", at() - Duration::from_secs(1), at()).unwrap();
    assert_eq!((reason, note.contains("ends now")), ("LinkExpiring", true));
    // The gauge: one series per end, removed when the grant or Link goes.
    let m = crate::metrics::Metrics::default();
    m.link_expiry("a", "hub", &ends);
    assert_eq!(m.encode().matches("qdr_link_expiry_seconds{").count(), 2);
    m.link_expiry("a", "hub", &ends[..1]);
    assert!(!m.encode().contains("name=\"to-hub\""));
    m.link_expiry("a", "hub", &[]);
    assert_eq!(m.encode().matches("qdr_link_expiry_seconds{").count(), 0);
}

#[test]
fn a_grant_awaits_its_site_for_a_while_after_its_token_is_issued_until_the_site_links() {
    // at() is 2026-11-18T11:06:40Z.
    let ready = |since: &str, connections: Option<i32>| {
        grant(
            "g-b",
            json!({"status": {"connections": connections, "conditions": [{"type": "Ready", "status": "True",
                "reason": "Issued", "message": "", "lastTransitionTime": since}]}}),
        )
    };
    assert!(awaits_site(&ready("2026-11-18T11:03:00Z", None), at()), "issued 3 min ago, no site");
    assert!(awaits_site(&ready("2026-11-18T11:03:00Z", Some(0)), at()));
    assert!(!awaits_site(&ready("2026-11-18T11:03:00Z", Some(1)), at()), "the site is linked");
    assert!(!awaits_site(&ready("2026-11-18T10:43:00Z", None), at()), "issued 23 min ago: past SITE_WAIT");
    assert!(awaits_site(&ready("2026-11-18T11:10:00Z", None), at()), "a clock behind the API server's");
    assert!(!awaits_site(&grant("g-b", json!({})), at()), "no status: no token yet");
    let not_ready = grant(
        "g-b",
        json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NoMutualTls",
            "message": "", "lastTransitionTime": "2026-11-18T11:03:00Z"}]}}),
    );
    assert!(!awaits_site(&not_ready, at()), "no token issued");
}
