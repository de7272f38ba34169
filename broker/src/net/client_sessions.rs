//! Client sessions: a client whose connection is lost, and who connects again within the
//! window (`client_sessions.window_ms`), loses nothing and receives nothing twice. The
//! router task keeps this state; it hands out frames and decisions, and does no I/O.
//!
//! - **Opening.** A client that wants a session sends [`Frame::Resume`] first after the
//!   welcome, naming the session it held (0: none) and how many of the broker's frames it
//!   has received in it. A new client gets a new session (`fresh`); a client that names a
//!   session this broker holds gets it back, with the count of the client's frames the
//!   broker has passed on. A client that sends no `Resume` has no session: a lost
//!   connection ends it at once, as before sessions.
//! - **Numbering, by order.** Both sides count, in the session, the frames that carry
//!   something: from the client its requests, publications and queries; from the broker
//!   every frame it queues for the client (answers, notifications, errors). `Resume`,
//!   `Ack` and `Bye` are not counted. The broker keeps every frame it queued for the
//!   client until the client acknowledges it ([`Frame::Ack`], every [`ACK_EVERY`] frames
//!   or [`ACK_AFTER_MS`]), and acknowledges the client's frames the same way.
//! - **Connections.** The router knows the session's client id, which outlives its
//!   connections: each connection has an id of its own, mapped to the session's while it
//!   is the session's current one. A frame from a connection that is no longer current is
//!   dropped (the client sends it again, since the broker's count did not include it): no
//!   frame is passed twice.
//! - **Lost.** A connection lost without the client saying it was done (a network fault,
//!   a client process killed) detaches the session: the router keeps the client's
//!   subscriptions and advertisements, and what it routes to the client waits in the
//!   outbox. The session ends, and the router forgets the client, when the window passes
//!   or the outbox passes `limits.max_queued_bytes_per_client`. A client that closes its
//!   connection normally ends its session at once.
//! - **Resumed.** The broker answers `Resume` with its count, then sends every frame the
//!   client had not received; the client sends again those the broker had not passed on.
//!   Subscriptions stay as they were: nothing is re-issued.

use std::collections::VecDeque;

use foldhash::HashMap;

use padres_lang::wire::Frame;

use crate::router::ClientId;

/// Frames passed on between two acknowledgements, at most.
pub(super) const ACK_EVERY: u64 = 256;
/// Milliseconds from a frame passed on to its acknowledgement, at most (the router task's
/// tick).
pub(super) const ACK_AFTER_MS: u64 = 100;
/// Frames a connected client may leave unacknowledged, whatever their size (answers count
/// no bytes): past it, it is cut off as too slow.
const MAX_UNACKED: usize = 1 << 20;

/// One client's session.
#[derive(Debug)]
struct Session {
    id: u64,
    /// The connection serving it; `None` while detached.
    conn: Option<ClientId>,
    /// When its connection was lost.
    detached_at: Option<u64>,
    /// The client's frames passed on to the router.
    received: u64,
    /// `received` as last acknowledged to the client.
    acked: u64,
    /// Frames queued for the client, numbered from 1.
    sent: u64,
    /// Those the client has not acknowledged (numbers `sent - len + 1 ..= sent`), with the
    /// bytes each counts for.
    outbox: VecDeque<(Frame, usize)>,
    outbox_bytes: usize,
}

/// What became of a `Resume`.
#[derive(Debug)]
pub(super) enum Resumed {
    /// The session goes on under `client`: replace connection `old` (if still attached)
    /// with the new one and send `frames` first (the answer, then what the client missed).
    Resumed { client: ClientId, old: Option<ClientId>, frames: Vec<Frame> },
    /// A new session under the new connection's id: send `frame`. `ended` is a session the
    /// client named that cannot go on (its counts disagree with the client's): the router
    /// forgets that client.
    Fresh { frame: Frame, ended: Option<ClientId> },
}

/// What to do with a frame queued for a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Queued {
    /// Write it: the client is connected.
    Write,
    /// Nothing now: the client is away (its session keeps the frame), or gone.
    Wait,
    /// The client is connected but has left more than twice the limit unacknowledged: cut
    /// it off as too slow.
    Slow,
    /// The client is away and more than the limit waits for it: its session ended; the
    /// router forgets it.
    Ended,
}

/// What a lost or finished connection means for its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Left {
    /// The connection was not the client's current one: nothing.
    Stale,
    /// The client's session waits for it to return; drop the connection's handle.
    Detached(ClientId),
    /// The client is gone: the router forgets it.
    Gone(ClientId),
}

