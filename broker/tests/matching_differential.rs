//! The index against the reference semantics: random subscriptions over every operator,
//! inserted and removed in random order, and random publications. Any disagreement prints
//! the seed, the publication and the subscriptions involved.

use std::collections::BTreeSet;
use std::sync::Arc;

use padres_broker::matching::{AdvertisementIndex, Scratch, SubscriptionIndex};
use padres_lang::{Advertisement, Name, Publication, Subscription, Timestamp, Value, matches, overlaps};

/// Seeded, so every failure replays from its seed.
struct Rng(fastrand::Rng);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const ATTRS: [&str; 4] = ["x", "y", "z", "w"];
const STRINGS: [&str; 12] =
    ["''", "'i'", "'ib'", "'ibm'", "'ibmx'", "'b'", "'bc'", "'abc'", "'xyz'", "'é'", "'\\0'", "'ic'"];
const NUMBERS: [&str; 12] = [
    "-5",
    "0",
    "7",
    "50",
    "99",
    "100",
    "100.5",
    "-0.0",
    "1e3",
    "9007199254740993",
    "2026-01-01T00:00:00Z",
    "1767225600000",
];
const PATTERNS: [&str; 3] = ["'^ib'", "'m$'", "'b.c'"];

fn number(rng: &mut Rng) -> String {
    if rng.chance(70) { rng.below(110).to_string() } else { (*rng.pick(&NUMBERS)).to_owned() }
}

/// The shape of a run: which attributes predicates use, and how often they are intervals.
#[derive(Clone, Copy)]
struct Shape {
    attrs: &'static [&'static str],
    /// Percent of predicates forced to be numeric or string intervals.
    intervals: usize,
    /// Percent of changes that insert (the rest remove).
    inserts: usize,
    /// If not 0: most subscriptions also say `[key,eq,'vN']` with N below this, and most
    /// publications carry such a key (many distinct values: groups by value).
    keys: usize,
    /// Percent of subscriptions that also constrain one of 12 rare attributes (each used
    /// by too few of its class to share a group with the others: groups by attribute).
    rare: usize,
}

const MIXED: Shape = Shape { attrs: &ATTRS, intervals: 0, inserts: 60, keys: 0, rare: 0 };
/// Everything on one attribute and mostly intervals: one big group whose columns split
/// into many cells and whose slots span several blocks.
const DENSE: Shape = Shape { attrs: &["x"], intervals: 90, inserts: 90, keys: 0, rare: 0 };
/// A key with many values on most subscriptions, as workflow leaves have (enough for the
/// index to file them by value).
const KEYED: Shape = Shape { attrs: &ATTRS, intervals: 0, inserts: 60, keys: 1500, rare: 0 };
/// Some subscriptions on rare attributes, filed in groups of their own.
const RARE: Shape = Shape { attrs: &ATTRS, intervals: 0, inserts: 60, keys: 0, rare: 8 };

fn predicate(rng: &mut Rng, allow_vars: bool, shape: Shape) -> String {
    let attr = rng.pick(shape.attrs);
    if rng.chance(shape.intervals) {
        return if rng.chance(60) {
            format!("[{attr},{},{}]", rng.pick(&["=", "<", "<=", ">", ">="]), number(rng))
        } else {
            let ops = ["eq", "str-lt", "str-le", "str-gt", "str-ge", "str-prefix"];
            format!("[{attr},{},{}]", rng.pick(&ops), rng.pick(&STRINGS))
        };
    }
    let (op, value) = match rng.below(if allow_vars { 11 } else { 10 }) {
        0..=3 => (*rng.pick(&["=", "<>", "<", "<=", ">", ">="]), number(rng)),
        4..=6 => {
            let ops = [
                "eq",
                "neq",
                "str-lt",
                "str-le",
                "str-gt",
                "str-ge",
                "str-prefix",
                "str-postfix",
                "str-contains",
            ];
            (*rng.pick(&ops), (*rng.pick(&STRINGS)).to_owned())
        }
        7 => ("str-regex", (*rng.pick(&PATTERNS)).to_owned()),
        8 => (*rng.pick(&["eq", "neq", "=", "<>"]), (*rng.pick(&["true", "false"])).to_owned()),
        9 => ("isPresent", (*rng.pick(&["''", "0", "true"])).to_owned()),
        _ => {
            let var = if rng.chance(50) {
                ("eq", format!("$S$v{}", rng.below(2)))
            } else {
                ("=", format!("$I$n{}", rng.below(2)))
            };
            (var.0, var.1)
        }
    };
    format!("[{attr},{op},{value}]")
}

