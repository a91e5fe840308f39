//! Every shared rule text of `qdr_api::messages` is used by a CEL rule of the CRD and by
//! `validate` for a spec that breaks that rule, so the two cannot drift apart.

use qdr_api::messages as msg;
use qdr_api::{Interconnect, rules, validate};
use serde_json::{Value, json};

fn violations(spec: Value) -> Vec<String> {
    let ic: Interconnect = serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "m", "namespace": "ns"}, "spec": spec}))
    .unwrap();
    validate(&ic).into_iter().map(|e| e.detail).collect()
}

#[test]
fn every_shared_message_is_used_by_cel_and_by_validate() {
    let cases: Vec<(String, Value)> = vec![
        (msg::EVERY_WITHOUT_SIZE.into(), json!({"deploymentPlan": {"placement": "Every", "size": 2}})),
        (
            msg::edge_forbids("interRouterListeners"),
            json!({"deploymentPlan": {"role": "edge"}, "interRouterListeners": [{"port": 1}]}),
        ),
        (msg::INTERIOR_WITHOUT_EDGE_CONNECTORS.into(), json!({"edgeConnectors": [{"host": "h", "port": 1}]})),
        (msg::LISTENER_PORTS_UNIQUE.into(), json!({"listeners": [{"port": 1}, {"port": 1}]})),
        (
            msg::LISTENER_NAMES_UNIQUE.into(),
            json!({"listeners": [{"port": 1, "name": "a"}, {"port": 2, "name": "a"}]}),
        ),
        (
            msg::CONNECTOR_NAMES_UNIQUE.into(),
            json!({"connectors": [{"host": "h", "port": 1, "name": "a"}, {"host": "h", "port": 2, "name": "a"}]}),
        ),
        (msg::SSL_PROFILE_UNDEFINED_HINT.into(), json!({"listeners": [{"port": 1, "sslProfile": "nope"}]})),
        (msg::SSL_PROFILE_NAMES_UNIQUE.into(), json!({"sslProfiles": [{"name": "a"}, {"name": "a"}]})),
        (
            msg::ENTITY_NAMES_UNIQUE.into(),
            json!({"listeners": [{"port": 5671, "name": "amqps", "sslProfile": "amqps"}], "sslProfiles": [{"name": "amqps"}]}),
        ),
        (
            msg::RESERVED_NAME.into(),
            json!({"connectors": [{"name": "qdr-operator-mesh-x", "host": "h", "port": 1}]}),
        ),
        (msg::PREFIX_XOR_PATTERN.into(), json!({"addresses": [{"prefix": "a", "pattern": "b"}]})),
        (
            msg::CONTAINER_ID_XOR_CONNECTION.into(),
            json!({"linkRoutes": [{"prefix": "a", "direction": "in", "containerId": "c", "connection": "d"}]}),
        ),
        (msg::LISTENER_NAME_IANA.into(), json!({"listeners": [{"port": 1, "name": "a--b"}]})),
        (msg::USERS_SECRET_NAME.into(), json!({"users": "Not_A_Secret"})),
        (msg::CONFIG_NUL.into(), json!({"listeners": [{"port": 1, "host": "a\u{0}b"}]})),
        (msg::CONFIG_NUL.into(), json!({"addresses": [{"pattern": "a\u{0}b"}]})),
    ];
    let cel: Vec<String> = rules::cel_rules().into_iter().map(|r| r.message).collect();
    for (text, spec) in cases {
        assert!(cel.iter().any(|m| m.contains(&text)), "no CEL rule says {text:?}");
        let got = violations(spec.clone());
        assert!(got.iter().any(|d| d.contains(&text)), "validate of {spec} does not say {text:?}: {got:#?}");
    }
}
