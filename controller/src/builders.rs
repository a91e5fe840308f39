//! Pure builders: one function per child object of an Interconnect, from its [`ValidatedInterconnect`]
//! (defaulted and validated). No I/O, no clock: what they return is server-side applied as
//! is. Every object is a k8s-openapi struct built field by field, so a misspelled field
//! does not compile.
//!
//! Names, labels and pod shape follow the Go operator (docs/controller.md, "Objects for an
//! Interconnect") with its bugs fixed:
//! every object carries the labels and an owner reference; volume names are generated, so
//! two profiles sharing a Secret do not collide; the Deployment and the DaemonSet share one
//! pod template; `users: none` means no SASL Secret, ConfigMap, mounts or environment; the
//! anti-affinity selects on both labels; the pod template carries a hash of the config.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, Lifecycle, LifecycleHandler, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity,
    PodReadinessGate, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, Secret,
    SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec, SleepAction,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend,
    IngressSpec, ServiceBackendPort,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::{LinkRole, Listener, Placement, Role as RouterRole};

use crate::route::{Route, RoutePort, RouteSpec, RouteTargetReference, TlsConfig};
use crate::validated::ValidatedInterconnect;
use qdr_api::router_config::{CONFIG_DIR, CONFIG_FILE, DOLLAR_ENV, Rendered, ca_cert_file, cert_dir};

/// Pod-template annotation holding the start-up hash of the rendered config
/// ([`Rendered::startup_hash`]): a change rolls the routers.
pub const CONFIG_HASH: &str = "qdr-operator.io/config-hash";
/// Pod-template annotation holding the fingerprint of every mounted Secret
/// ([`crate::references::fingerprint`]): a renewed certificate, a rotated CA or a changed
/// users Secret rolls the routers, which read these files only at start.
pub const CREDENTIALS_HASH: &str = "qdr-operator.io/credentials-hash";
/// Pod-template annotation holding [`Rendered::startup_fields`]: the digest, by spec
/// field, of what [`CONFIG_HASH`] covers. It changes only with that hash (so it rolls
/// nothing by itself), and names the fields a change of it came from
/// ([`qdr_api::router_config::live::changed_fields`]).
pub const CONFIG_FIELDS: &str = "qdr-operator.io/config-fields";
/// Pod-template annotation naming what last changed [`CONFIG_HASH`] (`spec.edgeListeners`,
/// `spec.deploymentPlan.role, spec.sslProfiles`, or `the router configuration` when the
/// template before did not say): set when that hash changes, kept until it changes again,
/// so it rolls nothing by itself. The `ConfigChanged` Event and the `ConfigApplied`
/// condition of a roll say it (docs/live-configuration.md).
pub const CONFIG_ROLLED_BY: &str = "qdr-operator.io/config-rolled-by";
/// Pod-template annotation naming the configuration (the first 10 hex digits of
/// [`Rendered::hash`], as `status.configHash`) that the routers were rolled for because
/// a router refused it while running at [`crate::reconcile::LIVE_TRIES`] visits in a row;
/// absent until that happens, then kept, so the routers roll once
/// for each such configuration and never back (docs/live-configuration.md, "When a router
/// refuses").
pub const RESTARTED_FOR: &str = "qdr-operator.io/restarted-for-config";
/// Pod-template annotation saying its pods carry the readiness gate [`LINKED`]: set on a
/// new workload's template, and on an existing one's only when it rolls for another reason,
/// so upgrading rolls no router for the gate alone.
pub const READINESS_GATE: &str = "qdr-operator.io/readiness-gate";
/// The pod condition the controller sets once a router holds its links
/// ([`crate::mesh::linked`]): the readiness gate that makes Ready mean linked.
pub const LINKED: &str = "qdr-operator.io/linked";

