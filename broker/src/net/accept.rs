//! One accepted connection: the handshake, then a client session or a neighbour link.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use padres_lang::Name;
use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{ErrorCode, Role, Token};
use padres_transport::handshake::{self, Hello};
use padres_transport::tls::{Issuer, PeerCertificates, Presented};
use tokio::sync::{Semaphore, mpsc};

use super::router_task::Event;
use super::{ConnectionError, Limits, link, session};
use crate::auth::{Auth, Rights};
use crate::router::ClientId;

/// Most clients whose tokens wait to be verified; more are refused at once (a flood of
/// hellos with tokens cannot hold connections open without end).
pub(super) const TOKENS_WAITING: usize = 64;

/// Who checks clients' credentials: the configuration, and how many tokens may be verified
/// at once (each takes tens of milliseconds and ~19 MiB, off the async threads).
#[derive(Clone, Debug)]
pub(super) struct Gate {
    pub(super) auth: Arc<Auth>,
    pub(super) verifying: Arc<Semaphore>,
    /// Tokens waiting or being verified, at most [`TOKENS_WAITING`].
    pub(super) waiting: Arc<Semaphore>,
    /// Connections open per principal, for `max_connections`.
    pub(super) connections: Connections,
    /// Whose certificates are trusted (the federation CA, `accept_brokers`); `None`: no
    /// peer is asked for one.
    pub(super) certificates: Option<Arc<PeerCertificates>>,
}

/// Connections open per principal (QUIC clients and gateway requests together), for
/// `max_connections`.
pub(super) type Connections = Arc<Mutex<HashMap<String, usize>>>;

/// One connection of a principal, counted while it lasts.
#[derive(Debug)]
pub(super) struct Counted {
    connections: Connections,
    principal: String,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.principal);
            }
        }
    }
}

/// Counts a connection of `rights`' principal in `connections`, unless it holds the most
/// its permits allow already (a QUIC connection lost without being closed counts until the
/// broker notices, within the QUIC idle timeout).
pub(super) fn count(connections: &Connections, rights: &Rights) -> Result<Option<Counted>, String> {
    let Some(max) = rights.limits().connections else { return Ok(None) };
    let mut open = connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = open.entry(rights.principal.clone()).or_default();
    if *n >= max {
        return Err(format!(
            "principal '{}' has {n} connections to this broker, the most its permits allow \
             (max_connections)",
            rights.principal
        ));
    }
    *n += 1;
    Ok(Some(Counted { connections: connections.clone(), principal: rights.principal.clone() }))
}

impl Gate {
    /// The rights of the client that said hello as `name` with `token`, having presented
    /// a client certificate from the federation CA for `certified` (if any), or why it is
    /// refused.
    async fn admit(
        &self,
        name: &Name,
        token: Option<Token>,
        certified: Option<String>,
    ) -> Result<Rights, (ErrorCode, String)> {
        let forbidden = |why: String| (ErrorCode::Forbidden, why);
        if let Some(principal) = certified {
            // The CA vouched for the name (`PeerCertificates::check` verified the chain
            // after the handshake proved the key is held).
            crate::auth::valid_principal(&principal)
                .map_err(|e| forbidden(format!("the client certificate: {e}")))?;
            if principal != name.as_str() {
                return Err(forbidden(format!(
                    "the client certificate is for principal '{principal}', and the hello says '{name}'"
                )));
            }
            return Ok(self.auth.rights_of(principal));
        }
        if self.auth.is_open() {
            return Ok(Rights::unrestricted(name.as_str()));
        }
        if token.is_none() {
            return self.auth.authenticate(name.as_str(), None).map_err(|e| forbidden(e.0));
        }
        let _waiting = self.waiting.try_acquire().map_err(|_| {
            (
                ErrorCode::LimitExceeded,
                format!("{TOKENS_WAITING} clients' tokens are being checked already: try again shortly"),
            )
        })?;
        let _permit = self
            .verifying
            .acquire()
            .await
            .map_err(|_| forbidden("the broker is shutting down".to_owned()))?;
        let (auth, name) = (self.auth.clone(), name.to_string());
        tokio::task::spawn_blocking(move || auth.authenticate(&name, token.as_ref().map(|t| t.0.as_str())))
            .await
            .map_err(|e| forbidden(format!("checking the token failed: {e}")))?
            .map_err(|e| forbidden(e.0))
    }
}

