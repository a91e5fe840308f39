//! Stage 1, **observe**: gather what one pass needs and nothing else, from the controller's
//! stores ([`crate::cache`]) where they hold it.
//!
//! * every Secret the effective spec names (the SASL users Secret, each sslProfile's
//!   `credentials` and `caCert`, the issuer CA): the whole object, or that it is missing, so
//!   that [`super::build`] can generate the missing ones, renew the generated ones and tell
//!   user-provided ones (never written) apart;
//! * the existing workload of the kind the spec asks for (its replicas, config and
//!   credentials hashes, whether its rollout is complete: for the `Scaled` and
//!   `ConfigChanged` events and for CA rotation), from its labelled store; when the store
//!   does not show it, it is left unverified (no read: apply creates it conditionally) unless
//!   a create found the name taken before, or the build must know ([`verify_workload`]);
//! * the router pods (for `status.pods`, and the scheduler's reason for each pod it could
//!   not place, from the pod's `PodScheduled=False` condition).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use qdr_api::Placement;

use super::types::{Conflict, Ownership, api_message};
use crate::builders::{CONFIG_FIELDS, CONFIG_HASH, CONFIG_ROLLED_BY, CREDENTIALS_HASH, RESTARTED_FOR, Roll};
use crate::cache::{Cache, SecretLookup};
use crate::managed_fields::Adoption;
use crate::validated::{FIELD_MANAGER, ValidatedInterconnect};

/// Why observing failed: a read of `what` (`Secret mesh-ca`, `Deployment mesh`) was
/// refused or did not reach the API server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {what}: {}", api_message(.source))]
    Read { what: String, source: kube::Error },
}

/// The workload as it exists now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadState {
    /// `spec.replicas` (Deployments only).
    pub replicas: Option<i32>,
    /// The [`CONFIG_HASH`] annotation of its pod template.
    pub config_hash: Option<String>,
    /// The [`CREDENTIALS_HASH`] annotation of its pod template.
    pub credentials_hash: Option<String>,
    /// The [`CONFIG_FIELDS`] annotation of its pod template.
    pub config_fields: Option<String>,
    /// What its pod template keeps of why the routers last rolled ([`Roll`]).
    pub roll: Roll,
    /// Whether its rollout is complete (as `kubectl rollout status` sees it): the workload
    /// controller observed the latest generation, and every wanted router runs the current
    /// template and is available, with no old router left.
    pub rolled_out: bool,
}

/// Router pods the scheduler could not place, with its reasons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unschedulable {
    /// Names of the pods (not being deleted) with `PodScheduled=False`, sorted.
    pub pods: Vec<String>,
    /// The distinct messages of those conditions (the scheduler's own words, such as
    /// `0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. ...`),
    /// sorted; a condition without a message counts as its reason.
    pub reasons: Vec<String>,
}

impl Unschedulable {
    /// Collects the unschedulable ones among `pods` (pods being deleted are skipped).
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Unschedulable {
        let mut names = Vec::new();
        let mut reasons = BTreeSet::new();
        for p in pods {
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
            let Some(c) = conditions.into_iter().flatten().find(|c| c.type_ == "PodScheduled") else {
                continue;
            };
            if c.status != "False" {
                continue;
            }
            names.push(p.name_any());
            let text = c.message.clone().filter(|m| !m.trim().is_empty());
            reasons.insert(text.or_else(|| c.reason.clone()).unwrap_or_else(|| "unknown reason".into()));
        }
        names.sort();
        Unschedulable { pods: names, reasons: reasons.into_iter().collect() }
    }

