//! What `qdr-controller` and `qdr-webhook` do first, in one place: logging in the chosen
//! [`LogFormat`], the process-wide rustls crypto provider (ring, the only one in the
//! dependency graph), a Kubernetes client whose requests carry the program's `User-Agent`
//! (so audit logs and the API server's request metrics name it), the signal that starts
//! a graceful shutdown, and the bounds of glibc's allocator ([`bound_allocator`]).

/// How log lines are written to standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Starts logging in `format`, filtered by `RUST_LOG` (default `info`), and installs ring
/// as the process's rustls crypto provider. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    match format {
        LogFormat::Json => tracing_subscriber::fmt().json().with_env_filter(filter).init(),
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
    }
    // An error means a provider is installed already: that one stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for the cluster `kube::Config::infer` finds (in-cluster ServiceAccount, or
/// `KUBECONFIG`), sending `user_agent` (such as `qdr-controller/0.5.0`) on every request.
///
/// # Errors
/// When no configuration can be inferred or the client cannot be built from it.
pub async fn client(user_agent: &'static str) -> Result<kube::Client, Box<dyn std::error::Error>> {
    Ok(kube::Client::try_from(config(user_agent).await?)?)
}

/// The configuration [`client`] uses (in-cluster or kubeconfig, with `user_agent`), for a
/// binary that builds more than one client from it.
///
/// # Errors
/// When no configuration can be found.
pub async fn config(user_agent: &'static str) -> Result<kube::Config, Box<dyn std::error::Error>> {
    let mut config = kube::Config::infer().await?;
    config.headers.push((http::header::USER_AGENT, http::HeaderValue::from_static(user_agent)));
    Ok(config)
}

/// Resolves at the first SIGTERM (what the kubelet sends) or Ctrl-C.
///
/// # Panics
/// When the SIGTERM handler cannot be installed (no signal support: not on Linux).
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// With glibc's allocator: at most two arenas, and every allocation of 128 KiB or more
/// (bodies, decoded specs, watch lists) mapped on its own and given back when freed. Call
/// first thing in `main`, before any thread starts.
///
/// By default glibc gives each thread that allocates its own arena (up to eight per core)
/// and raises that threshold as large blocks are freed, so a peak on any runtime thread
/// stays resident in its arena. Measured: the webhook under `webhook/tests/flood.rs` peaked
/// at 225 MiB without these settings and 83 MiB with them; the controller converging 2,000
/// Interconnects (`make bench`) peaks at about 175 MiB with them. The published images run
/// these glibc binaries (deploy/docker), so the figures hold for them.
#[allow(unsafe_code)]
pub fn bound_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters and is thread-safe (glibc documents it
    // MT-Safe); it takes no pointers.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}
