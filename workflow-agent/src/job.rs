//! Running one job of one generation as real processes.
//!
//! A job is its command run in a process group of its own (the group's id is the
//! command's process id): when the command ends, or its timeout passes, the whole group is
//! killed (SIGKILL), so that nothing it started outlives it and a timeout stops its
//! grandchildren too. Its arguments and environment values have `${gen.date}` (the
//! generation's run day, `YYYY-MM-DD`) and `${gen.gid}` (the generation's id) replaced. It
//! runs in its working directory (relative to the agent's work directory; the work
//! directory itself when none is given).
//!
//! Each attempt's standard output and error are written to
//! `OUTPUT/ATTEMPT.stdout` and `.stderr` (the caller chooses `OUTPUT`, one directory per
//! job and generation), at most [`Run::output_cap`] bytes each: what comes after is read
//! and dropped, so the job never blocks on a full pipe, and the file ends with a line
//! saying how much was dropped.
//!
//! An attempt succeeds when the command exits with status 0. One that exits otherwise, is
//! killed by a signal, or cannot be started (no such program, not executable, a working
//! directory that does not exist) has failed; one still running at its timeout has timed
//! out. A job that failed or timed out is tried again up to its `retries` (the agent's
//! decision, `agent/runs.rs`), waiting [`backoff`]: the job's `backoff` before the first
//! retry and twice as long before each next one (1 s when the job gives none). Its outcome
//! is its last attempt's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use padres_workflow::JobInfo;

/// The wait before the first retry when a job gives none.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between two attempts, however many retries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The most bytes of each output stream kept per attempt, by default.
pub const DEFAULT_OUTPUT_CAP: u64 = 1 << 20;

/// The wait before retry `retry` (1 for the first) of a job run as `info` says: its
/// backoff, doubled for each retry after the first, at most [`MAX_BACKOFF`].
pub fn backoff(info: &JobInfo, retry: u32) -> Duration {
    let base = info.backoff_ms.map_or(DEFAULT_BACKOFF, Duration::from_millis);
    let factor = 1_u32.checked_shl(retry.saturating_sub(1)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(MAX_BACKOFF)
}

/// One job of one generation, to run.
#[derive(Clone, Debug)]
pub struct Run<'a> {
    /// The job's command, arguments, environment and timeout.
    pub info: &'a JobInfo,
    /// The generation's run day, `YYYY-MM-DD` (for `${gen.date}`).
    pub date: &'a str,
    /// The generation's id (for `${gen.gid}`).
    pub gid: &'a str,
    /// The agent's work directory: a relative working directory is taken from here.
    pub work_dir: &'a Path,
    /// Where the attempts' output files go (created if missing).
    pub output: &'a Path,
    /// Most bytes kept of each output stream per attempt.
    pub output_cap: u64,
    /// Whether the process is killed when the agent dies (a pool job's: its home agent
    /// dispatches it to another member then, and it must not also run on here). Other
    /// jobs outlive a killed agent, which reports them failed when it starts again.
    pub die_with_agent: bool,
}

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The command exited with this status.
    Exited(i32),
    /// The command was killed by this signal (not by its timeout).
    Signalled(i32),
    /// Still running at the timeout: its process group was killed.
    TimedOut,
    /// It could not be started; the reason.
    NotStarted(String),
}

impl Ended {
    /// True for an exit with status 0.
    pub fn succeeded(&self) -> bool {
        *self == Self::Exited(0)
    }

    /// The `job_status` status it gives: `succeeded`, `failed` or `timeout`.
    pub fn status(&self) -> &'static str {
        match self {
            Self::Exited(0) => "succeeded",
            Self::TimedOut => "timeout",
            Self::Exited(_) | Self::Signalled(_) | Self::NotStarted(_) => "failed",
        }
    }

    /// Why, when the process did not say: the reason a command could not start.
    pub fn reason(&self) -> Option<String> {
        match self {
            Self::NotStarted(why) => Some(format!("could not start: {why}")),
            Self::TimedOut => Some("timed out: its process group was killed".to_owned()),
            Self::Exited(_) | Self::Signalled(_) => None,
        }
    }

    /// The exit status a `job_status` carries: the command's, 128 + the signal for a
    /// signal (as shells report it), -1 when it timed out or never started.
    pub fn exit(&self) -> i64 {
        match self {
            Self::Exited(code) => i64::from(*code),
            Self::Signalled(signal) => 128 + i64::from(*signal),
            Self::TimedOut | Self::NotStarted(_) => -1,
        }
    }
}

