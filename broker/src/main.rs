//! `padres-broker`: one broker of a padres-rs federation.
//!
//! `padres-broker config` prints every option with its default; a run reads `--config
//! FILE` and flags, validates them, and serves clients over QUIC until Ctrl-C or SIGTERM.
//! Neighbours in `neighbours` are dialled (trusting `peer_certs`) and redialled when a link
//! drops.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};
use padres_broker::config::{Config, CoveringMode, Detection, HistoryFilter, HttpViews};
use std::io::Write as _;

use padres_broker::history::{Durability, Reader};
use padres_broker::net::cert;
use padres_lang::Timestamp;

/// A padres-rs broker: routes publications by content between clients and neighbour
/// brokers.
///
/// Options come from a TOML file (--config) and then from the flags below, which win
/// (an on/off flag can only switch an option on). `padres-broker config` prints every
/// option with its default and a comment.
#[derive(Debug, Parser)]
#[command(name = "padres-broker", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    options: Overrides,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the configuration as a commented TOML file: the defaults, or the result of
    /// --config and flags. The output is itself a valid configuration file.
    Config {
        #[command(flatten)]
        options: Box<Overrides>,
    },
    /// Make a federation CA and issue broker or client certificates from it.
    ///
    /// A federation whose brokers link with mutual TLS:
    ///   padres-broker cert ca --out fed
    ///   padres-broker cert issue --ca fed --name B1 --host b1.example --out b1
    ///   padres-broker --name B1 --data-dir b1 --federation-ca fed/ca.pem ...
    /// Copy fed/ca.pem to every broker; keep fed/ca-key.pem where certificates are issued.
    #[command(verbatim_doc_comment)]
    Cert {
        #[command(subcommand)]
        command: CertCommand,
    },
    /// Client authentication: hash a client's token for the configuration.
    ///
    ///   padres-broker auth hash-token < token.txt
    /// prints the Argon2id hash (a PHC string) to put under [auth.tokens] as
    ///   agent-1 = "$argon2id$v=19$..."
    /// The client then connects with --token (or PADRES_TOKEN) and --name agent-1.
    #[command(verbatim_doc_comment)]
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// Print what this broker's history store holds that FILTER selects.
    ///
    /// Reads DATA_DIR/history.sqlite directly, oldest first, one publication a line, so it
    /// works whether or not the broker runs; a subscriber asks the federation with `padres
    /// sub --since`.
    ///
    ///   padres-broker history --data-dir b1 "[class,eq,'job_status'],[appl,eq,'payroll'],[time,>=,'now-1h']"
    ///   padres-broker history --data-dir b1 --check "[class,eq,'job_status']"
    #[command(verbatim_doc_comment)]
    History {
        /// What to select, in subscription syntax (relative times such as 'now-1h' allowed).
        filter: String,
        /// Print at most this many (the oldest).
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Check the whole file's integrity first (SQLite's quick_check reads all of it: for
        /// 1,000,000 job statuses, 166 MB, about 2 s from a cold cache). Without it only
        /// the pages the query reads are looked at, and damage there is reported as an
        /// error.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, Subcommand)]
enum AuthCommand {
    /// Read a token from standard input (its first line, without the line break) and print
    /// its Argon2id hash; a new random salt each time.
    HashToken,
}

#[derive(Debug, Subcommand)]
enum CertCommand {
    /// Make a CA: DIR/ca.pem (the federation_ca of every broker) and DIR/ca-key.pem.
    Ca {
        /// Directory to write ca.pem and ca-key.pem into.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The CA's common name.
        #[arg(long, default_value = "padres federation CA")]
        name: String,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
    /// Issue a certificate signed by the CA: OUT/cert.pem and OUT/key.pem (for a broker, OUT
    /// is its data directory). Valid for NAME, localhost, 127.0.0.1 and every --host.
    Issue {
        /// Directory holding the CA's ca.pem and ca-key.pem.
        #[arg(long, value_name = "DIR")]
        ca: PathBuf,
        /// The broker's name (with --client: the principal's).
        #[arg(long)]
        name: String,
        /// A DNS name or IP address the broker is reached by (repeat for several; not with
        /// --client).
        #[arg(long = "host", value_name = "HOST", conflicts_with = "client")]
        hosts: Vec<String>,
        /// A client's certificate instead: for client authentication only, naming the
        /// principal NAME (a client connects with --cert OUT/cert.pem --key OUT/key.pem to a
        /// broker with this federation_ca). It cannot serve as a broker's.
        #[arg(long)]
        client: bool,
        /// Directory to write cert.pem and key.pem into.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
}

/// Which history store `padres-broker history` reads.
#[derive(Debug, Args)]
struct StoreArgs {
    /// The broker's configuration file, for its data_dir.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The broker's data directory (over the configuration's) [default: padres-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

impl StoreArgs {
    fn data_dir(&self) -> Result<PathBuf, String> {
        if let Some(dir) = &self.data_dir {
            return Ok(dir.clone());
        }
        match &self.config {
            Some(path) => Config::from_file(path).map(|config| config.data_dir).map_err(|e| e.to_string()),
            None => Ok(Config::default().data_dir),
        }
    }
}

#[derive(Debug, Args)]
struct Overrides {
    /// Read options from this TOML file first.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The broker's name, unique in the federation [default: broker].
    #[arg(long)]
    name: Option<String>,
    /// Address and UDP port to listen on, e.g. 0.0.0.0:7700 for every interface [default:
    /// 127.0.0.1:7700, this machine only].
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Serve the web monitor (/), Prometheus metrics (/metrics) and a JSON API
    /// (/api/stats, /api/links, /api/routes, /api/detectors, /api/history,
    /// /api/federation, /api/workflows) over HTTP on this address and TCP port, e.g.
    /// 127.0.0.1:7780 [default: off].
    #[arg(long, value_name = "ADDR:PORT")]
    http: Option<SocketAddr>,
    /// Serve that listener over HTTPS with the broker's own certificate (the one its QUIC
    /// clients verify: e.g. curl --cacert DATA_DIR/cert.pem https://127.0.0.1:7780/metrics).
    /// Needs --http.
    #[arg(long)]
    http_tls: bool,
    /// Who may read /metrics and the read-only /api views (the monitor's data): open, clients
    /// (a token where anonymous clients are refused) or auto (open on a loopback address,
    /// as clients elsewhere) [default: auto]. /api/routes and /api/detectors always need
    /// the routes right.
    #[arg(long, value_enum, value_name = "WHO")]
    http_views: Option<HttpViewsFlag>,
    /// Also serve the HTTP gateway on that listener: publish (POST /api/publish) and
    /// subscribe (GET /api/subscribe, server-sent events) over HTTP, as the principal of an
    /// 'Authorization: Bearer NAME:TOKEN' header (anonymous without one), held to its
    /// permits as a QUIC client is. Needs --http.
    #[arg(long)]
    http_gateway: bool,
    /// How often (milliseconds) the broker publishes a report on itself on the reserved
    /// class padres_broker, for monitors and /api/federation: 0 (never) or 100 to
    /// 86400000 [default: 5000].
    #[arg(long, value_name = "MS")]
    monitor_interval_ms: Option<u64>,
    /// A neighbour broker, quic://HOST:PORT (repeat for several; replaces the file's list).
    #[arg(long = "neighbour", visible_alias = "neighbor", value_name = "URI")]
    neighbours: Vec<String>,
    /// A certificate (PEM) to trust when connecting to neighbours (repeat for several;
    /// replaces the file's list).
    #[arg(long = "peer-cert", value_name = "FILE")]
    peer_certs: Vec<PathBuf>,
    /// The certificate (PEM: its cert.pem) of a broker that may dial in, trusted as itself
    /// only (repeat for several; replaces the file's list). With any, or a federation CA,
    /// every peer is asked for a certificate: other brokers dialling in are refused, and
    /// so are clients presenting a certificate not trusted here.
    #[arg(long = "accept-broker", value_name = "FILE")]
    accept_brokers: Vec<PathBuf>,
    /// The federation's CA certificate: broker links then use mutual TLS, and this broker's
    /// cert.pem must be issued by the CA (see `padres-broker cert`).
    #[arg(long, value_name = "FILE")]
    federation_ca: Option<PathBuf>,
    /// Do not verify neighbours' certificates. DEVELOPMENT ONLY: anyone can then pose as a
    /// neighbour.
    #[arg(long)]
    insecure: bool,
    /// Directory for the certificate, key and history [default: padres-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// A DNS name or IP address other hosts reach this broker by, put in the self-signed
    /// certificate it makes on first start (repeat for several; replaces the file's list).
    #[arg(long = "cert-host", value_name = "HOST")]
    cert_hosts: Vec<String>,
    /// Subscription and advertisement covering: off, lazy (covered subscriptions are held
    /// back from neighbours) or active (they are also withdrawn once covered); the same
    /// deliveries, fewer subscriptions on links [default: off].
    #[arg(long, value_enum, value_name = "MODE")]
    covering: Option<CoveringFlag>,
    /// Allow cycles in the overlay (per-advertisement trees).
    #[arg(long)]
    cycles: bool,
    /// Largest frame accepted from a peer, in bytes: 1024 to 64 MiB [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    max_frame_bytes: Option<usize>,
    /// Most subscriptions one client may hold (a composite one counts one per atomic part)
    /// [default: 100000].
    #[arg(long, value_name = "N")]
    max_subscriptions_per_client: Option<usize>,
    /// Most simultaneous connections, clients' (HTTP gateway requests included) and
    /// brokers' together [default: 10000].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Bytes queued for one slow client before it is disconnected [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    max_queued_bytes_per_client: Option<usize>,
    /// How long (ms) a neighbour's link may be down and return with nothing lost or doubled
    /// (messages for it wait, routes stay), at most an hour; 0: a link that drops is
    /// forgotten at once [default: 10000].
    #[arg(long, value_name = "MS")]
    link_window_ms: Option<u64>,
    /// Estimated bytes kept for one neighbour until it acknowledges them; past this its
    /// link session ends; at least 1048576 [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    link_max_bytes: Option<usize>,
    /// How long (ms) a client whose connection was lost may take to reconnect and resume
    /// with nothing lost or doubled (its subscriptions stay, what is routed to it waits),
    /// at most an hour; 0: a lost connection ends the client at once [default: 10000].
    #[arg(long, value_name = "MS")]
    client_window_ms: Option<u64>,
    /// Let clients drop this broker's links on purpose (`padres broker drop-link`), for
    /// fault-injection harnesses. Never on a broker others depend on: any client could then
    /// partition the overlay.
    #[arg(long)]
    allow_drop_link: bool,
    /// Let the kernel back the broker's memory with transparent huge pages: faster where
    /// many composite subscriptions make large tables, but resident memory then grows in
    /// 2 MiB steps and keeps what bursts of traffic took. Off by default.
    #[arg(long)]
    huge_pages: bool,
    /// Where clients' composite subscriptions are detected: in the network, where their
    /// parts' publications meet, or at the subscriber's broker (PADRES 2.1, to compare)
    /// [default: network].
    #[arg(long, value_enum, value_name = "WHERE")]
    composite_detection: Option<DetectionFlag>,
    /// Run the composite detectors in the router's own thread instead of a thread of
    /// their own (the default uses two cores: matching and routing on one, detection on
    /// the other).
    #[arg(long)]
    no_detection_thread: bool,
    /// Most partial matches stored per composite subscription at this broker [default:
    /// 10000].
    #[arg(long, value_name = "N")]
    max_partial_matches_per_subscription: Option<usize>,
    /// Most partial matches stored at this broker in all [default: 1000000].
    #[arg(long, value_name = "N")]
    max_partial_matches: Option<usize>,
    /// Most bytes the partial matches stored at this broker may hold, estimated: 512 each
    /// plus the publications each holds; past it the longest stored are evicted
    /// [default: 1073741824].
    #[arg(long, value_name = "BYTES")]
    max_partial_match_bytes: Option<u64>,
    /// How late (milliseconds after its stamp) a publication may reach a composite
    /// detector and still pair as if it had come in order; `within` windows and bindings
    /// ended by `until` keep their partial matches this much longer [default: 10000].
    #[arg(long, value_name = "MS")]
    lateness_ms: Option<u64>,
    /// Keep what job agents and `padres workflow` read back (the classes agent_ctl,
    /// trigger, job_status and agent_load, with appl and gid indexed) in the history
    /// store, beside any --history filters; kept for ever unless --history-max-age
    /// (30d covers the agents' catch-up).
    #[arg(long)]
    workflows: bool,
    /// Keep the publications this filter selects in the history store,
    /// DATA_DIR/history.sqlite (repeat for several; added to the file's [[history]]).
    #[arg(long = "history", value_name = "FILTER")]
    history: Vec<String>,
    /// When a publication this broker acknowledges to its publisher (`padres pub`,
    /// `Client::publish_acked`) is safe: `full` (on disk) or `normal` (queued for the
    /// writer) [default: normal].
    #[arg(long, value_enum, value_name = "LEVEL")]
    history_durability: Option<DurabilityFlag>,
    /// An attribute the history store indexes, e.g. appl (repeat; replaces the file's list).
    #[arg(long = "history-index", value_name = "ATTR")]
    history_index: Vec<String>,
    /// Delete stored publications older than this (12h, 7d) [default: keep for ever].
    #[arg(long, value_name = "DURATION")]
    history_max_age: Option<String>,
    /// Keep at most this many stored publications (0: no limit) [default: 0].
    #[arg(long, value_name = "N")]
    history_max_rows: Option<u64>,
    /// Keep the store's pages in use under this many bytes, the oldest stored going first
    /// (0: no limit, or at least 1048576; the file keeps its largest size, and its journal
    /// takes up to 40 MB more) [default: 0].
    #[arg(long, value_name = "BYTES")]
    history_max_bytes: Option<u64>,
    /// How long a historic subscription's query waits for the stores beyond this broker
    /// before its end-of-history marker names those that did not answer [default: 5000].
    #[arg(long, value_name = "MS")]
    history_query_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DurabilityFlag {
    Full,
    Normal,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DetectionFlag {
    Network,
    Subscriber,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HttpViewsFlag {
    Auto,
    Open,
    Clients,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CoveringFlag {
    Off,
    Lazy,
    Active,
}

impl Overrides {
    /// The file (if any) with the flags applied, validated.
    fn resolve(&self) -> Result<Config, String> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
            None => Config::default(),
        };
        if let Some(name) = &self.name {
            config.name.clone_from(name);
        }
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(http) = self.http {
            config.http = Some(http);
        }
        config.http_gateway |= self.http_gateway;
        config.http_tls |= self.http_tls;
        if let Some(views) = self.http_views {
            config.http_views = match views {
                HttpViewsFlag::Auto => HttpViews::Auto,
                HttpViewsFlag::Open => HttpViews::Open,
                HttpViewsFlag::Clients => HttpViews::Clients,
            };
        }
        if let Some(ms) = self.monitor_interval_ms {
            config.monitor_interval_ms = ms;
        }
        if !self.neighbours.is_empty() {
            config.neighbours.clone_from(&self.neighbours);
        }
        if !self.peer_certs.is_empty() {
            config.peer_certs.clone_from(&self.peer_certs);
        }
        if !self.accept_brokers.is_empty() {
            config.accept_brokers.clone_from(&self.accept_brokers);
        }
        if let Some(ca) = &self.federation_ca {
            config.federation_ca = Some(ca.clone());
        }
        config.insecure |= self.insecure;
        if !self.cert_hosts.is_empty() {
            config.cert_hosts.clone_from(&self.cert_hosts);
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir.clone_from(dir);
        }
        if let Some(covering) = self.covering {
            config.covering = match covering {
                CoveringFlag::Off => CoveringMode::Off,
                CoveringFlag::Lazy => CoveringMode::Lazy,
                CoveringFlag::Active => CoveringMode::Active,
            };
        }
        config.cycles |= self.cycles;
        if let Some(detection) = self.composite_detection {
            config.composite.detection = match detection {
                DetectionFlag::Network => Detection::Network,
                DetectionFlag::Subscriber => Detection::Subscriber,
            };
        }
        let composite = &mut config.composite;
        if self.no_detection_thread {
            composite.detection_thread = false;
        }
        if let Some(lateness) = self.lateness_ms {
            composite.lateness_ms = lateness;
        }
        if let Some(bytes) = self.max_partial_match_bytes {
            composite.max_partial_match_bytes = bytes;
        }
        for (flag, slot) in [
            (self.max_partial_matches_per_subscription, &mut composite.max_partial_matches_per_subscription),
            (self.max_partial_matches, &mut composite.max_partial_matches),
        ] {
            if let Some(value) = flag {
                *slot = value;
            }
        }
        config.history.extend(self.history.iter().map(|filter| HistoryFilter { filter: filter.clone() }));
        config.workflows |= self.workflows;
        let store = &mut config.history_store;
        if let Some(durability) = self.history_durability {
            store.durability = match durability {
                DurabilityFlag::Full => Durability::Full,
                DurabilityFlag::Normal => Durability::Normal,
            };
        }
        if !self.history_index.is_empty() {
            store.index.clone_from(&self.history_index);
        }
        if let Some(age) = &self.history_max_age {
            store.max_age.clone_from(age);
        }
        if let Some(rows) = self.history_max_rows {
            store.max_rows = rows;
        }
        if let Some(bytes) = self.history_max_bytes {
            store.max_bytes = bytes;
        }
        if let Some(ms) = self.history_query_timeout_ms {
            store.query_timeout_ms = ms;
        }
        let limits = &mut config.limits;
        for (flag, slot) in [
            (self.max_frame_bytes, &mut limits.max_frame_bytes),
            (self.max_subscriptions_per_client, &mut limits.max_subscriptions_per_client),
            (self.max_connections, &mut limits.max_connections),
            (self.max_queued_bytes_per_client, &mut limits.max_queued_bytes_per_client),
        ] {
            if let Some(value) = flag {
                *slot = value;
            }
        }
        if let Some(ms) = self.link_window_ms {
            config.link_sessions.window_ms = ms;
        }
        if let Some(bytes) = self.link_max_bytes {
            config.link_sessions.max_bytes = bytes;
        }
        if let Some(ms) = self.client_window_ms {
            config.client_sessions.window_ms = ms;
        }
        config.allow_drop_link |= self.allow_drop_link;
        config.huge_pages |= self.huge_pages;
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// mimalloc: the broker allocates and frees small objects (publications, partial
/// matches, messages) at a high rate, often long after they were made; measured in
/// BENCHMARKS.md against the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Before anything else takes memory; `run` lets them back if configured
    // (padres_broker::memory).
    let no_huge_pages = padres_broker::memory::use_transparent_huge_pages(false);
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Each subcommand has its own options: the broker's, given before it, would be
    // ignored, so they are refused (`config` takes them after its name).
    if let Some((name, _)) = matches.subcommand() {
        let given: Vec<String> = Cli::command()
            .get_arguments()
            .filter(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
            .map(|arg| format!("--{}", arg.get_long().unwrap_or(arg.get_id().as_str())))
            .collect();
        if !given.is_empty() {
            eprintln!(
                "padres-broker: {} before '{name}': a subcommand's options go after its name (padres-broker {name} --help)",
                given.join(" ")
            );
            return ExitCode::from(2);
        }
    }
    match cli.command {
        Some(Command::Config { options }) => match options.resolve() {
            Ok(config) => {
                print!("{}", config.to_commented_toml());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("padres-broker: {error}");
                ExitCode::from(1)
            }
        },
        Some(Command::Cert { command }) => {
            let done = match &command {
                CertCommand::Ca { out, name, force } => cert::make_ca(out, name, *force)
                    .map(|()| format!("made {0}/ca.pem and {0}/ca-key.pem", out.display())),
                CertCommand::Issue { ca, name, out, force, client: true, .. } => {
                    cert::issue_client(ca, name, out, *force).map(|()| {
                        format!(
                            "issued {0}/cert.pem and {0}/key.pem for client principal {name}",
                            out.display()
                        )
                    })
                }
                CertCommand::Issue { ca, name, hosts, out, force, client: false } => {
                    cert::issue(ca, name, hosts, out, *force)
                        .map(|()| format!("issued {0}/cert.pem and {0}/key.pem for {name}", out.display()))
                }
            };
            match done {
                Ok(what) => {
                    println!("{what}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("padres-broker: {error}");
                    ExitCode::from(1)
                }
            }
        }
        Some(Command::Auth { command: AuthCommand::HashToken }) => {
            let mut line = String::new();
            if let Err(error) = std::io::stdin().read_line(&mut line) {
                eprintln!("padres-broker: cannot read the token: {error}");
                return ExitCode::from(1);
            }
            let token = line.trim_end_matches(['\r', '\n']);
            if token.is_empty() {
                eprintln!("padres-broker: give the token on standard input (an empty one is refused)");
                return ExitCode::from(2);
            }
            match padres_broker::auth::hash_token(token) {
                Ok(hash) => {
                    println!("{hash}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("padres-broker: {error}");
                    ExitCode::from(1)
                }
            }
        }
        Some(Command::History { filter, limit, check, store }) => {
            match history(&store, &filter, limit, check) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("padres-broker: {error}");
                    ExitCode::from(1)
                }
            }
        }
        None => match cli.options.resolve() {
            Ok(config) => run(config, no_huge_pages),
            Err(error) => {
                eprintln!("padres-broker: {error}");
                ExitCode::from(1)
            }
        },
    }
}

/// `padres-broker history`: a query of the store, printed.
fn history(store: &StoreArgs, filter: &str, limit: Option<usize>, check: bool) -> Result<(), String> {
    let data_dir = store.data_dir()?;
    let millis =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let now = i64::try_from(millis).ok().and_then(Timestamp::from_millis).unwrap_or(Timestamp::MAX);
    let sub =
        padres_lang::Parser::default().at(now).subscription(filter).map_err(|e| format!("{filter}: {e}"))?;
    let reader = Reader::open_with(&data_dir, check).map_err(|e| e.to_string())?;
    let found = reader.query(&sub, limit.unwrap_or(usize::MAX)).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    for stamped in &found {
        if writeln!(out, "{}", stamped.publication).is_err() {
            break;
        }
    }
    eprintln!("{} stored publications", found.len());
    Ok(())
}

/// Serves until Ctrl-C or SIGTERM. `no_huge_pages` is how turning transparent huge pages
/// off at the start went.
fn run(config: Config, no_huge_pages: std::io::Result<()>) -> ExitCode {
    let huge_pages = if config.huge_pages {
        padres_broker::memory::use_transparent_huge_pages(true)
    } else {
        no_huge_pages
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, not in log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match huge_pages {
        Ok(()) if config.huge_pages => tracing::info!("transparent huge pages allowed (huge_pages = true)"),
        Ok(()) => tracing::debug!("transparent huge pages off (huge_pages = false)"),
        Err(error) => tracing::warn!(%error, "could not set whether transparent huge pages are used"),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("padres-broker: cannot start the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(padres_broker::net::serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("padres-broker: {error}");
            ExitCode::from(1)
        }
    }
}
