//! The controller's RBAC in `deploy/` is exactly what it uses. The controller runs as its
//! ServiceAccount through every path that needs a distinct permission — children created,
//! changed and pruned (placement switches, exposure and TLS profiles removed, `users: none`),
//! a user-provided Secret read, a certificate renewed, a child's name held by someone else
//! (the refused create and the reads that list every conflict), Events repeated into a series, a
//! router's readiness gate set once it answers linked, the Lease created and renewed, Routes on OpenShift — and the API server's audit log then
//! lists what it used: nothing may be refused, and every granted permission must have been
//! used, or be one the controller must hold to create the routers' Role (the API server's
//! RBAC escalation check) or to change a child's ownerReferences (`delete`, checked by
//! OwnerReferencesPermissionEnforcement, on in every test control plane; the takeover of
//! the Go operator's objects in `upgrade.rs` fails without it).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{eventually, interconnects};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use qdr_controller::route::Route;
use qdr_tests::rbac::{DEPLOY_LEASE, Install, Permission, deploy_rbac, granted, permissions, used};
use serde_json::{Value, json};

fn ic(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1",
        "kind": "Interconnect", "metadata": {"name": name}, "spec": spec}))
    .unwrap()
}

/// Waits until Interconnect `name` reports `Degraded=False` for its current generation.
async fn converged(ns: &qdr_tests::TestNamespace, name: &str, controller: &qdr_tests::Process) {
    let api = interconnects(&ns.client, &ns.name);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let o = api.get(name).await.unwrap();
        let generation = o.metadata.generation;
        let done = o.data["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
            c["type"] == "Degraded"
                && c["status"] == "False"
                && c["observedGeneration"].as_i64() == generation
        });
        if done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} not reconciled: {}\ncontroller log:\n{}",
            o.data["status"],
            controller.log_tail(60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the controller's requests include `what`.
async fn uses(cp: &qdr_tests::ControlPlane, user: &str, what: &str) {
    eventually(what, Duration::from_secs(60), || async {
        used(&cp.audit(), user).0.iter().any(|p| p.to_string() == what).then_some(())
    })
    .await;
}

/// The tests of this binary run one at a time: a cluster-wide controller would reconcile
/// the namespaced test's objects too.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_uses_every_permission_it_is_granted() {
    let _serial = SERIAL.lock().await;
    // A node, so that a placement change's new workload has its router Ready and the old one
    // is pruned (make before break).
    let cp = qdr_tests::shared_with_nodes(1).await;
    cp.install_crd().await;
    let system = cp.namespace("rbac-system").await;
    let ns = cp.namespace("rbac").await;
    let user = format!("system:serviceaccount:{}:qdr-controller", system.name);
    let lifetimes = ["--router-cert-lifetime=24s".to_string(), "--router-ca-lifetime=45s".to_string()];
    let a = common::start_controller_with(
        cp,
        &system.name,
        DEPLOY_LEASE,
        "rbac-a",
        common::free_port(),
        &lifetimes,
    );

    // A user-provided TLS Secret, read (never written) by the controller.
    let pair = cp.issue_serving_cert(&["full.example"]).unwrap();
    let user_tls: Secret = serde_json::from_value(json!({"metadata": {"name": "user-tls"}, "stringData": {
        "tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": cp.ca_pem()}}))
    .unwrap();
    ns.api::<Secret>().create(&PostParams::default(), &user_tls).await.unwrap();

    let ics = interconnects(&ns.client, &ns.name);
    let full = json!({"deploymentPlan": {"size": 1},
        "listeners": [{"port": 5672}, {"name": "console", "port": 8080, "http": true, "expose": true},
                      {"name": "amqps", "port": 5671, "sslProfile": "amqps-tls", "expose": true},
                      {"name": "user", "port": 5673, "sslProfile": "user-tls"}],
        "sslProfiles": [{"name": "amqps-tls"}, {"name": "user-tls", "credentials": "user-tls"}]});
    ics.create(&PostParams::default(), &ic("full", full)).await.unwrap();
    converged(&ns, "full", &a).await;
    assert!(ns.api::<Deployment>().get_opt("full").await.unwrap().is_some());
    assert!(ns.api::<Ingress>().get_opt("full-console").await.unwrap().is_some());
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> = ns.api();
    assert!(policies.get_opt("full").await.unwrap().is_some(), "no NetworkPolicy");
    // A renewal replaces a generated certificate (at 2/3 of 24 s).
    uses(cp, &user, "update core/secrets").await;

    // Links across clusters: an AccessGrant's token issued (its Interconnect, Service and CA
    // read by name, the token applied, the grant's status written), and a Link using it (the
    // links Secret applied, the Link's status written).
    let dynamic = |kind: &str, plural: &str| {
        let gvk = kube::api::GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", kind);
        Api::<DynamicObject>::namespaced_with(
            ns.client.clone(),
            &ns.name,
            &ApiResource::from_gvk_with_plural(&gvk, plural),
        )
    };
    let grant: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1",
        "kind": "AccessGrant", "metadata": {"name": "site-b"},
        "spec": {"interconnect": "full", "site": "b", "externalHosts": [{"host": "full.example"}]}}))
        .unwrap();
    dynamic("AccessGrant", "accessgrants").create(&PostParams::default(), &grant).await.unwrap();
    eventually("the token issued", Duration::from_secs(60), || async {
        ns.api::<Secret>().get_opt("site-b-token").await.ok()?.map(drop)
    })
    .await;
    let link: DynamicObject = serde_json::from_value(json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1",
        "kind": "Link", "metadata": {"name": "to-a"}, "spec": {"interconnect": "full", "tokenSecret": "site-b-token"}}))
    .unwrap();
    dynamic("Link", "links").create(&PostParams::default(), &link).await.unwrap();
    for used in [
        "get interconnectedcloud.github.io/interconnects",
        "patch interconnectedcloud.github.io/accessgrants/status",
        "patch interconnectedcloud.github.io/links/status",
        "patch core/secrets",
    ] {
        uses(cp, &user, used).await;
    }

    // Two routers: a PodDisruptionBudget.
    let two = json!({"spec": {"deploymentPlan": {"size": 2}}});
    ics.patch("full", &PatchParams::default(), &Patch::Merge(two)).await.unwrap();
    converged(&ns, "full", &a).await;
    let budgets: Api<PodDisruptionBudget> = ns.api();
    assert!(budgets.get_opt("full").await.unwrap().is_some(), "no PodDisruptionBudget");

    // Everything optional removed: the Deployment, PodDisruptionBudget, NetworkPolicy, Ingresses, generated
    // Secrets, the SASL ConfigMap and the users Secret are pruned.
    let fewer = json!({"spec": {"deploymentPlan": {"size": null, "placement": "Every",
        "networkPolicy": {"enabled": false}}, "users": "none", "listeners": [{"port": 5672}], "sslProfiles": null}});
    ics.patch("full", &PatchParams::default(), &Patch::Merge(fewer)).await.unwrap();
    converged(&ns, "full", &a).await;
    assert!(ns.api::<DaemonSet>().get_opt("full").await.unwrap().is_some());
    assert!(policies.get_opt("full").await.unwrap().is_none(), "NetworkPolicy not pruned");
    // The Deployment goes once the DaemonSet's router is Ready, and back; its
    // PodDisruptionBudget guards its routers until then (issue 72), and goes with it.
    eventually("the Deployment pruned once the new router runs", Duration::from_secs(60), || async {
        ns.api::<Deployment>().get_opt("full").await.ok()?.is_none().then_some(())
    })
    .await;
    eventually("the PodDisruptionBudget pruned with the Deployment", Duration::from_secs(30), || async {
        budgets.get_opt("full").await.ok()?.is_none().then_some(())
    })
    .await;
    let back = json!({"spec": {"deploymentPlan": {"placement": "Any"}}});
    ics.patch("full", &PatchParams::default(), &Patch::Merge(back)).await.unwrap();
    converged(&ns, "full", &a).await;
    eventually("the DaemonSet pruned once the new router runs", Duration::from_secs(60), || async {
        ns.api::<DaemonSet>().get_opt("full").await.ok()?.is_none().then_some(())
    })
    .await;

    // A router that runs but is not Ready until the controller finds it linked (the simulated
    // node sets every readiness gate itself, so the pod is made to look as a kubelet leaves
    // it, at an address where an honest router of one answers): the gate is set.
    ics.create(&PostParams::default(), &ic("gated", json!({"deploymentPlan": {"size": 1}}))).await.unwrap();
    let pod = common::pods_of(&ns, "gated", 1).await.remove(0);
    common::linked_with_reason(&ns, &pod, "").await;
    let tls = common::router_tls(&ns, "gated").await;
    let answers = std::sync::Arc::new(qdr_tests::amqp_peer::honest(&pod, "interior", &[], 0));
    let peer = common::router_at("127.5.0.1", &tls, qdr_tests::amqp_peer::Script::Honest(answers)).await;
    let since = k8s_openapi::jiff::Timestamp::now().to_string();
    let running = json!({"status": {"podIP": "127.5.0.1", "podIPs": [{"ip": "127.5.0.1"}], "conditions": [
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": since},
        {"type": "Ready", "status": "False", "lastTransitionTime": since},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": since},
        {"type": qdr_controller::builders::LINKED, "status": "False", "lastTransitionTime": since}]}});
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    pods.patch_status(&pod, &PatchParams::default(), &Patch::Merge(&running)).await.unwrap();
    common::linked_with_reason(&ns, &pod, "Linked").await;
    uses(cp, &user, "patch core/pods/status").await;
    peer.abort();

    // A child's name held by a user's ServiceAccount: the create is refused, and the
    // controller reads who holds it and every other name (the condition lists every
    // conflict), for the workload of either kind.
    for (name, plan) in [("clash-any", json!({"size": 2})), ("clash-every", json!({"placement": "Every"}))] {
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        ns.api::<ServiceAccount>().create(&PostParams::default(), &sa).await.unwrap();
        ics.create(&PostParams::default(), &ic(name, json!({"deploymentPlan": plan}))).await.unwrap();
    }
    for read in [
        "get core/serviceaccounts",
        "get rbac.authorization.k8s.io/roles",
        "get rbac.authorization.k8s.io/rolebindings",
        "get core/configmaps",
        "get apps/deployments",
        "get apps/daemonsets",
        "get core/services",
        "get networking.k8s.io/ingresses",
        "get policy/poddisruptionbudgets",
        "get networking.k8s.io/networkpolicies",
    ] {
        uses(cp, &user, read).await;
    }

    // Routers that find their peers with the image's auto-mesh (a listener takes the
    // management port, so the controller cannot link them) mount the API token and get the
    // routers' Role and RoleBinding; the spec changed so that the controller links them,
    // both are deleted (issue 72).
    let management = qdr_api::router_config::MANAGEMENT_PORT;
    let discovering = json!({"listeners": [{"port": 5672}, {"port": management}]});
    ics.create(&PostParams::default(), &ic("discovering", discovering)).await.unwrap();
    for write in ["create rbac.authorization.k8s.io/roles", "create rbac.authorization.k8s.io/rolebindings"] {
        uses(cp, &user, write).await;
    }
    let linked = json!({"spec": {"listeners": [{"port": 5672}]}});
    ics.patch("discovering", &PatchParams::default(), &Patch::Merge(linked)).await.unwrap();
    for write in ["delete rbac.authorization.k8s.io/roles", "delete rbac.authorization.k8s.io/rolebindings"] {
        uses(cp, &user, write).await;
    }
    eventually("the routers' Role deleted", Duration::from_secs(30), || async {
        ns.api::<k8s_openapi::api::rbac::v1::Role>()
            .get_opt("discovering")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // The same Warning twice: the Event recorder patches it into a series.
    // (Invalid only to `validate`, which the schema cannot express: a duplicate name.)
    let bad = json!({"listeners": [{"port": 5672}, {"name": "port-5672", "port": 5673}]});
    ics.create(&PostParams::default(), &ic("bad", bad)).await.unwrap();
    eventually("InvalidSpec", Duration::from_secs(30), || async {
        (common::events(&ns, "InvalidSpec").await > 0).then_some(())
    })
    .await;
    let again = json!({"spec": {"deploymentPlan": {"size": 2}}});
    ics.patch("bad", &PatchParams::default(), &Patch::Merge(again)).await.unwrap();
    uses(cp, &user, "patch events.k8s.io/events").await;

    // OpenShift: a new leader discovers Routes, creates them and prunes one.
    a.signal(libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(15)), "rbac-a did not stop");
    common::install_route_crd(cp);
    let b = common::start_controller_with(cp, &system.name, DEPLOY_LEASE, "rbac-b", common::free_port(), &[]);
    ics.create(&PostParams::default(), &ic("routed", json!({}))).await.unwrap();
    converged(&ns, "routed", &b).await;
    let routes: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::erase::<Route>(&()));
    assert!(routes.get_opt("routed-8080").await.unwrap().is_some(), "no Route");
    let closed = json!({"spec": {"listeners": [{"port": 5672}]}});
    ics.patch("routed", &PatchParams::default(), &Patch::Merge(closed)).await.unwrap();
    converged(&ns, "routed", &b).await;
    assert!(routes.get_opt("routed-8080").await.unwrap().is_none(), "Route not pruned");

    // A site whose grant is gone, still linked to a router (a peer that says so): the router
    // pods are told the new trust (`patch`), then the one holding the site is restarted.
    let grant: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1",
        "kind": "AccessGrant", "metadata": {"name": "site-x"},
        "spec": {"interconnect": "sites", "site": "x",
                 "externalHosts": [{"host": format!("sites.{}.svc.cluster.local", ns.name)}]}}))
        .unwrap();
    dynamic("AccessGrant", "accessgrants").create(&PostParams::default(), &grant).await.unwrap();
    ics.create(&PostParams::default(), &ic("sites", json!({"deploymentPlan": {"size": 1}}))).await.unwrap();
    eventually("the site's token issued", Duration::from_secs(60), || async {
        ns.api::<Secret>().get_opt("site-x-token").await.ok()?.map(drop)
    })
    .await;
    // The first grant makes the listener trust the sites' file of the links Secret (one roll).
    eventually("the sites' trust file", Duration::from_secs(60), || async {
        let s = ns.api::<Secret>().get_opt("sites-qdr-operator-links").await.ok()??;
        s.data?.keys().any(|k| k.starts_with("sites.")).then_some(())
    })
    .await;
    let deployments: Api<Deployment> = ns.api();
    eventually("the roll for it", Duration::from_secs(60), || async {
        let d = deployments.get("sites").await.ok()?;
        let st = d.status?;
        (st.observed_generation == d.metadata.generation
            && st.updated_replicas == Some(1)
            && st.replicas == Some(1))
        .then_some(())
    })
    .await;
    let pod = common::pods_of(&ns, "sites", 1).await.remove(0);
    dynamic("AccessGrant", "accessgrants").delete("site-x", &Default::default()).await.unwrap();
    let tls = common::router_tls(&ns, "sites").await;
    let answers = qdr_tests::amqp_peer::with_user_connection(
        qdr_tests::amqp_peer::honest(&pod, "interior", &[], 0),
        "x-router-0",
        "inter-router",
        &format!("O=qdr-operator-site,CN=x.site-x.{}", ns.name),
    );
    let peer = common::router_at(
        "127.5.0.2",
        &tls,
        qdr_tests::amqp_peer::Script::Honest(std::sync::Arc::new(answers)),
    )
    .await;
    common::run_pod(&ns, &pod, "127.5.0.2").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let p = pods.get_opt(&pod).await.unwrap();
        let stamped = p.as_ref().is_some_and(|p| {
            p.metadata
                .annotations
                .iter()
                .flatten()
                .any(|(k, _)| k == qdr_controller::grants::sites::SITES_TRUST)
        });
        if stamped {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not stamped: {p:?}\n{}", b.log_tail(60));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    uses(cp, &user, "patch core/pods").await;
    uses(cp, &user, "delete core/pods").await;
    peer.abort();

    let (used, forbidden) = used(&cp.audit(), &user);
    assert!(forbidden.is_empty(), "requests refused by deploy/'s RBAC:\n{}", forbidden.join("\n"));
    let granted = granted(&deploy_rbac(cp).unwrap(), "qdr-controller");
    // Creating a Role needs every permission it grants (RBAC escalation check).
    let owner = qdr_controller::validated::ValidatedInterconnect::new(
        &serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "y", "uid": "z"}, "spec": {}}))
            .unwrap(),
    )
    .unwrap();
    let routers = permissions(&serde_json::to_value(qdr_controller::builders::role(&owner).rules).unwrap());
    println!("controller permissions used:");
    for p in &used {
        println!("  {p}");
    }
    println!("held for the routers' Role: {}", list(&routers));
    // OwnerReferencesPermissionEnforcement authorizes a change of a child's ownerReferences
    // (taking over the Go operator's objects) against `delete` on it: held, never requested.
    let owner_references: BTreeSet<Permission> = [
        ("", "services"),
        ("", "serviceaccounts"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
    ]
    .into_iter()
    .map(|(group, resource)| Permission {
        group: group.into(),
        resource: resource.into(),
        verb: "delete".into(),
    })
    .collect();
    println!("held for OwnerReferencesPermissionEnforcement: {}", list(&owner_references));
    let unused: BTreeSet<&Permission> = granted
        .iter()
        .filter(|p| !used.contains(*p) && !routers.contains(*p) && !owner_references.contains(*p))
        .collect();
    assert!(unused.is_empty(), "granted by deploy/ but never used: {}", list(unused));
    let beyond: BTreeSet<&Permission> = used.iter().filter(|p| !granted.contains(*p)).collect();
    assert!(beyond.is_empty(), "used without a grant in deploy/ (another binding?): {}", list(beyond));
    assert!(a.exited().is_some() && b.exited().is_none(), "rbac-b stopped:\n{}", b.log_tail(40));
    b.stop(Duration::from_secs(10));
}

