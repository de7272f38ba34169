//! What became of a generation: each job's state from the `job_status` publications seen
//! (live or historic, in any order, repeated or not), and whether the generation has
//! ended, can still go on, or is stuck after a failure (what `padres workflow status`,
//! `watch` and `wait` show).
//!
//! A job's latest status is the one with the highest attempt, an end above a `started` of
//! the same attempt: a rerun's attempts follow the failed ones, and an operator's bypass
//! is published as the attempt after the last, so seeing statuses out of order or twice
//! changes nothing.
//!
//! A generation is stuck when `APPL_END` can no longer run (some dependency on its way
//! waits for a status that a job ended without) and nothing runs or is about to: no job
//! has started without ending and no job waits with its dependencies met (or refused for
//! good by a final status, which makes its agent skip it: see [`Generation::cannot_run`]). An operator's
//! rerun or bypass unsticks it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use padres_lang::{Publication, Value};

use super::translate::{APPL_END, EnvelopeBody, FINAL, Need};

/// The jobs of a deployed application, from its agents' envelope bodies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each job (virtual ones included): its agent and dependencies.
    pub jobs: BTreeMap<String, Planned>,
    /// The agents it is deployed on.
    pub agents: BTreeSet<String>,
}

/// A job of a [`Plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The agent that runs it (for a pool job, the home agent that dispatches it).
    pub agent: String,
    /// What it waits for (all of them).
    pub after: Vec<Need>,
    /// For a pool job, its pool.
    pub pool: Option<String>,
}

impl Planned {
    /// Who runs it, as `state` says: its agent; for a pool job the member that started
    /// or ended it, or `pool P` before one has.
    pub fn runner(&self, state: &State) -> String {
        match (&self.pool, state) {
            (Some(_), State::Running(e) | State::Ended(e)) if e.status != "dispatched" => e.agent.clone(),
            (Some(pool), _) => format!("pool {pool}"),
            (None, _) => self.agent.clone(),
        }
    }
}

impl Plan {
    /// Adds the jobs of agent `agent`'s envelope `body`.
    pub fn add(&mut self, agent: &str, body: &EnvelopeBody) {
        self.agents.insert(agent.to_owned());
        for job in &body.jobs {
            let pool = job.pool.as_ref().map(|p| p.name.clone());
            let planned = Planned { agent: agent.to_owned(), after: job.after.clone(), pool };
            self.jobs.insert(job.job.clone(), planned);
        }
    }

    /// Removes the jobs of agent `agent`.
    pub fn remove_agent(&mut self, agent: &str) {
        self.agents.remove(agent);
        self.jobs.retain(|_, planned| planned.agent != agent);
    }
}

/// One `job_status` publication, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusEvent {
    /// The generation.
    pub gid: String,
    /// The job.
    pub job: String,
    /// The agent that published it.
    pub agent: String,
    /// `started`, `succeeded`, `failed`, `timeout` or `skipped`.
    pub status: String,
    /// The exit status.
    pub exit: i64,
    /// The attempt (0 for a job that did not run).
    pub attempt: u32,
    /// Why, when the process did not say (see [`crate::translate::status_advertisement`]).
    pub reason: Option<String>,
    /// When its broker received it (epoch milliseconds).
    pub time: Option<i64>,
    /// The end of the run's output, on the status that ends a run (`output`).
    pub output: Option<String>,
}

impl StatusEvent {
    /// Reads a `job_status` publication of `appl`; `None` for anything else.
    pub fn from_publication(appl: &str, publication: &Publication) -> Option<Self> {
        let text = |name: &str| publication.get(name).and_then(Value::as_str).map(str::to_owned);
        let int = |name: &str| match publication.get(name) {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        };
        if publication.class() != "job_status" || text("appl")? != appl {
            return None;
        }
        Some(Self {
            gid: text("gid")?,
            job: text("job")?,
            agent: text("agent").unwrap_or_default(),
            status: text("status")?,
            exit: int("exit").unwrap_or(0),
            attempt: int("attempt").and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
            reason: text("reason").filter(|r| !r.is_empty()),
            time: publication.time().map(padres_lang::Timestamp::millis),
            output: text("output"),
        })
    }