/// Why the routers last rolled, as the pod template keeps it ([`CONFIG_ROLLED_BY`],
/// [`RESTARTED_FOR`]), and whether it carries the readiness gate ([`READINESS_GATE`]):
/// worked out by the build stage from the workload it observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roll {
    /// The [`CONFIG_ROLLED_BY`] value.
    pub rolled_by: Option<String>,
    /// The [`RESTARTED_FOR`] value.
    pub restarted_for: Option<String>,
    /// Whether the pods get the readiness gate [`LINKED`] (when they have the operator's
    /// management listener, through which the controller links and reads them).
    pub gated: bool,
}
/// Where the SASL users Secret is mounted.
pub(crate) const SASL_USERS_DIR: &str = "/etc/qpid-dispatch/sasl-users";
/// Content of the `<name>-sasl-config` ConfigMap (Go operator parity).
pub(crate) const SASL_CONFIG: &str =
    "\npwcheck_method: auxprop\nauxprop_plugin: sasldb\nsasldb_path: /tmp/qdrouterd.sasldb\n";
/// The user the generated users Secret holds (Go operator parity).
pub(crate) const GENERATED_USER: &str = "guest";

/// Everything the builders need besides the Interconnect: the controller's configuration
/// and what it discovered about the cluster at start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Router image for Interconnects that do not pin one (the Go operator's `QDROUTERD_IMAGE`).
    pub default_image: String,
    /// Whether `route.openshift.io/v1` is served: exposed listeners get Routes, not Ingresses.
    pub routes: bool,
    /// Lifetimes of generated CAs and router certificates.
    pub lifetimes: crate::credentials::Lifetimes,
    /// `runAsUser` of the router pods ([`DEFAULT_RUN_AS_USER`] by default; `None` where the
    /// platform assigns the UID, as OpenShift's restricted SCC does).
    pub run_as_user: Option<i64>,
    /// Key of the credentials hash annotation ([`crate::hash_key`]).
    pub hash_key: crate::hash_key::HashKey,
    /// Key of the management Secrets' seals ([`crate::credentials::seal`]), held since its
    /// Secret was made.
    pub seal_key: crate::hash_key::HashKey,
    /// Whether the routers get the operator's management listener and are read
    /// (`--observe-mesh`, docs/mesh-status.md).
    pub observe_mesh: bool,
}

/// The UID the router pods run as by default. The router image (qdr-image 1.19.0) declares no
/// `USER` and writes only below `/tmp` (its configuration and SASL database), so any
/// non-root UID works; this one is outside the range of system accounts.
pub const DEFAULT_RUN_AS_USER: i64 = 10001;

/// ServiceAccount `<name>` for the router pods. Its token is mounted only where the image's
/// auto-mesh reads the pod list with it ([`discovers_peers`]); the Role and RoleBinding are
/// kept for those routers, and because the Go operator made them (adopted, not deleted).
pub fn service_account(o: &ValidatedInterconnect) -> k8s_openapi::api::core::v1::ServiceAccount {
    k8s_openapi::api::core::v1::ServiceAccount { metadata: o.meta(o.name()), ..Default::default() }
}

/// Role `<name>`: get and list pods (what the image's auto-mesh needs, nothing more).
pub fn role(o: &ValidatedInterconnect) -> Role {
    Role {
        metadata: o.meta(o.name()),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
    }
}

/// RoleBinding `<name>` of the Role to the ServiceAccount.
pub fn role_binding(o: &ValidatedInterconnect) -> RoleBinding {
    RoleBinding {
        metadata: o.meta(o.name()),
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: o.name().into(),
            namespace: Some(o.namespace().into()),
            ..Default::default()
        }]),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: o.name().into(),
        },
    }
}

/// ConfigMap `<name>-router-config-<start-up hash>` ([`ValidatedInterconnect::router_config_name`]
/// of [`Rendered::startup_hash`]): the whole rendered router configuration under
/// [`CONFIG_FILE`], mounted read-only at [`CONFIG_DIR`]. A start-up change makes a new
/// ConfigMap and a new pod template, so a router of the old revision that restarts
/// mid-rollout reads a configuration made for its own template. With live entities
/// ([`Rendered::live`]) it is updated in place when only they change, so that a router that
/// restarts starts with what the running ones were given (docs/live-configuration.md);
/// without, it is immutable. Old ones are pruned once no router mounts them. Its size is
/// bounded by `qdr_api::validate` (a ConfigMap holds at most 1 MiB).
pub fn router_config_map(o: &ValidatedInterconnect, config: &Rendered) -> ConfigMap {
    ConfigMap {
        metadata: o.meta(&o.router_config_name(&config.startup_hash)),
        data: Some(BTreeMap::from([(CONFIG_FILE.into(), config.text.clone())])),
        immutable: (!config.live).then_some(true),
        ..Default::default()
    }
}