    /// Whether every router pod was placed.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// What one pass observed.
#[derive(Debug, Clone)]
pub struct Observed {
    /// When the observation was made; generated certificates are valid from here.
    pub now: SystemTime,
    /// Every Secret the spec names, by name, or `None` when it does not exist.
    pub secrets: BTreeMap<String, Option<Secret>>,
    /// Who holds the workload's name: the existing Deployment (placement Any,
    /// AntiAffinity) or DaemonSet (Every) of this Interconnect with its state, a foreign
    /// object of that kind and name, nothing, or not known (not in the store: apply creates
    /// it conditionally).
    pub workload: Ownership<WorkloadState>,
    /// Names of the router pods that are not being deleted, sorted. Here and below, only
    /// [`crate::cache::active`] pods count: one in a terminal phase (evicted, say) is no router.
    pub pods: Vec<String>,
    /// How many router pods are being deleted (old routers still shutting down).
    pub terminating: i32,
    /// Names of the router pods being deleted, sorted: their routers still serve their
    /// clients through their termination grace, so their links are kept until they are gone
    /// ([`crate::reconcile::read`]).
    pub shutting_down: Vec<String>,
    /// The router pods the scheduler could not place.
    pub unschedulable: Unschedulable,
    /// The router pods that are not being deleted, in name order, with what the mesh
    /// reader and `status.routers` need.
    pub routers: Vec<RouterPod>,
    /// The configuration (its whole hash, 64 hex digits) a router of the current template
    /// refused while running, and the visits in a row that found so, as the mesh reader
    /// counts them (`Reader::tries` of the read stage); `None` when the last visit found no
    /// refusal.
    pub live_tries: Option<(String, u32)>,
    /// The Links of this Interconnect, judged ([`crate::site_links::resolve`]), and their
    /// files for the links Secret.
    pub links: crate::site_links::Resolved,
    /// Whether a grant of this Interconnect awaits its site
    /// ([`crate::grants::awaits_site`]): the routers are read every
    /// [`crate::grants::SITE_RECHECK`] meanwhile.
    pub site_awaited: bool,
    /// The PodDisruptionBudgets of someone else's that select the routers (or take the name
    /// of the operator's), by name ([`crate::cache::Cache::admin_budgets`]).
    pub admin_budgets: Vec<String>,
    /// The NetworkPolicies of someone else's that select the routers and admit something (or
    /// take the name of the operator's), by name ([`crate::cache::Cache::admin_policies`]).
    pub admin_policies: Vec<String>,
    /// `spec.replicas` of this Interconnect's Deployment while placement `Every` replaces it
    /// (its routers serve until the DaemonSet's are Ready, so its budget stays).
    pub retiring: Option<i32>,
}

/// One router pod (not being deleted), as the mesh reader sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterPod {
    /// Its name (its router id).
    pub name: String,
    /// `status.podIP`, once it has one.
    pub ip: Option<String>,
    /// `spec.nodeName`, once scheduled.
    pub node: Option<String>,
    /// Whether it runs: its `ContainersReady` condition (or, without one, `Ready`) is
    /// `True`. Not `Ready` alone: a router's pod is Ready only once the controller found it
    /// linked (the readiness gate [`crate::builders::LINKED`]), which needs it read first.
    pub ready: bool,
    /// When that condition last changed, when it has one.
    pub ready_since: Option<SystemTime>,
    /// Whether its pod carries the readiness gate [`crate::builders::LINKED`].
    pub gated: bool,
    /// Whether its [`crate::builders::LINKED`] condition is `True` already.
    pub linked: bool,
    /// The name of the router configuration ConfigMap it mounts, if any.
    pub config_map: Option<String>,
    /// Whether the Interconnect's own workload controls it ([`owned_by_workload`]): only
    /// such pods are observed at all (read, counted, listed in `status.routers`); the
    /// labels alone prove nothing (any pod can carry them).
    pub owned: bool,
    /// Its [`crate::grants::sites::SITES_TRUST`] annotation: the sites' trust its routers
    /// were last told to read.
    pub sites_trust: Option<String>,
}

/// What makes a pod a router of one Interconnect, by uid (names prove nothing: anyone who
/// may create ReplicaSets can name one `<name>-<anything>`, and anyone who may create pods
/// can write any owner reference): the chain Interconnect → Deployment → ReplicaSet → Pod,
/// or Interconnect → DaemonSet → Pod, each link a controller reference checked against the
/// uid the stores hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workloads {
    /// The uid of the DaemonSet named like the Interconnect, when the Interconnect controls it.
    pub daemon_set: Option<String>,
    /// The ReplicaSets controlled by the Deployment named like the Interconnect (when the
    /// Interconnect controls it): name → uid.
    pub replica_sets: BTreeMap<String, String>,
}

