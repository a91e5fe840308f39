//! The webhook registered with a real API server (`url` clientConfig, caBundle injected by
//! the webhook itself, `failurePolicy: Fail`), driven with the real kubectl.

mod common;

use std::time::Duration;

use common::{Registration, Replica, kubectl_stdin};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

struct Setup {
    /// Namespace the webhook applies to (labelled).
    ns: String,
    /// Namespace of the webhook's Secret.
    webhook_ns: String,
    reg: Registration,
    replica: Replica,
}

static SETUP: OnceCell<Setup> = OnceCell::const_new();

/// The replica's router image policy (the Go operator's examples use this repository).
const ALLOWED_IMAGES: &str = "--allowed-router-images=quay.io/interconnectedcloud/qdrouterd:*";

/// The replica's handshake and header-read timeouts.
const HOLD_LIMIT: Duration = Duration::from_secs(4);

async fn setup() -> &'static Setup {
    SETUP
        .get_or_init(|| async {
            let cp = qdr_tests::shared().await;
            let limits = [
                format!("--handshake-timeout={}ms", HOLD_LIMIT.as_millis()),
                format!("--header-read-timeout={}ms", HOLD_LIMIT.as_millis()),
            ];
            let args = ["--check-interval=1s", &limits[0], &limits[1], ALLOWED_IMAGES];
            let common::Served { ns, webhook_ns, reg, replica } = common::serve(cp, "e2e", &args).await;
            Setup { ns, webhook_ns, reg, replica }
        })
        .await
}

fn cases() -> Vec<Value> {
    let path = qdr_tests::workspace_root().join("api/tests/data/invalid.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn object(case: &Value) -> (String, Value) {
    let name = case["metadataName"].as_str().map(String::from).unwrap_or_else(|| {
        let n: String = case["name"].as_str().unwrap().chars().take(50).collect();
        format!("c-{}", n.trim_end_matches('-'))
    });
    let obj = json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                     "metadata": {"name": name}, "spec": case["spec"]});
    (name, obj)
}

#[tokio::test]
async fn kubectl_apply_of_each_invalid_spec_fails_listing_every_cause() {
    let s = setup().await;
    let cp = qdr_tests::shared().await;
    for case in cases() {
        let (name, obj) = object(&case);
        let out = kubectl_stdin(cp, &["apply", "-n", &s.ns, "-f", "-"], &obj.to_string());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let label = case["name"].as_str().unwrap();
        assert!(!out.status.success(), "{label}: applied an invalid spec");
        assert!(stderr.contains(&format!("The Interconnect \"{name}\" is invalid")), "{label}: {stderr}");
        // The defaulting webhook denies before the API server's schema checks (which would
        // stop at the first failing layer), so every cause is listed with validate's exact
        // path. kubectl prints one cause inline ("is invalid: <field>: ...") and several as
        // one "* <field>: ..." line each.
        let listed = |field: &str| {
            stderr.contains(&format!("* {field}: ")) || stderr.contains(&format!("is invalid: {field}: "))
        };
        for e in case["expect"].as_array().unwrap() {
            let field = e["field"].as_str().unwrap();
            assert!(listed(field), "{label}: no line for {field}:\n{stderr}");
        }
        assert!(!stderr.contains("were not checked"), "{label}: causes hidden:\n{stderr}");
    }
}