fn subscription(rng: &mut Rng, shape: Shape) -> Subscription {
    let class = rng.pick(&["a", "b"]);
    let mut text = format!("[class,eq,'{class}']");
    if shape.keys > 0 && rng.chance(85) {
        text.push_str(&format!(",[key,eq,'v{}']", rng.below(shape.keys)));
        // Other predicates on the key, which a group by value must still check: only the
        // `eq` it is filed by holds for every publication that visits it.
        if rng.chance(20) {
            let v = rng.below(shape.keys);
            let op = rng.pick(&["eq", "neq", "str-prefix", "str-lt", "str-contains"]);
            let operand = if *op == "str-prefix" { format!("v{}", v % 10) } else { format!("v{v}") };
            text.push_str(&format!(",[key,{op},'{operand}']"));
        }
    }
    if shape.rare > 0 && rng.chance(shape.rare) {
        text.push_str(&format!(",[r{},>=,{}]", rng.below(12), rng.below(100)));
    }
    for _ in 0..rng.below(5) {
        text.push(',');
        text.push_str(&predicate(rng, true, shape));
    }
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn advertisement(rng: &mut Rng, shape: Shape) -> Advertisement {
    let class = rng.pick(&["a", "b"]);
    let mut text = format!("[class,eq,'{class}']");
    if shape.keys > 0 && rng.chance(70) {
        let key = match rng.below(3) {
            0 => "isPresent,''".to_owned(),
            1 => format!("eq,'v{}'", rng.below(shape.keys)),
            _ => format!("str-prefix,'v{}'", rng.below(10)),
        };
        text.push_str(&format!(",[key,{key}]"));
    }
    for _ in 0..rng.below(5) {
        text.push(',');
        text.push_str(&predicate(rng, false, shape));
    }
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn publication(rng: &mut Rng, shape: Shape) -> Publication {
    let class = rng.pick(&["a", "b", "c"]);
    let mut text = format!("[class,'{class}']");
    if shape.keys > 0 && rng.chance(90) {
        // Now and then a number: a key of another kind.
        let key = if rng.chance(5) { "7".to_owned() } else { format!("'v{}'", rng.below(shape.keys)) };
        text.push_str(&format!(",[key,{key}]"));
    }
    for attr in ATTRS {
        if rng.chance(80) {
            let value = match rng.below(10) {
                0..=4 => number(rng),
                5..=8 => (*rng.pick(&STRINGS)).to_owned(),
                _ => (*rng.pick(&["true", "false"])).to_owned(),
            };
            text.push_str(&format!(",[{attr},{value}]"));
        }
    }
    if shape.rare > 0 && rng.chance(40) {
        text.push_str(&format!(",[r{},{}]", rng.below(12), rng.below(110)));
    }
    if rng.chance(20) {
        // Attributes no subscription names, often enough that the index resolves every name to
        // its id instead of scanning for the few its groups ask about.
        for i in 0..1 + rng.below(8) {
            text.push_str(&format!(",[f{i},{i}]"));
        }
    }
    let p: Publication = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
    if rng.chance(30) {
        // Names that share no text with the subscriptions' (as decoded on another
        // thread): told equal by their text.
        let attrs = p.attrs().iter().map(|(n, v)| (Name::new(n).expect("a name"), v.clone())).collect();
        return Publication::new(attrs).expect("the same publication");
    }
    p
}

/// The live subscriptions, as the reference sees them.
type Live = Vec<(u32, Arc<Subscription>)>;

fn check(seed: u64, index: &SubscriptionIndex<u32>, live: &Live, p: &Publication, scratch: &mut Scratch) {
    let mut got = Vec::new();
    index.matches_into(p, scratch, &mut got);
    if p.attrs().len() <= 8 {
        // The same publication made larger by attributes no subscription names (its values
        // then found by resolved ids instead of by scanning for names): the same matches,
        // in the same order.
        let mut attrs = p.attrs().to_vec();
        attrs.extend((0..9).map(|i| (Name::new(&format!("pad{i}")).expect("a name"), Value::Int(i))));
        let larger = Publication::new(attrs).expect("a publication");
        let mut again = Vec::new();
        index.matches_into(&larger, scratch, &mut again);
        assert_eq!(again, got, "seed {seed}: {p} and {larger}");
    }
    let got: BTreeSet<u32> = got.into_iter().collect();
    let expected: BTreeSet<u32> = live.iter().filter(|(_, s)| matches(s, p)).map(|(k, _)| *k).collect();
    if got != expected {
        let describe = |keys: BTreeSet<&u32>| -> Vec<String> {
            keys.into_iter()
                .filter_map(|k| live.iter().find(|(key, _)| key == k).map(|(k, s)| format!("{k}: {s}")))
                .collect()
        };
        panic!(
            "seed {seed}: publication {p}\n  index only: {:?}\n  reference only: {:?}",
            describe(got.difference(&expected).collect()),
            describe(expected.difference(&got).collect()),
        );
    }
    // The hop variant sees the same set of hops.
    let mut hops = Vec::new();
    index.hops_into(p, scratch, |k| k % 7, &mut hops);
    let hops: BTreeSet<u32> = hops.into_iter().collect();
    let expected_hops: BTreeSet<u32> = expected.iter().map(|k| k % 7).collect();
    assert_eq!(hops, expected_hops, "seed {seed}: hops for {p}");
}

/// Runs one seed: `rounds` of random inserts and removes, each followed by `per_round`
/// publications. Returns the number of publications checked.
fn run(seed: u64, shape: Shape, rounds: usize, grow_to: usize, per_round: usize) -> usize {
    let mut rng = Rng(fastrand::Rng::with_seed(seed));
    let mut index = SubscriptionIndex::new();
    let mut live: Live = Vec::new();
    let mut next_key = 0_u32;
    let mut scratch = Scratch::default();
    let mut checked = 0;
    let mut largest = 0;
    for _ in 0..rounds {
        let changes = 1 + rng.below(grow_to / 4 + 1);
        for _ in 0..changes {
            if live.len() < grow_to && (live.is_empty() || rng.chance(shape.inserts)) {
                let sub = Arc::new(subscription(&mut rng, shape));
                index.insert(next_key, sub.clone());
                live.push((next_key, sub));
                next_key += 1;
            } else {
                let (key, sub) = live.swap_remove(rng.below(live.len()));
                let removed = index.remove(&key).expect("indexed");
                assert_eq!(removed, sub, "seed {seed}: remove returns what was inserted");
            }
        }
        assert_eq!(index.len(), live.len());
        largest = largest.max(live.len());
        for _ in 0..per_round {
            check(seed, &index, &live, &publication(&mut rng, shape), &mut scratch);
            checked += 1;
        }
    }
    if shape.intervals > 0 {
        // Enough for one group to span several 4,096-slot blocks.
        assert!(largest > 9000, "seed {seed}: only {largest} subscriptions");
    }
    checked
}

#[test]
fn index_agrees_with_reference_semantics() {
    let mut checked = 0;
    // Many small sets of subscriptions...
    for seed in 0..400 {
        checked += run(seed, MIXED, 10, 60, 20);
    }
    // ...some large ones...
    for seed in 1000..1003 {
        checked += run(seed, MIXED, 6, 6000, 2000);
    }
    // ...and dense ones, so that columns split into cells and groups span blocks.
    for seed in 2000..2002 {
        checked += run(seed, DENSE, 5, 20_000, 1000);
    }
    // ...and keyed ones, filed by the value of their key, grown and shrunk...
    for seed in 3000..3003 {
        checked += run(seed, KEYED, 12, 6000, 1000);
    }
    // ...and some on rare attributes, filed by attribute.
    for seed in 4000..4003 {
        checked += run(seed, RARE, 8, 4000, 1000);
    }
    assert!(checked >= 100_000, "{checked}");
}

/// Mostly intervals on four attributes: the advertisement index answers these from its
/// bitsets alone, without confirming with the reference.
const INTERVALS: Shape = Shape { attrs: &ATTRS, intervals: 90, inserts: 60, keys: 0, rare: 0 };

fn overlaps_agree(seed: u64, shape: Shape, n: usize) -> usize {
    let mut rng = Rng(fastrand::Rng::with_seed(seed));
    let mut subs = SubscriptionIndex::new();
    let mut advs = AdvertisementIndex::new();
    let all_subs: Vec<Arc<Subscription>> = (0..n).map(|_| Arc::new(subscription(&mut rng, shape))).collect();
    let all_advs: Vec<Arc<Advertisement>> =
        (0..n).map(|_| Arc::new(advertisement(&mut rng, shape))).collect();
    for (k, s) in all_subs.iter().enumerate() {
        subs.insert(k, s.clone());
    }
    for (k, a) in all_advs.iter().enumerate() {
        advs.insert(k, a.clone());
    }
    // Remove a third of each (enough to trigger sweeps).
    for k in (0..n).step_by(3) {
        assert!(subs.remove(&k).is_some());
        assert!(advs.remove(&k).is_some());
    }
    let mut positives = 0;
    for (ka, a) in all_advs.iter().enumerate().filter(|(k, _)| k % 3 != 0) {
        let mut got = subs.overlapping(a);
        got.sort_unstable();
        let expected: Vec<usize> = all_subs
            .iter()
            .enumerate()
            .filter(|(k, s)| k % 3 != 0 && overlaps(s, a))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(got, expected, "seed {seed}: subscriptions overlapping adv {ka}: {a}");
    }
    for (ks, s) in all_subs.iter().enumerate().filter(|(k, _)| k % 3 != 0) {
        let mut got = advs.overlapping(s);
        got.sort_unstable();
        let expected: Vec<usize> = all_advs
            .iter()
            .enumerate()
            .filter(|(k, a)| k % 3 != 0 && overlaps(s, a))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(got, expected, "seed {seed}: advertisements overlapping sub {ks}: {s}");
        positives += got.len();
    }
    positives
}

#[test]
fn advertisement_overlaps_agree_with_reference_semantics() {
    assert!(overlaps_agree(42, MIXED, 800) > 1000);
    for seed in 0..3 {
        assert!(overlaps_agree(seed, INTERVALS, 1500) > 1000);
    }
    assert!(overlaps_agree(7, KEYED, 3000) > 1000);
}

/// The broker's conformance check against the reference: random publications, some
/// carrying `time`, and random advertisements, half of them of the publication's class and
/// saying `isPresent` for each of its attributes (in a random order, so the publication's
/// order and the advertisement's agree only sometimes) besides their random predicates.
#[test]
fn conformance_agrees_with_reference_semantics() {
    let mut outcomes = [0; 2];
    for seed in 0..20_000 {
        let mut rng = Rng(fastrand::Rng::with_seed(seed));
        let shape = if seed % 2 == 0 { MIXED } else { KEYED };
        let mut p = publication(&mut rng, shape);
        if rng.chance(30) {
            p = p.with_time(Timestamp::from_millis(1_767_225_600_000).expect("a time"));
        }
        let mut adv = advertisement(&mut rng, shape).to_string();
        if rng.chance(50) {
            adv = format!("[class,eq,'{}']", p.class());
            for _ in 0..rng.below(4) {
                adv.push(',');
                adv.push_str(&predicate(&mut rng, false, shape));
            }
            let mut names: Vec<&str> =
                p.attrs().iter().map(|(n, _)| n.as_str()).filter(|n| *n != "class").collect();
            rng.0.shuffle(&mut names);
            for name in names {
                adv.push_str(&format!(",[{name},isPresent,'']"));
            }
            if rng.chance(30) {
                // Holds on the time `p` may carry, or fails on it.
                let op = if rng.chance(50) { "<" } else { ">" };
                adv.push_str(&format!(",[time,{op},2026-06-01T00:00:00Z]"));
            }
        }
        let adv: Advertisement = adv.parse().unwrap_or_else(|e| panic!("{adv}: {e}"));
        let expected = padres_lang::conforms(&p, &adv);
        assert_eq!(padres_broker::matching::conforms(&p, &adv), expected, "seed {seed}: {p} to {adv}");
        outcomes[usize::from(expected)] += 1;
    }
    assert!(outcomes.iter().all(|&n| n > 3000), "both answers, often: {outcomes:?}");
    // Past 64 attributes (the reference answers there).
    let wide: Publication = std::iter::once("[class,'a']".to_owned())
        .chain((0..70).map(|i| format!("[w{i},{i}]")))
        .collect::<Vec<_>>()
        .join(",")
        .parse()
        .expect("a publication");
    for advertised in [69, 70] {
        let adv: Advertisement = std::iter::once("[class,eq,'a']".to_owned())
            .chain((0..advertised).map(|i| format!("[w{i},<,100]")))
            .collect::<Vec<_>>()
            .join(",")
            .parse()
            .expect("an advertisement");
        assert_eq!(padres_broker::matching::conforms(&wide, &adv), advertised == 70);
    }
}
