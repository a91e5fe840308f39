//! Which entities of a router configuration a running qdrouterd 1.19 takes through AMQP
//! management, and the names they carry (docs/live-configuration.md).
//!
//! A configuration splits in two ([`split`]): the **start-up part**, which a router reads
//! only when it starts (the `router` entity, the health and management listeners, the
//! `inter-router` and `edge` listeners the mesh dials, every `sslProfile`: its files are
//! Secrets mounted in the pod), and the **live entities**: `address`, `linkRoute`,
//! `autoLink`, every connector and the `normal` and `route-container` listeners. Measured on
//! the router (the page's table): each live type answers `CREATE` with 201 and `DELETE` with
//! 204, none has `UPDATE` (the schema lists `CREATE` and `DELETE` only; connectors and
//! listeners answer 501, addresses, link routes and auto-links never answer).
//!
//! Every live entity has a name ([`named`]), so that the controller can delete it: the
//! user's for a named connector or listener, else `qdr-operator-<kind>-<hash>` with
//! `<hash>` the first 12 hex digits of the SHA-256 of the section's attributes as rendered
//! (`-2`, `-3`, ... for a repeat). A changed address, link route or auto-link is thus a new
//! name.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sha2::Digest;

use super::{
    LINK_PREFIX, LINK_PROFILE_PREFIX, MANAGEMENT_LISTENER, MANAGEMENT_PROFILE, RouterConfig, Section, Value,
};
use crate::messages::HEALTH_LISTENER;

/// The start of every name [`named`] gives.
pub const NAME_PREFIX: &str = "qdr-operator-";

/// The live entity types in the order they are created (and the reverse of the order they
/// are deleted): what a link route or auto-link names in `connection` exists before it and
/// is gone only after it, and a link's sslProfile before its connector (only a Link's
/// sslProfile is live: [`is_live`]).
pub const CREATE_ORDER: [&str; 6] =
    ["sslProfile", "connector", "listener", "address", "linkRoute", "autoLink"];

/// Whether `section` is live: written to running routers through management rather than
/// read at start ([module docs](self)).
pub fn is_live(section: &Section<'_>) -> bool {
    match section.entity {
        "address" | "linkRoute" | "autoLink" | "connector" => true,
        // A link's profile: its files are in the links Secret, mounted once for every link.
        "sslProfile" => {
            matches!(section.get("name"), Some(Value::Str(n)) if n.starts_with(LINK_PROFILE_PREFIX))
        }
        "listener" => {
            let named = |n: &str| section.get("name") == Some(&Value::Str(Cow::Borrowed(n)));
            let role = section.get("role");
            let client = |r: &str| role == Some(&Value::Str(Cow::Borrowed(r)));
            !named(HEALTH_LISTENER)
                && !named(MANAGEMENT_LISTENER)
                && (client("normal") || client("route-container"))
        }
        _ => false,
    }
}

/// The kind word of a generated name: `address`, `link-route`, `auto-link`, `connector`,
/// `listener`.
fn kind_word(entity: &str) -> &str {
    match entity {
        "linkRoute" => "link-route",
        "autoLink" => "auto-link",
        other => other,
    }
}

/// The name [`named`] gives an unnamed live section: `qdr-operator-<kind>-<12 hex digits>`,
/// the digits from the SHA-256 of its attributes as rendered (`"key": value` in emission
/// order, each followed by a newline).
pub fn generated_name(section: &Section<'_>) -> String {
    let hex = hex12(&sha2::Sha256::digest(attributes_text(section)));
    format!("{NAME_PREFIX}{}-{hex}", kind_word(section.entity))
}

/// The attributes of `section` as rendered, `key: value` in emission order, each followed
/// by a newline: what [`generated_name`] and [`field_digests`] hash.
fn attributes_text(section: &Section<'_>) -> Vec<u8> {
    let mut text = Vec::new();
    for (k, v) in &section.attrs {
        text.extend_from_slice(k.as_bytes());
        text.extend_from_slice(b": ");
        text.extend_from_slice(v.to_string().as_bytes());
        text.push(b'\n');
    }
    text
}

/// The first 12 hex digits (6 bytes) of `digest`.
fn hex12(digest: &[u8]) -> String {
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// `config` with a `name` first in every live section that has none ([`generated_name`],
/// with `-2`, `-3`, ... for a repeat of the same attributes). Start-up sections and named
/// ones are left as they are.
pub fn named(mut config: RouterConfig<'_>) -> RouterConfig<'_> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for s in &mut config.sections {
        if !is_live(s) || s.get("name").is_some() {
            continue;
        }
        let base = generated_name(s);
        let n = seen.entry(base.clone()).or_insert(0);
        *n += 1;
        let name = if *n == 1 { base } else { format!("{base}-{n}") };
        s.attrs.insert(0, ("name", Value::Str(Cow::Owned(name))));
    }
    config
}

/// `config` in its two parts, each in the configuration's order: the start-up part and the
/// live entities ([`is_live`]).
pub fn split<'a>(config: &RouterConfig<'a>) -> (RouterConfig<'a>, RouterConfig<'a>) {
    let (live, start_up): (Vec<_>, Vec<_>) = config.sections.iter().cloned().partition(|s| is_live(s));
    (RouterConfig { sections: start_up }, RouterConfig { sections: live })
}

