//! The inter-router connectors the controller keeps on interior routers
//! (docs/mesh-status.md, "Who links the routers").
//!
//! The image's `auto_mesh.py` (`QDROUTERD_AUTO_MESH_DISCOVERY=QUERY`) lists the namespace's
//! pods before the router starts and waits until **every** pod labelled as a router has an
//! IP: one Pending router kept all the others from starting. So the controller links the
//! routers itself, over the management connection it already holds to each one, in the same
//! visit as its read ([`super::reader`]): each interior router holds one connector to every
//! router pod of its Interconnect whose name sorts before its own and that has an IP, and
//! nothing else by the operator's [`PREFIX`]. Every pair of routers is then linked once
//! (the later name dials the earlier), a router starts without waiting on anyone, a router
//! that arrives later is linked on the read its IP and readiness trigger, and a router that
//! went away is no longer dialled.
//!
//! The connector is what `auto_mesh.py` wrote: role `inter-router`, the pod's IP, the port
//! and sslProfile of the first inter-router listener of the configuration, host name
//! verification off (a pod IP is in no certificate; the peer's certificate is still checked
//! against the profile's CA, and the listener's `authenticatePeer` still asks for the
//! client's).

use super::answer::{Cell, Table};
use super::{AnswerError, rows};

/// The start of every connector name the controller writes: `qdr-operator-mesh-<pod>`. Only
/// connectors so named, with role `inter-router`, are ever deleted, and never one the
/// configuration itself names.
pub const PREFIX: &str = "qdr-operator-mesh-";
/// The management entity type of a connector.
pub const ENTITY: &str = "org.apache.qpid.dispatch.connector";
/// The attributes asked of each connector.
pub const ATTRIBUTES: [&str; 6] = ["name", "role", "host", "port", "sslProfile", "connectionStatus"];

/// Whether deleting a connector now could crash its router: its `connectionStatus` is
/// `SUCCESS` and no open outgoing connection of the router is to its `host:port` (`open`),
/// so a connection attempt is in flight.
///
/// qdrouterd 1.19 marks a connector `SUCCESS` (`CXTR_STATE_OPEN`) when an attempt starts
/// (`server.c` `try_open_lh`), not when it succeeds. A `DELETE` during the attempt marks it
/// deleted and frees its timer; when the attempt then fails (a peer gone: `No route to
/// host`, up to the TCP connect timeout later), the error handler overwrites the mark with
/// `FAILED`, and freeing the connection re-arms the freed timer: `SIGSEGV`, the router's
/// container restarts (exit code 139) and every client connection on it drops. Between
/// attempts (`CONNECTING`, 5 s) and with its connection open, a `DELETE` is safe.
pub fn busy(status: Option<&str>, host: &str, port: &str, open: &std::collections::BTreeSet<String>) -> bool {
    status == Some("SUCCESS") && !open.contains(&format!("{host}:{port}"))
}
/// Connectors read of one router at most (the spec's own and the operator's): more than
/// the largest spec and [`super::MAX_ROUTERS`] peers.
pub const MAX_CONNECTOR_ROWS: usize = 4096;
/// Writes (`CREATE` or `DELETE`) to one router in one visit at most: a router that lists
/// thousands of connectors by the operator's prefix gets its writes spread over visits.
pub const MAX_WRITES: usize = 2 * super::MAX_ROUTERS;

/// How every router dials a peer: from the first inter-router listener of the configuration
/// (`auto_mesh.py`'s rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The listener's port, as the router's schema types it (a string).
    pub port: String,
    /// The listener's sslProfile, when it has one.
    pub ssl_profile: Option<String>,
}

/// How the routers of `spec` (defaulted) dial each other: `None` for edge routers (they
/// uplink through the configuration's own edge connectors) and for a configuration with no
/// inter-router listener (nothing to dial).
pub fn template(spec: &qdr_api::InterconnectSpec) -> Option<Template> {
    if spec.role() == qdr_api::Role::Edge {
        return None;
    }
    let first = spec.inter_router_listeners.as_ref()?.first()?;
    Some(Template { port: first.port.to_string(), ssl_profile: first.ssl_profile.clone() })
}

