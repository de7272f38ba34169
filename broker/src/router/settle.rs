//! Settled replies: a client's `advertise`, `subscribe`, `cs` or `unadv` is answered once
//! it has taken effect everywhere it must.
//!
//! Every [`BrokerMessage::Advertise`], [`BrokerMessage::Unadvertise`],
//! [`BrokerMessage::Subscribe`], [`BrokerMessage::TreeSubscribe`] and
//! [`BrokerMessage::CompositeSubscribe`] a broker sends is answered by its neighbour with a
//! [`BrokerMessage::Settled`] naming it (a [`BrokerMessage::TreesSettled`] naming every
//! tree a `TreeSubscribe` carried), once the neighbour's own forwarded copies of it have
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
//! The cost: one small message per forwarded message, and a reply that takes a round trip
//! to the farthest broker concerned.
//!
//! A `TreeSubscribe` carrying several trees is answered tree by tree, as each settles (the
//! answers that come at once share one message): a tree's answer waits only for copies on
//! that tree, nearer its root, as if each had come alone. Waiting for the whole message
//! instead would tie the trees together, and with covering (a copy held back waits for its
//! cover's copy, which travels with the cover's other trees) such ties could close a
//! circle.
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
//! - Every wait has a deadline ([`Options::settle_timeout_ms`](super::Options)): past it,
//!   the client (or the neighbour) is answered with what has settled so far, and the
//!   timeout is counted ([`Settle::timeouts`]) and logged. A neighbour that stays up and
//!   never answers then costs a late reply, not a lost one.
//!
//! Only the first copy of an advertisement a broker takes waits for its own forwarded
//! copies. In a cyclic overlay a later copy (a shorter path, a new flood after a lost
//! link) moves the advertisement's tree and is passed on, but is answered at once: the
//! copies of one advertisement to one neighbour are counted together, so a later copy
//! waiting for its own forwards joined the waits of the first flood, and around a loop
//! those waits could hold each other up for ever (at 60 brokers and more, most
//! advertisements never settled). The first copies form a spanning tree, so their waits
//! cannot close a circle; the subscriptions a moved tree carries are offered to the new
//! parent before they leave the old one, so the advertiser never lacks them.

use std::collections::{BTreeSet, HashMap};

use padres_lang::MessageId;
use padres_lang::wire::{BrokerMessage, Forwarded};
use smallvec::SmallVec;

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
    /// The neighbour that sent subscription `id` on `tree`, answered with
    /// [`BrokerMessage::TreesSettled`] (joined with the other trees answered at once).
    Tree { to: Name, id: MessageId, tree: MessageId },
}

impl Waiter {
    /// The neighbour waiting, if it is one.
    fn neighbour(&self) -> Option<&Name> {
        match self {
            Self::Broker { to, .. } | Self::Tree { to, .. } => Some(to),
            Self::Client { .. } | Self::Done { .. } => None,
        }
    }
}

#[derive(Debug)]
struct Wait {
    waiter: Waiter,
    remaining: usize,
    /// When it is answered whatever is still outstanding (virtual ms).
    deadline: u64,
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
    /// `(deadline, wait)` of every wait, soonest first (answered ones are skipped).
    deadlines: BTreeSet<(u64, u64)>,
    /// Waits answered at their deadline.
    timeouts: u64,
    /// The waits answering a neighbour's copy of an advertisement, by advertisement.
    adv_waits: HashMap<MessageId, Vec<u64>>,
}

impl Settle {
    /// Counts the copies `message` carries, if it is one that is answered; a subscription
    /// sent up a tree may hold up an advertisement's answer ([`Self::tree_copy_sent`]).
    pub(super) fn sent(&mut self, to: &Name, message: &BrokerMessage) {
        for what in forwarded(message) {
            let key = (what, to.clone());
            *self.outstanding.entry(key.clone()).or_default() += 1;
            if let (Forwarded::TreeSubscription { tree, .. }, _) = &key {
                let tree = tree.clone();
                self.tree_copy_sent(&tree, key);
            }
        }
    }

    /// `waiter` is answered once every copy in `needs` that is still unanswered is, or at
    /// `deadline`, whichever comes first.
    pub(super) fn wait(
        &mut self,
        needs: BTreeSet<(Forwarded, Name)>,
        waiter: Waiter,
        deadline: u64,
        out: &mut Vec<Output>,
    ) {
        let needs: Vec<(Forwarded, Name)> =
            needs.into_iter().filter(|need| self.outstanding.contains_key(need)).collect();
        if needs.is_empty() {
            answer(waiter, out);
            return;
        }
        self.next += 1;
        let wait = self.next;
        if let Waiter::Broker { what: Forwarded::Advertisement(adv), .. } = &waiter {
            self.adv_waits.entry(adv.clone()).or_default().push(wait);
        }
        self.waits.insert(wait, Wait { waiter, remaining: needs.len(), deadline });
        self.deadlines.insert((deadline, wait));
        for need in needs {
            self.blocked.entry(need).or_default().push(wait);
        }
    }

    /// `(copy, to)`, a subscription just sent on advertisement `tree`'s tree to `to`, holds
    /// up the answer to a neighbour's copy of that advertisement still waiting here, unless
    /// that neighbour is `to` (the link keeps the two in order).
    ///
    /// The answer says that the subscriptions the advertisement pulled have reached its
    /// broker, because they were sent back before it over the same links. When the tree
    /// has moved here to a shorter path since that copy came (a second copy came over
    /// another link), what it pulls goes the new way, and only the copy's own answer
    /// keeps the old: without this wait the answer could overtake them.
    fn tree_copy_sent(&mut self, tree: &MessageId, key: (Forwarded, Name)) {
        let Some(waits) = self.adv_waits.get(tree) else { return };
        for &wait in waits {
            let Some(w) = self.waits.get_mut(&wait) else { continue };
            if w.waiter.neighbour() == Some(&key.1) {
                continue;
            }
            w.remaining += 1;
            self.blocked.entry(key.clone()).or_default().push(wait);
        }
    }

