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

/// `padres-bench pools`: the policies, then the lowest delay with three report periods.
pub(crate) async fn placement(quick: bool) {
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
            run(&brokers, &root, &format!("lowest-delay-{ms}"), "lowest-delay", period, generations).await;
        println!("  lowest-delay  (reports every {ms} ms): {}", summary(&mut outcome));
    }
    let _ = std::fs::remove_dir_all(&root);
}