/// The uid of the controller owner reference of `meta`, when it has one with a uid.
fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    let r = meta.owner_references.iter().flatten().find(|r| r.controller == Some(true))?;
    (!r.uid.is_empty()).then_some(r.uid.as_str())
}

impl Workloads {
    /// The chain for the Interconnect of uid `owner`, from the stores' metadata: its
    /// `deployment` and `daemon_set` (the ones named like it, with their uids) and the
    /// router ReplicaSets labelled with its name. A workload the Interconnect does not
    /// control, and a ReplicaSet that Deployment does not control, make no router.
    pub fn of(
        owner: &str,
        deployment: Option<&ObjectMeta>,
        daemon_set: Option<&ObjectMeta>,
        replica_sets: &[ObjectMeta],
    ) -> Workloads {
        let ours = |m: Option<&ObjectMeta>| {
            let m = m?;
            let uid = m.uid.as_deref().filter(|u| !u.is_empty())?;
            (!owner.is_empty() && controller_uid(m) == Some(owner)).then(|| uid.to_string())
        };
        let replica_sets = match ours(deployment) {
            None => BTreeMap::new(),
            Some(d) => replica_sets
                .iter()
                .filter(|r| controller_uid(r) == Some(d.as_str()))
                .filter_map(|r| Some((r.name.clone()?, r.uid.clone().filter(|u| !u.is_empty())?)))
                .collect(),
        };
        Workloads { daemon_set: ours(daemon_set), replica_sets }
    }
}

/// Whether pod `p`'s controller is one of `workloads`: the Interconnect's DaemonSet (by
/// uid), or a ReplicaSet its Deployment controls (by name and uid). Either kind, so the
/// routers of the old kind still count while a placement change replaces them. A pod with
/// the labels alone, or controlled by a ReplicaSet named like the Deployment's that the
/// Deployment does not control, is not a router.
pub fn owned_by_workload(p: &Pod, workloads: &Workloads) -> bool {
    let Some(r) = (p.metadata.owner_references.iter().flatten()).find(|r| r.controller == Some(true)) else {
        return false;
    };
    if r.api_version != "apps/v1" || r.uid.is_empty() {
        return false;
    }
    match r.kind.as_str() {
        "DaemonSet" => workloads.daemon_set.as_deref() == Some(r.uid.as_str()),
        "ReplicaSet" => workloads.replica_sets.get(&r.name) == Some(&r.uid),
        _ => false,
    }
}

/// The condition that says whether pod `p` runs: `ContainersReady`, or `Ready` without it
/// (a pod whose status only says Ready: simulated nodes).
fn running(p: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    let find = |t: &str| conditions.into_iter().flatten().find(|c| c.type_ == t);
    find("ContainersReady").or_else(|| find("Ready"))
}

impl RouterPod {
    /// Whether it runs and waits for its readiness gate [`crate::builders::LINKED`]: one of
    /// the Interconnect's own routers, gated, its containers ready, not linked yet.
    pub fn waits_for_gate(&self) -> bool {
        self.owned && self.gated && self.ready && !self.linked
    }

    /// What `p` shows of itself, and whether one of the Interconnect's `workloads` controls it.
    pub fn of(p: &Pod, workloads: &Workloads) -> RouterPod {
        let status = p.status.as_ref();
        let spec = p.spec.as_ref();
        RouterPod {
            name: p.name_any(),
            ip: status.and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()),
            node: spec.and_then(|s| s.node_name.clone()),
            ready: running(p).is_some_and(|c| c.status == "True"),
            ready_since: running(p)
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| SystemTime::from(t.0)),
            gated: (spec.and_then(|s| s.readiness_gates.as_ref()).into_iter().flatten())
                .any(|g| g.condition_type == crate::builders::LINKED),
            linked: (status.and_then(|s| s.conditions.as_ref()).into_iter().flatten())
                .any(|c| c.type_ == crate::builders::LINKED && c.status == "True"),
            config_map: spec
                .and_then(|s| s.volumes.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|v| v.config_map.as_ref().map(|c| c.name.clone()))
                .find(|n| n.contains("-router-config")),
            owned: owned_by_workload(p, workloads),
            sites_trust: p.annotations().get(crate::grants::sites::SITES_TRUST).cloned(),
        }
    }
}

