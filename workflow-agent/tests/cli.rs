//! The `padres-agent` command line: its help, and a broker it cannot use refused with a
//! clear message and a non-zero exit. (Serving is tested with a real broker in
//! `tests/e2e_agent.rs`, which runs this binary.)

use std::process::Command;

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_padres-agent")).args(args).output().expect("padres-agent runs")
}

#[test]
fn help_names_every_option() {
    let out = agent(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for option in ["--name", "--broker", "--ca", "--work-dir", "--max-parallel"] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
}

#[test]
fn a_broker_not_given_as_a_quic_uri_is_refused() {
    let work = std::env::temp_dir().join(format!("padres-agent-cli-{}", std::process::id()));
    let out =
        agent(&["--name", "a1", "--broker", "127.0.0.1:7700", "--work-dir", &work.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("quic://HOST:PORT"), "{err}");
}
