//! Each rule of the journal, on the SQLite file and in memory.

use rusqlite::Connection;

use super::*;

fn dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("padres-agent-journal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    dir
}

fn a_job_is_claimed_once_per_generation_across_reopenings<J: Subject>() {
    let mut journal = J::fresh("once");
    assert_eq!(journal.claim("payroll", "g1", "A").expect("claim"), Claim::New);
    // Notified again (a repeated match) while it runs: not run twice.
    assert_eq!(journal.claim("payroll", "g1", "A").expect("claim"), Claim::Unfinished { attempt: 0 });
    // Another generation, another job: their own.
    assert_eq!(journal.claim("payroll", "g2", "A").expect("claim"), Claim::New);
    assert_eq!(journal.claim("payroll", "g1", "B").expect("claim"), Claim::New);
    journal.attempt("payroll", "g1", "A", 1).expect("attempt");
    journal.attempt("payroll", "g1", "A", 2).expect("attempt");
    journal.end("payroll", "g1", "A", "succeeded", 0, 2).expect("end");
    journal.attempt("payroll", "g1", "B", 1).expect("attempt");
    // The agent restarts: A ended, B was running, g2's A never started an attempt.
    let mut journal = journal.reopened();
    let ended = Claim::Ended { status: "succeeded".to_owned(), exit: 0, attempt: 2 };
    assert_eq!(journal.claim("payroll", "g1", "A").expect("claim"), ended);
    let interrupted: Vec<(String, u32)> = journal
        .interrupted()
        .expect("list")
        .into_iter()
        .map(|e| (format!("{}/{}", e.gid, e.job), e.attempt))
        .collect();
    assert_eq!(interrupted, [("g1/B".to_owned(), 1), ("g2/A".to_owned(), 0)]);
    // Reported failed: ended, and no longer interrupted.
    journal.end("payroll", "g1", "B", "failed", -1, 1).expect("end");
    let ended = Claim::Ended { status: "failed".to_owned(), exit: -1, attempt: 1 };
    assert_eq!(journal.claim("payroll", "g1", "B").expect("claim"), ended);
    assert_eq!(journal.forget("payroll", "g1").expect("forget"), 2);
    assert_eq!(
        journal.claim("payroll", "g1", "A").expect("claim"),
        Claim::New,
        "a forgotten generation starts again"
    );
}

fn only_a_failed_job_is_reclaimed_and_deployments_survive_reopening<J: Subject>() {
    let mut journal = J::fresh("reclaim");
    journal.generation("payroll", "g1", "2026-11-27").expect("generation");
    assert_eq!(journal.claim("payroll", "g1", "A").expect("claim"), Claim::New);
    journal.end("payroll", "g1", "A", "failed", 3, 2).expect("end");
    journal.end("payroll", "g1", "B", "succeeded", 0, 1).expect("end");
    assert_eq!(journal.reclaim("payroll", "g1", "A").expect("reclaim"), Ok(2));
    // Now running again: not claimed twice.
    assert_eq!(
        journal.reclaim("payroll", "g1", "A").expect("reclaim"),
        Err(Claim::Unfinished { attempt: 2 })
    );
    let succeeded = Claim::Ended { status: "succeeded".into(), exit: 0, attempt: 1 };
    assert_eq!(journal.reclaim("payroll", "g1", "B").expect("reclaim"), Err(succeeded));
    assert_eq!(journal.reclaim("payroll", "g1", "Z").expect("reclaim"), Err(Claim::New));
    journal.keep_deployment("payroll", "{\"v\":1}", 5).expect("keep");
    journal.keep_deployment("payroll", "{\"v\":2}", 7).expect("keep");
    journal.keep_deployment("other", "{}", 9).expect("keep");
    journal.drop_deployment("other").expect("drop");
    let mut journal = journal.reopened();
    assert_eq!(journal.deployments().expect("list"), [("payroll".to_owned(), "{\"v\":2}".to_owned(), 7)]);
    assert_eq!(journal.generation_date("payroll", "g1").expect("date").as_deref(), Some("2026-11-27"));
    journal.forget("payroll", "g1").expect("forget");
    assert_eq!(journal.generation_date("payroll", "g1").expect("date"), None);
}

