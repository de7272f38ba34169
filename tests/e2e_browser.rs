//! The broker's web monitor in a real browser: headless Chromium loads the page a broker
//! serves at `/`, runs its JavaScript against the live JSON API, and the test reads the
//! page as the browser left it (`--dump-dom`): the overlay of a 3-broker chain, the
//! routing tables filtered, and a payroll generation run by agents on the three brokers,
//! every job in its final state and one job's output shown. A screenshot is written to
//! `target/tmp/monitor.png` for people to look at.
//!
//! Chromium is needed: `.ci/run` installs Debian's `chromium` when it is missing; set
//! `PADRES_CHROMIUM` to another binary. `PADRES_SKIP_BROWSER=1` skips this test, saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use padres_tests::broker::client;
use padres_tests::http::get_json;

#[path = "common/workflow.rs"]
mod workflow;
use workflow::*;

/// The Chromium binary, if there is one.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PADRES_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser", "google-chrome"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs headless Chromium on `url` with `extra` flags, giving the page's scripts `budget_ms`
/// of virtual time (fetches included) before it acts; returns what it printed. A browser
/// that has not finished within a minute is killed and fails the test.
fn browse(chromium: &Path, profile: &Path, url: &str, extra: &[&str], budget_ms: u32) -> String {
    let child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} runs: {e}", chromium.display()));
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.expect("chromium's output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("chromium did not finish within 60 s on {url}");
        }
    };
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The text of the element `<tag id="id" …>…</tag>` in `dom` (no nesting of `tag` inside).
fn element<'a>(dom: &'a str, tag: &str, id: &str) -> &'a str {
    let start = dom.find(&format!("<{tag} id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in the page"));
    let end = dom[start..].find(&format!("</{tag}>")).map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

