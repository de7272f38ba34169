//! The broker's TLS identity and the federation's certificates.
//!
//! Alone, a broker makes a self-signed certificate on first start and keeps it in its data
//! directory (`cert.pem`, `key.pem`); clients trust it by pinning `cert.pem` (`--ca`) or
//! find it in the local registry. A federation instead has a CA ([`make_ca`]:
//! `ca.pem`, `ca-key.pem`) that issues each broker's certificate ([`issue`]) into its data
//! directory; with `federation_ca` set, a broker refuses to start without one, and broker
//! links use mutual TLS.

use std::path::Path;

use padres_transport::Identity;
use padres_transport::x509::Certificate;
use quinn::rustls::pki_types::CertificateDer;
use quinn::rustls::pki_types::pem::PemObject as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _, SanType,
};

use crate::config::Config;

/// Why an identity or certificate could not be loaded or made.
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

/// A broker's identity: what TLS uses, and the certificate's PEM text (registered for
/// local clients).
#[derive(Debug)]
pub struct BrokerIdentity {
    /// Certificate chain and key.
    pub tls: Identity,
    /// `cert.pem` as written.
    pub pem: String,
}

/// The identity `config` asks for: the data directory's `cert.pem`/`key.pem`, made
/// self-signed on first start unless a federation CA is configured (then it must have
/// been issued by the CA).
pub fn identity(config: &Config) -> Result<BrokerIdentity, CertError> {
    let dir = &config.data_dir;
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    if let Some(ca) = &config.federation_ca {
        if !cert_path.exists() || !key_path.exists() {
            return Err(CertError::Invalid(format!(
                "{}: no certificate, and federation_ca is set, so none is made here: issue one with \
                 `padres-broker cert issue --ca {} --name {} --out {}`",
                cert_path.display(),
                ca.parent().map_or_else(|| ".".to_owned(), |p| p.display().to_string()),
                config.name,
                dir.display()
            )));
        }
    } else {
        let mut names = vec![config.name.clone()];
        names.extend(config.cert_hosts.iter().cloned());
        load_or_create(dir, &names)?;
    }
    let tls =
        Identity::from_pem_files(&cert_path, &key_path).map_err(|e| CertError::Invalid(e.to_string()))?;
    let pem = std::fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
    Ok(BrokerIdentity { tls, pem })
}

/// Makes the certificate and key in `dir` (self-signed for `names`, `localhost` and
/// 127.0.0.1) if absent.
pub fn load_or_create(dir: &Path, names: &[String]) -> Result<(), CertError> {
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    if !cert_path.exists() || !key_path.exists() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let key = KeyPair::generate().map_err(invalid)?;
        let cert = leaf_params(names, &[])?.self_signed(&key).map_err(invalid)?;
        write_private(&key_path, &key.serialize_pem())?;
        std::fs::write(&cert_path, cert.pem()).map_err(io(&cert_path))?;
    }
    Ok(())
}

fn invalid(e: rcgen::Error) -> CertError {
    CertError::Invalid(format!("cannot make a certificate: {e}"))
}

/// Parameters of a broker's (or client's) certificate: its names and the loopback names.
fn leaf_params(names: &[String], hosts: &[String]) -> Result<CertificateParams, CertError> {
    let mut alt = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    alt.extend(names.iter().filter(|n| !n.is_empty()).cloned());
    alt.extend(hosts.iter().cloned());
    alt.dedup();
    let mut params = CertificateParams::new(alt).map_err(invalid)?;
    if let Some(first) = names.first() {
        params.distinguished_name.push(DnType::CommonName, first.clone());
    }
    params.extended_key_usages =
        vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}

/// Writes a private key readable by its owner only.
fn write_private(path: &Path, pem: &str) -> Result<(), CertError> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(io(path))?;
    file.write_all(pem.as_bytes()).map_err(io(path))
}

fn refuse_overwrite(paths: &[&Path], force: bool) -> Result<(), CertError> {
    match paths.iter().find(|p| p.exists()) {
        Some(p) if !force => Err(CertError::Invalid(format!(
            "{} exists; refusing to overwrite it (use --force to replace it)",
            p.display()
        ))),
        _ => Ok(()),
    }
}

