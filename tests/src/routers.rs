//! Real routers: the router image built from source (`tools/router-image/build.sh`), router
//! pods on the real node, the controller that makes them, and an AMQP 1.0 client to talk to
//! them (`tests/amqp/client.py`, on Debian's `python3-qpid-proton`).
//!
//! The real node ([`crate::real_node::NODE`]) is tainted so that only the operator's pods go
//! there; [`routers_on_real_node`] removes the taint, and a control plane with no simulated
//! node then schedules every router there. Pod traffic stays on the machine: the host reaches
//! the routers at their pod addresses on the node's bridge and at their Services' cluster
//! addresses (kube-proxy).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::real_node::{NODE, TAINT};
use crate::{ControlPlane, Error, Process, TestNamespace};

/// The router image's reference, as `tools/router-image/build.sh` names it: a registry host
/// nobody serves (it is imported into the node, never pulled).
pub const ROUTER_IMAGE: &str = "qdr-operator.test/qdrouterd:1.19.0";

/// The environment variable naming the folder of the router sources (the qpid-dispatch and
/// qpid-proton tarballs and qdr-image's scripts); unset, the build script fetches them.
pub const SOURCES_ENV: &str = "QDR_ROUTER_SOURCES";

/// The Python that has Debian's `python3-qpid-proton` (another `python3` on `PATH`, such as
/// a pyenv one, has not).
pub const PYTHON: &str = "/usr/bin/python3";

/// `tools/router-image/build.sh` in the workspace.
pub fn build_script() -> PathBuf {
    crate::workspace_root().join("tools/router-image/build.sh")
}

/// The router image's OCI archive: builds it when it is not cached (a minute or two; needs
/// root and the build packages the script names) and returns its path.
///
/// # Errors
/// [`Error::Startup`] with the script's output when the build fails, a source is missing or
/// a build package is not installed.
pub fn image_archive() -> Result<PathBuf, Error> {
    let out = Command::new(build_script())
        .output()
        .map_err(|e| Error::io(format!("running {}", build_script().display()), e))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last() {
        Some(path) if out.status.success() && Path::new(path).is_file() => Ok(PathBuf::from(path)),
        _ => Err(Error::Startup {
            what: format!("tools/router-image/build.sh failed ({})", out.status),
            logs: format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)),
        }),
    }
}

/// Imports the router image into the real node's containerd as [`ROUTER_IMAGE`].
///
/// # Errors
/// As [`image_archive`]; [`Error::MissingBinary`] when the control plane has no real node;
/// [`Error::Startup`] when the import fails.
pub fn import_router_image(cp: &ControlPlane) -> Result<(), Error> {
    let node = cp.real_node().ok_or(Error::MissingBinary {
        path: NODE.into(),
        hint: "start the control plane with real_nodes: 1",
    })?;
    node.import(&image_archive()?)
}

/// Removes the real node's taint so that routers, which do not tolerate it, are scheduled
/// there (with no simulated node, nowhere else).
///
/// # Errors
/// [`Error::Startup`] when kubectl fails (a taint already gone is not an error).
pub fn routers_on_real_node(cp: &ControlPlane) -> Result<(), Error> {
    let out = cp
        .kubectl()
        .args(["taint", "nodes", NODE, &format!("{}:{}-", TAINT.0, TAINT.2)])
        .output()
        .map_err(|e| Error::io("running kubectl taint", e))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || stderr.contains("not found") {
        Ok(())
    } else {
        Err(Error::Startup { what: "removing the real node's taint".into(), logs: stderr.into_owned() })
    }
}

/// The CPU a router of the tests requests when its spec sets no `resources`: 5 millicores, a
/// tenth of the default, so that the real node (this 2-core machine, 2,000 millicores to
/// give) can run the routers of several tests at once.
pub const TEST_ROUTER_CPU: &str = "5m";