/// ConfigMap `<name>-sasl-config` pointing Cyrus SASL at the sasldb the image builds; `None`
/// with `users: none`.
pub fn sasl_config_map(o: &ValidatedInterconnect) -> Option<ConfigMap> {
    o.users_secret()?;
    Some(ConfigMap {
        metadata: o.meta(&o.sasl_config_name()),
        data: Some(BTreeMap::from([("qdrouterd.conf".into(), SASL_CONFIG.into())])),
        ..Default::default()
    })
}

/// The users Secret `name` the operator creates when it is missing: user
/// [`GENERATED_USER`] with `password`.
pub fn users_secret(o: &ValidatedInterconnect, name: &str, password: &str) -> Secret {
    Secret {
        metadata: o.meta(name),
        data: Some(BTreeMap::from([(GENERATED_USER.into(), ByteString(password.as_bytes().to_vec()))])),
        ..Default::default()
    }
}

/// Container-port name of a listener: its name, or `port-<N>` (an IANA service name).
pub(crate) fn container_port_name(l: &Listener) -> String {
    l.name.clone().unwrap_or_else(|| format!("port-{}", l.port))
}

/// Name of the router container's port for its health listener (`/healthz`, `/metrics` on
/// `spec.deploymentPlan.livenessPort`), which the chart's PodMonitor selects
/// (`deploy/components/monitoring`).
pub const METRICS_PORT_NAME: &str = "metrics";

/// The container port of the health listener: named [`METRICS_PORT_NAME`], or unnamed when a
/// listener already has that name (container port names are unique in a pod; the webhook
/// warns of such a listener, `qdr_api::warnings`). Declared so that a PodMonitor can select
/// it; the Go operator declared it only in the `prometheus.io/port` annotation, which is kept.
fn metrics_port(listeners: &[ContainerPort], liveness: i32) -> ContainerPort {
    let taken = listeners.iter().any(|p| p.name.as_deref() == Some(METRICS_PORT_NAME));
    ContainerPort {
        name: (!taken).then(|| METRICS_PORT_NAME.into()),
        container_port: liveness,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// Service-port name of a listener: its name, or the port number (Go operator parity).
pub(crate) fn service_port_name(l: &Listener) -> String {
    l.name.clone().unwrap_or_else(|| l.port.to_string())
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

fn env_field(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: field_path.into(), api_version: None }),
            ..Default::default()
        }),
    }
}

fn mount(name: &str, path: String) -> VolumeMount {
    VolumeMount { name: name.into(), mount_path: path, read_only: Some(true), ..Default::default() }
}

fn secret_volume(name: &str, secret: &str) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource { secret_name: Some(secret.into()), ..Default::default() }),
        ..Default::default()
    }
}

/// A generated CA Secret trusted through a profile's `caCert`: only its trust bundle
/// (`ca.crt`, two CAs during a rotation) is mounted, at the path the configuration reads
/// (`tls.crt`, the Go operator's file for a user's CA); its keys stay out of the pod.
fn bundle_volume(name: &str, secret: &str) -> Volume {
    let mut v = secret_volume(name, secret);
    if let Some(s) = v.secret.as_mut() {
        s.items = Some(vec![k8s_openapi::api::core::v1::KeyToPath {
            key: "ca.crt".into(),
            path: "tls.crt".into(),
            mode: None,
        }]);
    }
    v
}

