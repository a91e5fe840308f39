//! Prometheus metrics of the controller.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
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
struct LinkEnd {
    namespace: String,
    interconnect: String,
    kind: &'static str,
    name: String,
}

/// Every value of the `category` label of `qdr_controller_reconcile_errors_total`, one per
/// stage a reconcile can fail in (`reconcile::Error::category`); each series exists from
/// the start at 0.
pub const ERROR_CATEGORIES: [&str; 5] = ["owner", "observe", "build", "apply", "status"];

/// What the routers of one Interconnect report, as the `qdr_mesh_*` gauges give it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeshSample {
    /// Router pods (interior or edge).
    pub routers_expected: i64,
    /// Interior routers in the largest group linked to each other, or edge routers
    /// uplinked.
    pub routers_connected: i64,
    /// Router pods that did not answer.
    pub routers_unreachable: i64,
    /// Pairs of interior routers without a link of their own.
    pub links_missing: i64,
    /// Deliveries stuck, summed over the routers that answered.
    pub deliveries_stuck: i64,
    /// Links blocked, summed over the routers that answered.
    pub links_blocked: i64,
    /// Open client connections (roles `normal` and `route-container`, the controller's own
    /// left out), summed over the routers that answered.
    pub client_connections: i64,
    /// 1 when `MeshConnected` is `True`, else 0.
    pub connected: i64,
}

/// The `qdr_mesh_*` gauge families, by name and help, in [`MeshSample`] field order.
const MESH_GAUGES: [(&str, &str); 8] = [
    ("qdr_mesh_routers_expected", "Router pods of an Interconnect"),
    (
        "qdr_mesh_routers_connected",
        "Interior routers linked to each other (largest group), or edge routers uplinked",
    ),
    ("qdr_mesh_routers_unreachable", "Router pods that did not answer the controller's last read"),
    ("qdr_mesh_links_missing", "Pairs of interior routers without a link of their own"),
    ("qdr_mesh_deliveries_stuck", "Deliveries stuck for more than 10 s, summed over the routers"),
    ("qdr_mesh_links_blocked", "Links blocked by flow control, summed over the routers"),
    ("qdr_mesh_client_connections", "Open client connections, summed over the routers"),
    ("qdr_mesh_connected", "1 when MeshConnected is True, else 0"),
];

/// Help of `qdr_router_certificate_expiry_seconds`.
const EXPIRY_HELP: &str = "Seconds until the earliest router certificate of an Interconnect expires";

/// The `qdr_interconnect_routers_*` gauges, by name and help: desired, ready.
const ROUTER_GAUGES: [(&str, &str); 2] = [
    ("qdr_interconnect_routers_desired", "Routers the workload of an Interconnect wants (status.replicas)"),
    (
        "qdr_interconnect_routers_ready",
        "Routers of an Interconnect whose pods are ready (status.readyReplicas)",
    ),
];

impl MeshSample {
    fn values(&self) -> [i64; 8] {
        [
            self.routers_expected,
            self.routers_connected,
            self.routers_unreachable,
            self.links_missing,
            self.deliveries_stuck,
            self.links_blocked,
            self.client_connections,
            self.connected,
        ]
    }
}

