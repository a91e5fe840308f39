//! The bundle rendered from this repository's `deploy/`: the CSV's install strategy, its
//! descriptors, OLM's layout, and a `deploy/` of another shape refused.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::descriptors::{display_name, first_sentence};
use super::{CSV_FILE, Sources, render};

fn sources() -> Sources {
    Sources::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

fn csv_of(files: &BTreeMap<String, String>) -> Value {
    serde_saphyr::from_str(&files[CSV_FILE]).unwrap()
}

#[test]
fn names_and_sentences() {
    assert_eq!(display_name("interRouterListeners"), "Inter Router Listeners");
    assert_eq!(display_name("size"), "Size");
    assert_eq!(first_sentence("One. Two.\n\nThree."), "One.");
    assert_eq!(first_sentence("No full stop"), "No full stop");
    assert_eq!(
        first_sentence("To interior routers, e.g. `host`. More."),
        "To interior routers, e.g. `host`."
    );
    assert_eq!(display_name("sslProfiles"), "SSL Profiles");
}

#[test]
fn the_csv_carries_deploy_with_olm_owning_the_webhook_certificate() {
    let s = sources();
    let csv = csv_of(&render(&s).unwrap());
    assert_eq!(csv["metadata"]["name"], format!("qdr-operator.v{}", s.version));
    assert_eq!(csv["spec"]["version"], s.version.as_str());
    let deployments = csv["spec"]["install"]["spec"]["deployments"].as_array().unwrap();
    let names: Vec<&str> = deployments.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["qdr-controller", "qdr-webhook"]);
    let container = |i: usize| &deployments[i]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container(0)["image"],
        format!(
            "{}:{}",
            crate::project::image_repository("controller"),
            s.image_tags[&crate::project::image_repository("controller")]
        )
    );
    let args: Vec<&str> =
        container(1)["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(
        args.contains(&"--tls-mode=files")
            && args.contains(&"--tls-dir=/tmp/k8s-webhook-server/serving-certs")
    );
    assert!(!args.contains(&"--tls-mode=secret"));
    // Every install mode, the controller watching OLM's target namespaces.
    let modes: Vec<(&str, bool)> = (csv["spec"]["installModes"].as_array().unwrap().iter())
        .map(|m| (m["type"].as_str().unwrap(), m["supported"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        modes,
        [
            ("OwnNamespace", true),
            ("SingleNamespace", true),
            ("MultiNamespace", true),
            ("AllNamespaces", true)
        ]
    );
    let watch = (container(0)["env"].as_array().unwrap().iter())
        .find(|e| e["name"] == "WATCH_NAMESPACE")
        .expect("WATCH_NAMESPACE");
    assert_eq!(watch["valueFrom"]["fieldRef"]["fieldPath"], "metadata.annotations['olm.targetNamespaces']");
    // The self-managed TLS's rights are gone; everything else of deploy/base's RBAC stays.
    let text = serde_json::to_string(&csv["spec"]["install"]).unwrap();
    assert!(!text.contains("admissionregistration") && !text.contains("qdr-webhook-tls"), "{text}");
    assert!(
        text.contains("subjectaccessreviews")
            && text.contains("leases")
            && text.contains("interconnects/status")
    );
    let perms = |k: &str| -> Vec<String> {
        csv["spec"]["install"]["spec"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["serviceAccountName"].as_str().unwrap().into())
            .collect()
    };
    // Issue 72: the controller's rules are a namespace's (OLM grants them in each target
    // namespace, cluster-wide only for AllNamespaces); only the webhook's SubjectAccessReviews
    // are cluster-wide. Issue 73: the webhook's reads of a Link's token and Interconnect are
    // a namespace's too (Links are reconciled in the target namespaces only).
    assert_eq!(perms("clusterPermissions"), ["qdr-webhook"]);
    assert_eq!(perms("permissions"), ["qdr-controller", "qdr-webhook"]);
    let cluster = serde_json::to_string(&csv["spec"]["install"]["spec"]["clusterPermissions"]).unwrap();
    assert!(cluster.contains("subjectaccessreviews") && !cluster.contains("secrets"), "{cluster}");
    // Both webhooks, on the webhook Deployment's https port, paths as in deploy/.
    let hooks = csv["spec"]["webhookdefinitions"].as_array().unwrap();
    let summary: Vec<(String, String, i64)> = hooks
        .iter()
        .map(|h| {
            (
                h["type"].as_str().unwrap().into(),
                h["webhookPath"].as_str().unwrap().into(),
                h["targetPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("ValidatingAdmissionWebhook".into(), "/validate".into(), 8443),
            ("ValidatingAdmissionWebhook".into(), "/validate".into(), 8443),
            ("MutatingAdmissionWebhook".into(), "/mutate".into(), 8443)
        ]
    );
    // The token Secrets' webhook keeps its object selector: no other Secret reaches it.
    let tokens = hooks.iter().find(|h| h["generateName"] == "vlinktoken.qdr-operator.io").unwrap();
    assert_eq!(tokens["objectSelector"]["matchLabels"][qdr_api_token_label()], "true", "{tokens}");
    assert!(hooks.iter().all(|h| h["deploymentName"] == "qdr-webhook" && h["containerPort"] == 443));
    // Every example, as JSON the console can parse.
    let examples: Vec<Value> =
        serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
    assert_eq!(examples.len(), s.examples.iter().filter(|e| e["kind"] == "Interconnect").count() + 2);
    for kind in ["AccessGrant", "Link"] {
        assert!(examples.iter().any(|e| e["kind"] == kind), "no {kind} example");
    }
    assert!(examples.len() >= 3);
    let related: Vec<&str> = csv["spec"]["relatedImages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(related, ["controller", "webhook", "router"]);
    assert_eq!(csv["spec"]["replaces"], "qdr-operator.v0.4.0");
    // The version continues the Go operator's line (0.4.0 is the one replaced).
    let version: Vec<u64> = s.version.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(version > vec![0, 4, 0], "{} does not come after 0.4.0", s.version);
}

#[test]
fn every_spec_field_has_a_descriptor_with_the_schema_description() {
    let s = sources();
    let csv = csv_of(&render(&s).unwrap());
    let owned = &csv["spec"]["customresourcedefinitions"]["owned"][0];
    assert_eq!(owned["name"], "interconnects.interconnectedcloud.github.io");
    let paths: Vec<&str> =
        owned["specDescriptors"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
    for field in [
        "deploymentPlan",
        "listeners",
        "interRouterListeners",
        "edgeListeners",
        "sslProfiles",
        "addresses",
        "autoLinks",
        "linkRoutes",
        "connectors",
        "interRouterConnectors",
        "edgeConnectors",
        "users",
        "issuer",
        "deploymentPlan.size",
    ] {
        assert!(paths.contains(&field), "{field}: {paths:?}");
    }
    for d in owned["specDescriptors"]
        .as_array()
        .unwrap()
        .iter()
        .chain(owned["statusDescriptors"].as_array().unwrap())
    {
        assert!(!d["description"].as_str().unwrap().is_empty(), "{d}");
    }
    let role = owned["specDescriptors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == "deploymentPlan.role")
        .unwrap();
    assert_eq!(
        role["x-descriptors"],
        json!([
            "urn:alm:descriptor:com.tectonic.ui:select:interior",
            "urn:alm:descriptor:com.tectonic.ui:select:edge"
        ])
    );
    assert!(
        owned["resources"].as_array().unwrap().iter().all(|r| r.get("name").is_some()),
        "the Go CSV's missing name"
    );
}

#[test]
fn a_deploy_that_changed_shape_is_refused_not_rendered_wrong() {
    let mut s = sources();
    for d in
        s.deploy.iter_mut().filter(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "qdr-webhook")
    {
        d["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--tls-mode=files"]);
    }
    assert!(render(&s).unwrap_err().contains("--tls-mode=secret"));
    let mut s = sources();
    s.image_tags.clear();
    assert!(render(&s).unwrap_err().contains("sets no tag"));
    let mut s = sources();
    s.deploy.retain(|d| d["kind"] != "MutatingWebhookConfiguration");
    assert!(render(&s).unwrap_err().contains("MutatingWebhookConfiguration"));
}

fn qdr_api_token_label() -> &'static str {
    crate::links::token::TOKEN_LABEL
}

#[test]
fn the_bundle_has_olm_s_layout() {
    let files = render(&sources()).unwrap();
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "bundle.Dockerfile",
            "manifests/accessgrants.interconnectedcloud.github.io.crd.yaml",
            "manifests/interconnects.interconnectedcloud.github.io.crd.yaml",
            "manifests/links.interconnectedcloud.github.io.crd.yaml",
            "manifests/qdr-controller_policy_v1_poddisruptionbudget.yaml",
            "manifests/qdr-operator.clusterserviceversion.yaml",
            "manifests/qdr-webhook_policy_v1_poddisruptionbudget.yaml",
            "metadata/annotations.yaml",
            "tests/scorecard/config.yaml",
        ]
    );
    let annotations: Value = serde_saphyr::from_str(&files["metadata/annotations.yaml"]).unwrap();
    assert_eq!(
        annotations["annotations"]["operators.operatorframework.io.bundle.package.v1"],
        "qdr-operator"
    );
    assert!(
        files["bundle.Dockerfile"].contains("LABEL operators.operatorframework.io.bundle.channels.v1=beta\n")
    );
}