/// Whether the routers of `o` find their peers with the image's `auto_mesh.py`
/// (`QDROUTERD_AUTO_MESH_DISCOVERY=QUERY`, which lists the namespace's pods with the pod's
/// ServiceAccount token and waits for every router pod to have an IP): only interior
/// routers without the operator's management listener (the spec took its port or name,
/// [`ValidatedInterconnect::with_management`]). Every other interior router is linked by
/// the controller ([`crate::mesh::links`]), starts without waiting on a peer and mounts no
/// API token.
pub fn discovers_peers(o: &ValidatedInterconnect) -> bool {
    o.spec().role() != RouterRole::Edge && !o.management()
}

/// The router container's environment: what the image's start scripts read
/// (`QDROUTERD_CONF`, the path of the mounted configuration, with `QDROUTERD_CONF_TYPE=json`;
/// the SASL database source and path), `DOLLAR=$` for the literal `$` of the configuration
/// ([`qdr_api::router_config::LITERAL_DOLLAR`]), and, only when [`discovers_peers`],
/// `QDROUTERD_AUTO_MESH_DISCOVERY` with what it reads (`POD_NAMESPACE`, `POD_IP`). Nothing
/// here depends on `size`: the Go operator's `POD_COUNT` (never read by the image) made
/// every scale a rolling restart; nor on the configuration itself (its hash in the pod
/// template rolls the routers).
fn router_env(o: &ValidatedInterconnect) -> Vec<EnvVar> {
    let mut env_vars = vec![
        env("APPLICATION_NAME", o.name()),
        env("QDROUTERD_CONF", format!("{CONFIG_DIR}/{CONFIG_FILE}")),
        env("QDROUTERD_CONF_TYPE", "json"),
        env(DOLLAR_ENV, "$"),
    ];
    if o.users_secret().is_some() {
        env_vars.push(env("QDROUTERD_AUTO_CREATE_SASLDB_SOURCE", format!("{SASL_USERS_DIR}/")));
        env_vars.push(env("QDROUTERD_AUTO_CREATE_SASLDB_PATH", "/tmp/qdrouterd.sasldb"));
    }
    if discovers_peers(o) {
        env_vars.push(env_field("POD_NAMESPACE", "metadata.namespace"));
        env_vars.push(env_field("POD_IP", "status.podIP"));
        env_vars.push(env("QDROUTERD_AUTO_MESH_DISCOVERY", "QUERY"));
    }
    env_vars
}

/// The volumes of the pod and the router container's mounts, in matching order: the router
/// configuration, one per sslProfile Secret (credentials, and the CA when the config reads
/// it from its own Secret; only the bundle of a CA in `bundles`), then the SASL users
/// Secret and ConfigMap.
fn volumes_and_mounts(
    o: &ValidatedInterconnect,
    config: &Rendered,
    bundles: &BTreeSet<String>,
) -> (Vec<Volume>, Vec<VolumeMount>) {
    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    volumes.push(Volume {
        name: "router-config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: o.router_config_name(&config.startup_hash),
            ..Default::default()
        }),
        ..Default::default()
    });
    mounts.push(mount("router-config", CONFIG_DIR.into()));
    for (i, p) in o.spec().ssl_profiles.iter().flatten().enumerate() {
        if let Some(cred) = &p.credentials {
            let v = format!("ssl-{i}-credentials");
            volumes.push(secret_volume(&v, cred));
            mounts.push(mount(&v, cert_dir(&p.name, cred)));
        }
        if let Some(ca) = &p.ca_cert {
            let needed = Some(ca) != p.credentials.as_ref()
                && !(p.mutual_auth == Some(true) && p.generate_credentials == Some(true));
            if needed {
                let v = format!("ssl-{i}-ca");
                let reads_tls_crt = ca_cert_file(p).is_some_and(|f| f.ends_with("/tls.crt"));
                volumes.push(if reads_tls_crt && bundles.contains(ca) {
                    bundle_volume(&v, ca)
                } else {
                    secret_volume(&v, ca)
                });
                mounts.push(mount(&v, cert_dir(&p.name, ca)));
            }
        }
    }
    if let Some(users) = o.users_secret() {
        volumes.push(secret_volume("sasl-users", &users));
        volumes.push(Volume {
            name: "sasl-config".into(),
            config_map: Some(ConfigMapVolumeSource { name: o.sasl_config_name(), ..Default::default() }),
            ..Default::default()
        });
        mounts.push(mount("sasl-users", SASL_USERS_DIR.into()));
        mounts.push(mount("sasl-config", "/etc/sasl2".into()));
    }
    (volumes, mounts)
}

