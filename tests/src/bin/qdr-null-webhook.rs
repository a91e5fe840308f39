//! `qdr-null-webhook`: the reference the benchmarks hold the real webhook against. It serves
//! `POST /validate` and `POST /mutate` over the same TLS stack as `qdr-webhook` (rustls with
//! ring through [`qdr_certs::serving::CertResolver`], axum-server, HTTP/2 and HTTP/1.1 by
//! ALPN) and answers every AdmissionReview `allowed` at once: it reads only the request's
//! `uid`, which the answer must echo. So "time the API server adds for our webhooks" can be
//! compared with "time it adds for any webhook registered the same way".
//!
//! Usage: `qdr-null-webhook <listen address> <certificate PEM file> <key PEM file>`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use serde_json::{Value, json};

/// The review `body` answered `allowed`, or `400` when it carries no `request.uid`.
async fn allow(body: Bytes) -> Result<axum::Json<Value>, axum::http::StatusCode> {
    #[derive(serde::Deserialize)]
    struct Review {
        request: Request,
    }
    #[derive(serde::Deserialize)]
    struct Request {
        uid: String,
    }
    let review: Review = serde_json::from_slice(&body).map_err(|_| axum::http::StatusCode::BAD_REQUEST)?;
    Ok(axum::Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": review.request.uid, "allowed": true}})))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, cert, key] = args.as_slice() else {
        return Err("usage: qdr-null-webhook <listen address> <certificate PEM file> <key PEM file>".into());
    };
    let listen: SocketAddr = listen.parse()?;
    let resolver = qdr_certs::serving::CertResolver::new();
    resolver.set(&std::fs::read_to_string(cert)?, &std::fs::read_to_string(key)?)?;
    let tls =
        axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(resolver.server_config_with(None)?));
    let app = Router::new().route("/validate", post(allow)).route("/mutate", post(allow));
    axum_server::bind_rustls(listen, tls).serve(app.into_make_service()).await?;
    Ok(())
}