    /// Forgets wait `wait`, answered or dropped, from the index of advertisement waits.
    fn finished(adv_waits: &mut HashMap<MessageId, Vec<u64>>, wait: u64, waiter: &Waiter) {
        if let Waiter::Broker { what: Forwarded::Advertisement(adv), .. } = waiter
            && let Some(waits) = adv_waits.get_mut(adv)
        {
            waits.retain(|w| *w != wait);
            if waits.is_empty() {
                adv_waits.remove(adv);
                // Every broker's advertisements come at once when a federation starts;
                // the room they took is not kept for ever after.
                if adv_waits.is_empty() {
                    adv_waits.shrink_to_fit();
                }
            }
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
        let (deadlines, adv_waits) = (&mut self.deadlines, &mut self.adv_waits);
        self.waits.retain(|wait, w| {
            let gone = w.waiter.neighbour() == Some(name);
            if gone {
                deadlines.remove(&(w.deadline, *wait));
                Self::finished(adv_waits, *wait, &w.waiter);
            }
            !gone
        });
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

    /// Waits answered at their deadline so far.
    pub(super) fn timeouts(&self) -> u64 {
        self.timeouts
    }

    /// The soonest deadline of a wait.
    pub(super) fn poll_timeout(&self) -> Option<u64> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Answers every wait whose deadline is `now` or earlier with what has settled.
    pub(super) fn handle_timeout(&mut self, now: u64, out: &mut Vec<Output>) {
        let mut late = 0_u64;
        let mut first = None;
        while let Some(&(at, wait)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(w) = self.waits.remove(&wait) else { continue };
            Self::finished(&mut self.adv_waits, wait, &w.waiter);
            late += 1;
            if first.is_none() {
                first = Some((w.waiter.clone(), w.remaining));
            }
            answer(w.waiter, out);
        }
        self.timeouts += late;
        // One line for all that fell due together: under a storm of late answers, a line
        // each would add to the load that made them late.
        if let Some((waiter, unanswered)) = first {
            tracing::warn!(
                late,
                first = ?waiter,
                unanswered,
                "requests did not settle in time: answered with what has settled"
            );
        }
    }

    fn release(&mut self, key: &(Forwarded, Name), out: &mut Vec<Output>) {
        for wait in self.blocked.remove(key).unwrap_or_default() {
            let Some(w) = self.waits.get_mut(&wait) else { continue };
            w.remaining -= 1;
            if w.remaining == 0
                && let Some(w) = self.waits.remove(&wait)
            {
                self.deadlines.remove(&(w.deadline, wait));
                Self::finished(&mut self.adv_waits, wait, &w.waiter);
                answer(w.waiter, out);
            }
        }
    }
}

/// The answered copies `message` carries: one, several trees' of one subscription, or
/// none (one is held inline: this runs for every message a broker sends).
pub(super) fn forwarded(message: &BrokerMessage) -> SmallVec<[Forwarded; 1]> {
    let one = match message {
        BrokerMessage::Advertise { id, .. } => Forwarded::Advertisement(id.clone()),
        BrokerMessage::Subscribe { id, .. } => Forwarded::Subscription(id.clone()),
        BrokerMessage::TreeSubscribe { id, trees, .. } => {
            return trees
                .iter()
                .map(|tree| Forwarded::TreeSubscription { id: id.clone(), tree: tree.clone() })
                .collect();
        }
        BrokerMessage::CompositeSubscribe { id, .. } => Forwarded::Composite(id.clone()),
        BrokerMessage::Unadvertise { id, .. } => Forwarded::Unadvertisement(id.clone()),
        _ => return SmallVec::new(),
    };
    SmallVec::from_buf([one])
}

/// Who waits for each copy an answered `message` from neighbour `from` carries: one
/// waiter per copy, so a subscription's copies on several trees are answered tree by tree
/// (those that settle together in one message, by [`super::cycles::coalesce`]).
pub(super) fn waiters_for(from: &Name, message: &BrokerMessage) -> Vec<(Forwarded, Waiter)> {
    forwarded(message)
        .into_iter()
        .map(|what| {
            let waiter = match &what {
                Forwarded::TreeSubscription { id, tree } => {
                    Waiter::Tree { to: from.clone(), id: id.clone(), tree: tree.clone() }
                }
                _ => Waiter::Broker { to: from.clone(), what: what.clone() },
            };
            (what, waiter)
        })
        .collect()
}

fn answer(waiter: Waiter, out: &mut Vec<Output>) {
    match waiter {
        Waiter::Client { client, req, id } => out.push(Output::Reply { client, req, result: Ok(Some(id)) }),
        Waiter::Done { client, req } => out.push(Output::Reply { client, req, result: Ok(None) }),
        Waiter::Broker { to, what } => {
            out.push(Output::ToBroker { to, message: BrokerMessage::Settled { what } });
        }
        Waiter::Tree { to, id, tree } => {
            let message = BrokerMessage::TreesSettled { id, trees: vec![tree] };
            out.push(Output::ToBroker { to, message });
        }
    }
}
