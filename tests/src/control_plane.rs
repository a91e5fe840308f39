//! A real control plane: etcd, kube-apiserver and, on request, kube-controller-manager and
//! simulated nodes (kube-scheduler plus kwok), on free loopback ports, driven the way
//! controller-runtime's envtest drives them.
//!
//! Simulated nodes are `Node` objects that kwok (Kubernetes WithOut Kubelet, the SIG
//! Scheduling/Scalability tool) manages: it keeps their Ready condition and Lease fresh and
//! moves every pod the real kube-scheduler binds to them through Running to Ready, with an
//! IP from [`POD_CIDR`]. No container runs: pods are Ready as soon as they are scheduled.
//!
//! With [`Options::real_nodes`], a real node runs beside them ([`crate::real_node`]): pods
//! that tolerate its taint run for real in containerd.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::OnceCell;

use crate::Error;
use crate::pki::{CertPair, Pki};
use crate::process::{Process, remove_at_exit};
use crate::testbin::Testbin;

/// How long kube-apiserver may take to report `/readyz` OK (2 shared cores are slow).
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Options for [`ControlPlane::start`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Keep state here instead of a temporary directory that is removed at exit
    /// (the local run uses `target/dev-cluster`). The kubeconfig is `<dir>/kubeconfig`.
    pub state_dir: Option<PathBuf>,
    /// Also start kube-controller-manager (garbage collection, Deployments → ReplicaSets,
    /// namespace deletion, default ServiceAccounts).
    pub controller_manager: bool,
    /// Simulated nodes to create (`node-0` … `node-<N-1>`); more than 0 also starts
    /// kube-controller-manager, kube-scheduler and kwok (see [`ControlPlane::add_node`]).
    pub nodes: usize,
    /// Write an audit log of every request (Metadata level, one JSON line per request at
    /// `ResponseComplete`) to `<dir>/audit.log`; read it with [`ControlPlane::audit`].
    pub audit: bool,
    /// Make the API server present a client certificate to every admission webhook, as a
    /// cluster admin configures it: `--admission-control-config-file` with an
    /// AdmissionConfiguration whose webhook kubeconfig has a `*` (any webhook) user with
    /// the certificate of user `kube-apiserver-webhook-client`, signed by the control
    /// plane's CA ([`ControlPlane::ca_file`], what a webhook's `--client-ca` takes).
    pub webhook_client_cert: bool,
    /// Real nodes to run (0 or 1): [`crate::real_node`] — containerd, the kubelet as node
    /// `real-0` (tainted [`crate::real_node::TAINT`]), kube-proxy and CoreDNS (the cluster
    /// DNS). Implies
    /// [`Self::controller_manager`] and the scheduler (and kwok, for simulated nodes beside
    /// it). The API server then listens on [`crate::real_node::GATEWAY`] instead of
    /// loopback, is Service `kubernetes`'s endpoint, and runs the ServiceAccount admission
    /// plugin so pods get tokens.
    pub real_nodes: usize,
}

/// The AdmissionConfiguration of [`Options::webhook_client_cert`]: both webhook admission
/// plugins read the credentials for calling webhooks from `kubeconfig`.
pub fn admission_configuration(kubeconfig: &Path) -> String {
    let plugin = |name: &str| {
        format!(
            "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    \
             kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
            kubeconfig.display()
        )
    };
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
        plugin("ValidatingAdmissionWebhook"),
        plugin("MutatingAdmissionWebhook")
    )
}

/// One request as the API server's audit log records it.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuditEvent {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// The client's `User-Agent`.
    pub user_agent: String,
    /// Who made it.
    pub user: AuditUser,
    /// What it was about (absent for non-resource URLs).
    pub object_ref: Option<AuditObjectRef>,
    /// The request URI.
    pub request_uri: String,
    /// The response code.
    pub response_status: Option<AuditStatus>,
    /// `ResponseStarted` (watches) or `ResponseComplete`.
    pub stage: String,
    /// When the API server received it (RFC 3339, microseconds).
    pub request_received_timestamp: String,
    /// When it reached [`Self::stage`] (RFC 3339, microseconds).
    pub stage_timestamp: String,
}

