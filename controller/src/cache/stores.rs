//! The in-memory stores observe and apply read instead of the API server ([`Cache`]), and
//! the kinds that have one ([`Cached`]). It owns the lookups; it does not watch (that is
//! [`super::watch`], which fills these stores) and does not decide wake-ups ([`super::wake`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::Store;
use qdr_api::Interconnect;

use super::memo::{AppliedMemo, Drift, Outside, OwnWrites};
use super::meta_store::{DaemonSetStore, DeploymentStore, MetaStore, PodStore, ReplicaSetStore, SecretStore};
use super::names::SecretNames;
use super::written::Written;

#[derive(Clone)]
pub(crate) struct Cache {
    pub(super) deployments: DeploymentStore,
    pub(super) daemon_sets: DaemonSetStore,
    /// Router pods (label `interconnect_cr`): what observing them reads
    /// ([`super::meta_store::StoredPod`]).
    pub(super) pods: PodStore,
    /// Router ReplicaSets (label `interconnect_cr`, metadata only): the link from a
    /// Deployment to its pods, by uid.
    pub(super) replica_sets: ReplicaSetStore,
    /// Secrets labelled ours (generated ones): metadata, type and data ([`meta_store`]).
    pub(super) secrets: SecretStore,
    pub(super) secret_names: Arc<SecretNames>,
    pub(super) service_accounts: MetaStore<ServiceAccount>,
    pub(super) roles: MetaStore<Role>,
    pub(super) role_bindings: MetaStore<RoleBinding>,
    pub(super) services: MetaStore<Service>,
    pub(super) config_maps: MetaStore<ConfigMap>,
    pub(super) ingresses: MetaStore<Ingress>,
    pub(super) disruption_budgets: MetaStore<PodDisruptionBudget>,
    /// Every PodDisruptionBudget of the watched namespaces, labelled ours or not, with only
    /// its name, labels, owners and selector ([`super::slim::slim_budget`]): an admin's that
    /// selects an Interconnect's routers makes the controller make none
    /// ([`crate::builders::budget`]).
    pub(super) all_budgets: Store<PodDisruptionBudget>,
    pub(super) network_policies: MetaStore<NetworkPolicy>,
    /// Every NetworkPolicy of the watched namespaces, labelled ours or not, with only its
    /// name, labels, owners, pod selector, policy types and whether it admits anything
    /// ([`super::slim::slim_policy`]): an admin's that selects an Interconnect's routers and
    /// admits something makes the controller make none ([`crate::builders::network_policy`]).
    pub(super) all_policies: Store<NetworkPolicy>,
    /// Every Link of the watched namespaces ([`qdr_api::links::Link`], whole): a Link
    /// renders a connector into its Interconnect's routers.
    pub(super) links: Store<qdr_api::links::Link>,
    /// The token Secrets ([`qdr_api::links::token::TOKEN_LABEL`]), whole: a Link's token is
    /// read from here.
    pub(super) tokens: Store<Secret>,
    /// Every AccessGrant of the watched namespaces, whole: the addresses a grant advertises
    /// are names of its Interconnect's certificates, and the site connections its routers
    /// report are the grant's status.
    pub(super) grants: Store<qdr_api::links::AccessGrant>,
    /// Deployments written in this term, until the store catches up.
    pub(crate) written_deployments: Arc<Written<Deployment>>,
    /// DaemonSets written in this term, until the store catches up.
    pub(crate) written_daemon_sets: Arc<Written<DaemonSet>>,
    /// Secrets created or replaced in this term, until the store catches up.
    pub(crate) written_secrets: Arc<Written<Secret>>,
    /// Interconnects whose status was written in this term, until the store catches up
    /// ([`Cache::status_written`]).
    pub(crate) written_interconnects: Arc<Written<Interconnect>>,
    /// The Interconnects, as the reconcile's own watch keeps them.
    pub(super) interconnects: Store<Interconnect>,
    /// The `resourceVersion` of the controller's last write of each child (echo detection).
    pub(crate) own: Arc<OwnWrites>,
    /// Interconnects whose children changed under them since their last full apply.
    pub(crate) drift: Arc<Drift>,
    /// The last full apply of each Interconnect in this term.
    pub(crate) applied: Arc<AppliedMemo>,
    /// Children's names held by objects the stores do not show: read by name before a
    /// write (a create found them taken).
    pub(crate) outside: Arc<Outside>,
    /// Set once every store has listed ([`Cache::is_ready`]).
    pub(super) listed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").finish_non_exhaustive()
    }
}

