//! A block: the unit the history store writes. Up to [`MAX_RECORDS`] publications of one
//! class (and at most about [`MAX_BYTES`] of them) whose times span at most
//! [`MAX_SPAN_MS`], kept as one SQLite row. The store writes them grouped by the value of
//! the first indexed attribute, then in `time` order; a query does not rely on the order
//! (retention sorts a block by time where it needs to).
//!
//! SQLite's cost is per row and per index entry (a B-tree descent and a page touched for
//! each), not per byte: storing one publication per row took about 3 µs of the writer's
//! CPU for each (BENCHMARKS.md), most of it SQLite's; in blocks the writer's CPU per
//! publication fell to 2–4 µs at a steady rate and ingest rose about fivefold. The span bound lets a query find every block that may
//! hold a time `t` through the index on the blocks' earliest times: a block holding `t`
//! has an earliest time no earlier than `t - MAX_SPAN_MS`.
//!
//! The encoding (little-endian): a version byte, then per publication its `time` (i64, epoch
//! milliseconds), its stamp's time (u64) and counter (u64), its origin (u16 length, then
//! the UTF-8 text), and its wire frame as [`codec::encode`](padres_lang::wire::codec::encode)
//! writes it (a four-byte big-endian length, then the body). Nothing here does I/O.

use padres_lang::wire::codec::PREFIX_LEN;

/// Most publications in one block.
pub const MAX_RECORDS: usize = 128;
/// A block is closed once its encoding reaches this many bytes (one publication larger
/// than this is a block of its own).
pub const MAX_BYTES: usize = 32 * 1024;
/// The most a block's earliest and latest `time` differ by, in milliseconds.
pub const MAX_SPAN_MS: i64 = 60_000;
/// The encoding's version, its first byte.
const VERSION: u8 = 1;
/// Bytes before an entry's origin: time, stamp time, counter, origin length.
const HEAD: usize = 8 + 8 + 8 + 2;

/// One publication in a block, borrowed from the block's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Its `time`, epoch milliseconds.
    pub time: i64,
    /// Its stamp's time.
    pub stamp_time: u64,
    /// Its stamp's counter.
    pub seq: u64,
    /// Its stamp's origin broker.
    pub origin: &'a str,
    /// Its wire frame (length prefix included).
    pub frame: &'a [u8],
}

/// How full a block is: enough to say whether the next entry may join it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fill {
    count: usize,
    bytes: usize,
    earliest: i64,
    latest: i64,
}

impl Fill {
    /// Whether an entry at `time` with an origin of `origin_len` and a frame of
    /// `frame_len` bytes may join; an empty block takes anything.
    pub fn fits(&self, time: i64, origin_len: usize, frame_len: usize) -> bool {
        self.count == 0
            || (self.count < MAX_RECORDS
                && self.bytes + HEAD + origin_len + frame_len <= MAX_BYTES
                && self.latest.max(time).saturating_sub(self.earliest.min(time)) <= MAX_SPAN_MS)
    }

    /// Counts an entry in.
    pub fn add(&mut self, time: i64, origin_len: usize, frame_len: usize) {
        if self.count == 0 {
            (self.earliest, self.latest, self.bytes) = (time, time, 1);
        }
        self.earliest = self.earliest.min(time);
        self.latest = self.latest.max(time);
        self.count += 1;
        self.bytes += HEAD + origin_len + frame_len;
    }

    /// The earliest and latest `time` counted in.
    pub fn span(&self) -> (i64, i64) {
        (self.earliest, self.latest)
    }
}

/// A block being filled.
#[derive(Debug)]
pub struct Builder {
    bytes: Vec<u8>,
    fill: Fill,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// An empty block.
    pub fn new() -> Self {
        Self { bytes: vec![VERSION], fill: Fill::default() }
    }

    /// Appends an entry (made for a publication, or read from another block). An origin
    /// name over 65,535 bytes (names are far shorter) is cut.
    pub fn push_entry(&mut self, entry: Entry<'_>) {
        let origin = entry.origin.as_bytes();
        let origin = &origin[..origin.len().min(usize::from(u16::MAX))];
        self.fill.add(entry.time, origin.len(), entry.frame.len());
        self.bytes.extend_from_slice(&entry.time.to_le_bytes());
        self.bytes.extend_from_slice(&entry.stamp_time.to_le_bytes());
        self.bytes.extend_from_slice(&entry.seq.to_le_bytes());
        self.bytes.extend_from_slice(&u16::try_from(origin.len()).unwrap_or(u16::MAX).to_le_bytes());
        self.bytes.extend_from_slice(origin);
        self.bytes.extend_from_slice(entry.frame);
    }

    /// Its earliest and latest `time`.
    pub fn span(&self) -> (i64, i64) {
        self.fill.span()
    }

    /// Its encoding.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Empties it for the next block.
    pub fn clear(&mut self) {
        self.bytes.truncate(1);
        self.fill = Fill::default();
    }
}

