//! Link sessions: what two neighbour brokers have sent each other outlives the link that
//! carried it, so a link that drops and returns loses nothing and doubles nothing. Sans-IO,
//! in the shape of [`crate::links`]: the shell reports links attached and detached, frames
//! received and the time, and carries out the [`Step`]s handed out.
//!
//! - **Numbered messages.** Each side numbers the broker messages it sends to a neighbour
//!   (`seq`, from 1 in each session) and keeps every one the neighbour has not acknowledged
//!   in an *outbox*. The receiver passes a message to its router only if it is the next
//!   number; one it has already passed is a duplicate and dropped. It acknowledges what it
//!   has passed every [`Settings::ack_every`] messages, and [`Settings::ack_after`]
//!   milliseconds after a message when fewer came; an acknowledgement empties the outbox up
//!   to it.
//! - **Sessions.** The broker with the smaller name leads: when a link to the neighbour is
//!   up it sends `Resume` with its session's id (a new one if it holds none) and how many
//!   messages it has passed. The other side answers `Resume` with the same id: if it holds
//!   that session, with its own count (each side then sends its outbox from the message
//!   after the other's count, and the routers never hear of the break); if not, marked
//!   `fresh`, after ending whatever session it held. A fresh answer to a session the leader
//!   had established makes the leader end its own too. A session that ends tells the
//!   router `NeighbourDown`; a new one `NeighbourUp`, and the routers re-synchronise as
//!   after any link that returns. Nothing is sent on a link before its `Resume` exchange,
//!   so the numbers on a link always follow on from what the receiver had passed.
//! - **While the link is down**, the router keeps its routes and its messages for the
//!   neighbour wait in the outbox, for at most [`Settings::window`] milliseconds and
//!   [`Settings::max_bytes`] (estimated) bytes. Past either, the session ends. A neighbour
//!   that said it was shutting down, or a link cut as too slow, ends it at once: a broker
//!   that restarts starts a new session anyway (its sessions are not kept on disk).
//!
//! A message from a link of an ended session (still arriving from the shell after a new
//! session began) is dropped: its numbers belong to the old session.

use std::collections::{BTreeMap, VecDeque};

use padres_lang::Name;
use padres_lang::wire::{BrokerMessage, CloseCode, Frame};

use crate::links::LinkId;

/// How long an unattached session is kept, how much it may hold, and how often the
/// receiver acknowledges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Milliseconds a session waits for its link to return (0: a session ends with its
    /// link, as if there were no sessions).
    pub window: u64,
    /// Estimated bytes of unacknowledged messages kept for one neighbour.
    pub max_bytes: usize,
    /// Messages passed between two acknowledgements, at most.
    pub ack_every: u64,
    /// Milliseconds from a message passed to its acknowledgement, at most.
    pub ack_after: u64,
}

/// The window a session waits for its link unless configured otherwise (milliseconds).
pub const DEFAULT_WINDOW_MS: u64 = 10_000;
/// What one neighbour's outbox may hold unless configured otherwise (bytes).
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

impl Default for Settings {
    fn default() -> Self {
        Self { window: DEFAULT_WINDOW_MS, max_bytes: DEFAULT_MAX_BYTES, ack_every: 256, ack_after: 100 }
    }
}

/// What the shell is to do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Write `frame` on `link`.
    Send {
        /// The link.
        link: LinkId,
        /// The frame.
        frame: Frame,
    },
    /// Tell the router the neighbour is up (a new session).
    NeighbourUp(Name),
    /// Tell the router the neighbour is down (its session ended).
    NeighbourDown(Name),
    /// Close the link (the neighbour broke the numbering, or its outbox overflowed while
    /// linked).
    Cut {
        /// The neighbour.
        peer: Name,
        /// Why.
        code: CloseCode,
    },
}

/// What the sessions did, for `broker stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Sessions that went on over a new link.
    pub resumed: u64,
    /// Messages sent from the outbox when a session resumed: in flight when its link
    /// broke, or routed to the neighbour while it was down.
    pub resent: u64,
    /// Messages received twice and dropped.
    pub duplicates: u64,
    /// Sessions ended because their link did not return within the window, or their
    /// outbox overflowed.
    pub expired: u64,
}

