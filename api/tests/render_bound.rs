//! `rendered_len_bound` is an upper bound of the rendered router configuration's length:
//! the size check skips rendering a spec whose bound fits a ConfigMap, so a bound below the
//! real length would let an oversized configuration through. Checked on random defaulted
//! specs whose every rendered string may hold `$` (9 bytes each once rendered), characters
//! JSON escapes, and multi-byte characters, with every attribute set or not.

use proptest::prelude::*;
use qdr_api::router_config::{rendered_len_bound, router_config};
use qdr_api::{Interconnect, defaults};
use serde_json::{Value, json};

fn text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[a-z0-9$\"\\\\\n\u{1}é-]{0,24}")
}

fn opt_i() -> impl Strategy<Value = Option<i32>> {
    proptest::option::of(any::<i32>())
}

fn opt_b() -> impl Strategy<Value = Option<bool>> {
    proptest::option::of(any::<bool>())
}

fn direction() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![Just("in".to_string()), Just("out".to_string()), "[a-z$]{0,12}"])
}

/// `fields` as a JSON object, without the absent ones.
fn object(fields: Vec<(&str, Value)>) -> Value {
    Value::Object(fields.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.to_string(), v)).collect())
}

fn listener() -> impl Strategy<Value = Value> {
    (text(), text(), any::<i32>(), opt_b(), opt_b(), opt_i(), text(), opt_b(), opt_b(), text(), opt_i())
        .prop_map(|(name, host, port, rc, http, cost, sasl, auth, expose, ssl, cap)| {
            object(vec![
                ("name", json!(name)),
                ("host", json!(host)),
                ("port", json!(port)),
                ("routeContainer", json!(rc)),
                ("http", json!(http)),
                ("cost", json!(cost)),
                ("saslMechanisms", json!(sasl)),
                ("authenticatePeer", json!(auth)),
                ("expose", json!(expose)),
                ("sslProfile", json!(ssl)),
                ("linkCapacity", json!(cap)),
            ])
        })
}

fn connector() -> impl Strategy<Value = Value> {
    (text(), "[a-z$\"é]{0,24}", any::<i32>(), opt_b(), opt_i(), opt_b(), text(), opt_i()).prop_map(
        |(name, host, port, rc, cost, verify, ssl, cap)| {
            object(vec![
                ("name", json!(name)),
                ("host", json!(host)),
                ("port", json!(port)),
                ("routeContainer", json!(rc)),
                ("cost", json!(cost)),
                ("verifyHostname", json!(verify)),
                ("sslProfile", json!(ssl)),
                ("linkCapacity", json!(cap)),
            ])
        },
    )
}

fn ssl_profile() -> impl Strategy<Value = Value> {
    ("[a-z$\"é]{0,24}", text(), text(), opt_b(), opt_b(), opt_b(), text(), text()).prop_map(
        |(name, cred, ca, gen_cred, gen_ca, mutual, ciphers, protocols)| {
            object(vec![
                ("name", json!(name)),
                ("credentials", json!(cred)),
                ("caCert", json!(ca)),
                ("generateCredentials", json!(gen_cred)),
                ("generateCaCert", json!(gen_ca)),
                ("mutualAuth", json!(mutual)),
                ("ciphers", json!(ciphers)),
                ("protocols", json!(protocols)),
            ])
        },
    )
}

fn address() -> impl Strategy<Value = Value> {
    let distribution = proptest::option::of(prop_oneof![
        Just("closest".to_string()),
        Just("multicast".to_string()),
        Just("balanced".to_string()),
        "[a-z$]{0,12}"
    ]);
    (text(), text(), distribution, opt_b(), opt_i(), opt_i(), opt_i(), opt_b()).prop_map(
        |(prefix, pattern, distribution, waypoint, ingress, egress, priority, fallback)| {
            object(vec![
                ("prefix", json!(prefix)),
                ("pattern", json!(pattern)),
                ("distribution", json!(distribution)),
                ("waypoint", json!(waypoint)),
                ("ingressPhase", json!(ingress)),
                ("egressPhase", json!(egress)),
                ("priority", json!(priority)),
                ("enableFallback", json!(fallback)),
            ])
        },
    )
}

fn auto_link() -> impl Strategy<Value = Value> {
    ("[a-z$\"é]{0,24}", direction(), text(), text(), text(), opt_i(), opt_b()).prop_map(
        |(address, direction, container, connection, external, phase, fallback)| {
            object(vec![
                ("address", json!(address)),
                ("direction", json!(direction)),
                ("containerId", json!(container)),
                ("connection", json!(connection)),
                ("externalAddress", json!(external)),
                ("phase", json!(phase)),
                ("fallback", json!(fallback)),
            ])
        },
    )
}

