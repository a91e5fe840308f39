//! `make bench` in its smoke mode (`QDR_BENCH_SMOKE=1`, `tests/src/bin/qdr-bench/main.rs`):
//! every group of the benchmark once, at a small scale, on the dev-profile binaries built
//! beside it, so that none of its code rots between benchmark runs. It asserts that each
//! group printed its rows with a figure, not what the figures are: timings here belong to a
//! loaded 2-core machine running debug builds. Its real-node groups start the real node
//! (`qdr_tests::real_node`), so this runs in the real node's lane.

use std::process::Command;

#[test]
fn every_benchmark_group_runs_and_prints_its_rows() {
    let exe = env!("CARGO_BIN_EXE_qdr-bench");
    // Another test's router stand-in on the routers' management port at its own loopback
    // address, as lane A's controller tests hold theirs (`controller/tests/common::router_at`)
    // while this lane runs: the benchmark must not need the port at every address.
    let _another_test = std::net::TcpListener::bind(("127.9.0.1", 55670))
        .expect("127.9.0.1:55670 is free (no test but this one listens there)");
    let started = std::time::Instant::now();
    let out = Command::new(exe)
        .env("QDR_BENCH_SMOKE", "1")
        .env_remove("QDR_BENCH_ONLY")
        .output()
        .expect("qdr-bench runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let tail: String =
        stderr.lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success(),
        "qdr-bench failed ({}):\n{stdout}\nstderr (last lines):\n{tail}",
        out.status
    );
    eprintln!("the smoke run took {:.0} s", started.elapsed().as_secs_f64());

    // One row each group prints, and the machine's plain-client lines.
    for want in [
        "| defaults + validate, small (3-router example) |",
        "webhook /mutate ÷ the null webhook, requests per CPU-second |",
        "| create through the API server,",
        "| controller: 20 Interconnects created at once, all converged |",
        "| controller peak RSS, 5 Interconnects alone |",
        "| live change (an address) on 3 real routers",
        "| mesh at scale: 20 Interconnects × 3 routers (stand-ins)",
        "| a router pod deleted → MeshConnected 3/3 linked again",
        "| mesh reads at rest, 1 Interconnect of 3 real routers",
        "| router holding 50 idle client connections: resident memory |",
        "This machine: a plain HTTPS client",
        "This machine: a plain client writes",
    ] {
        assert!(stdout.contains(want), "no line with {want:?} in:\n{stdout}");
    }
    // The table says what it is: a smoke run's figures are not a benchmark's.
    assert!(stdout.contains("qdr-operator benchmarks (SMOKE MODE"), "no smoke header in:\n{stdout}");
    let links = stdout.lines().filter(|l| l.to_lowercase().contains("token applied")).count();
    assert!(links > 0, "no row of the links group in:\n{stdout}");

    // Every row has a median, and every median is a number (∞: a phase the short smoke
    // windows do not reach).
    let rows: Vec<&str> =
        stdout.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| benchmark")).collect();
    assert!(rows.len() >= 60, "{} rows:\n{stdout}", rows.len());
    for row in rows {
        let median = row.split(" | ").nth(1).unwrap_or_default().trim();
        assert!(
            median == "inf" || median.parse::<f64>().is_ok_and(f64::is_finite),
            "a row without a figure: {row}"
        );
    }
}
