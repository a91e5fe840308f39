//! What the controller's `/readyz` and `/livez` report.
//!
//! * **Ready** (`/readyz` 200) when the API server answered this replica's last Lease
//!   request within [`HealthTiming::api_window`] (every replica asks every retry period,
//!   leader or not) and, while this replica leads, every watch has listed and none is
//!   failing. A watch is failing from an error until its next event, or until
//!   [`HealthTiming::watch_error_window`] passes without another error (a watch that
//!   recovered quietly sends no event; one that keeps failing, such as a `403 Forbidden`,
//!   reports a new error at least every 30 s, kube's watcher backoff cap).
//! * **Live** (`/livez` 200) unless a reconcile has been running longer than
//!   [`HealthTiming::stuck_after`]: kube-runtime never runs two reconciles of one object
//!   at once, so a hung reconcile stops that Interconnect for good; the kubelet restarts
//!   the pod and another replica takes over. A blocked runtime does not answer at all,
//!   which the probe's own timeout catches.
//!
//! Failing answers are `503` with a one-line reason, such as `not ready: watch of secrets
//! failed 3s ago: ... 403 Forbidden`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The limits behind the answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthTiming {
    /// How old the API server's last answer may be (the Lease duration, 15 s by default:
    /// several retry periods).
    pub api_window: Duration,
    /// How long a watch error counts when no event follows it (60 s: twice the watcher's
    /// backoff cap).
    pub watch_error_window: Duration,
    /// How long one reconcile may run before the controller counts as stuck (5 min by
    /// default: far over a reconcile's few API round trips, each of which kube's client
    /// bounds).
    pub stuck_after: Duration,
}

impl Default for HealthTiming {
    fn default() -> Self {
        HealthTiming {
            api_window: Duration::from_secs(15),
            watch_error_window: Duration::from_secs(60),
            stuck_after: Duration::from_secs(300),
        }
    }
}

type Probe = Box<dyn Fn() -> bool + Send + Sync>;

/// A leadership term: whether its stores have listed, and its failing watches.
struct Term {
    synced: Probe,
    failing: BTreeMap<Cow<'static, str>, (Instant, String)>,
}

/// Readiness and liveness, shared by the election, the watches, the reconciler and the
/// health listener. Cheap to update: one uncontended lock per event or reconcile.
pub struct Health {
    timing: HealthTiming,
    api_contact: Box<dyn Fn() -> Option<Instant> + Send + Sync>,
    /// The running terms, by watched namespace (`""`: all namespaces).
    terms: Mutex<BTreeMap<String, Term>>,
    running: Mutex<BTreeMap<u64, (String, Instant)>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").field("timing", &self.timing).finish_non_exhaustive()
    }
}

impl Health {
    /// Health with `timing`; `api_contact` tells when the API server last answered (the
    /// elector's [`crate::lease::Elector::last_contact`]).
    pub fn new(
        timing: HealthTiming,
        api_contact: impl Fn() -> Option<Instant> + Send + Sync + 'static,
    ) -> Self {
        Health {
            timing,
            api_contact: Box::new(api_contact),
            terms: Mutex::new(BTreeMap::new()),
            running: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        }
    }