impl Observed {
    /// The Secrets that exist, by name (what credential generation reads).
    pub fn existing_secrets(&self) -> crate::credentials::Existing {
        self.secrets.iter().filter_map(|(n, s)| Some((n.clone(), s.clone()?))).collect()
    }

    /// Whether Secret `name` was found.
    pub fn secret_exists(&self, name: &str) -> bool {
        self.secrets.get(name).is_some_and(Option::is_some)
    }
}

/// The names of every Secret the effective spec names: the users Secret, each profile's
/// `credentials` and `caCert`, and the issuer CA.
pub fn named_secrets(o: &ValidatedInterconnect) -> BTreeSet<String> {
    o.ic().secret_names()
}

fn annotation(t: &PodTemplateSpec, key: &str) -> Option<String> {
    t.metadata.as_ref()?.annotations.as_ref()?.get(key).cloned()
}

fn state(t: &PodTemplateSpec, replicas: Option<i32>, rolled_out: bool) -> WorkloadState {
    WorkloadState {
        replicas,
        config_hash: annotation(t, CONFIG_HASH),
        credentials_hash: annotation(t, CREDENTIALS_HASH),
        config_fields: annotation(t, CONFIG_FIELDS),
        roll: Roll {
            rolled_by: annotation(t, CONFIG_ROLLED_BY),
            restarted_for: annotation(t, RESTARTED_FOR),
            gated: annotation(t, crate::builders::READINESS_GATE).is_some(),
        },
        rolled_out,
    }
}

/// `kubectl rollout status` for a Deployment.
fn deployment_rolled_out(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = &d.status else { return false };
    st.observed_generation >= d.metadata.generation
        && st.updated_replicas.unwrap_or(0) >= want
        && st.replicas.unwrap_or(0) <= st.updated_replicas.unwrap_or(0)
        && st.available_replicas.unwrap_or(0) >= want
}

/// `kubectl rollout status` for a DaemonSet.
fn daemon_set_rolled_out(d: &DaemonSet) -> bool {
    let Some(st) = &d.status else { return false };
    st.observed_generation >= d.metadata.generation
        && st.updated_number_scheduled.unwrap_or(0) >= st.desired_number_scheduled
        && st.number_available.unwrap_or(0) >= st.desired_number_scheduled
}

fn read(what: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Read { what, source }
}

/// Who holds the workload's name (kind `K`, named like `o`): `o` with the workload's state
/// (through `state`) and the take-over of the Go operator's fields when it wrote them, a
/// foreign object, or nothing. `cached` is the labelled store's copy. Without one, the API
/// server is asked only when `verify` is set or a create found the name taken before
/// ([`crate::cache::Outside`]); otherwise it is [`Ownership::Unverified`], and apply's
/// conditional create decides.
async fn existing<K>(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    verify: bool,
    cached: Option<Arc<K>>,
    state: impl FnOnce(&K) -> WorkloadState,
) -> Result<Ownership<WorkloadState>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    let ns = o.namespace();
    let obj = match cached {
        Some(obj) => {
            cache.outside.remove(&kind, ns, o.name());
            obj
        }
        None if verify || cache.outside.contains(&kind, ns, o.name()) => {
            let api: Api<K> = Api::namespaced(client.clone(), ns);
            match api.get_opt(o.name()).await.map_err(read(format!("{kind} {}", o.name())))? {
                Some(obj) => Arc::new(obj),
                None => {
                    cache.outside.remove(&kind, ns, o.name());
                    return Ok(Ownership::Free);
                }
            }
        }
        None => return Ok(Ownership::Unverified),
    };
    if let Some(c) = Conflict::of(o, &kind, o.name(), obj.owner_references()) {
        return Ok(Ownership::Foreign(c));
    }
    Ok(Ownership::Ours(state(&obj), Adoption::of::<K>(obj.meta(), FIELD_MANAGER)))
}

