//! Recorded answers (`answers/`) of real qdrouterd 1.19.0 routers: `connected-*`, a mesh of
//! three interior routers (`mesh-0` … `mesh-2`, each linked to the others) with one edge
//! (`edge-0`, uplinked to `mesh-0`), each queried by a Python client (its own `normal`
//! connection is in every `connection` answer); `lost-*`, `mesh-0` and `mesh-2` 8 s after
//! `mesh-1` was killed (both still list it in `router.node`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::answer::{Cell, Table};

use super::*;

fn answer(name: &str) -> Value {
    let text = match name {
        "connected-mesh-0-router" => include_str!("answers/connected-mesh-0-router.json"),
        "connected-mesh-0-router.node" => include_str!("answers/connected-mesh-0-router.node.json"),
        "connected-mesh-0-connection" => include_str!("answers/connected-mesh-0-connection.json"),
        "connected-mesh-1-router" => include_str!("answers/connected-mesh-1-router.json"),
        "connected-mesh-1-router.node" => include_str!("answers/connected-mesh-1-router.node.json"),
        "connected-mesh-1-connection" => include_str!("answers/connected-mesh-1-connection.json"),
        "connected-mesh-2-router" => include_str!("answers/connected-mesh-2-router.json"),
        "connected-mesh-2-router.node" => include_str!("answers/connected-mesh-2-router.node.json"),
        "connected-mesh-2-connection" => include_str!("answers/connected-mesh-2-connection.json"),
        "connected-edge-0-router" => include_str!("answers/connected-edge-0-router.json"),
        "connected-edge-0-router.node" => include_str!("answers/connected-edge-0-router.node.json"),
        "connected-edge-0-connection" => include_str!("answers/connected-edge-0-connection.json"),
        "lost-mesh-0-router" => include_str!("answers/lost-mesh-0-router.json"),
        "lost-mesh-0-router.node" => include_str!("answers/lost-mesh-0-router.node.json"),
        "lost-mesh-0-connection" => include_str!("answers/lost-mesh-0-connection.json"),
        "lost-mesh-2-router" => include_str!("answers/lost-mesh-2-router.json"),
        "lost-mesh-2-router.node" => include_str!("answers/lost-mesh-2-router.node.json"),
        "lost-mesh-2-connection" => include_str!("answers/lost-mesh-2-connection.json"),
        other => panic!("no recorded answer {other}"),
    };
    serde_json::from_str(text).unwrap()
}

/// An answer as the router gives it to a query for `only`.
fn table(answer: &Value, only: &[&str]) -> Table {
    Table::from_json(answer, only).unwrap()
}

/// [`router_view`] of three JSON answers, each asked for the reader's attributes.
fn view_of(router: &Value, nodes: &Value, connections: &Value) -> Result<RouterView, AnswerError> {
    router_view(
        &table(router, &ROUTER_ATTRIBUTES),
        &table(nodes, &NODE_ATTRIBUTES),
        &table(connections, &CONNECTION_ATTRIBUTES),
    )
}

fn view(set: &str, router: &str) -> RouterView {
    let a = |entity: &str| answer(&format!("{set}-{router}-{entity}"));
    view_of(&a("router"), &a("router.node"), &a("connection")).unwrap()
}

