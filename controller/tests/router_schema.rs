//! Every rendered router configuration is one qdrouterd 1.19.0 accepts: the text is parsed
//! the way the router's own `config.py` does (line by line, `#` truncating values), and
//! the result is checked against the router's management schema (`data/qdrouter.json`):
//! known entities and attributes only, values of the right type, enum values from the
//! schema, required attributes present, one `router`, unique names, the role/mode rules,
//! and every value arriving unchanged.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use qdr_api::{Interconnect, defaults, validate};
use qdr_controller::router_config::{Rendered, RouterConfig, router_config};
use serde_json::{Value, json};

type Parsed = Vec<(String, BTreeMap<String, String>)>;

/// The router's `.conf` parser (`Config._parse`), reduced to what matters for acceptance.
fn parse_conf(text: &str) -> Result<Parsed, String> {
    let mut out: Parsed = Vec::new();
    let mut open: Option<(String, BTreeMap<String, String>)> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_suffix('{').map(str::trim) {
            if open.is_some()
                || name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(format!("line {n}: bad section start {line:?}"));
            }
            open = Some((name.to_string(), BTreeMap::new()));
        } else if line == "}" {
            out.push(open.take().ok_or(format!("line {n}: unbalanced }}"))?);
        } else {
            let (k, v) = line.split_once(':').ok_or(format!("line {n}: not key: value: {line:?}"))?;
            let (k, mut v) = (k.trim(), v.trim().to_string());
            if !["pattern", "bindingKey", "hostname"].contains(&k) {
                v = v.split('#').next().unwrap().trim().to_string();
            }
            if v.is_empty() || v.contains('"') || v.contains('\\') || v.starts_with('{') {
                return Err(format!("line {n}: value the parser rejects: {line:?}"));
            }
            open.as_mut().ok_or(format!("line {n}: attribute outside a section"))?.1.insert(k.to_string(), v);
        }
    }
    if open.is_some() {
        return Err("unterminated section".into());
    }
    Ok(out)
}

struct Schema {
    types: serde_json::Map<String, Value>,
}

impl Schema {
    fn load() -> Self {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/qdrouter.json");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        Schema { types: v["entityTypes"].as_object().unwrap().clone() }
    }

    fn type_name(section: &str) -> String {
        match section {
            "address" | "linkRoute" | "autoLink" => format!("router.config.{section}"),
            s => s.to_string(),
        }
    }

    /// Attributes of a type including inherited ones; None unless it is a configuration entity.
    fn attributes(&self, ty: &str) -> Option<serde_json::Map<String, Value>> {
        let mut attrs = serde_json::Map::new();
        let mut cur = Some(ty.to_string());
        let mut config = false;
        while let Some(t) = cur {
            let def = self.types.get(&t)?;
            if t == "configurationEntity" {
                config = true;
            }
            for (k, v) in def["attributes"].as_object().into_iter().flatten() {
                attrs.entry(k.clone()).or_insert(v.clone());
            }
            cur = def.get("extends").and_then(Value::as_str).map(String::from);
        }
        config.then_some(attrs)
    }

    fn check(&self, parsed: &Parsed) -> Vec<String> {
        let mut errors = Vec::new();
        // qdrouterd 1.19: `name` is unique across entities of every type ("sslProfile 'amqps'
        // duplicates unique attribute 'name' from existing listener 'amqps'").
        let mut names: HashSet<String> = HashSet::new();
        let mode = parsed
            .iter()
            .find(|(s, _)| s == "router")
            .and_then(|(_, a)| a.get("mode").cloned())
            .unwrap_or_default();
        if parsed.iter().filter(|(s, _)| s == "router").count() != 1 {
            errors.push("exactly one router section".into());
        }
        for (section, attrs) in parsed {
            let ty = Self::type_name(section);
            let Some(schema) = self.attributes(&ty) else {
                errors.push(format!("unknown entity {section}"));
                continue;
            };
            for (k, v) in attrs {
                let Some(def) = schema.get(k) else {
                    errors.push(format!("{section}: unknown attribute {k}"));
                    continue;
                };
                let ok = match &def["type"] {
                    Value::String(t) if t == "integer" => v.parse::<i64>().is_ok(),
                    Value::String(t) if t == "boolean" => {
                        ["yes", "true", "on", "no", "false", "off"].contains(&v.to_ascii_lowercase().as_str())
                    }
                    Value::String(t) if ["string", "path", "entityId"].contains(&t.as_str()) => true,
                    Value::Array(tags) => tags.iter().any(|t| t == v),
                    other => {
                        errors.push(format!("{section}.{k}: unexpected schema type {other}"));
                        true
                    }
                };
                if !ok {
                    errors.push(format!("{section}.{k}: {v:?} is not a valid {}", def["type"]));
                }
            }
            for (k, def) in &schema {
                if def["required"] == true && k != "type" && k != "identity" && !attrs.contains_key(k) {
                    errors.push(format!("{section}: required attribute {k} missing"));
                }
            }
            if let Some(n) = attrs.get("name")
                && !names.insert(n.clone())
            {
                errors.push(format!("{section}: duplicate name {n} (names are unique across all entities)"));
            }
            // An http listener without a host logs `getaddrinfo(, <port>) failed` at every start.
            if section == "listener"
                && attrs.get("http").is_some_and(|h| h == "true")
                && !attrs.contains_key("host")
            {
                errors.push(format!("{section}: an http listener needs an explicit host"));
            }
            if section == "listener" || section == "connector" {
                let role = attrs.get("role").map(String::as_str).unwrap_or("normal");
                if role == "inter-router" && mode != "interior" {
                    errors.push(format!("{section}: role inter-router needs mode interior"));
                }
                if section == "listener" && role == "edge" && mode == "edge" {
                    errors.push("an edge router may not have an edge listener".into());
                }
            }
        }
        errors
    }
}

