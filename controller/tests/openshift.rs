//! Where `route.openshift.io/v1` is served, exposed listeners get Routes (passthrough for
//! TLS listeners, edge with redirect otherwise) instead of Ingresses. The API server here
//! serves a Route CRD, which is what the controller discovers.

mod common;

use std::time::Duration;

use common::{eventually, interconnects};

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::ApiResource;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use qdr_controller::route::Route;
use serde_json::json;

#[tokio::test]
async fn exposed_listeners_get_routes_on_openshift() {
    let cp = qdr_tests::shared().await;
    cp.install_crd().await;
    common::install_route_crd(cp);
    let system = cp.namespace("os-system").await;
    let controller = common::start_controller(cp, &system.name, "os-lease", "os-controller");

    let ns = cp.namespace("openshift").await;
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1",
        "kind": "Interconnect", "metadata": {"name": "mesh"}, "spec": {}}))
        .unwrap();
    interconnects(&ns.client, &ns.name).create(&PostParams::default(), &obj).await.unwrap();
    let routes: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::erase::<Route>(&()));
    let console = eventually("console Route", Duration::from_secs(30), || async {
        routes.get_opt("mesh-8080").await.ok().flatten()
    })
    .await;
    assert_eq!(console.data["spec"]["tls"]["termination"], "edge");
    assert_eq!(console.data["spec"]["tls"]["insecureEdgeTerminationPolicy"], "Redirect");
    assert_eq!(console.data["spec"]["to"]["name"], "mesh");
    // Applied right after the console Route, in the same pass.
    let ir = eventually("inter-router Route", Duration::from_secs(30), || async {
        routes.get_opt("mesh-55671").await.ok().flatten()
    })
    .await;
    assert_eq!(ir.data["spec"]["tls"]["termination"], "passthrough");
    assert!(
        ns.api::<Ingress>().list(&ListParams::default()).await.unwrap().items.is_empty(),
        "no Ingress on OpenShift"
    );

    // No longer exposed: the Route is pruned.
    interconnects(&ns.client, &ns.name)
        .patch(
            "mesh",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"listeners": [{"port": 5672}]}})),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while routes.get_opt("mesh-8080").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "console Route not pruned (controller exited: {:?}); controller log:\n{}",
            controller.exited(),
            controller.log_tail(400)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
