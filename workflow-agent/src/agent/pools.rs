//! The agent's part in pools (`docs/pools.md`): as a member, it reports its load and runs
//! the jobs dispatched to it; as an application's home agent, it dispatches the
//! application's pool jobs to members, holds them while every member is at its limit,
//! and dispatches a job again when the member running it is gone.
//!
//! Why a pool job runs once per generation without a coordinator of its own: only the
//! application's home agent dispatches its pool jobs, and its journal claims each job of
//! each generation once, as any agent's does for its own jobs. A dispatch is a
//! `job_status` publication (`dispatched`) naming one member and that member's
//! incarnation; a member runs only what names it in its current incarnation, and its
//! journal takes each dispatch once however often it is delivered (a reconnection replays
//! them from the history stores). Reordering cannot make two members run a job: there is
//! one dispatch per (generation, job) until the home agent decides the member is gone
//! (silent for `silence` report periods, restarted, or left), and only then another, with
//! a higher attempt number. What can still run twice (`docs/pools.md`): a job whose member
//! ended it and died before its status left; one whose member was cut off for longer than
//! that while its process ran on; and what a killed job's own children go on doing. The
//! statuses of the later dispatch rank above, and the home agent counts only the current
//! member's.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::Instant;

use padres_lang::{Message, Publication, Value};
use padres_workflow::JobInfo;
use padres_workflow::model::PoolSpec;
use padres_workflow::progress::StatusEvent;
use padres_workflow::translate::status_advertisement;

use super::core::{AgentCore, Output, Then};
use super::outbox::{Outgoing, Status};
use super::text;
use crate::journal::{Claim, Dispatched};
use crate::pool::{
    ADMISSION, Advice, Change, Load, MemberState, Provisioner, advice_advertisement, load_advertisement,
    pool_subscription,
};

/// A pool job dispatched (or waiting to be) by this home agent.
#[derive(Debug)]
pub(super) struct Dispatch {
    d: Dispatched,
    /// The highest attempt the member was seen starting.
    last_attempt: u32,
    /// The lowest attempt whose end counts: this dispatch's, or, dispatched again to the
    /// same member, the first of those dispatches' (it runs the job once, and its end is
    /// of that attempt). An older end (a replayed status of an earlier run) does not.
    accept_from: u32,
    /// Why it was dispatched (again), for the `dispatched` status.
    reason: Option<String>,
    /// Run here, by this home agent as a member of the job's pool.
    run_here: bool,
    /// When it was last published.
    sent: Instant,
}

/// Where a pool job can go now.
enum Place {
    /// To this member (name, incarnation).
    To(String, i64),
    /// Nowhere yet: every member is at its limit, or there is none.
    Wait,
    /// Nowhere: the job is no longer deployed here.
    Gone,
}

type Key = (String, String, String);

impl AgentCore {
    /// This agent's load report now.
    pub(super) fn report(&mut self) -> Load {
        let at = self.now.at;
        self.runs.meter.prune(at);
        let meter = &self.runs.meter;
        Load {
            agent: self.options.name.clone(),
            // The broker's own name, from its welcome (what the federation's reports and
            // `padres workflow place` know it by).
            broker: self.broker.clone(),
            pools: self.options.pools.clone(),
            incarnation: self.incarnation,
            state: self.state,
            period_ms: i64::try_from(self.options.load_period.as_millis()).unwrap_or(i64::MAX),
            capacity: i64::try_from(self.options.capacity.unwrap_or(self.options.max_parallel).max(1))
                .unwrap_or(i64::MAX),
            running: meter.running(),
            queued: meter.queued(),
            delay_short_ms: meter.delay_ms(at, crate::pool::SHORT_WINDOW),
            delay_long_ms: meter.delay_ms(at, crate::pool::LONG_WINDOW),
            arrivals: meter.arrivals(at),
        }
    }

