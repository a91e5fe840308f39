//! A router that misbehaves on purpose: a scripted AMQP 1.0 peer for the mesh reader's
//! tests (`controller/tests/hostile.rs`) and benchmarks.
//!
//! It speaks just enough of the protocol, from the server's side, for the controller's
//! reader to get as far as its `QUERY`s (header, `open`, `begin`, the two `attach`es, credit
//! for the requests), then answers per its [`Script`]: honestly, as qdrouterd 1.19 does
//! (`attributeNames`, `count` and `offset` honoured; the `connector`s the controller
//! creates, answered 201, and deletes, answered 204, kept per router id across
//! connections), or with what a hostile router could
//! send. Frames are written by hand where the hostile bytes could not be made by an
//! encoder (a 100,000-deep list would overflow the peer's own stack), so the peer never
//! holds more than one frame of them.

use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::types::definitions::Role;
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState};
use fe2o3_amqp::types::performatives::{
    Attach, Begin, Close, Detach, Disposition, End, Flow, Open, Transfer,
};
use fe2o3_amqp::types::primitives::{OrderedMap, Value};
use serde_json::Value as Json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

const HEADER: &[u8; 8] = b"AMQP\x00\x01\x00\x00";

/// Per router id: (entity type's short name, `name`) → attributes.
type Created = std::collections::BTreeMap<
    String,
    std::collections::BTreeMap<(String, String), serde_json::Map<String, Json>>,
>;

/// The entities the controller created on each honest router (by router id), kept across
/// its connections as a router keeps them: (entity type's short name, `name`) → the
/// attributes of the `CREATE`, with `name`.
static CREATED: std::sync::Mutex<Created> = std::sync::Mutex::new(std::collections::BTreeMap::new());
/// Payload bytes per transfer frame: within the reader's 16 KiB frames.
const CHUNK: usize = 16_000;

/// Answers of one router, by entity short name (`router`, `router.node`, `connection`):
/// each `{attributeNames: [..], results: [[..], ..]}` with every attribute.
pub type Answers = std::collections::BTreeMap<String, Json>;

/// What the peer does once the reader connected.
#[derive(Debug, Clone)]
pub enum Script {
    /// Answers as qdrouterd 1.19 does: the attributes asked for, `count` rows from `offset`.
    Honest(Arc<Answers>),
    /// Like [`Script::Honest`], but every row at once whatever `count` says.
    IgnoresCount(Arc<Answers>),
    /// The first answer's body: an amqp-value of lists nested this deep.
    DeepList(usize),
    /// The first answer's body: a map whose one value is a described value (4 bytes,
    /// `00 53 01 40`), on which serde_amqp 0.18 recursed until the stack overflowed.
    Described,
    /// The replies link refused with a `detach` whose error info nests maps this deep (in
    /// one frame, so it is checked before any message).
    DeepPerformative(usize),
    /// The first answer's body is this many bytes, sent as fast as the reader takes them.
    Huge(u64),
    /// An honest first answer, one byte a second.
    Trickle(Arc<Answers>),
    /// Accepts the TCP connection (and the TLS handshake is never started) and says nothing.
    Silent,
    /// Half an answer frame, then the connection closed.
    CloseMidFrame,
    /// Bytes that are not AMQP instead of the protocol header.
    Garbage,
    /// Every answer is `statusCode` 500 with a description of this many bytes.
    Status(usize),
    /// Honest answers, each led by a `message-annotations` section of 15 lists of 65,535
    /// one-byte nulls (about 983 KB, within the message bound): a client that decodes the
    /// whole message makes about 75 MB of untyped values of it.
    AnnotationBomb(Arc<Answers>),
    /// Honest answers, each led by a `message-annotations` section holding an array of
    /// this many nulls in 10 bytes (zero-width elements: only the count says how many).
    NullArray(Arc<Answers>, u32),
    /// Honest answers whose `application-properties` also hold this many entries.
    PropertiesBomb(Arc<Answers>, usize),
    /// Honest, but the connection is closed, unanswered, at the write (`CREATE` or
    /// `DELETE`) after this many answered ones: a visit cut half way.
    CutAfterWrites(Arc<Answers>, usize),
    /// Honest, but every `CREATE` and `DELETE` is answered this long after it came.
    SlowWrites(Arc<Answers>, Duration),
    /// Honest, but a `CREATE` whose name contains this text, or with an attribute of this
    /// value, is refused as qdrouterd refuses a duplicate (`400 Already exists`) and not kept.
    RefuseCreate(Arc<Answers>, String),
}

/// The whole message (application properties, then an `amqp-value` body) an honest router
/// answers a `QUERY` of `entity` for `attributes` with, from `answers`: a seed of
/// `controller/tests/fuzz_answers.rs`.
pub fn answer_message(answers: &Answers, entity: &str, attributes: &[&str]) -> Vec<u8> {
    let attributes: Vec<String> = attributes.iter().map(|a| a.to_string()).collect();
    let table = project(&answers[entity], &attributes, 0, None);
    let body = serde_amqp::to_vec(&table).expect("encodes");
    answer(&Value::from("7"), 200, "OK", &body)
}

