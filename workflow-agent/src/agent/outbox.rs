//! The ordered outbox: what the agent publishes (statuses, replies, triggers, load reports,
//! advice), in the order it happens, each acknowledged by the broker.
//!
//! Statuses and triggers are written to the journal's outbox first ([`AgentCore::publish`]), so
//! that an agent stopped while its broker is away sends them when it starts again; they
//! leave it once the broker has taken them (or refused them).
//!
//! When each publication is written is decided by [`Publisher`], sans-IO and tested in
//! virtual time (milliseconds of a monotonic clock):
//! - publications are written in order, up to [`PIPELINE`] waiting for their answers at
//!   once;
//! - one the broker could not take (it is away; the connection's session was lost) is
//!   written again after [`RESEND_FIRST`], doubling up to [`RESEND_MOST`], with each after
//!   it that could not be taken either, in order; nothing new is written meanwhile, and
//!   one still awaiting its answer is left to it, so as not to send it twice;
//! - one the broker refuses (its advertisement withdrawn meanwhile) is logged and dropped,
//!   and a refused trigger is told to the agent (that generation never started);
//! - a load report or an advice that cannot be sent is dropped: stale once the broker is
//!   back, the next one replaces it.
//!
//! The agent's driver writes what it says through the client and hands it the broker's
//! answers.

use std::collections::VecDeque;
use std::time::Duration;

use padres_client::ClientError;
use padres_lang::{Name, Publication, Value};
use padres_workflow::control::{Reply, trigger_publication};

use super::core::AgentCore;

/// A `job_status` publication to make.
#[derive(Debug)]
pub(super) struct Status {
    pub(super) appl: String,
    pub(super) gid: String,
    pub(super) job: String,
    pub(super) status: &'static str,
    pub(super) exit: i64,
    pub(super) attempt: u32,
    pub(super) reason: Option<String>,
    /// More attributes: a pool job's `pool`, and its dispatch's `to`, `incarnation`,
    /// `date` and `info`.
    pub(super) extra: Vec<(&'static str, Value)>,
}

impl Status {
    pub(super) fn new(key: &(String, String, String), status: &'static str, exit: i64, attempt: u32) -> Self {
        Self {
            appl: key.0.clone(),
            gid: key.1.clone(),
            job: key.2.clone(),
            status,
            exit,
            attempt,
            reason: None,
            extra: Vec::new(),
        }
    }

