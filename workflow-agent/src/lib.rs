//! padres-agent: the job agent of padres-rs (DESIGN §8).
//!
//! - [`job`]: one job of one generation run as real processes: its own process group,
//!   `${gen.date}` and `${gen.gid}` substituted, a timeout that kills the whole group,
//!   retries with backoff, output captured to files with a size cap.
//! - [`journal`]: what ran, in SQLite in the agent's work directory, so that a job runs at
//!   most once per generation across restarts; jobs interrupted by a restart are listed.
//!
//! - [`pool`]: agents' load reports, a member's measure of its load, and the home agent's
//!   view of pool members with the placement policies.
//! - [`trigger`]: when cron triggers fire, and the run made up after a home agent was down.
//! - [`agent`]: the agent's loop: deployments from `agent_ctl`, dependency subscriptions,
//!   jobs run or skipped per generation, `job_status` published.

pub mod agent;
pub mod job;
pub mod journal;
pub mod pool;
pub mod trigger;
