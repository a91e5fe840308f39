//! Simulated nodes: kube-scheduler and kwok (pods bound to a simulated node become Ready
//! with an address from [`POD_CIDR`], no container runs), and adding and removing nodes.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};

use super::{ControlPlane, READY_TIMEOUT, node_ready};
use crate::Error;
use crate::process::Process;

/// Annotation (and its value) that hands a Node to kwok.
pub const SIMULATED_NODE: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// What every simulated node offers: CPUs, memory, pods.
pub const NODE_CAPACITY: (&str, &str, &str) = ("4", "16Gi", "110");

/// Pod IPs of simulated nodes come from here.
pub const POD_CIDR: &str = "10.244.0.0/16";

impl ControlPlane {
    /// Starts kube-controller-manager (if not running), kube-scheduler and kwok once; later
    /// calls return at once. Nodes are added with [`Self::add_node`].
    ///
    /// # Errors
    /// [`Error::MissingBinary`] for kube-scheduler, kwok or the kwok stages;
    /// [`Error::Startup`] when one of them exits or kube-scheduler stays unhealthy.
    pub async fn start_nodes(&self) -> Result<(), Error> {
        self.start_controller_manager().await?;
        self.nodes
            .get_or_try_init(|| async {
                let scheduler = self.start_component("kube-scheduler", Vec::new()).await?;
                let kc = self.kubeconfig.display().to_string();
                let mut cmd = Command::new(self.testbin.path("kwok"));
                cmd.args([
                    format!("--kubeconfig={kc}"),
                    format!("--config={}", self.testbin.path(crate::testbin::KWOK_STAGES).display()),
                    format!(
                        "--manage-nodes-with-annotation-selector={}={}",
                        SIMULATED_NODE.0, SIMULATED_NODE.1
                    ),
                    format!("--cidr={POD_CIDR}"),
                    // Node Leases, as kubelets keep them: kube-controller-manager's node
                    // lifecycle controller never sees the nodes go stale.
                    "--node-lease-duration-seconds=40".into(),
                ]);
                let kwok = Process::spawn("kwok", cmd, &self.dir.join("kwok.log"))?;
                Ok::<_, Error>((scheduler, kwok))
            })
            .await
            .map(|_| ())
    }

    /// Creates simulated node `name` (label `kubernetes.io/hostname: <name>`, capacity
    /// [`NODE_CAPACITY`], handed to kwok by [`SIMULATED_NODE`]) unless it exists, starting
    /// the scheduler and kwok first, and waits until it is Ready.
    ///
    /// # Errors
    /// As [`Self::start_nodes`]; [`Error::Kube`] when the Node cannot be created;
    /// [`Error::Startup`] when it is not Ready within [`READY_TIMEOUT`].
    pub async fn add_node(&self, name: &str) -> Result<(), Error> {
        self.start_nodes().await?;
        let nodes: Api<Node> = Api::all(self.client().await?);
        let (cpu, memory, pods) = NODE_CAPACITY;
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "annotations": {SIMULATED_NODE.0: SIMULATED_NODE.1, "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
            },
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
            },
        }))
        .expect("a valid Node");
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(Error::Kube(Box::new(e))),
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if node_ready(&nodes, name).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.startup_error(format!("node {name} not Ready after {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deletes simulated node `name`; its pods are deleted by kube-controller-manager's
    /// pod garbage collector once the Node is gone.
    ///
    /// # Errors
    /// [`Error::Kube`] when the delete is refused (a missing node is not an error).
    pub async fn remove_node(&self, name: &str) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.client().await?);
        match nodes.delete(name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(Error::Kube(Box::new(e))),
        }
    }
}
