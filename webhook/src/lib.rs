//! The qdr-operator admission webhook: `POST /mutate` applies [`qdr_api::defaults`] as a
//! JSON Patch, `POST /validate` answers with every [`qdr_api::validate`] violation in the
//! API server's own error shape, plus warnings for risky specs. TLS comes from
//! [`qdr_certs`]: a self-managed, rotating certificate in a Secret, or files.

pub mod admission;
pub mod metrics;
pub mod offline;
pub mod server;

pub use admission::{Operation, Outcome, Reply, handle};
