//! [`AgentCore`] driven in virtual time by a bench that answers every request at once:
//! rules that need the whole agent (deployments and their versions, pool dispatch) rather
//! than one of its parts.

use std::time::Duration;

use padres_lang::{Message, MessageId, Name, Publication};
use padres_workflow::control::{Command, Control};
use padres_workflow::{EnvelopeBody, parse_application, translate};

use super::{AgentCore, Input, Now, Options, Output, RETIRE_GRACE};
use crate::journal::MemoryJournal;
use padres_client::Notification;

/// An agent and a broker that takes everything.
struct Bench {
    core: AgentCore,
    now: Now,
    next_id: u64,
    /// Every request made, with the id given.
    requests: Vec<(Message, Option<MessageId>)>,
    /// Every publication written, with when.
    written: Vec<(tokio::time::Instant, Publication)>,
}

impl Bench {
    fn new(name: &str) -> Self {
        let now = Now { at: tokio::time::Instant::now(), wall_ms: 1_800_000_000_000 };
        let mut options = Options::new(name, std::path::PathBuf::new());
        options.catch_up = Duration::from_secs(5);
        let core = AgentCore::new(options, Box::new(MemoryJournal::default()), now, "B1".to_owned());
        let mut bench = Self { core, now, next_id: 0, requests: Vec::new(), written: Vec::new() };
        bench.pump();
        bench
    }

    /// Carries out what the agent asks, answering at once.
    fn pump(&mut self) {
        while let Some(output) = self.core.poll_output() {
            let input = match output {
                Output::Request { token, message } => {
                    let id = match &message {
                        Message::Unsubscribe(_) | Message::Unadvertise(_) => None,
                        _ => {
                            self.next_id += 1;
                            Some(MessageId::new(Name::new("B1").expect("a name"), self.next_id))
                        }
                    };
                    self.requests.push((message, id.clone()));
                    Input::Answer { token, answer: Ok(id) }
                }
                Output::Write { token, publication, .. } => {
                    self.written.push((self.now.at, publication));
                    Input::Published { token, answer: Ok(()) }
                }
                Output::Fatal(why) => panic!("{why}"),
                Output::Attempt { .. } | Output::Command { .. } | Output::Leave => continue,
            };
            self.core.handle(self.now, input);
        }
    }

    /// Lets `d` of virtual time pass, waking the agent when it asks.
    fn advance(&mut self, d: Duration) {
        let until = self.now.at + d;
        while let Some(at) = self.core.poll_timeout().filter(|at| *at <= until) {
            self.set(at);
            self.core.handle_timeout(self.now, true);
            self.pump();
        }
        self.set(until);
    }

    fn set(&mut self, at: tokio::time::Instant) {
        let passed = at.saturating_duration_since(self.now.at);
        self.now = Now { at, wall_ms: self.now.wall_ms + i64::try_from(passed.as_millis()).expect("short") };
    }

    /// An operator's command, as the agent's control subscription delivers it.
    fn command(&mut self, control: &Control) {
        let publication: Publication = control.publication().expect("a command");
        let sub = MessageId::new(Name::new("B1").expect("a name"), 1);
        self.core.handle(
            self.now,
            Input::Notification(Notification::Publication { subs: vec![sub], publication }),
        );
        self.pump();
    }

    /// A publication delivered to the agent for its subscription `sub`.
    fn deliver(&mut self, sub: &MessageId, publication: Publication) {
        let notification = Notification::Publication { subs: vec![sub.clone()], publication };
        self.core.handle(self.now, Input::Notification(notification));
        self.pump();
    }

    /// The id given to the first subscription whose text contains `part`.
    fn subscription(&self, part: &str) -> MessageId {
        self.requests
            .iter()
            .filter(|(m, _)| matches!(m, Message::Subscribe(_)) && m.to_string().contains(part))
            .find_map(|(_, id)| id.clone())
            .unwrap_or_else(|| panic!("no subscription with {part}"))
    }

    /// The subscriptions withdrawn so far.
    fn withdrawn(&self) -> Vec<MessageId> {
        self.requests
            .iter()
            .filter_map(|(m, _)| match m {
                Message::Unsubscribe(id) => Some(id.clone()),
                _ => None,
            })
            .collect()
    }

    /// The ids given to the dependency (composite) subscriptions made so far.
    fn dependencies(&self) -> Vec<MessageId> {
        self.requests
            .iter()
            .filter_map(|(m, id)| matches!(m, Message::CompositeSubscribe(_)).then(|| id.clone()).flatten())
            .collect()
    }
}

/// Payroll's deployment for `agent`, as version `version`.
fn payroll(agent: &str, version: &str) -> EnvelopeBody {
    let app = parse_application(padres_workflow::examples::PAYROLL).expect("payroll");
    let deployment = translate(&app).expect("translates");
    let envelope = deployment.envelopes.iter().find(|e| e.agent == agent).expect("an envelope");
    let mut body = envelope.envelope_body(&deployment.appl);
    body.version = version.to_owned();
    body
}

fn deploy(agent: &str, body: EnvelopeBody) -> Control {
    Control {
        agent: agent.to_owned(),
        appl: body.appl.clone(),
        reference: String::new(),
        command: Command::Deploy(Box::new(body)),
    }
}

