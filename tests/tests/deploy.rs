//! The cluster-admin install (`deploy/`, a kustomize base) against the real API server: it
//! applies cleanly with `--dry-run=server`, and both Deployments' pods are admitted under the
//! Pod Security "restricted" level that the namespace enforces. Also the GitHub Actions
//! workflows, checked by actionlint (built in the same tool group as helm).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn run_stdin(mut cmd: Command, stdin: &str) -> Output {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn pod_from_template(deploy: &Value) -> Value {
    let t = &deploy["spec"]["template"];
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{}-check", deploy["metadata"]["name"].as_str().unwrap()), "namespace": "qdr-operator"},
        "spec": t["spec"],
    })
}

#[tokio::test]
async fn deploy_applies_with_server_dry_run_and_meets_pod_security_restricted() {
    let cp = qdr_tests::shared().await;
    let root = qdr_tests::workspace_root();
    // The namespace must exist for a dry run of what lives in it.
    operator_namespace(cp).await;

    let out =
        cp.kubectl().args(["apply", "--dry-run=server", "-k"]).arg(root.join("deploy")).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("would violate PodSecurity"), "{stderr}");
    for obj in [
        "customresourcedefinition.apiextensions.k8s.io/interconnects.interconnectedcloud.github.io",
        "deployment.apps/qdr-webhook",
        "deployment.apps/qdr-controller",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/qdr-operator-validating",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/qdr-operator-mutating",
        "poddisruptionbudget.policy/qdr-webhook",
        "service/qdr-webhook",
        "networkpolicy.networking.k8s.io/qdr-webhook",
        "networkpolicy.networking.k8s.io/qdr-controller",
    ] {
        assert!(stdout.contains(obj), "{obj} missing:\n{stdout}");
    }

    // Pods are where "restricted" is enforced: run each Deployment's pod template through it.
    let built = cp.kubectl().args(["kustomize"]).arg(root.join("deploy")).output().unwrap();
    assert!(built.status.success());
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&String::from_utf8_lossy(&built.stdout)).unwrap();
    let deployments: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    assert_eq!(deployments.len(), 2);
    for d in &deployments {
        assert_eq!(d["metadata"]["namespace"], "qdr-operator");
        let mut kubectl = cp.kubectl();
        kubectl.args(["create", "--dry-run=server", "-f", "-"]);
        let out = run_stdin(kubectl, &pod_from_template(d).to_string());
        assert!(out.status.success(), "{}: {}", d["metadata"]["name"], String::from_utf8_lossy(&out.stderr));
    }
    network_policies_admit_only_each_pods_ports(&docs, &deployments);
    // And the check can fail: the same pod without its security context is refused.
    let mut bad = pod_from_template(deployments[0]);
    bad["spec"]["containers"][0].as_object_mut().unwrap().remove("securityContext");
    let mut kubectl = cp.kubectl();
    kubectl.args(["create", "--dry-run=server", "-f", "-"]);
    let out = run_stdin(kubectl, &bad.to_string());
    assert!(!out.status.success(), "a pod violating restricted was admitted");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("violates PodSecurity"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every Deployment's pods are selected by exactly one NetworkPolicy that restricts both
/// directions, admits exactly the pod's named container ports and lets out only the API
/// server's ports.
fn network_policies_admit_only_each_pods_ports(docs: &[Value], deployments: &[&Value]) {
    let policies: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "NetworkPolicy").collect();
    for d in deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let labels = d["spec"]["template"]["metadata"]["labels"].as_object().unwrap();
        let selecting: Vec<&&Value> = policies
            .iter()
            .filter(|p| {
                let m = p["spec"]["podSelector"]["matchLabels"].as_object().unwrap();
                m.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .collect();
        assert_eq!(selecting.len(), 1, "{name}: {} NetworkPolicies select its pods", selecting.len());
        let spec = &selecting[0]["spec"];
        assert_eq!(spec["policyTypes"], serde_json::json!(["Ingress", "Egress"]), "{name}");
        let ports = |rules: &Value| -> std::collections::BTreeSet<String> {
            rules
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| {
                    assert!(r.get("from").is_none() && r.get("to").is_none(), "{name}: peers are not pinned");
                    r["ports"].as_array().unwrap().iter().map(|p| p["port"].to_string().replace('"', ""))
                })
                .collect()
        };
        let container_ports: std::collections::BTreeSet<String> = d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| {
                c["ports"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string())
            })
            .collect();
        assert_eq!(ports(&spec["ingress"]), container_ports, "{name}: ingress is not exactly its ports");
        // The API server; and, for the controller, the routers' management listener
        // (docs/mesh-status.md).
        let mut egress: std::collections::BTreeSet<String> = ["443", "6443"].map(String::from).into();
        if name.contains("qdr-controller") {
            egress.insert("55670".into());
        }
        assert_eq!(
            ports(&spec["egress"]),
            egress,
            "{name}: egress beyond the API server (and, for the controller, the routers' management port)"
        );
    }
}

