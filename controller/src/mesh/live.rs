//! What to write to a running router so that it holds the live entities of the desired
//! configuration (docs/live-configuration.md, "One visit to a router"): the pure half of
//! the live apply. The entities come from `qdr_api::router_config::live` (which sections
//! are live, their names); the reader sends the writes.
//!
//! qdrouterd 1.19 has no `UPDATE` for any live type, so a changed entity is deleted and
//! created again. Every deletion of a visit comes before its creations (a second address
//! with the same prefix is refused, `400 Already exists`; a second listener on a port in use
//! is accepted and never listens), deletions from auto-links down to connectors and
//! creations the other way ([`Kind`]'s order), and a changed connector takes the link
//! routes and auto-links that name it in `connection` along: none ever names a connector
//! that is missing.

use std::collections::BTreeSet;

use qdr_api::router_config::{RouterConfig, Value, live};

use super::answer::{Cell, MAX_TEXT, Table, cut};
use super::links::{Attribute, MAX_WRITES};
use super::{AnswerError, rows};

/// A live entity type, in creation order (deletion goes the other way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `sslProfile`: only a Link's ([`qdr_api::router_config::LINK_PROFILE_PREFIX`]) is live.
    SslProfile,
    /// `connector`.
    Connector,
    /// `listener` (roles `normal` and `route-container`).
    Listener,
    /// `address`.
    Address,
    /// `linkRoute`.
    LinkRoute,
    /// `autoLink`.
    AutoLink,
}

impl Kind {
    /// Every kind, in creation order (`qdr_api::router_config::live::CREATE_ORDER`).
    pub const ALL: [Kind; 6] =
        [Kind::SslProfile, Kind::Connector, Kind::Listener, Kind::Address, Kind::LinkRoute, Kind::AutoLink];

    /// The kind of configuration section `entity` (`address`, ...), if live.
    pub fn of(entity: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.entity() == entity)
    }

    /// The section name in the configuration file.
    pub fn entity(self) -> &'static str {
        live::CREATE_ORDER[self as usize]
    }

    /// The management entity type (qdrouter.json, 1.19.0).
    pub fn management_type(self) -> &'static str {
        match self {
            Kind::SslProfile => "org.apache.qpid.dispatch.sslProfile",
            Kind::Connector => super::links::ENTITY,
            Kind::Listener => "org.apache.qpid.dispatch.listener",
            Kind::Address => "org.apache.qpid.dispatch.router.config.address",
            Kind::LinkRoute => "org.apache.qpid.dispatch.router.config.linkRoute",
            Kind::AutoLink => "org.apache.qpid.dispatch.router.config.autoLink",
        }
    }

    /// The attributes asked of a held entity of this kind: every one the configuration
    /// renders for it (`qdr_api::router_config`), so that a held one is compared and, when a
    /// refused write must put it back, created again as it was; and of a connector its
    /// [`READ_ONLY`] state, so that it is not deleted while a connection attempt is in
    /// flight ([`Plan::busy`]). At most [`super::answer::MAX_ATTRIBUTES`].
    pub fn attributes(self) -> &'static [&'static str] {
        match self {
            Kind::SslProfile => &["name", "certFile", "privateKeyFile", "caCertFile"],
            Kind::Connector => &[
                "name",
                "role",
                "host",
                "port",
                "cost",
                "linkCapacity",
                "sslProfile",
                "verifyHostname",
                READ_ONLY[0],
            ],
            Kind::Listener => &[
                "name",
                "role",
                "host",
                "port",
                "cost",
                "linkCapacity",
                "http",
                "saslMechanisms",
                "authenticatePeer",
                "requireSsl",
                "sslProfile",
            ],
            Kind::Address => &[
                "name",
                "prefix",
                "pattern",
                "distribution",
                "waypoint",
                "ingressPhase",
                "egressPhase",
                "priority",
                "enableFallback",
            ],
            Kind::LinkRoute => &[
                "name",
                "prefix",
                "pattern",
                "direction",
                "connection",
                "containerId",
                "addExternalPrefix",
                "delExternalPrefix",
            ],
            Kind::AutoLink => &[
                "name",
                "address",
                "direction",
                "containerId",
                "connection",
                "externalAddress",
                "phase",
                "fallback",
            ],
        }
    }
}

/// Attributes asked of held entities that a `CREATE` does not take (the router's state).
pub const READ_ONLY: [&str; 1] = ["connectionStatus"];

