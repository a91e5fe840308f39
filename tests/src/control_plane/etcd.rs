//! etcd, the control plane's store: its start on free loopback ports (no fsync: test data),
//! its health, and its restart.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{ControlPlane, free_port};
use crate::Error;
use crate::process::Process;
use crate::testbin::Testbin;

/// Starts etcd with its data in `<dir>/etcd`, on two free loopback ports, and waits until it
/// is healthy; returns it and its client port.
///
/// # Errors
/// [`Error::Startup`] with its log when it exits or is not healthy within 30 s.
pub(super) async fn start(testbin: &Testbin, dir: &Path) -> Result<(Process, u16), Error> {
    let (client_port, peer_port) = (free_port()?, free_port()?);
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
    Ok((etcd, client_port))
}

/// Waits until `etcd` answers healthy on `port` (30 s).
pub(super) async fn wait_etcd(etcd: &Process, port: u16) -> Result<(), Error> {
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

impl ControlPlane {
    /// Restarts etcd (SIGTERM, 5 s, SIGKILL; same data directory and ports) and waits until
    /// it and kube-apiserver answer again.
    ///
    /// # Errors
    /// [`Error::Startup`] when either does not come back within [`READY_TIMEOUT`](super::READY_TIMEOUT).
    pub async fn restart_etcd(&self) -> Result<(), Error> {
        self.etcd.restart(Duration::from_secs(5))?;
        wait_etcd(&self.etcd, self.etcd_client_port).await?;
        self.wait_ready().await
    }
}
