//! The federation at 100 to 1,000 brokers, in the simulator (`broker/src/sim.rs`): what
//! an advertisement and a subscription cost until settled, how large the routing tables
//! get, how many link messages a delivered publication takes against the shortest-path
//! tree to its subscribers, what the routers spend per publication, how long a
//! subscription takes to settle at the farthest broker, how each cost grows with the
//! number of brokers (the exponent fitted over the sizes run), composite detection in the
//! network against detection at the subscriber's broker on the same overlays, and what
//! crashing k% of the brokers at once costs in trees and in cyclic overlays.
//!
//! Overlays: a random tree (each broker linked to a random earlier one), a balanced tree
//! (each broker has three children), a power-law tree (preferential attachment: each
//! broker linked to an earlier one with probability proportional to its degree, as the
//! Internet's router graphs grow), and a cyclic graph (a random tree plus random links up
//! to an average degree of 3.5, routed with `cycles`). Links take 1 to 5 ms each way, with
//! up to 2 ms of jitter.
//!
//! Workload: every broker advertises its own reports as it starts (as `padres-broker`
//! does); publishers of 50 classes whose popularity follows Zipf (s = 1), one for every
//! ten brokers; one subscriber per broker, `[class,eq,C],[v,>,X]` with X one of ten
//! values (so subscriptions of a class overlap and covering has work), placed at random
//! or, with locality, within two hops of a publisher of its class; five publications per
//! publisher, `v` uniform in 0..100. Every delivery is checked against the oracle (the
//! subscribers whose subscription matches).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use padres_broker::router::{Covering, Options};
use padres_broker::sim::Sim;
use padres_lang::{Publication, Subscription, matches};

use crate::workload::Rng;
use crate::{COUNTING, LIVE};

/// An overlay's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    RandomTree,
    BalancedTree,
    PowerLawTree,
    Cyclic,
}

impl Shape {
    /// The shape named `name` (`random`, `balanced`, `power-law`, `cyclic`).
    pub(crate) fn named(name: &str) -> Option<Self> {
        match name {
            "random" => Some(Self::RandomTree),
            "balanced" => Some(Self::BalancedTree),
            "power-law" => Some(Self::PowerLawTree),
            "cyclic" => Some(Self::Cyclic),
            _ => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::RandomTree => "random tree",
            Self::BalancedTree => "balanced tree",
            Self::PowerLawTree => "power-law tree",
            Self::Cyclic => "cyclic (deg 3.5)",
        }
    }
}

/// An overlay: its links, each once as `(a, b)` with `a < b`, and their latencies.
struct Overlay {
    n: usize,
    links: Vec<(usize, usize, u64)>,
}

impl Overlay {
    fn build(shape: Shape, n: usize, rng: &mut Rng) -> Self {
        let mut links = Vec::new();
        let latency = |rng: &mut Rng| 1 + rng.below(5);
        match shape {
            Shape::RandomTree | Shape::Cyclic => {
                for b in 1..n {
                    let parent = rng.below(b as u64) as usize;
                    links.push((parent, b, latency(rng)));
                }
            }
            Shape::BalancedTree => {
                for b in 1..n {
                    links.push(((b - 1) / 3, b, latency(rng)));
                }
            }
            Shape::PowerLawTree => {
                // Each end of every link is one entry: picking an entry picks a broker in
                // proportion to its degree.
                let mut ends: Vec<usize> = vec![0];
                for b in 1..n {
                    let parent = ends[rng.below(ends.len() as u64) as usize];
                    links.push((parent, b, latency(rng)));
                    ends.push(parent);
                    ends.push(b);
                }
            }
        }
        if shape == Shape::Cyclic {
            let mut have: BTreeSet<(usize, usize)> = links.iter().map(|(a, b, _)| (*a, *b)).collect();
            // Average degree 3.5: 1.75 links per broker.
            let want = n * 7 / 4;
            while have.len() < want {
                let (a, b) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
                if a != b && have.insert((a.min(b), a.max(b))) {
                    links.push((a.min(b), a.max(b), latency(rng)));
                }
            }
        }
        Self { n, links }
    }

