//! What the controller watches and keeps in memory, and which events wake a reconcile.
//!
//! Every owned kind is watched **only through the operator's label**
//! (`app.kubernetes.io/managed-by=qdr-operator`), so unrelated Secrets, ConfigMaps, Services,
//! ServiceAccounts and Roles of the cluster neither reach the controller nor take memory:
//!
//! | kind | watch | kept |
//! |---|---|---|
//! | Interconnect | all | full object |
//! | Deployment, DaemonSet | labelled ours | replicas, the pod template's annotations (config and credentials hashes), status counts, metadata as below ([`meta_store`]) |
//! | Secret | labelled ours | data (equal values kept once), type, owner references, the labels lookups select by, the rotation-step annotation ([`meta_store`]; a rewrite reads the rest first) |
//! | Secret | all, metadata only | name only (user-provided Secrets a spec names: existence, and a wake-up when one appears or is renewed) |
//! | Pod | label `interconnect_cr` | name, the labels lookups select by, controller owner reference, `deletionTimestamp`, the sites' trust annotation, node, mounted ConfigMaps, readiness gates, pod IP and the readiness, scheduling and linked conditions ([`meta_store::StoredPod`]) |
//! | ReplicaSet | label `interconnect_cr`, metadata only | name, uid, the labels lookups select by, controller owner reference: a pod is a router only through its own workload's uids ([`crate::reconcile::observe::Workloads`]); one appearing or going wakes its Interconnect |
//! | ServiceAccount, Role, RoleBinding, Service, ConfigMap, Ingress, PodDisruptionBudget, NetworkPolicy | labelled ours, metadata only | name, the labels lookups select by, controller owner reference, `resourceVersion`, `generation`, `deletionTimestamp` ([`meta_store`]) |
//! | PodDisruptionBudget | all but the Interconnects' own (`watch::interconnect_child`) | name, labels, owner references and selector ([`slim::slim_budget`]): an admin's that selects an Interconnect's routers makes the controller make none, and one appearing, changing or going wakes the Interconnects of its namespace |
//! | NetworkPolicy | all but the Interconnects' own | name, labels, owner references, pod selector, policy types and whether it has an ingress rule ([`slim::slim_policy`]): an admin's that selects an Interconnect's routers and admits something makes the controller make none, and one appearing, changing or going wakes the Interconnects of its namespace |
//!
//! No store keeps `managedFields`; only the Interconnects keep annotations (and the Secrets
//! their CA rotation-step annotation: replacing a generated Secret reads it first, to keep
//! what others added to its metadata).
//!
//! Observe and apply read these stores instead of the API server: a pass makes no reads at
//! all, not even for a new Interconnect. A child missing from its labelled store is created
//! with a conditional server-side apply, which the API server refuses when any object holds
//! the name (one without our label: a user's, or one the Go operator wrote); only then is it
//! read, and the name remembered ([`Outside`]) so later passes read it before writing: the
//! ownership rule of [`crate::reconcile::apply`] holds.
//! Each cached kind implements [`Cached`], which names its store: asking for a kind without
//! a store does not compile (Routes, not watched, are always read from the API server, by
//! name).
//!
//! **Wake-ups** ([`wake`]): the controller's own writes do not wake it. An event on a child
//! carrying the `resourceVersion` the controller's own last write of it returned
//! ([`OwnWrites`]) is its echo and is dropped (an event seen while a write of that object
//! is in flight is held until the write's answer tells which it is); any other version
//! wakes the owner and is drift unless only a workload's status moved; deletions always wake, including those a
//! relist finds ([`wake::Relist`]). An Interconnect wakes its reconcile only when its
//! `metadata.generation` changes (not on the controller's own status writes); a router pod
//! only when its phase, readiness, scheduling or deletion changes. So no debounce is needed
//! and a spec change is reconciled at once.
//!
//! The files: [`stores`] holds the stores and their lookups; [`watch`] sets the watches and
//! fills the stores; [`written`] is read-your-writes;
//! [`wake`] the wake-up rules; [`slim`] what a store keeps of an object; [`memo`] what a term remembers between passes; [`names`] the
//! names of every Secret.

mod index;
mod memo;
mod meta_store;
mod names;
mod slim;
mod stores;
mod wake;
mod watch;
mod written;

#[cfg(test)]
mod tests;

pub(crate) use meta_store::{SharedData, active};
pub(crate) use stores::{Cache, Cached, SecretLookup};
pub(crate) use watch::watch;
