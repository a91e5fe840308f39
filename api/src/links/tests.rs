use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::token::*;
use super::*;
use crate::ErrorType;
use crate::offline::OfflineValidator;

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";

fn now() -> Timestamp {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

fn token_secret(annotations: &[(&str, &str)], keys: &[(&str, &str)]) -> Secret {
    let mut s = Secret { type_: Some(TOKEN_TYPE.into()), ..Default::default() };
    s.metadata.name = Some("t".into());
    s.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    s.data = Some(
        keys.iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect::<BTreeMap<_, _>>(),
    );
    s
}

fn good() -> Secret {
    token_secret(
        &[
            (ROLE_ANNOTATION, "inter-router"),
            (ENDPOINTS_ANNOTATION, "hub.example.com:55671,[2001:db8::1]:443, 203.0.113.7:30001"),
            (EXPIRES_ANNOTATION, "2027-01-01T00:00:00Z"),
            (SITE_ANNOTATION, "site-b"),
            (GRANT_ANNOTATION, "hub-ns/site-b"),
            (COST_ANNOTATION, "3"),
        ],
        &[(CA_KEY, CERT), (CERT_KEY, CERT), (KEY_KEY, KEY)],
    )
}

#[test]
fn a_complete_token_reads_back_every_part() {
    let t = read_token(&good(), now()).unwrap();
    assert_eq!(t.role, GrantRole::InterRouter);
    assert_eq!(
        t.endpoints,
        vec![("hub.example.com".into(), 55671), ("2001:db8::1".into(), 443), ("203.0.113.7".into(), 30001)]
    );
    assert_eq!(t.site, "site-b");
    assert_eq!(t.cost, 3);
    assert_eq!(t.expires, Some("2027-01-01T00:00:00Z".parse().unwrap()));
    let round = format_endpoints(t.endpoints.iter().map(|(h, p)| (h.as_str(), *p)));
    assert_eq!(round, "hub.example.com:55671,[2001:db8::1]:443,203.0.113.7:30001");
}

#[test]
fn every_problem_of_a_token_is_reported_at_its_place() {
    let s = token_secret(
        &[
            (ROLE_ANNOTATION, "client"),
            (ENDPOINTS_ANNOTATION, "hub:0,hub"),
            (EXPIRES_ANNOTATION, "2026-11-01T00:00:00Z"),
        ],
        &[(CA_KEY, CERT), (CERT_KEY, "not pem")],
    );
    let errs = read_token(&Secret { type_: Some("Opaque".into()), ..s }, now()).unwrap_err();
    let shown: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let has = |needle: &str| assert!(shown.iter().any(|e| e.contains(needle)), "{needle} not in {shown:#?}");
    has("type: Invalid value: \"Opaque\"");
    has("token-role]: Unsupported value: \"client\"");
    has("token-endpoints]: Invalid value: \"hub:0\"");
    has("token-endpoints]: Invalid value: \"hub\"");
    has("token-expires]: Invalid value: \"2026-11-01T00:00:00Z\": the token has expired");
    has("token-site]: Required value");
    has("data[tls.crt]: Invalid value");
    has("data[tls.key]: Required value");
    assert_eq!(errs.len(), 8, "{shown:#?}");
}

#[test]
fn a_token_without_expiry_never_expires_and_a_bad_cost_is_named() {
    let mut s = good();
    let a = s.metadata.annotations.as_mut().unwrap();
    a.remove(EXPIRES_ANNOTATION);
    a.insert(COST_ANNOTATION.into(), "0".into());
    let errs = read_token(&s, now()).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert!(errs[0].field.contains("token-cost"), "{}", errs[0]);
    s.metadata.annotations.as_mut().unwrap().remove(COST_ANNOTATION);
    let t = read_token(&s, now()).unwrap();
    assert_eq!((t.expires, t.cost), (None, 1));
}

#[test]
fn durations_are_hours_minutes_seconds_in_order_within_bounds() {
    assert_eq!(expiry_seconds("720h"), Some(720 * 3600));
    assert_eq!(expiry_seconds("1h30m"), Some(5400));
    assert_eq!(expiry_seconds("90m"), Some(5400));
    assert_eq!(expiry_seconds("60s"), Some(60));
    for bad in ["", "59s", "1d", "30m1h", "h", "1h1h", "-1h", "1.5h", "100000h", "1234567890s"] {
        assert_eq!(expiry_seconds(bad), None, "{bad}");
    }
}

fn grant(spec: serde_json::Value) -> AccessGrant {
    serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "AccessGrant",
        "metadata": {"name": "g"}, "spec": spec
    }))
    .unwrap()
}

fn link(spec: serde_json::Value) -> Link {
    serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Link",
        "metadata": {"name": "l"}, "spec": spec
    }))
    .unwrap()
}

