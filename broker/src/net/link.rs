//! A neighbour link: dialling a configured target once (the link policy decides when),
//! and serving a link either side opened until it ends. Frames from the peer go to the
//! router task tagged with the link, so the policy can ignore a link it closed; frames
//! for the peer are written in batches, and the count waiting is kept for the policy's
//! stuck-link rule.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use padres_lang::Name;
use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{CloseCode, Frame, Role};
use padres_transport::{finish, handshake, read_frame};
use tokio::sync::mpsc;

use super::router_task::{Event, LinkHandle};
use super::write::write_batch;
use super::{ConnectionError, tls};
use crate::config::NeighbourAddr;
use crate::links::{LinkId, Target};
use crate::traffic::Traffic;

/// Numbers links for the whole process, so two links to one peer are told apart.
static NEXT_LINK: AtomicU64 = AtomicU64::new(1);

/// What dialling needs: the endpoint, whom to trust, and the configured targets.
#[derive(Debug)]
pub(super) struct Dialer {
    /// Set at shutdown: dials still connecting give up.
    pub(super) cancelled: tokio::sync::watch::Sender<bool>,
    pub(super) endpoint: quinn::Endpoint,
    pub(super) tls: tls::Dialer,
    pub(super) targets: Vec<NeighbourAddr>,
    pub(super) me: Name,
    pub(super) max_frame: usize,
}

impl Dialer {
    /// Dials `target` once: on success serves the link until it ends, otherwise tells the
    /// router task the dial failed.
    pub(super) async fn dial(self: Arc<Self>, target: Target, events: mpsc::Sender<Event>) {
        let Some(addr) = self.targets.get(target) else { return };
        let mut cancelled = self.cancelled.subscribe();
        let opened = tokio::select! {
            opened = self.open(addr, target) => opened,
            _ = cancelled.wait_for(|c| *c) => return,
        };
        match opened {
            Ok(link) => {
                if let Err(error) = link.serve(events, self.max_frame).await {
                    tracing::debug!(host = %addr.host, port = addr.port, %error, "link ended");
                }
            }
            Err(error) => {
                tracing::debug!(host = %addr.host, port = addr.port, %error, "neighbour unreachable");
                let _ = events.send(Event::DialFailed(target)).await;
            }
        }
    }

    /// Makes dials still connecting give up (the broker is shutting down).
    pub(super) fn cancel(&self) {
        self.cancelled.send_replace(true);
    }

    async fn open(&self, neighbour: &NeighbourAddr, target: Target) -> Result<Open, ConnectionError> {
        let resolve = |why: String| ConnectionError::Resolve { host: neighbour.host.clone(), why };
        let addr = tokio::net::lookup_host((neighbour.host.as_str(), neighbour.port))
            .await
            .map_err(|e| resolve(e.to_string()))?
            .next()
            .ok_or_else(|| resolve("no address".to_owned()))?;
        let config = self.tls.client_config(addr)?;
        let connection = self.endpoint.connect_with(config, addr, &neighbour.host)?.await?;
        let (mut send, mut recv) = connection.open_bi().await?;
        let mut reader = FrameReader::new(self.max_frame);
        let hello = handshake::Hello { role: Role::Broker, name: self.me.clone(), token: None };
        let hello = handshake::hello(&mut send, &mut recv, &mut reader, hello, self.max_frame).await;
        let peer = match hello {
            Ok(peer) => peer,
            Err(error) => {
                if let padres_transport::HandshakeError::Refused { code, message } = &error {
                    tracing::warn!(host = %neighbour.host, port = neighbour.port, ?code, %message, "neighbour refused the link");
                }
                return Err(error.into());
            }
        };
        if self.tls.checks_names()
            && !padres_transport::tls::server_names(&connection).iter().any(|n| n == peer.as_str())
        {
            return Err(ConnectionError::NameMismatch(peer));
        }
        Ok(Open { peer, target: Some(target), connection, send, recv, reader })
    }
}

