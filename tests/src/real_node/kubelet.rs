//! The kubelet of [`NODE`]: its configuration (cgroups under [`CGROUP_ROOT`], CoreDNS as the
//! cluster DNS, the taint [`TAINT`]), its start, and the pod that checks it runs containers.

use std::path::Path;
use std::process::Command;

use crate::Error;
use crate::control_plane::{free_port, write};
use crate::process::Process;

use super::coredns::CLUSTER_DOMAIN;
use super::host::{CGROUP_ROOT, GATEWAY};

/// The real node's name.
pub const NODE: &str = "real-0";

/// The taint [`NODE`] registers with (`key=value:NoSchedule`).
pub const TAINT: (&str, &str, &str) = ("qdr-operator.test/real-node", "true", "NoSchedule");

/// The kubelet's port on [`GATEWAY`].
pub const KUBELET_PORT: u16 = 10250;

/// A pod (label `app: <name>`) that runs [`crate::images::PAUSE_IMAGE`] on [`NODE`] (toleration and node
/// selector) under Pod Security "restricted": non-root user 65535, no capabilities, no
/// privilege escalation, RuntimeDefault seccomp, read-only root filesystem.
pub fn pause_pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [{"key": TAINT.0, "operator": "Exists", "effect": TAINT.2}],
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "pause",
                "image": crate::images::PAUSE_IMAGE,
                "imagePullPolicy": "Never",
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))
    .expect("a valid Pod")
}

fn kubelet_config(dir: &Path, ca_file: &Path, healthz: u16) -> String {
    let d = |p: &str| dir.join(p).display().to_string();
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": GATEWAY,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        // The API server calls it for logs, exec and port-forward: anonymous, on the bridge
        // address only.
        "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false},
                           "x509": {"clientCAFile": ca_file.display().to_string()}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": CGROUP_ROOT,
        "failSwapOn": false,
        "containerRuntimeEndpoint": format!("unix://{}", d("containerd.sock")),
        "registerWithTaints": [{"key": TAINT.0, "value": TAINT.1, "effect": TAINT.2}],
        // Absolute floors, not shares: the node's file system is the host's, shared with the
        // builds beside it, and a share of a large disk (1 % of 252 GB is 2.5 GB) let a
        // build filling it make the kubelet evict every router of a running test.
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "512Mi", "imagefs.available": "512Mi",
                         "nodefs.inodesFree": "1%"},
        // 100 turns image garbage collection off: the imported images cannot be pulled again.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "podLogsDir": d("pod-logs"),
        "staticPodPath": d("manifests"),
        "volumePluginDir": d("volume-plugins"),
        "resolvConf": "",
        "clusterDNS": [GATEWAY],
        "clusterDomain": CLUSTER_DOMAIN,
        "makeIPTablesUtilChains": false,
        "serializeImagePulls": false,
        "nodeStatusUpdateFrequency": "2s",
        "nodeStatusReportFrequency": "10s",
    }))
    .expect("JSON values serialize")
}

/// Starts the kubelet `binary` as [`NODE`] with its configuration, root and certificates
/// under `dir`, registering with `node_kubeconfig` and trusting `ca_file` for clients.
///
/// # Errors
/// [`Error::Io`](crate::Error) when its files cannot be written or it cannot be spawned.
pub(super) fn start(
    binary: &Path,
    dir: &Path,
    ca_file: &Path,
    node_kubeconfig: &Path,
) -> Result<Process, Error> {
    let d = |p: &str| dir.join(p).display().to_string();
    write(&dir.join("kubelet.yaml"), &kubelet_config(dir, ca_file, free_port()?))?;
    let mut cmd = Command::new(binary);
    cmd.args([
        format!("--config={}", d("kubelet.yaml")),
        format!("--kubeconfig={}", node_kubeconfig.display()),
        format!("--root-dir={}", d("kubelet")),
        format!("--cert-dir={}", d("kubelet/pki")),
        format!("--hostname-override={NODE}"),
        format!("--node-ip={GATEWAY}"),
        format!("--node-labels=type=real,{}", "kubernetes.io/os=linux"),
        "--v=1".into(),
    ]);
    Process::spawn("kubelet", cmd, &dir.join("kubelet.log"))
}
