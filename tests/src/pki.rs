//! The throwaway PKI of a test control plane, made with rcgen.
//!
//! One ECDSA P-256 CA signs the API server's serving certificate, the admin client
//! certificate (CN `admin`, O `system:masters`, which bypasses RBAC) and any serving
//! certificate a test needs (webhooks, kube-controller-manager). A separate P-256 key
//! signs service-account tokens.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use crate::Error;

/// A certificate and its private key, both PEM (the key is PKCS#8).
#[derive(Debug, Clone)]
pub struct CertPair {
    /// PEM `CERTIFICATE` block.
    pub cert_pem: String,
    /// PEM `PRIVATE KEY` block (PKCS#8).
    pub key_pem: String,
}

/// The CA plus the service-account signing key.
pub struct Pki {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    /// PEM PKCS#8 P-256 key that signs service-account tokens.
    pub service_account_key_pem: String,
    /// PEM public key that verifies them.
    pub service_account_pub_pem: String,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

/// Validity of every certificate: from one hour ago (clock skew) to seven days ahead,
/// like envtest's 168 h.
fn validity(params: &mut CertificateParams) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(7);
}

impl Pki {
    /// Makes a new CA and service-account key.
    ///
    /// # Errors
    /// [`Error::Pki`] if rcgen fails (it does not for these fixed inputs).
    pub fn new() -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "qdr-operator test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut params);
        let ca = params.self_signed(&key)?;
        let sa = KeyPair::generate()?;
        Ok(Pki {
            ca_pem: ca.pem(),
            issuer: Issuer::new(params, key),
            service_account_key_pem: sa.serialize_pem(),
            service_account_pub_pem: sa.public_key_pem(),
        })
    }

    /// The CA certificate, PEM. This is what clients trust and what a webhook's
    /// `caBundle` carries.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A serving certificate (EKU serverAuth) for the given DNS names and IP literals.
    ///
    /// # Errors
    /// [`Error::Pki`] when a name is not a valid DNS name or IP address.
    pub fn serving(&self, common_name: &str, sans: &[&str]) -> Result<CertPair, Error> {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        self.sign(params)
    }

    /// A client certificate (EKU clientAuth) for user `user` in `groups` (the
    /// certificate's O attributes, which the API server maps to groups).
    ///
    /// # Errors
    /// [`Error::Pki`] if rcgen fails.
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<CertPair, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<CertPair, Error> {
        validity(&mut params);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}
