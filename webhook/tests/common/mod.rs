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

/// A webhook replica serving one labelled namespace of `cp`.
pub struct Served {
    /// The namespace the webhook admits (labelled for the registration).
    pub ns: String,
    /// The namespace of the webhook's Secret.
    pub webhook_ns: String,
    /// The webhook configurations.
    pub reg: Registration,
    /// The running replica.
    pub replica: Replica,
}

/// Installs the CRD, registers webhook configurations named after `label` for a new
/// namespace `label-…`, starts one replica with `extra` arguments and waits until the API
/// server calls it.
pub async fn serve(cp: &'static qdr_tests::ControlPlane, label: &str, extra: &[&str]) -> Served {
    cp.install_crd().await;
    let client = cp.client().await.unwrap();
    let webhook_ns = cp.namespace("webhook-system").await.name.clone();
    let ns = cp.namespace(label).await.name.clone();
    let port = free_port();
    let reg = register(&client, label, port, port).await;
    label_namespace(cp, &ns, label);
    let replica = start_replica(cp, &webhook_ns, &reg, port, extra);
    wait_ready(&replica, Duration::from_secs(60)).await;
    wait_admission_works(cp, &ns, Duration::from_secs(60)).await;
    Served { ns, webhook_ns, reg, replica }
}

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

/// POSTs `body` to `path` on `127.0.0.1:port` over TLS with `cfg` (HTTP/1.1, one request per
/// connection); the response's HTTP status, or why there is none (a refused handshake shows
/// as the read error of TLS 1.3's alert).
pub fn post(port: u16, cfg: &Arc<rustls::ClientConfig>, path: &str, body: &[u8]) -> Result<u16, String> {
    use std::io::{Read, Write};
    let sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("127.0.0.1").unwrap())
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    tls.write_all(body).map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let read = tls.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    match text.split(' ').nth(1).and_then(|s| s.parse().ok()) {
        Some(status) => Ok(status),
        None => Err(read.err().map_or_else(|| format!("no status line: {text:.80}"), |e| e.to_string())),
    }
}
