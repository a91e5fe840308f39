//! Files mode (certificates managed by cert-manager or similar): the webhook serves
//! `tls.crt`/`tls.key` from a directory and reloads them when they change, including the
//! kubelet's atomic `..data` symlink swap of a mounted Secret, with no restart.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn write_kubelet_style(dir: &Path, generation: u32, cert: &str, key: &str) {
    // <dir>/..data -> ..<generation>/ ; tls.crt -> ..data/tls.crt (what the kubelet does).
    let data = dir.join(format!("..{generation}"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tls.crt"), cert).unwrap();
    std::fs::write(data.join("tls.key"), key).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..{generation}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        if std::fs::symlink_metadata(dir.join(f)).is_err() {
            std::os::unix::fs::symlink(format!("..data/{f}"), dir.join(f)).unwrap();
        }
    }
}

#[tokio::test]
async fn files_mode_serves_the_directory_and_reloads_on_change() {
    let cp = qdr_tests::shared().await;
    let dir = tempfile::tempdir().unwrap();
    let first = cp.issue_serving_cert(&["127.0.0.1", "first.example"]).unwrap();
    let second = cp.issue_serving_cert(&["127.0.0.1", "second.example"]).unwrap();
    write_kubelet_style(dir.path(), 1, &first.cert_pem, &first.key_pem);

    // The reload interval the webhook is started with; every wait below derives from it.
    let interval = Duration::from_millis(500);
    let (port, health) = (common::free_port(), common::free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qdr-webhook"));
    cmd.args([
        "--tls-mode=files",
        &format!("--tls-dir={}", dir.path().display()),
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--health-listen=127.0.0.1:{health}"),
        "--shutdown-delay=0s",
        &format!("--tls-reload-interval={}ms", interval.as_millis()),
        // Files mode with no API access at all, as the chart's cert-manager mode without the
        // Secret reference checks.
        "--authorize-secret-references=false",
    ]);
    let p = qdr_tests::Process::spawn("qdr-webhook-files", cmd, &cp.dir().join("webhook-files.log")).unwrap();
    let tls = common::see_any_cert();
    let wait_for = |want: &str| {
        let want = qdr_certs::pki::first_der(want).unwrap();
        let deadline = Instant::now() + 20 * interval;
        loop {
            if common::served_leaf(port, &tls).as_ref() == Some(&want) {
                return Instant::now();
            }
            assert!(p.exited().is_none(), "webhook exited:\n{}", p.log_tail(30));
            assert!(Instant::now() < deadline, "certificate not served:\n{}", p.log_tail(30));
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(&first.cert_pem);
    assert_eq!(common::http_get(health, "/readyz").unwrap().0, 200);

    let swapped = Instant::now();
    write_kubelet_style(dir.path(), 2, &second.cert_pem, &second.key_pem);
    let served = wait_for(&second.cert_pem);
    eprintln!(
        "files mode: new certificate served {:?} after the symlink swap (reload interval {interval:?})",
        served - swapped
    );
    // One interval to notice, plus slack for a loaded machine.
    assert!(served - swapped < 4 * interval, "{:?}", served - swapped);
    assert!(p.exited().is_none(), "reloaded without a restart");

    // A broken pair is ignored: once the webhook has seen it, the last good certificate stays.
    write_kubelet_style(dir.path(), 3, "garbage", "garbage");
    let deadline = Instant::now() + 20 * interval;
    while !p.log_tail(20).contains("keeping the previous certificate") {
        assert!(Instant::now() < deadline, "the broken pair was never read:\n{}", p.log_tail(30));
        std::thread::sleep(interval / 5);
    }
    assert_eq!(common::served_leaf(port, &tls), Some(qdr_certs::pki::first_der(&second.cert_pem).unwrap()));
}

/// Files mode with the Secret reference checks on (the default) needs API access: without
/// any, the webhook does not start, and says why and how to run without the checks.
#[test]
fn without_api_access_the_reference_checks_say_what_they_need() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qdr-webhook"))
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", home.path())
        .args([
            "--tls-mode=files",
            "--tls-dir=/nonexistent",
            "--listen=127.0.0.1:0",
            "--health-listen=127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started without API access: {err}");
    assert!(err.contains("no API access (--authorize-secret-references asks the API server"), "{err}");
    assert!(err.contains("--authorize-secret-references=false"), "{err}");
}
