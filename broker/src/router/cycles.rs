//! Cyclic overlays: per-advertisement spanning trees.
//!
//! In a cyclic overlay an advertisement still floods once per broker (duplicates are
//! dropped by id), and the hop it first arrived from at each broker defines *its* spanning
//! tree. A subscription is routed along the tree of every advertisement it overlaps,
//! tagged with that tree; a publication travels on the tree of the advertisement it
//! conforms to, tagged too, and each broker matches it only against the subscriptions of
//! that tree. One tree has one path between two brokers, so every subscriber gets a
//! publication exactly once; while a tree moves (a shorter path, or a new flood after a
//! link was lost: `mod.rs`), a broker drops a publication of the tree numbered no later
//! than one it routed already ([`Cycles::first_arrival`]).
//!
//! A tree entry counts the hops it came from: while a tree moves to a shorter path, the
//! same subscription can arrive along the new path before it is withdrawn along the old
//! one, and it stays until every hop that sent it has withdrawn it. Where an entry should
//! go (toward the tree's root, unless it came from there, and only over a link that is
//! up) is decided in one place, [`Cycles::reconcile`], after anything that changes it.
//!
//! Covering works per tree with the rule of `covering.rs`: an entry is held back from the
//! next broker when another entry of the same tree already sent there covers it, and
//! offered again when that one leaves. Advertisements are not covered here: each defines
//! a tree of its own, and a publication can only travel on its own advertisement's tree.
//!
//! The decisions above are made tree by tree, a copy each; [`coalesce`] then sends the
//! copies of one subscription to one neighbour in one message, so that a subscription
//! overlapping many advertisements costs a message per link it takes, not per tree.
//! Each copy is still answered and withdrawn on its own tree.
//!
//! Owner withdrawals are remembered (late copies of a withdrawn advertisement still
//! circling are dropped); the memory is not pruned yet.
//!
//! Memory: a broker holds an entry per subscription per tree through it, so entries are
//! kept small. The hops an entry came from (nearly always one) sit inline ([`Hops`]), and
//! the entries of one subscription on many trees share one decoded copy of it
//! ([`Shared`]), however many messages brought it. On a hub of 100 real brokers
//! (`BENCHMARKS.md`, "Where a hub's memory goes"), a set per entry and a copy per message
//! took about 11 of its 30 MB of heap.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use smallvec::SmallVec;

use padres_lang::wire::{BrokerMessage, Forwarded};
use padres_lang::{MessageId, Name, Publication, Stamp, Subscription, covers};

use super::composite::DetectorInputs;
use super::covering::Covering;
use super::{ClientId, Hop, Output};
use crate::matching::{Scratch, SubscriptionIndex};

/// A subscription on one tree: the hops it came from and where it went.
#[derive(Debug)]
struct TreeSub {
    sub: Arc<Subscription>,
    from: Hops,
    /// The neighbour it was sent to.
    sent_to: Option<Name>,
    /// The neighbour it is held back from, covered by an entry sent there.
    held: Option<Name>,
}

/// The hops a tree entry came from, in order, without duplicates. Nearly always one, held
/// inline: a set's heap node (about 230 bytes) per entry was the largest part of a
/// hub's tables.
#[derive(Debug)]
struct Hops(SmallVec<[Hop; 1]>);

impl Hops {
    fn one(hop: Hop) -> Self {
        Self(SmallVec::from_buf([hop]))
    }

    fn insert(&mut self, hop: Hop) {
        if let Err(at) = self.0.binary_search(&hop) {
            self.0.insert(at, hop);
        }
    }

    /// Removes `hop`; false if it was not there.
    fn remove(&mut self, hop: &Hop) -> bool {
        let Ok(at) = self.0.binary_search(hop) else { return false };
        self.0.remove(at);
        // Back inline once one is left.
        self.0.shrink_to_fit();
        true
    }

