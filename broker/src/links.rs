//! Link policy: when to dial a neighbour, which of two links to keep, and when a link that
//! does not keep up is cut, decided from the caller's clock with no I/O.
//!
//! In the shape of quinn-proto: the I/O shell reports what happened (`handle_*`, each with
//! the time), asks when the policy next needs the time ([`LinkPolicy::poll_timeout`]),
//! calls [`LinkPolicy::handle_timeout`] then, and carries out what [`LinkPolicy::poll_action`]
//! hands out. So the overlay simulator and the tests drive it in virtual time.
//!
//! - **Redial with backoff.** Each configured neighbour address is a *target*. A target is
//!   dialled at start; a failed dial is retried after a backoff that starts at
//!   [`Timers::first_backoff`] and doubles up to [`Timers::max_backoff`]; a link that
//!   drops is redialled after the first backoff.
//! - **Duplicate links.** Two brokers that list each other dial twice. Both keep the link
//!   dialled by the broker with the smaller name and close the other with
//!   [`CloseCode::DuplicateLink`]; the dialler of a link closed so waits
//!   [`Timers::duplicate_wait`] before dialling that target again (the kept link's
//!   dialler redials after the first backoff if the kept link drops).
//! - **Stuck links.** The shell reports how many frames wait on each link. A link whose
//!   backlog reaches [`Timers::max_backlog`] is cut at once; one that stays at or above
//!   [`Timers::stuck_backlog`] for [`Timers::stuck_after`] is cut then. Either way its
//!   routes are forgotten (the router hears `NeighbourDown`) and the two re-synchronise
//!   when it is back.
//! - **Paused links.** An operator (or a fault-injection harness) may drop a link and keep
//!   it down for a while ([`LinkPolicy::pause`]): it is closed at once, its target is not
//!   dialled, and a link the neighbour dials is closed as soon as it is up, until then.
//!
//! Whether the router hears of a link that goes and comes back is the link sessions'
//! decision ([`crate::resume`]): the policy's [`Action::NeighbourUp`] and
//! [`Action::NeighbourDown`] are about links.
//! Keep-alives and idle timeouts are QUIC's (`padres_transport::tls`: a keep-alive every
//! 2 s, a connection idle for 10 s is closed); the policy sees their effect as a link
//! going down.

use std::collections::{BTreeMap, VecDeque};

use padres_lang::Name;
use padres_lang::wire::CloseCode;

/// A configured neighbour address, by its position in the configuration.
pub type Target = usize;

/// A link, numbered by the shell (tells two links to one peer apart).
pub type LinkId = u64;

/// The policy's times (milliseconds) and thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    /// First wait before redialling.
    pub first_backoff: u64,
    /// Longest wait between dials.
    pub max_backoff: u64,
    /// Wait after a link this broker dialled was closed as a duplicate.
    pub duplicate_wait: u64,
    /// Frames waiting on a link that count as a backlog.
    pub stuck_backlog: usize,
    /// How long a backlog may last before the link is cut.
    pub stuck_after: u64,
    /// Frames waiting on a link that cut it at once. What waits on a link is also in its
    /// session's outbox until acknowledged, which `link_sessions.max_bytes` bounds.
    pub max_backlog: usize,
}

impl Default for Timers {
    fn default() -> Self {
        Self {
            first_backoff: 100,
            max_backoff: 5_000,
            duplicate_wait: 30_000,
            stuck_backlog: 8_192,
            stuck_after: 5_000,
            // Above what a link session's outbox (64 MiB by default) can hold: a link that
            // returns is sent everything its neighbour missed at once, and that is not a
            // link falling behind (it drains within the stuck rule's 5 s, or is cut by it).
            max_backlog: 1 << 20,
        }
    }
}

