//! One reconcile of one Interconnect, as six stages, each a module:
//!
//! ```text
//!  stored Interconnect
//!        │  ValidatedInterconnect::new: defaults in memory + validate ── invalid ──────────┐
//!        ▼                                                                                 │
//!  observe ──► build ──► apply_or_reuse ──► read ──────► status ──► events                 │
//!  (reads)     (pure)    (SSA, prune, or    (routers,    (written    (published    ◄───────┘
//!                         skipped: no-op)    when on)     once)       once)
//! ```
//!
//! 1. [`observe`]: the Secrets the spec names, the existing workload, the router pods;
//! 2. [`build`]: every child, purely, with the router config rendered once, and what is
//!    reported about them;
//! 3. [`apply`]: server-side apply of every child, creation of missing generated Secrets,
//!    pruning of orphans after a spec change; skipped when every write would be a no-op;
//! 4. [`read`] (with `--observe-mesh=on`): what the routers themselves report, over the
//!    operator's management listener, when the pods changed or a read is due; never fails
//!    the pass (a router that does not answer is reported);
//! 5. [`status`]: conditions and counts of the whole [`Pass`] (or its failure), written once
//!    and only when changed;
//! 6. [`events`]: one Event per change made, published once the status is written.
//!
//! Imports flow forward only: a stage uses the stages before it, [`types`] (what several
//! stages share) and this module's [`Pass`]; never a later stage.
//!
//! A failed stage is recorded as `Degraded=True` (reason `ReconcileFailed`, the stage and
//! the error in the message) within the same reconcile, so nothing outlives a lost
//! leadership; the controller then retries with per-object exponential backoff
//! ([`RETRY`] doubling up to [`RETRY_CAP`]), reset by the next success.

pub(crate) mod apply;
pub(crate) mod build;
pub(crate) mod events;
pub(crate) mod observe;
pub(crate) mod read;
pub use read::{
    JOIN_GRACE, MAX_CONNECTIONS, MAX_PER_NAMESPACE, MESH_READ_RATE, MESH_RECHECK, MESH_RESYNC, READ_TIMEOUT,
    SLOT_WAIT, half_applied, intern, recheck, unsettled_after,
};
pub(crate) mod status;
pub(crate) mod types;
pub use types::LIVE_TRIES;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use qdr_api::Interconnect;

use crate::builders::Settings;
use crate::cache::Cache;
use crate::metrics::Metrics;
use crate::recorder::Recorder;
use crate::validated::{ValidatedInterconnect, ValidationError, namespaced_name, summary};

/// How long a reconciled Interconnect waits before it is looked at again without a change:
/// one hour. That pass re-applies every child in full ([`apply::apply_or_reuse`]), the
/// backstop for a change no watch event showed; everything else that is due by time has its
/// own, sooner requeue (a certificate's renewal point, the next read of an unsettled mesh, a
/// placement change's deadline), and every child's watch wakes a pass at once when someone
/// else changes it ([`crate::cache`]).
///
/// It was 5 minutes: at 2,000 Interconnects that was 6.7 passes a second at rest, each a full
/// apply (a no-op server-side apply of each of about 10 children; a mean pass of 16.9 ms
/// against 1.5 ms for one that reuses the last apply: docs/mesh-status.md, "A full apply an
/// hour"). An hour is the reapply period of other operators that watch what they own
/// (controller-runtime's default `SyncPeriod` is 10 hours).
pub const RESYNC: Duration = Duration::from_secs(3600);
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
/// How long after a [`types::CONFLICTING_OBJECT`] the names are looked up again (the
/// foreign objects are not watched: they are not ours).
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(30);

/// The delay before retry `failures` (1 for the first failure) of one object:
/// `RETRY * 2^(failures-1)`, at most [`RETRY_CAP`].
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    RETRY.saturating_mul(1 << exp).min(RETRY_CAP)
}