/// Renders, parses like the router, checks against the schema, and checks that every
/// value arrived unchanged (nothing truncated by `#`).
fn assert_accepted(cfg: &RouterConfig, what: &str) {
    let text = cfg.render();
    let parsed = parse_conf(&text).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
    let errors = Schema::load().check(&parsed);
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{text}");
    assert_eq!(parsed.len(), cfg.sections.len(), "{what}");
    for ((name, attrs), section) in parsed.iter().zip(&cfg.sections) {
        assert_eq!(name, section.entity);
        for (k, v) in &section.attrs {
            assert_eq!(attrs.get(*k), Some(&v.to_string()), "{what}: {name}.{k} changed on the way in");
        }
    }
}

fn examples() -> Vec<(String, Interconnect)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../api/tests/data/go-operator");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "yaml") {
            let ic: Interconnect = serde_saphyr::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            out.push((p.file_name().unwrap().to_string_lossy().into_owned(), ic));
        }
    }
    out
}

#[test]
fn every_example_renders_a_config_the_router_accepts() {
    for (file, ic) in examples() {
        let d = defaults(&ic);
        assert_accepted(&router_config(&d.spec), &file);
    }
}

#[test]
fn default_interior_config_is_rendered_exactly() {
    let ic: Interconnect = serde_json::from_value(json!({"metadata": {"name": "mesh"}, "spec": {}})).unwrap();
    let text = router_config(&defaults(&ic).spec).render();
    let expected = "router {\n    mode: interior\n    id: ${HOSTNAME}\n}\n\n\
listener {\n    role: normal\n    host: 0.0.0.0\n    port: 5672\n}\n\n\
listener {\n    role: normal\n    host: 0.0.0.0\n    port: 8080\n    http: true\n    authenticatePeer: true\n}\n\n\
listener {\n    role: normal\n    host: 0.0.0.0\n    port: 5671\n    sslProfile: default\n}\n\n\
listener {\n    name: health-and-stats\n    host: 0.0.0.0\n    port: 8888\n    http: true\n    healthz: true\n    metrics: true\n    websockets: false\n    httpRootDir: invalid\n}\n\n\
listener {\n    role: inter-router\n    host: 0.0.0.0\n    port: 55671\n    saslMechanisms: EXTERNAL\n    authenticatePeer: true\n    sslProfile: inter-router\n}\n\n\
listener {\n    role: edge\n    host: 0.0.0.0\n    port: 45672\n}\n\n\
sslProfile {\n    name: default\n    certFile: /etc/qpid-dispatch-certs/default/mesh-default-credentials/tls.crt\n    privateKeyFile: /etc/qpid-dispatch-certs/default/mesh-default-credentials/tls.key\n}\n\n\
sslProfile {\n    name: inter-router\n    certFile: /etc/qpid-dispatch-certs/inter-router/mesh-inter-router-credentials/tls.crt\n    privateKeyFile: /etc/qpid-dispatch-certs/inter-router/mesh-inter-router-credentials/tls.key\n    caCertFile: /etc/qpid-dispatch-certs/inter-router/mesh-inter-router-credentials/ca.crt\n}\n\n\
address {\n    prefix: closest\n    distribution: closest\n}\n\n\
address {\n    prefix: multicast\n    distribution: multicast\n}\n\n\
address {\n    prefix: unicast\n    distribution: closest\n}\n\n\
address {\n    prefix: exclusive\n    distribution: closest\n}\n\n\
address {\n    prefix: broadcast\n    distribution: multicast\n}\n";
    assert_eq!(text, expected);
    assert_eq!(text, router_config(&defaults(&ic).spec).render(), "deterministic");
}