    fn neighbours(&self, dead: &[bool]) -> Vec<Vec<usize>> {
        let mut adj = vec![Vec::new(); self.n];
        for &(a, b, _) in &self.links {
            if !dead[a] && !dead[b] {
                adj[a].push(b);
                adj[b].push(a);
            }
        }
        adj
    }
}

/// Breadth-first parents from `root` over `adj`; `usize::MAX` where unreachable.
fn bfs(adj: &[Vec<usize>], root: usize) -> (Vec<usize>, Vec<u32>) {
    let mut parent = vec![usize::MAX; adj.len()];
    let mut depth = vec![u32::MAX; adj.len()];
    parent[root] = root;
    depth[root] = 0;
    let mut todo = VecDeque::from([root]);
    while let Some(b) = todo.pop_front() {
        for &c in &adj[b] {
            if parent[c] == usize::MAX {
                parent[c] = b;
                depth[c] = depth[b] + 1;
                todo.push_back(c);
            }
        }
    }
    (parent, depth)
}

/// Edges of the shortest-path tree from `root` needed to reach every broker of `targets`.
fn tree_edges(parent: &[usize], root: usize, targets: &BTreeSet<usize>) -> u64 {
    let mut marked = BTreeSet::new();
    for &t in targets {
        let mut b = t;
        if parent[b] == usize::MAX {
            continue;
        }
        while b != root && marked.insert(b) {
            b = parent[b];
        }
    }
    marked.len() as u64
}

const CLASSES: u64 = 50;
const PUBS_EACH: usize = 5;
/// Client ids: reports from 1,000,000, publishers from 2,000,000, subscribers from 1.
const REPORTER: u64 = 1_000_000;
const PUBLISHER: u64 = 2_000_000;

/// A Zipf (s = 1) sampler over `0..n`.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: u64) -> Self {
        let mut acc = 0.0;
        let cdf = (1..=n)
            .map(|k| {
                acc += 1.0 / k as f64;
                acc
            })
            .collect::<Vec<_>>();
        let total = acc;
        Self(cdf.into_iter().map(|c| c / total).collect())
    }

    fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.below(1 << 30) as f64 / f64::from(1u32 << 30);
        self.0.partition_point(|c| *c < u) as u64
    }
}

/// A scenario's parameters.
#[derive(Clone, Copy, Debug)]
struct Scenario {
    shape: Shape,
    n: usize,
    covering: Covering,
    locality: bool,
    seed: u64,
}

/// A federation set up with the workload's clients.
struct Federation {
    sim: Sim,
    overlay: Overlay,
    /// Per publisher: broker, class.
    publishers: Vec<(usize, u64)>,
    /// Per subscriber: broker, subscription.
    subscribers: Vec<(usize, Subscription)>,
    rng: Rng,
}

/// What one scenario measured.
#[derive(Clone, Debug, Default)]
struct Figures {
    /// Link messages per report advertisement (all sent at once) until quiet.
    report_adv_msgs: f64,
    adv_msgs: f64,
    sub_msgs: f64,
    entries_mean: f64,
    entries_p99: f64,
    entries_max: f64,
    /// Heap bytes of all routers per broker, and per routing entry.
    bytes_per_broker: f64,
    bytes_per_entry: f64,
    /// Publication messages on links per delivery, and the shortest-path tree's.
    pub_msgs_per_delivery: f64,
    min_per_delivery: f64,
    deliveries: u64,
    /// Router time per publication handled at a broker (ns).
    router_ns_per_hop: f64,
    /// Virtual ms for a subscription to settle: median, max.
    settle_p50: f64,
    settle_max: f64,
    wall: Duration,
}

