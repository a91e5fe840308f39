//! The admission handler on AdmissionReview JSON, with no server: defaulting patches,
//! denials in the API server's shape, warnings and every kind of bad input.

use base64::Engine as _;
use proptest::prelude::*;
use qdr_api::{ImagePattern, ImagePolicy};
use qdr_webhook::admission::{
    Body, Checks, MAX_CAUSES, Outcome, Webhook, add_operations, handle, handle_with, review_json,
};
use serde_json::value::RawValue;
use serde_json::{Value, json};

fn review(op: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "kind": "Interconnect"},
            "resource": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "resource": "interconnects"},
            "name": "mesh", "namespace": "ns", "operation": op, "object": object, "dryRun": false,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        }
    }))
    .unwrap()
}

fn ic(spec: Value) -> Value {
    json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
           "metadata": {"name": "mesh", "namespace": "ns"}, "spec": spec})
}

fn response(op: Webhook, body: &[u8]) -> Value {
    let reply = handle(op, body);
    assert_eq!(reply.http_status, 200, "{reply:?}");
    let Body::Review(r) = &reply.body else { panic!("not a review") };
    let v = review_json(r);
    assert_eq!(
        serde_json::from_slice::<Value>(&reply.to_bytes()).unwrap(),
        v,
        "the bytes sent are that JSON"
    );
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    v["response"].clone()
}

fn patch_of(resp: &Value) -> Option<json_patch::Patch> {
    let b64 = resp.get("patch")?.as_str()?;
    assert_eq!(resp["patchType"], "JSONPatch");
    Some(serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap())
}

#[test]
fn mutate_adds_the_defaults_and_only_adds() {
    let object = ic(json!({"deploymentPlan": {"size": 3}, "unknownField": 1}));
    let resp = response(Webhook::Mutate, &review("CREATE", object.clone()));
    assert_eq!(resp["allowed"], true);
    let patch = patch_of(&resp).expect("a patch");
    for op in &patch.0 {
        assert!(matches!(op, json_patch::PatchOperation::Add(_)), "non-add op {op:?}");
    }
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["spec"]["deploymentPlan"]["size"], 3, "user value kept");
    assert_eq!(patched["spec"]["unknownField"], 1, "nothing removed, not even unknown fields");
    assert_eq!(patched["spec"]["deploymentPlan"]["role"], "interior");
    assert_eq!(patched["spec"]["listeners"].as_array().unwrap().len(), 3);
    // Applying the webhook again, or on an UPDATE of the defaulted object: empty patch.
    for op in ["CREATE", "UPDATE"] {
        let again = response(Webhook::Mutate, &review(op, patched.clone()));
        assert!(patch_of(&again).is_none(), "{op}: {again}");
    }
}

#[test]
fn validate_denies_with_every_cause_like_the_api_server() {
    let object = ic(json!({"deploymentPlan": {"role": "edge", "placement": "Node"},
                           "listeners": [{"port": 0}], "interRouterListeners": [{"port": 55672}]}));
    let resp = response(Webhook::Validate, &review("CREATE", object));
    assert_eq!(resp["allowed"], false);
    let status = &resp["status"];
    assert_eq!(status["code"], 422);
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "Interconnect");
    assert_eq!(status["details"]["group"], "interconnectedcloud.github.io");
    assert_eq!(status["details"]["name"], "mesh");
    let causes = status["details"]["causes"].as_array().unwrap();
    let fields: Vec<&str> = causes.iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(
        fields,
        ["spec.deploymentPlan.placement", "spec.listeners[0].port", "spec.interRouterListeners"]
    );
    assert_eq!(causes[1]["reason"], "FieldValueRequired");
    assert_eq!(causes[1]["message"], "Required value: a port between 1 and 65535 is required");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("Interconnect.interconnectedcloud.github.io \"mesh\" is invalid: ["),
        "{message}"
    );
    for f in fields {
        assert!(message.contains(f), "message lacks {f}: {message}");
    }
}

#[test]
fn validate_allows_a_valid_spec_with_warnings_of_at_most_120_chars() {
    let object = ic(json!({"listeners": [{"port": 5672, "expose": true}], "issuer": "old"}));
    let resp = response(Webhook::Validate, &review("CREATE", object));
    assert_eq!(resp["allowed"], true, "{resp}");
    let warnings: Vec<&str> =
        resp["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    assert!(
        warnings.contains(
            &"spec.listeners[0]: exposed outside the cluster without TLS (no sslProfile); add one or set expose: false"
        ),
        "{warnings:#?}"
    );
    assert!(warnings.contains(
        &"spec.listeners[0]: exposed outside the cluster without authenticatePeer; set it or expose: false"
    ));
    assert!(warnings.iter().any(|w| w.starts_with("spec.issuer: deprecated")));
    assert!(warnings.iter().all(|w| w.chars().count() <= 120));
}

