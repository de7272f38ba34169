//! Composite subscriptions across real `padres-broker` processes and real clients over
//! QUIC: PADRES's composite scenarios (and, or, nesting, `$S$` and `$I$` variables) on
//! one broker and across a five-broker star, a sequence, a `Times` pattern, an `until`
//! ending a binding, unsubscribe cleaning every broker's tables, and a broker restarted in
//! the middle of a pattern.

use std::time::Duration;

use padres_client::{Client, Notification};
use padres_lang::{MessageId, Publication, Value};
use padres_tests::broker::{
    Broker, client, client_advertisements, start_broker, start_linked_broker, start_with, until_routes,
};

/// The next composite match, as `(subscription, [(leaf, publication text)])`.
async fn next_match(client: &mut Client, wait: Duration) -> Option<(MessageId, Vec<(u32, String)>)> {
    match tokio::time::timeout(wait, client.next_notification()).await.ok().flatten()? {
        Notification::Composite { sub, pubs } => {
            Some((sub, pubs.iter().map(|(l, p)| (*l, p.without_time().to_string())).collect()))
        }
        other => panic!("expected a composite match, got {other:?}"),
    }
}

/// Publishes every line of `lines` (`p` omitted) from `publisher`.
async fn publish(publisher: &Client, lines: &[&str]) {
    for line in lines {
        publisher.send(&format!("p {line}")).await.unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

const SECOND: Duration = Duration::from_secs(1);
const QUIET: Duration = Duration::from_millis(300);

#[tokio::test]
async fn padres_composite_scenarios_on_one_broker() {
    let broker = start_broker("B1", "composite-one");
    let publisher = client(&broker, "pub").await;
    let mut subscriber = client(&broker, "sub").await;
    for class in ["trigger", "job_status", "temp", "news", "stock"] {
        publisher
            .send(&format!(
                "a [class,eq,'{class}'],[appl,isPresent,''],[gid,isPresent,''],[job,isPresent,''],[v,isPresent,0],[sym,isPresent,'']"
            ))
            .await
            .expect("advertised");
    }

    // AND joined on $S$ variables: the trigger and a job's status of the same generation.
    let and = subscriber
        .send(
            "cs {[class,eq,'trigger'],[appl,eq,$S$a],[gid,eq,$S$g]} & {[class,eq,'job_status'],[appl,eq,$S$a],[gid,eq,$S$g],[job,eq,'A']}",
        )
        .await
        .expect("subscribed")
        .expect("id");
    publish(
        &publisher,
        &[
            "[class,'trigger'],[appl,'w'],[gid,'g1']",
            "[class,'job_status'],[appl,'w'],[gid,'g2'],[job,'A']",
            "[class,'job_status'],[appl,'w'],[gid,'g1'],[job,'A']",
        ],
    )
    .await;
    let (sub, pubs) = next_match(&mut subscriber, SECOND).await.expect("the and matched");
    assert_eq!(sub, and);
    assert_eq!(
        pubs,
        [
            (0, "[class,'trigger'],[appl,'w'],[gid,'g1']".to_owned()),
            (1, "[class,'job_status'],[appl,'w'],[gid,'g1'],[job,'A']".to_owned())
        ]
    );
    assert!(next_match(&mut subscriber, QUIET).await.is_none(), "g2's status has no trigger");
    subscriber.send(&format!("unsub {and}")).await.expect("unsubscribed");

    // OR and nesting, with an $I$ variable: {temp v=$I$x & news v=$I$x} || stock.
    let nested = subscriber
        .send("cs {{[class,eq,'temp'],[v,=,$I$x]}&{[class,eq,'news'],[v,=,$I$x]}}||{[class,eq,'stock']}")
        .await
        .expect("subscribed")
        .expect("id");
    publish(&publisher, &["[class,'temp'],[v,3]", "[class,'news'],[v,3.0]", "[class,'stock'],[sym,'IBM']"])
        .await;
    let (_, first) = next_match(&mut subscriber, SECOND).await.expect("the and side");
    assert_eq!(first.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [0, 1], "3 and 3.0 are the same number");
    let (sub, second) = next_match(&mut subscriber, SECOND).await.expect("the or side");
    assert_eq!((sub, second), (nested.clone(), vec![(2, "[class,'stock'],[sym,'IBM']".to_owned())]));
    subscriber.send(&format!("unsub {nested}")).await.expect("unsubscribed");

    // A sequence: news after a stock quote of the same symbol, not before.
    subscriber
        .send("cs {[class,eq,'stock'],[sym,eq,$S$s]};{[class,eq,'news'],[sym,eq,$S$s]}")
        .await
        .expect("subscribed");
    publish(&publisher, &["[class,'news'],[sym,'X']", "[class,'stock'],[sym,'X']"]).await;
    assert!(next_match(&mut subscriber, QUIET).await.is_none(), "the news came first");
    publish(&publisher, &["[class,'news'],[sym,'X']"]).await;
    let (_, pubs) = next_match(&mut subscriber, SECOND).await.expect("news after the quote");
    assert_eq!(pubs.len(), 2);

    // Times: three temperatures rising by 1.
    subscriber.send("cs Times({[class,eq,'temp']},3,v,1)").await.expect("subscribed");
    publish(
        &publisher,
        &["[class,'temp'],[v,10]", "[class,'temp'],[v,11]", "[class,'temp'],[v,13]", "[class,'temp'],[v,12]"],
    )
    .await;
    let (_, pubs) = next_match(&mut subscriber, SECOND).await.expect("10, 11, 12");
    let values: Vec<&str> = pubs.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(values, ["[class,'temp'],[v,10]", "[class,'temp'],[v,11]", "[class,'temp'],[v,12]"]);
}

#[tokio::test]
async fn an_until_publication_ends_its_generation() {
    // Ended bindings' partial matches go once the lateness allowance has passed.
    let broker = start_with("B1", "composite-until", &["--lateness-ms".to_owned(), "300".to_owned()]);
    let publisher = client(&broker, "pub").await;
    let mut subscriber = client(&broker, "sub").await;
    let observer = client(&broker, "observer").await;
    publisher
        .send("a [class,eq,'job_status'],[gid,isPresent,''],[job,isPresent,'']")
        .await
        .expect("advertised");
    subscriber
        .send(
            "cs {[class,eq,'job_status'],[gid,eq,$S$g],[job,eq,'A']}&{[class,eq,'job_status'],[gid,eq,$S$g],[job,eq,'B']} \
             until {[class,eq,'job_status'],[gid,eq,$S$g],[job,eq,'APPL_END']}",
        )
        .await
        .expect("subscribed");
    publish(
        &publisher,
        &["[class,'job_status'],[gid,'g1'],[job,'A']", "[class,'job_status'],[gid,'g2'],[job,'A']"],
    )
    .await;
    let stats = observer.stats().await.expect("stats");
    assert_eq!(stats.partial_matches, 2, "one partial match per generation");
    // Each holds its publication and about 512 bytes of its own; the cap is the default.
    assert!((1024..8192).contains(&stats.partial_match_bytes), "{stats:?}");
    assert_eq!(
        stats.partial_match_bytes_cap,
        padres_broker::detector::Bounds::DEFAULT.max_bytes,
        "{stats:?}"
    );
    publish(&publisher, &["[class,'job_status'],[gid,'g1'],[job,'APPL_END']"]).await;
    // g1's B, after its end: no match (checked below, by what arrives first).
    publish(&publisher, &["[class,'job_status'],[gid,'g1'],[job,'B']"]).await;
    let deadline = tokio::time::Instant::now() + 10 * SECOND;
    loop {
        let stats = observer.stats().await.expect("stats");
        // g1's A ended; g1's late B (a new start of g1) and g2's A kept.
        if stats.partials_ended == 1 {
            assert_eq!(stats.partial_matches, 2, "{stats:?}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "g1's partial match never ended: {stats:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    publish(&publisher, &["[class,'job_status'],[gid,'g2'],[job,'B']"]).await;
    // Published after g1's B on the same connection: had g1 fired, its match came first.
    let (_, pubs) = next_match(&mut subscriber, SECOND).await.expect("g2 still completes");
    assert!(pubs.iter().all(|(_, p)| p.contains("[gid,'g2']")), "g1 was over: {pubs:?}");
}

/// H in the centre, L1..L4 around it, and a client at each to watch its routes.
async fn star(test: &str) -> (Broker, Vec<Broker>, Vec<Client>) {
    let hub = start_broker("H", test);
    let leaves: Vec<Broker> =
        ["L1", "L2", "L3", "L4"].iter().map(|name| start_linked_broker(name, test, Some(&hub))).collect();
    let mut observers = vec![client(&hub, "observer").await];
    for leaf in &leaves {
        observers.push(client(leaf, "observer").await);
    }
    until_routes(&observers[0], "four neighbours", |r| r.neighbours.len() == 4).await;
    for observer in &observers[1..] {
        until_routes(observer, "linked to the hub", |r| r.neighbours.len() == 1).await;
    }
    (hub, leaves, observers)
}

#[tokio::test]
async fn a_five_broker_star_detects_at_the_hub_and_unsubscribe_cleans_every_table() {
    let (_hub, leaves, observers) = star("composite-star").await;
    let at_l1 = client(&leaves[0], "pub-a").await;
    let at_l2 = client(&leaves[1], "pub-b").await;
    let at_l4 = client(&leaves[3], "pub-c").await;
    let mut subscriber = client(&leaves[2], "sub").await;
    at_l1.send("a [class,eq,'a'],[k,isPresent,'']").await.expect("advertised");
    at_l2.send("a [class,eq,'b'],[k,isPresent,'']").await.expect("advertised");
    at_l4.send("a [class,eq,'c'],[n,isPresent,0]").await.expect("advertised");
    // Every broker knows the three advertisements before the pattern is placed.
    for observer in &observers {
        until_routes(observer, "three advertisements", |r| client_advertisements(r) == 3).await;
    }
    let cs = subscriber
        .send("cs {{[class,eq,'a'],[k,eq,$S$k]}&{[class,eq,'b'],[k,eq,$S$k]}}||{[class,eq,'c'],[n,=,$I$n]}")
        .await
        .expect("subscribed")
        .expect("id");

    publish(&at_l1, &["[class,'a'],[k,'x']"]).await;
    publish(&at_l2, &["[class,'b'],[k,'y']", "[class,'b'],[k,'x']"]).await;
    let (sub, pubs) = next_match(&mut subscriber, Duration::from_secs(5)).await.expect("a & b with k=x");
    assert_eq!(sub, cs);
    assert_eq!(pubs, [(0, "[class,'a'],[k,'x']".to_owned()), (1, "[class,'b'],[k,'x']".to_owned())]);
    publish(&at_l4, &["[class,'c'],[n,7]"]).await;
    let (_, pubs) = next_match(&mut subscriber, Duration::from_secs(5)).await.expect("c");
    assert_eq!(pubs, [(2, "[class,'c'],[n,7]".to_owned())]);
    assert!(next_match(&mut subscriber, QUIET).await.is_none(), "each completion once");

    // The pattern was split at the hub: it detected the and; L3 only relayed.
    let hub_stats = observers[0].stats().await.expect("stats");
    assert_eq!(hub_stats.composite_matches, 2, "{hub_stats:?}");
    let l3_stats = observers[3].stats().await.expect("stats");
    assert_eq!((l3_stats.detectors, l3_stats.composite_matches), (0, 0), "{l3_stats:?}");
    let hub_routes = observers[0].routes(100).await.expect("routes");
    assert_eq!(hub_routes.composites_total, 1);
    assert!(hub_routes.prt.iter().all(|e| e.from == "detectors"), "{:?}", hub_routes.prt);

    subscriber.send(&format!("unsub {cs}")).await.expect("unsubscribed");
    for (i, observer) in observers.iter().enumerate() {
        until_routes(observer, &format!("broker {i} holds no part of the pattern"), |r| {
            r.composites_total == 0 && r.prt_total == 0
        })
        .await;
    }
    publish(&at_l1, &["[class,'a'],[k,'z']"]).await;
    publish(&at_l2, &["[class,'b'],[k,'z']"]).await;
    assert!(next_match(&mut subscriber, QUIET).await.is_none(), "nothing after unsubscribe");
}

#[tokio::test]
async fn a_broker_restarted_in_the_middle_of_a_pattern_takes_it_up_again() {
    // B1 – B2 – B3: the publishers at B1, the subscriber at B3; the pattern goes whole
    // through B2 to B1, where it is detected.
    let b1 = start_linked_broker("B1", "composite-restart", None);
    let mut b2 = start_linked_broker("B2", "composite-restart", Some(&b1));
    let b3 = start_linked_broker("B3", "composite-restart", Some(&b2));
    let publisher = client(&b1, "pub").await;
    let mut subscriber = client(&b3, "sub").await;
    let observer = client(&b3, "observer").await;
    until_routes(&observer, "B3 linked", |r| r.neighbours.len() == 1).await;
    publisher.send("a [class,eq,'a'],[k,isPresent,0]").await.expect("advertised");
    publisher.send("a [class,eq,'b'],[k,isPresent,0]").await.expect("advertised");
    until_routes(&observer, "both advertisements at B3", |r| client_advertisements(r) == 2).await;
    let cs = subscriber
        .send("cs {[class,eq,'a'],[k,=,$I$k]};{[class,eq,'b'],[k,=,$I$k]}")
        .await
        .expect("subscribed")
        .expect("id");
    publish(&publisher, &["[class,'a'],[k,1]", "[class,'b'],[k,1]"]).await;
    assert!(
        next_match(&mut subscriber, Duration::from_secs(5)).await.is_some(),
        "matches before the restart"
    );

    // In the middle of a pattern (an a without its b), the middle broker dies and returns.
    publish(&publisher, &["[class,'a'],[k,2]"]).await;
    b2.kill_and_restart();
    let mut resumed = None;
    for k in 1000..1300 {
        let _ = publisher.send(&format!("p [class,'a'],[k,{k}]")).await;
        let _ = publisher.send(&format!("p [class,'b'],[k,{k}]")).await;
        if let Some(got) = next_match(&mut subscriber, Duration::from_millis(100)).await {
            resumed = Some(got);
            break;
        }
    }
    let (sub, pubs) = resumed.expect("the pattern works again once B2 is back");
    assert_eq!(sub, cs);
    let k_of = |text: &str| text.parse::<Publication>().ok().and_then(|p| p.get("k").cloned());
    let (ka, kb) = (k_of(&pubs[0].1), k_of(&pubs[1].1));
    assert_eq!(ka, kb, "an a and a b of one k: {pubs:?}");
    assert!(matches!(ka, Some(Value::Int(k)) if k >= 1000), "published after the restart: {pubs:?}");
}

#[tokio::test]
async fn a_match_larger_than_a_frame_is_reported_to_its_subscriber_not_dropped_unsaid() {
    // Frames of at most 4 KiB: each publication fits, the match of two does not.
    let broker =
        start_with("B1", "composite-large-match", &["--max-frame-bytes".to_owned(), "4096".to_owned()]);
    let publisher = client(&broker, "pub").await;
    let mut subscriber = client(&broker, "sub").await;
    publisher.send("a [class,eq,'part'],[k,isPresent,''],[side,isPresent,'']").await.expect("advertised");
    let id = subscriber
        .send(
            "cs {[class,eq,'part'],[side,eq,'l'],[k,eq,$S$k]}&{[class,eq,'part'],[side,eq,'r'],[k,eq,$S$k]}",
        )
        .await
        .expect("subscribed")
        .expect("an id");
    for side in ["l", "r"] {
        let p: Publication = format!("[class,'part'],[k,'x'],[side,'{side}']").parse().expect("valid");
        publisher.publish(p.with_payload(vec![7_u8; 2_500])).await.expect("published");
    }
    let mut said = None;
    for _ in 0..200 {
        said = subscriber.last_error();
        if said.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let said = said.expect("the subscriber is told");
    assert!(said.contains("not delivered") && said.contains(&id.to_string()), "{said}");
    // The connection stays: a match that fits still arrives.
    publish(&publisher, &["[class,'part'],[k,'y'],[side,'l']", "[class,'part'],[k,'y'],[side,'r']"]).await;
    let (sub, _) = next_match(&mut subscriber, 10 * SECOND).await.expect("a match that fits");
    assert_eq!(sub, id);
}
