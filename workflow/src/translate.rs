//! Translation (the PADRES paper §4.3): an [`Application`] becomes, per job, a composite
//! dependency subscription, an advertisement for its `job_status` publications and its
//! job information; these are grouped into one `agent_ctl` envelope per agent.
//!
//! Two virtual jobs frame every application. `APPL_START` depends on the generation's
//! trigger alone and precedes every start job (one without predecessors); `APPL_END`
//! follows every end job (one without successors), so a monitor sees a generation begin
//! and end. Both run on the agent of the application's first job.
//!
//! A job's dependency is the trigger AND each of its dependencies (an `<any-of>` becomes
//! an OR), every part joined on `appl` (a constant) and `gid` (the variable `$S$g`), so the
//! statuses of one generation never satisfy another's. A status condition becomes a set of
//! `job_status` statuses (`ok`: succeeded or skipped), written as exclusions of the others.
//!
//! An envelope's `body` is JSON ([`EnvelopeBody`]): the application's time zone, workdays
//! and holidays, and per job its subscription and advertisement in command form and its
//! [`JobInfo`] (run term, command, arguments, environment, timeout, retries).
//!
//! Message classes and attributes (DESIGN §8):
//! `trigger` [appl, version, gid, date]; `job_status` [appl, gid, job, agent, status, exit,
//! attempt, reason]; `agent_ctl` and `agent_reply`: [`crate::control`].

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use padres_lang::composite::{CompositeOp, CompositeSubscription};
use padres_lang::{Advertisement, InvalidMessage, Publication, Subscription, Value};

use super::calendar::weekdays_text;
use super::control::{Command, Control};
use super::model::{Application, Dependency, Job, PoolSpec, Runner, StatusCondition, Trigger};

/// The virtual job before every start job.
pub const APPL_START: &str = "APPL_START";
/// The virtual job after every end job.
pub const APPL_END: &str = "APPL_END";

/// Every status a `job_status` publication may carry. `dispatched` is a pool job's
/// assignment to one member of its pool, published by the application's home agent
/// (`docs/pools.md`).
pub const STATUSES: [&str; 6] = ["started", "succeeded", "failed", "skipped", "timeout", "dispatched"];

/// How a job runs: what its agent needs besides the subscription and advertisement.
/// Travels as JSON in the envelope body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    /// Run term (see [`super::RunTerm`]), as text.
    pub run: String,
    /// Dates excepted, as a run term, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub except: Option<String>,
    /// Holiday rule: skip, previous-workday, next-workday or run.
    pub holiday: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables, name then value.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Longest run, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Attempts after a failure.
    #[serde(default)]
    pub retries: u32,
    /// Wait before a retry, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
}

impl JobInfo {
    /// As JSON, as a pool job's `dispatched` status carries it.
    pub fn to_json(&self) -> String {
        // Plain data of strings and numbers: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads [`JobInfo::to_json`]'s text back.
    ///
    /// # Errors
    /// The text is not a job's information, in words.
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("bad job information: {e}"))
    }

    fn of(job: &Job) -> Self {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            run: job.schedule.run.to_string(),
            except: job.schedule.except.as_ref().map(ToString::to_string),
            holiday: job.schedule.holiday.as_str().to_owned(),
            command: job.command.clone(),
            args: job.args.clone(),
            env: job.env.clone(),
            workdir: job.workdir.clone(),
            timeout_ms: job.timeout.map(ms),
            retries: job.retries,
            backoff_ms: job.backoff.map(ms),
        }
    }
}

/// One job in an envelope body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BodyJob {
    /// The job's name.
    pub job: String,
    /// Its dependency subscription, in command form (`cs …`).
    pub subscription: String,
    /// Its status advertisement, in command form (`a …`). Agents advertise their own
    /// ([`status_advertisement`] under their name); it is kept for those that read it.
    pub advertisement: String,
    /// How it runs; absent for the virtual jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<JobInfo>,
    /// What it waits for (all of them), as its dependency subscription says: for those who
    /// follow a generation (`padres workflow status` and `wait`) and need not read the
    /// subscription.
    #[serde(default)]
    pub after: Vec<Need>,
    /// When it is no longer needed, in command form (`cs …`): the trigger and a
    /// predecessor's final status (`succeeded` or `skipped`, which no rerun or bypass
    /// changes) that its status condition refuses. Only for jobs whose conditions can be
    /// refused that way (`success`, `failed`): see `unless_of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unless: Option<String>,
    /// The pool that runs it, for a pool job: the home agent, which the envelope is for,
    /// dispatches it to one member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolSpec>,
}

