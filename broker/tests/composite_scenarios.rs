//! Composite subscriptions in the simulated network: where patterns are detected (the
//! paper's Fig. 5), what clients receive, and that withdrawing, disconnecting and moving
//! advertisements leave every table clean.

mod sim;

use padres_broker::router::{Covering, Hop, Options};
use padres_lang::MessageId;
use sim::Sim;

/// The paper's Fig. 5: B1–B2, B2–B3, B2–B4, B4–B5, B4–B6 (indices 0..6).
fn fig5(options: Options) -> Sim {
    let mut sim = Sim::with_options(6, options);
    for (a, b) in [(0, 1), (1, 2), (1, 3), (3, 4), (3, 5)] {
        sim.link(a, b, 2);
    }
    sim.run();
    sim
}

const SUBSCRIBER: u64 = 1;
const P1: u64 = 11;
const P2: u64 = 12;
const P3: u64 = 13;

/// The subscriber at B1; publishers P1 at B5, P2 at B6, P3 at B3.
fn fig5_clients(sim: &mut Sim) {
    sim.attach(SUBSCRIBER, 0);
    sim.attach(P1, 4);
    sim.attach(P2, 5);
    sim.attach(P3, 2);
}

/// Publishers of s1 at B5, s2 at B6, s3 at B3; the subscriber at B1.
fn fig5_publishers(sim: &mut Sim) {
    fig5_clients(sim);
    sim.id(P1, "a [class,eq,'s1'],[k,isPresent,'']");
    sim.id(P2, "a [class,eq,'s2'],[k,isPresent,'']");
    sim.id(P3, "a [class,eq,'s3'],[k,isPresent,'']");
}

fn matches_at(sim: &Sim, broker: usize) -> u64 {
    sim.routers[broker].composite_counters().0.matches
}

fn detectors_at(sim: &Sim, broker: usize) -> usize {
    sim.routers[broker].composite_counters().2
}

/// `(sub, [(leaf, publication text)])` of every composite delivery since `from`.
fn composite_since(sim: &Sim, from: usize) -> Vec<(MessageId, Vec<(u32, String)>)> {
    sim.composite_deliveries[from..]
        .iter()
        .map(|d| (d.sub.clone(), d.pubs.iter().map(|(l, p)| (*l, p.without_time().to_string())).collect()))
        .collect()
}

#[test]
fn fig5_detects_s1_and_s2_at_b4_and_the_whole_pattern_at_b2() {
    for covering in [Covering::Off, Covering::Active] {
        let mut sim = fig5(Options { covering, ..Options::default() });
        fig5_publishers(&mut sim);
        let cs = sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
        sim.run();
        sim.kinds.clear();
        sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
        sim.call(P2, "p [class,'s2'],[k,'b']").expect("published");
        sim.call(P3, "p [class,'s3'],[k,'c']").expect("published");
        sim.run();
        assert_eq!(
            composite_since(&sim, 0),
            [
                (
                    cs.clone(),
                    vec![(0, "[class,'s1'],[k,'a']".to_owned()), (1, "[class,'s2'],[k,'b']".to_owned())]
                ),
                (cs.clone(), vec![(2, "[class,'s3'],[k,'c']".to_owned())]),
            ],
            "{covering:?}"
        );
        // (s1 & s2) is detected at B4, the whole pattern at B2; B1 only relays.
        assert_eq!(matches_at(&sim, 3), 1, "B4");
        assert_eq!(matches_at(&sim, 1), 2, "B2");
        assert_eq!((detectors_at(&sim, 0), matches_at(&sim, 0)), (0, 0), "B1");
        // Each publication crossed one link, to where it is detected (s1 B5→B4, s2 B6→B4, s3
        // B3→B2): no s1 or s2 went beyond B4. Composite matches: the and's B4→B2, then
        // the whole pattern's two B2→B1.
        let sent = |kind: &str| sim.kinds.get(kind).copied().unwrap_or(0);
        assert_eq!((sent("Publish"), sent("CompositeMatch")), (3, 3), "{covering:?}: {:?}", sim.kinds);
        assert!(sim.deliveries.is_empty(), "no client has an atomic subscription");
    }
}

