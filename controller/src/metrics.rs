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

/// * `qdr_controller_reconciles_total`: reconciles run;
/// * `qdr_controller_reconcile_errors_total{category}`: failures by stage (`owner`,
///   `observe`, `build`, `apply`, `status`);
/// * `qdr_controller_reconcile_duration_seconds`: time per reconcile;
/// * `qdr_controller_leader`: 1 while this replica leads, else 0.
pub struct Metrics {
    registry: Registry,
    reconciles: Counter<u64, AtomicU64>,
    errors: Family<Category, Counter>,
    duration: Histogram,
    /// 1 while this replica leads.
    pub leader: Gauge<i64, AtomicI64>,
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
        Metrics { registry, reconciles, errors, duration, leader }
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

    /// Sets `qdr_controller_leader` to 1 until the guard is dropped.
    pub fn leading(&self) -> LeadingGuard {
        self.leader.set(1);
        LeadingGuard(self.leader.clone())
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// Keeps `qdr_controller_leader` at 1 while alive (see [`Metrics::leading`]).
#[derive(Debug)]
pub struct LeadingGuard(Gauge<i64, AtomicI64>);

impl Drop for LeadingGuard {
    fn drop(&mut self) {
        self.0.set(0);
    }
}