impl AuditEvent {
    /// Whether this line counts the request once: a watch when its response started, any
    /// other request when it completed.
    pub fn counts(&self) -> bool {
        if self.verb == "watch" { self.stage == "ResponseStarted" } else { self.stage == "ResponseComplete" }
    }

    /// How long the API server took from receiving it to [`Self::stage`], when both times
    /// parse.
    pub fn latency(&self) -> Option<std::time::Duration> {
        let at =
            |s: &str| time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok();
        let d = at(&self.stage_timestamp)? - at(&self.request_received_timestamp)?;
        d.try_into().ok()
    }
}

/// [`AuditEvent::user`].
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct AuditUser {
    /// The authenticated user name.
    pub username: String,
}

/// [`AuditEvent::object_ref`].
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuditObjectRef {
    /// Plural resource (`secrets`).
    pub resource: String,
    /// Subresource (`status`), empty when none.
    pub subresource: String,
    /// API group, empty for the core group.
    pub api_group: String,
    /// Namespace, empty for cluster-scoped requests.
    pub namespace: String,
    /// Name, empty for collections.
    pub name: String,
}

/// [`AuditEvent::response_status`].
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct AuditStatus {
    /// HTTP status code.
    pub code: u16,
}

const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

/// Annotation (and its value) that hands a Node to kwok.
pub const SIMULATED_NODE: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// What every simulated node offers: CPUs, memory, pods.
pub const NODE_CAPACITY: (&str, &str, &str) = ("4", "16Gi", "110");

/// Pod IPs of simulated nodes come from here.
pub const POD_CIDR: &str = "10.244.0.0/16";

/// A running control plane. Dropping it stops the processes (the shared one lives
/// until the test process exits and is torn down then).
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    testbin: Testbin,
    pki: Pki,
    server: String,
    kubeconfig: PathBuf,
    etcd: Process,
    etcd_client_port: u16,
    apiserver: Process,
    kcm: OnceCell<Process>,
    /// kube-scheduler and kwok.
    nodes: OnceCell<(Process, Process)>,
    crd: OnceCell<()>,
    real: Option<crate::real_node::RealNode>,
    /// Seconds from spawning etcd until `/readyz` answered OK and namespace `default` existed
    /// (and the real node was Ready, with [`Options::real_nodes`]).
    pub startup: Duration,
}

static SHARED: OnceCell<ControlPlane> = OnceCell::const_new();

/// The one control plane of this test binary, started on first use, with an audit log
/// ([`ControlPlane::audit`]).
///
/// # Panics
/// When the control plane cannot start; the message carries the cause, the build command
/// for missing binaries, and the tail of every process log.
pub async fn shared() -> &'static ControlPlane {
    SHARED
        .get_or_try_init(|| ControlPlane::start(Options { audit: true, ..Options::default() }))
        .await
        .unwrap_or_else(|e| panic!("test control plane failed to start: {e}"))
}

/// The one control plane of this test binary with a real node ([`Options::real_nodes`] = 1),
/// kube-controller-manager, the scheduler and kwok, and an audit log. A test binary uses
/// either this or [`shared`] and its variants.
///
/// # Panics
/// As [`shared`]; also when this binary's control plane was already started without a real
/// node.
pub async fn shared_with_real_node() -> &'static ControlPlane {
    let cp = SHARED
        .get_or_try_init(|| ControlPlane::start(Options { audit: true, real_nodes: 1, ..Options::default() }))
        .await
        .unwrap_or_else(|e| panic!("test control plane with a real node failed to start: {e}"));
    assert!(cp.real.is_some(), "this test binary's control plane was started without a real node");
    cp
}

/// Like [`shared`], and makes sure kube-controller-manager runs too.
///
/// # Panics
/// As [`shared`].
pub async fn shared_with_controller_manager() -> &'static ControlPlane {
    let cp = shared().await;
    cp.start_controller_manager()
        .await
        .unwrap_or_else(|e| panic!("kube-controller-manager failed to start: {e}"));
    cp
}

