//! One attribute's interval predicates, split into half-constraints and bucketed by value.
//!
//! Every interval predicate is a lower bound, an upper bound or both (`[p,=,5]` is both,
//! `[s,str-prefix,'ib']` is `>= 'ib'` and `< 'ic'`). Each half fails on the values on one
//! side of its bound. The value axis is cut into cells at quantiles of the bounds; a half
//! whose bound lies in cell `k` fails for *every* value of the cells wholly on its wrong
//! side, which is recorded once, at insert, as bits in those cells' mismatch rows. Probing
//! a value of cell `c` then ORs row `c` into the result and checks only the halves whose
//! bound lies in cell `c` itself.
//!
//! Those are kept unsorted in one flat list per cell (bounds, and slots tagged with the
//! half's kind: lower or upper, strict or not), so an insert is an append and the check is
//! a branch-free loop that reads two contiguous arrays: each half compares its bound, looks
//! up "fails" for its kind, and ORs that bit into the result.
//!
//! Several predicates of one subscription on one attribute are simply several halves: a
//! slot fails if any of its halves fails, which is the conjunction.
//!
//! A bound that many halves of a cell share (a job name, a status, a class-like value that
//! thousands of subscriptions name with `eq`) cannot be split into cells of its own; its
//! halves become **heavy**: one row per kind of half, so a probe compares the bound once
//! and ORs the rows that fail, instead of checking every half.

use std::cmp::Ordering;

use super::bits::{self, Layout};

/// Aim for about this many halves per cell.
const HALVES_PER_CELL: usize = 32;
/// Never more cells than this (memory is one bit per slot per cell).
const MAX_CELLS: usize = 128;
/// A bound shared by at least this many halves of a cell gets rows of its own.
const HEAVY: usize = 64;

/// Which side of its bound a half accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// Accepts values above (or at, unless strict) the bound.
    Lower,
    /// Accepts values below (or at, unless strict) the bound.
    Upper,
}

/// A value compared against stored bounds.
pub(super) trait Probe<T> {
    /// How the probe orders against `key`.
    fn cmp_key(&self, key: &T) -> Ordering;
    /// `probe < key`; override with a branch-free comparison where one exists.
    fn lt(&self, key: &T) -> bool {
        self.cmp_key(key) == Ordering::Less
    }
    /// `probe <= key` in bit 1, `probe < key` in bit 0 (so 0, 2 or 3); override with
    /// branch-free comparisons where they exist.
    fn order_bits(&self, key: &T) -> u32 {
        match self.cmp_key(key) {
            Ordering::Less => 3,
            Ordering::Equal => 2,
            Ordering::Greater => 0,
        }
    }
}

/// The halves of one cell: bounds, and slots tagged with their kind, side by side; and the
/// heavy bounds with their rows.
#[derive(Clone, Debug)]
struct Halves<T> {
    bounds: Vec<T>,
    /// `slot << 2 | kind`.
    tags: Vec<u32>,
    heavy: Vec<Heavy<T>>,
}

impl<T> Default for Halves<T> {
    fn default() -> Self {
        Self { bounds: Vec::new(), tags: Vec::new(), heavy: Vec::new() }
    }
}

/// A bound many halves share: their slots as one flat row (indexed by slot) per kind.
#[derive(Clone, Debug)]
struct Heavy<T> {
    bound: T,
    rows: [Vec<u64>; 4],
    /// Halves per kind.
    counts: [usize; 4],
}

impl<T> Heavy<T> {
    /// Sets `slot` in the row of `kind`; false if it was set already. A slot with two
    /// equal halves (a predicate repeated in one subscription) is one bit, counted once,
    /// so that `sweep` brings the count back to zero.
    fn add(&mut self, slot: u32, kind: u32) -> bool {
        let row = &mut self.rows[kind as usize];
        if bits::get(row, slot) {
            return false;
        }
        bits::set(row, slot);
        self.counts[kind as usize] += 1;
        true
    }
}

