//! Workflows in the simulator: job agents ([`AgentCore`], the agent's every decision)
//! hosted beside the brokers' routers ([`Sim`]) in virtual time, with jobs that take a
//! simulated time and fail as the seed says, and faults: brokers between the agents
//! restarting (with their configuration and stores), agents crashing and starting again on
//! their journals (a pool job's process killed with its agent), tree links failing for
//! good and made again, a broker restarting under agents (their sessions lost: what they
//! awaited fails, their clients reconnect and issue again what they had issued, with new
//! ids mapped back, as the client does), deliveries delayed and reordered across links,
//! and the agents' clocks up to 3 s apart. Two seeds in five run payroll, one month-end
//! (with its ledger pool), two a random DAG of 5 to 60 jobs; one to three generations
//! each. A third of the payroll seeds then play a second act ([`Act`]): a new version with a cron trigger (every two minutes) and an
//! event trigger, events published, the home agent down for one to five minutes, then a
//! version without triggers.
//!
//! The oracle ([`World::check`]), for every generation triggered:
//! - each job runs at most once (a run counts from its first attempt's start: attempts
//!   are numbered 1, 2, … without a repeat; none starts after one succeeded), except what
//!   `docs/pools.md` says of pool jobs: one whose member died (its run killed with it) or
//!   was cut off runs again on another member, from a higher attempt, after that fault;
//! - it starts only once its dependencies (`any-of` included) have final statuses in the
//!   history stores;
//! - every generation ends with `APPL_END` (a job that failed for good is bypassed by the
//!   operator, so that its successors go on);
//! - what the history stores keep of each job agrees with what ran, as `padres workflow
//!   status` reads it: its last status is the last attempt's outcome (or the operator's
//!   bypass, or the report of a run its agent's crash interrupted);
//! - in the second act, generations start as the triggers say ([`World::check_act`]):
//!   each cron occurrence while the home agent is up, of those missed while it was down
//!   only the latest, none outside the version that has the triggers, one per event.
//!
//! A vacuity guard checks that the suite's seeds ran jobs through every kind of fault.
//!
//! `cargo test -p padres-tests --test sim_agents` runs 1,000 seeds on every core;
//! `AGENT_SEED=n` runs one seed and prints every input and output of every agent and
//! the agents' logs (`SIM_TRACE=1` adds the messages between brokers); `AGENT_SEEDS=A..B`
//! runs a range (a longer search, about 55 s per 1,000 seeds on two cores:
//! `AGENT_SEEDS=1000..20000 cargo test -p padres-tests --test sim_agents workflows`);
//! `AGENT_TIMES=1` prints each seed's time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use padres_agent::agent::{AgentCore, Input, Now, Options, Outcome, Output, PublishFailure};
use padres_agent::journal::MemoryJournal;
use padres_broker::router::ClientId;
use padres_broker::sim::Sim;
use padres_client::Notification;
use padres_lang::{Message, MessageId, Value};
use padres_workflow::control::{Command, Control, control_advertisement};
use padres_workflow::progress::{Generation, State, StatusEvent};
use padres_workflow::translate::FINAL;
use padres_workflow::{APPL_END, APPL_START, Application, Dependency, parse_application, translate};

/// Prints (with `AGENT_SEED`) or digests what happens, formatted only then.
macro_rules! log {
    ($world:expr, $($arg:tt)*) => {
        if $world.tracing() {
            let line = format!($($arg)*);
            $world.note(&line);
        }
    };
}

/// Virtual time starts an hour past the epoch: the agents read history from a minute
/// before a generation's trigger.
const START_MS: u64 = 3_600_000;

/// (appl, gid, job).
type Key = (String, String, String);

/// A `job_status` as the history stores keep it: (time, status, attempt, reason).
type Stored = (u64, String, i64, Option<String>);

/// What a request of an agent's is waiting for.
#[derive(Debug)]
enum Waiting {
    /// A request's answer; an advertisement or subscription is kept for reissuing.
    Answer(u64, Option<Message>),
    Published(u64),
    /// A subscription or advertisement issued again after a lost session, by the id the
    /// agent knows it by.
    Reissued(MessageId),
}

/// One agent: its core while it is up, its journal always.
struct Agent {
    name: String,
    broker: usize,
    client: ClientId,
    core: Option<AgentCore>,
    journal: Arc<Mutex<MemoryJournal>>,
    /// Its wall clock, this far from the brokers'.
    skew_ms: i64,
    /// The simulator's request numbers of its requests and publications in flight.
    waiting: BTreeMap<u64, Waiting>,
    /// How many times it has started (its attempts' ends from an earlier life are lost).
    life: u32,
    /// Connected to its broker (its session lost with a broker's restart, until the client
    /// reconnects).
    connected: bool,
    /// What its client has issued and not withdrawn, by the id the agent knows, in order:
    /// issued again on a new session, as the client does.
    issued: Vec<(MessageId, Message)>,
    /// The ids the broker gave reissued messages: the agent's id to the current one, and
    /// back.
    current: BTreeMap<MessageId, MessageId>,
    original: BTreeMap<MessageId, MessageId>,
}

/// An attempt running: it ends at its time.
#[derive(Debug)]
struct Running {
    agent: usize,
    life: u32,
    key: Key,
    number: u32,
    outcome: &'static str,
    /// A pool job's process, killed with its agent.
    dies_with_agent: bool,
}

