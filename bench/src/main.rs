//! `padres-bench`: measures padres-rs components on seeded workloads and prints each figure
//! next to a baseline measured in the same run.
//!
//! ```sh
//! cargo run --profile dist -p padres-bench -- matching            # W1–W4 at full size
//! cargo run --profile dist -p padres-bench -- matching --quick    # smaller, under a minute
//! cargo run --profile dist -p padres-bench -- matching --workload w4
//! cargo run --profile dist -p padres-bench -- quic                # brokers over QUIC, vs nats-server and mosquitto
//! cargo run --profile dist -p padres-bench -- quic --quick
//! cargo run --profile dist -p padres-bench -- history             # the history store (~2 min)
//! cargo run --profile dist -p padres-bench -- scale               # 100 to 1,000 brokers in the simulator
//! cargo run --profile dist -p padres-bench -- workflow-scale      # 20 brokers, 20 agents, 20 payrolls
//! sudo scripts/netns-federation                             # probe + impair, brokers in namespaces
//! ```

mod auth;
mod churn;
mod composite;
mod federation;
mod history;
mod impair;
mod peers;
mod pools;
mod probe;
mod quic;
mod scale;
mod workflow;
mod workflow_scale;
mod workload;

use std::alloc::{GlobalAlloc, Layout};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use mimalloc::MiMalloc;
use padres_broker::matching::{AdvertisementIndex, Scratch, SubscriptionIndex};
use padres_lang::{Subscription, matches, overlaps};
use workload::{Generator, Workload};

/// Counts live heap bytes, so memory per subscription is measured, not estimated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Allocations made (`alloc` and `realloc` calls) while counting.
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

