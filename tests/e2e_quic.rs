//! Real `padres-broker` processes on loopback ports chosen at run time, and real clients
//! over QUIC: delivery through chains and stars, clean-up, brokers killed and restarted,
//! bad input, and mutual TLS between brokers.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use padres_client::{Client, ClientError};
use padres_lang::wire::codec::{DEFAULT_MAX_FRAME, FrameReader};
use padres_lang::wire::{ErrorCode, Frame, PROTOCOL_VERSION, Role};
use padres_lang::{Message, Name, Value};
use padres_tests::broker::{
    Broker, client, client_advertisements, data_dir, neighbour_of, start_broker, start_linked_broker,
    start_with, until_routes,
};
use padres_transport::{Trust, read_frame, tls, write_frame};

async fn next(
    client: &mut Client,
    wait: Duration,
) -> Option<(Vec<padres_lang::MessageId>, padres_lang::Publication)> {
    match tokio::time::timeout(wait, client.next_notification()).await.ok().flatten()? {
        padres_client::Notification::Publication { subs, publication } => Some((subs, publication)),
        other => panic!("expected a publication, got {other:?}"),
    }
}

/// Publishes `text` (with `n` set to a counter) until `subscriber` receives one, while
/// links come up and subscriptions travel; returns the publication received.
async fn publish_until_delivered(
    publisher: &Client,
    subscriber: &mut Client,
    text: &str,
) -> padres_lang::Publication {
    for n in 0..200 {
        publisher.send(&format!("p {text},[n,{n}]")).await.expect("published");
        if let Some((_, p)) = next(subscriber, Duration::from_millis(100)).await {
            return p;
        }
    }
    panic!("{text} never reached the subscriber");
}

/// Nothing arrives before the marker `[class,'marker'],[m,M]`, which the caller published
/// after what must not arrive: one publisher's publications keep their order on a path,
/// so anything delivered would come first. A positive signal instead of waiting for
/// silence.
async fn nothing_before_marker(client: &mut Client, m: i64) {
    let (_, p) = next(client, Duration::from_secs(10)).await.expect("the marker arrives");
    assert_eq!(p.get("m"), Some(&Value::Int(m)), "delivered before the marker: {p}");
}

#[tokio::test]
async fn publications_reach_matching_subscribers_over_quic() {
    let broker = start_broker("B1", "deliver");
    let mut subscriber = client(&broker, "sub").await;
    let publisher = client(&broker, "pub").await;

    let sub =
        subscriber.send("s [class,eq,'stock'],[price,>,100]").await.expect("subscribed").expect("an id");
    assert_eq!(sub.origin.as_str(), "B1");
    subscriber.send("s [class,eq,'marker']").await.expect("subscribed");
    publisher.send("a [class,eq,'stock'],[symbol,isPresent,''],[price,>,0]").await.expect("advertised");
    publisher.send("a [class,eq,'marker'],[m,isPresent,0]").await.expect("advertised");
    publisher.send("p [class,'stock'],[symbol,'IBM'],[price,90]").await.expect("published");
    publisher.send("p [class,'stock'],[symbol,'IBM'],[price,120]").await.expect("published");

    let (matched, publication) =
        next(&mut subscriber, Duration::from_secs(10)).await.expect("a notification");
    assert_eq!(matched, std::slice::from_ref(&sub));
    assert_eq!(publication.without_time().to_string(), "[class,'stock'],[symbol,'IBM'],[price,120]");
    // Its broker stamped the time it arrived.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis();
    let time = publication.time().expect("a time attribute").millis();
    assert!(
        (i64::try_from(now).expect("fits") - time).abs() < 60_000,
        "time {time} is not about now ({now})"
    );

    // Errors come back as errors, and the connection goes on.
    let refused = publisher.send("p [class,'bond'],[price,1]").await;
    assert!(
        matches!(refused, Err(ClientError::Refused { code: ErrorCode::NotAdvertised, .. })),
        "{refused:?}"
    );
    let unknown = subscriber.send("unsub B1/999").await;
    assert!(matches!(unknown, Err(ClientError::Refused { code: ErrorCode::UnknownId, .. })), "{unknown:?}");
    subscriber.send(&format!("unsub {sub}")).await.expect("unsubscribed");
    publisher.send("p [class,'stock'],[symbol,'IBM'],[price,130]").await.expect("published");
    publisher.send("p [class,'marker'],[m,1]").await.expect("published");
    nothing_before_marker(&mut subscriber, 1).await;

    let stats = publisher.stats().await.expect("stats");
    assert_eq!(stats.broker.as_str(), "B1");
    // The marker's advertisement and subscription remain (and the broker's own
    // advertisement of its reports, `padres_broker::monitor`).
    assert_eq!((stats.clients, stats.advertisements, stats.subscriptions), (2, 3, 1));
    assert_eq!((stats.publications_in, stats.notifications_out), (5, 2));
}

#[tokio::test]
async fn a_publication_is_never_stamped_before_its_publisher_sent_it() {
    // A subscriber that notes the time, publishes and then asks for what came since must
    // find its own publication: the broker's stamp may not lag this machine's clock.
    let broker = start_broker("B1", "stamp");
    let mut subscriber = client(&broker, "sub").await;
    let publisher = client(&broker, "pub").await;
    subscriber.send("s [class,eq,'tick']").await.expect("subscribed");
    publisher.send("a [class,eq,'tick'],[n,isPresent,0]").await.expect("advertised");
    for n in 0..200 {
        let before = padres_client::check::now().millis();
        publisher.send(&format!("p [class,'tick'],[n,{n}]")).await.expect("published");
        let (_, publication) = next(&mut subscriber, Duration::from_secs(10)).await.expect("delivered");
        let time = publication.time().expect("stamped").millis();
        assert!(time >= before, "publication {n} stamped {time}, {} ms before it was sent", before - time);
    }
}

