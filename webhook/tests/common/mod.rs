//! Helpers of the webhook's integration tests: the workspace's processes come from
//! [`qdr_tests::components`]; the TLS probes are the webhook's own.
#![allow(dead_code, unused_imports)]

use std::net::TcpStream;
use std::time::Duration;

pub use qdr_tests::components::{
    Registration, Replica, free_port, http_get, install, kubectl_stdin, label_namespace, register,
    start_replica, wait_admission_works, wait_ready,
};

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Accepts any server certificate: the prober only wants to see which one is served.
#[derive(Debug)]
pub struct SeeAnyCert;

impl ServerCertVerifier for SeeAnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
    }
}

/// The leaf certificate `127.0.0.1:port` serves right now.
pub fn served_leaf(port: u16, cfg: &Arc<rustls::ClientConfig>) -> Option<Vec<u8>> {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut conn =
        rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("127.0.0.1").ok()?).ok()?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).ok()?;
    }
    conn.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec())
}

/// A TLS client configuration that records whatever certificate the server presents.
pub fn see_any_cert() -> Arc<rustls::ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Arc::new(
        rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SeeAnyCert))
            .with_no_client_auth(),
    )
}
