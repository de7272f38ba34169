//! Stamps: where and when a publication entered the federation.
//!
//! The broker a publisher is connected to stamps each publication it accepts with its clock
//! and its own name and counter. Stamps order publications for the composite operators that
//! need an order (`;`, `Times`, `within`): every broker that detects a pattern sees the same
//! stamps, so the answer does not depend on where it is detected. Equal times are ordered by
//! broker name, then by that broker's counter.
//!
//! What is assumed of clocks: stamps from one broker never go backwards (a broker stamps the
//! later of its clock and its last stamp), and brokers' clocks agree to within what users
//! expect of "before" across brokers. Two publications stamped on different brokers within
//! the clocks' disagreement are in a definite order, but perhaps not the one a wall clock
//! would give.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::name::Name;
use crate::publication::Publication;

/// When (milliseconds since the Unix epoch, by the stamping broker's clock) and where (the
/// broker's name and counter) a publication entered the federation. Ordered by time, then
/// broker, then counter.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// Milliseconds since the Unix epoch.
    pub time: u64,
    /// The broker that stamped it.
    pub origin: Name,
    /// That broker's publication counter.
    pub seq: u64,
}

impl Stamp {
    /// The stamp `origin/seq` at `time`.
    pub fn new(time: u64, origin: Name, seq: u64) -> Self {
        Self { time, origin, seq }
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}/{}", self.time, self.origin, self.seq)
    }
}

/// A publication with its stamp, as composite detectors see it and as composite matches
/// carry it between brokers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stamped {
    /// When and where it entered the federation.
    pub stamp: Stamp,
    /// The publication.
    pub publication: Arc<Publication>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_orders_first_then_broker_then_counter() {
        let b = |name: &str| Name::new(name).expect("name");
        let early = Stamp::new(5, b("Z"), 9);
        let tie_a = Stamp::new(6, b("A"), 7);
        let tie_b = Stamp::new(6, b("B"), 1);
        let tie_b2 = Stamp::new(6, b("B"), 2);
        let mut all = vec![tie_b2.clone(), tie_a.clone(), early.clone(), tie_b.clone()];
        all.sort();
        assert_eq!(all, [early, tie_a, tie_b, tie_b2]);
    }
}