/// One `CREATE` or `DELETE` an honest peer received.
#[derive(Debug, Clone)]
pub struct Write {
    /// The router id of the answers that took it.
    pub router: String,
    /// The connection it came on (numbered from 1 in the order the peers accepted them).
    pub connection: u64,
    /// `CREATE` or `DELETE`.
    pub operation: String,
    /// The entity's name.
    pub name: String,
    /// When it came (before any delay of the script's answer).
    pub at: std::time::Instant,
}

static WRITES: std::sync::Mutex<Vec<Write>> = std::sync::Mutex::new(Vec::new());
/// `QUERY`s the honest peers answered, by (router id, entity type's short name).
static QUERIES: std::sync::Mutex<std::collections::BTreeMap<(String, String), u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// How many `QUERY`s of `entity` (its short name: `router`, `router.config.address`, …) the
/// honest peers of router `router` answered.
pub fn queries(router: &str, entity: &str) -> u64 {
    let queries = QUERIES.lock().unwrap_or_else(|e| e.into_inner());
    queries.get(&(router.to_string(), entity.to_string())).copied().unwrap_or(0)
}

/// Seconds since the Unix epoch now.
fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `a` ([`honest`]'s answers) of a router process that started at `unix_seconds` (since
/// the Unix epoch): its `uptimeSeconds` counts from then. [`honest`]'s start when it is
/// made; a later start stands in for a restarted router.
pub fn started_at(mut a: Answers, unix_seconds: u64) -> Answers {
    if let Some(router) = a.get_mut("router") {
        each_uptime(router, |_| Some(Json::from(unix_seconds)));
    }
    a
}

/// `router`'s answer with each row's `uptimeSeconds`, kept as the process's start (Unix
/// seconds: [`started_at`]), turned into the seconds it has been up now.
fn with_uptime(mut router: Json) -> Json {
    let now = unix_now();
    each_uptime(&mut router, |v| v.as_u64().map(|started| Json::from(now.saturating_sub(started))));
    router
}

/// Replaces each row's `uptimeSeconds` of a `router` answer with what `f` makes of it,
/// when it makes something.
fn each_uptime(router: &mut Json, f: impl Fn(&Json) -> Option<Json>) {
    let at = router["attributeNames"].as_array().and_then(|n| n.iter().position(|n| n == "uptimeSeconds"));
    if let (Some(at), Some(rows)) = (at, router["results"].as_array_mut()) {
        for row in rows {
            if let Some(v) = f(&row[at]) {
                row[at] = v;
            }
        }
    }
}

static CONNECTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Frames the peers received, by the local port they were received on, then by
/// performative (`open`, `flow`, `transfer`, ...).
static RECEIVED: std::sync::Mutex<
    std::collections::BTreeMap<u16, std::collections::BTreeMap<&'static str, u64>>,
> = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The frames the peers on local port `port` received so far, by performative (`open`,
/// `begin`, `attach`, `flow`, `transfer` (pre-settled), `unsettled transfer`, `disposition`,
/// `detach`, `end`, `close`): what a
/// reader costs in frames, whatever it reads.
pub fn received(port: u16) -> std::collections::BTreeMap<&'static str, u64> {
    RECEIVED.lock().unwrap_or_else(|e| e.into_inner()).get(&port).cloned().unwrap_or_default()
}

/// Counts a frame of `name` received on local port `port` ([`received`]).
fn count(port: u16, name: &'static str) {
    let mut received = RECEIVED.lock().unwrap_or_else(|e| e.into_inner());
    *received.entry(port).or_default().entry(name).or_default() += 1;
}

/// The performative's name, as [`received`] counts it.
fn name_of(p: &fe2o3_amqp::types::performatives::Performative) -> &'static str {
    use fe2o3_amqp::types::performatives::Performative as P;
    match p {
        P::Open(_) => "open",
        P::Begin(_) => "begin",
        P::Attach(_) => "attach",
        P::Flow(_) => "flow",
        P::Transfer(t) if t.settled == Some(true) => "transfer",
        // One the peer settles with a disposition of its own, as qdrouterd does.
        P::Transfer(_) => "unsettled transfer",
        P::Disposition(_) => "disposition",
        P::Detach(_) => "detach",
        P::End(_) => "end",
        P::Close(_) => "close",
    }
}

/// Connections the peers accepted so far, in all (every script).
pub fn connections() -> u64 {
    CONNECTIONS.load(std::sync::atomic::Ordering::SeqCst)
}

/// The routers a peer answers for when asked through it over the mesh
/// (`_topo/0/<id>/$management`), by router id.
static ROUTABLE: std::sync::Mutex<std::collections::BTreeMap<String, Arc<Answers>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Makes the router of `answers` reachable through every other peer, as a linked mesh's
/// routers are through each other: a request link attached to `_topo/0/<id>/$management`
/// on any peer's connection is answered with `answers` (the honest scripts' answers, and
/// the writes kept under that router id). A link to a router not made reachable is refused
/// (an `attach` without a target, then a `detach` with `amqp:not-found`).
pub fn routable(answers: &Arc<Answers>) {
    let id = answers["router"]["results"][0][0].as_str().unwrap_or_default().to_string();
    ROUTABLE.lock().unwrap_or_else(|e| e.into_inner()).insert(id, answers.clone());
}

