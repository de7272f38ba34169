//! Brokers over QUIC, end to end: publications per second and latency through one broker
//! and a three-broker chain, and selective fan-out; the same message counts through
//! nats-server and mosquitto when they are installed. Their fan-out runs twice: all on one
//! subject with subscribers filtering by content (what content routing saves them), and
//! with a subject per bucket (how their users would lay out a workload whose selection is
//! known in advance; content routing is not needed there, so this is their best case).
//!
//! Every publication has 5 attributes (class, symbol or bucket, price, volume, and `t`, the
//! send time in nanoseconds since the run began, read by the subscriber for latency) and a
//! 100-byte payload. Brokers run in this process on loopback QUIC endpoints; the clients
//! are the `padres-client` library. nats-server and mosquitto run as child processes on
//! loopback ports chosen here, driven by small pipelined protocol clients (`peers.rs`)
//! that carry the publication encoded with the padres wire codec, so their subscribers
//! decode and match it with the reference semantics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use padres_broker::config::Config;
use padres_client::{Client, Connect, Notification};
use padres_lang::{Name, Publication, Subscription, Value, matches};
use tokio::sync::mpsc;

use crate::peers::{self, Peer, PeerKind};
use crate::{fmt, percentiles};

/// What can be run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// One publisher, one subscriber, one broker.
    OneBroker,
    /// One publisher, one subscriber, a 3-broker chain.
    Chain,
    /// 100 subscribers each selecting 1% of the publications.
    FanOut,
    /// A 2-leaf composite subscription through a 3-broker chain, paced, next to an atomic
    /// subscription's run on the same brokers.
    Composite,
    /// One broker at max rate with a history store keeping every publication (durability
    /// normal), alternating with one without.
    Stored,
}

/// Run sizes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// Publications per throughput run.
    pub(crate) count: usize,
    /// Subscriptions installed besides the measured one.
    pub(crate) others: usize,
    /// Publications per second in the paced latency run.
    pub(crate) rate: u64,
    /// Length of the paced run.
    pub(crate) paced: Duration,
    /// Subscribers in the fan-out run.
    pub(crate) fan_out: usize,
    /// Publications in the fan-out run (each reaches one padres subscriber, and every
    /// subscriber of a peer server).
    pub(crate) fan_count: usize,
    /// Runs of each scenario; the median by rate is reported.
    pub(crate) repeat: usize,
}

impl Sizes {
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self {
                count: 50_000,
                others: 10_000,
                rate: 10_000,
                paced: Duration::from_secs(1),
                fan_out: 100,
                fan_count: 10_000,
                repeat: 3,
            }
        } else {
            Self {
                count: 300_000,
                others: 10_000,
                rate: 10_000,
                paced: Duration::from_secs(3),
                fan_out: 100,
                fan_count: 50_000,
                repeat: 3,
            }
        }
    }
}

