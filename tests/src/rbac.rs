//! Running the webhook and controller as their ServiceAccounts, bound by `deploy/`'s RBAC,
//! so a missing permission fails the test that needs it (the admin kubeconfig would hide
//! it), and the audit log shows what each component used.
//!
//! [`ControlPlane::install_rbac`] applies the RBAC objects of `kubectl kustomize deploy/`
//! with the rules unchanged; only what an installation names differs: the namespace, and
//! the object names in `resourceNames` (Lease, webhook Secret, webhook configurations).
//! Cluster-scoped objects get the namespace as a suffix, so installations side by side on
//! one control plane do not overwrite each other's bindings; one installation per namespace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::Error;
use crate::control_plane::ControlPlane;

/// The names an installation gives what its RBAC restricts by name. [`Install::new`] has
/// `deploy/`'s names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Install {
    /// Namespace of the ServiceAccounts, Roles, Lease and webhook Secret.
    pub namespace: String,
    /// The controller's leader-election Lease (`--lease-name`).
    pub lease: String,
    /// The webhook's TLS Secret (`--secret-name`).
    pub webhook_secret: String,
    /// The ValidatingWebhookConfiguration the webhook keeps the caBundle of.
    pub validating: String,
    /// The MutatingWebhookConfiguration the webhook keeps the caBundle of.
    pub mutating: String,
    /// Empty: the install of `deploy/` (the controller's ClusterRole). Otherwise the
    /// namespaced install of [`NAMESPACED_OVERLAY`], watching these namespaces: its Role and
    /// RoleBinding are placed in each of them.
    pub watch: Vec<String>,
}

impl Install {
    /// `deploy/`'s names in `namespace`.
    pub fn new(namespace: &str) -> Self {
        Install {
            namespace: namespace.into(),
            lease: DEPLOY_LEASE.into(),
            webhook_secret: DEPLOY_WEBHOOK_SECRET.into(),
            validating: DEPLOY_VALIDATING.into(),
            mutating: DEPLOY_MUTATING.into(),
            watch: Vec::new(),
        }
    }

    /// Where its RBAC comes from: `deploy` or [`NAMESPACED_OVERLAY`].
    pub fn kustomization(&self) -> &'static str {
        if self.watch.is_empty() { "deploy" } else { NAMESPACED_OVERLAY }
    }
}

/// The namespaced install's kustomization, relative to the workspace root.
pub const NAMESPACED_OVERLAY: &str = "deploy/overlays/namespaced";
/// The namespace `deploy/` installs the operator in.
pub const DEPLOY_NAMESPACE: &str = "qdr-operator";

/// `deploy/`'s Lease name (the controller's `--lease-name` default).
pub const DEPLOY_LEASE: &str = "qdr-operator-controller";
/// `deploy/`'s webhook Secret name (the webhook's `--secret-name` default).
pub const DEPLOY_WEBHOOK_SECRET: &str = "qdr-webhook-tls";
/// `deploy/`'s ValidatingWebhookConfiguration.
pub const DEPLOY_VALIDATING: &str = "qdr-operator-validating";
/// `deploy/`'s MutatingWebhookConfiguration.
pub const DEPLOY_MUTATING: &str = "qdr-operator-mutating";

/// Kubeconfigs that authenticate as the components' ServiceAccounts (bearer tokens from
/// `kubectl create token`, valid 48 h).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identities {
    /// As `system:serviceaccount:<ns>:qdr-controller`.
    pub controller: PathBuf,
    /// As `system:serviceaccount:<ns>:qdr-webhook`.
    pub webhook: PathBuf,
}

/// Installations done on this process's control planes, by directory and [`Install`].
static INSTALLED: Mutex<BTreeMap<(PathBuf, Install), Identities>> = Mutex::new(BTreeMap::new());

/// The RBAC objects of `deploy/` (ServiceAccounts, Roles, RoleBindings, ClusterRoles,
/// ClusterRoleBindings), as `kubectl kustomize deploy/` renders them.
///
/// # Errors
/// [`Error::Startup`] when kustomize fails or its output does not parse.
pub fn deploy_rbac(cp: &ControlPlane) -> Result<Vec<Value>, Error> {
    kustomize_rbac(cp, "deploy")
}