fn an_ended_generation_runs_nothing_more_and_its_end_is_kept_for_a_while<J: Subject>() {
    let mut journal = J::fresh("ended");
    assert_eq!(journal.claim("payroll", "g1", "A").expect("claim"), Claim::New);
    journal.end("payroll", "g1", "A", "succeeded", 0, 1).expect("end");
    journal.generation("payroll", "g1", "2026-11-27").expect("generation");
    let now = crate::trigger::now().timestamp_millis();
    assert!(journal.end_generation("payroll", "g1", now).expect("ended"));
    assert!(!journal.end_generation("payroll", "g1", now).expect("ended"), "marked once");
    // Its rows are gone; a late notification of any of its jobs runs nothing.
    assert_eq!(journal.generation_date("payroll", "g1").expect("date"), None);
    assert_eq!(journal.claim("payroll", "g1", "A").expect("claim"), Claim::GenerationEnded);
    assert_eq!(journal.claim("payroll", "g1", "B").expect("claim"), Claim::GenerationEnded);
    assert_eq!(journal.look("payroll", "g1", "B").expect("look"), Claim::GenerationEnded);
    assert_eq!(journal.reclaim("payroll", "g1", "A").expect("reclaim"), Err(Claim::GenerationEnded));
    assert!(journal.interrupted().expect("list").is_empty());
    // A job that outlived its generation's end leaves no row.
    journal.end("payroll", "g1", "C", "succeeded", 0, 1).expect("end");
    assert_eq!(journal.forget("payroll", "g1").expect("forget"), 0);
    // Another application's generation of the same id is its own.
    assert_eq!(journal.claim("other", "g1", "A").expect("claim"), Claim::New);
    // An end older than the time marks are kept for is dropped when the journal opens.
    journal.end_generation("payroll", "g0", now - ENDED_KEPT_MS - 1).expect("ended");
    let journal = journal.reopened();
    assert!(journal.generation_ended("payroll", "g1").expect("read"));
    assert!(!journal.generation_ended("payroll", "g0").expect("read"));
}

#[test]
fn a_journal_made_before_deployments_had_a_time_is_read() {
    let work = dir("old");
    let db = Connection::open(work.join(FILE)).expect("create");
    db.execute_batch(
        "CREATE TABLE deployments (appl TEXT PRIMARY KEY, body TEXT NOT NULL);
         INSERT INTO deployments VALUES ('payroll', '{}');",
    )
    .expect("an old journal");
    drop(db);
    let journal = Journal::open(&work).expect("open");
    assert_eq!(journal.deployments().expect("list"), [("payroll".to_owned(), "{}".to_owned(), 0)]);
}

fn jobs_claimed_together_are_claimed_once_each<J: Subject>() {
    let mut journal = J::fresh("many");
    journal.end("payroll", "g1", "A", "succeeded", 0, 1).expect("end");
    journal.end_generation("payroll", "g0", 1).expect("ended");
    let key = |gid: &str, job: &str| ("payroll".to_owned(), gid.to_owned(), job.to_owned());
    let claims = journal
        .claim_many(&[key("g1", "A"), key("g1", "B"), key("g1", "B"), key("g0", "C")])
        .expect("claimed");
    assert_eq!(
        claims,
        [
            Claim::Ended { status: "succeeded".into(), exit: 0, attempt: 1 },
            Claim::New,
            Claim::Unfinished { attempt: 0 },
            Claim::GenerationEnded,
        ]
    );
    let mut journal = journal.reopened();
    assert_eq!(journal.claim("payroll", "g1", "B").expect("claim"), Claim::Unfinished { attempt: 0 });
}