    pub(super) fn with(mut self, extra: Vec<(&'static str, Value)>) -> Self {
        self.extra.extend(extra);
        self
    }

    pub(super) fn because(mut self, reason: Option<String>) -> Self {
        self.reason = reason;
        self
    }
}

/// What the agent publishes, in order.
#[derive(Debug)]
pub(super) enum Outgoing {
    Status(Status),
    Reply(Reply),
    /// A generation's trigger: appl, version, gid, date.
    Trigger(String, String, String, String),
    /// The agent's load report (not kept: the next one replaces it).
    Load(crate::pool::Load),
    /// Advice to a pool (not kept).
    Advice(String, crate::pool::Advice),
}

/// A publication on its way out: kept in the journal's outbox (`seq`) until the broker
/// has taken it, for statuses and triggers.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) seq: Option<i64>,
    pub(super) publication: Publication,
    pub(super) what: String,
    /// A trigger's (appl, gid), told to the agent if the broker refuses it.
    pub(super) if_refused: Option<(String, String)>,
    /// Dropped, not sent again, when it cannot be sent now (a load report or an advice:
    /// stale once the broker is back, and the next one replaces it).
    pub(super) now_or_never: bool,
}

impl AgentCore {
    /// Publishes `outgoing`, after what was published before: a status or a trigger is
    /// kept in the journal's outbox first.
    pub(super) fn publish(&mut self, outgoing: Outgoing) {
        let agent = &self.options.name;
        let (publication, what, durable) = match &outgoing {
            Outgoing::Status(s) => (
                status_publication(agent, s),
                format!("the status {} of {}/{}/{}", s.status, s.appl, s.gid, s.job),
                true,
            ),
            Outgoing::Reply(r) => (r.publication(), format!("the reply to {} {}", r.cmd, r.appl), false),
            Outgoing::Load(load) => (load.publication(), "the load report".to_owned(), false),
            Outgoing::Advice(pool, advice) => {
                (advice.publication(pool, agent), format!("the {} advice to {pool}", advice.word()), false)
            }
            Outgoing::Trigger(appl, version, gid, date) => {
                (trigger_publication(appl, version, gid, date), format!("the trigger of {appl}/{gid}"), true)
            }
        };
        let publication = match publication {
            Ok(publication) => publication,
            Err(e) => {
                tracing::error!("{what}: not a valid publication: {e}");
                // A trigger that cannot be made starts no generation.
                if let Outgoing::Trigger(appl, _, gid, _) = outgoing {
                    self.trigger_refused(&appl, &gid);
                }
                return;
            }
        };
        let seq = if durable {
            match self.journal().outbox_push(&publication.to_string()) {
                Ok(seq) => Some(seq),
                Err(e) => {
                    tracing::warn!("{what}: not kept in the outbox ({e}); sent all the same");
                    None
                }
            }
        } else {
            None
        };
        let now_or_never = matches!(outgoing, Outgoing::Load(_) | Outgoing::Advice(..));
        let if_refused = match outgoing {
            Outgoing::Trigger(appl, _, gid, _) => Some((appl, gid)),
            Outgoing::Status(_) | Outgoing::Reply(_) | Outgoing::Load(_) | Outgoing::Advice(..) => None,
        };
        let at = self.clock();
        self.publisher.push(Queued { seq, publication, what, if_refused, now_or_never }, at);
        self.pump_publisher();
    }

    /// Publishes `publication`, kept in the journal's outbox as `seq` when the agent last
    /// stopped.
    pub(super) fn publish_kept(&mut self, seq: i64, publication: Publication) {
        let what = format!("a publication kept from before the restart ({publication})");
        let at = self.clock();
        let queued = Queued { seq: Some(seq), publication, what, if_refused: None, now_or_never: false };
        self.publisher.push(queued, at);
        self.pump_publisher();
    }

    /// Publishes `status`.
    pub(super) fn send(&mut self, status: Status) {
        self.publish(Outgoing::Status(status));
    }
}

/// The `job_status` publication of `status`, by agent `agent`.
pub(super) fn status_publication(
    agent: &str,
    status: &Status,
) -> Result<Publication, padres_lang::InvalidMessage> {
    let name = |n: &str| Name::interned(n);
    let mut attrs = vec![
        (name("class")?, Value::str("job_status")),
        (name("appl")?, Value::str(&status.appl)),
        (name("gid")?, Value::str(&status.gid)),
        (name("job")?, Value::str(&status.job)),
        (name("agent")?, Value::str(agent)),
        (name("status")?, Value::str(status.status)),
        (name("exit")?, Value::Int(status.exit)),
        (name("attempt")?, Value::Int(i64::from(status.attempt))),
    ];
    if let Some(reason) = &status.reason {
        attrs.push((name("reason")?, Value::str(reason)));
    }
    for (attr, value) in &status.extra {
        attrs.push((name(attr)?, value.clone()));
    }
    Publication::new(attrs)
}

/// Publications written and not yet answered at most, per agent.
pub(super) const PIPELINE: usize = 64;

/// The publisher's first wait before writing again what the broker could not take, and
/// its longest.
pub(super) const RESEND_FIRST: Duration = Duration::from_millis(100);
pub(super) const RESEND_MOST: Duration = Duration::from_secs(2);

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Why a publication was not taken.
#[derive(Debug)]
pub enum Failure {
    /// The broker refused it: it will not take it however often it is sent.
    Refused(String),
    /// It did not reach the broker, or its answer was lost with the connection.
    NotSent(String),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Refused { .. } => Self::Refused(e.to_string()),
            other => Self::NotSent(other.to_string()),
        }
    }
}

