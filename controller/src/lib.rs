//! Reconciles Interconnects into Qpid Dispatch Router workloads.
