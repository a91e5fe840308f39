//! Lease-based leader election (`coordination.k8s.io/v1`), with the properties the
//! project needs and no kube-5 crate was found to have together:
//!
//! * **expiry by local observation** (as client-go): a follower takes over only after it
//!   has seen the same Lease record, unchanged, for a whole `lease_duration` on its own
//!   monotonic clock, so wall-clock skew between replicas does not matter;
//! * **compare-and-swap** on every write (the Lease's `resourceVersion` is a precondition),
//!   so two replicas can never both win;
//! * **self-demotion**: a leader that has not renewed within `renew_deadline` (measured from
//!   *before* its last successful renew request) stops leading at once, and since
//!   `renew_deadline < lease_duration`, it stops before any follower may take over;
//! * **followers honour the holder's `leaseDurationSeconds`** (as client-go does), not
//!   their own flag, so replicas started with different timings never take over early;
//! * **fencing**: the reconcilers' writes go through a client that refuses them outside
//!   the term and abandons them at its deadline ([`crate::fence`]);
//! * **release** on shutdown, after the caller has stopped reconciling, so a follower takes
//!   over within one `retry_period`;
//! * **bounded looks**: a follower gives a look at the Lease up after
//!   `renew_deadline - retry_period` ([`Timing::look`]): a connection to the API server gone
//!   silent would otherwise hold it for the client's read timeout (kube's is 295 s), and a
//!   follower stuck in one cannot take over from a leader that went. A look that succeeds
//!   within it leaves the new leader at least one `retry_period` to renew before its
//!   deadline, so it never announces a term it must end at once.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

/// Timing of the election. Defaults: 15 s lease, 10 s renew deadline, 2 s retry (client-go).
#[derive(Debug, Clone)]
pub struct Timing {
    /// How long followers wait, after the last change they saw, before taking over.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renew.
    pub renew_deadline: Duration,
    /// How often the leader renews and followers look.
    pub retry_period: Duration,
}

impl Timing {
    /// Checks the order client-go's leader election also requires: `retry_period <
    /// renew_deadline < lease_duration`, none zero. A renew deadline not shorter than the
    /// lease duration would let a follower lead while the old leader still does; a retry
    /// period not shorter than the renew deadline would leave a leader no renew before its
    /// deadline.
    ///
    /// # Errors
    /// The rule broken, naming the flags (`--lease-duration`, `--renew-deadline`,
    /// `--retry-period`).
    pub fn check(&self) -> Result<(), String> {
        let Timing { lease_duration, renew_deadline, retry_period } = self;
        if retry_period.is_zero() {
            return Err("--retry-period must be more than 0".into());
        }
        if renew_deadline >= lease_duration {
            return Err(format!(
                "--renew-deadline ({renew_deadline:?}) must be shorter than --lease-duration ({lease_duration:?})"
            ));
        }
        if retry_period >= renew_deadline {
            return Err(format!(
                "--retry-period ({retry_period:?}) must be shorter than --renew-deadline ({renew_deadline:?})"
            ));
        }
        Ok(())
    }

