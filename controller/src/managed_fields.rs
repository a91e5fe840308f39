//! Taking over the fields another writer owned, so server-side apply can remove them.
//!
//! The Go operator wrote its children with plain create and update calls. The API server
//! records such writes as `operation: Update` entries in `metadata.managedFields`, under a
//! manager named after the client's user agent (`qdr-operator` for the Go binary).
//! Server-side apply only removes fields that the applying manager owned before and no
//! longer sets, so the Go operator's extra fields (its `APPLICATION_NAME`, `POD_COUNT`,
//! `POD_IP` environment variables, its port names, a second container name, ...) would stay
//! forever, owned by a manager that no longer runs.
//!
//! [`upgraded`] does what `kubectl apply --server-side` does when it upgrades an object
//! written by client-side apply (`k8s.io/client-go/util/csaupgrade`): the fields of every
//! legacy `Update` entry are moved into this controller's `Apply` entry, and the legacy
//! entries are dropped. The next apply then owns them, and removes every one it does not set.
//! Entries of other managers (kube-controller-manager, a user's `kubectl`) and of
//! subresources (`status`) are left alone.

#[cfg(test)]
mod tests;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta, Time};
use serde_json::{Map, Value};

/// Managers whose `Update` entries are taken over: the Go operator (`qdr-operator`, from its
/// user agent; this controller never writes its applied kinds with an update, so an Update
/// entry under that name is the Go operator's), and `before-first-apply`, which the API
/// server gives to the fields of objects written before managed fields were tracked.
pub const LEGACY_MANAGERS: [&str; 2] = ["qdr-operator", "before-first-apply"];

/// The managed fields of an object after the take-over by the `Apply` entry of `ours`, or
/// `None` when no entry of [`LEGACY_MANAGERS`] (operation `Update`, main resource) exists.
/// The `Apply` entry keeps its API version (or takes the first legacy entry's) and gets the
/// union of its fields and the legacy ones; every other entry is kept as it is.
pub fn upgraded(entries: &[ManagedFieldsEntry], ours: &str) -> Option<Vec<ManagedFieldsEntry>> {
    let main = |e: &ManagedFieldsEntry| e.subresource.as_deref().unwrap_or_default().is_empty();
    let is_legacy = |e: &ManagedFieldsEntry| {
        main(e)
            && e.operation.as_deref() == Some("Update")
            && e.manager.as_deref().is_some_and(|m| LEGACY_MANAGERS.contains(&m))
    };
    let is_ours = |e: &ManagedFieldsEntry| {
        main(e) && e.operation.as_deref() == Some("Apply") && e.manager.as_deref() == Some(ours)
    };
    let legacy: Vec<&ManagedFieldsEntry> = entries.iter().filter(|e| is_legacy(e)).collect();
    if legacy.is_empty() {
        return None;
    }
    let mine = entries.iter().find(|e| is_ours(e));
    let mut fields = mine.and_then(|e| e.fields_v1.as_ref()).map(|f| f.0.clone()).unwrap_or(Value::Null);
    for e in &legacy {
        if let Some(f) = &e.fields_v1 {
            fields = union(fields, &f.0);
        }
    }
    let api_version = mine.or(legacy.first().copied()).and_then(|e| e.api_version.clone());
    let mut out: Vec<ManagedFieldsEntry> =
        entries.iter().filter(|e| !is_legacy(e) && !is_ours(e)).cloned().collect();
    out.push(ManagedFieldsEntry {
        api_version,
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(if fields.is_null() { Value::Object(Map::new()) } else { fields })),
        manager: Some(ours.into()),
        operation: Some("Apply".into()),
        subresource: None,
        time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
    });
    Some(out)
}

/// The union of two `FieldsV1` trees (objects keyed `f:name`, `k:{...}`, `v:...`, `i:n`,
/// and `.` for the node itself): keys of both, merged recursively.
pub fn union(a: Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Object(mut a), Value::Object(b)) => {
            for (k, v) in b {
                let merged = match a.remove(k) {
                    Some(old) => union(old, v),
                    None => v.clone(),
                };
                a.insert(k.clone(), merged);
            }
            Value::Object(a)
        }
        (Value::Null, b) => b.clone(),
        (a, _) => a,
    }
}

/// A child of kind `K` whose legacy managed fields are to be taken over before it is applied.
#[derive(Debug, Clone)]
pub struct Adoption {
    /// The child's kind and name, `Deployment mesh`.
    pub what: String,
    name: String,
    resource: kube::api::ApiResource,
    resource_version: Option<String>,
    managed_fields: Vec<ManagedFieldsEntry>,
}

impl Adoption {
    /// The take-over of the object of kind `K` with `meta`, when it has legacy entries.
    pub fn of<K: kube::Resource<DynamicType = ()>>(meta: &ObjectMeta, ours: &str) -> Option<Adoption> {
        let managed_fields = upgraded(meta.managed_fields.as_deref().unwrap_or_default(), ours)?;
        let name = meta.name.clone().unwrap_or_default();
        Some(Adoption {
            what: format!("{} {name}", K::kind(&())),
            name,
            resource: kube::api::ApiResource::erase::<K>(&()),
            resource_version: meta.resource_version.clone(),
            managed_fields,
        })
    }

    /// Writes the new managed fields (a merge patch of `metadata.managedFields`, with the
    /// observed `resourceVersion` as precondition: a concurrent write fails with 409 and the
    /// next reconcile starts over).
    ///
    /// Returns the object's metadata as the API server answered.
    ///
    /// # Errors
    /// The API error of the patch.
    pub async fn write(&self, client: &kube::Client, ns: &str) -> Result<ObjectMeta, kube::Error> {
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(client.clone(), ns, &self.resource);
        let patch = serde_json::json!({"metadata": {
            "managedFields": self.managed_fields,
            "resourceVersion": self.resource_version,
        }});
        api.patch(&self.name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
            .await
            .map(|o| o.metadata)
    }

    /// The name of the object taken over.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind of the object taken over, such as `Deployment`.
    pub fn kind(&self) -> &str {
        &self.resource.kind
    }
}
