//! Deployments and their versions: what an application deployed here subscribes to and
//! advertises, a deployment made as a whole or not at all, and earlier versions kept while
//! generations started on them run (the agent's module docs give the rules).
//!
//! A deployment asks the broker for all its advertisements and subscriptions at once
//! ([`AgentCore::begin_deploy`]); the agent takes no other input until every one is
//! answered ([`AgentCore::deploy_answered`]). If one was refused, those made are withdrawn
//! and the deployment is refused with the first refusal, in the order they were asked.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use chrono::NaiveDate;

use padres_lang::{Message, MessageId, Value};
use padres_workflow::calendar::parse_weekdays;
use padres_workflow::control::{Control, Reply, trigger_advertisement};
use padres_workflow::translate::{Need, status_advertisement};
use padres_workflow::{
    APPL_END, APPL_START, Calendar, EnvelopeBody, HolidayRule, JobInfo, RunTerm, Schedule, TriggerSpec,
};

use super::core::{AgentCore, Then};
use super::outbox::Outgoing;
use super::{CATCH_UP_HORIZON, FOLLOW_BEFORE_MS, RETIRE_GRACE};
use crate::trigger::CronTrigger;

/// A job deployed here.
#[derive(Debug)]
pub(super) struct Deployed {
    pub(super) appl: String,
    pub(super) job: String,
    /// `None` for a virtual job.
    pub(super) info: Option<Arc<JobInfo>>,
    pub(super) schedule: Option<Schedule>,
    pub(super) calendar: Arc<Calendar>,
    /// What it waits for, for catching up.
    pub(super) after: Vec<Need>,
    /// For a pool job: its pool (this agent, the home, dispatches it).
    pub(super) pool: Option<padres_workflow::model::PoolSpec>,
}

/// An application deployed here: what it was deployed from, its subscriptions (by job)
/// and advertisements.
#[derive(Debug)]
pub(super) struct Application {
    pub(super) body: EnvelopeBody,
    /// Whether this is its home agent (it runs `APPL_START` and publishes its triggers).
    pub(super) home: bool,
    pub(super) subscriptions: HashMap<String, MessageId>,
    pub(super) advertisements: Vec<MessageId>,
    /// Its event triggers' subscriptions (home agent).
    pub(super) events: Vec<MessageId>,
    /// The subscriptions following its generations: their triggers and ends.
    pub(super) follows: Vec<MessageId>,
    /// Its jobs' `unless` subscriptions (when a job can no longer run).
    pub(super) unless: Vec<MessageId>,
    /// When a newer version replaced it (it is kept while its generations run).
    pub(super) replaced: Option<tokio::time::Instant>,
    /// The statuses of its pool jobs (those this home agent dispatches), if it has any.
    pub(super) pool_statuses: Option<MessageId>,
}

impl Application {
    /// Every subscription it made.
    pub(super) fn all_subscriptions(&self) -> Vec<MessageId> {
        let mut jobs: Vec<(&String, &MessageId)> = self.subscriptions.iter().collect();
        jobs.sort();
        let subs = jobs.into_iter().map(|(_, sub)| sub).chain(&self.events).chain(&self.follows);
        subs.chain(&self.unless).chain(&self.pool_statuses).cloned().collect()
    }
}

/// What a deployment's request is for.
#[derive(Debug)]
enum Role {
    /// The application's triggers (home agent).
    Triggers,
    /// Job `n`'s status.
    Status(usize),
    /// Job `n`'s dependency.
    Dependency(usize),
    /// Job `n`'s `unless`.
    Unless(usize),
    /// Following the application's generations.
    Follow(String),
    /// A pool's load reports.
    PoolLoads(String),
    /// The application's pool jobs' statuses.
    PoolStatuses,
    /// An event trigger.
    Event(String),
}

impl Role {
    fn advertises(&self) -> bool {
        matches!(self, Self::Triggers | Self::Status(_))
    }
}

/// Who asked for a deployment.
#[derive(Debug)]
pub(super) enum Origin {
    /// An operator's command: answered, and kept in the journal.
    Control(Box<Control>),
    /// The journal, at start.
    Journal,
}

/// A deployment in progress: its requests asked, not all answered.
#[derive(Debug)]
pub(super) struct Deploying {
    body: EnvelopeBody,
    at_ms: i64,
    parts: Parts,
    roles: Vec<Role>,
    answers: Vec<Option<Result<Option<MessageId>, String>>>,
    origin: Origin,
}

