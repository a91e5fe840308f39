//! The OLM bundle (`bundle/`, `make bundle`) as OperatorHub users meet it.
//!
//! - The operator-framework validators (`operator-framework/api`, pinned in
//!   `tools/testbin/olm`): the default and OperatorHub suites pass with no error, and every
//!   warning left is one of [`EXPLAINED_WARNINGS`] (or names only [`EXPLAINED_MIGRATIONS`]).
//! - A real OLM upgrades the Go operator to it: OLM's own `olm` and `catalog` operators (built
//!   from the pinned module) run against the test control plane, and `opm` serves a file-based
//!   catalog (a `CatalogSource` with `spec.address`). First the catalog holds only a bundle
//!   shaped like the Go operator's last, `qdr-operator.v0.4.0` ([`go_bundle`]: its CRD schema
//!   as published, its install modes, `WATCH_NAMESPACE` from its namespace, an image that
//!   does nothing), installed by a `Subscription` in an `OwnNamespace` OperatorGroup; an
//!   Interconnect is stored with the status the Go operator wrote, beside a router Deployment
//!   as the Go operator made it, and another with what the Go CRD took and this operator's
//!   rules refuse (`placement: Node`, a listener name that is no IANA service name).
//!   Then the catalog gains this bundle (`replaces: qdr-operator.v0.4.0`) and the Subscription
//!   upgrades: OLM checks the stored Interconnects against the new CRD's schema (which admits
//!   all the Go CRD did, `qdr_api::legacy`), replaces the CRD and the CSV, and the new
//!   controller adopts the Interconnect (its Go status rewritten, its router Deployment kept,
//!   not deleted) and makes it `Ready`; the other is kept unchanged, not reconciled
//!   (`SpecValid=False`) and still editable.
//!   OLM unpacks each bundle the way it does in any cluster: a Job on the real node (its test
//!   taint lifted meanwhile: the Job tolerates none) runs the bundle image (its files as
//!   OLM's `bundle.Dockerfile` lays them out, referenced by digest), OLM's `cpb` and `opm`.
//!   The operator's images are imported under the names the CSV gives them, so the CSV runs
//!   unchanged; the Subscription's `config` puts the pods on the real node (its toleration and
//!   node selector) and turns mesh observation off (the routers run on a simulated node), as a
//!   cluster admin configures any OLM operator. The CSV reaches `Succeeded`, the controller
//!   watches the OperatorGroup's namespace (OLM's `olm.targetNamespaces`), the webhook
//!   serves the certificate OLM mounted (the API server, trusting OLM's `caBundle`, calls
//!   it: a bad Interconnect is refused with its field path, a good one stored with its
//!   defaults and reconciled to `Ready` on a simulated node), the controllers elect a
//!   leader, and deleting the Subscription and the CSV removes the operator.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use qdr_tests::ControlPlane;
use qdr_tests::images::{ImageSpec, tree_files, write_archive};
use serde_json::{Value, json};

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// `eprintln!` with the seconds since the first message of this binary, for the timings.
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[{:6.1}s] {}", START.get_or_init(Instant::now).elapsed().as_secs_f64(), format!($($arg)*))
    };
}

/// Where OLM runs and the catalog is (OLM's default namespace).
const OLM_NS: &str = "olm";
/// Where the operator is installed (the CSV's suggested namespace).
const OPERATOR_NS: &str = "qdr-operator";
/// The Go operator's last CSV, which this bundle's `replaces`.
const GO_CSV: &str = "qdr-operator.v0.4.0";
/// The CatalogSource's name.
const CATALOG: &str = "qdr-test-catalog";

/// The validators' warnings this bundle keeps, each with why (a substring of the warning,
/// the reason). A warning not listed fails [`the_bundle_passes_the_operator_framework_validators`];
/// so does a listed one that no longer appears (the list stays true).
const EXPLAINED_WARNINGS: [(&str, &str); 1] = [(
    r#"channel(s) ["beta"] are not following the recommended naming convention"#,
    "beta is the channel of the Go operator's package (qdr-operator.v0.4.0); keeping it lets \
     its subscribers upgrade to this bundle (`replaces`)",
)];

/// The resources the validators' "Migrate the API(s) for ..." warning may name, each with why
/// the bundle is right: the check matches an RBAC rule's group and resource against APIs
/// removed in 1.25, but an RBAC rule names no version.
const EXPLAINED_MIGRATIONS: [(&str, &str); 2] = [
    (
        "events",
        "the controller's rule on `events.k8s.io` `events`: events.k8s.io/v1beta1 was removed in \
         1.25; the controller writes events.k8s.io/v1",
    ),
    (
        "poddisruptionbudgets",
        "the controller's rule on `policy` `poddisruptionbudgets`: policy/v1beta1 was removed in \
         1.25; the controller writes policy/v1",
    ),
];

/// The resources a "Migrate the API(s) for a: ([...]),b: ([...])" warning names.
fn migrations(warning: &str) -> Vec<String> {
    let Some((_, list)) = warning.split_once("Migrate the API(s) for ") else { return Vec::new() };
    list.split("]),").filter_map(|part| part.split_once(": (")).map(|(r, _)| r.trim().to_string()).collect()
}

fn root() -> PathBuf {
    qdr_tests::workspace_root()
}

/// A binary of the pinned test tools (`tools/testbin/build.sh`).
fn testbin(name: &str) -> PathBuf {
    qdr_tests::Testbin::locate().and_then(|t| t.require(name)).expect("the test binaries (make testbin)")
}