    fn contains(&self, hop: &Hop) -> bool {
        self.0.binary_search(hop).is_ok()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &Hop> {
        self.0.iter()
    }
}

/// One decoded copy of each subscription on the trees, shared by its entries. Each
/// `TreeSubscribe` brings its own copy, and one subscription comes in many messages (from
/// each neighbour, tree batch by tree batch); kept per entry, those copies outnumbered the
/// subscriptions many times over.
#[derive(Debug, Default)]
struct Shared(HashMap<MessageId, (Arc<Subscription>, usize)>);

impl Shared {
    /// The copy of `id` for a new entry: the one held if it says the same as `sub`.
    fn take(&mut self, id: &MessageId, sub: &Arc<Subscription>) -> Arc<Subscription> {
        match self.0.get_mut(id) {
            // (The copies of one message share their Arc: compared without reading them.)
            Some((kept, entries)) if Arc::ptr_eq(kept, sub) || kept == sub => {
                *entries += 1;
                kept.clone()
            }
            Some(_) => sub.clone(),
            None => {
                self.0.insert(id.clone(), (sub.clone(), 1));
                sub.clone()
            }
        }
    }

    /// An entry holding `sub` as `id` is gone.
    fn release(&mut self, id: &MessageId, sub: &Arc<Subscription>) {
        if let Some((kept, entries)) = self.0.get_mut(id)
            && Arc::ptr_eq(kept, sub)
        {
            *entries -= 1;
            if *entries == 0 {
                self.0.remove(id);
            }
        }
    }
}

#[derive(Debug)]
struct Tree {
    /// The hop toward the advertiser.
    root: Hop,
    index: SubscriptionIndex<MessageId>,
    subs: HashMap<MessageId, TreeSub>,
    /// The stamp number of the last publication routed on it: its publications all come
    /// from the advertiser's broker, numbered in the order published.
    last_seq: Option<u64>,
}

/// What tree decisions depend on besides the trees.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ctx<'a> {
    pub(super) covering: Covering,
    pub(super) neighbours: &'a BTreeSet<Name>,
}

/// A copy offered to a neighbour: `(the copy, the copy its settling waits for, the
/// neighbour)`; the two differ when it is held back behind a cover.
pub(super) type Awaited = (Forwarded, Forwarded, Name);

/// The cyclic overlay's state at one broker.
#[derive(Debug, Default)]
pub(super) struct Cycles {
    trees: HashMap<MessageId, Tree>,
    /// Advertisements withdrawn by their owners, so late copies still travelling round a
    /// loop are not installed again.
    withdrawn: HashSet<MessageId>,
    /// Per tree, the highest epoch a repair was asked for or passed on by this broker.
    repairs: HashMap<MessageId, u32>,
    shared: Shared,
}

/// Where a publication goes next: brokers, and clients with their matching
/// subscriptions.
#[derive(Debug, Default)]
pub(super) struct Next {
    pub(super) brokers: BTreeSet<Name>,
    pub(super) clients: BTreeMap<ClientId, Vec<MessageId>>,
    /// Subscriptions of this broker's composite detectors, by id...
    pub(super) detected: Vec<MessageId>,
    /// ...or by what they feed.
    pub(super) inputs: DetectorInputs,
    /// This broker's history store keeps it.
    pub(super) stored: bool,
}

impl Next {
    /// Adds subscription `id`, which came from `from`, unless that is where the
    /// publication came from (`last`).
    pub(super) fn add(&mut self, id: &MessageId, from: &Hop, last: &Hop) {
        if from == last {
            return;
        }
        match from {
            Hop::Client(c) => self.clients.entry(*c).or_default().push(id.clone()),
            Hop::Broker(b) => {
                self.brokers.insert(b.clone());
            }
            Hop::Detector => self.detected.push(id.clone()),
            Hop::History => self.stored = true,
        }
    }
}

fn tree_key(id: &MessageId, tree: &MessageId) -> Forwarded {
    Forwarded::TreeSubscription { id: id.clone(), tree: tree.clone() }
}

impl Cycles {
    /// True if advertisement `id` was withdrawn by its owner.
    pub(super) fn is_withdrawn(&self, id: &MessageId) -> bool {
        self.withdrawn.contains(id)
    }

    /// Remembers that advertisement `id` was withdrawn by its owner; false if known.
    pub(super) fn remember_withdrawn(&mut self, id: MessageId) -> bool {
        self.withdrawn.insert(id)
    }