#[test]
fn unsubscribing_removes_every_part_everywhere() {
    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    let cs = sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    let held: Vec<usize> = (0..6).map(|b| sim.routes(b).composites.len()).collect();
    assert_eq!(held, [1, 1, 0, 1, 0, 0], "the pattern at B1 and B2, its and-part at B4");
    sim.call(SUBSCRIBER, &format!("unsub {cs}")).expect("unsubscribed");
    for b in 0..6 {
        let routes = sim.routes(b);
        assert!(routes.composites.is_empty(), "B{}: {:?}", b + 1, routes.composites);
        assert!(routes.prt.is_empty(), "B{}: {:?}", b + 1, routes.prt);
        assert_eq!(detectors_at(&sim, b), 0);
    }
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P3, "p [class,'s3'],[k,'c']").expect("published");
    assert!(sim.composite_deliveries.is_empty());
}

#[test]
fn a_disconnecting_subscriber_takes_its_parts_with_it() {
    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.id(SUBSCRIBER, "cs {[class,eq,'s1']}&{[class,eq,'s2']}");
    sim.disconnect(SUBSCRIBER);
    sim.run();
    for b in 0..6 {
        assert!(sim.routes(b).composites.is_empty());
        assert!(sim.routes(b).prt.is_empty());
    }
}

#[test]
fn identical_patterns_share_one_detector_and_each_subscriber_gets_every_match() {
    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.attach(2, 0);
    let text = "cs {[class,eq,'s1']}&{[class,eq,'s3']}";
    let first = sim.id(SUBSCRIBER, text);
    let second = sim.id(2, text);
    let second_id = second.clone();
    assert_eq!(sim.routes(0).composites.len(), 2, "B1 holds both");
    assert_eq!(sim.routes(1).composites.len(), 1, "one part went on to B2");
    assert_eq!(detectors_at(&sim, 1), 1, "one detector at B2 for both");
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P3, "p [class,'s3'],[k,'c']").expect("published");
    let mut subs: Vec<MessageId> = sim.composite_deliveries.iter().map(|d| d.sub.clone()).collect();
    subs.sort();
    assert_eq!(subs, [first.clone(), second_id]);
    // Withdrawing one leaves the other working.
    sim.call(SUBSCRIBER, &format!("unsub {first}")).expect("unsubscribed");
    sim.call(P1, "p [class,'s1'],[k,'a2']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 3, "the second subscriber: the new a2 with the c");
    assert_eq!(sim.composite_deliveries[2].sub, second);
}

