//! Stage 2, **build**: every child of one Interconnect, from the [`ValidatedInterconnect`], the
//! controller's [`Settings`] and what was [`Observed`]. No I/O and no clock (the time comes
//! from the observation); the only randomness is fresh key material and the generated SASL
//! password, made only for Secrets that are missing or due for renewal. The router
//! configuration is rendered once here and used for both `QDROUTERD_CONF` and the
//! pod-template hash; the mounted Secrets, as they will be after this pass, give the
//! credentials fingerprint.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use super::observe::{Observed, named_secrets};
use super::types::{Conflict, LIVE_TRIES, Ownership};
use crate::builders::{self, Budget, Exposure, Policy, Roll, Settings, Workload};
use crate::credentials::{
    self, CredentialChange, CredentialsError, Data, EXPIRY_WARNING, Routers, is_generated, is_generated_by,
};
use crate::references::{Judged, Problem, Unmet, fingerprint, judge, references, unmet};
use crate::validated::ValidatedInterconnect;
use qdr_api::router_config::Rendered;

/// Why building failed: credentials could not be issued (a named CA is missing, or
/// generation failed).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("credentials: {0}")]
    Credentials(#[from] CredentialsError),
}

/// Secrets of one Interconnect.
#[derive(Debug, Clone, PartialEq)]
pub struct Secrets {
    /// Secrets to create because they are missing (generated users and credentials).
    pub create: Vec<Secret>,
    /// Generated Secrets to rewrite (renewal, CA rotation), with the observed
    /// `resourceVersion` as precondition. User-provided Secrets are never here.
    pub update: Vec<Secret>,
    /// Every Secret the spec names (users, credentials, CAs, issuer): the ones pruning keeps.
    pub keep: BTreeSet<String>,
    /// Secrets this Interconnect would generate whose name is taken by a Secret another
    /// Interconnect generated (our label, another controller): nothing is applied.
    pub conflicts: Vec<Conflict>,
}

/// Every child of one Interconnect, and nothing else: one field per kind.
/// [`super::apply`] destructures it without `..`, so a field added here and never applied
/// does not compile.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// ServiceAccount `<name>`.
    pub service_account: ServiceAccount,
    /// Role `<name>`, for routers that read the pod list ([`builders::router_rbac`]).
    pub role: Option<Role>,
    /// RoleBinding `<name>`, with the Role.
    pub role_binding: Option<RoleBinding>,
    /// ConfigMap `<name>-router-config`: the rendered router configuration.
    pub router_config_map: ConfigMap,
    /// ConfigMap `<name>-sasl-config`, unless `users: none`.
    pub sasl_config_map: Option<ConfigMap>,
    /// Generated Secrets to create, and the Secret names to keep.
    pub secrets: Secrets,
    /// Deployment or DaemonSet `<name>`, to apply or to leave as it is.
    pub workload: WorkloadChange,
    /// PodDisruptionBudget `<name>`, when the operator makes one ([`builders::budget`]).
    pub disruption_budget: Option<PodDisruptionBudget>,
    /// NetworkPolicy `<name>`, when the operator makes one ([`builders::network_policy`]).
    pub network_policy: Option<NetworkPolicy>,
    /// Service `<name>`.
    pub service: Service,
    /// Ingresses or Routes of exposed listeners.
    pub exposure: Exposure,
    /// Secret `<name>-qdr-operator-links`, once the Interconnect has a Link
    /// ([`builders::links_secret`]).
    pub links_secret: Option<Secret>,
}

/// The workload to write, or the one to leave as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadChange {
    /// Apply this Deployment or DaemonSet (and the router configuration ConfigMap).
    Apply(Workload),
    /// Leave the existing workload and its router configuration as they are: a Secret the
    /// new pods would mount is missing, and they would wait in `ContainerCreating` while the
    /// rollout removes working routers. Carries what would have been applied (its kind and
    /// name are kept from pruning).
    Hold(Workload),
}

impl WorkloadChange {
    /// The built workload, applied or held.
    pub fn built(&self) -> &Workload {
        match self {
            WorkloadChange::Apply(w) | WorkloadChange::Hold(w) => w,
        }
    }
}

/// What a build made that is reported (status, Events) rather than applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The router configuration the workload runs, rendered once (its hash is in the pod
    /// template).
    pub config: Rendered,
    /// `spec.replicas` of the Deployment (`None` for a DaemonSet).
    pub replicas: Option<i32>,
    /// What the credentials look like after this pass.
    pub credentials: CredentialsReport,
    /// Why the routers last rolled, as the pod template keeps it ([`roll`]).
    pub roll: Roll,
    /// What the operator does about the routers' PodDisruptionBudget.
    pub budget: Budget,
    /// What the operator does about the routers' NetworkPolicy.
    pub policy: Policy,
}

