//! `padres-agent`: runs workflow jobs when their dependency subscriptions match.
//!
//! Only the command-line surface and the job runner and the journal (`padres_agent::job`, `::journal`) exist so far: the
//! agent's loop (deployments, dependency subscriptions, `job_status`) is not
//! built yet (see the README's status section). Running it says so and exits non-zero
//! rather than pretending to serve.

use std::process::ExitCode;

use clap::Parser;

/// A padres-rs job agent: receives workflow definitions, runs jobs as real processes when
/// their dependencies are met, and publishes each job's status.
///
/// Not built yet: this binary currently only describes itself. See the README's status
/// section for what exists.
#[derive(Debug, Parser)]
#[command(name = "padres-agent", version)]
struct Args {}

fn main() -> ExitCode {
    let _args = Args::parse();
    eprintln!(
        "padres-agent {}: the job agent is not built yet; only its job runner and journal exist so far",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(2)
}
