//! Stage 4, **read** (with `--observe-mesh=on`): what the routers themselves see, asked over
//! the operator's management listener ([`crate::mesh::management`], docs/mesh-status.md)
//! and judged by [`crate::mesh::assess`].
//!
//! A pass never waits on a router. It takes the latest answers the [`Reader`] holds and, when
//! a new read is due, starts one in the background; when that read ends, the Interconnect
//! is reconciled again ([`Reader::subscribe`]) and that pass takes the new answers. A read
//! that finds a connected mesh as the read before it did (the same pods, the same answers
//! but for the counts that change all the time: [`same_mesh`]) wakes no pass: the mesh
//! *rests*, and the reader reads it again by itself at the next resync, as the latest pass
//! planned the read ([`Reader::again`]), until a read finds it changed (then a pass is woken
//! and the passes read again) or a pass finds its pods changed ([`rest_or_read`]). The pass
//! a read wakes, when that read found the mesh connected, puts it at rest at once
//! ([`Reader::rest_until`]) rather than coming back to start the next read. So a mesh at
//! rest costs reads and no reconcile pass. A read is due when:
//! * the router pods changed (a pod came or went, got its IP, became Ready or not);
//! * [`MESH_RESYNC`] passed since the last read of a connected mesh (longer when the
//!   controller reads more than `MESH_READ_RATE × MESH_RESYNC` routers: [`resync`]);
//! * a mesh that was not connected (links still forming after a start, a router that did
//!   not answer) was last read [`MESH_RECHECK`] ago, doubling with each read that finds it
//!   still so while the pods stay the same, up to [`MESH_RESYNC`];
//! * [`crate::grants::SITE_RECHECK`] passed while a grant of the Interconnect awaits its
//!   site (issued less than [`crate::grants::SITE_WAIT`] ago, no connection of the site yet).
//!
//! One read of an Interconnect runs at a time. Its connections take slots of one
//! [`Pool`] shared by the whole controller and fair across namespaces
//! ([`MAX_CONNECTIONS`], [`MAX_PER_NAMESPACE`]): a router waits at most [`SLOT_WAIT`] for a
//! slot, then gets [`READ_TIMEOUT`]. Only the Interconnect's own routers are read (pods its
//! workload owns: [`super::observe`]), only with the management CA it generated and owns,
//! and only up to [`MAX_ROUTERS`] of them; otherwise the mesh is not read, with why, and
//! not tried again until something it depends on changes.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::ObjectRef;
use qdr_api::Interconnect;

use super::observe::Observed;
use crate::cache::SharedData;
use crate::credentials::Data;
use crate::hash_key::HashKey;
use crate::mesh::management::{self, MANAGEMENT_PORT};
use crate::mesh::pool::Pool;
use crate::mesh::reader::{Linking, Live, NO_IP, NOT_READY, Plan, Target, observe};
use crate::mesh::{MAX_ROUTERS, MeshReport, Mode, Observation, assess};
use crate::validated::ValidatedInterconnect;

/// Wait between two reads of a connected mesh whose pods did not change, while the
/// controller reads at most [`MESH_READ_RATE`] × this many routers in all; longer beyond
/// (see [`resync`]).
pub const MESH_RESYNC: Duration = Duration::from_secs(60);
/// Routers asked per second at rest across the controller, at most: with more than
/// `MESH_READ_RATE × MESH_RESYNC` routers (6,000: 2,000 Interconnects of 3) the resync of a
/// connected mesh stretches so that all of them are asked once per
/// `routers ÷ MESH_READ_RATE` seconds (120 s at 12,000 routers), so reads at rest stay near
/// 0.1 core at any scale: what one router asked costs the controller at rest, measured at
/// 2,000 Interconnects, is in docs/mesh-status.md ("Cost at scale").
pub const MESH_READ_RATE: u32 = 100;
/// First wait before reading again a mesh that was not connected; doubles with each read
/// that finds it still so, up to [`MESH_RESYNC`].
pub const MESH_RECHECK: Duration = Duration::from_secs(2);
/// Wait before reading again a mesh with a running router that waits for its readiness
/// gate (`qdr-operator.io/linked`), for at most [`GATE_RECHECKS`] reads in a row: the read
/// that finds a new router writes the connectors it and its peers lack, and their links open
/// within a few hundred milliseconds (a TLS connection on the cluster network); reading again
/// at [`MESH_RECHECK`] would leave the router out of its Service for seconds more.
pub const GATE_RECHECK: Duration = Duration::from_millis(250);
/// Reads in a row at [`GATE_RECHECK`] at most (3 s of them), after which a mesh whose router
/// still waits is read on the [`MESH_RECHECK`] schedule.
pub const GATE_RECHECKS: u32 = 12;
/// Router connections open at once across the controller.
pub const MAX_CONNECTIONS: usize = 8;
/// Router connections of one namespace open at once: half, so routers of one namespace
/// that never answer leave the other half to every other namespace.
pub const MAX_PER_NAMESPACE: usize = MAX_CONNECTIONS / 2;
/// Time allowed for one router once it has a slot (connecting, TLS, queries).
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long after its pod became Ready a router with no link yet is taken as joining the
/// mesh (pending) rather than cut off from it: a replacement router is Ready before its
/// links are open (about 3 s on the real node), and must not read as a partition.
pub const JOIN_GRACE: Duration = Duration::from_secs(30);
/// Longest wait of one router for a connection slot; a router still waiting then is
/// reported as not read (its namespace's other routers are slow to answer).
pub const SLOT_WAIT: Duration = Duration::from_secs(30);

/// What one pass knows of the mesh.
#[derive(Debug, Clone)]
pub struct MeshRead {
    /// Why the routers cannot be read at all (the management port or profile name is taken
    /// by the spec, the management CA does not exist yet, is not this Interconnect's own or
    /// cannot sign, too many routers); the observations are then empty.
    pub blocked: Option<String>,
    /// Every router pod's answer, by pod name (pods not read yet are
    /// [`Observation::Pending`]).
    pub observations: BTreeMap<String, Observation>,
    /// The judgement of the answers.
    pub report: MeshReport,
    /// When to look again at the latest; `None` when a read is under way (its end wakes
    /// the Interconnect) or the routers cannot be read (what they depend on wakes it), but
    /// [`MESH_RECHECK`] when the management CA does not exist yet (the pass that reports it
    /// creates it, and the controller's own writes wake nothing).
    pub next: Option<Duration>,
    /// Routers found holding live entities other than those of the configuration they had
    /// been found holding at the read before (changed outside the operator, with
    /// `qdmanage`), which the read then put back: `<pod>: <n> created, <m> deleted` each.
    /// Reported by one pass only (the `ConfigRestored` Event).
    pub restored: Vec<String>,
}

