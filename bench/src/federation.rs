//! `padres-bench federation`: a federation of real `padres-broker` processes on loopback,
//! as a random tree or as a cyclic graph (the tree plus N/4 random links, `--cycles`),
//! with clients spread over it from this process: the time until every broker is linked,
//! each broker's resident memory, subscription propagation (subscribe at one broker, a
//! publication published every millisecond at the farthest broker arrives: per trial and
//! per hop), delivery latency by hop count with every broker's publisher paced, and a
//! broker killed (SIGKILL) midway: publications lost between live clients, and how long
//! the pairs whose path crossed it waited for their next delivery. Every `advertise` and
//! `subscribe` is timed; any that takes over 10 s is reported. Runs repeat (`--runs`).
//!
//! The brokers are the binary beside this one (`cargo build --profile dist -p
//! padres-broker -p padres-bench -p padres-cli`; `PADRES_BROKER=PATH` names another;
//! `PADRES_KEEP=1` keeps their data and logs),
//! started with their defaults: a killed neighbour is noticed after QUIC's idle timeout
//! (10 s), its link sessions last 10 s more, and only then do cyclic overlays rebuild the
//! trees that went through it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use padres_client::{Client, Connect, Notification};
use padres_lang::{Publication, Value};
use tokio::process::{Child, Command};

use crate::probe::wall_us;

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) brokers: usize,
    pub(crate) clients: usize,
    /// Publications per second from each broker's publisher.
    pub(crate) rate: u64,
    /// Seconds of paced publishing before the kill.
    pub(crate) seconds: u64,
    /// Seconds of paced publishing after it.
    pub(crate) after: u64,
    pub(crate) runs: usize,
    /// Which overlays: "tree", "cyclic", or both.
    pub(crate) shapes: Vec<String>,
    pub(crate) trials: usize,
    pub(crate) seed: u64,
}

/// A request that took longer than this is reported.
const SLOW: Duration = Duration::from_secs(10);

pub(crate) fn free_ports(n: usize) -> Vec<u16> {
    // Held together until all are chosen, so that none is chosen twice.
    let sockets: Vec<UdpSocket> =
        (0..n).map(|_| UdpSocket::bind("127.0.0.1:0").expect("a free loopback port")).collect();
    sockets.iter().map(|s| s.local_addr().expect("bound").port()).collect()
}

pub(crate) fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

pub(crate) fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub(crate) fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// The overlay: links `(later, earlier)`; the later broker dials the earlier.
pub(crate) fn overlay(n: usize, cyclic: bool, rng: &mut fastrand::Rng) -> Vec<(usize, usize)> {
    let mut links: BTreeSet<(usize, usize)> = (1..n).map(|b| (b, rng.usize(..b))).collect();
    if cyclic {
        let mut extra = 0;
        while extra < n / 4 {
            let (a, b) = (rng.usize(..n), rng.usize(..n));
            if a != b && links.insert((a.max(b), a.min(b))) {
                extra += 1;
            }
        }
    }
    links.into_iter().collect()
}

fn distances(n: usize, links: &[(usize, usize)], dead: Option<usize>) -> Vec<Vec<u32>> {
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in links {
        if Some(a) != dead && Some(b) != dead {
            adj[a].push(b);
            adj[b].push(a);
        }
    }
    (0..n)
        .map(|root| {
            let mut d = vec![u32::MAX; n];
            d[root] = 0;
            let mut todo = VecDeque::from([root]);
            while let Some(b) = todo.pop_front() {
                for &c in &adj[b] {
                    if d[c] == u32::MAX {
                        d[c] = d[b] + 1;
                        todo.push_back(c);
                    }
                }
            }
            d
        })
        .collect()
}

/// Requests timed against [`SLOW`].
#[derive(Default)]
struct Requests {
    times: Vec<f64>,
    slow: Vec<String>,
    failed: Vec<String>,
}

impl Requests {
    async fn send(this: &Mutex<Self>, client: &Client, text: &str) -> bool {
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(60), client.send(text)).await;
        let took = started.elapsed();
        let mut r = this.lock().expect("not poisoned");
        r.times.push(took.as_secs_f64() * 1000.0);
        if took > SLOW {
            r.slow.push(format!("{text} took {:.1} s", took.as_secs_f64()));
        }
        match result {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                r.failed.push(format!("{text}: {e}"));
                false
            }
            Err(_) => {
                r.failed.push(format!("{text}: no reply in 60 s"));
                false
            }
        }
    }
}