fn observed(list: &[(&str, Observation)]) -> BTreeMap<String, Observation> {
    list.iter().map(|(p, o)| (p.to_string(), o.clone())).collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A view of `id` linked to `peers` (interior), built by hand for shapes not recorded.
fn linked(id: &str, peers: &[&str]) -> Observation {
    Observation::Answered(RouterView {
        id: id.into(),
        mode: Mode::Interior,
        reaches: peers.iter().map(|p| (*p).into()).collect(),
        inter_router: peers
            .iter()
            .map(|p| Link { peer: (*p).into(), outgoing: id > *p, encrypted: true })
            .collect(),
        edge: vec![],
        clients: 0,
        links_blocked: 0,
        deliveries_stuck: 0,
        detailed: vec![],
        deferred: 0,
        routed: false,
        live: None,
    })
}

#[test]
fn a_recorded_interior_router_is_read_with_its_links_clients_and_gauges() {
    let v = view("connected", "mesh-0");
    assert_eq!(&*v.id, "mesh-0");
    assert_eq!(v.mode, Mode::Interior);
    assert_eq!(v.reaches, ["mesh-1", "mesh-2"].map(crate::mesh::Id::from).into());
    // mesh-1 and mesh-2 connected to mesh-0 (auto-mesh: later routers connect to earlier).
    assert_eq!(
        v.inter_router,
        vec![
            Link { peer: "mesh-1".into(), outgoing: false, encrypted: false },
            Link { peer: "mesh-2".into(), outgoing: false, encrypted: false },
        ]
    );
    assert_eq!(v.edge, vec![Link { peer: "edge-0".into(), outgoing: false, encrypted: false }]);
    // The recording client's own connection.
    assert_eq!(v.clients, 1);
    assert_eq!((v.links_blocked, v.deliveries_stuck), (0, 0));
}

#[test]
fn a_recorded_edge_router_reaches_no_router_node_and_has_its_uplink() {
    let v = view("connected", "edge-0");
    assert_eq!(v.mode, Mode::Edge);
    assert!(v.reaches.is_empty());
    assert!(v.inter_router.is_empty());
    assert_eq!(v.edge, vec![Link { peer: "mesh-0".into(), outgoing: true, encrypted: false }]);
}

#[test]
fn the_readers_own_connection_is_not_a_client() {
    let a = |e: &str| answer(&format!("connected-mesh-1-{e}"));
    let mut connections = a("connection");
    let names: Vec<String> = connections["attributeNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().into())
        .collect();
    let container = names.iter().position(|n| n == "container").unwrap();
    for row in connections["results"].as_array_mut().unwrap() {
        if row[names.iter().position(|n| n == "role").unwrap()] == "normal" {
            row[container] = json!(format!("{READER_CONTAINER_PREFIX}-1234"));
        }
    }
    let v = view_of(&a("router"), &a("router.node"), &connections).unwrap();
    assert_eq!(v.clients, 0);
}

#[test]
fn malformed_answers_are_errors_that_name_the_entity() {
    let good = |e: &str| answer(&format!("connected-mesh-0-{e}"));
    let cases = [
        (json!({}), good("router.node"), good("connection"), "router", "no attributeNames list"),
        (
            good("router"),
            json!({"attributeNames": ["id"]}),
            good("connection"),
            "router.node",
            "no results list",
        ),
        (
            json!({"attributeNames": ["id", "mode"], "results": []}),
            good("router.node"),
            good("connection"),
            "router",
            "0 rows",
        ),
        (
            json!({"attributeNames": ["id", "mode"], "results": [["a", "standalone"]]}),
            good("router.node"),
            good("connection"),
            "router",
            "standalone",
        ),
        (
            json!({"attributeNames": ["mode"], "results": [["edge"]]}),
            good("router.node"),
            good("connection"),
            "router",
            "no id",
        ),
    ];
    for (router, nodes, connections, entity, what) in cases {
        let e = view_of(&router, &nodes, &connections).unwrap_err();
        assert_eq!(e.entity, entity, "{e}");
        assert!(e.to_string().contains(what), "{e} does not say {what:?}");
    }
    // A row longer than the names.
    let long = Table { names: Some(vec!["id".into()]), rows: Some(vec![vec![Cell::Null, Cell::Null]]) };
    let e = RouterView::of_router(&long).unwrap_err();
    assert!(e.to_string().contains("longer"), "{e}");
}

#[test]
fn views_keep_at_most_the_bound_of_links_and_cut_long_peer_names() {
    let me = Table {
        names: Some(ROUTER_ATTRIBUTES.map(String::from).to_vec()),
        rows: Some(vec![vec![
            Cell::Text("r".into()),
            Cell::Text("interior".into()),
            Cell::Int(0),
            Cell::Int(0),
        ]]),
    };
    let mut v = RouterView::of_router(&me).unwrap();
    let page = |from: usize| Table {
        names: Some(CONNECTION_ATTRIBUTES.map(String::from).to_vec()),
        rows: Some(
            (from..from + answer::MAX_ROWS)
                .map(|i| {
                    vec![
                        Cell::Text(format!("peer-{i}")),
                        Cell::Text("inter-router".into()),
                        Cell::Text("in".into()),
                        Cell::Bool(true),
                        Cell::Bool(true),
                    ]
                })
                .collect(),
        ),
    };
    for p in 0..4 {
        assert_eq!(v.add_connections(&page(p * answer::MAX_ROWS)).unwrap(), answer::MAX_ROWS);
    }
    assert_eq!(v.inter_router.len(), MAX_ROUTERS);
    assert_eq!(answer::cut("é".repeat(300), MAX_TEXT).len(), MAX_TEXT - 1);
}

#[test]
fn the_recorded_mesh_of_three_is_connected() {
    let obs = observed(&[
        ("mesh-0", Observation::Answered(view("connected", "mesh-0"))),
        ("mesh-1", Observation::Answered(view("connected", "mesh-1"))),
        ("mesh-2", Observation::Answered(view("connected", "mesh-2"))),
    ]);
    let r = assess(Mode::Interior, &obs);
    assert_eq!((r.interiors_expected, r.interiors_connected), (3, 3));
    assert_eq!(r.groups, vec![names(&["mesh-0", "mesh-1", "mesh-2"])]);
    assert!(r.missing_links.is_empty());
    assert_eq!((r.condition.status, r.condition.reason), ("True", "Connected"));
    assert_eq!(r.condition.message, "3/3 interior routers linked to each other");
}

#[test]
fn a_router_that_does_not_answer_still_counts_as_linked_through_its_peers() {
    let obs = observed(&[
        ("mesh-0", Observation::Answered(view("connected", "mesh-0"))),
        ("mesh-1", Observation::Unreachable("timed out after 5s".into())),
        ("mesh-2", Observation::Answered(view("connected", "mesh-2"))),
    ]);
    let r = assess(Mode::Interior, &obs);
    assert_eq!(r.groups.len(), 1);
    assert_eq!((r.condition.status, r.condition.reason), ("Unknown", "RouterUnreachable"));
    assert_eq!(r.condition.message, "not answering: mesh-1 (timed out after 5s)");
}

#[test]
fn a_killed_router_that_no_peer_links_is_unreachable_not_a_partition() {
    // Both survivors still have mesh-1 in router.node; neither has a link to it.
    let (m0, m2) = (view("lost", "mesh-0"), view("lost", "mesh-2"));
    assert!(m0.reaches.contains("mesh-1") && m2.reaches.contains("mesh-1"));
    let obs = observed(&[
        ("mesh-0", Observation::Answered(m0)),
        ("mesh-1", Observation::Unreachable("connection refused".into())),
        ("mesh-2", Observation::Answered(m2)),
    ]);
    let r = assess(Mode::Interior, &obs);
    assert_eq!(r.groups, vec![names(&["mesh-0", "mesh-2"]), names(&["mesh-1"])]);
    assert_eq!(r.interiors_connected, 2);
    assert_eq!(r.missing_links, vec![("mesh-0".into(), "mesh-1".into()), ("mesh-1".into(), "mesh-2".into())]);
    // Only one group holds a router that answered: nothing proves a split.
    assert_eq!((r.condition.status, r.condition.reason), ("Unknown", "RouterUnreachable"));
    assert_eq!(r.condition.message, "not answering: mesh-1 (connection refused)");
}

#[test]
fn verdicts_for_pending_unreachable_and_split_routers() {
    let unreachable = |why: &str| Observation::Unreachable(why.into());
    let pending = |why: &str| Observation::Pending(why.into());
    /// What, the observations, the expected (status, reason), the expected message.
    type Case<'a> = (&'a str, Vec<(&'a str, Observation)>, (&'a str, &'a str), &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            "every router silent (a default-deny NetworkPolicy on the management port)",
            vec![("a", unreachable("no answer within 5s")), ("b", unreachable("no answer within 5s"))],
            ("Unknown", "RouterUnreachable"),
            "not answering: a, b (no answer within 5s)",
        ),
        (
            "a new pod without an IP is not a group",
            vec![("a", linked("a", &["b"])), ("b", linked("b", &["a"])), ("c", pending("no pod IP yet"))],
            ("True", "Connected"),
            "2/3 interior routers linked to each other; 1 starting: c (no pod IP yet)",
        ),
        (
            "two groups that each hold a router that answered",
            vec![("a", linked("a", &[])), ("b", linked("b", &[])), ("c", pending("not Ready yet"))],
            ("False", "Partitioned"),
            "the interior routers are split into 2 groups: [a] [b]",
        ),
        (
            "a split with a silent router in one group",
            vec![("a", linked("a", &["c"])), ("b", linked("b", &[])), ("c", unreachable("refused"))],
            ("False", "Partitioned"),
            "the interior routers are split into 2 groups: [a, c] [b]; not answering: c (refused)",
        ),
        (
            "every pod pending",
            vec![("a", pending("no pod IP yet")), ("b", pending("not Ready yet"))],
            ("Unknown", "NoRouters"),
            "no router is ready to be asked yet: a (no pod IP yet); b (not Ready yet)",
        ),
    ];
    for (what, obs, (status, reason), message) in cases {
        let r = assess(Mode::Interior, &observed(&obs));
        assert_eq!((r.condition.status, r.condition.reason), (status, reason), "{what}: {r:?}");
        assert_eq!(r.condition.message, message, "{what}");
    }
}

#[test]
fn messages_and_lists_stay_bounded_however_many_routers_fail() {
    let obs: Vec<(String, Observation)> = (0..MAX_ROUTERS)
        .map(|i| (format!("router-{i:03}"), Observation::Unreachable(format!("reason {}", i % 40))))
        .collect();
    let obs: BTreeMap<String, Observation> = obs.into_iter().collect();
    let r = assess(Mode::Interior, &obs);
    assert_eq!(r.condition.reason, "RouterUnreachable");
    assert!(r.condition.message.len() <= MAX_MESSAGE, "{}", r.condition.message.len());
    assert!(r.condition.message.contains("and 8 other reasons"), "{}", r.condition.message);
    assert_eq!(r.links_missing, MAX_ROUTERS * (MAX_ROUTERS - 1) / 2);
    assert_eq!(r.missing_links.len(), MAX_NAMED);
    // Split into singletons that all answered: every group counted, 32 named.
    let obs: BTreeMap<String, Observation> =
        (0..100).map(|i| (format!("r{i:03}"), linked(&format!("r{i:03}"), &[]))).collect();
    let r = assess(Mode::Interior, &obs);
    assert_eq!(r.condition.reason, "Partitioned");
    assert!(r.condition.message.starts_with("the interior routers are split into 100 groups"));
    assert!(r.condition.message.ends_with(" and 68 more"), "{}", r.condition.message);
}

#[test]
fn a_split_mesh_names_each_group() {
    let obs = observed(&[
        ("a", linked("a", &["b"])),
        ("b", linked("b", &["a"])),
        ("c", linked("c", &["d"])),
        ("d", linked("d", &["c"])),
        ("e", linked("e", &[])),
    ]);
    let r = assess(Mode::Interior, &obs);
    assert_eq!(r.groups, vec![names(&["a", "b"]), names(&["c", "d"]), names(&["e"])]);
    assert_eq!(r.condition.reason, "Partitioned");
    assert_eq!(r.condition.message, "the interior routers are split into 3 groups: [a, b] [c, d] [e]");
}

#[test]
fn a_pair_without_a_link_of_its_own_is_named_while_the_mesh_stays_connected() {
    // a – b blocked (a NetworkPolicy, say): both still reach each other through c.
    let obs =
        observed(&[("a", linked("a", &["c"])), ("b", linked("b", &["c"])), ("c", linked("c", &["a", "b"]))]);
    let r = assess(Mode::Interior, &obs);
    assert_eq!(r.groups.len(), 1);
    assert_eq!(r.missing_links, vec![("a".into(), "b".into())]);
    assert_eq!((r.condition.status, r.condition.reason), ("True", "LinksMissing"));
    assert_eq!(
        r.condition.message,
        "every router reaches every other, but these pairs have no link of their own: a – b"
    );
}

#[test]
fn a_link_reported_by_one_end_only_counts() {
    // While a connection opens, one end may list it before the other does.
    let obs = observed(&[("a", linked("a", &["b"])), ("b", linked("b", &[]))]);
    assert_eq!(assess(Mode::Interior, &obs).condition.reason, "Connected");
}

#[test]
fn links_to_routers_of_other_interconnects_do_not_join_groups() {
    let obs = observed(&[("a", linked("a", &["elsewhere"])), ("b", linked("b", &["elsewhere"]))]);
    let r = assess(Mode::Interior, &obs);
    assert_eq!(r.groups, vec![names(&["a"]), names(&["b"])]);
    assert_eq!(r.condition.reason, "Partitioned");
}

#[test]
fn edges_are_judged_by_their_uplinks() {
    let up = view("connected", "edge-0");
    let mut down = up.clone();
    down.id = "edge-1".into();
    down.edge.clear();
    let obs =
        observed(&[("edge-0", Observation::Answered(up.clone())), ("edge-1", Observation::Answered(down))]);
    let r = assess(Mode::Edge, &obs);
    assert_eq!((r.edges_expected, r.edges_uplinked), (2, 1));
    assert_eq!(r.not_uplinked, names(&["edge-1"]));
    assert_eq!((r.condition.status, r.condition.reason), ("False", "EdgeNotUplinked"));
    assert_eq!(r.condition.message, "edge routers without an open uplink: edge-1");
    // An edge's incoming edge connection (as an interior sees it) is not an uplink.
    let mut inverted = up.clone();
    inverted.edge[0].outgoing = false;
    let r = assess(Mode::Edge, &observed(&[("edge-0", Observation::Answered(inverted))]));
    assert_eq!(r.condition.reason, "EdgeNotUplinked");

    let r = assess(Mode::Edge, &observed(&[("edge-0", Observation::Answered(up))]));
    assert_eq!((r.condition.status, r.condition.reason), ("True", "Connected"));
    assert_eq!(r.condition.message, "1/1 edge routers uplinked");
    assert_eq!((r.interiors_expected, r.groups.len()), (0, 0));
}

#[test]
fn an_edge_without_an_uplink_comes_before_an_unreachable_one() {
    let mut down = view("connected", "edge-0");
    down.edge.clear();
    let obs = observed(&[
        ("e0", Observation::Answered(down)),
        ("e1", Observation::Unreachable("no pod IP".into())),
    ]);
    let r = assess(Mode::Edge, &obs);
    assert_eq!(r.condition.reason, "EdgeNotUplinked");
    assert_eq!(r.unreachable.get("e1").map(String::as_str), Some("no pod IP"));
}

#[test]
fn no_router_pods_is_unknown() {
    let r = assess(Mode::Interior, &BTreeMap::new());
    assert_eq!((r.condition.status, r.condition.reason), ("Unknown", "NoRouters"));
}

#[test]
fn answers_decode_into_bounded_tables() {
    use fe2o3_amqp::types::primitives::{OrderedMap, Symbol, Value as Amqp};
    let encode = |v: Amqp| serde_amqp::to_vec(&v).unwrap();
    let long = "x".repeat(100_000);
    let map = OrderedMap::from_iter([
        (
            Amqp::from("attributeNames"),
            Amqp::List(vec![Amqp::from("id"), Amqp::from("cost"), Amqp::from("p")]),
        ),
        (
            Amqp::from("results"),
            Amqp::List(vec![
                Amqp::List(vec![Amqp::from("mesh-0"), Amqp::Null, Amqp::List(vec![Amqp::Int(1)])]),
                Amqp::List(vec![Amqp::Symbol(Symbol::from("mesh-1")), Amqp::Int(1), Amqp::Ulong(u64::MAX)]),
                Amqp::List(vec![Amqp::from(long.as_str()), Amqp::Bool(true), Amqp::Double(1.5.into())]),
            ]),
        ),
        (Amqp::Symbol(Symbol::from("other")), Amqp::Map(OrderedMap::new())),
    ]);
    let t: Table = serde_amqp::from_slice(&encode(Amqp::Map(map))).unwrap();
    assert_eq!(t.names, Some(vec!["id".to_string(), "cost".into(), "p".into()]));
    let rows = t.rows.unwrap();
    assert_eq!(rows[0], vec![Cell::Text("mesh-0".into()), Cell::Null, Cell::Other]);
    assert_eq!(rows[1], vec![Cell::Text("mesh-1".into()), Cell::Int(1), Cell::Int(i64::MAX)]);
    let Cell::Text(cut) = &rows[2][0] else { panic!("{:?}", rows[2][0]) };
    assert!(cut.len() <= MAX_TEXT && cut.ends_with('…'), "{} bytes", cut.len());
    assert_eq!(rows[2][1..], [Cell::Bool(true), Cell::Other]);

    // More rows than a page, names that are not strings: errors, not tables.
    let rows = Amqp::List((0..=answer::MAX_ROWS).map(|_| Amqp::List(vec![Amqp::Null])).collect());
    let too_many = OrderedMap::from_iter([(Amqp::from("results"), rows)]);
    let e = serde_amqp::from_slice::<Table>(&encode(Amqp::Map(too_many))).unwrap_err();
    assert!(e.to_string().contains("more than 256 rows"), "{e}");
    let numbers = OrderedMap::from_iter([(Amqp::from("attributeNames"), Amqp::List(vec![Amqp::Int(1)]))]);
    let e = serde_amqp::from_slice::<Table>(&encode(Amqp::Map(numbers))).unwrap_err();
    assert!(e.to_string().contains("not a string"), "{e}");
    // Anything but a map is an empty table (an error answer's body).
    assert_eq!(serde_amqp::from_slice::<Table>(&encode(Amqp::from("oops"))).unwrap(), Table::default());
}

/// How long after an accept [`silent_listener`] counts the connections open: a third of the
/// read timeout its test gives (300 ms).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// A local TCP listener that accepts and then says nothing: a router that hangs. Counts the
/// connections open at once (sampled [`SETTLE`] after each accept), and the most seen.
async fn silent_listener()
-> (u16, std::sync::Arc<(std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicUsize)>) {
    use std::sync::atomic::Ordering::SeqCst;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let counts =
        std::sync::Arc::new((std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicUsize::new(0)));
    let c = counts.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let c = c.clone();
            c.0.fetch_add(1, SeqCst);
            // How many are open is sampled a while after the accept, not at it: the reader
            // closes a connection and opens the next at once, and this side may accept the
            // next before it has read the end of the last (CI, stop 93: "3 at once" from a
            // reader that held 2). A connection is held for the whole read timeout (300 ms),
            // so one too many is still open when sampled.
            let sample = c.clone();
            tokio::spawn(async move {
                tokio::time::sleep(SETTLE).await;
                sample.1.fetch_max(sample.0.load(SeqCst), SeqCst);
            });
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                // Until the reader gives up and closes.
                while tokio::io::AsyncReadExt::read(&mut socket, &mut buf).await.is_ok_and(|n| n > 0) {}
                c.0.fetch_sub(1, SeqCst);
            });
        }
    });
    (port, counts)
}