impl MeshRead {
    /// `f` summed over the routers that answered.
    pub fn total(&self, f: fn(&crate::mesh::RouterView) -> u64) -> u64 {
        (self.observations.values())
            .filter_map(|o| match o {
                Observation::Answered(v) => Some(f(v)),
                Observation::Unreachable(_) | Observation::Pending(_) => None,
            })
            .sum()
    }

    /// The `qdr_mesh_*` gauges of this read.
    pub fn sample(&self) -> crate::metrics::MeshSample {
        let r = &self.report;
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        let sum = |f: fn(&crate::mesh::RouterView) -> u64| i64::try_from(self.total(f)).unwrap_or(i64::MAX);
        crate::metrics::MeshSample {
            routers_expected: n(self.observations.len()),
            routers_connected: n(r.interiors_connected + r.edges_uplinked),
            routers_unreachable: n(r.unreachable.len()),
            links_missing: n(r.links_missing),
            deliveries_stuck: sum(|v| v.deliveries_stuck),
            links_blocked: sum(|v| v.links_blocked),
            client_connections: sum(|v| v.clients),
            connected: i64::from(r.condition.status == "True"),
        }
    }
}

/// What a read that ended found: the pods' fingerprint then, when it ended, the answers.
type Done = (u64, Instant, Arc<Answers>);

/// The answers of a read as the reader keeps them until the next: by pod name, in name
/// order, in one allocation of their own size. A `BTreeMap` of a mesh of 3 took a node of
/// room for 11 (2 KB; 3.7 MB at 2,000 Interconnects at rest, heaptrack).
#[derive(Debug, Clone, PartialEq)]
pub struct Answers(Box<[(String, Observation)]>);

impl Answers {
    /// The answer of pod `pod`.
    pub fn get(&self, pod: &str) -> Option<&Observation> {
        let i = self.0.binary_search_by(|(p, _)| p.as_str().cmp(pod)).ok()?;
        Some(&self.0[i].1)
    }

    /// The answers in pod name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Observation)> {
        self.0.iter().map(|(p, o)| (p, o))
    }

    /// How many pods were read (or pending).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The answers as a pass takes them ([`MeshRead::observations`]).
    pub fn to_map(&self) -> BTreeMap<String, Observation> {
        self.0.iter().cloned().collect()
    }
}

impl From<BTreeMap<String, Observation>> for Answers {
    fn from(observations: BTreeMap<String, Observation>) -> Self {
        // In name order already: the map's.
        Answers(observations.into_iter().collect())
    }
}

#[derive(Default)]
struct Memo {
    /// The last read that ended.
    done: Option<Done>,
    /// Reads in a row that found the mesh not connected.
    unsettled: u32,
    /// Whether a read is under way.
    reading: bool,
    /// Routers of the last read that ended (counted in [`Reader::routers`]).
    routers: usize,
    /// The pods' fingerprint the latest pass saw: a read that ends after the pods changed
    /// under it wakes the Interconnect, whatever it found, so a new read starts.
    seen: u64,
    /// The configuration whose live entities a router of the current template refused,
    /// and the reads in a row that found so ([`Reader::tries`]).
    tries: Option<(String, u32)>,
    /// Routers whose live entities the last read put back, for the next pass to report
    /// once ([`MeshRead::restored`]).
    restored: Vec<String>,
    /// Reads in a row that ended with a running router waiting for its readiness gate and
    /// the mesh not connected: the next is due at [`GATE_RECHECK`] while at most
    /// [`GATE_RECHECKS`] ([`due`]).
    gated: u32,
    /// What the latest pass that reads, or would read, gave the routers' read to do: what the
    /// reader reads again by itself while the mesh rests ([`Reader::again`]).
    again: Option<Arc<Again>>,
    /// The token of the reader's own next read while the mesh rests (a connected mesh whose
    /// last read found it as before): the pass then starts no read, and a scheduled read
    /// whose token is no longer here does nothing. `None`: the passes start the reads.
    resting: Option<u64>,
    /// Tokens given out ([`Memo::resting`]).
    rests: u64,
}

/// One read of an Interconnect's routers as a pass plans it: what [`Reader::read_now`] needs,
/// kept so that the reader can make the same read again without a pass while the mesh rests
/// ([`Reader::again`]). Replaced by every pass that reads, or would read, the routers.
struct Again {
    read: ReadNow,
    /// The routers to read (their [`Target::checked`] as of the pass; a read again takes it
    /// from the latest answers).
    targets: Vec<Target>,
    /// The name the routers' certificates hold (`<name>.<namespace>.svc`).
    server_name: String,
    /// The management CA Secret's data, which signs the client certificate of each read
    /// ([`management::tls`]), its values shared with the Secret store's.
    ca: SharedData,
}

/// What a pass does about the read of a mesh ([`rest_or_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPlan {
    /// Start a read now.
    pub start: bool,
    /// The reader reads again by itself (the mesh rests): the pass starts none and need not
    /// come back for it.
    pub resting: bool,
    /// When the pass should come back for the next read; `None`: a read under way, or the
    /// reader's own, wakes it.
    pub next: Option<Duration>,
}

/// What a pass does about the read of a mesh: `same_pods` (the pods' fingerprint of the
/// last read that ended is this pass's), `left` (the time until the next read is due, `None`
/// when due or the pods changed), `reading` (a read is under way), `resting` (the reader
/// holds a read of its own for the next resync) and `site_awaited` (a grant awaits its site:
/// the pass itself comes back every [`crate::grants::SITE_RECHECK`]).
///
/// A rest ends when the pods change or a site is awaited: the pass reads as before. While it
/// lasts the pass starts no read and is not requeued for one, so a connected mesh at rest is
/// read every resync without a reconcile pass (the cost the resync is sized by,
/// [`MESH_READ_RATE`]).
pub fn rest_or_read(
    same_pods: bool,
    left: Option<Duration>,
    reading: bool,
    resting: bool,
    site_awaited: bool,
) -> ReadPlan {
    let resting = resting && same_pods && !site_awaited;
    let start = left.is_none() && !reading && !resting;
    // A read that finds nothing changed wakes no pass: while a grant awaits its site, the
    // pass comes back by itself for the next read.
    let next = match (reading || start || resting, site_awaited) {
        (false, _) => left,
        (true, true) => Some(crate::grants::SITE_RECHECK),
        (true, false) => None,
    };
    ReadPlan { start, resting, next }
}

