//! The mesh as the routers see it (design: `docs/mesh-status.md`): management
//! answers of each router ([`reader`] asks one router) → a [`RouterView`] → the
//! [`MeshReport`] of one Interconnect, with the `MeshConnected` condition it implies. The
//! read schedule is `reconcile/read.rs`'s, the status `reconcile/status.rs`'s.
//!
//! A management `QUERY` answer of qdrouterd 1.19 is `{attributeNames: [..], results: [[..],
//! ..]}` (one row per entity, values in the order of the names), decoded into a bounded
//! [`answer::Table`] after [`wire`] checked its bytes.
//!
//! Links are judged by **open inter-router connections** (entity `connection`, role
//! `inter-router`, `opened`, the peer's router id as `container`), as either end reports them:
//! a router's `router.node` table lags (a router that died stays listed, even as a direct
//! neighbour, until its link state ages out, 60 s by default), its connections do not. Router
//! ids are pod names: the operator renders `id: ${HOSTNAME}`.

pub mod answer;
pub mod links;
pub mod live;
pub mod management;
pub mod pool;
pub mod reader;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use answer::{Cell, MAX_TEXT, Table, cut};

/// Prefix of the container id the controller's reader connects with, so its own management
/// connection is not counted as a client's.
pub const READER_CONTAINER_PREFIX: &str = "qdr-operator-mesh-reader";

/// The attributes asked of the `router` entity (`org.apache.qpid.dispatch.router`).
///
/// `uptimeSeconds` tells one router process from the next ([`live::Checked`]).
pub const ROUTER_ATTRIBUTES: [&str; 5] = ["id", "mode", "linksBlocked", "deliveriesStuck", "uptimeSeconds"];
/// Detailed connections kept of one router ([`RouterView::detailed`]): a tenant's router
/// that reports thousands of connections with long texts costs the controller at most
/// about 16 × 500 bytes (`controller/tests/hostile.rs` holds a whole read to its budget).
pub const MAX_DETAILED: usize = 16;
/// Bytes kept of a detailed connection's host, TLS protocol or user.
pub const MAX_DETAIL_TEXT: usize = 128;
/// The attributes asked of `router.node`.
pub const NODE_ATTRIBUTES: [&str; 1] = ["id"];
/// The attributes asked of `connection`.
pub const CONNECTION_ATTRIBUTES: [&str; 9] =
    ["container", "role", "dir", "opened", "isEncrypted", "host", "sslProto", "uptimeSeconds", "user"];
/// Router pods of one Interconnect that are read ([`qdr_api::MAX_STATUS_ROUTERS`]): the
/// largest mesh the controller judges (an Interconnect with more is not read, and says
/// so). Also the most routers kept in one view's `reaches` and links of each role: what
/// one read keeps in memory grows with the square of the routers (each interior router
/// links to every other), about 4 MB at this bound; the status keeps counts only.
pub const MAX_ROUTERS: usize = qdr_api::MAX_STATUS_ROUTERS;
/// Groups, pairs and routers named in one message or list at most; the rest are counted
/// ([`qdr_api::MAX_STATUS_NAMED`]).
pub const MAX_NAMED: usize = qdr_api::MAX_STATUS_NAMED;
/// Bytes of a condition message at most (the API allows 32768).
pub const MAX_MESSAGE: usize = 4096;
/// Bytes kept of a router id a router reports (its own, its peers', the nodes it reaches):
/// a router's id is its pod's host name (`id: ${HOSTNAME}`), at most 63 bytes.
pub const MAX_ROUTER_ID: usize = 63;

/// A router id as a view keeps it ([`router_id`]): shared by every view of one
/// Interconnect's read that names it ([`Ids`]), so a peer id is kept once, not once per
/// router that reports it.
pub type Id = Arc<str>;

/// Router ids not of the Interconnect's own pods that the views of one read keep at most
/// (its routers' links to other Interconnects' routers, the nodes they reach through
/// them); each further one is kept as [`OVER_BUDGET`]. With the pods' own names (at most
/// [`MAX_ROUTERS`]), what the views of one read keep of ids is at most
/// `(MAX_ROUTERS + MAX_FOREIGN_IDS) × 66` bytes (about 50 KB), whatever the routers answer.
pub const MAX_FOREIGN_IDS: usize = 512;
/// What a router id past [`MAX_FOREIGN_IDS`] is kept as: not a pod's, so it counts in no
/// link of the mesh; an edge router's uplink to one shows it.
pub const OVER_BUDGET: &str = "?not-kept";

