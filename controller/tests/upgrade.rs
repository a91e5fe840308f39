//! Upgrading from the Go operator on a real control plane with 3 simulated nodes.
//!
//! Setup, once: the Go operator's CRD; every Go example (`api/tests/data/go-operator/`, each
//! in its own namespace) created and processed as the Go operator does (see
//! `go_operator/mod.rs`: the real one cannot be built from the module proxy); its routers
//! scheduled and Ready. Then the upgrade as the README describes it: our CRD applied over the
//! old one, our webhook and controller started. The tests check the takeover (adoption,
//! removed Go-only fields, at most one rollout, nothing orphaned, precise `SpecValid=False`
//! for the examples our rules reject) and ratcheting admission on the stored objects.

mod common;
mod go_operator;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, ListParams};
use qdr_tests::{ControlPlane, Process, eventually};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// Examples the Go operator accepted and our rules reject (interior routers with
/// `edgeConnectors`): they must end `SpecValid=False`, their routers untouched.
const REJECTED: [&str; 2] = ["g-spec-connector.yaml", "h-spec-connector-ssl.yaml"];

/// Generous: a takeover on a loaded 2-core machine is a few reconciles and one rollout.
const SETTLE: Duration = Duration::from_secs(120);

/// One Go example after the Go operator handled it.
struct Example {
    file: String,
    ns: String,
    name: String,
    uid: String,
    /// Whether its routers are a DaemonSet (placement Every), else a Deployment.
    every: bool,
    /// The uid of its workload before the takeover.
    workload_uid: String,
}

/// A router workload as stored: metadata, pod template, and ready/desired routers.
struct Workload {
    meta: ObjectMeta,
    template: k8s_openapi::api::core::v1::PodTemplateSpec,
    ready: i32,
    desired: i32,
}

impl Workload {
    fn kind(every: bool) -> &'static str {
        if every { "DaemonSet" } else { "Deployment" }
    }
}

/// The Deployment or DaemonSet `name` in `ns`.
async fn workload(client: &kube::Client, ns: &str, name: &str, every: bool) -> Option<Workload> {
    if every {
        let d = Api::<DaemonSet>::namespaced(client.clone(), ns).get_opt(name).await.ok()??;
        let st = d.status.clone().unwrap_or_default();
        Some(Workload {
            meta: d.metadata,
            template: d.spec?.template,
            ready: st.number_ready,
            desired: st.desired_number_scheduled,
        })
    } else {
        let d = Api::<Deployment>::namespaced(client.clone(), ns).get_opt(name).await.ok()??;
        let spec = d.spec?;
        Some(Workload {
            meta: d.metadata,
            ready: d.status.and_then(|s| s.ready_replicas).unwrap_or(0),
            desired: spec.replicas.unwrap_or(1),
            template: spec.template,
        })
    }
}

/// An extra example of ours in the Go operator's shape: edge routers on every node (the Go
/// examples have no DaemonSet).
fn every_example() -> Value {
    json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
           "metadata": {"name": "edge-everywhere"},
           "spec": {"deploymentPlan": {"role": "edge", "placement": "Every"}}})
}

struct Setup {
    cp: &'static ControlPlane,
    examples: Vec<Example>,
    _webhook: common::Replica,
    _controller: Process,
    /// A namespace the webhook applies to, with nothing in it.
    spare_ns: String,
}

static SETUP: OnceCell<Setup> = OnceCell::const_new();

fn example_files() -> Vec<PathBuf> {
    let dir = qdr_tests::workspace_root().join("api/tests/data/go-operator");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
}

