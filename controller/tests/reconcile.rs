//! The controller on a real control plane with kube-controller-manager and simulated nodes
//! (pods are scheduled and become Ready): each example
//! reconciles to the expected objects, scaling, image and listener changes, Any → Every,
//! garbage collection, invalid objects, and `kubectl wait --for=condition=Ready`.

mod common;

use std::time::Duration;

use common::{condition_with_reason, events, eventually, interconnects};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

static CONTROLLER: common::SharedController = common::SharedController::new();
/// Simulated nodes: router pods are scheduled and become Ready (kwok).
const NODES: usize = 3;

async fn setup() -> &'static qdr_tests::ControlPlane {
    CONTROLLER.start(NODES, "controller-system", "controller-0").await
}

async fn create(ns: &qdr_tests::TestNamespace, obj: Value) -> String {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    let name = o.metadata.name.clone().unwrap();
    interconnects(&ns.client, &ns.name).create(&PostParams::default(), &o).await.unwrap();
    name
}

async fn deployment(ns: &qdr_tests::TestNamespace, name: &str) -> Deployment {
    let api: Api<Deployment> = ns.api();
    eventually(&format!("Deployment {name}"), Duration::from_secs(30), || async {
        api.get_opt(name).await.ok().flatten()
    })
    .await
}

fn env<'a>(d: &'a Deployment, name: &str) -> Option<&'a str> {
    let c = &d.spec.as_ref()?.template.spec.as_ref()?.containers[0];
    c.env.as_ref()?.iter().find(|e| e.name == name)?.value.as_deref()
}

/// The router configuration the pods of `d` read: the ConfigMap its `QDROUTERD_CONF` file
/// comes from (the volume mounted at that directory), as the API server has it now.
async fn mounted_config(ns: &qdr_tests::TestNamespace, d: &Deployment) -> String {
    let path = env(d, "QDROUTERD_CONF").expect("QDROUTERD_CONF");
    assert_eq!(env(d, "QDROUTERD_CONF_TYPE"), Some("json"));
    let (dir, file) = path.rsplit_once('/').unwrap();
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let mount = pod.containers[0].volume_mounts.iter().flatten().find(|m| m.mount_path == dir).unwrap();
    assert_eq!(mount.read_only, Some(true));
    let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name).unwrap();
    let cm = &volume.config_map.as_ref().expect("a ConfigMap volume").name;
    let cm: ConfigMap = ns.api().get(cm).await.unwrap();
    cm.data.unwrap()[file].clone()
}

fn hash(d: &Deployment) -> String {
    d.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()["qdr-operator.io/config-hash"].clone()
}

/// Moves Interconnect `name`'s edge listener to port 45699: a change of what a running
/// router cannot take, so one that rolls the routers (docs/live-configuration.md).
async fn start_up_change(ns: &qdr_tests::TestNamespace, name: &str) {
    interconnects(&ns.client, &ns.name)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"edgeListeners": [{"port": 45699}]}})),
        )
        .await
        .unwrap();
}