#[tokio::test]
async fn the_web_monitor_draws_the_overlay_and_filters_the_routing_tables_in_a_browser() {
    if std::env::var_os("PADRES_SKIP_BROWSER").is_some() {
        eprintln!("PADRES_SKIP_BROWSER is set: the browser test is skipped");
        return;
    }
    let chromium = chromium().expect(
        "the web monitor's test needs Chromium (Debian: apt-get install chromium; or set \
         PADRES_CHROMIUM=/path/to/chrome, or PADRES_SKIP_BROWSER=1 to skip it)",
    );
    // Fast reports, and the workflow classes' history.
    let fast = |extra: Vec<String>| -> Vec<String> {
        ["--monitor-interval-ms", "200"]
            .iter()
            .map(ToString::to_string)
            .chain(history_flags())
            .chain(extra)
            .collect()
    };
    let http_flags = vec!["--http".to_owned(), "127.0.0.1:0".to_owned()];
    let b1 = start_with("B1", "browser", &fast(http_flags));
    let b2 = start_with("B2", "browser", &fast(neighbour_of(&b1)));
    let b3 = start_with("B3", "browser", &fast(neighbour_of(&b2)));
    let http = b1.http.expect("B1 serves HTTP");
    // A subscription at B3 that reaches B1's PRT (from B2), and a publisher at B1 for it.
    let subscriber = client(&b3, "sub").await;
    subscriber.send("s [class,eq,'quote'],[symbol,eq,'IBM']").await.expect("subscribed");
    let publisher = client(&b1, "pub").await;
    publisher.send("a [class,eq,'quote'],[symbol,isPresent,'']").await.expect("advertised");
    for _ in 0..50 {
        publisher.send("p [class,'quote'],[symbol,'IBM']").await.expect("published");
    }
    // Payroll (the paper's Fig. 8) on agents at the three brokers, one Friday generation.
    let dir = b1.dir.join("test");
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("ran.log");
    let _agents = [
        Agent::start(&b1, "agent-1", &dir.join("agent-1")),
        Agent::start(&b2, "agent-2", &dir.join("agent-2")),
        Agent::start(&b3, "agent-3", &dir.join("agent-3")),
    ];
    let payroll = application(
        "payroll",
        &[
            job("A", "daily", "agent-1", &[], "true", "", &log),
            job("B", "daily", "agent-2", &["A"], "echo pay slips computed; echo one warning >&2", "", &log),
            job("C", "friday", "agent-3", &["A"], "true", "", &log),
            job("D", "workdays", "agent-1", &["B", "C"], "true", "", &log),
        ],
    );
    deploy(&b2, &dir, "payroll", &payroll);
    trigger(&b2, "payroll", "g1", "2026-11-27");
    let out = wait(&b2, "payroll", "g1");
    assert!(out.status.success(), "payroll: {}", explain(&out));

    // Until B1's view holds the whole chain with a rate on both links (B2's and B3's
    // reports cross them toward B1, which subscribes to them, every 200 ms), and B3's subscription is in B1's PRT, so that the page
    // has them all at its first fetch.
    let mut complete = false;
    for _ in 0..100 {
        let view = get_json(http, "/api/federation").await;
        let broker = |name: &str| {
            view["brokers"].as_array().and_then(|b| b.iter().find(|b| b["broker"] == name)).cloned()
        };
        let b2_sees_both = broker("B2").is_some_and(|b2| b2["neighbours"] == serde_json::json!(["B1", "B3"]));
        let rated = |from: &str, to: &str| {
            broker(from).is_some_and(|b| b["rates_out"][to].as_f64().is_some_and(|r| r > 0.0))
        };
        let routes = get_json(http, "/api/routes?filter=quote").await;
        if view["brokers"].as_array().map(Vec::len) == Some(3)
            && b2_sees_both
            && rated("B2", "B1")
            && rated("B3", "B2")
            && routes["prt_matched"] == 1
        {
            complete = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        complete,
        "B1's federation view never held the chain with its link rates, or the PRT B3's subscription"
    );

    let profile = padres_tests::broker::data_dir("browser", "chromium-profile");
    let url = format!("http://{http}/?filter=quote&job=payroll/g1/B");
    let dom = tokio::task::spawn_blocking({
        let (chromium, profile) = (chromium.clone(), profile.clone());
        move || browse(&chromium, &profile, &url, &["--dump-dom"], 5_000)
    })
    .await
    .expect("the browser ran");

    assert!(dom.contains("data-ready=\"true\""), "the page never finished loading:\n{dom}");
    let graph = element(&dom, "svg", "graph");
    assert!(graph.contains("data-brokers=\"3\""), "{graph}");
    assert!(graph.contains("data-links=\"2\""), "{graph}");
    for (name, link) in [("B1", "B1-B2"), ("B3", "B2-B3")] {
        assert!(graph.contains(&format!("data-broker=\"{name}\"")), "{name} not drawn: {graph}");
        let drawn = graph
            .find(&format!("data-link=\"{link}\""))
            .unwrap_or_else(|| panic!("{link} not drawn: {graph}"));
        let rate = graph[drawn..].split("data-rate=\"").nth(1).and_then(|r| r.split('"').next());
        assert!(rate.is_some_and(|r| r != "0.00"), "{link} shows no message rate: {rate:?}");
    }
    // The filter box, filled from ?filter=quote: only the quote rows are listed.
    let prt = element(&dom, "table", "prt");
    assert!(prt.contains("[class,eq,'quote'],[symbol,eq,'IBM']") && prt.contains("broker B2"), "{prt}");
    assert!(!prt.contains("padres_broker"), "the filter keeps out the reports' subscription: {prt}");
    let srt = element(&dom, "table", "srt");
    assert!(srt.contains("[class,eq,'quote']") && !srt.contains("padres_broker"), "{srt}");
    assert!(dom.contains("1 subscriptions containing “quote”"), "the count says what the filter kept");

    // Payroll's generation, every job ended, and B's output as its status carries it.
    let workflows = element(&dom, "section", "workflows");
    let generation = workflows
        .find("data-gid=\"g1\"")
        .map(|at| &workflows[at..])
        .unwrap_or_else(|| panic!("payroll's generation is not shown: {workflows}"));
    assert!(generation.contains("data-done=\"true\""), "{generation}");
    for job in ["APPL_START", "A", "B", "C", "D", "APPL_END"] {
        assert!(
            generation.contains(&format!("data-job=\"{job}\" data-state=\"succeeded\"")),
            "{job} is not shown succeeded: {generation}"
        );
    }
    let output = element(&dom, "pre", "output-text");
    assert!(output.contains("pay slips computed") && output.contains("[stderr]\none warning"), "{output}");
    assert!(element(&dom, "h3", "output-job").contains("payroll g1 B: succeeded"), "{dom}");

    // For people to look at.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("monitor.png");
    let screenshot = format!("--screenshot={}", shot.display());
    let url = format!("http://{http}/?job=payroll/g1/B");
    tokio::task::spawn_blocking(move || {
        browse(&chromium, &profile, &url, &[&screenshot, "--window-size=1280,1600"], 3_000)
    })
    .await
    .expect("the browser ran");
    assert!(shot.is_file(), "no screenshot at {}", shot.display());
    drop((b2, b3));
}
