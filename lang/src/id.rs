//! Message ids: unique in the federation, written `BROKER/SEQ` (e.g. `B1/42`).
//!
//! The broker a client is connected to assigns the id of every advertisement, subscription
//! and composite subscription the client issues, from its own name and a counter, and
//! returns it in the reply; `unsub`/`unadv` name it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::InvalidMessage;
use crate::name::Name;

/// The federation-wide id of an advertisement, subscription or composite subscription.
#[derive(Clone, Debug, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MessageId {
    /// The broker that assigned it.
    pub origin: Name,
    /// That broker's counter.
    pub seq: u64,
}

/// The counter first: ids looked up in a table mostly share their origin, and differ
/// in the counter.
impl PartialEq for MessageId {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq && self.origin == other.origin
    }
}

impl std::hash::Hash for MessageId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.origin.hash(state);
        self.seq.hash(state);
    }
}

impl MessageId {
    /// The id `origin/seq`.
    pub fn new(origin: Name, seq: u64) -> Self {
        Self { origin, seq }
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.origin, self.seq)
    }
}

impl FromStr for MessageId {
    type Err = InvalidMessage;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidMessage::BadId(text.chars().take(64).collect());
        let (origin, seq) = text.rsplit_once('/').ok_or_else(bad)?;
        if !seq.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let seq = seq.parse().map_err(|_| bad())?;
        let origin = Name::new(origin).map_err(|_| bad())?;
        Ok(Self { origin, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        let id: MessageId = "broker-1/42".parse().expect("valid");
        assert_eq!(id.seq, 42);
        assert_eq!(id.to_string(), "broker-1/42");
        for bad in ["", "B1", "B1/", "/3", "B1/-3", "B1/+3", "B 1/3", "B1/99999999999999999999"] {
            assert!(bad.parse::<MessageId>().is_err(), "{bad}");
        }
    }
}
