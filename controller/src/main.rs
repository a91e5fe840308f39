//! `qdr-controller`: reconciles Interconnects into Qpid Dispatch Router workloads. Runs as
//! several replicas; only the Lease holder reconciles. See `--help`.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use qdr_controller::builders::Settings;
use qdr_controller::credentials::Lifetimes;
use qdr_controller::hash_key::HashKey;
use qdr_controller::health::router as health_router;
use qdr_controller::health::{Health, HealthTiming};
use qdr_controller::lease::{Elector, Timing};
use qdr_controller::metrics::Metrics;
use qdr_controller::reconcile::Context;
use qdr_controller::runtime::{run_controllers, run_while_leading};
use qdr_startup::LogFormat;
use tracing::Instrument;

/// Reconciles Interconnects (interconnectedcloud.github.io/v1alpha1) into router
/// Deployments or DaemonSets, Services, ConfigMaps, Secrets, RBAC and Ingresses.
///
/// Run several replicas: they elect a leader through a Lease, and only the leader
/// reconciles. /livez, /readyz and /metrics (OpenMetrics) are served on --health-listen:
/// ready while the API server answers (and, when leading, every watch has listed and none
/// fails), live unless a reconcile runs longer than --reconcile-stuck-after.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Namespaces to watch, comma-separated (a namespaced install, with a Role in each);
    /// absent or empty for all namespaces (a ClusterRole). WATCH_NAMESPACE with one name,
    /// as the Go operator read it, still works.
    #[arg(
        long = "watch-namespaces",
        alias = "watch-namespace",
        env = "WATCH_NAMESPACE",
        value_delimiter = ','
    )]
    watch_namespaces: Vec<String>,

    /// Router image for Interconnects that do not set spec.deploymentPlan.image.
    #[arg(long, env = "QDROUTERD_IMAGE", default_value = qdr_api::DEFAULT_ROUTER_IMAGE)]
    default_image: String,

    /// Namespace of the leader-election Lease (the operator's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "qdr-operator")]
    lease_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, env = "QDR_LEASE_NAME", default_value = "qdr-operator-controller")]
    lease_name: String,

    /// Secret in the Lease's namespace holding the key of the credentials hash annotation
    /// (created with a random key when missing; shared by the replicas).
    #[arg(long, env = "QDR_HASH_KEY_SECRET", default_value = qdr_controller::hash_key::DEFAULT_SECRET)]
    hash_key_secret: String,

    /// Secret in the Lease's namespace holding the key of the seals on the management
    /// Secrets (created with a random key when missing; shared by the replicas). Its
    /// creationTimestamp is when sealing began: management Secrets written before are
    /// sealed again.
    #[arg(long, env = "QDR_SEAL_KEY_SECRET", default_value = qdr_controller::hash_key::SEAL_SECRET)]
    seal_key_secret: String,

    /// This replica's identity in the Lease (defaults to the pod name, else hostname-pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,

    /// How long followers wait after the last renewal they saw before taking over.
    #[arg(long, env = "QDR_LEASE_DURATION", value_parser = humantime::parse_duration, default_value = "15s")]
    lease_duration: Duration,

    /// How long a leader keeps reconciling without a successful renewal. Must be shorter
    /// than --lease-duration.
    #[arg(long, env = "QDR_RENEW_DEADLINE", value_parser = humantime::parse_duration, default_value = "10s")]
    renew_deadline: Duration,

    /// How often the leader renews and followers check the Lease. Must be shorter than
    /// --renew-deadline; a follower gives a check up after --renew-deadline minus this.
    #[arg(long, env = "QDR_RETRY_PERIOD", value_parser = humantime::parse_duration, default_value = "2s")]
    retry_period: Duration,

    /// Address of the plain HTTP listener for probes and metrics.
    #[arg(long, env = "QDR_CONTROLLER_HEALTH_LISTEN", default_value = "0.0.0.0:8080")]
    health_listen: std::net::SocketAddr,

    /// Lifetime of the CAs the controller generates for router credentials (renewed with
    /// overlap at 2/3 of it).
    #[arg(long, env = "QDR_ROUTER_CA_LIFETIME", value_parser = humantime::parse_duration, default_value = "5y")]
    router_ca_lifetime: Duration,

    /// Lifetime of the router certificates the controller generates (renewed at 2/3 of it).
    #[arg(long, env = "QDR_ROUTER_CERT_LIFETIME", value_parser = humantime::parse_duration, default_value = "365d")]
    router_cert_lifetime: Duration,

    /// Least time between the steps of a generated CA's rotation (stage → promote →
    /// retire), on top of the routers' rollouts: the time clients outside the Interconnect
    /// get to trust the new CA, and to replace certificates of the old one. Default: a tenth
    /// of --router-ca-lifetime (182.5 days for 5 years); both waits must fit in the last third.
    #[arg(long, env = "QDR_ROUTER_CA_OVERLAP", value_parser = humantime::parse_duration)]
    router_ca_overlap: Option<Duration>,

    /// How long a single reconcile may run before /livez fails (the pod is restarted and
    /// another replica takes over).
    #[arg(long, env = "QDR_RECONCILE_STUCK_AFTER", value_parser = humantime::parse_duration, default_value = "5m")]
    reconcile_stuck_after: Duration,

    /// runAsUser of the router pods (the router image declares no USER). "platform" sets
    /// none, for OpenShift, whose restricted SCC assigns a UID from the namespace's range.
    #[arg(long, env = "QDR_ROUTER_RUN_AS_USER", default_value = "10001", value_parser = parse_run_as_user)]
    router_run_as_user: RunAsUser,

    /// Read the routers themselves (`on`): the status reports the mesh they see
    /// (`MeshConnected`, `ConfigApplied`, `status.mesh`, `status.routers`; docs/mesh-status.md).
    /// `off` for routers nobody can reach (simulated nodes): no reads, and `Ready` means the
    /// pods are ready. Every router has the operator's management listener (port 55670,
    /// mutual TLS) either way, so changing this restarts no router.
    #[arg(long, env = "QDR_OBSERVE_MESH", value_enum, default_value = "on")]
    observe_mesh: OnOff,

    /// How long a visit to a router relies on the last whole read of its live entities
    /// (addresses, link routes, auto-links, connectors, listeners, a Link's sslProfile) instead
    /// of asking for them again, while the router process and its configuration stay the
    /// same: an entity changed on a router by hand (`qdmanage`) is put back within this, plus
    /// the next read of its mesh (docs/live-configuration.md). Shorter costs a connected
    /// router's visit about half again as much CPU; `0s` reads them at every visit.
    #[arg(long, env = "QDR_LIVE_RECHECK", value_parser = humantime::parse_duration, default_value = "5m")]
    live_recheck: std::time::Duration,

    /// Labels of the controller's own pods, `key=value` pairs joined by commas: the routers'
    /// NetworkPolicies admit only pods with these labels in the controller's namespace
    /// (`POD_NAMESPACE`) to the management port 55670. deploy/ and the chart label the
    /// pods `app.kubernetes.io/name=qdr-controller`; change both together.
    #[arg(
        long,
        env = "QDR_CONTROLLER_POD_LABELS",
        default_value = "app.kubernetes.io/name=qdr-controller",
        value_parser = parse_labels
    )]
    controller_pod_labels: Labels,

    /// What a router container requests when its Interconnect sets no
    /// `spec.deploymentPlan.resources`: `resource=quantity` pairs joined by commas, of `cpu`,
    /// `memory` and `ephemeral-storage` (docs/sizing.md: measured, one router of the
    /// defaults' listeners is 31 MiB resident idle and 61 MiB with 1,000 client connections).
    /// A change rolls the routers that use it.
    #[arg(
        long,
        env = "QDR_ROUTER_DEFAULT_REQUESTS",
        default_value = "cpu=50m,memory=64Mi",
        value_parser = parse_requests
    )]
    router_default_requests: Requests,

    /// Log format.
    #[arg(long, env = "QDR_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// A switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