/// The result of [`build`]: the children to apply and what to report.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    /// What [`super::apply`] writes.
    pub children: Children,
    /// What [`super::status`] and [`super::events`] report.
    pub report: Report,
    /// Whether this build must be made again once the workload is read
    /// ([`super::observe::verify_workload`]): it would hold running routers (a Secret they
    /// would mount is missing or invalid) but the workload is [`Ownership::Unverified`], so
    /// it was built as if none ran.
    pub verify_workload: bool,
}

/// The state of the Secrets an Interconnect depends on, after this pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CredentialsReport {
    /// Generated credentials renewed or rotated by this pass.
    pub changes: Vec<CredentialChange>,
    /// Secrets the spec references that are missing or lack keys the router reads.
    pub unmet: Vec<Unmet>,
    /// Secrets that exist with their keys but hold an expired or invalid certificate, or a
    /// key of another certificate.
    pub problems: Vec<Judged>,
    /// User-provided certificates that expire within [`EXPIRY_WARNING`]: the Secret and
    /// a line saying so.
    pub expiring: Vec<(String, String)>,
    /// The earliest expiry of any certificate the routers mount.
    pub earliest_expiry: Option<SystemTime>,
    /// When the next generated certificate or CA reaches its renew point.
    pub next_renewal: Option<SystemTime>,
    /// The fingerprint of the mounted Secrets (the pod template's credentials hash).
    pub fingerprint: String,
}

/// The `caCert` Secrets of `o`'s profiles that are generated CAs (our label, a trust bundle
/// in `ca.crt`), of this or another Interconnect, where the configuration would read
/// `tls.crt`: the routers trust the whole bundle ([`builders::pod_template`]), so a rotation
/// of that CA keeps them trusting its leaves at every step.
pub(crate) fn trusted_bundles(
    o: &ValidatedInterconnect,
    existing: &credentials::Existing,
) -> BTreeSet<String> {
    o.spec()
        .ssl_profiles
        .iter()
        .flatten()
        .filter(|p| p.generate_ca_cert != Some(true))
        .filter_map(|p| p.ca_cert.clone())
        .filter(|ca| {
            existing
                .get(ca)
                .is_some_and(|s| is_generated(s) && s.data.as_ref().is_some_and(|d| d.contains_key("ca.crt")))
        })
        .collect()
}

/// `s` without this Interconnect's owner reference (everything else kept), for a `PUT` with
/// its `resourceVersion` as precondition.
fn disowned(o: &ValidatedInterconnect, mut s: Secret) -> Secret {
    s.metadata.managed_fields = None;
    if let Some(refs) = s.metadata.owner_references.as_mut() {
        refs.retain(|r| r.uid != o.uid());
    }
    s
}

fn password() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..16).map(|_| rng.sample(rand::distr::Alphanumeric) as char).collect()
}

/// What the pod template keeps of why the routers last rolled, after this pass ([`Roll`]):
/// * `rolled_by`: when the start-up hash changes, the spec fields whose digest changed
///   ([`rolled_by`]); else what the observed template says;
/// * `restarted_for`: the configuration a router refused while running at [`LIVE_TRIES`]
///   visits in a row, when that is the desired one; else what the observed
///   template says (so they roll once for it, and never back).
///
/// Nothing for a new workload: it starts from the configuration.
pub(crate) fn roll(observed: &Observed, config: &Rendered) -> Roll {
    // A new workload's routers are gated from the start.
    let Some(old) = observed.workload.ours() else { return Roll { gated: true, ..Roll::default() } };
    let rolled_by = match &old.config_hash {
        Some(h) if *h != config.startup_hash => {
            Some(rolled_by(old.config_fields.as_deref(), &config.startup_fields))
        }
        _ => old.roll.rolled_by.clone(),
    };
    let due = (observed.live_tries.as_ref())
        .filter(|(hash, tries)| config.live && *hash == config.hash && *tries >= LIVE_TRIES);
    let restarted_for = match due {
        Some((hash, _)) => Some(qdr_api::router_config::short_hash(hash).to_string()),
        None => old.roll.restarted_for.clone(),
    };
    // An existing workload gets the gate only with a roll it makes anyway (a start-up
    // configuration change, a restart for a refused one, a template without the
    // configuration hash: the Go operator's, adopted): never a roll for the gate alone.
    let rolls = old.config_hash.as_deref() != Some(config.startup_hash.as_str())
        || restarted_for != old.roll.restarted_for;
    Roll { rolled_by, restarted_for, gated: old.roll.gated || rolls }
}

