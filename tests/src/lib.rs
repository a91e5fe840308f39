//! A real Kubernetes control plane for tests and local runs, and the integration tests
//! that use it.
//!
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok are
//! pinned Go builds made by `make testbin` (see `tools/testbin/`). [`shared`] starts one control plane per test
//! binary on first use; each test then takes its own namespace:
//!
//! ```no_run
//! # async fn t() {
//! let cp = qdr_tests::shared().await;
//! let ns = cp.namespace("smoke").await;
//! let status = cp.kubectl().args(["get", "cm", "-n", &ns.name]).status().unwrap();
//! # }
//! ```
//!
//! Child processes are killed when the test process ends, however it ends, and their
//! logs are printed when a test fails while holding a [`TestNamespace`].

pub mod amqp_peer;
pub mod components;
mod control_plane;
pub mod day_two;
pub mod helm_values;
pub mod images;
pub mod install;
pub mod keys;
pub mod links;
pub mod modules;
pub mod netpol;
mod pki;
mod process;
pub mod rbac;
pub mod real_node;
pub mod release;
pub mod routers;
pub mod stand_in;
mod testbin;

/// `NO_PROXY` for every process the harness starts and every kubectl: loopback and the real
/// node's bridge ([`real_node::SUBNET`]), where the API server listens when a real node runs.
pub const NO_PROXY: &str = "127.0.0.1,localhost,::1,10.88.0.0/24";

pub use control_plane::{
    AuditEvent, AuditObjectRef, AuditStatus, AuditUser, ControlPlane, NODE_CAPACITY, Options, POD_CIDR,
    READY_TIMEOUT, SIMULATED_NODE, TestNamespace, shared, shared_with_controller_manager, shared_with_nodes,
    shared_with_real_node,
};
pub use pki::{CertPair, Pki};
pub use process::{Process, at_exit};
pub use testbin::{BUILD_HINT, CORE, KWOK_STAGES, TESTBIN_ENV, Testbin, workspace_root};

/// Polls `check` every 100 ms until it returns `Some`, and returns that value.
///
/// # Panics
/// After `timeout`, naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Why the control plane could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A pinned binary is not where it should be.
    #[error("missing control-plane binary {path}: build it with `{hint}`")]
    MissingBinary {
        /// The path that was looked at.
        path: std::path::PathBuf,
        /// The command that builds it.
        hint: &'static str,
    },
    /// A process exited or did not become ready.
    #[error("{what}\n{logs}")]
    Startup {
        /// What went wrong.
        what: String,
        /// The tail of the process logs.
        logs: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// rcgen could not make a certificate.
    #[error("certificate generation: {0}")]
    Pki(#[from] rcgen::Error),
    /// kube could not build a client or read the kubeconfig.
    #[error("kube client: {0}")]
    Kube(Box<kube::Error>),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }
}
