//! Neighbours that lost what this broker had sent them, and come back.
//!
//! A neighbour that restarted (or whose link session ended on its side first) holds none
//! of the advertisements and subscriptions this broker sent it, and none of the
//! publications it had not passed on. Its link session says so when the two meet again
//! ([`crate::resume::Step::NeighbourRestarted`]). Withdrawing what was learned from it, as
//! for a neighbour gone, would withdraw its subscribers' subscriptions toward every
//! publisher and drop the publications kept for it: they are lost at the publishers'
//! side until the subscriptions come back. Instead, in a tree overlay:
//!
//! - **What it had sent stays**, marked *stale*: its subscriptions still route here, and
//!   nothing is withdrawn beyond this broker. This broker sends it everything it knows
//!   again, as to a neighbour that comes up, and the neighbour re-synchronises with its
//!   own neighbours; each stale subscription or advertisement it sends again is fresh
//!   once more (a stale advertisement sent again also pulls this broker's subscriptions
//!   toward it, as a new one would).
//! - **Publications for it are held**, in order: those its session kept (not
//!   acknowledged before it went, so maybe never passed on) and those routed to it since.
//!   They go to it once every stale subscription has come back: it then holds its
//!   subscribers' routes again, so it can deliver them. Subscriptions come back behind
//!   the advertisements that pull them, from the far side of the neighbour, so holding
//!   until they do is what keeps the neighbour from dropping what it is sent.
//! - **A deadline** ([`super::Options::rejoin_ms`]): what is still stale then is gone (a
//!   subscriber that left meanwhile, or a subscription that now travels under a cover):
//!   it is withdrawn as for a neighbour gone, and what was held goes to the neighbour,
//!   which routes it by what it knows. Held publications past
//!   [`super::Options::rejoin_max_bytes`] are dropped, oldest kept.
//!
//! A publication the neighbour had passed on before it went but not acknowledged comes
//! again at the brokers beyond it; they drop it by its stamp (each broker passes on a
//! publication from a neighbour only if its stamp is past the last it passed from that
//! publisher's broker, `Router::passed`). With cycles a restarted neighbour is one gone
//! and back (the trees have their own order, `cycles.rs`).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use padres_lang::wire::BrokerMessage;
use padres_lang::{MessageId, Name, Publication, Stamp, covers};

use super::{Hop, Output, Overlay, Router};

/// One neighbour re-synchronising after it lost what this broker had sent it.
#[derive(Debug, Default)]
pub(super) struct Rejoin {
    /// Subscriptions learned from it that it has not sent again.
    pub(super) subs: BTreeSet<MessageId>,
    /// Advertisements learned from it that it has not sent again.
    pub(super) advs: BTreeSet<MessageId>,
    /// Publications for it, in the order routed, while `subs` is not empty.
    pub(super) held: VecDeque<(Arc<Publication>, Stamp)>,
    /// Their estimated size.
    pub(super) bytes: usize,
    /// Stale subscriptions it sent a cover for instead: withdrawn once the cover is in.
    pub(super) covered: Vec<MessageId>,
    /// When what is still stale is gone.
    pub(super) until: u64,
}

impl Rejoin {
    /// Publications for the neighbour wait until its subscriptions are back.
    pub(super) fn holding(&self) -> bool {
        !self.subs.is_empty()
    }

    /// Holds `publication` for the neighbour; false if `max` bytes wait already (it is
    /// dropped).
    pub(super) fn hold(&mut self, publication: Arc<Publication>, stamp: Stamp, max: usize) -> bool {
        let size = 64 + publication.estimated_size();
        if self.bytes + size > max {
            return false;
        }
        self.bytes += size;
        self.held.push_back((publication, stamp));
        true
    }

    /// Everything stale is fresh again (or gone).
    pub(super) fn done(&self) -> bool {
        self.subs.is_empty() && self.advs.is_empty()
    }
}

