//! The HTTP side: routes, body limit, time limits, health and metrics.
//!
//! Two listeners: the admission port (TLS) serves only `POST /mutate` and `POST /validate`
//! ([`admission_router`]); the plain health port serves `/livez`, `/readyz` and `/metrics`
//! ([`health_router`]), so metrics never leave through the port the API server reaches.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::admission::{Body, Checks, Reply, Webhook, handle_with};
use crate::authorize::{Authorizer, MAX_SECRETS_PER_REVIEW};
use crate::fair::Fair;
use crate::metrics::Metrics;

/// Largest accepted request body, 3 MiB: the API server's own limit on a request body
/// (`--max-request-bytes`' default for JSON is 3 MiB) and above what etcd stores (1.5 MiB),
/// so an UPDATE review carrying both a new and a stored object of any admissible size fits.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Bodies up to this size (256 KiB, far above a real Interconnect review's few KiB) are
/// reviewed in the small lane; larger ones, and bodies of undeclared length, in the large
/// lane. So a flood of large bodies waits in its own line and cannot delay real reviews.
pub const SMALL_BODY_BYTES: usize = 256 * 1024;

/// Bodies up to this size (16 KiB: a real Interconnect review is a few KiB) are checked on
/// the async executor where they arrive; larger ones on a blocking thread. Handing every
/// review to another thread cost more than checking a small one (a thread wake-up and two
/// context switches against about 15 µs of work: `/validate` at saturation on one core went
/// from 35k to under 15k req/s with it); a body this small is checked in well under a
/// millisecond, so the executor stays free to answer deadlines and other connections.
pub const INLINE_BODY_BYTES: usize = 16 * 1024;

/// Default bound on small reviews in flight (`--max-in-flight`).
pub const MAX_IN_FLIGHT: usize = 8;

/// Default bound on large reviews in flight (`--max-large-in-flight`): each holds up to
/// [`MAX_BODY_BYTES`] of body plus a typed spec bounded by the CRD's largest list.
pub const MAX_LARGE_IN_FLIGHT: usize = 1;

/// The two lines reviews wait in, by declared body size (see [`SMALL_BODY_BYTES`]). A
/// review first takes a permit of its lane, then reads its body, checks it, asks the API
/// server about the Secrets it names, and answers; the permit is held until then, so the
/// reviews in memory are bounded by the permits whatever they wait on. Each lane serves the
/// peers that wait round-robin by IP address ([`crate::fair`]): a flood from one address
/// delays another address's reviews by at most one review of its own. One that gets no
/// permit within its deadline is answered `408`. The container's memory limit covers both
/// lanes full at once (measured by `webhook/tests/flood.rs`; see `docs/hardening.md`).
#[derive(Debug, Clone)]
pub struct Lanes {
    /// Permits for bodies of at most [`SMALL_BODY_BYTES`].
    pub small: Arc<Fair>,
    /// Permits for larger bodies and bodies of undeclared length.
    pub large: Arc<Fair>,
}

impl Lanes {
    /// `small` and `large` permits.
    pub fn new(small: usize, large: usize) -> Self {
        Lanes { small: Fair::new(small), large: Fair::new(large) }
    }
}

impl Default for Lanes {
    /// [`MAX_IN_FLIGHT`] and [`MAX_LARGE_IN_FLIGHT`].
    fn default() -> Self {
        Lanes::new(MAX_IN_FLIGHT, MAX_LARGE_IN_FLIGHT)
    }
}

/// HTTP/1.1 read buffer: what a connection may hold of a body that no review has started to
/// read yet (64 KiB).
pub const HTTP1_BUFFER: usize = 64 * 1024;

/// HTTP/2 streams per connection (the API server opens another connection beyond it).
pub const HTTP2_STREAMS: u32 = 32;

/// HTTP/2 flow-control window of a stream (16 KiB: a real review is a few KiB; a larger one
/// is read in several round trips once its review has a permit). The connection's window is
/// [`HTTP2_STREAMS`] times this (512 KiB), so streams waiting for a permit can never fill it
/// and hold up a stream that has one, and a connection holds at most that much unread.
pub const HTTP2_STREAM_WINDOW: u32 = 16 * 1024;

