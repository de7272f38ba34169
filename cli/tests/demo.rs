//! `padres demo`, the README's main job, runs to its end: payroll on a local federation,
//! a Friday and a Wednesday generation, every check of its summary holding, with
//! authentication and permissions on.

use std::process::Command;

#[test]
fn the_demo_runs_payroll_and_its_checks_hold() {
    let dir = std::env::temp_dir().join(format!("padres-demo-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out =
        Command::new(env!("CARGO_BIN_EXE_padres")).arg("demo").arg("--dir").arg(&dir).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("check: every job ran at most once, as its calendar says"), "{text}");
    assert!(
        text.contains("order: A, C (skipped), B, D") || text.contains("order: A, B, C (skipped), D"),
        "{text}"
    );
    // Security was on: every client authenticated, and what the permits forbid refused
    // with the right missing, by the brokers the demo configured.
    for line in [
        "a client without a token connecting: refused",
        "agent-2 advertising agent-1's statuses: refused: principal 'agent-2' may not advertise",
        "agent-3 subscribing to agent-1's commands: refused: principal 'agent-3' may not subscribe",
        "the monitor triggering payroll: refused",
        "the monitor reading deployments: refused",
        "the monitor reading statuses from history: allowed",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    let config =
        std::fs::read_to_string(dir.join("security/broker.toml")).expect("the brokers' configuration");
    assert!(config.contains("anonymous = false") && config.contains("federation_ca"), "{config}");
    {
        use std::os::unix::fs::PermissionsExt as _;
        let token = std::fs::metadata(dir.join("security/agent-1.token")).expect("a token file");
        assert_eq!(token.permissions().mode() & 0o777, 0o600, "tokens are private");
    }
    // The scripts wrote their files in the agents' work directories.
    let posted = std::fs::read_dir(dir.join("agents/agent-1/payroll")).expect("agent-1 wrote").count();
    assert_eq!(posted, 2, "one directory per generation date");
    // A directory in use is refused, with nothing touched.
    let again =
        Command::new(env!("CARGO_BIN_EXE_padres")).arg("demo").arg("--dir").arg(&dir).output().expect("runs");
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));
    let _ = std::fs::remove_dir_all(&dir);
}