/// What the shell is to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Dial this target; report the result with [`LinkPolicy::handle_link_up`] or
    /// [`LinkPolicy::handle_dial_failed`].
    Dial(Target),
    /// Close this link with this code.
    Close {
        /// The peer.
        peer: Name,
        /// The link.
        link: LinkId,
        /// Why.
        code: CloseCode,
    },
    /// The link to the neighbour in use is this one now (a new one: anything sent on
    /// another is lost unless sent again).
    NeighbourUp(Name),
    /// No link to the neighbour is up; `code` says why the last one closed.
    NeighbourDown {
        /// The neighbour.
        peer: Name,
        /// Why its link closed.
        code: CloseCode,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TargetState {
    /// Dial at this time; the backoff after that attempt fails.
    Waiting { at: u64, backoff: u64 },
    /// A dial is under way; the backoff if it fails.
    Dialling { backoff: u64 },
    /// Linked over this link.
    Linked(LinkId),
}

#[derive(Clone, Copy, Debug)]
struct Link {
    id: LinkId,
    /// The target this broker dialled it for; `None` if the peer dialled.
    target: Option<Target>,
    /// Since when the backlog has been at or above [`Timers::stuck_backlog`].
    backlog_since: Option<u64>,
}

/// One broker's link policy (see the module docs).
#[derive(Debug)]
pub struct LinkPolicy {
    me: Name,
    timers: Timers,
    targets: Vec<TargetState>,
    /// The link in use to each neighbour.
    links: BTreeMap<Name, Link>,
    /// Neighbours whose links are kept down until a time.
    paused: BTreeMap<Name, u64>,
    /// The neighbour each target last linked to.
    target_peers: Vec<Option<Name>>,
    actions: VecDeque<Action>,
}

impl LinkPolicy {
    /// The policy of broker `me` with `targets` configured neighbour addresses, all dialled
    /// at the first [`LinkPolicy::handle_timeout`].
    pub fn new(me: Name, targets: usize, timers: Timers) -> Self {
        let first = TargetState::Waiting { at: 0, backoff: timers.first_backoff };
        Self {
            me,
            timers,
            targets: vec![first; targets],
            links: BTreeMap::new(),
            paused: BTreeMap::new(),
            target_peers: vec![None; targets],
            actions: VecDeque::new(),
        }
    }

    /// The next thing to do, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`LinkPolicy::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        let dials = self.targets.iter().filter_map(|t| match t {
            TargetState::Waiting { at, .. } => Some(*at),
            _ => None,
        });
        let stuck =
            self.links.values().filter_map(|l| l.backlog_since.map(|since| since + self.timers.stuck_after));
        dials.chain(stuck).min()
    }

    /// The time has come for what [`LinkPolicy::poll_timeout`] announced.
    pub fn handle_timeout(&mut self, now: u64) {
        for (target, state) in self.targets.iter_mut().enumerate() {
            if let TargetState::Waiting { at, backoff } = *state
                && at <= now
            {
                *state = TargetState::Dialling { backoff };
                self.actions.push_back(Action::Dial(target));
            }
        }
        let stuck: Vec<Name> = self
            .links
            .iter()
            .filter(|(_, l)| l.backlog_since.is_some_and(|since| since + self.timers.stuck_after <= now))
            .map(|(peer, _)| peer.clone())
            .collect();
        for peer in stuck {
            self.cut(now, &peer, CloseCode::TooSlow);
        }
    }

    /// A dial of `target` failed (unreachable, refused, or a failed handshake).
    pub fn handle_dial_failed(&mut self, now: u64, target: Target) {
        let Some(state) = self.targets.get_mut(target) else { return };
        if let TargetState::Dialling { backoff } = *state {
            let next = backoff.saturating_mul(2).min(self.timers.max_backoff);
            *state = TargetState::Waiting { at: now + backoff, backoff: next };
        }
    }

    /// A link to `peer` is up: dialled by this broker for `target`, or by the peer.
    pub fn handle_link_up(&mut self, now: u64, peer: Name, link: LinkId, target: Option<Target>) {
        if let Some(state) = target.and_then(|t| self.targets.get_mut(t)) {
            *state = TargetState::Linked(link);
        }
        if let Some(slot) = target.and_then(|t| self.target_peers.get_mut(t)) {
            *slot = Some(peer.clone());
        }
        self.paused.retain(|_, until| *until > now);
        if self.paused.contains_key(&peer) {
            self.actions.push_back(Action::Close { peer: peer.clone(), link, code: CloseCode::Done });
            self.handle_link_down(now, &peer, link, target, CloseCode::Done);
            return;
        }
        // Both ends keep the link dialled by the broker with the smaller name.
        let keep_mine = self.me < peer;
        if let Some(current) = self.links.get(&peer).copied() {
            let (current_mine, new_mine) = (current.target.is_some(), target.is_some());
            if current_mine == keep_mine && new_mine != keep_mine {
                self.actions.push_back(Action::Close { peer, link, code: CloseCode::DuplicateLink });
                return;
            }
            // The new one is the kept kind: the current one goes.
            let close =
                Action::Close { peer: peer.clone(), link: current.id, code: CloseCode::DuplicateLink };
            self.actions.push_back(close);
        }
        self.links.insert(peer.clone(), Link { id: link, target, backlog_since: None });
        self.actions.push_back(Action::NeighbourUp(peer));
    }

    /// Link `link` to `peer` is down, closed for `code` (by either end); `target` is the
    /// target it was dialled for, if this broker dialled it.
    pub fn handle_link_down(
        &mut self,
        now: u64,
        peer: &Name,
        link: LinkId,
        target: Option<Target>,
        code: CloseCode,
    ) {
        if self.links.get(peer).is_some_and(|l| l.id == link) {
            self.links.remove(peer);
            self.actions.push_back(Action::NeighbourDown { peer: peer.clone(), code });
        }
        if let Some(state) = target.and_then(|t| self.targets.get_mut(t))
            && *state == TargetState::Linked(link)
        {
            let wait = if code == CloseCode::DuplicateLink {
                self.timers.duplicate_wait
            } else {
                self.timers.first_backoff
            };
            let backoff = self.timers.first_backoff.saturating_mul(2).min(self.timers.max_backoff);
            let paused = self.paused.get(peer).copied().unwrap_or(0);
            *state = TargetState::Waiting { at: (now + wait).max(paused), backoff };
        }
    }

    /// Closes the link to `peer` at once (with `code`), if one is up, and keeps it down
    /// until `until`: its target is not dialled and a link it dials is closed. An `until`
    /// not after `now` lifts an earlier pause (its target is dialled at once). True if a
    /// link was up.
    pub fn pause(&mut self, now: u64, peer: &Name, until: u64, code: CloseCode) -> bool {
        if until > now {
            self.paused.insert(peer.clone(), until);
        } else if self.paused.remove(peer).is_some() {
            for (state, last) in self.targets.iter_mut().zip(&self.target_peers) {
                if last.as_ref() == Some(peer)
                    && let TargetState::Waiting { at, .. } = state
                {
                    *at = (*at).min(now);
                }
            }
        }
        let up = self.links.contains_key(peer);
        self.cut(now, peer, code);
        up
    }

    /// Closes the link to `peer` now, with `code`, if one is up.
    pub fn close(&mut self, now: u64, peer: &Name, code: CloseCode) {
        self.cut(now, peer, code);
    }

    /// `frames` wait to be written on the link to `peer`.
    pub fn handle_backlog(&mut self, now: u64, peer: &Name, frames: usize) {
        let Some(l) = self.links.get_mut(peer) else { return };
        if frames >= self.timers.max_backlog {
            self.cut(now, peer, CloseCode::TooSlow);
        } else if frames >= self.timers.stuck_backlog {
            l.backlog_since.get_or_insert(now);
        } else {
            l.backlog_since = None;
        }
    }

    /// The neighbours linked now.
    pub fn neighbours(&self) -> impl Iterator<Item = &Name> {
        self.links.keys()
    }

    /// The link in use to `peer`, if any.
    pub fn link_to(&self, peer: &Name) -> Option<LinkId> {
        self.links.get(peer).map(|l| l.id)
    }

    /// Closes every link (the broker is shutting down) and dials no more.
    pub fn shut_down(&mut self) {
        self.targets.clear();
        for (peer, l) in std::mem::take(&mut self.links) {
            self.actions.push_back(Action::Close { peer, link: l.id, code: CloseCode::ShuttingDown });
        }
    }

    fn cut(&mut self, now: u64, peer: &Name, code: CloseCode) {
        let Some(l) = self.links.get(peer).copied() else { return };
        self.actions.push_back(Action::Close { peer: peer.clone(), link: l.id, code });
        self.handle_link_down(now, peer, l.id, l.target, code);
    }
}
