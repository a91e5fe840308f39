//! The OLM bundle (`bundle/`): what Operator Lifecycle Manager installs, made from `deploy/` by
//! `make bundle` (the `bundlegen` binary) so it cannot drift from what the other installs run;
//! `api/tests/bundle.rs` fails when the committed bundle differs from [`render`]'s.
//!
//! The bundle format is OLM's `registry+v1`: `manifests/` (the ClusterServiceVersion, the CRD
//! and the PodDisruptionBudgets), `metadata/annotations.yaml` (package [`PACKAGE`], channel
//! [`CHANNEL`]: the Go operator's, so its subscribers upgrade), `tests/scorecard/config.yaml`
//! and `bundle.Dockerfile`. From `deploy/`:
//! - **Deployments** (`deploy/base/{controller,webhook}.yaml`) go into the CSV's
//!   `install.spec.deployments`, with the image tags of `deploy/base/kustomization.yaml`. The
//!   webhook's `--tls-mode=secret` becomes `--tls-mode=files --tls-dir=`[`OLM_CERT_DIR`]: under
//!   OLM the serving certificate is OLM's, mounted there, and the `caBundle` is OLM's to write.
//! - **RBAC** (`deploy/base/rbac.yaml`): each ClusterRole bound to a ServiceAccount becomes a
//!   `clusterPermissions` entry and each Role a `permissions` entry, except what only the
//!   self-managed TLS needs (the webhook's Role on its Secret, its rules on the webhook
//!   configurations).
//! - **Webhook configurations** (`deploy/base/webhook-configurations.yaml`) become
//!   `webhookdefinitions` (OLM creates the configurations and a Service
//!   `<deploymentName>-service` on the `containerPort`, here the Service's 443 to the
//!   webhook's `https` port).
//! - Left out, as OLM 0.29 cannot install them from a bundle or makes them itself: the
//!   Namespace, the webhook's Service, the controller's Lease (it creates it) and the
//!   NetworkPolicies (`deploy/olm/description.md` tells users so).
//!
//! The hand-written parts are `deploy/olm/`: `csv.yaml` (display name, links, maintainers,
//! install modes, `replaces`, `minKubeVersion`, ...), `description.md` and `icon.svg`; the
//! examples of `alm-examples` are `deploy/examples/*.yaml`.

use std::collections::BTreeMap;
use std::path::Path;

use base64::prelude::{BASE64_STANDARD, Engine as _};
use serde_json::{Value, json};

/// Where the bundle is committed, relative to the repository root.
pub const BUNDLE_DIR: &str = "bundle";
/// The OLM package: the Go operator's (`qdr-operator`), so the upgrade graph continues it.
pub const PACKAGE: &str = "qdr-operator";
/// The channel: the Go operator's (`beta`), also the default channel.
pub const CHANNEL: &str = "beta";
/// Where OLM mounts the webhook's serving certificate (`tls.crt`, `tls.key`) in the
/// Deployment named by a `webhookdefinitions` entry (OLM's `install/webhook.go`, the
/// controller-runtime convention).
pub const OLM_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
/// The file name of the CSV in `manifests/`.
pub const CSV_FILE: &str = "manifests/qdr-operator.clusterserviceversion.yaml";

/// Everything [`render`] reads, loaded by [`Sources::read`].
#[derive(Debug, Clone)]
pub struct Sources {
    /// The workspace version (`0.1.0`): the CSV is `qdr-operator.v<version>`.
    pub version: String,
    /// `deploy/olm/csv.yaml`.
    pub csv_base: Value,
    /// `deploy/olm/description.md`.
    pub description: String,
    /// `deploy/olm/icon.svg`.
    pub icon_svg: String,
    /// The documents of `deploy/base`'s resource files, in the kustomization's order.
    pub deploy: Vec<Value>,
    /// `deploy/base/kustomization.yaml`'s `images`: name → `newTag`.
    pub image_tags: BTreeMap<String, String>,
    /// The committed CRD (`deploy/crds/…yaml`), as text and parsed.
    pub crd_text: String,
    /// The CRD, parsed.
    pub crd: Value,
    /// `deploy/examples/*.yaml` (the valid ones), sorted by file name.
    pub examples: Vec<Value>,
}

fn read(root: &Path, rel: &str) -> Result<String, String> {
    std::fs::read_to_string(root.join(rel)).map_err(|e| format!("reading {rel}: {e}"))
}

fn yaml_docs(text: &str, what: &str) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| format!("{what}: {e}"))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

