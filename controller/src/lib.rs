//! The qdr-operator controller: reconciles valid Interconnects into Qpid Dispatch Router
//! workloads.

pub mod builders;
pub mod config;
pub mod credentials;
pub mod lease;
pub mod metrics;
pub mod reconcile;