fn a_skipped_job_is_ended_without_a_claim<J: Subject>() {
    let mut journal = J::fresh("skipped");
    journal.end("payroll", "g1", "C", "skipped", 0, 0).expect("end");
    let ended = Claim::Ended { status: "skipped".to_owned(), exit: 0, attempt: 0 };
    assert_eq!(journal.claim("payroll", "g1", "C").expect("claim"), ended);
    assert!(journal.interrupted().expect("list").is_empty());
}

#[test]
fn a_file_that_is_not_a_journal_is_an_error() {
    let work = dir("bad");
    std::fs::write(work.join(FILE), b"not a database, just text that is long enough to be read")
        .expect("write");
    assert!(Journal::open(&work).is_err());
}

fn a_dispatch_is_taken_once_and_a_rerun_after_a_failure_again<J: Subject>() {
    let mut journal = J::fresh("assigned");
    assert_eq!(journal.take_assignment("p", "g1", "A", 1).expect("take"), Claim::New);
    // The same dispatch delivered again (live and from history) while it runs.
    assert_eq!(journal.take_assignment("p", "g1", "A", 1).expect("take"), Claim::Unfinished { attempt: 0 });
    journal.attempt("p", "g1", "A", 1).expect("attempt");
    journal.end("p", "g1", "A", "failed", 3, 1).expect("end");
    // The home agent dispatched it again before the failure reached it: said again.
    let failed = Claim::Ended { status: "failed".to_owned(), exit: 3, attempt: 1 };
    assert_eq!(journal.take_assignment("p", "g1", "A", 1).expect("take"), failed);
    // An operator's rerun, from attempt 2: taken.
    assert_eq!(journal.take_assignment("p", "g1", "A", 2).expect("take"), Claim::New);
    journal.end("p", "g1", "A", "succeeded", 0, 2).expect("end");
    // A succeeded job is never run again, whatever the attempt.
    let succeeded = Claim::Ended { status: "succeeded".to_owned(), exit: 0, attempt: 2 };
    assert_eq!(journal.take_assignment("p", "g1", "A", 3).expect("take"), succeeded);
    assert!(journal.is_assigned("p", "g1", "A").expect("read"));
    // Abandoned when this agent stopped while it ran: taken again at any attempt.
    assert_eq!(journal.take_assignment("p", "g1", "C", 1).expect("take"), Claim::New);
    journal.attempt("p", "g1", "C", 2).expect("attempt");
    journal.end("p", "g1", "C", "abandoned", -1, 2).expect("end");
    assert_eq!(journal.take_assignment("p", "g1", "C", 2).expect("take"), Claim::New);
    assert!(!journal.is_assigned("p", "g1", "B").expect("read"));
    // Its generation ended: nothing of it runs.
    journal.end_generation("p", "g1", 1).expect("ended");
    assert_eq!(journal.take_assignment("p", "g1", "B", 1).expect("take"), Claim::GenerationEnded);
}

fn a_pool_job_dispatched_from_here_is_not_interrupted_and_its_dispatch_survives_a_restart<J: Subject>() {
    let mut journal = J::fresh("dispatches");
    assert_eq!(journal.claim("p", "g1", "A").expect("claim"), Claim::New);
    let d = Dispatched {
        appl: "p".into(),
        gid: "g1".into(),
        job: "A".into(),
        agent: "w1".into(),
        incarnation: 7,
        attempt: 1,
        n: 1,
        date: "2026-11-18".into(),
    };
    journal.keep_dispatch(&d).expect("kept");
    let mut journal = journal.reopened();
    assert!(journal.interrupted().expect("list").is_empty(), "it runs elsewhere");
    assert_eq!(journal.dispatches().expect("list"), std::slice::from_ref(&d));
    // Dispatched again, to another member.
    let again = Dispatched { agent: "w2".into(), n: 2, attempt: 2, ..d };
    journal.keep_dispatch(&again).expect("kept");
    assert_eq!(journal.dispatches().expect("list"), [again]);
    journal.drop_dispatch("p", "g1", "A").expect("dropped");
    assert!(journal.dispatches().expect("list").is_empty());
    journal.end_generation("p", "g1", 1).expect("ended");
    assert!(journal.dispatches().expect("list").is_empty());
}

