//! The agent's loop: commands from `agent_ctl`, jobs run when their dependencies match,
//! `job_status` published (DESIGN §8, the PADRES paper §4).
//!
//! The agent subscribes to `agent_ctl` publications for its name and answers each command
//! with an `agent_reply` ([`padres_workflow::control`]):
//! - `deploy` carries an [`EnvelopeBody`]: for each job, the agent advertises its
//!   `job_status` and issues its composite dependency subscription (the generation's
//!   trigger and its predecessors' statuses, joined on the generation id, ended by the
//!   generation's `APPL_END`). A deploy of the body deployed already is answered and changes
//!   nothing; another body for the application replaces it. Deployments are kept in the
//!   journal and deployed again when the agent restarts.
//! - `undeploy` withdraws the application.
//! - `trigger` (to the home agent, the one running `APPL_START`, which advertises the
//!   application's triggers for as long as it is deployed) publishes a generation's trigger.
//! - `rerun` runs a job of a generation that failed or timed out again (its attempts
//!   numbered on from the last); `bypass` publishes it `succeeded`, as the attempt after its
//!   last, with the reason `bypassed`, without running it, so its successors proceed.
//!
//! A match of a job's dependency carries the generation's trigger, so its `gid` and
//! `date`. The agent claims the job for that generation in its [`Journal`] (a job runs at
//! most once per generation, however often it is notified, across restarts too) and:
//! - for the virtual jobs (`APPL_START`, `APPL_END`) publishes `succeeded` at once, and
//!   after `APPL_END` forgets the generation;
//! - for a job its run term does not select on the generation's date publishes `skipped`
//!   (which satisfies its successors, DESIGN §8);
//! - (on a match of the job's `unless` subscription, a predecessor's final status refusing
//!   it, reads the generation's statuses and publishes it `skipped` once every other
//!   dependency is decided: [`padres_workflow::progress::Generation::cannot_run`])
//! - else runs it ([`crate::job`]), at most `max_parallel` at once, publishing `started` for
//!   each attempt and then its outcome (`succeeded`, `failed` or `timeout`, with `exit`,
//!   `attempt` and, when the process did not say, a `reason`).
//!
//! Statuses and replies are published in the order they happen, by one task, each
//! acknowledged by the broker (up to 64 written ahead of their acknowledgements): one that
//! cannot be sent (the broker is away) is sent again until it is taken, so a broker
//! restart loses none (load reports and provisioning advice, stale by then, are dropped
//! instead: the next report replaces them). One the broker refuses (its
//! advertisement withdrawn meanwhile, by an undeploy while the job ran) is logged and
//! dropped. A job found running in the journal
//! when the agent starts (it stopped while the job ran) is published `failed` with exit -1
//! and the reason: its outcome is unknown, and it is not run again.
//!
//! The home agent of an application (the one running `APPL_START`) starts its generations:
//! on an operator's `trigger`, on each of its cron triggers ([`crate::trigger`]: in the
//! application's time zone, with the run missed while it was down made up once), and on
//! each publication matching one of its event triggers. It holds a trigger back while the
//! application's `max-generations` generations run (started here, their `APPL_END` not
//! yet run), and publishes it when one ends. Those decisions are `agent/starts.rs`'s, a sans-IO
//! state machine tested in virtual time; the loop hands it the wall-clock time and wakes
//! it at its next cron occurrence.
//!
//! Statuses and triggers wait in the journal's outbox until the broker has taken them: an
//! agent stopped while its broker was away sends them when it starts again (before
//! anything else).
//!
//! # Catching up
//! A dependency's partial matches live at the brokers that detect it: a broker that
//! restarts loses them, a pattern moved elsewhere starts without them, and a status that
//! was on its way through a broker that crashed is lost to the detectors beyond it. So
//! that a generation does not wait for ever after such a fault, each agent also follows
//! its applications' generations: it subscribes to their triggers and to their `APPL_END`
//! statuses (from an hour before the application was deployed here, stored ones first),
//! and keeps the generations it has seen start and not end. Every [`Options::catch_up`]
//! (doubling to [`CATCH_UP_MOST`] times that while nothing new is found), for each such
//! generation in which one of its jobs has not run, it reads the generation's statuses
//! from the brokers' history stores and runs each of its jobs whose dependencies those
//! statuses meet, as if the dependency had matched (the journal keeps it to once). A
//! generation triggered more than [`CATCH_UP_HORIZON`] ago is not followed. Without a
//! history store keeping `trigger` and `job_status`, there is nothing to catch up from.
//! When each generation is read is decided by `agent/catch_up.rs`, sans-IO and tested in
//! virtual time; the loop makes the reads.
//!
//! An ended generation (its `APPL_END` seen, live or from history) is forgotten by every
//! agent, leaving a mark in the journal so that nothing of it runs again.
//!
//! # Versions
//! Each trigger names the version of the definition it starts (the home agent's), and a
//! job's dependency takes only triggers of its own version. A new version deployed here
//! replaces the old one for new generations; the old one stays deployed (without its
//! cron and event triggers) while generations seen started on it have not ended, and at
//! least [`RETIRE_GRACE`], then is withdrawn.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::NaiveDate;
use tokio::sync::mpsc;

use padres_client::{Client, ClientError, Notification};
use padres_lang::{MessageId, Publication, Value};
use padres_workflow::calendar::parse_weekdays;
use padres_workflow::control::{
    Command, Control, Reply, control_subscription, reply_advertisement, trigger_advertisement,
};
use padres_workflow::progress::{Generation, State, StatusEvent};
use padres_workflow::translate::{Need, status_advertisement};
use padres_workflow::{
    APPL_END, APPL_START, Calendar, EnvelopeBody, HolidayRule, JobInfo, RunTerm, Schedule, TriggerSpec,
};

use crate::job::{DEFAULT_OUTPUT_CAP, Run};
use crate::journal::{Claim, Journal, Store as _};
use crate::pool::{MemberState, Members};
use crate::trigger::{CronTrigger, now};

mod catch_up;
mod outbox;
mod pools;
mod runs;
mod starts;
use catch_up::Following;
use outbox::{Outbox, Outgoing, Queued, Status, publish_in_order};
use pools::Dispatch;
use runs::Runs;
use starts::{Starts, Step};

/// How an agent runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Its name: the `agent` of the `agent_ctl` publications it takes and of the
    /// `job_status` it publishes.
    pub name: String,
    /// Its work directory: the journal, the jobs' output, relative working directories.
    pub work_dir: PathBuf,
    /// Most jobs running at once.
    pub max_parallel: usize,
    /// How long after seeing a generation start the agent first checks the history stores
    /// for jobs of its own whose dependencies are met without it having been told
    /// (see the module docs); zero does not check.
    pub catch_up: Duration,
    /// The pools it is a member of (it runs their jobs when a home agent dispatches them
    /// here).
    pub pools: Vec<String>,
    /// How often it publishes its load ([`crate::pool`]).
    pub load_period: Duration,
    /// Load reports a pool member may miss before the home agents that dispatch to it
    /// consider it gone (and dispatch its jobs again).
    pub silence: u32,
    /// The jobs it reports it can hold, running and queued, before home agents stop
    /// giving it pool jobs; `None`: `max_parallel`.
    pub capacity: Option<usize>,
    /// A pool this agent watches, advising it to grow or shrink ([`crate::pool::Provisioning`]).
    pub provision: Option<crate::pool::Provisioning>,
}

impl Options {
    /// The options of agent `name` working in `work_dir`, every other one at its default:
    /// 8 jobs at once, catching up after [`CATCH_UP`], in no pool, load reported every
    /// [`crate::pool::LOAD_PERIOD`].
    pub fn new(name: &str, work_dir: PathBuf) -> Self {
        Self {
            name: name.to_owned(),
            work_dir,
            max_parallel: 8,
            catch_up: CATCH_UP,
            pools: Vec::new(),
            load_period: crate::pool::LOAD_PERIOD,
            silence: crate::pool::SILENCE,
            capacity: None,
            provision: None,
        }
    }
}

/// The default of [`Options::catch_up`].
pub const CATCH_UP: Duration = Duration::from_secs(10);

/// The longest wait between two checks of one generation, in multiples of
/// [`Options::catch_up`].
pub const CATCH_UP_MOST: u32 = 32;

/// The wait before checking a generation again after catching up in it (at most
/// [`Options::catch_up`]).
pub const CATCH_UP_AGAIN: Duration = Duration::from_secs(2);

/// How long before its deployment here an agent follows an application's generations
/// (one hour): those started on this version elsewhere before it got it.
const FOLLOW_BEFORE_MS: i64 = 3_600_000;

