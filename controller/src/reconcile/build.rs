//! Stage 2, **build**: every child of one Interconnect, from the [`Owner`], the
//! controller's [`Settings`] and what was [`Observed`]. No I/O and no clock (the time comes
//! from the observation); the only randomness is fresh key material and the generated SASL
//! password, made only for Secrets that are missing. The router configuration is rendered
//! once here and used for both `QDROUTERD_CONF` and the pod-template hash.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use super::observe::{Observed, named_secrets};
use crate::builders::{self, Exposure, Settings, Workload};
use crate::credentials::{self, CredentialsError};
use crate::owner::Owner;
use crate::router_config::Rendered;

/// Why building failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Credentials could not be issued (a named CA is missing, or generation failed).
    #[error("credentials: {0}")]
    Credentials(#[from] CredentialsError),
}

/// Secrets of one Interconnect.
#[derive(Debug, Clone, PartialEq)]
pub struct Secrets {
    /// Secrets to create because they are missing (generated users and credentials);
    /// existing Secrets are never written.
    pub create: Vec<Secret>,
    /// Every Secret the spec names (users, credentials, CAs, issuer): the ones pruning keeps.
    pub keep: BTreeSet<String>,
}

/// Every child of one Interconnect: one field per kind. [`super::apply`] destructures it
/// without `..`, so a field added here and never applied does not compile.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// ServiceAccount `<name>`.
    pub service_account: ServiceAccount,
    /// Role `<name>`.
    pub role: Role,
    /// RoleBinding `<name>`.
    pub role_binding: RoleBinding,
    /// ConfigMap `<name>-sasl-config`, unless `users: none`.
    pub sasl_config_map: Option<ConfigMap>,
    /// Generated Secrets to create, and the Secret names to keep.
    pub secrets: Secrets,
    /// Deployment or DaemonSet `<name>`.
    pub workload: Workload,
    /// Service `<name>`.
    pub service: Service,
    /// Ingresses or Routes of exposed listeners.
    pub exposure: Exposure,
    /// The router configuration the workload runs, rendered once.
    pub router_config: Rendered,
}

fn password() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..16).map(|_| rng.sample(rand::distr::Alphanumeric) as char).collect()
}

/// Builds every child of `o`.
///
/// # Errors
/// [`Error::Credentials`] when a credential cannot be issued.
pub fn build(o: &Owner, settings: &Settings, observed: &Observed) -> Result<Children, Error> {
    let router_config = Rendered::of(o.spec());
    let mut create = Vec::new();
    if let Some(users) = o.users_secret().filter(|u| !observed.secret_exists(u)) {
        create.push(builders::users_secret(o, &users, &password()));
    }
    create.extend(credentials::missing_secrets(o, &observed.existing_secrets(), observed.now)?);
    Ok(Children {
        service_account: builders::service_account(o),
        role: builders::role(o),
        role_binding: builders::role_binding(o),
        sasl_config_map: builders::sasl_config_map(o),
        secrets: Secrets { create, keep: named_secrets(o) },
        workload: builders::workload(o, settings, &router_config),
        service: builders::service(o),
        exposure: builders::exposure(o, settings),
        router_config,
    })
}