#[tokio::test]
async fn observe_bounds_connections_times_out_and_reports_pods_without_an_ip() {
    use std::sync::atomic::Ordering::SeqCst;
    let (port, counts) = silent_listener().await;
    let mut targets: Vec<reader::Target> = (0..5)
        .map(|i| reader::Target {
            pod: format!("r{i}"),
            ip: Some("127.0.0.1".into()),
            ready: true,
            linking: None,
            live: None,
            checked: None,
        })
        .collect();
    targets.push(reader::Target {
        pod: "pending".into(),
        ip: None,
        ready: false,
        linking: None,
        live: None,
        checked: None,
    });
    targets.push(reader::Target {
        pod: "starting".into(),
        ip: Some("127.0.0.1".into()),
        ready: false,
        linking: None,
        live: None,
        checked: None,
    });
    let pool = pool::Pool::new(2, 2);
    let timeout = std::time::Duration::from_millis(300);
    let started = std::time::Instant::now();
    let plan = reader::Plan {
        port,
        namespace: "ns",
        pool: &pool,
        timeout,
        deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(30),
        tls: None,
        fence: None,
        recheck: super::live::RECHECK,
    };
    let seen = reader::observe(&targets, &plan).await;
    assert_eq!(seen.len(), 7);
    assert_eq!(seen["pending"], Observation::Pending("no pod IP yet".into()));
    assert_eq!(seen["starting"], Observation::Pending("not Ready yet".into()));
    for i in 0..5 {
        assert_eq!(seen[&format!("r{i}")], Observation::Unreachable("no answer within 300ms".into()));
    }
    // Never more than the limit at once; 5 reads two at a time take at least 3 timeouts
    // (all at once would take one).
    assert!(counts.1.load(SeqCst) <= 2, "{} at once", counts.1.load(SeqCst));
    assert!(started.elapsed() >= 3 * timeout, "{:?}", started.elapsed());
}

