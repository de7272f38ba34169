//! The real `padres` binary against a broker embedded in the test, on a loopback port
//! chosen at run time.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use padres_broker::config::Config;

struct Broker {
    url: String,
    ca: PathBuf,
    dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Keeps the embedded broker running.
    _runtime: tokio::runtime::Runtime,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

fn start_broker() -> Broker {
    let dir = std::env::temp_dir().join(format!("padres-cli-test-{}", std::process::id()));
    let config = Config {
        name: "B1".into(),
        listen: ([127, 0, 0, 1], 0).into(),
        data_dir: dir.clone(),
        ..Config::default()
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (bound, addr) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    runtime.spawn(padres_broker::net::serve_until(config, Some(bound), async {
        let _ = stopped.await;
    }));
    let addr = runtime.block_on(addr).expect("bound");
    Broker {
        url: format!("quic://{addr}"),
        ca: dir.join("cert.pem"),
        dir,
        stop: Some(stop),
        _runtime: runtime,
    }
}

fn padres(broker: &Broker, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_padres"));
    command.args(args).arg("--broker").arg(&broker.url).arg("--ca").arg(&broker.ca);
    command
}

fn finished(child: &Child) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
        .map(|stat| stat.split_whitespace().nth(2) == Some("Z"))
        .unwrap_or(true)
}

#[test]
fn pub_sub_and_ping_against_a_broker() {
    let broker = start_broker();
    assert!(padres(&broker, &["ping", "--wait", "5"]).status().expect("runs").success(), "ping");

    let sub = padres(&broker, &["sub", "[class,eq,'stock'],[price,>,100]", "--count", "1", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("sub runs");
    let mut publish = padres(&broker, &["pub", "--advertise", "[class,eq,'stock'],[price,isPresent,0]"]);
    publish.args(["[class,'stock'],[price,50]", "[class,'stock'],[price,150]"]);
    // The subscriber may subscribe after the first round: publish until it has its one.
    for _ in 0..100 {
        assert!(publish.status().expect("pub runs").success());
        std::thread::sleep(Duration::from_millis(50));
        if finished(&sub) {
            break;
        }
    }
    let out = sub.wait_with_output().expect("sub ends after one");
    let line = String::from_utf8(out.stdout).expect("utf-8");
    assert!(line.contains(r#""price":150"#) && line.contains(r#""type":"notification""#), "{line}");

    let out = padres(&broker, &["pub", "[class,'bond'],[price,1]"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("advertise first"));
}
