//! padres-client: the client side of padres-rs.
//!
//! - [`connection`]: the async client ([`Client`], set up by [`Connect`]): connect over QUIC
//!   trusting a broker's certificate, send messages and get their ids or errors, receive
//!   notifications, ask for stats and routes, reconnect and re-issue after a broker restart.
//! - [`check`]: the offline part of the `padres` command-line tool (validate messages and
//!   print their canonical form).
//! - [`notification`]: [`Notification`], a matching publication or a composite match.
//! - [`json`]: notifications as JSON lines, for `padres sub --json` and `padres session`.
//! - [`session`]: `padres session`, a scripted client (commands in, JSON lines out).

pub mod check;
pub mod connection;
pub mod json;
pub mod notification;
pub mod session;

pub use connection::{Ack, Client, ClientError, Connect, Notifications, ProtocolError};
pub use notification::Notification;
pub use padres_transport::Trust;