/// Like [`shared_with_controller_manager`], with kube-scheduler, kwok and at least `nodes`
/// simulated nodes (`node-0` …) Ready. Tests of one binary share the nodes: a test that
/// adds or removes nodes should be the only one in its binary that counts them.
///
/// # Panics
/// As [`shared`], or when a node does not become Ready.
pub async fn shared_with_nodes(nodes: usize) -> &'static ControlPlane {
    let cp = shared_with_controller_manager().await;
    for i in 0..nodes {
        cp.add_node(&format!("node-{i}")).await.unwrap_or_else(|e| panic!("simulated node-{i}: {e}"));
    }
    cp
}

/// A free TCP port on 127.0.0.1 (bound once and released).
pub(crate) fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("binding a free port", e))?;
    Ok(l.local_addr().map_err(|e| Error::io("reading a bound port", e))?.port())
}

/// Writes `contents` to `path`, creating its parent directories.
pub(crate) fn write(path: &Path, contents: &str) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    }
    std::fs::write(path, contents).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Whether Node `name` exists and reports condition Ready `True` (false on any error).
pub(crate) async fn node_ready(nodes: &Api<Node>, name: &str) -> bool {
    nodes.get_opt(name).await.ok().flatten().is_some_and(|n| {
        n.status
            .and_then(|s| s.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
}

impl ControlPlane {
    /// Builds the PKI, starts etcd and kube-apiserver (and kube-controller-manager when
    /// asked), waits for `/readyz` and namespace `default`, and writes a kubeconfig.
    ///
    /// # Errors
    /// [`Error::MissingBinary`] with the build command when a binary is missing;
    /// [`Error::Startup`] with the process logs when a process exits or does not become
    /// ready within [`READY_TIMEOUT`].
    pub async fn start(opts: Options) -> Result<ControlPlane, Error> {
        let testbin = Testbin::locate()?;
        let (dir, tmp) = match &opts.state_dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
                (d.clone(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("qdr-control-plane-")
                    .tempdir()
                    .map_err(|e| Error::io("creating a temporary directory", e))?;
                remove_at_exit(t.path());
                (t.path().to_path_buf(), Some(t))
            }
        };
        let began = Instant::now();
        if opts.real_nodes > 1 {
            return Err(Error::Startup {
                what: "one real node per machine at most".into(),
                logs: String::new(),
            });
        }
        // The bridge, before the API server that listens on it.
        let host = match opts.real_nodes {
            0 => None,
            _ => Some(crate::real_node::Host::prepare(&dir, Duration::from_secs(900))?),
        };
        let address = if host.is_some() { crate::real_node::GATEWAY } else { "127.0.0.1" };
        let pki = Pki::new()?;
        let mut sans = vec!["localhost", "127.0.0.1", "::1"];
        if host.is_some() {
            // What pods see: Service `kubernetes` (the first address of the range) and its names.
            sans.extend([address, "10.96.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]);
        }
        let serving = pki.serving("kube-apiserver", &sans)?;
        let admin = pki.client("admin", &["system:masters"])?;
        let pki_dir = dir.join("pki");
        std::fs::create_dir_all(&pki_dir).map_err(|e| Error::io("creating pki dir", e))?;
        write(&pki_dir.join("ca.crt"), pki.ca_pem())?;
        write(&pki_dir.join("apiserver.crt"), &serving.cert_pem)?;
        write(&pki_dir.join("apiserver.key"), &serving.key_pem)?;
        write(&pki_dir.join("sa.key"), &pki.service_account_key_pem)?;
        write(&pki_dir.join("sa.pub"), &pki.service_account_pub_pem)?;

        let (client_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let etcd_data = dir.join("etcd");
        let mut etcd_cmd = Command::new(testbin.path("etcd"));
        let peer = format!("http://127.0.0.1:{peer_port}");
        let client_url = format!("http://127.0.0.1:{client_port}");
        etcd_cmd.args([
            &format!("--data-dir={}", etcd_data.display()),
            &format!("--listen-client-urls={client_url}"),
            &format!("--advertise-client-urls={client_url}"),
            &format!("--listen-peer-urls={peer}"),
            &format!("--initial-advertise-peer-urls={peer}"),
            &format!("--initial-cluster=default={peer}"),
            "--name=default",
            "--unsafe-no-fsync=true",
            "--logger=zap",
            "--log-level=warn",
        ]);
        let etcd = Process::spawn("etcd", etcd_cmd, &dir.join("etcd.log"))?;
        wait_etcd(&etcd, client_port).await?;

        let server = format!("https://{address}:{api_port}");
        let mut api_cmd = Command::new(testbin.path("kube-apiserver"));
        let p = |f: &str| pki_dir.join(f).display().to_string();
        api_cmd.args([
            format!("--etcd-servers={client_url}"),
            format!("--bind-address={address}"),
            format!("--advertise-address={address}"),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer={server}/"),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            // A /16: benchmarks create hundreds of Services.
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--allow-privileged=true".into(),
            "--enable-priority-and-fairness=false".into(),
            "--max-requests-inflight=0".into(),
            "--max-mutating-requests-inflight=0".into(),
            "--profiling=false".into(),
            format!("--cert-dir={}", pki_dir.display()),
            "--v=0".into(),
        ]);
        if host.is_some() {
            api_cmd.args([
                "--endpoint-reconciler-type=lease",
                "--kubelet-preferred-address-types=InternalIP",
                "--enable-admission-plugins=ServiceAccount",
            ]);
        } else {
            api_cmd.args(["--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount"]);
        }
        if opts.webhook_client_cert {
            let client = pki.client("kube-apiserver-webhook-client", &[])?;
            write(&pki_dir.join("webhook-client.crt"), &client.cert_pem)?;
            write(&pki_dir.join("webhook-client.key"), &client.key_pem)?;
            let users = serde_json::json!({"apiVersion": "v1", "kind": "Config", "users": [{"name": "*", "user": {
                "client-certificate": p("webhook-client.crt"), "client-key": p("webhook-client.key")}}]});
            let kubeconfig = dir.join("webhook-client.kubeconfig");
            write(&kubeconfig, &users.to_string())?;
            let config = dir.join("admission-configuration.yaml");
            write(&config, &admission_configuration(&kubeconfig))?;
            api_cmd.arg(format!("--admission-control-config-file={}", config.display()));
        }
        if opts.audit {
            write(&dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
            api_cmd.args([
                format!("--audit-policy-file={}", dir.join("audit-policy.yaml").display()),
                format!("--audit-log-path={}", dir.join("audit.log").display()),
                "--audit-log-format=json".into(),
                "--audit-log-maxsize=0".into(),
            ]);
        }
        let apiserver = Process::spawn("kube-apiserver", api_cmd, &dir.join("kube-apiserver.log"))?;

        let kubeconfig = dir.join("kubeconfig");
        write(&kubeconfig, &kubeconfig_json(&server, pki.ca_pem(), &admin))?;

        let mut cp = ControlPlane {
            dir,
            _tmp: tmp,
            testbin,
            pki,
            server,
            kubeconfig,
            etcd,
            etcd_client_port: client_port,
            apiserver,
            kcm: OnceCell::new(),
            nodes: OnceCell::new(),
            crd: OnceCell::new(),
            real: None,
            startup: Duration::ZERO,
        };
        cp.wait_ready().await?;
        if opts.controller_manager || opts.nodes > 0 || host.is_some() {
            cp.start_controller_manager().await?;
        }
        if let Some(host) = host {
            cp.start_nodes().await?;
            let node = cp.pki.client(
                &format!("system:node:{}", crate::real_node::NODE),
                &["system:nodes", "system:masters"],
            )?;
            let node_kubeconfig = cp.dir.join("real-node").join("kubelet.kubeconfig");
            write(&node_kubeconfig, &kubeconfig_json(&cp.server, cp.pki.ca_pem(), &node))?;
            let real = crate::real_node::RealNode::start(
                host,
                &cp.testbin,
                &cp.ca_file(),
                &cp.kubeconfig,
                &node_kubeconfig,
                cp.client().await?,
            )
            .await?;
            cp.real = Some(real);
        }
        for i in 0..opts.nodes {
            cp.add_node(&format!("node-{i}")).await?;
        }
        cp.startup = began.elapsed();
        Ok(cp)
    }

    async fn wait_ready(&self) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let client = self.client().await?;
        let mut last;
        loop {
            if let Some(status) = self.apiserver.exited() {
                return Err(self.startup_error(format!("kube-apiserver exited ({status})")));
            }
            let req = http::Request::get("/readyz").body(Vec::new()).expect("static request");
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => break,
                Ok(body) => last = body,
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(self.startup_error(format!("/readyz not ok after {READY_TIMEOUT:?}: {last}")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let namespaces: Api<Namespace> = Api::all(client);
        while namespaces.get_opt("default").await.ok().flatten().is_none() {
            if Instant::now() > deadline {
                return Err(self.startup_error("namespace default never appeared".into()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    fn startup_error(&self, what: String) -> Error {
        Error::Startup { what, logs: self.logs_tail(40) }
    }

    /// Restarts kube-apiserver (SIGTERM, 5 s, SIGKILL; same flags, port and certificates)
    /// and waits until it is ready again. Clients reconnect by themselves.
    ///
    /// # Errors
    /// [`Error::Startup`] when it does not come back within [`READY_TIMEOUT`].
    pub async fn restart_apiserver(&self) -> Result<(), Error> {
        self.apiserver.restart(Duration::from_secs(5))?;
        self.wait_ready().await
    }

    /// Restarts etcd (SIGTERM, 5 s, SIGKILL; same data directory and ports) and waits until
    /// it and kube-apiserver answer again.
    ///
    /// # Errors
    /// [`Error::Startup`] when either does not come back within [`READY_TIMEOUT`].
    pub async fn restart_etcd(&self) -> Result<(), Error> {
        self.etcd.restart(Duration::from_secs(5))?;
        wait_etcd(&self.etcd, self.etcd_client_port).await?;
        self.wait_ready().await
    }

    /// Process ids of kube-apiserver and etcd (for CPU and memory figures).
    pub fn server_pids(&self) -> [u32; 2] {
        [self.apiserver.pid(), self.etcd.pid()]
    }

    /// The requests recorded in the audit log so far (empty unless started with
    /// [`Options::audit`]); lines that do not decode are skipped.
    pub fn audit(&self) -> Vec<AuditEvent> {
        // Bytes, not a String: one line that is not UTF-8 must not make the whole log empty.
        let bytes = std::fs::read(self.dir.join("audit.log")).unwrap_or_default();
        bytes.split(|b| *b == b'\n').filter_map(|l| serde_json::from_slice(l).ok()).collect()
    }

    /// The requests made so far by clients whose `User-Agent` starts with `agent` (such as
    /// `qdr-controller/`), each counted once ([`AuditEvent::counts`]).
    pub fn requests_by(&self, agent: &str) -> Vec<AuditEvent> {
        self.audit().into_iter().filter(|e| e.user_agent.starts_with(agent) && e.counts()).collect()
    }

    /// Starts kube-controller-manager once; later calls return at once.
    ///
    /// # Errors
    /// [`Error::Startup`] with its log when it exits or `/healthz` stays unhealthy.
    pub async fn start_controller_manager(&self) -> Result<(), Error> {
        self.kcm
            .get_or_try_init(|| {
                self.start_component(
                    "kube-controller-manager",
                    vec![
                        format!(
                            "--service-account-private-key-file={}",
                            self.dir.join("pki/sa.key").display()
                        ),
                        format!("--root-ca-file={}", self.dir.join("pki/ca.crt").display()),
                        "--controllers=*".into(),
                    ],
                )
            })
            .await
            .map(|_| ())
    }

    /// Starts kube-controller-manager (if not running), kube-scheduler and kwok once; later
    /// calls return at once. Nodes are added with [`Self::add_node`].
    ///
    /// # Errors
    /// [`Error::MissingBinary`] for kube-scheduler, kwok or the kwok stages;
    /// [`Error::Startup`] when one of them exits or kube-scheduler stays unhealthy.
    pub async fn start_nodes(&self) -> Result<(), Error> {
        self.start_controller_manager().await?;
        self.nodes
            .get_or_try_init(|| async {
                let scheduler = self.start_component("kube-scheduler", Vec::new()).await?;
                let kc = self.kubeconfig.display().to_string();
                let mut cmd = Command::new(self.testbin.path("kwok"));
                cmd.args([
                    format!("--kubeconfig={kc}"),
                    format!("--config={}", self.testbin.path(crate::testbin::KWOK_STAGES).display()),
                    format!(
                        "--manage-nodes-with-annotation-selector={}={}",
                        SIMULATED_NODE.0, SIMULATED_NODE.1
                    ),
                    format!("--cidr={POD_CIDR}"),
                    // Node Leases, as kubelets keep them: kube-controller-manager's node
                    // lifecycle controller never sees the nodes go stale.
                    "--node-lease-duration-seconds=40".into(),
                ]);
                let kwok = Process::spawn("kwok", cmd, &self.dir.join("kwok.log"))?;
                Ok::<_, Error>((scheduler, kwok))
            })
            .await
            .map(|_| ())
    }

    /// Creates simulated node `name` (label `kubernetes.io/hostname: <name>`, capacity
    /// [`NODE_CAPACITY`], handed to kwok by [`SIMULATED_NODE`]) unless it exists, starting
    /// the scheduler and kwok first, and waits until it is Ready.
    ///
    /// # Errors
    /// As [`Self::start_nodes`]; [`Error::Kube`] when the Node cannot be created;
    /// [`Error::Startup`] when it is not Ready within [`READY_TIMEOUT`].
    pub async fn add_node(&self, name: &str) -> Result<(), Error> {
        self.start_nodes().await?;
        let nodes: Api<Node> = Api::all(self.client().await?);
        let (cpu, memory, pods) = NODE_CAPACITY;
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "annotations": {SIMULATED_NODE.0: SIMULATED_NODE.1, "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
            },
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
            },
        }))
        .expect("a valid Node");
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(Error::Kube(Box::new(e))),
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if node_ready(&nodes, name).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.startup_error(format!("node {name} not Ready after {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deletes simulated node `name`; its pods are deleted by kube-controller-manager's
    /// pod garbage collector once the Node is gone.
    ///
    /// # Errors
    /// [`Error::Kube`] when the delete is refused (a missing node is not an error).
    pub async fn remove_node(&self, name: &str) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.client().await?);
        match nodes.delete(name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(Error::Kube(Box::new(e))),
        }
    }

    /// Spawns a kube-* component with a serving certificate of ours on a free port, the
    /// admin kubeconfig, no leader election and `extra` flags, and waits for its `/healthz`.
    async fn start_component(&self, name: &str, extra: Vec<String>) -> Result<Process, Error> {
        let port = free_port()?;
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let serving = self.pki.serving(name, &["localhost", "127.0.0.1"])?;
        write(&dir.join("tls.crt"), &serving.cert_pem)?;
        write(&dir.join("tls.key"), &serving.key_pem)?;
        let kc = self.kubeconfig.display().to_string();
        let mut cmd = Command::new(self.testbin.path(name));
        cmd.args([
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", dir.join("tls.crt").display()),
            format!("--tls-private-key-file={}", dir.join("tls.key").display()),
            "--v=0".into(),
        ]);
        cmd.args(extra);
        let process = Process::spawn(name, cmd, &self.dir.join(format!("{name}.log")))?;
        // Health on its own port, trusting our CA (its serving cert is ours).
        let mut cfg = kube::Config::new(format!("https://127.0.0.1:{port}").parse().expect("valid url"));
        cfg.root_cert = Some(vec![pem_to_der(self.pki.ca_pem())]);
        let client = kube::Client::try_from(cfg).map_err(|e| Error::Kube(Box::new(e)))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = process.exited() {
                return Err(Error::Startup {
                    what: format!("{name} exited ({status})"),
                    logs: process.log_tail(40),
                });
            }
            let req = http::Request::get("/healthz").body(Vec::new()).expect("static request");
            if matches!(client.request_text(req).await, Ok(b) if b.trim() == "ok") {
                return Ok(process);
            }
            if Instant::now() > deadline {
                return Err(Error::Startup {
                    what: format!("{name} /healthz not ok"),
                    logs: process.log_tail(40),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The real node, with [`Options::real_nodes`].
    pub fn real_node(&self) -> Option<&crate::real_node::RealNode> {
        self.real.as_ref()
    }

    /// Whether kube-controller-manager runs.
    pub fn has_controller_manager(&self) -> bool {
        self.kcm.initialized()
    }

    /// A new client for the admin user (`system:masters`). Make one per test: a client is
    /// bound to the tokio runtime it was first used on, and each `#[tokio::test]` has its own.
    ///
    /// # Errors
    /// [`Error::Kube`] if the kubeconfig cannot be read.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let kc = Kubeconfig::read_from(&self.kubeconfig).map_err(|e| Error::Kube(Box::new(e.into())))?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kube(Box::new(e.into())))?;
        kube::Client::try_from(cfg).map_err(|e| Error::Kube(Box::new(e)))
    }

    /// `https://127.0.0.1:<port>` of kube-apiserver (`https://10.88.0.1:<port>`, the real
    /// node's bridge address, with [`Options::real_nodes`]).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Path of the admin kubeconfig (JSON, which kubectl reads like YAML).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The control plane's CA certificate (PEM): it signs the API server's serving and
    /// client certificates (the admin's, and the webhook client's of
    /// [`Options::webhook_client_cert`]).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("pki").join("ca.crt")
    }

    /// The directory holding the PKI, data and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA that signed every serving certificate of this control plane, PEM.
    pub fn ca_pem(&self) -> &str {
        self.pki.ca_pem()
    }

    /// A serving certificate signed by [`Self::ca_pem`], e.g. for a webhook on
    /// `127.0.0.1` registered with `url` + `caBundle`.
    ///
    /// # Errors
    /// [`Error::Pki`] for a SAN that is neither a DNS name nor an IP address.
    pub fn issue_serving_cert(&self, sans: &[&str]) -> Result<CertPair, Error> {
        self.pki.serving(sans.first().copied().unwrap_or("localhost"), sans)
    }

    /// A `kubectl` command (the pinned build) with `--kubeconfig` set to this control plane.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.testbin.path("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd.env("NO_PROXY", crate::NO_PROXY).env("no_proxy", crate::NO_PROXY);
        cmd
    }

    /// A `helm` command (the pinned build), with `KUBECONFIG` set to this control plane and
    /// its caches and configuration in [`Self::dir`].
    pub fn helm(&self) -> Command {
        let mut cmd = Command::new(self.testbin.path("helm"));
        let home = self.dir.join("helm");
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        cmd
    }

    /// The last `lines` lines of every process log, each under a header.
    pub fn logs_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        let (scheduler, kwok) = match self.nodes.get() {
            Some((s, k)) => (Some(s), Some(k)),
            None => (None, None),
        };
        for p in
            [Some(&self.etcd), Some(&self.apiserver), self.kcm.get(), scheduler, kwok].into_iter().flatten()
        {
            out.push_str(&format!(
                "----- {} (pid {}, {}) -----\n{}\n",
                p.name(),
                p.pid(),
                p.log_path().display(),
                p.log_tail(lines)
            ));
        }
        if let Some(real) = &self.real {
            out.push_str(&real.logs_tail(lines));
        }
        out
    }

    /// Creates a fresh namespace `<prefix>-<random>` for one test. The returned guard
    /// prints the control plane's logs if the test panics while it is alive.
    ///
    /// # Panics
    /// If the namespace cannot be created.
    pub async fn namespace(&'static self, prefix: &str) -> TestNamespace {
        let client = self.client().await.expect("client for test namespace");
        let api: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.generate_name = Some(format!("{prefix}-"));
        ns.metadata.labels = Some([("qdr-operator.test/namespace".to_string(), "true".to_string())].into());
        let created = api.create(&PostParams::default(), &ns).await.expect("creating test namespace");
        TestNamespace { name: created.metadata.name.expect("server set a name"), client, cp: self }
    }

    /// Installs the committed Interconnect CRD (server-side apply, as a cluster admin would)
    /// once per control plane and waits until it is Established and served.
    ///
    /// # Panics
    /// When kubectl fails or the CRD is not served within 30 s.
    pub async fn install_crd(&self) {
        self.crd
            .get_or_init(|| async {
                let path = crate::workspace_root().join(qdr_api::CRD_PATH);
                let out = self
                    .kubectl()
                    .args(["apply", "--server-side", "-f"])
                    .arg(&path)
                    .output()
                    .expect("kubectl");
                assert!(
                    out.status.success(),
                    "installing the CRD failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let out = self
                        .kubectl()
                        .args([
                            "wait",
                            "--for=condition=Established",
                            "--timeout=10s",
                            "crd/interconnects.interconnectedcloud.github.io",
                        ])
                        .output()
                        .expect("kubectl");
                    let served =
                        self.kubectl().args(["get", "interconnects", "-A"]).output().expect("kubectl");
                    if out.status.success() && served.status.success() {
                        break;
                    }
                    assert!(Instant::now() < deadline, "CRD never became established and served");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
            .await;
    }

    /// Stops the real node (and undoes its changes to the host), kwok, kube-scheduler,
    /// kube-controller-manager, kube-apiserver and etcd (SIGTERM, then SIGKILL).
    pub fn stop(&self) {
        if let Some(real) = &self.real {
            real.stop();
        }
        if let Some((scheduler, kwok)) = self.nodes.get() {
            kwok.stop(Duration::from_secs(5));
            scheduler.stop(Duration::from_secs(5));
        }
        if let Some(k) = self.kcm.get() {
            k.stop(Duration::from_secs(5));
        }
        self.apiserver.stop(Duration::from_secs(10));
        self.etcd.stop(Duration::from_secs(5));
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A namespace that belongs to one test, with a client for it.
pub struct TestNamespace {
    /// The generated name.
    pub name: String,
    /// An admin client bound to the current test's runtime.
    pub client: kube::Client,
    cp: &'static ControlPlane,
}

impl TestNamespace {
    /// A namespaced `Api<K>` in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The control plane this namespace lives on.
    pub fn control_plane(&self) -> &'static ControlPlane {
        self.cp
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Namespaces are not deleted: without kube-controller-manager they would stay
        // Terminating forever, and the control plane is thrown away at exit anyway.
        if std::thread::panicking() {
            eprintln!(
                "\n===== test in namespace {} failed; control-plane logs ({}) =====\n{}",
                self.name,
                self.cp.dir().display(),
                self.cp.logs_tail(60)
            );
        }
    }
}

async fn wait_etcd(etcd: &Process, port: u16) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = etcd.exited() {
            return Err(Error::Startup { what: format!("etcd exited ({status})"), logs: etcd.log_tail(40) });
        }
        if etcd_healthy(port) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Startup {
                what: "etcd /health not true after 30s".into(),
                logs: etcd.log_tail(40),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET /health` over plain HTTP on loopback; true when etcd answers `"health":"true"`.
fn etcd_healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).expect("our own PEM is valid base64")
}

fn kubeconfig_json(server: &str, ca_pem: &str, admin: &CertPair) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let kc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "qdr-test", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": b64(&admin.cert_pem),
            "client-key-data": b64(&admin.key_pem)}}],
        "contexts": [{"name": "qdr-test", "context": {"cluster": "qdr-test", "user": "admin"}}],
        "current-context": "qdr-test",
    });
    serde_json::to_string_pretty(&kc).expect("json value serializes")
}
