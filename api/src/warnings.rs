//! Warnings: valid but risky specs. Each is at most [`MAX_WARNING_LEN`] characters,
//! formatted `path: message` (Kubernetes API guidance for admission warnings), and never
//! about something the user cannot change.

use crate::spec::{LinkRole, is_no_users};
use crate::types::Interconnect;

/// Upper bound of one warning, in characters (the API server guidance is 120).
pub const MAX_WARNING_LEN: usize = 120;

/// The warnings for `ic` (best read on the defaulted object), in field order.
pub fn warnings(ic: &Interconnect) -> Vec<String> {
    let spec = &ic.spec;
    let mut w = Vec::new();
    let no_users = spec.users.as_deref().is_some_and(is_no_users);
    if let Some(plan) = &spec.deployment_plan
        && plan.placement == Some(crate::types::Placement::Every)
        && plan.size == Some(1)
    {
        w.push(
            "spec.deploymentPlan.size: ignored with placement Every (one router per node); remove it".into(),
        );
    }
    if let Some(plan) = &spec.deployment_plan
        && let Some(b) = &plan.disruption_budget
        && plan.placement != Some(crate::types::Placement::Every)
    {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::{self, Int, String as Percent};
        let size = plan.size.unwrap_or(1);
        // A percentage counts routers rounded up (the disruption controller's
        // `GetScaledValueFromIntOrPercent(.., true)`): `99%` available of 3 is 3.
        let count = |v: &IntOrString| match v {
            Int(n) => i64::from(*n),
            Percent(p) => {
                let p = crate::validate::percent(p).unwrap_or(0).min(100) as i64;
                (p * i64::from(size) + 99) / 100
            }
        };
        let blocks = match (&b.max_unavailable, &b.min_available) {
            (Some(v), None) => count(v) == 0,
            (None, Some(v)) => count(v) >= i64::from(size),
            _ => false,
        };
        if blocks {
            w.push(
                "spec.deploymentPlan.disruptionBudget: allows no router to be evicted, so every node drain and the \
                 cluster autoscaler wait on the routers until it is changed"
                    .into(),
            );
        }
    }
    for (i, c) in
        (spec.deployment_plan.iter()).flat_map(|p| p.topology_spread_constraints.iter().flatten()).enumerate()
    {
        if !c.topology_key.is_empty() && !crate::validate::is_qualified_name(&c.topology_key) {
            w.push(format!(
                "spec.deploymentPlan.topologySpreadConstraints[{i}].topologyKey: {:?} is no label key, so no node has \
                 it: the constraint counts no domain{}",
                c.topology_key,
                if c.when_unsatisfiable == "DoNotSchedule" { " and no router can be scheduled" } else { "" }
            ));
        }
    }
    for (role, i, l) in spec.every_listener() {
        // The item's path, formatted only into a warning given.
        let p = crate::validate::At::new(role.listeners_field(), i);
        let exposed = l.expose == Some(true);
        if exposed && l.ssl_profile.is_none() {
            w.push(format!(
                "{p}: exposed outside the cluster without TLS (no sslProfile); add one or set expose: false"
            ));
        }
        if exposed && l.authenticate_peer != Some(true) {
            w.push(format!(
                "{p}: exposed outside the cluster without authenticatePeer; set it or expose: false"
            ));
        }
        if role == LinkRole::InterRouter && l.ssl_profile.is_none() {
            w.push(format!(
                "{p}: inter-router links without TLS: any pod that reaches port {} can join",
                l.port
            ));
        }
        if role != LinkRole::Normal && (l.route_container.is_some() || l.http.is_some()) {
            w.push(format!("{p}: routeContainer and http apply only to spec.listeners and are ignored here"));
        }
        if role == LinkRole::Normal && l.cost.is_some() {
            w.push(format!(
                "{p}.cost: ignored on normal listeners; cost applies to inter-router and edge links"
            ));
        }
        if l.role.is_some() {
            w.push(format!("{p}.role: deprecated and ignored (the list decides the role)"));
        }
        if l.name.as_deref() == Some("metrics") {
            w.push(format!(
                "{p}.name: \"metrics\" is the routers' metrics port name; the PodMonitor will not scrape them"
            ));
        }
        if l.port == crate::router_config::MANAGEMENT_PORT {
            w.push(format!(
                "{p}.port: 55670 is the operator's management port; the routers will not be read (MeshConnected)"
            ));
        }
        let external =
            l.sasl_mechanisms.as_deref().is_some_and(|m| m.split_whitespace().any(|m| m == "EXTERNAL"));
        if no_users && l.authenticate_peer == Some(true) && !external {
            w.push(format!(
                "{p}: authenticatePeer with users: none; only clients with certificates can log in"
            ));
        }
    }
    for (i, c) in spec.inter_router_connectors.iter().flatten().enumerate() {
        if c.ssl_profile.is_none() {
            w.push(format!("spec.interRouterConnectors[{i}]: inter-router link without TLS"));
        }
    }
    if spec.issuer.is_some() {
        w.push("spec.issuer: deprecated and ignored; use spec.deploymentPlan.issuer".into());
    }
    // Link routes and auto-links that name a connection nobody defines stay inactive.
    let names: Vec<&str> = spec
        .every_listener()
        .filter_map(|(_, _, l)| l.name.as_deref())
        .chain(spec.every_connector().filter_map(|(_, _, c)| c.name.as_deref()))
        .collect();
    for (list, conns) in [
        (
            "linkRoutes",
            spec.link_routes.iter().flatten().map(|r| r.connection.as_deref()).collect::<Vec<_>>(),
        ),
        ("autoLinks", spec.auto_links.iter().flatten().map(|a| a.connection.as_deref()).collect()),
    ] {
        for (i, c) in conns.into_iter().enumerate() {
            if let Some(c) = c
                && !names.contains(&c)
            {
                let short: String = c.chars().take(30).collect();
                w.push(format!("spec.{list}[{i}].connection: no listener or connector named {short:?}; inactive until one exists"));
            }
        }
    }
    for m in &mut w {
        if m.chars().count() > MAX_WARNING_LEN {
            *m = m.chars().take(MAX_WARNING_LEN - 1).collect::<String>() + "…";
        }
    }
    w
}
