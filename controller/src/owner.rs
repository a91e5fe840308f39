//! [`Owner`]: the Interconnect whose children are being built, after
//! [`qdr_api::defaults`] (in memory: the stored spec is never written) and
//! [`qdr_api::validate`]. Builders take only an `Owner`, so an unvalidated spec cannot reach
//! them (the "validated type" of the style guide).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use qdr_api::{DeploymentPlan, FieldError, Interconnect, InterconnectSpec, defaults, validate};

/// Field manager of every server-side apply and create by the controller.
pub const FIELD_MANAGER: &str = "qdr-operator";
/// Value of `app.kubernetes.io/managed-by` on every child.
pub const MANAGED_BY: &str = "qdr-operator";

/// Why a stored Interconnect cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// The effective spec breaks rules of [`qdr_api::validate`]: every violation.
    #[error("the spec is invalid: {}", summary(.0))]
    Invalid(Vec<FieldError>),
    /// The object lacks what every stored object has (`metadata.name`, `namespace`,
    /// `uid`): it was not read from the API server.
    #[error("the Interconnect has no metadata.{0}: only stored objects can own children")]
    NotStored(&'static str),
}

/// Every violation on one line, `; `-separated (condition messages, Events, errors).
pub fn summary(errors: &[FieldError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// A stored Interconnect with its effective spec, valid by construction.
#[derive(Debug, Clone)]
pub struct Owner {
    ic: Interconnect,
    name: String,
    namespace: String,
    owner_ref: OwnerReference,
}

impl Owner {
    /// Defaults `stored` in memory and validates the result.
    ///
    /// # Errors
    /// [`OwnerError::Invalid`] with every violation; [`OwnerError::NotStored`] when the
    /// object has no name, namespace or uid.
    pub fn new(stored: &Interconnect) -> Result<Owner, OwnerError> {
        let name = stored.metadata.name.clone().ok_or(OwnerError::NotStored("name"))?;
        let namespace = stored.metadata.namespace.clone().ok_or(OwnerError::NotStored("namespace"))?;
        let owner_ref = stored.controller_owner_ref(&()).ok_or(OwnerError::NotStored("uid"))?;
        let ic = defaults(stored);
        let errors = validate(&ic);
        if !errors.is_empty() {
            return Err(OwnerError::Invalid(errors));
        }
        Ok(Owner { ic, name, namespace, owner_ref })
    }

    /// The Interconnect with its effective (defaulted) spec; metadata and status as stored.
    pub fn ic(&self) -> &Interconnect {
        &self.ic
    }

    /// The effective spec.
    pub fn spec(&self) -> &InterconnectSpec {
        &self.ic.spec
    }

    /// The effective deployment plan (defaults always set one).
    pub fn plan(&self) -> DeploymentPlan {
        self.ic.spec.deployment_plan.clone().unwrap_or_default()
    }

    /// `metadata.name`: also the name of the workload, Service, ServiceAccount, Role and
    /// RoleBinding.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.namespace`: every child lives there.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        &self.owner_ref.uid
    }

    /// `metadata.generation` (0 when absent).
    pub fn generation(&self) -> i64 {
        self.ic.metadata.generation.unwrap_or_default()
    }

    /// `application=<name>`, `interconnect_cr=<name>`: the Go operator's selector, kept
    /// unchanged so existing Deployments (whose selector is immutable) can be adopted.
    pub fn selector(&self) -> BTreeMap<String, String> {
        [("application", self.name.as_str()), ("interconnect_cr", self.name.as_str())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The selector as a label-selector string (`application=a,interconnect_cr=a`).
    pub fn selector_string(&self) -> String {
        self.selector().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    /// The selector plus the recommended `app.kubernetes.io/*` labels.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = self.selector();
        for (k, v) in [
            ("app.kubernetes.io/name", "qdrouterd"),
            ("app.kubernetes.io/instance", self.name.as_str()),
            ("app.kubernetes.io/component", "router"),
            ("app.kubernetes.io/managed-by", MANAGED_BY),
        ] {
            l.insert(k.into(), v.into());
        }
        l
    }

    /// The label selector of every child of this Interconnect (what pruning lists).
    pub fn children_selector(&self) -> String {
        format!("interconnect_cr={},app.kubernetes.io/managed-by={MANAGED_BY}", self.name)
    }

    /// Controller owner reference to the Interconnect (garbage collection on delete).
    pub fn owner_ref(&self) -> OwnerReference {
        self.owner_ref.clone()
    }

    /// Whether an object with these owner references is controlled by this Interconnect
    /// (a controller reference with its uid): the only objects the controller writes.
    pub fn controls(&self, refs: &[OwnerReference]) -> bool {
        refs.iter().any(|r| r.uid == self.uid() && r.controller == Some(true))
    }

    /// Metadata of a child named `name`: namespace, labels, owner reference.
    pub fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels()),
            owner_references: Some(vec![self.owner_ref()]),
            ..Default::default()
        }
    }

    /// The SASL users Secret, or `None` with `users: none`.
    pub fn users_secret(&self) -> Option<String> {
        self.ic.users_secret()
    }

    /// Name of the SASL ConfigMap, `<name>-sasl-config`.
    pub fn sasl_config_name(&self) -> String {
        format!("{}-sasl-config", self.name)
    }

    /// The CA Secret that signs generated credentials (see
    /// [`Interconnect::issuer_secret`]).
    pub fn issuer_secret(&self) -> String {
        self.ic.issuer_secret()
    }
}
