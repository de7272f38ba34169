//! padres-client: the client side of padres-rs.
//!
//! - [`connection`]: the async client ([`Client`]): connect over QUIC trusting a broker's
//!   certificate, send messages and get their ids or errors, receive notifications.
//! - [`check`]: the offline part of the `padres` command-line tool (validate messages and
//!   print their canonical form).
//! - [`json`]: notifications as JSON lines, for `padres sub --json`.
//!
//! Not yet: reconnecting and re-issuing after a broker restart, the `padres` pub/sub/session
//! verbs.

pub mod check;
pub mod connection;
pub mod json;

pub use connection::{Client, ClientError};
