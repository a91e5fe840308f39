//! Every rendered router configuration is one qdrouterd 1.19.0 accepts, after what the
//! router image does to it: the JSON text goes through the image's `expandvars.py` (modelled
//! here: Python's `os.path.expandvars` on every line with a `$` that does not start with
//! `#`) with the container's environment, then is parsed the way the router's `config.py`
//! parses a `.json` file (lines starting with `#` dropped, then JSON), and the result is
//! checked against the router's management schema (`data/qdrouter.json`): known entities
//! and attributes only, values of the right type, enum values from the schema, required
//! attributes present, one `router`, unique names, the role/mode rules, and every value
//! arriving exactly as the spec wrote it.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use qdr_api::router_config::{Rendered, RouterConfig, Value as V, router_config};
use qdr_api::{Interconnect, defaults, validate};
use serde_json::{Value, json};

type Parsed = Vec<(String, BTreeMap<String, Value>)>;

/// The router container's environment as the image's scripts see it: what the controller
/// sets that a configuration could name, and what the image and the kubelet set.
const POD_ENV: &[(&str, &str)] =
    &[("DOLLAR", "$"), ("HOSTNAME", "mesh-7d9f-abcde"), ("HOME", "/"), ("USD", "1.08")];

/// Python's `os.path.expandvars` (posixpath): `$name` (`name` = `[A-Za-z0-9_]+`) and
/// `${name}` (`name` = anything but `}`) become the variable's value when it is set and
/// stay as they are when it is not; scanning resumes after an inserted value, so a value is
/// never expanded again.
fn python_expandvars(line: &str, env: &[(&str, &str)]) -> String {
    let lookup = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after.find(|c: char| !word(c)).unwrap_or(after.len());
            (&after[..end], end)
        };
        match (len, lookup(name)) {
            (0, _) | (_, None) => {
                // Not a reference, or an unknown name: the `$` stays, scanning goes on after it.
                out.push('$');
                rest = after;
            }
            (len, Some(value)) => {
                out.push_str(value);
                rest = &after[len..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The image's `expandvars.py`: [`python_expandvars`] on each line that contains `$` and does
/// not start with `#`.
fn image_expandvars(text: &str, env: &[(&str, &str)]) -> String {
    text.split_inclusive('\n')
        .map(
            |l| {
                if l.contains('$') && !l.starts_with('#') { python_expandvars(l, env) } else { l.to_string() }
            },
        )
        .collect()
}

/// GNU `envsubst` without a shell-format argument (what images before 2019 ran, with
/// `DOLLAR='$'` in their own environment): `$NAME` and `${NAME}` become the variable's
/// value, or nothing when it is unset; single pass.
fn gnu_envsubst(text: &str, env: &[(&str, &str)]) -> String {
    let value = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| *v).unwrap_or("");
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (mut out, mut rest) = (String::new(), text);
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(braced) = after.strip_prefix('{')
            && let Some(end) = braced.find('}')
            && end > 0
            && braced[..end].chars().all(ident)
            && !braced.starts_with(|c: char| c.is_ascii_digit())
        {
            out.push_str(value(&braced[..end]));
            rest = &braced[end + 1..];
        } else {
            let end = after.find(|c: char| !ident(c)).unwrap_or(after.len());
            if end == 0 || after.starts_with(|c: char| c.is_ascii_digit()) {
                out.push('$');
                rest = after;
            } else {
                out.push_str(value(&after[..end]));
                rest = &after[end..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The router's JSON configuration loader (`config.py` for a `.json` file): lines that
/// start with `#` (after white space) are dropped, the rest is a JSON array of
/// `[entity type, {attributes}]`.
fn parse_json(text: &str) -> Result<Parsed, String> {
    let kept: String = text.split_inclusive('\n').filter(|l| !l.trim_start().starts_with('#')).collect();
    let v: Value = serde_json::from_str(&kept).map_err(|e| format!("not JSON: {e}"))?;
    let mut out = Parsed::new();
    for (i, e) in v.as_array().ok_or("not a JSON array")?.iter().enumerate() {
        let pair =
            e.as_array().filter(|p| p.len() == 2).ok_or(format!("entity {i}: not [type, attributes]"))?;
        let ty = pair[0].as_str().ok_or(format!("entity {i}: type is not a string"))?;
        let attrs = pair[1].as_object().ok_or(format!("entity {i}: attributes are not an object"))?;
        out.push((ty.to_string(), attrs.iter().map(|(k, v)| (k.clone(), v.clone())).collect()));
    }
    Ok(out)
}

/// A JSON value as the schema check sees it (qdrouterd coerces strings to its types).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
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
            .and_then(|(_, a)| a.get("mode").map(text))
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
                let v = &text(v);
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
            if let Some(n) = attrs.get("name").map(text)
                && !names.insert(n.clone())
            {
                errors.push(format!("{section}: duplicate name {n} (names are unique across all entities)"));
            }
            // An http listener without a host logs `getaddrinfo(, <port>) failed` at every start.
            if section == "listener"
                && attrs.get("http").is_some_and(|h| text(h) == "true")
                && !attrs.contains_key("host")
            {
                errors.push(format!("{section}: an http listener needs an explicit host"));
            }
            if section == "listener" || section == "connector" {
                let role = attrs.get("role").map(text).unwrap_or_else(|| "normal".into());
                let role = role.as_str();
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

/// What the router should end up with for one attribute: a string as the spec wrote it, an
/// environment reference expanded, numbers and booleans as they are.
fn arrived(v: &V<'_>) -> Value {
    match v {
        V::Str(s) => json!(s),
        V::Env(name) => json!(POD_ENV.iter().find(|(k, _)| k == name).map(|(_, v)| *v).unwrap_or_default()),
        V::Int(i) => json!(i),
        V::Bool(b) => json!(b),
    }
}

/// Renders, runs the image's `expandvars.py` with the pod's environment, parses like the
/// router, checks against the schema, and checks that every value arrived as written.
fn assert_accepted(cfg: &RouterConfig<'_>, what: &str) {
    let rendered = cfg.render();
    let text = image_expandvars(&rendered, POD_ENV);
    let parsed = parse_json(&text).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
    let errors = Schema::load().check(&parsed);
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{text}");
    assert_eq!(parsed.len(), cfg.sections.len(), "{what}");
    for ((name, attrs), section) in parsed.iter().zip(&cfg.sections) {
        assert_eq!(name, section.entity);
        assert_eq!(attrs.len(), section.attrs.len(), "{what}: {name}");
        for (k, v) in &section.attrs {
            assert_eq!(
                attrs.get(*k),
                Some(&arrived(v)),
                "{what}: {name}.{k} changed on the way in:\n{rendered}"
            );
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

/// With the mesh observed, the routers get the operator's management profile and listener
/// (`--observe-mesh=on`): still a configuration the router accepts, with TLS required.
#[test]
fn every_example_with_the_management_listener_renders_a_config_the_router_accepts() {
    use qdr_api::router_config::{MANAGEMENT_PORT, MANAGEMENT_PROFILE};
    let mut checked = 0;
    for (file, mut ic) in examples() {
        ic.metadata.namespace.get_or_insert_with(|| "ns".into());
        ic.metadata.uid = Some("uid-1".into());
        let Ok(valid) = qdr_controller::validated::ValidatedInterconnect::new(&ic) else { continue };
        let (valid, added) = valid.with_management();
        added.unwrap();
        let cfg = router_config(valid.spec()).with_management_listener();
        assert_accepted(&cfg, &file);
        let listener = cfg
            .of("listener")
            .find(|l| l.get("port") == Some(&V::Int(MANAGEMENT_PORT.into())))
            .expect("the management listener");
        for (k, v) in [
            ("requireSsl", V::Bool(true)),
            ("authenticatePeer", V::Bool(false)),
            ("saslMechanisms", V::Str("EXTERNAL".into())),
            ("sslProfile", V::Str(MANAGEMENT_PROFILE.into())),
        ] {
            assert_eq!(listener.get(k), Some(&v), "{file}: {k}");
        }
        let profile = cfg
            .of("sslProfile")
            .find(|p| p.get("name") == Some(&V::Str(MANAGEMENT_PROFILE.into())))
            .expect("the management sslProfile");
        assert!(profile.get("caCertFile").is_some() && profile.get("certFile").is_some(), "{file}");
        checked += 1;
    }
    assert!(checked >= 3, "{checked} examples checked");
}

#[test]
fn default_interior_config_is_rendered_exactly() {
    let ic: Interconnect = serde_json::from_value(json!({"metadata": {"name": "mesh"}, "spec": {}})).unwrap();
    let text = router_config(&defaults(&ic).spec).render();
    let expected = r#"[
  ["router", {"mode": "interior", "id": "${HOSTNAME}"}],
  ["listener", {"name": "qdr-operator-listener-ce33267aa3af", "role": "normal", "host": "0.0.0.0", "port": 5672}],
  ["listener", {"name": "qdr-operator-listener-52f91067dcf6", "role": "normal", "host": "0.0.0.0", "port": 8080, "http": true, "authenticatePeer": true}],
  ["listener", {"name": "qdr-operator-listener-f68a13891d4a", "role": "normal", "host": "0.0.0.0", "port": 5671, "sslProfile": "default"}],
  ["listener", {"name": "health-and-stats", "host": "0.0.0.0", "port": 8888, "http": true, "healthz": true, "metrics": true, "websockets": false, "httpRootDir": "invalid"}],
  ["listener", {"role": "inter-router", "host": "0.0.0.0", "port": 55671, "saslMechanisms": "EXTERNAL", "authenticatePeer": true, "sslProfile": "inter-router"}],
  ["listener", {"role": "edge", "host": "0.0.0.0", "port": 45672}],
  ["sslProfile", {"name": "default", "certFile": "/etc/qpid-dispatch-certs/default/mesh-default-credentials/tls.crt", "privateKeyFile": "/etc/qpid-dispatch-certs/default/mesh-default-credentials/tls.key"}],
  ["sslProfile", {"name": "inter-router", "certFile": "/etc/qpid-dispatch-certs/inter-router/mesh-inter-router-credentials/tls.crt", "privateKeyFile": "/etc/qpid-dispatch-certs/inter-router/mesh-inter-router-credentials/tls.key", "caCertFile": "/etc/qpid-dispatch-certs/inter-router/mesh-inter-router-credentials/ca.crt"}],
  ["address", {"name": "qdr-operator-address-10d765bf3089", "prefix": "closest", "distribution": "closest"}],
  ["address", {"name": "qdr-operator-address-df0ead89b233", "prefix": "multicast", "distribution": "multicast"}],
  ["address", {"name": "qdr-operator-address-1a3fe2a4f007", "prefix": "unicast", "distribution": "closest"}],
  ["address", {"name": "qdr-operator-address-80196e6d1bec", "prefix": "exclusive", "distribution": "closest"}],
  ["address", {"name": "qdr-operator-address-1d1500031e42", "prefix": "broadcast", "distribution": "multicast"}]
]
"#;
    assert_eq!(text, expected);
    assert_eq!(text, router_config(&defaults(&ic).spec).render(), "deterministic");
    assert!(text.lines().all(|l| !l.starts_with('#')), "expandvars.py skips lines starting with '#'");
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
    let effective = defaults(&ic);
    let cfg = router_config(&effective.spec);
    assert_accepted(&cfg, "ciphers");
    let p = cfg.of("sslProfile").find(|s| s.get("name") == Some(&V::Str("tls".into()))).unwrap();
    assert_eq!(p.get("ciphers"), Some(&V::Str("ECDHE-RSA-AES128-GCM-SHA256".into())));
    assert_eq!(p.get("protocols"), Some(&V::Str("TLSv1.2 TLSv1.3".into())));
    let conns: Vec<_> = cfg.of("connector").collect();
    assert_eq!(conns[0].get("verifyHostname"), None, "router default (true) when not set");
    assert_eq!(conns[1].get("verifyHostname"), Some(&V::Bool(false)));
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
    use qdr_api::router_config::Section;
    let router =
        |mode: &'static str| Section { entity: "router", attrs: vec![("mode", V::Str(mode.into()))] };
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
        let parsed = parse_json(&text).unwrap();
        assert!(!Schema::load().check(&parsed).is_empty(), "{what} was not caught:\n{text}");
    }
    // A value the image would change on the way (a `$` written bare) does not arrive as written.
    let mangled = image_expandvars("  [\"address\", {\"prefix\": \"price.$USD\"}]\n", POD_ENV);
    assert_eq!(mangled, "  [\"address\", {\"prefix\": \"price.1.08\"}]\n");
    // And the loader drops a line that starts with '#'.
    assert!(parse_json("[\n# [\"router\", {}]\n]\n").unwrap().is_empty());
}

/// `$` in any value reaches the router exactly as written, through the 1.19.0 image's
/// `expandvars.py` and through an older image's `envsubst` (with its own `DOLLAR='$'`); the
/// router id still becomes the pod name.
#[test]
fn dollar_signs_survive_the_images_variable_expansion() {
    let cases = ["$management.custom", "price.$USD", "a$HOSTNAME", "$$", "trailing$", "${HOME}", "$"];
    let ic: Interconnect = serde_json::from_value(json!({"metadata": {"name": "m"}, "spec": {
        "addresses": cases.iter().map(|p| json!({"prefix": p})).collect::<Vec<_>>(),
        "linkRoutes": [{"pattern": "a.$x.#", "direction": "in"}],
        "connectors": [{"name": "c", "host": "$HOSTNAME", "port": 5672}],
    }}))
    .unwrap();
    let d = qdr_api::defaults(&ic);
    assert!(validate(&d).is_empty(), "{:?}", validate(&d));
    let cfg = router_config(&d.spec);
    let rendered = Rendered::of(&d.spec).text;
    assert!(rendered.contains(r#""prefix": "${DOLLAR}management.custom""#), "{rendered}");
    for (image, expanded) in [
        ("expandvars.py", image_expandvars(&rendered, POD_ENV)),
        ("envsubst", gnu_envsubst(&rendered, POD_ENV)),
    ] {
        let parsed = parse_json(&expanded).unwrap_or_else(|e| panic!("{image}: {e}\n{expanded}"));
        assert!(Schema::load().check(&parsed).is_empty(), "{image}");
        let prefixes: Vec<String> = parsed
            .iter()
            .filter(|(t, _)| t == "address")
            .filter_map(|(_, a)| a.get("prefix").map(text))
            .collect();
        for case in cases {
            assert!(prefixes.iter().any(|p| p == case), "{image}: {case:?} did not arrive: {prefixes:?}");
        }
        let router = &parsed.iter().find(|(t, _)| t == "router").unwrap().1;
        assert_eq!(router["id"], json!("mesh-7d9f-abcde"), "{image}: the router id is the pod name");
        let conn = &parsed.iter().find(|(t, _)| t == "connector").unwrap().1;
        assert_eq!(conn["host"], json!("$HOSTNAME"), "{image}");
        let route = &parsed.iter().find(|(t, _)| t == "linkRoute").unwrap().1;
        assert_eq!(route["pattern"], json!("a.$x.#"), "{image}");
    }
    assert_accepted(&cfg, "dollars");
    // Without the escape each image would have changed the values.
    assert_eq!(python_expandvars("a$HOSTNAME", POD_ENV), "amesh-7d9f-abcde");
    assert_eq!(gnu_envsubst("$management.custom", POD_ENV), ".custom");
}

/// Characters the `.conf` text format cut or refused (`#`, quotes, backslashes, braces, tab,
/// vertical tab, form feed, line breaks, `/*`, `, ]`) arrive intact in the JSON form.
#[test]
fn any_character_but_nul_arrives_intact() {
    let values = [
        "sp ace/*",
        "comma, ]x",
        "tab\there",
        "vt\u{b}ff\u{c}",
        "quote\"back\\slash",
        "{brace}#hash",
        "line\nbreak\r",
    ];
    let cfg = RouterConfig {
        sections: std::iter::once(qdr_api::router_config::Section {
            entity: "router",
            attrs: vec![("mode", V::Str("interior".into())), ("id", V::Env("HOSTNAME"))],
        })
        .chain(values.iter().map(|v| qdr_api::router_config::Section {
            entity: "address",
            attrs: vec![("prefix", V::Str((*v).into()))],
        }))
        .collect(),
    };
    assert_accepted(&cfg, "characters");
}
