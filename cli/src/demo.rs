//! `padres demo`: the payroll application (`examples/payroll.xml`, the PADRES paper's
//! Fig. 8) on a local federation, end to end.
//!
//! Brokers in a chain on loopback QUIC ports (each keeping the history of `agent_ctl`,
//! `trigger` and `job_status`), three agents on different brokers running the example's
//! shell scripts as real processes, the application deployed through `agent_ctl` (every
//! agent acknowledging), a Friday and a Wednesday generation triggered at once and shown
//! live, then a summary read back from the brokers' history: which jobs ran or were
//! skipped, in what order, where their output is, and a check that every job started
//! after the statuses it depended on. Everything runs in this process; nothing is
//! central: the agents find out when to run from the brokers' composite subscriptions.
//!
//! Security is on, as in a real deployment (`security.rs`): brokers certified by a
//! federation CA, every client authenticated (tokens, and a client certificate for one
//! agent), and permits holding agents, the operator and a monitor to their parts; the
//! demo ends by trying what the permits forbid.

mod security;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use chrono::{Datelike as _, NaiveDate, Weekday};
use padres_agent::agent::{Options, serve};
// The application as shipped, and its jobs' commands (put in each agent's work directory).
use padres_workflow::examples::{PAYROLL, PAYROLL_SCRIPTS as SCRIPTS};
use padres_workflow::progress::{Outcome, State};
use padres_workflow::{APPL_END, APPL_START, Need};

use crate::BrokerArgs;
use crate::workflow::{self, Known};
use security::Security;

/// The agents, each on its own broker (by index in the chain, wrapping).
const AGENTS: [&str; 3] = ["agent-1", "agent-2", "agent-3"];

/// The most recent `weekday` on or before `today` that is not one of `holidays`.
fn last(weekday: Weekday, today: NaiveDate, holidays: &std::collections::BTreeSet<NaiveDate>) -> NaiveDate {
    let mut day = today;
    while day.weekday() != weekday || holidays.contains(&day) {
        day = day.pred_opt().expect("a date after year 0");
    }
    day
}

async fn start_broker(
    name: &str,
    root: &Path,
    neighbour: Option<SocketAddr>,
    security: &Security,
) -> Result<SocketAddr, String> {
    let config = security.broker_config(name, root, neighbour)?;
    let (bound, addr) = tokio::sync::oneshot::channel();
    let broker = name.to_owned();
    tokio::spawn(async move {
        if let Err(error) = padres_broker::net::serve_until(config, Some(bound), std::future::pending()).await
        {
            eprintln!("padres demo: broker {broker} failed: {error}");
        }
    });
    addr.await.map_err(|_| format!("broker {name} did not start"))
}

