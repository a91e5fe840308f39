//! Asking one router: an AMQP 1.0 connection (fe2o3-amqp) over a stream the caller opened
//! (plain TCP, or TLS with a client certificate: the design in `docs/mesh-status.md`),
//! management `QUERY`s on `$management` with replies to a dynamic receiver, then the
//! connection closed. No SASL: a router's listener that verifies client certificates in the
//! TLS handshake needs none.
//!
//! In the same visit it writes: the operator's inter-router connectors ([`super::links`])
//! and the configuration's live entities ([`super::live`], docs/live-configuration.md), with
//! management `CREATE`s and `DELETE`s, each answer checked like a query's.
//!
//! The router is not trusted (docs/mesh-status.md, "A router is not trusted"): every byte
//! it sends passes [`super::wire::Guarded`] first (frame and message sizes, nesting, a byte
//! budget, the deadline); each query asks only for the attributes the view uses
//! ([`super::ROUTER_ATTRIBUTES`], …) and at most [`PAGE_ROWS`] rows at a time (`count`,
//! `offset`), and answers decode into bounded [`Table`]s, folded page by page into the
//! [`RouterView`], so one read holds at most one round of pages (below).
//!
//! A visit asks the first page of each of its queries at once, one round of requests
//! ([`Links::ask_all`]), and the pages after them one at a time: a router at rest answers in
//! one round trip, and a read holds at most the four pages of that round. Requests go
//! pre-settled and the reply link gets credit only for the answers awaited (one `flow` a
//! round), so a router at rest costs the controller one `flow` and one `transfer` a query,
//! where a query cost a `flow` and a settlement more each; a router can send no more
//! messages than a round asks for (four).

use std::time::Duration;

use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, MessageId, Properties, Source};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::answer::{Cell, MAX_ROWS, MAX_TEXT, Table, cut};
use super::links::{self as linking, Attribute, Connector};
use super::live::{self, Desired, Held, Kind, Outcome};
use super::wire::{Guarded, MAX_FRAME_SIZE, MAX_MESSAGE_SIZE, READ_BUDGET, Verdict};
use super::{
    AnswerError, CONNECTION_ATTRIBUTES, MAX_ROUTERS, NODE_ATTRIBUTES, READER_CONTAINER_PREFIX,
    ROUTER_ATTRIBUTES, RouterView,
};

/// The entity types asked for: the router, its routing table, its connections.
pub const ENTITIES: [&str; 3] = [
    "org.apache.qpid.dispatch.router",
    "org.apache.qpid.dispatch.router.node",
    "org.apache.qpid.dispatch.connection",
];
/// Rows asked for in one query (`count`), and the most an answer may hold.
pub const PAGE_ROWS: usize = MAX_ROWS;
/// Connections read of one router at most: an edge router with this many clients is read
/// whole in 128 pages; beyond, the rest are not counted.
pub const MAX_CONNECTION_ROWS: usize = 32 * 1024;
/// How long closing a connection that answered may take before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// Why a router could not be read. Its text is at most a few hundred bytes whatever the
/// router sent (router text is cut to [`MAX_TEXT`] bytes).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Nothing within the time allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The AMQP connection, session or a link failed (refused, closed, a protocol error).
    #[error("AMQP: {0}")]
    Amqp(String),
    /// What the router sent was refused before it was decoded ([`super::wire`]).
    #[error("refused what the router sent: {0}")]
    Refused(String),
    /// The router answered a request with a status other than 200.
    #[error("QUERY {entity} answered {status}: {description}")]
    Status {
        /// The entity type asked for.
        entity: &'static str,
        /// `statusCode`.
        status: i64,
        /// `statusDescription`, cut to [`MAX_TEXT`] bytes.
        description: String,
    },
    /// The router refused a write ([`super::links`], [`super::live`]): a status other than
    /// 201 (`CREATE`) or 204 (`DELETE`).
    #[error("{operation} {entity} {name} answered {status}: {description}")]
    Write {
        /// `CREATE` or `DELETE`.
        operation: &'static str,
        /// The entity's section name (`connector`, `address`, ...).
        entity: &'static str,
        /// The entity's name.
        name: String,
        /// `statusCode`.
        status: i64,
        /// `statusDescription`, cut to [`MAX_TEXT`] bytes.
        description: String,
    },
    /// An answer that is not what qdrouterd 1.19 sends.
    #[error(transparent)]
    Answer(#[from] AnswerError),
    /// This replica no longer leads (its [`Fence`] closed, or its deadline came during a
    /// write): no further write is sent, and none waits past the deadline.
    #[error("not leading: writes to the routers are fenced")]
    Fenced,
    /// The visit stopped (`cause`) after deleting live entities it had not created again:
    /// the router lacks them until the next visit, which comes within
    /// [`crate::reconcile::MESH_RECHECK`] of this read's end (docs/live-configuration.md).
    #[error("{} {HALF_APPLIED} ({}): the visit stopped: {cause}", missing.len(), named(missing))]
    HalfApplied {
        /// What the router lacks, `<entity> <name>` (names cut to [`MAX_TEXT`] bytes).
        missing: Vec<String>,
        /// Why the visit stopped.
        cause: Box<ReadError>,
    },
}

/// What the text of [`ReadError::HalfApplied`] says after the count: how the reader tells
/// an interrupted visit among the routers that did not answer, to visit it again soon.
pub const HALF_APPLIED: &str = "live entities missing until the next visit";

/// At most four of `missing`, then how many more.
fn named(missing: &[String]) -> String {
    let mut out: Vec<String> = missing.iter().take(4).cloned().collect();
    if missing.len() > 4 {
        out.push(format!("and {} more", missing.len() - 4));
    }
    out.join(", ")
}

