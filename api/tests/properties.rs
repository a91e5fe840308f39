//! Properties over generated specs:
//! * `validate` and the API server's own checks (schema + CEL, evaluated offline) agree on
//!   whether a spec is valid;
//! * `defaults` is idempotent, and a valid spec stays valid once defaulted.
//!
//! Values are drawn from small pools that straddle every rule's boundary (ports that
//! collide, names that break IANA rules, strings with `#`, roles against lists, ...), so
//! that valid and invalid specs both occur often.

use proptest::prelude::*;
use proptest::sample::select;
use qdr_api::offline::OfflineValidator;
use qdr_api::{Interconnect, defaults, validate};
use serde_json::{Map, Value, json};

fn opt<T: Clone + std::fmt::Debug + 'static>(values: Vec<T>) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.5, select(values))
}

/// A value that is usually from `good` and sometimes (1 in 20) from `bad`.
fn pick(good: Vec<Value>, bad: Vec<Value>) -> BoxedStrategy<Value> {
    prop_oneof![19 => select(good), 1 => select(bad)].boxed()
}

/// `pick`, present half the time.
fn maybe(good: Vec<Value>, bad: Vec<Value>) -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.5, pick(good, bad))
}

fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    }
    Value::Object(m)
}

fn s(v: &[&str]) -> Vec<Value> {
    v.iter().map(|x| json!(x)).collect()
}
fn n(v: &[i64]) -> Vec<Value> {
    v.iter().map(|x| json!(x)).collect()
}
fn b() -> Vec<Value> {
    vec![json!(true), json!(false)]
}

fn ports() -> Vec<Value> {
    let mut v = n(&[5672, 5671, 8080, 55671, 45672]);
    v.extend((20000..20040).map(|p| json!(p)));
    v
}

fn listener() -> impl Strategy<Value = Value> {
    (
        pick(ports(), n(&[0, 8888, 70000])),
        maybe(
            s(&["amqp", "console", "amqps", "inter", "edge", "web"]),
            s(&["AMQP", "5672", "port-20001", "a--b", "abcdefghijklmnop"]),
        ),
        maybe(s(&["0.0.0.0", "::1", "router.local"]), s(&["a#b", "x\"y", ""])),
        maybe(s(&["default", "inter-router", "tls"]), s(&["missing"])),
        maybe(s(&["EXTERNAL", "PLAIN ANONYMOUS"]), s(&["A{B}"])),
        maybe(n(&[1, 5]), n(&[0])),
        opt(b()),
    )
        .prop_map(|(port, name, host, ssl, sasl, cost, expose)| {
            object(vec![
                ("port", Some(port)),
                ("name", name),
                ("host", host),
                ("sslProfile", ssl),
                ("saslMechanisms", sasl),
                ("cost", cost),
                ("expose", expose),
            ])
        })
}

fn connector() -> impl Strategy<Value = Value> {
    (
        pick(s(&["broker", "1.1.1.1", "mesh.example"]), s(&["", "a\"b"])),
        pick(n(&[5672, 5671, 45672, 55671]), n(&[0, 70000])),
        maybe(s(&["peer", "other", "uplink", "broker"]), s(&["Peer"])),
        maybe(s(&["default", "tls"]), s(&["missing"])),
        opt(b()),
    )
        .prop_map(|(host, port, name, ssl, verify)| {
            object(vec![
                ("host", Some(host)),
                ("port", Some(port)),
                ("name", name),
                ("sslProfile", ssl),
                ("verifyHostname", verify),
            ])
        })
}

fn ssl_profile() -> impl Strategy<Value = Value> {
    (
        pick(s(&["tls", "default", "inter-router", "amqps", "web"]), s(&["Bad", ""])),
        maybe(s(&["tls-secret", "amqps-crt"]), s(&["Bad_Name"])),
        maybe(s(&["ca-secret"]), s(&["CA"])),
        opt(b()),
        maybe(s(&["TLSv1.2 TLSv1.3"]), s(&["x#y"])),
    )
        .prop_map(|(name, cred, ca, mutual, protocols)| {
            object(vec![
                ("name", Some(name)),
                ("credentials", cred),
                ("caCert", ca),
                ("mutualAuth", mutual),
                ("protocols", protocols),
            ])
        })
}

/// Exactly one of prefix and pattern, usually.
fn prefix_or_pattern() -> impl Strategy<Value = (Option<Value>, Option<Value>)> {
    prop_oneof![
        9 => pick(s(&["queue", "topic.a", "exclusive"]), s(&["a#b", ""])).prop_map(|p| (Some(p), None)),
        9 => pick(s(&["a.#", "q.*", "x/*/#"]), s(&["q\"x"])).prop_map(|p| (None, Some(p))),
        1 => Just((Some(json!("a")), Some(json!("b.*")))),
        1 => Just((None, None)),
    ]
}

fn address() -> impl Strategy<Value = Value> {
    (
        prefix_or_pattern(),
        maybe(s(&["closest", "balanced", "multicast"]), s(&["random"])),
        maybe(n(&[0, 4, 9]), n(&[10, -1])),
    )
        .prop_map(|((prefix, pattern), dist, priority)| {
            object(vec![
                ("prefix", prefix),
                ("pattern", pattern),
                ("distribution", dist),
                ("priority", priority),
            ])
        })
}

/// At most one of containerId and connection, usually.
fn target() -> impl Strategy<Value = (Option<Value>, Option<Value>)> {
    prop_oneof![
        6 => Just((Some(json!("broker")), None)),
        6 => Just((None, Some(json!("conn")))),
        6 => Just((None, None)),
        1 => Just((Some(json!("broker")), Some(json!("conn")))),
    ]
}