/// The namespaced install (`deploy/overlays/namespaced`): the controller watches two
/// namespaces with the overlay's Role in each and no ClusterRole; it reconciles there, leaves
/// a third namespace alone, is refused nothing and never asks beyond its namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_controller_works_with_roles_in_its_namespaces_only() {
    let _serial = SERIAL.lock().await;
    let cp = qdr_tests::shared().await;
    cp.install_crd().await;
    let system = cp.namespace("scoped-system").await;
    let watched = [cp.namespace("scoped-a").await, cp.namespace("scoped-b").await];
    let other = cp.namespace("scoped-other").await;
    let install =
        Install { watch: watched.iter().map(|n| n.name.clone()).collect(), ..Install::new(&system.name) };
    let health = common::free_port();
    let cmd = common::controller_command_for(cp, &install, "scoped-0", health);
    let controller = qdr_tests::Process::spawn("scoped-0", cmd, &cp.dir().join("scoped-0.log")).unwrap();
    for ns in watched.iter().chain([&other]) {
        interconnects(&ns.client, &ns.name)
            .create(&PostParams::default(), &ic("mesh", json!({})))
            .await
            .unwrap();
    }
    for ns in &watched {
        converged(ns, "mesh", &controller).await;
        assert!(
            ns.api::<Deployment>().get_opt("mesh").await.unwrap().is_some(),
            "{}: no Deployment",
            ns.name
        );
    }
    eventually("ready", Duration::from_secs(30), || async {
        (common::http_get(health, "/readyz").await? == (200, "ok".into())).then_some(())
    })
    .await;
    // The unwatched namespace: a reconcile would have written a status by now (the watched
    // ones converged); nothing may be there.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let untouched = interconnects(&other.client, &other.name).get("mesh").await.unwrap();
    assert!(untouched.data.get("status").is_none_or(Value::is_null), "reconciled outside its namespaces");
    assert!(other.api::<Deployment>().get_opt("mesh").await.unwrap().is_none());

    let user = format!("system:serviceaccount:{}:qdr-controller", system.name);
    let events = cp.audit();
    let (_, forbidden) = used(&events, &user);
    assert!(forbidden.is_empty(), "refused with the namespaced RBAC:\n{}", forbidden.join("\n"));
    let mut allowed: BTreeSet<&str> = watched.iter().map(|n| n.name.as_str()).collect();
    allowed.insert(&system.name);
    let beyond: BTreeSet<String> = events
        .iter()
        .filter(|e| e.user.username == user)
        .filter_map(|e| e.object_ref.as_ref().map(|o| (e, o)))
        .filter(|(_, o)| !allowed.contains(o.namespace.as_str()))
        .map(|(e, o)| format!("{} {} in {:?}", e.verb, o.resource, o.namespace))
        .collect();
    assert!(beyond.is_empty(), "requests outside the watched namespaces: {beyond:?}");
    for ns in &watched {
        let wrote_status = events.iter().any(|e| {
            e.user.username == user
                && e.verb == "patch"
                && e.object_ref.as_ref().is_some_and(|o| o.namespace == ns.name && o.subresource == "status")
        });
        assert!(wrote_status, "the namespaced controller did not reconcile {}", ns.name);
    }
    controller.stop(Duration::from_secs(10));
}