/// One inter-router connector.
#[derive(Debug, Clone)]
pub struct Connector {
    /// Its entity name (`PREFIX` and the peer pod's name for the operator's own).
    pub name: String,
    /// The peer's address (its pod IP).
    pub host: String,
    /// The peer's inter-router port.
    pub port: String,
    /// The sslProfile it dials with.
    pub ssl_profile: Option<String>,
    /// A held connector's: deleting it now could crash the router ([`busy`]). Always
    /// `false` in a desired one, and not compared.
    pub busy: bool,
}

impl PartialEq for Connector {
    fn eq(&self, other: &Connector) -> bool {
        (&self.name, &self.host, &self.port, &self.ssl_profile)
            == (&other.name, &other.host, &other.port, &other.ssl_profile)
    }
}
impl Eq for Connector {}

impl Connector {
    /// The attributes of a management `CREATE`: `(name, value)`, strings and one boolean
    /// (`verifyHostname` false).
    pub fn attributes(&self) -> Vec<(&'static str, Attribute)> {
        let mut a = vec![
            ("name", Attribute::Text(self.name.clone())),
            ("role", Attribute::Text("inter-router".into())),
            ("host", Attribute::Text(self.host.clone())),
            ("port", Attribute::Text(self.port.clone())),
        ];
        if let Some(p) = &self.ssl_profile {
            a.push(("sslProfile", Attribute::Text(p.clone())));
            a.push(("verifyHostname", Attribute::Bool(false)));
        }
        a
    }
}

/// One attribute value of a `CREATE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    /// A string.
    Text(String),
    /// A boolean.
    Bool(bool),
    /// An integer (a cost, a capacity, a phase).
    Int(i64),
}