fn kubectl_ok(cp: &ControlPlane, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let out = match stdin {
        Some(s) => common::kubectl_stdin(cp, args, s),
        None => cp.kubectl().args(args).output().unwrap(),
    };
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Waits until the CRD is Established and Interconnects are served.
async fn crd_served(cp: &ControlPlane) {
    eventually("the CRD established and served", Duration::from_secs(30), || async {
        let est = cp
            .kubectl()
            .args([
                "wait",
                "--for=condition=Established",
                "--timeout=5s",
                "crd/interconnects.interconnectedcloud.github.io",
            ])
            .output()
            .unwrap();
        let served = cp.kubectl().args(["get", "interconnects", "-A"]).output().unwrap();
        (est.status.success() && served.status.success()).then_some(())
    })
    .await;
}

async fn setup() -> &'static Setup {
    SETUP
        .get_or_init(|| async {
            let cp = qdr_tests::shared_with_nodes(3).await;
            let client = cp.client().await.unwrap();
            // 1. A cluster running the Go operator.
            kubectl_ok(cp, &["create", "-f", "-"], Some(&go_operator::crd().to_string()));
            crd_served(cp).await;
            let mut examples = Vec::new();
            let mut manifests: Vec<(String, Value)> = example_files()
                .iter()
                .map(|f| {
                    let file = f.file_name().unwrap().to_string_lossy().to_string();
                    (file, serde_saphyr::from_str(&std::fs::read_to_string(f).unwrap()).unwrap())
                })
                .collect();
            manifests.push(("z-every-edge (ours)".into(), every_example()));
            for (file, manifest) in manifests {
                let letter = &file[..1];
                let ns = cp.namespace(&format!("go-{letter}")).await.name.clone();
                common::label_namespace(cp, &ns, "upgrade");
                let ic = go_operator::deploy(&client, &ns, &manifest).await;
                let name = ic.metadata.name.clone().unwrap();
                let every = ic.data["spec"]["deploymentPlan"]["placement"] == "Every";
                let w = eventually(&format!("{file}: the Go operator's routers Ready"), SETTLE, || async {
                    workload(&client, &ns, &name, every)
                        .await
                        .filter(|w| w.desired > 0 && w.ready == w.desired)
                })
                .await;
                examples.push(Example {
                    file,
                    ns,
                    name,
                    uid: ic.metadata.uid.unwrap(),
                    every,
                    workload_uid: w.meta.uid.unwrap(),
                });
            }
            // 2. The upgrade: our CRD over the old one, then the webhook and the controller.
            let crd = qdr_tests::workspace_root().join(qdr_api::CRD_PATH).display().to_string();
            kubectl_ok(cp, &["apply", "--server-side", "--force-conflicts", "-f", &crd], None);
            crd_served(cp).await;
            // What OLM checks before it replaces a CRD (the upgrade from qdr-operator.v0.4.0):
            // every stored object valid under the new schema, its status as the Go operator
            // wrote it included. Written back unchanged, each is validated by the API server.
            for e in &examples {
                let ics = go_operator::interconnects(&client, &e.ns);
                let stored = ics.get(&e.name).await.unwrap();
                assert_eq!(
                    stored.data["status"]["conditions"].as_array().map(Vec::len),
                    Some(3),
                    "{}: the Go operator's status log",
                    e.file
                );
                if let Err(err) = ics.replace_status(&e.name, &Default::default(), &stored).await {
                    panic!("{}: the Go operator's status is not valid under our CRD: {err}", e.file);
                }
            }
            let webhook_ns = cp.namespace("upgrade-system").await.name.clone();
            let spare_ns = cp.namespace("upgrade-new").await.name.clone();
            common::label_namespace(cp, &spare_ns, "upgrade");
            let port = common::free_port();
            let reg = common::register(&client, "upgrade", port, port).await;
            let webhook = common::start_replica(cp, &webhook_ns, &reg, port, &[]);
            common::wait_ready(&webhook, Duration::from_secs(60)).await;
            common::wait_admission_works(cp, &spare_ns, Duration::from_secs(60)).await;
            let controller_bin = PathBuf::from(env!("CARGO_BIN_EXE_qdr-controller"));
            assert!(controller_bin.is_file(), "build qdr-controller next to qdr-webhook: cargo build --bins");
            let ids = cp.install_rbac(&common::install(&webhook_ns, &reg)).unwrap();
            let mut cmd = std::process::Command::new(controller_bin);
            // The writes of Secrets, the passes that ended on a stale observation and the
            // watches' relists at debug: what a takeover that rolled twice needs to be
            // understood.
            let log = "info,kube=warn,qdr_controller::cache::watch=debug,qdr_controller::reconcile=debug";
            cmd.env("KUBECONFIG", ids.controller).env("RUST_LOG", log).args([
                &format!("--lease-namespace={webhook_ns}"),
                "--identity=upgrade-0",
                &format!("--health-listen=127.0.0.1:{}", common::free_port()),
                "--default-image=quay.io/interconnectedcloud/qdrouterd:1.19.0",
                "--observe-mesh=off",
            ]);
            let controller =
                Process::spawn("qdr-controller", cmd, &cp.dir().join("upgrade-controller.log")).unwrap();
            Setup { cp, examples, _webhook: webhook, _controller: controller, spare_ns }
        })
        .await
}