impl AgentCore {
    /// Deploys again a deployment kept in the journal.
    pub(super) fn restore(&mut self, appl: &str, body: &str, at_ms: i64) {
        match EnvelopeBody::from_json(body) {
            Ok(body) => match Parts::of(&body) {
                Ok(parts) => self.begin_deploy(body, parts, at_ms, Origin::Journal),
                Err(why) => self.deployed(appl, Origin::Journal, Err(why), at_ms, ""),
            },
            Err(e) => {
                tracing::error!("{appl}: the deployment kept in the journal cannot be deployed again: {e}");
            }
        }
    }

    /// An operator deploys `body`.
    pub(super) fn deploy_command(
        &mut self,
        control: Box<Control>,
        body: &EnvelopeBody,
    ) -> Option<Result<(), String>> {
        let appl = body.appl.clone();
        if self.applications.get(&appl).is_some_and(|a| a.body == *body) {
            return Some(Ok(()));
        }
        let parts = match Parts::of(body) {
            Ok(parts) => parts,
            // Refused before anything changes: the deployed version stays.
            Err(why) => return Some(Err(why)),
        };
        self.replace(&appl);
        // A version deployed again while still kept for its generations (a rollback): the
        // copy kept goes, the new one catches up in them.
        let again: Vec<Application> = match self.retiring.get_mut(&appl) {
            Some(kept) => {
                let (same, other) =
                    std::mem::take(kept).into_iter().partition(|a| a.body.version == body.version);
                *kept = other;
                same
            }
            None => Vec::new(),
        };
        for application in again {
            self.forget_application(&application);
            self.withdraw(&application);
        }
        let at_ms = self.now.wall_ms;
        self.begin_deploy(body.clone(), parts, at_ms, Origin::Control(control));
        // Answered once deployed.
        None
    }

    /// Deploys `body` (deployed at `at_ms`, epoch milliseconds: the generations followed
    /// start from then): every advertisement and subscription asked at once.
    fn begin_deploy(&mut self, body: EnvelopeBody, parts: Parts, at_ms: i64, origin: Origin) {
        let home = body.jobs.iter().any(|j| j.job == APPL_START);
        let mut asks: Vec<(Role, Result<Message, String>)> = Vec::new();
        if home {
            asks.push((Role::Triggers, Ok(Message::Advertise(trigger_advertisement(&body.appl)))));
        }
        for (n, job) in body.jobs.iter().enumerate() {
            // The agent's own advertisement of what it publishes, under its name, not the
            // envelope's (an older translation's may lack attributes the agent publishes,
            // or leave `agent` open where permits pin it).
            let status = status_advertisement(&body.appl, &job.job, &self.options.name);
            asks.push((Role::Status(n), Ok(Message::Advertise(status))));
            asks.push((Role::Dependency(n), self.parse(&job.subscription)));
            if let Some(unless) = &job.unless {
                asks.push((Role::Unless(n), self.parse(unless)));
            }
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
            let message = self.parse(&follow);
            asks.push((Role::Follow(follow), message));
        }
        let mut pools: Vec<String> =
            body.jobs.iter().filter_map(|j| j.pool.as_ref().map(|p| p.name.clone())).collect();
        pools.dedup();
        if !pools.is_empty() {
            for pool in pools {
                if !self.pool_loads.contains_key(&pool)
                    && !asks.iter().any(|(r, _)| matches!(r, Role::PoolLoads(p) if *p == pool))
                {
                    let message = self.parse(&crate::pool::pool_subscription(&pool));
                    asks.push((Role::PoolLoads(pool), message));
                }
            }
            let statuses = format!(
                "s [class,eq,'job_status'],[appl,eq,{appl_value}],[pool,isPresent,''],[time,>=,{since}]"
            );
            asks.push((Role::PoolStatuses, self.parse(&statuses)));
        }
        if home {
            for spec in &body.triggers {
                let TriggerSpec::Event(subscription) = spec else { continue };
                let message = self.parse(&format!("s {subscription}"));
                asks.push((Role::Event(subscription.clone()), message));
            }
        }
        let mut roles = Vec::with_capacity(asks.len());
        for (index, (role, message)) in asks.into_iter().enumerate() {
            roles.push(role);
            self.ask(message, Then::Deploy(index));
        }
        let answers = roles.iter().map(|_| None).collect();
        self.deploying = Some(Deploying { body, at_ms, parts, roles, answers, origin });
    }