#[tokio::test]
async fn a_client_that_disconnects_does_not_disturb_the_others() {
    let broker = start_broker("B1", "disconnect");
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'stock'],[price,>,0]").await.expect("advertised");
    {
        let gone = client(&broker, "gone").await;
        gone.send("s [class,eq,'stock']").await.expect("subscribed");
    }
    // The broker keeps serving the others.
    let mut other = client(&broker, "other").await;
    other.send("s [class,eq,'stock'],[price,>,5]").await.expect("subscribed");
    publisher.send("p [class,'stock'],[price,10]").await.expect("published");
    assert!(next(&mut other, Duration::from_secs(10)).await.is_some());
    until_routes(&publisher, "the gone client's subscription is removed", |r| r.prt_total == 1).await;
}

#[tokio::test]
async fn a_three_broker_chain_routes_by_content() {
    let b1 = start_linked_broker("B1", "chain", None);
    let b2 = start_linked_broker("B2", "chain", Some(&b1));
    let b3 = start_linked_broker("B3", "chain", Some(&b2));
    let publisher = client(&b1, "pub").await;
    let mut subscriber = client(&b3, "sub").await;
    publisher.send("a [class,eq,'stock'],[price,>,0],[n,isPresent,0]").await.expect("advertised");
    let sub = subscriber.send("s [class,eq,'stock'],[price,>,100]").await.expect("subscribed").expect("id");
    // The links come up and the subscription travels while we publish: publish until the
    // first matching quote arrives (the overlay settles within a few round trips).
    let mut delivered = None;
    for n in 0..100 {
        publisher.send(&format!("p [class,'stock'],[price,50],[n,{n}]")).await.expect("published");
        publisher.send(&format!("p [class,'stock'],[price,150],[n,{n}]")).await.expect("published");
        if let Some(got) = next(&mut subscriber, Duration::from_millis(100)).await {
            delivered = Some(got);
            break;
        }
    }
    let (matched, publication) = delivered.expect("a publication crossed B1 -> B2 -> B3");
    assert_eq!(matched, [sub]);
    assert_eq!(publication.get("price"), Some(&Value::Int(150)));
    // Only matching ones ever arrive.
    while let Some((_, p)) = next(&mut subscriber, Duration::from_millis(300)).await {
        assert_eq!(p.get("price"), Some(&Value::Int(150)), "{p}");
    }
}

#[tokio::test]
async fn a_five_broker_star_cleans_up_after_unsubscribe_unadvertise_and_disconnect() {
    let hub = start_broker("H", "star");
    let leaves: Vec<Broker> =
        ["L1", "L2", "L3", "L4"].iter().map(|name| start_linked_broker(name, "star", Some(&hub))).collect();
    let observer = client(&hub, "observer").await;
    until_routes(&observer, "four neighbours", |r| r.neighbours.len() == 4).await;

    let publisher = client(&leaves[0], "pub").await;
    let mut at_l2 = client(&leaves[1], "sub2").await;
    let mut at_l3 = client(&leaves[2], "sub3").await;
    let mut at_l4 = client(&leaves[3], "sub4").await;
    let adv =
        publisher.send("a [class,eq,'stock'],[price,>,0],[n,isPresent,0]").await.expect("adv").expect("id");
    let marker_adv = publisher.send("a [class,eq,'marker'],[m,isPresent,0]").await.expect("adv").expect("id");
    let s2 = at_l2.send("s [class,eq,'stock'],[price,>,100]").await.expect("sub").expect("id");
    let marker = at_l2.send("s [class,eq,'marker']").await.expect("sub").expect("id");
    at_l3.send("s [class,eq,'stock'],[price,<,50]").await.expect("sub");
    at_l4.send("s [class,eq,'stock']").await.expect("sub");
    until_routes(&observer, "four subscriptions at the hub", |r| r.prt_total == 4).await;

    let p = publish_until_delivered(&publisher, &mut at_l2, "[class,'stock'],[price,150]").await;
    assert_eq!(p.get("price"), Some(&Value::Int(150)));
    publisher.send("p [class,'stock'],[price,20],[n,0]").await.expect("published");
    let (_, low) = next(&mut at_l3, Duration::from_secs(10)).await.expect("L3 gets the low price");
    assert_eq!(low.get("price"), Some(&Value::Int(20)));
    // L4 takes everything: the 150s (one or more) and the 20.
    let mut prices = Vec::new();
    while let Some((_, p)) = next(&mut at_l4, Duration::from_millis(300)).await {
        prices.push(p.get("price").cloned());
    }
    assert!(prices.contains(&Some(Value::Int(20))) && prices.contains(&Some(Value::Int(150))), "{prices:?}");
    while next(&mut at_l2, Duration::from_millis(100)).await.is_some() {}

    // Unsubscribe: gone from the hub, and no more deliveries.
    at_l2.send(&format!("unsub {s2}")).await.expect("unsubscribed");
    until_routes(&observer, "the hub forgets the unsubscribed", |r| r.prt_total == 3).await;
    publisher.send("p [class,'stock'],[price,160],[n,1]").await.expect("published");
    publisher.send("p [class,'marker'],[m,2]").await.expect("published");
    nothing_before_marker(&mut at_l2, 2).await;
    at_l2.send(&format!("unsub {marker}")).await.expect("unsubscribed");
    until_routes(&observer, "the hub forgets the marker subscription", |r| r.prt_total == 2).await;

    // A disconnecting subscriber is cleaned up everywhere.
    drop(at_l3);
    until_routes(&observer, "the hub forgets the disconnected", |r| r.prt_total == 1).await;

    // Unadvertise: the hub forgets the advertisement and the subscription it pulled.
    publisher.send(&format!("unadv {adv}")).await.expect("unadvertised");
    publisher.send(&format!("unadv {marker_adv}")).await.expect("unadvertised");
    until_routes(&observer, "the hub forgets the advertisements", |r| client_advertisements(r) == 0).await;
    let refused = publisher.send("p [class,'stock'],[price,170],[n,2]").await;
    assert!(
        matches!(refused, Err(ClientError::Refused { code: ErrorCode::NotAdvertised, .. })),
        "{refused:?}"
    );
    let l1 = client(&leaves[0], "l1-observer").await;
    until_routes(&l1, "L1 holds no subscription once nothing is advertised", |r| r.prt_total == 0).await;
}

