//! [`MemoryJournal`]: the journal in memory, for tests and simulations.

use std::collections::BTreeMap;

use super::{Claim, Dispatched, ENDED_KEPT_MS, Entry, JobKey, Result, RunRow, Store, claim_of, key};

/// The journal in memory: the same answers as [`Journal`]'s file, for tests and for agents
/// simulated in virtual time. [`MemoryJournal::restart`] is the agent starting again with
/// it (what [`Journal::open`] does to the file), and its clock is the wall clock unless set
/// ([`MemoryJournal::set_now`]).
#[derive(Clone, Debug, Default)]
pub struct MemoryJournal {
    /// Each claimed job: its last attempt, and its status and exit once ended.
    runs: BTreeMap<JobKey, RunRow>,
    generations: BTreeMap<(String, String), String>,
    deployments: BTreeMap<String, (String, i64)>,
    ended: BTreeMap<(String, String), i64>,
    outbox: BTreeMap<i64, String>,
    last_seq: i64,
    cron_fired: BTreeMap<(String, String), i64>,
    dispatches: BTreeMap<JobKey, Dispatched>,
    assigned: BTreeMap<JobKey, i64>,
    /// Generations waiting to start: (appl, gid, date), in the order they came.
    held: Vec<(String, String, String)>,
    now_ms: Option<i64>,
}

impl MemoryJournal {
    /// From now on its clock reads `now_ms` (epoch milliseconds).
    pub fn set_now(&mut self, now_ms: i64) {
        self.now_ms = Some(now_ms);
    }

    fn now(&self) -> i64 {
        self.now_ms.unwrap_or_else(|| crate::trigger::now().timestamp_millis())
    }

    /// The agent starts again with this journal: marks of ends and pool members' runs past
    /// [`ENDED_KEPT_MS`] go, as when the file is opened.
    pub fn restart(&mut self) {
        let oldest = self.now() - ENDED_KEPT_MS;
        self.ended.retain(|_, at| *at >= oldest);
        let old: Vec<JobKey> =
            self.assigned.iter().filter(|(_, at)| **at < oldest).map(|(k, _)| k.clone()).collect();
        for key in old {
            self.runs.remove(&key);
            self.assigned.remove(&key);
        }
    }

    fn has_ended(&self, appl: &str, gid: &str) -> bool {
        self.ended.contains_key(&(appl.to_owned(), gid.to_owned()))
    }

    fn run(&self, appl: &str, gid: &str, job: &str) -> Option<&RunRow> {
        self.runs.get(&key(appl, gid, job))
    }

    fn forget_rows(&mut self, appl: &str, gid: &str) -> usize {
        let of = |k: &JobKey| k.0 == appl && k.1 == gid;
        self.generations.remove(&(appl.to_owned(), gid.to_owned()));
        self.dispatches.retain(|k, _| !of(k));
        self.assigned.retain(|k, _| !of(k));
        let before = self.runs.len();
        self.runs.retain(|k, _| !of(k));
        before - self.runs.len()
    }
}

impl Store for MemoryJournal {
    fn claim_many(&mut self, jobs: &[(String, String, String)]) -> Result<Vec<Claim>> {
        let mut claims = Vec::with_capacity(jobs.len());
        for (appl, gid, job) in jobs {
            if self.has_ended(appl, gid) {
                claims.push(Claim::GenerationEnded);
                continue;
            }
            claims.push(match self.run(appl, gid, job) {
                Some(row) => claim_of(row.clone()),
                None => {
                    self.runs.insert(key(appl, gid, job), (0, None, None));
                    Claim::New
                }
            });
        }
        Ok(claims)
    }

    fn attempt(&mut self, appl: &str, gid: &str, job: &str, attempt: u32) -> Result<()> {
        if let Some(row) = self.runs.get_mut(&key(appl, gid, job)) {
            row.0 = attempt;
        }
        Ok(())
    }

    fn end(&mut self, appl: &str, gid: &str, job: &str, status: &str, exit: i64, attempt: u32) -> Result<()> {
        if !self.has_ended(appl, gid) {
            self.runs.insert(key(appl, gid, job), (attempt, Some(status.to_owned()), Some(exit)));
        }
        Ok(())
    }

    fn interrupted(&self) -> Result<Vec<Entry>> {
        Ok(self
            .runs
            .iter()
            .filter(|((appl, gid, _), (_, status, _))| status.is_none() && !self.has_ended(appl, gid))
            .filter(|(k, _)| !self.dispatches.contains_key(*k))
            .map(|((appl, gid, job), (attempt, _, _))| Entry {
                appl: appl.clone(),
                gid: gid.clone(),
                job: job.clone(),
                attempt: *attempt,
            })
            .collect())
    }

    fn end_generation(&mut self, appl: &str, gid: &str, at_ms: i64) -> Result<bool> {
        let new = !self.has_ended(appl, gid);
        if new {
            self.ended.insert((appl.to_owned(), gid.to_owned()), at_ms);
        }
        self.forget_rows(appl, gid);
        if new {
            self.ended.retain(|_, at| *at >= at_ms - ENDED_KEPT_MS);
        }
        Ok(new)
    }

    fn generation_ended(&self, appl: &str, gid: &str) -> Result<bool> {
        Ok(self.has_ended(appl, gid))
    }

    fn forget(&mut self, appl: &str, gid: &str) -> Result<usize> {
        Ok(self.forget_rows(appl, gid))
    }