fn the_outbox_cron_firings_and_generations_started_survive_a_restart<J: Subject>() {
    let mut journal = J::fresh("outbox");
    let first = journal.outbox_push("[class,'a']").expect("kept");
    let second = journal.outbox_push("[class,'b']").expect("kept");
    journal.outbox_done(first).expect("done");
    journal.cron_fired("nightly", "0 18 * * *", 5).expect("fired");
    journal.cron_fired("nightly", "0 18 * * *", 7).expect("fired");
    for gid in ["g2", "g1"] {
        assert_eq!(journal.claim("nightly", gid, "APPL_START").expect("claim"), Claim::New);
    }
    journal.claim("nightly", "g3", "J").expect("claim");
    let mut journal = journal.reopened();
    assert_eq!(journal.outbox_pending().expect("pending"), [(second, "[class,'b']".to_owned())]);
    // A number is never used twice, even after the last one left.
    journal.outbox_done(second).expect("done");
    let third = journal.outbox_push("[class,'c']").expect("kept");
    assert!(third > second, "{third} after {second}");
    assert_eq!(journal.cron_last("nightly", "0 18 * * *").expect("read"), Some(7));
    assert_eq!(journal.cron_last("nightly", "* * * * *").expect("read"), None);
    assert_eq!(journal.generations_started("nightly").expect("read"), ["g1", "g2"]);
}

fn starts_held_back_survive_a_restart_in_order_until_released<J: Subject>() {
    let mut journal = J::fresh("held");
    for gid in ["g3", "g1", "g3", "g2"] {
        journal.hold("nightly", gid, "2026-11-29").expect("held");
    }
    journal.hold("other", "g1", "2026-11-30").expect("held");
    journal.release("nightly", "g1").expect("released");
    let journal = journal.reopened();
    let held =
        |gids: &[&str]| gids.iter().map(|g| ((*g).to_owned(), "2026-11-29".to_owned())).collect::<Vec<_>>();
    assert_eq!(journal.held("nightly").expect("read"), held(&["g3", "g2"]), "in the order they came, once");
    assert_eq!(journal.held("other").expect("read"), [("g1".to_owned(), "2026-11-30".to_owned())]);
}

/// A journal the tests run on, and the agent restarting with it.
trait Subject: Store + Sized {
    fn fresh(name: &str) -> Self;
    fn reopened(self) -> Self;
}

impl Subject for Journal {
    fn fresh(name: &str) -> Self {
        Self::open(&dir(name)).expect("open")
    }

    fn reopened(self) -> Self {
        let file = std::path::PathBuf::from(self.db.path().expect("a file"));
        drop(self);
        Self::open(file.parent().expect("its directory")).expect("reopen")
    }
}

impl Subject for MemoryJournal {
    fn fresh(_: &str) -> Self {
        Self::default()
    }

    fn reopened(mut self) -> Self {
        self.restart();
        self
    }
}

/// Each test above, on the SQLite file and in memory.
macro_rules! on_both {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $test() { super::$test::<super::Journal>() })*
        }
        mod memory {
            $(#[test] fn $test() { super::$test::<super::MemoryJournal>() })*
        }
    };
}

on_both!(
    a_job_is_claimed_once_per_generation_across_reopenings,
    only_a_failed_job_is_reclaimed_and_deployments_survive_reopening,
    an_ended_generation_runs_nothing_more_and_its_end_is_kept_for_a_while,
    jobs_claimed_together_are_claimed_once_each,
    a_skipped_job_is_ended_without_a_claim,
    a_dispatch_is_taken_once_and_a_rerun_after_a_failure_again,
    a_pool_job_dispatched_from_here_is_not_interrupted_and_its_dispatch_survives_a_restart,
    the_outbox_cron_firings_and_generations_started_survive_a_restart,
    starts_held_back_survive_a_restart_in_order_until_released,
);
