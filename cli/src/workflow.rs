//! `padres workflow`: check and translate definitions; deploy them to agents, trigger
//! generations, follow them (status, watch, wait, history) and act on them (rerun,
//! bypass), all through publications and historic subscriptions: there is no server to
//! ask, only the brokers and the agents.
//!
//! What a command needs of the brokers: `status`, `watch`, `wait`, `history`, `rerun`,
//! `bypass` and `undeploy` read the application's deployments (`agent_ctl`) and statuses
//! (`job_status`, and `trigger` for the generations' dates) from the brokers' history
//! stores, so some broker of the federation must keep those classes (`padres-broker
//! --workflows` keeps them all).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use padres_client::{Client, Notification};
use padres_lang::{MessageId, Publication, Timestamp, Value};
use padres_workflow::control::{Command, Control, Reply, control_advertisement, reply_subscription};
use padres_workflow::progress::{Generation, Outcome, Plan, State, StatusEvent};
use padres_workflow::{APPL_END, APPL_START};

use crate::BrokerArgs;

/// How often `deploy` sends again a command not yet answered (the agent may not have
/// subscribed yet, or its subscription may still be on its way).
const RESEND_EVERY: Duration = Duration::from_secs(2);

/// Reads and validates a workflow file, naming the file in every problem.
pub(crate) fn read_workflow(file: &Path) -> Result<padres_workflow::Application, String> {
    let xml = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    padres_workflow::parse_application(&xml).map_err(|errors| {
        let lines: Vec<String> = errors
            .0
            .iter()
            .map(|e| format!("{}:{}:{}: {}", file.display(), e.at.line, e.at.column, e.message))
            .collect();
        lines.join("\n")
    })
}

/// A reference for a command: unique enough to tell this run's replies from others'.
pub(crate) fn reference() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

/// Sends `controls` and waits for every agent's reply, sending again those not answered
/// every [`RESEND_EVERY`] when `resend` (a command an agent takes twice to no harm).
/// Returns each agent's refusal, if any, or fails naming the agents that did not answer.
pub(crate) async fn command_agents(
    client: &mut Client,
    controls: &[Control],
    timeout: Duration,
    resend: bool,
) -> Result<BTreeMap<String, Option<String>>, String> {
    let Some(first) = controls.first() else { return Ok(BTreeMap::new()) };
    client.advertise(control_advertisement()).await.map_err(|e| e.to_string())?;
    client.send(&reply_subscription(&first.appl)).await.map_err(|e| e.to_string())?;
    let mut answered: BTreeMap<String, Option<String>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + timeout.min(Duration::from_secs(365 * 86_400));
    let mut next_send = tokio::time::Instant::now();
    let mut sent_once = false;
    while answered.len() < controls.len() {
        if tokio::time::Instant::now() >= next_send && (resend || !sent_once) {
            for control in controls.iter().filter(|c| !answered.contains_key(&c.agent)) {
                let publication = control.publication().map_err(|e| e.to_string())?;
                client.publish_acked(publication).await.map_err(|e| e.to_string())?;
            }
            sent_once = true;
            next_send = tokio::time::Instant::now() + RESEND_EVERY;
        }
        let wake = if resend { next_send.min(deadline) } else { deadline };
        let notification = tokio::select! {
            n = client.next_notification() => n,
            () = tokio::time::sleep_until(wake) => {
                if tokio::time::Instant::now() >= deadline {
                    let missing: Vec<&str> = controls
                        .iter()
                        .filter(|c| !answered.contains_key(&c.agent))
                        .map(|c| c.agent.as_str())
                        .collect();
                    let mut error = format!(
                        "no answer within {} s from {} (is it running, connected to this federation, named so?)",
                        timeout.as_secs(),
                        missing.join(", ")
                    );
                    for (agent, why) in answered.iter().filter_map(|(a, r)| r.as_ref().map(|r| (a, r))) {
                        error.push_str(&format!("\n{agent} refused: {why}"));
                    }
                    return Err(error);
                }
                continue;
            }
        };
        let Some(notification) = notification else { return Err("the broker closed the connection".into()) };
        let Some((_, publication)) = notification.into_publication() else { continue };
        let Some(reply) = Reply::from_publication(&publication) else { continue };
        let ours = controls.iter().any(|c| c.agent == reply.agent && c.reference == reply.reference);
        if ours {
            answered.entry(reply.agent).or_insert(reply.refused);
        }
    }
    Ok(answered)
}