/// Go bug 7: ciphers and protocols were accepted and dropped. Go bug 8: every connector
/// got `verifyHostname: false` unless the user set true.
#[test]
fn ciphers_protocols_and_verify_hostname_are_rendered_as_given() {
    let ic: Interconnect = serde_json::from_value(json!({"metadata": {"name": "m"}, "spec": {
        "sslProfiles": [{"name": "tls", "credentials": "tls", "ciphers": "ECDHE-RSA-AES128-GCM-SHA256", "protocols": "TLSv1.2 TLSv1.3"}],
        "connectors": [{"host": "broker", "port": 5671, "sslProfile": "tls"}, {"host": "b2", "port": 5671, "verifyHostname": false}],
    }}))
    .unwrap();
    let cfg = router_config(&defaults(&ic).spec);
    assert_accepted(&cfg, "ciphers");
    let p = cfg.of("sslProfile").find(|s| s.get("name").unwrap().to_string() == "tls").unwrap();
    assert_eq!(p.get("ciphers").unwrap().to_string(), "ECDHE-RSA-AES128-GCM-SHA256");
    assert_eq!(p.get("protocols").unwrap().to_string(), "TLSv1.2 TLSv1.3");
    let conns: Vec<_> = cfg.of("connector").collect();
    assert_eq!(conns[0].get("verifyHostname"), None, "router default (true) when not set");
    assert_eq!(conns[1].get("verifyHostname").unwrap().to_string(), "false");
}