impl Memo {
    /// A new rest ([`Memo::resting`]): its token.
    fn rest(&mut self) -> u64 {
        self.rests = self.rests.wrapping_add(1);
        self.resting = Some(self.rests);
        self.rests
    }
}

/// The [`Target::checked`] of router `pod` for a read that gives it `live`: the last visit's
/// whole read of its live entities (in `latest`, the answers of the last read), when that
/// found them applied and of `live`'s configuration.
fn checked(latest: Option<&Answers>, pod: &str, live: Option<&Live>) -> Option<crate::mesh::live::Checked> {
    match latest.and_then(|l| l.get(pod)) {
        Some(Observation::Answered(v)) => v
            .live
            .as_ref()
            .filter(|l| l.applied && live.is_some_and(|w| w.hash == l.hash))
            .and_then(|l| l.checked),
        _ => None,
    }
}

/// When the next read of a mesh is due after its last: [`GATE_RECHECK`] while a router
/// waits for its readiness gate (`gated` reads in a row, at most [`GATE_RECHECKS`]), else
/// [`recheck`] of the unsettled reads.
pub fn due(unsettled: u32, gated: u32, resync: Duration) -> Duration {
    if (1..=GATE_RECHECKS).contains(&gated) {
        return GATE_RECHECK;
    }
    recheck(unsettled, resync)
}

type Wake = futures::channel::mpsc::UnboundedSender<ObjectRef<Interconnect>>;

/// The reader's state across passes and leadership terms: the connection slots, the last
/// answers of each Interconnect and who to wake when a read ends.
pub struct Reader {
    pool: Pool,
    timeout: Duration,
    slot_wait: Duration,
    memo: Mutex<HashMap<String, Memo>>,
    /// Routers of every Interconnect's last read, summed (what [`resync`] spreads).
    routers: std::sync::atomic::AtomicUsize,
    /// Controllers to wake, each with the namespace it serves (empty: all).
    wakes: Mutex<Vec<(String, Wake)>>,
    /// The leadership term's fence, which every write to a router passes
    /// ([`Plan::fence`]); `None`: not fenced (tests).
    fence: Option<crate::fence::Fence>,
    /// How long a whole read of a router's live entities is relied on ([`Plan::recheck`]).
    live_recheck: Duration,
    /// The routers' management port ([`MANAGEMENT_PORT`]; another in tests).
    port: u16,
    /// The wait between reads of a connected mesh, when not [`resync`] of the routers read
    /// (tests: [`Reader::with_resync`]).
    resync: Option<Duration>,
}

impl Default for Reader {
    fn default() -> Self {
        Reader::new(Pool::new(MAX_CONNECTIONS, MAX_PER_NAMESPACE), READ_TIMEOUT, SLOT_WAIT)
    }
}

/// The wait between reads of a connected mesh when the controller reads `routers` routers
/// in all: [`MESH_RESYNC`], or the time [`MESH_READ_RATE`] takes to ask them all when that
/// is longer (rounded up to the nanosecond, so the rate is never passed).
pub fn resync(routers: usize) -> Duration {
    let nanos = u128::try_from(routers)
        .unwrap_or(u128::MAX)
        .saturating_mul(1_000_000_000)
        .div_ceil(u128::from(MESH_READ_RATE));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)).max(MESH_RESYNC)
}

/// The connector names a visit never deletes from a router of `o`: the configuration's own
/// connectors, and the operator's links to router pods being deleted
/// (`qdr-operator-mesh-<pod>`, [`Observed::shutting_down`]). A router in its termination
/// grace (the `preStop` pause) still serves the clients it has until it stops; unlinked
/// meanwhile, it would drop every message between them and the rest of the mesh for that
/// long. Its links go at the first visit after its pod is gone.
pub fn kept_connectors(o: &ValidatedInterconnect, observed: &Observed) -> Vec<String> {
    let own = (o.spec().every_connector()).filter_map(|(_, _, c)| c.name.clone());
    let leaving = (observed.shutting_down.iter()).map(|p| format!("{}{p}", crate::mesh::links::PREFIX));
    own.chain(leaving).collect()
}

/// What [`Reader::read_now`] reads, and for which Interconnect.
struct ReadNow {
    /// The Interconnect's `namespace/name`.
    key: String,
    namespace: String,
    name: String,
    /// The pods' fingerprint at the read's start.
    pods: u64,
    mode: Mode,
    /// Whether a running router waits for its readiness gate (read again soon).
    waiting: bool,
    /// Whether a read that finds the mesh as before may lead to the reader's own next read
    /// ([`Reader::again`]); not while a grant awaits its site (the pass comes back for it).
    rest: bool,
}

/// The wait before reading again a mesh found not connected `unsettled` reads in a row
/// (`resync` for a connected one, `unsettled` 0): [`MESH_RECHECK`] doubling up to
/// [`MESH_RESYNC`], whatever the scale (a mesh not connected is what the reads are for).
pub fn recheck(unsettled: u32, resync: Duration) -> Duration {
    if unsettled == 0 {
        return resync;
    }
    MESH_RECHECK.saturating_mul(1 << (unsettled - 1).min(10)).min(MESH_RESYNC)
}

/// The unsettled reads in a row after a read ([`recheck`] spaces the next by them): none
/// once `connected`; one (the next read at [`MESH_RECHECK`]) when `soon` (a visit stopped
/// half applied, or a running router waits for its readiness gate `qdr-operator.io/linked`,
/// which only a read can open) or the pods changed since the last read; one more otherwise.
pub fn unsettled_after(unsettled: u32, connected: bool, soon: bool, same_pods: bool) -> u32 {
    if connected {
        0
    } else if soon || !same_pods {
        1
    } else {
        unsettled.saturating_add(1)
    }
}

