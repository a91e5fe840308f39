//! The formats names must have (DNS labels and subdomains, IANA service names) and the one
//! character rule for values written into the router configuration. Pure predicates over a
//! string: they report nothing themselves.

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, without the length limit.
fn is_label_chars(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 label of at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_label_chars(s)
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// A DNS-1123 subdomain of at most 253 characters (Secret and ConfigMap names).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_chars)
}

/// An IANA service name (`IANA_SVC_NAME`): at most 15 characters of `[a-z0-9-]`, at least
/// one letter, no leading, trailing or double '-'. Required of container port names.
pub fn is_iana_svc_name(s: &str) -> bool {
    s.len() <= 15 && is_label_chars(s) && s.bytes().any(|b| b.is_ascii_lowercase()) && !s.contains("--")
}

/// A value the router's configuration can carry: anything but NUL (the configuration is
/// JSON-escaped; the router keeps values as C strings).
pub fn is_config_safe(s: &str) -> bool {
    !s.contains('\0')
}

/// The name part of a qualified name: at most 63 characters, alphanumerics, '-', '_' and
/// '.', starting and ending with an alphanumeric (apimachinery's `qualifiedNameFmt`).
fn is_qualified_part(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.len() <= 63
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// A label or annotation key (apimachinery's `IsQualifiedName`): a name part (see
/// [`is_qualified_part`]), optionally after a DNS-1123 subdomain prefix and `/`.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => !prefix.is_empty() && is_dns_subdomain(prefix) && is_qualified_part(name),
        None => is_qualified_part(s),
    }
}

/// A label value (apimachinery's `IsValidLabelValue`): empty, or a name part of at most 63
/// characters.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_qualified_part(s)
}
