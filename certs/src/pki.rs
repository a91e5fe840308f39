//! Certificates: an ECDSA P-256 CA and serving certificates it signs, as PEM, and the few
//! facts about a certificate the rotation logic needs (validity, issuer, names).

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use time::OffsetDateTime;

use crate::error::Error;

/// A certificate and its private key, PEM (the key PKCS#8).
#[derive(Clone, PartialEq, Eq)]
pub struct CertKey {
    /// PEM `CERTIFICATE`.
    pub cert_pem: String,
    /// PEM `PRIVATE KEY`.
    pub key_pem: String,
}

impl std::fmt::Debug for CertKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a private key.
        f.debug_struct("CertKey").field("cert", &CertInfo::parse(&self.cert_pem).ok()).finish_non_exhaustive()
    }
}

/// What rotation needs to know about a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// Subject common name.
    pub subject_cn: String,
    /// Issuer common name (equal to `subject_cn` for a self-signed CA).
    pub issuer_cn: String,
    /// DNS names and IP addresses (as text) of the subjectAltName extension.
    pub sans: Vec<String>,
    /// Whether basicConstraints says CA.
    pub is_ca: bool,
}

impl CertInfo {
    /// Parses the first certificate of a PEM text.
    ///
    /// # Errors
    /// [`Error::Certificate`] when the text holds no parsable certificate.
    pub fn parse(pem: &str) -> Result<Self, Error> {
        let der = first_der(pem)?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| Error::Certificate(format!("bad certificate: {e}")))?;
        let ts = |t: x509_parser::time::ASN1Time| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(t.timestamp().max(0) as u64)
        };
        let cn = |n: &x509_parser::x509::X509Name<'_>| {
            n.iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or_default().to_string()
        };
        let mut sans = Vec::new();
        if let Ok(Some(ext)) = cert.subject_alternative_name() {
            for name in &ext.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::DNSName(d) => sans.push(d.to_string()),
                    x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                        4 => sans.push(std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string()),
                        16 => {
                            let b: [u8; 16] = (*ip).try_into().unwrap_or([0; 16]);
                            sans.push(std::net::Ipv6Addr::from(b).to_string())
                        }
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        Ok(CertInfo {
            not_before: ts(cert.validity().not_before),
            not_after: ts(cert.validity().not_after),
            subject_cn: cn(cert.subject()),
            issuer_cn: cn(cert.issuer()),
            sans,
            is_ca: cert.is_ca(),
        })
    }

    /// The moment `fraction` of the lifetime has passed (rotation at 2/3 uses 2/3).
    pub fn point(&self, fraction: f64) -> SystemTime {
        let life = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + life.mul_f64(fraction)
    }
}

/// The DER bytes of the first `CERTIFICATE` block.
pub fn first_der(pem: &str) -> Result<Vec<u8>, Error> {
    certs_der(pem)?.into_iter().next().ok_or_else(|| Error::Certificate("no certificate in PEM".into()))
}

/// The DER bytes of every `CERTIFICATE` block, in order.
pub fn certs_der(pem: &str) -> Result<Vec<Vec<u8>>, Error> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.map(|c| c.to_vec()).map_err(|e| Error::Certificate(format!("bad PEM: {e}"))))
        .collect()
}

/// Splits a PEM bundle into one PEM text per certificate (normalized).
pub fn split_bundle(pem: &str) -> Vec<String> {
    certs_der(pem).unwrap_or_default().iter().map(|d| der_to_pem(d)).collect()
}

/// PEM text of one DER certificate.
pub fn der_to_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn validity(params: &mut CertificateParams, now: SystemTime, lifetime: Duration) {
    // Backdate a little for clock skew between the API server and us, but never by more
    // than a tenth of the lifetime (tests use lifetimes of seconds).
    let backdate = (lifetime / 10).min(Duration::from_secs(300));
    let start = OffsetDateTime::from(now - backdate);
    params.not_before = start;
    params.not_after = start + (lifetime + backdate);
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider().secure_random.fill(&mut bytes).expect("system randomness");
    bytes[0] &= 0x7f; // positive
    SerialNumber::from_slice(&bytes)
}

fn random_suffix() -> String {
    let mut bytes = [0u8; 6];
    rustls::crypto::ring::default_provider().secure_random.fill(&mut bytes).expect("system randomness");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes a self-signed ECDSA P-256 CA valid for `lifetime` from `now`, with a unique common
/// name `<name_prefix>-<random>` so that leaves can be told apart by issuer. It signs
/// leaves only (path length 0).
///
/// # Errors
/// [`Error::Certificate`] if rcgen fails.
pub fn new_ca(name_prefix: &str, now: SystemTime, lifetime: Duration) -> Result<CertKey, Error> {
    self_signed_ca(name_prefix, 0, now, lifetime)
}

/// Makes a self-signed ECDSA P-256 root CA like [`new_ca`] that may sign one level of CAs
/// (path length 1): the long-lived anchor that [`cross_sign`]s each generation of a
/// rotating CA, so that a peer trusting the root keeps verifying certificates of every
/// generation (each presented with its CA's cross-signed certificate as the chain).
///
/// # Errors
/// [`Error::Certificate`] if rcgen fails.
pub fn new_root(name_prefix: &str, now: SystemTime, lifetime: Duration) -> Result<CertKey, Error> {
    self_signed_ca(name_prefix, 1, now, lifetime)
}

fn ca_params(cn: String, path_len: u8) -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(path_len));
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.serial_number = Some(random_serial());
    Ok(params)
}

