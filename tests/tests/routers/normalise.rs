//! How qdrouterd 1.19 reads back the live entities the controller writes: one router given
//! every attribute the spec can set on each live kind (addresses, link routes, auto-links,
//! connectors, client listeners), at values other than the defaults, read back with
//! `qdmanage query` and compared attribute by attribute with what the controller wrote. What
//! differs is the router's normalisation; it must be exactly
//! `qdr_controller::mesh::live::READ_BACK`, which the controller's comparison of held
//! entities applies (docs/live-configuration.md, "Changed by hand"). Then an address
//! re-created by hand under its own name with another distribution is put back.

use qdr_controller::mesh::links::Attribute;
use qdr_controller::mesh::live::{self, Kind};
use qdr_tests::TestNamespace;
use qdr_tests::routers::{self, apply, config_applied, qdmanage, router_pods};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{cluster, controllers};

const NAME: &str = "normal";

/// Every attribute the spec sets on a live entity, at values other than the defaults.
fn spec() -> Value {
    json!({
        "deploymentPlan": {"size": 1, "role": "interior"},
        "listeners": [{"port": 5672},
                      {"name": "extra", "port": 5673, "linkCapacity": 50, "saslMechanisms": "ANONYMOUS PLAIN",
                       "authenticatePeer": false},
                      {"name": "secure", "port": 5674, "sslProfile": "tls"},
                      {"name": "web", "port": 8080, "http": true},
                      {"name": "containers", "port": 5675, "routeContainer": true, "host": "0.0.0.0"}],
        "sslProfiles": [{"name": "tls", "credentials": "normal-tls", "generateCredentials": true}],
        "addresses": [{"prefix": "norm.a", "distribution": "balanced", "waypoint": true, "ingressPhase": 1,
                       "egressPhase": 2, "priority": 5},
                      {"pattern": "norm.#.b", "distribution": "closest", "enableFallback": true},
                      {"prefix": "norm.c.", "distribution": "multicast"},
                      {"prefix": "norm.d/", "waypoint": false, "enableFallback": false},
                      {"prefix": "norm.e..", "distribution": "closest"},
                      {"pattern": "norm.f.*.", "distribution": "balanced"}],
        "connectors": [{"name": "broker", "host": "broker", "port": 5672, "routeContainer": true, "cost": 3,
                        "linkCapacity": 100, "verifyHostname": false},
                       {"name": "broker-tls", "host": "broker", "port": 5671, "routeContainer": true,
                        "sslProfile": "tls"}],
        "linkRoutes": [{"prefix": "queue.", "direction": "in", "connection": "broker",
                        "addExternalPrefix": "ext.", "delExternalPrefix": "int."},
                       {"pattern": "topic.#", "direction": "out", "containerId": "broker-c"},
                       {"prefix": "queue2/", "direction": "out", "connection": "broker"},
                       {"pattern": "topic2.*.", "direction": "in", "connection": "broker"}],
        "autoLinks": [{"address": "jobs", "direction": "out", "connection": "broker", "externalAddress": "jobs.ext",
                       "phase": 1},
                      {"address": "results", "direction": "in", "containerId": "broker-c", "phase": 0}],
    })
}

/// The type `qdmanage` names kind `k` by.
fn qdmanage_type(k: Kind) -> &'static str {
    match k {
        Kind::SslProfile => "sslProfile",
        Kind::Connector => "connector",
        Kind::Listener => "listener",
        Kind::Address => "address",
        Kind::LinkRoute => "linkRoute",
        Kind::AutoLink => "autoLink",
    }
}

