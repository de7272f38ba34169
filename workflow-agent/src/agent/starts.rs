//! Generation starts at an application's home agent (the one running `APPL_START`): by an
//! operator's `trigger`, by each cron trigger ([`crate::trigger`]) and by each publication
//! matching an event trigger; held back while `max-generations` generations run.
//!
//! Sans-IO, in the router's style: the agent hands in what happened with the wall-clock
//! time and carries out the [`Step`]s handed back (publish a generation's trigger, write a
//! cron trigger's firing to the journal). Nothing here reads the clock, sleeps or touches
//! the journal: [`Starts::poll_timeout`] says when the next cron occurrence falls, and
//! [`Starts::handle_timeout`] fires what is due.
//!
//! - **In flight**: a generation started here and not ended (its `APPL_END` not run, or its
//!   trigger refused). A start for a generation in flight is dropped (it is the same one).
//!   While `max-generations` are in flight, a start waits, in order; when one ends, the
//!   first waiting start that is not in flight by then takes its place.
//! - **Cron**: a trigger deployed before (the journal says when it last fired) makes up the
//!   latest occurrence missed since, once, and skips the earlier ones; a trigger deployed
//!   for the first time fires nothing from the past and records now as its last firing.
//!   Then each occurrence fires when it comes; woken late (a machine suspended, a clock set
//!   forward) past several, the latest fires, once.

use std::collections::{HashMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};

use crate::trigger::CronTrigger;

/// What the agent is to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Publish the trigger of generation `gid` of `appl`, run on `date` (the current
    /// version's), and follow the generation.
    Start { appl: String, gid: String, date: String },
    /// Write to the journal that cron trigger `pattern` of `appl` fired for the occurrence
    /// at `at_ms` (epoch milliseconds).
    CronFired { appl: String, pattern: String, at_ms: i64 },
    /// Write to the journal that generation `gid` of `appl`, run on `date`, waits to start
    /// (a [`Step::Start`] of it releases it).
    Held { appl: String, gid: String, date: String },
    /// Generation `gid` of `appl` no longer waits, and is not started from here (it was
    /// started meanwhile): its journal row goes.
    Unheld { appl: String, gid: String },
}

/// A cron trigger of an application.
#[derive(Debug)]
struct Cron {
    pattern: String,
    trigger: CronTrigger,
    /// The occurrences up to here are done with.
    after: DateTime<Utc>,
    /// The next occurrence after `after`.
    next: Option<DateTime<Utc>>,
}

impl Cron {
    fn new(pattern: String, trigger: CronTrigger, after: DateTime<Utc>) -> Self {
        let next = trigger.next_after(after);
        Self { pattern, trigger, after, next }
    }
}

/// One application this agent is home to.
#[derive(Debug)]
struct Home {
    /// Its `max-generations` (at least 1).
    most: usize,
    in_flight: HashSet<String>,
    /// Starts waiting for room: gid and date.
    held: VecDeque<(String, String)>,
    crons: Vec<Cron>,
}

/// The generation starts of every application this agent is home to.
#[derive(Debug, Default)]
pub(crate) struct Starts {
    homes: HashMap<String, Home>,
}

impl Starts {
    /// `appl` is deployed here as its home, with `max_generations`; `started` are the
    /// generations the journal says were started here and have not ended (they count as in
    /// flight), `held` those it says wait to start, in order. A new version deployed keeps
    /// what is in flight and waiting.
    pub(crate) fn home(
        &mut self,
        appl: &str,
        max_generations: u32,
        started: impl IntoIterator<Item = String>,
        held: impl IntoIterator<Item = (String, String)>,
    ) {
        let most = usize::try_from(max_generations.max(1)).unwrap_or(usize::MAX);
        let home = self.homes.entry(appl.to_owned()).or_insert_with(|| Home {
            most,
            in_flight: HashSet::new(),
            held: VecDeque::new(),
            crons: Vec::new(),
        });
        home.most = most;
        home.in_flight.extend(started);
        for (gid, date) in held {
            if !home.held.iter().any(|(g, _)| *g == gid) {
                home.held.push_back((gid, date));
            }
        }
    }

