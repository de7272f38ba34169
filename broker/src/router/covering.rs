//! Covering: keeping an advertisement or subscription off a link where a more general one
//! already goes.
//!
//! The SRT and the PRT are both a [`Table`]: entries with the hop they came from, the
//! neighbours they were sent to, and the neighbours they are held back from. One mechanism
//! serves both: [`Table::offer`] sends an entry to a neighbour or holds it back when an
//! entry already sent there (from elsewhere) covers it; with [`Covering::Active`], sending
//! an entry also withdraws from that neighbour the ones it covers. When an entry leaves a
//! neighbour, [`Table::remove`] first offers again what it held back there, so the
//! neighbour never lacks either. A [`Kind`] says what covers what and which messages an
//! entry travels as.
//!
//! Deliveries are the same in every mode, since each broker matches publications against
//! all its subscriptions; only the messages on links and the upstream tables shrink.
//! In cyclic overlays subscriptions are covered per tree (`cycles.rs`) with the same rule.

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;

use padres_lang::wire::BrokerMessage;
use padres_lang::{Advertisement, MessageId, Name, Subscription, adv_covers, covers};

use super::{Hop, Output};

/// Subscription and advertisement covering (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Covering {
    /// Every subscription goes to every hop it overlaps.
    #[default]
    Off,
    /// A covered subscription is held back, and sent when its cover goes away.
    Lazy,
    /// As `Lazy`, and sending a subscription withdraws those it covers.
    Active,
}

impl Covering {
    /// Whether a covered entry is held back.
    pub(super) fn holds(self) -> bool {
        self != Self::Off
    }

    /// Whether sending an entry withdraws the ones it covers.
    pub(super) fn withdraws(self) -> bool {
        self == Self::Active
    }
}

/// What a table routes: advertisements or subscriptions.
pub(super) trait Kind {
    /// The routed message.
    type Item;
    /// True if every publication `b` admits, `a` admits too.
    fn covers(a: &Self::Item, b: &Self::Item) -> bool;
    /// The message that carries entry `id` to a neighbour.
    fn announce(id: &MessageId, entry: &Entry<Self::Item>) -> BrokerMessage;
    /// The message that withdraws it from a neighbour covering now stands in for.
    fn retract(id: &MessageId) -> BrokerMessage;
}

/// The SRT's kind.
#[derive(Debug)]
pub(super) struct Advertisements;

impl Kind for Advertisements {
    type Item = Advertisement;

    fn covers(a: &Advertisement, b: &Advertisement) -> bool {
        adv_covers(a, b)
    }

    fn announce(id: &MessageId, entry: &Entry<Advertisement>) -> BrokerMessage {
        // `distance` comes from a peer: saturate rather than overflow.
        BrokerMessage::Advertise {
            id: id.clone(),
            adv: entry.item.clone(),
            hops: entry.distance.saturating_add(1),
            epoch: entry.epoch,
        }
    }

    fn retract(id: &MessageId) -> BrokerMessage {
        // "Lost" for the neighbour: it keeps its own copies' fate to their owner.
        BrokerMessage::Unadvertise { id: id.clone(), lost: true }
    }
}

/// The PRT's kind.
#[derive(Debug)]
pub(super) struct Subscriptions;

impl Kind for Subscriptions {
    type Item = Subscription;

    fn covers(a: &Subscription, b: &Subscription) -> bool {
        covers(a, b)
    }

    fn announce(id: &MessageId, entry: &Entry<Subscription>) -> BrokerMessage {
        BrokerMessage::Subscribe { id: id.clone(), sub: entry.item.clone() }
    }

    fn retract(id: &MessageId) -> BrokerMessage {
        BrokerMessage::Unsubscribe { id: id.clone() }
    }
}

/// One advertisement or subscription known to this broker.
#[derive(Debug)]
pub(super) struct Entry<T> {
    pub(super) item: Arc<T>,
    /// The hop it came from.
    pub(super) last: Hop,
    /// Advertisements: brokers to the advertiser's along `last` (0 for a local client's).
    pub(super) distance: u32,
    /// Advertisements, with cycles: the flood `last` and `distance` come from.
    pub(super) epoch: u32,
    /// Neighbours it was sent to.
    pub(super) sent_to: BTreeSet<Name>,
    /// Neighbours it should reach but is held back from, covered by one sent there.
    pub(super) held: BTreeSet<Name>,
}

impl<T> Entry<T> {
    pub(super) fn new(item: Arc<T>, last: Hop, distance: u32) -> Self {
        Self { item, last, distance, epoch: 0, sent_to: BTreeSet::new(), held: BTreeSet::new() }
    }
}

/// What [`Table::offer`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Offered {
    /// Sent (or sent already).
    Sent,
    /// Held back, covered there by this entry.
    Held(MessageId),
    /// No such entry.
    Unknown,
}

