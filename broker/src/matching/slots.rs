//! Slots: the dense numbering behind every bitset, with lazy removal.
//!
//! A removed slot stops counting at once (its alive bit is cleared) but is only reusable
//! after a sweep: the owner clears the dead slots from all its bitsets in one pass per
//! structure when they reach an eighth of the space, then calls [`Slots::recycle`]. A
//! removal thus costs a few writes instead of a cache miss per bit it once set.

use std::sync::Arc;

use super::bits::{self, Layout};

/// Values under keys, one per slot (see the module docs).
#[derive(Debug)]
pub(super) struct Slots<K, V> {
    layout: Layout,
    keys: Vec<Option<K>>,
    values: Vec<Option<Arc<V>>>,
    /// Swept slots, ready for reuse.
    free: Vec<u32>,
    alive: Vec<u64>,
    /// Removed slots not yet swept.
    dead: Vec<u64>,
    dead_count: usize,
    len: usize,
}

impl<K, V> Slots<K, V> {
    pub(super) fn new() -> Self {
        let layout = Layout::for_slots(1);
        Self {
            layout,
            keys: Vec::new(),
            values: Vec::new(),
            free: Vec::new(),
            alive: vec![0; layout.words],
            dead: vec![0; layout.words],
            dead_count: 0,
            len: 0,
        }
    }

    pub(super) fn layout(&self) -> Layout {
        self.layout
    }

    pub(super) fn alive(&self) -> &[u64] {
        &self.alive
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn get(&self, slot: u32) -> Option<&Arc<V>> {
        self.values.get(slot as usize)?.as_ref()
    }

    pub(super) fn entry(&self, slot: u32) -> Option<(&K, &Arc<V>)> {
        let key = self.keys.get(slot as usize)?.as_ref()?;
        Some((key, self.get(slot)?))
    }

    /// A slot for a new value, and the old and new layouts if the slot space grew (the
    /// owner must grow its bitsets to match).
    pub(super) fn allocate(&mut self) -> (u32, Option<(Layout, Layout)>) {
        if let Some(slot) = self.free.pop() {
            return (slot, None);
        }
        let slot = self.keys.len();
        self.keys.push(None);
        self.values.push(None);
        let mut grown = None;
        if slot >= self.layout.slots() {
            let old = self.layout;
            let new = Layout::for_slots(slot + 1);
            self.alive.resize(new.words, 0);
            self.dead.resize(new.words, 0);
            self.layout = new;
            grown = Some((old, new));
        }
        // A group would run out of memory long before 2^30 slots (the column tag limit).
        debug_assert!(slot < super::column::MAX_SLOTS as usize);
        (u32::try_from(slot).unwrap_or(u32::MAX), grown)
    }

    pub(super) fn fill(&mut self, slot: u32, key: K, value: Arc<V>) {
        self.keys[slot as usize] = Some(key);
        self.values[slot as usize] = Some(value);
        bits::set(&mut self.alive, slot);
        self.len += 1;
    }

    /// Empties `slot`; it stops being alive now and is reusable after the next sweep.
    pub(super) fn take(&mut self, slot: u32) -> Option<Arc<V>> {
        let value = self.values.get_mut(slot as usize)?.take()?;
        self.keys[slot as usize] = None;
        bits::clear(&mut self.alive, slot);
        bits::set(&mut self.dead, slot);
        self.dead_count += 1;
        self.len -= 1;
        Some(value)
    }

    /// True once removed slots make up an eighth of the space.
    pub(super) fn sweep_due(&self) -> bool {
        self.dead_count * 8 >= self.keys.len().max(64)
    }

    /// The removed slots, as a bitset for the owner's sweep; they become reusable.
    pub(super) fn recycle(&mut self) -> Vec<u64> {
        let dead = std::mem::replace(&mut self.dead, vec![0; self.layout.words]);
        for (w, &word) in dead.iter().enumerate() {
            let mut d = word;
            while d != 0 {
                self.free.push((w * 64) as u32 + d.trailing_zeros());
                d &= d - 1;
            }
        }
        self.dead_count = 0;
        dead
    }

    /// Every live slot with its key and value.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &K, &Arc<V>)> {
        self.keys
            .iter()
            .zip(&self.values)
            .enumerate()
            .filter_map(|(slot, (k, v))| Some((u32::try_from(slot).ok()?, k.as_ref()?, v.as_ref()?)))
    }

    /// Calls `f` for every live slot whose bit in `mismatch` is clear.
    pub(super) fn survivors(&self, mismatch: &[u64], mut f: impl FnMut(u32, &K, &Arc<V>)) {
        for (w, (&m, &a)) in mismatch.iter().zip(&self.alive).enumerate() {
            let mut left = !m & a;
            while left != 0 {
                let slot = (w * 64) as u32 + left.trailing_zeros();
                left &= left - 1;
                if let Some((key, value)) = self.entry(slot) {
                    f(slot, key, value);
                }
            }
        }
    }
}

/// Clears the `dead` slots' bits from a plain (unblocked) bitset.
pub(super) fn clear_dead(bitset: &mut [u64], dead: &[u64]) {
    for (w, d) in bitset.iter_mut().zip(dead) {
        *w &= !d;
    }
}
