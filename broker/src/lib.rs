//! padres-broker: one broker of a padres-rs federation.
//!
//! - [`matching`]: the indexed matching engine ([`matching::SubscriptionIndex`]) and the
//!   advertisement overlap index ([`matching::AdvertisementIndex`]).
//! - [`router`]: publish–subscribe–advertise routing as a sans-IO state machine
//!   ([`router::Router`]).
//!
//! Covering, cyclic overlays, composite detection, history and the QUIC transport are not
//! built yet.

pub mod matching;
pub mod router;