/// Generations triggered longer ago than this are not followed: 7 days.
pub const CATCH_UP_HORIZON: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The broker refused a message or the connection is gone.
    #[error("broker: {0}")]
    Broker(#[from] ClientError),
    /// The journal cannot be read or written.
    #[error("journal: {0}")]
    Journal(#[from] crate::journal::JournalError),
    /// The work directory cannot be created.
    #[error("work directory {0}: {1}")]
    WorkDir(PathBuf, std::io::Error),
}

/// A job deployed here.
#[derive(Debug)]
struct Deployed {
    appl: String,
    job: String,
    /// `None` for a virtual job.
    info: Option<Arc<JobInfo>>,
    schedule: Option<Schedule>,
    calendar: Arc<Calendar>,
    /// What it waits for, for catching up.
    after: Vec<Need>,
    /// For a pool job: its pool (this agent, the home, dispatches it).
    pool: Option<padres_workflow::model::PoolSpec>,
}

/// An application deployed here: what it was deployed from, its subscriptions (by job)
/// and advertisements.
#[derive(Debug)]
struct Application {
    body: EnvelopeBody,
    /// Whether this is its home agent (it runs `APPL_START` and publishes its triggers).
    home: bool,
    subscriptions: HashMap<String, MessageId>,
    advertisements: Vec<MessageId>,
    /// Its event triggers' subscriptions (home agent).
    events: Vec<MessageId>,
    /// The subscriptions following its generations: their triggers and ends.
    follows: Vec<MessageId>,
    /// Its jobs' `unless` subscriptions (when a job can no longer run).
    unless: Vec<MessageId>,
    /// When a newer version replaced it (it is kept while its generations run).
    replaced: Option<tokio::time::Instant>,
    /// The statuses of its pool jobs (those this home agent dispatches), if it has any.
    pool_statuses: Option<MessageId>,
}

impl Application {
    /// Every subscription it made.
    fn all_subscriptions(&self) -> Vec<MessageId> {
        let subs = self.subscriptions.values().chain(&self.events).chain(&self.follows);
        subs.chain(&self.unless).chain(&self.pool_statuses).cloned().collect()
    }
}

/// A check of one generation's statuses in the history stores (a historic subscription
/// reaching up to when it was made).
#[derive(Debug)]
struct Check {
    appl: String,
    gid: String,
    generation: Generation,
    started: tokio::time::Instant,
}

/// How long a replaced version is kept at least, for generations other agents (the home
/// agent, not yet given the new version) start on it meanwhile.
pub const RETIRE_GRACE: Duration = Duration::from_secs(120);

/// A check not answered in this long is dropped and made again.
const CHECK_LONGEST: Duration = Duration::from_secs(60);

/// What the agent's own tasks tell its loop.
#[derive(Debug)]
enum Internal {
    /// The broker refused generation `gid`'s trigger: it never started.
    Refused { appl: String, gid: String },
    /// Attempt `number` of job `key` ended.
    AttemptEnded { key: (String, String, String), number: u32, outcome: runs::Outcome },
}

/// The time, as the driver hands it in with each input: its monotonic clock, and the
/// wall clock (epoch milliseconds).
#[derive(Clone, Copy, Debug)]
struct Now {
    at: tokio::time::Instant,
    wall_ms: i64,
}

impl Now {
    /// Read from the clocks (the driver's part).
    fn read() -> Self {
        Self { at: tokio::time::Instant::now(), wall_ms: now().timestamp_millis() }
    }

    fn wall(self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_millis(self.wall_ms).unwrap_or_default()
    }
}

/// What the agent asks of its driver.
#[derive(Debug)]
enum Output {
    /// Run attempt `number` of job `key`; its end comes back as [`Internal::AttemptEnded`].
    Attempt {
        key: (String, String, String),
        info: Arc<JobInfo>,
        date: String,
        number: u32,
        die_with_agent: bool,
    },
}

struct Agent {
    options: Options,
    client: Arc<Client>,
    journal: Arc<Mutex<Journal>>,
    jobs: HashMap<MessageId, Deployed>,
    applications: HashMap<String, Application>,
    /// (appl, gid, job) running now (claimed and not ended, or acted on by an operator).
    running: HashSet<(String, String, String)>,
    /// The job runs ordered: at most `max_parallel` at once, with their retries.
    runs: Runs,
    /// The time now, as the driver handed it in.
    now: Now,
    /// What the driver is to do, in order.
    out: VecDeque<Output>,
    outgoing: Outbox,
    /// Event trigger subscriptions, to their application.
    event_subs: HashMap<MessageId, String>,
    /// Generation starts of the applications this agent is home to: manual, cron and
    /// event triggers, held to `max-generations`.
    starts: Starts,
    /// What `starts` decided during a deploy, for the loop to carry out next.
    later: Vec<Step>,
    /// The subscriptions following generations, to their application.
    follows: HashMap<MessageId, String>,
    /// The generations followed, and when each is read from the history stores next.
    following: Following,
    /// The origin of the agent's monotonic milliseconds ([`Agent::clock`]).
    epoch: tokio::time::Instant,
    /// Checks running, by their subscription.
    checks: HashMap<MessageId, Check>,
    /// Jobs' `unless` subscriptions, to the job's dependency subscription.
    unless: HashMap<MessageId, MessageId>,
    /// Earlier versions of applications, kept while generations started on them run.
    retiring: HashMap<String, Vec<Application>>,
    /// When this run of the agent started (epoch milliseconds): its incarnation as a pool
    /// member.
    incarnation: i64,
    /// Up, or leaving (drained).
    state: MemberState,
    /// As a pool member: its subscription to the jobs dispatched to it.
    assignments: Option<MessageId>,
    /// As a pool member: the jobs whose status it has advertised.
    advertised: HashSet<(String, String)>,
    /// As a home agent: the members of the pools it dispatches to, from their reports.
    members: Members,
    /// Its subscriptions to pools' load reports, by pool, and when each was made.
    pool_loads: HashMap<String, (MessageId, tokio::time::Instant)>,
    /// Its subscriptions to applications' pool job statuses, to their application.
    pool_statuses: HashMap<MessageId, String>,
    /// Pool jobs dispatched from here and not ended, by (appl, gid, job).
    dispatches: HashMap<(String, String, String), Dispatch>,
    /// Pool jobs waiting for a member with room, in order.
    admission: VecDeque<(String, String, String)>,
    /// The pool it advises, if any.
    provisioner: Option<crate::pool::Provisioner>,
}

/// Serves as agent `options.name` over `client` until its connection ends for good.
///
/// # Errors
/// The broker refused the agent's own subscription, or the journal cannot be opened.
pub async fn serve(mut client: Client, options: Options) -> Result<(), AgentError> {
    std::fs::create_dir_all(&options.work_dir)
        .map_err(|e| AgentError::WorkDir(options.work_dir.clone(), e))?;
    let journal = Journal::open(&options.work_dir)?;
    // Notifications are taken off the connection by a task of their own into an unbounded
    // queue: the loop below waits for the broker's answers to its own requests, which the
    // connection could not read while its bounded queue of notifications were full.
    let mut from_broker = client.take_notifications();
    let (forward, mut notifications) = mpsc::unbounded_channel::<Notification>();
    tokio::spawn(async move {
        while let Some(notification) = from_broker.next().await {
            if forward.send(notification).is_err() {
                break;
            }
        }
    });
    let client = Arc::new(client);
    let (queue, to_publish) = mpsc::unbounded_channel::<Queued>();
    let journal = Arc::new(Mutex::new(journal));
    let (internal, mut from_tasks) = mpsc::unbounded_channel::<Internal>();
    let outgoing =
        Outbox { agent: options.name.clone(), journal: journal.clone(), queue, refused: internal.clone() };

    let publisher =
        tokio::spawn(publish_in_order(client.clone(), journal.clone(), internal.clone(), to_publish));
    let following = Following::new(options.catch_up);
    let start = Now::read();
    let mut agent = Agent {
        runs: Runs::new(options.max_parallel),
        options,
        client,
        journal,
        jobs: HashMap::new(),
        applications: HashMap::new(),
        running: HashSet::new(),
        now: start,
        out: VecDeque::new(),
        outgoing,
        event_subs: HashMap::new(),
        starts: Starts::default(),
        later: Vec::new(),
        follows: HashMap::new(),
        following,
        epoch: start.at,
        checks: HashMap::new(),
        unless: HashMap::new(),
        retiring: HashMap::new(),
        incarnation: start.wall_ms,
        state: MemberState::Up,
        assignments: None,
        advertised: HashSet::new(),
        members: Members::default(),
        pool_loads: HashMap::new(),
        pool_statuses: HashMap::new(),
        dispatches: HashMap::new(),
        admission: VecDeque::new(),
        provisioner: None,
    };
    agent.client.advertise(reply_advertisement(&agent.options.name)).await?;
    agent.join().await?;
    agent.restore().await?;
    agent.restore_dispatches();
    // What was waiting to be sent when the agent last stopped goes first, once the
    // deployments are advertised again.
    let pending = agent.outgoing.journal().outbox_pending()?;
    if !pending.is_empty() {
        tracing::info!(
            "{} statuses and triggers not sent before the agent stopped: sending them",
            pending.len()
        );
    }
    for (seq, text) in pending {
        match text.parse::<Publication>() {
            Ok(publication) => {
                let what = format!("a publication kept from before the restart ({publication})");
                let _ = agent.outgoing.queue.send(Queued {
                    seq: Some(seq),
                    publication,
                    what,
                    if_refused: None,
                    now_or_never: false,
                });
            }
            Err(e) => tracing::error!("the outbox holds an unreadable publication {text}: {e}"),
        }
    }
    agent.report_interrupted().await?;
    agent.client.send(&control_subscription(&agent.options.name)).await?;
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut load_ticks = tokio::time::interval(agent.options.load_period.max(Duration::from_millis(10)));
    load_ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A notification taken while gathering a batch of matches, handled next.
    let mut deferred = None;
    let driver = Driver { internal, work_dir: agent.options.work_dir.clone() };
    loop {
        let later = std::mem::take(&mut agent.later);
        agent.carry_out(later);
        driver.carry_out(&mut agent);
        let event = tokio::select! {
            notification = async { match deferred.take() { Some(n) => Some(n), None => notifications.recv().await } } => Event::Notification(notification),
            _ = ticks.tick() => Event::Tick,
            () = until(agent.starts.poll_timeout()) => Event::Cron,
            () = until_instant(agent.runs.poll_timeout()) => Event::Retry,
            _ = load_ticks.tick() => Event::Load,
            Some(internal) = from_tasks.recv() => Event::Internal(internal),
        };
        agent.now = Now::read();
        let notification = match event {
            Event::Notification(notification) => notification,
            Event::Tick => {
                agent.check_due().await;
                continue;
            }
            Event::Cron => {
                let mut steps = Vec::new();
                agent.starts.handle_timeout(agent.now.wall(), &mut steps);
                agent.carry_out(steps);
                continue;
            }
            Event::Retry => {
                agent.runs.handle_timeout(agent.now.at);
                agent.run_steps();
                continue;
            }
            Event::Load => {
                if agent.pool_tick(notifications.is_empty()) {
                    tracing::info!("drained: every job it had has ended; leaving");
                    break;
                }
                continue;
            }
            Event::Internal(internal) => {
                agent.internal(internal);
                continue;
            }
        };
        let Some(notification) = notification else { break };
        match notification {
            Notification::Publication { subs, publication } => {
                let mut applications: Vec<String> =
                    subs.iter().filter_map(|s| agent.event_subs.get(s)).cloned().collect();
                applications.dedup();
                for appl in &applications {
                    agent.event(appl, &publication);
                }
                let mut others = false;
                for sub in &subs {
                    if agent.pool_loads.values().any(|(id, _)| id == sub) {
                        agent.load_report(&publication);
                    } else if let Some(appl) = agent.pool_statuses.get(sub).cloned() {
                        agent.pool_status(&appl, &publication);
                    } else if agent.assignments.as_ref() == Some(sub) {
                        agent.assigned(&publication).await;
                    } else if let Some(appl) = agent.follows.get(sub).cloned() {
                        agent.follow(&appl, &publication);
                    } else if let Some(check) = agent.checks.get_mut(sub) {
                        if let Some(event) = StatusEvent::from_publication(&check.appl, &publication) {
                            check.generation.record(event);
                        }
                    } else if !agent.event_subs.contains_key(sub) && publication.class() == "agent_ctl" {
                        // (A publication of a subscription just withdrawn is let go.)
                        others = true;
                    }
                }
                if others {
                    agent.control(&publication).await;
                }
            }
            Notification::Composite { sub, pubs } => {
                // The matches that have come, claimed together: one wait for the disk.
                let mut batch = vec![(sub, pubs)];
                while batch.len() < CLAIM_BATCH {
                    match notifications.try_recv().ok() {
                        Some(Notification::Composite { sub, pubs }) => batch.push((sub, pubs)),
                        other => {
                            deferred = other;
                            break;
                        }
                    }
                }
                agent.matches(batch);
            }
            Notification::EndOfHistory { sub, missing, .. } => agent.checked(&sub, missing.is_empty()).await,
        }
    }
    // The jobs running (or waiting for a slot) finish, and their ends are recorded and
    // queued to publish, before the agent stops.
    while !agent.runs.is_idle() {
        driver.carry_out(&mut agent);
        let event = tokio::select! {
            () = until_instant(agent.runs.poll_timeout()) => Event::Retry,
            Some(internal) = from_tasks.recv() => Event::Internal(internal),
        };
        agent.now = Now::read();
        match event {
            Event::Retry => {
                agent.runs.handle_timeout(agent.now.at);
                agent.run_steps();
            }
            Event::Internal(internal) => agent.internal(internal),
            _ => {}
        }
    }
    driver.carry_out(&mut agent);
    drop(agent);
    let _ = publisher.await;
    Ok(())
}

/// What woke the agent's loop.
enum Event {
    /// From the broker (`None`: the connection has ended for good).
    Notification(Option<Notification>),
    /// The second's tick: catching up is checked.
    Tick,
    /// A cron occurrence is due.
    Cron,
    /// A job's retry is due.
    Retry,
    /// The load period's tick.
    Load,
    /// One of the agent's tasks.
    Internal(Internal),
}

/// Carries out the agent's outputs.
struct Driver {
    internal: mpsc::UnboundedSender<Internal>,
    work_dir: PathBuf,
}

impl Driver {
    fn carry_out(&self, agent: &mut Agent) {
        while let Some(output) = agent.out.pop_front() {
            match output {
                Output::Attempt { key, info, date, number, die_with_agent } => {
                    let (internal, work_dir) = (self.internal.clone(), self.work_dir.clone());
                    tokio::spawn(async move {
                        let (appl, gid, job) = &key;
                        let output = work_dir.join("output").join(appl).join(gid).join(job);
                        let run = Run {
                            info: &info,
                            date: &date,
                            gid,
                            work_dir: &work_dir,
                            output: &output,
                            output_cap: DEFAULT_OUTPUT_CAP,
                            die_with_agent,
                        };
                        let attempt = run.attempt(number).await;
                        let outcome = runs::Outcome {
                            status: attempt.ended.status(),
                            exit: attempt.ended.exit(),
                            reason: attempt.ended.reason(),
                            output: crate::job::tail(&attempt).await,
                        };
                        let _ = internal.send(Internal::AttemptEnded { key, number, outcome });
                    });
                }
            }
        }
    }
}

/// Most matches claimed in one transaction.
const CLAIM_BATCH: usize = 256;

fn text<'a>(publication: &'a Publication, attr: &str) -> Option<&'a str> {
    publication.get(attr).and_then(Value::as_str)
}

