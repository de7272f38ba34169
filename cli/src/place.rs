//! `padres workflow place APPL`: per job, the broker whose agents would put the least
//! traffic on the overlay's links, and what moving it would save (the Bauer–Dadam model of
//! `padres_workflow::place`, `docs/workflows.md`). Reads, and moves nothing:
//!
//! - the overlay and the bytes per message of each class on the links, from the brokers'
//!   own reports (class `padres_broker`, whose `traffic` attribute carries their per-class
//!   link counters), heard live for up to `--wait`;
//! - where each agent is, from its load reports (`agent_load`);
//! - the application's jobs and how often each published, from the history stores
//!   (`agent_ctl`, `trigger`, `job_status`), as `padres workflow status` reads them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use padres_agent::pool::MemberState;
use padres_broker::monitor::{self, Federation};
use padres_client::Notification;
use padres_lang::wire::{BrokerMessage, Frame, LinkTraffic};
use padres_lang::{Publication, Stamp, Timestamp};
use padres_workflow::place::{Advice, JobShape, Model, Overlay, Sizes, Store};
use padres_workflow::translate::{APPL_END, APPL_START, Need};

use crate::BrokerArgs;
use crate::agents::{Latest, latest_reports, state};
use crate::workflow::{Follow, since_arg};

/// `padres workflow place`.
pub(crate) async fn place(
    appl: &str,
    since: Option<&str>,
    wait: Duration,
    json: bool,
    broker: &BrokerArgs,
) -> Result<(), String> {
    let since = since_arg(since, "7d")?;
    // The three are read at once: each waits (for stores, for live reports).
    let (follow, agents, reports) = tokio::try_join!(
        Follow::start(broker, appl, Some((None, since))),
        latest_reports(broker, since_arg(Some("10m"), "10m")?),
        broker_reports(broker, wait),
    )?;
    let known = &follow.known;
    let now = padres_client::check::now().millis();

    // The overlay, from the brokers' own word.
    let mut overlay = Overlay::default();
    for report in &reports {
        overlay.add_broker(&report.broker);
        for n in &report.neighbours {
            overlay.add_link(&report.broker, n);
        }
    }
    let silent: Vec<&str> = overlay.brokers().filter(|b| !reports.iter().any(|r| r.broker == *b)).collect();
    if !silent.is_empty() {
        eprintln!(
            "padres: no report from {} within {} s: their links are known from their neighbours, their traffic is not",
            silent.join(", "),
            wait.as_secs()
        );
    }
    let traffic: Vec<(&str, &LinkTraffic)> =
        reports.iter().flat_map(|r| r.traffic.iter().map(|t| (r.broker.as_str(), t))).collect();
    if traffic.iter().any(|(_, r)| r.class == padres_broker::traffic::OTHER) {
        eprintln!(
            "padres: some brokers count classes past their first {} on a link as {}: job_status and trigger may be among them, their sizes estimated",
            padres_broker::traffic::MAX_CLASSES,
            padres_broker::traffic::OTHER
        );
    }
    let (sizes, measured) = sizes(&traffic);

    // Where the agents are.
    let broker_of = |agent: &str| agents.get(agent).map(|(load, _)| load.broker.clone());
    let live: Vec<&Latest> = agents
        .values()
        .filter(|(load, at)| load.state == MemberState::Up && state(load, *at, now) == "up")
        .collect();
    let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (load, _) in &live {
        hosts.entry(load.broker.clone()).or_default().push(load.agent.clone());
    }
    let plan = &known.plan;
    let home_agent = plan.jobs.get(APPL_START).map(|j| j.agent.clone()).unwrap_or_default();
    let unplaced: BTreeSet<&str> =
        plan.agents.iter().map(String::as_str).filter(|a| broker_of(a).is_none()).collect();
    if !unplaced.is_empty() {
        return Err(format!(
            "no load report (agent_load) from {} in the last 10 minutes: where they are is not known",
            unplaced.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let home = broker_of(&home_agent).unwrap_or_default();
    for b in plan.agents.iter().filter_map(|a| broker_of(a)) {
        if !overlay.contains(&b) {
            return Err(format!(
                "no broker report names {b}, where some of {appl}'s agents are: try a longer --wait"
            ));
        }
    }

    // How often each job published, per generation.
    let generations = known.generations.len();
    let mut counts: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    let mut last_member: BTreeMap<&str, &str> = BTreeMap::new();
    for event in &known.arrivals {
        let kind = match event.status.as_str() {
            "started" | "dispatched" => event.status.as_str(),
            "succeeded" | "skipped" => "end",
            "failed" | "timeout" => "failure",
            _ => continue,
        };
        *counts.entry((event.job.as_str(), kind)).or_default() += 1.0;
        if event.status != "dispatched" {
            last_member.insert(event.job.as_str(), event.agent.as_str());
        }
    }
    let per_generation = |job: &str, kind: &str, otherwise: f64| match generations {
        0 => otherwise,
        g => counts.get(&(job, kind)).copied().unwrap_or(0.0) / g as f64,
    };

    let mut jobs = Vec::new();
    for (name, planned) in &plan.jobs {
        let fixed = name == APPL_START || name == APPL_END;
        let (at, candidates) = match &planned.pool {
            Some(pool) => {
                let mut members: Vec<String> = live
                    .iter()
                    .filter(|(load, _)| load.pools.iter().any(|p| p == pool))
                    .map(|(load, _)| load.broker.clone())
                    .collect();
                members.sort();
                members.dedup();
                let at = last_member
                    .get(name.as_str())
                    .and_then(|a| broker_of(a))
                    .or_else(|| members.first().cloned())
                    .unwrap_or_else(|| home.clone());
                (at, members)
            }
            None => {
                let at = broker_of(&planned.agent).unwrap_or_default();
                (at, if fixed { Vec::new() } else { hosts.keys().cloned().collect() })
            }
        };
        let pool = planned.pool.is_some();
        jobs.push(JobShape {
            job: name.clone(),
            after: planned.after.iter().flat_map(|n| needed_jobs(n, false)).collect(),
            after_failures: planned.after.iter().flat_map(|n| needed_jobs(n, true)).collect(),
            pool,
            at,
            candidates,
            ends: per_generation(name, "end", 1.0),
            failures: per_generation(name, "failure", 0.0),
            // The virtual jobs publish no `started`.
            starts: per_generation(name, "started", if fixed { 0.0 } else { 1.0 }),
            dispatches: per_generation(name, "dispatched", if pool { 1.0 } else { 0.0 }),
        });
    }
    let stores = stores_of(appl, &reports);
    let on_home: Vec<String> = plan
        .jobs
        .iter()
        .filter(|(name, j)| {
            *name != APPL_START && *name != APPL_END && j.pool.is_none() && j.agent == home_agent
        })
        .map(|(name, _)| name.clone())
        .collect();
    let model = Model::new(overlay.clone(), &home, jobs, sizes, stores.clone());
    let advice = model.advise();
    // Generations a day: over the days since the first one counted (at least one day, so
    // that a few generations run in a minute do not count as thousands a day).
    let first = known.generations.values().filter_map(|(_, _, at)| *at).min().unwrap_or(now);
    let days = ((now - first) as f64 / 86_400_000.0).max(1.0);
    let per_day = (generations > 0).then(|| generations as f64 / days);

    if json {
        let out = serde_json::json!({
            "appl": appl,
            "brokers": overlay.brokers().collect::<Vec<_>>(),
            "links": overlay.link_count(),
            "home": { "agent": home_agent, "broker": home },
            "generations": generations,
            "since": since.to_rfc3339(),
            "generations_per_day": per_day,
            "bytes_per_message": sizes,
            "measured_messages": measured,
            "agents": hosts,
            "history_stores": stores,
            "on_home_agent": on_home,
            "advice": advice,
        });
        out!("{out}");
        return Ok(());
    }
    print_advice(
        appl,
        &model,
        &advice,
        &Summary {
            on_home: &on_home,
            stores: &stores,
            home_agent: &home_agent,
            home: &home,
            generations,
            since,
            per_day,
            sizes,
            measured,
            hosts: &hosts,
            overlay: &overlay,
            traffic: &traffic,
        },
    );
    Ok(())
}

/// What the printed advice says besides the model's figures.
struct Summary<'a> {
    home_agent: &'a str,
    home: &'a str,
    generations: usize,
    since: Timestamp,
    per_day: Option<f64>,
    sizes: Sizes,
    measured: u64,
    hosts: &'a BTreeMap<String, Vec<String>>,
    overlay: &'a Overlay,
    traffic: &'a [(&'a str, &'a LinkTraffic)],
    stores: &'a [Store],
    /// Jobs (not pool jobs) that run on the home agent.
    on_home: &'a [String],
}

fn print_advice(appl: &str, model: &Model, advice: &Advice, s: &Summary<'_>) {
    let brokers: Vec<&str> = s.overlay.brokers().collect();
    out!(
        "{appl}: {} brokers ({}), {} links; home agent {} at {}",
        brokers.len(),
        brokers.join(", "),
        s.overlay.link_count(),
        s.home_agent,
        s.home
    );
    match s.per_day {
        Some(rate) => out!("{} generations since {} ({rate:.1} a day)", s.generations, s.since.to_rfc3339()),
        None => out!(
            "no generation since {}: each job counted as running once a generation",
            s.since.to_rfc3339()
        ),
    }
    let source = if s.measured > 0 {
        format!("measured over {} messages on the links", s.measured)
    } else {
        "estimated: no job_status has crossed a link yet".to_owned()
    };
    out!("bytes a message: job_status {:.0}, trigger {:.0} ({source})", s.sizes.status, s.sizes.trigger);
    let stores: Vec<&str> = s.stores.iter().filter(|t| t.statuses).map(|t| t.broker.as_str()).collect();
    out!(
        "history stores keeping its statuses: {}",
        if stores.is_empty() { "none".to_owned() } else { stores.join(", ") }
    );
    out!(
        "link traffic of {appl}: {:.0} bytes a generation as placed now{}",
        advice.now,
        s.per_day.map(|d| format!(", {:.0} a day", advice.now * d)).unwrap_or_default()
    );
    out!("");
    out!(
        "{:<28} {:<12} {:<12} {:>16} {:>8}  agents there",
        "job",
        "runs at",
        "best broker",
        "saving a gen.",
        "saving"
    );
    for job in &advice.jobs {
        let shape = model.jobs().iter().find(|j| j.job == job.job);
        let pool = shape.is_some_and(|j| j.pool);
        let (best, saving, share) = if job.saving > 0.0 {
            (
                job.best.clone(),
                format!("{:.0} B", job.saving),
                format!("{:.0}%", 100.0 * job.saving / advice.now),
            )
        } else {
            ("(here)".to_owned(), "-".to_owned(), "-".to_owned())
        };
        let there = s.hosts.get(&job.best).map(|a| a.join(",")).unwrap_or_default();
        let there = if pool { format!("pool members: {there}") } else { there };
        out!("{:<28} {:<12} {:<12} {:>16} {:>8}  {there}", job.job, job.at, best, saving, share);
    }
    let moves = advice.jobs.iter().filter(|j| j.saving > 0.0).count();
    out!("");
    if moves == 0 {
        out!("every job runs where its traffic is least: no move would save link traffic");
    } else {
        let saved = advice.now - advice.together;
        let jobs = if moves == 1 {
            "the advised job".to_owned()
        } else {
            format!("the {moves} advised jobs at once")
        };
        out!(
            "moving {jobs}: {:.0} bytes a generation ({:.0} saved, {:.0}%){}",
            advice.together,
            saved,
            if advice.now > 0.0 { 100.0 * saved / advice.now } else { 0.0 },
            s.per_day.map(|d| format!(", {:.0} bytes a day saved", saved * d)).unwrap_or_default()
        );
        for job in advice.jobs.iter().filter(|j| j.saving > 0.0 && s.on_home.contains(&j.job)) {
            out!(
                "{} runs on the home agent {}: without home= in the definition, moving it moves the home too (APPL_START, APPL_END, the triggers, the dispatches), which this advice does not cost; home=\"{}\" keeps the home where it is",
                job.job,
                s.home_agent,
                s.home_agent
            );
        }
        out!("(a pool job's advice names the broker whose members it would best run on; nothing was moved)");
    }
    let mut per_link: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (from, row) in s.traffic {
        if ["job_status", "trigger", "(composite match)"].contains(&row.class.as_str()) {
            *per_link.entry((from, row.peer.as_str())).or_default() += row.bytes;
        }
    }
    if !per_link.is_empty() {
        out!("");
        out!(
            "sent on each link since its broker started (job_status, trigger and composite matches, every application):"
        );
        for ((from, to), bytes) in per_link {
            out!("  {from} -> {to}: {bytes} bytes");
        }
    }
}

/// The jobs a need names; with `failures`, only those whose failures it takes.
fn needed_jobs(need: &Need, failures: bool) -> Vec<String> {
    match need {
        Need::After { job, statuses, .. } => {
            let takes = !failures || statuses.iter().any(|s| s == "failed" || s == "timeout");
            if takes { vec![job.clone()] } else { Vec::new() }
        }
        Need::AnyOf(needs) => needs.iter().flat_map(|n| needed_jobs(n, failures)).collect(),
    }
}

/// Bytes per `job_status` and `trigger` message on the links, and how many `job_status`
/// messages that was measured over; where none crossed yet, the encoded size of a typical
/// one.
fn sizes(traffic: &[(&str, &LinkTraffic)]) -> (Sizes, u64) {
    let average = |class: &str| {
        let (messages, bytes) = traffic
            .iter()
            .map(|(_, r)| r)
            .filter(|r| r.class == class)
            .fold((0u64, 0u64), |(m, b), r| (m + r.messages, b + r.bytes));
        (messages > 0).then(|| (bytes as f64 / messages as f64, messages))
    };
    let status = average("job_status");
    let sizes = Sizes {
        status: status.map_or_else(|| encoded(TYPICAL_STATUS), |(s, _)| s),
        trigger: average("trigger").map_or_else(|| encoded(TYPICAL_TRIGGER), |(s, _)| s),
    };
    (sizes, status.map_or(0, |(_, m)| m))
}

const TYPICAL_STATUS: &str = "[class,'job_status'],[appl,'application'],[gid,'2026-11-27-0a1b2c'],[job,'a_job_name'],[agent,'agent-1'],[status,'succeeded'],[exit,0],[attempt,1],[reason,''],[time,2026-11-27T00:00:00.000Z]";
const TYPICAL_TRIGGER: &str = "[class,'trigger'],[appl,'application'],[version,'0123456789ab'],[gid,'2026-11-27-0a1b2c'],[date,'2026-11-27'],[time,2026-11-27T00:00:00.000Z]";

/// The bytes `publication` takes as a message between brokers.
fn encoded(publication: &str) -> f64 {
    let Ok(publication) = publication.parse::<Publication>() else { return 0.0 };
    let stamp = Stamp::new(0, padres_lang::Name::new("b1").expect("a name"), 0);
    let frame =
        Frame::Broker { seq: 1, message: BrokerMessage::Publish { publication: publication.into(), stamp } };
    let mut out = Vec::new();
    match padres_lang::wire::encode(&frame, padres_lang::wire::codec::DEFAULT_MAX_FRAME, &mut out) {
        Ok(()) => out.len() as f64,
        Err(_) => 0.0,
    }
}

/// One broker's latest report.
struct Report {
    broker: String,
    neighbours: Vec<String>,
    traffic: Vec<LinkTraffic>,
    history: Vec<String>,
}

/// The history stores that keep `appl`'s statuses or triggers: those whose filters select
/// a typical one.
fn stores_of(appl: &str, reports: &[Report]) -> Vec<Store> {
    let typical = |text: &str| {
        let text = text.replace("'application'", &padres_lang::Value::str(appl).to_string());
        text.parse::<Publication>().ok()
    };
    let (status, trigger) = (typical(TYPICAL_STATUS), typical(TYPICAL_TRIGGER));
    let keeps = |filters: &[padres_lang::Subscription], publication: &Option<Publication>| {
        publication.as_ref().is_some_and(|p| filters.iter().any(|f| padres_lang::matches(f, p)))
    };
    reports
        .iter()
        .filter_map(|r| {
            let filters: Vec<padres_lang::Subscription> =
                r.history.iter().filter_map(|f| f.parse().ok()).collect();
            let store = Store {
                broker: r.broker.clone(),
                statuses: keeps(&filters, &status),
                triggers: keeps(&filters, &trigger),
            };
            (store.statuses || store.triggers).then_some(store)
        })
        .collect()
}

/// The brokers' reports heard within `wait`: it returns sooner once every broker named
/// (by itself or a neighbour) has reported.
async fn broker_reports(broker: &BrokerArgs, wait: Duration) -> Result<Vec<Report>, String> {
    let mut client = broker.connect().await?;
    client.send(&format!("s {}", monitor::subscription())).await.map_err(|e| e.to_string())?;
    let mut federation = Federation::default();
    let mut reports: BTreeMap<String, Report> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let named: BTreeSet<&str> = reports
            .values()
            .flat_map(|r| r.neighbours.iter().map(String::as_str).chain([r.broker.as_str()]))
            .collect();
        if !reports.is_empty() && named.iter().all(|b| reports.contains_key(*b)) {
            break;
        }
        let notification = match tokio::time::timeout_at(deadline, client.next_notification()).await {
            Ok(Some(n)) => n,
            Ok(None) => return Err("the broker closed the connection".into()),
            Err(_) => break,
        };
        if let Notification::Publication { publication, .. } = notification
            && federation.receive(0, &publication)
        {
            let view = federation.view(0);
            for b in view.brokers {
                reports.insert(
                    b.broker.clone(),
                    Report {
                        broker: b.broker,
                        neighbours: b.neighbours,
                        traffic: b.traffic,
                        history: b.history,
                    },
                );
            }
        }
    }
    if reports.is_empty() {
        return Err(format!(
            "no broker report within {} s: brokers publish one every monitor_interval_ms (5 s by default; 0 turns them off)",
            wait.as_secs()
        ));
    }
    Ok(reports.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_keeps_what_its_filters_select() {
        let report = |broker: &str, history: &[&str]| Report {
            broker: broker.to_owned(),
            neighbours: Vec::new(),
            traffic: Vec::new(),
            history: history.iter().map(|h| (*h).to_owned()).collect(),
        };
        let reports = [
            report("B1", &["[class,eq,'job_status'],[appl,eq,'pay']"]),
            report("B2", &["[class,eq,'job_status'],[appl,eq,'other']", "[class,eq,'trigger']"]),
            report("B3", &[]),
        ];
        let stores = stores_of("pay", &reports);
        assert_eq!(
            stores,
            [
                Store { broker: "B1".into(), statuses: true, triggers: false },
                Store { broker: "B2".into(), statuses: false, triggers: true },
            ]
        );
    }

    #[test]
    fn typical_messages_have_a_size() {
        assert!(encoded(TYPICAL_STATUS) > 100.0);
        assert!(encoded(TYPICAL_TRIGGER) > 50.0);
    }
}
