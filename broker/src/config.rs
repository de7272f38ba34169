//! The broker's configuration: one serde tree, documented defaults, validated before use.
//!
//! A broker reads a TOML file (`--config FILE`) and then applies its flags on top;
//! `padres-broker config` prints every option with its default and a comment, and what it
//! prints is itself a valid configuration file.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use padres_lang::{InvalidMessage, Name, ParseError, ParseErrorKind};
use serde::{Deserialize, Serialize};

use crate::auth::AuthConfig;
use crate::detector::Bounds;
use crate::history::{Durability, StoreOptions};

use crate::router::{Covering, Options};

/// Subscription and advertisement covering, as written in the configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoveringMode {
    /// Every subscription goes everywhere it overlaps.
    #[default]
    Off,
    /// Covered subscriptions are held back.
    Lazy,
    /// Covered subscriptions are held back and withdrawn.
    Active,
}

/// Who may read the HTTP listener's read-only views (`/metrics`, `/api/stats` and the
/// like, which the web monitor shows; `crate::net::http_auth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpViews {
    /// Anyone when the listener is on a loopback address; as `clients` otherwise.
    #[default]
    Auto,
    /// Anyone who reaches the listener.
    Open,
    /// Those who may connect as clients: a token where anonymous clients are refused.
    Clients,
}

impl From<CoveringMode> for Covering {
    fn from(mode: CoveringMode) -> Self {
        match mode {
            CoveringMode::Off => Self::Off,
            CoveringMode::Lazy => Self::Lazy,
            CoveringMode::Active => Self::Active,
        }
    }
}

/// Resource limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest frame accepted from a peer, in bytes.
    pub max_frame_bytes: usize,
    /// Most subscriptions one client may hold (a composite one counts one per atomic part).
    pub max_subscriptions_per_client: usize,
    /// Most simultaneous connections (clients and brokers).
    pub max_connections: usize,
    /// Bytes queued for one slow client before it is disconnected.
    pub max_queued_bytes_per_client: usize,
    /// Milliseconds an `advertise`, `subscribe` or `unadv` waits to settle before it is
    /// answered with what has settled (counted in `settle_timeouts`, logged).
    pub settle_timeout_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_frame_bytes: padres_lang::wire::codec::DEFAULT_MAX_FRAME,
            max_subscriptions_per_client: 100_000,
            max_connections: 10_000,
            max_queued_bytes_per_client: 64 << 20,
            settle_timeout_ms: crate::router::DEFAULT_SETTLE_TIMEOUT_MS,
        }
    }
}

/// Link sessions between neighbour brokers ([`crate::resume`]): how long a link may be
/// gone and return with nothing lost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkSessionsConfig {
    /// Milliseconds a neighbour's link may be down and return with its session (nothing
    /// lost, nothing doubled, routes kept); 0: a link that drops ends its session.
    pub window_ms: u64,
    /// Estimated bytes of messages kept for one neighbour until it acknowledges them (while
    /// its link is down, everything routed to it); past this its session ends.
    pub max_bytes: usize,
}

impl Default for LinkSessionsConfig {
    fn default() -> Self {
        Self { window_ms: crate::resume::DEFAULT_WINDOW_MS, max_bytes: crate::resume::DEFAULT_MAX_BYTES }
    }
}

/// Client sessions: how long a client whose connection was lost may take to return with
/// nothing lost (see `docs/delivery.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientSessionsConfig {
    /// Milliseconds a client's session outlives a lost connection: its subscriptions stay,
    /// what is routed to it waits (up to `limits.max_queued_bytes_per_client`), and a client
    /// that reconnects within it resumes where it was; 0: a lost connection ends it at once.
    pub window_ms: u64,
}

/// The client-session window unless configured otherwise (milliseconds).
pub const DEFAULT_CLIENT_WINDOW_MS: u64 = 10_000;

impl Default for ClientSessionsConfig {
    fn default() -> Self {
        Self { window_ms: DEFAULT_CLIENT_WINDOW_MS }
    }
}

/// The longest link-session window accepted: an hour.
pub const MAX_LINK_WINDOW_MS: u64 = 3_600_000;
/// The smallest outbox accepted for a neighbour.
pub const MIN_LINK_BYTES: usize = 1 << 20;

/// Where a client's composite subscription is detected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Detection {
    /// In the network, where the parts' publications meet (PADRES's destination tree).
    #[default]
    Network,
    /// At the subscriber's broker, every leaf an ordinary subscription (PADRES 2.1); kept
    /// to compare with.
    Subscriber,
}

/// What composite detectors may store and produce.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompositeConfig {
    /// Where client patterns are detected.
    pub detection: Detection,
    /// Run this broker's detectors on a thread of their own beside the router's (matching
    /// and routing on one core, detection on another); off: the router runs them itself.
    pub detection_thread: bool,
    /// Most partial matches stored for one composite subscription (or part) at this broker.
    pub max_partial_matches_per_subscription: usize,
    /// Most partial matches stored at this broker in all.
    pub max_partial_matches: usize,
    /// Most bytes the partial matches stored at this broker may hold, estimated (about
    /// 512 bytes each plus the publications each holds, a publication counted in every
    /// partial match that holds it).
    pub max_partial_match_bytes: u64,
    /// Most matches one publication forms at one operator of a pattern.
    pub max_pairs_per_publication: usize,
    /// How late after its stamp a publication may arrive and still pair as if in order
    /// (milliseconds; windows keep their partial matches this much longer, and a binding
    /// ended by `until` keeps those begun before the end this long).
    pub lateness_ms: u64,
}

impl Default for CompositeConfig {
    fn default() -> Self {
        let bounds = Bounds::DEFAULT;
        Self {
            detection: Detection::Network,
            detection_thread: true,
            max_partial_matches_per_subscription: bounds.per_detector,
            max_partial_matches: bounds.per_broker,
            max_partial_match_bytes: bounds.max_bytes,
            max_pairs_per_publication: bounds.pairs_per_input,
            lateness_ms: bounds.lateness_ms,
        }
    }
}