impl Agent {
    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What one of the agent's tasks told it.
    fn internal(&mut self, internal: Internal) {
        match internal {
            Internal::Refused { appl, gid } => {
                // It never started: not followed (nor caught up in), and its gid free.
                self.following.forget(&appl, &gid);
                self.generation_ended(&appl, &gid);
            }
            Internal::AttemptEnded { key, number, outcome } => self.attempt_ended(&key, number, outcome),
        }
    }

    fn send(&self, status: Status) {
        let _ = self.outgoing.send(Outgoing::Status(status));
    }

    /// Deploys again what the journal says was deployed when the agent last stopped.
    async fn restore(&mut self) -> Result<(), AgentError> {
        let kept = self.journal().deployments()?;
        for (appl, body, at_ms) in kept {
            let deployed = match EnvelopeBody::from_json(&body) {
                Ok(body) => self.deploy(body, at_ms).await,
                Err(e) => Err(e),
            };
            match deployed {
                Ok(()) => tracing::info!("{appl}: deployed again from the journal"),
                Err(e) => tracing::error!(
                    "{appl}: the deployment kept in the journal cannot be deployed again: {e}"
                ),
            }
        }
        Ok(())
    }

    /// Jobs that were running when the agent last stopped: `failed`, not run again (their
    /// status advertised first, in case their application is no longer deployed).
    async fn report_interrupted(&self) -> Result<(), AgentError> {
        let interrupted = self.journal().interrupted()?;
        for entry in interrupted {
            if self.journal().is_assigned(&entry.appl, &entry.gid, &entry.job)? {
                // A pool job: its home agent dispatches it again when it sees this agent
                // back as a new incarnation. Nothing is published of it from here, and
                // a dispatch of it here again runs it (`abandoned`).
                tracing::warn!(
                    "{}/{}/{}: the agent stopped while it ran this pool job (attempt {}); left to its home agent to dispatch again",
                    entry.appl,
                    entry.gid,
                    entry.job,
                    entry.attempt
                );
                self.journal().end(&entry.appl, &entry.gid, &entry.job, "abandoned", -1, entry.attempt)?;
                continue;
            }
            self.client.advertise(status_advertisement(&entry.appl, &entry.job, &self.options.name)).await?;
            tracing::warn!(
                "{}/{}/{}: the agent stopped while it ran (attempt {}); reported failed, not run again",
                entry.appl,
                entry.gid,
                entry.job,
                entry.attempt
            );
            self.journal().end(&entry.appl, &entry.gid, &entry.job, "failed", -1, entry.attempt)?;
            let key = (entry.appl, entry.gid, entry.job);
            let reason = "the agent stopped while it ran; its outcome is unknown";
            self.send(Status::new(&key, "failed", -1, entry.attempt).because(Some(reason.to_owned())));
        }
        Ok(())
    }

