//! What `qdr-controller` and `qdr-webhook` do first, in one place: logging in the chosen
//! [`LogFormat`], the process-wide rustls crypto provider (ring, the only one in the
//! dependency graph), a Kubernetes client whose requests carry the program's `User-Agent`
//! (so audit logs and the API server's request metrics name it), the signal that starts
//! a graceful shutdown, the bounds of glibc's allocator ([`bound_allocator`]), and the
//! reference of the program's flags ([`flags_reference`], `docs/flags.md`).

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

/// With glibc's allocator: at most `arenas` arenas, and every allocation of 128 KiB or more
/// (bodies, decoded specs, watch lists) mapped on its own and given back when freed. Call
/// first thing in `main`, before any thread starts. The webhook takes 2 (its handlers run
/// on both cores at once under a flood); the controller 1, as what it keeps for long is
/// made on several threads (watches, reconcile workers, the reads' thread) and each arena
/// holds free room of its own between those allocations (at 2,000 read Interconnects its
/// one arena held 64.2 MiB at rest where two held 68.0, at the same CPU; docs/mesh-status.md).
///
/// By default glibc gives each thread that allocates its own arena (up to eight per core)
/// and raises that threshold as large blocks are freed, so a peak on any runtime thread
/// stays resident in its arena. Measured: the webhook under `webhook/tests/flood.rs` peaked
/// at 225 MiB without these settings and 83 MiB with them; the controller converging 2,000
/// Interconnects (`make bench`) peaks at about 175 MiB with them. The published images run
/// these glibc binaries (deploy/docker), so the figures hold for them.
#[allow(unsafe_code)]
pub fn bound_allocator(arenas: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters and is thread-safe (glibc documents it
    // MT-Safe); it takes no pointers.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas.max(1));
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// The argument that makes a program print its [`flags_reference`] and exit, before any
/// other argument is parsed or anything is started (`make flags-reference` and the docs test
/// run it).
pub const FLAGS_REFERENCE_ARG: &str = "--flags-reference";

/// When the program was started with [`FLAGS_REFERENCE_ARG`] alone: prints the
/// [`flags_reference`] of `command` (the program's `clap` command, from
/// `<Args as clap::CommandFactory>::command()`) to standard output and exits 0.
pub fn print_flags_reference_if_asked(command: clap::Command) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() == 1 && args[0] == FLAGS_REFERENCE_ARG {
        print!("{}", flags_reference(&command));
        std::process::exit(0);
    }
}

/// A Markdown table of every option of `command`, in the order the program declares them:
/// the flag, its environment variable, its default, and its help text on one line, with the
/// values it accepts when they are a fixed list. Hidden options, `--help` and `--version` are
/// left out.
pub fn flags_reference(command: &clap::Command) -> String {
    let mut out =
        String::from("| Flag | Environment variable | Default | Description |\n|---|---|---|---|\n");
    for a in command.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        if a.is_hide_set() || long == "help" || long == "version" {
            continue;
        }
        let env = a.get_env().map(|e| format!("`{}`", e.to_string_lossy())).unwrap_or_default();
        let defaults: Vec<String> =
            a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let default = if defaults.is_empty() { String::new() } else { format!("`{}`", defaults.join(",")) };
        let help = a
            .get_long_help()
            .or_else(|| a.get_help())
            .map(|h| qdr_api::docs::table_cell(&h.to_string()))
            .unwrap_or_default();
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        let help = match (values.is_empty(), help.ends_with('.') || help.is_empty()) {
            (true, _) => help,
            (false, true) => format!("{help} One of {}.", values.join(", ")).trim_start().to_string(),
            (false, false) => format!("{help}. One of {}.", values.join(", ")),
        };
        out.push_str(&format!("| `--{long}` | {env} | {default} | {help} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Example {
        /// Where it listens: <host>:<port>, `<literal>`; a | b
        #[arg(long, env = "EXAMPLE_LISTEN", default_value = "0.0.0.0:1")]
        listen: String,
        /// Log format
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
        #[arg(long, hide = true)]
        secret: bool,
    }

    #[test]
    fn the_reference_is_one_row_per_visible_option() {
        let text = flags_reference(&<Example as clap::CommandFactory>::command());
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            rows,
            [
                "| `--listen` | `EXAMPLE_LISTEN` | `0.0.0.0:1` | Where it listens: &lt;host&gt;:&lt;port&gt;, `<literal>`; a \\| b |",
                "| `--log-format` |  | `text` | Log format. One of `text`, `json`. |",
            ]
        );
    }
}