fn arb_spec() -> impl Strategy<Value = Value> {
    let s = |v: &[&'static str]| prop::sample::select(v.to_vec());
    (
        s(&["interior", "edge"]),
        prop::collection::vec((s(&["amqp", "web", "amqps", "ws", ""]), 1u16..60000, any::<bool>(), s(&["", "default", "tls"])), 1..4),
        prop::collection::vec((s(&["a.#", "b/*", "x.y"]), s(&["closest", "balanced", "multicast"]), 0i32..10), 0..4),
        prop::collection::vec((s(&["q1", "queue.#"]), s(&["in", "out"]), any::<bool>()), 0..3),
        prop::collection::vec((s(&["broker", "10.0.0.1", "::1"]), 1u16..60000, s(&["", "tls"])), 0..3),
        s(&["", "ECDHE-RSA-AES128-GCM-SHA256"]),
    )
        .prop_map(|(role, listeners, addresses, routes, conns, ciphers)| {
            let listeners: Vec<Value> = listeners
                .into_iter()
                .map(|(name, port, http, ssl)| {
                    let mut l = json!({"port": port, "http": http});
                    if !name.is_empty() { l["name"] = json!(name); }
                    if !ssl.is_empty() { l["sslProfile"] = json!(ssl); }
                    l
                })
                .collect();
            let mut tls = json!({"name": "tls", "mutualAuth": true});
            if !ciphers.is_empty() { tls["ciphers"] = json!(ciphers); }
            let conn_list = if role == "edge" { "edgeConnectors" } else { "interRouterConnectors" };
            json!({"metadata": {"name": "gen"}, "spec": {
                "deploymentPlan": {"role": role},
                "listeners": listeners,
                "sslProfiles": [tls],
                "addresses": addresses.into_iter().map(|(p, d, pr)| json!({"pattern": p, "distribution": d, "priority": pr})).collect::<Vec<_>>(),
                "linkRoutes": routes.into_iter().map(|(p, d, c)| if c { json!({"pattern": p, "direction": d, "connection": "broker"}) } else { json!({"pattern": p, "direction": d}) }).collect::<Vec<_>>(),
                conn_list: conns.into_iter().map(|(h, p, s)| if s.is_empty() { json!({"host": h, "port": p}) } else { json!({"host": h, "port": p, "sslProfile": s}) }).collect::<Vec<_>>(),
            }})
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any spec the API accepts renders a configuration the router accepts.
    #[test]
    fn valid_generated_specs_render_accepted_configs(v in arb_spec()) {
        let ic: Interconnect = serde_json::from_value(v).unwrap();
        let d = defaults(&ic);
        prop_assume!(validate(&d).is_empty());
        assert_accepted(&router_config(&d.spec), "generated");
    }
}

/// The checker itself rejects what the router rejects (or silently mangles).
#[test]
fn the_checker_catches_what_the_router_would_refuse() {
    use qdr_controller::router_config::{Section, Value as V};
    let router = |mode: &str| Section { entity: "router", attrs: vec![("mode", V::Str(mode.into()))] };
    let bad = [
        (
            "unknown attribute",
            vec![router("interior"), Section { entity: "listener", attrs: vec![("bogus", V::Int(1))] }],
        ),
        ("bad enum", vec![router("spaceship")]),
        (
            "bad integer",
            vec![
                router("interior"),
                Section {
                    entity: "listener",
                    attrs: vec![("port", V::Str("x".into())), ("maxFrameSize", V::Str("big".into()))],
                },
            ],
        ),
        (
            "missing required",
            vec![
                router("interior"),
                Section { entity: "linkRoute", attrs: vec![("prefix", V::Str("a".into()))] },
            ],
        ),
        (
            "inter-router on edge",
            vec![
                router("edge"),
                Section { entity: "listener", attrs: vec![("role", V::Str("inter-router".into()))] },
            ],
        ),
        ("two routers", vec![router("interior"), router("edge")]),
        (
            "one name on two entity types",
            vec![
                router("interior"),
                Section {
                    entity: "listener",
                    attrs: vec![("name", V::Str("amqps".into())), ("port", V::Int(5671))],
                },
                Section { entity: "sslProfile", attrs: vec![("name", V::Str("amqps".into()))] },
            ],
        ),
        (
            "http listener without host",
            vec![
                router("interior"),
                Section { entity: "listener", attrs: vec![("port", V::Int(8888)), ("http", V::Bool(true))] },
            ],
        ),
        ("unknown entity", vec![router("interior"), Section { entity: "frobnicator", attrs: vec![] }]),
    ];
    for (what, sections) in bad {
        let text = RouterConfig { sections }.render();
        let parsed = parse_conf(&text).unwrap();
        assert!(!Schema::load().check(&parsed).is_empty(), "{what} was not caught:\n{text}");
    }
    // '#' truncates a prefix: the value does not arrive unchanged.
    let cfg = RouterConfig {
        sections: vec![
            router("interior"),
            Section {
                entity: "linkRoute",
                attrs: vec![("prefix", V::Str("a.#.b".into())), ("direction", V::Str("in".into()))],
            },
        ],
    };
    let r = std::panic::catch_unwind(|| assert_accepted(&cfg, "hash"));
    assert!(r.is_err(), "'#' truncation was not caught");
}

/// What the image's `configure.sh` does to the file: GNU `envsubst` with `DOLLAR='$'` and
/// the pod's environment; `$NAME` and `${NAME}` become the variable's value, or nothing.
fn envsubst(text: &str, env: &[(&str, &str)]) -> String {
    let value = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| *v).unwrap_or("");
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (mut out, mut rest) = (String::new(), text);
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(braced) = after.strip_prefix('{')
            && let Some(end) = braced.find('}')
            && braced[..end].chars().all(ident)
            && end > 0
        {
            out.push_str(value(&braced[..end]));
            rest = &braced[end + 1..];
        } else {
            let end = after.find(|c: char| !ident(c)).unwrap_or(after.len());
            if end == 0 {
                out.push('$');
            } else {
                out.push_str(value(&after[..end]));
            }
            rest = &after[end..];
        }
    }
    out.push_str(rest);
    out
}

/// A `$` in any value reaches the router unchanged after the image's `envsubst`; the router
/// id still becomes the pod name.
#[test]
fn dollar_signs_survive_the_images_envsubst() {
    let ic: Interconnect = serde_json::from_value(json!({"metadata": {"name": "m"}, "spec": {
        "addresses": [{"prefix": "$management"}, {"pattern": "a.$x.#"}],
        "linkRoutes": [{"prefix": "$HOME.q", "direction": "in"}],
        "connectors": [{"name": "c", "host": "$HOSTNAME", "port": 5672}],
    }}))
    .unwrap();
    let text = Rendered::of(&qdr_api::defaults(&ic).spec).text;
    assert!(text.contains("prefix: ${DOLLAR}management"), "{text}");
    let expanded = envsubst(&text, &[("DOLLAR", "$"), ("HOSTNAME", "m-0"), ("HOME", "/root")]);
    for line in [
        "    id: m-0",
        "    prefix: $management",
        "    pattern: a.$x.#",
        "    prefix: $HOME.q",
        "    host: $HOSTNAME",
    ] {
        assert!(expanded.lines().any(|l| l == line), "{line:?} missing after envsubst:\n{expanded}");
    }
    let parsed = parse_conf(&expanded).unwrap();
    assert!(Schema::load().check(&parsed).is_empty());
    // Without the escape, envsubst would have eaten the value.
    assert_eq!(envsubst("prefix: $management", &[("DOLLAR", "$")]), "prefix: ");
}