    /// Announces the agent (its load advertisement; its first report goes once that is
    /// answered) and, for a pool member, takes the jobs dispatched to this incarnation of
    /// it.
    pub(super) fn join(&mut self) {
        let load = Message::Advertise(load_advertisement(&self.options.name));
        self.ask(Ok(load), Then::Needed("its load advertisement"));
        if !self.options.pools.is_empty() {
            // A minute before it started: a broker's clock may be behind this machine's
            // (the incarnation in the filter keeps earlier runs' dispatches out).
            let since = padres_lang::Timestamp::from_millis(self.incarnation - 60_000)
                .map_or_else(|| "0".to_owned(), padres_lang::Timestamp::to_rfc3339);
            let sub = format!(
                "s [class,eq,'job_status'],[status,eq,'dispatched'],[to,eq,{}],[incarnation,=,{}],[time,>=,{since}]",
                Value::str(&self.options.name),
                self.incarnation
            );
            let message = self.parse(&sub);
            self.ask(message, Then::Assignments);
            tracing::info!("member of the pools {}", self.options.pools.join(", "));
        }
        if let Some(provisioning) = self.options.provision.clone() {
            let pool = provisioning.watch.pool.clone();
            let advice = Message::Advertise(advice_advertisement(&pool, &self.options.name));
            self.ask(Ok(advice), Then::Needed("its advice advertisement"));
            let message = self.parse(&pool_subscription(&pool));
            self.ask(message, Then::PoolLoads(pool.clone()));
            tracing::info!("watching pool {pool} to advise it to grow or shrink");
            self.provisioner = Some(Provisioner::new(provisioning.watch));
        }
    }

    /// As a provisioner: advice, when the time has come, published and acted on.
    fn provision(&mut self) {
        let Some(provisioner) = &mut self.provisioner else { return };
        // Members are given a few periods to report before the watch begins.
        let since = self.pool_loads.get(&provisioner.spec.pool).map(|(_, since)| *since);
        let settled = since.is_some_and(|s| {
            self.now.at.saturating_duration_since(s) > self.options.load_period * self.options.silence.max(1)
        });
        if !settled {
            return;
        }
        let pool = provisioner.spec.pool.clone();
        let waiting =
            self.admission.iter().filter(|key| self.jobs_pool(key).as_deref() == Some(pool.as_str())).count();
        let Some(provisioner) = &mut self.provisioner else { return };
        let Some(advice) = provisioner.observe(&self.members, self.now.at, self.options.silence, waiting)
        else {
            return;
        };
        let pool = provisioner.spec.pool.clone();
        tracing::info!("pool {pool}: {} advised: {advice:?}", advice.word());
        let command = self.options.provision.as_ref().and_then(|p| match advice {
            Advice::ScaleUp { .. } => p.scale_up.clone(),
            Advice::ScaleDown { .. } => p.scale_down.clone(),
        });
        if let Some(command) = command {
            let (members, member) = match &advice {
                Advice::ScaleUp { members, .. } => (*members, String::new()),
                Advice::ScaleDown { members, member, .. } => (*members, member.clone()),
            };
            let env = vec![
                ("PADRES_POOL", pool.clone()),
                ("PADRES_ADVICE", advice.word().to_owned()),
                ("PADRES_MEMBERS", members.to_string()),
                ("PADRES_MEMBER", member),
            ];
            let what = format!("pool {pool}: {}", advice.word());
            self.push(Output::Command { command, env, what });
        }
        self.publish(Outgoing::Advice(pool, advice));
    }

    /// An operator drains the agent: it takes no new pool work, finishes what it has, and
    /// leaves.
    pub(super) fn drain(&mut self) {
        if self.state == MemberState::Up {
            tracing::info!("draining: no new pool jobs; leaving once the jobs here have ended");
            self.state = MemberState::Leaving;
            let report = self.report();
            self.publish(Outgoing::Load(report));
        }
    }

