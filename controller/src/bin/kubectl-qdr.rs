//! `kubectl-qdr`: a kubectl plugin (`kubectl qdr ...` once it is on the `PATH`) for
//! Interconnects.
//!
//! `kubectl qdr topology NAME [-n NAMESPACE] [-o text|mermaid|dot]` prints the topology of
//! Interconnect `NAME` as its routers reported it to the controller (`status.routers` and
//! `status.mesh`; docs/mesh-status.md), drawn by [`qdr_api::topology::render`]. With
//! `-f FILE` (`-` for standard input) it reads the Interconnect as JSON from there instead
//! of the cluster: `kubectl get ic NAME -o json | kubectl qdr topology -f -`.
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
    about = "Look at Interconnects (qdr-operator) as their routers see them"
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
}

async fn run(cli: Cli) -> Result<String, String> {
    let Command::Topology { name, namespace, output, file } = cli.command;
    let ic: Interconnect = match file {
        Some(path) => {
            let mut text = String::new();
            if path == "-" {
                std::io::stdin()
                    .read_to_string(&mut text)
                    .map_err(|e| format!("reading standard input: {e}"))?;
            } else {
                text = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
            }
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
