//! The API server's audit log (with [`Options::audit`](super::Options::audit)): its policy,
//! the requests it records, and reading them back per client.

use super::ControlPlane;

/// One request as the API server's audit log records it.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuditEvent {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// The client's `User-Agent`.
    pub user_agent: String,
    /// Who made it.
    pub user: AuditUser,
    /// What it was about (absent for non-resource URLs).
    pub object_ref: Option<AuditObjectRef>,
    /// The request URI.
    pub request_uri: String,
    /// The response code.
    pub response_status: Option<AuditStatus>,
    /// `ResponseStarted` (watches) or `ResponseComplete`.
    pub stage: String,
    /// When the API server received it (RFC 3339, microseconds).
    pub request_received_timestamp: String,
    /// When it reached [`Self::stage`] (RFC 3339, microseconds).
    pub stage_timestamp: String,
}

impl AuditEvent {
    /// Whether this line counts the request once: a watch when its response started, any
    /// other request when it completed.
    pub fn counts(&self) -> bool {
        if self.verb == "watch" { self.stage == "ResponseStarted" } else { self.stage == "ResponseComplete" }
    }

    /// How long the API server took from receiving it to [`Self::stage`], when both times
    /// parse.
    pub fn latency(&self) -> Option<std::time::Duration> {
        let at =
            |s: &str| time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok();
        let d = at(&self.stage_timestamp)? - at(&self.request_received_timestamp)?;
        d.try_into().ok()
    }
}

/// [`AuditEvent::user`].
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct AuditUser {
    /// The authenticated user name.
    pub username: String,
}

/// [`AuditEvent::object_ref`].
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuditObjectRef {
    /// Plural resource (`secrets`).
    pub resource: String,
    /// Subresource (`status`), empty when none.
    pub subresource: String,
    /// API group, empty for the core group.
    pub api_group: String,
    /// Namespace, empty for cluster-scoped requests.
    pub namespace: String,
    /// Name, empty for collections.
    pub name: String,
}

/// [`AuditEvent::response_status`].
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct AuditStatus {
    /// HTTP status code.
    pub code: u16,
}

/// The audit policy of [`Options::audit`](super::Options::audit): every request at
/// `Metadata` level, once it completed (or, for watches, started).
pub(super) const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

impl ControlPlane {
    /// The requests recorded in the audit log so far (empty unless started with
    /// [`Options::audit`](super::Options::audit)); lines that do not decode are skipped.
    pub fn audit(&self) -> Vec<AuditEvent> {
        // Bytes, not a String: one line that is not UTF-8 must not make the whole log empty.
        let bytes = std::fs::read(self.dir.join("audit.log")).unwrap_or_default();
        bytes.split(|b| *b == b'\n').filter_map(|l| serde_json::from_slice(l).ok()).collect()
    }

    /// The requests made so far by clients whose `User-Agent` starts with `agent` (such as
    /// `qdr-controller/`), each counted once ([`AuditEvent::counts`]).
    pub fn requests_by(&self, agent: &str) -> Vec<AuditEvent> {
        self.audit().into_iter().filter(|e| e.user_agent.starts_with(agent) && e.counts()).collect()
    }
}