/// `padres workflow deploy FILE`.
pub(crate) async fn deploy(file: &Path, timeout: Duration, broker: &BrokerArgs) -> Result<(), String> {
    let app = read_workflow(file)?;
    let deployment = padres_workflow::translate(&app).map_err(|e| e.to_string())?;
    let reference = reference();
    let controls: Vec<Control> =
        deployment.envelopes.iter().map(|e| e.control(&deployment.appl, &reference)).collect();
    // The agents the version deployed now is on, from the brokers' history: those the new
    // one no longer names are sent an undeploy. Without a history of agent_ctl there is
    // nothing to compare with (a first deployment, or brokers that keep none).
    let before = match Follow::start(broker, &deployment.appl, None).await {
        Ok(follow) => follow.known.plan.agents,
        Err(_) => Default::default(),
    };
    let mut client = broker.connect().await?;
    let answers = command_agents(&mut client, &controls, timeout, true).await?;
    let mut refused = Vec::new();
    for envelope in &deployment.envelopes {
        let jobs: Vec<&str> = envelope.jobs.iter().map(|j| j.job.as_str()).collect();
        match answers.get(&envelope.agent) {
            Some(Some(why)) => refused.push(format!("{} refused: {why}", envelope.agent)),
            _ => out!("{}: deployed {} ({})", envelope.agent, deployment.appl, jobs.join(" ")),
        }
    }
    let dropped: Vec<Control> = before
        .iter()
        .filter(|agent| !deployment.envelopes.iter().any(|e| e.agent == **agent))
        .map(|agent| Control {
            agent: agent.clone(),
            appl: deployment.appl.clone(),
            reference: reference.clone(),
            command: Command::Undeploy,
        })
        .collect();
    if !dropped.is_empty() {
        let answers = command_agents(&mut client, &dropped, timeout, true).await?;
        for (agent, answer) in answers {
            match answer {
                Some(why) => refused.push(format!("{agent} (no longer named) refused to undeploy: {why}")),
                None => out!("{agent}: undeployed {} (no longer named)", deployment.appl),
            }
        }
    }
    if refused.is_empty() { Ok(()) } else { Err(refused.join("\n")) }
}

/// The deployments of `appl` and everything else of it the brokers keep since `since`,
/// read once from their history stores.
pub(crate) struct Known {
    pub(crate) plan: Plan,
    /// Each generation: its date (from its trigger) and statuses.
    pub(crate) generations: BTreeMap<String, (Option<String>, Generation, Option<i64>)>,
    /// Every distinct status, in the order it came.
    pub(crate) arrivals: Vec<StatusEvent>,
    /// The jobs of each version deployed (by the version's id).
    plans: HashMap<String, Plan>,
    /// Each generation's version, from its trigger.
    versions: HashMap<String, String>,
}

/// The start of time for a historic query of deployments.
fn long_ago() -> Timestamp {
    Timestamp::from_millis(0).expect("the epoch is a time")
}

/// Subscribes `client` to `subscription` (atomic, in brackets) from `since` on, live
/// after the stored ones.
async fn historic(client: &Client, subscription: &str, since: Timestamp) -> Result<MessageId, String> {
    let text = format!("s {subscription},[time,>=,{}]", since.to_rfc3339());
    client
        .send(&text)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the broker gave the subscription no id".to_owned())
}

impl Known {
    /// The jobs of the version generation `gid` runs on (the version deployed last, if
    /// its trigger is not known).
    pub(crate) fn plan_of(&self, gid: &str) -> &Plan {
        self.versions.get(gid).and_then(|v| self.plans.get(v)).unwrap_or(&self.plan)
    }