fn list<'a>(ps: impl IntoIterator<Item = &'a Permission>) -> String {
    ps.into_iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// `/readyz` follows the watches: a leader refused one watch (its ClusterRole lost the
/// Ingress rule) says so, and is ready again once the rule is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_refused_a_watch_is_not_ready_and_names_it() {
    let _serial = SERIAL.lock().await;
    let cp = qdr_tests::shared().await;
    cp.install_crd().await;
    let system = cp.namespace("refused-system").await;
    let install = Install::new(&system.name);
    cp.install_rbac(&install).unwrap();
    let role = format!("qdr-operator-controller-{}", system.name);
    let full = cp.kubectl_stdin(&["get", "clusterrole", &role, "-o", "json"], "").unwrap();
    let mut without: Value = serde_json::from_str(&full).unwrap();
    without["rules"].as_array_mut().unwrap().retain(|r| !r["resources"].to_string().contains("ingresses"));
    cp.kubectl_stdin(&["replace", "-f", "-"], &without.to_string()).unwrap();

    let health = common::free_port();
    let cmd = common::controller_command_for(cp, &install, "refused-0", health);
    let controller = qdr_tests::Process::spawn("refused-0", cmd, &cp.dir().join("refused-0.log")).unwrap();
    let (status, body) = eventually("not ready, naming the watch", Duration::from_secs(60), || async {
        let (status, body) = common::http_get(health, "/readyz").await?;
        body.contains("watch of ingresses failed").then_some((status, body))
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("forbidden"), "{body}");
    assert_eq!(common::http_get(health, "/livez").await, Some((200, "ok".into())), "not a reason to restart");

    let restored: Value = serde_json::from_str(&full).unwrap();
    let mut restored = restored;
    if let Some(m) = restored["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    cp.kubectl_stdin(&["apply", "-f", "-"], &restored.to_string()).unwrap();
    // The watcher retries with a backoff of at most 30 s; readiness also forgets an error
    // after 60 s without another.
    eventually("ready again", Duration::from_secs(90), || async {
        (common::http_get(health, "/readyz").await? == (200, "ok".into())).then_some(())
    })
    .await;
    controller.stop(Duration::from_secs(10));
}
