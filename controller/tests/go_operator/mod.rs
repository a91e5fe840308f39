//! The Go qdr-operator, emulated on a real API server: what it stores for an Interconnect.
//!
//! The real operator cannot be built here: the Go module proxy answers `403 Forbidden` for
//! every version of `github.com/interconnectedcloud/qdr-operator` (and it is a `dep`
//! project pinned to client-go for Kubernetes 1.12 and controller-runtime v0.1.8). So this
//! module writes what it writes (its defaults written back, its objects, in its order), with
//! plain create/update calls under its field
//! manager `qdr-operator` (the API server names an update's manager after the client's user
//! agent, the binary name):
//!
//! * the Interconnect's spec with its defaults written back (an `Update`; no cert-manager:
//!   the operator cannot detect it on Kubernetes ≥ 1.22), and its status (`revNumber`,
//!   `pods`, an append-only `conditions` log of `{type, reason, transitionTime}`);
//! * Role, RoleBinding and ServiceAccount `<cr>` (no labels);
//! * Deployment `<cr>` (placement Any or AntiAffinity) or DaemonSet `<cr>` (Every): no labels
//!   on the object, pod template labelled `application`/`interconnect_cr`, prometheus
//!   annotations, one container `<cr>` with `APPLICATION_NAME`, `QDROUTERD_CONF`, the SASL
//!   variables, `POD_COUNT`, `POD_NAMESPACE`, `POD_IP`, `QDROUTERD_AUTO_MESH_DISCOVERY`, ports
//!   `port-<N>` (or the listener name), a liveness probe and the users and profile volumes;
//! * Service `<cr>` with ports named after the listener or the port number.
//!
//! Then its pass fails at the Ingress of the console listener (`extensions/v1beta1` no
//! longer exists), so the users Secret and the SASL ConfigMap are never created — exactly
//! what the Go operator leaves behind on a current cluster. `QDROUTERD_CONF` is a short
//! stand-in for its rendered config (the takeover replaces the value whatever it is).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The field manager the API server records for the Go operator's writes.
pub const MANAGER: &str = "qdr-operator";

/// The operator's default router image (`QDROUTERD_IMAGE` in its Dockerfile).
pub const IMAGE: &str = "quay.io/interconnectedcloud/qdrouterd:1.12.0";

/// A v1 CRD with the Go operator's group, names and status subresource and a schema that
/// checks no cross-field rule (its shipped CRD validated only types): what a cluster
/// running the Go operator has before our CRD replaces it.
pub fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "interconnects.interconnectedcloud.github.io"},
        "spec": {
            "group": "interconnectedcloud.github.io", "scope": "Namespaced",
            "names": {"kind": "Interconnect", "listKind": "InterconnectList", "plural": "interconnects", "singular": "interconnect"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"], "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    })
}

