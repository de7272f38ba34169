//! Workflows: messages on broker links for deploying an application and running its
//! generations (the PADRES paper §5), with each job's dependency as one composite
//! subscription detected in the network against the same dependencies as primitive
//! subscriptions joined at the agent; and job transitions per second on brokers and agents
//! over QUIC.
//!
//! The traffic runs in the simulator (`padres_broker::sim`): deterministic, every message
//! between brokers counted. Agents are played by the benchmark from the real translation
//! (`padres_workflow::translate`): on a dependency met (a composite match, or in the
//! primitive baseline the agent's own join of the statuses it received) an agent publishes
//! the job's `started` and `succeeded` (or `skipped`, as its calendar says), exactly as
//! `padres-agent` does.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::federation::{pct, sorted};

use padres_broker::sim::Sim;
use padres_workflow::examples::{MONTH_END, PAYROLL};
use padres_workflow::{APPL_END, Application, EnvelopeBody, Need, parse_application, translate};

/// Where the dependencies are joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One composite subscription per job, detected in the network.
    Composite,
    /// Each atomic part subscribed on its own, joined at the agent.
    Primitive,
}

/// Messages on links.
#[derive(Clone, Copy, Debug, Default)]
struct Traffic {
    deploy: u64,
    run: u64,
    /// Job statuses published (transitions), to check both modes ran the same generations.
    statuses: usize,
}

/// An agent played by the benchmark.
struct Player {
    client: u64,
    agent: String,
    body: EnvelopeBody,
    /// Composite mode: each dependency subscription's job.
    by_sub: HashMap<padres_lang::MessageId, String>,
    /// Primitive mode: per generation, each job's statuses received, and triggers seen.
    received: HashMap<String, HashMap<String, BTreeSet<String>>>,
    triggered: HashMap<String, String>,
    /// (gid, job) done.
    done: HashSet<(String, String)>,
}

fn met(need: &Need, received: &HashMap<String, BTreeSet<String>>) -> bool {
    match need {
        Need::After { job, statuses, .. } => {
            received.get(job).is_some_and(|seen| statuses.iter().any(|s| seen.contains(s)))
        }
        Need::AnyOf(needs) => needs.iter().any(|n| met(n, received)),
    }
}

/// A job found ready: publishes its statuses from its agent; returns how many, and the
/// last.
fn run_job(
    sim: &mut Sim,
    app: &Application,
    player: &Player,
    gid: &str,
    date: &str,
    job: &str,
) -> (usize, &'static str) {
    let status = |s: &str, attempt: u32| {
        format!(
            "p [class,'job_status'],[appl,'{}'],[gid,'{gid}'],[job,'{job}'],[agent,'{}'],[status,'{s}'],[exit,0],[attempt,{attempt}]",
            app.name, player.agent
        )
    };
    let Some(definition) = app.job(job) else {
        sim.send(player.client, &status("succeeded", 0));
        return (1, "succeeded");
    };
    let day: chrono::NaiveDate = date.parse().expect("a date");
    if definition.schedule.runs_on(day, &app.calendar) {
        sim.send(player.client, &status("started", 1));
        sim.send(player.client, &status("succeeded", 1));
        (2, "succeeded")
    } else {
        sim.send(player.client, &status("skipped", 0));
        (1, "skipped")
    }
}