    /// Every load period: the load report; as a home agent, jobs of members gone
    /// dispatched again and held jobs admitted. True when a drained agent has nothing left
    /// and leaves (its last report, `left`, is queued). `caught_up`: every notification
    /// come so far has been read, so the members' reports are current up to now.
    pub(super) fn pool_tick(&mut self, caught_up: bool) -> bool {
        let report = self.report();
        let now_ms = self.now.wall_ms;
        if caught_up {
            self.members.heard(now_ms);
        }
        // A broker does not send a client its own publications: a home agent that is a
        // member of the pools it dispatches to takes its own report here.
        if !self.options.pools.is_empty() && !self.pool_loads.is_empty() {
            self.load_taken(report.clone(), now_ms);
        }
        if self.state == MemberState::Leaving && report.running == 0 && report.queued == 0 {
            self.state = MemberState::Left;
            let report = self.report();
            self.publish(Outgoing::Load(report));
            return true;
        }
        self.publish(Outgoing::Load(report));
        self.redispatch_gone();
        self.publish_unheard();
        self.admit();
        self.provision();
        false
    }

    /// Takes the pool jobs the journal says were dispatched from here and not ended.
    pub(super) fn restore_dispatches(&mut self) {
        let kept = match self.journal().dispatches() {
            Ok(kept) => kept,
            Err(e) => return tracing::error!("journal: the pool jobs dispatched cannot be read: {e}"),
        };
        for d in kept {
            let key = (d.appl.clone(), d.gid.clone(), d.job.clone());
            self.running.insert(key.clone());
            if d.agent.is_empty() {
                self.admission.push_back(key.clone());
            } else {
                // Published again: the agent may have stopped between keeping it and
                // sending it. A member takes a dispatch once, and ignores one for an
                // earlier run of it.
                self.publish_dispatch(&key, &d, None);
            }
            let (last_attempt, accept_from) = (d.attempt.saturating_sub(1), d.attempt);
            self.dispatches.insert(
                key,
                Dispatch { d, last_attempt, accept_from, reason: None, run_here: false, sent: self.now.at },
            );
        }
        if !self.dispatches.is_empty() {
            tracing::info!(
                "{} pool jobs dispatched before the agent stopped, followed again",
                self.dispatches.len()
            );
        }
    }

    /// A member's load report.
    pub(super) fn load_report(&mut self, publication: &Publication) {
        let Some(load) = Load::from_publication(publication) else { return };
        let at_ms = publication.time().map_or_else(|| self.now.wall_ms, padres_lang::Timestamp::millis);
        self.load_taken(load, at_ms);
    }

    /// Member `load.agent`'s report, made at `at_ms`.
    fn load_taken(&mut self, load: Load, at_ms: i64) {
        let agent = load.agent.clone();
        match self.members.report(load, self.now.at, at_ms) {
            Change::Joined => tracing::info!("pool member {agent} is up"),
            Change::Restarted { was } => {
                tracing::info!("pool member {agent} restarted: what its earlier run had is dispatched again");
                self.redispatch_from(&agent, Some(was), "restarted");
            }
            Change::Left => {
                tracing::info!("pool member {agent} left");
                self.redispatch_from(&agent, None, "left");
            }
            Change::Load => {}
        }
        self.admit();
    }

    /// A status of a pool job of `appl` (dispatched from here): the member started it, or
    /// it ended.
    pub(super) fn pool_status(&mut self, appl: &str, publication: &Publication) {
        let Some(event) = StatusEvent::from_publication(appl, publication) else { return };
        let key = (appl.to_owned(), event.gid.clone(), event.job.clone());
        let Some(dispatch) = self.dispatches.get_mut(&key) else { return };
        // Only the member it is dispatched to now speaks for it, of this dispatch's run.
        if event.status == "dispatched"
            || event.agent != dispatch.d.agent
            || event.attempt < dispatch.accept_from
        {
            return;
        }
        dispatch.last_attempt = dispatch.last_attempt.max(event.attempt);
        if !event.ended() {
            return;
        }
        self.dispatches.remove(&key);
        self.members.ended(&event.agent);
        let ended = self.journal().end(&key.0, &key.1, &key.2, &event.status, event.exit, event.attempt);
        let dropped = self.journal().drop_dispatch(&key.0, &key.1, &key.2);
        if let Err(e) = ended.and(dropped) {
            tracing::warn!("{}/{}/{}: journal: {e}", key.0, key.1, key.2);
        }
        self.not_running(&key);
        self.admit();
    }