/// One dependency of a job, in an envelope body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// A status of a job of the same generation.
    After {
        /// The job.
        job: String,
        /// Its statuses that satisfy the dependency.
        statuses: Vec<String>,
        /// The agent whose statuses of it count (the one that runs it); `None`: any (a
        /// pool job, run by whichever member it is dispatched to, or a deployment from
        /// before agents were named here).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
    },
    /// One of these.
    AnyOf(Vec<Self>),
}

impl Need {
    fn of(dep: &Dependency, runners: &Runners<'_>) -> Self {
        match dep {
            Dependency::After { job, status, .. } => Self::After {
                job: job.clone(),
                statuses: status.statuses().iter().map(|s| (*s).to_owned()).collect(),
                agent: runners.of(job).map(str::to_owned),
            },
            Dependency::AnyOf(deps) => Self::AnyOf(deps.iter().map(|d| Self::of(d, runners)).collect()),
        }
    }
}

/// Who publishes each job's statuses, so that a dependency counts only that agent's: an
/// agent with the right to publish statuses of an application cannot release another
/// agent's jobs by publishing their predecessors' statuses under its own name.
#[derive(Debug)]
struct Runners<'a> {
    /// The home agent: `APPL_START` and `APPL_END` are its.
    home: &'a str,
    /// Each job's agent; `None` for a pool job (any member may run it).
    jobs: HashMap<&'a str, Option<&'a str>>,
}

impl Runners<'_> {
    fn of(&self, job: &str) -> Option<&str> {
        if job == APPL_START || job == APPL_END {
            return Some(self.home);
        }
        self.jobs.get(job).copied().flatten()
    }
}

/// What starts a generation, in an envelope body (the home agent's: the one running
/// `APPL_START`, which publishes the triggers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerSpec {
    /// A cron expression, read in the application's time zone.
    Cron(String),
    /// A subscription (text syntax): each publication matching it starts a generation.
    Event(String),
}

/// An `agent_ctl` envelope's body: the application's calendar and the agent's jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeBody {
    /// The application.
    pub appl: String,
    /// Its time zone.
    pub tz: String,
    /// Working weekdays (`mon,tue,wed,thu,fri`).
    pub workdays: String,
    /// Holidays, YYYY-MM-DD.
    pub holidays: Vec<String>,
    /// The jobs.
    pub jobs: Vec<BodyJob>,
    /// What starts a generation (the home agent's body only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<TriggerSpec>,
    /// Most generations running at once (the home agent holds further triggers back).
    #[serde(default = "one")]
    pub max_generations: u32,
    /// The application's version ([`Deployment::version`]): the home agent puts it in each
    /// trigger, and each job's dependency takes only triggers of its own version.
    #[serde(default)]
    pub version: String,
    /// The home agent: a generation has ended when its `APPL_END` status comes from it
    /// (`None` in a body from before it was named: from any agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
}

const fn one() -> u32 {
    1
}

