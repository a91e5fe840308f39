//! The node's NetworkPolicy implementation, started only by the tests that check policies
//! ([`super::RealNode::enforce_network_policies`]): the controller of
//! sigs.k8s.io/kube-network-policies (`netpol`, tools/testbin/netpol), which queues the first
//! packet of every new connection to a pod of the node to user space and drops it unless the
//! NetworkPolicies allow it. Without it, as on most test clusters, policies are stored and
//! nothing enforces them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::process::Process;

use super::kubelet::NODE;

/// The nftables table (family `inet`) `netpol` keeps its rules in; removed when it stops,
/// and by [`super::cleanup()`] after a `netpol` that was killed.
pub const NFT_TABLE: &str = "qdr-test-netpol";

/// Starts `binary` as node [`NODE`]'s policy enforcer with the admin's `kubeconfig` (copied
/// under `dir`, so that [`super::cleanup()`] finds the process by its command line) and waits
/// until its table holds rules, which it writes once its caches of pods, namespaces and
/// policies are filled.
///
/// # Errors
/// [`Error::Io`] when it cannot be spawned; [`Error::Startup`] with its log when it exits or
/// has no table within [`crate::READY_TIMEOUT`].
pub(super) async fn start(binary: &Path, dir: &Path, kubeconfig: &Path) -> Result<Process, Error> {
    let own = dir.join("netpol.kubeconfig");
    std::fs::copy(kubeconfig, &own)
        .map_err(|e| Error::io(format!("copying {} to {}", kubeconfig.display(), own.display()), e))?;
    let mut cmd = Command::new(binary);
    cmd.arg(format!("-kubeconfig={}", own.display()))
        .arg(format!("-node={NODE}"))
        .arg(format!("-table={NFT_TABLE}"))
        .arg("-v=2");
    let process = Process::spawn("netpol", cmd, &dir.join("netpol.log"))?;
    let deadline = Instant::now() + crate::READY_TIMEOUT;
    loop {
        if let Some(s) = process.exited() {
            return Err(Error::Startup { what: format!("netpol exited ({s})"), logs: process.log_tail(40) });
        }
        if table_exists() {
            return Ok(process);
        }
        if Instant::now() > deadline {
            return Err(Error::Startup {
                what: format!("netpol wrote no nftables table {NFT_TABLE} within {:?}", crate::READY_TIMEOUT),
                logs: process.log_tail(40),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether table `inet` [`NFT_TABLE`] exists.
pub(super) fn table_exists() -> bool {
    Command::new("nft").args(["list", "table", "inet", NFT_TABLE]).output().is_ok_and(|o| o.status.success())
}

/// Deletes table `inet` [`NFT_TABLE`], if it is there.
pub(super) fn delete_table() {
    let _ = Command::new("nft").args(["delete", "table", "inet", NFT_TABLE]).output();
}
