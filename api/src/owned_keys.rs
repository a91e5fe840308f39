//! Label and annotation keys the operator writes on the router pods and Service, which the
//! `deploymentPlan`'s `podLabels`, `podAnnotations` and `serviceAnnotations` may not set: a
//! user's value would fight the operator's on every apply, or, for the selector labels,
//! take pods out of their own workload and Service.
//!
//! The controller's builders use these same keys (`controller/src/labels.rs`,
//! `controller/src/builders/`); a controller test holds every key its pod templates and
//! Services carry to this list.

/// A prefix the operator keeps for itself: every key under it is refused
/// (`qdr-operator.io/config-hash`, `qdr-operator.io/credentials-hash`, and any later one).
pub const RESERVED_PREFIX: &str = "qdr-operator.io/";

/// The pod labels the operator sets (its selector and recommended labels), and those the
/// workload controllers add: the Deployment's `pod-template-hash`, the DaemonSet's
/// `controller-revision-hash` and `pod-template-generation`.
pub const POD_LABELS: [&str; 9] = [
    "application",
    "interconnect_cr",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
    "pod-template-hash",
    "controller-revision-hash",
    "pod-template-generation",
];

/// The router pods' selector labels, which the operator gives a topology spread constraint
/// without a `labelSelector` (so `matchLabelKeys` may not name them: the API server refuses a
/// key in both).
pub const SELECTOR_LABELS: [&str; 2] = ["application", "interconnect_cr"];

/// Bytes of the pods' annotations kept for the operator's own (its hashes, the fields a roll
/// came from, Prometheus' port and scrape): `podAnnotations` may hold the API server's
/// 256 KiB less this. A controller test holds what the builders write to at most this.
pub const POD_ANNOTATION_RESERVE: usize = 4096;

/// The pod annotations the operator sets besides its [`RESERVED_PREFIX`] ones: where
/// Prometheus scrapes the router's metrics.
pub const POD_ANNOTATIONS: [&str; 2] = ["prometheus.io/port", "prometheus.io/scrape"];

/// Whether `key` is a pod label the operator owns.
pub fn owned_pod_label(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX) || POD_LABELS.contains(&key)
}

/// Whether `key` is a pod annotation the operator owns.
pub fn owned_pod_annotation(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX) || POD_ANNOTATIONS.contains(&key)
}

/// Whether `key` is a Service annotation the operator owns (any under [`RESERVED_PREFIX`]).
pub fn owned_service_annotation(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX)
}
