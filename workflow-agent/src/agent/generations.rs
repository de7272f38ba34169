//! Generations: started here (the home agent: by an operator, a cron or an event trigger,
//! held to `max-generations` by [`super::starts`]), seen starting and ending (every agent
//! follows its applications' generations, for catching up and for keeping a version
//! deployed while its generations run), and ended.

use padres_lang::Publication;

use super::catch_up::Following;
use super::core::AgentCore;
use super::outbox::Outgoing;
use super::starts::Step;
use super::text;

impl AgentCore {
    /// A publication matching one of `appl`'s event triggers: a generation, named after
    /// the publication's time and content, run on the day of its time in the application's
    /// zone.
    pub(super) fn event(&mut self, appl: &str, publication: &Publication) {
        let Some(application) = self.applications.get(appl) else { return };
        let tz: chrono_tz::Tz = application.body.tz.parse().unwrap_or(chrono_tz::UTC);
        let at = publication.time().and_then(|t| chrono::DateTime::from_timestamp_millis(t.millis()));
        let at = at.unwrap_or_else(|| self.now.wall());
        let date = at.with_timezone(&tz).format("%Y-%m-%d").to_string();
        let digest = padres_workflow::translate::digest(&publication.to_string());
        let gid = format!("event-{}-{:08x}", at.timestamp_millis(), digest & 0xffff_ffff);
        tracing::info!("{appl}/{gid}: triggered by {publication}");
        self.start_generation(appl, gid, date);
    }

    /// Starts generation `gid` of `appl` (this agent is its home): its trigger published,
    /// or held back while `max-generations` run ([`super::starts::Starts`]).
    pub(super) fn start_generation(&mut self, appl: &str, gid: String, date: String) {
        let mut steps = Vec::new();
        self.starts.start(appl, gid, date, &mut steps);
        self.carry_out(steps);
    }

    /// Generation `gid` of `appl`, started here, ended (its `APPL_END` ran) or never
    /// started (its trigger was refused): a held trigger may go.
    pub(super) fn generation_ended(&mut self, appl: &str, gid: &str) {
        let mut steps = Vec::new();
        self.starts.ended(appl, gid, &mut steps);
        self.carry_out(steps);
    }

    /// The broker refused generation `gid`'s trigger (or it could not be made): it never
    /// started, so it is not followed (nor caught up in), and its place and gid are free.
    pub(super) fn trigger_refused(&mut self, appl: &str, gid: &str) {
        self.following.forget(appl, gid);
        self.generation_ended(appl, gid);
    }

    /// Carries out what [`super::starts::Starts`] decided.
    pub(super) fn carry_out(&mut self, steps: Vec<Step>) {
        for step in steps {
            match step {
                Step::Start { appl, gid, date } => {
                    if let Err(e) = self.journal().release(&appl, &gid) {
                        tracing::warn!("{appl}/{gid}: journal: {e}");
                    }
                    // (A start held back across a restart, of a generation that ended
                    // meanwhile: its id is not used again, and its place goes to the next.)
                    if self.store().generation_ended(&appl, &gid).unwrap_or(false) {
                        tracing::warn!("{appl}/{gid}: not started, the generation has run and ended");
                        let mut next = Vec::new();
                        self.starts.ended(&appl, &gid, &mut next);
                        self.carry_out(next);
                        continue;
                    }
                    let Some(application) = self.applications.get(&appl) else {
                        // (No version is current: a new one failed to deploy after the
                        // old one was replaced.) It does not hold a place in flight.
                        tracing::warn!("{appl}/{gid}: not started, the application is not deployed here");
                        self.starts.not_started(&appl, &gid);
                        continue;
                    };
                    let version = application.body.version.clone();
                    // Its own trigger does not come back to it: followed from here.
                    self.follow_generation(&appl, &version, &gid, Some(date.clone()), self.now.wall_ms);
                    self.publish(Outgoing::Trigger(appl, version, gid, date));
                }
                Step::CronFired { appl, pattern, at_ms } => {
                    if let Err(e) = self.journal().cron_fired(&appl, &pattern, at_ms) {
                        tracing::warn!("cron trigger journal: {e}");
                    }
                }
                Step::Held { appl, gid, date } => {
                    if let Err(e) = self.journal().hold(&appl, &gid, &date) {
                        tracing::warn!("{appl}/{gid}: held back, but not kept in the journal: {e}");
                    }
                }
                Step::Unheld { appl, gid } => {
                    if let Err(e) = self.journal().release(&appl, &gid) {
                        tracing::warn!("{appl}/{gid}: journal: {e}");
                    }
                }
            }
        }
    }

    /// A publication of a subscription following `appl`'s generations: a trigger (one
    /// started) or an `APPL_END` status (one ended).
    pub(super) fn follow(&mut self, appl: &str, publication: &Publication) {
        let Some(gid) = text(publication, "gid") else { return };
        if publication.class() == "trigger" {
            let since_ms =
                publication.time().map_or_else(|| self.now.wall_ms, padres_lang::Timestamp::millis);
            let (version, date) =
                (text(publication, "version").unwrap_or_default(), text(publication, "date"));
            self.follow_generation(appl, version, gid, date.map(str::to_owned), since_ms);
        } else if text(publication, "status").is_some_and(|s| s != "started") {
            // Only the home agent ends a generation (another agent may be allowed to
            // publish the application's statuses under its own name).
            let home = self.version_of(appl, gid).and_then(|a| a.body.home.as_deref());
            if let Some(home) = home
                && text(publication, "agent") != Some(home)
            {
                tracing::warn!(
                    "{appl}/{gid}: an APPL_END status from {}, not the home agent {home}: ignored",
                    text(publication, "agent").unwrap_or("no agent")
                );
                return;
            }
            self.end_generation(appl, gid);
        }
    }

    /// Generation `gid` of version `version` of `appl`, triggered at `since_ms` to run on
    /// `date`, is seen started: followed (to catch up in, and to keep its version deployed
    /// until it ends), unless it has ended or is beyond the horizon.
    pub(super) fn follow_generation(
        &mut self,
        appl: &str,
        version: &str,
        gid: &str,
        date: Option<String>,
        since_ms: i64,
    ) {
        let wall_ms = self.now.wall_ms;
        if self.version(appl, version).is_none()
            || self.following.get(appl, gid).is_some()
            || !Following::within_horizon(since_ms, wall_ms)
        {
            return;
        }
        match self.journal().generation_ended(appl, gid) {
            Ok(false) => {}
            Ok(true) => return,
            Err(e) => {
                tracing::warn!("{appl}/{gid}: journal: {e}");
                return;
            }
        }
        let now = self.clock();
        self.following.follow(appl, gid, version, date, since_ms, wall_ms, now);
    }

    /// Generation `gid` of `appl` has ended (its `APPL_END` ran, here or elsewhere): no
    /// longer followed, forgotten by the journal with its end marked; at its home agent, a
    /// held trigger goes.
    pub(super) fn end_generation(&mut self, appl: &str, gid: &str) {
        self.following.forget(appl, gid);
        let at_ms = self.now.wall_ms;
        if let Err(e) = self.journal().end_generation(appl, gid, at_ms) {
            tracing::warn!("{appl}/{gid}: marking the generation ended: {e}");
        }
        self.forget_dispatches(appl, Some(gid));
        self.generation_ended(appl, gid);
        self.retire_finished(appl);
    }
}
