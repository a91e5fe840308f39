//! Pure builders: one function per child object of an Interconnect, from its [`ValidatedInterconnect`]
//! (defaulted and validated). No I/O, no clock: what they return is server-side applied as
//! is. Every object is a k8s-openapi struct built field by field, so a misspelled field
//! does not compile.
//!
//! Names, labels and pod shape follow the Go operator (docs/controller.md, "Objects for an
//! Interconnect") with its bugs fixed:
//! every object carries the labels and an owner reference; volume names are generated, so
//! two profiles sharing a Secret do not collide; the Deployment and the DaemonSet share one
//! pod template; `users: none` means no SASL Secret, ConfigMap, mounts or environment; the
//! anti-affinity selects on both labels; the pod template carries a hash of the config.

#[cfg(test)]
mod tests;

mod annotations;
mod config;
mod disruption;
mod exposure;
mod network;
mod pod;
mod rbac;
mod service;
mod settings;
mod workload;

pub use annotations::*;
pub use config::*;
pub use disruption::*;
pub use exposure::*;
pub use network::*;
pub use pod::*;
pub use rbac::*;
pub use service::*;
pub use settings::*;
pub use workload::*;
