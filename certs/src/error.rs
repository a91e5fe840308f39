//! The one error type of the crate: why a certificate operation failed. It owns nothing
//! else, so every module can use it without importing another module's work.

/// Why a certificate operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A certificate or key could not be made, parsed or verified.
    #[error("certificate: {0}")]
    Certificate(String),
    /// An API request failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl From<rcgen::Error> for Error {
    fn from(e: rcgen::Error) -> Self {
        Error::Certificate(e.to_string())
    }
}
