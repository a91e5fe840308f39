//! The token: one Secret the offering cluster's controller writes for an `AccessGrant` and
//! the using cluster's admin applies, read by a `Link`. Everything a person needs to judge it is in clear text, in its
//! annotations; the credentials are its data.
//!
//! ```yaml
//! apiVersion: v1
//! kind: Secret
//! type: interconnectedcloud.github.io/link-token
//! metadata:
//!   name: hub-site-b-token
//!   labels: {interconnectedcloud.github.io/link-token: "true"}
//!   annotations:
//!     interconnectedcloud.github.io/token-role: inter-router
//!     interconnectedcloud.github.io/token-endpoints: "hub.example.com:55671,203.0.113.7:55671"
//!     interconnectedcloud.github.io/token-expires: "2027-01-01T00:00:00Z"   # absent: never
//!     interconnectedcloud.github.io/token-site: site-b
//!     interconnectedcloud.github.io/token-grant: hub-ns/site-b
//!     interconnectedcloud.github.io/token-cost: "1"
//! data: {ca.crt: ..., tls.crt: ..., tls.key: ...}
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;

use super::GrantRole;
use crate::validate::{ErrorType, FieldError};

/// The Secret `type` of a token.
pub const TOKEN_TYPE: &str = "interconnectedcloud.github.io/link-token";
/// The label every token carries (value `"true"`), which the webhook selects tokens by.
pub const TOKEN_LABEL: &str = "interconnectedcloud.github.io/link-token";
/// Annotation: the role of the connection (`inter-router` or `edge`).
pub const ROLE_ANNOTATION: &str = "interconnectedcloud.github.io/token-role";
/// Annotation: the addresses to dial, `host:port` separated by commas, in order (an IPv6
/// address in brackets).
pub const ENDPOINTS_ANNOTATION: &str = "interconnectedcloud.github.io/token-endpoints";
/// Annotation: when the token ends (RFC 3339); absent: never.
pub const EXPIRES_ANNOTATION: &str = "interconnectedcloud.github.io/token-expires";
/// Annotation: the site the token is for.
pub const SITE_ANNOTATION: &str = "interconnectedcloud.github.io/token-site";
/// Annotation: `<namespace>/<name>` of the grant in the offering cluster.
pub const GRANT_ANNOTATION: &str = "interconnectedcloud.github.io/token-grant";
/// Annotation: the link cost the grant proposes (1 to 2147483647).
pub const COST_ANNOTATION: &str = "interconnectedcloud.github.io/token-cost";
/// Data: the offering routers' CA certificate(s), PEM (a bundle while their CA rotates),
/// then the root above that CA, which cross-signs each of its generations, so the site keeps
/// verifying the routers across a rotation without a new token.
pub const CA_KEY: &str = "ca.crt";
/// Data: the site's client certificate, PEM.
pub const CERT_KEY: &str = "tls.crt";
/// Data: the site's private key, PEM.
pub const KEY_KEY: &str = "tls.key";
/// The subject organization of every certificate an AccessGrant issues to a site: what tells
/// a site's connection (its `user`, the certificate's subject under SASL EXTERNAL) from any
/// other inter-router or edge connection, so a connection of a site whose grant is gone can
/// be found and cut ([`site_of_user`]).
pub const SITE_ORGANIZATION: &str = "qdr-operator-site";

/// The site identity (`<site>.<grant>.<namespace>`, the certificate's common name) of a
/// connection's `user` as qdrouterd 1.19 reports it under SASL EXTERNAL (the subject in RFC
/// 2253 order, `O=qdr-operator-site,CN=<identity>`; any order is read), when the subject's
/// organization is [`SITE_ORGANIZATION`]; `None` for any other user.
pub fn site_of_user(user: &str) -> Option<&str> {
    let mut cn = None;
    let mut site = false;
    for part in user.split(',') {
        match part.trim().split_once('=') {
            Some(("CN", v)) => cn = Some(v),
            Some(("O", v)) => site |= v == SITE_ORGANIZATION,
            _ => {}
        }
    }
    cn.filter(|_| site)
}

/// Most endpoints a token may hold.
pub const MAX_ENDPOINTS: usize = 32;

/// A token, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The connection's role.
    pub role: GrantRole,
    /// `(host, port)` to dial, in order.
    pub endpoints: Vec<(String, u16)>,
    /// When it ends; `None`: never.
    pub expires: Option<Timestamp>,
    /// The site it is for.
    pub site: String,
    /// `<namespace>/<name>` of the grant.
    pub grant: String,
    /// The proposed cost.
    pub cost: i32,
}

/// Formats endpoints as [`ENDPOINTS_ANNOTATION`] holds them.
pub fn format_endpoints<'a>(endpoints: impl IntoIterator<Item = (&'a str, u16)>) -> String {
    endpoints
        .into_iter()
        .map(|(h, p)| if h.contains(':') { format!("[{h}]:{p}") } else { format!("{h}:{p}") })
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads one `host:port` (`[v6]:port`).
fn parse_endpoint(s: &str) -> Option<(String, u16)> {
    let s = s.trim();
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => {
            let (h, p) = rest.split_once("]:")?;
            (h, p)
        }
        None => s.rsplit_once(':')?,
    };
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
    valid.then(|| (host.to_string(), port))
}