fn self_signed_ca(
    name_prefix: &str,
    path_len: u8,
    now: SystemTime,
    lifetime: Duration,
) -> Result<CertKey, Error> {
    let key = KeyPair::generate()?;
    let mut params = ca_params(format!("{name_prefix}-{}", random_suffix()), path_len)?;
    validity(&mut params, now, lifetime);
    let cert = params.self_signed(&key)?;
    Ok(CertKey { cert_pem: der_to_pem(cert.der()), key_pem: key.serialize_pem() })
}

/// The certificate of CA `ca` (made by [`new_ca`]) issued again by `root` ([`new_root`]):
/// the same subject, key (so the same subject key identifier) and validity, signed by the
/// root, with the root's key identifier as authority key identifier. A server that sends it
/// after its own certificate is verified by a peer that trusts `ca` (which finds `ca` by
/// name and key) and by one that trusts only `root` (through this certificate), whatever
/// generation of `ca` signed it. PEM.
///
/// # Errors
/// [`Error::Certificate`] when either pair cannot be loaded or signing fails.
pub fn cross_sign(ca: &CertKey, root: &CertKey) -> Result<String, Error> {
    let info = CertInfo::parse(&ca.cert_pem)?;
    let key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&root.cert_pem, KeyPair::from_pem(&root.key_pem)?)?;
    let mut params = ca_params(info.subject_cn, 0)?;
    params.not_before = OffsetDateTime::from(info.not_before);
    params.not_after = OffsetDateTime::from(info.not_after);
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(der_to_pem(cert.der()))
}

/// Makes a serving (and client) certificate for `sans` (DNS names or IP literals) signed by
/// `ca`, valid for `lifetime` from `now`. The first SAN is the common name.
///
/// # Errors
/// [`Error::Certificate`] when the CA cannot be loaded or a SAN is invalid.
pub fn new_leaf(
    ca: &CertKey,
    sans: &[String],
    now: SystemTime,
    lifetime: Duration,
) -> Result<CertKey, Error> {
    let usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    leaf(ca, sans, None, usages, now, lifetime)
}

/// A leaf for `sans` (the first is the common name), with subject organization
/// `organization`, extended key usages `usages`, signed by `ca`.
fn leaf(
    ca: &CertKey,
    sans: &[String],
    organization: Option<&str>,
    usages: Vec<ExtendedKeyUsagePurpose>,
    now: SystemTime,
    lifetime: Duration,
) -> Result<CertKey, Error> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params.distinguished_name.push(DnType::CommonName, sans.first().cloned().unwrap_or_default());
    if let Some(o) = organization {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    params.extended_key_usages = usages;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial());
    validity(&mut params, now, lifetime);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertKey { cert_pem: der_to_pem(cert.der()), key_pem: key.serialize_pem() })
}

/// Makes a client-only certificate (extended key usage `clientAuth` alone, so no TLS client
/// accepts it as a server's) for `cn`, which is also its one DNS SAN, with subject
/// organization `organization`, signed by `ca`, valid for `lifetime` from `now`. What an
/// AccessGrant hands a remote site: the organization marks the certificate as one, and the
/// site's routers' connection rows report the subject (`CN=…,O=…` under SASL EXTERNAL).
///
/// # Errors
/// [`Error::Certificate`] when the CA cannot be loaded or `cn` is not a DNS name.
pub fn new_client_leaf(
    ca: &CertKey,
    cn: &str,
    organization: &str,
    now: SystemTime,
    lifetime: Duration,
) -> Result<CertKey, Error> {
    let usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    leaf(ca, &[cn.to_string()], Some(organization), usages, now, lifetime)
}

/// Verifies that `leaf_pem` (the leaf, then the chain a server sends after it, if any)
/// chains to one of the CAs in `bundle_pem` and is valid for `server_name` at `now` (rustls'
/// WebPKI verifier: signature, validity, serverAuth, SAN).
///
/// # Errors
/// [`Error::Certificate`] with the verifier's reason.
pub fn verify_leaf(
    leaf_pem: &str,
    bundle_pem: &str,
    server_name: &str,
    now: SystemTime,
) -> Result<(), Error> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for der in certs_der(bundle_pem)? {
        roots.add(CertificateDer::from(der)).map_err(|e| Error::Certificate(format!("bad CA: {e}")))?;
    }
    if roots.is_empty() {
        return Err(Error::Certificate("empty CA bundle".into()));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
        .build()
        .map_err(|e| Error::Certificate(e.to_string()))?;
    let mut chain = certs_der(leaf_pem)?.into_iter().map(CertificateDer::from);
    let leaf = chain.next().ok_or_else(|| Error::Certificate("no certificate in PEM".into()))?;
    let intermediates: Vec<_> = chain.collect();
    let name =
        ServerName::try_from(server_name.to_string()).map_err(|e| Error::Certificate(e.to_string()))?;
    let secs = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    verifier
        .verify_server_cert(&leaf, &intermediates, &name, &[], UnixTime::since_unix_epoch(secs))
        .map(|_| ())
        .map_err(|e| Error::Certificate(e.to_string()))
}
