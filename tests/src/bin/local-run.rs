//! `make run`: the whole system on a local control plane, on real input.
//!
//! Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok with
//! [`NODES`] simulated nodes (state in `target/dev-cluster/`, wiped at start), installs the CRD and the webhook configurations pointing at a locally
//! running `qdr-webhook` (which creates its own CA and injects the caBundle), runs two
//! `qdr-controller` replicas (one leads) — both components as their ServiceAccounts with
//! `deploy/`'s RBAC and `kubectl create token` tokens —applies `deploy/examples/`, then the invalid example
//! to show the rejection, waits with `kubectl wait --for=condition=Ready interconnect --all`
//! until every router is scheduled and Ready, prints what was created and where the pods
//! run, and stays up until Ctrl-C with the kubeconfig and commands to try. With `--once` it
//! exits after printing (used by the tests).
//!
//! With `--real` (`make run-real`) the webhook and the controllers run instead as pods on a
//! real node (`qdr_tests::real_node`: containerd, runc, the kubelet as node `real-0`,
//! kube-proxy), installed exactly as a cluster admin installs them: `kubectl apply -k` of an
//! overlay of `deploy/` that changes only the images (built from the binaries beside it and
//! imported into the node), their pull policy and the placement on `real-0`. The API server
//! then calls the webhook through its Service, and the controller pods elect their leader.
//!
//! The routers: without `--real` they are simulated (kwok marks scheduled pods Running and
//! Ready; no router process runs), so that run proves admission, reconcile, scheduling and
//! status. With `--real` they are real: there are no simulated nodes, the router image built
//! from source (`tools/router-image/build.sh`) is imported into the node, the controller's
//! default router image is set to it (`kubectl set env`), and every router runs on `real-0`.
//! One node holds one AntiAffinity router, so `secure-router` is scaled to 1. Once all are
//! Ready it prints the mesh each router of `router-mesh` sees (`qdstat -n` in the pod) and
//! sends messages from one router to a receiver on another.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use qdr_tests::{ControlPlane, Options, Process};

/// Simulated nodes of the local run.
const NODES: usize = 3;

/// How long `kubectl wait` may take for every Interconnect to be Ready.
const READY_WAIT: &str = "180s";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn http_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = write!(s, "GET {path} HTTP/1.0\r\n\r\n");
    let mut t = String::new();
    let _ = s.read_to_string(&mut t);
    t.starts_with("HTTP/1.0 200") || t.starts_with("HTTP/1.1 200")
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> std::process::Output {
    cp.kubectl().args(args).output().expect("kubectl")
}

