//! Test data shared by the api test binaries.
#![allow(dead_code)]

use std::path::PathBuf;

use qdr_api::{ErrorType, Interconnect};
use serde::Deserialize;
use serde_json::{Value, json};

pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// The Go operator's example CRs (`tests/data/go-operator/`), by file name.
pub fn go_examples() -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(data_dir().join("go-operator"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 11, "examples A to K");
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect()
}

#[derive(Debug, Deserialize)]
pub struct Expect {
    pub field: String,
    #[serde(rename = "type")]
    pub error_type: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Case {
    pub name: String,
    pub spec: Value,
    pub expect: Vec<Expect>,
    /// Field path the API server reports; None when no schema or CEL rule covers the case.
    pub server: Option<String>,
    pub metadata_name: Option<String>,
}

impl Case {
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": "interconnectedcloud.github.io/v1alpha1",
            "kind": "Interconnect",
            "metadata": {"name": self.metadata_name.clone().unwrap_or_else(|| "invalid".into())},
            "spec": self.spec,
        })
    }
}

/// The table of invalid specs in `tests/data/invalid.json`.
pub fn invalid_cases() -> Vec<Case> {
    let text = std::fs::read_to_string(data_dir().join("invalid.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn type_name(t: ErrorType) -> &'static str {
    match t {
        ErrorType::Required => "Required",
        ErrorType::Invalid => "Invalid",
        ErrorType::Duplicate => "Duplicate",
        ErrorType::NotSupported => "NotSupported",
        ErrorType::Forbidden => "Forbidden",
        ErrorType::TooMany => "TooMany",
        ErrorType::TooLong => "TooLong",
    }
}

pub fn parse(v: &Value) -> Interconnect {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("does not decode: {e}\n{v:#}"))
}
