//! The HTTP layer in process: status codes for oversized, malformed and slow bodies, which
//! routes each port serves, readiness and draining, metrics, the limits of a connection's
//! read clock (first bytes, a request's answer, a kept-alive connection at rest).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use qdr_webhook::metrics::Metrics;
use qdr_webhook::server::{
    AppState, Lanes, MAX_BODY_BYTES, MAX_IN_FLIGHT, OPENMETRICS, ReadClock, SMALL_BODY_BYTES, Timeouts,
    admission_router, health_router,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

const REQUEST_TIMEOUT: Duration = Duration::from_millis(300);

/// The admission router (request timeout [`REQUEST_TIMEOUT`]) and the state it shares with
/// the health router.
fn app(ready: Arc<AtomicBool>) -> (axum::Router, Arc<AppState>) {
    app_with(ready, MAX_IN_FLIGHT)
}

/// [`app`] with `permits` reviews in flight.
fn app_with(ready: Arc<AtomicBool>, permits: usize) -> (axum::Router, Arc<AppState>) {
    let state = Arc::new(AppState {
        metrics: Metrics::default(),
        checks: Default::default(),
        authorizer: None,
        reader: None,
        lanes: Lanes::new(permits, permits),
        readiness: Box::new(
            move || if ready.load(Ordering::SeqCst) { Ok(()) } else { Err("no certificate".into()) },
        ),
        expiry: Box::new(|| None),
        draining: AtomicBool::new(false),
    });
    (admission_router(state.clone(), REQUEST_TIMEOUT), state)
}

async fn call(app: &axum::Router, method: &str, path: &str, body: Vec<u8>) -> (StatusCode, String) {
    send(app, Request::builder().method(method).uri(path).body(Body::from(body)).unwrap()).await.1
}

async fn send(app: &axum::Router, req: Request<Body>) -> (Option<String>, (StatusCode, String)) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (ct, (status, String::from_utf8_lossy(&bytes).into_owned()))
}

#[tokio::test]
async fn oversized_and_malformed_bodies_get_clear_errors() {
    let (app, _) = app(Arc::new(AtomicBool::new(true)));
    let (status, _) = call(&app, "POST", "/validate", vec![b' '; MAX_BODY_BYTES + 1]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, body) = call(&app, "POST", "/mutate", b"{\"oops\"".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.starts_with("malformed JSON"), "{body}");
    let (status, _) = call(&app, "GET", "/validate", vec![]).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // Without a Content-Length (chunked), the limit applies while reading.
    let chunks = futures::stream::iter(
        (0..4).map(|_| Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b' '; MAX_BODY_BYTES / 3 + 1]))),
    );
    let req = Request::builder().method("POST").uri("/validate").body(Body::from_stream(chunks)).unwrap();
    assert_eq!(send(&app, req).await.1.0, StatusCode::PAYLOAD_TOO_LARGE);
    // The limit is the API server's own request limit.
    assert_eq!(MAX_BODY_BYTES, 3 * 1024 * 1024);
}

/// Reviews over the in-flight bound wait in line: answered once a permit is free, or `408`
/// at the request timeout.
#[tokio::test]
async fn reviews_over_the_bound_wait_for_a_permit_until_their_timeout() {
    let (app, state) = app_with(Arc::new(AtomicBool::new(true)), 1);
    let held = state.lanes.small.acquire(None).await;
    let started = Instant::now();
    let (status, _) = call(&app, "POST", "/validate", b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert!(started.elapsed() >= REQUEST_TIMEOUT);
    // Freed within the wait: answered.
    let app2 = app.clone();
    let waiting = tokio::spawn(async move { call(&app2, "POST", "/validate", b"{}".to_vec()).await });
    tokio::time::sleep(REQUEST_TIMEOUT / 3).await;
    drop(held);
    let (status, body) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "answered (a bad review): {body}");
    assert_eq!(state.lanes.small.available_permits(), 1, "the permit came back");

    // A full large lane does not hold small reviews up.
    let large = state.lanes.large.acquire(None).await;
    let (status, _) = call(&app, "POST", "/validate", b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a small review is answered");
    let (status, _) = call(&app, "POST", "/validate", vec![b' '; SMALL_BODY_BYTES + 1]).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "a large review waits for the large lane");
    drop(large);
}

/// A client that sends headers and then trickles (or never sends) its body gets `408` at
/// the request timeout instead of holding the handler.
#[tokio::test]
async fn a_body_that_never_arrives_times_out() {
    let (app, _) = app(Arc::new(AtomicBool::new(true)));
    let never = futures::stream::pending::<Result<Vec<u8>, std::io::Error>>();
    let req = Request::post("/validate").body(Body::from_stream(never)).unwrap();
    let start = Instant::now();
    let (_, (status, _)) = send(&app, req).await;
    let took = start.elapsed();
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert!(took >= REQUEST_TIMEOUT && took < REQUEST_TIMEOUT * 20, "answered after {took:?}");
}

