//! `kubectl-qdr`: a kubectl plugin (`kubectl qdr ...` once it is on the `PATH`) for
//! Interconnects.
//!
//! `kubectl qdr topology NAME [-n NAMESPACE] [-o text|mermaid|dot]` prints the topology of
//! Interconnect `NAME` as its routers reported it to the controller (`status.routers` and
//! `status.mesh`; docs/mesh-status.md), drawn by [`qdr_api::topology::render`]. With
//! `-f FILE` (`-` for standard input) it reads the Interconnect as JSON from there instead
//! of the cluster: `kubectl get ic NAME -o json | kubectl qdr topology -f -`.
//!
//! `kubectl qdr site-config -f TOKEN --dir DIR [--id ID] [--cert-dir PATH] [--listen PORT]`
//! turns a token Secret of an AccessGrant (JSON or YAML, as `kubectl get secret -o yaml`
//! prints it) into what a qdrouterd outside Kubernetes needs to link with it
//! ([`qdr_api::links::site::site_config`]): `DIR/qdrouterd.json` and the token's `ca.crt`,
//! `tls.crt` and `tls.key` (mode 0600); run `qdrouterd -c DIR/qdrouterd.json`. The token is
//! checked as the webhook checks it (an expired one is refused).
//!
//! Exit status: 0, or 1 with the error on standard error (the object cannot be read or
//! parsed).

use std::io::Read as _;

use clap::{Parser, Subcommand};
use kube::api::Api;
use qdr_api::Interconnect;
use qdr_api::topology::{Format, render};

#[derive(Parser)]
#[command(
    name = "kubectl-qdr",
    version,
    about = "Look at Interconnects (qdr-operator) as their routers see them, and link sites outside Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print an Interconnect's routers and links, as text, Mermaid or Graphviz DOT.
    Topology {
        /// The Interconnect's name (with -f: only checked against the file's, when given).
        name: Option<String>,
        /// Its namespace (default: the kubeconfig context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format: text, mermaid or dot.
        #[arg(short, long, default_value = "text")]
        output: Format,
        /// Read the Interconnect as JSON from this file (`-`: standard input) instead of
        /// the cluster.
        #[arg(short, long)]
        file: Option<String>,
    },
    /// Write the configuration and certificate files of a qdrouterd outside Kubernetes that
    /// links with an AccessGrant's token.
    SiteConfig {
        /// The token Secret, JSON or YAML (`-`: standard input).
        #[arg(short, long)]
        file: String,
        /// Where to write qdrouterd.json, ca.crt, tls.crt and tls.key.
        #[arg(long)]
        dir: String,
        /// The router id (default `<site>-site`): unique in the whole network.
        #[arg(long)]
        id: Option<String>,
        /// Where the certificate files are on the machine that runs the router (default:
        /// `--dir`, made absolute).
        #[arg(long)]
        cert_dir: Option<String>,
        /// Port of a plain AMQP listener for clients (0: none).
        #[arg(long, default_value_t = 5672)]
        listen: u16,
    },
}

fn read_file(path: &str) -> Result<String, String> {
    let mut text = String::new();
    if path == "-" {
        std::io::stdin().read_to_string(&mut text).map_err(|e| format!("reading standard input: {e}"))?;
    } else {
        text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    }
    Ok(text)
}

/// `site-config`: the token read and checked, then the files written.
fn site_config(
    file: &str,
    dir: &str,
    id: Option<String>,
    cert_dir: Option<String>,
    listen: u16,
) -> Result<String, String> {
    use qdr_api::links::token::{CA_KEY, CERT_KEY, KEY_KEY, read_token};
    let text = read_file(file)?;
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_saphyr::from_str(&text).map_err(|e| format!("not a Secret as JSON or YAML: {e}"))?;
    let token = read_token(&secret, k8s_openapi::jiff::Timestamp::now()).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!("the token is not usable:\n  {}", lines.join("\n  "))
    })?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {dir}: {e}"))?;
    let abs = std::fs::canonicalize(dir).map_err(|e| format!("{dir}: {e}"))?;
    let options = qdr_api::links::site::SiteOptions {
        id: id.unwrap_or_else(|| format!("{}-site", token.site)),
        cert_dir: cert_dir.unwrap_or_else(|| abs.display().to_string()),
        listen: (listen != 0).then_some(listen),
    };
    let data = secret.data.unwrap_or_default();
    for key in [CA_KEY, CERT_KEY, KEY_KEY] {
        let path = abs.join(key);
        std::fs::write(&path, &data[key].0).map_err(|e| format!("writing {}: {e}", path.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        let mode = if key == KEY_KEY { 0o600 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let config = abs.join("qdrouterd.json");
    std::fs::write(&config, qdr_api::links::site::site_config(&token, &options))
        .map_err(|e| format!("writing {}: {e}", config.display()))?;
    Ok(format!(
        "wrote {} and the token's certificates for site {} ({} link to {}:{}); run: qdrouterd -c {}\n",
        config.display(),
        token.site,
        token.role,
        token.endpoints[0].0,
        token.endpoints[0].1,
        config.display()
    ))
}

async fn run(cli: Cli) -> Result<String, String> {
    let (name, namespace, output, file) = match cli.command {
        Command::Topology { name, namespace, output, file } => (name, namespace, output, file),
        Command::SiteConfig { file, dir, id, cert_dir, listen } => {
            return site_config(&file, &dir, id, cert_dir, listen);
        }
    };
    let ic: Interconnect = match file {
        Some(path) => {
            let text = read_file(&path)?;
            let ic: Interconnect =
                serde_json::from_str(&text).map_err(|e| format!("not an Interconnect as JSON: {e}"))?;
            if let Some(n) = &name
                && ic.metadata.name.as_ref() != Some(n)
            {
                return Err(format!("the file holds Interconnect {:?}, not {n:?}", ic.metadata.name));
            }
            ic
        }
        None => {
            let name = name.ok_or("name the Interconnect (or give -f FILE)")?;
            let client =
                kube::Client::try_default().await.map_err(|e| format!("connecting to the cluster: {e}"))?;
            let ns = namespace.unwrap_or_else(|| client.default_namespace().to_string());
            let api: Api<Interconnect> = Api::namespaced(client, &ns);
            api.get(&name).await.map_err(|e| format!("reading Interconnect {ns}/{name}: {e}"))?
        }
    };
    let name = ic.metadata.name.clone().unwrap_or_default();
    Ok(render(&name, &ic.status.unwrap_or_default(), output))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match run(Cli::parse()).await {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
