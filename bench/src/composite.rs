//! Composite subscriptions: (a) link traffic in the simulator, detection in the network
//! against detection at the subscriber's broker and against equivalent atomic
//! subscriptions; (b) detection throughput at one broker (the sans-IO router: matching,
//! detection and routing of the matches) and the memory of a stored partial match, against
//! the reference detector. The latency through a chain of real brokers is in `quic.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use padres_broker::detector::{Bounds, Counters, Detectors};
use padres_broker::net::detection::{Batch, Detected, DetectionThread};
use padres_broker::router::{Detection, DetectorOp, Input, Options, Output, Router};
use padres_broker::sim::Sim;
use padres_lang::semantics::composite::detect;
use padres_lang::{CompositeSubscription, Message, Name, Publication, Stamp, Stamped, Value};

use crate::workload::Rng;
use crate::{ALLOCS, COUNTING, LIVE};

/// How the subscribers of the traffic benchmark subscribe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Composite subscriptions detected in the network.
    Network,
    /// Composite subscriptions detected at the subscriber's broker.
    AtSubscriber,
    /// Each leaf as an atomic subscription (the client would join them itself).
    Atomic,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Self::Network => "composite, detected in the network",
            Self::AtSubscriber => "composite, detected at the subscriber's broker",
            Self::Atomic => "equivalent atomic subscriptions",
        }
    }
}

/// What one traffic run counted.
#[derive(Debug)]
struct Traffic {
    subscribe_messages: u64,
    publish_messages: u64,
    notifications: usize,
    publications: usize,
}

const CLASSES: usize = 10;
const LEAVES: usize = 5;
/// Symbols in the selective workload.
const SYMBOLS: usize = 20;

/// Who subscribes to what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Leaves on whole classes, subscribers at any broker: each class's publications are
    /// wanted nearly everywhere.
    Dense,
    /// Leaves on a class and one of 20 symbols, subscribers at the edge (leaf) brokers:
    /// each publication is wanted by a few patterns.
    Selective,
}

/// The 15-broker binary tree (B1 the root, B8..B15 the leaves), publishers of the ten
/// classes spread over the leaves, `subs` subscribers of five-class patterns at random
/// brokers, and `rounds` rounds of publications (each class published with probability
/// 1/2, all with the round's `g`).
fn traffic_run(shape: Shape, mode: Mode, subs: usize, rounds: usize, seed: u64) -> Traffic {
    let options = Options {
        detect_at_subscriber: mode == Mode::AtSubscriber,
        detector_bounds: Bounds { lateness_ms: 0, ..Bounds::default() },
        ..Options::default()
    };
    let mut sim = Sim::with_options(15, options);
    for child in 1..15 {
        sim.link((child - 1) / 2, child, 1);
    }
    sim.run();
    for class in 0..CLASSES {
        let client = 1000 + class as u64;
        sim.attach(client, 7 + class % 8);
        sim.id(client, &format!("a [class,eq,'c{class}'],[sym,isPresent,''],[g,isPresent,0]"));
    }
    let mut rng = Rng::new(seed);
    let before = sim.link_messages();
    for s in 0..subs {
        let client = s as u64;
        let broker = match shape {
            Shape::Dense => rng.below(15) as usize,
            Shape::Selective => 7 + rng.below(8) as usize,
        };
        sim.attach(client, broker);
        let mut classes: Vec<usize> = (0..CLASSES).collect();
        for i in 0..LEAVES {
            let j = i + rng.below((CLASSES - i) as u64) as usize;
            classes.swap(i, j);
        }
        let leaves: Vec<String> = classes[..LEAVES]
            .iter()
            .map(|c| match shape {
                Shape::Dense => format!("[class,eq,'c{c}'],[g,=,$I$g]"),
                Shape::Selective => {
                    format!("[class,eq,'c{c}'],[sym,eq,'S{}'],[g,=,$I$g]", rng.below(SYMBOLS as u64))
                }
            })
            .collect();
        match mode {
            Mode::Atomic => {
                for leaf in &leaves {
                    sim.id(client, &format!("s {}", leaf.replace("[g,=,$I$g]", "[g,isPresent,0]")));
                }
            }
            Mode::Network | Mode::AtSubscriber => {
                let pattern: Vec<String> = leaves.iter().map(|l| format!("{{{l}}}")).collect();
                sim.id(client, &format!("cs {} within 20ms", pattern.join("&")));
            }
        }
    }
    sim.run();
    let subscribe_messages = sim.link_messages() - before;
    let before = sim.link_messages();
    let mut publications = 0;
    for round in 0..rounds {
        for class in 0..CLASSES {
            // Dense: each class with probability 1/2. Selective: each class on 10 symbols.
            let symbols: Vec<usize> = match shape {
                Shape::Dense if rng.below(2) == 0 => vec![0],
                Shape::Dense => Vec::new(),
                Shape::Selective => (0..SYMBOLS).filter(|_| rng.below(2) == 0).collect(),
            };
            for sym in symbols {
                sim.send(1000 + class as u64, &format!("p [class,'c{class}'],[sym,'S{sym}'],[g,{round}]"));
                publications += 1;
            }
        }
        sim.run();
        sim.advance(50);
    }
    if std::env::var_os("TRAFFIC_KINDS").is_some() {
        eprintln!("{mode:?}: {:?}", sim.kinds);
    }
    let notifications = match mode {
        Mode::Atomic => sim.deliveries.len(),
        Mode::Network | Mode::AtSubscriber => sim.composite_deliveries.len(),
    };
    Traffic {
        subscribe_messages,
        publish_messages: sim.link_messages() - before,
        notifications,
        publications,
    }
}

