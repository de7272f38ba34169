//! `padres agents`: the agents of a federation, from their load reports (`agent_load`,
//! `docs/pools.md`), stored and live; and `padres agents drain NAME`.

use std::collections::BTreeMap;
use std::time::Duration;

use padres_agent::pool::{LOAD, Load, MemberState};
use padres_client::Notification;
use padres_lang::Timestamp;
use padres_workflow::control::{ANY_APPL, Command, Control};

use crate::BrokerArgs;
use crate::workflow::{command_agents, reference, since_arg};

/// How long live reports are awaited after the stored ones: every agent reporting at the
/// default period has reported once meanwhile.
const LISTEN: Duration = Duration::from_millis(1500);

/// Reports an agent may miss before it is shown `silent`.
const SILENT_AFTER: u32 = padres_agent::pool::SILENCE;

/// An agent's latest report and when it was made (epoch milliseconds).
pub(crate) type Latest = (Load, i64);

/// `padres agents`: each agent's latest report since `since`, with its state.
pub(crate) async fn list(since: Option<&str>, json: bool, broker: &BrokerArgs) -> Result<(), String> {
    let since = since_arg(since, "10m")?;
    let latest = latest_reports(broker, since).await?;
    let now = padres_client::check::now().millis();
    if json {
        let agents: Vec<serde_json::Value> = latest.values().map(|(l, at)| agent_json(l, *at, now)).collect();
        out!("{}", serde_json::json!({ "agents": agents }));
        return Ok(());
    }
    if latest.is_empty() {
        out!(
            "no agent has reported since {} (agent_load kept in no history store, or no agent running)",
            since.to_rfc3339()
        );
        return Ok(());
    }
    out!(
        "{:<16} {:<8} {:<16} {:>8} {:>7} {:>6} {:>10} {:>10} {:>7} {:>6}  broker",
        "agent",
        "state",
        "pools",
        "capacity",
        "running",
        "queued",
        "delay 10s",
        "delay 60s",
        "jobs/s",
        "seen"
    );
    for (load, at) in latest.values() {
        let pools = if load.pools.is_empty() { "-".to_owned() } else { load.pools.join(",") };
        out!(
            "{:<16} {:<8} {:<16} {:>8} {:>7} {:>6} {:>8.0}ms {:>8.0}ms {:>7.1} {:>5}s  {}",
            load.agent,
            state(load, *at, now),
            pools,
            load.capacity,
            load.running,
            load.queued,
            load.delay_short_ms,
            load.delay_long_ms,
            load.arrivals,
            (now - at).max(0) / 1000,
            load.broker
        );
    }
    Ok(())
}

/// Each agent's latest load report since `since`, stored and live (for [`LISTEN`] after
/// the stored ones), by agent; stores that did not answer are named on stderr.
pub(crate) async fn latest_reports(
    broker: &BrokerArgs,
    since: Timestamp,
) -> Result<BTreeMap<String, Latest>, String> {
    let mut client = broker.connect().await?;
    let sub = format!("s [class,eq,'{LOAD}'],[time,>=,{}]", since.to_rfc3339());
    client.send(&sub).await.map_err(|e| e.to_string())?;
    let mut latest: BTreeMap<String, Latest> = BTreeMap::new();
    let mut stored = false;
    let mut missing = Vec::new();
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let next = tokio::time::timeout_at(deadline, client.next_notification()).await;
        let notification = match next {
            Ok(Some(n)) => n,
            Ok(None) => return Err("the broker closed the connection".into()),
            Err(_) if stored => break,
            Err(_) => return Err("the history stores did not answer within 30 s".into()),
        };
        match notification {
            Notification::EndOfHistory { missing: gone, .. } => {
                missing.extend(gone.iter().map(ToString::to_string));
                stored = true;
                deadline = tokio::time::Instant::now() + LISTEN;
            }
            Notification::Publication { publication, .. } => {
                let Some(load) = Load::from_publication(&publication) else { continue };
                let at = publication.time().map_or(0, Timestamp::millis);
                let newer = latest
                    .get(&load.agent)
                    .is_none_or(|(known, known_at)| (load.incarnation, at) >= (known.incarnation, *known_at));
                if newer {
                    latest.insert(load.agent.clone(), (load, at));
                }
            }
            Notification::Composite { .. } => {}
        }
    }
    if !missing.is_empty() {
        eprintln!(
            "padres: no answer from the history stores at {}: what they keep is missing",
            missing.join(", ")
        );
    }
    Ok(latest)
}

/// An agent's state as of `now`: its own word, or `silent` when it has missed
/// [`SILENT_AFTER`] reports.
pub(crate) fn state(load: &Load, at: i64, now: i64) -> &'static str {
    let silent = now - at > load.period_ms * i64::from(SILENT_AFTER);
    match load.state {
        MemberState::Left => "left",
        _ if silent => "silent",
        other => other.as_str(),
    }
}

fn agent_json(load: &Load, at: i64, now: i64) -> serde_json::Value {
    serde_json::json!({
        "agent": load.agent,
        "state": state(load, at, now),
        "pools": load.pools,
        "broker": load.broker,
        "incarnation": load.incarnation,
        "period_ms": load.period_ms,
        "capacity": load.capacity,
        "running": load.running,
        "queued": load.queued,
        "delay_short_ms": load.delay_short_ms,
        "delay_long_ms": load.delay_long_ms,
        "arrivals_per_s": load.arrivals,
        "reported_at_ms": at,
    })
}

/// `padres agents drain NAME`: the agent takes no new pool jobs, finishes those it has and
/// leaves; returns once it has taken the command.
pub(crate) async fn drain(name: &str, timeout: Duration, broker: &BrokerArgs) -> Result<(), String> {
    let mut client = broker.connect().await?;
    let control = Control {
        agent: name.to_owned(),
        appl: ANY_APPL.to_owned(),
        reference: reference(),
        command: Command::Drain,
    };
    let answers = command_agents(&mut client, std::slice::from_ref(&control), timeout, true).await?;
    match answers.get(name) {
        Some(Some(why)) => Err(format!("{name} refused: {why}")),
        _ => {
            out!("{name} is draining: it takes no new pool jobs and leaves once those it has have ended");
            Ok(())
        }
    }
}
