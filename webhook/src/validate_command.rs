//! The `qdr-validate FILE...` command: checks Interconnect manifests before they reach a
//! cluster, the way the cluster would: the CRD's schema and CEL rules (offline, with the
//! `jsonschema` crate and kube-cel), then exactly the webhook's defaults, validation and
//! warnings. For CI pipelines.
//!
//! Built only with the cargo feature `validate-command`, so that the webhook server does
//! not link jsonschema and CEL.

use std::io::Read;
use std::path::Path;

use qdr_api::offline::OfflineValidator;
use qdr_api::{Interconnect, defaults, validate_defaulted, warnings};
use serde_json::Value;

/// The outcome of checking some files.
#[derive(Debug, Default, PartialEq)]
pub struct Report {
    /// One line per problem: `<file>[<document>] <kind>/<name>: <field>: <message>`.
    pub errors: Vec<String>,
    /// One line per warning, same shape.
    pub warnings: Vec<String>,
    /// Interconnects checked.
    pub checked: usize,
}

/// Checks every Interconnect document in `text` (YAML, possibly several documents);
/// other kinds are skipped. `origin` names the file in messages.
pub fn check_text(origin: &str, text: &str, offline: &OfflineValidator, report: &mut Report) {
    let docs: Vec<Value> = match serde_saphyr::from_str_multiple(text) {
        Ok(d) => d,
        Err(e) => {
            report.errors.push(format!("{origin}: not YAML: {e}"));
            return;
        }
    };
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() || doc.get("kind").and_then(Value::as_str) != Some("Interconnect") {
            continue;
        }
        report.checked += 1;
        let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<no name>").to_string();
        let at = format!("{origin}[{i}] Interconnect/{name}");
        let server = offline.check(&doc);
        let mut errs = Vec::new();
        let mut ours: Vec<String> = Vec::new();
        match serde_path_to_error::deserialize::<_, Interconnect>(&doc) {
            Err(e) => errs.push(format!("{at}: {}: {}", e.path(), e.inner())),
            Ok(ic) => {
                let effective = defaults(&ic);
                for e in validate_defaulted(&effective) {
                    ours.push(e.field.clone());
                    errs.push(format!("{at}: {e}"));
                }
                report.warnings.extend(warnings(&effective).into_iter().map(|w| format!("{at}: {w}")));
            }
        }
        // `validate` names the exact field and the fix; the schema and CEL add what it cannot
        // see (unknown fields, wrong types).
        for e in server {
            let covered = match e.check {
                // CEL rules report at the object they sit on; `validate` at the exact field.
                qdr_api::offline::Check::Cel => ours.iter().any(|f| f.starts_with(&e.path)),
                qdr_api::offline::Check::Schema => ours.contains(&e.path),
            };
            if !covered {
                errs.push(format!("{at}: {e}"));
            }
        }
        report.errors.extend(errs);
    }
}

/// Checks files (`-` is standard input).
///
/// # Errors
/// When a file cannot be read.
pub fn check_files(files: &[impl AsRef<Path>]) -> std::io::Result<Report> {
    let offline = OfflineValidator::default();
    let mut report = Report::default();
    for f in files {
        let f = f.as_ref();
        let text = if f == Path::new("-") {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        } else {
            std::fs::read_to_string(f)?
        };
        check_text(&f.display().to_string(), &text, &offline, &mut report);
    }
    Ok(report)
}