    fn new() -> Self {
        Self {
            plan: Plan::default(),
            generations: BTreeMap::new(),
            arrivals: Vec::new(),
            plans: HashMap::new(),
            versions: HashMap::new(),
        }
    }

    /// Takes one publication about the application in; true if it changed what is known.
    fn take(&mut self, appl: &str, publication: &Publication) -> bool {
        match publication.class() {
            "agent_ctl" => {
                let Ok(control) = Control::from_publication(publication) else { return false };
                match control.command {
                    Command::Deploy(body) => {
                        self.plan.remove_agent(&control.agent);
                        self.plan.add(&control.agent, &body);
                        let versioned = self.plans.entry(body.version.clone()).or_default();
                        versioned.remove_agent(&control.agent);
                        versioned.add(&control.agent, &body);
                    }
                    Command::Undeploy => self.plan.remove_agent(&control.agent),
                    Command::Rerun { .. }
                    | Command::Bypass { .. }
                    | Command::Trigger { .. }
                    | Command::Drain => return false,
                }
                true
            }
            "trigger" => {
                let text = |a: &str| publication.get(a).and_then(Value::as_str).map(str::to_owned);
                let Some(gid) = text("gid") else { return false };
                if let Some(version) = text("version") {
                    self.versions.insert(gid.clone(), version);
                }
                let entry = self.generations.entry(gid).or_default();
                entry.0 = text("date");
                entry.2 = publication.time().map(Timestamp::millis);
                true
            }
            _ => match StatusEvent::from_publication(appl, publication) {
                Some(event) => {
                    let entry = self.generations.entry(event.gid.clone()).or_default();
                    if entry.2.is_none() {
                        entry.2 = event.time;
                    }
                    let new = entry.1.record(event.clone());
                    if new {
                        self.arrivals.push(event);
                    }
                    new
                }
                None => false,
            },
        }
    }
}

/// Follows application `appl`: its deployments (all of them) and its triggers and
/// statuses since `since` (of generation `gid` only, if given), the stored ones first.
pub(crate) struct Follow {
    client: Client,
    appl: String,
    pub(crate) known: Known,
    /// Historic subscriptions whose stored part has not all come.
    pending: HashSet<MessageId>,
    /// Brokers whose stores did not answer.
    missing: Vec<String>,
}

impl Follow {
    /// Starts following `appl`'s deployments and, with `generations`, its generations
    /// (`gid`'s only, if given) since then; returns once the stored part is in.
    pub(crate) async fn start(
        broker: &BrokerArgs,
        appl: &str,
        generations: Option<(Option<&str>, Timestamp)>,
    ) -> Result<Self, String> {
        let client = broker.connect().await?;
        let quoted = Value::str(appl);
        let mut pending = HashSet::new();
        pending.insert(
            historic(&client, &format!("[class,eq,'agent_ctl'],[appl,eq,{quoted}]"), long_ago()).await?,
        );
        if let Some((gid, since)) = generations {
            let generation = gid.map(|g| format!(",[gid,eq,{}]", Value::str(g))).unwrap_or_default();
            for class in ["trigger", "job_status"] {
                let sub = format!("[class,eq,'{class}'],[appl,eq,{quoted}]{generation}");
                pending.insert(historic(&client, &sub, since).await?);
            }
        }
        let mut follow =
            Self { client, appl: appl.to_owned(), known: Known::new(), pending, missing: Vec::new() };
        while !follow.pending.is_empty() {
            if follow.next().await?.is_none() {
                return Err("the broker closed the connection".into());
            }
        }
        if follow.known.plan.jobs.is_empty() && !follow.missing.is_empty() {
            return Err(format!(
                "no deployment of {appl} found, and the history stores at {} did not answer: try again",
                follow.missing.join(", ")
            ));
        }
        if follow.known.plan.jobs.is_empty() {
            return Err(format!(
                "no deployment of {appl} in the brokers' history: deploy it (padres workflow deploy), and keep \
                 what workflows read back in some broker's history store (padres-broker --workflows)"
            ));
        }
        if !follow.missing.is_empty() {
            eprintln!(
                "padres: no answer from the history stores at {}: what they keep is missing",
                follow.missing.join(", ")
            );
        }
        Ok(follow)
    }