/// How long the tests' controller relies on a whole read of a router's live entities
/// (`--live-recheck`; 5 minutes by default): short, so that an entity changed by hand is put
/// back within a test's patience (`tests/tests/routers/live.rs`), and long enough that the
/// reads while a mesh settles (every few seconds) rely on it, so real routers' `uptimeSeconds`
/// is what tells a visit it may.
pub const LIVE_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts `qdr-controller` (built with the tests, [`crate::images::operator_binary`]) on this machine as ServiceAccount
/// `qdr-operator/qdr-controller` (deploy/'s RBAC), with [`ROUTER_IMAGE`] as the default
/// router image, [`LIVE_RECHECK`] and `extra` arguments; its log is
/// `<control plane dir>/<name>.log`.
///
/// # Errors
/// [`Error::MissingBinary`] when the binary is not built; as
/// [`ControlPlane::install_rbac`]; [`Error::Io`] when it cannot start.
pub fn start_controller(cp: &ControlPlane, name: &str, extra: &[&str]) -> Result<Process, Error> {
    start_controller_on(cp, name, crate::components::free_port(), extra)
}

/// [`start_controller`] with its health and metrics server on `127.0.0.1:<health>`.
///
/// # Errors
/// As [`start_controller`].
pub fn start_controller_on(
    cp: &ControlPlane,
    name: &str,
    health: u16,
    extra: &[&str],
) -> Result<Process, Error> {
    let binary = crate::images::operator_binary(&crate::images::CONTROLLER)?;
    let ids = cp.install_rbac(&crate::rbac::Install::new("qdr-operator"))?;
    let mut cmd = Command::new(binary);
    cmd.env("KUBECONFIG", &ids.controller).args([
        "--lease-namespace=qdr-operator",
        &format!("--identity={name}"),
        &format!("--health-listen=127.0.0.1:{health}"),
        &format!("--default-image={ROUTER_IMAGE}"),
        // The real node is this 2-core machine, which runs dozens of routers at once in the
        // tests: they request a tenth of the default CPU (docs/sizing.md).
        &format!("--router-default-requests=cpu={TEST_ROUTER_CPU},memory=64Mi"),
        &format!("--live-recheck={}s", LIVE_RECHECK.as_secs()),
    ]);
    cmd.args(extra);
    Process::spawn(name, cmd, &cp.dir().join(format!("{name}.log")))
}

/// `tests/amqp/client.py`.
pub fn client_script() -> PathBuf {
    crate::workspace_root().join("tests/amqp/client.py")
}

/// A command running the AMQP client: `command` is `send`, `receive`, `query` or `steady`,
/// `url` an `amqp://` or `amqps://` URL, `target` the address (or the entity type for
/// `query`), then the client's options.
pub fn client(command: &str, url: &str, target: &str, options: &[&str]) -> Command {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(client_script()).args([command, url, target]).args(options);
    cmd
}

/// The JSON lines a client printed (lines that are not JSON are left out).
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Checks that [`PYTHON`] has Proton's binding.
///
/// # Errors
/// [`Error::MissingBinary`] naming the package to install.
pub fn check_client() -> Result<(), Error> {
    let ok =
        Command::new(PYTHON).args(["-c", "import proton.utils"]).output().is_ok_and(|o| o.status.success());
    if ok {
        Ok(())
    } else {
        Err(Error::MissingBinary { path: PYTHON.into(), hint: "apt-get install python3-qpid-proton" })
    }
}

/// A receiver ([`client`] `receive`) attached to one router, reading messages in the
/// background.
pub struct Receiver {
    child: Child,
    lines: std::sync::mpsc::Receiver<Value>,
    /// Lines read so far by [`Self::distinct`].
    read: Vec<Value>,
}

