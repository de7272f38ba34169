//! The broker's HTTP listener (`--http`), against real broker processes: `/metrics`
//! parsed by an OpenMetrics parser and compared with `padres broker stats` after a known
//! load, the JSON API, and bad requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openmetrics_parser::{MetricNumber, OpenMetricsType, OpenMetricsValue};
use padres_client::{Client, Notification};
use padres_tests::broker::{Broker, client, neighbour_of, start_with};
use padres_tests::http::{get, get_json, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HTTP: [&str; 2] = ["--http", "127.0.0.1:0"];

fn with_http(extra: Vec<String>) -> Vec<String> {
    HTTP.iter().map(ToString::to_string).chain(extra).collect()
}

fn with_gateway(extra: Vec<String>) -> Vec<String> {
    with_http(std::iter::once("--http-gateway".to_owned()).chain(extra).collect())
}

async fn next_publication(client: &mut Client, wait: Duration) -> Option<padres_lang::Publication> {
    match tokio::time::timeout(wait, client.next_notification()).await.ok().flatten()? {
        Notification::Publication { publication, .. } => Some(publication),
        other => panic!("expected a publication, got {other:?}"),
    }
}

/// The value of sample `name` (a family's name, as the parser keys it) with label values
/// `labels`, whatever its type.
fn value(
    metrics: &openmetrics_parser::MetricsExposition<OpenMetricsType, OpenMetricsValue>,
    name: &str,
    labels: &[&str],
) -> f64 {
    let family = metrics.families.get(name).unwrap_or_else(|| panic!("no family {name}"));
    let labels: Vec<String> = labels.iter().map(ToString::to_string).collect();
    let sample = family.get_sample_by_label_values(&labels).unwrap_or_else(|| panic!("no {name}{labels:?}"));
    match &sample.value {
        OpenMetricsValue::Counter(c) => c.value.as_f64(),
        OpenMetricsValue::Gauge(MetricNumber::Int(n)) => *n as f64,
        OpenMetricsValue::Gauge(MetricNumber::Float(n)) => *n,
        other => panic!("{name}: unexpected value {other:?}"),
    }
}

fn http_of(broker: &Broker) -> SocketAddr {
    broker.http.expect("the broker printed its HTTP address")
}

#[tokio::test]
async fn metrics_parse_and_agree_with_broker_stats_after_a_known_load() {
    let b1 = start_with("B1", "http-metrics", &with_http(Vec::new()));
    let b2 = start_with("B2", "http-metrics", &neighbour_of(&b1));
    let publisher = client(&b1, "pub").await;
    let mut subscriber = client(&b2, "sub").await;
    publisher.send("a [class,eq,'quote'],[n,isPresent,0]").await.expect("advertised");
    subscriber.send("s [class,eq,'quote']").await.expect("subscribed");
    // Until the subscription has reached B1 over the link.
    let mut warm_up = 0;
    loop {
        publisher.send(&format!("p [class,'quote'],[n,{warm_up}]")).await.expect("published");
        warm_up += 1;
        if next_publication(&mut subscriber, Duration::from_millis(100)).await.is_some() {
            break;
        }
        assert!(warm_up < 200, "the subscription never reached B1");
    }
    // Some warm-up publications may still be on their way: take them before counting.
    while next_publication(&mut subscriber, Duration::from_millis(300)).await.is_some() {}
    let load = 100;
    for n in 0..load {
        publisher.send(&format!("p [class,'quote'],[n,{}]", 1000 + n)).await.expect("published");
    }
    for _ in 0..load {
        next_publication(&mut subscriber, Duration::from_secs(10)).await.expect("every publication arrives");
    }

    let stats = publisher.stats().await.expect("stats");
    let (status, headers, body) = get(http_of(&b1), "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers.get("content-type").is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{headers:?}"
    );
    let metrics = openmetrics_parser::openmetrics::parse_openmetrics(&body)
        .unwrap_or_else(|e| panic!("/metrics does not parse: {e:?}\n{body}"));

    // What the publisher's own requests count, and what the tables hold, is settled.
    assert_eq!(stats.publications_in, (warm_up + load) as u64);
    assert_eq!(value(&metrics, "padres_publications_in", &[]), stats.publications_in as f64);
    assert_eq!(value(&metrics, "padres_client_requests", &[]), stats.client_requests as f64);
    assert_eq!(value(&metrics, "padres_notifications_out", &[]), stats.notifications_out as f64);
    assert_eq!(value(&metrics, "padres_routing_table_entries", &["srt"]), stats.advertisements as f64);
    assert_eq!(value(&metrics, "padres_routing_table_entries", &["prt"]), stats.subscriptions as f64);
    assert_eq!(value(&metrics, "padres_clients", &[]), stats.clients as f64);
    assert_eq!(value(&metrics, "padres_neighbours", &[]), 1.0);
    assert_eq!(metrics.families["padres_publications_in"].family_type, OpenMetricsType::Counter);
    assert_eq!(metrics.families["padres_clients"].family_type, OpenMetricsType::Gauge);
    // Every publication went over the link to B2 (the link's own keep-alive traffic may
    // add to both counts, never take away).
    let to_b2 = value(&metrics, "padres_link_messages_out", &["B2"]);
    assert!(to_b2 >= (warm_up + load) as f64, "{to_b2} messages to B2");
    assert!(value(&metrics, "padres_broker_messages_out", &[]) >= to_b2);
    assert!(value(&metrics, "padres_link_sent_bytes", &["B2"]) > 100.0 * load as f64);
    assert!(value(&metrics, "padres_link_received_bytes", &["B2"]) > 0.0);
    assert!(value(&metrics, "padres_uptime_seconds", &[]) > 0.0);
    // Per class (labels sorted: class, peer): every quote routed to B2 (the load, and the
    // warm-up's once the subscription was there) went as one message of class quote,
    // counted with its encoded bytes, as `broker stats` shows them.
    let quotes = value(&metrics, "padres_link_class_messages_out", &["quote", "B2"]);
    assert!(quotes > load as f64 && quotes <= (warm_up + load) as f64, "{quotes} quotes to B2");
    let quote_bytes = value(&metrics, "padres_link_class_sent_bytes", &["quote", "B2"]);
    assert!(quote_bytes > 20.0 * quotes && quote_bytes < to_b2 * 200.0, "{quote_bytes} bytes");
    // Every publication this broker took from a client was a quote.
    let classes_in = value(&metrics, "padres_class_publications_in", &["quote"]);
    assert_eq!(classes_in, stats.publications_in as f64);
    let row =
        stats.link_traffic.iter().find(|r| r.peer.as_str() == "B2" && r.class == "quote").expect("quote row");
    assert_eq!(row.messages as f64, quotes);
    assert!(row.bytes as f64 <= quote_bytes, "stats were taken before the scrape");
    for name in metrics.families.keys() {
        assert!(name.starts_with("padres_"), "{name} lacks the prefix");
    }
}

#[tokio::test]
async fn the_json_api_answers_and_bad_requests_are_refused() {
    let b1 = start_with("B1", "http-api", &with_http(Vec::new()));
    let publisher = client(&b1, "pub").await;
    publisher.send("a [class,eq,'quote'],[n,isPresent,0]").await.expect("advertised");
    publisher.send("a [class,eq,'trade'],[n,isPresent,0]").await.expect("advertised");
    publisher.send("p [class,'quote'],[n,1]").await.expect("published");
    let http = http_of(&b1);

    let (status, headers, body) = get(http, "/api/stats").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers.get("content-type").map(String::as_str), Some("application/json"));
    let stats: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(stats["broker"], "B1");
    // The client's two, and the broker's own for its reports (`padres_broker`).
    assert_eq!(stats["advertisements"], 3);
    assert_eq!(stats["publications_in"], 1);

    let routes = get_json(http, "/api/routes?limit=1").await;
    assert_eq!(routes["srt_total"], 3);
    assert_eq!(routes["srt"].as_array().map(Vec::len), Some(1), "{routes}");
    // A page of the rows a filter selects: the client's two advertisements (the broker's
    // own comes from "this broker"), case ignored, from the second.
    let page = get_json(http, "/api/routes?limit=1&offset=1&filter=CLIENT%201").await;
    assert_eq!(
        (&page["srt_total"], &page["srt_matched"], &page["offset"]),
        (&3.into(), &2.into(), &1.into()),
        "{page}"
    );
    let listed = page["srt"].as_array().expect("rows");
    assert_eq!(listed.len(), 1, "{page}");
    assert!(listed[0]["text"].as_str().is_some_and(|t| t.contains("'trade'")), "the second by id: {page}");

    let (status, _, body) = get(http, "/api/links").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).expect("JSON"), serde_json::json!([]));

    let (status, _, body) = get(http, "/api/routes?limit=many").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("limit"), "the refusal names the parameter: {body}");
    // No history store, no detectors: said so.
    let (status, _, body) = get(http, "/api/history").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).expect("JSON")["enabled"], false, "{body}");
    let (_, _, body) = get(http, "/api/detectors").await;
    let detectors: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!((&detectors["total"], &detectors["detectors"]), (&0.into(), &serde_json::json!([])), "{body}");
    let (status, _, _) = get(http, "/no-such-page").await;
    assert_eq!(status, 404);
    // Without --http-gateway, nothing is published or subscribed over HTTP.
    let (status, body) = post(http, "/api/publish", "text/plain", "p [class,'quote'],[n,2]").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--http-gateway"), "{body}");
    let (status, _, body) = get(http, "/api/subscribe?s=%5Bclass%2Ceq%2C%27quote%27%5D").await;
    assert_eq!(status, 404, "{body}");
}

