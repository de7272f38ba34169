//! One accepted connection: the handshake, then a client session or a neighbour link.

use std::sync::Arc;

use padres_lang::Name;
use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{ErrorCode, Role, Token};
use padres_transport::handshake::{self, Hello};
use tokio::sync::{Semaphore, mpsc};

use super::router_task::Event;
use super::{ConnectionError, Limits, link, session};
use crate::auth::{Auth, Rights};
use crate::router::ClientId;

/// Who checks clients' credentials: the configuration, and how many tokens may be verified
/// at once (each takes tens of milliseconds and ~19 MiB, off the async threads).
#[derive(Clone, Debug)]
pub(super) struct Gate {
    pub(super) auth: Arc<Auth>,
    pub(super) verifying: Arc<Semaphore>,
}

impl Gate {
    /// The rights of the client that said hello as `name` with `token`, or why it is
    /// refused.
    async fn admit(&self, name: &Name, token: Option<Token>) -> Result<Rights, String> {
        if self.auth.is_open() {
            return Ok(Rights::unrestricted(name.as_str()));
        }
        if token.is_none() {
            return self.auth.authenticate(name.as_str(), None).map_err(|e| e.0);
        }
        let _permit = self.verifying.acquire().await.map_err(|_| "the broker is shutting down".to_owned())?;
        let (auth, name) = (self.auth.clone(), name.to_string());
        tokio::task::spawn_blocking(move || auth.authenticate(&name, token.as_ref().map(|t| t.0.as_str())))
            .await
            .map_err(|e| format!("checking the token failed: {e}"))?
            .map_err(|e| e.0)
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
    match role {
        Role::Broker => {
            if let Some(why) = refusal(&connection, &name, limits) {
                tracing::warn!(peer = %name, %why, "broker refused");
                let _ = events.send(Event::LinkRefused).await;
                handshake::refuse(send, ErrorCode::Forbidden, why.clone(), limits.max_frame).await;
                return Err(ConnectionError::Forbidden(why));
            }
            handshake::welcome(&mut send, broker, limits.max_frame).await?;
            let link = link::Open { peer: name, target: None, connection, send, recv, reader };
            link.serve(events, limits.max_frame).await
        }
        Role::Client => {
            let rights = match gate.admit(&name, token).await {
                Ok(rights) => Arc::new(rights),
                Err(why) => {
                    tracing::warn!(client = %name, peer = %connection.remote_address(), %why, "client refused");
                    let _ = events.send(Event::ClientRefused).await;
                    handshake::refuse(send, ErrorCode::Forbidden, why.clone(), limits.max_frame).await;
                    return Err(ConnectionError::Forbidden(why));
                }
            };
            handshake::welcome(&mut send, broker, limits.max_frame).await?;
            let welcomed = session::Welcomed { connection, send, recv, reader, rights };
            session::serve(id, welcomed, events, limits).await
        }
    }
}

/// With a federation CA, a broker must present the CA's certificate for the name it
/// claims (any certificate reaching here passed the CA check).
fn refusal(connection: &quinn::Connection, name: &Name, limits: Limits) -> Option<String> {
    if !limits.require_broker_cert {
        None
    } else if !padres_transport::tls::peer_has_certificate(connection) {
        Some("this federation requires brokers to present a certificate issued by its CA".to_owned())
    } else if !padres_transport::tls::peer_names(connection).iter().any(|n| n == name.as_str()) {
        Some(format!("the certificate presented is not issued for broker '{name}'"))
    } else {
        None
    }
}
