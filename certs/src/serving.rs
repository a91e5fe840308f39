//! The certificate a TLS server presents, swappable at run time with no restart.

use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::error::Error;
use crate::pki::{CertInfo, certs_der};

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    cert_pem: String,
    info: CertInfo,
}

/// A `rustls` certificate resolver whose certificate can be replaced while the server runs:
/// new handshakes get the new certificate, established connections keep theirs.
#[derive(Debug, Default)]
pub struct CertResolver {
    current: RwLock<Option<Current>>,
}

impl CertResolver {
    /// An empty resolver (handshakes fail until [`Self::set`] succeeds).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Serves `cert_pem` (leaf first, then any chain) with `key_pem`. Returns whether the
    /// served certificate changed. On error the previous certificate stays (last good).
    ///
    /// # Errors
    /// [`Error::Certificate`] when the PEM does not parse or the key type is unsupported.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<bool, Error> {
        if self.cert_pem().as_deref() == Some(cert_pem) {
            return Ok(false);
        }
        let chain: Vec<CertificateDer<'static>> =
            certs_der(cert_pem)?.into_iter().map(CertificateDer::from).collect();
        if chain.is_empty() {
            return Err(Error::Certificate("no certificate in tls.crt".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| Error::Certificate(format!("bad private key: {e}")))?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| Error::Certificate(format!("unsupported private key: {e}")))?;
        let certified = CertifiedKey::new(chain, signing);
        certified
            .keys_match()
            .map_err(|e| Error::Certificate(format!("key does not match certificate: {e}")))?;
        let info = CertInfo::parse(cert_pem)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) =
            Some(Current { key: Arc::new(certified), cert_pem: cert_pem.to_string(), info });
        Ok(true)
    }

    /// The PEM of the certificate being served.
    pub fn cert_pem(&self) -> Option<String> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|c| c.cert_pem.clone())
    }

    /// When the served certificate expires.
    pub fn not_after(&self) -> Option<SystemTime> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|c| c.info.not_after)
    }

    /// A `rustls` server configuration (TLS 1.2 and 1.3, ring, no client auth, ALPN h2 and
    /// http/1.1) that resolves through this resolver.
    pub fn server_config(self: &Arc<Self>) -> rustls::ServerConfig {
        self.server_config_with(None).expect("no client verifier to build")
    }

    /// As [`CertResolver::server_config`], and when `client_cas` is given, every client must
    /// present a certificate that one of those CAs signed, valid for client authentication
    /// (the handshake fails otherwise). Errors: `client_cas` holds no usable CA.
    pub fn server_config_with(
        self: &Arc<Self>,
        client_cas: Option<rustls::RootCertStore>,
    ) -> Result<rustls::ServerConfig, rustls::server::VerifierBuilderError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        let builder = match client_cas {
            None => builder.with_no_client_auth(),
            Some(roots) => builder.with_client_cert_verifier(
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()?,
            ),
        };
        let mut cfg = builder.with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|c| c.key.clone())
    }
}

/// Files mode: serves `<dir>/tls.crt` and `<dir>/tls.key` (as cert-manager or any other tool
/// writes them, including a kubelet Secret volume's `..data` symlink swap) and reloads them
/// whenever their contents change, checking every `interval`. Runs until dropped.
pub async fn watch_files(
    dir: std::path::PathBuf,
    resolver: Arc<CertResolver>,
    interval: std::time::Duration,
) {
    let mut last = (String::new(), String::new());
    loop {
        let cert = std::fs::read_to_string(dir.join("tls.crt")).unwrap_or_default();
        let key = std::fs::read_to_string(dir.join("tls.key")).unwrap_or_default();
        if (cert.as_str(), key.as_str()) != (last.0.as_str(), last.1.as_str())
            && !cert.is_empty()
            && !key.is_empty()
        {
            match resolver.set(&cert, &key) {
                Ok(true) => tracing::info!(dir = %dir.display(), "loaded serving certificate from files"),
                Ok(false) => {}
                // A half-written pair is retried on the next tick; the last good one is kept.
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "keeping the previous certificate")
                }
            }
            last = (cert, key);
        }
        tokio::time::sleep(interval).await;
    }
}