/// Deploys `xml` on a chain of `brokers` brokers (agents spread over them, the operator at
/// the last) and runs the generations `(gid, date)`.
fn traffic_run(xml: &str, mode: Mode, brokers: usize, generations: &[(&str, &str)]) -> Traffic {
    let app = parse_application(xml).expect("a valid definition");
    let deployment = translate(&app).expect("translates");
    let mut sim = Sim::new(brokers);
    for b in 1..brokers {
        sim.link(b - 1, b, 1);
    }
    sim.run();
    let operator = 10_000;
    sim.attach(operator, brokers - 1);
    sim.id(operator, &format!("a {}", padres_workflow::control::control_advertisement()));
    let mut players: Vec<Player> = Vec::new();
    for (i, envelope) in deployment.envelopes.iter().enumerate() {
        let client = i as u64 + 1;
        // Spread: the first agent at B1, the last at the far end.
        let broker = if deployment.envelopes.len() == 1 {
            0
        } else {
            i * (brokers - 1) / (deployment.envelopes.len() - 1)
        };
        sim.attach(client, broker);
        sim.id(client, &padres_workflow::control::control_subscription(&envelope.agent));
        players.push(Player {
            client,
            agent: envelope.agent.clone(),
            body: envelope.envelope_body(&app.name),
            by_sub: HashMap::new(),
            received: HashMap::new(),
            triggered: HashMap::new(),
            done: HashSet::new(),
        });
    }
    // Deployment: the envelopes, then each agent's advertisements and subscriptions.
    let before = sim.link_messages();
    for envelope in &deployment.envelopes {
        let publication = envelope.publication(&app.name).expect("an envelope");
        sim.send(operator, &format!("p {publication}"));
    }
    sim.run();
    for player in &mut players {
        let home = player.body.jobs.iter().any(|j| j.job == padres_workflow::APPL_START);
        if home {
            sim.id(
                player.client,
                &format!("a {}", padres_workflow::control::trigger_advertisement(&app.name)),
            );
        }
        let mut atoms: BTreeSet<String> = BTreeSet::new();
        for job in &player.body.jobs {
            sim.id(player.client, &job.advertisement);
            match mode {
                Mode::Composite => {
                    let sub = sim.id(player.client, &job.subscription);
                    player.by_sub.insert(sub, job.job.clone());
                }
                Mode::Primitive => {
                    let cs: padres_lang::CompositeSubscription =
                        job.subscription.trim_start_matches("cs ").parse().expect("a pattern");
                    for atom in cs.atoms() {
                        atoms.insert(atom.to_string().replace("[gid,eq,$S$g]", "[gid,isPresent,'']"));
                    }
                }
            }
        }
        if mode == Mode::Primitive && !home {
            // The composite subscriptions' `until`: the generation's end, to drop its state.
            atoms.insert(format!(
                "[class,eq,'job_status'],[appl,eq,'{}'],[gid,isPresent,''],[job,eq,'{APPL_END}']",
                app.name
            ));
        }
        for atom in atoms {
            sim.id(player.client, &format!("s {atom}"));
        }
    }
    sim.run();
    let deploy = sim.link_messages() - before;

    // Execution: the home agent publishes each trigger; agents react until quiet.
    let before = sim.link_messages();
    let home = players.iter().position(|p| p.body.jobs.iter().any(|j| j.job == padres_workflow::APPL_START));
    let home = home.expect("a home agent");
    for (gid, date) in generations {
        sim.send(
            players[home].client,
            &format!(
                "p {}",
                padres_workflow::control::trigger_publication(
                    &app.name,
                    &players[home].body.version,
                    gid,
                    date
                )
                .expect("a trigger")
            ),
        );
        players[home].triggered.insert((*gid).to_owned(), (*date).to_owned());
    }
    let dates: BTreeMap<&str, &str> = generations.iter().copied().collect();
    let mut statuses = 0;
    let (mut seen_plain, mut seen_composite) = (0, 0);
    loop {
        sim.run();
        let mut ready: Vec<(usize, String, String)> = Vec::new();
        for d in &sim.composite_deliveries[seen_composite..] {
            let Some(p) = players.iter().position(|p| p.client == d.client) else { continue };
            let Some(job) = players[p].by_sub.get(&d.sub) else { continue };
            let trigger = d.pubs.iter().find(|(_, publication)| publication.class() == "trigger");
            let gid = trigger.and_then(|(_, t)| t.get("gid")).and_then(|v| v.as_str()).unwrap_or_default();
            ready.push((p, gid.to_owned(), job.clone()));
        }
        seen_composite = sim.composite_deliveries.len();
        for d in &sim.deliveries[seen_plain..] {
            let Some(p) = players.iter().position(|p| p.client == d.client) else { continue };
            let text = |a: &str| d.publication.get(a).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            let player = &mut players[p];
            if d.publication.class() == "trigger" {
                player.triggered.insert(text("gid"), text("date"));
            } else if d.publication.class() == "job_status" {
                player
                    .received
                    .entry(text("gid"))
                    .or_default()
                    .entry(text("job"))
                    .or_default()
                    .insert(text("status"));
            }
        }
        if mode == Mode::Primitive {
            // Each agent joins what it received with what it published itself (a broker
            // does not send a client its own publications).
            for (p, player) in players.iter().enumerate() {
                for gid in player.triggered.keys() {
                    let received = player.received.get(gid).cloned().unwrap_or_default();
                    for job in &player.body.jobs {
                        if job.after.iter().all(|need| met(need, &received)) {
                            ready.push((p, gid.clone(), job.job.clone()));
                        }
                    }
                }
            }
        }
        seen_plain = sim.deliveries.len();
        let mut any = false;
        for (p, gid, job) in ready {
            if !players[p].done.insert((gid.clone(), job.clone())) {
                continue;
            }
            any = true;
            let date = dates.get(gid.as_str()).copied().unwrap_or("2026-11-27");
            let (count, last) = run_job(&mut sim, &app, &players[p], &gid, date, &job);
            statuses += count;
            players[p]
                .received
                .entry(gid.clone())
                .or_default()
                .entry(job.clone())
                .or_default()
                .insert(last.to_owned());
        }
        if !any {
            break;
        }
    }
    let ended = players[home].done.iter().filter(|(_, job)| job == APPL_END).count();
    assert_eq!(
        ended,
        generations.len(),
        "{mode:?}: every generation reached APPL_END; done {:?}; {} composite deliveries, {} deliveries; replies {:?}",
        players.iter().map(|p| p.done.len()).collect::<Vec<_>>(),
        sim.composite_deliveries.len(),
        sim.deliveries.len(),
        sim.replies.values().filter(|r| r.is_err()).collect::<Vec<_>>()
    );
    Traffic { deploy, run: sim.link_messages() - before, statuses }
}

