//! Self-managed TLS: an ECDSA P-256 CA and serving certificates made with rcgen, kept in one
//! Secret, rotated before expiry with overlapping trust, served by hot-swapping a rustls
//! resolver, and the `caBundle` of the webhook configurations kept right by server-side
//! apply.
//!
//! * [`Error`] (`error`): why a certificate operation failed, shared by all of them.
//! * [`pki`]: making, parsing and verifying certificates.
//! * [`rotation`]: the pure state machine (create, stage, promote, retire, renew).
//! * [`store`]: the Secret and its encoding, written with optimistic concurrency.
//! * [`manager`]: the per-replica driver against the API.
//! * [`serving`]: the swappable rustls certificate resolver, and a files mode.
//!
//! The router credentials of the controller reuse [`pki`].

mod error;
pub mod manager;
pub mod pki;
pub mod rotation;
pub mod serving;
pub mod store;

pub use error::Error;
pub use manager::{CA_BUNDLE_MANAGER, CertManager, WebhookConfiguration};
pub use rotation::{Material, Policy, Step};
pub use serving::CertResolver;