/// What one run measured.
#[derive(Debug)]
struct Outcome {
    /// Useful deliveries (publications that matched the receiver's subscription).
    delivered: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Outcome {
    fn per_second(&self) -> f64 {
        self.delivered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn line(&self, what: &str) -> String {
        let (p50, p99) = percentiles(self.latencies.clone());
        format!(
            "{what:<44} {:>12.0}/s  p50 {:>10}  p99 {:>10}  ({} in {:.2} s)",
            self.per_second(),
            fmt(p50),
            fmt(p99),
            self.delivered,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Nanoseconds since `epoch`, as a publication attribute.
fn stamp(epoch: Instant) -> i64 {
    i64::try_from(epoch.elapsed().as_nanos()).unwrap_or(i64::MAX)
}

fn latency(epoch: Instant, publication: &Publication) -> Option<Duration> {
    match publication.get("t") {
        Some(Value::Int(sent)) => {
            let now = stamp(epoch);
            u64::try_from(now - sent).ok().map(Duration::from_nanos)
        }
        _ => None,
    }
}

fn name(text: &str) -> Name {
    // Shared texts, as a real publisher keeps its attribute names.
    Name::interned(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A publication of the benchmark: `class`, then `key` = `key_value`, price, volume, `t`,
/// and the 100-byte payload.
fn publication(class: &str, key: &str, key_value: Value, n: usize, epoch: Instant) -> Publication {
    let n = i64::try_from(n).unwrap_or(0);
    Publication::new(vec![
        (name("class"), Value::str(class)),
        (name(key), key_value),
        (name("price"), Value::Int(100 + n % 900)),
        (name("volume"), Value::Int(n)),
        (name("t"), Value::Int(stamp(epoch))),
    ])
    .expect("a valid publication")
    .with_payload(vec![0x5a_u8; 100])
}

/// Whether the brokers started here run composite detection on a thread of its own
/// (`padres-bench --no-detection-thread`: in the router's thread).
pub(crate) static DETECTION_THREAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub(crate) async fn start_broker(
    name: &str,
    root: &std::path::Path,
    neighbour: Option<SocketAddr>,
) -> SocketAddr {
    start_broker_with(name, root, neighbour, Vec::new()).await
}

async fn start_broker_with(
    name: &str,
    root: &std::path::Path,
    neighbour: Option<SocketAddr>,
    history: Vec<padres_broker::config::HistoryFilter>,
) -> SocketAddr {
    let mut config = Config {
        name: name.to_owned(),
        listen: ([127, 0, 0, 1], 0).into(),
        data_dir: root.join(name),
        neighbours: neighbour.map(|a| format!("quic://{a}")).into_iter().collect(),
        history,
        ..Config::default()
    };
    config.composite.detection_thread = DETECTION_THREAD.load(Ordering::Relaxed);
    let (bound, addr) = tokio::sync::oneshot::channel();
    broker_runtime().spawn(padres_broker::net::serve_until(config, Some(bound), std::future::pending()));
    addr.await.expect("the broker binds")
}

/// Brokers run on a runtime of their own, as in their own process, so that the clients'
/// tasks do not queue behind theirs on the same workers.
fn broker_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("broker")
            .enable_all()
            .build()
            .expect("a runtime for the brokers")
    })
}

async fn connect(addr: SocketAddr, who: &str) -> Client {
    Connect::new(addr).name(who).reconnect(false).connect().await.expect("connects")
}

/// Installs `n` subscriptions on class `quote` that the benchmark's publications never
/// match (half pinned on other symbols, half on prices above any published).
async fn install_others(client: &Client, n: usize) {
    for i in 0..n {
        let text = if i % 2 == 0 {
            format!("s [class,eq,'quote'],[symbol,eq,'S{i}']")
        } else {
            format!("s [class,eq,'quote'],[price,>,{}]", 10_000 + i)
        };
        client.send(&text).await.expect("subscribed");
    }
}

/// Waits until the broker at `observer` holds `n` subscriptions.
async fn settle(observer: &Client, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while observer.stats().await.map(|s| s.subscriptions).unwrap_or(0) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Spreads publications over time: `rate` per second, sent in a burst each millisecond;
/// no pacing without a rate.
#[derive(Debug)]
pub(crate) struct Pacer {
    per_ms: Option<usize>,
    tick: tokio::time::Interval,
}

impl Pacer {
    pub(crate) fn new(rate: Option<u64>) -> Self {
        let per_ms = rate.map(|r| usize::try_from(r / 1000).unwrap_or(1).max(1));
        Self { per_ms, tick: tokio::time::interval(Duration::from_millis(1)) }
    }

    /// Waits, if publication `n` starts a new millisecond's burst. The clock starts at
    /// the first publication: ticks missed while the run was being set up would otherwise
    /// be sent at once (a run paced for 1 s once took 0.5 s).
    pub(crate) async fn before(&mut self, n: usize) {
        if n == 0 {
            self.tick.reset();
        }
        if self.per_ms.is_some_and(|per_ms| n.is_multiple_of(per_ms)) {
            self.tick.tick().await;
        }
    }
}

/// Streams `count` quotes (paced to `rate` per second if given) from `publisher` and
/// receives them at `subscriber`.
async fn quote_run(publisher: &Client, subscriber: &mut Client, count: usize, rate: Option<u64>) -> Outcome {
    let epoch = Instant::now();
    let publish = async {
        let mut pace = Pacer::new(rate);
        for n in 0..count {
            pace.before(n).await;
            let p = publication("quote", "symbol", Value::str("BENCH"), n, epoch);
            publisher.publish(p).await.expect("published");
        }
    };
    let receive = async {
        let mut latencies = Vec::with_capacity(count);
        while latencies.len() < count {
            match tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification()).await {
                Ok(Some(Notification::Publication { publication: p, .. })) => {
                    latencies.extend(latency(epoch, &p));
                }
                _ => break,
            }
        }
        (latencies, epoch.elapsed())
    };
    let ((), (latencies, elapsed)) = tokio::join!(publish, receive);
    Outcome { delivered: latencies.len(), elapsed, latencies }
}

/// One publisher and one subscriber through a chain of `brokers` brokers, with the other
/// subscriptions installed at the subscriber's broker.
async fn padres_chain(brokers: usize, sizes: Sizes, root: &std::path::Path) -> (Median, Median) {
    let mut addrs = Vec::new();
    for i in 0..brokers {
        let addr = start_broker(&format!("C{brokers}x{i}"), root, addrs.last().copied()).await;
        addrs.push(addr);
    }
    let (first, last) = (addrs[0], addrs[brokers - 1]);
    let publisher = connect(first, "pub").await;
    publisher
        .send("a [class,eq,'quote'],[symbol,isPresent,''],[price,>=,0],[volume,>=,0],[t,>=,0]")
        .await
        .expect("advertised");
    let others = connect(last, "others").await;
    install_others(&others, sizes.others).await;
    let mut subscriber = connect(last, "sub").await;
    subscriber.send("s [class,eq,'quote'],[symbol,eq,'BENCH']").await.expect("subscribed");
    settle(&connect(first, "observer").await, (sizes.others + 1) as u64).await;
    let paced_count = usize::try_from(sizes.rate * sizes.paced.as_secs()).unwrap_or(10_000);
    let mut throughput = Vec::new();
    let mut paced = Vec::new();
    for _ in 0..sizes.repeat {
        throughput.push(quote_run(&publisher, &mut subscriber, sizes.count, None).await);
        paced.push(quote_run(&publisher, &mut subscriber, paced_count, Some(sizes.rate)).await);
    }
    (Median::of(throughput), Median::of(paced))
}

/// One broker, one publisher and one subscriber at max rate; with `store`, the broker
/// keeps every quote in its history store. Returns the run and the broker's history stats.
async fn padres_one_stored(
    sizes: Sizes,
    root: &std::path::Path,
    store: Option<&str>,
    n: usize,
) -> (Outcome, String) {
    let history: Vec<_> = store
        .map(|filter| padres_broker::config::HistoryFilter { filter: filter.to_owned() })
        .into_iter()
        .collect();
    let tag = match store {
        None => "p".to_owned(),
        Some(f) => format!("s{}", f.len()),
    };
    let addr = start_broker_with(&format!("S{n}{tag}"), root, None, history).await;
    let publisher = connect(addr, "pub").await;
    publisher
        .send("a [class,eq,'quote'],[symbol,isPresent,''],[price,>=,0],[volume,>=,0],[t,>=,0]")
        .await
        .expect("advertised");
    let mut subscriber = connect(addr, "sub").await;
    subscriber.send("s [class,eq,'quote'],[symbol,eq,'BENCH']").await.expect("subscribed");
    let run = quote_run(&publisher, &mut subscriber, sizes.count, None).await;
    let stats = publisher.stats().await.expect("stats");
    let report = format!(
        "stored {} dropped {} queued {}",
        stats.history_stored, stats.history_dropped, stats.history_queued
    );
    (run, report)
}

/// A publisher at the first broker of a 3-broker chain, a subscriber at the last: runs of
/// an atomic subscription (every quote) and of a 2-leaf composite one (a quote, then the
/// confirmation of the same volume) alternate, paced at `sizes.rate` publications per
/// second. A match's latency runs from its later publication.
async fn padres_composite_chain(sizes: Sizes, root: &std::path::Path) -> (Median, Median) {
    let mut addrs = Vec::new();
    for i in 0..3 {
        let addr = start_broker(&format!("K{i}"), root, addrs.last().copied()).await;
        addrs.push(addr);
    }
    let publisher = connect(addrs[0], "pub").await;
    for class in ["quote", "confirm"] {
        publisher
            .send(&format!(
                "a [class,eq,'{class}'],[symbol,isPresent,''],[price,>=,0],[volume,>=,0],[t,>=,0]"
            ))
            .await
            .expect("advertised");
    }
    let observer = connect(addrs[2], "observer").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while observer.stats().await.map(|s| s.advertisements).unwrap_or(0) < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut atomic_sub = connect(addrs[2], "atomic").await;
    atomic_sub.send("s [class,eq,'quote'],[symbol,eq,'BENCH']").await.expect("subscribed");
    let mut composite_sub = connect(addrs[2], "composite").await;
    composite_sub
        .send(
            "cs {[class,eq,'quote'],[symbol,eq,'PAIR'],[volume,=,$I$v]}&{[class,eq,'confirm'],[symbol,eq,'PAIR'],[volume,=,$I$v]} within 10s",
        )
        .await
        .expect("subscribed");
    let paced_count = usize::try_from(sizes.rate * sizes.paced.as_secs()).unwrap_or(10_000);
    let mut atomic = Vec::new();
    let mut composite = Vec::new();
    for _ in 0..sizes.repeat {
        atomic.push(quote_run(&publisher, &mut atomic_sub, paced_count, Some(sizes.rate)).await);
        composite.push(pair_run(&publisher, &mut composite_sub, paced_count, sizes.rate).await);
    }
    (Median::of(atomic), Median::of(composite))
}

/// `count` publications paced at `rate`: quote `n`, then its confirmation, for each `n`;
/// receives the composite matches.
async fn pair_run(publisher: &Client, subscriber: &mut Client, count: usize, rate: u64) -> Outcome {
    let epoch = Instant::now();
    let pairs = count / 2;
    let publish = async {
        let mut pace = Pacer::new(Some(rate));
        for n in 0..pairs * 2 {
            pace.before(n).await;
            let class = if n % 2 == 0 { "quote" } else { "confirm" };
            let p = publication(class, "symbol", Value::str("PAIR"), n / 2, epoch);
            publisher.publish(p).await.expect("published");
        }
    };
    let receive = async {
        let mut latencies = Vec::with_capacity(pairs);
        while latencies.len() < pairs {
            match tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification()).await {
                Ok(Some(Notification::Composite { pubs, .. })) => {
                    latencies.extend(pubs.iter().filter_map(|(_, p)| latency(epoch, p)).min());
                }
                _ => break,
            }
        }
        (latencies, epoch.elapsed())
    };
    let ((), (latencies, elapsed)) = tokio::join!(publish, receive);
    Outcome { delivered: latencies.len(), elapsed, latencies }
}

/// The run with the median rate of several, and the range of rates.
#[derive(Debug)]
struct Median {
    run: Outcome,
    runs: usize,
    low: f64,
    high: f64,
}

impl Median {
    fn of(mut runs: Vec<Outcome>) -> Self {
        runs.sort_by(|a, b| a.per_second().total_cmp(&b.per_second()));
        let low = runs.first().map_or(0.0, Outcome::per_second);
        let high = runs.last().map_or(0.0, Outcome::per_second);
        let count = runs.len();
        let run = runs.swap_remove(count / 2);
        Self { run, runs: count, low, high }
    }

    fn line(&self, what: &str) -> String {
        format!("{}  [median of {}; {:.0}-{:.0}/s]", self.run.line(what), self.runs, self.low, self.high)
    }
}

/// `fan_out` subscribers each selecting 1% of the publications.
async fn padres_fan_out(sizes: Sizes, root: &std::path::Path) -> Outcome {
    let broker = start_broker("F", root, None).await;
    let publisher = connect(broker, "pub").await;
    publisher
        .send("a [class,eq,'fan'],[bucket,>=,0],[price,>=,0],[volume,>=,0],[t,>=,0]")
        .await
        .expect("advertised");
    let buckets = sizes.fan_out;
    let received = Arc::new(AtomicUsize::new(0));
    let (done, mut finished) = mpsc::channel(buckets);
    let per_subscriber = sizes.fan_count / buckets;
    let epoch = Instant::now();
    for k in 0..buckets {
        let mut subscriber = connect(broker, "fan").await;
        subscriber.send(&format!("s [class,eq,'fan'],[bucket,=,{k}]")).await.expect("subscribed");
        let received = received.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_subscriber);
            while latencies.len() < per_subscriber {
                match tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification()).await {
                    Ok(Some(Notification::Publication { publication: p, .. })) => {
                        latencies.extend(latency(epoch, &p));
                    }
                    _ => break,
                }
            }
            received.fetch_add(latencies.len(), Ordering::Relaxed);
            let _ = done.send((latencies, epoch.elapsed())).await;
        });
    }
    settle(&publisher, buckets as u64).await;
    let start = epoch.elapsed();
    let bucket_of = |n: usize| i64::try_from(n % buckets).unwrap_or(0);
    for n in 0..per_subscriber * buckets {
        let p = publication("fan", "bucket", Value::Int(bucket_of(n)), n, epoch);
        publisher.publish(p).await.expect("published");
    }
    let mut latencies = Vec::new();
    let mut end = start;
    for _ in 0..buckets {
        if let Some((l, at)) = finished.recv().await {
            latencies.extend(l);
            end = end.max(at);
        }
    }
    Outcome { delivered: received.load(Ordering::Relaxed), elapsed: end - start, latencies }
}

