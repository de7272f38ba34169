//! Pools end to end with real processes: five `padres-broker` processes in a chain, a
//! home agent, pool members joining, dying and leaving, and the `padres` CLI.
//!
//! A pool-only application (four jobs in a diamond, every one `pool="workers"`) runs 200
//! generations on three members; one member is SIGKILLed mid-run (its jobs are dispatched
//! again and die with it), a fourth joins mid-run and gets work with no reconfiguration,
//! and one is drained (it finishes what it has, says it left, and exits 0). Every
//! generation succeeds, and each job of each generation ran to its end once (twice only
//! where the killed member had finished it and died before its status left).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

#[path = "common/workflow.rs"]
mod workflow;
use workflow::*;

const GENERATIONS: usize = 200;
const JOBS: [&str; 4] = ["P1", "P2", "P3", "P4"];

fn member(broker: &Broker, name: &str, dir: &Path) -> Agent {
    let flags = ["--pool", "workers", "--max-parallel", "2", "--load-period", "500"];
    Agent::start_with(broker, name, &dir.join(name), &flags)
}

/// The pool-only application: P1, then P2 and P3, then P4; each sleeps a little, then
/// appends `JOB GID MEMBER` to `log` (the member from its working directory, the member's
/// work directory).
fn application(log: &Path) -> String {
    let job = |name: &str, after: &[&str]| {
        let after: String = after.iter().map(|a| format!("<after job=\"{a}\"/>")).collect();
        format!(
            "<job name=\"{name}\" pool=\"workers\"><command>sh</command><arg>-c</arg>\
             <arg>sleep 0.1; echo \"{name} $1 $(basename \"$PWD\")\" &gt;&gt; {log}</arg><arg>sh</arg>\
             <arg>${{gen.gid}}</arg>{after}</job>",
            log = log.display()
        )
    };
    format!(
        "<application name=\"pooled\" tz=\"UTC\" home=\"home\" max-generations=\"50\">\
         <pool name=\"workers\" policy=\"least-loaded\" redispatch=\"5\"/>{}{}{}{}</application>",
        job("P1", &[]),
        job("P2", &["P1"]),
        job("P3", &["P1"]),
        job("P4", &["P2", "P3"])
    )
}

/// What `log` says ran: (gid, job) to the members that ran it, in order.
fn runs(log: &Path) -> BTreeMap<(String, String), Vec<String>> {
    let mut runs: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        if let [job, gid, member] = parts[..] {
            runs.entry((gid.to_owned(), job.to_owned())).or_default().push(member.to_owned());
        }
    }
    runs
}

/// Waits up to `secs` for `log` to hold at least `lines` runs.
fn wait_for_runs(log: &Path, lines: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while runs(log).values().map(Vec::len).sum::<usize>() < lines {
        assert!(Instant::now() < deadline, "fewer than {lines} runs after {secs} s: {:?}", runs(log).len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to `secs` for `agent` to exit (drained after `after`), and checks it exited 0.
fn left_cleanly(agent: &mut Agent, secs: u64, after: &str) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let exit = loop {
        if let Some(status) = agent.child.try_wait().expect("the agent's status") {
            break status;
        }
        assert!(Instant::now() < deadline, "{} did not leave within {secs} s of {after}", agent.name);
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "a drained agent leaves cleanly: {exit:?}");
}

/// Waits up to 30 s for `agent`'s load report to be stored (`padres agents` lists it up).
fn agent_reports(broker: &Broker, agent: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = padres(broker, &["agents", "--json"]);
        let value: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap_or_default();
        let up = value["agents"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["agent"] == agent && x["state"] == "up"));
        if up {
            return;
        }
        assert!(Instant::now() < deadline, "{agent} did not report within 30 s: {}", explain(&out));
    }
}

/// Triggers generations `g0` … through `broker` with one scripted client (`padres session`).
fn trigger_all(broker: &Broker, dir: &Path) {
    let mut script = String::from(
        "a [class,eq,'agent_ctl'],[agent,isPresent,''],[cmd,isPresent,''],[appl,isPresent,''],\
         [ref,isPresent,''],[body,isPresent,''],[gid,isPresent,''],[job,isPresent,''],[date,isPresent,'']\n",
    );
    for g in 0..GENERATIONS {
        script.push_str(&format!(
            "p [class,'agent_ctl'],[agent,'home'],[cmd,'trigger'],[appl,'pooled'],[ref,'t{g}'],[gid,'g{g}'],[date,'2026-11-18']\n"
        ));
    }
    let file = dir.join("triggers.txt");
    std::fs::write(&file, script).expect("written");
    let out = std::process::Command::new(padres_tests::binary("padres"))
        .arg("session")
        .args(broker_flags(broker))
        .stdin(std::fs::File::open(&file).expect("the script"))
        .output()
        .expect("padres session runs");
    assert!(out.status.success(), "triggers: {}", explain(&out));
    assert!(!stdout(&out).contains("\"error\""), "triggers: {}", explain(&out));
}

