//! Bitsets over slots, and the blocked layout of per-cell rows.
//!
//! Slots are grouped 64 to a word. A column's mismatch rows are laid out block by block:
//! for each block of up to [`BLOCK_WORDS`] words (4,096 slots) all of its cells' rows are
//! adjacent. Probing one cell then reads one contiguous run per block, and inserting one
//! slot touches one block's rows only (a few pages), which keeps both paths cache- and
//! TLB-friendly at a million slots.

/// Words per block once a group has grown past one block.
pub(super) const BLOCK_WORDS: usize = 64;

/// The shape of a group's slot space: how many words, and how they are blocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// Words in every per-slot bitset.
    pub(super) words: usize,
    /// Words per block (`words` itself while below [`BLOCK_WORDS`]).
    pub(super) block: usize,
}

impl Layout {
    pub(super) fn with_words(words: usize) -> Self {
        Self { words, block: words.min(BLOCK_WORDS) }
    }

    /// The layout holding at least `slots` slots: powers of two up to one block, then
    /// whole blocks.
    pub(super) fn for_slots(slots: usize) -> Self {
        let words = slots.div_ceil(64).max(1);
        let words = if words <= BLOCK_WORDS {
            words.next_power_of_two()
        } else {
            words.div_ceil(BLOCK_WORDS) * BLOCK_WORDS
        };
        Self::with_words(words)
    }

    pub(super) fn slots(self) -> usize {
        self.words * 64
    }

    pub(super) fn blocks(self) -> usize {
        self.words / self.block
    }

    /// Index of the word holding `slot` in row `cell` of a column with `cells` cells.
    pub(super) fn row_word(self, cells: usize, cell: usize, slot: u32) -> usize {
        let word = slot as usize / 64;
        let (block, offset) = (word / self.block, word % self.block);
        (block * cells + cell) * self.block + offset
    }
}

pub(super) fn set(bits: &mut [u64], slot: u32) {
    bits[slot as usize / 64] |= 1 << (slot % 64);
}

pub(super) fn clear(bits: &mut [u64], slot: u32) {
    bits[slot as usize / 64] &= !(1 << (slot % 64));
}

pub(super) fn get(bits: &[u64], slot: u32) -> bool {
    bits[slot as usize / 64] & (1 << (slot % 64)) != 0
}

pub(super) fn or_into(target: &mut [u64], source: &[u64]) {
    for (t, s) in target.iter_mut().zip(source) {
        *t |= s;
    }
}

/// Sets `slot`'s bit in `bits[word]` (the word chosen by a [`Layout`]).
pub(super) fn set_word(bits: &mut [u64], word: usize, slot: u32) {
    bits[word] |= 1 << (slot % 64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_grow_by_powers_then_blocks() {
        assert_eq!(Layout::for_slots(1), Layout { words: 1, block: 1 });
        assert_eq!(Layout::for_slots(65), Layout { words: 2, block: 2 });
        assert_eq!(Layout::for_slots(4096), Layout { words: 64, block: 64 });
        assert_eq!(Layout::for_slots(4097), Layout { words: 128, block: 64 });
        let l = Layout::for_slots(10_000);
        assert_eq!((l.words, l.blocks()), (192, 3));
        // Slot 4096 is the first word of block 1, after block 0's three rows.
        assert_eq!(l.row_word(3, 0, 4096), 3 * 64);
        assert_eq!(l.row_word(3, 2, 4096 + 64), (3 + 2) * 64 + 1);
    }

    #[test]
    fn set_bits_are_found() {
        let mut bits = vec![0; 3];
        for slot in [0, 63, 64, 130] {
            set(&mut bits, slot);
        }
        clear(&mut bits, 63);
        let seen: Vec<u32> = (0..192).filter(|&s| get(&bits, s)).collect();
        assert_eq!(seen, [0, 64, 130]);
    }
}