/// Who holds the workload's name, for [`observe`] ([`existing`]).
async fn workload(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    verify: bool,
) -> Result<Ownership<WorkloadState>, Error> {
    let ns = o.namespace();
    if o.plan().placement == Some(Placement::Every) {
        existing::<DaemonSet>(client, cache, o, verify, cache.daemon_set(ns, o.name()), |d| {
            let rolled_out = daemon_set_rolled_out(d);
            state(&d.spec.clone().unwrap_or_default().template, None, rolled_out)
        })
        .await
    } else {
        existing::<Deployment>(client, cache, o, verify, cache.deployment(ns, o.name()), |d| {
            let rolled_out = deployment_rolled_out(d);
            let spec = d.spec.clone().unwrap_or_default();
            state(&spec.template, spec.replicas, rolled_out)
        })
        .await
    }
}

/// Reads the workload that `observed` left [`Ownership::Unverified`] (one GET), for a
/// pass whose build must know whether routers run (to hold them: [`super::build::Built`]).
///
/// # Errors
/// [`Error::Read`] when the read fails.
pub async fn verify_workload(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
    observed: &mut Observed,
) -> Result<(), Error> {
    observed.workload = workload(client, cache, o, true).await?;
    Ok(())
}

/// Observes what a pass over `o` needs (see the module docs), from `cache` where it holds
/// the answer: only user-provided Secrets, and a workload a create found taken, are read
/// from the API server. A workload missing from its store is [`Ownership::Unverified`].
///
/// # Errors
/// [`Error::Read`] on the first failed read.
pub async fn observe(
    client: &kube::Client,
    cache: &Cache,
    o: &ValidatedInterconnect,
) -> Result<Observed, Error> {
    let ns = o.namespace();
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut secrets = BTreeMap::new();
    for name in named_secrets(o) {
        let found = match cache.secret(ns, &name) {
            SecretLookup::Ours(s) => Some(Secret::clone(&s)),
            SecretLookup::Missing => None,
            SecretLookup::Other => {
                secrets_api.get_opt(&name).await.map_err(read(format!("Secret {name}")))?
            }
        };
        secrets.insert(name, found);
    }
    let workload = workload(client, cache, o, false).await?;
    let selector = o.selector();
    let selector: Vec<(&str, &str)> = selector.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // The pods the selector finds that the Interconnect's own workloads control, by uid: a
    // pod with the labels alone, or under a look-alike ReplicaSet, is not a router of it.
    let deployment = cache.deployment(ns, o.name());
    let daemon_set = cache.daemon_set(ns, o.name());
    let workloads = Workloads::of(
        o.uid(),
        deployment.as_deref().map(|d| &d.metadata),
        daemon_set.as_deref().map(|d| &d.metadata),
        &cache.replica_sets(ns, &selector),
    );
    let mut listed = cache.pods(ns, &selector);
    listed.retain(|p| owned_by_workload(p, &workloads) && crate::cache::active(p));
    let mut pods: Vec<String> =
        listed.iter().filter(|p| p.meta().deletion_timestamp.is_none()).map(|p| p.name_any()).collect();
    pods.sort();
    let mut shutting_down: Vec<String> =
        listed.iter().filter(|p| p.meta().deletion_timestamp.is_some()).map(|p| p.name_any()).collect();
    shutting_down.sort();
    let terminating = i32::try_from(shutting_down.len()).unwrap_or(i32::MAX);
    let unschedulable = Unschedulable::of(listed.iter());
    let mut routers: Vec<RouterPod> = listed
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .map(|p| RouterPod::of(p, &workloads))
        .collect();
    routers.sort_by(|a, b| a.name.cmp(&b.name));
    // The routers' labels: those their template gives, and those each running one carries
    // (with its workload controller's).
    let template = crate::builders::pod_labels(o);
    let labels = std::iter::once(&template).chain(listed.iter().filter_map(|p| p.metadata.labels.as_ref()));
    let admin_budgets = cache.admin_budgets(o, labels.clone());
    let admin_policies = cache.admin_policies(o, labels);
    let retiring = (o.plan().placement == Some(Placement::Every))
        .then_some(deployment.as_deref())
        .flatten()
        .filter(|d| o.controls(d.metadata.owner_references.as_deref().unwrap_or_default()))
        .map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
    Ok(Observed {
        now: SystemTime::now(),
        secrets,
        workload,
        pods,
        terminating,
        shutting_down,
        unschedulable,
        routers,
        live_tries: None,
        links: Default::default(),
        site_awaited: false,
        admin_budgets,
        admin_policies,
        retiring,
    })
}