/// The router id of a `_topo/0/<id>/$management` target address.
fn routed_to(address: &str) -> Option<&str> {
    let rest = address.strip_prefix("amqp:/").unwrap_or(address);
    rest.strip_prefix("_topo/0/")?.strip_suffix("/$management")
}

/// Every write the honest peers of router `router` received, in order.
pub fn writes(router: &str) -> Vec<Write> {
    WRITES.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|w| w.router == router).cloned().collect()
}

/// The entities the controller created on the honest router of id `router` and did not
/// delete: (entity type's short name, `name`) → the attributes of the `CREATE`, with `name`.
pub fn held(router: &str) -> std::collections::BTreeMap<(String, String), serde_json::Map<String, Json>> {
    CREATED.lock().unwrap_or_else(|e| e.into_inner()).get(router).cloned().unwrap_or_default()
}

/// A `message-annotations` section of `lists` lists of `items` one-byte nulls each, keyed
/// `x-opt-bomb-<i>`.
pub fn annotation_bomb(lists: usize, items: usize) -> Vec<u8> {
    annotations((0..lists).map(|i| (format!("x-opt-bomb-{i}"), list32(&vec![vec![0x40]; items]))))
}

/// A `message-annotations` section: a map32 of symbol keys to the encoded values given.
fn annotations(entries: impl Iterator<Item = (String, Vec<u8>)>) -> Vec<u8> {
    let items: Vec<Vec<u8>> = entries
        .flat_map(|(k, v)| [performative(&fe2o3_amqp::types::primitives::Symbol::from(k)), v])
        .collect();
    section(0x72, &map32(&items))
}

/// An array32 of `count` nulls: 10 bytes whatever the count.
pub fn null_array(count: u32) -> Vec<u8> {
    let mut a = vec![0xf0];
    a.extend_from_slice(&5u32.to_be_bytes());
    a.extend_from_slice(&count.to_be_bytes());
    a.push(0x40);
    a
}

/// One honest router's answers: router `id` (mode `interior` or `edge`), open
/// inter-router connections to `peers` (opened by the router whose id sorts later), and
/// `clients` client connections; a process started now ([`started_at`]).
pub fn honest(id: &str, mode: &str, peers: &[&str], clients: usize) -> Answers {
    let mut a = Answers::new();
    a.insert(
        "router".into(),
        serde_json::json!({"attributeNames": ["id", "mode", "linksBlocked", "deliveriesStuck", "connectionCount", "uptimeSeconds"],
                           "results": [[id, mode, 0, 0, peers.len() + clients, unix_now()]]}),
    );
    let mut nodes = vec![serde_json::json!([id, "(self)"])];
    nodes.extend(peers.iter().map(|p| serde_json::json!([p, null])));
    a.insert(
        "router.node".into(),
        serde_json::json!({"attributeNames": ["id", "nextHop"], "results": nodes}),
    );
    let names = ["name", "container", "role", "dir", "opened", "isEncrypted", "host", "properties"];
    let mut rows: Vec<Json> = peers
        .iter()
        .map(|p| {
            let role = if mode == "edge" { "edge" } else { "inter-router" };
            let dir = if id > *p { "out" } else { "in" };
            serde_json::json!([format!("connection/{p}"), p, role, dir, true, true, "10.0.0.1:55671",
                               {"product": "qpid-dispatch-router", "version": "1.19.0"}])
        })
        .collect();
    rows.extend((0..clients).map(|i| {
        serde_json::json!([
            format!("connection/c{i}"),
            format!("client-{i:08}-5c1d-4b6e-9a0e-7f3b2c1d0e9f"),
            "normal",
            "in",
            true,
            false,
            "10.0.0.2:40000",
            {}
        ])
    }));
    a.insert("connection".into(), serde_json::json!({"attributeNames": names, "results": rows}));
    a
}

/// `a` ([`honest`]'s answers) with one more open incoming connection of role `role` from
/// router `container`, authenticated as `user` (what a site linked from another cluster
/// looks like: `O=qdr-operator-site,CN=<site>.<grant>.<namespace>`).
pub fn with_user_connection(mut a: Answers, container: &str, role: &str, user: &str) -> Answers {
    let table = a
        .entry("connection".into())
        .or_insert_with(|| serde_json::json!({"attributeNames": [], "results": []}));
    let names = table["attributeNames"].as_array_mut().expect("attributeNames");
    if !names.iter().any(|n| n == "user") {
        names.push("user".into());
        for row in table["results"].as_array_mut().expect("results") {
            row.as_array_mut().expect("row").push(Json::Null);
        }
    }
    let names: Vec<String> = table["attributeNames"]
        .as_array()
        .expect("attributeNames")
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    let row: Vec<Json> = names
        .iter()
        .map(|n| match n.as_str() {
            "name" => format!("connection/{container}").into(),
            "container" => container.into(),
            "role" => role.into(),
            "dir" => "in".into(),
            "opened" => true.into(),
            "isEncrypted" => true.into(),
            "host" => "203.0.113.9:40000".into(),
            "user" => user.into(),
            _ => Json::Null,
        })
        .collect();
    table["results"].as_array_mut().expect("results").push(row.into());
    a
}

