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
use quinn::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use quinn::rustls::{self, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use crate::x509::Certificate;

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
        Trust::Certificates(paths) => {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(Pinning::new(paths)?))
        }
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

/// The configuration for accepting connections as `identity`. With `ask_for_certificates`,
/// peers may present a certificate, and must prove they hold its key; whether it is
/// *trusted* is left to [`PeerCertificates::check`] after the handshake, so that an
/// untrusted one is refused at the hello, with the reason, instead of by a TLS alert.
/// Peers without a certificate are accepted too, so that the caller can decide per role
/// (clients may come without one, brokers may not).
pub fn server_config(
    identity: &Identity,
    ask_for_certificates: bool,
) -> Result<quinn::ServerConfig, TlsError> {
    let tls = |e: rustls::Error| TlsError::Config(e.to_string());
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?;
    let builder = if ask_for_certificates {
        builder.with_client_cert_verifier(Arc::new(ProofOfKey(provider())))
    } else {
        builder.with_no_client_auth()
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

/// How a client certificate names its principal: a URI subject alternative name
/// `padres-client:NAME` (`padres-broker cert issue --client`). Broker certificates never
/// carry one, so a client certificate cannot pass for a broker's, nor the reverse.
pub const CLIENT_URI_PREFIX: &str = "padres-client:";

/// Whose certificates a server trusts when a peer presents one: those a CA issued, and
/// certificates pinned one by one (brokers' `cert.pem`). A pinned certificate is trusted
/// only as itself, byte for byte: not as an issuer (a trust anchor would vouch for
/// anything its key signed, so a pinned broker could mint a certificate for another).
pub struct PeerCertificates {
    ca: Option<Arc<dyn ClientCertVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for PeerCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCertificates")
            .field("ca", &self.ca.is_some())
            .field("pinned", &self.pinned.len())
            .finish()
    }
}

/// Who issued a certificate a peer presented and [`PeerCertificates`] trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issuer {
    /// The CA.
    Ca,
    /// The certificate is pinned itself.
    Pinned,
}

/// What a peer's certificate proves, once checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presented {
    /// It presented none.
    Nothing,
    /// It presented one that neither the CA issued nor is pinned; why.
    Untrusted(String),
    /// It presented a trusted one.
    Trusted {
        /// Who vouches for it.
        issuer: Issuer,
        /// The host names it is for (DNS subject alternative names and common name).
        names: Vec<String>,
        /// The principal it names as a client (`padres-client:NAME`), if any.
        client: Option<String>,
    },
}

impl PeerCertificates {
    /// Trusts certificates issued by the CA in `ca` (PEM), and those in the `pinned` files.
    /// `ca` must hold CA certificates only: a broker's certificate there would let that
    /// broker issue certificates for any broker or client principal.
    pub fn new(ca: Option<&Path>, pinned: &[PathBuf]) -> Result<Self, TlsError> {
        let ca = match ca {
            Some(path) => {
                let mut store = RootCertStore::empty();
                for der in certificates(path)? {
                    if !is_ca(&der) {
                        return Err(file_error(path)(
                            "holds a certificate that is not a CA's (basicConstraints CA:TRUE): give the \
                             federation's ca.pem (padres-broker cert ca), not a broker's cert.pem"
                                .to_owned(),
                        ));
                    }
                    store.add(der).map_err(|e| file_error(path)(e.to_string()))?;
                }
                Some(
                    WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider())
                        .build()
                        .map_err(|e| TlsError::Config(e.to_string()))?,
                )
            }
            None => None,
        };
        let mut each = Vec::new();
        for path in pinned {
            each.extend(certificates(path)?);
        }
        Ok(Self { ca, pinned: each })
    }

    /// Checks the certificate the peer of `connection` presented (the TLS handshake proved
    /// it holds the key).
    pub fn check(&self, connection: &quinn::Connection) -> Presented {
        let Some(chain) = connection
            .peer_identity()
            .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
            .filter(|chain| !chain.is_empty())
        else {
            return Presented::Nothing;
        };
        let (end_entity, intermediates) = (&chain[0], &chain[1..]);
        let now = UnixTime::now();
        let by_ca = self.ca.as_ref().map(|v| v.verify_client_cert(end_entity, intermediates, now));
        let issuer = match by_ca {
            Some(Ok(_)) => Issuer::Ca,
            _ if self.pinned.contains(end_entity) => match current(end_entity) {
                Ok(()) => Issuer::Pinned,
                Err(why) => {
                    return Presented::Untrusted(format!("the certificate presented is pinned, but {why}"));
                }
            },
            Some(Err(e)) => {
                return Presented::Untrusted(format!("the certificate presented is not trusted here: {e}"));
            }
            None => {
                return Presented::Untrusted(
                    "the certificate presented is not trusted here: it is none of the pinned ones".to_owned(),
                );
            }
        };
        let Some((names, client)) = names_in(end_entity) else {
            return Presented::Untrusted("the certificate presented cannot be parsed".to_owned());
        };
        Presented::Trusted { issuer, names, client }
    }
}

