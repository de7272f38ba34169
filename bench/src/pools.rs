//! Pools: placement policies on two members of unequal speed, after Jin, Casati, Sayal
//! and Shan (2001): one member slowed by a fixed factor, generations arriving at a steady
//! rate, round robin against lowest recent queueing delay (their LAPSA) against most
//! headroom; and, for the lowest delay, the load-report period (how stale the home agent's
//! view is).
//!
//! Time is scaled down: a job takes 50 ms on the fast member and 150 ms on the slow one
//! (a factor of 3), each member runs one job at a time, and generations (one pool job
//! each) arrive every 1/16 s: 60% of the two members' joint rate (20 + 6.7 jobs/s), more
//! than the slow member alone serves (6.7/s) if it is given half. Members' limits are set
//! high (1,000) so that no policy is held back by the admission queue: the split is the
//! policy's own. Brokers (a chain of 3), the home agent and both members run in this
//! process over loopback QUIC; jobs are real processes (`sh -c 'sleep …'`).

use std::collections::HashMap;
use std::time::Duration;

use padres_lang::{Publication, Value};

/// Generations per run.
const GENERATIONS: usize = 200;
/// Between two triggers.
const ARRIVAL: Duration = Duration::from_micros(62_500);
/// A delay over this counts as late.
const LATE_MS: i64 = 1_000;

/// What one run measured, per member: jobs, and each job's queueing delay (its trigger to
/// its start, ms).
struct Outcome {
    delays: HashMap<String, Vec<i64>>,
}

fn text<'a>(p: &'a Publication, attr: &str) -> Option<&'a str> {
    p.get(attr).and_then(Value::as_str)
}

/// Starts in-process agent `name` on `broker` (a pool member of `pool` with `service`
/// seconds per job, or, without a pool, a home agent).
async fn agent(
    broker: std::net::SocketAddr,
    root: &std::path::Path,
    name: &str,
    pool: Option<(&str, &str)>,
    period: Duration,
) {
    let client = padres_client::Connect::new(broker).name(name).connect().await.expect("connects");
    let work_dir = root.join("agents").join(name);
    std::fs::create_dir_all(&work_dir).expect("work dir");
    let mut options = padres_agent::agent::Options::new(name, work_dir.clone());
    options.load_period = period;
    if let Some((pool, service)) = pool {
        std::fs::write(work_dir.join("service"), service).expect("service time");
        options.pools = vec![pool.to_owned()];
        options.max_parallel = 1;
        options.capacity = Some(1000);
    }
    tokio::spawn(async move { padres_agent::agent::serve(client, options).await.expect("the agent serves") });
}