/// Shared by every reconcile: the client, the settings and what outlives one pass.
pub struct Context {
    pub(crate) client: kube::Client,
    pub(crate) settings: Settings,
    pub(crate) recorder: Recorder,
    /// The process's metrics (also served on `/metrics`).
    pub metrics: Arc<Metrics>,
    /// Readiness and liveness (`/readyz`, `/livez`).
    pub(crate) health: Arc<crate::health::Health>,
    /// Failures in a row, by `namespace/name` (for [`backoff`]).
    failures: Arc<Mutex<HashMap<String, u32>>>,
    /// `CertificateExpiring` Warnings sent, across leadership terms.
    expiry: Arc<events::ExpiryWarnings>,
    /// The routers' reader (with `--observe-mesh=on`), across leadership terms.
    pub(crate) mesh: Arc<read::Reader>,
    /// The stores of the current leadership term ([`Context::for_term`]); `None` in the
    /// context a process starts with, which reconciles nothing.
    pub(crate) cache: Option<Cache>,
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
            expiry: Arc::default(),
            mesh: Arc::default(),
            cache: None,
        }
    }

    /// This context with its routers' reader fencing its writes to the routers by `fence`
    /// (the one the API client's writes pass), so a deposed leader writes to no router, and
    /// relying on a whole read of a router's live entities for `live_recheck`
    /// ([`read::Reader::with_live_recheck`]).
    pub fn with_router_reader(
        mut self,
        fence: crate::fence::Fence,
        live_recheck: std::time::Duration,
    ) -> Self {
        self.mesh = Arc::new(read::Reader::default().with_fence(fence).with_live_recheck(live_recheck));
        self
    }

    /// This context with the stores of a new leadership term (failures and warning times
    /// carry over).
    pub(crate) fn for_term(&self, cache: Cache) -> Self {
        Context {
            client: self.client.clone(),
            settings: self.settings.clone(),
            recorder: self.recorder.clone(),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            failures: self.failures.clone(),
            expiry: self.expiry.clone(),
            mesh: self.mesh.clone(),
            cache: Some(cache),
        }
    }

    /// Forgets what the process remembers of `ic`, deleted: its failures in a row, its
    /// warning times, its Event series and its metric series.
    pub(crate) fn forget(&self, ic: &Interconnect) {
        let key = namespaced_name(ic);
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        self.expiry.forget(&key);
        self.mesh.forget(&key);
        self.recorder.forget(ic.metadata.uid.as_deref().unwrap_or_default());
        self.metrics.certificate_expiry(&ic.namespace().unwrap_or_default(), &ic.name_any(), None);
        self.metrics.mesh(&ic.namespace().unwrap_or_default(), &ic.name_any(), None);
        self.metrics.routers(&ic.namespace().unwrap_or_default(), &ic.name_any(), None);
        self.metrics.link_expiry(&ic.namespace().unwrap_or_default(), &ic.name_any(), &[]);
    }

    /// [`status::write`], remembering the written object in the term's stores.
    async fn write_status(
        &self,
        ic: &Interconnect,
        new: qdr_api::InterconnectStatus,
    ) -> Result<(), status::Error> {
        if let Some(written) = status::write(&self.client, ic, new).await?
            && let Some(cache) = &self.cache
        {
            cache.status_written(written);
        }
        Ok(())
    }
}

