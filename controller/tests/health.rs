//! What `/readyz` and `/livez` answer, purely: the API server's last answer, the leadership
//! term's stores and watches, running reconciles; and the routes' status codes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use qdr_controller::health::{Health, HealthTiming, router};
use qdr_controller::metrics::{Metrics, OPENMETRICS};
use tower::ServiceExt;

const TIMING: HealthTiming = HealthTiming {
    api_window: Duration::from_secs(15),
    watch_error_window: Duration::from_secs(60),
    stuck_after: Duration::from_secs(300),
};

/// Health whose API contact time the test sets.
fn health() -> (Arc<Health>, Arc<Mutex<Option<Instant>>>) {
    let contact = Arc::new(Mutex::new(None));
    let c = contact.clone();
    (Arc::new(Health::new(TIMING, move || *c.lock().unwrap())), contact)
}

#[test]
fn readiness_follows_the_api_servers_last_answer() {
    let (h, contact) = health();
    let now = Instant::now();
    assert_eq!(h.readiness_at(now).unwrap_err(), "no answer from the API server yet");
    *contact.lock().unwrap() = Some(now);
    assert_eq!(h.readiness_at(now), Ok(()));
    assert_eq!(h.readiness_at(now + TIMING.api_window), Ok(()), "the window is inclusive");
    let late = now + TIMING.api_window + Duration::from_secs(5);
    assert_eq!(h.readiness_at(late).unwrap_err(), "no answer from the API server for 20s");
    assert_eq!(h.liveness_at(late), Ok(()), "an unreachable API server is not a reason to restart");
}

#[test]
fn a_leader_is_ready_once_its_stores_listed_and_while_no_watch_fails() {
    let (h, contact) = health();
    let now = Instant::now();
    *contact.lock().unwrap() = Some(now);
    let synced = Arc::new(AtomicBool::new(false));
    let s = synced.clone();
    let term = h.term("", move || s.load(Ordering::SeqCst));
    assert_eq!(h.readiness_at(now).unwrap_err(), "leading, but the watches have not listed yet");
    synced.store(true, Ordering::SeqCst);
    assert_eq!(h.readiness_at(now), Ok(()));

    h.watch_result("", "secrets", Err(&"403 Forbidden"));
    let failed_at = Instant::now();
    let reason = h.readiness_at(failed_at).unwrap_err();
    assert!(reason.starts_with("watch of secrets failed 0s ago: 403 Forbidden"), "{reason}");
    h.watch_result::<&str>("", "pods", Ok(()));
    assert!(h.readiness_at(failed_at).is_err(), "another watch's event does not clear it");
    // A watch that recovered without an event stops counting after the window.
    let later = failed_at + TIMING.watch_error_window + Duration::from_secs(1);
    *contact.lock().unwrap() = Some(later);
    assert_eq!(h.readiness_at(later), Ok(()));
    h.watch_result::<&str>("", "secrets", Ok(()));
    assert_eq!(h.readiness_at(failed_at), Ok(()), "its next event clears it");

    h.watch_result("", "pods", Err(&"connection refused"));
    // Terms of several namespaces: each is followed, and named.
    let other = h.term("team-b", || false);
    let reason = h.readiness_at(Instant::now()).unwrap_err();
    assert!(
        reason.starts_with("leading, but the watches in team-b have not listed yet")
            || reason.starts_with("watch of pods failed"),
        "{reason}"
    );
    drop(other);
    drop(term);
    assert_eq!(h.readiness_at(Instant::now()), Ok(()), "a follower has no watches");
    h.watch_result("", "pods", Err(&"after the term"));
    assert_eq!(h.readiness_at(Instant::now()), Ok(()), "errors outside a term are not kept");
}

#[test]
fn a_reconcile_running_too_long_fails_liveness() {
    let (h, _) = health();
    let first = h.reconciling("ns/a".into());
    let second = h.reconciling("ns/b".into());
    let now = Instant::now();
    assert_eq!(h.liveness_at(now), Ok(()));
    let reason = h.liveness_at(now + TIMING.stuck_after + Duration::from_secs(2)).unwrap_err();
    assert!(reason.starts_with("the reconcile of ns/a has been running for 30"), "oldest first: {reason}");
    assert!(reason.ends_with("(limit 300s)"), "{reason}");
    drop(first);
    let reason = h.liveness_at(now + TIMING.stuck_after + Duration::from_secs(2)).unwrap_err();
    assert!(reason.contains("ns/b"), "{reason}");
    drop(second);
    assert_eq!(h.liveness_at(now + TIMING.stuck_after * 10), Ok(()), "nothing running, nothing stuck");
}

async fn get(app: &axum::Router, path: &str) -> (StatusCode, Option<String>, String) {
    let resp = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_routes_answer_503_with_the_reason_and_metrics_as_openmetrics() {
    let (h, contact) = health();
    let app = router(h.clone(), Arc::new(Metrics::default()));
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: no answer from the API server yet")
    );
    *contact.lock().unwrap() = Some(Instant::now());
    assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
    assert_eq!(get(&app, "/livez").await.0, StatusCode::OK);
    let (status, ct, body) = get(&app, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct.as_deref(), Some(OPENMETRICS));
    assert!(body.contains("qdr_controller_leader") && body.ends_with("# EOF\n"), "{body}");
}
