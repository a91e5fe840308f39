//! The qdr-operator admission webhook: `POST /mutate` applies [`qdr_api::defaults`] as a
//! JSON Patch, `POST /validate` answers with every [`qdr_api::validate`] violation in the
//! API server's own error shape, plus warnings for risky specs. TLS comes from
//! [`qdr_certs`]: a self-managed, rotating certificate in a Secret, or files.
//!
//! * [`admission`]: the pure review handler (AdmissionReview bytes in, `AdmissionResponse`
//!   out), reading objects through [`decode`] (one bounded copy);
//! * [`authorize`]: Secret references checked as the requesting user (SubjectAccessReview);
//! * [`fair`]: the review lanes' semaphore, served round-robin by peer address;
//! * [`ratchet`]: which violations of an UPDATE were already stored (by item identity);
//! * [`server`]: the HTTP routes, health and metrics ([`metrics`]);
//! * `validate_command` (feature `validate-command`): the offline `qdr-validate` command.

pub mod admission;
pub mod authorize;
pub mod decode;
pub mod fair;
pub mod metrics;
pub mod ratchet;
pub mod server;
#[cfg(feature = "validate-command")]
pub mod validate_command;

pub use admission::{Outcome, Reply, Webhook, handle};