/// What changed between the [`CONFIG_FIELDS`](crate::builders::CONFIG_FIELDS) digests
/// `old` (`None`: a template that did not keep them) and `new`: the changed fields joined by
/// `, ` (`spec.edgeListeners`, `spec.deploymentPlan.role, spec.sslProfiles`), or `the router
/// configuration` when no field can be named.
pub(crate) fn rolled_by(old: Option<&str>, new: &str) -> String {
    let fields = old.map(|o| qdr_api::router_config::live::changed_fields(o, new)).unwrap_or_default();
    if fields.is_empty() { UNNAMED_CHANGE.into() } else { fields.join(", ") }
}

/// What [`rolled_by`] says when no field can be named.
pub(crate) const UNNAMED_CHANGE: &str = "the router configuration";

/// Seals the management Secrets ([`crate::credentials::seal`]) this pass writes (in
/// `create` and `update`), and has those it does not write but that are to be sealed
/// again (written before the seal key's Secret was made) written as they are, sealed.
fn seal_management(
    o: &ValidatedInterconnect,
    settings: &Settings,
    existing: &crate::credentials::Existing,
    create: &mut [Secret],
    update: &mut Vec<Secret>,
) {
    use crate::credentials::seal;
    let (key, ns, owner) = (&settings.seal_key, o.namespace(), o.uid());
    let names =
        [crate::mesh::management::ca_secret(o.name()), crate::mesh::management::credentials_secret(o.name())];
    for s in create.iter_mut().chain(update.iter_mut()) {
        if s.metadata.name.as_ref().is_some_and(|n| names.contains(n)) {
            *s = seal::sealed(key, ns, owner, std::mem::take(s));
        }
    }
    for name in &names {
        let written = create.iter().chain(update.iter()).any(|s| s.metadata.name.as_ref() == Some(name));
        if let Some(s) = existing.get(name).filter(|_| !written)
            && is_generated_by(s, o)
            && seal::needs_sealing_again(key, ns, owner, s)
        {
            update.push(seal::sealed(key, ns, owner, crate::credentials::as_is(o, s)));
        }
    }
}