/// The Interconnect API.
pub fn interconnects(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("interconnectedcloud.github.io", "v1alpha1", "Interconnect"),
        "interconnects",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// `SetInterconnectDefaults` without cert-manager: the spec the operator writes back.
pub fn defaults(spec: &Value) -> Value {
    let mut s = spec.clone();
    let plan = s["deploymentPlan"].as_object().cloned().unwrap_or_default();
    let mut plan = Value::Object(plan);
    if plan["size"].as_i64().unwrap_or(0) == 0 {
        plan["size"] = json!(1);
    }
    if plan["role"].as_str().unwrap_or("").is_empty() {
        plan["role"] = json!("interior");
    }
    if plan["placement"].as_str().unwrap_or("").is_empty() {
        plan["placement"] = json!("Any");
    }
    if plan["livenessPort"].as_i64().unwrap_or(0) == 0 {
        plan["livenessPort"] = json!(8888);
    }
    let interior = plan["role"] == "interior";
    s["deploymentPlan"] = plan;
    let empty = |v: &Value| v.as_array().is_none_or(Vec::is_empty);
    if empty(&s["listeners"]) {
        s["listeners"] =
            json!([{"port": 5672}, {"port": 8080, "http": true, "expose": true, "authenticatePeer": true}]);
    }
    if interior && empty(&s["interRouterListeners"]) {
        s["interRouterListeners"] = json!([{"port": 55672}]);
    }
    if interior && empty(&s["edgeListeners"]) {
        s["edgeListeners"] = json!([{"port": 45672}]);
    }
    s
}

fn listeners(spec: &Value, keys: &[&str]) -> Vec<Value> {
    keys.iter().flat_map(|k| spec[*k].as_array().cloned().unwrap_or_default()).collect()
}

/// The workload's pod template and its kind (Deployment, or DaemonSet for `placement: Every`).
fn workload(name: &str, spec: &Value) -> (bool, Value) {
    let plan = &spec["deploymentPlan"];
    let every = plan["placement"] == "Every";
    let labels = json!({"application": name, "interconnect_cr": name});
    let users = spec["users"].as_str().map(String::from).unwrap_or_else(|| format!("{name}-users"));
    let mut env = vec![
        json!({"name": "APPLICATION_NAME", "value": name}),
        json!({"name": "QDROUTERD_CONF", "value": format!("router {{\n    mode: {}\n    id: Router.${{HOSTNAME}}\n}}\n", plan["role"].as_str().unwrap_or("interior"))}),
        json!({"name": "QDROUTERD_AUTO_CREATE_SASLDB_SOURCE", "value": "/etc/qpid-dispatch/sasl-users/"}),
        json!({"name": "QDROUTERD_AUTO_CREATE_SASLDB_PATH", "value": "/tmp/qdrouterd.sasldb"}),
        json!({"name": "POD_COUNT", "value": plan["size"].to_string()}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
    ];
    if plan["role"] == "interior" {
        env.push(json!({"name": "QDROUTERD_AUTO_MESH_DISCOVERY", "value": "QUERY"}));
    }
    let ports: Vec<Value> = listeners(spec, &["listeners", "interRouterListeners"])
        .iter()
        .map(|l| {
            let port = l["port"].as_i64().unwrap_or_default();
            let pname = l["name"].as_str().map(String::from).unwrap_or_else(|| format!("port-{port}"));
            json!({"name": pname, "containerPort": port})
        })
        .collect();
    let (mut mounts, mut volumes) = (Vec::new(), Vec::new());
    for p in spec["sslProfiles"].as_array().cloned().unwrap_or_default() {
        let pname = p["name"].as_str().unwrap_or_default();
        if let Some(c) = p["credentials"].as_str() {
            mounts.push(json!({"name": c, "mountPath": format!("/etc/qpid-dispatch-certs/{pname}/{c}")}));
            volumes.push(json!({"name": c, "secret": {"secretName": c}}));
        }
        if let Some(ca) = p["caCert"].as_str()
            && Some(ca) != p["credentials"].as_str()
        {
            volumes.push(json!({"name": ca, "secret": {"secretName": ca}}));
        }
    }
    mounts.push(json!({"name": "sasl-users", "mountPath": "/etc/qpid-dispatch/sasl-users"}));
    mounts.push(json!({"name": "sasl-config", "mountPath": "/etc/sasl2"}));
    volumes.push(json!({"name": "sasl-users", "secret": {"secretName": users}}));
    volumes.push(json!({"name": "sasl-config", "configMap": {"name": format!("{name}-sasl-config")}}));
    let liveness = plan["livenessPort"].as_i64().unwrap_or(8888);
    let affinity = if plan["placement"] == "AntiAffinity" {
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": "application", "operator": "In", "values": [name]}]},
            "topologyKey": "kubernetes.io/hostname"}]}})
    } else {
        json!({})
    };
    let template = json!({
        "metadata": {"labels": labels, "annotations": {"prometheus.io/port": liveness.to_string(), "prometheus.io/scrape": "true"}},
        "spec": {
            "serviceAccountName": name,
            "affinity": affinity,
            "containers": [{
                "name": name,
                "image": plan["image"].as_str().unwrap_or(IMAGE),
                "env": env,
                "ports": ports,
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": liveness}, "initialDelaySeconds": 60},
                "volumeMounts": mounts,
                "resources": plan.get("resources").cloned().unwrap_or(json!({})),
            }],
            "volumes": volumes,
        }
    });
    let mut spec_out = json!({"selector": {"matchLabels": labels}, "template": template});
    if !every {
        spec_out["replicas"] = plan["size"].clone();
    }
    (every, spec_out)
}

