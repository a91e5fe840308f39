//! The pure builders, one test per Go operator bug they fix (docs/controller.md, "Fixes of
//! the Go operator's bugs"); each assertion
//! fails on the Go operator's behaviour.

use std::time::SystemTime;

use crate::builders::{self, Settings, Workload};
use crate::credentials::{self, Existing, Lifetimes, Routers};
use crate::validated::ValidatedInterconnect;
use qdr_api::Interconnect;
use qdr_api::router_config::Rendered;
use serde_json::{Value, json};

/// The ValidatedInterconnect of a stored Interconnect `mesh` in `ns` with `spec` (defaulted, validated).
fn ic(spec: Value) -> ValidatedInterconnect {
    let ic: Interconnect = serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "0f1e2d3c-aaaa-bbbb-cccc-000000000001"}, "spec": spec,
    }))
    .unwrap();
    ValidatedInterconnect::new(&ic).unwrap()
}

fn settings() -> Settings {
    Settings {
        hash_key: crate::hash_key::HashKey::from_bytes(&[7; 32]).unwrap(),
        seal_key: crate::hash_key::HashKey::from_bytes(&[9; 32]).unwrap(),
        default_image: "quay.io/interconnectedcloud/qdrouterd:1.19.0".into(),
        routes: false,
        lifetimes: Lifetimes::default(),
        run_as_user: Some(builders::DEFAULT_RUN_AS_USER),
        observe_mesh: false,
        controller_pods: builders::ControllerPods::installed_in("qdr-operator"),
        router_requests: builders::default_requests(),
    }
}

fn workload(o: &ValidatedInterconnect) -> Workload {
    builders::workload(
        o,
        &settings(),
        &Rendered::of(o.spec()),
        "fingerprint",
        &Default::default(),
        &Default::default(),
    )
}

fn pod(o: &ValidatedInterconnect) -> Value {
    serde_json::to_value(builders::pod_template(
        o,
        &settings(),
        &Rendered::of(o.spec()),
        "fingerprint",
        &Default::default(),
        &Default::default(),
    ))
    .unwrap()
}