/// One attempt: its number (from 1), how it ended, and its output files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first.
    pub number: u32,
    /// How it ended.
    pub ended: Ended,
    /// Its standard output, as kept.
    pub stdout: PathBuf,
    /// Its standard error, as kept.
    pub stderr: PathBuf,
}

/// The most bytes of each stream an ended status carries ([`tail`]).
pub const TAIL_BYTES: u64 = 512;

/// The end of `attempt`'s output, for its ended status: the last [`TAIL_BYTES`] of its
/// standard output, then those of its standard error after a `[stderr]` line if it wrote
/// any; cut at a character boundary, invalid UTF-8 replaced.
pub async fn tail(attempt: &Attempt) -> String {
    async fn end_of(path: &Path) -> String {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let Ok(mut file) = tokio::fs::File::open(path).await else { return String::new() };
        let len = file.metadata().await.map(|m| m.len()).unwrap_or(0);
        let from = len.saturating_sub(TAIL_BYTES);
        if file.seek(std::io::SeekFrom::Start(from)).await.is_err() {
            return String::new();
        }
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes).await;
        // Not from the middle of a character.
        let start = if from > 0 { bytes.iter().position(|b| (*b as i8) >= -0x40).unwrap_or(0) } else { 0 };
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
    let (out, err) = (end_of(&attempt.stdout).await, end_of(&attempt.stderr).await);
    if err.is_empty() { out } else { format!("{out}[stderr]\n{err}") }
}

/// `text` with `${gen.date}` and `${gen.gid}` replaced.
pub fn substitute(text: &str, date: &str, gid: &str) -> String {
    text.replace("${gen.date}", date).replace("${gen.gid}", gid)
}

impl Run<'_> {
    /// One attempt, numbered `number`.
    pub async fn attempt(&self, number: u32) -> Attempt {
        let stdout = self.output.join(format!("{number}.stdout"));
        let stderr = self.output.join(format!("{number}.stderr"));
        let ended = match self.spawn() {
            Ok(child) => self.wait(child, &stdout, &stderr).await,
            Err(reason) => {
                // The files exist for every attempt, empty but for the reason.
                let _ = tokio::fs::create_dir_all(self.output).await;
                let _ = tokio::fs::write(&stdout, b"").await;
                let _ = tokio::fs::write(&stderr, format!("padres-agent: {reason}\n")).await;
                Ended::NotStarted(reason)
            }
        };
        Attempt { number, ended, stdout, stderr }
    }

    fn spawn(&self) -> Result<Child, String> {
        let dir = match &self.info.workdir {
            Some(dir) => self.work_dir.join(substitute(dir, self.date, self.gid)),
            None => self.work_dir.to_path_buf(),
        };
        let mut command = Command::new(&self.info.command);
        command
            .args(self.info.args.iter().map(|a| substitute(a, self.date, self.gid)))
            .envs(self.info.env.iter().map(|(k, v)| (k, substitute(v, self.date, self.gid))))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if self.die_with_agent {
            let agent = rustix::process::getpid();
            // SAFETY: the closure runs in the child between fork and exec, and makes only
            // two system calls (prctl, getppid), which allocate nothing and take no lock.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || {
                    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
                    // The agent died before the death signal was set: go now.
                    if rustix::process::getppid() != Some(agent) {
                        return Err(std::io::Error::other("the agent has gone"));
                    }
                    Ok(())
                });
            }
        }
        command.spawn().map_err(|e| {
            if dir.is_dir() {
                format!("cannot start {}: {e}", self.info.command)
            } else {
                format!("cannot start {}: no working directory {}", self.info.command, dir.display())
            }
        })
    }

    async fn wait(&self, mut child: Child, stdout: &Path, stderr: &Path) -> Ended {
        let group = child.id().and_then(|id| i32::try_from(id).ok()).and_then(rustix::process::Pid::from_raw);
        let out = keep(child.stdout.take(), stdout.to_path_buf(), self.output_cap);
        let err = keep(child.stderr.take(), stderr.to_path_buf(), self.output_cap);
        let copies = tokio::spawn(async move { tokio::join!(out, err) });
        let timeout = self.info.timeout_ms.map(Duration::from_millis);
        let status = match timeout {
            Some(limit) => tokio::time::timeout(limit, child.wait()).await.ok(),
            None => Some(child.wait().await),
        };
        // The command has ended or timed out: whatever it started goes with it (and the
        // pipes close, so the copies end).
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let ended = match status {
            None => {
                let _ = child.wait().await;
                Ended::TimedOut
            }
            Some(Ok(status)) => {
                use std::os::unix::process::ExitStatusExt;
                match (status.code(), status.signal()) {
                    (Some(code), _) => Ended::Exited(code),
                    (None, Some(signal)) => Ended::Signalled(signal),
                    (None, None) => Ended::NotStarted("it ended without a status".to_owned()),
                }
            }
            Some(Err(e)) => Ended::NotStarted(format!("waiting for it failed: {e}")),
        };
        let _ = copies.await;
        ended
    }
}