impl EnvelopeBody {
    /// Reads a body back (what an agent does with an envelope).
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("bad agent_ctl body: {e}"))
    }

    /// The body as JSON, as an envelope carries it.
    pub fn to_json(&self) -> String {
        // Plain data of strings and numbers: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What one job (real or virtual) is deployed as.
#[derive(Clone, Debug, PartialEq)]
pub struct JobDeployment {
    /// The job.
    pub job: String,
    /// The agent (or pool) that runs it.
    pub agent: String,
    /// When it may run: the trigger and its predecessors' statuses of one generation.
    pub dependency: CompositeSubscription,
    /// What its agent advertises to publish the job's `job_status`.
    pub advertisement: Advertisement,
    /// Its predecessors (for a virtual job, the start or end jobs).
    pub predecessors: Vec<String>,
    /// Its dependencies (for a virtual job, the start or end jobs).
    pub after: Vec<Need>,
    /// When it can no longer run in a generation (`unless_of`); `None` for a job whose
    /// dependencies a final status always meets.
    pub unless: Option<CompositeSubscription>,
    /// How it runs; `None` for the virtual jobs.
    pub info: Option<JobInfo>,
    /// The pool that runs it (the home agent, `agent`, dispatches it); `None` for a job
    /// of a named agent.
    pub pool: Option<PoolSpec>,
}

/// One `agent_ctl` envelope: everything one agent is to deploy.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// The agent (or pool) addressed.
    pub agent: String,
    /// The application's time zone, workdays and holidays, for the agent's schedule checks.
    pub tz: String,
    /// Working weekdays.
    pub workdays: String,
    /// Holidays.
    pub holidays: Vec<String>,
    /// Its jobs, in document order (virtual jobs first and last).
    pub jobs: Vec<JobDeployment>,
    /// What starts a generation, for the home agent (empty for the others).
    pub triggers: Vec<TriggerSpec>,
    /// Most generations running at once.
    pub max_generations: u32,
    /// The application's version.
    pub version: String,
    /// The home agent.
    pub home: String,
}

/// A translated application.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    /// The application's name.
    pub appl: String,
    /// Its version: 12 hexadecimal digits, a digest of the translation (see
    /// [`translate`]). Generations run on the version their trigger names, so one running
    /// when a new version is deployed finishes on its own.
    pub version: String,
    /// Every job, `APPL_START` first and `APPL_END` last.
    pub jobs: Vec<JobDeployment>,
    /// One envelope per agent, by agent name.
    pub envelopes: Vec<Envelope>,
}

fn quoted(text: &str) -> String {
    Value::str(text).to_string()
}

fn parse_sub(text: &str) -> Subscription {
    // Built from validated names and quoted strings: a failure is a bug here.
    text.parse().unwrap_or_else(|e| panic!("translation built an invalid subscription {text}: {e}"))
}

/// The trigger of a generation of version `version` of `appl`, binding `$S$g` to its
/// `gid`.
pub fn trigger_subscription(appl: &str, version: &str) -> Subscription {
    parse_sub(&format!(
        "[class,eq,'trigger'],[appl,eq,{}],[version,eq,{}],[gid,eq,$S$g]",
        quoted(appl),
        quoted(version)
    ))
}

/// Any status of the generation's `APPL_END` (`$S$g`) by the home agent `home`: it ends
/// the generation's partial matches of every job's dependency.
pub fn end_subscription(appl: &str, home: &str) -> Subscription {
    parse_sub(&format!(
        "[class,eq,'job_status'],[appl,eq,{}],[gid,eq,$S$g],[job,eq,{}],[agent,eq,{}]",
        quoted(appl),
        quoted(APPL_END),
        quoted(home)
    ))
}

/// `job`'s statuses allowed by `status`, in the same generation (`$S$g`), published by
/// `agent` (any agent if `None`).
pub fn status_subscription(
    appl: &str,
    job: &str,
    status: StatusCondition,
    agent: Option<&str>,
) -> Subscription {
    statuses_subscription(appl, job, status.statuses(), agent)
}

/// `job`'s statuses in `allowed`, in the same generation (`$S$g`), by `agent` if given.
fn statuses_subscription(appl: &str, job: &str, allowed: &[&str], agent: Option<&str>) -> Subscription {
    let mut text =
        format!("[class,eq,'job_status'],[appl,eq,{}],[gid,eq,$S$g],[job,eq,{}]", quoted(appl), quoted(job));
    if let Some(agent) = agent {
        text.push_str(&format!(",[agent,eq,{}]", quoted(agent)));
    }
    if let [only] = allowed {
        text.push_str(&format!(",[status,eq,{}]", quoted(only)));
    } else {
        for excluded in STATUSES.iter().filter(|s| !allowed.contains(s)) {
            text.push_str(&format!(",[status,neq,{}]", quoted(excluded)));
        }
    }
    parse_sub(&text)
}

