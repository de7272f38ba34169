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
//!   up it sends `Resume` with its session's id and how many messages it has passed. Ids
//!   are the leader's, never reused. A session it has just minted (none held, or the
//!   neighbour has not confirmed it yet) goes marked `fresh`. The other side answers:
//!   - it holds that session: `Resume` with its own count; each side then sends its outbox
//!     from the message after the other's count, and the routers never hear of the break;
//!   - it does not, and the leader's is fresh: it ends whatever session it held, starts
//!     this one and answers with a count of 0;
//!   - it does not, and the leader's is not fresh (this side restarted, or its window
//!     passed first): it ends whatever it held and answers `fresh`, starting nothing; the
//!     leader ends its session and proposes a new one.
//!
//!   A session tells the router `NeighbourUp` when it is confirmed (the follower when it
//!   starts it, the leader when the answer comes) and `NeighbourDown` when it ends; the
//!   routers then re-synchronise as after any link that returns.
//! - **A neighbour that lost the session** (it answers `fresh`, or as leader proposes a
//!   session this side does not hold, while this side's is established: it restarted, or
//!   its window passed first) is not reported down. The old session ends quietly; its
//!   unacknowledged publications are kept, and so are those the router sends the neighbour
//!   until a new session is confirmed (other messages are dropped: the router sends its
//!   tables again). The router then hears [`Step::NeighbourRestarted`] with them, and
//!   re-synchronises without withdrawing what it learned from the neighbour
//!   (`router/rejoin.rs`). With no new session within the window, it hears
//!   `NeighbourDown`. Nothing is sent on a link
//!   before its `Resume` exchange, so the numbers on a link always follow on from what the
//!   receiver had passed. An exchange that does not finish within [`HANDSHAKE_MS`] cuts the
//!   link (the policy dials again).
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
/// How long a link may be attached before its `Resume` exchange finishes (milliseconds);
/// past it the link is cut, and the policy dials again.
pub const HANDSHAKE_MS: u64 = 10_000;

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
    /// Tell the router the neighbour lost what this side had sent it (it restarted, or its
    /// window passed first) and a new session is up: the router re-synchronises with it
    /// without withdrawing the routes it learned from it, and sends it again, once it is
    /// ready for them, the publications `kept` (what waited in the old session's outbox
    /// and what the router routed to it before the new session was confirmed, in order).
    NeighbourRestarted {
        /// The neighbour.
        peer: Name,
        /// The publications for it, in order.
        kept: Vec<BrokerMessage>,
    },
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
    /// Confirmed by both sides: the router has heard `NeighbourUp` for it.
    established: bool,
    /// Messages flow on the peer's attached link.
    open: bool,
    /// When it last stopped being open (its link went, or a new one began its exchange).
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
        crate::outbox::release_drained(&mut self.outbox);
    }
}

#[derive(Debug, Default)]
struct Peer {
    /// The link the link policy uses to it.
    link: Option<LinkId>,
    session: Option<Session>,
    /// The neighbour lost this side's session while the router believes it up: the
    /// publications routed to it since (and those unacknowledged in the old session) wait
    /// here until a new session is confirmed ([`Step::NeighbourRestarted`]), with their
    /// estimated size.
    rejoin: Option<Rejoin>,
}

/// Publications kept for a neighbour that lost its session with this side.
#[derive(Debug)]
struct Rejoin {
    kept: Vec<BrokerMessage>,
    bytes: usize,
    /// When the old session ended: with no new one by a window later, the router hears
    /// that the neighbour is down.
    since: u64,
}

impl Rejoin {
    /// Keeps `message` if it is a publication and there is room for it.
    fn keep(&mut self, message: BrokerMessage, size: usize, max: usize) {
        if matches!(message, BrokerMessage::Publish { .. }) && self.bytes + size <= max {
            self.bytes += size;
            self.kept.push(message);
        }
    }
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
        let step = self.steps.pop_front();
        // A resumed session queues a step for every message of its outbox.
        crate::outbox::release_drained(&mut self.steps);
        step
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

