//! Publishing Kubernetes Events (`events.k8s.io/v1`), each occurrence with its own message.
//!
//! kube-runtime's `Recorder` folds every Event with the same type, reason and action on an
//! object into one series that keeps the **first** occurrence's note: after scaling 3 → 5 →
//! 2 a user read "routers scaled from 3 to 5", count 2. This recorder folds only Events
//! whose note is identical too (the API's `series`, as `kubectl describe` shows it: "x2 over
//! 3m"); any other occurrence is a new Event with its own note.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};

/// How long an Event can be continued as a series (as client-go's and kube-runtime's
/// recorders: 6 minutes); a repeat after that is a new Event.
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Longest Event note, in bytes: the API's limit (`events.k8s.io/v1` validation refuses a
/// note over 1,024 bytes, counted in UTF-8).
pub const MAX_NOTE: usize = 1024;

/// `note` cut to at most [`MAX_NOTE`] bytes on a character boundary, ending with `…` when
/// cut.
pub fn fitted_note(note: &str) -> String {
    if note.len() <= MAX_NOTE {
        return note.to_string();
    }
    let mut end = MAX_NOTE - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &note[..end])
}

/// What identifies a series: the object (`uid`), type, reason, action and note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    uid: String,
    warning: bool,
    reason: String,
    action: String,
    note: String,
}

#[derive(Debug, Clone)]
struct Published {
    name: String,
    count: i32,
    last: Instant,
}

/// Publishes Events as the controller `controller` (instance `instance`, the pod name).
/// Clones share their series.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    series: std::sync::Arc<Mutex<HashMap<SeriesKey, Published>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("controller", &self.controller).finish_non_exhaustive()
    }
}

/// What [`Recorder::publish`] does with one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Create a new Event of this name.
    Create(String),
    /// Continue the series of this Event: its count is now `count`.
    Continue { name: String, count: i32 },
}

