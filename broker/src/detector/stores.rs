//! Where one detector keeps its partial matches.
//!
//! Every node that stores (`&`, `;`, `Times`, and an `&` of leaves on one binding) keeps a
//! list per side of its children's matches, by key (the values of its join variables).
//! Nodes keyed by the same variables share one map, a binding's lists for all of them in
//! one bucket: in a workflow's dependency every join is on the generation id, so one lookup
//! finds, stores, or drops everything a generation has at the detector, instead of one per
//! node (the lookups are cache misses once a generation is a few thousand publications
//! old).
//!
//! A bucket holds its matches each tagged with its list (node and side), not a list per
//! node and side: a binding usually has a few matches among many lists (one per side of
//! each join of a pattern), and empty lists cost as much memory as the matches did.

use std::collections::BTreeSet;

use std::sync::Arc;

use smallvec::SmallVec;

use super::pattern::{Key, Pattern};
use super::{Partial, Stored};

/// One binding's stored matches for every list of the key class, each with its list's
/// number (the node's first list number + side: a node has a block of list numbers, one
/// per side); each list's matches in the order stored; the first inline.
type Bucket = SmallVec<[(u32, Stored); 1]>;

/// One side's stored matches for one binding (each with its list's number), in the order
/// stored: usually one (a generation's job status). The same type as a bucket, so a
/// bucket that holds one list only (a `Times` node's, or a join's without variables,
/// which can hold thousands) is taken out and put back whole.
pub(super) type List = Bucket;

/// Where a pattern's stored matches go: a property of the pattern alone, shared by every
/// detector of that pattern ([`Pattern::layout`]).
#[derive(Debug, Default, PartialEq)]
pub(super) struct Layout {
    /// Per node: (key class, its first list's number in the class), for the nodes that
    /// store.
    place: Vec<Option<(usize, u32)>>,
    /// Per key class: how to make its key from an `until` binding (the index in the
    /// filter's variables of each key slot), when its slots are exactly the filter's
    /// variables; `None` where it must be scanned instead.
    until_keys: Vec<Option<Vec<usize>>>,
}

impl Layout {
    pub(super) fn new(pattern: &Pattern) -> Self {
        let mut slots_of: Vec<Vec<usize>> = Vec::new();
        // How many lists each class has so far: the next node's first list number.
        let mut width: Vec<u32> = Vec::new();
        let place = (0..pattern.nodes.len())
            .map(|node| {
                let slots = pattern.key_slots(node)?;
                let class = slots_of.iter().position(|c| *c == slots).unwrap_or_else(|| {
                    slots_of.push(slots);
                    width.push(0);
                    slots_of.len() - 1
                });
                let base = width[class];
                // A pattern has at most 4,096 nodes (`Limits`), so list numbers fit.
                #[allow(clippy::cast_possible_truncation)]
                let sides = pattern.sides(node) as u32;
                width[class] += sides;
                Some((class, base))
            })
            .collect();
        let until: Vec<usize> = pattern.until_vars.iter().map(|&(_, s)| s).collect();
        // A slot twice in the key or the filter: scan.
        let distinct = |v: &[usize]| v.iter().collect::<BTreeSet<_>>().len() == v.len();
        let until_keys = slots_of
            .iter()
            .map(|slots| {
                if slots.len() == until.len() && distinct(slots) && distinct(&until) {
                    slots.iter().map(|k| until.iter().position(|u| u == k)).collect()
                } else {
                    None
                }
            })
            .collect();
        Self { place, until_keys }
    }
}

/// One binding's matches, for each binding of the nodes keyed by one list of slots
/// (foldhash, seeded per process: looked up for every input).
type KeyClass = foldhash::HashMap<Key, Bucket>;

#[derive(Debug)]
pub(super) struct Stores {
    /// The pattern, for its [`Layout`].
    pattern: Arc<Pattern>,
    /// By key class (a workflow's pattern has one: inline).
    classes: SmallVec<[KeyClass; 1]>,
}