    /// How long a follower's look at the Lease may take before it is given up:
    /// `renew_deadline - retry_period` (8 s by default).
    pub fn look(&self) -> Duration {
        self.renew_deadline.saturating_sub(self.retry_period)
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One replica's participation in the election of Lease `name`.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    leading: watch::Sender<bool>,
    last_contact: std::sync::Mutex<Option<std::time::Instant>>,
    fence: crate::fence::Fence,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("lease", &self.name)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Elector {
    /// An elector for Lease `name` in the namespace of `api`, as `identity` (the pod name).
    ///
    /// # Panics
    /// When `timing` breaks [`Timing::check`] (callers with flags check first).
    pub fn new(api: Api<Lease>, name: &str, identity: &str, timing: Timing) -> Self {
        if let Err(e) = timing.check() {
            panic!("{e}");
        }
        Elector {
            api,
            name: name.into(),
            identity: identity.into(),
            timing,
            leading: watch::channel(false).0,
            last_contact: std::sync::Mutex::new(None),
            fence: crate::fence::Fence::default(),
        }
    }

    /// This elector, moving `fence` with its term: open until the start of the last
    /// successful acquire or renew plus `renew_deadline`, closed on demotion (see
    /// [`crate::fence`]).
    #[must_use]
    pub fn with_fence(mut self, fence: crate::fence::Fence) -> Self {
        self.fence = fence;
        self
    }

    /// Stops leading: the flag, then the fence.
    fn demote(&self) {
        let _ = self.leading.send_replace(false);
        self.fence.close();
    }

    /// A receiver that is `true` exactly while this replica may act as leader. Each send is
    /// a change of term: `true` once when a term begins, `false` once when it ends (a
    /// receiver that sees a change while `true` knows a term ended in between). The value is
    /// stored even while nobody subscribes (`send_replace`), so subscribing late cannot miss
    /// an election won before.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// When the API server last answered one of this replica's Lease requests (a conflict
    /// counts: it answered), whether leading or following; `None` before the first answer.
    pub fn last_contact(&self) -> Option<std::time::Instant> {
        *self.last_contact.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`Self::try_acquire`], noting when the API server answered.
    async fn attempt(&self, observed: &mut Option<(String, Instant)>) -> Result<bool, kube::Error> {
        let result = self.try_acquire(observed).await;
        if result.is_ok() {
            *self.last_contact.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(std::time::Instant::now());
        }
        result
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One attempt to take or keep the Lease. `observed` tracks the record a follower saw
    /// and since when (its resourceVersion and holder).
    async fn try_acquire(&self, observed: &mut Option<(String, Instant)>) -> Result<bool, kube::Error> {
        let secs = self.timing.lease_duration.as_secs().max(1) as i32;
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let mut lease = Lease::default();
            lease.metadata.name = Some(self.name.clone());
            lease.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(now_micro()),
                renew_time: Some(now_micro()),
                lease_transitions: Some(0),
                ..Default::default()
            });
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() {
            // Someone else holds it: take over only after seeing this exact record unchanged
            // for a whole lease duration on our own clock: the duration its holder wrote
            // (replicas may run with different flags, as client-go honours), or ours when
            // it wrote none.
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0)
                .map_or(self.timing.lease_duration, Duration::from_secs);
            match observed {
                Some((seen, since)) if *seen == rv => {
                    if since.elapsed() < duration {
                        return Ok(false);
                    }
                }
                _ => {
                    *observed = Some((rv, Instant::now()));
                    return Ok(false);
                }
            }
        }
        if !mine {
            spec.acquire_time = Some(now_micro());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(secs);
        spec.renew_time = Some(now_micro());
        // The resourceVersion in `lease` makes this a compare-and-swap.
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Runs the election until `stop` turns true: follows, leads, demotes itself when it
    /// cannot renew in time. On `stop` it stops leading; call [`Self::release`] once the
    /// reconcilers have stopped.
    pub async fn run(&self, mut stop: watch::Receiver<bool>) {
        let mut observed = None;
        loop {
            if *stop.borrow() {
                self.demote();
                return;
            }
            // Follower: a look given up after `Timing::look` is a look that failed (one whose
            // write reached the API server leaves the Lease naming this replica, and the
            // next look renews it).
            let attempt_started = Instant::now();
            let look = tokio::time::timeout(self.timing.look(), self.attempt(&mut observed)).await;
            let acquired = matches!(look, Ok(Ok(true)));
            if look.is_err() {
                tracing::debug!(after = ?self.timing.look(), "a look at the lease was given up");
            }
            if !acquired {
                tokio::select! {
                    _ = tokio::time::sleep(self.timing.retry_period) => {},
                    _ = stop.changed() => {},
                }
                continue;
            }
            tracing::info!(identity = %self.identity, lease = %self.name, "became leader");
            let mut deadline = attempt_started + self.timing.renew_deadline;
            self.fence.hold_until(deadline);
            let _ = self.leading.send_replace(true);
            observed = None;
            // Leader: renew every retry period; demote at the deadline.
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {
                        tracing::warn!(identity = %self.identity, "could not renew the lease in time: no longer leader");
                        self.demote();
                        break;
                    }
                    _ = stop.changed() => {
                        self.demote();
                        return;
                    }
                    _ = tokio::time::sleep(self.timing.retry_period) => {
                        let attempt_started = Instant::now();
                        let budget = deadline.saturating_duration_since(attempt_started);
                        let renewed = tokio::time::timeout(budget, self.attempt(&mut observed)).await;
                        match renewed {
                            Ok(Ok(true)) => {
                                deadline = attempt_started + self.timing.renew_deadline;
                                self.fence.hold_until(deadline);
                            }
                            Ok(Ok(false)) => {
                                tracing::warn!(identity = %self.identity, "lease taken by another replica: no longer leader");
                                self.demote();
                                break;
                            }
                            _ => tracing::debug!("lease renew failed; retrying until the deadline"),
                        }
                    }
                }
            }
        }
    }

    /// Stands down at shutdown: with `stop` already set for `election` (the task running
    /// [`Self::run`]) and the reconcilers stopped, waits for the election to end, then gives
    /// the Lease up so a follower takes over at its next look rather than at expiry.
    ///
    /// The election ends once its attempt in flight does (bounded by `--renew-deadline`);
    /// releasing before that let a renew in flight land after the release (naming this
    /// replica holder again) or between the release's read and write (the release refused
    /// with a conflict), and followers then waited a whole lease duration. Should the
    /// election not end within the renew deadline plus a retry period it is aborted, and the
    /// release still tried.
    pub async fn stand_down(&self, mut election: tokio::task::JoinHandle<()>) {
        let bound = self.timing.renew_deadline + self.timing.retry_period;
        if tokio::time::timeout(bound, &mut election).await.is_err() {
            tracing::warn!(after = ?bound, "the election did not end in time; aborted");
            election.abort();
        }
        self.release().await;
    }

    /// Gives the Lease up if this replica holds it (holder cleared, so followers take over
    /// at their next look instead of waiting for expiry). A conflict (the Lease written
    /// between this read and write) is read again, up to three times: the release happens
    /// whenever the Lease still names this replica.
    pub async fn release(&self) {
        for _ in 0..3 {
            let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else { return };
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return;
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now_micro());
            match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                Ok(_) => {
                    tracing::info!(identity = %self.identity, "released the lease");
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "could not release the lease");
                    return;
                }
            }
        }
        tracing::warn!("could not release the lease: it kept changing");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(lease: u64, renew: u64, retry: u64) -> Timing {
        Timing {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
        }
    }

    #[test]
    fn the_defaults_pass_the_check_and_a_look_leaves_a_retry_period() {
        let t = Timing::default();
        assert_eq!(t.check(), Ok(()));
        assert_eq!(t.look(), Duration::from_secs(8));
        assert!(t.look() + t.retry_period <= t.renew_deadline);
    }

    #[test]
    fn timings_out_of_order_are_refused_naming_the_flags() {
        let e = timing(15, 15, 2).check().unwrap_err();
        assert!(e.contains("--renew-deadline") && e.contains("--lease-duration"), "{e}");
        let e = timing(15, 10, 10).check().unwrap_err();
        assert!(e.contains("--retry-period") && e.contains("--renew-deadline"), "{e}");
        let e = timing(15, 10, 0).check().unwrap_err();
        assert!(e.contains("--retry-period"), "{e}");
    }
}
