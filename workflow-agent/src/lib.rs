//! padres-agent: the job agent of padres-rs (DESIGN §8).
//!
//! - [`job`]: one job of one generation run as real processes: its own process group,
//!   `${gen.date}` and `${gen.gid}` substituted, a timeout that kills the whole group,
//!   retries with backoff, output captured to files with a size cap.
//!
//! The agent itself (deployments from `agent_ctl`, dependency subscriptions, `job_status`,
//! the journal) is not built yet: the binary says so.

pub mod job;