/// Sessions by client, and which connection serves which client (foldhash: looked up for
/// every frame to or from a client).
#[derive(Debug)]
pub(super) struct ClientSessions {
    window: u64,
    sessions: HashMap<ClientId, Session>,
    by_id: HashMap<u64, ClientId>,
    /// The current connection of each client (a client without a session is its own).
    conns: HashMap<ClientId, ClientId>,
    /// Sessions resumed, frames sent again, sessions expired.
    pub(super) resumed: u64,
    pub(super) resent: u64,
    pub(super) expired: u64,
}

impl ClientSessions {
    /// Sessions kept `window` milliseconds after a connection is lost (0: none kept).
    pub(super) fn new(window: u64) -> Self {
        Self {
            window,
            sessions: HashMap::default(),
            by_id: HashMap::default(),
            conns: HashMap::default(),
            resumed: 0,
            resent: 0,
            expired: 0,
        }
    }

    /// A connection without a session.
    pub(super) fn connected(&mut self, conn: ClientId) {
        self.conns.insert(conn, conn);
    }

    /// The client a frame from connection `conn` belongs to; `None` if the connection is
    /// not its client's current one (its frame is dropped).
    pub(super) fn client_of(&self, conn: ClientId) -> Option<ClientId> {
        self.conns.get(&conn).copied()
    }

    /// The client whose session `session` is, if it is one.
    pub(super) fn owner(&self, session: u64) -> Option<ClientId> {
        self.by_id.get(&session).copied()
    }

    /// The client on connection `conn` asks for `session` (0: a new one), having received
    /// `received` of its frames.
    pub(super) fn resume(&mut self, conn: ClientId, session: u64, received: u64) -> Resumed {
        let mut ended = None;
        if session != 0
            && let Some(&client) = self.by_id.get(&session)
            && let Some(s) = self.sessions.get_mut(&client)
        {
            let first_kept = s.sent - s.outbox.len() as u64;
            if (first_kept..=s.sent).contains(&received) {
                let old = s.conn.replace(conn);
                if let Some(old) = old {
                    self.conns.remove(&old);
                }
                self.conns.insert(conn, client);
                s.detached_at = None;
                while s.sent - (s.outbox.len() as u64) < received {
                    if let Some((_, size)) = s.outbox.pop_front() {
                        s.outbox_bytes -= size;
                    }
                }
                crate::outbox::release_drained(&mut s.outbox);
                let mut frames = vec![Frame::Resume { session, received: s.received, fresh: false }];
                frames.extend(s.outbox.iter().map(|(frame, _)| frame.clone()));
                s.acked = s.received;
                self.resumed += 1;
                self.resent += s.outbox.len() as u64;
                return Resumed::Resumed { client, old, frames };
            }
            // The client says it received what was never sent, or what the outbox no
            // longer holds: the session cannot go on without a gap. One still attached
            // goes on where it is; this connection gets a session of its own.
            tracing::warn!(session, received, sent = s.sent, "client session cannot resume: counts disagree");
            if s.conn.is_none() {
                self.end(client);
                ended = Some(client);
            }
        }
        self.conns.insert(conn, conn);
        if self.window == 0 {
            return Resumed::Fresh { frame: Frame::Resume { session: 0, received: 0, fresh: true }, ended };
        }
        let id = self.mint();
        self.by_id.insert(id, conn);
        self.sessions.insert(
            conn,
            Session {
                id,
                conn: Some(conn),
                detached_at: None,
                received: 0,
                acked: 0,
                sent: 0,
                outbox: VecDeque::new(),
                outbox_bytes: 0,
            },
        );
        Resumed::Fresh { frame: Frame::Resume { session: id, received: 0, fresh: true }, ended }
    }

    /// A new session id: 64 bits no other client can guess (a session's id is what lets a
    /// connection take the session over), never 0, not in use.
    fn mint(&mut self) -> u64 {
        loop {
            let id = crate::auth::secret_u64();
            if id != 0 && !self.by_id.contains_key(&id) {
                return id;
            }
        }
    }

    /// A frame from `client` was passed on; an acknowledgement to send now, if one is due.
    pub(super) fn passed(&mut self, client: ClientId) -> Option<Frame> {
        let s = self.sessions.get_mut(&client)?;
        s.received += 1;
        if s.received - s.acked >= ACK_EVERY {
            s.acked = s.received;
            return Some(Frame::Ack { received: s.received });
        }
        None
    }