/// The TLS configuration of a peer that stands in for a router: its certificate chain
/// `cert_pem` and key `key_pem` (PEM, as a generated credentials Secret's `tls.crt` and
/// `tls.key`), no client certificate asked. `None` when either does not parse or rustls
/// refuses the pair.
pub fn server_tls(cert_pem: &[u8], key_pem: &[u8]) -> Option<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem).collect::<Result<_, _>>().ok()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).ok()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .ok()?;
    Some(Arc::new(config))
}

/// A peer listening on `listener` (over TLS with `tls`), running `script` for every
/// connection, until the returned task is aborted.
pub fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    script: Script,
) -> tokio::task::JoinHandle<()> {
    serve_by_address(listener, Arc::new(move |_| Some((tls.clone(), script.clone()))))
}

/// Who answers at a local address: its TLS configuration (`None`: plain) and script, or
/// `None` to close connections made to that address at once.
pub type ByAddress =
    Arc<dyn Fn(std::net::IpAddr) -> Option<(Option<Arc<rustls::ServerConfig>>, Script)> + Send + Sync>;

/// Many peers on one listener: each connection is answered as `pick` says for the local
/// address it was made to. One wildcard listener (`0.0.0.0:port`, a port of its own) so
/// stands in for a router at every loopback address (`127.0.0.0/8`); the mesh benchmark,
/// which must use the routers' management port, gives it one listener per address.
pub fn serve_by_address(listener: TcpListener, pick: ByAddress) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { return };
            let _ = socket.set_nodelay(true);
            let Ok(local) = socket.local_addr() else { continue };
            let Some((tls, script)) = pick(local.ip()) else { continue };
            let port = local.port();
            tokio::spawn(async move {
                if matches!(script, Script::Silent) {
                    let mut socket = socket;
                    let mut sink = [0u8; 1024];
                    while socket.read(&mut sink).await.is_ok_and(|n| n > 0) {}
                    return;
                }
                match tls {
                    Some(config) => {
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(socket).await else {
                            return;
                        };
                        let _ = run(stream, &script, port).await;
                    }
                    None => {
                        let _ = run(socket, &script, port).await;
                    }
                }
            });
        }
    })
}

/// `value`'s AMQP encoding, for the peer's answers: strings, booleans, integers (as longs),
/// `null`, lists and maps with string keys.
fn amqp(value: &Json) -> Value {
    match value {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => n.as_i64().map_or(Value::Null, Value::Long),
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::List(items.iter().map(amqp).collect()),
        Json::Object(m) => Value::Map(m.iter().map(|(k, v)| (Value::String(k.clone()), amqp(v))).collect()),
    }
}

/// `answer` projected as qdrouterd does: `attributes` (all when empty), rows from `offset`,
/// at most `count` (all when negative).
fn project(answer: &Json, attributes: &[String], offset: usize, count: Option<usize>) -> Value {
    let names: Vec<&str> =
        answer["attributeNames"].as_array().into_iter().flatten().filter_map(Json::as_str).collect();
    let wanted: Vec<&str> =
        if attributes.is_empty() { names.clone() } else { attributes.iter().map(String::as_str).collect() };
    let rows = answer["results"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Value> = (rows.iter().skip(offset).take(count.unwrap_or(usize::MAX)))
        .map(|row| {
            Value::List(
                wanted
                    .iter()
                    .map(|w| {
                        names.iter().position(|n| n == w).and_then(|i| row.get(i)).map_or(Value::Null, amqp)
                    })
                    .collect(),
            )
        })
        .collect();
    Value::Map(OrderedMap::from_iter([
        (Value::from("attributeNames"), Value::List(wanted.iter().map(|w| Value::from(*w)).collect())),
        (Value::from("results"), Value::List(rows)),
    ]))
}

/// An AMQP frame on `channel` holding `body` (a performative and any payload).
pub fn frame(channel: u16, body: &[u8]) -> Vec<u8> {
    let size = u32::try_from(8 + body.len()).expect("a frame");
    let mut f = size.to_be_bytes().to_vec();
    f.extend_from_slice(&[2, 0]);
    f.extend_from_slice(&channel.to_be_bytes());
    f.extend_from_slice(body);
    f
}

fn performative(p: &impl serde::Serialize) -> Vec<u8> {
    serde_amqp::to_vec(p).expect("a performative encodes")
}

/// A described section (`0x00 0x53 code`) holding `value`'s bytes.
pub fn section(code: u8, value: &[u8]) -> Vec<u8> {
    let mut s = vec![0x00, 0x53, code];
    s.extend_from_slice(value);
    s
}

/// `depth` lists nested in each other (list32 each, 9 bytes a level), the innermost empty,
/// written outermost first in one pass.
pub fn nested_lists(depth: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 * depth + 1);
    for level in (1..=depth).rev() {
        // Level k's value is 9k + 1 bytes; its size field counts all but its code and size.
        let size = u32::try_from(9 * level - 4).expect("small enough");
        v.push(0xd0);
        v.extend_from_slice(&size.to_be_bytes());
        v.extend_from_slice(&1u32.to_be_bytes());
    }
    v.push(0x45);
    v
}