use qdr_tests::routers::{kubectl, ok};

fn apply(cp: &ControlPlane, doc: &Value) -> String {
    ok(qdr_tests::components::kubectl_stdin(cp, &["apply", "-f", "-"], &doc.to_string()))
}

/// `kubectl get … -o json`, parsed; `None` when it fails (not found).
fn get(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = kubectl(cp, &all);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// Polls `check` every second until it holds (`true`), or `timeout` passes or one of
/// `processes` exits (`false`).
async fn wait_until(
    processes: &[&qdr_tests::Process],
    timeout: Duration,
    mut check: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline || processes.iter().any(|p| p.exited().is_some()) {
            return false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn csv() -> Value {
    serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("bundle").join(qdr_api::bundle::CSV_FILE)).unwrap(),
    )
    .unwrap()
}

/// The reference containerd stores an image under: Docker Hub's host and `library/` added to
/// a short name, as the kubelet resolves it.
fn normalized(image: &str) -> String {
    let first = image.split('/').next().unwrap();
    if image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost") {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

#[test]
fn the_bundle_passes_the_operator_framework_validators() {
    let out = Command::new(testbin("olm-validate")).arg(root().join("bundle")).arg("1.33").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the validators found errors:\n{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("validate: 0 errors,"), "{last}");
    let warnings: Vec<&str> = text.lines().filter(|l| l.starts_with("WARN ")).collect();
    for w in &warnings {
        let named = migrations(w);
        if !named.is_empty() {
            for r in &named {
                assert!(
                    EXPLAINED_MIGRATIONS.iter().any(|(known, _)| known == r),
                    "the validators ask to migrate {r}, which nobody explained (add it to EXPLAINED_MIGRATIONS \
                     with why, or fix the bundle): {w}"
                );
            }
            continue;
        }
        assert!(
            EXPLAINED_WARNINGS.iter().any(|(known, _)| w.contains(known)),
            "a warning nobody explained (fix the bundle or add it to EXPLAINED_WARNINGS with why): {w}"
        );
    }
    for (known, why) in EXPLAINED_WARNINGS {
        assert!(
            warnings.iter().any(|w| w.contains(known)),
            "no longer warned, drop it from the list: {known} ({why})"
        );
    }
    let migrations: Vec<String> = warnings.iter().flat_map(|w| migrations(w)).collect();
    for (known, why) in EXPLAINED_MIGRATIONS {
        assert!(
            migrations.iter().any(|m| m == known),
            "no longer warned, drop it from the list: {known} ({why})"
        );
    }
    assert!(!text.contains("ERROR "), "{text}");
}

/// The file-based catalog: package, channel `beta` with the Go operator's last bundle
/// (`go_image`) and, when `csv` is given, this one replacing it, each with the properties OLM
/// resolves by (package and version, the API it provides).
fn catalog(csv: Option<(&Value, &str)>, go_image: &str) -> String {
    let gvk = json!({"type": "olm.gvk", "value": {"group": "interconnectedcloud.github.io", "kind": "Interconnect",
                                               "version": "v1alpha1"}});
    let package = |version: &str| json!({"type": "olm.package", "value": {"packageName": qdr_api::bundle::PACKAGE, "version": version}});
    let mut entries = vec![json!({"name": GO_CSV})];
    let mut docs = vec![
        json!({"schema": "olm.package", "name": qdr_api::bundle::PACKAGE, "defaultChannel": qdr_api::bundle::CHANNEL}),
        json!({"schema": "olm.bundle", "name": GO_CSV, "package": qdr_api::bundle::PACKAGE, "image": go_image,
               "properties": [package("0.4.0"), gvk.clone()]}),
    ];
    if let Some((csv, bundle_image)) = csv {
        let name = csv["metadata"]["name"].as_str().unwrap();
        let version = csv["spec"]["version"].as_str().unwrap();
        assert_eq!(csv["spec"]["replaces"], GO_CSV);
        entries.push(json!({"name": name, "replaces": GO_CSV}));
        docs.push(json!({"schema": "olm.bundle", "name": name, "package": qdr_api::bundle::PACKAGE,
               "image": bundle_image, "properties": [package(version), gvk],
               "relatedImages": csv["spec"]["relatedImages"]}));
    }
    docs.insert(
        1,
        json!({"schema": "olm.channel", "package": qdr_api::bundle::PACKAGE, "name": qdr_api::bundle::CHANNEL,
               "entries": entries}),
    );
    docs.iter().map(|d| d.to_string() + "\n").collect()
}

/// A bundle shaped like the Go operator's last, `qdr-operator.v0.4.0`: its CRD (the Go
/// operator's group, names and status subresource, and its schema as published,
/// `qdr_api::legacy::go_schema`: `placement: Node`, no patterns, no ranges), a CSV offering
/// `OwnNamespace`, `SingleNamespace` and `AllNamespaces` (as v0.4.0 did) whose one Deployment
/// reads `WATCH_NAMESPACE` from its own namespace, as v0.4.0's did, and runs an image that does
/// nothing ([`qdr_tests::images::PAUSE_IMAGE`]: the real Go operator cannot be built here), and
/// the bundle metadata. Written under `dir`; returns the image's files.
fn go_bundle(dir: &Path) -> Vec<(PathBuf, String, u32)> {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "interconnects.interconnectedcloud.github.io"},
        "spec": {
            "group": "interconnectedcloud.github.io", "scope": "Namespaced",
            "names": {"kind": "Interconnect", "listKind": "InterconnectList", "plural": "interconnects",
                      "singular": "interconnect"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": qdr_api::legacy::go_schema()}}]
        }
    });
    let restricted = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    let csv = json!({
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
        "metadata": {"name": GO_CSV, "annotations": {"capabilities": "Basic Install"}},
        "spec": {
            "displayName": "Qpid Dispatch Router Operator", "version": "0.4.0",
            "description": "The Go operator's last release, as its users have it installed.",
            "installModes": [
                {"type": "OwnNamespace", "supported": true}, {"type": "SingleNamespace", "supported": true},
                {"type": "MultiNamespace", "supported": false}, {"type": "AllNamespaces", "supported": true}],
            "customresourcedefinitions": {"owned": [{"name": "interconnects.interconnectedcloud.github.io",
                "version": "v1alpha1", "kind": "Interconnect", "displayName": "Interconnect",
                "description": "A Qpid Dispatch Router network"}]},
            "install": {"strategy": "deployment", "spec": {
                "permissions": [{"serviceAccountName": "qdr-operator",
                                 "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}],
                "deployments": [{"name": "qdr-operator", "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"name": "qdr-operator"}},
                    "template": {"metadata": {"labels": {"name": "qdr-operator"}}, "spec": {
                        "serviceAccountName": "qdr-operator",
                        "securityContext": {"runAsNonRoot": true, "runAsUser": 65535,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{"name": "qdr-operator", "image": qdr_tests::images::PAUSE_IMAGE,
                                        "imagePullPolicy": "IfNotPresent", "securityContext": restricted,
                                        "env": [{"name": "WATCH_NAMESPACE",
                                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]}}}}]}},
        }
    });
    let annotations = format!(
        "annotations:\n  operators.operatorframework.io.bundle.mediatype.v1: registry+v1\n  \
         operators.operatorframework.io.bundle.manifests.v1: manifests/\n  \
         operators.operatorframework.io.bundle.metadata.v1: metadata/\n  \
         operators.operatorframework.io.bundle.package.v1: {}\n  \
         operators.operatorframework.io.bundle.channels.v1: {}\n  \
         operators.operatorframework.io.bundle.channel.default.v1: {}\n",
        qdr_api::bundle::PACKAGE,
        qdr_api::bundle::CHANNEL,
        qdr_api::bundle::CHANNEL
    );
    let root = dir.join("go-bundle");
    std::fs::create_dir_all(root.join("manifests")).unwrap();
    std::fs::create_dir_all(root.join("metadata")).unwrap();
    std::fs::write(root.join("manifests/interconnects.crd.json"), crd.to_string()).unwrap();
    std::fs::write(root.join(format!("manifests/{GO_CSV}.clusterserviceversion.json")), csv.to_string())
        .unwrap();
    std::fs::write(root.join("metadata/annotations.yaml"), annotations).unwrap();
    tree_files(&root).unwrap().into_iter().map(|(src, p, _)| (src, p, 0o644)).collect()
}

/// Writes `files` as image `reference` and imports it into the real node under its tag and
/// under `<repository>@<digest>` (OLM runs a bundle image by digest when the catalog names it
/// so, and the kubelet finds a digest reference only under that name); returns the latter.
fn import_by_digest(
    cp: &ControlPlane,
    dir: &Path,
    reference: &str,
    files: Vec<(PathBuf, String, u32)>,
) -> String {
    let node = cp.real_node().unwrap();
    let image = ImageSpec { reference: reference.into(), files, ..ImageSpec::default() };
    let archive = dir.join("bundle.oci.tar");
    let digest = write_archive(&image, &archive).unwrap();
    node.import(&archive).unwrap();
    let repository = reference.rsplit_once(':').map_or(reference, |(r, _)| r);
    let by_digest = ImageSpec { reference: format!("{repository}@{digest}"), ..image };
    assert_eq!(write_archive(&by_digest, &archive).unwrap(), digest);
    node.import(&archive).unwrap();
    by_digest.reference
}

/// The images OLM's unpack Job runs, written and imported into the real node: the bundle
/// images (`bundle/`'s manifests, metadata and scorecard config at `/`, as `bundle.Dockerfile`
/// copies them; and [`go_bundle`]), `opm` (on `PATH`) and OLM's util image (`/bin/cpb`, and
/// `/bin/cp` that copies it). Returns `(bundle by digest, Go bundle by digest, opm, util)`.
fn import_olm_images(cp: &ControlPlane, dir: &Path, version: &str) -> (String, String, String, String) {
    let node = cp.real_node().unwrap();
    let bundle_dir = root().join("bundle");
    let files = tree_files(&bundle_dir)
        .unwrap()
        .into_iter()
        .filter(|(_, p, _)| p != "/bundle.Dockerfile")
        .map(|(src, p, _)| (src, p, 0o644))
        .collect();
    let bundle = import_by_digest(cp, dir, &format!("qdr-operator.test/bundle:{version}"), files);
    let go = import_by_digest(cp, dir, "qdr-operator.test/go-bundle:0.4.0", go_bundle(dir));

    let opm = ImageSpec {
        reference: "qdr-operator.test/opm:dev".into(),
        files: vec![(testbin("opm"), "/bin/opm".into(), 0o755)],
        entrypoint: vec!["/bin/opm".into()],
        env: vec!["PATH=/bin".into()],
        ..ImageSpec::default()
    };
    let archive = dir.join("opm.oci.tar");
    write_archive(&opm, &archive).unwrap();
    node.import(&archive).unwrap();

    let cp_root = dir.join("cp.rootfs");
    let _ = std::fs::remove_dir_all(&cp_root);
    let laid =
        Command::new(qdr_tests::images::rootfs_script()).arg("/bin/cp").arg(&cp_root).output().unwrap();
    assert!(laid.status.success(), "{}", String::from_utf8_lossy(&laid.stderr));
    let mut files: Vec<(PathBuf, String, u32)> = tree_files(&cp_root)
        .unwrap()
        .into_iter()
        .map(|(src, p, m)| (src, if p == "/cp" { "/bin/cp".into() } else { p }, m))
        .collect();
    files.push((testbin("cpb"), "/bin/cpb".into(), 0o755));
    let util = ImageSpec {
        reference: "qdr-operator.test/olm-util:dev".into(),
        files,
        env: vec!["PATH=/bin".into()],
        ..ImageSpec::default()
    };
    let archive = dir.join("olm-util.oci.tar");
    write_archive(&util, &archive).unwrap();
    node.import(&archive).unwrap();
    (bundle, go, opm.reference, util.reference)
}

/// What OLM, the catalog and the install look like, for a failure message.
fn olm_state(cp: &ControlPlane, processes: &[&qdr_tests::Process]) -> String {
    let mut out = String::new();
    for args in [
        &["get", "subscription,installplan,csv,catalogsource", "-n", OPERATOR_NS, "-o", "yaml"][..],
        &["get", "catalogsource,jobs,pods,configmaps", "-n", OLM_NS, "-o", "wide"][..],
        &["get", "pods,deploy,events", "-n", OPERATOR_NS, "-o", "wide"][..],
        &["get", "events", "-n", OLM_NS][..],
    ] {
        let o = kubectl(cp, args);
        out += &format!(
            "$ kubectl {}\n{}{}\n",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for p in processes {
        let state = p.exited().map_or("running".to_string(), |s| format!("exited: {s}"));
        out += &format!("--- {} ({state}) log\n{}\n", p.name(), p.log_tail(40));
    }
    out + &cp.real_node().unwrap().logs_tail(20)
}

/// Serves the file-based catalog `content` with `opm` from `dir` on a free port: the process
/// and its address.
fn serve_catalog(dir: &Path, content: &str) -> (qdr_tests::Process, String) {
    let fbc = dir.join("catalog/qdr-operator");
    std::fs::create_dir_all(&fbc).unwrap();
    std::fs::write(fbc.join("catalog.json"), content).unwrap();
    let validated = Command::new(testbin("opm")).arg("validate").arg(dir.join("catalog")).output().unwrap();
    assert!(validated.status.success(), "opm validate: {}", String::from_utf8_lossy(&validated.stderr));
    let port = qdr_tests::components::free_port();
    let mut serve = Command::new(testbin("opm"));
    serve
        .arg("serve")
        .arg(dir.join("catalog"))
        .args(["--port", &port.to_string()])
        .arg(format!("--pprof-addr=127.0.0.1:{}", qdr_tests::components::free_port()))
        .arg(format!("--termination-log={}", dir.join("opm.termination").display()));
    let opm = qdr_tests::Process::spawn("opm", serve, &dir.join("opm.log")).unwrap();
    (opm, format!("127.0.0.1:{port}"))
}

/// Points the CatalogSource at `address` and waits until OLM has connected to it.
async fn catalog_ready(cp: &ControlPlane, address: &str, processes: &[&qdr_tests::Process]) {
    apply(
        cp,
        &json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "CatalogSource",
                "metadata": {"name": CATALOG, "namespace": OLM_NS},
                "spec": {"sourceType": "grpc", "address": address,
                         "displayName": "qdr-operator test catalog", "publisher": "qdr-operator tests"}}),
    );
    let ready = wait_until(processes, Duration::from_secs(120), || {
        get(cp, &["catalogsource", CATALOG, "-n", OLM_NS]).is_some_and(|cs| {
            cs["status"]["connectionState"]["lastObservedState"] == "READY"
                && cs["status"]["connectionState"]["address"] == address
        })
    });
    if !ready.await {
        panic!("the catalog at {address} is not READY:\n{}", olm_state(cp, processes));
    }
}

/// Waits (`kubectl wait`, up to 180 s) until Interconnect `name` in the operator's namespace
/// is `Ready`; returns how long that took.
fn wait_ready(cp: &ControlPlane, name: &str, processes: &[&qdr_tests::Process]) -> Duration {
    let t = Instant::now();
    let target = format!("interconnect/{name}");
    let waited =
        kubectl(cp, &["wait", "--for=condition=Ready", &target, "-n", OPERATOR_NS, "--timeout=180s"]);
    assert!(
        waited.status.success(),
        "{name} not Ready: {}\n{}",
        String::from_utf8_lossy(&waited.stderr),
        olm_state(cp, processes)
    );
    t.elapsed()
}

/// Waits until CSV `name` has succeeded in the operator's namespace.
async fn csv_succeeded(cp: &ControlPlane, name: &str, processes: &[&qdr_tests::Process]) {
    let succeeded = wait_until(processes, Duration::from_secs(300), || {
        get(cp, &["csv", name, "-n", OPERATOR_NS]).is_some_and(|c| c["status"]["phase"] == "Succeeded")
    });
    if !succeeded.await {
        panic!("the CSV {name} did not succeed:\n{}", olm_state(cp, processes));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn olm_upgrades_the_go_operator_to_this_bundle_and_removes_it() {
    say!("starting the control plane with the real node");
    let cp = qdr_tests::shared_with_real_node().await;
    let dir = cp.dir().join("olm");
    std::fs::create_dir_all(&dir).unwrap();

    // The operator's images under the CSV's names; the bundles and OLM's unpack images.
    let t = Instant::now();
    let csv = csv();
    let related = |name: &str| -> String {
        let images = csv["spec"]["relatedImages"].as_array().unwrap();
        images.iter().find(|i| i["name"] == name).unwrap()["image"].as_str().unwrap().to_string()
    };
    qdr_tests::install::import_operator_images_as(cp, |image| normalized(&related(image.name))).unwrap();
    let (bundle_image, go_image, opm_image, util_image) =
        import_olm_images(cp, &dir, csv["spec"]["version"].as_str().unwrap());
    say!("images imported in {:.1?}; bundle image {bundle_image}", t.elapsed());

    // OLM: its CRDs, then its two operators, as a cluster admin's OLM runs them (here as
    // processes with an admin kubeconfig).
    let crds = testbin("olm-crds").display().to_string();
    ok(kubectl(cp, &["apply", "--server-side", "-f", &crds]));
    ok(kubectl(cp, &["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]));
    let _ = kubectl(cp, &["create", "namespace", OLM_NS]);
    let kubeconfig = cp.kubeconfig().display().to_string();
    let mut olm = Command::new(testbin("olm"));
    olm.args(["--namespace", OLM_NS])
        .env("KUBECONFIG", &kubeconfig)
        .env("OPERATOR_NAMESPACE", OLM_NS)
        .env("OPERATOR_NAME", "olm-operator");
    let olm = qdr_tests::Process::spawn("olm", olm, &dir.join("olm.log")).unwrap();
    // With a certificate the catalog operator serves its health on :8443, not the olm
    // operator's :8080.
    let serving = cp.issue_serving_cert(&["localhost", "127.0.0.1"]).unwrap();
    std::fs::write(dir.join("catalog.crt"), &serving.cert_pem).unwrap();
    std::fs::write(dir.join("catalog.key"), &serving.key_pem).unwrap();
    let mut catalog_op = Command::new(testbin("catalog"));
    catalog_op
        .args(["--namespace", OLM_NS, "--kubeconfig", &kubeconfig])
        .args(["--opmImage", &opm_image, "--util-image", &util_image])
        .arg(format!("--tls-cert={}", dir.join("catalog.crt").display()))
        .arg(format!("--tls-key={}", dir.join("catalog.key").display()))
        .arg(format!("--client-ca={}", cp.ca_file().display()))
        .env("KUBECONFIG", &kubeconfig);
    let catalog_op =
        qdr_tests::Process::spawn("catalog-operator", catalog_op, &dir.join("catalog-operator.log")).unwrap();

    // The catalog as a cluster of the Go operator's users has it: its last bundle only.
    let (go_opm, go_address) = serve_catalog(&dir.join("v0.4.0"), &catalog(None, &go_image));
    let t = Instant::now();
    catalog_ready(cp, &go_address, &[&olm, &catalog_op, &go_opm]).await;
    say!("catalog READY {:.1?} after the CatalogSource", t.elapsed());

    // The Go operator's install: namespace (Pod Security restricted), an OwnNamespace
    // OperatorGroup (v0.4.0 offered no other mode), a Subscription placing the pods on the
    // real node.
    let t = Instant::now();
    apply(
        cp,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted"}}}),
    );
    apply(
        cp,
        &json!({"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
                "metadata": {"name": "qdr-operator", "namespace": OPERATOR_NS},
                "spec": {"targetNamespaces": [OPERATOR_NS]}}),
    );
    let (taint_key, taint_value, taint_effect) = qdr_tests::real_node::TAINT;
    let taint = format!("{taint_key}={taint_value}:{taint_effect}");
    // OLM's unpack Job tolerates no taint: the real node's test taint is lifted while OLM
    // installs (and no simulated node exists yet, so the Job runs for real on the real node).
    ok(kubectl(cp, &["taint", "node", qdr_tests::real_node::NODE, &format!("{taint_key}-")]));
    apply(
        cp,
        &json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
                "metadata": {"name": qdr_api::bundle::PACKAGE, "namespace": OPERATOR_NS},
                "spec": {"channel": qdr_api::bundle::CHANNEL, "name": qdr_api::bundle::PACKAGE,
                         "source": CATALOG, "sourceNamespace": OLM_NS, "installPlanApproval": "Automatic",
                         "config": {
                             // The routers run on a simulated node, where nobody answers
                             // their management: the mesh is not observed (as in install.rs).
                             "env": [{"name": "QDR_OBSERVE_MESH", "value": "off"}],
                             "tolerations": [{"key": taint_key, "operator": "Exists", "effect": taint_effect}],
                             "nodeSelector": {"kubernetes.io/hostname": qdr_tests::real_node::NODE}}}}),
    );
    csv_succeeded(cp, GO_CSV, &[&olm, &catalog_op, &go_opm]).await;
    say!("the Go operator's bundle installed: CSV {GO_CSV} Succeeded in {:.1?}", t.elapsed());
    ok(kubectl(cp, &["taint", "node", qdr_tests::real_node::NODE, &taint]));
    cp.add_node("node-0").await.expect("a simulated node for the routers");

    // What the Go operator left: an Interconnect with its status log, and its routers (a
    // Deployment it controls, unlabelled, on the simulated node).
    ok(kubectl(
        cp,
        &["wait", "--for=condition=Established", "crd/interconnects.interconnectedcloud.github.io"],
    ));
    apply(
        cp,
        &json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                "metadata": {"name": "legacy", "namespace": OPERATOR_NS},
                "spec": {"deploymentPlan": {"role": "interior", "size": 1, "placement": "Any"}}}),
    );
    // And one with what the Go CRD took and this operator's rules refuse: placement `Node`
    // (never implemented: the Go operator made no workload for it) and a listener name that
    // is no IANA service name. The upgrade keeps it as it is (issue 72).
    apply(
        cp,
        &json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                "metadata": {"name": "node-placed", "namespace": OPERATOR_NS},
                "spec": {"deploymentPlan": {"role": "interior", "size": 1, "placement": "Node"},
                         "listeners": [{"name": "AMQP_Listener", "port": 5672}]}}),
    );
    let stored_spec = get(cp, &["interconnect", "node-placed", "-n", OPERATOR_NS]).unwrap()["spec"].clone();
    let ic = get(cp, &["interconnect", "legacy", "-n", OPERATOR_NS]).unwrap();
    let go_status = json!({"status": {"revNumber": ic["metadata"]["resourceVersion"], "pods": [],
        "conditions": [{"type": "Provisioning", "reason": "provision spec to desired state",
                        "transitionTime": "2020-04-16T10:00:00Z"},
                       {"type": "Deployed", "reason": "deployment created", "transitionTime": "2020-04-16T10:00:01Z"},
                       {"type": "Provisioning", "reason": "Configuration changed",
                        "transitionTime": "2020-04-17T08:30:00Z"}]}});
    ok(kubectl(
        cp,
        &[
            "patch",
            "interconnect",
            "legacy",
            "-n",
            OPERATOR_NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            &go_status.to_string(),
        ],
    ));
    let owner = json!([{"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                        "name": "legacy", "uid": ic["metadata"]["uid"], "controller": true,
                        "blockOwnerDeletion": true}]);
    let labels = json!({"application": "legacy", "interconnect_cr": "legacy"});
    apply(
        cp,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "legacy", "namespace": OPERATOR_NS, "ownerReferences": owner},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels}, "spec": {
                             "nodeSelector": {"kubernetes.io/hostname": "node-0"},
                             "securityContext": {"runAsNonRoot": true, "runAsUser": 65535,
                                                 "seccompProfile": {"type": "RuntimeDefault"}},
                             "containers": [{"name": "legacy", "image": qdr_tests::images::PAUSE_IMAGE,
                                             "securityContext": {"allowPrivilegeEscalation": false,
                                                                 "capabilities": {"drop": ["ALL"]}}}]}}}}),
    );
    let go_routers = get(cp, &["deploy", "legacy", "-n", OPERATOR_NS]).unwrap()["metadata"]["uid"].clone();

    // The catalog gains this bundle, replacing the Go operator's: the Subscription upgrades.
    // The unpack Job must run for real: on the real node (its taint lifted), not on the
    // simulated one (cordoned meanwhile), where kwok would "complete" it without running it.
    let t = Instant::now();
    ok(kubectl(cp, &["cordon", "node-0"]));
    ok(kubectl(cp, &["taint", "node", qdr_tests::real_node::NODE, &format!("{taint_key}-")]));
    let (opm, address) = serve_catalog(&dir.join("v0.5.0"), &catalog(Some((&csv, &bundle_image)), &go_image));
    let processes = [&olm, &catalog_op, &opm];
    catalog_ready(cp, &address, &processes).await;
    drop(go_opm);
    let csv_name = csv["metadata"]["name"].as_str().unwrap().to_string();
    csv_succeeded(cp, &csv_name, &processes).await;
    let install_time = t.elapsed();
    say!("OLM upgrade: {GO_CSV} → CSV {csv_name} Succeeded in {install_time:.1?}");
    ok(kubectl(cp, &["taint", "node", qdr_tests::real_node::NODE, &taint]));
    ok(kubectl(cp, &["uncordon", "node-0"]));
    // The routers of `legacy` on the simulated node (the Go CRD pruned a nodeSelector): a
    // router the roll placed on the real node while its taint was lifted is replaced.
    let on_node_0 =
        json!({"spec": {"deploymentPlan": {"nodeSelector": {"kubernetes.io/hostname": "node-0"}}}});
    // The webhook answers a moment after the CSV succeeds (its Service's endpoints follow its
    // pods): the first write that passes it is retried until it does.
    let on_node_0 = on_node_0.to_string();
    let patched = wait_until(&processes, Duration::from_secs(60), || {
        let args = ["patch", "interconnect", "legacy", "-n", OPERATOR_NS, "--type=merge", "-p", &on_node_0];
        kubectl(cp, &args).status.success()
    })
    .await;
    assert!(patched, "the webhook never admitted a write:\n{}", olm_state(cp, &processes));
    // What the Go CRD took and the new rules refuse is kept as it was: OLM's check of stored
    // objects passed (the new schema admits it), the spec is unchanged, the controller leaves
    // it (SpecValid False), and it stays editable (an update that leaves those fields as they
    // were is admitted by the API server's ratcheting and the webhook's).
    let node_placed = get(cp, &["interconnect", "node-placed", "-n", OPERATOR_NS]).unwrap();
    assert_eq!(node_placed["spec"], stored_spec, "the Go operator's object changed on upgrade");
    let invalid = wait_until(&processes, Duration::from_secs(60), || {
        get(cp, &["interconnect", "node-placed", "-n", OPERATOR_NS]).is_some_and(|o| {
            (o["status"]["conditions"].as_array().into_iter().flatten())
                .any(|c| c["type"] == "SpecValid" && c["status"] == "False" && c["reason"] == "InvalidSpec")
        })
    })
    .await;
    assert!(invalid, "node-placed: no SpecValid=False:\n{}", olm_state(cp, &processes));
    ok(kubectl(cp, &["label", "interconnect", "node-placed", "-n", OPERATOR_NS, "team=messaging"]));
    let bigger = json!({"spec": {"deploymentPlan": {"size": 2}}});
    ok(kubectl(
        cp,
        &[
            "patch",
            "interconnect",
            "node-placed",
            "-n",
            OPERATOR_NS,
            "--type=merge",
            "-p",
            &bigger.to_string(),
        ],
    ));
    let replaced = wait_until(&processes, Duration::from_secs(120), || {
        get(cp, &["csv", GO_CSV, "-n", OPERATOR_NS]).is_none()
    });
    assert!(replaced.await, "the Go operator's CSV was not replaced:\n{}", olm_state(cp, &processes));

    // The operator's pods, on the real node, as the CSV describes them, watching OLM's
    // target namespace.
    let pods = get(cp, &["pods", "-n", OPERATOR_NS, "-l", "app.kubernetes.io/part-of=qdr-operator"]).unwrap();
    let pods = pods["items"].as_array().unwrap();
    assert_eq!(pods.len(), 4, "two controller and two webhook pods: {}", olm_state(cp, &processes));
    for p in pods {
        assert_eq!(p["spec"]["nodeName"], qdr_tests::real_node::NODE);
        assert_eq!(p["status"]["phase"], "Running", "{p}");
        if p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("qdr-controller")) {
            assert_eq!(
                p["metadata"]["annotations"][qdr_api::bundle::OLM_TARGET_NAMESPACES],
                OPERATOR_NS,
                "{p}"
            );
        }
    }

    // The Interconnect adopted: Ready, its Go status replaced by the controller's, its
    // routers' Deployment kept (the same object, now the controller's).
    let waited = wait_ready(cp, "legacy", &processes);
    say!("the Go operator's Interconnect Ready {waited:.1?} after the upgrade");
    let ic = get(cp, &["interconnect", "legacy", "-n", OPERATOR_NS]).unwrap();
    let types: Vec<&str> =
        ic["status"]["conditions"].as_array().unwrap().iter().filter_map(|c| c["type"].as_str()).collect();
    assert!(types.contains(&"Ready") && !types.contains(&"Provisioning"), "{}", ic["status"]);
    let routers = get(cp, &["deploy", "legacy", "-n", OPERATOR_NS]).unwrap();
    assert_eq!(routers["metadata"]["uid"], go_routers, "the Go operator's router Deployment was replaced");

    // The webhook serves OLM's certificate: OLM mounted its Secret where the bundle's
    // --tls-dir points, and wrote the configurations (with its caBundle) itself.
    let webhook = get(cp, &["deploy", "qdr-webhook", "-n", OPERATOR_NS]).unwrap();
    let spec = &webhook["spec"]["template"]["spec"];
    let mounts = spec["containers"][0]["volumeMounts"].as_array().cloned().unwrap_or_default();
    let mount = mounts
        .iter()
        .find(|m| m["mountPath"] == qdr_api::bundle::OLM_CERT_DIR)
        .unwrap_or_else(|| panic!("no OLM certificate mounted: {spec}"));
    let volume = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    let secret = volume["secret"]["secretName"].as_str().unwrap();
    assert!(get(cp, &["secret", secret, "-n", OPERATOR_NS]).is_some(), "OLM's Secret {secret}");
    assert!(
        spec["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("--tls-dir={}", qdr_api::bundle::OLM_CERT_DIR)))
    );
    // One configuration per webhook definition: the validating webhook of Interconnects and
    // Links, the one of token Secrets (its object selector kept), the mutating webhook.
    for (kind, count) in [("validatingwebhookconfiguration", 2), ("mutatingwebhookconfiguration", 1)] {
        let configs = get(cp, &[kind, "-l", &format!("olm.owner={csv_name}")]).unwrap();
        let items = configs["items"].as_array().unwrap();
        assert_eq!(items.len(), count, "{kind} made by OLM: {configs}");
        for w in items.iter().flat_map(|i| i["webhooks"].as_array().unwrap()) {
            assert_eq!(w["clientConfig"]["service"]["name"], "qdr-webhook-service", "{w}");
            assert!(w["clientConfig"]["caBundle"].as_str().is_some_and(|b| !b.is_empty()), "{w}");
        }
    }
    assert!(
        get(cp, &["secret", "qdr-webhook-tls", "-n", OPERATOR_NS]).is_none(),
        "the self-managed TLS stays off"
    );

    // The API server calls the webhook (trusting OLM's caBundle): a bad Interconnect is refused
    // with its field path; a good one is stored with its defaults and reconciled.
    let refused = qdr_tests::install::refused_by_webhook(cp, OPERATOR_NS).await;
    assert!(refused.contains("spec.listeners[0].sslProfile"), "{refused}");
    let example = root().join("deploy/examples/interior-mesh.yaml").display().to_string();
    ok(kubectl(cp, &["apply", "-n", OPERATOR_NS, "-f", &example]));
    let users = ok(kubectl(
        cp,
        &["get", "interconnect", "router-mesh", "-n", OPERATOR_NS, "-o", "jsonpath={.spec.users}"],
    ));
    assert_eq!(users, "router-mesh-users", "the mutating webhook's default");
    let waited = wait_ready(cp, "router-mesh", &processes);
    say!("router-mesh Ready {waited:.1?} after the apply");
    let holder = ok(kubectl(
        cp,
        &[
            "get",
            "lease",
            "qdr-operator-controller",
            "-n",
            OPERATOR_NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    ));
    assert!(
        pods.iter().any(|p| p["metadata"]["name"] == holder.as_str()),
        "the Lease holder {holder} is one of the controller pods"
    );

    // Least privilege per install mode (issue 72): in an OwnNamespace OperatorGroup the
    // controller may write Secrets, Deployments and Roles in its namespace only (the CSV's
    // `permissions`, which OLM grants per target namespace); widened to AllNamespaces, OLM
    // lifts them cluster-wide. The webhook's one cluster-wide right is SubjectAccessReviews;
    // it reads a Link's token and Interconnect in the target namespaces (issue 73).
    let controller = format!("--as=system:serviceaccount:{OPERATOR_NS}:qdr-controller");
    let webhook = format!("--as=system:serviceaccount:{OPERATOR_NS}:qdr-webhook");
    let can = |verb: &str, resource: &str, ns: Option<&str>, who: &str| -> bool {
        let mut args = vec!["auth", "can-i", verb, resource, who];
        match ns {
            Some(ns) => args.extend(["-n", ns]),
            None => args.push("--all-namespaces"),
        }
        kubectl(cp, &args).status.success()
    };
    let outside = "default";
    for (verb, resource) in
        [("create", "secrets"), ("patch", "deployments.apps"), ("create", "roles.rbac.authorization.k8s.io")]
    {
        assert!(
            can(verb, resource, Some(OPERATOR_NS), &controller),
            "{verb} {resource} in the target namespace"
        );
        assert!(
            !can(verb, resource, Some(outside), &controller),
            "OwnNamespace: {verb} {resource} outside it"
        );
    }
    assert!(can("create", "subjectaccessreviews.authorization.k8s.io", None, &webhook));
    assert!(
        !can("get", "secrets", Some(outside), &webhook),
        "the webhook reads no Secret outside the target namespaces under OLM"
    );
    assert!(can("get", "secrets", Some(OPERATOR_NS), &webhook), "the webhook reads a Link's token there");
    say!("OwnNamespace: the controller's rights are its namespace's only");
    // SingleNamespace (another namespace than the operator's): OLM copies the `permissions`
    // there, and nowhere else.
    let tenant = "qdr-tenant";
    apply(cp, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}}));
    let patch_group = |kind: &str, patch: &str| {
        ok(kubectl(
            cp,
            &[
                "patch",
                "operatorgroup",
                "qdr-operator",
                "-n",
                OPERATOR_NS,
                &format!("--type={kind}"),
                "-p",
                patch,
            ],
        ))
    };
    patch_group("merge", &json!({"spec": {"targetNamespaces": [tenant]}}).to_string());
    let copied = wait_until(&processes, Duration::from_secs(120), || {
        can("create", "secrets", Some(tenant), &controller)
    });
    assert!(copied.await, "SingleNamespace: rights not granted in {tenant}:\n{}", olm_state(cp, &processes));
    assert!(
        !can("create", "secrets", Some(outside), &controller),
        "SingleNamespace: rights outside {tenant}"
    );
    say!("SingleNamespace: the controller's rights are {tenant}'s only");
    patch_group("json", r#"[{"op": "remove", "path": "/spec/targetNamespaces"}]"#);
    let widened = wait_until(&processes, Duration::from_secs(120), || {
        can("create", "secrets", Some(outside), &controller)
    });
    assert!(widened.await, "AllNamespaces: rights not lifted cluster-wide:\n{}", olm_state(cp, &processes));
    say!("AllNamespaces: the controller's rights lifted cluster-wide");

    // Uninstalling: the Subscription and the CSV deleted, OLM removes what it installed.
    let t = Instant::now();
    ok(kubectl(cp, &["delete", "subscription", qdr_api::bundle::PACKAGE, "-n", OPERATOR_NS]));
    ok(kubectl(cp, &["delete", "csv", &csv_name, "-n", OPERATOR_NS]));
    let owner = format!("olm.owner={csv_name}");
    let gone = wait_until(&processes, Duration::from_secs(120), || {
        let empty =
            |args: &[&str]| get(cp, args).is_some_and(|v| v["items"].as_array().is_some_and(Vec::is_empty));
        let operator = ["-n", OPERATOR_NS, "-l", "app.kubernetes.io/part-of=qdr-operator"];
        empty(&[&["deploy"][..], &operator[..]].concat())
            && empty(&[&["pods"][..], &operator[..]].concat())
            && empty(&["validatingwebhookconfiguration,mutatingwebhookconfiguration", "-l", &owner])
    });
    if !gone.await {
        panic!("the operator was not removed:\n{}", olm_state(cp, &processes));
    }
    say!("removed {:.1?} after deleting the Subscription and the CSV", t.elapsed());
}
