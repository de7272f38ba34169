//! padres-broker: one broker of a padres-rs federation.
//!
//! Where things live (each concept in a file named after it):
//!
//! - [`router`]: publish–subscribe–advertise routing as a sans-IO state machine
//!   ([`router::Router`]): `router/mod.rs` the tables and rules, `router/covering.rs`
//!   covering, `router/cycles.rs` cyclic overlays, `router/settle.rs` settled replies,
//!   `router/rejoin.rs` restarted neighbours.
//! - [`auth`]: who a client is (tokens) and what it may advertise, subscribe and read
//!   (permissions as filters), sans-IO; the router enforces them.
//! - [`links`]: the link policy, sans-IO too: redial backoff, duplicate links, stuck links.
//! - [`resume`]: link sessions, sans-IO: numbered messages between neighbours, kept until
//!   acknowledged, so that a link that drops and returns loses and doubles nothing.
//! - [`outbox`]: how link and client sessions' queues of unacknowledged messages give
//!   memory back after a burst.
//! - [`matching`]: the indexed matching engine ([`matching::SubscriptionIndex`]) and the
//!   advertisement overlap index ([`matching::AdvertisementIndex`]).
//! - [`config`]: the broker's configuration ([`config::Config`]), read from TOML and
//!   flags, validated, printable with its defaults.
//! - [`net`]: the I/O shell: serving and accepting (`net/mod.rs`), a connection's
//!   handshake (`net/accept.rs`), the router task that owns the router and the link policy
//!   (`net/router_task.rs`), client sessions (`net/session.rs`), neighbour links
//!   (`net/link.rs`), batched writes (`net/write.rs`), composite detection on a thread of
//!   its own ([`net::detection`]), trust and identity (`net/tls.rs`,
//!   [`net::cert`]), and the optional HTTP listener and gateway (`net/http.rs`,
//!   `net/gateway.rs`). The hello/welcome handshake itself is `padres_transport::handshake`.
//!
//! - [`detector`]: composite detection, sans-IO: the detectors of one broker, their stored
//!   partial matches and bounds.
//!
//! - [`memory`]: how the process asks the kernel for memory (transparent huge pages off
//!   unless configured).
//!
//! - [`sim`]: a deterministic in-memory federation of routers in virtual time, for tests and
//!   benchmarks.
//!
//! - [`monitor`]: brokers' reports on themselves (a reserved class) and the federation
//!   view built from them.
//! - [`metrics`]: the broker's counters in the Prometheus text format, for the HTTP
//!   listener (`net/http.rs`), which also serves them as JSON.
//! - [`traffic`]: what each neighbour link carried, per message class, counted as links
//!   write.
//!
//! - [`history`]: the history store: a SQLite database of the publications this broker's
//!   history filters select (`history/mod.rs`), and the thread that writes it
//!   (`history/writer.rs`).

pub mod auth;
pub mod config;
pub mod detector;
pub mod history;
pub mod links;
pub mod matching;
pub mod memory;
pub mod metrics;
pub mod monitor;
pub mod net;
pub mod outbox;
pub mod resume;
pub mod router;
pub mod sim;
pub mod traffic;
