//! The HTTP layer in process: status codes for oversized and malformed bodies, readiness
//! and draining, metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use qdr_webhook::metrics::Metrics;
use qdr_webhook::server::{AppState, MAX_BODY_BYTES, admission_router};
use tower::ServiceExt;

fn app(ready: Arc<AtomicBool>) -> (axum::Router, Arc<AppState>) {
    let state = Arc::new(AppState {
        metrics: Metrics::default(),
        readiness: Box::new(
            move || if ready.load(Ordering::SeqCst) { Ok(()) } else { Err("no certificate".into()) },
        ),
        expiry: Box::new(|| None),
        draining: AtomicBool::new(false),
    });
    (admission_router(state.clone()), state)
}

async fn call(app: &axum::Router, method: &str, path: &str, body: Vec<u8>) -> (StatusCode, String) {
    let req = Request::builder().method(method).uri(path).body(Body::from(body)).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
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
}

#[tokio::test]
async fn readiness_follows_the_certificate_and_draining() {
    let ready = Arc::new(AtomicBool::new(false));
    let (app, state) = app(ready.clone());
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

#[tokio::test]
async fn requests_are_counted_by_operation_and_outcome() {
    let (app, _) = app(Arc::new(AtomicBool::new(true)));
    call(&app, "POST", "/validate", b"nope".to_vec()).await;
    let (_, metrics) = call(&app, "GET", "/metrics", vec![]).await;
    assert!(
        metrics.contains("qdr_webhook_requests_total{operation=\"validate\",result=\"bad_request\"} 1"),
        "{metrics}"
    );
}