/// The live entities a visit deleted and has not created again (yet): what the router
/// lacks should the visit stop there. Kept outside the visit's future, so a visit cut by
/// its deadline or its connection still tells ([`ReadError::HalfApplied`]).
#[derive(Debug, Default)]
pub struct Missing(std::sync::Mutex<Vec<(Kind, String)>>);

impl Missing {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Kind, String)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deleted(&self, kind: Kind, name: &str) {
        self.lock().push((kind, name.to_string()));
    }

    fn created(&self, kind: Kind, name: &str) {
        self.lock().retain(|(k, n)| !(*k == kind && n == name));
    }

    /// `e`, or, when the visit had deleted entities it had not created again,
    /// [`ReadError::HalfApplied`] naming them.
    fn explain(&self, e: ReadError) -> ReadError {
        let missing = std::mem::take(&mut *self.lock());
        if missing.is_empty() || matches!(e, ReadError::HalfApplied { .. }) {
            return e;
        }
        let missing =
            missing.into_iter().map(|(k, n)| format!("{} {}", k.entity(), cut(n, MAX_TEXT))).collect();
        ReadError::HalfApplied { missing, cause: Box::new(e) }
    }
}

/// The leadership term's fence ([`crate::fence`]), shared with the API client's.
pub use crate::fence::Fence;

fn amqp(e: impl std::fmt::Debug) -> ReadError {
    ReadError::Amqp(cut(format!("{e:?}"), MAX_TEXT))
}

/// Reads one router over `stream` within `timeout` (connection, queries, the writes of
/// `linking` when given, and close): its [`RouterView`]. `reader` tells the connection
/// apart in the router's own list (container id `<READER_CONTAINER_PREFIX>-<reader>`), so
/// it is not counted as a client. Its writes are not fenced: the controller reads through
/// [`observe`], whose [`Plan::fence`] stops them when its leadership term ends.
///
/// # Errors
/// [`ReadError`]: the time ran out, the AMQP exchange failed, what the router sent was
/// refused, a query or a write was refused, or an answer was malformed.
pub async fn read_router<S>(
    stream: S,
    reader: &str,
    timeout: Duration,
    linking: Option<&Linking>,
    live: Option<&Live>,
) -> Result<RouterView, ReadError>
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let deadline = Instant::now() + timeout;
    let missing = Missing::default();
    let writes = Writes { linking, live, fence: None, missing: &missing, checked: None };
    let visits =
        tokio::time::timeout_at(deadline, read_through(stream, reader, deadline, timeout, &writes, &[]));
    let first = match visits.await {
        Ok(visits) => visits.first,
        Err(_) => Err(ReadError::Timeout(timeout)),
    };
    first.map_err(|e| missing.explain(e))
}

/// What a visit writes, and the fence its writes pass.
struct Writes<'a> {
    linking: Option<&'a Linking>,
    live: Option<&'a Live>,
    /// `None`: not fenced ([`read_router`]).
    fence: Option<&'a Fence>,
    /// What the visit deleted and has not created again.
    missing: &'a Missing,
    /// An earlier whole read of the live entities, and how long it may be relied on
    /// ([`Target::checked`], [`Plan::recheck`]); `None`: they are read.
    checked: Option<(live::Checked, Duration)>,
}

/// A router asked through the connection of another whose routing table lists it: its
/// management node addressed over the mesh, `_topo/0/<id>/$management`, as `qdstat -r`
/// asks it (qpid-dispatch 1.19, `management/client.py`).
struct Routed<'a> {
    /// Its router id (the pod's name).
    id: &'a str,
    writes: Writes<'a>,
}

/// What one connection read: the router it was made to, then each router asked through
/// it (`None`: not asked, as the first router's routing table does not list it, or the
/// connection stopped before it).
struct Visits {
    first: Result<RouterView, ReadError>,
    routed: Vec<Option<Result<RouterView, ReadError>>>,
}

/// Reads the router at the end of `stream` until `deadline` (`timeout` after the start),
/// then, on the same connection, each of `routed` that its routing table lists, one after
/// another, `timeout` each; the first of them that fails ends the connection. Bytes are
/// guarded for the whole connection ([`Guarded`]), with the budget of one read per router
/// and a deadline that allows each its `timeout`; a refusal is the error of the visit it
/// came in.
async fn read_through<S>(
    stream: S,
    reader: &str,
    deadline: Instant,
    timeout: Duration,
    first: &Writes<'_>,
    routed: &[Routed<'_>],
) -> Visits
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let others = u32::try_from(routed.len()).unwrap_or(u32::MAX);
    let backstop = deadline + timeout.saturating_mul(others);
    let verdict = Verdict::default();
    let guarded = Guarded::new(stream, backstop, verdict.clone())
        .with_budget(READ_BUDGET.saturating_mul(u64::from(others) + 1));
    let mut out =
        Visits { first: Err(ReadError::Timeout(timeout)), routed: routed.iter().map(|_| None).collect() };
    // The visit in progress (0 the first router's, i + 1 `routed[i]`'s) and its deadline.
    let mut at = (0, deadline);
    let refused = tokio::select! {
        () = exchange(guarded, reader, deadline, timeout, first, routed, &mut out, &mut at) => verdict.refused(),
        // A refusal ends the connection at once, whether or not the client notices it.
        why = verdict.wait() => Some(why),
    };
    if let Some(why) = refused {
        // Past its deadline, the visit timed out, whatever the guard said of it.
        let (visit, deadline) = at;
        let error = || match Instant::now() >= deadline {
            true => ReadError::Timeout(timeout),
            false => ReadError::Refused(why.clone()),
        };
        let current = if visit == 0 { Some(&mut out.first) } else { out.routed[visit - 1].as_mut() };
        match current {
            Some(Err(ReadError::Fenced) | Ok(_)) => {}
            Some(r @ Err(_)) => *r = Err(error()),
            None => out.routed[visit - 1] = Some(Err(error())),
        }
    }
    out
}

