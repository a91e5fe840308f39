//! The CSV's install strategy, from `deploy/base`: the two Deployments with the
//! kustomization's image tags (the webhook switched to OLM's serving certificate, the
//! controller given OLM's target namespaces to watch), the RBAC as
//! `clusterPermissions` and `permissions` less what only the self-managed webhook TLS needs,
//! and the webhook configurations as `webhookdefinitions`. It must not add anything
//! `deploy/` does not have: every other install runs `deploy/` as it is.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::sources::{Sources, find, tagged};

/// Where OLM mounts the webhook's serving certificate (`tls.crt`, `tls.key`) in the
/// Deployment named by a `webhookdefinitions` entry (OLM's `install/webhook.go`, the
/// controller-runtime convention).
pub const OLM_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// The pod template annotation in which OLM gives an operator its OperatorGroup's target
/// namespaces, comma-separated (empty for `AllNamespaces`).
pub const OLM_TARGET_NAMESPACES: &str = "olm.targetNamespaces";

/// What the CSV takes from `deploy/base`'s Deployments, RBAC and webhook configurations.
pub(super) struct Install {
    /// `spec.install`: `{strategy: deployment, spec: {deployments, clusterPermissions, permissions}}`.
    pub(super) strategy: Value,
    /// `spec.webhookdefinitions`.
    pub(super) webhooks: Vec<Value>,
    /// The controller's image, `repository:tag`.
    pub(super) controller_image: String,
    /// The webhook's image, `repository:tag`.
    pub(super) webhook_image: String,
}

/// The install strategy and webhook definitions of `s`.
///
/// # Errors
/// A message when a Deployment, a role of a binding or a webhook configuration is missing,
/// an image has no tag in the kustomization, or the webhook is not in `--tls-mode=secret`.
pub(super) fn install(s: &Sources) -> Result<Install, String> {
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
        if d == controller {
            // The OperatorGroup's target namespaces, which OLM writes on the pod template
            // (empty for AllNamespaces): what the controller watches.
            let env = spec["template"]["spec"]["containers"][0]["env"]
                .as_array_mut()
                .ok_or("the controller has no env")?;
            env.push(json!({"name": "WATCH_NAMESPACE", "valueFrom": {"fieldRef": {
                "fieldPath": format!("metadata.annotations['{OLM_TARGET_NAMESPACES}']")}}}));
        }
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
    Ok(Install {
        strategy: json!({"strategy": "deployment", "spec": {
            "deployments": deployments,
            "clusterPermissions": cluster_permissions,
            "permissions": permissions,
        }}),
        webhooks: webhook_definitions(s, webhook)?,
        controller_image,
        webhook_image,
    })
}

/// Resources that live outside namespaces: a ClusterRole's rules on these stay
/// `clusterPermissions` under OLM; every other rule is a namespace's.
const CLUSTER_SCOPED: [&str; 10] = [
    "subjectaccessreviews",
    "tokenreviews",
    "customresourcedefinitions",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
    "namespaces",
    "nodes",
    "clusterroles",
    "clusterrolebindings",
    "priorityclasses",
];

/// `(clusterPermissions, permissions)`: every ClusterRole and Role of `deploy/base`, by the
/// ServiceAccount a binding gives it to, less what only the self-managed webhook TLS needs.
///
/// A ClusterRole's rules on namespaced resources (the controller's: Interconnects, their
/// children, pods, Events) are `permissions`, not `clusterPermissions`: OLM grants
/// `permissions` in the operator's namespace and in each of the OperatorGroup's target
/// namespaces (OwnNamespace, SingleNamespace, MultiNamespace), and cluster-wide only for
/// AllNamespaces, so the controller may write Secrets, Deployments and Roles only where it
/// reconciles (as the Go operator's namespaced `permissions` did), while `deploy/` and the
/// chart, which watch every namespace by default, bind the ClusterRole. Only what lives
/// outside namespaces (the webhook's SubjectAccessReviews) stays cluster-wide.
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
        if role_kind != "ClusterRole" {
            namespaced.entry(account).or_default().extend(rules);
            continue;
        }
        for rule in rules {
            let (outside, inside) = split_by_scope(&rule);
            cluster.entry(account.clone()).or_default().extend(outside);
            namespaced.entry(account.clone()).or_default().extend(inside);
        }
    }
    let entries = |m: BTreeMap<String, Vec<Value>>| -> Vec<Value> {
        (m.into_iter().filter(|(_, rules)| !rules.is_empty()))
            .map(|(sa, rules)| json!({"serviceAccountName": sa, "rules": rules}))
            .collect()
    };
    Ok((entries(cluster), entries(namespaced)))
}

/// `rule` as `(its part on cluster-scoped resources, its part on namespaced ones)`, each
/// `None` when empty: the same rule with its `resources` split by [`CLUSTER_SCOPED`].
fn split_by_scope(rule: &Value) -> (Option<Value>, Option<Value>) {
    let resources: Vec<&Value> = rule["resources"].as_array().into_iter().flatten().collect();
    let base = |r: &str| r.split('/').next().unwrap_or(r).to_string();
    let (outside, inside): (Vec<&Value>, Vec<&Value>) = resources
        .into_iter()
        .partition(|r| r.as_str().is_some_and(|r| CLUSTER_SCOPED.contains(&base(r).as_str())));
    let with = |list: Vec<&Value>| {
        (!list.is_empty()).then(|| {
            let mut r = rule.clone();
            r["resources"] = json!(list);
            r
        })
    };
    (with(outside), with(inside))
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

/// `spec.webhookdefinitions`: each webhook of the validating and mutating configurations,
/// served by the `webhook` Deployment on its `https` port (OLM makes the Service and the
/// configurations, and writes their `caBundle`).
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
            for key in ["reinvocationPolicy", "objectSelector"] {
                if let Some(v) = w.get(key) {
                    def[key] = v.clone();
                }
            }
            out.push(def);
        }
    }
    Ok(out)
}