/// The same runs through a peer server: subjects/topics carry no content, so every
/// subscriber receives everything on its subject, decodes it and keeps what matches.
async fn peer_quote_run(kind: PeerKind, sizes: Sizes, count: usize, rate: Option<u64>) -> Option<Outcome> {
    let server = Peer::start(kind)?;
    let subject = "quote";
    let mut others = server.connect().await.ok()?;
    for i in 0..sizes.others {
        others.subscribe(&format!("other{i}")).await.ok()?;
    }
    let wanted: Subscription = "[class,eq,'quote'],[symbol,eq,'BENCH']".parse().ok()?;
    let mut subscriber = server.connect().await.ok()?;
    subscriber.subscribe(subject).await.ok()?;
    let mut publisher = server.connect().await.ok()?;
    subscriber.sync().await.ok()?;
    let epoch = Instant::now();
    let publish = async {
        let mut pace = Pacer::new(rate);
        for n in 0..count {
            pace.before(n).await;
            let p = publication("quote", "symbol", Value::str("BENCH"), n, epoch);
            publisher.publish(subject, &peers::encode(&p)).await.ok();
            if rate.is_some() {
                // Paced: every message leaves at once, as the padres client's do.
                publisher.flush().await.ok();
            }
        }
        publisher.flush().await.ok();
    };
    let receive = async {
        let latencies = peer_receive(&mut subscriber, &wanted, count, epoch).await;
        (latencies, epoch.elapsed())
    };
    let ((), (latencies, elapsed)) = tokio::join!(publish, receive);
    drop(others);
    Some(Outcome { delivered: latencies.len(), elapsed, latencies })
}

