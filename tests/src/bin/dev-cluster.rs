//! Runs the local control plane (with kube-controller-manager, kube-scheduler, kwok and 3
//! simulated nodes unless told otherwise; `--real-node` adds the real node `real-0`, see
//! `qdr_tests::real_node`) in the foreground until Ctrl-C.
//!
//! State (PKI, etcd data, logs, kubeconfig) lives in `target/dev-cluster/` unless
//! `--dir` says otherwise. Prints the kubeconfig path and example kubectl commands.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut dir = qdr_tests::workspace_root().join("target/dev-cluster");
    let mut kcm = true;
    let mut nodes = 3;
    let mut real_nodes = 0;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = PathBuf::from(args.next().ok_or("--dir needs a path")?),
            "--no-controller-manager" => {
                kcm = false;
                nodes = 0;
            }
            "--real-node" => real_nodes = 1,
            "--nodes" => nodes = args.next().ok_or("--nodes needs a number")?.parse()?,
            "-h" | "--help" => {
                println!(
                    "usage: dev-cluster [--dir DIR] [--nodes N (default 3)] [--real-node] \
                     [--no-controller-manager (and no nodes)]"
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?} (see --help)").into()),
        }
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let opts = qdr_tests::Options {
            state_dir: Some(dir),
            controller_manager: kcm,
            nodes,
            audit: false,
            webhook_client_cert: false,
            real_nodes,
        };
        let cp = qdr_tests::ControlPlane::start(opts).await?;
        let kc = cp.kubeconfig().display().to_string();
        let kubectl = qdr_tests::Testbin::locate()?.path("kubectl").display().to_string();
        println!("control plane ready in {:.1?} at {}", cp.startup, cp.server());
        if let Some(real) = cp.real_node() {
            println!(
                "real node:  {} Ready {:.1?} after containerd started",
                qdr_tests::real_node::NODE,
                real.startup
            );
        }
        println!("logs:       {}", cp.dir().display());
        println!("kubeconfig: {kc}");
        println!("try:        {kubectl} --kubeconfig {kc} get ns");
        println!("Ctrl-C stops it.");
        tokio::signal::ctrl_c().await?;
        println!("stopping");
        cp.stop();
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
