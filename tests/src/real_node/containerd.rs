//! containerd, the node's container runtime: its configuration (runc, the CNI bridge
//! network on [`BRIDGE`], registry hosts read from a directory), its start, and image
//! imports into the namespace the kubelet uses.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::control_plane::write;
use crate::process::Process;

use super::host::{BRIDGE, CNI_NETWORK, GATEWAY, SUBNET, run};

pub(super) fn import(socket: &Path, archive: &Path) -> Result<(), Error> {
    run(Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(archive))
    .map(|_| ())
}

fn cni_config(ipam_dir: &str) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [{
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": true,
            // No masquerading: pod traffic is not meant to leave (and leaves no NAT chain).
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": ipam_dir,
            },
        }],
    }))
    .expect("JSON values serialize")
}

fn containerd_config(dir: &Path) -> String {
    let d = |p: &str| dir.join(p).display().to_string();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{hosts}"
"#,
        root = d("containerd/root"),
        state = d("containerd/state"),
        socket = d("containerd.sock"),
        opt = d("containerd/opt"),
        pause = crate::images::PAUSE_IMAGE,
        runc = d("containerd/runc"),
        cni = d("cni/net.d"),
        hosts = d(HOSTS_DIR),
    )
}

/// containerd's registry hosts directory under the node's directory (`<host>/hosts.toml`
/// per registry, read at each pull).
const HOSTS_DIR: &str = "containerd/certs.d";

/// Lets the node pull from registry `host` (`127.0.0.1:5000`) over plain HTTP: a
/// `hosts.toml` for it in [`HOSTS_DIR`], which containerd reads at the next pull.
pub(super) fn plain_http_registry(dir: &Path, host: &str) -> Result<(), Error> {
    let hosts = format!(
        "server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    );
    write(&dir.join(HOSTS_DIR).join(host).join("hosts.toml"), &hosts)
}

/// Starts containerd with its own configuration, root, state and socket under `dir` (the
/// CNI configuration beside them) and waits until it answers on `socket` (30 s).
///
/// # Errors
/// [`Error::Startup`] with its log when it exits or does not answer.
pub(super) async fn start(dir: &Path, socket: &Path) -> Result<Process, Error> {
    let d = |p: &str| dir.join(p).display().to_string();
    write(&dir.join("cni/net.d/10-qdr-real-node.conflist"), &cni_config(&d("cni/ipam")))?;
    write(&dir.join("containerd.toml"), &containerd_config(dir))?;
    let mut cmd = Command::new("containerd");
    cmd.arg("--config").arg(dir.join("containerd.toml"));
    let containerd = Process::spawn("containerd", cmd, &dir.join("containerd.log"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while run(Command::new("ctr").arg("--address").arg(socket).args(["--namespace", "k8s.io", "version"]))
        .is_err()
    {
        if let Some(s) = containerd.exited() {
            return Err(Error::Startup {
                what: format!("containerd exited ({s})"),
                logs: containerd.log_tail(40),
            });
        }
        if Instant::now() > deadline {
            return Err(Error::Startup {
                what: "containerd did not answer".into(),
                logs: containerd.log_tail(40),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(containerd)
}
