//! Pruning: deleting the children an Interconnect controls and no longer wants, from their
//! labelled stores (Routes: a metadata LIST). It never deletes what the Interconnect does
//! not control, nor a Secret the user named; it writes nothing.

use std::collections::BTreeSet;
use std::fmt::Debug;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams};

use super::write::{Child, Error};
use crate::cache::{Cache, Cached};
use crate::route::Route;
use crate::validated::ValidatedInterconnect;

/// Deletes those of `children` (kind `K`, labelled as children of `o`) that `o` controls
/// and are not in `keep`. Returns them as `Kind name`; a 404 means someone was faster.
pub(super) async fn delete_orphans<K: Child>(
    client: &kube::Client,
    o: &ValidatedInterconnect,
    children: Vec<ObjectMeta>,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let api: Api<K> = Api::namespaced(client.clone(), o.namespace());
    let kind = K::kind(&());
    let mut deleted = Vec::new();
    for meta in children {
        let controlled = o.controls(meta.owner_references.as_deref().unwrap_or_default());
        let name = meta.name.clone().unwrap_or_default();
        if !controlled || keep.contains(&name) {
            continue;
        }
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(format!("{kind} {name}")),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Delete { kind: kind.to_string(), name, source }),
        }
    }
    Ok(deleted)
}

/// Prunes kind `K` from its labelled store ([`delete_orphans`]).
pub(super) async fn prune<K: Child + Cached>(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let children = cache.labelled::<K>(o.namespace(), &o.children_labels());
    delete_orphans::<K>(client, o, children, keep).await
}

/// [`prune`], and the object named like `o` when it is not kept, even without the children's
/// labels (the Go operator's): read by name, deleted when `o` controls it. One read per kind
/// in a pass of a new generation.
async fn prune_with_named<K: Child + Cached>(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let mut children = cache.labelled::<K>(o.namespace(), &o.children_labels());
    let named = children.iter().any(|m| m.name.as_deref() == Some(o.name()));
    if !keep.contains(o.name()) && !named {
        let api: Api<K> = Api::namespaced(client.clone(), o.namespace());
        match api.get_metadata_opt(o.name()).await {
            Ok(Some(m)) => children.push(m.metadata),
            Ok(None) => {}
            Err(source) => {
                return Err(Error::Get {
                    kind: K::kind(&()).to_string(),
                    name: o.name().to_string(),
                    source,
                });
            }
        }
    }
    delete_orphans::<K>(client, o, children, keep).await
}

/// Prunes Routes, which are not watched: they are listed (metadata only).
pub(super) async fn prune_routes(
    client: &kube::Client,
    o: &ValidatedInterconnect,
    keep: &BTreeSet<String>,
) -> Result<Vec<String>, Error> {
    let children = Api::<Route>::namespaced(client.clone(), o.namespace())
        .list_metadata(&ListParams::default().labels(&o.children_selector()))
        .await
        .map_err(|source| Error::List { kind: "Route".into(), source })?
        .items
        .into_iter()
        .map(|m| m.metadata)
        .collect();
    delete_orphans::<Route>(client, o, children, keep).await
}

/// The names of the children applied, by the kinds that can become orphans.
#[derive(Debug, Default)]
pub(super) struct Keep {
    pub(super) roles: BTreeSet<String>,
    pub(super) role_bindings: BTreeSet<String>,
    pub(super) ingresses: BTreeSet<String>,
    pub(super) disruption_budgets: BTreeSet<String>,
    pub(super) network_policies: BTreeSet<String>,
    pub(super) secrets: BTreeSet<String>,
    /// `None` when Routes are not served (Ingresses are used): nothing to prune.
    pub(super) routes: Option<BTreeSet<String>>,
}

impl Keep {
    /// Deletes every child of `o` that is not kept (the Ingress of a listener no longer
    /// exposed, a generated Secret no longer used, ...). The workload of the other kind after
    /// a placement change is not pruned here, but once the new one is whole
    /// ([`super::workload::retire_previous`]).
    pub(super) async fn prune(
        &self,
        client: &kube::Client,
        cache: &Cache,
        o: &ValidatedInterconnect,
    ) -> Result<Vec<String>, Error> {
        let mut pruned = prune::<Ingress>(client, cache, o, &self.ingresses).await?;
        // The routers' Role and RoleBinding: labelled ones from the store, and the Go
        // operator's (unlabelled, never in the store) by name.
        pruned.extend(prune_with_named::<Role>(client, cache, o, &self.roles).await?);
        pruned.extend(prune_with_named::<RoleBinding>(client, cache, o, &self.role_bindings).await?);
        pruned.extend(prune::<PodDisruptionBudget>(client, cache, o, &self.disruption_budgets).await?);
        pruned.extend(prune::<NetworkPolicy>(client, cache, o, &self.network_policies).await?);
        // Only what the controller generates: credentials (labelled) and the default users
        // Secret. A users Secret the user named, created and owned by an earlier release, is
        // theirs and never deleted here.
        let secrets = cache
            .labelled::<Secret>(o.namespace(), &o.children_labels())
            .into_iter()
            .filter(|m| {
                m.labels.as_ref().is_some_and(|l| l.contains_key(crate::credentials::GENERATED_LABEL))
                    || m.name.as_deref() == Some(o.default_users_secret().as_str())
            })
            .collect();
        pruned.extend(delete_orphans::<Secret>(client, o, secrets, &self.secrets).await?);
        if let Some(routes) = &self.routes {
            pruned.extend(prune_routes(client, o, routes).await?);
        }
        Ok(pruned)
    }
}
