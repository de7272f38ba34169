//! [`AgentCore`]: every decision of the agent, sans-IO.
//!
//! The driver ([`super::serve`], or a simulation) hands it inputs with the time
//! ([`AgentCore::handle`]: the broker's notifications, the answers to its requests and
//! publications, the ends of job attempts), wakes it at [`AgentCore::poll_timeout`]
//! ([`AgentCore::handle_timeout`]), and carries out its [`Output`]s in the order it polls
//! them ([`AgentCore::poll_output`]): requests to the broker, publications, job attempts,
//! provisioning commands. The core reads no clock, awaits nothing, and keeps what must
//! outlive it in its journal ([`Store`]: SQLite in production, in memory in tests).
//!
//! A request whose answer the agent needs (an advertisement or subscription it then
//! relies on, a read of the history stores) holds its other inputs back until the answer
//! comes: a match for a dependency subscription being deployed, say, is handled once the
//! deployment is complete. Withdrawals are not waited for; nor are publications, whose
//! order and acknowledgements are the outbox's ([`super::outbox`]).
//!
//! When it starts, the core announces itself and joins its pools, deploys again what its
//! journal kept (one application after another), follows again the pool jobs it
//! dispatched, sends what its outbox kept, reports the jobs that were running when it
//! stopped, and subscribes to its commands; then it takes inputs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use padres_client::Notification;
use padres_lang::{Message, MessageId, Publication, Timestamp};
use padres_workflow::JobInfo;
use padres_workflow::control::{control_subscription, reply_advertisement};
use padres_workflow::progress::StatusEvent;

use super::catch_up::{Check, Following};
use super::deploy::{Application, Deployed, Deploying};
use super::outbox::{Publisher, Status};
use super::pools::Dispatch;
use super::runs::{self, Runs};
use super::starts::{Starts, Step};
use super::{Options, text};
use crate::journal::{Entry, Store};
use crate::pool::{MemberState, Members};

/// (appl, gid, job).
pub(super) type Key = (String, String, String);

/// The time, as the driver hands it in with each input: its monotonic clock, and the wall
/// clock (epoch milliseconds).
#[derive(Clone, Copy, Debug)]
pub struct Now {
    /// The monotonic clock.
    pub at: Instant,
    /// The wall clock, epoch milliseconds.
    pub wall_ms: i64,
}

impl Now {
    /// Read from this machine's clocks (a driver's part).
    pub fn read() -> Self {
        Self { at: Instant::now(), wall_ms: crate::trigger::now().timestamp_millis() }
    }

    pub(super) fn wall(self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_millis(self.wall_ms).unwrap_or_default()
    }
}

/// How an attempt of a job ended, as the driver saw it.
pub use super::runs::Outcome;

/// What the core is handed.
#[derive(Debug)]
pub enum Input {
    /// A notification from the broker.
    Notification(Notification),
    /// Matches of composite subscriptions that came together (claimed in one
    /// transaction).
    Matches(Vec<(MessageId, Vec<(u32, Publication)>)>),
    /// The broker's answer to [`Output::Request`] `token`: the id it assigned, or why not.
    Answer { token: u64, answer: Result<Option<MessageId>, String> },
    /// The broker's answer to [`Output::Write`] `token`, or why it was not taken.
    Published { token: u64, answer: Result<(), PublishFailure> },
    /// Attempt `number` of job `key` ([`Output::Attempt`]) ended.
    AttemptEnded { key: Key, number: u32, outcome: Outcome },
    /// The broker the client is connected to now (named in load reports).
    Broker(String),
}

/// Why a publication was not taken.
pub use super::outbox::Failure as PublishFailure;

