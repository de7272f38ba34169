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
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("padres-cli-test-{}-{n}", std::process::id()));
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
    let mut command = Command::new(padres_tests::binary("padres"));
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

fn padres_local(broker: &Broker, args: &[&str]) -> Command {
    let mut command = Command::new(padres_tests::binary("padres"));
    command.args(args).arg("--broker").arg(&broker.url);
    command
}

fn json_line(reader: &mut impl std::io::BufRead) -> serde_json::Value {
    let mut line = String::new();
    reader.read_line(&mut line).expect("reads a line");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
}

#[test]
fn a_session_scripts_a_client_and_the_broker_can_be_inspected() {
    use std::io::Write as _;
    let broker = start_broker();
    let mut session = padres(&broker, &["session"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("session runs");
    let mut input = session.stdin.take().expect("stdin");
    let mut output = std::io::BufReader::new(session.stdout.take().expect("stdout"));

    writeln!(input, "# subscribe first\ns [class,eq,'stock'],[price,>,100]").expect("written");
    let reply = json_line(&mut output);
    assert_eq!(
        (reply["type"].as_str(), reply["op"].as_str(), reply["line"].as_u64()),
        (Some("reply"), Some("s"), Some(2))
    );
    let id = reply["id"].as_str().expect("an id").to_owned();

    writeln!(input, "s [class,eq\np [class,'bond'],[price,1]").expect("written");
    let unparsable = json_line(&mut output);
    assert_eq!(
        (unparsable["type"].as_str(), unparsable["line"].as_u64()),
        (Some("error"), Some(3)),
        "{unparsable}"
    );
    let unadvertised = json_line(&mut output);
    assert_eq!(unadvertised["type"], "error");
    assert!(
        unadvertised["message"].as_str().is_some_and(|m| m.contains("advertise first")),
        "{unadvertised}"
    );

    // Another process publishes; the session prints what matches.
    let mut publish = padres(&broker, &["pub", "--advertise", "[class,eq,'stock'],[price,isPresent,0]"]);
    assert!(
        publish
            .args(["[class,'stock'],[price,50]", "[class,'stock'],[price,150]"])
            .status()
            .expect("runs")
            .success()
    );
    writeln!(input, "sleep 2000").expect("written");
    let notification = json_line(&mut output);
    assert_eq!(notification["type"], "notification", "{notification}");
    assert_eq!(notification["sub"], id.as_str());
    assert_eq!(notification["attrs"]["price"], 150);

    let routes = padres_local(&broker, &["broker", "routes", "--json"]).output().expect("runs");
    assert!(routes.status.success(), "{}", String::from_utf8_lossy(&routes.stderr));
    let routes: serde_json::Value = serde_json::from_slice(&routes.stdout).expect("json");
    assert_eq!(routes["prt_total"], 1, "{routes}");
    assert_eq!(routes["prt"][0]["text"], "[class,eq,'stock'],[price,>,100]");
    assert_eq!(routes["prt"][0]["id"], id.as_str());

    writeln!(input, "unsub {id}\nquit").expect("written");
    let unsub = json_line(&mut output);
    assert_eq!((unsub["type"].as_str(), unsub["op"].as_str()), (Some("reply"), Some("unsub")), "{unsub}");
    assert!(session.wait().expect("session ends").success());

    let stats = padres_local(&broker, &["broker", "stats"]).output().expect("runs");
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(stats.status.success() && text.contains("subscriptions        0"), "{text}");
}

#[test]
fn a_local_broker_is_trusted_without_flags_and_a_remote_one_needs_ca() {
    let broker = start_broker();
    let out = padres_local(&broker, &["ping", "--wait", "5"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let out = Command::new(padres_tests::binary("padres"))
        .args(["ping", "--broker", "quic://192.0.2.1:7700"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ca"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
