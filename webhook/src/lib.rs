//! Validating and defaulting admission webhook for Interconnects.