#[tokio::test]
async fn examples_are_admitted_with_defaults_and_reapply_is_a_no_op() {
    let s = setup().await;
    let cp = qdr_tests::shared().await;
    let dir = qdr_tests::workspace_root().join("api/tests/data/go-operator");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    for f in files {
        let file = f.file_name().unwrap().to_string_lossy().to_string();
        let apply = || cp.kubectl().args(["apply", "-n", &s.ns, "-f"]).arg(&f).output().unwrap();
        let out = apply();
        if file.starts_with("g-") || file.starts_with("h-") {
            assert!(!out.status.success(), "{file}: interior router with edgeConnectors was admitted");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("spec.edgeConnectors: Forbidden"), "{file}: {stderr}");
            continue;
        }
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let doc: Value = serde_saphyr::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        let get = || {
            let out =
                cp.kubectl().args(["get", "interconnect", name, "-n", &s.ns, "-o", "json"]).output().unwrap();
            serde_json::from_slice::<Value>(&out.stdout).unwrap()
        };
        let stored = get();
        assert_eq!(stored["spec"]["users"], format!("{name}-users"), "{file}: defaults not stored");
        assert_eq!(stored["spec"]["deploymentPlan"]["livenessPort"], 8888, "{file}");
        assert!(stored["spec"]["listeners"].as_array().is_some_and(|l| !l.is_empty()), "{file}");
        let generation = stored["metadata"]["generation"].clone();
        let out = apply();
        assert!(out.status.success(), "{file} re-apply: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(get()["metadata"]["generation"], generation, "{file}: re-apply changed the generation");
        let out = cp.kubectl().args(["delete", "interconnect", name, "-n", &s.ns]).output().unwrap();
        assert!(out.status.success());
    }
}

#[tokio::test]
async fn server_dry_run_runs_both_webhooks_and_stores_and_writes_nothing() {
    let s = setup().await;
    let cp = qdr_tests::shared().await;
    let client = cp.client().await.unwrap();
    let secret = || async {
        Api::<Secret>::namespaced(client.clone(), &s.webhook_ns)
            .get("qdr-webhook-tls")
            .await
            .unwrap()
            .metadata
            .resource_version
    };
    let vwc = || async {
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get(&s.reg.validating)
            .await
            .unwrap()
            .metadata
            .resource_version
    };
    let mwc = || async {
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get(&s.reg.mutating)
            .await
            .unwrap()
            .metadata
            .resource_version
    };
    let count = |metrics: &str, op: &str| -> f64 {
        let key = format!("qdr_webhook_requests_total{{operation=\"{op}\",result=\"allowed\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&key)).map(|v| v.trim().parse().unwrap()).unwrap_or(0.0)
    };
    let before = (secret().await, vwc().await, mwc().await);
    let m0 = common::http_get(s.replica.health, "/metrics").unwrap().1;

    let obj = r#"{"apiVersion":"interconnectedcloud.github.io/v1alpha1","kind":"Interconnect","metadata":{"name":"dry"},"spec":{"deploymentPlan":{"size":2}}}"#;
    let out = kubectl_stdin(cp, &["apply", "--dry-run=server", "-o", "json", "-n", &s.ns, "-f", "-"], obj);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["spec"]["users"], "dry-users", "the dry run shows the defaults");

    let got = cp.kubectl().args(["get", "interconnect", "dry", "-n", &s.ns]).output().unwrap();
    assert!(!got.status.success(), "a dry run stored the object");
    assert_eq!(
        (secret().await, vwc().await, mwc().await),
        before,
        "an API write happened during the dry run"
    );
    let m1 = common::http_get(s.replica.health, "/metrics").unwrap().1;
    assert!(count(&m1, "mutate") > count(&m0, "mutate"), "mutating webhook not called");
    assert!(count(&m1, "validate") > count(&m0, "validate"), "validating webhook not called");
}

#[tokio::test]
async fn health_and_metrics_endpoints_answer() {
    let s = setup().await;
    assert_eq!(common::http_get(s.replica.health, "/livez").unwrap(), (200, "ok".into()));
    assert_eq!(common::http_get(s.replica.health, "/readyz").unwrap(), (200, "ok".into()));
    let metrics = common::http_get(s.replica.health, "/metrics").unwrap().1;
    let expiry = metrics
        .lines()
        .find_map(|l| l.strip_prefix("qdr_webhook_certificate_expiry_seconds "))
        .map(|v| v.trim().parse::<f64>().unwrap())
        .expect("expiry gauge");
    assert!(expiry > 80.0 * 24.0 * 3600.0, "default 90-day certificate, got {expiry}s");
    assert!(metrics.contains("qdr_webhook_request_duration_seconds_bucket"));
}