    /// The answer to request `index` of the deployment in progress; once all are in, the
    /// application is deployed, or what was made is withdrawn.
    pub(super) fn deploy_answered(&mut self, index: usize, answer: Result<Option<MessageId>, String>) {
        let Some(deploying) = &mut self.deploying else { return };
        if let Some(slot) = deploying.answers.get_mut(index) {
            *slot = Some(answer);
        }
        if deploying.answers.iter().any(Option::is_none) {
            return;
        }
        let Some(Deploying {
            body,
            at_ms,
            parts: Parts { calendar, schedules, crons },
            roles,
            answers,
            origin,
        }) = self.deploying.take()
        else {
            return;
        };
        let answers: Vec<Result<Option<MessageId>, String>> = answers.into_iter().flatten().collect();
        // Pool load subscriptions are the agent's, whatever becomes of this deployment.
        for (role, answer) in roles.iter().zip(&answers) {
            if let (Role::PoolLoads(pool), Ok(Some(sub))) = (role, answer) {
                self.pool_loads.insert(pool.clone(), (sub.clone(), self.now.at));
            }
        }
        let refused = roles.iter().zip(&answers).find_map(|(role, answer)| {
            let why = match (role, answer) {
                (_, Ok(Some(_))) => return None,
                (Role::Triggers | Role::Status(_), Ok(None)) => "the broker assigned no id".to_owned(),
                (Role::Dependency(_), Ok(None)) => {
                    "the broker gave the dependency subscription no id".to_owned()
                }
                (_, Ok(None)) => "no id".to_owned(),
                (_, Err(e)) => e.clone(),
            };
            let job = |n: &usize| body.jobs.get(*n).map_or("", |j| j.job.as_str()).to_owned();
            Some(match role {
                Role::Triggers => why,
                Role::Status(n) | Role::Dependency(n) | Role::Unless(n) => format!("job {}: {why}", job(n)),
                Role::Follow(follow) => format!("following its generations ({follow}): {why}"),
                Role::PoolLoads(pool) => format!("pool {pool}'s load reports: {why}"),
                Role::PoolStatuses => format!("its pool jobs' statuses: {why}"),
                Role::Event(subscription) => format!("event trigger {subscription}: {why}"),
            })
        });
        let made = roles.iter().zip(&answers).filter_map(|(role, answer)| match (role, answer) {
            (Role::PoolLoads(_), _) => None,
            (role, Ok(Some(id))) => Some((role.advertises(), id.clone())),
            _ => None,
        });
        let (advertised, subscribed): (Vec<_>, Vec<_>) = made.partition(|(adv, _)| *adv);
        let advertisements: Vec<MessageId> = advertised.into_iter().map(|(_, id)| id).collect();
        let subscriptions: Vec<MessageId> = subscribed.into_iter().map(|(_, id)| id).collect();
        if let Some(why) = refused {
            // Withdrawn: it is refused as a whole.
            self.withdraw_all(subscriptions, advertisements);
            return self.deployed(&body.appl, origin, Err(why), at_ms, "");
        }
        let home = body.jobs.iter().any(|j| j.job == APPL_START);
        let started = if home {
            let held = self.store().held(&body.appl);
            Some(self.store().generations_started(&body.appl).and_then(|started| Ok((started, held?))))
        } else {
            None
        };
        let started = match started.transpose() {
            Ok(started) => started,
            Err(e) => {
                self.withdraw_all(subscriptions, advertisements);
                return self.deployed(&body.appl, origin, Err(format!("journal: {e}")), at_ms, "");
            }
        };
        let mut application = Application {
            body: body.clone(),
            home,
            subscriptions: HashMap::new(),
            advertisements,
            events: Vec::new(),
            follows: Vec::new(),
            unless: Vec::new(),
            replaced: None,
            pool_statuses: None,
        };
        let json = body.to_json();
        let mut dependencies: Vec<Option<MessageId>> = body.jobs.iter().map(|_| None).collect();
        let mut unless: Vec<Option<MessageId>> = body.jobs.iter().map(|_| None).collect();
        for (role, answer) in roles.iter().zip(answers) {
            let Ok(Some(id)) = answer else { continue };
            match role {
                Role::Dependency(n) => dependencies[*n] = Some(id),
                Role::Unless(n) => {
                    application.unless.push(id.clone());
                    unless[*n] = Some(id);
                }
                Role::Follow(_) => application.follows.push(id),
                Role::PoolStatuses => application.pool_statuses = Some(id),
                Role::Event(_) => application.events.push(id),
                Role::Triggers | Role::Status(_) | Role::PoolLoads(_) => {}
            }
        }
        let each = body.jobs.into_iter().zip(schedules).zip(dependencies.into_iter().zip(unless));
        for ((job, schedule), (sub, unless)) in each {
            let Some(sub) = sub else { continue };
            if let Some(id) = unless {
                self.unless.insert(id, sub.clone());
            }
            application.subscriptions.insert(job.job.clone(), sub.clone());
            let deployed = Deployed {
                appl: body.appl.clone(),
                job: job.job,
                info: job.info.map(Arc::new),
                schedule,
                calendar: calendar.clone(),
                after: job.after,
                pool: job.pool,
            };
            self.jobs.insert(sub, deployed);
        }
        if let Some(id) = &application.pool_statuses {
            self.pool_statuses.insert(id.clone(), body.appl.clone());
        }
        for sub in &application.events {
            self.event_subs.insert(sub.clone(), body.appl.clone());
        }
        for sub in &application.follows {
            self.follows.insert(sub.clone(), body.appl.clone());
        }
        // Generations the cron triggers start (a run missed while down), once deployed:
        // carried out once this deploy is answered and kept, and at start after what the
        // outbox kept from before.
        if let Some((started, held)) = started {
            self.starts.home(&body.appl, body.max_generations, started, held);
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
            let mut steps = Vec::new();
            self.starts.set_crons(&body.appl, crons, self.now.wall(), &mut steps);
            self.later.extend(steps);
        }
        tracing::info!("deployed {} ({} jobs here)", body.appl, application.subscriptions.len());
        let appl = body.appl.clone();
        self.applications.insert(appl.clone(), application);
        self.deployed(&appl, origin, Ok(()), at_ms, &json);
    }

