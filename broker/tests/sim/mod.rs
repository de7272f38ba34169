//! The simulator lives in the library (`padres_broker::sim`), where the benchmarks use it
//! too; the scenario tables are the tests' own.

#![allow(dead_code, unreachable_pub)]

pub mod scenario;

pub use padres_broker::sim::*;