    /// An `agent_ctl` publication for this agent: done, and answered.
    async fn control(&mut self, publication: &Publication) {
        let control = match Control::from_publication(publication) {
            Ok(control) => control,
            Err(why) => {
                tracing::warn!("agent_ctl refused: {why}");
                if let (Some(appl), Some(cmd)) = (text(publication, "appl"), text(publication, "cmd")) {
                    let reply = Reply {
                        agent: self.options.name.clone(),
                        appl: appl.to_owned(),
                        cmd: cmd.to_owned(),
                        reference: text(publication, "ref").unwrap_or_default().to_owned(),
                        refused: Some(why),
                    };
                    let _ = self.outgoing.send(Outgoing::Reply(reply));
                }
                return;
            }
        };
        if control.agent != self.options.name {
            return;
        }
        let appl = control.appl.clone();
        let outcome = match &control.command {
            Command::Deploy(body) => {
                let unchanged = self.applications.get(&appl).is_some_and(|a| a.body == **body);
                if unchanged {
                    Ok(())
                } else if let Err(why) = check_body(body) {
                    // Refused before anything changes: the deployed version stays.
                    Err(why)
                } else {
                    self.replace(&appl).await;
                    // A version deployed again while still kept for its generations (a
                    // rollback): the copy kept goes, the new one catches up in them.
                    let again: Vec<Application> = match self.retiring.get_mut(&appl) {
                        Some(kept) => {
                            let (same, other) = std::mem::take(kept)
                                .into_iter()
                                .partition(|a| a.body.version == body.version);
                            *kept = other;
                            same
                        }
                        None => Vec::new(),
                    };
                    for application in again {
                        self.forget_application(&application);
                        self.withdraw(&application).await;
                    }
                    let at_ms = self.now.wall_ms;
                    let deployed = self.deploy((**body).clone(), at_ms).await;
                    if deployed.is_ok()
                        && let Err(e) = self.journal().keep_deployment(&appl, &body.to_json(), at_ms)
                    {
                        tracing::error!("{appl}: deployed, but not kept in the journal: {e}");
                    }
                    deployed
                }
            }
            Command::Undeploy => {
                self.undeploy(&appl).await;
                self.journal().drop_deployment(&appl).map_err(|e| format!("journal: {e}"))
            }
            Command::Rerun { gid, job } => self.rerun(&appl, gid, job),
            Command::Bypass { gid, job } => self.bypass(&appl, gid, job),
            Command::Trigger { gid, date } => self.trigger(&appl, gid.clone(), date.clone()),
            Command::Drain => {
                self.drain();
                Ok(())
            }
        };
        match &outcome {
            Ok(()) => tracing::info!("{} {appl}: done", control.command.name()),
            Err(why) => tracing::warn!("{} {appl}: refused: {why}", control.command.name()),
        }
        let _ = self.outgoing.send(Outgoing::Reply(Reply::to(&control, outcome.err())));
    }

