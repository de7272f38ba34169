//! The real `padres` binary against a broker embedded in the test, on a loopback port
//! chosen at run time.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
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
    start_named("B1", None)
}

/// Broker `name`, linked to `neighbour` if given (trusted through the local registry).
fn start_named(name: &str, neighbour: Option<&Broker>) -> Broker {
    start_configured(name, neighbour, Vec::new())
}

/// Broker `name` keeping `history` in its store.
fn start_configured(
    name: &str,
    neighbour: Option<&Broker>,
    history: Vec<padres_broker::config::HistoryFilter>,
) -> Broker {
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("padres-cli-test-{}-{n}", std::process::id()));
    let config = Config {
        name: name.into(),
        listen: ([127, 0, 0, 1], 0).into(),
        data_dir: dir.clone(),
        neighbours: neighbour.map(|b| vec![b.url.clone()]).unwrap_or_default(),
        history,
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

/// The lines a child writes, read by a thread so that a test can wait for each with a
/// timeout instead of blocking for ever on a child that hangs.
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn of(reader: impl std::io::Read + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(reader).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self(rx)
    }

    /// The next line, within ten seconds.
    fn next(&self) -> String {
        self.0.recv_timeout(Duration::from_secs(10)).expect("a line within 10 s")
    }

    /// The next line as JSON.
    fn json(&self) -> serde_json::Value {
        let line = self.next();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }
}

