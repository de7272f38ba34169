//! Broker links that drop and return, with real brokers over QUIC: within the link-session
//! window nothing is lost or doubled and order holds; past it the brokers forget each
//! other's routes and start over, and delivery resumes.

use std::time::Duration;

use padres_client::Client;
use padres_lang::{Name, Value};
use padres_tests::broker::{Broker, client, neighbour_of, start_with, until_routes};

/// B1 - B2 - B3, each dialling the one before, with `extra` flags; returns once every link
/// is up.
async fn chain(test: &str, extra: &[&str]) -> Vec<Broker> {
    let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
    let mut brokers: Vec<Broker> = Vec::new();
    for i in 1..=3 {
        let mut args = brokers.last().map(neighbour_of).unwrap_or_default();
        args.extend(extra.iter().cloned());
        brokers.push(start_with(&format!("B{i}"), test, &args));
    }
    for (i, b) in brokers.iter().enumerate() {
        let observer = client(b, "observer").await;
        let want = if i == 1 { 2 } else { 1 };
        until_routes(&observer, "links up", |r| r.neighbours.len() == want).await;
    }
    brokers
}

/// A publisher at B1 and a subscriber at B3 to `[class,eq,'tick']`, once publications flow.
async fn publisher_and_subscriber(brokers: &[Broker]) -> (Client, Client) {
    let publisher = client(&brokers[0], "pub").await;
    let mut subscriber = client(&brokers[2], "sub").await;
    publisher.send("a [class,eq,'tick'],[m,isPresent,0]").await.expect("advertised");
    subscriber.send("s [class,eq,'tick']").await.expect("subscribed");
    // Warm-up publications (m below 0) until one arrives: the subscription has travelled.
    for n in 1..200 {
        publisher.send(&format!("p [class,'tick'],[m,-{n}]")).await.expect("published");
        if tokio::time::timeout(Duration::from_millis(100), subscriber.next_notification()).await.is_ok() {
            return (publisher, subscriber);
        }
    }
    panic!("no warm-up publication reached B3");
}

/// Reads notifications until `count` with `m >= 1` have arrived, or `wait` passes without
/// one; returns their `m`s in the order received.
async fn receive_counted(subscriber: &mut Client, count: usize, wait: Duration) -> Vec<i64> {
    let mut got = Vec::new();
    while got.len() < count {
        let Ok(Some(n)) = tokio::time::timeout(wait, subscriber.next_notification()).await else { break };
        if let padres_client::Notification::Publication { publication, .. } = n
            && let Some(Value::Int(m)) = publication.get("m")
            && *m >= 1
        {
            got.push(*m);
        }
    }
    got
}

#[tokio::test]
async fn a_link_dropped_and_restored_within_the_window_loses_and_doubles_nothing() {
    let brokers = chain("link-resume", &["--allow-drop-link"]).await;
    let (publisher, mut subscriber) = publisher_and_subscriber(&brokers).await;
    let b1 = Name::new("B1").expect("name");
    let operator = client(&brokers[1], "operator").await;

    // 20,000 publications at B1 in paced batches (about 2.4 s) while B2 drops its link to
    // B1 six times, each kept down 150 ms: what was queued or in flight on the link, and
    // what B1 routed to B2 while it was down, arrives when it is back.
    const N: i64 = 20_000;
    let publishing = tokio::spawn(async move {
        for m in 1..=N {
            publisher
                .publish(format!("[class,'tick'],[m,{m}]").parse().expect("a publication"))
                .await
                .expect("sent");
            if m % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        }
        publisher
    });
    let mut dropped = 0;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(350)).await;
        if operator.drop_link(&b1, 150).await.expect("drop-link answered") {
            dropped += 1;
        }
    }
    let _publisher = publishing.await.expect("publisher");
    let got = receive_counted(&mut subscriber, N as usize, Duration::from_secs(20)).await;
    let expected: Vec<i64> = (1..=N).collect();
    assert_eq!(got.len(), expected.len(), "every publication once");
    assert!(got == expected, "in order, none doubled");
    assert!(dropped >= 4, "the link was up to be dropped at least four times ({dropped})");

    // Both ends resumed the session each time, and neither forgot the other's routes.
    for (i, b) in [&brokers[0], &brokers[1]].into_iter().enumerate() {
        let stats = client(b, "observer").await.stats().await.expect("stats");
        assert!(stats.link_sessions_resumed >= dropped, "broker {i}: {stats:?}");
        assert_eq!(stats.link_sessions_expired, 0, "broker {i}: {stats:?}");
    }
}