fn setup(s: Scenario) -> (Federation, Figures) {
    let mut rng = Rng::new(s.seed);
    let overlay = Overlay::build(s.shape, s.n, &mut rng);
    let options = Options { covering: s.covering, cycles: s.shape == Shape::Cyclic, ..Options::default() };
    let mut f = Figures::default();
    LIVE.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let empty_heap = LIVE.load(Ordering::Relaxed) as i64;
    let mut sim = Sim::with_options(s.n, options);
    sim.set_jitter(2, s.seed);
    for &(a, b, latency) in &overlay.links {
        sim.link(a, b, latency);
    }
    sim.run();
    // Every broker advertises its reports as it starts, the same advertisement at each
    // (a client of the simulator stands in for the broker's own, on an unreserved class).
    let report =
        padres_broker::monitor::advertisement().to_string().replace(padres_broker::monitor::CLASS, "reports");
    let before = sim.link_messages();
    for b in 0..s.n {
        let client = REPORTER + b as u64;
        sim.attach(client, b);
        sim.send(client, &format!("a {report}"));
    }
    sim.run();
    f.report_adv_msgs = (sim.link_messages() - before) as f64 / s.n as f64;
    // Publishers, one per ten brokers, classes by Zipf.
    let zipf = Zipf::new(CLASSES);
    let publishers: Vec<(usize, u64)> =
        (0..(s.n / 10).max(10)).map(|_| (rng.below(s.n as u64) as usize, zipf.sample(&mut rng))).collect();
    let before = sim.link_messages();
    for (i, &(broker, class)) in publishers.iter().enumerate() {
        let client = PUBLISHER + i as u64;
        sim.attach(client, broker);
        sim.id_settled(client, &format!("a [class,eq,'c{class}'],[v,isPresent,0],[n,isPresent,0]"));
    }
    sim.run();
    f.adv_msgs = (sim.link_messages() - before) as f64 / publishers.len() as f64;
    // Subscribers, one per broker.
    let adj = overlay.neighbours(&vec![false; s.n]);
    let by_class: BTreeMap<u64, Vec<usize>> = publishers.iter().fold(BTreeMap::new(), |mut m, (b, c)| {
        m.entry(*c).or_insert_with(Vec::new).push(*b);
        m
    });
    let mut subscribers = Vec::new();
    let mut settle = Vec::new();
    let before = sim.link_messages();
    for i in 0..s.n {
        let class = zipf.sample(&mut rng);
        let broker = match by_class.get(&class) {
            Some(near) if s.locality => {
                let mut b = near[rng.below(near.len() as u64) as usize];
                for _ in 0..rng.below(3) {
                    if !adj[b].is_empty() {
                        b = adj[b][rng.below(adj[b].len() as u64) as usize];
                    }
                }
                b
            }
            _ => rng.below(s.n as u64) as usize,
        };
        let text = format!("[class,eq,'c{class}'],[v,>,{}]", rng.below(10) * 10);
        let client = 1 + i as u64;
        sim.attach(client, broker);
        let start = sim.now();
        sim.id_settled(client, &format!("s {text}"));
        // One that overlaps no advertisement goes nowhere and is answered at once.
        if sim.now() > start {
            settle.push((sim.now() - start) as f64);
        }
        subscribers.push((broker, text.parse().expect("valid subscription")));
    }
    sim.run();
    f.sub_msgs = (sim.link_messages() - before) as f64 / s.n as f64;
    settle.sort_by(f64::total_cmp);
    f.settle_p50 = settle.get(settle.len() / 2).copied().unwrap_or(0.0);
    f.settle_max = settle.last().copied().unwrap_or(0.0);
    let heap = LIVE.load(Ordering::Relaxed) as i64 - empty_heap;
    COUNTING.store(false, Ordering::Relaxed);
    let mut entries: Vec<f64> = (0..s.n)
        .map(|b| {
            let r = sim.routes(b);
            (r.srt.len() + r.prt.len() + r.tree_prt.len()) as f64
        })
        .collect();
    entries.sort_by(f64::total_cmp);
    let total: f64 = entries.iter().sum();
    f.entries_mean = total / s.n as f64;
    f.entries_p99 = entries[(entries.len() * 99 / 100).min(entries.len() - 1)];
    f.entries_max = entries[entries.len() - 1];
    // The simulator's own queues are empty by now; what is left is the routers' (and the
    // simulator's small per-link and per-client maps).
    f.bytes_per_broker = heap.max(0) as f64 / s.n as f64;
    f.bytes_per_entry = heap.max(0) as f64 / total.max(1.0);
    (Federation { sim, overlay, publishers, subscribers, rng }, f)
}