/// The kind of a half, in the low two bits of its tag.
fn kind(side: Side, strict: bool) -> u32 {
    match (side, strict) {
        (Side::Lower, false) => 0,
        (Side::Lower, true) => 1,
        (Side::Upper, false) => 2,
        (Side::Upper, true) => 3,
    }
}

fn side_of(tag: u32) -> Side {
    if tag & 2 == 0 { Side::Lower } else { Side::Upper }
}

/// For kind `k`, bit `order_bits` of nibble `k` says whether the half fails:
/// lower inclusive fails when v < b (3); lower strict when v <= b (2, 3); upper inclusive
/// when v > b (0); upper strict when v >= b (0, 2).
const FAILS: u32 = 0b0101_0001_1100_1000;

/// The most slots a column can tag (two bits of the tag are the kind).
pub(super) const MAX_SLOTS: u32 = 1 << 30;

impl<T: Ord + Clone> Halves<T> {
    /// Adds a half; false if an equal half of the same slot was there (a heavy bound's).
    fn push(&mut self, bound: T, slot: u32, kind: u32) -> bool {
        if let Some(heavy) = self.heavy.iter_mut().find(|h| h.bound == bound) {
            return heavy.add(slot, kind);
        }
        // Grow by an eighth rather than doubling: the lists are most of a column's memory
        // and are copied rarely enough that the extra copies do not show.
        if self.tags.len() == self.tags.capacity() {
            let more = (self.tags.len() / 8).max(4);
            self.bounds.reserve_exact(more);
            self.tags.reserve_exact(more);
        }
        self.bounds.push(bound);
        self.tags.push(slot << 2 | kind);
        true
    }

    /// Moves every bound shared by at least [`HEAVY`] listed halves into rows of
    /// `words` words; returns how many halves were equal to another of their slot and
    /// merged with it.
    fn promote(&mut self, words: usize) -> usize {
        if self.tags.len() < HEAVY {
            return 0;
        }
        let mut order: Vec<usize> = (0..self.bounds.len()).collect();
        order.sort_unstable_by(|&a, &b| self.bounds[a].cmp(&self.bounds[b]));
        let mut heavy_of = vec![usize::MAX; self.bounds.len()];
        let mut start = 0;
        while start < order.len() {
            let mut end = start + 1;
            while end < order.len() && self.bounds[order[end]] == self.bounds[order[start]] {
                end += 1;
            }
            if end - start >= HEAVY {
                let bound = self.bounds[order[start]].clone();
                self.heavy.push(Heavy {
                    bound,
                    rows: std::array::from_fn(|_| vec![0; words]),
                    counts: [0; 4],
                });
                for &i in &order[start..end] {
                    heavy_of[i] = self.heavy.len() - 1;
                }
            }
            start = end;
        }
        let (bounds, tags) = (std::mem::take(&mut self.bounds), std::mem::take(&mut self.tags));
        let mut merged = 0;
        for ((bound, tag), h) in bounds.into_iter().zip(tags).zip(heavy_of) {
            match self.heavy.get_mut(h) {
                Some(heavy) => merged += usize::from(!heavy.add(tag >> 2, tag & 3)),
                None => {
                    self.bounds.push(bound);
                    self.tags.push(tag);
                }
            }
        }
        merged
    }

    /// Every half as `(bound, slot, kind)`, the heavy ones unrolled.
    fn into_halves(self) -> Vec<(T, u32, u32)> {
        let mut all: Vec<(T, u32, u32)> =
            self.bounds.into_iter().zip(self.tags).map(|(b, t)| (b, t >> 2, t & 3)).collect();
        for heavy in self.heavy {
            for (kind, row) in (0_u32..).zip(&heavy.rows) {
                for (w, &word) in row.iter().enumerate() {
                    let mut word = word;
                    while word != 0 {
                        let bit = word.trailing_zeros();
                        word &= word - 1;
                        let slot = u32::try_from(w * 64).unwrap_or(u32::MAX) + bit;
                        all.push((heavy.bound.clone(), slot, kind));
                    }
                }
            }
        }
        all
    }

