//! The key of the credentials hash: the pod template's `qdr-operator.io/credentials-hash`
//! is an HMAC-SHA256 of the mounted Secrets' data under this key, so the annotation changes
//! exactly when the mounted data changes and, to anyone who can read the pod template
//! (`view`), says nothing about that data: an unsalted hash of a SASL password file would
//! let a weak password be guessed offline.
//!
//! The key is 32 random bytes in Secret `qdr-controller-hash-key` (key `key`) in the
//! controller's own namespace: created once by whichever replica starts first, read by the
//! others, so every replica computes the same annotation, across leader changes.
//!
//! It outlives what failover procedures delete: its only owner is the ServiceAccount the
//! controller runs as (named by its own token: [`service_account_owner`]), which
//! only uninstalling removes, not the Lease (deleting a Lease is a common way to force a
//! failover). Every replica follows the Secret ([`follow`]): one that is deleted is made
//! again with the key the replicas hold, so nothing rolls; one replaced with another key is
//! read again by every replica (the routers then roll once, as each Interconnect is
//! reconciled). A Secret from an earlier release, owned by the Lease, keeps that owner until
//! the Lease goes; it is then made again, owned by the ServiceAccount.

use std::sync::{Arc, RwLock};

use futures::StreamExt;
use hmac::{Hmac, Mac};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

/// Default name of the Secret holding the key (`--hash-key-secret`).
pub const DEFAULT_SECRET: &str = "qdr-controller-hash-key";
/// Default name of the Secret holding the seal key (`--seal-key-secret`): the key of the
/// seals the controller puts on the management Secrets ([`crate::credentials::seal`]). A
/// key of its own, because its Secret's `creationTimestamp` (set by the API server) is when
/// sealing began: what was written before is the controller's from an earlier release, or
/// sealed with an earlier key, and is sealed again.
pub const SEAL_SECRET: &str = "qdr-controller-seal-key";
/// The data key of the Secret that holds the key.
pub const DATA_KEY: &str = "key";
/// Length of a key the controller makes, in bytes.
pub const KEY_BYTES: usize = 32;
/// Shortest key accepted from the Secret, in bytes (128 bits).
pub const MIN_KEY_BYTES: usize = 16;

/// An HMAC-SHA256 key, and when the Secret holding it was made. Clones share it:
/// [`HashKey::replace`] changes it for every holder (a replica that reads a new key from the
/// Secret). Its `Debug` shows no byte of it.
#[derive(Clone)]
pub struct HashKey(Arc<RwLock<Held>>);

#[derive(Clone)]
struct Held {
    bytes: Arc<[u8]>,
    /// The `creationTimestamp` of the Secret the key was read from or put in.
    since: Option<std::time::SystemTime>,
}

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HashKey({} bytes)", self.bytes().len())
    }
}

impl PartialEq for HashKey {
    /// Whether both hold the same key now.
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for HashKey {}

/// Why the key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Secret {0}: {1}")]
    Api(String, #[source] kube::Error),
    /// The Secret exists with no usable key: it is not overwritten (another replica may
    /// use it); delete it to have a new one made.
    #[error(
        "Secret {0} has no {DATA_KEY} of at least {MIN_KEY_BYTES} bytes; delete it and a new key is made (the routers roll once)"
    )]
    Unusable(String),
}

impl HashKey {
    /// The key `bytes`. Errors: shorter than [`MIN_KEY_BYTES`].
    pub fn from_bytes(bytes: &[u8]) -> Option<HashKey> {
        (bytes.len() >= MIN_KEY_BYTES).then(|| HashKey::held(bytes.into(), None))
    }

    fn held(bytes: Arc<[u8]>, since: Option<std::time::SystemTime>) -> HashKey {
        HashKey(Arc::new(RwLock::new(Held { bytes, since })))
    }

    /// This key, held since `since` (the `creationTimestamp` of its Secret).
    pub fn since(self, since: Option<std::time::SystemTime>) -> HashKey {
        self.0.write().unwrap_or_else(|e| e.into_inner()).since = since;
        self
    }