fn example(file: &str) -> Value {
    let p = qdr_tests::workspace_root().join("api/tests/data/go-operator").join(file);
    serde_saphyr::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[tokio::test]
async fn interior_example_reconciles_to_the_go_operators_object_graph() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-interior").await;
    let name = create(&ns, example("d-basic-interior.yaml")).await;
    let d = deployment(&ns, &name).await;
    let uid = interconnects(&ns.client, &ns.name).get(&name).await.unwrap().metadata.uid.unwrap();
    let owned = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid && o.controller == Some(true) && o.kind == "Interconnect")
    };
    assert!(owned(&d.metadata));
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
    let labels = d.metadata.labels.clone().unwrap();
    assert_eq!(labels["application"], name);
    assert_eq!(labels["interconnect_cr"], name);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "qdr-operator");
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.name, name);
    assert_eq!(c.image.as_deref(), Some("quay.io/interconnectedcloud/qdrouterd:1.13.0"));
    assert!(
        mounted_config(&ns, &d).await.contains(r#"["router", {"mode": "interior", "id": "${HOSTNAME}"}]"#)
    );
    // The operator's management listener is there though this controller does not read the
    // routers (`--observe-mesh=off`): turning reading on or off changes no router's
    // configuration, so it restarts none.
    let config = mounted_config(&ns, &d).await;
    assert!(
        config.contains(r#""name": "qdr-operator-management-listener""#)
            && config.contains(r#""port": 55670"#),
        "{config}"
    );
    let management = format!("{name}-qdr-operator-management-credentials");
    assert!(
        c.volume_mounts.iter().flatten().any(|m| m.mount_path.ends_with(&management)),
        "{:?}",
        c.volume_mounts
    );
    assert_eq!(env(&d, "DOLLAR"), Some("$"));
    // The controller links the routers (issue 57): no discovery that waits for every peer,
    // and no API token in the router pods.
    assert_eq!(env(&d, "QDROUTERD_AUTO_MESH_DISCOVERY"), None);
    assert_eq!(env(&d, "POD_IP"), None);
    let pod_spec = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.automount_service_account_token, Some(false));
    assert_eq!(env(&d, "APPLICATION_NAME"), Some(name.as_str()));
    assert_eq!(env(&d, "POD_COUNT"), None, "a size-dependent value would roll the routers on every scale");
    let probe = c.liveness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
    assert_eq!(probe.path.as_deref(), Some("/healthz"));
    let ports: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
    // Client listeners are written into the running routers, so their ports are not in the
    // pod template (adding one would roll the routers); container ports are informational.
    assert_eq!(ports, [55671, 8888], "the inter-router listeners, then the metrics port");
    let mounts: Vec<&str> = c.volume_mounts.iter().flatten().map(|m| m.mount_path.as_str()).collect();
    assert!(
        mounts.contains(
            &format!("/etc/qpid-dispatch-certs/inter-router/{name}-inter-router-credentials").as_str()
        ),
        "{mounts:?}"
    );
    assert!(mounts.contains(&"/etc/qpid-dispatch/sasl-users"));
    // Go bug 4: no unmounted extra CA volume; every volume is mounted.
    let vols: Vec<&str> = pod.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    let mounted: Vec<&str> = c.volume_mounts.iter().flatten().map(|m| m.name.as_str()).collect();
    assert_eq!(vols.len(), mounted.len(), "volumes {vols:?} vs mounts {mounted:?}");

    // The Service is written after the workload (apply order), so it may land a moment later.
    let services: Api<Service> = ns.api();
    let svc = eventually("Service", Duration::from_secs(30), || async {
        services.get_opt(&name).await.ok().flatten()
    })
    .await;
    assert!(owned(&svc.metadata));
    let sports: Vec<(String, i32)> =
        svc.spec.unwrap().ports.unwrap().into_iter().map(|p| (p.name.unwrap(), p.port)).collect();
    assert_eq!(
        sports,
        [
            ("5672".into(), 5672),
            ("8080".into(), 8080),
            ("5671".into(), 5671),
            ("55671".into(), 55671),
            ("45672".into(), 45672)
        ]
    );
    for n in [&name] {
        assert!(owned(&ns.api::<ServiceAccount>().get(n).await.unwrap().metadata));
        // No token mounted, so no Role bound to the routers' ServiceAccount (issue 72).
        assert!(ns.api::<Role>().get_opt(n).await.unwrap().is_none(), "a Role for routers without a token");
        assert!(ns.api::<RoleBinding>().get_opt(n).await.unwrap().is_none());
    }
    let cm: ConfigMap = ns.api::<ConfigMap>().get(&format!("{name}-sasl-config")).await.unwrap();
    assert!(cm.data.unwrap()["qdrouterd.conf"].contains("sasldb_path: /tmp/qdrouterd.sasldb"));
    let users: Secret = ns.api::<Secret>().get(&format!("{name}-users")).await.unwrap();
    assert!(users.data.unwrap().contains_key("guest"));
    for s in ["default-credentials", "inter-router-credentials", "inter-router-ca"] {
        let sec: Secret = ns.api::<Secret>().get(&format!("{name}-{s}")).await.unwrap();
        let data = sec.data.unwrap();
        assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"), "{s}");
    }
    // Exposed listeners: the console and the inter-router listener (networking.k8s.io/v1).
    let ings: Vec<String> = ns
        .api::<Ingress>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.metadata.name.unwrap())
        .collect();
    assert_eq!(ings.len(), 2, "{ings:?}");
    // Go bug 1: the controller never writes the spec.
    let stored = interconnects(&ns.client, &ns.name).get(&name).await.unwrap();
    assert_eq!(stored.data["spec"], example("d-basic-interior.yaml")["spec"]);
    assert_eq!(stored.metadata.generation, Some(1));
}