/// One entity of the desired configuration, as a `CREATE` sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Its type.
    pub kind: Kind,
    /// Its name (`qdr_api::router_config::live::named`).
    pub name: String,
    /// The attributes as rendered, `name` first; `port` as text (the schema's type), other
    /// integers as integers.
    pub attributes: Vec<(&'static str, Attribute)>,
}

impl Desired {
    /// The value of attribute `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// The live entities of `config` (already [`live::named`]), in the configuration's order.
/// A section without a name (not named first) is left out: it could not be deleted.
pub fn desired(config: &RouterConfig<'_>) -> Vec<Desired> {
    let mut out = Vec::new();
    for s in config.sections.iter().filter(|s| live::is_live(s)) {
        let (Some(kind), Some(Value::Str(name))) = (Kind::of(s.entity), s.get("name")) else { continue };
        let attributes = (s.attrs.iter())
            .map(|(k, v)| {
                let a = match v {
                    Value::Str(t) => Attribute::Text(t.to_string()),
                    Value::Env(var) => Attribute::Text(format!("${{{var}}}")),
                    Value::Int(i) if *k == "port" => Attribute::Text(i.to_string()),
                    Value::Int(i) => Attribute::Int(*i),
                    Value::Bool(b) => Attribute::Bool(*b),
                };
                (*k, a)
            })
            .collect();
        out.push(Desired { kind, name: name.to_string(), attributes });
    }
    out
}

/// One entity a router answered it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its type.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// The attributes read (as the router typed them; text cut to [`MAX_TEXT`]), `null`s
    /// left out.
    pub attributes: Vec<(&'static str, Cell)>,
}

impl Held {
    fn get(&self, key: &str) -> &Cell {
        self.attributes.iter().find(|(k, _)| *k == key).map_or(&Cell::Null, |(_, v)| v)
    }
}

/// How qdrouterd 1.19 reads back what it was given, where it differs: `(kind, attribute,
/// what was written, what is read back)`, `*` any value, `-` not read back. Measured on a
/// real router by `tests/tests/routers/normalise.rs`, which sets every attribute the spec
/// can set on each live kind at values other than the defaults and fails when the router
/// reads back anything this table does not say ([`read_back`]). Every other attribute
/// (`cost`, `linkCapacity`, `saslMechanisms`, `authenticatePeer`, `sslProfile`,
/// `verifyHostname`, `http`, `host`, `port`, roles, distributions, phases, directions,
/// containers, connections, external addresses and prefixes) reads back as written.
pub const READ_BACK: &[(Kind, &str, &str, &str)] = &[
    (
        Kind::Address,
        "prefix",
        "norm.c.  norm.d/  norm.e..",
        "norm.c  norm.d  norm.e: trailing `.` and `/` dropped",
    ),
    (Kind::Address, "pattern", "norm.f.*.", "norm.f.*: trailing `.` and `/` dropped"),
    (Kind::LinkRoute, "prefix", "queue.  queue2/", "queue  queue2: trailing `.` and `/` dropped"),
    (Kind::LinkRoute, "pattern", "topic2.*.", "topic2.*: trailing `.` and `/` dropped"),
    (Kind::Address, "waypoint", "*", "false"),
    (Kind::Address, "enableFallback", "true", "-"),
];

/// What qdrouterd 1.19 answers for attribute `attribute` of an entity of `kind` created with
/// `wrote` ([`READ_BACK`]); `None` when it does not read it back (it cannot be compared).
pub fn read_back(kind: Kind, attribute: &str, wrote: &Attribute) -> Option<Attribute> {
    match (kind, attribute, wrote) {
        (Kind::Address | Kind::LinkRoute, "prefix" | "pattern", Attribute::Text(t)) => {
            Some(Attribute::Text(t.trim_end_matches(['.', '/']).to_string()))
        }
        (Kind::Address, "waypoint", _) => Some(Attribute::Bool(false)),
        (Kind::Address, "enableFallback", Attribute::Bool(true)) => None,
        _ => Some(wrote.clone()),
    }
}

/// Whether `held` reads back as `want` wrote it: text equal (as the reader cuts it), an
/// integer as the same integer or its digits (the router types `port` as text), a boolean
/// as the same boolean.
fn same_value(want: &Attribute, held: &Cell) -> bool {
    match (want, held) {
        (Attribute::Text(w), Cell::Text(h)) => cut(w.clone(), MAX_TEXT) == *h,
        (Attribute::Text(w), Cell::Int(h)) => *w == h.to_string(),
        (Attribute::Int(w), Cell::Int(h)) => w == h,
        (Attribute::Int(w), Cell::Text(h)) => w.to_string() == *h,
        (Attribute::Bool(w), Cell::Bool(h)) => w == h,
        _ => false,
    }
}

/// Whether `held` is `want` as far as the router tells: the same kind and name, and every
/// attribute `want` sets read back as the router reads it back ([`read_back`]), so an entity
/// re-created by hand under the same name with other attributes is not taken for it.
fn holds(want: &Desired, held: &Held) -> bool {
    want.kind == held.kind
        && want.name == held.name
        && want.attributes.iter().all(|(k, v)| {
            read_back(want.kind, k, v).is_none_or(|expected| same_value(&expected, held.get(k)))
        })
}

impl Held {
    /// The attributes of a `CREATE` that makes this entity again as the router read it
    /// back: every attribute it answered but `null`s.
    pub fn attributes(&self) -> Vec<(&'static str, Attribute)> {
        (self.attributes.iter())
            .filter(|(k, _)| !READ_ONLY.contains(k))
            .filter_map(|(k, v)| {
                let a = match v {
                    Cell::Text(t) => Attribute::Text(t.clone()),
                    Cell::Int(i) => Attribute::Int(*i),
                    Cell::Bool(b) => Attribute::Bool(*b),
                    Cell::Null | Cell::Other => return None,
                };
                Some((*k, a))
            })
            .collect()
    }
}

/// Entities of one kind read of one router at most: more than [`super::MAX_ROUTERS`] mesh
/// connectors and the live entities of most specs (a spec is bounded by the size of its
/// rendered configuration, [`qdr_api::MAX_CONFIG_BYTES`], not by a count).
pub const MAX_HELD_ROWS: usize = 4096;
/// Bytes of held entities kept from one router at most (names and text, and 64 bytes a
/// row): twice the largest configuration, so any valid spec's live entities fit, and a
/// router that answers more costs the controller this much and no more (the visit fails
/// with why). With [`super::answer::MAX_TEXT`]-byte cells, 4,096 full rows of every kind
/// would be about 60 MB.
pub const MAX_HELD_BYTES: usize = 2 * qdr_api::MAX_CONFIG_BYTES;

/// Adds a page of a `QUERY` answer for `kind` ([`Kind::attributes`]) to `into` (the reader
/// asks for at most [`MAX_HELD_ROWS`] of one kind); a row without a text `name` is left out
/// (it could not be deleted by name). `bytes` counts what the visit kept so far, against
/// [`MAX_HELD_BYTES`]. Returns the page's rows.
///
/// # Errors
/// [`AnswerError`] when the page is malformed, or what is kept would pass
/// [`MAX_HELD_BYTES`].
pub fn add_held(
    kind: Kind,
    page: &Table,
    into: &mut Vec<Held>,
    bytes: &mut usize,
) -> Result<usize, AnswerError> {
    let rows = rows(kind.entity(), page)?;
    for r in &rows {
        let Some(name) = r.get("name").text() else { continue };
        let attributes: Vec<(&'static str, Cell)> = (kind.attributes().iter())
            .map(|a| (*a, r.get(a).clone()))
            .filter(|(_, v)| *v != Cell::Null)
            .collect();
        let cost =
            64 + name.len() + attributes.iter().map(|(_, v)| v.text().map_or(8, str::len)).sum::<usize>();
        *bytes += cost;
        if *bytes > MAX_HELD_BYTES {
            return Err(AnswerError::new(
                kind.entity(),
                format!("the live entities answered pass {MAX_HELD_BYTES} bytes"),
            ));
        }
        into.push(Held { kind, name: name.to_string(), attributes });
    }
    Ok(rows.len())
}

/// What one visit did to a router's live entities, and what it holds after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The desired configuration's hash (64 hex digits) the visit compared with.
    pub hash: String,
    /// Whether the router holds the desired live entities after the visit, as read back.
    pub applied: bool,
    /// Entities created and deleted by the visit.
    pub created: usize,
    /// Entities deleted by the visit.
    pub deleted: usize,
    /// The write the router refused (`CREATE address qdr-operator-address-…: 400 Already
    /// exists`, router text cut to [`MAX_TEXT`] bytes); the visit's other writes stopped
    /// there and what it had deleted was created again.
    pub refused: Option<String>,
    /// Connectors to delete that had a connection attempt in flight ([`Plan::busy`]): the
    /// visit wrote nothing, and the router is visited again soon.
    pub deferred: u32,
    /// The whole read of its live entities that found them `hash`'s: this visit's, or, when
    /// the visit did not read them ([`Checked::vouches`]), the earlier one it relied on.
    /// `None` when they were not found so, or the router did not say how long it had been up.
    pub checked: Option<Checked>,
}

/// Longest a visit relies on an earlier whole read of a router's live entities instead of
/// reading them again (`--live-recheck`'s default): an entity changed by hand with
/// `qdmanage` is put back within this, plus the visit that finds it (docs/live-configuration.md,
/// "Changed by hand"). A restarted router or a changed configuration is read whole at once.
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

/// Slack in telling two estimates of when a router process started apart: qdrouterd's
/// `uptimeSeconds` (`router` entity, 1.19) is whole seconds, and each estimate is taken
/// when the answer arrived, a few milliseconds after the router wrote it.
const START_SLACK: std::time::Duration = std::time::Duration::from_secs(2);

/// A whole read of one router's live entities that found them the desired configuration's
/// (the [`Outcome::hash`] it is kept with), and which router process held them: when the
/// process started (the read's time less the router's `uptimeSeconds`) and when it was read.
///
/// The entities a router holds change only by a write: the controller's own visits, a
/// restart (which reads the mounted configuration), or someone's `qdmanage`. So a visit to
/// the same process, for the same configuration, less than the recheck interval after such
/// a read may take it as still true and skip the six queries of the entities
/// ([`Checked::vouches`]), a third of a visit's exchanges; a write by hand is then found
/// at the first visit after the interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// When the router process started, estimated as above.
    pub started: std::time::Instant,
    /// When the entities were read.
    pub at: std::time::Instant,
}

