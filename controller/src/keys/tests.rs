//! Every key type and size the router's OpenSSL reads is accepted, in every PEM encoding
//! OpenSSL writes, and matched only with its own certificate; certificates signed by such
//! keys verify against their issuer.

use openssl::pkey::PKey;
use qdr_tests::keys::{certificate, kinds};

use super::{key_matches, signed_by};

#[test]
fn every_key_type_the_router_reads_is_accepted_and_matched_only_with_its_certificate() {
    let kinds = kinds();
    let other = PKey::generate_ed25519().unwrap();
    let mut table = Vec::new();
    for k in &kinds {
        let cert = certificate(&k.key, None, &k.name);
        let mut encodings = vec![("PKCS#8", k.key.private_key_to_pem_pkcs8().unwrap())];
        if let Some(t) = &k.traditional {
            encodings.push(("traditional", t.clone()));
        }
        for (encoding, pem) in &encodings {
            let pem = String::from_utf8(pem.clone()).unwrap();
            assert_eq!(key_matches(&cert, &pem), Ok(()), "{} ({encoding})", k.name);
            let wrong = String::from_utf8(other.private_key_to_pem_pkcs8().unwrap()).unwrap();
            assert_eq!(
                key_matches(&cert, &wrong),
                Err("the private key does not belong to the certificate".into()),
                "{} ({encoding})",
                k.name
            );
            table.push(format!("{} ({encoding})", k.name));
        }
        // A leaf signed by this key verifies against it, and not against another issuer.
        let leaf_key = PKey::generate_ed25519().unwrap();
        let leaf = certificate(&leaf_key, Some((&k.key, k.name.as_str())), "leaf");
        assert!(signed_by(&leaf, &cert), "{}: a leaf it signed", k.name);
        let stranger = certificate(&other, None, &k.name);
        assert!(!signed_by(&leaf, &stranger), "{}: a CA of the same name, another key", k.name);
    }
    eprintln!("accepted: {}", table.join(", "));
    assert_eq!(table.len(), 19);
}

#[test]
fn what_is_not_a_key_or_a_certificate_says_so() {
    let key = PKey::generate_ed25519().unwrap();
    let cert = certificate(&key, None, "a");
    let pem = String::from_utf8(key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    assert_eq!(key_matches("garbage", &pem), Err("no PEM certificate".into()));
    assert!(key_matches(&cert, "garbage").unwrap_err().starts_with("no PEM private key"));
    assert!(!signed_by("garbage", &cert));
    assert!(!signed_by(&cert, "garbage"));
}
