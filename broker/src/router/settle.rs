//! Settled replies: a client's `advertise`, `subscribe`, `cs` or `unadv` is answered once
//! it has taken effect everywhere it must.
//!
//! Every [`BrokerMessage::Advertise`], [`BrokerMessage::Unadvertise`],
//! [`BrokerMessage::Subscribe`], [`BrokerMessage::TreeSubscribe`] and
//! [`BrokerMessage::CompositeSubscribe`] a broker sends is answered by its neighbour with a
//! [`BrokerMessage::Settled`] naming it, once the neighbour's own forwarded copies of it have
//! settled, and at once if it forwarded none. A copy held back by covering waits for the
//! cover's copy at that neighbour to settle. The broker that took the client's request
//! replies when its own copies have settled. Links are FIFO, so what a broker sends back
//! before its answer (the subscriptions an advertisement pulls) arrives before it:
//!
//! - when `advertise` returns, every subscription that existed when it was issued has
//!   reached the advertiser's broker, so a publication published next reaches it;
//! - when `subscribe` returns, every broker on the way to the advertisements it overlaps
//!   holds it (or a cover), so a publication published next at any of them reaches it;
//! - when `unadv` returns, the withdrawal has reached every broker that knew the
//!   advertisement, and the composite patterns it moved are in place where they went, so
//!   a pattern completed by publications published next is detected.
//!
//! The cost: one small message per forwarded copy, and a reply that takes a round trip to
//! the farthest broker concerned.
//!
//! Limits, as built:
//!
//! - A neighbour that goes away settles what waited for it (the two re-synchronise when it
//!   returns). So does a neighbour that comes up again without going down (a restarted
//!   peer, or a duplicate link replaced): its re-synchronisation copies carry no waiter,
//!   so a reply can come before that neighbour has re-established its part.
//! - Only copies from a neighbour the router knows are answered: a message racing its
//!   link's end is dropped, and the link's end settles its sender.
//! - A copy the shell cannot encode would never be answered; the session refuses an
//!   advertisement or subscription whose forwarded copy could pass the frame limit
//!   (`net/session.rs`, `forwardable`), so none should reach the router.
//! - There is no deadline: a neighbour that stays up and never answers holds the reply.

use std::collections::{BTreeSet, HashMap};

use padres_lang::MessageId;
use padres_lang::wire::{BrokerMessage, Forwarded};

use super::{ClientId, Name, Output};

/// Who waits for a forwarded message to settle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Waiter {
    /// A client's request, answered with the id.
    Client { client: ClientId, req: Option<u64>, id: MessageId },
    /// A client's request answered without an id (`unadv`).
    Done { client: ClientId, req: Option<u64> },
    /// The neighbour that sent it, answered with [`BrokerMessage::Settled`].
    Broker { to: Name, what: Forwarded },
}

#[derive(Debug)]
struct Wait {
    waiter: Waiter,
    remaining: usize,
}

/// What is unsettled at this broker.
#[derive(Debug, Default)]
pub(super) struct Settle {
    /// Copies sent and not answered yet, per neighbour, with how many.
    outstanding: HashMap<(Forwarded, Name), u32>,
    /// The waits each unanswered copy holds up.
    blocked: HashMap<(Forwarded, Name), Vec<u64>>,
    waits: HashMap<u64, Wait>,
    next: u64,
}

impl Settle {
    /// Counts a copy sent, if `message` is one that is answered.
    pub(super) fn sent(&mut self, to: &Name, message: &BrokerMessage) {
        if let Some(what) = forwarded(message) {
            *self.outstanding.entry((what, to.clone())).or_default() += 1;
        }
    }

    /// `waiter` is answered once every copy in `needs` that is still unanswered is.
    pub(super) fn wait(&mut self, needs: BTreeSet<(Forwarded, Name)>, waiter: Waiter, out: &mut Vec<Output>) {
        let needs: Vec<(Forwarded, Name)> =
            needs.into_iter().filter(|need| self.outstanding.contains_key(need)).collect();
        if needs.is_empty() {
            answer(waiter, out);
            return;
        }
        self.next += 1;
        let wait = self.next;
        self.waits.insert(wait, Wait { waiter, remaining: needs.len() });
        for need in needs {
            self.blocked.entry(need).or_default().push(wait);
        }
    }

    /// Neighbour `from` answered a copy of `what`.
    pub(super) fn settled(&mut self, from: &Name, what: Forwarded, out: &mut Vec<Output>) {
        let key = (what, from.clone());
        let Some(count) = self.outstanding.get_mut(&key) else { return };
        *count -= 1;
        if *count == 0 {
            self.outstanding.remove(&key);
            self.release(&key, out);
        }
    }

    /// Neighbour `name` is gone: nothing more comes from it, and nobody there waits.
    pub(super) fn neighbour_down(&mut self, name: &Name, out: &mut Vec<Output>) {
        self.waits.retain(|_, w| !matches!(&w.waiter, Waiter::Broker { to, .. } if to == name));
        let mut gone: Vec<(Forwarded, Name)> =
            self.outstanding.keys().filter(|(_, to)| to == name).cloned().collect();
        gone.sort();
        for key in gone {
            self.outstanding.remove(&key);
            self.release(&key, out);
        }
    }

    /// How many requests and forwarded messages wait now (checked empty by the tests).
    pub(super) fn waiting(&self) -> usize {
        self.waits.len()
    }

    fn release(&mut self, key: &(Forwarded, Name), out: &mut Vec<Output>) {
        for wait in self.blocked.remove(key).unwrap_or_default() {
            let Some(w) = self.waits.get_mut(&wait) else { continue };
            w.remaining -= 1;
            if w.remaining == 0
                && let Some(w) = self.waits.remove(&wait)
            {
                answer(w.waiter, out);
            }
        }
    }
}

/// Which answered message `message` is, if it is one.
pub(super) fn forwarded(message: &BrokerMessage) -> Option<Forwarded> {
    match message {
        BrokerMessage::Advertise { id, .. } => Some(Forwarded::Advertisement(id.clone())),
        BrokerMessage::Subscribe { id, .. } => Some(Forwarded::Subscription(id.clone())),
        BrokerMessage::TreeSubscribe { id, tree, .. } => {
            Some(Forwarded::TreeSubscription { id: id.clone(), tree: tree.clone() })
        }
        BrokerMessage::CompositeSubscribe { id, .. } => Some(Forwarded::Composite(id.clone())),
        BrokerMessage::Unadvertise { id, .. } => Some(Forwarded::Unadvertisement(id.clone())),
        _ => None,
    }
}

fn answer(waiter: Waiter, out: &mut Vec<Output>) {
    match waiter {
        Waiter::Client { client, req, id } => out.push(Output::Reply { client, req, result: Ok(Some(id)) }),
        Waiter::Done { client, req } => out.push(Output::Reply { client, req, result: Ok(None) }),
        Waiter::Broker { to, what } => {
            out.push(Output::ToBroker { to, message: BrokerMessage::Settled { what } });
        }
    }
}