/// Counting is on only for the matching benchmark, the composite memory figure and
/// `PROFILE_ALLOCS=1` router profiles: on the QUIC benchmark every thread
/// would contend for `LIVE` on every allocation, and that cost would be measured too.
static COUNTING: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards every call unchanged to mimalloc (the broker binary's allocator, so
// that the figures are the broker's); only counts sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same layout, forwarded.
        unsafe { MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: the pointer came from `alloc` with this layout.
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Benchmarks for padres-rs. Figures are medians and 99th percentiles over many
/// operations, with ratios against a naive baseline run on the same data.
#[derive(Debug, Parser)]
#[command(name = "padres-bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Let the kernel back this process's memory with transparent huge pages, as a broker
    /// started with `--huge-pages` does; off by default, as in a broker.
    #[arg(long, global = true)]
    huge_pages: bool,
    /// Brokers started by `quic` detect composite subscriptions in their router's own
    /// thread, as `padres-broker --no-detection-thread` does (default: a thread of their
    /// own).
    #[arg(long, global = true)]
    no_detection_thread: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Composite subscriptions: link traffic in the simulator (in-network detection against
    /// detection at the subscriber's broker and equivalent atomic subscriptions), detection
    /// throughput at one broker with 10,000 patterns against the reference detector, and
    /// bytes per stored partial match. The latency through a chain is `quic --only composite`.
    Composite {
        /// Smaller runs.
        #[arg(long)]
        quick: bool,
        /// Seed for the workloads.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Throughput runs (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
    /// Workflows: messages on broker links for deploying and running payroll and
    /// month-end, composite dependency subscriptions against primitive ones joined at the
    /// agent (the simulator; the PADRES paper §5); then job transitions per second for a
    /// wide and a deep 1,000-job DAG on 5 brokers and 10 agents over QUIC (every command
    /// /bin/true, against spawning it alone), and payroll generations per second.
    Workflow {
        /// Smaller runs (200-job DAGs, 20 payroll generations).
        #[arg(long)]
        quick: bool,
        /// Runs of each (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
    /// Pools: placement policies on two members of unequal speed (Jin et al.'s experiment,
    /// time scaled down): round robin, lowest recent queueing delay and most headroom, then
    /// the lowest delay with load reports every 100 ms and 2 s; the split of jobs, mean
    /// and p95 queueing delay per member, and the share over 1 s. Then provisioning (Tsai et
    /// al.), and messages per assigned job: one member named against every member offered
    /// the job.
    Pools {
        /// Fewer generations (60 per run) and jobs (50 per case).
        #[arg(long)]
        quick: bool,
        /// Only this part: placement, provisioning or dispatch.
        #[arg(long, value_parser = ["placement", "provisioning", "dispatch"])]
        only: Option<String>,
    },
    /// Scale: overlays of 100, 300 and 1,000 brokers in the simulator (random, balanced and
    /// power-law trees, cyclic graphs; covering off, lazy, active; subscribers with and
    /// without locality): messages per advertisement and subscription until settled,
    /// routing entries and bytes per broker, link messages per delivered publication
    /// against the shortest-path tree, router time per publication, settle time, growth
    /// exponents; composite detection in the network against at the subscriber's broker;
    /// k% of brokers crashed at once, in trees and cyclic overlays.
    Scale {
        /// 100 and 300 brokers only.
        #[arg(long)]
        quick: bool,
        /// Overlay sizes, comma-separated (default 100,300,1000).
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
        /// Seed for overlays and workloads.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Overlays, comma-separated: random, balanced, power-law, cyclic (default all).
        #[arg(long, value_delimiter = ',')]
        shapes: Vec<String>,
        /// Covering modes, comma-separated: off, lazy, active (default all).
        #[arg(long, value_delimiter = ',')]
        covering: Vec<String>,
        /// Skip the crash table.
        #[arg(long)]
        no_failures: bool,
        /// Skip the composite traffic table.
        #[arg(long)]
        no_composite: bool,
    },
    /// Real brokers at scale: `padres-broker` processes on loopback (the binary
    /// beside this one) as a random tree and as a cyclic graph, with clients spread over
    /// them: time until linked, resident memory per broker, subscription propagation to
    /// the farthest broker, delivery latency by hop count at a paced rate, a broker killed
    /// midway (publications lost, time until stalled pairs resume), and every request that
    /// took over 10 s.
    Federation {
        /// Brokers.
        #[arg(long, default_value_t = 100)]
        brokers: usize,
        /// Clients: one publisher per broker, the rest subscribing.
        #[arg(long, default_value_t = 1000)]
        clients: usize,
        /// Publications per second from each broker's publisher.
        #[arg(long, default_value_t = 10)]
        rate: u64,
        /// Seconds of paced publishing before a broker is killed.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Seconds of paced publishing after the kill: its neighbours notice it gone after
        /// QUIC's idle timeout (10 s), keep its link sessions 10 s more, then cyclic
        /// overlays rebuild its trees.
        #[arg(long, default_value_t = 40)]
        after: u64,
        /// Runs of each overlay.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Overlays: tree, cyclic (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "tree,cyclic")]
        shapes: Vec<String>,
        /// Subscription propagation trials per run.
        #[arg(long, default_value_t = 30)]
        trials: usize,
        /// Seed of the first run's overlay and placement.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Workflows on real processes: `padres-broker` processes (a random tree or a cyclic
    /// graph, some keeping the workflow classes' history), `padres-agent` processes spread
    /// over them, applications of the payroll shape deployed at once with `padres workflow
    /// deploy`, then a Friday, a Wednesday and a Saturday generation of each triggered at
    /// once; every generation checked with `padres workflow status --json` against the
    /// calendar, and every job's `started` counted. Exits 1 if any generation was wrong.
    /// Needs the binaries beside it: cargo build --profile dist -p padres-broker -p padres-bench
    /// -p padres-cli -p padres-agent.
    WorkflowScale {
        #[arg(long, default_value_t = 20)]
        brokers: usize,
        #[arg(long, default_value_t = 20)]
        agents: usize,
        /// Applications of the payroll shape.
        #[arg(long, default_value_t = 20)]
        apps: usize,
        /// Brokers with a history store of the workflow classes (spread evenly): every
        /// status and load report goes to each of them.
        #[arg(long, default_value_t = 4)]
        stores: usize,
        /// Generations of each application triggered at once (1 to 3).
        #[arg(long, default_value_t = 3)]
        generations: usize,
        /// Overlays: tree, cyclic (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "tree,cyclic")]
        shapes: Vec<String>,
        /// Runs of each overlay.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Seed of the first run's overlay and placement.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Permissions: routing throughput of one router with 1,000 publishing principals
    /// restricted by 10 advertise rules each, against the same principals unrestricted.
    Auth {
        /// 100,000 publications a run instead of 1,000,000.
        #[arg(long)]
        quick: bool,
        /// Runs each way, alternating (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// The history store: ingest rate (full and normal) against raw SQLite inserts of the
    /// same rows, routing throughput with a store against without, and query latency for one
    /// application over an hour among 1,000,000 stored publications against a full scan.
    History {
        /// Smaller runs (50,000 publications ingested, 100,000 stored for queries).
        #[arg(long)]
        quick: bool,
    },
    /// The matching engine on workloads W1–W4 and the advertisement index.
    Matching {
        /// Smaller sizes (1/20 of the subscriptions) so the whole run takes under a minute.
        #[arg(long)]
        quick: bool,
        /// Run only these workloads (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        workload: Vec<Which>,
        /// Seed for the workload generators.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Match the publications this many times (medians are over all passes).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
    /// A UDP relay that delays and drops packets, for broker links where the kernel has no
    /// netem (scripts/netns-federation uses it then).
    Impair {
        /// Where to listen, e.g. 10.77.12.2:7800.
        #[arg(long)]
        listen: SocketAddr,
        /// Where to forward to, e.g. 10.77.12.1:7700.
        #[arg(long)]
        to: SocketAddr,
        /// Delay added to every packet, each way, in milliseconds.
        #[arg(long, default_value_t = 20)]
        delay_ms: u64,
        /// Share of packets dropped, each way, in percent.
        #[arg(long, default_value_t = 1.0)]
        loss_percent: f64,
    },
    /// Subscription churn against running brokers, for soak runs: a pool of clients
    /// subscribing and unsubscribing at RATE/s, one client replaced every second, and ten
    /// publications a second their subscriptions match.
    Churn {
        /// A broker to spread the clients over (repeat; the first also gets the publisher).
        #[arg(long = "broker", required = true)]
        brokers: Vec<SocketAddr>,
        /// The certificate (PEM) to trust: the federation CA, or a broker's cert.pem.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Subscribe and unsubscribe requests per second, together.
        #[arg(long, default_value_t = 100)]
        rate: u64,
        /// How long to run.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// One publisher and one subscriber against running brokers: every publication
    /// counted (lost, duplicated, out of order), throughput, latency, and optionally a
    /// historic query for them afterwards.
    Probe {
        /// The publisher's broker, e.g. 10.77.10.2:7700.
        #[arg(long)]
        publish: SocketAddr,
        /// The subscriber's broker.
        #[arg(long)]
        subscribe: SocketAddr,
        /// The certificate (PEM) to trust: the federation CA, or a broker's cert.pem.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Publications to send.
        #[arg(long, default_value_t = 20_000)]
        count: usize,
        /// Publications per second.
        #[arg(long, default_value_t = 2_000)]
        rate: u64,
        /// Then ask for the same publications from history (a store must keep class probe).
        #[arg(long)]
        history: bool,
        /// Close the publisher's or the subscriber's connection every 0-2 s (random) while
        /// publishing, as a network fault would: both hold client sessions and resume them.
        #[arg(long)]
        drop_clients: bool,
    },
    /// Brokers over QUIC end to end: publications per second and latency through one broker
    /// and a 3-broker chain (10,000 other subscriptions installed), and selective fan-out;
    /// the same through nats-server and mosquitto when they are installed.
    Quic {
        /// Smaller runs (50,000 publications per run instead of 300,000).
        #[arg(long)]
        quick: bool,
        /// Skip nats-server and mosquitto even if installed (padres alone, for profiling).
        #[arg(long)]
        no_peers: bool,
        /// Run only these scenarios (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<quic::Scenario>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    W1,
    W2,
    W3,
    W4,
    Adv,
}

fn main() {
    let cli = Cli::parse();
    quic::DETECTION_THREAD.store(!cli.no_detection_thread, Ordering::Relaxed);
    if let Err(error) = padres_broker::memory::use_transparent_huge_pages(cli.huge_pages) {
        eprintln!("padres-bench: could not set whether transparent huge pages are used: {error}");
    }
    match cli.command {
        Command::Composite { seed, .. } if std::env::var_os("PROFILE_ONLY").is_some() => {
            composite::profile(&std::env::var("PROFILE_ONLY").unwrap_or_default(), seed);
        }
        Command::Composite { quick, seed, repeat } => {
            print_machine("one thread, the routers sans-IO");
            composite::traffic(quick, seed);
            composite::throughput(quick, seed, repeat);
        }
        Command::Pools { quick, only } => {
            print_machine("brokers and agents in this process, on loopback QUIC");
            let runtime = tokio::runtime::Runtime::new().expect("a runtime");
            let part = |name: &str| only.as_deref().is_none_or(|o| o == name);
            if part("placement") || part("provisioning") {
                runtime.block_on(pools::placement(quick, part("placement"), part("provisioning")));
            }
            if part("dispatch") {
                runtime.block_on(pools::dispatch_messages(quick));
            }
        }
        Command::Workflow { quick, repeat } => {
            print_machine("brokers and agents in this process, on loopback QUIC");
            workflow::traffic();
            tokio::runtime::Runtime::new()
                .expect("a runtime")
                .block_on(workflow::transitions(quick, repeat.max(1)));
        }
        Command::Scale { quick, sizes, shapes, covering, seed, no_failures, no_composite } => {
            let sizes = match (sizes.is_empty(), quick) {
                (false, _) => sizes,
                (true, true) => vec![100, 300],
                (true, false) => vec![100, 300, 1000],
            };
            let shapes = if shapes.is_empty() {
                vec!["random".into(), "balanced".into(), "power-law".into(), "cyclic".into()]
            } else {
                shapes
            };
            let shapes = shapes
                .iter()
                .map(|s| scale::Shape::named(s).unwrap_or_else(|| panic!("--shapes: unknown overlay {s}")))
                .collect();
            let covering = if covering.is_empty() {
                vec!["off".into(), "lazy".into(), "active".into()]
            } else {
                covering
            };
            let coverings = covering
                .iter()
                .map(|c| match c.as_str() {
                    "off" => padres_broker::router::Covering::Off,
                    "lazy" => padres_broker::router::Covering::Lazy,
                    "active" => padres_broker::router::Covering::Active,
                    other => panic!("--covering: unknown mode {other}"),
                })
                .collect();
            let plan = scale::Plan {
                sizes,
                shapes,
                coverings,
                seed,
                failures: !no_failures,
                composite: !no_composite,
            };
            scale::scale(&plan);
        }
        Command::Federation { brokers, clients, rate, seconds, after, runs, shapes, trials, seed } => {
            let plan =
                federation::Plan { brokers, clients, rate, seconds, after, runs, shapes, trials, seed };
            federation::run(&plan);
        }
        Command::WorkflowScale { brokers, agents, apps, stores, generations, shapes, runs, seed } => {
            let plan =
                workflow_scale::Plan { brokers, agents, apps, stores, generations, shapes, runs, seed };
            workflow_scale::run(&plan);
        }
        Command::Auth { quick, runs } => {
            print_machine("one router on this thread");
            auth::run(quick, runs.max(1));
        }
        Command::History { quick } => {
            print_machine(
                "the store's writes on this thread (ingest, query) or on the writer thread (routing)",
            );
            history::run(quick);
        }
        Command::Impair { listen, to, delay_ms, loss_percent } => {
            impair::run(listen, to, Duration::from_millis(delay_ms), loss_percent / 100.0);
        }
        Command::Churn { brokers, ca, rate, seconds } => {
            print_machine("brokers already running; churning clients in this process");
            churn::run(&churn::Churn { brokers, ca, rate, seconds });
        }
        Command::Probe { publish, subscribe, ca, count, rate, history, drop_clients } => {
            print_machine("brokers already running; one publisher and one subscriber in this process");
            probe::run(&probe::Probe { publish, subscribe, ca, count, rate, history, drop_clients });
        }
        Command::Quic { quick, no_peers, only } => {
            print_machine("one process: brokers on one tokio runtime, clients on another");
            quic::run(quic::Sizes::new(quick), !no_peers, &only);
        }
        Command::Matching { quick, workload, seed, repeat } => {
            let all = [Which::W1, Which::W2, Which::W3, Which::W4, Which::Adv];
            let chosen: Vec<Which> = if workload.is_empty() { all.to_vec() } else { workload };
            print_machine("one thread");
            COUNTING.store(true, Ordering::Relaxed);
            for which in chosen {
                match which {
                    Which::W1 => bench_workload(Workload::W1, "W1 dense", quick, seed, repeat),
                    Which::W2 => bench_workload(Workload::W2, "W2", quick, seed, repeat),
                    Which::W3 => bench_workload(Workload::W3, "W3 sparse", quick, seed, repeat),
                    Which::W4 => bench_workload(Workload::W4, "W4 PADRES-like", quick, seed, repeat),
                    Which::Adv => bench_advertisements(quick, seed),
                }
            }
        }
    }
}

fn print_machine(how: &str) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let pages = match padres_broker::memory::transparent_huge_pages_allowed() {
        Ok(true) => "transparent huge pages allowed",
        Ok(false) => "no transparent huge pages",
        Err(_) => "transparent huge pages unknown",
    };
    // The profile is the name of the directory the binary was built in (target/dist,
    // target/release): `dist` has the whole-program optimisation the figures assume.
    let exe = std::env::current_exe().ok();
    let profile = exe.as_deref().and_then(std::path::Path::parent).and_then(std::path::Path::file_name);
    let profile = profile.map_or_else(|| "unknown".into(), |p| p.to_string_lossy());
    println!("machine: {cpu}, {cores} cores; {how}; {pages}; {profile} build");
}

/// Median and 99th percentile.
fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    if samples.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 10_000 {
        format!("{:.2} µs", ns as f64 / 1e3)
    } else if ns < 10_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

fn bench_workload(workload: Workload, label: &str, quick: bool, seed: u64, repeat: usize) {
    let full = Generator::full_size(workload);
    let n = if quick { full / 20 } else { full };
    let (publications, naive_publications, churn) = if quick { (200, 5, 2_000) } else { (1_000, 10, 10_000) };
    println!(
        "\n{label}: {n} subscriptions, {publications} publications x {repeat} passes ({naive_publications} for the naive scan)"
    );

    let mut generator = Generator::new(workload, seed);
    let subs: Vec<Arc<Subscription>> = (0..n).map(|_| generator.subscription()).collect();
    let pubs: Vec<_> = (0..publications).map(|_| generator.publication()).collect();

    let before = LIVE.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut index = SubscriptionIndex::new();
    for (key, sub) in subs.iter().enumerate() {
        index.insert(key, sub.clone());
    }
    let build = start.elapsed();
    let memory = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    println!(
        "  build    {:>10}  ({} per subscription)",
        fmt(build),
        fmt(build / u32::try_from(n).unwrap_or(u32::MAX))
    );
    println!("  memory   {:>10} B per subscription (index only; the subscriptions are shared)", memory / n);

    let mut scratch = Scratch::default();
    let mut out = Vec::new();
    let mut times = Vec::with_capacity(pubs.len() * repeat);
    let mut counts = Vec::with_capacity(pubs.len());
    for pass in 0..repeat.max(1) {
        for p in &pubs {
            out.clear();
            let t = Instant::now();
            index.matches_into(p, &mut scratch, &mut out);
            times.push(t.elapsed());
            if pass == 0 {
                counts.push(out.len());
            }
        }
    }
    let (median, p99) = percentiles(times);
    let mean_matches = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    println!(
        "  match    median {:>10}  p99 {:>10}  matches/publication {mean_matches:.1}",
        fmt(median),
        fmt(p99)
    );

    let mut naive = Vec::new();
    for (p, &count) in pubs.iter().zip(&counts).take(naive_publications) {
        let t = Instant::now();
        let found = subs.iter().filter(|s| matches(s, p)).count();
        naive.push(t.elapsed());
        assert_eq!(found, count, "index and reference disagree on {p}");
    }
    let (naive_median, _) = percentiles(naive);
    println!(
        "  naive    median {:>10}  ratio {:.0}x (naive / index, same publications)",
        fmt(naive_median),
        naive_median.as_secs_f64() / median.as_secs_f64().max(1e-12)
    );

    let extra: Vec<Arc<Subscription>> = (0..churn).map(|_| generator.subscription()).collect();
    let mut inserts = Vec::with_capacity(churn);
    for (i, sub) in extra.iter().enumerate() {
        let t = Instant::now();
        index.insert(n + i, sub.clone());
        inserts.push(t.elapsed());
    }
    let mut rng = workload::Rng::new(seed ^ 0xABCD);
    let mut removes = Vec::with_capacity(churn);
    for _ in 0..churn {
        let key = rng.below((n + churn) as u64) as usize;
        let t = Instant::now();
        let removed = index.remove(&key);
        let elapsed = t.elapsed();
        if removed.is_some() {
            removes.push(elapsed);
        }
    }
    let (im, ip) = percentiles(inserts);
    let (rm, rp) = percentiles(removes);
    println!("  insert   median {:>10}  p99 {:>10}", fmt(im), fmt(ip));
    println!("  remove   median {:>10}  p99 {:>10}", fmt(rm), fmt(rp));
}

fn bench_advertisements(quick: bool, seed: u64) {
    let advs_n = if quick { 10_000 } else { 100_000 };
    let subs_n = if quick { 10_000 } else { 200_000 };
    let queries = 1_000;
    println!(
        "\nadvertisements: {advs_n} advertisements, {subs_n} W4 subscriptions, {queries} queries each way"
    );
    let mut generator = Generator::new(Workload::W4, seed);
    let advs: Vec<_> = (0..advs_n).map(|_| generator.advertisement()).collect();
    let subs: Vec<_> = (0..subs_n).map(|_| generator.subscription()).collect();
    let mut adv_index = AdvertisementIndex::new();
    for (k, a) in advs.iter().enumerate() {
        adv_index.insert(k, a.clone());
    }
    let mut sub_index = SubscriptionIndex::new();
    for (k, s) in subs.iter().enumerate() {
        sub_index.insert(k, s.clone());
    }

    report_queries(
        "advertisements a subscription overlaps",
        &subs[..queries.min(subs.len())],
        |s| adv_index.overlapping(s).len(),
        |s| advs.iter().filter(|a| overlaps(s, a)).count(),
    );
    report_queries(
        "subscriptions an advertisement overlaps",
        &advs[..queries.min(advs.len())],
        |a| sub_index.overlapping(a).len(),
        |a| subs.iter().filter(|s| overlaps(s, a)).count(),
    );
}

/// Times `indexed` on every query and `naive` on a tenth of them, checks that both find
/// as many, and prints the medians and their ratio.
fn report_queries<Q>(label: &str, queries: &[Q], indexed: impl Fn(&Q) -> usize, naive: impl Fn(&Q) -> usize) {
    let mut times = Vec::with_capacity(queries.len());
    let mut found = Vec::with_capacity(queries.len());
    for q in queries {
        let t = Instant::now();
        found.push(indexed(q));
        times.push(t.elapsed());
    }
    let (median, p99) = percentiles(times);
    let mut naive_times = Vec::new();
    for (q, &n) in queries.iter().zip(&found).take(queries.len() / 10) {
        let t = Instant::now();
        let count = naive(q);
        naive_times.push(t.elapsed());
        assert_eq!(count, n, "{label}: index and reference disagree");
    }
    let (naive_median, _) = percentiles(naive_times);
    println!(
        "  {label}: median {:>10}  p99 {:>10}  ({:.1} found)  naive {} ratio {:.0}x",
        fmt(median),
        fmt(p99),
        found.iter().sum::<usize>() as f64 / queries.len().max(1) as f64,
        fmt(naive_median),
        naive_median.as_secs_f64() / median.as_secs_f64().max(1e-12)
    );
}
