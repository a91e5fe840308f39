//! Keys and certificates that users provide, judged as the router reads them: qdrouterd
//! loads `tls.crt` and `tls.key` with OpenSSL, so they are checked with OpenSSL here too
//! (the `openssl` crate over the system's libssl, which the images carry: deploy/docker). `ring`, which signs what the operator generates, refuses
//! keys that OpenSSL and the router accept: P-521, RSA under 2048 bits, RSA-PSS, Ed448,
//! DSA. Rejecting those would mark a working Secret invalid and hold running routers.

use openssl::pkey::PKey;
use openssl::x509::X509;

/// Checks that `key_pem` is the private key of the first certificate of `cert_pem`: every
/// unencrypted PEM private key OpenSSL reads (PKCS#8 of any algorithm, PKCS#1 RSA, SEC1 EC,
/// traditional DSA), compared by public key with the certificate's.
///
/// # Errors
/// A phrase saying what is wrong: `tls.crt` holds no certificate, no private key can be
/// read, or the key belongs to another certificate.
pub fn key_matches(cert_pem: &str, key_pem: &str) -> Result<(), String> {
    let cert = X509::from_pem(cert_pem.as_bytes()).map_err(|_| "no PEM certificate".to_string())?;
    let key = PKey::private_key_from_pem(key_pem.as_bytes())
        .map_err(|_| "no PEM private key that OpenSSL can read (an encrypted key is not read)".to_string())?;
    let public =
        cert.public_key().map_err(|_| "a certificate whose public key OpenSSL cannot read".to_string())?;
    if public.public_eq(&key) {
        Ok(())
    } else {
        Err("the private key does not belong to the certificate".into())
    }
}

/// Whether the first certificate of `cert_pem` carries a signature that the public key of
/// the first certificate of `issuer_pem` verifies (any algorithm OpenSSL verifies, RSA-PSS
/// and Ed448 included): the issuer's identity is its key, not its name. `false` when either
/// does not parse.
pub fn signed_by(cert_pem: &str, issuer_pem: &str) -> bool {
    let (Ok(cert), Ok(issuer)) = (X509::from_pem(cert_pem.as_bytes()), X509::from_pem(issuer_pem.as_bytes()))
    else {
        return false;
    };
    issuer.public_key().and_then(|k| cert.verify(&k)).unwrap_or(false)
}

#[cfg(test)]
mod tests;
