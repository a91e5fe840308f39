//! What must fit where it is stored: a spec at every list limit, with the longest strings
//! the schema allows, is refused by `validate` with a `TooLong` cause at `spec` giving the
//! measured size and the limit, not stored until etcd answers `request is too large`; a
//! spec whose rendered router configuration would not fit a ConfigMap is refused the same
//! way.

use qdr_api::{
    ErrorType, Interconnect, MAX_CONFIG_BYTES, MAX_SPEC_BYTES, defaults, validate, validate_defaulted,
    validate_defaulted_sized,
};
use serde_json::{Value, json};

/// `maxItems` of each list of the spec, from the CRD.
fn max_items() -> std::collections::BTreeMap<String, usize> {
    let crd = serde_json::to_value(qdr_api::crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    spec.as_object()
        .unwrap()
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.get("maxItems")?.as_u64()? as usize)))
        .collect()
}

fn long(c: char, n: usize) -> String {
    std::iter::repeat_n(c, n).collect()
}

fn interconnect(spec: Value) -> Interconnect {
    serde_json::from_value(json!({"metadata": {"name": "big", "namespace": "ns"}, "spec": spec})).unwrap()
}

/// The size causes of `ic`, which `validate`, `validate_defaulted` and
/// `validate_defaulted_sized` of the defaulted object (the webhook's and the controller's
/// ways) must agree on.
fn size_causes(ic: &Interconnect) -> Vec<String> {
    let causes = |errors: Vec<qdr_api::FieldError>| -> Vec<String> {
        errors
            .into_iter()
            .filter(|e| e.field == "spec" && e.error_type == ErrorType::TooLong)
            .map(|e| e.to_string())
            .collect()
    };
    let effective = defaults(ic);
    assert_eq!(
        validate_defaulted(&effective),
        validate(&effective),
        "validate_defaulted of the defaulted object"
    );
    let spec_len = serde_json::to_vec(&effective.spec).unwrap().len();
    assert_eq!(
        validate_defaulted_sized(&effective, spec_len),
        validate_defaulted(&effective),
        "validate_defaulted_sized given the spec's own JSON length"
    );
    causes(validate(ic))
}

#[test]
fn a_spec_at_every_list_limit_is_refused_with_its_size() {
    let max = max_items();
    let n = |list: &str| *max.get(list).unwrap_or_else(|| panic!("no maxItems for {list}: {max:?}"));
    let host = long('h', 253);
    let mut port = 1000;
    let mut listeners = |list: &str| -> Vec<Value> {
        (0..n(list))
            .map(|_| {
                port += 1;
                json!({"port": port, "host": host, "saslMechanisms": long('S', 256)})
            })
            .collect()
    };
    let (l, irl, el) =
        (listeners("listeners"), listeners("interRouterListeners"), listeners("edgeListeners"));
    let connectors = |list: &str| -> Vec<Value> {
        (0..n(list)).map(|i| json!({"host": long('c', 253), "port": 1 + i})).collect()
    };
    let spec = json!({
        "listeners": l, "interRouterListeners": irl, "edgeListeners": el,
        "connectors": connectors("connectors"), "interRouterConnectors": connectors("interRouterConnectors"),
        "sslProfiles": (0..n("sslProfiles")).map(|i| json!({"name": format!("p{i}"), "ciphers": long('C', 1024), "protocols": long('P', 256)})).collect::<Vec<_>>(),
        "addresses": (0..n("addresses")).map(|i| json!({"prefix": format!("{i}{}", long('a', 1000))})).collect::<Vec<_>>(),
        "autoLinks": (0..n("autoLinks")).map(|_| json!({"address": long('x', 1024), "direction": "in", "externalAddress": long('e', 1024)})).collect::<Vec<_>>(),
        "linkRoutes": (0..n("linkRoutes")).map(|_| json!({"prefix": long('r', 1024), "direction": "in", "addExternalPrefix": long('p', 1024)})).collect::<Vec<_>>(),
    });
    let ic = interconnect(spec);
    let bytes = serde_json::to_vec(&ic.spec).unwrap().len();
    assert!(bytes > MAX_SPEC_BYTES, "the test spec is only {bytes} bytes");
    let causes = size_causes(&ic);
    assert_eq!(causes.len(), 1, "{causes:#?}");
    assert!(
        causes[0].starts_with("spec: Too long: may not be more than 524,288 bytes as JSON"),
        "{}",
        causes[0]
    );
    // The measured size, thousands separated.
    assert!(causes[0].replace(',', "").contains(&format!("(it is {bytes})")), "{}", causes[0]);
    println!("{}", causes[0]);
}

#[test]
fn a_configuration_that_would_not_fit_a_config_map_is_refused() {
    // Each '$' is written as `${DOLLAR}`: 120 prefixes of 1,000 '$' render to about 1.1 MB
    // from a spec of about 125 KB.
    let spec = json!({"addresses": (0..120).map(|i| json!({"prefix": format!("{i}{}", long('$', 1000))})).collect::<Vec<_>>()});
    let ic = interconnect(spec);
    assert!(serde_json::to_vec(&ic.spec).unwrap().len() < MAX_SPEC_BYTES);
    let causes = size_causes(&ic);
    assert_eq!(causes.len(), 1, "{causes:#?}");
    assert!(
        causes[0].starts_with("spec: Too long: the rendered router configuration would be "),
        "{}",
        causes[0]
    );
    assert!(causes[0].contains(&format!("a ConfigMap holds at most {}", "1,048,562")), "{}", causes[0]);
    assert_eq!(MAX_CONFIG_BYTES, 1_048_562);
    println!("{}", causes[0]);
    // Just under the limit: no size cause.
    let spec = json!({"addresses": (0..100).map(|i| json!({"prefix": format!("{i}{}", long('$', 1000))})).collect::<Vec<_>>()});
    assert!(size_causes(&interconnect(spec)).is_empty());
}