    /// Drops the halves of the slots set in `dead`; returns how many.
    fn sweep(&mut self, dead: &[u64]) -> usize {
        let mut removed = 0;
        for heavy in &mut self.heavy {
            for (row, count) in heavy.rows.iter_mut().zip(&mut heavy.counts) {
                for (word, d) in row.iter_mut().zip(dead) {
                    let gone = (*word & d).count_ones() as usize;
                    *count -= gone;
                    removed += gone;
                    *word &= !d;
                }
            }
        }
        let before = self.tags.len();
        let mut kept = 0;
        for i in 0..before {
            if !bits::get(dead, self.tags[i] >> 2) {
                self.tags.swap(kept, i);
                self.bounds.swap(kept, i);
                kept += 1;
            }
        }
        self.tags.truncate(kept);
        self.bounds.truncate(kept);
        self.tags.shrink_to(kept + kept / 8);
        self.bounds.shrink_to(kept + kept / 8);
        removed + before - kept
    }

    /// Crosses out every slot whose half fails on `probe`.
    fn check<P: Probe<T> + ?Sized>(&self, mismatch: &mut [u64], probe: &P) {
        for heavy in &self.heavy {
            let order = probe.order_bits(&heavy.bound);
            for (kind, (row, &count)) in (0_u32..).zip(heavy.rows.iter().zip(&heavy.counts)) {
                if count > 0 && FAILS >> (kind * 4 + order) & 1 == 1 {
                    bits::or_into(mismatch, row);
                }
            }
        }
        for (bound, &tag) in self.bounds.iter().zip(&self.tags) {
            let fails = FAILS >> ((tag & 3) * 4 + probe.order_bits(bound)) & 1;
            let slot = tag >> 2;
            mismatch[slot as usize / 64] |= u64::from(fails) << (slot % 64);
        }
    }
}

/// The interval predicates of one attribute in one group (see the module docs).
#[derive(Debug)]
pub(super) struct Column<T> {
    /// Cell boundaries, ascending: cell `k` holds `bounds[k-1] <= v < bounds[k]`.
    bounds: Vec<T>,
    /// Mismatch rows in the group's blocked layout, one row per cell.
    rows: Vec<u64>,
    cells: Vec<Halves<T>>,
    halves: usize,
    /// `halves` when the cells were last chosen.
    planned_for: usize,
}

