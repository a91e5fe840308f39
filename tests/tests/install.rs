//! The operator installed for real, as pods on the real node (`qdr_tests::real_node`), the
//! way a cluster admin installs it: `kubectl apply -k` of `deploy/` and of the namespaced
//! overlay, and `helm install` of the chart, each through only what the node needs changed
//! (`qdr_tests::install`: image names, pull policy, placement on `real-0`). Routers run on
//! simulated nodes.
//!
//! Each install is checked the same way: its namespace enforces Pod Security `restricted`
//! and the pods start; the webhook makes its CA and injects the `caBundle`; the API server
//! calls the webhook through its Service (a bad Interconnect is refused with every cause, a
//! good one stored with its defaults); the controller pods elect a leader; an Interconnect
//! reaches Ready with its routers on the simulated nodes. `deploy/` then loses its leading
//! controller pod (another takes over and reconciles), a webhook pod while 200 Interconnects
//! are created (no admission fails), and meets an eviction the PodDisruptionBudget refuses.
//! Uninstalling leaves nothing of ours but the CRD. The installs take turns: they share
//! cluster-scoped names.

use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use qdr_tests::ControlPlane;
use serde_json::{Value, json};

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// `eprintln!` with the seconds since the first message of this binary, for the timings.
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[{:6.1}s] {}", START.get_or_init(Instant::now).elapsed().as_secs_f64(), format!($($arg)*))
    };
}

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Simulated nodes for the routers.
const NODES: usize = 3;

/// The control plane with the real node, simulated nodes and the operator's images imported.
async fn cluster() -> &'static ControlPlane {
    say!("starting the control plane");
    let cp = qdr_tests::shared_with_real_node().await;
    READY
        .get_or_init(|| async {
            for i in 0..NODES {
                cp.add_node(&format!("node-{i}")).await.expect("simulated node");
            }
            let t = Instant::now();
            qdr_tests::install::import_operator_images(cp).expect("operator images");
            say!(
                "control plane with the real node: {:.1?} (node Ready {:.1?} after containerd); images: {:.1?}",
                cp.startup,
                cp.real_node().unwrap().startup,
                t.elapsed()
            );
        })
        .await;
    cp
}

fn root() -> PathBuf {
    qdr_tests::workspace_root()
}

use qdr_tests::routers::{kubectl, ok};

fn interconnects(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates namespace `name` for Interconnects (an existing one is fine).
fn app_namespace(cp: &ControlPlane, name: &str) {
    let _ = kubectl(cp, &["create", "namespace", name]);
}

/// What every install must do once applied. `operator_ns` holds the operator, `app_ns` is a
/// namespace its webhook and controller serve. Returns the controller pods' names.
async fn check_running_install(cp: &ControlPlane, operator_ns: &str, app_ns: &str) -> Vec<String> {
    let client = cp.client().await.unwrap();
    let t = Instant::now();
    // Pod Security "restricted" is enforced where the pods run, and they start under it.
    let labels = ok(kubectl(cp, &["get", "ns", operator_ns, "-o", "jsonpath={.metadata.labels}"]));
    assert!(labels.contains(r#""pod-security.kubernetes.io/enforce":"restricted""#), "{labels}");
    let waited = kubectl(
        cp,
        &["wait", "--for=condition=Available", "deployment", "--all", "-n", operator_ns, "--timeout=180s"],
    );
    if !waited.status.success() {
        let pods = kubectl(cp, &["get", "pods", "-n", operator_ns, "-o", "wide"]);
        let events = kubectl(cp, &["get", "events", "-n", operator_ns]);
        panic!(
            "the operator's Deployments are not Available: {}\n{}\n{}\n{}",
            String::from_utf8_lossy(&waited.stderr),
            String::from_utf8_lossy(&pods.stdout),
            String::from_utf8_lossy(&events.stdout),
            cp.real_node().unwrap().logs_tail(30)
        );
    }
    say!("{operator_ns}: Deployments Available {:.1?} after the apply returned", t.elapsed());
    let pods: Api<Pod> = Api::namespaced(client.clone(), operator_ns);
    let all = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 4, "two webhook and two controller pods");
    for p in &all {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(qdr_tests::real_node::NODE));
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("10.88.0.")));
    }

    // The webhook made its CA and injected the caBundle of both configurations.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), operator_ns);
    let bundle = qdr_tests::eventually("the webhook's Secret", Duration::from_secs(60), || {
        let secrets = secrets.clone();
        async move {
            let s = secrets.get_opt("qdr-webhook-tls").await.ok()??;
            let b = s.data?.get("ca-bundle.crt")?.0.clone();
            Some(String::from_utf8(b).unwrap())
        }
    })
    .await;
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let configs: Value = serde_json::from_str(&ok(kubectl(
            cp,
            &["get", kind, "-l", "app.kubernetes.io/part-of=qdr-operator", "-o", "json"],
        )))
        .unwrap();
        let items = configs["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{kind}: {configs}");
        for w in items[0]["webhooks"].as_array().unwrap() {
            // Through the Service, never a URL.
            assert_eq!(w["clientConfig"]["service"]["name"], "qdr-webhook", "{w}");
            assert_eq!(w["clientConfig"]["service"]["namespace"], operator_ns, "{w}");
            assert!(w["clientConfig"].get("url").is_none());
            qdr_tests::eventually("the caBundle injected", Duration::from_secs(60), || async {
                let now: Value = serde_json::from_str(&ok(kubectl(
                    cp,
                    &["get", kind, items[0]["metadata"]["name"].as_str().unwrap(), "-o", "json"],
                )))
                .ok()?;
                let b64 = now["webhooks"][0]["clientConfig"]["caBundle"].as_str()?.to_string();
                use base64::Engine as _;
                let pem = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
                (String::from_utf8_lossy(&pem) == bundle).then_some(())
            })
            .await;
        }
    }

    // The API server calls the webhook through its Service: an Interconnect that only the
    // validating webhook can judge (a reference across fields, which the schema does not
    // check) is refused with its field path; a valid one is stored with the defaults the
    // mutating webhook adds.
    let refused = qdr_tests::install::refused_by_webhook(cp, app_ns).await;
    assert!(refused.contains("spec.listeners[0].sslProfile"), "{refused}");
    // It was the webhook pods that refused it: their own request counters say so (read on
    // the pods' addresses, which the host reaches on the bridge).
    let webhook_pods =
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=qdr-webhook")).await.unwrap();
    let denied: u64 = webhook_pods
        .items
        .iter()
        .map(|p| denied_requests(p.status.as_ref().unwrap().pod_ip.as_deref().unwrap()))
        .sum();
    assert!(denied >= 1, "no webhook pod counted a denied request");
    let example = root().join("deploy/examples/interior-mesh.yaml").display().to_string();
    let stored = ok(kubectl(cp, &["apply", "-n", app_ns, "-f", &example]));
    assert!(stored.contains("router-mesh created") || stored.contains("router-mesh configured"), "{stored}");
    let users = ok(kubectl(
        cp,
        &["get", "interconnect", "router-mesh", "-n", app_ns, "-o", "jsonpath={.spec.users}"],
    ));
    assert_eq!(users, "router-mesh-users", "the mutating webhook's default");

    // The controller pods elect one leader.
    let controllers: Vec<String> = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=qdr-controller"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    let leases: Api<Lease> = Api::namespaced(client.clone(), operator_ns);
    let holder = qdr_tests::eventually("a leader", Duration::from_secs(60), || async {
        let l = leases.get_opt("qdr-operator-controller").await.ok()??;
        l.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;
    assert!(controllers.contains(&holder), "{holder} is not one of {controllers:?}");

    // The Interconnect reaches Ready with its routers on the simulated nodes.
    ok(kubectl(
        cp,
        &["wait", "--for=condition=Ready", "interconnect/router-mesh", "-n", app_ns, "--timeout=120s"],
    ));
    let routers: Api<Pod> = Api::namespaced(client.clone(), app_ns);
    let routers = routers.list(&ListParams::default().labels("application=router-mesh")).await.unwrap().items;
    assert!(!routers.is_empty());
    for r in &routers {
        let node = r.spec.as_ref().unwrap().node_name.clone().unwrap_or_default();
        assert!(node.starts_with("node-"), "router {:?} on {node}", r.metadata.name);
    }
    say!("{operator_ns}: install checked, Interconnect Ready {:.1?} after the apply returned", t.elapsed());
    controllers
}

/// The webhooks admit Interconnects in the operator's own namespace too (the controller
/// reconciles it): a user who may create Interconnects there but not read Secrets is refused
/// one that names the webhook's own TLS Secret, at the field that names it.
async fn the_operator_namespace_is_admitted(cp: &ControlPlane, operator_ns: &str) {
    let rbac = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
            {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {{"name": "ic-author", "namespace": "{operator_ns}"}},
              "rules": [{{"apiGroups": ["interconnectedcloud.github.io"], "resources": ["interconnects"], "verbs": ["create"]}}]}},
            {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {{"name": "ic-author", "namespace": "{operator_ns}"}},
              "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ic-author"}},
              "subjects": [{{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}}]}}]}}"#
    );
    let out = qdr_tests::components::kubectl_stdin(cp, &["apply", "-f", "-"], &rbac);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let taker = r#"{"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "taker"},
        "spec": {"sslProfiles": [{"name": "p", "credentials": "qdr-webhook-tls"}]}}"#;
    let refused =
        qdr_tests::eventually("the operator's namespace admitted", Duration::from_secs(60), || async {
            let out = qdr_tests::components::kubectl_stdin(
                cp,
                &["create", "--as", "mallory", "-n", operator_ns, "--dry-run=server", "-f", "-"],
                taker,
            );
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(!out.status.success(), "admitted in {operator_ns}: the reference was not checked");
            // Until the binding is seen the API server refuses on its own (403, no field).
            err.contains("is invalid").then_some(err)
        })
        .await;
    assert!(
        refused.contains(r#"spec.sslProfiles[0].credentials: Forbidden: user "mallory" may not get Secret "qdr-webhook-tls""#),
        "{refused}"
    );
    ok(kubectl(cp, &["delete", "rolebinding,role", "ic-author", "-n", operator_ns]));
}

