//! `qdr-webhook`: the Interconnect admission webhook server. See `--help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use qdr_certs::{CertManager, CertResolver, Policy, WebhookConfiguration};
use qdr_startup::LogFormat;
use qdr_webhook::admission::Checks;
use qdr_webhook::authorize::Authorizer;
use qdr_webhook::metrics::Metrics;
use qdr_webhook::server::{AppState, CountingAcceptor, Lanes, Timeouts, admission_router, health_router};

/// Where the serving certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TlsMode {
    /// Made and rotated by this webhook, kept in a Secret, caBundle injected.
    Secret,
    /// Read from tls.crt and tls.key in --tls-dir and reloaded on change (cert-manager etc.).
    Files,
}

/// Validating and defaulting admission webhook for Interconnects
/// (interconnectedcloud.github.io/v1alpha1).
///
/// Serves POST /mutate and POST /validate (AdmissionReview v1) over TLS, and /livez,
/// /readyz and /metrics (OpenMetrics) on the plain health port only. Every replica serves;
/// in secret mode they share one Secret and coordinate certificate rotation through it.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address of the TLS (admission) listener.
    #[arg(long, env = "QDR_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    listen: SocketAddr,

    /// Address of the plain HTTP listener for probes and metrics.
    #[arg(long, env = "QDR_WEBHOOK_HEALTH_LISTEN", default_value = "0.0.0.0:8081")]
    health_listen: SocketAddr,

    /// Where the serving certificate comes from.
    #[arg(long, env = "QDR_WEBHOOK_TLS_MODE", value_enum, default_value = "secret")]
    tls_mode: TlsMode,

    /// Files mode: directory holding tls.crt and tls.key.
    #[arg(long, env = "QDR_WEBHOOK_TLS_DIR", required_if_eq("tls_mode", "files"))]
    tls_dir: Option<PathBuf>,

    /// Files mode: how often tls.crt and tls.key are checked for a change.
    #[arg(long, env = "QDR_WEBHOOK_TLS_RELOAD_INTERVAL", value_parser = humantime::parse_duration, default_value = "1s")]
    tls_reload_interval: Duration,

    /// Namespace of the Secret and the Service (defaults to the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "qdr-operator")]
    namespace: String,

    /// Secret mode: name of the Secret holding the CA and serving certificate.
    #[arg(long, env = "QDR_WEBHOOK_SECRET", default_value = "qdr-webhook-tls")]
    secret_name: String,

    /// Name of the webhook Service; the certificate is for <svc>, <svc>.<ns> and <svc>.<ns>.svc.
    #[arg(long, env = "QDR_WEBHOOK_SERVICE", default_value = "qdr-webhook")]
    service_name: String,

    /// Additional certificate names (DNS names or IP addresses), e.g. 127.0.0.1 when the API
    /// server calls the webhook by URL. Repeat or comma-separate.
    #[arg(long, env = "QDR_WEBHOOK_EXTRA_SANS", value_delimiter = ',')]
    extra_san: Vec<String>,

    /// ValidatingWebhookConfiguration whose caBundle this webhook keeps right (empty: none).
    #[arg(long, env = "QDR_WEBHOOK_VALIDATING_CONFIG", default_value = "qdr-operator-validating")]
    validating_config: String,

    /// MutatingWebhookConfiguration whose caBundle this webhook keeps right (empty: none).
    #[arg(long, env = "QDR_WEBHOOK_MUTATING_CONFIG", default_value = "qdr-operator-mutating")]
    mutating_config: String,

    /// CA lifetime; the CA is rotated, with overlapping trust, at 2/3 of it.
    #[arg(long, env = "QDR_WEBHOOK_CA_LIFETIME", value_parser = humantime::parse_duration, default_value = "365d")]
    ca_lifetime: Duration,

    /// Serving-certificate lifetime; it is renewed at 2/3 of it.
    #[arg(long, env = "QDR_WEBHOOK_CERT_LIFETIME", value_parser = humantime::parse_duration, default_value = "90d")]
    cert_lifetime: Duration,

    /// How long a new CA must be trusted by the webhook configurations before it signs.
    #[arg(long, env = "QDR_WEBHOOK_CA_SOAK", value_parser = humantime::parse_duration, default_value = "10s")]
    ca_soak: Duration,

    /// How long the previous CA stays trusted after the new one starts signing.
    #[arg(long, env = "QDR_WEBHOOK_CA_RETIRE_GRACE", value_parser = humantime::parse_duration, default_value = "60s")]
    ca_retire_grace: Duration,

    /// How often to check whether a rotation step is due (and re-sync the caBundle).
    #[arg(long, env = "QDR_WEBHOOK_CHECK_INTERVAL", value_parser = humantime::parse_duration, default_value = "30s")]
    check_interval: Duration,

    /// On SIGTERM, keep serving (not ready; HTTP/1.1 answers close their connection) this long so endpoints drop the pod first.
    #[arg(long, env = "QDR_WEBHOOK_SHUTDOWN_DELAY", value_parser = humantime::parse_duration, default_value = "10s")]
    shutdown_delay: Duration,

    /// Admission port: longest TLS handshake.
    #[arg(long, env = "QDR_WEBHOOK_HANDSHAKE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s")]
    handshake_timeout: Duration,

    /// Admission port: longest wait for a connection's first bytes after the handshake; on
    /// HTTP/1.1, a request's answer must begin within this plus --request-timeout of its
    /// first bytes (a slow-loris client is cut there).
    #[arg(long, env = "QDR_WEBHOOK_HEADER_READ_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s")]
    header_read_timeout: Duration,

    /// Admission port: longest time a kept-alive HTTP/1.1 connection may stay idle between
    /// an answer and the next request. Keep it above the API server's own limit (90 s), so
    /// the API server closes its idle connections first: a review it sends on a connection
    /// the webhook is closing fails.
    #[arg(long, env = "QDR_WEBHOOK_IDLE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "2m")]
    idle_timeout: Duration,

    /// Admission port: longest time from a request's headers to its response (408 after);
    /// a review from the API server gets less when the API server waits less (its `timeout`
    /// parameter, less a tenth). Keep it below the webhook configurations' timeoutSeconds.
    #[arg(long, env = "QDR_WEBHOOK_REQUEST_TIMEOUT", value_parser = humantime::parse_duration, default_value = "4s")]
    request_timeout: Duration,

    /// Check, with a SubjectAccessReview per Secret, that the author of an Interconnect may
    /// `get` every Secret it names (users, sslProfiles' credentials and caCert, issuer,
    /// generated names included); deny the fields naming one they may not read.
    #[arg(long, env = "QDR_WEBHOOK_AUTHORIZE_SECRET_REFERENCES", default_value_t = true, action = clap::ArgAction::Set)]
    authorize_secret_references: bool,

    /// How long an allowing SubjectAccessReview answer is reused for the same user, groups,
    /// namespace and Secret (0: ask every time).
    #[arg(long, env = "QDR_WEBHOOK_AUTHORIZATION_CACHE_ALLOWED_TTL", value_parser = humantime::parse_duration, default_value = "10s")]
    authorization_cache_allowed_ttl: Duration,

    /// How long a denying SubjectAccessReview answer is reused (0: ask every time).
    #[arg(long, env = "QDR_WEBHOOK_AUTHORIZATION_CACHE_DENIED_TTL", value_parser = humantime::parse_duration, default_value = "5s")]
    authorization_cache_denied_ttl: Duration,

    /// Router images Interconnects may set in spec.deploymentPlan.image: patterns where `*`
    /// matches any characters (`registry.example.com/*`, `quay.io/interconnectedcloud/qdrouterd:*`).
    /// Repeat or comma-separate. Empty: any image.
    #[arg(long, env = "QDR_WEBHOOK_ALLOWED_ROUTER_IMAGES", value_delimiter = ',', value_parser = qdr_api::ImagePattern::parse)]
    allowed_router_images: Vec<qdr_api::ImagePattern>,

    /// Reviews of bodies up to 256 KiB checked at once (Secret reference checks included);
    /// more wait in line, served round-robin by peer address, until one finishes or their
    /// deadline answers them 408.
    #[arg(long, env = "QDR_WEBHOOK_MAX_IN_FLIGHT", default_value_t = qdr_webhook::server::MAX_IN_FLIGHT,
          value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..=1024), |n| n as usize))]
    max_in_flight: usize,

    /// Reviews of larger bodies (up to 3 MiB) checked at once, in a line of their own; each
    /// takes its body plus its decoded spec in memory.
    #[arg(long, env = "QDR_WEBHOOK_MAX_LARGE_IN_FLIGHT", default_value_t = qdr_webhook::server::MAX_LARGE_IN_FLIGHT,
          value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..=64), |n| n as usize))]
    max_large_in_flight: usize,

    /// PEM file of CAs whose client certificates the admission port requires (the API
    /// server's webhook client certificate, configured in its AdmissionConfiguration).
    /// Absent: clients are not authenticated (see docs/hardening.md).
    #[arg(long, env = "QDR_WEBHOOK_CLIENT_CA")]
    client_ca: Option<PathBuf>,

    /// Log format.
    #[arg(long, env = "QDR_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// `User-Agent` of every request to the API server (audit logs, request metrics).
