//! The broker's TLS identity: a self-signed certificate made on first start and kept in
//! the data directory (`cert.pem`, `key.pem`), reused afterwards. Clients trust it by
//! pinning `cert.pem` (`--ca`).

use std::path::Path;

use quinn::rustls::pki_types::pem::PemObject;
use quinn::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the identity could not be loaded or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A PEM file holds no certificate or key, or generation failed.
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io { path: path.display().to_string(), source }
}

/// The certificate and key in `dir`, made (self-signed for `names`, `localhost` and
/// 127.0.0.1) if absent.
pub fn load_or_create(
    dir: &Path,
    names: &[String],
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), CertError> {
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    if !cert_path.exists() || !key_path.exists() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut subject_alt_names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        subject_alt_names.extend(names.iter().cloned());
        let certified = rcgen::generate_simple_self_signed(subject_alt_names)
            .map_err(|e| CertError::Invalid(format!("cannot make a certificate: {e}")))?;
        std::fs::write(&cert_path, certified.cert.pem()).map_err(io(&cert_path))?;
        std::fs::write(&key_path, certified.signing_key.serialize_pem()).map_err(io(&key_path))?;
    }
    let cert = CertificateDer::from_pem_file(&cert_path)
        .map_err(|e| CertError::Invalid(format!("{}: {e}", cert_path.display())))?;
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| CertError::Invalid(format!("{}: {e}", key_path.display())))?;
    Ok((cert, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_is_made_once_and_reused() {
        let dir = std::env::temp_dir().join(format!("padres-cert-{}", std::process::id()));
        let (cert, _) = load_or_create(&dir, &["B1".into()]).expect("made");
        let (again, _) = load_or_create(&dir, &["B1".into()]).expect("reused");
        assert_eq!(cert, again, "the same certificate on the second start");
        std::fs::remove_dir_all(&dir).ok();
    }
}