#[tokio::test]
async fn a_link_down_past_the_window_is_forgotten_and_delivery_resumes_when_it_returns() {
    let brokers = chain("link-expire", &["--link-window-ms", "300", "--allow-drop-link"]).await;
    let (publisher, mut subscriber) = publisher_and_subscriber(&brokers).await;
    let operator = client(&brokers[1], "operator").await;
    assert!(operator.drop_link(&Name::new("B1").expect("name"), 1_500).await.expect("answered"));
    // Past the window B1 forgets B3's subscription (it came over B2).
    let observer = client(&brokers[0], "observer").await;
    until_routes(&observer, "the subscription withdrawn at B1", |r| {
        r.prt.iter().all(|e| !e.text.contains("'tick'")) && r.neighbours.is_empty()
    })
    .await;
    // When the link returns the two re-synchronise, and new publications flow again.
    until_routes(&observer, "the subscription back at B1", |r| {
        r.prt.iter().any(|e| e.text.contains("'tick'"))
    })
    .await;
    for m in 1..=100 {
        publisher.send(&format!("p [class,'tick'],[m,{m}]")).await.expect("published");
    }
    let got = receive_counted(&mut subscriber, 100, Duration::from_secs(10)).await;
    assert_eq!(got, (1..=100).collect::<Vec<i64>>());
    let stats = observer.stats().await.expect("stats");
    assert!(stats.link_sessions_expired >= 1, "{stats:?}");
}