/// The pod template shared by the Deployment and the DaemonSet; `config` is the rendered
/// router configuration (mounted from its ConfigMap, its start-up hash in [`CONFIG_HASH`]),
/// `credentials_hash` the fingerprint of the mounted Secrets ([`CREDENTIALS_HASH`]);
/// `bundles` the `caCert` Secrets that are generated CAs (of this or another Interconnect),
/// whose trust bundle is mounted instead of the Secret; `roll` what the template keeps of
/// why the routers last rolled ([`Roll`]).
pub fn pod_template(
    o: &ValidatedInterconnect,
    s: &Settings,
    config: &Rendered,
    credentials_hash: &str,
    bundles: &BTreeSet<String>,
    roll: &Roll,
) -> PodTemplateSpec {
    let plan = o.plan();
    let liveness = o.spec().liveness_port();
    // The client listeners of a configuration with live entities are written to running
    // routers: a port of theirs in the template would roll the routers when one is added.
    // (Container ports are informational: a router listens on every port its configuration
    // names, declared or not.)
    let roles: &[LinkRole] =
        if config.live { &[LinkRole::InterRouter] } else { &[LinkRole::Normal, LinkRole::InterRouter] };
    let mut ports: Vec<ContainerPort> = (roles.iter().copied())
        .flat_map(|r| o.spec().listeners_of(r).iter().flatten())
        .map(|l| ContainerPort {
            name: Some(container_port_name(l)),
            container_port: l.port,
            protocol: Some("TCP".into()),
            ..Default::default()
        })
        .collect();
    ports.push(metrics_port(&ports, liveness));
    let (volumes, mounts) = volumes_and_mounts(o, config, bundles);
    let container = Container {
        name: o.name().into(),
        image: Some(plan.image.clone().unwrap_or_else(|| s.default_image.clone())),
        env: Some(router_env(o)),
        ports: Some(ports),
        liveness_probe: Some(Probe { initial_delay_seconds: Some(60), ..healthz(liveness) }),
        // Ready once the router answers on its health listener: a Service sends no client
        // to a router that has not started, and a rollout waits for each new router.
        readiness_probe: Some(Probe { period_seconds: Some(5), ..healthz(liveness) }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        resources: plan.resources.clone(),
        // A stopping router keeps serving for a moment while the endpoints controller and
        // kube-proxy take it out of the Service: new connections go to the other routers
        // before this one closes the ones it has.
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds: PRE_STOP_PAUSE }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let affinity = (plan.placement == Some(Placement::AntiAffinity)).then(|| Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(o.selector()),
                    ..Default::default()
                }),
                topology_key: "kubernetes.io/hostname".into(),
                // Only routers of the same revision keep apart: during a roll a new router
                // may join a node that still runs an old one, so a roll can surge.
                match_label_keys: Some(vec![POD_TEMPLATE_HASH.into()]),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    });
    // The user's labels and annotations first, the operator's over them (validation
    // refuses the operator's keys, so none is lost: `qdr_api::owned_keys`).
    let mut labels = plan.pod_labels.clone().unwrap_or_default();
    labels.extend(o.labels());
    let mut annotations = plan.pod_annotations.clone().unwrap_or_default();
    annotations.extend([
        ("prometheus.io/port".into(), liveness.to_string()),
        ("prometheus.io/scrape".into(), "true".into()),
        (CONFIG_HASH.into(), config.startup_hash.clone()),
        (CREDENTIALS_HASH.into(), credentials_hash.into()),
        (CONFIG_FIELDS.into(), config.startup_fields.clone()),
    ]);
    let kept = [(CONFIG_ROLLED_BY, &roll.rolled_by), (RESTARTED_FOR, &roll.restarted_for)];
    annotations.extend(kept.into_iter().filter_map(|(k, v)| Some((k.to_string(), v.clone()?))));
    let gated = roll.gated && o.management();
    if gated {
        annotations.insert(READINESS_GATE.into(), LINKED.into());
    }
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            service_account_name: Some(o.name().into()),
            // Only the image's auto-mesh discovery calls the API server from a router pod.
            automount_service_account_token: (!discovers_peers(o)).then_some(false),
            containers: vec![container],
            volumes: Some(volumes),
            affinity,
            tolerations: plan.tolerations.clone(),
            node_selector: plan.node_selector.clone(),
            topology_spread_constraints: spread_constraints(o),
            priority_class_name: plan.priority_class_name.clone(),
            security_context: Some(pod_security(s)),
            termination_grace_period_seconds: Some(TERMINATION_GRACE),
            readiness_gates: gated.then(|| vec![PodReadinessGate { condition_type: LINKED.into() }]),
            ..Default::default()
        }),
    }
}

