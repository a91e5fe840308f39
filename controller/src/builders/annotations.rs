//! The annotations and the pod condition the builders write on the pod template, and
//! [`Roll`], what the template keeps of why the routers last rolled.

/// Pod-template annotation holding the start-up hash of the rendered config
/// ([`Rendered::startup_hash`](qdr_api::router_config::Rendered::startup_hash)): a change rolls the routers.
pub const CONFIG_HASH: &str = "qdr-operator.io/config-hash";
/// Pod-template annotation holding the fingerprint of every mounted Secret
/// ([`crate::references::fingerprint`]): a renewed certificate, a rotated CA or a changed
/// users Secret rolls the routers, which read these files only at start.
pub const CREDENTIALS_HASH: &str = "qdr-operator.io/credentials-hash";
/// Pod-template annotation holding [`Rendered::startup_fields`](qdr_api::router_config::Rendered::startup_fields): the digest, by spec
/// field, of what [`CONFIG_HASH`] covers. It changes only with that hash (so it rolls
/// nothing by itself), and names the fields a change of it came from
/// ([`qdr_api::router_config::live::changed_fields`]).
pub const CONFIG_FIELDS: &str = "qdr-operator.io/config-fields";
/// Pod-template annotation naming what last changed [`CONFIG_HASH`] (`spec.edgeListeners`,
/// `spec.deploymentPlan.role, spec.sslProfiles`, or `the router configuration` when the
/// template before did not say): set when that hash changes, kept until it changes again,
/// so it rolls nothing by itself. The `ConfigChanged` Event and the `ConfigApplied`
/// condition of a roll say it (docs/live-configuration.md).
pub const CONFIG_ROLLED_BY: &str = "qdr-operator.io/config-rolled-by";
/// Pod-template annotation naming the configuration (the first 10 hex digits of
/// [`Rendered::hash`](qdr_api::router_config::Rendered::hash), as `status.configHash`) that the routers were rolled for because
/// a router refused it while running at [`crate::reconcile::LIVE_TRIES`] visits in a row;
/// absent until that happens, then kept, so the routers roll once
/// for each such configuration and never back (docs/live-configuration.md, "When a router
/// refuses").
pub const RESTARTED_FOR: &str = "qdr-operator.io/restarted-for-config";
/// Pod-template annotation saying its pods carry the readiness gate [`LINKED`]: set on a
/// new workload's template, and on an existing one's only when it rolls for another reason,
/// so upgrading rolls no router for the gate alone.
pub const READINESS_GATE: &str = "qdr-operator.io/readiness-gate";
/// The pod condition the controller sets once a router holds its links
/// ([`crate::mesh::linked`]): the readiness gate that makes Ready mean linked.
pub const LINKED: &str = "qdr-operator.io/linked";

/// Why the routers last rolled, as the pod template keeps it ([`CONFIG_ROLLED_BY`],
/// [`RESTARTED_FOR`]), and whether it carries the readiness gate ([`READINESS_GATE`]):
/// worked out by the build stage from the workload it observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roll {
    /// The [`CONFIG_ROLLED_BY`] value.
    pub rolled_by: Option<String>,
    /// The [`RESTARTED_FOR`] value.
    pub restarted_for: Option<String>,
    /// Whether the pods get the readiness gate [`LINKED`] (when they have the operator's
    /// management listener, through which the controller links and reads them).
    pub gated: bool,
}
