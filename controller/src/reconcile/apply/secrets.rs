//! Secrets the controller generates: created when missing (never over an existing one), and
//! replaced on renewal with what others added to their metadata kept. It does not decide
//! which Secrets to write (build does) and does not prune them ([`super::prune`]).

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

use super::write::{Child, Error};
use crate::cache::Cache;
use crate::validated::FIELD_MANAGER;

/// `s`, the controller's replacement of a generated Secret, with what others added to the
/// metadata of `current` (the Secret as read just before): their labels and annotations
/// (under the controller's own labels, and with the rotation-step annotation set or removed
/// as `s` says), finalizers and `immutable`.
pub(crate) fn keeping_others(current: Secret, s: &Secret) -> Secret {
    let mut out = s.clone();
    let mut labels = current.metadata.labels.unwrap_or_default();
    labels.extend(s.metadata.labels.clone().unwrap_or_default());
    out.metadata.labels = Some(labels);
    let mut annotations = current.metadata.annotations.unwrap_or_default();
    annotations.remove(crate::credentials::STEP_AT);
    annotations.extend(s.metadata.annotations.clone().unwrap_or_default());
    out.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    out.metadata.finalizers = current.metadata.finalizers;
    out.immutable = current.immutable;
    out
}

/// Replaces the generated Secret `s` (its `resourceVersion` is the precondition: a Secret
/// changed since the pass observed it is refused with 409). The store keeps only what a
/// pass decides from ([`crate::cache`]), so the Secret is read first and the replacement
/// keeps what others added to its metadata ([`keeping_others`]): one read per renewal or
/// rotation step, none per pass.
pub(super) async fn replace_secret(
    client: &kube::Client,
    cache: &Cache,
    ns: &str,
    s: &Secret,
) -> Result<Secret, Error> {
    let name = s.name_any();
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let current = (api.get_opt(&name).await).map_err(|source| Error::Get {
        kind: "Secret".into(),
        name: name.clone(),
        source,
    })?;
    // Gone meanwhile: the replace is refused with 404, as it was before the read.
    let s = current.map_or_else(|| s.clone(), |c| keeping_others(c, s));
    let pending = cache.own.begin(&cache.drift, "Secret", ns, &name);
    let replaced = api
        .replace(&name, &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &s)
        .await
        .map_err(|source| Error::Update { kind: "Secret".into(), name, source })?;
    pending.record(replaced.meta());
    Ok(replaced)
}

/// Creates `obj`, observed missing. An object of its name is never overwritten: a 409 means
/// the observation was stale (a watch event not yet arrived), and [`Error::Exists`] stops
/// the pass before anything built from that observation (the credentials hash of the pod
/// template) is written.
pub(super) async fn create_if_missing<K: Child>(
    client: &kube::Client,
    cache: &Cache,
    ns: &str,
    obj: &K,
) -> Result<K, Error> {
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let pending = cache.own.begin(&cache.drift, &K::kind(&()), ns, &obj.name_any());
    match Api::<K>::namespaced(client.clone(), ns).create(&pp, obj).await {
        Ok(created) => {
            pending.record(created.meta());
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::Exists { kind: K::kind(&()).into_owned(), name: obj.name_any() })
        }
        Err(source) => Err(Error::Create { kind: K::kind(&()).into_owned(), name: obj.name_any(), source }),
    }
}
