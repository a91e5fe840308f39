//! The key of the credentials hash: the pod template's `qdr-operator.io/credentials-hash`
//! is an HMAC-SHA256 of the mounted Secrets' data under this key, so the annotation changes
//! exactly when the mounted data changes and, to anyone who can read the pod template
//! (`view`), says nothing about that data: an unsalted hash of a SASL password file would
//! let a weak password be guessed offline.
//!
//! The key is 32 random bytes in Secret `qdr-controller-hash-key` (key `key`) in the
//! controller's own namespace: created once by whichever replica starts first, read by the
//! others, so every replica computes the same annotation. Deleting the Secret makes a new
//! key at the next controller start, which rolls every router once.

use hmac::{Hmac, Mac};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};

/// Default name of the Secret holding the key (`--hash-key-secret`).
pub const DEFAULT_SECRET: &str = "qdr-controller-hash-key";
/// The data key of the Secret that holds the key.
pub const DATA_KEY: &str = "key";
/// Length of a key the controller makes, in bytes.
pub const KEY_BYTES: usize = 32;
/// Shortest key accepted from the Secret, in bytes (128 bits).
pub const MIN_KEY_BYTES: usize = 16;

/// An HMAC-SHA256 key. Its `Debug` shows no byte of it.
#[derive(Clone, PartialEq, Eq)]
pub struct HashKey(Vec<u8>);

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HashKey({} bytes)", self.0.len())
    }
}

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
        (bytes.len() >= MIN_KEY_BYTES).then(|| HashKey(bytes.to_vec()))
    }

    /// A new random key of [`KEY_BYTES`] (the operating system's generator).
    pub fn random() -> HashKey {
        use rand::RngCore;
        let mut bytes = vec![0u8; KEY_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        HashKey(bytes)
    }

    /// A fresh HMAC-SHA256 under this key.
    pub fn mac(&self) -> Hmac<sha2::Sha256> {
        Hmac::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }

    /// The key from Secret `name` of `api`'s namespace, which is created with a random key
    /// when missing (a concurrent creation by another replica is read back). A created Secret
    /// carries `owner` in its `ownerReferences` (the controllers' Lease, which the install
    /// ships), so uninstalling deletes it; an existing Secret is left as it is.
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
        let from = |s: Secret| {
            s.data
                .and_then(|d| d.get(DATA_KEY).and_then(|b| HashKey::from_bytes(&b.0)))
                .ok_or_else(|| Error::Unusable(name.to_string()))
        };
        if let Some(s) = api.get_opt(name).await.map_err(api_error)? {
            return from(s);
        }
        let key = HashKey::random();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([("app.kubernetes.io/part-of".to_string(), "qdr-operator".to_string())].into()),
                owner_references: owner.map(|o| vec![o]),
                ..Default::default()
            },
            data: Some([(DATA_KEY.to_string(), ByteString(key.0.clone()))].into()),
            immutable: Some(true),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(key),
            Err(kube::Error::Api(e)) if e.code == 409 => from(api.get(name).await.map_err(api_error)?),
            Err(e) => Err(api_error(e)),
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
        assert_eq!(a.0.len(), KEY_BYTES);
        assert_eq!(format!("{a:?}"), "HashKey(32 bytes)");
        assert!(HashKey::from_bytes(&[1; MIN_KEY_BYTES - 1]).is_none());
        assert!(HashKey::from_bytes(&[1; MIN_KEY_BYTES]).is_some());
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