#[test]
fn a_pool_runs_every_generation_once_through_a_kill_a_join_and_a_drain() {
    let brokers = chain("pool");
    let dir = brokers[0].dir.join("test");
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("ran.log");
    // The home agent takes a member for gone after 6 of its reports (3 s) missed; it is a
    // member of the pool too.
    let home_flags = ["--silence", "6", "--pool", "workers", "--max-parallel", "1", "--load-period", "500"];
    let _home = Agent::start_with(&brokers[0], "home", &dir.join("home"), &home_flags);
    let mut w1 = member(&brokers[1], "w1", &dir);
    let mut w2 = member(&brokers[2], "w2", &dir);
    let _w3 = member(&brokers[4], "w3", &dir);
    // Only the home agent is named in the definition: it alone is deployed to.
    deploy(&brokers[3], &dir, "pooled", &application(&log));
    trigger_all(&brokers[3], &dir);
    // Mid-run, w1 is killed while it runs a job: one it has started (its log says so)
    // and not ended (the job's own log does not).
    wait_for_runs(&log, 60, 60);
    let deadline = Instant::now() + Duration::from_secs(60);
    let killed_in = loop {
        let started = std::fs::read_to_string(dir.join("w1").join("agent.log")).unwrap_or_default();
        let ran = runs(&log);
        let running = started.lines().filter_map(|l| l.split("pooled/").nth(1)).filter_map(|l| {
            let (key, rest) = l.split_once(':')?;
            let (gid, job) = key.split_once('/')?;
            rest.contains("dispatched here").then(|| (gid.to_owned(), job.to_owned()))
        });
        if let Some(key) = running.into_iter().find(|key| !ran.contains_key(key)) {
            break key;
        }
        assert!(Instant::now() < deadline, "w1 was given no job to run");
        std::thread::sleep(Duration::from_millis(10));
    };
    w1.kill();
    // A fourth member joins: nothing is deployed to it.
    let _w4 = member(&brokers[3], "w4", &dir);
    wait_for_runs(&log, 300, 120);
    // w2 is drained: it finishes what it has and leaves.
    let out = padres(&brokers[2], &["agents", "drain", "w2"]);
    assert!(out.status.success(), "drain: {}", explain(&out));
    left_cleanly(&mut w2, 30, "its drain");

    // Every generation ends, successfully.
    let deadline = Instant::now() + Duration::from_secs(180);
    let generations = loop {
        let out = padres(&brokers[4], &["workflow", "history", "pooled", "--json"]);
        // The history stores are busy (agents catch up through them): a store that did not
        // answer in time is asked again.
        let busy = String::from_utf8_lossy(&out.stderr).contains("did not answer");
        if busy && Instant::now() < deadline {
            continue;
        }
        assert!(out.status.success(), "history: {}", explain(&out));
        let value: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        let generations = value["generations"].as_array().cloned().unwrap_or_default();
        let done = generations.iter().filter(|g| g["outcome"] == "succeeded").count();
        if done == GENERATIONS {
            break generations;
        }
        assert!(Instant::now() < deadline, "{done} of {GENERATIONS} generations succeeded: {value}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let partial: Vec<_> = generations.iter().filter(|g| g["succeeded"] != 4).collect();
    assert!(partial.is_empty(), "every job of every generation succeeded: {partial:?}");

    // Each job of each generation ran to its end once: twice only where w1 ended it
    // and was killed before its status left it.
    let runs = runs(&log);
    assert_eq!(runs.len(), GENERATIONS * JOBS.len(), "every job of every generation ran");
    for ((gid, job), members) in &runs {
        let again = members.len() == 2 && members[0] == "w1" && members[1] != "w1";
        assert!(members.len() == 1 || again, "{gid}/{job} ran on {members:?}");
    }
    // The job w1 was killed running went to another member, and `status --json` says why
    // (its member's statuses since do not).
    let (gid, job) = &killed_in;
    if runs.get(&killed_in).is_some_and(|m| m.iter().any(|x| x != "w1")) {
        let out = padres(&brokers[4], &["workflow", "status", "pooled", "--gid", gid, "--json"]);
        let value: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        let text = value.to_string();
        let jobs = value.pointer("/generations/0/jobs").or_else(|| value.pointer("/jobs")).cloned();
        let entry = jobs.and_then(|j| j.as_array()?.iter().find(|x| x["job"] == job.as_str()).cloned());
        let reason = entry.map(|e| e["dispatch_reason"].to_string()).unwrap_or_default();
        assert!(
            reason.contains("dispatched again") && reason.contains("w1"),
            "{gid}/{job}: {reason}: {text}"
        );
    }
    let on = |member: &str| runs.values().filter(|m| m.iter().any(|x| x == member)).count();
    assert!(on("w4") > 0, "the member that joined mid-run got work");
    assert!(on("w1") > 0 && on("w2") > 0 && on("w3") > 0 && on("home") > 0, "every member worked");
    let home_log = std::fs::read_to_string(dir.join("home").join("agent.log")).expect("the home's log");
    assert!(home_log.contains("dispatched again: its agent w1 is"), "w1's jobs were dispatched again");

    // `padres agents` tells who is up, who left and who went silent.
    let out = padres(&brokers[0], &["agents", "--json"]);
    assert!(out.status.success(), "agents: {}", explain(&out));
    let value: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let state = |name: &str| {
        value["agents"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["agent"] == name))
            .map(|x| x["state"].as_str().unwrap_or("").to_owned())
            .unwrap_or_default()
    };
    assert_eq!(
        [state("home"), state("w1"), state("w2"), state("w3"), state("w4")],
        ["up", "silent", "left", "up", "up"],
        "{value}"
    );
}

#[test]
fn a_provisioner_grows_a_full_pool_and_drains_a_member_once_it_is_idle() {
    let brokers = chain("provision");
    let dir = brokers[0].dir.join("test");
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("ran.log");
    let flags = broker_flags(&brokers[1]).join(" ");
    // A scale-up starts a member named after the members there were; a scale-down drains
    // the member named.
    let scale_up = format!(
        "{} --name extra-$PADRES_MEMBERS --pool workers --max-parallel 1 --load-period 200 {flags} \
         --work-dir {dir}/extra-$PADRES_MEMBERS 2>> {dir}/extra.log & echo $! >> {dir}/extra.pids",
        padres_tests::binary("padres-agent").display(),
        dir = dir.display()
    );
    let scale_down =
        format!("{} agents drain \"$PADRES_MEMBER\" {flags}", padres_tests::binary("padres").display());
    let watch = [
        "--provision",
        "workers",
        "--scale-up",
        &scale_up,
        "--scale-down",
        &scale_down,
        "--over-for",
        "1",
        "--under-for",
        "2",
        "--max-members",
        "2",
        "--load-period",
        "200",
    ];
    // w1 first, so that the pool is not found empty (fewer than the fewest member) when
    // the home agent starts watching.
    let mut w1 = Agent::start_with(
        &brokers[2],
        "w1",
        &dir.join("w1"),
        &["--pool", "workers", "--max-parallel", "1", "--load-period", "200"],
    );
    agent_reports(&brokers[0], "w1");
    let _home = Agent::start_with(&brokers[0], "home", &dir.join("home"), &watch);
    deploy(
        &brokers[3],
        &dir,
        "pooled",
        &application(&log).replace("max-generations=\"50\"", "max-generations=\"10\""),
    );
    for g in 0..10 {
        trigger(&brokers[3], "pooled", &format!("g{g}"), "2026-11-18");
    }
    // w1 alone is full: a second member is started and gets work.
    for g in 0..10 {
        let out = wait(&brokers[3], "pooled", &format!("g{g}"));
        assert_eq!(out.status.code(), Some(0), "g{g}: {}", explain(&out));
    }
    let ran = runs(&log);
    let on_extra = ran.values().filter(|m| m.iter().any(|x| x.starts_with("extra-"))).count();
    assert!(on_extra > 0, "the member the scale-up started got work: {ran:?}");
    // Idle now: one member is drained (the least loaded, by name the later: w1) and leaves.
    left_cleanly(&mut w1, 60, "the pool going idle");
    let home_log = std::fs::read_to_string(dir.join("home").join("agent.log")).expect("the home's log");
    assert!(home_log.contains("scale-up advised") && home_log.contains("scale-down advised"), "{home_log}");
    for pid in std::fs::read_to_string(dir.join("extra.pids")).unwrap_or_default().lines() {
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
    }
}