    /// A new advertisement's tree, rooted toward `root`.
    pub(super) fn plant(&mut self, tree: MessageId, root: Hop) {
        let index = SubscriptionIndex::new();
        // (A tree is planted once per advertisement; one planted again lets go of its
        // entries as a dropped one does.)
        if let Some(old) = self.trees.insert(tree, Tree { root, index, subs: HashMap::new(), last_seq: None })
        {
            for (id, e) in &old.subs {
                self.shared.release(id, &e.sub);
            }
        }
    }

    /// Forgets a tree whose advertisement is gone (every broker forgets it too).
    pub(super) fn drop_tree(&mut self, tree: &MessageId) {
        if let Some(t) = self.trees.remove(tree) {
            for (id, e) in &t.subs {
                self.shared.release(id, &e.sub);
            }
        }
        self.repairs.remove(tree);
    }

    /// True the first time a repair of `tree`'s path in flood `epoch` is asked for or
    /// passed on here: a request floods once per broker.
    pub(super) fn repair_requested(&mut self, tree: &MessageId, epoch: u32) -> bool {
        match self.repairs.get(tree) {
            Some(done) if *done >= epoch => false,
            _ => {
                self.repairs.insert(tree.clone(), epoch);
                true
            }
        }
    }

    /// The repairs asked for or passed on here, by tree: the epoch of the path lost.
    pub(super) fn repairs(&self) -> Vec<(MessageId, u32)> {
        let mut repairs: Vec<(MessageId, u32)> = self.repairs.iter().map(|(t, e)| (t.clone(), *e)).collect();
        repairs.sort();
        repairs
    }

    /// True unless a publication of `tree` numbered as late as `stamp` was routed here
    /// already: while a tree moves to a new path, a copy can come over both, or an older
    /// one over the old path after a newer one over the new; either is dropped, so a
    /// publication is delivered at most once.
    pub(super) fn first_arrival(&mut self, tree: &MessageId, stamp: &Stamp) -> bool {
        let Some(t) = self.trees.get_mut(tree) else { return true };
        if stamp.origin != tree.origin {
            return true;
        }
        if t.last_seq.is_some_and(|seq| seq >= stamp.seq) {
            return false;
        }
        t.last_seq = Some(stamp.seq);
        true
    }

