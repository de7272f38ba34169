//! `padres-bench workflow-scale`: workflows on a federation of real processes.
//!
//! `padres-broker` processes on loopback as a random tree or a cyclic graph (the overlays
//! of `padres-bench federation`), some keeping the history of `agent_ctl`, `trigger`,
//! `job_status` and `agent_load` (`--stores`, spread evenly) indexed by `appl` and `gid`; `padres-agent` processes spread over them; applications
//! of the payroll shape (`examples/payroll.xml`, its shell scripts as the jobs), each with
//! its jobs on agents at different brokers, deployed at once with `padres workflow
//! deploy`; then a Friday, a Wednesday and a Saturday generation of every application
//! triggered at once with `padres workflow trigger`. A monitor subscribed to `job_status`
//! before the first trigger times each generation (its `padres workflow trigger` process
//! started → `APPL_END` seen) and
//! counts every job's `started`; at the end `padres workflow status --json` of every
//! application is checked: every generation succeeded, every job ran or was skipped as its
//! calendar says for that day, and no job started twice.
//!
//! The binaries are the builds beside this one (`cargo build --profile dist -p
//! padres-broker -p padres-bench -p padres-cli -p padres-agent`); `PADRES_BROKER`,
//! `PADRES_AGENT` and `PADRES_CLI` name others; `PADRES_KEEP=1` keeps the work directory.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use padres_lang::Value;
use padres_workflow::examples::{PAYROLL, PAYROLL_SCRIPTS as SCRIPTS};
use padres_workflow::{APPL_END, APPL_START, Application, parse_application};
use tokio::process::{Child, Command};

use crate::federation::{Brokers, broker_binary, connect, linked, overlay, pct, rss_kb, sibling, sorted};

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) brokers: usize,
    pub(crate) agents: usize,
    pub(crate) apps: usize,
    /// Brokers with a history store.
    pub(crate) stores: usize,
    /// Generations of each application, triggered at once (1 to 3: Friday, Wednesday,
    /// Saturday).
    pub(crate) generations: usize,
    /// Overlays: "tree", "cyclic".
    pub(crate) shapes: Vec<String>,
    pub(crate) runs: usize,
    pub(crate) seed: u64,
}

/// The stores keep what `padres workflow` and `padres agents` read back, indexed by what
/// `padres workflow` selects on: unindexed, 100 triggers at once (each reading a
/// deployment from the stores) found the stores of 100 brokers silent past their 5 s
/// deadline for 76 of them.
const STORE: [&str; 12] = [
    "--history",
    "[class,eq,'agent_ctl']",
    "--history",
    "[class,eq,'trigger']",
    "--history",
    "[class,eq,'job_status']",
    "--history",
    "[class,eq,'agent_load']",
    "--history-index",
    "appl",
    "--history-index",
    "gid",
];
/// A Friday (every job runs), a Wednesday (C is skipped), a Saturday (C and D are).
const DATES: [&str; 3] = ["2026-11-27", "2026-11-25", "2026-11-28"];
/// How long every generation may take, from the triggers.
const GENERATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// Application `k`: payroll, named `payroll-K`, with its three agents' parts on agents a
/// third of the fleet apart (so, on different brokers), no cron trigger, and room for
/// `generations` at once.
fn application(k: usize, agents: usize, generations: usize) -> String {
    let agent = |offset: usize| format!("agent=\"agent-{}\"", (k + offset * agents / 3) % agents + 1);
    let xml = PAYROLL
        .replace("name=\"payroll\"", &format!("name=\"payroll-{k}\""))
        .replace("max-generations=\"3\"", &format!("max-generations=\"{}\"", generations.max(1)))
        .replace("<trigger cron=\"0 18 * * *\"/>", "")
        .replace("agent=\"agent-1\"", "AGENT_A")
        .replace("agent=\"agent-2\"", "AGENT_B")
        .replace("agent=\"agent-3\"", "AGENT_C");
    xml.replace("AGENT_A", &agent(0)).replace("AGENT_B", &agent(1)).replace("AGENT_C", &agent(2))
}

