//! The Secret that holds the [`Material`], and its encoding.
//!
//! Type `kubernetes.io/tls`, keys: `tls.crt`/`tls.key` (serving certificate), `ca.crt`/
//! `ca.key` (active CA), `next-ca.crt`/`next-ca.key` (staged CA, during a rotation),
//! `ca-bundle.crt` (the trust bundle, the webhook configurations' `caBundle`); annotation
//! `certs.qdr-operator.io/promoted-at` (Unix seconds of the last CA promotion).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, PostParams};

use crate::error::Error;
use crate::pki::{CertKey, der_to_pem, first_der, split_bundle};
use crate::rotation::Material;

/// Annotation holding the last promotion time.
pub const PROMOTED_AT: &str = "certs.qdr-operator.io/promoted-at";

fn text(data: &BTreeMap<String, ByteString>, key: &str) -> Option<String> {
    data.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned()).filter(|s| !s.trim().is_empty())
}

fn pair(data: &BTreeMap<String, ByteString>, cert: &str, key: &str) -> Option<CertKey> {
    let cert_pem = text(data, cert)?;
    // Normalize so that bundle membership compares canonical PEM text.
    let cert_pem = der_to_pem(&first_der(&cert_pem).ok()?);
    Some(CertKey { cert_pem, key_pem: text(data, key)? })
}

/// Reads the material out of a Secret. Missing or unparsable parts come back as `None`
/// (the planner then repairs them); nothing here fails.
pub fn decode(secret: &Secret) -> Material {
    let empty = BTreeMap::new();
    let data = secret.data.as_ref().unwrap_or(&empty);
    Material {
        ca: pair(data, "ca.crt", "ca.key"),
        next_ca: pair(data, "next-ca.crt", "next-ca.key"),
        bundle: text(data, "ca-bundle.crt").map(|b| split_bundle(&b)).unwrap_or_default(),
        leaf: pair(data, "tls.crt", "tls.key"),
        promoted_at: secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROMOTED_AT))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
    }
}

/// Writes `m` into `secret` (data and annotation), keeping its other metadata.
pub fn encode(m: &Material, secret: &mut Secret) {
    let mut data = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
    };
    if let Some(l) = &m.leaf {
        put("tls.crt", &l.cert_pem);
        put("tls.key", &l.key_pem);
    }
    if let Some(ca) = &m.ca {
        put("ca.crt", &ca.cert_pem);
        put("ca.key", &ca.key_pem);
    }
    if let Some(n) = &m.next_ca {
        put("next-ca.crt", &n.cert_pem);
        put("next-ca.key", &n.key_pem);
    }
    put("ca-bundle.crt", &m.bundle_pem());
    secret.data = Some(data);
    secret.type_ = Some("kubernetes.io/tls".into());
    let ann = secret.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match m.promoted_at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
        Some(d) => {
            ann.insert(PROMOTED_AT.into(), d.as_secs().to_string());
        }
        None => {
            ann.remove(PROMOTED_AT);
        }
    }
}

/// The Secret in the API, read and written with optimistic concurrency.
#[derive(Clone)]
pub struct SecretStore {
    api: Api<Secret>,
    name: String,
    owner: std::sync::Arc<std::sync::Mutex<Option<OwnerReference>>>,
}

/// What a write attempt did.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// The write went through.
    Done,
    /// Someone else wrote first (409): re-read and plan again.
    Lost,
}

impl SecretStore {
    /// The Secret `name` in the namespace of `api`.
    pub fn new(api: Api<Secret>, name: impl Into<String>) -> Self {
        SecretStore { api, name: name.into(), owner: Default::default() }
    }

    /// Makes every later write carry `owner` in the Secret's `ownerReferences` (added beside
    /// any others, no `controller` or `blockOwnerDeletion`), so the garbage collector deletes
    /// the Secret with its owner: the webhook passes its `ValidatingWebhookConfiguration`,
    /// which `kubectl delete -k deploy/` and `helm uninstall` delete.
    pub fn set_owner(&self, owner: OwnerReference) {
        *self.owner.lock().unwrap_or_else(|p| p.into_inner()) = Some(owner);
    }

    /// Whether `secret` lacks the owner of [`Self::set_owner`] (false when none is set).
    pub fn needs_owner(&self, secret: &Secret) -> bool {
        let owner = self.owner.lock().unwrap_or_else(|p| p.into_inner());
        owner
            .as_ref()
            .is_some_and(|o| !secret.metadata.owner_references.iter().flatten().any(|r| r.uid == o.uid))
    }

    /// The API the Secret lives in.
    pub fn api(&self) -> Api<Secret> {
        self.api.clone()
    }

    /// The Secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Secret, if it exists.
    ///
    /// # Errors
    /// [`Error::Kube`] on API failures other than NotFound.
    pub async fn get(&self) -> Result<Option<Secret>, Error> {
        self.api.get_opt(&self.name).await.map_err(Error::from)
    }

    /// Writes `m`: a create when `current` is `None` (losing to a concurrent create is
    /// [`Written::Lost`], and the caller adopts the winner's CA), else a replace that carries
    /// `current`'s resourceVersion as a precondition.
    ///
    /// # Errors
    /// [`Error::Kube`] on API failures other than the lost race.
    pub async fn write(&self, current: Option<&Secret>, m: &Material) -> Result<Written, Error> {
        let mut secret = current.cloned().unwrap_or_else(|| {
            let mut s = Secret::default();
            s.metadata.name = Some(self.name.clone());
            s
        });
        encode(m, &mut secret);
        if self.needs_owner(&secret) {
            let owner = self.owner.lock().unwrap_or_else(|p| p.into_inner()).clone();
            secret.metadata.owner_references.get_or_insert_with(Vec::new).extend(owner);
        }
        let pp = PostParams { field_manager: Some("qdr-certs".into()), ..Default::default() };
        let result = match current {
            None => self.api.create(&pp, &secret).await,
            Some(_) => self.api.replace(&self.name, &pp, &secret).await,
        };
        match result {
            Ok(_) => Ok(Written::Done),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Written::Lost),
            Err(e) => Err(e.into()),
        }
    }
}