    /// Files subscription `id` on `tree`, from `from`, and forwards it if it must go on.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add(
        &mut self,
        ctx: Ctx<'_>,
        tree: &MessageId,
        id: &MessageId,
        sub: &Arc<Subscription>,
        from: Hop,
        out: &mut Vec<Output>,
        awaited: &mut Vec<Awaited>,
    ) {
        let Some(t) = self.trees.get_mut(tree) else { return };
        if let Some(e) = t.subs.get_mut(id) {
            e.from.insert(from);
        } else {
            let sub = self.shared.take(id, sub);
            t.index.insert(id.clone(), sub.clone());
            t.subs.insert(id.clone(), TreeSub { sub, from: Hops::one(from), sent_to: None, held: None });
        }
        Self::reconcile(ctx, tree, t, id, out, awaited);
    }

    /// Hop `hop` withdraws `id` from `tree`; the entry goes when no hop holds it.
    pub(super) fn leave(
        &mut self,
        ctx: Ctx<'_>,
        tree: &MessageId,
        id: &MessageId,
        hop: &Hop,
        out: &mut Vec<Output>,
    ) {
        let Some(t) = self.trees.get_mut(tree) else { return };
        let Some(e) = t.subs.get_mut(id) else { return };
        if !e.from.remove(hop) {
            return;
        }
        if e.from.is_empty() {
            Self::remove_entry(ctx, tree, t, id, &mut self.shared, out);
        } else {
            Self::reconcile(ctx, tree, t, id, out, &mut Vec::new());
        }
    }

    /// Removes subscription `id` from every tree, whoever holds it.
    pub(super) fn remove_everywhere(&mut self, ctx: Ctx<'_>, id: &MessageId, out: &mut Vec<Output>) {
        let mut trees: Vec<&MessageId> =
            self.trees.iter().filter(|(_, t)| t.subs.contains_key(id)).map(|(k, _)| k).collect();
        trees.sort();
        let trees: Vec<MessageId> = trees.into_iter().cloned().collect();
        for tree in trees {
            if let Some(t) = self.trees.get_mut(&tree) {
                Self::remove_entry(ctx, &tree, t, id, &mut self.shared, out);
            }
        }
    }

    /// Moves `tree` onto a new parent hop: entries leave the old parent for the new one.
    pub(super) fn reroute(&mut self, ctx: Ctx<'_>, tree: &MessageId, root: Hop, out: &mut Vec<Output>) {
        let Some(t) = self.trees.get_mut(tree) else { return };
        t.root = root;
        Self::reconcile_all(ctx, tree, t, out);
    }

    /// A link is up: entries that should go over it are offered to it.
    pub(super) fn neighbour_up(&mut self, ctx: Ctx<'_>, out: &mut Vec<Output>) {
        for tree in self.sorted_trees() {
            if let Some(t) = self.trees.get_mut(&tree) {
                Self::reconcile_all(ctx, &tree, t, out);
            }
        }
    }

    /// A link is down: nothing is sent or held back there, and what came from there goes.
    /// `ctx.neighbours` no longer has it.
    pub(super) fn neighbour_down(&mut self, ctx: Ctx<'_>, name: &Name, out: &mut Vec<Output>) {
        for t in self.trees.values_mut() {
            for e in t.subs.values_mut() {
                if e.sent_to.as_ref() == Some(name) {
                    e.sent_to = None;
                }
                if e.held.as_ref() == Some(name) {
                    e.held = None;
                }
            }
        }
        let hop = Hop::Broker(name.clone());
        for tree in self.sorted_trees() {
            let Some(t) = self.trees.get(&tree) else { continue };
            let mut ids: Vec<MessageId> =
                t.subs.iter().filter(|(_, e)| e.from.contains(&hop)).map(|(id, _)| id.clone()).collect();
            ids.sort();
            for id in ids {
                self.leave(ctx, &tree, &id, &hop, out);
            }
        }
    }

    fn sorted_trees(&self) -> Vec<MessageId> {
        let mut trees: Vec<MessageId> = self.trees.keys().cloned().collect();
        trees.sort();
        trees
    }

    fn reconcile_all(ctx: Ctx<'_>, tree: &MessageId, t: &mut Tree, out: &mut Vec<Output>) {
        let mut ids: Vec<MessageId> = t.subs.keys().cloned().collect();
        ids.sort();
        for id in ids {
            Self::reconcile(ctx, tree, t, &id, out, &mut Vec::new());
        }
    }

    /// Brings entry `id` where it belongs: toward the root unless it came from there, over
    /// a link that is up, or held back there by a cover. On a move it is offered to the
    /// new parent before it is withdrawn from the old one, so the root never lacks it.
    fn reconcile(
        ctx: Ctx<'_>,
        tree: &MessageId,
        t: &mut Tree,
        id: &MessageId,
        out: &mut Vec<Output>,
        awaited: &mut Vec<Awaited>,
    ) {
        let Some(e) = t.subs.get_mut(id) else { return };
        let desired = match &t.root {
            Hop::Broker(b) if !e.from.contains(&t.root) && ctx.neighbours.contains(b) => Some(b.clone()),
            _ => None,
        };
        if e.held.is_some() && e.held != desired {
            e.held = None;
        }
        let old = if e.sent_to == desired { None } else { e.sent_to.take() };
        let (sent, held) = (e.sent_to.clone(), e.held.is_some());
        if let Some(to) = desired {
            if sent.as_ref() == Some(&to) {
                // Sent already; a copy still unanswered is waited for.
                awaited.push((tree_key(id, tree), tree_key(id, tree), to));
            } else if !held {
                Self::offer(ctx, tree, t, id, &to, out, awaited);
            }
        }
        if let Some(old) = old {
            Self::withdraw(ctx, tree, t, id, &old, out);
        }
    }

    /// Sends entry `id` to `to`, or holds it back if covered there.
    fn offer(
        ctx: Ctx<'_>,
        tree: &MessageId,
        t: &mut Tree,
        id: &MessageId,
        to: &Name,
        out: &mut Vec<Output>,
        awaited: &mut Vec<Awaited>,
    ) {
        let Some(sub) = t.subs.get(id).map(|e| e.sub.clone()) else { return };
        let sent_there = |e: &TreeSub| e.sent_to.as_ref() == Some(to);
        if ctx.covering.holds() {
            let cover = t
                .subs
                .iter()
                .filter(|(other, e)| *other != id && sent_there(e) && covers(&e.sub, &sub))
                .map(|(other, _)| other)
                .min()
                .cloned();
            if let Some(cover) = cover {
                if let Some(e) = t.subs.get_mut(id) {
                    e.held = Some(to.clone());
                }
                awaited.push((tree_key(id, tree), tree_key(&cover, tree), to.clone()));
                return;
            }
        }
        if let Some(e) = t.subs.get_mut(id) {
            e.sent_to = Some(to.clone());
        }
        awaited.push((tree_key(id, tree), tree_key(id, tree), to.clone()));
        let message =
            BrokerMessage::TreeSubscribe { id: id.clone(), trees: vec![tree.clone()], sub: sub.clone() };
        out.push(Output::ToBroker { to: to.clone(), message });
        if ctx.covering.withdraws() {
            let mut covered: Vec<MessageId> = t
                .subs
                .iter()
                .filter(|(other, e)| *other != id && sent_there(e) && covers(&sub, &e.sub))
                .map(|(other, _)| other.clone())
                .collect();
            covered.sort();
            for other in covered {
                if let Some(e) = t.subs.get_mut(&other) {
                    e.sent_to = None;
                    e.held = Some(to.clone());
                }
                let message = BrokerMessage::TreeUnsubscribe { id: other, trees: vec![tree.clone()] };
                out.push(Output::ToBroker { to: to.clone(), message });
            }
        }
    }

    /// Entry `id` no longer goes to `old` (its `sent_to` is cleared already): what it held
    /// back there is offered first, then it is withdrawn, so `old` never lacks either.
    fn withdraw(
        ctx: Ctx<'_>,
        tree: &MessageId,
        t: &mut Tree,
        id: &MessageId,
        old: &Name,
        out: &mut Vec<Output>,
    ) {
        if ctx.covering.holds() {
            let mut held: Vec<MessageId> = t
                .subs
                .iter()
                .filter(|(other, e)| *other != id && e.held.as_ref() == Some(old))
                .map(|(other, _)| other.clone())
                .collect();
            held.sort();
            for other in held {
                if let Some(e) = t.subs.get_mut(&other) {
                    e.held = None;
                }
                // Placed again: sent to `old` unless it now belongs elsewhere.
                Self::reconcile(ctx, tree, t, &other, out, &mut Vec::new());
            }
        }
        if ctx.neighbours.contains(old) {
            let message = BrokerMessage::TreeUnsubscribe { id: id.clone(), trees: vec![tree.clone()] };
            out.push(Output::ToBroker { to: old.clone(), message });
        }
    }

    fn remove_entry(
        ctx: Ctx<'_>,
        tree: &MessageId,
        t: &mut Tree,
        id: &MessageId,
        shared: &mut Shared,
        out: &mut Vec<Output>,
    ) {
        t.index.remove(id);
        let Some(e) = t.subs.remove(id) else { return };
        shared.release(id, &e.sub);
        if let Some(old) = e.sent_to {
            Self::withdraw(ctx, tree, t, id, &old, out);
        }
    }

    /// The next hops of `publication` on `tree`, never back to `last`.
    pub(super) fn route(
        &self,
        tree: &MessageId,
        publication: &Publication,
        last: &Hop,
        scratch: &mut Scratch,
    ) -> Next {
        let mut next = Next::default();
        let Some(t) = self.trees.get(tree) else { return next };
        let mut matched = Vec::new();
        t.index.matches_into(publication, scratch, &mut matched);
        for id in matched {
            if let Some(e) = t.subs.get(&id) {
                for from in e.from.iter() {
                    next.add(&id, from, last);
                }
            }
        }
        next
    }

    /// `(tree, subscription, text, from, sent to)` for the routes snapshot, one row per
    /// hop an entry came from.
    pub(super) fn entries(&self) -> Vec<(MessageId, MessageId, String, Hop, Option<Name>)> {
        let mut out: Vec<_> = self
            .trees
            .iter()
            .flat_map(|(tree, t)| {
                t.subs.iter().flat_map(move |(id, e)| {
                    e.from.iter().map(move |from| {
                        (tree.clone(), id.clone(), e.sub.to_string(), from.clone(), e.sent_to.clone())
                    })
                })
            })
            .collect();
        out.sort();
        out
    }
}