/// A risky state is announced once: at the write that introduces it (a create, or the update
/// that makes it risky), not again on every later update that leaves it as it was. The
/// defaulted console listener of a minimal spec is exposed without TLS: warned about at
/// create, not when the next update changes something else.
#[test]
fn a_warning_is_given_once_by_the_write_that_introduces_it() {
    let minimal = ic(json!({}));
    let created = response(Webhook::Mutate, &review("CREATE", minimal.clone()));
    let patch = patch_of(&created).expect("the defaults");
    let mut stored = minimal.clone();
    json_patch::patch(&mut stored, &patch).unwrap();
    let create = response(Webhook::Validate, &review("CREATE", stored.clone()));
    let warns = |r: &serde_json::Value| -> Vec<String> {
        r["warnings"].as_array().into_iter().flatten().map(|w| w.as_str().unwrap().to_string()).collect()
    };
    let exposed = |w: &[String]| w.iter().any(|w| w.contains("exposed outside the cluster without TLS"));
    assert!(exposed(&warns(&create)), "announced at create: {create}");
    // An update that changes something else: not again.
    let mut updated = stored.clone();
    updated["spec"]["addresses"].as_array_mut().unwrap().push(json!({"prefix": "orders"}));
    let second = response(Webhook::Validate, &update(updated.clone(), stored.clone()));
    assert_eq!(second["allowed"], true, "{second}");
    assert!(!exposed(&warns(&second)), "not repeated: {second}");
    // An update that exposes another listener without TLS: that one is announced.
    let mut risky = updated.clone();
    risky["spec"]["listeners"].as_array_mut().unwrap().push(json!({"port": 6000, "expose": true}));
    let third = response(Webhook::Validate, &update(risky, updated));
    let w = warns(&third);
    assert_eq!(
        w.iter().filter(|w| w.contains("exposed outside the cluster without TLS")).count(),
        1,
        "{w:#?}"
    );
}

#[test]
fn a_type_error_is_a_field_error_not_a_crash() {
    let object = ic(json!({"listeners": [{"port": "amqp"}]}));
    let resp = response(Webhook::Validate, &review("CREATE", object.clone()));
    assert_eq!(resp["status"]["code"], 422);
    assert_eq!(resp["status"]["details"]["causes"][0]["field"], "spec.listeners[0].port");
    // The defaulting webhook leaves it to validation.
    let m = response(Webhook::Mutate, &review("CREATE", object));
    assert_eq!(m["allowed"], true);
    assert!(m.get("patch").is_none());
}

