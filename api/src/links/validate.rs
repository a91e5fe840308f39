//! Validation of [`AccessGrant`] and [`Link`] specs, and of a Link against what it refers to
//! (its token and its Interconnect). Pure: the webhook and the controller call the same
//! functions; the CRDs carry the rules that need nothing outside the object as CEL
//! ([`super::crd`]), with the same messages.

use super::token::Token;
use super::{AccessGrant, GrantRole, Link};
use crate::validate::{ErrorType, FieldError, is_dns_label, is_dns_subdomain, is_dns1035_label};

/// Message of `site`'s format rule (CEL `grant-site-format`).
pub const SITE_FORMAT: &str =
    "must be a DNS-1123 label of at most 32 characters (lowercase letters, digits and '-')";
/// Message of `expiry`'s format rule (CEL `grant-expiry-format`).
pub const EXPIRY_FORMAT: &str =
    "must be a duration of hours, minutes and seconds such as 720h, 90m or 1h30m, at least 1m";
/// Longest site name: it becomes part of router ids and certificate names.
pub const MAX_SITE: usize = 32;
/// Longest grant: 10 years.
pub const MAX_EXPIRY_SECONDS: u64 = 10 * 366 * 24 * 3600;

/// Seconds of a duration written as `<n>h<n>m<n>s` (each part optional, in that order, at
/// least one; `0` parts allowed); `None` when malformed, shorter than a minute or longer
/// than [`MAX_EXPIRY_SECONDS`].
pub fn expiry_seconds(s: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut rest = s;
    let mut last_unit = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        let unit = rest[digits..].chars().next()?;
        let (rank, factor) = match unit {
            'h' => (1, 3600),
            'm' => (2, 60),
            's' => (3, 1),
            _ => return None,
        };
        if rank <= last_unit {
            return None;
        }
        last_unit = rank;
        total = total.checked_add(n.checked_mul(factor)?)?;
        rest = &rest[digits + 1..];
    }
    (last_unit > 0 && (60..=MAX_EXPIRY_SECONDS).contains(&total)).then_some(total)
}

fn name(errs: &mut Vec<FieldError>, path: &str, value: &str, what: &str, dns1035: bool) {
    if value.is_empty() {
        errs.push(FieldError::new(path.into(), ErrorType::Required, None, what.to_string()));
    } else if (dns1035 && !is_dns1035_label(value)) || (!dns1035 && !is_dns_subdomain(value)) {
        let rule = if dns1035 {
            "must be a DNS-1035 label (an Interconnect's name)"
        } else {
            "must be a DNS-1123 subdomain (a Secret's name)"
        };
        errs.push(FieldError::new(path.into(), ErrorType::Invalid, Some(value.into()), rule));
    }
}

fn cost(errs: &mut Vec<FieldError>, path: &str, cost: Option<i32>) {
    if let Some(c) = cost.filter(|c| *c < 1) {
        errs.push(FieldError::new(
            path.into(),
            ErrorType::Invalid,
            Some(c.into()),
            "must be from 1 to 2147483647 (qdrouterd's least link cost is 1)",
        ));
    }
}

/// Whether `host` is a host name (DNS-1123 subdomain) or an IP address.
pub fn is_host(host: &str) -> bool {
    host.parse::<std::net::IpAddr>().is_ok() || is_dns_subdomain(&host.to_ascii_lowercase())
}