/// Every object `kubectl kustomize <dir>` renders (`dir` relative to the workspace root).
///
/// # Errors
/// [`Error::Startup`] when kustomize fails or its output does not parse.
pub fn kustomize(cp: &ControlPlane, dir: &str) -> Result<Vec<Value>, Error> {
    let root = crate::workspace_root();
    let out = cp
        .kubectl()
        .arg("kustomize")
        .arg(root.join(dir))
        .output()
        .map_err(|e| Error::io("running kubectl kustomize", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(startup(
            &format!("kubectl kustomize {dir} failed"),
            &String::from_utf8_lossy(&out.stderr),
        ));
    }
    serde_saphyr::from_str_multiple(&text).map_err(|e| startup("kustomize output", &e.to_string()))
}

/// The RBAC objects [`kustomize`] renders for `dir`.
///
/// # Errors
/// As [`kustomize`].
pub fn kustomize_rbac(cp: &ControlPlane, dir: &str) -> Result<Vec<Value>, Error> {
    Ok(kustomize(cp, dir)?
        .into_iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("ServiceAccount" | "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding")
            )
        })
        .collect())
}

fn startup(what: &str, logs: &str) -> Error {
    Error::Startup { what: what.into(), logs: logs.into() }
}

/// `objects` (from [`kustomize_rbac`] of [`Install::kustomization`]) renamed for `install`;
/// rules and verbs untouched. Objects in namespaces other than [`DEPLOY_NAMESPACE`] belong
/// to the overlay's watched namespaces: those of the first are placed in each of
/// `install.watch` instead.
pub fn for_install(objects: &[Value], install: &Install) -> Vec<Value> {
    let namespace_of = |o: &Value| o["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let first_watched =
        objects.iter().map(namespace_of).find(|n| !n.is_empty() && n != DEPLOY_NAMESPACE).unwrap_or_default();
    let mut placed = Vec::new();
    for o in objects {
        match namespace_of(o) {
            n if n.is_empty() || n == DEPLOY_NAMESPACE => placed.push((o, install.namespace.clone())),
            n if n == first_watched => placed.extend(install.watch.iter().map(|w| (o, w.clone()))),
            _ => {}
        }
    }
    placed.into_iter().map(|(o, ns)| placed_in(o, &ns, install)).collect()
}

/// One object of [`for_install`], placed in `ns` when namespaced.
fn placed_in(o: &Value, ns: &str, install: &Install) -> Value {
    let renamed = |name: &str| -> String {
        match name {
            DEPLOY_LEASE => install.lease.clone(),
            DEPLOY_WEBHOOK_SECRET => install.webhook_secret.clone(),
            DEPLOY_VALIDATING => install.validating.clone(),
            DEPLOY_MUTATING => install.mutating.clone(),
            other => other.into(),
        }
    };
    let suffix = |name: &Value| json!(format!("{}-{}", name.as_str().unwrap_or_default(), install.namespace));
    let mut o = o.clone();
    let cluster_scoped = o["kind"].as_str().is_some_and(|k| k.starts_with("Cluster"));
    if cluster_scoped {
        o["metadata"]["name"] = suffix(&o["metadata"]["name"]);
        if let Some(m) = o["metadata"].as_object_mut() {
            m.remove("namespace");
        }
    } else {
        o["metadata"]["namespace"] = json!(ns);
    }
    if o["kind"] == "ClusterRoleBinding" {
        o["roleRef"]["name"] = suffix(&o["roleRef"]["name"]);
    }
    for s in o["subjects"].as_array_mut().into_iter().flatten() {
        s["namespace"] = json!(install.namespace);
    }
    for r in o["rules"].as_array_mut().into_iter().flatten() {
        for n in r["resourceNames"].as_array_mut().into_iter().flatten() {
            *n = json!(renamed(n.as_str().unwrap_or_default()));
        }
    }
    o
}

impl ControlPlane {
    /// Applies `deploy/`'s RBAC for `install` ([`for_install`]) and returns kubeconfigs
    /// for the two ServiceAccounts. Done once per installation and control plane; later
    /// calls return the same files.
    ///
    /// # Errors
    /// [`Error::Startup`] when an apply or `kubectl create token` fails.
    pub fn install_rbac(&self, install: &Install) -> Result<Identities, Error> {
        let key = (self.dir().to_path_buf(), install.clone());
        let mut done = INSTALLED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(ids) = done.get(&key) {
            return Ok(ids.clone());
        }
        if let Some(((_, other), _)) =
            done.iter().find(|((d, i), _)| *d == key.0 && i.namespace == install.namespace)
        {
            return Err(startup(
                &format!("namespace {} already has an installation with other names", install.namespace),
                &format!("{other:?}\n{install:?}"),
            ));
        }
        let ns = &install.namespace;
        let mut namespace = self.kubectl();
        namespace.args(["create", "namespace", ns]);
        let _ = namespace.output(); // may exist already
        let list =
            json!({"apiVersion": "v1", "kind": "List", "items": for_install(&deploy_rbac(self)?, install)});
        self.kubectl_stdin(&["apply", "-f", "-"], &list.to_string())?;
        let ids = Identities {
            controller: self.service_account_kubeconfig(ns, "qdr-controller")?,
            webhook: self.service_account_kubeconfig(ns, "qdr-webhook")?,
        };
        done.insert(key, ids.clone());
        Ok(ids)
    }

    /// A kubeconfig (in [`Self::dir`]) authenticating as ServiceAccount `ns/name` with a
    /// token from `kubectl create token`.
    ///
    /// # Errors
    /// [`Error::Startup`] when the token request fails.
    pub fn service_account_kubeconfig(&self, ns: &str, name: &str) -> Result<PathBuf, Error> {
        let token = self.kubectl_stdin(&["create", "token", name, "-n", ns, "--duration=48h"], "")?;
        let token = token.trim();
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem());
        let config = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.server(), "certificate-authority-data": ca}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name, "namespace": ns}}],
            "current-context": name,
        });
        let path = self.dir().join(format!("kubeconfig-{ns}-{name}.json"));
        write(&path, &config.to_string())?;
        Ok(path)
    }

    /// Runs kubectl (admin) with `stdin`, returning its standard output.
    ///
    /// # Errors
    /// [`Error::Startup`] with kubectl's standard error when it fails.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Result<String, Error> {
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io("running kubectl", e))?;
        std::io::Write::write_all(&mut child.stdin.take().expect("piped"), stdin.as_bytes())
            .map_err(|e| Error::io("writing to kubectl", e))?;
        let out = child.wait_with_output().map_err(|e| Error::io("running kubectl", e))?;
        if !out.status.success() {
            return Err(startup(
                &format!("kubectl {}", args.join(" ")),
                &String::from_utf8_lossy(&out.stderr),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// One permission: `verb` on `resource` (with `/subresource`) of API `group` (`""`: core).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permission {
    /// API group, `""` for the core group.
    pub group: String,
    /// Plural resource, with `/subresource` when there is one.
    pub resource: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{} {group}/{}", self.verb, self.resource)
    }
}

/// The permissions `rules` (RBAC `PolicyRule`s as JSON) grant, one per group, resource
/// and verb (names and resource names are not distinguished).
pub fn permissions(rules: &Value) -> std::collections::BTreeSet<Permission> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect()
    };
    let mut out = std::collections::BTreeSet::new();
    for r in rules.as_array().into_iter().flatten() {
        for group in strings(&r["apiGroups"]) {
            for resource in strings(&r["resources"]) {
                for verb in strings(&r["verbs"]) {
                    out.insert(Permission { group: group.clone(), resource: resource.clone(), verb });
                }
            }
        }
    }
    out
}

