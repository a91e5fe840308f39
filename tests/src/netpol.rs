//! Probing NetworkPolicies for real: a pod on the real node ([`crate::real_node::NODE`])
//! tries to open TCP connections and says, per port, whether it could
//! ([`reachable`]). Run with the node's policy enforcer on
//! ([`crate::real_node::RealNode::enforce_network_policies`]); without it every port a
//! router listens on is open.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::control_plane::ControlPlane;
use crate::routers::{kubectl, ok};

/// What a probe saw on one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seen {
    /// The connection was accepted.
    Open,
    /// No answer within [`CONNECT_TIMEOUT`]: the SYN was dropped (what a NetworkPolicy
    /// implementation does with a connection no policy admits).
    Dropped,
    /// Refused at once (a RST: nothing listens).
    Refused,
}

/// How long a probe waits for each connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(4);

/// The probe: for each `host:port` argument, one line `<port> open|dropped|refused|error <errno>`.
const SCRIPT: &str = r#"
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(float(TIMEOUT))
    try:
        s.connect((host, int(port)))
        seen = "open"
    except socket.timeout:
        seen = "dropped"
    except ConnectionRefusedError:
        seen = "refused"
    except OSError as e:
        seen = "error %s" % e.errno
    finally:
        s.close()
    print(port, seen, flush=True)
"#;

/// Runs pod `name` in namespace `ns` (which must exist) with labels `labels` and `image`
/// (one with `python3`, such as the router image) on the real node under Pod Security
/// "restricted", has it connect to each port of `ip`, and returns what it saw by port. The
/// pod is deleted afterwards.
///
/// # Panics
/// When the pod cannot be created, does not finish within a minute, or prints what the
/// probe does not.
pub fn reachable(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
    image: &str,
    ip: &str,
    ports: &[i32],
) -> BTreeMap<i32, Seen> {
    let script = SCRIPT.replace("TIMEOUT", &CONNECT_TIMEOUT.as_secs().to_string());
    let targets: Vec<String> = ports.iter().map(|p| format!("{ip}:{p}")).collect();
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": crate::real_node::NODE},
            "tolerations": [{"key": crate::real_node::TAINT.0, "operator": "Exists",
                             "effect": crate::real_node::TAINT.2}],
            "securityContext": {"runAsNonRoot": true, "runAsUser": 10001,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "probe",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", script],
                "args": targets,
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    });
    let created = crate::components::kubectl_stdin(cp, &["apply", "-f", "-"], &pod.to_string());
    assert!(created.status.success(), "probe pod {ns}/{name}: {}", String::from_utf8_lossy(&created.stderr));
    let budget = CONNECT_TIMEOUT.as_secs() * ports.len() as u64 + 60;
    let done = kubectl(
        cp,
        &[
            "wait",
            "--for=jsonpath={.status.phase}=Succeeded",
            &format!("pod/{name}"),
            "-n",
            ns,
            &format!("--timeout={budget}s"),
        ],
    );
    let logs = kubectl(cp, &["logs", name, "-n", ns]);
    let logs = String::from_utf8_lossy(&logs.stdout).to_string();
    assert!(
        done.status.success(),
        "probe pod {ns}/{name} did not finish: {}\n{logs}\n{}",
        String::from_utf8_lossy(&done.stderr),
        ok(kubectl(cp, &["get", "pod", name, "-n", ns, "-o", "yaml"]))
    );
    let _ = kubectl(cp, &["delete", "pod", name, "-n", ns, "--wait=false"]);
    let seen: BTreeMap<i32, Seen> = logs
        .lines()
        .map(|l| {
            let (port, seen) = l.split_once(' ').unwrap_or_else(|| panic!("probe printed {l:?}"));
            let seen = match seen {
                "open" => Seen::Open,
                "dropped" => Seen::Dropped,
                "refused" => Seen::Refused,
                other => panic!("probe {ns}/{name}: port {port}: {other}"),
            };
            (port.parse().unwrap(), seen)
        })
        .collect();
    let mut want = ports.to_vec();
    want.sort_unstable();
    want.dedup();
    assert_eq!(seen.keys().copied().collect::<Vec<_>>(), want, "probe {ns}/{name}: {logs}");
    seen
}