    /// `appl`'s cron triggers from now on, replacing any before: each `(pattern, trigger,
    /// when the journal says it last fired)`. A missed occurrence is made up now.
    pub(crate) fn set_crons(
        &mut self,
        appl: &str,
        crons: Vec<(String, CronTrigger, Option<i64>)>,
        now: DateTime<Utc>,
        out: &mut Vec<Step>,
    ) {
        let Some(home) = self.homes.get_mut(appl) else { return };
        home.crons.clear();
        let mut missed = Vec::new();
        for (pattern, trigger, last) in crons {
            match last.and_then(DateTime::from_timestamp_millis) {
                Some(last) => {
                    if let Some((latest, skipped)) = trigger.missed(last, now) {
                        if skipped > 0 {
                            tracing::warn!(
                                "{appl}: cron trigger '{pattern}': {skipped} runs missed while down are skipped, the latest made up"
                            );
                        }
                        missed.push((pattern.clone(), trigger.clone(), latest));
                    }
                }
                None => out.push(Step::CronFired {
                    appl: appl.to_owned(),
                    pattern: pattern.clone(),
                    at_ms: now.timestamp_millis(),
                }),
            }
            home.crons.push(Cron::new(pattern, trigger, now));
        }
        for (pattern, trigger, at) in missed {
            self.fire(appl, &pattern, &trigger, at, out);
        }
    }

    /// `appl`'s cron triggers stop (a newer version replaces it, or it is withdrawn).
    pub(crate) fn stop_crons(&mut self, appl: &str) {
        if let Some(home) = self.homes.get_mut(appl) {
            home.crons.clear();
        }
    }

    /// `appl` is withdrawn with its generations: what was in flight, to be forgotten.
    pub(crate) fn abandon(&mut self, appl: &str) -> Vec<String> {
        let mut gids: Vec<String> =
            self.homes.remove(appl).map(|h| h.in_flight.into_iter().collect()).unwrap_or_default();
        gids.sort();
        gids
    }

    /// Starts generation `gid` of `appl` on `date`, or holds it back while
    /// `max-generations` run. Nothing for an application this agent is not home to.
    pub(crate) fn start(&mut self, appl: &str, gid: String, date: String, out: &mut Vec<Step>) {
        let Some(home) = self.homes.get_mut(appl) else { return };
        if home.in_flight.contains(&gid) || home.held.iter().any(|(g, _)| *g == gid) {
            return;
        }
        if home.in_flight.len() >= home.most {
            tracing::info!(
                "{appl}/{gid}: held back, {} generations running (max-generations {})",
                home.in_flight.len(),
                home.most
            );
            home.held.push_back((gid.clone(), date.clone()));
            out.push(Step::Held { appl: appl.to_owned(), gid, date });
            return;
        }
        home.in_flight.insert(gid.clone());
        out.push(Step::Start { appl: appl.to_owned(), gid, date });
    }

    /// Generation `gid` of `appl`, started here, ended (its `APPL_END` ran) or never
    /// started (its trigger was refused): the first waiting start that is not a repeat of
    /// one in flight takes its place.
    pub(crate) fn ended(&mut self, appl: &str, gid: &str, out: &mut Vec<Step>) {
        let Some(home) = self.homes.get_mut(appl) else { return };
        if !home.in_flight.remove(gid) {
            return;
        }
        while let Some((gid, date)) = home.held.pop_front() {
            if !home.in_flight.contains(&gid) {
                return self.start(appl, gid, date, out);
            }
            out.push(Step::Unheld { appl: appl.to_owned(), gid });
        }
    }

    /// Generation `gid` of `appl`, handed out to start, could not be (the application has
    /// no current version here): it holds no place in flight, and nothing waiting takes one.
    pub(crate) fn not_started(&mut self, appl: &str, gid: &str) {
        if let Some(home) = self.homes.get_mut(appl) {
            home.in_flight.remove(gid);
        }
    }

    /// Generations of `appl` in flight.
    #[cfg(test)]
    fn in_flight(&self, appl: &str) -> Vec<String> {
        let mut gids: Vec<String> =
            self.homes.get(appl).map(|h| h.in_flight.iter().cloned().collect()).unwrap_or_default();
        gids.sort();
        gids
    }

    /// When the next cron occurrence falls, if any.
    pub(crate) fn poll_timeout(&self) -> Option<DateTime<Utc>> {
        self.homes.values().flat_map(|h| h.crons.iter().filter_map(|c| c.next)).min()
    }

    /// Fires every cron trigger whose occurrence is `now` or earlier: past several, the
    /// latest, once.
    pub(crate) fn handle_timeout(&mut self, now: DateTime<Utc>, out: &mut Vec<Step>) {
        let mut due = Vec::new();
        for (appl, home) in &mut self.homes {
            for cron in &mut home.crons {
                let Some(next) = cron.next.filter(|next| *next <= now) else { continue };
                let (latest, skipped) = cron.trigger.missed(cron.after, now).unwrap_or((next, 0));
                if skipped > 0 {
                    tracing::warn!(
                        "{appl}: cron trigger '{}': {skipped} runs passed while asleep are skipped",
                        cron.pattern
                    );
                }
                cron.after = latest;
                cron.next = cron.trigger.next_after(latest);
                due.push((appl.clone(), cron.pattern.clone(), cron.trigger.clone(), latest));
            }
        }
        due.sort_by(|a, b| (a.3, &a.0, &a.1).cmp(&(b.3, &b.0, &b.1)));
        for (appl, pattern, trigger, at) in due {
            self.fire(&appl, &pattern, &trigger, at, out);
        }
    }