/// A child kind the controller keeps a labelled store of: the typed lookup of
/// [`Cache::meta`] and [`Cache::labelled`]. A kind without an implementation has no store,
/// so code that would look one up does not compile.
pub(crate) trait Cached: Resource<DynamicType = (), Scope = NamespaceResourceScope> {
    /// The metadata of the stored `ns/name`.
    fn stored_meta(cache: &Cache, ns: &str, name: &str) -> Option<ObjectMeta>;
    /// The metadata of every stored object in `ns` carrying every `selector` label.
    fn stored_labelled(cache: &Cache, ns: &str, selector: &[(&str, &str)]) -> Vec<ObjectMeta>;
}

macro_rules! cached {
    ($($kind:ty => $field:ident),* $(,)?) => {
        $(
            impl Cached for $kind {
                fn stored_meta(cache: &Cache, ns: &str, name: &str) -> Option<ObjectMeta> {
                    cache.$field.get(ns, name)
                }
                fn stored_labelled(cache: &Cache, ns: &str, selector: &[(&str, &str)]) -> Vec<ObjectMeta> {
                    cache.$field.labelled(ns, selector)
                }
            }
        )*
    };
}

cached! {
    Deployment => deployments,
    DaemonSet => daemon_sets,
    Secret => secrets,
    ServiceAccount => service_accounts,
    Role => roles,
    RoleBinding => role_bindings,
    Service => services,
    ConfigMap => config_maps,
    Ingress => ingresses,
    PodDisruptionBudget => disruption_budgets,
    NetworkPolicy => network_policies,
}

/// What the stores know of a Secret.
#[derive(Debug, Clone)]
pub(crate) enum SecretLookup {
    /// Labelled ours: the whole object.
    Ours(Arc<Secret>),
    /// It exists without our label (user-provided): read it to use it.
    Other,
    /// No Secret of that name exists.
    Missing,
}

impl Cache {
    /// Keeps `written`, the answer to a status write of this term, for read-your-writes
    /// until the store shows it ([`Written::record_seen`]: at once when its watch event came
    /// before the answer).
    pub(crate) fn status_written(&self, written: Interconnect) {
        let key = kube::runtime::reflector::ObjectRef::from_obj(&written);
        let stored = self.interconnects.get(&key);
        self.written_interconnects.record_seen(written, stored.as_deref());
    }

    /// Whether every store holds its first complete list (a reconcile before that could
    /// take a missing entry for a missing object). Not awaited by reconciles: the stores
    /// fill only while the controller polls its watches, which it stops doing while every
    /// reconcile slot is taken.
    pub(crate) fn is_ready(&self) -> bool {
        if self.listed.load(Ordering::Relaxed) {
            return true; // a store, once listed, stays complete (relists swap in whole)
        }
        let compact = self.deployments.is_ready()
            && self.daemon_sets.is_ready()
            && self.replica_sets.is_ready()
            && self.secrets.is_ready()
            && self.service_accounts.is_ready()
            && self.roles.is_ready()
            && self.role_bindings.is_ready()
            && self.services.is_ready()
            && self.config_maps.is_ready()
            && self.ingresses.is_ready()
            && self.disruption_budgets.is_ready()
            && self.network_policies.is_ready();
        let ready = compact
            && self.secret_names.is_ready()
            && futures::FutureExt::now_or_never(self.all_budgets.wait_until_ready()).is_some()
            && futures::FutureExt::now_or_never(self.all_policies.wait_until_ready()).is_some()
            && futures::FutureExt::now_or_never(self.links.wait_until_ready()).is_some()
            && futures::FutureExt::now_or_never(self.tokens.wait_until_ready()).is_some()
            && futures::FutureExt::now_or_never(self.grants.wait_until_ready()).is_some()
            && self.pods.is_ready();
        if ready {
            self.listed.store(true, Ordering::Relaxed);
        }
        ready
    }