/// Waits up to 60 s until `kubectl <args>` prints exactly `want`.
#[track_caller]
fn wait_output(cp: &ControlPlane, args: &[&str], want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl(cp, args);
        let got = String::from_utf8_lossy(&out.stdout);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "kubectl {args:?} printed {got:?}, not {want:?}, for 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Posts an Eviction for pod `ns/name` (`kubectl create --raw`, no retries).
fn evict(cp: &ControlPlane, ns: &str, name: &str) -> Output {
    let body =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}});
    qdr_tests::components::kubectl_stdin(
        cp,
        &["create", "--raw", &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"), "-f", "-"],
        &body.to_string(),
    )
}

/// `qdr_webhook_requests_total{result="denied"}` of the webhook pod at `ip` (its health and
/// metrics port, 8081), summed over operations.
fn denied_requests(ip: &str) -> u64 {
    let (_, body) =
        qdr_tests::components::http_get_from(ip, 8081, "/metrics").expect("the webhook pod's metrics port");
    body.lines()
        .filter(|l| l.starts_with("qdr_webhook_requests_total{") && l.contains(r#"result="denied""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Every namespaced object left in `ns` and every cluster-scoped object labelled ours, other
/// than what Kubernetes itself keeps in a namespace (its root CA ConfigMap, the default
/// ServiceAccount, Events).
fn objects_of_ours(cp: &ControlPlane, ns: &str) -> Vec<String> {
    let namespaced = ok(kubectl(cp, &["api-resources", "--verbs=list", "--namespaced", "-o", "name"]));
    let kinds: Vec<&str> = namespaced.lines().filter(|k| !k.starts_with("events")).collect();
    let mut left: Vec<String> = ok(kubectl(cp, &["get", &kinds.join(","), "-n", ns, "-o", "name"]))
        .lines()
        .filter(|o| !matches!(*o, "configmap/kube-root-ca.crt" | "serviceaccount/default"))
        .map(String::from)
        .collect();
    let cluster =
        "clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations";
    left.extend(
        ok(kubectl(cp, &["get", cluster, "-l", "app.kubernetes.io/part-of=qdr-operator", "-o", "name"]))
            .lines()
            .map(String::from),
    );
    left
}

fn wait_gone(cp: &ControlPlane, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let left = objects_of_ours(cp, ns);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left after uninstalling:\n{}", left.join("\n"));
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Runs its commands when dropped during a panic, so that a failed install does not stand
/// in the way of the next one (the installs share cluster-scoped names).
struct UninstallOnPanic<'a> {
    cp: &'a ControlPlane,
    kubectl: Vec<Vec<String>>,
    helm: Vec<Vec<String>>,
}

impl Drop for UninstallOnPanic<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        say!("uninstalling after the failure ...");
        for args in &self.helm {
            let _ = self.cp.helm().args(args).output();
        }
        for args in &self.kubectl {
            let _ = self.cp.kubectl().args(args).output();
        }
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn crd_exists(cp: &ControlPlane) -> bool {
    kubectl(cp, &["get", "crd", "interconnects.interconnectedcloud.github.io"]).status.success()
}

/// How the flood reports a create stored without the mutating webhook's defaults.
const UNDEFAULTED: &str = "stored without the webhook's defaults";

/// The API server's log (`kube-apiserver.log` of the control plane), empty when unreadable.
fn apiserver_log(cp: &ControlPlane) -> String {
    std::fs::read_to_string(cp.dir().join("kube-apiserver.log")).unwrap_or_default()
}

/// The API server's log lines about failed webhook calls after its first `from` bytes: a
/// `failing open` warning for each call of a webhook with `failurePolicy: Ignore`, an error
/// for every failed call, each with Go's reason (`context deadline exceeded`, `EOF`,
/// `broken pipe`, ...).
fn failed_webhook_calls(cp: &ControlPlane, from: usize) -> Vec<String> {
    let log = apiserver_log(cp);
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("failed calling webhook"))
        .map(String::from)
        .collect()
}

/// Most Interconnects the webhook-pod flood creates: it goes on until the deleted pod is
/// gone (its 10 s drain and its shutdown, about 250 creates here), at most this many.
const FLOOD_MAX: u64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploy_installs_for_real_and_survives_losing_pods() {
    let cp = cluster().await;
    let _turn = TURN.lock().await;
    say!("start");
    let client = cp.client().await.unwrap();
    let overlay = qdr_tests::install::real_node_overlay(
        &root().join("deploy"),
        &cp.dir().join("overlay-deploy"),
        false,
    )
    .unwrap()
    .display()
    .to_string();
    let t = Instant::now();
    let _undo = UninstallOnPanic {
        cp,
        kubectl: vec![
            strings(&[
                "delete",
                "namespace",
                "install-apps",
                "install-flood",
                "--ignore-not-found",
                "--wait=false",
            ]),
            strings(&["delete", "-k", &overlay, "--ignore-not-found", "--timeout=120s"]),
            strings(&["uncordon", qdr_tests::real_node::NODE]),
        ],
        helm: vec![],
    };
    ok(kubectl(cp, &["apply", "-k", &overlay]));
    let app_ns = "install-apps";
    app_namespace(cp, app_ns);
    let controllers = check_running_install(cp, "qdr-operator", app_ns).await;
    say!("deploy/: kubectl apply -k → Interconnect Ready in {:.1?}", t.elapsed());
    the_operator_namespace_is_admitted(cp, "qdr-operator").await;

    // The leading controller pod is deleted: another takes over, and reconciles.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "qdr-operator");
    let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    let leader = holder(leases.get("qdr-operator-controller").await.unwrap());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "qdr-operator");
    let t = Instant::now();
    pods.delete(&leader, &DeleteParams::default()).await.unwrap();
    let next = qdr_tests::eventually("another controller leading", Duration::from_secs(60), || async {
        let h = holder(leases.get("qdr-operator-controller").await.ok()?);
        (!h.is_empty() && h != leader).then_some(h)
    })
    .await;
    let takeover = t.elapsed();
    say!("leading controller pod deleted → {next} leads in {takeover:.1?}");
    assert!(controllers.contains(&next) || next.starts_with("qdr-controller-"), "{next}");
    // The controller's --lease-duration (15 s) bounds a takeover even without a release; the
    // graceful release on SIGTERM makes it faster. Margin: one more duration.
    assert!(takeover < Duration::from_secs(30), "takeover took {takeover:?}");
    ok(kubectl(
        cp,
        &[
            "patch",
            "interconnect",
            "router-mesh",
            "-n",
            app_ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"deploymentPlan":{"size":2}}}"#,
        ],
    ));
    qdr_tests::eventually("the new leader reconciles a change", Duration::from_secs(60), || async {
        let out =
            kubectl(cp, &["get", "deploy", "router-mesh", "-n", app_ns, "-o", "jsonpath={.spec.replicas}"]);
        (String::from_utf8_lossy(&out.stdout) == "2").then_some(())
    })
    .await;

    // A webhook pod is deleted while Interconnects are created (at least 200, and until the
    // pod is gone, so the flood spans its whole drain and its shutdown): no admission fails
    // and no review is lost to a closed connection.
    let flood_ns = "install-flood";
    app_namespace(cp, flood_ns);
    let api = interconnects(&client, flood_ns);
    let (created, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let errors: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let next_index = Arc::new(AtomicU64::new(0));
    let victim_gone = Arc::new(AtomicBool::new(false));
    let log_from = apiserver_log(cp).len();
    let t = Instant::now();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (api, created, failed, errors, next_index, victim_gone) = (
                api.clone(),
                created.clone(),
                failed.clone(),
                errors.clone(),
                next_index.clone(),
                victim_gone.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let i = next_index.fetch_add(1, Ordering::SeqCst);
                    if i >= FLOOD_MAX || (i >= 200 && victim_gone.load(Ordering::SeqCst)) {
                        break;
                    }
                    let obj: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                        "metadata": {"name": format!("flood-{i}")}, "spec": {"deploymentPlan": {"size": 1}}
                    }))
                    .unwrap();
                    match api.create(&PostParams::default(), &obj).await {
                        Ok(o) if o.data["spec"]["users"].is_string() => {
                            created.fetch_add(1, Ordering::SeqCst)
                        }
                        Ok(_) => {
                            errors.lock().unwrap().push(format!("flood-{i}: {UNDEFAULTED}"));
                            failed.fetch_add(1, Ordering::SeqCst)
                        }
                        Err(e) => {
                            errors.lock().unwrap().push(format!("flood-{i}: {e}"));
                            failed.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                }
            })
        })
        .collect();
    // Once the flood runs, one webhook pod goes (a normal, graceful delete).
    while created.load(Ordering::SeqCst) + failed.load(Ordering::SeqCst) < 40 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let webhooks =
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=qdr-webhook")).await.unwrap();
    let victim = webhooks.items[0].metadata.name.clone().unwrap();
    let deleted_at = Instant::now();
    pods.delete(&victim, &DeleteParams::default()).await.unwrap();
    // The deleted pod drains (`--shutdown-delay`, 10 s), then shuts down: the API server's
    // kept-alive connections to it must have ended without a review lost.
    while pods.get_opt(&victim).await.unwrap().is_some() && next_index.load(Ordering::SeqCst) < FLOOD_MAX {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone_after = deleted_at.elapsed();
    victim_gone.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let flood = t.elapsed();
    let (created, failed) = (created.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    say!(
        "{} creates with webhook pod {victim} deleted during them (gone {gone_after:.1?} after its delete): {created} admitted, {failed} failed, in {flood:.1?}",
        created + failed
    );
    // A create the webhook refused or could not be asked about failed. A create stored
    // without the defaults is a failure unless the API server logged its mutating call
    // failing open on the webhook's 2 s `timeoutSeconds` (a slow answer on a loaded machine,
    // the fail-open the mutating webhook is configured for): a call that failed open on a
    // lost connection (EOF, broken pipe, reset, refused) is what a drain must never cause.
    let calls = failed_webhook_calls(cp, log_from);
    let (timeouts, lost): (Vec<&String>, Vec<&String>) = calls
        .iter()
        .filter(|l| l.contains("failing open"))
        .partition(|l| l.contains("context deadline exceeded") || l.contains("Client.Timeout"));
    let errors = std::mem::take(&mut *errors.lock().unwrap());
    let undefaulted = errors.iter().filter(|e| e.ends_with(UNDEFAULTED)).count();
    if !timeouts.is_empty() {
        say!("{} mutating calls failed open on their timeout (2 s) during the flood", timeouts.len());
    }
    assert!(
        errors.len() == undefaulted && lost.is_empty() && undefaulted <= timeouts.len(),
        "failed admissions:\n{}\nthe API server's webhook calls that failed during the flood:\n{}",
        errors.join("\n"),
        calls[calls.len().saturating_sub(10)..].join("\n")
    );
    assert!(created >= 200, "{created} admitted");
    assert!(
        next_index.load(Ordering::SeqCst) < FLOOD_MAX,
        "the deleted webhook pod outlived {FLOOD_MAX} creates"
    );
    ok(kubectl(
        cp,
        &["wait", "--for=delete", &format!("pod/{victim}"), "-n", "qdr-operator", "--timeout=90s"],
    ));
    ok(kubectl(
        cp,
        &["wait", "--for=condition=Available", "deploy/qdr-webhook", "-n", "qdr-operator", "--timeout=90s"],
    ));
    wait_output(
        cp,
        &["get", "deploy", "qdr-webhook", "-n", "qdr-operator", "-o", "jsonpath={.status.readyReplicas}"],
        "2",
    );
    say!("webhook pod deleted → replaced and both Ready in {:.1?}", deleted_at.elapsed());

    // Eviction (what kubectl drain does) respects the PodDisruptionBudget (minAvailable 1 of 2).
    let webhooks =
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=qdr-webhook")).await.unwrap();
    let names: Vec<String> = webhooks.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    wait_output(
        cp,
        &["get", "pdb", "qdr-webhook", "-n", "qdr-operator", "-o", "jsonpath={.status.disruptionsAllowed}"],
        "1",
    );
    // Drain-style: the node is cordoned first (so no replacement can start), then pods are
    // evicted. The first eviction leaves one webhook pod; the PDB refuses the second.
    ok(kubectl(cp, &["cordon", qdr_tests::real_node::NODE]));
    // Through kubectl, as drain does: kube's client would retry the 429 until it passes.
    let first = evict(cp, "qdr-operator", &names[0]);
    assert!(
        first.status.success(),
        "the first eviction is allowed: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = evict(cp, "qdr-operator", &names[1]);
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success() && err.contains("TooManyRequests") && err.contains("disruption budget"),
        "the second eviction must be refused by the PDB: {err}\n{}",
        String::from_utf8_lossy(&kubectl(cp, &["get", "pods", "-n", "qdr-operator", "-o", "wide"]).stdout)
    );
    say!("drain: {} evicted, {} refused by the PodDisruptionBudget", names[0], names[1]);
    // Uncordoned, the replacement starts and the webhook is whole again.
    ok(kubectl(cp, &["uncordon", qdr_tests::real_node::NODE]));
    wait_output(
        cp,
        &["get", "deploy", "qdr-webhook", "-n", "qdr-operator", "-o", "jsonpath={.status.readyReplicas}"],
        "2",
    );

    // Uninstall: nothing of ours is left (kubectl delete -k removes the CRD too).
    let t = Instant::now();
    let _ = kubectl(cp, &["delete", "namespace", flood_ns, app_ns, "--wait=false"]);
    ok(kubectl(cp, &["delete", "-k", &overlay, "--wait=true", "--timeout=180s"]));
    say!("deploy/: kubectl delete -k returned in {:.1?}", t.elapsed());
    wait_gone(cp, "qdr-operator");
    let _ = kubectl(cp, &["wait", "--for=delete", "namespace/qdr-operator", "--timeout=120s"]);
    say!("deploy/: uninstalled in {:.1?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_helm_chart_installs_for_real_and_uninstalls_to_the_crd() {
    let cp = cluster().await;
    let _turn = TURN.lock().await;
    say!("start");
    let ns = "qdr-helm";
    ok(kubectl(cp, &["create", "namespace", ns]));
    ok(kubectl(cp, &["label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted"]));
    let app_ns = "install-helm-apps";
    app_namespace(cp, app_ns);
    let t = Instant::now();
    let _undo = UninstallOnPanic {
        cp,
        kubectl: vec![strings(&["delete", "namespace", ns, app_ns, "--ignore-not-found", "--wait=false"])],
        helm: vec![strings(&["uninstall", "qdr-operator", "-n", ns, "--wait", "--timeout=2m"])],
    };
    let chart = root().join("deploy/helm/qdr-operator");
    let installed = cp
        .helm()
        .args(["install", "qdr-operator"])
        .arg(&chart)
        .args(["-n", ns])
        .args(qdr_tests::install::real_node_helm_values(false))
        .output()
        .unwrap();
    ok(installed);
    check_running_install(cp, ns, app_ns).await;
    say!("helm install → Interconnect Ready in {:.1?}", t.elapsed());
    the_operator_namespace_is_admitted(cp, ns).await;
    // The controller's hash key and the webhook's Secret are made at run time.
    let secrets: Api<Secret> = Api::namespaced(cp.client().await.unwrap(), ns);
    assert!(secrets.get_opt("qdr-webhook-tls").await.unwrap().is_some());

    let _ = kubectl(cp, &["delete", "namespace", app_ns, "--wait=false"]);
    ok(cp.helm().args(["uninstall", "qdr-operator", "-n", ns, "--wait", "--timeout=3m"]).output().unwrap());
    // Helm keeps CRDs; everything else of ours goes, including what the pods made (the
    // webhook's Secret, owned by its configuration; the hash key, owned by the Lease).
    wait_gone(cp, ns);
    assert!(crd_exists(cp), "Helm keeps the CRD");
    let _ = kubectl(cp, &["delete", "namespace", ns, "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_namespaced_overlay_installs_for_real() {
    let cp = cluster().await;
    let _turn = TURN.lock().await;
    say!("start");
    for ns in ["qdr-apps-a", "qdr-apps-b", "install-unwatched"] {
        app_namespace(cp, ns);
    }
    let overlay = qdr_tests::install::real_node_overlay(
        &root().join("deploy/overlays/namespaced"),
        &cp.dir().join("overlay-namespaced"),
        false,
    )
    .unwrap()
    .display()
    .to_string();
    let _undo = UninstallOnPanic {
        cp,
        kubectl: vec![
            strings(&["delete", "namespace", "install-unwatched", "--ignore-not-found", "--wait=false"]),
            strings(&["delete", "-k", &overlay, "--ignore-not-found", "--timeout=120s"]),
        ],
        helm: vec![],
    };
    ok(kubectl(cp, &["apply", "-k", &overlay]));
    check_running_install(cp, "qdr-operator", "qdr-apps-a").await;
    // Outside the watched namespaces: admitted by the webhooks all the same (a bad object is
    // refused, a good one stored with its defaults), and not reconciled.
    let bad = json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "bad"},
        // Invalid only to the webhook (the schema cannot say it): a listener name twice.
        "spec": {"listeners": [{"port": 5672}, {"name": "port-5672", "port": 5673}]}});
    let refused = qdr_tests::components::kubectl_stdin(
        cp,
        &["apply", "-n", "install-unwatched", "-f", "-"],
        &bad.to_string(),
    );
    let why = String::from_utf8_lossy(&refused.stderr);
    // Only `validate` (the webhook) knows this rule: the schema cannot say it.
    assert!(
        !refused.status.success() && why.contains("spec.listeners[1].name: Duplicate value"),
        "not refused by the webhook: {why}"
    );
    let example = root().join("deploy/examples/interior-mesh.yaml").display().to_string();
    ok(kubectl(cp, &["apply", "-n", "install-unwatched", "-f", &example]));
    let users = ok(kubectl(
        cp,
        &["get", "interconnect", "router-mesh", "-n", "install-unwatched", "-o", "jsonpath={.spec.users}"],
    ));
    assert_ne!(users, "", "the webhooks defaulted the Interconnect of an unwatched namespace");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deploys = ok(kubectl(cp, &["get", "deploy", "-n", "install-unwatched", "-o", "name"]));
    assert_eq!(deploys, "", "not reconciled outside the watched namespaces");

    let _ = kubectl(cp, &["delete", "namespace", "install-unwatched", "--wait=false"]);
    ok(kubectl(cp, &["delete", "-k", &overlay, "--wait=true", "--timeout=180s"]));
    wait_gone(cp, "qdr-operator");
    let _ = kubectl(cp, &["wait", "--for=delete", "namespace/qdr-operator", "--timeout=120s"]);
}

/// The release as a cluster admin gets it: the files `make release` writes
/// (`qdr_tests::release`; here with the operator binaries built with the tests and no
/// SBOMs), its three archives imported into the real node under exactly the names they carry
/// (`<registry>/<name>:<version>` and `<registry>/<name>@<digest>`), and `install.yaml`
/// applied through an overlay that adds only the operator pods' placement on the real node.
/// Every image of the manifests, the chart and the bundle is pinned by digest; the pods run
/// those digests; an example Interconnect placed on the real node reaches Ready with real
/// routers of the released router image and its mesh observed (the default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_release_installs_for_real_with_its_own_router_image() {
    use qdr_tests::release::{Images, Options};
    let cp = cluster().await;
    let _turn = TURN.lock().await;
    say!("start");
    let testbin = qdr_tests::Testbin::locate().unwrap();
    let dist = cp.dir().join("dist");
    let version = env!("CARGO_PKG_VERSION");
    // A registry of the admin's: crane's, on this machine, plain HTTP (the node and skopeo
    // are told so), which the real node pulls every image of the release from.
    let registry = Registry::start(cp, &testbin);
    let release = qdr_tests::release::write(&Options {
        version: version.into(),
        registry: format!("{}/qdr-operator", registry.host),
        out: dist.clone(),
        kubectl: testbin.require("kubectl").unwrap(),
        helm: testbin.require("helm").unwrap(),
        images: Images::Build {
            binaries: qdr_tests::images::bin_dir(),
            router_archive: qdr_tests::routers::image_archive().unwrap(),
            syft: None,
        },
    })
    .unwrap();
    say!("release written: {:?}", release.files);
    let sums = std::process::Command::new("sha256sum")
        .args(["--quiet", "--strict", "-c", "SHA256SUMS"])
        .current_dir(&dist)
        .output()
        .unwrap();
    assert!(sums.status.success(), "{}", String::from_utf8_lossy(&sums.stdout));
    let summed = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    assert_eq!(summed.lines().count(), release.files.len(), "every other file is summed");
    // The kubectl plugin and the offline checker, summed with the rest, run and say their
    // version.
    for tool in qdr_tests::release::TOOLS {
        let file = format!("bin/{}", qdr_tests::release::tool_file(tool));
        assert!(summed.lines().any(|l| l.ends_with(&format!("  {file}"))), "{file} is not in SHA256SUMS");
        let out = std::process::Command::new(dist.join(&file)).arg("--version").output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{tool} {version}"),
            "{file} --version"
        );
    }

    // Every image anywhere in the release is pinned by digest, and the router default is the
    // released router image.
    let pinned: Vec<String> = release.images.iter().map(|i| i.pinned()).collect();
    let router = release.image("router");
    let chart = ok(cp
        .helm()
        .arg("template")
        .arg("qdr")
        .arg(dist.join(format!("qdr-operator-{version}.tgz")))
        .args(["--kube-version", "1.33.0"])
        .output()
        .unwrap());
    let csv = std::fs::read_to_string(dist.join("bundle/manifests/qdr-operator.clusterserviceversion.yaml"))
        .unwrap();
    let csv: Value = serde_saphyr::from_str(&csv).unwrap();
    let related: Vec<&str> = csv["spec"]["relatedImages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["image"].as_str().unwrap())
        .collect();
    assert_eq!(related, pinned.iter().map(String::as_str).collect::<Vec<_>>(), "the bundle's relatedImages");
    for (what, text) in [
        ("install.yaml", std::fs::read_to_string(dist.join("install.yaml")).unwrap()),
        ("install-namespaced.yaml", std::fs::read_to_string(dist.join("install-namespaced.yaml")).unwrap()),
        ("the chart", chart),
    ] {
        let images: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image: "))
            .map(|i| i.trim_matches('"'))
            .collect();
        assert_eq!(images.len(), 2, "{what}: {images:?}");
        assert!(
            images.iter().all(|i| pinned.iter().any(|p| p == i)),
            "{what}: {images:?} not all of {pinned:?}"
        );
        assert!(
            text.contains(&format!("--default-image={}", router.pinned())),
            "{what}: the default router image"
        );
    }

    // NetworkPolicies are enforced on the real node from here on (kube-network-policies),
    // so the routers below start under their operator's policy.
    let t = Instant::now();
    cp.real_node().unwrap().enforce_network_policies(&testbin).await.unwrap();
    say!("release: NetworkPolicies enforced on the real node {:.1?} after asking", t.elapsed());
    // Pushed as docs/releasing.md says, with its own commands.
    let pushed = Instant::now();
    registry.push_as_documented(cp, &format!("{}/qdr-operator", registry.host), version);
    say!("release: the three images pushed as documented in {:.1?}", pushed.elapsed());
    let overlay =
        qdr_tests::install::placement_overlay(&dist.join("install.yaml"), &cp.dir().join("overlay-release"))
            .unwrap()
            .display()
            .to_string();
    let ns = "release-apps";
    let elsewhere = "release-elsewhere";
    let _undo = UninstallOnPanic {
        cp,
        kubectl: vec![
            strings(&["delete", "namespace", ns, "--ignore-not-found", "--wait=false"]),
            strings(&["delete", "namespace", elsewhere, "--ignore-not-found", "--wait=false"]),
            strings(&["delete", "-k", &overlay, "--ignore-not-found", "--timeout=120s"]),
        ],
        helm: vec![],
    };
    let t = Instant::now();
    ok(kubectl(cp, &["apply", "-k", &overlay]));
    let waited = kubectl(
        cp,
        &["wait", "--for=condition=Available", "deployment", "--all", "-n", "qdr-operator", "--timeout=180s"],
    );
    assert!(waited.status.success(), "{}", String::from_utf8_lossy(&waited.stderr));
    say!("release: Deployments Available {:.1?} after the apply", t.elapsed());
    let client = cp.client().await.unwrap();
    let runs = |pod: &Pod, image: &qdr_tests::release::Image| {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some(image.pinned().as_str()),
            "{:?}",
            pod.metadata.name
        );
        let status = pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap();
        assert!(
            status[0].image_id.ends_with(&image.digest),
            "{:?} runs {} (imageID), not {}",
            pod.metadata.name,
            status[0].image_id,
            image.digest
        );
    };
    let operator: Api<Pod> = Api::namespaced(client.clone(), "qdr-operator");
    let operator_pods = operator.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(operator_pods.len(), 4, "two webhook and two controller pods");
    for p in &operator_pods {
        let name = p.metadata.labels.as_ref().unwrap()["app.kubernetes.io/name"]
            .trim_start_matches("qdr-")
            .to_string();
        runs(p, release.image(&name));
    }

    // The example, placed on the real node, with the webhook's defaults and the controller's
    // default router image.
    app_namespace(cp, ns);
    // Available pods are not yet a Service kube-proxy routes to: wait for the webhook to judge.
    qdr_tests::install::refused_by_webhook(cp, ns).await;
    // The README's first screen: its Interconnect (placed on the real node) and the
    // `kubectl get ic` it shows.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let yaml = readme
        .split("kubectl apply -f - <<'YAML'\n")
        .nth(1)
        .and_then(|r| r.split("\nYAML\n").next())
        .unwrap();
    let shown: Vec<String> = readme
        .split("kubectl get ic\n```\n\n```text\n")
        .nth(1)
        .and_then(|r| r.split("\n```").next())
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(shown.len(), 2, "the README shows a header and one row: {shown:?}");
    let mut example: Value = serde_saphyr::from_str(yaml).unwrap();
    example["spec"]["deploymentPlan"]["nodeSelector"] =
        json!({"kubernetes.io/hostname": qdr_tests::real_node::NODE});
    example["spec"]["deploymentPlan"]["tolerations"] = json!([{"key": qdr_tests::real_node::TAINT.0,
        "operator": "Exists", "effect": qdr_tests::real_node::TAINT.2}]);
    let t = Instant::now();
    let applied =
        qdr_tests::components::kubectl_stdin(cp, &["apply", "-n", ns, "-f", "-"], &example.to_string());
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let waited = kubectl(
        cp,
        &[
            "wait",
            "--for=condition=Ready",
            "interconnect/router-mesh",
            "-n",
            ns,
            &format!("--timeout={}s", qdr_tests::routers::READY_WAIT.as_secs()),
        ],
    );
    let status = || {
        ok(kubectl(
            cp,
            &["get", "interconnect", "router-mesh", "-n", ns, "-o", "jsonpath={.status.conditions}"],
        ))
    };
    assert!(waited.status.success(), "not Ready: {}", status());
    say!("release: the example Ready {:.1?} after the apply", t.elapsed());
    ok(kubectl(
        cp,
        &["wait", "--for=condition=MeshConnected", "interconnect/router-mesh", "-n", ns, "--timeout=120s"],
    ));
    let routers: Api<Pod> = Api::namespaced(client.clone(), ns);
    let routers = routers.list(&ListParams::default().labels("application=router-mesh")).await.unwrap().items;
    assert_eq!(routers.len(), 3, "the example's three routers");
    for r in &routers {
        assert_eq!(r.spec.as_ref().unwrap().node_name.as_deref(), Some(qdr_tests::real_node::NODE));
        runs(r, router);
    }
    say!("release: MeshConnected {:.1?} after the apply", t.elapsed());

    // The routers' NetworkPolicy, enforced: the mesh above linked through it (55671 from the
    // routers) and the controller read every router through it (55670 from its pods). A pod
    // of another namespace reaches the client and health ports, and nothing else; one
    // labelled as a router of this operator reaches the inter-router and edge ports too
    // (so the drops are the policy's, not ports nobody listens on), never 55670.
    let policy = ok(kubectl(
        cp,
        &[
            "get",
            "ic",
            "router-mesh",
            "-n",
            ns,
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="NetworkPolicy")]}"#,
        ],
    ));
    let policy: Value = serde_json::from_str(&policy).unwrap();
    assert_eq!((&policy["status"], &policy["reason"]), (&json!("True"), &json!("Managed")), "{policy}");
    say!("release: the NetworkPolicy condition: {}", policy["message"]);
    let page = std::fs::read_to_string(root().join("docs/network-policies.md")).unwrap();
    let documented = page
        .split("jsonpath='{.status.conditions[?(@.type==\"NetworkPolicy\")].message}'\n")
        .nth(1)
        .and_then(|rest| rest.split("```text\n").nth(1))
        .and_then(|rest| rest.lines().next())
        .unwrap();
    assert_eq!(policy["message"], documented, "docs/network-policies.md shows the condition's message");
    app_namespace(cp, elsewhere);
    let ip = routers[0].status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    use qdr_tests::netpol::{Seen, reachable};
    let ports = [5671, 5672, 8080, 8888, 45672, 55670, 55671];
    let t = Instant::now();
    let stranger = reachable(
        cp,
        elsewhere,
        "stranger",
        &[("app".to_string(), "stranger".to_string())].into(),
        &router.pinned(),
        &ip,
        &ports,
    );
    let router_like = reachable(
        cp,
        elsewhere,
        "router-like",
        &[
            ("app.kubernetes.io/component".to_string(), "router".to_string()),
            ("app.kubernetes.io/managed-by".to_string(), "qdr-operator".to_string()),
        ]
        .into(),
        &router.pinned(),
        &ip,
        &ports,
    );
    say!(
        "release: from namespace {elsewhere} to router {ip} ({:.1?}): a pod {stranger:?}; a router-labelled pod {router_like:?}",
        t.elapsed()
    );
    // Its judge still runs (were it gone, the queue would let every packet by).
    assert!(
        cp.real_node().unwrap().enforcing_network_policies(),
        "{}",
        cp.real_node().unwrap().logs_tail(40)
    );
    let (open, dropped) = (Seen::Open, Seen::Dropped);
    assert_eq!(
        stranger.into_iter().collect::<Vec<_>>(),
        [
            (5671, open),
            (5672, open),
            (8080, open),
            (8888, open),
            (45672, dropped),
            (55670, dropped),
            (55671, dropped)
        ],
        "a pod of another namespace"
    );
    assert_eq!(
        router_like.into_iter().collect::<Vec<_>>(),
        [
            (5671, open),
            (5672, open),
            (8080, open),
            (8888, open),
            (45672, open),
            (55670, dropped),
            (55671, open)
        ],
        "a pod labelled as a router"
    );
    say!(
        "release: kubectl get ic,pods -o wide\n{}",
        ok(kubectl(cp, &["get", "interconnects,pods", "-n", ns, "-o", "wide"]))
    );
    // What the README shows, but the age: once every router has joined (JOIN_GRACE, 30 s).
    let without_age = |l: &str| l.rsplit_once(' ').map(|(head, _)| head.to_string()).unwrap_or_default();
    let want: Vec<String> = shown.iter().map(|l| without_age(l)).collect();
    let printed = qdr_tests::eventually("the README's kubectl get ic", Duration::from_secs(90), || async {
        let out = ok(kubectl(cp, &["get", "ic", "-n", ns]));
        let got: Vec<String> =
            out.lines().map(|l| without_age(&l.split_whitespace().collect::<Vec<_>>().join(" "))).collect();
        (got == want).then_some(out)
    })
    .await;
    say!("release: kubectl get ic {:.1?} after the apply\n{printed}", t.elapsed());

    // The first client of docs/exposing-routers.md: its script, with the CA and the server
    // name the page gives, sends one message through the Service's AMQPS port and gets it back.
    let page = std::fs::read_to_string(root().join("docs/exposing-routers.md")).unwrap();
    let script = page.split("```python\n").nth(1).and_then(|rest| rest.split("\n```").next()).unwrap();
    let hello = cp.dir().join("hello-mesh.py");
    std::fs::write(&hello, format!("{script}\n")).unwrap();
    let ca = ok(kubectl(
        cp,
        &["get", "secret", "router-mesh-default-credentials", "-n", ns, "-o", "jsonpath={.data.ca\\.crt}"],
    ));
    use base64::Engine as _;
    let ca_file = cp.dir().join("hello-ca.crt");
    std::fs::write(&ca_file, base64::engine::general_purpose::STANDARD.decode(ca.trim()).unwrap()).unwrap();
    let ip =
        ok(kubectl(cp, &["get", "service", "router-mesh", "-n", ns, "-o", "jsonpath={.spec.clusterIP}"]));
    let run = || {
        std::process::Command::new(qdr_tests::routers::PYTHON)
            .arg(&hello)
            .arg(format!("amqps://{}:5671", ip.trim()))
            .arg("--ca")
            .arg(&ca_file)
            .args(["--server-name", &format!("router-mesh.{ns}.svc")])
            .output()
            .unwrap()
    };
    let sent = run();
    assert_eq!(
        String::from_utf8_lossy(&sent.stdout).trim(),
        "received 'hello, mesh' on hello",
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );

    // The routers go with their namespace, on their own time: nothing after this test uses it.
    let t = Instant::now();
    let _ = kubectl(cp, &["delete", "namespace", ns, "--wait=false"]);
    let _ = kubectl(cp, &["delete", "namespace", elsewhere, "--wait=false"]);
    ok(kubectl(cp, &["delete", "-k", &overlay, "--wait=true", "--timeout=180s"]));
    say!("release: uninstalled {:.1?}", t.elapsed());
    wait_gone(cp, "qdr-operator");
    let _ = kubectl(cp, &["wait", "--for=delete", "namespace/qdr-operator", "--timeout=120s"]);
    say!("release: namespace qdr-operator gone {:.1?}", t.elapsed());
}

