//! Operators' commands (`agent_ctl`): deploy, undeploy, trigger, rerun, bypass, drain, each
//! answered with an `agent_reply` (the agent's module docs give what each does).

use std::sync::Arc;

use chrono::NaiveDate;

use padres_lang::Publication;
use padres_workflow::APPL_START;
use padres_workflow::control::{Command, Control, Reply};

use super::core::{AgentCore, Key};
use super::deploy::Deployed;
use super::outbox::{Outgoing, Status};
use super::text;
use crate::journal::Claim;

impl AgentCore {
    /// An `agent_ctl` publication for this agent: done, and answered (a deployment once it
    /// is made).
    pub(super) fn control(&mut self, publication: &Publication) {
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
                    self.publish(Outgoing::Reply(reply));
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
                let body = body.clone();
                match self.deploy_command(Box::new(control.clone()), &body) {
                    Some(outcome) => outcome,
                    // Answered once made.
                    None => return,
                }
            }
            Command::Undeploy => {
                self.undeploy(&appl);
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
        self.answer(&control, outcome);
    }

    /// The deployed job `job` of `appl`, as in the version generation `gid` runs on.
    pub(super) fn deployed_job(&self, appl: &str, gid: &str, job: &str) -> Result<&Deployed, String> {
        self.version_of(appl, gid)
            .ok_or_else(|| format!("{appl} is not deployed on this agent"))?
            .subscriptions
            .get(job)
            .and_then(|sub| self.jobs.get(sub))
            .ok_or_else(|| format!("{appl} has no job {job} on this agent"))
    }

    /// An operator's rerun of a failed job.
    fn rerun(&mut self, appl: &str, gid: &str, job: &str) -> Result<(), String> {
        let deployed = self.deployed_job(appl, gid, job)?;
        let (Some(info), Some(_)) = (&deployed.info, &deployed.schedule) else {
            return Err(format!("{job} is a virtual job: it has nothing to run"));
        };
        let (info, pooled): (Arc<_>, bool) = (info.clone(), deployed.pool.is_some());
        if self.journal().generation_ended(appl, gid).map_err(|e| format!("journal: {e}"))? {
            return Err(format!("generation {gid} of {appl} has ended: nothing of it runs again"));
        }
        let date = self
            .journal()
            .generation_date(appl, gid)
            .map_err(|e| format!("journal: {e}"))?
            .ok_or_else(|| format!("generation {gid} of {appl} has not run here"))?;
        let key: Key = (appl.to_owned(), gid.to_owned(), job.to_owned());
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

    /// An operator's bypass: the job is published `succeeded` without running.
    fn bypass(&mut self, appl: &str, gid: &str, job: &str) -> Result<(), String> {
        if self.deployed_job(appl, gid, job)?.info.is_none() {
            return Err(format!("{job} is a virtual job: it runs when what it waits for is done"));
        }
        let key: Key = (appl.to_owned(), gid.to_owned(), job.to_owned());
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