#[tokio::test]
async fn scaling_image_and_listener_changes_reach_the_children() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-changes").await;
    let name = create(&ns, example("d-basic-interior.yaml")).await;
    let ics = interconnects(&ns.client, &ns.name);
    let deps: Api<Deployment> = ns.api();
    let d0 = deployment(&ns, &name).await;
    let template0 = d0.spec.as_ref().unwrap().template.clone();
    for size in [5, 3] {
        ics.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deploymentPlan": {"size": size}}})),
        )
        .await
        .unwrap();
        let d = eventually(&format!("replicas {size}"), Duration::from_secs(20), || async {
            deps.get(&name).await.ok().filter(|d| d.spec.as_ref().unwrap().replicas == Some(size))
        })
        .await;
        // Scaling never rolls the routers: the pod template (and its hash) is unchanged.
        assert_eq!(d.spec.as_ref().unwrap().template, template0, "size {size} changed the pod template");
    }
    // The Deployment controller made one ReplicaSet, never a second one for a scale.
    let rs: Api<k8s_openapi::api::apps::v1::ReplicaSet> = ns.api();
    let sets = rs.list(&ListParams::default().labels(&format!("application={name}"))).await.unwrap().items;
    assert_eq!(sets.len(), 1, "{:?}", sets.iter().map(|r| &r.metadata.name).collect::<Vec<_>>());
    ics.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deploymentPlan": {"image": "example.invalid/qdrouterd:2"}}})),
    )
    .await
    .unwrap();
    eventually("new image", Duration::from_secs(20), || async {
        deps.get(&name).await.ok().filter(|d| {
            d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].image.as_deref()
                == Some("example.invalid/qdrouterd:2")
        })
    })
    .await;
    let before = hash(&deps.get(&name).await.unwrap());
    ics.patch(
        &name,
        &PatchParams::default(),
        // The amqps listener stays, so its sslProfile (start-up) stays.
        &Patch::Merge(json!({"spec": {"listeners": [
            {"port": 5672}, {"port": 5671, "sslProfile": "default"}, {"port": 6000, "name": "extra"}]}})),
    )
    .await
    .unwrap();
    // A client listener is written into the running routers (docs/live-configuration.md):
    // the mounted ConfigMap changes in place, for a router that restarts, and the pod
    // template does not (no roll).
    eventually("the listener in the mounted configuration", Duration::from_secs(20), || async {
        let d = deps.get(&name).await.ok()?;
        mounted_config(&ns, &d).await.contains(r#""port": 6000"#).then_some(())
    })
    .await;
    let d = deps.get(&name).await.unwrap();
    assert_eq!(hash(&d), before, "a listener rolled the routers");
    assert_eq!(hash(&d0), hash(&d));
    // What a running router cannot take (its edge listener) is a new pod template.
    start_up_change(&ns, &name).await;
    let d = eventually("a start-up change", Duration::from_secs(20), || async {
        deps.get(&name).await.ok().filter(|d| hash(d) != before)
    })
    .await;
    assert!(mounted_config(&ns, &d).await.contains(r#""port": 45699"#));
    let annotations = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref()?.annotations.clone());
    assert_eq!(
        annotations.unwrap_or_default().get("qdr-operator.io/config-rolled-by").map(String::as_str),
        Some("spec.edgeListeners"),
        "the template names what rolled the routers"
    );
    // Go bug 6: the Service follows the listeners.
    let svc: Api<Service> = ns.api();
    eventually("Service port 6000", Duration::from_secs(20), || async {
        svc.get(&name).await.ok().filter(|s| {
            s.spec
                .as_ref()
                .unwrap()
                .ports
                .iter()
                .flatten()
                .any(|p| p.port == 6000 && p.name.as_deref() == Some("extra"))
        })
    })
    .await;
    // Events are published after the pass's status write: wait for them, then count.
    eventually("ConfigChanged event", Duration::from_secs(20), || async {
        (events(&ns, "ConfigChanged").await > 0).then_some(())
    })
    .await;
    // A create the API server failed to answer is retried (`recorder::RETRY_DELAYS`, about
    // half a minute): wait for both, then count.
    let retries = qdr_controller::recorder::RETRY_SPAN;
    eventually("two Scaled events", retries + Duration::from_secs(15), || async {
        (events(&ns, "Scaled").await >= 2).then_some(())
    })
    .await;
    assert_eq!(events(&ns, "Scaled").await, 2, "one event per scaling, not per pass");
    assert_eq!(events(&ns, "ConfigChanged").await, 1, "one event per config rollout");
    // The console listener is no longer there: its Ingress is pruned.
    let ing: Api<Ingress> = ns.api();
    eventually("console Ingress pruned", Duration::from_secs(20), || async {
        ing.get_opt(&format!("{name}-8080")).await.ok().filter(|i| i.is_none())
    })
    .await;
}

#[tokio::test]
async fn placement_any_to_every_leaves_a_daemonset_and_no_deployment() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-every").await;
    let name = create(&ns, example("a-cr.yaml")).await;
    deployment(&ns, &name).await;
    interconnects(&ns.client, &ns.name)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deploymentPlan": {"placement": "Every", "size": null}}})),
        )
        .await
        .unwrap();
    let ds: Api<DaemonSet> = ns.api();
    eventually("DaemonSet", Duration::from_secs(20), || async { ds.get_opt(&name).await.ok().flatten() })
        .await;
    let deps: Api<Deployment> = ns.api();
    eventually("Deployment gone", Duration::from_secs(30), || async {
        match deps.get_opt(&name).await {
            Ok(None) => Some(()),
            Ok(Some(d)) if d.metadata.deletion_timestamp.is_some() => Some(()),
            _ => None,
        }
    })
    .await;
}

#[tokio::test]
async fn an_invalid_object_stored_without_webhook_gets_spec_valid_false_and_no_children() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-invalid").await;
    // Valid for the CRD, invalid for validate (a validate-only rule).
    let name = create(
        &ns,
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect", "metadata": {"name": "bad"},
               "spec": {"listeners": [{"port": 5672}, {"name": "port-5672", "port": 5673}]}}),
    )
    .await;
    let ics = interconnects(&ns.client, &ns.name);
    let status = eventually("SpecValid=False", Duration::from_secs(20), || async {
        let o = ics.get(&name).await.ok()?;
        let conds = o.data["status"]["conditions"].as_array()?.clone();
        conds.into_iter().find(|c| c["type"] == "SpecValid" && c["status"] == "False")
    })
    .await;
    assert!(status["message"].as_str().unwrap().contains("spec.listeners[1].name"), "{status}");
    // Another pass over the same generation (woken by a Secret the spec names: its default
    // users Secret appearing; a metadata-only change of the Interconnect wakes nothing);
    // once the controller has run it, exactly one Warning exists.
    let health = CONTROLLER.health();
    let before = common::reconciles(health).await.expect("controller metrics");
    let users: Secret =
        serde_json::from_value(json!({"metadata": {"name": "bad-users"}, "stringData": {"u": "p"}})).unwrap();
    ns.api::<Secret>().create(&PostParams::default(), &users).await.unwrap();
    eventually("another reconcile", Duration::from_secs(20), || async {
        common::reconciles(health).await.filter(|n| *n > before)
    })
    .await;
    assert_eq!(events(&ns, "InvalidSpec").await, 1, "one Warning per invalid generation, not one per pass");
    assert!(ns.api::<Deployment>().get_opt(&name).await.unwrap().is_none());
    assert!(ns.api::<Service>().get_opt(&name).await.unwrap().is_none());
}