#[test]
fn a_taken_http_port_stops_the_broker_with_the_reason() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let port = taken.local_addr().expect("an address").port();
    let dir = padres_tests::broker::data_dir("http-taken", "B1");
    let mut child = std::process::Command::new(padres_tests::binary("padres-broker"))
        .args([
            "--name",
            "B1",
            "--listen",
            "127.0.0.1:0",
            "--http",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    // A broker that started anyway would serve until killed: give it 10 s to stop.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("waits").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("its output");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started on a taken port");
    assert!(stderr.contains(&format!("cannot listen for HTTP on 127.0.0.1:{port}")), "{stderr}");
}

#[tokio::test]
async fn the_federation_view_comes_from_the_brokers_reports() {
    let fast = |extra: Vec<String>| -> Vec<String> {
        ["--monitor-interval-ms", "200"].iter().map(ToString::to_string).chain(extra).collect()
    };
    let b1 = start_with("B1", "http-federation", &fast(with_http(Vec::new())));
    let b2 = start_with("B2", "http-federation", &fast(neighbour_of(&b1)));
    let b3 = start_with("B3", "http-federation", &fast(neighbour_of(&b2)));
    // Any client may watch the reports: here B3's, from B1.
    let mut watcher = client(&b1, "watcher").await;
    watcher.send("s [class,eq,'padres_broker'],[broker,eq,'B3']").await.expect("subscribed");

    let mut last = serde_json::Value::Null;
    let mut complete = false;
    for _ in 0..100 {
        let (status, _, body) = get(http_of(&b1), "/api/federation").await;
        assert_eq!(status, 200, "{body}");
        last = serde_json::from_str(&body).expect("JSON");
        let brokers: Vec<&str> = last["brokers"]
            .as_array()
            .expect("brokers")
            .iter()
            .filter_map(|b| b["broker"].as_str())
            .collect();
        let b2_sees_both = last["brokers"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["broker"] == "B2"))
            .is_some_and(|b2| b2["neighbours"] == serde_json::json!(["B1", "B3"]));
        if brokers == ["B1", "B2", "B3"]
            && last["links"] == serde_json::json!([["B1", "B2"], ["B2", "B3"]])
            && b2_sees_both
        {
            complete = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(complete, "the view never showed 3 brokers and 2 links: {last:#}");
    let b2_view =
        last["brokers"].as_array().expect("brokers").iter().find(|b| b["broker"] == "B2").expect("B2");
    assert_eq!(b2_view["neighbours"], serde_json::json!(["B1", "B3"]));
    assert_eq!(b2_view["interval_ms"], 200);

    let report = next_publication(&mut watcher, Duration::from_secs(10)).await.expect("B3's report arrives");
    assert_eq!(report.get("broker").and_then(padres_lang::Value::as_str), Some("B3"));
    assert_eq!(report.get("neighbours").and_then(padres_lang::Value::as_str), Some("B2"));
    drop(b3);

    // The class is the brokers' own: a client cannot speak for one.
    let impostor = client(&b1, "impostor").await;
    for line in
        ["a [class,eq,'padres_broker'],[broker,isPresent,'']", "p [class,'padres_broker'],[broker,'B9']"]
    {
        let message = format!("{:?}", impostor.send(line).await.expect_err("refused"));
        assert!(message.contains("Forbidden") && message.contains("reserved"), "{line}: {message}");
    }
}

/// `examples/gateway.py` with `args`, its output piped.
fn python(http: SocketAddr, args: &[&str]) -> std::process::Child {
    python_at(&format!("http://{http}"), args)
}

/// `examples/gateway.py` with `--url url` and then `args`.
fn python_at(url: &str, args: &[&str]) -> std::process::Child {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gateway.py");
    std::process::Command::new("python3")
        .arg(script)
        .args(["--url", url])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (the gateway example needs Python 3)")
}

#[tokio::test]
async fn a_python_client_subscribes_and_publishes_through_the_gateway() {
    use std::io::BufRead;
    let b1 = start_with("B1", "http-gateway", &with_gateway(Vec::new()));
    let http = http_of(&b1);

    // Python subscribes; a Rust client publishes.
    let mut subscriber = python(http, &["subscribe", "[class,eq,'quote'],[price,>,100]", "--count", "2"]);
    // Its lines, read on a thread of their own so that a stalled script fails the test.
    let stdout = subscriber.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = || -> serde_json::Value {
        let line = rx.recv_timeout(Duration::from_secs(20)).expect("the Python subscriber prints a line");
        serde_json::from_str(&line).expect("JSON")
    };
    let reply = next_line();
    assert_eq!((reply["type"].as_str(), reply["op"].as_str()), (Some("reply"), Some("s")), "{reply}");
    let publisher = client(&b1, "rust-pub").await;
    publisher
        .send("a [class,eq,'quote'],[symbol,isPresent,''],[price,isPresent,0]")
        .await
        .expect("advertised");
    for (symbol, price) in [("IBM", 120), ("HP", 90), ("SUN", 130)] {
        publisher
            .send(&format!("p [class,'quote'],[symbol,'{symbol}'],[price,{price}]"))
            .await
            .expect("published");
    }
    let received: Vec<serde_json::Value> = (0..2).map(|_| next_line()).collect();
    assert_eq!(subscriber.wait().expect("python ends").code(), Some(0));
    assert_eq!(received[0]["type"], "notification");
    assert_eq!(received[0]["sub"], reply["id"]);
    let symbols: Vec<&str> = received.iter().filter_map(|n| n["attrs"]["symbol"].as_str()).collect();
    assert_eq!(symbols, ["IBM", "SUN"], "{received:?}");

    // Python publishes; a Rust client subscribes.
    let mut rust_sub = client(&b1, "rust-sub").await;
    rust_sub.send("s [class,eq,'from_python']").await.expect("subscribed");
    let output = python(
        http,
        &["publish", "a [class,eq,'from_python'],[n,isPresent,0]", "p [class,'from_python'],[n,7]"],
    )
    .wait_with_output()
    .expect("python ends");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let p =
        next_publication(&mut rust_sub, Duration::from_secs(10)).await.expect("Python's publication arrives");
    assert_eq!(p.get("n"), Some(&padres_lang::Value::Int(7)));
}

#[tokio::test]
async fn the_gateway_refuses_bad_input_with_the_reason() {
    let b1 = start_with("B1", "http-gateway-bad", &with_gateway(Vec::new()));
    let http = http_of(&b1);
    let refusal = |body: &str| serde_json::from_str::<serde_json::Value>(body).expect("a JSON refusal");

    // A line that does not parse: 400 naming the line, and nothing sent.
    let (status, body) =
        post(http, "/api/publish", "text/plain", "a [class,eq,'x'],[n,isPresent,0]\np [class,'x'").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(refusal(&body)["line"], 2, "{body}");
    let routes: serde_json::Value = serde_json::from_str(&get(http, "/api/routes").await.2).expect("JSON");
    assert_eq!(routes["srt_total"], 1, "only the broker's own advertisement: {routes}");

    let (status, body) = post(http, "/api/publish", "application/json", "[\"p [class,'x']\"").await;
    assert_eq!(status, 400, "{body}");
    assert!(refusal(&body)["message"].as_str().is_some_and(|m| m.contains("JSON array")), "{body}");

    let (status, body) = post(http, "/api/publish", "text/plain", "s [class,eq,'x']").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("/api/subscribe"), "{body}");

    // A publication the broker refuses (no advertisement): 422, the line named.
    let (status, body) = post(http, "/api/publish", "text/plain", "p [class,'x'],[n,1]").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(refusal(&body)[0]["line"], 1, "{body}");

    let (status, _, body) = get(http, "/api/subscribe?s=%5Bclass%2Ceq").await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = get(http, "/api/subscribe").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("s=FILTER"), "{body}");
}

