//! One reconcile of one Interconnect, as five stages, each a module with its own error:
//!
//! ```text
//!  stored Interconnect
//!        │  Owner::new: defaults in memory + validate ── invalid ──► status (SpecValid=False),
//!        ▼                                                         events (InvalidSpec), stop
//!  observe ──► build ──► apply ──► status ──► events
//!  (reads)     (pure)    (SSA,     (conditions, (Events on
//!                         prune)    if changed)  transitions)
//! ```
//!
//! 1. [`observe`]: the Secrets the spec names, the existing workload, the router pods;
//! 2. [`build`]: every child, purely, with the router config rendered once;
//! 3. [`apply`]: server-side apply of every child, creation of missing generated Secrets,
//!    pruning of orphans after a spec change;
//! 4. [`status`]: conditions and counts, written only when changed;
//! 5. [`events`]: one Event per change made.
//!
//! A failed stage is recorded as `Degraded=True` (reason `ReconcileFailed`, the stage and
//! the error in the message) within the same reconcile, so nothing outlives a lost
//! leadership; the controller then retries with per-object exponential backoff
//! ([`RETRY`] doubling up to [`RETRY_CAP`]), reset by the next success.

pub mod apply;
pub mod build;
pub mod events;
pub mod observe;
pub mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use qdr_api::Interconnect;

use crate::builders::Settings;
use crate::cache::Cache;
use crate::metrics::Metrics;
use crate::owner::{Owner, OwnerError};

/// How long a reconciled Interconnect waits before it is looked at again without a change.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How long after a first failed reconcile it is retried; each further failure in a row
/// doubles the delay, up to [`RETRY_CAP`].
pub const RETRY: Duration = Duration::from_secs(1);
/// The longest delay between retries of a failing Interconnect.
pub const RETRY_CAP: Duration = Duration::from_secs(300);
/// How long after a pass that ran on a stale observation (an object it saw missing
/// existed: the stores had not caught up with a write) it runs again. Not a failure: no
/// `Degraded`, no backoff.
pub const STALE_RETRY: Duration = Duration::from_millis(250);
/// How long a reconcile that found the stores still listing waits before it runs again.
pub const STORES_SYNCING_RETRY: Duration = Duration::from_millis(200);
/// How long after a [`status::CONFLICTING_OBJECT`] the names are looked up again (the
/// foreign objects are not watched: they are not ours).
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(30);
/// How often at most a user-provided certificate's coming expiry is warned about.
pub const EXPIRY_WARNING_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// The delay before retry `failures` (1 for the first failure) of one object:
/// `RETRY * 2^(failures-1)`, at most [`RETRY_CAP`].
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    RETRY.saturating_mul(1 << exp).min(RETRY_CAP)
}

/// Shared by every reconcile.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// Builder settings (default image, Routes or Ingresses).
    pub settings: Settings,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness and liveness (`/readyz`, `/livez`).
    pub health: Arc<crate::health::Health>,
    /// Failures in a row, by `namespace/name` (for [`backoff`]).
    pub failures: Arc<Mutex<HashMap<String, u32>>>,
    /// When a `CertificateExpiring` Warning was last sent, by `namespace/name/secret`.
    pub expiry_warned: Arc<Mutex<HashMap<String, Instant>>>,
    /// The stores of the current leadership term ([`Context::for_term`]); `None` in the
    /// context a process starts with, which reconciles nothing.
    pub cache: Option<Cache>,
}

impl Context {
    /// A context with no failures recorded and no stores.
    pub fn new(
        client: kube::Client,
        settings: Settings,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        health: Arc<crate::health::Health>,
    ) -> Self {
        Context {
            client,
            settings,
            recorder,
            metrics,
            health,
            failures: Arc::default(),
            expiry_warned: Arc::default(),
            cache: None,
        }
    }