/// `observations` as kept between reads: the views' router ids interned for the read of
/// `pods` ([`crate::mesh::Ids`]), so each is kept once, whatever the routers answered.
pub fn intern<'a>(
    observations: BTreeMap<String, Observation>,
    pods: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, Observation> {
    let mut ids = crate::mesh::Ids::new(pods);
    let kept = (observations.into_iter())
        .map(|(pod, o)| match o {
            Observation::Answered(v) => (pod, Observation::Answered(v.interned(&mut ids))),
            other => (pod, other),
        })
        .collect();
    if ids.dropped > 0 {
        tracing::debug!(kept = ids.len(), dropped = ids.dropped, "router ids past the read's budget");
    }
    kept
}

/// Whether `o` is a router whose visit stopped half way
/// ([`crate::mesh::reader::ReadError::HalfApplied`]): it lacks live entities until the next
/// visit, which comes at the first recheck ([`MESH_RECHECK`]).
pub fn half_applied(o: &Observation) -> bool {
    matches!(o, Observation::Unreachable(why) if why.contains(crate::mesh::reader::HALF_APPLIED))
}

/// What a read depends on: the router pods (name, IP, readiness, the ConfigMap each
/// mounts, the sites' trust each was told to read) and, when live entities are written, the
/// desired configuration's hash. A change
/// of either starts a read at once.
fn pods_fingerprint(observed: &Observed, live: Option<&str>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in observed.routers.iter().filter(|p| p.owned) {
        // The sites' trust a router was told to read: a revocation reads the routers afresh,
        // so the connections of the revoked site are found at once (`grants::sites`).
        let trust = p.sites_trust.as_deref().and_then(crate::grants::sites::read_stamp).map(|(d, _)| d);
        (&p.name, &p.ip, p.ready, &p.config_map, trust).hash(&mut h);
    }
    live.hash(&mut h);
    h.finish()
}

/// The live entities the routers of `o` should hold when `config` has them
/// ([`Rendered::live`](qdr_api::router_config::Rendered::live)).
fn live_of(o: &ValidatedInterconnect, config: &qdr_api::router_config::Rendered) -> Option<Live> {
    if !config.live {
        return None;
    }
    let rendered = o.router_config();
    Some(Live {
        desired: Arc::new(crate::mesh::live::desired(&rendered)),
        keep: Arc::new(crate::mesh::live::start_up_names(&rendered)),
        hash: config.hash.clone(),
    })
}

/// Whether `secret` is the management Secret generated for `o`: controlled by it (its uid),
/// and its content the controller's own (sealed under `seal`: [`crate::credentials::seal`]);
/// otherwise why not.
fn generated_for(secret: &Secret, o: &ValidatedInterconnect, seal: &HashKey) -> Result<(), &'static str> {
    if !o.controls(secret.metadata.owner_references.as_deref().unwrap_or_default()) {
        return Err("it is not controlled by it");
    }
    if !crate::credentials::seal::is_sealed(seal, o.namespace(), o.uid(), secret) {
        return Err("its content is not the controller's own: it carries no valid seal");
    }
    Ok(())
}

impl Reader {
    /// A reader with its own `pool`, giving each router `timeout` once it has a slot and at
    /// most `slot_wait` to get one.
    pub fn new(pool: Pool, timeout: Duration, slot_wait: Duration) -> Self {
        Reader {
            pool,
            timeout,
            slot_wait,
            memo: Mutex::default(),
            routers: std::sync::atomic::AtomicUsize::new(0),
            wakes: Mutex::default(),
            fence: None,
            live_recheck: crate::mesh::live::RECHECK,
            port: u16::try_from(MANAGEMENT_PORT).expect("a port"),
            resync: None,
        }
    }

    /// This reader asking the routers on `port` rather than [`MANAGEMENT_PORT`] (tests: one
    /// stand-in listener for many routers).
    #[cfg(test)]
    pub(crate) fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// This reader waiting `resync` between reads of a connected mesh whatever the routers'
    /// number (tests: a rest of a few hundred milliseconds rather than [`MESH_RESYNC`]).
    #[cfg(test)]
    pub(crate) fn with_resync(mut self, resync: Duration) -> Self {
        self.resync = Some(resync);
        self
    }

    /// This reader relying on a whole read of a router's live entities for `recheck`
    /// (`--live-recheck`; [`crate::mesh::live::RECHECK`] by default): an entity changed on
    /// a router by hand is put back within that, plus the visit that finds it.
    pub fn with_live_recheck(mut self, recheck: Duration) -> Self {
        self.live_recheck = recheck;
        self
    }

    /// This reader with its writes to the routers fenced by `fence`, the one the API
    /// client's writes pass: a deposed leader writes to no router (docs/mesh-status.md).
    pub fn with_fence(mut self, fence: crate::fence::Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The Interconnects of `namespace` (empty: all) whose read ended, for the
    /// controller of that namespace to reconcile ([`kube::runtime::Controller::reconcile_on`]).
    pub fn subscribe(
        &self,
        namespace: &str,
    ) -> futures::channel::mpsc::UnboundedReceiver<ObjectRef<Interconnect>> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut wakes = self.wakes.lock().unwrap_or_else(|e| e.into_inner());
        wakes.retain(|(_, w)| !w.is_closed());
        wakes.push((namespace.to_string(), tx));
        rx
    }

    fn wake(&self, namespace: &str, name: &str) {
        let mut wakes = self.wakes.lock().unwrap_or_else(|e| e.into_inner());
        wakes.retain(|(scope, w)| {
            if scope.is_empty() || scope == namespace {
                w.unbounded_send(ObjectRef::new(name).within(namespace)).is_ok()
            } else {
                !w.is_closed()
            }
        });
    }