    /// The job a dispatch publication gives this member (this incarnation of it), with
    /// the attempt to run from and its pool.
    fn assignment(&self, publication: &Publication) -> Option<(Key, u32, String)> {
        let (Some(appl), Some(gid), Some(job)) =
            (text(publication, "appl"), text(publication, "gid"), text(publication, "job"))
        else {
            return None;
        };
        let key = (appl.to_owned(), gid.to_owned(), job.to_owned());
        let for_me = text(publication, "to") == Some(self.options.name.as_str())
            && matches!(publication.get("incarnation"), Some(Value::Int(i)) if *i == self.incarnation);
        if !for_me {
            return None;
        }
        let attempt = match publication.get("attempt") {
            Some(Value::Int(n)) => u32::try_from(*n).unwrap_or(1).max(1),
            _ => 1,
        };
        Some((key, attempt, text(publication, "pool").unwrap_or_default().to_owned()))
    }

    /// A job dispatched to this member: its status advertised before anything is
    /// published of it (a restarted member has not yet), then run.
    pub(super) fn assigned(&mut self, publication: &Publication) {
        let Some((key, _, _)) = self.assignment(publication) else { return };
        let advertised = (key.0.clone(), key.2.clone());
        if self.advertised.insert(advertised) {
            let adv = Message::Advertise(status_advertisement(&key.0, &key.2, &self.options.name));
            return self.ask(Ok(adv), Then::Assigned(Box::new(publication.clone())));
        }
        self.run_assigned(publication);
    }

    /// A job dispatched to this member, its status advertised: run from the attempt it
    /// names, once.
    pub(super) fn run_assigned(&mut self, publication: &Publication) {
        let Some((key, attempt, pool)) = self.assignment(publication) else { return };
        let info = text(publication, "info").map(JobInfo::from_json);
        let (Some(Ok(info)), Some(date)) = (info, text(publication, "date")) else {
            // Said, so that its home agent does not wait for it.
            tracing::warn!("{}/{}/{}: a dispatch without its job or date: not run", key.0, key.1, key.2);
            let reason = Some("its dispatch did not carry the job or the generation's date".to_owned());
            let failed = Status::new(&key, "failed", -1, attempt).because(reason);
            return self.send(failed.with(vec![("pool", Value::str(&pool))]));
        };
        let date = date.to_owned();
        if !self.running.insert(key.clone()) {
            return;
        }
        let dispatched = attempt;
        let taken = self.journal().take_assignment(&key.0, &key.1, &key.2, attempt);
        match taken {
            Ok(Claim::New) => {}
            Ok(Claim::Ended { status, exit, attempt }) => {
                // Dispatched again after it ended here (its status was late, or lost to
                // the home agent, which publishes an unanswered dispatch again), or the
                // same dispatch delivered again (a reconnection replays them): said again,
                // not run again.
                self.not_running(&key);
                let status = match status.as_str() {
                    "succeeded" => "succeeded",
                    "skipped" => "skipped",
                    "timeout" => "timeout",
                    _ => "failed",
                };
                tracing::info!(
                    "{}/{}/{}: dispatched again, and {status} here already: said again",
                    key.0,
                    key.1,
                    key.2
                );
                // Numbered as the dispatch, so that it ranks above it.
                let attempt = attempt.max(dispatched);
                let again = Status::new(&key, status, exit, attempt).with(vec![("pool", Value::str(&pool))]);
                return self.send(again);
            }
            Ok(Claim::Unfinished { .. } | Claim::GenerationEnded) => return self.not_running(&key),
            Err(e) => {
                tracing::error!("{}/{}/{}: the journal failed, not run: {e}", key.0, key.1, key.2);
                return self.not_running(&key);
            }
        }
        tracing::info!(
            "{}/{}/{}: dispatched here (pool {}), from attempt {attempt}",
            key.0,
            key.1,
            key.2,
            pool
        );
        self.spawn_run(key, Arc::new(info), date, attempt, Some(pool));
    }