    /// This context with the stores of a new leadership term (failures and warning times
    /// carry over).
    pub fn for_term(&self, cache: Cache) -> Self {
        Context {
            client: self.client.clone(),
            settings: self.settings.clone(),
            recorder: self.recorder.clone(),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            failures: self.failures.clone(),
            expiry_warned: self.expiry_warned.clone(),
            cache: Some(cache),
        }
    }
}

impl Context {
    /// [`status::write`], remembering the written object in the term's stores.
    async fn write_status(
        &self,
        ic: &Interconnect,
        new: qdr_api::InterconnectStatus,
    ) -> Result<(), status::Error> {
        if let Some(written) = status::write(&self.client, ic, new).await?
            && let Some(cache) = &self.cache
        {
            cache.written_interconnects.record(written);
        }
        Ok(())
    }
}

fn key(ic: &Interconnect) -> String {
    format!("{}/{}", ic.namespace().unwrap_or_default(), ic.name_any())
}

/// Why a reconcile failed, by stage. [`Self::category`] is a bounded metric label.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object cannot own children (not read from the API server).
    #[error(transparent)]
    Owner(OwnerError),
    /// Reading the cluster failed.
    #[error("observe: {0}")]
    Observe(#[from] observe::Error),
    /// Building the children failed (credentials).
    #[error("build: {0}")]
    Build(#[from] build::Error),
    /// Writing a child or pruning failed.
    #[error("apply: {0}")]
    Apply(#[from] apply::Error),
    /// Writing the status failed.
    #[error("status: {0}")]
    Status(#[from] status::Error),
}

impl Error {
    /// `owner`, `observe`, `build`, `apply` or `status`.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Owner(_) => "owner",
            Error::Observe(_) => "observe",
            Error::Build(_) => "build",
            Error::Apply(_) => "apply",
            Error::Status(_) => "status",
        }
    }
}

/// Reconciles one Interconnect (see the module docs).
///
/// # Errors
/// An [`Error`] from the stage that failed, after recording it as `Degraded=True`.
#[tracing::instrument(skip_all, fields(
    namespace = %ic.namespace().unwrap_or_default(),
    name = %ic.name_any(),
    generation = ic.metadata.generation.unwrap_or_default(),
))]
pub async fn reconcile(ic: Arc<Interconnect>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let _running = ctx.health.reconciling(key(&ic));
    // The status this controller wrote last, when the store has not caught up with it yet.
    let ic = match &ctx.cache {
        Some(c) => {
            let (ns, name) = (ic.namespace().unwrap_or_default(), ic.name_any());
            c.written_interconnects.pick(&ns, &name, Some(ic.clone())).unwrap_or(ic)
        }
        None => ic,
    };
    let result = match stages(&ic, &ctx).await {
        Err(Error::Apply(e)) if e.is_stale() => {
            tracing::debug!(error = %e, "stale observation; reconciling again");
            Ok(Action::requeue(STALE_RETRY))
        }
        other => other,
    };
    {
        let mut failures = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(_) => {
                failures.remove(&key(&ic));
            }
            Err(_) => *failures.entry(key(&ic)).or_default() += 1,
        }
    }
    if let Err(e) = &result {
        tracing::warn!(category = e.category(), error = %e, "reconcile failed");
        let degraded = status::failed(&ic, &e.to_string());
        if let Err(w) = ctx.write_status(&ic, degraded).await {
            tracing::debug!(error = %w, "could not record Degraded");
        }
    }
    ctx.metrics.reconciled(started.elapsed(), result.as_ref().err().map(Error::category));
    result
}

