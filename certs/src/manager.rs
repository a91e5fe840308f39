//! Drives rotation against the API: the Secret, the webhook configurations' `caBundle`, and
//! the certificate this replica serves.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::error::Error;
use crate::pki::{split_bundle, verify_leaf};
use crate::rotation::{Material, Policy, Step, plan};
use crate::serving::CertResolver;
use crate::store::{SecretStore, Written, decode};

/// Field manager that owns the `caBundle` fields.
pub const CA_BUNDLE_MANAGER: &str = "qdr-webhook-cabundle";

/// A webhook configuration whose every entry's `clientConfig.caBundle` is kept equal to
/// the trust bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookConfiguration {
    /// A `ValidatingWebhookConfiguration` by name.
    Validating(String),
    /// A `MutatingWebhookConfiguration` by name.
    Mutating(String),
}

/// The rotation driver of one replica. Every replica runs one; they coordinate only
/// through optimistic concurrency on the Secret.
pub struct CertManager {
    client: kube::Client,
    store: SecretStore,
    policy: Policy,
    targets: Vec<WebhookConfiguration>,
    resolver: Arc<CertResolver>,
    live: Mutex<Option<Vec<String>>>,
    /// What this replica last served from (the Secret's content as last read or written).
    served: Mutex<Option<Material>>,
    steps: Mutex<Vec<(Step, SystemTime)>>,
    lost: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for CertManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertManager")
            .field("secret", &self.store.name())
            .field("targets", &self.targets)
            .finish()
    }
}

