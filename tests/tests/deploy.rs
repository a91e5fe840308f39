//! The cluster-admin install (`deploy/`, a kustomize base) against the real API server: it
//! applies cleanly with `--dry-run=server`, and both Deployments' pods are admitted under the
//! Pod Security "restricted" level that the namespace enforces.

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
    let out =
        cp.kubectl().arg("apply").arg("-f").arg(root.join("deploy/base/namespace.yaml")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

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
        assert_eq!(
            ports(&spec["egress"]),
            ["443", "6443"].map(String::from).into(),
            "{name}: egress beyond the API server"
        );
    }
}