#[test]
fn variables_join_across_brokers() {
    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.id(SUBSCRIBER, "cs {[class,eq,'s1'],[k,eq,$S$k]}&{[class,eq,'s2'],[k,eq,$S$k]}");
    sim.call(P1, "p [class,'s1'],[k,'x']").expect("published");
    sim.call(P2, "p [class,'s2'],[k,'y']").expect("published");
    assert!(sim.composite_deliveries.is_empty());
    sim.call(P2, "p [class,'s2'],[k,'x']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 1);
}

#[test]
fn a_new_advertisement_moves_the_pattern_and_later_publications_complete_it() {
    let mut sim = fig5(Options::default());
    fig5_clients(&mut sim);
    sim.id(P1, "a [class,eq,'s1'],[k,isPresent,'']");
    // Only s1 is advertised: the pattern goes whole toward B5's side.
    sim.id(SUBSCRIBER, "cs {[class,eq,'s1']};{[class,eq,'s2']}");
    // s2 appears at B3: the pattern splits at B2 now.
    sim.id(P3, "a [class,eq,'s2'],[k,isPresent,'']");
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P3, "p [class,'s2'],[k,'b']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 1);
    assert_eq!(matches_at(&sim, 1), 1, "detected at B2");
    // B3 holds the s2 leaf as an ordinary subscription from B2.
    let routes = sim.routes(2);
    assert_eq!(routes.prt.len(), 1, "{:?}", routes.prt);
    assert_eq!(routes.prt[0].2, Hop::Broker(sim.name(1).clone()));
}

#[test]
fn detection_at_the_subscriber_joins_at_b1() {
    let mut sim = fig5(Options { detect_at_subscriber: true, ..Options::default() });
    fig5_publishers(&mut sim);
    sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P2, "p [class,'s2'],[k,'b']").expect("published");
    sim.call(P3, "p [class,'s3'],[k,'c']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 2);
    assert_eq!(matches_at(&sim, 0), 2, "B1 detects");
    assert_eq!((matches_at(&sim, 1), matches_at(&sim, 3)), (0, 0));
}

#[test]
fn a_restarted_broker_gets_its_parts_back() {
    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    // B4 restarts: it loses the and-part, and the publishers at B5 and B6 keep theirs
    // (their brokers did not restart).
    sim.restart(3);
    sim.run();
    assert_eq!(sim.routes(3).composites.len(), 1, "B4 holds the and-part again");
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P2, "p [class,'s2'],[k,'b']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 1);
}

#[test]
fn an_identical_part_of_different_patterns_is_forwarded_once() {
    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.attach(2, 0);
    let or = sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    let seq = sim.id(2, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}};{[class,eq,'s3']}");
    // B2 splits both and sends their common and-part to B4 once.
    assert_eq!(sim.routes(3).composites.len(), 1, "{:?}", sim.routes(3).composites);
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P2, "p [class,'s2'],[k,'b']").expect("published");
    sim.call(P3, "p [class,'s3'],[k,'c']").expect("published");
    let mut subs: Vec<MessageId> = sim.composite_deliveries.iter().map(|d| d.sub.clone()).collect();
    subs.sort();
    assert_eq!(
        subs,
        [or.clone(), or.clone(), seq.clone()],
        "the or twice (and-part, then s3), the sequence once"
    );
    assert_eq!(matches_at(&sim, 3), 1, "B4 detected the and once for both");

    // B4 restarts: the shared part is sent to it again, once.
    sim.restart(3);
    sim.run();
    assert_eq!(sim.routes(3).composites.len(), 1);
    sim.call(P2, "p [class,'s2'],[k,'b2']").expect("published");
    sim.call(P1, "p [class,'s1'],[k,'a2']").expect("published");
    sim.call(P3, "p [class,'s3'],[k,'c2']").expect("published");
    let mut after: Vec<MessageId> = sim.composite_deliveries[3..].iter().map(|d| d.sub.clone()).collect();
    after.sort();
    assert_eq!(after, [or.clone(), or, seq.clone()], "both patterns work after the restart");

    // Withdrawing one pattern keeps the shared part for the other.
    sim.call(2, &format!("unsub {seq}")).expect("unsubscribed");
    assert_eq!(sim.routes(3).composites.len(), 1);
}