/// (a): messages on links, in-network detection against the two baselines, for both
/// shapes of subscription.
pub(crate) fn traffic(quick: bool, seed: u64) {
    for shape in [Shape::Selective, Shape::Dense] {
        traffic_shape(shape, quick, seed);
    }
}

fn traffic_shape(shape: Shape, quick: bool, seed: u64) {
    let (subs, rounds) = match (shape, quick) {
        (Shape::Dense, true) => (200, 300),
        (Shape::Dense, false) => (200, 2_000),
        (Shape::Selective, true) => (200, 50),
        (Shape::Selective, false) => (200, 300),
    };
    let what = match shape {
        Shape::Dense => {
            "dense: leaves on whole classes, subscribers at any broker, each class published with p=1/2 per round"
        }
        Shape::Selective => {
            "selective: leaves on a class and one of 20 symbols, subscribers at the 8 leaf brokers, each (class, symbol) published with p=1/2 per round"
        }
    };
    println!(
        "\ncomposite traffic (simulator), {what}: 15-broker binary tree, 10 classes published at the 8 leaves, \
         {subs} subscribers of 5-leaf and-patterns joined on $I$g within 20ms (= {} atomic subscriptions), {rounds} rounds",
        subs * LEAVES
    );
    let runs: Vec<(Mode, Traffic)> = [Mode::Network, Mode::AtSubscriber, Mode::Atomic]
        .into_iter()
        .map(|mode| (mode, traffic_run(shape, mode, subs, rounds, seed)))
        .collect();
    for (mode, t) in &runs {
        println!(
            "  {:<48} subscribe {:>7} msgs  publish {:>8} msgs  notifications {:>7}  ({} publications)",
            mode.label(),
            t.subscribe_messages,
            t.publish_messages,
            t.notifications,
            t.publications
        );
    }
    let (network, at_subscriber, atomic) = (&runs[0].1, &runs[1].1, &runs[2].1);
    println!(
        "  link messages while publishing: network / at-subscriber {:.2} ({:.0}% fewer), network / atomic {:.2}",
        network.publish_messages as f64 / at_subscriber.publish_messages.max(1) as f64,
        100.0 * (1.0 - network.publish_messages as f64 / at_subscriber.publish_messages.max(1) as f64),
        network.publish_messages as f64 / atomic.publish_messages.max(1) as f64,
    );
    assert_eq!(
        network.notifications, at_subscriber.notifications,
        "both detections must give the same matches"
    );
}

/// A workflow-like workload: subscription `i` waits for jobs `J0..Jk` (k = 2..5) of
/// application `A<i>` in one generation (`$S$g`), until the generation's `END`.
fn workflow_pattern(i: usize) -> CompositeSubscription {
    let k = 2 + i % 4;
    let leaves: Vec<String> = (0..k)
        .map(|x| format!("{{[class,eq,'job_status'],[appl,eq,'A{i}'],[job,eq,'J{x}'],[gid,eq,$S$g]}}"))
        .collect();
    format!(
        "{} until {{[class,eq,'job_status'],[appl,eq,'A{i}'],[job,eq,'END'],[gid,eq,$S$g]}}",
        leaves.join("&")
    )
    .parse()
    .expect("a pattern")
}

