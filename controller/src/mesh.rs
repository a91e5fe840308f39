//! The mesh as the routers see it (design: `docs/mesh-status.md`, issue 39): management
//! answers of each router ([`reader`] asks one router) → a [`RouterView`] → the
//! [`MeshReport`] of one Interconnect, with the `MeshConnected` condition it implies. Not
//! wired into the controller yet: the listener, the read schedule and the status come next.
//!
//! A management `QUERY` answer of qdrouterd 1.19 is `{attributeNames: [..], results: [[..],
//! ..]}` (one row per entity, values in the order of the names), read here as JSON.
//!
//! Links are judged by **open inter-router connections** (entity `connection`, role
//! `inter-router`, `opened`, the peer's router id as `container`), as either end reports them:
//! a router's `router.node` table lags (a router that died stays listed, even as a direct
//! neighbour, until its link state ages out, 60 s by default), its connections do not. Router
//! ids are pod names: the operator renders `id: ${HOSTNAME}`.

pub mod management;
pub mod reader;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// Prefix of the container id the controller's reader connects with, so its own management
/// connection is not counted as a client's.
pub const READER_CONTAINER_PREFIX: &str = "qdr-operator-mesh-reader";

/// A management answer that is not what qdrouterd 1.19 sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected management answer for {entity}: {what}")]
pub struct AnswerError {
    /// The entity type asked for, e.g. `router.node`.
    pub entity: &'static str,
    /// What was wrong.
    pub what: String,
}

