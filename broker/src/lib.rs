//! padres-broker: one broker of a padres-rs federation.
//!
//! - [`matching`]: the indexed matching engine ([`matching::SubscriptionIndex`]) and the
//!   advertisement overlap index ([`matching::AdvertisementIndex`]).
//! - [`router`]: publish–subscribe–advertise routing as a sans-IO state machine
//!   ([`router::Router`]).
//! - [`config`]: the broker's configuration ([`config::Config`]), read from TOML and
//!   flags, validated, printable with its defaults.
//! - [`net`]: the I/O shell: the QUIC endpoint, connection tasks that only frame and
//!   decode, the router task, neighbour links with redial and resync, limits, and the
//!   TLS identity and federation certificates ([`net::cert`]).
//!
//! Composite detection and history are not built yet.

pub mod config;
pub mod matching;
pub mod net;
pub mod router;