#[test]
fn a_link_that_goes_and_returns_takes_the_parts_away_and_back() {
    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    // B2–B4 fails: B4 drops the and-part it held for B2; B2 no longer sees s1 and s2.
    sim.unlink(1, 3);
    sim.run();
    assert!(sim.routes(3).composites.is_empty(), "B4: {:?}", sim.routes(3).composites);
    sim.call(P3, "p [class,'s3'],[k,'c']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 1, "s3 still completes the or");
    // It returns: the advertisements come back and the pattern is placed as before.
    sim.link(1, 3, 2);
    sim.run();
    assert_eq!(sim.routes(3).composites.len(), 1);
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P2, "p [class,'s2'],[k,'b']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 2);
    assert_eq!(matches_at(&sim, 3), 1, "detected at B4 again");
}

#[test]
fn a_neighbours_bad_match_is_ignored() {
    use std::sync::Arc;

    use padres_broker::router::{BrokerMessage, Input};
    use padres_lang::{Stamp, Stamped};

    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    // The id B2 gave the and-part it placed at B4.
    let part = sim.routes(3).composites[0].0.clone();
    let publication = Arc::new("[class,'s1'],[k,'a']".parse().expect("a publication"));
    let stamped = Arc::new(Stamped { stamp: Stamp::new(1, sim.name(3).clone(), 1), publication });
    let mut out = Vec::new();
    let (now, b3, b4) = (sim.now(), sim.name(2).clone(), sim.name(3).clone());
    for (id, pubs) in [
        (part.clone(), vec![(u32::MAX, stamped.clone())]),
        (part.clone(), vec![(7, stamped.clone())]),
        (part.clone(), Vec::new()),
        ("B9/1".parse().expect("an id"), vec![(0, stamped.clone())]),
    ] {
        let message = BrokerMessage::CompositeMatch { id, pubs };
        sim.routers[1].handle(now, Input::Broker { from: b4.clone(), message }, &mut out);
    }
    assert!(out.is_empty(), "{out:?}");
    // From a broker that is not where the part went, a good match is ignored too.
    let message = BrokerMessage::CompositeMatch { id: part, pubs: vec![(0, stamped.clone()), (1, stamped)] };
    sim.routers[1].handle(now, Input::Broker { from: b3, message }, &mut out);
    assert!(out.is_empty(), "{out:?}");
}

/// The PRT decides where a publication goes: a neighbour that subscribes under the id of
/// one of this broker's detector subscriptions moves that entry to itself (as any
/// subscription that arrives from a new hop), and what matches it then goes there, not
/// to the detector.
#[test]
fn a_detector_subscription_moved_to_a_neighbour_routes_there() {
    use std::sync::Arc;

    use padres_broker::router::{BrokerMessage, Input, Output};
    use padres_lang::{Stamp, Subscription};

    let mut sim = fig5(Options::default());
    fig5_publishers(&mut sim);
    sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    // B2 detects the whole pattern: its s3 leaf is a detector subscription there.
    let (id, text) = sim
        .routes(1)
        .prt
        .into_iter()
        .find(|(_, text, hop, _)| *hop == Hop::Detector && text.contains("s3"))
        .map(|(id, text, _, _)| (id, text))
        .expect("B2 detects s3");
    let sub: Subscription = text.parse().expect("a subscription");
    let (now, b1, b3) = (sim.now(), sim.name(0).clone(), sim.name(2).clone());
    let mut out = Vec::new();
    let message = BrokerMessage::Subscribe { id: id.clone(), sub: Arc::new(sub) };
    sim.routers[1].handle(now, Input::Broker { from: b1.clone(), message }, &mut out);
    let moved = sim.routes(1).prt.into_iter().find(|e| e.0 == id).expect("still in the PRT");
    assert_eq!(moved.2, Hop::Broker(b1.clone()));
    out.clear();
    let publication = Arc::new("[class,'s3'],[k,'a']".parse().expect("a publication"));
    let message = BrokerMessage::Publish { publication, stamp: Stamp::new(now, b3.clone(), 1) };
    sim.routers[1].handle(now, Input::Broker { from: b3, message }, &mut out);
    assert!(
        out.iter().any(
            |o| matches!(o, Output::ToBroker { to, message: BrokerMessage::Publish { .. } } if *to == b1)
        ),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::ToBroker { message: BrokerMessage::CompositeMatch { .. }, .. }))
    );
}

#[test]
fn an_incomplete_match_from_a_neighbour_is_dropped_not_half_used() {
    use std::sync::Arc;

    use padres_broker::router::{BrokerMessage, Input};
    use padres_lang::{Stamp, Stamped};

    let mut sim = fig5(Options::default());
    fig5_clients(&mut sim);
    sim.id(P1, "a [class,eq,'s1'],[x,isPresent,'']");
    sim.id(P2, "a [class,eq,'s2'],[y,isPresent,'']");
    sim.id(P3, "a [class,eq,'s3'],[x,isPresent,''],[y,isPresent,'']");
    // B2 joins B4's (s1 & s2) part with s3 on both x and y.
    sim.id(
        SUBSCRIBER,
        "cs {{[class,eq,'s1'],[x,eq,$S$x]}&{[class,eq,'s2'],[y,eq,$S$y]}}&{[class,eq,'s3'],[x,eq,$S$x],[y,eq,$S$y]}",
    );
    let part = sim.routes(3).composites[0].0.clone();
    let (now, b4) = (sim.now(), sim.name(3).clone());
    let stamped = |seq: u64, text: &str| {
        let publication = Arc::new(text.parse().expect("a publication"));
        Arc::new(Stamped { stamp: Stamp::new(seq, b4.clone(), seq), publication })
    };
    let s1 = stamped(1, "[class,'s1'],[x,'a']");
    let mut out = Vec::new();
    // Only the s1 of a two-leaf part: y unbound; and s1 twice.
    for pubs in [vec![(0, s1.clone())], vec![(0, s1.clone()), (0, stamped(2, "[class,'s1'],[x,'a']"))]] {
        let message = BrokerMessage::CompositeMatch { id: part.clone(), pubs };
        sim.routers[1].handle(now, Input::Broker { from: b4.clone(), message }, &mut out);
    }
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(sim.routers[1].composite_counters().0.stored, 0, "nothing stored of a malformed part");
    // The pattern still works.
    sim.call(P1, "p [class,'s1'],[x,'a']").expect("published");
    sim.call(P2, "p [class,'s2'],[y,'b']").expect("published");
    sim.call(P3, "p [class,'s3'],[x,'a'],[y,'b']").expect("published");
    sim.run();
    assert_eq!(sim.composite_deliveries.len(), 1);
}

