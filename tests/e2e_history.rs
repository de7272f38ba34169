//! The history store in real `padres-broker` processes: durability under SIGKILL (read
//! back with `padres-broker history` and with a historic subscription), and the stores a
//! broker refuses to start with.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use padres_lang::{Publication, Value};
use padres_tests::binary;
use padres_tests::broker::{client, data_dir, start_with};

/// Runs `padres-broker history` on `dir` and returns the `n` of every line it prints.
fn stored_numbers(dir: &std::path::Path, filter: &str) -> Vec<i64> {
    let output = Command::new(binary("padres-broker"))
        .args(["history", "--data-dir"])
        .arg(dir)
        .arg(filter)
        .output()
        .expect("padres-broker history runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| {
            let p: Publication = line.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(p.time().is_some(), "stored with its time: {line}");
            match p.get("n") {
                Some(Value::Int(n)) => *n,
                other => panic!("no n in {line}: {other:?}"),
            }
        })
        .collect()
}

#[tokio::test]
async fn with_full_durability_no_acknowledged_publication_is_lost_to_sigkill() {
    let flags: Vec<String> = ["--history", "[class,eq,'job_status']", "--history-durability", "full"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain(["--history-index".to_owned(), "appl".to_owned()])
        .collect();
    let mut broker = start_with("B1", "history-kill", &flags);
    let acked: Arc<Mutex<Vec<i64>>> = Arc::default();
    let mut next = 0_i64;
    let kills = 20;
    for round in 0..kills {
        let publisher = client(&broker, "pub").await;
        publisher
            .send("a [class,eq,'job_status'],[appl,isPresent,''],[n,isPresent,0]")
            .await
            .expect("advertised");
        let first = next;
        next += 1_000_000;
        let acked_here = acked.clone();
        // Publishes, each waiting for its acknowledgement, until the broker dies.
        let publishing = tokio::spawn(async move {
            for n in first.. {
                let p: Publication =
                    format!("[class,'job_status'],[appl,'a{round}'],[n,{n}]").parse().expect("valid");
                if publisher.publish_acked(p).await.is_err() {
                    break;
                }
                acked_here.lock().expect("not poisoned").push(n);
            }
        });
        tokio::time::sleep(Duration::from_millis(100 + 10 * u64::try_from(round % 5).expect("small"))).await;
        broker.kill_and_restart();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), publishing).await.expect("the publisher notices");
    }
    let acked = acked.lock().expect("not poisoned").clone();
    assert!(acked.len() >= kills, "only {} publications acknowledged in {kills} rounds", acked.len());
    let stored: BTreeSet<i64> = stored_numbers(&broker.dir, "[class,eq,'job_status']").into_iter().collect();
    let lost: Vec<&i64> = acked.iter().filter(|n| !stored.contains(n)).collect();
    assert!(lost.is_empty(), "{} of {} acknowledged publications lost: {lost:?}", lost.len(), acked.len());
    // An indexed query reads the same rows back, narrowed.
    let round3 = stored_numbers(&broker.dir, "[class,eq,'job_status'],[appl,eq,'a3']");
    assert!(round3.iter().all(|n| (3_000_000..4_000_000).contains(n)) && !round3.is_empty());
    assert!(round3.windows(2).all(|w| w[0] < w[1]), "in time order");
    // And a historic subscription to the restarted broker finds every one of them.
    let mut subscriber = client(&broker, "sub").await;
    let id =
        subscriber.send("s [class,eq,'job_status'],[time,>=,0]").await.expect("subscribed").expect("an id");
    let (got, marker) = until_marker(&mut subscriber, &id).await;
    let found: BTreeSet<i64> = got.iter().map(|(n, _)| *n).collect();
    let missed: Vec<&i64> = acked.iter().filter(|n| !found.contains(n)).collect();
    assert!(
        missed.is_empty(),
        "{} acknowledged publications not found by a historic subscription",
        missed.len()
    );
    assert!(
        matches!(&marker, padres_client::Notification::EndOfHistory { count, missing, truncated: false, .. }
            if *count == got.len() as u64 && missing.is_empty()),
        "{marker:?}"
    );
}