#[test]
fn a_grant_lists_every_violation_and_the_crd_agrees() {
    let ok = grant(json!({"interconnect": "hub", "site": "site-b", "expiry": "720h", "cost": 2,
        "externalHosts": [{"host": "hub.example.com"}, {"host": "203.0.113.7", "port": 443}]}));
    assert!(validate_grant(&ok).is_empty(), "{:?}", validate_grant(&ok));
    let v = OfflineValidator::for_crd(&grant_crd()).unwrap();
    assert!(v.check(&serde_json::to_value(&ok).unwrap()).is_empty());

    let bad = json!({"interconnect": "Hub", "site": "Site_B", "role": "edge", "expiry": "1d", "cost": 0,
        "externalHosts": [{"host": "a b", "port": 0}, {"host": "x"}, {"host": "x"}]});
    let errs = validate_grant(&grant(bad.clone()));
    let fields: Vec<(&str, ErrorType)> = errs.iter().map(|e| (e.field.as_str(), e.error_type)).collect();
    assert_eq!(
        fields,
        vec![
            ("spec.interconnect", ErrorType::Invalid),
            ("spec.site", ErrorType::Invalid),
            ("spec.expiry", ErrorType::Invalid),
            ("spec.cost", ErrorType::Invalid),
            ("spec.cost", ErrorType::Forbidden),
            ("spec.externalHosts[0].host", ErrorType::Invalid),
            ("spec.externalHosts[0].port", ErrorType::Invalid),
            ("spec.externalHosts[2]", ErrorType::Duplicate),
        ]
    );
    let obj = serde_json::to_value(grant(bad)).unwrap();
    let offline: Vec<String> = v.check(&obj).into_iter().map(|e| e.path).collect();
    for f in [
        "spec.interconnect",
        "spec.site",
        "spec.expiry",
        "spec.cost",
        "spec.externalHosts[0].host",
        "spec.externalHosts[0].port",
    ] {
        assert!(offline.iter().any(|p| p == f), "the CRD does not refuse {f}: {offline:?}");
    }
}

#[test]
fn the_crd_refuses_an_expiry_out_of_bounds_as_validate_does() {
    let v = OfflineValidator::for_crd(&grant_crd()).unwrap();
    for (expiry, ok) in
        [("720h", true), ("1h30m", true), ("59s", false), ("100000h", false), ("30m1h", false)]
    {
        let g = grant(json!({"interconnect": "hub", "site": "b", "expiry": expiry}));
        let crd_ok = v.check(&serde_json::to_value(&g).unwrap()).is_empty();
        assert_eq!((crd_ok, validate_grant(&g).is_empty()), (ok, ok), "{expiry}");
    }
}

#[test]
fn a_link_is_checked_against_its_token_and_interconnect() {
    let l = link(json!({"interconnect": "spoke", "tokenSecret": "hub-token"}));
    assert!(validate_link(&l).is_empty());
    let t = read_token(&good(), now()).unwrap();
    assert!(validate_link_refs(&l, Some(Ok(&t)), Some(true)).is_empty());
    assert!(validate_link_refs(&l, Some(Ok(&t)), None).is_empty(), "an Interconnect applied later is fine");
    let wrong = validate_link_refs(&l, Some(Ok(&t)), Some(false));
    assert_eq!(wrong.len(), 1);
    assert!(
        wrong[0]
            .to_string()
            .starts_with("spec.tokenSecret: Invalid value: \"hub-token\": an inter-router token"),
        "{}",
        wrong[0]
    );
    let edge = Token { role: GrantRole::Edge, ..t.clone() };
    assert!(validate_link_refs(&l, Some(Ok(&edge)), Some(true))[0].detail.contains("an edge token"));
    let missing = validate_link_refs(&l, None, Some(true));
    assert!(missing[0].detail.contains("no such Secret"), "{}", missing[0]);
    let expired = read_token(&good(), "2027-02-01T00:00:00Z".parse().unwrap()).unwrap_err();
    let errs = validate_link_refs(&l, Some(Err(&expired)), Some(true));
    assert!(errs[0].to_string().contains("has expired"), "{}", errs[0]);

    let bad = link(json!({"interconnect": "", "tokenSecret": "Bad_Name", "cost": -1}));
    let fields: Vec<String> = validate_link(&bad).into_iter().map(|e| e.field).collect();
    assert_eq!(fields, vec!["spec.interconnect", "spec.tokenSecret", "spec.cost"]);
    let v = OfflineValidator::for_crd(&link_crd()).unwrap();
    let offline: Vec<String> =
        v.check(&serde_json::to_value(&bad).unwrap()).into_iter().map(|e| e.path).collect();
    for f in ["spec.tokenSecret", "spec.cost"] {
        assert!(offline.iter().any(|p| p == f), "the CRD does not refuse {f}: {offline:?}");
    }
}