impl Checked {
    /// The check made at `at` of a router that had then been up `uptime` seconds; `None`
    /// when that would start before this process's clock can say (a router up longer than
    /// the controller's host, which `Instant` cannot go back to).
    pub fn of(uptime: u64, at: std::time::Instant) -> Option<Checked> {
        let started = at.checked_sub(std::time::Duration::from_secs(uptime))?;
        Some(Checked { started, at })
    }

    /// Whether this check still stands at `now` for a router that says it has been up
    /// `uptime` seconds: the same process (started within [`START_SLACK`] of the same
    /// time: a restarted one started after the check), and the check less than `recheck`
    /// old.
    pub fn vouches(&self, uptime: u64, now: std::time::Instant, recheck: std::time::Duration) -> bool {
        let Some(started) = now.checked_sub(std::time::Duration::from_secs(uptime)) else { return false };
        let apart = if started > self.started { started - self.started } else { self.started - started };
        apart <= START_SLACK && now.saturating_duration_since(self.at) < recheck
    }
}

/// Whether held entity `h` is left alone by the live apply: a name in `start_up` (the
/// start-up part's entities: the health and management listeners, the user's inter-router
/// and edge listeners), a listener whose role is neither `normal` nor `route-container`
/// (a start-up listener without a name of its own, named by the router), one of the
/// controller's mesh connectors ([`super::links::PREFIX`]), or an sslProfile that is not a
/// Link's (every other profile is read at start).
pub fn keeps(start_up: &BTreeSet<String>, h: &Held) -> bool {
    start_up.contains(&h.name)
        || (h.kind == Kind::Listener
            && !matches!(h.get("role").text(), Some("normal" | "route-container") | None))
        || (h.kind == Kind::Connector && h.name.starts_with(super::links::PREFIX))
        || (h.kind == Kind::SslProfile && !h.name.starts_with(qdr_api::router_config::LINK_PROFILE_PREFIX))
}