    /// `frame` is queued for `client` (counting `size` estimated bytes): numbered and
    /// kept until acknowledged (see [`Queued`]).
    pub(super) fn queue(&mut self, client: ClientId, frame: &Frame, size: usize, max_bytes: usize) -> Queued {
        let Some(s) = self.sessions.get_mut(&client) else {
            return if self.conns.contains_key(&client) { Queued::Write } else { Queued::Wait };
        };
        s.sent += 1;
        s.outbox.push_back((frame.clone(), size));
        s.outbox_bytes += size;
        // Sizes as the client's queue counts them: notifications by their estimated size,
        // answers and historic publications not at all (they come from requests, and a
        // historic answer is bounded by `max_results`).
        match s.conn {
            // A client that does not acknowledge is as slow as one that does not read; what
            // it has not acknowledged includes what is written and on its way, so it may
            // be twice what the queue alone may hold.
            Some(_) if s.outbox_bytes > max_bytes.saturating_mul(2) || s.outbox.len() > MAX_UNACKED => {
                Queued::Slow
            }
            Some(_) => Queued::Write,
            None if s.outbox_bytes <= max_bytes => Queued::Wait,
            None => {
                tracing::info!(client, session = s.id, "client session ended: too much waited for it");
                self.expired += 1;
                self.end(client);
                Queued::Ended
            }
        }
    }

    /// The client acknowledged `received` of the frames queued for it.
    pub(super) fn acked(&mut self, client: ClientId, received: u64) {
        let Some(s) = self.sessions.get_mut(&client) else { return };
        while s.sent - (s.outbox.len() as u64) < received.min(s.sent) {
            if let Some((_, size)) = s.outbox.pop_front() {
                s.outbox_bytes -= size;
            }
        }
        crate::outbox::release_drained(&mut s.outbox);
    }

    /// Connection `conn` was lost (not closed by its client): its client's session waits,
    /// if it has one and sessions are kept.
    pub(super) fn lost(&mut self, now: u64, conn: ClientId) -> Left {
        let Some(client) = self.conns.remove(&conn) else { return Left::Stale };
        match self.sessions.get_mut(&client) {
            Some(s) if self.window > 0 => {
                s.conn = None;
                s.detached_at = Some(now);
                Left::Detached(client)
            }
            _ => {
                self.end(client);
                Left::Gone(client)
            }
        }
    }

    /// Connection `conn`'s client is done (it said so, or the broker closed it).
    pub(super) fn finished(&mut self, conn: ClientId) -> Left {
        let Some(client) = self.conns.remove(&conn) else { return Left::Stale };
        self.end(client);
        Left::Gone(client)
    }

    /// Forgets `client`'s session and connection.
    pub(super) fn end(&mut self, client: ClientId) {
        if let Some(s) = self.sessions.remove(&client) {
            self.by_id.remove(&s.id);
            if let Some(conn) = s.conn {
                self.conns.remove(&conn);
            }
        }
        self.conns.remove(&client);
    }

    /// Every [`ACK_AFTER_MS`]: the acknowledgements due to attached clients, and the
    /// clients whose sessions the window has passed (forgotten here; the router forgets
    /// them too).
    pub(super) fn tick(&mut self, now: u64) -> (Vec<(ClientId, Frame)>, Vec<ClientId>) {
        let mut acks = Vec::new();
        let mut expired = Vec::new();
        for (&client, s) in &mut self.sessions {
            match s.detached_at {
                Some(at) if now.saturating_sub(at) > self.window => expired.push(client),
                Some(_) => {}
                None if s.received > s.acked => {
                    s.acked = s.received;
                    acks.push((client, Frame::Ack { received: s.received }));
                }
                None => {}
            }
        }
        for &client in &expired {
            tracing::info!(client, "client session ended: its client did not return within the window");
            self.expired += 1;
            self.end(client);
        }
        (acks, expired)
    }