/// Estimated encoded bytes of tree ids `trees` (each a name, its length and a number).
fn ids_bytes(trees: &[MessageId]) -> usize {
    trees.iter().map(|t| t.origin.as_str().len() + 12).sum()
}

/// The tree messages [`coalesce`] joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Joined {
    Subscribe,
    Unsubscribe,
    Settled,
}

/// What [`coalesce`] sees of `message`: its kind, subscription and trees.
fn joinable(message: &mut BrokerMessage) -> Option<(Joined, &MessageId, &mut Vec<MessageId>)> {
    match message {
        BrokerMessage::TreeSubscribe { id, trees, .. } => Some((Joined::Subscribe, id, trees)),
        BrokerMessage::TreeUnsubscribe { id, trees } => Some((Joined::Unsubscribe, id, trees)),
        BrokerMessage::TreesSettled { id, trees } => Some((Joined::Settled, id, trees)),
        _ => None,
    }
}

/// Joins the tree messages of one subscription to one neighbour among `out[start..]`, of
/// one kind, into one message: [`BrokerMessage::TreeSubscribe`]s where the first of them
/// is; withdrawals ([`BrokerMessage::TreeUnsubscribe`]) and answers
/// ([`BrokerMessage::TreesSettled`]) where the last is; with at most `max_bytes` of tree ids
/// in each. A message only moves past tree messages of other subscriptions to the same
/// neighbour: so a subscription arrives no later, and is withdrawn or answered no sooner,
/// than it was decided, and different kinds for one subscription keep their order.
pub(super) fn coalesce(out: &mut Vec<Output>, start: usize, max_bytes: usize) {
    let tree_messages = out[start..]
        .iter_mut()
        .filter_map(|o| match o {
            Output::ToBroker { message, .. } => joinable(message),
            _ => None,
        })
        .count();
    if tree_messages < 2 {
        return;
    }
    let mut slots: Vec<Option<Output>> = out.drain(start..).map(Some).collect();
    let n = slots.len();
    join(&mut slots, 0..n, &[Joined::Subscribe], max_bytes);
    join(&mut slots, (0..n).rev(), &[Joined::Unsubscribe, Joined::Settled], max_bytes);
    out.extend(slots.into_iter().flatten());
}

