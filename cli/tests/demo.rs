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
    // What it leaves to start from holds together: each token file opens its principal
    // at a broker configured with broker.toml, and only its own.
    let config =
        padres_broker::config::Config::from_file(&dir.join("security/broker.toml")).expect("it reads");
    let auth = config.auth.compile().expect("a valid [auth]");
    for principal in ["agent-1", "agent-2", "operator", "monitor"] {
        use std::os::unix::fs::PermissionsExt as _;
        let file = dir.join(format!("security/{principal}.token"));
        let mode = std::fs::metadata(&file).expect("a token file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{principal}'s token is private");
        let token = std::fs::read_to_string(&file).expect("a token");
        assert!(auth.authenticate(principal, Some(token.trim())).is_ok(), "{principal}'s token");
        let other = if principal == "agent-1" { "agent-2" } else { "agent-1" };
        assert!(auth.authenticate(other, Some(token.trim())).is_err(), "{principal}'s token opens {other}");
    }
    assert!(config.federation_ca.is_some_and(|ca| ca.is_file()), "the brokers' CA");
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
