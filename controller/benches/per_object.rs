//! Per-object cost with criterion: `defaults` + `validate`, and router config rendering, for
//! the 3-router example and for a spec with every list near its maxItems.

use criterion::{Criterion, criterion_group, criterion_main};
use qdr_api::router_config::router_config;
use qdr_api::{Interconnect, defaults, validate};
use serde_json::{Value, json};

fn small() -> Interconnect {
    serde_json::from_value(json!({"metadata": {"name": "router-mesh", "namespace": "ns"},
        "spec": {"deploymentPlan": {"size": 3, "role": "interior", "placement": "Any"}}}))
    .unwrap()
}

fn large() -> Interconnect {
    let conns = |base: i32, n: i32| {
        (0..n).map(|i| json!({"name": format!("c{}", base + i), "host": format!("h{i}.example"), "port": 20000 + base + i})).collect::<Vec<Value>>()
    };
    serde_json::from_value(json!({"metadata": {"name": "big", "namespace": "ns"}, "spec": {
        "deploymentPlan": {"size": 3},
        "listeners": (0..30).map(|i| json!({"name": format!("l{i}"), "port": 10000 + i, "sslProfile": format!("p{i}")})).collect::<Vec<_>>(),
        "interRouterListeners": [{"port": 55671, "sslProfile": "p0"}],
        "edgeListeners": [{"port": 45672}],
        "sslProfiles": (0..30).map(|i| json!({"name": format!("p{i}"), "mutualAuth": i % 2 == 0})).collect::<Vec<_>>(),
        "connectors": conns(0, 60),
        "interRouterConnectors": conns(100, 60),
        "addresses": (0..250).map(|i| json!({"prefix": format!("a{i}"), "distribution": "closest"})).collect::<Vec<_>>(),
        "autoLinks": (0..250).map(|i| json!({"address": format!("q{i}"), "direction": "in", "connection": "c0"})).collect::<Vec<_>>(),
        "linkRoutes": (0..250).map(|i| json!({"prefix": format!("r{i}"), "direction": "out", "containerId": "broker"})).collect::<Vec<_>>(),
    }})).unwrap()
}

fn per_object(c: &mut Criterion) {
    for (name, ic) in [("small", small()), ("large", large())] {
        let effective = defaults(&ic);
        assert!(validate(&effective).is_empty(), "{name} must be valid");
        c.bench_function(&format!("defaults+validate/{name}"), |b| {
            b.iter(|| validate(&defaults(std::hint::black_box(&ic))))
        });
        c.bench_function(&format!("render/{name}"), |b| {
            b.iter(|| router_config(&std::hint::black_box(&effective).spec).render())
        });
    }
}

criterion_group!(benches, per_object);
criterion_main!(benches);