#[test]
fn a_composite_subscription_counts_its_atomic_parts_against_the_client_limit() {
    let mut sim = fig5(Options { max_subscriptions_per_client: Some(4), ..Options::default() });
    fig5_publishers(&mut sim);
    // Three atomic parts: two leaves and the until filter.
    let cs = sim.id(SUBSCRIBER, "cs {[class,eq,'s1']}&{[class,eq,'s2']} until {[class,eq,'s3']}");
    sim.id(SUBSCRIBER, "s [class,eq,'s3']");
    let refused = sim.call(SUBSCRIBER, "s [class,eq,'s1']").expect_err("over the limit");
    assert!(refused.1.contains("the most this broker allows"), "{refused:?}");
    let refused =
        sim.call(SUBSCRIBER, "cs {[class,eq,'s1']}||{[class,eq,'s2']}").expect_err("over the limit");
    assert!(refused.1.contains("has 2 atomic parts and this client holds 4"), "{refused:?}");
    // Unsubscribing the composite frees its three.
    sim.call(SUBSCRIBER, &format!("unsub {cs}")).expect("unsubscribed");
    sim.id(SUBSCRIBER, "cs {[class,eq,'s1']}||{[class,eq,'s2']}");
    sim.id(SUBSCRIBER, "s [class,eq,'s1']");
}

