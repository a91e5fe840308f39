//! What the benchmarks send: the small and the large Interconnect, an AdmissionReview, the
//! Interconnect as a dynamic object (plain, defaulted, with users), and clients of the
//! control plane as a given user. Pure data and constructors, no measurement.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use qdr_tests::ControlPlane;
use serde_json::{Value, json};

pub(crate) fn small() -> qdr_api::Interconnect {
    serde_json::from_value(json!({"metadata": {"name": "router-mesh", "namespace": "ns"},
        "spec": {"deploymentPlan": {"size": 3, "role": "interior", "placement": "Any"}}}))
    .unwrap()
}

/// Every list near its maxItems.
pub(crate) fn large() -> qdr_api::Interconnect {
    let listeners: Vec<Value> = (0..30)
        .map(|i| json!({"name": format!("l{i}"), "port": 10000 + i, "sslProfile": format!("p{}", i % 30)}))
        .collect();
    let conns = |base: i32, n: i32| {
        (0..n).map(|i| json!({"name": format!("c{}", base + i), "host": format!("h{i}.example"), "port": 20000 + base + i})).collect::<Vec<_>>()
    };
    let spec = json!({
        "deploymentPlan": {"size": 3},
        "listeners": listeners,
        "interRouterListeners": [{"port": 55671, "sslProfile": "p0"}],
        "edgeListeners": [{"port": 45672}],
        "sslProfiles": (0..30).map(|i| json!({"name": format!("p{i}"), "mutualAuth": i % 2 == 0})).collect::<Vec<_>>(),
        "connectors": conns(0, 60),
        "interRouterConnectors": conns(100, 60),
        "addresses": (0..250).map(|i| json!({"prefix": format!("a{i}"), "distribution": "closest"})).collect::<Vec<_>>(),
        "autoLinks": (0..250).map(|i| json!({"address": format!("q{i}"), "direction": "in", "connection": "c0"})).collect::<Vec<_>>(),
        "linkRoutes": (0..250).map(|i| json!({"prefix": format!("r{i}"), "direction": "out", "containerId": "broker"})).collect::<Vec<_>>(),
    });
    let ic: qdr_api::Interconnect =
        serde_json::from_value(json!({"metadata": {"name": "big", "namespace": "ns"}, "spec": spec}))
            .unwrap();
    assert!(
        qdr_api::validate(&qdr_api::defaults(&ic)).is_empty(),
        "{:?}",
        qdr_api::validate(&qdr_api::defaults(&ic))
    );
    ic
}

pub(crate) fn review(i: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": format!("00000000-0000-0000-0000-{i:012}"),
        "kind": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "kind": "Interconnect"},
        "resource": {"group": "interconnectedcloud.github.io", "version": "v1alpha1", "resource": "interconnects"},
        "name": "router-mesh", "namespace": "ns", "operation": "CREATE", "object": serde_json::to_value(small()).unwrap()}}))
    .unwrap()
}

pub(crate) fn interconnect_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    )
}

pub(crate) fn interconnects(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &interconnect_resource())
}

pub(crate) fn ic_obj(name: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}}}),
    )
    .unwrap()
}

/// [`ic_obj`] as the mutating webhook stores it: with every default
/// ([`qdr_api::defaults`]).
pub(crate) fn ic_defaulted(name: &str) -> DynamicObject {
    let raw: qdr_api::Interconnect =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}}}))
            .unwrap();
    let mut v = serde_json::to_value(qdr_api::defaults(&raw)).unwrap();
    v["apiVersion"] = json!("interconnectedcloud.github.io/v1alpha1");
    v["kind"] = json!("Interconnect");
    serde_json::from_value(v).unwrap()
}

pub(crate) async fn kubectl_ok(cp: &ControlPlane, args: &[&str]) {
    let out = cp.kubectl().args(args).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// An Interconnect that names the users Secret `bench-users` (and, once defaulted, only
/// Secrets derived from nothing but that): the same Secret for every object, as a team's
/// Interconnects share theirs.
pub(crate) fn ic_with_users(name: &str, defaulted: bool) -> DynamicObject {
    let raw = typed_with_users(name);
    let mut v = serde_json::to_value(if defaulted { qdr_api::defaults(&raw) } else { raw }).unwrap();
    v["apiVersion"] = json!("interconnectedcloud.github.io/v1alpha1");
    v["kind"] = json!("Interconnect");
    serde_json::from_value(v).unwrap()
}

/// [`ic_with_users`] as the typed object, before defaults.
pub(crate) fn typed_with_users(name: &str) -> qdr_api::Interconnect {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"deploymentPlan": {"size": 1}, "users": "bench-users"}}),
    )
    .unwrap()
}

/// A client of the cluster admin's kubeconfig impersonating `user`.
pub(crate) async fn client_as(
    cp: &ControlPlane,
    user: &str,
) -> Result<kube::Client, Box<dyn std::error::Error>> {
    let kc = kube::config::Kubeconfig::read_from(cp.kubeconfig())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".into()]);
    Ok(kube::Client::try_from(config)?)
}

/// Renders the router configuration of an effective spec (the controller's renderer).
pub(crate) fn qdr_controller_render(ic: &qdr_api::Interconnect) -> String {
    qdr_api::router_config::router_config(&ic.spec).render()
}
