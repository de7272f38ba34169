//! Catching up: the generations an agent follows (seen start, not end) and when it next
//! reads each one's statuses from the history stores (the agent's module docs say why).
//!
//! Sans-IO: the agent hands in what it saw with the time and asks what is due; it makes
//! the reads (historic subscriptions) and says how each went. Times are the agent's
//! monotonic milliseconds (`now`), except a generation's trigger time and the horizon,
//! which are wall-clock epoch milliseconds (`wall_ms`).
//!
//! - A generation is followed from its trigger unless that was more than
//!   [`CATCH_UP_HORIZON`] ago; past the horizon it is let go.
//! - A followed generation is read every `catch_up` (the agent's option), doubling while a
//!   read finds nothing new, up to [`CATCH_UP_MOST`] times that; a read that let jobs run
//!   or skip is followed by another within [`CATCH_UP_AGAIN`], as is one some stores did
//!   not answer (at least that long). With `catch_up` zero a generation is read only when
//!   asked ([`Following::check_soon`]: a job's `unless` matched).
//! - A generation none of whose jobs here waits is read only at the slowest pace, for its
//!   end.
//! - At most [`CHECKS_PER_TICK`] reads start at once.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use padres_lang::{MessageId, Value};
use padres_workflow::APPL_END;
use padres_workflow::progress::{Generation, State};
use padres_workflow::translate::Need;

use super::core::{AgentCore, Then};
use super::{CATCH_UP_AGAIN, CATCH_UP_HORIZON, CATCH_UP_MOST};
use crate::journal::Claim;

/// A read not answered in this long is dropped and made again.
const CHECK_LONGEST: Duration = Duration::from_secs(60);

/// Most reads started at once (the agent asks what is due every second).
pub(crate) const CHECKS_PER_TICK: usize = 16;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A generation followed.
#[derive(Debug)]
pub(crate) struct Followed {
    /// The application's version it runs on, from its trigger.
    pub(crate) version: String,
    /// Its run day, from its trigger.
    pub(crate) date: Option<String>,
    /// Its trigger's time (epoch milliseconds).
    pub(crate) since_ms: i64,
    /// When to read it next; `None` while a read runs (or, with catching up off, until
    /// asked).
    next: Option<u64>,
    /// The wait before the next read.
    every: u64,
    /// Statuses the last read found.
    seen: usize,
}

/// The generations followed, by application and gid.
#[derive(Debug)]
pub(crate) struct Following {
    catch_up: u64,
    generations: HashMap<String, BTreeMap<String, Followed>>,
}

impl Following {
    /// Reading every `catch_up` (zero: only when asked).
    pub(crate) fn new(catch_up: Duration) -> Self {
        Self { catch_up: ms(catch_up), generations: HashMap::new() }
    }

    fn most(&self) -> u64 {
        self.catch_up.saturating_mul(u64::from(CATCH_UP_MOST))
    }

    fn horizon(wall_ms: i64) -> i64 {
        wall_ms - i64::try_from(CATCH_UP_HORIZON.as_millis()).unwrap_or(0)
    }

    /// Whether a generation triggered at `since_ms` is within the horizon at `wall_ms`.
    pub(crate) fn within_horizon(since_ms: i64, wall_ms: i64) -> bool {
        since_ms >= Self::horizon(wall_ms)
    }

    fn get_mut(&mut self, appl: &str, gid: &str) -> Option<&mut Followed> {
        self.generations.get_mut(appl)?.get_mut(gid)
    }

    /// Generation `gid` of `appl`, if followed.
    pub(crate) fn get(&self, appl: &str, gid: &str) -> Option<&Followed> {
        self.generations.get(appl)?.get(gid)
    }

