//! Concrete defaults: parity with the Go operator (with cert-manager present, since this
//! project issues credentials itself) and the deliberate differences.

use qdr_api::{Distribution, Interconnect, InterconnectSpec, Placement, Role, defaults, validate};
use serde_json::{Value, json};

fn default_of(name: &str, spec: Value) -> InterconnectSpec {
    let ic: Interconnect = serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    let out = defaults(&ic);
    assert!(validate(&out).is_empty(), "{:#?}", validate(&out));
    out.spec
}

#[test]
fn empty_spec_gets_the_go_operators_secure_defaults() {
    let spec = default_of("cluster1-router-mesh", json!({}));
    // The Go operator's defaulted spec for an empty spec with cert-manager present.
    let expected = json!({
        "addresses": [
            {"prefix": "closest", "distribution": "closest"}, {"prefix": "multicast", "distribution": "multicast"},
            {"prefix": "unicast", "distribution": "closest"}, {"prefix": "exclusive", "distribution": "closest"},
            {"prefix": "broadcast", "distribution": "multicast"}],
        "deploymentPlan": {"livenessPort": 8888, "placement": "Any", "role": "interior", "size": 1},
        "edgeListeners": [{"port": 45672}],
        "interRouterListeners": [{"authenticatePeer": true, "expose": true, "port": 55671, "saslMechanisms": "EXTERNAL", "sslProfile": "inter-router"}],
        "listeners": [{"port": 5672}, {"authenticatePeer": true, "expose": true, "http": true, "port": 8080}, {"port": 5671, "sslProfile": "default"}],
        "sslProfiles": [
            {"name": "default", "credentials": "cluster1-router-mesh-default-credentials", "generateCredentials": true},
            {"name": "inter-router", "credentials": "cluster1-router-mesh-inter-router-credentials",
             "caCert": "cluster1-router-mesh-inter-router-ca", "generateCredentials": true, "generateCaCert": true, "mutualAuth": true}],
        "users": "cluster1-router-mesh-users",
    });
    assert_eq!(serde_json::to_value(&spec).unwrap(), expected);
}

#[test]
fn edge_routers_get_no_inter_router_or_edge_listeners() {
    let spec = default_of("edge", json!({"deploymentPlan": {"role": "edge"}}));
    assert_eq!(spec.deployment_plan.as_ref().unwrap().role, Some(Role::Edge));
    assert!(spec.inter_router_listeners.is_none());
    assert!(spec.edge_listeners.is_none());
    // The `default` profile is still added for the 5671 listener; `inter-router` is not.
    let names: Vec<_> = spec.ssl_profiles.unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["default"]);
}

#[test]
fn placement_every_gets_no_size() {
    let spec = default_of("edge", json!({"deploymentPlan": {"role": "edge", "placement": "Every"}}));
    let plan = spec.deployment_plan.unwrap();
    assert_eq!(plan.placement, Some(Placement::Every));
    assert_eq!(plan.size, None, "the Go operator set size 1 here; a DaemonSet has no size");
}

#[test]
fn only_absent_fields_are_filled() {
    let spec = default_of(
        "r",
        json!({"deploymentPlan": {"size": 3}, "users": "none", "addresses": [], "interRouterListeners": [],
               "listeners": [{"port": 6000}]}),
    );
    assert_eq!(spec.deployment_plan.unwrap().size, Some(3));
    assert_eq!(spec.users.as_deref(), Some("none"));
    assert_eq!(
        spec.addresses,
        Some(vec![]),
        "an explicit empty list means none (the Go operator re-filled it)"
    );
    assert_eq!(spec.inter_router_listeners, Some(vec![]));
    assert_eq!(spec.listeners.unwrap().len(), 1);
    assert_eq!(spec.edge_listeners.unwrap()[0].port, 45672, "absent lists are still defaulted");
}

#[test]
fn default_listeners_skip_ports_already_taken() {
    let spec =
        default_of("r", json!({"deploymentPlan": {"livenessPort": 5672}, "edgeListeners": [{"port": 8080}]}));
    let ports: Vec<i32> = spec.listeners.unwrap().iter().map(|l| l.port).collect();
    assert_eq!(ports, [5671], "5672 is the liveness port and 8080 an edge listener");
}

