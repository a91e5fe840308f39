//! The qdr-operator controller: reconciles valid Interconnects into Qpid Dispatch Router
//! workloads.
//!
//! * [`validated`]: the Interconnect being built (defaulted and validated); [`labels`]: every
//!   label key the children carry;
//! * [`builders`] (pure, one function per child), [`router_config`] (the typed
//!   `qdrouterd.conf`), `credentials` (generated CAs and certificates, renewal and CA
//!   rotation), `references` (the Secrets a spec depends on), [`keys`] (users' keys and
//!   certificates judged with OpenSSL, as the router reads them), [`route`] (OpenShift Routes);
//! * [`reconcile`]: one pass as stages (observe, build, apply, status, events);
//! * `cache`: what is watched and cached, and which events wake a reconcile;
//! * [`runtime`]: the kube-runtime controller and [`runtime::run_while_leading`];
//! * [`recorder`]: Kubernetes Events, a series only for identical messages;
//! * [`lease`]: Lease-based leader election, [`fence`]: writes fenced to the term; [`metrics`]: Prometheus metrics; [`health`]:
//!   what `/readyz` and `/livez` answer.
//!
//! Public are the modules the `qdr-controller` binary, the benchmarks and the integration
//! tests use; the rest is `pub(crate)`, tested by `#[cfg(test)]` modules beside the code.

pub mod builders;
pub(crate) mod cache;
pub mod credentials;
pub mod fence;
pub mod grants;
pub mod hash_key;
pub mod health;
pub mod human;
pub mod keys;
pub mod labels;
pub mod lease;
pub(crate) mod managed_fields;
pub mod mesh;
pub mod metrics;
pub mod reasons;
pub mod reconcile;
pub mod recorder;
pub(crate) mod references;
pub mod route;
pub mod runtime;
pub mod server_version;
pub mod site_links;
pub mod validated;
