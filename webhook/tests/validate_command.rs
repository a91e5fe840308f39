//! `qdr-validate`: offline checks for CI pipelines.

use qdr_api::offline::OfflineValidator;
use qdr_webhook::validate_command::{Report, check_text};

fn check(text: &str) -> Report {
    let mut r = Report::default();
    check_text("test.yaml", text, &OfflineValidator::default(), &mut r);
    r
}

#[test]
fn every_problem_is_reported_with_file_document_and_field() {
    let text = "kind: ConfigMap\napiVersion: v1\nmetadata: {name: skipped}\n---\n\
        apiVersion: interconnectedcloud.github.io/v1alpha1\nkind: Interconnect\nmetadata: {name: bad}\n\
        spec:\n  deploymentPlan: {role: edge, placement: Node, sise: 3}\n  listeners: [{port: 5672}, {port: 5672}]\n";
    let r = check(text);
    assert_eq!(r.checked, 1);
    let has = |s: &str| r.errors.iter().any(|e| e.contains(s));
    assert!(
        has("test.yaml[1] Interconnect/bad: spec.deploymentPlan.placement: Unsupported value: \"Node\""),
        "{:#?}",
        r.errors
    );
    assert!(has("spec.listeners[1].port: Duplicate value: 5672"), "{:#?}", r.errors);
    // Unknown fields as the API server reports them (strict field validation), one per field.
    assert!(
        has("test.yaml[1] Interconnect/bad: unknown field \"spec.deploymentPlan.sise\""),
        "unknown fields are reported: {:#?}",
        r.errors
    );
    assert!(!has("Additional properties"), "{:#?}", r.errors);
}

#[test]
fn valid_manifests_pass_with_warnings_only() {
    let r = check(
        "apiVersion: interconnectedcloud.github.io/v1alpha1\nkind: Interconnect\nmetadata: {name: ok}\nspec: {}\n",
    );
    assert_eq!(r.checked, 1);
    assert!(r.errors.is_empty(), "{:#?}", r.errors);
    assert!(!r.warnings.is_empty(), "the exposed console without TLS is worth a warning");
}

#[test]
fn not_yaml_is_an_error_not_a_crash() {
    assert!(!check("{{{: [").errors.is_empty());
}

#[test]
fn the_command_exits_non_zero_on_any_violation() {
    let root = qdr_tests::workspace_root();
    let run = |files: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_qdr-validate"))
            .args(files.iter().map(|f| root.join(f)))
            .output()
            .unwrap()
    };
    let ok = run(&[
        "deploy/examples/interior-mesh.yaml",
        "deploy/examples/edge-routers.yaml",
        "deploy/examples/tls-listeners.yaml",
    ]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stdout));
    let bad = run(&["deploy/examples/invalid/edge-with-inter-router-listener.yaml"]);
    assert_eq!(bad.status.code(), Some(1));
    let out = String::from_utf8_lossy(&bad.stdout);
    assert!(out.contains("edge-with-inter-router-listener.yaml[0] Interconnect/broken: spec.interRouterListeners: Forbidden"), "{out}");
}

/// The server binary (no dev-dependencies, default features) links neither jsonschema nor
/// CEL: the offline checks live only behind the `validate-command` feature.
#[test]
fn the_server_links_neither_jsonschema_nor_cel() {
    let tree = |features: &[&str], krate: &str| {
        let out = std::process::Command::new(env!("CARGO"))
            .current_dir(qdr_tests::workspace_root())
            .args(["tree", "--offline", "--locked", "-q", "-p", "qdr-webhook", "-e", "no-dev", "-i", krate])
            .args(features)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for krate in ["jsonschema", "kube-cel"] {
        assert_eq!(tree(&[], krate), "", "the server depends on {krate}");
        // The check can fail: with the feature, the crate is there.
        assert!(tree(&["--features", "validate-command"], krate).contains(krate), "{krate}");
    }
}