#[tokio::test]
async fn observe_reports_a_refused_connection_with_the_address() {
    // A port nobody listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let targets = [reader::Target {
        pod: "r0".into(),
        ip: Some("127.0.0.1".into()),
        ready: true,
        linking: None,
        live: None,
        checked: None,
    }];
    let pool = pool::Pool::new(1, 1);
    let plan = reader::Plan {
        port,
        namespace: "ns",
        pool: &pool,
        timeout: std::time::Duration::from_secs(5),
        deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(5),
        tls: None,
        fence: None,
        recheck: super::live::RECHECK,
    };
    let seen = reader::observe(&targets, &plan).await;
    let Observation::Unreachable(why) = &seen["r0"] else { panic!("{seen:?}") };
    assert!(why.contains(&format!("connecting to 127.0.0.1:{port}")) && why.contains("refused"), "{why}");
}

/// Router ids are the router's choice: whatever it reports of itself, its peers and the
/// nodes it reaches is kept in at most 66 bytes an id, none of them needing a JSON escape,
/// while an honest id (a pod name) is kept as it is.
#[test]
fn router_chosen_ids_are_kept_short_and_plain() {
    let hostile = format!("{}\u{1}\"\\{}", "\"".repeat(200), "é".repeat(100));
    let router = json!({"attributeNames": ["id", "mode"], "results": [[hostile, "edge"]]});
    let nodes = json!({"attributeNames": ["id"], "results": [[format!("n{hostile}")], ["mesh-0"]]});
    let connections = json!({"attributeNames": ["container", "role", "dir", "opened"],
        "results": [[format!("up{hostile}"), "edge", "out", true], ["mesh-1", "inter-router", "in", true]]});
    let v = view_of(&router, &nodes, &connections).unwrap();
    let mut ids = vec![v.id.clone()];
    ids.extend(v.reaches.iter().cloned());
    ids.extend(v.edge.iter().chain(&v.inter_router).map(|l| l.peer.clone()));
    assert_eq!(ids.len(), 5, "{ids:?}");
    for id in &ids {
        assert!(id.len() <= MAX_ROUTER_ID + '…'.len_utf8(), "{} bytes: {id}", id.len());
        let json = serde_json::to_string(&**id).unwrap();
        assert_eq!(json.len(), id.len() + 2, "{id} needs escapes in JSON: {json}");
    }
    assert!(v.reaches.contains("mesh-0") && &*v.inter_router[0].peer == "mesh-1", "{v:?}");
    assert_eq!(router_id("router-mesh-5c9d8f7b6-x2x4q"), "router-mesh-5c9d8f7b6-x2x4q");
    assert_eq!(router_id(&"a".repeat(63)), "a".repeat(63));
    assert_eq!(router_id(&"a".repeat(64)), format!("{}…", "a".repeat(63)));
}