    /// Whether it is an end (not `started`, nor a pool job's `dispatched`).
    pub fn ended(&self) -> bool {
        !matches!(self.status.as_str(), "started" | "dispatched")
    }

    /// Its place among a job's statuses: later attempts above; within an attempt, an end
    /// above a start above a dispatch (a pool job's, numbered with the attempt its member
    /// starts from).
    fn rank(&self) -> (u32, u8) {
        let step = match self.status.as_str() {
            "dispatched" => 0,
            "started" => 1,
            _ => 2,
        };
        (self.attempt, step)
    }
}

/// A job's state in a generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// No status yet.
    Waiting,
    /// Started (this attempt) and not ended.
    Running(StatusEvent),
    /// Ended.
    Ended(StatusEvent),
}

impl State {
    /// A word for it: `waiting`, `dispatched` (a pool job given to a member that has not
    /// started it), `running`, or the status it ended with.
    pub fn word(&self) -> &str {
        match self {
            Self::Waiting => "waiting",
            Self::Running(e) if e.status == "dispatched" => "dispatched",
            Self::Running(_) => "running",
            Self::Ended(e) => &e.status,
        }
    }
}

/// Where a generation stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Jobs run or are about to.
    Running,
    /// `APPL_END` succeeded: every job ended as its successors needed.
    Succeeded,
    /// Nothing can proceed: these jobs failed or timed out (and `APPL_END` cannot run).
    Stuck(Vec<String>),
}

/// One generation's jobs, as their statuses say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Generation {
    /// Each job's latest status.
    latest: HashMap<String, StatusEvent>,
    /// Each job's latest status from each agent (what a dependency naming the agent that
    /// runs the job counts).
    by_agent: HashMap<String, HashMap<String, StatusEvent>>,
    /// Every distinct status seen, in the order first seen.
    pub events: Vec<StatusEvent>,
}

impl Generation {
    /// Records a status; a repeat (same job, attempt, status and agent) is ignored. True
    /// if it was new. (The agent is part of it: a status another agent published first
    /// must not hide the one of the agent that runs the job, which dependencies count.)
    pub fn record(&mut self, event: StatusEvent) -> bool {
        let repeat = self.events.iter().any(|e| {
            e.job == event.job
                && e.attempt == event.attempt
                && e.status == event.status
                && e.agent == event.agent
        });
        if repeat {
            return false;
        }
        let newer = self.latest.get(&event.job).is_none_or(|seen| event.rank() > seen.rank());
        if newer {
            self.latest.insert(event.job.clone(), event.clone());
        }
        let by = self.by_agent.entry(event.job.clone()).or_default();
        if by.get(&event.agent).is_none_or(|seen| event.rank() > seen.rank()) {
            by.insert(event.agent.clone(), event.clone());
        }
        self.events.push(event);
        true
    }

    /// Job `job`'s state.
    pub fn state(&self, job: &str) -> State {
        Self::state_from(self.latest.get(job))
    }

    /// Job `job`'s state as agent `agent`'s statuses of it say (all statuses if `None`):
    /// what a dependency naming the agent that runs the job counts.
    pub fn state_by(&self, job: &str, agent: Option<&str>) -> State {
        let Some(agent) = agent else { return self.state(job) };
        Self::state_from(self.by_agent.get(job).and_then(|by| by.get(agent)))
    }

    /// Job `job`'s state as `plan` says who runs it: its agent's statuses (any agent's for
    /// a pool job, or a job not in the plan).
    pub fn planned_state(&self, plan: &Plan, job: &str) -> State {
        let runner = plan.jobs.get(job).filter(|p| p.pool.is_none()).map(|p| p.agent.as_str());
        self.state_by(job, runner)
    }

    /// Pool job `job`'s latest dispatch (the home agent's `dispatched` of its highest
    /// attempt): to whom and why it was given out, which its member's statuses after it
    /// no longer say.
    pub fn last_dispatch(&self, job: &str) -> Option<&StatusEvent> {
        self.events.iter().filter(|e| e.job == job && e.status == "dispatched").max_by_key(|e| e.attempt)
    }

