//! What the workflow and pool end-to-end tests share: a chain of brokers keeping the
//! workflow classes' history, `padres-agent` processes, and the `padres workflow`
//! commands run against a broker.
// Each test file uses its own part of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub(crate) use padres_tests::broker::{Broker, neighbour_of, start_with};

/// What every broker here keeps: what agents and `padres workflow` read back, by the one
/// flag that says so (no other history flag).
pub(crate) fn history_flags() -> Vec<String> {
    vec!["--workflows".to_owned()]
}

/// Five brokers in a chain, B1 - B2 - B3 - B4 - B5.
pub(crate) fn chain(test: &str) -> Vec<Broker> {
    let mut brokers: Vec<Broker> = Vec::new();
    for i in 1..=5 {
        let mut flags = history_flags();
        if let Some(previous) = brokers.last() {
            flags.extend(neighbour_of(previous));
        }
        brokers.push(start_with(&format!("B{i}"), test, &flags));
    }
    brokers
}

/// The chain of [`chain`], a directory for the test's files and the log its jobs write
/// (`ran.log`), and agent-1, agent-2 and agent-3 on B1, B3 and B5.
pub(crate) fn payroll_federation(test: &str) -> (Vec<Broker>, PathBuf, PathBuf, [Agent; 3]) {
    let brokers = chain(test);
    let dir = brokers[0].dir.join("test");
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("ran.log");
    let agents = [
        Agent::start(&brokers[0], "agent-1", &dir.join("agent-1")),
        Agent::start(&brokers[2], "agent-2", &dir.join("agent-2")),
        Agent::start(&brokers[4], "agent-3", &dir.join("agent-3")),
    ];
    (brokers, dir, log, agents)
}

pub(crate) fn broker_flags(broker: &Broker) -> Vec<String> {
    vec![
        "--broker".into(),
        format!("quic://{}", broker.addr),
        "--ca".into(),
        broker.dir.join("cert.pem").display().to_string(),
    ]
}

/// Runs `padres ARGS` against `broker`.
pub(crate) fn padres(broker: &Broker, args: &[&str]) -> Output {
    Command::new(padres_tests::binary("padres"))
        .args(args)
        .args(broker_flags(broker))
        .output()
        .expect("padres runs")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn explain(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A `padres-agent` process, killed when dropped.
pub(crate) struct Agent {
    pub(crate) child: Child,
    pub(crate) name: String,
    pub(crate) work: PathBuf,
}

impl Agent {
    /// Starts agent `name`; its log goes to `agent.log` in `work`, appended to across
    /// restarts.
    pub(crate) fn start(broker: &Broker, name: &str, work: &Path) -> Self {
        Self::start_with(broker, name, work, &[])
    }

    /// [`Agent::start`] with more flags (`--pool`, …).
    pub(crate) fn start_with(broker: &Broker, name: &str, work: &Path, flags: &[&str]) -> Self {
        std::fs::create_dir_all(work).expect("work dir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(work.join("agent.log"))
            .expect("agent log");
        let child = Command::new(padres_tests::binary("padres-agent"))
            .args(["--name", name])
            .args(broker_flags(broker))
            .arg("--work-dir")
            .arg(work)
            .args(flags)
            .stderr(Stdio::from(log))
            .spawn()
            .expect("padres-agent starts");
        Self { child, name: name.to_owned(), work: work.to_owned() }
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A job of the test's applications: `script` run by `sh -c` in its agent's work
/// directory, with the generation's id as `$1`; it appends `JOB GID` to `log` first.
pub(crate) fn job(
    name: &str,
    run: &str,
    agent: &str,
    after: &[&str],
    script: &str,
    extra: &str,
    log: &Path,
) -> String {
    let after: String = after.iter().map(|a| format!("<after job=\"{a}\"/>")).collect();
    let script = script.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    format!(
        "<job name=\"{name}\" run=\"{run}\" agent=\"{agent}\" {extra}><command>sh</command><arg>-c</arg>\
         <arg>echo \"{name} $1\" &gt;&gt; {log}; {script}</arg><arg>sh</arg><arg>${{gen.gid}}</arg>{after}</job>",
        log = log.display()
    )
}

/// `job` (made by [`job`]) waiting for its predecessors' failure (`status="failed"`).
pub(crate) fn on_failure(job: String) -> String {
    job.replace("\"/>", "\" status=\"failed\"/>")
}

pub(crate) fn application(name: &str, jobs: &[String]) -> String {
    format!(
        "<application name=\"{name}\" tz=\"UTC\" calendar=\"bank\" max-generations=\"4\"><calendar name=\"bank\" workdays=\"mon-fri\"/>{}</application>",
        jobs.concat()
    )
}

/// The lines `log` holds for generation `gid`, as job names in order.
pub(crate) fn ran(log: &Path, gid: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ').filter(|(_, g)| *g == gid).map(|(job, _)| job.to_owned()))
        .collect()
}

/// Deploys `xml` (written to `dir`) through `broker`, retrying while agents connect.
pub(crate) fn deploy(broker: &Broker, dir: &Path, name: &str, xml: &str) {
    let file = dir.join(format!("{name}.xml"));
    std::fs::write(&file, xml).expect("written");
    let out = padres(broker, &["workflow", "deploy", file.to_str().expect("utf-8"), "--timeout", "30"]);
    assert!(out.status.success(), "deploy {name}: {}", explain(&out));
}

pub(crate) fn trigger(broker: &Broker, appl: &str, gid: &str, date: &str) {
    let out = padres(broker, &["workflow", "trigger", appl, "--gid", gid, "--date", date]);
    assert!(out.status.success(), "trigger {appl} {gid}: {}", explain(&out));
    assert_eq!(stdout(&out).trim(), gid);
}

pub(crate) fn wait(broker: &Broker, appl: &str, gid: &str) -> Output {
    padres(broker, &["workflow", "wait", appl, "--gid", gid, "--timeout", "60"])
}

/// The JSON status of generation `gid`: each job's state.
pub(crate) fn states(broker: &Broker, appl: &str, gid: &str) -> Vec<(String, String)> {
    let out = padres(broker, &["workflow", "status", appl, "--gid", gid, "--json"]);
    assert!(out.status.success(), "status: {}", explain(&out));
    let value: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let generation = &value["generations"][0];
    assert_eq!(generation["gid"], gid, "{value}");
    generation["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| (j["job"].as_str().unwrap_or("").to_owned(), j["state"].as_str().unwrap_or("").to_owned()))
        .collect()
}

pub(crate) fn state_of(states: &[(String, String)], job: &str) -> String {
    states.iter().find(|(j, _)| j == job).map(|(_, s)| s.clone()).unwrap_or_default()
}
