//! kube-apiserver: its flags (RBAC, service accounts, the audit log, the webhook client
//! certificate of an AdmissionConfiguration), its start and restart, and the wait until it
//! is ready. Writing the certificates it serves is [`super::ControlPlane::start`]'s.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

use super::audit::AUDIT_POLICY;
use super::{ControlPlane, READY_TIMEOUT, write};
use crate::Error;
use crate::pki::Pki;
use crate::process::Process;
use crate::testbin::Testbin;

/// How kube-apiserver is started.
pub(super) struct Flags {
    /// The address it listens on and advertises (loopback, or the real node's gateway).
    pub(super) address: &'static str,
    /// Its secure port.
    pub(super) port: u16,
    /// etcd's client URL.
    pub(super) etcd: String,
    /// Whether a real node runs: Service `kubernetes` gets an endpoint (the lease reconciler)
    /// and the ServiceAccount admission plugin gives pods their tokens.
    pub(super) real_node: bool,
    /// [`Options::webhook_client_cert`](super::Options::webhook_client_cert).
    pub(super) webhook_client_cert: bool,
    /// [`Options::audit`](super::Options::audit).
    pub(super) audit: bool,
}

/// The admission plugin OpenShift enables by default (upstream, off by default there): a
/// change of an object's `ownerReferences` needs `delete` on that object, and setting
/// `blockOwnerDeletion` needs `update` on the owner's `finalizers`. On in every test control
/// plane, so the controller's RBAC is tested as OpenShift enforces it.
const OWNER_REFERENCES: &str = "OwnerReferencesPermissionEnforcement";

/// Spawns kube-apiserver with the certificates in `<dir>/pki` (written by the caller) and
/// `flags`; waiting for it to be ready is [`ControlPlane::wait_ready`]'s.
///
/// # Errors
/// [`Error::Io`](crate::Error) or [`Error::Pki`](crate::Error) when its files cannot be
/// written, or it cannot be spawned.
pub(super) fn start(testbin: &Testbin, dir: &Path, pki: &Pki, flags: &Flags) -> Result<Process, Error> {
    let pki_dir = dir.join("pki");
    let mut api_cmd = Command::new(testbin.path("kube-apiserver"));
    let p = |f: &str| pki_dir.join(f).display().to_string();
    api_cmd.args([
        format!("--etcd-servers={}", flags.etcd),
        format!("--bind-address={}", flags.address),
        format!("--advertise-address={}", flags.address),
        format!("--secure-port={}", flags.port),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
        "--authorization-mode=RBAC".into(),
        format!("--service-account-issuer=https://{}:{}/", flags.address, flags.port),
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
    if flags.real_node {
        api_cmd.args([
            "--endpoint-reconciler-type=lease".into(),
            "--kubelet-preferred-address-types=InternalIP".into(),
            format!("--enable-admission-plugins=ServiceAccount,{OWNER_REFERENCES}"),
        ]);
    } else {
        api_cmd.args([
            "--endpoint-reconciler-type=none".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            format!("--enable-admission-plugins={OWNER_REFERENCES}"),
        ]);
    }
    if flags.webhook_client_cert {
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
    if flags.audit {
        write(&dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        api_cmd.args([
            format!("--audit-policy-file={}", dir.join("audit-policy.yaml").display()),
            format!("--audit-log-path={}", dir.join("audit.log").display()),
            "--audit-log-format=json".into(),
            "--audit-log-maxsize=0".into(),
        ]);
    }
    Process::spawn("kube-apiserver", api_cmd, &dir.join("kube-apiserver.log"))
}

/// The AdmissionConfiguration of [`Options::webhook_client_cert`](super::Options::webhook_client_cert): both webhook admission
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

impl ControlPlane {
    /// Waits until kube-apiserver's `/readyz` is ok and namespace `default` exists.
    pub(super) async fn wait_ready(&self) -> Result<(), Error> {
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

    /// A startup error about `what`, with the tail of every log.
    pub(super) fn startup_error(&self, what: String) -> Error {
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

    /// Process ids of kube-apiserver and etcd (for CPU and memory figures).
    pub fn server_pids(&self) -> [u32; 2] {
        [self.apiserver.pid(), self.etcd.pid()]
    }
}
