//! One attribute's interval predicates, split into half-constraints and bucketed by value.
//!
//! Every interval predicate is a lower bound, an upper bound or both (`[p,=,5]` is both,
//! `[s,str-prefix,'ib']` is `>= 'ib'` and `< 'ic'`). Each half fails on the values on one
//! side of its bound. The value axis is cut into cells at quantiles of the bounds; a half
//! whose bound lies in cell `k` fails for *every* value of the cells wholly on its wrong
//! side, which is recorded once, at insert, as bits in those cells' mismatch rows. Probing
//! a value of cell `c` then ORs row `c` into the result and checks exactly only the halves
//! whose bound lies in cell `c` itself.
//!
//! Several predicates of one subscription on one attribute are simply several halves: a
//! slot fails if any of its halves fails, which is the conjunction.

use std::cmp::Ordering;

use super::bits::{self, Layout};

/// Aim for about this many halves per cell.
const HALVES_PER_CELL: usize = 256;
/// Never more cells than this (memory is one bit per slot per cell).
const MAX_CELLS: usize = 128;

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
}

#[derive(Clone, Debug)]
struct Half<T> {
    slot: u32,
    bound: T,
    strict: bool,
}

/// The interval predicates of one attribute in one group (see the module docs).
#[derive(Debug)]
pub(super) struct Column<T> {
    /// Cell boundaries, ascending: cell `k` holds `bounds[k-1] <= v < bounds[k]`.
    bounds: Vec<T>,
    /// Mismatch rows in the group's blocked layout, one row per cell.
    rows: Vec<u64>,
    lower: Vec<Vec<Half<T>>>,
    upper: Vec<Vec<Half<T>>>,
    halves: usize,
    /// `halves` when the cells were last chosen.
    planned_for: usize,
}

