//! The `padres-broker` binary's configuration surface, run as a real process.

use std::process::Command;

use padres_broker::config::Config;

fn broker(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_padres-broker")).args(args).output().expect("runs")
}

#[test]
fn config_prints_defaults_that_read_back() {
    let out = broker(&["config"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains("# Largest frame accepted"), "commented: {text}");
    let dir = std::env::temp_dir().join(format!("padres-cli-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("broker.toml");
    std::fs::write(&file, &text).expect("write");
    assert_eq!(Config::from_file(&file).expect("valid"), Config::default());

    // Flags win over the file, and the result prints back.
    let path = file.to_str().expect("utf-8 path");
    let out = broker(&["config", "--config", path, "--name", "B2", "--neighbour", "quic://127.0.0.1:7701"]);
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains("name = \"B2\"") && text.contains("quic://127.0.0.1:7701"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_configuration_is_refused_with_the_reason() {
    let out = broker(&["--name", "not a name"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert!(err.contains("name:"), "{err}");
    let out = broker(&["--neighbour", "tcp://x:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("quic://HOST:PORT"));
}

#[test]
fn subcommands_show_and_take_only_their_own_options() {
    let text =
        |out: std::process::Output| String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
    // The tools' help is theirs alone, not every broker flag again.
    for args in [
        &["cert", "issue", "--help"][..],
        &["cert", "ca", "--help"],
        &["auth", "hash-token", "--help"],
        &["history", "--help"],
    ] {
        let help = text(broker(args));
        assert!(!help.contains("--max-frame-bytes") && !help.contains("--history"), "{args:?}: {help}");
        assert!(help.lines().count() < 40, "{args:?}: {help}");
    }
    assert!(text(broker(&["cert", "issue", "--help"])).contains("--ca <DIR>"));
    assert!(text(broker(&["history", "--help"])).contains("--data-dir <DIR>"));
    // `config` takes the broker's options after its name; given before it, they would be
    // ignored, so they are refused, in words.
    let out = broker(&["--name", "B3", "config"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(out);
    assert!(err.contains("--name before 'config'") && err.contains("after its name"), "{err}");
    assert!(text(broker(&["config", "--name", "B3", "--workflows"])).contains("workflows = true"));
}
