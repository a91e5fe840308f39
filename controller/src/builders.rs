//! Pure builders: one function per child object of an Interconnect, from its effective
//! (defaulted, validated) spec. No I/O: what they return is server-side applied as is.
//!
//! Names, labels and pod shape follow the Go operator (reference §3) with its bugs fixed:
//! every object carries the labels and an owner reference; volume names are generated, so
//! two profiles sharing a Secret do not collide; the Deployment and the DaemonSet share one
//! pod template; `users: none` means no SASL Secret, ConfigMap, mounts or environment; the
//! anti-affinity selects on both labels; the pod template carries a hash of the config.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use qdr_api::{Interconnect, Listener, Placement, Role as RouterRole};
use serde_json::{Value, json};
use sha2::Digest;

use crate::config::{cert_dir, router_config};

/// Field manager of every server-side apply by the controller.
pub const FIELD_MANAGER: &str = "qdr-operator";
/// Pod-template annotation holding the SHA-256 of the rendered config (a change rolls pods).
pub const CONFIG_HASH: &str = "qdr-operator.io/config-hash";
/// Where the SASL users Secret is mounted.
pub const SASL_USERS_DIR: &str = "/etc/qpid-dispatch/sasl-users";
/// Content of the `<name>-sasl-config` ConfigMap (Go operator parity).
pub const SASL_CONFIG: &str =
    "\npwcheck_method: auxprop\nauxprop_plugin: sasldb\nsasldb_path: /tmp/qdrouterd.sasldb\n";

/// Everything the builders need besides the Interconnect.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Router image for Interconnects that do not pin one (the Go operator's `QDROUTERD_IMAGE`).
    pub default_image: String,
}

/// An Interconnect after `defaults`, with what the builders read from it.
pub struct Target<'a> {
    /// The object (its spec already defaulted).
    pub ic: &'a Interconnect,
    /// Its name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
}

impl<'a> Target<'a> {
    /// The target of `ic`, which must have a name, namespace and uid (stored objects do).
    pub fn new(ic: &'a Interconnect) -> Self {
        Target {
            ic,
            name: ic.metadata.name.as_deref().unwrap_or_default(),
            namespace: ic.metadata.namespace.as_deref().unwrap_or_default(),
        }
    }

    /// `application=<name>`, `interconnect_cr=<name>`: the Go operator's selector, kept
    /// unchanged so existing Deployments (whose selector is immutable) can be adopted.
    pub fn selector(&self) -> BTreeMap<String, String> {
        [("application", self.name), ("interconnect_cr", self.name)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The selector plus the recommended `app.kubernetes.io/*` labels.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = self.selector();
        for (k, v) in [
            ("app.kubernetes.io/name", "qdrouterd"),
            ("app.kubernetes.io/instance", self.name),
            ("app.kubernetes.io/component", "router"),
            ("app.kubernetes.io/managed-by", "qdr-operator"),
        ] {
            l.insert(k.into(), v.into());
        }
        l
    }

    /// Controller owner reference to the Interconnect (garbage collection on delete).
    pub fn owner(&self) -> OwnerReference {
        self.ic.controller_owner_ref(&()).expect("stored Interconnects have a name and uid")
    }

    /// Metadata of a child named `name`.
    pub fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(self.namespace.into()),
            labels: Some(self.labels()),
            owner_references: Some(vec![self.owner()]),
            ..Default::default()
        }
    }

    fn plan(&self) -> qdr_api::DeploymentPlan {
        self.ic.spec.deployment_plan.clone().unwrap_or_default()
    }

    /// Whether a SASL users database is used (`users` not `none`/`false`).
    pub fn users_secret(&self) -> Option<&str> {
        self.ic
            .spec
            .users
            .as_deref()
            .filter(|u| !u.eq_ignore_ascii_case("none") && !u.eq_ignore_ascii_case("false"))
    }

    /// Name of the SASL ConfigMap.
    pub fn sasl_config_name(&self) -> String {
        format!("{}-sasl-config", self.name)
    }
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("builders produce valid objects")
}

fn with_meta<T: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned>(
    t: &Target<'_>,
    name: &str,
    body: Value,
) -> T {
    let mut v = body;
    v["apiVersion"] = json!(T::api_version(&()));
    v["kind"] = json!(T::kind(&()));
    v["metadata"] = serde_json::to_value(t.meta(name)).expect("meta serializes");
    typed(v)
}

/// ServiceAccount `<name>` for the router pods (auto-mesh reads the pod list with it).
pub fn service_account(t: &Target<'_>) -> ServiceAccount {
    with_meta(t, t.name, json!({}))
}