/// Probes and metrics are on the health port only; the admission port serves admission.
#[tokio::test]
async fn each_port_serves_only_its_own_routes() {
    let (admission, state) = app(Arc::new(AtomicBool::new(true)));
    let health = health_router(state);
    for path in ["/metrics", "/readyz", "/livez"] {
        assert_eq!(
            call(&admission, "GET", path, vec![]).await.0,
            StatusCode::NOT_FOUND,
            "{path} on admission"
        );
        assert_eq!(call(&health, "GET", path, vec![]).await.0, StatusCode::OK, "{path} on health");
    }
    assert_eq!(call(&health, "POST", "/validate", vec![]).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn readiness_follows_the_certificate_and_draining() {
    let ready = Arc::new(AtomicBool::new(false));
    let (_, state) = app(ready.clone());
    let app = health_router(state.clone());
    let (status, body) = call(&app, "GET", "/readyz", vec![]).await;
    assert_eq!((status, body.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "not ready: no certificate"));
    ready.store(true, Ordering::SeqCst);
    assert_eq!(call(&app, "GET", "/readyz", vec![]).await.0, StatusCode::OK);
    state.draining.store(true, Ordering::SeqCst);
    assert_eq!(
        call(&app, "GET", "/readyz", vec![]).await,
        (StatusCode::SERVICE_UNAVAILABLE, "draining".into())
    );
    assert_eq!(
        call(&app, "GET", "/livez", vec![]).await.0,
        StatusCode::OK,
        "liveness does not follow draining"
    );
}

/// The answer to one request on `conn` (its head and body, read by its `content-length`),
/// and whether the server then closed the connection (read 0 bytes within a second) or
/// kept it for the next request.
async fn answer_on(conn: &mut tokio::net::TcpStream) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let (head_end, length) = loop {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection closed before an answer: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            break (end + 4, length);
        }
    };
    while got.len() < head_end + length {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection closed mid-answer");
        got.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
    let closed = matches!(tokio::time::timeout(Duration::from_secs(1), conn.read(&mut buf)).await, Ok(Ok(0)));
    (head, closed)
}

/// A draining replica's HTTP/1.1 answers say `Connection: close` and end their connection,
/// so the API server (HTTP/1.1 to admission webhooks, kept-alive connections) sends its next
/// review on a new connection, to a ready replica, instead of on one the shutdown is about
/// to close (a review written as it closes fails with `EOF`). A replica that is not
/// draining keeps its connections; an HTTP/2 answer never carries the HTTP/1 header.
#[tokio::test]
async fn a_draining_replica_ends_each_http1_connection_after_its_answer() {
    let (app, state) = app(Arc::new(AtomicBool::new(true)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = app.clone();
    tokio::spawn(async move { axum::serve(listener, served).await });
    let review = b"POST /validate HTTP/1.1\r\nhost: webhook\r\ncontent-length: 2\r\n\r\n{}";

    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    for i in 0..2 {
        conn.write_all(review).await.unwrap();
        let (head, closed) = answer_on(&mut conn).await;
        assert!(!head.to_lowercase().contains("connection: close"), "review {i}, not draining: {head}");
        assert!(!closed, "review {i}, not draining: the connection was closed");
    }

    // Draining: the review on the kept connection is answered, then the connection ends.
    state.draining.store(true, Ordering::SeqCst);
    conn.write_all(review).await.unwrap();
    let (head, closed) = answer_on(&mut conn).await;
    assert!(head.starts_with("HTTP/1.1 400"), "the review is still answered: {head}");
    assert!(head.to_lowercase().contains("connection: close"), "draining: {head}");
    assert!(closed, "draining: the connection was kept after the answer");

    let h2 = Request::post("/validate").version(axum::http::Version::HTTP_2).body(Body::from("{}")).unwrap();
    let response = app.clone().oneshot(h2).await.unwrap();
    assert!(response.headers().get("connection").is_none(), "an HTTP/2 answer: {:?}", response.headers());
}

#[tokio::test]
async fn requests_are_counted_by_operation_and_outcome() {
    let (app, state) = app(Arc::new(AtomicBool::new(true)));
    call(&app, "POST", "/validate", b"nope".to_vec()).await;
    let req = Request::get("/metrics").body(Body::empty()).unwrap();
    let (content_type, (_, metrics)) = send(&health_router(state), req).await;
    assert_eq!(content_type.as_deref(), Some(OPENMETRICS));
    assert!(metrics.ends_with("# EOF\n"), "not OpenMetrics text: {metrics}");
    assert!(
        metrics.contains("qdr_webhook_requests_total{operation=\"validate\",result=\"bad_request\"} 1"),
        "{metrics}"
    );
}

/// Between the TLS handshake and a request's first bytes nothing else limits the wait: a
/// silent connection fails with `TimedOut` at the limit; once bytes came, reads wait freely.
#[tokio::test]
async fn first_bytes_must_arrive_within_the_limit() {
    let limit = Duration::from_millis(200);
    let (_client, server) = tokio::io::duplex(64);
    let mut silent = ReadClock::first_bytes(server, limit);
    let start = Instant::now();
    let err = silent.read(&mut [0; 8]).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    assert!(start.elapsed() >= limit && start.elapsed() < limit * 20, "{:?}", start.elapsed());

    let (mut client, server) = tokio::io::duplex(64);
    let mut talking = ReadClock::first_bytes(server, limit);
    client.write_all(b"GET").await.unwrap();
    assert_eq!(talking.read(&mut [0; 8]).await.unwrap(), 3);
    let later = tokio::spawn(async move {
        tokio::time::sleep(limit * 2).await;
        client.write_all(b" /").await.unwrap();
        client
    });
    assert_eq!(talking.read(&mut [0; 8]).await.unwrap(), 2, "no limit after the first bytes");
    drop(later.await.unwrap());
}

/// Serves `app` on a local port as the admission port does (HTTP/1.1 and HTTP/2 configured
/// by `timeouts`, each connection under its read clock), without TLS.
async fn serve_as_admission_port(app: axum::Router, timeouts: Timeouts) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let app = app.clone();
            tokio::spawn(async move {
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                timeouts.configure(&mut builder);
                let io = hyper_util::rt::TokioIo::new(ReadClock::new(tcp, &timeouts));
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = builder.serve_connection(io, service).await;
            });
        }
    });
    addr
}