    /// The link policy uses `link` to `peer` now. The leading side names its session (a
    /// new one if it holds none) in a `Resume`; the other waits for it.
    pub fn attach(&mut self, now: u64, peer: &Name, link: LinkId) {
        let leads = self.leads(peer);
        let entry = self.peers.entry(peer.clone()).or_default();
        entry.link = Some(link);
        if let Some(session) = &mut entry.session {
            session.open = false;
            session.since = now;
        }
        if leads {
            self.propose(now, peer, link);
        }
    }

    /// The leader sends its session's `Resume` on `link`, minting a session first if it
    /// holds none. A session the neighbour has not confirmed goes as `fresh`: the
    /// neighbour may start it.
    fn propose(&mut self, now: u64, peer: &Name, link: LinkId) {
        let Some(entry) = self.peers.get_mut(peer) else { return };
        let session = entry.session.get_or_insert_with(|| {
            self.ids = self.ids.wrapping_add(1);
            Session::new(self.ids, now)
        });
        let frame =
            Frame::Resume { session: session.id, received: session.received, fresh: !session.established };
        self.steps.push_back(Step::Send { link, frame });
    }

    /// The link to `peer` is down. With `end` (the neighbour is shutting down, or the link
    /// was cut as too slow), or no window, the session ends now; otherwise it waits.
    pub fn detach(&mut self, now: u64, peer: &Name, end: bool) {
        let Some(entry) = self.peers.get_mut(peer) else { return };
        entry.link = None;
        let Some(session) = &mut entry.session else { return };
        session.open = false;
        session.since = now;
        if end || self.settings.window == 0 {
            self.end(peer);
        }
    }

    /// Ends `peer`'s session, if any: the router hears `NeighbourDown` if it heard of the
    /// session (or of one the neighbour lost, while a new one is not yet confirmed).
    fn end(&mut self, peer: &Name) {
        let Some(entry) = self.peers.get_mut(peer) else { return };
        let established = entry.session.take().is_some_and(|s| s.established);
        let rejoining = entry.rejoin.take().is_some();
        if established || rejoining {
            self.steps.push_back(Step::NeighbourDown(peer.clone()));
        }
    }

    /// The neighbour does not hold `peer`'s session any more (it restarted, or its window
    /// passed first): the session ends, but the router does not hear of it until a new one
    /// is confirmed. What the old one had not had acknowledged is kept if it is a
    /// publication: the neighbour may not have passed it on.
    fn lost_by_peer(&mut self, now: u64, peer: &Name) {
        let max = self.settings.max_bytes;
        let Some(entry) = self.peers.get_mut(peer) else { return };
        let Some(session) = entry.session.take() else { return };
        if !session.established {
            return;
        }
        let rejoin = entry.rejoin.get_or_insert_with(|| Rejoin { kept: Vec::new(), bytes: 0, since: now });
        for (_, message, size) in session.outbox {
            rejoin.keep(message, size, max);
        }
        tracing::info!(%peer, kept = rejoin.kept.len(), "link session: the neighbour lost it; keeping its publications");
    }

    /// Ends `peer`'s session and closes its link, if one is attached.
    fn end_and_cut(&mut self, peer: &Name, code: CloseCode) {
        let attached = self.peers.get(peer).is_some_and(|p| p.link.is_some());
        self.end(peer);
        if attached {
            self.steps.push_back(Step::Cut { peer: peer.clone(), code });
        }
    }

