//! The `Interconnect` custom resource, `interconnectedcloud.github.io/v1alpha1`.
//!
//! Every JSON name is the one the Go operator used, so objects written for it deserialize
//! unchanged. Every field is optional in Rust so that [`crate::defaults`] can tell an
//! absent field from an explicit one; the API server's schema marks required what the
//! router needs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::enums::string_enum;

/// Desired state of a Qpid Dispatch Router network: how the routers run
/// (`deploymentPlan`), what they listen on and connect to, their TLS profiles and their
/// address, link-route and auto-link configuration. Absent fields are filled in by the
/// defaulting webhook (see the API reference for every default).
// kube's `printcolumn(...)` repeats `type_ = ...` per column, which clippy mistakes for a
// duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "interconnectedcloud.github.io",
    version = "v1alpha1",
    kind = "Interconnect",
    plural = "interconnects",
    singular = "interconnect",
    shortname = "ic",
    namespaced,
    status = "InterconnectStatus",
    scale(
        spec_replicas_path = ".spec.deploymentPlan.size",
        status_replicas_path = ".status.podCount",
        label_selector_path = ".status.selector"
    ),
    doc = "An Interconnect is a network of Apache Qpid Dispatch Routers run by qdr-operator: a Deployment (or a DaemonSet for placement Every) of routers, their Service, configuration and credentials.",
    printcolumn(
        name = "Role",
        type_ = "string",
        json_path = ".spec.deploymentPlan.role",
        description = "Router mode: interior or edge"
    ),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".spec.deploymentPlan.size",
        description = "Desired routers (empty for placement Every)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Routers ready"
    ),
    printcolumn(
        name = "Mesh",
        type_ = "string",
        json_path = ".status.mesh.summary",
        description = "The mesh as the routers report it: interior routers linked to each other (or edges uplinked) / expected"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Reason of the Ready condition"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Edges",
        type_ = "integer",
        json_path = ".status.mesh.edgesUplinked",
        description = "Edge routers with an open uplink",
        priority = 1
    ),
    printcolumn(
        name = "Config",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ConfigApplied\")].status",
        description = "Whether every router runs the current configuration (ConfigApplied)",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InterconnectSpec {
    /// How the routers are run: image, number, role, placement, resources and ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_plan: Option<DeploymentPlan>,

    /// Name of the Secret holding SASL users (each key a user name, each value its
    /// password), or `none` (or `false`, any case) for no SASL user database. Default:
    /// `<name>-users`, created by the operator with user `guest` and a random password
    /// when it does not exist. A Secret of any other name is yours: the operator never
    /// creates, owns or deletes it, and reports it missing until it exists. Logins are
    /// `<user>@<interconnect name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub users: Option<String>,

    /// Client (normal and route-container) listeners. Default when absent: AMQP on 5672,
    /// the web console on 8080 (http, authenticatePeer, expose) and AMQPS on 5671 with
    /// sslProfile `default`. Ports are unique across all listener kinds and the liveness
    /// port. At least 1, at most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub listeners: Option<Vec<Listener>>,

    /// Listeners for connections from other interior routers (role `inter-router`).
    /// Interior routers only. Default for interior routers when absent: port 55671 with
    /// sslProfile `inter-router`, authenticatePeer, saslMechanisms EXTERNAL, exposed.
    /// Set `[]` for none. At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub inter_router_listeners: Option<Vec<Listener>>,

    /// Listeners for connections from edge routers (role `edge`). Interior routers only.
    /// Default for interior routers when absent: port 45672. Set `[]` for none. At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub edge_listeners: Option<Vec<Listener>>,

    /// TLS profiles that listeners and connectors name in `sslProfile`. The profiles
    /// `default` and `inter-router` are added automatically when referenced and absent.
    /// Names are unique. At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub ssl_profiles: Option<Vec<SslProfile>>,

    /// Address configuration (distribution, waypoints, phases). Default when absent:
    /// prefixes closest, unicast and exclusive (distribution closest) and multicast and
    /// broadcast (distribution multicast). Set `[]` for none. At most 256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub addresses: Option<Vec<Address>>,

    /// Auto-links: links the router attaches itself, typically to waypoints on brokers.
    /// At most 256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub auto_links: Option<Vec<AutoLink>>,

    /// Link routes: address spaces whose link attaches are routed to a container.
    /// At most 256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub link_routes: Option<Vec<LinkRoute>>,

    /// Outgoing client connections (role normal or route-container). At most 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub connectors: Option<Vec<Connector>>,

    /// Outgoing connections to interior routers of another network (role
    /// `inter-router`). Interior routers only; the routers of this Interconnect mesh
    /// with each other by themselves. At most 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub inter_router_connectors: Option<Vec<Connector>>,

    /// Outgoing connections from an edge router to interior routers (role `edge`), e.g.
    /// to `<mesh>:45672`. Edge routers only. At most 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub edge_connectors: Option<Vec<Connector>>,

    /// Deprecated and ignored. The Go operator's CRD had this field but never read it;
    /// it is accepted so that old manifests still apply. Use `deploymentPlan.issuer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub issuer: Option<String>,
}

string_enum! {
    /// Router mode.
    pub enum Role {
        /// Interior routers mesh with each other and accept edge routers.
        Interior = "interior",
        /// Edge routers connect to interior routers and never route between them.
        Edge = "edge",
    }
}

string_enum! {
    /// How router pods are spread over nodes.
    pub enum Placement {
        /// A Deployment of `size` routers, anywhere.
        Any = "Any",
        /// A DaemonSet: one router on every schedulable node.
        Every = "Every",
        /// A Deployment of `size` routers, at most one per node (required pod anti-affinity).
        AntiAffinity = "AntiAffinity",
    }
}

string_enum! {
    /// Kubernetes Service type of the router Service.
    pub enum ServiceType {
        /// A cluster-internal virtual IP.
        ClusterIp = "ClusterIP",
        /// ClusterIP plus a port on every node.
        NodePort = "NodePort",
        /// NodePort plus an external load balancer.
        LoadBalancer = "LoadBalancer",
    }
}

string_enum! {
    /// Message distribution for an address (router schema `address.distribution`).
    pub enum Distribution {
        /// Each message goes to one consumer, balanced by outstanding deliveries.
        Balanced = "balanced",
        /// Each message goes to the nearest consumer.
        Closest = "closest",
        /// Each message goes to every consumer.
        Multicast = "multicast",
        /// Messages are rejected as undeliverable.
        Unavailable = "unavailable",
    }
}

string_enum! {
    /// Link direction (router schema `direction`): `in` for client senders, `out` for
    /// client receivers.
    pub enum Direction {
        /// Links carrying messages into the router.
        In = "in",
        /// Links carrying messages out of the router.
        Out = "out",
    }
}

/// How the routers are run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPlan {
    /// Router container image. When absent, the controller's configured default image is
    /// used (the Go operator's `QDROUTERD_IMAGE`), so that an operator upgrade can move
    /// unpinned routers to a newer image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,

    /// Number of routers, 1 to 16. Default 1. Must be absent for placement `Every`,
    /// where the number of nodes decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub size: Option<i32>,

    /// Router mode: `interior` (default) or `edge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,

    /// Pod placement: `Any` (default; a Deployment), `AntiAffinity` (a Deployment with at
    /// most one router per node) or `Every` (a DaemonSet). The Go operator's `Node` was
    /// never implemented and is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,

    /// Compute resources of the router container, copied to the pod unchanged. When absent
    /// the router requests `cpu: 50m` and `memory: 64Mi`, with no limits (measured: a router
    /// of the defaults' listeners is 31 MiB resident and 1 millicore idle, 61 MiB with 1,000
    /// idle client connections; docs/sizing.md). Setting it replaces both requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Name of a Secret (`tls.crt`, `tls.key`) holding a CA that signs the generated
    /// credentials instead of a CA the operator creates. Despite its name this is a
    /// Secret, not a cert-manager Issuer (Go operator compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub issuer: Option<String>,

    /// Port of the router's built-in HTTP listener for `/healthz` (liveness probe) and
    /// `/metrics` (Prometheus). 1 to 65535, default 8888. Must not be used by a listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub liveness_port: Option<i32>,

    /// Type of the router Service: `ClusterIP` (the default when absent), `NodePort` or
    /// `LoadBalancer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,

    /// Tolerations of the router pods, as in a pod's `spec.tolerations` (Kubernetes' own
    /// type): lets routers run on tainted nodes. At most 32. Validated as the API server
    /// validates a pod's: `operator` `Equal` (default) or `Exists`; `Exists` with no
    /// `value`; an empty `key` only with `Exists`; `effect` `NoSchedule`,
    /// `PreferNoSchedule` or `NoExecute` (empty: all); `tolerationSeconds` only with
    /// `NoExecute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub tolerations: Option<Vec<Toleration>>,

    /// Node labels a router pod's node must have, as in a pod's `spec.nodeSelector`: label
    /// keys (an optional DNS-subdomain prefix and `/`, then a name of at most 63
    /// characters) and label values (at most 63). At most 64 entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// How the routers spread across topology domains (zones, nodes), as in a pod's
    /// `spec.topologySpreadConstraints`. A constraint without a `labelSelector` counts
    /// this Interconnect's routers (the operator fills in their selector). At most 8;
    /// not with placement `Every` (a DaemonSet already runs one router per node, and a
    /// `DoNotSchedule` constraint could only keep some from running). Beside, never
    /// instead of, the operator's own anti-affinity of placement `AntiAffinity`.
    /// `maxSkew` ≥ 1; a `topologyKey`; `whenUnsatisfiable` `DoNotSchedule` or
    /// `ScheduleAnyway`, one constraint per `topologyKey` and `whenUnsatisfiable`; `minDomains`
    /// ≥ 1 and only with `DoNotSchedule`; `nodeAffinityPolicy` and `nodeTaintsPolicy`
    /// `Honor` or `Ignore`; no `matchLabelKeys` key that the selector has (without a
    /// `labelSelector`: `application` and `interconnect_cr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,

    /// PriorityClass of the router pods (`spec.priorityClassName`): a DNS subdomain of at
    /// most 253 characters. The class must exist when the pods are created (the API
    /// server's Priority admission refuses them otherwise; the workload's condition says
    /// so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,

    /// Extra labels of the router pods, beside the operator's own. Label keys and values
    /// as for `nodeSelector`; the operator's keys (`application`, `interconnect_cr`,
    /// `app.kubernetes.io/name`, `instance`, `component`, `managed-by`, the workload
    /// controllers' `pod-template-hash`, `controller-revision-hash`,
    /// `pod-template-generation`, and any key under `qdr-operator.io/`) are refused. At
    /// most 64. A change rolls the routers (it is in the pod template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,

    /// Extra annotations of the router pods, beside the operator's own. Keys as label
    /// keys; the operator's (`prometheus.io/port`, `prometheus.io/scrape`, any key under
    /// `qdr-operator.io/`) are refused. At most 64, 252 KiB in all (the API server's limit
    /// for an object's annotations, 256 KiB, less 4 KiB kept for the operator's own). A
    /// change rolls the routers (it is in the pod template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<BTreeMap<String, String>>,

    /// Annotations of the router Service, such as those a cloud load balancer reads (with
    /// `serviceType: LoadBalancer`). Keys as label keys; any key under `qdr-operator.io/`
    /// is refused. At most 64, 256 KiB in all. A change restarts no router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_annotations: Option<BTreeMap<String, String>>,

    /// The PodDisruptionBudget the operator makes for the routers (policy/v1), which bounds
    /// how many a node drain or the cluster autoscaler may evict at once. When absent: one
    /// with `maxUnavailable: 1` for two or more routers of placement `Any` or
    /// `AntiAffinity`, none for one router (it would block every drain) or `Every` (a
    /// DaemonSet's routers are left running by `kubectl drain --ignore-daemonsets`). Whatever
    /// this says, the operator makes none while another PodDisruptionBudget in the namespace
    /// selects the routers (or takes the name `<name>`): the `DisruptionBudget` condition
    /// names it. A change restarts no router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_budget: Option<DisruptionBudget>,

    /// The NetworkPolicy (networking.k8s.io/v1) the operator makes for the routers, which
    /// admits each port only from those who need it: the management port 55670 only from
    /// the controller's pods; the inter-router and edge ports only from this operator's
    /// router pods (of any namespace), or from anywhere when something carries the listener
    /// in from outside the cluster (a `NodePort` or `LoadBalancer` Service, an OpenShift
    /// Route, an AccessGrant that offers it; not an Ingress, which carries HTTP); the
    /// health port and the client listeners from anywhere. When absent: made.
    /// Whatever this says, the operator makes none while another NetworkPolicy of the
    /// namespace selects the routers and admits something (the cluster admin's, which it
    /// never widens: policies add up; a default deny, which admits nothing, does not count),
    /// or takes the name `<name>`; the `NetworkPolicy` condition names it. It takes effect
    /// only where the cluster's network plugin enforces NetworkPolicies. A change restarts
    /// no router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<RouterNetworkPolicy>,
}