/// The router ids of one Interconnect's read, each kept once ([`Id`]): the names of its
/// pods, and at most [`MAX_FOREIGN_IDS`] others.
#[derive(Debug, Default)]
pub struct Ids {
    kept: HashSet<Id>,
    pods: usize,
    over: Option<Id>,
    /// Ids kept as [`OVER_BUDGET`].
    pub dropped: usize,
}

impl Ids {
    /// The ids of a read of the routers of `pods`.
    pub fn new<'a>(pods: impl IntoIterator<Item = &'a str>) -> Ids {
        let kept: HashSet<Id> = pods.into_iter().map(Id::from).collect();
        Ids { pods: kept.len(), kept, over: None, dropped: 0 }
    }

    /// `id`, shared with every other view that names it; [`OVER_BUDGET`] once the budget
    /// of foreign ids is spent.
    pub fn intern(&mut self, id: &str) -> Id {
        if let Some(k) = self.kept.get(id) {
            return k.clone();
        }
        if self.kept.len() - self.pods < MAX_FOREIGN_IDS {
            let k = Id::from(id);
            self.kept.insert(k.clone());
            return k;
        }
        self.dropped += 1;
        self.over.get_or_insert_with(|| Id::from(OVER_BUDGET)).clone()
    }

    /// Ids kept, the pods' own included.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

/// A router id as a router reported it, as kept: every character outside `[A-Za-z0-9._-]`
/// (what a host name holds, and a little more) replaced by `?`, cut to [`MAX_ROUTER_ID`]
/// bytes with `…` when longer. So whatever a router chooses, an id costs at most 66 bytes
/// in memory and in the status, where it needs no JSON escape (a control character is
/// escaped in 6).
pub fn router_id(text: &str) -> String {
    let mut id: String = (text.chars().take(MAX_ROUTER_ID + 1))
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '?' })
        .collect();
    if id.len() > MAX_ROUTER_ID {
        id.truncate(MAX_ROUTER_ID);
        id.push('…');
    }
    id
}

/// A management answer that is not what qdrouterd 1.19 sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected management answer for {entity}: {what}")]
pub struct AnswerError {
    /// The entity type asked for, e.g. `router.node`.
    pub entity: &'static str,
    /// What was wrong (cut to [`MAX_TEXT`] bytes).
    pub what: String,
}

impl AnswerError {
    fn new(entity: &'static str, what: impl Into<String>) -> Self {
        AnswerError { entity, what: cut(what.into(), MAX_TEXT) }
    }
}

/// One row of an answer by attribute name.
pub struct Row<'a> {
    table: &'a Table,
    cells: &'a [Cell],
}

impl Row<'_> {
    /// The cell of attribute `name` ([`Cell::Null`] when absent).
    pub fn get(&self, name: &str) -> &Cell {
        self.table.column(name).and_then(|i| self.cells.get(i)).unwrap_or(&Cell::Null)
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.get(name).text()
    }
}

/// The rows of a `QUERY` answer.
///
/// # Errors
/// [`AnswerError`] when `answer` has no `attributeNames` list or no `results` list, or a
/// row is longer than the names.
pub fn rows<'a>(entity: &'static str, answer: &'a Table) -> Result<Vec<Row<'a>>, AnswerError> {
    let names = answer.names.as_ref().ok_or_else(|| AnswerError::new(entity, "no attributeNames list"))?;
    let results = answer.rows.as_ref().ok_or_else(|| AnswerError::new(entity, "no results list"))?;
    results
        .iter()
        .map(|cells| {
            if cells.len() > names.len() {
                return Err(AnswerError::new(entity, "a result row is longer than attributeNames"));
            }
            Ok(Row { table: answer, cells })
        })
        .collect()
}

/// A router's mode (`router` entity, `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Joins the mesh of interior routers.
    Interior,
    /// Uplinks to interior routers; never to another edge.
    Edge,
}

