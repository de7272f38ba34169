//! `padres`: the padres-rs command-line tool.

use std::io::{self, BufRead};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use padres_client::check::{Checked, check_line, issuing_parser, render_error};
use padres_client::{Client, ClientError, Connect, Notification, Trust};
use padres_lang::Message;

/// Prints a line on standard output; when the reader has gone (`padres sub | head`),
/// ends quietly as other command-line tools do, rather than panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

mod agents;
mod demo;
mod place;
mod workflow;

fn write_out(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = io::stdout().lock();
    if let Err(error) = stdout.write_fmt(line).and_then(|()| stdout.write_all(b"\n")) {
        if error.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("padres: standard output: {error}");
        std::process::exit(1);
    }
}

/// The padres-rs command-line tool: publish, subscribe, script a client, inspect brokers,
/// check messages, run and follow workflows, and run the demo.
///
/// Messages use the PADRES text syntax, e.g. subscription [class,eq,'stock'],[price,>,100]
/// and publication [class,'stock'],[price,120] (docs/language.md); `padres check` validates
/// them.
///
/// Every command that talks to a broker takes --broker quic://HOST:PORT (default
/// PADRES_BROKER, or quic://127.0.0.1:7700) and --ca FILE: the broker's cert.pem or the
/// federation CA. For a broker on this machine --ca can be left out: the broker registered
/// its certificate locally and it is verified against that.
#[derive(Debug, Parser)]
#[command(name = "padres", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate messages and print each in canonical form
    ///
    /// Each message is one line in command form:
    ///   a [class,eq,'stock'],[price,>,0]                   advertisement
    ///   s [class,eq,'stock'],[price,>,100]                 subscription
    ///   cs {[class,eq,a],[k,eq,$S$x]}&{[class,eq,b],[k,eq,$S$x]}   composite subscription
    ///   p [class,'stock'],[price,120]                      publication
    ///   unsub B1/7     unadv B1/3
    /// Messages come from the arguments, or from standard input (one per line; blank lines
    /// and lines starting with '#' are skipped). Exits 1 if any message is invalid. In a
    /// shell, quote a message holding $ with single quotes.
    #[command(verbatim_doc_comment)]
    #[command(display_order = 1)]
    Check {
        /// Messages to check; read standard input when none are given.
        messages: Vec<String>,
    },
    /// Subscribe and print matching publications (live, or stored ones first with --since)
    ///
    /// Prints them as they arrive, until --count or Ctrl-C. A composite subscription (a
    /// pattern: in braces, or Times(...)) prints one line per match: the publications
    /// used, each after its leaf number, e.g. "[0] [class,'a']  [1] [class,'b']".
    ///
    /// With --since, the stored publications from then on come first (from the brokers'
    /// history stores, oldest first), then a line "end of history: N stored publications"
    /// on stderr (in --json, an {"type":"end_of_history",...} object), then live ones:
    ///   padres sub --since 1h "[class,eq,'job_status'],[appl,eq,'payroll'],[status,eq,'FAILED']"
    /// With --until too, it exits after the stored ones, or, if --until is still ahead,
    /// after the live ones up to then.
    #[command(verbatim_doc_comment)]
    #[command(display_order = 3)]
    Sub {
        /// The subscription, e.g. "[class,eq,'stock'],[price,>,100]", or a composite one
        /// in single quotes (so that the shell leaves $ alone), e.g.
        /// '{[class,eq,a],[k,eq,$S$k]} & {[class,eq,b],[k,eq,$S$k]} within 10m'.
        subscription: String,
        /// Stop after this many notifications.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Print one JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        /// Start in the past: a duration ago (1h, 30m, 7d), now-DURATION, epoch
        /// milliseconds, or an RFC 3339 timestamp. Atomic subscriptions only: in a
        /// pattern, bound a leaf with [time,>=,'now-1h'].
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// End there (the forms of --since, where a bare duration is in the past: now+10m
        /// for a future end): exit once the stored publications are in and, if it is still
        /// ahead, once that time has passed (and a second more, for publications on their
        /// way). It must be after --since.
        #[arg(long, value_name = "WHEN")]
        until: Option<String>,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Advertise, and hold the advertisement until Ctrl-C or --hold SECS pass.
    ///
    /// A broker withdraws a client's advertisements when it disconnects, and an
    /// advertisement lets only its own client publish: it does not let another (`padres
    /// pub`) publish; for that, `padres pub --advertise`.
    #[command(display_order = 4)]
    Adv {
        /// The advertisement, e.g. "[class,eq,'stock'],[price,>,0]".
        advertisement: String,
        /// Seconds to hold it; forever when left out.
        #[arg(long, value_name = "SECS")]
        hold: Option<f64>,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// A scripted client: commands on standard input, one JSON object per line out
    ///
    /// Commands, one per line:
    ///   a ADV          advertise              s SUB          subscribe
    ///   cs COMPOSITE   composite subscribe    p PUB          publish
    ///   unsub ID       unsubscribe            unadv ID       unadvertise
    ///   sleep MILLIS   wait, printing notifications meanwhile
    ///   quit, exit     end (so does the end of input)
    /// Output lines:
    ///   {"type":"reply","op":"s","id":"B1/1","line":2}
    ///   {"type":"notification","sub":"B1/1","subs":["B1/1"],"attrs":{"class":"stock","price":100}}
    ///   {"type":"notification","sub":"B1/2","pubs":[{"leaf":0,"attrs":{...}},{"leaf":1,"attrs":{...}}]}
    ///   {"type":"end_of_history","sub":"B1/1","count":12,"missing":[],"truncated":false}
    ///   {"type":"error","line":3,"message":"..."}
    /// Blank lines and lines starting with '#' are skipped; an error answers its line and
    /// the session goes on. Example:
    ///   printf "s [class,eq,'stock']\nsleep 5000\n" | padres session
    #[command(verbatim_doc_comment)]
    #[command(display_order = 5)]
    Session {
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Workflows: check and translate definitions (XML), deploy them to agents, trigger
    /// generations, follow them and act on their jobs.
    #[command(display_order = 8)]
    Workflow {
        #[command(subcommand)]
        command: WorkflowCommand,
    },
    /// Run the payroll workflow on a local federation, and check what it did.
    ///
    /// Brokers in a chain on loopback ports, with security on (a federation CA, tokens and
    /// permits, in DIR/security) and keeping the workflow classes' history, and three
    /// agents running the jobs of examples/payroll.xml as shell scripts. It deploys the
    /// workflow, triggers a Friday and a Wednesday generation at once, shows them live, and
    /// ends with a summary checked against the dependencies and calendar, and a check that
    /// what the permits forbid is refused. Exits 0 if every check holds.
    #[command(display_order = 10)]
    Demo {
        /// Where the brokers', agents' and jobs' files go (must be new or empty) [default:
        /// a new directory under the system's temporary directory].
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Brokers in the chain (3 to 5).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(3..=5))]
        brokers: u8,
        /// Keep the federation and agents running after the summary, until Ctrl-C, to try
        /// `padres workflow` commands on it, as the operator: --name operator, with
        /// PADRES_TOKEN from DIR/security/operator.token (the summary prints the commands).
        #[arg(long)]
        stay: bool,
    },
    /// The federation's agents and their load; `padres agents drain NAME` drains one.
    ///
    /// From their load reports (agent_load, which every agent publishes every second or
    /// so): state (up, leaving, left, or silent when it missed 3 reports), pools,
    /// capacity, running and queued jobs, recent queueing delays and arrivals, and its
    /// broker. Reads the reports stored since --since (brokers keep them with
    /// `padres-broker --workflows`) and listens 1.5 s for live ones.
    #[command(args_conflicts_with_subcommands = true)]
    #[command(display_order = 9)]
    Agents {
        #[command(subcommand)]
        command: Option<AgentsCommand>,
        /// How far back to read reports: a duration ago (1h, 30m), now-DURATION, epoch
        /// milliseconds or an RFC 3339 time [default: 10m].
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Inspect a broker (counters, routing tables), or drop one of its links.
    #[command(display_order = 7)]
    Broker {
        #[command(subcommand)]
        command: BrokerCommand,
    },
    /// Publish publications (advertising first with --advertise).
    #[command(display_order = 2)]
    Pub {
        /// Publications, e.g. "[class,'stock'],[price,120]".
        #[arg(required = true)]
        publications: Vec<String>,
        /// Advertise this first, e.g. "[class,eq,'stock'],[price,isPresent,0]": a broker
        /// accepts a client's publication only if it conforms to one of that client's own
        /// advertisements.
        #[arg(long, value_name = "ADVERTISEMENT")]
        advertise: Option<String>,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Wait until the broker answers; exit 0 once it does, 1 if it does not in time.
    #[command(display_order = 6)]
    Ping {
        /// How long to keep trying (0: one attempt).
        #[arg(long, value_name = "SECS", default_value_t = 0.0)]
        wait: f64,
        #[command(flatten)]
        broker: BrokerArgs,
    },
}

#[derive(Debug, Subcommand)]
enum WorkflowCommand {
    /// Validate a definition; every problem is printed as FILE:LINE:COLUMN: message.
    Check {
        /// The XML file.
        file: PathBuf,
    },
    /// Print the agent_ctl envelopes a definition is deployed as (one publication per
    /// agent, in text syntax), and with --date, which jobs run in that day's generation.
    Translate {
        /// The XML file.
        file: PathBuf,
        /// A generation date, YYYY-MM-DD: list the jobs that run and those skipped.
        #[arg(long, value_name = "YYYY-MM-DD")]
        date: Option<String>,
    },
    /// Deploy a definition: one agent_ctl command per agent it names, sent again until
    /// every agent has answered. Exits 0 once all have deployed, 1 naming those that
    /// refused (with their reasons) or did not answer in time. Deploying an application
    /// again replaces it on each agent; an unchanged agent's part is left as it is, and
    /// agents the new version no longer names (found in the brokers' history of
    /// agent_ctl) are sent an undeploy.
    Deploy {
        /// The XML file.
        file: PathBuf,
        /// How long to wait for the agents' answers.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        timeout: u64,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Withdraw an application from every agent it is deployed on (read from the brokers'
    /// history of agent_ctl).
    Undeploy {
        /// The application.
        appl: String,
        /// How long to wait for the agents' answers.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        timeout: u64,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Start a generation: its home agent (the one running APPL_START, found in the
    /// brokers' history of agent_ctl, or --agent) publishes its trigger; prints its gid.
    /// Waits up to 30 s for the agent's answer.
    Trigger {
        /// The application.
        appl: String,
        /// The generation's run day (its jobs' run terms are read against it) [default:
        /// today in UTC, not in the application's time zone].
        #[arg(long, value_name = "YYYY-MM-DD")]
        date: Option<String>,
        /// The generation's id [default: the date and a unique suffix].
        #[arg(long)]
        gid: Option<String>,
        /// The application's home agent, if the brokers keep no history of agent_ctl.
        #[arg(long)]
        agent: Option<String>,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Every job's state in each generation since --since (from the brokers' history of
    /// agent_ctl, trigger and job_status).
    Status {
        /// The application.
        appl: String,
        /// Only this generation, whenever it started (--since is then ignored).
        #[arg(long)]
        gid: Option<String>,
        /// Generations with a status or trigger since then: a duration ago (1h, 7d),
        /// now-DURATION, epoch milliseconds or an RFC 3339 time.
        #[arg(long, value_name = "WHEN", default_value = "1d")]
        since: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Follow generations live: a table redrawn in place on a terminal, one line per status
    /// otherwise. With --gid, exits when that generation ends; without, runs until Ctrl-C.
    Watch {
        /// The application.
        appl: String,
        /// Only this generation, whenever it started (--since is then ignored).
        #[arg(long)]
        gid: Option<String>,
        /// Start from generations seen since then (the forms of status --since).
        #[arg(long, value_name = "WHEN", default_value = "1h")]
        since: String,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Wait for a generation to end: exit 0 when it succeeded, 1 when it is stuck (a job
    /// failed, or nothing can proceed) or on an error, 2 when --timeout passes.
    Wait {
        /// The application.
        appl: String,
        /// The generation.
        #[arg(long)]
        gid: String,
        /// Longest wait, counted once the history is read [default: none].
        #[arg(long, value_name = "SECS")]
        timeout: Option<f64>,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Past generations and their outcomes, one line each.
    History {
        /// The application.
        appl: String,
        /// Generations since then (the forms of status --since).
        #[arg(long, value_name = "WHEN", default_value = "7d")]
        since: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Locality advice: per job, the broker where it would put the least traffic on links.
    ///
    /// For each job, the broker whose agents would put the least traffic on the overlay's
    /// links, and what moving the job there would save a generation (the Bauer–Dadam cost
    /// model, docs/workflows.md). Reads the brokers' reports (their
    /// links and per-class link counters), the agents' load reports and the history of
    /// the application's statuses; moves nothing.
    Place {
        /// The application.
        appl: String,
        /// Count how often each job publishes over generations since then.
        #[arg(long, value_name = "WHEN", default_value = "7d")]
        since: String,
        /// Longest wait for every broker's report (they come every
        /// --monitor-interval-ms, monitor_interval_ms in a configuration, 5 s by default).
        #[arg(long, value_name = "SECS", default_value_t = 12)]
        wait: u64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Run a job of a generation that failed or timed out again, on its agent (a pool
    /// job: dispatched again by its home agent). Waits up to 30 s for the agent's answer.
    Rerun {
        #[command(flatten)]
        target: GenerationJob,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Mark a job of a generation succeeded without running it (published with the reason
    /// "bypassed"), so that its successors proceed. Waits up to 30 s for the agent's
    /// answer.
    Bypass {
        #[command(flatten)]
        target: GenerationJob,
        #[command(flatten)]
        broker: BrokerArgs,
    },
}

/// A job of a generation of an application.
#[derive(Debug, Args)]
struct GenerationJob {
    /// The application.
    appl: String,
    /// The generation.
    #[arg(long)]
    gid: String,
    /// The job.
    #[arg(long)]
    job: String,
}

#[derive(Debug, Subcommand)]
enum AgentsCommand {
    /// Drain agent NAME: no new pool jobs go to it; it finishes those it has, reports
    /// `left` and exits. Returns once the agent has taken the command.
    Drain {
        /// The agent.
        #[arg(value_name = "NAME")]
        agent: String,
        /// Seconds to wait for the agent's answer.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        timeout: u64,
        #[command(flatten)]
        broker: BrokerArgs,
    },
}

#[derive(Debug, Subcommand)]
enum BrokerCommand {
    /// Counters: clients, neighbours, table sizes, messages in and out.
    Stats {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Neighbours and routing tables: advertisements (SRT), subscriptions (PRT) and
    /// composite subscriptions, each with the hop it came from (and, for subscriptions,
    /// the brokers it went to).
    Routes {
        /// Most rows listed per table (the broker lists at most 10,000).
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: u32,
        /// Rows skipped in each table, of those the filter selects (sorted by id).
        #[arg(long, value_name = "K", default_value_t = 0)]
        offset: u32,
        /// Only rows whose id, text, origin or destinations contain TEXT (ASCII case
        /// ignored; at most 256 bytes), e.g. `--filter job_status` or `--filter "broker B2"`.
        #[arg(long, value_name = "TEXT", default_value = "", hide_default_value = true, value_parser = short_filter)]
        filter: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Fault injection: make the broker close its link to a neighbour at once.
    ///
    /// As a broken network would: what is queued on it is not written; with --for MS the
    /// link stays down that long. Within the brokers' link-session window
    /// (--link-window-ms, link_sessions.window_ms in a configuration, 10 s by default)
    /// nothing is lost when it returns. The broker must run with --allow-drop-link. Exits 1
    /// if no link to that neighbour was up.
    DropLink {
        /// The neighbour's name.
        peer: String,
        /// How long the link stays down (milliseconds, at most an hour): the broker neither
        /// dials the neighbour nor accepts its link until then. 0 lifts an earlier pause.
        #[arg(long = "for", value_name = "MS", default_value_t = 0)]
        down_ms: u32,
        #[command(flatten)]
        broker: BrokerArgs,
    },
}

/// Where the broker is and how to trust it.
#[derive(Debug, Args)]
pub(crate) struct BrokerArgs {
    /// The broker, quic://HOST:PORT.
    #[arg(long, value_name = "URI", env = "PADRES_BROKER", default_value = "quic://127.0.0.1:7700")]
    pub(crate) broker: String,
    /// Certificate (PEM) to trust: the broker's cert.pem or the federation CA. Left out,
    /// a broker on this machine is trusted through the certificate it registered locally.
    #[arg(long, value_name = "FILE")]
    pub(crate) ca: Option<PathBuf>,
    /// Do not verify the broker's certificate. DEVELOPMENT ONLY: anyone can pose as the
    /// broker.
    #[arg(long, conflicts_with = "ca")]
    pub(crate) insecure: bool,
    /// This client's name, as the broker logs it; with --token, the principal it claims.
    #[arg(long, default_value = "padres")]
    pub(crate) name: String,
    /// The token proving this client is the principal --name (the broker's auth.tokens
    /// holds its hash). Without one the client is anonymous, which a broker may refuse.
    /// Refused with --insecure, even from PADRES_TOKEN: a token is never sent to a broker
    /// whose certificate is not verified.
    #[arg(
        long,
        env = "PADRES_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        conflicts_with = "insecure"
    )]
    pub(crate) token: Option<String>,
    /// A client certificate from the federation CA naming this client's principal
    /// (`padres-broker cert issue --client`), in place of a token; with --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub(crate) cert: Option<PathBuf>,
    /// The client certificate's private key.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub(crate) key: Option<PathBuf>,
}

impl BrokerArgs {
    pub(crate) async fn connect(&self) -> Result<Client, String> {
        let mut connect =
            Connect::uri(&self.broker).await.map_err(|e| format!("--broker: {e}"))?.name(&self.name);
        if self.insecure {
            eprintln!(
                "padres: WARNING: --insecure: the broker's certificate is NOT verified (development only)"
            );
            connect = connect.trust(Trust::Insecure);
        } else if let Some(ca) = &self.ca {
            connect = connect.trust(Trust::Certificates(vec![ca.clone()]));
        }
        if let Some(token) = &self.token {
            connect = connect.token(token);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            connect = connect.certificate(cert, key).map_err(|e| format!("--cert/--key: {e}"))?;
        }
        connect.connect().await.map_err(|e| e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = || tokio::runtime::Builder::new_multi_thread().enable_all().build();
    let outcome = match cli.command {
        Command::Check { messages } => return check(messages),
        Command::Sub { subscription, count, json, since, until, broker } => runtime()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(sub(&subscription, count, json, (since, until), &broker))),
        Command::Pub { publications, advertise, broker } => runtime()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(publish(&publications, advertise.as_deref(), &broker))),
        Command::Ping { wait, broker } => {
            runtime().map_err(|e| e.to_string()).and_then(|rt| rt.block_on(ping(wait, &broker)))
        }
        Command::Adv { advertisement, hold, broker } => runtime()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(adv(&advertisement, hold, &broker))),
        Command::Session { broker } => runtime().map_err(|e| e.to_string()).and_then(|rt| {
            rt.block_on(async {
                let client = broker.connect().await?;
                match padres_client::session::run(client).await {
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                    other => other.map_err(|e| format!("session: {e}")),
                }
            })
        }),
        Command::Demo { dir, brokers, stay } => {
            let dir = dir.unwrap_or_else(|| {
                let stamp = padres_client::check::now().millis();
                std::env::temp_dir().join(format!("padres-demo-{}-{stamp}", std::process::id()))
            });
            match runtime()
                .map_err(|e| e.to_string())
                .and_then(|rt| rt.block_on(demo::run(dir, usize::from(brokers), stay)))
            {
                Ok(code) => return code,
                Err(error) => Err(error),
            }
        }
        Command::Workflow { command } => match workflow(command) {
            Ok(code) => return code,
            Err(error) => Err(error),
        },
        Command::Agents { command, since, json, broker } => {
            runtime().map_err(|e| e.to_string()).and_then(|rt| {
                rt.block_on(async {
                    match command {
                        Some(AgentsCommand::Drain { agent, timeout, broker }) => {
                            agents::drain(&agent, Duration::from_secs(timeout), &broker).await
                        }
                        None => agents::list(since.as_deref(), json, &broker).await,
                    }
                })
            })
        }
        Command::Broker { command } => {
            runtime().map_err(|e| e.to_string()).and_then(|rt| rt.block_on(inspect(command)))
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("padres: {error}");
            ExitCode::from(1)
        }
    }
}

/// Parses a message argument (`command` is `a`, `s` or `p`) before anything connects, so a
/// typo is reported as one, with the column, whether or not a broker is reachable.
fn message_arg(command: &str, text: &str) -> Result<Message, String> {
    issuing_parser().message(&format!("{command} {text}")).map_err(|e| format!("{text}: {e}"))
}

/// How long after an `--until` in the future `sub` still waits for publications stamped
/// before it that are on their way.
const UNTIL_IN_FLIGHT: Duration = Duration::from_secs(1);

/// How long `sub` waits for the end-of-history marker once `--until` has passed (from the
/// start, if it had already): a broker whose clock is behind this one's may see the range
/// as wholly ahead and send none. Longer than any sensible query timeout.
const MARKER_GRACE: Duration = Duration::from_secs(60);

/// The `--since` and `--until` of `padres sub`, resolved when it starts.
#[derive(Clone, Copy, Debug)]
struct TimeRange {
    since: Option<padres_lang::Timestamp>,
    until: Option<padres_lang::Timestamp>,
    now: padres_lang::Timestamp,
}

impl TimeRange {
    /// Resolves the flags at `now`; a range with nothing in it is an error, not a
    /// subscription that can never be answered.
    fn parse(since: Option<&str>, until: Option<&str>, now: padres_lang::Timestamp) -> Result<Self, String> {
        let bound = |flag: &str, when: Option<&str>| {
            when.map(|w| padres_lang::time::parse_bound(w, now).map_err(|e| format!("{flag}: {e}")))
                .transpose()
        };
        let range = Self { since: bound("--since", since)?, until: bound("--until", until)?, now };
        if let (Some(from), Some(to)) = (range.since, range.until)
            && to <= from
        {
            return Err(format!(
                "--until {} is not after --since {}: the range is empty (a duration such as 2h means that long ago)",
                to.to_rfc3339(),
                from.to_rfc3339()
            ));
        }
        Ok(range)
    }

    /// `subscription` bounded by the range.
    fn bound(&self, subscription: &str) -> String {
        let mut text = subscription.trim().to_owned();
        for (at, op) in [(self.since, ">="), (self.until, "<")] {
            if let Some(at) = at {
                text.push_str(&format!(",[time,{op},{}]", at.to_rfc3339()));
            }
        }
        text
    }

    /// Whether the brokers answer from their stores (and end with a marker): the range
    /// starts before now.
    fn reaches_the_past(&self) -> bool {
        (self.since.is_some() || self.until.is_some()) && self.since.is_none_or(|s| s < self.now)
    }

    /// How long from now until `--until` has passed, with time for what is in flight; `None`
    /// when there is no `--until` or it has passed.
    fn live_for(&self) -> Option<Duration> {
        let ahead = self.until?.millis().checked_sub(self.now.millis()).filter(|&ms| ms > 0)?;
        Some(Duration::from_millis(u64::try_from(ahead).unwrap_or(u64::MAX)) + UNTIL_IN_FLIGHT)
    }
}

async fn sub(
    subscription: &str,
    count: Option<u64>,
    json: bool,
    (since, until): (Option<String>, Option<String>),
    broker: &BrokerArgs,
) -> Result<(), String> {
    // A pattern (`{…}&{…}`, `Times(…)`) is a composite subscription.
    let composite =
        subscription.trim_start().starts_with('{') || subscription.trim_start().starts_with("Times(");
    if composite && (since.is_some() || until.is_some()) {
        return Err(
            "--since and --until take an atomic subscription; bound a pattern's leaves with [time,>=,...]"
                .into(),
        );
    }
    let range = TimeRange::parse(since.as_deref(), until.as_deref(), padres_client::check::now())?;
    let subscription = range.bound(subscription);
    let message = message_arg(if composite { "cs" } else { "s" }, &subscription)?;
    let mut client = broker.connect().await?;
    // With --until: exit once the stored publications are in (a range that starts in the
    // future has none) and the end of the range has passed.
    let mut history_in = !range.reaches_the_past();
    let ends = until.is_some();
    let deadline = range.live_for().map(|d| tokio::time::Instant::now() + d);
    let mut ended = deadline.is_none();
    let id = client.request(message).await.map_err(|e| e.to_string())?;
    if let Some(id) = id {
        eprintln!("subscribed as {id}");
    }
    let mut seen = 0;
    let grace = ends.then(|| deadline.unwrap_or_else(tokio::time::Instant::now) + MARKER_GRACE);
    while count.is_none_or(|n| seen < n) {
        if ends && history_in && ended {
            return Ok(());
        }
        let notification = tokio::select! {
            next = client.next_notification() => next,
            () = sleep_until(deadline), if !ended => {
                ended = true;
                continue;
            }
            () = sleep_until(grace), if grace.is_some() && !history_in => {
                eprintln!("no end-of-history marker came ({}s after --until); the brokers' clocks may differ from this one's", MARKER_GRACE.as_secs());
                return Ok(());
            }
        };
        let Some(notification) = notification else {
            return Err("the broker closed the connection".to_owned());
        };
        let end_of_history = matches!(notification, Notification::EndOfHistory { .. });
        if json {
            out!("{}", padres_client::json::notification(&notification));
        } else {
            match notification {
                Notification::Publication { publication, .. } => out!("{publication}"),
                Notification::Composite { pubs, .. } => {
                    let parts: Vec<String> = pubs.iter().map(|(leaf, p)| format!("[{leaf}] {p}")).collect();
                    out!("{}", parts.join("  "));
                }
                Notification::EndOfHistory { count, ref missing, truncated, .. } => {
                    let mut line = format!("end of history: {count} stored publications");
                    if truncated {
                        line.push_str(" (more were stored: the broker's history_store.max_results)");
                    }
                    if !missing.is_empty() {
                        let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
                        line.push_str(&format!("; no answer from the stores at {}", names.join(", ")));
                    }
                    eprintln!("{line}");
                }
            }
        }
        if end_of_history {
            history_in = true;
            continue;
        }
        seen += 1;
    }
    Ok(())
}

/// Sleeps until `deadline`, or for ever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn workflow(command: WorkflowCommand) -> Result<ExitCode, String> {
    use workflow::{Act, act, deploy, history, read_workflow, status, trigger, undeploy, wait, watch};
    let runtime =
        || tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string());
    let done = |r: Result<(), String>| r.map(|()| ExitCode::SUCCESS);
    match command {
        WorkflowCommand::Check { file } => {
            let app = read_workflow(&file)?;
            out!("{}: application {} with {} jobs is valid", file.display(), app.name, app.jobs.len());
        }
        WorkflowCommand::Translate { file, date } => {
            let app = read_workflow(&file)?;
            if let Some(date) = date {
                let day: chrono::NaiveDate =
                    date.parse().map_err(|_| format!("--date {date}: expected YYYY-MM-DD"))?;
                let (runs, skipped): (Vec<_>, Vec<_>) =
                    app.jobs.iter().partition(|j| j.schedule.runs_on(day, &app.calendar));
                let names = |jobs: &[&padres_workflow::Job]| {
                    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
                    if names.is_empty() { "none".to_owned() } else { names.join(" ") }
                };
                let (runs, skipped) = (names(&runs), names(&skipped));
                out!("# {date} ({}): runs {runs}; skipped {skipped}", day.format("%A"));
            }
            let deployment = padres_workflow::translate(&app).map_err(|e| e.to_string())?;
            for envelope in &deployment.envelopes {
                let publication = envelope.publication(&deployment.appl).map_err(|e| e.to_string())?;
                out!("{publication}");
            }
        }
        WorkflowCommand::Deploy { file, timeout, broker } => {
            return done(runtime()?.block_on(deploy(&file, Duration::from_secs(timeout), &broker)));
        }
        WorkflowCommand::Undeploy { appl, timeout, broker } => {
            return done(runtime()?.block_on(undeploy(&appl, Duration::from_secs(timeout), &broker)));
        }
        WorkflowCommand::Trigger { appl, date, gid, agent, broker } => {
            let gid = runtime()?.block_on(trigger(
                &appl,
                date.as_deref(),
                gid.as_deref(),
                agent.as_deref(),
                &broker,
            ))?;
            out!("{gid}");
        }
        WorkflowCommand::Status { appl, gid, since, json, broker } => {
            return done(runtime()?.block_on(status(&appl, gid.as_deref(), Some(&since), json, &broker)));
        }
        WorkflowCommand::Watch { appl, gid, since, broker } => {
            return done(runtime()?.block_on(watch(&appl, gid.as_deref(), Some(&since), &broker)));
        }
        WorkflowCommand::Wait { appl, gid, timeout, broker } => {
            return runtime()?.block_on(wait(&appl, &gid, timeout, &broker));
        }
        WorkflowCommand::History { appl, since, json, broker } => {
            return done(runtime()?.block_on(history(&appl, Some(&since), json, &broker)));
        }
        WorkflowCommand::Rerun { target: t, broker } => {
            return done(runtime()?.block_on(act(Act::Rerun, &t.appl, &t.gid, &t.job, &broker)));
        }
        WorkflowCommand::Bypass { target: t, broker } => {
            return done(runtime()?.block_on(act(Act::Bypass, &t.appl, &t.gid, &t.job, &broker)));
        }
        WorkflowCommand::Place { appl, since, wait, json, broker } => {
            let wait = Duration::from_secs(wait.max(1));
            return done(runtime()?.block_on(place::place(&appl, Some(&since), wait, json, &broker)));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn adv(advertisement: &str, hold: Option<f64>, broker: &BrokerArgs) -> Result<(), String> {
    let message = message_arg("a", advertisement)?;
    let client = broker.connect().await?;
    let id = client.request(message).await.map_err(|e| format!("advertisement refused: {e}"))?;
    if let Some(id) = id {
        out!("advertised as {id}");
    }
    match hold {
        Some(secs) => tokio::time::sleep(Duration::from_secs_f64(secs.max(0.0))).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    Ok(())
}

async fn inspect(command: BrokerCommand) -> Result<(), String> {
    match command {
        BrokerCommand::Stats { json, broker } => {
            let stats = broker.connect().await?.stats().await.map_err(|e| e.to_string())?;
            if json {
                out!("{}", serde_json::to_string(&stats).map_err(|e| e.to_string())?);
            } else {
                let neighbours: Vec<String> = stats.neighbours.iter().map(ToString::to_string).collect();
                out!("broker               {}", stats.broker);
                out!("uptime               {:.1} s", stats.uptime_ms as f64 / 1000.0);
                out!("clients              {}", stats.clients);
                out!("connections accepted {}", stats.connections);
                out!("neighbours           {}", neighbours.join(" "));
                out!("advertisements       {}", stats.advertisements);
                out!("subscriptions        {}", stats.subscriptions);
                out!("client requests      {}", stats.client_requests);
                out!("publications in      {}", stats.publications_in);
                out!("notifications out    {}", stats.notifications_out);
                out!("broker messages in   {}", stats.broker_messages_in);
                out!("broker messages out  {}", stats.broker_messages_out);
                out!("slow clients dropped {}", stats.slow_clients_dropped);
                out!("broker links refused {}", stats.links_refused);
                out!("clients refused (credentials) {}", stats.clients_refused);
                out!("requests denied (permissions) {}", stats.permission_denials);
                out!("requests answered before they settled (deadline) {}", stats.settle_timeouts);
                out!("broker links cut (too slow) {}", stats.links_cut);
                out!(
                    "link sessions: resumed {}, messages sent on return {}, duplicates dropped {}, expired {}",
                    stats.link_sessions_resumed,
                    stats.link_messages_resent,
                    stats.link_duplicates_dropped,
                    stats.link_sessions_expired
                );
                out!(
                    "restarted neighbours: {}, publications kept for them and sent {}, passed already and dropped {}",
                    stats.neighbour_restarts,
                    stats.restart_publications_sent,
                    stats.restart_duplicates_dropped
                );
                out!(
                    "client sessions: resumed {}, frames sent on return {}, expired {}",
                    stats.client_sessions_resumed,
                    stats.client_frames_resent,
                    stats.client_sessions_expired
                );
                out!("composite subscriptions {}", stats.composites);
                out!("composite detectors  {}", stats.detectors);
                out!(
                    "partial matches      {} ({} of {} bytes)",
                    stats.partial_matches,
                    stats.partial_match_bytes,
                    stats.partial_match_bytes_cap
                );
                out!("composite matches    {}", stats.composite_matches);
                out!(
                    "partial matches dropped: evicted {}, expired {}, ended {}; pairs dropped {}",
                    stats.partials_evicted,
                    stats.partials_expired,
                    stats.partials_ended,
                    stats.pairs_dropped
                );
                out!(
                    "history store: stored {}, dropped (queue full) {}, failed {}, removed (retention) {}, queued {}, rows {}",
                    stats.history_stored,
                    stats.history_dropped,
                    stats.history_failed,
                    stats.history_removed,
                    stats.history_queued,
                    stats.history_rows
                );
                if !stats.link_traffic.is_empty() {
                    out!("sent to neighbours, per class:");
                }
                for row in &stats.link_traffic {
                    out!(
                        "  {:<12} {:<24} {:>10} messages {:>14} bytes",
                        row.peer,
                        row.class,
                        row.messages,
                        row.bytes
                    );
                }
            }
        }
        BrokerCommand::Routes { limit, offset, filter, json, broker } => {
            let routes = broker
                .connect()
                .await?
                .routes_page(limit, offset, &filter)
                .await
                .map_err(|e| e.to_string())?;
            if json {
                let rows = |entries: &[padres_lang::wire::RouteEntry]| -> Vec<serde_json::Value> {
                    entries
                        .iter()
                        .map(|e| {
                            let to: Vec<String> = e.to.iter().map(ToString::to_string).collect();
                            serde_json::json!({ "id": e.id.to_string(), "text": e.text, "from": e.from, "to": to })
                        })
                        .collect()
                };
                let neighbours: Vec<String> = routes.neighbours.iter().map(ToString::to_string).collect();
                let object = serde_json::json!({
                    "broker": routes.broker.to_string(),
                    "neighbours": neighbours,
                    "srt_total": routes.srt_total,
                    "srt": rows(&routes.srt),
                    "prt_total": routes.prt_total,
                    "prt": rows(&routes.prt),
                    "composites_total": routes.composites_total,
                    "composites": rows(&routes.composites),
                    "offset": routes.offset,
                    "filter": routes.filter,
                    "srt_matched": routes.srt_matched,
                    "prt_matched": routes.prt_matched,
                    "composites_matched": routes.composites_matched,
                });
                out!("{object}");
            } else {
                let neighbours: Vec<String> = routes.neighbours.iter().map(ToString::to_string).collect();
                out!("broker {}; neighbours: {}", routes.broker, neighbours.join(" "));
                // "N advertisements", or with a filter "M of N advertisements contain 'x'".
                let count = |matched: u64, total: u64, what: &str| {
                    if routes.filter.is_empty() {
                        format!("{total} {what}")
                    } else {
                        format!("{matched} of {total} {what} contain {:?}", routes.filter)
                    }
                };
                if routes.offset > 0 {
                    out!("(each table from row {})", routes.offset + 1);
                }
                out!("SRT: {}", count(routes.srt_matched, routes.srt_total, "advertisements"));
                for e in &routes.srt {
                    out!("  {:<12} from {:<12} {}", e.id.to_string(), e.from, e.text);
                }
                out!("PRT: {}", count(routes.prt_matched, routes.prt_total, "subscriptions"));
                for e in &routes.prt {
                    let to: Vec<String> = e.to.iter().map(ToString::to_string).collect();
                    out!("  {:<12} from {:<12} to [{}] {}", e.id.to_string(), e.from, to.join(" "), e.text);
                }
                out!(
                    "composite subscriptions: {} (parts went to the brokers listed)",
                    count(routes.composites_matched, routes.composites_total, "entries")
                );
                for e in &routes.composites {
                    let to: Vec<String> = e.to.iter().map(ToString::to_string).collect();
                    out!("  {:<12} from {:<12} to [{}] {}", e.id.to_string(), e.from, to.join(" "), e.text);
                }
            }
        }
        BrokerCommand::DropLink { peer, down_ms, broker } => {
            let name = padres_lang::Name::new(&peer).map_err(|e| format!("neighbour name: {e}"))?;
            let up = broker.connect().await?.drop_link(&name, down_ms).await.map_err(|e| e.to_string())?;
            if !up {
                return Err(format!("no link to {peer} was up (kept down for {down_ms} ms all the same)"));
            }
            out!("dropped the link to {peer}; down for {down_ms} ms");
        }
    }
    Ok(())
}

async fn publish(
    publications: &[String],
    advertise: Option<&str>,
    broker: &BrokerArgs,
) -> Result<(), String> {
    let advertisement = advertise.map(|adv| message_arg("a", adv)).transpose()?;
    let messages = publications.iter().map(|p| message_arg("p", p)).collect::<Result<Vec<_>, _>>()?;
    let client = broker.connect().await?;
    if let Some(adv) = advertisement {
        // Answered once settled: the publications below reach every subscription that
        // existed before it.
        client.request(adv).await.map_err(|e| format!("advertisement refused: {e}"))?;
    }
    let mut failed = 0;
    for message in messages {
        match client.request(message).await {
            Ok(_) => {}
            Err(ClientError::Refused { message, .. }) => {
                failed += 1;
                eprintln!("padres: refused: {message}");
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    if failed > 0 { Err(format!("{failed} of {} publications refused", publications.len())) } else { Ok(()) }
}

async fn ping(wait: f64, broker: &BrokerArgs) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs_f64(wait.max(0.0));
    loop {
        match broker.connect().await {
            Ok(_) => {
                out!("{} answers", broker.broker);
                return Ok(());
            }
            Err(error) if Instant::now() >= deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn check(messages: Vec<String>) -> ExitCode {
    let parser = issuing_parser();
    let mut failed = false;
    let mut report = |line: &str| match check_line(&parser, line) {
        Checked::Skipped => {}
        Checked::Ok(message) => out!("{message}"),
        Checked::Error(error) => {
            failed = true;
            eprintln!("{}", render_error(line, &error));
        }
    };
    if messages.is_empty() {
        for line in io::stdin().lock().lines() {
            match line {
                Ok(line) => report(&line),
                Err(error) => {
                    eprintln!("error: cannot read standard input: {error}");
                    return ExitCode::from(2);
                }
            }
        }
    } else {
        messages.iter().for_each(|m| report(m));
    }
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

/// A routes filter the broker takes whole.
fn short_filter(text: &str) -> Result<String, String> {
    let most = padres_lang::wire::MAX_ROUTES_FILTER_BYTES;
    if text.len() > most {
        return Err(format!("at most {most} bytes, not {}", text.len()));
    }
    Ok(text.to_owned())
}