    /// The next notification taken in: `Some(true)` if it changed what is known.
    pub(crate) async fn next(&mut self) -> Result<Option<bool>, String> {
        let Some(notification) = self.client.next_notification().await else { return Ok(None) };
        Ok(Some(match notification {
            Notification::EndOfHistory { sub, missing, .. } => {
                self.pending.remove(&sub);
                self.missing.extend(missing.iter().map(ToString::to_string));
                false
            }
            Notification::Publication { publication, .. } => self.known.take(&self.appl, &publication),
            Notification::Composite { .. } => false,
        }))
    }
}

/// One generation's state, as text lines: a heading, then a line per job.
fn render(known: &Known, gid: &str, date: Option<&str>, generation: &Generation) -> Vec<String> {
    let plan = known.plan_of(gid);
    let outcome = match generation.outcome(plan) {
        Outcome::Running => "running".to_owned(),
        Outcome::Succeeded => "succeeded".to_owned(),
        Outcome::Stuck(failed) if failed.is_empty() => {
            "stuck: nothing can proceed (a job waits for a status that did not come)".to_owned()
        }
        Outcome::Stuck(failed) => format!("stuck: {} failed, nothing can proceed", failed.join(" ")),
    };
    let version = known.versions.get(gid).map(|v| format!(", version {v}")).unwrap_or_default();
    let mut lines =
        vec![format!("generation {gid} ({}{version}): {outcome}", date.unwrap_or("no trigger seen"))];
    for (job, planned) in &plan.jobs {
        if job == APPL_START || job == APPL_END {
            continue;
        }
        let state = generation.planned_state(plan, job);
        let detail = match &state {
            State::Waiting => String::new(),
            State::Running(e) => format!("attempt {}", e.attempt),
            State::Ended(e) if e.status == "skipped" => "not selected that day".to_owned(),
            State::Ended(e) => {
                let mut d = format!("attempt {}, exit {}", e.attempt, e.exit);
                if let Some(reason) = &e.reason {
                    d.push_str(&format!(", {reason}"));
                }
                d
            }
        };
        lines.push(format!("  {job:<16} {:<10} {:<12} {detail}", state.word(), planned.runner(&state)));
    }
    lines
}

fn generation_json(
    known: &Known,
    gid: &str,
    date: Option<&str>,
    generation: &Generation,
) -> serde_json::Value {
    let plan = known.plan_of(gid);
    let (outcome, failed) = match generation.outcome(plan) {
        Outcome::Running => ("running", Vec::new()),
        Outcome::Succeeded => ("succeeded", Vec::new()),
        Outcome::Stuck(failed) => ("stuck", failed),
    };
    let jobs: Vec<serde_json::Value> = plan
        .jobs
        .iter()
        .map(|(job, planned)| {
            let state = generation.planned_state(plan, job);
            let event = match &state {
                State::Waiting => None,
                State::Running(e) | State::Ended(e) => Some(e),
            };
            serde_json::json!({
                "job": job,
                "agent": planned.runner(&state),
                "state": state.word(),
                "attempt": event.map(|e| e.attempt),
                "exit": event.map(|e| e.exit),
                "reason": event.and_then(|e| e.reason.clone()),
                // A pool job's: why it was given to the member that has it (dispatched
                // again, and why), kept after that member's own statuses.
                "dispatch_reason": generation.last_dispatch(job).and_then(|e| e.reason.clone()),
                // From its dependencies met to its first start (the brokers' stamps).
                "waited_ms": generation.waited_ms(plan, job),
                "output": event.and_then(|e| e.output.clone()),
            })
        })
        .collect();
    let version = known.versions.get(gid);
    serde_json::json!({
        "gid": gid, "date": date, "version": version, "outcome": outcome, "failed": failed, "jobs": jobs
    })
}

