//! kube-proxy on the node: Services' addresses to their pods (iptables mode), its start and
//! its health.

use std::path::Path;
use std::process::Command;

use crate::Error;
use crate::control_plane::{free_port, write};
use crate::process::Process;

use super::host::{GATEWAY, SUBNET};
use super::kubelet::NODE;

fn kube_proxy_config(kubeconfig: &Path, healthz: u16, metrics: u16) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig.display().to_string()},
        "mode": "iptables",
        "hostnameOverride": NODE,
        "clusterCIDR": SUBNET,
        "bindAddress": GATEWAY,
        "healthzBindAddress": format!("127.0.0.1:{healthz}"),
        "metricsBindAddress": format!("127.0.0.1:{metrics}"),
        "nodePortAddresses": [format!("{GATEWAY}/32")],
        // Leave the host's conntrack and route_localnet sysctls alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": false},
    }))
    .expect("JSON values serialize")
}

/// Starts kube-proxy `binary` with its configuration under `dir` (the admin's `kubeconfig`);
/// returns it and its health port.
///
/// # Errors
/// [`Error::Io`](crate::Error) when its files cannot be written or it cannot be spawned.
pub(super) fn start(binary: &Path, dir: &Path, kubeconfig: &Path) -> Result<(Process, u16), Error> {
    let (healthz, metrics) = (free_port()?, free_port()?);
    write(&dir.join("kube-proxy.yaml"), &kube_proxy_config(kubeconfig, healthz, metrics))?;
    let mut cmd = Command::new(binary);
    cmd.args([format!("--config={}", dir.join("kube-proxy.yaml").display()), "--v=1".into()]);
    Ok((Process::spawn("kube-proxy", cmd, &dir.join("kube-proxy.log"))?, healthz))
}

/// Whether kube-proxy's `/healthz` on `port` answers 200.
pub(super) fn healthy(port: u16) -> bool {
    crate::components::http_get(port, "/healthz").is_some_and(|(status, _)| status == 200)
}