/// One filter of the history store: `[[history]]` with `filter = "[class,eq,'job_status']"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryFilter {
    /// What to keep, in subscription syntax.
    pub filter: String,
}

/// How the history store is kept (`[history_store]`); it runs only if there is at least
/// one `[[history]]` filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryStoreConfig {
    /// "full": a publication acknowledged at this broker (publish_acked) is on disk;
    /// "normal": acknowledged once queued (a crash loses at most what was queued).
    pub durability: Durability,
    /// Attributes with an index of their own, e.g. ["appl", "gid"] (class and time always).
    pub index: Vec<String>,
    /// Delete rows whose time is older than this ("7d", "12h"); empty: keep for ever.
    pub max_age: String,
    /// Keep at most this many rows, the oldest stored going first; 0: no limit.
    pub max_rows: u64,
    /// Keep the database's pages in use under this many bytes, the oldest stored going
    /// first; 0: no limit. The file keeps its largest size (freed pages are reused), and
    /// its journal takes up to 40 MB more.
    pub max_bytes: u64,
    /// Publications waiting for the writer before more are dropped (and counted).
    pub queue: usize,
    /// How long a historic subscription's query waits for the stores beyond this broker
    /// before the end-of-history marker names those that did not answer (ms). Applies with
    /// or without a store here.
    pub query_timeout_ms: u64,
    /// Most stored publications delivered to one historic subscription.
    pub max_results: u64,
}

/// What a broker with `workflows` keeps: the classes job agents and `padres workflow`
/// read back from history (commands and deployments, generations' triggers, jobs'
/// statuses, agents' load reports).
pub const WORKFLOW_HISTORY: [&str; 4] =
    ["[class,eq,'agent_ctl']", "[class,eq,'trigger']", "[class,eq,'job_status']", "[class,eq,'agent_load']"];

/// The attributes a broker with `workflows` indexes: `padres workflow` and the agents ask
/// for one application's generations, or one generation's statuses.
pub const WORKFLOW_INDEX: [&str; 2] = ["appl", "gid"];

/// The smallest `history_store.max_bytes` accepted, other than 0 (no limit): an empty
/// store's tables and indexes take about 100 kB.
pub const MIN_HISTORY_BYTES: u64 = 1 << 20;

/// The largest `history_store.queue` accepted.
pub const MAX_HISTORY_QUEUE: usize = 1 << 24;

impl Default for HistoryStoreConfig {
    fn default() -> Self {
        Self {
            durability: Durability::Normal,
            index: Vec::new(),
            max_age: String::new(),
            max_rows: 0,
            max_bytes: 0,
            queue: 65_536,
            query_timeout_ms: crate::router::DEFAULT_TIMEOUT_MS,
            max_results: crate::router::DEFAULT_MAX_RESULTS,
        }
    }
}

/// The history store as the broker runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct HistorySettings {
    /// What it keeps.
    pub filters: Vec<padres_lang::Subscription>,
    /// How.
    pub store: StoreOptions,
    /// Room in the writer's queue.
    pub queue: usize,
}

/// A broker's whole configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The broker's name, unique in the federation (it prefixes every id it assigns).
    pub name: String,
    /// Address and UDP port to listen on for QUIC.
    pub listen: SocketAddr,
    /// Address and TCP port of the HTTP listener (`/metrics`, `/api/...`); none: off.
    pub http: Option<SocketAddr>,
    /// Serve the HTTP gateway too (publishing and subscribing over HTTP, as the principal
    /// an `Authorization: Bearer NAME:TOKEN` header names).
    pub http_gateway: bool,
    /// Who may read the HTTP listener's read-only views (`/metrics`, the monitor's data).
    pub http_views: HttpViews,
    /// Serve the HTTP listener over TLS (HTTPS) with the broker's own certificate.
    pub http_tls: bool,
    /// How often the broker publishes its report on the reserved class `padres_broker`
    /// (milliseconds; 0: never). See [`crate::monitor`].
    pub monitor_interval_ms: u64,
    /// Neighbour brokers to connect to, as `quic://HOST:PORT` (`neighbors` is read too).
    #[serde(alias = "neighbors")]
    pub neighbours: Vec<String>,
    /// Certificates (PEM) trusted when connecting to neighbours, e.g. their `cert.pem`.
    pub peer_certs: Vec<PathBuf>,
    /// Certificates (PEM) of the brokers that may dial in, e.g. their `cert.pem`. When set
    /// (or `federation_ca` is), a broker dialling in must present one of them, or one from
    /// the federation CA, issued for the name it gives in its hello; others are refused.
    pub accept_brokers: Vec<PathBuf>,
    /// The federation's CA certificate (PEM). When set, links between brokers use mutual
    /// TLS: this broker's `cert.pem` must be issued by the CA (`padres-broker cert issue`),
    /// neighbours are trusted through the CA, and a broker that says hello without a
    /// certificate from it is refused. Clients still connect without a certificate.
    pub federation_ca: Option<PathBuf>,
    /// Do not verify neighbours' certificates at all. Development only: anyone can then
    /// pose as a neighbour.
    pub insecure: bool,
    /// Directory for the broker's certificate, key and history.
    pub data_dir: PathBuf,
    /// DNS names and IP addresses this broker is reached by from other hosts, put in the
    /// self-signed certificate it makes on first start (beside its name, `localhost` and
    /// 127.0.0.1), so that brokers and clients that pin it can verify it by them. A
    /// certificate made already is kept.
    pub cert_hosts: Vec<String>,
    /// Covering mode: off, lazy or active.
    pub covering: CoveringMode,
    /// Allow cycles in the overlay.
    pub cycles: bool,
    /// Resource limits.
    pub limits: LimitsConfig,
    /// Link sessions with neighbours.
    pub link_sessions: LinkSessionsConfig,
    /// Sessions of clients whose connection is lost.
    pub client_sessions: ClientSessionsConfig,
    /// Let clients drop this broker's links on purpose (`padres broker drop-link`), for
    /// fault injection. Off by default: any client could otherwise partition the overlay.
    pub allow_drop_link: bool,
    /// Let the kernel back the broker's memory with transparent huge pages: faster over
    /// large tables, but resident memory then grows in 2 MiB steps and keeps what a burst
    /// took (`memory` module). Off by default.
    pub huge_pages: bool,
    /// Composite detection.
    pub composite: CompositeConfig,
    /// How the history store is kept.
    pub history_store: HistoryStoreConfig,
    /// What the history store keeps: one filter per entry (none: no store).
    pub history: Vec<HistoryFilter>,
    /// Keep what job agents and `padres workflow` read back ([`WORKFLOW_HISTORY`]), beside
    /// the `history` filters, with `appl` and `gid` indexed.
    pub workflows: bool,
    /// Who clients are and what they may do (`crate::auth`).
    pub auth: AuthConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: "broker".to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 7700)),
            http: None,
            http_gateway: false,
            http_tls: false,
            http_views: HttpViews::Auto,
            monitor_interval_ms: DEFAULT_MONITOR_INTERVAL_MS,
            neighbours: Vec::new(),
            peer_certs: Vec::new(),
            accept_brokers: Vec::new(),
            federation_ca: None,
            insecure: false,
            data_dir: PathBuf::from("padres-data"),
            cert_hosts: Vec::new(),
            covering: CoveringMode::Off,
            cycles: false,
            limits: LimitsConfig::default(),
            link_sessions: LinkSessionsConfig::default(),
            client_sessions: ClientSessionsConfig::default(),
            allow_drop_link: false,
            huge_pages: false,
            composite: CompositeConfig::default(),
            history_store: HistoryStoreConfig::default(),
            history: Vec::new(),
            workflows: false,
            auth: AuthConfig::default(),
        }
    }
}