/// One image definition: the images the tests run and the published Dockerfiles hold the
/// same files, user and entrypoint. The Dockerfiles' build stage runs `make images`' cargo
/// command (same profile and features) and `deploy/docker/rootfs.sh` on this machine's Debian
/// release; the harness packs that script's tree with the Dockerfile's `USER` and
/// `ENTRYPOINT`. The archive's files are exactly the binary, the loader it names and the
/// libraries it and they need (read from the ELF files with `readelf`), and the binary runs
/// in a `chroot` of those files alone as the image's user. `deploy/`'s pods run as that user.
#[test]
fn the_images_agree_with_the_dockerfiles() {
    use qdr_tests::images;
    let dir = tempfile::tempdir().unwrap();
    let deploy = std::fs::read_to_string(root().join("deploy/base/webhook.yaml")).unwrap()
        + &std::fs::read_to_string(root().join("deploy/base/controller.yaml")).unwrap();
    let codename = std::fs::read_to_string("/etc/os-release")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME=").map(String::from))
        .unwrap();
    let make =
        std::process::Command::new("make").args(["-n", "images"]).current_dir(root()).output().unwrap();
    let make = String::from_utf8(make.stdout).unwrap();
    let make_cargo: Vec<&str> =
        make.lines().find(|l| l.contains("cargo build")).unwrap().split_whitespace().skip(2).collect();
    let flags = |words: &[&str]| -> Vec<String> {
        let mut out = Vec::new();
        let mut it = words.iter();
        while let Some(w) = it.next() {
            match *w {
                "-p" | "--bin" => drop(it.next()),
                w if w.starts_with('-') => out.push(w.to_string()),
                _ => {}
            }
        }
        out.sort();
        out
    };
    for image in [images::CONTROLLER, images::WEBHOOK] {
        let name = image.name;
        let d = images::dockerfile(&image).unwrap();
        assert_eq!(
            d.build_base.rsplit('-').next().unwrap(),
            codename,
            "{name}: the build stage's Debian release"
        );
        assert_eq!(d.final_base, "scratch", "{name}");
        assert_eq!(
            d.final_copies,
            [vec!["--from=build", "/rootfs/", "/"]],
            "{name}: the script's tree alone"
        );
        let run = d.build_runs.iter().find(|r| r.contains("cargo build")).expect("a cargo build RUN");
        let (cargo, script) = run.split_once(" && ").unwrap();
        let cargo: Vec<&str> = cargo.split_whitespace().skip(2).collect();
        assert_eq!(flags(&cargo), flags(&make_cargo), "{name}: make images' profile and features");
        assert_eq!(
            cargo.windows(2).filter(|w| w[0] == "-p" || w[0] == "--bin").map(|w| w[1]).collect::<Vec<_>>(),
            [image.binary, image.binary]
        );
        assert!(make_cargo.contains(&image.binary), "{name}: make images builds it");
        assert_eq!(script, format!("deploy/docker/rootfs.sh target/release/{} /rootfs", image.binary));
        assert!(
            make.lines().any(|l| l.starts_with("deploy/docker/rootfs.sh")
                && l.contains(&format!("/release/{} ", image.binary))),
            "{name}: make images lays out its tree with the same script: {make}"
        );

        let rootfs = dir.path().join(format!("{name}.rootfs"));
        let archive = dir.path().join(format!("{name}.tar"));
        images::write_archive(&images::operator_image(&image, &rootfs).unwrap(), &archive).unwrap();
        let built = images::read_config(&archive).unwrap();
        assert_eq!((&built.entrypoint, &built.user), (&d.entrypoint, &d.user), "{name}");
        let tree: Vec<String> = images::tree_files(&rootfs).unwrap().into_iter().map(|(_, p, _)| p).collect();
        assert_eq!(built.files, tree, "{name}: the archive holds the script's tree");

        // The loader and the libraries, from the ELF files themselves.
        let readelf = |path: &str, flag: &str| -> String {
            let out = std::process::Command::new("readelf")
                .args([flag, "-W"])
                .arg(rootfs.join(&path[1..]))
                .output();
            String::from_utf8(out.unwrap().stdout).unwrap()
        };
        let bracketed = |text: &str, marker: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.contains(marker))
                .filter_map(|l| {
                    Some(l.split_once('[')?.1.split_once(']')?.0.trim_start_matches(marker).trim().into())
                })
                .collect()
        };
        let entry = d.entrypoint[0].clone();
        let interp = bracketed(&readelf(&entry, "-l"), "Requesting program interpreter:");
        assert_eq!(interp.len(), 1, "{name}: a dynamically linked binary names one loader");
        let mut want = std::collections::BTreeSet::from([entry.clone(), interp[0].clone()]);
        let mut todo = vec![entry.clone()];
        while let Some(elf) = todo.pop() {
            for soname in bracketed(&readelf(&elf, "-d"), "Shared library:") {
                let found = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"]
                    .iter()
                    .map(|d| format!("{d}/{soname}"))
                    .find(|p| tree.contains(p))
                    .unwrap_or_else(|| {
                        panic!("{name}: {elf} needs {soname}, which the image lacks: {tree:?}")
                    });
                if want.insert(found.clone()) {
                    todo.push(found);
                }
            }
        }
        assert_eq!(
            tree,
            want.into_iter().collect::<Vec<_>>(),
            "{name}: exactly the binary, its loader and libraries"
        );

        let run = std::process::Command::new("chroot")
            .arg(format!("--userspec={}", d.user))
            .arg(&rootfs)
            .args([&entry, "--version"])
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{name} in a chroot of its image: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(String::from_utf8_lossy(&run.stdout).starts_with(image.binary), "{name}");

        let (uid, gid) = d.user.split_once(':').unwrap();
        assert!(
            deploy.contains(&format!("runAsUser: {uid}")) && deploy.contains(&format!("runAsGroup: {gid}"))
        );
    }
}

