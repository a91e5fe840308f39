//! Monitoring (deploy/components/monitoring; the chart's `monitoring.*`), proven for real.
//!
//! * The alerts: every one has a severity, a summary and a runbook section in
//!   `docs/runbooks.md`; `promtool check rules` accepts them and `promtool test rules` runs
//!   `tests/monitoring/alerts-test.yaml`, where each alert fires on its bad series once its
//!   `for` has passed and stays silent before and on the good ones.
//! * The chart's copies (`deploy/helm/qdr-operator/files/`) are the component's files.
//! * A real Prometheus (built with promtool from its pinned module, `tools/testbin/prometheus`)
//!   runs the configuration that the real Prometheus
//!   Operator (built from its pinned module, `tools/testbin/monitoring`) generates from the
//!   chart's PodMonitors and PrometheusRule: the operator installed by `helm install
//!   --set monitoring.enabled=true` as pods on the real node, real routers beside them, a
//!   client sending messages. Every target the monitors declare is up, every dashboard query
//!   and every metric each alert reads returns series for the example Interconnect, and the
//!   mesh alert fires while a router is kept killed and resolves once it is back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use qdr_tests::ControlPlane;
use qdr_tests::Process;
use qdr_tests::routers;
use serde_json::Value;

static START: OnceLock<Instant> = OnceLock::new();

macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[{:6.1}s] {}", START.get_or_init(Instant::now).elapsed().as_secs_f64(), format!($($arg)*))
    };
}

const COMPONENT: &str = "deploy/components/monitoring";
const CHART_FILES: &str = "deploy/helm/qdr-operator/files";
const RUNBOOKS: &str = "docs/runbooks.md";
/// Where each alert's `runbook_url` points: its section of the published runbooks page.
fn runbook_base() -> String {
    format!("{}/runbooks.html#", qdr_api::project::docs_url())
}

fn root() -> PathBuf {
    qdr_tests::workspace_root()
}

fn yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The PrometheusRule's `spec` (its `groups`, a Prometheus rule file).
fn rule_spec() -> Value {
    yaml(&root().join(COMPONENT).join("prometheus-rule.yaml"))["spec"].clone()
}

/// Every alerting rule, in file order.
fn alerts() -> Vec<Value> {
    rule_spec()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// The dashboard's queries: (panel title, expression).
fn dashboard_queries() -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join(COMPONENT).join("dashboard.json")).unwrap(),
    )
    .unwrap();
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().into()))
        })
        .collect()
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to `-`, other punctuation gone.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_has_a_severity_a_summary_naming_its_object_and_a_runbook_section() {
    let runbooks = std::fs::read_to_string(root().join(RUNBOOKS)).unwrap();
    let anchors: Vec<String> = runbooks.lines().filter_map(|l| l.strip_prefix("## ")).map(anchor).collect();
    let alerts = alerts();
    assert!(alerts.len() >= 12, "{} alerts", alerts.len());
    for a in &alerts {
        let name = a["alert"].as_str().unwrap();
        assert!(
            ["critical", "warning", "info"].contains(&a["labels"]["severity"].as_str().unwrap_or("")),
            "{name}"
        );
        let summary = a["annotations"]["summary"].as_str().unwrap_or_default();
        assert!(!summary.is_empty() && !a["annotations"]["description"].is_null(), "{name}");
        // Alerts on an Interconnect's series name it; the others name the operator's part.
        let per_interconnect = a["expr"].as_str().unwrap().contains("qdr-routers")
            || ["qdr_mesh_", "qdr_interconnect_", "qdr_router_certificate", "qdr_link_"]
                .iter()
                .any(|m| a["expr"].as_str().unwrap().contains(m));
        if per_interconnect {
            assert!(
                summary.contains("Interconnect {{ $labels.namespace }}/{{ $labels."),
                "{name}: {summary}"
            );
        } else {
            assert!(summary.contains("qdr-operator"), "{name}: {summary}");
        }
        let url = a["annotations"]["runbook_url"].as_str().unwrap_or_default();
        let section =
            url.strip_prefix(runbook_base().as_str()).unwrap_or_else(|| panic!("{name}: runbook_url {url}"));
        assert_eq!(section, name.to_lowercase(), "{name}: the runbook section is named after the alert");
        assert!(anchors.iter().any(|a| a == section), "{name}: no section `## {name}` in {RUNBOOKS}");
    }
    // And no runbook for an alert that does not exist.
    let names: Vec<String> = alerts.iter().map(|a| a["alert"].as_str().unwrap().to_lowercase()).collect();
    for a in anchors.iter().filter(|a| a.starts_with("qdr")) {
        assert!(names.contains(a), "{RUNBOOKS} has a section for an unknown alert: {a}");
    }
}