fn has_pem(data: &BTreeMap<String, k8s_openapi::ByteString>, key: &str, label: &str) -> bool {
    data.get(key)
        .and_then(|b| std::str::from_utf8(&b.0).ok())
        .is_some_and(|t| t.contains("-----BEGIN ") && t.contains(label) && t.contains("-----END "))
}

/// Reads a token Secret and lists every problem, each at its path in the Secret
/// (`metadata.annotations[...]`, `data[tls.key]`, `type`). `now` judges the expiry: a token
/// that ended is refused (`Invalid` at the expiry annotation), as the grant no longer lets
/// the site in.
///
/// # Errors
/// Every violation: a wrong `type`, a missing or malformed annotation, a missing or non-PEM
/// `ca.crt`, `tls.crt` or `tls.key`, an expired token.
pub fn read_token(secret: &Secret, now: Timestamp) -> Result<Token, Vec<FieldError>> {
    let mut errs = Vec::new();
    let ann = |k: &str| format!("metadata.annotations[{k}]");
    if secret.type_.as_deref() != Some(TOKEN_TYPE) {
        errs.push(FieldError::new(
            "type".into(),
            ErrorType::Invalid,
            Some(secret.type_.clone().unwrap_or_default().into()),
            format!("a token Secret has type {TOKEN_TYPE}: apply the Secret the AccessGrant's controller issued, unchanged"),
        ));
    }
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    let get = |k: &str| annotations.get(k).map(String::as_str);
    let role = match get(ROLE_ANNOTATION) {
        None => {
            errs.push(FieldError::new(ann(ROLE_ANNOTATION), ErrorType::Required, None, "the token's role"));
            GrantRole::InterRouter
        }
        Some(r) => {
            let role = GrantRole::from(r);
            if !role.is_supported() {
                errs.push(FieldError::new(
                    ann(ROLE_ANNOTATION),
                    ErrorType::NotSupported,
                    Some(r.into()),
                    "supported values: \"inter-router\", \"edge\"",
                ));
            }
            role
        }
    };
    let mut endpoints = Vec::new();
    match get(ENDPOINTS_ANNOTATION).filter(|e| !e.trim().is_empty()) {
        None => errs.push(FieldError::new(
            ann(ENDPOINTS_ANNOTATION),
            ErrorType::Required,
            None,
            "at least one host:port to dial",
        )),
        Some(list) => {
            let items: Vec<&str> = list.split(',').collect();
            if items.len() > MAX_ENDPOINTS {
                errs.push(FieldError::new(
                    ann(ENDPOINTS_ANNOTATION),
                    ErrorType::TooMany,
                    Some(items.len().into()),
                    format!("must have at most {MAX_ENDPOINTS} items"),
                ));
            }
            for item in items.into_iter().take(MAX_ENDPOINTS) {
                match parse_endpoint(item) {
                    Some(e) => endpoints.push(e),
                    None => errs.push(FieldError::new(
                        ann(ENDPOINTS_ANNOTATION),
                        ErrorType::Invalid,
                        Some(item.into()),
                        "must be host:port ([address]:port for IPv6), port 1-65535",
                    )),
                }
            }
        }
    }
    let expires = match get(EXPIRES_ANNOTATION) {
        None => None,
        Some(t) => match t.parse::<Timestamp>() {
            Ok(t) => {
                if t <= now {
                    errs.push(FieldError::new(
                        ann(EXPIRES_ANNOTATION),
                        ErrorType::Invalid,
                        Some(t.to_string().into()),
                        "the token has expired: ask the other cluster's admin for a new AccessGrant",
                    ));
                }
                Some(t)
            }
            Err(_) => {
                errs.push(FieldError::new(
                    ann(EXPIRES_ANNOTATION),
                    ErrorType::Invalid,
                    Some(t.into()),
                    "must be an RFC 3339 time",
                ));
                None
            }
        },
    };
    let site = get(SITE_ANNOTATION).unwrap_or_default().to_string();
    if site.is_empty() {
        errs.push(FieldError::new(
            ann(SITE_ANNOTATION),
            ErrorType::Required,
            None,
            "the site the token is for",
        ));
    }
    let grant = get(GRANT_ANNOTATION).unwrap_or_default().to_string();
    let cost = match get(COST_ANNOTATION) {
        None => 1,
        Some(c) => match c.parse::<i32>() {
            Ok(c) if c >= 1 => c,
            _ => {
                errs.push(FieldError::new(
                    ann(COST_ANNOTATION),
                    ErrorType::Invalid,
                    Some(c.into()),
                    "must be an integer from 1 to 2147483647",
                ));
                1
            }
        },
    };
    let data = secret.data.clone().unwrap_or_default();
    for (key, label) in [(CA_KEY, "CERTIFICATE"), (CERT_KEY, "CERTIFICATE"), (KEY_KEY, "PRIVATE KEY")] {
        if !data.contains_key(key) {
            errs.push(FieldError::new(
                format!("data[{key}]"),
                ErrorType::Required,
                None,
                "a token holds ca.crt, tls.crt and tls.key",
            ));
        } else if !has_pem(&data, key, label) {
            errs.push(FieldError::new(
                format!("data[{key}]"),
                ErrorType::Invalid,
                None,
                format!("must be PEM ({label})"),
            ));
        }
    }
    if errs.is_empty() { Ok(Token { role, endpoints, expires, site, grant, cost }) } else { Err(errs) }
}
