//! The text of every rule that both the API server (a CEL rule in [`crate::rules`]) and
//! [`crate::validate`] enforce, written once so the two can never drift apart. Messages
//! follow the apimachinery vocabulary: lower case, no trailing period, "must", and what to
//! do about it. A message that names a list is a function of the list's JSON name.

/// `deploymentPlan`: `placement: Every` with a `size` other than 1 (CEL `every-without-size`).
/// Size 1 is accepted (and ignored, with a warning): the Go operator wrote it as the default
/// of every Interconnect, `Every` ones included.
pub const EVERY_WITHOUT_SIZE: &str = "size must not be set with placement Every (a DaemonSet runs one router on \
                                      every node; only size 1, the Go operator's default, is accepted and ignored): \
                                      remove size, or use placement Any or AntiAffinity";

/// An edge router with entries in `list` (CEL `edge-without-*`).
pub fn edge_forbids(list: &str) -> String {
    format!(
        "an edge router (deploymentPlan.role: edge) cannot have {list}: remove them, or use role interior"
    )
}

/// An interior router with `edgeConnectors` (CEL `interior-without-edge-connectors`).
pub const INTERIOR_WITHOUT_EDGE_CONNECTORS: &str = "an interior router (deploymentPlan.role absent or interior) \
                                                    cannot have edgeConnectors: use interRouterConnectors, or set \
                                                    role edge";

/// A listener port used twice (CEL `listener-ports-unique`; `validate` adds which port
/// and where it is first used).
pub const LISTENER_PORTS_UNIQUE: &str = "listener ports must be unique across listeners, interRouterListeners, \
                                         edgeListeners and deploymentPlan.livenessPort";

/// A listener name used twice (CEL `listener-names-unique`).
pub const LISTENER_NAMES_UNIQUE: &str =
    "listener names must be unique across listeners, interRouterListeners and edgeListeners";

/// A connector name used twice (CEL `connector-names-unique`).
pub const CONNECTOR_NAMES_UNIQUE: &str =
    "connector names must be unique across connectors, interRouterConnectors and edgeConnectors";

/// What follows a reference to an undefined sslProfile (CEL `ssl-profile-defined`).
pub const SSL_PROFILE_UNDEFINED_HINT: &str =
    "(only 'default' and 'inter-router' are added automatically): add the profile or correct the name";

/// An sslProfile name used twice (CEL `ssl-profile-names-unique`).
pub const SSL_PROFILE_NAMES_UNIQUE: &str = "sslProfile names must be unique: rename or merge the duplicate";

/// `addresses[]` and `linkRoutes[]` (CEL `prefix-xor-pattern`).
pub const PREFIX_XOR_PATTERN: &str = "exactly one of prefix and pattern must be set";

/// `linkRoutes[]` and `autoLinks[]` (CEL `container-id-xor-connection`).
pub const CONTAINER_ID_XOR_CONNECTION: &str = "containerId and connection are mutually exclusive (the router \
                                               would drop the entry): set at most one";

/// A listener name that is not an IANA service name (CEL `listener-name-iana`; each adds
/// the part of the rule it checks).
pub const LISTENER_NAME_IANA: &str = "must be an IANA service name (it names the container and Service port)";

/// `users` that is neither a Secret name nor `none` (CEL `users-secret-name`).
pub const USERS_SECRET_NAME: &str =
    "must be the name of a Secret (lowercase letters, digits, '-' and '.') or 'none' for no SASL users";

/// A configuration value with a NUL character (CEL `config-no-nul`). The configuration is
/// JSON, so every other character arrives as written; the router keeps its values as C
/// strings, which end at the first NUL.
pub const CONFIG_NUL: &str =
    "must not contain the NUL character: the router keeps configuration values as C strings, which end there";

/// Validate-only (no CEL rule: it depends on how the controller names container ports): a
/// named listener takes `port-<N>`, the container-port name of the unnamed listener on N.
pub const GENERATED_PORT_NAME_TAKEN: &str = "this is the container port name given to the unnamed listener on \
                                             that port: choose another name, or name that listener";

/// Name of the health listener the controller renders into every configuration.
pub const HEALTH_LISTENER: &str = "health-and-stats";

/// A name shared by entities of different kinds (CEL `entity-names-unique`): qdrouterd 1.19
/// refuses to start when two configuration entities of any type share a `name` ("sslProfile
/// 'amqps' duplicates unique attribute 'name' from existing listener 'amqps'").
pub const ENTITY_NAMES_UNIQUE: &str = "names must be unique across listeners, connectors and sslProfiles of every \
                                       kind and must not be 'health-and-stats' (the router refuses two \
                                       configuration entities with the same name): rename one";

/// The start of every name the operator gives a router entity of its own: its management
/// listener and sslProfile, its inter-router connectors (`qdr-operator-mesh-<router>`) and
/// the names of addresses, link routes, auto-links and unnamed listeners and connectors it
/// writes to running routers (`qdr-operator-<kind>-<hash>`).
pub const RESERVED_NAME_PREFIX: &str = "qdr-operator-";

/// A listener, connector or sslProfile name in the operator's own names (CEL
/// `reserved-names`): the controller deletes from the routers, or never deletes, entities by
/// these names, and its management listener and profile take two of them.
pub const RESERVED_NAME: &str = "names starting with 'qdr-operator-' are the operator's own (its management listener \
                                 and profile, its inter-router connectors, the entities it names): choose another name";

/// Validate-only text (the CRD checks the format with a schema pattern): a `resources` value
/// that is not a Kubernetes quantity; the apply of the Deployment would fail with 422.
pub const RESOURCES_QUANTITY: &str = "every resources.limits and resources.requests value must be a Kubernetes \
                                      quantity (such as 500m, 1.5, 128Mi or 2Gi)";

/// Validate-only (a CEL `quantity()` comparison exceeds the API server's cost budget on
/// int-or-string values): a request above its limit.
pub const REQUESTS_WITHIN_LIMITS: &str =
    "every resources.requests value must be less than or equal to the limit of the same resource";

/// `deploymentPlan.disruptionBudget`: both bounds set (a PodDisruptionBudget takes one; API
/// server policy validation).
pub const BUDGET_ONE_OF: &str = "minAvailable and maxUnavailable cannot both be set";
/// `deploymentPlan.disruptionBudget`: a bound with `enabled: false`.
pub const BUDGET_DISABLED_WITH_BOUND: &str =
    "maxUnavailable and minAvailable may not be set with enabled: false (no budget is made)";
/// `deploymentPlan.disruptionBudget`: a bound with placement `Every`.
pub const BUDGET_WITH_EVERY: &str = "maxUnavailable and minAvailable may not be set with placement Every: a \
     DaemonSet's routers get no budget (kubectl drain --ignore-daemonsets leaves them running, and the disruption \
     controller cannot count a DaemonSet's pods)";