impl CertManager {
    /// A manager for Secret `secret` in `namespace`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        secret: &str,
        policy: Policy,
        targets: Vec<WebhookConfiguration>,
        resolver: Arc<CertResolver>,
    ) -> Self {
        CertManager {
            store: SecretStore::new(Api::namespaced(client.clone(), namespace), secret),
            client,
            policy,
            targets,
            resolver,
            live: Mutex::new(None),
            served: Mutex::new(None),
            steps: Mutex::new(Vec::new()),
            lost: Default::default(),
        }
    }

    /// The resolver this replica serves from.
    pub fn resolver(&self) -> &Arc<CertResolver> {
        &self.resolver
    }

    /// The steps this replica wrote, with their times (for tests and metrics).
    pub fn steps(&self) -> Vec<(Step, SystemTime)> {
        self.steps.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many of this replica's writes lost an optimistic-concurrency race to another
    /// replica (and were re-planned from the winner's state).
    pub fn lost_races(&self) -> u64 {
        self.lost.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The `caBundle` of every entry of every target (`None` for a missing field).
    async fn fetch_live(&self) -> Result<Vec<Option<String>>, Error> {
        let mut out = Vec::new();
        for t in &self.targets {
            let bundles: Vec<Option<ByteString>> = match t {
                WebhookConfiguration::Validating(n) => {
                    let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
                    let config = api.get(n).await?;
                    if let Some(uid) = &config.metadata.uid {
                        self.store.set_owner(OwnerReference {
                            api_version: "admissionregistration.k8s.io/v1".into(),
                            kind: "ValidatingWebhookConfiguration".into(),
                            name: n.clone(),
                            uid: uid.clone(),
                            ..OwnerReference::default()
                        });
                    }
                    config
                        .webhooks
                        .unwrap_or_default()
                        .into_iter()
                        .map(|w| w.client_config.ca_bundle)
                        .collect()
                }
                WebhookConfiguration::Mutating(n) => {
                    let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
                    api.get(n)
                        .await?
                        .webhooks
                        .unwrap_or_default()
                        .into_iter()
                        .map(|w| w.client_config.ca_bundle)
                        .collect()
                }
            };
            out.extend(bundles.into_iter().map(|b| b.map(|b| String::from_utf8_lossy(&b.0).into_owned())));
        }
        Ok(out)
    }

    /// Server-side applies `bundle` as the `caBundle` of every entry of every target whose
    /// value differs, under [`CA_BUNDLE_MANAGER`].
    async fn sync_ca_bundle(&self, bundle: &str, live: &[Option<String>]) -> Result<(), Error> {
        if live.iter().all(|b| b.as_deref() == Some(bundle)) {
            return Ok(());
        }
        let pp = PatchParams::apply(CA_BUNDLE_MANAGER).force();
        let b64 = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(bundle)
        };
        for t in &self.targets {
            match t {
                WebhookConfiguration::Validating(n) => {
                    let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
                    let names: Vec<String> =
                        api.get(n).await?.webhooks.unwrap_or_default().into_iter().map(|w| w.name).collect();
                    let patch = json!({
                        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                        "metadata": {"name": n},
                        "webhooks": names.iter().map(|w| json!({"name": w, "clientConfig": {"caBundle": b64}})).collect::<Vec<_>>(),
                    });
                    api.patch(n, &pp, &Patch::Apply(patch)).await?;
                }
                WebhookConfiguration::Mutating(n) => {
                    let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
                    let names: Vec<String> =
                        api.get(n).await?.webhooks.unwrap_or_default().into_iter().map(|w| w.name).collect();
                    let patch = json!({
                        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                        "metadata": {"name": n},
                        "webhooks": names.iter().map(|w| json!({"name": w, "clientConfig": {"caBundle": b64}})).collect::<Vec<_>>(),
                    });
                    api.patch(n, &pp, &Patch::Apply(patch)).await?;
                }
            }
        }
        tracing::info!(cas = split_bundle(bundle).len(), "caBundle updated in the webhook configurations");
        Ok(())
    }

    fn serve(&self, m: &Material) {
        if m.leaf.is_some() {
            *self.served.lock().unwrap_or_else(|p| p.into_inner()) = Some(m.clone());
        }
        if let Some(leaf) = &m.leaf {
            match self.resolver.set(&leaf.cert_pem, &leaf.key_pem) {
                Ok(true) => tracing::info!("serving a new certificate"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "keeping the previous serving certificate"),
            }
        }
    }

    /// One pass: read the live `caBundle`s and the Secret (which gets the first
    /// `ValidatingWebhookConfiguration` target as its owner), write every due step (re-reading
    /// after a lost race), keep the `caBundle` equal to the Secret's bundle, and serve the
    /// Secret's certificate. Returns the steps this pass wrote.
    ///
    /// # Errors
    /// [`Error::Kube`] on API failures; [`Error::Certificate`] if a certificate cannot be made.
    pub async fn reconcile(&self) -> Result<Vec<Step>, Error> {
        let mut written = Vec::new();
        for _ in 0..8 {
            let live = self.fetch_live().await?;
            let current = self.store.get().await?;
            if current.is_none() {
                // Deleted while this replica serves from it: put the same material back
                // rather than start over with a CA the API server does not trust yet.
                let served = self.served.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some(m) = served {
                    if self.store.write(None, &m).await? == Written::Done {
                        tracing::warn!(
                            secret = self.store.name(),
                            "the Secret was deleted; restored what is served"
                        );
                        self.steps
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((Step::Restore, SystemTime::now()));
                        written.push(Step::Restore);
                    }
                    continue;
                }
            }
            let m = current.as_ref().map(decode).unwrap_or_default();
            let trusted = |pem: &str| {
                live.iter().all(|b| b.as_deref().is_some_and(|b| split_bundle(b).iter().any(|c| c == pem)))
            };
            match plan(&m, SystemTime::now(), &self.policy, &trusted)? {
                // A Secret written before it had an owner gets one (once), with the same material.
                None if current.as_ref().is_some_and(|c| self.store.needs_owner(c)) => {
                    self.store.write(current.as_ref(), &m).await?;
                }
                None => {
                    self.serve(&m);
                    // Re-read right before writing the caBundle so a slow replica cannot put
                    // back a bundle that a faster one has since changed.
                    let fresh = self.store.get().await?;
                    if fresh.as_ref().map(|s| &s.metadata.resource_version)
                        == current.as_ref().map(|s| &s.metadata.resource_version)
                    {
                        self.sync_ca_bundle(&m.bundle_pem(), &live).await?;
                    }
                    let seen = if self.targets.is_empty() {
                        vec![m.bundle_pem()]
                    } else {
                        self.fetch_live().await?.into_iter().flatten().collect()
                    };
                    *self.live.lock().unwrap_or_else(|p| p.into_inner()) = Some(seen);
                    return Ok(written);
                }
                Some((step, next)) => {
                    if self.store.write(current.as_ref(), &next).await? == Written::Done {
                        tracing::info!(
                            ?step,
                            secret = self.store.name(),
                            "certificate rotation step written"
                        );
                        self.steps.lock().unwrap_or_else(|p| p.into_inner()).push((step, SystemTime::now()));
                        written.push(step);
                        self.serve(&next);
                    }
                }
            }
        }
        Ok(written)
    }

    /// Whether this replica may be Ready: it serves a certificate that verifies (chain,
    /// validity, name) against the `caBundle` last read from every webhook configuration.
    /// With no targets, against the Secret's own bundle as last read.
    pub fn serving_trusted(&self) -> Result<(), Error> {
        let leaf =
            self.resolver.cert_pem().ok_or_else(|| Error::Certificate("no certificate served yet".into()))?;
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let bundles = live.ok_or_else(|| Error::Certificate("caBundle not read yet".into()))?;
        if bundles.is_empty() {
            return Err(Error::Certificate("no caBundle in the webhook configurations".into()));
        }
        let name = self.policy.sans.first().cloned().unwrap_or_default();
        for b in &bundles {
            verify_leaf(&leaf, b, &name, SystemTime::now())?;
        }
        Ok(())
    }

    /// Runs [`Self::reconcile`] every `interval` and reloads the served certificate as soon
    /// as the Secret changes (a single-object watch), until the task is dropped.
    pub async fn run(self: Arc<Self>, interval: Duration) {
        let watch = {
            let this = self.clone();
            async move {
                let api: Api<Secret> = this.store_api();
                let cfg = watcher::Config::default().fields(&format!("metadata.name={}", this.store.name()));
                let mut events = watcher(api, cfg).boxed();
                while let Some(ev) = events.next().await {
                    match ev {
                        Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                            this.serve(&decode(&s))
                        }
                        Ok(_) => {}
                        Err(e) => tracing::debug!(error = %e, "secret watch error (retrying)"),
                    }
                }
            }
        };
        let tick = async move {
            loop {
                if let Err(e) = self.reconcile().await {
                    tracing::warn!(error = %e, "certificate reconcile failed; retrying");
                }
                tokio::time::sleep(interval).await;
            }
        };
        tokio::join!(watch, tick);
    }

    fn store_api(&self) -> Api<Secret> {
        self.store.api()
    }
}