/// `deploymentPlan.networkPolicy`: whether the operator makes the routers' NetworkPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterNetworkPolicy {
    /// `false`: the operator makes no NetworkPolicy (and deletes the one it made), as when
    /// the cluster has no NetworkPolicy implementation or its admin writes the policies.
    /// Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `deploymentPlan.disruptionBudget`: whether the operator makes the routers'
/// PodDisruptionBudget, and with which bound. At most one of `maxUnavailable` and
/// `minAvailable` (as in a PodDisruptionBudget's spec), neither with `enabled: false`, and
/// neither with placement `Every`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudget {
    /// `false`: the operator makes no PodDisruptionBudget (and deletes the one it made), as
    /// when cluster admins keep their own. Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,

    /// Routers that may be unavailable at once during voluntary disruptions: a count ≥ 0
    /// or a percentage of the routers (`"25%"`, at most `"100%"`). Default 1. Setting it
    /// (or `minAvailable`) makes a budget for one router too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// Routers that must stay available during voluntary disruptions: a count ≥ 0 or a
    /// percentage (`"50%"`, at most `"100%"`). A value equal to the number of routers blocks
    /// every drain (the webhook warns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<IntOrString>,
}

/// A port the router listens on. The same shape serves `listeners`,
/// `interRouterListeners` and `edgeListeners`; the list decides the connection role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Name of the listener: the router entity name and the container and Service port
    /// name. An IANA service name: at most 15 lowercase letters, digits and '-', with at
    /// least one letter, no leading, trailing or double '-'. Unique across all listener
    /// kinds. When absent, ports are named after the number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 15), regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub name: Option<String>,

    /// Address to bind: a host name or an IPv4 or IPv6 literal. Default `0.0.0.0`
    /// (rendered; the stored object keeps it absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub host: Option<String>,

    /// TCP port, 1 to 65535. Required. Unique across all listener kinds and
    /// `deploymentPlan.livenessPort`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// Normal listeners only: connections get role `route-container` (for brokers and
    /// other containers that link routes and auto-links reach) instead of `normal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_container: Option<bool>,

    /// Normal listeners only: accept HTTP (the web console and AMQP over WebSocket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<bool>,

    /// Cost of the inter-router or edge links over this listener, at least 1 (router
    /// default 1). Not used by normal listeners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub cost: Option<i32>,

    /// Name of the entry in `sslProfiles` that secures this listener with TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub ssl_profile: Option<String>,

    /// Space-separated SASL mechanisms accepted, e.g. `EXTERNAL` or `PLAIN SCRAM-SHA-256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub sasl_mechanisms: Option<String>,

    /// Require clients to authenticate (SASL, or a client certificate with EXTERNAL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authenticate_peer: Option<bool>,

    /// Expose the port outside the cluster: an Ingress, or a Route on OpenShift (TLS
    /// passthrough when `sslProfile` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expose: Option<bool>,

    /// Link capacity in deliveries (credit per link), at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub link_capacity: Option<i32>,

    /// Deprecated and ignored. The Go operator's CRD had a boolean `role` on listeners but
    /// never read it; it is accepted so that old manifests still apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<bool>,
}