/// Publishes `each` publications from every live publisher; returns (deliveries the
/// oracle expects among live clients, of which deliverable over the live overlay,
/// deliveries made, the shortest-path tree's edges, publication messages on links).
fn publish_round(fed: &mut Federation, each: usize, next: &mut i64) -> (u64, u64, u64, u64, u64) {
    let dead: Vec<bool> = (0..fed.overlay.n).map(|b| fed.sim.is_dead(b)).collect();
    let adj = fed.overlay.neighbours(&dead);
    let kinds = |sim: &Sim| {
        sim.kinds.get("Publish").copied().unwrap_or(0) + sim.kinds.get("TreePublish").copied().unwrap_or(0)
    };
    let before_msgs = kinds(&fed.sim);
    let before = fed.sim.deliveries.len();
    let mut expected: BTreeMap<i64, BTreeSet<u64>> = BTreeMap::new();
    let (mut want, mut reachable, mut minimum) = (0, 0, 0);
    let mut trees: BTreeMap<usize, (Vec<usize>, Vec<u32>)> = BTreeMap::new();
    for (i, &(broker, class)) in fed.publishers.iter().enumerate() {
        if dead[broker] {
            continue;
        }
        let (parent, _) = trees.entry(broker).or_insert_with(|| bfs(&adj, broker)).clone();
        for _ in 0..each {
            *next += 1;
            let text = format!("[class,'c{class}'],[v,{}],[n,{next}]", fed.rng.below(100));
            let p: Publication = text.parse().expect("valid publication");
            let mut targets = BTreeSet::new();
            let set = expected.entry(*next).or_default();
            for (s, (b, sub)) in fed.subscribers.iter().enumerate() {
                if !dead[*b] && matches(sub, &p) {
                    set.insert(1 + s as u64);
                    want += 1;
                    if parent[*b] != usize::MAX {
                        reachable += 1;
                        targets.insert(*b);
                    }
                }
            }
            minimum += tree_edges(&parent, broker, &targets);
            fed.sim.send(PUBLISHER + i as u64, &format!("p {text}"));
        }
    }
    fed.sim.run();
    let mut got = 0;
    let mut seen = BTreeSet::new();
    for d in &fed.sim.deliveries[before..] {
        let Some(padres_lang::Value::Int(n)) = d.publication.get("n") else { continue };
        assert!(seen.insert((*n, d.client)), "publication {n} delivered twice to client {}", d.client);
        assert!(
            expected.get(n).is_some_and(|e| e.contains(&d.client)),
            "publication {n} delivered to client {}, which does not want it",
            d.client
        );
        got += 1;
    }
    (want, reachable, got, minimum, kinds(&fed.sim) - before_msgs)
}

fn run_scenario(s: Scenario) -> Figures {
    let started = Instant::now();
    let (mut fed, mut f) = setup(s);
    let mut next = 0;
    let (t0, calls0) = fed.sim.router_time();
    let (want, _, got, minimum, messages) = publish_round(&mut fed, PUBS_EACH, &mut next);
    let (t1, calls1) = fed.sim.router_time();
    assert_eq!(got, want, "{s:?}: every publication reaches every matching subscriber");
    f.deliveries = got;
    f.pub_msgs_per_delivery = messages as f64 / got.max(1) as f64;
    f.min_per_delivery = minimum as f64 / got.max(1) as f64;
    f.router_ns_per_hop = (t1 - t0).as_nanos() as f64 / (calls1 - calls0).max(1) as f64;
    f.wall = started.elapsed();
    f
}