async fn condition(client: &kube::Client, e: &Example, type_: &str) -> Option<Value> {
    let ic = go_operator::interconnects(client, &e.ns).get(&e.name).await.ok()?;
    ic.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).cloned()
}

/// Whether `meta` still has an `Update` entry of the Go operator on the main resource.
fn go_fields(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(go_operator::MANAGER)
            && m.operation.as_deref() == Some("Update")
            && m.subresource.as_deref().unwrap_or_default().is_empty()
    })
}

fn controlled_by(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|r| r.controller == Some(true) && r.uid == uid)
}

fn env_names(w: &Workload) -> Vec<String> {
    let c = &w.template.spec.as_ref().unwrap().containers;
    c.iter().flat_map(|c| c.env.iter().flatten().map(|e| e.name.clone())).collect()
}

/// The rollouts of `e`'s workload so far: its ReplicaSets or ControllerRevisions.
async fn revisions(client: &kube::Client, e: &Example) -> usize {
    let lp = ListParams::default();
    let owners: Vec<ObjectMeta> = if e.every {
        let api = Api::<ControllerRevision>::namespaced(client.clone(), &e.ns);
        api.list(&lp).await.unwrap().items.into_iter().map(|r| r.metadata).collect()
    } else {
        let api = Api::<ReplicaSet>::namespaced(client.clone(), &e.ns);
        api.list(&lp).await.unwrap().items.into_iter().map(|r| r.metadata).collect()
    };
    owners.iter().filter(|m| controlled_by(m, &e.workload_uid)).count()
}

/// What a failed "rolled at most once" check needs to be understood: each revision of `e`'s
/// workload (name, creation time, the pod template's annotations, which carry the config and
/// credentials hashes) and the namespace's Events (reason and note), oldest first.
async fn rollout_history(client: &kube::Client, e: &Example) -> String {
    let lp = ListParams::default();
    let mut out = String::from("revisions:\n");
    let line = |m: &ObjectMeta, annotations: Option<&BTreeMap<String, String>>| {
        format!(
            "  {} created {:?}: {:?}\n",
            m.name.as_deref().unwrap_or_default(),
            m.creation_timestamp.as_ref().map(|t| t.0.to_string()),
            annotations
        )
    };
    let mut rows: Vec<(String, String)> = Vec::new();
    if e.every {
        let api = Api::<ControllerRevision>::namespaced(client.clone(), &e.ns);
        for r in api.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            let annotations: Option<BTreeMap<String, String>> = r.data.as_ref().and_then(|d| {
                serde_json::from_value(d.0["spec"]["template"]["metadata"]["annotations"].clone()).ok()
            });
            if controlled_by(&r.metadata, &e.workload_uid) {
                rows.push((
                    format!("{:?}", r.metadata.creation_timestamp),
                    line(&r.metadata, annotations.as_ref()),
                ));
            }
        }
    } else {
        let api = Api::<ReplicaSet>::namespaced(client.clone(), &e.ns);
        for r in api.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            let annotations = r
                .spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.metadata.as_ref()?.annotations.clone());
            if controlled_by(&r.metadata, &e.workload_uid) {
                rows.push((
                    format!("{:?}", r.metadata.creation_timestamp),
                    line(&r.metadata, annotations.as_ref()),
                ));
            }
        }
    }
    rows.sort();
    out.extend(rows.into_iter().map(|(_, l)| l));
    out.push_str("events:\n");
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &e.ns);
    for ev in events.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        out.push_str(&format!(
            "  {:?} {} {}\n",
            ev.event_time.as_ref().map(|t| t.0.to_string()),
            ev.reason.unwrap_or_default(),
            ev.note.unwrap_or_default()
        ));
    }
    out
}