impl Mode {
    /// The mode every router of an Interconnect whose `deploymentPlan.role` is `role` runs.
    pub fn of(role: qdr_api::Role) -> Mode {
        if role == qdr_api::Role::Edge { Mode::Edge } else { Mode::Interior }
    }
}

/// One open connection of a router to another router.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Link {
    /// The peer's router id (its `container`, as [`router_id`] keeps it).
    pub peer: Id,
    /// `true` when this router opened it (its connector), `false` when the peer did.
    pub outgoing: bool,
    /// Whether it runs over TLS.
    pub encrypted: bool,
}

/// What one router reports of itself. Every list holds at most [`MAX_ROUTERS`] entries
/// and every router id is kept as [`router_id`] keeps it (at most 66 bytes, nothing to
/// escape), whatever the router answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterView {
    /// Its router id (the pod name).
    pub id: Id,
    /// Interior or edge.
    pub mode: Mode,
    /// The other routers in its routing table (`router.node`, itself left out). Lags
    /// behind a router's death: see the module docs.
    pub reaches: BTreeSet<Id>,
    /// Its open inter-router connections.
    pub inter_router: Vec<Link>,
    /// Its open edge connections (an edge router's uplink, an interior router's edges).
    pub edge: Vec<Link>,
    /// Open connections of clients (role `normal` and `route-container`), the reader's own
    /// left out.
    pub clients: u64,
    /// Links blocked by flow control (`router` entity, `linksBlocked`).
    pub links_blocked: u64,
    /// Deliveries stuck for more than 10 s (`router` entity, `deliveriesStuck`).
    pub deliveries_stuck: u64,
    /// What the visit did to its live entities ([`live`]), when it was given some to hold
    /// (boxed: a view without live entities stays small).
    pub live: Option<Box<live::Outcome>>,
    /// Its open inter-router and edge connections with their details, the first
    /// [`MAX_DETAILED`], each text cut to [`MAX_DETAIL_TEXT`] bytes: what a Link's and an
    /// AccessGrant's status report ([`crate::site_links`]).
    pub detailed: Vec<Connection>,
    /// Connector deletions the visit left for a later one, a connection attempt being in
    /// flight ([`links::busy`]): the router is visited again soon.
    pub deferred: u32,
    /// `true` when it was asked through another router's connection (its management node
    /// addressed over the mesh, `_topo/0/<id>/$management`: [`reader::observe`]), `false`
    /// when on a connection of its own.
    pub routed: bool,
}

/// An open inter-router or edge connection of a router, with what the statuses of links
/// across clusters report (qdrouterd's `connection` entity).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Connection {
    /// The peer's router id (its `container`, as [`router_id`] keeps it).
    pub peer: Id,
    /// `true` when this router opened it (its connector).
    pub outgoing: bool,
    /// `inter-router` or `edge` (the only roles kept; no allocation of its own).
    pub role: &'static str,
    /// The remote address as the router reports it (`host:port` of an outgoing one).
    pub host: String,
    /// The TLS protocol (`TLSv1.3`), when encrypted.
    pub tls: Option<String>,
    /// Seconds open.
    pub uptime: Option<u64>,
    /// The authenticated user (a client certificate's subject under SASL EXTERNAL).
    pub user: Option<String>,
}

impl RouterView {
    /// The view of the one row of a `router` answer, with no nodes or connections yet (see
    /// [`RouterView::add_nodes`], [`RouterView::add_connections`], one call per page).
    ///
    /// # Errors
    /// [`AnswerError`] when the answer is malformed, has no single row with an `id`, or its
    /// `mode` is neither `interior` nor `edge`.
    pub fn of_router(router: &Table) -> Result<RouterView, AnswerError> {
        let me = rows("router", router)?;
        let [me] = me.as_slice() else {
            return Err(AnswerError::new("router", format!("{} rows, not 1", me.len())));
        };
        let id = router_id(me.text("id").ok_or_else(|| AnswerError::new("router", "no id"))?).into();
        let mode = match me.get("mode") {
            Cell::Text(m) if m == "interior" => Mode::Interior,
            Cell::Text(m) if m == "edge" => Mode::Edge,
            other => return Err(AnswerError::new("router", format!("mode {other:?}"))),
        };
        Ok(RouterView {
            id,
            mode,
            reaches: BTreeSet::new(),
            inter_router: Vec::new(),
            edge: Vec::new(),
            clients: 0,
            links_blocked: me.get("linksBlocked").count().unwrap_or(0),
            deliveries_stuck: me.get("deliveriesStuck").count().unwrap_or(0),
            live: None,
            detailed: Vec::new(),
            deferred: 0,
            routed: false,
        })
    }