    /// Forgets Interconnect `key` (deleted); a read under way keeps nothing.
    pub fn forget(&self, key: &str) {
        if let Some(m) = self.memo.lock().unwrap_or_else(|e| e.into_inner()).remove(key) {
            self.routers.fetch_sub(m.routers, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The configuration (its whole hash) whose live entities a router of Interconnect
    /// `key`'s current template refused, and the reads in a row that found so ([`tried`]).
    /// `None` once a read finds no refusal, or before any read. Kept in memory: a new
    /// leader counts from zero.
    pub fn tries(&self, key: &str) -> Option<(String, u32)> {
        self.memo.lock().unwrap_or_else(|e| e.into_inner()).get(key).and_then(|m| m.tries.clone())
    }

    /// The wait between reads of a connected mesh now ([`resync`] of the routers read).
    pub fn resync(&self) -> Duration {
        (self.resync).unwrap_or_else(|| resync(self.routers.load(std::sync::atomic::Ordering::Relaxed)))
    }

    /// The mesh of `o` for this pass: the latest answers (pods not read yet are
    /// [`Observation::Pending`]), after starting a read in the background when one is due
    /// (see the module docs). Its management Secrets are used only when controlled by `o` and
    /// sealed under `seal` ([`crate::credentials::seal`]). `management` is `Err` with why when the routers have no
    /// management listener. `config` is the configuration the routers should run when
    /// its live entities are to be written to the routers of its template (the visit
    /// writes them: docs/live-configuration.md), `None` when they are not (a held
    /// workload, no live entities). Never waits on a router.
    pub fn read(
        self: &Arc<Self>,
        o: &ValidatedInterconnect,
        observed: &Observed,
        management: Result<(), String>,
        config: Option<&qdr_api::router_config::Rendered>,
        metrics: &Arc<crate::metrics::Metrics>,
        seal: &HashKey,
    ) -> MeshRead {
        let mode = Mode::of(o.spec().role());
        let key = o.namespaced_name();
        let blocked = |why: String| MeshRead {
            blocked: Some(why),
            observations: BTreeMap::new(),
            report: assess(mode, &BTreeMap::new()),
            next: None,
            restored: Vec::new(),
        };
        if let Err(why) = management {
            self.forget(&key);
            return blocked(why);
        }
        let ca_name = management::ca_secret(o.name());
        let ca = match observed.secrets.get(&ca_name) {
            None | Some(None) => {
                // This pass generates it, and the controller's own writes wake nothing: the
                // next pass, soon, reads the routers with it.
                let why = format!("the management CA Secret {ca_name} does not exist yet");
                return MeshRead { next: Some(MESH_RECHECK), ..blocked(why) };
            }
            Some(Some(s)) if let Err(why) = generated_for(s, o, seal) => {
                self.forget(&key);
                return blocked(format!(
                    "the Secret {ca_name} is not the management CA this Interconnect generated ({why}): delete it to have one generated"
                ));
            }
            Some(Some(s)) => SharedData::of(s.data.as_ref().unwrap_or(&Data::new())),
        };
        let credentials = management::credentials_secret(o.name());
        if let Some(Some(s)) = observed.secrets.get(&credentials)
            && let Err(why) = generated_for(s, o, seal)
        {
            self.forget(&key);
            return blocked(format!(
                "the Secret {credentials} is not the management certificate this Interconnect generated ({why}): delete it to have one generated"
            ));
        }
        let routers: Vec<&super::observe::RouterPod> = observed.routers.iter().filter(|p| p.owned).collect();
        if routers.len() > MAX_ROUTERS {
            return blocked(format!(
                "{} router pods, more than the {MAX_ROUTERS} the controller reads",
                routers.len()
            ));
        }
        let config = config.filter(|c| c.live);
        let pods = pods_fingerprint(observed, config.map(|c| c.hash.as_str()));
        let resync = self.resync();
        let (latest, plan, restored, settled) = {
            let mut memos = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            let memo = memos.entry(key.clone()).or_default();
            memo.seen = pods;
            // A requeue for the due time may wake a moment early.
            let due = due(memo.unsettled, memo.gated, resync);
            let due = if observed.site_awaited { due.min(crate::grants::SITE_RECHECK) } else { due };
            let same_pods = matches!(&memo.done, Some((fp, _, _)) if *fp == pods);
            let left = match &memo.done {
                Some((_, at, _)) if same_pods => due.checked_sub(at.elapsed() + Duration::from_millis(200)),
                _ => None,
            };
            let plan =
                rest_or_read(same_pods, left, memo.reading, memo.resting.is_some(), observed.site_awaited);
            if !plan.resting {
                // The reader's own read, if one is scheduled, does nothing: the passes read.
                memo.resting = None;
            }
            if plan.start {
                memo.reading = true;
            }
            let restored = std::mem::take(&mut memo.restored);
            // The last read found the mesh connected (nothing unsettled, no router waiting
            // for its gate) and this pass only waits for the next one to be due.
            let settled = same_pods && memo.unsettled == 0 && memo.gated == 0;
            (memo.done.as_ref().map(|d| d.2.clone()), plan, restored, settled)
        };
        let next = plan.next;
        // Every pass plans the read, whether it starts it or not: the reader's own read at
        // rest is then the one the latest pass would start (the spec's connectors, the CA
        // after a rotation).
        let template = crate::mesh::links::template(o.spec());
        let peers: Vec<(String, String)> =
            (routers.iter()).filter_map(|p| Some((p.name.clone(), p.ip.clone()?))).collect();
        let keep = kept_connectors(o, observed);
        let unready: Vec<String> = (routers.iter())
            .filter(|p| p.ip.is_some() && !p.ready)
            .map(|p| format!("{}{}", crate::mesh::links::PREFIX, p.name))
            .collect();
        let live = config.and_then(|c| live_of(o, c));
        // Only routers of the current template take live writes: the others are being
        // replaced, and their configuration (their own ConfigMap) is another.
        let current = config.map(|c| o.router_config_name(&c.startup_hash));
        // The last visit's whole read of a router's live entities, when it found the
        // configuration this read gives it.
        let checked = |pod: &str| checked(latest.as_deref(), pod, live.as_ref());
        let targets: Vec<Target> = (routers.iter())
            .map(|p| Target {
                pod: p.name.clone(),
                ip: p.ip.clone(),
                ready: p.ready,
                linking: template.as_ref().map(|t| Linking {
                    connectors: crate::mesh::links::desired(&p.name, &peers, t),
                    keep: keep.clone(),
                    unready: unready.clone(),
                }),
                live: live.clone().filter(|_| current.is_some() && p.config_map == current),
                checked: checked(&p.name),
            })
            .collect();
        let server_name = format!("{}.{}.svc", o.name(), o.namespace());
        let (namespace, name) = (o.namespace().to_string(), o.name().to_string());
        // A running router waiting for its readiness gate is read again soon.
        let waiting = routers.iter().any(|p| p.waits_for_gate());
        let rest = !observed.site_awaited;
        let read = ReadNow { key: key.clone(), namespace, name, pods, mode, waiting, rest };
        let again = Arc::new(Again { read, targets, server_name, ca });
        if let Some(m) = self.memo.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&key) {
            m.again = Some(again.clone());
        }
        if plan.start {
            match management::tls(&again.server_name, &again.ca.data(), observed.now) {
                Ok(tls) => {
                    let (reader, metrics) = (self.clone(), metrics.clone());
                    reads().spawn(async move {
                        let targets = again.targets.clone();
                        reader.read_and_rest(again, targets, tls, metrics).await;
                    });
                }
                Err(why) => {
                    if let Some(m) = self.memo.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&key) {
                        m.reading = false;
                    }
                    return blocked(why);
                }
            }
        }
        // The latest answers for the pods there are now; a pod not read yet is pending, and
        // so is a router Ready for less than JOIN_GRACE with no link yet.
        // (An interior router alone has nothing to link to.)
        let alone = mode == Mode::Interior && routers.len() < 2;
        let joining = |p: &super::observe::RouterPod| {
            !alone
                && p.ready_since
                    .and_then(|t| observed.now.duration_since(t).ok())
                    .is_none_or(|d| d < JOIN_GRACE)
        };
        let mut joins = false;
        let observations: BTreeMap<String, Observation> = (routers.iter())
            .map(|p| {
                let latest = latest.as_ref().and_then(|l| l.get(&p.name)).cloned();
                let o = match (latest, &p.ip, p.ready) {
                    (_, None, _) => Observation::Pending(NO_IP.into()),
                    (_, Some(_), false) => Observation::Pending(NOT_READY.into()),
                    (Some(Observation::Answered(v)), Some(_), true)
                        if v.inter_router.is_empty() && v.edge.is_empty() && joining(p) =>
                    {
                        joins = true;
                        Observation::Pending("joining the mesh: no link open yet".into())
                    }
                    (Some(o), Some(_), true) => o,
                    (None, Some(_), true) => Observation::Pending("not read yet".into()),
                };
                (p.name.clone(), o)
            })
            .collect();
        // A joining router is read again soon (the recheck of an unsettled mesh) and
        // judged once the grace is over.
        let next = if joins { next.map(|n| n.min(JOIN_GRACE)) } else { next };
        // A settled mesh whose next read is not due yet rests at once: the reader reads it
        // when due, and the pass need not come back to start that read.
        let next = match next {
            Some(left) if settled && !joins && !plan.start && !observed.site_awaited => {
                (!self.rest_until(&key, left, metrics)).then_some(left)
            }
            next => next,
        };
        MeshRead { blocked: None, report: assess(mode, &observations), observations, next, restored }
    }

    /// Puts Interconnect `key`'s mesh at rest now, its next read the reader's own in `left`
    /// ([`Reader::rests`], as the latest pass planned it): `false` when a read is under way,
    /// the mesh rests already or no pass planned a read yet.
    ///
    /// The pass a read wakes (the mesh changed, then is found connected) would otherwise come
    /// back when the next read is due only to start it: one pass per Interconnect after each
    /// change, 2,000 in the first resync after 2,000 meshes connect (`make bench`, mesh-2000).
    fn rest_until(
        self: &Arc<Self>,
        key: &str,
        left: Duration,
        metrics: &Arc<crate::metrics::Metrics>,
    ) -> bool {
        let token = {
            let mut memos = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            let Some(memo) = memos.get_mut(key) else { return false };
            if memo.reading || memo.resting.is_some() || memo.again.is_none() {
                return false;
            }
            memo.rest()
        };
        reads().spawn(self.clone().rests(key.to_string(), Some((token, left)), metrics.clone()));
        true
    }

    /// Makes the read `again` plans, then the reader's own reads while the mesh rests
    /// ([`Reader::read_now`], [`Reader::rests`]): a mesh at rest costs no pass at all.
    async fn read_and_rest(
        self: Arc<Self>,
        again: Arc<Again>,
        targets: Vec<Target>,
        tls: management::Tls,
        metrics: Arc<crate::metrics::Metrics>,
    ) {
        let key = again.read.key.clone();
        // Boxed: the task rests for a minute at a time, and a read's state kept inline would
        // stay allocated with it ([`Reader::rests`]).
        let rest = Box::pin(self.clone().read_now(again, targets, tls, &metrics)).await;
        self.rests(key, rest, metrics).await;
    }

    /// The reader's own reads of Interconnect `key` while its mesh rests: after each rest
    /// (`rest`: its token and length), the read the latest pass planned ([`Reader::again`]),
    /// for as long as the reads find the mesh as before and the rest holds.
    async fn rests(
        self: Arc<Self>,
        key: String,
        mut rest: Option<(u64, Duration)>,
        metrics: Arc<crate::metrics::Metrics>,
    ) {
        while let Some((token, due)) = rest {
            tokio::time::sleep(due).await;
            rest = match self.again(&key, token) {
                // Boxed, so that a resting task holds only its sleep, not the room a read
                // takes: 2.8 MB at 2,000 Interconnects at rest (heaptrack), where the read is
                // allocated for its few milliseconds.
                Some((again, targets, tls)) => {
                    Box::pin(self.clone().read_now(again, targets, tls, &metrics)).await
                }
                None => None,
            };
        }
    }

    /// Reads `targets` (those of `again`, their [`Target::checked`] as of now) now, keeps the
    /// answers for Interconnect `key` (unless it was forgotten meanwhile) and wakes it; or,
    /// when the mesh is connected and the same as at the last read ([`same_mesh`]: a pass
    /// would write nothing), only updates its gauges and, when the mesh may rest, returns its
    /// rest: the token ([`Memo::resting`]) and the wait before the reader reads it again.
    async fn read_now(
        self: Arc<Self>,
        again: Arc<Again>,
        targets: Vec<Target>,
        tls: management::Tls,
        metrics: &Arc<crate::metrics::Metrics>,
    ) -> Option<(u64, Duration)> {
        let ReadNow { key, namespace, name, pods, mode, waiting, rest } = &again.read;
        let (pods, mode, waiting) = (*pods, *mode, *waiting);
        /// Clears the read's mark should the task panic (nothing it runs panics on what a
        /// router sends: proptested), so the Interconnect is read again.
        struct Unmark<'a>(&'a Reader, &'a str);
        impl Drop for Unmark<'_> {
            fn drop(&mut self) {
                if std::thread::panicking()
                    && let Some(m) = self.0.memo.lock().unwrap_or_else(|e| e.into_inner()).get_mut(self.1)
                {
                    m.reading = false;
                }
            }
        }
        let _unmark = Unmark(&self, key);
        let started = Instant::now();
        let plan = Plan {
            port: self.port,
            namespace,
            pool: &self.pool,
            timeout: self.timeout,
            deadline: tokio::time::Instant::now() + self.slot_wait,
            tls: Some(&tls),
            fence: self.fence.as_ref(),
            recheck: self.live_recheck,
        };
        let observations = observe(&targets, &plan).await;
        // What is kept of the answers: every router id once, a pod's shared with its name,
        // and at most MAX_FOREIGN_IDS others (crate::mesh::Ids).
        let observations = intern(observations, targets.iter().map(|t| t.pod.as_str()));
        metrics.mesh_read(
            observations.values().filter(|o| !matches!(o, Observation::Pending(_))).count(),
            (observations.values())
                .filter(|o| match o {
                    Observation::Answered(v) => !v.routed,
                    Observation::Unreachable(_) => true,
                    Observation::Pending(_) => false,
                })
                .count(),
            started.elapsed(),
        );
        // A router with no link yet (joining) leaves the mesh unsettled, so it is read
        // again soon; the pass judges it once JOIN_GRACE is over.
        let report = assess(mode, &observations);
        // A router that does not hold its live entities yet (writes bounded per visit, a
        // refusal) is visited again as soon as an unsettled mesh is.
        let applied = observations.values().all(|o| match o {
            Observation::Answered(v) => v.live.as_ref().is_none_or(|l| l.applied),
            _ => true,
        });
        // A connector deletion left for later (a connection attempt in flight: mesh::links::busy)
        // is tried again at the first recheck.
        let deferred = observations.values().any(|o| matches!(o, Observation::Answered(v) if v.deferred > 0));
        let connected = report.condition.reason == "Connected" && applied && !deferred;
        // A visit that stopped half way left its router without entities it had deleted:
        // the next read comes at the first recheck, however long the mesh has been unsettled.
        let half_applied = observations.values().any(half_applied);
        // The configuration written, and whether a router refused it.
        let live = targets.iter().find_map(|t| t.live.as_ref().map(|l| l.hash.clone()));
        let refused = (targets.iter().filter(|t| t.live.is_some())).any(|t| match observations.get(&t.pod) {
            Some(Observation::Answered(v)) => v.live.as_ref().is_some_and(|l| l.refused.is_some()),
            _ => false,
        });
        let observations = Arc::new(Answers::from(observations));
        let unchanged = {
            let mut memos = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            let memo = memos.get_mut(key)?;
            // Counted since the pods last changed: the reads while routers start (each pod
            // event a read, none connected yet) must not push the next read out to the
            // resync.
            let same_pods = memo.done.as_ref().is_some_and(|d| d.0 == pods);
            // Entities put back are reported by a pass, at once.
            let put_back = match memo.done.as_ref() {
                Some(before) => restored(&before.2, &observations),
                None => Vec::new(),
            };
            let unchanged = connected
                && !waiting
                && put_back.is_empty()
                && memo.unsettled == 0
                && same_pods
                && memo.seen == pods
                && memo.done.as_ref().is_some_and(|d| same_mesh(&d.2, &observations));
            memo.tries = tried(memo.tries.take(), live, refused);
            memo.restored.extend(put_back);
            memo.unsettled =
                unsettled_after(memo.unsettled, connected, half_applied || waiting || deferred, same_pods);
            memo.gated = if waiting && !connected { memo.gated.saturating_add(1) } else { 0 };
            memo.done = Some((pods, Instant::now(), observations.clone()));
            memo.reading = false;
            if !unchanged {
                memo.resting = None;
            }
            self.routers.fetch_sub(memo.routers, std::sync::atomic::Ordering::Relaxed);
            memo.routers = targets.len();
            self.routers.fetch_add(memo.routers, std::sync::atomic::Ordering::Relaxed);
            unchanged
        };
        if !unchanged {
            self.wake(namespace, name);
            return None;
        }
        // Only while a controller serves the namespace (leads): the gauges go with a term.
        if !self.listened(namespace) {
            return None;
        }
        let read = MeshRead {
            blocked: None,
            observations: observations.to_map(),
            report,
            next: None,
            restored: Vec::new(),
        };
        metrics.mesh(namespace, name, Some(read.sample()));
        let due = self.resync();
        if *rest {
            let token = self.memo.lock().unwrap_or_else(|e| e.into_inner()).get_mut(key).map(Memo::rest);
            return token.map(|t| (t, due));
        }
        // A grant awaits its site: the pass comes back by itself; this wakes it at the latest
        // when the next read is due.
        let (reader, namespace, name) = (self.clone(), namespace.clone(), name.clone());
        tokio::spawn(async move {
            tokio::time::sleep(due).await;
            reader.wake(&namespace, &name);
        });
        None
    }

