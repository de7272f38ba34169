//! Job runs: which claimed jobs run now (at most `max_parallel` at once, the others in the
//! order they came), each attempt, and the retries of a job that did not succeed.
//!
//! Sans-IO: the agent orders a run ([`Runs::order`]) once the job is claimed; [`Runs`]
//! says when each attempt starts ([`Step::Started`], which the agent records and publishes
//! before the attempt's process starts), asks for the attempt ([`Step::Attempt`], which
//! the driver carries out with [`crate::job::Run::attempt`]), takes the attempt's outcome
//! ([`Runs::attempt_ended`]) and either waits the job's backoff ([`crate::job::backoff`])
//! and starts the next attempt, or says the run has ended ([`Step::Ended`]). A run keeps
//! its slot through its retries. Times are the driver's monotonic clock, handed in.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use padres_workflow::JobInfo;

use crate::pool::Meter;

/// (appl, gid, job).
type Key = (String, String, String);

/// A claimed job to run, from attempt `first`.
#[derive(Debug)]
pub(super) struct Order {
    pub(super) key: Key,
    pub(super) info: Arc<JobInfo>,
    /// The generation's run day.
    pub(super) date: String,
    pub(super) first: u32,
    /// A pool job's pool (its statuses say it, and its process dies with the agent).
    pub(super) pool: Option<String>,
}

/// How an attempt ended, as the driver saw it.
#[derive(Debug)]
pub struct Outcome {
    /// `succeeded`, `failed` or `timeout`.
    pub status: &'static str,
    /// Its exit status (-1 when it has none).
    pub exit: i64,
    /// Why it failed, when the process did not say.
    pub reason: Option<String>,
    /// The tail of its output.
    pub output: String,
}

/// What the agent and its driver are to do.
#[derive(Debug)]
pub(super) enum Step {
    /// Attempt `number` of `key` starts: recorded and published `started` (with `pool`).
    Started { key: Key, number: u32, pool: Option<String> },
    /// Run attempt `number` of `key` (the driver's part; the outcome comes back through
    /// [`Runs::attempt_ended`]).
    Attempt { key: Key, info: Arc<JobInfo>, date: String, number: u32, die_with_agent: bool },
    /// The run of `key` has ended with attempt `number`, as `outcome` says: recorded and
    /// published.
    Ended { key: Key, number: u32, outcome: Outcome, pool: Option<String> },
}

/// A run holding a slot.
#[derive(Debug)]
struct Active {
    order: Order,
    /// The attempt running, or the last one (while waiting to retry).
    number: u32,
    /// When the next attempt starts, while waiting for it.
    retry_at: Option<Instant>,
}

/// The runs ordered and running (the module docs give the rules).
#[derive(Debug)]
pub(super) struct Runs {
    slots: usize,
    waiting: VecDeque<(Order, u64)>,
    active: HashMap<Key, Active>,
    /// Arrivals, waits and starts, for the agent's load reports.
    pub(super) meter: Meter,
    steps: VecDeque<Step>,
}

impl Runs {
    /// At most `slots` runs at once (at least one).
    pub(super) fn new(slots: usize) -> Self {
        Self {
            slots: slots.max(1),
            waiting: VecDeque::new(),
            active: HashMap::new(),
            meter: Meter::default(),
            steps: VecDeque::new(),
        }
    }

    /// Runs `order` when a slot is free (at once if one is).
    pub(super) fn order(&mut self, order: Order, now: Instant) {
        let ticket = self.meter.arrive(now);
        self.waiting.push_back((order, ticket));
        self.fill(now);
    }

    /// Attempt `number` of `key` ended as `outcome` says.
    pub(super) fn attempt_ended(&mut self, key: &Key, number: u32, outcome: Outcome, now: Instant) {
        let Some(active) = self.active.get_mut(key) else { return };
        if active.number != number || active.retry_at.is_some() {
            return;
        }
        let first = active.order.first.max(1);
        let last = first.saturating_add(active.order.info.retries);
        if outcome.status != "succeeded" && number < last {
            let wait = crate::job::backoff(&active.order.info, number + 1 - first);
            active.retry_at = Some(now + wait);
            return;
        }
        let Some(Active { order, .. }) = self.active.remove(key) else { return };
        self.meter.end();
        self.steps.push_back(Step::Ended { key: order.key, number, outcome, pool: order.pool });
        self.fill(now);
    }

