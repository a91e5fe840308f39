//! Seals on the management Secrets: the controller trusts a management CA or certificate
//! only when its content is its own, not when it merely carries the Interconnect's owner
//! reference (which anyone who may create Secrets in the namespace can write, the
//! Interconnect's uid being readable by anyone who may read it).
//!
//! A seal is the annotation [`SEAL`]: `v1:` and the hex HMAC-SHA256, under the seal key
//! ([`crate::hash_key::SEAL_SECRET`], in the controller's namespace, readable only there), of
//! the Secret's namespace, name, owner uid and data (each key and value, in key order, each
//! length-prefixed). Whoever writes other content, or copies a seal to another Secret or
//! another Interconnect's, makes a Secret that is not sealed.
//!
//! The controller seals every management Secret it writes. One that is not sealed (none, or
//! another key's) and was last written (its latest `managedFields` time, else its
//! `creationTimestamp`: both set by the API server) **before the seal key's Secret was made**
//! is the controller's own from an earlier release, or was sealed with an earlier key: it is
//! sealed again, its data untouched (so no router rolls). One written since is not the
//! controller's: the routers are not read with it (docs/mesh-status.md).

use std::time::SystemTime;

use hmac::Mac;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::Data;
use crate::hash_key::HashKey;

/// The annotation holding a Secret's seal.
pub const SEAL: &str = "qdr-operator.io/seal";

/// The seal of Secret `namespace/name`, controlled by the object of uid `owner`, holding
/// `data`, under `key`: `v1:` and 64 hex digits.
pub fn seal(key: &HashKey, namespace: &str, name: &str, owner: &str, data: &Data) -> String {
    let mut mac = key.mac();
    let mut put = |bytes: &[u8]| {
        mac.update(&(bytes.len() as u64).to_be_bytes());
        mac.update(bytes);
    };
    put(b"qdr-operator seal v1");
    put(namespace.as_bytes());
    put(name.as_bytes());
    put(owner.as_bytes());
    for (k, v) in data {
        put(k.as_bytes());
        put(&v.0);
    }
    let tag = mac.finalize().into_bytes();
    format!("v1:{}", tag.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The seal `s` should carry as a Secret of `namespace` controlled by `owner`.
fn expected(key: &HashKey, namespace: &str, owner: &str, s: &Secret) -> String {
    let name = s.metadata.name.as_deref().unwrap_or_default();
    seal(key, namespace, name, owner, s.data.as_ref().unwrap_or(&Data::new()))
}

/// Whether `s` (of `namespace`) carries the seal of its content under `key` as a Secret
/// controlled by `owner`.
pub fn is_sealed(key: &HashKey, namespace: &str, owner: &str, s: &Secret) -> bool {
    let found = s.metadata.annotations.as_ref().and_then(|a| a.get(SEAL));
    found.is_some_and(|f| constant_time_eq(f.as_bytes(), expected(key, namespace, owner, s).as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// When the object of `meta` was last written, as the API server recorded it: the latest
/// time of its `managedFields` (every write stamps its manager's entry), else its
/// `creationTimestamp`.
pub fn last_written(meta: &ObjectMeta) -> Option<SystemTime> {
    last_written_time(meta).map(|t| SystemTime::from(t.0))
}

/// [`last_written`], as the API server wrote it.
pub fn last_written_time(meta: &ObjectMeta) -> Option<&Time> {
    let managed = meta.managed_fields.iter().flatten().filter_map(|f| f.time.as_ref()).max_by_key(|t| t.0);
    managed.or(meta.creation_timestamp.as_ref())
}

/// Whether `s` (of `namespace`, controlled by `owner`) is to be sealed again: not sealed
/// under `key`, and last written before `key`'s Secret was made (see the module docs).
/// Never when either time is unknown.
pub fn needs_sealing_again(key: &HashKey, namespace: &str, owner: &str, s: &Secret) -> bool {
    if is_sealed(key, namespace, owner, s) {
        return false;
    }
    matches!((last_written(&s.metadata), key.held_since()), (Some(w), Some(since)) if w < since)
}

/// `s` with the seal of its content under `key`, as a Secret of `namespace` controlled by
/// `owner`.
pub fn sealed(key: &HashKey, namespace: &str, owner: &str, mut s: Secret) -> Secret {
    let seal = expected(key, namespace, owner, &s);
    s.metadata.annotations.get_or_insert_with(Default::default).insert(SEAL.into(), seal);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::time::Duration;

    fn key() -> HashKey {
        HashKey::from_bytes(&[7; 32]).unwrap()
    }

    fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            data: Some(
                data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_seal_binds_the_content_the_name_the_namespace_and_the_owner() {
        let s = sealed(&key(), "ns", "u-1", secret("mesh-ca", &[("tls.crt", "C"), ("tls.key", "K")]));
        assert!(s.metadata.annotations.as_ref().unwrap()[SEAL].starts_with("v1:"));
        assert!(is_sealed(&key(), "ns", "u-1", &s));
        assert!(!is_sealed(&key(), "other-ns", "u-1", &s), "another namespace");
        assert!(!is_sealed(&key(), "ns", "u-2", &s), "another owner");
        assert!(!is_sealed(&HashKey::from_bytes(&[8; 32]).unwrap(), "ns", "u-1", &s), "another key");
        let mut renamed = s.clone();
        renamed.metadata.name = Some("other-ca".into());
        assert!(!is_sealed(&key(), "ns", "u-1", &renamed), "the seal copied to another Secret");
        let mut changed = s.clone();
        changed.data.as_mut().unwrap().insert("tls.key".into(), ByteString(b"forged".to_vec()));
        assert!(!is_sealed(&key(), "ns", "u-1", &changed), "other content");
        let mut moved = s.clone();
        // Bytes moved from one value to the next key: the lengths tell them apart.
        moved.data = Some(
            [("tls.crt", "CK"), ("tls.key", "")]
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        moved.metadata.annotations = s.metadata.annotations.clone();
        assert!(!is_sealed(&key(), "ns", "u-1", &moved));
        assert!(!is_sealed(&key(), "ns", "u-1", &secret("mesh-ca", &[])), "no seal at all");
    }

    #[test]
    fn only_what_was_written_before_the_key_is_sealed_again() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let made = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let k = key().since(Some(made));
        let at = |secs: i64| {
            let t = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap();
            Time(t)
        };
        let written = |created: i64, writes: &[i64]| {
            let mut s = secret("mesh-ca", &[("tls.crt", "C")]);
            s.metadata.creation_timestamp = Some(at(created));
            s.metadata.managed_fields = (!writes.is_empty()).then(|| {
                writes
                    .iter()
                    .map(|w| ManagedFieldsEntry { time: Some(at(*w)), ..Default::default() })
                    .collect()
            });
            s
        };
        assert!(needs_sealing_again(&k, "ns", "u-1", &written(-100, &[-50])), "an earlier release's");
        assert!(needs_sealing_again(&k, "ns", "u-1", &written(-100, &[])), "created before, never changed");
        assert!(!needs_sealing_again(&k, "ns", "u-1", &written(-100, &[-50, 10])), "changed since");
        assert!(!needs_sealing_again(&k, "ns", "u-1", &written(5, &[])), "created since");
        let s = sealed(&k, "ns", "u-1", written(-100, &[-50]));
        assert!(!needs_sealing_again(&k, "ns", "u-1", &s), "sealed already");
        assert!(!needs_sealing_again(&key(), "ns", "u-1", &written(-100, &[])), "the key's time unknown");
    }
}