#[test]
fn a_kept_view_holds_no_spare_room_in_its_lists() {
    // Read from a router's answers, one connection pushed at a time (a list grown by one
    // push holds 4), then kept.
    let v = view("connected", "mesh-0");
    let (links, detailed) = (v.inter_router.len(), v.detailed.len());
    assert!(links > 0 && detailed > 0, "{v:?}");
    let before = v.clone();
    let kept = v.interned(&mut crate::mesh::Ids::new(["mesh-0", "mesh-1", "mesh-2"]));
    assert_eq!((kept.inter_router.capacity(), kept.detailed.capacity()), (links, detailed));
    assert_eq!(kept, before, "the same view");
}

#[test]
fn a_reads_router_ids_are_kept_once_and_foreign_ones_within_a_budget() {
    use crate::mesh::{Ids, MAX_FOREIGN_IDS, OVER_BUDGET};
    let pods = ["mesh-0", "mesh-1", "mesh-2"];
    let mut ids = Ids::new(pods);
    let a = linked("mesh-0", &["mesh-1", "mesh-2", "other-ic-9"]);
    let b = linked("mesh-1", &["mesh-0", "mesh-2", "other-ic-9"]);
    let (Observation::Answered(a), Observation::Answered(b)) = (a, b) else { unreachable!() };
    let (a, b) = (a.interned(&mut ids), b.interned(&mut ids));
    // A peer id is kept once: the views share it, and a pod's id is its name's.
    let peer =
        |v: &RouterView, id: &str| v.inter_router.iter().find(|l| &*l.peer == id).unwrap().peer.clone();
    assert!(std::sync::Arc::ptr_eq(&peer(&a, "mesh-2"), &peer(&b, "mesh-2")));
    assert!(std::sync::Arc::ptr_eq(&peer(&a, "other-ic-9"), &peer(&b, "other-ic-9")));
    assert!(std::sync::Arc::ptr_eq(&a.id, &peer(&b, "mesh-0")));
    assert!(std::sync::Arc::ptr_eq(&peer(&a, "mesh-2"), b.reaches.get("mesh-2").unwrap()));
    assert_eq!((ids.len(), ids.dropped), (4, 0));
    // Foreign ids past the budget are kept as one marker, counted.
    let many: Vec<String> = (0..MAX_FOREIGN_IDS + 10).map(|i| format!("foreign-{i}")).collect();
    for id in &many {
        ids.intern(id);
    }
    assert_eq!(ids.len(), pods.len() + MAX_FOREIGN_IDS, "the pods and the budget (other-ic-9 in it)");
    assert_eq!(ids.dropped, 11);
    assert_eq!(&*ids.intern("one-more"), OVER_BUDGET);
    assert_eq!(&*ids.intern("mesh-2"), "mesh-2", "a pod's name is always kept");
}