pub(crate) async fn connect(addr: SocketAddr, who: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Connect::new(addr).name(who).reconnect(false).connect().await {
            Ok(client) => return client,
            Err(e) if Instant::now() > deadline => panic!("{who} cannot connect to {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The binary `name` beside this one, or the one the environment variable `var`
/// names.
pub(crate) fn sibling(name: &str, var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    let binary = std::env::current_exe().expect("this binary's path").with_file_name(name);
    assert!(
        binary.exists(),
        "{} is missing: cargo build --profile dist -p padres-broker -p padres-bench -p padres-cli -p padres-agent",
        binary.display()
    );
    binary
}

pub(crate) fn broker_binary() -> PathBuf {
    sibling("padres-broker", "PADRES_BROKER")
}

pub(crate) struct Brokers {
    children: Vec<Option<Child>>,
    pub(crate) addrs: Vec<SocketAddr>,
}

impl Brokers {
    /// Starts `n` brokers linked as `links`, those in `stores` with `store_args` too (a
    /// history store's flags).
    pub(crate) fn start(
        binary: &Path,
        dir: &Path,
        links: &[(usize, usize)],
        n: usize,
        cyclic: bool,
        store_args: &[&str],
        stores: &[usize],
    ) -> Self {
        let ports = free_ports(n);
        let addrs: Vec<SocketAddr> = ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect();
        let children = (0..n)
            .map(|b| {
                let mut command = Command::new(binary);
                command
                    .arg("--name")
                    .arg(format!("B{}", b + 1))
                    .arg("--listen")
                    .arg(addrs[b].to_string())
                    .arg("--data-dir")
                    .arg(dir.join(format!("b{}", b + 1)));
                if cyclic {
                    command.arg("--cycles");
                }
                if stores.contains(&b) {
                    command.args(store_args);
                }
                for &(later, earlier) in links {
                    if later == b {
                        command.arg("--neighbour").arg(format!("quic://{}", addrs[earlier]));
                    }
                }
                let log = std::fs::File::create(dir.join(format!("b{}.log", b + 1))).expect("a log file");
                let child = command
                    .stdout(Stdio::null())
                    .stderr(log)
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap_or_else(|e| panic!("{} starts: {e}", binary.display()));
                Some(child)
            })
            .collect();
        Self { children, addrs }
    }

    pub(crate) fn pid(&self, b: usize) -> Option<u32> {
        self.children[b].as_ref().and_then(Child::id)
    }

    pub(crate) async fn stop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            if let Some(pid) = child.id() {
                // SIGTERM: each withdraws its certificate from the local registry.
                let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
            }
        }
        for child in self.children.iter_mut().flatten() {
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
    }
}

/// One observer client per broker, once every broker has `degree` neighbours up (300 s at
/// most, from `started`).
pub(crate) async fn linked(brokers: &Brokers, degree: &[usize], started: Instant) -> Vec<Client> {
    let n = degree.len();
    // One observer per broker, asking for its neighbours until every link is up.
    let mut observers = Vec::new();
    for b in 0..n {
        observers.push(connect(brokers.addrs[b], &format!("observer{b}")).await);
    }
    loop {
        let mut up = 0;
        for (b, o) in observers.iter().enumerate() {
            if o.stats().await.is_ok_and(|s| s.neighbours.len() >= degree[b]) {
                up += 1;
            }
        }
        if up == n {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "only {up} of {n} brokers linked after 300 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    observers
}

/// What one run measured.
#[derive(Debug, Default)]
struct Run {
    linked_s: f64,
    rss_linked_kb: Vec<f64>,
    rss_end_kb: Vec<f64>,
    propagation_ms: Vec<f64>,
    per_hop_ms: Vec<f64>,
    latency_by_hops: BTreeMap<u32, Vec<f64>>,
    requests: Vec<f64>,
    slow: Vec<String>,
    failed: Vec<String>,
    /// Killed broker, its degree.
    killed: (usize, usize),
    /// Publications between live clients published before the kill's effects could
    /// matter (before it) and after: expected, received.
    before: (u64, u64),
    after: (u64, u64),
    /// Per pair whose delivery stopped for over a second after the kill: when it
    /// resumed (s after the kill), or never.
    stalled: Vec<Option<f64>>,
    /// Of the stalled pairs that never resumed, those the killed broker cut apart (no
    /// path between them in the overlay without it).
    never_cut: usize,
    pairs: usize,
    /// Summed over the live brokers at the end: requests answered at their settle
    /// deadline, link sessions expired, slow clients dropped.
    settle_timeouts: u64,
    sessions_expired: u64,
    slow_clients: u64,
}

/// What a subscriber keeps: per publishing broker, the (seq, receipt time) it got.
type Got = Arc<Mutex<Vec<(usize, i64, Instant)>>>;

async fn one_run(plan: &Plan, cyclic: bool, seed: u64, root: &Path) -> Run {
    let n = plan.brokers;
    let mut rng = fastrand::Rng::with_seed(seed);
    let links = overlay(n, cyclic, &mut rng);
    let mut degree = vec![0usize; n];
    for &(a, b) in &links {
        degree[a] += 1;
        degree[b] += 1;
    }
    let dist = distances(n, &links, None);
    let dir = root.join(format!("{}-{seed}", if cyclic { "cyclic" } else { "tree" }));
    std::fs::create_dir_all(&dir).expect("a work directory");
    let started = Instant::now();
    let mut brokers = Brokers::start(&broker_binary(), &dir, &links, n, cyclic, &[], &[]);
    let mut run = Run::default();
    let observers = linked(&brokers, &degree, started).await;
    run.linked_s = started.elapsed().as_secs_f64();
    run.rss_linked_kb = (0..n).filter_map(|b| brokers.pid(b)).map(|p| rss_kb(p) as f64).collect();
    let requests = Arc::new(Mutex::new(Requests::default()));

    // Subscription propagation: subscribe at a broker, the farthest broker publishes
    // every millisecond; the first arrival ends the trial.
    for trial in 0..plan.trials {
        let at = rng.usize(..n);
        let far = (0..n).max_by_key(|b| dist[at][*b]).expect("brokers");
        let hops = dist[at][far];
        let publisher = connect(brokers.addrs[far], &format!("prop-pub{trial}")).await;
        Requests::send(&requests, &publisher, "a [class,eq,'prop'],[trial,isPresent,0]").await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let publishing = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let p: Publication = format!("[class,'prop'],[trial,{trial}]").parse().expect("valid");
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    tick.tick().await;
                    if publisher.publish(p.clone()).await.is_err() {
                        break;
                    }
                }
                publisher
            })
        };
        let mut subscriber = connect(brokers.addrs[at], &format!("prop-sub{trial}")).await;
        let mut notifications = subscriber.take_notifications();
        let t0 = Instant::now();
        let text = format!("s [class,eq,'prop'],[trial,=,{trial}]");
        let reply = Requests::send(&requests, &subscriber, &text);
        let first = async {
            loop {
                match notifications.next().await {
                    Some(Notification::Publication { .. }) => return Some(t0.elapsed()),
                    Some(_) => {}
                    None => return None,
                }
            }
        };
        let (_, first) = tokio::join!(reply, tokio::time::timeout(Duration::from_secs(30), first));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = publishing.await;
        match first {
            Ok(Some(took)) => {
                let ms = took.as_secs_f64() * 1000.0;
                run.propagation_ms.push(ms);
                if hops > 0 {
                    run.per_hop_ms.push(ms / f64::from(hops));
                }
            }
            _ => requests
                .lock()
                .expect("not poisoned")
                .failed
                .push(format!("propagation trial {trial}: nothing")),
        }
    }

    // Paced load: a publisher at every broker, the other clients subscribing to one
    // broker's publications each.
    let subscribers = plan.clients.saturating_sub(n);
    let mut gots: Vec<(usize, usize, Got)> = Vec::new();
    let mut subscriber_clients = Vec::new();
    for s in 0..subscribers {
        let at = rng.usize(..n);
        let from = rng.usize(..n);
        let mut client = connect(brokers.addrs[at], &format!("sub{s}")).await;
        Requests::send(&requests, &client, &format!("s [class,eq,'load'],[src,=,{from}]")).await;
        let got: Got = Arc::new(Mutex::new(Vec::new()));
        let mut notifications = client.take_notifications();
        let sink = got.clone();
        tokio::spawn(async move {
            while let Some(note) = notifications.next().await {
                if let Notification::Publication { publication, .. } = note
                    && let (Some(Value::Int(seq)), Some(Value::Int(us))) =
                        (publication.get("seq"), publication.get("us"))
                {
                    let lat = wall_us() - us;
                    sink.lock().expect("not poisoned").push((*seq as usize, lat, Instant::now()));
                }
            }
        });
        gots.push((at, from, got));
        subscriber_clients.push(client);
    }
    let mut publishers = Vec::new();
    for b in 0..n {
        let client = connect(brokers.addrs[b], &format!("pub{b}")).await;
        Requests::send(
            &requests,
            &client,
            "a [class,eq,'load'],[src,isPresent,0],[seq,isPresent,0],[us,isPresent,0]",
        )
        .await;
        publishers.push(Arc::new(client));
    }
    // Candidates to kill: a broker with two links or more and no propagation role.
    let victim = (0..n).filter(|b| degree[*b] >= 2).max_by_key(|b| (degree[*b], *b)).unwrap_or(0);
    run.killed = (victim, degree[victim]);
    let total = (plan.rate * (plan.seconds + plan.after)) as usize;
    let period = Duration::from_micros(1_000_000 / plan.rate.max(1));
    let epoch = Instant::now();
    let sent: Arc<Mutex<Vec<Vec<Instant>>>> = Arc::new(Mutex::new(vec![Vec::new(); n]));
    let mut tasks = Vec::new();
    for (b, client) in publishers.iter().enumerate() {
        let client = client.clone();
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            // Spread the publishers' ticks over the period.
            tokio::time::sleep(period.mul_f64(b as f64 / n as f64)).await;
            let mut tick = tokio::time::interval(period);
            for seq in 0..total {
                tick.tick().await;
                let text = format!("[class,'load'],[src,{b}],[seq,{seq}],[us,{}]", wall_us());
                let p: Publication = text.parse().expect("valid");
                sent.lock().expect("not poisoned")[b].push(Instant::now());
                if client.publish(p).await.is_err() {
                    break;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(plan.seconds)).await;
    let killed_at = Instant::now();
    if let Some(child) = brokers.children[victim].as_mut() {
        let _ = child.start_kill();
    }
    for task in tasks {
        let _ = task.await;
    }
    // Let the last publications arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    run.rss_end_kb =
        (0..n).filter(|b| *b != victim).filter_map(|b| brokers.pid(b)).map(|p| rss_kb(p) as f64).collect();
    let sent = sent.lock().expect("not poisoned").clone();
    let after_kill = distances(n, &links, Some(victim));
    for (at, from, got) in &gots {
        if *at == victim || *from == victim {
            continue;
        }
        run.pairs += 1;
        let got = got.lock().expect("not poisoned");
        let hops = dist[*at][*from];
        let seqs: BTreeMap<usize, Instant> = got.iter().map(|(s, _, t)| (*s, *t)).collect();
        for (_, lat, t) in got.iter() {
            if *t < killed_at {
                run.latency_by_hops.entry(hops).or_default().push(*lat as f64 / 1000.0);
            }
        }
        // Published at least a second after the subscriptions were in place.
        for (seq, at_time) in sent[*from].iter().enumerate() {
            if at_time.duration_since(epoch) < Duration::from_secs(1) {
                continue;
            }
            let slot = if *at_time < killed_at { &mut run.before } else { &mut run.after };
            slot.0 += 1;
            if seqs.contains_key(&seq) {
                slot.1 += 1;
            }
        }
        // Did this pair stall after the kill, and when did it resume?
        let first_after_published: Option<(usize, Instant)> =
            sent[*from].iter().enumerate().find(|(_, t)| **t >= killed_at).map(|(s, t)| (s, *t));
        if let Some((first_seq, _)) = first_after_published {
            let resumed =
                seqs.range(first_seq..).next().map(|(_, t)| t.duration_since(killed_at).as_secs_f64());
            match resumed {
                Some(s) if s <= 1.0 => {}
                other => {
                    if other.is_none() && after_kill[*at][*from] == u32::MAX {
                        run.never_cut += 1;
                    }
                    run.stalled.push(other);
                }
            }
        }
    }
    for (b, o) in observers.iter().enumerate() {
        if b == victim {
            continue;
        }
        if let Ok(Ok(stats)) = tokio::time::timeout(Duration::from_secs(5), o.stats()).await {
            run.settle_timeouts += stats.settle_timeouts;
            run.sessions_expired += stats.link_sessions_expired;
            run.slow_clients += stats.slow_clients_dropped;
        }
    }
    drop(subscriber_clients);
    drop(publishers);
    drop(observers);
    brokers.stop().await;
    let r = Arc::try_unwrap(requests).map(|m| m.into_inner().expect("not poisoned")).unwrap_or_default();
    run.requests = r.times;
    run.slow = r.slow;
    run.failed = r.failed;
    if std::env::var_os("PADRES_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("  kept the brokers' logs in {}", dir.display());
    }
    run
}

/// Runs the plan and prints its figures.
pub(crate) fn run(plan: &Plan) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let root = std::env::temp_dir().join(format!("padres-federation-{}", std::process::id()));
    println!(
        "Real brokers on loopback: {} padres-broker processes, {} clients ({} subscribing, one publisher per broker at {}/s), {} s of load, a broker killed, {} s more; {} run(s) each",
        plan.brokers,
        plan.clients,
        plan.clients.saturating_sub(plan.brokers),
        plan.rate,
        plan.seconds,
        plan.after,
        plan.runs
    );
    for shape in &plan.shapes {
        let cyclic = shape == "cyclic";
        for r in 0..plan.runs {
            let seed = plan.seed + r as u64;
            let run = runtime.block_on(one_run(plan, cyclic, seed, &root));
            report(shape, seed, &run);
        }
    }
    if std::env::var_os("PADRES_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
}

fn report(shape: &str, seed: u64, run: &Run) {
    let rss = sorted(run.rss_linked_kb.clone());
    let rss_end = sorted(run.rss_end_kb.clone());
    let prop = sorted(run.propagation_ms.clone());
    let hop = sorted(run.per_hop_ms.clone());
    let req = sorted(run.requests.clone());
    println!("\n## {shape}, seed {seed}");
    println!("  linked: every broker's links up {:.1} s after the first started", run.linked_s);
    println!(
        "  resident memory per broker (MB): linked, idle: median {:.1}, max {:.1}; after the load: median {:.1}, max {:.1}",
        pct(&rss, 0.5) / 1024.0,
        pct(&rss, 1.0) / 1024.0,
        pct(&rss_end, 0.5) / 1024.0,
        pct(&rss_end, 1.0) / 1024.0
    );
    println!(
        "  subscription propagation to the farthest broker ({} trials): p50 {:.1} ms, p99 {:.1} ms; per hop p50 {:.2} ms, p99 {:.2} ms",
        prop.len(),
        pct(&prop, 0.5),
        pct(&prop, 0.99),
        pct(&hop, 0.5),
        pct(&hop, 0.99)
    );
    println!(
        "  requests (advertise, subscribe): {}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; over 10 s: {}; failed: {}",
        req.len(),
        pct(&req, 0.5),
        pct(&req, 0.99),
        pct(&req, 1.0),
        run.slow.len(),
        run.failed.len()
    );
    for s in run.slow.iter().chain(&run.failed).take(10) {
        println!("    {s}");
    }
    let by_hops: Vec<String> = run
        .latency_by_hops
        .iter()
        .map(|(h, v)| {
            let v = sorted(v.clone());
            format!("{h} hops {:.2}/{:.2}", pct(&v, 0.5), pct(&v, 0.99))
        })
        .collect();
    println!("  delivery latency by hops, p50/p99 ms, before the kill: {}", by_hops.join(", "));
    let share = |(want, got): (u64, u64)| 100.0 * got as f64 / want.max(1) as f64;
    println!(
        "  B{} killed ({} links): delivered between live clients before it {:.2}% of {}, after it {:.2}% of {} (lost {})",
        run.killed.0 + 1,
        run.killed.1,
        share(run.before),
        run.before.0,
        share(run.after),
        run.after.0,
        run.after.0 - run.after.1
    );
    println!(
        "  at the live brokers: requests answered at their settle deadline {}, link sessions expired {}, slow clients dropped {}",
        run.settle_timeouts, run.sessions_expired, run.slow_clients
    );
    let resumed = sorted(run.stalled.iter().flatten().copied().collect());
    let never = run.stalled.iter().filter(|s| s.is_none()).count();
    println!(
        "  pairs ({} live) stalled over 1 s after the kill: {}; resumed after p50 {:.1} s, max {:.1} s; never: {} (of which cut apart by the kill: {})",
        run.pairs,
        run.stalled.len(),
        pct(&resumed, 0.5),
        pct(&resumed, 1.0),
        never,
        run.never_cut
    );
}