    /// The read of Interconnect `key`'s routers again as its latest pass planned
    /// ([`Memo::again`]), marked under way, when the rest of token `token` still holds (no
    /// pass read since, the pods are the same) and a controller serves its namespace; `None`
    /// otherwise. The client certificate is issued afresh from the management CA the pass
    /// saw; when it cannot be, a pass is woken (it reports why) and there is no read.
    #[allow(clippy::type_complexity)]
    fn again(&self, key: &str, token: u64) -> Option<(Arc<Again>, Vec<Target>, management::Tls)> {
        let (again, latest) = {
            let mut memos = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            let memo = memos.get_mut(key)?;
            if memo.resting != Some(token) || memo.reading {
                return None;
            }
            memo.resting = None;
            let again = memo.again.clone()?;
            if !self.listened(&again.read.namespace) {
                return None;
            }
            memo.reading = true;
            (again, memo.done.as_ref().map(|d| d.2.clone()))
        };
        let tls = match management::tls(&again.server_name, &again.ca.data(), std::time::SystemTime::now()) {
            Ok(tls) => tls,
            Err(why) => {
                tracing::debug!(key, %why, "no client certificate for a read at rest; a pass reads");
                if let Some(m) = self.memo.lock().unwrap_or_else(|e| e.into_inner()).get_mut(key) {
                    m.reading = false;
                }
                self.wake(&again.read.namespace, &again.read.name);
                return None;
            }
        };
        let targets = (again.targets.iter())
            .map(|t| {
                let checked = checked(latest.as_deref(), &t.pod, t.live.as_ref());
                Target { checked, ..t.clone() }
            })
            .collect();
        Some((again, targets, tls))
    }