    /// The `uptimeSeconds` of a `router` answer (one row): how long the router process has
    /// been up, whole seconds; `None` when it is not a non-negative integer, or the answer
    /// has not exactly one row.
    pub fn uptime_of(router: &Table) -> Option<u64> {
        match rows("router", router).ok()?.as_slice() {
            [me] => me.get("uptimeSeconds").count(),
            _ => None,
        }
    }

    /// Adds a page of a `router.node` answer; returns its rows.
    ///
    /// # Errors
    /// [`AnswerError`] when the page is malformed.
    pub fn add_nodes(&mut self, nodes: &Table) -> Result<usize, AnswerError> {
        let rows = rows("router.node", nodes)?;
        for n in &rows {
            if let Some(node) = n.text("id").map(router_id)
                && *node != *self.id
                && self.reaches.len() < MAX_ROUTERS
            {
                self.reaches.insert(node.into());
            }
        }
        Ok(rows.len())
    }

    /// Adds a page of a `connection` answer; returns its rows.
    ///
    /// # Errors
    /// [`AnswerError`] when the page is malformed.
    pub fn add_connections(&mut self, connections: &Table) -> Result<usize, AnswerError> {
        let rows = rows("connection", connections)?;
        for c in &rows {
            if *c.get("opened") != Cell::Bool(true) {
                continue;
            }
            let peer = c.text("container").unwrap_or_default();
            let link = || Link {
                peer: router_id(peer).into(),
                outgoing: c.text("dir") == Some("out"),
                encrypted: *c.get("isEncrypted") == Cell::Bool(true),
            };
            let role = match c.text("role") {
                Some("inter-router") => Some("inter-router"),
                Some("edge") => Some("edge"),
                _ => None,
            };
            if let Some(role) = role
                && self.detailed.len() < MAX_DETAILED
            {
                let text = |k: &str| c.text(k).map(|t| cut(t.to_string(), MAX_DETAIL_TEXT));
                self.detailed.push(Connection {
                    peer: router_id(peer).into(),
                    outgoing: c.text("dir") == Some("out"),
                    role,
                    host: text("host").unwrap_or_default(),
                    tls: text("sslProto"),
                    uptime: c.get("uptimeSeconds").count(),
                    user: text("user"),
                });
            }
            match c.text("role") {
                Some("inter-router") if self.inter_router.len() < MAX_ROUTERS => {
                    self.inter_router.push(link())
                }
                Some("edge") if self.edge.len() < MAX_ROUTERS => self.edge.push(link()),
                Some("normal" | "route-container") if !peer.starts_with(READER_CONTAINER_PREFIX) => {
                    self.clients += 1;
                }
                _ => {}
            }
        }
        self.inter_router.sort();
        self.edge.sort();
        Ok(rows.len())
    }
}

/// Open outgoing connections kept by one visit at most ([`open_outgoing`]): more than the
/// largest mesh's links and a spec's connectors. A connector whose connection is past it
/// looks [`links::busy`], and waits (the safe side).
pub const MAX_OPEN_HOSTS: usize = 1024;

/// Adds the `host:port` (each cut to [`MAX_TEXT`] bytes) of each open outgoing connection
/// of a page of a `connection` answer to `into`, up to [`MAX_OPEN_HOSTS`]: what
/// [`links::busy`] tells a connector's open connection from an attempt in flight by. A
/// malformed page adds nothing ([`RouterView::add_connections`] reports it).
pub fn open_outgoing(connections: &Table, into: &mut BTreeSet<String>) {
    for c in rows("connection", connections).unwrap_or_default() {
        if into.len() < MAX_OPEN_HOSTS
            && *c.get("opened") == Cell::Bool(true)
            && c.text("dir") == Some("out")
            && let Some(host) = c.text("host")
        {
            into.insert(host.to_string());
        }
    }
}

