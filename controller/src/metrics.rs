//! Prometheus metrics of the controller.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Category {
    category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Object {
    namespace: String,
    name: String,
}

/// * `qdr_controller_reconciles_total`: reconciles run;
/// * `qdr_controller_reconcile_errors_total{category}`: failures by stage (`owner`,
///   `observe`, `build`, `apply`, `status`);
/// * `qdr_controller_reconcile_duration_seconds`: time per reconcile;
/// * `qdr_controller_leader`: 1 while this replica leads, else 0;
/// * `qdr_router_certificate_expiry_seconds{namespace,name}`: seconds until the earliest
///   certificate the routers of an Interconnect mount expires (negative: expired), as of
///   its last reconcile.
pub struct Metrics {
    registry: Registry,
    reconciles: Counter<u64, AtomicU64>,
    errors: Family<Category, Counter>,
    duration: Histogram,
    /// 1 while this replica leads.
    pub leader: Gauge<i64, AtomicI64>,
    expiry: Family<Object, Gauge<f64, AtomicU64>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconciles = Counter::default();
        let errors = Family::<Category, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let leader = Gauge::default();
        registry.register("qdr_controller_reconciles", "Reconciles run", reconciles.clone());
        registry.register("qdr_controller_reconcile_errors", "Reconcile failures by stage", errors.clone());
        registry.register(
            "qdr_controller_reconcile_duration_seconds",
            "Time per reconcile",
            duration.clone(),
        );
        registry.register("qdr_controller_leader", "1 while this replica leads", leader.clone());
        let expiry = Family::<Object, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "qdr_router_certificate_expiry_seconds",
            "Seconds until the earliest router certificate of an Interconnect expires",
            expiry.clone(),
        );
        Metrics { registry, reconciles, errors, duration, leader, expiry }
    }
}

impl Metrics {
    /// Records one reconcile and, on failure, its category.
    pub fn reconciled(&self, took: Duration, failed: Option<&'static str>) {
        self.reconciles.inc();
        self.duration.observe(took.as_secs_f64());
        if let Some(category) = failed {
            self.errors.get_or_create(&Category { category }).inc();
        }
    }

    /// Records when the earliest router certificate of Interconnect `namespace/name`
    /// expires (`None`: it has none, and the series is removed).
    pub fn certificate_expiry(&self, namespace: &str, name: &str, at: Option<std::time::SystemTime>) {
        let key = Object { namespace: namespace.into(), name: name.into() };
        match at {
            Some(t) => {
                let now = std::time::SystemTime::now();
                let secs = match t.duration_since(now) {
                    Ok(d) => d.as_secs_f64(),
                    Err(e) => -e.duration().as_secs_f64(),
                };
                self.expiry.get_or_create(&key).set(secs);
            }
            None => {
                self.expiry.remove(&key);
            }
        }
    }

    /// A guard that removes every per-Interconnect series (`qdr_router_certificate_expiry_seconds`)
    /// when dropped: at the end of a leadership term, so a follower does not serve frozen
    /// values (an alert on `< 0` would fire forever on one that expired while it led).
    pub fn interconnect_series_guard(&self) -> SeriesGuard {
        SeriesGuard(self.expiry.clone())
    }

    /// Sets `qdr_controller_leader` to 1 until the guard is dropped.
    pub fn leading(&self) -> LeadingGuard {
        self.leader.set(1);
        LeadingGuard(self.leader.clone())
    }

    /// The OpenMetrics text exposition (content type [`OPENMETRICS`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// Content type of `/metrics`: the OpenMetrics 1.0 text format that `prometheus-client`
/// encodes (it ends with `# EOF`).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Keeps `qdr_controller_leader` at 1 while alive (see [`Metrics::leading`]).
#[derive(Debug)]
pub struct LeadingGuard(Gauge<i64, AtomicI64>);

impl Drop for LeadingGuard {
    fn drop(&mut self) {
        self.0.set(0);
    }
}

/// Removes every per-Interconnect series when dropped (see
/// [`Metrics::interconnect_series_guard`]).
#[derive(Debug)]
pub struct SeriesGuard(Family<Object, Gauge<f64, AtomicU64>>);

impl Drop for SeriesGuard {
    fn drop(&mut self) {
        self.0.clear();
    }
}