fn link_route() -> impl Strategy<Value = Value> {
    (text(), text(), direction(), text(), text(), text(), text()).prop_map(
        |(prefix, pattern, direction, connection, container, add, del)| {
            object(vec![
                ("prefix", json!(prefix)),
                ("pattern", json!(pattern)),
                ("direction", json!(direction)),
                ("connection", json!(connection)),
                ("containerId", json!(container)),
                ("addExternalPrefix", json!(add)),
                ("delExternalPrefix", json!(del)),
            ])
        },
    )
}

fn list<S: Strategy<Value = Value>>(item: S) -> impl Strategy<Value = Value> {
    proptest::option::of(proptest::collection::vec(item, 0..6)).prop_map(|v| json!(v))
}

fn interconnect() -> impl Strategy<Value = Interconnect> {
    let lists = (
        (list(listener()), list(listener()), list(listener())),
        (list(connector()), list(connector()), list(connector())),
        (list(ssl_profile()), list(address()), list(auto_link()), list(link_route())),
    );
    let plan = (prop_oneof![Just("interior"), Just("edge")], proptest::option::of(any::<i32>()));
    ("[a-z][a-z0-9-]{0,20}", plan, text(), lists).prop_map(
        |(name, (role, liveness), users, ((l, irl, el), (c, irc, ec), (ssl, addr, al, lr)))| {
            let spec = object(vec![
                ("deploymentPlan", json!({"role": role, "livenessPort": liveness})),
                ("users", json!(users)),
                ("listeners", l),
                ("interRouterListeners", irl),
                ("edgeListeners", el),
                ("connectors", c),
                ("interRouterConnectors", irc),
                ("edgeConnectors", ec),
                ("sslProfiles", ssl),
                ("addresses", addr),
                ("autoLinks", al),
                ("linkRoutes", lr),
            ]);
            let ic: Interconnect =
                serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}))
                    .expect("generated objects decode");
            defaults(&ic)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_bound_is_never_below_the_rendered_length(ic in interconnect()) {
        let json_len = serde_json::to_vec(&ic.spec).unwrap().len();
        let rendered = router_config(&ic.spec).rendered_len();
        let bound = rendered_len_bound(&ic.spec, json_len);
        prop_assert!(bound >= rendered, "bound {} < rendered {}\nspec: {:#}", bound, rendered,
            serde_json::to_value(&ic.spec).unwrap());
    }
}

fn bound_and_rendered(spec: Value) -> (usize, usize) {
    let ic: Interconnect =
        serde_json::from_value(json!({"metadata": {"name": "b", "namespace": "ns"}, "spec": spec})).unwrap();
    let ic = defaults(&ic);
    let json_len = serde_json::to_vec(&ic.spec).unwrap().len();
    (rendered_len_bound(&ic.spec, json_len), router_config(&ic.spec).rendered_len())
}

/// The worst cases of each part of the bound: a profile whose names are all `$` (its name
/// written four times, its credentials three, each `$` as 9 bytes), and many items with
/// every attribute set and short values (the per-section part).
#[test]
fn the_bound_holds_where_it_is_tightest() {
    let dollars = "$".repeat(10_000);
    // Generated mutual-auth credentials: the CA file is in the credentials' directory too.
    let (bound, rendered) = bound_and_rendered(json!({"sslProfiles": [{"name": dollars,
        "credentials": dollars, "caCert": "c", "generateCredentials": true, "mutualAuth": true}]}));
    assert!(bound >= rendered, "{bound} < {rendered}");
    assert!(rendered > 630_000, "the case renders {rendered} bytes");
    let listener = json!({"name": "l", "host": "h", "port": -2147483648, "cost": -2147483648,
        "linkCapacity": -2147483648, "routeContainer": true, "http": true, "saslMechanisms": "S",
        "authenticatePeer": true, "sslProfile": "p"});
    let auto_link = json!({"address": "a", "direction": "in", "containerId": "c", "connection": "c",
        "externalAddress": "e", "phase": -2147483648, "fallback": true});
    let (bound, rendered) = bound_and_rendered(json!({
        "listeners": vec![listener.clone(); 100], "interRouterListeners": vec![listener.clone(); 100],
        "edgeListeners": vec![listener; 100], "autoLinks": vec![auto_link; 100]}));
    assert!(bound >= rendered, "{bound} < {rendered}");
}

/// A real spec is far below the limit by the bound alone, so it is never rendered for the
/// size check: the 3-router example, defaulted.
#[test]
fn a_small_spec_needs_no_rendering() {
    let (bound, rendered) =
        bound_and_rendered(json!({"deploymentPlan": {"size": 3, "role": "interior", "placement": "Any"}}));
    assert!(bound >= rendered);
    assert!(bound < qdr_api::MAX_CONFIG_BYTES / 10, "bound {bound}");
}
