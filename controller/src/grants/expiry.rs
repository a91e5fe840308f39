//! Expiry warnings of links across clusters, from the Interconnect's pass: the gauge
//! `qdr_link_expiry_seconds` of each AccessGrant and each Link's token that ends, and a
//! Warning Event on the object, at most once a day, once it ends within 30 days
//! (`EXPIRING_WINDOW`): `GrantExpiring` on an AccessGrant (the site
//! is cut off at its end), `LinkExpiring` on a Link (its token stops working). The alert
//! `QdrLinkExpiring` fires on the gauge a week ahead.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use qdr_api::links::{AccessGrant, Link};

use super::{EXPIRING_WINDOW, ends};
use crate::site_links::Resolved;
use crate::validated::ValidatedInterconnect;

/// When each grant among `grants` and each Link judged in `links` ends, as `(kind, name,
/// when)`: a grant's end ([`ends`]); a Link's token's `token-expires`. Those that never end
/// are left out.
pub fn ends_of(grants: &[Arc<AccessGrant>], links: &Resolved) -> Vec<(&'static str, String, SystemTime)> {
    let mut out: Vec<(&'static str, String, SystemTime)> = Vec::new();
    for g in grants {
        if let Some(end) = ends(g) {
            out.push(("AccessGrant", g.metadata.name.clone().unwrap_or_default(), end));
        }
    }
    for j in &links.judged {
        let end = j.expires.as_deref().and_then(|e| e.parse::<k8s_openapi::jiff::Timestamp>().ok());
        if let Some(end) = end {
            out.push(("Link", j.link.clone(), SystemTime::from(end)));
        }
    }
    out
}

/// The Warning about one end at `now`, when within [`EXPIRING_WINDOW`]: `(reason, note)`.
pub fn warning(kind: &str, name: &str, end: SystemTime, now: SystemTime) -> Option<(&'static str, String)> {
    if end > now + EXPIRING_WINDOW {
        return None;
    }
    let when = match end.duration_since(now) {
        Ok(left) => format!("in {}", crate::human::duration(left)),
        Err(_) => "now".to_string(),
    };
    Some(match kind {
        "AccessGrant" => (
            crate::reasons::LINK_EVENTS[0].1,
            format!(
                "AccessGrant {name} ends {when}: its site is cut off then; make a new grant and hand its token to the \
                 site's admin before"
            ),
        ),
        _ => (
            crate::reasons::LINK_EVENTS[1].1,
            format!(
                "the token of Link {name} ends {when}: the link stops then; ask the other cluster's admin for a new \
                 token and apply it (the routers do not restart)"
            ),
        ),
    })
}

/// Sets the gauge (on `metrics`) and sends the due Warnings (with `recorder`) for
/// Interconnect `o`'s grants and Links; `due` says whether a Warning about a key
/// (`namespace/interconnect/kind/name`) is due, and marks it sent.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn report(
    metrics: &crate::metrics::Metrics,
    recorder: &crate::recorder::Recorder,
    due: &(dyn Fn(String) -> bool + Sync),
    o: &ValidatedInterconnect,
    grants: &[Arc<AccessGrant>],
    links: &[(Arc<Link>, Option<Arc<Secret>>)],
    judged: &Resolved,
    now: SystemTime,
) {
    let ends = ends_of(grants, judged);
    metrics.link_expiry(o.namespace(), o.name(), &ends);
    for (kind, name, end) in &ends {
        let Some((reason, note)) = warning(kind, name, *end, now) else { continue };
        let regarding = match *kind {
            "AccessGrant" => {
                grants.iter().find(|g| g.metadata.name.as_deref() == Some(name)).map(|g| g.object_ref(&()))
            }
            _ => links
                .iter()
                .find(|(l, _)| l.metadata.name.as_deref() == Some(name))
                .map(|(l, _)| l.object_ref(&())),
        };
        let Some(regarding) = regarding else { continue };
        if !due(format!("{}/{}/{kind}/{name}", o.namespace(), o.name())) {
            continue;
        }
        let ev = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Expiring".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&ev, &regarding).await {
            tracing::warn!(%kind, %name, error = %e, "could not publish an expiry Warning");
        }
    }
}