/// The advertisement of `job`'s `job_status` publications. `reason`, when present, says
/// why a job ended as it did without its process saying so (it could not start, its agent
/// stopped while it ran, an operator bypassed it). A pool job's statuses carry its
/// `pool`; its `dispatched` status names the member it is for (`to`, and that member's
/// `incarnation`) and carries what the member runs: the generation's `date` and the job's
/// [`JobInfo`] as JSON (`info`).
///
/// Each agent advertises the statuses it publishes itself, under its own name (`agent`): a
/// pool job's home agent (its `dispatched` statuses) and each member that runs it advertise
/// apart. So a broker's permits can hold an agent to statuses naming itself
/// (`[class,eq,'job_status'],[agent,eq,'${principal}']`, `docs/security.md`).
pub fn status_advertisement(appl: &str, job: &str, agent: &str) -> Advertisement {
    let text = format!(
        "[class,eq,'job_status'],[appl,eq,{}],[gid,isPresent,''],[job,eq,{}],[agent,eq,{}],\
         [status,isPresent,''],[exit,isPresent,0],[attempt,isPresent,0],[reason,isPresent,''],\
         [pool,isPresent,''],[to,isPresent,''],[incarnation,isPresent,0],[date,isPresent,''],[info,isPresent,''],\
         [output,isPresent,'']",
        quoted(appl),
        quoted(job),
        quoted(agent)
    );
    text.parse().unwrap_or_else(|e| panic!("translation built an invalid advertisement {text}: {e}"))
}

/// Why an application cannot be translated (it is too large for one message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("job '{job}': {message}")]
pub struct TranslateError {
    /// The job whose messages could not be made.
    pub job: String,
    /// Why.
    pub message: String,
}

/// Joins `parts` with `op` as a balanced tree, so that its depth grows with the
/// logarithm of the number of parts (composite subscriptions have a depth limit).
fn balanced(mut parts: Vec<CompositeSubscription>, op: CompositeOp) -> Result<CompositeSubscription, String> {
    while parts.len() > 1 {
        let mut next = Vec::with_capacity(parts.len().div_ceil(2));
        let mut pairs = parts.into_iter();
        while let Some(left) = pairs.next() {
            next.push(match pairs.next() {
                Some(right) => left.combine(op, right).map_err(|e| e.to_string())?,
                None => left,
            });
        }
        parts = next;
    }
    parts.pop().ok_or_else(|| "nothing to join".to_owned())
}

fn dependency_of(
    appl: &str,
    dep: &Dependency,
    runners: &Runners<'_>,
) -> Result<CompositeSubscription, String> {
    match dep {
        Dependency::After { job, status, .. } => {
            Ok(CompositeSubscription::leaf(status_subscription(appl, job, *status, runners.of(job))))
        }
        Dependency::AnyOf(deps) => {
            let parts =
                deps.iter().map(|d| dependency_of(appl, d, runners)).collect::<Result<Vec<_>, _>>()?;
            balanced(parts, CompositeOp::Or)
        }
    }
}

/// The final statuses: no rerun or bypass changes them.
pub const FINAL: [&str; 2] = ["succeeded", "skipped"];

/// What makes `dep` impossible for good: a final status its condition refuses (for
/// `<any-of>`, one for each of its parts); `None` if nothing does.
fn impossible_of(
    appl: &str,
    dep: &Dependency,
    runners: &Runners<'_>,
) -> Result<Option<CompositeSubscription>, String> {
    match dep {
        Dependency::After { job, status, .. } => {
            let refused: Vec<&str> =
                FINAL.iter().copied().filter(|s| !status.statuses().contains(s)).collect();
            Ok((!refused.is_empty()).then(|| {
                CompositeSubscription::leaf(statuses_subscription(appl, job, &refused, runners.of(job)))
            }))
        }
        Dependency::AnyOf(deps) => {
            let mut parts = Vec::new();
            for dep in deps {
                match impossible_of(appl, dep, runners)? {
                    Some(part) => parts.push(part),
                    None => return Ok(None),
                }
            }
            balanced(parts, CompositeOp::And).map(Some)
        }
    }
}