impl Receiver {
    /// Starts the client's `receive` of `count` messages (waiting up to 60 s for each) and
    /// waits until its link is attached.
    ///
    /// # Panics
    /// When the client cannot start or does not attach within 30 s.
    pub fn attach(url: &str, address: &str, count: usize, options: &[&str]) -> Receiver {
        let count = count.to_string();
        let mut opts = vec!["--count", &count, "--timeout", "60"];
        opts.extend_from_slice(options);
        let mut child = client("receive", url, address, &opts)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the client starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(30)).expect("the receiver attaches");
        assert_eq!(first["ready"], true, "receiver at {url}: {first}");
        Receiver { child, lines: rx, read: Vec::new() }
    }

    /// The distinct bodies received so far, without waiting.
    pub fn distinct(&mut self) -> std::collections::BTreeSet<String> {
        self.read.extend(self.lines.try_iter());
        self.read.iter().filter_map(|l| l["body"].as_str().map(String::from)).collect()
    }

    /// The distinct bodies it received, in order of first arrival, once it exited.
    ///
    /// # Panics
    /// When the client failed (fewer distinct messages than asked for within its timeout).
    pub fn bodies(self) -> Vec<String> {
        self.bodies_and_repeats().0
    }

    /// The distinct bodies it received, in order of first arrival, and how many arrived
    /// again, once it exited.
    ///
    /// # Panics
    /// As [`Self::bodies`].
    pub fn bodies_and_repeats(mut self) -> (Vec<String>, usize) {
        let status = self.child.wait().unwrap();
        let mut lines = std::mem::take(&mut self.read);
        // The reading thread ends at the end of the child's output: every line is in.
        lines.extend(self.lines.iter());
        assert!(status.success(), "receiver failed: {lines:?}");
        let first = |l: &&Value| l["repeat"] != true;
        let bodies =
            lines.iter().filter(first).filter_map(|l| l["body"].as_str().map(String::from)).collect();
        (bodies, lines.iter().filter(|l| l["repeat"] == true).count())
    }
}

/// Sends the messages `bodies` (bodies `<prefix>N` for N in the range, e.g. `0..5`) to
/// `address` at `url`, each waiting for its acknowledgement (or, presettled, for credit),
/// and goes on after a failure from the first message not sent, until `timeout` (the router
/// gives no credit for an address until it knows a receiver for it).
///
/// # Panics
/// When the messages are not all sent by `timeout`.
pub fn send(
    url: &str,
    address: &str,
    bodies: std::ops::Range<usize>,
    prefix: &str,
    timeout: Duration,
    extra: &[&str],
) {
    let deadline = Instant::now() + timeout;
    let mut sent = bodies.start;
    while sent < bodies.end {
        let (first, left) = (sent.to_string(), (bodies.end - sent).to_string());
        let mut options =
            vec!["--count", &left, "--first", &first, "--body-prefix", prefix, "--timeout", "5"];
        options.extend_from_slice(extra);
        let out = client("send", url, address, &options).output().unwrap();
        let lines = json_lines(&out);
        sent += lines.first().and_then(|l| l["sent"].as_u64()).unwrap_or(0) as usize;
        if !out.status.success() {
            eprintln!("sending to {address} at {url}: {lines:?}; going on from message {sent}");
            assert!(Instant::now() < deadline, "sending to {address} at {url}: {lines:?}");
        }
    }
}

/// `amqp://<ip>:<port>`.
pub fn url(ip: &str, port: u16) -> String {
    format!("amqp://{ip}:{port}")
}

/// What a steady client ([`Steady`]) counted.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Traffic {
    /// Send attempts (a resend after a failure counts again).
    pub sent: u64,
    /// Messages acknowledged (accepted by the receiver, end to end through the routers).
    pub acknowledged: u64,
    /// Distinct messages received.
    pub received: u64,
    /// Acknowledged messages never received: must be 0.
    pub lost: u64,
    /// The first of them, by sequence number.
    pub lost_first: Vec<u64>,
    /// Messages received more than once (a resend after a lost acknowledgement).
    pub duplicates: u64,
    /// Times the sender reconnected after a connection of it that had been attached failed.
    pub sender_reconnects: u64,
    /// Times the receiver reconnected after a connection of it that had been attached failed.
    pub receiver_reconnects: u64,
    /// Sends answered with an outcome other than ACCEPTED (MODIFIED when the receiver's link
    /// went away with the message in flight): not acknowledged, sent again.
    pub not_accepted: u64,
    /// The longest time between two acknowledgements, in seconds.
    pub longest_gap_s: f64,
    /// Failed tries of the sender's and the receiver's first connection and attach (say,
    /// through a Service the node's kube-proxy does not route yet): not reconnects, as no
    /// connection of theirs had been closed yet.
    #[serde(default)]
    pub first_attach_retries: u64,
    /// Why each reconnect or retry came, the first 10: `"<sender|receiver> at <s> s
    /// (<before|after> its first attach): <error type>: <error>"`, seconds counted from the
    /// client's start.
    #[serde(default)]
    pub reconnect_reasons: Vec<String>,
}

