//! One reconcile of one Interconnect, in stages:
//!
//! 1. **observe** the stored object;
//! 2. **effective spec**: [`qdr_api::defaults`] on an in-memory copy (the spec is never
//!    written), so an object that never passed the webhook behaves the same;
//! 3. **validate** with [`qdr_api::validate`]: on failure, condition `SpecValid=False` with
//!    every cause, one Warning event per generation, no child touched;
//! 4. **build** every child with the pure [`crate::builders`];
//! 5. **apply** them by server-side apply under [`FIELD_MANAGER`] (the users Secret and
//!    generated credentials are only created when missing);
//! 6. **orphans**: delete children this Interconnect owns but no longer wants (the
//!    Deployment after `Any` → `Every`, the Ingress of a listener no longer exposed, ...);
//! 7. **status**: conditions, router pods and replica counts, written only when changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use qdr_api::{Interconnect, InterconnectStatus, defaults, validate};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::builders::{self, CONFIG_HASH, FIELD_MANAGER, Settings, Target, Workload};
use crate::credentials;
use crate::metrics::Metrics;

/// Shared by every reconcile.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// Builder settings (default image).
    pub settings: Settings,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether `route.openshift.io/v1` is served: exposed listeners get Routes, not Ingresses.
    pub openshift: bool,
}

/// Why a reconcile failed, by stage. [`Self::category`] is a bounded metric label.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the cluster failed.
    #[error("observing {what}: {source}")]
    Observe {
        /// What was read.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// A server-side apply or create failed.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        /// Kind of the child.
        kind: String,
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Deleting an orphan failed.
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        /// Kind of the orphan.
        kind: String,
        /// Its name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Credentials could not be issued.
    #[error("credentials: {0}")]
    Credentials(#[from] credentials::CredentialsError),
    /// Writing the status failed.
    #[error("writing status: {0}")]
    Status(kube::Error),
}

impl Error {
    /// `observe`, `apply`, `delete`, `credentials` or `status`.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Observe { .. } => "observe",
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
            Error::Credentials(_) => "credentials",
            Error::Status(_) => "status",
        }
    }
}

async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map_err(|source| Error::Apply { kind: K::kind(&()).into_owned(), name, source })
}

/// Deletes the objects of kind `K` labelled for this Interconnect, owned by it, and not in
/// `keep`. Returns the names deleted.
async fn delete_orphans<K>(
    api: &Api<K>,
    t: &Target<'_>,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    let uid = t.ic.metadata.uid.clone().unwrap_or_default();
    let lp = ListParams::default()
        .labels(&format!("interconnect_cr={},app.kubernetes.io/managed-by=qdr-operator", t.name));
    let list =
        api.list(&lp).await.map_err(|source| Error::Observe { what: K::plural(&()).into_owned(), source })?;
    let mut deleted = Vec::new();
    for o in list.items {
        let owned =
            o.meta().owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true));
        let name = o.meta().name.clone().unwrap_or_default();
        if owned && !keep.contains(&name) {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => deleted.push(name),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => return Err(Error::Delete { kind: K::kind(&()).into_owned(), name, source }),
            }
        }
    }
    Ok(deleted)
}

/// [`delete_orphans`] for Routes, which are not a compiled-in type.
async fn delete_orphan_routes(
    api: &Api<DynamicObject>,
    t: &Target<'_>,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let uid = t.ic.metadata.uid.clone().unwrap_or_default();
    let lp = ListParams::default()
        .labels(&format!("interconnect_cr={},app.kubernetes.io/managed-by=qdr-operator", t.name));
    let list = api.list(&lp).await.map_err(|source| Error::Observe { what: "routes".into(), source })?;
    let mut deleted = Vec::new();
    for o in list.items {
        let owned =
            o.metadata.owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true));
        let name = o.name_any();
        if owned && !keep.contains(&name) {
            api.delete(&name, &DeleteParams::background()).await.map_err(|source| Error::Delete {
                kind: "Route".into(),
                name: name.clone(),
                source,
            })?;
            deleted.push(name);
        }
    }
    Ok(deleted)
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
    prev: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last = prev
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.chars().take(32 * 1024).collect(),
        observed_generation: Some(generation),
        last_transition_time: last,
    }
}