    /// The router sends `message` to `peer`: numbered and kept until acknowledged; the
    /// frame to write now, on the link returned, if the session is open.
    pub fn send(&mut self, peer: &Name, message: BrokerMessage) -> Option<(LinkId, Frame)> {
        let max = self.settings.max_bytes;
        let entry = self.peers.get_mut(peer)?;
        if let Some(rejoin) = &mut entry.rejoin {
            // Until the new session is confirmed and the router re-synchronises, only
            // publications matter: everything else is sent again from the router's tables.
            let size = estimated_size(&message);
            rejoin.keep(message, size, max);
            return None;
        }
        let session = entry.session.as_mut()?;
        let seq = session.next;
        session.next += 1;
        let size = estimated_size(&message);
        session.bytes += size;
        let frame = session.open.then(|| Frame::Broker { seq, message: message.clone() });
        session.outbox.push_back((seq, message, size));
        if session.bytes > max {
            tracing::warn!(%peer, bytes = session.bytes, "link session ends: too much waits unacknowledged");
            self.counters.expired += 1;
            self.end_and_cut(peer, CloseCode::TooSlow);
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
            self.end_and_cut(peer, CloseCode::ProtocolViolation);
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
            session.acknowledged(received.min(session.next.saturating_sub(1)));
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
            if fresh {
                // The neighbour does not hold the session (it restarted, or its window
                // passed first): this side ends its own and proposes a new one.
                tracing::info!(%peer, "link session: the neighbour holds no session with us; starting a new one");
                self.lost_by_peer(now, peer);
                self.propose(now, peer, link);
                return;
            }
            let new = !session.established;
            session.established = true;
            if self.open(peer, link, received, !new) && new {
                self.confirmed(peer);
            }
        } else {
            // The leader's Resume.
            if entry.session.as_ref().is_some_and(|s| s.id == id) {
                self.open(peer, link, received, !fresh);
                return;
            }
            // Any session held is not the leader's: it is over, and the leader lost it.
            self.lost_by_peer(now, peer);
            if !fresh {
                // The leader holds a session this side does not: it must start over.
                let frame = Frame::Resume { session: id, received: 0, fresh: true };
                self.steps.push_back(Step::Send { link, frame });
                return;
            }
            let mut session = Session::new(id, now);
            session.established = true;
            session.open = true;
            session.links.push(link);
            if let Some(entry) = self.peers.get_mut(peer) {
                entry.session = Some(session);
            }
            self.steps.push_back(Step::Send {
                link,
                frame: Frame::Resume { session: id, received: 0, fresh: false },
            });
            self.confirmed(peer);
        }
    }

    /// A new session with `peer` is confirmed: the router hears of a neighbour up, or of
    /// one that lost its old session.
    fn confirmed(&mut self, peer: &Name) {
        let rejoin = self.peers.get_mut(peer).and_then(|p| p.rejoin.take());
        self.steps.push_back(match rejoin {
            Some(rejoin) => Step::NeighbourRestarted { peer: peer.clone(), kept: rejoin.kept },
            None => Step::NeighbourUp(peer.clone()),
        });
    }

    /// Opens `peer`'s session on `link`, the neighbour having passed `received`: the
    /// follower answers first, then the outbox goes out from there. False if the count
    /// cannot be right (the session ends and the link is cut).
    fn open(&mut self, peer: &Name, link: LinkId, received: u64, resumed: bool) -> bool {
        let leads = self.leads(peer);
        let Some(session) = self.peers.get_mut(peer).and_then(|p| p.session.as_mut()) else { return false };
        let gone = session.outbox.front().is_some_and(|(seq, _, _)| *seq > received + 1);
        if received >= session.next || gone {
            // More passed than was sent, or what the neighbour lacks is gone: it counts
            // another session.
            tracing::warn!(%peer, received, sent = session.next - 1, "link session ends: the neighbour's count does not fit");
            self.end_and_cut(peer, CloseCode::ProtocolViolation);
            return false;
        }
        session.acknowledged(received);
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
        true
    }

    /// `link` is closed: its messages no longer arrive.
    pub fn link_closed(&mut self, peer: &Name, link: LinkId) {
        if let Some(session) = self.peers.get_mut(peer).and_then(|p| p.session.as_mut()) {
            session.links.retain(|l| *l != link);
        }
    }

    /// When a session that is not open times out: its window from when its link went, or
    /// [`HANDSHAKE_MS`] from when a link was attached and its `Resume` exchange began.
    fn deadline(&self, entry: &Peer, session: &Session) -> Option<u64> {
        if session.open {
            return None;
        }
        let wait = if entry.link.is_some() { HANDSHAKE_MS } else { self.settings.window };
        Some(session.since.saturating_add(wait))
    }