/// What the oracle saw.
#[derive(Debug, Default)]
struct Seen {
    /// Attempts started, by key: (time, agent, number).
    attempts: BTreeMap<Key, Vec<(u64, usize, u32)>>,
    /// Attempts' outcomes, by key: (number, status).
    outcomes: BTreeMap<Key, Vec<(u32, &'static str)>>,
    /// Generations triggered: (appl, gid) → when.
    triggered: BTreeMap<(String, String), u64>,
    /// Their run days.
    dates: BTreeMap<(String, String), String>,
    /// Jobs bypassed by the operator.
    bypassed: BTreeSet<Key>,
    /// When an agent crashed or a link went down.
    faults: Vec<u64>,
    /// The second act, when the seed plays it.
    act: Option<Act>,
}

/// A seed's second act: a version with a cron trigger (every two minutes) and an event
/// trigger deployed, events published, the home agent down for a while, then a version
/// without triggers deployed. Times are the simulator's.
#[derive(Debug)]
struct Act {
    appl: String,
    /// The home agent.
    home: usize,
    /// When the version with the triggers was deployed, and the one without.
    deployed: u64,
    withdrawn: u64,
    /// The home agent crashed and started again.
    down: (u64, u64),
    /// When each event was published.
    events: Vec<u64>,
}

/// The second act's cron trigger: every two minutes.
const CRON: &str = "*/2 * * * *";
const CRON_MS: i64 = 120_000;

/// The second act's event trigger, and the operator's advertisement for its events.
const EVENT: &str = "[class,eq,'file_arrived'],[dir,eq,'inbox']";
const EVENT_AD: &str = "[class,eq,'file_arrived'],[dir,isPresent,''],[n,isPresent,0]";

/// What a margin of the oracle's leaves to either side of an instant it cannot pin down
/// (a trigger fired, an event published or a deployment taken near a crash, a restart or
/// a deployment).
const MARGIN_MS: i64 = 1_000;

/// The federation, its agents, an operator, and the jobs running.
struct World {
    sim: Sim,
    agents: Vec<Agent>,
    operator: ClientId,
    next_client: ClientId,
    options: Options,
    epoch: tokio::time::Instant,
    /// Attempts running, by when they end.
    running: BTreeMap<(u64, u64), Running>,
    seq: u64,
    rng: fastrand::Rng,
    /// Chance that an attempt fails.
    failing: f64,
    /// Indices into the simulator's deliveries, composite deliveries and ends handled.
    handled: (usize, usize, usize),
    seen: Seen,
    trace: bool,
    /// The applications deployed: their models.
    apps: Vec<Application>,
    /// Operator actions due: (time, seq) → the control publication.
    operator_due: BTreeMap<(u64, u64), Control>,
    /// Each broker's parent in the tree (B1 has none).
    parent: Vec<Option<usize>>,
    /// A digest of every agent's inputs and outputs, when asked for.
    digest: Option<std::hash::DefaultHasher>,
}

impl World {
    /// `brokers` brokers in a random tree with 2–6 ms links; agents `names` attached at
    /// random brokers; history stores (`trigger`, `job_status`) at two brokers; the
    /// operator at B1.
    fn new(seed: u64, brokers: usize, names: &[String]) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut sim = Sim::new(brokers);
        sim.set_jitter(rng.u64(0..=4), seed);
        let mut parent = vec![None];
        for b in 1..brokers {
            let p = rng.usize(0..b);
            parent.push(Some(p));
            sim.link(p, b, rng.u64(2..=6));
        }
        sim.run();
        // Every broker keeps what the agents read back: a status taken by an agent's
        // broker is not lost to a link that fails for good afterwards.
        for b in 0..brokers {
            sim.keep_history(b, "[class,eq,'trigger']");
            sim.keep_history(b, "[class,eq,'job_status']");
        }
        sim.run();
        sim.advance(START_MS);
        let mut options = Options::new("", std::path::PathBuf::new());
        options.catch_up = Duration::from_secs(5);
        options.load_period = Duration::from_secs(3);
        let mut world = Self {
            sim,
            agents: Vec::new(),
            operator: 1,
            next_client: 2,
            options,
            epoch: tokio::time::Instant::now(),
            running: BTreeMap::new(),
            seq: 0,
            failing: [0.0, 0.1, 0.3][rng.usize(0..3)],
            rng,
            handled: (0, 0, 0),
            seen: Seen::default(),
            trace: std::env::var_os("AGENT_SEED").is_some(),
            apps: Vec::new(),
            operator_due: BTreeMap::new(),
            parent,
            digest: DIGEST.with(std::cell::Cell::get).then(std::hash::DefaultHasher::new),
        };
        world.sim.attach(world.operator, 0);
        let control = Message::Advertise(control_advertisement());
        world.sim.request(world.operator, control);
        for name in names {
            let broker = world.rng.usize(0..brokers);
            let skew_ms = world.rng.i64(-3000..=3000);
            let agent = Agent {
                name: name.clone(),
                broker,
                client: 0,
                core: None,
                journal: Arc::default(),
                skew_ms,
                waiting: BTreeMap::new(),
                life: 0,
                connected: true,
                issued: Vec::new(),
                current: BTreeMap::new(),
                original: BTreeMap::new(),
            };
            world.agents.push(agent);
            world.start(world.agents.len() - 1);
        }
        world
    }

    fn now(&self, agent: usize) -> Now {
        let t = self.sim.now();
        let wall_ms = i64::try_from(t).expect("small") + self.agents[agent].skew_ms;
        Now { at: self.epoch + Duration::from_millis(t), wall_ms }
    }

    /// Whether what happens is printed or digested ([`log!`]).
    fn tracing(&self) -> bool {
        self.trace || self.digest.is_some()
    }

    fn note(&mut self, line: &str) {
        if self.trace {
            eprintln!("{} {line}", self.sim.now());
        }
        if let Some(hasher) = &mut self.digest {
            std::hash::Hash::hash(&(self.sim.now(), line), hasher);
        }
    }

    /// The digest of every agent's inputs and outputs (see [`with_digest`]), 0 without.
    fn digest(&self) -> u64 {
        self.digest.as_ref().map_or(0, std::hash::Hasher::finish)
    }

    /// Agent `a` starts (again), on its journal.
    fn start(&mut self, a: usize) {
        let client = self.next_client;
        self.next_client += 1;
        self.sim.attach(client, self.agents[a].broker);
        let now = self.now(a);
        let agent = &mut self.agents[a];
        agent.client = client;
        agent.life += 1;
        agent.waiting.clear();
        agent.connected = true;
        agent.issued.clear();
        agent.current.clear();
        agent.original.clear();
        {
            let mut journal = agent.journal.lock().expect("journal");
            journal.set_now(now.wall_ms);
            journal.restart();
        }
        let mut options = Options { name: agent.name.clone(), ..self.options.clone() };
        if let Some(pool) =
            agent.name.strip_suffix(|c: char| c.is_ascii_digit()).and_then(|n| n.strip_suffix('-'))
            && pool == "ledger"
        {
            options.pools = vec![pool.to_owned()];
        }
        let broker = self.sim.name(agent.broker).to_string();
        agent.core = Some(AgentCore::new(options, Box::new(agent.journal.clone()), now, broker));
        let (name, life, broker) =
            (self.agents[a].name.clone(), self.agents[a].life, self.agents[a].broker + 1);
        log!(self, "{name} starts (life {life}) at B{broker}");
    }

    /// Agent `a`'s broker restarted: its session is lost. What it awaited fails (requests
    /// unanswered, publications not sent); until its client reconnects, what it asks fails
    /// at once.
    fn session_lost(&mut self, a: usize) {
        log!(self, "{} loses its session", self.agents[a].name);
        self.agents[a].connected = false;
        let waiting = std::mem::take(&mut self.agents[a].waiting);
        for (_, w) in waiting {
            let input = match w {
                Waiting::Answer(token, _) => {
                    Input::Answer { token, answer: Err("no answer: session lost".to_owned()) }
                }
                Waiting::Published(token) => Input::Published {
                    token,
                    answer: Err(PublishFailure::NotSent("session lost".to_owned())),
                },
                Waiting::Reissued(_) => continue,
            };
            self.input(a, input);
        }
    }

    /// Agent `a`'s client reconnects: a new session, in which it issues again what it had
    /// issued (the broker gives new ids, mapped to the agent's).
    fn reconnect(&mut self, a: usize) {
        if self.agents[a].core.is_none() {
            return;
        }
        let client = self.next_client;
        self.next_client += 1;
        self.sim.attach(client, self.agents[a].broker);
        log!(self, "{} reconnects", self.agents[a].name);
        let agent = &mut self.agents[a];
        agent.client = client;
        agent.connected = true;
        for (old, message) in agent.issued.clone() {
            let req = self.sim.request(client, message);
            self.agents[a].waiting.insert(req, Waiting::Reissued(old));
        }
    }

