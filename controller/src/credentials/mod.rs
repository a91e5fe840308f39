//! TLS credentials for sslProfiles, issued and kept current by the operator with
//! [`qdr_certs::pki`] (where the Go operator asked cert-manager and never renewed anything).
//!
//! What is generated:
//! * the Interconnect's CA, Secret `<name>-ca` (or the Secret named by
//!   `deploymentPlan.issuer`, which is used and never written);
//! * for a profile with `generateCaCert`: its own CA in Secret `caCert`;
//! * for a profile with `generateCredentials`: a certificate in Secret `credentials`, signed
//!   by the profile's CA when `mutualAuth`, else by the Interconnect's CA, for the Service's
//!   names (`<name>`, `<name>.<ns>`, `<name>.<ns>.svc`, `<name>.<ns>.svc.cluster.local`; no
//!   name with an empty domain, unlike the Go operator), with the signer's trust bundle as
//!   `ca.crt`.
//!
//! Generated Secrets carry [`GENERATED_LABEL`] and a controller owner reference to the
//! Interconnect; only those are ever rewritten. A Secret the spec names that exists without
//! them is user-provided: read and mounted, never written, renewed or deleted.
//!
//! ## Lifecycle ([`plan()`], pure, at most one CA step per CA and pass)
//! * **Renew**: a generated certificate past [`RENEW_FRACTION`](lifetimes::RENEW_FRACTION) of its lifetime, not signed
//!   by its signer's key (checked by signature, so a CA re-keyed under the same name counts
//!   as a new signer), not a certificate, or whose key does not match, is re-issued (new key).
//! * **CA rotation with overlap**, for a generated CA past [`RENEW_FRACTION`](lifetimes::RENEW_FRACTION) of its life:
//!   1. *stage*: a next CA is made (`next.crt`/`next.key`) and added to the trust bundle
//!      (`ca.crt` = active + next); every leaf gets the new bundle as its `ca.crt`;
//!   2. *promote*, once every leaf carries that bundle, the routers run it (rolled out) and
//!      [`Lifetimes::overlap`] has passed since the stage: the next CA becomes active; leaves
//!      are re-signed by it (still trusting both);
//!   3. *retire*, once every leaf is signed by the active CA, rolled out, and the overlap has
//!      passed since the promotion: the old CA leaves the bundle, and the leaves' `ca.crt`
//!      follow.
//!
//!   The time of the last step is the Secret's [`STEP_AT`] annotation; each step is a
//!   [`CredentialChange`] that gives the earliest date of the next, for the owners of
//!   clients outside the Interconnect that trust the bundle or hold certificates of the CA.
//! * **A lost CA** (its Secret deleted, `tls.key` removed or not matching `tls.crt`, `tls.crt`
//!   not a CA certificate) whose certificate is still valid in the leaves' `ca.crt` (or its
//!   own): the same three steps, starting from a stage that keeps the old certificate trusted
//!   (the new pair is staged as both `tls.*` and `next.*`, and signs nothing until the
//!   promotion). With nothing left to keep trusted (an expired CA, nothing issued yet) a new
//!   CA replaces it at once.
//!
//! A router never has to accept a peer certificate from a CA it does not trust yet: a new
//! CA is trusted everywhere before it signs, and the old one is trusted until nothing it
//! signed is served.
//!
//! * **A root for CAs other sites trust** ([`root`]): a CA that an AccessGrant's listener
//!   offers gets a long-lived root that cross-signs each of its generations; its leaves are
//!   served with that certificate as their chain, and tokens carry the root, so a linked
//!   site keeps verifying the routers across every rotation.

#[cfg(test)]
mod tests;

mod change;
mod inspect;
mod issue;
mod lifetimes;
mod plan;
mod root;
mod rotate;
pub mod seal;
mod secrets;
mod work;

pub(crate) use change::CredentialChange;
pub(crate) use inspect::{bundle, earliest_expiry, is_signed_by, key_of, not_after, signer_and_trust};
pub(crate) use lifetimes::EXPIRY_WARNING;
pub use lifetimes::{CA_LIFETIME, CERT_LIFETIME, Lifetimes, OVERLAP_DIVISOR};
pub(crate) use plan::{generated, plan};
pub(crate) use root::root_of;
pub use root::{ROOT_CRT, ROOT_LIFETIME};
pub use secrets::STEP_AT;
pub(crate) use secrets::{Data, Existing, GENERATED_LABEL, as_is, is_generated, is_generated_by};
pub(crate) use work::{CredentialsError, Routers};