/// Least-squares slope of log(y) over log(n).
fn exponent(points: &[(usize, f64)]) -> Option<f64> {
    let pts: Vec<(f64, f64)> =
        points.iter().filter(|(_, y)| *y > 0.0).map(|(n, y)| ((*n as f64).ln(), y.ln())).collect();
    if pts.len() < 2 {
        return None;
    }
    let k = pts.len() as f64;
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / k, pts.iter().map(|p| p.1).sum::<f64>() / k);
    let num: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    (den > 0.0).then(|| num / den)
}

fn covering_label(c: Covering) -> &'static str {
    match c {
        Covering::Off => "off",
        Covering::Lazy => "lazy",
        Covering::Active => "active",
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) sizes: Vec<usize>,
    pub(crate) shapes: Vec<Shape>,
    pub(crate) coverings: Vec<Covering>,
    pub(crate) seed: u64,
    pub(crate) failures: bool,
    pub(crate) composite: bool,
}

/// Runs the scale benchmark.
pub(crate) fn scale(plan: &Plan) {
    let (sizes, seed) = (&plan.sizes[..], plan.seed);
    println!("Scale in the simulator: overlays of {sizes:?} brokers (seed {seed})");
    println!(
        "msgs/adv, msgs/sub: link messages (acknowledgements included) per advertisement and per \
         subscription until settled; reports: per broker's own report advertisement, all at once;"
    );
    println!(
        "entries: SRT + PRT (+ per-tree PRT) rows per broker; B/entry: routers' heap over their entries; \
         pub/deliv: publication messages on links per delivery against the shortest-path tree's (min);"
    );
    println!(
        "router ns: the routers' time per message handled while publishing; settle: virtual ms for a subscription's reply, of those forwarded (p50/max)"
    );
    let mut results: Vec<(Scenario, Figures)> = Vec::new();
    for locality in [false, true] {
        println!(
            "\n## Subscribers {}",
            if locality { "near a publisher of their class (locality)" } else { "anywhere (no locality)" }
        );
        println!(
            "{:>5} {:<17} {:<6} {:>8} {:>8} {:>8} {:>18} {:>7} {:>9} {:>14} {:>9} {:>11} {:>7}",
            "N",
            "shape",
            "cover",
            "reports",
            "msgs/adv",
            "msgs/sub",
            "entries mean/p99/max",
            "B/entry",
            "KiB/brk",
            "pub/deliv(min)",
            "router ns",
            "settle ms",
            "wall s"
        );
        for &n in sizes {
            for &shape in &plan.shapes {
                for &covering in &plan.coverings {
                    let s = Scenario { shape, n, covering, locality, seed };
                    let f = run_scenario(s);
                    println!(
                        "{:>5} {:<17} {:<6} {:>8.1} {:>8.1} {:>8.1} {:>18} {:>7.0} {:>9.1} {:>14} {:>9.0} {:>11} {:>7.1}",
                        n,
                        shape.label(),
                        covering_label(covering),
                        f.report_adv_msgs,
                        f.adv_msgs,
                        f.sub_msgs,
                        format!("{:.0}/{:.0}/{:.0}", f.entries_mean, f.entries_p99, f.entries_max),
                        f.bytes_per_entry,
                        f.bytes_per_broker / 1024.0,
                        format!("{:.2}({:.2})", f.pub_msgs_per_delivery, f.min_per_delivery),
                        f.router_ns_per_hop,
                        format!("{:.0}/{:.0}", f.settle_p50, f.settle_max),
                        f.wall.as_secs_f64()
                    );
                    results.push((s, f));
                }
            }
        }
    }
    if sizes.len() >= 2 {
        println!(
            "\n## Growth with N: fitted exponent of each cost over {sizes:?} (1.0 = linear), no locality"
        );
        println!(
            "{:<17} {:<6} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10}",
            "shape", "cover", "reports", "msgs/adv", "msgs/sub", "entries", "pub/deliv", "settle p50"
        );
        for &shape in &plan.shapes {
            for &covering in &plan.coverings {
                let pick = |g: &dyn Fn(&Figures) -> f64| -> String {
                    let pts: Vec<(usize, f64)> = results
                        .iter()
                        .filter(|(s, _)| s.shape == shape && s.covering == covering && !s.locality)
                        .map(|(s, f)| (s.n, g(f)))
                        .collect();
                    exponent(&pts).map_or("-".into(), |e| format!("{e:.2}"))
                };
                println!(
                    "{:<17} {:<6} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10}",
                    shape.label(),
                    covering_label(covering),
                    pick(&|f| f.report_adv_msgs),
                    pick(&|f| f.adv_msgs),
                    pick(&|f| f.sub_msgs),
                    pick(&|f| f.entries_mean),
                    pick(&|f| f.pub_msgs_per_delivery),
                    pick(&|f| f.settle_p50)
                );
            }
        }
    }
    if plan.composite {
        composite_traffic(sizes, seed);
    }
    if plan.failures {
        crash_table(sizes, seed);
    }
}