// Two threads: the QUIC reader's task keeps reading while the test publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_reader_that_stops_reading_is_cut_off_and_the_others_are_not() {
    // 2 MB: about 500 notifications the QUIC reader may fall behind by on a busy machine;
    // the stalled reader's buffers hold a few MB more, and 20 MB are published.
    let limit = ["--max-queued-bytes-per-client", "2000000"].map(String::from).to_vec();
    let b1 = start_with("B1", "http-gateway-slow", &with_gateway(limit));
    let http = http_of(&b1);
    // A reader that subscribes and then never reads, with a small receive buffer (no
    // autotuning) so that what the broker sends backs up into its queue soon.
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("a small receive buffer");
    let mut stalled = socket.connect(http).await.expect("connects");
    let request =
        format!("GET /api/subscribe?s=%5Bclass%2Ceq%2C%27bulk%27%5D HTTP/1.1\r\nHost: {http}\r\n\r\n");
    stalled.write_all(request.as_bytes()).await.expect("sends");
    // A QUIC subscriber that keeps reading, on a task of its own.
    let mut reader = client(&b1, "reader").await;
    reader.send("s [class,eq,'bulk']").await.expect("subscribed");
    let publisher = client(&b1, "pub").await;
    publisher.send("a [class,eq,'bulk'],[n,isPresent,0],[pad,isPresent,'']").await.expect("advertised");
    // Until the gateway's subscription is in place: the broker's own (for its federation
    // view), the QUIC reader's and the gateway reader's.
    let mut subscriptions = 0;
    for _ in 0..200 {
        subscriptions = publisher.stats().await.expect("stats").subscriptions;
        if subscriptions >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(subscriptions, 3, "the gateway reader's subscription never arrived");
    let count = 5000;
    let reading = tokio::spawn(async move {
        let mut last = None;
        while let Some(p) = next_publication(&mut reader, Duration::from_secs(10)).await {
            last = p.get("n").cloned();
            if last == Some(padres_lang::Value::Int(count - 1)) {
                break;
            }
        }
        last
    });
    // Far more than the stalled reader's buffers and its allowance hold.
    let payload = "x".repeat(4000);
    for n in 0..count {
        publisher.send(&format!("p [class,'bulk'],[n,{n}],[pad,'{payload}']")).await.expect("published");
    }
    let last = tokio::time::timeout(Duration::from_secs(60), reading)
        .await
        .expect("the reader ends")
        .expect("joins");
    assert_eq!(last, Some(padres_lang::Value::Int(count - 1)), "the QUIC reader got every publication");
    let stats = publisher.stats().await.expect("stats");
    assert_eq!(stats.slow_clients_dropped, 1, "the stalled gateway reader, and only it, was cut off");
    drop(stalled);
}