#[tokio::test]
async fn a_middle_broker_killed_and_restarted_rejoins_without_client_action() {
    let b1 = start_linked_broker("B1", "restart", None);
    let mut b2 = start_linked_broker("B2", "restart", Some(&b1));
    let b3 = start_linked_broker("B3", "restart", Some(&b2));
    let publisher = client(&b1, "pub").await;
    let mut subscriber = client(&b3, "sub").await;
    publisher.send("a [class,eq,'stock'],[price,>,0],[n,isPresent,0]").await.expect("advertised");
    let sub = subscriber.send("s [class,eq,'stock'],[price,>,100]").await.expect("subscribed").expect("id");
    publish_until_delivered(&publisher, &mut subscriber, "[class,'stock'],[price,150]").await;

    b2.kill_and_restart();
    // No client does anything: B2 dials B1 again, B3 redials B2, and the tables are
    // re-synchronised over the new links.
    let (matched, p) = {
        let mut delivered = None;
        for n in 1000..1300 {
            publisher.send(&format!("p [class,'stock'],[price,150],[n,{n}]")).await.expect("published");
            if let Some(got) = next(&mut subscriber, Duration::from_millis(100)).await
                && matches!(got.1.get("n"), Some(Value::Int(n)) if *n >= 1000)
            {
                delivered = Some(got);
                break;
            }
        }
        delivered.expect("deliveries resume after the middle broker restarts")
    };
    assert_eq!(matched, [sub]);
    assert_eq!(p.get("price"), Some(&Value::Int(150)));
}

#[tokio::test]
async fn clients_reconnect_and_reissue_after_their_broker_restarts() {
    let mut broker = start_broker("B1", "reconnect");
    let publisher = client(&broker, "pub").await;
    let mut subscriber = client(&broker, "sub").await;
    publisher.send("a [class,eq,'stock'],[price,>,0],[n,isPresent,0]").await.expect("advertised");
    let sub = subscriber.send("s [class,eq,'stock'],[price,>,100]").await.expect("subscribed").expect("id");
    publish_until_delivered(&publisher, &mut subscriber, "[class,'stock'],[price,150]").await;

    broker.kill_and_restart();
    let restarted = std::time::Instant::now();
    let mut delivered = None;
    for n in 0..300 {
        // While the clients reconnect, requests fail; then they go through again.
        let _ = publisher.send(&format!("p [class,'stock'],[price,150],[n,{n}]")).await;
        if let Some(got) = next(&mut subscriber, Duration::from_millis(100)).await {
            delivered = Some(got);
            break;
        }
    }
    let (matched, _) = delivered.expect("delivery resumes once both clients are back");
    // The restarted broker resets its earlier life's connections, so the clients notice at
    // once rather than after the idle timeout (10 s).
    assert!(restarted.elapsed() < Duration::from_secs(5), "took {:?}", restarted.elapsed());
    assert_eq!(matched, std::slice::from_ref(&sub), "notifications name the id given at the first subscribe");
    // The first id still withdraws the re-issued subscription.
    subscriber.send(&format!("unsub {sub}")).await.expect("unsubscribed by its first id");
    publisher.send("p [class,'stock'],[price,150],[n,9999]").await.expect("published");
    while let Some((_, p)) = next(&mut subscriber, Duration::from_millis(300)).await {
        assert_ne!(p.get("n"), Some(&Value::Int(9999)), "delivered after unsubscribing");
    }
}

/// A broker may notify a subscription before replying to it (the reply waits for the
/// subscription to settle among its neighbours): after a reconnect, such a notification
/// names the re-issued subscription's new id, and the client must still report the first.
/// A broker played by hand makes the order certain.
#[tokio::test]
async fn a_notification_before_a_reissued_subscriptions_reply_names_the_first_id() {
    let dir = data_dir("early-notification", "B1");
    std::fs::remove_dir_all(&dir).ok();
    padres_broker::net::cert::load_or_create(&dir, &[]).expect("a certificate");
    let identity = padres_transport::Identity::from_pem_files(&dir.join("cert.pem"), &dir.join("key.pem"))
        .expect("identity");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a port");
    let addr = socket.local_addr().expect("bound");
    let config = tls::server_config(&identity, false).expect("server config");
    let endpoint = tls::server_endpoint(socket, config, &identity).expect("endpoint");
    let publication: std::sync::Arc<padres_lang::Publication> =
        std::sync::Arc::new("[class,'stock'],[price,150]".parse().expect("publication"));
    let id = |seq| padres_lang::MessageId::new(Name::new("B1").expect("name"), seq);

    // The test says when the client has the first life's notification; then that life ends.
    let (first_read, mut end_first) = tokio::sync::oneshot::channel::<()>();
    let broker = {
        let publication = publication.clone();
        tokio::spawn(async move {
            // Each connection: hello, then the subscription's request. The first life replies
            // then notifies, and goes away; the second notifies under its new id first.
            for (seq, notify_first) in [(1, false), (7, true)] {
                let connection = endpoint.accept().await.expect("a client").await.expect("connects");
                let (mut send, mut recv) = connection.accept_bi().await.expect("a stream");
                let mut reader = FrameReader::new(DEFAULT_MAX_FRAME);
                let (_, s) =
                    padres_transport::handshake::await_hello(send, &mut recv, &mut reader, DEFAULT_MAX_FRAME)
                        .await
                        .expect("hello");
                send = s;
                padres_transport::handshake::welcome(
                    &mut send,
                    Name::new("B1").expect("name"),
                    DEFAULT_MAX_FRAME,
                )
                .await
                .expect("welcome");
                // The client asks for a session; this broker keeps none (session 0), so the
                // client re-issues when it reconnects.
                match read_frame(&mut recv, &mut reader).await.expect("reads") {
                    Some(Frame::Resume { session: 0, .. }) => {}
                    other => panic!("expected a request for a session, got {other:?}"),
                }
                let none = Frame::Resume { session: 0, received: 0, fresh: true };
                write_frame(&mut send, &none, DEFAULT_MAX_FRAME).await.expect("written");
                let req = match read_frame(&mut recv, &mut reader).await.expect("reads") {
                    Some(Frame::Request { req, message: Message::Subscribe(_) }) => req,
                    other => panic!("expected the subscription, got {other:?}"),
                };
                let notification =
                    Frame::Notification { subs: vec![id(seq)], publication: publication.clone() };
                let ok = Frame::Ok { req, id: Some(id(seq)) };
                let frames = if notify_first { [notification, ok] } else { [ok, notification] };
                for frame in &frames {
                    write_frame(&mut send, frame, DEFAULT_MAX_FRAME).await.expect("written");
                }
                if notify_first {
                    // Kept until the test ends (it aborts this task).
                    std::future::pending::<()>().await;
                } else {
                    (&mut end_first).await.expect("the test goes on");
                    connection.close(0_u32.into(), b"restarting");
                }
            }
        })
    };

    let mut subscriber =
        Client::connect(addr, "localhost", &dir.join("cert.pem"), "sub").await.expect("connects");
    let sub = subscriber.send("s [class,eq,'stock'],[price,>,100]").await.expect("subscribed").expect("id");
    assert_eq!(sub, id(1));
    let (first, _) =
        next(&mut subscriber, Duration::from_secs(5)).await.expect("the first life's notification");
    assert_eq!(first, [id(1)]);
    first_read.send(()).expect("the broker waits for it");
    let (second, p) =
        next(&mut subscriber, Duration::from_secs(10)).await.expect("the notification after reconnecting");
    assert_eq!(second, [id(1)], "the notification that came before the reply names the first id");
    assert_eq!(p.get("price"), Some(&Value::Int(150)));
    broker.abort();
    std::fs::remove_dir_all(&dir).ok();
}