/// Receives `total` messages at a peer subscriber (or until none comes for 10 s), keeps
/// those `wanted` matches, and returns their latencies.
async fn peer_receive(
    subscriber: &mut peers::PeerClient,
    wanted: &Subscription,
    total: usize,
    epoch: Instant,
) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for _ in 0..total {
        let Ok(Ok(Some(body))) = tokio::time::timeout(Duration::from_secs(10), subscriber.next()).await
        else {
            break;
        };
        if let Some(p) = peers::decode(&body)
            && matches(wanted, &p)
        {
            latencies.extend(latency(epoch, &p));
        }
    }
    latencies
}

/// How a peer's fan-out is laid out on its subjects (topics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subjects {
    /// Everything on one subject; every subscriber filters by content (as padres does,
    /// but at the subscriber).
    One,
    /// One subject per bucket (`fan.K`, `fan/K`), each subscriber on its own: the way a
    /// NATS or MQTT user would lay this workload out.
    PerBucket,
}

fn subject(kind: PeerKind, subjects: Subjects, bucket: i64) -> String {
    match (subjects, kind) {
        (Subjects::One, _) => "fan".to_owned(),
        (Subjects::PerBucket, PeerKind::Nats) => format!("fan.{bucket}"),
        (Subjects::PerBucket, PeerKind::Mosquitto) => format!("fan/{bucket}"),
    }
}