/// Role `<name>`: get and list pods (what the image's auto-mesh needs, nothing more).
pub fn role(t: &Target<'_>) -> Role {
    with_meta(
        t,
        t.name,
        json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
    )
}

/// RoleBinding `<name>` of the Role to the ServiceAccount.
pub fn role_binding(t: &Target<'_>) -> RoleBinding {
    with_meta(
        t,
        t.name,
        json!({
            "subjects": [{"kind": "ServiceAccount", "name": t.name, "namespace": t.namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": t.name},
        }),
    )
}

/// ConfigMap `<name>-sasl-config` pointing Cyrus SASL at the sasldb the image builds; `None`
/// with `users: none`.
pub fn sasl_config_map(t: &Target<'_>) -> Option<ConfigMap> {
    t.users_secret()?;
    Some(with_meta(t, &t.sasl_config_name(), json!({"data": {"qdrouterd.conf": SASL_CONFIG}})))
}

/// The rendered router configuration and its SHA-256 (hex).
pub fn config_and_hash(t: &Target<'_>) -> (String, String) {
    let text = router_config(&t.ic.spec).render();
    let hash = sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    (text, hash)
}

/// Container-port name of a listener: its name, or `port-<N>` (an IANA service name).
pub fn container_port_name(l: &Listener) -> String {
    l.name.clone().unwrap_or_else(|| format!("port-{}", l.port))
}

/// Service-port name of a listener: its name, or the port number (Go operator parity).
pub fn service_port_name(l: &Listener) -> String {
    l.name.clone().unwrap_or_else(|| l.port.to_string())
}

/// The pod template shared by the Deployment and the DaemonSet.
pub fn pod_template(t: &Target<'_>, s: &Settings) -> Value {
    let plan = t.plan();
    let spec = &t.ic.spec;
    let (conf, hash) = config_and_hash(t);
    let liveness = plan.liveness_port.unwrap_or(qdr_api::rules::DEFAULT_LIVENESS_PORT);
    let interior = plan.role != Some(RouterRole::Edge);

    let mut env = vec![
        json!({"name": "APPLICATION_NAME", "value": t.name}),
        json!({"name": "QDROUTERD_CONF", "value": conf}),
    ];
    if t.users_secret().is_some() {
        env.push(
            json!({"name": "QDROUTERD_AUTO_CREATE_SASLDB_SOURCE", "value": format!("{SASL_USERS_DIR}/")}),
        );
        env.push(json!({"name": "QDROUTERD_AUTO_CREATE_SASLDB_PATH", "value": "/tmp/qdrouterd.sasldb"}));
    }
    env.push(json!({"name": "POD_COUNT", "value": plan.size.unwrap_or(1).to_string()}));
    env.push(
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
    );
    env.push(json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}));
    if interior {
        env.push(json!({"name": "QDROUTERD_AUTO_MESH_DISCOVERY", "value": "QUERY"}));
    }

    let ports: Vec<Value> = spec
        .listeners
        .iter()
        .flatten()
        .chain(spec.inter_router_listeners.iter().flatten())
        .map(|l| json!({"name": container_port_name(l), "containerPort": l.port, "protocol": "TCP"}))
        .collect();

    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    for (i, p) in spec.ssl_profiles.iter().flatten().enumerate() {
        if let Some(cred) = &p.credentials {
            let v = format!("ssl-{i}-credentials");
            volumes.push(json!({"name": v, "secret": {"secretName": cred}}));
            mounts.push(json!({"name": v, "mountPath": cert_dir(&p.name, cred), "readOnly": true}));
        }
        if let Some(ca) = &p.ca_cert {
            let needed = Some(ca) != p.credentials.as_ref()
                && !(p.mutual_auth == Some(true) && p.generate_credentials == Some(true));
            if needed {
                let v = format!("ssl-{i}-ca");
                volumes.push(json!({"name": v, "secret": {"secretName": ca}}));
                mounts.push(json!({"name": v, "mountPath": cert_dir(&p.name, ca), "readOnly": true}));
            }
        }
    }
    if let Some(users) = t.users_secret() {
        volumes.push(json!({"name": "sasl-users", "secret": {"secretName": users}}));
        volumes.push(json!({"name": "sasl-config", "configMap": {"name": t.sasl_config_name()}}));
        mounts.push(json!({"name": "sasl-users", "mountPath": SASL_USERS_DIR, "readOnly": true}));
        mounts.push(json!({"name": "sasl-config", "mountPath": "/etc/sasl2", "readOnly": true}));
    }

    let mut container = json!({
        "name": t.name,
        "image": plan.image.clone().unwrap_or_else(|| s.default_image.clone()),
        "env": env,
        "ports": ports,
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": liveness}, "initialDelaySeconds": 60},
        "volumeMounts": mounts,
    });
    if let Some(r) = &plan.resources {
        container["resources"] = serde_json::to_value(r).expect("resources serialize");
    }
    let mut pod = json!({"serviceAccountName": t.name, "containers": [container], "volumes": volumes});
    if plan.placement == Some(Placement::AntiAffinity) {
        pod["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": t.selector()},
            "topologyKey": "kubernetes.io/hostname",
        }]}});
    }
    json!({
        "metadata": {
            "labels": t.labels(),
            "annotations": {"prometheus.io/port": liveness.to_string(), "prometheus.io/scrape": "true", CONFIG_HASH: hash},
        },
        "spec": pod,
    })
}