#[tokio::test]
async fn detectors_and_the_history_store_show_in_the_json_api() {
    let b1 = start_with(
        "B1",
        "http-detectors",
        &with_http(vec!["--history".to_owned(), "[class,eq,'job_status']".to_owned()]),
    );
    let http = http_of(&b1);
    let mut subscriber = client(&b1, "sub").await;
    subscriber
        .send("cs {[class,eq,'a'],[g,eq,$S$g]} & {[class,eq,'b'],[g,eq,$S$g]}")
        .await
        .expect("subscribed");
    let publisher = client(&b1, "pub").await;
    for adv in ["a [class,eq,'a'],[g,isPresent,'']", "a [class,eq,'b'],[g,isPresent,'']"] {
        publisher.send(adv).await.expect("advertised");
    }
    publisher.send("a [class,eq,'job_status'],[job,isPresent,'']").await.expect("advertised");
    for publication in ["p [class,'a'],[g,'1']", "p [class,'a'],[g,'2']", "p [class,'b'],[g,'1']"] {
        publisher.send(publication).await.expect("published");
    }
    publisher.send("p [class,'job_status'],[job,'J1']").await.expect("published");
    let matched = tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification())
        .await
        .expect("a match within 10 s");
    assert!(matches!(matched, Some(Notification::Composite { .. })), "{matched:?}");

    // One detector: one match made; all three publications stay stored (a later `b` of
    // g=2, or a later publication of either leaf for g=1, may still complete the pattern).
    let view = get_json(http, "/api/detectors").await;
    assert_eq!(
        (&view["total"], &view["matches"], &view["stored"]),
        (&1.into(), &1.into(), &3.into()),
        "{view}"
    );
    let detector = &view["detectors"][0];
    assert_eq!((&detector["matches"], &detector["stored"]), (&1.into(), &3.into()), "{view}");
    assert!(detector["stored_bytes"].as_u64().is_some_and(|b| b > 0), "{view}");
    assert_eq!(detector["subscriptions"], 2, "its two leaves: {view}");
    assert!(detector["subscribers"][0]["from"].as_str().is_some_and(|f| f.starts_with("client ")), "{view}");
    assert!(detector["pattern"].as_str().is_some_and(|p| p.contains("$S$g")), "{view}");
    assert_eq!(view["bounds"]["per_detector"], 10_000, "{view}");
    let (_, _, body) = get(http, "/api/detectors?offset=1").await;
    let past: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!((&past["total"], &past["detectors"]), (&1.into(), &serde_json::json!([])), "{past}");

    // The store, once the writer has committed the job status.
    let mut store = serde_json::Value::Null;
    for _ in 0..100 {
        let (status, _, body) = get(http, "/api/history").await;
        assert_eq!(status, 200, "{body}");
        store = serde_json::from_str(&body).expect("JSON");
        if store["stored"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        (&store["enabled"], &store["stored"], &store["dropped"]),
        (&true.into(), &1.into(), &0.into()),
        "{store}"
    );
    assert_eq!(store["filters"], serde_json::json!(["[class,eq,'job_status']"]), "{store}");
    assert_eq!(store["durability"], "normal", "{store}");
    assert!(store["path"].as_str().is_some_and(|p| p.ends_with("history.sqlite")), "{store}");
}