/// Time limits of the admission listener. A client that holds a connection without
/// finishing its request is cut off by one of them, so slow or idle connections cost a
/// socket and a few kilobytes each, never a request's admission (see `docs/hardening.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From accept to the end of the TLS handshake.
    pub handshake: Duration,
    /// From the handshake to the client's first bytes; on HTTP/1.1, from a request's first
    /// bytes to its answer, together with `request` ([`ReadClock`]).
    pub header_read: Duration,
    /// From a request's headers to its response: reading the body and admitting it. A
    /// request over it gets `408 Request Timeout`.
    pub request: Duration,
    /// How long a kept-alive HTTP/1.1 connection may stay idle between an answer and the
    /// next request ([`ReadClock`]): longer than the API server's own limit (90 s), so the
    /// API server, not the webhook, closes its idle connections.
    pub idle: Duration,
}

impl Default for Timeouts {
    /// 10 s for the handshake and the headers (far shorter than a slow-loris client would
    /// like); [`REQUEST_TIMEOUT`] for a request; [`IDLE_TIMEOUT`] for an idle connection.
    fn default() -> Self {
        let d = Duration::from_secs(10);
        Timeouts { handshake: d, header_read: d, request: REQUEST_TIMEOUT, idle: IDLE_TIMEOUT }
    }
}

/// Default longest time from a request's headers to its answer (`--request-timeout`): 4 s,
/// below the 5 s `timeoutSeconds` of `deploy/`'s validating webhook, so the webhook gives up
/// on a review before the API server gives up on the webhook. A review from the API server
/// has a shorter deadline still when the API server says it waits less ([`deadline`]).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);

/// How long a kept-alive HTTP/1.1 connection may stay idle by default: 2 minutes, longer
/// than the 90 s after which the API server's client (Go's `net/http` transport as
/// client-go sets it up) closes an idle connection itself.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The time a review may take: `limit`, or less when the request's `timeout` query
/// parameter (which the API server sets to the webhook's `timeoutSeconds`, rounded up to
/// whole seconds, a Go duration such as `2s` or `1m0s`, which humantime reads) leaves less once a tenth of it (at
/// least 250 ms) is kept for the answer's way back.
pub fn deadline(query: Option<&str>, limit: Duration) -> Duration {
    let hint = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(|d| humantime::parse_duration(d).ok());
    match hint {
        Some(h) => limit.min(h.saturating_sub((h / 10).max(Duration::from_millis(250)))),
        None => limit,
    }
}

impl Timeouts {
    /// Turns hyper's HTTP/1.1 header-read timeout off on `builder` (it runs while a
    /// kept-alive connection is idle too; [`ReadClock`] keeps the limits), HTTP/2 keep-alive pings (every
    /// 30 s, answered within 10 s) so a vanished peer's connection is closed, and the
    /// buffers of [`HTTP1_BUFFER`] and [`HTTP2_STREAM_WINDOW`] so waiting connections hold
    /// little memory.
    pub fn configure(
        &self,
        builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    ) {
        builder
            .http1()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(None)
            .max_buf_size(HTTP1_BUFFER);
        builder
            .http2()
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(Some(Duration::from_secs(30)))
            .keep_alive_timeout(Duration::from_secs(10))
            .initial_stream_window_size(HTTP2_STREAM_WINDOW)
            .initial_connection_window_size(HTTP2_STREAM_WINDOW * HTTP2_STREAMS)
            .max_concurrent_streams(HTTP2_STREAMS);
    }
}

/// What a connection under a [`ReadClock`] is waiting for, which sets how long its reads
/// may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Its first bytes: up to the header-read limit. On a clock with HTTP/1.1 limits, the
    /// bytes read so far that began the HTTP/2 preface ([`H2_PREFACE`]): a connection stays
    /// here until its bytes either part from the preface (HTTP/1.1) or complete it (HTTP/2),
    /// so a client cannot leave every limit by sending a lone `P` first.
    First(usize),
    /// HTTP/1.1, from a request's first bytes to the first bytes of its answer: up to the
    /// header-read limit plus the request limit.
    Request,
    /// HTTP/1.1, kept alive between an answer and the next request: up to the idle limit.
    Idle,
    /// HTTP/2 (the whole preface read), or a clock of the first bytes only: reads wait freely (HTTP/2 pings find a
    /// vanished peer).
    Free,
}