    fn state_from(latest: Option<&StatusEvent>) -> State {
        match latest {
            None => State::Waiting,
            Some(e) if e.ended() => State::Ended(e.clone()),
            Some(e) => State::Running(e.clone()),
        }
    }

    /// The generation's outcome under `plan`.
    pub fn outcome(&self, plan: &Plan) -> Outcome {
        if let State::Ended(end) = self.planned_state(plan, APPL_END)
            && end.status == "succeeded"
        {
            return Outcome::Succeeded;
        }
        let mut fates: HashMap<&str, Fate> = HashMap::new();
        let end_possible = match self.planned_state(plan, APPL_END) {
            State::Waiting => self.fate(plan, APPL_END, &mut fates, 0) != Fate::Blocked,
            _ => true,
        };
        let active = plan.jobs.iter().any(|(job, planned)| match self.planned_state(plan, job) {
            State::Running(_) => true,
            State::Waiting => self.ready(&planned.after) || self.cannot_run(&planned.after),
            State::Ended(_) => false,
        });
        if end_possible || active {
            return Outcome::Running;
        }
        let failed = plan
            .jobs
            .keys()
            .filter(|job| {
                matches!(self.planned_state(plan, job), State::Ended(e) if e.status == "failed" || e.status == "timeout")
            })
            .cloned()
            .collect();
        Outcome::Stuck(failed)
    }

    /// Whether every one of `after` (a job's dependencies) is met now: the job may run.
    pub fn ready(&self, after: &[Need]) -> bool {
        after.iter().all(|need| self.met(need))
    }

    /// Whether a job waiting for `after` is to be skipped: one of them can never be met (a
    /// predecessor ended with a final status, [`FINAL`]: no rerun or bypass changes it,
    /// that the dependency refuses), and every other one is decided too (met, or refused
    /// for good), so that skipping it releases its successors only after all its
    /// predecessors ended as they will. A job with a predecessor that failed (or has not
    /// ended) waits, as any job after a failure does (see
    /// `unless_of` in `translate.rs`).
    pub fn cannot_run(&self, after: &[Need]) -> bool {
        after.iter().any(|need| self.refused(need))
            && after.iter().all(|need| self.met(need) || self.refused(need))
    }

    /// How long job `job` of `plan` waited from its dependencies being met to its first
    /// `started`, in milliseconds, by the stamps of the brokers that took the statuses:
    /// `None` for a job that has not started, waits for nothing, or whose statuses carry
    /// no time.
    pub fn waited_ms(&self, plan: &Plan, job: &str) -> Option<i64> {
        let after = &plan.jobs.get(job)?.after;
        let met =
            after.iter().map(|need| self.met_at(need)).collect::<Option<Vec<_>>>()?.into_iter().max()?;
        let started = self
            .events
            .iter()
            .filter(|e| e.job == job && e.status == "started")
            .filter_map(|e| e.time)
            .min()?;
        Some(started - met)
    }

    /// When `need` was first met, by its status's stamp.
    fn met_at(&self, need: &Need) -> Option<i64> {
        match need {
            Need::After { job, statuses, agent } => self
                .events
                .iter()
                .filter(|e| &e.job == job && statuses.contains(&e.status))
                .filter(|e| agent.as_ref().is_none_or(|a| *a == e.agent))
                .filter_map(|e| e.time)
                .min(),
            Need::AnyOf(needs) => needs.iter().filter_map(|n| self.met_at(n)).min(),
        }
    }

    /// Whether `need` is met now.
    fn met(&self, need: &Need) -> bool {
        match need {
            Need::After { job, statuses, agent } => {
                matches!(self.state_by(job, agent.as_deref()), State::Ended(e) if statuses.contains(&e.status))
            }
            Need::AnyOf(needs) => needs.iter().any(|n| self.met(n)),
        }
    }

    /// Whether `need` is refused for good by final statuses.
    fn refused(&self, need: &Need) -> bool {
        match need {
            Need::After { job, statuses, agent } => matches!(
                self.state_by(job, agent.as_deref()),
                State::Ended(e) if FINAL.contains(&e.status.as_str()) && !statuses.contains(&e.status)
            ),
            Need::AnyOf(needs) => needs.iter().all(|n| self.refused(n)),
        }
    }