/// One `QUERY` of `entity` for `attributes`, rows `offset..offset + count`.
struct Query {
    entity: &'static str,
    attributes: &'static [&'static str],
    offset: usize,
    count: usize,
}

/// Every row of `entity` for `attributes`, up to `max_rows`, asked a page at a time
/// ([`Links::pages`]).
struct Listing {
    entity: &'static str,
    attributes: &'static [&'static str],
    max_rows: usize,
}

/// The routing table's listing: every router the mesh reaches, and one more to see a mesh
/// over [`MAX_ROUTERS`].
const NODES: Listing =
    Listing { entity: ENTITIES[1], attributes: &NODE_ATTRIBUTES, max_rows: MAX_ROUTERS + 1 };
/// The connections' listing.
const CONNECTIONS: Listing =
    Listing { entity: ENTITIES[2], attributes: &CONNECTION_ATTRIBUTES, max_rows: MAX_CONNECTION_ROWS };
/// The connectors' listing (the operator's inter-router connectors among them).
const CONNECTORS: Listing = Listing {
    entity: linking::ENTITY,
    attributes: &linking::ATTRIBUTES,
    max_rows: linking::MAX_CONNECTOR_ROWS,
};

impl Listing {
    /// The page of the listing from row `offset` (at most [`PAGE_ROWS`] rows, none past
    /// `max_rows`).
    fn page(&self, offset: usize) -> Query {
        let count = PAGE_ROWS.min(self.max_rows.saturating_sub(offset));
        Query { entity: self.entity, attributes: self.attributes, offset, count }
    }
}

impl Query {
    /// The entity type's last name (`connection`), as errors name it.
    fn short(&self) -> &'static str {
        self.entity.rsplit('.').next().unwrap_or(self.entity)
    }

    /// The request (its properties are set when it is sent: [`Links::request`]).
    fn message(&self) -> Message<fe2o3_amqp::types::messaging::AmqpValue<Value>> {
        let count = i64::try_from(self.count).unwrap_or(i64::MAX);
        let offset = i64::try_from(self.offset).unwrap_or(i64::MAX);
        Message::builder()
            .application_properties(
                ApplicationProperties::builder()
                    .insert("operation", "QUERY")
                    .insert("type", "org.amqp.management")
                    .insert("entityType", self.entity)
                    .insert("name", "self")
                    .insert("count", count)
                    .insert("offset", offset)
                    .build(),
            )
            .value(Value::Map(OrderedMap::from_iter([(
                Value::from("attributeNames"),
                Value::List(self.attributes.iter().map(|a| Value::from(*a)).collect()),
            )])))
            .build()
    }

    /// The table of `answer`, an answer to this query.
    ///
    /// # Errors
    /// [`ReadError::Status`] for a status other than 200; an [`AnswerError`] for a body
    /// that is not an `amqp-value`.
    fn table(&self, answer: Delivery<Body<Table>>) -> Result<Table, ReadError> {
        let (status, description) = status_of(&answer);
        if status != 200 {
            return Err(ReadError::Status { entity: self.entity, status, description });
        }
        match answer.into_body() {
            Body::Value(v) => Ok(v.0),
            _ => Err(AnswerError::new(self.short(), "the answer is not an amqp-value").into()),
        }
    }
}

/// The request id an answer carries back (its correlation id `q<N>`); `None`: none, or
/// not one of ours.
fn answered<T>(answer: &Delivery<T>) -> Option<u64> {
    match answer.message().properties.as_ref()?.correlation_id.as_ref()? {
        MessageId::String(s) => s.strip_prefix('q')?.parse().ok(),
        _ => None,
    }
}

struct Links {
    requests: Sender,
    replies: Receiver,
    reply_to: String,
    next_id: u64,
    /// Checked before every write, whose answer is not awaited past its deadline.
    fence: Option<Fence>,
}

/// The `statusCode` and `statusDescription` (cut to [`MAX_TEXT`] bytes) of an answer.
fn status_of<T>(answer: &Delivery<T>) -> (i64, String) {
    let props = answer.message().application_properties.as_ref();
    let get = |k: &str| props.and_then(|p| p.0.get(k));
    let status = match get("statusCode") {
        Some(SimpleValue::Int(v)) => i64::from(*v),
        Some(SimpleValue::Long(v)) => *v,
        Some(SimpleValue::Uint(v)) => i64::from(*v),
        _ => 0,
    };
    let description = match get("statusDescription") {
        Some(SimpleValue::String(s)) => s.clone(),
        Some(_) => "a statusDescription that is not a string".into(),
        None => "no statusDescription".into(),
    };
    (status, cut(description, MAX_TEXT))
}

impl Links {
    /// Sends `request` (its properties are set here) and takes the answer, checked to be
    /// the answer to it; `what` names the request in an error.
    async fn send<T>(
        &mut self,
        request: Message<fe2o3_amqp::types::messaging::AmqpValue<Value>>,
        what: &'static str,
    ) -> Result<Delivery<T>, ReadError>
    where
        T: for<'de> fe2o3_amqp::types::messaging::FromBody<'de> + Send,
    {
        self.replies.set_credit(1).await.map_err(amqp)?;
        let id = self.request(request).await?;
        let answer: Delivery<T> = self.answer().await?;
        if answered(&answer) != Some(id) {
            return Err(AnswerError::new(what, "an answer to another request").into());
        }
        Ok(answer)
    }

    /// Sends `request`, pre-settled, with its properties set here: its id.
    async fn request(
        &mut self,
        mut request: Message<fe2o3_amqp::types::messaging::AmqpValue<Value>>,
    ) -> Result<u64, ReadError> {
        let id = self.next_id;
        self.next_id += 1;
        request.properties = Some(
            Properties::builder()
                .reply_to(self.reply_to.clone())
                .message_id(id)
                // A string: qdrouterd's C agent copies the correlation id as it is, and its
                // Python agent (router.node) echoes it through Proton's Python binding,
                // which turns a ulong into an int, which is no valid id.
                .correlation_id(format!("q{id}"))
                .build(),
        );
        self.requests.send(request).await.map_err(amqp)?;
        Ok(id)
    }