/// Why a reconcile failed, by stage. [`Self::category`] is a bounded metric label.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The object cannot own children (not read from the API server).
    #[error(transparent)]
    NotStored(ValidationError),
    #[error("observe: {0}")]
    Observe(#[from] observe::Error),
    #[error("build: {0}")]
    Build(#[from] build::Error),
    #[error("apply: {0}")]
    Apply(#[from] apply::Error),
    #[error("status: {0}")]
    Status(#[from] status::Error),
}

pub use crate::metrics::ERROR_CATEGORIES;

impl Error {
    /// Whether the API server refused because the Interconnect or its namespace is being
    /// deleted ([`types::is_going_away`]): not a failure, nothing to retry.
    pub(crate) fn is_going_away(&self) -> bool {
        match self {
            Error::Observe(observe::Error::Read { source, .. }) => types::is_going_away(source),
            Error::Apply(e) => e.source_error().is_some_and(types::is_going_away),
            Error::Status(e) => e.is_going_away(),
            Error::NotStored(_) | Error::Build(_) => false,
        }
    }

    /// `owner`, `observe`, `build`, `apply` or `status` (one of [`ERROR_CATEGORIES`]).
    pub(crate) fn category(&self) -> &'static str {
        match self {
            Error::NotStored(_) => "owner",
            Error::Observe(_) => "observe",
            Error::Build(_) => "build",
            Error::Apply(_) => "apply",
            Error::Status(_) => "status",
        }
    }
}

/// What one pass found and did: what [`status`] and [`events`] report.
#[derive(Debug)]
pub(crate) enum Pass {
    /// Nothing to do now: look again per the action (being deleted, stores still listing,
    /// a stale observation, no stores in this context).
    Wait(Action),
    /// The effective spec is invalid: every violation, on one line.
    Invalid(String),
    /// The stages ran to the end.
    Reconciled(Box<Reconciled>),
}

/// A pass whose stages all ran.
#[derive(Debug)]
pub(crate) struct Reconciled {
    /// The defaulted and validated Interconnect.
    pub(crate) ic: ValidatedInterconnect,
    pub(crate) observed: observe::Observed,
    pub(crate) report: build::Report,
    pub(crate) applied: types::Applied,
    /// The mesh as the routers report it (`--observe-mesh=on`).
    pub(crate) mesh: Option<read::MeshRead>,
    /// With `--observe-mesh=off`, when to visit the routers again to link them
    /// ([`crate::mesh::links`]; the read itself is not reported); and when the revocation
    /// step of the sites ([`crate::grants::sites`]) waits for the routers to read their trust.
    pub(crate) relink: Option<Duration>,
    /// Own routers whose id a router of another site has too, replaced by this pass
    /// ([`crate::mesh::id_clashes`]).
    pub(crate) clashes: Vec<crate::mesh::IdClash>,
}

impl Pass {
    /// When to look at the Interconnect again: at the next generation for an invalid spec,
    /// after [`CONFLICT_RECHECK`] while a name is taken, at once when a child was changed by
    /// someone else while it was written ([`types::Applied::again`]), else at the next certificate
    /// renewal point, a placement change's deadline ([`types::PLACEMENT_DEADLINE`]) or after
    /// [`RESYNC`], whichever is sooner.
    fn next(&self) -> Action {
        match self {
            Pass::Wait(action) => action.clone(),
            Pass::Invalid(_) => Action::await_change(),
            Pass::Reconciled(r) if !r.applied.conflicts.is_empty() => Action::requeue(CONFLICT_RECHECK),
            Pass::Reconciled(r) if r.applied.again => Action::requeue(Duration::ZERO),
            Pass::Reconciled(r) => {
                let until_renewal = r.report.credentials.next_renewal.map(|t| {
                    t.duration_since(SystemTime::now()).unwrap_or_default().max(Duration::from_secs(1))
                });
                let next = until_renewal.map_or(RESYNC, |d| d.min(RESYNC));
                // The next read of the routers, when they are read.
                let next = r.mesh.as_ref().and_then(|m| m.next).map_or(next, |m| next.min(m));
                let next = r.relink.map_or(next, |m| next.min(m));
                // A placement change's deadline, so the condition turns when it passes.
                let deadline = r.applied.previous.as_ref().and_then(|p| {
                    types::PLACEMENT_DEADLINE.checked_sub(p.waiting).map(|d| d + Duration::from_secs(1))
                });
                let next = deadline.map_or(next, |d| next.min(d));
                Action::requeue(next)
            }
        }
    }
}

/// Reconciles one Interconnect (see the module docs): runs the stages, writes the status
/// the pass leads to, publishes its Events, and counts it.
///
/// # Errors
/// An [`Error`] from the stage that failed, after recording it as `Degraded=True`.
#[tracing::instrument(skip_all, fields(
    namespace = %ic.namespace().unwrap_or_default(),
    name = %ic.name_any(),
    generation = ic.metadata.generation.unwrap_or_default(),
))]
pub(crate) async fn reconcile(ic: Arc<Interconnect>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let key = namespaced_name(&ic);
    let _running = ctx.health.reconciling(key.clone());
    // The status this controller wrote last, when the store has not caught up with it yet.
    let ic = match &ctx.cache {
        Some(c) => {
            let (ns, name) = (ic.namespace().unwrap_or_default(), ic.name_any());
            c.written_interconnects.pick(&ns, &name, Some(ic.clone())).unwrap_or(ic)
        }
        None => ic,
    };
    // Failures (and stale passes) in a row before this one.
    let in_a_row = ctx.failures.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied().unwrap_or(0);
    let mut stale = false;
    // The notices of what this pass changed (Secrets, the workload), should a later write
    // fail.
    let mut notices = Vec::new();
    let pass = match stages(&ic, &ctx, &mut notices).await {
        Err(Error::Apply(e)) if e.is_stale() => {
            // What this pass created was deleted again; the next pass makes and reports it.
            notices.clear();
            // Not a failure (no Degraded), but backed off like one: a store that stays
            // behind (a broken watch) must not make this loop every STALE_RETRY.
            stale = true;
            let delay = STALE_RETRY.saturating_mul(1 << in_a_row.min(20)).min(RETRY_CAP);
            tracing::debug!(error = %e, ?delay, "stale observation; reconciling again");
            Ok(Pass::Wait(Action::requeue(delay)))
        }
        Err(e) if e.is_going_away() => {
            tracing::debug!(error = %e, "the Interconnect or its namespace is being deleted");
            Ok(Pass::Wait(Action::await_change()))
        }
        other => other,
    };
    let new_status = status::of(&ic, &pass);
    let written = match &new_status {
        Some(s) => ctx.write_status(&ic, s.clone()).await,
        None => Ok(()),
    };
    // Secrets and a workload that changed are announced whatever happens to the rest of the
    // pass: the next pass sees them changed already and would never say so (a CA rotation
    // step, new passwords: the only notice clients outside the Interconnect get; a scaling,
    // a rollout).
    let notices = notices.into_iter();
    let result = match (pass, written) {
        (Err(e), Err(w)) => {
            tracing::debug!(error = %w, "could not record Degraded");
            events::publish(&ctx.recorder, &ic, notices).await;
            Err(e)
        }
        (Err(e), Ok(())) => {
            let failure = events::for_failure(&ic, &e.to_string());
            events::publish(&ctx.recorder, &ic, notices.chain(failure)).await;
            Err(e)
        }
        (Ok(_), Err(w)) if w.is_going_away() => Ok(Action::await_change()),
        (Ok(pass), Err(w)) => {
            // The changes made, which the next pass will not see as changes; the warnings
            // about a state are sent by the pass that records it.
            let made = events::for_pass(&ic, &pass, new_status.as_ref(), &ctx.expiry);
            events::publish(&ctx.recorder, &ic, made.into_iter().filter(events::Change::is_made)).await;
            Err(Error::Status(w))
        }
        (Ok(pass), Ok(())) => {
            let changes = events::for_pass(&ic, &pass, new_status.as_ref(), &ctx.expiry);
            events::publish(&ctx.recorder, &ic, changes).await;
            if let Pass::Reconciled(r) = &pass
                && r.applied.conflicts.is_empty()
            {
                let expiry = r.report.credentials.earliest_expiry;
                ctx.metrics.certificate_expiry(r.ic.namespace(), r.ic.name(), expiry);
                let sample = r.mesh.as_ref().filter(|m| m.blocked.is_none()).map(read::MeshRead::sample);
                ctx.metrics.mesh(r.ic.namespace(), r.ic.name(), sample);
                let counts =
                    new_status.as_ref().and_then(|s| Some((s.replicas?, s.ready_replicas.unwrap_or(0))));
                ctx.metrics.routers(r.ic.namespace(), r.ic.name(), counts);
            }
            Ok(pass.next())
        }
    };
    {
        let mut failures = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(_) if !stale => {
                failures.remove(&key);
            }
            _ => *failures.entry(key).or_default() += 1,
        }
    }
    if let Err(e) = &result {
        tracing::warn!(category = e.category(), error = %e, "reconcile failed");
    }
    ctx.metrics.reconciled(started.elapsed(), result.as_ref().err().map(Error::category));
    result
}