#[test]
fn a_replaced_version_is_kept_for_its_grace_then_withdrawn() {
    let mut bench = Bench::new("agent-2");
    bench.command(&deploy("agent-2", payroll("agent-2", "v1")));
    let first = bench.dependencies();
    assert!(!first.is_empty(), "v1's dependencies subscribed");
    bench.command(&deploy("agent-2", payroll("agent-2", "v2")));
    assert!(bench.dependencies().len() > first.len(), "v2's dependencies subscribed too");
    // No generation of v1 is seen running: it is kept for the grace all the same (a home
    // agent not yet given v2 may start one on it), and no longer.
    bench.advance(RETIRE_GRACE - Duration::from_secs(2));
    assert!(first.iter().all(|sub| !bench.withdrawn().contains(sub)), "withdrawn before its grace");
    bench.advance(Duration::from_secs(4));
    assert!(first.iter().all(|sub| bench.withdrawn().contains(sub)), "kept past its grace");
}

#[test]
fn a_version_deployed_again_unchanged_changes_nothing() {
    let mut bench = Bench::new("agent-2");
    bench.command(&deploy("agent-2", payroll("agent-2", "v1")));
    let made = bench.requests.len();
    bench.command(&deploy("agent-2", payroll("agent-2", "v1")));
    bench.advance(RETIRE_GRACE * 2);
    let asked: Vec<&Message> = bench.requests[made..].iter().map(|(m, _)| m).collect();
    assert!(
        asked.iter().all(|m| !matches!(m, Message::CompositeSubscribe(_) | Message::Unsubscribe(_))),
        "{asked:?}"
    );
}

/// A home agent dispatching a pool job: to whom each `dispatched` status sends it, with why,
/// as (when, member, reason).
fn dispatches(bench: &Bench) -> Vec<(tokio::time::Instant, String, Option<String>)> {
    let text = |p: &Publication, a: &str| p.get(a).and_then(padres_lang::Value::as_str).map(str::to_owned);
    bench
        .written
        .iter()
        .filter(|(_, p)| text(p, "status").as_deref() == Some("dispatched"))
        .map(|(at, p)| (*at, text(p, "to").unwrap_or_default(), text(p, "reason")))
        .collect()
}

#[test]
fn a_pool_job_goes_to_another_member_only_after_its_member_is_silent_for_silence_periods() {
    const XML: &str = r#"<application name="nightly" version="1" tz="UTC" max-generations="2" home="home">
        <job name="P" run="daily" pool="ledger"><command>true</command></job>
        <job name="Q" run="daily" agent="home"><command>true</command><after job="P"/></job>
    </application>"#;
    let app = parse_application(XML).expect("valid");
    let deployment = translate(&app).expect("translates");
    let envelope = deployment.envelopes.iter().find(|e| e.agent == "home").expect("the home agent's");
    let mut bench = Bench::new("home");
    bench.command(&envelope.control("nightly", "r"));
    let loads = bench.subscription("agent_load");
    let report = |bench: &Bench, agent: &str| {
        crate::pool::Load {
            agent: agent.to_owned(),
            broker: "B1".to_owned(),
            pools: vec!["ledger".to_owned()],
            incarnation: 7,
            state: crate::pool::MemberState::Up,
            period_ms: 1000,
            capacity: 4,
            running: 0,
            queued: 0,
            delay_short_ms: 0.0,
            delay_long_ms: 0.0,
            arrivals: 0.0,
        }
        .publication()
        .expect("a report")
        .with_time(padres_lang::Timestamp::from_millis(bench.now.wall_ms).expect("a time"))
    };
    // Both members report (the pool's policy picks one of them).
    for agent in ["m1", "m2"] {
        let publication = report(&bench, agent);
        bench.deliver(&loads, publication);
    }
    // A generation: its trigger, then P's dependency matched (the trigger and APPL_START).
    let trigger = Control {
        agent: "home".to_owned(),
        appl: "nightly".to_owned(),
        reference: String::new(),
        command: Command::Trigger { gid: "g1".to_owned(), date: "2026-11-27".to_owned() },
    };
    bench.command(&trigger);
    let published =
        padres_workflow::control::trigger_publication("nightly", &deployment.version, "g1", "2026-11-27")
            .expect("a trigger");
    let dependencies = bench.dependencies();
    for sub in &dependencies[..2] {
        // (APPL_START's, then P's: each needs the trigger; P's also APPL_START's status,
        // which a composite match carries with it.)
        let pubs = vec![(0, published.clone())];
        bench.core.handle(bench.now, Input::Notification(Notification::Composite { sub: sub.clone(), pubs }));
        bench.pump();
    }
    let first = dispatches(&bench);
    assert_eq!(first.len(), 1, "{first:?}");
    let member = first[0].1.clone();
    let other = if member == "m1" { "m2" } else { "m1" };
    // The other member keeps reporting; the chosen one falls silent. Silence is 3 periods
    // of 1 s (its own): before that the job stays where it is.
    let start = bench.now.at;
    for _ in 0..12 {
        bench.advance(Duration::from_millis(500));
        let publication = report(&bench, other);
        bench.deliver(&loads, publication);
    }
    let again = dispatches(&bench);
    assert_eq!(again.len(), 2, "dispatched again once: {again:?}");
    let (at, to, reason) = &again[1];
    assert_eq!(to, other);
    assert!(reason.as_deref().is_some_and(|r| r.contains("silent")), "{reason:?}");
    let waited = at.saturating_duration_since(start);
    assert!(waited >= Duration::from_secs(3), "dispatched again after {waited:?}, before 3 silent periods");
    assert!(waited <= Duration::from_secs(5), "dispatched again only after {waited:?}");
}