/// An outgoing connection. The same shape serves `connectors`, `interRouterConnectors`
/// and `edgeConnectors`; the list decides the connection role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Connector {
    /// Name of the connector (the router entity name, which link routes and auto-links
    /// refer to in `connection`). A DNS label: at most 63 lowercase letters, digits and
    /// '-'. Unique across all connector kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub name: Option<String>,

    /// Host to connect to: a host name or an IPv4 or IPv6 literal. Required.
    #[serde(default)]
    #[schemars(length(min = 1, max = 253))]
    pub host: String,

    /// TCP port to connect to, 1 to 65535. Required.
    #[serde(default)]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// Normal connectors only: the connection gets role `route-container` instead of
    /// `normal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_container: Option<bool>,

    /// Cost of the inter-router or edge link, at least 1 (router default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub cost: Option<i32>,

    /// Check that the server certificate matches `host`. When absent the router's default
    /// (true) applies; the Go operator wrote `false` unless this was set, which silently
    /// disabled the check. Set false for peers whose certificate does not name `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_hostname: Option<bool>,

    /// Name of the entry in `sslProfiles` that secures this connection with TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub ssl_profile: Option<String>,

    /// Link capacity in deliveries (credit per link), at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub link_capacity: Option<i32>,
}

/// A TLS profile: certificate, key and trusted CA, taken from Secrets mounted at
/// `/etc/qpid-dispatch-certs/<name>/<secret>/`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SslProfile {
    /// Profile name, referenced by `sslProfile` of listeners and connectors. A DNS label
    /// (at most 63 lowercase letters, digits and '-'). Required and unique.
    #[serde(default)]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub name: String,

    /// Secret with `tls.crt` and `tls.key` (and `ca.crt` when issued by a CA). Default
    /// `<interconnect>-<profile>-credentials`, generated, when both this and `caCert`
    /// are absent or when `mutualAuth` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub credentials: Option<String>,

    /// Secret with the CA certificate that peers must be signed by. Default
    /// `<interconnect>-<profile>-ca`, generated, when `mutualAuth` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub ca_cert: Option<String>,

    /// Have the operator issue `credentials` (signed by this profile's CA when
    /// `mutualAuth`, else by the Interconnect's CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_credentials: Option<bool>,

    /// Have the operator create the CA in Secret `caCert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_ca_cert: Option<bool>,

    /// Peers authenticate each other with certificates from this profile's own CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutual_auth: Option<bool>,

    /// OpenSSL cipher list for TLS 1.2 and lower, e.g. `ECDHE-RSA-AES128-GCM-SHA256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub ciphers: Option<String>,

    /// Space-separated TLS protocols allowed, e.g. `TLSv1.2 TLSv1.3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub protocols: Option<String>,
}