#[test]
fn referenced_well_known_profiles_are_added_for_connectors_too() {
    // Go bug 9: only normal and inter-router listeners triggered the profiles.
    let spec = default_of(
        "r",
        json!({"deploymentPlan": {"role": "edge"}, "listeners": [{"port": 5672}],
               "edgeConnectors": [{"host": "mesh", "port": 45671, "sslProfile": "inter-router"}]}),
    );
    let p = spec.ssl_profiles.unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].name, "inter-router");
    assert_eq!(p[0].ca_cert.as_deref(), Some("r-inter-router-ca"));
    assert_eq!(p[0].mutual_auth, Some(true));
}

#[test]
fn user_profiles_get_generated_credentials_like_the_go_operator() {
    let spec = default_of(
        "r",
        json!({"listeners": [{"port": 5672, "sslProfile": "tryme"}, {"port": 5673, "sslProfile": "mine"}],
               "sslProfiles": [{"name": "tryme"}, {"name": "mine", "credentials": "my-secret", "mutualAuth": true}]}),
    );
    let p = spec.ssl_profiles.unwrap();
    assert_eq!(p[0].credentials.as_deref(), Some("r-tryme-credentials"));
    assert_eq!(p[0].generate_credentials, Some(true));
    assert_eq!(p[0].ca_cert, None);
    assert_eq!(p[1].credentials.as_deref(), Some("my-secret"), "user-supplied Secret kept");
    assert_eq!(p[1].generate_credentials, None);
    assert_eq!(p[1].ca_cert.as_deref(), Some("r-mine-ca"));
    assert_eq!(p[1].generate_ca_cert, Some(true));
}

#[test]
fn distributions_are_typed() {
    let spec = default_of("r", json!({}));
    assert_eq!(spec.addresses.unwrap()[1].distribution, Some(Distribution::Multicast));
}

#[test]
fn without_a_name_nothing_is_derived_from_it() {
    // A generateName create: the name is picked after admission.
    let mut d: InterconnectSpec =
        serde_json::from_value(json!({"sslProfiles": [{"name": "tls", "mutualAuth": true}]})).unwrap();
    qdr_api::apply_defaults("", &mut d);
    assert!(qdr_api::validate_spec(&d).is_empty(), "{:#?}", qdr_api::validate_spec(&d));
    assert_eq!(d.users, None, "no `-users`");
    let tls = &d.ssl_profiles.as_ref().unwrap()[0];
    assert_eq!((tls.credentials.as_ref(), tls.ca_cert.as_ref()), (None, None));
    assert_eq!((tls.generate_credentials, tls.generate_ca_cert), (None, None));
    // Everything else is defaulted as usual, and the well-known profiles are added unnamed.
    assert_eq!(d.listeners.as_ref().unwrap().len(), 3);
    let names: Vec<_> = d.ssl_profiles.iter().flatten().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["tls", "default", "inter-router"]);
    // Once named, the same spec gets the name-derived defaults.
    let named = {
        let mut s = d.clone();
        qdr_api::apply_defaults("mesh", &mut s);
        s
    };
    assert_eq!(named.users.as_deref(), Some("mesh-users"));
    assert_eq!(named.ssl_profiles.unwrap()[0].credentials.as_deref(), Some("mesh-tls-credentials"));
}

#[test]
fn the_go_operators_size_one_with_every_is_accepted_ignored_and_warned_about() {
    // The Go operator defaulted size to 1 for every placement and wrote it back.
    let go = |size: i32| -> Interconnect {
        serde_json::from_value(json!({"metadata": {"name": "edge"},
            "spec": {"deploymentPlan": {"role": "edge", "placement": "Every", "size": size}}}))
        .unwrap()
    };
    let one = defaults(&go(1));
    assert!(validate(&one).is_empty(), "{:#?}", validate(&one));
    let w = qdr_api::warnings(&one);
    assert!(
        w.contains(
            &"spec.deploymentPlan.size: ignored with placement Every (one router per node); remove it".into()
        ),
        "{w:?}"
    );
    let two = validate(&defaults(&go(2)));
    assert_eq!(two.len(), 1);
    assert_eq!(two[0].field, "spec.deploymentPlan.size");
}