/// What a held connection does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hold {
    /// TCP only: never starts the TLS handshake.
    Tcp,
    /// Completes the TLS handshake (ALPN h2), then sends nothing.
    Silent,
    /// HTTP/1.1 slow loris: sends a request line and then one header line every 500 ms,
    /// never ending the headers.
    Trickle,
}

/// How a held connection ended.
#[derive(Clone, Copy, Debug)]
enum Held {
    /// Never established: the TCP connect or the client's TLS handshake failed (a loaded
    /// machine's listen queue, say). Not held, so not a failure of the server's limits; the
    /// test bounds how many may end so by the count it saw established.
    Never,
    /// Closed by the server this long after it was established.
    Closed(Duration),
    /// Still open when the test gave up on it.
    Open,
}

/// Holds one connection of kind `hold` to the admission port until the server closes it
/// (or `give_up` passes).
async fn hold(
    port: u16,
    hold: Hold,
    open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    give_up: Duration,
) -> Held {
    match established(port, hold, open, give_up).await {
        None => Held::Never,
        Some(Some(after)) => Held::Closed(after),
        Some(None) => Held::Open,
    }
}

/// [`hold`]'s work: `None` when never established, else how long it stayed open (`None`
/// when not closed within `give_up`).
async fn established(
    port: u16,
    hold: Hold,
    open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    give_up: Duration,
) -> Option<Option<Duration>> {
    use std::sync::atomic::Ordering::SeqCst;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let mut stream: Box<dyn AsyncStream> = match hold {
        Hold::Tcp => Box::new(tcp),
        Hold::Silent | Hold::Trickle => {
            let mut cfg = (*common::see_any_cert()).clone();
            cfg.alpn_protocols =
                vec![if hold == Hold::Silent { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
            let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            Box::new(connector.connect(name, tcp).await.ok()?)
        }
    };
    let since = std::time::Instant::now();
    open.fetch_add(1, SeqCst);
    if hold == Hold::Trickle
        && stream.write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.is_err()
    {
        open.fetch_sub(1, SeqCst);
        return Some(Some(since.elapsed()));
    }
    let mut buf = [0u8; 256];
    let closed = loop {
        tokio::select! {
            // A close that is already there wins over a deadline that passed meanwhile.
            biased;
            r = stream.read(&mut buf) => match r {
                Ok(0) | Err(_) => break true,
                Ok(_) => {}
            },
            _ = tokio::time::sleep(Duration::from_millis(500)), if hold == Hold::Trickle => {
                if stream.write_all(b"X-Slow: yes\r\n").await.is_err() {
                    break true;
                }
            }
            _ = tokio::time::sleep_until((since + give_up).into()) => break false,
        }
    };
    open.fetch_sub(1, SeqCst);
    Some(closed.then(|| since.elapsed()))
}

trait AsyncStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> AsyncStream for T {}

/// 500 connections that never finish a request (TCP only, silent after TLS, HTTP/1.1 slow
/// loris) are held open against the admission port while a real admission request goes
/// through the API server: it succeeds (within the configuration's `timeoutSeconds`), and
/// the server closes every held connection at its handshake or header-read limit (a slow
/// loris once its answer is due: the header-read limit plus the request limit).
///
/// The connections are watched on a runtime of two threads, and kubectl runs off it
/// (`spawn_blocking`): a kubectl slowed by a loaded machine must not freeze the watch, or a
/// close that happened in time would be seen after the test's own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_do_not_stop_admission() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let s = setup().await;
    let cp = qdr_tests::shared().await;
    let open = Arc::new(AtomicUsize::new(0));
    let give_up = HOLD_LIMIT * 3 + Duration::from_secs(10);
    let kinds = [(Hold::Silent, 150), (Hold::Trickle, 150), (Hold::Tcp, 200)];
    let mut tasks = Vec::new();
    for (kind, n) in kinds {
        for _ in 0..n {
            tasks.push((kind, tokio::spawn(hold(s.replica.port, kind, open.clone(), give_up))));
        }
    }
    let deadline = std::time::Instant::now() + HOLD_LIMIT;
    while open.load(SeqCst) < 500 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = open.load(SeqCst);
    let obj = r#"{"apiVersion":"interconnectedcloud.github.io/v1alpha1","kind":"Interconnect","metadata":{"name":"held"},"spec":{}}"#;
    let started = std::time::Instant::now();
    let ns = s.ns.clone();
    let out = tokio::task::spawn_blocking(move || {
        kubectl_stdin(
            cp,
            &["create", "--dry-run=server", "-o", "jsonpath={.spec.users}", "-n", &ns, "-f", "-"],
            obj,
        )
    })
    .await
    .unwrap();
    let took = started.elapsed();
    let still = open.load(SeqCst);
    assert!(
        out.status.success(),
        "admission failed with {held} connections held: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "held-users", "not defaulted by the webhook");
    assert!(
        held >= 450 && still >= 400,
        "only {held} connections established, {still} open after the admission"
    );

    let mut closed = std::collections::BTreeMap::<String, Vec<Duration>>::new();
    let mut never = 0;
    for (kind, t) in tasks {
        match t.await.unwrap() {
            Held::Closed(after) => closed.entry(format!("{kind:?}")).or_default().push(after),
            Held::Never => never += 1,
            Held::Open => panic!("a {kind:?} connection was not closed within {give_up:?}"),
        }
    }
    println!(
        "held {held} connections ({never} never established), {still} still open after an \
         admission that took {took:?}"
    );
    for (kind, times) in &closed {
        let (min, max) = (times.iter().min().unwrap(), times.iter().max().unwrap());
        println!("{kind}: {} closed by the server after {min:?}..{max:?}", times.len());
        assert!(*min >= HOLD_LIMIT / 2, "{kind}: closed after {min:?}, before the {HOLD_LIMIT:?} limit");
        assert!(*max <= HOLD_LIMIT * 3 + Duration::from_secs(5), "{kind}: still open after {max:?}");
    }
    assert_eq!(open.load(SeqCst), 0);
}

/// Runs kubectl as `user` (impersonated by the admin) with `stdin`.
fn kubectl_as(cp: &qdr_tests::ControlPlane, user: &str, args: &[&str], stdin: &str) -> std::process::Output {
    let mut all = vec!["--as", user];
    all.extend_from_slice(args);
    kubectl_stdin(cp, &all, stdin)
}

/// Applies RBAC objects (admin).
fn apply(cp: &qdr_tests::ControlPlane, ns: &str, objects: Value) {
    let out = kubectl_stdin(cp, &["apply", "-n", ns, "-f", "-"], &objects.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules})
}

/// A Role `name` that may read, create and change Interconnects (and nothing else).
fn author_role(name: &str) -> Value {
    role(
        name,
        json!([{"apiGroups": ["interconnectedcloud.github.io"], "resources": ["interconnects"],
                "verbs": ["get", "list", "create", "update", "patch"]}]),
    )
}

fn binding(name: &str, role: &str, user: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
}

/// Repeats `run` until `done` accepts its output (RBAC changes reach the authorizer's
/// cache asynchronously), at most 30 s; returns the last output.
async fn until(
    mut run: impl FnMut() -> std::process::Output,
    done: impl Fn(&std::process::Output) -> bool,
) -> std::process::Output {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = run();
        if done(&out) || std::time::Instant::now() > deadline {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An Interconnect grants nothing its author lacks: a user who may create Interconnects but
/// not read Secrets is denied naming each field that names one; `get` on exactly those
/// Secrets, or on every Secret of the namespace, admits; an update that leaves the
/// references alone is not checked again, one that adds a reference is.
#[tokio::test]
async fn secret_references_are_authorized_as_their_author() {
    let s = setup().await;
    let cp = qdr_tests::shared().await;
    let ns = &s.ns;
    apply(
        cp,
        ns,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            author_role("ic-author"),
            binding("alice-ic-author", "ic-author", "alice"),
            binding("bob-ic-author", "ic-author", "bob"),
            role("exact-secrets", json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                                          "resourceNames": ["alice-users", "tls-a", "ca-a"]}])),
            role("all-secrets", json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])),
            binding("bob-all-secrets", "all-secrets", "bob"),
        ]}),
    );
    let ic = |name: &str, credentials: &str| {
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
               "metadata": {"name": name},
               "spec": {"deploymentPlan": {"role": "edge"}, "listeners": [{"port": 5672}], "users": "alice-users",
                        "sslProfiles": [{"name": "p", "credentials": credentials, "caCert": "ca-a"}]}})
        .to_string()
    };
    let create = |user: &'static str, name: &'static str| {
        let body = ic(name, "tls-a");
        move || kubectl_as(cp, user, &["create", "-n", ns, "-f", "-"], &body)
    };
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // Until the author binding is seen, the API server itself refuses (403); then the webhook.
    let denied = until(create("alice", "authz-a"), |o| stderr(o).contains("is invalid")).await;
    let err = stderr(&denied);
    assert!(!denied.status.success(), "admitted without Secret access");
    for field in ["spec.users", "spec.sslProfiles[0].credentials", "spec.sslProfiles[0].caCert"] {
        assert!(
            err.contains(&format!("* {field}: Forbidden: user \"alice\" may not get Secret")),
            "{field}:\n{err}"
        );
    }
    assert!(err.contains(r#"may not get Secret "alice-users" in namespace"#), "{err}");

    // `get` on exactly those Secrets.
    apply(cp, ns, binding("alice-exact-secrets", "exact-secrets", "alice"));
    let created = until(create("alice", "authz-a"), |o| o.status.success()).await;
    assert!(created.status.success(), "{}", stderr(&created));

    // Every Secret of the namespace.
    let created = until(create("bob", "authz-b"), |o| o.status.success()).await;
    assert!(created.status.success(), "{}", stderr(&created));

    // Alice loses her Secret access: an update that keeps the references is admitted without
    // a check; one that names a new Secret is checked, and only that field is denied.
    let out = cp.kubectl().args(["delete", "rolebinding", "alice-exact-secrets", "-n", ns]).output().unwrap();
    assert!(out.status.success());
    let patch = |spec: Value| {
        let body = json!({"spec": spec}).to_string();
        move || {
            kubectl_as(
                cp,
                "alice",
                &["patch", "interconnect", "authz-a", "-n", ns, "--type=merge", "-p", &body],
                "",
            )
        }
    };
    // Wait until the removal is seen: a change of the users Secret back and forth is denied.
    let out = until(patch(json!({"users": "alice-users-2"})), |o| !o.status.success()).await;
    assert!(
        stderr(&out).contains("* spec.users: Forbidden") || stderr(&out).contains("spec.users: Forbidden"),
        "{}",
        stderr(&out)
    );
    let out = patch(json!({"deploymentPlan": {"role": "edge", "size": 2}}))();
    assert!(out.status.success(), "a ratcheted update that keeps the references: {}", stderr(&out));
    let out = patch(json!({"sslProfiles": [{"name": "p", "credentials": "tls-b", "caCert": "ca-a"}]}))();
    let err = stderr(&out);
    assert!(!out.status.success(), "a new reference was admitted");
    assert!(
        err.contains(
            r#"spec.sslProfiles[0].credentials: Forbidden: user "alice" may not get Secret "tls-b""#
        ),
        "{err}"
    );
    assert!(!err.contains("spec.users") && !err.contains("caCert"), "only the new reference: {err}");
    for name in ["authz-a", "authz-b"] {
        let _ = cp.kubectl().args(["delete", "interconnect", name, "-n", ns]).output();
    }
}

/// The generated issuer is not a way around the checks: an Interconnect created with
/// nothing to sign names no `<name>-ca`; an update that makes it sign (a profile with
/// generated credentials) must be checked for that Secret, which the controller would sign
/// with if it exists, and a trusted CA moved to `issuer` is checked again.
#[tokio::test]
async fn an_update_that_makes_a_secret_sign_is_checked() {
    let s = setup().await;
    let cp = qdr_tests::shared().await;
    let ns = &s.ns;
    apply(
        cp,
        ns,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            author_role("ic-author-2"),
            binding("carol-ic-author", "ic-author-2", "carol"),
            // Everything the updates name but the issuer.
            role("carol-secrets", json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                                          "resourceNames": ["payments-q-credentials", "trusted-ca"]}])),
            binding("carol-secrets", "carol-secrets", "carol"),
        ]}),
    );
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let body = json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                      "metadata": {"name": "payments"},
                      "spec": {"deploymentPlan": {"role": "edge"}, "users": "none", "listeners": [{"port": 5672}],
                               "sslProfiles": [{"name": "p", "caCert": "trusted-ca"}]}})
    .to_string();
    let created =
        until(|| kubectl_as(cp, "carol", &["create", "-n", ns, "-f", "-"], &body), |o| o.status.success())
            .await;
    assert!(created.status.success(), "{}", stderr(&created));
    let patch = |spec: Value| {
        let body = json!({"spec": spec}).to_string();
        kubectl_as(
            cp,
            "carol",
            &["patch", "interconnect", "payments", "-n", ns, "--type=merge", "-p", &body],
            "",
        )
    };
    let signing = patch(json!({"sslProfiles": [{"name": "p", "caCert": "trusted-ca"},
                                               {"name": "q", "generateCredentials": true}]}));
    let err = stderr(&signing);
    assert!(!signing.status.success(), "the generated issuer was taken without a check");
    assert!(
        err.contains(
            r#"spec.deploymentPlan.issuer: Forbidden: user "carol" may not get Secret "payments-ca""#
        ),
        "{err}"
    );
    assert!(!err.contains("credentials: Forbidden"), "only the issuer: {err}");
    // carol loses trusted-ca, which the stored object names as a trusted CA: moving it to
    // the issuer is a new use, checked and denied.
    apply(
        cp,
        ns,
        role(
            "carol-secrets",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                                      "resourceNames": ["payments-q-credentials"]}]),
        ),
    );
    let cannot = until(
        || {
            cp.kubectl()
                .args(["auth", "can-i", "get", "secret/trusted-ca", "-n", ns, "--as", "carol"])
                .output()
                .unwrap()
        },
        |o| String::from_utf8_lossy(&o.stdout).trim() == "no",
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&cannot.stdout).trim(), "no");
    // The webhook (default flags) reuses the answer it gave at the create for up to
    // `--authorization-cache-allowed-ttl`: from then on the revocation holds.
    tokio::time::sleep(qdr_webhook::authorize::ALLOWED_TTL + Duration::from_millis(500)).await;
    let moved = patch(json!({"deploymentPlan": {"role": "edge", "issuer": "trusted-ca"}}));
    let err = stderr(&moved);
    assert!(!moved.status.success(), "a trusted CA became the issuer without a check");
    assert!(
        err.contains(
            r#"spec.deploymentPlan.issuer: Forbidden: user "carol" may not get Secret "trusted-ca""#
        ),
        "{err}"
    );
    let _ = cp.kubectl().args(["delete", "interconnect", "payments", "-n", ns]).output();
}

