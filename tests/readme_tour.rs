//! The README's five-minute tour, run as it is written: its shell lines between the
//! `tour: begin` and `tour: end` markers, in a directory of their own, with this build's
//! `padres`, `padres-broker` and `padres-agent` first on the PATH. Only the three brokers'
//! ports are changed, to ports free now (and the commands that name no broker are pointed
//! at the first of them through PADRES_BROKER, as the README's default port would be).

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tour's lines, from the README.
fn tour() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    let start = readme.find("<!-- tour: begin -->").expect("the tour's begin marker");
    let end = readme.find("<!-- tour: end -->").expect("the tour's end marker");
    let block = &readme[start..end];
    let body = block.split_once("```sh\n").expect("a sh block").1;
    body.rsplit_once("```").expect("the block ends").0.to_owned()
}

/// A UDP port free now on loopback (QUIC listens on UDP).
fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").expect("a port").local_addr().expect("its address").port()
}

#[test]
fn the_readme_tour_runs_as_written() {
    let mut script = tour();
    assert!(script.contains("padres workflow deploy") && script.contains("padres workflow history"));
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    for (i, port) in ports.iter().enumerate() {
        let written = format!("127.0.0.1:{}", 7700 + i);
        assert!(script.contains(&written), "the tour names {written}");
        script = script.replace(&written, &format!("127.0.0.1:{port}"));
    }
    let dir = std::env::temp_dir().join(format!("padres-readme-tour-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the tour's directory");
    let bin = padres_tests::binary("padres");
    let bin_dir = bin.parent().expect("the binaries' directory");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&dir)
        .env("PATH", path)
        .env("PADRES_BROKER", format!("quic://127.0.0.1:{}", ports[0]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash runs");
    let pgid = child.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the tour's status") {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever the tour left running (nothing, when it ends as written) goes with it.
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status();
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("stdout read");
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("stderr read");
    let told = format!("stdout:\n{out}\nstderr:\n{err}");
    let status = status.unwrap_or_else(|| panic!("the tour did not end within 120 s\n{told}"));
    assert!(status.success(), "the tour failed ({status})\n{told}");
    // The subscriber got the quote above 100 and not the other; every job ran, in order;
    // the build's output is the job's.
    assert!(out.contains("[price,120]") && !out.contains("[price,90]"), "{told}");
    let at = |what: &str| out.find(what).unwrap_or_else(|| panic!("no {what:?}\n{told}"));
    let (fetch, build, ship) =
        (at("first fetch started"), at("first build started"), at("first ship started"));
    assert!(fetch < build && build < ship, "{told}");
    assert!(out.contains("generation first") && out.contains("succeeded 3, skipped 0, failed 0"), "{told}");
    assert!(out.lines().any(|l| l.trim() == "built"), "{told}");
    assert!(out.contains("succeeded"), "{told}");
    let _ = std::fs::remove_dir_all(&dir);
}