    /// What waiting job `job` comes to, as far as the statuses seen say.
    fn fate<'p>(&self, plan: &'p Plan, job: &str, memo: &mut HashMap<&'p str, Fate>, depth: usize) -> Fate {
        let Some((name, planned)) = plan.jobs.get_key_value(job) else { return Fate::Runs };
        if let Some(known) = memo.get(name.as_str()) {
            return *known;
        }
        // Definitions are acyclic; the depth guard only stops a malformed plan.
        let fate = if depth > plan.jobs.len() {
            Fate::Runs
        } else {
            let needs: Vec<(bool, bool)> =
                planned.after.iter().map(|need| self.foresee(plan, need, memo, depth + 1)).collect();
            // Each dependency may still be met or is refused for good: the job runs, or is
            // skipped once they are all decided. One that can neither (a failure) blocks it.
            if !needs.iter().all(|&(holds, refused)| holds || refused) {
                Fate::Blocked
            } else if needs.iter().any(|&(_, refused)| refused) {
                Fate::Skipped
            } else {
                Fate::Runs
            }
        };
        memo.insert(name.as_str(), fate);
        fate
    }

    /// Whether `need` may still be met, and whether it is (or will be) refused for good.
    fn foresee<'p>(
        &self,
        plan: &'p Plan,
        need: &Need,
        memo: &mut HashMap<&'p str, Fate>,
        depth: usize,
    ) -> (bool, bool) {
        match need {
            Need::After { job, statuses, agent } => match self.state_by(job, agent.as_deref()) {
                State::Ended(e) => {
                    let holds = statuses.contains(&e.status);
                    (holds, !holds && FINAL.contains(&e.status.as_str()))
                }
                State::Running(_) => (true, false),
                State::Waiting => match self.fate(plan, job, memo, depth) {
                    Fate::Runs => (true, false),
                    Fate::Skipped => {
                        let holds = statuses.iter().any(|s| s == "skipped");
                        (holds, !holds)
                    }
                    Fate::Blocked => (false, false),
                },
            },
            Need::AnyOf(needs) => {
                let each: Vec<(bool, bool)> =
                    needs.iter().map(|n| self.foresee(plan, n, memo, depth)).collect();
                (each.iter().any(|&(holds, _)| holds), each.iter().all(|&(_, refused)| refused))
            }
        }
    }
}

