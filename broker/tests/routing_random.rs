//! Randomized routing against an oracle: random trees of 3–10 brokers, random sequences
//! of advertise, subscribe, unsubscribe, unadvertise, publish bursts, client
//! disconnects, broker restarts and link failures (each followed by the link's return). After every publication the set of clients it reached must be exactly
//! the oracle's (live subscriptions that match it, the publisher excluded), with no
//! duplicates and each publisher's publications in order.
//!
//! A failure names its seed; `SIM_SEED=n cargo test -p padres-broker --test routing_random`
//! replays just that seed in every test, and `SIM_SEEDS=A..B` runs a longer range
//! (`REPLAY_SEEDS=A..B` for `a_seed_replays_message_for_message`; `SIM_TRACE=1` prints
//! every message between brokers).

mod seeds;
mod sim;

use std::collections::{BTreeMap, BTreeSet};

use padres_broker::router::{Covering, Options};
use padres_lang::wire::ErrorCode;
use padres_lang::{Advertisement, MessageId, Publication, Subscription, conforms, matches};
use sim::Sim;

/// Seeded, so every failure replays from its seed (`SIM_SEED=N`).
struct Rng(fastrand::Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(fastrand::Rng::with_seed(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[derive(Debug)]
struct Client {
    id: u64,
    broker: usize,
    advs: Vec<(MessageId, Advertisement)>,
    subs: Vec<(MessageId, Subscription)>,
}

fn random_adv(rng: &mut Rng) -> String {
    let mut text = format!("[class,eq,'{}'],[n,isPresent,0]", rng.pick(&["a", "b"]));
    if rng.below(3) > 0 {
        text += &match rng.below(3) {
            0 => format!(",[x,>,{}]", rng.below(10)),
            1 => format!(",[x,<,{}]", rng.below(10)),
            _ => ",[x,isPresent,0]".to_owned(),
        };
    }
    if rng.below(2) == 0 {
        text += *rng.pick(&[",[y,isPresent,'']", ",[y,eq,'u']", ",[y,str-prefix,'v']"]);
    }
    text
}

fn random_sub(rng: &mut Rng) -> String {
    let mut text = format!("[class,eq,'{}']", rng.pick(&["a", "b"]));
    for _ in 0..rng.below(3) {
        text += &match rng.below(4) {
            0 => format!(",[x,{},{}]", rng.pick(&["<", "<=", ">", ">=", "=", "<>"]), rng.below(10)),
            1 => format!(",[y,eq,'{}']", rng.pick(&["u", "v", "vw"])),
            2 => ",[y,str-prefix,'v']".to_owned(),
            _ => ",[x,isPresent,0]".to_owned(),
        };
    }
    text
}

fn random_pub(rng: &mut Rng, n: u64) -> String {
    let mut text = format!("[class,'{}'],[n,{n}]", rng.pick(&["a", "b"]));
    if rng.below(4) > 0 {
        text += &format!(",[x,{}]", rng.below(10));
    }
    if rng.below(2) == 0 {
        text += &format!(",[y,'{}']", rng.pick(&["u", "v", "vw"]));
    }
    text
}

/// How large a federation a seed builds.
#[derive(Clone, Copy, Debug)]
enum Size {
    /// 3 to 10 brokers, 6 clients, one to three extra links with cycles.
    Small,
    /// 100 brokers, 40 clients, 25 extra links with cycles, and messages delayed by up to
    /// 50 ms more at random (so floods race each other around the loops, and a shorter
    /// path is often found after the first).
    Large,
}

/// Runs one seed; returns every delivery as (publication number, client), in order.
fn run_seed(seed: u64, options: Options) -> Vec<(i64, u64)> {
    run(seed, options, Size::Small, false).0
}

/// Runs `seed`: the deliveries, in order, as (publication number, client), and with
/// `digest`, the digest of every message between brokers.
fn run(seed: u64, options: Options, size: Size, digest: bool) -> (Vec<(i64, u64)>, Option<u64>) {
    let mut rng = Rng::new(seed);
    let brokers = match size {
        Size::Small => 3 + rng.below(8) as usize,
        Size::Large => 100,
    };
    let mut sim = Sim::with_options(brokers, options);
    if digest {
        sim.digest_messages();
    }
    let mut edges = Vec::new();
    for b in 1..brokers {
        let parent = rng.below(b as u64) as usize;
        edges.push((parent, b));
        sim.link(b, parent, 1 + rng.below(10));
    }
    if options.cycles {
        let extra = match size {
            // One to three extra links close cycles.
            Size::Small => 1 + rng.below(3),
            Size::Large => brokers as u64 / 4,
        };
        for _ in 0..extra {
            let (a, b) = (rng.below(brokers as u64) as usize, rng.below(brokers as u64) as usize);
            if a != b && !edges.contains(&(a.min(b), a.max(b))) {
                edges.push((a.min(b), a.max(b)));
                sim.link(a, b, 1 + rng.below(10));
            }
        }
    }
    let clients_n = match size {
        Size::Small => 6,
        Size::Large => {
            sim.set_jitter(100, seed);
            40
        }
    };
    // In a large federation every broker advertises its own reports as it starts, all at
    // once, as `padres-broker` does (client ids from 1,000,000, one per broker).
    let reporters = match size {
        Size::Small => 0,
        Size::Large => brokers,
    };
    for b in 0..reporters {
        report(&mut sim, b);
    }
    let mut clients: Vec<Client> = Vec::new();
    let mut next_client = 1;
    for _ in 0..clients_n {
        let broker = rng.below(brokers as u64) as usize;
        sim.attach(next_client, broker);
        clients.push(Client { id: next_client, broker, advs: Vec::new(), subs: Vec::new() });
        next_client += 1;
    }
    sim.run();
    let mut published = 0_u64;
    for step in 0..60 {
        let c = rng.below(clients.len() as u64) as usize;
        match rng.below(11) {
            0 | 1 => {
                let text = random_adv(&mut rng);
                // Not run to quiet: what follows relies on the settled reply alone.
                let id = sim.id_settled(clients[c].id, &format!("a {text}"));
                clients[c].advs.push((id, text.parse().expect("valid")));
            }
            2 | 3 => {
                let text = random_sub(&mut rng);
                let id = sim.id_settled(clients[c].id, &format!("s {text}"));
                clients[c].subs.push((id, text.parse().expect("valid")));
            }
            4 if !clients[c].subs.is_empty() => {
                let i = rng.below(clients[c].subs.len() as u64) as usize;
                let (id, _) = clients[c].subs.swap_remove(i);
                assert_eq!(
                    sim.call(clients[c].id, &format!("unsub {id}")),
                    Ok(None),
                    "seed {seed} step {step}"
                );
            }
            5 if !clients[c].advs.is_empty() => {
                let i = rng.below(clients[c].advs.len() as u64) as usize;
                let (id, _) = clients[c].advs.swap_remove(i);
                assert_eq!(
                    sim.call(clients[c].id, &format!("unadv {id}")),
                    Ok(None),
                    "seed {seed} step {step}"
                );
            }
            6 if rng.below(2) == 0 => {
                sim.disconnect(clients[c].id);
                sim.run();
                let broker = rng.below(brokers as u64) as usize;
                sim.attach(next_client, broker);
                clients[c] = Client { id: next_client, broker, advs: Vec::new(), subs: Vec::new() };
                next_client += 1;
            }
            6 if rng.below(4) == 0 => {
                // A broker restarts: its clients are gone; fresh ones take their place.
                let broker = clients[c].broker;
                sim.restart(broker);
                if broker < reporters {
                    report(&mut sim, broker);
                }
                sim.run();
                for client in clients.iter_mut().filter(|k| k.broker == broker) {
                    sim.attach(next_client, broker);
                    *client = Client { id: next_client, broker, advs: Vec::new(), subs: Vec::new() };
                    next_client += 1;
                }
            }
            6 => {
                // A link fails and comes back; everything routed over it is restored.
                let (a, b) = edges[rng.below(edges.len() as u64) as usize];
                sim.unlink(a, b);
                sim.run();
                sim.link(a, b, 1 + rng.below(10));
                sim.run();
            }
            _ => {
                // A burst of publications, sent without waiting, then checked together.
                let burst = 1 + rng.below(3);
                let before = sim.deliveries.len();
                let mut sent = Vec::new();
                for _ in 0..burst {
                    published += 1;
                    // Mostly publications the client advertised, some it did not.
                    let mut text = random_pub(&mut rng, published);
                    for _ in 0..8 {
                        let p: Publication = text.parse().expect("valid");
                        if clients[c].advs.iter().any(|(_, a)| conforms(&p, a)) || rng.below(5) == 0 {
                            break;
                        }
                        text = random_pub(&mut rng, published);
                    }
                    let req = sim.send(clients[c].id, &format!("p {text}"));
                    sent.push((req, published, text.parse::<Publication>().expect("valid")));
                }
                sim.run();
                let at = format!("seed {seed} step {step}");
                check_burst(&at, &sim, &clients, c, before, &sent, options.cycles);
            }
        }
    }
    // Once every client is gone, no broker may keep any routing state.
    for client in &clients {
        sim.disconnect(client.id);
    }
    for b in 0..reporters {
        sim.disconnect(REPORTER + b as u64);
    }
    sim.run();
    for b in 0..brokers {
        let routes = sim.routes(b);
        let empty = routes.srt.is_empty() && routes.prt.is_empty() && routes.tree_prt.is_empty();
        assert!(empty, "seed {seed}: B{} kept {routes:?}", b + 1);
        assert_eq!(sim.unsettled(b), 0, "seed {seed}: B{} has requests that never settled", b + 1);
        let late = sim.routers[b].settle_timeouts();
        assert_eq!(late, 0, "seed {seed}: B{} answered {late} requests at their deadline, unsettled", b + 1);
    }
    let delivered = sim
        .deliveries
        .iter()
        .filter_map(|d| match d.publication.get("n") {
            Some(padres_lang::Value::Int(n)) => Some((*n, d.client)),
            _ => None,
        })
        .collect();
    (delivered, sim.messages_digest())
}

/// The client id of broker `b`'s own reports ([`Size::Large`]).
const REPORTER: u64 = 1_000_000;

/// Broker `b` advertises its reports, without waiting for the reply.
fn report(sim: &mut Sim, b: usize) {
    let client = REPORTER + b as u64;
    sim.attach(client, b);
    sim.send(client, &format!("a [class,eq,'broker_report'],[broker,eq,'B{}'],[n,isPresent,0]", b + 1));
}

fn check_burst(
    at: &str,
    sim: &Sim,
    clients: &[Client],
    c: usize,
    before: usize,
    sent: &[(u64, u64, Publication)],
    per_advertisement: bool,
) {
    let publisher = &clients[c];
    let delivered = &sim.deliveries[before..];
    for (req, n, p) in sent {
        let advertised = publisher.advs.iter().any(|(_, a)| conforms(p, a));
        let reply = sim.replies.get(&(publisher.id, *req)).expect("answered");
        if advertised {
            assert_eq!(reply, &Ok(None), "{at}: {p}");
        } else {
            assert!(matches!(reply, Err((ErrorCode::NotAdvertised, _))), "{at}: {p} got {reply:?}");
        }
        let expected: BTreeSet<u64> = if advertised {
            clients
                .iter()
                .filter(|other| other.id != publisher.id && other.subs.iter().any(|(_, s)| matches(s, p)))
                .map(|other| other.id)
                .collect()
        } else {
            BTreeSet::new()
        };
        let got: Vec<u64> = delivered
            .iter()
            .filter(|d| d.publication.get("n") == Some(&padres_lang::Value::Int(*n as i64)))
            .map(|d| d.client)
            .collect();
        let got_set: BTreeSet<u64> = got.iter().copied().collect();
        assert_eq!(got.len(), got_set.len(), "{at}: duplicate deliveries of {p}");
        assert_eq!(got_set, expected, "{at}: receivers of {p}");
    }
    // Each subscriber saw this publisher's burst in the order it was sent. With cycles the
    // order holds per advertisement (each has its own tree): the router sends a
    // publication on the first of the publisher's advertisements it conforms to.
    let tree_of = |p: &Publication| {
        if per_advertisement {
            publisher.advs.iter().filter(|(_, a)| conforms(p, a)).map(|(id, _)| id.clone()).min()
        } else {
            None
        }
    };
    for other in clients {
        let mut seen: Vec<(Option<MessageId>, i64)> = Vec::new();
        for d in delivered.iter().filter(|d| d.client == other.id) {
            if let Some(padres_lang::Value::Int(n)) = d.publication.get("n") {
                seen.push((tree_of(&d.publication), *n));
            }
        }
        for (i, (tree, n)) in seen.iter().enumerate() {
            let earlier_later = seen[..i].iter().any(|(t, m)| t == tree && m > n);
            assert!(!earlier_later, "{at}: out of order {seen:?}");
        }
    }
}

#[test]
fn random_trees_deliver_exactly_what_the_oracle_says() {
    let seeds = seeds::seeds("SIM_SEED", "SIM_SEEDS", 1000);
    let n = seeds.len();
    let delivered: usize = seeds.into_iter().map(|seed| run_seed(seed, Options::default()).len()).sum();
    // The workload is dense enough that the oracle's sets are mostly non-empty.
    assert!(n < 1000 || delivered > 5 * n, "only {delivered} deliveries in {n} seeds");
}

/// A seed replays: the same messages between brokers in the same order, and the same
/// deliveries, however this process seeds the routers' hash maps (each map is seeded
/// anew). Without it a failing seed could not be replayed to be understood.
#[test]
fn a_seed_replays_message_for_message() {
    let modes = [
        Options::default(),
        Options { covering: Covering::Active, ..Options::default() },
        Options { cycles: true, ..Options::default() },
        Options { cycles: true, covering: Covering::Lazy, ..Options::default() },
    ];
    for seed in seeds::seeds("SIM_SEED", "REPLAY_SEEDS", 50) {
        for options in modes {
            let first = run(seed, options, Size::Small, true);
            assert!(first.1.is_some());
            assert!(
                run(seed, options, Size::Small, true) == first,
                "seed {seed} did not replay with {options:?}"
            );
        }
    }
}

/// What each client received. Covering must not change it. The order may change between
/// publications of different publishers or different advertisements (the order that is
/// promised, per publisher and advertisement, `check_burst` checks in every run): covering
/// changes how many messages travel, and with them the virtual moments things arrive.
fn per_client(deliveries: Vec<(i64, u64)>) -> BTreeMap<u64, Vec<i64>> {
    let mut by_client: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (n, client) in deliveries {
        by_client.entry(client).or_default().push(n);
    }
    for received in by_client.values_mut() {
        received.sort_unstable();
    }
    by_client
}

fn covering_changes_no_delivery(cycles: bool) {
    for seed in seeds::seeds("SIM_SEED", "SIM_SEEDS", 500) {
        let off = per_client(run_seed(seed, Options { cycles, ..Options::default() }));
        for covering in [Covering::Lazy, Covering::Active] {
            let with = per_client(run_seed(seed, Options { covering, cycles, ..Options::default() }));
            assert_eq!(with, off, "seed {seed}: {covering:?} (cycles {cycles}) delivered differently");
        }
    }
}

#[test]
fn covering_changes_no_delivery_in_trees() {
    covering_changes_no_delivery(false);
}

#[test]
fn covering_changes_no_delivery_with_cycles() {
    covering_changes_no_delivery(true);
}

#[test]
fn random_graphs_with_cycles_deliver_exactly_once() {
    let cycles = Options { cycles: true, ..Options::default() };
    let seeds = seeds::seeds("SIM_SEED", "SIM_SEEDS", 1000);
    let n = seeds.len();
    let delivered: usize = seeds.into_iter().map(|seed| run_seed(seed, cycles).len()).sum();
    assert!(n < 1000 || delivered > 5 * n, "only {delivered} deliveries in {n} seeds");
}

/// 100 brokers, as a tree and with cycles, each covering mode: the same oracle as the small
/// federations (every live matching subscriber, once, in order; no routing state and no
/// unsettled request left at the end) over a larger overlay whose floods race each other.
/// Before answers to later copies of an advertisement stopped waiting (`settle.rs`), most
/// cyclic seeds here left an `advertise` unanswered. `LARGE_SEEDS=A..B` searches longer.
#[test]
fn hundred_broker_overlays_deliver_exactly_what_the_oracle_says() {
    // A seed may publish nothing that anyone wants (the oracle then expects nothing); every
    // mode must deliver something over the seeds run.
    let mut delivered: BTreeMap<String, usize> = BTreeMap::new();
    for seed in seeds::seeds("SIM_SEED", "LARGE_SEEDS", 3) {
        for cycles in [false, true] {
            for covering in [Covering::Off, Covering::Lazy, Covering::Active] {
                let options = Options { cycles, covering, ..Options::default() };
                let mode = format!("cycles {cycles}, {covering:?}");
                *delivered.entry(mode).or_default() += run(seed, options, Size::Large, false).0.len();
            }
        }
    }
    for (mode, n) in delivered {
        assert!(n > 0, "{mode}: nothing was delivered in any seed");
    }
}