/// `deploy/overlays/allowed-router-images`: `deploy/` with one more webhook argument, whose
/// patterns parse as the webhook parses them.
#[tokio::test]
async fn the_image_policy_overlay_adds_only_the_webhook_argument() {
    use qdr_tests::rbac::kustomize;
    let cp = qdr_tests::shared().await;
    let mut overlay = kustomize(cp, "deploy/overlays/allowed-router-images").unwrap();
    let base = kustomize(cp, "deploy").unwrap();
    let webhook = overlay
        .iter_mut()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "qdr-webhook")
        .unwrap();
    let args = webhook["spec"]["template"]["spec"]["containers"][0]["args"].as_array_mut().unwrap();
    let last = args.pop().unwrap();
    let patterns = last.as_str().unwrap().strip_prefix("--allowed-router-images=").expect("the image policy");
    for p in patterns.split(',') {
        qdr_api::ImagePattern::parse(p).unwrap();
    }
    assert!(patterns.split(',').any(|p| p == "quay.io/interconnectedcloud/qdrouterd:*"), "{patterns}");
    assert_eq!(normalized(overlay), normalized(base), "anything else changed");
}

/// `deploy/overlays/namespaced`: the controller's ClusterRole and its binding are gone; each
/// namespace in `--watch-namespaces` has a Role with exactly the ClusterRole's rules, bound
/// to the controller; both webhooks select exactly those namespaces; and the whole overlay
/// applies with `--dry-run=server`.
#[tokio::test]
async fn the_namespaced_overlay_grants_roles_in_the_watched_namespaces_only() {
    use qdr_tests::rbac::{NAMESPACED_OVERLAY, kustomize};
    let cp = qdr_tests::shared().await;
    let docs = kustomize(cp, NAMESPACED_OVERLAY).unwrap();
    let base = kustomize(cp, "deploy").unwrap();
    let find = |docs: &[Value], kind: &str, name: &str| -> Vec<Value> {
        docs.iter().filter(|d| d["kind"] == kind && d["metadata"]["name"] == name).cloned().collect()
    };
    let controller = &find(&docs, "Deployment", "qdr-controller")[0];
    let args: Vec<&str> = controller["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let list = args.iter().find_map(|a| a.strip_prefix("--watch-namespaces=")).expect("--watch-namespaces");
    let watched: Vec<String> = list.split(',').map(String::from).collect();
    assert!(watched.len() >= 2, "{watched:?}");

    // The webhooks admit Interconnects in every namespace, watched or not: one created before
    // its namespace is watched was checked like any other.
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let configs: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(configs.len(), 1, "{kind}");
        for config in configs {
            let selector = &config["webhooks"][0]["namespaceSelector"];
            assert!(selector.is_null(), "{kind} selects namespaces: {selector}");
        }
    }
    let cluster_rules = &find(&base, "ClusterRole", "qdr-operator-controller")[0]["rules"];
    for ns in &watched {
        let role = docs
            .iter()
            .find(|d| {
                d["kind"] == "Role"
                    && d["metadata"]["namespace"] == ns.as_str()
                    && d["metadata"]["name"] == "qdr-operator-controller"
            })
            .unwrap_or_else(|| panic!("no Role in {ns}"));
        assert_eq!(&role["rules"], cluster_rules, "the Role in {ns} differs from the ClusterRole");
        let binding = docs
            .iter()
            .find(|d| {
                d["kind"] == "RoleBinding"
                    && d["metadata"]["namespace"] == ns.as_str()
                    && d["metadata"]["name"] == "qdr-operator-controller"
            })
            .unwrap_or_else(|| panic!("no RoleBinding in {ns}"));
        assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "qdr-controller", "namespace": "qdr-operator"}])
        );
    }
    for d in docs.iter().filter(|d| d["kind"] == "ClusterRoleBinding") {
        let to_controller = d["subjects"].as_array().unwrap().iter().any(|s| s["name"] == "qdr-controller");
        assert!(!to_controller, "a ClusterRoleBinding still binds the controller: {}", d["metadata"]["name"]);
    }
    for d in docs.iter().filter(|d| d["kind"] == "ClusterRole") {
        let secrets = d["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"].as_array().unwrap().iter().any(|x| x == "secrets"));
        assert!(!secrets, "ClusterRole {} grants Secrets", d["metadata"]["name"]);
    }

    let root = qdr_tests::workspace_root();
    operator_namespace(cp).await;
    for ns in &watched {
        let _ = cp.kubectl().args(["create", "namespace", ns]).output().unwrap();
    }
    let out = cp
        .kubectl()
        .args(["apply", "--dry-run=server", "-k"])
        .arg(root.join(NAMESPACED_OVERLAY))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("role.rbac.authorization.k8s.io/qdr-operator-controller"), "{stdout}");
}

