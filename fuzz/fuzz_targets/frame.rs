//! Any bytes into the frame decoder: no panic, and whatever decodes encodes and decodes
//! back to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use padres_lang::wire::{self, codec::DEFAULT_MAX_FRAME};

fuzz_target!(|bytes: &[u8]| {
    if let Ok((frame, _)) = wire::decode(bytes, DEFAULT_MAX_FRAME) {
        let mut again = Vec::new();
        wire::encode(&frame, DEFAULT_MAX_FRAME, &mut again).expect("a decoded frame encodes");
        let (back, used) = wire::decode(&again, DEFAULT_MAX_FRAME).expect("re-encoded frame decodes");
        assert_eq!(used, again.len());
        assert_eq!(back, frame);
    }
});
