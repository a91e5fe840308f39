//! `kubectl-qdr topology -f`: the plugin on an Interconnect read from standard input (the
//! cluster path runs against real routers in `tests/tests/routers/`).

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::json;

fn run(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-qdr"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A plugin that refuses its arguments exits without reading its input: the pipe may be
    // closed before (or while) the input is written.
    match child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.unwrap(),
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn interconnect() -> String {
    json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "leaf", "namespace": "ns"},
        "spec": {"deploymentPlan": {"role": "edge"}},
        "status": {
            "mesh": {"summary": "1/1 uplinked", "interiorsExpected": 0, "interiorsConnected": 0,
                     "edgesExpected": 1, "edgesUplinked": 1},
            "routers": [{"pod": "leaf-0", "id": "leaf-0", "mode": "edge", "reached": 0,
                         "interRouterLinks": 0, "edgeLinks": 1, "uplink": "hub-0"}]
        }
    })
    .to_string()
}

#[test]
fn the_topology_of_an_interconnect_read_from_standard_input() {
    let (ok, out, err) = run(&["topology", "-f", "-"], &interconnect());
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "Interconnect leaf: 1/1 uplinked\n  leaf-0  edge  links 0 inter-router, 1 edge\n    ──> hub-0  edge\n"
    );
    let (ok, out, err) = run(&["topology", "leaf", "-f", "-", "-o", "dot"], &interconnect());
    assert!(ok, "{err}");
    assert!(out.contains("\"leaf-0\" -> \"hub-0\" [label=\"edge\"];"), "{out}");
}

#[test]
fn a_wrong_name_format_or_input_is_an_error() {
    let (ok, _, err) = run(&["topology", "hub", "-f", "-"], &interconnect());
    assert!(!ok && err.contains("the file holds Interconnect Some(\"leaf\"), not \"hub\""), "{err}");
    let (ok, _, err) = run(&["topology", "-f", "-", "-o", "svg"], &interconnect());
    assert!(!ok && err.contains("unknown format \"svg\""), "{err}");
    let (ok, _, err) = run(&["topology", "-f", "-"], "{");
    assert!(!ok && err.starts_with("error: not an Interconnect as JSON"), "{err}");
}
