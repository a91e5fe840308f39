//! The operator's own way into the routers (docs/mesh-status.md): a listener on
//! [`MANAGEMENT_PORT`] that requires TLS and verifies the client's certificate against the
//! CA of the generated mutual-auth sslProfile [`MANAGEMENT_PROFILE`]. The profile is added
//! to the effective spec in memory ([`crate::validated::ValidatedInterconnect::with_management`]),
//! so its CA and the routers' certificate are generated, renewed and rotated like every
//! other generated profile's; the listener is added to the rendered configuration
//! ([`qdr_api::router_config::RouterConfig::with_management_listener`]).
//!
//! The controller's client certificate is issued in memory from that CA (never stored),
//! for [`CLIENT_LIFETIME`], for each read ([`tls`]). It verifies the routers' certificates
//! against the same bundle, for the Service name `<name>.<namespace>.svc` (a name every
//! generated router certificate holds), while it connects to each pod's IP.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use qdr_certs::pki::{CertKey, new_leaf};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

use crate::credentials::{Data, signer_and_trust};
pub use qdr_api::router_config::{MANAGEMENT_PORT, MANAGEMENT_PROFILE};

/// Lifetime of the controller's client certificate: one hour, made again at 2/3.
pub const CLIENT_LIFETIME: Duration = Duration::from_secs(3600);
/// The client certificate's name (its CN and only DNS name).
pub const CLIENT_NAME: &str = "qdr-operator";

pub use qdr_api::router_config::{
    management_ca_secret as ca_secret, management_credentials_secret as credentials_secret,
};

/// How to reach one Interconnect's routers over TLS.
#[derive(Clone)]
pub struct Tls {
    /// The client configuration: the controller's certificate, the routers' CA bundle.
    pub config: Arc<rustls::ClientConfig>,
    /// The name the routers' certificates are verified for (`<name>.<namespace>.svc`).
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

/// A client configuration with a certificate signed by `signer` (valid from `now` for
/// [`CLIENT_LIFETIME`]) that trusts the CAs of `trust` (PEM).
///
/// # Errors
/// Why it could not be made (a CA that does not parse, a key rustls refuses), as text for
/// the condition's message.
pub fn client_config(signer: &CertKey, trust: &str, now: SystemTime) -> Result<rustls::ClientConfig, String> {
    let leaf = new_leaf(signer, &[CLIENT_NAME.to_string()], now, CLIENT_LIFETIME)
        .map_err(|e| format!("issuing the client certificate: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(trust.as_bytes()) {
        let der = der.map_err(|e| format!("the management CA bundle: {e}"))?;
        roots.add(der).map_err(|e| format!("the management CA bundle: {e}"))?;
    }
    let chain = vec![CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).map_err(|e| e.to_string())?];
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("the client certificate: {e}"))?;
    // One configuration serves one read of one Interconnect's routers: a session cache would
    // never be used, and rustls's default one (256 entries) allocates its tables up front,
    // held by every read waiting for a connection slot: 7.4 MB at the peak of 2,000
    // Interconnects read at once (heaptrack).
    let mut config = config;
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

/// The TLS client for one read of an Interconnect's routers, whose certificates hold
/// `server_name`, from its management CA Secret's data `ca`, at `now`. Made for each read
/// (a key pair and a signature) and dropped after it: kept
/// for every Interconnect they took about 11 KB each, 23 MB at 2,000 Interconnects, to save
/// work that reads at rest do a few times a second (docs/mesh-status.md, "Cost at scale").
///
/// # Errors
/// Why there is none: the CA cannot sign now (it is being recovered), or [`client_config`]
/// failed.
pub fn tls(server_name: &str, ca: &Data, now: SystemTime) -> Result<Tls, String> {
    let (signer, trust) = signer_and_trust(ca, now)
        .ok_or_else(|| "the management CA cannot sign now (it is being replaced)".to_string())?;
    let config = client_config(&signer, &trust, now)?;
    let server_name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    Ok(Tls { config: Arc::new(config), server_name })
}