/// Composite subscriptions on the same overlays: five-class AND patterns joined on `g`,
/// detected in the network against detected at the subscriber's broker; link messages to
/// subscribe and to deliver.
fn composite_traffic(sizes: &[usize], seed: u64) {
    println!("\n## Composite subscriptions: detection in the network against at the subscriber's broker");
    println!(
        "(random tree and cyclic overlays; 10 classes published at brokers spread over the overlay; \
         one five-class AND pattern per ten brokers, at random brokers; 20 rounds, each class \
         published with probability 1/2)"
    );
    println!(
        "{:>5} {:<17} {:>12} {:>12} {:>12} {:>12} {:>10} {:>9}",
        "N", "shape", "net sub msgs", "net pub msgs", "sub-brk sub", "sub-brk pub", "saved", "matches"
    );
    for &n in sizes {
        for shape in [Shape::RandomTree, Shape::Cyclic] {
            let net = composite_run(shape, n, false, seed);
            let at = composite_run(shape, n, true, seed);
            assert_eq!(net.2, net.3, "{n} {shape:?}: in the network, every match the oracle expects");
            assert_eq!(
                at.2, at.3,
                "{n} {shape:?}: at the subscriber's broker, every match the oracle expects"
            );
            let saved = 1.0 - (net.0 + net.1) as f64 / (at.0 + at.1).max(1) as f64;
            println!(
                "{:>5} {:<17} {:>12} {:>12} {:>12} {:>12} {:>9.0}% {:>9}",
                n,
                shape.label(),
                net.0,
                net.1,
                at.0,
                at.1,
                saved * 100.0,
                net.2
            );
        }
    }
}

/// (subscribe messages, publish-phase messages, composite matches delivered, matches the
/// oracle expects).
fn composite_run(shape: Shape, n: usize, at_subscriber: bool, seed: u64) -> (u64, u64, usize, usize) {
    let mut rng = Rng::new(seed);
    let overlay = Overlay::build(shape, n, &mut rng);
    let options = Options {
        cycles: shape == Shape::Cyclic,
        // The default bounds: a part arriving up to 10 s late still completes a pattern, so
        // a longer path to the detecting broker loses no match.
        detect_at_subscriber: at_subscriber,
        ..Options::default()
    };
    let mut sim = Sim::with_options(n, options);
    for &(a, b, latency) in &overlay.links {
        sim.link(a, b, latency);
    }
    sim.run();
    let classes = 10;
    for class in 0..classes {
        let client = PUBLISHER + class;
        sim.attach(client, rng.below(n as u64) as usize);
        sim.id_settled(client, &format!("a [class,eq,'k{class}'],[g,isPresent,0]"));
    }
    sim.run();
    let before = sim.link_messages();
    let mut patterns: Vec<Vec<u64>> = Vec::new();
    for s in 0..(n / 10).max(5) {
        let client = 1 + s as u64;
        sim.attach(client, rng.below(n as u64) as usize);
        let mut chosen: Vec<u64> = (0..classes).collect();
        for i in 0..5 {
            let j = i + rng.below(classes - i as u64) as usize;
            chosen.swap(i, j);
        }
        let leaves: Vec<String> =
            chosen[..5].iter().map(|c| format!("{{[class,eq,'k{c}'],[g,=,$I$g]}}")).collect();
        patterns.push(chosen[..5].to_vec());
        sim.id_settled(client, &format!("cs {} within 20ms", leaves.join("&")));
    }
    sim.run();
    let subscribe = sim.link_messages() - before;
    let before = sim.link_messages();
    let mut expected = 0;
    for round in 0..20 {
        let mut published = BTreeSet::new();
        for class in 0..classes {
            if rng.below(2) == 0 {
                sim.send(PUBLISHER + class, &format!("p [class,'k{class}'],[g,{round}]"));
                published.insert(class);
            }
        }
        expected += patterns.iter().filter(|p| p.iter().all(|c| published.contains(c))).count();
        sim.run();
        sim.advance(50);
    }
    (subscribe, sim.link_messages() - before, sim.composite_deliveries.len(), expected)
}