#[tokio::test]
async fn deleting_the_interconnect_garbage_collects_its_children() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-delete").await;
    let name = create(&ns, example("a-cr.yaml")).await;
    deployment(&ns, &name).await;
    interconnects(&ns.client, &ns.name).delete(&name, &DeleteParams::background()).await.unwrap();
    let deps: Api<Deployment> = ns.api();
    let svc: Api<Service> = ns.api();
    // The garbage collector rediscovers new kinds every 30 s.
    eventually("children collected", Duration::from_secs(90), || async {
        let gone = deps.get_opt(&name).await.ok()?.is_none() && svc.get_opt(&name).await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
}

#[tokio::test]
async fn kubectl_wait_for_ready_returns_once_the_routers_are_available() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-ready").await;
    let name = create(&ns, example("c-alm-example.yaml")).await;
    deployment(&ns, &name).await;
    let pods: Api<Pod> = ns.api();
    let out = cp
        .kubectl()
        .args([
            "wait",
            "--for=condition=Ready",
            &format!("interconnect/{name}"),
            "-n",
            &ns.name,
            "--timeout=30s",
        ])
        .output()
        .unwrap();
    if !out.status.success() {
        let ic = interconnects(&ns.client, &ns.name).get(&name).await.unwrap();
        let d = ns.api::<Deployment>().get(&name).await.unwrap();
        let ps: Vec<_> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|p| (p.metadata.name, p.status.map(|s| s.phase)))
            .collect();
        panic!(
            "{}\nstatus: {:#}\ndeployment status: {:?}\npods: {ps:?}",
            String::from_utf8_lossy(&out.stderr),
            ic.data["status"],
            d.status
        );
    }
    let ic = interconnects(&ns.client, &ns.name).get(&name).await.unwrap();
    assert_eq!(ic.data["status"]["readyReplicas"], 2);
    assert_eq!(ic.data["status"]["pods"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn every_go_operator_example_reconciles_to_its_objects() {
    let cp = setup().await;
    let dir = qdr_tests::workspace_root().join("api/tests/data/go-operator");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    for f in files {
        let file = f.file_name().unwrap().to_string_lossy().to_string();
        let ns = cp.namespace("ctl-example").await;
        let raw: Value = serde_saphyr::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let ic: qdr_api::Interconnect = serde_json::from_value(raw.clone()).unwrap();
        let effective = qdr_api::defaults(&ic);
        if file.starts_with("g-") || file.starts_with("h-") {
            continue; // interior routers with edgeConnectors: the CRD rejects them (tests/crd.rs)
        }
        let name = create(&ns, raw).await;
        let d = deployment(&ns, &name).await;
        let plan = effective.spec.deployment_plan.clone().unwrap();
        assert_eq!(d.spec.as_ref().unwrap().replicas, plan.size, "{file}");
        let c = &d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
        let want_ports: Vec<i32> = (effective.spec.inter_router_listeners.iter().flatten())
            .map(|l| l.port)
            .chain([plan.liveness_port.unwrap()])
            .collect();
        let ports: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
        assert_eq!(ports, want_ports, "{file}");
        // What the spec renders to, with the operator's management listener (added whether
        // or not the routers are read) unless the spec is in its way.
        let mut stored = ic.clone();
        stored.metadata.namespace = Some(ns.name.clone());
        stored.metadata.uid = Some("uid".into());
        let valid = qdr_controller::validated::ValidatedInterconnect::new(&stored).expect(&file);
        let (valid, _) = valid.with_management();
        let conf = mounted_config(&ns, &d).await;
        assert_eq!(conf, valid.rendered_config().text, "{file}");
        let svc: Service = eventually(&format!("{file}: Service"), Duration::from_secs(20), || async {
            ns.api::<Service>().get_opt(&name).await.ok().flatten()
        })
        .await;
        let svc_ports = svc.spec.unwrap().ports.unwrap().len();
        let listeners = [
            &effective.spec.listeners,
            &effective.spec.inter_router_listeners,
            &effective.spec.edge_listeners,
        ]
        .iter()
        .map(|l| l.as_ref().map_or(0, Vec::len))
        .sum::<usize>();
        assert_eq!(svc_ports, listeners, "{file}");
        // Every Secret the pod mounts exists (generated or user-supplied ones named by the example).
        let secrets: Api<Secret> = ns.api();
        for v in d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().volumes.iter().flatten() {
            if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
                let found = eventually(&format!("{file}: Secret {s}"), Duration::from_secs(20), || async {
                    secrets.get_opt(&s).await.ok().flatten()
                })
                .await;
                assert!(found.data.is_some(), "{file}: {s}");
            }
        }
    }
}

/// A child name taken by a foreign object: nothing is applied, the foreign objects stay
/// byte-for-byte as they were, also after the Interconnect is deleted.
#[tokio::test]
async fn foreign_objects_with_a_childs_name_are_never_taken_over() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-foreign").await;
    // The namespace's own ServiceAccount `default`, a user's ServiceAccount `gateway`, and a
    // user's Service and Deployment `broker`.
    let sas: Api<ServiceAccount> = ns.api();
    eventually("ServiceAccount default", Duration::from_secs(30), || async {
        sas.get_opt("default").await.ok().flatten()
    })
    .await;
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gateway"}})).unwrap(),
    )
    .await
    .unwrap();
    let svc: Api<Service> = ns.api();
    let deps: Api<Deployment> = ns.api();
    svc.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
        "metadata": {"name": "broker"}, "spec": {"ports": [{"port": 5672}], "selector": {"app": "broker"}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    deps.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "broker"},
        "spec": {"selector": {"matchLabels": {"app": "broker"}}, "template": {"metadata": {"labels": {"app": "broker"}},
                 "spec": {"containers": [{"name": "b", "image": "example.invalid/broker:1"}]}}}})).unwrap())
        .await
        .unwrap();
    // Without the Deployment's status (its `status`, the status entry of managedFields and
    // the resourceVersion): kube-controller-manager keeps writing it as the pod becomes
    // available on a simulated node. Anything the controller wrote would show in metadata
    // (managedFields, labels, owner references) or spec.
    let snapshot = || async {
        let mut d = serde_json::to_value(deps.get("broker").await.unwrap()).unwrap();
        d.as_object_mut().unwrap().remove("status");
        d["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        d["metadata"]["managedFields"].as_array_mut().unwrap().retain(|e| e["subresource"] != "status");
        (
            serde_json::to_value(sas.get("default").await.unwrap()).unwrap(),
            serde_json::to_value(sas.get("gateway").await.unwrap()).unwrap(),
            serde_json::to_value(svc.get("broker").await.unwrap()).unwrap(),
            d,
        )
    };
    // KCM writes the Deployment's status once; take the snapshot after it.
    eventually("broker Deployment observed", Duration::from_secs(30), || async {
        deps.get("broker")
            .await
            .ok()
            .filter(|d| d.status.as_ref().and_then(|s| s.observed_generation) == Some(1))
    })
    .await;
    let before = snapshot().await;
    let ic = |n: &str| {
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": n}, "spec": {"deploymentPlan": {"size": 1}}})
    };
    create(&ns, ic("default")).await;
    create(&ns, ic("gateway")).await;
    create(&ns, ic("broker")).await;
    // `default` is refused by validation (every namespace holds that ServiceAccount): it
    // never gets as far as a conflict.
    let d = condition_with_reason(&ns, "default", "SpecValid", "InvalidSpec").await;
    assert_eq!(d["status"], "False");
    assert!(d["message"].as_str().unwrap().contains("metadata.name: Invalid value: \"default\""), "{d}");
    let g = condition_with_reason(&ns, "gateway", "Degraded", "ConflictingObject").await;
    assert_eq!(g["status"], "True");
    assert!(g["message"].as_str().unwrap().contains("ServiceAccount gateway exists"), "{g}");
    let b = condition_with_reason(&ns, "broker", "Degraded", "ConflictingObject").await;
    let msg = b["message"].as_str().unwrap();
    assert!(msg.contains("Deployment broker exists") && msg.contains("Service broker exists"), "{msg}");
    let ready = condition_with_reason(&ns, "broker", "Ready", "ConflictingObject").await;
    assert_eq!(ready["status"], "False");
    eventually("ConflictingObject events", Duration::from_secs(20), || async {
        (events(&ns, "ConflictingObject").await >= 2).then_some(())
    })
    .await;
    // Nothing else of either Interconnect was created.
    assert!(ns.api::<ConfigMap>().get_opt("broker-sasl-config").await.unwrap().is_none());
    assert!(ns.api::<Role>().get_opt("default").await.unwrap().is_none());
    assert!(ns.api::<Role>().get_opt("gateway").await.unwrap().is_none());
    assert_eq!(snapshot().await, before, "a foreign object was written");
    // Deleting the Interconnects collects nothing that was not theirs.
    let ics = interconnects(&ns.client, &ns.name);
    for n in ["default", "gateway", "broker"] {
        ics.delete(n, &DeleteParams::background()).await.unwrap();
    }
    eventually("Interconnects gone", Duration::from_secs(30), || async {
        (ics.list(&ListParams::default()).await.ok()?.items.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(snapshot().await, before, "a foreign object changed after the Interconnect was deleted");
}

/// A user's certificate for `tls`, from a CA of its own, valid for an hour.
fn user_certificate() -> qdr_certs::pki::CertKey {
    let ca = qdr_certs::pki::new_ca("user", std::time::SystemTime::now(), Duration::from_secs(3600)).unwrap();
    qdr_certs::pki::new_leaf(&ca, &["tls".into()], std::time::SystemTime::now(), Duration::from_secs(3600))
        .unwrap()
}

/// A referenced Secret that does not exist: conditions and one Warning name it and the
/// field; when it appears, the Interconnect is reconciled at once (it is watched) and the
/// routers roll onto it.
#[tokio::test]
async fn a_missing_user_secret_is_reported_and_picked_up_when_it_appears() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-missing").await;
    let name = create(
        &ns,
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect", "metadata": {"name": "tls"},
               "spec": {"listeners": [{"port": 5671, "sslProfile": "server"}],
                        "sslProfiles": [{"name": "server", "credentials": "my-tls"}]}}),
    )
    .await;
    let ready = condition_with_reason(&ns, &name, "Ready", "MissingSecret").await;
    let msg = ready["message"].as_str().unwrap();
    assert!(msg.contains("Secret my-tls (spec.sslProfiles[0].credentials) does not exist"), "{msg}");
    let progressing = condition_with_reason(&ns, &name, "Progressing", "MissingSecret").await;
    assert_eq!(progressing["status"], "True");
    let d = deployment(&ns, &name).await;
    let fingerprint = |d: &Deployment| {
        d.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()
            ["qdr-operator.io/credentials-hash"]
            .clone()
    };
    let before = fingerprint(&d);
    eventually("MissingSecret event", Duration::from_secs(20), || async {
        (events(&ns, "MissingSecret").await > 0).then_some(())
    })
    .await;
    // A Secret without the key: reported as such.
    let secrets: Api<Secret> = ns.api();
    let leaf = user_certificate();
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
            "metadata": {"name": "my-tls"}, "stringData": {"tls.crt": leaf.cert_pem}}))
            .unwrap(),
        )
        .await
        .unwrap();
    eventually("tls.key reported", Duration::from_secs(20), || async {
        let c = condition_with_reason(&ns, &name, "Ready", "MissingSecret").await;
        c["message"].as_str()?.contains("has no tls.key").then_some(())
    })
    .await;
    secrets
        .patch(
            "my-tls",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"tls.key": leaf.key_pem}})),
        )
        .await
        .unwrap();
    let ics = interconnects(&ns.client, &ns.name);
    eventually("MissingSecret cleared", Duration::from_secs(20), || async {
        let o = ics.get(&name).await.ok()?;
        let conds = o.data["status"]["conditions"].as_array()?.clone();
        conds.iter().all(|c| c["reason"] != "MissingSecret").then_some(())
    })
    .await;
    let deps: Api<Deployment> = ns.api();
    let d = eventually("routers roll onto the Secret", Duration::from_secs(20), || async {
        deps.get(&name).await.ok().filter(|d| fingerprint(d) != before)
    })
    .await;
    // The user's Secret is mounted, never owned or labelled.
    let s = secrets.get("my-tls").await.unwrap();
    assert!(s.metadata.owner_references.is_none(), "{:?}", s.metadata.owner_references);
    assert!(!fingerprint(&d).is_empty());
    assert_eq!(events(&ns, "MissingSecret").await, 1, "one Warning per generation");
}

