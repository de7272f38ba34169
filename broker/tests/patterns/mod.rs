//! Random composite patterns and publications for the randomized composite tests: leaves
//! on classes a, b, c with `$S$k`, `$I$n` and a `v` bound; `&`, `||`, `;` and `Times` up to
//! four leaves deep; publications with `k`, and usually `n` and `v`.

#![allow(dead_code, unreachable_pub)]

/// Detector bounds under which no cap binds, as the reference (which keeps every partial
/// match) needs: a rare pattern such as `{c}&{c}` with no join variable stores one per pair
/// of `c`s, past the default 10,000 per detector. The caps are `detector_bounds`'s to test.
pub fn uncapped(lateness_ms: u64) -> padres_broker::detector::Bounds {
    padres_broker::detector::Bounds {
        pairs_per_input: usize::MAX,
        per_detector: usize::MAX,
        per_broker: usize::MAX,
        max_bytes: u64::MAX,
        lateness_ms,
    }
}

/// Seeded, so every failure replays from its seed.
pub struct Rng(pub fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(fastrand::Rng::with_seed(seed))
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n)
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The classes leaves subscribe to.
pub const CLASSES: [&str; 3] = ["a", "b", "c"];

/// An atomic subscription's text.
pub fn filter(rng: &mut Rng) -> String {
    let mut text = format!("[class,eq,'{}']", rng.pick(&CLASSES));
    match rng.below(4) {
        0 | 1 => text += ",[k,eq,$S$k]",
        2 => text += ",[k,eq,'x']",
        _ => {}
    }
    if rng.below(4) == 0 {
        text += ",[n,=,$I$n]";
    }
    if rng.below(4) == 0 {
        text += ",[v,>,1]";
    }
    text
}

/// A pattern's text: at most `depth` levels of operators, at most four leaves
/// (`leaves` counts them).
pub fn pattern(rng: &mut Rng, depth: u32, leaves: &mut u32) -> String {
    if depth == 0 || *leaves >= 4 || rng.below(3) == 0 {
        *leaves += 1;
        if rng.below(5) == 0 {
            let step = rng.pick(&["1", "-1", "2", "0", "0.5"]);
            return format!("Times({{{}}},{},v,{step})", filter(rng), 1 + rng.below(3));
        }
        return format!("{{{}}}", filter(rng));
    }
    let op = rng.pick(&["&", "||", ";"]);
    let left = pattern(rng, depth - 1, leaves);
    let right = pattern(rng, depth - 1, leaves);
    format!("{{{left}{op}{right}}}")
}

/// The attributes of a publication after its class: `k`, and usually `n` and `v`.
pub fn attributes(rng: &mut Rng) -> String {
    let mut text = format!(",[k,'{}']", rng.pick(&["x", "y"]));
    if rng.below(4) > 0 {
        text += &format!(",[n,{}]", rng.pick(&["1", "2", "2.0"]));
    }
    if rng.below(5) > 0 {
        text += &format!(",[v,{}]", rng.pick(&["0", "1", "2", "3", "4", "1.5", "2.5"]));
    }
    text
}
