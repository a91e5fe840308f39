//! The host side of the real node, prepared before any of its processes starts: the
//! machine-wide lock and the [`Record`] of what will change, the bridge [`BRIDGE`] with
//! [`GATEWAY`], the `FORWARD` rule that keeps pod traffic on the machine, the kubelet's cgroup
//! root, and the check that the host has what a node needs. Undoing it is
//! [`super::cleanup()`]'s.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::control_plane::write;

use super::cleanup::{cleanup, current};

/// The Linux bridge pods are attached to.
pub const BRIDGE: &str = "qdr-real0";

/// Pod addresses on [`NODE`](super::NODE).
pub const SUBNET: &str = "10.88.0.0/24";

/// The host's address on [`BRIDGE`]: the node's InternalIP, where the kubelet and (with a real
/// node) the API server listen.
pub const GATEWAY: &str = "10.88.0.1";

/// The kubelet's cgroup root, in every cgroup hierarchy.
pub const CGROUP_ROOT: &str = "/qdr-real-node";

/// The CNI network name (also the prefix of its cached results in `/var/lib/cni/results`).
pub const CNI_NETWORK: &str = "qdr-real-node";

/// Held (flock) while a real node runs.
pub const LOCK: &str = "/run/qdr-operator-real-node.lock";

/// What the running real node changed, for [`cleanup`] by whoever comes next.
pub const RECORD: &str = "/run/qdr-operator-real-node.json";

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

pub(super) fn run(cmd: &mut Command) -> Result<String, Error> {
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

/// Creates [`CGROUP_ROOT`] in every cgroup v1 hierarchy (the kubelet requires it in each),
/// with the root's CPUs and memory nodes in the cpuset one.
/// On a machine with only cgroup v2 (`/sys/fs/cgroup` is the unified hierarchy), creates it
/// there instead.
pub(super) fn create_cgroup_root() -> Result<(), Error> {
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