    /// Whether a controller of `namespace` listens for its wake-ups.
    fn listened(&self, namespace: &str) -> bool {
        let wakes = self.wakes.lock().unwrap_or_else(|e| e.into_inner());
        wakes.iter().any(|(scope, w)| (scope.is_empty() || scope == namespace) && !w.is_closed())
    }
}

/// The runtime every read of the routers runs on ([`Reader::read_and_rest`]): one thread of
/// its own (`mesh-reads`) with a current-thread tokio runtime, started on first use and kept
/// for the life of the process.
///
/// The AMQP client runs a task for each connection and each session and passes every frame
/// between them and the links over channels; on the controller's multi-threaded runtime each
/// of those hand-offs could wake another worker thread (a futex wake and a steal), and the
/// threads' parking and waking was 15 % of the controller's CPU at rest (`perf` at 2,000
/// Interconnects). On one thread a hand-off is a push to that thread's own queue (`make bench`,
/// mesh-2000, one run: 1.02 → 0.91 ms of CPU per router asked). The reads are I/O bound: one
/// thread carries the controller's [`MESH_READ_RATE`] (about 1 ms of CPU a router) with room,
/// while the reconcile passes keep the other runtime. Its timers and sockets are its own, so a
/// read never waits on a busy reconcile worker, nor a pass on a read.
///
/// # Panics
/// When the thread or its runtime cannot be started (the process is out of threads or file
/// descriptors at its first read).
fn reads() -> &'static tokio::runtime::Handle {
    static READS: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
    READS.get_or_init(|| {
        let runtime = (tokio::runtime::Builder::new_current_thread().enable_all().build())
            .expect("the runtime of the mesh reads starts");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("mesh-reads".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("the thread of the mesh reads starts");
        handle
    })
}