/// Every object of kind `K` in `e`'s namespace except `skip` is controlled by the Interconnect.
async fn all_controlled<K>(client: &kube::Client, e: &Example, skip: &[&str]) -> Vec<String>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let list = Api::<K>::namespaced(client.clone(), &e.ns).list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|o| !skip.contains(&o.meta().name.as_deref().unwrap_or_default()))
        .filter(|o| !controlled_by(o.meta(), &e.uid))
        .map(|o| format!("{} {}", K::kind(&()), o.meta().name.clone().unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn every_go_interconnect_is_taken_over_or_precisely_rejected() {
    let s = setup().await;
    let client = s.cp.client().await.unwrap();
    let mut outcome: BTreeMap<String, String> = BTreeMap::new();
    for e in &s.examples {
        let kind = Workload::kind(e.every);
        let stored = || async { workload(&client, &e.ns, &e.name, e.every).await.unwrap() };
        if REJECTED.contains(&e.file.as_str()) {
            let c = eventually(&format!("{}: SpecValid=False", e.file), SETTLE, || async {
                condition(&client, e, "SpecValid").await.filter(|c| c["status"] == "False")
            })
            .await;
            let msg = c["message"].as_str().unwrap();
            assert!(msg.contains("spec.edgeConnectors: Forbidden"), "{}: {msg}", e.file);
            // Nothing unsafe deployed: the Go operator's workload is left as it was.
            let w = stored().await;
            assert_eq!(w.meta.uid.as_deref(), Some(e.workload_uid.as_str()));
            assert!(go_fields(&w.meta) && env_names(&w).contains(&"POD_COUNT".to_string()), "{}", e.file);
            outcome.insert(e.file.clone(), format!("SpecValid=False: {msg}"));
            continue;
        }
        let ready = tokio::time::timeout(SETTLE, async {
            loop {
                if condition(&client, e, "Ready").await.is_some_and(|c| c["status"] == "True") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        if ready.is_err() {
            let out =
                s.cp.kubectl()
                    .args(["get", "interconnect,deploy,rs,pods", "-n", &e.ns, "-o", "yaml"])
                    .output()
                    .unwrap();
            panic!(
                "{}: not Ready within {SETTLE:?}:\n{}\ncontroller log:\n{}",
                e.file,
                String::from_utf8_lossy(&out.stdout),
                s._controller.log_tail(60)
            );
        }
        // Adopted, not recreated, and its Go-only fields removed.
        let w = stored().await;
        assert_eq!(w.meta.uid.as_deref(), Some(e.workload_uid.as_str()), "{}: same {kind}", e.file);
        assert!(controlled_by(&w.meta, &e.uid));
        assert!(!go_fields(&w.meta), "{}: {:#?}", e.file, w.meta.managed_fields);
        assert!(
            !env_names(&w).contains(&"POD_COUNT".to_string()),
            "{}: the Go-only POD_COUNT is left",
            e.file
        );
        // The pod template is exactly what the controller makes for the same spec from scratch
        // (a twin in another namespace), but for the hash of the (randomly generated) credentials.
        let twin = twin_template(s.cp, &client, e).await;
        let adopted = template(&stored().await);
        assert_eq!(adopted, twin, "{}: adopted template differs from a fresh one", e.file);
        let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &e.ns);
        let adopted = eventually(&format!("{}: an Adopted event", e.file), SETTLE, || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|ev| ev.reason.as_deref() == Some("Adopted"))
        })
        .await;
        let note = adopted.note.unwrap_or_default();
        assert!(note.contains(&format!("{kind} {}", e.name)), "{}: {note}", e.file);
        let svc = Api::<Service>::namespaced(client.clone(), &e.ns).get(&e.name).await.unwrap();
        assert!(!go_fields(&svc.metadata), "{}: Service still has Go fields", e.file);
        let sa =
            Api::<ServiceAccount>::namespaced(client.clone(), &e.ns).get(&e.name).await.unwrap().metadata;
        assert!(!go_fields(&sa) && controlled_by(&sa, &e.uid), "{}: {:?}", e.file, sa.name);
        // The Go operator's Role and RoleBinding bound get and list pods to routers that
        // mount no token now (the controller links them): deleted (issue 72).
        eventually(
            &format!("{}: the Go operator's Role and RoleBinding deleted", e.file),
            SETTLE,
            || async {
                let role = Api::<Role>::namespaced(client.clone(), &e.ns).get_opt(&e.name).await.ok()?;
                let binding =
                    Api::<RoleBinding>::namespaced(client.clone(), &e.ns).get_opt(&e.name).await.ok()?;
                (role.is_none() && binding.is_none()).then_some(())
            },
        )
        .await;
        let rollouts = revisions(&client, e).await;
        outcome.insert(
            e.file.clone(),
            format!("Ready; {kind} adopted, {rollouts} revisions (the Go one + 1 rollout)"),
        );
    }
    // Settled: the routers rolled at most once, and nothing is orphaned.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for e in &s.examples {
        let n = revisions(&client, e).await;
        if n > 2 {
            panic!(
                "{}: {n} revisions: rolled more than once\n{}\ncontroller log (its namespace, relists):\n{}",
                e.file,
                rollout_history(&client, e).await,
                s._controller.log_lines_with(&[&e.ns, "relist"], 80)
            );
        }
        let mut orphans = Vec::new();
        orphans.extend(all_controlled::<Role>(&client, e, &[]).await);
        orphans.extend(all_controlled::<RoleBinding>(&client, e, &[]).await);
        orphans.extend(all_controlled::<ServiceAccount>(&client, e, &["default"]).await);
        orphans.extend(all_controlled::<Deployment>(&client, e, &[]).await);
        orphans.extend(all_controlled::<DaemonSet>(&client, e, &[]).await);
        orphans.extend(all_controlled::<Service>(&client, e, &[]).await);
        orphans.extend(all_controlled::<ConfigMap>(&client, e, &["kube-root-ca.crt"]).await);
        orphans.extend(all_controlled::<Secret>(&client, e, &[]).await);
        assert!(orphans.is_empty(), "{}: not controlled by the Interconnect: {orphans:?}", e.file);
    }
    for (file, what) in &outcome {
        eprintln!("{file}: {what}");
    }
}

/// The pod template of `w` without the credentials hash.
fn template(w: &Workload) -> Value {
    let mut t = serde_json::to_value(&w.template).unwrap();
    t["metadata"]["annotations"].as_object_mut().unwrap().remove("qdr-operator.io/credentials-hash");
    t
}

/// The pod template the controller makes for `e`'s stored spec in a fresh namespace.
async fn twin_template(cp: &'static ControlPlane, client: &kube::Client, e: &Example) -> Value {
    let stored = go_operator::interconnects(client, &e.ns).get(&e.name).await.unwrap();
    let ns = cp.namespace("twin").await.name.clone();
    let twin: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": e.name}, "spec": stored.data["spec"]}))
    .unwrap();
    go_operator::interconnects(client, &ns).create(&Default::default(), &twin).await.unwrap();
    let w = eventually(&format!("{}: the twin's workload", e.file), SETTLE, || async {
        workload(client, &ns, &e.name, e.every).await
    })
    .await;
    template(&w)
}

fn rejected(s: &Setup) -> &Example {
    s.examples.iter().find(|e| e.file == REJECTED[0]).unwrap()
}

#[tokio::test]
async fn metadata_updates_of_a_stored_invalid_object_are_admitted() {
    let s = setup().await;
    let e = rejected(s);
    let ic = format!("interconnect/{}", e.name);
    for args in [
        vec!["label", &ic, "team=messaging"],
        vec!["annotate", &ic, "example.com/note=kept"],
        vec!["patch", &ic, "--type=merge", "-p", r#"{"metadata":{"finalizers":["example.com/hold"]}}"#],
        vec!["patch", &ic, "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#],
    ] {
        let mut a: Vec<&str> = args.iter().map(|s| &**s).collect();
        a.extend(["-n", &e.ns]);
        kubectl_ok(s.cp, &a, None);
    }
    let client = s.cp.client().await.unwrap();
    let stored = go_operator::interconnects(&client, &e.ns).get(&e.name).await.unwrap();
    assert_eq!(stored.metadata.labels.unwrap()["team"], "messaging");
    assert!(stored.metadata.finalizers.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn an_update_that_adds_a_violation_is_denied_with_only_that_cause() {
    let s = setup().await;
    let e = rejected(s);
    let patch = json!({"spec": {"listeners": [{"port": 5672}, {"port": 5672}]}}).to_string();
    let out =
        s.cp.kubectl()
            .args(["patch", &format!("interconnect/{}", e.name), "-n", &e.ns, "--type=merge", "-p", &patch])
            .output()
            .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let causes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("* ")).collect();
    let error: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("Warning:")).collect();
    assert!(error.join("\n").contains("spec.listeners[1].port: Duplicate value"), "{stderr}");
    assert!(causes.iter().all(|c| c.contains("spec.listeners[1].port")), "only the new cause: {stderr}");
    assert!(!error.join("\n").contains("edgeConnectors"), "the stored violation is not an error: {stderr}");
}

#[tokio::test]
async fn kubectl_apply_of_the_unchanged_file_is_admitted_with_warnings() {
    let s = setup().await;
    let e = rejected(s);
    let file = qdr_tests::workspace_root().join("api/tests/data/go-operator").join(&e.file);
    let out = kubectl_ok(s.cp, &["apply", "-n", &e.ns, "-f", &file.display().to_string()], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().any(|l| l.starts_with("Warning: spec.edgeConnectors")),
        "the stored violation comes back as a warning: {stderr}"
    );
}

#[tokio::test]
async fn generate_name_creates_are_admitted_and_named_by_the_controller() {
    let s = setup().await;
    let obj = json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                     "metadata": {"generateName": "mesh-"}, "spec": {"deploymentPlan": {"size": 1}}});
    let out =
        kubectl_ok(s.cp, &["create", "-n", &s.spare_ns, "-o", "json", "-f", "-"], Some(&obj.to_string()));
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let name = created["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("mesh-") && name.len() == 10, "{name}");
    assert!(created["spec"].get("users").is_none(), "no `-users` stored: {:#}", created["spec"]);
    assert_eq!(created["spec"]["deploymentPlan"]["placement"], "Any", "the other defaults are stored");
    let client = s.cp.client().await.unwrap();
    let secrets = Api::<Secret>::namespaced(client, &s.spare_ns);
    eventually("the users Secret named after the final name", SETTLE, || async {
        secrets.get_opt(&format!("{name}-users")).await.ok().flatten()
    })
    .await;
}