/// The names of the start-up part of `config` (its sections that are not live and have a
/// text name).
pub fn start_up_names(config: &RouterConfig<'_>) -> BTreeSet<String> {
    (config.sections.iter())
        .filter(|s| !live::is_live(s))
        .filter_map(|s| match s.get("name") {
            Some(Value::Str(n)) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

/// The writes that bring a router holding `held` to `desired`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Entities to `DELETE`, in order (auto-links first, connectors last).
    pub deletes: Vec<Held>,
    /// Entities to `CREATE` after the deletes, in order (connectors first).
    pub creates: Vec<Desired>,
}

impl Plan {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.creates.is_empty()
    }

    /// How many connectors this plan deletes that have a connection attempt in flight
    /// ([`super::links::busy`], against the router's open outgoing connections `open`):
    /// a visit writes nothing while there is one, and comes back soon.
    pub fn busy(&self, open: &BTreeSet<String>) -> u32 {
        (self.deletes.iter())
            .filter(|h| h.kind == Kind::Connector)
            .filter(|h| {
                let port = match h.get("port") {
                    Cell::Int(p) => p.to_string(),
                    other => other.text().unwrap_or_default().to_string(),
                };
                let host = h.get("host").text().unwrap_or_default();
                super::links::busy(h.get("connectionStatus").text(), host, &port, open)
            })
            .count()
            .try_into()
            .unwrap_or(u32::MAX)
    }
}

/// What to write to a router that holds `held` so that it holds `desired`, at most
/// [`MAX_WRITES`] writes (the rest waits for the next visit; deletions are cut from the
/// connectors' end and creations from the auto-links' end, so what is left undone never
/// leaves a link naming a missing connector). `keep` says which held entities are not this
/// plan's to delete ([`keeps`]: the start-up part's, the controller's mesh connectors).
///
/// Deleted: a held entity not desired, a desired one that differs ([`Kind::compares_attributes`]),
/// and a link route or auto-link whose `connection` names a connector or listener deleted
/// here. Created: every desired entity not held as it is, or deleted here.
pub fn plan(desired: &[Desired], held: &[Held], keep: &dyn Fn(&Held) -> bool) -> Plan {
    let want = |h: &Held| desired.iter().find(|d| d.kind == h.kind && d.name == h.name);
    let mut deleted: BTreeSet<(Kind, &str)> = BTreeSet::new();
    for h in held.iter().filter(|h| !keep(h)) {
        if want(h).is_none_or(|d| !holds(d, h)) {
            deleted.insert((h.kind, &h.name));
        }
    }
    let gone: BTreeSet<&str> = (deleted.iter())
        .filter(|(k, _)| matches!(k, Kind::Connector | Kind::Listener))
        .map(|(_, n)| *n)
        .collect();
    for h in held.iter().filter(|h| matches!(h.kind, Kind::LinkRoute | Kind::AutoLink)) {
        if h.get("connection").text().is_some_and(|c| gone.contains(c)) && !keep(h) {
            deleted.insert((h.kind, &h.name));
        }
    }
    let mut deletes: Vec<Held> =
        held.iter().filter(|h| deleted.contains(&(h.kind, h.name.as_str()))).cloned().collect();
    deletes.sort_by_key(|h| std::cmp::Reverse(h.kind));
    deletes.dedup_by(|a, b| a.kind == b.kind && a.name == b.name);
    let present =
        |d: &Desired| held.iter().any(|h| holds(d, h)) && !deleted.contains(&(d.kind, d.name.as_str()));
    let mut creates: Vec<Desired> = desired.iter().filter(|d| !present(d)).cloned().collect();
    creates.sort_by_key(|d| d.kind);
    deletes.truncate(MAX_WRITES);
    creates.truncate(MAX_WRITES - deletes.len());
    Plan { deletes, creates }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check vouches for the same process (its start estimated within the slack, whole
    /// seconds either way) while it is younger than the recheck; not for a router that
    /// restarted since (up for less than the time since the check), nor once it is as old
    /// as the recheck, nor ever with a recheck of zero.
    #[test]
    fn a_check_vouches_for_the_same_process_until_the_recheck() {
        use std::time::{Duration, Instant};
        let at = Instant::now();
        let c = Checked::of(100, at).expect("a start this clock can say");
        let later = |s: u64| at + Duration::from_secs(s);
        assert!(c.vouches(100, at, RECHECK));
        assert!(c.vouches(160, later(60), RECHECK), "the same process, a minute later");
        assert!(c.vouches(159, later(60), RECHECK), "rounded down");
        assert!(c.vouches(161, later(60), RECHECK), "rounded up");
        assert!(!c.vouches(5, later(60), RECHECK), "restarted 55 s ago");
        assert!(!c.vouches(57, later(60), RECHECK), "restarted 3 s after the check");
        assert!(!c.vouches(400, later(300), RECHECK), "as old as the recheck");
        assert!(c.vouches(399, later(299), RECHECK));
        assert!(!c.vouches(100, at, Duration::ZERO), "a recheck of zero reads every time");
        assert!(!c.vouches(u64::MAX, later(1), RECHECK), "an uptime no clock can say");
    }

    fn text(s: &str) -> Attribute {
        Attribute::Text(s.into())
    }

    fn want(kind: Kind, name: &str, attrs: &[(&'static str, Attribute)]) -> Desired {
        let mut attributes = vec![("name", text(name))];
        attributes.extend(attrs.iter().cloned());
        Desired { kind, name: name.into(), attributes }
    }

    /// What a router answers holding `d`, as it types attributes (`port` as text).
    fn held(d: &Desired) -> Held {
        let attributes = (d.attributes.iter())
            .map(|(k, v)| {
                let cell = match v {
                    Attribute::Text(t) => Cell::Text(t.clone()),
                    Attribute::Int(i) => Cell::Int(*i),
                    Attribute::Bool(b) => Cell::Bool(*b),
                };
                (*k, cell)
            })
            .collect();
        Held { kind: d.kind, name: d.name.clone(), attributes }
    }

    fn never(_: &Held) -> bool {
        false
    }

    fn names(p: &Plan) -> (Vec<&str>, Vec<&str>) {
        (
            p.deletes.iter().map(|h| h.name.as_str()).collect(),
            p.creates.iter().map(|d| d.name.as_str()).collect(),
        )
    }

    #[test]
    fn a_connector_to_delete_with_an_attempt_in_flight_holds_the_visit_and_its_state_is_never_written() {
        let mut broker = held(&network()[0]);
        broker.attributes.push(("connectionStatus", Cell::Text("SUCCESS".into())));
        let plan = plan(&[], std::slice::from_ref(&broker), &never);
        assert_eq!(names(&plan).0, ["broker"]);
        // No open connection to b:5672: an attempt is in flight.
        assert_eq!(plan.busy(&BTreeSet::new()), 1);
        // Its connection is open: a DELETE closes it cleanly.
        assert_eq!(plan.busy(&["b:5672".to_string()].into()), 0);
        // Between attempts.
        let mut waiting = broker.clone();
        waiting.attributes.last_mut().unwrap().1 = Cell::Text("CONNECTING".into());
        assert_eq!(super::plan(&[], &[waiting], &never).busy(&BTreeSet::new()), 0);
        // Put back after a refused write, it is created without its state.
        assert!(broker.attributes().iter().all(|(k, _)| *k != "connectionStatus"));
        assert!(Kind::Connector.attributes().contains(&"connectionStatus"));
    }

    fn network() -> Vec<Desired> {
        vec![
            want(
                Kind::Connector,
                "broker",
                &[("host", text("b")), ("port", text("5672")), ("cost", Attribute::Int(1))],
            ),
            want(Kind::Listener, "amqp", &[("port", text("5672"))]),
            want(Kind::Address, "qdr-operator-address-1", &[("prefix", text("a"))]),
            want(Kind::LinkRoute, "qdr-operator-link-route-1", &[("connection", text("broker"))]),
            want(Kind::AutoLink, "qdr-operator-auto-link-1", &[("connection", text("broker"))]),
            want(Kind::LinkRoute, "qdr-operator-link-route-2", &[("connection", text("other"))]),
        ]
    }

    #[test]
    fn a_router_holding_nothing_gets_everything_connectors_first() {
        let p = plan(&network(), &[], &never);
        assert!(p.deletes.is_empty());
        let kinds: Vec<Kind> = p.creates.iter().map(|d| d.kind).collect();
        assert!(kinds.is_sorted(), "{kinds:?}");
        assert_eq!(p.creates.len(), 6);
    }

    #[test]
    fn a_router_holding_the_configuration_gets_nothing() {
        let all: Vec<Held> = network().iter().map(held).collect();
        assert!(plan(&network(), &all, &never).is_empty());
    }

    #[test]
    fn a_changed_connector_takes_the_links_that_name_it_along() {
        let mut old = network();
        old[0] = want(
            Kind::Connector,
            "broker",
            &[("host", text("old")), ("port", text("5672")), ("cost", Attribute::Int(1))],
        );
        let p = plan(&network(), &old.iter().map(held).collect::<Vec<_>>(), &never);
        assert_eq!(
            names(&p),
            (
                vec!["qdr-operator-auto-link-1", "qdr-operator-link-route-1", "broker"],
                vec!["broker", "qdr-operator-link-route-1", "qdr-operator-auto-link-1"]
            ),
            "links out before the connector goes, back after it is created; link-route-2 names another"
        );
    }

    #[test]
    fn what_is_not_desired_goes_and_what_is_kept_stays() {
        let mut all: Vec<Held> = network().iter().map(held).collect();
        all.push(held(&want(Kind::Address, "address/0", &[("prefix", text("old"))])));
        all.push(held(&want(Kind::Connector, "qdr-operator-mesh-r-a", &[])));
        all.push(held(&want(Kind::Listener, "health-and-stats", &[])));
        let keep = |h: &Held| h.name.starts_with("qdr-operator-mesh-") || h.name == "health-and-stats";
        assert_eq!(names(&plan(&network(), &all, &keep)), (vec!["address/0"], vec![]));
    }

    #[test]
    fn a_connector_changed_by_hand_is_put_back_and_read_back_types_are_the_routers() {
        let mut all: Vec<Held> = network().iter().map(held).collect();
        // The router answers the port as text and cost as an integer: the same values.
        all[0].attributes[2].1 = Cell::Text("5672".into());
        assert!(plan(&network(), &all, &never).is_empty());
        all[0].attributes[1].1 = Cell::Text("elsewhere".into());
        let p = plan(&network(), &all, &never);
        let (deletes, creates) = names(&p);
        assert_eq!(deletes.last(), Some(&"broker"));
        assert_eq!(creates.first(), Some(&"broker"));
        // An address re-created by hand under its name with another prefix is put back.
        all = network().iter().map(held).collect();
        all[2].attributes[1].1 = Cell::Text("b".into());
        let p = plan(&network(), &all, &never);
        assert!(
            names(&p).0.contains(&"qdr-operator-address-1")
                && names(&p).1.contains(&"qdr-operator-address-1")
        );
    }

    #[test]
    fn what_the_router_reads_back_otherwise_is_held_as_written() {
        // READ_BACK: trailing `.` and `/` of prefixes and patterns dropped, waypoint read as
        // false, enableFallback true not read back.
        let d = want(
            Kind::Address,
            "a",
            &[
                ("prefix", text("q./")),
                ("waypoint", Attribute::Bool(true)),
                ("enableFallback", Attribute::Bool(true)),
            ],
        );
        let mut h = held(&d);
        h.attributes = vec![
            ("name", Cell::Text("a".into())),
            ("prefix", Cell::Text("q".into())),
            ("waypoint", Cell::Bool(false)),
        ];
        assert!(plan(std::slice::from_ref(&d), std::slice::from_ref(&h), &never).is_empty());
        let r = want(Kind::LinkRoute, "r", &[("pattern", text("topic.*.")), ("direction", text("in"))]);
        let mut hr = held(&r);
        hr.attributes[1].1 = Cell::Text("topic.*".into());
        assert!(plan(std::slice::from_ref(&r), std::slice::from_ref(&hr), &never).is_empty());
        // Another distribution is not a normalisation.
        let x = want(Kind::Address, "x", &[("prefix", text("q")), ("distribution", text("closest"))]);
        let mut hx = held(&x);
        hx.attributes[2].1 = Cell::Text("multicast".into());
        assert!(!plan(std::slice::from_ref(&x), std::slice::from_ref(&hx), &never).is_empty());
        assert_eq!(read_back(Kind::Connector, "sslProfile", &text("tls")), Some(text("tls")));
    }

    #[test]
    fn long_text_compares_as_the_reader_cuts_it() {
        let long = "h".repeat(3 * MAX_TEXT);
        let d = want(Kind::Connector, "c", &[("host", text(&long))]);
        let mut h = held(&d);
        h.attributes[1].1 = Cell::Text(cut(long, MAX_TEXT));
        assert!(plan(std::slice::from_ref(&d), &[h], &never).is_empty());
    }

    #[test]
    fn writes_are_bounded_and_cut_where_nothing_dangles() {
        let many: Vec<Held> =
            (0..MAX_WRITES).map(|i| held(&want(Kind::Address, &format!("gone-{i}"), &[]))).collect();
        let mut all = many;
        all.push(held(&want(Kind::Connector, "old-broker", &[])));
        let want = network();
        let p = plan(&want, &all, &never);
        assert_eq!(p.deletes.len() + p.creates.len(), MAX_WRITES);
        assert!(p.deletes.iter().all(|h| h.kind == Kind::Address), "the connector's deletion waits");
        assert!(p.creates.is_empty());
    }

    #[test]
    fn desired_entities_come_from_the_named_live_sections() {
        let mut spec: qdr_api::InterconnectSpec = serde_json::from_value(serde_json::json!({
            "deploymentPlan": {"role": "interior"},
            "addresses": [{"prefix": "a$b", "distribution": "multicast"}],
            "connectors": [{"name": "broker", "host": "b", "port": 5672, "routeContainer": true}],
            "linkRoutes": [{"prefix": "q.", "direction": "in", "connection": "broker"}]
        }))
        .unwrap();
        qdr_api::apply_defaults("live", &mut spec);
        let config = live::named(qdr_api::router_config::router_config(&spec));
        let d = desired(&config);
        let kinds: Vec<Kind> = d.iter().map(|d| d.kind).collect();
        assert!(
            kinds.contains(&Kind::Address)
                && kinds.contains(&Kind::LinkRoute)
                && kinds.contains(&Kind::Connector)
        );
        let address = d.iter().find(|d| d.kind == Kind::Address).unwrap();
        assert_eq!(
            address.get("prefix"),
            Some(&text("a$b")),
            "a `$` is sent as it is: no variable expansion here"
        );
        assert!(address.name.starts_with("qdr-operator-address-"));
        let broker = d.iter().find(|d| d.kind == Kind::Connector).unwrap();
        assert_eq!(broker.get("port"), Some(&text("5672")), "the schema types port as a string");
        assert_eq!(broker.get("role"), Some(&text("route-container")));
        assert!(d.iter().all(|d| d.attributes[0] == ("name", text(&d.name))));
    }

    #[test]
    fn held_rows_are_read_by_the_kinds_attributes_and_bounded_in_bytes() {
        let names: Vec<String> = Kind::Listener.attributes().iter().map(|s| s.to_string()).collect();
        let row = |name: Cell, role: &str| {
            let mut r = vec![Cell::Null; names.len()];
            r[0] = name;
            r[1] = Cell::Text(role.into());
            r[3] = Cell::Text("5672".into());
            r
        };
        let table = Table {
            names: Some(names.clone()),
            rows: Some(vec![
                row(Cell::Text("amqp".into()), "normal"),
                row(Cell::Null, "normal"),
                row(Cell::Text("mesh".into()), "inter-router"),
            ]),
        };
        let (mut held, mut bytes) = (Vec::new(), 0);
        assert_eq!(add_held(Kind::Listener, &table, &mut held, &mut bytes).unwrap(), 3);
        assert_eq!(held.len(), 2, "a row without a name could not be deleted: left out");
        assert_eq!(
            held[0].attributes,
            [
                ("name", Cell::Text("amqp".into())),
                ("role", Cell::Text("normal".into())),
                ("port", Cell::Text("5672".into()))
            ],
            "nulls left out"
        );
        assert_eq!(held[0].attributes()[2], ("port", text("5672")));
        // What a router can make the controller keep is bounded.
        let mut bytes = MAX_HELD_BYTES - 10;
        let err = add_held(Kind::Listener, &table, &mut held, &mut bytes).unwrap_err();
        assert!(err.what.contains("bytes"), "{err}");
        assert!(Kind::ALL.iter().all(|k| k.attributes().len() <= crate::mesh::answer::MAX_ATTRIBUTES));
    }

    #[test]
    fn the_start_up_part_and_the_mesh_connectors_are_kept() {
        let mut spec: qdr_api::InterconnectSpec = serde_json::from_value(serde_json::json!({
            "deploymentPlan": {"role": "interior"},
            "listeners": [{"name": "amqp", "port": 5672}],
        }))
        .unwrap();
        qdr_api::apply_defaults("live", &mut spec);
        let config = qdr_api::router_config::router_config(&spec).with_management_listener();
        let start_up = start_up_names(&config);
        assert!(start_up.contains(qdr_api::router_config::MANAGEMENT_LISTENER), "{start_up:?}");
        assert!(!start_up.contains("amqp"), "a client listener is live: {start_up:?}");
        let h = |kind, name: &str, role: &str| Held {
            kind,
            name: name.into(),
            attributes: vec![("role", Cell::Text(role.into()))],
        };
        assert!(keeps(&start_up, &h(Kind::Listener, qdr_api::router_config::MANAGEMENT_LISTENER, "normal")));
        assert!(keeps(&start_up, &h(Kind::Listener, "listener/0.0.0.0:55671", "inter-router")));
        assert!(keeps(&start_up, &h(Kind::Connector, "qdr-operator-mesh-r-0", "inter-router")));
        assert!(!keeps(&start_up, &h(Kind::Listener, "amqp", "normal")));
        assert!(!keeps(&start_up, &h(Kind::Connector, "by-hand", "route-container")));
    }
}