/// The field of the Interconnect spec (or the operator's own part) that `section` of a
/// rendered configuration comes from, as a user writes it: `spec.deploymentPlan.role` for
/// the `router` entity, `spec.deploymentPlan.livenessPort` for the health listener,
/// `spec.interRouterListeners`, `spec.edgeListeners` or `spec.listeners` for a listener by
/// its role, `spec.sslProfiles`, `spec.addresses`, `spec.linkRoutes`, `spec.autoLinks`, and
/// `spec.interRouterConnectors`, `spec.edgeConnectors` or `spec.connectors` for a
/// connector by its role; `the management listener` for what the operator adds
/// ([`MANAGEMENT_LISTENER`] and its profile). Names what forced a roll in the
/// `ConfigChanged` Event (docs/live-configuration.md).
pub fn field_of(section: &Section<'_>) -> &'static str {
    let text = |k: &str| match section.get(k) {
        Some(Value::Str(s)) => Some(s.as_ref()),
        _ => None,
    };
    match (section.entity, text("name"), text("role")) {
        ("router", ..) => "spec.deploymentPlan.role",
        ("listener", Some(HEALTH_LISTENER), _) => "spec.deploymentPlan.livenessPort",
        ("listener", Some(MANAGEMENT_LISTENER), _) | ("sslProfile", Some(MANAGEMENT_PROFILE), _) => {
            "the management listener"
        }
        ("connector", Some(n), _) if n.starts_with(LINK_PREFIX) => "a Link",
        ("sslProfile", Some(n), _) if n.starts_with(LINK_PROFILE_PREFIX) => "a Link",
        ("listener", _, Some("inter-router")) => "spec.interRouterListeners",
        ("listener", _, Some("edge")) => "spec.edgeListeners",
        ("listener", ..) => "spec.listeners",
        ("sslProfile", ..) => "spec.sslProfiles",
        ("address", ..) => "spec.addresses",
        ("linkRoute", ..) => "spec.linkRoutes",
        ("autoLink", ..) => "spec.autoLinks",
        ("connector", _, Some("inter-router")) => "spec.interRouterConnectors",
        ("connector", _, Some("edge")) => "spec.edgeConnectors",
        ("connector", ..) => "spec.connectors",
        _ => "another entity",
    }
}

/// A digest of `config` by field ([`field_of`]): `field=<12 hex digits>` for each field
/// with a section, sorted by field and joined by `;`, the digits from the SHA-256 of the
/// field's sections as rendered, in order. Two digests name the fields that changed
/// ([`changed_fields`]); at most 14 fields, so about 600 bytes (kept as an annotation of
/// the router workload).
pub fn field_digests(config: &RouterConfig<'_>) -> String {
    let mut by_field: BTreeMap<&str, sha2::Sha256> = BTreeMap::new();
    for s in &config.sections {
        let d = by_field.entry(field_of(s)).or_default();
        d.update(s.entity.as_bytes());
        d.update(b"\n");
        d.update(attributes_text(s));
        d.update(b"\n");
    }
    (by_field.into_iter()).map(|(f, d)| format!("{f}={}", hex12(&d.finalize()))).collect::<Vec<_>>().join(";")
}

/// The fields whose digest differs between two [`field_digests`] (added, removed or
/// changed), sorted; empty when either is not such a digest (written by an older release).
pub fn changed_fields(old: &str, new: &str) -> Vec<String> {
    let parse = |s: &str| -> Option<BTreeMap<String, String>> {
        (s.split(';').filter(|p| !p.is_empty()))
            .map(|p| p.split_once('=').map(|(f, d)| (f.to_string(), d.to_string())))
            .collect()
    };
    let (Some(old), Some(new)) = (parse(old), parse(new)) else { return Vec::new() };
    let fields: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    fields.into_iter().filter(|f| old.get(*f) != new.get(*f)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(entity: &'static str, attrs: &[(&'static str, Value<'static>)]) -> Section<'static> {
        Section { entity, attrs: attrs.to_vec() }
    }
    fn s(v: &'static str) -> Value<'static> {
        Value::Str(Cow::Borrowed(v))
    }

    #[test]
    fn client_entities_are_live_and_what_a_router_reads_at_start_is_not() {
        let live = [
            section("address", &[("prefix", s("a"))]),
            section("linkRoute", &[("prefix", s("q"))]),
            section("autoLink", &[("address", s("q"))]),
            section("connector", &[("name", s("broker")), ("role", s("route-container"))]),
            section("connector", &[("name", s("up")), ("role", s("inter-router"))]),
            section("listener", &[("name", s("amqp")), ("role", s("normal"))]),
            section("listener", &[("role", s("route-container"))]),
        ];
        let start_up = [
            section("router", &[("mode", s("interior"))]),
            section("listener", &[("name", s(HEALTH_LISTENER)), ("http", Value::Bool(true))]),
            section("listener", &[("name", s(MANAGEMENT_LISTENER)), ("role", s("normal"))]),
            section("listener", &[("name", s("mesh")), ("role", s("inter-router"))]),
            section("listener", &[("name", s("edges")), ("role", s("edge"))]),
            section("sslProfile", &[("name", s("tls"))]),
        ];
        assert!(live.iter().all(is_live));
        assert!(!start_up.iter().any(is_live));
        let all = RouterConfig { sections: start_up.iter().chain(&live).cloned().collect() };
        let (a, b) = split(&all);
        assert_eq!((a.sections, b.sections), (start_up.to_vec(), live.to_vec()));
    }

    #[test]
    fn unnamed_live_sections_get_a_name_from_their_attributes() {
        let config = RouterConfig {
            sections: vec![
                section("router", &[("mode", s("interior"))]),
                section("address", &[("prefix", s("a")), ("distribution", s("closest"))]),
                section("address", &[("prefix", s("a")), ("distribution", s("multicast"))]),
                section("address", &[("prefix", s("a")), ("distribution", s("closest"))]),
                section("linkRoute", &[("prefix", s("q")), ("direction", s("in"))]),
                section("connector", &[("name", s("broker")), ("role", s("normal"))]),
            ],
        };
        let named = named(config);
        let names: Vec<String> =
            named.sections.iter().map(|s| s.get("name").map(Value::to_string).unwrap_or_default()).collect();
        assert_eq!(names[0], "", "the router section is not live");
        assert!(
            names[1].starts_with("\"qdr-operator-address-")
                && names[1].len() == 2 + NAME_PREFIX.len() + 8 + 12,
            "{}",
            names[1]
        );
        assert_ne!(names[1], names[2], "other attributes, another name");
        assert_eq!(names[3], format!("{}-2\"", names[1].trim_end_matches('"')), "a repeat");
        assert!(names[4].starts_with("\"qdr-operator-link-route-"));
        assert_eq!(names[5], "\"broker\"", "the user's name is kept");
        assert_eq!(named.sections[1].attrs[0].0, "name", "the name comes first");
        let again =
            generated_name(&section("address", &[("prefix", s("a")), ("distribution", s("closest"))]));
        assert_eq!(format!("\"{again}\""), names[1], "the same attributes, the same name, every time");
    }

    #[test]
    fn field_digests_name_the_fields_that_changed() {
        let base = vec![
            section("router", &[("mode", s("interior"))]),
            section("listener", &[("name", s(HEALTH_LISTENER)), ("port", Value::Int(8888))]),
            section("listener", &[("name", s(MANAGEMENT_LISTENER)), ("role", s("normal"))]),
            section("sslProfile", &[("name", s(MANAGEMENT_PROFILE))]),
            section("listener", &[("name", s("mesh")), ("role", s("inter-router"))]),
            section("listener", &[("name", s("edges")), ("role", s("edge"))]),
            section("listener", &[("name", s("amqp")), ("role", s("normal"))]),
            section("sslProfile", &[("name", s("tls"))]),
            section("address", &[("prefix", s("a"))]),
            section("linkRoute", &[("prefix", s("q"))]),
            section("autoLink", &[("address", s("q"))]),
            section("connector", &[("name", s("broker")), ("role", s("route-container"))]),
            section("connector", &[("name", s("up")), ("role", s("inter-router"))]),
            section("connector", &[("name", s("hub")), ("role", s("edge"))]),
        ];
        let fields: Vec<&str> = base.iter().map(field_of).collect();
        assert_eq!(
            fields,
            [
                "spec.deploymentPlan.role",
                "spec.deploymentPlan.livenessPort",
                "the management listener",
                "the management listener",
                "spec.interRouterListeners",
                "spec.edgeListeners",
                "spec.listeners",
                "spec.sslProfiles",
                "spec.addresses",
                "spec.linkRoutes",
                "spec.autoLinks",
                "spec.connectors",
                "spec.interRouterConnectors",
                "spec.edgeConnectors",
            ]
        );
        let digest =
            |sections: &[Section<'static>]| field_digests(&RouterConfig { sections: sections.to_vec() });
        let old = digest(&base);
        assert_eq!(old.split(';').count(), 13, "one entry per field: {old}");
        assert!(changed_fields(&old, &digest(&base)).is_empty(), "the same configuration");
        let mut edge_port = base.clone();
        edge_port[5].attrs.push(("port", Value::Int(45672)));
        assert_eq!(changed_fields(&old, &digest(&edge_port)), ["spec.edgeListeners"]);
        let mut edge = base.clone();
        edge[0] = section("router", &[("mode", s("edge"))]);
        edge.remove(4);
        assert_eq!(
            changed_fields(&old, &digest(&edge)),
            ["spec.deploymentPlan.role", "spec.interRouterListeners"],
            "a changed field and a field gone"
        );
        assert!(changed_fields("", &old).iter().all(|f| f.starts_with("spec.") || f.starts_with("the ")));
        assert!(changed_fields("written by 0.5.0", &old).is_empty(), "not a digest: no field named");
    }
}