/// What became of a message received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// The next one: pass it to the router.
    Pass,
    /// Already passed, or from a link that is not this session's: drop it.
    Drop,
    /// A gap in the numbering: the link is cut (a [`Step::Cut`] is queued).
    Gap,
}

#[derive(Debug)]
struct Session {
    id: u64,
    /// The neighbour has answered a `Resume` of this session.
    established: bool,
    /// Messages flow on the peer's attached link.
    open: bool,
    /// Since when it has not been open.
    since: u64,
    /// Links whose messages belong to this session.
    links: Vec<LinkId>,
    /// The number of the next message sent.
    next: u64,
    outbox: VecDeque<(u64, BrokerMessage, usize)>,
    bytes: usize,
    /// Messages passed to the router.
    received: u64,
    /// The count last acknowledged.
    acked: u64,
    /// When an acknowledgement is due.
    ack_at: Option<u64>,
}

impl Session {
    fn new(id: u64, now: u64) -> Self {
        Self {
            id,
            established: false,
            open: false,
            since: now,
            links: Vec::new(),
            next: 1,
            outbox: VecDeque::new(),
            bytes: 0,
            received: 0,
            acked: 0,
            ack_at: None,
        }
    }

    /// Forgets what the neighbour has passed (`upto`).
    fn acknowledged(&mut self, upto: u64) {
        while let Some((seq, _, size)) = self.outbox.front() {
            if *seq > upto {
                break;
            }
            self.bytes -= size;
            self.outbox.pop_front();
        }
    }
}

#[derive(Debug, Default)]
struct Peer {
    /// The link the link policy uses to it.
    link: Option<LinkId>,
    session: Option<Session>,
}

/// One broker's sessions with its neighbours (see the module docs).
#[derive(Debug)]
pub struct Sessions {
    me: Name,
    settings: Settings,
    /// Ids of sessions this broker leads: `ids` and a counter, so that a restarted broker's
    /// ids differ from its last run's.
    ids: u64,
    peers: BTreeMap<Name, Peer>,
    steps: VecDeque<Step>,
    counters: Counters,
}