/// A traffic case: its name, the definition, its generations (gid, date).
type Case = (&'static str, &'static str, &'static [(&'static str, &'static str)]);

/// The traffic figures, printed.
pub(crate) fn traffic() {
    println!("workflow traffic: messages on broker links, composite dependency subscriptions detected in");
    println!(
        "the network against primitive subscriptions joined at the agent (the simulator, 5-broker chain)"
    );
    let cases: [Case; 3] = [
        ("payroll, one Friday generation", PAYROLL, &[("fri", "2026-11-27")]),
        ("payroll, Friday and Wednesday", PAYROLL, &[("fri", "2026-11-27"), ("wed", "2026-11-25")]),
        ("month-end (41 jobs), last workday", MONTH_END, &[("close", "2026-11-30")]),
    ];
    for (name, xml, generations) in cases {
        let composite = traffic_run(xml, Mode::Composite, 5, generations);
        let primitive = traffic_run(xml, Mode::Primitive, 5, generations);
        assert_eq!(composite.statuses, primitive.statuses, "{name}: the same jobs ran");
        let ratio = |a: u64, b: u64| a as f64 / b as f64;
        println!(
            "  {name}: deploy {} vs {} ({:.1}% of primitive), run {} vs {} ({:.1}% of primitive), {} statuses",
            composite.deploy,
            primitive.deploy,
            100.0 * ratio(composite.deploy, primitive.deploy),
            composite.run,
            primitive.run,
            100.0 * ratio(composite.run, primitive.run),
            composite.statuses
        );
    }
}

/// Brokers in a chain, in this process on loopback QUIC (each with its own data directory).
async fn chain(root: &std::path::Path, n: usize) -> Vec<std::net::SocketAddr> {
    let mut addrs = Vec::new();
    for i in 0..n {
        addrs.push(crate::quic::start_broker(&format!("B{}", i + 1), root, addrs.last().copied()).await);
    }
    addrs
}

/// A job running `/bin/true`.
fn true_job(name: &str, agent: &str, after: Option<&str>) -> String {
    let after = after.map(|a| format!("<after job=\"{a}\"/>")).unwrap_or_default();
    format!(
        "<job name=\"{name}\" run=\"daily\" agent=\"{agent}\" retries=\"0\"><command>/bin/true</command>{after}</job>"
    )
}

/// Deploys `xml` through `operator`, waiting for every agent's reply.
pub(crate) async fn deploy(operator: &mut padres_client::Client, xml: &str) -> Application {
    use padres_workflow::control::{Reply, reply_subscription};
    let app = parse_application(xml).expect("a valid definition");
    let deployment = translate(&app).expect("translates");
    operator.send(&reply_subscription(&app.name)).await.expect("subscribed");
    let mut waiting: BTreeSet<String> = deployment.envelopes.iter().map(|e| e.agent.clone()).collect();
    while !waiting.is_empty() {
        for envelope in deployment.envelopes.iter().filter(|e| waiting.contains(&e.agent)) {
            let control = envelope.control(&app.name, "bench");
            operator.publish_acked(control.publication().expect("an envelope")).await.expect("sent");
        }
        let until = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        while let Ok(Some(n)) = tokio::time::timeout_at(until, operator.next_notification()).await {
            let Some((_, p)) = n.into_publication() else { continue };
            if let Some(reply) = Reply::from_publication(&p) {
                assert_eq!(reply.refused, None, "{reply:?}");
                waiting.remove(&reply.agent);
            }
            if waiting.is_empty() {
                break;
            }
        }
    }
    app
}

/// One status seen: the job, its status, and the time its publisher's broker stamped on it
/// (epoch milliseconds).
type Seen = (String, String, i64);

/// Triggers generations `gids` of `app` (at its home agent) and waits for every one's
/// `APPL_END`; returns the statuses seen and the time taken.
async fn run_generations(
    operator: &padres_client::Client,
    monitor: &mut padres_client::Client,
    app: &Application,
    gids: &[String],
) -> (Vec<Seen>, std::time::Duration) {
    use padres_workflow::control::{Command, Control};
    let home = app.home_agent().to_owned();
    let start = std::time::Instant::now();
    for gid in gids {
        let control = Control {
            agent: home.clone(),
            appl: app.name.clone(),
            reference: gid.clone(),
            command: Command::Trigger { gid: gid.clone(), date: "2026-11-27".to_owned() },
        };
        operator.publish(control.publication().expect("a trigger")).await.expect("sent");
    }
    let mut statuses = Vec::new();
    let mut ended = 0;
    while ended < gids.len() {
        let next =
            tokio::time::timeout(std::time::Duration::from_secs(120), monitor.next_notification()).await;
        let Ok(Some(n)) = next else {
            panic!("{}: stalled after {} statuses, {ended} generations ended", app.name, statuses.len())
        };
        let Some((_, p)) = n.into_publication() else { continue };
        let text = |name: &str| p.get(name).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let stamped = match p.get(padres_lang::time::TIME) {
            Some(padres_lang::Value::Time(t)) => t.millis(),
            _ => 0,
        };
        if text("job") == APPL_END {
            ended += 1;
        }
        statuses.push((text("job"), text("status"), stamped));
    }
    (statuses, start.elapsed())
}

/// In a deep chain `D0` → `D1` → …: for each job after the first, the milliseconds from
/// its predecessor's `succeeded` to its own `started` (the dependency), and from its own
/// `started` to its `succeeded` (the job), by the brokers' stamps.
fn chain_latencies(seen: &[Seen]) -> (Vec<f64>, Vec<f64>) {
    let mut stamps: HashMap<(&str, &str), f64> = HashMap::new();
    for (job, status, t) in seen {
        stamps.entry((job.as_str(), status.as_str())).or_insert(*t as f64);
    }
    let at = |job: &str, status: &str| stamps.get(&(job, status)).copied();
    let (mut dependency, mut job) = (Vec::new(), Vec::new());
    for i in 1.. {
        let (name, before) = (format!("D{i}"), format!("D{}", i - 1));
        let Some(started) = at(&name, "started") else { break };
        dependency.extend(at(&before, "succeeded").map(|done| started - done));
        job.extend(at(&name, "succeeded").map(|done| done - started));
    }
    (dependency, job)
}

/// `count` runs of `/bin/true`, at most `parallel` at once: the spawning cost alone.
async fn spawn_baseline(count: usize, parallel: usize) -> std::time::Duration {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(parallel));
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..count {
        let slot = slots.clone().acquire_owned().await.expect("a slot");
        tasks.push(tokio::spawn(async move {
            let status = tokio::process::Command::new("/bin/true").status().await.expect("/bin/true runs");
            assert!(status.success());
            drop(slot);
        }));
    }
    for task in tasks {
        task.await.expect("spawned");
    }
    start.elapsed()
}