/// `--router-run-as-user`: a UID, or the platform's choice.
#[derive(Debug, Clone, Copy)]
struct RunAsUser(Option<i64>);

fn parse_run_as_user(s: &str) -> Result<RunAsUser, String> {
    match s {
        "platform" => Ok(RunAsUser(None)),
        _ => match s.parse::<i64>() {
            Ok(uid) if uid > 0 => Ok(RunAsUser(Some(uid))),
            _ => Err(format!("{s:?} is neither a UID above 0 nor \"platform\"")),
        },
    }
}

/// `--controller-pod-labels`: at least one `key=value`.
#[derive(Debug, Clone)]
struct Labels(std::collections::BTreeMap<String, String>);

fn parse_labels(s: &str) -> Result<Labels, String> {
    let mut labels = std::collections::BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not key=value"))?;
        if k.is_empty() {
            return Err(format!("{pair:?} has no key"));
        }
        labels.insert(k.to_string(), v.to_string());
    }
    if labels.is_empty() {
        return Err("no label: the NetworkPolicies would admit every pod of the namespace".into());
    }
    Ok(Labels(labels))
}

/// `--router-default-requests`: at least one `resource=quantity`.
#[derive(Debug, Clone)]
struct Requests(std::collections::BTreeMap<String, String>);