/// Copies `from` to the file `to`, keeping at most `cap` bytes and reading (and dropping)
/// the rest; ends with a line saying how much was dropped, if any. The file (and its
/// directory) is made when the first bytes come: a stream the command wrote nothing to
/// leaves no file (a job that prints nothing costs no inodes).
async fn keep(from: Option<impl AsyncRead + Unpin>, to: PathBuf, cap: u64) {
    let Some(mut from) = from else { return };
    let mut buf = vec![0; 64 * 1024];
    let (mut kept, mut dropped) = (0_u64, 0_u64);
    let mut file = None;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let file = match &mut file {
            Some(file) => file,
            None => {
                if let Some(dir) = to.parent() {
                    let _ = tokio::fs::create_dir_all(dir).await;
                }
                let Ok(created) = tokio::fs::File::create(&to).await else { return };
                file.insert(created)
            }
        };
        let room = usize::try_from(cap.saturating_sub(kept)).unwrap_or(usize::MAX).min(n);
        if room > 0 && file.write_all(&buf[..room]).await.is_err() {
            return;
        }
        kept += room as u64;
        dropped += (n - room) as u64;
    }
    let Some(mut file) = file else { return };
    if dropped > 0 {
        let note = format!("\n[padres-agent: {dropped} more bytes not kept: the cap is {cap} bytes]\n");
        let _ = file.write_all(note.as_bytes()).await;
    }
    let _ = file.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(command: &str, args: &[&str]) -> JobInfo {
        JobInfo {
            run: "daily".to_owned(),
            except: None,
            holiday: "run".to_owned(),
            command: command.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            workdir: None,
            timeout_ms: None,
            retries: 0,
            backoff_ms: Some(10),
        }
    }

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("padres-agent-job-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("work dir");
        dir
    }

    fn run<'a>(info: &'a JobInfo, work: &'a Path, output: &'a Path) -> Run<'a> {
        Run {
            info,
            date: "2026-11-27",
            gid: "g7",
            work_dir: work,
            output,
            output_cap: DEFAULT_OUTPUT_CAP,
            die_with_agent: false,
        }
    }

    #[tokio::test]
    async fn a_job_runs_in_its_directory_with_its_generation_substituted() {
        let work = dir("subst");
        std::fs::create_dir_all(work.join("jobs/g7")).expect("dir");
        let mut job = info("sh", &["-c", "echo \"$1 $GEN\" > out.txt; pwd", "sh", "${gen.date}"]);
        job.env = vec![("GEN".to_owned(), "gid=${gen.gid}".to_owned())];
        job.workdir = Some("jobs/${gen.gid}".to_owned());
        let output = work.join("output");
        let attempts = [run(&job, &work, &output).attempt(1).await];
        assert_eq!(attempts[0].ended, Ended::Exited(0));
        let written = std::fs::read_to_string(work.join("jobs/g7/out.txt")).expect("the job wrote");
        assert_eq!(written, "2026-11-27 gid=g7\n");
        let stdout = std::fs::read_to_string(&attempts[0].stdout).expect("stdout kept");
        assert!(stdout.trim_end().ends_with("jobs/g7"), "{stdout}");
    }

    #[tokio::test]
    async fn each_attempt_keeps_its_own_output() {
        let work = dir("retry");
        // Fails the first time (no marker yet), succeeds the second.
        let job = info(
            "sh",
            &["-c", "if [ -e marker ]; then echo again; else touch marker; echo first >&2; exit 3; fi"],
        );
        let output = work.join("output");
        let run = run(&job, &work, &output);
        let attempts = [run.attempt(1).await, run.attempt(2).await];
        let ended: Vec<_> = attempts.iter().map(|a| a.ended.clone()).collect();
        assert_eq!(ended, [Ended::Exited(3), Ended::Exited(0)]);
        assert_eq!((ended[0].status(), ended[0].exit()), ("failed", 3));
        assert_eq!(std::fs::read_to_string(&attempts[0].stderr).expect("stderr"), "first\n");
        assert_eq!(std::fs::read_to_string(&attempts[1].stdout).expect("stdout"), "again\n");
        // A stream an attempt wrote nothing to leaves no file.
        assert!(!attempts[0].stdout.exists() && !attempts[1].stderr.exists());
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_process_group_grandchildren_included() {
        let work = dir("timeout");
        // The job starts a sleeper in the background that writes its pid, then waits.
        let mut job = info("sh", &["-c", "sh -c 'echo $$ > sleeper.pid; exec sleep 30' & wait"]);
        job.timeout_ms = Some(500);
        let output = work.join("output");
        let started = std::time::Instant::now();
        let attempts = [run(&job, &work, &output).attempt(1).await];
        assert_eq!(attempts[0].ended, Ended::TimedOut);
        assert_eq!((attempts[0].ended.status(), attempts[0].ended.exit()), ("timeout", -1));
        assert!(started.elapsed() < Duration::from_secs(20), "the job was not stopped at its timeout");
        let pid: i32 =
            std::fs::read_to_string(work.join("sleeper.pid")).expect("pid").trim().parse().expect("a pid");
        // The grandchild is gone (or a zombie about to be reaped by init).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = state.rsplit(')').next().unwrap_or("").split_whitespace().next().unwrap_or("");
            if state.is_empty() || state == "Z" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the grandchild {pid} still runs ({state})");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[tokio::test]
    async fn what_a_job_leaves_running_ends_with_it() {
        let work = dir("leftover");
        let output = work.join("output");
        // The sleeper keeps the job's stdout open: a runner that waited for it would take
        // 30 s.
        let job = info("sh", &["-c", "sleep 30 & echo done"]);
        let started = std::time::Instant::now();
        let attempts = [run(&job, &work, &output).attempt(1).await];
        assert_eq!(attempts[0].ended, Ended::Exited(0));
        assert!(started.elapsed() < Duration::from_secs(20), "waited for the sleeper");
        assert_eq!(std::fs::read_to_string(&attempts[0].stdout).expect("stdout"), "done\n");
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_fails_with_the_reason() {
        let work = dir("missing");
        let output = work.join("output");
        let job = info("/nonexistent/padres-no-such-program", &[]);
        let attempts = [run(&job, &work, &output).attempt(1).await];
        let Ended::NotStarted(reason) = &attempts[0].ended else { panic!("{:?}", attempts[0].ended) };
        assert!(reason.contains("padres-no-such-program"), "{reason}");
        assert_eq!(attempts[0].ended.status(), "failed");
        let stderr = std::fs::read_to_string(&attempts[0].stderr).expect("stderr");
        assert!(stderr.contains(reason.as_str()), "{stderr}");
        let mut job = info("true", &[]);
        job.workdir = Some("no/such/dir".to_owned());
        let attempts = [run(&job, &work, &output).attempt(1).await];
        let Ended::NotStarted(reason) = &attempts[0].ended else { panic!("{:?}", attempts[0].ended) };
        assert!(reason.contains("no working directory"), "{reason}");
    }

    #[tokio::test]
    async fn output_past_the_cap_is_read_and_dropped_and_said() {
        let work = dir("cap");
        let output = work.join("output");
        // 200,000 bytes on stdout: far more than a pipe holds, so a job that were not read
        // would block.
        let job = info("sh", &["-c", "head -c 200000 /dev/zero | tr '\\0' x"]);
        let mut run = run(&job, &work, &output);
        run.output_cap = 1000;
        let attempts = [run.attempt(1).await];
        assert_eq!(attempts[0].ended, Ended::Exited(0));
        let kept = std::fs::read_to_string(&attempts[0].stdout).expect("stdout");
        assert!(kept.starts_with(&"x".repeat(1000)), "the first 1,000 bytes are kept");
        assert!(kept.contains("199000 more bytes not kept"), "{}", &kept[1000..]);
    }

    #[test]
    fn backoff_doubles_from_the_jobs_own_up_to_the_most() {
        let mut job = info("true", &[]);
        job.backoff_ms = Some(100);
        let waits: Vec<_> = (1..=4).map(|n| backoff(&job, n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800]);
        assert_eq!(backoff(&job, 40), MAX_BACKOFF);
        job.backoff_ms = None;
        assert_eq!(backoff(&job, 1), DEFAULT_BACKOFF);
    }
}
