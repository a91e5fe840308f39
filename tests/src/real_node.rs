//! A real node for the test control plane: containerd (with runc and the CNI bridge plugin,
//! all Debian's), the pinned kubelet as node [`NODE`], and kube-proxy, so pods actually run.
//!
//! The node shares the machine with everything else, so it keeps to itself:
//! - containerd, the kubelet and their state (images, snapshots, pod volumes, logs, network
//!   namespaces, runc state) live under `<control plane dir>/real-node`; the kubelet's
//!   cgroups under [`CGROUP_ROOT`].
//! - Pods get addresses on the bridge [`BRIDGE`] ([`SUBNET`], the host is [`GATEWAY`]); one
//!   `FORWARD` rule drops whatever they send off the bridge, so pod traffic cannot leave the
//!   machine. The API server listens on [`GATEWAY`] (nothing on the outside interface), and
//!   pods reach it through Service `kubernetes`.
//! - CoreDNS (the kubernetes plugin, admin credentials) answers on [`GATEWAY`] port 53 for
//!   [`CLUSTER_DOMAIN`], and the kubelet names it as the cluster DNS: pods find Services by
//!   name (`<svc>`, `<svc>.<ns>.svc.cluster.local`) as in any cluster. Other names are
//!   refused (nothing is forwarded off the machine).
//! - [`NODE`] carries the taint [`TAINT`]: only pods that tolerate it land there; routers
//!   stay on the simulated nodes.
//!
//! What it changes on the host (the bridge, iptables chains and rules, cgroups, mounts,
//! network namespaces, sysctls, files outside its directory) is undone by [`cleanup`]: when
//! the control plane stops, at process exit (also after a panic), and, for a process that was
//! SIGKILLed, by the next real node's start, from the record [`RECORD`] kept beside the lock
//! [`LOCK`]. Only one real node runs on a machine at a time (iptables and the bridge are
//! shared by the whole host); a second start waits for the lock.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::control_plane::{free_port, node_ready, write};
use crate::process::Process;
use crate::testbin::Testbin;

/// The real node's name.
pub const NODE: &str = "real-0";
/// The taint [`NODE`] registers with (`key=value:NoSchedule`).
pub const TAINT: (&str, &str, &str) = ("qdr-operator.test/real-node", "true", "NoSchedule");
/// The Linux bridge pods are attached to.
pub const BRIDGE: &str = "qdr-real0";
/// Pod addresses on [`NODE`].
pub const SUBNET: &str = "10.88.0.0/24";
/// The host's address on [`BRIDGE`]: the node's InternalIP, where the kubelet and (with a real
/// node) the API server listen.
pub const GATEWAY: &str = "10.88.0.1";
/// The cluster's DNS domain, served by CoreDNS on [`GATEWAY`].
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The kubelet's cgroup root, in every cgroup hierarchy.
pub const CGROUP_ROOT: &str = "/qdr-real-node";
/// The CNI network name (also the prefix of its cached results in `/var/lib/cni/results`).
pub const CNI_NETWORK: &str = "qdr-real-node";
/// Held (flock) while a real node runs.
pub const LOCK: &str = "/run/qdr-operator-real-node.lock";
/// What the running real node changed, for [`cleanup`] by whoever comes next.
pub const RECORD: &str = "/run/qdr-operator-real-node.json";
/// The kubelet's port on [`GATEWAY`].
pub const KUBELET_PORT: u16 = 10250;

/// Sysctls the kubelet, kube-proxy or the bridge plugin may set; their values are saved
/// before the node starts and written back by [`cleanup`].
pub const SYSCTLS: [&str; 10] = [
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// The `FORWARD` rule that keeps pod traffic on the machine (iptables arguments after the chain).
pub const FORWARD_DROP: [&str; 6] = ["-i", BRIDGE, "!", "-o", BRIDGE, "-j"];

/// What a real node changed on the host, written to [`RECORD`] before the first change.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The process that started the node.
    pub owner: u32,
    /// `<control plane dir>/real-node`.
    pub dir: PathBuf,
    /// `(sysctl, value before)` for each of [`SYSCTLS`] that exists.
    pub sysctls: Vec<(String, String)>,
    /// Which of [`HOST_DIRS`] did not exist before the node started (removed again when
    /// empty).
    pub new_dirs: Vec<PathBuf>,
}