/// When a job with dependencies `deps` may no longer be able to run in a generation: its
/// trigger and any one dependency made impossible for good (a predecessor ended
/// `succeeded` or `skipped`, which its condition refuses: a failure handler
/// `status="failed"` after a success). On its match the agent reads the generation's
/// statuses and publishes the job `skipped` once every other dependency is decided too
/// ([`crate::progress::Generation::cannot_run`]), so that its successors, and `APPL_END`,
/// go on. `None` when no final status can refuse them (`ok`, `any`).
fn unless_of(
    appl: &str,
    version: &str,
    deps: &[Dependency],
    runners: &Runners<'_>,
) -> Result<Option<CompositeSubscription>, String> {
    let mut parts = Vec::new();
    for dep in deps {
        parts.extend(impossible_of(appl, dep, runners)?);
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let impossible = balanced(parts, CompositeOp::Or)?;
    CompositeSubscription::leaf(trigger_subscription(appl, version))
        .combine(CompositeOp::And, impossible)
        .and_then(|cs| cs.until(end_subscription(appl, runners.home)))
        .map(Some)
        .map_err(|e| e.to_string())
}

fn deployment(
    (appl, version): (&str, &str),
    job: &str,
    agent: &str,
    deps: &[Dependency],
    runners: &Runners<'_>,
) -> Result<JobDeployment, TranslateError> {
    let error = |message: String| TranslateError { job: job.to_owned(), message };
    let mut parts = vec![CompositeSubscription::leaf(trigger_subscription(appl, version))];
    for dep in deps {
        parts.push(dependency_of(appl, dep, runners).map_err(error)?);
    }
    let dependency = balanced(parts, CompositeOp::And)
        .and_then(|cs| cs.until(end_subscription(appl, runners.home)).map_err(|e| e.to_string()))
        .map_err(error)?;
    Ok(JobDeployment {
        job: job.to_owned(),
        agent: agent.to_owned(),
        dependency,
        advertisement: status_advertisement(appl, job, agent),
        predecessors: deps.iter().flat_map(Dependency::jobs).map(str::to_owned).collect(),
        after: deps.iter().map(|d| Need::of(d, runners)).collect(),
        unless: unless_of(appl, version, deps, runners).map_err(error)?,
        info: None,
        pool: None,
    })
}

fn after(job: &str) -> Dependency {
    Dependency::After { job: job.to_owned(), status: StatusCondition::Ok, at: Default::default() }
}

/// Translates a parsed (so valid) application. Fails only for a job with more
/// dependencies than one composite subscription holds (about 2,000).
///
/// Its version ([`Deployment::version`]) is a digest of what the translation gives every
/// agent: the same definition translates to the same version, and any change that
/// reaches an agent (a command, a dependency, a calendar) to another.
pub fn translate(app: &Application) -> Result<Deployment, TranslateError> {
    let draft = translate_version(app, "")?;
    let text: String = draft
        .envelopes
        .iter()
        .map(|envelope| format!("{}\u{0}{}\u{0}", envelope.agent, envelope.body(&draft.appl)))
        .collect();
    translate_version(app, &format!("{:012x}", digest(&text) & 0xffff_ffff_ffff))
}

/// A digest of `text` (64-bit FNV-1a): stable across runs and builds, for names made from
/// content (an application's version, an event-triggered generation's id). Not for
/// security.
pub fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn translate_version(app: &Application, version: &str) -> Result<Deployment, TranslateError> {
    let appl = app.name.as_str();
    let home = app.home_agent();
    let has_successor =
        |job: &Job| app.jobs.iter().any(|other| other.predecessors().contains(&job.name.as_str()));
    let runners = Runners {
        home,
        jobs: app
            .jobs
            .iter()
            .map(|job| {
                let agent = match &job.runner {
                    Runner::Agent(agent) => Some(agent.as_str()),
                    Runner::Pool(_) => None,
                };
                (job.name.as_str(), agent)
            })
            .collect(),
    };
    let mut jobs = vec![deployment((appl, version), APPL_START, home, &[], &runners)?];
    for job in &app.jobs {
        let deps: Vec<Dependency> =
            if job.after.is_empty() { vec![after(APPL_START)] } else { job.after.clone() };
        // A pool job's dependency is the home agent's, which dispatches it.
        let agent = match &job.runner {
            Runner::Agent(agent) => agent.as_str(),
            Runner::Pool(_) => home,
        };
        let mut deployed = deployment((appl, version), &job.name, agent, &deps, &runners)?;
        deployed.info = Some(JobInfo::of(job));
        if let Runner::Pool(pool) = &job.runner {
            deployed.pool = Some(app.pool(pool));
        }
        jobs.push(deployed);
    }
    let ends: Vec<Dependency> =
        app.jobs.iter().filter(|j| !has_successor(j)).map(|j| after(&j.name)).collect();
    jobs.push(deployment((appl, version), APPL_END, home, &ends, &runners)?);
    let mut by_agent: BTreeMap<&str, Vec<JobDeployment>> = BTreeMap::new();
    for job in &jobs {
        by_agent.entry(job.agent.as_str()).or_default().push(job.clone());
    }
    let workdays = weekdays_text(app.calendar.workdays);
    let holidays: Vec<String> = app.calendar.holidays.iter().map(ToString::to_string).collect();
    let triggers: Vec<TriggerSpec> = app
        .triggers
        .iter()
        .map(|t| match t {
            Trigger::Cron(cron) => TriggerSpec::Cron(cron.pattern.to_string()),
            Trigger::Event(sub) => TriggerSpec::Event(sub.to_string()),
        })
        .collect();
    let envelopes = by_agent
        .into_iter()
        .map(|(agent, jobs)| Envelope {
            agent: agent.to_owned(),
            tz: app.tz.clone(),
            workdays: workdays.clone(),
            holidays: holidays.clone(),
            triggers: if agent == home { triggers.clone() } else { Vec::new() },
            max_generations: app.max_generations,
            version: version.to_owned(),
            home: home.to_owned(),
            jobs,
        })
        .collect();
    Ok(Deployment { appl: appl.to_owned(), version: version.to_owned(), jobs, envelopes })
}

impl Envelope {
    /// The envelope's body, as JSON ([`EnvelopeBody`]).
    pub fn body(&self, appl: &str) -> String {
        self.envelope_body(appl).to_json()
    }

    /// The envelope's body.
    pub fn envelope_body(&self, appl: &str) -> EnvelopeBody {
        EnvelopeBody {
            appl: appl.to_owned(),
            tz: self.tz.clone(),
            workdays: self.workdays.clone(),
            holidays: self.holidays.clone(),
            jobs: self
                .jobs
                .iter()
                .map(|j| BodyJob {
                    job: j.job.clone(),
                    subscription: format!("cs {}", j.dependency),
                    advertisement: format!("a {}", j.advertisement),
                    info: j.info.clone(),
                    after: j.after.clone(),
                    unless: j.unless.as_ref().map(|u| format!("cs {u}")),
                    pool: j.pool.clone(),
                })
                .collect(),
            home: Some(self.home.clone()),
            triggers: self.triggers.clone(),
            max_generations: self.max_generations,
            version: self.version.clone(),
        }
    }

    /// The `agent_ctl` command that deploys this envelope for application `appl`, with
    /// the operator's reference `reference` (see [`crate::control`]).
    pub fn control(&self, appl: &str, reference: &str) -> Control {
        Control {
            agent: self.agent.clone(),
            appl: appl.to_owned(),
            reference: reference.to_owned(),
            command: Command::Deploy(Box::new(self.envelope_body(appl))),
        }
    }

    /// The `agent_ctl` publication that deploys this envelope for application `appl`.
    pub fn publication(&self, appl: &str) -> Result<Publication, InvalidMessage> {
        self.control(appl, "").publication()
    }
}

/// Messages to deploy `deployment`: with composite subscriptions (one per job, and one
/// more per job with an `unless`) and with the equivalent primitive subscriptions (one per
/// atomic part), advertisements counted in both.
pub fn deployment_messages(deployment: &Deployment) -> (usize, usize) {
    let advertisements = deployment.jobs.len();
    let unless = deployment.jobs.iter().filter_map(|j| j.unless.as_ref());
    let composite = deployment.jobs.len() + unless.clone().count() + advertisements;
    let primitive = deployment.jobs.iter().map(|j| j.dependency.atoms().count()).sum::<usize>()
        + unless.map(|u| u.atoms().count()).sum::<usize>()
        + advertisements;
    (composite, primitive)
}