#[test]
fn with_cycles_a_pattern_placed_while_a_link_was_down_moves_there_when_it_returns() {
    let mut sim = fig5(Options { cycles: true, ..Options::default() });
    fig5_publishers(&mut sim);
    // B2–B4 fails; with cycles B2 keeps the advertisements of s1 and s2, waiting for a path.
    sim.unlink(1, 3);
    sim.run();
    sim.id(SUBSCRIBER, "cs {{[class,eq,'s1']}&{[class,eq,'s2']}}||{[class,eq,'s3']}");
    assert!(sim.routes(3).composites.is_empty());
    sim.link(1, 3, 2);
    sim.run();
    assert_eq!(sim.routes(3).composites.len(), 1, "the and-part went to B4 when the link returned");
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.call(P2, "p [class,'s2'],[k,'b']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 1);
    assert_eq!(matches_at(&sim, 3), 1, "detected at B4");
}

#[test]
fn with_cycles_a_link_that_returns_keeps_the_partial_matches_of_patterns_detected_here() {
    // B1–B2; the subscriber's pattern is detected at B1 (one leaf's publisher is local),
    // its other leaf a subscription toward B2. The link going and returning moves nothing,
    // so the partial match stored before stays.
    let mut sim = Sim::with_options(2, Options { cycles: true, ..Options::default() });
    sim.link(0, 1, 2);
    sim.run();
    sim.attach(SUBSCRIBER, 0);
    sim.attach(P1, 1);
    sim.attach(P2, 0);
    sim.id(P1, "a [class,eq,'s1'],[k,isPresent,'']");
    sim.id(P2, "a [class,eq,'s2'],[k,isPresent,'']");
    sim.id(SUBSCRIBER, "cs {[class,eq,'s1']};{[class,eq,'s2']}");
    sim.call(P1, "p [class,'s1'],[k,'a']").expect("published");
    sim.unlink(0, 1);
    sim.run();
    sim.link(0, 1, 2);
    sim.run();
    sim.call(P2, "p [class,'s2'],[k,'b']").expect("published");
    assert_eq!(sim.composite_deliveries.len(), 1, "s1 before the bounce, s2 after");
}

#[test]
fn a_withdrawn_advertisement_moves_a_pattern_and_nothing_published_after_the_reply_is_missed() {
    // s2 at B6 and at B3, s1 at B5: {s1}&{s2} from B1 is split at B2. P3 withdraws its s2:
    // both leaves now lie toward B4, and the pattern moves there.
    let mut sim = fig5(Options::default());
    fig5_clients(&mut sim);
    sim.id(P1, "a [class,eq,'s1'],[k,isPresent,'']");
    sim.id(P2, "a [class,eq,'s2'],[k,isPresent,'']");
    let withdrawn = sim.id(P3, "a [class,eq,'s2'],[k,isPresent,'']");
    let cs = sim.id(SUBSCRIBER, "cs {[class,eq,'s1'],[k,eq,$S$k]}&{[class,eq,'s2'],[k,eq,$S$k]}");
    sim.run();
    assert_eq!(detectors_at(&sim, 1), 1, "split at B2");
    sim.call_until_reply(P3, &format!("unadv {withdrawn}")).expect("withdrawn");
    // Published once the withdrawal is answered, while the move may be under way.
    sim.send(P1, "p [class,'s1'],[k,'a']");
    sim.run();
    sim.call(P2, "p [class,'s2'],[k,'a']").expect("published");
    assert_eq!(
        composite_since(&sim, 0),
        [(cs, vec![(0, "[class,'s1'],[k,'a']".to_owned()), (1, "[class,'s2'],[k,'a']".to_owned())])]
    );
    assert_eq!((detectors_at(&sim, 1), detectors_at(&sim, 3)), (0, 1), "moved to B4");
}

/// One broker whose detection runs 50 ms behind its router, with no lateness allowance:
/// a publisher and a subscriber of `{a}&{b} within 10ms` on `k`.
fn behind(delay: u64) -> (Sim, MessageId) {
    let bounds = padres_broker::detector::Bounds { lateness_ms: 0, ..Default::default() };
    let options = Options { offload_detection: true, detector_bounds: bounds, ..Options::default() };
    let mut sim = Sim::with_options(1, options);
    sim.set_detection_delay(delay);
    sim.attach(SUBSCRIBER, 0);
    sim.attach(P1, 0);
    sim.id(P1, "a [class,eq,'a'],[k,isPresent,'']");
    sim.id(P1, "a [class,eq,'b'],[k,isPresent,'']");
    let cs = sim.id(SUBSCRIBER, "cs {[class,eq,'a'],[k,eq,$S$k]}&{[class,eq,'b'],[k,eq,$S$k]} within 10ms");
    sim.run();
    (sim, cs)
}

#[test]
fn detection_behind_its_router_runs_no_timer_ahead_of_the_ops_still_to_apply() {
    for delay in [0, 50] {
        let (mut sim, cs) = behind(delay);
        sim.send(P1, "p [class,'a'],[k,'one']");
        sim.advance(9);
        // Inside the window by the router's clock; applied 50 ms later by the stage, after
        // the window of the `a` would have passed on any clock but the ops'.
        sim.send(P1, "p [class,'b'],[k,'one']");
        sim.run();
        assert_eq!(composite_since(&sim, 0).len(), 1, "delay {delay}: the pair inside the window matches");
        assert_eq!(composite_since(&sim, 0)[0].0, cs);
        // Outside it: 11 ms apart.
        sim.send(P1, "p [class,'a'],[k,'two']");
        sim.run();
        sim.advance(11);
        sim.call(P1, "p [class,'b'],[k,'two']").expect("published");
        assert_eq!(composite_since(&sim, 0).len(), 1, "delay {delay}: no match across the window");
        assert_eq!(sim.detection(0).counters().stored, 0, "delay {delay}: everything expired");
        assert_eq!(sim.detection(0).counters().expired, 4, "delay {delay}: both pairs' partial matches");
    }
}

#[test]
fn detection_behind_its_router_notifies_nothing_after_an_acknowledged_unsubscribe() {
    let (mut sim, cs) = behind(50);
    sim.send(P1, "p [class,'a'],[k,'one']");
    sim.send(P1, "p [class,'b'],[k,'one']");
    // The match is still with the stage when the unsubscribe is answered.
    sim.call_until_reply(SUBSCRIBER, &format!("unsub {cs}")).expect("unsubscribed");
    sim.run();
    assert_eq!(composite_since(&sim, 0), []);
}