    /// Dispatches pool job `key` (claimed here, its home, and marked running) of the
    /// generation run on `date`, for the `n`th time, to run from attempt `attempt`: to the
    /// member its pool's policy chooses (not `except`, if another can take it), or held
    /// while every member is at its limit.
    pub(super) fn dispatch(
        &mut self,
        key: Key,
        date: String,
        attempt: u32,
        n: u32,
        reason: Option<String>,
        except: Option<&str>,
    ) {
        let mut d = Dispatched {
            appl: key.0.clone(),
            gid: key.1.clone(),
            job: key.2.clone(),
            agent: String::new(),
            incarnation: 0,
            attempt,
            n,
            date,
        };
        let earlier = self.dispatches.get(&key).map(|e| (e.d.agent.clone(), e.accept_from));
        let placed = self.place(&key, except);
        match placed {
            Place::To(agent, incarnation) => (d.agent, d.incarnation) = (agent, incarnation),
            Place::Wait => {
                tracing::info!("{}/{}/{}: held: no member of its pool has room", key.0, key.1, key.2);
                self.admission.push_back(key.clone());
            }
            Place::Gone => {
                tracing::warn!("{}/{}/{}: no longer deployed here: not dispatched", key.0, key.1, key.2);
                self.dispatches.remove(&key);
                return self.not_running(&key);
            }
        }
        // Kept before it is sent: after a restart it is followed, and sent again.
        if let Err(e) = self.journal().keep_dispatch(&d) {
            tracing::warn!("{}/{}/{}: journal: {e}", key.0, key.1, key.2);
        }
        if !d.agent.is_empty() {
            self.publish_dispatch(&key, &d, reason.clone());
        }
        // Dispatched again to the same member (the one it was taken from was the only
        // one): that member runs the job once, so an end of the earlier attempt counts.
        let accept_from = match earlier {
            Some((agent, from)) if !d.agent.is_empty() && agent == d.agent => from,
            _ => attempt,
        };
        let last_attempt = attempt.saturating_sub(1);
        self.dispatches.insert(
            key.clone(),
            Dispatch { d, last_attempt, accept_from, reason, run_here: false, sent: self.now.at },
        );
        self.run_own(&key);
    }

    /// Pool job `key`, if it is dispatched to this very agent (a home agent that is a
    /// member of the pool; a broker does not send it its own dispatch): run here, once,
    /// under its own claim.
    fn run_own(&mut self, key: &Key) {
        let Some(own) = self.dispatches.get_mut(key) else { return };
        if own.run_here || own.d.agent != self.options.name || own.d.incarnation != self.incarnation {
            return;
        }
        own.run_here = true;
        let (date, attempt) = (own.d.date.clone(), own.d.attempt);
        let Some((info, pool)) = self.pool_job(key) else { return };
        let pool = pool.name.clone();
        tracing::info!("{}/{}/{}: dispatched here, by itself (pool {pool})", key.0, key.1, key.2);
        self.spawn_run(key.clone(), info.clone(), date, attempt, Some(pool));
    }

    /// The member pool job `key` goes to now, if one can take it (see [`AgentCore::dispatch`]).
    fn place(&mut self, key: &Key, except: Option<&str>) -> Place {
        let Some(pool) = self.pool_job(key).map(|(_, pool)| pool.clone()) else { return Place::Gone };
        let (at, misses) = (self.now.at, self.options.silence);
        let chosen = self.members.choose(&pool.name, pool.policy, at, misses, except);
        let chosen = if chosen.is_some() || self.admission.len() < ADMISSION {
            chosen
        } else {
            // The admission queue is full: the member with the most room takes it all the
            // same.
            let live = self.members.candidates(&pool.name, at, misses);
            live.max_by_key(|m| m.headroom()).map(|m| (m.load.agent.clone(), m.load.incarnation))
        };
        match chosen {
            Some((agent, incarnation)) => Place::To(agent, incarnation),
            None => Place::Wait,
        }
    }