/// What `objects` (from [`deploy_rbac`]) grant ServiceAccount `account` (`qdr-controller`,
/// `qdr-webhook`): the rules of every Role and ClusterRole a binding in `objects` binds
/// to it.
pub fn granted(objects: &[Value], account: &str) -> std::collections::BTreeSet<Permission> {
    let mut out = std::collections::BTreeSet::new();
    for b in
        objects.iter().filter(|o| matches!(o["kind"].as_str(), Some("RoleBinding" | "ClusterRoleBinding")))
    {
        let binds = b["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == account);
        if !binds {
            continue;
        }
        let role = objects
            .iter()
            .find(|o| o["kind"] == b["roleRef"]["kind"] && o["metadata"]["name"] == b["roleRef"]["name"]);
        if let Some(role) = role {
            out.extend(permissions(&role["rules"]));
        }
    }
    out
}

/// The permissions `username` used in `events` (each request once), and the requests
/// the API server refused with `403 Forbidden` (as `verb URI`). A `patch` answered `201
/// Created` (server-side apply of a new object) uses `create` as well: the API server
/// authorizes both.
pub fn used(
    events: &[crate::AuditEvent],
    username: &str,
) -> (std::collections::BTreeSet<Permission>, Vec<String>) {
    let mut out = std::collections::BTreeSet::new();
    let mut forbidden = Vec::new();
    for e in events.iter().filter(|e| e.user.username == username && e.counts()) {
        let Some(o) = &e.object_ref else { continue };
        if e.response_status.as_ref().is_some_and(|s| s.code == 403) {
            forbidden.push(format!("{} {}", e.verb, e.request_uri));
        }
        let resource = if o.subresource.is_empty() {
            o.resource.clone()
        } else {
            format!("{}/{}", o.resource, o.subresource)
        };
        let code = e.response_status.as_ref().map_or(0, |s| s.code);
        // A server-side apply that creates the object (201) is authorized for `create` too.
        if e.verb == "patch" && code == 201 {
            out.insert(Permission {
                group: o.api_group.clone(),
                resource: resource.clone(),
                verb: "create".into(),
            });
        }
        out.insert(Permission { group: o.api_group.clone(), resource, verb: e.verb.clone() });
    }
    (out, forbidden)
}