/// Treatment of messages sent to an address space (router entity `address`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Address {
    /// Address prefix the settings apply to. Exactly one of `prefix` and `pattern`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub prefix: Option<String>,

    /// Wildcard pattern (`*` one token, `#` any number of tokens) the settings apply to.
    /// Exactly one of `prefix` and `pattern`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub pattern: Option<String>,

    /// `balanced` (router default), `closest`, `multicast` or `unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Distribution>,

    /// The address is a waypoint: messages go through a broker queue via auto-links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waypoint: Option<bool>,

    /// Ingress phase override, 0 to 9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 9))]
    pub ingress_phase: Option<i32>,

    /// Egress phase override, 0 to 9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 9))]
    pub egress_phase: Option<i32>,

    /// Priority given to messages without one, 0 to 9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 9))]
    pub priority: Option<i32>,

    /// Deliver to fallback destinations when no consumer is reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_fallback: Option<bool>,
}

/// A link the router attaches itself (router entity `autoLink`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoLink {
    /// The address of the node on the remote container. Required.
    #[serde(default)]
    #[schemars(length(min = 1, max = 1024))]
    pub address: String,

    /// `in` (the router receives) or `out` (the router sends). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,

    /// Container id of the target container. At most one of `containerId` and
    /// `connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub container_id: Option<String>,

    /// Name of the connector or listener the link uses. At most one of `containerId` and
    /// `connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub connection: Option<String>,

    /// Address on the remote container, when it differs from `address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub external_address: Option<String>,

    /// Address phase of the link, 0 to 9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 9))]
    pub phase: Option<i32>,

    /// The link serves as the fallback destination of the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<bool>,
}