const CHART: &str = "deploy/helm/qdr-operator";

/// The test control plane's Kubernetes version, for `helm template` and `helm lint` (which
/// do not ask the cluster and would assume an old one).
const KUBE_VERSION: &str = "v1.33.0";

/// Applies `deploy/base/namespace.yaml` once (tests of this binary run concurrently).
async fn operator_namespace(cp: &qdr_tests::ControlPlane) {
    static ONCE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    ONCE.get_or_init(|| async {
        let path = qdr_tests::workspace_root().join("deploy/base/namespace.yaml");
        let out = cp.kubectl().arg("apply").arg("-f").arg(path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    })
    .await;
}

/// `helm template` of the chart into the operator's namespace (CRDs included) with `set`.
fn helm_template(cp: &qdr_tests::ControlPlane, set: &[&str]) -> Vec<Value> {
    let mut cmd = cp.helm();
    cmd.args(["template", "qdr-operator"]).arg(qdr_tests::workspace_root().join(CHART));
    cmd.args(["--namespace", "qdr-operator", "--include-crds", "--kube-version", KUBE_VERSION]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "helm template {set:?}: {}", String::from_utf8_lossy(&out.stderr));
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap();
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Objects by `Kind namespace/name`, without what Helm adds (its labels, empty maps), and
/// without the Namespace (Helm installs into an existing or `--create-namespace` one).
fn normalized(docs: Vec<Value>) -> std::collections::BTreeMap<String, Value> {
    docs.into_iter()
        .filter(|d| d["kind"] != "Namespace")
        .map(|mut d| {
            if let Some(labels) = d.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
                for k in ["app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"] {
                    labels.remove(k);
                }
            }
            let key = format!(
                "{} {}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["namespace"].as_str().unwrap_or_default(),
                d["metadata"]["name"].as_str().unwrap()
            );
            (key, d)
        })
        .collect()
}

fn assert_same_objects(
    helm: std::collections::BTreeMap<String, Value>,
    kustomize: std::collections::BTreeMap<String, Value>,
    what: &str,
) {
    assert!(kustomize.len() >= 15, "{what}: only {} objects", kustomize.len());
    let (h, k): (Vec<&String>, Vec<&String>) = (helm.keys().collect(), kustomize.keys().collect());
    assert_eq!(h, k, "{what}: the chart and kustomize install different objects");
    for (key, obj) in &helm {
        let mut differences = Vec::new();
        diff("", obj, &kustomize[key], &mut differences);
        assert!(
            differences.is_empty(),
            "{what}: {key} differs (helm, kustomize):\n{}",
            differences.join("\n")
        );
    }
}

/// The JSON paths where `a` and `b` differ, with both values (shortened).
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        // kustomize prints `9.0` as `9`.
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if a != b => {
            let short = |v: &Value| v.to_string().chars().take(200).collect::<String>();
            out.push(format!("{path}: {} != {}", short(a), short(b)));
        }
        _ => {}
    }
}