    /// When [`Sessions::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.peers
            .values()
            .filter_map(|p| {
                let session = p.session.as_ref().and_then(|s| {
                    let ack = s.ack_at.filter(|_| s.open);
                    match (self.deadline(p, s), ack) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                });
                match (session, self.rejoin_deadline(p)) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    /// When a neighbour that lost its session counts as gone if no new session is
    /// confirmed by then (a window after the old one ended, however often a new one's
    /// link comes and goes).
    fn rejoin_deadline(&self, entry: &Peer) -> Option<u64> {
        let rejoin = entry.rejoin.as_ref()?;
        Some(rejoin.since.saturating_add(self.settings.window))
    }

    /// The time has come for what [`Sessions::poll_timeout`] announced: acknowledgements
    /// due are sent; a session whose link stayed away past the window ends; a link whose
    /// `Resume` exchange did not finish is cut (the session then waits as for any link that
    /// went).
    pub fn handle_timeout(&mut self, now: u64) {
        let mut expired = Vec::new();
        let mut stalled = Vec::new();
        let mut acks = Vec::new();
        for (peer, entry) in &self.peers {
            if self.rejoin_deadline(entry).is_some_and(|at| at <= now) {
                expired.push(peer.clone());
                continue;
            }
            let Some(session) = &entry.session else { continue };
            if self.deadline(entry, session).is_some_and(|at| at <= now) {
                if entry.link.is_some() {
                    stalled.push(peer.clone());
                } else {
                    expired.push(peer.clone());
                }
            } else if session.open && session.ack_at.is_some_and(|at| at <= now) {
                acks.push(peer.clone());
            }
        }
        for peer in acks {
            self.acknowledge(&peer);
        }
        for peer in stalled {
            tracing::warn!(%peer, "link session: the neighbour did not answer on its link in time; cutting it");
            if let Some(session) = self.peers.get_mut(&peer).and_then(|p| p.session.as_mut()) {
                session.since = now;
            }
            self.steps.push_back(Step::Cut { peer, code: CloseCode::ProtocolViolation });
        }
        for peer in expired {
            tracing::info!(%peer, window = self.settings.window, "link session ends: the link did not return in time");
            self.counters.expired += 1;
            self.end(&peer);
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

#[cfg(test)]
mod tests {
    use super::*;
    use padres_lang::MessageId;

    /// A's sessions with an open session to B on link 1 (B started it and answered with
    /// its count), every step taken; and the session's id.
    fn open_to_b() -> (Sessions, Name, u64) {
        let peer = Name::new("B").expect("name");
        let settings = Settings { window: 10_000, max_bytes: usize::MAX, ack_every: 256, ack_after: 100 };
        let mut a = Sessions::new(Name::new("A").expect("name"), 1, settings);
        a.attach(0, &peer, 1);
        let Some(Step::Send { frame: Frame::Resume { session, .. }, .. }) = a.poll_step() else {
            panic!("the leader proposes a session")
        };
        a.resume(1, &peer, 1, session, 0, false);
        while a.poll_step().is_some() {}
        (a, peer, session)
    }

    /// A's `n`th message.
    fn message(n: u64) -> BrokerMessage {
        BrokerMessage::Unsubscribe { id: MessageId::new(Name::new("A").expect("name"), n) }
    }

    #[test]
    fn an_outbox_drained_after_a_burst_gives_its_memory_back() {
        let (mut a, peer, session) = open_to_b();
        // B stops reading: 40,000 messages wait for its acknowledgement.
        for n in 0..40_000 {
            assert!(a.send(&peer, message(n)).is_some(), "the session is open");
        }
        fn outbox<'s>(a: &'s Sessions, peer: &Name) -> &'s VecDeque<(u64, BrokerMessage, usize)> {
            &a.peers[peer].session.as_ref().expect("a session").outbox
        }
        let burst = outbox(&a, &peer).capacity();
        a.acked(&peer, 1, 39_990);
        assert_eq!(a.outbox_len(&peer), 10, "what B has not acknowledged is kept");
        assert!(
            outbox(&a, &peer).capacity() <= burst / 8,
            "{} of {burst} kept",
            outbox(&a, &peer).capacity()
        );
        // The link drops and returns: what B had not acknowledged is sent again, in order.
        a.detach(2, &peer, false);
        a.attach(3, &peer, 2);
        while a.poll_step().is_some() {}
        a.resume(4, &peer, 2, session, 39_990, false);
        let mut resent = Vec::new();
        while let Some(step) = a.poll_step() {
            if let Step::Send { link: 2, frame: Frame::Broker { seq, .. } } = step {
                resent.push(seq);
            }
        }
        assert_eq!(resent, (39_991..=40_000).collect::<Vec<_>>());
    }

    fn publication(n: u64) -> BrokerMessage {
        let publication = std::sync::Arc::new(format!("[class,'t'],[n,{n}]").parse().expect("a publication"));
        let stamp = padres_lang::Stamp::new(n, Name::new("A").expect("name"), n);
        BrokerMessage::Publish { publication, stamp }
    }

    fn steps(a: &mut Sessions) -> Vec<Step> {
        std::iter::from_fn(|| a.poll_step()).collect()
    }

    #[test]
    fn a_neighbour_that_lost_its_session_gets_its_publications_once_a_new_one_is_up() {
        let (mut a, peer, session) = open_to_b();
        for n in 1..=4 {
            a.send(&peer, publication(n));
        }
        a.send(&peer, message(5));
        a.acked(&peer, 1, 1);
        // B restarts: its link goes, it comes back and holds no session.
        a.detach(2, &peer, false);
        a.attach(3, &peer, 2);
        steps(&mut a);
        a.resume(4, &peer, 2, session, 0, true);
        let proposed = steps(&mut a);
        assert!(
            !proposed.iter().any(|s| matches!(s, Step::NeighbourDown(_))),
            "the router does not hear of it yet: {proposed:?}"
        );
        let Some(Step::Send { frame: Frame::Resume { session: new, fresh: true, .. }, .. }) = proposed.last()
        else {
            panic!("a new session proposed: {proposed:?}")
        };
        // What the router routes to B meanwhile is kept for it, publications only.
        assert_eq!(a.send(&peer, publication(6)), None);
        assert_eq!(a.send(&peer, message(7)), None);
        a.resume(5, &peer, 2, *new, 0, false);
        let confirmed = steps(&mut a);
        let kept = confirmed.iter().find_map(|s| match s {
            Step::NeighbourRestarted { kept, .. } => Some(kept.clone()),
            _ => None,
        });
        // Not what B acknowledged (1), nor what is not a publication.
        assert_eq!(kept, Some(vec![publication(2), publication(3), publication(4), publication(6)]));
        assert!(!confirmed.iter().any(|s| matches!(s, Step::NeighbourUp(_) | Step::Send { .. })));
        // The new session is used from here.
        assert!(a.send(&peer, publication(8)).is_some());
    }

    #[test]
    fn a_neighbour_that_lost_its_session_and_never_comes_back_is_down_after_the_window() {
        let (mut a, peer, session) = open_to_b();
        a.send(&peer, publication(1));
        a.detach(2, &peer, false);
        a.attach(3, &peer, 2);
        steps(&mut a);
        a.resume(4, &peer, 2, session, 0, true);
        steps(&mut a);
        // The new session's link goes and does not return.
        a.detach(5, &peer, false);
        let at = a.poll_timeout().expect("a deadline");
        a.handle_timeout(at);
        assert_eq!(steps(&mut a), [Step::NeighbourDown(peer.clone())]);
        assert_eq!(a.send(&peer, publication(2)), None);
    }

    #[test]
    fn the_steps_of_a_large_resumption_give_their_memory_back() {
        let (mut a, peer, session) = open_to_b();
        // The link drops with 40,000 messages unacknowledged; when it returns, each is a
        // step to send.
        a.detach(2, &peer, false);
        for n in 0..40_000 {
            a.send(&peer, message(n));
        }
        a.attach(3, &peer, 2);
        a.resume(4, &peer, 2, session, 0, false);
        let burst = a.steps.capacity();
        let mut taken = 0;
        while a.poll_step().is_some() {
            taken += 1;
        }
        assert!(taken > 40_000, "the resume exchange and every message: {taken}");
        assert!(a.steps.capacity() <= burst / 8, "{} of {burst} kept", a.steps.capacity());
    }
}