#[test]
fn a_router_is_linked_when_it_holds_a_link_to_every_other_ready_router() {
    use crate::mesh::linked;
    let obs = |all: Vec<(&str, Observation)>| -> BTreeMap<String, Observation> {
        all.into_iter().map(|(p, o)| (p.to_string(), o)).collect()
    };
    let set = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
    let names = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>();
    // A new mesh of three (none Ready yet): each must hold a link to both others.
    let full = obs(vec![
        ("mesh-0", linked_view("mesh-0", &["mesh-1", "mesh-2"])),
        ("mesh-1", linked_view("mesh-1", &["mesh-0", "mesh-2"])),
        ("mesh-2", linked_view("mesh-2", &["mesh-0", "mesh-1"])),
    ]);
    assert_eq!(linked(Mode::Interior, &full, &set(&[])).len(), 3);
    let partial = obs(vec![
        ("mesh-0", linked_view("mesh-0", &["mesh-1"])),
        ("mesh-1", linked_view("mesh-1", &["mesh-0"])),
        ("mesh-2", linked_view("mesh-2", &[])),
    ]);
    assert!(linked(Mode::Interior, &partial, &set(&[])).is_empty(), "a new mesh waits for every link");
    // A router rolled in beside two Ready ones: linked once it holds a link to both, whichever
    // end reports it; not while one is missing.
    assert_eq!(
        names(linked(Mode::Interior, &full, &set(&["mesh-0", "mesh-1"]))),
        ["mesh-0", "mesh-1", "mesh-2"]
    );
    let half = obs(vec![
        ("mesh-0", linked_view("mesh-0", &["mesh-1", "mesh-2"])),
        ("mesh-1", linked_view("mesh-1", &["mesh-0"])),
        ("mesh-2", linked_view("mesh-2", &[])),
    ]);
    let l = linked(Mode::Interior, &half, &set(&["mesh-0", "mesh-1"]));
    assert!(!l.contains("mesh-2"), "no link to the Ready mesh-1: {l:?}");
    // Links to routers not Ready yet are not needed once some are Ready.
    let beside_new = obs(vec![
        ("mesh-0", linked_view("mesh-0", &["mesh-2"])),
        ("mesh-1", linked_view("mesh-1", &[])),
        ("mesh-2", linked_view("mesh-2", &["mesh-0"])),
    ]);
    assert!(linked(Mode::Interior, &beside_new, &set(&["mesh-0"])).contains("mesh-2"));
    // A router that does not answer is neither linked nor waited for; one alone is linked.
    let mute = obs(vec![
        ("mesh-0", linked_view("mesh-0", &[])),
        ("mesh-1", Observation::Unreachable("no answer within 5s".into())),
        ("mesh-2", Observation::Pending("joining the mesh: no link open yet".into())),
    ]);
    assert_eq!(names(linked(Mode::Interior, &mute, &set(&["mesh-1"]))), ["mesh-0"]);
    // An edge router: its uplink open, nothing else.
    let edge = |id: &str, up: bool| {
        let Observation::Answered(mut v) = linked_view(id, &[]) else { unreachable!() };
        v.mode = Mode::Edge;
        if up {
            v.edge.push(Link { peer: "hub-0".into(), outgoing: true, encrypted: true });
        }
        Observation::Answered(v)
    };
    let edges = obs(vec![("e-0", edge("e-0", true)), ("e-1", edge("e-1", false))]);
    assert_eq!(names(linked(Mode::Edge, &edges, &set(&[]))), ["e-0"]);
}