/// The SRT or the PRT (see the module docs).
#[derive(Debug)]
pub(super) struct Table<K: Kind> {
    /// foldhash: looked up once per matched subscription of every publication.
    entries: foldhash::HashMap<MessageId, Entry<K::Item>>,
    kind: PhantomData<K>,
}

impl<K: Kind> Default for Table<K> {
    fn default() -> Self {
        Self { entries: foldhash::HashMap::default(), kind: PhantomData }
    }
}

impl<K: Kind> Table<K> {
    pub(super) fn get(&self, id: &MessageId) -> Option<&Entry<K::Item>> {
        self.entries.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &MessageId) -> Option<&mut Entry<K::Item>> {
        self.entries.get_mut(id)
    }

    pub(super) fn insert(&mut self, id: MessageId, entry: Entry<K::Item>) {
        self.entries.insert(id, entry);
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&MessageId, &Entry<K::Item>)> {
        self.entries.iter()
    }

    /// The ids of the entries `pick` selects, sorted (a stable order for what they cause).
    pub(super) fn select(&self, pick: impl Fn(&Entry<K::Item>) -> bool) -> Vec<MessageId> {
        let mut ids: Vec<MessageId> =
            self.entries.iter().filter(|(_, e)| pick(e)).map(|(id, _)| id.clone()).collect();
        ids.sort();
        ids
    }

    /// Entry `id` should reach neighbour `to`: send it, or hold it back if an entry sent
    /// there from elsewhere covers it; with active covering, sending it withdraws from
    /// `to` the ones it covers.
    pub(super) fn offer(
        &mut self,
        covering: Covering,
        id: &MessageId,
        to: &Name,
        out: &mut Vec<Output>,
    ) -> Offered {
        let Some(e) = self.entries.get(id) else { return Offered::Unknown };
        if e.sent_to.contains(to) {
            return Offered::Sent;
        }
        let item = e.item.clone();
        if covering.holds()
            && let Some(cover) = self.cover_at(id, &item, to)
        {
            if let Some(e) = self.entries.get_mut(id) {
                e.held.insert(to.clone());
            }
            return Offered::Held(cover);
        }
        let Some(e) = self.entries.get_mut(id) else { return Offered::Unknown };
        e.held.remove(to);
        e.sent_to.insert(to.clone());
        out.push(Output::ToBroker { to: to.clone(), message: K::announce(id, e) });
        if covering.withdraws() {
            let hop = Hop::Broker(to.clone());
            let covered =
                self.select(|e| e.last != hop && e.sent_to.contains(to) && K::covers(&item, &e.item));
            for other in covered.into_iter().filter(|other| other != id) {
                if let Some(e) = self.entries.get_mut(&other) {
                    e.sent_to.remove(to);
                    e.held.insert(to.clone());
                }
                out.push(Output::ToBroker { to: to.clone(), message: K::retract(&other) });
            }
        }
        Offered::Sent
    }

    /// The smallest id of an entry sent to `to`, from elsewhere, that covers `item`.
    fn cover_at(&self, id: &MessageId, item: &K::Item, to: &Name) -> Option<MessageId> {
        let hop = Hop::Broker(to.clone());
        self.entries
            .iter()
            .filter(|(other, e)| {
                *other != id && e.last != hop && e.sent_to.contains(to) && K::covers(&e.item, item)
            })
            .map(|(other, _)| other)
            .min()
            .cloned()
    }

    /// Offers again, in a stable order, the entries held back at `to`.
    pub(super) fn release_held(&mut self, covering: Covering, to: &Name, out: &mut Vec<Output>) {
        for id in self.select(|e| e.held.contains(to)) {
            if let Some(e) = self.entries.get_mut(&id) {
                e.held.remove(to);
            }
            self.offer(covering, &id, to, out);
        }
    }

    /// Removes entry `id`, withdrawing it with `withdrawal` from every neighbour it was
    /// sent to, after what it held back there.
    pub(super) fn remove(
        &mut self,
        covering: Covering,
        id: &MessageId,
        withdrawal: impl Fn() -> BrokerMessage,
        out: &mut Vec<Output>,
    ) -> Option<Entry<K::Item>> {
        let e = self.entries.remove(id)?;
        for to in &e.sent_to {
            if covering.holds() {
                self.release_held(covering, to, out);
            }
            out.push(Output::ToBroker { to: to.clone(), message: withdrawal() });
        }
        Some(e)
    }

    /// Neighbour `name` is gone: nothing is sent to or held back from it any more.
    pub(super) fn forget_neighbour(&mut self, name: &Name) {
        for e in self.entries.values_mut() {
            e.sent_to.remove(name);
            e.held.remove(name);
        }
    }
}