impl Stores {
    pub(super) fn new(pattern: &Arc<Pattern>) -> Self {
        let classes = pattern.layout.until_keys.iter().map(|_| KeyClass::default()).collect();
        Self { pattern: pattern.clone(), classes }
    }

    /// How key class `class`'s key is made from an `until` binding, if it can be.
    pub(super) fn until_key(&self, class: usize) -> Option<&[usize]> {
        self.pattern.layout.until_keys[class].as_deref()
    }

    /// The key class and list number of `node`'s `side`.
    fn at(&self, node: usize, side: usize) -> (usize, u32) {
        let (class, base) = self.pattern.layout.place[node].expect("only storing nodes store");
        // A pattern has at most 4,096 nodes (`Limits`).
        #[allow(clippy::cast_possible_truncation)]
        (class, base + side as u32)
    }

    pub(super) fn push(&mut self, node: usize, side: usize, key: Key, stored: Stored) {
        let (class, list) = self.at(node, side);
        self.classes[class].entry(key).or_default().push((list, stored));
    }

    /// [`Self::push`] onto `node`'s `side`, and the other side's matches for the same key,
    /// with one lookup: copies of their handles when they are few (the bucket keeps them,
    /// and nothing is put back), else the list taken out, to be put back with
    /// [`Self::put_back`].
    pub(super) fn push_and_partners(
        &mut self,
        node: usize,
        side: usize,
        key: Key,
        stored: Stored,
    ) -> Partners {
        let (class, list) = self.at(node, side);
        let other = self.at(node, 1 - side).1;
        let bucket = self.classes[class].entry(key).or_default();
        bucket.push((list, stored));
        if bucket.iter().filter(|(l, _)| *l == other).count() <= SHARED_PARTNERS {
            Partners::Shared(
                bucket.iter().filter(|(l, _)| *l == other).map(|(_, s)| s.partial.clone()).collect(),
            )
        } else {
            Partners::Taken(take_list(bucket, other))
        }
    }

    /// [`Self::push`] onto side `side` of `node`, which has `sides` sides; if every other
    /// side has a stored match for `key`, returns every side's, in the order stored, with
    /// `partial` alone on its own side (what it pairs with, not what its side already held).
    pub(super) fn push_and_complete(
        &mut self,
        node: usize,
        side: usize,
        sides: usize,
        key: Key,
        stored: Stored,
    ) -> Option<Vec<Sides>> {
        let (class, list) = self.at(node, side);
        let base = self.at(node, 0).1;
        let bucket = self.classes[class].entry(key).or_default();
        let own = stored.partial.clone();
        if bucket.len() == bucket.capacity() {
            // Room for a publication of every side at once, not grown one doubling at a
            // time (a generation's bucket holds one per job it waits for).
            bucket.reserve_exact(sides.saturating_sub(bucket.len()).max(1));
        }
        bucket.push((list, stored));
        let side_of = |l: u32| (l >= base && l < base + sides as u32).then(|| (l - base) as usize);
        let mut present: SmallVec<[bool; 8]> = smallvec::smallvec![false; sides];
        let mut missing = sides;
        for (l, _) in bucket.iter() {
            if let Some(s) = side_of(*l).filter(|&s| !present[s]) {
                present[s] = true;
                missing -= 1;
            }
        }
        if missing > 0 {
            return None;
        }
        let mut lists: Vec<Sides> = vec![Sides::new(); sides];
        for (l, s) in bucket.iter() {
            if let Some(at) = side_of(*l).filter(|&at| at != side) {
                lists[at].push(s.partial.clone());
            }
        }
        lists[side].push(own);
        Some(lists)
    }

    /// Takes the list of `node`'s `side` for `key` out, to be put back with
    /// [`Self::put_back`] (storing at other nodes meanwhile is allowed).
    pub(super) fn take(&mut self, node: usize, side: usize, key: &Key) -> Option<List> {
        let (class, list) = self.at(node, side);
        let bucket = self.classes[class].get_mut(key)?;
        Some(take_list(bucket, list))
    }

