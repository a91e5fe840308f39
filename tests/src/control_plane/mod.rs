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
//!
//! One module per process the control plane starts (`etcd`, `apiserver`, `component` for
//! kube-controller-manager and kube-scheduler, `nodes` for kwok and the simulated nodes),
//! beside the audit log (`audit`), clients (`clients`), test namespaces (`namespace`) and the
//! shared instance (`shared`); this file owns [`ControlPlane`] and the order of its start.

mod apiserver;
mod audit;
mod clients;
mod component;
mod etcd;
mod namespace;
mod nodes;
mod shared;

use clients::kubeconfig_json;

pub use audit::{AuditEvent, AuditObjectRef, AuditStatus, AuditUser};
pub use namespace::TestNamespace;
pub use nodes::{NODE_CAPACITY, POD_CIDR, SIMULATED_NODE};
pub use shared::{shared, shared_with_controller_manager, shared_with_nodes, shared_with_real_node};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
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

        let (etcd, client_port) = etcd::start(&testbin, &dir).await?;
        let api_port = free_port()?;
        let server = format!("https://{address}:{api_port}");
        let apiserver = apiserver::start(
            &testbin,
            &dir,
            &pki,
            &apiserver::Flags {
                address,
                port: api_port,
                etcd: format!("http://127.0.0.1:{client_port}"),
                real_node: host.is_some(),
                webhook_client_cert: opts.webhook_client_cert,
                audit: opts.audit,
            },
        )?;

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

    /// The real node, with [`Options::real_nodes`].
    pub fn real_node(&self) -> Option<&crate::real_node::RealNode> {
        self.real.as_ref()
    }

    /// Whether kube-controller-manager runs.
    pub fn has_controller_manager(&self) -> bool {
        self.kcm.initialized()
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

    /// Installs the committed CRDs (Interconnect, AccessGrant, Link: server-side apply, as a cluster admin would)
    /// once per control plane and waits until it is Established and served.
    ///
    /// # Panics
    /// When kubectl fails or the CRD is not served within 30 s.
    pub async fn install_crd(&self) {
        self.crd
            .get_or_init(|| async {
                let root = crate::workspace_root();
                let out = self
                    .kubectl()
                    .args(["apply", "--server-side"])
                    .args(
                        [qdr_api::CRD_PATH, qdr_api::links::GRANT_CRD_PATH, qdr_api::links::LINK_CRD_PATH]
                            .iter()
                            .flat_map(|p| ["-f".to_string(), root.join(p).display().to_string()]),
                    )
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
                            "crd/accessgrants.interconnectedcloud.github.io",
                            "crd/links.interconnectedcloud.github.io",
                        ])
                        .output()
                        .expect("kubectl");
                    let served = self
                        .kubectl()
                        .args(["get", "interconnects,accessgrants,links", "-A"])
                        .output()
                        .expect("kubectl");
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