async fn stages(ic: &Interconnect, ctx: &Context) -> Result<Action, Error> {
    if ic.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change()); // garbage collection removes the children
    }
    let owner = match Owner::new(ic) {
        Ok(owner) => owner,
        Err(OwnerError::Invalid(errors)) => {
            let message = crate::owner::summary(&errors);
            let event = events::invalid(ic, &message);
            ctx.write_status(ic, status::invalid(ic, &message)).await?;
            events::publish(&ctx.recorder, ic, event).await;
            return Ok(Action::await_change());
        }
        Err(e) => return Err(Error::Owner(e)),
    };
    let Some(cache) = &ctx.cache else { return Ok(Action::await_change()) };
    if !cache.is_ready() {
        return Ok(Action::requeue(STORES_SYNCING_RETRY));
    }
    let observed = observe::observe(&ctx.client, cache, &owner).await?;
    let children = build::build(&owner, &ctx.settings, &observed)?;
    let report = children.credentials.clone();
    let planned = events::planned(&observed, &children);
    let key = key(ic);
    let fingerprint = apply::fingerprint(&children);
    let drifted = cache.drift.take(&key);
    let skip = match fingerprint {
        Some(f) if !drifted && observed.generation_reconciled && observed.workload_adoption.is_none() => {
            cache.applied.same(&key, owner.uid(), owner.generation(), f, RESYNC)
        }
        _ => false,
    };
    let applied = match skip.then(|| apply::unchanged(cache, &owner, &children)).flatten() {
        Some(applied) => applied,
        None => {
            let applied = apply::apply(
                &ctx.client,
                cache,
                &owner,
                children,
                (observed.workload_conflict.clone(), observed.workload_adoption.clone()),
                !observed.generation_reconciled,
            )
            .await?;
            if let Some(f) = fingerprint
                && applied.conflicts.is_empty()
            {
                cache.applied.record(&key, owner.uid(), owner.generation(), f);
            }
            applied
        }
    };
    let new_status = status::desired(&owner, &observed, &applied, &report);
    let scheduling = events::scheduling(ic, &new_status);
    ctx.write_status(ic, new_status).await?;
    if !applied.conflicts.is_empty() {
        let event = events::conflicting(ic, &status::conflicts_message(&applied));
        events::publish(&ctx.recorder, ic, event).await;
        return Ok(Action::requeue(CONFLICT_RECHECK));
    }
    let mut changes = planned;
    if !applied.adopted.is_empty() {
        changes.push(events::Change::Adopted(applied.adopted));
    }
    if !applied.pruned.is_empty() {
        changes.push(events::Change::Pruned(applied.pruned));
    }
    if !report.unmet.is_empty() {
        changes.extend(events::missing_secret(ic, &status::missing_message(&report)));
    }
    changes.extend(scheduling);
    changes.extend(expiry_warnings(ctx, ic, &report.expiring));
    events::publish(&ctx.recorder, ic, changes).await;
    ctx.metrics.certificate_expiry(owner.namespace(), owner.name(), report.earliest_expiry);
    let until_renewal = report
        .next_renewal
        .map(|t| t.duration_since(SystemTime::now()).unwrap_or_default().max(Duration::from_secs(1)));
    Ok(Action::requeue(until_renewal.map_or(RESYNC, |d| d.min(RESYNC))))
}

/// `CertificateExpiring` Warnings for `expiring`, each at most once per
/// [`EXPIRY_WARNING_INTERVAL`] per Interconnect and line.
fn expiry_warnings(ctx: &Context, ic: &Interconnect, expiring: &[(String, String)]) -> Vec<events::Change> {
    let mut warned = ctx.expiry_warned.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    expiring
        .iter()
        .filter(|(secret, _)| {
            let k = format!("{}/{secret}", key(ic));
            let due = warned.get(&k).is_none_or(|t| now.duration_since(*t) >= EXPIRY_WARNING_INTERVAL);
            if due {
                warned.insert(k, now);
            }
            due
        })
        .map(|(_, line)| events::Change::CertificateExpiring(line.clone()))
        .collect()
}

/// What to do after a failed reconcile: retry after [`backoff`] of the object's failures in
/// a row. (`Degraded` was already recorded by [`reconcile`] itself, so nothing here
/// outlives the reconcile.)
pub fn error_policy(ic: Arc<Interconnect>, _err: &Error, ctx: Arc<Context>) -> Action {
    let failures =
        ctx.failures.lock().unwrap_or_else(|e| e.into_inner()).get(&key(&ic)).copied().unwrap_or(1);
    Action::requeue(backoff(failures))
}