impl RouterView {
    /// This view with every router id it keeps taken from `ids` (shared with the other
    /// views of the read that name it, or [`OVER_BUDGET`]), and its lists of connections
    /// without spare room: the form a view is kept in between reads.
    pub fn interned(mut self, ids: &mut Ids) -> RouterView {
        self.id = ids.intern(&self.id);
        self.reaches = std::mem::take(&mut self.reaches).iter().map(|r| ids.intern(r)).collect();
        for l in self.inter_router.iter_mut().chain(self.edge.iter_mut()) {
            l.peer = ids.intern(&l.peer);
        }
        for c in &mut self.detailed {
            c.peer = ids.intern(&c.peer);
        }
        // Kept until the next read: without the room the answers' growth left (a vector
        // grown by one push holds 4; a router has 2 links in a mesh of 3). The lists took
        // 4.2 MB at 6,000 routers (heaptrack), about half of it spare room.
        self.inter_router.shrink_to_fit();
        self.edge.shrink_to_fit();
        self.detailed.shrink_to_fit();
        self
    }
}

/// Reads one router's answers, one page each: the `router` entity, `router.node` and
/// `connection`.
///
/// # Errors
/// [`AnswerError`]: see [`RouterView::of_router`], [`RouterView::add_nodes`],
/// [`RouterView::add_connections`].
pub fn router_view(router: &Table, nodes: &Table, connections: &Table) -> Result<RouterView, AnswerError> {
    let mut view = RouterView::of_router(router)?;
    view.add_nodes(nodes)?;
    view.add_connections(connections)?;
    Ok(view)
}

/// What the reader got from one router pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// It answered.
    Answered(RouterView),
    /// It was asked and did not answer (connection refused, TLS, timeout, an answer refused
    /// or malformed): why, for the condition's message (at most a few hundred bytes).
    Unreachable(String),
    /// It was not asked: the pod has no IP or is not Ready yet (a rollout, a scale-up).
    /// Such a router is left out of the judgement: no group of its own, no missing link.
    Pending(String),
}

/// A condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: &'static str,
    /// For people: names the routers.
    pub message: String,
}

/// The mesh of one Interconnect as its routers report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshReport {
    /// Interior routers expected (the Interconnect's interior router pods, pending ones
    /// included).
    pub interiors_expected: usize,
    /// Interior routers in the largest group that reach each other through open links.
    pub interiors_connected: usize,
    /// The groups of interior routers that reach each other, largest first (one group when
    /// connected), each sorted; pending routers are in none.
    pub groups: Vec<Vec<String>>,
    /// Pairs of interior routers with no open link between them (auto-mesh links every
    /// pair), each `(a, b)` with `a < b`; pending routers are in none. The first
    /// [`MAX_NAMED`] only: [`MeshReport::links_missing`] counts them all.
    pub missing_links: Vec<(String, String)>,
    /// How many pairs have no link of their own.
    pub links_missing: usize,
    /// Edge routers expected.
    pub edges_expected: usize,
    /// Edge routers whose uplink is open.
    pub edges_uplinked: usize,
    /// Edge routers without an open uplink, sorted.
    pub not_uplinked: Vec<String>,
    /// Pods that did not answer, with why.
    pub unreachable: BTreeMap<String, String>,
    /// Pods not asked yet (no IP, not Ready), with why.
    pub pending: BTreeMap<String, String>,
    /// The `MeshConnected` condition.
    pub condition: Verdict,
}

/// How many routers that are not among `observations`' pods (other Interconnects' or
/// other sites' routers) the routers that answered hold an open inter-router or edge
/// connection with, each counted once (`status.mesh.remoteRouters`); an id past
/// [`MAX_FOREIGN_IDS`] ([`OVER_BUDGET`]) is not counted.
pub fn remote_routers(observations: &BTreeMap<String, Observation>) -> usize {
    let mut remote: BTreeSet<&str> = BTreeSet::new();
    for o in observations.values() {
        let Observation::Answered(v) = o else { continue };
        for l in v.inter_router.iter().chain(&v.edge) {
            let peer: &str = &l.peer;
            if peer != OVER_BUDGET && !observations.contains_key(peer) {
                remote.insert(peer);
            }
        }
    }
    remote.len()
}