/// Directories outside its own that the node's parts create when missing: the kubelet's
/// `/var/log/containers`, libcni's result cache, the shims' socket directory.
pub const HOST_DIRS: [&str; 5] =
    ["/var/log/containers", "/var/lib/cni/results", "/var/lib/cni", "/run/containerd/s", "/run/containerd"];

impl Record {
    /// containerd's socket, `<dir>/containerd.sock`.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
}

/// The host side prepared before the API server starts: the lock, the record, the bridge with
/// [`GATEWAY`] and the `FORWARD` rule.
#[derive(Debug)]
pub struct Host {
    _lock: std::fs::File,
    record: Record,
    cleaned: std::sync::atomic::AtomicBool,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// The running node's processes.
#[derive(Debug)]
pub struct RealNode {
    host: Host,
    containerd: Process,
    kubelet: Process,
    kube_proxy: Process,
    coredns: Process,
    /// From spawning containerd until the Node reported Ready.
    pub startup: Duration,
}

fn run(cmd: &mut Command) -> Result<String, Error> {
    let out = cmd.output().map_err(|e| Error::io(format!("running {cmd:?}"), e))?;
    if !out.status.success() {
        return Err(Error::Startup {
            what: format!("{cmd:?} failed ({})", out.status),
            logs: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether what a real node needs is installed (containerd, runc, the CNI bridge plugin,
/// iptables, conntrack, ip, ctr) and we are root; `Err` names what is missing and how to
/// install it.
///
/// # Errors
/// [`Error::MissingBinary`] for the first missing part.
pub fn check_host() -> Result<(), Error> {
    const HINT: &str =
        "apt-get install containerd runc containernetworking-plugins iptables conntrack (as root)";
    for (name, path) in [
        ("containerd", None),
        ("ctr", None),
        ("runc", None),
        ("iptables", None),
        ("conntrack", None),
        ("ip", None),
        ("bridge plugin", Some("/usr/lib/cni/bridge")),
        ("host-local plugin", Some("/usr/lib/cni/host-local")),
        ("loopback plugin", Some("/usr/lib/cni/loopback")),
    ] {
        let found = match path {
            Some(p) => Path::new(p).is_file(),
            None => which(name).is_some(),
        };
        if !found {
            return Err(Error::MissingBinary { path: PathBuf::from(path.unwrap_or(name)), hint: HINT });
        }
    }
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(1) != 0 {
        return Err(Error::MissingBinary { path: "root".into(), hint: "run as root: a real node needs it" });
    }
    Ok(())
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Host {
    /// Takes the machine's real-node lock (waiting up to `wait` for another real node to
    /// stop), cleans up after a previous owner that died, writes the record, saves
    /// [`SYSCTLS`], creates [`BRIDGE`] with [`GATEWAY`] and inserts the `FORWARD` rule.
    /// Everything is undone by [`cleanup`] (at exit too).
    ///
    /// # Errors
    /// [`Error::MissingBinary`] from [`check_host`]; [`Error::Startup`] when the lock is
    /// still held after `wait` or a host command fails (what was changed is undone first).
    pub fn prepare(cp_dir: &Path, wait: Duration) -> Result<Host, Error> {
        check_host()?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK)
            .map_err(|e| Error::io(format!("opening {LOCK}"), e))?;
        let deadline = Instant::now() + wait;
        let mut told = false;
        while lock.try_lock().is_err() {
            if !told {
                let holder =
                    current().map(|r| format!("pid {} ({})", r.owner, r.dir.display())).unwrap_or_default();
                eprintln!("qdr-tests: waiting up to {wait:?} for the real node of {holder} to stop ({LOCK})");
                told = true;
            }
            if Instant::now() > deadline {
                let holder = std::fs::read_to_string(RECORD).unwrap_or_default();
                return Err(Error::Startup {
                    what: format!("another real node holds {LOCK} after {wait:?}"),
                    logs: holder,
                });
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        // We hold the lock: a record left now belongs to a process that died.
        if let Some(stale) = current() {
            eprintln!(
                "qdr-tests: cleaning up after real node of pid {} ({})",
                stale.owner,
                stale.dir.display()
            );
            cleanup(&stale);
            // Its containers' files too (nothing is mounted there any more); the owner's own
            // files around it are left as they are.
            let _ = std::fs::remove_dir_all(&stale.dir);
        }
        let dir = cp_dir.join("real-node");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let sysctls = SYSCTLS
            .iter()
            .filter_map(|s| {
                let v = std::fs::read_to_string(Path::new("/proc/sys").join(s)).ok()?;
                Some((s.to_string(), v.trim().to_string()))
            })
            .collect();
        let new_dirs = HOST_DIRS.iter().map(PathBuf::from).filter(|d| !d.exists()).collect();
        let record = Record { owner: std::process::id(), dir, sysctls, new_dirs };
        write(Path::new(RECORD), &serde_json::to_string_pretty(&record).expect("a record serializes"))?;
        let host = Host { _lock: lock, record, cleaned: Default::default() };
        let at_exit = host.record.clone();
        // At exit only if this node is still the current one (a node stopped before has
        // removed its record; cleaning after it again would hit a later node's bridge).
        crate::process::at_exit(Box::new(move || {
            if current().is_some_and(|r| r.dir == at_exit.dir) {
                cleanup(&at_exit);
            }
        }));
        let ip = || {
            let mut c = Command::new("ip");
            c.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
            c
        };
        let prepared = (|| {
            run(ip().args(["link", "add", BRIDGE, "type", "bridge"]))?;
            run(ip().args(["addr", "add", &format!("{GATEWAY}/24"), "dev", BRIDGE]))?;
            run(ip().args(["link", "set", BRIDGE, "up"]))?;
            run(Command::new("iptables").args(["-I", "FORWARD"]).args(FORWARD_DROP).arg("DROP"))?;
            Ok(())
        })();
        // On error `host` is dropped, which cleans up.
        prepared.map(|()| host)
    }

    /// [`cleanup`] of this node's record, once (later calls return at once). Dropping the
    /// host does it too.
    pub fn cleanup(&self) {
        if !self.cleaned.swap(true, std::sync::atomic::Ordering::SeqCst) {
            cleanup(&self.record);
        }
    }

    /// The record of what this node changes.
    pub fn record(&self) -> &Record {
        &self.record
    }
}

impl RealNode {
    /// Starts containerd (own config, root, state and socket under the record's directory),
    /// imports the pause image, starts the kubelet as [`NODE`] and kube-proxy, and waits
    /// until the Node is Ready.
    ///
    /// `kubeconfig` is the admin's (kube-proxy's identity); `node_kubeconfig` the kubelet's.
    ///
    /// # Errors
    /// [`Error::Startup`] with the logs when a part exits or the Node is not Ready within
    /// [`crate::READY_TIMEOUT`].
    pub async fn start(
        host: Host,
        testbin: &Testbin,
        ca_file: &Path,
        kubeconfig: &Path,
        node_kubeconfig: &Path,
        client: kube::Client,
    ) -> Result<RealNode, Error> {
        let began = Instant::now();
        // The `node` group of the test binaries is built after the control plane's.
        let [pause, kubelet, kube_proxy, coredns] =
            ["pause", "kubelet", "kube-proxy", "coredns"].map(|b| testbin.require(b));
        let (pause, kubelet, kube_proxy, coredns) = (pause?, kubelet?, kube_proxy?, coredns?);
        let dir = host.record.dir.clone();
        let d = |p: &str| dir.join(p).display().to_string();
        write(&dir.join("cni/net.d/10-qdr-real-node.conflist"), &cni_config(&d("cni/ipam")))?;
        write(&dir.join("containerd.toml"), &containerd_config(&dir))?;
        let mut cmd = Command::new("containerd");
        cmd.arg("--config").arg(dir.join("containerd.toml"));
        let containerd = Process::spawn("containerd", cmd, &dir.join("containerd.log"))?;
        let ctr = || {
            let mut c = Command::new("ctr");
            c.arg("--address").arg(host.record.socket()).args(["--namespace", "k8s.io"]);
            c
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while run(ctr().arg("version")).is_err() {
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
        let pause_archive = dir.join("pause.oci.tar");
        crate::images::write_archive(&crate::images::pause_image(&pause), &pause_archive)?;
        import(&host.record.socket(), &pause_archive)?;

        create_cgroup_root()?;
        let (healthz, proxy_healthz, proxy_metrics) = (free_port()?, free_port()?, free_port()?);
        write(&dir.join("kubelet.yaml"), &kubelet_config(&dir, ca_file, healthz))?;
        let mut cmd = Command::new(kubelet);
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
        let kubelet = Process::spawn("kubelet", cmd, &dir.join("kubelet.log"))?;

        write(&dir.join("kube-proxy.yaml"), &kube_proxy_config(kubeconfig, proxy_healthz, proxy_metrics))?;
        let mut cmd = Command::new(kube_proxy);
        cmd.args([format!("--config={}", d("kube-proxy.yaml")), "--v=1".into()]);
        let kube_proxy = Process::spawn("kube-proxy", cmd, &dir.join("kube-proxy.log"))?;

        let dns_ready = free_port()?;
        write(&dir.join("Corefile"), &corefile(kubeconfig, dns_ready))?;
        let mut cmd = Command::new(coredns);
        cmd.arg("-conf").arg(dir.join("Corefile"));
        let coredns = Process::spawn("coredns", cmd, &dir.join("coredns.log"))?;

        let node = RealNode { host, containerd, kubelet, kube_proxy, coredns, startup: Duration::ZERO };
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        let deadline = Instant::now() + crate::READY_TIMEOUT;
        loop {
            for p in [&node.containerd, &node.kubelet, &node.kube_proxy, &node.coredns] {
                if let Some(s) = p.exited() {
                    return Err(Error::Startup {
                        what: format!("{} exited ({s})", p.name()),
                        logs: node.logs_tail(40),
                    });
                }
            }
            let proxy_healthy = crate::components::http_get(proxy_healthz, "/healthz")
                .is_some_and(|(status, _)| status == 200);
            // CoreDNS's ready plugin answers 200 once the kubernetes plugin has synced.
            let dns_ready =
                crate::components::http_get(dns_ready, "/ready").is_some_and(|(status, _)| status == 200);
            if node_ready(&nodes, NODE).await && proxy_healthy && dns_ready {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Startup {
                    what: format!(
                        "node {NODE} not Ready (or kube-proxy unhealthy, or CoreDNS not ready) after {:?}",
                        crate::READY_TIMEOUT
                    ),
                    logs: node.logs_tail(40),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(RealNode { startup: began.elapsed(), ..node })
    }

    /// Imports an OCI image archive into the node's containerd (namespace `k8s.io`, which
    /// the kubelet sees); pods then use it with `imagePullPolicy: Never` or `IfNotPresent`.
    ///
    /// # Errors
    /// [`Error::Startup`] with ctr's output when the import fails.
    pub fn import(&self, archive: &Path) -> Result<(), Error> {
        import(&self.host.record.socket(), archive)
    }

    /// The last `lines` lines of containerd's, the kubelet's, kube-proxy's and CoreDNS's logs.
    pub fn logs_tail(&self, lines: usize) -> String {
        [&self.containerd, &self.kubelet, &self.kube_proxy, &self.coredns]
            .iter()
            .map(|p| {
                format!("----- {} ({}) -----\n{}\n", p.name(), p.log_path().display(), p.log_tail(lines))
            })
            .collect()
    }

    /// The record of what this node changed on the host.
    pub fn record(&self) -> &Record {
        &self.host.record
    }

    /// Stops CoreDNS, kube-proxy, the kubelet and containerd, then [`cleanup`]: nothing of
    /// the node is left on the host afterwards. Later calls do nothing.
    pub fn stop(&self) {
        self.coredns.stop(Duration::from_secs(5));
        self.kube_proxy.stop(Duration::from_secs(5));
        self.kubelet.stop(Duration::from_secs(5));
        self.containerd.stop(Duration::from_secs(5));
        self.host.cleanup();
    }
}

/// Creates [`CGROUP_ROOT`] in every cgroup v1 hierarchy (the kubelet requires it in each),
/// with the root's CPUs and memory nodes in the cpuset one.
/// On a machine with only cgroup v2 (`/sys/fs/cgroup` is the unified hierarchy), creates it
/// there instead.
fn create_cgroup_root() -> Result<(), Error> {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let root = Path::new("/sys/fs/cgroup").join(CGROUP_ROOT.trim_start_matches('/'));
        return std::fs::create_dir_all(&root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e));
    }
    for h in
        std::fs::read_dir("/sys/fs/cgroup").map_err(|e| Error::io("listing /sys/fs/cgroup", e))?.flatten()
    {
        if h.file_name() == "unified" || !h.path().join("cgroup.procs").exists() {
            continue;
        }
        let root = h.path().join(CGROUP_ROOT.trim_start_matches('/'));
        std::fs::create_dir_all(&root).map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        for f in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = std::fs::read_to_string(h.path().join(f)) {
                std::fs::write(root.join(f), v.trim())
                    .map_err(|e| Error::io(format!("writing {}", root.join(f).display()), e))?;
            }
        }
    }
    Ok(())
}

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

fn import(socket: &Path, archive: &Path) -> Result<(), Error> {
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
"#,
        root = d("containerd/root"),
        state = d("containerd/state"),
        socket = d("containerd.sock"),
        opt = d("containerd/opt"),
        pause = crate::images::PAUSE_IMAGE,
        runc = d("containerd/runc"),
        cni = d("cni/net.d"),
    )
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
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
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

/// Undoes everything a real node with `record` changed on the host, whatever state it is in
/// (running, stopped, or left by a process that died); each step ignores what is already
/// gone:
/// 1. kills the containers (every process in a cgroup under [`CGROUP_ROOT`]) and the
///    containerd shims and any process started from the node's directory;
/// 2. unmounts everything under the node's directory (container root filesystems, pod
///    volumes, network namespaces, shm), deepest first;
/// 3. removes the cgroups under [`CGROUP_ROOT`] in every hierarchy;
/// 4. removes the rules that jump to `KUBE-*`/`CNI-*` chains and those chains (iptables and
///    ip6tables, tables filter, nat, mangle, raw), and the `FORWARD` rule;
/// 5. deletes [`BRIDGE`], writes the saved sysctls back, removes the kubelet's links in
///    `/var/log/containers`, the network's cached CNI results, the shims' sockets, and
///    [`RECORD`].
pub fn cleanup(record: &Record) {
    let dir = record.dir.display().to_string();
    let shim_sockets = shim_sockets(record);
    let sandboxes = container_ids(record);
    for _ in 0..50 {
        let mut killed = 0;
        for pid in cgroup_pids().into_iter().chain(processes_of(record)) {
            crate::process::kill(pid);
            killed += 1;
        }
        if killed == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut mounts = mounts_under(&dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = Command::new("umount").args(["-l", &m]).output();
    }
    for d in cgroup_dirs() {
        let _ = std::fs::remove_dir(d);
    }
    for bin in ["iptables", "ip6tables"] {
        iptables_cleanup(bin);
    }
    let _ = Command::new("iptables").args(["-D", "FORWARD"]).args(FORWARD_DROP).arg("DROP").output();
    let _ = Command::new("ip").args(["link", "del", BRIDGE]).output();
    for (name, value) in &record.sysctls {
        let _ = std::fs::write(Path::new("/proc/sys").join(name), value);
    }
    for entry in std::fs::read_dir("/var/log/containers").into_iter().flatten().flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(&record.dir)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    for entry in std::fs::read_dir("/var/lib/cni/results").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{CNI_NETWORK}-"))
            || sandboxes.iter().any(|id| name.contains(id.as_str()))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    for s in shim_sockets {
        let _ = std::fs::remove_file(s);
    }
    for d in &record.new_dirs {
        let _ = std::fs::remove_dir(d);
    }
    if current().is_some_and(|r| r.dir == record.dir) {
        let _ = std::fs::remove_file(RECORD);
    }
}

/// The record in [`RECORD`], if any.
pub fn current() -> Option<Record> {
    serde_json::from_str(&std::fs::read_to_string(RECORD).ok()?).ok()
}

/// What [`cleanup`] looks for, for a check that nothing is left: each entry names one thing
/// of a real node still on the host.
pub fn leftovers(record: &Record) -> Vec<String> {
    let mut left = Vec::new();
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        left.push(format!("bridge {BRIDGE}"));
    }
    left.extend(cgroup_dirs().into_iter().map(|d| format!("cgroup {}", d.display())));
    left.extend(mounts_under(&record.dir.display().to_string()).into_iter().map(|m| format!("mount {m}")));
    left.extend(processes_of(record).into_iter().map(|p| format!("process {p}: {}", cmdline(p))));
    left.extend(cgroup_pids().into_iter().map(|p| format!("process in {CGROUP_ROOT}: {p}")));
    for bin in ["iptables", "ip6tables"] {
        for table in ["filter", "nat", "mangle", "raw"] {
            let Ok(out) = Command::new(bin).args(["-t", table, "-S"]).output() else { continue };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.contains("KUBE-") || line.contains("CNI-") || line.contains(BRIDGE) {
                    left.push(format!("{bin} -t {table}: {line}"));
                }
            }
        }
    }
    for (name, value) in &record.sysctls {
        let now = std::fs::read_to_string(Path::new("/proc/sys").join(name)).unwrap_or_default();
        if now.trim() != value {
            left.push(format!("sysctl {name} = {} (was {value})", now.trim()));
        }
    }
    for s in shim_sockets(record).into_iter().filter(|s| s.exists()) {
        left.push(format!("shim socket {}", s.display()));
    }
    left.extend(cni_results(&container_ids(record)).iter().map(|r| format!("CNI result {}", r.display())));
    left.extend(record.new_dirs.iter().filter(|d| d.exists()).map(|d| format!("directory {}", d.display())));
    if current().is_some_and(|r| r.dir == record.dir) {
        left.push(format!("record {RECORD}"));
    }
    left
}

/// Mount points under `dir` (from `/proc/self/mountinfo`, octal escapes decoded).
fn mounts_under(dir: &str) -> Vec<String> {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_octal)
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push(u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every cgroup directory under [`CGROUP_ROOT`] in every hierarchy, deepest first.
fn cgroup_dirs() -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
        out.push(d.to_path_buf());
    }
    let mut out = Vec::new();
    let hierarchies = std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten().map(|h| h.path());
    // v1: one per hierarchy; v2 only: the unified hierarchy is /sys/fs/cgroup itself.
    for h in hierarchies.chain([PathBuf::from("/sys/fs/cgroup")]) {
        let root = h.join(CGROUP_ROOT.trim_start_matches('/'));
        if root.is_dir() {
            walk(&root, &mut out);
        }
    }
    out
}

fn cgroup_pids() -> Vec<i32> {
    let mut pids: Vec<i32> = cgroup_dirs()
        .iter()
        .flat_map(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " ").trim().to_string())
        .unwrap_or_default()
}

/// Processes whose command line names the node's directory or socket (containerd, the
/// kubelet, kube-proxy, the shims), other than this one.
fn processes_of(record: &Record) -> Vec<i32> {
    let dir = record.dir.display().to_string();
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|p| *p != me && cmdline(*p).contains(&dir))
        .collect()
}

/// The sockets containerd's runc shims make outside the state directory:
/// `/run/containerd/s/<sha256 of "<containerd socket>/<namespace>/<id>">`, one per task
/// under `<state>/io.containerd.runtime.v2.task/<namespace>/<id>`.
fn shim_sockets(record: &Record) -> Vec<PathBuf> {
    use sha2::{Digest, Sha256};
    let tasks = record.dir.join("containerd/state/io.containerd.runtime.v2.task");
    let mut out = Vec::new();
    for ns in std::fs::read_dir(&tasks).into_iter().flatten().flatten() {
        for id in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            let path = format!(
                "{}/{}/{}",
                record.socket().display(),
                ns.file_name().to_string_lossy(),
                id.file_name().to_string_lossy()
            );
            out.push(PathBuf::from(format!("/run/containerd/s/{:x}", Sha256::digest(path.as_bytes()))));
        }
    }
    out
}

/// libcni's cached results of the node's network or of containers `ids`
/// (`/var/lib/cni/results/<network>-<id>-eth0`, `cni-loopback-<id>-lo`).
fn cni_results(ids: &[String]) -> Vec<PathBuf> {
    std::fs::read_dir("/var/lib/cni/results")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!("{CNI_NETWORK}-")) || ids.iter().any(|id| name.contains(id.as_str()))
        })
        .map(|e| e.path())
        .collect()
}

/// The ids of the node's pod sandboxes and containers (from containerd's directories), which
/// name their CNI results.
fn container_ids(record: &Record) -> Vec<String> {
    let c = record.dir.join("containerd");
    [
        c.join("root/io.containerd.grpc.v1.cri/sandboxes"),
        c.join("root/io.containerd.grpc.v1.cri/containers"),
        c.join("state/io.containerd.runtime.v2.task/k8s.io"),
    ]
    .iter()
    .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .filter(|id| id.len() >= 32)
    .collect()
}

/// Deletes, in `bin`'s tables, every rule that jumps to a `KUBE-*` or `CNI-*` chain and then
/// those chains: one `<bin>-restore --noflush` per table (kube-proxy leaves thousands of rules
/// for a few hundred Services; one command per rule would take minutes).
fn iptables_cleanup(bin: &str) {
    for table in ["filter", "nat", "mangle", "raw"] {
        let Ok(out) = Command::new(bin).args(["-t", table, "-S"]).output() else { continue };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let ours = |chain: &str| chain.starts_with("KUBE-") || chain.starts_with("CNI-");
        let (mut deletes, mut chains) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let words = split_args(line);
            match words.first().map(String::as_str) {
                Some("-N") if words.get(1).is_some_and(|c| ours(c)) => chains.push(words[1].clone()),
                Some("-A")
                    if !words.get(1).is_some_and(|c| ours(c))
                        && words.windows(2).any(|w| (w[0] == "-j" || w[0] == "-g") && ours(&w[1])) =>
                {
                    deletes.push(format!("-D{}", &line[2..]));
                }
                _ => {}
            }
        }
        if deletes.is_empty() && chains.is_empty() {
            continue;
        }
        let mut input = format!("*{table}\n");
        for d in &deletes {
            input.push_str(d);
            input.push('\n');
        }
        for c in &chains {
            input.push_str(&format!("-F {c}\n"));
        }
        for c in &chains {
            input.push_str(&format!("-X {c}\n"));
        }
        input.push_str("COMMIT\n");
        let restore = format!("{bin}-restore");
        let Ok(mut child) = Command::new(&restore)
            .arg("--noflush")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            continue;
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        if let Ok(out) = child.wait_with_output()
            && !out.status.success()
        {
            eprintln!("qdr-tests: {restore} -t {table}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
    }
}

/// Splits an `iptables -S` line into arguments (double quotes group words).
fn split_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_lines_split_with_quoted_comments() {
        assert_eq!(
            split_args(r#"-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#),
            [
                "-A",
                "OUTPUT",
                "-m",
                "comment",
                "--comment",
                "kubernetes service portals",
                "-j",
                "KUBE-SERVICES"
            ]
        );
        assert_eq!(split_args(r#"-A X --comment """#), ["-A", "X", "--comment", ""]);
    }

    #[test]
    fn mountinfo_escapes_decode() {
        assert_eq!(unescape_octal(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_octal("/plain"), "/plain");
    }
}
