//! The controller refuses an API server older than the oldest it supports
//! (`qdr_controller::server_version`), at start and saying why, instead of failing every
//! reconcile: here against a stand-in API server that answers `/version` as Kubernetes
//! v1.22 would (no control plane of that age can be built here), and nothing else. Lease
//! timings out of order are refused the same way, before any API server is asked.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn an_api_server_older_than_1_33_stops_the_controller_with_a_clear_message() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/version",
        axum::routing::get(|| async {
            axum::Json(serde_json::json!({"major": "1", "minor": "22", "gitVersion": "v1.22.17",
                "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "go1.16", "compiler": "gc",
                "platform": "linux/amd64"}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut f = std::fs::File::create(&kubeconfig).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters: [{{name: old, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n\
         users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: old, user: u}}}}]\ncurrent-context: c\n"
    )
    .unwrap();
    let health = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_qdr-controller"))
        .env("KUBECONFIG", &kubeconfig)
        .env("NO_PROXY", "127.0.0.1")
        .args([
            "--lease-namespace=old",
            "--retry-period=200ms",
            &format!("--health-listen=127.0.0.1:{health}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the controller kept running against Kubernetes v1.22");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("the API server is Kubernetes v1.22.17 (1.22); qdr-controller needs 1.33 or newer"),
        "{text}"
    );
}

/// `--retry-period` not shorter than `--renew-deadline`, or `--renew-deadline` not shorter
/// than `--lease-duration`: the controller exits at once (usage error, code 2) naming the
/// flags, instead of panicking or leading with no renew before its deadline.
#[test]
fn lease_timings_out_of_order_stop_the_controller_naming_the_flags() {
    for (args, names) in [
        (
            ["--lease-duration=15s", "--renew-deadline=15s", "--retry-period=2s"],
            ["--renew-deadline", "--lease-duration"],
        ),
        (
            ["--lease-duration=15s", "--renew-deadline=3s", "--retry-period=3s"],
            ["--retry-period", "--renew-deadline"],
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_qdr-controller"))
            .env("KUBECONFIG", "/nonexistent")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(names.iter().all(|n| stderr.contains(n)), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
