//! The workspace's own programs (`qdr-webhook`, `qdr-controller`) run as processes against
//! the test control plane: where their binaries are, and the webhook's registration, start
//! and readiness. Used by the webhook's, the controller's and the system tests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::rbac::Install;
use crate::{ControlPlane, Process};

/// The workspace binary `name` (`qdr-webhook`, `qdr-controller`) of the profile the running
/// test was built with: test executables live in `target/<profile>/deps/`, the binaries one
/// level up. `cargo test --workspace` builds every binary of the workspace.
///
/// # Panics
/// When the binary is missing, with the command that builds it.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>");
    let bin = dir.join(name);
    assert!(bin.is_file(), "{} is missing: build it with `cargo build --bins`", bin.display());
    bin
}

/// A free TCP port on 127.0.0.1 (bound once and released), never one this process was given
/// before: a port is often bound only later, by a child process, and the kernel may hand the
/// released port out again meanwhile (a webhook's admission and health ports once came out
/// equal: `Address already in use`).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if given.insert(port) {
            return port;
        }
    }
}

/// `GET http://127.0.0.1:<port><path>` → (status, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_from("127.0.0.1", port, path)
}

/// `GET http://<host>:<port><path>` → (status, body) (a pod's address on the real node, say).
pub fn http_get_from(host: &str, port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect((host, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

/// A webhook registration: one Validating and one Mutating configuration for
/// Interconnects in namespaces labelled `qdr-operator.test/webhook=<label>`.
pub struct Registration {
    /// Name of the ValidatingWebhookConfiguration.
    pub validating: String,
    /// Name of the MutatingWebhookConfiguration.
    pub mutating: String,
    /// The namespace label value it selects.
    pub label: String,
}

/// Creates the two configurations, `failurePolicy: Fail`, `sideEffects: None`, calling
/// `https://127.0.0.1:<validate_port>/validate` and `https://127.0.0.1:<mutate_port>/mutate`,
/// with no caBundle yet (the webhook injects it).
pub async fn register(
    client: &kube::Client,
    label: &str,
    validate_port: u16,
    mutate_port: u16,
) -> Registration {
    let rules = json!([{"apiGroups": ["interconnectedcloud.github.io"], "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"], "resources": ["interconnects"]}]);
    let selector = json!({"matchLabels": {"qdr-operator.test/webhook": label}});
    let entry = |name: &str, port: u16, path: &str| {
        json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
               "timeoutSeconds": 5, "matchPolicy": "Equivalent", "rules": rules, "namespaceSelector": selector,
               "clientConfig": {"url": format!("https://127.0.0.1:{port}/{path}")}})
    };
    let reg = Registration {
        validating: format!("qdr-test-validating-{label}"),
        mutating: format!("qdr-test-mutating-{label}"),
        label: label.into(),
    };
    // The validating webhook also admits Links and token Secrets (links across clusters),
    // as deploy/ registers it.
    let mut validating = entry("vinterconnect.qdr-operator.io", validate_port, "validate");
    validating["rules"].as_array_mut().unwrap().push(json!({"apiGroups": ["interconnectedcloud.github.io"],
        "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["links"]}));
    let mut tokens = entry("vlinktoken.qdr-operator.io", validate_port, "validate");
    tokens["rules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
        "resources": ["secrets"]}]);
    tokens["objectSelector"] = json!({"matchLabels": {qdr_api::links::token::TOKEN_LABEL: "true"}});
    let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": reg.validating}, "webhooks": [validating, tokens]
    }))
    .unwrap();
    let m: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": reg.mutating}, "webhooks": [entry("minterconnect.qdr-operator.io", mutate_port, "mutate")]
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &v)
        .await
        .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &m)
        .await
        .unwrap();
    reg
}

/// One running webhook replica.
pub struct Replica {
    /// Its admission (TLS) port.
    pub port: u16,
    /// Its health and metrics port.
    pub health: u16,
    /// The process.
    pub process: Process,
}

/// The installation of namespace `ns` serving `reg`: `deploy/`'s RBAC, naming `reg`'s
/// webhook configurations.
pub fn install(ns: &str, reg: &Registration) -> Install {
    Install { validating: reg.validating.clone(), mutating: reg.mutating.clone(), ..Install::new(ns) }
}

/// Starts `qdr-webhook` in secret mode for `reg`, with extra args (lifetimes, ...), as the
/// `qdr-webhook` ServiceAccount of `ns` bound by `deploy/`'s RBAC.
pub fn start_replica(cp: &ControlPlane, ns: &str, reg: &Registration, port: u16, extra: &[&str]) -> Replica {
    start_replica_of(&binary("qdr-webhook"), cp, ns, reg, port, extra)
}

/// [`start_replica`] of the webhook binary at `program` (for example the binary the image
/// holds, [`crate::images::operator_binary`]).
pub fn start_replica_of(
    program: &std::path::Path,
    cp: &ControlPlane,
    ns: &str,
    reg: &Registration,
    port: u16,
    extra: &[&str],
) -> Replica {
    let health = free_port();
    let ids = cp.install_rbac(&install(ns, reg)).expect("installing deploy/'s RBAC");
    let mut cmd = Command::new(program);
    cmd.env("KUBECONFIG", ids.webhook).env("RUST_LOG", "info,kube=warn").args([
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--health-listen=127.0.0.1:{health}"),
        &format!("--namespace={ns}"),
        "--extra-san=127.0.0.1",
        &format!("--validating-config={}", reg.validating),
        &format!("--mutating-config={}", reg.mutating),
        "--shutdown-delay=0s",
    ]);
    cmd.args(extra);
    let log = cp.dir().join(format!("webhook-{port}.log"));
    let process = Process::spawn(&format!("qdr-webhook:{port}"), cmd, &log).expect("start webhook");
    Replica { port, health, process }
}

/// Waits until the replica reports ready (it serves a certificate the live caBundle trusts).
pub async fn wait_ready(r: &Replica, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = r.process.exited() {
            panic!("webhook exited ({status}):\n{}", r.process.log_tail(40));
        }
        if matches!(http_get(r.health, "/readyz"), Some((200, _))) {
            return;
        }
        assert!(Instant::now() < deadline, "webhook not ready:\n{}", r.process.log_tail(40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the API server actually calls the webhooks for `ns` (it picks configuration
/// changes up asynchronously): a server-side dry-run create comes back defaulted.
pub async fn wait_admission_works(cp: &ControlPlane, ns: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let probe = r#"{"apiVersion":"interconnectedcloud.github.io/v1alpha1","kind":"Interconnect","metadata":{"name":"probe"},"spec":{}}"#;
    loop {
        let out = kubectl_stdin(
            cp,
            &["create", "--dry-run=server", "-o", "jsonpath={.spec.users}", "-n", ns, "-f", "-"],
            probe,
        );
        if out.status.success() && String::from_utf8_lossy(&out.stdout) == "probe-users" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "admission never worked: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs kubectl with `stdin` as its standard input.
pub fn kubectl_stdin(cp: &ControlPlane, args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = cp
        .kubectl()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Labels namespace `ns` so the registration `label` applies to it.
pub fn label_namespace(cp: &ControlPlane, ns: &str, label: &str) {
    let out = cp
        .kubectl()
        .args(["label", "ns", ns, &format!("qdr-operator.test/webhook={label}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