/// The entries of an encoded block, in order; an error says where it stops making sense.
pub fn entries(bytes: &[u8]) -> Result<Vec<Entry<'_>>, String> {
    match bytes.first() {
        Some(&VERSION) => {}
        Some(v) => return Err(format!("block encoding version {v} is not known")),
        None => return Err("an empty block".to_owned()),
    }
    let mut out = Vec::new();
    let mut at = 1;
    while at < bytes.len() {
        let entry_at = at;
        let cut = || format!("block cut short in the entry at byte {entry_at}");
        let head = bytes.get(at..at + HEAD).ok_or_else(cut)?;
        let word = |i: usize| {
            let mut w = [0_u8; 8];
            w.copy_from_slice(&head[i..i + 8]);
            w
        };
        let time = i64::from_le_bytes(word(0));
        let stamp_time = u64::from_le_bytes(word(8));
        let seq = u64::from_le_bytes(word(16));
        let origin_len = usize::from(u16::from_le_bytes([head[24], head[25]]));
        at += HEAD;
        let origin = bytes.get(at..at + origin_len).ok_or_else(cut)?;
        let origin = std::str::from_utf8(origin)
            .map_err(|_| format!("entry at byte {entry_at}: origin is not UTF-8"))?;
        at += origin_len;
        let prefix = bytes.get(at..at + PREFIX_LEN).ok_or_else(cut)?;
        let body = usize::try_from(u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]))
            .unwrap_or(usize::MAX);
        let end = at.checked_add(PREFIX_LEN).and_then(|n| n.checked_add(body)).ok_or_else(cut)?;
        let frame = bytes.get(at..end).ok_or_else(cut)?;
        at = end;
        out.push(Entry { time, stamp_time, seq, origin, frame });
    }
    Ok(out)
}

/// A block's key: an indexed attribute (its position among the declared ones) and a string
/// value it takes in the block.
pub type Key<'a> = (usize, &'a str);

/// Encodes a block's distinct keys (kept with the block, so that its index entries can be
/// found again without decoding its publications): per key its column (u16), then the
/// value (u32 length, UTF-8).
pub fn encode_keys(keys: &[Key<'_>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(keys.len() * 16);
    for &(col, text) in keys {
        out.extend_from_slice(&u16::try_from(col).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out
}

/// The keys [`encode_keys`] wrote.
pub fn keys(bytes: &[u8]) -> Result<Vec<Key<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    let cut = |at: usize| format!("block keys cut short at byte {at}");
    while at < bytes.len() {
        let head = bytes.get(at..at + 6).ok_or_else(|| cut(at))?;
        let col = usize::from(u16::from_le_bytes([head[0], head[1]]));
        let len =
            usize::try_from(u32::from_le_bytes([head[2], head[3], head[4], head[5]])).unwrap_or(usize::MAX);
        at += 6;
        let end = at.checked_add(len).ok_or_else(|| cut(at))?;
        let text = bytes.get(at..end).ok_or_else(|| cut(at))?;
        let text = std::str::from_utf8(text).map_err(|_| format!("block key at byte {at} is not UTF-8"))?;
        at = end;
        out.push((col, text));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = u32::try_from(body.len()).expect("small").to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn entries_come_back_as_pushed() {
        let mut b = Builder::new();
        let frames = [frame(b"one"), frame(b""), frame(&[7; 300])];
        for (i, f) in frames.iter().enumerate() {
            let i = u64::try_from(i).expect("small");
            let time = 100 + i64::try_from(i).expect("small");
            b.push_entry(Entry { time, stamp_time: 50 + i, seq: i, origin: "B1", frame: f });
        }
        assert_eq!(b.span(), (100, 102));
        let got = entries(b.bytes()).expect("decodes");
        assert_eq!(got.len(), 3);
        for (i, (e, f)) in got.iter().zip(&frames).enumerate() {
            let i = u64::try_from(i).expect("small");
            assert_eq!((e.stamp_time, e.seq, e.origin, e.frame), (50 + i, i, "B1", f.as_slice()));
        }
        b.clear();
        assert_eq!(entries(b.bytes()).expect("decodes"), []);
    }

    #[test]
    fn a_block_closes_at_its_count_bytes_or_span() {
        let mut fill = Fill::default();
        assert!(fill.fits(0, 2, MAX_BYTES * 2), "an empty block takes anything");
        fill.add(1_000, 2, 5);
        assert!(fill.fits(1_000 + MAX_SPAN_MS, 2, 10));
        assert!(!fill.fits(1_001 + MAX_SPAN_MS, 2, 10), "the span bound");
        assert!(fill.fits(1_000 - MAX_SPAN_MS, 2, 10) && !fill.fits(999 - MAX_SPAN_MS, 2, 10), "either way");
        assert!(!fill.fits(1_000, 2, MAX_BYTES), "the byte bound");
        // The fill counts what the builder writes.
        let mut b = Builder::new();
        b.push_entry(Entry { time: 1_000, stamp_time: 0, seq: 0, origin: "B1", frame: &frame(b"x") });
        assert_eq!(b.bytes().len(), fill.bytes);
        for _ in 1..MAX_RECORDS {
            fill.add(1_000, 2, 5);
        }
        assert!(!fill.fits(1_000, 2, 5), "the count bound");
    }

    #[test]
    fn keys_come_back_as_encoded() {
        let keys = [(0, "app1"), (1, "g-7"), (3, "2.5"), (0, "")];
        let bytes = encode_keys(&keys);
        assert_eq!(super::keys(&bytes).expect("decodes"), keys);
        for cut in 1..bytes.len() {
            // Cut between two keys, it reads as the keys before the cut; else it is refused.
            if let Ok(read) = super::keys(&bytes[..cut]) {
                assert!(read.len() < keys.len() && read == keys[..read.len()], "cut at {cut}");
            }
        }
    }

    #[test]
    fn damaged_blocks_are_refused_not_misread() {
        let mut b = Builder::new();
        b.push_entry(Entry { time: 1, stamp_time: 1, seq: 1, origin: "B1", frame: &frame(b"abc") });
        let bytes = b.bytes().to_vec();
        for cut in 2..bytes.len() {
            assert!(entries(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(entries(&[9, 1, 2]).is_err(), "an unknown version");
        assert!(entries(&[]).is_err());
    }
}