/// Waits up to ten seconds for `child` to exit.
fn exit_status(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..200 {
        if let Some(status) = child.try_wait().expect("waits") {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("the child did not exit within 10 s");
}

/// `padres sub SUBSCRIPTION --count COUNT --json` at `broker`, once its subscription is
/// in force (it says so on stderr after the broker's settled reply); its stdout lines.
fn subscribed(broker: &Broker, subscription: &str, count: u32) -> (Child, Lines) {
    let count = count.to_string();
    let mut sub = padres(broker, &["sub", subscription, "--count", &count, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sub runs");
    let out = Lines::of(sub.stdout.take().expect("stdout"));
    let err = Lines::of(sub.stderr.take().expect("stderr"));
    let said = err.next();
    assert!(said.starts_with("subscribed as"), "the subscription is in force: {said}");
    (sub, out)
}

#[test]
fn the_readme_recipe_delivers_every_matching_publication_with_no_retry() {
    // B1 — B2; subscribe at B2, then advertise and publish at once at B1. The replies are
    // settled, so nothing is lost and nothing needs repeating.
    let b1 = start_named("B1", None);
    let b2 = start_named("B2", Some(&b1));
    assert!(padres(&b2, &["ping", "--wait", "5"]).status().expect("runs").success(), "ping");
    let observer = || padres(&b2, &["broker", "stats", "--json"]).output().expect("runs");
    for _ in 0..200 {
        let stats: serde_json::Value = serde_json::from_slice(&observer().stdout).expect("json");
        if stats["neighbours"].as_array().is_some_and(|n| n.len() == 1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut sub, out) = subscribed(&b2, "[class,eq,'stock'],[price,>,100]", 2);
    let published = padres(&b1, &["pub", "--advertise", "[class,eq,'stock'],[price,isPresent,0]"])
        .args(["[class,'stock'],[price,120]", "[class,'stock'],[price,50]", "[class,'stock'],[price,150.5]"])
        .status()
        .expect("pub runs");
    assert!(published.success());
    let prices: Vec<serde_json::Value> = (0..2).map(|_| out.json()["attrs"]["price"].clone()).collect();
    assert_eq!(prices, [serde_json::json!(120), serde_json::json!(150.5)]);
    assert!(exit_status(&mut sub).success());
}

#[test]
fn pub_sub_and_ping_against_a_broker() {
    let broker = start_broker();
    assert!(padres(&broker, &["ping", "--wait", "5"]).status().expect("runs").success(), "ping");

    let (mut sub, out) = subscribed(&broker, "[class,eq,'stock'],[price,>,100]", 1);
    let mut publish = padres(&broker, &["pub", "--advertise", "[class,eq,'stock'],[price,isPresent,0]"]);
    publish.args(["[class,'stock'],[price,50]", "[class,'stock'],[price,150]"]);
    assert!(publish.status().expect("pub runs").success());
    let line = out.next();
    assert!(line.contains(r#""price":150"#) && line.contains(r#""type":"notification""#), "{line}");
    assert!(exit_status(&mut sub).success(), "sub ends after one");

    let out = padres(&broker, &["pub", "[class,'bond'],[price,1]"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("advertise first"));
}

#[test]
fn sub_and_session_take_composite_subscriptions() {
    use std::io::Write as _;
    let broker = start_broker();
    let pattern = "{[class,eq,'ev'],[kind,eq,'a'],[k,eq,$S$k]}&{[class,eq,'ev'],[kind,eq,'b'],[k,eq,$S$k]}";
    let (mut sub, out) = subscribed(&broker, pattern, 1);
    let (mut session, mut input, output) = session(&broker);
    writeln!(input, "cs {pattern} within 1h").expect("written");
    let reply = output.json();
    assert_eq!((reply["type"].as_str(), reply["op"].as_str()), (Some("reply"), Some("cs")), "{reply}");
    let id = reply["id"].as_str().expect("an id").to_owned();

    let mut publish =
        padres(&broker, &["pub", "--advertise", "[class,eq,'ev'],[kind,isPresent,''],[k,isPresent,'']"]);
    publish.args([
        "[class,'ev'],[kind,'a'],[k,'x']",
        "[class,'ev'],[kind,'b'],[k,'y']",
        "[class,'ev'],[kind,'b'],[k,'x']",
    ]);
    assert!(publish.status().expect("pub runs").success());

    for line in [out.json(), output.json()] {
        assert_eq!(line["type"], "notification", "{line}");
        assert_eq!(line["pubs"][0]["leaf"], 0, "{line}");
        assert_eq!(line["pubs"][0]["attrs"]["kind"], "a", "{line}");
        assert_eq!(line["pubs"][1]["leaf"], 1, "{line}");
        assert_eq!(line["pubs"][1]["attrs"]["k"], "x", "{line}");
    }
    assert!(exit_status(&mut sub).success(), "sub ends after one match");
    writeln!(input, "unsub {id}\nquit").expect("written");
    assert_eq!(output.json()["op"], "unsub");
    assert!(exit_status(&mut session).success(), "session ends");
}

/// `padres session` at `broker`: the process, its standard input, its output lines.
fn session(broker: &Broker) -> (Child, std::process::ChildStdin, Lines) {
    let mut session = padres(broker, &["session"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("session runs");
    let input = session.stdin.take().expect("stdin");
    let output = Lines::of(session.stdout.take().expect("stdout"));
    (session, input, output)
}

fn padres_local(broker: &Broker, args: &[&str]) -> Command {
    let mut command = Command::new(padres_tests::binary("padres"));
    command.args(args).arg("--broker").arg(&broker.url);
    command
}

#[test]
fn a_session_scripts_a_client_and_the_broker_can_be_inspected() {
    use std::io::Write as _;
    let broker = start_broker();
    let (mut session, mut input, output) = session(&broker);

    writeln!(input, "# subscribe first\ns [class,eq,'stock'],[price,>,100]").expect("written");
    let reply = output.json();
    assert_eq!(
        (reply["type"].as_str(), reply["op"].as_str(), reply["line"].as_u64()),
        (Some("reply"), Some("s"), Some(2))
    );
    let id = reply["id"].as_str().expect("an id").to_owned();

    writeln!(input, "s [class,eq\np [class,'bond'],[price,1]").expect("written");
    let unparsable = output.json();
    assert_eq!(
        (unparsable["type"].as_str(), unparsable["line"].as_u64()),
        (Some("error"), Some(3)),
        "{unparsable}"
    );
    let unadvertised = output.json();
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
    let notification = output.json();
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
    let unsub = output.json();
    assert_eq!((unsub["type"].as_str(), unsub["op"].as_str()), (Some("reply"), Some("unsub")), "{unsub}");
    assert!(exit_status(&mut session).success(), "session ends");

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

#[test]
fn sub_since_until_prints_the_stored_publications_then_one_marker_and_exits() {
    use std::io::Write as _;
    let filter = padres_broker::config::HistoryFilter { filter: "[class,eq,'job_status']".into() };
    let broker = start_configured("B1", None, vec![filter]);
    let mut publish = padres(
        &broker,
        &[
            "pub",
            "--advertise",
            "[class,eq,'job_status'],[appl,isPresent,''],[job,isPresent,''],[status,isPresent,'']",
        ],
    );
    publish.args([
        "[class,'job_status'],[appl,'payroll'],[job,'A'],[status,'SUCCESS']",
        "[class,'job_status'],[appl,'payroll'],[job,'B'],[status,'FAILED']",
        "[class,'job_status'],[appl,'billing'],[job,'A'],[status,'FAILED']",
    ]);
    assert!(publish.status().expect("pub runs").success());
    let failed = "[class,eq,'job_status'],[appl,eq,'payroll'],[status,eq,'FAILED']";
    // The store writes on its own thread: ask until it has them.
    let mut lines = Vec::new();
    for _ in 0..50 {
        let output = padres(&broker, &["sub", "--since", "1h", "--until", "now", "--json", failed])
            .output()
            .expect("sub runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        lines = String::from_utf8(output.stdout).expect("utf-8").lines().map(str::to_owned).collect();
        if lines.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    let stored: serde_json::Value = serde_json::from_str(&lines[0]).expect("JSON");
    assert_eq!((stored["type"].as_str(), stored["attrs"]["job"].as_str()), (Some("notification"), Some("B")));
    assert!(stored["attrs"]["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{stored}");
    let marker: serde_json::Value = serde_json::from_str(&lines[1]).expect("JSON");
    assert_eq!(marker["type"], "end_of_history", "{marker}");
    assert_eq!((marker["count"].as_u64(), marker["missing"].as_array().map(Vec::len)), (Some(1), Some(0)));

    // In a session: the reply, the stored publication, the marker; then live ones.
    let (mut session, mut input, output) = session(&broker);
    writeln!(input, "s [class,eq,'job_status'],[status,eq,'FAILED'],[time,>=,'now-1h']").expect("written");
    assert_eq!(output.json()["type"], "reply");
    let mut jobs = Vec::new();
    loop {
        let line = output.json();
        if line["type"] == "end_of_history" {
            assert_eq!(line["count"], 2, "{line}");
            break;
        }
        jobs.push(line["attrs"]["appl"].as_str().expect("an appl").to_owned());
    }
    assert_eq!(jobs, ["payroll", "billing"], "in time order");
    writeln!(input, "quit").expect("written");
    assert!(exit_status(&mut session).success());

    let bad =
        padres(&broker, &["sub", "--since", "yesterday", "[class,eq,'job_status']"]).output().expect("runs");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since: invalid time bound 'yesterday'"));
    // An empty range (2h ago is before 1h ago) is refused, not subscribed and waited on.
    let empty = padres(&broker, &["sub", "--since", "1h", "--until", "2h", "[class,eq,'job_status']"])
        .output()
        .expect("runs");
    assert_eq!(empty.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&empty.stderr).contains("the range is empty"), "{empty:?}");

    // An --until still ahead: the stored publications, the marker, then live ones up to it.
    let mut sub = padres(&broker, &["sub", "--since", "1h", "--until", "now+3s", "--json", failed])
        .stdout(Stdio::piped())
        .spawn()
        .expect("sub runs");
    let out = Lines::of(sub.stdout.take().expect("stdout"));
    assert_eq!(out.json()["attrs"]["job"], "B");
    assert_eq!(out.json()["type"], "end_of_history");
    let mut publish = padres(
        &broker,
        &[
            "pub",
            "--advertise",
            "[class,eq,'job_status'],[appl,isPresent,''],[job,isPresent,''],[status,isPresent,'']",
        ],
    );
    publish.arg("[class,'job_status'],[appl,'payroll'],[job,'C'],[status,'FAILED']");
    assert!(publish.status().expect("pub runs").success());
    let live = out.json();
    assert_eq!(
        (live["type"].as_str(), live["attrs"]["job"].as_str()),
        (Some("notification"), Some("C")),
        "{live}"
    );
    assert!(exit_status(&mut sub).success(), "exits once --until has passed");

    // A range wholly ahead has no stored part and no marker: it still ends.
    let ahead =
        padres(&broker, &["sub", "--since", "now+1s", "--until", "now+2s", failed]).output().expect("runs");
    assert!(ahead.status.success(), "{ahead:?}");
}