#[tokio::test]
async fn with_http_tls_the_listener_speaks_https_with_the_brokers_certificate() {
    use tokio_rustls::rustls;
    let b1 = start_with("B1", "http-tls", &with_gateway(vec!["--http-tls".to_owned()]));
    let http = http_of(&b1);
    // The broker's own certificate, as its QUIC clients pin it.
    let roots = padres_transport::tls::roots(&[b1.dir.join("cert.pem")]).expect("the broker's certificate");
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    for name in ["localhost", "127.0.0.1"] {
        let tcp = tokio::net::TcpStream::connect(http).await.expect("connects");
        let server = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("a server name");
        let mut tls = connector.connect(server, tcp).await.expect("the handshake verifies the broker");
        tls.write_all(
            format!("GET /api/stats HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("sends");
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(10), tls.read_to_string(&mut response))
            .await
            .expect("answers within 10 s")
            .expect("reads");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("\"broker\":\"B1\""), "{response}");
    }

    // The Python example publishes over HTTPS, trusting the broker's certificate.
    let mut rust_sub = client(&b1, "rust-sub").await;
    rust_sub.send("s [class,eq,'over_tls']").await.expect("subscribed");
    let cert = b1.dir.join("cert.pem");
    let output = python_at(
        &format!("https://localhost:{}", http.port()),
        &["--cafile", cert.to_str().expect("a UTF-8 path"), "publish"]
            .into_iter()
            .chain(["a [class,eq,'over_tls'],[n,isPresent,0]", "p [class,'over_tls'],[n,8]"])
            .collect::<Vec<_>>(),
    )
    .wait_with_output()
    .expect("python ends");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let p = next_publication(&mut rust_sub, Duration::from_secs(10)).await.expect("the publication arrives");
    assert_eq!(p.get("n"), Some(&padres_lang::Value::Int(8)));

    // Plain HTTP is not served: the first bytes are not a TLS hello, and the broker
    // closes the connection (at most a TLS alert comes back, never an HTTP response).
    let mut plain = tokio::net::TcpStream::connect(http).await.expect("connects");
    plain.write_all(b"GET /api/stats HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("sends");
    let mut response = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut response)).await;
    assert!(read.is_ok(), "the broker closes a plain HTTP connection: {response:?}");
    assert!(
        !response.starts_with(b"HTTP/") && !String::from_utf8_lossy(&response).contains("\"broker\""),
        "plain HTTP must not be served: {read:?} {response:?}"
    );

    // A certificate the client does not trust fails the handshake.
    let stranger = start_with("B9", "http-tls-other", &with_http(vec!["--http-tls".to_owned()]));
    let tcp = tokio::net::TcpStream::connect(http_of(&stranger)).await.expect("connects");
    let server = rustls::pki_types::ServerName::try_from("localhost".to_owned()).expect("a server name");
    assert!(connector.connect(server, tcp).await.is_err(), "another broker's certificate is refused");
}