/// `--since` as a time, `default` when not given.
pub(crate) fn since_arg(since: Option<&str>, default: &str) -> Result<Timestamp, String> {
    let now = padres_client::check::now();
    padres_lang::time::parse_bound(since.unwrap_or(default), now).map_err(|e| format!("--since: {e}"))
}

/// `padres workflow status`.
pub(crate) async fn status(
    appl: &str,
    gid: Option<&str>,
    since: Option<&str>,
    json: bool,
    broker: &BrokerArgs,
) -> Result<(), String> {
    // One generation: all of it, however long ago it began.
    let since = if gid.is_some() { long_ago() } else { since_arg(since, "now-1d")? };
    let follow = Follow::start(broker, appl, Some((gid, since))).await?;
    let known = &follow.known;
    if json {
        let generations: Vec<serde_json::Value> = known
            .generations
            .iter()
            .map(|(g, (date, generation, _))| generation_json(known, g, date.as_deref(), generation))
            .collect();
        out!("{}", serde_json::json!({ "appl": appl, "generations": generations }));
        return Ok(());
    }
    if known.generations.is_empty() {
        out!("{appl}: no generation since {}", since.to_rfc3339());
    }
    for (g, (date, generation, _)) in &known.generations {
        for line in render(known, g, date.as_deref(), generation) {
            out!("{line}");
        }
    }
    Ok(())
}

/// `padres workflow history`: one line per generation.
pub(crate) async fn history(
    appl: &str,
    since: Option<&str>,
    json: bool,
    broker: &BrokerArgs,
) -> Result<(), String> {
    let since = since_arg(since, "now-7d")?;
    let follow = Follow::start(broker, appl, Some((None, since))).await?;
    let known = &follow.known;
    let mut rows: Vec<_> = known.generations.iter().collect();
    rows.sort_by_key(|(gid, (_, _, first))| (*first, (*gid).clone()));
    let mut objects = Vec::new();
    for (gid, (date, generation, first)) in rows {
        let plan = known.plan_of(gid);
        let count = |word: &str| {
            plan.jobs
                .keys()
                .filter(|j| {
                    *j != APPL_START && *j != APPL_END && generation.planned_state(plan, j).word() == word
                })
                .count()
        };
        let outcome = match generation.outcome(plan) {
            Outcome::Running => "running".to_owned(),
            Outcome::Succeeded => "succeeded".to_owned(),
            Outcome::Stuck(failed) => format!("stuck ({} failed)", failed.join(" ")),
        };
        let started = first.and_then(Timestamp::from_millis).map(Timestamp::to_rfc3339);
        let last = generation.events.iter().filter_map(|e| e.time).max();
        let ended = last.and_then(Timestamp::from_millis).map(Timestamp::to_rfc3339);
        if json {
            objects.push(serde_json::json!({
                "gid": gid, "date": date, "outcome": outcome, "started": started, "last_status": ended,
                "succeeded": count("succeeded"), "skipped": count("skipped"),
                "failed": count("failed") + count("timeout"),
            }));
        } else {
            out!(
                "{gid:<24} {:<10} {:<24} {:<30} succeeded {}, skipped {}, failed {}",
                date.as_deref().unwrap_or("?"),
                started.as_deref().unwrap_or("?"),
                outcome,
                count("succeeded"),
                count("skipped"),
                count("failed") + count("timeout")
            );
        }
    }
    if json {
        out!("{}", serde_json::json!({ "appl": appl, "generations": objects }));
    }
    Ok(())
}