const USER_AGENT: &str = concat!("qdr-webhook/", env!("CARGO_PKG_VERSION"));

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    qdr_startup::print_flags_reference_if_asked(<Args as clap::CommandFactory>::command());
    let args = Args::parse();
    qdr_startup::init(args.log_format);
    qdr_startup::bound_allocator(2);

    let resolver = CertResolver::new();
    let client_cas = match &args.client_ca {
        None => None,
        Some(path) => Some(client_roots(path)?),
    };
    let client = if args.authorize_secret_references || args.tls_mode == TlsMode::Secret {
        let why = if args.tls_mode == TlsMode::Secret {
            "secret mode keeps its certificate in a Secret"
        } else {
            "--authorize-secret-references asks the API server what an Interconnect's author may read \
             (pass --authorize-secret-references=false to run without API access)"
        };
        Some(qdr_startup::client(USER_AGENT).await.map_err(|e| format!("no API access ({why}): {e}"))?)
    } else {
        None
    };
    let (readiness, expiry): (Box<dyn Fn() -> Result<(), String> + Send + Sync>, _) = match args.tls_mode {
        TlsMode::Files => {
            let dir = args.tls_dir.clone().expect("clap requires --tls-dir in files mode");
            tokio::spawn(qdr_certs::serving::watch_files(dir, resolver.clone(), args.tls_reload_interval));
            let r = resolver.clone();
            (
                Box::new(move || r.cert_pem().map(|_| ()).ok_or_else(|| "no certificate loaded".to_string())),
                resolver.clone(),
            )
        }
        TlsMode::Secret => {
            let client = client.clone().expect("a client is made in secret mode");
            let svc = &args.service_name;
            let ns = &args.namespace;
            let mut sans = vec![format!("{svc}.{ns}.svc"), format!("{svc}.{ns}"), svc.clone()];
            sans.extend(args.extra_san.iter().cloned());
            let policy = Policy {
                ca_lifetime: args.ca_lifetime,
                leaf_lifetime: args.cert_lifetime,
                soak: args.ca_soak,
                retire_grace: args.ca_retire_grace,
                ..Policy::new(format!("{svc}-ca"), sans)
            };
            let mut targets = Vec::new();
            if !args.validating_config.is_empty() {
                targets.push(WebhookConfiguration::Validating(args.validating_config.clone()));
            }
            if !args.mutating_config.is_empty() {
                targets.push(WebhookConfiguration::Mutating(args.mutating_config.clone()));
            }
            let manager =
                Arc::new(CertManager::new(client, ns, &args.secret_name, policy, targets, resolver.clone()));
            tokio::spawn(manager.clone().run(args.check_interval));
            let m = manager.clone();
            (Box::new(move || m.serving_trusted().map_err(|e| e.to_string())), resolver.clone())
        }
    };
    let authorizer = match (&client, args.authorize_secret_references) {
        (Some(c), true) => Some(Authorizer::new(
            c.clone(),
            qdr_webhook::authorize::DecisionCache::new(
                args.authorization_cache_allowed_ttl,
                args.authorization_cache_denied_ttl,
                qdr_webhook::authorize::CACHE_CAPACITY,
            ),
        )),
        _ => None,
    };
    // The scan's limits come from the CRD: read them now, not in the first review.
    let limits = *qdr_webhook::decode::LIMITS;
    tracing::info!(
        authorize_secret_references = authorizer.is_some(),
        allowed_router_images = ?args.allowed_router_images.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        max_in_flight = args.max_in_flight,
        max_large_in_flight = args.max_large_in_flight,
        scan_max_items = limits.items,
        scan_max_string = limits.string,
        client_ca = ?args.client_ca,
        "admission checks"
    );
    let state = Arc::new(AppState {
        metrics: Metrics::default(),
        checks: Checks {
            images: qdr_api::ImagePolicy::only(args.allowed_router_images.clone()),
            authorize_references: authorizer.is_some(),
        },
        authorizer,
        reader: client.clone(),
        lanes: Lanes::new(args.max_in_flight, args.max_large_in_flight),
        readiness,
        expiry: Box::new(move || expiry.not_after()),
        draining: Default::default(),
    });

    let health = tokio::net::TcpListener::bind(args.health_listen).await?;
    tracing::info!(addr = %health.local_addr()?, "health and metrics listening");
    let health_app = health_router(state.clone());
    tokio::spawn(async move { axum::serve(health, health_app).await });

    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(
        resolver.server_config_with(client_cas)?,
    ));
    let handle = axum_server::Handle::new();
    let timeouts = Timeouts {
        handshake: args.handshake_timeout,
        header_read: args.header_read_timeout,
        request: args.request_timeout,
        idle: args.idle_timeout,
    };
    let app = admission_router(state.clone(), timeouts.request);
    let acceptor = CountingAcceptor::new(tls, timeouts, state.clone());
    let mut server = axum_server::bind(args.listen).acceptor(acceptor).handle(handle.clone());
    timeouts.configure(server.http_builder());
    // The peer's address is its flow in the review lanes.
    let server = server.serve(app.into_make_service_with_connect_info::<std::net::SocketAddr>());
    tracing::info!(addr = %args.listen, mode = ?args.tls_mode, ?timeouts, "admission webhook listening");

    let shutdown = {
        let state = state.clone();
        let delay = args.shutdown_delay;
        async move {
            qdr_startup::shutdown_signal().await;
            tracing::info!(?delay, "shutting down: not ready, still serving");
            state.draining.store(true, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            handle.graceful_shutdown(Some(Duration::from_secs(10)));
        }
    };
    tokio::spawn(shutdown);
    server.await?;
    tracing::info!("stopped");
    Ok(())
}

/// The CAs of `--client-ca`. Errors: the file cannot be read or holds no CA certificate.
fn client_roots(path: &std::path::Path) -> Result<rustls::RootCertStore, Box<dyn std::error::Error>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|e| format!("reading --client-ca {}: {e}", path.display()))?;
    let certs: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--client-ca {}: {e}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("--client-ca {} holds no CA certificate", path.display()).into());
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authorization_cache_defaults_are_the_documented_ones() {
        let args = Args::try_parse_from(["qdr-webhook"]).unwrap();
        assert_eq!(args.authorization_cache_allowed_ttl, qdr_webhook::authorize::ALLOWED_TTL);
        assert_eq!(args.authorization_cache_denied_ttl, qdr_webhook::authorize::DENIED_TTL);
    }
}