/// Runs `padres ARGS` at `broker`; its standard output, or why it failed.
async fn padres(cli: &Path, broker: SocketAddr, args: &[&str]) -> Result<String, String> {
    let output = Command::new(cli)
        .args(args)
        .arg("--broker")
        .arg(format!("quic://{broker}"))
        .arg("--name")
        .arg("operator")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{}: {e}", cli.display()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "padres {} exited {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn start_agents(binary: &Path, dir: &Path, addrs: &[SocketAddr], agents: usize) -> Vec<Child> {
    use std::os::unix::fs::PermissionsExt as _;
    (0..agents)
        .map(|i| {
            let name = format!("agent-{}", i + 1);
            let work = dir.join(&name);
            std::fs::create_dir_all(&work).expect("a work directory");
            for (script, text) in SCRIPTS {
                let path = work.join(script);
                std::fs::write(&path, text).expect("a script written");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("executable");
            }
            let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("a log file");
            Command::new(binary)
                .arg("--name")
                .arg(&name)
                .arg("--broker")
                .arg(format!("quic://{}", addrs[i % addrs.len()]))
                .arg("--work-dir")
                .arg(&work)
                .stdout(Stdio::null())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("{} starts: {e}", binary.display()))
        })
        .collect()
}

/// What one run measured.
#[derive(Debug, Default)]
struct Run {
    linked_s: f64,
    /// All deployments at once: the wall time, and each `padres workflow deploy`'s.
    deploy_s: f64,
    deploy_each_s: Vec<f64>,
    /// Each generation, trigger sent → its `APPL_END` seen, and the whole batch.
    generation_s: Vec<f64>,
    all_s: f64,
    statuses: usize,
    link_messages: u64,
    rss_brokers_kb: Vec<f64>,
    rss_agents_kb: Vec<f64>,
    settle_timeouts: u64,
    generations: usize,
    /// Generations `padres workflow status` shows as the calendar says.
    correct: usize,
    problems: Vec<String>,
}

/// Checks `app`'s generations in `padres workflow status --json` output against its
/// calendar and the `started` statuses seen; returns how many were correct.
fn check(
    app: &Application,
    gids: &[(String, &str)],
    json: &str,
    starts: &BTreeMap<(String, String, String), usize>,
    problems: &mut Vec<String>,
) -> usize {
    let status: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("{}: status --json is not JSON ({e})", app.name));
            return 0;
        }
    };
    let generations = status["generations"].as_array().cloned().unwrap_or_default();
    let mut correct = 0;
    for (gid, date) in gids {
        let Some(generation) = generations.iter().find(|g| g["gid"] == gid.as_str()) else {
            problems.push(format!("{}/{gid}: not in padres workflow status", app.name));
            continue;
        };
        let before = problems.len();
        if generation["outcome"] != "succeeded" {
            problems.push(format!("{}/{gid}: {}", app.name, generation["outcome"]));
        }
        let day: chrono::NaiveDate = date.parse().expect("a date");
        for job in generation["jobs"].as_array().into_iter().flatten() {
            let name = job["job"].as_str().unwrap_or("?");
            if name == APPL_START || name == APPL_END {
                continue;
            }
            let runs = app.job(name).is_some_and(|j| j.schedule.runs_on(day, &app.calendar));
            let expected = if runs { "succeeded" } else { "skipped" };
            if job["state"] != expected {
                problems.push(format!(
                    "{}/{gid}/{name}: {}, its calendar says {expected}",
                    app.name, job["state"]
                ));
            }
            let started = starts.get(&(app.name.clone(), gid.clone(), name.to_owned())).copied().unwrap_or(0);
            if started != usize::from(runs) {
                problems.push(format!("{}/{gid}/{name}: started {started} times", app.name));
            }
        }
        if problems.len() == before {
            correct += 1;
        }
    }
    correct
}