#[test]
fn bad_reviews_get_clear_errors() {
    let text = |body: &[u8]| {
        let r = handle(Webhook::Validate, body);
        assert_eq!(r.http_status, 400);
        assert_eq!(r.outcome, Outcome::BadRequest);
        match r.body {
            Body::Text(t) => t,
            Body::Review(v) => panic!("expected text, got {v:?}"),
        }
    };
    assert!(text(b"{not json").starts_with("malformed JSON"));
    assert!(text(b"[]").contains("expected an admission.k8s.io/v1 AdmissionReview"));
    assert!(
        text(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#).contains("v1beta1")
    );
    assert_eq!(
        text(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
        "AdmissionReview has no request"
    );
    assert!(
        text(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#)
            .contains("uid")
    );

    // Reviews with a uid are answered in-band.
    let mut other: Value = serde_json::from_slice(&review("CREATE", ic(json!({})))).unwrap();
    other["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    let resp = response(Webhook::Validate, &serde_json::to_vec(&other).unwrap());
    assert_eq!(resp["allowed"], false);
    assert_eq!(resp["status"]["code"], 400);
    let mut missing: Value = serde_json::from_slice(&review("CREATE", ic(json!({})))).unwrap();
    missing["request"].as_object_mut().unwrap().remove("object");
    let resp = response(Webhook::Validate, &serde_json::to_vec(&missing).unwrap());
    assert_eq!(resp["status"]["message"], "request.object is missing");
    let resp = response(Webhook::Validate, &review("DELETE", Value::Null));
    assert_eq!(resp["allowed"], true);
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "[a-zA-Z0-9#{}\"\\\\ .-]{0,12}".prop_map(Value::String),
        prop::sample::select(vec!["edge", "Every", "port", "5672", "default"]).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop::sample::select(vec![
            "spec",
            "deploymentPlan",
            "listeners",
            "port",
            "name",
            "sslProfiles",
            "role",
            "placement",
            "size",
            "addresses",
            "prefix",
            "pattern",
            "connectors",
            "host",
            "edgeConnectors",
            "linkRoutes",
            "direction",
            "users",
            "x",
        ]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// `base` with what `extra` has beyond it: missing object members added (recursively), a
/// longer array's tail appended; what `base` has is kept.
fn overlay(base: &Value, extra: &Value) -> Value {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            let mut out = b.clone();
            for (k, v) in e {
                let merged = match b.get(k) {
                    Some(old) => overlay(old, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(b), Value::Array(e)) => {
            let mut out: Vec<Value> = b.iter().zip(e).map(|(b, e)| overlay(b, e)).collect();
            out.extend(b.iter().skip(e.len()).cloned());
            out.extend(e.iter().skip(b.len()).cloned());
            Value::Array(out)
        }
        _ => base.clone(),
    }
}

/// What the defaulting patch must be: `json_patch::diff`'s `add` operations.
fn adds_of_diff(before: &Value, after: &Value) -> Vec<json_patch::PatchOperation> {
    json_patch::diff(before, after)
        .0
        .into_iter()
        .filter(|op| matches!(op, json_patch::PatchOperation::Add(_)))
        .collect()
}

fn parsed_adds(before: &Value, after: Value) -> Vec<json_patch::PatchOperation> {
    let raw = |v: &Value| serde_json::value::to_raw_value(v).unwrap();
    let text = add_operations(&raw(before), &raw(&after));
    if text.is_empty() { Vec::new() } else { serde_json::from_slice(&text).expect("JSON Patch text") }
}

#[test]
fn add_operations_escape_pointer_tokens() {
    let (before, after) = (
        json!({"a": {}, "q\"\\": [1]}),
        json!({"a": {"x/y": 1, "t~": [2]}, "b": null, "q\"\\": [1, {"c": 3}]}),
    );
    let ours = parsed_adds(&before, after.clone());
    assert_eq!(ours, adds_of_diff(&before, &after));
    let mut patched = before.clone();
    json_patch::patch(&mut patched, &json_patch::Patch(ours)).unwrap();
    assert_eq!(patched, after);
}

/// Names are compared decoded, whatever their escapes and member order in either text (the
/// API server's encoder escapes `<`, `>` and `&`; serde_json writes a struct's fields in
/// declaration order), and the added values are `after`'s own text.
#[test]
fn add_operations_compare_decoded_names_in_any_order() {
    let before = RawValue::from_string(r#"{"z":{"a\u003cb":1,"k":[1]},"q\/r":true}"#.into()).unwrap();
    let after =
        RawValue::from_string(r#"{"q/r":true,"z":{"k":[1, 2],"a<b":1,"new":{"x" : 1}},"b":null}"#.into())
            .unwrap();
    let text = String::from_utf8(add_operations(&before, &after)).unwrap();
    assert_eq!(
        text,
        r#"[{"op":"add","path":"/b","value":null},{"op":"add","path":"/z/k/1","value":2},{"op":"add","path":"/z/new","value":{"x" : 1}}]"#
    );
    let (b, a): (Value, Value) =
        (serde_json::from_str(before.get()).unwrap(), serde_json::from_str(after.get()).unwrap());
    let ops: Vec<json_patch::PatchOperation> = serde_json::from_str(&text).unwrap();
    assert_eq!(ops, adds_of_diff(&b, &a));
    assert!(add_operations(&after, &after).is_empty(), "equal texts add nothing");
}

/// Of duplicate names the last one written counts, as in `serde_json::Map` (which the API
/// server's decoding of the object agrees with: the last wins), on either side.
#[test]
fn add_operations_take_the_last_of_duplicate_names() {
    let before = RawValue::from_string(r#"{"a":{"x":1},"b":1,"a":{"y":1}}"#.into()).unwrap();
    let after =
        RawValue::from_string(r#"{"a":{"y":1,"z":2},"c":{"k":1},"c":{"k":2},"a":{"x":1,"y":1}}"#.into())
            .unwrap();
    let text = String::from_utf8(add_operations(&before, &after)).unwrap();
    assert_eq!(text, r#"[{"op":"add","path":"/a/x","value":1},{"op":"add","path":"/c","value":{"k":2}}]"#);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    /// The defaulting patch, written in one pass, is `json_patch::diff`'s adds exactly:
    /// for unrelated values and for a value with members added at every depth.
    #[test]
    fn add_operations_are_the_adds_of_json_patch_diff(before in arb_json(), other in arb_json()) {
        prop_assert_eq!(parsed_adds(&before, other.clone()), adds_of_diff(&before, &other));
        let after = overlay(&before, &other);
        let ours = parsed_adds(&before, after.clone());
        prop_assert_eq!(&ours, &adds_of_diff(&before, &after));
        let mut patched = before.clone();
        json_patch::patch(&mut patched, &json_patch::Patch(ours)).unwrap();
        prop_assert_eq!(patched, after);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for op in [Webhook::Mutate, Webhook::Validate] {
            let r = handle(op, &bytes);
            prop_assert!(r.http_status == 200 || r.http_status == 400);
        }
    }

    #[test]
    fn arbitrary_objects_never_panic_and_always_answer(spec in arb_json(), meta in arb_json()) {
        let mut object = ic(spec);
        object["metadata"] = meta;
        for op in [Webhook::Mutate, Webhook::Validate] {
            let r = handle(op, &review("CREATE", object.clone()));
            prop_assert_eq!(r.http_status, 200);
            let Body::Review(v) = r.body else { panic!("review expected") };
            prop_assert!(review_json(&v)["response"]["allowed"].is_boolean());
        }
    }
}

/// The defaulting webhook denies invalid objects with every cause, because it runs before
/// the API server's schema checks, which would hide the rest.
#[test]
fn mutate_denies_invalid_objects_with_every_cause() {
    let object = ic(json!({"deploymentPlan": {"role": "edge", "placement": "Node"},
                           "listeners": [{"port": 5672}, {"port": 5672}], "interRouterListeners": [{"port": 55672}]}));
    let resp = response(Webhook::Mutate, &review("CREATE", object));
    assert_eq!(resp["allowed"], false);
    assert_eq!(resp["status"]["code"], 422);
    let fields: Vec<&str> = resp["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["spec.deploymentPlan.placement", "spec.interRouterListeners", "spec.listeners[1].port"]
    );
}

/// A request with a uid whose body does not decode (malformed `metadata`, which the API
/// server never sends) is answered in-band, not with an HTTP error.
#[test]
fn a_request_that_does_not_decode_is_answered_in_band() {
    let mut r: Value = serde_json::from_slice(&review("CREATE", ic(json!({})))).unwrap();
    r["request"]["object"]["metadata"] = json!({"name": 5});
    for op in [Webhook::Mutate, Webhook::Validate] {
        let resp = response(op, &serde_json::to_vec(&r).unwrap());
        assert_eq!(resp["allowed"], false);
        assert_eq!(resp["status"]["code"], 400);
        assert!(resp["status"]["message"].as_str().unwrap().contains("does not decode"), "{resp}");
    }
}

/// UPDATE reviews carry `oldObject`; both decode, and a valid update is admitted.
#[test]
fn update_reviews_with_an_old_object_are_decoded() {
    let mut r: Value =
        serde_json::from_slice(&review("UPDATE", ic(json!({"deploymentPlan": {"size": 2}})))).unwrap();
    r["request"]["oldObject"] = ic(json!({"deploymentPlan": {"size": 1}}));
    let body = serde_json::to_vec(&r).unwrap();
    let typed: kube::core::admission::AdmissionReview<kube::core::DynamicObject> =
        serde_json::from_slice(&body).unwrap();
    let req: kube::core::admission::AdmissionRequest<_> = typed.try_into().unwrap();
    assert_eq!(req.operation, kube::core::admission::Operation::Update);
    assert_eq!(req.old_object.unwrap().data["spec"]["deploymentPlan"]["size"], 1);
    assert_eq!(response(Webhook::Validate, &body)["allowed"], true);
}

/// An UPDATE review of `object` over the stored `old`.
fn update(object: Value, old: Value) -> Vec<u8> {
    let mut r: Value = serde_json::from_slice(&review("UPDATE", object)).unwrap();
    r["request"]["oldObject"] = old;
    serde_json::to_vec(&r).unwrap()
}

/// Like the Go operator's example G: an interior router with edgeConnectors (and its
/// defaults written into the spec).
fn go_g() -> Value {
    ic(json!({"deploymentPlan": {"size": 3, "role": "interior", "placement": "Any", "livenessPort": 8888},
              "edgeConnectors": [{"name": "up", "host": "edge.example", "port": 45672}]}))
}

fn causes(resp: &Value) -> Vec<String> {
    resp["status"]["details"]["causes"]
        .as_array()
        .map(|c| c.iter().map(|c| c["field"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn metadata_only_updates_of_a_stored_invalid_object_are_admitted_with_warnings() {
    let stored = go_g();
    for change in [
        json!({"labels": {"team": "a"}}),
        json!({"annotations": {"note": "x"}}),
        json!({"finalizers": ["example.com/hold"]}),
    ] {
        let mut new = stored.clone();
        for (k, v) in change.as_object().unwrap() {
            new["metadata"][k] = v.clone();
        }
        let m = response(Webhook::Mutate, &update(new.clone(), stored.clone()));
        assert_eq!(m["allowed"], true, "{m}");
        assert!(m.get("patch").is_none(), "a metadata-only update is never patched: {m}");
        let v = response(Webhook::Validate, &update(new, stored.clone()));
        assert_eq!(v["allowed"], true, "{v}");
        let warnings = v["warnings"].as_array().unwrap();
        assert!(
            warnings.iter().any(|w| w.as_str().unwrap().starts_with("spec.edgeConnectors: Forbidden")),
            "{v}"
        );
        assert!(warnings.iter().all(|w| w.as_str().unwrap().chars().count() <= 120));
    }
    // Removing a finalizer: the same.
    let mut held = stored.clone();
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(response(Webhook::Validate, &update(stored.clone(), held))["allowed"], true);
}

#[test]
fn a_spec_update_is_denied_only_for_what_it_introduces() {
    let stored = go_g();
    // A harmless change (size) keeps the old violation: admitted, the violation as a warning.
    let mut bigger = stored.clone();
    bigger["spec"]["deploymentPlan"]["size"] = json!(4);
    for w in [Webhook::Mutate, Webhook::Validate] {
        let resp = response(w, &update(bigger.clone(), stored.clone()));
        assert_eq!(resp["allowed"], true, "{w:?}: {resp}");
    }
    // A new violation (duplicate port) is denied, naming only that cause.
    let mut worse = stored.clone();
    worse["spec"]["listeners"] = json!([{"port": 5672}, {"port": 5672}]);
    for w in [Webhook::Mutate, Webhook::Validate] {
        let resp = response(w, &update(worse.clone(), stored.clone()));
        assert_eq!(resp["allowed"], false, "{w:?}");
        assert_eq!(causes(&resp), ["spec.listeners[1].port"], "{w:?}: {resp}");
    }
    // A cause that shows no value (Forbidden) is carried only while the value at its path
    // is unchanged: editing the forbidden list is a new violation...
    let mut moved = stored.clone();
    moved["spec"]["edgeConnectors"][0]["host"] = json!("other.example");
    let resp = response(Webhook::Validate, &update(moved, stored.clone()));
    assert_eq!(resp["allowed"], false, "{resp}");
    assert_eq!(causes(&resp), ["spec.edgeConnectors"]);
    // ...but a violation whose offending value changes is a changed violation: denied.
    let mut dup = stored.clone();
    dup["spec"]["listeners"] = json!([{"port": 5672}, {"port": 5672}]);
    let mut dup2 = dup.clone();
    dup2["spec"]["listeners"] = json!([{"port": 5673}, {"port": 5673}]);
    let resp = response(Webhook::Validate, &update(dup2, dup.clone()));
    assert_eq!(resp["allowed"], false, "{resp}");
    assert_eq!(causes(&resp), ["spec.listeners[1].port"]);
    // Fixing it is admitted, without warnings about it.
    let mut fixed = stored.clone();
    fixed["spec"].as_object_mut().unwrap().remove("edgeConnectors");
    let resp = response(Webhook::Validate, &update(fixed, stored.clone()));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp.get("warnings").is_none_or(|w| !w.to_string().contains("edgeConnectors")), "{resp}");
    // A valid stored object gets no leniency: the same change is denied on CREATE.
    let resp = response(Webhook::Validate, &review("CREATE", bigger));
    assert_eq!(resp["allowed"], false);
}

#[test]
fn generate_name_creates_are_admitted_and_get_no_name_derived_defaults() {
    let object = json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"generateName": "mesh-", "namespace": "ns"},
        "spec": {"sslProfiles": [{"name": "tls", "mutualAuth": true}],
                 "listeners": [{"port": 5671, "sslProfile": "tls"}]}});
    let mut r: Value = serde_json::from_slice(&review("CREATE", object.clone())).unwrap();
    r["request"]["name"] = json!("");
    let body = serde_json::to_vec(&r).unwrap();
    let v = response(Webhook::Validate, &body);
    assert_eq!(v["allowed"], true, "{v}");
    let m = response(Webhook::Mutate, &body);
    assert_eq!(m["allowed"], true, "{m}");
    let mut doc = object.clone();
    json_patch::patch(&mut doc, &patch_of(&m).unwrap()).unwrap();
    assert!(doc["spec"].get("users").is_none(), "no `-users`: {doc:#}");
    assert!(doc["spec"]["sslProfiles"][0].get("credentials").is_none(), "{doc:#}");
    assert_eq!(doc["spec"]["deploymentPlan"]["size"], 1, "other defaults are added");
    // A generateName too long for a Service name is still caught (under the stand-in name).
    let long = "m".repeat(70);
    let mut r2 = r.clone();
    r2["request"]["object"]["metadata"]["generateName"] = json!(long);
    let v = response(Webhook::Validate, &serde_json::to_vec(&r2).unwrap());
    assert_eq!(v["allowed"], true, "cut to 58 + 5 = 63 characters, as the server does: {v}");
}

#[test]
fn stored_violations_are_followed_by_item_not_by_index() {
    // Two listeners naming a profile that does not exist (stored before the rule).
    let stored = ic(json!({"listeners": [
        {"name": "plain", "port": 5672},
        {"name": "a", "port": 5673, "sslProfile": "gone"},
        {"name": "b", "port": 5674, "sslProfile": "gone"}]}));
    let with = |l: Value| ic(json!({"listeners": l}));
    // Deleting the earlier, valid listener moves both violations one index down: admitted.
    let deleted = with(json!([{"name": "a", "port": 5673, "sslProfile": "gone"},
                              {"name": "b", "port": 5674, "sslProfile": "gone"}]));
    let resp = response(Webhook::Validate, &update(deleted, stored.clone()));
    assert_eq!(resp["allowed"], true, "{resp}");
    // Fixing one of the two: admitted, the other carried as a warning.
    let fixed = with(json!([{"name": "plain", "port": 5672}, {"name": "a", "port": 5673},
                            {"name": "b", "port": 5674, "sslProfile": "gone"}]));
    let resp = response(Webhook::Validate, &update(fixed, stored.clone()));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp["warnings"].to_string().contains("spec.listeners[2].sslProfile"), "{resp}");
    // Moving one: admitted.
    let moved =
        with(json!([{"name": "b", "port": 5674, "sslProfile": "gone"}, {"name": "plain", "port": 5672},
                            {"name": "a", "port": 5673, "sslProfile": "gone"}]));
    assert_eq!(response(Webhook::Validate, &update(moved, stored.clone()))["allowed"], true);
    // The valid listener made to name the missing profile: a new violation, denied.
    let worse = with(json!([{"name": "plain", "port": 5672, "sslProfile": "gone"},
                            {"name": "a", "port": 5673, "sslProfile": "gone"},
                            {"name": "b", "port": 5674, "sslProfile": "gone"}]));
    let resp = response(Webhook::Validate, &update(worse, stored));
    assert_eq!(resp["allowed"], false);
    assert_eq!(causes(&resp), ["spec.listeners[0].sslProfile"]);
}

fn checks(patterns: &[&str]) -> Checks {
    Checks {
        images: ImagePolicy::only(patterns.iter().map(|p| ImagePattern::parse(p).unwrap()).collect()),
        ..Checks::default()
    }
}

fn review_of(reply: &qdr_webhook::Reply) -> Value {
    let Body::Review(r) = &reply.body else { panic!("not a review: {reply:?}") };
    review_json(r)["response"].clone()
}

/// `--allowed-router-images`: a set image must match; an absent one is the controller's
/// default; a stored image outside the policy is ratcheted like any stored violation.
#[test]
fn the_image_policy_denies_at_the_image_field_and_ratchets() {
    let policy = checks(&["registry.example.com/*"]);
    let with_image = |image: &str| ic(json!({"deploymentPlan": {"image": image}}));
    for op in [Webhook::Mutate, Webhook::Validate] {
        let denied = handle_with(op, &review("CREATE", with_image("evil.io/qdr:1")), &policy);
        let resp = review_of(&denied);
        assert_eq!(resp["allowed"], false, "{op:?}");
        assert_eq!(causes(&resp), ["spec.deploymentPlan.image"]);
        assert_eq!(resp["status"]["details"]["causes"][0]["reason"], "FieldValueForbidden");
        let ok = handle_with(op, &review("CREATE", with_image("registry.example.com/qdr:1")), &policy);
        assert_eq!(review_of(&ok)["allowed"], true, "{op:?}");
        assert_eq!(review_of(&handle_with(op, &review("CREATE", ic(json!({}))), &policy))["allowed"], true);
        // The default policy admits any image, as the Go operator.
        assert_eq!(review_of(&handle(op, &review("CREATE", with_image("evil.io/qdr:1"))))["allowed"], true);
    }
    // Stored before the policy: other spec changes are admitted with a warning.
    let mut stored = with_image("evil.io/qdr:1");
    let mut changed = stored.clone();
    changed["spec"]["deploymentPlan"]["size"] = json!(2);
    let resp = review_of(&handle_with(Webhook::Validate, &update(changed.clone(), stored.clone()), &policy));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(
        resp["warnings"][0].as_str().unwrap().starts_with("spec.deploymentPlan.image: Forbidden"),
        "{resp}"
    );
    // Another disallowed image is a new violation.
    changed["spec"]["deploymentPlan"]["image"] = json!("evil.io/qdr:2");
    let resp = review_of(&handle_with(Webhook::Validate, &update(changed.clone(), stored.clone()), &policy));
    assert_eq!(resp["allowed"], false, "{resp}");
    // Moving to an allowed image fixes it.
    changed["spec"]["deploymentPlan"]["image"] = json!("registry.example.com/qdr:1");
    stored["spec"]["deploymentPlan"]["size"] = json!(1);
    let resp = review_of(&handle_with(Webhook::Validate, &update(changed, stored), &policy));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp.get("warnings").is_none(), "{resp}");
}

/// A spec with a list longer than any the CRD admits is refused before it is decoded, at
/// the list's path; the defaulting webhook leaves it to validation.
#[test]
fn lists_over_the_crds_largest_are_refused_at_their_path() {
    let listeners: Vec<Value> = (0..2000).map(|_| json!({})).collect();
    let body = review("CREATE", ic(json!({"listeners": listeners})));
    let resp = review_of(&handle(Webhook::Validate, &body));
    assert_eq!(resp["allowed"], false);
    assert_eq!(causes(&resp), ["spec.listeners"]);
    assert_eq!(resp["status"]["details"]["causes"][0]["reason"], "FieldValueTooMany");
    let resp = review_of(&handle(Webhook::Mutate, &body));
    assert_eq!(resp["allowed"], true);
    assert!(resp.get("patch").is_none());
}

fn pending_refs(reply: &qdr_webhook::Reply) -> Vec<(String, String)> {
    reply.pending.as_ref().map(|p| p.references.clone()).unwrap_or_default()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(f, n)| (f.to_string(), n.to_string())).collect()
}

/// Which references a review leaves to authorize: every one on CREATE (generated names
/// included), on UPDATE only the Secrets the stored object did not name, or all of them
/// when the image changes; none for metadata-only updates.
#[test]
fn references_to_authorize_follow_what_the_write_changes() {
    let spec = json!({"users": "u", "sslProfiles": [{"name": "p", "credentials": "c", "caCert": "ca"}]});
    let create = handle(Webhook::Validate, &review("CREATE", ic(spec.clone())));
    assert_eq!(
        pending_refs(&create),
        pairs(&[
            ("spec.users", "u"),
            ("spec.sslProfiles[0].credentials", "c"),
            ("spec.sslProfiles[0].caCert", "ca"),
            // The profiles the default listeners use, with their generated Secrets.
            ("spec.sslProfiles[1].credentials", "mesh-default-credentials"),
            ("spec.sslProfiles[2].credentials", "mesh-inter-router-credentials"),
            ("spec.sslProfiles[2].caCert", "mesh-inter-router-ca"),
            ("spec.deploymentPlan.issuer", "mesh-ca"),
        ])
    );
    let p = create.pending.as_ref().unwrap();
    assert_eq!(p.user.username.as_deref(), Some("kubernetes-admin"));
    assert_eq!(p.namespace, "ns");
    assert_eq!(p.secrets().len(), 7);
    // The defaulting webhook leaves it to the validating one unless it denies.
    assert_eq!(handle(Webhook::Mutate, &review("CREATE", ic(spec.clone()))).pending, None);
    let defaults = handle(Webhook::Validate, &review("CREATE", ic(json!({}))));
    let names: Vec<String> = pending_refs(&defaults).into_iter().map(|(_, n)| n).collect();
    assert!(names.contains(&"mesh-users".into()) && names.contains(&"mesh-ca".into()), "{names:?}");

    let stored = ic(spec.clone());
    let mut resized = stored.clone();
    resized["spec"]["deploymentPlan"] = json!({"size": 3});
    assert_eq!(handle(Webhook::Validate, &update(resized, stored.clone())).pending, None);
    let mut relabelled = stored.clone();
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    assert_eq!(handle(Webhook::Validate, &update(relabelled, stored.clone())).pending, None);
    let mut new_ref = stored.clone();
    new_ref["spec"]["sslProfiles"][0]["credentials"] = json!("other");
    assert_eq!(
        pending_refs(&handle(Webhook::Validate, &update(new_ref, stored.clone()))),
        pairs(&[("spec.sslProfiles[0].credentials", "other")])
    );
    let mut new_image = stored.clone();
    new_image["spec"]["deploymentPlan"] = json!({"image": "mine:1"});
    assert_eq!(pending_refs(&handle(Webhook::Validate, &update(new_image, stored))).len(), 7);
}

/// An UPDATE is checked again for every Secret whose use grows, not only for new names: the
/// generated issuer `<name>-ca` once a profile makes it sign, a name moved from `caCert` to
/// `issuer`, a `caCert` that starts signing its profile's generated credentials. Moving a
/// profile (same uses) checks nothing.
#[test]
fn a_secret_whose_use_grows_is_checked_again() {
    let spec = json!({"deploymentPlan": {"role": "edge"}, "listeners": [{"port": 5672}], "users": "u",
                      "sslProfiles": [{"name": "p", "caCert": "shared"}]});
    let stored = ic(spec.clone());
    let create = handle(Webhook::Validate, &review("CREATE", stored.clone()));
    assert_eq!(
        pending_refs(&create),
        pairs(&[("spec.users", "u"), ("spec.sslProfiles[0].caCert", "shared")]),
        "nothing is generated, so nothing signs"
    );
    // A profile with generated credentials: the generated issuer starts to sign.
    let mut signing = stored.clone();
    signing["spec"]["sslProfiles"] =
        json!([{"name": "p", "caCert": "shared"}, {"name": "q", "generateCredentials": true}]);
    let refs = pending_refs(&handle(Webhook::Validate, &update(signing, stored.clone())));
    assert!(refs.contains(&("spec.deploymentPlan.issuer".into(), "mesh-ca".into())), "{refs:?}");
    // The trusted CA becomes the issuer.
    let mut issuer = stored.clone();
    issuer["spec"]["deploymentPlan"]["issuer"] = json!("shared");
    assert_eq!(
        pending_refs(&handle(Webhook::Validate, &update(issuer, stored.clone()))),
        pairs(&[("spec.deploymentPlan.issuer", "shared")])
    );
    // The trusted CA starts signing its profile's generated credentials.
    let mut mutual = stored.clone();
    mutual["spec"]["sslProfiles"] =
        json!([{"name": "p", "caCert": "shared", "mutualAuth": true, "generateCredentials": true}]);
    let refs = pending_refs(&handle(Webhook::Validate, &update(mutual, stored.clone())));
    assert!(refs.contains(&("spec.sslProfiles[0].caCert".into(), "shared".into())), "{refs:?}");
    // The users Secret named as credentials: a new use of the same name.
    let mut moved = stored.clone();
    moved["spec"]["sslProfiles"] = json!([{"name": "p", "caCert": "shared", "credentials": "u"}]);
    assert_eq!(
        pending_refs(&handle(Webhook::Validate, &update(moved, stored.clone()))),
        pairs(&[("spec.sslProfiles[0].credentials", "u")])
    );
    // The same uses in another order: nothing to check.
    let two = json!([{"name": "p", "caCert": "shared"}, {"name": "r", "caCert": "other"}]);
    let mut before = stored.clone();
    before["spec"]["sslProfiles"] = two.clone();
    let mut after = stored;
    after["spec"]["sslProfiles"] = json!([two[1], two[0]]);
    assert_eq!(handle(Webhook::Validate, &update(after, before)).pending, None);
}

/// The reply once the references are checked: unchanged when all are readable; otherwise a
/// 422 with a Forbidden cause per field naming an unreadable Secret, after the other
/// violations; 500 when the checks could not be made.
#[test]
fn unreadable_references_deny_each_field_that_names_one() {
    let spec = json!({"users": "u", "sslProfiles": [{"name": "p", "credentials": "c", "caCert": "u"}]});
    let reply = handle(Webhook::Validate, &review("CREATE", ic(spec.clone())));
    let allowed = reply.clone().authorized(&Default::default());
    assert_eq!(review_of(&allowed)["allowed"], true);
    assert_eq!(allowed.pending, None);
    let denied = reply.clone().authorized(&["u".to_string()].into());
    let resp = review_of(&denied);
    assert_eq!(resp["allowed"], false);
    assert_eq!(resp["status"]["code"], 422);
    assert_eq!(causes(&resp), ["spec.users", "spec.sslProfiles[0].caCert"]);
    let message = resp["status"]["details"]["causes"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(r#"Forbidden: user "kubernetes-admin" may not get Secret "u" in namespace "ns""#),
        "{message}"
    );
    assert_eq!(denied.outcome, Outcome::Denied);
    // With other violations: every cause at once.
    let mut bad = spec.clone();
    bad["deploymentPlan"] = json!({"role": "edge"});
    bad["interRouterListeners"] = json!([{"port": 55672}]);
    let resp = review_of(
        &handle(Webhook::Validate, &review("CREATE", ic(bad))).authorized(&["c".to_string()].into()),
    );
    assert_eq!(causes(&resp), ["spec.interRouterListeners", "spec.sslProfiles[0].credentials"]);
    let failed = reply.unauthorizable("connection refused");
    let resp = review_of(&failed);
    assert_eq!((resp["allowed"].clone(), resp["status"]["code"].clone()), (json!(false), json!(500)));
    assert!(resp["status"]["message"].as_str().unwrap().ends_with("connection refused"));
}

/// A spec with more violations than [`MAX_CAUSES`] is denied with the first ones and a last
/// cause counting them; a huge offending value is cut in the message.
#[test]
fn denials_stay_small_whatever_the_spec() {
    let listeners: Vec<Value> =
        (0..300).map(|i| json!({"name": format!("l{i}"), "port": 70000 + i})).collect();
    let resp = response(Webhook::Validate, &review("CREATE", ic(json!({"listeners": listeners}))));
    let causes = resp["status"]["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), MAX_CAUSES + 1);
    let last = causes.last().unwrap();
    assert_eq!(last["reason"], "FieldValueTooMany");
    assert!(last["message"].as_str().unwrap().starts_with("Too many: "), "{last}");
    let body = review("CREATE", ic(json!({"deploymentPlan": {"image": "x".repeat(1000)}})));
    let out = handle(Webhook::Validate, &body).to_bytes();
    assert!(out.len() < 16 * 1024, "{} bytes answered", out.len());
}

/// A review of `kind` (`group`, `resource`) for the links-across-clusters tests.
fn kind_review(group: &str, kind: &str, resource: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "name": "x", "namespace": "ns", "operation": "CREATE", "object": object, "dryRun": false,
            "userInfo": {"username": "kubernetes-admin"},
        }
    }))
    .unwrap()
}

#[test]
fn a_link_is_checked_on_its_own_then_left_to_the_server_to_judge_against_its_token() {
    use qdr_api::links::token::*;
    let link = |spec: Value| {
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Link",
               "metadata": {"name": "to-hub", "namespace": "ns"}, "spec": spec})
    };
    let bad = kind_review(
        "interconnectedcloud.github.io",
        "Link",
        "links",
        link(json!({"interconnect": "Spoke", "tokenSecret": "", "cost": 0})),
    );
    let resp = response(Webhook::Validate, &bad);
    assert_eq!(resp["allowed"], false);
    let fields: Vec<&str> = resp["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.interconnect", "spec.tokenSecret", "spec.cost"]);
    assert_eq!(resp["status"]["details"]["kind"], "Link");

    let good = kind_review(
        "interconnectedcloud.github.io",
        "Link",
        "links",
        link(json!({"interconnect": "spoke", "tokenSecret": "hub-token"})),
    );
    let reply = handle(Webhook::Validate, &good);
    let pending = reply.link.clone().expect("judged against its token by the server");
    assert_eq!(
        (pending.token_secret(), pending.interconnect(), pending.namespace.as_str()),
        ("hub-token", "spoke", "ns")
    );
    let now = "2026-11-29T00:00:00Z".parse().unwrap();
    let pem = |label: &str| format!("-----BEGIN {label}-----\nMIIB\n-----END {label}-----\n");
    let token: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "hub-token", "annotations": {ROLE_ANNOTATION: "edge",
            ENDPOINTS_ANNOTATION: "hub.example:45671", SITE_ANNOTATION: "b"}},
        "type": TOKEN_TYPE,
        "data": {CA_KEY: base64::engine::general_purpose::STANDARD.encode(pem("CERTIFICATE")),
                 CERT_KEY: base64::engine::general_purpose::STANDARD.encode(pem("CERTIFICATE")),
                 KEY_KEY: base64::engine::general_purpose::STANDARD.encode(pem("PRIVATE KEY"))}
    }))
    .unwrap();
    let judged = |interior| {
        let r = pending.judged(Some(&token), interior, now);
        let Body::Review(r) = &r.body else { panic!("not a review") };
        review_json(r)["response"].clone()
    };
    let wrong = judged(Some(true));
    assert_eq!(wrong["allowed"], false);
    assert!(
        wrong["status"]["message"].as_str().unwrap().contains("an edge token links an edge Interconnect"),
        "{wrong}"
    );
    assert_eq!(wrong["status"]["details"]["causes"][0]["field"], "spec.tokenSecret");
    assert_eq!(judged(Some(false))["allowed"], true, "an edge token on an edge Interconnect");
    assert_eq!(judged(None)["allowed"], true, "an Interconnect applied later");
    let r = pending.judged(None, Some(true), now);
    let Body::Review(r) = &r.body else { panic!("not a review") };
    assert!(review_json(r)["response"]["status"]["message"].as_str().unwrap().contains("no such Secret"));
}

