//! `make run` end to end (`local-run --once`): the whole system starts on a local control
//! plane with 3 simulated nodes, admits and reconciles the examples until each is Ready with
//! its routers on the nodes, and rejects the invalid one listing every cause.

#[test]
fn local_run_brings_up_the_whole_system_on_the_examples() {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_local-run"));
    let bin_dir = exe.parent().unwrap().to_path_buf();
    if !bin_dir.join("qdr-webhook").is_file() || !bin_dir.join("qdr-controller").is_file() {
        // `cargo test --workspace` builds them for their own integration tests.
        panic!("qdr-webhook and qdr-controller must be built next to local-run: run `cargo build --bins`");
    }
    let (stdout, stderr) = local_run(&["--bin-dir", &bin_dir.display().to_string()]);
    for want in [
        "interconnect.interconnectedcloud.github.io/router-mesh created",
        "deployment.apps/router-mesh",
        "daemonset.apps/edge-routers",
        "secret/router-mesh-inter-router-credentials",
        "qdr-operator-controller",
        "interconnect.interconnectedcloud.github.io/router-mesh condition met",
        "interconnect.interconnectedcloud.github.io/edge-routers condition met",
        "interconnect.interconnectedcloud.github.io/secure-router condition met",
    ] {
        assert!(stdout.contains(want), "{want} missing:\n{stdout}");
    }
    // One edge router per node (DaemonSet), every router pod Running on a simulated node.
    let pods: Vec<&str> = stdout.lines().filter(|l| l.contains(" Running ")).collect();
    let edge_nodes: std::collections::BTreeSet<&str> = pods
        .iter()
        .filter(|l| l.starts_with("edge-routers-"))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("node-")))
        .collect();
    assert_eq!(edge_nodes.len(), 3, "one edge router on each of 3 nodes:\n{stdout}");
    assert_eq!(pods.len(), 3 + 3 + 2, "3 mesh + 3 edge + 2 TLS routers Running:\n{stdout}");
    for cause in [
        "spec.deploymentPlan.placement: Unsupported value",
        "spec.interRouterListeners: Forbidden",
        "spec.listeners[1].port: Duplicate value",
    ] {
        assert!(stderr.contains(cause), "rejection lacks {cause}:\n{stderr}");
    }
}

/// `make run-real` end to end (`local-run --real --once`): the operator installed from
/// `deploy/` runs as pods on the real node, admits (through its Service) and reconciles the
/// examples until each is Ready with real routers on the real node; the mesh's routers see
/// each other and carry messages.
#[test]
fn local_run_real_runs_the_operator_and_the_routers_on_the_real_node() {
    let (stdout, stderr) = local_run(&["--real"]);
    for want in [
        "deployment.apps/qdr-webhook condition met",
        "deployment.apps/qdr-controller condition met",
        "the API server calls the webhook through Service qdr-operator/qdr-webhook",
        "deployment \"qdr-controller\" successfully rolled out",
        "interconnect.interconnectedcloud.github.io/router-mesh condition met",
        "interconnect.interconnectedcloud.github.io/edge-routers condition met",
        "interconnect.interconnectedcloud.github.io/secure-router condition met",
        "Routers in the Network",
        "  hello-0\n  hello-1\n  hello-2\n",
        "router-mesh:45672",
        "  edge-0\n  edge-1\n  edge-2\n",
    ] {
        assert!(stdout.contains(want), "{want} missing:\n{stdout}\n{stderr}");
    }
    // The operator's four pods and every router Running on the real node.
    let operator: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("qdr-webhook-") || l.starts_with("qdr-controller-"))
        .filter(|l| l.contains(" Running "))
        .collect();
    assert!(operator.len() >= 4, "{stdout}");
    assert!(operator.iter().all(|l| l.contains(" real-0 ")), "{operator:?}");
    let routers: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            ["edge-routers-", "router-mesh-", "secure-router-"].iter().any(|p| l.starts_with(p))
                && l.contains(" Running ")
                && l.contains(" 1/1 ")
        })
        .collect();
    // router-mesh 3, edge-routers one per node, secure-router scaled to one per node.
    assert_eq!(routers.len(), 3 + 1 + 1, "{stdout}");
    assert!(routers.iter().all(|l| l.contains(" real-0 ")), "{routers:?}");
    // Each of the mesh's routers lists all three.
    let tables = stdout.split("-- qdstat -n").skip(1).collect::<Vec<_>>();
    assert_eq!(tables.len(), 3, "{stdout}");
    let mesh: Vec<&str> = routers
        .iter()
        .filter(|l| l.starts_with("router-mesh-"))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    for t in tables {
        let table = t.split("\n$ ").next().unwrap();
        assert!(mesh.iter().all(|m| table.contains(m)), "{mesh:?} not all in\n{table}");
    }
}

/// Runs `local-run --once <args>` with a state directory of its own; returns stdout and
/// stderr once it succeeded.
#[track_caller]
fn local_run(args: &[&str]) -> (String, String) {
    let state = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_local-run"))
        .arg("--once")
        .args(args)
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}
