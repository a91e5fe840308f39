//! The two kinds of a link across clusters: [`AccessGrant`] (the offering cluster lets one
//! named site in) and [`Link`] (the using cluster dials out with the token the grant made).
//!
//! Why two kinds and not fields of `Interconnect`: who may let another cluster into a router
//! network and who may make a network dial out are separate decisions, so they are separate
//! resources with separate RBAC (`create accessgrants`, `create links`); an Interconnect's
//! owner can neither. The names are Skupper v2's (`AccessGrant`, `Link`), which users of
//! router networks across clusters already know; unlike Skupper's grant, ours needs no grant
//! server: it issues the token itself, as a Secret the offering cluster's admin hands over.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::enums::string_enum;

string_enum! {
    /// How the remote site's routers link in: as interior routers (`inter-router`, port
    /// 55671 of the Interconnect's Service, mutual TLS) or as edge routers (`edge`, the
    /// edge listener, which a grant gives TLS with the same CA).
    pub enum GrantRole {
        /// An interior router of the remote site joins the mesh (qdrouterd role `inter-router`).
        InterRouter = "inter-router",
        /// An edge router of the remote site uplinks (qdrouterd role `edge`).
        Edge = "edge",
    }
}

/// One address by which the offering cluster's routers are reachable from outside, as the
/// admin names it (a NAT address, a DNS name in front of a load balancer).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalHost {
    /// Host name or IP address (IPv6 without brackets). The routers' server certificate
    /// carries it as a subject alternative name, so the remote site verifies it.
    pub host: String,
    /// TCP port, 1–65535; absent: the role's port of the Interconnect's Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// Lets one remote site link into an interior Interconnect of this namespace: the
/// controller issues a token (Secret `status.tokenSecret`) that holds every address of the
/// routers, their CA certificate, and a client certificate and key for that site alone,
/// signed by a CA of the grant's own (whose key never leaves this cluster). Deleting the
/// grant, or its expiry, cuts the site off: the routers stop trusting that CA, and a router
/// still holding the site's connection restarts; other sites stay linked.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "interconnectedcloud.github.io",
    version = "v1alpha1",
    kind = "AccessGrant",
    plural = "accessgrants",
    singular = "accessgrant",
    shortname = "grant",
    namespaced,
    status = "AccessGrantStatus",
    derive = "PartialEq",
    doc = "An AccessGrant lets one named remote site link its routers into an interior Interconnect of this namespace, with a token (a Secret) the controller issues for that site alone.",
    printcolumn(
        name = "Interconnect",
        type_ = "string",
        json_path = ".spec.interconnect",
        description = "The Interconnect the site links into"
    ),
    printcolumn(
        name = "Site",
        type_ = "string",
        json_path = ".spec.site",
        description = "The remote site the token is for"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        json_path = ".spec.role",
        description = "inter-router or edge"
    ),
    printcolumn(
        name = "Token",
        type_ = "string",
        json_path = ".status.tokenSecret",
        description = "The Secret holding the token"
    ),
    printcolumn(
        name = "Linked",
        type_ = "integer",
        json_path = ".status.connections",
        description = "Open connections of the site's routers now"
    ),
    printcolumn(
        name = "Expires",
        type_ = "string",
        json_path = ".status.expiresAt",
        description = "When the grant ends (empty: never)"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Reason of the Ready condition"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AccessGrantSpec {
    /// Name of the interior Interconnect, in this namespace, that the site links into.
    pub interconnect: String,
    /// Name of the remote site: a DNS-1123 label (at most 63 characters). It is the
    /// subject's common name of the site's client certificate, so the routers' connection
    /// rows name the site, and part of the site's router ids.
    pub site: String,
    /// `inter-router` (default) or `edge`: the role of the connection the site's routers
    /// open. An edge token links edge Interconnects only, an inter-router token interior
    /// ones (a Link checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<GrantRole>,
    /// How long the grant lasts from its creation, a duration of hours, minutes and
    /// seconds (`720h`, `90m`, `1h30m`); absent: until the grant is deleted. When it ends the
    /// site is cut off and the token is refused by the Link's webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry: Option<String>,
    /// Cost of the link for routing (qdrouterd `connector.cost`, inter-router only), 1 to
    /// 2147483647; default 1. The Link may override it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<i32>,
    /// More addresses to put in the token, first, for what the controller cannot see: a
    /// NAT address, a DNS name in front of the load balancer. At most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub external_hosts: Vec<ExternalHost>,
}

