//! The pod template the Deployment and the DaemonSet share: the router container, its
//! environment, volumes, probes and security context, and the pods' scheduling.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, Lifecycle, LifecycleHandler, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity,
    PodReadinessGate, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecretVolumeSource, SecurityContext, SleepAction, TopologySpreadConstraint, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use qdr_api::{LinkRole, Listener, Placement, Role as RouterRole};

use super::annotations::{
    CONFIG_FIELDS, CONFIG_HASH, CONFIG_ROLLED_BY, CREDENTIALS_HASH, LINKED, READINESS_GATE, RESTARTED_FOR,
    Roll,
};
use super::config::SASL_USERS_DIR;
use super::settings::Settings;
use crate::validated::ValidatedInterconnect;
use qdr_api::router_config::{CONFIG_DIR, CONFIG_FILE, DOLLAR_ENV, Rendered, ca_cert_file, cert_dir};

/// The label the Deployment controller gives each revision's pods (its ReplicaSet's hash).
pub(crate) const POD_TEMPLATE_HASH: &str = "pod-template-hash";

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
/// it from its own Secret; only the bundle of a CA in `bundles`), the links Secret once the
/// Interconnect has a Link, then the SASL users Secret and ConfigMap.
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
    if o.links_mounted() {
        // Optional: the pass writes it before the workload, and a router must start even
        // if it was deleted by hand (the next pass writes it again).
        let mut v = secret_volume("qdr-operator-links", &qdr_api::router_config::links_secret(o.name()));
        if let Some(s) = v.secret.as_mut() {
            s.optional = Some(true);
        }
        volumes.push(v);
        mounts.push(mount("qdr-operator-links", qdr_api::router_config::LINKS_DIR.into()));
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

/// The labels of the router pods' template: `deploymentPlan.podLabels`, then the operator's
/// over them (validation refuses the operator's keys, so none is lost:
/// `qdr_api::owned_keys`). The workload controllers add their own to each pod
/// (`pod-template-hash` for a Deployment's).
pub fn pod_labels(o: &ValidatedInterconnect) -> BTreeMap<String, String> {
    let mut labels = o.plan().pod_labels.clone().unwrap_or_default();
    labels.extend(o.labels());
    labels
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
        resources: Some(plan.resources.clone().unwrap_or_else(|| default_resources(&s.router_requests))),
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
    let labels = pod_labels(o);
    // The user's annotations first, the operator's over them (as [`pod_labels`]).
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

/// The router container's CPU request when `deploymentPlan.resources` is absent: a router
/// of the defaults' listeners measured 1 millicore idle and 51 carrying 200 acknowledged
/// messages a second (`make bench`, `QDR_BENCH_ONLY=sizing`; docs/sizing.md).
pub const DEFAULT_CPU_REQUEST: &str = "50m";

/// The router container's memory request when `deploymentPlan.resources` is absent: the
/// same router measured 31 MiB resident idle and 61 MiB holding 1,000 idle client
/// connections (docs/sizing.md).
pub const DEFAULT_MEMORY_REQUEST: &str = "64Mi";

/// The requests of a router whose spec sets no `resources`, unless the controller is told
/// others (`--router-default-requests`): [`DEFAULT_CPU_REQUEST`] and
/// [`DEFAULT_MEMORY_REQUEST`].
pub fn default_requests() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cpu".to_string(), DEFAULT_CPU_REQUEST.to_string()),
        ("memory".to_string(), DEFAULT_MEMORY_REQUEST.to_string()),
    ])
}

/// The router container's resources when `deploymentPlan.resources` is absent: `requests`
/// only ([`default_requests`] unless the controller was told others), so routers are
/// Burstable rather than BestEffort (the first evicted when a node runs short) and pass a
/// namespace's ResourceQuota on requests; no limits: a memory limit a router outgrows kills
/// it (every client connection dropped), and a CPU limit delays every message it forwards.
pub fn default_resources(requests: &BTreeMap<String, String>) -> ResourceRequirements {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    ResourceRequirements {
        requests: Some(requests.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect()),
        ..Default::default()
    }
}