    /// Agent `a` crashes: its core is gone, its journal kept, its client disconnected.
    fn crash(&mut self, a: usize) {
        log!(self, "{} crashes", self.agents[a].name);
        self.seen.faults.push(self.sim.now());
        self.agents[a].core = None;
        // A pool job's process dies with it; others run on, their ends unheard.
        self.running.retain(|_, r| !(r.agent == a && r.dies_with_agent));
        if self.sim.is_attached(self.agents[a].client) {
            self.sim.disconnect(self.agents[a].client);
        }
    }

    /// Hands agent `a` `input`.
    fn input(&mut self, a: usize, input: Input) {
        log!(self, "{} <- {input:?}", self.agents[a].name);
        let now = self.now(a);
        if let Some(core) = &mut self.agents[a].core {
            core.handle(now, input);
        }
    }

    /// Carries out what every agent asks, hands back answers and notifications, until
    /// nothing more happens at this time.
    fn settle(&mut self) {
        loop {
            let mut busy = false;
            for a in 0..self.agents.len() {
                while let Some(output) = self.agents[a].core.as_mut().and_then(AgentCore::poll_output) {
                    busy = true;
                    self.output(a, output);
                }
            }
            busy |= self.answers();
            busy |= self.notifications();
            if !busy {
                return;
            }
        }
    }

    fn output(&mut self, a: usize, output: Output) {
        log!(self, "{} -> {output:?}", self.agents[a].name);
        let client = self.agents[a].client;
        match output {
            Output::Request { token, message } => {
                if !self.agents[a].connected {
                    let answer = Err("not connected".to_owned());
                    return self.input(a, Input::Answer { token, answer });
                }
                // A withdrawal names the id the agent was given; the broker knows the
                // current one (as the client maps it).
                let agent = &mut self.agents[a];
                let mut current = |id: MessageId| {
                    agent.issued.retain(|(old, _)| *old != id);
                    agent.current.get(&id).cloned().unwrap_or(id)
                };
                let message = match message {
                    Message::Unsubscribe(id) => Message::Unsubscribe(current(id)),
                    Message::Unadvertise(id) => Message::Unadvertise(current(id)),
                    other => other,
                };
                let kept = matches!(
                    message,
                    Message::Advertise(_) | Message::Subscribe(_) | Message::CompositeSubscribe(_)
                )
                .then(|| message.clone());
                let req = self.sim.request(client, message);
                self.agents[a].waiting.insert(req, Waiting::Answer(token, kept));
            }
            Output::Write { token, publication, .. } => {
                if !self.agents[a].connected {
                    let answer = Err(PublishFailure::NotSent("not connected".to_owned()));
                    return self.input(a, Input::Published { token, answer });
                }
                let req = self.sim.request(client, Message::Publish(publication));
                self.agents[a].waiting.insert(req, Waiting::Published(token));
            }
            Output::Attempt { key, number, die_with_agent, .. } => {
                let t = self.sim.now();
                self.seen.attempts.entry(key.clone()).or_default().push((t, a, number));
                let outcome = if self.rng.f64() < self.failing { "failed" } else { "succeeded" };
                let ends = t + self.rng.u64(5..=3000);
                self.seq += 1;
                let life = self.agents[a].life;
                let running =
                    Running { agent: a, life, key, number, outcome, dies_with_agent: die_with_agent };
                self.running.insert((ends, self.seq), running);
            }
            Output::Command { .. } | Output::Leave => {}
            Output::Fatal(why) => panic!("{}: {why}", self.agents[a].name),
        }
    }

    /// Answers that have come, handed to the agents that wait for them.
    fn answers(&mut self) -> bool {
        let mut any = false;
        for a in 0..self.agents.len() {
            let client = self.agents[a].client;
            let came: Vec<u64> = self.agents[a]
                .waiting
                .keys()
                .copied()
                .filter(|req| self.sim.replies.contains_key(&(client, *req)))
                .collect();
            for req in came {
                any = true;
                let reply = self.sim.replies.remove(&(client, req)).expect("came");
                let input = match self.agents[a].waiting.remove(&req).expect("waiting") {
                    Waiting::Answer(token, kept) => {
                        if let (Some(message), Ok(Some(id))) = (kept, &reply) {
                            self.agents[a].issued.push((id.clone(), message));
                        }
                        Input::Answer {
                            token,
                            answer: reply.map_err(|(code, why)| format!("{code:?}: {why}")),
                        }
                    }
                    Waiting::Published(token) => Input::Published {
                        token,
                        answer: reply.map(drop).map_err(|(_, why)| PublishFailure::Refused(why)),
                    },
                    Waiting::Reissued(old) => {
                        if let Ok(Some(new)) = reply {
                            self.agents[a].current.insert(old.clone(), new.clone());
                            self.agents[a].original.insert(new, old);
                        }
                        continue;
                    }
                };
                self.input(a, input);
            }
        }
        any
    }

    /// Publications, matches and ends of history delivered since last time, handed to
    /// their agents (those of a client gone are lost with it).
    fn notifications(&mut self) -> bool {
        let (d, c, e) = self.handled;
        let deliveries: Vec<_> = self.sim.deliveries[d..]
            .iter()
            .map(|x| {
                (
                    x.client,
                    Notification::Publication { subs: x.subs.clone(), publication: (*x.publication).clone() },
                )
            })
            .collect();
        let composites: Vec<_> = self.sim.composite_deliveries[c..]
            .iter()
            .map(|x| {
                let pubs = x.pubs.iter().map(|(leaf, p)| (*leaf, (**p).clone())).collect();
                (x.client, Notification::Composite { sub: x.sub.clone(), pubs })
            })
            .collect();
        let ends: Vec<_> = self.sim.ends[e..]
            .iter()
            .map(|x| {
                let end = Notification::EndOfHistory {
                    sub: x.sub.clone(),
                    count: x.count,
                    missing: x.missing.clone(),
                    truncated: x.truncated,
                };
                (x.client, end)
            })
            .collect();
        self.handled = (self.sim.deliveries.len(), self.sim.composite_deliveries.len(), self.sim.ends.len());
        let any = !(deliveries.is_empty() && composites.is_empty() && ends.is_empty());
        for (client, notification) in deliveries.into_iter().chain(composites).chain(ends) {
            if let Some(a) = self.agents.iter().position(|x| x.client == client && x.core.is_some()) {
                // Ids of reissued subscriptions, as the client maps them back.
                let old = |id: MessageId| self.agents[a].original.get(&id).cloned().unwrap_or(id);
                let notification = match notification {
                    Notification::Publication { subs, publication } => {
                        Notification::Publication { subs: subs.into_iter().map(old).collect(), publication }
                    }
                    Notification::Composite { sub, pubs } => Notification::Composite { sub: old(sub), pubs },
                    Notification::EndOfHistory { sub, count, missing, truncated } => {
                        Notification::EndOfHistory { sub: old(sub), count, missing, truncated }
                    }
                };
                self.input(a, Input::Notification(notification));
            }
        }
        any
    }