impl std::fmt::Display for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sent {}, acknowledged {}, received {}, lost {}, duplicates {}, reconnects {}+{}, not accepted {}, longest gap {:.2} s",
            self.sent,
            self.acknowledged,
            self.received,
            self.lost,
            self.duplicates,
            self.sender_reconnects,
            self.receiver_reconnects,
            self.not_accepted,
            self.longest_gap_s
        )?;
        if self.first_attach_retries > 0 {
            write!(f, ", first attach retried {}", self.first_attach_retries)?;
        }
        for why in &self.reconnect_reasons {
            write!(f, "; reconnected: {why}")?;
        }
        Ok(())
    }
}

/// A client sending at a steady rate with acknowledgements, and a receiver, both
/// reconnecting after a failure ([`client`] `steady`), until [`Steady::finish`]. It dies with
/// the test process.
pub struct Steady {
    process: Process,
}

impl Steady {
    /// Starts it against `url`, sending `rate` messages a second to `address`; its output
    /// goes to `log`.
    ///
    /// # Panics
    /// When the client cannot start.
    pub fn start(url: &str, address: &str, rate: u32, log: &Path) -> Steady {
        Steady::across(url, url, address, rate, log)
    }

    /// [`Steady::start`] with the sender at `send_url` and the receiver at `receive_url`
    /// (two routers: the messages cross their links).
    ///
    /// # Panics
    /// When the client cannot start.
    pub fn across(send_url: &str, receive_url: &str, address: &str, rate: u32, log: &Path) -> Steady {
        let rate = rate.to_string();
        let cmd = client(
            "steady",
            send_url,
            address,
            &["--rate", &rate, "--seconds", "3600", "--timeout", "20", "--receive-url", receive_url],
        );
        Steady { process: Process::spawn("steady-client", cmd, log).expect("the client starts") }
    }

    /// Stops sending (SIGINT), waits for the acknowledged messages to arrive (20 s at most)
    /// and returns the counts.
    ///
    /// # Panics
    /// When the client does not end within 60 s or printed no summary.
    pub fn finish(self) -> Traffic {
        self.process.signal(libc::SIGINT);
        assert!(self.process.wait_exit(Duration::from_secs(60)), "the steady client did not stop");
        let text = std::fs::read_to_string(self.process.log_path()).unwrap_or_default();
        let last = text.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok()).unwrap_or_default();
        serde_json::from_value(last).unwrap_or_else(|e| panic!("steady client: {e}:\n{text}"))
    }
}

/// How long routers may take from apply to Ready on a loaded 2-core machine (image import and
/// first start included): the readiness probe runs every 5 s.
pub const READY_WAIT: Duration = Duration::from_secs(240);

/// `kubectl <args>` against `cp`.
///
/// # Panics
/// When kubectl cannot run.
pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> std::process::Output {
    cp.kubectl().args(args).output().expect("kubectl runs")
}

