//! [`Settings`]: what the builders take besides the Interconnect.

/// Everything the builders need besides the Interconnect: the controller's configuration
/// and what it discovered about the cluster at start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Router image for Interconnects that do not pin one (the Go operator's `QDROUTERD_IMAGE`).
    pub default_image: String,
    /// Whether `route.openshift.io/v1` is served: exposed listeners get Routes, not Ingresses.
    pub routes: bool,
    /// Lifetimes of generated CAs and router certificates.
    pub lifetimes: crate::credentials::Lifetimes,
    /// `runAsUser` of the router pods ([`DEFAULT_RUN_AS_USER`] by default; `None` where the
    /// platform assigns the UID, as OpenShift's restricted SCC does).
    pub run_as_user: Option<i64>,
    /// Key of the credentials hash annotation ([`crate::hash_key`]).
    pub hash_key: crate::hash_key::HashKey,
    /// Key of the management Secrets' seals ([`crate::credentials::seal`]), held since its
    /// Secret was made.
    pub seal_key: crate::hash_key::HashKey,
    /// Whether the routers get the operator's management listener and are read
    /// (`--observe-mesh`, docs/mesh-status.md).
    pub observe_mesh: bool,
    /// The controller's pods, which the routers' NetworkPolicy admits to the management port
    /// ([`super::network_policy`]).
    pub controller_pods: ControllerPods,
    /// What a router container requests when its spec sets no `resources`
    /// (`--router-default-requests`; [`super::default_resources`]).
    pub router_requests: std::collections::BTreeMap<String, String>,
}

/// The pods the management port admits: the controller's, by namespace and labels
/// (`--controller-pod-labels`; the manifests and the chart label them
/// `app.kubernetes.io/name=qdr-controller`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerPods {
    /// The controller's namespace (`POD_NAMESPACE`, the Lease's).
    pub namespace: String,
    /// Labels every controller pod carries.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl ControllerPods {
    /// The controller's pods as the manifests and the chart label them
    /// (`app.kubernetes.io/name=qdr-controller`), in namespace `namespace`.
    pub fn installed_in(namespace: &str) -> Self {
        ControllerPods {
            namespace: namespace.into(),
            labels: [(crate::labels::NAME.to_string(), CONTROLLER_POD_NAME.to_string())].into(),
        }
    }
}

/// The `app.kubernetes.io/name` of the controller's pods in deploy/ and the chart.
pub const CONTROLLER_POD_NAME: &str = "qdr-controller";

/// The UID the router pods run as by default. The router image (qdr-image 1.19.0) declares no
/// `USER` and writes only below `/tmp` (its configuration and SASL database), so any
/// non-root UID works; this one is outside the range of system accounts.
pub const DEFAULT_RUN_AS_USER: i64 = 10001;
