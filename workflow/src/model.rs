//! What a workflow definition says, once parsed and validated.

use std::time::Duration;

use padres_lang::Subscription;

use super::calendar::{Calendar, Schedule};

/// A place in the XML source (1-based).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// Line.
    pub line: u32,
    /// Column.
    pub column: u32,
}

/// An application: jobs, their calendar and the triggers that start generations.
#[derive(Clone, Debug, PartialEq)]
pub struct Application {
    /// Its name: the `appl` attribute of its messages.
    pub name: String,
    /// A version label, free text.
    pub version: Option<String>,
    /// The time zone its dates and cron triggers are read in (an IANA name, e.g. UTC).
    pub tz: String,
    /// Most generations running at once.
    pub max_generations: u32,
    /// Workdays and holidays.
    pub calendar: Calendar,
    /// What starts a generation.
    pub triggers: Vec<Trigger>,
    /// The jobs, in document order.
    pub jobs: Vec<Job>,
    /// The agent that starts and ends its generations and dispatches its pool jobs
    /// (`home="…"`); by default the agent of the first job.
    pub home: Option<String>,
    /// How its pools place jobs (`<pool>` elements), by pool name.
    pub pools: Vec<PoolSpec>,
}

/// How a pool places an application's jobs among its members (`<pool>`); travels in the
/// home agent's envelope body with each pool job.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolSpec {
    /// The pool.
    pub name: String,
    /// Placement policy.
    pub policy: Policy,
    /// Most times a job is dispatched again after its agent is gone.
    pub redispatch: u32,
}

/// How a pool job's member is chosen (see `docs/pools.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Members in turn, by name.
    RoundRobin,
    /// The member with the most headroom: capacity less running and queued jobs
    /// (Tsai et al.).
    #[default]
    LeastLoaded,
    /// The member with the lowest recent queueing delay (Jin et al.'s LAPSA).
    LowestDelay,
}

impl Policy {
    /// As written in the XML.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::LeastLoaded => "least-loaded",
            Self::LowestDelay => "lowest-delay",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" => Ok(Self::RoundRobin),
            "least-loaded" => Ok(Self::LeastLoaded),
            "lowest-delay" | "lapsa" => Ok(Self::LowestDelay),
            other => Err(format!(
                "unknown placement policy '{other}' (known: round-robin, least-loaded, lowest-delay)"
            )),
        }
    }
}

/// Re-dispatches of a pool job after its agent is gone, unless a `<pool>` says otherwise.
pub const REDISPATCH: u32 = 3;

impl Application {
    /// The agent that hosts `APPL_START` and `APPL_END`: `home`, else the first job's agent
    /// (parsing refuses an application whose first job runs in a pool and that names no
    /// home).
    pub fn home_agent(&self) -> &str {
        match (&self.home, self.jobs.first().map(|j| &j.runner)) {
            (Some(home), _) => home,
            (None, Some(Runner::Agent(a))) => a,
            _ => "",
        }
    }

    /// How pool `pool` places jobs: its `<pool>`, or the defaults.
    pub fn pool(&self, pool: &str) -> PoolSpec {
        self.pools.iter().find(|p| p.name == pool).cloned().unwrap_or_else(|| PoolSpec {
            name: pool.to_owned(),
            policy: Policy::default(),
            redispatch: REDISPATCH,
        })
    }
}

impl Application {
    /// The job named `name`.
    pub fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

/// What starts a generation.
#[derive(Clone, Debug)]
pub enum Trigger {
    /// A schedule: the generation's date is the day the expression fires (in the
    /// application's time zone).
    Cron(Box<croner::Cron>),
    /// A publication matching this subscription.
    Event(Subscription),
}

impl PartialEq for Trigger {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Cron(a), Self::Cron(b)) => a.pattern.to_string() == b.pattern.to_string(),
            (Self::Event(a), Self::Event(b)) => a == b,
            _ => false,
        }
    }
}

/// Who runs a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runner {
    /// This agent.
    Agent(String),
    /// Any agent of this pool.
    Pool(String),
}

impl Runner {
    /// The agent or pool name, as `agent_ctl` envelopes address it.
    pub fn name(&self) -> &str {
        match self {
            Self::Agent(n) | Self::Pool(n) => n,
        }
    }
}

/// Which statuses of a predecessor satisfy a dependency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusCondition {
    /// It succeeded or was skipped (not selected that day): the default, which keeps
    /// ordering transitive through jobs that do not run.
    #[default]
    Ok,
    /// It succeeded.
    Success,
    /// It failed (or timed out).
    Failed,
    /// It ended, whatever the outcome.
    Any,
}

impl StatusCondition {
    /// The `job_status` statuses that satisfy this condition.
    pub fn statuses(self) -> &'static [&'static str] {
        match self {
            Self::Ok => &["succeeded", "skipped"],
            Self::Success => &["succeeded"],
            Self::Failed => &["failed", "timeout"],
            Self::Any => &["succeeded", "skipped", "failed", "timeout"],
        }
    }

    /// As written in the XML.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Success => "success",
            Self::Failed => "failed",
            Self::Any => "any",
        }
    }
}

/// A dependency of a job. A job's list of them is a conjunction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dependency {
    /// `<after job="X" status="…"/>`.
    After {
        /// The predecessor.
        job: String,
        /// Which of its statuses count.
        status: StatusCondition,
        /// Where it is written.
        at: Pos,
    },
    /// `<any-of>…</any-of>`: one of these suffices.
    AnyOf(Vec<Self>),
}

impl Dependency {
    /// Every predecessor named, in order.
    pub fn jobs(&self) -> Vec<&str> {
        match self {
            Self::After { job, .. } => vec![job.as_str()],
            Self::AnyOf(deps) => deps.iter().flat_map(Self::jobs).collect(),
        }
    }
}

/// One job.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Its name, unique in the application.
    pub name: String,
    /// When it runs.
    pub schedule: Schedule,
    /// Who runs it.
    pub runner: Runner,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it.
    pub env: Vec<(String, String)>,
    /// Its working directory.
    pub workdir: Option<String>,
    /// Longest it may run.
    pub timeout: Option<Duration>,
    /// Attempts after a failure.
    pub retries: u32,
    /// Wait before a retry.
    pub backoff: Option<Duration>,
    /// What it waits for (all of them).
    pub after: Vec<Dependency>,
    /// Where it is defined.
    pub at: Pos,
}

impl Job {
    /// Every predecessor named by its dependencies.
    pub fn predecessors(&self) -> Vec<&str> {
        self.after.iter().flat_map(Dependency::jobs).collect()
    }
}