/// How often a broker reports on itself unless configured otherwise, in milliseconds.
pub const DEFAULT_MONITOR_INTERVAL_MS: u64 = 5_000;
/// The shortest report interval accepted (other than 0, never).
pub const MIN_MONITOR_INTERVAL_MS: u64 = 100;
/// The longest report interval accepted: a day.
pub const MAX_MONITOR_INTERVAL_MS: u64 = 86_400_000;

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A value is not acceptable.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// What a valid [`Config`] says, in the types the broker runs with ([`Config::validate`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Settings {
    /// The broker's name.
    pub name: Name,
    /// The neighbours to dial, parsed.
    pub neighbours: Vec<NeighbourAddr>,
    /// The router's options (the shell sets the incarnation).
    pub router: Options,
    /// The history store, if any filter is configured.
    pub history: Option<HistorySettings>,
    /// The link sessions' window and outbox limit.
    pub sessions: crate::resume::Settings,
    /// How long a client's session outlives a lost connection (milliseconds; 0: not at all).
    pub client_window_ms: u64,
}

/// A neighbour's address, from `quic://HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeighbourAddr {
    /// Host name or IP address.
    pub host: String,
    /// UDP port.
    pub port: u16,
}

/// Parses `quic://HOST:PORT` (IPv6 hosts in brackets).
pub fn parse_neighbour(uri: &str) -> Result<NeighbourAddr, ConfigError> {
    let bad =
        |why: &str| ConfigError::Invalid(format!("neighbour '{uri}': {why} (expected quic://HOST:PORT)"));
    let rest = uri.strip_prefix("quic://").ok_or_else(|| bad("missing quic:// scheme"))?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("missing :PORT"))?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if host.is_empty() || host.contains('/') {
        return Err(bad("missing host"));
    }
    let port: u16 = port.parse().map_err(|_| bad("port must be a number from 1 to 65535"))?;
    if port == 0 {
        return Err(bad("port must be a number from 1 to 65535"));
    }
    Ok(NeighbourAddr { host: host.to_owned(), port })
}