/// Serves connection `id` until it ends.
pub(super) async fn connection(
    incoming: quinn::Incoming,
    id: ClientId,
    broker: Name,
    events: mpsc::Sender<Event>,
    limits: Limits,
    gate: Gate,
) -> Result<(), ConnectionError> {
    let connection = incoming.await?;
    let (send, mut recv) = connection.accept_bi().await?;
    let mut reader = FrameReader::new(limits.max_frame);
    let (Hello { role, name, token }, mut send) =
        handshake::await_hello(send, &mut recv, &mut reader, limits.max_frame).await?;
    let presented =
        gate.certificates.as_ref().map_or(Presented::Nothing, |trusted| trusted.check(&connection));
    match role {
        Role::Broker => {
            let required = gate.certificates.is_some();
            let refused = refusal(&presented, &name, required).or_else(|| {
                // Without a CA or pinned certificates a broker's hello proves nothing: a
                // client could say it is one and pass every permission by.
                (!gate.auth.is_open() && !required).then(|| {
                    "this broker restricts its clients ([auth]) and trusts no broker certificates, so a broker \
                     dialling in cannot be told from a client: set federation_ca or accept_brokers, or let this \
                     broker dial its neighbours"
                        .to_owned()
                })
            });
            if let Some(why) = refused {
                tracing::warn!(peer = %name, address = %connection.remote_address(), %why, "broker refused");
                let _ = events.send(Event::LinkRefused).await;
                handshake::refuse(send, ErrorCode::Forbidden, why.clone(), limits.max_frame).await;
                return Err(ConnectionError::Forbidden(why));
            }
            handshake::welcome(&mut send, broker, limits.max_frame).await?;
            let link = link::Open { peer: name, target: None, connection, send, recv, reader };
            link.serve(events, limits.max_frame).await
        }
        Role::Client => {
            let admitted = match presented {
                Presented::Untrusted(why) => Err((ErrorCode::Forbidden, why)),
                // Only the federation CA vouches for principals; a pinned certificate is a
                // broker's.
                Presented::Trusted { issuer: Issuer::Ca, client: Some(principal), .. } => {
                    gate.admit(&name, token, Some(principal)).await
                }
                Presented::Trusted { .. } | Presented::Nothing => gate.admit(&name, token, None).await,
            };
            let counted = admitted.and_then(|rights| match count(&gate.connections, &rights) {
                Ok(counted) => Ok((Arc::new(rights), counted)),
                Err(why) => Err((ErrorCode::LimitExceeded, why)),
            });
            let (rights, _counted) = match counted {
                Ok(admitted) => admitted,
                Err((code, why)) => {
                    tracing::warn!(client = %name, peer = %connection.remote_address(), %why, "client refused");
                    let _ = events.send(Event::ClientRefused).await;
                    handshake::refuse(send, code, why.clone(), limits.max_frame).await;
                    return Err(ConnectionError::Forbidden(why));
                }
            };
            handshake::welcome(&mut send, broker, limits.max_frame).await?;
            let welcomed = session::Welcomed { connection, send, recv, reader, rights };
            session::serve(id, welcomed, events, limits).await
        }
    }
}

/// With a federation CA or pinned broker certificates, a broker must present a
/// certificate one of them vouches for, issued for the name it claims.
fn refusal(presented: &Presented, name: &Name, required: bool) -> Option<String> {
    match presented {
        Presented::Trusted { client: Some(_), .. } => {
            Some("a client certificate cannot link as a broker".to_owned())
        }
        _ if !required => None,
        Presented::Nothing => Some(
            "this broker requires brokers dialling in to present a certificate from its federation CA or \
             among its accept_brokers"
                .to_owned(),
        ),
        Presented::Untrusted(why) => Some(format!(
            "{why} (a broker dialling in needs one from the federation CA or among accept_brokers)"
        )),
        Presented::Trusted { names, .. } if !names.iter().any(|n| n == name.as_str()) => {
            Some(format!("the certificate presented is not issued for broker '{name}'"))
        }
        Presented::Trusted { .. } => None,
    }
}