    /// A deployment of `appl` made (or refused): kept and answered (for an operator's), or
    /// logged (for the journal's).
    /// (`json`: the body deployed, kept.)
    fn deployed(&mut self, appl: &str, origin: Origin, outcome: Result<(), String>, at_ms: i64, json: &str) {
        match origin {
            Origin::Control(control) => {
                if outcome.is_ok()
                    && let Err(e) = self.journal().keep_deployment(appl, json, at_ms)
                {
                    tracing::error!("{appl}: deployed, but not kept in the journal: {e}");
                }
                self.answer(&control, outcome);
            }
            Origin::Journal => match outcome {
                Ok(()) => tracing::info!("{appl}: deployed again from the journal"),
                Err(e) => tracing::error!(
                    "{appl}: the deployment kept in the journal cannot be deployed again: {e}"
                ),
            },
        }
    }

    /// Answers an operator's command.
    pub(super) fn answer(&mut self, control: &Control, outcome: Result<(), String>) {
        let appl = &control.appl;
        match &outcome {
            Ok(()) => tracing::info!("{} {appl}: done", control.command.name()),
            Err(why) => tracing::warn!("{} {appl}: refused: {why}", control.command.name()),
        }
        self.publish(Outgoing::Reply(Reply::to(control, outcome.err())));
    }

    pub(super) fn withdraw(&mut self, application: &Application) {
        self.withdraw_all(application.all_subscriptions(), application.advertisements.clone());
    }

    /// Replaces the deployed version of `appl` (a new one is about to be deployed): kept,
    /// without its triggers, while generations that started on it run; else withdrawn.
    fn replace(&mut self, appl: &str) {
        let Some(mut application) = self.applications.remove(appl) else { return };
        let version = application.body.version.clone();
        // Kept even with no generation of it seen: agents take a new version one after
        // another, and a home agent that has not yet may still start one on it.
        if version.is_empty() {
            self.applications.insert(appl.to_owned(), application);
            return self.undeploy_current(appl, false);
        }
        // Its cron and event triggers stop: new generations start on the new version.
        self.starts.stop_crons(appl);
        for sub in application.events.drain(..) {
            self.event_subs.remove(&sub);
            self.unsubscribe(sub);
        }
        tracing::info!("{appl}: version {version} kept until the generations that started on it end");
        application.replaced = Some(self.now.at);
        self.retiring.entry(appl.to_owned()).or_default().push(application);
    }