/// What the publisher asks of its driver.
#[derive(Debug)]
pub(super) enum Action {
    /// Write `publication`, after those asked before; its answer comes back through
    /// [`Publisher::answered`] with `token`. `round` counts the times publications were
    /// written again: after a write of round `r` fails, the driver answers the writes of
    /// round `r` after it [`Failure::NotSent`] without writing them, so that none goes
    /// ahead of it (the client may have reconnected meanwhile).
    Write { token: u64, publication: Publication, round: u64 },
    /// Taken by the broker, or refused: it leaves the journal's outbox.
    Done { seq: i64, what: String },
    /// Told to the agent: the broker refused the trigger of (appl, gid).
    Tell((String, String)),
}

/// A publication written, and its answer once it has come.
#[derive(Debug)]
struct Flight {
    token: u64,
    queued: Queued,
    answer: Option<Result<(), Failure>>,
}

impl Flight {
    fn not_sent(&self) -> bool {
        matches!(self.answer, Some(Err(Failure::NotSent(_))))
    }
}

/// When each publication is written (the module docs give the rules). Sans-IO: the driver
/// pushes what the agent queues, hands in the broker's answers and the time, and carries
/// out the [`Action`]s in the order they come.
#[derive(Debug)]
pub(super) struct Publisher {
    waiting: VecDeque<Queued>,
    in_flight: VecDeque<Flight>,
    next_token: u64,
    /// When the first in flight, which could not be sent, is written again.
    resend_at: Option<u64>,
    /// The wait before writing it again after that.
    wait: u64,
    /// It has been written again and is not yet settled: nothing new is written
    /// meanwhile, so that what else was not sent goes again before anything new.
    resending: bool,
    /// How many times publications were written again ([`Action::Write`]'s `round`).
    round: u64,
    actions: VecDeque<Action>,
}

impl Default for Publisher {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            in_flight: VecDeque::new(),
            next_token: 0,
            resend_at: None,
            wait: ms(RESEND_FIRST),
            resending: false,
            round: 0,
            actions: VecDeque::new(),
        }
    }
}

impl Publisher {
    /// `queued` is to be published after everything pushed before it.
    pub(super) fn push(&mut self, queued: Queued, now: u64) {
        self.waiting.push_back(queued);
        self.step(now);
    }

    /// The broker's answer to the write of `token` (a write that failed is answered
    /// [`Failure::NotSent`]). An answer to a write since made again is let go.
    pub(super) fn answered(&mut self, token: u64, answer: Result<(), Failure>, now: u64) {
        if let Some(flight) = self.in_flight.iter_mut().find(|f| f.token == token && f.answer.is_none()) {
            flight.answer = Some(answer);
        }
        self.step(now);
    }

    /// When [`Publisher::handle_timeout`] is due.
    pub(super) fn poll_timeout(&self) -> Option<u64> {
        self.resend_at
    }

    /// Writes again, in order, what could not be sent, once its wait is over.
    pub(super) fn handle_timeout(&mut self, now: u64) {
        if self.resend_at.is_none_or(|at| at > now) {
            return;
        }
        self.resend_at = None;
        self.round += 1;
        for flight in &mut self.in_flight {
            // (One sent now or never is dropped when its turn comes.)
            if flight.not_sent() && !flight.queued.now_or_never {
                flight.token = self.next_token;
                self.next_token += 1;
                flight.answer = None;
                let publication = flight.queued.publication.clone();
                self.actions.push_back(Action::Write { token: flight.token, publication, round: self.round });
            }
        }
        self.wait = (self.wait * 2).min(ms(RESEND_MOST));
        self.resending = true;
        self.step(now);
    }