/// A users Secret with a name the user chose is theirs: when it is missing it is reported,
/// never created (an apply of a directory may create the Interconnect first, and the user's
/// Secret must not become the Interconnect's); one that an earlier release created and owns
/// is released, so renaming `spec.users` and deleting the Interconnect leave it.
#[tokio::test]
async fn a_users_secret_the_user_named_is_never_created_owned_or_deleted() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-users").await;
    let name = create(
        &ns,
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
               "metadata": {"name": "squad"}, "spec": {"users": "team-users"}}),
    )
    .await;
    let ready = condition_with_reason(&ns, &name, "Ready", "MissingSecret").await;
    let msg = ready["message"].as_str().unwrap();
    assert!(msg.contains("Secret team-users (spec.users) does not exist"), "{msg}");
    let secrets: Api<Secret> = ns.api();
    assert!(secrets.get_opt("team-users").await.unwrap().is_none(), "the user's Secret was created for them");
    // The user's own Secret, applied after the Interconnect: used as it is.
    let mine: Secret = serde_json::from_value(
        json!({"metadata": {"name": "team-users"}, "stringData": {"alice": "wonder"}}),
    )
    .unwrap();
    secrets.create(&PostParams::default(), &mine).await.unwrap();
    let ics = interconnects(&ns.client, &ns.name);
    eventually("MissingSecret cleared", Duration::from_secs(30), || async {
        let o = ics.get(&name).await.ok()?;
        let conds = o.data["status"]["conditions"].as_array()?.clone();
        conds.iter().all(|c| c["reason"] != "MissingSecret").then_some(())
    })
    .await;
    let s = secrets.get("team-users").await.unwrap();
    assert!(s.metadata.owner_references.is_none(), "{:?}", s.metadata.owner_references);
    assert_eq!(s.data.unwrap().keys().collect::<Vec<_>>(), ["alice"], "nothing added");

    // One an earlier release created for this name and owns: released, not pruned.
    let uid = ics.get(&name).await.unwrap().metadata.uid.unwrap();
    let legacy: Secret = serde_json::from_value(json!({
        "metadata": {"name": "legacy-users", "labels": {"interconnect_cr": "squad", "app.kubernetes.io/managed-by": "qdr-operator"},
                     "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
                                          "name": "squad", "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "stringData": {"guest": "legacy"}}))
    .unwrap();
    secrets.create(&PostParams::default(), &legacy).await.unwrap();
    let users = |u: &str| Patch::Merge(json!({"spec": {"users": u}}));
    ics.patch(&name, &PatchParams::default(), &users("legacy-users")).await.unwrap();
    eventually("the earlier release's users Secret released", Duration::from_secs(30), || async {
        let s = secrets.get("legacy-users").await.ok()?;
        s.metadata.owner_references.as_ref().is_none_or(|r| r.is_empty()).then_some(())
    })
    .await;
    ics.patch(&name, &PatchParams::default(), &users("team-users")).await.unwrap();
    let generation = ics.get(&name).await.unwrap().metadata.generation.unwrap();
    eventually("the new generation reconciled", Duration::from_secs(30), || async {
        let o = ics.get(&name).await.ok()?;
        (o.data["status"]["observedGeneration"] == generation).then_some(())
    })
    .await;
    assert!(secrets.get_opt("legacy-users").await.unwrap().is_some(), "a user-named Secret was pruned");

    // Deleting the Interconnect (its Deployment collected) leaves both.
    ics.delete(&name, &DeleteParams::background()).await.unwrap();
    let deps: Api<Deployment> = ns.api();
    eventually("children collected", Duration::from_secs(90), || async {
        deps.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    for kept in ["team-users", "legacy-users"] {
        assert!(secrets.get_opt(kept).await.unwrap().is_some(), "{kept} was deleted with the Interconnect");
    }
}

/// Deleting a user Secret the routers mount never rolls them onto pods that cannot mount it:
/// the pod template and its configuration keep their last mountable state (no new
/// ReplicaSet, even across a spec change) and the status says why, until the Secret exists
/// again; then the routers roll once.
#[tokio::test]
async fn deleting_a_mounted_user_secret_never_rolls_the_routers() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let cp = setup().await;
    let ns = cp.namespace("ctl-held").await;
    let secrets: Api<Secret> = ns.api();
    let leaf = user_certificate();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "my-tls"}, "stringData": {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}}))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let name = create(
        &ns,
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect", "metadata": {"name": "held"},
               "spec": {"deploymentPlan": {"size": 2},
                        "listeners": [{"port": 5671, "sslProfile": "server"}],
                        "sslProfiles": [{"name": "server", "credentials": "my-tls"}]}}),
    )
    .await;
    condition_with_reason(&ns, &name, "Ready", "RoutersReady").await;
    let replica_sets = || async {
        let list = ns.api::<ReplicaSet>().list(&ListParams::default()).await.unwrap();
        let mut names: Vec<String> = list.items.into_iter().filter_map(|r| r.metadata.name).collect();
        names.sort();
        names
    };
    let before = replica_sets().await;
    assert_eq!(before.len(), 1, "{before:?}");
    let template = |d: &Deployment| serde_json::to_value(&d.spec.as_ref().unwrap().template).unwrap();
    let d0 = deployment(&ns, &name).await;

    secrets.delete("my-tls", &DeleteParams::default()).await.unwrap();
    let ready = condition_with_reason(&ns, &name, "Ready", "MissingSecret").await;
    assert!(ready["message"].as_str().unwrap().contains("left as they are"), "{ready}");
    // A spec change while the Secret is missing does not roll them either.
    start_up_change(&ns, &name).await;
    let ics = interconnects(&ns.client, &ns.name);
    eventually("the new generation reported", Duration::from_secs(20), || async {
        let o = ics.get(&name).await.ok()?;
        let conds = o.data["status"]["conditions"].as_array()?.clone();
        conds
            .iter()
            .any(|c| c["type"] == "Ready" && c["reason"] == "MissingSecret" && c["observedGeneration"] == 2)
            .then_some(())
    })
    .await;
    assert_eq!(replica_sets().await, before, "no new ReplicaSet while the Secret is missing");
    assert_eq!(template(&deployment(&ns, &name).await), template(&d0), "the pod template is left as it was");

    secrets.create(&PostParams::default(), &secret).await.unwrap();
    condition_with_reason(&ns, &name, "Ready", "RoutersReady").await;
    let after = eventually("the routers roll once the Secret is back", Duration::from_secs(30), || async {
        let now = replica_sets().await;
        (now.len() == 2).then_some(now)
    })
    .await;
    assert!(after.iter().any(|r| before.contains(r)), "{after:?}");
    assert!(mounted_config(&ns, &deployment(&ns, &name).await).await.contains(r#""port": 45699"#));
}

/// Router pods satisfy Pod Security `restricted`: in a namespace that enforces it, the
/// ReplicaSet's pods are admitted and the routers become Ready.
#[tokio::test]
async fn routers_run_in_a_namespace_enforcing_restricted() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-restricted").await;
    let out = cp
        .kubectl()
        .args(["label", "ns", &ns.name, "pod-security.kubernetes.io/enforce=restricted"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let name = create(
        &ns,
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
               "metadata": {"name": "strict"}, "spec": {"deploymentPlan": {"size": 2}}}),
    )
    .await;
    let ready = condition_with_reason(&ns, &name, "Ready", "RoutersReady").await;
    assert_eq!(ready["status"], "True", "{ready}");
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("interconnect_cr={name}")))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 2);
    for p in &pods.items {
        let sc = p.spec.as_ref().unwrap().security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.run_as_user, Some(10001));
    }
}

