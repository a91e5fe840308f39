//! A namespace per test: created with a generated name, and the control plane's logs
//! printed when its test panics.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use super::ControlPlane;

/// A namespace that belongs to one test, with a client for it.
pub struct TestNamespace {
    /// The generated name.
    pub name: String,
    /// An admin client bound to the current test's runtime.
    pub client: kube::Client,
    cp: &'static ControlPlane,
}

impl TestNamespace {
    /// A namespaced `Api<K>` in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The control plane this namespace lives on.
    pub fn control_plane(&self) -> &'static ControlPlane {
        self.cp
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Namespaces are not deleted: without kube-controller-manager they would stay
        // Terminating forever, and the control plane is thrown away at exit anyway.
        if std::thread::panicking() {
            eprintln!(
                "\n===== test in namespace {} failed; its pods and the nodes =====\n{}",
                self.name,
                self.cp.state_of(&self.name)
            );
            eprintln!(
                "\n===== test in namespace {} failed; control-plane logs ({}) =====\n{}",
                self.name,
                self.cp.dir().display(),
                self.cp.logs_tail(60)
            );
        }
    }
}

impl ControlPlane {
    /// What a failed test's reader needs first, before the logs: the free space of the file
    /// system under [`Self::dir`] (a kubelet evicts pods when it runs low), each node's
    /// conditions that are `True` (`Ready`, or a pressure), and the pods of namespace `ns`
    /// with phase, reason, message, node and IP (a pod its kubelet evicted or refused is
    /// `Failed` with the kubelet's reason). Each part is kubectl's (or df's) own output, or
    /// its error; none takes longer than 10 s.
    pub fn state_of(&self, ns: &str) -> String {
        let run = |cmd: &mut std::process::Command| match cmd.output() {
            Ok(out) => {
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
            }
            Err(e) => format!("({e})\n"),
        };
        let mut out = run(std::process::Command::new("df").arg("-h").arg(self.dir()));
        let nodes = "{range .items[*]}{.metadata.name}{':'}{range .status.conditions[?(@.status=='True')]}\
                     {' '}{.type}{end}{'\\n'}{end}";
        out += &run(self.kubectl().args([
            "get",
            "nodes",
            "--request-timeout=10s",
            "-o",
            &format!("jsonpath={nodes}"),
        ]));
        let columns = "NAME:.metadata.name,PHASE:.status.phase,REASON:.status.reason,NODE:.spec.nodeName,\
                       IP:.status.podIP,DELETING:.metadata.deletionTimestamp,MESSAGE:.status.message";
        out += &run(self
            .kubectl()
            .args(["get", "pods", "-n", ns, "--request-timeout=10s", "-o"])
            .arg(format!("custom-columns={columns}")));
        out
    }
}

impl ControlPlane {
    /// Creates a fresh namespace `<prefix>-<random>` for one test. The returned guard
    /// prints the control plane's logs if the test panics while it is alive.
    ///
    /// # Panics
    /// If the namespace cannot be created.
    pub async fn namespace(&'static self, prefix: &str) -> TestNamespace {
        let client = self.client().await.expect("client for test namespace");
        let api: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.generate_name = Some(format!("{prefix}-"));
        ns.metadata.labels = Some([("qdr-operator.test/namespace".to_string(), "true".to_string())].into());
        let created = api.create(&PostParams::default(), &ns).await.expect("creating test namespace");
        TestNamespace { name: created.metadata.name.expect("server set a name"), client, cp: self }
    }
}