/// * `qdr_controller_reconciles_total`: reconciles run;
/// * `qdr_controller_reconcile_errors_total{category}`: failures by stage (`owner`,
///   `observe`, `build`, `apply`, `status`);
/// * `qdr_controller_reconcile_duration_seconds`: time per reconcile;
/// * `qdr_controller_leader`: 1 while this replica leads, else 0;
/// * `qdr_router_certificate_expiry_seconds{namespace,name}`: seconds until the earliest
///   certificate the routers of an Interconnect mount expires (negative: expired), as of
///   its last reconcile;
/// * `qdr_interconnect_routers_desired{namespace,interconnect}` and
///   `qdr_interconnect_routers_ready{namespace,interconnect}`: the routers its workload wants
///   and those whose pods are ready (`status.replicas`, `status.readyReplicas`), as of its
///   last reconcile, whether or not the routers are read;
/// * with the routers read (`--observe-mesh=on`), gauges `{namespace,interconnect}` of what
///   they reported at the last read: `qdr_mesh_routers_expected`,
///   `qdr_mesh_routers_connected`, `qdr_mesh_routers_unreachable`, `qdr_mesh_links_missing`,
///   `qdr_mesh_deliveries_stuck`, `qdr_mesh_links_blocked`, `qdr_mesh_client_connections`,
///   `qdr_mesh_connected` ([`MeshSample`]): the counts that change all the time are here
///   and not in the status. Every per-Interconnect series is removed with the Interconnect and at
///   the end of a leadership term;
/// * `qdr_link_expiry_seconds{namespace,interconnect,kind,name}`: seconds until an
///   AccessGrant of an Interconnect ends (`kind="AccessGrant"`) or the token of one of its
///   Links does (`kind="Link"`), as of the Interconnect's last reconcile; only those that end;
/// * `qdr_mesh_router_reads_total`: routers asked (three management queries or more each);
///   `qdr_mesh_router_connections_total`: connections opened to routers for them (one TLS
///   connection reads a linked mesh: the others are asked through it,
///   docs/mesh-status.md); `qdr_mesh_read_duration_seconds`: time per read of one
///   Interconnect's routers (what the cost benchmark reads).
pub struct Metrics {
    registry: Registry,
    reconciles: Counter<u64, AtomicU64>,
    errors: Family<Category, Counter>,
    duration: Histogram,
    /// 1 while this replica leads.
    pub leader: Gauge<i64, AtomicI64>,
    /// `qdr_router_certificate_expiry_seconds`, `qdr_interconnect_routers_*`, `qdr_mesh_*`.
    board: Arc<Board>,
    link_expiry: Family<LinkEnd, Gauge<f64, AtomicU64>>,
    /// The `qdr_link_expiry_seconds` series set last, by Interconnect (`namespace/name`).
    link_series: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<LinkEnd>>>>,
    router_reads: Counter<u64, AtomicU64>,
    router_connections: Counter<u64, AtomicU64>,
    read_duration: Histogram,
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
        // Every stage's series exists from the start at 0 (a rate or alert on it has a series
        // before the first failure).
        for category in ERROR_CATEGORIES {
            let _ = errors.get_or_create(&Category { category });
        }
        registry.register("qdr_controller_reconcile_errors", "Reconcile failures by stage", errors.clone());
        registry.register(
            "qdr_controller_reconcile_duration_seconds",
            "Time per reconcile",
            duration.clone(),
        );
        registry.register("qdr_controller_leader", "1 while this replica leads", leader.clone());
        let board = Arc::new(Board::default());
        registry.register_collector(Box::new(board.clone()));
        let link_expiry = Family::<LinkEnd, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "qdr_link_expiry_seconds",
            "Seconds until an AccessGrant or a Link's token of an Interconnect ends",
            link_expiry.clone(),
        );
        let router_reads = Counter::default();
        registry.register(
            "qdr_mesh_router_reads",
            "Routers asked what they see (three management queries or more each)",
            router_reads.clone(),
        );
        let router_connections = Counter::default();
        registry.register(
            "qdr_mesh_router_connections",
            "Connections opened to routers to ask them (a linked mesh's others are asked through one)",
            router_connections.clone(),
        );
        let read_duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "qdr_mesh_read_duration_seconds",
            "Time per read of one Interconnect's routers",
            read_duration.clone(),
        );
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            leader,
            board,
            link_expiry,
            link_series: Default::default(),
            router_reads,
            router_connections,
            read_duration,
        }
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
        let secs = at.map(|t| match t.duration_since(std::time::SystemTime::now()) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        });
        self.board.set(namespace, name, |row| row.expiry = secs);
    }

    /// Records when the AccessGrants and the Links' tokens of Interconnect `namespace/name`
    /// end: `ends` holds `(kind, name, when)` for each that ends (`kind` `AccessGrant` or
    /// `Link`); the series of any other of its grants or Links are removed (empty: all).
    pub fn link_expiry(
        &self,
        namespace: &str,
        name: &str,
        ends: &[(&'static str, String, std::time::SystemTime)],
    ) {
        let now = std::time::SystemTime::now();
        let keys: Vec<LinkEnd> = ends
            .iter()
            .map(|(kind, n, _)| LinkEnd {
                namespace: namespace.into(),
                interconnect: name.into(),
                kind,
                name: n.clone(),
            })
            .collect();
        for (key, (_, _, at)) in keys.iter().zip(ends) {
            let secs = match at.duration_since(now) {
                Ok(d) => d.as_secs_f64(),
                Err(e) => -e.duration().as_secs_f64(),
            };
            self.link_expiry.get_or_create(key).set(secs);
        }
        let mut series = self.link_series.lock().unwrap_or_else(|e| e.into_inner());
        let ic = format!("{namespace}/{name}");
        for old in series.get(&ic).into_iter().flatten().filter(|k| !keys.contains(k)) {
            self.link_expiry.remove(old);
        }
        if keys.is_empty() {
            series.remove(&ic);
        } else {
            series.insert(ic, keys);
        }
    }

    /// Records the routers Interconnect `namespace/name` wants and has ready, as `(desired,
    /// ready)` (`None`: it has no workload status, and the series are removed).
    pub fn routers(&self, namespace: &str, name: &str, counts: Option<(i32, i32)>) {
        self.board.set(namespace, name, |row| row.routers = counts);
    }

    /// Records one read of an Interconnect's `routers` router pods, over `connections`
    /// connections, that took `took`.
    pub fn mesh_read(&self, routers: usize, connections: usize, took: Duration) {
        self.router_reads.inc_by(u64::try_from(routers).unwrap_or(u64::MAX));
        self.router_connections.inc_by(u64::try_from(connections).unwrap_or(u64::MAX));
        self.read_duration.observe(took.as_secs_f64());
    }

    /// Records what the routers of Interconnect `namespace/name` report (`None`: they are
    /// not read, and its series are removed).
    pub fn mesh(&self, namespace: &str, name: &str, sample: Option<MeshSample>) {
        self.board.set(namespace, name, |row| row.mesh = sample);
    }

    /// A guard that removes every per-Interconnect series (`qdr_router_certificate_expiry_seconds`,
    /// `qdr_link_expiry_seconds`, `qdr_interconnect_routers_*`, `qdr_mesh_*`) when dropped: at the end of a leadership term, so a follower does not
    /// serve frozen values (an alert on `< 0` would fire forever on one that expired while
    /// it led).
    pub fn interconnect_series_guard(&self) -> SeriesGuard {
        SeriesGuard(self.board.clone(), self.link_expiry.clone(), self.link_series.clone())
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
#[allow(clippy::type_complexity)]
pub struct SeriesGuard(
    Arc<Board>,
    Family<LinkEnd, Gauge<f64, AtomicU64>>,
    Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<LinkEnd>>>>,
);

impl Drop for SeriesGuard {
    fn drop(&mut self) {
        self.0.lock().clear();
        self.1.clear();
        self.2.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// What the per-Interconnect gauges of one Interconnect hold (`None`: no series).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Row {
    /// `qdr_router_certificate_expiry_seconds`.
    expiry: Option<f64>,
    /// `qdr_interconnect_routers_desired`, `qdr_interconnect_routers_ready`.
    routers: Option<(i32, i32)>,
    /// `qdr_mesh_*`.
    mesh: Option<MeshSample>,
}

/// Namespace → Interconnect → its [`Row`].
type Rows = BTreeMap<Box<str>, BTreeMap<Box<str>, Row>>;

/// The per-Interconnect gauges (`qdr_router_certificate_expiry_seconds`,
/// `qdr_interconnect_routers_*`, `qdr_mesh_*`: 11 series an Interconnect), kept as one row per
/// Interconnect and encoded at each scrape (a [`Collector`]). As a `Family` each, every
/// series took a map entry and two label strings of its own: 3.2 MB at 2,000
/// Interconnects (heaptrack); one row is about 100 bytes. The series, their names, help
/// and labels are the same.
#[derive(Debug, Default)]
struct Board(std::sync::Mutex<Rows>);

impl Board {
    fn lock(&self) -> std::sync::MutexGuard<'_, Rows> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the row of Interconnect `namespace/name` by `change`; a row left with no
    /// series is removed.
    fn set(&self, namespace: &str, name: &str, change: impl FnOnce(&mut Row)) {
        let mut rows = self.lock();
        let names = match rows.get_mut(namespace) {
            Some(names) => names,
            None => rows.entry(namespace.into()).or_default(),
        };
        let row = match names.get_mut(name) {
            Some(row) => row,
            None => names.entry(name.into()).or_default(),
        };
        change(row);
        if *row == Row::default() {
            names.remove(name);
            if names.is_empty() {
                rows.remove(namespace);
            }
        }
    }
}

/// Encodes gauge `name` (`help`) with one series per row `value` gives one for, labelled
/// `namespace` and `label` (the Interconnect's name).
fn gauges<V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help): (&str, &str),
    label: &str,
    rows: &Rows,
    value: impl Fn(&Row) -> Option<V>,
) -> std::fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (namespace, names) in rows {
        for (interconnect, row) in names {
            if let Some(v) = value(row) {
                let labels = [("namespace", &**namespace), (label, &**interconnect)];
                metric.encode_family(&labels)?.encode_gauge(&v)?;
            }
        }
    }
    Ok(())
}

impl Collector for Board {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let rows = self.lock();
        let expiry = ("qdr_router_certificate_expiry_seconds", EXPIRY_HELP);
        gauges(&mut encoder, expiry, "name", &rows, |r| r.expiry)?;
        for (i, gauge) in ROUTER_GAUGES.into_iter().enumerate() {
            gauges(&mut encoder, gauge, "interconnect", &rows, |r| {
                r.routers.map(|c| if i == 0 { c.0 } else { c.1 })
            })?;
        }
        for (i, gauge) in MESH_GAUGES.into_iter().enumerate() {
            gauges(&mut encoder, gauge, "interconnect", &rows, |r| r.mesh.map(|m| m.values()[i]))?;
        }
        Ok(())
    }
}