    /// Deploys `body` (deployed at `at_ms`, epoch milliseconds: the generations followed
    /// start from then).
    async fn deploy(&mut self, body: EnvelopeBody, at_ms: i64) -> Result<(), String> {
        let calendar = Arc::new(Calendar {
            name: body.appl.clone(),
            workdays: parse_weekdays(&body.workdays)?,
            holidays: body
                .holidays
                .iter()
                .map(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|e| format!("holiday {d}: {e}")))
                .collect::<Result<_, _>>()?,
        });
        let schedules = body
            .jobs
            .iter()
            .map(|job| job.info.as_ref().map(schedule_of).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let home = body.jobs.iter().any(|j| j.job == APPL_START);
        let crons = body
            .triggers
            .iter()
            .filter_map(|t| match t {
                TriggerSpec::Cron(pattern) => {
                    Some(CronTrigger::new(pattern, &body.tz).map(|c| (pattern.clone(), c)))
                }
                TriggerSpec::Event(_) => None,
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut application = Application {
            body: body.clone(),
            home,
            subscriptions: HashMap::new(),
            advertisements: Vec::new(),
            events: Vec::new(),
            follows: Vec::new(),
            unless: Vec::new(),
            replaced: None,
            pool_statuses: None,
        };
        if home {
            let adv =
                self.client.advertise(trigger_advertisement(&body.appl)).await.map_err(|e| e.to_string())?;
            application.advertisements.push(adv);
        }
        let mut jobs = Vec::new();
        let mut unless_subs = Vec::new();
        // Generations the cron triggers start (a run missed while down), once deployed.
        let mut steps = Vec::new();
        for (job, schedule) in body.jobs.into_iter().zip(schedules) {
            let issued = async {
                // The agent's own advertisement of what it publishes, under its name, not
                // the envelope's (an older translation's may lack attributes the agent
                // publishes, or leave `agent` open where permits pin it).
                let status = status_advertisement(&body.appl, &job.job, &self.options.name);
                let adv = self.client.advertise(status).await.map_err(|e| e.to_string())?;
                application.advertisements.push(adv);
                let sub = self.client.send(&job.subscription).await.map_err(|e| e.to_string())?;
                sub.ok_or_else(|| "the broker gave the dependency subscription no id".to_owned())
            };
            let sub = match issued.await {
                Ok(sub) => sub,
                Err(e) => {
                    // Withdraw what this deploy issued: it is refused as a whole.
                    self.withdraw(&application).await;
                    return Err(format!("job {}: {e}", job.job));
                }
            };
            application.subscriptions.insert(job.job.clone(), sub.clone());
            if let Some(unless) = &job.unless {
                match self.client.send(unless).await {
                    Ok(Some(id)) => {
                        application.unless.push(id.clone());
                        unless_subs.push((id, sub.clone()));
                    }
                    other => {
                        self.withdraw(&application).await;
                        let why = other.err().map_or_else(|| "no id".to_owned(), |e| e.to_string());
                        return Err(format!("job {}: {why}", job.job));
                    }
                }
            }
            let info = job.info.map(Arc::new);
            jobs.push((
                sub,
                Deployed {
                    appl: body.appl.clone(),
                    job: job.job,
                    info,
                    schedule,
                    calendar: calendar.clone(),
                    after: job.after,
                    pool: job.pool,
                },
            ));
        }
        // Its generations, followed for catching up: triggers and ends since it was
        // deployed here (at most the horizon ago), the stored ones first.
        let horizon = self.now.wall_ms - i64::try_from(CATCH_UP_HORIZON.as_millis()).unwrap_or(0);
        // From a while before it was deployed here: the home agent may have started a
        // generation on this version before this agent was given it.
        let since = padres_lang::Timestamp::from_millis((at_ms - FOLLOW_BEFORE_MS).max(horizon))
            .map_or_else(|| "0".to_owned(), padres_lang::Timestamp::to_rfc3339);
        let appl_value = Value::str(&body.appl);
        for follow in [
            format!("s [class,eq,'trigger'],[appl,eq,{appl_value}],[time,>=,{since}]"),
            format!(
                "s [class,eq,'job_status'],[appl,eq,{appl_value}],[job,eq,'{APPL_END}'],[time,>=,{since}]"
            ),
        ] {
            match self.client.send(&follow).await {
                Ok(Some(sub)) => application.follows.push(sub),
                other => {
                    self.withdraw(&application).await;
                    let why = other.err().map_or_else(|| "no id".to_owned(), |e| e.to_string());
                    return Err(format!("following its generations ({follow}): {why}"));
                }
            }
        }
        let pools: Vec<String> =
            jobs.iter().filter_map(|(_, d)| d.pool.as_ref().map(|p| p.name.clone())).collect();
        if !pools.is_empty()
            && let Err(e) = self.dispatch_pools(&mut application, &pools, &since).await
        {
            self.withdraw(&application).await;
            return Err(e);
        }
        if home {
            for spec in &body.triggers {
                let TriggerSpec::Event(subscription) = spec else { continue };
                let sub = match self.client.send(&format!("s {subscription}")).await {
                    Ok(Some(sub)) => sub,
                    other => {
                        self.withdraw(&application).await;
                        let why = other.err().map_or_else(|| "no id".to_owned(), |e| e.to_string());
                        return Err(format!("event trigger {subscription}: {why}"));
                    }
                };
                self.event_subs.insert(sub.clone(), body.appl.clone());
                application.events.push(sub);
            }
            let started = self.journal().generations_started(&body.appl);
            let started = match started {
                Ok(started) => started,
                Err(e) => {
                    self.withdraw(&application).await;
                    return Err(format!("journal: {e}"));
                }
            };
            self.starts.home(&body.appl, body.max_generations, started);
            let crons = crons
                .into_iter()
                .map(|(pattern, trigger)| {
                    let last = self.journal().cron_last(&body.appl, &pattern).unwrap_or_else(|e| {
                        tracing::warn!("{}: cron trigger '{pattern}': journal: {e}", body.appl);
                        None
                    });
                    (pattern, trigger, last)
                })
                .collect();
            self.starts.set_crons(&body.appl, crons, self.now.wall(), &mut steps);
        }
        self.jobs.extend(jobs);
        self.unless.extend(unless_subs);
        for sub in &application.follows {
            self.follows.insert(sub.clone(), body.appl.clone());
        }
        tracing::info!("deployed {} ({} jobs here)", body.appl, application.subscriptions.len());
        self.applications.insert(body.appl, application);
        // Carried out by the loop once this deploy is answered and kept, and at start
        // after what the outbox kept from before.
        self.later.extend(steps);
        Ok(())
    }

    async fn withdraw(&self, application: &Application) {
        withdraw_all(&self.client, application.all_subscriptions(), application.advertisements.clone()).await;
    }

    /// Replaces the deployed version of `appl` (a new one is about to be deployed): kept,
    /// without its triggers, while generations that started on it run; else withdrawn.
    async fn replace(&mut self, appl: &str) {
        let Some(mut application) = self.applications.remove(appl) else { return };
        let version = application.body.version.clone();
        // Kept even with no generation of it seen: agents take a new version one after
        // another, and a home agent that has not yet may still start one on it.
        if version.is_empty() {
            self.applications.insert(appl.to_owned(), application);
            return self.undeploy_current(appl, false).await;
        }
        // Its cron and event triggers stop: new generations start on the new version.
        self.starts.stop_crons(appl);
        for sub in application.events.drain(..) {
            self.event_subs.remove(&sub);
            let _ = self.client.unsubscribe(sub).await;
        }
        tracing::info!("{appl}: version {version} kept until the generations that started on it end");
        application.replaced = Some(self.now.at);
        self.retiring.entry(appl.to_owned()).or_default().push(application);
    }

    async fn undeploy(&mut self, appl: &str) {
        for application in self.retiring.remove(appl).unwrap_or_default() {
            self.forget_application(&application);
            self.withdraw(&application).await;
        }
        self.undeploy_current(appl, true).await;
    }

    /// Withdraws the current version of `appl`; with `abandon`, its generations too.
    async fn undeploy_current(&mut self, appl: &str, abandon: bool) {
        let Some(application) = self.applications.remove(appl) else { return };
        self.forget_application(&application);
        if !abandon {
            self.starts.stop_crons(appl);
            return self.withdraw(&application).await;
        }
        self.forget_dispatches(appl, None);
        self.following.forget_application(appl);
        // Generations in flight are abandoned with the subscriptions that followed them:
        // their triggers were taken, so no new subscription sees them.
        let in_flight = self.starts.abandon(appl);
        if application.home {
            for gid in in_flight {
                if let Err(e) = self.journal().forget(appl, &gid) {
                    tracing::warn!("{appl}/{gid}: forgetting the abandoned generation: {e}");
                }
            }
        }
        self.withdraw(&application).await;
    }

    /// The deployed job `job` of `appl`, as in the version generation `gid` runs on.
    fn deployed(&self, appl: &str, gid: &str, job: &str) -> Result<&Deployed, String> {
        self.version_of(appl, gid)
            .ok_or_else(|| format!("{appl} is not deployed on this agent"))?
            .subscriptions
            .get(job)
            .and_then(|sub| self.jobs.get(sub))
            .ok_or_else(|| format!("{appl} has no job {job} on this agent"))
    }

    /// An operator's rerun of a failed job.
    fn rerun(&mut self, appl: &str, gid: &str, job: &str) -> Result<(), String> {
        let deployed = self.deployed(appl, gid, job)?;
        let (Some(info), Some(_)) = (&deployed.info, &deployed.schedule) else {
            return Err(format!("{job} is a virtual job: it has nothing to run"));
        };
        let (info, pooled) = (info.clone(), deployed.pool.is_some());
        if self.journal().generation_ended(appl, gid).map_err(|e| format!("journal: {e}"))? {
            return Err(format!("generation {gid} of {appl} has ended: nothing of it runs again"));
        }
        let date = self
            .journal()
            .generation_date(appl, gid)
            .map_err(|e| format!("journal: {e}"))?
            .ok_or_else(|| format!("generation {gid} of {appl} has not run here"))?;
        let key = (appl.to_owned(), gid.to_owned(), job.to_owned());
        if !self.running.insert(key.clone()) {
            return Err(format!("{job} of {gid} is running"));
        }
        let reclaimed = self.journal().reclaim(appl, gid, job);
        let last = match reclaimed {
            Ok(Ok(last)) => last,
            other => {
                self.not_running(&key);
                return Err(match other {
                    Ok(Err(claim)) => format!("{job} of {gid} {}: only a failed job is rerun", said(&claim)),
                    Err(e) => format!("journal: {e}"),
                    Ok(Ok(_)) => unreachable!("handled above"),
                });
            }
        };
        tracing::info!("{appl}/{gid}/{job}: rerun by an operator, from attempt {}", last + 1);
        if pooled {
            let reason = Some("rerun by an operator".to_owned());
            self.dispatch(key, date, last + 1, 1, reason, None);
        } else {
            self.spawn_run(key, info, date, last + 1, None);
        }
        Ok(())
    }

    /// A generation started by an operator: its trigger published from here, the home agent.
    fn trigger(&mut self, appl: &str, gid: String, date: String) -> Result<(), String> {
        let application =
            self.applications.get(appl).ok_or_else(|| format!("{appl} is not deployed on this agent"))?;
        if !application.home {
            return Err(format!(
                "this agent does not run {appl}'s {APPL_START}: its triggers come from the agent that does"
            ));
        }
        NaiveDate::parse_from_str(&date, "%Y-%m-%d")
            .map_err(|_| format!("date {date}: expected YYYY-MM-DD"))?;
        if self.journal().generation_ended(appl, &gid).map_err(|e| format!("journal: {e}"))? {
            return Err(format!(
                "generation {gid} of {appl} has run and ended: a generation id is used once"
            ));
        }
        tracing::info!("{appl}/{gid}: triggered by an operator, run on {date}");
        self.start_generation(appl, gid, date);
        Ok(())
    }

    /// A publication matching one of `appl`'s event triggers: a generation, named after
    /// the publication's time and content, run on the day of its time in the application's
    /// zone.
    fn event(&mut self, appl: &str, publication: &Publication) {
        let Some(application) = self.applications.get(appl) else { return };
        let tz: chrono_tz::Tz = application.body.tz.parse().unwrap_or(chrono_tz::UTC);
        let at = publication.time().and_then(|t| chrono::DateTime::from_timestamp_millis(t.millis()));
        let at = at.unwrap_or_else(|| self.now.wall());
        let date = at.with_timezone(&tz).format("%Y-%m-%d").to_string();
        let digest = padres_workflow::translate::digest(&publication.to_string());
        let gid = format!("event-{}-{:08x}", at.timestamp_millis(), digest & 0xffff_ffff);
        tracing::info!("{appl}/{gid}: triggered by {publication}");
        self.start_generation(appl, gid, date);
    }

    /// Starts generation `gid` of `appl` (this agent is its home): its trigger published,
    /// or held back while `max-generations` run ([`Starts`]).
    fn start_generation(&mut self, appl: &str, gid: String, date: String) {
        let mut steps = Vec::new();
        self.starts.start(appl, gid, date, &mut steps);
        self.carry_out(steps);
    }

    /// Generation `gid` of `appl`, started here, ended (its `APPL_END` ran) or never
    /// started (its trigger was refused): a held trigger may go.
    fn generation_ended(&mut self, appl: &str, gid: &str) {
        let mut steps = Vec::new();
        self.starts.ended(appl, gid, &mut steps);
        self.carry_out(steps);
    }

    /// Carries out what [`Starts`] decided.
    fn carry_out(&mut self, steps: Vec<Step>) {
        for step in steps {
            match step {
                Step::Start { appl, gid, date } => {
                    let Some(application) = self.applications.get(&appl) else {
                        // (No version is current: a new one failed to deploy after the
                        // old one was replaced.) It does not hold a place in flight.
                        tracing::warn!("{appl}/{gid}: not started, the application is not deployed here");
                        self.starts.not_started(&appl, &gid);
                        continue;
                    };
                    let version = application.body.version.clone();
                    // Its own trigger does not come back to it: followed from here.
                    self.follow_generation(&appl, &version, &gid, Some(date.clone()), self.now.wall_ms);
                    let _ = self.outgoing.send(Outgoing::Trigger(appl, version, gid, date));
                }
                Step::CronFired { appl, pattern, at_ms } => {
                    if let Err(e) = self.journal().cron_fired(&appl, &pattern, at_ms) {
                        tracing::warn!("cron trigger journal: {e}");
                    }
                }
            }
        }
    }

    /// An operator's bypass: the job is published `succeeded` without running.
    fn bypass(&mut self, appl: &str, gid: &str, job: &str) -> Result<(), String> {
        if self.deployed(appl, gid, job)?.info.is_none() {
            return Err(format!("{job} is a virtual job: it runs when what it waits for is done"));
        }
        let key = (appl.to_owned(), gid.to_owned(), job.to_owned());
        if !self.running.insert(key.clone()) {
            return Err(format!("{job} of {gid} is running"));
        }
        let claim = self.journal().look(appl, gid, job);
        let attempt = match claim {
            Ok(Claim::Ended { ref status, attempt, .. }) if status != "succeeded" && status != "skipped" => {
                attempt
            }
            Ok(Claim::New) => 0,
            Ok(other) => {
                self.not_running(&key);
                return Err(format!("{job} of {gid} {}: nothing to bypass", said(&other)));
            }
            Err(e) => {
                self.not_running(&key);
                return Err(format!("journal: {e}"));
            }
        };
        tracing::info!("{appl}/{gid}/{job}: bypassed by an operator");
        let status = Status::new(&key, "succeeded", 0, attempt + 1).because(Some("bypassed".to_owned()));
        self.finish(&key, status);
        self.not_running(&key);
        Ok(())
    }

    /// Matches of composite subscriptions: of dependencies (their jobs' generations are
    /// ready for them, claimed together) and of `unless` subscriptions.
    fn matches(&mut self, batch: Vec<(MessageId, Vec<(u32, Publication)>)>) {
        let mut ready = Vec::new();
        for (sub, pubs) in batch {
            if let Some(job) = self.unless.get(&sub).cloned() {
                self.not_needed(&job, &pubs);
                continue;
            }
            let Some(deployed) = self.jobs.get(&sub) else { continue };
            let Some(trigger) = pubs.iter().map(|(_, p)| p).find(|p| p.class() == "trigger") else {
                tracing::warn!("{}/{}: a dependency match without its trigger", deployed.appl, deployed.job);
                continue;
            };
            let Some(gid) = text(trigger, "gid") else { continue };
            let appl = deployed.appl.clone();
            let date = text(trigger, "date").map(str::to_owned);
            let since_ms = trigger.time().map_or_else(|| self.now.wall_ms, padres_lang::Timestamp::millis);
            let version = text(trigger, "version").unwrap_or_default();
            self.follow_generation(&appl, version, gid, date.clone(), since_ms);
            ready.push((sub, gid.to_owned(), date));
        }
        self.ready_all(ready, false);
    }

    /// A match of the `unless` subscription of the job of dependency `sub`: a predecessor
    /// ended for good with a status the job's condition refuses (a failure handler after a
    /// success), so the job cannot run in that generation. It is published `skipped`, with
    /// the reason, unless it has run, once its other predecessors are decided: the
    /// generation is checked at once (and again as catching up does, until then).
    fn not_needed(&mut self, sub: &MessageId, pubs: &[(u32, Publication)]) {
        let Some(deployed) = self.jobs.get(sub) else { return };
        let appl = deployed.appl.clone();
        let Some(trigger) = pubs.iter().map(|(_, p)| p).find(|p| p.class() == "trigger") else { return };
        let Some(gid) = text(trigger, "gid") else { return };
        let date = text(trigger, "date").map(str::to_owned);
        let since_ms = trigger.time().map_or_else(|| self.now.wall_ms, padres_lang::Timestamp::millis);
        let version = text(trigger, "version").unwrap_or_default();
        self.follow_generation(&appl, version, gid, date, since_ms);
        // Skipped once every other dependency is decided too (Generation::cannot_run),
        // which the generation's statuses in the history stores say: read them now.
        let now = self.clock();
        self.following.check_soon(&appl, gid, now);
    }

    /// The job of dependency `sub` cannot run in generation `gid` (`refused`: the statuses
    /// that refuse it): `skipped`, once.
    fn skip(&mut self, sub: &MessageId, gid: &str, refused: &str) {
        let Some(deployed) = self.jobs.get(sub) else { return };
        let key = (deployed.appl.clone(), gid.to_owned(), deployed.job.clone());
        if !self.running.insert(key.clone()) {
            return;
        }
        if matches!(self.journal().claim(&key.0, &key.1, &key.2), Ok(Claim::New)) {
            let reason = format!("not needed: its dependencies can no longer be met ({refused})");
            tracing::info!("{}/{}/{}: {reason}", key.0, key.1, key.2);
            self.finish(&key, Status::new(&key, "skipped", 0, 0).because(Some(reason)));
        }
        self.not_running(&key);
    }

    /// The job of dependency `sub` may run in generation `gid` (run on `date`): notified
    /// by its match, or found by catching up (`caught_up`).
    fn ready(&mut self, sub: &MessageId, gid: &str, date: Option<&str>, caught_up: bool) {
        self.ready_all(vec![(sub.clone(), gid.to_owned(), date.map(str::to_owned))], caught_up);
    }

    /// [`Agent::ready`] for each of `ready` (dependency, gid, date), claimed in one
    /// transaction.
    fn ready_all(&mut self, ready: Vec<(MessageId, String, Option<String>)>, caught_up: bool) {
        let mut marked = Vec::new();
        for (sub, gid, date) in ready {
            let Some(deployed) = self.jobs.get(&sub) else { continue };
            let key = (deployed.appl.clone(), gid, deployed.job.clone());
            if self.running.insert(key.clone()) {
                marked.push((sub, key, date));
            }
        }
        if marked.is_empty() {
            return;
        }
        let keys: Vec<_> = marked.iter().map(|(_, key, _)| key.clone()).collect();
        let claims = self.journal().claim_many(&keys);
        match claims {
            Ok(claims) => {
                for ((sub, key, date), claim) in marked.into_iter().zip(claims) {
                    self.claimed(&sub, key, date.as_deref(), Ok(claim), caught_up);
                }
            }
            Err(e) => {
                for (sub, key, date) in marked {
                    self.claimed(&sub, key, date.as_deref(), Err(e.to_string()), caught_up);
                }
            }
        }
    }

    /// Job `key` of dependency `sub` (marked running) was claimed: run, skipped, or not.
    fn claimed(
        &mut self,
        sub: &MessageId,
        key: (String, String, String),
        date: Option<&str>,
        claim: Result<Claim, String>,
        caught_up: bool,
    ) {
        let Some(deployed) = self.jobs.get(sub) else { return self.not_running(&key) };
        match claim {
            Ok(Claim::New) => {
                if caught_up {
                    tracing::info!(
                        "{}/{}/{}: its dependencies are met, as the history stores say, and no match came: catching up",
                        key.0,
                        key.1,
                        key.2
                    );
                }
            }
            Ok(Claim::Ended { .. } | Claim::Unfinished { .. } | Claim::GenerationEnded) => {
                return self.not_running(&key);
            }
            Err(e) => {
                tracing::error!("{}/{}/{}: the journal failed, not run: {e}", key.0, key.1, key.2);
                return self.not_running(&key);
            }
        }
        let (Some(info), Some(schedule)) = (&deployed.info, &deployed.schedule) else {
            // A virtual job.
            self.finish(&key, Status::new(&key, "succeeded", 0, 0));
            self.not_running(&key);
            if key.2 == APPL_END {
                self.end_generation(&key.0, &key.1);
            }
            return;
        };
        let day = date.and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
        let Some(day) = day else {
            tracing::warn!("{}/{}/{}: the trigger has no date (YYYY-MM-DD): failed", key.0, key.1, key.2);
            let reason = "the generation's trigger has no date (YYYY-MM-DD)".to_owned();
            self.finish(&key, Status::new(&key, "failed", -1, 0).because(Some(reason)));
            return self.not_running(&key);
        };
        if !schedule.runs_on(day, &deployed.calendar) {
            self.finish(&key, Status::new(&key, "skipped", 0, 0));
            return self.not_running(&key);
        }
        let date = day.format("%Y-%m-%d").to_string();
        if let Err(e) = self.journal().generation(&key.0, &key.1, &date) {
            tracing::warn!("{}/{}: journal: {e}", key.0, key.1);
        }
        if deployed.pool.is_some() {
            return self.dispatch(key, date, 1, 1, None, None);
        }
        self.spawn_run(key, info.clone(), date, 1, None);
    }

    /// Runs job `key` (claimed, and marked running) from attempt `first`, when a slot is
    /// free ([`Runs`]): `started` for each attempt, its outcome at the end, in the journal
    /// and published (with the tail of the last attempt's output). A pool job (`pool`) has
    /// its pool in its statuses, and dies with the agent.
    fn spawn_run(
        &mut self,
        key: (String, String, String),
        info: Arc<JobInfo>,
        date: String,
        first: u32,
        pool: Option<String>,
    ) {
        self.runs.order(runs::Order { key, info, date, first, pool }, self.now.at);
        self.run_steps();
    }

    /// Attempt `number` of `key` ended as `outcome` says (told by the driver).
    fn attempt_ended(&mut self, key: &(String, String, String), number: u32, outcome: runs::Outcome) {
        self.runs.attempt_ended(key, number, outcome, self.now.at);
        self.run_steps();
    }

    /// Carries out what [`Runs`] decided: attempts recorded and published `started`
    /// before they run, and runs' ends recorded, then published.
    fn run_steps(&mut self) {
        while let Some(step) = self.runs.poll_step() {
            match step {
                runs::Step::Started { key, number, pool } => {
                    let (appl, gid, job) = &key;
                    if let Err(e) = self.journal().attempt(appl, gid, job, number) {
                        tracing::warn!("{appl}/{gid}/{job}: journal: {e}");
                    }
                    let extra = pool.map(|p| ("pool", Value::str(&p))).into_iter().collect();
                    self.send(Status::new(&key, "started", 0, number).with(extra));
                }
                runs::Step::Attempt { key, info, date, number, die_with_agent } => {
                    self.out.push_back(Output::Attempt { key, info, date, number, die_with_agent });
                }
                runs::Step::Ended { key, number, outcome, pool } => {
                    let extra = pool.map(|p| ("pool", Value::str(&p))).into_iter().collect();
                    let status = Status::new(&key, outcome.status, outcome.exit, number)
                        .because(outcome.reason)
                        .with(extra)
                        .with(vec![("output", Value::str(&outcome.output))]);
                    let (appl, gid, job) = &key;
                    if let Err(e) = self.journal().end(appl, gid, job, status.status, status.exit, number) {
                        tracing::warn!("{appl}/{gid}/{job}: journal: {e}");
                    }
                    // No longer running before its status is out: an operator acting on
                    // the status (rerun, bypass) finds it ended.
                    self.running.remove(&key);
                    self.send(status);
                }
            }
        }
    }

    /// A publication of a subscription following `appl`'s generations: a trigger (one
    /// started) or an `APPL_END` status (one ended).
    fn follow(&mut self, appl: &str, publication: &Publication) {
        let Some(gid) = text(publication, "gid") else { return };
        if publication.class() == "trigger" {
            let since_ms =
                publication.time().map_or_else(|| self.now.wall_ms, padres_lang::Timestamp::millis);
            let (version, date) =
                (text(publication, "version").unwrap_or_default(), text(publication, "date"));
            self.follow_generation(appl, version, gid, date.map(str::to_owned), since_ms);
        } else if text(publication, "status").is_some_and(|s| s != "started") {
            // Only the home agent ends a generation (another agent may be allowed to
            // publish the application's statuses under its own name).
            let home = self.version_of(appl, gid).and_then(|a| a.body.home.as_deref());
            if let Some(home) = home
                && text(publication, "agent") != Some(home)
            {
                tracing::warn!(
                    "{appl}/{gid}: an APPL_END status from {}, not the home agent {home}: ignored",
                    text(publication, "agent").unwrap_or("no agent")
                );
                return;
            }
            self.end_generation(appl, gid);
        }
    }

    /// Generation `gid` of version `version` of `appl`, triggered at `since_ms` to run on
    /// `date`, is seen started: followed (to catch up in, and to keep its version deployed
    /// until it ends), unless it has ended or is beyond the horizon.
    fn follow_generation(
        &mut self,
        appl: &str,
        version: &str,
        gid: &str,
        date: Option<String>,
        since_ms: i64,
    ) {
        let wall_ms = self.now.wall_ms;
        if self.version(appl, version).is_none()
            || self.following.get(appl, gid).is_some()
            || !Following::within_horizon(since_ms, wall_ms)
        {
            return;
        }
        match self.journal().generation_ended(appl, gid) {
            Ok(false) => {}
            Ok(true) => return,
            Err(e) => {
                tracing::warn!("{appl}/{gid}: journal: {e}");
                return;
            }
        }
        let now = self.clock();
        self.following.follow(appl, gid, version, date, since_ms, wall_ms, now);
    }

    /// The agent's monotonic milliseconds, for [`Following`].
    fn clock(&self) -> u64 {
        u64::try_from(self.now.at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// Generation `gid` of `appl` has ended (its `APPL_END` ran, here or elsewhere): no
    /// longer followed, forgotten by the journal with its end marked; at its home agent, a
    /// held trigger goes.
    fn end_generation(&mut self, appl: &str, gid: &str) {
        self.following.forget(appl, gid);
        if let Err(e) = self.journal().end_generation(appl, gid, self.now.wall_ms) {
            tracing::warn!("{appl}/{gid}: marking the generation ended: {e}");
        }
        self.forget_dispatches(appl, Some(gid));
        self.generation_ended(appl, gid);
        self.retire_finished(appl);
    }

    /// Deployed version `version` of `appl`: the current one, or an earlier one kept for
    /// the generations that started on it.
    fn version(&self, appl: &str, version: &str) -> Option<&Application> {
        let current = self.applications.get(appl).filter(|a| a.body.version == version);
        current.or_else(|| self.retiring.get(appl)?.iter().find(|a| a.body.version == version))
    }

    /// The version generation `gid` of `appl` runs on, as far as this agent knows (the
    /// current one if it has not seen the generation start).
    fn version_of(&self, appl: &str, gid: &str) -> Option<&Application> {
        let followed = self.following.get(appl, gid);
        followed.and_then(|f| self.version(appl, &f.version)).or_else(|| self.applications.get(appl))
    }

    /// Withdraws the earlier versions of `appl` none of whose generations still run.
    fn retire_finished(&mut self, appl: &str) {
        let Some(retiring) = self.retiring.remove(appl) else { return };
        let (running, done): (Vec<Application>, Vec<Application>) = retiring.into_iter().partition(|a| {
            let recent =
                a.replaced.is_some_and(|at| self.now.at.saturating_duration_since(at) < RETIRE_GRACE);
            recent || self.following.runs_on(appl, &a.body.version)
        });
        if !running.is_empty() {
            self.retiring.insert(appl.to_owned(), running);
        }
        for application in done {
            tracing::info!(
                "{appl}: version {} withdrawn, no generation of it runs",
                application.body.version
            );
            self.forget_application(&application);
            let (client, subs, advs) =
                (self.client.clone(), application.all_subscriptions(), application.advertisements);
            tokio::spawn(async move { withdraw_all(&client, subs, advs).await });
        }
    }

    /// Forgets what `application` subscribed to (its subscriptions are withdrawn apart).
    fn forget_application(&mut self, application: &Application) {
        for sub in application.subscriptions.values() {
            self.jobs.remove(sub);
        }
        for sub in &application.events {
            self.event_subs.remove(sub);
        }
        for sub in &application.follows {
            self.follows.remove(sub);
        }
        for sub in &application.unless {
            self.unless.remove(sub);
        }
        if let Some(sub) = &application.pool_statuses {
            self.pool_statuses.remove(sub);
        }
    }

    /// Whether a job of `appl` here has not run in generation `gid` (nor runs now).
    fn waits_here(&self, appl: &str, gid: &str) -> bool {
        let Some(application) = self.version_of(appl, gid) else { return false };
        application.subscriptions.keys().any(|job| self.not_run(appl, gid, job))
    }

    /// Whether job `job` of `appl` has not run in generation `gid` here (nor runs now).
    fn not_run(&self, appl: &str, gid: &str, job: &str) -> bool {
        let key = (appl.to_owned(), gid.to_owned(), job.to_owned());
        let running = self.running.contains(&key);
        !running && matches!(self.journal().look(appl, gid, job), Ok(Claim::New))
    }

    /// Starts the checks that are due: each reads a followed generation's statuses from the
    /// history stores.
    async fn check_due(&mut self) {
        let (now_at, now) = (self.now.at, self.clock());
        // A check the stores never finished answering (its broker went away) is dropped and
        // made again.
        let stale: Vec<MessageId> = self
            .checks
            .iter()
            .filter(|(_, c)| now_at.duration_since(c.started) > CHECK_LONGEST)
            .map(|(sub, _)| sub.clone())
            .collect();
        for sub in stale {
            if let Some(check) = self.checks.remove(&sub) {
                let _ = self.client.unsubscribe(sub).await;
                self.following.read_failed(&check.appl, &check.gid, true, now);
            }
        }
        // Generations triggered beyond the horizon are no longer followed; versions kept for
        // them alone go.
        self.following.prune(self.now.wall_ms);
        let mut appls: Vec<String> =
            self.following.applications().chain(self.retiring.keys()).cloned().collect();
        appls.sort();
        appls.dedup();
        for appl in appls {
            self.retire_finished(&appl);
        }
        for (appl, gid) in self.following.due(now) {
            // Every job here has run: nothing to catch up, but its end (which keeps an
            // earlier version deployed, and the journal's rows) is looked for, rarely.
            if !self.waits_here(&appl, &gid) && self.following.put_off(&appl, &gid, now) {
                continue;
            }
            let Some(f) = self.following.get(&appl, &gid) else { continue };
            // A minute before its trigger, for brokers' clocks a little apart; up to now.
            let from = padres_lang::Timestamp::from_millis(f.since_ms - 60_000);
            let to = padres_lang::Timestamp::from_millis(self.now.wall_ms);
            let (Some(from), Some(to)) = (from, to) else {
                tracing::warn!("{appl}/{gid}: its statuses' time range cannot be written; read later");
                self.following.read_failed(&appl, &gid, false, now);
                continue;
            };
            self.following.reading(&appl, &gid);
            let query = format!(
                "s [class,eq,'job_status'],[appl,eq,{}],[gid,eq,{}],[time,>=,{}],[time,<,{}]",
                Value::str(&appl),
                Value::str(&gid),
                from.to_rfc3339(),
                to.to_rfc3339()
            );
            match self.client.send(&query).await {
                Ok(Some(sub)) => {
                    let check = Check { appl, gid, generation: Generation::default(), started: now_at };
                    self.checks.insert(sub, check);
                }
                other => {
                    let why = other.err().map_or_else(|| "no id".to_owned(), |e| e.to_string());
                    tracing::warn!("{appl}/{gid}: reading its statuses from history: {why}");
                    self.following.read_failed(&appl, &gid, false, self.clock());
                }
            }
        }
    }

    /// The check of subscription `sub` has all its stored statuses: the jobs here whose
    /// dependencies they meet run (once, as the journal keeps it).
    async fn checked(&mut self, sub: &MessageId, complete: bool) {
        let Some(Check { appl, gid, generation, .. }) = self.checks.remove(sub) else { return };
        let _ = self.client.unsubscribe(sub.clone()).await;
        let home = self.version_of(&appl, &gid).and_then(|a| a.body.home.clone());
        if matches!(generation.state_by(APPL_END, home.as_deref()), State::Ended(_)) {
            self.end_generation(&appl, &gid);
            return;
        }
        let Some(f) = self.following.get(&appl, &gid) else { return };
        if !complete {
            // A store did not answer: what it keeps may change the answer. Read again.
            tracing::warn!("{appl}/{gid}: some history stores did not answer; checking again");
            let now = self.clock();
            self.following.incomplete(&appl, &gid, now);
            return;
        }
        let date = f.date.clone();
        // The jobs here that have not run and whose dependencies are met, and those that can
        // no longer run.
        let ready = self.waiting_jobs(&appl, &gid, |after| generation.ready(after));
        let unneeded = self.waiting_jobs(&appl, &gid, |after| generation.cannot_run(after));
        for sub in &ready {
            self.ready(sub, &gid, date.as_deref(), true);
        }
        for sub in &unneeded {
            let refused = self.jobs.get(sub).map(|d| refusals(&generation, &d.after)).unwrap_or_default();
            self.skip(sub, &gid, &refused);
        }
        let found = generation.events.len();
        let acted = !(ready.is_empty() && unneeded.is_empty());
        let now = self.clock();
        self.following.read(&appl, &gid, found, acted, now);
    }

    /// The dependency subscriptions of the jobs of `appl` here (in generation `gid`'s
    /// version) that have not run in it and whose dependencies satisfy `test`.
    fn waiting_jobs(&self, appl: &str, gid: &str, test: impl Fn(&[Need]) -> bool) -> Vec<MessageId> {
        let Some(application) = self.version_of(appl, gid) else { return Vec::new() };
        application
            .subscriptions
            .iter()
            .filter(|(job, sub)| {
                self.jobs.get(*sub).is_some_and(|d| test(&d.after)) && self.not_run(appl, gid, job)
            })
            .map(|(_, sub)| sub.clone())
            .collect()
    }

    /// `key` (appl, gid, job) is no longer running here.
    fn not_running(&mut self, key: &(String, String, String)) {
        self.running.remove(key);
    }

    /// `key` ended without running a process: journal, then status.
    fn finish(&self, key: &(String, String, String), status: Status) {
        if let Err(e) = self.journal().end(&key.0, &key.1, &key.2, status.status, status.exit, status.attempt)
        {
            tracing::warn!("{}/{}/{}: journal: {e}", key.0, key.1, key.2);
        }
        self.send(status);
    }
}

/// Resolves at wall-clock time `at` (a cron occurrence), never without one. Made again
/// on each turn of the loop, so a clock set meanwhile is read at the next turn.
async fn until(at: Option<chrono::DateTime<chrono::Utc>>) {
    match at {
        Some(at) => tokio::time::sleep((at - now()).to_std().unwrap_or_default()).await,
        None => std::future::pending().await,
    }
}

/// Resolves at monotonic time `at`, never without one.
async fn until_instant(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Withdraws `subs` and `advs` (what an application made); a failure (the connection is
/// gone, with what it made) is no matter.
async fn withdraw_all(client: &Client, subs: Vec<MessageId>, advs: Vec<MessageId>) {
    for sub in subs {
        let _ = client.unsubscribe(sub).await;
    }
    for adv in advs {
        let _ = client.unadvertise(adv).await;
    }
}

/// The statuses in `generation` that refuse `after` for good, in words ("A skipped").
fn refusals(generation: &Generation, after: &[Need]) -> String {
    fn walk(generation: &Generation, need: &Need, out: &mut Vec<String>) {
        match need {
            Need::After { job, statuses, agent } => {
                if let State::Ended(e) = generation.state_by(job, agent.as_deref())
                    && padres_workflow::translate::FINAL.contains(&e.status.as_str())
                    && !statuses.contains(&e.status)
                {
                    out.push(format!("{job} {}", e.status));
                }
            }
            Need::AnyOf(needs) => needs.iter().for_each(|n| walk(generation, n, out)),
        }
    }
    let mut out = Vec::new();
    after.iter().for_each(|n| walk(generation, n, &mut out));
    out.join(", ")
}

/// Whether `body` can be deployed: its calendar, run terms and cron triggers read.
fn check_body(body: &EnvelopeBody) -> Result<(), String> {
    parse_weekdays(&body.workdays)?;
    for day in &body.holidays {
        NaiveDate::parse_from_str(day, "%Y-%m-%d").map_err(|e| format!("holiday {day}: {e}"))?;
    }
    for job in &body.jobs {
        if let Some(info) = &job.info {
            schedule_of(info).map_err(|e| format!("job {}: {e}", job.job))?;
        }
    }
    for trigger in &body.triggers {
        if let TriggerSpec::Cron(pattern) = trigger {
            CronTrigger::new(pattern, &body.tz)?;
        }
    }
    Ok(())
}

/// What the journal's `claim` says, in words.
fn said(claim: &Claim) -> String {
    match claim {
        Claim::New => "has not run here".to_owned(),
        Claim::Ended { status, .. } => format!("is {status}"),
        Claim::Unfinished { .. } => "is running".to_owned(),
        Claim::GenerationEnded => "belongs to a generation that has ended".to_owned(),
    }
}

/// A job's schedule from its envelope's text.
fn schedule_of(info: &JobInfo) -> Result<Schedule, String> {
    Ok(Schedule {
        run: RunTerm::from_str(&info.run)?,
        except: info.except.as_deref().map(RunTerm::from_str).transpose()?,
        holiday: HolidayRule::from_str(&info.holiday)?,
    })
}