/// The rows of a `QUERY` answer as objects keyed by attribute name.
///
/// # Errors
/// [`AnswerError`] when `answer` has no `attributeNames` list of strings or no `results` list
/// of lists, or a row is longer than the names.
pub fn rows(entity: &'static str, answer: &Value) -> Result<Vec<Map<String, Value>>, AnswerError> {
    let err = |what: &str| AnswerError { entity, what: what.into() };
    let names: Vec<&str> = answer["attributeNames"]
        .as_array()
        .ok_or_else(|| err("no attributeNames list"))?
        .iter()
        .map(|n| n.as_str().ok_or_else(|| err("an attribute name is not a string")))
        .collect::<Result<_, _>>()?;
    let results = answer["results"].as_array().ok_or_else(|| err("no results list"))?;
    results
        .iter()
        .map(|row| {
            let values = row.as_array().ok_or_else(|| err("a result row is not a list"))?;
            if values.len() > names.len() {
                return Err(err("a result row is longer than attributeNames"));
            }
            Ok(names.iter().map(|n| n.to_string()).zip(values.iter().cloned()).collect())
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

/// One open connection of a router to another router.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Link {
    /// The peer's router id (its `container`).
    pub peer: String,
    /// `true` when this router opened it (its connector), `false` when the peer did.
    pub outgoing: bool,
    /// Whether it runs over TLS.
    pub encrypted: bool,
}

/// What one router reports of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterView {
    /// Its router id (the pod name).
    pub id: String,
    /// Interior or edge.
    pub mode: Mode,
    /// The other routers in its routing table (`router.node`, itself left out). Lags
    /// behind a router's death: see the module docs.
    pub reaches: BTreeSet<String>,
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
}

fn text(row: &Map<String, Value>, key: &str) -> Option<String> {
    row.get(key).and_then(Value::as_str).map(String::from)
}

fn count(row: &Map<String, Value>, key: &str) -> u64 {
    row.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Reads one router's answers: the `router` entity, `router.node` and `connection`.
///
/// # Errors
/// [`AnswerError`] when an answer is malformed, the `router` answer has no single row with an
/// `id`, or its `mode` is neither `interior` nor `edge`.
pub fn router_view(router: &Value, nodes: &Value, connections: &Value) -> Result<RouterView, AnswerError> {
    let me = rows("router", router)?;
    let [me] = me.as_slice() else {
        return Err(AnswerError { entity: "router", what: format!("{} rows, not 1", me.len()) });
    };
    let id = text(me, "id").ok_or(AnswerError { entity: "router", what: "no id".into() })?;
    let mode = match me.get("mode").and_then(Value::as_str) {
        Some("interior") => Mode::Interior,
        Some("edge") => Mode::Edge,
        other => return Err(AnswerError { entity: "router", what: format!("mode {other:?}") }),
    };
    let reaches =
        rows("router.node", nodes)?.iter().filter_map(|n| text(n, "id")).filter(|n| *n != id).collect();
    let (mut inter_router, mut edge, mut clients) = (Vec::new(), Vec::new(), 0);
    for c in rows("connection", connections)? {
        if c.get("opened") != Some(&Value::Bool(true)) {
            continue;
        }
        let peer = text(&c, "container").unwrap_or_default();
        let link = || Link {
            peer: peer.clone(),
            outgoing: c.get("dir").and_then(Value::as_str) == Some("out"),
            encrypted: c.get("isEncrypted") == Some(&Value::Bool(true)),
        };
        match c.get("role").and_then(Value::as_str) {
            Some("inter-router") => inter_router.push(link()),
            Some("edge") => edge.push(link()),
            Some("normal" | "route-container") if !peer.starts_with(READER_CONTAINER_PREFIX) => clients += 1,
            _ => {}
        }
    }
    inter_router.sort();
    edge.sort();
    Ok(RouterView {
        id,
        mode,
        reaches,
        inter_router,
        edge,
        clients,
        links_blocked: count(me, "linksBlocked"),
        deliveries_stuck: count(me, "deliveriesStuck"),
    })
}

/// What the reader got from one router pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// It answered.
    Answered(RouterView),
    /// It did not (no pod IP yet, connection refused, TLS, timeout, a malformed answer):
    /// why, for the condition's message.
    Unreachable(String),
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
    /// Interior routers expected (the Interconnect's interior router pods).
    pub interiors_expected: usize,
    /// Interior routers in the largest group that reach each other through open links.
    pub interiors_connected: usize,
    /// The groups of interior routers that reach each other, largest first (one group when
    /// connected), each sorted.
    pub groups: Vec<Vec<String>>,
    /// Pairs of interior routers with no open link between them (auto-mesh links every
    /// pair), each `(a, b)` with `a < b`.
    pub missing_links: Vec<(String, String)>,
    /// Edge routers expected.
    pub edges_expected: usize,
    /// Edge routers whose uplink is open.
    pub edges_uplinked: usize,
    /// Edge routers without an open uplink, sorted.
    pub not_uplinked: Vec<String>,
    /// Pods that did not answer, with why.
    pub unreachable: BTreeMap<String, String>,
    /// The `MeshConnected` condition.
    pub condition: Verdict,
}

/// Judges the mesh of one Interconnect from what each of its router pods answered
/// (`observations`: pod name → observation; `mode` is the Interconnect's
/// `deploymentPlan.role`, which every one of its routers runs).
///
/// Two interior routers are linked when either reports an open inter-router connection to
/// the other, so a router that did not answer still counts as linked through the reports of
/// its peers. `MeshConnected` is, first that applies:
/// 1. `False`/`Partitioned`: the interior routers form more than one group (each group
///    named);
/// 2. `False`/`EdgeNotUplinked`: an edge router has no open uplink (named);
/// 3. `Unknown`/`RouterUnreachable`: a router did not answer (named, with why);
/// 4. `True`/`LinksMissing`: every router reaches every other, but some pairs only
///    through a third (the pairs named);
/// 5. `True`/`Connected`.
///
/// With no router pods at all it is `Unknown`/`NoRouters`.
pub fn assess(mode: Mode, observations: &BTreeMap<String, Observation>) -> MeshReport {
    let unreachable: BTreeMap<String, String> = observations
        .iter()
        .filter_map(|(pod, o)| match o {
            Observation::Unreachable(why) => Some((pod.clone(), why.clone())),
            Observation::Answered(_) => None,
        })
        .collect();
    let views: Vec<&RouterView> = observations
        .values()
        .filter_map(|o| match o {
            Observation::Answered(v) => Some(v),
            Observation::Unreachable(_) => None,
        })
        .collect();

    let (mut groups, mut missing_links) = (Vec::new(), Vec::new());
    let (mut not_uplinked, mut edges_expected) = (Vec::new(), 0);
    let mut interiors_expected = 0;
    match mode {
        Mode::Interior => {
            let routers: Vec<&String> = observations.keys().collect();
            interiors_expected = routers.len();
            // Links to routers of other Interconnects (interRouterConnectors) are not this
            // mesh's: only pairs of this Interconnect's routers count.
            let mut linked: BTreeSet<(&str, &str)> = BTreeSet::new();
            for v in &views {
                for l in &v.inter_router {
                    let (a, b) = (v.id.as_str(), l.peer.as_str());
                    if observations.contains_key(a) && observations.contains_key(b) && a != b {
                        linked.insert(if a < b { (a, b) } else { (b, a) });
                    }
                }
            }
            for (i, a) in routers.iter().enumerate() {
                for b in &routers[i + 1..] {
                    if !linked.contains(&(a.as_str(), b.as_str())) {
                        missing_links.push((a.to_string(), b.to_string()));
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
    let answered_edges = views.len();
    let edges_uplinked = if mode == Mode::Edge { answered_edges - not_uplinked.len() } else { 0 };
    let interiors_connected = groups.first().map_or(0, Vec::len);

    let names = |v: &[String]| v.join(", ");
    let why = || unreachable.iter().map(|(p, w)| format!("{p} ({w})")).collect::<Vec<_>>().join("; ");
    let condition = if observations.is_empty() {
        Verdict { status: "Unknown", reason: "NoRouters", message: "no router pods to ask".into() }
    } else if groups.len() > 1 {
        let split: Vec<String> = groups.iter().map(|g| format!("[{}]", names(g))).collect();
        let mut message =
            format!("the interior routers are split into {} groups: {}", groups.len(), split.join(" "));
        if !unreachable.is_empty() {
            message.push_str(&format!("; not answering: {}", why()));
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
            message: format!("not answering: {}", why()),
        }
    } else if !missing_links.is_empty() {
        let pairs: Vec<String> = missing_links.iter().map(|(a, b)| format!("{a} – {b}")).collect();
        Verdict {
            status: "True",
            reason: "LinksMissing",
            message: format!(
                "every router reaches every other, but these pairs have no link of their own: {}",
                pairs.join(", ")
            ),
        }
    } else {
        let message = match mode {
            Mode::Interior => {
                format!("{interiors_connected}/{interiors_expected} interior routers linked to each other")
            }
            Mode::Edge => format!("{edges_uplinked}/{edges_expected} edge routers uplinked"),
        };
        Verdict { status: "True", reason: "Connected", message }
    };
    MeshReport {
        interiors_expected,
        interiors_connected,
        groups,
        missing_links,
        edges_expected,
        edges_uplinked,
        not_uplinked,
        unreachable,
        condition,
    }
}

/// The connected components of `nodes` under the undirected `links`, largest first (ties by
/// their first member), each sorted.
fn components(nodes: &[&String], links: &BTreeSet<(&str, &str)>) -> Vec<Vec<String>> {
    let mut group: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    // Relabel until stable: few routers, so the simple way is enough.
    loop {
        let mut changed = false;
        for (a, b) in links {
            let (ga, gb) = (group[a], group[b]);
            if ga != gb {
                let low = ga.min(gb);
                for g in group.values_mut() {
                    if *g == ga || *g == gb {
                        *g = low;
                    }
                }
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut by_group: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (n, g) in group {
        by_group.entry(g).or_default().push(n.to_string());
    }
    let mut out: Vec<Vec<String>> = by_group.into_values().collect();
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out
}