    pub(super) fn undeploy(&mut self, appl: &str) {
        for application in self.retiring.remove(appl).unwrap_or_default() {
            self.forget_application(&application);
            self.withdraw(&application);
        }
        self.undeploy_current(appl, true);
    }

    /// Withdraws the current version of `appl`; with `abandon`, its generations too.
    fn undeploy_current(&mut self, appl: &str, abandon: bool) {
        let Some(application) = self.applications.remove(appl) else { return };
        self.forget_application(&application);
        if !abandon {
            self.starts.stop_crons(appl);
            return self.withdraw(&application);
        }
        self.forget_dispatches(appl, None);
        self.following.forget_application(appl);
        // Generations in flight are abandoned with the subscriptions that followed them:
        // their triggers were taken, so no new subscription sees them.
        let in_flight = self.starts.abandon(appl);
        let held = self.store().held(appl).unwrap_or_default();
        for (gid, _) in held {
            if let Err(e) = self.journal().release(appl, &gid) {
                tracing::warn!("{appl}/{gid}: forgetting the start held back: {e}");
            }
        }
        if application.home {
            for gid in in_flight {
                if let Err(e) = self.journal().forget(appl, &gid) {
                    tracing::warn!("{appl}/{gid}: forgetting the abandoned generation: {e}");
                }
            }
        }
        self.withdraw(&application);
    }

    /// Deployed version `version` of `appl`: the current one, or an earlier one kept for
    /// the generations that started on it.
    pub(super) fn version(&self, appl: &str, version: &str) -> Option<&Application> {
        let current = self.applications.get(appl).filter(|a| a.body.version == version);
        current.or_else(|| self.retiring.get(appl)?.iter().find(|a| a.body.version == version))
    }

    /// The version generation `gid` of `appl` runs on, as far as this agent knows (the
    /// current one if it has not seen the generation start).
    pub(super) fn version_of(&self, appl: &str, gid: &str) -> Option<&Application> {
        let followed = self.following.get(appl, gid);
        followed.and_then(|f| self.version(appl, &f.version)).or_else(|| self.applications.get(appl))
    }

    /// Withdraws the earlier versions of `appl` none of whose generations still run, once
    /// [`RETIRE_GRACE`] has passed since they were replaced.
    pub(super) fn retire_finished(&mut self, appl: &str) {
        let Some(retiring) = self.retiring.remove(appl) else { return };
        let now = self.now.at;
        let (running, done): (Vec<Application>, Vec<Application>) = retiring.into_iter().partition(|a| {
            let recent = a.replaced.is_some_and(|at| now.saturating_duration_since(at) < RETIRE_GRACE);
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
            self.withdraw(&application);
        }
    }

    /// Forgets what `application` subscribed to (its subscriptions are withdrawn apart).
    pub(super) fn forget_application(&mut self, application: &Application) {
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
}

/// What a body's text reads as: its calendar, each job's schedule (`None` for a virtual
/// job) and its cron triggers. A body that does not read is refused, in words.
#[derive(Debug)]
struct Parts {
    calendar: Arc<Calendar>,
    schedules: Vec<Option<Schedule>>,
    crons: Vec<(String, CronTrigger)>,
}

impl Parts {
    fn of(body: &EnvelopeBody) -> Result<Self, String> {
        let holidays = body
            .holidays
            .iter()
            .map(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|e| format!("holiday {d}: {e}")));
        let calendar = Arc::new(Calendar {
            name: body.appl.clone(),
            workdays: parse_weekdays(&body.workdays)?,
            holidays: holidays.collect::<Result<_, _>>()?,
        });
        let schedules = body
            .jobs
            .iter()
            .map(|job| {
                let schedule = job.info.as_ref().map(schedule_of).transpose();
                schedule.map_err(|e| format!("job {}: {e}", job.job))
            })
            .collect::<Result<Vec<_>, _>>()?;
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
        Ok(Self { calendar, schedules, crons })
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