/// The API server keeps its connections to a webhook open while idle for up to 90 s (Go's
/// and client-go's `IdleConnTimeout`) and sends its next review on one of them; a review
/// it writes as the webhook closes that connection fails (`EOF`, `broken pipe`). So a
/// kept-alive HTTP/1.1 connection stays open while idle for far longer than the
/// header-read limit, which bounds only a request that has begun, until the idle limit.
#[tokio::test]
async fn a_kept_alive_connection_idle_past_the_header_read_limit_takes_the_next_review() {
    let header_read = Duration::from_millis(300);
    let idle = header_read * 10;
    let timeouts = Timeouts { handshake: header_read, header_read, request: REQUEST_TIMEOUT, idle };
    let (app, _) = app(Arc::new(AtomicBool::new(true)));
    let addr = serve_as_admission_port(app, timeouts).await;
    let review = b"POST /validate HTTP/1.1\r\nhost: webhook\r\ncontent-length: 2\r\n\r\n{}";
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(review).await.unwrap();
    // `answer_on` waits a second for the connection to close: over 3 header-read limits.
    let (head, closed) = answer_on(&mut conn).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert!(!closed, "the idle connection was closed at the header-read limit");
    conn.write_all(review).await.unwrap();
    let answered = Instant::now();
    let (head, _) = answer_on(&mut conn).await;
    assert!(head.starts_with("HTTP/1.1 400"), "the review after the idle time: {head}");

    // Idle past the idle limit: the webhook closes it.
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(idle * 4, conn.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "still open {:?} after the answer", answered.elapsed());
    assert!(answered.elapsed() >= idle / 2, "closed {:?} after the answer", answered.elapsed());

    // A request begun and never finished (a slow loris) is cut once its answer is due.
    let due = header_read + REQUEST_TIMEOUT;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"POST /validate HTTP/1.1\r\nhost: webhook\r\n").await.unwrap();
    let begun = Instant::now();
    let read = tokio::time::timeout(due * 4, conn.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "a half request still open after {:?}", begun.elapsed());
    assert!(begun.elapsed() >= due / 2, "a half request cut after {:?}", begun.elapsed());

    // So is one whose first bytes, read alone, could still begin the HTTP/2 preface
    // (`PRI * HTTP/2.0`): "P" of "POST", then nothing.
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"P").await.unwrap();
    let begun = Instant::now();
    let read = tokio::time::timeout(due * 4, conn.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "a lone \"P\" after {:?}: {read:?}", begun.elapsed());
    assert!(begun.elapsed() >= due / 2, "a lone \"P\" cut after {:?}", begun.elapsed());
}