    /// Cron trigger `pattern` of `appl` fires for its occurrence `at`.
    fn fire(
        &mut self,
        appl: &str,
        pattern: &str,
        trigger: &CronTrigger,
        at: DateTime<Utc>,
        out: &mut Vec<Step>,
    ) {
        let (gid, date) = trigger.generation(at);
        out.push(Step::CronFired {
            appl: appl.to_owned(),
            pattern: pattern.to_owned(),
            at_ms: at.timestamp_millis(),
        });
        tracing::info!("{appl}/{gid}: cron trigger '{pattern}' fired");
        self.start(appl, gid, date, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).expect("a time").with_timezone(&Utc)
    }

    fn nightly() -> (String, CronTrigger) {
        ("0 18 * * *".to_owned(), CronTrigger::new("0 18 * * *", "UTC").expect("valid"))
    }

    fn started(out: &[Step]) -> Vec<&str> {
        out.iter()
            .filter_map(|s| match s {
                Step::Start { gid, .. } => Some(gid.as_str()),
                Step::CronFired { .. } | Step::Held { .. } | Step::Unheld { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_start_waits_while_max_generations_run_and_takes_the_place_of_one_that_ends() {
        let mut starts = Starts::default();
        starts.home("a", 2, ["g0".to_owned()], []);
        let mut out = Vec::new();
        for gid in ["g1", "g2", "g1", "g3", "g0"] {
            starts.start("a", gid.to_owned(), "2026-11-29".to_owned(), &mut out);
        }
        // g0 was in flight from the journal: g1 starts; g2 and g3 wait; the repeats are
        // dropped.
        assert_eq!(started(&out), ["g1"]);
        out.clear();
        starts.ended("a", "g0", &mut out);
        assert_eq!(started(&out), ["g2"]);
        out.clear();
        // An end of a generation not in flight frees nothing.
        starts.ended("a", "g9", &mut out);
        assert!(out.is_empty());
        starts.ended("a", "g1", &mut out);
        assert_eq!(started(&out), ["g3"]);
        assert_eq!(starts.in_flight("a"), ["g2", "g3"]);
        // An application this agent is not home to starts nothing.
        starts.start("b", "g1".to_owned(), "2026-11-29".to_owned(), &mut out);
        assert_eq!(started(&out), ["g3"]);
    }

    #[test]
    fn a_held_start_is_written_down_and_comes_back_with_a_restart() {
        let mut starts = Starts::default();
        starts.home("a", 1, [], []);
        let mut out = Vec::new();
        for gid in ["g1", "g2", "g2"] {
            starts.start("a", gid.to_owned(), "2026-11-29".to_owned(), &mut out);
        }
        let held = Step::Held { appl: "a".into(), gid: "g2".into(), date: "2026-11-29".into() };
        assert_eq!(out.iter().filter(|s| **s == held).count(), 1, "held once, written down: {out:?}");
        // The agent restarts: g1 in flight (its APPL_START ran), g2 held, as the journal says.
        let mut starts = Starts::default();
        starts.home("a", 1, ["g1".to_owned()], [("g2".to_owned(), "2026-11-29".to_owned())]);
        let mut out = Vec::new();
        starts.ended("a", "g1", &mut out);
        assert_eq!(started(&out), ["g2"]);
    }

    #[test]
    fn a_waiting_start_already_in_flight_by_the_time_room_comes_is_passed_over() {
        let mut starts = Starts::default();
        starts.home("a", 1, [], []);
        let mut out = Vec::new();
        for gid in ["g1", "g2", "g3"] {
            starts.start("a", gid.to_owned(), "2026-11-29".to_owned(), &mut out);
        }
        // A redeploy reads g2 from the journal as started meanwhile.
        starts.home("a", 1, ["g2".to_owned()], []);
        starts.ended("a", "g1", &mut out);
        assert_eq!(started(&out), ["g1"], "g2 is in flight, g3 waits for room");
        assert!(out.contains(&Step::Unheld { appl: "a".into(), gid: "g2".into() }), "g2's row goes: {out:?}");
        starts.ended("a", "g2", &mut out);
        assert_eq!(started(&out), ["g1", "g3"]);
    }

    #[test]
    fn a_cron_trigger_deployed_again_makes_up_its_latest_missed_run_once() {
        let mut starts = Starts::default();
        starts.home("nightly", 5, [], []);
        let (pattern, trigger) = nightly();
        let last = utc("2026-11-24T18:00:00Z").timestamp_millis();
        let now = utc("2026-11-27T19:30:00Z");
        let mut out = Vec::new();
        starts.set_crons("nightly", vec![(pattern.clone(), trigger, Some(last))], now, &mut out);
        assert_eq!(
            out,
            [
                Step::CronFired {
                    appl: "nightly".into(),
                    pattern,
                    at_ms: utc("2026-11-27T18:00:00Z").timestamp_millis()
                },
                Step::Start {
                    appl: "nightly".into(),
                    gid: "cron-2026-11-27T1800+0000".into(),
                    date: "2026-11-27".into()
                },
            ]
        );
        // Next, the occurrence after now.
        assert_eq!(starts.poll_timeout(), Some(utc("2026-11-28T18:00:00Z")));
    }

    #[test]
    fn a_cron_trigger_deployed_for_the_first_time_fires_nothing_from_the_past() {
        let mut starts = Starts::default();
        starts.home("nightly", 1, [], []);
        let (pattern, trigger) = nightly();
        let now = utc("2026-11-27T19:30:00Z");
        let mut out = Vec::new();
        starts.set_crons("nightly", vec![(pattern.clone(), trigger, None)], now, &mut out);
        assert_eq!(out, [Step::CronFired { appl: "nightly".into(), pattern, at_ms: now.timestamp_millis() }]);
        // Nothing is due before its next occurrence.
        out.clear();
        starts.handle_timeout(utc("2026-11-28T17:59:59Z"), &mut out);
        assert!(out.is_empty());
        starts.handle_timeout(utc("2026-11-28T18:00:00Z"), &mut out);
        assert_eq!(started(&out), ["cron-2026-11-28T1800+0000"]);
        assert_eq!(starts.poll_timeout(), Some(utc("2026-11-29T18:00:00Z")));
    }

    #[test]
    fn woken_late_past_several_occurrences_the_latest_fires_once() {
        let mut starts = Starts::default();
        starts.home("nightly", 9, [], []);
        let (pattern, trigger) = nightly();
        let mut out = Vec::new();
        starts.set_crons("nightly", vec![(pattern, trigger, None)], utc("2026-11-27T19:30:00Z"), &mut out);
        out.clear();
        // Asleep from the 27th to the 30th at noon: the 28th and 29th pass unseen.
        starts.handle_timeout(utc("2026-11-30T12:00:00Z"), &mut out);
        assert_eq!(started(&out), ["cron-2026-11-29T1800+0000"]);
        assert_eq!(starts.poll_timeout(), Some(utc("2026-11-30T18:00:00Z")));
    }

    #[test]
    fn stopped_crons_fire_nothing_and_an_abandoned_application_gives_back_what_was_in_flight() {
        let mut starts = Starts::default();
        starts.home("nightly", 1, ["g1".to_owned()], []);
        let (pattern, trigger) = nightly();
        let mut out = Vec::new();
        starts.set_crons("nightly", vec![(pattern, trigger, None)], utc("2026-11-27T19:30:00Z"), &mut out);
        starts.stop_crons("nightly");
        assert_eq!(starts.poll_timeout(), None);
        out.clear();
        starts.handle_timeout(utc("2026-11-30T12:00:00Z"), &mut out);
        assert!(out.is_empty());
        starts.start("nightly", "g2".to_owned(), "2026-11-29".to_owned(), &mut out);
        assert!(matches!(out.as_slice(), [Step::Held { .. }]), "g2 waits: {out:?}");
        out.clear();
        assert_eq!(starts.abandon("nightly"), ["g1"], "g2 only waited");
        starts.ended("nightly", "g1", &mut out);
        assert!(out.is_empty(), "nothing of it starts after it was withdrawn");
    }

    #[test]
    fn a_start_that_could_not_be_made_holds_no_place() {
        let mut starts = Starts::default();
        starts.home("a", 1, ["g1".to_owned()], []);
        let mut out = Vec::new();
        starts.start("a", "g2".to_owned(), "2026-11-29".to_owned(), &mut out);
        starts.ended("a", "g1", &mut out);
        assert_eq!(started(&out), ["g2"]);
        // The agent had no current version to publish it with.
        starts.not_started("a", "g2");
        assert!(starts.in_flight("a").is_empty());
        starts.start("a", "g3".to_owned(), "2026-11-29".to_owned(), &mut out);
        assert_eq!(started(&out), ["g2", "g3"], "the place is free again");
    }
}