/// Makes a federation CA in `dir`: `ca.pem` (give it to every broker as `federation_ca`)
/// and `ca-key.pem` (keep it where certificates are issued).
pub fn make_ca(dir: &Path, name: &str, force: bool) -> Result<(), CertError> {
    let cert_path = dir.join("ca.pem");
    let key_path = dir.join("ca-key.pem");
    refuse_overwrite(&[&cert_path, &key_path], force)?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let key = KeyPair::generate().map_err(invalid)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(invalid)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let cert = params.self_signed(&key).map_err(invalid)?;
    write_private(&key_path, &key.serialize_pem())?;
    std::fs::write(&cert_path, cert.pem()).map_err(io(&cert_path))
}

/// Issues a certificate for broker `name`, valid also for `hosts` (DNS names or IP
/// addresses it is reached by), signed by the CA in `ca_dir`, into `out` (`cert.pem`,
/// `key.pem`: a broker's data directory).
pub fn issue(ca_dir: &Path, name: &str, hosts: &[String], out: &Path, force: bool) -> Result<(), CertError> {
    sign(ca_dir, leaf_params(&[name.to_owned()], hosts)?, out, force)
}

/// Issues a client certificate for principal `name`, signed by the CA in `ca_dir`, into
/// `out` (`cert.pem`, `key.pem`): for client authentication only, naming the principal
/// in a `padres-client:NAME` URI, with no host names, so that it cannot serve as a
/// broker's certificate (brokers refuse a link presenting it).
pub fn issue_client(ca_dir: &Path, name: &str, out: &Path, force: bool) -> Result<(), CertError> {
    if name.contains(char::is_whitespace) || crate::auth::valid_principal(name).is_err() {
        return Err(CertError::Invalid(format!("'{name}' cannot name a principal")));
    }
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(invalid)?;
    params.distinguished_name.push(DnType::CommonName, name);
    let uri = format!("{}{name}", padres_transport::tls::CLIENT_URI_PREFIX);
    params.subject_alt_names = vec![SanType::URI(uri.try_into().map_err(invalid)?)];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign(ca_dir, params, out, force)
}

/// Signs a certificate of `params` with a new key by the CA in `ca_dir`, into `out`.
fn sign(ca_dir: &Path, params: CertificateParams, out: &Path, force: bool) -> Result<(), CertError> {
    let ca_cert = ca_dir.join("ca.pem");
    let ca_key_path = ca_dir.join("ca-key.pem");
    let ca_pem = std::fs::read_to_string(&ca_cert).map_err(io(&ca_cert))?;
    let ca_key_pem = std::fs::read_to_string(&ca_key_path).map_err(io(&ca_key_path))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem)
        .map_err(|e| CertError::Invalid(format!("{}: {e}", ca_key_path.display())))?;
    let bad_ca = |why: &str| CertError::Invalid(format!("{}: {why}", ca_cert.display()));
    let ca_der = CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .map_err(|e| bad_ca(&format!("no certificate in it: {e}")))?;
    let ca = Certificate::parse(&ca_der).ok_or_else(|| bad_ca("the certificate cannot be parsed"))?;
    if ca.public_key_info != ca_key.subject_public_key_info() {
        return Err(bad_ca(&format!("{} is not the key of this certificate", ca_key_path.display())));
    }
    let mut issuer_params = CertificateParams::default();
    issuer_params.distinguished_name = subject_of(&ca).map_err(|why| bad_ca(&why))?;
    let issuer = Issuer::new(issuer_params, ca_key);
    let cert_path = out.join("cert.pem");
    let key_path = out.join("key.pem");
    refuse_overwrite(&[&cert_path, &key_path], force)?;
    let key = KeyPair::generate().map_err(invalid)?;
    let cert = params.signed_by(&key, &issuer).map_err(invalid)?;
    // A verifier finds the CA by the issuer name, byte for byte.
    if Certificate::parse(cert.der()).map(|issued| issued.issuer_name) != Some(ca.subject_name) {
        return Err(bad_ca(
            "its subject name cannot be written again as it is; make the CA with `padres-broker cert ca`",
        ));
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    write_private(&key_path, &key.serialize_pem())?;
    std::fs::write(&cert_path, cert.pem()).map_err(io(&cert_path))
}

