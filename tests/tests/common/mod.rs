//! Helpers shared by the integration test binaries.
#![allow(dead_code)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use qdr_tests::ControlPlane;

/// Installs the committed CRD once per control plane and returns it.
pub async fn install_crd(cp: &'static ControlPlane) -> CustomResourceDefinition {
    cp.install_crd().await;
    qdr_api::crd()
}

pub use cases::{go_examples, invalid_cases};

/// The api crate's test data (examples and the invalid-spec table), shared with its tests.
mod cases {
    use serde::Deserialize;
    use serde_json::{Value, json};

    fn data_dir() -> std::path::PathBuf {
        qdr_tests::workspace_root().join("api/tests/data")
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Case {
        pub name: String,
        pub spec: Value,
        pub server: Option<String>,
        pub metadata_name: Option<String>,
    }

    impl Case {
        pub fn object(&self) -> Value {
            json!({
                "apiVersion": "interconnectedcloud.github.io/v1alpha1",
                "kind": "Interconnect",
                "metadata": {"name": self.metadata_name.clone().unwrap_or_else(|| format!("c-{}", short(&self.name)))},
                "spec": self.spec,
            })
        }
    }

    fn short(name: &str) -> String {
        name.chars().take(50).collect::<String>().trim_end_matches('-').to_string()
    }

    pub fn invalid_cases() -> Vec<Case> {
        serde_json::from_str(&std::fs::read_to_string(data_dir().join("invalid.json")).unwrap()).unwrap()
    }

    pub fn go_examples() -> Vec<(String, Value)> {
        let mut files: Vec<_> = std::fs::read_dir(data_dir().join("go-operator"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|p| {
                let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                (p.file_name().unwrap().to_string_lossy().into_owned(), v)
            })
            .collect()
    }
}