impl Sessions {
    /// The sessions of broker `me`. `seed` makes its session ids differ from any earlier
    /// run's (the shell gives it random bits).
    pub fn new(me: Name, seed: u64, settings: Settings) -> Self {
        Self {
            me,
            settings,
            ids: seed,
            peers: BTreeMap::new(),
            steps: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// The next thing to do, if any.
    pub fn poll_step(&mut self) -> Option<Step> {
        self.steps.pop_front()
    }

    /// What the sessions did so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Messages waiting for `peer`'s acknowledgement.
    pub fn outbox_len(&self, peer: &Name) -> usize {
        self.peers.get(peer).and_then(|p| p.session.as_ref()).map_or(0, |s| s.outbox.len())
    }

    fn leads(&self, peer: &Name) -> bool {
        self.me < *peer
    }

    /// The link policy uses `link` to `peer` now.
    pub fn attach(&mut self, now: u64, peer: &Name, link: LinkId) {
        let leads = self.leads(peer);
        let entry = self.peers.entry(peer.clone()).or_default();
        entry.link = Some(link);
        if let Some(session) = &mut entry.session {
            if session.open {
                session.open = false;
                session.since = now;
            }
        } else if leads {
            self.ids = self.ids.wrapping_add(1);
            entry.session = Some(Session::new(self.ids, now));
            self.steps.push_back(Step::NeighbourUp(peer.clone()));
        }
        if leads && let Some(session) = &entry.session {
            let frame = Frame::Resume { session: session.id, received: session.received, fresh: false };
            self.steps.push_back(Step::Send { link, frame });
        }
    }

    /// The link to `peer` is down. With `end` (the neighbour is shutting down, or the link
    /// was cut as too slow), or no window, the session ends now; otherwise it waits.
    pub fn detach(&mut self, now: u64, peer: &Name, end: bool) {
        let Some(entry) = self.peers.get_mut(peer) else { return };
        entry.link = None;
        let Some(session) = &mut entry.session else { return };
        if session.open {
            session.open = false;
            session.since = now;
        }
        if end || self.settings.window == 0 {
            self.end(peer);
        }
    }

    /// Ends `peer`'s session, if any: the router hears `NeighbourDown`.
    fn end(&mut self, peer: &Name) {
        if let Some(entry) = self.peers.get_mut(peer)
            && entry.session.take().is_some()
        {
            self.steps.push_back(Step::NeighbourDown(peer.clone()));
        }
    }

    /// The router sends `message` to `peer`: numbered and kept until acknowledged; the
    /// frame to write now, on the link returned, if the session is open.
    pub fn send(&mut self, peer: &Name, message: BrokerMessage) -> Option<(LinkId, Frame)> {
        let max = self.settings.max_bytes;
        let entry = self.peers.get_mut(peer)?;
        let session = entry.session.as_mut()?;
        let seq = session.next;
        session.next += 1;
        let size = estimated_size(&message);
        session.bytes += size;
        let frame = session.open.then(|| Frame::Broker { seq, message: message.clone() });
        session.outbox.push_back((seq, message, size));
        if session.bytes > max {
            tracing::warn!(%peer, bytes = session.bytes, "link session ends: too much waits unacknowledged");
            let open = session.open;
            self.counters.expired += 1;
            self.end(peer);
            if open {
                self.steps.push_back(Step::Cut { peer: peer.clone(), code: CloseCode::TooSlow });
            }
            return None;
        }
        Some((entry.link?, frame?))
    }

    /// Message `seq` from `peer` arrived on `link`.
    pub fn receive(&mut self, now: u64, peer: &Name, link: LinkId, seq: u64) -> Received {
        let Some(session) = self.peers.get_mut(peer).and_then(|p| p.session.as_mut()) else {
            return Received::Drop;
        };
        if !session.links.contains(&link) {
            return Received::Drop;
        }
        if seq <= session.received {
            self.counters.duplicates += 1;
            return Received::Drop;
        }
        if seq > session.received + 1 {
            tracing::warn!(%peer, seq, expected = session.received + 1, "link session ends: a gap in the numbering");
            self.end(peer);
            self.steps.push_back(Step::Cut { peer: peer.clone(), code: CloseCode::ProtocolViolation });
            return Received::Gap;
        }
        session.received = seq;
        if session.received - session.acked >= self.settings.ack_every {
            self.acknowledge(peer);
        } else if session.ack_at.is_none() {
            session.ack_at = Some(now + self.settings.ack_after);
        }
        Received::Pass
    }

    /// Sends `peer` what this side has passed, if its session is open.
    fn acknowledge(&mut self, peer: &Name) {
        let Some(entry) = self.peers.get_mut(peer) else { return };
        let (Some(link), Some(session)) = (entry.link, entry.session.as_mut()) else { return };
        if !session.open {
            return;
        }
        session.acked = session.received;
        session.ack_at = None;
        self.steps.push_back(Step::Send { link, frame: Frame::Ack { received: session.received } });
    }

    /// `peer` has passed everything up to `received` (an `Ack` on `link`).
    pub fn acked(&mut self, peer: &Name, link: LinkId, received: u64) {
        if let Some(session) = self.peers.get_mut(peer).and_then(|p| p.session.as_mut())
            && session.links.contains(&link)
        {
            session.acknowledged(received);
        }
    }

    /// A `Resume` frame from `peer` arrived on `link`.
    pub fn resume(&mut self, now: u64, peer: &Name, link: LinkId, id: u64, received: u64, fresh: bool) {
        let leads = self.leads(peer);
        let Some(entry) = self.peers.get_mut(peer) else { return };
        // Only the link in use speaks: one being closed as a duplicate is ignored.
        if entry.link != Some(link) {
            return;
        }
        if leads {
            // The answer to this side's Resume.
            let Some(session) = entry.session.as_mut() else { return };
            if session.id != id || session.open {
                return;
            }
            if fresh && session.established {
                // The neighbour had ended the session: so does this side, then starts over.
                tracing::info!(%peer, "link session: the neighbour started over");
                let mut new = Session::new(id, now);
                new.established = true;
                new.open = true;
                new.links.push(link);
                entry.session = Some(new);
                self.steps.push_back(Step::NeighbourDown(peer.clone()));
                self.steps.push_back(Step::NeighbourUp(peer.clone()));
                return;
            }
            let resumed = session.established;
            session.established = true;
            self.open(peer, link, received, resumed);
        } else {
            // The leader's Resume.
            if entry.session.as_ref().is_some_and(|s| s.id == id) {
                self.open(peer, link, received, true);
                return;
            }
            self.end(peer);
            let mut session = Session::new(id, now);
            session.established = true;
            session.open = true;
            session.links.push(link);
            if let Some(entry) = self.peers.get_mut(peer) {
                entry.session = Some(session);
            }
            self.steps.push_back(Step::Send {
                link,
                frame: Frame::Resume { session: id, received: 0, fresh: true },
            });
            self.steps.push_back(Step::NeighbourUp(peer.clone()));
        }
    }

    /// Opens `peer`'s session on `link`, the neighbour having passed `received`: the
    /// follower answers first, then the outbox goes out from there.
    fn open(&mut self, peer: &Name, link: LinkId, received: u64, resumed: bool) {
        let leads = self.leads(peer);
        let Some(session) = self.peers.get_mut(peer).and_then(|p| p.session.as_mut()) else { return };
        session.acknowledged(received);
        if session.outbox.front().is_some_and(|(seq, _, _)| *seq > received + 1) {
            // What the neighbour needs is gone: cannot happen unless it acknowledged what it
            // had not passed.
            tracing::warn!(%peer, received, "link session ends: the neighbour asks for what it acknowledged");
            self.end(peer);
            self.steps.push_back(Step::Cut { peer: peer.clone(), code: CloseCode::ProtocolViolation });
            return;
        }
        session.open = true;
        if !session.links.contains(&link) {
            session.links.push(link);
        }
        if !leads {
            let frame = Frame::Resume { session: session.id, received: session.received, fresh: false };
            self.steps.push_back(Step::Send { link, frame });
        }
        if resumed {
            self.counters.resumed += 1;
            self.counters.resent += session.outbox.len() as u64;
            tracing::info!(%peer, resent = session.outbox.len(), "link session resumed");
        }
        for (seq, message, _) in &session.outbox {
            self.steps
                .push_back(Step::Send { link, frame: Frame::Broker { seq: *seq, message: message.clone() } });
        }
    }

    /// `link` is closed: its messages no longer arrive.
    pub fn link_closed(&mut self, peer: &Name, link: LinkId) {
        if let Some(session) = self.peers.get_mut(peer).and_then(|p| p.session.as_mut()) {
            session.links.retain(|l| *l != link);
        }
    }

    /// When [`Sessions::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.peers
            .values()
            .filter_map(|p| p.session.as_ref())
            .filter_map(|s| {
                let window = (!s.open).then(|| s.since.saturating_add(self.settings.window));
                let ack = s.ack_at.filter(|_| s.open);
                match (window, ack) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    /// The time has come for what [`Sessions::poll_timeout`] announced.
    pub fn handle_timeout(&mut self, now: u64) {
        let window = self.settings.window;
        let mut expired = Vec::new();
        let mut acks = Vec::new();
        for (peer, entry) in &self.peers {
            let Some(session) = &entry.session else { continue };
            if !session.open && session.since.saturating_add(window) <= now {
                expired.push(peer.clone());
            } else if session.open && session.ack_at.is_some_and(|at| at <= now) {
                acks.push(peer.clone());
            }
        }
        for peer in acks {
            self.acknowledge(&peer);
        }
        for peer in expired {
            tracing::info!(%peer, window, "link session ends: the link did not return in time");
            self.counters.expired += 1;
            self.end(&peer);
            // A link still attached (an answer that never came) starts a new session.
            if let Some(link) = self.peers.get(&peer).and_then(|p| p.link) {
                self.attach(now, &peer, link);
            }
        }
    }
}

/// A rough size of a broker message, for the outbox's limit: publications by their
/// estimate, everything else a flat 256 bytes (control messages are few and small).
fn estimated_size(message: &BrokerMessage) -> usize {
    const OTHER: usize = 256;
    match message {
        BrokerMessage::Publish { publication, .. } | BrokerMessage::TreePublish { publication, .. } => {
            64 + publication.estimated_size()
        }
        BrokerMessage::CompositeMatch { pubs, .. } => {
            OTHER + pubs.iter().map(|(_, p)| 64 + p.publication.estimated_size()).sum::<usize>()
        }
        BrokerMessage::HistoryAnswer { pubs, .. } => {
            OTHER + pubs.iter().map(|p| 64 + p.publication.estimated_size()).sum::<usize>()
        }
        _ => OTHER,
    }
}
