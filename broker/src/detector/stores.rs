//! Where one detector keeps its partial matches.
//!
//! Every node that stores (`&`, `;`, `Times`) keeps a list per side of its children's
//! matches, by key (the values of its join variables). Nodes keyed by the same variables
//! share one map, a binding's lists for all of them side by side in one bucket: in a
//! workflow's dependency every join is on the generation id, so one lookup finds, stores,
//! or drops everything a generation has at the detector, instead of one per node (the
//! lookups are cache misses once a generation is a few thousand publications old).

use std::collections::BTreeSet;

use super::Stored;
use super::pattern::{Key, Pattern};

/// One side's stored matches for one binding: usually one (a generation's job status),
/// kept inline, so a bucket is one allocation however many nodes share it.
pub(super) type List = smallvec::SmallVec<[Stored; 1]>;

/// One binding's lists: two per node of the key class (left side, right side).
type Bucket = Box<[List]>;

/// The nodes keyed by one list of slots.
#[derive(Debug)]
struct KeyClass {
    /// Binding → its lists (foldhash, seeded per process: looked up for every input).
    buckets: foldhash::HashMap<Key, Bucket>,
    /// How many nodes share it.
    width: usize,
    /// How to make its key from an `until` binding (the index in the filter's variables of
    /// each key slot), when its slots are exactly the filter's variables; `None` where it
    /// must be scanned instead.
    until_key: Option<Vec<usize>>,
}

#[derive(Debug)]
pub(super) struct Stores {
    classes: Vec<KeyClass>,
    /// Per node: (key class, place in it), for the nodes that store.
    place: Vec<Option<(usize, usize)>>,
}

impl Stores {
    pub(super) fn new(pattern: &Pattern) -> Self {
        let mut slots_of: Vec<Vec<usize>> = Vec::new();
        let mut classes: Vec<KeyClass> = Vec::new();
        let place = (0..pattern.nodes.len())
            .map(|node| {
                let slots = pattern.key_slots(node)?;
                let class = slots_of.iter().position(|c| *c == slots).unwrap_or_else(|| {
                    slots_of.push(slots);
                    classes.push(KeyClass {
                        buckets: foldhash::HashMap::default(),
                        width: 0,
                        until_key: None,
                    });
                    classes.len() - 1
                });
                classes[class].width += 1;
                Some((class, classes[class].width - 1))
            })
            .collect();
        let until: Vec<usize> = pattern.until_vars.iter().map(|&(_, s)| s).collect();
        // A slot twice in the key or the filter: scan.
        let distinct = |v: &[usize]| v.iter().collect::<BTreeSet<_>>().len() == v.len();
        for (class, slots) in classes.iter_mut().zip(&slots_of) {
            if slots.len() == until.len() && distinct(slots) && distinct(&until) {
                class.until_key = slots.iter().map(|k| until.iter().position(|u| u == k)).collect();
            }
        }
        Self { classes, place }
    }

    /// How key class `class`'s key is made from an `until` binding, if it can be.
    pub(super) fn until_key(&self, class: usize) -> Option<&[usize]> {
        self.classes[class].until_key.as_deref()
    }

    /// The key class and list index of `node`'s `side`.
    fn at(&self, node: usize, side: usize) -> (usize, usize) {
        let (class, place) = self.place[node].expect("only storing nodes store");
        (class, 2 * place + side)
    }

    pub(super) fn push(&mut self, node: usize, side: usize, key: Key, stored: Stored) {
        let (class, list) = self.at(node, side);
        let class = &mut self.classes[class];
        let width = class.width;
        let bucket =
            class.buckets.entry(key).or_insert_with(|| (0..2 * width).map(|_| List::new()).collect());
        bucket[list].push(stored);
    }

    /// [`Self::push`] onto `node`'s `side`, then [`Self::take`] the other side's list for
    /// the same key, with one lookup.
    pub(super) fn push_and_take(&mut self, node: usize, side: usize, key: Key, stored: Stored) -> List {
        let (class, list) = self.at(node, side);
        let other = list ^ 1;
        let class = &mut self.classes[class];
        let width = class.width;
        let bucket =
            class.buckets.entry(key).or_insert_with(|| (0..2 * width).map(|_| List::new()).collect());
        bucket[list].push(stored);
        std::mem::take(&mut bucket[other])
    }

    /// Takes the list of `node`'s `side` for `key` out, to be put back with
    /// [`Self::put_back`] (storing at other nodes meanwhile is allowed).
    pub(super) fn take(&mut self, node: usize, side: usize, key: &Key) -> Option<List> {
        let (class, list) = self.at(node, side);
        let bucket = self.classes[class].buckets.get_mut(key)?;
        Some(std::mem::take(&mut bucket[list]))
    }

    pub(super) fn put_back(&mut self, node: usize, side: usize, key: &Key, stored: List) {
        let (class, list) = self.at(node, side);
        if let Some(bucket) = self.classes[class].buckets.get_mut(key) {
            bucket[list] = stored;
        }
    }

    /// Removes `entry` from the list of `node`'s `side` for `key`, and returns it.
    pub(super) fn remove(&mut self, node: usize, side: usize, key: &Key, entry: usize) -> Option<Stored> {
        let (class, list) = self.at(node, side);
        let map = &mut self.classes[class].buckets;
        let bucket = map.get_mut(key)?;
        let removed = bucket[list].iter().position(|s| s.entry == entry).map(|at| bucket[list].remove(at));
        if bucket.iter().all(List::is_empty) {
            map.remove(key);
        }
        removed
    }

    /// Drops, from key class `class`'s bucket for `key`, every stored match for which
    /// `drop` holds (it is told each one dropped).
    pub(super) fn drop_where(&mut self, class: usize, key: &Key, mut drop: impl FnMut(&Stored) -> bool) {
        let map = &mut self.classes[class].buckets;
        let Some(bucket) = map.get_mut(key) else { return };
        for list in bucket.iter_mut() {
            list.retain(|stored| !drop(stored));
        }
        if bucket.iter().all(List::is_empty) {
            map.remove(key);
        }
    }

    /// Every stored match of key class `class`.
    pub(super) fn class(&self, class: usize) -> impl Iterator<Item = &Stored> {
        self.classes[class].buckets.values().flat_map(|bucket| bucket.iter().flatten())
    }

    pub(super) fn classes(&self) -> usize {
        self.classes.len()
    }
}