fn show(title: &str, out: &std::process::Output) {
    println!("\n$ {title}");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let root = qdr_tests::workspace_root();
    // The operator built with this program (`make run`: `cargo build --bins`).
    let mut bin_dir = qdr_tests::images::bin_dir();
    let mut once = false;
    let mut real = false;
    let mut state_override = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bin-dir" => bin_dir = PathBuf::from(args.next().ok_or("--bin-dir needs a path")?),
            "--once" => once = true,
            "--real" => real = true,
            "--state-dir" => {
                state_override = Some(PathBuf::from(args.next().ok_or("--state-dir needs a path")?))
            }
            "-h" | "--help" => {
                println!("usage: local-run [--bin-dir DIR] [--state-dir DIR] [--once] [--real]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if real {
        // The images are made of the binaries beside this one.
        for image in [qdr_tests::images::WEBHOOK, qdr_tests::images::CONTROLLER] {
            qdr_tests::images::operator_binary(&image)?;
        }
    } else {
        for b in ["qdr-webhook", "qdr-controller"] {
            if !bin_dir.join(b).is_file() {
                return Err(format!(
                    "{} missing: build with `cargo build --bins`",
                    bin_dir.join(b).display()
                )
                .into());
            }
        }
    }
    let state = state_override.unwrap_or_else(|| {
        // `<target dir>/dev-cluster`, beside the profile's directory.
        qdr_tests::images::bin_dir()
            .parent()
            .map_or_else(|| root.join("target"), PathBuf::from)
            .join("dev-cluster")
    });
    let _ = std::fs::remove_dir_all(&state);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        println!("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok with {NODES} simulated nodes ...");
        let real_nodes = usize::from(real);
        let nodes = if real { 0 } else { NODES };
        let cp = &ControlPlane::start(Options { state_dir: Some(state.clone()), controller_manager: true, nodes, audit: false, real_nodes, webhook_client_cert: false }).await?;
        println!("control plane with {} Ready nodes in {:.1?}", nodes + real_nodes, cp.startup);
        show("kubectl get nodes", &kubectl(cp, &["get", "nodes"]));
        let mut processes = Vec::new();
        if real {
            install_real(cp, &root)?;
        } else {
            processes = run_processes(cp, &root, &bin_dir, &state).await?;
        }
        let examples = root.join("deploy/examples").display().to_string();
        show("kubectl apply -f deploy/examples/", &kubectl(cp, &["apply", "-f", &examples]));
        if real {
            // One node: AntiAffinity runs one router on it.
            show(
                "kubectl patch interconnect secure-router --type merge -p '{\"spec\":{\"deploymentPlan\":{\"size\":1}}}'   (one real node: one AntiAffinity router)",
                &kubectl(cp, &["patch", "interconnect", "secure-router", "--type", "merge", "-p", r#"{"spec":{"deploymentPlan":{"size":1}}}"#]),
            );
        }
        let invalid = root.join("deploy/examples/invalid").display().to_string();
        show("kubectl apply -f deploy/examples/invalid/   (rejected, every cause listed)", &kubectl(cp, &["apply", "-f", &invalid]));

        // The leader reconciles, the scheduler places the routers, kwok makes them Ready.
        let wait = format!("--timeout={READY_WAIT}");
        let waited = kubectl(cp, &["wait", "--for=condition=Ready", "interconnect", "--all", &wait]);
        show(&format!("kubectl wait --for=condition=Ready interconnect --all {wait}"), &waited);
        if !waited.status.success() {
            show("kubectl get interconnects -o yaml", &kubectl(cp, &["get", "interconnects", "-o", "yaml"]));
            return Err("not every Interconnect became Ready".into());
        }
        show(
            "kubectl get interconnects,deploy,ds,svc,cm,secrets",
            &kubectl(cp, &["get", "interconnects,deploy,ds,svc,cm,secrets"]),
        );
        show("kubectl get pods -o wide", &kubectl(cp, &["get", "pods", "-o", "wide"]));
        show("kubectl get lease -n qdr-operator", &kubectl(cp, &["get", "lease", "-n", "qdr-operator"]));
        let kc = cp.kubeconfig().display().to_string();
        let k = qdr_tests::Testbin::locate()?.path("kubectl").display().to_string();
        if real {
            show("kubectl get pods -n qdr-operator -o wide", &kubectl(cp, &["get", "pods", "-n", "qdr-operator", "-o", "wide"]));
            show_mesh(cp)?;
            println!("\nThe webhook, the controllers and every router run as pods on the real node {}.", qdr_tests::real_node::NODE);
        } else {
            println!("\nThe nodes and router containers are simulated (kwok): pods are scheduled by the real");
            println!("kube-scheduler and marked Ready, but no router process runs, so no messages flow.");
        }
        println!("Logs:       {}", state.display());
        println!("Kubeconfig: {kc}");
        println!("Try:        {k} --kubeconfig {kc} get interconnect router-mesh -o yaml");
        println!("            {k} --kubeconfig {kc} explain interconnect.spec.deploymentPlan");
        println!("            {k} --kubeconfig {kc} patch interconnect router-mesh --type merge -p '{{\"spec\":{{\"deploymentPlan\":{{\"size\":5}}}}}}'");
        println!("            {k} --kubeconfig {kc} wait --for=condition=Ready interconnect --all");
        println!("            {k} --kubeconfig {kc} scale interconnect secure-router --replicas=4");
        let all = nodes + real_nodes;
        println!("            {k} --kubeconfig {kc} get interconnect secure-router   (AntiAffinity: {} of 4 cannot be scheduled on {all} node{})", 4 - all.min(4), if all == 1 { "" } else { "s" });
        if !once {
            println!("Ctrl-C stops everything.");
            tokio::signal::ctrl_c().await?;
        }
        for p in processes.iter().rev() {
            p.stop(Duration::from_secs(5));
        }
        cp.stop();
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// The default run: the webhook and two controllers as processes on this machine, as their
/// ServiceAccounts, with the webhook configurations calling the webhook by URL.
async fn run_processes(
    cp: &ControlPlane,
    root: &std::path::Path,
    bin_dir: &std::path::Path,
    state: &std::path::Path,
) -> Result<Vec<Process>, Box<dyn std::error::Error>> {
    cp.install_crd().await;
    show("kubectl create namespace qdr-operator", &kubectl(cp, &["create", "namespace", "qdr-operator"]));
    // The components run as their ServiceAccounts, bound by deploy/'s RBAC: a permission
    // missing there fails here too.
    let ids = cp.install_rbac(&qdr_tests::rbac::Install::new("qdr-operator"))?;
    println!(
        "\n$ kubectl apply: deploy/'s ServiceAccounts, Roles and bindings; webhook and controllers run with `kubectl create token` tokens"
    );

    // Webhook configurations as in deploy/, but calling the local webhook by URL.
    let port = free_port();
    let configs = std::fs::read_to_string(root.join("deploy/base/webhook-configurations.yaml"))?
        .replace(
            "service: {name: qdr-webhook, namespace: qdr-operator, path: /validate, port: 443}",
            &format!("url: https://127.0.0.1:{port}/validate"),
        )
        .replace(
            "service: {name: qdr-webhook, namespace: qdr-operator, path: /mutate, port: 443}",
            &format!("url: https://127.0.0.1:{port}/mutate"),
        );
    let mut apply = cp
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(&mut apply.stdin.take().unwrap(), configs.as_bytes())?;
    show(
        "kubectl apply -f deploy/base/webhook-configurations.yaml (url clientConfig)",
        &apply.wait_with_output()?,
    );

    let health = free_port();
    let mut cmd = Command::new(bin_dir.join("qdr-webhook"));
    cmd.env("KUBECONFIG", &ids.webhook).args([
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--health-listen=127.0.0.1:{health}"),
        "--namespace=qdr-operator",
        "--extra-san=127.0.0.1",
        "--shutdown-delay=0s",
    ]);
    let webhook = Process::spawn("qdr-webhook", cmd, &state.join("qdr-webhook.log"))?;
    let controllers: Vec<Process> = (0..2)
        .map(|i| {
            let mut cmd = Command::new(bin_dir.join("qdr-controller"));
            cmd.env("KUBECONFIG", &ids.controller).args([
                "--lease-namespace=qdr-operator",
                &format!("--identity=controller-{i}"),
                &format!("--health-listen=127.0.0.1:{}", free_port()),
                // Simulated routers: nobody answers at their addresses (docs/mesh-status.md).
                "--observe-mesh=off",
            ]);
            Process::spawn(
                &format!("qdr-controller-{i}"),
                cmd,
                &state.join(format!("qdr-controller-{i}.log")),
            )
        })
        .collect::<Result<_, _>>()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !http_ok(health, "/readyz") {
        if webhook.exited().is_some() || Instant::now() > deadline {
            return Err(format!("webhook not ready:\n{}", webhook.log_tail(30)).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("webhook ready on https://127.0.0.1:{port} (it made its CA and injected the caBundle)");
    // The API server picks up webhook configuration changes within seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = kubectl(
            cp,
            &[
                "apply",
                "--dry-run=server",
                "-f",
                &root.join("deploy/examples/interior-mesh.yaml").display().to_string(),
                "-o",
                "jsonpath={.spec.users}",
            ],
        );
        if String::from_utf8_lossy(&out.stdout) == "router-mesh-users" || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut all = vec![webhook];
    all.extend(controllers);
    Ok(all)
}

/// `--real`: the operator's images into the real node and `kubectl apply -k` of `deploy/`
/// through an overlay that changes only images, pull policy and placement; waits until both
/// Deployments are Available and the webhook answers through its Service.
fn install_real(cp: &ControlPlane, root: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    qdr_tests::install::import_operator_images(cp)?;
    println!(
        "\nimages built from the operator binaries and imported into {} in {:.1?}",
        qdr_tests::real_node::NODE,
        t.elapsed()
    );
    let overlay =
        qdr_tests::install::real_node_overlay(&root.join("deploy"), &cp.dir().join("real-overlay"), true)?;
    let overlay = overlay.display().to_string();
    let applied = kubectl(cp, &["apply", "--server-side", "-k", &overlay]);
    show(
        "kubectl apply --server-side -k <overlay of deploy/: images, pullPolicy Never, placement on real-0>",
        &applied,
    );
    if !applied.status.success() {
        return Err("installing deploy/ failed".into());
    }
    let waited = kubectl(
        cp,
        &["wait", "--for=condition=Available", "deployment", "--all", "-n", "qdr-operator", "--timeout=180s"],
    );
    show("kubectl wait --for=condition=Available deployment --all -n qdr-operator", &waited);
    if !waited.status.success() {
        show(
            "kubectl get pods -n qdr-operator -o wide",
            &kubectl(cp, &["get", "pods", "-n", "qdr-operator", "-o", "wide"]),
        );
        return Err("the operator's Deployments did not become Available".into());
    }
    println!("installed and Available in {:.1?}", t.elapsed());
    // The webhook injects its caBundle once it runs; admission through the Service works then.
    let example = root.join("deploy/examples/interior-mesh.yaml").display().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl(cp, &["apply", "--dry-run=server", "-f", &example, "-o", "jsonpath={.spec.users}"]);
        if String::from_utf8_lossy(&out.stdout) == "router-mesh-users" {
            break;
        }
        if Instant::now() > deadline {
            show("kubectl apply --dry-run=server (the webhook through its Service)", &out);
            return Err("the webhook did not answer through its Service".into());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    println!(
        "the API server calls the webhook through Service qdr-operator/qdr-webhook ({:.1?})",
        t.elapsed()
    );

    // Real routers: on the real node, from the image built from source.
    let t = Instant::now();
    qdr_tests::routers::check_client()?;
    qdr_tests::routers::routers_on_real_node(cp)?;
    qdr_tests::routers::import_router_image(cp)?;
    println!(
        "\nrouter image {} built from source (or cached) and imported into {} in {:.1?}; taint removed",
        qdr_tests::routers::ROUTER_IMAGE,
        qdr_tests::real_node::NODE,
        t.elapsed()
    );
    let image = format!("QDROUTERD_IMAGE={}", qdr_tests::routers::ROUTER_IMAGE);
    let set = kubectl(cp, &["set", "env", "deployment/qdr-controller", "-n", "qdr-operator", &image]);
    show(&format!("kubectl set env deployment/qdr-controller -n qdr-operator {image}"), &set);
    let rolled = kubectl(
        cp,
        &["rollout", "status", "deployment/qdr-controller", "-n", "qdr-operator", "--timeout=180s"],
    );
    show("kubectl rollout status deployment/qdr-controller -n qdr-operator", &rolled);
    if !set.status.success() || !rolled.status.success() {
        return Err("the controllers did not roll out with the router image".into());
    }
    Ok(())
}

/// Runs `qdstat <arg>` in router pod `pod` every 0.5 s until its output satisfies `done` or
/// 60 s pass, shows the last output and tells whether `done` was met.
fn qdstat_until(cp: &ControlPlane, pod: &str, arg: &str, done: impl Fn(&str) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl(cp, &["exec", pod, "--", "qdstat", arg]);
        let met = done(&String::from_utf8_lossy(&out.stdout));
        if met || Instant::now() > deadline {
            show(&format!("kubectl exec {pod} -- qdstat {arg}"), &out);
            return met;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `--real`: the mesh each router of `router-mesh` sees (`qdstat -n` in its pod), then three
/// messages from the first router to a receiver on the second; then the edge example's
/// connections (`qdstat -c`: its uplink to `router-mesh` by Service name) and three messages
/// from it to a receiver on the second interior router.
fn show_mesh(cp: &ControlPlane) -> Result<(), Box<dyn std::error::Error>> {
    use qdr_tests::routers::{Receiver, send, url};
    let pods = kubectl(
        cp,
        &[
            "get",
            "pods",
            "-l",
            "application=router-mesh",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{\"\\n\"}{end}",
        ],
    );
    let pods: Vec<(String, String)> = String::from_utf8_lossy(&pods.stdout)
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(n, ip)| (n.to_string(), ip.to_string())))
        .collect();
    if pods.len() < 2 {
        return Err(format!("router-mesh has {} routers", pods.len()).into());
    }
    for (pod, _) in &pods {
        // The mesh forms within seconds of the routers being Ready.
        qdstat_until(cp, pod, "-n", |text| pods.iter().all(|(p, _)| text.contains(p.as_str())));
    }
    let (from, to) = (&pods[0], &pods[1]);
    let receiver = Receiver::attach(&url(&to.1, 5672), "closest/hello", 3, &[]);
    send(&url(&from.1, 5672), "closest/hello", 0..3, "hello-", Duration::from_secs(60), &[]);
    println!(
        "\nsent 3 messages to closest/hello at {} ({}); the receiver at {} ({}) got:",
        from.0, from.1, to.0, to.1
    );
    for body in receiver.bodies() {
        println!("  {body}");
    }

    // The edge example's router uplinks to `router-mesh` by its Service name (cluster DNS);
    // three messages from it reach a receiver on an interior router.
    let edge = kubectl(
        cp,
        &[
            "get",
            "pods",
            "-l",
            "application=edge-routers",
            "-o",
            "jsonpath={.items[0].metadata.name} {.items[0].status.podIP}",
        ],
    );
    let edge = String::from_utf8_lossy(&edge.stdout).into_owned();
    let Some((edge, edge_ip)) = edge.trim().split_once(' ') else {
        return Err(format!("no edge-routers router: {edge:?}").into());
    };
    let up = qdstat_until(cp, edge, "-c", |text| {
        text.lines().any(|l| l.contains("router-mesh:45672") && l.contains(" edge "))
    });
    if !up {
        return Err(format!("{edge}'s uplink to router-mesh:45672 did not open").into());
    }
    let receiver = Receiver::attach(&url(&to.1, 5672), "closest/from-the-edge", 3, &[]);
    send(&url(edge_ip, 5672), "closest/from-the-edge", 0..3, "edge-", Duration::from_secs(60), &[]);
    println!(
        "\nsent 3 messages to closest/from-the-edge at {edge} ({edge_ip}); the receiver at {} ({}) got:",
        to.0, to.1
    );
    for body in receiver.bodies() {
        println!("  {body}");
    }
    Ok(())
}
