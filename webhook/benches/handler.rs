//! The admission handler alone, in process (no TLS, no HTTP), with criterion: one
//! AdmissionReview body in, the reply's bytes out, for `/validate` and `/mutate`, on a CREATE
//! of the 3-router example (what a saturated webhook spends per review beyond the stack:
//! compare with `qdr-bench`'s requests per CPU-second of the webhook and of the null
//! webhook) and on an UPDATE that changes only labels.

use criterion::{Criterion, criterion_group, criterion_main};
use qdr_webhook::admission::{Checks, Webhook, handle_with};
use serde_json::{Value, json};

fn object() -> Value {
    json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "router-mesh", "namespace": "ns", "uid": "6c1d7c1e-7a4b-4e0e-9a7e-0b3c6f1d2e3f"},
        "spec": {"deploymentPlan": {"size": 3, "role": "interior", "placement": "Any"}}})
}

fn review(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
    let mut request = json!({
        "uid": "00000000-0000-0000-0000-000000000001",
        "kind": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "kind": "Interconnect"},
        "resource": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "resource": "interconnects"},
        "name": "router-mesh", "namespace": "ns", "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object});
    if let Some(old) = old {
        request["oldObject"] = old;
    }
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}),
    )
    .unwrap()
}

fn handler(c: &mut Criterion) {
    let checks = Checks::default();
    let create = review("CREATE", object(), None);
    let mut labelled = object();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    let relabel = review("UPDATE", labelled, Some(object()));
    for (name, body) in [("create", &create), ("update-labels", &relabel)] {
        for webhook in [Webhook::Validate, Webhook::Mutate] {
            let reply = handle_with(webhook, body, &checks);
            assert_eq!(reply.http_status, 200, "{name} {webhook:?}");
            c.bench_function(&format!("{}/{name}", webhook.as_str()), |b| {
                b.iter(|| handle_with(webhook, std::hint::black_box(body), &checks).to_bytes())
            });
        }
    }
}

criterion_group!(benches, handler);
criterion_main!(benches);