/// The rule file and the unit tests, written beside each other as promtool expects.
fn promtool_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alerts.yaml"), serde_json::to_string_pretty(&rule_spec()).unwrap())
        .unwrap();
    std::fs::copy(root().join("tests/monitoring/alerts-test.yaml"), dir.path().join("alerts-test.yaml"))
        .unwrap();
    dir
}

fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(testbin("promtool")).current_dir(dir).args(args).output().expect("promtool runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn promtool_accepts_the_rules_and_every_alert_fires_on_bad_series_and_not_on_good_ones() {
    let dir = promtool_dir();
    let checked = promtool(dir.path(), &["check", "rules", "alerts.yaml"]);
    assert!(checked.contains(&format!("SUCCESS: {} rules found", alerts().len())), "{checked}");
    let tested = promtool(dir.path(), &["test", "rules", "alerts-test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a case where it fires and one where it is silent.
    let tests = yaml(&root().join("tests/monitoring/alerts-test.yaml"));
    for a in alerts() {
        let name = a["alert"].as_str().unwrap();
        let cases: Vec<&Value> = tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
            .filter(|c| c["alertname"] == name)
            .collect();
        let fires = cases.iter().any(|c| c["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()));
        let silent = cases.iter().any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty));
        assert!(
            fires && silent,
            "{name}: a case where it fires ({fires}) and one where it is silent ({silent})"
        );
    }
    // A wrong expectation fails: the tests can fail.
    let text = std::fs::read_to_string(dir.path().join("alerts-test.yaml")).unwrap();
    std::fs::write(dir.path().join("wrong.yaml"), text.replace("has 2 ready routers", "has 9 ready routers"))
        .unwrap();
    let out = Command::new(testbin("promtool"))
        .current_dir(dir.path())
        .args(["test", "rules", "wrong.yaml"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "promtool passed a wrong expectation");
}

/// The plain `scrape_configs` of docs/monitoring.md (for clusters without the Prometheus
/// Operator), with the alerts as its rule file, pass `promtool check config`.
#[test]
fn the_documented_scrape_configuration_is_one_prometheus_accepts() {
    let doc = std::fs::read_to_string(root().join("docs/monitoring.md")).unwrap();
    let section = doc.split("## Without the Prometheus Operator").nth(1).expect("the section");
    let block = section.split("```yaml\n").nth(1).and_then(|b| b.split("```").next()).expect("a yaml block");
    assert!(
        block.contains("job_name: qdr-routers") && block.contains("rule_files: [qdr-operator-alerts.yaml]")
    );
    let dir = promtool_dir();
    std::fs::copy(dir.path().join("alerts.yaml"), dir.path().join("qdr-operator-alerts.yaml")).unwrap();
    std::fs::write(dir.path().join("prometheus.yaml"), block).unwrap();
    let out = promtool(dir.path(), &["check", "config", "prometheus.yaml"]);
    assert!(out.contains("SUCCESS: 14 rules found"), "{out}");
}

#[test]
fn the_charts_copies_are_the_components_files() {
    for f in ["pod-monitors.yaml", "prometheus-rule.yaml", "dashboard.json"] {
        let a = std::fs::read(root().join(COMPONENT).join(f)).unwrap();
        let b = std::fs::read(root().join(CHART_FILES).join(f)).unwrap();
        assert!(a == b, "{CHART_FILES}/{f} differs from {COMPONENT}/{f}: run `make monitoring`");
    }
}

#[test]
fn the_dashboard_has_its_variables_and_every_panel_queries_its_interconnects() {
    let d: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join(COMPONENT).join("dashboard.json")).unwrap(),
    )
    .unwrap();
    let vars: Vec<&str> =
        d["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(vars, ["datasource", "namespace", "interconnect"]);
    let queries = dashboard_queries();
    assert!(queries.len() >= 25, "{} queries", queries.len());
    for (panel, q) in &queries {
        let router = ["qdr_mesh_", "qdr_interconnect_", "qdr-routers"].iter().any(|m| q.contains(m));
        if router {
            assert!(
                q.contains("namespace=~\"$namespace\"") && q.contains("interconnect=~\"$interconnect\""),
                "{panel}: {q}"
            );
        }
        // The routers' `_total` gauges are never rate()d.
        for gauge in [
            "qdr_connections_total",
            "qdr_links_total",
            "qdr_links_blocked_total",
            "qdr_deliveries_stuck_total",
            "qdr_routers_total",
        ] {
            assert!(!q.contains(&format!("rate({gauge}")), "{panel}: rate() of the gauge {gauge}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// A real Prometheus.

/// The metric names an expression reads (`qdr_*`, and `up`), in order, once each.
fn metrics_read(expr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if (word.starts_with("qdr_") || word == "up") && !out.iter().any(|w| w == word) {
            out.push(word.to_string());
        }
    }
    out
}

struct Prometheus {
    url: String,
    http: reqwest::Client,
    process: Process,
}

impl Prometheus {
    /// `GET /api/v1/<path>`: the answer's `data` (panics on an error answer).
    async fn api(&self, path: &str) -> Value {
        let url = format!("{}/api/v1/{path}", self.url);
        let v: Value = self.http.get(&url).send().await.unwrap().json().await.unwrap();
        assert_eq!(v["status"], "success", "{url}: {v}");
        v["data"].clone()
    }

    /// The result vector of instant query `q`.
    async fn query(&self, q: &str) -> Vec<Value> {
        self.api(&format!("query?query={}", percent_encoded(q))).await["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The active targets, a line each: job, health, scrape URL, last error.
    async fn targets(&self) -> Vec<String> {
        self.api("targets").await["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|t| format!("{} {} {} {}", t["labels"]["job"], t["health"], t["scrapeUrl"], t["lastError"]))
            .collect()
    }

    /// The alerts Prometheus holds now: (name, state, labels).
    async fn alerts(&self) -> Vec<(String, String, Value)> {
        self.api("alerts").await["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap_or_default().to_string(),
                    a["state"].as_str().unwrap_or_default().to_string(),
                    a["labels"].clone(),
                )
            })
            .collect()
    }
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = routers::kubectl(cp, args);
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The admin's client certificate and key of the test API server, as files (the Prometheus
/// Operator and Prometheus take files).
fn admin_credentials(cp: &ControlPlane) -> (PathBuf, PathBuf) {
    use base64::Engine;
    let config: Value = serde_json::from_str(&std::fs::read_to_string(cp.kubeconfig()).unwrap()).unwrap();
    let user = &config["users"][0]["user"];
    let decode =
        |k: &str| base64::engine::general_purpose::STANDARD.decode(user[k].as_str().unwrap()).unwrap();
    let dir = cp.dir().join("monitoring");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("admin.crt"), dir.join("admin.key"));
    std::fs::write(&cert, decode("client-certificate-data")).unwrap();
    std::fs::write(&key, decode("client-key-data")).unwrap();
    (cert, key)
}

/// How long the test's Prometheus waits before a not-connected mesh fires: the rule's own
/// `for` (5 minutes) is proven by the promtool tests; here it is shortened so that the
/// router is kept down for seconds, not minutes.
const MESH_FOR: &str = "20s";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_real_prometheus_scrapes_what_the_monitors_declare_and_the_mesh_alert_fires_and_resolves() {
    let cp = qdr_tests::shared_with_real_node().await;
    let t = Instant::now();
    routers::check_client().expect("the AMQP client");
    routers::routers_on_real_node(cp).expect("untainting the real node");
    routers::import_router_image(cp).expect("the router image");
    qdr_tests::install::import_operator_images(cp).expect("operator images");
    say!("images imported in {:.1?}", t.elapsed());

    // The Prometheus Operator's CRDs, from its pinned module.
    let crds = testbin("monitoring-crds");
    kubectl(cp, &["apply", "--server-side", "-f", &crds.display().to_string()]);
    kubectl(cp, &["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]);

    // The operator, as a cluster admin installs it with monitoring on.
    let ns = "qdr-operator";
    let _ = routers::kubectl(cp, &["create", "namespace", ns]);
    let chart = root().join("deploy/helm/qdr-operator");
    let out = cp
        .helm()
        .args(["install", "qdr-operator"])
        .arg(&chart)
        .args([
            "-n",
            ns,
            "--set",
            "monitoring.enabled=true",
            "--set",
            &format!("images.router={}", routers::ROUTER_IMAGE),
        ])
        .args(qdr_tests::install::real_node_helm_values(true))
        .output()
        .unwrap();
    assert!(out.status.success(), "helm install: {}", String::from_utf8_lossy(&out.stderr));
    kubectl(cp, &["wait", "--for=condition=Available", "deployment", "--all", "-n", ns, "--timeout=240s"]);
    say!("helm install --set monitoring.enabled=true: Available in {:.1?}", t.elapsed());

    // The example mesh, admitted through the webhook once it serves.
    let apps = "monitored";
    let _ = routers::kubectl(cp, &["create", "namespace", apps]);
    // A grant that ends, so that the gauge of QdrLinkExpiring has a series; made before the
    // mesh, whose routers then trust the sites' file from their start.
    let grant = serde_json::json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "AccessGrant",
        "metadata": {"name": "site-elsewhere"},
        "spec": {"interconnect": "router-mesh", "site": "elsewhere", "expiry": "720h",
                 "externalHosts": [{"host": format!("router-mesh.{apps}.svc.cluster.local")}]}});
    routers::apply(cp, apps, &grant);
    let example = root().join("deploy/examples/interior-mesh.yaml").display().to_string();
    qdr_tests::eventually("the webhook admits", Duration::from_secs(120), || async {
        routers::kubectl(cp, &["apply", "-n", apps, "-f", &example]).status.success().then_some(())
    })
    .await;
    let ready = routers::wait_ready(cp, apps, "router-mesh", &[]);
    say!("router-mesh Ready (pods ready and the mesh connected) {ready:.1?} after apply");
    let pods: Vec<(String, String)> = kubectl(
        cp,
        &[
            "get",
            "pods",
            "-n",
            apps,
            "-l",
            "application=router-mesh",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{\"\\n\"}{end}",
        ],
    )
    .lines()
    .filter_map(|l| l.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())))
    .collect();
    assert_eq!(pods.len(), 3, "{pods:?}");
    let steady = routers::Steady::start(
        &routers::url(&pods[0].1, 5672),
        "closest/monitored",
        20,
        &cp.dir().join("monitoring-steady.log"),
    );

    // The real Prometheus Operator generates the configuration from the chart's monitors.
    let (cert, key) = admin_credentials(cp);
    let operator = Process::spawn(
        "prometheus-operator",
        {
            let mut c = Command::new(testbin("prometheus-operator"));
            c.args([
                format!("--apiserver={}", cp.server()),
                format!("--ca-file={}", cp.ca_file().display()),
                format!("--cert-file={}", cert.display()),
                format!("--key-file={}", key.display()),
                "--web.listen-address=127.0.0.1:0".into(),
                "--kubelet-endpoints=false".into(),
            ]);
            c
        },
        &cp.dir().join("prometheus-operator.log"),
    )
    .unwrap();
    let mon = "monitoring";
    let _ = routers::kubectl(cp, &["create", "namespace", mon]);
    let prometheus_cr = serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": "test", "namespace": mon},
        "spec": {
            "version": prometheus_version(),
            "replicas": 0,
            "scrapeInterval": "5s", "evaluationInterval": "5s",
            "podMonitorSelector": {}, "podMonitorNamespaceSelector": {},
            "ruleSelector": {}, "ruleNamespaceSelector": {},
            "apiserverConfig": {"host": cp.server(), "tlsConfig": {
                "caFile": cp.ca_file().display().to_string(),
                "certFile": cert.display().to_string(),
                "keyFile": key.display().to_string()}}
        }
    });
    routers::apply(cp, mon, &prometheus_cr);
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(cp.client().await.unwrap(), mon);
    let config =
        qdr_tests::eventually("the operator's generated configuration", Duration::from_secs(120), || async {
            let s = secrets.get_opt("prometheus-test").await.ok()??;
            let gz = s.data?.get("prometheus.yaml.gz")?.0.clone();
            let text = gunzip(&gz);
            text.contains("podMonitor/qdr-operator/qdr-routers").then_some(text)
        })
        .await;
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(cp.client().await.unwrap(), mon);
    let rules = qdr_tests::eventually("the operator's rule files", Duration::from_secs(60), || async {
        let m = maps.get_opt("prometheus-test-rulefiles-0").await.ok()??;
        m.data.filter(|d| d.values().any(|v| v.contains("QdrMeshNotConnected")))
    })
    .await;
    operator.stop(Duration::from_secs(5));
    say!(
        "the Prometheus Operator generated the configuration ({} bytes) and {} rule file(s)",
        config.len(),
        rules.len()
    );

    // Prometheus runs that configuration; its rule files are where the operator would mount
    // them, and only the mesh alert's `for` is shortened ([`MESH_FOR`]).
    let dir = cp.dir().join("prometheus");
    let rules_dir = dir.join("rules");
    std::fs::create_dir_all(&rules_dir).unwrap();
    for (name, text) in &rules {
        std::fs::write(rules_dir.join(name), shorten_mesh_for(text)).unwrap();
    }
    // What the operator's config-reloader does in the Prometheus pod before Prometheus reads
    // it: `$(VAR)` replaced by the pod's environment (shard 0 of 1, the pod's name).
    assert!(config.contains("$(SHARD)"), "the configuration the reloader expands");
    let config = config.replace("$(SHARD)", "0").replace("$(POD_NAME)", "prometheus-test-0");
    let mut config: Value = serde_saphyr::from_str(&config).unwrap();
    config["rule_files"] = serde_json::json!([format!("{}/*.yaml", rules_dir.display())]);
    let jobs: Vec<String> = config["scrape_configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        jobs,
        [
            "podMonitor/qdr-operator/qdr-controller/0",
            "podMonitor/qdr-operator/qdr-routers/0",
            "podMonitor/qdr-operator/qdr-webhook/0"
        ],
        "one scrape job per PodMonitor endpoint"
    );
    std::fs::write(dir.join("prometheus.yaml"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let port = qdr_tests::components::free_port();
    let process = Process::spawn(
        "prometheus",
        {
            let mut c = Command::new(testbin("prometheus"));
            c.args([
                format!("--config.file={}", dir.join("prometheus.yaml").display()),
                format!("--storage.tsdb.path={}", dir.join("data").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
            ]);
            c
        },
        &cp.dir().join("prometheus.log"),
    )
    .unwrap();
    let prom = Prometheus { url: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new(), process };
    qdr_tests::eventually("Prometheus ready", Duration::from_secs(60), || async {
        assert!(prom.process.exited().is_none(), "prometheus exited:\n{}", prom.process.log_tail(30));
        let r = prom.http.get(format!("{}/-/ready", prom.url)).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;

    // Every target the monitors declare is up: 3 routers, 2 controllers, 2 webhooks.
    for (job, want) in
        [("qdr-operator/qdr-routers", 3), ("qdr-operator/qdr-controller", 2), ("qdr-operator/qdr-webhook", 2)]
    {
        let q = format!("up{{job=\"{job}\"}} == 1");
        let deadline = Instant::now() + Duration::from_secs(120);
        while prom.query(&q).await.len() != want {
            assert!(
                Instant::now() < deadline,
                "{want} targets of {job} not up in 120 s; the targets:\n{}\nlog:\n{}\nconfiguration:\n{}",
                prom.targets().await.join("\n"),
                prom.process.log_tail(40),
                std::fs::read_to_string(dir.join("prometheus.yaml")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    let labels = prom.query("up{job=\"qdr-operator/qdr-routers\"}").await;
    for s in &labels {
        let m = &s["metric"];
        assert_eq!(
            (m["namespace"].as_str(), m["interconnect"].as_str()),
            (Some(apps), Some("router-mesh")),
            "{m}"
        );
        assert!(pods.iter().any(|(p, _)| m["pod"] == p.as_str()), "{m}");
    }
    say!("every target up: routers with namespace, pod and interconnect labels ({:.1?})", t.elapsed());

    // Rates need two scrapes of traffic; then every dashboard query returns series.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let mut empty = Vec::new();
    for (panel, q) in dashboard_queries() {
        let q = q
            .replace("$namespace", apps)
            .replace("$interconnect", "router-mesh")
            .replace("$__rate_interval", "1m");
        let n = prom.query(&q).await.len();
        say!("dashboard {panel:?}: {n} series  <- {q}");
        if n == 0 {
            empty.push(format!("{panel}: {q}"));
        }
    }
    assert!(empty.is_empty(), "dashboard queries without series:\n{}", empty.join("\n"));
    let accepted = prom
        .query(&format!("sum(increase(qdr_accepted_deliveries_total{{namespace=\"{apps}\"}}[1m]))"))
        .await;
    let accepted: f64 = accepted[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(accepted > 0.0, "the client's messages are counted as accepted");
    for a in alerts() {
        for m in metrics_read(a["expr"].as_str().unwrap()) {
            // The example's own series where the metric is about an Interconnect; the
            // operator's pods' otherwise.
            let selector = if m == "up" {
                format!("up{{namespace=~\"{apps}|{ns}\"}}")
            } else if m.starts_with("qdr_controller_") || m.starts_with("qdr_webhook_") {
                format!("{m}{{namespace=\"{ns}\"}}")
            } else {
                format!("{m}{{namespace=\"{apps}\"}}")
            };
            let n = prom.query(&selector).await.len();
            say!("alert {}: {selector} has {n} series", a["alert"].as_str().unwrap());
            assert!(n > 0, "{}: {selector} has no series", a["alert"]);
        }
    }
    assert!(
        prom.alerts().await.iter().all(|(n, _, _)| n != "QdrMeshNotConnected"),
        "the mesh alert before the kill"
    );

    // A router cut off from the two others (their traffic refused in its network namespace;
    // the controller still reads it): the mesh is split into two groups that each answer, so
    // the mesh alert fires; lifted, the routers link again and the alert resolves. (A router
    // that is down is not a split: its pod is not Ready, which QdrRoutersNotReady reports.)
    let (victim, _) = pods[2].clone();
    let pid = routers::router_pid(&victim).unwrap_or_else(|| panic!("no qdrouterd process of {victim}"));
    let rules: Vec<[String; 9]> = pods[..2]
        .iter()
        .flat_map(|(_, ip)| {
            let reject = |dir: &str, chain: &str| {
                [chain, dir, ip.as_str(), "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"]
                    .map(String::from)
            };
            [reject("-s", "INPUT"), reject("-d", "OUTPUT")]
        })
        .collect();
    let iptables = |op: &str, rule: &[String; 9]| {
        let mut args = vec![op];
        args.extend(rule.iter().map(String::as_str));
        routers::iptables_in(pid, &args);
    };
    for rule in &rules {
        iptables("-I", rule);
    }
    let t = Instant::now();
    let firing = qdr_tests::eventually("the mesh alert firing", Duration::from_secs(300), || async {
        let alerts = prom.alerts().await;
        alerts.into_iter().find(|(n, s, _)| n == "QdrMeshNotConnected" && s == "firing").map(|(_, _, l)| l)
    })
    .await;
    say!("QdrMeshNotConnected firing {:.1?} after {victim} was cut off: {firing}", t.elapsed());
    assert_eq!(
        (firing["namespace"].as_str(), firing["interconnect"].as_str()),
        (Some(apps), Some("router-mesh"))
    );
    for rule in &rules {
        iptables("-D", rule);
    }
    let t = Instant::now();
    qdr_tests::eventually("the mesh alert resolved", Duration::from_secs(300), || async {
        prom.alerts().await.iter().all(|(n, _, _)| n != "QdrMeshNotConnected").then_some(())
    })
    .await;
    say!("QdrMeshNotConnected resolved {:.1?} after the cut was lifted", t.elapsed());
    let traffic = steady.finish();
    say!("client: {traffic}");
    assert!(traffic.acknowledged > 0, "{traffic}");

    let _ = cp.helm().args(["uninstall", "qdr-operator", "-n", ns, "--wait", "--timeout=2m"]).output();
    let _ = routers::kubectl(cp, &["delete", "namespace", apps, mon, "--wait=false"]);
}

/// The rule file `text` with the mesh alert's `for` set to [`MESH_FOR`].
fn shorten_mesh_for(text: &str) -> String {
    let mut doc: Value = serde_saphyr::from_str(text).unwrap();
    let mut found = false;
    for g in doc["groups"].as_array_mut().unwrap() {
        for r in g["rules"].as_array_mut().unwrap() {
            if r["alert"] == "QdrMeshNotConnected" {
                r["for"] = MESH_FOR.into();
                found = true;
            }
        }
    }
    assert!(found, "the operator's rule file has the mesh alert");
    serde_json::to_string_pretty(&doc).unwrap()
}

/// A binary of the pinned test tools (`tools/testbin/build.sh`).
fn testbin(name: &str) -> PathBuf {
    qdr_tests::Testbin::locate().and_then(|t| t.require(name)).expect("the test binaries (make testbin)")
}

/// `X.Y.Z` of the test's Prometheus, as the Prometheus resource's `version` (`vX.Y.Z`), so
/// the operator generates a configuration that version accepts.
fn prometheus_version() -> String {
    let out = Command::new(testbin("prometheus")).arg("--version").output().expect("prometheus runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let v = text.split_whitespace().nth(2).unwrap_or_default();
    format!("v{}", v.split('+').next().unwrap())
}

/// `s` percent-encoded for a URL query (every byte but the unreserved ones, RFC 3986).
fn percent_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `gzip -dc` of `gz`, as text.
fn gunzip(gz: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    child.stdin.take().unwrap().write_all(gz).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "gzip -dc failed");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_metrics_an_alert_reads_are_found_in_its_expression() {
    let expr = r#"sum by (namespace) (rate(qdr_webhook_requests_total{result="bad_request", job=~"(.+/)?qdr-webhook"}[5m])) > 0 or absent(up{job="x"}) or qdr_webhook_requests_total"#;
    assert_eq!(metrics_read(expr), ["qdr_webhook_requests_total", "up"]);
}
