//! Taking over the Go operator's managed fields, purely: what moves, what stays.

use crate::managed_fields::{union, upgraded};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::{Value, json};

fn entry(manager: &str, operation: &str, subresource: Option<&str>, fields: Value) -> ManagedFieldsEntry {
    serde_json::from_value(json!({
        "manager": manager, "operation": operation, "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
        "fieldsV1": fields, "subresource": subresource, "time": "2020-01-01T00:00:00Z"}))
    .unwrap()
}

#[test]
fn the_go_operators_update_fields_move_into_our_apply_entry() {
    let go = entry(
        "qdr-operator",
        "Update",
        None,
        json!({"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"mesh\"}": {".": {}, "f:env": {"k:{\"name\":\"POD_COUNT\"}": {".": {}}}}}}}}}),
    );
    let kcm =
        entry("kube-controller-manager", "Update", Some("status"), json!({"f:status": {"f:replicas": {}}}));
    let revision = entry(
        "kube-controller-manager",
        "Update",
        None,
        json!({"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}}),
    );
    let ours = entry(
        "qdr-operator",
        "Apply",
        None,
        json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}}}),
    );
    let out = upgraded(&[go.clone(), kcm.clone(), revision.clone(), ours], "qdr-operator").unwrap();
    assert_eq!(out.len(), 3, "the Go entry is gone, the others stay: {out:#?}");
    assert!(out.contains(&kcm) && out.contains(&revision));
    let apply = out.iter().find(|e| e.operation.as_deref() == Some("Apply")).unwrap();
    let f = &apply.fields_v1.as_ref().unwrap().0;
    assert!(f["f:metadata"]["f:labels"].get("f:app").is_some(), "ours kept: {f:#}");
    let container = &f["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"mesh\"}"];
    assert!(container["f:env"].get("k:{\"name\":\"POD_COUNT\"}").is_some(), "Go's taken over: {f:#}");
    assert_eq!(apply.manager.as_deref(), Some("qdr-operator"));

    // Without an Apply entry yet, one is made with the legacy entry's API version.
    let out = upgraded(&[go, kcm.clone()], "qdr-operator").unwrap();
    let apply = out.iter().find(|e| e.operation.as_deref() == Some("Apply")).unwrap();
    assert_eq!(apply.api_version.as_deref(), Some("apps/v1"));
    assert!(apply.fields_v1.as_ref().unwrap().0["f:spec"].get("f:replicas").is_some());
}

#[test]
fn nothing_to_take_over_is_none() {
    let user = entry("kubectl-edit", "Update", None, json!({"f:metadata": {"f:labels": {"f:x": {}}}}));
    let ours = entry("qdr-operator", "Apply", None, json!({"f:spec": {}}));
    let status = entry("qdr-operator", "Update", Some("status"), json!({"f:status": {}}));
    assert_eq!(upgraded(&[user, ours, status], "qdr-operator"), None, "a user's and a status entry stay");
    assert_eq!(upgraded(&[], "qdr-operator"), None);
    let old = entry("before-first-apply", "Update", None, json!({"f:spec": {"f:paused": {}}}));
    assert!(upgraded(&[old], "qdr-operator").is_some(), "before-first-apply is taken over too");
}

#[test]
fn union_merges_field_sets_recursively() {
    let a = json!({"f:a": {".": {}, "f:b": {}}, "f:c": {}});
    let b = json!({"f:a": {"f:d": {}}, "f:e": {}});
    assert_eq!(union(a, &b), json!({"f:a": {".": {}, "f:b": {}, "f:d": {}}, "f:c": {}, "f:e": {}}));
    assert_eq!(union(Value::Null, &b), b);
}