/// The pods' `topologySpreadConstraints`: `deploymentPlan.topologySpreadConstraints` as
/// written, each without a `labelSelector` given this Interconnect's router selector (so a
/// constraint of only `maxSkew`, `topologyKey` and `whenUnsatisfiable` spreads its routers,
/// not nothing: without a selector the scheduler counts no pod). `None` when there are none.
pub fn spread_constraints(o: &ValidatedInterconnect) -> Option<Vec<TopologySpreadConstraint>> {
    let given = o.plan().topology_spread_constraints.filter(|c| !c.is_empty())?;
    let selector = LabelSelector { match_labels: Some(o.selector()), ..Default::default() };
    Some(
        (given.iter())
            .map(|c| TopologySpreadConstraint {
                label_selector: c.label_selector.clone().or_else(|| Some(selector.clone())),
                ..c.clone()
            })
            .collect(),
    )
}

/// Seconds a stopping router keeps running before it is sent `SIGTERM` (the `preStop`
/// `sleep` action, Kubernetes 1.30+): the time the endpoints controller and kube-proxy take to
/// stop sending new connections to it, a few seconds on a busy cluster.
pub const PRE_STOP_PAUSE: i64 = 5;

/// The pod's termination grace, in seconds: [`PRE_STOP_PAUSE`], then `SIGTERM`, after which
/// qdrouterd closes its connections and exits within a second; `SIGKILL` only after this.
/// The Kubernetes default, set so that it shows in the pod template.
pub const TERMINATION_GRACE: i64 = 30;

/// A probe of the router's health listener: `GET /healthz` on `port` (the liveness port).
fn healthz(port: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(port),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The pod's security context: what Pod Security `restricted` asks of a pod (non-root,
/// `RuntimeDefault` seccomp), and the user to run as, [`Settings::run_as_user`]: the router
/// image declares no `USER`, so without one it would run as root and `runAsNonRoot` would
/// refuse it. `None` leaves the UID to the platform (OpenShift's restricted SCC assigns one
/// from the namespace's range).
fn pod_security(s: &Settings) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: s.run_as_user,
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
        ..Default::default()
    }
}

/// The workload: a Deployment for placement Any and AntiAffinity, a DaemonSet for Every.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// `size` routers.
    Deployment(Box<Deployment>),
    /// One router per node.
    DaemonSet(Box<DaemonSet>),
}

impl Workload {
    /// The pod template, whichever the kind (`None` only for a workload without a spec,
    /// which [`workload`] never builds).
    pub fn template(&self) -> Option<&PodTemplateSpec> {
        match self {
            Workload::Deployment(d) => d.spec.as_ref().map(|s| &s.template),
            Workload::DaemonSet(d) => d.spec.as_ref().map(|s| &s.template),
        }
    }
}