/// `held` (as qdmanage prints it) as an attribute the reader would read.
fn as_attribute(held: &Value) -> Option<Attribute> {
    match held {
        Value::String(s) => Some(Attribute::Text(s.clone())),
        Value::Bool(b) => Some(Attribute::Bool(*b)),
        Value::Number(n) => n.as_i64().map(Attribute::Int),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_reads_back_every_live_attribute_as_the_table_says() {
    let cp = cluster().await;
    let ns: &'static TestNamespace = Box::leak(Box::new(cp.namespace("normalise").await));
    apply(cp, &ns.name, &routers::interconnect(NAME, spec()));
    routers::wait_ready(cp, &ns.name, NAME, &controllers());
    config_applied(ns, NAME).await;
    let (pod, _) = router_pods(ns, NAME).await.remove(0);
    let mut spec: qdr_api::InterconnectSpec = serde_json::from_value(spec()).unwrap();
    qdr_api::apply_defaults(NAME, &mut spec);
    let desired = live::desired(&qdr_api::router_config::router_config(&spec).with_management_listener());
    let mut found = Vec::new();
    let mut compared = 0;
    for d in &desired {
        let args = ["query".to_string(), format!("--type={}", qdmanage_type(d.kind))];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let all = match qdmanage(cp, &ns.name, &pod, &args) {
            Ok(all) => all,
            // A `kubectl exec` killed on a loaded node (137): asked again once the router is
            // Ready, unless its container restarted, which would be the router's fault.
            Err(e) => {
                let p: k8s_openapi::api::core::v1::Pod = ns.api().get(&pod).await.unwrap();
                let restarts = (p.status.and_then(|s| s.container_statuses))
                    .map(|c| (c[0].restart_count, c[0].last_state.clone()));
                assert!(
                    restarts.as_ref().is_none_or(|(n, _)| *n == 0),
                    "qdmanage query {:?}: {e}; the router restarted: {restarts:?}",
                    d.kind
                );
                routers::wait_ready(cp, &ns.name, NAME, &controllers());
                qdmanage(cp, &ns.name, &pod, &args)
                    .unwrap_or_else(|e| panic!("qdmanage query {:?}: {e}", d.kind))
            }
        };
        let row = (all.as_array().into_iter().flatten())
            .find(|e| e["name"] == d.name.as_str())
            .unwrap_or_else(|| panic!("{} {} not held: {all}", d.kind.entity(), d.name));
        for (k, wrote) in &d.attributes {
            compared += 1;
            let read = as_attribute(&row[*k]);
            let expected = live::read_back(d.kind, k, wrote);
            if expected.is_some() && read != expected {
                found.push(format!(
                    "{} {k}: wrote {wrote:?}, read {}, the table says {expected:?}",
                    d.kind.entity(),
                    row[*k]
                ));
            }
        }
    }
    println!("{compared} attributes of {} live entities compared on a real router", desired.len());
    assert!(found.is_empty(), "the router's read-back differs from live::READ_BACK:\n{}", found.join("\n"));

    // By hand: the address of prefix norm.a re-created under its own name with another
    // distribution is put back as the spec says at the next visit (at the latest the resync
    // of a connected mesh, MESH_RESYNC).
    let distribution = || {
        let all = qdmanage(cp, &ns.name, &pod, &["query", "--type=address"]).unwrap_or_default();
        (all.as_array().into_iter().flatten())
            .find(|a| a["prefix"] == "norm.a")
            .map(|a| (a["name"].as_str().unwrap_or_default().to_string(), a["distribution"].clone()))
    };
    let (name, was) = distribution().expect("the address norm.a");
    assert_eq!(was, "balanced");
    // Deleted and created again in one exec: the controller may visit the router at any
    // moment and put the address back in between (its create then finds it held, and the
    // pair is tried again).
    let by_hand = format!(
        "qdmanage delete --type=address --name={name} && \
         qdmanage create --type=address --name={name} prefix=norm.a distribution=multicast"
    );
    let changed = (0..5).any(|_| {
        let out = routers::kubectl(cp, &["exec", "-n", &ns.name, &pod, "--", "sh", "-c", &by_hand]);
        out.status.success()
    });
    assert!(changed, "qdmanage could not re-create the address by hand in 5 tries");
    let t = std::time::Instant::now();
    let resync = qdr_controller::reconcile::MESH_RESYNC;
    qdr_tests::eventually(
        "the address changed by hand put back",
        resync + Duration::from_secs(30),
        || async { (distribution().map(|d| d.1) == Some(json!("balanced"))).then_some(()) },
    )
    .await;
    println!("an address re-created by hand with another distribution put back {:.1?} later", t.elapsed());
}
