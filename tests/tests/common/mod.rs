//! Helpers shared by the integration test binaries.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use qdr_tests::ControlPlane;
use tokio::sync::OnceCell;

static CRD: OnceCell<CustomResourceDefinition> = OnceCell::const_new();

/// Installs the committed CRD file once per test binary (server-side apply) and waits until
/// it is Established and served.
pub async fn install_crd(cp: &'static ControlPlane) -> CustomResourceDefinition {
    CRD.get_or_init(|| async {
        let path = qdr_tests::workspace_root().join(qdr_api::CRD_PATH);
        let out = cp.kubectl().args(["apply", "--server-side", "-f"]).arg(&path).output().expect("kubectl");
        assert!(out.status.success(), "installing the CRD failed: {}", String::from_utf8_lossy(&out.stderr));
        let crd = qdr_api::crd();
        let name = crd.metadata.name.clone().unwrap();
        let api: Api<CustomResourceDefinition> = Api::all(cp.client().await.unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = api.get(&name).await.expect("get crd");
            let established = got
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            let served = cp.kubectl().args(["get", "interconnects", "-A"]).output().unwrap().status.success();
            if established && served {
                break;
            }
            assert!(Instant::now() < deadline, "CRD never became established and served");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = Patch::<()>::Merge;
        let _ = PatchParams::default();
        crd
    })
    .await
    .clone()
}