/// `--allowed-router-images` through the API server: an image outside the patterns is
/// denied at `spec.deploymentPlan.image`, one inside admitted, an absent one not checked.
#[tokio::test]
async fn router_images_outside_the_policy_are_denied() {
    let s = setup().await;
    let cp = qdr_tests::shared().await;
    let ic = |image: Option<&str>| {
        let mut plan = json!({"role": "edge"});
        if let Some(i) = image {
            plan["image"] = json!(i);
        }
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
               "metadata": {"name": "imaged"}, "spec": {"deploymentPlan": plan}})
        .to_string()
    };
    let create =
        |image| kubectl_stdin(cp, &["create", "--dry-run=server", "-n", &s.ns, "-f", "-"], &ic(image));
    let out = create(Some("evil.example/qdrouterd:1.19.0"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a disallowed image was admitted");
    assert!(
        err.contains(
            r#"spec.deploymentPlan.image: Forbidden: image "evil.example/qdrouterd:1.19.0" is not allowed"#
        ),
        "{err}"
    );
    assert!(err.contains("quay.io/interconnectedcloud/qdrouterd:*"), "names the allowed patterns: {err}");
    for allowed in [Some("quay.io/interconnectedcloud/qdrouterd:1.19.0"), None] {
        let out = create(allowed);
        assert!(out.status.success(), "{allowed:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// SubjectAccessReview answers are reused within their time to live, for the same identity
/// and Secrets only, and asked anew without the cache: counted in the audit log by this
/// test's own `User-Agent` (the reviews of the webhook under test and of other tests do not
/// count).
#[tokio::test]
async fn reference_answers_are_reused_within_their_ttl() {
    use k8s_openapi::api::authentication::v1::UserInfo;
    use qdr_webhook::authorize::{Authorizer, DecisionCache};
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("sar-cache").await;
    let authorizer = |agent: &'static str, ttl: Duration| async move {
        let kc = kube::config::Kubeconfig::read_from(cp.kubeconfig()).unwrap();
        let mut config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        config.headers.push((http::header::USER_AGENT, http::HeaderValue::from_static(agent)));
        Authorizer::new(kube::Client::try_from(config).unwrap(), DecisionCache::new(ttl, ttl, 100))
    };
    let reviews = |agent: &str| {
        cp.requests_by(agent)
            .iter()
            .filter(|e| e.object_ref.as_ref().is_some_and(|o| o.resource == "subjectaccessreviews"))
            .count()
    };
    let settled = |agent: &'static str, expected: usize| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while reviews(agent) < expected && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A little longer: a review too many would show up now.
        tokio::time::sleep(Duration::from_millis(500)).await;
        reviews(agent)
    };
    let user = |name: &str| UserInfo { username: Some(name.into()), ..Default::default() };
    let secrets: std::collections::BTreeSet<&str> = ["a", "b"].into();
    let all: std::collections::BTreeSet<String> = ["a".to_string(), "b".to_string()].into();

    // A user with no Secret access: one review for the namespace, then one per name.
    let cached = authorizer("qdr-sar-cache-test/1", Duration::from_secs(600)).await;
    assert_eq!(cached.unreadable(&user("nobody"), &ns.name, &secrets).await.unwrap(), all);
    assert_eq!(settled("qdr-sar-cache-test/", 3).await, 3, "1 + 2 reviews");
    for _ in 0..5 {
        assert_eq!(cached.unreadable(&user("nobody"), &ns.name, &secrets).await.unwrap(), all);
    }
    assert_eq!(settled("qdr-sar-cache-test/", 3).await, 3, "the same questions are answered from the cache");
    // Another identity is another question; the cluster admin is allowed by the first review.
    let admin = UserInfo { groups: Some(vec!["system:masters".into()]), ..user("admin") };
    assert!(cached.unreadable(&admin, &ns.name, &secrets).await.unwrap().is_empty());
    assert_eq!(settled("qdr-sar-cache-test/", 4).await, 4, "one review for the admin");

    // Without the cache every call asks again.
    let uncached = authorizer("qdr-sar-nocache-test/1", Duration::ZERO).await;
    for _ in 0..2 {
        assert_eq!(uncached.unreadable(&user("nobody"), &ns.name, &secrets).await.unwrap(), all);
    }
    assert_eq!(settled("qdr-sar-nocache-test/", 6).await, 6, "3 reviews per call");
}