/// Writes the scripts into `dir`, executable.
fn install_scripts(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, text) in SCRIPTS {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Every job `job` waits for, through its dependencies.
fn predecessors(needs: &[Need]) -> Vec<&str> {
    needs
        .iter()
        .flat_map(|need| match need {
            Need::After { job, .. } => vec![job.as_str()],
            Need::AnyOf(any) => predecessors(any),
        })
        .collect()
}

/// Runs the demo in `dir` with `brokers` brokers; exit 0 if every check held.
pub(crate) async fn run(dir: PathBuf, brokers: usize, stay: bool) -> Result<ExitCode, String> {
    if dir.exists()
        && std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?.next().is_some()
    {
        return Err(format!("{} is not empty: give --dir a new or empty directory", dir.display()));
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    out!("padres demo: payroll on {brokers} brokers and {} agents, in {}", AGENTS.len(), dir.display());

    let names: Vec<String> = (1..=brokers).map(|i| format!("B{i}")).collect();
    let security = Security::create(&dir, &names, &dir.join("brokers"))?;
    out!(
        "  security: a federation CA, tokens and permits in {} (docs/security.md)",
        security.config_file().display()
    );
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let addr = start_broker(name, &dir.join("brokers"), addrs.last().copied(), &security).await?;
        // The broker prints its address itself; its link is said here.
        if i > 0 {
            out!("  {name} linked to B{i}");
        }
        addrs.push(addr);
    }
    for (i, agent) in AGENTS.iter().enumerate() {
        let addr = addrs[i % addrs.len()];
        let work_dir = dir.join("agents").join(agent);
        install_scripts(&work_dir)?;
        let client = security
            .connect(agent, addr)?
            .reconnect(true)
            .connect()
            .await
            .map_err(|e| format!("{agent}: {e}"))?;
        let options = Options { max_parallel: 4, ..Options::new(agent, work_dir.clone()) };
        tokio::spawn(async move {
            if let Err(e) = serve(client, options).await {
                eprintln!("padres demo: {} stopped: {e}", work_dir.display());
            }
        });
        out!(
            "  {agent} on B{} (work directory {}; {})",
            i % addrs.len() + 1,
            dir.join("agents").join(agent).display(),
            if security.token(agent).is_some() { "a token" } else { "a client certificate" }
        );
    }

    // The operator works at the last broker of the chain: everything crosses the federation.
    let operator = BrokerArgs {
        broker: format!("quic://{}", addrs[addrs.len() - 1]),
        ca: None,
        insecure: false,
        name: "operator".to_owned(),
        token: security.token("operator"),
        cert: None,
        key: None,
    };
    let file = dir.join("payroll.xml");
    std::fs::write(&file, PAYROLL).map_err(|e| format!("{}: {e}", file.display()))?;
    out!("\npadres workflow deploy {}", file.display());
    workflow::deploy(&file, Duration::from_secs(30), &operator).await?;

    let app = workflow::read_workflow(&file)?;
    let today = padres_agent::trigger::now().date_naive();
    let friday = last(Weekday::Fri, today, &app.calendar.holidays);
    let wednesday = last(Weekday::Wed, today, &app.calendar.holidays);
    let generations = [("fri", friday), ("wed", wednesday)];
    let stamp = padres_client::check::now().millis();
    let mut gids = Vec::new();
    for (label, date) in generations {
        let gid = format!("{label}-{date}-{stamp}");
        out!("padres workflow trigger payroll --date {date} --gid {gid}   ({})", date.format("%A"));
        gids.push((gid, date));
    }
    let since = padres_client::check::now();
    for (gid, date) in &gids {
        workflow::trigger("payroll", Some(&date.to_string()), Some(gid), None, &operator).await?;
    }

    out!("\nlive (padres workflow watch payroll):");
    let mut follow = workflow::Follow::start(&operator, "payroll", Some((None, since))).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut printed = 0;
    loop {
        for e in follow.known.arrivals.iter().skip(printed) {
            out!("  {:<32} {:<10} {:<9} on {}", e.gid, e.job, e.status, e.agent);
        }
        printed = follow.known.arrivals.len();
        let ended = gids.iter().all(|(gid, _)| {
            follow.known.generations.get(gid).is_some_and(|(_, g, _)| {
                !g.events.is_empty() && g.outcome(&follow.known.plan) != Outcome::Running
            })
        });
        if ended {
            break;
        }
        match tokio::time::timeout_at(deadline, follow.next()).await {
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => return Err("the broker closed the connection".into()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("the generations did not end within 120 s".into()),
        }
    }
    drop(follow);

    // The summary, read back from the brokers' history as `padres workflow status` would.
    let mut known: Option<Known> = None;
    for _ in 0..50 {
        let follow = workflow::Follow::start(&operator, "payroll", Some((None, since))).await?;
        let complete =
            gids.iter().all(|(gid, _)| {
                follow.known.generations.get(gid).is_some_and(|(_, g, _)| {
                    g.planned_state(&follow.known.plan, APPL_END).word() == "succeeded"
                })
            });
        known = Some(follow.known);
        if complete {
            break;
        }
        // Stores write in the background: what just happened may be a moment away.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let known = known.expect("read at least once");
    let mut problems = Vec::new();
    out!("\nsummary (from the brokers' history, as padres workflow status payroll shows it):");
    for (gid, date) in &gids {
        let Some((_, generation, _)) = known.generations.get(gid) else {
            problems.push(format!("{gid}: no status in the history"));
            continue;
        };
        let outcome = generation.outcome(&known.plan);
        out!(
            "  {gid} ({}, {}): {}",
            date,
            date.format("%A"),
            match &outcome {
                Outcome::Succeeded => "succeeded".to_owned(),
                Outcome::Running => "still running".to_owned(),
                Outcome::Stuck(failed) => format!("stuck, {} failed", failed.join(" ")),
            }
        );
        if outcome != Outcome::Succeeded {
            problems.push(format!("{gid} did not succeed"));
        }
        // Order: each job's first status, by its broker's time.
        let mut first: Vec<(i64, &str, &str)> = Vec::new();
        for e in &generation.events {
            if !first.iter().any(|(_, job, _)| *job == e.job) {
                first.push((e.time.unwrap_or(i64::MAX), e.job.as_str(), e.status.as_str()));
            }
        }
        first.sort();
        let order: Vec<String> = first
            .iter()
            .filter(|(_, job, _)| *job != APPL_START && *job != APPL_END)
            .map(
                |(_, job, status)| {
                    if *status == "skipped" { format!("{job} (skipped)") } else { (*job).to_owned() }
                },
            )
            .collect();
        out!("    order: {}", order.join(", "));
        for (job, planned) in &known.plan.jobs {
            if job == APPL_START || job == APPL_END {
                continue;
            }
            let state = generation.planned_state(&known.plan, job);
            let runs = app.job(job).is_some_and(|j| j.schedule.runs_on(*date, &app.calendar));
            let expected = if runs { "succeeded" } else { "skipped" };
            let word = state.word().to_owned();
            let output = match &state {
                State::Ended(e) if e.status == "succeeded" => format!(
                    "output {}",
                    dir.join("agents")
                        .join(&planned.agent)
                        .join("output/payroll")
                        .join(gid)
                        .join(job)
                        .display()
                ),
                _ => String::new(),
            };
            out!("    {job:<3} {word:<10} on {:<8} {output}", planned.agent);
            if word != expected {
                problems.push(format!("{gid}/{job} is {word}, its calendar says {expected}"));
            }
            // Started (or ended, if skipped) after every predecessor ended, by time.
            let own = generation.events.iter().filter(|e| e.job == *job).filter_map(|e| e.time).min();
            for before in predecessors(&planned.after) {
                let ended = generation
                    .events
                    .iter()
                    .filter(|e| e.job == before && e.status != "started")
                    .filter_map(|e| e.time)
                    .min();
                match (ended, own) {
                    (Some(ended), Some(own)) if ended <= own => {}
                    _ => {
                        problems
                            .push(format!("{gid}/{job} did not follow {before} ({ended:?} then {own:?})"));
                    }
                }
            }
            let starts = generation.events.iter().filter(|e| e.job == *job && e.status == "started").count();
            if starts > 1 {
                problems.push(format!("{gid}/{job} started {starts} times"));
            }
        }
    }
    problems.extend(security.check(addrs[addrs.len() - 1], since).await);
    let code = if problems.is_empty() {
        out!(
            "\ncheck: every job ran at most once, as its calendar says, after every job it depends on; \
             what the permits forbid was refused"
        );
        ExitCode::SUCCESS
    } else {
        for problem in &problems {
            eprintln!("padres demo: {problem}");
        }
        ExitCode::from(1)
    };
    if stay {
        out!("\nthe federation stays up until Ctrl-C; try, as the operator:");
        out!("  export PADRES_TOKEN=\"$(cat {})\"", security.token_file("operator").display());
        out!("  padres workflow status payroll --name operator --broker {}", operator.broker);
        out!("  padres workflow trigger payroll --name operator --broker {}", operator.broker);
        out!("  padres workflow watch payroll --name operator --broker {}", operator.broker);
        let _ = tokio::signal::ctrl_c().await;
    } else {
        out!("(padres demo --stay keeps the federation up to try padres workflow commands on it)");
    }
    Ok(code)
}
