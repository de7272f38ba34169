//! Client sessions with a real broker over QUIC: a client whose connection drops and who
//! reconnects within the window loses nothing and receives nothing twice, publisher and
//! subscriber alike; a client that does not return is forgotten when the window passes; a
//! client that closes normally is forgotten at once; a broker that keeps no sessions makes
//! the client start over and re-issue.

use std::time::Duration;

use padres_client::{Client, ClientError, Connect, Notification, Trust};
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

/// Streams `p [class,'tick'],[m,M]` without waiting, retrying likewise.
async fn stream(publisher: &Client, m: u64) {
    let publication: padres_lang::Publication = format!("[class,'tick'],[m,{m}]").parse().expect("valid");
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
                stream(&publisher, m).await;
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
    // Nothing more arrives (nothing doubled after the last).
    let extra = tokio::time::timeout(Duration::from_millis(300), subscriber.next_notification()).await;
    assert!(extra.is_err(), "an extra notification: {extra:?}");
    let stats = publisher.stats().await.expect("stats");
    assert!(stats.client_sessions_resumed >= 8 + 6, "{stats:?}");
    assert_eq!(subscriber.session().0, session, "the same session throughout");
    assert_eq!(stats.subscriptions, 1, "nothing was re-issued: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_return_is_forgotten_when_the_window_passes() {
    let broker = start_with("B1", "client-window", &["--client-window-ms".to_owned(), "1000".to_owned()]);
    let observer = client(&broker, "observer").await;
    let gone = Connect::new(broker.addr)
        .trust(Trust::Certificates(vec![broker.dir.join("cert.pem")]))
        .name("gone")
        .reconnect(false)
        .connect()
        .await
        .expect("connects");
    gone.send("s [class,eq,'tick']").await.expect("subscribed");
    gone.drop_connection();
    tokio::time::sleep(Duration::from_millis(300)).await;
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