    /// Starts a leadership term over `namespace` (`""`: all) whose stores are complete once
    /// `synced` says so; readiness follows the term's watches until the returned guard is
    /// dropped. A controller watching several namespaces runs one term for each.
    pub fn term(&self, namespace: &str, synced: impl Fn() -> bool + Send + Sync + 'static) -> TermGuard<'_> {
        lock(&self.terms)
            .insert(namespace.into(), Term { synced: Box::new(synced), failing: BTreeMap::new() });
        TermGuard(self, namespace.into())
    }

    /// Records a result of the watch `watch` of the term over `namespace`: an error marks
    /// it failing, anything else clears it.
    pub fn watch_result<E: std::fmt::Display>(
        &self,
        namespace: &str,
        watch: impl Into<Cow<'static, str>>,
        result: Result<(), &E>,
    ) {
        let watch = watch.into();
        let mut terms = lock(&self.terms);
        let Some(term) = terms.get_mut(namespace) else { return };
        match result {
            Ok(()) => {
                if !term.failing.is_empty() {
                    term.failing.remove(watch.as_ref());
                }
            }
            Err(e) => {
                term.failing.insert(watch, (Instant::now(), e.to_string()));
            }
        }
    }

    /// Marks a reconcile of `key` (`namespace/name`) as running until the guard drops.
    pub fn reconciling(&self, key: String) -> Running<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.running).insert(id, (key, Instant::now()));
        Running(self, id)
    }

    /// `Ok` when ready at `now`, else the reason.
    ///
    /// # Errors
    /// The first unmet condition, in the order: API server, a failing watch, stores listed.
    pub fn readiness_at(&self, now: Instant) -> Result<(), String> {
        match (self.api_contact)() {
            None => return Err("no answer from the API server yet".into()),
            Some(t) if now.saturating_duration_since(t) > self.timing.api_window => {
                let ago = now.saturating_duration_since(t).as_secs();
                return Err(format!("no answer from the API server for {ago}s"));
            }
            Some(_) => {}
        }
        let terms = lock(&self.terms);
        let window = self.timing.watch_error_window;
        for (namespace, term) in terms.iter() {
            let within = if namespace.is_empty() { String::new() } else { format!(" in {namespace}") };
            // A failing watch first: it is usually why the stores have not listed.
            if let Some((watch, (at, error))) =
                term.failing.iter().find(|(_, (at, _))| now.saturating_duration_since(*at) <= window)
            {
                let ago = now.saturating_duration_since(*at).as_secs();
                return Err(format!("watch of {watch}{within} failed {ago}s ago: {error}"));
            }
            if !(term.synced)() {
                return Err(format!("leading, but the watches{within} have not listed yet"));
            }
        }
        Ok(())
    }

    /// `Ok` when live at `now`, else the reason.
    ///
    /// # Errors
    /// The longest-running reconcile, when it has run longer than `stuck_after`.
    pub fn liveness_at(&self, now: Instant) -> Result<(), String> {
        let running = lock(&self.running);
        let oldest = running.values().min_by_key(|(_, started)| *started);
        match oldest {
            Some((key, started)) if now.saturating_duration_since(*started) > self.timing.stuck_after => {
                let secs = now.saturating_duration_since(*started).as_secs();
                Err(format!(
                    "the reconcile of {key} has been running for {secs}s (limit {}s)",
                    self.timing.stuck_after.as_secs()
                ))
            }
            _ => Ok(()),
        }
    }

    /// [`Self::readiness_at`] now.
    ///
    /// # Errors
    /// As [`Self::readiness_at`].
    pub fn readiness(&self) -> Result<(), String> {
        self.readiness_at(Instant::now())
    }

    /// [`Self::liveness_at`] now.
    ///
    /// # Errors
    /// As [`Self::liveness_at`].
    pub fn liveness(&self) -> Result<(), String> {
        self.liveness_at(Instant::now())
    }
}

/// The health listener's routes: `GET /livez` and `/readyz` (`200 ok`, or `503` with
/// `not live: <reason>` / `not ready: <reason>`) and `/metrics` (OpenMetrics text).
pub fn router(health: Arc<Health>, metrics: Arc<crate::metrics::Metrics>) -> axum::Router {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::get;
    fn answer(what: &str, r: Result<(), String>) -> axum::response::Response {
        match r {
            Ok(()) => "ok".into_response(),
            Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not {what}: {reason}")).into_response(),
        }
    }
    let (h1, h2) = (health.clone(), health);
    axum::Router::new()
        .route("/livez", get(move || async move { answer("live", h1.liveness()) }))
        .route("/readyz", get(move || async move { answer("ready", h2.readiness()) }))
        .route(
            "/metrics",
            get(move || async move { ([(header::CONTENT_TYPE, crate::metrics::OPENMETRICS)], metrics.encode()) }),
        )
}

/// Ends a leadership term when dropped (readiness no longer follows its watches).
#[derive(Debug)]
pub struct TermGuard<'a>(&'a Health, String);

impl Drop for TermGuard<'_> {
    fn drop(&mut self) {
        lock(&self.0.terms).remove(&self.1);
    }
}

/// A running reconcile; dropping it (returning or being cancelled) ends it.
#[derive(Debug)]
pub struct Running<'a>(&'a Health, u64);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.0.running).remove(&self.1);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
