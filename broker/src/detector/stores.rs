//! Where one detector keeps its partial matches.
//!
//! Every node that stores (`&`, `;`, `Times`) keeps a list per side of its children's
//! matches, by key (the values of its join variables). Nodes keyed by the same variables
//! share one map, a binding's lists for all of them side by side in one bucket: in a
//! workflow's dependency every join is on the generation id, so one lookup finds, stores,
//! or drops everything a generation has at the detector, instead of one per node (the
//! lookups are cache misses once a generation is a few thousand publications old).

use std::collections::HashMap;

use super::Stored;
use super::pattern::{Key, Pattern};

/// One binding's lists: two per node of the key class (left side, right side).
type Bucket = Box<[Vec<Stored>]>;

#[derive(Debug)]
pub(super) struct Stores {
    /// Per key class: binding → its lists.
    classes: Vec<HashMap<Key, Bucket>>,
    /// Per key class: how many nodes share it.
    widths: Vec<usize>,
    /// Per node: (key class, place in it), for the nodes that store.
    place: Vec<Option<(usize, usize)>>,
}

impl Stores {
    pub(super) fn new(pattern: &Pattern) -> Self {
        let mut widths = vec![0; pattern.key_classes.len()];
        for &(class, _) in pattern.key_class_of.iter().flatten() {
            widths[class] += 1;
        }
        Self {
            classes: pattern.key_classes.iter().map(|_| HashMap::new()).collect(),
            widths,
            place: pattern.key_class_of.clone(),
        }
    }

    /// The key class and list index of `node`'s `side`.
    fn at(&self, node: usize, side: usize) -> (usize, usize) {
        let (class, place) = self.place[node].expect("only storing nodes store");
        (class, 2 * place + side)
    }

    pub(super) fn push(&mut self, node: usize, side: usize, key: Key, stored: Stored) {
        let (class, list) = self.at(node, side);
        let width = self.widths[class];
        let bucket =
            self.classes[class].entry(key).or_insert_with(|| (0..2 * width).map(|_| Vec::new()).collect());
        bucket[list].push(stored);
    }

    /// Takes the list of `node`'s `side` for `key` out, to be put back with
    /// [`Self::put_back`] (storing at other nodes meanwhile is allowed).
    pub(super) fn take(&mut self, node: usize, side: usize, key: &Key) -> Option<Vec<Stored>> {
        let (class, list) = self.at(node, side);
        let bucket = self.classes[class].get_mut(key)?;
        Some(std::mem::take(&mut bucket[list]))
    }

    pub(super) fn put_back(&mut self, node: usize, side: usize, key: &Key, stored: Vec<Stored>) {
        let (class, list) = self.at(node, side);
        if let Some(bucket) = self.classes[class].get_mut(key) {
            bucket[list] = stored;
        }
    }

    /// Removes `entry` from the list of `node`'s `side` for `key`, and returns it.
    pub(super) fn remove(&mut self, node: usize, side: usize, key: &Key, entry: usize) -> Option<Stored> {
        let (class, list) = self.at(node, side);
        let map = &mut self.classes[class];
        let bucket = map.get_mut(key)?;
        let removed = bucket[list].iter().position(|s| s.entry == entry).map(|at| bucket[list].remove(at));
        if bucket.iter().all(Vec::is_empty) {
            map.remove(key);
        }
        removed
    }

    /// Drops, from key class `class`'s bucket for `key`, every stored match for which
    /// `drop` holds (it is told each one dropped).
    pub(super) fn drop_where(&mut self, class: usize, key: &Key, mut drop: impl FnMut(&Stored) -> bool) {
        let map = &mut self.classes[class];
        let Some(bucket) = map.get_mut(key) else { return };
        for list in bucket.iter_mut() {
            list.retain(|stored| !drop(stored));
        }
        if bucket.iter().all(Vec::is_empty) {
            map.remove(key);
        }
    }

    /// Every stored match of key class `class`.
    pub(super) fn class(&self, class: usize) -> impl Iterator<Item = &Stored> {
        self.classes[class].values().flat_map(|bucket| bucket.iter().flatten())
    }

    pub(super) fn classes(&self) -> usize {
        self.classes.len()
    }
}
