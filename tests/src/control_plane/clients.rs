//! Talking to the control plane as its admin: a kube client, `kubectl` and `helm` (the
//! pinned builds), and the kubeconfig they read.

use std::process::Command;

use super::ControlPlane;
use crate::Error;
use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::pki::CertPair;

impl ControlPlane {
    /// A new client for the admin user (`system:masters`). Make one per test: a client is
    /// bound to the tokio runtime it was first used on, and each `#[tokio::test]` has its own.
    ///
    /// # Errors
    /// [`Error::Kube`] if the kubeconfig cannot be read.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        self.client_with(true).await
    }

    /// [`Self::client`] without kube's default retry layer, which resends a request answered
    /// 429, 503 or 504 up to 15 times with a backoff of up to 1,000 s: for tests that must see
    /// such an answer (an eviction a PodDisruptionBudget refuses).
    ///
    /// # Errors
    /// As [`Self::client`].
    pub async fn client_without_retries(&self) -> Result<kube::Client, Error> {
        self.client_with(false).await
    }

    async fn client_with(&self, retries: bool) -> Result<kube::Client, Error> {
        let kc = Kubeconfig::read_from(&self.kubeconfig).map_err(|e| Error::Kube(Box::new(e.into())))?;
        let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kube(Box::new(e.into())))?;
        cfg.default_retry = retries;
        kube::Client::try_from(cfg).map_err(|e| Error::Kube(Box::new(e)))
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
}

/// The DER bytes of the first certificate of `pem`.
pub(super) fn pem_to_der(pem: &str) -> Vec<u8> {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).expect("our own PEM is valid base64")
}

/// A kubeconfig (JSON) for `server`, trusting `ca_pem`, as the user of `admin`'s certificate.
pub(super) fn kubeconfig_json(server: &str, ca_pem: &str, admin: &CertPair) -> String {
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
