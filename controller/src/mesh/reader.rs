//! Asking one router: an AMQP 1.0 connection (fe2o3-amqp) over a stream the caller opened
//! (plain TCP, or TLS with a client certificate: the design in `docs/mesh-status.md`), three
//! management `QUERY`s on `$management` with replies to a dynamic receiver, then the
//! connection closed. No SASL: a router's listener that verifies client certificates in the
//! TLS handshake needs none.

use std::time::Duration;

use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Message, Properties, Source};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use serde_json::Value as Json;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{AnswerError, READER_CONTAINER_PREFIX, RouterView, router_view};

/// The entity types asked for, in the order [`router_view`] takes them.
pub const ENTITIES: [&str; 3] = [
    "org.apache.qpid.dispatch.router",
    "org.apache.qpid.dispatch.router.node",
    "org.apache.qpid.dispatch.connection",
];

/// Why a router could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Nothing within the time allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The AMQP connection, session or a link failed (refused, closed, a protocol error).
    #[error("AMQP: {0}")]
    Amqp(String),
    /// The router answered a request with a status other than 200.
    #[error("QUERY {entity} answered {status}: {description}")]
    Status {
        /// The entity type asked for.
        entity: &'static str,
        /// `statusCode`.
        status: i64,
        /// `statusDescription`.
        description: String,
    },
    /// An answer that is not what qdrouterd 1.19 sends.
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

fn amqp(e: impl std::fmt::Debug) -> ReadError {
    ReadError::Amqp(format!("{e:?}"))
}

/// Reads one router over `stream` within `timeout` (connection, three queries and close):
/// its [`RouterView`]. `reader` tells the connection apart in the router's own list
/// (container id `<READER_CONTAINER_PREFIX>-<reader>`), so it is not counted as a client.
///
/// # Errors
/// [`ReadError`]: the time ran out, the AMQP exchange failed, a query was refused, or an
/// answer was malformed.
pub async fn read_router<S>(stream: S, reader: &str, timeout: Duration) -> Result<RouterView, ReadError>
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    tokio::time::timeout(timeout, read(stream, reader)).await.map_err(|_| ReadError::Timeout(timeout))?
}

async fn read<S>(stream: S, reader: &str) -> Result<RouterView, ReadError>
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let mut connection = Connection::builder()
        .container_id(format!("{READER_CONTAINER_PREFIX}-{reader}"))
        .open_with_stream(stream)
        .await
        .map_err(amqp)?;
    let answers = async {
        let mut session = Session::begin(&mut connection).await.map_err(amqp)?;
        let mut replies = Receiver::builder()
            .name("replies")
            .source(Source::builder().dynamic(true).build())
            .attach(&mut session)
            .await
            .map_err(amqp)?;
        let reply_to = replies
            .source()
            .as_ref()
            .and_then(|s| s.address.clone())
            .ok_or_else(|| ReadError::Amqp("the router gave the reply link no address".into()))?;
        let mut requests = Sender::attach(&mut session, "requests", "$management").await.map_err(amqp)?;
        let mut answers = Vec::with_capacity(ENTITIES.len());
        for (id, entity) in ENTITIES.iter().enumerate() {
            let request = Message::builder()
                .properties(Properties::builder().reply_to(reply_to.clone()).message_id(id as u64).build())
                .application_properties(
                    ApplicationProperties::builder()
                        .insert("operation", "QUERY")
                        .insert("type", "org.amqp.management")
                        .insert("entityType", *entity)
                        .insert("name", "self")
                        .build(),
                )
                .value(Value::Map(OrderedMap::from_iter([(
                    Value::from("attributeNames"),
                    Value::List(vec![]),
                )])))
                .build();
            requests.send(request).await.map_err(amqp)?;
            let answer: Delivery<Value> = replies.recv().await.map_err(amqp)?;
            replies.accept(&answer).await.map_err(amqp)?;
            let props = answer.message().application_properties.as_ref();
            let get = |k: &str| props.and_then(|p| p.0.get(k));
            let status = match get("statusCode") {
                Some(SimpleValue::Int(v)) => i64::from(*v),
                Some(SimpleValue::Long(v)) => *v,
                Some(SimpleValue::Uint(v)) => i64::from(*v),
                _ => 0,
            };
            if status != 200 {
                let description = match get("statusDescription") {
                    Some(SimpleValue::String(s)) => s.clone(),
                    other => format!("{other:?}"),
                };
                return Err(ReadError::Status { entity, status, description });
            }
            answers.push(to_json(answer.body()));
        }
        let _ = requests.close().await;
        let _ = replies.close().await;
        let _ = session.end().await;
        Ok(answers)
    }
    .await;
    let _ = connection.close().await;
    let answers = answers?;
    Ok(router_view(&answers[0], &answers[1], &answers[2])?)
}

