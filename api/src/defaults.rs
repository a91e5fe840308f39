//! Defaulting: one pure, idempotent function that fills only absent fields.
//!
//! It starts from the Go operator's `SetInterconnectDefaults` (with cert-manager present,
//! since this project issues TLS credentials itself) and differs where the Go operator was
//! wrong:
//!
//! | field | default | differs from Go |
//! |---|---|---|
//! | `deploymentPlan.role` | `interior` | |
//! | `deploymentPlan.placement` | `Any` | |
//! | `deploymentPlan.size` | `1` | not set for placement `Every` (a DaemonSet has no size) |
//! | `deploymentPlan.livenessPort` | `8888` | |
//! | `users` | `<name>-users` | |
//! | `addresses` | closest, multicast, unicast, exclusive, broadcast | only when absent: `[]` means none |
//! | `listeners` | 5672; 8080 (http, authenticatePeer, expose); 5671 (sslProfile `default`) | a port already used (e.g. by `livenessPort`) is skipped |
//! | `interRouterListeners` (interior) | 55671, sslProfile `inter-router`, EXTERNAL, authenticatePeer, expose | only when absent; skipped if the port is taken |
//! | `edgeListeners` (interior) | 45672 | only when absent; skipped if the port is taken |
//! | `sslProfiles` | `default` and `inter-router` when referenced by any listener **or connector** and absent | Go looked only at normal and inter-router listeners |
//! | each sslProfile | `credentials: <name>-<profile>-credentials` + `generateCredentials`, and with `mutualAuth` `caCert: <name>-<profile>-ca` + `generateCaCert` | always, not only with cert-manager |
//!
//! `deploymentPlan.image` is not defaulted: the controller's configured default image is
//! used for routers that do not pin one. Defaults depend only on the object (its name and
//! spec), never on cluster state; applying them twice changes nothing.
//!
//! Without a name (a `metadata.generateName` create: the API server picks the name after
//! admission) the defaults that derive from it — `users` and each profile's `credentials` /
//! `caCert` with their `generate*` flags — are left out; the controller fills them in memory
//! from the final name on every reconcile, so such objects never store `-users`.

use crate::spec::DEFAULT_LIVENESS_PORT;
use crate::types::{
    Address, DeploymentPlan, Distribution, Interconnect, InterconnectSpec, Listener, Placement, Role,
    SslProfile,
};

/// Default AMQP port.
pub const AMQP_PORT: i32 = 5672;
/// Default AMQPS port (sslProfile `default`).
pub const AMQPS_PORT: i32 = 5671;
/// Default web console port.
pub const CONSOLE_PORT: i32 = 8080;
/// Default inter-router port (TLS, mutual authentication).
pub const INTER_ROUTER_PORT: i32 = 55671;
/// Default edge port.
pub const EDGE_PORT: i32 = 45672;

/// Returns `ic` with defaults applied (see the module docs). Pure and idempotent.
pub fn defaults(ic: &Interconnect) -> Interconnect {
    let mut out = ic.clone();
    apply_defaults(ic.metadata.name.as_deref().unwrap_or_default(), &mut out.spec);
    out
}

/// Applies defaults in place to the spec of the Interconnect named `name` (empty: not known
/// yet, so the name-derived defaults are skipped).
pub fn apply_defaults(name: &str, spec: &mut InterconnectSpec) {
    let named = !name.is_empty();
    let plan = spec.deployment_plan.get_or_insert_with(DeploymentPlan::default);
    let role = plan.role.get_or_insert(Role::Interior).clone();
    let placement = plan.placement.get_or_insert(Placement::Any).clone();
    if placement != Placement::Every && plan.size.is_none() {
        plan.size = Some(1);
    }
    let liveness = *plan.liveness_port.get_or_insert(DEFAULT_LIVENESS_PORT);

    if named && spec.users.is_none() {
        spec.users = Some([name, "-users"].concat());
    }
    if spec.addresses.is_none() {
        spec.addresses = Some(
            [
                ("closest", Distribution::Closest),
                ("multicast", Distribution::Multicast),
                ("unicast", Distribution::Closest),
                ("exclusive", Distribution::Closest),
                ("broadcast", Distribution::Multicast),
            ]
            .into_iter()
            .map(|(p, d)| Address { prefix: Some(p.into()), distribution: Some(d), ..Default::default() })
            .collect(),
        );
    }

    // Ports the user already took; defaults never reuse one.
    let mut used: Vec<i32> = vec![liveness];
    used.extend(spec.every_listener().map(|(_, _, l)| l.port));
    let mut take = |candidates: Vec<Listener>| -> Vec<Listener> {
        let mut out = Vec::new();
        for l in candidates {
            if !used.contains(&l.port) {
                used.push(l.port);
                out.push(l);
            }
        }
        out
    };
    if spec.listeners.is_none() {
        let ls = take(vec![
            Listener { port: AMQP_PORT, ..Default::default() },
            Listener {
                port: CONSOLE_PORT,
                http: Some(true),
                expose: Some(true),
                authenticate_peer: Some(true),
                ..Default::default()
            },
            Listener { port: AMQPS_PORT, ssl_profile: Some("default".into()), ..Default::default() },
        ]);
        // listeners has minItems 1: when the other lists and the liveness port took every
        // candidate's port, the list stays absent (valid, and the same on every pass).
        if !ls.is_empty() {
            spec.listeners = Some(ls);
        }
    }
    if role != Role::Edge {
        if spec.inter_router_listeners.is_none() {
            spec.inter_router_listeners = Some(take(vec![Listener {
                port: INTER_ROUTER_PORT,
                ssl_profile: Some("inter-router".into()),
                expose: Some(true),
                authenticate_peer: Some(true),
                sasl_mechanisms: Some("EXTERNAL".into()),
                ..Default::default()
            }]));
        }
        if spec.edge_listeners.is_none() {
            spec.edge_listeners = Some(take(vec![Listener { port: EDGE_PORT, ..Default::default() }]));
        }
    }

    // Profiles referenced but not defined: only the two well-known names are added.
    let referenced = |n: &str| {
        spec.every_listener().any(|(_, _, l)| l.ssl_profile.as_deref() == Some(n))
            || spec.every_connector().any(|(_, _, c)| c.ssl_profile.as_deref() == Some(n))
    };
    let mut add = Vec::new();
    for (profile, mutual) in [("default", false), ("inter-router", true)] {
        let defined = spec.ssl_profiles.iter().flatten().any(|p| p.name == profile);
        if !defined && referenced(profile) {
            add.push(SslProfile {
                name: profile.into(),
                mutual_auth: mutual.then_some(true),
                ..Default::default()
            });
        }
    }
    if !add.is_empty() {
        spec.ssl_profiles.get_or_insert_with(Vec::new).extend(add);
    }

    for p in spec.ssl_profiles.iter_mut().flatten() {
        if p.name.is_empty() || !named {
            continue; // reported by validate, or no name yet: no Secret names to derive
        }
        let mutual = p.mutual_auth == Some(true);
        if p.credentials.is_none() && (p.ca_cert.is_none() || mutual) {
            p.credentials = Some([name, "-", &p.name, "-credentials"].concat());
            p.generate_credentials.get_or_insert(true);
        }
        if p.ca_cert.is_none() && mutual {
            p.ca_cert = Some([name, "-", &p.name, "-ca"].concat());
            p.generate_ca_cert.get_or_insert(true);
        }
    }
}