impl<T: Ord + Clone> Column<T> {
    pub(super) fn new(layout: Layout) -> Self {
        Self {
            bounds: Vec::new(),
            rows: vec![0; layout.words],
            cells: vec![Default::default()],
            halves: 0,
            planned_for: 0,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.halves == 0
    }

    fn cell_of(&self, key: &T) -> usize {
        self.bounds.partition_point(|b| b <= key)
    }

    /// Sets the rows' bits for the cells where a half in `cell` fails.
    fn mark(&mut self, layout: Layout, side: Side, cell: usize, slot: u32) {
        let cells = self.cells.len();
        let failing = match side {
            Side::Lower => 0..cell,
            Side::Upper => cell + 1..cells,
        };
        for c in failing {
            bits::set_word(&mut self.rows, layout.row_word(cells, c, slot), slot);
        }
    }

    pub(super) fn insert(&mut self, layout: Layout, side: Side, slot: u32, bound: T, strict: bool) {
        let cell = self.cell_of(&bound);
        self.mark(layout, side, cell, slot);
        if self.cells[cell].push(bound, slot, kind(side, strict)) {
            self.halves += 1;
        }
        if self.halves >= 2 * self.planned_for.max(HALVES_PER_CELL / 2) {
            self.replan(layout);
        }
    }

    /// Forgets the slots set in `dead` (removed subscriptions): their halves leave the
    /// lists and their bits leave the rows, in one pass over the column.
    pub(super) fn sweep(&mut self, layout: Layout, dead: &[u64]) {
        let cells = self.cells.len();
        for block in 0..layout.blocks() {
            let dead_words = &dead[block * layout.block..(block + 1) * layout.block];
            for cell in 0..cells {
                let start = (block * cells + cell) * layout.block;
                for (row, d) in self.rows[start..start + layout.block].iter_mut().zip(dead_words) {
                    *row &= !d;
                }
            }
        }
        for cell in &mut self.cells {
            self.halves -= cell.sweep(dead);
        }
    }

    /// ORs into `mismatch` every slot with a half that fails on `probe`.
    pub(super) fn probe<P: Probe<T> + ?Sized>(&self, layout: Layout, probe: &P, mismatch: &mut [u64]) {
        let cell = self.bounds.partition_point(|b| !probe.lt(b));
        let cells = self.cells.len();
        for block in 0..layout.blocks() {
            let start = (block * cells + cell) * layout.block;
            let target = &mut mismatch[block * layout.block..(block + 1) * layout.block];
            bits::or_into(target, &self.rows[start..start + layout.block]);
        }
        self.cells[cell].check(mismatch, probe);
    }

    /// Follows the group's slot space from `old` to `new`: whole blocks are appended, any
    /// other change rebuilds the rows.
    pub(super) fn grow(&mut self, old: Layout, new: Layout) {
        if old.block == new.block {
            self.rows.resize(new.words * self.cells.len(), 0);
            for heavy in self.cells.iter_mut().flat_map(|c| &mut c.heavy) {
                for row in &mut heavy.rows {
                    row.resize(new.words, 0);
                }
            }
        } else {
            self.relayout(new);
        }
    }

    /// Chooses cells for the current halves (quantiles of their bounds) and rebuilds.
    fn replan(&mut self, layout: Layout) {
        let target = (self.halves / HALVES_PER_CELL).clamp(1, MAX_CELLS);
        let mut keys: Vec<&T> = self
            .cells
            .iter()
            .flat_map(|h| {
                h.bounds
                    .iter()
                    .chain(h.heavy.iter().flat_map(|x| std::iter::repeat_n(&x.bound, x.counts.iter().sum())))
            })
            .collect();
        keys.sort_unstable();
        let mut bounds: Vec<T> = Vec::with_capacity(target);
        for i in 1..target {
            let key = keys[i * keys.len() / target];
            if bounds.last().is_none_or(|last| last < key) {
                bounds.push(key.clone());
            }
        }
        self.bounds = bounds;
        self.planned_for = self.halves;
        self.relayout(layout);
    }

    /// Re-buckets every half and rebuilds the rows for `layout` (after new cells, or when
    /// the group's slot space grew).
    fn relayout(&mut self, layout: Layout) {
        let old = std::mem::take(&mut self.cells);
        let cells = self.bounds.len() + 1;
        self.cells = vec![Default::default(); cells];
        self.rows = vec![0; layout.words * cells];
        for cell in old {
            for (bound, slot, kind) in cell.into_halves() {
                let c = self.cell_of(&bound);
                self.mark(layout, side_of(kind), c, slot);
                if !self.cells[c].push(bound, slot, kind) {
                    self.halves -= 1;
                }
            }
        }
        for cell in &mut self.cells {
            self.halves -= cell.promote(layout.words);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Probe<Self> for i64 {
        fn cmp_key(&self, key: &Self) -> Ordering {
            self.cmp(key)
        }
    }

    fn matching(column: &Column<i64>, layout: Layout, value: i64, slots: u32) -> Vec<u32> {
        let mut mismatch = vec![0; layout.words];
        column.probe(layout, &value, &mut mismatch);
        (0..slots).filter(|&s| !bits::get(&mismatch, s)).collect()
    }

    #[test]
    fn shared_bounds_become_heavy_and_still_agree() {
        let layout = Layout::for_slots(6000);
        let mut column = Column::new(layout);
        // Slot s: `= s % 3` (2,000 halves on each of three bounds, both sides), and every
        // tenth slot also `< 50 + s % 7`.
        for s in 0..6000_u32 {
            let v = i64::from(s % 3);
            column.insert(layout, Side::Lower, s, v, false);
            column.insert(layout, Side::Upper, s, v, false);
            if s % 10 == 0 {
                column.insert(layout, Side::Upper, s, 50 + i64::from(s % 7), true);
            }
        }
        assert!(column.cells.iter().any(|c| !c.heavy.is_empty()), "the shared bounds are heavy");
        for v in [-1, 0, 1, 2, 3, 55] {
            let expected: Vec<u32> = (0..6000)
                .filter(|&s| i64::from(s % 3) == v && (s % 10 != 0 || v < 50 + i64::from(s % 7)))
                .collect();
            assert_eq!(matching(&column, layout, v, 6000), expected, "v = {v}");
        }
        // Removal clears heavy rows too.
        let mut dead = vec![0; layout.words];
        for s in (0..6000_u32).filter(|s| s % 3 == 1) {
            bits::set(&mut dead, s);
        }
        column.sweep(layout, &dead);
        // A swept slot fails nothing any more: only they pass 1 now.
        let swept: Vec<u32> = (0..6000).filter(|s| s % 3 == 1).collect();
        assert_eq!(matching(&column, layout, 1, 6000), swept);
        // A half inserted after the plan on a heavy bound joins its rows: slot 1, reused,
        // is `= 2` now and fails 1.
        column.insert(layout, Side::Lower, 1, 2, false);
        column.insert(layout, Side::Upper, 1, 2, false);
        assert_eq!(matching(&column, layout, 1, 6000), swept[1..]);
        assert!(matching(&column, layout, 2, 6000).contains(&1));
    }

    #[test]
    fn a_repeated_half_on_a_heavy_bound_is_counted_once_and_swept_to_nothing() {
        let layout = Layout::for_slots(4096);
        let mut column = Column::new(layout);
        // Every slot `>= 7`, and slot 0 says it twice (a predicate repeated).
        column.insert(layout, Side::Lower, 0, 7, false);
        for s in 0..4000_u32 {
            column.insert(layout, Side::Lower, s, 7, false);
        }
        column.insert(layout, Side::Lower, 1, 7, false);
        assert!(column.cells.iter().any(|c| !c.heavy.is_empty()), "7 is heavy");
        assert_eq!(column.halves, 4000);
        assert_eq!(matching(&column, layout, 6, 4000), Vec::<u32>::new());
        let mut dead = vec![0; layout.words];
        for s in 0..4000_u32 {
            bits::set(&mut dead, s);
        }
        column.sweep(layout, &dead);
        assert!(column.is_empty(), "{} halves left", column.halves);
        let counts: usize = column.cells.iter().flat_map(|c| &c.heavy).flat_map(|h| h.counts).sum();
        assert_eq!(counts, 0);
    }

    #[test]
    fn halves_agree_with_direct_comparison_across_replans() {
        let layout = Layout::for_slots(5000);
        let mut column = Column::new(layout);
        // Slot s accepts s % 100 < v <= s % 100 + 10 (a lower and an upper half).
        for s in 0..5000_u32 {
            let lo = i64::from(s % 100);
            column.insert(layout, Side::Lower, s, lo, true);
            column.insert(layout, Side::Upper, s, lo + 10, false);
        }
        assert!(column.cells.len() > 1, "replanned into cells");
        for v in [-5, 0, 1, 10, 11, 50, 99, 109, 110, 200] {
            let expected: Vec<u32> = (0..5000)
                .filter(|&s| {
                    let lo = i64::from(s % 100);
                    lo < v && v <= lo + 10
                })
                .collect();
            assert_eq!(matching(&column, layout, v, 5000), expected, "v = {v}");
        }
        // Sweeping every even slot clears its bits: it fails nothing any more.
        let mut dead = vec![0; layout.words];
        for s in (0..5000_u32).step_by(2) {
            bits::set(&mut dead, s);
        }
        column.sweep(layout, &dead);
        assert_eq!(column.halves, 5000);
        let m = matching(&column, layout, -5, 5000);
        assert!(m.iter().all(|s| s % 2 == 0) && m.len() == 2500);
    }
}