    /// Runs until virtual time `until`.
    fn run_until(&mut self, until: u64) {
        for _ in 0..10_000_000 {
            self.settle();
            let now = self.sim.now();
            let agents: Vec<u64> = (0..self.agents.len())
                .filter_map(|a| {
                    let at = self.agents[a].core.as_ref()?.poll_timeout()?;
                    let ms =
                        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).expect("small");
                    Some(ms.max(now))
                })
                .collect();
            let next = [
                self.sim.next_at(),
                self.running.first_key_value().map(|((t, _), _)| *t),
                self.operator_due.first_key_value().map(|((t, _), _)| *t),
            ]
            .into_iter()
            .flatten()
            .chain(agents)
            .min();
            let Some(next) = next.filter(|t| *t <= until) else {
                self.sim.run_until(until);
                return;
            };
            self.sim.run_until(next);
            self.settle();
            while let Some(entry) = self.running.first_entry() {
                if entry.key().0 > next {
                    break;
                }
                let Running { agent, life, key, number, outcome, .. } = entry.remove();
                self.seen.outcomes.entry(key.clone()).or_default().push((number, outcome));
                if self.agents[agent].life == life && self.agents[agent].core.is_some() {
                    let exit = i64::from(outcome != "succeeded");
                    let outcome = Outcome { status: outcome, exit, reason: None, output: String::new() };
                    self.input(agent, Input::AttemptEnded { key, number, outcome });
                }
            }
            while let Some(entry) = self.operator_due.first_entry() {
                if entry.key().0 > next {
                    break;
                }
                let control = entry.remove();
                self.publish_control(&control);
            }
            for a in 0..self.agents.len() {
                let now = self.now(a);
                let due = self.agents[a]
                    .core
                    .as_ref()
                    .and_then(AgentCore::poll_timeout)
                    .is_some_and(|at| at <= now.at);
                if due && let Some(core) = &mut self.agents[a].core {
                    core.handle_timeout(now, true);
                }
            }
        }
        panic!("no end to time {until}: something is due again and again");
    }

    fn publish_control(&mut self, control: &Control) {
        log!(self, "operator: {control:?}");
        let publication = control.publication().expect("a control publication");
        self.sim.request(self.operator, Message::Publish(publication));
    }

    /// Deploys `xml` from the operator (each agent its envelope).
    fn deploy(&mut self, xml: &str) {
        let app = parse_application(xml).expect("a valid application");
        let deployment = translate(&app).expect("translates");
        for envelope in &deployment.envelopes {
            self.publish_control(&envelope.control(&deployment.appl, "sim"));
        }
        // A new version replaces the model (the versions of one application differ only
        // in their triggers here).
        self.apps.retain(|a| a.name != app.name);
        self.apps.push(app);
    }

    /// Triggers generation `gid` of `appl` on `date` (to its home agent).
    fn trigger(&mut self, appl: &str, gid: &str, date: &str) {
        let app = self.apps.iter().find(|a| a.name == appl).expect("deployed");
        let control = Control {
            agent: app.home_agent().to_owned(),
            appl: appl.to_owned(),
            reference: gid.to_owned(),
            command: Command::Trigger { gid: gid.to_owned(), date: date.to_owned() },
        };
        self.seen.triggered.insert((appl.to_owned(), gid.to_owned()), self.sim.now());
        self.seen.dates.insert((appl.to_owned(), gid.to_owned()), date.to_owned());
        self.publish_control(&control);
    }

    /// The statuses the history stores keep, by key: (time, status, attempt, reason).
    fn history(&self) -> BTreeMap<Key, Vec<Stored>> {
        let mut by_key: BTreeMap<Key, Vec<_>> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for (_, stamped) in &self.sim.stored {
            let p = &stamped.publication;
            if p.class() != "job_status" || !seen.insert(stamped.stamp.clone()) {
                continue;
            }
            let text = |a: &str| p.get(a).and_then(Value::as_str).unwrap_or_default().to_owned();
            let attempt = match p.get("attempt") {
                Some(Value::Int(n)) => *n,
                _ => 0,
            };
            let time = p.time().map_or(0, |t| u64::try_from(t.millis()).unwrap_or(0));
            let reason = p.get("reason").and_then(Value::as_str).map(str::to_owned);
            let key = (text("appl"), text("gid"), text("job"));
            by_key.entry(key).or_default().push((time, text("status"), attempt, reason));
        }
        by_key
    }

    /// Operators bypass each job that failed for good (its successors go on), once.
    fn bypass_failed(&mut self) {
        let history = self.history();
        for (key, statuses) in &history {
            let last = statuses.iter().max_by_key(|(t, _, attempt, _)| (*attempt, *t));
            let failed = last.is_some_and(|(_, status, _, _)| status == "failed" || status == "timeout");
            if !failed || self.seen.bypassed.contains(key) {
                continue;
            }
            let Some(app) = self.apps.iter().find(|a| a.name == key.0) else { continue };
            let Some(job) = app.jobs.iter().find(|j| j.name == key.2) else { continue };
            // A pool job's home agent, which dispatched it, bypasses it.
            let agent = match &job.runner {
                padres_workflow::Runner::Agent(agent) => agent.clone(),
                padres_workflow::Runner::Pool(_) => app.home_agent().to_owned(),
            };
            self.seen.bypassed.insert(key.clone());
            let control = Control {
                agent,
                appl: key.0.clone(),
                reference: "bypass".to_owned(),
                command: Command::Bypass { gid: key.1.clone(), job: key.2.clone() },
            };
            self.seq += 1;
            let at = self.sim.now() + 500;
            self.operator_due.insert((at, self.seq), control);
        }
    }

    /// Quiet: failed jobs bypassed until every generation has ended (for three hours at
    /// most), and half a minute more for anything that would still happen.
    fn quiet(&mut self) {
        for _ in 0..360 {
            self.run_until(self.sim.now() + 30_000);
            if self.all_ended() {
                break;
            }
            self.bypass_failed();
        }
        self.run_until(self.sim.now() + 30_000);
        self.adopt_started();
    }

    /// The second act ([`Act`]) on application `xml` (its first version deployed).
    fn second_act(&mut self, xml: &str, rng: &mut fastrand::Rng) {
        let app = parse_application(xml).expect("a valid application");
        let home = self.agents.iter().position(|a| a.name == app.home_agent()).expect("its home agent");
        let ad = EVENT_AD.parse().expect("an advertisement");
        self.sim.request(self.operator, Message::Advertise(ad));
        self.run_until(self.sim.now() + 100);
        let deployed = self.sim.now();
        log!(self, "second act: version 2, with triggers");
        let triggers = format!("<trigger cron=\"{CRON}\"/><trigger event=\"{EVENT}\"/>");
        self.deploy(&versioned(xml, 2, &triggers));
        // The home agent down for one to five minutes; events now and then.
        let crash = deployed + rng.u64(10_000..=240_000);
        let restart = crash + rng.u64(60_000..=300_000);
        let withdrawn = restart + rng.u64(30_000..=240_000);
        let mut events: Vec<u64> =
            (0..rng.usize(1..=4)).map(|_| rng.u64(deployed + 2_000..withdrawn)).collect();
        events.sort_unstable();
        events.dedup();
        let mut plan: Vec<(u64, usize)> = events.iter().map(|t| (*t, 0)).collect();
        plan.extend([(crash, 1), (restart, 2), (withdrawn, 3)]);
        plan.sort_unstable();
        for (n, (at, what)) in plan.into_iter().enumerate() {
            self.run_until(at);
            match what {
                0 => {
                    let event = format!("[class,'file_arrived'],[dir,'inbox'],[n,{n}]");
                    log!(self, "operator: event {event}");
                    let publication = event.parse().expect("a publication");
                    self.sim.request(self.operator, Message::Publish(publication));
                }
                1 => self.crash(home),
                2 => self.start(home),
                _ => {
                    log!(self, "second act: version 3, without triggers");
                    self.deploy(&versioned(xml, 3, ""));
                }
            }
        }
        self.seen.act =
            Some(Act { appl: app.name, home, deployed, withdrawn, down: (crash, restart), events });
    }

    /// The second act's starts, as the docs say of triggers (`docs/workflows.md`): each
    /// cron occurrence while the home agent is up starts its generation; of those it
    /// missed while down, the latest is made up when it starts again and the earlier ones
    /// are skipped; none starts before the triggers were deployed or after they were
    /// withdrawn; each event published while the home agent is up starts one generation,
    /// and none starts but for an event. (That each of them runs its jobs once, in order,
    /// and ends is checked as for any generation.)
    fn check_act(&self, wrong: &mut Vec<String>) {
        let Some(act) = &self.seen.act else { return };
        let skew = self.agents[act.home].skew_ms;
        let sim = |t: u64| i64::try_from(t).expect("small");
        let (deployed, withdrawn) = (sim(act.deployed), sim(act.withdrawn));
        let (crash, restart) = (sim(act.down.0), sim(act.down.1));
        let mut fired = BTreeSet::new();
        let mut by_event: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
        for (appl, gid) in self.seen.triggered.keys() {
            if *appl != act.appl {
                continue;
            }
            if let Some(occurrence) = gid.strip_prefix("cron-") {
                let wall = chrono::DateTime::parse_from_str(occurrence, "%Y-%m-%dT%H%M%z")
                    .map_or(-1, |t| t.timestamp_millis());
                // When the home agent's clock showed it, in the simulator's time.
                let at = wall - skew;
                if wall % CRON_MS != 0 || at < deployed - MARGIN_MS || at > withdrawn + MARGIN_MS {
                    wrong.push(format!(
                        "{appl}/{gid}: started for an occurrence of '{CRON}' outside its deployment ({deployed}..{withdrawn}, at {at})"
                    ));
                }
                fired.insert(wall);
            } else if let Some(rest) = gid.strip_prefix("event-") {
                let at: i64 = rest.split('-').next().and_then(|t| t.parse().ok()).unwrap_or(-1);
                match act.events.iter().map(|t| sim(*t)).rfind(|t| (*t..=*t + 50).contains(&at)) {
                    Some(event) => by_event.entry(event).or_default().push(gid),
                    None => wrong.push(format!("{appl}/{gid}: started by no event published")),
                }
            }
        }
        let clear = |t: i64| (t - crash).abs() > MARGIN_MS && (t - restart).abs() > MARGIN_MS;
        let inside = |t: i64| t > deployed + MARGIN_MS && t < withdrawn - MARGIN_MS;
        // Occurrences, by the home agent's clock, while the triggers were deployed.
        let first = (deployed + skew).div_euclid(CRON_MS) * CRON_MS;
        let occurrences: Vec<i64> =
            (0..).map(|k| first + k * CRON_MS).take_while(|w| *w - skew <= withdrawn).collect();
        let missed: Vec<i64> = occurrences
            .iter()
            .copied()
            .filter(|w| inside(*w - skew) && clear(*w - skew) && (crash..restart).contains(&(*w - skew)))
            .collect();
        // The latest missed is made up, unless one fell too near the restart to say.
        let unsure = occurrences.iter().any(|w| (w - skew - restart).abs() <= MARGIN_MS);
        let made_up = missed.last().copied().filter(|_| !unsure);
        for w in occurrences {
            let at = w - skew;
            if !inside(at) || !clear(at) {
                continue;
            }
            let down = (crash..restart).contains(&at);
            let gid = format!("the occurrence at {w} (sim {at})");
            if !down && !fired.contains(&w) {
                wrong.push(format!("{}: no generation for {gid}, the home agent up", act.appl));
            }
            if down && Some(w) == made_up && !fired.contains(&w) {
                wrong.push(format!("{}: {gid}, missed while down, not made up at {restart}", act.appl));
            }
            if down && Some(w) != made_up && !unsure && fired.contains(&w) {
                wrong.push(format!("{}: {gid}, missed while down and not the latest, ran", act.appl));
            }
        }
        for event in &act.events {
            let t = sim(*event);
            let gids = by_event.get(&t).map_or(0, Vec::len);
            let up = inside(t) && clear(t) && !(crash..restart).contains(&t);
            if gids > 1 || (up && gids == 0) {
                wrong.push(format!("{}: the event at {t} started {gids} generations", act.appl));
            }
        }
    }

    /// Generations the home agents started by cron and event triggers, as the history
    /// stores keep their triggers: followed by the oracle as those an operator triggered.
    fn adopt_started(&mut self) {
        for (_, stamped) in &self.sim.stored {
            let p = &stamped.publication;
            let text = |a: &str| p.get(a).and_then(Value::as_str).map(str::to_owned);
            let (Some(appl), Some(gid), Some(date)) = (text("appl"), text("gid"), text("date")) else {
                continue;
            };
            if p.class() != "trigger" || !(gid.starts_with("cron-") || gid.starts_with("event-")) {
                continue;
            }
            let at = p.time().map_or(0, |t| u64::try_from(t.millis()).unwrap_or(0));
            let first = self.seen.triggered.entry((appl.clone(), gid.clone())).or_insert(at);
            *first = (*first).min(at);
            self.seen.dates.insert((appl, gid), date);
        }
    }

    /// Whether every generation triggered has ended, as the history stores say.
    fn all_ended(&mut self) -> bool {
        self.adopt_started();
        let ended: BTreeSet<(String, String)> = self
            .sim
            .stored
            .iter()
            .map(|(_, s)| &s.publication)
            .filter(|p| p.class() == "job_status" && p.get("job").and_then(Value::as_str) == Some(APPL_END))
            .filter_map(|p| Some((p.get("appl")?.as_str()?.to_owned(), p.get("gid")?.as_str()?.to_owned())))
            .collect();
        self.seen.triggered.keys().all(|g| ended.contains(g))
    }

    /// What the oracle says of the run: every violation, in words.
    fn check(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        let history = self.history();
        // Each generation as `padres workflow status` reads it from the history stores.
        let mut generations: BTreeMap<(String, String), Generation> = BTreeMap::new();
        for (_, stamped) in &self.sim.stored {
            let p = &stamped.publication;
            let Some(appl) = p.get("appl").and_then(Value::as_str) else { continue };
            if let Some(event) = StatusEvent::from_publication(appl, p) {
                generations.entry((appl.to_owned(), event.gid.clone())).or_default().record(event);
            }
        }
        // Final statuses as the history stores keep them, by (appl, gid, job): when.
        let mut finals: BTreeMap<&Key, u64> = BTreeMap::new();
        for (key, statuses) in &history {
            for (t, status, _, _) in statuses {
                if FINAL.contains(&status.as_str()) {
                    let first = finals.entry(key).or_insert(*t);
                    *first = (*first).min(*t);
                }
            }
        }
        for (key, attempts) in &self.seen.attempts {
            let (appl, gid, job) = key;
            let Some(app) = self.apps.iter().find(|a| &a.name == appl) else { continue };
            let Some(model) = app.jobs.iter().find(|j| &j.name == job) else { continue };
            let pooled = matches!(model.runner, padres_workflow::Runner::Pool(_));
            let numbers: Vec<u32> = attempts.iter().map(|(_, _, n)| *n).collect();
            let outcomes = self.seen.outcomes.get(key).cloned().unwrap_or_default();
            if pooled {
                // docs/pools.md: a pool job whose member died (its run killed with it) or
                // was cut off is dispatched again, from a higher attempt, to another member;
                // one cut off may still be running it, or have ended it unheard.
                if numbers.windows(2).any(|w| w[1] <= w[0]) {
                    wrong.push(format!(
                        "{key:?}: attempts {numbers:?} (a number used twice, or out of order)"
                    ));
                }
                for w in attempts.windows(2) {
                    let ((t0, a0, n0), (t1, a1, _)) = (w[0], w[1]);
                    let fault = self.seen.faults.iter().any(|t| (t0..=t1).contains(t));
                    if a0 != a1 && !fault {
                        wrong.push(format!(
                            "{key:?}: run again on another member at {t1} with no fault since {t0}"
                        ));
                    }
                    let succeeded = outcomes.iter().any(|(n, s)| *n == n0 && *s == "succeeded");
                    if succeeded && !fault {
                        wrong.push(format!(
                            "{key:?}: run again at {t1} after attempt {n0} succeeded, with no fault"
                        ));
                    }
                }
            } else {
                let expected: Vec<u32> = (1..=u32::try_from(numbers.len()).expect("few")).collect();
                if numbers != expected {
                    wrong
                        .push(format!("{key:?}: attempts {numbers:?} (ran more than once, or out of order)"));
                }
                let agents: BTreeSet<usize> = attempts.iter().map(|(_, a, _)| *a).collect();
                if agents.len() > 1 {
                    wrong.push(format!("{key:?}: run by more than one agent"));
                }
                if let Some(ok) = outcomes.iter().find(|(_, s)| *s == "succeeded")
                    && numbers.iter().any(|n| *n > ok.0)
                {
                    wrong.push(format!("{key:?}: an attempt after attempt {} succeeded", ok.0));
                }
            }
            // In dependency order: each predecessor's final status was out first.
            let started = attempts.first().map_or(0, |(t, _, _)| *t);
            let met = |dependency: &Dependency| -> bool {
                fn met(d: &Dependency, by: u64, statuses: &dyn Fn(&str) -> Vec<(u64, String)>) -> bool {
                    match d {
                        Dependency::After { job, status, .. } => statuses(job)
                            .iter()
                            .any(|(t, s)| *t <= by && status.statuses().contains(&s.as_str())),
                        Dependency::AnyOf(ds) => ds.iter().any(|d| met(d, by, statuses)),
                    }
                }
                let statuses = |job: &str| -> Vec<(u64, String)> {
                    let pkey = (appl.clone(), gid.clone(), job.to_owned());
                    history
                        .get(&pkey)
                        .map_or_else(Vec::new, |v| v.iter().map(|(t, s, _, _)| (*t, s.clone())).collect())
                };
                met(dependency, started, &statuses)
            };
            for dependency in &model.after {
                if !met(dependency) {
                    wrong.push(format!(
                        "{key:?} started at {started} before its dependency on {:?} was met",
                        dependency.jobs()
                    ));
                }
            }
            // As its calendar and run term say.
            let date = self.seen.dates.get(&(appl.clone(), gid.clone())).and_then(|d| d.parse().ok());
            if let Some(date) = date
                && !model.schedule.runs_on(date, &app.calendar)
            {
                wrong.push(format!("{key:?}: ran on {date}, which its run term does not select"));
            }
            // What `padres workflow status` reads from history agrees with what ran.
            let ran = outcomes.last().map(|(n, s)| (*n, *s));
            let state = generations.get(&(appl.clone(), gid.clone())).map(|g| g.state(job));
            match (state, ran) {
                (Some(State::Ended(e)), Some((number, outcome))) => {
                    let reason = e.reason.as_deref();
                    let bypassed = reason == Some("bypassed") && e.attempt == number + 1;
                    let interrupted = reason.is_some_and(|r| r.contains("the agent stopped"));
                    if !(bypassed || interrupted || (e.attempt == number && e.status == outcome)) {
                        wrong.push(format!(
                            "{key:?}: status reads {} (attempt {}), the run ended {outcome} (attempt {number})",
                            e.status, e.attempt
                        ));
                    }
                }
                (Some(state), Some((number, outcome))) => {
                    // Unless its last attempt still runs (caught below as a generation not
                    // ended), status shows the end.
                    let last = attempts.last().map_or(0, |(_, _, n)| *n);
                    if number == last {
                        wrong.push(format!(
                            "{key:?}: status reads {}, the run ended {outcome} (attempt {number})",
                            state.word()
                        ));
                    }
                }
                (_, None) => {}
                (None, Some(_)) => wrong.push(format!("{key:?}: ran, and nothing of it in history")),
            }
        }
        // A generation ends after all its jobs: each has an end in history (final, or
        // `failed`/`timeout`, which a successor waiting for `any` takes) no later than the
        // first of its `APPL_END`.
        let mut ends: BTreeMap<&Key, u64> = BTreeMap::new();
        for (key, statuses) in &history {
            for (t, status, _, _) in statuses {
                if status != "started" && status != "dispatched" {
                    let first = ends.entry(key).or_insert(*t);
                    *first = (*first).min(*t);
                }
            }
        }
        for ((appl, gid), generation) in &generations {
            let Some(app) = self.apps.iter().find(|a| &a.name == appl) else { continue };
            let end = (appl.clone(), gid.clone(), APPL_END.to_owned());
            let Some(ended) = finals.get(&end) else { continue };
            for job in &app.jobs {
                let key = (appl.clone(), gid.clone(), job.name.clone());
                match ends.get(&key) {
                    Some(t) if t <= ended => {}
                    other => wrong.push(format!(
                        "{appl}/{gid}: {APPL_END} at {ended}, before {} ended ({other:?}, {})",
                        job.name,
                        generation.state(&job.name).word()
                    )),
                }
            }
        }
        // A job its run term does not select on the generation's day is skipped, not run.
        for ((appl, gid), date) in &self.seen.dates {
            let (Some(app), Ok(date)) = (self.apps.iter().find(|a| &a.name == appl), date.parse()) else {
                continue;
            };
            let Some(generation) = generations.get(&(appl.clone(), gid.clone())) else { continue };
            for job in &app.jobs {
                let selected = job.schedule.runs_on(date, &app.calendar);
                if let State::Ended(e) = generation.state(&job.name)
                    && e.status == "skipped"
                    && e.reason.is_none()
                    && selected
                {
                    wrong.push(format!(
                        "{appl}/{gid}/{}: skipped on {date}, which its run term selects",
                        job.name
                    ));
                }
            }
        }
        for ((appl, gid), at) in &self.seen.triggered {
            let end = (appl.clone(), gid.clone(), APPL_END.to_owned());
            if !finals.contains_key(&end) {
                let app = self.apps.iter().find(|a| &a.name == appl);
                let open: Vec<String> = app
                    .map(|app| {
                        app.jobs
                            .iter()
                            .filter(|j| !finals.contains_key(&(appl.clone(), gid.clone(), j.name.clone())))
                            .map(|j| {
                                let key = (appl.clone(), gid.clone(), j.name.clone());
                                let ran = self.seen.attempts.get(&key).map_or(0, Vec::len);
                                format!("{} ({ran} attempts)", j.name)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                wrong.push(format!(
                    "{appl}/{gid} (triggered at {at}) never ended: no {APPL_END}; no final status of {}",
                    open.join(", ")
                ));
            }
            let start = (appl.clone(), gid.clone(), APPL_START.to_owned());
            if !finals.contains_key(&start) {
                wrong.push(format!("{appl}/{gid}: no {APPL_START}"));
            }
        }
        self.check_act(&mut wrong);
        wrong
    }
}

/// Version `version` of application `xml`, with `triggers` (elements) for the triggers
/// it had.
fn versioned(xml: &str, version: u32, triggers: &str) -> String {
    let xml = xml.replacen("version=\"1\"", &format!("version=\"{version}\""), 1);
    let mut xml: String =
        xml.lines().filter(|l| !l.trim_start().starts_with("<trigger")).map(|l| format!("{l}\n")).collect();
    let opening = xml.find("<application").expect("an application");
    let end = opening + xml[opening..].find('>').expect("its tag ends") + 1;
    xml.insert_str(end, triggers);
    xml
}

/// A random application: `jobs` jobs on `agents`, each after up to three earlier ones.
fn random_dag(rng: &mut fastrand::Rng, jobs: usize, agents: &[String]) -> String {
    let mut xml = String::from(
        "<application name=\"dag\" version=\"1\" tz=\"UTC\" max-generations=\"2\">\n<defaults retries=\"1\" backoff=\"PT1S\"/>\n",
    );
    for j in 0..jobs {
        let agent = &agents[rng.usize(0..agents.len())];
        xml.push_str(&format!("<job name=\"J{j}\" run=\"daily\" agent=\"{agent}\"><command>true</command>"));
        if j > 0 {
            let mut preds = BTreeSet::new();
            for _ in 0..rng.usize(0..=3.min(j)) {
                preds.insert(rng.usize(0..j));
            }
            for p in preds {
                xml.push_str(&format!("<after job=\"J{p}\"/>"));
            }
        }
        xml.push_str("</job>\n");
    }
    xml.push_str("</application>\n");
    xml
}

/// What the seeds exercised, summed: the vacuity guard's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Exercised {
    generations: u64,
    attempts: u64,
    agent_crashes: u64,
    broker_restarts: u64,
    links_down: u64,
    /// Agents whose broker restarted under them (their sessions lost).
    sessions_lost: u64,
    bypassed: u64,
    /// Pool jobs run again on another member.
    redispatched: u64,
    /// Generations started by cron and by event triggers.
    cron_generations: u64,
    event_generations: u64,
}

impl std::ops::AddAssign for Exercised {
    fn add_assign(&mut self, o: Self) {
        self.generations += o.generations;
        self.attempts += o.attempts;
        self.agent_crashes += o.agent_crashes;
        self.broker_restarts += o.broker_restarts;
        self.links_down += o.links_down;
        self.sessions_lost += o.sessions_lost;
        self.bypassed += o.bypassed;
        self.redispatched += o.redispatched;
        self.cron_generations += o.cron_generations;
        self.event_generations += o.event_generations;
    }
}

/// One seed: an application (payroll, month-end, or a random DAG), a few generations,
/// faults as the seed says; the oracle's violations, and what it exercised.
fn run_seed(seed: u64) -> (Vec<String>, Exercised, u64) {
    let mut exercised = Exercised::default();
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
    // Two in five payroll (small, quick), one month-end, two random DAGs.
    let shape = [0, 0, 1, 2, 2][usize::try_from(seed % 5).expect("small")];
    let (xml, names, appl): (String, Vec<String>, &str) = match shape {
        0 => (
            padres_workflow::examples::PAYROLL.to_owned(),
            ["agent-1", "agent-2", "agent-3"].map(str::to_owned).to_vec(),
            "payroll",
        ),
        1 => (
            padres_workflow::examples::MONTH_END.to_owned(),
            ["etl-1", "etl-2", "etl-3", "reports", "ledger-1", "ledger-2"].map(str::to_owned).to_vec(),
            "month-end",
        ),
        _ => {
            let names: Vec<String> = (1..=rng.usize(2..=5)).map(|i| format!("agent-{i}")).collect();
            let jobs = rng.usize(5..=60);
            (random_dag(&mut rng, jobs, &names), names, "dag")
        }
    };
    let brokers = rng.usize(3..=6);
    let mut world = World::new(seed, brokers, &names);
    world.run_until(START_MS + 1_000);
    world.deploy(&xml);
    world.run_until(START_MS + 3_000);
    let generations = rng.usize(1..=3);
    let dates = ["2026-11-27", "2026-11-30", "2026-12-24", "2026-12-31"];
    for g in 0..generations {
        let date = dates[rng.usize(0..dates.len())];
        world.trigger(appl, &format!("g{g}"), date);
        world.run_until(world.sim.now() + rng.u64(0..=1500));
    }
    // Faults while the generations run.
    let agent_brokers: BTreeSet<usize> = world.agents.iter().map(|a| a.broker).chain([0]).collect();
    for _ in 0..rng.usize(0..=3) {
        world.run_until(world.sim.now() + rng.u64(0..=4000));
        match rng.usize(0..3) {
            0 => {
                // A broker no agent uses restarts (its tables empty, its links back).
                let free: Vec<usize> = (0..brokers).filter(|b| !agent_brokers.contains(b)).collect();
                if !free.is_empty() {
                    let b = free[rng.usize(0..free.len())];
                    log!(world, "B{} restarts", b + 1);
                    exercised.broker_restarts += 1;
                    world.sim.restart(b);
                    // With its configuration and its store, as a broker restarts.
                    world.sim.keep_history(b, "[class,eq,'trigger']");
                    world.sim.keep_history(b, "[class,eq,'job_status']");
                }
            }
            1 => {
                // Half the time, a pool member (when there are some): its jobs go elsewhere.
                let members: Vec<usize> =
                    (0..world.agents.len()).filter(|a| world.agents[*a].name.starts_with("ledger")).collect();
                let a = if !members.is_empty() && rng.bool() {
                    members[rng.usize(0..members.len())]
                } else {
                    rng.usize(0..world.agents.len())
                };
                exercised.agent_crashes += 1;
                world.crash(a);
                world.run_until(world.sim.now() + rng.u64(100..=5000));
                world.start(a);
            }
            _ => {
                // A link down for a while, then back (with the latency it had).
                let b = rng.usize(1..brokers);
                if let Some(p) = world.parent[b] {
                    log!(world, "B{}-B{} down", p + 1, b + 1);
                    world.seen.faults.push(world.sim.now());
                    exercised.links_down += 1;
                    world.sim.unlink(p, b);
                    world.run_until(world.sim.now() + rng.u64(100..=3000));
                    world.sim.link(p, b, 3);
                }
            }
        }
    }
    // A third of the seeds also restart a broker agents are connected to (not the
    // operator's): their sessions are lost, what they awaited fails, and their clients
    // reconnect and issue again what they had issued (drawn apart, so that the faults
    // above stay as the seed had them).
    let mut more = fastrand::Rng::with_seed(seed ^ 0xc1e7);
    let with_agents: Vec<usize> =
        (1..brokers).filter(|b| world.agents.iter().any(|a| a.broker == *b)).collect();
    if more.usize(0..3) == 0 && !with_agents.is_empty() {
        world.run_until(world.sim.now() + more.u64(0..=3000));
        let b = with_agents[more.usize(0..with_agents.len())];
        let here: Vec<usize> = (0..world.agents.len()).filter(|a| world.agents[*a].broker == b).collect();
        log!(world, "B{} restarts under {} agents", b + 1, here.len());
        world.seen.faults.push(world.sim.now());
        for a in &here {
            exercised.sessions_lost += 1;
            world.session_lost(*a);
        }
        world.sim.restart(b);
        world.sim.keep_history(b, "[class,eq,'trigger']");
        world.sim.keep_history(b, "[class,eq,'job_status']");
        world.run_until(world.sim.now() + more.u64(50..=2000));
        for a in here {
            world.reconnect(a);
        }
    }
    world.quiet();
    // A third of the payroll seeds play a second act, with cron and event triggers (drawn
    // apart, so that the first act stays as the seed had it; payroll, the smallest, keeps
    // the suite within its minute).
    let mut act = fastrand::Rng::with_seed(seed ^ 0xac7);
    if shape == 0 && act.usize(0..3) == 0 {
        world.second_act(&xml, &mut act);
        world.quiet();
    }
    exercised.generations = world.seen.triggered.len() as u64;
    exercised.attempts = world.seen.attempts.values().map(|a| a.len() as u64).sum();
    exercised.bypassed = world.seen.bypassed.len() as u64;
    exercised.redispatched = world
        .seen
        .attempts
        .values()
        .filter(|a| a.iter().map(|(_, agent, _)| agent).collect::<BTreeSet<_>>().len() > 1)
        .count() as u64;
    exercised.cron_generations =
        world.seen.triggered.keys().filter(|(_, g)| g.starts_with("cron-")).count() as u64;
    exercised.event_generations =
        world.seen.triggered.keys().filter(|(_, g)| g.starts_with("event-")).count() as u64;
    (world.check(), exercised, world.digest())
}

/// The seeds to run: `AGENT_SEED`, `AGENT_SEEDS`, or the suite's.
fn seeds() -> Vec<u64> {
    match (std::env::var("AGENT_SEED"), std::env::var("AGENT_SEEDS")) {
        (Ok(seed), _) => {
            // The agents' own logs too.
            let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).without_time().try_init();
            vec![seed.parse().expect("AGENT_SEED=n")]
        }
        (_, Ok(range)) => {
            let (a, b) = range.split_once("..").expect("AGENT_SEEDS=A..B");
            (a.parse().expect("A")..b.parse().expect("B")).collect()
        }
        // Seeds that find the bugs the simulation found are among these (they fail with
        // the fix taken out): 73, 89, 139 (a start held back by max-generations was lost
        // with its home agent's restart), 232, 967 (a pool job's dispatch lost with a link
        // that failed for good was never sent again).
        _ => (0..SUITE_SEEDS).collect(),
    }
}

/// Seeds in every `cargo test` run.
const SUITE_SEEDS: u64 = 1000;

/// Runs `seeds` on as many threads as the machine has cores; the failed seeds with their
/// violations, and what they exercised.
fn run_seeds(seeds: &[u64]) -> (Vec<(u64, Vec<String>)>, Exercised) {
    let threads =
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(seeds.len().max(1));
    let results = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut failed = Vec::new();
                    let mut exercised = Exercised::default();
                    for seed in seeds.iter().skip(t).step_by(threads) {
                        let started = std::time::Instant::now();
                        let (wrong, seen, _) = run_seed(*seed);
                        if std::env::var_os("AGENT_TIMES").is_some() {
                            eprintln!("seed {seed}: {:?}", started.elapsed());
                        }
                        exercised += seen;
                        if !wrong.is_empty() {
                            failed.push((*seed, wrong));
                        }
                    }
                    (failed, exercised)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a worker")).collect::<Vec<_>>()
    });
    let mut failed = Vec::new();
    let mut exercised = Exercised::default();
    for (f, e) in results {
        failed.extend(f);
        exercised += e;
    }
    failed.sort();
    (failed, exercised)
}