async fn peer_fan_out(kind: PeerKind, sizes: Sizes, subjects: Subjects) -> Option<Outcome> {
    let server = Peer::start(kind)?;
    let buckets = sizes.fan_out;
    let per_subscriber = sizes.fan_count / buckets;
    let total = per_subscriber * buckets;
    // What each subscriber is sent: everything, or its own bucket.
    let arriving = match subjects {
        Subjects::One => total,
        Subjects::PerBucket => per_subscriber,
    };
    let received = Arc::new(AtomicUsize::new(0));
    let (done, mut finished) = mpsc::channel(buckets);
    let epoch = Instant::now();
    for k in 0..buckets {
        let mut subscriber = server.connect().await.ok()?;
        let bucket = i64::try_from(k).unwrap_or(0);
        subscriber.subscribe(&subject(kind, subjects, bucket)).await.ok()?;
        subscriber.sync().await.ok()?;
        let wanted: Subscription = format!("[class,eq,'fan'],[bucket,=,{k}]").parse().ok()?;
        let received = received.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let latencies = peer_receive(&mut subscriber, &wanted, arriving, epoch).await;
            received.fetch_add(latencies.len(), Ordering::Relaxed);
            let _ = done.send((latencies, epoch.elapsed())).await;
        });
    }
    let mut publisher = server.connect().await.ok()?;
    let start = epoch.elapsed();
    for n in 0..total {
        let bucket = i64::try_from(n % buckets).unwrap_or(0);
        let p = publication("fan", "bucket", Value::Int(bucket), n, epoch);
        publisher.publish(&subject(kind, subjects, bucket), &peers::encode(&p)).await.ok()?;
    }
    publisher.flush().await.ok()?;
    let mut latencies = Vec::new();
    let mut end = start;
    for _ in 0..buckets {
        if let Some((l, at)) = finished.recv().await {
            latencies.extend(l);
            end = end.max(at);
        }
    }
    Some(Outcome { delivered: received.load(Ordering::Relaxed), elapsed: end - start, latencies })
}