/// k% of the brokers crash at once (k = 5, 10, 17, 25): the share of the publications
/// between live clients delivered while the neighbours still wait for the crashed
/// brokers (their link sessions last), and after they gave them up and the overlay
/// settled (trees in cyclic overlays rebuilt around the gap), with the virtual time that
/// took.
fn crash_table(sizes: &[usize], seed: u64) {
    println!(
        "\n## Brokers crashed at once (covering off, no locality; SRDS 2011 anchor: 500 brokers, 17% down, 97% delivered)"
    );
    println!(
        "delivered: share of the deliveries the oracle expects between live clients; reachable: \
         the share the surviving overlay still connects (a tree cut by a crash cannot deliver across it); \
         timeouts: requests answered at their settle deadline at the live brokers"
    );
    println!(
        "{:>5} {:<17} {:>4} {:>16} {:>16} {:>11} {:>12} {:>9} {:>8}",
        "N", "shape", "k%", "during window", "after settling", "reachable", "settle ms", "timeouts", "wall s"
    );
    for &n in sizes {
        for shape in [Shape::RandomTree, Shape::Cyclic] {
            for k in [5, 10, 17, 25] {
                let started = Instant::now();
                let s = Scenario { shape, n, covering: Covering::Off, locality: false, seed };
                let (mut fed, _) = setup(s);
                let mut next = 0;
                let mut order: Vec<usize> = (0..n).collect();
                for i in 0..n {
                    let j = i + fed.rng.below((n - i) as u64) as usize;
                    order.swap(i, j);
                }
                let crashed: Vec<usize> = order[..n * k / 100].to_vec();
                for &b in &crashed {
                    fed.sim.crash(b);
                }
                let (want_a, _, got_a, _, _) = publish_round(&mut fed, 2, &mut next);
                let t0 = fed.sim.now();
                for &b in &crashed {
                    fed.sim.forget(b);
                }
                fed.sim.run();
                let settle = fed.sim.now() - t0;
                let (want_b, reach_b, got_b, _, _) = publish_round(&mut fed, 2, &mut next);
                let share = |got: u64, want: u64| 100.0 * got as f64 / want.max(1) as f64;
                let timeouts: u64 = (0..n)
                    .filter(|b| !fed.sim.is_dead(*b))
                    .map(|b| fed.sim.routers[b].settle_timeouts())
                    .sum();
                println!(
                    "{:>5} {:<17} {:>4} {:>15.1}% {:>15.1}% {:>10.1}% {:>12} {:>9} {:>8.1}",
                    n,
                    shape.label(),
                    k,
                    share(got_a, want_a),
                    share(got_b, want_b),
                    share(reach_b, want_b),
                    settle,
                    timeouts,
                    started.elapsed().as_secs_f64()
                );
            }
        }
    }
}