async fn one_run(plan: &Plan, cyclic: bool, seed: u64, root: &Path) -> Run {
    let n = plan.brokers;
    let mut rng = fastrand::Rng::with_seed(seed);
    let links = overlay(n, cyclic, &mut rng);
    let mut degree = vec![0usize; n];
    for &(a, b) in &links {
        degree[a] += 1;
        degree[b] += 1;
    }
    let dir = root.join(format!("{}-{seed}", if cyclic { "cyclic" } else { "tree" }));
    std::fs::create_dir_all(dir.join("agents")).expect("a work directory");
    let cli = sibling("padres", "PADRES_CLI");
    let started = Instant::now();
    let stores: Vec<usize> = (0..plan.stores.clamp(1, n)).map(|i| i * n / plan.stores.clamp(1, n)).collect();
    let mut brokers = Brokers::start(&broker_binary(), &dir, &links, n, cyclic, &STORE, &stores);
    let observers = linked(&brokers, &degree, started).await;
    let mut run = Run { linked_s: started.elapsed().as_secs_f64(), ..Run::default() };
    let mut agents = start_agents(
        &sibling("padres-agent", "PADRES_AGENT"),
        &dir.join("agents"),
        &brokers.addrs,
        plan.agents,
    );

    // Deploy every application at once, each from a broker picked at random.
    let apps: Vec<Application> = (0..plan.apps)
        .map(|k| {
            let xml = application(k, plan.agents, plan.generations);
            std::fs::write(dir.join(format!("payroll-{k}.xml")), &xml).expect("written");
            parse_application(&xml).expect("a valid definition")
        })
        .collect();
    let deploy_started = Instant::now();
    let deploys: Vec<_> = (0..plan.apps)
        .map(|k| {
            let (cli, file, at) =
                (cli.clone(), dir.join(format!("payroll-{k}.xml")), brokers.addrs[rng.usize(..n)]);
            tokio::spawn(async move {
                let t = Instant::now();
                let file = file.display().to_string();
                let result = padres(&cli, at, &["workflow", "deploy", &file, "--timeout", "120"]).await;
                (result, t.elapsed().as_secs_f64())
            })
        })
        .collect();
    for deploy in deploys {
        let (result, took) = deploy.await.expect("the deploy task");
        run.deploy_each_s.push(took);
        if let Err(e) = result {
            run.problems.push(e);
        }
    }
    run.deploy_s = deploy_started.elapsed().as_secs_f64();

    // The monitor sees every status from before the first trigger.
    let mut monitor = connect(brokers.addrs[0], "monitor").await;
    monitor.send("s [class,eq,'job_status']").await.expect("subscribed");
    let out_before: u64 = {
        let mut sum = 0;
        for o in &observers {
            sum += o.stats().await.map(|s| s.broker_messages_out).unwrap_or(0);
        }
        sum
    };
    let dates = &DATES[..plan.generations.clamp(1, DATES.len())];
    let mut gids: Vec<Vec<(String, &str)>> = Vec::new();
    let mut triggered: BTreeMap<(String, String), Instant> = BTreeMap::new();
    let mut triggers = Vec::new();
    let all_started = Instant::now();
    for app in &apps {
        let mut own = Vec::new();
        for date in dates {
            let gid = format!("g-{date}");
            let (cli, at, appl, date_s, gid_s) =
                (cli.clone(), brokers.addrs[rng.usize(..n)], app.name.clone(), date.to_string(), gid.clone());
            triggered.insert((app.name.clone(), gid.clone()), Instant::now());
            triggers.push(tokio::spawn(async move {
                padres(&cli, at, &["workflow", "trigger", &appl, "--date", &date_s, "--gid", &gid_s]).await
            }));
            own.push((gid, *date));
        }
        gids.push(own);
    }
    for trigger in triggers {
        if let Err(e) = trigger.await.expect("the trigger task") {
            eprintln!("  {e}");
            run.problems.push(e);
        }
    }
    run.generations = triggered.len();
    let mut starts: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let mut ended: BTreeSet<(String, String)> = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + GENERATIONS_TIMEOUT;
    while ended.len() < triggered.len() {
        let Ok(Some(notification)) = tokio::time::timeout_at(deadline, monitor.next_notification()).await
        else {
            run.problems.push(format!(
                "{} of {} generations ended within {} s",
                ended.len(),
                triggered.len(),
                GENERATIONS_TIMEOUT.as_secs()
            ));
            break;
        };
        let Some((_, p)) = notification.into_publication() else { continue };
        let text = |a: &str| p.get(a).and_then(Value::as_str).unwrap_or("").to_owned();
        run.statuses += 1;
        let (appl, gid, job) = (text("appl"), text("gid"), text("job"));
        if text("status") == "started" {
            *starts.entry((appl.clone(), gid.clone(), job.clone())).or_default() += 1;
        }
        if job == APPL_END
            && ended.insert((appl.clone(), gid.clone()))
            && let Some(t) = triggered.get(&(appl, gid))
        {
            run.generation_s.push(t.elapsed().as_secs_f64());
        }
    }
    run.all_s = all_started.elapsed().as_secs_f64();
    for o in &observers {
        if let Ok(s) = o.stats().await {
            run.link_messages += s.broker_messages_out;
            run.settle_timeouts += s.settle_timeouts;
        }
    }
    run.link_messages = run.link_messages.saturating_sub(out_before);
    run.rss_brokers_kb = (0..n).filter_map(|b| brokers.pid(b)).map(|p| rss_kb(p) as f64).collect();
    run.rss_agents_kb = agents.iter().filter_map(Child::id).map(|p| rss_kb(p) as f64).collect();

    // Every generation, as `padres workflow status` shows it.
    for (app, own) in apps.iter().zip(&gids) {
        let at = brokers.addrs[rng.usize(..n)];
        // History stores write in the background: the last statuses may be a moment away
        // (when every generation was seen to end). The last reading counts.
        let tries = if ended.len() == triggered.len() { 20 } else { 1 };
        let (mut correct, mut problems) = (0, Vec::new());
        for _ in 0..tries {
            problems.clear();
            correct = match padres(&cli, at, &["workflow", "status", &app.name, "--json"]).await {
                Ok(json) => check(app, own, &json, &starts, &mut problems),
                Err(e) => {
                    problems.push(e);
                    0
                }
            };
            if correct == own.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        run.correct += correct;
        run.problems.extend(problems);
    }
    drop(observers);
    drop(monitor);
    for agent in &mut agents {
        let _ = agent.start_kill();
    }
    for agent in &mut agents {
        let _ = agent.wait().await;
    }
    brokers.stop().await;
    if std::env::var_os("PADRES_KEEP").is_some() {
        println!("  kept the brokers' and agents' logs in {}", dir.display());
    }
    run
}

/// Runs the plan and prints its figures.
pub(crate) fn run(plan: &Plan) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let root = std::env::temp_dir().join(format!("padres-workflow-scale-{}", std::process::id()));
    println!(
        "Workflows on real processes: {} padres-broker ({} with a history store), {} padres-agent, {} payroll applications ({} jobs each, on 3 agents a third of the fleet apart), {} generation(s) of each triggered at once; {} run(s) each",
        plan.brokers,
        plan.stores.clamp(1, plan.brokers),
        plan.agents,
        plan.apps,
        PAYROLL.matches("<job ").count(),
        plan.generations.clamp(1, DATES.len()),
        plan.runs
    );
    let mut failed = false;
    for shape in &plan.shapes {
        let cyclic = shape == "cyclic";
        for r in 0..plan.runs {
            let seed = plan.seed + r as u64;
            let run = runtime.block_on(one_run(plan, cyclic, seed, &root));
            failed |= run.correct < run.generations || !run.problems.is_empty();
            report(shape, seed, &run);
        }
    }
    if std::env::var_os("PADRES_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    if failed {
        eprintln!("padres-bench workflow-scale: some generation was not correct (above)");
        std::process::exit(1);
    }
}