impl Router {
    /// Neighbour `name` lost what this broker had sent it, and is up again (see the module
    /// docs); `kept` are the publications its link session kept for it.
    pub(super) fn neighbour_restarted(
        &mut self,
        name: Name,
        kept: Vec<(Arc<Publication>, Stamp)>,
        out: &mut Vec<Output>,
    ) {
        if matches!(self.overlay, Overlay::Cyclic(_)) || !self.neighbours.contains(&name) {
            // Trees rebuild their own way; a neighbour not known is simply up.
            self.neighbour_up(name, out);
            return;
        }
        self.replays.restarts += 1;
        let hop = Hop::Broker(name.clone());
        // Restarted again before it had re-synchronised: what is stale stays stale, and what
        // was held goes first.
        let mut rejoin = self.rejoining.remove(&name).unwrap_or_default();
        for (publication, stamp) in kept {
            if !rejoin.hold(publication, stamp, self.rejoin_max_bytes) {
                self.replays.dropped += 1;
            }
        }
        // Entries it made itself (its clients', its store's) died with its earlier life:
        // its clients make them again under new ids. The others come back from beyond it.
        let (own_subs, subs): (Vec<MessageId>, Vec<MessageId>) =
            self.subs.select(|e| e.last == hop).into_iter().partition(|id| id.origin == name);
        let (own_advs, advs): (Vec<MessageId>, Vec<MessageId>) =
            self.advs.select(|e| e.last == hop).into_iter().partition(|id| id.origin == name);
        rejoin.subs.extend(subs);
        rejoin.advs.extend(advs);
        rejoin.until = self.now.saturating_add(self.rejoin_ms);
        // It holds nothing this broker sent it: every entry goes to it again.
        self.subs.forget_neighbour(&name);
        self.advs.forget_neighbour(&name);
        for id in &own_subs {
            self.remove_sub(id, out);
        }
        for id in &own_advs {
            self.remove_adv(id, true, out);
        }
        // Nobody there waits for an answer, and it answers nothing sent before.
        self.settle.neighbour_down(&name, out);
        // Its stores and composite subscriptions come back with its re-synchronisation.
        self.stores_gone(&name, out);
        self.composites_of_gone(&hop, out);
        self.rejoining.insert(name.clone(), rejoin);
        self.greet(name.clone(), out);
        self.release_if_back(&name, out);
    }

    /// A restarted neighbour sends `message`: a stale entry it sends again (or withdraws)
    /// is no longer stale.
    pub(super) fn heard_again(&mut self, from: &Name, message: &BrokerMessage, out: &mut Vec<Output>) {
        let Some(rejoin) = self.rejoining.get_mut(from) else { return };
        match message {
            BrokerMessage::Subscribe { id, sub } => {
                rejoin.subs.remove(id);
                if self.covering.holds() {
                    // It may send a cover in place of what it sent before: the covered
                    // ones are withdrawn once the cover is in (`release_if_back`).
                    let subs = &self.subs;
                    let covered: Vec<MessageId> = rejoin
                        .subs
                        .iter()
                        .filter(|stale| subs.get(stale).is_some_and(|e| covers(sub, &e.item)))
                        .cloned()
                        .collect();
                    for stale in covered {
                        rejoin.subs.remove(&stale);
                        rejoin.covered.push(stale);
                    }
                }
            }
            BrokerMessage::Unsubscribe { id } => {
                rejoin.subs.remove(id);
            }
            BrokerMessage::Unadvertise { id, .. } => {
                rejoin.advs.remove(id);
            }
            BrokerMessage::Advertise { id, .. } => {
                if !rejoin.advs.remove(id) {
                    return;
                }
                // Known already, so not installed again: it pulls this broker's
                // subscriptions toward it, as a new one would.
                let Some(adv) = self.advs.get(id).map(|e| e.item.clone()) else { return };
                let hop = Hop::Broker(from.clone());
                for sub_id in self.routes.ids(&self.sub_index.overlapping(&adv)) {
                    if self.subs.get(&sub_id).is_some_and(|e| e.last != hop) {
                        self.offer_sub(&sub_id, from, out);
                    }
                }
            }
            _ => {}
        }
    }

