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
//! Statuses and replies are published in the order they happen, each
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
//!
//! # Shape
//! Every decision is [`AgentCore`]'s (`agent/core.rs`), a sans-IO state machine handed
//! inputs with the time; [`serve`] is its driver over a client, a journal file and
//! processes. The concepts live in files named after them: `deploy.rs` (deployments and
//! versions), `control.rs` (operators' commands), `generations.rs` (generations started,
//! followed, ended), `starts.rs` (when the home agent starts one), `claims.rs` (a job once
//! per generation), `runs.rs` (job runs and retries), `outbox.rs` (publications in
//! order), `catch_up.rs` (reading history), `pools.rs` (pool members and dispatch).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use padres_client::{Client, ClientError, Notification};
use padres_lang::{Message, Publication, Value};

use crate::job::{DEFAULT_OUTPUT_CAP, Run};
use crate::journal::Journal;

mod catch_up;
mod claims;
mod control;
mod core;
mod deploy;
mod generations;
mod outbox;
mod pools;
mod runs;
mod starts;
#[cfg(test)]
mod tests;
pub use self::core::{AgentCore, Input, Now, Outcome, Output, PublishFailure};

/// How an agent's job attempts run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Runner {
    /// Each attempt is its command, run as processes ([`crate::job`]).
    #[default]
    Processes,
    /// Each attempt succeeds at once, exit 0, with no process started: everything else
    /// (claims in the journal, statuses, detection, dispatch) is as with processes. For
    /// measuring the scheduler apart from process spawns (`padres-bench workflow`); no
    /// command runs.
    Instant,
}

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
    /// How job attempts run: as processes, but for benchmarks.
    pub runner: Runner,
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
            runner: Runner::Processes,
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
    /// The broker refused what the agent needs to run, or its journal failed it.
    #[error("{0}")]
    Refused(String),
    /// The work directory cannot be created.
    #[error("work directory {0}: {1}")]
    WorkDir(PathBuf, std::io::Error),
}

/// How long a replaced version is kept at least, for generations other agents (the home
/// agent, not yet given the new version) start on it meanwhile.
pub const RETIRE_GRACE: Duration = Duration::from_secs(120);

/// Most matches claimed in one transaction.
const CLAIM_BATCH: usize = 256;

/// Serves as agent `options.name` over `client` until its connection ends for good (or
/// it is drained and leaves): the driver of an [`AgentCore`].
///
/// Requests to the broker are made one at a time, in order; publications are written in
/// order, their answers awaited in that order; each job attempt runs in a task of its
/// own; notifications are taken off the connection by a task of their own into an
/// unbounded queue (the connection could not read the broker's answers while its bounded
/// queue of notifications were full). Dependency matches that have come together are
/// handed in together, to be claimed in one transaction.
///
/// # Errors
/// The broker refused the agent's own advertisements or subscriptions, or the journal
/// cannot be opened.
pub async fn serve(mut client: Client, options: Options) -> Result<(), AgentError> {
    std::fs::create_dir_all(&options.work_dir)
        .map_err(|e| AgentError::WorkDir(options.work_dir.clone(), e))?;
    let journal = Journal::open(&options.work_dir)?;
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
    let (inputs, mut from_tasks) = mpsc::unbounded_channel::<Input>();
    let requests = requests(client.clone(), inputs.clone());
    let writes = writes(client.clone(), inputs.clone());
    let work_dir = options.work_dir.clone();
    let runner = options.runner;
    let mut broker = client.broker_name();
    let mut core = AgentCore::new(options, Box::new(journal), Now::read(), broker.to_string());
    // A notification taken while gathering a batch of matches, handled next.
    let mut deferred: Option<Notification> = None;
    let mut stopping = false;
    loop {
        while let Some(output) = core.poll_output() {
            match output {
                Output::Request { token, message } => {
                    let _ = requests.send((token, message));
                }
                Output::Write { token, publication, round } => {
                    let _ = writes.send((token, publication, round));
                }
                Output::Attempt { key, number, .. } if runner == Runner::Instant => {
                    let status = crate::job::Ended::Exited(0).status();
                    let outcome = Outcome { status, exit: 0, reason: None, output: String::new() };
                    let _ = inputs.send(Input::AttemptEnded { key, number, outcome });
                }
                Output::Attempt { key, info, date, number, die_with_agent } => {
                    let (inputs, work_dir) = (inputs.clone(), work_dir.clone());
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
                        let outcome = Outcome {
                            status: attempt.ended.status(),
                            exit: attempt.ended.exit(),
                            reason: attempt.ended.reason(),
                            output: crate::job::tail(&attempt).await,
                        };
                        let _ = inputs.send(Input::AttemptEnded { key, number, outcome });
                    });
                }
                Output::Command { command, env, what } => run_command(&work_dir, command, env, what),
                Output::Leave => stopping = true,
                Output::Fatal(why) => return Err(AgentError::Refused(why)),
            }
        }
        // Once stopping, what runs ends and what is queued is sent before the agent stops.
        if stopping && core.is_idle() {
            break;
        }
        let deadline = core.poll_timeout();
        tokio::select! {
            notification = async { match deferred.take() { Some(n) => Some(n), None => notifications.recv().await } }, if !stopping => {
                let input = match notification {
                    Some(Notification::Composite { sub, pubs }) => {
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
                        Input::Matches(batch)
                    }
                    Some(notification) => Input::Notification(notification),
                    None => {
                        stopping = true;
                        core.stop();
                        continue;
                    }
                };
                core.handle(Now::read(), input);
            }
            Some(input) = from_tasks.recv() => core.handle(Now::read(), input),
            () = until(deadline) => core.handle_timeout(Now::read(), notifications.is_empty()),
        }
        let now_on = client.broker_name();
        if now_on != broker {
            core.handle(Now::read(), Input::Broker(now_on.to_string()));
            broker = now_on;
        }
    }
    Ok(())
}