#[tokio::test]
async fn dropping_links_needs_the_brokers_consent_and_a_stranger_is_named() {
    let brokers = chain("link-stranger", &["--allow-drop-link"]).await;
    let operator = client(&brokers[0], "operator").await;
    let up = operator.drop_link(&Name::new("B9").expect("name"), 0).await.expect("answered");
    assert!(!up, "no link to B9");
    // The real link is untouched.
    until_routes(&operator, "B2 still linked", |r| r.neighbours.len() == 1).await;

    // Without --allow-drop-link no client may cut a link.
    let plain = padres_tests::broker::start_broker("B1", "link-refused");
    let operator = client(&plain, "operator").await;
    match operator.drop_link(&Name::new("B2").expect("name"), 1_000).await {
        Err(padres_client::ClientError::Refused { code, message }) => {
            assert_eq!(code, padres_lang::wire::ErrorCode::Forbidden);
            assert!(message.contains("--allow-drop-link"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_ring_routes_around_a_link_gone_for_good() {
    // B1 — B2 — B3 — B4 — B1, and B3 — B5; cyclic, with a 300 ms link-session window.
    let flags: Vec<String> = ["--cycles", "--link-window-ms", "300", "--allow-drop-link"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let with = |neighbours: &[&Broker]| {
        let mut args: Vec<String> = neighbours.iter().flat_map(|b| neighbour_of(b)).collect();
        args.extend(flags.iter().cloned());
        args
    };
    let test = "link-ring";
    let b1 = start_with("B1", test, &with(&[]));
    let b2 = start_with("B2", test, &with(&[&b1]));
    let b3 = start_with("B3", test, &with(&[&b2]));
    let b4 = start_with("B4", test, &with(&[&b3, &b1]));
    let b5 = start_with("B5", test, &with(&[&b3]));
    for (b, want) in [(&b1, 2), (&b2, 2), (&b3, 3), (&b4, 2), (&b5, 1)] {
        let observer = client(b, "observer").await;
        until_routes(&observer, "links up", |r| r.neighbours.len() == want).await;
    }
    let brokers = [b1, b2, b3, b4, b5];
    let publisher = client(&brokers[0], "pub").await;
    let mut subscriber = client(&brokers[4], "sub").await;
    publisher.send("a [class,eq,'tick'],[m,isPresent,0]").await.expect("advertised");
    subscriber.send("s [class,eq,'tick']").await.expect("subscribed");
    let mut warm = false;
    for n in 1..200 {
        publisher.send(&format!("p [class,'tick'],[m,-{n}]")).await.expect("published");
        if tokio::time::timeout(Duration::from_millis(100), subscriber.next_notification()).await.is_ok() {
            warm = true;
            break;
        }
    }
    assert!(warm, "no warm-up publication reached B5");

    // The ring link B3's tree uses toward B1 goes for good: cut at the broker that dials
    // B1 (B2 or B4), kept down for ten minutes.
    let routes = client(&brokers[2], "observer").await.routes(100).await.expect("routes");
    let entry = routes.srt.iter().find(|e| e.text.contains("'tick'")).expect("B3 has the advertisement");
    let via = if entry.from == "broker B2" { 1 } else { 3 };
    let b1 = Name::new("B1").expect("name");
    assert!(client(&brokers[via], "operator").await.drop_link(&b1, 600_000).await.expect("answered"));
    let cut = std::time::Instant::now();

    // Delivery resumes over the other side of the ring, once the session's window has
    // passed and the tree has moved.
    let mut m = 0;
    let resumed = loop {
        m += 1;
        publisher.send(&format!("p [class,'tick'],[m,{m}]")).await.expect("published");
        let got = receive_counted(&mut subscriber, 1, Duration::from_millis(50)).await;
        if let Some(first) = got.first() {
            break *first;
        }
        assert!(cut.elapsed() < Duration::from_secs(10), "delivery did not resume within 10 s");
    };
    let took = cut.elapsed();
    eprintln!("delivery resumed {took:?} after the cut, at m = {resumed}");
    let routes = client(&brokers[2], "observer").await.routes(100).await.expect("routes");
    let entry = routes.srt.iter().find(|e| e.text.contains("'tick'")).expect("B3 has the advertisement");
    assert_ne!(entry.from, if via == 1 { "broker B2" } else { "broker B4" }, "B3's tree moved");
    // From then on, every publication once and in order.
    for k in m + 1..=m + 200 {
        publisher.send(&format!("p [class,'tick'],[m,{k}]")).await.expect("published");
    }
    let rest = receive_counted(&mut subscriber, (m + 200 - resumed) as usize, Duration::from_secs(10)).await;
    assert_eq!(rest, (resumed + 1..=m + 200).collect::<Vec<i64>>(), "resumed at {resumed} after {took:?}");
}

#[tokio::test]
async fn a_long_outage_is_sent_whole_when_the_link_returns() {
    // More piles up for the neighbour than a link's backlog limit once was (65,536
    // frames): sent at once when the link returns, it cut the link as too slow, and the
    // session ended with everything it held.
    let brokers = chain("link-outage", &["--allow-drop-link"]).await;
    let (publisher, mut subscriber) = publisher_and_subscriber(&brokers).await;
    let operator = client(&brokers[1], "operator").await;
    let b1 = Name::new("B1").expect("name");
    // Down until every publication is routed (and waits for B2), then back.
    assert!(operator.drop_link(&b1, 600_000).await.expect("answered"));
    const N: i64 = 100_000;
    for m in 1..=N {
        publisher
            .publish(format!("[class,'tick'],[m,{m}]").parse().expect("a publication"))
            .await
            .expect("sent");
    }
    // A request after the stream: answered once B1 has taken every publication before it.
    publisher.send("p [class,'tick'],[m,-1]").await.expect("published");
    assert!(!operator.drop_link(&b1, 0).await.expect("answered"), "lifted, while no link was up");
    let got = receive_counted(&mut subscriber, N as usize, Duration::from_secs(30)).await;
    assert_eq!(got.len(), N as usize, "every publication once");
    assert!(got.iter().zip(1..=N).all(|(a, b)| *a == b), "in order");
    let stats = client(&brokers[0], "observer").await.stats().await.expect("stats");
    assert_eq!(stats.links_cut, 0, "{stats:?}");
    assert!(stats.link_sessions_resumed >= 1, "{stats:?}");
    assert!(stats.link_messages_resent > 65_536, "more than the old limit waited: {stats:?}");
}