/// Ten agents `{prefix}-0` … `{prefix}-9`, two at each broker of `brokers`, running their
/// jobs' attempts with `runner`; their names.
async fn start_agents(
    brokers: &[std::net::SocketAddr],
    root: &std::path::Path,
    prefix: &str,
    runner: padres_agent::agent::Runner,
) -> Vec<String> {
    let agents: Vec<String> = (0..10).map(|i| format!("{prefix}-{i}")).collect();
    for (i, name) in agents.iter().enumerate() {
        let client = padres_client::Connect::new(brokers[i % brokers.len()])
            .name(name)
            .connect()
            .await
            .expect("connects");
        let options = padres_agent::agent::Options {
            runner,
            ..padres_agent::agent::Options::new(name, root.join("agents").join(name))
        };
        tokio::spawn(
            async move { padres_agent::agent::serve(client, options).await.expect("the agent serves") },
        );
    }
    agents
}

/// The wide and the deep DAG of `jobs` jobs over `agents`: (shape, its jobs' XML).
fn shapes(jobs: usize, agents: &[String], prefix: &str) -> [(String, String); 2] {
    let wide: String =
        (0..jobs).map(|i| true_job(&format!("W{i}"), &agents[i % agents.len()], None)).collect();
    let deep: String = (0..jobs)
        .map(|i| {
            let after = (i > 0).then(|| format!("D{}", i - 1));
            true_job(&format!("D{i}"), &agents[i % agents.len()], after.as_deref())
        })
        .collect();
    [(format!("{prefix}wide"), wide), (format!("{prefix}deep"), deep)]
}