/// Status equality that ignores condition timestamps.
fn same_status(a: &InterconnectStatus, b: &InterconnectStatus) -> bool {
    let strip = |s: &InterconnectStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(a) == strip(b)
}

async fn write_status(ctx: &Context, ic: &Interconnect, status: InterconnectStatus) -> Result<(), Error> {
    if ic.status.as_ref().is_some_and(|old| same_status(old, &status)) {
        return Ok(());
    }
    let api: Api<Interconnect> = Api::namespaced(ctx.client.clone(), &ic.namespace().unwrap_or_default());
    api.patch_status(&ic.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .map(|_| ())
        .map_err(Error::Status)
}

async fn event(ctx: &Context, ic: &Interconnect, type_: EventType, reason: &str, note: String) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &ic.object_ref(&())).await {
        tracing::warn!(error = %e, "could not publish event");
    }
}

/// Reconciles one Interconnect (see the module docs).
///
/// # Errors
/// An [`Error`] from the stage that failed; the controller retries with backoff.
pub async fn reconcile(ic: Arc<Interconnect>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        namespace = ic.namespace().unwrap_or_default(),
        name = ic.name_any(),
        generation = ic.metadata.generation.unwrap_or_default()
    );
    let _enter = span.enter();
    let result = reconcile_inner(&ic, &ctx).await;
    if let Err(e) = &result {
        tracing::warn!(category = e.category(), error = %e, "reconcile failed");
    }
    ctx.metrics.reconciled(started.elapsed(), result.as_ref().err().map(Error::category));
    result
}