/// A raw QUIC connection that speaks frames by hand, for input the client library would
/// never send.
struct Raw {
    connection: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    reader: FrameReader,
    _endpoint: quinn::Endpoint,
}

async fn raw(broker: &Broker, hello: bool) -> Raw {
    let config = tls::client_config(&Trust::Certificates(vec![broker.dir.join("cert.pem")]), None)
        .expect("tls config");
    let mut endpoint = quinn::Endpoint::client(([127, 0, 0, 1], 0).into()).expect("endpoint");
    endpoint.set_default_client_config(config);
    let connection = endpoint.connect(broker.addr, "localhost").expect("dial").await.expect("connects");
    let (send, recv) = connection.open_bi().await.expect("stream");
    let mut raw =
        Raw { connection, send, recv, reader: FrameReader::new(DEFAULT_MAX_FRAME), _endpoint: endpoint };
    if hello {
        let hello = Frame::Hello {
            version: PROTOCOL_VERSION,
            role: Role::Client,
            name: Name::new("raw").expect("name"),
            token: None,
        };
        write_frame(&mut raw.send, &hello, DEFAULT_MAX_FRAME).await.expect("hello sent");
        let welcome = read_frame(&mut raw.recv, &mut raw.reader).await.expect("reads");
        assert!(matches!(welcome, Some(Frame::Welcome { .. })), "{welcome:?}");
    }
    raw
}

impl Raw {
    /// The next frame, skipping notifications.
    async fn answer(&mut self) -> Option<Frame> {
        loop {
            let frame =
                tokio::time::timeout(Duration::from_secs(10), read_frame(&mut self.recv, &mut self.reader))
                    .await
                    .expect("an answer in time")
                    .ok()
                    .flatten();
            if !matches!(frame, Some(Frame::Notification { .. })) {
                return frame;
            }
        }
    }
}

/// A publisher and a subscriber that must keep working whatever else happens.
struct Witness {
    publisher: Client,
    subscriber: Client,
    n: u32,
}

impl Witness {
    async fn new(broker: &Broker) -> Self {
        let publisher = client(broker, "witness-pub").await;
        let subscriber = client(broker, "witness-sub").await;
        publisher.send("a [class,eq,'witness'],[n,isPresent,0]").await.expect("advertised");
        subscriber.send("s [class,eq,'witness']").await.expect("subscribed");
        Self { publisher, subscriber, n: 0 }
    }

    async fn still_served(&mut self) {
        self.n += 1;
        let n = self.n;
        self.publisher
            .send(&format!("p [class,'witness'],[n,{n}]"))
            .await
            .expect("the witness still publishes");
        loop {
            let (_, p) = next(&mut self.subscriber, Duration::from_secs(10))
                .await
                .expect("the witness still receives");
            if p.get("n") == Some(&Value::Int(i64::from(n))) {
                return;
            }
        }
    }
}