/// The chart renders exactly the kustomize installs: `deploy/` with default values, the
/// namespaced overlay with its namespaces as `watchNamespaces`. `helm lint` is clean for
/// each values set used here.
#[tokio::test]
async fn the_helm_chart_renders_the_kustomize_installs() {
    use qdr_tests::rbac::{NAMESPACED_OVERLAY, kustomize};
    let cp = qdr_tests::shared().await;
    assert_same_objects(
        normalized(helm_template(cp, &[])),
        normalized(kustomize(cp, "deploy").unwrap()),
        "default values",
    );
    let overlay = kustomize(cp, NAMESPACED_OVERLAY).unwrap();
    let watched: Vec<String> = overlay
        .iter()
        .filter(|d| d["kind"] == "Role" && d["metadata"]["name"] == "qdr-operator-controller")
        .map(|d| d["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect();
    let set = format!("watchNamespaces={{{}}}", watched.join(","));
    assert_same_objects(normalized(helm_template(cp, &[&set])), normalized(overlay), "namespaced");
    // Monitoring: `--set monitoring.enabled=true` renders deploy/ with the component.
    assert_same_objects(
        normalized(helm_template(cp, &["monitoring.enabled=true"])),
        normalized(kustomize(cp, "deploy/overlays/monitoring").unwrap()),
        "monitoring",
    );

    for values in
        [vec![], vec![set.as_str()], vec!["webhook.tls.mode=cert-manager"], vec!["monitoring.enabled=true"]]
    {
        let mut lint = cp.helm();
        lint.args(["lint", "--strict", "--kube-version", KUBE_VERSION])
            .arg(qdr_tests::workspace_root().join(CHART));
        for s in &values {
            lint.args(["--set", s]);
        }
        let out = lint.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("0 chart(s) failed"), "helm lint {values:?}:\n{text}");
        assert!(!text.contains("[WARNING]") && !text.contains("[ERROR]"), "helm lint {values:?}:\n{text}");
    }
    let mut bad = cp.helm();
    bad.args(["template", "x", "--kube-version", KUBE_VERSION]).arg(qdr_tests::workspace_root().join(CHART));
    let out = bad.args(["--set", "webhook.tls.mode=manual"]).output().unwrap();
    assert!(!out.status.success(), "an unknown TLS mode rendered");
    assert!(String::from_utf8_lossy(&out.stderr).contains("webhook.tls.mode must be"));
}

/// Every value lands where it should: images, replicas, resources, placement (node selector,
/// tolerations), log format, the router
/// image; cert-manager mode swaps the webhook's own certificate management for a
/// Certificate, a mounted Secret and the CA injector, and drops the webhook's API access.
#[tokio::test]
async fn helm_values_reach_the_objects() {
    let cp = qdr_tests::shared().await;
    let objs = normalized(helm_template(
        cp,
        &[
            "images.webhook.repository=registry.example/webhook",
            "images.webhook.tag=1.2.3",
            "images.controller.pullPolicy=Always",
            "images.router=registry.example/qdrouterd:1.19.0",
            "replicas.webhook=3",
            "replicas.controller=1",
            "resources.controller.limits.memory=512Mi",
            "logFormat=text",
            "routerRunAsUser=platform",
            "nodeSelector.disktype=ssd",
            "tolerations[0].key=dedicated",
            "tolerations[0].operator=Exists",
        ],
    ));
    let webhook = &objs["Deployment qdr-operator/qdr-webhook"];
    let controller = &objs["Deployment qdr-operator/qdr-controller"];
    let (wc, cc) = (
        &webhook["spec"]["template"]["spec"]["containers"][0],
        &controller["spec"]["template"]["spec"]["containers"][0],
    );
    assert_eq!(wc["image"], "registry.example/webhook:1.2.3");
    assert_eq!(cc["imagePullPolicy"], "Always");
    assert_eq!(
        (webhook["spec"]["replicas"].as_i64(), controller["spec"]["replicas"].as_i64()),
        (Some(3), Some(1))
    );
    assert_eq!(cc["resources"]["limits"]["memory"], "512Mi");
    for d in [webhook, controller] {
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["nodeSelector"], serde_json::json!({"disktype": "ssd"}));
        assert_eq!(pod["tolerations"], serde_json::json!([{"key": "dedicated", "operator": "Exists"}]));
    }
    assert_eq!(wc["args"], serde_json::json!(["--tls-mode=secret", "--log-format=text"]));
    assert_eq!(
        cc["args"],
        serde_json::json!([
            "--log-format=text",
            "--default-image=registry.example/qdrouterd:1.19.0",
            "--router-run-as-user=platform"
        ])
    );

    let objs = normalized(helm_template(
        cp,
        &["webhook.allowedRouterImages={quay.io/interconnectedcloud/qdrouterd:*,registry.example.com/*}"],
    ));
    let wc = &objs["Deployment qdr-operator/qdr-webhook"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        wc["args"],
        serde_json::json!([
            "--tls-mode=secret",
            "--allowed-router-images=quay.io/interconnectedcloud/qdrouterd:*,registry.example.com/*",
            "--log-format=json"
        ])
    );

    // cert-manager mode: the certificate comes from cert-manager; Secret references are still
    // authorized, so the webhook keeps a token and exactly that permission.
    let objs = normalized(helm_template(cp, &["webhook.tls.mode=cert-manager"]));
    let pod = &objs["Deployment qdr-operator/qdr-webhook"]["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], serde_json::Value::Null);
    assert_eq!(
        objs["ClusterRole /qdr-operator-webhook"]["rules"],
        serde_json::json!([
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
            {"apiGroups": ["interconnectedcloud.github.io"], "resources": ["interconnects"], "verbs": ["get"]}
        ])
    );
    assert!(
        !objs.contains_key("Role qdr-operator/qdr-operator-webhook"),
        "no Secret access in cert-manager mode"
    );

    let objs = normalized(helm_template(
        cp,
        &["webhook.tls.mode=cert-manager", "webhook.authorizeSecretReferences=false"],
    ));
    let wc = &objs["Deployment qdr-operator/qdr-webhook"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        wc["args"],
        serde_json::json!([
            "--tls-mode=files",
            "--tls-dir=/tls",
            "--authorize-secret-references=false",
            "--log-format=json"
        ])
    );
    let cert = &objs["Certificate qdr-operator/qdr-webhook"];
    assert_eq!(cert["spec"]["secretName"], "qdr-webhook-cert");
    assert_eq!(cert["spec"]["dnsNames"][0], "qdr-webhook.qdr-operator.svc");
    let pod = &objs["Deployment qdr-operator/qdr-webhook"]["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["args"][0], "--tls-mode=files");
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "qdr-webhook-cert");
    assert_eq!(pod["automountServiceAccountToken"], false);
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let c = objs.iter().find(|(k, _)| k.starts_with(kind)).unwrap().1;
        assert_eq!(
            c["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "qdr-operator/qdr-webhook"
        );
    }
    assert!(
        !objs.keys().any(|k| k.ends_with("/qdr-operator-webhook")),
        "the webhook keeps API access in cert-manager mode: {:?}",
        objs.keys().collect::<Vec<_>>()
    );
}

/// The chart's objects apply with `--dry-run=server` (default, namespaced and cert-manager
/// values; a stand-in Certificate CRD for the last) and each Deployment's pod template is
/// admitted under Pod Security "restricted".
#[tokio::test]
async fn helm_output_applies_with_server_dry_run_under_restricted() {
    let cp = qdr_tests::shared().await;
    operator_namespace(cp).await;
    let certificate_crd = serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "certificates.cert-manager.io"},
        "spec": {"group": "cert-manager.io", "scope": "Namespaced",
            "names": {"plural": "certificates", "singular": "certificate", "kind": "Certificate"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    cp.kubectl_stdin(&["apply", "-f", "-"], &certificate_crd.to_string()).unwrap();
    cp.kubectl_stdin(&["wait", "--for=condition=Established", "crd/certificates.cert-manager.io"], "")
        .unwrap();
    for ns in ["helm-apps-a", "helm-apps-b"] {
        let _ = cp.kubectl().args(["create", "namespace", ns]).output().unwrap();
    }
    for set in
        [vec![], vec!["watchNamespaces={helm-apps-a,helm-apps-b}"], vec!["webhook.tls.mode=cert-manager"]]
    {
        let docs = helm_template(cp, &set);
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
        let mut kubectl = cp.kubectl();
        kubectl.args(["apply", "--dry-run=server", "-f", "-"]);
        let out = run_stdin(kubectl, &list.to_string());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{set:?}: {stderr}");
        assert!(!stderr.contains("would violate PodSecurity"), "{set:?}: {stderr}");
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let mut kubectl = cp.kubectl();
            kubectl.args(["create", "--dry-run=server", "-f", "-"]);
            let out = run_stdin(kubectl, &pod_from_template(d).to_string());
            assert!(
                out.status.success(),
                "{set:?} {}: {}",
                d["metadata"]["name"],
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The monitoring objects (PodMonitors, PrometheusRule, the dashboard ConfigMap) are accepted
/// by the Prometheus Operator's own CRDs (from its pinned module, `tools/testbin/monitoring`),
/// which refuse a malformed one; `monitoring.labels` reach each object and each part can be
/// left out.
#[tokio::test]
async fn the_monitoring_objects_are_accepted_by_the_prometheus_operators_crds() {
    let cp = qdr_tests::shared().await;
    operator_namespace(cp).await;
    let crds = qdr_tests::Testbin::locate().unwrap().path("monitoring-crds");
    let out = cp.kubectl().args(["apply", "--server-side", "-f"]).arg(&crds).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for crd in ["podmonitors", "prometheusrules"] {
        let out = cp
            .kubectl()
            .args([
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}.monitoring.coreos.com"),
                "--timeout=60s",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let kinds = ["PodMonitor", "PrometheusRule", "ConfigMap"];
    let docs: Vec<Value> = helm_template(cp, &["monitoring.enabled=true", "monitoring.labels.release=prom"])
        .into_iter()
        .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(docs.len(), 5, "3 PodMonitors, the PrometheusRule, the dashboard");
    for d in &docs {
        assert_eq!(d["metadata"]["labels"]["release"], "prom", "{}", d["metadata"]["name"]);
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
    let mut kubectl = cp.kubectl();
    kubectl.args(["apply", "--dry-run=server", "-f", "-"]);
    let out = run_stdin(kubectl, &list.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The schema is enforced: a port number where a port name belongs is refused.
    let mut bad = docs.iter().find(|d| d["kind"] == "PodMonitor").unwrap().clone();
    bad["spec"]["podMetricsEndpoints"][0]["port"] = serde_json::json!(8888);
    let mut kubectl = cp.kubectl();
    kubectl.args(["apply", "--dry-run=server", "-f", "-"]);
    let out = run_stdin(kubectl, &bad.to_string());
    assert!(!out.status.success(), "a malformed PodMonitor was accepted");
    // Each part on its own switch.
    let only_rules: Vec<String> = helm_template(
        cp,
        &[
            "monitoring.enabled=true",
            "monitoring.podMonitors.enabled=false",
            "monitoring.grafanaDashboard.enabled=false",
        ],
    )
    .into_iter()
    .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
    .map(|d| d["kind"].as_str().unwrap().to_string())
    .collect();
    assert_eq!(only_rules, ["PrometheusRule"]);
    let off = helm_template(cp, &[]);
    assert!(
        off.iter().all(|d| !kinds[..2].contains(&d["kind"].as_str().unwrap_or_default())),
        "off by default"
    );
}

/// The GitHub Actions workflows (`.github/workflows/`) pass actionlint (the pinned build,
/// `tools/testbin/actionlint`), and the CI workflow runs this project's CI entry point,
/// `.ci/run`, which runs `make test`.
#[test]
fn the_workflows_pass_actionlint_and_ci_runs_the_ci_entry_point() {
    let root = qdr_tests::workspace_root();
    let actionlint = qdr_tests::Testbin::locate().unwrap().require("actionlint").unwrap();
    let workflows: Vec<std::path::PathBuf> = std::fs::read_dir(root.join(".github/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    assert!(!workflows.is_empty(), "no workflow in .github/workflows");
    let out = Command::new(&actionlint).args(&workflows).current_dir(&root).output().unwrap();
    assert!(
        out.status.success(),
        "actionlint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ci = std::fs::read_to_string(root.join(".github/workflows/ci.yml")).unwrap();
    assert!(ci.contains("bash .ci/run"), "the CI workflow does not run .ci/run");
    let entry = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(entry.contains("make test"), ".ci/run does not run make test");
    // actionlint checks the run: steps only with shellcheck on the PATH (.ci/setup installs it).
    assert!(
        std::env::split_paths(&std::env::var_os("PATH").unwrap()).any(|d| d.join("shellcheck").is_file()),
        "shellcheck is not on the PATH: actionlint would not check the workflows' scripts"
    );
    // The release workflow: on version tags, `make release` per architecture, then the
    // manifests again with the published indexes' digests.
    let release: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root.join(".github/workflows/release.yml")).unwrap())
            .unwrap();
    assert_eq!(release["on"]["push"]["tags"][0], "v[0-9]+.[0-9]+.[0-9]+*", "{release}");
    let arches: Vec<&str> = release["jobs"]["build"]["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["arch"].as_str().unwrap())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"]);
    let runs = |job: &str| -> String {
        release["jobs"][job]["steps"].as_array().unwrap().iter().filter_map(|s| s["run"].as_str()).collect()
    };
    assert!(runs("build").contains("make release VERSION="), "{}", runs("build"));
    let publish = runs("publish");
    for step in
        ["cosign sign --yes", "cosign attest", "--digests \"$DIGESTS\"", "helm push", "gh release create"]
    {
        assert!(publish.contains(step), "the publish job does not {step}");
    }
}
