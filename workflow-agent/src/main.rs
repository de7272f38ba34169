//! `padres-agent`: runs workflow jobs when their dependency subscriptions match.
//!
//! It connects to one broker (reconnecting, with its subscriptions re-issued, when the
//! broker restarts) and serves as the agent `--name` ([`padres_agent::agent`]): jobs
//! deployed to it through `agent_ctl` run as processes when their dependencies match, and
//! their statuses are published. Its work directory holds its journal (what ran, so that
//! nothing runs twice per generation) and every job's output.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use padres_agent::agent::{Options, serve};
use padres_client::{Connect, Trust};

/// A padres-rs job agent: receives workflow definitions through `agent_ctl` publications,
/// runs each job as a real process when its dependencies are met in a generation, and
/// publishes the job's status.
///
/// Each of its own jobs runs at most once per generation (the journal in --work-dir
/// survives restarts; a job running when the agent stopped is reported failed, not run
/// again); a pool job may be dispatched again to another member when its member goes
/// silent (docs/pools.md). A job's output is in
/// WORK_DIR/output/APPL/GID/JOB/ATTEMPT.stdout and .stderr (when it wrote any).
#[derive(Debug, Parser)]
#[command(name = "padres-agent", version)]
struct Args {
    /// The agent's name: the `agent` the workflow's jobs name.
    #[arg(long)]
    name: String,
    /// The broker, as quic://HOST:PORT.
    #[arg(long, value_name = "URI", env = "PADRES_BROKER", default_value = "quic://127.0.0.1:7700")]
    broker: String,
    /// The broker's cert.pem or the federation CA. For a broker on this machine it can be
    /// left out: the broker registered its certificate.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// The token proving this agent is the principal --name (the brokers' auth.tokens hold
    /// its hash); without one it connects anonymously, which a broker may refuse.
    #[arg(long, env = "PADRES_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    token: Option<String>,
    /// A client certificate from the federation CA naming this agent (`padres-broker cert
    /// issue --client --name AGENT`), in place of a token; with --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// The client certificate's private key.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Where the journal and the jobs' output go (created if missing); relative working
    /// directories of jobs are taken from here.
    #[arg(long, value_name = "DIR", default_value = "padres-agent")]
    work_dir: PathBuf,
    /// Most jobs running at once.
    #[arg(long, value_name = "N", default_value_t = 8)]
    max_parallel: usize,
    /// Seconds after a generation starts before the first read of its statuses from the
    /// brokers' history stores, to run jobs of its own whose dependencies are met but
    /// whose match was lost (a broker restarted, a pattern moved); then at doubling
    /// intervals up to 32 times this. 0: never.
    #[arg(long, value_name = "SECS", default_value_t = padres_agent::agent::CATCH_UP.as_secs())]
    catch_up: u64,
    /// A pool the agent is a member of (repeat for several): it runs the pool's jobs that
    /// the applications' home agents dispatch to it, with no deployment of its own. It may
    /// join or leave at any time (`padres agents drain NAME`).
    #[arg(long = "pool", value_name = "POOL", value_parser = pool_name)]
    pools: Vec<String>,
    /// Milliseconds between two load reports (`agent_load`: running and queued jobs,
    /// recent queueing delays), which every agent publishes and home agents place pool
    /// jobs by.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    load_period: u64,
    /// As a home agent: load reports a pool member may miss (of its own period) before
    /// this agent considers it gone and dispatches the jobs it runs to another member.
    #[arg(long, value_name = "N", default_value_t = padres_agent::pool::SILENCE)]
    silence: u32,
    /// Jobs the agent takes from pools, running and waiting for a slot, before home agents
    /// stop giving it more (they hold them in their admission queue) [default:
    /// --max-parallel].
    #[arg(long, value_name = "N")]
    capacity: Option<usize>,
    /// Watch pool POOL and advise it to grow or shrink (`pool_advice` publications): a
    /// scale-up when every member has been at its limit for --over-for seconds (or there
    /// are fewer than --min-members), a scale-down of the least loaded member when every
    /// member has been under --under-load percent of its capacity for --under-for seconds.
    #[arg(long, value_name = "POOL", value_parser = pool_name)]
    provision: Option<String>,
    /// With --provision: a command run (by `sh -c`, in the work directory) on a scale-up
    /// advice, e.g. one that starts `padres-agent --pool POOL`; PADRES_POOL, PADRES_ADVICE
    /// and PADRES_MEMBERS are set. Its output goes to WORK_DIR/provision.log.
    #[arg(long, value_name = "CMD", requires = "provision")]
    scale_up: Option<String>,
    /// With --provision: as --scale-up, on a scale-down advice, e.g. `padres agents drain
    /// "$PADRES_MEMBER"` (PADRES_MEMBER also names the member to stop).
    #[arg(long, value_name = "CMD", requires = "provision")]
    scale_down: Option<String>,
    /// With --provision: seconds every member stays at its limit before a scale-up.
    #[arg(long, value_name = "SECS", default_value_t = 60.0, requires = "provision")]
    over_for: f64,
    /// With --provision: seconds every member stays under --under-load before a
    /// scale-down.
    #[arg(long, value_name = "SECS", default_value_t = 300.0, requires = "provision")]
    under_for: f64,
    /// With --provision: percent of its capacity a member's jobs stay under for a
    /// scale-down.
    #[arg(long, value_name = "PERCENT", default_value_t = 50.0, requires = "provision")]
    under_load: f64,
    /// With --provision: fewest members of the pool.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "provision")]
    min_members: usize,
    /// With --provision: most members of the pool.
    #[arg(long, value_name = "N", default_value_t = 10, requires = "provision")]
    max_members: usize,
}

