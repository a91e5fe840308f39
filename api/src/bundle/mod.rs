//! The OLM bundle (`bundle/`): what Operator Lifecycle Manager installs, made from `deploy/` by
//! `make bundle` (the `bundlegen` binary) so it cannot drift from what the other installs run;
//! `api/tests/bundle.rs` fails when the committed bundle differs from [`render()`]'s.
//!
//! The bundle format is OLM's `registry+v1`: `manifests/` (the ClusterServiceVersion, the CRD
//! and the PodDisruptionBudgets), `metadata/annotations.yaml` (package [`PACKAGE`], channel
//! [`CHANNEL`]: the Go operator's, so its subscribers upgrade), `tests/scorecard/config.yaml`
//! and `bundle.Dockerfile`. From `deploy/`:
//! - **Deployments** (`deploy/base/{controller,webhook}.yaml`) go into the CSV's
//!   `install.spec.deployments`, with the image tags of `deploy/base/kustomization.yaml`. The
//!   webhook's `--tls-mode=secret` becomes `--tls-mode=files --tls-dir=`[`OLM_CERT_DIR`]: under
//!   OLM the serving certificate is OLM's, mounted there, and the `caBundle` is OLM's to write.
//!   The controller gains `WATCH_NAMESPACE` from the pod template annotation
//!   [`OLM_TARGET_NAMESPACES`]: every install mode is offered (the Go operator's
//!   `qdr-operator.v0.4.0` was `OwnNamespace`), and the controller watches the
//!   OperatorGroup's target namespaces (all of them for `AllNamespaces`).
//! - **RBAC** (`deploy/base/rbac.yaml`): each ClusterRole bound to a ServiceAccount becomes a
//!   `clusterPermissions` entry and each Role a `permissions` entry, except what only the
//!   self-managed TLS needs (the webhook's Role on its Secret, its rules on the webhook
//!   configurations).
//! - **Webhook configurations** (`deploy/base/webhook-configurations.yaml`) become
//!   `webhookdefinitions` (OLM creates the configurations and a Service
//!   `<deploymentName>-service` on the `containerPort`, here the Service's 443 to the
//!   webhook's `https` port).
//! - Left out, as OLM 0.29 cannot install them from a bundle or makes them itself: the
//!   Namespace, the webhook's Service, the controller's Lease (it creates it) and the
//!   NetworkPolicies (`deploy/olm/description.md` tells users so).
//!
//! The hand-written parts are `deploy/olm/`: `csv.yaml` (display name, links, maintainers,
//! install modes, `replaces`, `minKubeVersion`, ...), `description.md` and `icon.svg`; the
//! examples of `alm-examples` are `deploy/examples/*.yaml`.
//!
//! One module per part: [`Sources`] (what is read from `deploy/`), [`render()`] (the bundle's
//! files), the CSV assembled from its install strategy (deployments, permissions, webhook
//! definitions) and its CRD descriptors, and the bundle metadata (annotations, scorecard).

mod csv;
mod descriptors;
mod install;
mod metadata;
mod render;
mod sources;
#[cfg(test)]
mod tests;

pub use install::{OLM_CERT_DIR, OLM_TARGET_NAMESPACES};
pub use metadata::{CHANNEL, PACKAGE};
pub use render::{BUNDLE_DIR, CSV_FILE, render};
pub use sources::Sources;