#[tokio::test]
async fn the_store_keeps_what_its_filter_selects_from_other_brokers_and_reports_it() {
    let b1 = start_with(
        "B1",
        "history-remote",
        &["--history".to_owned(), "[class,eq,'log'],[level,eq,'error']".to_owned()],
    );
    let b2 = start_with("B2", "history-remote", &padres_tests::broker::neighbour_of(&b1));
    let publisher = client(&b2, "pub").await;
    publisher.send("a [class,eq,'log'],[level,isPresent,''],[n,isPresent,0]").await.expect("advertised");
    let observer = client(&b2, "obs").await;
    padres_tests::broker::until_routes(&observer, "the store's filter reaches B2", |r| {
        r.prt.iter().any(|e| e.text == "[class,eq,'log'],[level,eq,'error']")
    })
    .await;
    for n in 0..100 {
        let level = if n % 3 == 0 { "error" } else { "info" };
        publisher.send(&format!("p [class,'log'],[level,'{level}'],[n,{n}]")).await.expect("published");
    }
    let b1_client = client(&b1, "stats").await;
    let mut stats = b1_client.stats().await.expect("stats");
    for _ in 0..100 {
        if stats.history_stored == 34 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        stats = b1_client.stats().await.expect("stats");
    }
    assert_eq!((stats.history_stored, stats.history_dropped, stats.history_failed), (34, 0, 0));
    let stored = stored_numbers(&b1.dir, "[class,eq,'log']");
    assert_eq!(stored, (0..100).filter(|n| n % 3 == 0).collect::<Vec<_>>());
}

#[test]
fn a_broker_refuses_to_start_on_a_store_that_is_not_a_database_or_in_use() {
    let start = |dir: &std::path::Path| {
        Command::new(binary("padres-broker"))
            .args(["--name", "B1", "--listen", "127.0.0.1:0", "--history", "[class,eq,'a']", "--data-dir"])
            .arg(dir)
            .output()
            .expect("runs")
    };
    let dir = data_dir("history-corrupt", "B1");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("history.sqlite"), b"this is not a database at all, just some text ".repeat(200))
        .expect("written");
    let output = start(&dir);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("history.sqlite") && stderr.contains("not a database"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);

    let running = start_with("B1", "history-locked", &["--history".to_owned(), "[class,eq,'a']".to_owned()]);
    let output = start(&running.dir);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("in use by another broker process"), "{stderr}");
}

/// Collects the `n` and `time` of every publication for `sub` until its end-of-history
/// marker; returns them with the marker.
async fn until_marker(
    client: &mut padres_client::Client,
    sub: &padres_lang::MessageId,
) -> (Vec<(i64, i64)>, padres_client::Notification) {
    let mut got = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(20), client.next_notification())
            .await
            .expect("the marker within 20 s")
            .expect("the connection stays");
        match &next {
            padres_client::Notification::Publication { subs, publication } if subs.contains(sub) => {
                let n = match publication.get("n") {
                    Some(Value::Int(n)) => *n,
                    other => panic!("no n: {other:?}"),
                };
                got.push((n, publication.time().expect("timed").millis()));
            }
            padres_client::Notification::EndOfHistory { sub: s, .. } if s == sub => return (got, next),
            _ => {}
        }
    }
}