impl<T: Ord + Clone> Column<T> {
    pub(super) fn new(layout: Layout) -> Self {
        Self {
            bounds: Vec::new(),
            rows: vec![0; layout.words],
            lower: vec![Vec::new()],
            upper: vec![Vec::new()],
            halves: 0,
            planned_for: 0,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.halves == 0
    }

    fn cells(&self) -> usize {
        self.bounds.len() + 1
    }

    fn cell_of(&self, key: &T) -> usize {
        self.bounds.partition_point(|b| b <= key)
    }

    /// Sets the rows' bits for the cells where this half fails.
    fn mark(&mut self, layout: Layout, side: Side, cell: usize, slot: u32) {
        let cells = self.cells();
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
        let half = Half { slot, bound, strict };
        match side {
            Side::Lower => self.lower[cell].push(half),
            Side::Upper => self.upper[cell].push(half),
        }
        self.halves += 1;
        if self.halves >= 2 * self.planned_for.max(HALVES_PER_CELL / 2) {
            self.replan(layout);
        }
    }

    /// Removes every half of `slot` (listed in `halves`) and clears its bits.
    pub(super) fn remove_slot<'a>(
        &mut self,
        layout: Layout,
        slot: u32,
        halves: impl Iterator<Item = (Side, &'a T)>,
    ) where
        T: 'a,
    {
        for (side, bound) in halves {
            let cell = self.cell_of(bound);
            let list = match side {
                Side::Lower => &mut self.lower[cell],
                Side::Upper => &mut self.upper[cell],
            };
            if let Some(i) = list.iter().position(|h| h.slot == slot && h.bound == *bound) {
                list.swap_remove(i);
                self.halves -= 1;
            }
        }
        let cells = self.cells();
        for c in 0..cells {
            bits::clear_word(&mut self.rows, layout.row_word(cells, c, slot), slot);
        }
    }

    /// ORs into `mismatch` every slot with a half that fails on `probe`.
    pub(super) fn probe<P: Probe<T> + ?Sized>(&self, layout: Layout, probe: &P, mismatch: &mut [u64]) {
        let cell = self.bounds.partition_point(|b| probe.cmp_key(b) != Ordering::Less);
        let cells = self.cells();
        for block in 0..layout.blocks() {
            let start = (block * cells + cell) * layout.block;
            let target = &mut mismatch[block * layout.block..(block + 1) * layout.block];
            bits::or_into(target, &self.rows[start..start + layout.block]);
        }
        for h in &self.lower[cell] {
            let order = probe.cmp_key(&h.bound);
            if order == Ordering::Less || (h.strict && order == Ordering::Equal) {
                bits::set(mismatch, h.slot);
            }
        }
        for h in &self.upper[cell] {
            let order = probe.cmp_key(&h.bound);
            if order == Ordering::Greater || (h.strict && order == Ordering::Equal) {
                bits::set(mismatch, h.slot);
            }
        }
    }

    /// Chooses cells for the current halves (quantiles of their bounds) and rebuilds.
    fn replan(&mut self, layout: Layout) {
        let target = (self.halves / HALVES_PER_CELL).clamp(1, MAX_CELLS);
        let mut keys: Vec<&T> = self.lower.iter().chain(&self.upper).flatten().map(|h| &h.bound).collect();
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

    /// Follows the group's slot space from `old` to `new`: whole blocks are appended, any
    /// other change rebuilds the rows.
    pub(super) fn grow(&mut self, old: Layout, new: Layout) {
        if old.block == new.block {
            self.rows.resize(new.words * self.cells(), 0);
        } else {
            self.relayout(new);
        }
    }

    /// Re-buckets every half and rebuilds the rows for `layout` (after new cells, or when
    /// the group's slot space grew).
    pub(super) fn relayout(&mut self, layout: Layout) {
        let halves: Vec<(Side, Half<T>)> = std::mem::take(&mut self.lower)
            .into_iter()
            .flatten()
            .map(|h| (Side::Lower, h))
            .chain(std::mem::take(&mut self.upper).into_iter().flatten().map(|h| (Side::Upper, h)))
            .collect();
        let cells = self.cells();
        self.lower = vec![Vec::new(); cells];
        self.upper = vec![Vec::new(); cells];
        self.rows = vec![0; layout.words * cells];
        for (side, half) in halves {
            let cell = self.cell_of(&half.bound);
            self.mark(layout, side, cell, half.slot);
            match side {
                Side::Lower => self.lower[cell].push(half),
                Side::Upper => self.upper[cell].push(half),
            }
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
    fn halves_agree_with_direct_comparison_across_replans() {
        let layout = Layout::for_slots(5000);
        let mut column = Column::new(layout);
        // Slot s accepts s % 100 < v <= s % 100 + 10 (a lower and an upper half).
        for s in 0..5000_u32 {
            let lo = i64::from(s % 100);
            column.insert(layout, Side::Lower, s, lo, true);
            column.insert(layout, Side::Upper, s, lo + 10, false);
        }
        assert!(column.cells() > 1, "replanned into cells");
        for v in [-5, 0, 1, 10, 11, 50, 99, 109, 110, 200] {
            let expected: Vec<u32> = (0..5000)
                .filter(|&s| {
                    let lo = i64::from(s % 100);
                    lo < v && v <= lo + 10
                })
                .collect();
            assert_eq!(matching(&column, layout, v, 5000), expected, "v = {v}");
        }
        // Remove every even slot: they no longer fail anything, so the caller's alive bits
        // must exclude them; here we only check that their bits are gone.
        for s in (0..5000_u32).step_by(2) {
            let lo = i64::from(s % 100);
            let (lower, upper) = (lo, lo + 10);
            column.remove_slot(layout, s, [(Side::Lower, &lower), (Side::Upper, &upper)].into_iter());
        }
        let m = matching(&column, layout, -5, 5000);
        assert!(m.iter().all(|s| s % 2 == 0) && m.len() == 2500);
    }
}
