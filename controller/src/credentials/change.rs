//! A change to generated credentials as the Events tell it: renewals, the three steps of
//! a CA rotation, a lost CA replaced, passwords regenerated. Only the description: the
//! decisions are [`super::plan()`]'s.

use std::time::SystemTime;

use crate::human;

/// A change to generated credentials, for an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CredentialChange {
    /// A certificate was re-issued; `until` was the old one's expiry.
    Renewed {
        /// The Secret.
        secret: String,
        /// Why: `renew point reached`, `signer's key changed`, `names changed`, ...
        why: &'static str,
        /// Expiry of the replaced certificate, if it parsed.
        until: Option<SystemTime>,
    },
    /// Step 1: a next CA was staged in the trust bundle.
    CaStaged {
        /// The CA Secret.
        secret: String,
        /// The earliest moment of the promotion.
        promote_after: SystemTime,
        /// Why the active CA was lost, when this stage recovers it.
        lost: Option<String>,
    },
    /// Step 2: the staged CA became the signing CA.
    CaPromoted {
        /// The CA Secret.
        secret: String,
        /// The earliest moment the old CA leaves the bundle.
        retire_after: SystemTime,
    },
    /// Step 3: old CAs left the trust bundle.
    CaRetired(String),
    /// A lost CA with nothing left to keep trusted (its Secret and every leaf it signed gone,
    /// or all expired) was replaced at once (Warning): the running routers still mount the
    /// old CA, so old and new routers refuse each other until the rollout completes (the
    /// note says so).
    CaReplaced {
        /// The CA Secret.
        secret: String,
        /// What was wrong with it.
        why: String,
    },
    /// The users Secret was missing while routers ran: new passwords were generated
    /// (Warning).
    PasswordsChanged(String),
}

impl CredentialChange {
    /// The Secret that changed.
    pub(crate) fn secret(&self) -> &str {
        match self {
            CredentialChange::Renewed { secret, .. }
            | CredentialChange::CaStaged { secret, .. }
            | CredentialChange::CaPromoted { secret, .. }
            | CredentialChange::CaReplaced { secret, .. } => secret,
            CredentialChange::CaRetired(secret) | CredentialChange::PasswordsChanged(secret) => secret,
        }
    }
}

impl std::fmt::Display for CredentialChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialChange::Renewed { secret, why, until } => {
                write!(f, "renewed the certificate in Secret {secret} ({why}")?;
                match until {
                    Some(t) => write!(f, "; it was valid until {})", human::date(*t)),
                    None => write!(f, ")"),
                }
            }
            CredentialChange::CaStaged { secret, promote_after, lost } => {
                if let Some(why) = lost {
                    write!(
                        f,
                        "CA rotation 1/3: the CA in Secret {secret} was lost ({why}); the certificates it signed stay \
                         trusted and "
                    )?;
                } else {
                    write!(f, "CA rotation 1/3: ")?;
                }
                write!(
                    f,
                    "a new CA is staged in Secret {secret}: ca.crt now holds the old and the new CA. Clients that \
                     verify these routers must trust the new ca.crt before {}: from then on (once every router runs \
                     it) the new CA signs the routers' certificates",
                    human::date(*promote_after)
                )
            }
            CredentialChange::CaPromoted { secret, retire_after } => write!(
                f,
                "CA rotation 2/3: the new CA in Secret {secret} now signs; the old CA stays trusted until at least \
                 {}. Client certificates signed by the old CA must be re-issued from the new one (tls.crt, \
                 tls.key of the Secret) before then",
                human::date(*retire_after)
            ),
            CredentialChange::CaRetired(s) => write!(
                f,
                "CA rotation 3/3: the old CA left the trust bundle of Secret {s}; only the new CA is trusted"
            ),
            CredentialChange::CaReplaced { secret, why } => write!(
                f,
                "the CA in Secret {secret} was replaced at once ({why}): nothing it signed was left to keep trusted, \
                 so every certificate it signed is re-issued by the new CA and the routers roll. Until that rollout \
                 completes, routers started before it trust only the old CA and routers started after it only the \
                 new one: links between an old and a new router are refused, and clients must trust the new \
                 ca.crt to reach the new routers"
            ),
            CredentialChange::PasswordsChanged(s) => write!(
                f,
                "Secret {s} (spec.users) was missing, so new passwords were generated for its users and the \
                 routers roll onto them: clients must use the passwords now in the Secret"
            ),
        }
    }
}
