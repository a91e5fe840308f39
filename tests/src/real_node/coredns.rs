//! CoreDNS, the cluster DNS on [`GATEWAY`]: Service names under
//! [`CLUSTER_DOMAIN`] answered from the API server, nothing forwarded off the machine; its
//! start and readiness.

use std::path::Path;
use std::process::Command;

use crate::Error;
use crate::control_plane::{free_port, write};
use crate::process::Process;

use super::host::GATEWAY;

/// The cluster's DNS domain, served by CoreDNS on [`GATEWAY`].
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// CoreDNS's configuration: one server on [`GATEWAY`]:53 for [`CLUSTER_DOMAIN`] and the
/// reverse zones, answered by the kubernetes plugin from the API server (`kubeconfig`, the
/// admin's); `pods insecure` answers `a-b-c-d.<ns>.pod.cluster.local` as clusters commonly
/// do; TTL 5 s so a test sees a new Service at once. Its ready plugin listens on loopback
/// port `ready`.
fn corefile(kubeconfig: &Path, ready: u16) -> String {
    let kubeconfig = kubeconfig.display();
    format!(
        r"{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {GATEWAY}
    errors
    ready 127.0.0.1:{ready}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
    loadbalance
}}
"
    )
}

/// Starts CoreDNS `binary` with its Corefile under `dir` (the admin's `kubeconfig` for the
/// kubernetes plugin); returns it and the port of its ready plugin.
///
/// # Errors
/// [`Error::Io`](crate::Error) when its files cannot be written or it cannot be spawned.
pub(super) fn start(binary: &Path, dir: &Path, kubeconfig: &Path) -> Result<(Process, u16), Error> {
    let ready = free_port()?;
    write(&dir.join("Corefile"), &corefile(kubeconfig, ready))?;
    let mut cmd = Command::new(binary);
    cmd.arg("-conf").arg(dir.join("Corefile"));
    Ok((Process::spawn("coredns", cmd, &dir.join("coredns.log"))?, ready))
}

/// Whether CoreDNS's ready plugin on `port` answers 200 (once the kubernetes plugin synced).
pub(super) fn ready(port: u16) -> bool {
    crate::components::http_get(port, "/ready").is_some_and(|(status, _)| status == 200)
}