/// Every `name` of a rendered configuration, by entity: qdrouterd refuses to start when two
/// entities of any types share one (`duplicates unique attribute 'name'`).
fn names_unique(config: &str) {
    let v: serde_json::Value = serde_json::from_str(config).unwrap();
    let names: Vec<&str> = v.as_array().unwrap().iter().filter_map(|e| e[1]["name"].as_str()).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
}

#[test]
fn a_site_outside_kubernetes_gets_a_configuration_qdrouterd_starts_with() {
    use super::site::{SiteOptions, site_config};
    let t = read_token(&good(), now()).unwrap();
    let o = SiteOptions { id: "vm-1".into(), cert_dir: "/etc/site/".into(), listen: Some(5672) };
    let config = site_config(&t, &o);
    names_unique(&config);
    let v: serde_json::Value = serde_json::from_str(&config).unwrap();
    let entity = |e: &str| v.as_array().unwrap().iter().find(|x| x[0] == e).map(|x| x[1].clone()).unwrap();
    assert_eq!(entity("router"), json!({"mode": "interior", "id": "vm-1"}));
    assert_eq!(entity("sslProfile")["certFile"], "/etc/site/tls.crt");
    let c = entity("connector");
    assert_eq!(
        (c["role"].as_str(), c["host"].as_str(), c["port"].as_i64()),
        (Some("inter-router"), Some("hub.example.com"), Some(55671))
    );
    assert_eq!((c["cost"].as_i64(), c["verifyHostname"].as_bool()), (Some(3), Some(true)));
    let edge = Token { role: GrantRole::Edge, ..t };
    let v: serde_json::Value =
        serde_json::from_str(&site_config(&edge, &SiteOptions { listen: None, ..o })).unwrap();
    assert!(v.as_array().unwrap().iter().all(|x| x[0] != "listener"));
    let c = v.as_array().unwrap().iter().find(|x| x[0] == "connector").unwrap();
    assert_eq!((c[1]["role"].as_str(), c[1].get("cost")), (Some("edge"), None), "no cost on an edge link");
}

#[test]
fn a_links_entities_have_names_no_other_entity_has() {
    use crate::router_config::{LinkConnector, router_config};
    let mut spec: crate::InterconnectSpec = serde_json::from_value(
        json!({"deploymentPlan": {"role": "interior"}, "listeners": [{"port": 5672}]}),
    )
    .unwrap();
    crate::apply_defaults("spoke", &mut spec);
    let links: Vec<LinkConnector> = ["a", "tls-a", "b"]
        .iter()
        .map(|l| LinkConnector {
            link: (*l).into(),
            inter_router: true,
            host: "hub.example.com".into(),
            port: 55671,
            cost: Some(2),
            verify_hostname: true,
        })
        .collect();
    let config = router_config(&spec).with_links(&links);
    names_unique(&config.render());
    let live: Vec<&str> = (config.sections.iter())
        .filter(|s| crate::router_config::live::is_live(s))
        .filter(|s| s.entity == "sslProfile" || s.entity == "connector")
        .map(|s| s.entity)
        .collect();
    assert_eq!(live.len(), 6, "each link's sslProfile and connector are live");
}

#[test]
fn a_sites_connection_is_told_apart_by_its_certificates_organization() {
    assert_eq!(site_of_user("O=qdr-operator-site,CN=b.g.a"), Some("b.g.a"));
    assert_eq!(site_of_user("CN=b.g.a, O=qdr-operator-site"), Some("b.g.a"), "either order");
    assert_eq!(site_of_user("CN=b.g.a"), None, "no organization: not a site's");
    assert_eq!(site_of_user("O=someone-else,CN=b.g.a"), None);
    assert_eq!(site_of_user("O=qdr-operator-site"), None, "no common name");
}

#[test]
fn a_listener_profile_that_trusts_the_sites_reads_its_file_of_the_links_secret() {
    use crate::router_config::{LINKS_DIR, router_config, site_trust_key};
    let mut spec: crate::InterconnectSpec =
        serde_json::from_value(json!({"deploymentPlan": {"role": "interior"}})).unwrap();
    crate::apply_defaults("hub", &mut spec);
    let with_ca = |ca: bool| {
        spec.ssl_profiles.iter().flatten().find(|p| p.ca_cert.is_some() == ca).map(|p| p.name.clone())
    };
    let (sites, other) = (with_ca(true).unwrap(), with_ca(false));
    let plain = router_config(&spec).render();
    let config = router_config(&spec).with_site_trust(std::slice::from_ref(&sites)).render();
    let file = format!("{LINKS_DIR}/{}", site_trust_key(&sites));
    assert!(!plain.contains(&file) && config.contains(&file), "{config}");
    assert_eq!(
        config.matches("caCertFile").count(),
        plain.matches("caCertFile").count(),
        "one file replaced"
    );
    if let Some(other) = other {
        assert!(!config.contains(&site_trust_key(&other)), "only the profile named");
    }
}
