//! The HTTP side: routes, body limit, health and metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::admission::{Body, Webhook, handle};
use crate::metrics::Metrics;

/// Largest accepted request body: an AdmissionReview carries the object and, on UPDATE,
/// the old object; the API server caps each at 3 MiB.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Shared state of the handlers.
pub struct AppState {
    /// Request metrics.
    pub metrics: Metrics,
    /// `Ok` when this replica may receive traffic; `Err(reason)` otherwise.
    pub readiness: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// When the served certificate expires (for the expiry metric).
    pub expiry: Box<dyn Fn() -> Option<SystemTime> + Send + Sync>,
    /// Set on SIGTERM: readiness fails so endpoints drop this replica while it still serves.
    pub draining: AtomicBool,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("draining", &self.draining).finish_non_exhaustive()
    }
}

/// The admission port's acceptor: TLS (rustls) over TCP with `TCP_NODELAY` (small
/// AdmissionReview responses leave at once instead of waiting for the peer's delayed ACK
/// under Nagle's algorithm), counting every accepted connection in
/// `qdr_webhook_connections_total` by ALPN protocol and handshake kind.
#[derive(Clone)]
pub struct CountingAcceptor {
    inner: axum_server::tls_rustls::RustlsAcceptor<axum_server::accept::NoDelayAcceptor>,
    state: Arc<AppState>,
}

impl std::fmt::Debug for CountingAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingAcceptor").finish_non_exhaustive()
    }
}

impl CountingAcceptor {
    /// An acceptor serving `config`, with the TLS handshake limited to `handshake_timeout`,
    /// counting into `state`'s metrics.
    pub fn new(
        config: axum_server::tls_rustls::RustlsConfig,
        handshake_timeout: std::time::Duration,
        state: Arc<AppState>,
    ) -> Self {
        let inner = axum_server::tls_rustls::RustlsAcceptor::new(config)
            .handshake_timeout(handshake_timeout)
            .acceptor(axum_server::accept::NoDelayAcceptor::new());
        CountingAcceptor { inner, state }
    }
}

impl<S: Send + 'static> axum_server::accept::Accept<tokio::net::TcpStream, S> for CountingAcceptor {
    type Stream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Service = S;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<(Self::Stream, S)>> + Send + 'static>,
    >;

    fn accept(&self, stream: tokio::net::TcpStream, service: S) -> Self::Future {
        let fut = self.inner.accept(stream, service);
        let state = self.state.clone();
        Box::pin(async move {
            let (tls, service) = fut.await?;
            let conn = tls.get_ref().1;
            let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            state.metrics.connection(conn.alpn_protocol(), resumed);
            Ok((tls, service))
        })
    }
}

/// Admission routes (`POST /mutate`, `POST /validate`) plus the health routes.
pub fn admission_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(|s, b| admit(Webhook::Mutate, s, b)))
        .route("/validate", post(|s, b| admit(Webhook::Validate, s, b)))
        .merge(health_router(state.clone()))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// `GET /livez`, `/readyz` and `/metrics`.
pub fn health_router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    let _ = state;
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

async fn admit(webhook: Webhook, State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let start = Instant::now();
    let reply = handle(webhook, &body);
    st.metrics.observe(webhook, reply.outcome, start.elapsed());
    let status = StatusCode::from_u16(reply.http_status).unwrap_or(StatusCode::BAD_REQUEST);
    let content_type = match reply.body {
        Body::Review(_) => "application/json",
        Body::Text(_) => "text/plain; charset=utf-8",
    };
    (status, [(header::CONTENT_TYPE, content_type)], reply.to_bytes()).into_response()
}

async fn readyz(State(st): State<Arc<AppState>>) -> Response {
    if st.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    match (st.readiness)() {
        Ok(()) => "ok".into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}")).into_response(),
    }
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let expiry = (st.expiry)().map(|t| match t.duration_since(SystemTime::now()) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    });
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.encode(expiry)).into_response()
}
