//! How long what the operator generates lives, and when it is replaced: the default
//! lifetimes of CAs and router certificates, the renew point, the overlap of a CA rotation,
//! and the warning window for user-provided certificates. Only durations and their checks:
//! nothing here reads a certificate or a Secret.

use std::time::Duration;

/// Default lifetime of generated CAs (flag `--router-ca-lifetime`).
pub const CA_LIFETIME: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// Default lifetime of generated router certificates (flag `--router-cert-lifetime`).
pub const CERT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// Fraction of a lifetime after which a generated certificate or CA is replaced.
pub(crate) const RENEW_FRACTION: f64 = 2.0 / 3.0;
/// The default [`Lifetimes::overlap`] is the CA lifetime divided by this: 10, so 182.5 days
/// for the default 5 years. Both waits of a rotation (stage → promote → retire) then take a
/// fifth of the lifetime, inside the third that is left after the stage at
/// [`RENEW_FRACTION`], leaving the last 2/15 (8 months by default) for slow rollouts.
pub const OVERLAP_DIVISOR: u32 = 10;
/// A user-provided certificate expiring within this raises a Warning Event.
pub(crate) const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

/// Lifetimes of what the operator generates, and the grace period of CA rotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// CA lifetime (`--router-ca-lifetime`).
    pub ca: Duration,
    /// Router certificate lifetime (`--router-cert-lifetime`).
    pub cert: Duration,
    /// Least time between a CA's stage and its promotion, and between the promotion and the
    /// retirement of the old CA (`--router-ca-overlap`), on top of the rollout gates.
    pub overlap: Duration,
}

impl Lifetimes {
    /// `ca` and `cert` with the default overlap (`ca` / [`OVERLAP_DIVISOR`]).
    pub fn new(ca: Duration, cert: Duration) -> Self {
        Lifetimes { ca, cert, overlap: ca / OVERLAP_DIVISOR }
    }

    /// Checks that both waits of a rotation fit in what is left of the old CA's life after
    /// the stage (`2 × overlap < (1 − RENEW_FRACTION) × ca`).
    ///
    /// # Errors
    /// A sentence naming the flags and the largest overlap that fits.
    pub fn check(&self) -> Result<(), String> {
        let left = self.ca.mul_f64(1.0 - RENEW_FRACTION);
        if self.overlap * 2 >= left {
            return Err(format!(
                "--router-ca-overlap={} is too long for --router-ca-lifetime={}: a rotation starts at 2/3 of \
                 the CA's lifetime and waits the overlap twice, so it must be less than {}",
                humantime::format_duration(self.overlap),
                humantime::format_duration(self.ca),
                humantime::format_duration(Duration::from_secs((left / 2).as_secs()))
            ));
        }
        Ok(())
    }
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes::new(CA_LIFETIME, CERT_LIFETIME)
    }
}
