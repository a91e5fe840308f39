//! `make bench`: every benchmark of the project, one table with the figures and the targets.
//! Each figure is the median of several runs (`QDR_BENCH_RUNS`, default 3) with min and max.
//! Absolute figures on a shared 2-core machine are noisy: the load generator, the webhook,
//! the API server and etcd all share the same cores.
//!
//! One module per measured thing, each adding its rows: [`pure`] (library calls),
//! [`admission`] (the webhook alone), [`api_server`] (admission through the API server),
//! [`convergence`] and [`memory`] (the controller), [`day_two`] (real routers with traffic),
//! [`live`] (changes written into running routers), [`mesh`] and [`mesh_scale`] (reading
//! the routers), [`links`] (links across clusters), [`sizing`] (what one router costs);
//! `QDR_BENCH_ONLY` picks one. Beside
//! them [`table`] (the one printer), [`measure`] (reading figures) and [`fixtures`] (what is
//! sent).
//!
//! `QDR_BENCH_SMOKE=1` is the smoke mode `make test` runs (`tests/tests/bench_smoke.rs`):
//! every group once, at a small scale and over short windows ([`scaled`]), so that none of
//! the benchmark's code rots; its figures are not worth comparing. The day-two group is left
//! out there: its scenario is `tests/tests/day_two.rs`'s, which `make test` runs anyway.

use std::path::PathBuf;

use qdr_tests::{ControlPlane, Options};

mod admission;
mod api_server;
mod convergence;
mod day_two;
mod fixtures;
mod links;
mod live;
mod measure;
mod memory;
mod mesh;
mod mesh_scale;
mod phases;
mod pure;
mod sizing;
mod table;

/// Whether this is the smoke mode (`QDR_BENCH_SMOKE` set and not `0`).
pub(crate) fn smoke() -> bool {
    std::env::var("QDR_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `full` in a benchmark, `small` in the smoke mode ([`smoke`]): a scale, a count or a window.
pub(crate) fn scaled<T>(full: T, small: T) -> T {
    if smoke() { small } else { full }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runs: usize = std::env::var("QDR_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    let runs = scaled(runs, 1);
    // The release binaries `make bench` builds beside this one.
    let bin_dir = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(qdr_tests::images::bin_dir);
    let mut rows = Vec::new();

    pure::pure_rows(&mut rows, runs);

    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let only = std::env::var("QDR_BENCH_ONLY").unwrap_or_default();
        if only.is_empty() || only == "webhook" {
            admission::webhook_rows(&mut rows, runs, &bin_dir).await?;
        }
        if only == "webhook" {
            return Ok(());
        }
        let cp: &'static ControlPlane = Box::leak(Box::new(
            ControlPlane::start(Options {
                state_dir: None,
                controller_manager: false,
                nodes: 0,
                audit: true,
                webhook_client_cert: false,
                real_nodes: 0,
            })
            .await?,
        ));
        cp.install_crd().await;
        if only.is_empty() || only == "apiserver" {
            api_server::api_server_rows(&mut rows, runs, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "controller" {
            convergence::convergence_rows(&mut rows, runs, &bin_dir, cp).await?;
        }
        if only == "controller-2000" {
            convergence::big_convergence_rows(&mut rows, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "unrelated" {
            memory::unrelated_rows(&mut rows, &bin_dir, cp).await?;
        }
        if (only.is_empty() && !smoke()) || only == "day-two" {
            day_two::day_two_rows(&mut rows).await?;
        }
        if only.is_empty() || only == "live" {
            live::live_rows(&mut rows).await?;
        }
        if only.is_empty() || only == "mesh-2000" {
            mesh_scale::mesh_scale_rows(&mut rows, &bin_dir, cp).await?;
        }
        if only.is_empty() || only == "mesh" {
            mesh::mesh_rows(&mut rows, runs).await?;
        }
        if only.is_empty() || only == "links" {
            links::links_rows(&mut rows, runs).await?;
        }
        if only.is_empty() || only == "sizing" {
            sizing::sizing_rows(&mut rows).await?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;

    table::print(&rows, runs);
    Ok(())
}