    /// When the Secret holding the key was made (`creationTimestamp`); `None` when not known.
    pub fn held_since(&self) -> Option<std::time::SystemTime> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).since
    }

    /// A new random key of [`KEY_BYTES`] (the operating system's generator).
    pub fn random() -> HashKey {
        use rand::RngCore;
        let mut bytes = vec![0u8; KEY_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        HashKey::held(bytes.into(), None)
    }

    /// The key's bytes now.
    fn bytes(&self) -> Arc<[u8]> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).bytes.clone()
    }

    /// Makes every clone of this key hold `other`'s bytes and time.
    pub fn replace(&self, other: &HashKey) {
        let held = other.0.read().unwrap_or_else(|e| e.into_inner()).clone();
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = held;
    }

    /// A fresh HMAC-SHA256 under this key.
    pub fn mac(&self) -> Hmac<sha2::Sha256> {
        Hmac::new_from_slice(&self.bytes()).expect("HMAC takes a key of any length")
    }

    /// The key from Secret `name` of `api`'s namespace, which is created with a random key
    /// when missing (a concurrent creation by another replica is read back). A created Secret
    /// carries `owner` in its `ownerReferences` (the controller's ServiceAccount:
    /// [`service_account_owner`]), so uninstalling deletes it; an existing Secret is left as
    /// it is.
    ///
    /// # Errors
    /// [`Error::Api`] when the API server fails; [`Error::Unusable`] when the Secret holds
    /// no key of at least [`MIN_KEY_BYTES`].
    pub async fn load_or_create(
        api: &Api<Secret>,
        name: &str,
        owner: Option<OwnerReference>,
    ) -> Result<HashKey, Error> {
        let api_error = |e| Error::Api(name.to_string(), e);
        if let Some(s) = api.get_opt(name).await.map_err(api_error)? {
            return key_of(name, s);
        }
        let key = HashKey::random();
        match create(api, name, &key, owner).await {
            Ok(since) => Ok(key.since(since)),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                key_of(name, api.get(name).await.map_err(api_error)?)
            }
            Err(e) => Err(api_error(e)),
        }
    }
}

/// The key Secret `name` holds, held since its `creationTimestamp`. Errors:
/// [`Error::Unusable`].
fn key_of(name: &str, s: Secret) -> Result<HashKey, Error> {
    let since = s.metadata.creation_timestamp.as_ref().map(|t| std::time::SystemTime::from(t.0));
    s.data
        .and_then(|d| d.get(DATA_KEY).and_then(|b| HashKey::from_bytes(&b.0)))
        .map(|k| k.since(since))
        .ok_or_else(|| Error::Unusable(name.to_string()))
}

/// Creates Secret `name` (immutable, labelled `app.kubernetes.io/part-of: qdr-operator`)
/// holding `key`, owned by `owner`: its `creationTimestamp`.
async fn create(
    api: &Api<Secret>,
    name: &str,
    key: &HashKey,
    owner: Option<OwnerReference>,
) -> kube::Result<Option<std::time::SystemTime>> {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app.kubernetes.io/part-of".to_string(), "qdr-operator".to_string())].into()),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        data: Some([(DATA_KEY.to_string(), ByteString(key.bytes().to_vec()))].into()),
        immutable: Some(true),
        ..Default::default()
    };
    let created = api.create(&PostParams::default(), &secret).await?;
    Ok(created.metadata.creation_timestamp.map(|t| std::time::SystemTime::from(t.0)))
}

/// The owner reference to the ServiceAccount whose token `config` authenticates with (the
/// controller's own, in a cluster: the projected token file), when it is one of
/// `namespace`; `None` for any other credential (a person's kubeconfig in development). Read
/// from the token's claims, so it costs no request and no permission: a ServiceAccount token
/// is a JWT naming the account and its uid (`kubernetes.io.serviceaccount.{name,uid}` in
/// bound tokens, `kubernetes.io/serviceaccount/service-account.{name,uid}` in legacy ones);
/// the API server accepts the token only while that account, with that uid, exists.
pub fn service_account_owner(config: &kube::Config, namespace: &str) -> Option<OwnerReference> {
    use base64::Engine as _;
    use secrecy::ExposeSecret as _;
    let token = match (&config.auth_info.token, &config.auth_info.token_file) {
        (Some(t), _) => t.expose_secret().to_string(),
        (None, Some(file)) => std::fs::read_to_string(file).ok()?.trim().to_string(),
        (None, None) => return None,
    };
    let payload = token.split('.').nth(1)?;
    let claims: serde_json::Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?)
            .ok()?;
    let (ns, name, uid) = match claims.get("kubernetes.io") {
        Some(k) => (&k["namespace"], &k["serviceaccount"]["name"], &k["serviceaccount"]["uid"]),
        None => (
            &claims["kubernetes.io/serviceaccount/namespace"],
            &claims["kubernetes.io/serviceaccount/service-account.name"],
            &claims["kubernetes.io/serviceaccount/service-account.uid"],
        ),
    };
    (ns.as_str()? == namespace).then_some(())?;
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "ServiceAccount".into(),
        name: name.as_str()?.to_string(),
        uid: uid.as_str()?.to_string(),
        ..OwnerReference::default()
    })
}