/// A registry on this machine (`crane registry serve`, plain HTTP on 127.0.0.1, blobs on
/// disk) that the real node pulls from and `skopeo` pushes to, both told it is plain HTTP.
struct Registry {
    /// `127.0.0.1:<port>`.
    host: String,
    /// A home directory for skopeo whose `.config/containers/registries.conf` marks the
    /// registry insecure (plain HTTP): skopeo 1.9 (Debian's) reads that file, not
    /// `CONTAINERS_REGISTRIES_CONF`.
    home: PathBuf,
    _process: qdr_tests::Process,
}

impl Registry {
    fn start(cp: &ControlPlane, testbin: &qdr_tests::Testbin) -> Registry {
        let crane = testbin.require("crane").unwrap();
        let host = format!("127.0.0.1:{}", qdr_tests::components::free_port());
        let blobs = cp.dir().join("registry");
        std::fs::create_dir_all(&blobs).unwrap();
        let mut cmd = std::process::Command::new(crane);
        cmd.args(["registry", "serve", "--address", &host, "--disk"]).arg(&blobs);
        let process = qdr_tests::Process::spawn("registry", cmd, &cp.dir().join("registry.log")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&host).is_err() {
            assert!(Instant::now() < deadline, "the registry does not listen: {}", process.log_tail(20));
            std::thread::sleep(Duration::from_millis(100));
        }
        cp.real_node().unwrap().plain_http_registry(&host).unwrap();
        let home = cp.dir().join("skopeo-home");
        let conf = home.join(".config/containers");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join("registries.conf"),
            format!("[[registry]]\nlocation = \"{host}\"\ninsecure = true\n"),
        )
        .unwrap();
        Registry { host, home, _process: process }
    }

    /// Runs the push loop of docs/releasing.md ("Publishing what it wrote") as the page shows
    /// it, beside `dist/`, with `REGISTRY` and `VERSION` given the values its first line names.
    fn push_as_documented(&self, cp: &ControlPlane, registry: &str, version: &str) {
        let page = std::fs::read_to_string(root().join("docs/releasing.md")).unwrap();
        let section = &page[page.find("## Publishing what it wrote").expect("the section")..];
        let block = &section[section.find("```sh\n").unwrap() + 6..];
        let block = &block[..block.find("```").unwrap()];
        let first = block.lines().next().unwrap();
        assert!(first.starts_with("REGISTRY=") && first.contains(" VERSION="), "{first}");
        let lines: Vec<&str> = block.lines().collect();
        let start = lines.iter().position(|l| l.starts_with("for ")).expect("the push loop");
        let end = lines.iter().position(|l| *l == "done").expect("the loop's end");
        let script = lines[start..=end].join("\n");
        // The README's first screen shows the same loop.
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        assert!(readme.contains(&script), "README.md's push loop is not docs/releasing.md's:\n{script}");
        let out = std::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(cp.dir())
            .env("REGISTRY", registry)
            .env("VERSION", version)
            .env("HOME", &self.home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the documented push:\n{script}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