/// The first bytes of the HTTP/2 connection preface (RFC 9113, section 3.4): a connection
/// whose first bytes are these speaks HTTP/2 with prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// The HTTP/1.1 limits of a [`ReadClock`] after the first bytes.
#[derive(Debug, Clone, Copy)]
struct KeptAlive {
    /// From a request's first bytes to the first bytes of its answer.
    request: Duration,
    /// From an answer to the next request's first bytes.
    idle: Duration,
}

/// A stream whose reads fail with `TimedOut` when what the connection waits for does not
/// come in time (the admission port's [`Timeouts`] after the handshake):
///
/// * its first bytes, within `header_read` (between the TLS handshake and a request's first
///   bytes, hyper's protocol detection waits without a limit of its own);
/// * on HTTP/1.1, from a request's first bytes to the first bytes of its answer, within
///   `header_read + request` (a slow-loris client sending headers without end is cut there;
///   a review's own deadline answers first);
/// * on HTTP/1.1, from an answer to the next request's first bytes (a kept-alive
///   connection at rest), within `idle`.
///
/// The idle limit is not the header-read limit because the API server keeps its
/// connections to a webhook open while idle for up to 90 s (Go's `IdleConnTimeout`, which
/// client-go keeps) and sends its next review on one of them: a review written as the
/// webhook closes that connection fails (`EOF`, `broken pipe`), so the webhook must not
/// close an idle connection before the API server does. hyper's own header-read timeout
/// is not used: it runs while a kept-alive connection is idle too.
///
/// HTTP/2 connections (ALPN `h2`, or the HTTP/2 preface as first bytes) have only the
/// first-bytes limit.
#[derive(Debug)]
pub struct ReadClock<S> {
    inner: S,
    phase: Phase,
    kept_alive: Option<KeptAlive>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<S> ReadClock<S> {
    /// `inner`, whose first read must return data within `limit`, and which then reads
    /// freely (an HTTP/2 connection).
    pub fn first_bytes(inner: S, limit: Duration) -> Self {
        ReadClock {
            inner,
            phase: Phase::First(0),
            kept_alive: None,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    /// `inner` under every limit of `timeouts` (an HTTP/1.1 connection, or one whose
    /// protocol its first bytes tell).
    pub fn new(inner: S, timeouts: &Timeouts) -> Self {
        ReadClock {
            kept_alive: Some(KeptAlive {
                request: timeouts.header_read.saturating_add(timeouts.request),
                idle: timeouts.idle,
            }),
            ..Self::first_bytes(inner, timeouts.header_read)
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn wait(&mut self, phase: Phase, limit: Duration) {
        self.phase = phase;
        self.deadline.as_mut().reset(tokio::time::Instant::now() + limit);
    }

    /// Bytes were read; `got` are the first of them.
    fn on_read(&mut self, got: &[u8]) {
        match (self.phase, self.kept_alive) {
            (Phase::First(matched), Some(k)) => {
                let rest = &H2_PREFACE[matched..];
                let n = got.len().min(rest.len());
                if got[..n] != rest[..n] {
                    self.wait(Phase::Request, k.request);
                } else if n == rest.len() {
                    self.phase = Phase::Free;
                } else {
                    // Still the first-bytes limit, counted from the handshake.
                    self.phase = Phase::First(matched + n);
                }
            }
            (Phase::First(_), None) => self.phase = Phase::Free,
            (Phase::Idle, Some(k)) => self.wait(Phase::Request, k.request),
            _ => {}
        }
    }

    /// Bytes were written: an answer began, and the connection is idle once it is written.
    fn on_write(&mut self) {
        if let (Phase::Request | Phase::Idle, Some(k)) = (self.phase, self.kept_alive) {
            self.wait(Phase::Idle, k.idle);
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for ReadClock<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        match &read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => this.on_read(&buf.filled()[before..]),
            Poll::Ready(_) => {}
            Poll::Pending => {
                if this.phase != Phase::Free && this.deadline.as_mut().poll(cx).is_ready() {
                    let what = match this.phase {
                        Phase::First(_) => "no request bytes within the header-read timeout",
                        Phase::Request => {
                            "no answer within the header-read and request timeouts of a request's first bytes"
                        }
                        _ => "a kept-alive connection idle past the idle timeout",
                    };
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
                }
            }
        }
        read
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for ReadClock<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.on_write();
        }
        written
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.on_write();
        }
        written
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Shared state of the handlers.
pub struct AppState {
    /// Request metrics.
    pub metrics: Metrics,
    /// The cluster's settings of the checks (allowed images).
    pub checks: Checks,
    /// Checks Secret references as the requesting user; `None` when turned off
    /// (`--authorize-secret-references=false`).
    pub authorizer: Option<Authorizer>,
    /// Reads a Link's token Secret and Interconnect by name (`get`, the webhook's own
    /// identity); `None` without a cluster, and a Link is then judged on its own.
    pub reader: Option<kube::Client>,
    /// Permits for reviews in flight.
    pub lanes: Lanes,
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
/// under Nagle's algorithm), the handshake limit of [`Timeouts`] and the others through a
/// [`ReadClock`] (HTTP/1.1 and HTTP/2 told apart by ALPN), counting
/// every accepted connection in `qdr_webhook_connections_total` by ALPN protocol and
/// handshake kind.
#[derive(Clone)]
pub struct CountingAcceptor {
    inner: axum_server::tls_rustls::RustlsAcceptor<axum_server::accept::NoDelayAcceptor>,
    timeouts: Timeouts,
    state: Arc<AppState>,
}

impl std::fmt::Debug for CountingAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingAcceptor").finish_non_exhaustive()
    }
}

impl CountingAcceptor {
    /// An acceptor serving `config` within `timeouts` (the handshake, then each
    /// connection's [`ReadClock`]), counting into `state`'s metrics.
    pub fn new(
        config: axum_server::tls_rustls::RustlsConfig,
        timeouts: Timeouts,
        state: Arc<AppState>,
    ) -> Self {
        let inner = axum_server::tls_rustls::RustlsAcceptor::new(config)
            .handshake_timeout(timeouts.handshake)
            .acceptor(axum_server::accept::NoDelayAcceptor::new());
        CountingAcceptor { inner, timeouts, state }
    }
}

impl<S: Send + 'static> axum_server::accept::Accept<tokio::net::TcpStream, S> for CountingAcceptor {
    type Stream = ReadClock<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>;
    type Service = S;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<(Self::Stream, S)>> + Send + 'static>,
    >;

    fn accept(&self, stream: tokio::net::TcpStream, service: S) -> Self::Future {
        let fut = self.inner.accept(stream, service);
        let (state, timeouts) = (self.state.clone(), self.timeouts);
        Box::pin(async move {
            let (tls, service) = fut.await?;
            let conn = tls.get_ref().1;
            let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            state.metrics.connection(conn.alpn_protocol(), resumed);
            let h2 = conn.alpn_protocol() == Some(b"h2");
            let stream = if h2 {
                ReadClock::first_bytes(tls, timeouts.header_read)
            } else {
                ReadClock::new(tls, &timeouts)
            };
            Ok((stream, service))
        })
    }
}

/// The admission port's routes: `POST /mutate` and `POST /validate`, bodies up to
/// [`MAX_BODY_BYTES`] (`413` above), each request answered within `request_timeout`, or the
/// shorter [`deadline`] the API server's `timeout` parameter leaves (`408` when it waited
/// for a permit, its body or the API server's answers that long). Nothing else is served
/// there (`404`). Serve it with `into_make_service_with_connect_info::<SocketAddr>()`, so
/// each peer address is its own flow in the lanes (without, every request is one flow).
pub fn admission_router(state: Arc<AppState>, request_timeout: Duration) -> Router {
    Router::new()
        .route("/mutate", post(move |s, r| admit(Webhook::Mutate, s, r, request_timeout)))
        .route("/validate", post(move |s, r| admit(Webhook::Validate, s, r, request_timeout)))
        // No timeout layer: [`admit`] bounds each review by its deadline itself (one timer
        // per request, not two).
        .layer(axum::middleware::from_fn_with_state(state.clone(), close_while_draining))
        .with_state(state)
}

/// While this replica drains (after SIGTERM, `AppState::draining`), every HTTP/1.x answer
/// says `Connection: close`, so the client closes the kept-alive connection once it has
/// read the answer, and its next review opens a new one, which the Service routes to a
/// ready replica. The API server calls admission webhooks over HTTP/1.1 only, with a pool of
/// kept-alive connections (kubernetes/kubernetes#82090), and its client never sends a `POST`
/// again on another connection. So without this, the connections it kept to a draining
/// replica were still there when the server shut down at the end of the shutdown delay; a
/// review the API server had just written on one met the close and failed with `EOF`
/// (`failurePolicy: Fail`: the write refused; the defaulting webhook's `Ignore`: stored
/// without its defaults). HTTP/2 answers are left as they are: `Connection` is not an
/// HTTP/2 header, and the shutdown's `GOAWAY` tells an HTTP/2 client which requests to send
/// again.
async fn close_while_draining(
    State(st): State<Arc<AppState>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let http1 = request.version() < axum::http::Version::HTTP_2;
    let mut response = next.run(request).await;
    // Read after the answer: a review that began before SIGTERM closes its connection too.
    if http1 && st.draining.load(Ordering::SeqCst) {
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    response
}

/// The health port's routes: `GET /livez` (always `200 ok` while the server answers),
/// `/readyz` (`200` when this replica serves a certificate the webhook configurations
/// trust and is not draining, else `503` with the reason) and `/metrics` (OpenMetrics text,
/// [`OPENMETRICS`]).
pub fn health_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Content type of `/metrics`: the OpenMetrics 1.0 text format that `prometheus-client`
/// encodes (Prometheus negotiates it; it ends with `# EOF`).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One review, within its [`deadline`]: a permit of its lane of [`AppState::lanes`] first
/// (waiting in line, round-robin by peer address), then the body (at most
/// [`MAX_BODY_BYTES`]), then decoding and checking: where it arrived for a body of at most
/// [`INLINE_BODY_BYTES`], else on a blocking thread (CPU work off the async executor, so the
/// deadline can answer while it runs; the permit stays with the work, so abandoned work
/// still counts against the bound), then the Secret reference
/// checks, still holding the permit: the reviews waiting on the API server are bounded by
/// the permits too.
async fn admit(
    webhook: Webhook,
    State(st): State<Arc<AppState>>,
    request: Request,
    limit: Duration,
) -> Response {
    let start = Instant::now();
    let limit = deadline(request.uri().query(), limit);
    match tokio::time::timeout(limit, review(webhook, &st, request, start)).await {
        Ok(response) => response,
        Err(_) => (StatusCode::REQUEST_TIMEOUT, format!("the review was not answered within {limit:?}"))
            .into_response(),
    }
}

async fn review(webhook: Webhook, st: &Arc<AppState>, request: Request, start: Instant) -> Response {
    // The declared length (Content-Length, which hyper reports as the body's exact size).
    let declared = axum::body::HttpBody::size_hint(request.body()).exact();
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let lane = match declared {
        Some(n) if n <= SMALL_BODY_BYTES as u64 => &st.lanes.small,
        _ => &st.lanes.large,
    };
    let flow = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let permit = lane.acquire(flow).await;
    let body = match axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) if is_length_limit(&e) => return too_large(),
        Err(e) => return (StatusCode::BAD_REQUEST, format!("reading the body: {e}")).into_response(),
    };
    let (mut reply, _permit) = if body.len() <= INLINE_BODY_BYTES {
        (handle_with(webhook, &body, &st.checks), permit)
    } else {
        let checks = st.checks.clone();
        let work = tokio::task::spawn_blocking(move || {
            let reply = handle_with(webhook, &body, &checks);
            drop(body);
            (reply, permit)
        });
        match work.await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "a review's check failed");
                return (StatusCode::INTERNAL_SERVER_ERROR, "the review could not be checked")
                    .into_response();
            }
        }
    };
    if let Some(pending) = &reply.pending {
        // Borrowed from the reply while the API server answers; the reply is consumed after.
        let secrets = pending.secrets();
        let answer = match &st.authorizer {
            None => Ok(Ok(Default::default())),
            // Only an invalid spec names this many: its denial stands without the checks.
            Some(_) if secrets.len() > MAX_SECRETS_PER_REVIEW => Err(secrets.len()),
            Some(a) => Ok(a.unreadable(&pending.user, &pending.namespace, &secrets).await),
        };
        reply = match answer {
            Ok(Ok(unreadable)) => reply.authorized(&unreadable),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "SubjectAccessReview failed");
                reply.unauthorizable(&e.to_string())
            }
            Err(n) => match reply.outcome {
                crate::admission::Outcome::Allowed => reply.unauthorizable(&format!(
                    "it names {n} Secrets, more than the {MAX_SECRETS_PER_REVIEW} a valid spec can"
                )),
                _ => reply.authorized(&Default::default()),
            },
        };
    }
    if let Some(link) = reply.link.take()
        && let Some(client) = &st.reader
    {
        reply = judge_link(client, &link).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading a Link's token or Interconnect failed");
            crate::admission::links::unreadable(&link, &e.to_string())
        });
    }
    st.metrics.observe(webhook, reply.outcome, start.elapsed());
    respond(&reply)
}