/// One address in a token: where the site's routers dial.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: i32,
    /// Where it comes from: `externalHosts`, `LoadBalancer`, `Route`, `NodePort` or
    /// `ClusterIP`.
    pub source: String,
}

/// A connection of the granted site, as the Interconnect's routers report it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteConnection {
    /// The router pod that accepted it.
    pub router: String,
    /// The remote router's id (the connection's container).
    pub remote: String,
    /// The authenticated identity (the client certificate's subject).
    pub user: String,
    /// Seconds the connection has been open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_seconds: Option<i64>,
}

/// What the controller issued for the grant and who is linked in now.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessGrantStatus {
    /// `Ready` (the token is issued and valid), `Expiring` (the grant or its certificate
    /// ends within 30 days).
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Secret, in this namespace, holding the token to hand to the site's admin
    /// (`kubectl get secret <it> -o yaml`, then apply it in the site's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret: Option<String>,
    /// When the grant ends (RFC 3339); absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the token's client certificate expires (RFC 3339); the controller renews it
    /// before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_expires_at: Option<String>,
    /// The certificate (PEM) of the CA that signs this grant's site certificates, and only
    /// them. Its key stays in Secret `<grant>-site-ca` of this namespace. The Interconnect's
    /// routers trust it on the grant's listener while the grant exists and has not ended:
    /// deleting the grant, or its end, takes it out of their trust, and the controller
    /// restarts the routers that still hold a connection of the site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub site_ca: Option<String>,
    /// The addresses in the token, in the order a site tries them.
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub endpoints: Vec<Endpoint>,
    /// Open connections of the site's routers now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<i32>,
    /// The site's connections, the first 16.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub linked: Vec<SiteConnection>,
    /// When a router last reported a connection of the site (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,
}

/// Makes an Interconnect of this namespace link to another cluster's routers with a token
/// that cluster's AccessGrant issued (a Secret applied here). The controller renders the
/// connector and its sslProfile into the routers without restarting them, and reports the
/// link's health as the routers see it.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "interconnectedcloud.github.io",
    version = "v1alpha1",
    kind = "Link",
    plural = "links",
    singular = "link",
    shortname = "qlink",
    namespaced,
    status = "LinkStatus",
    derive = "PartialEq",
    doc = "A Link makes an Interconnect of this namespace dial another cluster's routers with the token (a Secret) that cluster's AccessGrant issued.",
    printcolumn(
        name = "Interconnect",
        type_ = "string",
        json_path = ".spec.interconnect",
        description = "The Interconnect whose routers dial"
    ),
    printcolumn(
        name = "Remote",
        type_ = "string",
        json_path = ".status.remoteRouter",
        description = "The router at the other end"
    ),
    printcolumn(
        name = "Operational",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Operational\")].status",
        description = "Whether the link is up"
    ),
    printcolumn(
        name = "Expires",
        type_ = "string",
        json_path = ".status.certificateExpiresAt",
        description = "When the token's certificate expires"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Operational\")].reason",
        description = "Reason of the Operational condition"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct LinkSpec {
    /// Name of the Interconnect, in this namespace, whose routers dial: interior for an
    /// `inter-router` token, edge for an `edge` token.
    pub interconnect: String,
    /// Name of the token Secret, in this namespace (type
    /// `interconnectedcloud.github.io/link-token`).
    pub token_secret: String,
    /// Cost of the link (inter-router only), 1 to 2147483647; absent: the token's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<i32>,
    /// Whether the routers check that the remote certificate names the host they dial
    /// (default `true`: the grant's certificate carries every address in the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_hostname: Option<bool>,
}

/// The link's health, read from the dialing routers' `connector` and `connection` rows.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkStatus {
    /// `Configured` (the connector is in every router), `Operational` (a router's
    /// connector reports `SUCCESS`; otherwise its `connectionMsg` verbatim), `Expiring`.
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The grant's site name, as the token says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The endpoint the routers dial (`host:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The router id at the other end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_router: Option<String>,
    /// Seconds the link's connection has been open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_seconds: Option<i64>,
    /// The TLS protocol of the connection (`TLSv1.3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_protocol: Option<String>,
    /// The link's cost in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<i32>,
    /// When the token's client certificate expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_expires_at: Option<String>,
}
