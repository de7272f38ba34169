//! `padres-broker`: one broker of a padres-rs federation.
//!
//! Only the command-line surface exists so far; routing and the QUIC transport
//! are being built (see the README's status section). Running it says so and exits
//! non-zero rather than pretending to serve.

use std::process::ExitCode;

use clap::Parser;

/// A padres-rs broker: routes publications by content between clients and neighbour
/// brokers.
///
/// Not built yet: this binary currently only describes itself. See the README's status
/// section for what exists.
#[derive(Debug, Parser)]
#[command(name = "padres-broker", version)]
struct Args {}

fn main() -> ExitCode {
    let _args = Args::parse();
    eprintln!(
        "padres-broker {}: the broker process (routing, QUIC transport) is not built yet; \
         so far there are the message language (padres-lang) and the matching engine \
         (the padres-broker library)",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(2)
}
