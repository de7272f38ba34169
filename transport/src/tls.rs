//! TLS for QUIC endpoints: whom to trust ([`Trust`]), who we are ([`Identity`]), and the
//! rustls configurations built from them.
//!
//! Verification is on unless [`Trust::Insecure`] is asked for by name; that mode exists for
//! development only, and whoever offers it should say so loudly when it is used.
//!
//! Every connection sends a keep-alive every [`KEEP_ALIVE`] and gives up on a silent peer
//! after [`IDLE_TIMEOUT`], so a peer that vanished without closing (a killed process, a cut
//! link) is noticed. A server endpoint made by [`server_endpoint`] derives its stateless
//! reset key from its private key: after a restart it can tell peers still holding
//! connections to its earlier life that those are gone, and they reconnect at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use quinn::rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use quinn::rustls::pki_types::pem::PemObject;
use quinn::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use quinn::rustls::server::WebPkiClientVerifier;
use quinn::rustls::{self, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate or key file could not be read or holds nothing usable.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// rustls refused the combination.
    #[error("TLS: {0}")]
    Config(String),
}

fn file_error(path: &Path) -> impl Fn(String) -> TlsError + '_ {
    move |message| TlsError::File { path: path.to_owned(), message }
}

/// Whom a connecting side trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Certificates in these PEM files: a broker's own self-signed `cert.pem` (pinning it),
    /// or a federation CA. Several certificates per file are allowed.
    Certificates(Vec<PathBuf>),
    /// No verification at all: anyone can impersonate the broker. Development only.
    Insecure,
}

/// A certificate chain and its private key, from PEM files.
#[derive(Debug)]
pub struct Identity {
    /// The certificate first, then any intermediates.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self { chain: self.chain.clone(), key: self.key.clone_key() }
    }
}

impl Identity {
    /// Reads a certificate chain and its key.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let chain = certificates(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key)(e.to_string()))?;
        Ok(Self { chain, key })
    }
}

/// Every certificate in a PEM file (at least one).
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path)(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path)(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(path)("no certificate in the file".to_owned()));
    }
    Ok(certs)
}

/// A root store holding every certificate of `paths`.
pub fn roots(paths: &[PathBuf]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for path in paths {
        for cert in certificates(path)? {
            roots.add(cert).map_err(|e| file_error(path)(e.to_string()))?;
        }
    }
    Ok(roots)
}

/// How often an idle connection proves it is alive.
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a peer may stay silent before its connection is given up.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn transport() -> Arc<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(KEEP_ALIVE));
    // Ten seconds always fits a QUIC idle timeout.
    transport.max_idle_timeout(quinn::IdleTimeout::try_from(IDLE_TIMEOUT).ok());
    Arc::new(transport)
}

/// A server endpoint on `socket` whose stateless reset key is derived from `identity`'s
/// private key, so it stays the same across restarts (see the module docs).
pub fn server_endpoint(
    socket: std::net::UdpSocket,
    config: quinn::ServerConfig,
    identity: &Identity,
) -> std::io::Result<quinn::Endpoint> {
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        derived(b"padres stateless reset key v1", identity).as_ref(),
    );
    let mut endpoint = quinn::EndpointConfig::new(Arc::new(key));
    // The restarted endpoint must also recognise the connection ids of its earlier life as
    // its own, or it drops their packets instead of answering them with a reset. The key
    // has its own label: connection ids are visible on the wire, and their (not
    // cryptographic) hash must reveal nothing of the reset key.
    let mut cid_key = [0_u8; 8];
    cid_key.copy_from_slice(&derived(b"padres connection id key v1", identity).as_ref()[..8]);
    let cid_key = u64::from_le_bytes(cid_key);
    endpoint.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key)));
    let runtime = quinn::default_runtime().ok_or_else(|| std::io::Error::other("no async runtime"))?;
    quinn::Endpoint::new(endpoint, Some(config), socket, runtime)
}