fn linked_view(id: &str, peers: &[&str]) -> Observation {
    linked(id, peers)
}

#[test]
fn routers_of_other_sites_are_counted_once_apart_from_the_interconnects_own() {
    let o: BTreeMap<String, Observation> = [
        ("mesh-0", linked("mesh-0", &["mesh-1", "hub-a-0"])),
        ("mesh-1", linked("mesh-1", &["mesh-0", "hub-a-0", "hub-a-1", crate::mesh::OVER_BUDGET])),
        ("mesh-2", Observation::Unreachable("no answer".into())),
    ]
    .into_iter()
    .map(|(p, o)| (p.to_string(), o))
    .collect();
    assert_eq!(crate::mesh::remote_routers(&o), 2, "hub-a-0 and hub-a-1, once each");
}

/// A view of `id` holding `connections`: (peer, user, outgoing).
fn with_connections(id: &str, connections: &[(&str, Option<&str>, bool)]) -> Observation {
    let Observation::Answered(mut v) = linked(id, &[]) else { unreachable!() };
    v.detailed = (connections.iter())
        .map(|(peer, user, outgoing)| crate::mesh::Connection {
            peer: (*peer).into(),
            outgoing: *outgoing,
            role: "inter-router",
            host: "10.0.0.9:41234".into(),
            tls: Some("TLSv1.3".into()),
            uptime: Some(3),
            user: user.map(str::to_string),
        })
        .collect();
    Observation::Answered(v)
}