impl Config {
    /// Reads a configuration file (checked by [`Config::validate`] once flags are applied).
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let config: Self = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim().to_owned(),
        })?;
        Ok(config)
    }

    /// Checks every value once, and returns those the broker runs with in their own
    /// types; the first problem found is reported.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let name = Name::new(&self.name).map_err(|e| ConfigError::Invalid(format!("name: {e}")))?;
        let neighbours = self.neighbours.iter().map(|n| parse_neighbour(n)).collect::<Result<Vec<_>, _>>()?;
        if self.monitor_interval_ms != 0
            && !(MIN_MONITOR_INTERVAL_MS..=MAX_MONITOR_INTERVAL_MS).contains(&self.monitor_interval_ms)
        {
            return Err(ConfigError::Invalid(format!(
                "monitor_interval_ms must be 0 (no reports) or from {MIN_MONITOR_INTERVAL_MS} to {MAX_MONITOR_INTERVAL_MS}"
            )));
        }
        if self.http_tls && self.http.is_none() {
            return Err(ConfigError::Invalid(
                "http_tls needs the HTTP listener: set http = \"ADDR:PORT\" (--http) too".to_owned(),
            ));
        }
        if self.http_gateway && self.http.is_none() {
            return Err(ConfigError::Invalid(
                "http_gateway needs the HTTP listener: set http = \"ADDR:PORT\" (--http) too".to_owned(),
            ));
        }
        let l = &self.limits;
        let ceiling = padres_lang::wire::codec::MAX_FRAME_CEILING;
        if l.max_frame_bytes < 1024 || l.max_frame_bytes > ceiling {
            return Err(ConfigError::Invalid(format!(
                "limits.max_frame_bytes must be from 1024 to {ceiling}"
            )));
        }
        for (name, value) in [
            ("limits.max_subscriptions_per_client", l.max_subscriptions_per_client),
            ("limits.max_connections", l.max_connections),
            ("limits.max_queued_bytes_per_client", l.max_queued_bytes_per_client),
            ("limits.settle_timeout_ms", usize::try_from(l.settle_timeout_ms).unwrap_or(usize::MAX)),
            (
                "composite.max_partial_matches_per_subscription",
                self.composite.max_partial_matches_per_subscription,
            ),
            ("composite.max_partial_matches", self.composite.max_partial_matches),
            ("composite.max_pairs_per_publication", self.composite.max_pairs_per_publication),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!("{name} must be at least 1")));
            }
        }
        if (1..MIN_HISTORY_BYTES).contains(&self.history_store.max_bytes) {
            return Err(ConfigError::Invalid(format!(
                "history_store.max_bytes must be 0 (no limit) or at least {MIN_HISTORY_BYTES} (an empty store takes about 100 kB)"
            )));
        }
        if self.composite.max_partial_match_bytes < crate::detector::PARTIAL_OVERHEAD {
            return Err(ConfigError::Invalid(format!(
                "composite.max_partial_match_bytes must be at least {} (what one partial match counts)",
                crate::detector::PARTIAL_OVERHEAD
            )));
        }
        let c = &self.composite;
        let router = Options {
            covering: self.covering.into(),
            cycles: self.cycles,
            incarnation: 0,
            max_subscriptions_per_client: Some(self.limits.max_subscriptions_per_client),
            detect_at_subscriber: c.detection == Detection::Subscriber,
            offload_detection: c.detection_thread,
            detector_bounds: Bounds {
                per_detector: c.max_partial_matches_per_subscription,
                per_broker: c.max_partial_matches,
                max_bytes: c.max_partial_match_bytes,
                pairs_per_input: c.max_pairs_per_publication,
                lateness_ms: c.lateness_ms,
            },
            history_timeout_ms: self.history_store.query_timeout_ms,
            history_max_results: self.history_store.max_results,
            history_chunk_bytes: crate::router::history_chunk_bytes(l.max_frame_bytes),
            rejoin_ms: self.link_sessions.window_ms,
            rejoin_max_bytes: self.link_sessions.max_bytes,
            settle_timeout_ms: self.limits.settle_timeout_ms,
            tree_batch_bytes: crate::router::tree_batch_bytes(l.max_frame_bytes),
        };
        let history = self.validate_history()?;
        let s = &self.link_sessions;
        if s.window_ms > MAX_LINK_WINDOW_MS {
            return Err(ConfigError::Invalid(format!(
                "link_sessions.window_ms must be at most {MAX_LINK_WINDOW_MS} (an hour)"
            )));
        }
        if s.max_bytes < MIN_LINK_BYTES {
            return Err(ConfigError::Invalid(format!(
                "link_sessions.max_bytes must be at least {MIN_LINK_BYTES}"
            )));
        }
        let sessions =
            crate::resume::Settings { window: s.window_ms, max_bytes: s.max_bytes, ..Default::default() };
        let client_window_ms = self.client_sessions.window_ms;
        if client_window_ms > MAX_LINK_WINDOW_MS {
            return Err(ConfigError::Invalid(format!(
                "client_sessions.window_ms must be at most {MAX_LINK_WINDOW_MS} (an hour)"
            )));
        }
        self.auth.compile().map_err(|e| ConfigError::Invalid(format!("auth: {e}")))?;
        Ok(Settings { name, neighbours, router, history, sessions, client_window_ms })
    }

    fn validate_history(&self) -> Result<Option<HistorySettings>, ConfigError> {
        let h = &self.history_store;
        let invalid = |what: String| ConfigError::Invalid(what);
        let mut entries: Vec<&str> = self.history.iter().map(|h| h.filter.as_str()).collect();
        if self.workflows {
            for filter in WORKFLOW_HISTORY {
                if !entries.contains(&filter) {
                    entries.push(filter);
                }
            }
        }
        let filters = entries
            .into_iter()
            .enumerate()
            .map(|(i, entry)| {
                let sub: padres_lang::Subscription = entry.parse().map_err(|e: ParseError| {
                    let why = match &e.kind {
                        ParseErrorKind::Invalid(InvalidMessage::RelativeTime(t)) => format!(
                            "a stored filter is fixed when the broker starts, so it cannot use the relative time '{t}' (resolved when a subscription is issued): write an absolute time, or keep only recent publications with history_store.max_age"
                        ),
                        _ => e.to_string(),
                    };
                    invalid(format!("history filter {} {entry:?}: {why}", i + 1))
                })?;
                if sub.predicates().iter().any(|p| p.variable().is_some()) {
                    return Err(invalid(format!(
                        "history filter {} {entry:?}: a stored filter cannot use variables ($S$, $I$)",
                        i + 1,
                    )));
                }
                Ok(sub)
            })
            .collect::<Result<Vec<_>, _>>()?;
        // An attribute named twice (in the file and again with --history-index) is one index.
        let mut indexed: Vec<Name> = Vec::new();
        let extra = if self.workflows { &WORKFLOW_INDEX[..] } else { &[] };
        for attr in h.index.iter().map(String::as_str).chain(extra.iter().copied()) {
            let name = Name::new(attr).map_err(|e| invalid(format!("history_store.index: {e}")))?;
            if !indexed.contains(&name) {
                indexed.push(name);
            }
        }
        let max_age_ms = match h.max_age.trim() {
            "" => None,
            text => Some(padres_lang::time::parse_duration(text).filter(|&ms| ms > 0).ok_or_else(|| {
                invalid(format!(
                    "history_store.max_age {text:?}: expected a duration such as 12h or 7d, or \"\" to keep for ever"
                ))
            })?),
        };
        for (name, value) in [
            ("history_store.queue", u64::try_from(h.queue).unwrap_or(u64::MAX)),
            ("history_store.query_timeout_ms", h.query_timeout_ms),
            ("history_store.max_results", h.max_results),
        ] {
            if value == 0 {
                return Err(invalid(format!("{name} must be at least 1")));
            }
        }
        // The writer's queue is allocated whole when the broker starts.
        if h.queue > MAX_HISTORY_QUEUE {
            return Err(invalid(format!("history_store.queue must be at most {MAX_HISTORY_QUEUE}")));
        }
        if filters.is_empty() {
            return Ok(None);
        }
        let store = StoreOptions {
            durability: h.durability,
            indexed,
            max_age_ms,
            max_rows: (h.max_rows > 0).then_some(h.max_rows),
            max_bytes: (h.max_bytes > 0).then_some(h.max_bytes),
        };
        Ok(Some(HistorySettings { filters, store, queue: h.queue }))
    }

    /// The configuration as a commented TOML file (what `padres-broker config` prints).
    pub fn to_commented_toml(&self) -> String {
        let value = |text: &str| toml::Value::String(text.to_owned()).to_string();
        let list = |items: &[String]| {
            toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect()).to_string()
        };
        let mut out = String::new();
        let _ = writeln!(out, "# padres-broker configuration. Every option is shown with its value;");
        let _ = writeln!(out, "# flags given on the command line override the file.\n");
        let _ =
            writeln!(out, "# The broker's name, unique in the federation (it prefixes every id it assigns).");
        let _ = writeln!(out, "name = {}\n", value(&self.name));
        let _ = writeln!(out, "# Address and UDP port to listen on for QUIC.");
        let _ = writeln!(out, "listen = {}\n", value(&self.listen.to_string()));
        let _ = writeln!(
            out,
            "# Address and TCP port of the HTTP listener: the web monitor at /, Prometheus metrics at /metrics, JSON"
        );
        let _ = writeln!(
            out,
            "# at /api/stats, /api/links, /api/routes, /api/detectors, /api/history and /api/federation."
        );
        let _ = writeln!(out, "# Off unless set; plain HTTP unless http_tls is set.");
        match &self.http {
            Some(http) => {
                let _ = writeln!(out, "http = {}\n", value(&http.to_string()));
            }
            None => {
                let _ = writeln!(out, "# http = \"127.0.0.1:7780\"\n");
            }
        }
        let _ =
            writeln!(out, "# Also serve the gateway on the HTTP listener: publish (POST /api/publish) and");
        let _ = writeln!(out, "# subscribe (GET /api/subscribe) over HTTP, as the principal and token of an");
        let _ = writeln!(out, "# 'Authorization: Bearer NAME:TOKEN' header (anonymous without one), held to");
        let _ = writeln!(out, "# its permits as a QUIC client is.");
        let _ = writeln!(out, "http_gateway = {}\n", self.http_gateway);
        let _ = writeln!(
            out,
            "# Who may read /metrics and the read-only /api views (the monitor's data): \"open\","
        );
        let _ = writeln!(
            out,
            "# \"clients\" (what a client needs to connect: a token where anonymous clients are"
        );
        let _ = writeln!(out, "# refused) or \"auto\" (open on a loopback address, as clients elsewhere).");
        let _ =
            writeln!(out, "# /api/routes and /api/detectors always need the routes right, as padres broker");
        let _ = writeln!(out, "# routes does.");
        let views = match self.http_views {
            HttpViews::Auto => "auto",
            HttpViews::Open => "open",
            HttpViews::Clients => "clients",
        };
        let _ = writeln!(out, "http_views = {}\n", value(views));
        let _ =
            writeln!(out, "# Serve the HTTP listener over HTTPS with the broker's own certificate (the one");
        let _ =
            writeln!(out, "# its QUIC clients verify: cert.pem in the data dir, or the configured cert).");
        let _ = writeln!(out, "http_tls = {}\n", self.http_tls);
        let _ =
            writeln!(out, "# How often (ms) the broker publishes a report on itself on the reserved class");
        let _ =
            writeln!(out, "# 'padres_broker' (neighbours, counters), which any client may subscribe to and");
        let _ =
            writeln!(out, "# the HTTP listener's /api/federation shows; 0: never (then no federation view");
        let _ = writeln!(
            out,
            "# includes this broker). From {MIN_MONITOR_INTERVAL_MS} to {MAX_MONITOR_INTERVAL_MS} otherwise."
        );
        let _ = writeln!(out, "monitor_interval_ms = {}\n", self.monitor_interval_ms);
        let _ = writeln!(out, "# Neighbour brokers to connect to, as \"quic://HOST:PORT\".");
        let _ = writeln!(out, "neighbours = {}\n", list(&self.neighbours));
        let _ =
            writeln!(out, "# Certificates (PEM) trusted when connecting to neighbours, e.g. their cert.pem.");
        let certs: Vec<String> = self.peer_certs.iter().map(|p| p.display().to_string()).collect();
        let _ = writeln!(out, "peer_certs = {}\n", list(&certs));
        let _ = writeln!(
            out,
            "# Certificates (PEM) of the brokers that may dial in, e.g. their cert.pem; when set"
        );
        let _ = writeln!(out, "# (or federation_ca is), other brokers dialling in are refused.");
        let accepted: Vec<String> = self.accept_brokers.iter().map(|p| p.display().to_string()).collect();
        let _ = writeln!(out, "accept_brokers = {}\n", list(&accepted));
        let _ =
            writeln!(out, "# The federation's CA certificate (PEM). When set, broker links use mutual TLS:");
        let _ =
            writeln!(out, "# this broker's cert.pem must be issued by it (padres-broker cert issue), and");
        let _ = writeln!(out, "# brokers without a certificate from it are refused. Clients need none.");
        match &self.federation_ca {
            Some(ca) => {
                let _ = writeln!(out, "federation_ca = {}\n", value(&ca.display().to_string()));
            }
            None => {
                let _ = writeln!(out, "# federation_ca = \"federation/ca.pem\"\n");
            }
        }
        let _ = writeln!(out, "# Do not verify neighbours' certificates. Development only: anyone can then");
        let _ = writeln!(out, "# pose as a neighbour.");
        let _ = writeln!(out, "insecure = {}\n", self.insecure);
        let _ = writeln!(out, "# Directory for the broker's certificate, key and history.");
        let _ = writeln!(out, "data_dir = {}\n", value(&self.data_dir.display().to_string()));
        let _ = writeln!(out, "# DNS names and IP addresses other hosts reach this broker by, put in the");
        let _ = writeln!(out, "# self-signed certificate made on first start (one made already is kept).");
        let _ = writeln!(out, "cert_hosts = {}\n", list(&self.cert_hosts));
        let _ =
            writeln!(out, "# Covering: \"off\", \"lazy\" (hold covered subscriptions back) or \"active\"");
        let _ = writeln!(out, "# (also withdraw them). Fewer subscriptions on links; the same deliveries.");
        let covering = match self.covering {
            CoveringMode::Off => "off",
            CoveringMode::Lazy => "lazy",
            CoveringMode::Active => "active",
        };
        let _ = writeln!(out, "covering = {}\n", value(covering));
        let _ = writeln!(
            out,
            "# Allow cycles in the overlay (per-advertisement trees; subscriptions are covered per tree)."
        );
        let _ = writeln!(out, "cycles = {}\n", self.cycles);
        let _ =
            writeln!(out, "# Let clients drop this broker's links on purpose (padres broker drop-link), for");
        let _ =
            writeln!(out, "# fault injection. Never where others depend on it: any client could partition.");
        let _ = writeln!(out, "allow_drop_link = {}\n", self.allow_drop_link);
        let _ =
            writeln!(out, "# Transparent huge pages for the broker's memory: faster over large tables (many");
        let _ = writeln!(
            out,
            "# composite subscriptions), but memory grows in 2 MiB steps and keeps what bursts took."
        );
        let _ = writeln!(out, "huge_pages = {}\n", self.huge_pages);
        let _ =
            writeln!(out, "# Keep what job agents and padres workflow read back in the history store (the");
        let _ = writeln!(
            out,
            "# classes agent_ctl, trigger, job_status, agent_load), with appl and gid indexed,"
        );
        let _ = writeln!(out, "# beside the [[history]] filters. Retention as [history_store] says.");
        let _ = writeln!(out, "workflows = {}\n", self.workflows);
        let _ = writeln!(out, "[limits]");
        let _ = writeln!(out, "# Largest frame accepted from a peer, in bytes (1024 to 64 MiB).");
        let _ = writeln!(out, "max_frame_bytes = {}", self.limits.max_frame_bytes);
        let _ = writeln!(
            out,
            "# Most subscriptions one client may hold (a composite one counts one per atomic part)."
        );
        let _ = writeln!(out, "max_subscriptions_per_client = {}", self.limits.max_subscriptions_per_client);
        let _ = writeln!(out, "# Most simultaneous connections, clients and brokers together.");
        let _ = writeln!(out, "max_connections = {}", self.limits.max_connections);
        let _ = writeln!(out, "# Bytes queued for one slow client before it is disconnected.");
        let _ = writeln!(out, "max_queued_bytes_per_client = {}", self.limits.max_queued_bytes_per_client);
        let _ = writeln!(
            out,
            "# Milliseconds advertise/subscribe/unadv wait to settle (reach every broker they must)"
        );
        let _ =
            writeln!(out, "# before they are answered with what has settled (counted, logged); at least 1.");
        let _ = writeln!(out, "settle_timeout_ms = {}", self.limits.settle_timeout_ms);
        let s = &self.link_sessions;
        let _ = writeln!(out, "\n[link_sessions]");
        let _ =
            writeln!(out, "# How long (ms) a neighbour's link may be down and return with nothing lost or");
        let _ =
            writeln!(out, "# doubled: messages for it wait, routes stay. Past it, or past max_bytes, the");
        let _ =
            writeln!(out, "# two forget each other's routes and start over. 0: at once. At most an hour.");
        let _ = writeln!(out, "window_ms = {}", s.window_ms);
        let _ = writeln!(out, "# Estimated bytes kept for one neighbour until it acknowledges them.");
        let _ = writeln!(out, "max_bytes = {}", s.max_bytes);
        let _ = writeln!(out, "\n[client_sessions]");
        let _ = writeln!(out, "# How long (ms) a client whose connection was lost may take to reconnect and");
        let _ =
            writeln!(out, "# resume with nothing lost or doubled: its subscriptions stay, what is routed to");
        let _ = writeln!(
            out,
            "# it waits (up to limits.max_queued_bytes_per_client). 0: at once. At most an hour."
        );
        let _ = writeln!(out, "window_ms = {}", self.client_sessions.window_ms);
        let c = &self.composite;
        let _ = writeln!(out, "\n[composite]");
        let _ = writeln!(
            out,
            "# Where a client's composite subscription is detected: \"network\" (where its parts'"
        );
        let _ = writeln!(
            out,
            "# publications meet) or \"subscriber\" (at its own broker, as PADRES 2.1; to compare)."
        );
        let detection = match c.detection {
            Detection::Network => "network",
            Detection::Subscriber => "subscriber",
        };
        let _ = writeln!(out, "detection = {}", value(detection));
        let _ = writeln!(
            out,
            "# Detect on a thread of its own beside the router's (false: the router detects itself)."
        );
        let _ = writeln!(out, "detection_thread = {}", c.detection_thread);
        let _ =
            writeln!(out, "# Partial matches stored per composite subscription, and at this broker in all;");
        let _ = writeln!(out, "# past either, the longest stored is evicted (counted in broker stats).");
        let _ = writeln!(
            out,
            "max_partial_matches_per_subscription = {}",
            c.max_partial_matches_per_subscription
        );
        let _ = writeln!(out, "max_partial_matches = {}", c.max_partial_matches);
        let _ = writeln!(
            out,
            "# Estimated bytes they may hold at this broker (512 each plus their publications)."
        );
        let _ = writeln!(out, "max_partial_match_bytes = {}", c.max_partial_match_bytes);
        let _ = writeln!(
            out,
            "# Most matches one publication forms at one operator (the rest are dropped, counted)."
        );
        let _ = writeln!(out, "max_pairs_per_publication = {}", c.max_pairs_per_publication);
        let _ = writeln!(
            out,
            "# How late (ms after its stamp) a publication may arrive and still pair as in order;\n\
             # windows, and bindings ended by until, keep their partial matches this much longer."
        );
        let _ = writeln!(out, "lateness_ms = {}", c.lateness_ms);
        let h = &self.history_store;
        let _ = writeln!(out, "\n[history_store]");
        let _ = writeln!(out, "# Runs only with at least one [[history]] filter below; the database is");
        let _ = writeln!(out, "# data_dir/history.sqlite. Durability: \"full\" (a publication acknowledged");
        let _ = writeln!(out, "# through publish_acked here is on disk) or \"normal\" (acknowledged when");
        let _ = writeln!(out, "# queued; a crash loses what was queued and not yet written, milliseconds).");
        let durability = match h.durability {
            Durability::Full => "full",
            Durability::Normal => "normal",
        };
        let _ = writeln!(out, "durability = {}", value(durability));
        let _ = writeln!(out, "# Attributes with an index of their own (class and time always have one).");
        let _ = writeln!(out, "index = {}", list(&h.index));
        let _ = writeln!(out, "# Delete rows older than this (\"12h\", \"7d\"); \"\": keep for ever.");
        let _ = writeln!(out, "max_age = {}", value(&h.max_age));
        let _ = writeln!(out, "# Keep at most this many rows, the oldest stored going first; 0: no limit.");
        let _ = writeln!(out, "max_rows = {}", h.max_rows);
        let _ = writeln!(
            out,
            "# Keep the pages in use under this many bytes, the oldest stored going first; 0: no limit."
        );
        let _ = writeln!(out, "max_bytes = {}", h.max_bytes);
        let _ = writeln!(out, "# Publications waiting for the writer; past it they are dropped and counted.");
        let _ = writeln!(out, "queue = {}", h.queue);
        let _ = writeln!(out, "# How long a historic subscription's query waits for the stores beyond this");
        let _ =
            writeln!(out, "# broker (ms) before its end-of-history marker names those that did not answer.");
        let _ = writeln!(out, "query_timeout_ms = {}", h.query_timeout_ms);
        let _ = writeln!(out, "# Most stored publications delivered to one historic subscription.");
        let _ = writeln!(out, "max_results = {}", h.max_results);
        let _ =
            writeln!(out, "\n# Who clients are and what they may do (docs/security.md). anonymous: clients");
        let _ = writeln!(out, "# that give no token may connect, as principal \"anonymous\". [auth.tokens]:");
        let _ =
            writeln!(out, "# principal = the Argon2id hash of its token (padres-broker auth hash-token).");
        let _ = writeln!(
            out,
            "# [auth.groups]: group = [principals]. [[auth.permit]]: to = [principals, groups,"
        );
        let _ = writeln!(
            out,
            "# \"*\" or \"anonymous\"], advertise = [filters], subscribe = [filters], history ="
        );
        let _ = writeln!(
            out,
            "# true|false, routes = true|false, and optionally max_connections, max_subscriptions,"
        );
        let _ = writeln!(
            out,
            "# max_publish_rate; ${{principal}} in a filter is the principal's name. With no permit, anything"
        );
        let _ = writeln!(out, "# goes; with one, what no permit allows is denied.");
        #[derive(Serialize)]
        struct AuthOnly<'a> {
            auth: &'a AuthConfig,
        }
        let _ = write!(out, "{}", toml::to_string(&AuthOnly { auth: &self.auth }).unwrap_or_default());
        let _ = writeln!(out, "\n# What the history store keeps, one [[history]] entry per filter.");
        if self.history.is_empty() {
            let _ = writeln!(out, "# [[history]]\n# filter = \"[class,eq,'job_status']\"");
        }
        for entry in &self.history {
            let _ = writeln!(out, "[[history]]\nfilter = {}", value(&entry.filter));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_defaults_are_a_valid_configuration_that_reads_back() {
        let text = Config::default().to_commented_toml();
        let back: Config = toml::from_str(&text).expect("printed config parses");
        assert_eq!(back, Config::default());
        back.validate().expect("defaults are valid");
        let custom = Config {
            name: "B7".into(),
            neighbours: vec!["quic://10.0.0.2:7700".into(), "quic://[::1]:7701".into()],
            covering: CoveringMode::Active,
            federation_ca: Some("fed/ca.pem".into()),
            accept_brokers: vec!["b2/cert.pem".into(), "b3/cert.pem".into()],
            cert_hosts: vec!["b7.example".into(), "10.0.0.7".into()],
            huge_pages: true,
            workflows: true,
            http_views: HttpViews::Clients,
            ..Config::default()
        };
        let back: Config = toml::from_str(&custom.to_commented_toml()).expect("parses");
        assert_eq!(back, custom);
        let stored = Config {
            history: vec![
                HistoryFilter { filter: "[class,eq,'job_status']".into() },
                HistoryFilter { filter: "[class,eq,'trigger']".into() },
            ],
            history_store: HistoryStoreConfig {
                durability: Durability::Full,
                index: vec!["appl".into(), "gid".into()],
                max_age: "7d".into(),
                max_rows: 1000,
                max_bytes: 1 << 30,
                queue: 10,
                query_timeout_ms: 250,
                max_results: 7,
            },
            ..Config::default()
        };
        let back: Config = toml::from_str(&stored.to_commented_toml()).expect("parses");
        assert_eq!(back, stored);
        let history = back.validate().expect("valid").history.expect("a store");
        assert_eq!(history.filters.len(), 2);
        assert_eq!(history.store.max_age_ms, Some(7 * 86_400_000));
        assert_eq!(history.store.max_rows, Some(1000));
        assert_eq!(history.store.max_bytes, Some(1 << 30));
    }

    #[test]
    fn bad_history_settings_are_named() {
        let err = |c: Config| c.validate().expect_err("invalid").to_string();
        let with = |filter: &str| Config {
            history: vec![HistoryFilter { filter: filter.into() }],
            ..Config::default()
        };
        let e = err(with("[class,eq,'a'],[x,>]"));
        assert!(e.contains("history filter 1") && e.contains("expected"), "{e}");
        let e = err(with("[class,eq,'a'],[x,eq,$S$v]"));
        assert!(e.contains("cannot use variables"), "{e}");
        let e = err(with("[class,eq,'a'],[time,>=,'now-1h']"));
        assert!(e.contains("relative time 'now-1h'") && e.contains("history_store.max_age"), "{e}");
        assert!(!e.contains("Parser::at"), "no advice only a programmer can act on: {e}");
        let store = |h: HistoryStoreConfig| Config { history_store: h, ..with("[class,eq,'a']") };
        let e = err(store(HistoryStoreConfig { max_age: "a week".into(), ..HistoryStoreConfig::default() }));
        assert!(e.contains("history_store.max_age"), "{e}");
        let e = err(store(HistoryStoreConfig { max_bytes: 50_000, ..HistoryStoreConfig::default() }));
        assert!(e.contains("history_store.max_bytes must be 0 (no limit) or at least"), "{e}");
        let e = err(store(HistoryStoreConfig {
            index: vec!["no spaces".into()],
            ..HistoryStoreConfig::default()
        }));
        assert!(e.contains("history_store.index"), "{e}");
        let e = err(store(HistoryStoreConfig { queue: usize::MAX, ..HistoryStoreConfig::default() }));
        assert!(e.contains("history_store.queue must be at most"), "{e}");
        // An attribute named twice is indexed once (it used to stop the broker at start).
        let twice = store(HistoryStoreConfig {
            index: vec!["appl".into(), "gid".into(), "appl".into()],
            ..HistoryStoreConfig::default()
        });
        let indexed = twice.validate().expect("valid").history.expect("a store").store.indexed;
        assert_eq!(indexed.iter().map(Name::as_str).collect::<Vec<_>>(), ["appl", "gid"]);
        assert!(toml::from_str::<Config>("[history_store]\ndurability = \"sometimes\"\n").is_err());
        assert_eq!(Config::default().validate().expect("valid").history, None, "no filter, no store");
    }

    #[test]
    fn workflows_keeps_the_workflow_classes_beside_the_filters_given() {
        let config = Config {
            workflows: true,
            history: vec![
                HistoryFilter { filter: "[class,eq,'stock']".into() },
                HistoryFilter { filter: "[class,eq,'job_status']".into() },
            ],
            history_store: HistoryStoreConfig { index: vec!["gid".into()], ..HistoryStoreConfig::default() },
            ..Config::default()
        };
        let history = config.validate().expect("valid").history.expect("a store");
        let filters: Vec<String> = history.filters.iter().map(ToString::to_string).collect();
        let expected: Vec<String> =
            ["[class,eq,'stock']", "[class,eq,'job_status']", "[class,eq,'agent_ctl']"]
                .into_iter()
                .chain(["[class,eq,'trigger']", "[class,eq,'agent_load']"])
                .map(|f| f.parse::<padres_lang::Subscription>().expect("valid").to_string())
                .collect();
        assert_eq!(filters, expected, "each class once, the ones given first");
        let indexed: Vec<&str> = history.store.indexed.iter().map(Name::as_str).collect();
        assert_eq!(indexed, ["gid", "appl"]);
        // Alone, it is a store.
        let alone = Config { workflows: true, ..Config::default() }.validate().expect("valid");
        assert_eq!(alone.history.expect("a store").filters.len(), WORKFLOW_HISTORY.len());
        let back: Config = toml::from_str("workflows = true").expect("parses");
        assert!(back.workflows);
    }

    #[test]
    fn bad_values_are_named() {
        let err = |c: Config| c.validate().expect_err("invalid").to_string();
        assert!(err(Config { name: "no spaces".into(), ..Config::default() }).contains("name:"));
        assert!(
            err(Config { neighbours: vec!["tcp://x:1".into()], ..Config::default() }).contains("quic://")
        );
        // Covering and cycles go together.
        assert!(
            Config { covering: CoveringMode::Active, cycles: true, ..Config::default() }.validate().is_ok()
        );
        let limits = LimitsConfig { max_connections: 0, ..LimitsConfig::default() };
        assert!(err(Config { limits, ..Config::default() }).contains("limits.max_connections"));
        let unknown = toml::from_str::<Config>("nmae = 'x'").expect_err("unknown field").to_string();
        assert!(unknown.contains("nmae"), "{unknown}");
    }

    #[test]
    fn the_composite_section_sets_detection_and_bounds() {
        let config: Config = toml::from_str(
            "[composite]\ndetection = \"subscriber\"\nmax_partial_matches = 500\nlateness_ms = 250\n",
        )
        .expect("parses");
        let options = config.validate().expect("valid").router;
        assert!(options.detect_at_subscriber);
        assert!(options.offload_detection, "a detection thread unless configured off");
        let inline: Config = toml::from_str("[composite]\ndetection_thread = false\n").expect("parses");
        assert!(!inline.validate().expect("valid").router.offload_detection);
        assert_eq!((options.detector_bounds.per_broker, options.detector_bounds.lateness_ms), (500, 250));
        assert_eq!(options.detector_bounds.per_detector, Bounds::DEFAULT.per_detector);
        let zero = Config {
            composite: CompositeConfig { max_partial_matches: 0, ..CompositeConfig::default() },
            ..Config::default()
        };
        assert_eq!(
            zero.validate().expect_err("invalid").to_string(),
            "invalid configuration: composite.max_partial_matches must be at least 1"
        );
        assert!(toml::from_str::<Config>("[composite]\ndetection = \"everywhere\"\n").is_err());
    }

    #[test]
    fn neighbour_uris() {
        assert_eq!(
            parse_neighbour("quic://b2.example:7700").ok(),
            Some(NeighbourAddr { host: "b2.example".into(), port: 7700 })
        );
        assert_eq!(
            parse_neighbour("quic://[::1]:9").ok(),
            Some(NeighbourAddr { host: "::1".into(), port: 9 })
        );
        for bad in ["b2:7700", "quic://:7700", "quic://b2", "quic://b2:0", "quic://b2:99999"] {
            assert!(parse_neighbour(bad).is_err(), "{bad}");
        }
    }
}
