//! The Interconnect API (interconnectedcloud.github.io/v1alpha1): types, CRD generation, defaults and validation.