#[test]
fn a_site_router_named_like_an_own_pod_is_a_clash_of_that_pod() {
    use crate::mesh::{IdClash, id_clashes};
    let site = "O=qdr-operator-site,CN=b.grant-b.a";
    let own: BTreeSet<&str> = ["hub-x", "hub-y"].into();
    // The site's router (id hub-x) reached hub-y: hub-x is the own pod to replace.
    let o = observed(&[
        ("hub-x", with_connections("hub-x", &[("hub-y", None, true)])),
        ("hub-y", with_connections("hub-y", &[("hub-x", None, false), ("hub-x", Some(site), false)])),
    ]);
    let clash = IdClash { pod: "hub-x".into(), other: "b.grant-b.a".into() };
    assert_eq!(id_clashes(&own, &o), [clash.clone()].into());
    // It reached hub-x itself: the same pod, whoever reports it.
    let o = observed(&[("hub-x", with_connections("hub-x", &[("hub-x", Some(site), false)]))]);
    assert_eq!(id_clashes(&own, &o), [clash].into());
    // A router that dialled out to a peer with its own id (the other side runs no grant):
    // named by the address.
    let o = observed(&[("hub-y", with_connections("hub-y", &[("hub-y", None, true)]))]);
    let other = "10.0.0.9:41234".to_string();
    assert_eq!(id_clashes(&own, &o), [IdClash { pod: "hub-y".into(), other }].into());
}

#[test]
fn own_links_other_ids_and_pods_no_longer_running_are_no_clash() {
    use crate::mesh::id_clashes;
    let site = "O=qdr-operator-site,CN=b.grant-b.a";
    let own: BTreeSet<&str> = ["hub-x", "hub-y"].into();
    let o = observed(&[
        // Own links, no site user: not a clash.
        ("hub-x", with_connections("hub-x", &[("hub-y", None, true)])),
        // A site with its own id; a client certificate that is not a site's.
        (
            "hub-y",
            with_connections("hub-y", &[("b-0", Some(site), false), ("hub-x", Some("CN=hub-x"), false)]),
        ),
        ("hub-z", Observation::Unreachable("no answer".into())),
    ]);
    assert!(id_clashes(&own, &o).is_empty());
    // The pod named is already being replaced (not among the running own pods).
    let o = observed(&[("hub-y", with_connections("hub-y", &[("hub-old", Some(site), false)]))]);
    assert!(id_clashes(&own, &o).is_empty());
}
