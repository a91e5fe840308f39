//! The running node: its four processes started in order (containerd, then the kubelet,
//! kube-proxy and CoreDNS) on a prepared [`Host`], the wait until the Node is Ready and the
//! Services and names answer, and stopping them. How each process is configured is its own
//! module's.

use std::path::Path;
use std::time::{Duration, Instant};

use super::host::{Host, Record, create_cgroup_root};
use super::kubelet::NODE;
use super::{containerd, coredns, kube_proxy, kubelet, netpol};
use crate::Error;
use crate::control_plane::node_ready;
use crate::process::Process;
use crate::testbin::Testbin;

/// The running node's processes.
#[derive(Debug)]
pub struct RealNode {
    host: Host,
    containerd: Process,
    kubelet: Process,
    kube_proxy: Process,
    coredns: Process,
    /// The NetworkPolicy implementation, once [`RealNode::enforce_network_policies`] started it.
    netpol: std::sync::OnceLock<Process>,
    /// The admin's kubeconfig (kube-proxy's, CoreDNS's and netpol's identity).
    kubeconfig: std::path::PathBuf,
    /// From spawning containerd until the Node reported Ready.
    pub startup: Duration,
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
        let dir = host.record().dir.clone();
        let socket = host.record().socket();
        let containerd = containerd::start(&dir, &socket).await?;
        let pause_archive = dir.join("pause.oci.tar");
        crate::images::write_archive(&crate::images::pause_image(&pause), &pause_archive)?;
        containerd::import(&socket, &pause_archive)?;

        create_cgroup_root()?;
        let kubelet = kubelet::start(&kubelet, &dir, ca_file, node_kubeconfig)?;
        let proxy_binary = kube_proxy;
        let (kube_proxy, mut proxy_healthz) = kube_proxy::start(&proxy_binary, &dir, kubeconfig)?;
        let (coredns, dns_ready) = coredns::start(&coredns, &dir, kubeconfig)?;

        let mut node = RealNode {
            host,
            containerd,
            kubelet,
            kube_proxy,
            coredns,
            netpol: std::sync::OnceLock::new(),
            kubeconfig: kubeconfig.to_path_buf(),
            startup: Duration::ZERO,
        };
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
            if node_ready(&nodes, NODE).await
                && kube_proxy::healthy(proxy_healthz)
                && coredns::ready(dns_ready)
            {
                break;
            }
            // Its health port was taken between `free_port` and kube-proxy's bind (it then
            // retries that port for ever): start it again on other ports.
            if !kube_proxy::healthy(proxy_healthz)
                && let tail = node.kube_proxy.log_tail(3)
                && tail.contains("failed to start proxy healthz")
                && tail.contains("address already in use")
            {
                node.kube_proxy.stop(Duration::from_secs(2));
                (node.kube_proxy, proxy_healthz) = kube_proxy::start(&proxy_binary, &dir, kubeconfig)?;
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

    /// Enforces NetworkPolicies on this node from now on, until it stops: starts `netpol`
    /// (sigs.k8s.io/kube-network-policies, [`netpol`]) and waits until its rules are in place.
    /// Connections already open stay open (it judges new ones). A second call does nothing.
    ///
    /// # Errors
    /// [`Error::Startup`] with its log when it exits or writes no rules in time;
    /// [`Error::MissingBinary`](crate::Error) when the node group was built without it.
    pub async fn enforce_network_policies(&self, testbin: &Testbin) -> Result<(), Error> {
        if self.netpol.get().is_some() {
            return Ok(());
        }
        let binary = testbin.require("netpol")?;
        let process = netpol::start(&binary, &self.host.record().dir, &self.kubeconfig).await?;
        let _ = self.netpol.set(process);
        Ok(())
    }

    /// Whether [`RealNode::enforce_network_policies`] started the policy judge and it still runs.
    pub fn enforcing_network_policies(&self) -> bool {
        self.netpol.get().is_some_and(|p| p.exited().is_none())
    }

    /// Imports an OCI image archive into the node's containerd (namespace `k8s.io`, which
    /// the kubelet sees); pods then use it with `imagePullPolicy: Never` or `IfNotPresent`.
    ///
    /// # Errors
    /// [`Error::Startup`] with ctr's output when the import fails.
    pub fn import(&self, archive: &Path) -> Result<(), Error> {
        containerd::import(&self.host.record().socket(), archive)
    }

    /// Lets the node pull images from the registry at `host` (`127.0.0.1:<port>`, a registry
    /// the test serves on this machine) over plain HTTP, from its next pull on.
    ///
    /// # Errors
    /// [`Error::Io`] when the registry's `hosts.toml` cannot be written.
    pub fn plain_http_registry(&self, host: &str) -> Result<(), Error> {
        containerd::plain_http_registry(&self.host.record().dir, host)
    }

    /// The last `lines` lines of containerd's, the kubelet's, kube-proxy's and CoreDNS's logs.
    pub fn logs_tail(&self, lines: usize) -> String {
        [&self.containerd, &self.kubelet, &self.kube_proxy, &self.coredns]
            .into_iter()
            .chain(self.netpol.get())
            .map(|p| {
                format!("----- {} ({}) -----\n{}\n", p.name(), p.log_path().display(), p.log_tail(lines))
            })
            .collect()
    }

    /// The record of what this node changed on the host.
    pub fn record(&self) -> &Record {
        self.host.record()
    }

    /// Stops netpol (when started), CoreDNS, kube-proxy, the kubelet and containerd, then [`super::cleanup()`]: nothing of
    /// the node is left on the host afterwards. Later calls do nothing.
    pub fn stop(&self) {
        if let Some(p) = self.netpol.get() {
            p.stop(Duration::from_secs(5));
        }
        self.coredns.stop(Duration::from_secs(5));
        self.kube_proxy.stop(Duration::from_secs(5));
        self.kubelet.stop(Duration::from_secs(5));
        self.containerd.stop(Duration::from_secs(5));
        self.host.cleanup();
    }
}