#[tokio::test]
async fn bad_input_gets_an_error_and_leaves_other_clients_alone() {
    let broker = start_broker("B1", "bad-input");
    let mut witness = Witness::new(&broker).await;

    // Garbage instead of a hello.
    let mut garbage = raw(&broker, false).await;
    garbage.send.write_all(b"\x00\x00\x00\x07garbage").await.expect("sent");
    match garbage.answer().await {
        Some(Frame::Error { code: ErrorCode::BadRequest, message, .. }) => {
            assert!(message.contains("invalid input"), "{message}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    witness.still_served().await;

    // Garbage after a proper hello.
    let mut garbage = raw(&broker, true).await;
    garbage.send.write_all(b"\x00\x00\x00\x04\xff\xff\xff\xff").await.expect("sent");
    assert!(matches!(garbage.answer().await, Some(Frame::Error { code: ErrorCode::BadRequest, .. })));
    witness.still_served().await;

    // A frame announcing more than the limit is refused before its body is read.
    let mut oversized = raw(&broker, true).await;
    oversized.send.write_all(&u32::MAX.to_be_bytes()).await.expect("sent");
    match oversized.answer().await {
        Some(Frame::Error { code: ErrorCode::BadRequest, message, .. }) => {
            assert!(message.contains("too large") || message.contains("exceeds"), "{message}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    witness.still_served().await;

    // A frame a client must not send is answered, and the session goes on.
    let mut confused = raw(&broker, true).await;
    let welcome = Frame::Welcome { version: PROTOCOL_VERSION, broker: Name::new("X").expect("name") };
    write_frame(&mut confused.send, &welcome, DEFAULT_MAX_FRAME).await.expect("sent");
    assert!(matches!(
        confused.answer().await,
        Some(Frame::Error { req: None, code: ErrorCode::BadRequest, .. })
    ));
    let subscribe = Frame::Request { req: 1, message: "s [class,eq,'x']".parse::<Message>().expect("valid") };
    write_frame(&mut confused.send, &subscribe, DEFAULT_MAX_FRAME).await.expect("sent");
    assert!(matches!(confused.answer().await, Some(Frame::Ok { req: 1, id: Some(_) })));

    // A subscription that does not hold up: an attribute name with a space in it, written
    // into an otherwise well-formed frame (the client library would never send it).
    let mut invalid = raw(&broker, true).await;
    let subscribe =
        Frame::Request { req: 1, message: "s [class,eq,'x'],[abc,>,1]".parse::<Message>().expect("valid") };
    let mut bytes = Vec::new();
    padres_lang::wire::encode(&subscribe, DEFAULT_MAX_FRAME, &mut bytes).expect("encodes");
    let at = bytes.windows(3).position(|w| w == b"abc").expect("the name is in the frame");
    bytes[at + 1] = b' ';
    invalid.send.write_all(&bytes).await.expect("sent");
    match invalid.answer().await {
        Some(Frame::Error { code: ErrorCode::BadRequest, message, .. }) => {
            assert!(message.contains("a c"), "the error names the bad attribute: {message}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    witness.still_served().await;

    // A publication without an advertisement.
    let refused = witness.subscriber.send("p [class,'witness'],[n,0]").await;
    assert!(
        matches!(refused, Err(ClientError::Refused { code: ErrorCode::NotAdvertised, .. })),
        "{refused:?}"
    );
    witness.still_served().await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_with_a_reason() {
    let limit = ["--max-queued-bytes-per-client".to_owned(), "200000".to_owned()];
    let broker = start_with("B1", "slow", &limit);
    let mut witness = Witness::new(&broker).await;
    let mut slow = raw(&broker, true).await;
    let subscribe =
        Frame::Request { req: 1, message: "s [class,eq,'bulk']".parse::<Message>().expect("valid") };
    write_frame(&mut slow.send, &subscribe, DEFAULT_MAX_FRAME).await.expect("sent");
    assert!(matches!(slow.answer().await, Some(Frame::Ok { req: 1, .. })));
    // From here on the slow client reads nothing.

    let publisher = client(&broker, "bulk-pub").await;
    publisher.send("a [class,eq,'bulk'],[n,isPresent,0]").await.expect("advertised");
    let payload = "ab".repeat(16 * 1024);
    let mut cut = false;
    for n in 0..5_000 {
        publisher.send(&format!("p [class,'bulk'],[n,{n}] payload=0x{payload}")).await.expect("published");
        if n % 50 == 0 && publisher.stats().await.expect("stats").slow_clients_dropped == 1 {
            cut = true;
            break;
        }
    }
    assert!(cut, "the slow client was never cut off");
    let closed =
        tokio::time::timeout(Duration::from_secs(10), slow.connection.closed()).await.expect("closed");
    assert!(closed.to_string().contains("too slow"), "{closed}");
    witness.still_served().await;
}

/// Makes a CA in `dir` and issues a certificate for each of `brokers` into its data dir.
fn federation(dir: &Path, test: &str, brokers: &[&str]) {
    let cert = |args: &[&str]| {
        let status = Command::new(padres_tests::binary("padres-broker"))
            .arg("cert")
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("runs");
        assert!(status.success(), "padres-broker cert {args:?}");
    };
    let ca = dir.display().to_string();
    cert(&["ca", "--out", &ca]);
    for name in brokers {
        cert(&["issue", "--ca", &ca, "--name", name, "--out", &data_dir(test, name).display().to_string()]);
    }
}

#[tokio::test]
async fn with_a_federation_ca_only_brokers_it_certified_may_link() {
    let test = "mtls";
    let fed = data_dir(test, "fed");
    let other = data_dir(test, "other-fed");
    federation(&fed, test, &["B1", "B2"]);
    federation(&other, test, &["X"]);
    let fed_ca = fed.join("ca.pem").display().to_string();
    let other_ca = other.join("ca.pem").display().to_string();

    let b1 = start_with("B1", test, &["--federation-ca".into(), fed_ca.clone()]);
    let link_to_b1 = format!("quic://{}", b1.addr);
    let b2 = start_with(
        "B2",
        test,
        &["--federation-ca".into(), fed_ca.clone(), "--neighbour".into(), link_to_b1.clone()],
    );
    // X's certificate comes from another CA; X trusts B1's CA, so only B1 can say no.
    let x = start_with(
        "X",
        test,
        &[
            "--federation-ca".into(),
            other_ca,
            "--peer-cert".into(),
            fed_ca.clone(),
            "--neighbour".into(),
            link_to_b1.clone(),
        ],
    );
    // Y presents its own self-signed certificate, which B1 does not trust.
    let y = start_with(
        "Y",
        test,
        &["--peer-cert".into(), fed_ca.clone(), "--neighbour".into(), link_to_b1.clone()],
    );
    // Z holds a certificate of the right CA, but issued for another name.
    let status = Command::new(padres_tests::binary("padres-broker"))
        .args(["cert", "issue", "--ca"])
        .arg(&fed)
        .args(["--name", "Mallory", "--out"])
        .arg(data_dir(test, "Z"))
        .stdout(Stdio::null())
        .status()
        .expect("runs");
    assert!(status.success());
    let z = start_with("Z", test, &["--federation-ca".into(), fed_ca, "--neighbour".into(), link_to_b1]);

    let observer = Client::connect(b1.addr, "localhost", &fed.join("ca.pem"), "observer")
        .await
        .expect("clients need no certificate");
    // A client on the same machine finds what to trust in the local registry: the CA that
    // issued B1's certificate (B1's certificate alone verifies nothing).
    padres_client::Connect::new(b1.addr)
        .name("local")
        .reconnect(false)
        .connect()
        .await
        .expect("a local client trusts the broker through the registry");
    until_routes(&observer, "B2 links", |r| r.neighbours.iter().any(|n| n.as_str() == "B2")).await;
    // Wait until the refusals have begun: X, Y and Z are refused at the hello and counted;
    // they redial every 0.1 s at first, so six refusals mean all have been trying for a
    // while.
    for _ in 0..200 {
        if observer.stats().await.expect("stats").links_refused >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let routes = observer.routes(10).await.expect("routes");
    let neighbours: Vec<&str> = routes.neighbours.iter().map(Name::as_str).collect();
    assert_eq!(neighbours, ["B2"], "X (another CA), Y (self-signed) and Z (another name) are refused");
    for (refused, name, trust) in [(&x, "X", other.join("ca.pem")), (&y, "Y", y.dir.join("cert.pem"))] {
        let own = Client::connect(refused.addr, "localhost", &trust, "observer").await.expect("connects");
        let stats = own.stats().await.expect("stats");
        assert!(stats.neighbours.is_empty(), "{name} has no link: {:?}", stats.neighbours);
    }
    drop((b2, x, y, z));
    // B1 withdraws its registration (the CA) when it stops.
    let registered = padres_transport::local::certificate_path(b1.addr.port()).expect("a registry");
    assert!(registered.is_file(), "B1 registered what verifies it");
    let mut b1 = b1;
    let exited = b1.terminate(10).await;
    assert!(exited.is_some_and(|e| e.success()), "B1 exits within 10 s of SIGTERM: {exited:?}");
    assert!(!registered.exists(), "the registration is withdrawn on shutdown");
    let _ = std::fs::remove_dir_all(&fed);
    let _ = std::fs::remove_dir_all(&other);
}

#[tokio::test]
async fn sigterm_shuts_the_broker_down_cleanly() {
    let mut broker = start_broker("B1", "sigterm");
    let registered = padres_transport::local::certificate_path(broker.addr.port()).expect("a registry");
    assert!(registered.is_file(), "the broker registered its certificate for local clients");
    let subscriber = client(&broker, "sub").await;
    subscriber.send("s [class,eq,'x']").await.expect("subscribed");

    let exited = broker.terminate(5).await.expect("the broker exits within 5 s of SIGTERM");
    assert!(exited.success(), "{exited:?}");
    assert!(!registered.exists(), "the registration is withdrawn on shutdown");
    // Its clients are told (the connection closes), not left waiting for a timeout.
    let closed = subscriber.send("s [class,eq,'y']").await;
    assert!(matches!(closed, Err(ClientError::Closed(_))), "{closed:?}");
}

#[tokio::test]
async fn configured_limits_refuse_with_a_reason() {
    let limits = ["--max-subscriptions-per-client", "2", "--max-connections", "2"].map(String::from);
    let broker = start_with("B1", "limits", &limits);
    let first = client(&broker, "first").await;
    let a = first.send("s [class,eq,'a']").await.expect("1 of 2").expect("an id");
    first.send("s [class,eq,'b']").await.expect("2 of 2");
    let third = first.send("s [class,eq,'c']").await;
    match third {
        Err(ClientError::Refused { code: ErrorCode::LimitExceeded, message }) => {
            assert!(message.contains("unsubscribe first"), "{message}");
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    let _second = client(&broker, "second").await;
    let refused =
        Client::connect(broker.addr, "localhost", &broker.dir.join("cert.pem"), "third").await.map(|_| ());
    assert!(
        matches!(refused, Err(ClientError::Connect { .. })),
        "a third connection is refused: {refused:?}"
    );
    // Those admitted are still served.
    first.send(&format!("unsub {a}")).await.expect("unsubscribed");
    first.send("s [class,eq,'c']").await.expect("room again");
}

#[tokio::test]
async fn brokers_that_list_each_other_keep_one_link() {
    // B2 dials B1 first; then B1 is restarted listing B2 too, so both dial.
    let mut b1 = start_broker("B1", "mutual");
    let b2 = start_linked_broker("B2", "mutual", Some(&b1));
    b1.args.extend(neighbour_of(&b2));
    b1.kill_and_restart();

    let at_b1 = client(&b1, "observer").await;
    let at_b2 = client(&b2, "observer").await;
    // Each broker accepts its observer; only B2 also accepts a link (the one B1 dialled,
    // B1 having the smaller name); B2's own link to B1 is closed as a duplicate.
    for _ in 0..100 {
        let (s1, s2) = (at_b1.stats().await.expect("stats"), at_b2.stats().await.expect("stats"));
        if s1.connections == 1 && s2.connections == 2 && s1.neighbours.len() == 1 && s2.neighbours.len() == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // (That the closed link's dialler then waits 30 s is the link policy's test, in
    // virtual time: broker/tests/link_policy.rs.)
    let (s1, s2) = (at_b1.stats().await.expect("stats"), at_b2.stats().await.expect("stats"));
    assert_eq!((s1.connections, s2.connections), (1, 2), "accepted connections at B1 and B2");
    assert_eq!(s1.neighbours.iter().map(Name::as_str).collect::<Vec<_>>(), ["B2"]);

    let publisher = client(&b1, "pub").await;
    let mut subscriber = client(&b2, "sub").await;
    publisher.send("a [class,eq,'stock'],[price,>,0],[n,isPresent,0]").await.expect("advertised");
    subscriber.send("s [class,eq,'stock']").await.expect("subscribed");
    publish_until_delivered(&publisher, &mut subscriber, "[class,'stock'],[price,1]").await;
}

#[tokio::test]
async fn a_notification_over_the_frame_limit_is_reported_not_fatal() {
    let broker = start_with("B1", "oversized", &["--max-frame-bytes".to_owned(), "1024".to_owned()]);
    let mut subscriber = client(&broker, "sub").await;
    // Two hundred matching subscriptions: the notification names them all, and grows past
    // the limit that the publication itself fits in.
    for _ in 0..200 {
        subscriber.send("s [class,eq,'big']").await.expect("subscribed");
    }
    subscriber.send("s [class,eq,'small']").await.expect("subscribed");
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'big']").await.expect("advertised");
    publisher.send("a [class,eq,'small']").await.expect("advertised");
    publisher.send(&format!("p [class,'big'] payload=0x{}", "ab".repeat(600))).await.expect("published");
    publisher.send("p [class,'small']").await.expect("published");
    let (_, p) = next(&mut subscriber, Duration::from_secs(10)).await.expect("the connection survives");
    assert_eq!(p.class(), "small");
    let said = subscriber.last_error().unwrap_or_default();
    assert!(said.contains("LimitExceeded") && said.contains("not delivered"), "{said}");
}

#[tokio::test]
async fn a_subscription_whose_caller_stopped_waiting_is_still_reissued() {
    let mut broker = start_broker("B1", "abandoned");
    let mut subscriber = client(&broker, "sub").await;
    // The caller gives up after the request is sent (one poll writes it) and before the
    // answer can arrive; the broker still installs the subscription.
    {
        let request = subscriber.send("s [class,eq,'x']");
        tokio::pin!(request);
        tokio::select! {
            biased;
            answer = &mut request => panic!("answered within one poll: {answer:?}"),
            () = std::future::ready(()) => {}
        }
    }
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'x'],[n,isPresent,0]").await.expect("advertised");
    publish_until_delivered(&publisher, &mut subscriber, "[class,'x']").await;

    broker.kill_and_restart();
    let mut delivered = false;
    for n in 0..100 {
        let _ = publisher.send(&format!("p [class,'x'],[n,{n}]")).await;
        if next(&mut subscriber, Duration::from_millis(100)).await.is_some() {
            delivered = true;
            break;
        }
    }
    assert!(delivered, "the subscription was re-issued after the restart");
}

#[tokio::test]
async fn notifications_can_be_read_apart_from_requests() {
    let broker = start_broker("B1", "split");
    let mut subscriber = client(&broker, "sub").await;
    let mut notifications = subscriber.take_notifications();
    let subscriber = std::sync::Arc::new(subscriber);
    subscriber.send("s [class,eq,'x']").await.expect("subscribed");
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'x'],[n,isPresent,0]").await.expect("advertised");
    let reader = tokio::spawn(async move {
        let mut seen = 0;
        while seen < 5_000 {
            match tokio::time::timeout(Duration::from_secs(10), notifications.next()).await {
                Ok(Some(_)) => seen += 1,
                _ => break,
            }
        }
        seen
    });
    // More than the notification channel holds, while the subscriber keeps asking.
    for n in 0..5_000 {
        publisher.publish(format!("[class,'x'],[n,{n}]").parse().expect("valid")).await.expect("sent");
    }
    for _ in 0..20 {
        subscriber.stats().await.expect("answered while notifications flow");
    }
    assert_eq!(reader.await.expect("reader"), 5_000);
    // Once nobody reads notifications, requests are still served.
    subscriber.send("s [class,eq,'y']").await.expect("still served");
}

/// B1 — B2 — B3 — B4, each dialling the one before, with every link up.
async fn four_broker_chain(test: &str) -> Vec<Broker> {
    let mut brokers: Vec<Broker> = Vec::new();
    for i in 1..=4 {
        let b = start_linked_broker(&format!("B{i}"), test, brokers.last());
        brokers.push(b);
    }
    for (i, b) in brokers.iter().enumerate() {
        let observer = client(b, "observer").await;
        let want = if i == 0 || i == 3 { 1 } else { 2 };
        until_routes(&observer, "links up", |r| r.neighbours.len() == want).await;
    }
    brokers
}

/// Reads notifications until `count` have arrived (or ten seconds pass); returns the
/// values of attribute `attr` received.
async fn receive_values(subscriber: &mut Client, attr: &str, count: usize) -> Vec<i64> {
    let mut got = Vec::new();
    while got.len() < count {
        let Some((_, p)) = next(subscriber, Duration::from_secs(10)).await else { break };
        if let Some(Value::Int(v)) = p.get(attr) {
            got.push(*v);
        }
    }
    got
}

#[tokio::test]
async fn a_publication_right_after_advertise_returns_reaches_a_subscriber_three_brokers_away() {
    let brokers = four_broker_chain("settled-adv").await;
    let publisher = client(&brokers[0], "pub").await;
    let mut subscriber = client(&brokers[3], "sub").await;
    subscriber.send("s [class,eq,'tick']").await.expect("subscribed");
    for i in 0..200 {
        // Each advertisement is new, so it must pull the subscription across three links
        // before its first publication can reach the subscriber.
        let adv = publisher.send(&format!("a [class,eq,'tick'],[i,=,{i}]")).await.expect("advertised");
        publisher.send(&format!("p [class,'tick'],[i,{i}]")).await.expect("published");
        publisher.send(&format!("unadv {}", adv.expect("an id"))).await.expect("unadvertised");
    }
    let got = receive_values(&mut subscriber, "i", 200).await;
    assert_eq!(got, (0..200).collect::<Vec<i64>>(), "every first publication arrives, in order");
}

#[tokio::test]
async fn a_publication_right_after_subscribe_returns_reaches_it_from_three_brokers_away() {
    let brokers = four_broker_chain("settled-sub").await;
    let publisher = client(&brokers[0], "pub").await;
    let mut subscriber = client(&brokers[3], "sub").await;
    publisher.send("a [class,eq,'tick'],[k,isPresent,0]").await.expect("advertised");
    // The publisher is already publishing, to nobody.
    for k in 1000..1100 {
        publisher.send(&format!("p [class,'tick'],[k,{k}]")).await.expect("published");
    }
    for k in 0..200 {
        subscriber.send(&format!("s [class,eq,'tick'],[k,=,{k}]")).await.expect("subscribed");
        publisher.send(&format!("p [class,'tick'],[k,{k}]")).await.expect("published");
    }
    let got = receive_values(&mut subscriber, "k", 200).await;
    assert_eq!(got, (0..200).collect::<Vec<i64>>(), "every publication after a subscribe returned arrives");
}

#[tokio::test]
async fn sigterm_writes_every_queued_notification_before_the_connection_closes() {
    let mut broker = start_broker("B1", "drain");
    // A subscriber that does not read yet, so notifications wait at the broker.
    let mut sub = raw(&broker, true).await;
    let request = Frame::Request { req: 1, message: "s [class,eq,'q']".parse().expect("valid") };
    write_frame(&mut sub.send, &request, DEFAULT_MAX_FRAME).await.expect("sent");
    assert!(matches!(sub.answer().await, Some(Frame::Ok { req: 1, .. })));
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'q'],[n,isPresent,0]").await.expect("advertised");
    const N: i64 = 60_000;
    for n in 0..N {
        publisher.publish(format!("[class,'q'],[n,{n}]").parse().expect("valid")).await.expect("streamed");
    }
    // Answered after every streamed publication before it was routed.
    publisher.publish_acked(format!("[class,'q'],[n,{N}]").parse().expect("valid")).await.expect("acked");
    let status =
        Command::new("kill").args(["-TERM", &broker.child.id().to_string()]).status().expect("kill runs");
    assert!(status.success());
    // Every notification queued before the signal arrives, then the goodbye.
    let mut received = 0;
    let ending = loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut sub.recv, &mut sub.reader))
            .await
            .expect("frames keep coming until the end");
        match frame {
            Ok(Some(Frame::Notification { .. })) => received += 1,
            other => break other,
        }
    };
    assert_eq!(received, N + 1, "then {ending:?}");
    assert!(
        matches!(ending, Ok(Some(Frame::Bye { code: padres_lang::wire::CloseCode::ShuttingDown, .. }))),
        "{ending:?}"
    );
    let exited = broker.child.wait().expect("exits");
    assert!(exited.success(), "{exited:?}");
}

#[tokio::test]
async fn a_subscription_too_large_to_forward_is_refused_with_a_reason() {
    let broker = start_with("B1", "forwardable", &["--max-frame-bytes".into(), "1024".into()]);
    let subscriber = client(&broker, "sub").await;
    // Fits in the client's 1,024-byte frame, but not once a broker adds its ids.
    let long = "x".repeat(700);
    let refused = subscriber.send(&format!("s [class,eq,'stock'],[note,eq,'{long}']")).await;
    match refused {
        Err(ClientError::Refused { code: ErrorCode::LimitExceeded, message }) => {
            assert!(message.contains("limits.max_frame_bytes"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The connection goes on, and an ordinary subscription is taken.
    subscriber.send("s [class,eq,'stock']").await.expect("subscribed");
}

/// A broker keeps transparent huge pages off unless `--huge-pages` (broker/src/memory.rs):
/// the kernel's view of each process says which it got.
#[test]
#[cfg(target_os = "linux")]
fn a_broker_uses_transparent_huge_pages_only_when_asked() {
    fn thp_enabled(broker: &Broker) -> String {
        let status = std::fs::read_to_string(format!("/proc/{}/status", broker.child.id())).expect("status");
        let line = status.lines().find(|l| l.starts_with("THP_enabled:")).expect("a THP_enabled line");
        line.trim_start_matches("THP_enabled:").trim().to_owned()
    }
    let shown = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.contains("THP_enabled:"));
    if !shown || !Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        eprintln!("no transparent huge pages in this kernel, or no THP_enabled line: skipped");
        return;
    }
    let plain = start_broker("B1", "thp");
    assert_eq!(thp_enabled(&plain), "0", "off by default");
    let asked = start_with("B2", "thp", &["--huge-pages".to_owned()]);
    assert_eq!(thp_enabled(&asked), "1", "on with --huge-pages");
}

/// Publications written ahead of their answers (`publish_acked_later`) reach the broker
/// and the subscriber in the order written, and each answer is its own: a refused one in
/// the middle says why, and those around it are taken.
#[tokio::test]
async fn pipelined_publications_keep_their_order_and_their_own_answers() {
    let broker = start_broker("B1", "pipelined");
    let mut subscriber = client(&broker, "sub").await;
    let publisher = client(&broker, "pub").await;
    subscriber.send("s [class,eq,'seq']").await.expect("subscribed");
    publisher.send("a [class,eq,'seq'],[n,isPresent,0]").await.expect("advertised");
    let mut acks = Vec::new();
    for n in 0..200 {
        // The 100th is of a class not advertised: refused.
        let text =
            if n == 100 { "[class,'other'],[n,100]".to_owned() } else { format!("[class,'seq'],[n,{n}]") };
        let publication = text.parse().expect("a publication");
        acks.push(publisher.publish_acked_later(publication).await.expect("written"));
    }
    for (n, ack) in acks.into_iter().enumerate() {
        let answer = ack.wait().await;
        if n == 100 {
            assert!(
                matches!(answer, Err(ClientError::Refused { code: ErrorCode::NotAdvertised, .. })),
                "{answer:?}"
            );
        } else {
            assert!(answer.is_ok(), "{n}: {answer:?}");
        }
    }
    for n in (0..200).filter(|n| *n != 100) {
        let (_, publication) = next(&mut subscriber, Duration::from_secs(10)).await.expect("a notification");
        assert_eq!(publication.get("n"), Some(&Value::Int(n)), "in the order written");
    }
}

/// A broker's self-signed certificate names the hosts other machines reach it by
/// (`--cert-host`), so that whoever pins it can dial it by that name.
#[tokio::test]
async fn a_self_signed_certificate_names_the_hosts_it_is_given() {
    let broker = start_with("B1", "cert-hosts", &["--cert-host".into(), "b1.example".into()]);
    let cert = broker.dir.join("cert.pem");
    Client::connect(broker.addr, "b1.example", &cert, "c").await.expect("verified as b1.example");
    assert!(Client::connect(broker.addr, "b2.example", &cert, "c").await.is_err(), "not as another host");
}

/// A pinned certificate (`--ca cert.pem`, `--peer-cert`) vouches for itself alone: a
/// broker presenting a certificate that the pinned one's key signed, for the same names,
/// is not trusted.
#[tokio::test]
async fn a_pinned_certificate_vouches_for_no_certificate_its_key_signed() {
    let test = "pinned-dial";
    let genuine = start_broker("B2", test);
    let pinned = genuine.dir.join("cert.pem");
    Client::connect(genuine.addr, "localhost", &pinned, "c").await.expect("the pinned broker is trusted");
    // B2's certificate and key used as a CA sign a certificate for B3, which another
    // broker then presents.
    let minting = data_dir(test, "minting");
    std::fs::create_dir_all(&minting).expect("a directory");
    std::fs::copy(&pinned, minting.join("ca.pem")).expect("copied");
    std::fs::copy(genuine.dir.join("key.pem"), minting.join("ca-key.pem")).expect("copied");
    padres_broker::net::cert::issue(&minting, "B3", &[], &data_dir(test, "B3"), true).expect("signed");
    let impostor = start_broker("B3", test);
    match Client::connect(impostor.addr, "localhost", &pinned, "c").await {
        Err(error) => assert!(error.to_string().contains("UnknownIssuer"), "{error}"),
        Ok(_) => panic!("a certificate signed by a pinned one's key is trusted"),
    }
    let _ = std::fs::remove_dir_all(&minting);
}