/// The label the Deployment controller gives each revision's pods (its ReplicaSet's hash).
const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// How a Deployment rolls: the default (25 % surge, 25 % unavailable) except for
/// `AntiAffinity`, whose routers spread one per node within a revision (`matchLabelKeys:
/// [pod-template-hash]`, Kubernetes 1.33): a new router goes up first and an old one goes
/// only once it is Ready (`maxSurge: 1`, `maxUnavailable: 0`), so all `size` routers serve
/// throughout a roll, a single one included. (Earlier releases rolled `maxSurge: 0`,
/// `maxUnavailable: 1` because a surge pod had no node to go to: `size` 1 was down on every
/// roll.)
fn strategy(placement: Option<Placement>) -> Option<DeploymentStrategy> {
    (placement == Some(Placement::AntiAffinity)).then(|| DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    })
}

/// Deployment or DaemonSet `<name>` running `config` (the rest as [`pod_template`]).
pub fn workload(
    o: &ValidatedInterconnect,
    s: &Settings,
    config: &Rendered,
    credentials_hash: &str,
    bundles: &BTreeSet<String>,
    roll: &Roll,
) -> Workload {
    let plan = o.plan();
    let template = pod_template(o, s, config, credentials_hash, bundles, roll);
    let selector = LabelSelector { match_labels: Some(o.selector()), ..Default::default() };
    if plan.placement == Some(Placement::Every) {
        Workload::DaemonSet(Box::new(DaemonSet {
            metadata: o.meta(o.name()),
            spec: Some(DaemonSetSpec { selector, template, ..Default::default() }),
            ..Default::default()
        }))
    } else {
        Workload::Deployment(Box::new(Deployment {
            metadata: o.meta(o.name()),
            spec: Some(DeploymentSpec {
                replicas: Some(plan.size.unwrap_or(1)),
                selector,
                template,
                strategy: strategy(plan.placement),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
}

/// PodDisruptionBudget `<name>` for a Deployment of more than one router (`Any` and
/// `AntiAffinity` with `size` ≥ 2): `maxUnavailable: 1`, so a node drain or a cluster
/// autoscaler evicts one router at a time and waits for its replacement to be Ready before the
/// next (the Eviction API answers 429 meanwhile). `unhealthyPodEvictionPolicy: AlwaysAllow`:
/// a router that is not Ready serves nothing and never blocks a drain. `None` for one router
/// (a budget of one would block every drain) and for `Every` (a DaemonSet's routers are one per
/// node, which `kubectl drain --ignore-daemonsets` leaves running, and the disruption
/// controller cannot count a DaemonSet's pods for `maxUnavailable`).
pub fn disruption_budget(o: &ValidatedInterconnect) -> Option<PodDisruptionBudget> {
    let plan = o.plan();
    if plan.placement == Some(Placement::Every) || plan.size.unwrap_or(1) < 2 {
        return None;
    }
    Some(PodDisruptionBudget {
        metadata: o.meta(o.name()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(o.selector()), ..Default::default() }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Service `<name>`: one port per listener of every kind, the Service type when set.
pub fn service(o: &ValidatedInterconnect) -> Service {
    let ports = o
        .spec()
        .every_listener()
        .map(|(_, _, l)| ServicePort {
            name: Some(service_port_name(l)),
            protocol: Some("TCP".into()),
            port: l.port,
            target_port: Some(IntOrString::Int(l.port)),
            ..Default::default()
        })
        .collect();
    let mut metadata = o.meta(o.name());
    metadata.annotations = o.plan().service_annotations.clone().filter(|a| !a.is_empty());
    Service {
        metadata,
        spec: Some(ServiceSpec {
            selector: Some(o.selector()),
            ports: Some(ports),
            // Always set (the API's default when unset), so a type someone else set is
            // taken back by the next apply.
            type_: Some(o.plan().service_type.map_or_else(|| "ClusterIP".into(), |t| t.as_str().to_string())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether the Service `live` (as the API server answered) has exactly the ports of
/// `desired`: the same entries by name, port, protocol, target port and app protocol, in
/// any order. Node ports are the API server's to allocate and are not compared.
pub fn same_ports(desired: &Service, live: &Service) -> bool {
    let entries = |s: &Service| {
        let mut v: Vec<_> = s
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .map(|p| {
                let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
                let target = match target {
                    IntOrString::Int(i) => i.to_string(),
                    IntOrString::String(s) => s,
                };
                (p.name.clone(), p.port, protocol, target, p.app_protocol.clone())
            })
            .collect();
        v.sort();
        v
    };
    entries(desired) == entries(live)
}

/// Exposed listeners of every kind, with their Ingress or Route name
/// `<name>-<listener name or port>`.
fn exposed(o: &ValidatedInterconnect) -> impl Iterator<Item = (String, &Listener)> + '_ {
    o.spec()
        .every_listener()
        .map(|(_, _, l)| l)
        .filter(|l| l.expose == Some(true))
        .map(|l| (format!("{}-{}", o.name(), listener_suffix(l)), l))
}

/// What names an exposed listener's objects after the Interconnect's name: its name, or
/// its port.
fn listener_suffix(l: &Listener) -> String {
    l.name.clone().unwrap_or_else(|| l.port.to_string())
}

/// The Ingress host of an exposed listener: one DNS label, `<name>-<suffix>` when that is at
/// most 63 characters; otherwise the name is cut and the first 8 hex digits of its SHA-256
/// keep hosts of different Interconnects apart: `<name cut>-<hash>-<suffix>`, 63 characters.
/// (`name` is a DNS-1035 label of at most 63 characters and `suffix` a listener name of at
/// most 15 or a port of at most 5 digits, so there is always room.)
pub(crate) fn host_label(name: &str, suffix: &str) -> String {
    let full = format!("{name}-{suffix}");
    if full.len() <= 63 {
        return full;
    }
    use sha2::Digest;
    let hash: String =
        sha2::Sha256::digest(name.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect();
    let keep = 63 - suffix.len() - hash.len() - 2;
    let cut = name[..keep].trim_end_matches('-');
    format!("{cut}-{hash}-{suffix}")
}

/// Ingresses (networking.k8s.io/v1) `<name>-<listener name or port>` for exposed listeners.
pub fn ingresses(o: &ValidatedInterconnect) -> Vec<Ingress> {
    exposed(o)
        .map(|(name, l)| Ingress {
            metadata: o.meta(&name),
            spec: Some(IngressSpec {
                rules: Some(vec![IngressRule {
                    host: Some(host_label(o.name(), &listener_suffix(l))),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![HTTPIngressPath {
                            path: Some("/".into()),
                            path_type: "Prefix".into(),
                            backend: IngressBackend {
                                service: Some(IngressServiceBackend {
                                    name: o.name().into(),
                                    port: Some(ServiceBackendPort { number: Some(l.port), name: None }),
                                }),
                                ..Default::default()
                            },
                        }],
                    }),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
}

/// OpenShift Routes `<name>-<listener name or port>` for exposed listeners, used instead of
/// Ingresses when that API is served: TLS passthrough for listeners with an sslProfile, edge
/// termination with redirect otherwise (Go operator parity).
pub fn routes(o: &ValidatedInterconnect) -> Vec<Route> {
    exposed(o)
        .map(|(name, l)| {
            let (termination, insecure) =
                if l.ssl_profile.is_some() { ("passthrough", "None") } else { ("edge", "Redirect") };
            let mut route = Route::new(
                &name,
                RouteSpec {
                    to: RouteTargetReference { kind: "Service".into(), name: o.name().into() },
                    port: Some(RoutePort { target_port: IntOrString::Int(l.port) }),
                    tls: Some(TlsConfig {
                        termination: termination.into(),
                        insecure_edge_termination_policy: Some(insecure.into()),
                    }),
                },
            );
            route.metadata = o.meta(&name);
            route
        })
        .collect()
}

/// How exposed listeners leave the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Exposure {
    /// networking.k8s.io/v1 Ingresses.
    Ingresses(Vec<Ingress>),
    /// OpenShift Routes (where `route.openshift.io/v1` is served).
    Routes(Vec<Route>),
}

/// [`ingresses`] or [`routes`], as `s` says the cluster serves.
pub fn exposure(o: &ValidatedInterconnect, s: &Settings) -> Exposure {
    if s.routes { Exposure::Routes(routes(o)) } else { Exposure::Ingresses(ingresses(o)) }
}
