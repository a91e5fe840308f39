//! The bundle's metadata: `metadata/annotations.yaml` (package, channels, media types; also
//! the bundle image's labels) and the scorecard's configuration. Constants only: nothing
//! here reads `deploy/`.

use serde_json::{Value, json};

/// The OLM package: the Go operator's (`qdr-operator`), so the upgrade graph continues it.
pub const PACKAGE: &str = "qdr-operator";
/// The channel: the Go operator's (`beta`), also the default channel.
pub const CHANNEL: &str = "beta";

/// `metadata/annotations.yaml`'s annotations (also the bundle image's labels).
pub(super) fn annotations() -> Value {
    json!({
        "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
        "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
        "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
        "operators.operatorframework.io.bundle.package.v1": PACKAGE,
        "operators.operatorframework.io.bundle.channels.v1": CHANNEL,
        "operators.operatorframework.io.bundle.channel.default.v1": CHANNEL,
        "operators.operatorframework.io.test.mediatype.v1": "scorecard+v1",
        "operators.operatorframework.io.test.config.v1": "tests/scorecard/",
    })
}

/// The scorecard's standard basic and OLM tests.
pub(super) fn scorecard() -> Value {
    let test = |suite: &str, name: &str| {
        json!({
            "entrypoint": ["scorecard-test", name],
            "image": "quay.io/operator-framework/scorecard-test:v1.39.0",
            "labels": {"suite": suite, "test": format!("{name}-test")},
        })
    };
    json!({
        "apiVersion": "scorecard.operatorframework.io/v1alpha3",
        "kind": "Configuration",
        "metadata": {"name": "config"},
        "stages": [{"parallel": true, "tests": [
            test("basic", "basic-check-spec"),
            test("olm", "olm-bundle-validation"),
            test("olm", "olm-crds-have-validation"),
            test("olm", "olm-crds-have-resources"),
            test("olm", "olm-spec-descriptors"),
            test("olm", "olm-status-descriptors"),
        ]}],
    })
}
