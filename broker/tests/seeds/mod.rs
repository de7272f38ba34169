//! Which seeds a randomized test runs, so that a longer search than CI's needs no edit.

#![allow(dead_code, unreachable_pub)]

/// The seeds a randomized test runs: `ONE=n` replays seed n, `RANGE=A..B` runs seeds A to
/// B-1 (a longer search than CI's), otherwise seeds 0 to `default`-1.
pub fn seeds(one: &str, range: &str, default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var(one) {
        return vec![seed.parse().unwrap_or_else(|_| panic!("{one} is a number"))];
    }
    match std::env::var(range) {
        Ok(text) => {
            let bound = |s: &str| s.parse().unwrap_or_else(|_| panic!("{range} is A..B"));
            let (from, to) = text.split_once("..").unwrap_or_else(|| panic!("{range} is A..B"));
            let seeds: Vec<u64> = (bound(from)..bound(to)).collect();
            assert!(!seeds.is_empty(), "{range}={text} holds no seed (A..B runs A to B-1)");
            seeds
        }
        Err(_) => (0..default).collect(),
    }
}