/// Whether `der` is a CA's certificate (basicConstraints CA:TRUE).
fn is_ca(der: &CertificateDer<'_>) -> bool {
    Certificate::parse(der).is_some_and(|cert| cert.is_ca)
}

/// Whether `der` is within its validity period now.
fn current(der: &CertificateDer<'_>) -> Result<(), String> {
    let cert = Certificate::parse(der).ok_or_else(|| "it cannot be parsed".to_owned())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    if cert.valid_at(now) { Ok(()) } else { Err("it has expired or is not valid yet".to_owned()) }
}

/// The names the certificate of the server at the other end of `connection` is for (its
/// DNS subject alternative names and common name); empty if there is none. Meaningful only
/// where the client configuration verified it ([`Trust::Certificates`]).
pub fn server_names(connection: &quinn::Connection) -> Vec<String> {
    connection
        .peer_identity()
        .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
        .and_then(|chain| names_in(chain.first()?))
        .map(|(names, _)| names)
        .unwrap_or_default()
}

/// The host names a certificate is for (its common name and DNS subject alternative
/// names), and the principal it names as a client; `None` if it cannot be parsed.
fn names_in(der: &CertificateDer<'_>) -> Option<(Vec<String>, Option<String>)> {
    let cert = Certificate::parse(der)?;
    let names = cert.common_names().chain(cert.dns_names.iter().copied()).map(str::to_owned).collect();
    let client = cert.uris.iter().find_map(|uri| uri.strip_prefix(CLIENT_URI_PREFIX)).map(str::to_owned);
    Some((names, client))
}

/// The handshake signature checks of a verifier holding its `CryptoProvider` in field
/// `$provider`: whatever the verifier says of a certificate, the peer must prove it holds
/// its key.
macro_rules! signature_checks {
    ($provider:tt) => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(message, cert, dss, &self.$provider.signature_verification_algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(message, cert, dss, &self.$provider.signature_verification_algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.$provider.signature_verification_algorithms.supported_schemes()
        }
    };
}

/// Verifies a server as [`Trust::Certificates`] says: a CA certificate among them
/// (basicConstraints CA) vouches for those it issued (webpki, with the server's name), and
/// any other is pinned: trusted as itself only, byte for byte, for the names it carries. A
/// pinned certificate used as a trust anchor would vouch for whatever its key signed, so a
/// broker whose certificate is pinned could pass for any other.
#[derive(Debug)]
struct Pinning {
    cas: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl Pinning {
    fn new(paths: &[PathBuf]) -> Result<Self, TlsError> {
        let mut cas = RootCertStore::empty();
        let mut pinned = Vec::new();
        for path in paths {
            for cert in certificates(path)? {
                if is_ca(&cert) {
                    cas.add(cert).map_err(|e| file_error(path)(e.to_string()))?;
                } else {
                    pinned.push(cert);
                }
            }
        }
        let cas = if cas.is_empty() {
            None
        } else {
            Some(
                rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(cas), provider())
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?,
            )
        };
        Ok(Self { cas, pinned, provider: provider() })
    }
}

/// Whether `der` is for `server`: a DNS name among its DNS subject alternative names
/// (ASCII case ignored), an IP address among its IP ones.
fn names_server(der: &CertificateDer<'_>, server: &ServerName<'_>) -> bool {
    let Some(cert) = Certificate::parse(der) else { return false };
    match server {
        ServerName::DnsName(wanted) => {
            cert.dns_names.iter().any(|dns| dns.eq_ignore_ascii_case(wanted.as_ref()))
        }
        ServerName::IpAddress(ip) => {
            cert.ip_addresses.iter().any(|bytes| match std::net::IpAddr::from(*ip) {
                std::net::IpAddr::V4(v4) => *bytes == v4.octets().as_slice(),
                std::net::IpAddr::V6(v6) => *bytes == v6.octets().as_slice(),
            })
        }
        _ => false,
    }
}

impl ServerCertVerifier for Pinning {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError;
        if self.pinned.iter().any(|pinned| pinned.as_ref() == end_entity.as_ref()) {
            if current(end_entity).is_err() {
                return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
            }
            if !names_server(end_entity, server_name) {
                return Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName));
            }
            return Ok(ServerCertVerified::assertion());
        }
        match &self.cas {
            Some(cas) => cas.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now),
            None => Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)),
        }
    }

    signature_checks!(provider);
}

/// Asks clients for a certificate without requiring one, and accepts any whose key the
/// client proves it holds (the handshake signature is checked); [`PeerCertificates::check`]
/// decides after the handshake whether it is trusted.
#[derive(Debug)]
struct ProofOfKey(Arc<CryptoProvider>);

impl ClientCertVerifier for ProofOfKey {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    signature_checks!(0);
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

    signature_checks!(0);
}