/// One run: `policy`, members reporting every `period`.
async fn run(
    brokers: &[std::net::SocketAddr],
    root: &std::path::Path,
    case: &str,
    policy: &str,
    period: Duration,
    generations: usize,
) -> Outcome {
    let (home, pool, appl) = (format!("home-{case}"), format!("p-{case}"), format!("jin-{case}"));
    agent(brokers[0], root, &home, None, period).await;
    agent(brokers[1], root, &format!("fast-{case}"), Some((&pool, "0.05")), period).await;
    agent(brokers[2], root, &format!("slow-{case}"), Some((&pool, "0.15")), period).await;
    let mut operator =
        padres_client::Connect::new(brokers[2]).name("operator").connect().await.expect("connects");
    operator.advertise(padres_workflow::control::control_advertisement()).await.expect("advertised");
    let mut monitor =
        padres_client::Connect::new(brokers[2]).name("monitor").connect().await.expect("connects");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let xml = format!(
        "<application name=\"{appl}\" home=\"{home}\" tz=\"UTC\" max-generations=\"10000\">\
         <pool name=\"{pool}\" policy=\"{policy}\"/>\
         <job name=\"J\" pool=\"{pool}\" retries=\"0\"><command>sh</command><arg>-c</arg>\
         <arg>sleep \"$(cat service)\"</arg></job></application>"
    );
    let app = crate::workflow::deploy(&mut operator, &xml).await;
    for class in ["trigger", "job_status"] {
        monitor.send(&format!("s [class,eq,'{class}'],[appl,eq,'{appl}']")).await.expect("subscribed");
    }
    // Both members have reported to the home agent.
    tokio::time::sleep(period * 2 + Duration::from_millis(300)).await;
    let gids: Vec<String> = (0..generations).map(|g| format!("{case}-{g}")).collect();
    let sender = {
        let gids = gids.clone();
        let home = app.home_agent().to_owned();
        let appl = appl.clone();
        tokio::spawn(async move {
            use padres_workflow::control::{Command, Control};
            let mut ticks = tokio::time::interval(ARRIVAL);
            for gid in gids {
                ticks.tick().await;
                let command = Command::Trigger { gid: gid.clone(), date: "2026-11-27".to_owned() };
                let control = Control { agent: home.clone(), appl: appl.clone(), reference: gid, command };
                operator.publish(control.publication().expect("a trigger")).await.expect("sent");
            }
            operator
        })
    };
    let (mut triggered, mut started): (HashMap<String, i64>, HashMap<String, (String, i64)>) =
        (HashMap::new(), HashMap::new());
    let mut ended = 0;
    while ended < generations {
        let next = tokio::time::timeout(Duration::from_secs(120), monitor.next_notification()).await;
        let Ok(Some(n)) = next else { panic!("{case}: stalled after {ended} generations") };
        let Some((_, p)) = n.into_publication() else { continue };
        let (Some(gid), Some(at)) = (text(&p, "gid"), p.time().map(padres_lang::Timestamp::millis)) else {
            continue;
        };
        if p.class() == "trigger" {
            triggered.insert(gid.to_owned(), at);
        } else if text(&p, "job") == Some("J") && text(&p, "status") == Some("started") {
            started.insert(gid.to_owned(), (text(&p, "agent").unwrap_or_default().to_owned(), at));
        } else if text(&p, "job") == Some(padres_workflow::APPL_END) {
            ended += 1;
        }
    }
    let _operator = sender.await.expect("the triggers went");
    let mut delays: HashMap<String, Vec<i64>> = HashMap::new();
    for gid in &gids {
        if let (Some(t), Some((member, s))) = (triggered.get(gid), started.get(gid)) {
            let member = member.split('-').next().unwrap_or_default().to_owned();
            delays.entry(member).or_default().push(s - t);
        }
    }
    Outcome { delays }
}

fn summary(outcome: &mut Outcome) -> String {
    let mut parts = Vec::new();
    for member in ["fast", "slow"] {
        let delays = outcome.delays.entry(member.to_owned()).or_default();
        delays.sort_unstable();
        let n = delays.len();
        if n == 0 {
            parts.push(format!("{member} 0 jobs"));
            continue;
        }
        let mean = delays.iter().sum::<i64>() as f64 / n as f64;
        let p95 = delays[(n * 95 / 100).min(n - 1)];
        let late = delays.iter().filter(|d| **d > LATE_MS).count();
        parts.push(format!(
            "{member} {n} jobs, delay mean {mean:.0} ms, p95 {p95} ms, {:.0}% over {LATE_MS} ms",
            100.0 * late as f64 / n as f64
        ));
    }
    parts.join("; ")
}