    /// Follows generation `gid` of `appl` (on `version`, run on `date`, triggered at
    /// `since_ms`) unless it is followed already or was triggered beyond the horizon.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn follow(
        &mut self,
        appl: &str,
        gid: &str,
        version: &str,
        date: Option<String>,
        since_ms: i64,
        wall_ms: i64,
        now: u64,
    ) {
        if self.get(appl, gid).is_some() || !Self::within_horizon(since_ms, wall_ms) {
            return;
        }
        let every = self.catch_up;
        let next = (every > 0).then(|| now.saturating_add(every));
        let followed = Followed { version: version.to_owned(), date, since_ms, next, every, seen: 0 };
        self.generations.entry(appl.to_owned()).or_default().insert(gid.to_owned(), followed);
    }

    /// Generation `gid` of `appl` is no longer followed (it ended, or never started).
    pub(crate) fn forget(&mut self, appl: &str, gid: &str) {
        if let Some(generations) = self.generations.get_mut(appl) {
            generations.remove(gid);
        }
    }

    /// Nothing of `appl` is followed any more (it was withdrawn with its generations).
    pub(crate) fn forget_application(&mut self, appl: &str) {
        self.generations.remove(appl);
    }

    /// Whether a generation on `version` of `appl` is followed.
    pub(crate) fn runs_on(&self, appl: &str, version: &str) -> bool {
        self.generations.get(appl).is_some_and(|g| g.values().any(|f| f.version == version))
    }

    /// The applications with generations followed.
    pub(crate) fn applications(&self) -> impl Iterator<Item = &String> {
        self.generations.keys()
    }

    /// Generations triggered beyond the horizon are let go.
    pub(crate) fn prune(&mut self, wall_ms: i64) {
        let horizon = Self::horizon(wall_ms);
        for generations in self.generations.values_mut() {
            generations.retain(|_, f| f.since_ms >= horizon);
        }
    }

    /// Generation `gid` of `appl` is to be read now, and from then on at the first pace
    /// (a job's `unless` matched: whether it is to be skipped depends on what the stores
    /// say).
    pub(crate) fn check_soon(&mut self, appl: &str, gid: &str, now: u64) {
        let catch_up = self.catch_up;
        if let Some(f) = self.get_mut(appl, gid) {
            f.every = catch_up;
            f.next = Some(now);
        }
    }

    /// The generations due to be read at `now`, at most [`CHECKS_PER_TICK`], by
    /// application and gid.
    pub(crate) fn due(&self, now: u64) -> Vec<(String, String)> {
        let mut appls: Vec<&String> = self.generations.keys().collect();
        appls.sort();
        appls
            .into_iter()
            .flat_map(|appl| {
                self.generations[appl]
                    .iter()
                    .filter(|(_, f)| f.next.is_some_and(|next| next <= now))
                    .map(move |(gid, _)| (appl.clone(), gid.clone()))
            })
            .take(CHECKS_PER_TICK)
            .collect()
    }

    /// Generation `gid` of `appl`, due, has no job here that waits: true if it is put off
    /// to the slowest pace instead of read now (once there, it is read, for its end).
    pub(crate) fn put_off(&mut self, appl: &str, gid: &str, now: u64) -> bool {
        let most = self.most();
        let Some(f) = self.get_mut(appl, gid) else { return false };
        if f.every >= most {
            return false;
        }
        f.every = most;
        f.next = Some(now.saturating_add(most));
        true
    }

    /// A read of generation `gid` of `appl` started.
    pub(crate) fn reading(&mut self, appl: &str, gid: &str) {
        if let Some(f) = self.get_mut(appl, gid) {
            f.next = None;
        }
    }

    /// The read could not be made (or was given up): tried again after the current wait,
    /// or at once (`again_now`: a read the stores never finished).
    pub(crate) fn read_failed(&mut self, appl: &str, gid: &str, again_now: bool, now: u64) {
        if let Some(f) = self.get_mut(appl, gid) {
            f.next = Some(if again_now { now } else { now.saturating_add(f.every) });
        }
    }

    /// Some stores did not answer the read: what they keep may change the answer, so it is
    /// read again soon.
    pub(crate) fn incomplete(&mut self, appl: &str, gid: &str, now: u64) {
        let wait = self.catch_up.max(ms(CATCH_UP_AGAIN));
        if let Some(f) = self.get_mut(appl, gid) {
            f.next = Some(now.saturating_add(wait));
        }
    }

    /// The read found `found` statuses and let jobs here run or skip (`acted`).
    pub(crate) fn read(&mut self, appl: &str, gid: &str, found: usize, acted: bool, now: u64) {
        let (catch_up, most) = (self.catch_up, self.most());
        let Some(f) = self.get_mut(appl, gid) else { return };
        if catch_up == 0 {
            // Read when asked only.
            f.next = None;
            return;
        }
        f.every = if found > f.seen { catch_up } else { f.every.saturating_mul(2).min(most) };
        f.seen = found;
        // After catching up, the jobs here that follow those just run may be behind too (an
        // agent restarted has lost every match of the generation): looked at again soon.
        let wait = if acted { f.every.min(ms(CATCH_UP_AGAIN)) } else { f.every };
        f.next = Some(now.saturating_add(wait));
    }

    /// When generation `gid` of `appl` is read next (tests).
    #[cfg(test)]
    fn next(&self, appl: &str, gid: &str) -> Option<u64> {
        self.get(appl, gid).and_then(|f| f.next)
    }
}