/// A pool's name, as `--pool` and `--provision` take it.
fn pool_name(name: &str) -> Result<String, String> {
    padres_lang::Name::new(name)
        .map(|_| name.to_owned())
        .map_err(|_| "a pool name is an identifier (letters, digits, _ . -)".to_owned())
}

async fn run(args: Args) -> Result<(), String> {
    let seconds = |name: &str, secs: f64| {
        if (0.0..1e9).contains(&secs) {
            Ok(Duration::from_secs_f64(secs))
        } else {
            Err(format!("{name} {secs}: seconds, at least 0"))
        }
    };
    let provision = match &args.provision {
        Some(pool) => {
            if !(0.0..=100.0).contains(&args.under_load) || args.min_members > args.max_members {
                return Err("--under-load is a percent (0 to 100), and --min-members at most --max-members"
                    .to_owned());
            }
            Some(padres_agent::pool::Provisioning {
                watch: padres_agent::pool::Provision {
                    pool: pool.clone(),
                    over_for: seconds("--over-for", args.over_for)?,
                    under_for: seconds("--under-for", args.under_for)?,
                    under: args.under_load / 100.0,
                    min: args.min_members,
                    max: args.max_members,
                },
                scale_up: args.scale_up.clone(),
                scale_down: args.scale_down.clone(),
            })
        }
        None => None,
    };
    if args.load_period == 0 || args.silence == 0 {
        return Err("--load-period and --silence must be at least 1".to_owned());
    }
    let mut connect = Connect::uri(&args.broker)
        .await
        .map_err(|e| format!("--broker: {e}"))?
        .name(&args.name)
        .reconnect(true);
    if let Some(ca) = &args.ca {
        connect = connect.trust(Trust::Certificates(vec![ca.clone()]));
    }
    if let Some(token) = &args.token {
        connect = connect.token(token);
    }
    if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
        connect = connect.certificate(cert, key).map_err(|e| format!("--cert/--key: {e}"))?;
    }
    let client = connect.connect().await.map_err(|e| format!("cannot connect to {}: {e}", args.broker))?;
    tracing::info!("agent {} connected to {}", args.name, args.broker);
    let options = Options {
        max_parallel: args.max_parallel,
        catch_up: Duration::from_secs(args.catch_up),
        pools: args.pools,
        load_period: Duration::from_millis(args.load_period),
        silence: args.silence,
        capacity: args.capacity,
        provision,
        ..Options::new(&args.name, args.work_dir)
    };
    serve(client, options).await.map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("padres-agent: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("padres-agent: {e}");
            ExitCode::FAILURE
        }
    }
}