fn flags(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn historic_subscriptions_from_every_broker_of_a_five_broker_tree() {
    // B1 — B2, B1 — B3, B3 — B4, B3 — B5; stores at B2 (errors) and B4 (application a1).
    let test = "history-tree";
    let b1 = start_with("B1", test, &[]);
    let mut with_b1 = padres_tests::broker::neighbour_of(&b1);
    with_b1.extend(flags(&["--history", "[class,eq,'log'],[level,eq,'error']"]));
    let b2 = start_with("B2", test, &with_b1);
    let b3 = start_with("B3", test, &padres_tests::broker::neighbour_of(&b1));
    let mut with_b3 = padres_tests::broker::neighbour_of(&b3);
    with_b3.extend(flags(&["--history", "[class,eq,'log'],[app,eq,'a1']", "--history-index", "app"]));
    let b4 = start_with("B4", test, &with_b3);
    let b5 = start_with("B5", test, &padres_tests::broker::neighbour_of(&b3));
    let brokers = [&b1, &b2, &b3, &b4, &b5];
    let mut publishers = Vec::new();
    for b in [&b1, &b3, &b5] {
        let publisher = client(b, "pub").await;
        publisher
            .send("a [class,eq,'log'],[level,isPresent,''],[app,isPresent,''],[n,isPresent,0]")
            .await
            .expect("advertised");
        padres_tests::broker::until_routes(
            &publisher,
            "both store filters reach the publisher's broker",
            |r| r.prt.iter().filter(|e| e.text.starts_with("[class,eq,'log'],")).count() >= 2,
        )
        .await;
        publishers.push(publisher);
    }
    let since = padres_client::check::now();
    let mut kept = BTreeSet::new();
    let (mut errors, mut a1s) = (0, 0);
    let mut rng = 7_u64;
    for n in 0..300_i64 {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let level = ["error", "info", "warn"][usize::try_from(rng >> 62).expect("small") % 3];
        let app = ["a1", "a2", "a3"][usize::try_from((rng >> 40) % 3).expect("small")];
        if level == "error" || app == "a1" {
            kept.insert(n);
        }
        errors += u64::from(level == "error");
        a1s += u64::from(app == "a1");
        let publisher = &publishers[usize::try_from(n % 3).expect("small")];
        publisher
            .send(&format!("p [class,'log'],[level,'{level}'],[app,'{app}'],[n,{n}]"))
            .await
            .expect("published");
    }
    // Until both stores have written what reached them.
    for (store, expected) in [(&b2, errors), (&b4, a1s)] {
        let observer = client(store, "obs").await;
        for _ in 0..200 {
            if observer.stats().await.expect("stats").history_stored >= expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    let queries = [
        format!("[class,eq,'log'],[time,>=,{}]", since.to_rfc3339()),
        format!("[class,eq,'log'],[app,neq,'a3'],[time,>=,{}]", since.to_rfc3339()),
    ];
    for (i, b) in brokers.iter().enumerate() {
        let mut subscriber = client(b, "sub").await;
        let text = &queries[i % 2];
        let id = subscriber.send(&format!("s {text}")).await.expect("subscribed").expect("an id");
        let (got, marker) = until_marker(&mut subscriber, &id).await;
        let numbers: Vec<i64> = got.iter().map(|(n, _)| *n).collect();
        let unique: BTreeSet<i64> = numbers.iter().copied().collect();
        assert_eq!(unique.len(), numbers.len(), "B{}: each once", i + 1);
        let expected: BTreeSet<i64> = if i % 2 == 0 {
            kept.clone()
        } else {
            // app neq a3: what the stores kept but a3's that only the error store has.
            kept.iter().copied().filter(|n| !a3(*n)).collect()
        };
        assert_eq!(unique, expected, "B{}: {text}", i + 1);
        assert!(got.windows(2).all(|w| w[0].1 <= w[1].1), "B{}: in time order", i + 1);
        match marker {
            padres_client::Notification::EndOfHistory { count, missing, truncated, .. } => {
                assert_eq!((count, missing.len(), truncated), (numbers.len() as u64, 0, false));
            }
            other => panic!("{other:?}"),
        }
    }

    /// Whether publication `n` above went to application a3 (the same generator).
    fn a3(n: i64) -> bool {
        let mut rng = 7_u64;
        for _ in 0..=n {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        }
        (rng >> 40) % 3 == 2
    }
}

#[tokio::test]
async fn an_open_ended_historic_subscription_misses_nothing_at_10000_publications_per_second() {
    // B2 — B1 — B3: the publisher at B1, the store at B2, the subscriber at B3.
    let test = "history-boundary";
    let b1 = start_with("B1", test, &[]);
    let mut with_b1 = padres_tests::broker::neighbour_of(&b1);
    with_b1.extend(flags(&["--history", "[class,eq,'tick']"]));
    let _b2 = start_with("B2", test, &with_b1);
    let b3 = start_with("B3", test, &padres_tests::broker::neighbour_of(&b1));
    let publisher = client(&b1, "pub").await;
    publisher.send("a [class,eq,'tick'],[n,isPresent,0]").await.expect("advertised");
    padres_tests::broker::until_routes(&publisher, "the store's filter reaches B1", |r| {
        r.prt.iter().any(|e| e.text == "[class,eq,'tick']")
    })
    .await;
    let since = padres_client::check::now();
    let total: i64 = 20_000;
    // 10,000 a second: 100 every 10 ms, for two seconds.
    let publishing = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        for batch in 0..total / 100 {
            tick.tick().await;
            for n in batch * 100..(batch + 1) * 100 {
                let p: Publication = format!("[class,'tick'],[n,{n}]").parse().expect("valid");
                publisher.publish(p).await.expect("published");
            }
        }
        publisher
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut subscriber = client(&b3, "sub").await;
    let id = subscriber
        .send(&format!("s [class,eq,'tick'],[time,>=,{}]", since.to_rfc3339()))
        .await
        .expect("subscribed")
        .expect("an id");
    let (stored, _) = until_marker(&mut subscriber, &id).await;
    let publisher = publishing.await.expect("the publisher ran");
    drop(publisher);
    let mut all: Vec<i64> = stored.iter().map(|(n, _)| *n).collect();
    while all.len() < usize::try_from(total).expect("fits") {
        match tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification()).await {
            Ok(Some(padres_client::Notification::Publication { publication, .. })) => {
                match publication.get("n") {
                    Some(Value::Int(n)) => all.push(*n),
                    other => panic!("no n: {other:?}"),
                }
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => break,
        }
    }
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "no publication twice");
    let missing: Vec<i64> = (0..total).filter(|n| !unique.contains(n)).take(10).collect();
    assert!(
        missing.is_empty(),
        "missing (first 10): {missing:?}; {} stored, {} in all",
        stored.len(),
        all.len()
    );
    assert!(stored.len() > 5_000, "the first second came from the store: {}", stored.len());
}

#[tokio::test]
async fn a_store_that_is_down_is_named_in_the_marker_within_the_timeout() {
    let test = "history-down";
    let b1 = start_with("B1", test, &flags(&["--history-query-timeout-ms", "1000"]));
    let mut with_b1 = padres_tests::broker::neighbour_of(&b1);
    with_b1.extend(flags(&["--history", "[class,eq,'log']"]));
    let mut b2 = start_with("B2", test, &with_b1);
    let publisher = client(&b1, "pub").await;
    publisher.send("a [class,eq,'log'],[n,isPresent,0]").await.expect("advertised");
    padres_tests::broker::until_routes(&publisher, "the store's filter reaches B1", |r| {
        r.prt.iter().any(|e| e.text == "[class,eq,'log']")
    })
    .await;
    let _ = b2.child.kill();
    let _ = b2.child.wait();
    let mut subscriber = client(&b1, "sub").await;
    let started = std::time::Instant::now();
    let id =
        subscriber.send("s [class,eq,'log'],[time,>=,'now-1h']").await.expect("subscribed").expect("an id");
    let (got, marker) = until_marker(&mut subscriber, &id).await;
    assert!(got.is_empty());
    match marker {
        padres_client::Notification::EndOfHistory { count, missing, .. } => {
            assert_eq!(count, 0);
            assert_eq!(missing.iter().map(ToString::to_string).collect::<Vec<_>>(), ["B2"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn retention_removes_old_rows_and_a_restart_keeps_the_rest() {
    let mut broker = start_with(
        "B1",
        "history-retention",
        &flags(&["--history", "[class,eq,'log']", "--history-max-age", "1h"]),
    );
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'log'],[n,isPresent,0]").await.expect("advertised");
    for n in 0..10 {
        // The first five carry a time of their own, two days old.
        let old = if n < 5 { ",[time,2020-01-01T00:00:00Z]" } else { "" };
        publisher.send(&format!("p [class,'log'],[n,{n}]{old}")).await.expect("published");
    }
    let mut removed = 0;
    for _ in 0..100 {
        removed = publisher.stats().await.expect("stats").history_removed;
        if removed == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(removed, 5, "retention ran within a few seconds");
    broker.kill_and_restart();
    assert_eq!(stored_numbers(&broker.dir, "[class,eq,'log']"), [5, 6, 7, 8, 9]);
}

#[tokio::test]
async fn a_historic_answer_larger_than_a_clients_backlog_limit_is_delivered_whole() {
    // 2,000 stored publications of about 300 bytes: 600 kB answered at once, to a client
    // cut off past 100 kB of backlog.
    let extra = flags(&["--history", "[class,eq,'blob']", "--max-queued-bytes-per-client", "100000"]);
    let broker = start_with("B1", "history-burst", &extra);
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'blob'],[n,isPresent,0]").await.expect("advertised");
    let since = padres_client::check::now();
    for n in 0..2_000_i64 {
        let p: Publication = format!("[class,'blob'],[n,{n}]").parse().expect("valid");
        publisher.publish(p.with_payload(vec![7_u8; 250])).await.expect("published");
    }
    let observer = client(&broker, "obs").await;
    for _ in 0..400 {
        if observer.stats().await.expect("stats").history_stored >= 2_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut subscriber = client(&broker, "sub").await;
    let text = format!("s [class,eq,'blob'],[time,>=,{}]", since.to_rfc3339());
    let id = subscriber.send(&text).await.expect("subscribed").expect("an id");
    let (got, marker) = until_marker(&mut subscriber, &id).await;
    assert_eq!(got.len(), 2_000);
    assert!(matches!(marker, padres_client::Notification::EndOfHistory { count: 2_000, .. }), "{marker:?}");
    // Still connected, and live delivery goes on.
    publisher.send("p [class,'blob'],[n,2000]").await.expect("published");
    let next = tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification())
        .await
        .expect("live after the marker")
        .expect("still connected");
    assert!(matches!(next, padres_client::Notification::Publication { .. }), "{next:?}");
}

#[tokio::test]
async fn stored_answers_between_brokers_fit_a_small_frame_limit() {
    // Frames of at most 16 KiB: 200 stored publications of about 300 bytes (60 kB) must
    // cross the link to the subscriber's broker in several answers, not one that the
    // link cannot carry.
    let small = flags(&["--max-frame-bytes", "16384"]);
    let mut extra = small.clone();
    extra.extend(flags(&["--history", "[class,eq,'blob']"]));
    let store = start_with("B1", "history-small-frames", &extra);
    let mut extra = small;
    extra.extend(padres_tests::broker::neighbour_of(&store));
    let edge = start_with("B2", "history-small-frames", &extra);
    let publisher = client(&store, "pub").await;
    publisher.send("a [class,eq,'blob'],[n,isPresent,0]").await.expect("advertised");
    let since = padres_client::check::now();
    for n in 0..200_i64 {
        let p: Publication = format!("[class,'blob'],[n,{n}]").parse().expect("valid");
        publisher.publish(p.with_payload(vec![7_u8; 250])).await.expect("published");
    }
    for _ in 0..400 {
        if publisher.stats().await.expect("stats").history_stored >= 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut subscriber = client(&edge, "sub").await;
    let text = format!("s [class,eq,'blob'],[time,>=,{}]", since.to_rfc3339());
    let id = subscriber.send(&text).await.expect("subscribed").expect("an id");
    let (got, marker) = until_marker(&mut subscriber, &id).await;
    assert_eq!(got.iter().map(|(n, _)| *n).collect::<Vec<_>>(), (0..200).collect::<Vec<_>>());
    assert!(
        matches!(&marker, padres_client::Notification::EndOfHistory { count: 200, missing, .. } if missing.is_empty()),
        "{marker:?}"
    );
}
