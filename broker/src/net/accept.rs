//! One accepted connection: the handshake, then a client session or a neighbour link.

use padres_lang::Name;
use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{ErrorCode, Role};
use padres_transport::handshake::{self, Hello};
use tokio::sync::mpsc;

use super::router_task::Event;
use super::{ConnectionError, Limits, link, session};
use crate::router::ClientId;

/// Serves connection `id` until it ends.
pub(super) async fn connection(
    incoming: quinn::Incoming,
    id: ClientId,
    broker: Name,
    events: mpsc::Sender<Event>,
    limits: Limits,
) -> Result<(), ConnectionError> {
    let connection = incoming.await?;
    let (send, mut recv) = connection.accept_bi().await?;
    let mut reader = FrameReader::new(limits.max_frame);
    let (Hello { role, name }, mut send) =
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
            handshake::welcome(&mut send, broker, limits.max_frame).await?;
            session::serve(id, connection, send, recv, reader, events, limits).await
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