    /// The PodDisruptionBudgets of namespace `ns` that `o` does not control and that take
    /// the name of its own or select a pod labelled `labels` (a router's), by name: the
    /// cluster admin's, which the operator never fights ([`crate::builders::budget`]). A
    /// budget whose selector does not parse (it could not have been stored) selects nothing.
    pub(crate) fn admin_budgets<'a>(
        &self,
        o: &crate::validated::ValidatedInterconnect,
        labels: impl IntoIterator<Item = &'a std::collections::BTreeMap<String, String>> + Clone,
    ) -> Vec<String> {
        use kube::core::{Selector, SelectorExt};
        let mut names: Vec<String> = (self.all_budgets.state().iter())
            .filter(|p| p.metadata.namespace.as_deref() == Some(o.namespace()))
            .filter(|p| !o.controls(p.metadata.owner_references.as_deref().unwrap_or_default()))
            .filter(|p| {
                let selector = p.spec.as_ref().and_then(|s| s.selector.clone());
                let selects = selector
                    .and_then(|s| Selector::try_from(s).ok())
                    .is_some_and(|s| labels.clone().into_iter().any(|l| s.matches(l)));
                selects || p.metadata.name.as_deref() == Some(o.name())
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    /// The NetworkPolicies of `o`'s namespace that `o` does not control and that take the
    /// name of its own, or that select a pod labelled `labels` (a router's), govern its
    /// ingress (`policyTypes` absent or naming `Ingress`) and admit something (at least one
    /// ingress rule), by name: the cluster admin's, which the operator never widens
    /// ([`crate::builders::network_policy`]). A policy that admits nothing (a default deny)
    /// is left out: the operator's policy is what opens the routers' ports under it. A
    /// selector that does not parse (it could not have been stored) selects nothing.
    pub(crate) fn admin_policies<'a>(
        &self,
        o: &crate::validated::ValidatedInterconnect,
        labels: impl IntoIterator<Item = &'a std::collections::BTreeMap<String, String>> + Clone,
    ) -> Vec<String> {
        use kube::core::{Selector, SelectorExt};
        let mut names: Vec<String> = (self.all_policies.state().iter())
            .filter(|p| p.metadata.namespace.as_deref() == Some(o.namespace()))
            .filter(|p| !o.controls(p.metadata.owner_references.as_deref().unwrap_or_default()))
            .filter(|p| {
                if p.metadata.name.as_deref() == Some(o.name()) {
                    return true;
                }
                let Some(spec) = p.spec.as_ref() else { return false };
                let ingress = spec.policy_types.as_ref().is_none_or(|t| t.iter().any(|t| t == "Ingress"));
                let admits = spec.ingress.as_ref().is_some_and(|rules| !rules.is_empty());
                let selects = (spec.pod_selector.clone())
                    .and_then(|s| Selector::try_from(s).ok())
                    .is_some_and(|s| labels.clone().into_iter().any(|l| s.matches(l)));
                ingress && admits && selects
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    /// The Links of namespace `ns` that name Interconnect `name`, by name, each with its
    /// token Secret when the store has it.
    pub(crate) fn links_of(
        &self,
        ns: &str,
        name: &str,
    ) -> Vec<(Arc<qdr_api::links::Link>, Option<Arc<Secret>>)> {
        let mut links: Vec<_> = (self.links.state().into_iter())
            .filter(|l| l.metadata.namespace.as_deref() == Some(ns) && l.spec.interconnect == name)
            .map(|l| {
                let token = self
                    .tokens
                    .get(&kube::runtime::reflector::ObjectRef::new(&l.spec.token_secret).within(ns));
                (l, token)
            })
            .collect();
        links.sort_by(|a, b| a.0.metadata.name.cmp(&b.0.metadata.name));
        links
    }

    /// The AccessGrants of namespace `ns` that name Interconnect `name`, by name.
    pub(crate) fn grants_of(&self, ns: &str, name: &str) -> Vec<Arc<qdr_api::links::AccessGrant>> {
        let mut grants: Vec<_> = (self.grants.state().into_iter())
            .filter(|g| g.metadata.namespace.as_deref() == Some(ns) && g.spec.interconnect == name)
            .collect();
        grants.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        grants
    }

    /// Secret `ns/name` as far as the stores know it.
    pub(crate) fn secret(&self, ns: &str, name: &str) -> SecretLookup {
        let stored = self.secrets.object(ns, name);
        let in_store = stored.is_some();
        match self.written_secrets.pick(ns, name, stored.map(Arc::new)) {
            Some(s) => SecretLookup::Ours(s),
            // The store shows it and `pick` hid it: deleted by a pass that ended early, and
            // the watch has not delivered that yet (the names' index still lists it too).
            None if in_store => SecretLookup::Missing,
            None if self.secret_names.contains(ns, name) => SecretLookup::Other,
            None => SecretLookup::Missing,
        }
    }

    /// The metadata of the labelled child `ns/name` of kind `K`, or `None` when it is not
    /// in the store (it may still exist without our label).
    pub(crate) fn meta<K: Cached>(&self, ns: &str, name: &str) -> Option<ObjectMeta> {
        K::stored_meta(self, ns, name)
    }

    /// The metadata of every stored object of kind `K` in `ns` carrying all the `selector`
    /// labels.
    pub(crate) fn labelled<K: Cached>(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<ObjectMeta> {
        K::stored_labelled(self, ns, selector)
    }

    /// Deployment `ns/name` labelled ours: the store's copy, or the one just written.
    pub(crate) fn deployment(&self, ns: &str, name: &str) -> Option<Arc<Deployment>> {
        self.written_deployments.pick(ns, name, self.deployments.object(ns, name).map(Arc::new))
    }

    /// DaemonSet `ns/name` labelled ours: the store's copy, or the one just written.
    pub(crate) fn daemon_set(&self, ns: &str, name: &str) -> Option<Arc<DaemonSet>> {
        self.written_daemon_sets.pick(ns, name, self.daemon_sets.object(ns, name).map(Arc::new))
    }

    /// The metadata (with uid and controller reference) of the router ReplicaSets in `ns`
    /// carrying every `selector` label.
    pub(crate) fn replica_sets(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<ObjectMeta> {
        self.replica_sets.labelled(ns, selector)
    }

    /// The router pods in `ns` carrying every `selector` label, as far as the store keeps
    /// them ([`super::meta_store::StoredPod`]).
    pub(crate) fn pods(&self, ns: &str, selector: &[(&str, &str)]) -> Vec<Pod> {
        self.pods.objects(ns, selector)
    }

    /// The ConfigMaps the pods of `selector` in `ns` mount (terminating pods too: they still
    /// run; not pods in a terminal phase, which never run again:
    /// [`super::active`]), by name.
    pub(crate) fn mounted_config_maps(
        &self,
        ns: &str,
        selector: &[(&str, &str)],
    ) -> std::collections::BTreeSet<String> {
        self.pods(ns, selector)
            .iter()
            .filter(|p| super::active(p))
            .filter_map(|p| p.spec.as_ref()?.volumes.as_ref())
            .flatten()
            .filter_map(|v| Some(v.config_map.as_ref()?.name.clone()))
            .collect()
    }
}