    /// When [`Runs::handle_timeout`] is due: the next retry.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.active.values().filter_map(|a| a.retry_at).min()
    }

    /// Starts the retries that are due.
    pub(super) fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<(Instant, Key)> = self
            .active
            .iter()
            .filter_map(|(key, a)| a.retry_at.filter(|at| *at <= now).map(|at| (at, key.clone())))
            .collect();
        due.sort();
        for (_, key) in due {
            let Some(active) = self.active.get_mut(&key) else { continue };
            active.retry_at = None;
            active.number += 1;
            let number = active.number;
            Self::attempt(&mut self.steps, &active.order, number);
        }
    }

    /// The next step.
    pub(super) fn poll_step(&mut self) -> Option<Step> {
        self.steps.pop_front()
    }

    /// No run is waiting for a slot or holding one.
    pub(super) fn is_idle(&self) -> bool {
        self.active.is_empty() && self.waiting.is_empty()
    }

    fn fill(&mut self, now: Instant) {
        while self.active.len() < self.slots {
            let Some((order, ticket)) = self.waiting.pop_front() else { break };
            self.meter.start(ticket, now);
            let number = order.first.max(1);
            Self::attempt(&mut self.steps, &order, number);
            self.active.insert(order.key.clone(), Active { order, number, retry_at: None });
        }
    }

    fn attempt(steps: &mut VecDeque<Step>, order: &Order, number: u32) {
        let (key, pool) = (order.key.clone(), order.pool.clone());
        steps.push_back(Step::Started { key: key.clone(), number, pool });
        steps.push_back(Step::Attempt {
            key,
            info: order.info.clone(),
            date: order.date.clone(),
            number,
            die_with_agent: order.pool.is_some(),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn info(retries: u32, backoff_ms: u64) -> Arc<JobInfo> {
        Arc::new(JobInfo {
            run: "daily".to_owned(),
            except: None,
            holiday: "run".to_owned(),
            command: "true".to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            workdir: None,
            timeout_ms: None,
            retries,
            backoff_ms: Some(backoff_ms),
        })
    }

    fn key(job: &str) -> Key {
        ("payroll".to_owned(), "g1".to_owned(), job.to_owned())
    }

    fn order(job: &str, info: Arc<JobInfo>) -> Order {
        Order { key: key(job), info, date: "2026-11-27".to_owned(), first: 1, pool: None }
    }

    fn outcome(status: &'static str) -> Outcome {
        Outcome { status, exit: i64::from(status != "succeeded"), reason: None, output: String::new() }
    }

    /// The steps so far, in words: "started A 1", "attempt A 1", "ended A 2 failed".
    fn steps(runs: &mut Runs) -> Vec<String> {
        std::iter::from_fn(|| runs.poll_step())
            .map(|step| match step {
                Step::Started { key, number, .. } => format!("started {} {number}", key.2),
                Step::Attempt { key, number, .. } => format!("attempt {} {number}", key.2),
                Step::Ended { key, number, outcome, .. } => {
                    format!("ended {} {number} {}", key.2, outcome.status)
                }
            })
            .collect()
    }

    #[test]
    fn at_most_the_slots_run_and_the_others_start_in_order_as_slots_free() {
        let t0 = Instant::now();
        let mut runs = Runs::new(2);
        for job in ["A", "B", "C", "D"] {
            runs.order(order(job, info(0, 10)), t0);
        }
        assert_eq!(steps(&mut runs), ["started A 1", "attempt A 1", "started B 1", "attempt B 1"]);
        assert_eq!((runs.meter.running(), runs.meter.queued()), (2, 2));
        runs.attempt_ended(&key("B"), 1, outcome("succeeded"), t0 + Duration::from_secs(1));
        assert_eq!(steps(&mut runs), ["ended B 1 succeeded", "started C 1", "attempt C 1"]);
        runs.attempt_ended(&key("A"), 1, outcome("failed"), t0 + Duration::from_secs(2));
        assert_eq!(steps(&mut runs), ["ended A 1 failed", "started D 1", "attempt D 1"]);
        assert_eq!((runs.meter.running(), runs.meter.queued()), (2, 0));
    }

    #[test]
    fn a_failed_attempt_is_retried_after_its_backoff_doubling_and_keeps_its_slot() {
        let t0 = Instant::now();
        let mut runs = Runs::new(1);
        runs.order(order("A", info(3, 100)), t0);
        runs.order(order("B", info(0, 100)), t0);
        assert_eq!(steps(&mut runs), ["started A 1", "attempt A 1"]);
        let mut now = t0;
        let mut waits = Vec::new();
        for number in 1..=3 {
            runs.attempt_ended(&key("A"), number, outcome("failed"), now);
            let at = runs.poll_timeout().expect("a retry waits");
            waits.push(at - now);
            runs.handle_timeout(at - Duration::from_millis(1));
            assert!(steps(&mut runs).is_empty(), "not before its backoff");
            now = at;
            runs.handle_timeout(now);
            let next = number + 1;
            assert_eq!(steps(&mut runs), [format!("started A {next}"), format!("attempt A {next}")]);
        }
        assert_eq!(waits, [100, 200, 400].map(Duration::from_millis), "the backoff doubles");
        // The last attempt's failure ends the run; B, waiting all along, starts.
        runs.attempt_ended(&key("A"), 4, outcome("timeout"), now);
        assert_eq!(steps(&mut runs), ["ended A 4 timeout", "started B 1", "attempt B 1"]);
        assert_eq!(runs.poll_timeout(), None);
    }

    #[test]
    fn a_success_ends_the_run_whatever_retries_are_left() {
        let t0 = Instant::now();
        let mut runs = Runs::new(1);
        runs.order(Order { first: 3, ..order("A", info(2, 100)) }, t0);
        assert_eq!(steps(&mut runs), ["started A 3", "attempt A 3"], "numbered on from the first");
        runs.attempt_ended(&key("A"), 3, outcome("failed"), t0);
        runs.handle_timeout(t0 + Duration::from_millis(100));
        assert_eq!(steps(&mut runs), ["started A 4", "attempt A 4"]);
        // An outcome of an attempt other than the one running is let go.
        runs.attempt_ended(&key("A"), 3, outcome("succeeded"), t0 + Duration::from_millis(150));
        assert!(steps(&mut runs).is_empty());
        runs.attempt_ended(&key("A"), 4, outcome("succeeded"), t0 + Duration::from_millis(200));
        assert_eq!(steps(&mut runs), ["ended A 4 succeeded"]);
        assert!(runs.is_idle());
    }
}