    /// The next answer, settled (qdrouterd sends a management answer pre-settled, so this
    /// sends nothing then).
    async fn answer<T>(&mut self) -> Result<Delivery<T>, ReadError>
    where
        T: for<'de> fe2o3_amqp::types::messaging::FromBody<'de> + Send,
    {
        let answer: Delivery<T> = self.replies.recv().await.map_err(amqp)?;
        self.replies.accept(&answer).await.map_err(amqp)?;
        Ok(answer)
    }

    /// Asks every query of `queries` at once (one credit each, then the requests, then the
    /// answers in whatever order the router gives them: qdrouterd answers `router.node`
    /// from its Python agent and the rest from its C agent): their tables, in the order of
    /// `queries`. One round trip instead of one a query.
    ///
    /// # Errors
    /// As [`Links::ask`], for the first answer to arrive that is refused (each is decoded as
    /// it arrives, so a read holds the tables of the round and at most one answer more), or
    /// an answer that answers none of them or one twice.
    async fn ask_all(&mut self, queries: &[Query]) -> Result<Vec<Table>, ReadError> {
        let credit = u32::try_from(queries.len()).unwrap_or(u32::MAX);
        self.replies.set_credit(credit).await.map_err(amqp)?;
        let first = self.next_id;
        for q in queries {
            self.request(q.message()).await?;
        }
        let mut tables: Vec<Option<Table>> = queries.iter().map(|_| None).collect();
        for _ in queries {
            let answer: Delivery<Body<Table>> = self.answer().await?;
            let i = (answered(&answer).and_then(|id| id.checked_sub(first)))
                .and_then(|i| usize::try_from(i).ok())
                .filter(|i| tables.get(*i).is_some_and(Option::is_none))
                .ok_or_else(|| AnswerError::new("query", "an answer to another request"))?;
            tables[i] = Some(queries[i].table(answer)?);
        }
        Ok(tables.into_iter().map(Option::unwrap_or_default).collect())
    }

    async fn ask(&mut self, q: &Query) -> Result<Table, ReadError> {
        let answer: Delivery<Body<Table>> = self.send(q.message(), q.short()).await?;
        q.table(answer)
    }