/// `padres workflow wait`: 0 when the generation succeeds, 1 when it is stuck, 2 on timeout.
pub(crate) async fn wait(
    appl: &str,
    gid: &str,
    timeout: Option<f64>,
    broker: &BrokerArgs,
) -> Result<ExitCode, String> {
    // At most a year: a timeout past that (or not a number) is no timeout.
    let deadline = timeout
        .filter(|s| s.is_finite() && *s < 365.0 * 86_400.0)
        .map(|s| tokio::time::Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let mut follow = Follow::start(broker, appl, Some((Some(gid), long_ago()))).await?;
    loop {
        let (date, generation) =
            follow.known.generations.get(gid).map(|(d, g, _)| (d.clone(), g.clone())).unwrap_or_default();
        let outcome = generation.outcome(follow.known.plan_of(gid));
        let seen = !generation.events.is_empty();
        match outcome {
            Outcome::Succeeded => {
                out!("{appl} generation {gid} ({}) succeeded", date.as_deref().unwrap_or("?"));
                return Ok(ExitCode::SUCCESS);
            }
            Outcome::Stuck(failed) if seen => {
                for line in render(&follow.known, gid, date.as_deref(), &generation) {
                    out!("{line}");
                }
                eprintln!(
                    "padres: {appl} generation {gid}: {} failed and nothing can proceed",
                    failed.join(" ")
                );
                return Ok(ExitCode::from(1));
            }
            _ => {}
        }
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, follow.next()).await {
                Ok(next) => next?,
                Err(_) => {
                    let (date, generation) = follow
                        .known
                        .generations
                        .get(gid)
                        .map(|(d, g, _)| (d.clone(), g.clone()))
                        .unwrap_or_default();
                    for line in render(&follow.known, gid, date.as_deref(), &generation) {
                        out!("{line}");
                    }
                    eprintln!("padres: {appl} generation {gid} has not ended (timeout)");
                    return Ok(ExitCode::from(2));
                }
            },
            None => follow.next().await?,
        };
        if next.is_none() {
            return Err("the broker closed the connection".into());
        }
    }
}

/// `padres workflow watch`: the generations' jobs, redrawn in place on a terminal, a line
/// per status otherwise; with a gid, until that generation ends.
pub(crate) async fn watch(
    appl: &str,
    gid: Option<&str>,
    since: Option<&str>,
    broker: &BrokerArgs,
) -> Result<(), String> {
    let since = if gid.is_some() { long_ago() } else { since_arg(since, "now-1h")? };
    let mut follow = Follow::start(broker, appl, Some((gid, since))).await?;
    let terminal = std::io::stdout().is_terminal();
    let mut printed = 0;
    loop {
        let known = &follow.known;
        if terminal {
            let mut lines = Vec::new();
            for (g, (date, generation, _)) in &known.generations {
                lines.extend(render(known, g, date.as_deref(), generation));
            }
            // Back to the first line drawn, then draw over it.
            if printed > 0 {
                print!("\x1b[{printed}A\x1b[J");
            }
            for line in &lines {
                out!("{line}");
            }
            printed = lines.len();
        } else {
            for e in known.arrivals.iter().skip(printed) {
                let reason = e.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
                out!(
                    "{} {} {} attempt {} exit {} on {}{reason}",
                    e.gid,
                    e.job,
                    e.status,
                    e.attempt,
                    e.exit,
                    e.agent
                );
            }
            printed = known.arrivals.len();
        }
        if let Some(gid) = gid
            && let Some((_, generation, _)) = known.generations.get(gid)
            && generation.outcome(known.plan_of(gid)) != Outcome::Running
            && !generation.events.is_empty()
        {
            return Ok(());
        }
        loop {
            match follow.next().await? {
                None => return Err("the broker closed the connection".into()),
                Some(true) => break,
                Some(false) => {}
            }
        }
    }
}