/// The stages of one pass, each visited once and in order (the status and the Events are
/// [`reconcile`]'s, from the [`Pass`] this returns).
///
/// When applying fails, `notices` receives the credential changes whose Secrets were
/// written before the failure, and the workload's changes ([`events::planned`]: a scaling,
/// a configuration or credentials rollout) when the workload was.
async fn stages(ic: &Interconnect, ctx: &Context, notices: &mut Vec<events::Change>) -> Result<Pass, Error> {
    if ic.metadata.deletion_timestamp.is_some() {
        return Ok(Pass::Wait(Action::await_change())); // garbage collection removes the children
    }
    let valid = match ValidatedInterconnect::new(ic) {
        Ok(valid) => valid,
        Err(ValidationError::Invalid(errors)) => return Ok(Pass::Invalid(summary(&errors))),
        Err(e) => return Err(Error::NotStored(e)),
    };
    // The routers get the operator's management listener whether or not the mesh is
    // observed (or, when the spec is in its way, are left without it, with why), so turning
    // `--observe-mesh` on or off changes no router's configuration and restarts none.
    let (valid, management) = valid.with_management();
    // Interior routers are linked by the controller over the same connection as it reads
    // them (`mesh::links`), whether or not the mesh is observed: with `--observe-mesh=off`
    // the routers are still visited, to link them, and what they answer is not reported.
    let links = management.is_ok() && crate::mesh::links::template(valid.spec()).is_some();
    let management = ctx.settings.observe_mesh.then_some(management);
    let Some(cache) = &ctx.cache else { return Ok(Pass::Wait(Action::await_change())) };
    if !cache.is_ready() {
        return Ok(Pass::Wait(Action::requeue(STORES_SYNCING_RETRY)));
    }
    // The Links of this Interconnect: their connectors join the configuration, their
    // files the links Secret (mounted from the first Link on: `site_links`).
    let links_of = cache.links_of(valid.namespace(), valid.name());
    let resolved = crate::site_links::resolve(
        &links_of,
        valid.spec().role() != qdr_api::Role::Edge,
        k8s_openapi::jiff::Timestamp::now(),
    );
    let mounted = cache
        .meta::<k8s_openapi::api::core::v1::Secret>(
            valid.namespace(),
            &qdr_api::router_config::links_secret(valid.name()),
        )
        .is_some();
    let grants = cache.grants_of(valid.namespace(), valid.name());
    let advertised = (grants.iter())
        .flat_map(|g| g.status.iter().flat_map(|s| s.endpoints.iter().map(|e| e.host.clone())))
        .collect();
    // Its listeners trust the grants' CAs from its first grant on (`grants::sites`).
    let sites_on = !grants.is_empty()
        || matches!(cache.secret(valid.namespace(), &qdr_api::router_config::links_secret(valid.name())),
            crate::cache::SecretLookup::Ours(s) if s.data.iter().flatten().any(|(k, _)| k.starts_with("sites.")));
    let now = SystemTime::now();
    let site_trust = crate::grants::sites::profiles(&valid, &grants, sites_on, now);
    let valid = (valid.with_links(resolved.connectors(), mounted))
        .with_advertised(advertised)
        .with_site_trust(site_trust);
    let mut observed = observe::observe(&ctx.client, cache, &valid).await?;
    observed.live_tries = ctx.mesh.tries(&valid.namespaced_name());
    observed.links = resolved;
    observed.site_awaited = grants.iter().any(|g| crate::grants::awaits_site(g, now));
    let mut built = build::build(&valid, &ctx.settings, &observed)?;
    if built.verify_workload {
        // Routers may run that this build would roll onto pods that cannot start.
        observe::verify_workload(&ctx.client, cache, &valid, &mut observed).await?;
        built = build::build(&valid, &ctx.settings, &observed)?;
    }
    let build::Built { children, report, .. } = built;
    let sites_digest = (!valid.site_trust().is_empty())
        .then(|| {
            children.links_secret.as_ref().and_then(|s| s.data.as_ref()).map(crate::grants::sites::digest)
        })
        .flatten();
    let generation = status::generation(ic);
    let mut progress = apply::Progress::default();
    let applied =
        apply::apply_or_reuse(&ctx.client, cache, &valid, &observed, children, generation, &mut progress)
            .await;
    if applied.is_err() {
        let changed = report.credentials.changes.iter().filter(|c| progress.secrets.contains(c.secret()));
        notices.extend(changed.cloned().map(events::Change::Credential));
        if progress.workload {
            let made = events::planned(&observed, &report).into_iter();
            notices.extend(made.filter(|c| !matches!(c, events::Change::Credential(_))));
        }
    }
    let applied = applied?;
    // The live entities are written with the links, whether or not the mesh is observed;
    // not while the workload is held (its ConfigMap keeps what its routers started with).
    let live = (!applied.held).then_some(&report.config);
    let seal = &ctx.settings.seal_key;
    // With the mesh not reported, what the routers answered still cuts off revoked sites.
    let mut unreported = None;
    let (mesh, relink) = match management {
        Some(m) => {
            let read = ctx.mesh.read(&valid, &observed, m, live, &ctx.metrics, seal);
            set_linked(&ctx.client, &valid, &observed, &read).await;
            (Some(read), None)
        }
        None if links || report.config.live => {
            let read = ctx.mesh.read(&valid, &observed, Ok(()), live, &ctx.metrics, seal);
            set_linked(&ctx.client, &valid, &observed, &read).await;
            let next = read.next;
            unreported = Some(read.observations);
            (None, next)
        }
        None => (None, None),
    };
    if !grants.is_empty()
        && let Some(m) = &mesh
    {
        crate::grants::write_linked(&ctx.client, &grants, &m.observations).await;
    }
    // A site whose grant is gone is cut off (`grants::sites`): the routers are told to read
    // the new trust, then those still holding its connection restart.
    let mut sites_next = None;
    let answered = mesh.as_ref().map(|m| &m.observations).or(unreported.as_ref());
    if let (Some(digest), Some(answered)) = (&sites_digest, answered)
        && !applied.held
    {
        use crate::grants::sites;
        let holders = sites::revoked_holders(&grants, answered, valid.namespace(), now);
        let pods: Vec<(String, Option<String>)> = (observed.routers.iter())
            .filter(|p| p.owned && p.ready)
            .map(|p| (p.name.clone(), p.sites_trust.clone()))
            .collect();
        let e = sites::plan(&pods, &holders, digest, now);
        sites::enforce(&ctx.client, valid.namespace(), &e, &sites::stamp(digest, now)).await;
        sites_next = e.next;
    }
    // A router of another site with an own pod's name as its id: that pod is replaced, so
    // its router takes a new id (`mesh::id_clashes`).
    let clashes = match answered {
        Some(answered) if !applied.held => {
            let own = observed.routers.iter().filter(|p| p.owned).map(|p| p.name.as_str()).collect();
            let clashes: Vec<_> = crate::mesh::id_clashes(&own, answered).into_iter().collect();
            for c in &clashes {
                tracing::warn!(pod = %c.pod, other = %c.other, "a router of another site has this router's id");
            }
            let pods: Vec<String> = clashes.iter().map(|c| c.pod.clone()).collect();
            let why = "a router of another site has its id";
            crate::grants::sites::replace_router_pods(&ctx.client, valid.namespace(), &pods, why).await;
            clashes
        }
        _ => Vec::new(),
    };
    let due = |key: String| ctx.expiry.due_key(key);
    let (metrics, recorder) = (&ctx.metrics, &ctx.recorder);
    crate::grants::expiry::report(metrics, recorder, &due, &valid, &grants, &links_of, &observed.links, now)
        .await;
    let relink = match (relink, sites_next) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if !links_of.is_empty() {
        let none = std::collections::BTreeMap::new();
        let observations = mesh.as_ref().map_or(&none, |m| &m.observations);
        crate::site_links::write_statuses(
            &ctx.client,
            &links_of,
            &observed.links,
            observations,
            valid.namespace(),
        )
        .await;
    }
    Ok(Pass::Reconciled(Box::new(Reconciled { ic: valid, observed, report, applied, mesh, relink, clashes })))
}

