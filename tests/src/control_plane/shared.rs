//! The one control plane of a test binary, started on first use in the variant its tests
//! need (with kube-controller-manager, simulated nodes, or a real node).

use super::{ControlPlane, Options};
use tokio::sync::OnceCell;

static SHARED: OnceCell<ControlPlane> = OnceCell::const_new();

/// The one control plane of this test binary, started on first use, with an audit log
/// ([`ControlPlane::audit`]).
///
/// # Panics
/// When the control plane cannot start; the message carries the cause, the build command
/// for missing binaries, and the tail of every process log.
pub async fn shared() -> &'static ControlPlane {
    SHARED
        .get_or_try_init(|| ControlPlane::start(Options { audit: true, ..Options::default() }))
        .await
        .unwrap_or_else(|e| panic!("test control plane failed to start: {e}"))
}

/// The one control plane of this test binary with a real node ([`Options::real_nodes`] = 1),
/// kube-controller-manager, the scheduler and kwok, and an audit log. A test binary uses
/// either this or [`shared`] and its variants.
///
/// # Panics
/// As [`shared`]; also when this binary's control plane was already started without a real
/// node.
pub async fn shared_with_real_node() -> &'static ControlPlane {
    let cp = SHARED
        .get_or_try_init(|| ControlPlane::start(Options { audit: true, real_nodes: 1, ..Options::default() }))
        .await
        .unwrap_or_else(|e| panic!("test control plane with a real node failed to start: {e}"));
    assert!(cp.real.is_some(), "this test binary's control plane was started without a real node");
    cp
}

/// Like [`shared`], and makes sure kube-controller-manager runs too.
///
/// # Panics
/// As [`shared`].
pub async fn shared_with_controller_manager() -> &'static ControlPlane {
    let cp = shared().await;
    cp.start_controller_manager()
        .await
        .unwrap_or_else(|e| panic!("kube-controller-manager failed to start: {e}"));
    cp
}

/// Like [`shared_with_controller_manager`], with kube-scheduler, kwok and at least `nodes`
/// simulated nodes (`node-0` …) Ready. Tests of one binary share the nodes: a test that
/// adds or removes nodes should be the only one in its binary that counts them.
///
/// # Panics
/// As [`shared`], or when a node does not become Ready.
pub async fn shared_with_nodes(nodes: usize) -> &'static ControlPlane {
    let cp = shared_with_controller_manager().await;
    for i in 0..nodes {
        cp.add_node(&format!("node-{i}")).await.unwrap_or_else(|e| panic!("simulated node-{i}: {e}"));
    }
    cp
}
