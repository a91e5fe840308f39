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
    serve_program(&qdr_tests::components::binary("qdr-webhook"), cp, label, extra).await
}

/// [`serve`] with the webhook binary at `program` (the flood tests run the release binary
/// the image holds, so their memory figures are the image's).
pub async fn serve_program(
    program: &std::path::Path,
    cp: &'static qdr_tests::ControlPlane,
    label: &str,
    extra: &[&str],
) -> Served {
    cp.install_crd().await;
    let client = cp.client().await.unwrap();
    let webhook_ns = cp.namespace("webhook-system").await.name.clone();
    let ns = cp.namespace(label).await.name.clone();
    let port = free_port();
    let reg = register(&client, label, port, port).await;
    label_namespace(cp, &ns, label);
    let replica = qdr_tests::components::start_replica_of(program, cp, &webhook_ns, &reg, port, extra);
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
    post_from(None, port, cfg, path, body)
}

/// [`post`] from the local address `from` (a loopback address of its own, as a pod has an
/// address other than the API server's), or any when `None`.
pub fn post_from(
    from: Option<std::net::Ipv4Addr>,
    port: u16,
    cfg: &Arc<rustls::ClientConfig>,
    path: &str,
    body: &[u8],
) -> Result<u16, String> {
    use std::io::{Read, Write};
    let sock = match from {
        None => TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?,
        Some(ip) => {
            use socket2::{Domain, SockAddr, Socket, Type};
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).map_err(|e| e.to_string())?;
            s.bind(&SockAddr::from(std::net::SocketAddr::from((ip, 0)))).map_err(|e| e.to_string())?;
            s.connect(&SockAddr::from(std::net::SocketAddr::from(([127, 0, 0, 1], port))))
                .map_err(|e| e.to_string())?;
            TcpStream::from(s)
        }
    };
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

/// One HTTP/2 connection from `from` (a loopback address of its own) to the admission port
/// on 127.0.0.1, posting `body(i)` to `path` on `streams` concurrent streams until `stop`;
/// every answer's status (or error) is pushed to `statuses`. As a pod can, it keeps as many
/// reviews in flight as the server's stream limit allows.
pub async fn h2_flood(
    from: std::net::Ipv4Addr,
    port: u16,
    path: &'static str,
    streams: usize,
    body: Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    statuses: Arc<std::sync::Mutex<Vec<Result<u16, String>>>>,
) -> Result<(), String> {
    use std::sync::atomic::Ordering;
    let sock = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    sock.bind(std::net::SocketAddr::from((from, 0))).map_err(|e| e.to_string())?;
    let tcp =
        sock.connect(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await.map_err(|e| e.to_string())?;
    let mut cfg = (*see_any_cert()).clone();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut tasks = Vec::new();
    for s in 0..streams {
        let (mut sender, body, stop, statuses) =
            (sender.clone(), body.clone(), stop.clone(), statuses.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = s;
            while !stop.load(Ordering::SeqCst) {
                let req = http::Request::post(path)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(axum::body::Bytes::from(body(i))))
                    .unwrap();
                let status = match sender.send_request(req).await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
                        Ok(status)
                    }
                    Err(e) => Err(e.to_string()),
                };
                let failed = status.is_err();
                statuses.lock().unwrap().push(status);
                if failed {
                    break; // the connection is gone
                }
                i += streams;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
