//! Cyclic overlays that lose links for good, randomized: rings of 4–8 brokers with chords,
//! links of different latencies with jitter, publishers and subscribers at random brokers,
//! and up to three links cut (each keeping the overlay connected) while publications are
//! in flight. Every subscriber receives each publisher's publications at most once and in
//! order, and once the overlay has settled, everything published reaches every subscriber.
//!
//! `CYCLE_SEED=n` replays one seed; `CYCLE_SEEDS=A..B` runs a longer range.

mod seeds;
mod sim;

use std::collections::{BTreeMap, BTreeSet};

use padres_broker::router::{Covering, Options};
use padres_lang::Value;
use sim::Sim;

/// Whether `links` connect all `n` brokers.
fn connected(n: usize, links: &BTreeSet<(usize, usize)>) -> bool {
    let mut seen = BTreeSet::from([0]);
    let mut todo = vec![0];
    while let Some(b) = todo.pop() {
        for &(x, y) in links {
            let other = if x == b {
                y
            } else if y == b {
                x
            } else {
                continue;
            };
            if seen.insert(other) {
                todo.push(other);
            }
        }
    }
    seen.len() == n
}

const PUBLISHERS: u64 = 2;
const SUBSCRIBERS: u64 = 3;

/// One run; returns how many links were cut.
fn run(seed: u64, covering: Covering) -> usize {
    let mut rng = fastrand::Rng::with_seed(seed);
    let n = rng.usize(4..=8);
    let mut links: BTreeSet<(usize, usize)> =
        (0..n).map(|i| (i.min((i + 1) % n), i.max((i + 1) % n))).collect();
    for _ in 0..rng.usize(1..=3) {
        let (a, b) = (rng.usize(..n), rng.usize(..n));
        if a != b {
            links.insert((a.min(b), a.max(b)));
        }
    }
    let mut sim = Sim::with_options(n, Options { cycles: true, covering, ..Options::default() });
    for &(a, b) in &links {
        sim.link(a, b, rng.u64(1..=5));
    }
    sim.set_jitter(3, seed);
    // Publishers are clients 1.., subscribers 100..
    for p in 0..PUBLISHERS {
        sim.attach(1 + p, rng.usize(..n));
    }
    for s in 0..SUBSCRIBERS {
        sim.attach(100 + s, rng.usize(..n));
    }
    sim.run();
    for p in 0..PUBLISHERS {
        sim.id(1 + p, &format!("a [class,eq,'t'],[p,=,{p}],[n,isPresent,0]"));
    }
    for s in 0..SUBSCRIBERS {
        sim.id(100 + s, "s [class,eq,'t']");
    }
    let start = sim.deliveries.len();
    let mut next = [0_i64; PUBLISHERS as usize];
    let mut cuts = 0;
    for _ in 0..60 {
        let p = rng.u64(..PUBLISHERS);
        sim.send(1 + p, &format!("p [class,'t'],[p,{p}],[n,{}]", next[p as usize]));
        next[p as usize] += 1;
        for _ in 0..rng.usize(0..4) {
            sim.step();
        }
        if cuts < 3 && rng.usize(..12) == 0 {
            let candidates: Vec<(usize, usize)> = links
                .iter()
                .copied()
                .filter(|l| {
                    let mut rest = links.clone();
                    rest.remove(l);
                    connected(n, &rest)
                })
                .collect();
            if !candidates.is_empty() {
                let cut = candidates[rng.usize(..candidates.len())];
                links.remove(&cut);
                sim.unlink(cut.0, cut.1);
                cuts += 1;
            }
        }
    }
    sim.run();
    // Settled: what is published now reaches every subscriber.
    let settled = next;
    for p in 0..PUBLISHERS {
        for _ in 0..5 {
            sim.send(1 + p, &format!("p [class,'t'],[p,{p}],[n,{}]", next[p as usize]));
            next[p as usize] += 1;
        }
    }
    sim.run();
    let mut got: BTreeMap<(u64, i64), Vec<i64>> = BTreeMap::new();
    for d in &sim.deliveries[start..] {
        let (Some(Value::Int(p)), Some(Value::Int(n))) = (d.publication.get("p"), d.publication.get("n"))
        else {
            continue;
        };
        got.entry((d.client, *p)).or_default().push(*n);
    }
    for s in 0..SUBSCRIBERS {
        for p in 0..PUBLISHERS {
            let ns = got.get(&(100 + s, p as i64)).cloned().unwrap_or_default();
            let what = format!("seed {seed} {covering:?}: subscriber {s} from publisher {p} got {ns:?}");
            assert!(ns.windows(2).all(|w| w[0] < w[1]), "at most once, in order: {what}");
            let last: Vec<i64> = ns.iter().copied().filter(|n| *n >= settled[p as usize]).collect();
            let expected: Vec<i64> = (settled[p as usize]..next[p as usize]).collect();
            assert_eq!(last, expected, "after settling, everything: {what}");
        }
    }
    cuts
}

#[test]
fn rings_that_lose_links_for_good_deliver_once_and_recover() {
    let mut cuts = 0;
    let mut seeds = seeds::seeds("CYCLE_SEED", "CYCLE_SEEDS", 300);
    if std::env::var_os("CYCLE_SEED").is_none() && std::env::var_os("CYCLE_SEEDS").is_none() {
        // A run in which a publication reaches a subscriber over both the old and the new
        // path of its tree: delivered twice without the routers' per-tree numbering check.
        seeds.push(1809);
    }
    for seed in seeds {
        for covering in [Covering::Off, Covering::Lazy] {
            cuts += run(seed, covering);
        }
    }
    assert!(cuts > 300, "the runs cut links ({cuts})");
}
