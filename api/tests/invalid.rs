//! The table of invalid specs (`tests/data/invalid.json`): `validate` reports each with its
//! exact field path and type, and the offline API-server emulation (schema + CEL) rejects
//! exactly the cases a schema or CEL rule covers.

mod common;

use qdr_api::offline::OfflineValidator;
use qdr_api::validate;

#[test]
fn table_has_at_least_forty_cases_with_unique_names() {
    let cases = common::invalid_cases();
    assert!(cases.len() >= 40, "{}", cases.len());
    let mut names: Vec<_> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "duplicate case names");
}

#[test]
fn validate_reports_every_expected_error_with_path_and_type() {
    for case in common::invalid_cases() {
        let ic = common::parse(&case.object());
        let errors = validate(&ic);
        for e in &case.expect {
            assert!(
                errors
                    .iter()
                    .any(|got| got.field == e.field && common::type_name(got.error_type) == e.error_type),
                "{}: expected {} {} in\n{}",
                case.name,
                e.error_type,
                e.field,
                errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
            );
        }
        // No unrelated noise: every reported error is one the case expects.
        for got in &errors {
            assert!(
                case.expect.iter().any(|e| e.field == got.field),
                "{}: unexpected extra error {got}",
                case.name
            );
        }
    }
}

#[test]
fn offline_api_server_rejects_exactly_the_covered_cases() {
    let offline = OfflineValidator::default();
    for case in common::invalid_cases() {
        let errors = offline.check(&case.object());
        match &case.server {
            Some(path) => {
                assert!(!errors.is_empty(), "{}: the CRD should reject it", case.name);
                assert!(
                    errors.iter().any(|e| &e.path == path),
                    "{}: expected a rejection at {path:?}, got {errors:#?}",
                    case.name
                );
            }
            None => {
                assert!(errors.is_empty(), "{}: validate-only, but the CRD rejects: {errors:#?}", case.name)
            }
        }
    }
}

#[test]
fn errors_print_like_apimachinery_field_errors() {
    let case = common::invalid_cases().into_iter().find(|c| c.name == "several-problems-at-once").unwrap();
    let lines: Vec<String> = validate(&common::parse(&case.object())).iter().map(|e| e.to_string()).collect();
    assert!(
        lines.contains(
            &"spec.listeners[0].port: Required value: a port between 1 and 65535 is required".to_string()
        ),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "spec.deploymentPlan.placement: Unsupported value: \"Node\": supported values: \"Any\", \"Every\", \"AntiAffinity\""
        )),
        "{lines:#?}"
    );
}