/// The count of [`Reader::tries`] after a read: `before`, and of that read the configuration
/// written to the routers of the current template (`live`; `None` when it read none of them)
/// and whether one of them refused a write of it. A refusal of the configuration counted
/// adds one; of another starts at 1; a read with no refusal clears the count; a read of no
/// such router leaves it.
///
/// Only refusals count: a router that does not answer at all is not rolled for it, since the
/// controller cannot tell a router that cannot take a change from one it cannot reach (a
/// NetworkPolicy, `--observe-mesh` on simulated nodes), whose routers read the ConfigMap at
/// start.
pub fn tried(before: Option<(String, u32)>, live: Option<String>, refused: bool) -> Option<(String, u32)> {
    match (live, refused) {
        (Some(hash), true) => match before {
            Some((h, n)) if h == hash => Some((hash, n.saturating_add(1))),
            _ => Some((hash, 1)),
        },
        (Some(_), false) => None,
        (None, _) => before,
    }
}

/// The routers of read `now` that held live entities other than those of the configuration
/// they were found holding at read `before` (same pod, same configuration hash, written
/// since): changed outside the operator, and put back by `now`'s visit. `<pod>: <n>
/// created, <m> deleted` each.
pub fn restored(before: &Answers, now: &Answers) -> Vec<String> {
    fn held(o: Option<&Observation>) -> Option<&crate::mesh::live::Outcome> {
        match o {
            Some(Observation::Answered(v)) => v.live.as_deref(),
            _ => None,
        }
    }
    (now.iter())
        .filter_map(|(pod, o)| {
            let (was, is) = (held(before.get(pod))?, held(Some(o))?);
            (was.applied && was.hash == is.hash && is.created + is.deleted > 0)
                .then(|| format!("{pod}: {} created, {} deleted", is.created, is.deleted))
        })
        .collect()
}

/// Whether two reads found the same mesh: the same pods, each with the same answer but for
/// the counts that change all the time (clients, blocked links, stuck deliveries), which the
/// status leaves to metrics. A pass on either writes the same status.
pub fn same_mesh(a: &Answers, b: &Answers) -> bool {
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|((pa, a), (pb, b))| {
            pa == pb
                && match (a, b) {
                    (Observation::Answered(a), Observation::Answered(b)) => {
                        let live = |v: &crate::mesh::RouterView| {
                            v.live.as_ref().map(|l| (l.hash.clone(), l.applied, l.refused.clone()))
                        };
                        (&a.id, a.mode, &a.reaches, &a.inter_router, &a.edge, live(a))
                            == (&b.id, b.mode, &b.reaches, &b.inter_router, &b.edge, live(b))
                    }
                    (a, b) => a == b,
                }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mesh at rest keeps one task of [`Reader::rests`] sleeping between its reads, 2,000
    /// of them at 2,000 Interconnects: the task holds its sleep and the read's arguments,
    /// not the room of a read under way (which is boxed while it runs).
    #[test]
    fn a_resting_read_task_holds_its_sleep_not_a_read() {
        let reader = Arc::new(Reader::default());
        let metrics: Arc<crate::metrics::Metrics> = Arc::default();
        let resting = reader.clone().rests("ns/ic".into(), None, metrics.clone());
        let size = std::mem::size_of_val(&resting);
        assert!(size <= 320, "a resting task's future takes {size} bytes");
    }

    /// The kept answers find each pod's by name, in name order, and are the map they were
    /// made of.
    #[test]
    fn kept_answers_are_found_by_pod_name() {
        let answers: BTreeMap<String, Observation> = ["mesh-c", "mesh-a", "mesh-b"]
            .iter()
            .map(|p| (p.to_string(), Observation::Pending(format!("{p} pending"))))
            .collect();
        let kept = Answers::from(answers.clone());
        assert_eq!(kept.len(), 3);
        for p in ["mesh-a", "mesh-b", "mesh-c"] {
            assert_eq!(kept.get(p), answers.get(p), "{p}");
        }
        assert_eq!(kept.get("mesh-d"), None);
        assert_eq!(kept.get(""), None);
        assert!(kept.iter().map(|(p, _)| p.as_str()).eq(["mesh-a", "mesh-b", "mesh-c"]));
        assert_eq!(kept.to_map(), answers);
    }
}