fn env_names(p: &Value) -> Vec<String> {
    p["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// Bug 3: `users: none` skipped the Secret and ConfigMap but still mounted them.
#[test]
fn users_none_means_no_sasl_objects_mounts_or_env() {
    let ic = ic(json!({"users": "none"}));
    assert!(builders::sasl_config_map(&ic).is_none());
    let p = pod(&ic);
    let vols = p["spec"]["volumes"].to_string();
    assert!(!vols.contains("sasl"), "{vols}");
    assert!(!env_names(&p).iter().any(|e| e.contains("SASLDB")));
}

/// Bug 4: the Deployment carried an extra, unmounted CA volume; the DaemonSet did not.
#[test]
fn deployment_and_daemonset_share_one_pod_template_and_mount_every_volume() {
    let any = ic(json!({}));
    let every = ic(json!({"deploymentPlan": {"placement": "Every"}}));
    let (Workload::Deployment(d), Workload::DaemonSet(ds)) = (workload(&any), workload(&every)) else {
        panic!("Any gives a Deployment and Every a DaemonSet")
    };
    let dt = serde_json::to_value(&d.spec.unwrap().template).unwrap();
    let st = serde_json::to_value(&ds.spec.unwrap().template).unwrap();
    assert_eq!(dt["spec"]["volumes"], st["spec"]["volumes"]);
    let vols: Vec<&str> =
        dt["spec"]["volumes"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    let mounts: Vec<&str> = dt["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(vols, mounts);
}

/// Bug 5: adding an sslProfile later produced a mount without a volume.
#[test]
fn a_new_ssl_profile_brings_its_volume_and_mount_together() {
    let before = pod(&ic(json!({})));
    let after = pod(&ic(
        json!({"sslProfiles": [{"name": "extra", "credentials": "extra-tls"}], "listeners": [{"port": 5672, "sslProfile": "extra"}]}),
    ));
    let secret_vols = |p: &Value| {
        p["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["secret"]["secretName"].as_str().map(String::from))
            .collect::<Vec<_>>()
    };
    assert!(!secret_vols(&before).contains(&"extra-tls".to_string()));
    assert!(secret_vols(&after).contains(&"extra-tls".to_string()));
    let mounts = after["spec"]["containers"][0]["volumeMounts"].to_string();
    assert!(mounts.contains("/etc/qpid-dispatch-certs/extra/extra-tls"));
}

/// Bug 11: certificate names ended with a bare dot on Kubernetes.
#[test]
fn generated_credentials_have_service_names_and_no_empty_domain() {
    let ic = ic(json!({}));
    let secrets = missing(&ic, &Existing::new());
    let names: Vec<String> = secrets.iter().map(|s| s.metadata.name.clone().unwrap()).collect();
    assert_eq!(
        names,
        ["mesh-ca", "mesh-inter-router-ca", "mesh-default-credentials", "mesh-inter-router-credentials"]
    );
    let leaf = String::from_utf8(secrets[2].data.as_ref().unwrap()["tls.crt"].0.clone()).unwrap();
    let info = qdr_certs::pki::CertInfo::parse(&leaf).unwrap();
    assert_eq!(info.sans, ["mesh", "mesh.ns", "mesh.ns.svc", "mesh.ns.svc.cluster.local"]);
    assert!(info.sans.iter().all(|n| !n.ends_with('.')));
    // Mutual auth: signed by the profile's own CA, whose certificate is the ca.crt.
    let ir = secrets[3].data.as_ref().unwrap();
    let ca = String::from_utf8(secrets[1].data.as_ref().unwrap()["tls.crt"].0.clone()).unwrap();
    assert_eq!(String::from_utf8(ir["ca.crt"].0.clone()).unwrap(), ca);
    let ir_leaf = String::from_utf8(ir["tls.crt"].0.clone()).unwrap();
    qdr_certs::pki::verify_leaf(&ir_leaf, &ca, "mesh.ns.svc", SystemTime::now()).unwrap();
    // Existing Secrets are never replaced.
    let existing: Existing = secrets.iter().map(|s| (s.metadata.name.clone().unwrap(), s.clone())).collect();
    let again =
        credentials::plan(&ic, &existing, SystemTime::now(), Lifetimes::default(), Routers::RolledOut)
            .unwrap();
    assert!(again.create.is_empty() && again.update.is_empty(), "{again:?}");
}

fn missing(ic: &ValidatedInterconnect, existing: &Existing) -> Vec<k8s_openapi::api::core::v1::Secret> {
    let plan =
        credentials::plan(ic, existing, SystemTime::now(), Lifetimes::default(), Routers::Unknown).unwrap();
    assert!(plan.update.is_empty());
    plan.create
}

/// Bug 12: `deploymentPlan.issuer` was half-used; here its CA signs the credentials, and a
/// missing issuer Secret is reported (by the references check) rather than replaced.
#[test]
fn the_issuer_secret_signs_generated_credentials() {
    let ic = ic(json!({"deploymentPlan": {"issuer": "corp-ca"}}));
    let without = missing(&ic, &Existing::new());
    let names: Vec<&str> = without.iter().filter_map(|s| s.metadata.name.as_deref()).collect();
    assert_eq!(
        names,
        ["mesh-inter-router-ca", "mesh-inter-router-credentials"],
        "nothing signed by a missing issuer"
    );
    let ca = qdr_certs::pki::new_ca("corp", SystemTime::now(), std::time::Duration::from_secs(3600)).unwrap();
    let mut existing = Existing::new();
    existing.insert(
        "corp-ca".into(),
        k8s_openapi::api::core::v1::Secret {
            data: Some(
                [("tls.crt", &ca.cert_pem), ("tls.key", &ca.key_pem)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        },
    );
    let secrets = missing(&ic, &existing);
    let default =
        secrets.iter().find(|s| s.metadata.name.as_deref() == Some("mesh-default-credentials")).unwrap();
    let leaf = String::from_utf8(default.data.as_ref().unwrap()["tls.crt"].0.clone()).unwrap();
    qdr_certs::pki::verify_leaf(&leaf, &ca.cert_pem, "mesh", SystemTime::now()).unwrap();
    assert!(
        secrets.iter().all(|s| s.metadata.name.as_deref() != Some("mesh-ca")),
        "no own CA when an issuer is given"
    );
}

/// Bug 15: anti-affinity selected only on `application`.
#[test]
fn anti_affinity_selects_on_both_labels() {
    let p = pod(&ic(json!({"deploymentPlan": {"placement": "AntiAffinity", "size": 3}})));
    let sel = &p["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        ["labelSelector"]["matchLabels"];
    assert_eq!(sel, &json!({"application": "mesh", "interconnect_cr": "mesh"}));
}

/// AntiAffinity with one router was down on every roll (`maxSurge: 0`, `maxUnavailable:
/// 1`): routers now keep apart only from their own revision, and a roll surges.
#[test]
fn anti_affinity_keeps_a_revision_apart_and_rolls_with_a_surge() {
    let ic = ic(json!({"deploymentPlan": {"placement": "AntiAffinity", "size": 1}}));
    let p = pod(&ic);
    let term = &p["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["matchLabelKeys"], json!(["pod-template-hash"]));
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    let deployment_json = |o: &ValidatedInterconnect| match workload(o) {
        Workload::Deployment(d) => serde_json::to_value(d).unwrap(),
        Workload::DaemonSet(_) => panic!("a DaemonSet for placement {:?}", o.plan().placement),
    };
    let d = deployment_json(&ic);
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    // Issue 72: `Any` too rolls one router at a time (the Deployment's default, 25 % surge
    // and 25 % unavailable, takes two of 4 routers at once and four of 16).
    for size in [1, 4, 16] {
        let any = deployment_json(&self::ic(json!({"deploymentPlan": {"placement": "Any", "size": size}})));
        assert_eq!(
            any["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
            "size {size}"
        );
    }
}

/// Bug 16: the Deployment had no labels; two profiles sharing a Secret gave duplicate
/// volume names.
#[test]
fn workloads_are_labelled_and_volume_names_are_unique() {
    let ic = ic(
        json!({"sslProfiles": [{"name": "a", "credentials": "shared"}, {"name": "b", "credentials": "shared"}],
                       "listeners": [{"port": 5672, "sslProfile": "a"}, {"port": 5673, "sslProfile": "b"}]}),
    );
    let Workload::Deployment(d) = workload(&ic) else { panic!() };
    assert_eq!(d.metadata.labels.as_ref().unwrap()["application"], "mesh");
    let vols: Vec<String> =
        d.spec.unwrap().template.spec.unwrap().volumes.unwrap().into_iter().map(|v| v.name).collect();
    let mut unique = vols.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), vols.len(), "{vols:?}");
}

/// Bug 17 (POD_COUNT stale), fixed by not having it: nothing in the pod template depends
/// on `size`, so scaling never rolls the routers.
#[test]
fn the_pod_template_does_not_depend_on_the_size() {
    let template = |size: i32| pod(&ic(json!({"deploymentPlan": {"size": size}})));
    assert_eq!(template(3), template(5));
    assert_eq!(template(1), template(16));
    assert!(!env_names(&template(3)).contains(&"POD_COUNT".to_string()));
}

/// Issue 57: interior routers with the operator's management listener are linked by the
/// controller, so they run no auto-mesh discovery (which waited for every router pod to have
/// an IP) and mount no API token; only an interior router whose spec took the management
/// port keeps the image's discovery, with its token. Edge routers never discover peers.
#[test]
fn auto_mesh_only_where_the_controller_cannot_link() {
    let discovery = |o: &ValidatedInterconnect| {
        let p = pod(o);
        let names = env_names(&p);
        let token = p["spec"]["automountServiceAccountToken"].as_bool();
        (
            names.contains(&"QDROUTERD_AUTO_MESH_DISCOVERY".to_string()),
            names.contains(&"POD_IP".to_string()),
            token,
        )
    };
    let linked = ic(json!({})).with_management();
    assert!(linked.1.is_ok());
    assert_eq!(discovery(&linked.0), (false, false, Some(false)));
    let edge = ic(json!({"deploymentPlan": {"role": "edge"}})).with_management().0;
    assert_eq!(discovery(&edge), (false, false, Some(false)));
    let taken =
        ic(json!({"listeners": [{"port": qdr_api::router_config::MANAGEMENT_PORT}]})).with_management();
    assert!(taken.1.is_err());
    assert_eq!(discovery(&taken.0), (true, true, None));
    assert!(builders::discovers_peers(&taken.0) && !builders::discovers_peers(&linked.0));
}

/// Bug 14: `status.pods` serialized as null.
#[test]
fn status_pods_and_conditions_are_never_null() {
    let s = serde_json::to_value(qdr_api::InterconnectStatus::default()).unwrap();
    assert_eq!(s["pods"], json!([]));
    assert_eq!(s["conditions"], json!([]));
}

/// An Ingress host is one DNS label: a long Interconnect name is cut and hashed so that the
/// host stays at most 63 characters and different names stay apart.
#[test]
fn ingress_hosts_are_dns_labels_whatever_the_name() {
    assert_eq!(builders::host_label("mesh", "console"), "mesh-console");
    let long = "a".repeat(63);
    let other = format!("{}b", "a".repeat(62));
    for (name, suffix) in
        [(long.as_str(), "55671"), (other.as_str(), "55671"), (long.as_str(), "fifteen-chars-x")]
    {
        let host = builders::host_label(name, suffix);
        assert!(host.len() <= 63, "{host}");
        let label = host.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !host.starts_with('-')
            && !host.ends_with('-');
        assert!(label, "{host}");
        assert!(host.ends_with(&format!("-{suffix}")), "{host}");
    }
    assert_ne!(builders::host_label(&long, "55671"), builders::host_label(&other, "55671"));
    // A name cut right after a '-' does not leave "--".
    let dashed = format!("{}-{}", "a".repeat(47), "b".repeat(15));
    assert!(!builders::host_label(&dashed, "55671").contains("--"));
    // Through the builder, for a 63-character Interconnect with the default exposed listeners.
    let ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": long, "namespace": "ns", "uid": "u"}, "spec": {}}))
    .unwrap();
    let o = ValidatedInterconnect::new(&ic).unwrap();
    let hosts: Vec<String> = builders::ingresses(&o)
        .iter()
        .flat_map(|i| i.spec.as_ref().unwrap().rules.clone().unwrap())
        .filter_map(|r| r.host)
        .collect();
    assert!(!hosts.is_empty());
    assert!(hosts.iter().all(|h| h.len() <= 63), "{hosts:?}");
}

/// The health listener's port is declared as container port `metrics` (for a PodMonitor),
/// on whatever livenessPort says; a listener that took the name leaves it unnamed, never a
/// duplicate name the API server would refuse.
#[test]
fn the_metrics_port_is_declared_and_never_named_twice() {
    let ports = |p: &Value| -> Vec<(Option<String>, i64)> {
        p["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().map(String::from), p["containerPort"].as_i64().unwrap()))
            .collect()
    };
    let plain = ports(&pod(&ic(json!({"deploymentPlan": {"livenessPort": 9999}}))));
    assert!(plain.contains(&(Some("metrics".into()), 9999)), "{plain:?}");
    let taken = ports(&pod(&ic(json!({"listeners": [{"port": 5672, "name": "metrics"}]}))));
    assert_eq!(taken.iter().filter(|(n, _)| n.as_deref() == Some("metrics")).count(), 1, "{taken:?}");
    assert!(taken.contains(&(None, 8888)), "{taken:?}");
}

/// Drains evict one router at a time: a budget for a Deployment of two or more routers,
/// none for one router (it would block every drain) or a DaemonSet. It selects only a
/// Deployment's pods (`pod-template-hash`), never a DaemonSet's.
#[test]
fn a_disruption_budget_guards_deployments_of_two_or_more_routers() {
    use builders::Budget;
    let budget = |plan: serde_json::Value| builders::budget(&ic(json!({"deploymentPlan": plan})), None, &[]);
    let (said, pdb) = budget(json!({"placement": "AntiAffinity", "size": 3}));
    assert_eq!(said, Budget::Managed { bound: "maxUnavailable: 1".into(), retiring: false });
    let v = serde_json::to_value(pdb.expect("a budget for 3 routers")).unwrap();
    assert_eq!(v["metadata"]["name"], "mesh");
    assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        v["spec"],
        json!({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow",
               "selector": {"matchLabels": {"application": "mesh", "interconnect_cr": "mesh"},
                            "matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]}})
    );
    assert!(budget(json!({"placement": "Any", "size": 2})).1.is_some());
    assert!(
        matches!(budget(json!({"placement": "Any", "size": 1})), (Budget::NotNeeded(_), None)),
        "one router"
    );
    assert!(matches!(budget(json!({"placement": "Every"})), (Budget::NotNeeded(_), None)), "a DaemonSet");
}

/// Issue 72: `disruptionBudget` sets the bound or turns the budget off; a budget of the
/// admin's that selects the routers wins over the operator's (never two over one router);
/// through `Any` → `Every` the Deployment's routers keep their budget.
#[test]
fn the_disruption_budget_is_the_specs_the_admins_or_none() {
    use builders::Budget;
    let o = |plan: serde_json::Value| ic(json!({"deploymentPlan": plan}));
    let spec = |o: &ValidatedInterconnect| {
        serde_json::to_value(builders::budget(o, None, &[]).1.unwrap()).unwrap()["spec"].clone()
    };
    let half = o(json!({"size": 4, "disruptionBudget": {"minAvailable": "50%"}}));
    assert_eq!(spec(&half)["minAvailable"], "50%");
    assert!(spec(&half).get("maxUnavailable").is_none());
    assert_eq!(
        builders::budget(&half, None, &[]).0,
        Budget::Managed { bound: "minAvailable: \"50%\"".into(), retiring: false }
    );
    // A bound set makes a budget for one router too: the admin asked for it.
    assert_eq!(spec(&o(json!({"size": 1, "disruptionBudget": {"maxUnavailable": 1}})))["maxUnavailable"], 1);
    let off = o(json!({"size": 3, "disruptionBudget": {"enabled": false}}));
    assert_eq!(builders::budget(&off, None, &[]), (Budget::Disabled, None));
    let admins = ["routers".to_string()];
    assert_eq!(
        builders::budget(&o(json!({"size": 3})), None, &admins),
        (Budget::Admin(admins.to_vec()), None)
    );
    let every = o(json!({"placement": "Every"}));
    let (said, pdb) = builders::budget(&every, Some(3), &[]);
    assert_eq!(said, Budget::Managed { bound: "maxUnavailable: 1".into(), retiring: true });
    assert!(pdb.is_some(), "the Deployment being replaced keeps its budget");
    assert!(builders::budget(&every, Some(1), &[]).1.is_none(), "one router being replaced: none");
}

/// Issue 57: the scheduling and metadata fields reach the pods and the Service as written,
/// beside the operator's own: its labels, annotations and anti-affinity are all kept, and a
/// spread constraint without a selector counts this Interconnect's routers.
#[test]
fn scheduling_and_metadata_fields_are_merged_with_the_operators_own() {
    let o = ic(json!({"deploymentPlan": {
        "placement": "AntiAffinity", "size": 3,
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "messaging", "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"},
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": {"tier": "edge"}}},
        ],
        "priorityClassName": "messaging-critical",
        "podLabels": {"team": "payments"},
        "podAnnotations": {"sidecar.istio.io/inject": "false"},
        "serviceAnnotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
    }}));
    let p = pod(&o);
    let spec = &p["spec"];
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(spec["priorityClassName"], "messaging-critical");
    // The operator's anti-affinity is still there beside the spread.
    let anti = &spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    let spread = spec["topologySpreadConstraints"].as_array().unwrap();
    assert_eq!(spread[0]["labelSelector"]["matchLabels"], serde_json::to_value(o.selector()).unwrap());
    assert_eq!(spread[0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(
        spread[1]["labelSelector"]["matchLabels"],
        json!({"tier": "edge"}),
        "a given selector is kept"
    );
    // Labels and annotations: the user's beside every one of the operator's.
    let labels = p["metadata"]["labels"].as_object().unwrap();
    assert_eq!(labels["team"], "payments");
    for (k, v) in o.labels() {
        assert_eq!(labels[&k], v.as_str(), "{k}");
    }
    let annotations = p["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(annotations["sidecar.istio.io/inject"], "false");
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert!(
        annotations.contains_key(builders::CONFIG_HASH)
            && annotations.contains_key(builders::CREDENTIALS_HASH)
    );
    let service = serde_json::to_value(builders::service(&o)).unwrap();
    assert_eq!(
        service["metadata"]["annotations"],
        json!({"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"})
    );
    // Without the fields nothing is added: objects written for the Go operator build the
    // same pods as before.
    let plain = pod(&ic(json!({})));
    for f in ["tolerations", "nodeSelector", "topologySpreadConstraints", "priorityClassName"] {
        assert!(plain["spec"].get(f).is_none(), "{f}");
    }
    assert!(
        serde_json::to_value(builders::service(&ic(json!({})))).unwrap()["metadata"]
            .get("annotations")
            .is_none()
    );
}

/// Every label and annotation key the operator puts on a router pod or Service is one that
/// `qdr_api::owned_keys` lists, so validation refuses a user's value for it.
#[test]
fn every_key_the_operator_writes_is_refused_to_users() {
    for o in [ic(json!({})), ic(json!({"deploymentPlan": {"placement": "Every"}}))] {
        let p = pod(&o);
        for k in p["metadata"]["labels"].as_object().unwrap().keys() {
            assert!(qdr_api::owned_keys::owned_pod_label(k), "pod label {k}");
        }
        for k in p["metadata"]["annotations"].as_object().unwrap().keys() {
            assert!(qdr_api::owned_keys::owned_pod_annotation(k), "pod annotation {k}");
        }
        let service = serde_json::to_value(builders::service(&o)).unwrap();
        for k in service["metadata"]["annotations"].as_object().into_iter().flatten().map(|(k, _)| k) {
            assert!(qdr_api::owned_keys::owned_service_annotation(k), "Service annotation {k}");
        }
    }
}

/// Issue 72: the annotations the operator writes on a pod template fit in what
/// `podAnnotations` leaves them (`qdr_api::owned_keys::POD_ANNOTATION_RESERVE`), for a
/// spec that sets every field the configuration hash covers, rolled for all of them and
/// restarted for a refused configuration: user annotations at their limit never make the
/// API server refuse the workload.
#[test]
fn the_operators_pod_annotations_fit_in_their_reserve() {
    let o = ic(json!({
        "deploymentPlan": {"role": "interior", "livenessPort": 8889, "placement": "AntiAffinity", "size": 3},
        "users": "mesh-users-with-a-long-name",
        "listeners": [{"port": 5672, "name": "amqp"}, {"port": 5671, "name": "amqps", "sslProfile": "tls"}],
        "interRouterListeners": [{"port": 55671, "sslProfile": "inter-router"}],
        "edgeListeners": [{"port": 45672}],
        "sslProfiles": [{"name": "tls", "credentials": "tls-secret", "caCert": "tls-secret"},
                        {"name": "inter-router", "generateCredentials": true, "generateCaCert": true, "mutualAuth": true}],
        "interRouterConnectors": [{"host": "other.example.com", "port": 55671, "sslProfile": "inter-router"}],
        "connectors": [{"name": "broker", "host": "broker.example.com", "port": 5672, "routeContainer": true}],
        "addresses": [{"prefix": "queue", "distribution": "balanced", "waypoint": true}],
        "linkRoutes": [{"prefix": "lr", "direction": "in", "connection": "broker"}],
        "autoLinks": [{"address": "queue.a", "direction": "out", "connection": "broker"}],
    }));
    let config = Rendered::of(o.spec());
    let every_field: Vec<&str> =
        config.startup_fields.split(';').filter_map(|f| f.split('=').next()).collect();
    let roll = builders::Roll {
        rolled_by: Some(every_field.join(", ")),
        restarted_for: Some("0123456789".into()),
        gated: true,
    };
    let template =
        builders::pod_template(&o, &settings(), &config, &"f".repeat(64), &Default::default(), &roll);
    let annotations = template.metadata.unwrap().annotations.unwrap();
    let bytes: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(
        bytes <= qdr_api::owned_keys::POD_ANNOTATION_RESERVE / 2,
        "{bytes} bytes of the operator's annotations (half the reserve at most, for fields to come): {annotations:#?}"
    );
}

/// The ingress rules of `mesh`'s NetworkPolicy as `(ports, from)`: `from` is `"anywhere"`,
/// `"routers"` (this operator's router pods of any namespace) or `"controller"` (the
/// controller's pods in its namespace), and anything else fails the test.
fn policy_rules(o: &ValidatedInterconnect, admin: &[String]) -> Vec<(Vec<i32>, &'static str)> {
    let (_, policy) = builders::network_policy(o, &settings(), admin);
    let policy = serde_json::to_value(policy.expect("a NetworkPolicy")).unwrap();
    assert_eq!(policy["metadata"]["name"], "mesh");
    assert_eq!(
        policy["spec"]["podSelector"],
        json!({"matchLabels": {"application": "mesh", "interconnect_cr": "mesh"}})
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert!(policy["spec"].get("egress").is_none(), "egress is not restricted: {policy}");
    let routers = json!([{"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "app.kubernetes.io/component": "router", "app.kubernetes.io/managed-by": "qdr-operator"}}}]);
    let controller = json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "qdr-operator"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "qdr-controller"}}}]);
    (policy["spec"]["ingress"].as_array().unwrap().iter())
        .map(|rule| {
            let ports = (rule["ports"].as_array().unwrap().iter())
                .map(|p| {
                    assert_eq!(p["protocol"], "TCP");
                    p["port"].as_i64().unwrap() as i32
                })
                .collect();
            let from = match rule.get("from") {
                None => "anywhere",
                Some(f) if *f == routers => "routers",
                Some(f) if *f == controller => "controller",
                Some(f) => panic!("an unexpected peer: {f}"),
            };
            (ports, from)
        })
        .collect()
}

/// The list: the management port only from the controller; the inter-router and edge
/// ports only from router pods unless exposed or offered to sites; the health port and the
/// client listeners from anywhere; nothing else open.
#[test]
fn the_network_policy_admits_each_port_only_from_whom_needs_it() {
    // Every listener of the defaults, with 55671 not exposed.
    let o = ic(json!({"interRouterListeners": [{"port": 55671, "sslProfile": "inter-router",
        "saslMechanisms": "EXTERNAL", "authenticatePeer": true}]}))
    .with_management()
    .0;
    assert_eq!(
        policy_rules(&o, &[]),
        [
            (vec![5671, 5672, 8080, 8888], "anywhere"),
            (vec![45672, 55671], "routers"),
            (vec![55670], "controller")
        ]
    );
    let (policy, _) = builders::network_policy(&o, &settings(), &[]);
    assert_eq!(
        policy,
        builders::Policy::Managed {
            open: vec![5671, 5672, 8080, 8888],
            routers: vec![45672, 55671],
            management: Some(55670)
        }
    );
    // The defaults expose 55671 (the Go operator's Ingress or Route). An Ingress carries
    // HTTP, so it stays closed to all but routers; an OpenShift Route carries TLS through
    // (passthrough): its connections come from the cluster's router, from anywhere.
    let exposed = ic(json!({})).with_management().0;
    assert_eq!(policy_rules(&exposed, &[]), policy_rules(&o, &[]));
    let mut openshift = settings();
    openshift.routes = true;
    let (_, routed) = builders::network_policy(&exposed, &openshift, &[]);
    let routed = serde_json::to_value(routed.unwrap()).unwrap();
    assert_eq!(routed["spec"]["ingress"][0]["ports"].as_array().unwrap().len(), 5, "{routed}");
    assert_eq!(routed["spec"]["ingress"][0]["ports"][4]["port"], 55671, "{routed}");
    assert_eq!(
        routed["spec"]["ingress"][1]["ports"],
        json!([{"port": 45672, "protocol": "TCP"}]),
        "{routed}"
    );
    // A NodePort or LoadBalancer Service opens every router port to outside the cluster.
    let balanced = ic(json!({"deploymentPlan": {"serviceType": "LoadBalancer"},
        "interRouterListeners": [{"port": 55671}]}))
    .with_management()
    .0;
    assert_eq!(
        policy_rules(&balanced, &[]),
        [(vec![5671, 5672, 8080, 8888, 45672, 55671], "anywhere"), (vec![55670], "controller")]
    );
    // An edge router: its client and health ports; no inter-router or edge listener.
    let edge =
        ic(json!({"deploymentPlan": {"role": "edge"}, "listeners": [{"port": 5672}]})).with_management().0;
    assert_eq!(policy_rules(&edge, &[]), [(vec![5672, 8888], "anywhere"), (vec![55670], "controller")]);
    // Without the management listener (a listener of the spec took its port) the port is
    // a client listener like any other.
    let (taken, _) = ic(json!({"listeners": [{"port": 55670}]})).with_management();
    assert_eq!(policy_rules(&taken, &[]), [(vec![8888, 55670], "anywhere"), (vec![45672, 55671], "routers")]);
    // A custom health port is the one opened.
    let health = ic(json!({"deploymentPlan": {"livenessPort": 9999}, "listeners": [{"port": 5672}],
        "interRouterListeners": [{"port": 55672}], "edgeListeners": [{"port": 45673}]}))
    .with_management()
    .0;
    assert_eq!(
        policy_rules(&health, &[]),
        [(vec![5672, 9999], "anywhere"), (vec![45673, 55672], "routers"), (vec![55670], "controller")]
    );
}

/// A listener whose profile trusts the sites of AccessGrants is reached by those sites from
/// outside the cluster: open to anywhere; the other inter-router listeners stay closed.
#[test]
fn a_listener_offered_to_sites_is_open_and_the_others_are_not() {
    let o = ic(json!({"listeners": [{"port": 5672}],
        "interRouterListeners": [{"port": 55671, "sslProfile": "inter-router"}, {"port": 55672, "sslProfile": "local"}],
        "sslProfiles": [{"name": "inter-router", "generateCaCert": true, "generateCredentials": true},
                        {"name": "local", "generateCaCert": true, "generateCredentials": true}]}))
    .with_management()
    .0
    .with_site_trust(vec![("inter-router".into(), vec!["ca".into()])]);
    assert_eq!(
        policy_rules(&o, &[]),
        [(vec![5672, 8888, 55671], "anywhere"), (vec![45672, 55672], "routers"), (vec![55670], "controller")]
    );
}

/// `enabled: false` and an admin's policy make none; the controller's labels come from its
/// settings.
#[test]
fn no_network_policy_when_disabled_or_the_admin_has_one() {
    let off = ic(json!({"deploymentPlan": {"networkPolicy": {"enabled": false}}})).with_management().0;
    assert_eq!(builders::network_policy(&off, &settings(), &[]), (builders::Policy::Disabled, None));
    let o = ic(json!({})).with_management().0;
    let admin = vec!["allow-monitoring".to_string()];
    assert_eq!(
        builders::network_policy(&o, &settings(), &admin),
        (builders::Policy::Admin(admin.clone()), None)
    );
    // Disabled wins over an admin's.
    assert_eq!(builders::network_policy(&off, &settings(), &admin), (builders::Policy::Disabled, None));
    let mut s = settings();
    s.controller_pods = builders::ControllerPods {
        namespace: "operators".into(),
        labels: [("app".to_string(), "qdr".to_string())].into(),
    };
    let (_, policy) = builders::network_policy(&o, &s, &[]);
    let policy = serde_json::to_value(policy.unwrap()).unwrap();
    let last = policy["spec"]["ingress"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["from"],
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "operators"}},
            "podSelector": {"matchLabels": {"app": "qdr"}}}])
    );
}