/// `items` (keys and values in turn) as one map32.
fn map32(items: &[Vec<u8>]) -> Vec<u8> {
    let mut m = list32(items);
    m[0] = 0xd1;
    m
}

/// `items` as one list32.
pub fn list32(items: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = items.concat();
    let mut l = vec![0xd0];
    l.extend_from_slice(&u32::try_from(body.len() + 4).expect("small").to_be_bytes());
    l.extend_from_slice(&u32::try_from(items.len()).expect("small").to_be_bytes());
    l.extend(body);
    l
}

/// A detach of `handle` whose error's info is a map holding `depth` nested lists.
fn deep_detach(handle: u32, depth: usize) -> Vec<u8> {
    let key = performative(&fe2o3_amqp::types::primitives::Symbol::from("x"));
    let info = map32(&[key, nested_lists(depth)]);
    let condition = performative(&fe2o3_amqp::types::primitives::Symbol::from("amqp:internal-error"));
    let mut error = vec![0x00, 0x53, 0x1d];
    error.extend(list32(&[condition, vec![0x40], info]));
    let mut detach = vec![0x00, 0x53, 0x16];
    detach.extend(list32(&[performative(&handle), vec![0x41], error]));
    detach
}

struct Io<S> {
    s: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Io<S> {
    async fn fill(&mut self, n: usize) -> std::io::Result<()> {
        while self.buf.len() < n {
            let mut chunk = [0u8; 8192];
            let got = self.s.read(&mut chunk).await?;
            if got == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..got]);
        }
        Ok(())
    }

    /// The next frame's channel and body (empty for a heartbeat).
    async fn frame(&mut self) -> std::io::Result<(u16, Vec<u8>)> {
        self.fill(8).await?;
        let size = u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
        let doff = usize::from(self.buf[4]) * 4;
        let channel = u16::from_be_bytes([self.buf[6], self.buf[7]]);
        self.fill(size).await?;
        let body = self.buf[doff..size].to_vec();
        self.buf.drain(..size);
        Ok((channel, body))
    }

    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.s.write_all(bytes).await?;
        self.s.flush().await
    }

    /// Sends one message (`payload`, its sections) on `handle` as delivery `id`, split in
    /// frames of [`CHUNK`] bytes.
    async fn deliver(&mut self, handle: u32, id: u32, payload: &[u8]) -> std::io::Result<()> {
        let chunks: Vec<&[u8]> = payload.chunks(CHUNK).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let mut body = performative(&transfer(handle, id, i + 1 < chunks.len()));
            body.extend_from_slice(chunk);
            self.send(&frame(0, &body)).await?;
        }
        Ok(())
    }
}