/// The operator's management port, taken by the spec, is warned about: the controller
/// leaves such routers unread (docs/mesh-status.md). Its profile name is refused
/// (`reserved-names`).
#[test]
fn the_operators_management_port_is_warned_about() {
    let ic: qdr_api::Interconnect = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mesh", "namespace": "ns"},
        "spec": {"listeners": [{"port": 5672}, {"port": 55670}]}}))
    .unwrap();
    let w = qdr_api::warnings(&defaults(&ic));
    let ours: Vec<&String> = w.iter().filter(|m| m.contains("the routers will not be read")).collect();
    assert_eq!(ours.len(), 1, "{w:?}");
    assert!(ours[0].starts_with("spec.listeners[1].port: 55670 is the operator's management port"), "{w:?}");
    assert!(w.iter().all(|m| m.chars().count() <= 120), "{w:?}");
    let plain = qdr_api::warnings(&defaults(
        &serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mesh", "namespace": "ns"}, "spec": {}}))
        .unwrap(),
    ));
    assert!(plain.iter().all(|m| !m.contains("management")), "{plain:?}");
}

/// A listener named `metrics` takes the router container's metrics port name, which the
/// chart's PodMonitor selects: warned about, as the routers would not be scraped.
#[test]
fn a_listener_named_metrics_is_warned_about() {
    let ic: qdr_api::Interconnect = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mesh", "namespace": "ns"},
        "spec": {"listeners": [{"port": 5672}, {"port": 9090, "name": "metrics"}]}}))
    .unwrap();
    let w = qdr_api::warnings(&defaults(&ic));
    let ours: Vec<&String> = w.iter().filter(|m| m.contains("PodMonitor")).collect();
    assert_eq!(ours.len(), 1, "{w:?}");
    assert!(ours[0].starts_with("spec.listeners[1].name: \"metrics\""), "{w:?}");
    assert!(w.iter().all(|m| m.chars().count() <= 120), "{w:?}");
    let plain = qdr_api::warnings(&defaults(
        &serde_json::from_value(
            serde_json::json!({"metadata": {"name": "mesh", "namespace": "ns"}, "spec": {}}),
        )
        .unwrap(),
    ));
    assert!(plain.iter().all(|m| !m.contains("PodMonitor")), "{plain:?}");
}

/// Found by `properties.rs`: when the other lists and the liveness port hold every default
/// listener's port (5672, 8080, 5671), `listeners` stays absent instead of becoming an
/// empty list, which `minItems: 1` refuses; the defaulted spec stays valid.
#[test]
fn no_empty_listener_list_when_every_default_port_is_taken() {
    let ic: Interconnect = serde_json::from_value(json!({"metadata": {"name": "router"}, "spec": {
        "deploymentPlan": {"livenessPort": 5672},
        "edgeListeners": [{"port": 5671}], "interRouterListeners": [{"port": 8080}]}}))
    .unwrap();
    assert!(validate(&ic).is_empty(), "{:?}", validate(&ic));
    let once = defaults(&ic);
    assert_eq!(once.spec.listeners, None);
    assert!(validate(&once).is_empty(), "{:?}", validate(&once));
    assert_eq!(defaults(&once).spec, once.spec);
}

/// A disruption budget that allows no eviction is admitted (the API server would take it)
/// but warned about: it blocks every node drain. Percentages count routers rounded up, as
/// the disruption controller does: `99%` available of 3 routers is 3.
#[test]
fn a_disruption_budget_that_blocks_every_drain_is_warned_about() {
    let with = |budget: serde_json::Value| -> Vec<String> {
        let ic: Interconnect = serde_json::from_value(json!({"metadata": {"name": "mesh"},
            "spec": {"deploymentPlan": {"size": 3, "disruptionBudget": budget}}}))
        .unwrap();
        let ic = defaults(&ic);
        assert!(validate(&ic).is_empty(), "{:#?}", validate(&ic));
        qdr_api::warnings(&ic).into_iter().filter(|w| w.contains("disruptionBudget")).collect()
    };
    for blocks in [
        json!({"maxUnavailable": 0}),
        json!({"maxUnavailable": "0%"}),
        json!({"minAvailable": 3}),
        json!({"minAvailable": 4}),
        json!({"minAvailable": "100%"}),
        json!({"minAvailable": "99%"}),
    ] {
        assert_eq!(with(blocks.clone()).len(), 1, "{blocks}");
    }
    for allows in [
        json!({"maxUnavailable": 1}),
        json!({"maxUnavailable": "1%"}),
        json!({"minAvailable": 2}),
        json!({"minAvailable": "66%"}),
        json!({"enabled": false}),
        json!({}),
    ] {
        assert!(with(allows.clone()).is_empty(), "{allows}");
    }
}