/// Tsai et al.'s experiment, time scaled: Poisson arrivals at rising rates against one
/// member, and against a pool that a provisioner grows (up to 10 members) and shrinks.
/// Each member runs one 100 ms job at a time and reports a limit of 2 jobs. The benchmark
/// plays the provisioning commands: on a `scale-up` advice it starts a member in this
/// process, on a `scale-down` it drains the member named. Returns per rate the mean and
/// largest response (trigger to the job's end, ms) and the most members seen.
async fn provisioned(
    brokers: &[std::net::SocketAddr],
    root: &std::path::Path,
    case: &str,
    grow: bool,
    rates: &[f64],
    phase: Duration,
) -> Vec<(f64, f64, i64, usize)> {
    use padres_workflow::control::{ANY_APPL, Command, Control};
    let (home, pool, appl) = (format!("home-{case}"), format!("p-{case}"), format!("tsai-{case}"));
    let period = Duration::from_millis(200);
    let client = padres_client::Connect::new(brokers[0]).name(&home).connect().await.expect("connects");
    let mut options = padres_agent::agent::Options::new(&home, root.join("agents").join(&home));
    options.load_period = period;
    if grow {
        options.provision = Some(padres_agent::pool::Provisioning {
            watch: padres_agent::pool::Provision {
                pool: pool.clone(),
                over_for: Duration::from_secs(1),
                under_for: Duration::from_secs(3),
                under: 0.5,
                min: 1,
                max: 10,
            },
            scale_up: None,
            scale_down: None,
        });
    }
    tokio::spawn(async move { padres_agent::agent::serve(client, options).await.expect("the agent serves") });
    let start_member = |n: usize| {
        let (pool, name) = (pool.clone(), format!("m{n}-{case}"));
        let broker = brokers[1 + n % (brokers.len() - 1)];
        async move {
            let client = padres_client::Connect::new(broker).name(&name).connect().await.expect("connects");
            let work_dir = root.join("agents").join(&name);
            std::fs::create_dir_all(&work_dir).expect("work dir");
            std::fs::write(work_dir.join("service"), "0.1").expect("service time");
            let mut options = padres_agent::agent::Options::new(&name, work_dir);
            (options.pools, options.max_parallel, options.capacity, options.load_period) =
                (vec![pool], 1, Some(2), period);
            tokio::spawn(async move { padres_agent::agent::serve(client, options).await.expect("serves") });
        }
    };
    start_member(0).await;
    let mut operator =
        padres_client::Connect::new(brokers[2]).name("operator").connect().await.expect("connects");
    operator.advertise(padres_workflow::control::control_advertisement()).await.expect("advertised");
    let mut monitor =
        padres_client::Connect::new(brokers[2]).name("monitor").connect().await.expect("connects");
    // Plays the scale-down command: drains the member named.
    let drainer = padres_client::Connect::new(brokers[2]).name("drainer").connect().await.expect("connects");
    drainer.advertise(padres_workflow::control::control_advertisement()).await.expect("advertised");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let xml = format!(
        "<application name=\"{appl}\" home=\"{home}\" tz=\"UTC\" max-generations=\"100000\">\
         <pool name=\"{pool}\" policy=\"least-loaded\"/>\
         <job name=\"J\" pool=\"{pool}\" retries=\"0\"><command>sh</command><arg>-c</arg>\
         <arg>sleep \"$(cat service)\"</arg></job></application>"
    );
    crate::workflow::deploy(&mut operator, &xml).await;
    for sub in [
        format!("s [class,eq,'trigger'],[appl,eq,'{appl}']"),
        format!("s [class,eq,'job_status'],[appl,eq,'{appl}'],[job,eq,'J'],[status,eq,'succeeded']"),
        format!("s [class,eq,'{}'],[pool,eq,'{pool}']", padres_agent::pool::ADVICE),
        format!("s [class,eq,'{}'],[pools,str-contains,',{pool},']", padres_agent::pool::LOAD),
    ] {
        monitor.send(&sub).await.expect("subscribed");
    }
    tokio::time::sleep(period * 3).await;
    // Triggers: Poisson arrivals, each rate for one phase.
    let mut plan = Vec::new();
    let mut rng = fastrand::Rng::with_seed(11);
    for (p, rate) in rates.iter().enumerate() {
        let end = phase.as_secs_f64() * (p + 1) as f64;
        let mut at = phase.as_secs_f64() * p as f64;
        loop {
            at += -(1.0 - rng.f64()).ln() / rate;
            if at >= end {
                break;
            }
            plan.push((at, p));
        }
    }
    let total = plan.len();
    let phase_of: HashMap<String, usize> =
        plan.iter().enumerate().map(|(i, (_, p))| (format!("{case}-{i}"), *p)).collect();
    let sender = {
        let (home, appl, case) = (home.clone(), appl.clone(), case.to_owned());
        tokio::spawn(async move {
            let begin = tokio::time::Instant::now();
            for (i, (at, _)) in plan.into_iter().enumerate() {
                tokio::time::sleep_until(begin + Duration::from_secs_f64(at)).await;
                let gid = format!("{case}-{i}");
                let command = Command::Trigger { gid: gid.clone(), date: "2026-11-27".to_owned() };
                let control = Control { agent: home.clone(), appl: appl.clone(), reference: gid, command };
                operator.publish(control.publication().expect("a trigger")).await.expect("sent");
            }
            operator
        })
    };
    let mut triggered: HashMap<String, i64> = HashMap::new();
    let mut responses: Vec<Vec<i64>> = vec![Vec::new(); rates.len()];
    let mut most: Vec<usize> = vec![1; rates.len()];
    let mut members: HashMap<String, bool> = HashMap::new();
    let (mut done, mut started_members) = (0, 1);
    let begin = std::time::Instant::now();
    while done < total {
        let next = tokio::time::timeout(Duration::from_secs(300), monitor.next_notification()).await;
        let Ok(Some(n)) = next else { panic!("{case}: stalled after {done} of {total} jobs") };
        let Some((_, p)) = n.into_publication() else { continue };
        let at = p.time().map_or(0, padres_lang::Timestamp::millis);
        match p.class() {
            "trigger" => {
                triggered.insert(text(&p, "gid").unwrap_or_default().to_owned(), at);
            }
            "job_status" => {
                let gid = text(&p, "gid").unwrap_or_default();
                if let (Some(t), Some(phase)) = (triggered.get(gid), phase_of.get(gid)) {
                    responses[*phase].push(at - t);
                    done += 1;
                }
            }
            class if class == padres_agent::pool::LOAD => {
                if let Some(load) = padres_agent::pool::Load::from_publication(&p) {
                    members.insert(load.agent, load.state == padres_agent::pool::MemberState::Up);
                    let now = begin.elapsed().as_secs_f64();
                    let phase = ((now / phase.as_secs_f64()) as usize).min(rates.len() - 1);
                    most[phase] = most[phase].max(members.values().filter(|up| **up).count());
                }
            }
            _ => match (text(&p, "advice"), text(&p, "member")) {
                (Some("scale-up"), _) => {
                    start_member(started_members).await;
                    started_members += 1;
                }
                (Some("scale-down"), Some(member)) => {
                    let control = Control {
                        agent: member.to_owned(),
                        appl: ANY_APPL.to_owned(),
                        reference: "drain".to_owned(),
                        command: Command::Drain,
                    };
                    drainer.publish(control.publication().expect("a drain")).await.expect("sent");
                }
                _ => {}
            },
        }
    }
    let _operator = sender.await.expect("the triggers went");
    rates
        .iter()
        .zip(responses)
        .zip(most)
        .map(|((rate, mut r), most)| {
            r.sort_unstable();
            let mean = if r.is_empty() { 0.0 } else { r.iter().sum::<i64>() as f64 / r.len() as f64 };
            (*rate, mean, r.last().copied().unwrap_or(0), most)
        })
        .collect()
}

