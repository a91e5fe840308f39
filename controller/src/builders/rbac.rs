//! The router pods' ServiceAccount, Role and RoleBinding (Go operator parity).

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

use crate::validated::ValidatedInterconnect;

/// ServiceAccount `<name>` for the router pods. Its token is mounted only where the image's
/// auto-mesh reads the pod list with it ([`discovers_peers`](super::discovers_peers)), and
/// only those routers get the Role and RoleBinding ([`router_rbac`]).
pub fn service_account(o: &ValidatedInterconnect) -> k8s_openapi::api::core::v1::ServiceAccount {
    k8s_openapi::api::core::v1::ServiceAccount { metadata: o.meta(o.name()), ..Default::default() }
}

/// The Role and RoleBinding of the router pods, for routers that read the pod list with their
/// API token ([`discovers_peers`](super::discovers_peers)); `None` for every other router,
/// whose pods mount no token: a permission bound to their ServiceAccount would serve only
/// whoever else runs a pod as it. (The Go operator bound it for every Interconnect; the
/// controller deletes the ones it or the Go operator made when they are not needed.)
pub fn router_rbac(o: &ValidatedInterconnect) -> Option<(Role, RoleBinding)> {
    super::discovers_peers(o).then(|| (role(o), role_binding(o)))
}

/// Role `<name>`: get and list pods (what the image's auto-mesh needs, nothing more).
pub fn role(o: &ValidatedInterconnect) -> Role {
    Role {
        metadata: o.meta(o.name()),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
    }
}

/// RoleBinding `<name>` of the Role to the ServiceAccount.
pub fn role_binding(o: &ValidatedInterconnect) -> RoleBinding {
    RoleBinding {
        metadata: o.meta(o.name()),
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: o.name().into(),
            namespace: Some(o.namespace().into()),
            ..Default::default()
        }]),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: o.name().into(),
        },
    }
}