    pub(super) fn put_back(&mut self, node: usize, side: usize, key: &Key, stored: List) {
        if stored.is_empty() {
            return;
        }
        let (class, list) = self.at(node, side);
        debug_assert!(stored.iter().all(|(l, _)| *l == list), "a list goes back where it came from");
        if let Some(bucket) = self.classes[class].get_mut(key) {
            if bucket.is_empty() {
                *bucket = stored;
            } else {
                bucket.extend(stored);
            }
        }
    }

    /// Removes `entry` from the list of `node`'s `side` for `key`, and returns it.
    pub(super) fn remove(&mut self, node: usize, side: usize, key: &Key, entry: usize) -> Option<Stored> {
        let (class, list) = self.at(node, side);
        let map = &mut self.classes[class];
        let bucket = map.get_mut(key)?;
        let removed =
            bucket.iter().position(|(l, s)| *l == list && s.entry == entry).map(|at| bucket.remove(at).1);
        if bucket.is_empty() {
            map.remove(key);
        }
        removed
    }

    /// The stored matches of key class `class`'s bucket for `key`.
    pub(super) fn bucket(&self, class: usize, key: &Key) -> impl Iterator<Item = &Stored> + Clone {
        self.classes[class].get(key).into_iter().flat_map(|bucket| bucket.iter().map(|(_, stored)| stored))
    }

    /// Drops, from key class `class`'s bucket for `key`, every stored match for which
    /// `drop` holds (it is told each one dropped).
    pub(super) fn drop_where(&mut self, class: usize, key: &Key, mut drop: impl FnMut(&Stored) -> bool) {
        let map = &mut self.classes[class];
        let Some(bucket) = map.get_mut(key) else { return };
        bucket.retain(|(_, stored)| !drop(stored));
        if bucket.is_empty() {
            map.remove(key);
        }
    }

    /// Every stored match of key class `class`.
    pub(super) fn class(&self, class: usize) -> impl Iterator<Item = &Stored> {
        self.classes[class].values().flat_map(|bucket| bucket.iter().map(|(_, stored)| stored))
    }

    pub(super) fn classes(&self) -> usize {
        self.classes.len()
    }
}

/// Takes list `list`'s matches out of `bucket`, in the order stored: the whole bucket
/// when it holds nothing else, else by one pass (shifting in place while the bucket is
/// small, a workflow generation's few).
fn take_list(bucket: &mut Bucket, list: u32) -> List {
    if bucket.iter().all(|(l, _)| *l == list) {
        return std::mem::take(bucket);
    }
    if bucket.len() <= SMALL_BUCKET {
        let mut taken = List::new();
        let mut at = 0;
        while at < bucket.len() {
            if bucket[at].0 == list {
                taken.push(bucket.remove(at));
            } else {
                at += 1;
            }
        }
        return taken;
    }
    let (taken, kept): (List, Bucket) = std::mem::take(bucket).into_iter().partition(|(l, _)| *l == list);
    *bucket = kept;
    taken
}

/// One side's stored matches, as [`Stores::push_and_complete`] hands them out.
pub(super) type Sides = SmallVec<[Arc<Partial>; 1]>;

/// Up to this many matches, a bucket's list is taken out by shifting in place.
const SMALL_BUCKET: usize = 16;

/// Up to this many partners, [`Stores::push_and_partners`] copies their handles rather
/// than taking their list out (a workflow generation's node has one at most; a join
/// without variables can have thousands, which are cheaper moved than copied).
const SHARED_PARTNERS: usize = 4;

/// The stored matches a new match pairs with, in the order stored.
pub(super) enum Partners {
    /// Copies of their handles; the bucket keeps them.
    Shared(SmallVec<[Arc<Partial>; 2]>),
    /// Their list, taken out of the bucket, to be put back.
    Taken(List),
}

impl Partners {
    pub(super) fn len(&self) -> usize {
        match self {
            Self::Shared(partials) => partials.len(),
            Self::Taken(list) => list.len(),
        }
    }

    /// The `i`th, in the order stored.
    pub(super) fn get(&self, i: usize) -> &Arc<Partial> {
        match self {
            Self::Shared(partials) => &partials[i],
            Self::Taken(list) => &list[i].1.partial,
        }
    }
}
