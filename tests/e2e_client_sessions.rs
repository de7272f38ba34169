//! Client sessions with a real broker over QUIC: a client whose connection drops and who
//! reconnects within the window loses nothing and receives nothing twice, publisher and
//! subscriber alike; a client that does not return is forgotten when the window passes; a
//! client that closes normally is forgotten at once; a broker that keeps no sessions makes
//! the client start over and re-issue.

use std::time::Duration;

use padres_client::{Client, ClientError, Notification};
use padres_lang::Value;
use padres_tests::broker::{Broker, client, start_broker, start_with, until_routes};

/// Publishes `p [class,'tick'],[m,M]`, retrying while the client is between connections
/// (a publication refused then was never sent).
async fn publish(publisher: &Client, m: u64) {
    loop {
        match publisher.send(&format!("p [class,'tick'],[m,{m}]")).await {
            Ok(_) => return,
            Err(ClientError::Closed(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("publishing {m}: {e}"),
        }
    }
}

/// Streams `p [class,'CLASS'],[m,M]` without waiting, retrying likewise.
async fn stream(publisher: &Client, class: &str, m: u64) {
    let publication: padres_lang::Publication = format!("[class,'{class}'],[m,{m}]").parse().expect("valid");
    loop {
        match publisher.publish(publication.clone()).await {
            Ok(()) => return,
            Err(ClientError::Closed(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("publishing {m}: {e}"),
        }
    }
}

fn m_of(n: &Notification) -> Option<i64> {
    match n {
        Notification::Publication { publication, .. } => match publication.get("m") {
            Some(Value::Int(m)) => Some(*m),
            _ => None,
        },
        _ => None,
    }
}

/// The `m`s of the next `n` publications, fewer if `wait` passes without one.
async fn receive(notifications: &mut padres_client::Notifications, n: u64, wait: Duration) -> Vec<i64> {
    let mut got = Vec::new();
    while got.len() < n as usize {
        let Ok(Some(note)) = tokio::time::timeout(wait, notifications.next()).await else { break };
        if let Some(m) = m_of(&note) {
            got.push(m);
        }
    }
    got
}

/// A publisher and a subscriber of `[class,eq,'tick']` at `broker`.
async fn publisher_and_subscriber(broker: &Broker) -> (Client, Client) {
    let publisher = client(broker, "pub").await;
    let subscriber = client(broker, "sub").await;
    publisher.send("a [class,eq,'tick'],[m,isPresent,0]").await.expect("advertised");
    subscriber.send("s [class,eq,'tick']").await.expect("subscribed");
    (publisher, subscriber)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_drop_lose_nothing_and_double_nothing() {
    let broker = start_broker("B1", "client-sessions");
    let (publisher, mut subscriber) = publisher_and_subscriber(&broker).await;
    let (session, _, _) = subscriber.session();
    assert_ne!(session, 0, "the broker keeps client sessions by default");
    const N: u64 = 20_000;
    let sending = tokio::spawn(async move {
        for m in 1..=N {
            // Every hundredth waits for the broker's answer, the rest stream.
            if m.is_multiple_of(100) {
                publish(&publisher, m).await;
            } else {
                stream(&publisher, "tick", m).await;
            }
            if m.is_multiple_of(2_500) {
                publisher.drop_connection();
            }
            if m.is_multiple_of(500) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        publisher
    });
    let mut got: Vec<i64> = Vec::new();
    while got.len() < N as usize {
        let n = tokio::time::timeout(Duration::from_secs(20), subscriber.next_notification())
            .await
            .unwrap_or_else(|_| panic!("stalled after {} notifications", got.len()))
            .expect("the subscriber's stream goes on");
        if let Some(m) = m_of(&n) {
            got.push(m);
            if got.len().is_multiple_of(3_000) {
                subscriber.drop_connection();
            }
        }
    }
    let publisher = sending.await.expect("the publisher finished");
    let expected: Vec<i64> = (1..=N as i64).collect();
    if got != expected {
        let missing = expected.iter().filter(|m| !got.contains(m)).count();
        panic!(
            "{} received, {missing} missing, in order: {}",
            got.len(),
            got.windows(2).all(|w| w[0] < w[1])
        );
    }
    // Nothing doubled after the last: the next notification is a marker published after.
    publish(&publisher, N + 1).await;
    let next = tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification())
        .await
        .expect("the marker arrives")
        .expect("still connected");
    assert_eq!(m_of(&next), Some(N as i64 + 1), "an extra notification before the marker: {next:?}");
    let stats = publisher.stats().await.expect("stats");
    assert!(stats.client_sessions_resumed >= 8 + 6, "{stats:?}");
    assert_eq!(subscriber.session().0, session, "the same session throughout");
    assert_eq!(stats.subscriptions, 1, "nothing was re-issued: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_return_is_forgotten_when_the_window_passes() {
    let broker = start_with("B1", "client-window", &["--client-window-ms".to_owned(), "1000".to_owned()]);
    let observer = client(&broker, "observer").await;
    let gone = client(&broker, "gone").await;
    gone.send("s [class,eq,'tick']").await.expect("subscribed");
    // Its connection is lost, and the client never dials again (its program went away
    // before it could).
    gone.drop_connection();
    drop(gone);
    // The broker has seen the connection go (only the observer is connected) ...
    for _ in 0..200 {
        if observer.stats().await.expect("stats").clients == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(observer.stats().await.expect("stats").clients, 1, "the lost connection noticed");
    // ... and keeps the client's subscription within the window.
    let routes = observer.routes(100).await.expect("routes");
    assert_eq!(routes.prt.len(), 1, "kept within the window: {routes:?}");
    until_routes(&observer, "the subscription forgotten", |r| r.prt.is_empty()).await;
    let stats = observer.stats().await.expect("stats");
    assert_eq!(stats.client_sessions_expired, 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_closes_is_forgotten_at_once() {
    let broker = start_broker("B1", "client-closes");
    let observer = client(&broker, "observer").await;
    let done = client(&broker, "done").await;
    done.send("s [class,eq,'tick']").await.expect("subscribed");
    drop(done);
    // Far sooner than the 10 s window.
    let started = std::time::Instant::now();
    until_routes(&observer, "the subscription forgotten", |r| r.prt.is_empty()).await;
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(observer.stats().await.expect("stats").client_sessions_expired, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sessions_a_client_starts_over_and_re_issues() {
    let broker = start_with("B1", "no-client-sessions", &["--client-window-ms".to_owned(), "0".to_owned()]);
    let (publisher, mut subscriber) = publisher_and_subscriber(&broker).await;
    assert_eq!(subscriber.session().0, 0, "no session");
    subscriber.drop_connection();
    // The subscriber reconnects and re-issues its subscription; publications then reach it.
    for m in 1..400 {
        publish(&publisher, m).await;
        if let Ok(Some(n)) =
            tokio::time::timeout(Duration::from_millis(50), subscriber.next_notification()).await
            && m_of(&n).is_some()
        {
            let stats = publisher.stats().await.expect("stats");
            assert_eq!(stats.client_sessions_resumed, 0, "{stats:?}");
            return;
        }
    }
    panic!("the subscriber never got a publication after reconnecting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_reconnect_has_no_session() {
    let broker = start_broker("B1", "client-no-reconnect");
    let once = padres_client::Connect::new(broker.addr)
        .trust(padres_client::Trust::Certificates(vec![broker.dir.join("cert.pem")]))
        .reconnect(false)
        .connect()
        .await
        .expect("connects");
    assert_eq!(once.session().0, 0);
}

/// Streams `n` publications of `class` from `client` while reading what it subscribed to,
/// dropping its connection every `drop_every`; returns the `m`s received, and the client
/// (dropped only when the other client has read everything: a client closed at once
/// discards what it has not yet sent).
async fn publish_and_read(
    mut client: Client,
    class: &'static str,
    n: u64,
    drop_every: u64,
) -> (Vec<i64>, std::sync::Arc<Client>) {
    let mut notifications = client.take_notifications();
    let client = std::sync::Arc::new(client);
    let reader = tokio::spawn(async move { receive(&mut notifications, n, Duration::from_secs(20)).await });
    for m in 1..=n {
        stream(&client, class, m).await;
        if m.is_multiple_of(drop_every) {
            client.drop_connection();
        }
    }
    (reader.await.expect("read"), client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_publish_and_subscribe_at_once_resume_both_ways() {
    let broker = start_broker("B1", "client-both-ways");
    let a = client(&broker, "a").await;
    let b = client(&broker, "b").await;
    a.send("a [class,eq,'ping'],[m,isPresent,0]").await.expect("advertised");
    b.send("a [class,eq,'pong'],[m,isPresent,0]").await.expect("advertised");
    a.send("s [class,eq,'pong']").await.expect("subscribed");
    b.send("s [class,eq,'ping']").await.expect("subscribed");
    const N: u64 = 10_000;
    let ((from_b, _a), (from_a, _b)) =
        tokio::join!(publish_and_read(a, "ping", N, 3_000), publish_and_read(b, "pong", N, 3_500));
    let expected: Vec<i64> = (1..=N as i64).collect();
    assert!(
        from_b == expected,
        "a received {} of b's, in order: {}",
        from_b.len(),
        from_b.windows(2).all(|w| w[0] < w[1])
    );
    assert!(
        from_a == expected,
        "b received {} of a's, in order: {}",
        from_a.len(),
        from_a.windows(2).all(|w| w[0] < w[1])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_closed_after_streaming_loses_none_of_it() {
    let broker = start_broker("B1", "client-close");
    let (publisher, mut subscriber) = publisher_and_subscriber(&broker).await;
    const N: u64 = 5_000;
    for m in 1..=N {
        stream(&publisher, "tick", m).await;
    }
    publisher.close().await.expect("closed");
    let got = receive(&mut subscriber.take_notifications(), N, Duration::from_secs(10)).await;
    assert_eq!(got, (1..=N as i64).collect::<Vec<i64>>());
}