/// Follows Secret `name` of `api`'s namespace for ever, keeping `key` (shared with the
/// reconcilers) equal to what it holds: a Secret with another usable key replaces `key`
/// (logged: the routers roll once as they are reconciled); a Secret found missing (deleted,
/// or gone with an owner) is created again with `key` and `owner`, so nothing rolls (a
/// replica that loses the race reads the winner's, which holds the same key).
pub async fn follow(api: Api<Secret>, name: String, key: HashKey, owner: Option<OwnerReference>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api.clone(), config).default_backoff().boxed();
    let mut listed = false;
    while let Some(event) = events.next().await {
        let missing = match event {
            Ok(watcher::Event::Init) => {
                listed = false;
                false
            }
            Ok(watcher::Event::InitApply(s) | watcher::Event::Apply(s)) => {
                listed = true;
                match key_of(&name, s) {
                    Ok(read) if read != key => {
                        tracing::warn!(secret = %name, "the key changed: what it keys is made again with it");
                        key.replace(&read);
                    }
                    // The same key in a Secret made again: held since then.
                    Ok(read) if read.held_since() != key.held_since() => key.replace(&read),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "keeping the key this replica holds"),
                }
                false
            }
            Ok(watcher::Event::InitDone) => !listed,
            Ok(watcher::Event::Delete(_)) => true,
            Err(e) => {
                tracing::debug!(error = %e, "watching the hash key Secret");
                false
            }
        };
        if missing {
            match create(&api, &name, &key, owner.clone()).await {
                Ok(_) => {
                    tracing::info!(secret = %name, "made the hash key Secret again with the key in use")
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {} // another replica did; its event follows
                Err(e) => {
                    tracing::warn!(error = %e, secret = %name, "could not make the hash key Secret again")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_long_enough_and_never_shown() {
        let (a, b) = (HashKey::random(), HashKey::random());
        assert_ne!(a, b);
        assert_eq!(a.bytes().len(), KEY_BYTES);
        assert_eq!(format!("{a:?}"), "HashKey(32 bytes)");
        assert!(HashKey::from_bytes(&[1; MIN_KEY_BYTES - 1]).is_none());
        assert!(HashKey::from_bytes(&[1; MIN_KEY_BYTES]).is_some());
    }

    fn config_with_token(claims: serde_json::Value) -> kube::Config {
        use base64::Engine as _;
        let b64 =
            |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let token = format!("{}.{}.signature", b64(&serde_json::json!({"alg": "RS256"})), b64(&claims));
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.auth_info.token = Some(token.into());
        config
    }

    #[test]
    fn the_owner_is_the_service_account_the_token_names() {
        let bound = config_with_token(serde_json::json!({"sub": "system:serviceaccount:ops:qdr-controller",
            "kubernetes.io": {"namespace": "ops", "serviceaccount": {"name": "qdr-controller", "uid": "u-1"}}}));
        let owner = service_account_owner(&bound, "ops").unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("ServiceAccount", "qdr-controller", "u-1")
        );
        assert_eq!(owner.api_version, "v1");
        assert!(service_account_owner(&bound, "elsewhere").is_none(), "another namespace's account");
        let legacy = config_with_token(serde_json::json!({
            "kubernetes.io/serviceaccount/namespace": "ops",
            "kubernetes.io/serviceaccount/service-account.name": "qdr-controller",
            "kubernetes.io/serviceaccount/service-account.uid": "u-2"}));
        assert_eq!(service_account_owner(&legacy, "ops").unwrap().uid, "u-2");
        let person = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        assert!(service_account_owner(&person, "ops").is_none());
        let opaque = config_with_token(serde_json::json!({"sub": "alice"}));
        assert!(service_account_owner(&opaque, "ops").is_none());
    }

    #[test]
    fn a_replaced_key_is_replaced_for_every_clone() {
        let (a, b) = (HashKey::random(), HashKey::random());
        let shared = a.clone();
        assert_ne!(shared, b);
        a.replace(&b);
        assert_eq!(shared, b, "a clone follows the replacement");
    }

    #[test]
    fn the_mac_depends_on_the_key() {
        let tag = |k: &HashKey| {
            let mut m = k.mac();
            m.update(b"data");
            m.finalize().into_bytes().to_vec()
        };
        let k = HashKey::from_bytes(&[7; 32]).unwrap();
        assert_eq!(tag(&k), tag(&k.clone()));
        assert_ne!(tag(&k), tag(&HashKey::from_bytes(&[8; 32]).unwrap()));
    }
}
