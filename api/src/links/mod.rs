//! Links across clusters (design: `docs/multi-cluster.md`): the [`AccessGrant`] kind (the
//! offering cluster lets one named site in and issues its token), the token Secret's layout
//! ([`token`]), and the [`Link`] kind (the using cluster dials out with the token).
//!
//! ```text
//! cluster A                                   cluster B
//! AccessGrant site-b ──controller──▶ Secret <grant>-token ──(admin copies)──▶ Secret
//!   (interior Interconnect hub)       ca.crt, tls.crt/key for site-b           ▲
//!                                     endpoints, role, expiry                  │
//!                                                                 Link ────────┘
//!                                                                   interconnect: spoke
//! hub's routers ◀──────────── TLS, SASL EXTERNAL, site-b's cert ── spoke's routers
//! ```
//!
//! Only the token and TCP cross between the clusters: B's controller has no credentials for
//! A, and A's CA key never leaves A.

mod crd;
pub mod site;
pub mod token;
mod types;
mod validate;

pub use crd::{GRANT_CRD_PATH, LINK_CRD_PATH, cel_rules, crd_yaml_of, grant_crd, link_crd};
pub use types::*;
pub use validate::{
    EXPIRY_FORMAT, MAX_EXPIRY_SECONDS, MAX_SITE, SITE_FORMAT, expiry_seconds, is_host, validate_grant,
    validate_link, validate_link_refs,
};

#[cfg(test)]
mod tests;