fn parse_requests(s: &str) -> Result<Requests, String> {
    // A decimal number with an optional SI or binary suffix (the Kubernetes quantity forms
    // a request is written in; no exponents).
    let is_quantity = |v: &str| {
        let number = ["Ki", "Mi", "Gi", "Ti", "m", "k", "M", "G", "T"]
            .iter()
            .find_map(|suffix| v.strip_suffix(suffix))
            .unwrap_or(v);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, "0"));
        !whole.is_empty()
            && !fraction.is_empty()
            && whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit())
    };
    let mut requests = std::collections::BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not resource=quantity"))?;
        if !["cpu", "memory", "ephemeral-storage"].contains(&k) {
            return Err(format!("{k:?} is none of cpu, memory, ephemeral-storage"));
        }
        if !is_quantity(v) {
            return Err(format!("{v:?} is not a quantity (50m, 64Mi, 1.5)"));
        }
        requests.insert(k.to_string(), v.to_string());
    }
    if requests.is_empty() {
        return Err("no request".into());
    }
    Ok(Requests(requests))
}

/// `User-Agent` of every request to the API server (audit logs, request metrics).
const USER_AGENT: &str = concat!("qdr-controller/", env!("CARGO_PKG_VERSION"));

fn main() -> Result<(), Box<dyn std::error::Error>> {
    qdr_startup::print_flags_reference_if_asked(<Args as clap::CommandFactory>::command());
    // Before the runtime's threads start: a thread that allocates first takes an arena of its
    // own when the bound is not set yet.
    qdr_startup::bound_allocator(1);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run())
}