/// `padres workflow trigger`: asks the application's home agent (the one running
/// `APPL_START`, read from the brokers' history unless given) to publish a generation's
/// trigger; prints its gid once the agent has.
pub(crate) async fn trigger(
    appl: &str,
    date: Option<&str>,
    gid: Option<&str>,
    agent: Option<&str>,
    broker: &BrokerArgs,
) -> Result<String, String> {
    let date = match date {
        Some(d) => chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d")
            .map_err(|_| format!("--date {d}: expected YYYY-MM-DD"))?,
        None => padres_agent::trigger::now().date_naive(),
    };
    let date = date.format("%Y-%m-%d").to_string();
    let gid = gid.map_or_else(|| format!("{date}-{}", reference()), str::to_owned);
    let (mut client, home) = match agent {
        Some(agent) => (broker.connect().await?, agent.to_owned()),
        None => {
            let follow = Follow::start(broker, appl, None).await?;
            let home = follow.known.plan.jobs.get(APPL_START).map(|p| p.agent.clone());
            let home = home.ok_or_else(|| format!("{appl}'s deployment has no {APPL_START}"))?;
            (follow.client, home)
        }
    };
    let control = Control {
        agent: home.clone(),
        appl: appl.to_owned(),
        reference: reference(),
        command: Command::Trigger { gid: gid.clone(), date },
    };
    let answers =
        command_agents(&mut client, std::slice::from_ref(&control), Duration::from_secs(30), false).await?;
    match answers.get(&home) {
        Some(Some(why)) => Err(format!("{home} refused: {why}")),
        _ => Ok(gid),
    }
}

/// The operator's actions on a generation's job.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Act {
    Rerun,
    Bypass,
}

/// `padres workflow rerun` and `bypass`: sent to the job's agent, answered by it.
pub(crate) async fn act(
    act: Act,
    appl: &str,
    gid: &str,
    job: &str,
    broker: &BrokerArgs,
) -> Result<(), String> {
    let follow = Follow::start(broker, appl, Some((Some(gid), long_ago()))).await?;
    let plan = follow.known.plan_of(gid);
    let planned = plan.jobs.get(job).ok_or_else(|| {
        format!(
            "{appl} has no job {job} (deployed jobs: {})",
            plan.jobs.keys().cloned().collect::<Vec<_>>().join(" ")
        )
    })?;
    let (gid_owned, job_owned) = (gid.to_owned(), job.to_owned());
    let command = match act {
        Act::Rerun => Command::Rerun { gid: gid_owned, job: job_owned },
        Act::Bypass => Command::Bypass { gid: gid_owned, job: job_owned },
    };
    let control =
        Control { agent: planned.agent.clone(), appl: appl.to_owned(), reference: reference(), command };
    let mut client = follow.client;
    let answers =
        command_agents(&mut client, std::slice::from_ref(&control), Duration::from_secs(30), false).await?;
    match answers.get(&control.agent) {
        Some(Some(why)) => Err(format!("{} refused: {why}", control.agent)),
        _ => {
            let done = match act {
                Act::Rerun => "runs again",
                Act::Bypass => "is marked succeeded (bypassed)",
            };
            out!("{appl} generation {gid}: {job} {done} on {}", control.agent);
            Ok(())
        }
    }
}

/// `padres workflow undeploy`: every agent the application is deployed on.
pub(crate) async fn undeploy(appl: &str, timeout: Duration, broker: &BrokerArgs) -> Result<(), String> {
    let follow = Follow::start(broker, appl, None).await?;
    let agents: Vec<String> = {
        let mut agents: Vec<String> = follow.known.plan.jobs.values().map(|p| p.agent.clone()).collect();
        agents.sort();
        agents.dedup();
        agents
    };
    let reference = reference();
    let controls: Vec<Control> = agents
        .iter()
        .map(|agent| Control {
            agent: agent.clone(),
            appl: appl.to_owned(),
            reference: reference.clone(),
            command: Command::Undeploy,
        })
        .collect();
    let mut client = follow.client;
    let answers = command_agents(&mut client, &controls, timeout, true).await?;
    let mut refused = Vec::new();
    for (agent, answer) in &answers {
        match answer {
            Some(why) => refused.push(format!("{agent} refused: {why}")),
            None => out!("{agent}: undeployed {appl}"),
        }
    }
    if refused.is_empty() { Ok(()) } else { Err(refused.join("\n")) }
}
