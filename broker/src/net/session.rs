//! A client session: frames from the client become requests for the router task; what the
//! router task queues for the client is written in batches. The session ends when the
//! client leaves, sends something undecodable, or the router task drops its queue (the
//! client was too slow, or the broker is shutting down: what was queued is written first).
//! A client that finishes its stream is gone for the router at once: replies to its
//! advertisements or subscriptions still settling are not sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use padres_lang::wire::codec::{FrameReader, MAX_FRAME_CEILING};
use padres_lang::wire::{self, ErrorCode, Frame};
use padres_lang::{Message, Name};
use padres_transport::{finish, read_frame, write_frame};
use tokio::sync::mpsc;

use super::router_task::{ClientHandle, Event};
use super::write::write_batch;
use super::{ConnectionError, Limits};
use crate::router::ClientId;

/// Room a forwarded copy needs beyond the client's request: two federation-wide ids (a
/// subscription's and its tree's), each a name of at most [`Name::MAX_LEN`] bytes and a
/// sequence number, with their length prefixes.
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
        && bytes.len() + FORWARDING_OVERHEAD <= max_frame
}

/// Serves client `id` until the session ends.
pub(super) async fn serve(
    id: ClientId,
    connection: quinn::Connection,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    mut reader: FrameReader,
    events: mpsc::Sender<Event>,
    limits: Limits,
) -> Result<(), ConnectionError> {
    let max_frame = limits.max_frame;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let handle = ClientHandle { queue: tx, queued: queued.clone(), connection: Some(connection) };
    events.send(Event::Connected(id, handle)).await.map_err(|_| ConnectionError::ShuttingDown)?;
    let mut out = Vec::new();
    let mut reading = true;
    let result = loop {
        tokio::select! {
            frame = read_frame(&mut recv, &mut reader), if reading => {
                let event = match frame {
                    Ok(Some(Frame::Request { req, message })) if !forwardable(&message, max_frame) => {
                        let message = format!(
                            "this {} would not fit in a {max_frame}-byte frame between brokers once given its \
                             ids (limits.max_frame_bytes): make it smaller",
                            message.command()
                        );
                        let error = Frame::Error { req: Some(req), code: ErrorCode::LimitExceeded, message };
                        let _ = write_frame(&mut send, &error, max_frame).await;
                        continue;
                    }
                    Ok(Some(Frame::Request { req, message })) => Event::Request(id, Some(req), message),
                    Ok(Some(Frame::Publish { publication })) => {
                        Event::Request(id, None, Message::Publish(Arc::unwrap_or_clone(publication)))
                    }
                    Ok(Some(Frame::Query { req, query })) => Event::Query(id, req, query),
                    Ok(Some(Frame::Bye { .. }) | None) => {
                        // The client is done sending; what is queued for it still goes.
                        reading = false;
                        let _ = events.send(Event::Gone(id)).await;
                        continue;
                    }
                    Ok(Some(other)) => {
                        let message = format!("unexpected frame from a client: {other:?}");
                        let error = Frame::Error { req: None, code: ErrorCode::BadRequest, message };
                        let _ = write_frame(&mut send, &error, max_frame).await;
                        continue;
                    }
                    Err(why) => {
                        // Undecodable input: say why, then close; other clients are unaffected.
                        let message = format!("invalid input, closing: {why}");
                        let error = Frame::Error { req: None, code: ErrorCode::BadRequest, message };
                        let _ = write_frame(&mut send, &error, max_frame).await;
                        break Err(why.into());
                    }
                };
                if events.send(event).await.is_err() {
                    // The router task is gone (shutting down): write what it queued.
                    reading = false;
                }
            },
            frame = rx.recv() => match frame {
                Some(first) => {
                    let more = || rx.try_recv().ok();
                    match write_batch(&mut send, &mut out, first, more, max_frame).await {
                        Ok((size, _)) => {
                            queued.fetch_sub(size, Ordering::Relaxed);
                        }
                        Err(why) => break Err(why.into()),
                    }
                }
                None => break Ok(()),
            },
        }
    };
    if reading {
        let _ = events.send(Event::Gone(id)).await;
    }
    finish(send).await;
    result
}
