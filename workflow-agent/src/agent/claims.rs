//! Claims: a job runs at most once per generation here, however often it is notified and
//! across restarts. A dependency's match (or catching up) makes a job ready; the agent
//! claims it in its journal before anything of it runs (several matches that came
//! together in one transaction), and only a new claim runs it, skips it (its run term does
//! not select the generation's day), or, for the virtual jobs, publishes it `succeeded`.

use chrono::NaiveDate;

use padres_lang::{MessageId, Publication};
use padres_workflow::APPL_END;

use super::core::{AgentCore, Key};
use super::outbox::Status;
use super::text;
use crate::journal::Claim;

impl AgentCore {
    /// Matches of composite subscriptions: of dependencies (their jobs' generations are
    /// ready for them, claimed together) and of `unless` subscriptions.
    pub(super) fn matches(&mut self, batch: Vec<(MessageId, Vec<(u32, Publication)>)>) {
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
    pub(super) fn skip(&mut self, sub: &MessageId, gid: &str, refused: &str) {
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

    /// Each of `ready` (dependency, gid, date) may run in its generation (run on `date`):
    /// notified by its match, or found by catching up (`caught_up`); claimed in one
    /// transaction.
    pub(super) fn ready_all(&mut self, ready: Vec<(MessageId, String, Option<String>)>, caught_up: bool) {
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
        key: Key,
        date: Option<&str>,
        claim: Result<Claim, String>,
        caught_up: bool,
    ) {
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
        let Some(deployed) = self.jobs.get(sub) else { return self.not_running(&key) };
        let day = date.and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
        let (info, pooled) = (deployed.info.clone(), deployed.pool.is_some());
        let runs_on = match (&deployed.schedule, day) {
            (Some(schedule), Some(day)) => Some(schedule.runs_on(day, &deployed.calendar)),
            _ => None,
        };
        let (Some(info), true) = (info, deployed.schedule.is_some()) else {
            // A virtual job.
            self.finish(&key, Status::new(&key, "succeeded", 0, 0));
            self.not_running(&key);
            if key.2 == APPL_END {
                self.end_generation(&key.0, &key.1);
            }
            return;
        };
        let Some(day) = day else {
            tracing::warn!("{}/{}/{}: the trigger has no date (YYYY-MM-DD): failed", key.0, key.1, key.2);
            let reason = "the generation's trigger has no date (YYYY-MM-DD)".to_owned();
            self.finish(&key, Status::new(&key, "failed", -1, 0).because(Some(reason)));
            return self.not_running(&key);
        };
        if runs_on == Some(false) {
            self.finish(&key, Status::new(&key, "skipped", 0, 0));
            return self.not_running(&key);
        }
        let date = day.format("%Y-%m-%d").to_string();
        if let Err(e) = self.journal().generation(&key.0, &key.1, &date) {
            tracing::warn!("{}/{}: journal: {e}", key.0, key.1);
        }
        if pooled {
            return self.dispatch(key, date, 1, 1, None, None);
        }
        self.spawn_run(key, info, date, 1, None);
    }
}