impl Sources {
    /// Reads the sources from the repository at `root`.
    ///
    /// # Errors
    /// A message naming the file that cannot be read or parsed.
    pub fn read(root: &Path) -> Result<Sources, String> {
        let kustomization: Value = serde_saphyr::from_str(&read(root, "deploy/base/kustomization.yaml")?)
            .map_err(|e| format!("deploy/base/kustomization.yaml: {e}"))?;
        let mut deploy = Vec::new();
        for r in kustomization["resources"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if r.ends_with(".yaml") {
                let rel = format!("deploy/base/{r}");
                deploy.extend(yaml_docs(&read(root, &rel)?, &rel)?);
            }
        }
        let image_tags = kustomization["images"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| Some((i["name"].as_str()?.to_string(), i["newTag"].as_str()?.to_string())))
            .collect();
        let crd_text = read(root, crate::CRD_PATH)?;
        let crd = serde_saphyr::from_str(&crd_text).map_err(|e| format!("{}: {e}", crate::CRD_PATH))?;
        let mut names: Vec<String> = std::fs::read_dir(root.join("deploy/examples"))
            .map_err(|e| format!("reading deploy/examples: {e}"))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        names.sort();
        let mut examples = Vec::new();
        for n in names {
            let rel = format!("deploy/examples/{n}");
            examples.extend(yaml_docs(&read(root, &rel)?, &rel)?);
        }
        Ok(Sources {
            version: env!("CARGO_PKG_VERSION").to_string(),
            csv_base: serde_saphyr::from_str(&read(root, "deploy/olm/csv.yaml")?)
                .map_err(|e| format!("deploy/olm/csv.yaml: {e}"))?,
            description: read(root, "deploy/olm/description.md")?,
            icon_svg: read(root, "deploy/olm/icon.svg")?,
            deploy,
            image_tags,
            crd_text,
            crd,
            examples,
        })
    }
}

/// The bundle's files: path relative to [`BUNDLE_DIR`] → contents.
///
/// # Errors
/// A message when `deploy/` is not shaped as this expects (a Deployment, a binding or a
/// webhook configuration missing, the webhook not in `--tls-mode=secret`, an image without a
/// tag): the bundle is not written rather than written wrong.
pub fn render(s: &Sources) -> Result<BTreeMap<String, String>, String> {
    let mut files = BTreeMap::new();
    let header = "# Generated by `make bundle` (api/src/bundle.rs) from deploy/. Do not edit.\n";
    let yaml = |v: &Value| -> String {
        format!("{header}{}", serde_saphyr::to_string(v).expect("JSON values serialize"))
    };

    files.insert(CSV_FILE.to_string(), yaml(&csv(s)?));
    let crd_name = s.crd["metadata"]["name"].as_str().ok_or("the CRD has no name")?;
    files.insert(format!("manifests/{crd_name}.crd.yaml"), s.crd_text.clone());
    for pdb in s.deploy.iter().filter(|d| d["kind"] == "PodDisruptionBudget") {
        let name = pdb["metadata"]["name"].as_str().ok_or("a PodDisruptionBudget without a name")?;
        files.insert(format!("manifests/{name}_policy_v1_poddisruptionbudget.yaml"), yaml(pdb));
    }
    let annotations = annotations();
    files.insert("metadata/annotations.yaml".into(), yaml(&json!({"annotations": annotations})));
    files.insert("tests/scorecard/config.yaml".into(), yaml(&scorecard()));
    let mut dockerfile = String::from(
        "# Generated by `make bundle` (api/src/bundle.rs). Build from bundle/:\n\
         #   docker build -f bundle.Dockerfile -t qdr-operator/bundle:<version> .\nFROM scratch\n",
    );
    for (k, v) in annotations.as_object().expect("an object") {
        dockerfile.push_str(&format!("LABEL {k}={}\n", v.as_str().expect("strings")));
    }
    dockerfile.push_str(
        "COPY manifests /manifests/\nCOPY metadata /metadata/\nCOPY tests/scorecard /tests/scorecard/\n",
    );
    files.insert("bundle.Dockerfile".into(), dockerfile);
    Ok(files)
}

/// `metadata/annotations.yaml`'s annotations (also the bundle image's labels).
fn annotations() -> Value {
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
fn scorecard() -> Value {
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

fn find<'a>(s: &'a Sources, kind: &str, name: &str) -> Result<&'a Value, String> {
    s.deploy
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .ok_or_else(|| format!("deploy/base has no {kind} {name}"))
}