    /// Publishes dispatch `d` of pool job `key`.
    fn publish_dispatch(&mut self, key: &Key, d: &Dispatched, reason: Option<String>) {
        let Some((info, pool)) = self.pool_job(key) else { return };
        let info = info.to_json();
        tracing::info!("{}/{}/{}: dispatched to {} (pool {})", key.0, key.1, key.2, d.agent, pool.name);
        let status = Status::new(key, "dispatched", 0, d.attempt).because(reason).with(vec![
            ("pool", Value::str(&pool.name)),
            ("to", Value::str(&d.agent)),
            ("incarnation", Value::Int(d.incarnation)),
            ("date", Value::str(&d.date)),
            ("info", Value::str(&info)),
        ]);
        self.send(status);
    }

    /// Held pool jobs go to members with room, in order (a job whose pool has no room
    /// does not hold back those of other pools).
    fn admit(&mut self) {
        let mut full: Vec<String> = Vec::new();
        let mut still = VecDeque::new();
        while let Some(key) = self.admission.pop_front() {
            let Some(dispatch) = self.dispatches.get(&key) else { continue };
            let (waited, reason) = (dispatch.d.clone(), dispatch.reason.clone());
            let pool = self.jobs_pool(&key).unwrap_or_default();
            if full.contains(&pool) {
                still.push_back(key);
                continue;
            }
            match self.place(&key, None) {
                Place::To(agent, incarnation) => {
                    let d = Dispatched { agent, incarnation, ..waited };
                    if let Err(e) = self.journal().keep_dispatch(&d) {
                        tracing::warn!("{}/{}/{}: journal: {e}", key.0, key.1, key.2);
                    }
                    self.publish_dispatch(&key, &d, reason);
                    if let Some(dispatch) = self.dispatches.get_mut(&key) {
                        dispatch.accept_from = d.attempt;
                        dispatch.d = d;
                        dispatch.sent = self.now.at;
                    }
                    self.run_own(&key);
                }
                Place::Wait => {
                    full.push(pool);
                    still.push_back(key);
                }
                Place::Gone => {
                    tracing::warn!("{}/{}/{}: no longer deployed here: not dispatched", key.0, key.1, key.2);
                    self.drop_dispatch(&key);
                }
            }
        }
        self.admission = still;
    }

    /// Pool job `key` is no longer dispatched from here (its application went).
    fn drop_dispatch(&mut self, key: &Key) {
        self.dispatches.remove(key);
        if let Err(e) = self.journal().drop_dispatch(&key.0, &key.1, &key.2) {
            tracing::warn!("{}/{}/{}: journal: {e}", key.0, key.1, key.2);
        }
        self.not_running(key);
    }

    /// Publishes again each dispatch its member, alive, has said nothing of for a few
    /// report periods: it may have been lost on its way (with a broker or a link that
    /// failed for good), and a member takes a dispatch once, and says again what it made
    /// of one it has ended.
    fn publish_unheard(&mut self) {
        let wait = self.options.load_period * self.options.silence.max(1) * 2;
        let at = self.now.at;
        let mut unheard: Vec<Key> = self
            .dispatches
            .iter()
            .filter(|(_, x)| {
                let d = &x.d;
                !d.agent.is_empty()
                    && !x.run_here
                    && d.agent != self.options.name
                    && x.last_attempt < d.attempt
                    && at.saturating_duration_since(x.sent) > wait
            })
            .map(|(key, _)| key.clone())
            .collect();
        unheard.sort();
        for key in unheard {
            let Some(x) = self.dispatches.get_mut(&key) else { continue };
            x.sent = at;
            let (d, reason) = (x.d.clone(), x.reason.clone());
            tracing::info!(
                "{}/{}/{}: nothing heard of its dispatch to {}: published again",
                key.0,
                key.1,
                key.2,
                d.agent
            );
            self.publish_dispatch(&key, &d, reason);
        }
    }