    /// Sends restarted neighbour `name` what was held for it once its subscriptions are
    /// back, and forgets it as restarted once nothing is stale.
    pub(super) fn release_if_back(&mut self, name: &Name, out: &mut Vec<Output>) {
        let Some(rejoin) = self.rejoining.get_mut(name) else { return };
        let covered = std::mem::take(&mut rejoin.covered);
        let hop = Hop::Broker(name.clone());
        for id in &covered {
            if self.subs.get(id).is_some_and(|e| e.last == hop) {
                self.remove_sub(id, out);
            }
        }
        let Some(rejoin) = self.rejoining.get_mut(name) else { return };
        if rejoin.holding() {
            return;
        }
        self.replays.sent += send_held(name, rejoin, out);
        if rejoin.done() {
            self.rejoining.remove(name);
        }
    }

    /// Restarted neighbours whose deadline has come: what they have not sent again is
    /// withdrawn, and what was held for them is sent.
    pub(super) fn rejoin_timeouts(&mut self, now: u64, out: &mut Vec<Output>) {
        let due: Vec<Name> =
            self.rejoining.iter().filter(|(_, r)| r.until <= now).map(|(n, _)| n.clone()).collect();
        for name in due {
            let Some(mut rejoin) = self.rejoining.remove(&name) else { continue };
            self.replays.sent += send_held(&name, &mut rejoin, out);
            let hop = Hop::Broker(name.clone());
            for id in rejoin.subs.iter().chain(&rejoin.covered) {
                if self.subs.get(id).is_some_and(|e| e.last == hop) {
                    self.remove_sub(id, out);
                }
            }
            for id in &rejoin.advs {
                if self.advs.get(id).is_some_and(|e| e.last == hop) {
                    self.remove_adv(id, true, out);
                }
            }
        }
    }

    /// Takes out of `brokers` the restarted neighbours that hold publications, and holds
    /// `publication` for them.
    pub(super) fn hold_for_rejoining(
        &mut self,
        brokers: &mut BTreeSet<Name>,
        publication: &Arc<Publication>,
        stamp: &Stamp,
    ) {
        for (name, rejoin) in &mut self.rejoining {
            if rejoin.holding()
                && brokers.remove(name)
                && !rejoin.hold(publication.clone(), stamp.clone(), self.rejoin_max_bytes)
            {
                self.replays.dropped += 1;
            }
        }
    }

    /// In a tree, true if a publication stamped `stamp`, from a neighbour, was passed on
    /// already: neither its publisher's broker's counter (incarnation, then count) nor its
    /// time is past the last passed on from that broker. Publications from one broker
    /// arrive in its order (one path, FIFO links), so only one sent again after a neighbour
    /// restarted is dropped; a broker that lost its incarnation and counts again from
    /// where an earlier life did stamps a later time, and passes.
    pub(super) fn passed_already(&mut self, stamp: &Stamp) -> bool {
        if !matches!(self.overlay, Overlay::Acyclic) {
            return false;
        }
        match self.passed.get_mut(&stamp.origin) {
            Some((seq, time)) if stamp.seq <= *seq && stamp.time <= *time => true,
            Some(last) => {
                *last = (stamp.seq, stamp.time);
                false
            }
            None => {
                self.passed.insert(stamp.origin.clone(), (stamp.seq, stamp.time));
                false
            }
        }
    }
}

/// Sends neighbour `to` the publications held for it; how many.
fn send_held(to: &Name, rejoin: &mut Rejoin, out: &mut Vec<Output>) -> u64 {
    let n = rejoin.held.len() as u64;
    for (publication, stamp) in rejoin.held.drain(..) {
        out.push(Output::ToBroker { to: to.clone(), message: BrokerMessage::Publish { publication, stamp } });
    }
    rejoin.bytes = 0;
    crate::outbox::release_drained(&mut rejoin.held);
    n
}
