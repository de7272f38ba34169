//! Workflows end to end with real processes only: five `padres-broker` processes in a
//! chain keeping the workflow classes' history, three `padres-agent` processes on
//! different brokers, and the `padres workflow` commands (deploy, trigger, wait, status,
//! history, rerun, bypass).
//!
//! - payroll, a Friday and a Wednesday generation at once: on Friday A, then B (which
//!   fails once and succeeds on its retry) and C, then D; on Wednesday C is skipped and D
//!   still runs after A via B; each ends with APPL_END; `status` and `history` agree with
//!   what ran;
//! - a job over its timeout is killed with its grandchildren;
//! - a failed job leaves its successors waiting (`wait` exits 1); `rerun` and `bypass`
//!   release them;
//! - an agent SIGKILLed mid-job and restarted: the job is reported failed (not run again),
//!   and after a bypass the generation finishes; no job ran twice on its own.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[path = "common/workflow.rs"]
mod workflow;
use workflow::*;

#[test]
fn workflows_run_end_to_end_on_five_brokers_and_three_agents() {
    let (brokers, dir, log, mut agents) = payroll_federation("workflow");
    let operator = &brokers[4];

    // Payroll. B fails its first attempt in each generation and succeeds on its retry.
    let flaky = "if [ -e \"b-$1\" ]; then exit 0; fi; touch \"b-$1\"; exit 3";
    let payroll = application(
        "payroll",
        &[
            job("A", "daily", "agent-1", &[], "true", "", &log),
            job("B", "daily", "agent-2", &["A"], flaky, "retries=\"1\" backoff=\"PT1S\"", &log),
            job("C", "friday", "agent-3", &["A"], "true", "", &log),
            job("D", "workdays", "agent-1", &["B", "C"], "true", "", &log),
            // A failure handler: not needed once B has succeeded, so skipped.
            on_failure(job("H", "daily", "agent-3", &["B"], "true", "", &log)),
        ],
    );
    deploy(operator, &dir, "payroll", &payroll);
    // 2026-11-27 is a Friday, 2026-11-25 a Wednesday.
    trigger(operator, "payroll", "fri", "2026-11-27");
    trigger(operator, "payroll", "wed", "2026-11-25");
    for gid in ["fri", "wed"] {
        let out = wait(operator, "payroll", gid);
        assert_eq!(out.status.code(), Some(0), "payroll {gid}: {}", explain(&out));
    }
    let fri = ran(&log, "fri");
    let wed = ran(&log, "wed");
    let at = |order: &[String], job: &str| order.iter().position(|j| j == job).unwrap_or(usize::MAX);
    assert_eq!(fri.len(), 5, "A, B twice (its retry), C, D: {fri:?}");
    assert!(at(&fri, "A") < at(&fri, "B") && at(&fri, "A") < at(&fri, "C"), "{fri:?}");
    assert!(
        fri.iter().rposition(|j| j == "B") < Some(at(&fri, "D")) && at(&fri, "C") < at(&fri, "D"),
        "{fri:?}"
    );
    assert_eq!(wed.iter().filter(|j| *j == "C").count(), 0, "C does not run on Wednesdays: {wed:?}");
    assert!(
        at(&wed, "A") < at(&wed, "B") && wed.iter().rposition(|j| j == "B") < Some(at(&wed, "D")),
        "{wed:?}"
    );
    // status agrees with what ran.
    let fri_states = states(operator, "payroll", "fri");
    let wed_states = states(operator, "payroll", "wed");
    for job in ["A", "B", "C", "D", "APPL_END"] {
        assert_eq!(state_of(&fri_states, job), "succeeded", "fri {job}: {fri_states:?}");
    }
    assert_eq!(state_of(&fri_states, "H"), "skipped", "{fri_states:?}");
    assert_eq!(ran(&log, "fri").iter().filter(|j| *j == "H").count(), 0);
    assert_eq!(state_of(&wed_states, "C"), "skipped", "{wed_states:?}");
    assert_eq!(state_of(&wed_states, "D"), "succeeded", "{wed_states:?}");
    let out = padres(operator, &["workflow", "status", "payroll", "--gid", "fri"]);
    assert!(
        stdout(&out).contains("B                succeeded  agent-2      attempt 2, exit 0"),
        "{}",
        explain(&out)
    );
    let out = padres(operator, &["workflow", "history", "payroll", "--json"]);
    let history: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let outcome = |gid: &str| {
        history["generations"]
            .as_array()
            .and_then(|g| g.iter().find(|g| g["gid"] == gid))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(outcome("fri")["outcome"], "succeeded", "{history}");
    assert_eq!(
        (outcome("fri")["succeeded"].as_u64(), outcome("fri")["skipped"].as_u64()),
        (Some(4), Some(1))
    );
    assert_eq!(
        (outcome("wed")["succeeded"].as_u64(), outcome("wed")["skipped"].as_u64()),
        (Some(3), Some(2))
    );

    // A new version deployed while a generation runs: that generation finishes on the
    // version it started with, and the next one runs on the new version.
    let started = dir.join("p-started");
    let v1 = application(
        "versions",
        &[
            job("P", "daily", "agent-2", &[], &format!("touch {}; sleep 3", started.display()), "", &log),
            job("Q", "daily", "agent-1", &["P"], "true", "", &log),
        ],
    );
    deploy(operator, &dir, "versions", &v1);
    trigger(operator, "versions", "v1", "2026-11-27");
    wait_for_file(&started);
    let v2 = application(
        "versions",
        &[
            job("P", "daily", "agent-2", &[], "true", "", &log),
            job("Q2", "daily", "agent-1", &["P"], "true", "", &log),
            job("R", "daily", "agent-3", &["Q2"], "true", "", &log),
        ],
    );
    deploy(operator, &dir, "versions-2", &v2);
    trigger(operator, "versions", "v2", "2026-11-27");
    for gid in ["v1", "v2"] {
        let out = wait(operator, "versions", gid);
        assert_eq!(out.status.code(), Some(0), "versions {gid}: {}", explain(&out));
    }
    assert_eq!(ran(&log, "v1"), ["P", "Q"], "v1 ran on its own version");
    assert_eq!(ran(&log, "v2"), ["P", "Q2", "R"], "v2 ran on the new one");
    let v1_states = states(operator, "versions", "v1");
    assert_eq!(state_of(&v1_states, "Q"), "succeeded", "v1's status shows its own jobs: {v1_states:?}");
    let version = |gid: &str| {
        let out = padres(operator, &["workflow", "status", "versions", "--gid", gid, "--json"]);
        let value: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        value["generations"][0]["version"].as_str().unwrap_or_default().to_owned()
    };
    let (first, second) = (version("v1"), version("v2"));
    assert!(first.len() == 12 && second.len() == 12 && first != second, "versions {first} and {second}");

    // Operations: T outlives its timeout (its grandchild too, until killed); F fails
    // unless its agent's work directory holds `ok`; G follows F.
    let grandchild = dir.join("grandchild.pid");
    let sleeper = format!("sh -c 'echo $$ > {}; sleep 60' & sleep 60", grandchild.display());
    let ops = application(
        "ops",
        &[
            job("T", "daily", "agent-3", &[], &sleeper, "timeout=\"PT1S\" retries=\"0\"", &log),
            job("F", "daily", "agent-2", &[], "test -e ok", "retries=\"0\"", &log),
            job("G", "daily", "agent-1", &["F"], "true", "", &log),
            // F's failure handler runs when F fails.
            on_failure(job("FH", "daily", "agent-1", &["F"], "true", "", &log)),
        ],
    );
    deploy(operator, &dir, "ops", &ops);
    trigger(operator, "ops", "o1", "2026-11-27");
    let out = wait(operator, "ops", "o1");
    assert_eq!(out.status.code(), Some(1), "F failed and T timed out: {}", explain(&out));
    let o1 = states(operator, "ops", "o1");
    assert_eq!(
        (state_of(&o1, "T"), state_of(&o1, "F"), state_of(&o1, "G")),
        ("timeout".into(), "failed".into(), "waiting".into())
    );
    let pid = std::fs::read_to_string(&grandchild).expect("the grandchild started");
    // Gone, or a zombie waiting for whoever adopted it to reap it: not running.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("gone");
    assert!(
        matches!(state, "gone" | "Z" | "X"),
        "the timed-out job's grandchild {pid} was killed with its group: {stat}"
    );
    // Rerun F once `ok` exists: G runs, and the generation can end but for T.
    std::fs::write(agents[1].work.join("ok"), "").expect("ok");
    let out = padres(operator, &["workflow", "rerun", "ops", "--gid", "o1", "--job", "F"]);
    assert!(out.status.success(), "rerun: {}", explain(&out));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while state_of(&states(operator, "ops", "o1"), "G") != "succeeded" {
        assert!(std::time::Instant::now() < deadline, "G did not run after F's rerun");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A rerun of a job that succeeded is refused, with the reason.
    let out = padres(operator, &["workflow", "rerun", "ops", "--gid", "o1", "--job", "G"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only a failed job is rerun"), "{}", explain(&out));
    // T's timeout still holds APPL_END back: bypass it.
    let out = padres(operator, &["workflow", "bypass", "ops", "--gid", "o1", "--job", "T"]);
    assert!(out.status.success(), "bypass: {}", explain(&out));
    let out = wait(operator, "ops", "o1");
    assert_eq!(out.status.code(), Some(0), "released: {}", explain(&out));
    assert_eq!(ran(&log, "o1").iter().filter(|j| *j == "F").count(), 2, "F ran, and once more on rerun");
    assert_eq!(ran(&log, "o1").iter().filter(|j| *j == "G").count(), 1);
    assert_eq!(ran(&log, "o1").iter().filter(|j| *j == "FH").count(), 1, "the handler ran once");
    // A rerun in a generation that has ended is refused, with the reason.
    let out = padres(operator, &["workflow", "rerun", "ops", "--gid", "o1", "--job", "G"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("generation o1 of ops has ended"),
        "{}",
        explain(&out)
    );

    // agent-3 SIGKILLed while K runs, and restarted: K is reported failed, not run again.
    let marker = dir.join("k-started");
    let k = format!("echo $$ > {}; sleep 30", marker.display());
    let crash = application(
        "crash",
        &[
            job("K", "daily", "agent-3", &[], &k, "", &log),
            job("L", "daily", "agent-1", &["K"], "true", "", &log),
        ],
    );
    deploy(operator, &dir, "crash", &crash);
    trigger(operator, "crash", "c1", "2026-11-27");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(std::time::Instant::now() < deadline, "K did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    agents[2].kill();
    let (name, work) = (agents[2].name.clone(), agents[2].work.clone());
    agents[2] = Agent::start(operator, &name, &work);
    let out = wait(operator, "crash", "c1");
    assert_eq!(out.status.code(), Some(1), "K reported failed: {}", explain(&out));
    assert!(stdout(&out).contains("the agent stopped while it ran"), "{}", explain(&out));
    assert_eq!(ran(&log, "c1"), ["K"], "K not run again after the restart");
    // The first run's process group outlived its agent (SIGKILL gives no chance to stop
    // it): stopped here.
    let group = std::fs::read_to_string(&marker).expect("K's group");
    let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{}", group.trim())]).status();
    // The restarted agent kept its deployment: the operator's bypass reaches it.
    let out = padres(operator, &["workflow", "bypass", "crash", "--gid", "c1", "--job", "K"]);
    assert!(out.status.success(), "bypass after the restart: {}", explain(&out));
    let out = wait(operator, "crash", "c1");
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert_eq!(ran(&log, "c1"), ["K", "L"]);
    // A new version that moves K to agent-2: agent-3, no longer named, is undeployed.
    let moved = crash.replace("agent=\"agent-3\"", "agent=\"agent-2\"").replace("sleep 30", "true");
    let file = dir.join("crash-2.xml");
    std::fs::write(&file, &moved).expect("written");
    let out = padres(operator, &["workflow", "deploy", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(stdout(&out).contains("agent-3: undeployed crash (no longer named)"), "{}", explain(&out));
    trigger(operator, "crash", "c2", "2026-11-27");
    let out = wait(operator, "crash", "c2");
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert_eq!(ran(&log, "c2"), ["K", "L"], "K ran once, on agent-2 alone");
}

/// `examples/month-end.xml` (41 jobs: fan-out, fan-in, `any-of`, status conditions, a
/// pool served by one agent of its name) on three brokers and five agent processes, its
/// commands under `/opt/` replaced by scripts that record their runs: on the last
/// workday of a month and on an ordinary Wednesday, every job ends as its calendar says
/// (`succeeded` on the days its run term selects, else `skipped`).
#[test]
fn month_end_runs_on_the_last_workday_and_on_an_ordinary_day() {
    let mut brokers: Vec<Broker> = Vec::new();
    for i in 1..=3 {
        let mut flags = history_flags();
        if let Some(previous) = brokers.last() {
            flags.extend(neighbour_of(previous));
        }
        brokers.push(start_with(&format!("B{i}"), "month-end", &flags));
    }
    let dir = brokers[0].dir.join("test");
    let log = dir.join("ran.log");
    // Every command of the example, as a script that appends its name and arguments.
    let xml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/month-end.xml"))
        .expect("the example");
    let opt = dir.join("opt");
    for command in xml.split("<command>/opt/").skip(1).filter_map(|rest| rest.split('<').next()) {
        let path = opt.join(command);
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("dir");
        let script = format!("#!/bin/sh\necho \"{command} $*\" >> {}\n", log.display());
        std::fs::write(&path, script).expect("script");
        let mut permissions = std::fs::metadata(&path).expect("written").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&path, permissions).expect("executable");
    }
    let xml = xml.replace("<command>/opt/", &format!("<command>{}/", opt.display()));
    let app = padres_workflow::parse_application(&xml).expect("the example is valid");
    let mut _agents: Vec<Agent> = ["etl-1", "etl-2", "etl-3", "reports"]
        .iter()
        .enumerate()
        .map(|(i, name)| Agent::start(&brokers[i % 3], name, &dir.join(name)))
        .collect();
    // The ledger pool's two members: nothing is deployed to them.
    for (i, name) in ["ledger-1", "ledger-2"].iter().enumerate() {
        _agents.push(Agent::start_with(&brokers[i], name, &dir.join(name), &["--pool", "ledger"]));
    }
    let operator = &brokers[2];
    deploy(operator, &dir, "month-end", &xml);
    // 2026-11-30, a Monday, is November's last workday; 2026-11-18 an ordinary Wednesday.
    let days = [("close", "2026-11-30"), ("ordinary", "2026-11-18")];
    for (gid, date) in days {
        trigger(operator, "month-end", gid, date);
    }
    for (gid, date) in days {
        let out = wait(operator, "month-end", gid);
        assert_eq!(out.status.code(), Some(0), "{gid}: {}", explain(&out));
        let states = states(operator, "month-end", gid);
        let day: chrono::NaiveDate = date.parse().expect("a date");
        let mut ran = 0;
        for job in &app.jobs {
            let expected = if job.schedule.runs_on(day, &app.calendar) { "succeeded" } else { "skipped" };
            assert_eq!(state_of(&states, &job.name), expected, "{gid}/{}: {states:?}", job.name);
            ran += usize::from(expected == "succeeded");
        }
        assert!(ran > 30, "{gid}: most jobs run on a workday ({ran})");
    }
    // The books closed on the 30th only; the weekend backup ran on neither day.
    let written = std::fs::read_to_string(&log).expect("the jobs wrote");
    assert_eq!(written.lines().filter(|l| l.starts_with("ledger/close")).count(), 1, "{written}");
    assert!(!written.contains("ops/backup"), "{written}");
    // The pool's jobs ran on its members, dispatched by the home agent.
    let ran_on = |member: &str| {
        std::fs::read_to_string(dir.join(member).join("agent.log"))
            .unwrap_or_default()
            .matches("dispatched here")
            .count()
    };
    assert!(ran_on("ledger-1") + ran_on("ledger-2") >= 8, "the ledger pool's jobs ran on its members");
}

/// Waits up to 20 s for `broker`'s history store to hold a publication matching `filter`
/// (read from its file by `padres-broker history`).
fn stored_at(broker: &Broker, filter: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new(padres_tests::binary("padres-broker"))
            .arg("history")
            .arg("--data-dir")
            .arg(&broker.dir)
            .arg(filter)
            .output()
            .expect("padres-broker history runs");
        if out.status.success() && !stdout(&out).trim().is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{filter} not stored at {}: {}",
            broker.dir.display(),
            explain(&out)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to 20 s for `path` to exist.
fn wait_for_file(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Faults mid-generation, each while B runs after C has ended (so that D's dependency is
/// half met): the broker that detects `{B}&{C}` for D (B3, B's agent's broker) killed and
/// restarted, losing that partial match; then D's agent (the home agent) SIGKILLed and
/// restarted on another broker, its dependency subscriptions issued anew there without the
/// generation's trigger.
/// Each generation finishes (the agents catch up from the history stores) and every job
/// runs once.
#[test]
fn generations_finish_after_a_broker_and_an_agent_restart_mid_generation() {
    let (mut brokers, dir, log, mut agents) = payroll_federation("restart");
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).expect("dir");
    let b = format!("touch {}/b-$1; sleep 4", marks.display());
    let c = format!("touch {}/c-$1", marks.display());
    let payroll = application(
        "payroll",
        &[
            job("A", "daily", "agent-1", &[], "true", "", &log),
            job("B", "daily", "agent-2", &["A"], &b, "", &log),
            job("C", "daily", "agent-3", &["A"], &c, "", &log),
            job("D", "daily", "agent-1", &["B", "C"], "true", "", &log),
        ],
    );
    deploy(&brokers[4], &dir, "payroll", &payroll);

    // B3 killed while B runs and C has ended, and restarted.
    trigger(&brokers[4], "payroll", "r1", "2026-11-27");
    wait_for_file(&marks.join("b-r1"));
    wait_for_file(&marks.join("c-r1"));
    // C's status has reached B3 (its store, so its detector, which takes it first).
    stored_at(&brokers[2], "[class,eq,'job_status'],[gid,eq,'r1'],[job,eq,'C'],[status,eq,'succeeded']");
    brokers[2].kill();
    // Down a while, as a crashed broker is.
    std::thread::sleep(Duration::from_millis(500));
    brokers[2].start_again();
    let out = wait(&brokers[4], "payroll", "r1");
    assert_eq!(out.status.code(), Some(0), "r1 finishes after B3's restart: {}", explain(&out));
    let mut r1 = ran(&log, "r1");
    r1.sort();
    assert_eq!(r1, ["A", "B", "C", "D"], "each job once");

    // agent-1 (A, D, and the generation's start and end) killed while B runs, and restarted.
    let operator = &brokers[4];
    trigger(operator, "payroll", "r2", "2026-11-27");
    wait_for_file(&marks.join("b-r2"));
    wait_for_file(&marks.join("c-r2"));
    agents[0].kill();
    let (name, work) = (agents[0].name.clone(), agents[0].work.clone());
    // It comes back on B2: its new subscriptions share nothing with those it left at B1.
    agents[0] = Agent::start(&brokers[1], &name, &work);
    let out = wait(operator, "payroll", "r2");
    assert_eq!(out.status.code(), Some(0), "r2 finishes after agent-1's restart: {}", explain(&out));
    let mut r2 = ran(&log, "r2");
    r2.sort();
    assert_eq!(r2, ["A", "B", "C", "D"], "each job once");
}

/// `padres workflow place`: on B1 - B2 - B3, with the home agent, the jobs around B and
/// the one history store at B3 and B alone at B1, every status B waits for and every
/// status it publishes crosses both links; the advice is to run B at B3, saving all of the
/// application's link traffic, and to leave A and C where they are. The brokers'
/// per-class link counters it reads show the statuses that crossed.
#[test]
fn place_advises_running_a_job_next_to_the_jobs_it_serves() {
    let mut brokers: Vec<Broker> = Vec::new();
    for i in 1..=3 {
        let mut flags = if i == 3 { history_flags() } else { Vec::new() };
        flags.extend(["--monitor-interval-ms".to_owned(), "500".to_owned()]);
        if let Some(previous) = brokers.last() {
            flags.extend(neighbour_of(previous));
        }
        brokers.push(start_with(&format!("B{i}"), "place", &flags));
    }
    let dir = brokers[0].dir.join("test");
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("ran.log");
    let _agents = [
        Agent::start(&brokers[0], "agent-1", &dir.join("agent-1")),
        Agent::start(&brokers[2], "agent-2", &dir.join("agent-2")),
    ];
    let xml = application(
        "shuttle",
        &[
            job("A", "daily", "agent-2", &[], "echo extracted", "", &log),
            job("B", "daily", "agent-1", &["A"], "true", "", &log),
            job("C", "daily", "agent-2", &["B"], "true", "", &log),
        ],
    );
    deploy(&brokers[1], &dir, "shuttle", &xml);
    for (gid, date) in [("g1", "2026-11-23"), ("g2", "2026-11-24")] {
        trigger(&brokers[1], "shuttle", gid, date);
        let out = wait(&brokers[1], "shuttle", gid);
        assert!(out.status.success(), "{gid}: {}", explain(&out));
    }

    // Each ended status carries the end of its run's output.
    let out = padres(&brokers[1], &["workflow", "status", "shuttle", "--gid", "g1", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    let output_of = |job: &str| {
        status["generations"][0]["jobs"].as_array().and_then(|j| j.iter().find(|j| j["job"] == job)).cloned()
    };
    assert_eq!(
        output_of("A").map(|a| a["output"].clone()),
        Some(serde_json::json!("extracted\n")),
        "{status}"
    );
    assert_eq!(output_of("B").map(|b| b["output"].clone()), Some(serde_json::json!("")), "{status}");
    // How long B waited after A's success, by the brokers' stamps: a few milliseconds.
    let waited = output_of("B").and_then(|b| b["waited_ms"].as_i64());
    assert!(waited.is_some_and(|ms| (0..10_000).contains(&ms)), "{status}");

    let out = padres(&brokers[1], &["workflow", "place", "shuttle", "--json", "--wait", "20"]);
    assert!(out.status.success(), "place: {}", explain(&out));
    let advice: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(advice["links"], 2, "{advice}");
    assert_eq!(advice["home"]["broker"], "B3", "{advice}");
    assert_eq!(advice["generations"], 2, "{advice}");
    assert_eq!(
        advice["history_stores"],
        serde_json::json!([{"broker": "B3", "statuses": true, "triggers": true}])
    );
    assert!(advice["measured_messages"].as_u64().unwrap_or(0) > 0, "statuses crossed links: {advice}");
    let job = |name: &str| {
        advice["advice"]["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["job"] == name)
            .cloned()
            .expect(name)
    };
    let (a, b, c) = (job("A"), job("B"), job("C"));
    assert_eq!((b["at"].as_str(), b["best"].as_str()), (Some("B1"), Some("B3")), "{b}");
    let now = advice["advice"]["now"].as_f64().expect("now");
    assert!(now > 0.0, "{advice}");
    assert_eq!(b["saving"].as_f64(), Some(now), "moving B leaves no traffic on the links: {b}");
    for other in [a, c] {
        assert_eq!((other["best"].as_str(), other["saving"].as_f64()), (Some("B3"), Some(0.0)), "{other}");
    }
    // The same advice as text, for people.
    let out = padres(&brokers[1], &["workflow", "place", "shuttle", "--wait", "20"]);
    let text = stdout(&out);
    assert!(out.status.success(), "place: {}", explain(&out));
    let b_line = text.lines().find(|l| l.starts_with("B ")).unwrap_or_default();
    assert!(b_line.contains("B1") && b_line.contains("B3") && b_line.contains("100%"), "{text}");

    // B2 relayed job_status publications both ways, and counts them per class.
    let out = padres(&brokers[1], &["broker", "stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("stats JSON");
    for peer in ["B1", "B3"] {
        let sent = stats["link_traffic"]
            .as_array()
            .expect("link_traffic")
            .iter()
            .find(|r| r["peer"] == peer && r["class"] == "job_status")
            .unwrap_or_else(|| panic!("no job_status sent to {peer}: {stats}"));
        assert!(
            sent["messages"].as_u64() > Some(0) && sent["bytes"].as_u64() > sent["messages"].as_u64(),
            "{sent}"
        );
    }
}