#[test]
fn workflows_run_once_in_order_and_end_whatever_the_faults() {
    let seeds = seeds();
    let (failed, exercised) = run_seeds(&seeds);
    for (seed, wrong) in &failed {
        eprintln!("seed {seed}:\n  {}", wrong.join("\n  "));
    }
    let failed: Vec<u64> = failed.iter().map(|(seed, _)| *seed).collect();
    assert!(failed.is_empty(), "seeds {failed:?} failed (AGENT_SEED=n replays one with a trace)");
    eprintln!("{} seeds: {exercised:?}", seeds.len());
    // Not vacuous: the suite's seeds ran jobs through every kind of fault the harness has.
    if seeds.len() >= 100 {
        let e = exercised;
        assert!(e.generations >= seeds.len() as u64 && e.attempts > 10 * seeds.len() as u64, "{e:?}");
        for (what, n) in [
            ("agent crashes", e.agent_crashes),
            ("broker restarts", e.broker_restarts),
            ("links down", e.links_down),
            ("agents' sessions lost", e.sessions_lost),
            ("jobs bypassed after failing", e.bypassed),
            ("pool jobs run again on another member", e.redispatched),
            ("generations started by cron", e.cron_generations),
            ("generations started by events", e.event_generations),
        ] {
            assert!(n > 0, "no {what} in {} seeds: {e:?}", seeds.len());
        }
    }
}

#[test]
fn a_seed_replays_input_for_input() {
    // A month-end seed with a pool member crashing: its jobs dispatched again.
    let runs: Vec<u64> = (0..2).map(|_| with_digest(|| run_seed(197).2)).collect();
    assert_ne!(runs[0], 0);
    assert_eq!(runs[0], runs[1], "seed 197 ran differently twice");
}

/// Runs `f` with every agent's inputs and outputs digested.
fn with_digest(f: impl FnOnce() -> u64) -> u64 {
    DIGEST.with(|d| d.set(true));
    let digest = f();
    DIGEST.with(|d| d.set(false));
    digest
}

thread_local! {
    /// Whether worlds made on this thread digest their agents' inputs and outputs.
    static DIGEST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