    /// Whether any session is kept (the router task's tick runs only then).
    pub(super) fn any(&self) -> bool {
        !self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use padres_lang::wire::ErrorCode;

    fn error(n: u64) -> Frame {
        Frame::Error { req: Some(n), code: ErrorCode::BadRequest, message: String::new() }
    }

    fn opened(s: &mut ClientSessions, conn: ClientId) -> u64 {
        match s.resume(conn, 0, 0) {
            Resumed::Fresh { frame: Frame::Resume { session, fresh: true, .. }, ended: None } => session,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lost_client_gets_what_it_missed_once_and_keeps_its_client_id() {
        let mut s = ClientSessions::new(1_000);
        let session = opened(&mut s, 1);
        for n in 1..=5 {
            assert_eq!(s.queue(1, &error(n), 0, 1 << 20), Queued::Write);
        }
        s.acked(1, 2);
        assert_eq!(s.lost(10, 1), Left::Detached(1));
        assert_eq!(s.client_of(1), None, "the lost connection's frames are dropped");
        assert_eq!(s.queue(1, &error(6), 0, 1 << 20), Queued::Wait, "waits");
        // The client had received 4 of them.
        match s.resume(2, session, 4) {
            Resumed::Resumed { client: 1, old: None, frames } => {
                assert_eq!(
                    frames,
                    [Frame::Resume { session, received: 0, fresh: false }, error(5), error(6)]
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.client_of(2), Some(1));
        assert_eq!((s.resumed, s.resent), (1, 2));
    }

    #[test]
    fn an_outbox_drained_after_a_burst_gives_its_memory_back_and_keeps_what_is_unacknowledged() {
        let mut s = ClientSessions::new(1_000);
        opened(&mut s, 1);
        // A client that stopped reading: 40,000 frames wait for its acknowledgement.
        for n in 1..=40_000 {
            assert_eq!(s.queue(1, &error(n), 0, usize::MAX), Queued::Write);
        }
        let burst = s.sessions[&1].outbox.capacity();
        s.acked(1, 39_990);
        let outbox = &s.sessions[&1].outbox;
        assert!(outbox.capacity() <= burst / 8, "{} of {burst} kept", outbox.capacity());
        // The ten it has not acknowledged are still there, in order, for a resumption.
        assert_eq!(s.lost(0, 1), Left::Detached(1));
        let session = s.sessions[&1].id;
        let Resumed::Resumed { frames, .. } = s.resume(2, session, 39_990) else { panic!("resumes") };
        let reqs: Vec<Option<u64>> = frames[1..]
            .iter()
            .map(|f| match f {
                Frame::Error { req, .. } => *req,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(reqs, (39_991..=40_000).map(Some).collect::<Vec<_>>());
    }

    #[test]
    fn a_session_ends_when_the_window_passes_or_too_much_waits() {
        let mut s = ClientSessions::new(1_000);
        opened(&mut s, 1);
        opened(&mut s, 2);
        opened(&mut s, 3);
        assert_eq!(s.queue(3, &error(1), 200, 150), Queued::Write);
        assert_eq!(s.queue(3, &error(2), 200, 150), Queued::Slow, "unacknowledged past twice the limit");
        s.end(3);
        assert_eq!(s.lost(0, 1), Left::Detached(1));
        assert_eq!(s.lost(0, 2), Left::Detached(2));
        assert_eq!(s.queue(2, &error(1), 100, 150), Queued::Wait);
        assert_eq!(s.queue(2, &error(2), 100, 150), Queued::Ended, "over the limit while detached");
        assert_eq!(s.tick(1_000).1, Vec::<ClientId>::new());
        assert_eq!(s.tick(1_001).1, [1]);
        assert!(!s.any());
        assert_eq!(s.expired, 2);
    }

    #[test]
    fn an_unknown_or_inconsistent_session_starts_over() {
        let mut s = ClientSessions::new(1_000);
        assert!(matches!(s.resume(1, 99, 5), Resumed::Fresh { ended: None, .. }), "unknown");
        let session = opened(&mut s, 2);
        s.queue(2, &error(1), 0, 1 << 20);
        assert!(
            matches!(s.resume(4, session, 5), Resumed::Fresh { ended: None, .. }),
            "an attached session is not ended by a count that does not fit"
        );
        assert_eq!(s.client_of(2), Some(2));
        assert_eq!(s.lost(0, 2), Left::Detached(2));
        assert!(
            matches!(s.resume(3, session, 5), Resumed::Fresh { ended: Some(2), .. }),
            "received too many"
        );
        assert_eq!(s.client_of(3), Some(3));
    }

    #[test]
    fn acknowledgements_go_every_so_many_frames_or_on_the_tick() {
        let mut s = ClientSessions::new(1_000);
        opened(&mut s, 1);
        for _ in 1..ACK_EVERY {
            assert_eq!(s.passed(1), None);
        }
        assert_eq!(s.passed(1), Some(Frame::Ack { received: ACK_EVERY }));
        s.passed(1);
        assert_eq!(s.tick(5).0, [(1, Frame::Ack { received: ACK_EVERY + 1 })]);
        assert_eq!(s.tick(6).0, []);
        // A finished connection ends its session; a stale one is nothing.
        assert_eq!(s.finished(1), Left::Gone(1));
        assert_eq!(s.finished(1), Left::Stale);
    }
}