/// One pass of [`coalesce`] in `order`, joining messages of the kinds `kinds`.
fn join(
    slots: &mut [Option<Output>],
    order: impl Iterator<Item = usize>,
    kinds: &[Joined],
    max_bytes: usize,
) {
    // Per neighbour, per kind and subscription: the message others join, and its ids' bytes.
    type Open = HashMap<(Joined, MessageId), (usize, usize)>;
    let mut open: HashMap<Name, Open> = HashMap::new();
    for i in order {
        let Some(Output::ToBroker { to, message }) = &mut slots[i] else { continue };
        let Some((kind, id, trees)) = joinable(message) else {
            // Nothing moves past another message to this neighbour.
            open.remove(to);
            continue;
        };
        let joined = open.entry(to.clone()).or_default();
        if !kinds.contains(&kind) {
            // Nor past another kind of tree message for the same subscription.
            joined.retain(|(_, other), _| other != id);
            continue;
        }
        let bytes = ids_bytes(trees);
        let key = (kind, id.clone());
        match joined.get_mut(&key) {
            Some((j, total)) if *total + bytes <= max_bytes => {
                *total += bytes;
                let more = std::mem::take(trees);
                let j = *j;
                slots[i] = None;
                if let Some(Output::ToBroker { message, .. }) = &mut slots[j]
                    && let Some((_, _, trees)) = joinable(message)
                {
                    trees.extend(more);
                }
            }
            _ => {
                joined.insert(key, (i, bytes));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> MessageId {
        MessageId::new(Name::new("B1").expect("name"), seq)
    }

    fn to(name: &str) -> Name {
        Name::new(name).expect("name")
    }

    fn sub(who: u64, tree: u64, neighbour: &str) -> Output {
        let sub = Arc::new("[class,eq,'a']".parse().expect("subscription"));
        let message = BrokerMessage::TreeSubscribe { id: id(who), trees: vec![id(tree)], sub };
        Output::ToBroker { to: to(neighbour), message }
    }

    fn unsub(who: u64, tree: u64, neighbour: &str) -> Output {
        let message = BrokerMessage::TreeUnsubscribe { id: id(who), trees: vec![id(tree)] };
        Output::ToBroker { to: to(neighbour), message }
    }

    /// `(kind, neighbour, subscription, trees)` of each message, in order.
    fn shape(out: &[Output]) -> Vec<(&'static str, String, u64, Vec<u64>)> {
        out.iter()
            .map(|o| match o {
                Output::ToBroker { to, message: BrokerMessage::TreeSubscribe { id, trees, .. } } => {
                    ("sub", to.to_string(), id.seq, trees.iter().map(|t| t.seq).collect())
                }
                Output::ToBroker { to, message: BrokerMessage::TreeUnsubscribe { id, trees } } => {
                    ("unsub", to.to_string(), id.seq, trees.iter().map(|t| t.seq).collect())
                }
                Output::ToBroker { to, message: BrokerMessage::TreesSettled { id, trees } } => {
                    ("settled", to.to_string(), id.seq, trees.iter().map(|t| t.seq).collect())
                }
                Output::ToBroker { to, .. } => ("other", to.to_string(), 0, Vec::new()),
                _ => ("local", String::new(), 0, Vec::new()),
            })
            .collect()
    }

    fn coalesced(mut out: Vec<Output>, max_bytes: usize) -> Vec<(&'static str, String, u64, Vec<u64>)> {
        coalesce(&mut out, 0, max_bytes);
        shape(&out)
    }

    #[test]
    fn copies_of_one_subscription_to_one_neighbour_join_where_the_first_was() {
        let out =
            vec![sub(1, 10, "B2"), sub(2, 10, "B2"), sub(1, 11, "B2"), sub(1, 12, "B3"), sub(1, 13, "B2")];
        assert_eq!(
            coalesced(out, 1 << 10),
            [
                ("sub", "B2".into(), 1, vec![10, 11, 13]),
                ("sub", "B2".into(), 2, vec![10]),
                ("sub", "B3".into(), 1, vec![12]),
            ]
        );
    }

    #[test]
    fn withdrawals_join_where_the_last_was_so_a_cover_arrives_first() {
        // Active covering: the cover goes, then what it covers is withdrawn.
        let out = vec![unsub(2, 10, "B2"), sub(1, 10, "B2"), unsub(2, 11, "B2")];
        assert_eq!(
            coalesced(out, 1 << 10),
            [("sub", "B2".into(), 1, vec![10]), ("unsub", "B2".into(), 2, vec![11, 10])]
        );
    }

    #[test]
    fn nothing_moves_past_the_other_kind_for_the_same_subscription_or_another_message() {
        let settled = Output::ToBroker {
            to: to("B2"),
            message: BrokerMessage::Settled { what: Forwarded::Advertisement(id(9)) },
        };
        let out = vec![sub(1, 10, "B2"), unsub(1, 11, "B2"), sub(1, 11, "B2"), settled, sub(1, 12, "B2")];
        assert_eq!(
            coalesced(out, 1 << 10),
            [
                ("sub", "B2".into(), 1, vec![10]),
                ("unsub", "B2".into(), 1, vec![11]),
                ("sub", "B2".into(), 1, vec![11]),
                ("other", "B2".into(), 0, vec![]),
                ("sub", "B2".into(), 1, vec![12]),
            ]
        );
    }

    #[test]
    fn answers_join_where_the_last_was() {
        let settled = |who: u64, tree: u64, neighbour: &str| Output::ToBroker {
            to: to(neighbour),
            message: BrokerMessage::TreesSettled { id: id(who), trees: vec![id(tree)] },
        };
        let out = vec![settled(1, 10, "B2"), sub(2, 10, "B2"), settled(1, 11, "B3"), settled(1, 12, "B2")];
        assert_eq!(
            coalesced(out, 1 << 10),
            [
                ("sub", "B2".into(), 2, vec![10]),
                ("settled", "B3".into(), 1, vec![11]),
                ("settled", "B2".into(), 1, vec![12, 10]),
            ]
        );
    }

    #[test]
    fn a_message_carries_at_most_the_bytes_of_ids_allowed() {
        // "B1" ids count 14 bytes each: two fit in 30.
        let out = (10..15).map(|t| sub(1, t, "B2")).collect();
        assert_eq!(
            coalesced(out, 30),
            [
                ("sub", "B2".into(), 1, vec![10, 11]),
                ("sub", "B2".into(), 1, vec![12, 13]),
                ("sub", "B2".into(), 1, vec![14]),
            ]
        );
    }

    /// Trees `10..10+n` rooted at neighbour B9, with subscription 1 (a copy of its own per
    /// tree, as from separate messages) filed on each from B2 and from a client.
    fn filed_on_trees(n: u64) -> (Cycles, BTreeSet<Name>) {
        let neighbours: BTreeSet<Name> = ["B2", "B9"].into_iter().map(to).collect();
        let ctx = Ctx { covering: Covering::Off, neighbours: &neighbours };
        let mut cycles = Cycles::default();
        let mut out = Vec::new();
        for tree in 10..10 + n {
            cycles.plant(id(tree), Hop::Broker(to("B9")));
            let copy: Arc<Subscription> = Arc::new("[class,eq,'a']".parse().expect("subscription"));
            for from in [Hop::Broker(to("B2")), Hop::Client(7)] {
                cycles.add(ctx, &id(tree), &id(1), &copy, from, &mut out, &mut Vec::new());
            }
        }
        (cycles, neighbours)
    }

    #[test]
    fn a_subscription_on_many_trees_is_held_once_and_let_go_with_its_last_entry() {
        let (mut cycles, neighbours) = filed_on_trees(3);
        let ctx = Ctx { covering: Covering::Off, neighbours: &neighbours };
        let first = cycles.trees[&id(10)].subs[&id(1)].sub.clone();
        for tree in 11..13 {
            let e = &cycles.trees[&id(tree)].subs[&id(1)];
            assert!(Arc::ptr_eq(&e.sub, &first), "tree {tree} keeps a copy of its own");
            assert_eq!(e.from.iter().cloned().collect::<Vec<_>>(), [Hop::Client(7), Hop::Broker(to("B2"))]);
        }
        let mut out = Vec::new();
        // One hop leaving keeps the entry; both leaving removes it.
        cycles.leave(ctx, &id(10), &id(1), &Hop::Client(7), &mut out);
        assert!(cycles.trees[&id(10)].subs[&id(1)].from.contains(&Hop::Broker(to("B2"))));
        cycles.leave(ctx, &id(10), &id(1), &Hop::Broker(to("B2")), &mut out);
        assert!(!cycles.trees[&id(10)].subs.contains_key(&id(1)));
        assert_eq!(cycles.shared.0[&id(1)].1, 2, "two trees still hold it");
        cycles.drop_tree(&id(11));
        cycles.remove_everywhere(ctx, &id(1), &mut out);
        assert!(cycles.shared.0.is_empty(), "kept after its last entry went: {:?}", cycles.shared);
        drop(cycles);
        assert_eq!(Arc::strong_count(&first), 1, "a copy outlived the trees");
    }

    #[test]
    fn another_subscription_under_a_known_id_is_kept_as_it_came() {
        let (mut cycles, neighbours) = filed_on_trees(1);
        let ctx = Ctx { covering: Covering::Off, neighbours: &neighbours };
        let other: Arc<Subscription> = Arc::new("[class,eq,'b']".parse().expect("subscription"));
        cycles.plant(id(20), Hop::Broker(to("B9")));
        cycles.add(ctx, &id(20), &id(1), &other, Hop::Broker(to("B2")), &mut Vec::new(), &mut Vec::new());
        assert!(Arc::ptr_eq(&cycles.trees[&id(20)].subs[&id(1)].sub, &other));
        // Its entry going does not let go of the shared one.
        cycles.drop_tree(&id(20));
        assert_eq!(cycles.shared.0[&id(1)].1, 1);
    }
}