impl Recorder {
    /// A recorder reporting as `controller` from `instance`.
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        Recorder {
            client,
            controller: controller.into(),
            instance: instance.into(),
            series: std::sync::Arc::default(),
        }
    }

    /// Decides what publishing `ev` on `regarding` at `now` writes, and remembers it.
    pub(crate) fn plan(&self, ev: &Event, regarding: &ObjectReference, now: Instant) -> Write {
        let key = SeriesKey {
            uid: regarding.uid.clone().unwrap_or_default(),
            warning: ev.type_ == EventType::Warning,
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            note: ev.note.clone().unwrap_or_default(),
        };
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        series.retain(|_, p| now.saturating_duration_since(p.last) < SERIES_TTL);
        if let Some(p) = series.get_mut(&key) {
            p.count += 1;
            p.last = now;
            return Write::Continue { name: p.name.clone(), count: p.count };
        }
        let stamp =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let name = format!("{}.{stamp:x}", regarding.name.as_deref().unwrap_or(&self.controller));
        series.insert(key, Published { name: name.clone(), count: 1, last: now });
        Write::Create(name)
    }

    /// Forgets the series of the object with `uid` (deleted).
    pub(crate) fn forget(&self, uid: &str) {
        self.series.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| k.uid != uid);
    }

    /// Forgets the series continued by Event `name` (its create failed, or it is gone):
    /// the next identical note creates a new Event instead of patching one that does not
    /// exist.
    fn drop_series(&self, name: &str) {
        self.series.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, p| p.name != name);
    }

    /// Publishes `ev` on `regarding`: a new Event, or the next count of the series of an
    /// identical one published less than [`SERIES_TTL`] ago. Its note is cut to
    /// [`MAX_NOTE`] bytes ([`fitted_note`]).
    ///
    /// A failed write is retried in the background after each of [`RETRY_DELAYS`] (a notice
    /// such as a CA rotation step must not be lost to one refused request), as the **same**
    /// write: a create keeps its Event's name, so when the API server stored the first
    /// attempt and only failed to answer it (a `504` after its request timeout; the write
    /// completes as "post-timeout activity") the retry meets `409 AlreadyExists` and is
    /// done, and one occurrence is never two Events. A create that fails every attempt
    /// leaves no series behind, and a series whose Event is gone (`404` on its patch) starts
    /// a new Event.
    ///
    /// # Errors
    /// The API server's refusal of the first attempt (later attempts are logged).
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let write = self.plan(ev, regarding, Instant::now());
        let first = self.send(&write, ev, regarding, false).await;
        if first.is_err() {
            let (this, regarding) = (self.clone(), regarding.clone());
            // kube's Event is not Clone.
            let ev = Event {
                type_: ev.type_,
                reason: ev.reason.clone(),
                note: ev.note.clone(),
                action: ev.action.clone(),
                secondary: ev.secondary.clone(),
            };
            tokio::spawn(async move {
                for delay in RETRY_DELAYS {
                    tokio::time::sleep(delay).await;
                    match this.send(&write, &ev, &regarding, true).await {
                        Ok(()) => return,
                        Err(e) => tracing::debug!(error = %e, reason = %ev.reason, "retrying an Event"),
                    }
                }
                if let Write::Create(name) = &write {
                    this.drop_series(name);
                }
                tracing::warn!(reason = %ev.reason, note = ?ev.note, "an Event could not be published: dropped");
            });
        }
        first
    }

    /// One attempt of `write`, planned for `ev` on `regarding`; `again` when an earlier
    /// attempt of it failed (its create may have been stored all the same).
    async fn send(
        &self,
        write: &Write,
        ev: &Event,
        regarding: &ObjectReference,
        again: bool,
    ) -> Result<(), kube::Error> {
        let ns = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &ns);
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        match write {
            Write::Create(name) => {
                let event = K8sEvent {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns),
                        ..Default::default()
                    },
                    action: Some(ev.action.clone()),
                    reason: Some(ev.reason.clone()),
                    note: ev.note.as_deref().map(fitted_note),
                    type_: Some(if ev.type_ == EventType::Warning { "Warning" } else { "Normal" }.into()),
                    event_time: Some(now),
                    regarding: Some(regarding.clone()),
                    related: ev.secondary.clone(),
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Default::default()
                };
                match api.create(&PostParams::default(), &event).await {
                    Ok(_) => Ok(()),
                    // The name is this recorder's own (object name and a nanosecond stamp):
                    // taken means the earlier attempt was stored.
                    Err(kube::Error::Api(e)) if again && e.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Write::Continue { name, count } => {
                let series = EventSeries { count: *count, last_observed_time: now };
                let patch = serde_json::json!({ "series": series });
                match api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        // Deleted (or expired by its TTL) meanwhile: a new Event.
                        self.drop_series(name);
                        let write = self.plan(ev, regarding, Instant::now());
                        Box::pin(self.send(&write, ev, regarding, false)).await
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// When a failed Event write is tried again, after the previous attempt: about half a
/// minute in all, then it is dropped (logged).
pub const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// How long a failed Event write may still be retried after its first attempt: the sum of
/// [`RETRY_DELAYS`] (31 s). A test that waits for an Event on a loaded API server waits at
/// least this long.
pub const RETRY_SPAN: Duration = {
    let mut total = Duration::ZERO;
    let mut i = 0;
    while i < RETRY_DELAYS.len() {
        total = total.saturating_add(RETRY_DELAYS[i]);
        i += 1;
    }
    total
};

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn recorder() -> Recorder {
        // A client that is never called: `plan` is pure.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Recorder::new(kube::Client::try_from(config).unwrap(), "qdr-operator", "pod-0")
    }

    /// A stand-in API server for Events: every create is stored, and the first one is
    /// answered 504 all the same (the API server's own timeout, after which the handler
    /// finishes the write: "post-timeout activity"); a create of a stored name is answered
    /// 409. Returns the client and the names of the creates it received, in order.
    fn timing_out_api() -> (kube::Client, std::sync::Arc<Mutex<Vec<String>>>) {
        use http_body_util::BodyExt;
        let creates = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = creates.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let post = req.method() == http::Method::POST;
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let name = event["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let status = |code: u16, reason: &str| {
                    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": reason, "reason": reason, "code": code});
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(status.to_string().into_bytes()))
                        .unwrap()
                };
                let mut creates = seen.lock().unwrap();
                let response = if !post {
                    status(405, "MethodNotAllowed")
                } else if creates.contains(&name) {
                    creates.push(name);
                    status(409, "AlreadyExists")
                } else {
                    creates.push(name);
                    if creates.len() == 1 {
                        status(504, "Timeout")
                    } else {
                        http::Response::builder()
                            .status(201)
                            .header("content-type", "application/json")
                            .body(kube::client::Body::from(body.to_vec()))
                            .unwrap()
                    }
                };
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (kube::Client::new(service, "default"), creates)
    }

    /// A create the API server timed out on but stored is not stored twice: its retry has
    /// the same name, and the 409 it meets means the first attempt was stored (before, the
    /// retry made a second Event of another name: two Warnings for one occurrence).
    #[tokio::test(start_paused = true)]
    async fn a_create_that_timed_out_but_was_stored_is_not_published_twice() {
        let (client, creates) = timing_out_api();
        let r = Recorder::new(client, "qdr-operator", "pod-0");
        let mesh = ObjectReference {
            name: Some("mesh".into()),
            namespace: Some("ns".into()),
            uid: Some("u1".into()),
            ..Default::default()
        };
        let first = r.publish(&event("MissingSecret", "Secret my-tls does not exist"), &mesh).await;
        assert!(first.is_err_and(|e| e.to_string().contains("Timeout")));
        // Past every retry.
        tokio::time::sleep(RETRY_SPAN + Duration::from_secs(1)).await;
        let creates = creates.lock().unwrap().clone();
        assert_eq!(creates.len(), 2, "the create and one retry: {creates:?}");
        assert_eq!(creates[0], creates[1], "the retry creates the same Event: {creates:?}");
        // The occurrence is remembered: the next identical note continues its series.
        assert!(matches!(
            r.plan(&event("MissingSecret", "Secret my-tls does not exist"), &mesh, Instant::now()),
            Write::Continue { count: 2, .. }
        ));
    }

    #[test]
    fn the_retry_span_is_every_retry_delay_added_up() {
        assert_eq!(RETRY_SPAN, RETRY_DELAYS.iter().sum::<Duration>());
        assert_eq!(RETRY_SPAN, Duration::from_secs(31));
    }

    #[test]
    fn notes_fit_the_apis_byte_limit_on_a_character_boundary() {
        assert_eq!(fitted_note("short"), "short");
        let exact = "a".repeat(MAX_NOTE);
        assert_eq!(fitted_note(&exact), exact);
        for unit in ["€", "a", "😀", "é"] {
            let long = unit.repeat(2000);
            let cut = fitted_note(&long);
            assert!(cut.len() <= MAX_NOTE, "{unit}: {} bytes", cut.len());
            assert!(cut.ends_with('…'), "{unit}");
            assert!(long.starts_with(cut.trim_end_matches('…')), "{unit}: a prefix");
            assert!(cut.len() > MAX_NOTE - 4 - '…'.len_utf8(), "{unit}: cut no shorter than needed");
        }
    }

    #[tokio::test]
    async fn only_identical_notes_continue_a_series() {
        let r = recorder();
        let mesh = ObjectReference {
            name: Some("mesh".into()),
            namespace: Some("ns".into()),
            uid: Some("u1".into()),
            ..Default::default()
        };
        let t0 = Instant::now();
        let first = r.plan(&event("Scaled", "routers scaled from 3 to 5"), &mesh, t0);
        let Write::Create(name) = &first else { panic!("a new Event first: {first:?}") };
        // Another message of the same reason: its own Event.
        assert!(matches!(
            r.plan(&event("Scaled", "routers scaled from 5 to 2"), &mesh, t0),
            Write::Create(_)
        ));
        // The same message again: the series of the first, count 2.
        assert_eq!(
            r.plan(&event("Scaled", "routers scaled from 3 to 5"), &mesh, t0 + Duration::from_secs(1)),
            Write::Continue { name: name.clone(), count: 2 }
        );
        // After the series' time to live: a new Event.
        let later = t0 + SERIES_TTL + Duration::from_secs(2);
        assert!(matches!(
            r.plan(&event("Scaled", "routers scaled from 3 to 5"), &mesh, later),
            Write::Create(_)
        ));
        // Another object: its own series.
        let other = ObjectReference { uid: Some("u2".into()), ..mesh.clone() };
        assert!(matches!(
            r.plan(&event("Scaled", "routers scaled from 3 to 5"), &other, later),
            Write::Create(_)
        ));
        r.forget("u2");
        assert!(matches!(
            r.plan(&event("Scaled", "routers scaled from 3 to 5"), &other, later),
            Write::Create(_)
        ));
    }
}