/// Builds every child of `o`, and what is reported about them.
///
/// # Errors
/// [`Error::Credentials`] when a certificate cannot be generated.
pub fn build(o: &ValidatedInterconnect, settings: &Settings, observed: &Observed) -> Result<Built, Error> {
    let router_config = o.rendered_config();
    let existing = observed.existing_secrets();
    let running = observed.workload.ours().filter(|w| w.rolled_out).and_then(|w| w.credentials_hash.clone());
    let bundles = trusted_bundles(o, &existing);
    let refs = references(o, &bundles);
    let observed_data: BTreeMap<String, Data> =
        existing.iter().map(|(n, s)| (n.clone(), s.data.clone().unwrap_or_default())).collect();
    let rolled_out = running.is_some_and(|h| h == fingerprint(&settings.hash_key, &refs, &observed_data));
    // Routers running this very configuration mount every Secret it names.
    let routers = match observed.workload.ours() {
        Some(w) if w.config_hash.as_ref() != Some(&router_config.startup_hash) => Routers::Unknown,
        None => Routers::Unknown,
        Some(_) if rolled_out => Routers::RolledOut,
        Some(_) => Routers::Rolling,
    };
    let mut plan = credentials::plan(o, &existing, observed.now, settings.lifetimes, routers)?;
    let mut create = plan.create;
    // Only the default users Secret is generated. One the user named is theirs: a missing one
    // is reported like any missing Secret (it may be applied right after the Interconnect),
    // never created, owned or pruned; one an earlier release created and owns is released,
    // so that deleting the Interconnect or renaming `spec.users` no longer deletes it.
    match o.users_secret() {
        Some(users) if users == o.default_users_secret() && !observed.secret_exists(&users) => {
            create.push(builders::users_secret(o, &users, &password()));
            if observed.workload.ours().is_some() {
                plan.changes.push(CredentialChange::PasswordsChanged(users));
            }
        }
        Some(users) if users != o.default_users_secret() => {
            if let Some(owned) = observed.secrets.get(&users).cloned().flatten()
                && o.controls(owned.metadata.owner_references.as_deref().unwrap_or_default())
            {
                plan.update.push(disowned(o, owned));
            }
        }
        _ => {}
    }
    seal_management(o, settings, &existing, &mut create, &mut plan.update);
    let conflicts = credentials::generated(o)
        .into_iter()
        .filter_map(|(name, _)| {
            let s = existing.get(&name).filter(|s| is_generated(s) && !is_generated_by(s, o))?;
            Conflict::of(o, "Secret", &name, s.metadata.owner_references.as_deref().unwrap_or_default())
        })
        .fold(Vec::<Conflict>::new(), |mut all, c| {
            if !all.contains(&c) {
                all.push(c);
            }
            all
        });
    // The Secrets as they will be once this pass is applied.
    let mut after = observed_data;
    for s in create.iter().chain(&plan.update) {
        after.insert(s.metadata.name.clone().unwrap_or_default(), s.data.clone().unwrap_or_default());
    }
    let credentials_hash = fingerprint(&settings.hash_key, &refs, &after);
    let mounted: Vec<&Data> =
        refs.iter().filter(|r| r.mounted).filter_map(|r| after.get(&r.secret)).collect();
    let expiring = refs
        .iter()
        .filter(|r| r.mounted && existing.get(&r.secret).is_some_and(|s| !is_generated_by(s, o)))
        .filter_map(|r| {
            let until = credentials::earliest_expiry([after.get(&r.secret)?])?;
            // Expired is a problem of its own (`CertificateExpired`), not a warning.
            let left = until.duration_since(observed.now).ok().filter(|l| !l.is_zero())?;
            (left < EXPIRY_WARNING).then(|| {
                let line = format!(
                    "the certificate in Secret {} ({}) expires in {}: it is user-provided, so the operator does \
                     not renew it",
                    r.secret,
                    r.field,
                    crate::human::duration(left)
                );
                (r.secret.clone(), line)
            })
        })
        .collect();
    let credentials = CredentialsReport {
        changes: plan.changes,
        unmet: unmet(&refs, &after),
        problems: judge(&refs, &after, observed.now),
        expiring,
        earliest_expiry: credentials::earliest_expiry(mounted),
        next_renewal: plan.next_renewal,
        fingerprint: credentials_hash.clone(),
    };
    // The Links' files, and the trust files of the listeners that let sites in.
    let mut links_files = observed.links.files.clone();
    links_files.extend(crate::grants::sites::trust_files(o, &after));
    let roll = roll(observed, &router_config);
    let workload = builders::workload(o, settings, &router_config, &credentials_hash, &bundles, &roll);
    // A missing or invalid Secret never rolls existing routers onto pods that cannot start:
    // the pod template keeps its last mountable state until every Secret it mounts exists
    // again with what the router reads.
    let invalid = credentials.problems.iter().any(|j| matches!(j.problem, Problem::Invalid(_)));
    let unmountable = !credentials.unmet.is_empty() || invalid;
    // Routers run when the workload of the spec's kind is ours, or, after a placement change
    // (Deployment ↔ DaemonSet), when router pods of the other kind still run: those are held
    // too, never replaced by a kind whose pods could not start.
    let hold = unmountable && (observed.workload.ours().is_some() || !observed.pods.is_empty());
    let verify_workload = unmountable && matches!(observed.workload, Ownership::Unverified);
    let replicas = match &workload {
        Workload::Deployment(d) => d.spec.as_ref().and_then(|s| s.replicas),
        Workload::DaemonSet(_) => None,
    };
    let (budget, disruption_budget) = builders::budget(o, observed.retiring, &observed.admin_budgets);
    let (policy, network_policy) = builders::network_policy(o, settings, &observed.admin_policies);
    let (role, role_binding) = builders::router_rbac(o).unzip();
    let children = Children {
        service_account: builders::service_account(o),
        role,
        role_binding,
        router_config_map: builders::router_config_map(o, &router_config),
        sasl_config_map: builders::sasl_config_map(o),
        secrets: Secrets { create, update: plan.update, keep: named_secrets(o), conflicts },
        workload: if hold { WorkloadChange::Hold(workload) } else { WorkloadChange::Apply(workload) },
        disruption_budget,
        network_policy,
        service: builders::service(o),
        exposure: builders::exposure(o, settings),
        links_secret: builders::links_secret(o, &links_files),
    };
    Ok(Built {
        children,
        report: Report { config: router_config, replicas, credentials, roll, budget, policy },
        verify_workload,
    })
}