/// What the core asks of its driver, in order.
#[derive(Debug)]
pub enum Output {
    /// Send `message` to the broker and hand its answer back as [`Input::Answer`].
    Request { token: u64, message: Message },
    /// Publish `publication`, after those asked before, and hand the broker's answer back
    /// as [`Input::Published`]. After a write of round `round` fails, the later writes of
    /// that round are answered [`PublishFailure::NotSent`] without being written (they go
    /// again in a later round, in order).
    Write { token: u64, publication: Publication, round: u64 },
    /// Run attempt `number` of job `key` (as [`crate::job::Run::attempt`] does) and hand
    /// its end back as [`Input::AttemptEnded`].
    Attempt { key: Key, info: Arc<JobInfo>, date: String, number: u32, die_with_agent: bool },
    /// Run a pool's provisioning command (`sh -c`), with `env`, in the work directory.
    Command { command: String, env: Vec<(&'static str, String)>, what: String },
    /// The agent has left (drained): nothing more is to be handed in but the ends of
    /// attempts and the answers to publications.
    Leave,
    /// The agent cannot run: the broker refused what it needs.
    Fatal(String),
}

/// What the core does with the answer to one of its requests.
#[derive(Debug)]
pub(super) enum Then {
    /// Nothing: a withdrawal.
    Nothing,
    /// Nothing, but the agent cannot run without it (`what`).
    Needed(&'static str),
    /// A read of generation `gid` of `appl`'s statuses in the history stores.
    Check { appl: String, gid: String },
    /// Request `index` of the deployment in progress.
    Deploy(usize),
    /// The status advertisement of a job interrupted by the agent's stop: then reported.
    Interrupted(Entry),
    /// The status advertisement of a pool job dispatched here: then it runs.
    Assigned(Box<Publication>),
    /// The subscription to the jobs dispatched to this member.
    Assignments,
    /// A subscription to a pool's load reports.
    PoolLoads(String),
}

/// Where the agent is in starting.
#[derive(Debug, PartialEq, Eq)]
enum Stage {
    /// Announcing itself and joining its pools.
    Joining,
    /// Deploying again what its journal kept.
    Restoring,
    /// Reporting interrupted jobs and subscribing to its commands.
    Listening,
    /// Taking inputs.
    Running,
    /// Stopped (left, or failed).
    Stopped,
}

/// The agent's state and decisions (the module docs give the shape).
#[derive(Debug)]
pub struct AgentCore {
    pub(super) options: Options,
    journal: Box<dyn Store>,
    pub(super) now: Now,
    /// The origin of the agent's monotonic milliseconds ([`AgentCore::clock`]).
    epoch: Instant,
    /// The broker the client is connected to.
    pub(super) broker: String,
    pub(super) jobs: HashMap<MessageId, Deployed>,
    pub(super) applications: HashMap<String, Application>,
    /// (appl, gid, job) running now (claimed and not ended, or acted on by an operator).
    pub(super) running: HashSet<Key>,
    /// The job runs ordered: at most `max_parallel` at once, with their retries.
    pub(super) runs: Runs,
    /// The ordered outbox's publisher.
    pub(super) publisher: Publisher,
    /// Event trigger subscriptions, to their application.
    pub(super) event_subs: HashMap<MessageId, String>,
    /// Generation starts of the applications this agent is home to: manual, cron and
    /// event triggers, held to `max-generations`.
    pub(super) starts: Starts,
    /// What `starts` decided during a deploy, carried out once the agent is idle.
    pub(super) later: Vec<Step>,
    /// The subscriptions following generations, to their application.
    pub(super) follows: HashMap<MessageId, String>,
    /// The generations followed, and when each is read from the history stores next.
    pub(super) following: Following,
    /// Checks running, by their subscription.
    pub(super) checks: HashMap<MessageId, Check>,
    /// Jobs' `unless` subscriptions, to the job's dependency subscription.
    pub(super) unless: HashMap<MessageId, MessageId>,
    /// Earlier versions of applications, kept while generations started on them run.
    pub(super) retiring: HashMap<String, Vec<Application>>,
    /// The deployment in progress (its requests asked, not all answered).
    pub(super) deploying: Option<Deploying>,
    /// Deployments kept in the journal, deployed again at start one after another.
    pub(super) to_restore: VecDeque<(String, String, i64)>,
    /// When this run of the agent started (epoch milliseconds): its incarnation as a pool
    /// member.
    pub(super) incarnation: i64,
    /// Up, or leaving (drained).
    pub(super) state: MemberState,
    /// As a pool member: its subscription to the jobs dispatched to it.
    pub(super) assignments: Option<MessageId>,
    /// As a pool member: the jobs whose status it has advertised.
    pub(super) advertised: HashSet<(String, String)>,
    /// As a home agent: the members of the pools it dispatches to, from their reports.
    pub(super) members: Members,
    /// Its subscriptions to pools' load reports, by pool, and when each was made.
    pub(super) pool_loads: HashMap<String, (MessageId, Instant)>,
    /// Its subscriptions to applications' pool job statuses, to their application.
    pub(super) pool_statuses: HashMap<MessageId, String>,
    /// Pool jobs dispatched from here and not ended, by (appl, gid, job).
    pub(super) dispatches: HashMap<Key, Dispatch>,
    /// Pool jobs waiting for a member with room, in order.
    pub(super) admission: VecDeque<Key>,
    /// The pool it advises, if any.
    pub(super) provisioner: Option<crate::pool::Provisioner>,
    stage: Stage,
    next_token: u64,
    /// Requests asked and not answered, with what to do with their answers.
    asked: HashMap<u64, Then>,
    /// How many of those the agent waits for (not [`Then::Nothing`]).
    waiting_for: usize,
    /// Answers known at once (a request that could not be written).
    immediate: VecDeque<(u64, Result<Option<MessageId>, String>)>,
    /// Inputs held back while the agent waits for answers.
    deferred: VecDeque<Input>,
    /// Generations whose trigger the broker refused, to let go once the agent is idle.
    refused: VecDeque<(String, String)>,
    /// The next reading of what catching up has due, and the next load report.
    next_check: Instant,
    next_load: Instant,
    out: VecDeque<Output>,
}

/// How often the agent asks what catching up has due.
const CHECK_EVERY: Duration = Duration::from_secs(1);

impl AgentCore {
    /// Agent `options.name`, keeping its journal in `journal`, started at `now`, its client
    /// connected to broker `broker`. What it does first is polled ([`AgentCore::poll_output`]).
    pub fn new(options: Options, journal: Box<dyn Store>, now: Now, broker: String) -> Self {
        let following = Following::new(options.catch_up);
        let mut core = Self {
            runs: Runs::new(options.max_parallel),
            next_load: now.at + options.load_period.max(Duration::from_millis(10)),
            options,
            journal,
            now,
            epoch: now.at,
            broker,
            jobs: HashMap::new(),
            applications: HashMap::new(),
            running: HashSet::new(),
            publisher: Publisher::default(),
            event_subs: HashMap::new(),
            starts: Starts::default(),
            later: Vec::new(),
            follows: HashMap::new(),
            following,
            checks: HashMap::new(),
            unless: HashMap::new(),
            retiring: HashMap::new(),
            deploying: None,
            to_restore: VecDeque::new(),
            incarnation: now.wall_ms,
            state: MemberState::Up,
            assignments: None,
            advertised: HashSet::new(),
            members: Members::default(),
            pool_loads: HashMap::new(),
            pool_statuses: HashMap::new(),
            dispatches: HashMap::new(),
            admission: VecDeque::new(),
            provisioner: None,
            stage: Stage::Joining,
            next_token: 0,
            asked: HashMap::new(),
            waiting_for: 0,
            immediate: VecDeque::new(),
            deferred: VecDeque::new(),
            refused: VecDeque::new(),
            next_check: now.at + CHECK_EVERY,
            out: VecDeque::new(),
        };
        let reply = Message::Advertise(reply_advertisement(&core.options.name));
        core.ask(Ok(reply), Then::Needed("its reply advertisement"));
        core.join();
        core.settle();
        core
    }

    /// Hands in `input` at `now`.
    pub fn handle(&mut self, now: Now, input: Input) {
        self.now = now;
        match input {
            Input::Answer { token, answer } => self.answered(token, answer),
            Input::Published { token, answer } => {
                let at = self.clock();
                self.publisher.answered(token, answer, at);
                self.pump_publisher();
            }
            Input::Broker(name) => self.broker = name,
            input if self.busy() && self.stage != Stage::Stopped => self.deferred.push_back(input),
            input => self.take(input),
        }
        self.settle();
    }

    /// When [`AgentCore::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let publisher = self.publisher.poll_timeout().map(|ms| self.epoch + Duration::from_millis(ms));
        if self.stage == Stage::Stopped {
            return publisher.into_iter().chain(self.runs.poll_timeout()).min();
        }
        if self.busy() {
            return publisher;
        }
        let cron = self.starts.poll_timeout().map(|at| {
            let wait = (at - self.now.wall()).to_std().unwrap_or_default();
            self.now.at + wait
        });
        [publisher, cron, self.runs.poll_timeout(), Some(self.next_check), Some(self.next_load)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Does what is due at `now`. `caught_up`: every notification the driver has received
    /// has been handed in (so pool members' load reports are current up to now).
    pub fn handle_timeout(&mut self, now: Now, caught_up: bool) {
        self.now = now;
        let at = self.clock();
        self.publisher.handle_timeout(at);
        self.pump_publisher();
        if self.stage == Stage::Stopped {
            self.runs.handle_timeout(now.at);
            self.run_steps();
        } else if !self.busy() {
            let mut steps = Vec::new();
            self.starts.handle_timeout(now.wall(), &mut steps);
            self.carry_out(steps);
            self.runs.handle_timeout(now.at);
            self.run_steps();
            if now.at >= self.next_check {
                self.next_check = now.at + CHECK_EVERY;
                self.check_due();
            }
            if now.at >= self.next_load && !self.busy() {
                self.next_load = now.at + self.options.load_period.max(Duration::from_millis(10));
                if self.pool_tick(caught_up) {
                    tracing::info!("drained: every job it had has ended; leaving");
                    self.stage = Stage::Stopped;
                    self.out.push_back(Output::Leave);
                }
            }
        }
        self.settle();
    }

    /// The next thing for the driver to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The agent stops taking inputs (its connection has ended for good): only the ends of
    /// the attempts running and the answers to its publications are handed in from now on.
    pub fn stop(&mut self) {
        self.stage = Stage::Stopped;
        // Answers will not come: what waited for them is let go, but the ends of attempts
        // held back meanwhile are taken.
        self.waiting_for = 0;
        for input in std::mem::take(&mut self.deferred) {
            if let Input::AttemptEnded { key, number, outcome } = input {
                self.runs.attempt_ended(&key, number, outcome, self.now.at);
                self.run_steps();
            }
        }
    }

    /// No job is running or waiting for a slot, and nothing waits to be published.
    pub fn is_idle(&self) -> bool {
        self.runs.is_idle() && self.publisher.is_idle()
    }

    /// Whether other inputs wait: for answers, or for the agent to have started.
    fn busy(&self) -> bool {
        self.waiting_for > 0 || self.stage != Stage::Running
    }

    /// Takes in what is held back and what is due once nothing is waited for.
    fn settle(&mut self) {
        loop {
            if let Some((token, answer)) = self.immediate.pop_front() {
                self.answered(token, answer);
                continue;
            }
            if self.waiting_for > 0 || self.stage == Stage::Stopped {
                return;
            }
            if self.stage != Stage::Running {
                self.advance();
                continue;
            }
            if !self.later.is_empty() {
                let later = std::mem::take(&mut self.later);
                self.carry_out(later);
                continue;
            }
            if let Some((appl, gid)) = self.refused.pop_front() {
                self.trigger_refused(&appl, &gid);
                continue;
            }
            let Some(input) = self.deferred.pop_front() else { return };
            self.take(input);
        }
    }

    /// The next step of starting, once the one before is answered.
    fn advance(&mut self) {
        match self.stage {
            Stage::Joining => {
                // Announced: its first load report.
                let report = self.report();
                self.publish(super::outbox::Outgoing::Load(report));
                let kept = self.journal().deployments();
                match kept {
                    Ok(kept) => self.to_restore = kept.into(),
                    Err(e) => return self.fatal(format!("journal: {e}")),
                }
                self.stage = Stage::Restoring;
            }
            Stage::Restoring => {
                if let Some((appl, body, at_ms)) = self.to_restore.pop_front() {
                    return self.restore(&appl, &body, at_ms);
                }
                self.restore_dispatches();
                self.send_kept();
                let interrupted = self.journal().interrupted();
                match interrupted {
                    Ok(interrupted) => self.report_interrupted(interrupted),
                    Err(e) => return self.fatal(format!("journal: {e}")),
                }
                let control = self.parse(&control_subscription(&self.options.name));
                self.ask(control, Then::Needed("its control subscription"));
                self.stage = Stage::Listening;
            }
            Stage::Listening => self.stage = Stage::Running,
            Stage::Running | Stage::Stopped => {}
        }
    }

    fn fatal(&mut self, why: String) {
        self.stage = Stage::Stopped;
        self.out.push_back(Output::Fatal(why));
    }

    /// What the outbox kept when the agent last stopped goes first, once the deployments
    /// are advertised again.
    fn send_kept(&mut self) {
        let pending = match self.journal().outbox_pending() {
            Ok(pending) => pending,
            Err(e) => return tracing::error!("journal: the outbox cannot be read: {e}"),
        };
        if !pending.is_empty() {
            tracing::info!(
                "{} statuses and triggers not sent before the agent stopped: sending them",
                pending.len()
            );
        }
        for (seq, text) in pending {
            match text.parse::<Publication>() {
                Ok(publication) => self.publish_kept(seq, publication),
                Err(e) => tracing::error!("the outbox holds an unreadable publication {text}: {e}"),
            }
        }
    }

    /// Jobs that were running when the agent last stopped: `failed`, not run again (their
    /// status advertised first, in case their application is no longer deployed).
    fn report_interrupted(&mut self, interrupted: Vec<Entry>) {
        for entry in interrupted {
            match self.journal().is_assigned(&entry.appl, &entry.gid, &entry.job) {
                Ok(true) => {
                    // A pool job: its home agent dispatches it again when it sees this
                    // agent back as a new incarnation. Nothing is published of it from
                    // here, and a dispatch of it here again runs it (`abandoned`).
                    tracing::warn!(
                        "{}/{}/{}: the agent stopped while it ran this pool job (attempt {}); left to its home agent to dispatch again",
                        entry.appl,
                        entry.gid,
                        entry.job,
                        entry.attempt
                    );
                    let ended = self.journal().end(
                        &entry.appl,
                        &entry.gid,
                        &entry.job,
                        "abandoned",
                        -1,
                        entry.attempt,
                    );
                    if let Err(e) = ended {
                        return self.fatal(format!("journal: {e}"));
                    }
                }
                Ok(false) => {
                    let adv = padres_workflow::translate::status_advertisement(
                        &entry.appl,
                        &entry.job,
                        &self.options.name,
                    );
                    self.ask(Ok(Message::Advertise(adv)), Then::Interrupted(entry));
                }
                Err(e) => return self.fatal(format!("journal: {e}")),
            }
        }
    }

    /// An interrupted job's status is advertised: it is reported.
    fn interrupted(&mut self, entry: &Entry) {
        tracing::warn!(
            "{}/{}/{}: the agent stopped while it ran (attempt {}); reported failed, not run again",
            entry.appl,
            entry.gid,
            entry.job,
            entry.attempt
        );
        if let Err(e) = self.journal().end(&entry.appl, &entry.gid, &entry.job, "failed", -1, entry.attempt) {
            return self.fatal(format!("journal: {e}"));
        }
        let key = (entry.appl.clone(), entry.gid.clone(), entry.job.clone());
        let reason = "the agent stopped while it ran; its outcome is unknown";
        self.send(Status::new(&key, "failed", -1, entry.attempt).because(Some(reason.to_owned())));
    }

    /// Takes `input` (the agent is not waiting for anything).
    fn take(&mut self, input: Input) {
        match input {
            Input::Notification(Notification::Publication { subs, publication }) => {
                self.publication(&subs, &publication);
            }
            Input::Notification(Notification::Composite { sub, pubs }) => self.matches(vec![(sub, pubs)]),
            Input::Matches(batch) => self.matches(batch),
            Input::Notification(Notification::EndOfHistory { sub, missing, .. }) => {
                self.checked(&sub, missing.is_empty());
            }
            Input::AttemptEnded { key, number, outcome } => {
                self.runs.attempt_ended(&key, number, outcome, self.now.at);
                self.run_steps();
            }
            Input::Answer { .. } | Input::Published { .. } | Input::Broker(_) => {
                unreachable!("taken in AgentCore::handle")
            }
        }
    }

    /// A publication matching some of the agent's subscriptions `subs`.
    fn publication(&mut self, subs: &[MessageId], publication: &Publication) {
        let mut applications: Vec<String> =
            subs.iter().filter_map(|s| self.event_subs.get(s)).cloned().collect();
        applications.dedup();
        for appl in &applications {
            self.event(appl, publication);
        }
        let mut others = false;
        for sub in subs {
            if self.pool_loads.values().any(|(id, _)| id == sub) {
                self.load_report(publication);
            } else if let Some(appl) = self.pool_statuses.get(sub).cloned() {
                self.pool_status(&appl, publication);
            } else if self.assignments.as_ref() == Some(sub) {
                self.assigned(publication);
            } else if let Some(appl) = self.follows.get(sub).cloned() {
                self.follow(&appl, publication);
            } else if let Some(check) = self.checks.get_mut(sub) {
                if let Some(event) = StatusEvent::from_publication(&check.appl, publication) {
                    check.generation.record(event);
                }
            } else if !self.event_subs.contains_key(sub) && publication.class() == "agent_ctl" {
                // (A publication of a subscription just withdrawn is let go.)
                others = true;
            }
        }
        if others {
            self.control(publication);
        }
    }

    /// Asks the broker `message` (or, if it cannot be made, answers at once why not),
    /// doing `then` with the answer.
    pub(super) fn ask(&mut self, message: Result<Message, String>, then: Then) {
        let token = self.next_token;
        self.next_token += 1;
        if !matches!(then, Then::Nothing) {
            self.waiting_for += 1;
        }
        self.asked.insert(token, then);
        match message {
            Ok(message) => self.out.push_back(Output::Request { token, message }),
            Err(why) => self.immediate.push_back((token, Err(why))),
        }
    }

    /// Subscription text `text` as a message (relative times fixed now).
    pub(super) fn parse(&self, text: &str) -> Result<Message, String> {
        let at = Timestamp::from_millis(self.now.wall_ms).unwrap_or_else(padres_client::check::now);
        padres_client::check::default_parser().at(at).message(text).map_err(|e| e.to_string())
    }

    /// Withdraws subscription `sub`, not waiting for the answer.
    pub(super) fn unsubscribe(&mut self, sub: MessageId) {
        self.ask(Ok(Message::Unsubscribe(sub)), Then::Nothing);
    }

    /// Withdraws `subs` and `advs`, not waiting for the answers.
    pub(super) fn withdraw_all(&mut self, subs: Vec<MessageId>, advs: Vec<MessageId>) {
        for sub in subs {
            self.unsubscribe(sub);
        }
        for adv in advs {
            self.ask(Ok(Message::Unadvertise(adv)), Then::Nothing);
        }
    }

    /// The answer to request `token`.
    fn answered(&mut self, token: u64, answer: Result<Option<MessageId>, String>) {
        let Some(then) = self.asked.remove(&token) else { return };
        if self.stage == Stage::Stopped {
            return;
        }
        if !matches!(then, Then::Nothing) {
            self.waiting_for = self.waiting_for.saturating_sub(1);
        }
        match then {
            Then::Nothing => {}
            Then::Needed(what) => {
                if let Err(why) = answer {
                    self.fatal(format!("the broker refused {what}: {why}"));
                }
            }
            Then::Check { appl, gid } => self.check_made(appl, gid, answer),
            Then::Deploy(index) => self.deploy_answered(index, answer),
            Then::Interrupted(entry) => match answer {
                Ok(_) => self.interrupted(&entry),
                Err(why) => self.fatal(format!(
                    "the broker refused the status advertisement of {}/{}: {why}",
                    entry.appl, entry.job
                )),
            },
            Then::Assigned(publication) => {
                if let Err(e) = answer {
                    let (appl, job) = (text(&publication, "appl"), text(&publication, "job"));
                    tracing::warn!(
                        "{}/{}: its status advertisement: {e}",
                        appl.unwrap_or(""),
                        job.unwrap_or("")
                    );
                }
                self.run_assigned(&publication);
            }
            Then::Assignments => match answer {
                Ok(sub) => self.assignments = sub,
                Err(why) => self.fatal(format!("the broker refused its pool subscription: {why}")),
            },
            Then::PoolLoads(pool) => match answer {
                Ok(Some(sub)) => {
                    self.pool_loads.insert(pool, (sub, self.now.at));
                }
                Ok(None) => {}
                Err(why) => self.fatal(format!("the broker refused the load reports of pool {pool}: {why}")),
            },
        }
    }

    pub(super) fn journal(&mut self) -> &mut dyn Store {
        self.journal.as_mut()
    }

    /// The journal, to read.
    pub(super) fn store(&self) -> &dyn Store {
        self.journal.as_ref()
    }

    /// The agent's monotonic milliseconds.
    pub(super) fn clock(&self) -> u64 {
        u64::try_from(self.now.at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn push(&mut self, output: Output) {
        self.out.push_back(output);
    }

    /// `key` (appl, gid, job) is no longer running here.
    pub(super) fn not_running(&mut self, key: &Key) {
        self.running.remove(key);
    }

    /// `key` ended without running a process: journal, then status.
    pub(super) fn finish(&mut self, key: &Key, status: Status) {
        if let Err(e) = self.journal().end(&key.0, &key.1, &key.2, status.status, status.exit, status.attempt)
        {
            tracing::warn!("{}/{}/{}: journal: {e}", key.0, key.1, key.2);
        }
        self.send(status);
    }

    /// Runs job `key` (claimed, and marked running) from attempt `first`, when a slot is
    /// free ([`Runs`]): `started` for each attempt, its outcome at the end, in the journal
    /// and published (with the tail of the last attempt's output). A pool job (`pool`) has
    /// its pool in its statuses, and dies with the agent.
    pub(super) fn spawn_run(
        &mut self,
        key: Key,
        info: Arc<JobInfo>,
        date: String,
        first: u32,
        pool: Option<String>,
    ) {
        self.runs.order(runs::Order { key, info, date, first, pool }, self.now.at);
        self.run_steps();
    }

    /// Carries out what [`Runs`] decided: attempts recorded and published `started`
    /// before they run, and runs' ends recorded, then published.
    pub(super) fn run_steps(&mut self) {
        while let Some(step) = self.runs.poll_step() {
            match step {
                runs::Step::Started { key, number, pool } => {
                    let (appl, gid, job) = &key;
                    if let Err(e) = self.journal.attempt(appl, gid, job, number) {
                        tracing::warn!("{appl}/{gid}/{job}: journal: {e}");
                    }
                    let extra = pool.map(|p| ("pool", padres_lang::Value::str(&p))).into_iter().collect();
                    self.send(Status::new(&key, "started", 0, number).with(extra));
                }
                runs::Step::Attempt { key, info, date, number, die_with_agent } => {
                    self.out.push_back(Output::Attempt { key, info, date, number, die_with_agent });
                }
                runs::Step::Ended { key, number, outcome, pool } => {
                    let extra = pool.map(|p| ("pool", padres_lang::Value::str(&p))).into_iter().collect();
                    let status = Status::new(&key, outcome.status, outcome.exit, number)
                        .because(outcome.reason)
                        .with(extra)
                        .with(vec![("output", padres_lang::Value::str(&outcome.output))]);
                    let (appl, gid, job) = &key;
                    if let Err(e) = self.journal.end(appl, gid, job, status.status, status.exit, number) {
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

    /// The publisher's decisions carried out: writes asked of the driver, what the broker
    /// took out of the journal's outbox, refused triggers' generations let go.
    pub(super) fn pump_publisher(&mut self) {
        while let Some(action) = self.publisher.poll_action() {
            match action {
                super::outbox::Action::Write { token, publication, round } => {
                    self.out.push_back(Output::Write { token, publication, round });
                }
                super::outbox::Action::Done { seq, what } => {
                    if let Err(e) = self.journal.outbox_done(seq) {
                        tracing::warn!(
                            "{what}: sent, but still in the outbox ({e}): it may be sent again after a restart"
                        );
                    }
                }
                // Taken once the agent waits for nothing (not in the middle of a deploy).
                super::outbox::Action::Tell(refused) => self.refused.push_back(refused),
            }
        }
    }
}