/// An address space whose link attaches are routed to a container (router entity
/// `linkRoute`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkRoute {
    /// Address prefix routed. Exactly one of `prefix` and `pattern`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub prefix: Option<String>,

    /// Wildcard pattern routed. Exactly one of `prefix` and `pattern`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub pattern: Option<String>,

    /// `in` (client senders) or `out` (client receivers). Required by the router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,

    /// Container id of the target container. At most one of `containerId` and
    /// `connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub container_id: Option<String>,

    /// Name of the connector or listener that reaches the container. At most one of
    /// `containerId` and `connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub connection: Option<String>,

    /// Prefix added to the address on the route-container link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub add_external_prefix: Option<String>,

    /// Prefix removed from the address on the route-container link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub del_external_prefix: Option<String>,
}

/// Most pod names `status.pods` holds: the schema's `maxItems`, which keeps a status
/// write of a large DaemonSet (one router per node) within the API server's bounds.
pub const MAX_STATUS_PODS: usize = 1024;

/// Observed state, written by the controller only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterconnectStatus {
    /// Latest observations, one entry per type (Kubernetes API conventions): `Ready`,
    /// `Available`, `Progressing`, `Degraded`, `SpecValid`, `DisruptionBudget`, `NetworkPolicy` and, while
    /// the controller reads the routers, `MeshConnected` and `ConfigApplied`.
    #[serde(default, deserialize_with = "lenient_conditions")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,

    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Names of the router pods that are not being deleted, in name order: the first
    /// 1,024 when there are more; `podCount` counts them all.
    #[serde(default)]
    #[schemars(length(max = MAX_STATUS_PODS))]
    pub pods: Vec<String>,

    /// Number of router pods that are not being deleted (`pods` names at most 1,024 of
    /// them). Absent in statuses written before this field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_count: Option<i32>,

    /// Routers desired by the workload (nodes, for a DaemonSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Routers whose pods are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Label selector of the router pods in its string form (`application=mesh,...`): the
    /// `labelSelectorPath` of the `scale` subresource, which `kubectl scale` and a
    /// HorizontalPodAutoscaler use (with `.spec.deploymentPlan.size` and `.status.podCount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// Routers running the current configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,

    /// The first 10 hex digits of the SHA-256 of the router configuration the spec renders
    /// to now: a router runs the current configuration when its `routers[].configHash` is
    /// this (condition `ConfigApplied`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,

    /// The mesh as the routers report it, when the controller reads them
    /// (`--observe-mesh=on`, the default; docs/mesh-status.md). Absent when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<MeshStatus>,

    /// What each router pod reports of itself, in pod name order (the first 256: the most
    /// routers the controller reads), when the controller reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STATUS_ROUTERS))]
    pub routers: Vec<RouterStatus>,
}