/// An AMQP value as JSON: maps with string keys become objects (other keys are written as
/// their JSON text), lists and arrays become arrays, numbers stay numbers (a float that is
/// not finite becomes `null`), binary becomes an array of bytes, symbols and strings become
/// strings, timestamps become milliseconds since the epoch, anything else its debug text.
pub fn to_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Ubyte(n) => (*n).into(),
        Value::Ushort(n) => (*n).into(),
        Value::Uint(n) => (*n).into(),
        Value::Ulong(n) => (*n).into(),
        Value::Byte(n) => (*n).into(),
        Value::Short(n) => (*n).into(),
        Value::Int(n) => (*n).into(),
        Value::Long(n) => (*n).into(),
        Value::Float(f) => {
            serde_json::Number::from_f64(f64::from(f.into_inner())).map_or(Json::Null, Json::Number)
        }
        Value::Double(f) => serde_json::Number::from_f64(f.into_inner()).map_or(Json::Null, Json::Number),
        Value::Char(c) => Json::String(c.to_string()),
        Value::Timestamp(t) => t.milliseconds().into(),
        Value::String(s) => Json::String(s.clone()),
        Value::Symbol(s) => Json::String(s.0.clone()),
        Value::Binary(b) => Json::Array(b.iter().map(|x| Json::from(*x)).collect()),
        Value::List(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(m) => Json::Object(
            m.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::String(s) => s.clone(),
                        Value::Symbol(s) => s.0.clone(),
                        other => to_json(other).to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        other => Json::String(format!("{other:?}")),
    }
}

/// One router pod to read: its name and, once it has one, its IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pod's name (its router id).
    pub pod: String,
    /// `status.podIP`; `None` while it has none.
    pub ip: Option<String>,
}

/// Reads every router in `targets` at `port` (over TLS with `tls`, else plain TCP), each
/// connection holding a permit of `limit`
/// (shared by every Interconnect the caller reads, so the whole controller keeps to one
/// bound) and each read limited to `timeout` (connecting included): pod → what it answered.
/// A pod without an IP is [`Observation::Unreachable`] `"no pod IP yet"`, without a
/// connection; a refused or timed-out connection and any [`ReadError`] are
/// `Unreachable` with the error's text. Never retries: the caller reads again at its next
/// trigger.
pub async fn observe(
    targets: &[Target],
    port: u16,
    limit: &tokio::sync::Semaphore,
    timeout: Duration,
    tls: Option<&super::management::Tls>,
) -> std::collections::BTreeMap<String, super::Observation> {
    use super::Observation;
    let reads = targets.iter().map(|t| async move {
        let Some(ip) = &t.ip else {
            return (t.pod.clone(), Observation::Unreachable("no pod IP yet".into()));
        };
        let Ok(_permit) = limit.acquire().await else {
            return (t.pod.clone(), Observation::Unreachable("the reader is shutting down".into()));
        };
        let read = async {
            let stream = tokio::net::TcpStream::connect((ip.as_str(), port))
                .await
                .map_err(|e| ReadError::Amqp(format!("connecting to {ip}:{port}: {e}")))?;
            match tls {
                Some(tls) => {
                    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                    let stream = connector
                        .connect(tls.server_name.clone(), stream)
                        .await
                        .map_err(|e| ReadError::Amqp(format!("TLS with {ip}:{port}: {e}")))?;
                    read(stream, &t.pod).await
                }
                None => read(stream, &t.pod).await,
            }
        };
        let o = match tokio::time::timeout(timeout, read).await {
            Ok(Ok(view)) => Observation::Answered(view),
            Ok(Err(e)) => Observation::Unreachable(e.to_string()),
            Err(_) => Observation::Unreachable(ReadError::Timeout(timeout).to_string()),
        };
        (t.pod.clone(), o)
    });
    futures::future::join_all(reads).await.into_iter().collect()
}