/// One of the Interconnect's own routers whose id another router of the network has too
/// ([`id_clashes`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IdClash {
    /// The own router pod whose name (its router id) is taken twice.
    pub pod: String,
    /// Who else has it: a site certificate's identity, else the remote address a router
    /// reports for the connection.
    pub other: String,
}

/// The own router pods (`own`, the Interconnect's running router pods) whose router id a
/// router of another site has too, as the routers that answered (`observations`) show it:
///
/// * a connection of a site (its user a site certificate's subject,
///   [`qdr_api::links::token::site_of_user`]) whose peer id is the name of an own pod;
/// * an inter-router or edge connection whose peer id is the answering router's own id (a
///   router never links to itself).
///
/// Router ids are pod names (`${HOSTNAME}`), so two Interconnects of the same name and
/// namespace in two linked clusters can clash: a DaemonSet's pods differ by a 5-character
/// suffix only (27⁵ values), a Deployment's also by its pod-template hash. qdrouterd 1.19
/// does not refuse such a peer: it ignores its hellos (`hello.py`: "Detected Neighbor
/// Router with a Duplicate ID") and routes to whichever router of that id it heard last, so
/// the two never link and messages go astray. Replacing the own pod gives its router a new
/// name. Only connections the reader kept ([`MAX_DETAILED`] per router) are looked at.
pub fn id_clashes(own: &BTreeSet<&str>, observations: &BTreeMap<String, Observation>) -> BTreeSet<IdClash> {
    let mut out = BTreeSet::new();
    for (pod, o) in observations {
        let Observation::Answered(v) = o else { continue };
        for c in &v.detailed {
            let peer: &str = &c.peer;
            let site = c.user.as_deref().and_then(qdr_api::links::token::site_of_user);
            let other = || site.map_or_else(|| c.host.clone(), str::to_string);
            if peer == &*v.id && own.contains(pod.as_str()) {
                out.insert(IdClash { pod: pod.clone(), other: other() });
            } else if site.is_some() && own.contains(peer) {
                out.insert(IdClash { pod: peer.to_string(), other: other() });
            }
        }
    }
    out
}

/// The routers of `observations` (pod name → what it answered) that are **linked**, the
/// readiness gate `qdr-operator.io/linked` (docs/mesh-status.md, "Ready means linked"):
///
/// * edge: it answered with its uplink (an outgoing edge link) open;
/// * interior: it answered and holds an inter-router link (reported by either end) to every
///   other router of `ready` (the pods Ready already: ungated, or linked at an earlier pass)
///   that answered this read; when no other router of `ready` answered (a new mesh), to every
///   other router that answered; a router with no other answering router is linked alone.
///
/// Routers not answered (pending, joining within the grace, not answering) are neither
/// linked nor waited for: a router gone silent must not hold a rollout that replaces it.
/// The result may include routers of `ready`; the caller sets the gate on those it waits for.
pub fn linked(
    mode: Mode,
    observations: &BTreeMap<String, Observation>,
    ready: &BTreeSet<String>,
) -> BTreeSet<String> {
    let views: BTreeMap<&str, &RouterView> = observations
        .iter()
        .filter_map(|(p, o)| match o {
            Observation::Answered(v) => Some((p.as_str(), v)),
            _ => None,
        })
        .collect();
    match mode {
        Mode::Edge => (views.iter())
            .filter(|(_, v)| v.edge.iter().any(|l| l.outgoing))
            .map(|(p, _)| p.to_string())
            .collect(),
        Mode::Interior => {
            // Pairs linked, by pod (a router's id is its pod's name), as either end reports.
            let mut pairs: BTreeSet<(&str, &str)> = BTreeSet::new();
            for (&p, v) in &views {
                for l in &v.inter_router {
                    let q = &*l.peer;
                    if p != q && views.contains_key(q) {
                        pairs.insert((p.min(q), p.max(q)));
                    }
                }
            }
            (views.keys().copied())
                .filter(|&p| {
                    let others = || views.keys().copied().filter(move |&q| q != p);
                    let mut must: Vec<&str> = others().filter(|q| ready.contains(*q)).collect();
                    if must.is_empty() {
                        must = others().collect();
                    }
                    must.iter().all(|&q| pairs.contains(&(p.min(q), p.max(q))))
                })
                .map(str::to_string)
                .collect()
        }
    }
}

