//! Links across clusters in tests and benchmarks: the AccessGrant, token and Link steps an
//! admin of each side takes (docs/multi-cluster.md), on a control plane whose controller
//! serves both sides.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::routers::{self, apply, router_pods};
use crate::{ControlPlane, TestNamespace};

/// An Api of `kind` (`plural`) of this project's group in `ns`.
pub fn api(ns: &TestNamespace, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", kind);
    Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::from_gvk_with_plural(&gvk, plural))
}

/// The token Secret as the other cluster's admin applies it: its type, labels, annotations
/// and data, nothing of where it was made.
pub fn portable(token: &Secret) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": token.metadata.name, "labels": token.metadata.labels,
                     "annotations": token.metadata.annotations},
        "type": token.type_, "data": token.data})
}

/// The condition `type_` of a status.
pub fn condition<'a>(o: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    o.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// Applies AccessGrant `grant` for `site` on Interconnect `hub` of `ns`, advertising `host`
/// (and `extra` spec fields), and returns its token once issued.
pub async fn grant_token(
    cp: &'static ControlPlane,
    ns: &TestNamespace,
    grant: &str,
    site: &str,
    host: &str,
    extra: Value,
) -> Secret {
    let mut spec = json!({"interconnect": "hub", "site": site, "externalHosts": [{"host": host}]});
    spec.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    apply(
        cp,
        &ns.name,
        &json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "AccessGrant",
            "metadata": {"name": grant}, "spec": spec}),
    );
    let secrets: Api<Secret> = ns.api();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = secrets.get_opt(&format!("{grant}-token")).await.unwrap() {
            return t;
        }
        let g = api(ns, "AccessGrant", "accessgrants").get(grant).await.unwrap();
        assert!(Instant::now() < deadline, "no token: {}", g.data["status"]);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until Interconnect `name` of `ns` (of `size` routers) has settled after its first
/// grant: the grant makes its listener trust the sites' file, which rolls its routers once
/// (docs/multi-cluster.md, "Restarts"); an admin hands the token over after that.
pub async fn settled(cp: &ControlPlane, ns: &TestNamespace, name: &str, size: usize) {
    let started = Instant::now();
    let mut pods = router_pods(ns, name).await;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        routers::rolled_out(cp, ns, name, size).await;
        let now = router_pods(ns, name).await;
        if now == pods {
            return;
        }
        pods = now;
        assert!(started.elapsed() < Duration::from_secs(400), "{name} does not settle");
    }
}

/// Waits until grant `grant` of `ns` lists one connection, of the site certificate of
/// `identity` (`<site>.<grant>.<namespace>`), and returns its status.
pub async fn listed(ns: &TestNamespace, grant: &str, identity: &str, timeout: Duration) -> Value {
    let grants = api(ns, "AccessGrant", "accessgrants");
    let deadline = Instant::now() + timeout;
    loop {
        let g = grants.get(grant).await.unwrap();
        if g.data["status"]["connections"] == 1 {
            let user = g.data["status"]["linked"][0]["user"].as_str().unwrap_or_default();
            assert_eq!(qdr_api::links::token::site_of_user(user), Some(identity), "{}", g.data["status"]);
            return g.data["status"].clone();
        }
        assert!(Instant::now() < deadline, "the grant lists no site: {}", g.data["status"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A Link `name` making Interconnect `interconnect` dial with token Secret `token`.
pub fn link(name: &str, interconnect: &str, token: &str) -> Value {
    json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Link",
        "metadata": {"name": name}, "spec": {"interconnect": interconnect, "tokenSecret": token}})
}

/// The other side's steps, in the order that rolls nothing: the token of `grant` applied in
/// `ns`, then Link `to-hub` naming it, then an interior Interconnect `spoke` of one router
/// (whose routers mount the links Secret from their start).
pub fn link_site(cp: &ControlPlane, ns: &str, token: &Secret, grant: &str) {
    apply(cp, ns, &portable(token));
    apply(cp, ns, &link("to-hub", "spoke", &format!("{grant}-token")));
    apply(cp, ns, &routers::interconnect("spoke", json!({"deploymentPlan": {"size": 1}})));
}