/// The workload: a Deployment for placement Any and AntiAffinity, a DaemonSet for Every.
pub enum Workload {
    /// `size` routers.
    Deployment(Box<Deployment>),
    /// One router per node.
    DaemonSet(Box<DaemonSet>),
}

/// Deployment or DaemonSet `<name>`.
pub fn workload(t: &Target<'_>, s: &Settings) -> Workload {
    let plan = t.plan();
    let template = pod_template(t, s);
    let selector = json!({"matchLabels": t.selector()});
    if plan.placement == Some(Placement::Every) {
        Workload::DaemonSet(Box::new(with_meta(
            t,
            t.name,
            json!({"spec": {"selector": selector, "template": template}}),
        )))
    } else {
        Workload::Deployment(Box::new(with_meta(
            t,
            t.name,
            json!({"spec": {"replicas": plan.size.unwrap_or(1), "selector": selector, "template": template}}),
        )))
    }
}

/// Service `<name>`: one port per listener of every kind, the Service type when set.
pub fn service(t: &Target<'_>) -> Service {
    let spec = &t.ic.spec;
    let ports: Vec<Value> = [&spec.listeners, &spec.inter_router_listeners, &spec.edge_listeners]
        .into_iter()
        .flat_map(|l| l.iter().flatten())
        .map(|l| json!({"name": service_port_name(l), "protocol": "TCP", "port": l.port, "targetPort": l.port}))
        .collect();
    let mut body = json!({"spec": {"selector": t.selector(), "ports": ports}});
    if let Some(st) = t.plan().service_type {
        body["spec"]["type"] = json!(st.as_str());
    }
    with_meta(t, t.name, body)
}

/// Exposed listeners of every kind, with their Ingress or Route name
/// `<name>-<listener name or port>`.
fn exposed<'a>(t: &'a Target<'_>) -> impl Iterator<Item = (String, &'a Listener)> + 'a {
    let spec = &t.ic.spec;
    [&spec.listeners, &spec.inter_router_listeners, &spec.edge_listeners]
        .into_iter()
        .flat_map(|l| l.iter().flatten())
        .filter(|l| l.expose == Some(true))
        .map(|l| (format!("{}-{}", t.name, l.name.clone().unwrap_or_else(|| l.port.to_string())), l))
}

/// Ingresses (networking.k8s.io/v1) `<name>-<listener name or port>` for exposed listeners.
pub fn ingresses(t: &Target<'_>) -> Vec<Ingress> {
    exposed(t)
        .map(|(name, l)| {
            with_meta(
                t,
                &name,
                json!({"spec": {"rules": [{"host": name, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": t.name, "port": {"number": l.port}}}}]}}]}}),
            )
        })
        .collect()
}

/// OpenShift Routes (`route.openshift.io/v1`) `<name>-<listener name or port>` for exposed
/// listeners, used instead of Ingresses when that API is served: TLS passthrough for
/// listeners with an sslProfile, edge termination with redirect otherwise (Go operator parity).
pub fn routes(t: &Target<'_>) -> Vec<kube::api::DynamicObject> {
    exposed(t)
        .map(|(name, l)| {
            let tls = if l.ssl_profile.is_some() {
                json!({"termination": "passthrough", "insecureEdgeTerminationPolicy": "None"})
            } else {
                json!({"termination": "edge", "insecureEdgeTerminationPolicy": "Redirect"})
            };
            typed(json!({
                "apiVersion": "route.openshift.io/v1", "kind": "Route",
                "metadata": t.meta(&name),
                "spec": {"to": {"kind": "Service", "name": t.name}, "port": {"targetPort": l.port}, "tls": tls},
            }))
        })
        .collect()
}

/// The API resource of OpenShift Routes.
pub fn route_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("route.openshift.io", "v1", "Route"),
        "routes",
    )
}
