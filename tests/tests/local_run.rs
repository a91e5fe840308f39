//! `make run` end to end (`local-run --once`): the whole system starts on a local control
//! plane, admits and reconciles the examples, and rejects the invalid one listing every cause.

#[test]
fn local_run_brings_up_the_whole_system_on_the_examples() {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_local-run"));
    let bin_dir = exe.parent().unwrap().to_path_buf();
    if !bin_dir.join("qdr-webhook").is_file() || !bin_dir.join("qdr-controller").is_file() {
        // `cargo test --workspace` builds them for their own integration tests.
        panic!("qdr-webhook and qdr-controller must be built next to local-run: run `cargo build --bins`");
    }
    let state = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&exe)
        .args(["--once", "--bin-dir"])
        .arg(&bin_dir)
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for want in [
        "interconnect.interconnectedcloud.github.io/router-mesh created",
        "deployment.apps/router-mesh",
        "daemonset.apps/edge-routers",
        "secret/router-mesh-inter-router-credentials",
        "qdr-operator-controller",
    ] {
        assert!(stdout.contains(want), "{want} missing:\n{stdout}");
    }
    for cause in [
        "spec.deploymentPlan.placement: Unsupported value",
        "spec.interRouterListeners: Forbidden",
        "spec.listeners[1].port: Duplicate value",
    ] {
        assert!(stderr.contains(cause), "rejection lacks {cause}:\n{stderr}");
    }
}