    fn generation(&mut self, appl: &str, gid: &str, date: &str) -> Result<()> {
        self.generations.entry((appl.to_owned(), gid.to_owned())).or_insert_with(|| date.to_owned());
        Ok(())
    }

    fn generation_date(&self, appl: &str, gid: &str) -> Result<Option<String>> {
        Ok(self.generations.get(&(appl.to_owned(), gid.to_owned())).cloned())
    }

    fn reclaim(&mut self, appl: &str, gid: &str, job: &str) -> Result<std::result::Result<u32, Claim>> {
        if self.has_ended(appl, gid) {
            return Ok(Err(Claim::GenerationEnded));
        }
        let Some(row) = self.runs.get_mut(&key(appl, gid, job)) else { return Ok(Err(Claim::New)) };
        Ok(match row {
            (attempt, status @ Some(_), exit) if matches!(status.as_deref(), Some("failed" | "timeout")) => {
                *status = None;
                *exit = None;
                Ok(*attempt)
            }
            row => Err(claim_of(row.clone())),
        })
    }

    fn look(&self, appl: &str, gid: &str, job: &str) -> Result<Claim> {
        if self.has_ended(appl, gid) {
            return Ok(Claim::GenerationEnded);
        }
        Ok(self.run(appl, gid, job).cloned().map_or(Claim::New, claim_of))
    }

    fn take_assignment(&mut self, appl: &str, gid: &str, job: &str, attempt: u32) -> Result<Claim> {
        if self.has_ended(appl, gid) {
            return Ok(Claim::GenerationEnded);
        }
        let now = self.now();
        let claim = match self.runs.get_mut(&key(appl, gid, job)) {
            None => {
                self.runs.insert(key(appl, gid, job), (0, None, None));
                Claim::New
            }
            Some((last, status @ Some(_), exit))
                if (*last < attempt && matches!(status.as_deref(), Some("failed" | "timeout")))
                    || status.as_deref() == Some("abandoned") =>
            {
                *status = None;
                *exit = None;
                Claim::New
            }
            Some(row) => claim_of(row.clone()),
        };
        if claim == Claim::New {
            self.assigned.insert(key(appl, gid, job), now);
        }
        Ok(claim)
    }

    fn is_assigned(&self, appl: &str, gid: &str, job: &str) -> Result<bool> {
        Ok(self.assigned.contains_key(&key(appl, gid, job)))
    }

    fn keep_dispatch(&mut self, d: &Dispatched) -> Result<()> {
        self.dispatches.insert(key(&d.appl, &d.gid, &d.job), d.clone());
        Ok(())
    }

    fn drop_dispatch(&mut self, appl: &str, gid: &str, job: &str) -> Result<()> {
        self.dispatches.remove(&key(appl, gid, job));
        Ok(())
    }

    fn dispatches(&self) -> Result<Vec<Dispatched>> {
        Ok(self.dispatches.values().cloned().collect())
    }

    fn keep_deployment(&mut self, appl: &str, body: &str, at_ms: i64) -> Result<()> {
        self.deployments.insert(appl.to_owned(), (body.to_owned(), at_ms));
        Ok(())
    }

    fn drop_deployment(&mut self, appl: &str) -> Result<()> {
        self.deployments.remove(appl);
        Ok(())
    }

    fn outbox_push(&mut self, publication: &str) -> Result<i64> {
        // Numbers are never used twice, as SQLite's AUTOINCREMENT does.
        self.last_seq += 1;
        self.outbox.insert(self.last_seq, publication.to_owned());
        Ok(self.last_seq)
    }

    fn outbox_done(&mut self, seq: i64) -> Result<()> {
        self.outbox.remove(&seq);
        Ok(())
    }

    fn outbox_pending(&self) -> Result<Vec<(i64, String)>> {
        Ok(self.outbox.iter().map(|(seq, p)| (*seq, p.clone())).collect())
    }

    fn cron_last(&self, appl: &str, pattern: &str) -> Result<Option<i64>> {
        Ok(self.cron_fired.get(&(appl.to_owned(), pattern.to_owned())).copied())
    }

    fn cron_fired(&mut self, appl: &str, pattern: &str, at_ms: i64) -> Result<()> {
        self.cron_fired.insert((appl.to_owned(), pattern.to_owned()), at_ms);
        Ok(())
    }

    fn generations_started(&self, appl: &str) -> Result<Vec<String>> {
        Ok(self
            .runs
            .keys()
            .filter(|(a, _, job)| a == appl && job == "APPL_START")
            .map(|(_, gid, _)| gid.clone())
            .collect())
    }

    fn hold(&mut self, appl: &str, gid: &str, date: &str) -> Result<()> {
        if !self.held.iter().any(|(a, g, _)| a == appl && g == gid) {
            self.held.push((appl.to_owned(), gid.to_owned(), date.to_owned()));
        }
        Ok(())
    }

    fn release(&mut self, appl: &str, gid: &str) -> Result<()> {
        self.held.retain(|(a, g, _)| !(a == appl && g == gid));
        Ok(())
    }

    fn held(&self, appl: &str) -> Result<Vec<(String, String)>> {
        Ok(self.held.iter().filter(|(a, _, _)| a == appl).map(|(_, g, d)| (g.clone(), d.clone())).collect())
    }

    fn deployments(&self) -> Result<Vec<(String, String, i64)>> {
        Ok(self.deployments.iter().map(|(appl, (body, at))| (appl.clone(), body.clone(), *at)).collect())
    }
}
