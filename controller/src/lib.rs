//! The qdr-operator controller: reconciles valid Interconnects into Qpid Dispatch Router
//! workloads.

pub mod config;