/// Once converged, an Interconnect costs no requests: the controller's own writes (applies,
/// Secrets, status) do not wake it, and the workload controller's and the pods' last status
/// changes cost at most a status write. Counted from the API server's audit log by the
/// controller's `User-Agent`.
#[tokio::test]
async fn a_converged_interconnect_is_left_alone() {
    let cp = setup().await;
    let ns = cp.namespace("ctl-quiet").await;
    create(
        &ns,
        json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "quiet"}, "spec": {"deploymentPlan": {"size": 2}}}),
    )
    .await;
    let ready = condition_with_reason(&ns, "quiet", "Ready", "RoutersReady").await;
    assert_eq!(ready["status"], "True", "{ready}");
    let requests = || {
        cp.requests_by("qdr-controller/")
            .into_iter()
            .filter(|e| e.object_ref.as_ref().is_some_and(|r| r.namespace == ns.name))
            .count()
    };
    let converged = requests();
    eprintln!("{converged} controller requests until Ready");
    // A quiet window of 5 s must come within a minute; an echo loop never goes quiet.
    const WINDOW: Duration = Duration::from_secs(5);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut before = requests();
    loop {
        tokio::time::sleep(WINDOW).await;
        let now = requests();
        if now == before {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controller kept making requests for a converged Interconnect: {} since Ready",
            now - converged
        );
        before = now;
    }
    // And what it took to converge (31 measured: one pass of writes, one full re-apply after
    // kube-controller-manager's revision annotation, status writes as the routers became
    // ready): passes woken by their own echoes cost about 22 each.
    assert!(converged <= 50, "{converged} requests to converge one Interconnect");
}