/// The connectors router pod `pod` should hold: one to each of `peers` (pod name and IP)
/// whose name sorts before `pod`'s.
pub fn desired(pod: &str, peers: &[(String, String)], template: &Template) -> Vec<Connector> {
    let mut out: Vec<Connector> = (peers.iter())
        .filter(|(name, _)| name.as_str() < pod)
        .map(|(name, ip)| Connector {
            name: format!("{PREFIX}{name}"),
            host: ip.clone(),
            port: template.port.clone(),
            ssl_profile: template.ssl_profile.clone(),
            busy: false,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What to write to a router that holds `existing` so it holds `desired`: the names to
/// `DELETE` (the operator's connectors not desired as they are, never a name in `keep`,
/// the configuration's own, nor one [`Connector::busy`]: it waits for a later visit, and
/// so does its replacement), then the connectors to `CREATE`. At most [`MAX_WRITES`] in
/// all, deletes first (a changed connector is deleted, then created again on a later visit
/// when the bound cut it). A desired connector named in `unready` (its peer does not listen
/// yet) is not created, and is not deleted when held.
pub fn changes(
    desired: &[Connector],
    existing: &[Connector],
    keep: &[String],
    unready: &[String],
) -> (Vec<String>, Vec<Connector>) {
    let ours = |c: &&Connector| c.name.starts_with(PREFIX) && !keep.contains(&c.name) && !c.busy;
    let deletes: Vec<String> = (existing.iter().filter(ours))
        .filter(|c| !desired.contains(c))
        .map(|c| c.name.clone())
        .take(MAX_WRITES)
        .collect();
    let held = |d: &Connector| existing.contains(d) && !deletes.contains(&d.name);
    let creates: Vec<Connector> = (desired.iter())
        .filter(|d| !held(d))
        .filter(|d| !existing.iter().any(|e| e.name == d.name) || deletes.contains(&d.name))
        .filter(|d| !unready.contains(&d.name))
        .take(MAX_WRITES - deletes.len())
        .cloned()
        .collect();
    (deletes, creates)
}

/// How many of the operator's connectors in `existing` [`changes`] leaves for a later
/// visit because they are [`Connector::busy`] (the visit then asks to be repeated soon).
pub fn deferred(desired: &[Connector], existing: &[Connector], keep: &[String]) -> u32 {
    (existing.iter())
        .filter(|c| c.busy && c.name.starts_with(PREFIX) && !keep.contains(&c.name) && !desired.contains(c))
        .count()
        .try_into()
        .unwrap_or(u32::MAX)
}

/// Adds a page of a connector `QUERY` answer to `into`: the operator's inter-router
/// connectors only (by [`PREFIX`] and role), each marked [`busy`] against the router's open
/// outgoing connections `open` (`host:port`, [`super::open_outgoing`]); returns the page's
/// rows.
///
/// # Errors
/// [`AnswerError`] when the page is malformed.
pub fn add_connectors(
    page: &Table,
    open: &std::collections::BTreeSet<String>,
    into: &mut Vec<Connector>,
) -> Result<usize, AnswerError> {
    let rows = rows("connector", page)?;
    for r in &rows {
        let text = |n: &str| r.get(n).text().map(str::to_string);
        let (Some(name), Some("inter-router")) = (text("name"), r.get("role").text()) else { continue };
        if !name.starts_with(PREFIX) || into.len() >= MAX_CONNECTOR_ROWS {
            continue;
        }
        let port = match r.get("port") {
            Cell::Int(p) => p.to_string(),
            other => other.text().unwrap_or_default().to_string(),
        };
        let host = text("host").unwrap_or_default();
        let busy = busy(r.get("connectionStatus").text(), &host, &port, open);
        into.push(Connector { name, host, port, ssl_profile: text("sslProfile"), busy });
    }
    Ok(rows.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(names: &[&str]) -> Vec<(String, String)> {
        names.iter().enumerate().map(|(i, n)| (n.to_string(), format!("10.0.0.{i}"))).collect()
    }

    fn template() -> Template {
        Template { port: "55671".into(), ssl_profile: Some("inter-router".into()) }
    }

    #[test]
    fn each_pair_is_linked_once_by_the_later_name() {
        let all = peers(&["r-c", "r-a", "r-b"]);
        let mut pairs = Vec::new();
        for (pod, _) in &all {
            for c in desired(pod, &all, &template()) {
                pairs.push((pod.clone(), c.name.trim_start_matches(PREFIX).to_string()));
            }
        }
        pairs.sort();
        let want = [("r-b", "r-a"), ("r-c", "r-a"), ("r-c", "r-b")];
        assert_eq!(pairs, want.map(|(a, b)| (a.to_string(), b.to_string())));
        assert!(desired("r-a", &all, &template()).is_empty());
        let c = &desired("r-b", &all, &template())[0];
        assert_eq!((c.host.as_str(), c.port.as_str()), ("10.0.0.1", "55671"));
        assert_eq!(c.ssl_profile.as_deref(), Some("inter-router"));
    }

    #[test]
    fn the_create_attributes_are_what_auto_mesh_wrote() {
        let c = &desired("r-b", &peers(&["r-a"]), &template())[0];
        let names: Vec<&str> = c.attributes().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["name", "role", "host", "port", "sslProfile", "verifyHostname"]);
        assert!(c.attributes().contains(&("verifyHostname", Attribute::Bool(false))));
        let plain = Template { port: "55672".into(), ssl_profile: None };
        let c = &desired("r-b", &peers(&["r-a"]), &plain)[0];
        assert_eq!(c.attributes().len(), 4, "no sslProfile, no verifyHostname");
    }

    #[test]
    fn only_what_differs_is_written_and_never_a_connector_not_ours() {
        let want = desired("r-c", &peers(&["r-a", "r-b"]), &template());
        let mut moved = want[1].clone();
        moved.host = "10.9.9.9".into();
        let user = Connector { name: "broker".into(), ..want[0].clone() };
        let kept = Connector { name: format!("{PREFIX}spec"), ..want[0].clone() };
        let gone = Connector { name: format!("{PREFIX}r-0"), ..want[0].clone() };
        let existing = vec![want[0].clone(), moved, user, kept.clone(), gone.clone()];
        let (deletes, creates) = changes(&want, &existing, std::slice::from_ref(&kept.name), &[]);
        assert_eq!(deletes, [want[1].name.clone(), gone.name]);
        assert_eq!(creates, [want[1].clone()]);
        assert_eq!(changes(&want, &want, &[], &[]), (vec![], vec![]), "nothing to do when all are held");
    }

    /// A peer whose containers are not ready does not listen yet: qdrouterd would try a
    /// connector to it again only 5 s after the refusal, so none is created until it is;
    /// one already held stays (a peer's probe failing for a moment cuts no link).
    #[test]
    fn no_connector_is_created_to_a_peer_not_listening_yet_and_none_held_is_deleted() {
        let want = desired("r-c", &peers(&["r-a", "r-b"]), &template());
        let unready = [want[1].name.clone()];
        let (deletes, creates) = changes(&want, &[], &[], &unready);
        assert!(deletes.is_empty());
        assert_eq!(creates, [want[0].clone()]);
        let (deletes, creates) = changes(&want, &want[1..], &[], &unready);
        assert_eq!((deletes, creates), (vec![], vec![want[0].clone()]), "the held one kept");
    }

    #[test]
    fn writes_are_bounded_per_visit() {
        let existing: Vec<Connector> = (0..3 * MAX_WRITES)
            .map(|i| Connector {
                name: format!("{PREFIX}x{i}"),
                host: "h".into(),
                port: "1".into(),
                ssl_profile: None,
                busy: false,
            })
            .collect();
        let want = desired("r-z", &peers(&["r-a"]), &template());
        let (deletes, creates) = changes(&want, &existing, &[], &[]);
        assert_eq!((deletes.len(), creates.len()), (MAX_WRITES, 0));
    }

    #[test]
    fn a_query_page_keeps_only_the_operators_inter_router_connectors() {
        let text = |s: &str| Cell::Text(s.into());
        let row = |name: &str, role: &str, port: Cell| {
            vec![text(name), text(role), text("10.0.0.1"), port, Cell::Null, text("CONNECTING")]
        };
        let table = Table {
            names: Some(ATTRIBUTES.iter().map(|s| s.to_string()).collect()),
            rows: Some(vec![
                row(&format!("{PREFIX}r-a"), "inter-router", text("55671")),
                row(&format!("{PREFIX}r-b"), "inter-router", Cell::Int(55672)),
                row(&format!("{PREFIX}r-c"), "normal", text("5672")),
                row("broker", "inter-router", text("5672")),
            ]),
        };
        let mut got = Vec::new();
        assert_eq!(add_connectors(&table, &Default::default(), &mut got).unwrap(), 4);
        let names: Vec<(&str, &str)> = got.iter().map(|c| (c.name.as_str(), c.port.as_str())).collect();
        assert_eq!(names, [(&*format!("{PREFIX}r-a"), "55671"), (&*format!("{PREFIX}r-b"), "55672")]);
        assert!(got.iter().all(|c| c.ssl_profile.is_none()));
        assert!(got.iter().all(|c| !c.busy), "between attempts");
        assert!(add_connectors(&Table::default(), &Default::default(), &mut got).is_err());
    }

    #[test]
    fn a_connector_with_an_attempt_in_flight_is_not_deleted_nor_replaced_until_a_later_visit() {
        let text = |s: &str| Cell::Text(s.into());
        let open: std::collections::BTreeSet<String> = ["10.0.0.1:55671".to_string()].into();
        // SUCCESS with its connection open; SUCCESS with none (an attempt in flight);
        // CONNECTING (between attempts); FAILED.
        let table = Table {
            names: Some(ATTRIBUTES.iter().map(|s| s.to_string()).collect()),
            rows: Some(
                [
                    ("r-a", "10.0.0.1", "SUCCESS"),
                    ("r-b", "10.0.0.2", "SUCCESS"),
                    ("r-c", "10.0.0.3", "CONNECTING"),
                ]
                .iter()
                .chain(&[("r-d", "10.0.0.4", "FAILED")])
                .map(|(n, h, st)| {
                    vec![
                        text(&format!("{PREFIX}{n}")),
                        text("inter-router"),
                        text(h),
                        text("55671"),
                        Cell::Null,
                        text(st),
                    ]
                })
                .collect(),
            ),
        };
        let mut held = Vec::new();
        add_connectors(&table, &open, &mut held).unwrap();
        let busy: Vec<bool> = held.iter().map(|c| c.busy).collect();
        assert_eq!(busy, [false, true, false, false]);
        // Every one of them is gone from the peers: all but the busy one are deleted.
        let (deletes, creates) = changes(&[], &held, &[], &[]);
        let names: Vec<String> = ["r-a", "r-c", "r-d"].iter().map(|n| format!("{PREFIX}{n}")).collect();
        assert_eq!(deletes, names);
        assert!(creates.is_empty());
        // r-b's pod came back at another address: its replacement waits with it.
        let moved = Connector {
            host: "10.0.0.9".into(),
            port: "55671".into(),
            ssl_profile: None,
            busy: false,
            name: format!("{PREFIX}r-b"),
        };
        let (deletes, creates) = changes(std::slice::from_ref(&moved), &held, &[], &[]);
        assert!(!deletes.contains(&moved.name) && creates.is_empty(), "{deletes:?} {creates:?}");
        assert_eq!(deferred(std::slice::from_ref(&moved), &held, &[]), 1);
        assert_eq!(deferred(&[], &held, &[]), 1);
    }
}
