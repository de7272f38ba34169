//! A frame of a few bytes must not make the decoder allocate much, whatever lengths it
//! announces. This file holds one test so that the counting allocator sees nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use padres_lang::wire;
use padres_lang::wire::codec::{DEFAULT_MAX_FRAME, DecodeError};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters only
// observe sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: same layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: the pointer came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes allocated at once (above what was live before) while decoding `bytes`.
fn peak_while_decoding(bytes: &[u8]) -> (Result<(), DecodeError>, usize) {
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let result = wire::decode(bytes, DEFAULT_MAX_FRAME).map(|_| ());
    (result, PEAK.load(Ordering::SeqCst) - before)
}

/// A bincode varint for `n`: the 0xFD marker then eight little-endian bytes.
fn varint_u64(n: u64) -> Vec<u8> {
    let mut v = vec![0xFD];
    v.extend(n.to_le_bytes());
    v
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
    bytes.extend(body);
    bytes
}

#[test]
fn small_frames_claiming_huge_lengths_allocate_little() {
    const LITTLE: usize = 16 * 1024;

    // Frame::Request (variant 2), req 0, Message::Subscribe (variant 1), then the
    // subscription's predicate vector claiming 2^60 elements: 16 bytes in all.
    let mut body = vec![2, 0, 1];
    body.extend(varint_u64(1 << 60));
    let bytes = frame(&body);
    assert_eq!(bytes.len(), 16);
    let (result, peak) = peak_while_decoding(&bytes);
    assert!(matches!(result, Err(DecodeError::Invalid(_))), "{result:?}");
    assert!(peak < LITTLE, "a 16-byte frame allocated {peak} bytes");

    // Frame::Bye (variant 6), code Done (0), whose reason claims a string of 2^40 bytes.
    let mut body = vec![6, 0];
    body.extend(varint_u64(1 << 40));
    let (result, peak) = peak_while_decoding(&frame(&body));
    assert!(matches!(result, Err(DecodeError::Invalid(_))), "{result:?}");
    assert!(peak < LITTLE, "a string claim allocated {peak} bytes");

    // Frame::Notification (variant 5): one id "a"/1, then a publication with one attribute
    // (class = "a") and a payload claiming 2^50 bytes.
    let mut body = vec![5, 1, 1, b'a', 1, 1, 5, b'c', b'l', b'a', b's', b's', 2, 1, b'a', 1];
    body.extend(varint_u64(1 << 50));
    let (result, peak) = peak_while_decoding(&frame(&body));
    assert!(matches!(result, Err(DecodeError::Invalid(_))), "{result:?}");
    assert!(peak < LITTLE, "a payload claim allocated {peak} bytes");
}