/// The routers' NetworkPolicy (issue 74): made by default with the ports the condition lists;
/// a default deny of the admin's (it admits nothing) leaves it in place; a policy of the
/// admin's that selects the routers and admits something makes the operator delete its own and
/// name the admin's (`AdminPolicy`); deleting that brings the operator's back; `enabled:
/// false` deletes it (`Disabled`). The routers are not rolled by any of it.
#[tokio::test]
async fn the_routers_network_policy_steps_aside_for_an_admins_and_comes_back() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let cp = setup().await;
    let ns = cp.namespace("network-policy").await;
    let policies: Api<NetworkPolicy> = ns.api();
    common::create_interconnect(&ns, "guarded", json!({"deploymentPlan": {"size": 1}})).await;
    let cond = condition_with_reason(&ns, "guarded", "NetworkPolicy", "Managed").await;
    assert_eq!(cond["status"], "True", "{cond}");
    assert_eq!(
        cond["message"],
        "NetworkPolicy guarded: ports 5671, 5672, 8080, 8888 from anywhere; 45672, 55671 from router pods; 55670 \
         from the controller's pods; every other port closed",
        "{cond}"
    );
    let ours = policies.get("guarded").await.unwrap();
    let owner = &ours.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Interconnect", Some(true)));
    let template = deployment(&ns, "guarded").await.spec.unwrap().template;

    let admin = |name: &str, spec: Value| -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    // A default deny of every pod of the namespace admits nothing: the operator's stays.
    let deny = admin("default-deny", json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
    policies.create(&PostParams::default(), &deny).await.unwrap();
    // An egress-only policy governs no ingress: it does not count either.
    let egress = admin("egress-only", json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}));
    policies.create(&PostParams::default(), &egress).await.unwrap();
    // One that admits Prometheus to the routers is the admin's decision: the operator's goes.
    let allow = admin(
        "allow-monitoring",
        json!({"podSelector": {"matchLabels": {"interconnect_cr": "guarded"}},
               "ingress": [{"from": [{"namespaceSelector": {}}], "ports": [{"port": 8888}]}]}),
    );
    policies.create(&PostParams::default(), &allow).await.unwrap();
    eventually("the operator's NetworkPolicy deleted", Duration::from_secs(30), || async {
        policies.get_opt("guarded").await.ok()?.is_none().then_some(())
    })
    .await;
    let cond = condition_with_reason(&ns, "guarded", "NetworkPolicy", "AdminPolicy").await;
    assert_eq!(cond["status"], "True", "{cond}");
    let message = cond["message"].as_str().unwrap();
    assert!(message.starts_with("NetworkPolicy allow-monitoring selects the routers"), "{cond}");
    assert!(!message.contains("default-deny") && !message.contains("egress-only"), "{cond}");
    assert!(policies.get_opt("default-deny").await.unwrap().is_some(), "the admin's deny was touched");

    policies.delete("allow-monitoring", &DeleteParams::default()).await.unwrap();
    eventually("the operator's NetworkPolicy made again", Duration::from_secs(30), || async {
        policies.get_opt("guarded").await.ok()?
    })
    .await;
    condition_with_reason(&ns, "guarded", "NetworkPolicy", "Managed").await;

    let off = json!({"spec": {"deploymentPlan": {"networkPolicy": {"enabled": false}}}});
    interconnects(&ns.client, &ns.name)
        .patch("guarded", &PatchParams::default(), &Patch::Merge(off))
        .await
        .unwrap();
    let cond = condition_with_reason(&ns, "guarded", "NetworkPolicy", "Disabled").await;
    assert_eq!(cond["status"], "False", "{cond}");
    eventually("the operator's NetworkPolicy deleted when disabled", Duration::from_secs(30), || async {
        policies.get_opt("guarded").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(deployment(&ns, "guarded").await.spec.unwrap().template, template, "the routers were rolled");
}