/// A pre-settled `transfer` of delivery `id` on link `handle`, with `more` frames to come or
/// not.
pub fn transfer(handle: u32, id: u32, more: bool) -> Transfer {
    Transfer {
        handle: handle.into(),
        delivery_id: Some(id),
        delivery_tag: Some(id.to_be_bytes().to_vec().into()),
        message_format: Some(0),
        settled: Some(true),
        more,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// What a request asked: its correlation id, `entityType`'s last part, the attribute
/// names, `offset` and `count`.
struct Request {
    correlation: Value,
    entity: String,
    attributes: Vec<String>,
    offset: usize,
    count: Option<usize>,
    /// `operation` (`QUERY`, `CREATE`, `DELETE`).
    operation: String,
    /// `name` (the entity a `CREATE` or `DELETE` names).
    name: String,
    /// A `CREATE`'s attributes (strings, integers, booleans).
    attributes_given: serde_json::Map<String, Json>,
}

fn request(payload: &[u8]) -> Option<Request> {
    let mut pos = 0;
    let mut r = Request {
        correlation: Value::Null,
        entity: String::new(),
        attributes: vec![],
        offset: 0,
        count: None,
        operation: String::new(),
        name: String::new(),
        attributes_given: serde_json::Map::new(),
    };
    while pos < payload.len() {
        let end = qdr_controller::mesh::wire::value_end(payload, pos, 16).ok()?;
        let code = *payload.get(pos + 2)?;
        let value: Value = serde_amqp::from_slice(&payload[pos + 3..end]).ok()?;
        match (code, value) {
            (0x73, Value::List(props)) => r.correlation = props.get(5).cloned().unwrap_or(Value::Null),
            (0x74, Value::Map(m)) => {
                for (k, v) in m {
                    match (k, v) {
                        // `entityType` of a QUERY, `type` of a CREATE or DELETE.
                        (Value::String(k), Value::String(v))
                            if k == "entityType" || (k == "type" && v != "org.amqp.management") =>
                        {
                            r.entity = v.rsplit("dispatch.").next().unwrap_or_default().to_string();
                        }
                        (Value::String(k), Value::String(v)) if k == "operation" => r.operation = v,
                        (Value::String(k), Value::String(v)) if k == "name" => r.name = v,
                        (Value::String(k), Value::Long(v)) if k == "count" => {
                            r.count = usize::try_from(v).ok()
                        }
                        (Value::String(k), Value::Long(v)) if k == "offset" => {
                            r.offset = usize::try_from(v).unwrap_or(0);
                        }
                        _ => {}
                    }
                }
            }
            (0x77, Value::Map(m)) => {
                for (k, v) in m {
                    match (k, v) {
                        (Value::String(k), Value::List(names)) if k == "attributeNames" => {
                            r.attributes = (names.into_iter())
                                .filter_map(|n| if let Value::String(s) = n { Some(s) } else { None })
                                .collect();
                        }
                        (Value::String(k), Value::String(v)) => {
                            r.attributes_given.insert(k, Json::from(v));
                        }
                        (Value::String(k), Value::Long(v)) => {
                            r.attributes_given.insert(k, Json::from(v));
                        }
                        (Value::String(k), Value::Bool(v)) => {
                            r.attributes_given.insert(k, Json::from(v));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        pos = end;
    }
    Some(r)
}

/// The sections of an answer: properties (the correlation id), application properties
/// (`statusCode`, `statusDescription`) and an amqp-value `body`.
pub fn answer(correlation: &Value, status: i32, description: &str, body: &[u8]) -> Vec<u8> {
    answer_with(correlation, status, description, body, 0)
}

/// [`answer`] whose application properties hold `extra` entries besides the status
/// (`k<i>` → `true`).
fn answer_with(correlation: &Value, status: i32, description: &str, body: &[u8], extra: usize) -> Vec<u8> {
    let props = Value::List(vec![
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        correlation.clone(),
    ]);
    let status = [
        (Value::from("statusCode"), Value::Int(status)),
        (Value::from("statusDescription"), Value::from(description)),
    ];
    let extra = (0..extra).map(|i| (Value::from(format!("k{i:x}")), Value::Bool(true)));
    let app = Value::Map(OrderedMap::from_iter(status.into_iter().chain(extra)));
    let mut out = section(0x73, &serde_amqp::to_vec(&props).expect("encodes"));
    out.extend(section(0x74, &serde_amqp::to_vec(&app).expect("encodes")));
    out.extend(section(0x77, body));
    out
}

async fn run<S: AsyncRead + AsyncWrite + Unpin>(s: S, script: &Script, port: u16) -> std::io::Result<()> {
    let mut io = Io { s, buf: Vec::new() };
    if matches!(script, Script::Garbage) {
        io.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await?;
        return io.fill(usize::MAX).await;
    }
    io.fill(8).await?;
    io.buf.drain(..8);
    io.send(HEADER).await?;
    let mut next_delivery = 0u32;
    // Writes answered on this connection (`Script::CutAfterWrites`).
    let mut writes = 0usize;
    let connection = CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    // Our handle for the replies link (we send on it); request links take 1, 2, ...
    let replies = 0u32;
    // The reader's handle of each request link → the answers of the router it asks through
    // this one (`None`: this one).
    let mut requests: std::collections::BTreeMap<u32, Option<Arc<Answers>>> = Default::default();
    loop {
        let (channel, body) = io.frame().await?;
        if body.is_empty() {
            continue;
        }
        let end = qdr_controller::mesh::wire::value_end(&body, 0, 16).map_err(std::io::Error::other)?;
        let p: fe2o3_amqp::types::performatives::Performative =
            serde_amqp::from_slice(&body[..end]).map_err(std::io::Error::other)?;
        use fe2o3_amqp::types::performatives::Performative as P;
        count(port, name_of(&p));
        match p {
            P::Open(_) => {
                let open = Open {
                    container_id: "hostile-router".into(),
                    hostname: None,
                    max_frame_size: 16384.into(),
                    channel_max: 0.into(),
                    idle_time_out: None,
                    outgoing_locales: None,
                    incoming_locales: None,
                    offered_capabilities: None,
                    desired_capabilities: None,
                    properties: None,
                };
                io.send(&frame(0, &performative(&open))).await?;
            }
            P::Begin(b) => {
                let begin = Begin {
                    remote_channel: Some(channel),
                    next_outgoing_id: 0,
                    incoming_window: 2048,
                    outgoing_window: b.incoming_window.max(1),
                    handle_max: 255.into(),
                    offered_capabilities: None,
                    desired_capabilities: None,
                    properties: None,
                };
                io.send(&frame(0, &performative(&begin))).await?;
            }
            P::Attach(a) if a.role == Role::Receiver => {
                let mut echo: Attach = a.clone();
                echo.handle = replies.into();
                echo.role = Role::Sender;
                echo.initial_delivery_count = Some(0);
                if let Some(source) = echo.source.as_mut() {
                    source.address = Some("amqp:/_topo/0/hostile-router/temp.reply".into());
                }
                io.send(&frame(0, &performative(&echo))).await?;
                if let Script::DeepPerformative(depth) = script {
                    io.send(&frame(0, &deep_detach(replies, *depth))).await?;
                }
            }
            P::Attach(a) => {
                let handle = u32::try_from(requests.len()).unwrap_or(u32::MAX) + 1;
                let target = a.target.as_deref().and_then(|t| {
                    #[allow(unreachable_patterns)]
                    match t {
                        fe2o3_amqp::types::messaging::TargetArchetype::Target(t) => t.address.clone(),
                        _ => None,
                    }
                });
                let routed = match target.as_deref().and_then(routed_to) {
                    None => Some(None),
                    Some(id) => ROUTABLE.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned().map(Some),
                };
                let mut echo: Attach = a.clone();
                echo.handle = handle.into();
                echo.role = Role::Receiver;
                echo.initial_delivery_count = None;
                let Some(routed) = routed else {
                    // No route to that router: refused as AMQP refuses a link.
                    echo.target = None;
                    io.send(&frame(0, &performative(&echo))).await?;
                    let error = fe2o3_amqp::types::definitions::Error::new(
                        fe2o3_amqp::types::definitions::AmqpError::NotFound,
                        Some("no route to the destination".into()),
                        None,
                    );
                    let detach = Detach { handle: handle.into(), closed: true, error: Some(error) };
                    io.send(&frame(0, &performative(&detach))).await?;
                    continue;
                };
                requests.insert(a.handle.0, routed);
                io.send(&frame(0, &performative(&echo))).await?;
                let flow = Flow {
                    next_incoming_id: Some(0),
                    incoming_window: 2048,
                    next_outgoing_id: 0,
                    outgoing_window: 2048,
                    handle: Some(handle.into()),
                    delivery_count: Some(0),
                    link_credit: Some(100),
                    available: None,
                    drain: false,
                    echo: false,
                    properties: None,
                };
                io.send(&frame(0, &performative(&flow))).await?;
            }
            P::Transfer(t) => {
                // Settle the request as a router does (the sender waits for it).
                if t.settled != Some(true)
                    && let Some(first) = t.delivery_id
                {
                    let disposition = Disposition {
                        role: Role::Receiver,
                        first,
                        last: None,
                        settled: true,
                        state: Some(DeliveryState::Accepted(Accepted {})),
                        batchable: false,
                    };
                    io.send(&frame(0, &performative(&disposition))).await?;
                }
                let Some(req) = request(&body[end..]) else { continue };
                // The answers of the router asked, when it is asked through this one.
                let routed = requests.get(&t.handle.0).cloned().flatten();
                let pick = |answers: &Arc<Answers>| routed.clone().unwrap_or_else(|| answers.clone());
                // When the request came (a slow script answers it later).
                let received = std::time::Instant::now();
                let id = next_delivery;
                next_delivery += 1;
                let honest_answer_with = |answers: &Answers, count: Option<usize>, extra: usize| {
                    // Entities as qdrouterd keeps them: what the controller created and did
                    // not delete, per router id (each read is a new connection); a type the
                    // controller writes (connector, listener, the router.config ones) lists
                    // only those.
                    let id = answers["router"]["results"][0][0].as_str().unwrap_or_default().to_string();
                    let mut held = CREATED.lock().unwrap_or_else(|e| e.into_inner());
                    let mine = held.entry(id.clone()).or_default();
                    let key = (req.entity.clone(), req.name.clone());
                    if matches!(req.operation.as_str(), "CREATE" | "DELETE") {
                        WRITES.lock().unwrap_or_else(|e| e.into_inner()).push(Write {
                            router: id.clone(),
                            connection,
                            operation: req.operation.clone(),
                            name: req.name.clone(),
                            at: received,
                        });
                    }
                    match req.operation.as_str() {
                        "CREATE" => {
                            let mut attributes = req.attributes_given.clone();
                            attributes.insert("name".into(), Json::from(req.name.as_str()));
                            mine.insert(key, attributes);
                            return answer_with(&req.correlation, 201, "Created", &[0x40], extra);
                        }
                        "DELETE" => {
                            mine.remove(&key);
                            return answer_with(&req.correlation, 204, "No Content", &[0x40], extra);
                        }
                        _ => {}
                    }
                    *QUERIES
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry((id.clone(), req.entity.clone()))
                        .or_default() += 1;
                    let written = ["connector", "listener"].contains(&req.entity.as_str())
                        || req.entity.starts_with("router.config.");
                    let a = if written && !answers.contains_key(&req.entity) {
                        let rows: Vec<Json> = (mine.iter())
                            .filter(|((entity, _), _)| *entity == req.entity)
                            .map(|(_, attributes)| {
                                Json::from(
                                    req.attributes
                                        .iter()
                                        .map(|n| attributes.get(n).cloned().unwrap_or(Json::Null))
                                        .collect::<Vec<_>>(),
                                )
                            })
                            .collect();
                        serde_json::json!({"attributeNames": req.attributes, "results": rows})
                    } else if req.entity == "router" {
                        answers.get(&req.entity).cloned().map_or(Json::Null, with_uptime)
                    } else {
                        answers.get(&req.entity).cloned().unwrap_or(Json::Null)
                    };
                    let body = serde_amqp::to_vec(&project(&a, &req.attributes, req.offset, count))
                        .expect("encodes");
                    answer_with(&req.correlation, 200, "OK", &body, extra)
                };
                let honest_answer =
                    |answers: &Answers, count: Option<usize>| honest_answer_with(answers, count, 0);
                let write = matches!(req.operation.as_str(), "CREATE" | "DELETE");
                match script {
                    Script::CutAfterWrites(_, n) if write && writes == *n => return Ok(()),
                    Script::CutAfterWrites(answers, _) => {
                        writes += usize::from(write);
                        io.deliver(replies, id, &honest_answer(&pick(answers), req.count)).await?
                    }
                    Script::RefuseCreate(_, text)
                        if req.operation == "CREATE"
                            && (req.name.contains(text.as_str())
                                || req
                                    .attributes_given
                                    .values()
                                    .any(|v| v.as_str() == Some(text.as_str()))) =>
                    {
                        let refusal = answer(&req.correlation, 400, "Already exists", &[0x40]);
                        io.deliver(replies, id, &refusal).await?
                    }
                    Script::RefuseCreate(answers, _) => {
                        io.deliver(replies, id, &honest_answer(&pick(answers), req.count)).await?
                    }
                    Script::SlowWrites(answers, delay) => {
                        if write {
                            tokio::time::sleep(*delay).await;
                        }
                        io.deliver(replies, id, &honest_answer(&pick(answers), req.count)).await?
                    }
                    Script::Honest(answers) => {
                        io.deliver(replies, id, &honest_answer(&pick(answers), req.count)).await?
                    }
                    Script::IgnoresCount(answers) => {
                        io.deliver(replies, id, &honest_answer(&pick(answers), None)).await?
                    }
                    Script::DeepList(depth) => {
                        let body = nested_lists(*depth);
                        io.deliver(replies, id, &answer(&req.correlation, 200, "OK", &body)).await?;
                    }
                    Script::Described => {
                        let body = [0xc1, 0x0a, 0x02, 0xa1, 0x03, b'k', b'e', b'y', 0x00, 0x53, 0x01, 0x40];
                        io.deliver(replies, id, &answer(&req.correlation, 200, "OK", &body)).await?;
                    }
                    Script::Huge(bytes) => {
                        // Sections of nulls, frame after frame, never the last one.
                        let chunk = vec![0x40u8; CHUNK];
                        let mut sent = 0u64;
                        while sent < *bytes {
                            let mut body = performative(&transfer(replies, id, true));
                            body.extend_from_slice(&chunk);
                            io.send(&frame(0, &body)).await?;
                            sent += CHUNK as u64;
                        }
                    }
                    Script::Trickle(answers) => {
                        let payload = honest_answer(&pick(answers), req.count);
                        let mut body = performative(&transfer(replies, id, false));
                        body.extend(payload);
                        for b in frame(0, &body) {
                            io.send(&[b]).await?;
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                    Script::CloseMidFrame => {
                        let mut body = performative(&transfer(replies, id, false));
                        body.extend(answer(&req.correlation, 200, "OK", &[0x40]));
                        let f = frame(0, &body);
                        io.send(&f[..f.len() / 2]).await?;
                        return Ok(());
                    }
                    Script::Status(bytes) => {
                        let description = "x".repeat(*bytes);
                        io.deliver(replies, id, &answer(&req.correlation, 500, &description, &[0x40]))
                            .await?;
                    }
                    Script::AnnotationBomb(answers) => {
                        let mut payload = annotation_bomb(15, 65_535);
                        payload.extend(honest_answer(&pick(answers), req.count));
                        io.deliver(replies, id, &payload).await?;
                    }
                    Script::NullArray(answers, count) => {
                        let mut payload =
                            annotations([("x-opt-bomb".into(), null_array(*count))].into_iter());
                        payload.extend(honest_answer(&pick(answers), req.count));
                        io.deliver(replies, id, &payload).await?;
                    }
                    Script::PropertiesBomb(answers, extra) => {
                        io.deliver(replies, id, &honest_answer_with(&pick(answers), req.count, *extra))
                            .await?
                    }
                    Script::Silent | Script::Garbage | Script::DeepPerformative(_) => {}
                }
            }
            P::Detach(d) => {
                let detach = Detach { handle: d.handle, closed: d.closed, error: None };
                io.send(&frame(0, &performative(&detach))).await?;
            }
            P::End(_) => io.send(&frame(0, &performative(&End { error: None }))).await?,
            P::Close(_) => {
                io.send(&frame(0, &performative(&Close { error: None }))).await?;
                return Ok(());
            }
            P::Flow(_) | P::Disposition(_) => {}
        }
    }
}
