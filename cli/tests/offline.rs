//! The real `padres` binary where no broker is needed: workflow files, and message
//! arguments checked before anything connects. (Tests against brokers are in the
//! workspace's `tests/` crate.)

use std::process::Command;

#[test]
fn workflow_check_and_translate() {
    let padres = || Command::new(env!("CARGO_BIN_EXE_padres"));
    let payroll = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/payroll.xml");
    let out =
        padres().args(["workflow", "translate", payroll, "--date", "2026-11-18"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "# 2026-11-18 (Wednesday): runs A B D; skipped C");
    assert_eq!(lines.len(), 4, "the date line and one envelope per agent:\n{text}");
    for line in &lines[1..] {
        let publication: padres_lang::Publication =
            line.parse().expect("each envelope is a publication in text syntax");
        assert_eq!(publication.class(), "agent_ctl");
    }

    let bad = std::env::temp_dir().join(format!("padres-bad-workflow-{}.xml", std::process::id()));
    std::fs::write(&bad, "<application name=\"t\">\n<job name=\"A\"><command>x</command><after job=\"Z\"/></job>\n</application>\n")
        .expect("written");
    let out = padres().args(["workflow", "check"]).arg(&bad).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(errors.contains(":2:1: job 'A' has no agent"), "{errors}");
    assert!(errors.contains("padres-bad-workflow-"), "each problem names the file: {errors}");
    std::fs::remove_file(&bad).ok();
}

#[test]
fn a_malformed_message_argument_is_reported_before_connecting() {
    // No broker listens on this port, and none is trusted: the typo must still be the
    // error reported.
    for args in [
        vec!["sub", "[class,eq,stock"],
        vec!["adv", "[class,eq,stock"],
        vec!["pub", "--advertise", "[class,eq,'stock']", "[class,'stock'],[price,"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_padres"))
            .args(&args)
            .args(["--broker", "quic://127.0.0.1:9"])
            .output()
            .expect("padres runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains("column"), "{args:?}: {stderr}");
        assert!(!stderr.contains("trust") && !stderr.contains("certificate"), "{args:?}: {stderr}");
    }
}
