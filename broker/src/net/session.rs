//! A client connection: frames from the client become requests for the router task; what
//! the router task queues for the client is written in batches. Its first frame may ask for
//! a client session (`client_sessions.rs`), which outlives a lost connection. The
//! connection task ends when the client leaves, sends something undecodable, the
//! connection is lost, or the router task drops its queue (the client was too slow, its
//! session was taken over by a newer connection, or the broker is shutting down: what was
//! queued is written first). A client that finishes its stream or closes its connection is
//! gone for the router at once: replies to its advertisements or subscriptions still
//! settling are not sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use padres_lang::wire::codec::{FrameReader, MAX_FRAME_CEILING};
use padres_lang::wire::{self, CloseCode, ErrorCode, Frame};
use padres_lang::{Message, Name};
use padres_transport::{FrameError, finish, read_frame, write_frame};
use tokio::sync::mpsc;

use super::router_task::{ClientHandle, Event};
use super::write::write_batch;
use super::{ConnectionError, Limits};
use crate::auth::Rights;
use crate::router::ClientId;

/// Room a forwarded copy needs beyond the client's request: two federation-wide ids (a
/// subscription's and its tree's), each a name of at most [`Name::MAX_LEN`] bytes and a
/// sequence number, with their length prefixes; and, in a cyclic overlay, the room for
/// the other trees' ids a copy carries ([`crate::router::tree_batch_bytes`]).
const FORWARDING_OVERHEAD: usize = 2 * (Name::MAX_LEN + 2 * 10);

/// True unless `message` is an advertisement or subscription whose forwarded copy could
/// exceed `max_frame` bytes: the shell could not send that copy, and the request would
/// never settle. Checked here, where the frame limit is known; publications pass.
pub(super) fn forwardable(message: &Message, max_frame: usize) -> bool {
    if !matches!(message, Message::Advertise(_) | Message::Subscribe(_) | Message::CompositeSubscribe(_)) {
        return true;
    }
    let mut bytes = Vec::new();
    let frame = Frame::Request { req: u64::MAX, message: message.clone() };
    wire::encode(&frame, MAX_FRAME_CEILING, &mut bytes).is_ok()
        && bytes.len() + FORWARDING_OVERHEAD + crate::router::tree_batch_bytes(max_frame) <= max_frame
}

/// A client's connection after its hello: its stream, and who it is.
#[derive(Debug)]
pub(super) struct Welcomed {
    pub(super) connection: quinn::Connection,
    pub(super) send: quinn::SendStream,
    pub(super) recv: quinn::RecvStream,
    pub(super) reader: FrameReader,
    /// Its principal and what it may do.
    pub(super) rights: Arc<Rights>,
}

/// Serves client connection `id` until it ends. Its first frame may ask for a client
/// session ([`Frame::Resume`], see [`super::client_sessions`]).
pub(super) async fn serve(
    id: ClientId,
    welcomed: Welcomed,
    events: mpsc::Sender<Event>,
    limits: Limits,
) -> Result<(), ConnectionError> {
    let Welcomed { connection, mut send, mut recv, mut reader, rights } = welcomed;
    let max_frame = limits.max_frame;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let handle =
        ClientHandle { queue: tx, queued: queued.clone(), connection: Some(connection.clone()), rights };
    // The first frame says whether the client wants a session; a client that sends nothing
    // is sent nothing either.
    let first = read_frame(&mut recv, &mut reader).await;
    let mut pending = match first {
        Ok(Some(Frame::Resume { session, received, .. })) => {
            let event = Event::ClientResume { conn: id, handle, session, received };
            events.send(event).await.map_err(|_| ConnectionError::ShuttingDown)?;
            None
        }
        other => {
            events.send(Event::Connected(id, handle)).await.map_err(|_| ConnectionError::ShuttingDown)?;
            Some(other)
        }
    };
    let mut out = Vec::new();
    let mut reading = true;
    let result = loop {
        let frame = match pending.take() {
            Some(frame) => frame,
            None => tokio::select! {
                frame = read_frame(&mut recv, &mut reader), if reading => frame,
                frame = rx.recv() => {
                    match frame {
                        Some(first) => {
                            let more = || rx.try_recv().ok();
                            match write_batch(&mut send, &mut out, first, more, max_frame, |_, _| {}).await {
                                Ok((size, _)) => {
                                    queued.fetch_sub(size, Ordering::Relaxed);
                                }
                                Err(why) => break Err(why.into()),
                            }
                        }
                        None => break Ok(()),
                    }
                    continue;
                }
            },
        };
        let refused = |req, code, message, counted| Event::Refused { conn: id, req, code, message, counted };
        let event = match frame {
            Ok(Some(Frame::Request { req, message })) if !forwardable(&message, max_frame) => {
                let message = format!(
                    "this {} would not fit in a {max_frame}-byte frame between brokers once given its \
                             ids (limits.max_frame_bytes): make it smaller",
                    message.command()
                );
                refused(Some(req), ErrorCode::LimitExceeded, message, true)
            }
            Ok(Some(Frame::Request { req, message })) => Event::Request(id, Some(req), message),
            Ok(Some(Frame::Publish { publication })) => {
                Event::Request(id, None, Message::Publish(Arc::unwrap_or_clone(publication)))
            }
            Ok(Some(Frame::Query { req, query })) => Event::Query(id, req, query),
            Ok(Some(Frame::Ack { received })) => Event::ClientAck(id, received),
            Ok(Some(Frame::Bye { .. }) | None) => {
                // The client is done sending; what is queued for it still goes.
                reading = false;
                let _ = events.send(Event::Gone(id)).await;
                continue;
            }
            Ok(Some(other)) => {
                let shown: String = format!("{other:?}").chars().take(200).collect();
                let message = format!("unexpected frame from a client: {shown}");
                refused(None, ErrorCode::BadRequest, message, false)
            }
            Err(FrameError::Invalid(why)) => {
                // Undecodable input: say why, then close; other clients are unaffected.
                reading = false;
                let _ = events.send(Event::Gone(id)).await;
                let message = format!("invalid input, closing: {why}");
                let error = Frame::Error { req: None, code: ErrorCode::BadRequest, message };
                let _ = write_frame(&mut send, &error, max_frame).await;
                break Err(FrameError::Invalid(why).into());
            }
            Err(why) => {
                reading = false;
                let _ = events.send(ended(&connection, id)).await;
                break Err(why.into());
            }
        };
        if events.send(event).await.is_err() {
            // The router task is gone (shutting down): write what it queued.
            reading = false;
        }
    };
    if reading {
        // Writing failed, or the router task dropped the queue (it forgot the client, or
        // the client connected again): a connection that failed under a write is lost.
        let event = match &result {
            Err(_) => ended(&connection, id),
            Ok(()) => Event::Gone(id),
        };
        let _ = events.send(event).await;
    }
    finish(send).await;
    result
}

/// What connection `id` ending means: the client is gone if it closed the connection as
/// done (or this broker closed it: it has forgotten the client already); otherwise the
/// connection was lost, and the client's session, if any, waits for it.
fn ended(connection: &quinn::Connection, id: ClientId) -> Event {
    match connection.close_reason() {
        Some(quinn::ConnectionError::ApplicationClosed(closed))
            if CloseCode::from_quic(closed.error_code.into_inner()) != CloseCode::Fault =>
        {
            Event::Gone(id)
        }
        Some(quinn::ConnectionError::LocallyClosed) => Event::Gone(id),
        _ => Event::Lost(id),
    }
}