/// Every violation of an AccessGrant's spec.
pub fn validate_grant(g: &AccessGrant) -> Vec<FieldError> {
    let s = &g.spec;
    let mut errs = Vec::new();
    name(
        &mut errs,
        "spec.interconnect",
        &s.interconnect,
        "the interior Interconnect the site links into",
        true,
    );
    if s.site.is_empty() {
        errs.push(FieldError::new("spec.site".into(), ErrorType::Required, None, "the remote site's name"));
    } else if !is_dns_label(&s.site) || s.site.len() > MAX_SITE {
        errs.push(FieldError::new(
            "spec.site".into(),
            ErrorType::Invalid,
            Some(s.site.clone().into()),
            SITE_FORMAT,
        ));
    }
    if let Some(r) = s.role.as_ref().filter(|r| !r.is_supported()) {
        errs.push(FieldError::new(
            "spec.role".into(),
            ErrorType::NotSupported,
            Some(r.as_str().into()),
            "supported values: \"inter-router\", \"edge\"",
        ));
    }
    if let Some(e) = s.expiry.as_deref().filter(|e| expiry_seconds(e).is_none()) {
        errs.push(FieldError::new("spec.expiry".into(), ErrorType::Invalid, Some(e.into()), EXPIRY_FORMAT));
    }
    cost(&mut errs, "spec.cost", s.cost);
    if s.cost.is_some() && s.role == Some(GrantRole::Edge) {
        errs.push(FieldError::new(
            "spec.cost".into(),
            ErrorType::Forbidden,
            None,
            "an edge link has no cost (qdrouterd applies cost to inter-router connections only)",
        ));
    }
    for (i, h) in s.external_hosts.iter().enumerate() {
        let path = format!("spec.externalHosts[{i}]");
        if h.host.is_empty() {
            errs.push(FieldError::new(
                format!("{path}.host"),
                ErrorType::Required,
                None,
                "a host name or IP address",
            ));
        } else if !is_host(&h.host) {
            errs.push(FieldError::new(
                format!("{path}.host"),
                ErrorType::Invalid,
                Some(h.host.clone().into()),
                "must be a DNS name or an IP address",
            ));
        }
        if let Some(p) = h.port.filter(|p| !(1..=65535).contains(p)) {
            errs.push(FieldError::new(
                format!("{path}.port"),
                ErrorType::Invalid,
                Some(p.into()),
                "must be 1-65535",
            ));
        }
        if s.external_hosts[..i].iter().any(|o| o.host.eq_ignore_ascii_case(&h.host) && o.port == h.port) {
            errs.push(FieldError::new(
                path.clone(),
                ErrorType::Duplicate,
                Some(serde_json::to_value(h).unwrap_or_default()),
                "",
            ));
        }
    }
    errs
}

/// Every violation of a Link's spec on its own.
pub fn validate_link(l: &Link) -> Vec<FieldError> {
    let s = &l.spec;
    let mut errs = Vec::new();
    name(&mut errs, "spec.interconnect", &s.interconnect, "the Interconnect whose routers dial", true);
    name(&mut errs, "spec.tokenSecret", &s.token_secret, "the token Secret's name", false);
    cost(&mut errs, "spec.cost", s.cost);
    errs
}

/// Every violation of a Link against what it refers to: its token (`Err`: the token's own
/// violations, reported at `spec.tokenSecret`; `None`: the Secret does not exist) and the
/// role of its Interconnect (`Some(true)` interior, `Some(false)` edge, `None` not found).
/// An Interconnect that does not exist yet is not a violation (it may be applied next); a
/// token that does not exist is, as the Link could never work without it.
pub fn validate_link_refs(
    l: &Link,
    token: Option<Result<&Token, &[FieldError]>>,
    interior: Option<bool>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let at = "spec.tokenSecret";
    match token {
        None => errs.push(FieldError::new(
            at.into(),
            ErrorType::Invalid,
            Some(l.spec.token_secret.clone().into()),
            "no such Secret in this namespace: apply the token Secret first",
        )),
        Some(Err(problems)) => {
            for p in problems {
                errs.push(FieldError::new(
                    at.into(),
                    p.error_type,
                    Some(l.spec.token_secret.clone().into()),
                    format!("the token's {}: {}", p.field, p.body()),
                ));
            }
        }
        Some(Ok(t)) => {
            let wrong = match (&t.role, interior) {
                (GrantRole::InterRouter, Some(false)) => {
                    Some("an inter-router token links an interior Interconnect, and this one is edge")
                }
                (GrantRole::Edge, Some(true)) => {
                    Some("an edge token links an edge Interconnect, and this one is interior")
                }
                _ => None,
            };
            if let Some(why) = wrong {
                errs.push(FieldError::new(
                    at.into(),
                    ErrorType::Invalid,
                    Some(l.spec.token_secret.clone().into()),
                    format!("{why}: ask for a token of the other role, or link another Interconnect"),
                ));
            }
            if l.spec.cost.is_some() && t.role == GrantRole::Edge {
                errs.push(FieldError::new(
                    "spec.cost".into(),
                    ErrorType::Forbidden,
                    None,
                    "an edge link has no cost (qdrouterd applies cost to inter-router connections only)",
                ));
            }
        }
    }
    errs
}