/// `repository:tag` for a Deployment's image named as in the kustomization's `images`.
fn tagged(s: &Sources, image: &str) -> Result<String, String> {
    let tag = s
        .image_tags
        .get(image)
        .ok_or_else(|| format!("deploy/base/kustomization.yaml sets no tag for {image}"))?;
    Ok(format!("{image}:{tag}"))
}

fn csv(s: &Sources) -> Result<Value, String> {
    let mut csv = s.csv_base.clone();
    let controller = find(s, "Deployment", "qdr-controller")?;
    let webhook = find(s, "Deployment", "qdr-webhook")?;
    let controller_image =
        tagged(s, controller["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap_or(""))?;
    let webhook_image =
        tagged(s, webhook["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap_or(""))?;

    let mut deployments = Vec::new();
    for (d, image) in [(controller, &controller_image), (webhook, &webhook_image)] {
        let mut spec = d["spec"].clone();
        spec["template"]["spec"]["containers"][0]["image"] = json!(image);
        if d == webhook {
            let args = spec["template"]["spec"]["containers"][0]["args"]
                .as_array_mut()
                .ok_or("the webhook has no args")?;
            let at = args
                .iter()
                .position(|a| a == "--tls-mode=secret")
                .ok_or("the webhook's args in deploy/base do not say --tls-mode=secret")?;
            args[at] = json!("--tls-mode=files");
            args.insert(at + 1, json!(format!("--tls-dir={OLM_CERT_DIR}")));
        }
        deployments
            .push(json!({"name": d["metadata"]["name"], "label": d["metadata"]["labels"], "spec": spec}));
    }

    let (cluster_permissions, permissions) = permissions(s)?;
    let meta = csv["metadata"].as_object_mut().ok_or("deploy/olm/csv.yaml has no metadata")?;
    meta.insert("name".into(), json!(format!("{PACKAGE}.v{}", s.version)));
    let examples: Vec<&Value> = s.examples.iter().filter(|e| e["kind"] == "Interconnect").collect();
    let annotations = meta.entry("annotations").or_insert(json!({}));
    annotations["alm-examples"] = json!(serde_json::to_string_pretty(&examples).expect("JSON serializes"));
    annotations["containerImage"] = json!(controller_image);

    let spec = csv["spec"].as_object_mut().ok_or("deploy/olm/csv.yaml has no spec")?;
    spec.insert("version".into(), json!(s.version));
    spec.insert("description".into(), json!(s.description));
    spec.insert(
        "icon".into(),
        json!([{"base64data": BASE64_STANDARD.encode(s.icon_svg.as_bytes()), "mediatype": "image/svg+xml"}]),
    );
    spec.insert("customresourcedefinitions".into(), json!({"owned": [owned_crd(s)?]}));
    spec.insert(
        "install".into(),
        json!({"strategy": "deployment", "spec": {
            "deployments": deployments,
            "clusterPermissions": cluster_permissions,
            "permissions": permissions,
        }}),
    );
    spec.insert("webhookdefinitions".into(), json!(webhook_definitions(s, webhook)?));
    spec.insert(
        "relatedImages".into(),
        json!([
            {"name": "controller", "image": controller_image},
            {"name": "webhook", "image": webhook_image},
            {"name": "router", "image": crate::images::DEFAULT_ROUTER_IMAGE},
        ]),
    );
    Ok(csv)
}

/// `(clusterPermissions, permissions)`: every ClusterRole and Role of `deploy/base`, by the
/// ServiceAccount a binding gives it to, less what only the self-managed webhook TLS needs.
fn permissions(s: &Sources) -> Result<(Vec<Value>, Vec<Value>), String> {
    let mut cluster: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut namespaced: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for binding in s.deploy.iter().filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role = find(s, role_kind, binding["roleRef"]["name"].as_str().unwrap_or_default())?;
        let account =
            binding["subjects"][0]["name"].as_str().ok_or("a binding without a subject")?.to_string();
        let rules: Vec<Value> = role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| !self_managed_tls_only(role, r))
            .cloned()
            .collect();
        if rules.is_empty() {
            continue;
        }
        let into = if role_kind == "ClusterRole" { &mut cluster } else { &mut namespaced };
        into.entry(account).or_default().extend(rules);
    }
    let entries = |m: BTreeMap<String, Vec<Value>>| -> Vec<Value> {
        m.into_iter().map(|(sa, rules)| json!({"serviceAccountName": sa, "rules": rules})).collect()
    };
    Ok((entries(cluster), entries(namespaced)))
}

/// A rule only the webhook's own TLS uses: on the webhook configurations (their `caBundle`),
/// or in a Role that is about the webhook's Secret (`qdr-webhook-tls`) and nothing else (its
/// `create` on Secrets included). Under OLM both are OLM's.
fn self_managed_tls_only(role: &Value, rule: &Value) -> bool {
    let has = |r: &Value, field: &str, value: &str| {
        r[field].as_array().is_some_and(|a| a.iter().any(|v| v == value))
    };
    let rules = role["rules"].as_array().map(Vec::as_slice).unwrap_or_default();
    let tls_secret_role = rules.iter().any(|r| has(r, "resourceNames", "qdr-webhook-tls"))
        && rules.iter().all(|r| r["resources"] == json!(["secrets"]));
    has(rule, "apiGroups", "admissionregistration.k8s.io") || tls_secret_role
}

fn webhook_definitions(s: &Sources, webhook: &Value) -> Result<Vec<Value>, String> {
    let port = |name: &str| -> Option<i64> {
        webhook["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)?["containerPort"]
            .as_i64()
    };
    let target = port("https").ok_or("the webhook has no https port")?;
    let mut out = Vec::new();
    for (kind, olm_type) in [
        ("ValidatingWebhookConfiguration", "ValidatingAdmissionWebhook"),
        ("MutatingWebhookConfiguration", "MutatingAdmissionWebhook"),
    ] {
        let config = s
            .deploy
            .iter()
            .find(|d| d["kind"] == kind)
            .ok_or_else(|| format!("deploy/base has no {kind}"))?;
        for w in config["webhooks"].as_array().into_iter().flatten() {
            let service = &w["clientConfig"]["service"];
            let mut def = json!({
                "type": olm_type,
                "generateName": w["name"],
                "deploymentName": webhook["metadata"]["name"],
                "containerPort": service["port"],
                "targetPort": target,
                "webhookPath": service["path"],
                "admissionReviewVersions": w["admissionReviewVersions"],
                "sideEffects": w["sideEffects"],
                "failurePolicy": w["failurePolicy"],
                "matchPolicy": w["matchPolicy"],
                "timeoutSeconds": w["timeoutSeconds"],
                "rules": w["rules"],
            });
            if let Some(p) = w.get("reinvocationPolicy") {
                def["reinvocationPolicy"] = p.clone();
            }
            out.push(def);
        }
    }
    Ok(out)
}

/// Words of a camelCase field name, capitalised: `interRouterListeners` → `Inter Router
/// Listeners`.
fn display_name(field: &str) -> String {
    let mut out = String::new();
    for (i, c) in field.chars().enumerate() {
        if i == 0 {
            out.extend(c.to_uppercase());
        } else {
            if c.is_uppercase() {
                out.push(' ');
            }
            out.push(c);
        }
    }
    out.replace("Ssl ", "SSL ")
}

/// The first sentence of a schema description: up to the first `. ` that a capital letter
/// follows (so `e.g. x` does not end it).
fn first_sentence(text: &str) -> String {
    let line = text.split("\n\n").next().unwrap_or_default().replace('\n', " ");
    let end = line
        .match_indices(". ")
        .map(|(i, _)| i)
        .find(|&i| line[i + 2..].chars().next().is_some_and(char::is_uppercase));
    match end {
        Some(i) => line[..=i].to_string(),
        None => line,
    }
}

/// The CSV's owned CRD: its kinds of children, a spec descriptor for every top-level spec
/// field and the main deployment-plan fields, status descriptors for the conditions and the
/// router counts, each with the schema's own description.
fn owned_crd(s: &Sources) -> Result<Value, String> {
    let version = s.crd["spec"]["versions"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["storage"] == true))
        .ok_or("the CRD has no storage version")?;
    let schema = &version["schema"]["openAPIV3Schema"]["properties"];
    let describe = |props: &Value, path: &str, field: &str, x: &[&str]| -> Value {
        let mut d = json!({
            "path": path,
            "displayName": display_name(field),
            "description": first_sentence(props[field]["description"].as_str().unwrap_or_default()),
        });
        if !x.is_empty() {
            d["x-descriptors"] = json!(x);
        }
        d
    };
    let spec = &schema["spec"]["properties"];
    let plan = &spec["deploymentPlan"]["properties"];
    let mut spec_descriptors = Vec::new();
    for field in spec.as_object().ok_or("the CRD has no spec properties")?.keys() {
        spec_descriptors.push(describe(spec, field, field, &[]));
    }
    let select = |field: &str| -> Vec<String> {
        plan[field]["enum"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some(format!("urn:alm:descriptor:com.tectonic.ui:select:{}", v.as_str()?)))
            .collect()
    };
    let role = select("role");
    let placement = select("placement");
    for (field, x) in [
        ("size", vec!["urn:alm:descriptor:com.tectonic.ui:podCount"]),
        ("image", vec!["urn:alm:descriptor:com.tectonic.ui:text"]),
        ("role", role.iter().map(String::as_str).collect()),
        ("placement", placement.iter().map(String::as_str).collect()),
        ("resources", vec!["urn:alm:descriptor:com.tectonic.ui:resourceRequirements"]),
    ] {
        if plan.get(field).is_none() {
            return Err(format!("the CRD has no spec.deploymentPlan.{field}"));
        }
        spec_descriptors.push(describe(plan, &format!("deploymentPlan.{field}"), field, &x));
    }
    let status = &schema["status"]["properties"];
    let mut status_descriptors = Vec::new();
    for (field, x) in [
        ("conditions", vec!["urn:alm:descriptor:io.kubernetes.conditions"]),
        ("replicas", vec!["urn:alm:descriptor:com.tectonic.ui:podCount"]),
        ("readyReplicas", vec![]),
        ("pods", vec![]),
        ("observedGeneration", vec![]),
    ] {
        if status.get(field).is_none() {
            return Err(format!("the CRD has no status.{field}"));
        }
        status_descriptors.push(describe(status, field, field, &x));
    }
    let resource = |kind: &str, version: &str| json!({"kind": kind, "version": version, "name": ""});
    Ok(json!({
        "name": s.crd["metadata"]["name"],
        "version": version["name"],
        "kind": s.crd["spec"]["names"]["kind"],
        "displayName": "Interconnect",
        "description": "A network of Qpid Dispatch routers: their Deployment or DaemonSet, configuration, Services, TLS credentials and RBAC.",
        "resources": [
            resource("Deployment", "v1"),
            resource("DaemonSet", "v1"),
            resource("Service", "v1"),
            resource("ConfigMap", "v1"),
            resource("Secret", "v1"),
            resource("ServiceAccount", "v1"),
            resource("Role", "v1"),
            resource("RoleBinding", "v1"),
            resource("Ingress", "v1"),
            resource("Route", "v1"),
        ],
        "specDescriptors": spec_descriptors,
        "statusDescriptors": status_descriptors,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            format!("qdr-operator/controller:{}", s.image_tags["qdr-operator/controller"])
        );
        let args: Vec<&str> =
            container(1)["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert!(
            args.contains(&"--tls-mode=files")
                && args.contains(&"--tls-dir=/tmp/k8s-webhook-server/serving-certs")
        );
        assert!(!args.contains(&"--tls-mode=secret"));
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
        assert_eq!(perms("clusterPermissions"), ["qdr-controller", "qdr-webhook"]);
        assert_eq!(perms("permissions"), ["qdr-controller"]);
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
                ("MutatingAdmissionWebhook".into(), "/mutate".into(), 8443)
            ]
        );
        assert!(hooks.iter().all(|h| h["deploymentName"] == "qdr-webhook" && h["containerPort"] == 443));
        // Every example, as JSON the console can parse.
        let examples: Vec<Value> =
            serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
        assert_eq!(examples.len(), s.examples.iter().filter(|e| e["kind"] == "Interconnect").count());
        assert!(examples.len() >= 3);
        let related: Vec<&str> = csv["spec"]["relatedImages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(related, ["controller", "webhook", "router"]);
        assert_eq!(csv["spec"]["replaces"], "qdr-operator.v0.4.0");
    }

    #[test]
    fn every_spec_field_has_a_descriptor_with_the_schema_description() {
        let s = sources();
        let csv = csv_of(&render(&s).unwrap());
        let owned = &csv["spec"]["customresourcedefinitions"]["owned"][0];
        assert_eq!(owned["name"], "interconnects.interconnectedcloud.github.io");
        let paths: Vec<&str> = owned["specDescriptors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
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
        for d in s
            .deploy
            .iter_mut()
            .filter(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "qdr-webhook")
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

    #[test]
    fn the_bundle_has_olm_s_layout() {
        let files = render(&sources()).unwrap();
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "bundle.Dockerfile",
                "manifests/interconnects.interconnectedcloud.github.io.crd.yaml",
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
            files["bundle.Dockerfile"]
                .contains("LABEL operators.operatorframework.io.bundle.channels.v1=beta\n")
        );
    }
}