fn link_route() -> impl Strategy<Value = Value> {
    (prefix_or_pattern(), pick(s(&["in", "out"]), s(&["both"])), target()).prop_map(
        |((prefix, pattern), dir, (cid, conn))| {
            object(vec![
                ("prefix", prefix),
                ("pattern", pattern),
                ("direction", Some(dir)),
                ("containerId", cid),
                ("connection", conn),
            ])
        },
    )
}

fn auto_link() -> impl Strategy<Value = Value> {
    (
        pick(s(&["queue", "orders"]), s(&["", "x{y"])),
        pick(s(&["in", "out"]), s(&["up"])),
        target(),
        maybe(n(&[0, 9]), n(&[10])),
    )
        .prop_map(|(addr, dir, (cid, conn), phase)| {
            object(vec![
                ("address", Some(addr)),
                ("direction", Some(dir)),
                ("containerId", cid),
                ("connection", conn),
                ("phase", phase),
            ])
        })
}

fn list<S: Strategy<Value = Value>>(item: S, max: usize) -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.5, prop::collection::vec(item, 0..=max).prop_map(Value::Array))
}

fn interconnect() -> impl Strategy<Value = Value> {
    let plan = (
        maybe(s(&["interior", "edge"]), s(&["hub"])),
        maybe(s(&["Any", "Every", "AntiAffinity"]), s(&["Node"])),
        maybe(n(&[1, 3, 16]), n(&[0, 17])),
        maybe(n(&[8888, 9090, 5672]), n(&[70000])),
        maybe(s(&["ClusterIP", "LoadBalancer"]), s(&["ExternalName"])),
    )
        .prop_map(|(role, placement, size, lp, st)| {
            object(vec![
                ("role", role),
                ("placement", placement),
                ("size", size),
                ("livenessPort", lp),
                ("serviceType", st),
            ])
        });
    let lists = (
        list(listener(), 2),
        list(listener(), 1),
        list(listener(), 1),
        list(connector(), 2),
        list(connector(), 1),
        list(connector(), 1),
        list(ssl_profile(), 2),
    );
    let config = (list(address(), 3), list(link_route(), 2), list(auto_link(), 2));
    (
        pick(s(&["router", "mesh-1", "edge-a"]), s(&["Router", "1router"])),
        prop::option::weighted(0.8, plan),
        maybe(s(&["none", "None", "my-users"]), s(&["Bad!"])),
        lists,
        config,
    )
        .prop_map(|(name, plan, users, (l, irl, el, c, irc, ec, ssl), (addr, lr, al))| {
            json!({
                "apiVersion": "interconnectedcloud.github.io/v1alpha1",
                "kind": "Interconnect",
                "metadata": {"name": name},
                "spec": object(vec![
                    ("deploymentPlan", plan),
                    ("users", users),
                    ("listeners", l),
                    ("interRouterListeners", irl),
                    ("edgeListeners", el),
                    ("connectors", c),
                    ("interRouterConnectors", irc),
                    ("edgeConnectors", ec),
                    ("sslProfiles", ssl),
                    ("addresses", addr),
                    ("linkRoutes", lr),
                    ("autoLinks", al),
                ]),
            })
        })
}

fn decode(v: &Value) -> Interconnect {
    serde_json::from_value(v.clone()).expect("generated objects decode")
}

thread_local! {
    static OFFLINE: OfflineValidator = OfflineValidator::default();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn validate_agrees_with_schema_and_cel(obj in interconnect()) {
        // Validate-only rules have no schema or CEL counterpart (see the API reference).
        let ours: Vec<_> = validate(&decode(&obj))
            .into_iter()
            .filter(|e| e.detail != qdr_api::messages::GENERATED_PORT_NAME_TAKEN)
            .collect();
        let server = OFFLINE.with(|o| o.check(&obj));
        prop_assert_eq!(
            ours.is_empty(),
            server.is_empty(),
            "validate: {:#?}\nserver: {:#?}\nobject: {:#}",
            ours.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            server.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            obj
        );
    }

    #[test]
    fn defaults_are_idempotent_and_keep_valid_specs_valid(obj in interconnect()) {
        let ic = decode(&obj);
        let once = defaults(&ic);
        let twice = defaults(&once);
        prop_assert_eq!(&once.spec, &twice.spec, "defaults is not idempotent");
        if validate(&ic).is_empty() {
            let errs = validate(&once);
            prop_assert!(errs.is_empty(), "defaults made a valid spec invalid: {:#?}", errs);
            let json = serde_json::to_value(&once).unwrap();
            let server = OFFLINE.with(|o| o.check(&json));
            prop_assert!(server.is_empty(), "the defaulted spec fails the CRD: {:#?}", server);
        }
    }
}

/// The agreement property means little unless both verdicts occur often: check the mix.
#[test]
fn generator_produces_both_valid_and_invalid_specs() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = interconnect();
    let (mut valid, total) = (0, 2000);
    for _ in 0..total {
        let obj = strategy.new_tree(&mut runner).unwrap().current();
        if validate(&decode(&obj)).is_empty() {
            valid += 1;
        }
    }
    eprintln!("{valid} of {total} generated specs are valid");
    assert!(valid * 10 >= total, "fewer than 10% valid: {valid}/{total}");
    assert!(valid * 10 <= total * 9, "more than 90% valid: {valid}/{total}");
}