/// Most router pods one Interconnect's routers are read from, and listed in
/// `status.routers`: a larger mesh is not read (`MeshConnected` `Unknown`/`NotObserved`).
pub const MAX_STATUS_ROUTERS: usize = 256;

/// Most entries of a list of named problems in `status.mesh` (`missingLinks`,
/// `unreachable`): beyond this the lists are cut and the rest counted, so a status never
/// grows with the square of the routers (docs/mesh-status.md, "A status of bounded size").
pub const MAX_STATUS_NAMED: usize = 32;
/// Most bytes of a reason in the status (`routers[].error`, each `mesh.unreachable` reason):
/// longer reasons are cut at a character boundary.
pub const MAX_STATUS_REASON: usize = 128;

/// The mesh of one Interconnect as its routers report it (`status.mesh`). Only what
/// changes when the mesh does: client and delivery counts, which change all the time, are
/// metrics (`qdr_mesh_client_connections`, …), not status, so a busy mesh causes no status
/// writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeshStatus {
    /// One line for `kubectl get`: `3/3 connected`, `2/3 connected` (interior routers in
    /// the largest group that reach each other / interior router pods), `2/2 uplinked`
    /// (edge routers), with `, 1 not answering` when some router did not answer.
    #[schemars(length(max = 256))]
    pub summary: String,
    /// Interior router pods (0 for edge routers).
    pub interiors_expected: i32,
    /// Interior routers in the largest group linked to each other.
    pub interiors_connected: i32,
    /// Edge router pods (0 for interior routers).
    pub edges_expected: i32,
    /// Edge routers with an open uplink to an interior router.
    pub edges_uplinked: i32,
    /// Pairs of interior routers with no open link between them (auto-mesh links every
    /// pair), by router id: the first 32 (`missingLinkCount` counts them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STATUS_NAMED))]
    pub missing_links: Vec<MissingLink>,
    /// How many pairs of interior routers have no open link between them (`missingLinks`
    /// lists at most 32).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missing_link_count: i32,
    /// Routers that are not this Interconnect's pods (another cluster's routers linked by a
    /// Link or an AccessGrant, edge routers of other Interconnects) with which its routers
    /// hold an open inter-router or edge connection, each counted once. Not in `summary`
    /// nor in `MeshConnected`, which are about the Interconnect's own routers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub remote_routers: i32,
    /// Router pods that did not answer, each with why (`mesh-0: no answer within 5s`): the
    /// first 32, then `and N more`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 33), inner(length(max = 512)))]
    pub unreachable: Vec<String>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// Two interior routers with no open link between them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub struct MissingLink {
    /// One router id (a pod name), the lesser of the two.
    #[schemars(length(max = 256))]
    pub from: String,
    /// The other.
    #[schemars(length(max = 256))]
    pub to: String,
}

