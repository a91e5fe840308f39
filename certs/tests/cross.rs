//! Cross-signing: a root that re-issues each generation of a rotating CA keeps a peer that
//! trusts only the root (and an old generation) verifying the new generation's leaves.

use std::time::{Duration, SystemTime};

use qdr_certs::pki::{CertInfo, cross_sign, new_ca, new_leaf, new_root, verify_leaf};

const DAY: Duration = Duration::from_secs(24 * 3600);

#[test]
fn a_peer_that_trusts_the_root_and_an_old_ca_verifies_a_new_cas_leaf_through_its_cross_signed_certificate() {
    let now = SystemTime::now();
    let root = new_root("root", now, 3650 * DAY).unwrap();
    let old = new_ca("ca", now, 30 * DAY).unwrap();
    let new = new_ca("ca", now, 30 * DAY).unwrap();
    let cross = cross_sign(&new, &root).unwrap();
    let leaf = new_leaf(&new, &["hub.ns.svc".to_string()], now, DAY).unwrap();
    let peer = format!("{}{}", old.cert_pem, root.cert_pem);

    // The leaf alone does not verify: the peer never trusted the new CA.
    assert!(verify_leaf(&leaf.cert_pem, &peer, "hub.ns.svc", now).is_err());
    // With the cross-signed certificate as its chain, it does.
    let chain = format!("{}{cross}", leaf.cert_pem);
    verify_leaf(&chain, &peer, "hub.ns.svc", now).unwrap();
    // And a peer that trusts the new CA itself still verifies the same chain.
    verify_leaf(&chain, &new.cert_pem, "hub.ns.svc", now).unwrap();
    // Not through a root that did not sign it.
    let other = new_root("root", now, 3650 * DAY).unwrap();
    assert!(verify_leaf(&chain, &format!("{}{}", old.cert_pem, other.cert_pem), "hub.ns.svc", now).is_err());

    // The cross-signed certificate is the CA's: its subject and validity, the root as issuer.
    let (c, n, r) = (
        CertInfo::parse(&cross).unwrap(),
        CertInfo::parse(&new.cert_pem).unwrap(),
        CertInfo::parse(&root.cert_pem).unwrap(),
    );
    assert_eq!(
        (c.subject_cn.as_str(), c.not_before, c.not_after),
        (n.subject_cn.as_str(), n.not_before, n.not_after)
    );
    assert_eq!(c.issuer_cn, r.subject_cn);
    assert!(c.is_ca);
}

#[test]
fn cross_signing_refuses_a_key_that_is_not_a_key() {
    let now = SystemTime::now();
    let root = new_root("root", now, DAY).unwrap();
    let mut ca = new_ca("ca", now, DAY).unwrap();
    ca.key_pem = "not a key".into();
    assert!(cross_sign(&ca, &root).is_err());
}
