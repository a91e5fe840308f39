//! The generated CRD on a real API server, with no webhook installed: it installs, the
//! server itself rejects every invalid spec a schema or CEL rule covers (at the field path
//! the table names), and it accepts every Go operator example.

mod common;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

fn interconnects(ns: &qdr_tests::TestNamespace) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    );
    Api::namespaced_with(ns.client.clone(), &ns.name, &ar)
}

/// Strict field validation, as kubectl sends it: unknown fields are errors, not pruned.
fn strict() -> PostParams {
    PostParams { field_manager: Some("qdr-tests".into()), ..Default::default() }
}

#[tokio::test]
async fn committed_crd_installs_and_is_established() {
    let cp = qdr_tests::shared().await;
    let crd = common::install_crd(cp).await;
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client().await.unwrap());
    let got = crds.get(crd.metadata.name.as_deref().unwrap()).await.unwrap();
    let conds = got.status.unwrap().conditions.unwrap_or_default();
    assert!(conds.iter().any(|c| c.type_ == "Established" && c.status == "True"), "{conds:?}");
    assert!(conds.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "True"), "{conds:?}");
    // kubectl explain reads the field docs from the published schema.
    // The API server publishes a new CRD's OpenAPI asynchronously: retry for a while.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        let out =
            cp.kubectl().args(["explain", "interconnect.spec.deploymentPlan.placement"]).output().unwrap();
        if out.status.success() || std::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("AntiAffinity") && text.contains("DaemonSet"), "{text}");
}

#[tokio::test]
async fn server_rejects_every_case_the_crd_covers_at_its_field_path() {
    let cp = qdr_tests::shared().await;
    common::install_crd(cp).await;
    let ns = cp.namespace("crd-invalid").await;
    let api = interconnects(&ns);
    let mut checked = 0;
    for case in common::invalid_cases() {
        let obj: DynamicObject = serde_json::from_value(case.object()).unwrap();
        let result = api.create(&strict(), &obj).await;
        match (&case.server, result) {
            (None, Ok(_)) => {}
            (None, Err(e)) => panic!("{}: validate-only, yet the server rejected it: {e}", case.name),
            (Some(_), Ok(_)) => panic!("{}: the server accepted an invalid spec", case.name),
            (Some(path), Err(kube::Error::Api(status))) => {
                assert_eq!(status.code, 422, "{}: {status:?}", case.name);
                let causes = status.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
                assert!(
                    causes.iter().any(|c| &c.field == path),
                    "{}: no cause at {path:?} in {causes:#?}",
                    case.name
                );
                checked += 1;
            }
            (Some(_), Err(e)) => panic!("{}: unexpected error {e}", case.name),
        }
    }
    assert!(checked >= 40, "only {checked} cases are covered by the CRD");
}

#[tokio::test]
async fn server_accepts_the_go_operator_examples() {
    let cp = qdr_tests::shared().await;
    common::install_crd(cp).await;
    let ns = cp.namespace("crd-examples").await;
    let api = interconnects(&ns);
    for (file, raw) in common::go_examples() {
        let obj: DynamicObject = serde_json::from_value(raw.clone()).unwrap();
        let result = api.create(&strict(), &obj).await;
        if file.starts_with("g-") || file.starts_with("h-") {
            let Err(kube::Error::Api(status)) = result else { panic!("{file}: expected a rejection") };
            let causes = status.details.map(|d| d.causes).unwrap_or_default();
            assert_eq!(causes.len(), 1, "{file}: {causes:#?}");
            assert_eq!(causes[0].field, "spec.edgeConnectors");
        } else {
            let created = result.unwrap_or_else(|e| panic!("{file}: {e}"));
            // Nothing was pruned: the stored spec is the one sent.
            let stored: Value = serde_json::to_value(&created).unwrap();
            assert_eq!(stored["spec"], raw["spec"], "{file}");
            // A and D share a name; no finalizers, so this deletes at once.
            api.delete(created.metadata.name.as_deref().unwrap(), &Default::default()).await.unwrap();
        }
    }
}