fn status(appl: usize, job: &str, gid: usize) -> Publication {
    let name = |n: &str| Name::interned(n).expect("a name");
    Publication::new(vec![
        (name("class"), Value::str("job_status")),
        (name("appl"), Value::str(&format!("A{appl}"))),
        (name("job"), Value::str(job)),
        (name("gid"), Value::str(&format!("g{gid}"))),
    ])
    .expect("a publication")
}

/// `generations` generations of random applications among `apps`: each job's status in a
/// random order, then the generation's end.
fn workflow_stream(apps: usize, generations: usize, seed: u64) -> Vec<Publication> {
    let mut rng = Rng::new(seed);
    let mut stream = Vec::new();
    for gid in 0..generations {
        let appl = rng.below(apps as u64) as usize;
        let mut jobs: Vec<usize> = (0..2 + appl % 4).collect();
        for i in (1..jobs.len()).rev() {
            jobs.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for job in jobs {
            stream.push(status(appl, &format!("J{job}"), gid));
        }
        stream.push(status(appl, "END", gid));
    }
    stream
}

/// A router with `apps` workflow patterns from 100 clients and a publisher (client 0).
/// With `offload`, detection is left to the caller: the second value is the router's
/// [`Output::Detect`]s so far (starting the detectors), to be applied first.
fn workflow_router(apps: usize, offload: bool) -> (Router, Vec<(u64, DetectorOp)>) {
    let options = Options { offload_detection: offload, ..Options::default() };
    let mut router = Router::with_options(Name::new("B1").expect("name"), options);
    let mut out = Vec::new();
    let mut ops = Vec::new();
    let mut send = |router: &mut Router, client: u64, message: Message| {
        router.handle(0, Input::Client { client, req: Some(1), message }, &mut out);
        take_ops(&mut out, &mut ops);
    };
    let adv = "[class,eq,'job_status'],[appl,isPresent,''],[job,isPresent,''],[gid,isPresent,'']";
    send(&mut router, 0, Message::Advertise(adv.parse().expect("an advertisement")));
    for i in 0..apps {
        send(&mut router, 1 + (i % 100) as u64, Message::CompositeSubscribe(workflow_pattern(i)));
    }
    (router, ops)
}

/// Moves the detector ops among `out` to `ops`, dropping the rest.
fn take_ops(out: &mut Vec<Output>, ops: &mut Vec<(u64, DetectorOp)>) {
    ops.extend(out.drain(..).filter_map(|o| match o {
        Output::Detect { now, op } => Some((now, op)),
        _ => None,
    }));
}

/// A detection stage for `router` (offloaded) with its detectors started by `setup`.
fn started(router: &Router, setup: Vec<(u64, DetectorOp)>) -> Detection {
    let mut detection = Detection::new(*router.detector_bounds());
    let mut ignored = Vec::new();
    for (now, op) in setup {
        detection.apply(now, op, &mut ignored);
    }
    detection
}

/// The messages that publish `stream`, as a broker receives them: decoded from a
/// client's frames, and owned.
fn received(stream: &[Publication]) -> Vec<Message> {
    stream
        .iter()
        .map(|p| Message::Publish(crate::peers::decode(&crate::peers::encode(p)).expect("decodes")))
        .collect()
}

/// Publishes `stream` into `router`; returns (matches, elapsed). The messages are made
/// ([`received`]) before the clock starts.
fn publish_all(router: &mut Router, stream: &[Publication]) -> (usize, Duration) {
    publish_messages(router, received(stream))
}

/// [`publish_all`] after its messages are made (not inlined: a profiler can count this
/// alone).
#[inline(never)]
fn publish_messages(router: &mut Router, messages: Vec<Message>) -> (usize, Duration) {
    let mut out = Vec::new();
    let mut matches = 0;
    let start = Instant::now();
    for (n, message) in messages.into_iter().enumerate() {
        router.handle(n as u64, Input::Client { client: 0, req: None, message }, &mut out);
        matches += out.iter().filter(|o| matches!(o, Output::CompositeNotify { .. })).count();
        out.clear();
    }
    let elapsed = start.elapsed();
    // Past every lateness allowance: what the generations' ends ended goes.
    router.handle_timeout(u64::MAX, &mut Vec::new());
    (matches, elapsed)
}

/// How many publications a broker's router task handles before it hands their detector
/// ops to the detection thread (its `EVENT_BATCH`, when events wait).
const ROUND: usize = 256;

/// Publishes `stream` into `router` (offloaded) with detection on a [`DetectionThread`],
/// as a broker does by default: the router's detector ops go to the thread a round of
/// [`ROUND`] publications at a time, after `setup` (the ops that started the detectors).
/// Returns (matches, elapsed until the thread has applied the last op, the detectors'
/// counters once every lateness allowance has passed).
fn publish_pipelined(
    router: &mut Router,
    setup: Vec<(u64, DetectorOp)>,
    stream: &[Publication],
) -> (usize, Duration, Counters) {
    publish_pipelined_messages(router, setup, received(stream))
}

/// [`publish_pipelined`] after its messages are made.
#[inline(never)]
fn publish_pipelined_messages(
    router: &mut Router,
    setup: Vec<(u64, DetectorOp)>,
    messages: Vec<Message>,
) -> (usize, Duration, Counters) {
    let (thread, mut detected) = DetectionThread::spawn(started(router, setup)).expect("a detection thread");
    // As the router task does, the publications the thread let go of are dropped here.
    let count = |detected: Detected| {
        detected.outputs.iter().filter(|o| matches!(o, Output::CompositeNotify { .. })).count()
    };
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut matches = 0;
    let published = messages.len() as u64;
    let start = Instant::now();
    for (n, message) in messages.into_iter().enumerate() {
        router.handle(n as u64, Input::Client { client: 0, req: None, message }, &mut out);
        for output in out.drain(..) {
            match output {
                Output::Detect { now, op } => batch.push((now, op)),
                Output::CompositeNotify { .. } => matches += 1,
                _ => {}
            }
        }
        if (n + 1) % ROUND == 0 {
            let round = Batch { ops: std::mem::take(&mut batch), until: n as u64 };
            assert!(thread.blocking_send(round), "the detection thread stopped");
            while let Ok(outputs) = detected.try_recv() {
                matches += count(outputs);
            }
        }
    }
    let last = Batch { ops: batch, until: published.saturating_sub(1) };
    assert!(thread.blocking_send(last), "the detection thread stopped");
    let mut detection = thread.stop();
    while let Ok(outputs) = detected.try_recv() {
        matches += count(outputs);
    }
    let elapsed = start.elapsed();
    // Past every lateness allowance, as `publish_messages` does after its clock stops.
    detection.handle_timeout(u64::MAX);
    (matches, elapsed, detection.counters())
}

/// (b): publications per second through one broker's router with 10,000 workflow
/// patterns, bytes per stored partial match, and the reference detector on a sample.
pub(crate) fn throughput(quick: bool, seed: u64, repeat: usize) {
    let apps = 10_000;
    let generations = if quick { 20_000 } else { 200_000 };
    let stream = workflow_stream(apps, generations, seed);
    println!(
        "\ncomposite detection at one broker (sans-IO router: matching, detection, notifications): \
         {apps} and-patterns of 2-5 leaves joined on $S$g with until, {} publications ({generations} generations)",
        stream.len()
    );
    let mut rates = Vec::new();
    let mut matched = 0;
    let mut pipelined = Vec::new();
    for _ in 0..repeat.max(1) {
        let (mut router, _) = workflow_router(apps, false);
        let (matches, elapsed) = publish_all(&mut router, &stream);
        matched = matches;
        let (counters, _, _) = router.composite_counters();
        assert_eq!(counters.stored, 0, "every generation ended: {counters:?}");
        rates.push(stream.len() as f64 / elapsed.as_secs_f64());
        drop(router);
        let (mut router, setup) = workflow_router(apps, true);
        let (matches, elapsed, counters) = publish_pipelined(&mut router, setup, &stream);
        assert_eq!(matches, matched, "detection on its own thread finds what the router finds");
        assert_eq!(counters.stored, 0, "every generation ended: {counters:?}");
        pipelined.push(stream.len() as f64 / elapsed.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    pipelined.sort_by(f64::total_cmp);
    let median = |rates: &[f64]| rates[rates.len() / 2];
    println!(
        "  router, detection on a thread of its own (the broker's default)\n             {:>10.0} publications/s  (median of {}; {:.0}-{:.0}/s)  {matched} matches, none left stored",
        median(&pipelined),
        pipelined.len(),
        pipelined[0],
        pipelined[pipelined.len() - 1]
    );
    println!(
        "  router detecting in its own thread (baseline)\n             {:>10.0} publications/s  (median of {}; {:.0}-{:.0}/s)  ratio {:.2}",
        median(&rates),
        rates.len(),
        rates[0],
        rates[rates.len() - 1],
        median(&pipelined) / median(&rates)
    );

    // The detectors alone: each publication handed to its pattern's leaf (or end) directly,
    // as the matching engine would, to separate detection from matching.
    let origin = Name::new("B1").expect("name");
    let mut detector_rates: Vec<f64> =
        (0..repeat.max(1)).map(|_| detectors_alone(apps, &stream, Some(matched))).collect();
    detector_rates.sort_by(f64::total_cmp);
    println!(
        "  detectors alone {:>8.0} publications/s  (median of {}; inputs handed over directly, no matching)",
        detector_rates[detector_rates.len() / 2],
        detector_rates.len()
    );

    // The reference on a sample: 50 applications, 400 generations.
    let sample_apps = 50;
    let sample = workflow_stream(sample_apps, 400, seed ^ 1);
    let stamped: Vec<(Stamp, Publication)> = sample
        .iter()
        .enumerate()
        .map(|(n, p)| (Stamp::new(n as u64, origin.clone(), n as u64), p.clone()))
        .collect();
    let start = Instant::now();
    let reference_matches: usize =
        (0..sample_apps).map(|i| detect(&workflow_pattern(i), &stamped).len()).sum();
    let reference = start.elapsed();
    let (mut router, _) = workflow_router(sample_apps, false);
    let (matches, elapsed) = publish_all(&mut router, &sample);
    assert_eq!(matches, reference_matches, "the detector and the reference disagree on the sample");
    println!(
        "  sample of {sample_apps} patterns, {} publications: router {:.0}/s, reference {:.0}/s, ratio {:.0}x ({matches} matches, equal)",
        sample.len(),
        sample.len() as f64 / elapsed.as_secs_f64(),
        sample.len() as f64 / reference.as_secs_f64(),
        reference.as_secs_f64() / elapsed.as_secs_f64()
    );

    // Memory: 10,000 detectors, each holding partial matches that never complete.
    let mut detectors = Detectors::new(Bounds::default());
    let patterns: Vec<CompositeSubscription> =
        (0..apps).map(|i| workflow_pattern(i).without_options()).collect();
    let ids: Vec<_> = patterns.iter().map(|cs| detectors.add(cs)).collect();
    let publications: Vec<Arc<Stamped>> = (0..apps * 10)
        .map(|n| {
            let stamp = Stamp::new(n as u64, origin.clone(), n as u64);
            Arc::new(Stamped { stamp, publication: Arc::new(status(n % apps, "J0", n)) })
        })
        .collect();
    COUNTING.store(true, Ordering::Relaxed);
    let before = LIVE.load(Ordering::Relaxed);
    let mut out = Vec::new();
    for (n, p) in publications.iter().enumerate() {
        detectors.publication(ids[n % apps], 0, p, &mut out);
    }
    let stored = detectors.counters().stored;
    let bytes = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    COUNTING.store(false, Ordering::Relaxed);
    println!(
        "  memory     {} B per stored partial match ({stored} stored; the publications themselves are shared, not counted)",
        bytes / usize::try_from(stored).unwrap_or(1).max(1)
    );
}

/// The detectors alone: each publication of `stream` handed to its pattern's leaf (or
/// end) directly, as the matching engine would; publications per second. Checks the
/// number of matches against `expected` if given.
fn detectors_alone(apps: usize, stream: &[Publication], expected: Option<usize>) -> f64 {
    let origin = Name::new("B1").expect("name");
    let mut detectors = Detectors::new(Bounds::default());
    let ids: Vec<_> = (0..apps).map(|i| detectors.add(&workflow_pattern(i))).collect();
    let inputs: Vec<(usize, Option<usize>, Arc<Stamped>)> = stream
        .iter()
        .enumerate()
        .map(|(n, p)| {
            let text = |a: &str| p.get(a).and_then(Value::as_str).unwrap_or_default().to_owned();
            let appl: usize = text("appl")[1..].parse().expect("A<i>");
            let leaf = text("job").strip_prefix('J').map(|j| j.parse().expect("J<x>"));
            let stamp = Stamp::new(n as u64, origin.clone(), n as u64);
            (appl, leaf, Arc::new(Stamped { stamp, publication: Arc::new(p.clone()) }))
        })
        .collect();
    let mut out = Vec::new();
    let start = Instant::now();
    for (n, (appl, leaf, p)) in inputs.iter().enumerate() {
        detectors.handle_timeout(n as u64);
        match leaf {
            Some(leaf) => detectors.publication(ids[*appl], *leaf, p, &mut out),
            None => detectors.end(n as u64, ids[*appl], p),
        }
    }
    let elapsed = start.elapsed();
    if let Some(expected) = expected {
        assert_eq!(out.len(), expected, "the detectors alone find what the router found");
    }
    stream.len() as f64 / elapsed.as_secs_f64()
}

/// The two stages of [`publish_pipelined`] timed apart, each on one thread: the router
/// with detection offloaded (its outputs collected and dropped), then the detector ops it
/// produced applied to a [`Detection`] (made beforehand, outside the clock).
fn stages(apps: usize, stream: &[Publication]) {
    let (mut router, setup) = workflow_router(apps, true);
    let messages = received(stream);
    let mut out = Vec::new();
    let mut ops = Vec::new();
    let start = Instant::now();
    for (n, message) in messages.into_iter().enumerate() {
        router.handle(n as u64, Input::Client { client: 0, req: None, message }, &mut out);
        take_ops(&mut out, &mut ops);
    }
    let routing = start.elapsed();
    let mut detection = started(&router, setup);
    let mut matches = 0;
    let start = Instant::now();
    // A round of the router task at a time, as the detection thread applies them.
    let mut ops = ops.into_iter();
    loop {
        let round: Vec<_> = ops.by_ref().take(ROUND).collect();
        if round.is_empty() {
            break;
        }
        detection.apply_all(round, &mut out);
        matches += out.drain(..).filter(|o| matches!(o, Output::CompositeNotify { .. })).count();
    }
    let detecting = start.elapsed();
    let rate = |d: Duration| stream.len() as f64 / d.as_secs_f64();
    println!(
        "routing (detection offloaded) {:.0}/s; detection stage {:.0}/s ({matches} matches)",
        rate(routing),
        rate(detecting)
    );
}

/// Profiling aid (`PROFILE_ONLY=router`, `=pipelined`, `=stages` or `=detectors`): one
/// part of (b), larger.
/// `PROFILE_APPS` sets the number of patterns (10,000), `PROFILE_GENERATIONS` the router
/// run's generations (100,000), `PROFILE_ALLOCS=1` counts the router's allocations too.
pub(crate) fn profile(what: &str, seed: u64) {
    let apps: usize = std::env::var("PROFILE_APPS").ok().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    match what {
        "router" | "pipelined" | "stages" => {
            let generations = std::env::var("PROFILE_GENERATIONS").ok().and_then(|g| g.parse().ok());
            let stream = workflow_stream(apps, generations.unwrap_or(100_000), seed);
            if what == "stages" {
                stages(apps, &stream);
                return;
            }
            let (mut router, setup) = workflow_router(apps, what == "pipelined");
            let (matches, elapsed) = if what == "pipelined" {
                let (matches, elapsed, _) = publish_pipelined(&mut router, setup, &stream);
                (matches, elapsed)
            } else {
                publish_all(&mut router, &stream)
            };
            println!("{matches} matches, {:.0}/s", stream.len() as f64 / elapsed.as_secs_f64());
            if std::env::var_os("PROFILE_ALLOCS").is_none() {
                return;
            }
            // Again, counting allocations (slower: every allocation counts atomically).
            let (mut router, _) = workflow_router(apps, false);
            let messages = received(&stream);
            let before = ALLOCS.load(Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
            publish_messages(&mut router, messages);
            COUNTING.store(false, Ordering::Relaxed);
            let allocs = ALLOCS.load(Ordering::Relaxed) - before;
            println!("{:.1} allocations per publication", allocs as f64 / stream.len() as f64);
        }
        _ => {
            let stream = workflow_stream(apps, 1_000_000, seed);
            println!("{:.0}/s", detectors_alone(apps, &stream, None));
        }
    }
}
