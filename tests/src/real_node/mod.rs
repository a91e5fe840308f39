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
//! network namespaces, sysctls, files outside its directory) is undone by [`cleanup()`]: when
//! the control plane stops, at process exit (also after a panic), and, for a process that was
//! SIGKILLed, by the next real node's start, from the record [`RECORD`] kept beside the lock
//! [`LOCK`]. Only one real node runs on a machine at a time (iptables and the bridge are
//! shared by the whole host); a second start waits for the lock.
//!
//! One module per part: `host` (the lock, record, bridge and rule), one per process the node
//! starts (`containerd`, `kubelet`, `kube_proxy`, `coredns`, and `netpol`, the NetworkPolicy
//! implementation, only when a test asks for it), `node` (starting them in order and waiting
//! for Ready), and `cleanup` (undoing it all).

mod cleanup;
mod containerd;
mod coredns;
mod host;
mod kube_proxy;
mod kubelet;
mod netpol;
mod node;

pub use cleanup::{cleanup, current, leftovers};
pub use coredns::CLUSTER_DOMAIN;
pub use host::{
    BRIDGE, CGROUP_ROOT, CNI_NETWORK, FORWARD_DROP, GATEWAY, HOST_DIRS, Host, LOCK, RECORD, Record, SUBNET,
    SYSCTLS, check_host,
};
pub use kubelet::{KUBELET_PORT, NODE, TAINT, pause_pod};
pub use netpol::{CHAIN as NETPOL_CHAIN, NFT_TABLE};
pub use node::RealNode;
