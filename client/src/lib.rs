//! padres-client: the client side of padres-rs.
//!
//! So far this crate holds the offline part of the `padres` command-line tool
//! ([`check`]: validate messages and print their canonical form). The async client library
//! (connect, advertise, subscribe, publish over QUIC) comes with the broker transport.

pub mod check;
