//! Every label key (and the managed-by value) the controller writes or selects on, in one
//! place.
//!
//! `application` and `interconnect_cr` are the Go operator's pod selector, kept unchanged so
//! that the Deployments it wrote (whose selector is immutable) can be taken over; the
//! `app.kubernetes.io/*` keys are the Kubernetes recommended labels
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/>).

/// Selector label of the Go operator: `application=<interconnect name>`.
pub const APPLICATION: &str = "application";
/// Selector label of the Go operator: `interconnect_cr=<interconnect name>`. Router pods are
/// watched through it.
pub const INTERCONNECT: &str = "interconnect_cr";
/// `app.kubernetes.io/name`: always [`NAME_VALUE`].
pub const NAME: &str = "app.kubernetes.io/name";
/// The value of [`NAME`]: the application the children run.
pub const NAME_VALUE: &str = "qdrouterd";
/// `app.kubernetes.io/instance`: the Interconnect's name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/component`: always [`COMPONENT_VALUE`].
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// The value of [`COMPONENT`].
pub const COMPONENT_VALUE: &str = "router";
/// `app.kubernetes.io/managed-by`: every child carries it with [`MANAGED_BY`], and the
/// owned-kind watches select on it alone.
pub const MANAGED_BY_KEY: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_KEY`] on every child.
pub const MANAGED_BY: &str = "qdr-operator";

/// The label selector of the owned-kind watches: `app.kubernetes.io/managed-by=qdr-operator`.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_KEY}={MANAGED_BY}")
}