fn report(shape: &str, seed: u64, run: &Run) {
    let deploy = sorted(run.deploy_each_s.clone());
    let generation = sorted(run.generation_s.clone());
    let (brokers, agents) = (sorted(run.rss_brokers_kb.clone()), sorted(run.rss_agents_kb.clone()));
    println!("{shape} (seed {seed}):");
    println!("  linked in {:.1} s", run.linked_s);
    println!(
        "  deployed all at once in {:.1} s (each padres workflow deploy: p50 {:.1} s, max {:.1} s)",
        run.deploy_s,
        pct(&deploy, 0.5),
        pct(&deploy, 1.0)
    );
    println!(
        "  {} generations in {:.1} s: trigger to APPL_END p50 {:.1} s, p99 {:.1} s, max {:.1} s; {} statuses, {:.0} link messages per generation",
        run.generations,
        run.all_s,
        pct(&generation, 0.5),
        pct(&generation, 0.99),
        pct(&generation, 1.0),
        run.statuses,
        run.link_messages as f64 / run.generations.max(1) as f64
    );
    println!(
        "  resident memory: brokers p50 {:.1} MB, max {:.1} MB; agents p50 {:.1} MB, max {:.1} MB; settle timeouts {}",
        pct(&brokers, 0.5) / 1024.0,
        pct(&brokers, 1.0) / 1024.0,
        pct(&agents, 0.5) / 1024.0,
        pct(&agents, 1.0) / 1024.0,
        run.settle_timeouts
    );
    println!(
        "  correct (padres workflow status against the calendar, every job started at most once): {} of {} generations",
        run.correct, run.generations
    );
    for problem in run.problems.iter().take(20) {
        println!("    {problem}");
    }
    if run.problems.len() > 20 {
        println!("    … {} more", run.problems.len() - 20);
    }
}