/// Reads the token Secret and the Interconnect of `link` and judges it
/// ([`crate::admission::links::LinkPending::judged`]).
async fn judge_link(
    client: &kube::Client,
    link: &crate::admission::LinkPending,
) -> Result<crate::admission::Reply, kube::Error> {
    use k8s_openapi::api::core::v1::Secret;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &link.namespace);
    let ics: kube::Api<qdr_api::Interconnect> = kube::Api::namespaced(client.clone(), &link.namespace);
    let token = secrets.get_opt(link.token_secret()).await?;
    let interior = ics.get_opt(link.interconnect()).await?.and_then(|ic| {
        let ic = qdr_api::defaults(&ic);
        qdr_api::validate_defaulted(&ic).is_empty().then(|| ic.spec.role() != qdr_api::Role::Edge)
    });
    Ok(link.judged(token.as_ref(), interior, k8s_openapi::jiff::Timestamp::now()))
}

fn respond(reply: &Reply) -> Response {
    let status = StatusCode::from_u16(reply.http_status).unwrap_or(StatusCode::BAD_REQUEST);
    let content_type = match reply.body {
        Body::Review(_) => "application/json",
        Body::Text(_) => "text/plain; charset=utf-8",
    };
    (status, [(header::CONTENT_TYPE, content_type)], reply.to_bytes()).into_response()
}

fn too_large() -> Response {
    (StatusCode::PAYLOAD_TOO_LARGE, format!("the body is larger than {MAX_BODY_BYTES} bytes")).into_response()
}

/// Whether reading a body failed on the length limit.
fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
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
    ([(header::CONTENT_TYPE, OPENMETRICS)], st.metrics.encode(expiry)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_below_the_api_servers_timeout() {
        let limit = REQUEST_TIMEOUT;
        // deploy/'s validating webhook (5 s) and mutating webhook (2 s).
        assert_eq!(deadline(Some("timeout=5s"), limit), Duration::from_millis(4000));
        assert_eq!(deadline(Some("timeout=2s"), limit), Duration::from_millis(1750));
        assert_eq!(deadline(Some("a=b&timeout=1m0s"), limit), limit, "the flag bounds it");
        assert_eq!(deadline(Some("timeout=1.5s"), limit), Duration::from_millis(1250));
        assert_eq!(deadline(Some("timeout=800ms"), limit), Duration::from_millis(550));
        for no_hint in [None, Some(""), Some("timeout="), Some("timeout=soon"), Some("timeout=5x")] {
            assert_eq!(deadline(no_hint, limit), limit, "{no_hint:?}");
        }
    }
}
