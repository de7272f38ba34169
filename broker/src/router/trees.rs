//! Per-advertisement spanning trees, for overlays with cycles.
//!
//! In a cyclic overlay an advertisement still floods once per broker (duplicates are
//! dropped by id), and the hop it first arrived from at each broker defines *its* spanning
//! tree. A subscription is routed along the tree of every advertisement it overlaps,
//! tagged with that tree; a publication travels on the tree of the advertisement it
//! conforms to, tagged too, and each broker matches it only against the subscriptions of
//! that tree. One tree has one path between two brokers, so every subscriber gets a
//! publication exactly once.
//!
//! An entry counts the hops it came from: while a tree moves to a shorter path, the same
//! subscription can arrive along the new path before it is withdrawn along the old one,
//! and it must stay until every hop that sent it has withdrawn it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use padres_lang::{MessageId, Name, Publication, Subscription};

use super::{ClientId, Hop};
use crate::matching::{Scratch, SubscriptionIndex};

/// A subscription on one tree: the hops it came from and where it went.
#[derive(Debug)]
pub(super) struct TreeSub {
    pub(super) sub: Arc<Subscription>,
    pub(super) from: BTreeSet<Hop>,
    pub(super) sent_to: Option<Name>,
}

/// A tree entry that changed next broker: `(id, subscription, old next, new next)`.
pub(super) type Moved = (MessageId, Arc<Subscription>, Option<Name>, Option<Name>);

/// The next broker toward `root`, unless the entry came from there.
fn toward(root: &Hop, from: &BTreeSet<Hop>) -> Option<Name> {
    match root {
        Hop::Broker(b) if !from.contains(root) => Some(b.clone()),
        _ => None,
    }
}

#[derive(Debug, Default)]
struct Tree {
    index: SubscriptionIndex<MessageId>,
    subs: HashMap<MessageId, TreeSub>,
}

/// The subscriptions of every tree at one broker.
#[derive(Debug, Default)]
pub(super) struct Trees {
    trees: HashMap<MessageId, Tree>,
}

/// Where a publication goes next: brokers, and clients with their matching
/// subscriptions.
#[derive(Debug, Default)]
pub(super) struct Next {
    pub(super) brokers: BTreeSet<Name>,
    pub(super) clients: BTreeMap<ClientId, Vec<MessageId>>,
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
        }
    }
}

impl Trees {
    /// Files subscription `id` on `tree` (whose advertisement came from `root`), from
    /// `last`; returns the broker to forward it to, if it is new and the tree continues.
    pub(super) fn add(
        &mut self,
        tree: &MessageId,
        root: &Hop,
        id: &MessageId,
        sub: &Arc<Subscription>,
        last: Hop,
    ) -> Option<Name> {
        let t = self.trees.entry(tree.clone()).or_default();
        if let Some(e) = t.subs.get_mut(id) {
            e.from.insert(last);
            return None;
        }
        let from = BTreeSet::from([last]);
        let sent_to = toward(root, &from);
        t.index.insert(id.clone(), sub.clone());
        t.subs.insert(id.clone(), TreeSub { sub: sub.clone(), from, sent_to: sent_to.clone() });
        sent_to
    }

    /// Hop `hop` withdraws `id` from `tree`; returns the entry if nothing else holds it.
    pub(super) fn leave(&mut self, tree: &MessageId, id: &MessageId, hop: &Hop) -> Option<TreeSub> {
        let t = self.trees.get_mut(tree)?;
        let e = t.subs.get_mut(id)?;
        if !e.from.remove(hop) || !e.from.is_empty() {
            return None;
        }
        t.index.remove(id);
        t.subs.remove(id)
    }

    /// Removes subscription `id` from `tree` whoever holds it.
    pub(super) fn remove(&mut self, tree: &MessageId, id: &MessageId) -> Option<TreeSub> {
        let t = self.trees.get_mut(tree)?;
        t.index.remove(id);
        t.subs.remove(id)
    }

    /// The trees `id` is on.
    pub(super) fn trees_of(&self, id: &MessageId) -> Vec<MessageId> {
        let mut trees: Vec<MessageId> = self
            .trees
            .iter()
            .filter(|(_, t)| t.subs.contains_key(id))
            .map(|(tree, _)| tree.clone())
            .collect();
        trees.sort();
        trees
    }

    /// Forgets a tree whose advertisement is gone (every broker forgets it too).
    pub(super) fn drop_tree(&mut self, tree: &MessageId) {
        self.trees.remove(tree);
    }

    /// Every `(tree, subscription)` held by `hop`, sorted.
    pub(super) fn held_by(&self, hop: &Hop) -> Vec<(MessageId, MessageId)> {
        self.select(|e| e.from.contains(hop))
    }

    /// Every `(tree, subscription)` whose entry satisfies `pick`, sorted.
    fn select(&self, pick: impl Fn(&TreeSub) -> bool) -> Vec<(MessageId, MessageId)> {
        let mut out: Vec<(MessageId, MessageId)> = self
            .trees
            .iter()
            .flat_map(|(tree, t)| {
                t.subs.iter().filter(|(_, e)| pick(e)).map(move |(id, _)| (tree.clone(), id.clone()))
            })
            .collect();
        out.sort();
        out
    }

    /// Moves `tree` to a new parent hop: every entry's next broker becomes `parent`
    /// (none for entries that came from it). Returns `(id, sub, old next, new next)` for
    /// the entries that changed.
    pub(super) fn reroute(&mut self, tree: &MessageId, parent: &Hop) -> Vec<Moved> {
        let Some(t) = self.trees.get_mut(tree) else { return Vec::new() };
        let mut changed = Vec::new();
        for (id, e) in &mut t.subs {
            let next = toward(parent, &e.from);
            if next != e.sent_to {
                let old = std::mem::replace(&mut e.sent_to, next.clone());
                changed.push((id.clone(), e.sub.clone(), old, next));
            }
        }
        changed.sort_by(|a, b| a.0.cmp(&b.0));
        changed
    }

    /// The entries of `tree` not sent anywhere, now sent to `parent` (its link is back).
    pub(super) fn resend(&mut self, tree: &MessageId, parent: &Name) -> Vec<(MessageId, Arc<Subscription>)> {
        let Some(t) = self.trees.get_mut(tree) else { return Vec::new() };
        let from_parent = Hop::Broker(parent.clone());
        let mut out = Vec::new();
        for (id, e) in &mut t.subs {
            if e.sent_to.is_none() && !e.from.contains(&from_parent) {
                e.sent_to = Some(parent.clone());
                out.push((id.clone(), e.sub.clone()));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Stops forwarding anything to `broker` (its link is gone).
    pub(super) fn forget_hop(&mut self, broker: &Name) {
        for t in self.trees.values_mut() {
            for e in t.subs.values_mut() {
                if e.sent_to.as_ref() == Some(broker) {
                    e.sent_to = None;
                }
            }
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
                for from in &e.from {
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