/// The controller, on the runtime [`main`] starts (what `#[tokio::main]` would make).
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut lifetimes = Lifetimes::new(args.router_ca_lifetime, args.router_cert_lifetime);
    if let Some(overlap) = args.router_ca_overlap {
        lifetimes.overlap = overlap;
    }
    if let Err(e) = lifetimes.check() {
        clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n")).exit();
    }
    let timing = Timing {
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    };
    if let Err(e) = timing.check() {
        clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n")).exit();
    }
    qdr_startup::init(args.log_format);
    let config = qdr_startup::config(USER_AGENT).await?;
    // The elector and the watches use `client`; every write of the reconcilers goes through
    // `fenced`, which refuses it outside the leadership term (see `qdr_controller::fence`).
    let client = kube::Client::try_from(config.clone())?;
    let fence = qdr_controller::fence::Fence::default();
    // The ServiceAccount the controller runs as, from its token: the hash key's owner.
    let owner = qdr_controller::hash_key::service_account_owner(&config, &args.lease_namespace);
    let fenced = qdr_controller::fence::client(config, &fence)?;
    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default().trim().to_string();
        format!("{host}-{}", std::process::id())
    });
    let metrics = Arc::new(Metrics::default());
    let elector = Arc::new(
        Elector::new(
            Api::<Lease>::namespaced(client.clone(), &args.lease_namespace),
            &args.lease_name,
            &identity,
            timing,
        )
        .with_fence(fence.clone()),
    );
    let health = Arc::new(Health::new(
        HealthTiming {
            api_window: args.lease_duration,
            stuck_after: args.reconcile_stuck_after,
            ..HealthTiming::default()
        },
        {
            let e = elector.clone();
            move || e.last_contact()
        },
    ));
    let listener = tokio::net::TcpListener::bind(args.health_listen).await?;
    let app = health_router(health.clone(), metrics.clone());
    tokio::spawn(async move { axum::serve(listener, app).await }.instrument(tracing::info_span!("health")));

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        qdr_startup::shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let election = tokio::spawn({
        let (e, stop) = (elector.clone(), stop_rx.clone());
        async move { e.run(stop).await }.instrument(tracing::info_span!("election"))
    });

    // The oldest Kubernetes supported (qdr_controller::server_version); retried until the
    // API server answers, refused at once when it is older.
    loop {
        match client.apiserver_version().await {
            Ok(info) => {
                if let Err(why) = qdr_controller::server_version::check(&info) {
                    tracing::error!(version = %info.git_version, "{why}");
                    return Err(why.into());
                }
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the API server's version; retrying");
                tokio::time::sleep(args.retry_period).await;
            }
        }
    }
    // OpenShift: Routes instead of Ingresses when the API is served (checked once at start).
    // Retried until the API server answers: meanwhile /readyz says why this replica waits.
    let routes = loop {
        match client.list_api_groups().await {
            Ok(groups) => break groups.groups.iter().any(|g| g.name == "route.openshift.io"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list API groups; retrying");
                tokio::time::sleep(args.retry_period).await;
            }
        }
    };
    tracing::info!(routes, "exposure through {}", if routes { "Routes" } else { "Ingresses" });
    // The credentials hash key, shared by every replica through one Secret in the
    // controller's namespace, owned by the controller's ServiceAccount (so uninstalling
    // removes it, and deleting the Lease does not); retried like the API groups, then
    // followed for ever (made again when deleted, read again when replaced).
    let secrets = Api::<Secret>::namespaced(client.clone(), &args.lease_namespace);
    // The seal key is kept the same way, in a Secret of its own.
    let mut keys = Vec::new();
    for name in [&args.hash_key_secret, &args.seal_key_secret] {
        let key = loop {
            match HashKey::load_or_create(&secrets, name, owner.clone()).await {
                Ok(k) => break k,
                Err(e @ qdr_controller::hash_key::Error::Unusable(_)) => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(error = %e, secret = %name, "cannot read or create a key; retrying");
                    tokio::time::sleep(args.retry_period).await;
                }
            }
        };
        tokio::spawn(
            qdr_controller::hash_key::follow(secrets.clone(), name.clone(), key.clone(), owner.clone())
                .instrument(tracing::info_span!("key", secret = %name)),
        );
        keys.push(key);
    }
    let (hash_key, seal_key) = (keys.remove(0), keys.remove(0));
    let settings = Settings {
        default_image: args.default_image.clone(),
        routes,
        lifetimes,
        run_as_user: args.router_run_as_user.0,
        hash_key,
        seal_key,
        observe_mesh: args.observe_mesh == OnOff::On,
        controller_pods: qdr_controller::builders::ControllerPods {
            namespace: args.lease_namespace.clone(),
            labels: args.controller_pod_labels.0.clone(),
        },
        router_requests: args.router_default_requests.0.clone(),
    };
    let recorder = qdr_controller::recorder::Recorder::new(fenced.clone(), "qdr-operator", &identity);
    let ctx = Arc::new(
        Context::new(fenced, settings, recorder, metrics.clone(), health)
            .with_router_reader(fence, args.live_recheck),
    );
    let mut ns = args.watch_namespaces.clone();
    ns.retain(|n| !n.trim().is_empty());
    ns.sort();
    ns.dedup();
    run_while_leading(elector.subscribe(), stop_rx, Duration::from_secs(1), || {
        let (ctx, ns, identity) = (ctx.clone(), ns.clone(), identity.clone());
        async move {
            let _leading = ctx.metrics.leading();
            tracing::info!(%identity, "leading: reconciling");
            run_controllers(ctx.clone(), &ns).await;
        }
    })
    .await;
    tracing::info!(%identity, "not reconciling");
    elector.stand_down(election).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_labels, parse_requests, parse_run_as_user};

    #[test]
    fn default_requests_are_resources_with_quantities() {
        let r = parse_requests("cpu=50m,memory=64Mi").unwrap().0;
        assert_eq!((r["cpu"].as_str(), r["memory"].as_str()), ("50m", "64Mi"));
        assert_eq!(parse_requests("cpu=0.5, ephemeral-storage=1Gi").unwrap().0.len(), 2);
        for bad in ["", "cpu", "cpu=", "cpu=fast", "cpu=1.", "cpu=.5", "gpu=1", "memory=64MB", "memory=1e3"] {
            assert!(parse_requests(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn controller_pod_labels_are_key_value_pairs() {
        let l = parse_labels("app.kubernetes.io/name=qdr-controller,tier=ops").unwrap().0;
        assert_eq!(l.len(), 2);
        for bad in ["", "name", "=x", " , "] {
            assert!(parse_labels(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn run_as_user_is_a_uid_or_the_platforms_choice() {
        assert_eq!(parse_run_as_user("10001").unwrap().0, Some(10001));
        assert_eq!(parse_run_as_user("platform").unwrap().0, None);
        for bad in ["0", "-1", "root", ""] {
            assert!(parse_run_as_user(bad).is_err(), "{bad:?}");
        }
    }
}