/// A key for `label`, derived from the identity's private key (stable across restarts).
fn derived(label: &[u8], identity: &Identity) -> ring::digest::Digest {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(label);
    context.update(identity.key.secret_der());
    context.finish()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configuration for dialling out: verify the peer as `trust` says, and present
/// `identity` when the peer asks for a certificate (mutual TLS between brokers).
pub fn client_config(trust: &Trust, identity: Option<&Identity>) -> Result<quinn::ClientConfig, TlsError> {
    let tls = |e: rustls::Error| TlsError::Config(e.to_string());
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?;
    let builder = match trust {
        Trust::Certificates(paths) => builder.with_root_certificates(roots(paths)?),
        Trust::Insecure => {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerification(provider())))
        }
    };
    let config = match identity {
        Some(id) => builder.with_client_auth_cert(id.chain.clone(), id.key.clone_key()).map_err(tls)?,
        None => builder.with_no_client_auth(),
    };
    let quic = QuicClientConfig::try_from(config).map_err(|e| TlsError::Config(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(transport());
    Ok(config)
}

/// The configuration for accepting connections as `identity`. With `client_ca`, peers may
/// present a certificate issued by it (and a certificate from anyone else fails the
/// handshake); peers without a certificate are still accepted, so that the caller can
/// decide per role (clients may come without one, brokers may not).
pub fn server_config(
    identity: &Identity,
    client_ca: Option<&[PathBuf]>,
) -> Result<quinn::ServerConfig, TlsError> {
    let tls = |e: rustls::Error| TlsError::Config(e.to_string());
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?;
    let builder = match client_ca {
        Some(paths) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(paths)?), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(identity.chain.clone(), identity.key.clone_key()).map_err(tls)?;
    let quic = QuicServerConfig::try_from(config).map_err(|e| TlsError::Config(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(transport());
    Ok(config)
}

/// The configuration for serving HTTPS (TLS 1.3, HTTP/1.1) as `identity`, for a broker's
/// HTTP listener: the same certificate its QUIC clients verify.
pub fn https_config(identity: &Identity) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let tls = |e: rustls::Error| TlsError::Config(e.to_string());
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(tls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// True if the peer of `connection` presented a certificate (which the server
/// configuration's verifier has then checked).
pub fn peer_has_certificate(connection: &quinn::Connection) -> bool {
    connection
        .peer_identity()
        .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
        .is_some_and(|chain| !chain.is_empty())
}

/// How a client certificate names its principal: a URI subject alternative name
/// `padres-client:NAME` (`padres-broker cert issue --client`). Broker certificates never
/// carry one, so a client certificate cannot pass for a broker's, nor the reverse.
pub const CLIENT_URI_PREFIX: &str = "padres-client:";

/// The principal the peer's certificate names as a client (`padres-client:NAME`), if it
/// presented one.
pub fn peer_client_name(connection: &quinn::Connection) -> Option<String> {
    let chain = connection.peer_identity()?.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(chain.first()?).ok()?;
    let alt = cert.subject_alternative_name().ok()??;
    alt.value.general_names.iter().find_map(|name| match name {
        x509_parser::extensions::GeneralName::URI(uri) => {
            uri.strip_prefix(CLIENT_URI_PREFIX).map(str::to_owned)
        }
        _ => None,
    })
}

/// The names the peer's certificate is for (its DNS subject alternative names and
/// common name); empty if it presented none.
pub fn peer_names(connection: &quinn::Connection) -> Vec<String> {
    let Some(chain) =
        connection.peer_identity().and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
    else {
        return Vec::new();
    };
    let Some(Ok((_, cert))) = chain.first().map(|der| x509_parser::parse_x509_certificate(der)) else {
        return Vec::new();
    };
    let mut names: Vec<String> =
        cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).map(str::to_owned).collect();
    if let Ok(Some(alt)) = cert.subject_alternative_name() {
        for name in &alt.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    names
}

/// Accepts any server certificate; signatures are still checked, so the handshake itself
/// is sound, but the peer is whoever answers.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
