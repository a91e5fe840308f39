//! Every object the Go operator's last CRD (`qdr-operator.v0.4.0`) could store passes this
//! CRD's schema, as OLM checks it before replacing a CRD (the `openAPIV3Schema` alone, not
//! its CEL rules): random objects drawn from the Go schema (`api/data/`), with the values it
//! admitted and our rules refuse (`placement: Node`, listener names that are no IANA service
//! names, port 0, any `serviceType`, names with capitals, the Go status), are judged by both.
//! Those the Go schema admits must draw no schema error and no unknown field (which the API
//! server would prune, changing the object on its next write) from ours, except in
//! `resources`, whose values are drawn as quantities (the one exception, `qdr_api::legacy`:
//! a Go object with another value never ran); this CRD's CEL
//! rules, which the API server and the webhook apply to new and changed objects, still
//! refuse what our rules refuse. `QDR_LEGACY_CASES` sets the number of objects.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use qdr_api::offline::{Check, OfflineValidator};
use serde_json::{Map, Value, json};

/// splitmix64: a small deterministic generator (no dependency for a test).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// Strings the Go schema admitted (at most 63 characters: this CRD's size bound for names).
fn strings() -> Vec<String> {
    let mut s: Vec<String> = [
        "",
        "a",
        "amqp",
        "AMQP_Listener",
        "my.router",
        "-x",
        "Not A Secret!",
        "5672",
        "Node",
        "clusterIP",
        "in",
        "out",
        "inter-router-listener",
        "0.0.0.0",
        "ANONYMOUS PLAIN",
    ]
    .map(String::from)
    .to_vec();
    s.push("x".repeat(63));
    s
}

/// Integers the Go schema admitted where it set no bound (within int32).
const INTEGERS: [i64; 8] = [0, -1, 1, 9, 5672, 65536, 2_147_483_647, -2_147_483_648];

/// A value `schema` (the Go operator's) admits.
fn draw(rng: &mut Rng, schema: &Value) -> Value {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return rng.pick(values);
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") if schema.get("format").and_then(Value::as_str) == Some("date-time") => {
            json!("2020-04-16T10:00:00Z")
        }
        Some("object") => {
            let required = qdr_api::legacy::required(schema);
            let mut out = Map::new();
            for (k, v) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
                if required.contains(&k.as_str()) || rng.chance(50) {
                    // The one exception (qdr_api::legacy): resources are quantities, as every
                    // Go object that ran had (the API server refused its Deployment otherwise).
                    let value = match k.as_str() {
                        "cpu" | "memory" => json!(rng.pick(&["500m", "1", "0.5", "128Mi", "2Gi"])),
                        _ => draw(rng, v),
                    };
                    out.insert(k.clone(), value);
                }
            }
            Value::Object(out)
        }
        Some("array") => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
            let n = min + rng.below(3);
            Value::Array((0..n).map(|_| draw(rng, &schema["items"])).collect())
        }
        Some("string") => json!(rng.pick(&strings())),
        Some("integer") => match (
            schema.get("minimum").and_then(Value::as_i64),
            schema.get("maximum").and_then(Value::as_i64),
        ) {
            (Some(lo), Some(hi)) => json!(lo + rng.below((hi - lo + 1) as usize) as i64),
            _ => json!(rng.pick(&INTEGERS)),
        },
        Some("boolean") => json!(rng.chance(50)),
        other => panic!("the Go schema has a type {other:?}"),
    }
}

/// A CRD of the Go operator's schema, to check the generator against. Its conditions'
/// `transitionTime` is declared `type: object, format: date-time`, and the API server took
/// the RFC 3339 string the Go operator sent (its type check skips a string with a format):
/// declared a string here, as the offline validator does not emulate that.
fn go_crd() -> CustomResourceDefinition {
    let mut schema = qdr_api::legacy::go_schema();
    schema["properties"]["status"]["properties"]["conditions"]["items"]["properties"]["transitionTime"]["type"] =
        json!("string");
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "interconnects.interconnectedcloud.github.io"},
        "spec": {"group": "interconnectedcloud.github.io", "scope": "Namespaced",
                 "names": {"kind": "Interconnect", "plural": "interconnects"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": schema}}]}
    }))
    .unwrap()
}

#[test]
fn every_object_the_go_operator_could_store_passes_this_crds_schema() {
    let cases: u64 = std::env::var("QDR_LEGACY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let (ours, go) = (OfflineValidator::default(), OfflineValidator::for_crd(&go_crd()).unwrap());
    let go_schema = qdr_api::legacy::go_schema();
    let mut refused_by_cel = 0;
    for case in 0..cases {
        let mut rng = Rng(case);
        let mut object = draw(&mut rng, &go_schema);
        object["apiVersion"] = json!("interconnectedcloud.github.io/v1alpha1");
        object["kind"] = json!("Interconnect");
        object["metadata"] = json!({"name": rng.pick(&["legacy", "my.router", "1router", "Router"])});
        let go_errors: Vec<String> = go.check(&object).iter().map(ToString::to_string).collect();
        assert!(
            go_errors.is_empty(),
            "case {case}: the generator drew what the Go schema refuses: {go_errors:?}\n{object}"
        );
        // The Go status's `revNumber` and `phase` are not this CRD's: the controller replaces
        // the Go status with its own on its first write (OLM's check does not refuse unknown
        // fields; the API server prunes them on that write).
        let schema_errors: Vec<String> = (ours.check(&object).iter())
            .filter(|e| e.check == Check::Schema && !e.path.starts_with("status."))
            .map(ToString::to_string)
            .collect();
        assert!(
            schema_errors.is_empty(),
            "case {case}: a Go operator's object that this CRD's schema refuses or prunes (OLM fails the upgrade; \
             move the rule to CEL, qdr_api::legacy): {schema_errors:?}\n{object}"
        );
        if ours.check(&object).iter().any(|e| e.check == Check::Cel) {
            refused_by_cel += 1;
        }
    }
    // The rules still hold for new and changed objects: most drawn objects break one.
    assert!(refused_by_cel * 2 > cases, "only {refused_by_cel} of {cases} refused by CEL");
}

/// The values the issue names, as the API server judges a new object by the CEL rules that
/// replace the schema's: `placement: Node`, a listener name that is no IANA service name, a
/// listener without a port, an unsupported `serviceType`, a name with a dot.
#[test]
fn the_moved_rules_still_refuse_new_objects() {
    let ours = OfflineValidator::default();
    for (spec, name, at) in [
        (json!({"deploymentPlan": {"placement": "Node"}}), "legacy", "spec.deploymentPlan.placement"),
        (json!({"listeners": [{"port": 5672, "name": "AMQP_Listener"}]}), "legacy", "spec.listeners[0].name"),
        (json!({"listeners": [{"name": "amqp"}]}), "legacy", "spec.listeners[0].port"),
        (
            json!({"deploymentPlan": {"serviceType": "clusterIP"}}),
            "legacy",
            "spec.deploymentPlan.serviceType",
        ),
        (json!({}), "my.router", "metadata.name"),
    ] {
        let object = json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                            "metadata": {"name": name}, "spec": spec});
        let errors = ours.check(&object);
        assert!(errors.iter().all(|e| e.check == Check::Cel), "{errors:?}");
        assert!(errors.iter().any(|e| e.path == at), "no CEL error at {at}: {errors:?}");
    }
}
