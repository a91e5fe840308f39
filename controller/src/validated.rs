//! [`ValidatedInterconnect`]: a stored Interconnect after [`qdr_api::defaults`] (in memory:
//! the stored spec is never written) and [`qdr_api::validate`]. The builders take only this
//! type, so a spec that was not defaulted and validated cannot reach them: the check is made
//! once, where the value is made, instead of in every builder.

use std::collections::BTreeMap;

use crate::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use qdr_api::{DeploymentPlan, FieldError, Interconnect, InterconnectSpec, defaults, validate_defaulted};

/// Field manager of every server-side apply and create by the controller.
pub const FIELD_MANAGER: &str = "qdr-operator";

/// Why a stored Interconnect cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// The effective spec breaks rules of [`qdr_api::validate`]: every violation.
    #[error("the spec is invalid: {}", summary(.0))]
    Invalid(Vec<FieldError>),
    /// The object lacks what every stored object has (`metadata.name`, `namespace`,
    /// `uid`): it was not read from the API server.
    #[error("the Interconnect has no metadata.{0}: only stored objects can own children")]
    NotStored(&'static str),
}

/// `namespace/name` of a stored object: the key of the controller's per-Interconnect memos
/// (failures in a row, the last full apply, drift marks, expiry warnings).
pub fn namespaced_name(ic: &Interconnect) -> String {
    format!(
        "{}/{}",
        ic.metadata.namespace.as_deref().unwrap_or_default(),
        ic.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Every violation on one line, `; `-separated (condition messages, Events, errors).
pub fn summary(errors: &[FieldError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// A stored Interconnect with its effective (defaulted) spec, valid by construction:
/// [`ValidatedInterconnect::new`] is the only way to make one.
#[derive(Debug, Clone)]
pub struct ValidatedInterconnect {
    ic: Interconnect,
    name: String,
    namespace: String,
    owner_ref: OwnerReference,
    /// Whether the operator's management profile was added ([`Self::with_management`]).
    management: bool,
    /// The Links' connectors ([`Self::with_links`]).
    links: Vec<qdr_api::router_config::LinkConnector>,
    /// Whether the routers mount the links Secret ([`Self::with_links`]).
    links_mounted: bool,
    /// The addresses its AccessGrants advertise ([`Self::with_advertised`]).
    advertised: Vec<String>,
    /// Listener profiles that trust the sites of AccessGrants, with the grants' CAs
    /// ([`Self::with_site_trust`]).
    site_trust: Vec<(String, Vec<String>)>,
}

impl ValidatedInterconnect {
    /// Defaults `stored` in memory and validates the result.
    ///
    /// # Errors
    /// [`ValidationError::Invalid`] with every violation; [`ValidationError::NotStored`] when the
    /// object has no name, namespace or uid.
    pub fn new(stored: &Interconnect) -> Result<ValidatedInterconnect, ValidationError> {
        let o = Self::defaulted(stored)?;
        let errors = validate_defaulted(&o.ic);
        if !errors.is_empty() {
            return Err(ValidationError::Invalid(errors));
        }
        Ok(o)
    }

    /// `stored` with its metadata checked and its spec defaulted, nothing added.
    fn defaulted(stored: &Interconnect) -> Result<ValidatedInterconnect, ValidationError> {
        let name = stored.metadata.name.clone().ok_or(ValidationError::NotStored("name"))?;
        let namespace = stored.metadata.namespace.clone().ok_or(ValidationError::NotStored("namespace"))?;
        let owner_ref = stored.controller_owner_ref(&()).ok_or(ValidationError::NotStored("uid"))?;
        Ok(ValidatedInterconnect {
            ic: defaults(stored),
            name,
            namespace,
            owner_ref,
            management: false,
            links: Vec::new(),
            links_mounted: false,
            advertised: Vec::new(),
            site_trust: Vec::new(),
        })
    }

    /// `stored` defaulted but **not validated**: only for the admission-parity test
    /// (`controller/tests/admission.rs`), which renders the children of specs the webhook
    /// refuses to learn whether the API server would refuse them too. Nothing else may call
    /// it (`tests/tests/structure.rs` checks): the builders assume a valid spec.
    ///
    /// # Errors
    /// [`ValidationError::NotStored`] as [`Self::new`].
    #[doc(hidden)]
    pub fn unvalidated_for_admission_parity(
        stored: &Interconnect,
    ) -> Result<ValidatedInterconnect, ValidationError> {
        Self::defaulted(stored)
    }

    /// This Interconnect with the operator's management sslProfile
    /// ([`qdr_api::router_config::MANAGEMENT_PROFILE`]: mutual auth, generated CA and
    /// credentials, `<name>-qdr-operator-management-ca` / `-credentials`) added to its
    /// effective spec, in memory only, so its Secrets are generated, mounted, renewed and
    /// kept like every generated profile's (docs/mesh-status.md).
    ///
    /// Returns the Interconnect and `Ok`, or, leaving the spec as it was, `Err` with why the
    /// routers cannot be given the management listener:
    /// a listener (or `livenessPort`) of the spec already uses
    /// [`qdr_api::router_config::MANAGEMENT_PORT`]. (The profile's and the listener's names
    /// cannot be taken: validation refuses every `qdr-operator-` name, CEL `reserved-names`.)
    pub fn with_management(mut self) -> (ValidatedInterconnect, Result<(), String>) {
        use qdr_api::router_config::{MANAGEMENT_PORT, MANAGEMENT_PROFILE};
        let spec = &mut self.ic.spec;
        if spec.liveness_port() == MANAGEMENT_PORT
            || spec.every_listener().any(|(_, _, l)| l.port == MANAGEMENT_PORT)
        {
            let why = format!(
                "port {MANAGEMENT_PORT} is the operator's management port and a listener of the spec uses it"
            );
            return (self, Err(why));
        }
        let name = &self.name;
        spec.ssl_profiles.get_or_insert_with(Vec::new).push(qdr_api::SslProfile {
            name: MANAGEMENT_PROFILE.into(),
            mutual_auth: Some(true),
            credentials: Some(qdr_api::router_config::management_credentials_secret(name)),
            generate_credentials: Some(true),
            ca_cert: Some(qdr_api::router_config::management_ca_secret(name)),
            generate_ca_cert: Some(true),
            ..Default::default()
        });
        self.management = true;
        (self, Ok(()))
    }

    /// Whether the routers get the operator's management listener ([`Self::with_management`]).
    pub fn management(&self) -> bool {
        self.management
    }

    /// The router configuration of the effective spec, with the operator's management
    /// listener when [`Self::with_management`] added its profile: what the routers run.
    /// With it, the controller writes the live entities to the running routers
    /// ([`Rendered::with_live`](qdr_api::router_config::Rendered::with_live),
    /// docs/live-configuration.md); without it, every change rolls them.
    pub fn rendered_config(&self) -> qdr_api::router_config::Rendered {
        use qdr_api::router_config::Rendered;
        if self.management {
            Rendered::with_live(&self.router_config())
        } else {
            Rendered::from_config(&self.router_config())
        }
    }

    /// The router configuration as a model: the effective spec's, then the management
    /// listener (when [`Self::with_management`] added its profile), then each Link's
    /// sslProfile and connector ([`Self::with_links`]).
    pub fn router_config(&self) -> qdr_api::router_config::RouterConfig<'_> {
        let config = qdr_api::router_config::router_config(self.spec());
        let config = if self.management { config.with_management_listener() } else { config };
        let profiles: Vec<String> = self.site_trust.iter().map(|(p, _)| p.clone()).collect();
        config.with_links(&self.links).with_site_trust(&profiles)
    }

    /// This Interconnect with the connectors of its Links (`crate::site_links`: each
    /// valid Link's token, for this Interconnect's role), and whether its routers mount the
    /// links Secret ([`qdr_api::router_config::links_secret`]): from its first Link on, so a
    /// later Link, renewal or removal changes files only.
    pub fn with_links(mut self, links: Vec<qdr_api::router_config::LinkConnector>, mounted: bool) -> Self {
        self.links_mounted = mounted || !links.is_empty();
        self.links = links;
        self
    }

    /// This Interconnect with the addresses its AccessGrants advertise to other clusters
    /// (their `status.endpoints` hosts), sorted and unique: the names its routers'
    /// certificates carry besides the Service's (a change re-issues them, which rolls the
    /// routers as any renewal does).
    pub fn with_advertised(mut self, mut hosts: Vec<String>) -> Self {
        hosts.sort();
        hosts.dedup();
        self.advertised = hosts;
        self
    }

    /// This Interconnect letting other sites in: each `(profile, CAs)` a listener profile
    /// that trusts the sites' file of the links Secret, with the CAs of the live grants of
    /// its listener's role ([`crate::grants::sites`]). Non-empty mounts the links Secret.
    pub fn with_site_trust(mut self, trust: Vec<(String, Vec<String>)>) -> Self {
        self.links_mounted |= !trust.is_empty();
        self.site_trust = trust;
        self
    }

    /// The listener profiles that trust the sites, with the grants' CAs
    /// ([`Self::with_site_trust`]).
    pub fn site_trust(&self) -> &[(String, Vec<String>)] {
        &self.site_trust
    }

    /// The addresses its AccessGrants advertise ([`Self::with_advertised`]).
    pub fn advertised(&self) -> &[String] {
        &self.advertised
    }

    /// Whether the routers mount the links Secret ([`Self::with_links`]).
    pub fn links_mounted(&self) -> bool {
        self.links_mounted
    }

    /// The Links' connectors ([`Self::with_links`]).
    pub fn links(&self) -> &[qdr_api::router_config::LinkConnector] {
        &self.links
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

    /// `namespace/name` ([`namespaced_name`]).
    pub fn namespaced_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
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
        [(labels::APPLICATION, self.name.as_str()), (labels::INTERCONNECT, self.name.as_str())]
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
            (labels::NAME, labels::NAME_VALUE),
            (labels::INSTANCE, self.name.as_str()),
            (labels::COMPONENT, labels::COMPONENT_VALUE),
            (labels::MANAGED_BY_KEY, labels::MANAGED_BY),
        ] {
            l.insert(k.into(), v.into());
        }
        l
    }

    /// The labels every child carries that select this Interconnect's children (what
    /// pruning lists): `interconnect_cr=<name>` and `app.kubernetes.io/managed-by=qdr-operator`.
    pub fn children_labels(&self) -> [(&str, &str); 2] {
        [(labels::INTERCONNECT, self.name.as_str()), (labels::MANAGED_BY_KEY, labels::MANAGED_BY)]
    }

    /// [`Self::children_labels`] as a label-selector string.
    pub fn children_selector(&self) -> String {
        self.children_labels().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
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

    /// `<name>-users`: the default of `spec.users` and the only users Secret the controller
    /// generates (one with any other name is the user's).
    pub fn default_users_secret(&self) -> String {
        format!("{}-users", self.name)
    }

    /// Name of the router configuration ConfigMap of the start-up hash `hash` (64 hex
    /// digits, [`qdr_api::router_config::Rendered::startup_hash`]):
    /// `<name>-router-config-<first 10 digits>` ([`qdr_api::router_config::short_hash`]). Each
    /// revision of the routers mounts a ConfigMap of its own, updated in place only when the
    /// live entities change, which its routers are given while running (no other child's
    /// name, of this or another Interconnect, ends that way).
    pub fn router_config_name(&self, hash: &str) -> String {
        format!("{}{}", self.router_config_prefix(), qdr_api::router_config::short_hash(hash))
    }

    /// What every router configuration ConfigMap's name of this Interconnect starts with,
    /// `<name>-router-config-`; releases before content-addressed names used
    /// `<name>-router-config` ([`Self::legacy_router_config_name`]).
    pub fn router_config_prefix(&self) -> String {
        format!("{}-router-config-", self.name)
    }

    /// The router configuration ConfigMap of releases before content-addressed names,
    /// `<name>-router-config`, updated in place; pruned once no router mounts it.
    pub fn legacy_router_config_name(&self) -> String {
        format!("{}-router-config", self.name)
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

#[cfg(test)]
mod tests {
    use super::*;
    use qdr_api::router_config::{MANAGEMENT_PORT, MANAGEMENT_PROFILE};

    fn ic(spec: serde_json::Value) -> ValidatedInterconnect {
        let ic: Interconnect = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "mesh", "namespace": "ns", "uid": "u-1"}, "spec": spec}))
        .unwrap();
        ValidatedInterconnect::new(&ic).unwrap()
    }

    #[test]
    fn the_management_profile_is_generated_with_mutual_auth() {
        let (v, ok) = ic(serde_json::json!({})).with_management();
        ok.unwrap();
        assert!(v.management());
        let p = v.spec().ssl_profiles.iter().flatten().find(|p| p.name == MANAGEMENT_PROFILE).unwrap();
        assert_eq!(p.credentials.as_deref(), Some("mesh-qdr-operator-management-credentials"));
        assert_eq!(p.ca_cert.as_deref(), Some("mesh-qdr-operator-management-ca"));
        assert_eq!(
            (p.mutual_auth, p.generate_credentials, p.generate_ca_cert),
            (Some(true), Some(true), Some(true))
        );
        assert_eq!(qdr_api::router_config::management_ca_secret("mesh"), "mesh-qdr-operator-management-ca");
        assert_eq!(
            qdr_api::router_config::management_credentials_secret("mesh"),
            p.credentials.clone().unwrap()
        );
    }

    #[test]
    fn a_spec_in_the_way_of_the_management_listener_is_left_unread_with_why() {
        let taken = ic(serde_json::json!({"listeners": [{"port": MANAGEMENT_PORT}]}));
        let (v, why) = taken.with_management();
        let why = why.unwrap_err();
        assert!(!v.management() && why.contains("55670"), "{why}");
        assert!(v.spec().ssl_profiles.iter().flatten().all(|p| p.name != MANAGEMENT_PROFILE));
        // The profile's name is refused by validation (reserved-names): never reconciled.
        let named: Interconnect = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "mesh", "namespace": "ns", "uid": "u-1"},
            "spec": {"sslProfiles": [{"name": MANAGEMENT_PROFILE}],
                     "listeners": [{"port": 5671, "sslProfile": MANAGEMENT_PROFILE}]}}))
        .unwrap();
        let Err(ValidationError::Invalid(errors)) = ValidatedInterconnect::new(&named) else {
            panic!("a spec with the operator's profile name is valid")
        };
        assert!(errors.iter().any(|e| e.field == "spec.sslProfiles[0].name"), "{errors:?}");
    }
}
