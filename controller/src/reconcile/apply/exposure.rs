//! The Service, whose `spec.ports` the controller owns as a whole (server-side apply alone
//! would keep a port someone else added). Ingresses and Routes are plain children, written
//! by the stage itself; this module does not decide which are wanted.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use super::write::{Error, Put, Writer, ssa};
use crate::cache::Cache;

/// The field manager of [`take_over_ports`]: a name of its own, so its `Update` entry is
/// never taken for the Go operator's ([`crate::managed_fields::LEGACY_MANAGERS`]).
pub(crate) const PORTS_MANAGER: &str = "qdr-operator-ports";

/// Server-side applies the Service and makes its `spec.ports` exactly the desired list.
///
/// Server-side apply merges list-map entries by key (`port`, `protocol`) and never
/// removes an entry another manager owns: a port someone added stays, and someone's edit of
/// an entry's `port` leaves an entry whose `name` collides with the one applied, which the
/// API server refuses (`spec.ports[1].name: Duplicate value`) on every apply, for ever.
/// The children are ours, so the controller takes the field over as a whole: when the
/// apply is refused as invalid, or the answer shows ports that are not the desired ones,
/// `spec.ports` is replaced by the desired list ([`take_over_ports`]) and applied again.
pub(super) async fn apply_service(w: &mut Writer<'_>, desired: &Service) -> Result<Put<()>, Error> {
    let (client, cache, ns) = (w.client, w.cache, w.o.namespace());
    let applied = match w.put(desired, false).await {
        Ok(Put::Written(applied)) => applied,
        Ok(Put::Taken(c)) => return Ok(Put::Taken(c)),
        Err(Error::Apply { source: kube::Error::Api(s), .. }) if s.code == 422 => {
            take_over_ports(client, cache, ns, desired).await?;
            ssa(client, cache, ns, desired).await?
        }
        Err(e) => return Err(e),
    };
    if !crate::builders::same_ports(desired, &applied) {
        take_over_ports(client, cache, ns, desired).await?;
        ssa(client, cache, ns, desired).await?;
    }
    Ok(Put::Written(()))
}

/// Replaces `spec.ports` of the Service by the desired list (a merge patch under
/// [`PORTS_MANAGER`]): entries others added or changed are gone, node ports of entries
/// kept are kept by the API server.
pub(super) async fn take_over_ports(
    client: &kube::Client,
    cache: &Cache,
    ns: &str,
    desired: &Service,
) -> Result<(), Error> {
    let name = desired.name_any();
    let ports = desired.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    // A JSON merge patch (RFC 7386) replaces a list as a whole.
    let patch = serde_json::json!({"spec": {"ports": ports}});
    let pp = PatchParams { field_manager: Some(PORTS_MANAGER.into()), ..Default::default() };
    let pending = cache.own.begin(&cache.drift, "Service", ns, &name);
    let patched = Api::<Service>::namespaced(client.clone(), ns)
        .patch(&name, &pp, &Patch::Merge(patch))
        .await
        .map_err(|source| Error::Update { kind: "Service".into(), name, source })?;
    pending.record(patched.meta());
    Ok(())
}
