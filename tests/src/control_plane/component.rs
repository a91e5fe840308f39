//! kube-controller-manager and kube-scheduler: a kube-* component on a free port with a
//! serving certificate of the control plane's CA, and the wait for its `/healthz`.

use std::process::Command;
use std::time::{Duration, Instant};

use super::clients::pem_to_der;
use super::{ControlPlane, READY_TIMEOUT, free_port, write};
use crate::Error;
use crate::process::Process;

impl ControlPlane {
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

    /// Spawns a kube-* component with a serving certificate of ours on a free port, the
    /// admin kubeconfig, no leader election and `extra` flags, and waits for its `/healthz`.
    pub(super) async fn start_component(&self, name: &str, extra: Vec<String>) -> Result<Process, Error> {
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
}