fn owner(ic: &DynamicObject) -> Value {
    json!([{"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
            "name": ic.metadata.name, "uid": ic.metadata.uid, "controller": true, "blockOwnerDeletion": true}])
}

/// Creates the Interconnect of `manifest` in `ns` as a user would, then does what the Go
/// operator's passes do to it (see the module docs). Returns the stored Interconnect.
///
/// # Panics
/// When the API server refuses a write (the Go CRD accepts every example).
pub async fn deploy(client: &kube::Client, ns: &str, manifest: &Value) -> DynamicObject {
    let ics = interconnects(client, ns);
    let user: DynamicObject = serde_json::from_value(manifest.clone()).unwrap();
    let created = ics
        .create(&PostParams { field_manager: Some("kubectl-create".into()), ..Default::default() }, &user)
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    let go = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    // Defaults written back with an Update of the whole object.
    let mut defaulted = created.clone();
    defaulted.data["spec"] = defaults(&created.data["spec"]);
    let ic = ics.replace(&name, &go, &defaulted).await.unwrap();
    let spec = ic.data["spec"].clone();
    let meta = |labels: bool| {
        let mut m = json!({"name": name, "namespace": ns, "ownerReferences": owner(&ic)});
        if labels {
            m["labels"] = json!({"application": name, "interconnect_cr": name});
        }
        m
    };
    let role: Role = serde_json::from_value(json!({"metadata": meta(false),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), ns).create(&go, &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({"metadata": meta(false),
        "subjects": [{"kind": "ServiceAccount", "name": name}],
        "roleRef": {"kind": "Role", "name": name, "apiGroup": "rbac.authorization.k8s.io"}}))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns).create(&go, &binding).await.unwrap();
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": meta(false)})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), ns).create(&go, &sa).await.unwrap();
    let (every, wspec) = workload(&name, &spec);
    if every {
        let ds: DaemonSet = serde_json::from_value(json!({"metadata": meta(false), "spec": wspec})).unwrap();
        Api::<DaemonSet>::namespaced(client.clone(), ns).create(&go, &ds).await.unwrap();
    } else {
        let d: Deployment = serde_json::from_value(json!({"metadata": meta(false), "spec": wspec})).unwrap();
        Api::<Deployment>::namespaced(client.clone(), ns).create(&go, &d).await.unwrap();
    }
    let ports: Vec<Value> = listeners(&spec, &["listeners", "interRouterListeners", "edgeListeners"])
        .iter()
        .map(|l| {
            let port = l["port"].as_i64().unwrap_or_default();
            let pname = l["name"].as_str().map(String::from).unwrap_or_else(|| port.to_string());
            json!({"name": pname, "protocol": "TCP", "port": port, "targetPort": port})
        })
        .collect();
    let svc: Service = serde_json::from_value(json!({"metadata": meta(true), "spec": {
        "selector": {"application": name, "interconnect_cr": name}, "ports": ports}}))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns).create(&go, &svc).await.unwrap();
    // Its status log (a status Update, as the operator writes it).
    let status = json!({"status": {"revNumber": ic.metadata.resource_version, "pods": [],
        "conditions": [{"type": "Provisioning", "reason": "provision spec to desired state",
                        "transitionTime": "2020-04-16T10:00:00Z"},
                       {"type": "Deployed", "reason": "deployment created", "transitionTime": "2020-04-16T10:00:01Z"},
                       // Its log is append-only: a type comes again on each change.
                       {"type": "Provisioning", "reason": "Configuration changed",
                        "transitionTime": "2020-04-17T08:30:00Z"}]}});
    ics.patch_status(
        &name,
        &PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() },
        &Patch::Merge(status),
    )
    .await
    .unwrap();
    ics.get(&name).await.unwrap()
}