    /// Jobs dispatched to members silent for `silence` periods (or never heard from since
    /// this agent subscribed to their pool's reports, for as long) are dispatched again.
    fn redispatch_gone(&mut self) {
        let (at, misses) = (self.now.at, self.options.silence);
        let settled = |since: Instant| {
            at.saturating_duration_since(since) > self.options.load_period * misses.max(1) * 2
        };
        let mut gone = Vec::new();
        for (key, dispatch) in &self.dispatches {
            let d = &dispatch.d;
            if d.agent.is_empty() || self.members.alive(&d.agent, d.incarnation, at, misses) {
                continue;
            }
            // A member not heard from yet (this agent has just started) is given time.
            let known = self.members.get(&d.agent).is_some();
            let pool = self.jobs_pool(key);
            let watched =
                pool.and_then(|p| self.pool_loads.get(&p)).is_some_and(|(_, since)| settled(*since));
            if known || watched {
                gone.push(key.clone());
            }
        }
        gone.sort();
        for key in gone {
            let agent = self.dispatches.get(&key).map(|d| d.d.agent.clone()).unwrap_or_default();
            self.redispatch(key, &agent, "silent");
        }
    }

    /// Pool job `key` as deployed here (in its generation's version): what it runs, and
    /// its pool.
    fn pool_job(&self, key: &Key) -> Option<(&Arc<JobInfo>, &PoolSpec)> {
        let deployed = self.deployed_job(&key.0, &key.1, &key.2).ok()?;
        Some((deployed.info.as_ref()?, deployed.pool.as_ref()?))
    }

    /// The pool of pool job `key`, as deployed.
    fn jobs_pool(&self, key: &Key) -> Option<String> {
        self.pool_job(key).map(|(_, pool)| pool.name.clone())
    }

    /// Jobs dispatched to `agent` (to its incarnation `was`, or any) are dispatched again.
    fn redispatch_from(&mut self, agent: &str, was: Option<i64>, why: &str) {
        let keys: Vec<Key> = self
            .dispatches
            .iter()
            .filter(|(_, d)| d.d.agent == agent && was.is_none_or(|w| d.d.incarnation == w))
            .map(|(key, _)| key.clone())
            .collect();
        let mut keys = keys;
        keys.sort();
        for key in keys {
            self.redispatch(key, agent, why);
        }
    }

    /// Pool job `key`'s member `agent` is gone (`why`): dispatched again from the attempt
    /// after the last seen, or, after its pool's most re-dispatches, `failed`.
    fn redispatch(&mut self, key: Key, agent: &str, why: &str) {
        let Some(dispatch) = self.dispatches.get(&key) else { return };
        let (d, last_attempt) = (dispatch.d.clone(), dispatch.last_attempt);
        let Some(most) = self.pool_job(&key).map(|(_, pool)| pool.redispatch) else {
            tracing::warn!("{}/{}/{}: no longer deployed here: not dispatched again", key.0, key.1, key.2);
            return self.drop_dispatch(&key);
        };
        let attempt = last_attempt.max(d.attempt) + 1;
        if d.n > most {
            let reason = format!("its agent {agent} is {why}, and it was dispatched {} times", d.n);
            tracing::warn!("{}/{}/{}: {reason}: failed", key.0, key.1, key.2);
            let pool = self.jobs_pool(&key).unwrap_or_default();
            self.drop_dispatch(&key);
            let status = Status::new(&key, "failed", -1, attempt)
                .because(Some(reason))
                .with(vec![("pool", Value::str(&pool))]);
            return self.finish(&key, status);
        }
        let reason = format!("dispatched again: its agent {agent} is {why}");
        tracing::warn!("{}/{}/{}: {reason}", key.0, key.1, key.2);
        self.dispatch(key, d.date, attempt, d.n + 1, Some(reason), Some(agent));
    }

    /// Generation `gid` of `appl` ended (or, without `gid`, the application was
    /// undeployed): nothing of it is dispatched any more.
    pub(super) fn forget_dispatches(&mut self, appl: &str, gid: Option<&str>) {
        let gone = |key: &Key| key.0 == appl && gid.is_none_or(|g| key.1 == g);
        let mut keys: Vec<Key> = self.dispatches.keys().filter(|k| gone(k)).cloned().collect();
        keys.sort();
        for key in keys {
            if gid.is_none() {
                self.drop_dispatch(&key);
            } else {
                self.dispatches.remove(&key);
                self.not_running(&key);
            }
        }
        self.admission.retain(|key| !gone(key));
    }
}