    /// The next thing to do.
    pub(super) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Nothing waits to be written or answered.
    pub(super) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.in_flight.is_empty()
    }

    fn step(&mut self, now: u64) {
        // What the first in flight's answer settles, in order.
        while let Some(head) = self.in_flight.front() {
            match &head.answer {
                None => break,
                Some(Err(Failure::NotSent(e))) if !head.queued.now_or_never => {
                    if self.resend_at.is_none() {
                        tracing::warn!(
                            "{}: not sent ({e}); sending again in {} ms",
                            head.queued.what,
                            self.wait
                        );
                        self.resend_at = Some(now.saturating_add(self.wait));
                    }
                    break;
                }
                Some(_) => {}
            }
            let Some(Flight { mut queued, answer, .. }) = self.in_flight.pop_front() else { break };
            match answer {
                Some(Err(Failure::Refused(e))) => {
                    tracing::error!("{}: refused by the broker: {e}", queued.what);
                    // A generation whose trigger was refused does not hold a place.
                    if let Some(told) = queued.if_refused.take() {
                        self.actions.push_back(Action::Tell(told));
                    }
                }
                Some(Err(Failure::NotSent(e))) => tracing::debug!("{}: not sent ({e}); dropped", queued.what),
                Some(Ok(())) | None => {}
            }
            if let Some(seq) = queued.seq {
                self.actions.push_back(Action::Done { seq, what: queued.what });
            }
            self.wait = ms(RESEND_FIRST);
            self.resending = false;
        }
        // Then what waits, up to the pipeline's depth; after one that could not be sent,
        // none goes ahead of it until it is taken.
        if self.resending {
            return;
        }
        while self.in_flight.len() < PIPELINE && !self.in_flight.iter().any(Flight::not_sent) {
            let Some(queued) = self.waiting.pop_front() else { break };
            let token = self.next_token;
            self.next_token += 1;
            let publication = queued.publication.clone();
            self.actions.push_back(Action::Write { token, publication, round: self.round });
            self.in_flight.push_back(Flight { token, queued, answer: None });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(n: i64) -> Queued {
        let publication = Publication::new(vec![
            (Name::interned("class").unwrap(), Value::str("job_status")),
            (Name::interned("n").unwrap(), Value::Int(n)),
        ])
        .unwrap();
        Queued { seq: Some(n), publication, what: format!("#{n}"), if_refused: None, now_or_never: false }
    }

    /// The actions so far: the numbers of the publications written (with their tokens),
    /// and of those done.
    #[derive(Debug, Default, PartialEq)]
    struct Seen {
        written: Vec<(i64, u64)>,
        done: Vec<i64>,
        told: Vec<String>,
    }

    fn drain(p: &mut Publisher) -> Seen {
        let mut seen = Seen::default();
        while let Some(action) = p.poll_action() {
            match action {
                Action::Write { token, publication, .. } => {
                    let Some(Value::Int(n)) = publication.get("n") else { panic!("no n") };
                    seen.written.push((*n, token));
                }
                Action::Done { seq, .. } => seen.done.push(seq),
                Action::Tell((_, gid)) => seen.told.push(gid),
            }
        }
        seen
    }

    fn numbers(seen: &Seen) -> Vec<i64> {
        seen.written.iter().map(|(n, _)| *n).collect()
    }

    fn lost() -> Result<(), Failure> {
        Err(Failure::NotSent("connection lost".into()))
    }

    #[test]
    fn publications_are_written_in_order_up_to_the_pipeline_and_leave_the_outbox_as_answered() {
        let mut p = Publisher::default();
        for n in 0..70 {
            p.push(queued(n), 0);
        }
        let seen = drain(&mut p);
        assert_eq!(numbers(&seen), (0..64).collect::<Vec<_>>(), "64 written ahead of their answers");
        assert!(seen.done.is_empty());
        // An answer out of order settles nothing until the first is answered.
        p.answered(seen.written[1].1, Ok(()), 1);
        assert_eq!(drain(&mut p), Seen::default());
        p.answered(seen.written[0].1, Ok(()), 2);
        let next = drain(&mut p);
        assert_eq!(next.done, vec![0, 1], "both leave the outbox, in order");
        assert_eq!(numbers(&next), vec![64, 65], "room for two more");
        assert!(!p.is_idle());
    }

    #[test]
    fn one_not_sent_is_written_again_with_those_after_it_and_nothing_new_meanwhile() {
        let mut p = Publisher::default();
        for n in 0..4 {
            p.push(queued(n), 0);
        }
        let first = drain(&mut p);
        // The session was lost: 0 and 2 fail; 1 is still awaiting its answer; 3 was taken.
        p.answered(first.written[0].1, lost(), 10);
        p.answered(first.written[2].1, lost(), 10);
        p.answered(first.written[3].1, Ok(()), 10);
        p.push(queued(4), 20);
        assert_eq!(drain(&mut p), Seen::default(), "nothing goes ahead of one not sent");
        assert_eq!(p.poll_timeout(), Some(10 + ms(RESEND_FIRST)));
        p.handle_timeout(50);
        assert_eq!(drain(&mut p), Seen::default(), "not before its wait is over");
        p.handle_timeout(110);
        let again = drain(&mut p);
        assert_eq!(numbers(&again), vec![0, 2], "the two not sent, in order; 1 is left to its answer");
        // The late answer of 0's first write is let go.
        p.answered(first.written[0].1, Ok(()), 120);
        assert_eq!(drain(&mut p), Seen::default());
        p.answered(again.written[0].1, Ok(()), 130);
        let taken = drain(&mut p);
        assert_eq!(taken.done, vec![0]);
        assert_eq!(numbers(&taken), vec![4], "what waited goes once the first is taken");
        p.answered(first.written[1].1, Ok(()), 140);
        p.answered(again.written[1].1, Ok(()), 150);
        assert_eq!(drain(&mut p).done, vec![1, 2, 3]);
    }

    #[test]
    fn the_wait_doubles_to_its_longest_and_starts_again_for_the_next() {
        let mut p = Publisher::default();
        p.push(queued(0), 0);
        let mut token = drain(&mut p).written[0].1;
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            p.answered(token, lost(), now);
            let at = p.poll_timeout().expect("a resend");
            waits.push(at - now);
            now = at;
            p.handle_timeout(now);
            token = drain(&mut p).written[0].1;
        }
        assert_eq!(waits, vec![100, 200, 400, 800, 1600, 2000, 2000]);
        p.answered(token, Ok(()), now);
        p.push(queued(1), now);
        let next = drain(&mut p);
        assert_eq!(numbers(&next), vec![1]);
        p.answered(next.written[0].1, lost(), now);
        assert_eq!(p.poll_timeout(), Some(now + 100), "the next one's wait starts from the first");
    }

    #[test]
    fn a_refused_publication_is_dropped_and_a_refused_trigger_is_told() {
        let mut p = Publisher::default();
        let mut trigger = queued(0);
        trigger.if_refused = Some(("payroll".into(), "g1".into()));
        p.push(trigger, 0);
        p.push(queued(1), 0);
        let seen = drain(&mut p);
        p.answered(seen.written[0].1, Err(Failure::Refused("no advertisement".into())), 1);
        p.answered(seen.written[1].1, Ok(()), 1);
        let after = drain(&mut p);
        assert_eq!(after.told, vec!["g1"]);
        assert_eq!(after.done, vec![0, 1], "the refused one leaves the outbox too");
        assert_eq!(p.poll_timeout(), None, "and is not sent again");
        assert!(p.is_idle());
    }

    #[test]
    fn a_load_report_not_sent_is_dropped_in_its_turn() {
        let mut p = Publisher::default();
        let mut load = queued(0);
        load.seq = None;
        load.now_or_never = true;
        p.push(queued(1), 0);
        p.push(load, 0);
        p.push(queued(2), 0);
        let seen = drain(&mut p);
        p.answered(seen.written[0].1, lost(), 5);
        p.answered(seen.written[1].1, lost(), 5);
        p.answered(seen.written[2].1, lost(), 5);
        p.handle_timeout(105);
        let again = drain(&mut p);
        assert_eq!(numbers(&again), vec![1, 2], "the load report is not written again");
        p.answered(again.written[0].1, Ok(()), 110);
        p.answered(again.written[1].1, Ok(()), 110);
        assert_eq!(drain(&mut p).done, vec![1, 2]);
        assert!(p.is_idle());
    }
}
