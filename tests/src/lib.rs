//! padres-tests: end-to-end tests that need several crates (DESIGN §2: `tests/`), kept
//! apart so that no library crate depends on another only for its tests.
//!
//! - `e2e_quic.rs`: real `padres-broker` processes and `padres-client` clients on loopback
//!   ports chosen at run time.
//! - `e2e_composite.rs`: composite subscriptions across real brokers.
//! - `e2e_http.rs`: a broker's HTTP listener: `/metrics` and the JSON API.
//! - `cli.rs`: the real `padres` binary against a broker embedded in the test.
//! - `e2e_browser.rs`: the web monitor in headless Chromium.
//! - [`broker`]: starting, restarting and watching broker processes, for those tests.
//! - [`http`]: a plain HTTP client for the HTTP listener's tests.
//!
//! The binaries are other packages', so Cargo does not hand their paths to these tests;
//! [`binary`] finds them beside the test executable. `cargo test --workspace` builds them
//! (their packages have integration tests of their own); `cargo test -p padres-tests`
//! alone uses whatever was built last, so build them first
//! (`cargo build --workspace --bins`) when running this crate by itself.

pub mod broker;
pub mod http;

use std::path::PathBuf;

/// The path of workspace binary `name` (`padres-broker` or `padres`) in the target
/// directory these tests were built in.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test> → target/<profile>
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("a target directory");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is not built: run `cargo test --workspace`, or `cargo build --workspace --bins` first",
        path.display()
    );
    path
}