/// What to do after a failed reconcile: retry after [`backoff`] of the object's failures in
/// a row. (`Degraded` was already recorded by [`reconcile`] itself, so nothing here
/// outlives the reconcile.)
pub(crate) fn error_policy(ic: Arc<Interconnect>, _err: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx
        .failures
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&namespaced_name(&ic))
        .copied()
        .unwrap_or(1);
    Action::requeue(backoff(failures))
}

/// Sets the readiness gate [`crate::builders::LINKED`] to `True` on every router pod of `o`
/// that carries it, runs (its containers are ready), is not linked yet, and that `read`
/// finds linked ([`crate::mesh::linked`], against the pods Ready already): its pod becomes
/// Ready, joins the Service, and lets a rollout go on.
///
/// When the routers cannot be read at all for a reason that lasts (the management Secrets
/// are not this Interconnect's own, more routers than the controller reads), the gate is set
/// with reason `NotChecked` and that reason: the gate must not keep a tenant's routers out of
/// service for what only the tenant can mend. The management CA not made yet is not such a
/// reason (the next pass makes it).
///
/// A latch: the controller never sets it back (a misjudged partition must not take every
/// router out of the Service); a router that loses its links shows in `MeshConnected`. A
/// failed write is logged and tried again at the next pass.
async fn set_linked(
    client: &kube::Client,
    o: &ValidatedInterconnect,
    observed: &observe::Observed,
    read: &read::MeshRead,
) {
    use crate::mesh::Mode;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams};
    let waiting: Vec<&observe::RouterPod> = observed.routers.iter().filter(|p| p.waits_for_gate()).collect();
    if waiting.is_empty() {
        return;
    }
    let mode = Mode::of(o.spec().role());
    let (reason, message, linked) = match &read.blocked {
        // Made by this pass: read at the next.
        Some(_) if read.next.is_some() => return,
        Some(why) => ("NotChecked", format!("the controller cannot read the routers: {why}"), None),
        None => {
            let ready: std::collections::BTreeSet<String> = (observed.routers.iter())
                .filter(|p| p.owned && p.ready && (!p.gated || p.linked))
                .map(|p| p.name.clone())
                .collect();
            let message = match mode {
                Mode::Interior => "the router holds an inter-router link to every other Ready router",
                Mode::Edge => "the router holds its uplink",
            };
            ("Linked", message.to_string(), Some(crate::mesh::linked(mode, &read.observations, &ready)))
        }
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), o.namespace());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    for p in waiting.into_iter().filter(|p| linked.as_ref().is_none_or(|l| l.contains(&p.name))) {
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": crate::builders::LINKED, "status": "True", "reason": reason,
            "message": message, "lastTransitionTime": now}]}});
        if let Err(e) = pods.patch_status(&p.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            tracing::warn!(pod = %p.name, error = %e, "could not set the readiness gate qdr-operator.io/linked");
        }
    }
}