/// The distinguished name of `ca`'s subject, to issue under (its attributes in order, each
/// with its string type).
fn subject_of(ca: &Certificate<'_>) -> Result<DistinguishedName, String> {
    let mut name = DistinguishedName::new();
    for attribute in &ca.subject {
        let arcs = attribute.oid_arcs().ok_or("its subject has a malformed attribute type")?;
        let text = attribute.text().ok_or("its subject has a value that is not text")?.to_owned();
        let value = match attribute.tag {
            0x13 => DnValue::PrintableString(text.try_into().map_err(|e| format!("its subject: {e}"))?),
            0x16 => DnValue::Ia5String(text.try_into().map_err(|e| format!("its subject: {e}"))?),
            _ => DnValue::Utf8String(text),
        };
        name.push(DnType::from_oid(&arcs), value);
    }
    Ok(name)
}

/// Which life of the broker with data directory `dir` this is: one more than the last,
/// kept in `dir/incarnation`. It is the high half of every id the broker assigns, so ids
/// from before a restart never come back.
pub fn next_incarnation(dir: &Path) -> Result<u32, CertError> {
    let path = dir.join("incarnation");
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u32>().map_err(|_| {
            CertError::Invalid(format!(
                "{}: expected a number; delete the file to start over",
                path.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io(&path)(e)),
    };
    // After u32::MAX lives the count starts over; ids of a life 2^32 starts ago are gone.
    std::fs::write(&path, format!("{}\n", last.wrapping_add(1))).map_err(io(&path))?;
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("padres-cert-{name}-{}", std::process::id()))
    }

    #[test]
    fn an_identity_is_made_once_and_reused() {
        let dir = temp("reuse");
        let config = Config { name: "B1".into(), data_dir: dir.clone(), ..Config::default() };
        let first = identity(&config).expect("made");
        let again = identity(&config).expect("reused");
        assert_eq!(first.pem, again.pem, "the same certificate on the second start");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn with_a_federation_ca_a_broker_needs_an_issued_certificate() {
        let dir = temp("fed");
        let ca = dir.join("ca");
        make_ca(&ca, "test federation", false).expect("CA made");
        assert!(make_ca(&ca, "again", false).is_err(), "an existing CA is not overwritten");
        let data = dir.join("b1");
        let config = Config {
            name: "B1".into(),
            data_dir: data.clone(),
            federation_ca: Some(ca.join("ca.pem")),
            ..Config::default()
        };
        let missing = identity(&config).expect_err("no certificate yet").to_string();
        assert!(missing.contains("padres-broker cert issue"), "{missing}");
        issue(&ca, "B1", &["b1.example".into()], &data, false).expect("issued");
        identity(&config).expect("the issued certificate is used");
        // Another CA's key beside this CA's certificate: refused, nothing written.
        let other = dir.join("other");
        make_ca(&other, "another federation", false).expect("CA made");
        std::fs::copy(other.join("ca-key.pem"), ca.join("ca-key.pem")).expect("copied");
        let refused = issue(&ca, "B2", &[], &dir.join("b2"), false).expect_err("the wrong key").to_string();
        assert!(refused.contains("is not the key of this certificate"), "{refused}");
        assert!(!dir.join("b2").exists(), "nothing made for a refused issue");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn incarnations_count_up() {
        let dir = temp("incarnation");
        assert_eq!(next_incarnation(&dir).ok(), Some(0));
        assert_eq!(next_incarnation(&dir).ok(), Some(1));
        // The last incarnation, then the count starts over (it panicked here before).
        std::fs::write(dir.join("incarnation"), format!("{}\n", u32::MAX)).expect("written");
        assert_eq!(next_incarnation(&dir).ok(), Some(u32::MAX));
        assert_eq!(next_incarnation(&dir).ok(), Some(0));
        std::fs::remove_dir_all(&dir).ok();
    }
}
