//! Private keys of every type and size the router's OpenSSL reads, and certificates for
//! them, made with OpenSSL: the table the controller's key checks are tested against.

use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::dsa::Dsa;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Private};
use openssl::pkey_ctx::PkeyCtx;
use openssl::rsa::Rsa;
use openssl::x509::{X509, X509NameBuilder};

/// A key of each kind, with the PEM encodings OpenSSL writes for it: PKCS#8 always, and the
/// traditional one (PKCS#1 RSA, SEC1 EC, DSA) where the type has one.
pub struct Kind {
    /// Its name in the table, such as `ECDSA P-521`.
    pub name: String,
    /// The key.
    pub key: PKey<Private>,
    /// Its traditional PEM encoding, where the type has one.
    pub traditional: Option<Vec<u8>>,
}

fn rsa(bits: u32) -> Kind {
    let rsa = Rsa::generate(bits).unwrap();
    let traditional = Some(rsa.private_key_to_pem().unwrap());
    Kind { name: format!("RSA {bits}"), key: PKey::from_rsa(rsa).unwrap(), traditional }
}

fn ec(name: &str, nid: Nid) -> Kind {
    let ec = EcKey::generate(&EcGroup::from_curve_name(nid).unwrap()).unwrap();
    let traditional = Some(ec.private_key_to_pem().unwrap());
    Kind { name: name.into(), key: PKey::from_ec_key(ec).unwrap(), traditional }
}

fn rsa_pss(bits: u32) -> Kind {
    let mut ctx = PkeyCtx::new_id(Id::RSA_PSS).unwrap();
    ctx.keygen_init().unwrap();
    ctx.set_rsa_keygen_bits(bits).unwrap();
    Kind { name: format!("RSA-PSS {bits}"), key: ctx.keygen().unwrap(), traditional: None }
}

/// RSA 1024 to 4096, RSA-PSS, ECDSA P-256, P-384 and P-521, Ed25519, Ed448 and DSA: each
/// accepted by OpenSSL 3 and so by qdrouterd.
pub fn kinds() -> Vec<Kind> {
    let dsa = Dsa::generate(2048).unwrap();
    vec![
        rsa(1024),
        rsa(2048),
        rsa(3072),
        rsa(4096),
        rsa_pss(2048),
        ec("ECDSA P-256", Nid::X9_62_PRIME256V1),
        ec("ECDSA P-384", Nid::SECP384R1),
        ec("ECDSA P-521", Nid::SECP521R1),
        Kind { name: "Ed25519".into(), key: PKey::generate_ed25519().unwrap(), traditional: None },
        Kind { name: "Ed448".into(), key: PKey::generate_ed448().unwrap(), traditional: None },
        Kind {
            name: "DSA 2048".into(),
            traditional: Some(dsa.private_key_to_pem().unwrap()),
            key: PKey::from_dsa(dsa).unwrap(),
        },
    ]
}

/// A certificate (30 days, CN `cn`) for `subject_key`, signed by `signer` (a key and the
/// issuer's CN; itself when `None`), as PEM.
pub fn certificate(subject_key: &PKey<Private>, signer: Option<(&PKey<Private>, &str)>, cn: &str) -> String {
    let name = |cn: &str| {
        let mut n = X509NameBuilder::new().unwrap();
        n.append_entry_by_nid(Nid::COMMONNAME, cn).unwrap();
        n.build()
    };
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_serial_number(&BigNum::from_u32(7).unwrap().to_asn1_integer().unwrap()).unwrap();
    b.set_subject_name(&name(cn)).unwrap();
    let (key, issuer) = signer.unwrap_or((subject_key, cn));
    b.set_issuer_name(&name(issuer)).unwrap();
    b.set_pubkey(subject_key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap()).unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap()).unwrap();
    let digest = match key.id() {
        Id::ED25519 | Id::ED448 => MessageDigest::null(),
        _ => MessageDigest::sha256(),
    };
    b.sign(key, digest).unwrap();
    String::from_utf8(b.build().to_pem().unwrap()).unwrap()
}

/// A client certificate (30 days, CN `cn`, a new P-256 key) issued by the CA whose
/// certificate and key are `ca_pem` and `ca_key_pem` (its subject becomes the issuer), as
/// `(certificate PEM, key PEM)`.
///
/// # Panics
/// When either PEM does not parse.
pub fn issued_by(ca_pem: &[u8], ca_key_pem: &[u8], cn: &str) -> (String, String) {
    let ca = X509::from_pem(ca_pem).expect("a CA certificate");
    let ca_key = PKey::private_key_from_pem(ca_key_pem).expect("the CA's key");
    let key = PKey::from_ec_key(
        EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
    )
    .unwrap();
    let mut n = X509NameBuilder::new().unwrap();
    n.append_entry_by_nid(Nid::COMMONNAME, cn).unwrap();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_serial_number(&BigNum::from_u32(11).unwrap().to_asn1_integer().unwrap()).unwrap();
    b.set_subject_name(&n.build()).unwrap();
    b.set_issuer_name(ca.subject_name()).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap()).unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap()).unwrap();
    b.sign(&ca_key, MessageDigest::sha256()).unwrap();
    let pem = |v: Vec<u8>| String::from_utf8(v).unwrap();
    (pem(b.build().to_pem().unwrap()), pem(key.private_key_to_pem_pkcs8().unwrap()))
}