/// `/api/workflows` reads the workflow classes from the history stores (the gateway off):
/// deployments whenever, triggers and statuses since `since`, each as its attributes.
#[tokio::test]
async fn the_workflows_api_reads_the_workflow_classes_from_history() {
    let mut flags = with_http(Vec::new());
    for class in ["agent_ctl", "trigger", "job_status"] {
        flags.extend(["--history".to_owned(), format!("[class,eq,'{class}']")]);
    }
    let b1 = start_with("B1", "http-workflows", &flags);
    let http = http_of(&b1);
    let publisher = client(&b1, "pub").await;
    for adv in [
        "a [class,eq,'trigger'],[appl,eq,'pay'],[gid,isPresent,''],[date,isPresent,'']",
        "a [class,eq,'job_status'],[appl,eq,'pay'],[gid,isPresent,''],[job,isPresent,''],[status,isPresent,''],[output,isPresent,'']",
        "a [class,eq,'quote'],[n,isPresent,0]",
    ] {
        publisher.send(adv).await.expect("advertised");
    }
    // Stored (acknowledged once written), and one publication of another class.
    for p in [
        "p [class,'trigger'],[appl,'pay'],[gid,'g1'],[date,'2026-11-27']",
        "p [class,'job_status'],[appl,'pay'],[gid,'g1'],[job,'A'],[status,'succeeded'],[output,'done']",
        "p [class,'job_status'],[appl,'pay'],[gid,'old'],[job,'A'],[status,'succeeded'],[time,2020-01-01T00:00:00Z]",
        "p [class,'quote'],[n,1]",
    ] {
        publisher.send(p).await.expect("published");
    }
    // Until both statuses are stored (looking back far enough for the 2020 one).
    let mut all = serde_json::Value::Null;
    for _ in 0..50 {
        all = get_json(http, "/api/workflows?since=2019-01-01T00:00:00Z").await;
        if all["statuses"].as_array().is_some_and(|s| s.len() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(all["statuses"].as_array().map(Vec::len), Some(2), "{all}");
    let found = get_json(http, "/api/workflows?since=1h").await;
    assert_eq!(found["triggers"][0]["gid"], "g1", "{found}");
    let statuses = found["statuses"].as_array().expect("statuses");
    assert_eq!(statuses.len(), 1, "the 2020 status is before since: {found}");
    assert_eq!((statuses[0]["job"].as_str(), statuses[0]["output"].as_str()), (Some("A"), Some("done")));
    assert!(found["deployments"].as_array().is_some_and(Vec::is_empty), "{found}");
    assert_eq!(found["missing"], serde_json::json!([]));
    // A bad bound is refused with the reason.
    let (status, _, body) = get(http, "/api/workflows?since=yesterday").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("since"), "{body}");
}

#[tokio::test]
async fn the_python_client_library_publishes_subscribes_and_reads_history() {
    // clients/python, as `pip install ./clients/python` installs it, against a broker keeping
    // what workflows read back: its unittest suite, with the package on PYTHONPATH.
    let b1 = start_with("B1", "http-python-client", &with_gateway(vec!["--workflows".to_owned()]));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let out = tokio::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-v"])
        .current_dir(&root)
        .env("PYTHONPATH", &root)
        .env("PADRES_URL", format!("http://{}", http_of(&b1)))
        .output()
        .await
        .expect("python3 runs (the Python client needs Python 3)");
    let told = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{told}");
    assert!(told.contains("Ran 4 tests") && told.contains("OK"), "{told}");
}
