//! The node's NetworkPolicy implementation, started only by the tests that check policies
//! ([`super::RealNode::enforce_network_policies`]): the controller of
//! sigs.k8s.io/kube-network-policies (`netpol`, tools/testbin/netpol), which judges the first
//! packet of every new connection to or from a pod of the node against the NetworkPolicies
//! and drops it unless they allow it. Without it, as on most test clusters, policies are
//! stored and nothing enforces them.
//!
//! kube-network-policies queues those packets to user space with nftables' `queue`
//! expression, which this machine's kernel lacks (`CONFIG_NFT_QUEUE` unset; its nftables
//! table is refused, and it logs so). Its judge listens on the queue all the same, so the
//! packets are queued here with iptables' `NFQUEUE` target instead, as its nftables rules
//! would: chain [`CHAIN`] in the `mangle` table's `POSTROUTING` (bridged pod-to-pod packets
//! pass it too), skipping established connections, DNS and the host's root processes (the
//! kubelet's probes, the API server), queueing what comes from or goes to [`SUBNET`].

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::process::Process;

use super::host::SUBNET;
use super::kubelet::NODE;

/// The nftables table (family `inet`) `netpol` would keep its rules in (it tries, and the
/// kernel refuses it); removed by [`super::cleanup()`] should a kernel take it.
pub const NFT_TABLE: &str = "qdr-test-netpol";

/// The `mangle` chain that queues new connections of the node's pods to `netpol`; removed
/// when the node stops ([`super::cleanup()`]).
pub const CHAIN: &str = "QDR-NETPOL";

/// The queue `netpol` judges packets from (its `nfqueue-id`).
const QUEUE: &str = "100";

/// Starts `binary` as node [`NODE`]'s policy enforcer with the admin's `kubeconfig` (copied
/// under `dir`, so that [`super::cleanup()`] finds the process by its command line), waits
/// until it listens on its queue (it does once its caches of pods, namespaces and policies
/// are filled), then queues the pods' new connections to it ([`CHAIN`]).
///
/// # Errors
/// [`Error::Io`] when it cannot be spawned; [`Error::Startup`] with its log when it exits or
/// does not listen within [`crate::READY_TIMEOUT`], or with iptables' output when a rule is
/// refused.
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
        if listening() {
            queue_rules()?;
            return Ok(process);
        }
        if Instant::now() > deadline {
            return Err(Error::Startup {
                what: format!("netpol did not listen on queue {QUEUE} within {:?}", crate::READY_TIMEOUT),
                logs: process.log_tail(40),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether a process listens on queue [`QUEUE`] (`/proc/net/netfilter/nfnetlink_queue`: one
/// line per bound queue, its number first).
fn listening() -> bool {
    std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue")
        .is_ok_and(|t| t.lines().any(|l| l.split_whitespace().next() == Some(QUEUE)))
}

/// `iptables -t mangle <args>`.
fn mangle(args: &[&str]) -> std::io::Result<std::process::Output> {
    Command::new("iptables").args(["-w", "-t", "mangle"]).args(args).output()
}

/// Creates [`CHAIN`] and jumps to it from `POSTROUTING`: new connections from or to
/// [`SUBNET`] are queued to [`QUEUE`] (with `--queue-bypass`: accepted while nobody
/// listens), but DNS and the host's root processes.
fn queue_rules() -> Result<(), Error> {
    let rules: [&[&str]; 6] = [
        &["-N", CHAIN],
        &["-A", CHAIN, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"],
        &["-A", CHAIN, "-p", "udp", "--dport", "53", "-j", "RETURN"],
        &["-A", CHAIN, "-m", "owner", "--uid-owner", "0", "-j", "RETURN"],
        &["-A", CHAIN, "-s", SUBNET, "-j", "NFQUEUE", "--queue-num", QUEUE, "--queue-bypass"],
        &["-A", CHAIN, "-d", SUBNET, "-j", "NFQUEUE", "--queue-num", QUEUE, "--queue-bypass"],
    ];
    for rule in rules.iter().chain([&["-A", "POSTROUTING", "-j", CHAIN][..]].iter()) {
        let out = mangle(rule).map_err(|e| Error::io("running iptables", e))?;
        if !out.status.success() {
            return Err(Error::Startup {
                what: format!("iptables -t mangle {}", rule.join(" ")),
                logs: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
    }
    Ok(())
}

/// Whether [`CHAIN`] exists.
pub(super) fn chain_exists() -> bool {
    mangle(&["-S", CHAIN]).is_ok_and(|o| o.status.success())
}

/// Whether table `inet` [`NFT_TABLE`] exists.
pub(super) fn table_exists() -> bool {
    Command::new("nft").args(["list", "table", "inet", NFT_TABLE]).output().is_ok_and(|o| o.status.success())
}

/// Removes [`CHAIN`] and the jump to it, and table `inet` [`NFT_TABLE`], whatever of them is
/// there.
pub(super) fn remove_rules() {
    while mangle(&["-D", "POSTROUTING", "-j", CHAIN]).is_ok_and(|o| o.status.success()) {}
    let _ = mangle(&["-F", CHAIN]);
    let _ = mangle(&["-X", CHAIN]);
    let _ = Command::new("nft").args(["delete", "table", "inet", NFT_TABLE]).output();
}