    /// `CREATE`s entity `name` of `kind` with `attributes` (answered 201) on the router.
    async fn create<'k>(
        &mut self,
        kind: Kind,
        name: &str,
        attributes: impl Iterator<Item = (&'k str, &'k Attribute)>,
    ) -> Result<(), ReadError> {
        let attributes = attributes.map(|(k, v)| {
            let v = match v {
                Attribute::Text(t) => Value::from(t.as_str()),
                Attribute::Bool(b) => Value::Bool(*b),
                Attribute::Int(i) => Value::Long(*i),
            };
            (Value::from(k), v)
        });
        self.write(kind, "CREATE", name, Value::Map(OrderedMap::from_iter(attributes)), 201).await
    }

    /// `DELETE`s entity `name` of `kind` (answered 204) on the router.
    async fn delete(&mut self, kind: Kind, name: &str) -> Result<(), ReadError> {
        self.write(kind, "DELETE", name, Value::Null, 204).await
    }

    async fn write(
        &mut self,
        kind: Kind,
        operation: &'static str,
        name: &str,
        body: Value,
        ok: i64,
    ) -> Result<(), ReadError> {
        let request = Message::builder()
            .application_properties(
                ApplicationProperties::builder()
                    .insert("operation", operation)
                    .insert("type", kind.management_type())
                    .insert("name", name)
                    .build(),
            )
            .value(body)
            .build();
        // The answer's body (the entity's attributes) is read as one bounded cell and dropped.
        let answer: Delivery<Body<Cell>> = match &self.fence {
            None => self.send(request, kind.entity()).await?,
            Some(fence) => {
                // One writer: nothing is sent once the term is over, and no answer is
                // awaited past its end (the next leader may be writing by then).
                let until = fence.open_until().ok_or(ReadError::Fenced)?;
                tokio::time::timeout_at(until, self.send(request, kind.entity()))
                    .await
                    .map_err(|_| ReadError::Fenced)??
            }
        };
        let (status, description) = status_of(&answer);
        if status != ok {
            return Err(ReadError::Write {
                operation,
                entity: kind.entity(),
                name: cut(name.to_string(), MAX_TEXT),
                status,
                description,
            });
        }
        Ok(())
    }

    /// Every live entity the router holds ([`live::Kind::ALL`]), at most
    /// [`live::MAX_HELD_ROWS`] of each kind.
    async fn held(&mut self) -> Result<Vec<Held>, ReadError> {
        let (mut held, mut bytes) = (Vec::new(), 0);
        for kind in Kind::ALL {
            let listing = Listing {
                entity: kind.management_type(),
                attributes: kind.attributes(),
                max_rows: live::MAX_HELD_ROWS,
            };
            self.pages(&listing, |t| live::add_held(kind, t, &mut held, &mut bytes)).await?;
        }
        Ok(held)
    }

    /// Brings the router's live entities to `want` (docs/live-configuration.md, "One visit
    /// to a router"): reads them, writes the [`live::plan`], reads them back; writes
    /// nothing while a connector it deletes has a connection attempt in flight
    /// ([`live::Plan::busy`], `open` the router's open outgoing connections). A refused
    /// write ends the writes and undoes the visit's: what it created is deleted (auto-links
    /// first) and what it deleted is created again as the router read it back (connectors
    /// first), so the router keeps its old entities; the refusal is in the [`Outcome`], not
    /// an error. `missing` follows what the visit deleted and has not created again, for a
    /// visit that stops half way ([`ReadError::HalfApplied`]).
    ///
    /// # Errors
    /// [`ReadError`] when a query fails or a write gets no answer (the visit's time ran
    /// out, the connection failed).
    async fn apply(
        &mut self,
        want: &Live,
        missing: &Missing,
        open: &std::collections::BTreeSet<String>,
    ) -> Result<Outcome, ReadError> {
        let held = self.held().await?;
        let keep = |h: &Held| live::keeps(&want.keep, h);
        let plan = live::plan(&want.desired, &held, &keep);
        let mut outcome = Outcome {
            hash: want.hash.clone(),
            applied: plan.is_empty(),
            created: 0,
            deleted: 0,
            refused: None,
            deferred: plan.busy(open),
            checked: None,
        };
        if plan.is_empty() || outcome.deferred > 0 {
            return Ok(outcome);
        }
        let mut deleted: Vec<&Held> = Vec::new();
        let mut created: Vec<(Kind, &str)> = Vec::new();
        for h in &plan.deletes {
            match self.delete(h.kind, &h.name).await {
                Ok(()) => {
                    missing.deleted(h.kind, &h.name);
                    deleted.push(h);
                }
                Err(e @ ReadError::Write { .. }) => {
                    outcome.refused = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if outcome.refused.is_none() {
            for d in &plan.creates {
                let attributes = d.attributes.iter().map(|(k, v)| (*k, v));
                match self.create(d.kind, &d.name, attributes).await {
                    Ok(()) => {
                        missing.created(d.kind, &d.name);
                        created.push((d.kind, &d.name));
                    }
                    Err(e @ ReadError::Write { .. }) => {
                        outcome.refused = Some(e.to_string());
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if outcome.refused.is_some() {
            // The visit is undone: what it created goes (auto-links first, so nothing
            // names a connector that is going), then what it deleted comes back
            // (connectors first), as the router read it. (A connector created in this visit
            // may have its first attempt in flight: deleting it is the one delete not guarded
            // by `Plan::busy`, left because it needs a refusal in the same visit.)
            let replaced = |kind: Kind, name: &str| deleted.iter().any(|h| h.kind == kind && h.name == name);
            for (kind, name) in created.iter().rev() {
                match self.delete(*kind, name).await {
                    // Taking back a new entity leaves nothing missing; a replacement's old
                    // one is missing until it comes back below.
                    Ok(()) if replaced(*kind, name) => missing.deleted(*kind, name),
                    Ok(()) => {}
                    Err(e @ ReadError::Write { .. }) => {
                        tracing::warn!(entity = kind.entity(), %name, error = %e, "could not take back an entity after a refused write");
                    }
                    Err(e) => return Err(e),
                }
            }
            deleted.sort_by_key(|h| h.kind);
            for h in &deleted {
                let attributes = h.attributes();
                match self.create(h.kind, &h.name, attributes.iter().map(|(k, v)| (*k, v))).await {
                    Ok(()) => missing.created(h.kind, &h.name),
                    Err(e @ ReadError::Write { .. }) => {
                        tracing::warn!(entity = h.kind.entity(), name = %h.name, error = %e, "could not put back an entity after a refused write");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        outcome.deleted = deleted.len();
        outcome.created = created.len();
        let after = self.held().await?;
        outcome.applied = outcome.refused.is_none() && live::plan(&want.desired, &after, &keep).is_empty();
        Ok(outcome)
    }

    /// Every page of `entity` (up to `max_rows` rows), each handed to `add`, which returns
    /// the rows it held.
    async fn pages(
        &mut self,
        listing: &Listing,
        add: impl FnMut(&Table) -> Result<usize, AnswerError>,
    ) -> Result<(), ReadError> {
        self.pages_after(None, listing, add).await
    }

    /// [`Links::pages`], the first page (`listing.page(0)`) already asked for when `first`
    /// holds its answer.
    async fn pages_after(
        &mut self,
        mut first: Option<Table>,
        listing: &Listing,
        mut add: impl FnMut(&Table) -> Result<usize, AnswerError>,
    ) -> Result<(), ReadError> {
        let mut offset = 0;
        while offset < listing.max_rows {
            let query = listing.page(offset);
            let page = match first.take() {
                Some(page) => page,
                None => self.ask(&query).await?,
            };
            let rows = add(&page)?;
            let count = query.count;
            if rows > count {
                return Err(AnswerError::new(query.short(), format!("{rows} rows, {count} asked for")).into());
            }
            if rows < count {
                break;
            }
            offset += rows;
        }
        Ok(())
    }
}

/// `result` of a visit whose time ended at `deadline`: an error after it is the timeout's.
fn in_time(
    result: Result<Result<RouterView, ReadError>, tokio::time::error::Elapsed>,
    deadline: Instant,
    timeout: Duration,
) -> Result<RouterView, ReadError> {
    match result {
        Ok(Err(ReadError::Fenced)) => Err(ReadError::Fenced),
        Ok(Err(_)) | Err(_) if Instant::now() >= deadline => Err(ReadError::Timeout(timeout)),
        Ok(result) => result,
        Err(_) => Err(ReadError::Timeout(timeout)),
    }
}

/// The connection of [`read_through`]: each visit's result goes to `out` as it ends, and
/// `at` names the visit in progress.
#[allow(clippy::too_many_arguments)]
async fn exchange<S>(
    stream: S,
    reader: &str,
    deadline: Instant,
    timeout: Duration,
    first: &Writes<'_>,
    routed: &[Routed<'_>],
    out: &mut Visits,
    at: &mut (usize, Instant),
) where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let opened = Connection::builder()
        .container_id(format!("{READER_CONTAINER_PREFIX}-{reader}"))
        .max_frame_size(MAX_FRAME_SIZE)
        .open_with_stream(stream);
    let mut connection = match tokio::time::timeout_at(deadline, opened).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(e)) => return out.first = in_time(Ok(Err(amqp(e))), deadline, timeout),
        Err(elapsed) => return out.first = in_time(Err(elapsed), deadline, timeout),
    };
    let opened = async {
        let mut session = Session::begin(&mut connection).await.map_err(amqp)?;
        let replies = Receiver::builder()
            .name("replies")
            .source(Source::builder().dynamic(true).build())
            .max_message_size(MAX_MESSAGE_SIZE as u64)
            // Credit is given for the answers awaited, and no more ([`Links::ask_all`]): one
            // flow a batch of requests, and a router cannot send more than it was asked.
            .credit_mode(CreditMode::Manual)
            .attach(&mut session)
            .await
            .map_err(amqp)?;
        let reply_to = (replies.source().as_ref().and_then(|s| s.address.clone()))
            .ok_or_else(|| ReadError::Amqp("the router gave the reply link no address".into()))?;
        let requests = request_link(&mut session, "requests".into(), "$management".into()).await?;
        let fence = first.fence.cloned();
        let mut links = Links { requests, replies, reply_to: cut(reply_to, MAX_TEXT), next_id: 0, fence };
        let view = visit(&mut links, first).await?;
        Ok((view, links, session))
    };
    let (mut links, mut session) = match tokio::time::timeout_at(deadline, opened).await {
        Ok(Ok((view, links, session))) => {
            out.first = Ok(view);
            (links, session)
        }
        Ok(Err(e)) => {
            out.first = in_time(Ok(Err(e)), deadline, timeout);
            let _ = tokio::time::timeout(CLOSE_GRACE, connection.close()).await;
            return;
        }
        Err(elapsed) => return out.first = in_time(Err(elapsed), deadline, timeout),
    };
    let reaches = match &out.first {
        Ok(view) => view.reaches.clone(),
        Err(_) => Default::default(),
    };
    // The request links of the routers asked through this one, kept attached until the close.
    let mut senders = Vec::new();
    for (i, r) in routed.iter().enumerate() {
        if !reaches.contains(r.id) {
            continue;
        }
        let deadline = Instant::now() + timeout;
        *at = (i + 1, deadline);
        let asked = async {
            let address = format!("_topo/0/{}/$management", r.id);
            let sender = request_link(&mut session, format!("requests-{i}"), address).await?;
            senders.push(std::mem::replace(&mut links.requests, sender));
            let view = visit(&mut links, &r.writes).await?;
            if *view.id != *r.id {
                let what = format!("asked for router {} through the mesh, {} answered", r.id, view.id);
                return Err(ReadError::Amqp(cut(what, MAX_TEXT)));
            }
            Ok(RouterView { routed: true, ..view })
        };
        let result = in_time(tokio::time::timeout_at(deadline, asked).await, deadline, timeout);
        let failed = result.is_err();
        out.routed[i] = Some(result);
        if failed {
            // What comes next on this connection may answer the request that failed.
            break;
        }
    }
    // The connection is closed with its session and links still attached: closing it ends
    // them (AMQP 1.0, 2.4.3), and qdrouterd frees them with it. Detaching each link and
    // ending the session first took four more round trips a visit (a sixth of its CPU).
    let _ = tokio::time::timeout(CLOSE_GRACE, connection.close()).await;
    drop((links, session, senders));
}

/// The link requests go on, to `address`: pre-settled, so the router sends no disposition
/// of its own for a request (its answer is the outcome that counts, and a request that gets
/// none times out as before).
async fn request_link(
    session: &mut fe2o3_amqp::session::SessionHandle<()>,
    name: String,
    address: String,
) -> Result<Sender, ReadError> {
    let builder = Sender::builder().name(name).target(address);
    builder.sender_settle_mode(SenderSettleMode::Settled).attach(session).await.map_err(amqp)
}

/// One visit to the router `links` ask (its queries, then the writes of `writes`): its view.
async fn visit(links: &mut Links, writes: &Writes<'_>) -> Result<RouterView, ReadError> {
    let (linking, live) = (writes.linking, writes.live);
    // The first page of each query at once (a router at rest needs no other): the router
    // entity (one row, two asked, to see a second), its routing table, its connections,
    // and its connectors when they are written.
    let mut first = vec![
        Query { entity: ENTITIES[0], attributes: &ROUTER_ATTRIBUTES, offset: 0, count: 2 },
        NODES.page(0),
        CONNECTIONS.page(0),
    ];
    if linking.is_some() {
        first.push(CONNECTORS.page(0));
    }
    let mut pages = links.ask_all(&first).await?.into_iter();
    let me = pages.next().unwrap_or_default();
    let mut view = RouterView::of_router(&me)?;
    let uptime = RouterView::uptime_of(&me).map(|u| (u, std::time::Instant::now()));
    links.pages_after(pages.next(), &NODES, |t| view.add_nodes(t)).await?;
    let mut open = std::collections::BTreeSet::new();
    links
        .pages_after(pages.next(), &CONNECTIONS, |t| {
            super::open_outgoing(t, &mut open);
            view.add_connections(t)
        })
        .await?;
    if let Some(wanted) = linking {
        let mut held = Vec::new();
        (links.pages_after(pages.next(), &CONNECTORS, |t| linking::add_connectors(t, &open, &mut held)))
            .await?;
        let (deletes, creates) = linking::changes(&wanted.connectors, &held, &wanted.keep, &wanted.unready);
        view.deferred += linking::deferred(&wanted.connectors, &held, &wanted.keep);
        for name in &deletes {
            links.delete(Kind::Connector, name).await?;
        }
        for c in &creates {
            let attributes = c.attributes();
            links.create(Kind::Connector, &c.name, attributes.iter().map(|(k, v)| (*k, v))).await?;
        }
        if !deletes.is_empty() || !creates.is_empty() {
            tracing::info!(router = %view.id, created = creates.len(), deleted = deletes.len(), "inter-router connectors written");
        }
    }
    if let Some(want) = live {
        let outcome = match (writes.checked, uptime) {
            // The same router process, for the same configuration, recently read whole.
            (Some((c, recheck)), Some((up, now))) if c.vouches(up, now, recheck) => Outcome {
                hash: want.hash.clone(),
                applied: true,
                created: 0,
                deleted: 0,
                refused: None,
                deferred: 0,
                checked: Some(c),
            },
            _ => {
                let mut outcome = links.apply(want, writes.missing, &open).await?;
                if outcome.applied {
                    outcome.checked = uptime.and_then(|(up, at)| live::Checked::of(up, at));
                }
                outcome
            }
        };
        view.deferred += outcome.deferred;
        if outcome.created + outcome.deleted > 0 || outcome.refused.is_some() {
            tracing::info!(router = %view.id, created = outcome.created, deleted = outcome.deleted,
                refused = outcome.refused.as_deref().unwrap_or(""), applied = outcome.applied,
                "live entities written");
        }
        view.live = Some(Box::new(outcome));
    }
    Ok(view)
}

/// Why a pod without an IP is not asked ([`Observation::Pending`](super::Observation::Pending)).
pub const NO_IP: &str = "no pod IP yet";
/// Why a pod that is not Ready is not asked.
pub const NOT_READY: &str = "not Ready yet";

/// One router pod to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pod's name (its router id).
    pub pod: String,
    /// `status.podIP`; `None` while it has none.
    pub ip: Option<String>,
    /// Whether the pod is Ready. A pod that is not is not read: it is
    /// [`Observation::Pending`](super::Observation::Pending).
    pub ready: bool,
    /// The operator's inter-router connectors it should hold, written in the same visit
    /// ([`super::links`]); `None`: its connectors are not touched (an edge router, or a
    /// configuration with no inter-router listener).
    pub linking: Option<Linking>,
    /// The live entities it should hold, written in the same visit after the links
    /// ([`super::live`]); `None`: they are not touched (no live entities, or a pod of
    /// another template, which a roll replaces).
    pub live: Option<Live>,
    /// The last whole read of its live entities that found them `live`'s configuration
    /// (the [`Outcome::checked`] of its last visit, when that visit was given the same
    /// hash): a visit to the same router process within [`Plan::recheck`] of it does not
    /// read them again ([`live::Checked::vouches`]). `None`: they are read.
    pub checked: Option<live::Checked>,
}

/// The live entities one router should hold (docs/live-configuration.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// The desired entities ([`live::desired`]), shared by every router of the
    /// Interconnect.
    pub desired: std::sync::Arc<Vec<Desired>>,
    /// Names of the start-up part, never deleted ([`live::keeps`]).
    pub keep: std::sync::Arc<std::collections::BTreeSet<String>>,
    /// The desired configuration's hash (64 hex digits), reported back in the
    /// [`Outcome`].
    pub hash: String,
}

/// The operator's connectors one router should hold ([`super::links`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Linking {
    /// The connectors ([`super::links::desired`]).
    pub connectors: Vec<Connector>,
    /// Connector names of the configuration itself, never deleted whatever their name.
    pub keep: Vec<String>,
    /// Connector names whose peer does not listen yet (its containers are not ready): not
    /// created on this visit, as qdrouterd 1.19 tries a refused connector again only after
    /// 5 s (`server.c`, `try_open_lh`); the read that its readiness wakes creates them. One
    /// it holds already is kept.
    pub unready: Vec<String>,
}

/// How to read the routers of one Interconnect.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// The management port.
    pub port: u16,
    /// The namespace, whose share of `pool` the connections take.
    pub namespace: &'a str,
    /// The connection slots, shared by the whole controller.
    pub pool: &'a super::pool::Pool,
    /// Time allowed for one router once it has a slot (connecting, TLS, queries).
    pub timeout: Duration,
    /// When waiting for a slot ends: routers still waiting then are not read.
    pub deadline: Instant,
    /// TLS (with the controller's client certificate), or plain TCP (tests).
    pub tls: Option<&'a super::management::Tls>,
    /// The leadership term's fence: every `CREATE` and `DELETE` is sent only while it is
    /// open, and its answer awaited no longer ([`ReadError::Fenced`] otherwise), so a
    /// deposed leader stops writing to the routers when it stops writing to the API
    /// server; and every byte of the connections is checked against it again where it
    /// reaches the socket ([`crate::fence::FencedIo`]), so a write queued in the AMQP
    /// client when the process was stopped is not sent after the term. `None`: not
    /// fenced (tests, tools).
    pub fence: Option<&'a Fence>,
    /// How long a whole read of a router's live entities is relied on
    /// ([`Target::checked`]; `--live-recheck`, [`live::RECHECK`] by default).
    pub recheck: Duration,
}

/// Reads every router in `targets` as `plan` says: pod → what it answered. A pod without
/// an IP or not Ready is [`Observation::Pending`](super::Observation::Pending), without a
/// connection. The first of the others is read on a connection of its own, and through
/// that connection every other router its routing table lists ([`RouterView::routed`]):
/// one TLS handshake and one AMQP connection for a linked mesh, as `qdstat -r` asks a
/// router over the mesh. Those it does not list, and those asked through it that did not
/// answer in time or whose request link failed, are then read each on a connection of its
/// own, at once. A router for which no slot was free by the deadline, a refused or
/// timed-out connection and any [`ReadError`] are `Unreachable` with the error's text (at
/// most a few hundred bytes). Never retries otherwise: the caller reads again at its next
/// trigger.
pub async fn observe(
    targets: &[Target],
    plan: &Plan<'_>,
) -> std::collections::BTreeMap<String, super::Observation> {
    use super::Observation;
    let mut seen = std::collections::BTreeMap::new();
    let mut ready = Vec::new();
    for t in targets {
        match (&t.ip, t.ready) {
            (None, _) => drop(seen.insert(t.pod.clone(), Observation::Pending(NO_IP.into()))),
            (Some(_), false) => drop(seen.insert(t.pod.clone(), Observation::Pending(NOT_READY.into()))),
            (Some(ip), true) => ready.push((t, ip.as_str())),
        }
    }
    let missing: Vec<Missing> = ready.iter().map(|_| Missing::default()).collect();
    let writes = |i: usize| Writes {
        linking: ready[i].0.linking.as_ref(),
        live: ready[i].0.live.as_ref(),
        fence: plan.fence,
        missing: &missing[i],
        checked: ready[i].0.checked.map(|c| (c, plan.recheck)),
    };
    let seen_as = |i: usize, result: Result<RouterView, ReadError>| match result {
        Ok(view) => Observation::Answered(view),
        Err(e) => Observation::Unreachable(cut(missing[i].explain(e).to_string(), 2 * MAX_TEXT)),
    };
    let mut alone = Vec::new();
    if let Some(((first, ip), rest)) = ready.split_first() {
        let routed: Vec<Routed<'_>> = (rest.iter().enumerate())
            .map(|(j, (t, _))| Routed { id: &t.pod, writes: writes(j + 1) })
            .collect();
        match connect(plan, ip, &first.pod, &writes(0), &routed).await {
            Err(why) => {
                seen.insert(first.pod.clone(), Observation::Unreachable(why));
                alone.extend(1..ready.len());
            }
            Ok(visits) => {
                seen.insert(first.pod.clone(), seen_as(0, visits.first));
                for (j, result) in visits.routed.into_iter().enumerate() {
                    match result {
                        // Not listed, or the mesh did not carry the request: asked directly.
                        None | Some(Err(ReadError::Timeout(_) | ReadError::Amqp(_))) => alone.push(j + 1),
                        Some(result) => drop(seen.insert(rest[j].0.pod.clone(), seen_as(j + 1, result))),
                    }
                }
            }
        }
    }
    let reads = alone.into_iter().map(|i| {
        let (t, ip) = ready[i];
        let (writes, seen_as) = (writes(i), &seen_as);
        async move {
            let o = match connect(plan, ip, &t.pod, &writes, &[]).await {
                Err(why) => Observation::Unreachable(why),
                Ok(visits) => seen_as(i, visits.first),
            };
            (t.pod.clone(), o)
        }
    });
    seen.extend(futures::future::join_all(reads).await);
    seen
}

/// Reads the router `pod` at `ip` on a connection of its own (a slot of `plan.pool`, TCP,
/// TLS when `plan.tls`), and `routed` through it ([`read_through`]).
///
/// # Errors
/// Why it was not read when no slot was free by `plan.deadline`.
async fn connect(
    plan: &Plan<'_>,
    ip: &str,
    pod: &str,
    first: &Writes<'_>,
    routed: &[Routed<'_>],
) -> Result<Visits, String> {
    let Some(_slot) = plan.pool.acquire(plan.namespace, plan.deadline).await else {
        return Err(
            "not read: no connection slot was free in time (other routers of this namespace are slow)".into(),
        );
    };
    let deadline = Instant::now() + plan.timeout;
    let port = plan.port;
    let attempt = async {
        let stream = tokio::net::TcpStream::connect((ip, port))
            .await
            .map_err(|e| ReadError::Amqp(format!("connecting to {ip}:{port}: {e}")))?;
        // Requests and answers alternate: no waiting for delayed acknowledgements.
        let _ = stream.set_nodelay(true);
        // Under TLS, next to the socket: no byte leaves once the term is over, however long
        // it waited in the AMQP client's tasks or in TLS's buffer (`crate::fence::FencedIo`).
        let stream = crate::fence::FencedIo::new(stream, plan.fence);
        Ok(match plan.tls {
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let stream = connector
                    .connect(tls.server_name.clone(), stream)
                    .await
                    .map_err(|e| ReadError::Amqp(cut(format!("TLS with {ip}:{port}: {e}"), MAX_TEXT)))?;
                read_through(stream, pod, deadline, plan.timeout, first, routed).await
            }
            None => read_through(stream, pod, deadline, plan.timeout, first, routed).await,
        })
    };
    // Boxed: the exchange's state (TLS, the AMQP connection, its requests) takes a few KB,
    // and a read waiting for a slot would hold room for it inline. At 2,000
    // Interconnects read at once that was 23 MB of futures waiting (heaptrack).
    let others = u32::try_from(routed.len()).unwrap_or(u32::MAX);
    let backstop = deadline + plan.timeout.saturating_mul(others);
    let unread = || routed.iter().map(|_| None).collect();
    let visits = match tokio::time::timeout_at(backstop, Box::pin(attempt)).await {
        Ok(Ok(visits)) => visits,
        Ok(Err(e)) => Visits { first: in_time(Ok(Err(e)), deadline, plan.timeout), routed: unread() },
        Err(_) => Visits { first: Err(ReadError::Timeout(plan.timeout)), routed: unread() },
    };
    Ok(fenced(visits, plan.fence))
}

/// `visits` with every failed visit [`ReadError::Fenced`] once `fence` is closed: what
/// failed then is the guard's refusal of the connection's bytes (or came after the term),
/// not the router.
fn fenced(mut visits: Visits, fence: Option<&Fence>) -> Visits {
    if fence.is_some_and(|f| f.open_until().is_none()) {
        let results = std::iter::once(&mut visits.first).chain(visits.routed.iter_mut().flatten());
        for r in results.filter(|r| r.is_err()) {
            *r = Err(ReadError::Fenced);
        }
    }
    visits
}