fn ratio(ours: &Median, theirs: &Median, label: &str) {
    println!("    ratio padres / {label}: {:.2}x", ours.run.per_second() / theirs.run.per_second().max(1e-9));
}

/// Runs `scenario` `times` times; `None` if any run could not be made.
async fn repeated<F: Future<Output = Option<Outcome>>>(
    times: usize,
    scenario: impl Fn() -> F,
) -> Option<Median> {
    let mut runs = Vec::new();
    for _ in 0..times {
        runs.push(scenario().await?);
    }
    Some(Median::of(runs))
}

/// Runs every scenario and prints the figures.
pub(crate) fn run(sizes: Sizes, with_peers: bool, only: &[Scenario]) {
    let wanted = |s: Scenario| only.is_empty() || only.contains(&s);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let root = std::env::temp_dir().join(format!("padres-bench-quic-{}", std::process::id()));
    runtime.block_on(async {
        println!(
            "quic: {} publications per run, {} other subscriptions, paced runs at {}/s for {} s, fan-out to {}",
            sizes.count,
            sizes.others,
            sizes.rate,
            sizes.paced.as_secs(),
            sizes.fan_out
        );
        let peers: Vec<PeerKind> = [PeerKind::Nats, PeerKind::Mosquitto]
            .into_iter()
            .filter(|k| with_peers && k.available())
            .collect();
        if with_peers && peers.is_empty() {
            println!("(nats-server and mosquitto are not installed: no peer comparison)");
        }

        let paced_count = usize::try_from(sizes.rate * sizes.paced.as_secs()).unwrap_or(10_000);
        for brokers in [1, 3] {
            if !wanted(if brokers == 1 { Scenario::OneBroker } else { Scenario::Chain }) {
                continue;
            }
            let (throughput, paced) = padres_chain(brokers, sizes, &root).await;
            let label = if brokers == 1 { "one broker" } else { "3-broker chain" };
            println!("{}", throughput.line(&format!("padres {label}, max rate")));
            for &kind in &peers {
                let run = || peer_quote_run(kind, sizes, sizes.count, None);
                if let Some(theirs) = repeated(sizes.repeat, run).await {
                    println!("{}", theirs.line(&format!("{} (1 server), max rate", kind.label())));
                    ratio(&throughput, &theirs, kind.label());
                }
            }
            println!("{}", paced.line(&format!("padres {label}, paced {}/s", sizes.rate)));
            for &kind in &peers {
                let run = || peer_quote_run(kind, sizes, paced_count, Some(sizes.rate));
                if let Some(theirs) = repeated(sizes.repeat, run).await {
                    println!("{}", theirs.line(&format!("{} (1 server), paced {}/s", kind.label(), sizes.rate)));
                }
            }
        }

        if wanted(Scenario::Stored) {
            // Every quote, and one in ten (price 100..189 of 100..999).
            let filters = ["[class,eq,'quote']", "[class,eq,'quote'],[price,<,190]"];
            let mut plain = Vec::new();
            let mut stored: [Vec<Outcome>; 2] = [Vec::new(), Vec::new()];
            let mut last = [String::new(), String::new()];
            for n in 0..sizes.repeat {
                plain.push(padres_one_stored(sizes, &root, None, n).await.0);
                for (i, filter) in filters.iter().enumerate() {
                    let (run, report) = padres_one_stored(sizes, &root, Some(filter), n).await;
                    stored[i].push(run);
                    last[i] = report;
                }
            }
            let plain = Median::of(plain);
            println!("{}", plain.line("padres one broker, max rate, no store"));
            for (i, what) in ["storing all", "storing 1 in 10"].iter().enumerate() {
                let runs = Median::of(std::mem::take(&mut stored[i]));
                println!("{}", runs.line(&format!("padres one broker, max rate, {what}")));
                println!(
                    "  {what} / no store: {:.2} (alternated, medians of {}); last run's store: {}",
                    runs.run.per_second() / plain.run.per_second().max(1e-9),
                    sizes.repeat,
                    last[i]
                );
            }
        }

        if wanted(Scenario::Composite) {
            let (atomic, composite) = padres_composite_chain(sizes, &root).await;
            println!("{}", atomic.line(&format!("padres 3-broker chain, atomic, paced {}/s", sizes.rate)));
            println!(
                "{}",
                composite.line(&format!("padres 3-broker chain, 2-leaf composite, paced {}/s", sizes.rate))
            );
            let (a50, _) = percentiles(atomic.run.latencies.clone());
            let (c50, _) = percentiles(composite.run.latencies.clone());
            println!(
                "  composite / atomic p50 latency: {:.2} (matches counted from their later publication)",
                c50.as_secs_f64() / a50.as_secs_f64().max(1e-12)
            );
        }

        if !wanted(Scenario::FanOut) {
            return;
        }
        let fan = repeated(sizes.repeat, || async { Some(padres_fan_out(sizes, &root).await) }).await;
        let Some(fan) = fan else { return };
        println!("{}", fan.line(&format!("padres fan-out to {} (1% each), useful", sizes.fan_out)));
        for &kind in &peers {
            for subjects in [Subjects::One, Subjects::PerBucket] {
                if let Some(theirs) = repeated(sizes.repeat, || peer_fan_out(kind, sizes, subjects)).await {
                    let layout = match subjects {
                        Subjects::One => "one subject, content filtered at the subscriber",
                        Subjects::PerBucket => "a subject per bucket",
                    };
                    println!("{}", theirs.line(&format!("{} fan-out, {layout}, useful", kind.label())));
                    ratio(&fan, &theirs, &format!("{} ({layout})", kind.label()));
                }
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&root);
}