/// A read of one generation's statuses in the history stores (a historic subscription
/// reaching up to when it was made).
#[derive(Debug)]
pub(super) struct Check {
    pub(super) appl: String,
    pub(super) gid: String,
    pub(super) generation: Generation,
    started: tokio::time::Instant,
}

impl AgentCore {
    /// Whether a job of `appl` here has not run in generation `gid` (nor runs now).
    fn waits_here(&self, appl: &str, gid: &str) -> bool {
        let Some(application) = self.version_of(appl, gid) else { return false };
        application.subscriptions.keys().any(|job| self.not_run(appl, gid, job))
    }

    /// Whether job `job` of `appl` has not run in generation `gid` here (nor runs now).
    fn not_run(&self, appl: &str, gid: &str, job: &str) -> bool {
        let key = (appl.to_owned(), gid.to_owned(), job.to_owned());
        !self.running.contains(&key) && matches!(self.store().look(appl, gid, job), Ok(Claim::New))
    }

    /// Starts the reads that are due: each reads a followed generation's statuses from the
    /// history stores.
    pub(super) fn check_due(&mut self) {
        let (now_at, now) = (self.now.at, self.clock());
        // A read the stores never finished answering (its broker went away) is dropped and
        // made again.
        let mut stale: Vec<MessageId> = self
            .checks
            .iter()
            .filter(|(_, c)| now_at.saturating_duration_since(c.started) > CHECK_LONGEST)
            .map(|(sub, _)| sub.clone())
            .collect();
        stale.sort();
        for sub in stale {
            if let Some(check) = self.checks.remove(&sub) {
                self.unsubscribe(sub);
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
            let message = self.parse(&query);
            self.ask(message, Then::Check { appl, gid });
        }
    }

    /// The broker's answer to the read of generation `gid` of `appl`.
    pub(super) fn check_made(
        &mut self,
        appl: String,
        gid: String,
        answer: Result<Option<MessageId>, String>,
    ) {
        match answer {
            Ok(Some(sub)) => {
                let check = Check { appl, gid, generation: Generation::default(), started: self.now.at };
                self.checks.insert(sub, check);
            }
            other => {
                let why = other.err().unwrap_or_else(|| "no id".to_owned());
                tracing::warn!("{appl}/{gid}: reading its statuses from history: {why}");
                let now = self.clock();
                self.following.read_failed(&appl, &gid, false, now);
            }
        }
    }

    /// The read of subscription `sub` has all its stored statuses: the jobs here whose
    /// dependencies they meet run (once, as the journal keeps it).
    pub(super) fn checked(&mut self, sub: &MessageId, complete: bool) {
        let Some(Check { appl, gid, generation, .. }) = self.checks.remove(sub) else { return };
        self.unsubscribe(sub.clone());
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
        let acted = !(ready.is_empty() && unneeded.is_empty());
        self.ready_all(ready.into_iter().map(|sub| (sub, gid.clone(), date.clone())).collect(), true);
        for sub in &unneeded {
            let refused = self.jobs.get(sub).map(|d| refusals(&generation, &d.after)).unwrap_or_default();
            self.skip(sub, &gid, &refused);
        }
        let found = generation.events.len();
        let now = self.clock();
        self.following.read(&appl, &gid, found, acted, now);
    }

    /// The dependency subscriptions of the jobs of `appl` here (in generation `gid`'s
    /// version) that have not run in it and whose dependencies satisfy `test`, by job name
    /// (so that a replay decides in the same order).
    fn waiting_jobs(&self, appl: &str, gid: &str, test: impl Fn(&[Need]) -> bool) -> Vec<MessageId> {
        let Some(application) = self.version_of(appl, gid) else { return Vec::new() };
        let mut waiting: Vec<(&String, &MessageId)> = application
            .subscriptions
            .iter()
            .filter(|(job, sub)| {
                self.jobs.get(*sub).is_some_and(|d| test(&d.after)) && self.not_run(appl, gid, job)
            })
            .collect();
        waiting.sort();
        waiting.into_iter().map(|(_, sub)| sub.clone()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000;
    const WALL: i64 = 1_800_000_000_000;

    fn following() -> Following {
        let mut f = Following::new(Duration::from_secs(10));
        f.follow("a", "g1", "v1", None, WALL, WALL, 0);
        f
    }

    #[test]
    fn a_read_that_finds_nothing_new_doubles_the_wait_up_to_the_slowest() {
        let mut f = following();
        assert_eq!(f.due(10 * S - 1), []);
        assert_eq!(f.due(10 * S), [("a".to_owned(), "g1".to_owned())]);
        let mut now = 10 * S;
        let mut waits = Vec::new();
        for found in [2, 2, 2, 2, 2, 2, 2, 3] {
            f.reading("a", "g1");
            assert_eq!(f.due(now + 1_000 * S), [], "not read twice at once");
            f.read("a", "g1", found, false, now);
            let next = f.next("a", "g1").expect("a next read");
            waits.push((next - now) / S);
            now = next;
        }
        // Something new, then nothing new: 10, 20, 40 ... up to 320 s; new again: 10 s.
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 320, 10]);
    }

    #[test]
    fn a_read_that_let_jobs_run_or_some_stores_did_not_answer_is_made_again_soon() {
        let mut f = following();
        f.read("a", "g1", 1, true, 10 * S);
        assert_eq!(f.next("a", "g1"), Some(12 * S));
        f.incomplete("a", "g1", 20 * S);
        assert_eq!(f.next("a", "g1"), Some(30 * S), "catch_up, at least CATCH_UP_AGAIN");
        f.read_failed("a", "g1", false, 40 * S);
        assert_eq!(f.next("a", "g1"), Some(50 * S));
        f.read_failed("a", "g1", true, 60 * S);
        assert_eq!(f.next("a", "g1"), Some(60 * S));
    }

    #[test]
    fn a_generation_no_job_here_waits_for_is_put_off_to_the_slowest_pace_then_read() {
        let mut f = following();
        assert!(f.put_off("a", "g1", 10 * S));
        assert_eq!(f.next("a", "g1"), Some(330 * S));
        assert!(!f.put_off("a", "g1", 330 * S), "read at that pace, for its end");
    }

    #[test]
    fn generations_beyond_the_horizon_are_not_followed_and_let_go() {
        let day = 86_400_000;
        let mut f = following();
        f.follow("a", "old", "v1", None, WALL - 8 * day, WALL, 0);
        assert!(f.get("a", "old").is_none());
        f.follow("a", "g2", "v2", Some("2026-11-29".into()), WALL - 6 * day, WALL, 0);
        assert!(f.runs_on("a", "v2"));
        f.prune(WALL + 2 * day);
        assert!(f.get("a", "g2").is_none() && f.get("a", "g1").is_some());
        assert!(!f.runs_on("a", "v2"));
    }

    #[test]
    fn with_catching_up_off_a_generation_is_read_only_when_asked() {
        let mut f = Following::new(Duration::ZERO);
        f.follow("a", "g1", "v1", None, WALL, WALL, 0);
        assert_eq!(f.due(u64::MAX), []);
        f.check_soon("a", "g1", 5 * S);
        assert_eq!(f.due(5 * S).len(), 1);
        f.reading("a", "g1");
        f.read("a", "g1", 3, true, 6 * S);
        assert_eq!(f.due(u64::MAX), []);
    }

    #[test]
    fn at_most_a_tick_s_reads_start_at_once() {
        let mut f = Following::new(Duration::from_secs(1));
        for g in 0..40 {
            f.follow("a", &format!("g{g:02}"), "v1", None, WALL, WALL, 0);
        }
        assert_eq!(f.due(S).len(), CHECKS_PER_TICK);
    }

    #[test]
    fn with_a_short_catch_up_a_read_again_waits_at_least_catch_up_again_and_after_acting_no_longer_than_catch_up()
     {
        let mut f = Following::new(Duration::from_secs(1));
        f.follow("a", "g1", "v1", None, WALL, WALL, 0);
        f.incomplete("a", "g1", 10 * S);
        assert_eq!(f.next("a", "g1"), Some(12 * S), "CATCH_UP_AGAIN, not the 1 s catch_up");
        f.read("a", "g1", 1, true, 20 * S);
        assert_eq!(f.next("a", "g1"), Some(21 * S), "the 1 s catch_up, not CATCH_UP_AGAIN");
        // Grown, then asked for: back to the first pace.
        for t in 0..5 {
            f.read("a", "g1", 1, false, (30 + t) * S);
        }
        f.check_soon("a", "g1", 40 * S);
        f.read("a", "g1", 1, false, 40 * S);
        assert_eq!(f.next("a", "g1"), Some(42 * S), "doubling again from 1 s");
    }
}
