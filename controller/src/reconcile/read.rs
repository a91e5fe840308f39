//! Stage 4, **read** (with `--observe-mesh=on`): what the routers themselves see, asked over
//! the operator's management listener ([`crate::mesh::management`], docs/mesh-status.md)
//! and judged by [`crate::mesh::assess`].
//!
//! Reads are driven by the passes, never by a loop of their own, and a pass reads only
//! when its answer could have changed or is due:
//! * the router pods changed (a pod came or went, got its IP, became Ready or not);
//! * [`MESH_RESYNC`] passed since the last read of a connected mesh;
//! * a mesh that was not connected (links still forming after a start, a router that did
//!   not answer) is read again after [`MESH_RECHECK`], doubling with each read that finds
//!   it still so while the pods stay the same, up to [`MESH_RESYNC`].
//!
//! Otherwise the pass reuses the last answers. Every connection holds one permit of a
//! bound shared by the whole controller ([`MAX_CONNECTIONS`]) and gets [`READ_TIMEOUT`]; a
//! router that does not answer is reported, and asked again only at the next read.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::observe::Observed;
use crate::credentials::Data;
use crate::mesh::management::{self, Clients, MANAGEMENT_PORT};
use crate::mesh::reader::{Target, observe};
use crate::mesh::{MeshReport, Mode, Observation, assess};
use crate::validated::ValidatedInterconnect;

/// Longest wait between two reads of a connected mesh.
pub const MESH_RESYNC: Duration = Duration::from_secs(60);
/// First wait before reading again a mesh that was not connected; doubles with each read
/// that finds it still so, up to [`MESH_RESYNC`].
pub const MESH_RECHECK: Duration = Duration::from_secs(2);
/// Router connections open at once across the controller.
pub const MAX_CONNECTIONS: usize = 8;
/// Time allowed for one router (connecting, TLS, three queries).
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What one pass knows of the mesh.
#[derive(Debug, Clone)]
pub struct MeshRead {
    /// Why the routers cannot be read at all (the management port or profile name is taken
    /// by the spec, the management CA does not exist yet or cannot sign); the observations
    /// are then empty.
    pub blocked: Option<String>,
    /// Every router pod's answer, by pod name.
    pub observations: BTreeMap<String, Observation>,
    /// The judgement of the answers.
    pub report: MeshReport,
    /// When to read again at the latest.
    pub next: Duration,
}

impl MeshRead {
    /// `f` summed over the routers that answered.
    pub fn total(&self, f: fn(&crate::mesh::RouterView) -> u64) -> u64 {
        (self.observations.values())
            .filter_map(|o| match o {
                Observation::Answered(v) => Some(f(v)),
                Observation::Unreachable(_) => None,
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
            links_missing: n(r.missing_links.len()),
            deliveries_stuck: sum(|v| v.deliveries_stuck),
            links_blocked: sum(|v| v.links_blocked),
            connected: i64::from(r.condition.status == "True"),
        }
    }
}

struct Memo {
    pods: u64,
    at: Instant,
    observations: BTreeMap<String, Observation>,
    /// Reads in a row that found the mesh not connected.
    unsettled: u32,
}

/// The reader's state across passes: the connection bound, the TLS clients and the last
/// answers of each Interconnect.
pub struct Reader {
    limit: tokio::sync::Semaphore,
    timeout: Duration,
    clients: Clients,
    memo: Mutex<HashMap<String, Memo>>,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            limit: tokio::sync::Semaphore::new(MAX_CONNECTIONS),
            timeout: READ_TIMEOUT,
            clients: Clients::default(),
            memo: Mutex::default(),
        }
    }
}

/// The wait before reading again a mesh found not connected `unsettled` reads in a row
/// ([`MESH_RESYNC`] for a connected one, `unsettled` 0).
pub fn recheck(unsettled: u32) -> Duration {
    if unsettled == 0 {
        return MESH_RESYNC;
    }
    MESH_RECHECK.saturating_mul(1 << (unsettled - 1).min(10)).min(MESH_RESYNC)
}

fn pods_fingerprint(observed: &Observed) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in &observed.routers {
        (&p.name, &p.ip, p.ready).hash(&mut h);
    }
    h.finish()
}

impl Reader {
    /// Forgets Interconnect `key` (deleted).
    pub fn forget(&self, key: &str) {
        self.memo.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
        self.clients.forget(key);
    }

    /// The mesh of `o` for this pass: read now, or the last answers when nothing changed
    /// and no read is due (see the module docs). `management` is `Err` with why when the
    /// routers have no management listener.
    pub async fn read(
        &self,
        o: &ValidatedInterconnect,
        observed: &Observed,
        management: Result<(), String>,
        metrics: &crate::metrics::Metrics,
    ) -> MeshRead {
        let mode = if o.spec().role() == qdr_api::Role::Edge { Mode::Edge } else { Mode::Interior };
        let key = o.namespaced_name();
        let ca_name = management::ca_secret(o.name());
        let ca: Option<Data> = observed.secrets.get(&ca_name).and_then(|s| s.as_ref()?.data.clone());
        let blocked = |why: String| MeshRead {
            blocked: Some(why),
            observations: BTreeMap::new(),
            report: assess(mode, &BTreeMap::new()),
            next: MESH_RESYNC,
        };
        let ca = match (management, ca) {
            (Err(why), _) => {
                self.forget(&key);
                return blocked(why);
            }
            (Ok(()), None) => {
                return blocked(format!("the management CA Secret {ca_name} does not exist yet"));
            }
            (Ok(()), Some(ca)) => ca,
        };
        let pods = pods_fingerprint(observed);
        let reuse = {
            let memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            memo.get(&key).and_then(|m| {
                let due = recheck(m.unsettled);
                // A requeue for the due time may wake a moment early.
                let elapsed = m.at.elapsed() + Duration::from_millis(200);
                (m.pods == pods && elapsed < due).then(|| (m.observations.clone(), due - elapsed))
            })
        };
        if let Some((observations, left)) = reuse {
            return MeshRead { blocked: None, report: assess(mode, &observations), observations, next: left };
        }
        let server_name = format!("{}.{}.svc", o.name(), o.namespace());
        let tls = match self.clients.tls(&key, &server_name, &ca, observed.now) {
            Ok(t) => t,
            Err(why) => return blocked(why),
        };
        let targets: Vec<Target> =
            observed.routers.iter().map(|p| Target { pod: p.name.clone(), ip: p.ip.clone() }).collect();
        let port = u16::try_from(MANAGEMENT_PORT).expect("a port");
        let started = Instant::now();
        let observations = observe(&targets, port, &self.limit, self.timeout, Some(&tls)).await;
        metrics.mesh_read(targets.iter().filter(|t| t.ip.is_some()).count(), started.elapsed());
        let report = assess(mode, &observations);
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        // Counted since the pods last changed: the reads while routers start (each pod event
        // a read, none connected yet) must not push the next read out to the resync.
        let previous = memo.get(&key).filter(|m| m.pods == pods).map_or(0, |m| m.unsettled);
        let unsettled = if report.condition.reason == "Connected" { 0 } else { previous + 1 };
        let next = recheck(unsettled);
        memo.insert(key, Memo { pods, at: Instant::now(), observations: observations.clone(), unsettled });
        MeshRead { blocked: None, observations, report, next }
    }
}