/// A link past its handshake.
#[derive(Debug)]
pub(super) struct Open {
    pub(super) peer: Name,
    /// The target this broker dialled it for; `None` if the peer dialled.
    pub(super) target: Option<Target>,
    pub(super) connection: quinn::Connection,
    pub(super) send: quinn::SendStream,
    pub(super) recv: quinn::RecvStream,
    pub(super) reader: FrameReader,
}

impl Open {
    /// Serves the link until either side closes it, then reports why.
    pub(super) async fn serve(
        self,
        events: mpsc::Sender<Event>,
        max_frame: usize,
    ) -> Result<(), ConnectionError> {
        let Self { peer, target, connection, mut send, mut recv, mut reader } = self;
        let link: LinkId = NEXT_LINK.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let traffic = Arc::new(Mutex::new(Traffic::default()));
        let handle = LinkHandle {
            id: link,
            peer: peer.clone(),
            target,
            queue: tx,
            queued: queued.clone(),
            traffic: traffic.clone(),
            connection: connection.clone(),
        };
        events.send(Event::LinkUp(handle)).await.map_err(|_| ConnectionError::ShuttingDown)?;
        let mut out = Vec::new();
        // What the batch being written carries, per class.
        let mut written = Traffic::default();
        // Set when this side closes the link with a goodbye.
        let mut closing = CloseCode::Done;
        // Cleared when the router task is gone: what is queued is still written.
        let mut reading = true;
        let (code, result) = loop {
            tokio::select! {
                frame = read_frame(&mut recv, &mut reader), if reading => match frame {
                    Ok(Some(Frame::Broker { seq, message })) => {
                        if events.send(Event::FromBroker { link, seq, message }).await.is_err() {
                            reading = false;
                        }
                    }
                    Ok(Some(Frame::Resume { session, received, fresh })) => {
                        if events.send(Event::Resume { link, session, received, fresh }).await.is_err() {
                            reading = false;
                        }
                    }
                    Ok(Some(Frame::Ack { received })) => {
                        if events.send(Event::Ack { link, received }).await.is_err() {
                            reading = false;
                        }
                    }
                    Ok(Some(Frame::Bye { code, .. })) => break (code, Err(ConnectionError::ClosedBy(code))),
                    Ok(None) => break (closing, Ok(())),
                    Ok(Some(other)) => {
                        let why = format!("unexpected frame on a broker link: {other:?}");
                        break (CloseCode::ProtocolViolation, Err(ConnectionError::Protocol(why)));
                    }
                    Err(why) => {
                        // A connection closed with a code says why in it.
                        let code = match connection.close_reason() {
                            Some(quinn::ConnectionError::ApplicationClosed(close)) => {
                                CloseCode::from_quic(close.error_code.into_inner())
                            }
                            _ => CloseCode::Done,
                        };
                        break (code, Err(why.into()));
                    }
                },
                frame = rx.recv() => match frame {
                    Some(first) => {
                        if let Frame::Bye { code, .. } = &first {
                            closing = *code;
                        }
                        let more = || rx.try_recv().ok().map(|frame| (frame, 0));
                        // Counted once written: a batch whose write fails is not (what the
                        // session sends again is counted when it goes).
                        let count = |frame: &Frame, bytes: usize| {
                            written.add(crate::traffic::label(frame), u64::try_from(bytes).unwrap_or(u64::MAX));
                        };
                        match write_batch(&mut send, &mut out, (first, 0), more, max_frame, count).await {
                            Ok((_, frames)) => {
                                queued.fetch_sub(frames, Ordering::Relaxed);
                                // Poisoned only if a holder panicked: the counts are still counts.
                                let mut traffic = traffic.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                                traffic.merge(&written);
                                drop(traffic);
                                written = Traffic::default();
                            }
                            Err(why) => break (CloseCode::Done, Err(why.into())),
                        }
                    }
                    None => break (closing, Ok(())),
                },
            }
        };
        let _ = events.send(Event::LinkDown { link, code }).await;
        finish(send).await;
        result
    }
}