/// `padres-bench pools`: with `placement`, the policies, then the lowest delay with three
/// report periods; with `provisioning`, Tsai et al.'s experiment.
pub(crate) async fn placement(quick: bool, placement: bool, provisioning: bool) {
    let generations = if quick { 60 } else { GENERATIONS };
    let root = std::env::temp_dir().join(format!("padres-bench-pools-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut brokers = Vec::new();
    for i in 0..3 {
        brokers.push(
            crate::quic::start_broker(&format!("B{}", i + 1), &root.join("brokers"), brokers.last().copied())
                .await,
        );
    }
    if placement {
        println!(
            "pool placement (Jin et al. 2001, time scaled): two members, one job at a time each, a job 50 ms on one and 150 ms on the other; {generations} generations arriving every {} ms; queueing delay = trigger to start",
            ARRIVAL.as_millis()
        );
        let period = Duration::from_millis(500);
        for policy in ["round-robin", "lowest-delay", "least-loaded"] {
            let mut outcome = run(&brokers, &root, policy, policy, period, generations).await;
            println!("  {policy:<13} (reports every {} ms): {}", period.as_millis(), summary(&mut outcome));
        }
        for ms in [100, 2000] {
            let period = Duration::from_millis(ms);
            let mut outcome =
                run(&brokers, &root, &format!("lowest-delay-{ms}"), "lowest-delay", period, generations)
                    .await;
            println!("  lowest-delay  (reports every {ms} ms): {}", summary(&mut outcome));
        }
    }
    if provisioning {
        let rates = [4.0, 8.0, 16.0, 32.0];
        let phase = Duration::from_secs(if quick { 4 } else { 8 });
        println!(
            "provisioning (Tsai et al. 2010, time scaled): Poisson arrivals, each rate for {} s; a member runs one 100 ms job at a time (10/s) and reports a limit of 2; response = trigger to the job's end",
            phase.as_secs()
        );
        for (case, grow) in [("one", false), ("pool", true)] {
            let rows = provisioned(&brokers, &root, case, grow, &rates, phase).await;
            let label = if grow { "a pool provisioned up to 10" } else { "one member" };
            for (rate, mean, max, most) in rows {
                println!(
                    "  {label:<27} {rate:>4.0}/s: response mean {mean:.0} ms, max {max} ms, members {most}"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Counters summed over brokers: what one protocol's jobs cost.
#[derive(Clone, Copy, Debug, Default)]
struct Traffic {
    /// Publications clients sent.
    publications: u64,
    /// Messages between brokers.
    link_messages: u64,
    /// Their encoded bytes.
    link_bytes: u64,
    /// Notifications delivered to clients.
    notifications: u64,
}

impl Traffic {
    /// The brokers' counters now (the sums over `clients`, one connected to each broker).
    async fn of(clients: &[padres_client::Client]) -> Self {
        let mut sum = Self::default();
        for client in clients {
            let stats = client.stats().await.expect("stats");
            sum.publications += stats.publications_in;
            sum.link_messages += stats.broker_messages_out;
            sum.link_bytes += stats.link_traffic.iter().map(|t| t.bytes).sum::<u64>();
            sum.notifications += stats.notifications_out;
        }
        sum
    }

    fn since(self, before: Self) -> Self {
        Self {
            publications: self.publications - before.publications,
            link_messages: self.link_messages - before.link_messages,
            link_bytes: self.link_bytes - before.link_bytes,
            notifications: self.notifications - before.notifications,
        }
    }
}

/// How a pool job is given to one of `members`: by the home naming one member in its
/// `dispatched` status (what agents do), or offered to every member, each member claiming
/// it from the home, and the home then naming the first claimer.
async fn assign(
    brokers: &[std::net::SocketAddr],
    members: usize,
    jobs: usize,
    broadcast: bool,
) -> (Traffic, u64) {
    use padres_client::Connect;
    let case = format!("{}-{members}", if broadcast { "broadcast" } else { "assigned" });
    let pool = format!("p-{case}");
    let connect = |at: usize, name: String| async move {
        Connect::new(brokers[at % brokers.len()]).name(&name).connect().await.expect("connects")
    };
    let mut home = connect(0, format!("home-{case}")).await;
    home.send(&format!(
        "a [class,eq,'job_status'],[appl,eq,'{case}'],[gid,isPresent,''],[job,isPresent,''],[status,isPresent,''],[pool,isPresent,''],[to,isPresent,''],[incarnation,isPresent,0]"
    ))
    .await
    .expect("advertised");
    home.send(&format!("s [class,eq,'pool_claim'],[pool,eq,'{pool}']")).await.expect("subscribed");
    // Each member tells the harness which job it was given.
    let (given, mut got) = tokio::sync::mpsc::unbounded_channel::<(usize, String)>();
    for m in 0..members {
        let name = format!("m{m}-{case}");
        let mut member = connect(m, name.clone()).await;
        let dispatched = format!(
            "s [class,eq,'job_status'],[status,eq,'dispatched'],[to,eq,'{name}'],[incarnation,=,1],[appl,eq,'{case}']"
        );
        member.send(&dispatched).await.expect("subscribed");
        if broadcast {
            member
                .send(&format!("s [class,eq,'job_status'],[status,eq,'offered'],[pool,eq,'{pool}']"))
                .await
                .expect("subscribed");
            member
                .send(&format!(
                    "a [class,eq,'pool_claim'],[pool,eq,'{pool}'],[gid,isPresent,''],[agent,isPresent,'']"
                ))
                .await
                .expect("advertised");
        }
        let given = given.clone();
        let pool = pool.clone();
        tokio::spawn(async move {
            while let Some(n) = member.next_notification().await {
                let Some((_, p)) = n.into_publication() else { continue };
                let gid = text(&p, "gid").unwrap_or_default().to_owned();
                if text(&p, "status") == Some("offered") {
                    let claim =
                        format!("[class,'pool_claim'],[pool,'{pool}'],[gid,'{gid}'],[agent,'{name}']");
                    member.publish(claim.parse().expect("a claim")).await.expect("claimed");
                } else if given.send((m, gid)).is_err() {
                    break;
                }
            }
        });
    }
    // Until every subscription has reached the home's broker.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let observers: Vec<padres_client::Client> =
        connect_all(brokers.iter().enumerate().map(|(i, _)| connect(i, format!("obs{i}-{case}")))).await;
    let before = Traffic::of(&observers).await;
    let status = |gid: &str, status: &str, to: &str| -> Publication {
        format!(
            "[class,'job_status'],[appl,'{case}'],[gid,'{gid}'],[job,'J'],[status,'{status}'],[pool,'{pool}'],[to,'{to}'],[incarnation,1]"
        )
        .parse()
        .expect("a status")
    };
    let mut claims = 0u64;
    for j in 0..jobs {
        let gid = format!("g{j}");
        let member = if broadcast {
            home.publish(status(&gid, "offered", "")).await.expect("offered");
            // The first claim wins; the others still come, and are counted.
            loop {
                let n = tokio::time::timeout(Duration::from_secs(10), home.next_notification()).await;
                let Ok(Some(n)) = n else { panic!("{case}: no claim for {gid}") };
                let Some((_, p)) = n.into_publication() else { continue };
                claims += 1;
                if text(&p, "gid") == Some(gid.as_str()) {
                    break text(&p, "agent").unwrap_or_default().to_owned();
                }
            }
        } else {
            format!("m{}-{case}", j % members)
        };
        home.publish(status(&gid, "dispatched", &member)).await.expect("dispatched");
        let (_, for_gid) = tokio::time::timeout(Duration::from_secs(10), got.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("{case}: {gid} never reached its member"));
        assert_eq!(for_gid, gid, "{case}: one dispatch at a time");
    }
    // The late claims.
    while broadcast && claims < (jobs * members) as u64 {
        let n = tokio::time::timeout(Duration::from_secs(10), home.next_notification()).await;
        let Ok(Some(n)) = n else { panic!("{case}: {claims} claims of {}", jobs * members) };
        if n.into_publication().is_some() {
            claims += 1;
        }
    }
    let after = Traffic::of(&observers).await;
    (after.since(before), claims)
}

/// Connects every client of `connecting`, one after the other.
async fn connect_all<F: Future<Output = padres_client::Client>>(
    connecting: impl Iterator<Item = F>,
) -> Vec<padres_client::Client> {
    let mut clients = Vec::new();
    for c in connecting {
        clients.push(c.await);
    }
    clients
}

/// `padres-bench pools`, (c): messages and link bytes per pool job assigned, naming one
/// member against offering the job to every member, on a chain of five brokers with the
/// members spread over them.
pub(crate) async fn dispatch_messages(quick: bool) {
    let jobs = if quick { 50 } else { 200 };
    let root = std::env::temp_dir().join(format!("padres-bench-dispatch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut brokers = Vec::new();
    for i in 0..5 {
        brokers.push(crate::quic::start_broker(&format!("D{}", i + 1), &root, brokers.last().copied()).await);
    }
    println!(
        "messages per assigned pool job ({jobs} jobs; brokers D1-D2-D3-D4-D5, the home at D1, member i at D(i mod 5 + 1)); a message is a client's publication, a message between brokers or a notification; counted by the brokers"
    );
    for members in [2, 4, 8, 16] {
        let (named, _) = assign(&brokers, members, jobs, false).await;
        let (offered, claims) = assign(&brokers, members, jobs, true).await;
        let per = |t: Traffic| {
            let n = jobs as f64;
            let messages = (t.publications + t.link_messages + t.notifications) as f64 / n;
            (messages, t.link_bytes as f64 / n, t)
        };
        let ((m1, b1, t1), (m2, b2, t2)) = (per(named), per(offered));
        println!(
            "  {members:>2} members: named {m1:.1} messages ({:.1} between brokers, {b1:.0} link bytes); offered to all {m2:.1} ({:.1} between brokers, {b2:.0} link bytes, {:.1} claims a job); ratio {:.1}x messages, {:.1}x bytes",
            t1.link_messages as f64 / jobs as f64,
            t2.link_messages as f64 / jobs as f64,
            claims as f64 / jobs as f64,
            m2 / m1,
            b2 / b1
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