/// Stops the routers of `namespaces` on a shared real node: their Interconnects, then the
/// workloads and pods themselves (whatever a stopped controller or a missing garbage
/// collector leaves), without waiting for the pods to end (`--wait=false`: each ends
/// within its grace period). A group of `make bench` calls it when it ends, so the next
/// group measures its own routers only, not the earlier groups' still running.
///
/// # Errors
/// A deletion kubectl refused, with its output.
pub fn stop_routers(cp: &ControlPlane, namespaces: &[&str]) -> Result<(), String> {
    for ns in namespaces {
        for kinds in ["interconnects", "deployments,daemonsets,replicasets,pods"] {
            let out = kubectl(cp, &["delete", kinds, "--all", "-n", ns, "--wait=false"]);
            if !out.status.success() {
                return Err(format!(
                    "kubectl delete {kinds} -n {ns}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    Ok(())
}

/// The standard output of a command that must have succeeded.
///
/// # Panics
/// When it failed, with its standard error and output.
#[track_caller]
pub fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl apply` of `manifest` in namespace `ns`.
///
/// # Panics
/// When the apply fails.
pub fn apply(cp: &ControlPlane, ns: &str, manifest: &Value) {
    let out = crate::components::kubectl_stdin(cp, &["apply", "-n", ns, "-f", "-"], &manifest.to_string());
    assert!(out.status.success(), "apply failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Waits (up to [`READY_WAIT`]) for condition Ready of Interconnect `name` and returns how
/// long that took.
///
/// # Panics
/// On a timeout, with the Interconnect, its pods, their logs and the `controllers`' logs.
pub fn wait_ready(cp: &ControlPlane, ns: &str, name: &str, controllers: &[&Process]) -> Duration {
    let t = Instant::now();
    let timeout = format!("--timeout={}s", READY_WAIT.as_secs());
    let out =
        kubectl(cp, &["wait", "-n", ns, "--for=condition=Ready", &format!("interconnect/{name}"), &timeout]);
    if !out.status.success() {
        let show = |args: &[&str]| String::from_utf8_lossy(&kubectl(cp, args).stdout).into_owned();
        let logs = show(&["logs", "-n", ns, "-l", &format!("application={name}"), "--tail=40", "--prefix"]);
        panic!(
            "Interconnect {name} not Ready: {}\n{}\n{}\n{logs}\ncontroller:\n{}",
            String::from_utf8_lossy(&out.stderr),
            show(&["get", "interconnect", name, "-n", ns, "-o", "yaml"]),
            show(&["get", "pods", "-n", ns, "-o", "wide"]),
            controllers.iter().map(|p| p.log_tail(40)).collect::<Vec<_>>().join("\n")
        );
    }
    t.elapsed()
}

/// The router pods of Interconnect `name` that have an address and are not terminating:
/// (pod name, pod IP), by name.
///
/// # Panics
/// When the pods cannot be listed.
pub async fn router_pods(ns: &TestNamespace, name: &str) -> Vec<(String, String)> {
    let pods: Api<Pod> = ns.api();
    let list = pods.list(&ListParams::default().labels(&format!("application={name}"))).await.unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some((p.metadata.name?, p.status?.pod_ip?)))
        .collect();
    out.sort();
    out
}

/// `qdmanage <args>` in the router container of `pod` (`kubectl exec`), as a person would
/// run it: its JSON answer.
///
/// # Errors
/// kubectl's error output, or the answer when it is not JSON.
pub fn qdmanage(cp: &ControlPlane, ns: &str, pod: &str, args: &[&str]) -> Result<Value, String> {
    let mut all = vec!["exec", "-n", ns, pod, "--", "qdmanage"];
    all.extend_from_slice(args);
    let out = kubectl(cp, &all);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The pods of Interconnect `name` that are Ready and not terminating.
pub async fn ready_routers(ns: &TestNamespace, name: &str) -> usize {
    let pods: Api<Pod> = ns.api();
    let Ok(list) = pods.list(&ListParams::default().labels(&format!("application={name}"))).await else {
        return usize::MAX; // not known: does not count as a dip
    };
    list.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

/// Samples [`ready_routers`] every 200 ms until the returned flag is set; the task returns
/// the fewest seen.
pub fn watch_ready(
    ns: &'static TestNamespace,
    name: &str,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, name) = (stop.clone(), name.to_string());
    let task = tokio::spawn(async move {
        let mut fewest = usize::MAX;
        while !flag.load(Ordering::SeqCst) {
            fewest = fewest.min(ready_routers(ns, &name).await);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        fewest
    });
    (stop, task)
}

/// The cluster address of Service `name`.
///
/// # Panics
/// When there is no such Service or it has no cluster address.
pub async fn service_ip(ns: &TestNamespace, name: &str) -> String {
    let svc: Api<Service> = ns.api();
    svc.get(name).await.unwrap().spec.unwrap().cluster_ip.unwrap()
}

/// Waits until Deployment `name` rolled out (`kubectl rollout status`) and only `size`
/// routers are left.
///
/// # Panics
/// When that takes longer than [`READY_WAIT`].
pub async fn rolled_out(cp: &ControlPlane, ns: &TestNamespace, name: &str, size: usize) {
    let out =
        kubectl(cp, &["rollout", "status", "-n", &ns.name, &format!("deployment/{name}"), "--timeout=240s"]);
    assert!(out.status.success(), "rollout of {name}: {}", String::from_utf8_lossy(&out.stderr));
    crate::eventually(&format!("{name}'s old routers to go"), READY_WAIT, || async {
        (router_pods(ns, name).await.len() == size).then_some(())
    })
    .await;
}

/// An Interconnect manifest named `name` with `spec`, for [`apply`].
pub fn interconnect(name: &str, spec: Value) -> Value {
    serde_json::json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1",
        "kind": "Interconnect",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// `iptables <args>` in the network namespace of process `pid` (a router's: [`router_pid`]).
///
/// # Panics
/// When `nsenter` or `iptables` fails.
pub fn iptables_in(pid: u32, args: &[&str]) {
    let out = Command::new("nsenter")
        .args([format!("--net=/proc/{pid}/ns/net"), "iptables".into()])
        .args(args)
        .output()
        .expect("nsenter runs");
    assert!(out.status.success(), "iptables {args:?} in {pid}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The host PID of the `qdrouterd` of router pod `pod` (its `HOSTNAME`), found in `/proc`.
pub fn router_pid(pod: &str) -> Option<u32> {
    let want = format!("HOSTNAME={pod}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if comm.trim() != "qdrouterd" {
            return None;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        environ.split(|b| *b == 0).any(|v| v == want.as_bytes()).then_some(pid)
    })
}

/// The router pods of Interconnect `name` that are not terminating: (pod name, uid, restart
/// count of its router container), by name. What a change that must not restart the routers
/// leaves as it was.
///
/// # Panics
/// When the pods cannot be listed.
pub async fn pod_identities(ns: &TestNamespace, name: &str) -> Vec<(String, String, i32)> {
    let pods: Api<Pod> = ns.api();
    let list = pods.list(&ListParams::default().labels(&format!("application={name}"))).await.unwrap();
    let mut out: Vec<(String, String, i32)> = (list.items.into_iter())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let restarts = (p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
                .map(|c| c.restart_count)
                .sum();
            (p.metadata.name.unwrap_or_default(), p.metadata.uid.unwrap_or_default(), restarts)
        })
        .collect();
    out.sort();
    out
}

/// Waits until Interconnect `name` reports every router running its configuration of the
/// current generation (`ConfigApplied` `True`, reason `Applied`, at its `generation`):
/// with live entities, every router answered that it holds them (docs/live-configuration.md).
/// Returns the time it took.
///
/// # Panics
/// When that takes longer than [`READY_WAIT`].
pub async fn config_applied(ns: &TestNamespace, name: &str) -> Duration {
    let ics: Api<qdr_api::Interconnect> = ns.api();
    let t = Instant::now();
    crate::eventually(&format!("{name}'s configuration applied on every router"), READY_WAIT, || async {
        let ic = ics.get(name).await.ok()?;
        let generation = ic.metadata.generation;
        let status = ic.status?;
        let c = status.conditions.iter().find(|c| c.type_ == "ConfigApplied")?;
        (c.status == "True" && c.reason == "Applied" && c.observed_generation == generation).then_some(())
    })
    .await;
    t.elapsed()
}