/// Deploys application `shape` of `jobs_xml` through `operator`, with `monitor` subscribed
/// to its statuses.
async fn deploy_shape(
    operator: &mut padres_client::Client,
    monitor: &mut padres_client::Client,
    shape: &str,
    jobs_xml: &str,
) -> Application {
    let xml =
        format!("<application name=\"{shape}\" tz=\"UTC\" max-generations=\"1000\">{jobs_xml}</application>");
    let app = deploy(operator, &xml).await;
    monitor.send(&format!("s [class,eq,'job_status'],[appl,eq,'{shape}']")).await.expect("subscribed");
    app
}

/// Runs generation `gid` of `app`: the statuses seen and the time taken; its transitions
/// per second are added to `rates`.
async fn run_one(
    operator: &padres_client::Client,
    monitor: &mut padres_client::Client,
    app: &Application,
    gid: String,
    rates: &mut Vec<f64>,
) -> (Vec<Seen>, std::time::Duration) {
    let (seen, took) = run_generations(operator, monitor, app, &[gid]).await;
    rates.push(seen.len() as f64 / took.as_secs_f64());
    (seen, took)
}

/// The median of `v`.
fn median(v: &[f64]) -> f64 {
    pct(&sorted(v.to_vec()), 0.5)
}

/// The time one claim takes alone: `count` jobs claimed one at a time in a fresh journal
/// (SQLite, a synchronous commit each, as the agent claims a match that came alone);
/// the median, in milliseconds.
fn claim_alone(root: &std::path::Path, count: usize) -> f64 {
    use padres_agent::journal::Store as _;
    let dir = root.join("claims");
    std::fs::create_dir_all(&dir).expect("a directory");
    let mut journal = padres_agent::journal::Journal::open(&dir).expect("a journal");
    let took: Vec<f64> = (0..count)
        .map(|i| {
            let start = std::time::Instant::now();
            journal.claim("bench", "g1", &format!("J{i}")).expect("claimed");
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(&took)
}

/// Job transitions per second (a transition is one `job_status` publication) for a wide
/// and a deep DAG of `jobs` jobs on 5 brokers and 10 agents: first with attempts that
/// start no process (the scheduler alone: claims, statuses, detection), beside the time
/// of one claim's commit, which bounds the deep chain; then with every command
/// `/bin/true`, against spawning the same processes alone; and payroll generations per
/// second.
pub(crate) async fn transitions(quick: bool, repeat: usize) {
    use padres_agent::agent::Runner;
    // A deep chain's latencies, printed after its run.
    let latencies = |seen: &[Seen]| {
        let (dependency, job) = chain_latencies(seen);
        let (dependency, job) = (sorted(dependency), sorted(job));
        if !dependency.is_empty() && !job.is_empty() {
            println!(
                "    by the brokers' stamps (1 ms steps): predecessor's succeeded -> started p50 {:.0} ms, p99 {:.0} ms; started -> succeeded p50 {:.0} ms, p99 {:.0} ms",
                pct(&dependency, 0.5),
                pct(&dependency, 0.99),
                pct(&job, 0.5),
                pct(&job, 0.99)
            );
        }
    };
    let jobs = if quick { 200 } else { 1000 };
    let root = std::env::temp_dir().join(format!("padres-bench-workflow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let brokers = chain(&root.join("brokers"), 5).await;
    let instant = start_agents(&brokers, &root, "instant", Runner::Instant).await;
    let agents = start_agents(&brokers, &root, "agent", Runner::Processes).await;
    let mut operator =
        padres_client::Connect::new(brokers[4]).name("operator").connect().await.expect("connects");
    operator.advertise(padres_workflow::control::control_advertisement()).await.expect("advertised");
    let mut monitor =
        padres_client::Connect::new(brokers[4]).name("monitor").connect().await.expect("connects");
    // The agents subscribe to their commands as they start: give them a moment.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    println!(
        "workflow transitions without processes: {jobs}-job DAGs on 5 brokers (a chain) and 10 agents (8 jobs at once each), attempts succeeding at once (Runner::Instant)"
    );
    for (shape, jobs_xml) in &shapes(jobs, &instant, "instant-") {
        let app = deploy_shape(&mut operator, &mut monitor, shape, jobs_xml).await;
        let mut rates = Vec::new();
        let mut claims = Vec::new();
        for r in 0..repeat {
            let (seen, took) =
                run_one(&operator, &mut monitor, &app, format!("{shape}-{r}"), &mut rates).await;
            let statuses = seen.len();
            claims.push(claim_alone(&root.join(format!("{shape}-{r}")), 200));
            println!(
                "  {shape} run {}: {statuses} transitions in {:.2} s = {:.0}/s; one claim's commit alone: {:.3} ms",
                r + 1,
                took.as_secs_f64(),
                rates[r],
                claims[r]
            );
            latencies(&seen);
        }
        let (rate, claim) = (median(&rates), median(&claims));
        println!(
            "  {shape}: median {rate:.0} transitions/s ({:.0} jobs/s, {:.3} ms a job); a claim's commit alone {claim:.3} ms: {:.0} transitions/s if a job cost only its claim",
            rate / 2.0,
            2e3 / rate,
            2e3 / claim
        );
    }
    println!(
        "workflow transitions: {jobs}-job DAGs on 5 brokers (a chain) and 10 agents (8 jobs at once each), every command /bin/true"
    );
    for (shape, jobs_xml) in &shapes(jobs, &agents, "") {
        let app = deploy_shape(&mut operator, &mut monitor, shape, jobs_xml).await;
        let mut rates = Vec::new();
        let mut spawn_rates = Vec::new();
        for r in 0..repeat {
            let (seen, took) =
                run_one(&operator, &mut monitor, &app, format!("{shape}-{r}"), &mut rates).await;
            let statuses = seen.len();
            let parallel = if shape == "wide" { 80 } else { 1 };
            let spawned = spawn_baseline(jobs, parallel).await;
            spawn_rates.push(jobs as f64 / spawned.as_secs_f64());
            println!(
                "  {shape} run {}: {statuses} transitions in {:.2} s = {:.0}/s; /bin/true alone, {parallel} at once: {:.0} spawns/s",
                r + 1,
                took.as_secs_f64(),
                rates[r],
                spawn_rates[r]
            );
            latencies(&seen);
        }
        let (rate, spawn) = (median(&rates), median(&spawn_rates));
        println!(
            "  {shape}: median {rate:.0} transitions/s ({:.0} jobs/s), spawning alone {spawn:.0}/s: jobs at {:.2}x the spawn rate",
            rate / 2.0,
            rate / 2.0 / spawn
        );
    }
    // Payroll generations per second: payroll with /bin/true commands, many at once.
    let payroll = PAYROLL
        .replace("max-generations=\"3\"", "max-generations=\"1000\"")
        .replace("<command>./extract.sh</command>", "<command>/bin/true</command>")
        .replace("<command>./calc.sh</command>", "<command>/bin/true</command>")
        .replace("<command>./weekly.sh</command>", "<command>/bin/true</command>")
        .replace("<command>./post.sh</command>", "<command>/bin/true</command>");
    let app = deploy(&mut operator, &payroll).await;
    monitor
        .send("s [class,eq,'job_status'],[appl,eq,'payroll'],[job,eq,'APPL_END']")
        .await
        .expect("subscribed");
    let generations = if quick { 20 } else { 100 };
    let mut rates = Vec::new();
    for r in 0..repeat {
        let gids: Vec<String> = (0..generations).map(|g| format!("p{r}-{g}")).collect();
        let (_, took) = run_generations(&operator, &mut monitor, &app, &gids).await;
        rates.push(generations as f64 / took.as_secs_f64());
        println!(
            "  payroll run {}: {generations} generations in {:.2} s = {:.1}/s",
            r + 1,
            took.as_secs_f64(),
            rates[r]
        );
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "  payroll: median {:.1} generations/s ({generations} triggered at once)",
        rates[rates.len() / 2]
    );
    let _ = std::fs::remove_dir_all(&root);
}
