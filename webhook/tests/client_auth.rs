//! `--client-ca`: the admission port requires a client certificate from the given CAs. The
//! test control plane's API server is started as a cluster admin configures it
//! (`--admission-control-config-file`, a webhook kubeconfig with a client certificate), so
//! real admission requests authenticate while other clients are refused in the handshake.

mod common;

use std::sync::Arc;

use common::post;
use qdr_tests::{ControlPlane, Options};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A client configuration that accepts the webhook's certificate and presents `identity`.
fn tls_client(identity: Option<(&str, &str)>) -> Arc<rustls::ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(common::SeeAnyCert));
    Arc::new(match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<_, _>>().unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    })
}

#[tokio::test]
async fn only_clients_with_a_certificate_from_the_client_ca_are_served() {
    // One control plane for this binary, kept for the process's life as the shared one is.
    let cp: &'static ControlPlane = Box::leak(Box::new(
        ControlPlane::start(Options { webhook_client_cert: true, ..Options::default() })
            .await
            .unwrap_or_else(|e| panic!("control plane: {e}")),
    ));
    let client_ca = format!("--client-ca={}", cp.ca_file().display());
    // Serving at all proves the API server's client certificate is accepted.
    let common::Served { ns, replica, .. } =
        common::serve(cp, "client-auth", &["--check-interval=1s", &client_ca]).await;
    let port = replica.port;

    // The API server presents its webhook client certificate: admission works.
    let out = common::kubectl_stdin(
        cp,
        &["create", "--dry-run=server", "-n", &ns, "-f", "-"],
        r#"{"apiVersion":"interconnectedcloud.github.io/v1alpha1","kind":"Interconnect","metadata":{"name":"x"},
            "spec":{"deploymentPlan":{"role":"edge","placement":"Every","size":2}}}"#,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("spec.deploymentPlan.size"), "the webhook answered: {err}");

    // Anyone else is refused in the handshake, before a byte of a request is read.
    let refused =
        post(port, &tls_client(None), "/validate", b"{}").expect_err("served a client without a certificate");
    eprintln!("no client certificate: {refused}");
    let other = qdr_tests::Pki::new().unwrap().client("intruder", &[]).unwrap();
    let refused = post(port, &tls_client(Some((&other.cert_pem, &other.key_pem))), "/validate", b"{}")
        .expect_err("served another CA's client");
    eprintln!("another CA's client certificate: {refused}");
    // A certificate from the client CA is served (the empty review is a 400).
    let pki = cp.dir().join("pki");
    let read = |f: &str| std::fs::read_to_string(pki.join(f)).unwrap();
    let (cert, key) = (read("webhook-client.crt"), read("webhook-client.key"));
    assert_eq!(post(port, &tls_client(Some((&cert, &key))), "/validate", b"{}"), Ok(400));
}
