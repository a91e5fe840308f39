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
//! leadership; the controller then retries.

pub mod apply;
pub mod build;
pub mod events;
pub mod observe;
pub mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use qdr_api::Interconnect;

use crate::builders::Settings;
use crate::metrics::Metrics;
use crate::owner::{Owner, OwnerError};

/// How long a reconciled Interconnect waits before it is looked at again without a change.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How long after a failed reconcile it is retried.
pub const RETRY: Duration = Duration::from_secs(5);

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
    let result = stages(&ic, &ctx).await;
    if let Err(e) = &result {
        tracing::warn!(category = e.category(), error = %e, "reconcile failed");
        let degraded = status::failed(&ic, &e.to_string());
        if let Err(w) = status::write(&ctx.client, &ic, degraded).await {
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
            status::write(&ctx.client, ic, status::invalid(ic, &message)).await?;
            events::publish(&ctx.recorder, ic, event).await;
            return Ok(Action::await_change());
        }
        Err(e) => return Err(Error::Owner(e)),
    };
    let observed = observe::observe(&ctx.client, &owner).await?;
    let children = build::build(&owner, &ctx.settings, &observed)?;
    let mut changes = events::planned(&observed, &children);
    let applied = apply::apply(&ctx.client, &owner, children, !observed.generation_reconciled).await?;
    status::write(&ctx.client, ic, status::desired(&owner, &observed, &applied)).await?;
    if !applied.pruned.is_empty() {
        changes.push(events::Change::Pruned(applied.pruned));
    }
    events::publish(&ctx.recorder, ic, changes).await;
    Ok(Action::requeue(RESYNC))
}

/// What to do after a failed reconcile: retry after [`RETRY`]. (`Degraded` was already
/// recorded by [`reconcile`] itself, so nothing here outlives the reconcile.)
pub fn error_policy(_ic: Arc<Interconnect>, _err: &Error, _ctx: Arc<Context>) -> Action {
    Action::requeue(RETRY)
}