#[test]
fn a_token_secret_is_refused_with_every_problem_and_other_secrets_pass() {
    use qdr_api::links::token::*;
    let secret = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": TOKEN_TYPE,
               "metadata": {"name": "t", "namespace": "ns", "labels": labels,
                            "annotations": {ROLE_ANNOTATION: "inter-router", EXPIRES_ANNOTATION: "2020-01-01T00:00:00Z"}},
               "data": {}})
    };
    let resp = response(
        Webhook::Validate,
        &kind_review("", "Secret", "secrets", secret(json!({TOKEN_LABEL: "true"}))),
    );
    assert_eq!(resp["allowed"], false);
    let fields: Vec<&str> = resp["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    for f in [
        "metadata.annotations[interconnectedcloud.github.io/token-endpoints]",
        "metadata.annotations[interconnectedcloud.github.io/token-expires]",
        "metadata.annotations[interconnectedcloud.github.io/token-site]",
        "data[ca.crt]",
        "data[tls.crt]",
        "data[tls.key]",
    ] {
        assert!(fields.contains(&f), "{f} not in {fields:?}");
    }
    assert_eq!(
        resp["status"]["message"].as_str().unwrap().split(':').next().unwrap(),
        "Secret \"t\" is invalid"
    );
    let other =
        response(Webhook::Validate, &kind_review("", "Secret", "secrets", secret(json!({"app": "x"}))));
    assert_eq!(other["allowed"], true, "a Secret not labelled as a token is not judged");
}