/// What a waiting job comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// It runs (or may: its dependencies can still be met).
    Runs,
    /// Its agent skips it: a dependency is refused for good.
    Skipped,
    /// It waits until an operator acts (a predecessor failed).
    Blocked,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_application, translate};

    /// Payroll.
    const XML: &str = r#"<application name="p" tz="UTC"><calendar name="c" workdays="mon-fri"/>
        <job name="A" run="daily" agent="a1"><command>true</command></job>
        <job name="B" run="daily" agent="a2"><command>true</command><after job="A"/></job>
        <job name="C" run="friday" agent="a3"><command>true</command><after job="A"/></job>
        <job name="D" run="workdays" agent="a1"><command>true</command><after job="B"/><after job="C"/></job>
        </application>"#;

    fn plan() -> Plan {
        plan_of(XML)
    }

    /// The plan of `xml` as its agents deploy it, each dependency naming the agent whose
    /// statuses count.
    fn pinned_plan_of(xml: &str) -> Plan {
        let deployment = translate(&parse_application(xml).expect("valid")).expect("translates");
        let mut plan = Plan::default();
        for envelope in &deployment.envelopes {
            plan.add(&envelope.agent, &envelope.envelope_body("p"));
        }
        plan
    }

    /// The plan of `xml`, counting any agent's statuses: the tests below record every
    /// status as one agent's ([`event`]); which agent's count is tested apart
    /// (`a_dependency_counts_only_the_statuses_of_the_agent_that_runs_the_job`).
    fn plan_of(xml: &str) -> Plan {
        fn any_agent(need: &mut Need) {
            match need {
                Need::After { agent, .. } => *agent = None,
                Need::AnyOf(needs) => needs.iter_mut().for_each(any_agent),
            }
        }
        let mut plan = pinned_plan_of(xml);
        for planned in plan.jobs.values_mut() {
            planned.after.iter_mut().for_each(any_agent);
            "a".clone_into(&mut planned.agent);
        }
        plan
    }

    /// `job`'s status (attempt 1) published by `agent`.
    fn by(job: &str, status: &str, agent: &str) -> StatusEvent {
        StatusEvent { agent: agent.into(), ..event(job, status, 1) }
    }

    #[test]
    fn a_dependency_counts_only_the_statuses_of_the_agent_that_runs_the_job() {
        let plan = pinned_plan_of(XML);
        let after_b = plan.jobs["B"].after.clone();
        let mut g = Generation::default();
        g.record(StatusEvent { attempt: 0, ..by("APPL_START", "succeeded", "a1") });
        // a2 says A (a1's) succeeded: B, a2's own successor, is not released.
        assert!(g.record(by("A", "succeeded", "a2")));
        assert!(!g.ready(&after_b), "{after_b:?}");
        // a1's own status releases it, though the same status was seen first from a2.
        assert!(g.record(by("A", "succeeded", "a1")));
        assert!(g.ready(&after_b));
        // C (a3's) skipped by a2 does not count for D either.
        let after_d = plan.jobs["D"].after.clone();
        g.record(by("B", "succeeded", "a2"));
        g.record(StatusEvent { attempt: 0, ..by("C", "skipped", "a2") });
        assert!(!g.ready(&after_d) && !g.cannot_run(&after_d));
        g.record(StatusEvent { attempt: 0, ..by("C", "skipped", "a3") });
        assert!(g.ready(&after_d));
        // Nor does the generation end on another agent's APPL_END (the home, a1, ends it).
        g.record(StatusEvent { attempt: 0, ..by("APPL_END", "succeeded", "a2") });
        assert_eq!(g.outcome(&plan), Outcome::Running);
        g.record(StatusEvent { attempt: 0, ..by("APPL_END", "succeeded", "a1") });
        assert_eq!(g.outcome(&plan), Outcome::Succeeded);
    }

    #[test]
    fn a_dependency_is_refused_for_good_only_by_the_statuses_of_the_agent_that_runs_the_job() {
        // H (a2's) runs only if A (a1's) failed: A's success refuses it for good.
        let plan = pinned_plan_of(HANDLER);
        let after_h = plan.jobs["H"].after.clone();
        let mut g = Generation::default();
        g.record(StatusEvent { attempt: 0, ..by("APPL_START", "succeeded", "a1") });
        g.record(by("A", "succeeded", "a2"));
        assert!(!g.cannot_run(&after_h), "a2's word on A does not skip H");
        g.record(by("A", "succeeded", "a1"));
        assert!(g.cannot_run(&after_h));
    }

    fn event(job: &str, status: &str, attempt: u32) -> StatusEvent {
        StatusEvent {
            gid: "g".into(),
            job: job.into(),
            agent: "a".into(),
            status: status.into(),
            exit: 0,
            attempt,
            reason: None,
            time: None,
            output: None,
        }
    }

    #[test]
    fn a_generation_runs_until_appl_end_succeeds() {
        let plan = plan();
        let mut g = Generation::default();
        assert_eq!(g.outcome(&plan), Outcome::Running, "APPL_START is about to run");
        for (job, status, attempt) in [
            ("APPL_START", "succeeded", 0),
            ("A", "started", 1),
            ("A", "succeeded", 1),
            ("C", "skipped", 0),
            ("B", "started", 1),
        ] {
            g.record(event(job, status, attempt));
            assert_eq!(g.outcome(&plan), Outcome::Running, "after {job} {status}");
        }
        for (job, status, attempt) in
            [("B", "succeeded", 1), ("D", "started", 1), ("D", "succeeded", 1), ("APPL_END", "succeeded", 0)]
        {
            g.record(event(job, status, attempt));
        }
        assert_eq!(g.outcome(&plan), Outcome::Succeeded);
        assert_eq!(g.state("C").word(), "skipped");
    }

    #[test]
    fn a_failure_sticks_once_nothing_else_runs_and_a_bypass_or_rerun_releases_it() {
        let plan = plan();
        let mut g = Generation::default();
        for (job, status, attempt) in [
            ("APPL_START", "succeeded", 0),
            ("A", "started", 1),
            ("A", "succeeded", 1),
            ("B", "started", 1),
            ("C", "started", 1),
            ("B", "failed", 1),
        ] {
            g.record(event(job, status, attempt));
        }
        assert_eq!(g.outcome(&plan), Outcome::Running, "C still runs");
        g.record(event("C", "succeeded", 1));
        assert_eq!(g.outcome(&plan), Outcome::Stuck(vec!["B".into()]));
        // Seen again (history and live overlap), or its start seen late: nothing changes.
        assert!(!g.record(event("B", "failed", 1)));
        assert!(!g.record(event("B", "started", 1)));
        assert_eq!(g.outcome(&plan), Outcome::Stuck(vec!["B".into()]));
        // Rerun: attempt 2 starts.
        let mut rerun = g.clone();
        rerun.record(event("B", "started", 2));
        assert_eq!(rerun.outcome(&plan), Outcome::Running);
        assert_eq!(rerun.state("B").word(), "running");
        // Bypass: published succeeded as the attempt after the last: D is ready.
        g.record(event("B", "succeeded", 2));
        assert_eq!(g.outcome(&plan), Outcome::Running);
    }

    #[test]
    fn a_job_waited_from_its_last_dependency_met_to_its_first_start() {
        let plan = plan();
        let at = |job: &str, status: &str, attempt: u32, time: i64| StatusEvent {
            time: Some(time),
            ..event(job, status, attempt)
        };
        let mut g = Generation::default();
        g.record(at("APPL_START", "succeeded", 0, 1_000));
        g.record(at("A", "started", 1, 1_002));
        assert_eq!(g.waited_ms(&plan, "A"), Some(2), "{:?}", plan.jobs["A"].after);
        assert_eq!(g.waited_ms(&plan, "B"), None, "B waits");
        g.record(at("A", "succeeded", 1, 1_010));
        g.record(at("B", "started", 1, 1_013));
        assert_eq!(g.waited_ms(&plan, "B"), Some(3));
        // A rerun's start does not change it; nor does a status seen twice.
        g.record(at("B", "started", 2, 1_500));
        g.record(at("A", "succeeded", 1, 1_010));
        assert_eq!(g.waited_ms(&plan, "B"), Some(3));
        // Without stamps, nothing is said.
        let mut unstamped = Generation::default();
        unstamped.record(event("APPL_START", "succeeded", 0));
        unstamped.record(event("A", "started", 1));
        assert_eq!(unstamped.waited_ms(&plan, "A"), None);
    }

    #[test]
    fn statuses_out_of_order_keep_the_latest() {
        let mut g = Generation::default();
        g.record(event("A", "failed", 1));
        g.record(event("A", "succeeded", 2));
        g.record(event("A", "started", 2));
        g.record(event("A", "started", 1));
        assert_eq!(g.state("A").word(), "succeeded");
        assert_eq!(g.events.len(), 4);
    }

    /// A failure handler H (after A, `status="failed"`), and N after H with `success`.
    const HANDLER: &str = r#"<application name="p" tz="UTC"><calendar name="c" workdays="mon-fri"/>
        <job name="A" run="daily" agent="a1"><command>true</command></job>
        <job name="H" run="daily" agent="a2"><command>true</command><after job="A" status="failed"/></job>
        <job name="N" run="daily" agent="a2"><command>true</command><after job="H" status="success"/></job>
        </application>"#;

    #[test]
    fn a_failure_handler_not_needed_is_skipped_and_the_generation_ends() {
        let plan = plan_of(HANDLER);
        let mut g = Generation::default();
        g.record(event("APPL_START", "succeeded", 0));
        g.record(event("A", "succeeded", 1));
        let after = |job: &str| plan.jobs[job].after.clone();
        // A succeeded, for good: H can never run; its agent skips it.
        assert!(!g.ready(&after("H")) && g.cannot_run(&after("H")));
        assert_eq!(g.outcome(&plan), Outcome::Running, "H is about to be skipped, and N after it");
        g.record(event("H", "skipped", 0));
        // N wanted H's success: skipped too, and APPL_END follows.
        assert!(g.cannot_run(&after("N")));
        g.record(event("N", "skipped", 0));
        assert!(g.ready(&after("APPL_END")));
        g.record(event("APPL_END", "succeeded", 0));
        assert_eq!(g.outcome(&plan), Outcome::Succeeded);
        // A failed: H runs; a failure is not final (a rerun may follow), so nothing is
        // skipped for it.
        let mut failed = Generation::default();
        failed.record(event("APPL_START", "succeeded", 0));
        failed.record(event("A", "failed", 1));
        assert!(failed.ready(&after("H")) && !failed.cannot_run(&after("H")));
        assert!(!failed.cannot_run(&after("APPL_END")));
    }

    /// J after A (`success`) and B; K after J.
    const TWO: &str = r#"<application name="p" tz="UTC"><calendar name="c" workdays="mon-fri"/>
        <job name="A" run="daily" agent="a1"><command>true</command></job>
        <job name="B" run="daily" agent="a1"><command>true</command></job>
        <job name="J" run="daily" agent="a2"><command>true</command><after job="A" status="success"/><after job="B"/></job>
        <job name="K" run="daily" agent="a2"><command>true</command><after job="J"/></job>
        </application>"#;

    #[test]
    fn a_job_refused_for_good_is_skipped_only_once_its_other_predecessors_are_decided() {
        let plan = plan_of(TWO);
        let after = |job: &str| plan.jobs[job].after.clone();
        let mut g = Generation::default();
        g.record(event("APPL_START", "succeeded", 0));
        g.record(event("A", "skipped", 0));
        g.record(event("B", "started", 1));
        // B still runs: J waits, so K cannot overtake B.
        assert!(!g.cannot_run(&after("J")));
        assert_eq!(g.outcome(&plan), Outcome::Running);
        // B failed: J waits for an operator, and the generation is stuck (not ended).
        let mut failed = g.clone();
        failed.record(event("B", "failed", 1));
        assert!(!failed.cannot_run(&after("J")));
        assert_eq!(failed.outcome(&plan), Outcome::Stuck(vec!["B".into()]));
        // B succeeded: J is skipped, and K follows.
        g.record(event("B", "succeeded", 1));
        assert!(g.cannot_run(&after("J")));
        assert_eq!(g.outcome(&plan), Outcome::Running);
    }

    #[test]
    fn a_dispatch_ranks_below_the_start_of_its_attempt_and_does_not_end_a_job() {
        let mut g = Generation::default();
        g.record(event("P", "dispatched", 1));
        assert_eq!(g.state("P").word(), "dispatched");
        g.record(event("P", "started", 1));
        assert_eq!(g.state("P").word(), "running");
        // Its member went silent: dispatched again, from attempt 2.
        g.record(event("P", "dispatched", 2));
        assert_eq!(g.state("P").word(), "dispatched");
        // The first member's late end of attempt 1 does not hide the dispatch of attempt 2.
        g.record(event("P", "succeeded", 1));
        assert_eq!(g.state("P").word(), "dispatched");
        g.record(event("P", "succeeded", 2));
        assert_eq!(g.state("P").word(), "succeeded");
        assert_eq!(g.last_dispatch("P").map(|e| e.attempt), Some(2), "the dispatch its run came from");
        assert_eq!(g.last_dispatch("Q"), None);
    }

    #[test]
    fn a_pool_job_is_shown_run_by_its_member_once_one_has_it() {
        let planned = Planned { agent: "home".into(), after: Vec::new(), pool: Some("w".into()) };
        let mut g = Generation::default();
        assert_eq!(planned.runner(&g.state("P")), "pool w");
        g.record(event("P", "dispatched", 1));
        assert_eq!(planned.runner(&g.state("P")), "pool w", "dispatched by the home agent");
        let mut started = event("P", "started", 1);
        started.agent = "w3".into();
        g.record(started);
        assert_eq!(planned.runner(&g.state("P")), "w3");
        let named = Planned { pool: None, ..planned };
        assert_eq!(named.runner(&g.state("P")), "home");
    }
}