async fn reconcile_inner(ic: &Interconnect, ctx: &Context) -> Result<Action, Error> {
    if ic.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change()); // garbage collection removes the children
    }
    let generation = ic.metadata.generation.unwrap_or_default();
    let prev = ic.status.clone().unwrap_or_default();
    let effective = defaults(ic);
    let errors = validate(&effective);
    if !errors.is_empty() {
        let message = errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ");
        let was_invalid = prev.conditions.iter().any(|c| {
            c.type_ == "SpecValid" && c.status == "False" && c.observed_generation == Some(generation)
        });
        let status = InterconnectStatus {
            conditions: vec![
                condition("SpecValid", false, "InvalidSpec", &message, generation, &prev.conditions),
                condition(
                    "Ready",
                    false,
                    "InvalidSpec",
                    "the spec is invalid; see SpecValid",
                    generation,
                    &prev.conditions,
                ),
            ],
            observed_generation: Some(generation),
            ..prev.clone()
        };
        write_status(ctx, ic, status).await?;
        if !was_invalid {
            event(ctx, ic, EventType::Warning, "InvalidSpec", message).await;
        }
        return Ok(Action::await_change());
    }

    let t = Target::new(&effective);
    let ns = t.namespace;
    let c = ctx.client.clone();
    apply(&Api::<ServiceAccount>::namespaced(c.clone(), ns), &builders::service_account(&t)).await?;
    apply(&Api::<Role>::namespaced(c.clone(), ns), &builders::role(&t)).await?;
    apply(&Api::<RoleBinding>::namespaced(c.clone(), ns), &builders::role_binding(&t)).await?;

    let mut keep_cm = BTreeSet::new();
    if let Some(cm) = builders::sasl_config_map(&t) {
        keep_cm.insert(cm.name_any());
        apply(&Api::<ConfigMap>::namespaced(c.clone(), ns), &cm).await?;
    }

    // Secrets: the users Secret and generated credentials are created when missing only.
    let secrets: Api<Secret> = Api::namespaced(c.clone(), ns);
    let mut keep_secrets = BTreeSet::new();
    if let Some(users) = t.users_secret() {
        keep_secrets.insert(users.to_string());
        let found = secrets
            .get_opt(users)
            .await
            .map_err(|source| Error::Observe { what: format!("Secret {users}"), source })?;
        if found.is_none() {
            let password: String = {
                use rand::Rng;
                let mut rng = rand::rng();
                (0..16).map(|_| rng.sample(rand::distr::Alphanumeric) as char).collect()
            };
            let s = Secret {
                metadata: t.meta(users),
                string_data: Some(BTreeMap::from([("guest".into(), password)])),
                ..Default::default()
            };
            match secrets
                .create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &s)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(source) => {
                    return Err(Error::Apply { kind: "Secret".into(), name: users.into(), source });
                }
            }
        }
    }
    let mut existing = credentials::Existing::new();
    for p in effective.spec.ssl_profiles.iter().flatten() {
        for name in [&p.credentials, &p.ca_cert].into_iter().flatten() {
            keep_secrets.insert(name.clone());
            if let Some(s) = secrets
                .get_opt(name)
                .await
                .map_err(|source| Error::Observe { what: format!("Secret {name}"), source })?
            {
                existing.insert(name.clone(), s.data.unwrap_or_default());
            }
        }
    }
    let issuer = effective
        .spec
        .deployment_plan
        .as_ref()
        .and_then(|p| p.issuer.clone())
        .unwrap_or_else(|| format!("{}-ca", t.name));
    keep_secrets.insert(issuer.clone());
    if let Some(s) = secrets
        .get_opt(&issuer)
        .await
        .map_err(|source| Error::Observe { what: format!("Secret {issuer}"), source })?
    {
        existing.insert(issuer.clone(), s.data.unwrap_or_default());
    }
    for s in credentials::missing_secrets(&t, &existing, SystemTime::now())? {
        match secrets
            .create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &s)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(st)) if st.code == 409 => {}
            Err(source) => return Err(Error::Apply { kind: "Secret".into(), name: s.name_any(), source }),
        }
    }

    // The workload, with events on real transitions only.
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), ns);
    let daemonsets: Api<DaemonSet> = Api::namespaced(c.clone(), ns);
    let (_, hash) = builders::config_and_hash(&t);
    let (mut keep_deploy, mut keep_ds) = (BTreeSet::new(), BTreeSet::new());
    let (desired, ready, updated, available, observed_ok) = match builders::workload(&t, &ctx.settings) {
        Workload::Deployment(d) => {
            let old = deployments
                .get_opt(t.name)
                .await
                .map_err(|source| Error::Observe { what: "Deployment".into(), source })?;
            if let Some(old) = &old {
                let old_hash = old
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.metadata.as_ref())
                    .and_then(|m| m.annotations.as_ref())
                    .and_then(|a| a.get(CONFIG_HASH));
                if old_hash.is_some_and(|h| *h != hash) {
                    event(
                        ctx,
                        ic,
                        EventType::Normal,
                        "ConfigChanged",
                        "router configuration changed: rolling the routers".into(),
                    )
                    .await;
                }
                let (old_n, new_n) =
                    (old.spec.as_ref().and_then(|s| s.replicas), d.spec.as_ref().and_then(|s| s.replicas));
                if old_n != new_n {
                    event(
                        ctx,
                        ic,
                        EventType::Normal,
                        "Scaled",
                        format!("routers scaled from {} to {}", old_n.unwrap_or(0), new_n.unwrap_or(0)),
                    )
                    .await;
                }
            }
            keep_deploy.insert(t.name.to_string());
            let applied = apply(&deployments, &d).await?;
            let st = applied.status.unwrap_or_default();
            let want = d.spec.and_then(|s| s.replicas).unwrap_or(1);
            let fresh = st.observed_generation >= applied.metadata.generation;
            (
                want,
                st.ready_replicas.unwrap_or(0),
                st.updated_replicas.unwrap_or(0),
                st.available_replicas.unwrap_or(0),
                fresh,
            )
        }
        Workload::DaemonSet(d) => {
            keep_ds.insert(t.name.to_string());
            let applied = apply(&daemonsets, &d).await?;
            let st = applied.status.unwrap_or_default();
            let fresh = st.observed_generation >= applied.metadata.generation;
            (
                st.desired_number_scheduled,
                st.number_ready,
                st.updated_number_scheduled.unwrap_or(0),
                st.number_available.unwrap_or(0),
                fresh,
            )
        }
    };
    apply(&Api::<Service>::namespaced(c.clone(), ns), &builders::service(&t)).await?;
    let ingresses: Api<Ingress> = Api::namespaced(c.clone(), ns);
    let routes: Api<DynamicObject> = Api::namespaced_with(c.clone(), ns, &builders::route_resource());
    let (mut keep_ing, mut keep_routes) = (BTreeSet::new(), BTreeSet::new());
    if ctx.openshift {
        for r in builders::routes(&t) {
            let name = r.name_any();
            routes
                .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&r))
                .await
                .map_err(|source| Error::Apply { kind: "Route".into(), name: name.clone(), source })?;
            keep_routes.insert(name);
        }
    } else {
        for i in builders::ingresses(&t) {
            keep_ing.insert(i.name_any());
            apply(&ingresses, &i).await?;
        }
    }

    // Orphans. Children only become unwanted through a spec change, so the (list-heavy)
    // pruning runs when this generation has not yet been reconciled successfully.
    let spec_changed = !prev
        .conditions
        .iter()
        .any(|c| c.type_ == "Degraded" && c.status == "False" && c.observed_generation == Some(generation));
    let mut deleted = Vec::new();
    if spec_changed {
        deleted.extend(
            delete_orphans(&deployments, &t, &keep_deploy)
                .await?
                .into_iter()
                .map(|n| format!("Deployment {n}")),
        );
        deleted.extend(
            delete_orphans(&daemonsets, &t, &keep_ds).await?.into_iter().map(|n| format!("DaemonSet {n}")),
        );
        deleted.extend(
            delete_orphans(&ingresses, &t, &keep_ing).await?.into_iter().map(|n| format!("Ingress {n}")),
        );
        deleted.extend(
            delete_orphans(&Api::<ConfigMap>::namespaced(c.clone(), ns), &t, &keep_cm)
                .await?
                .into_iter()
                .map(|n| format!("ConfigMap {n}")),
        );
        deleted.extend(
            delete_orphans(&secrets, &t, &keep_secrets).await?.into_iter().map(|n| format!("Secret {n}")),
        );
        if ctx.openshift {
            let routes = delete_orphan_routes(&routes, &t, &keep_routes).await?;
            deleted.extend(routes.into_iter().map(|n| format!("Route {n}")));
        }
    }
    if !deleted.is_empty() {
        event(
            ctx,
            ic,
            EventType::Normal,
            "Pruned",
            format!("deleted objects no longer wanted: {}", deleted.join(", ")),
        )
        .await;
    }

    // Status.
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    let selector = t.selector().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let mut pod_names: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::Observe { what: "pods".into(), source })?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    pod_names.sort();
    let is_available = observed_ok && available >= desired;
    let progressing = !observed_ok || updated < desired;
    let is_ready = is_available && !progressing && ready >= desired;
    let msg = format!("{ready}/{desired} routers ready, {updated} updated, {available} available");
    let pc = &prev.conditions;
    let status = InterconnectStatus {
        conditions: vec![
            condition("SpecValid", true, "Valid", "the spec passed validation", generation, pc),
            condition(
                "Ready",
                is_ready,
                if is_ready { "RoutersReady" } else { "RoutersNotReady" },
                &msg,
                generation,
                pc,
            ),
            condition(
                "Available",
                is_available,
                if is_available { "MinimumRoutersAvailable" } else { "RoutersUnavailable" },
                &msg,
                generation,
                pc,
            ),
            condition(
                "Progressing",
                progressing,
                if progressing { "RollingOut" } else { "Complete" },
                &msg,
                generation,
                pc,
            ),
            condition("Degraded", false, "ReconcileSucceeded", "all children applied", generation, pc),
        ],
        observed_generation: Some(generation),
        pods: pod_names,
        replicas: Some(desired),
        ready_replicas: Some(ready),
        updated_replicas: Some(updated),
    };
    write_status(ctx, ic, status).await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// What to do after a failed reconcile: record `Degraded=True` with the stage and retry.
pub fn error_policy(ic: Arc<Interconnect>, err: &Error, ctx: Arc<Context>) -> Action {
    let generation = ic.metadata.generation.unwrap_or_default();
    let prev = ic.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> =
        prev.conditions.iter().filter(|c| c.type_ != "Degraded").cloned().collect();
    conditions.push(condition(
        "Degraded",
        true,
        "ReconcileFailed",
        &format!("{}: {err}", err.category()),
        generation,
        &prev.conditions,
    ));
    let status = InterconnectStatus { conditions, ..prev };
    let (ic2, ctx2) = (ic.clone(), ctx.clone());
    tokio::spawn(async move {
        if write_status(&ctx2, &ic2, status).await.is_err() {
            tracing::debug!("could not record Degraded");
        }
    });
    let _ = &ctx;
    Action::requeue(Duration::from_secs(5))
}
