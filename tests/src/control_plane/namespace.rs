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
                "\n===== test in namespace {} failed; control-plane logs ({}) =====\n{}",
                self.name,
                self.cp.dir().display(),
                self.cp.logs_tail(60)
            );
        }
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
