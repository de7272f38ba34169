//! How a broker trusts the neighbours it dials: their pinned certificates (`peer_certs`),
//! the federation CA, and for a neighbour on this machine the certificate it registered
//! locally; or nothing at all with `insecure`.

use std::net::SocketAddr;
use std::path::PathBuf;

use padres_transport::{Identity, Trust, local, tls};

use super::ConnectionError;

use crate::config::Config;

/// Builds the TLS configuration for each dial.
#[derive(Clone, Debug)]
pub(super) struct Dialer {
    insecure: bool,
    roots: Vec<PathBuf>,
    checks_names: bool,
    /// Presented to the neighbour when it asks (it has a federation CA, or pins brokers'
    /// certificates in `accept_brokers`).
    identity: Identity,
}

impl Dialer {
    pub(super) fn new(config: &Config, identity: &Identity) -> Self {
        let mut roots = config.peer_certs.clone();
        roots.extend(config.federation_ca.iter().cloned());
        Self {
            insecure: config.insecure,
            roots,
            identity: identity.clone(),
            checks_names: config.federation_ca.is_some(),
        }
    }

    /// True if neighbours are checked against the federation CA, so the name a neighbour
    /// gives must be one its certificate is issued for.
    pub(super) fn checks_names(&self) -> bool {
        self.checks_names && !self.insecure
    }

    /// The configuration for dialling `addr`. Built per attempt, so that a local
    /// neighbour's certificate registered after this broker started is found.
    pub(super) fn client_config(&self, addr: SocketAddr) -> Result<quinn::ClientConfig, ConnectionError> {
        if self.insecure {
            return Ok(tls::client_config(&Trust::Insecure, Some(&self.identity))?);
        }
        let mut roots = self.roots.clone();
        if addr.ip().is_loopback() {
            roots.extend(local::lookup(addr.port()));
        }
        if roots.is_empty() {
            return Err(ConnectionError::NoTrust(addr));
        }
        Ok(tls::client_config(&Trust::Certificates(roots), Some(&self.identity))?)
    }
}