/// What one router pod reports of itself (`status.routers[]`): counts, not lists, so that
/// the status grows with the routers and not with their pairs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterStatus {
    /// The pod's name.
    pub pod: String,
    /// The node it runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Its router id, as it reports it (the pod name: the operator renders `id: ${HOSTNAME}`);
    /// absent when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub id: Option<String>,
    /// `interior` or `edge`, as it reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub mode: Option<String>,
    /// The router configuration it runs (compare with `status.configHash`): the one whose
    /// addresses, link routes, auto-links, connectors and client listeners it answered it
    /// holds, read back after the controller wrote them into it (absent until it answered);
    /// for a router of an earlier start-up configuration during a roll, or one the
    /// controller cannot write to, the 10-digit suffix of the ConfigMap its pod mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// How many other routers are in its routing table (`router.node`). Lags behind a
    /// router's death by up to a minute: links are judged by the open connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<i32>,
    /// Its open inter-router connections (to this Interconnect's routers and to others'
    /// through `interRouterConnectors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_router_links: Option<i32>,
    /// Its open edge connections: an edge router's uplinks, an interior router's edge routers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge_links: Option<i32>,
    /// An edge router's open uplink: the id of the interior router it opened it to (the
    /// least, should it have several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub uplink: Option<String>,
    /// Why it did not answer (`no answer within 5s`, a refused connection), at most 128
    /// bytes; absent when it answered or was not asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_STATUS_REASON))]
    pub error: Option<String>,
}

/// The schema of `status.conditions`: at most 16 `metav1.Condition`s, of which only `type`
/// is required, as an atomic list. The Go operator wrote an append-only log of `{type,
/// reason, transitionTime}` entries (the same type again on each change), and OLM validates
/// every stored object against a new CRD before it replaces the old one: with
/// `metav1.Condition`'s required fields, or a list keyed by `type`, the upgrade from
/// `qdr-operator.v0.4.0` would be refused. The controller writes full conditions, one per
/// type, replacing the list as a whole (a merge patch of the status).
fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 16,
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string",
                         "description": "The condition's type, e.g. `Ready`."},
                "status": {"type": "string",
                           "description": "`True`, `False` or `Unknown`."},
                "reason": {"type": "string",
                           "description": "One CamelCase word: why the condition is in its status."},
                "message": {"type": "string",
                            "description": "What a person needs to know, in words."},
                "lastTransitionTime": {"type": "string", "format": "date-time",
                                       "description": "When the status last changed."},
                "observedGeneration": {"type": "integer", "format": "int64",
                                       "description": "The `metadata.generation` the condition was set for."}
            }
        }
    })
}

/// Reads `conditions`, dropping entries that are not `metav1.Condition`s: the Go operator
/// wrote `{type, reason, transitionTime}` entries, which must not make its objects
/// unreadable. The controller replaces them on its first status write.
fn lenient_conditions<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Condition>, D::Error> {
    let raw = Option::<Vec<serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    Ok(raw.into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect())
}