/// Judges the mesh of one Interconnect from what each of its router pods answered
/// (`observations`: pod name → observation; `mode` is the Interconnect's
/// `deploymentPlan.role`, which every one of its routers runs).
///
/// Two interior routers are linked when either reports an open inter-router connection to
/// the other, so a router that did not answer still counts as linked through the reports of
/// its peers. Pending routers ([`Observation::Pending`]) are left out. `MeshConnected` is,
/// first that applies:
/// 1. `False`/`Partitioned`: the interior routers form more than one group, and at least
///    two groups each hold a router that answered (each group named). Routers that did
///    not answer and that no peer reports a link to prove nothing: a default-deny
///    NetworkPolicy on the management port must not read as a split mesh;
/// 2. `False`/`EdgeNotUplinked`: an edge router that answered has no open uplink (named);
/// 3. `Unknown`/`RouterUnreachable`: a router did not answer (named, with why);
/// 4. `Unknown`/`NoRouters`: no router pods, or none ready to be asked yet;
/// 5. `True`/`LinksMissing`: every router reaches every other, but some pairs only
///    through a third (the pairs named);
/// 6. `True`/`Connected` (routers still starting are counted and named in the message).
pub fn assess(mode: Mode, observations: &BTreeMap<String, Observation>) -> MeshReport {
    let mut unreachable = BTreeMap::new();
    let mut pending = BTreeMap::new();
    let mut views: Vec<&RouterView> = Vec::new();
    for (pod, o) in observations {
        match o {
            Observation::Answered(v) => views.push(v),
            Observation::Unreachable(why) => {
                unreachable.insert(pod.clone(), why.clone());
            }
            Observation::Pending(why) => {
                pending.insert(pod.clone(), why.clone());
            }
        }
    }
    // The pods judged: every one but the pending.
    let judged: BTreeSet<&str> =
        observations.keys().map(String::as_str).filter(|p| !pending.contains_key(*p)).collect();
    let answered: BTreeSet<&str> = observations
        .iter()
        .filter(|(_, o)| matches!(o, Observation::Answered(_)))
        .map(|(p, _)| p.as_str())
        .collect();

    let (mut groups, mut missing_links, mut links_missing) = (Vec::new(), Vec::new(), 0);
    let (mut not_uplinked, mut edges_expected) = (Vec::new(), 0);
    let mut interiors_expected = 0;
    match mode {
        Mode::Interior => {
            let routers: Vec<&str> = judged.iter().copied().collect();
            interiors_expected = observations.len();
            // Links to routers of other Interconnects (interRouterConnectors) are not this
            // mesh's: only pairs of this Interconnect's routers count.
            let mut linked: BTreeSet<(&str, &str)> = BTreeSet::new();
            for v in &views {
                for l in &v.inter_router {
                    let (a, b) = (&*v.id, &*l.peer);
                    if judged.contains(a) && judged.contains(b) && a != b {
                        linked.insert(if a < b { (a, b) } else { (b, a) });
                    }
                }
            }
            for (i, a) in routers.iter().enumerate() {
                for b in &routers[i + 1..] {
                    if !linked.contains(&(*a, *b)) {
                        links_missing += 1;
                        if missing_links.len() < MAX_NAMED {
                            missing_links.push((a.to_string(), b.to_string()));
                        }
                    }
                }
            }
            groups = components(&routers, &linked);
        }
        Mode::Edge => {
            edges_expected = observations.len();
            for (pod, o) in observations {
                if let Observation::Answered(v) = o
                    && !v.edge.iter().any(|l| l.outgoing)
                {
                    not_uplinked.push(pod.clone());
                }
            }
        }
    }
    let edges_uplinked = if mode == Mode::Edge { views.len() - not_uplinked.len() } else { 0 };
    let interiors_connected = groups.first().map_or(0, Vec::len);
    let answering_groups = groups.iter().filter(|g| g.iter().any(|r| answered.contains(r.as_str()))).count();

    let names = |v: &[String]| named(v.iter().map(String::as_str), v.len());
    let condition = if answering_groups > 1 {
        let split: Vec<String> = groups.iter().take(MAX_NAMED).map(|g| format!("[{}]", names(g))).collect();
        let mut message =
            format!("the interior routers are split into {} groups: {}", groups.len(), split.join(" "));
        if groups.len() > MAX_NAMED {
            message.push_str(&format!(" and {} more", groups.len() - MAX_NAMED));
        }
        if !unreachable.is_empty() {
            message.push_str(&format!("; not answering: {}", listed(&unreachable)));
        }
        Verdict { status: "False", reason: "Partitioned", message }
    } else if !not_uplinked.is_empty() {
        Verdict {
            status: "False",
            reason: "EdgeNotUplinked",
            message: format!("edge routers without an open uplink: {}", names(&not_uplinked)),
        }
    } else if !unreachable.is_empty() {
        Verdict {
            status: "Unknown",
            reason: "RouterUnreachable",
            message: format!("not answering: {}", listed(&unreachable)),
        }
    } else if views.is_empty() {
        let message = if observations.is_empty() {
            "no router pods to ask".to_string()
        } else {
            format!("no router is ready to be asked yet: {}", listed(&pending))
        };
        Verdict { status: "Unknown", reason: "NoRouters", message }
    } else if !missing_links.is_empty() {
        let pairs: Vec<String> = missing_links.iter().map(|(a, b)| format!("{a} – {b}")).collect();
        Verdict {
            status: "True",
            reason: "LinksMissing",
            message: format!(
                "every router reaches every other, but these pairs have no link of their own: {}",
                named(pairs.iter().map(String::as_str), links_missing)
            ),
        }
    } else {
        let mut message = match mode {
            Mode::Interior => {
                format!("{interiors_connected}/{interiors_expected} interior routers linked to each other")
            }
            Mode::Edge => format!("{edges_uplinked}/{edges_expected} edge routers uplinked"),
        };
        if !pending.is_empty() {
            // Named, with why: a router that cannot be scheduled is seen here as well as in
            // `Ready` (issue 57: the others link without it).
            message.push_str(&format!("; {} starting: {}", pending.len(), listed(&pending)));
        }
        Verdict { status: "True", reason: "Connected", message }
    };
    let condition = Verdict { message: cut(condition.message, MAX_MESSAGE), ..condition };
    MeshReport {
        interiors_expected,
        interiors_connected,
        groups,
        missing_links,
        links_missing,
        edges_expected,
        edges_uplinked,
        not_uplinked,
        unreachable,
        pending,
        condition,
    }
}