/// Makes the requests it is given one at a time, in order, and hands back each answer.
fn requests(
    client: Arc<Client>,
    inputs: mpsc::UnboundedSender<Input>,
) -> mpsc::UnboundedSender<(u64, Message)> {
    let (asks, mut to_ask) = mpsc::unbounded_channel::<(u64, Message)>();
    tokio::spawn(async move {
        while let Some((token, message)) = to_ask.recv().await {
            let answer = client.request(message).await.map_err(|e| e.to_string());
            if inputs.send(Input::Answer { token, answer }).is_err() {
                break;
            }
        }
    });
    asks
}

/// Writes the publications it is given in order, and hands back the broker's answers
/// (awaited in the order of the writes: the broker answers in that order; a lost session
/// fails them all). After a write fails, the rest of its round is answered not sent,
/// unwritten ([`Output::Write`]).
fn writes(
    client: Arc<Client>,
    inputs: mpsc::UnboundedSender<Input>,
) -> mpsc::UnboundedSender<(u64, Publication, u64)> {
    let (writes, mut to_write) = mpsc::unbounded_channel::<(u64, Publication, u64)>();
    let (acks, mut to_await) = mpsc::unbounded_channel::<(u64, padres_client::Ack)>();
    let answers = inputs.clone();
    tokio::spawn(async move {
        while let Some((token, ack)) = to_await.recv().await {
            let answer = ack.wait().await.map_err(PublishFailure::from);
            if answers.send(Input::Published { token, answer }).is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut failed: Option<u64> = None;
        while let Some((token, publication, round)) = to_write.recv().await {
            if failed.is_some_and(|f| round <= f) {
                let answer = Err(PublishFailure::NotSent("one before it could not be written".to_owned()));
                let _ = inputs.send(Input::Published { token, answer });
                continue;
            }
            match client.publish_acked_later(publication).await {
                Ok(ack) => {
                    let _ = acks.send((token, ack));
                }
                Err(e) => {
                    failed = Some(round);
                    let _ = inputs.send(Input::Published { token, answer: Err(e.into()) });
                }
            }
        }
    });
    writes
}

/// Runs a provisioning command (`sh -c`) with `env` in `work_dir`, its output appended to
/// `provision.log` there.
fn run_command(work_dir: &std::path::Path, command: String, env: Vec<(&'static str, String)>, what: String) {
    let work_dir = work_dir.to_owned();
    tokio::spawn(async move {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(work_dir.join("provision.log"));
        let mut run = tokio::process::Command::new("sh");
        run.arg("-c").arg(&command).current_dir(&work_dir).envs(env).stdin(std::process::Stdio::null());
        if let Ok(log) = log
            && let Ok(err) = log.try_clone()
        {
            run.stdout(log).stderr(err);
        }
        match run.status().await {
            Ok(status) if status.success() => tracing::info!("{what} command ran"),
            Ok(status) => tracing::warn!("{what} command: {status}"),
            Err(e) => tracing::warn!("{what} command cannot start: {e}"),
        }
    });
}

/// Resolves at monotonic time `at`, never without one.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn text<'a>(publication: &'a Publication, attr: &str) -> Option<&'a str> {
    publication.get(attr).and_then(Value::as_str)
}