/// The first [`MAX_NAMED`] of `items` (`total` in all), comma-separated, then `and N more`.
fn named<'a>(items: impl Iterator<Item = &'a str>, total: usize) -> String {
    let mut out = items.take(MAX_NAMED).collect::<Vec<_>>().join(", ");
    if total > MAX_NAMED {
        out.push_str(&format!(" and {} more", total - MAX_NAMED));
    }
    out
}

/// Routers with why, grouped by why (many routers fail alike: a NetworkPolicy, a timeout):
/// `why: a, b and N more; why: c`, at most [`MAX_NAMED`] reasons.
fn listed(m: &BTreeMap<String, String>) -> String {
    let mut by_why: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pod, why) in m {
        by_why.entry(why.as_str()).or_default().push(pod.as_str());
    }
    let mut parts: Vec<String> = (by_why.iter().take(MAX_NAMED))
        .map(|(why, pods)| format!("{} ({why})", named(pods.iter().copied(), pods.len())))
        .collect();
    if by_why.len() > MAX_NAMED {
        parts.push(format!("and {} other reasons", by_why.len() - MAX_NAMED));
    }
    parts.join("; ")
}

/// The connected components of `nodes` under the undirected `links`, largest first (ties by
/// their first member), each sorted. Union–find: near-linear in the links.
fn components(nodes: &[&str], links: &BTreeSet<(&str, &str)>) -> Vec<Vec<String>> {
    let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut parent: Vec<usize> = (0..nodes.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (a, b) in links {
        let (ra, rb) = (root(&mut parent, index[a]), root(&mut parent, index[b]));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    }
    let mut by_group: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let r = root(&mut parent, i);
        by_group.entry(r).or_default().push(n.to_string());
    }
    let mut out: Vec<Vec<String>> = by_group.into_values().collect();
    for g in &mut out {
        g.sort();
    }
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out
}
