//! Routing scenarios in the style of the PADRES test suite, each with its topology,
//! messages and expected deliveries written out, run in the deterministic simulator.

mod sim;

use padres_broker::router::{Covering, Options};
use padres_lang::wire::ErrorCode;
use sim::Sim;

const P: u64 = 1;
const S: u64 = 2;
const S2: u64 = 3;

fn prt_has(sim: &Sim, broker: usize, sub: &str) -> bool {
    sim.routes(broker).prt.iter().any(|(_, text, _, _)| text == sub)
}

fn srt_has(sim: &Sim, broker: usize, adv: &str) -> bool {
    sim.routes(broker).srt.iter().any(|(_, text, _)| text == adv)
}

/// B1 — B2, publisher at B1, subscriber at B2.
fn two_brokers() -> Sim {
    let mut sim = Sim::new(2);
    sim.link(0, 1, 5);
    sim.attach(P, 0);
    sim.attach(S, 1);
    sim.run();
    sim
}

#[test]
fn a_subscription_crosses_only_when_it_overlaps() {
    let mut sim = two_brokers();
    sim.id(P, "a [class,eq,'stock'],[price,>,80]");
    sim.id(S, "s [class,eq,'stock'],[price,=,100]");
    assert!(prt_has(&sim, 0, "[class,eq,'stock'],[price,=,100]"), "forwarded to the advertiser's broker");

    sim.id(P, "a [class,eq,'bond'],[price,>,100]");
    sim.id(S, "s [class,eq,'bond'],[price,<,50]");
    assert!(!prt_has(&sim, 0, "[class,eq,'bond'],[price,<,50]"), "no overlap, not forwarded");
    assert!(prt_has(&sim, 1, "[class,eq,'bond'],[price,<,50]"), "kept where it was issued");
}

#[test]
fn a_later_advertisement_pulls_held_subscriptions() {
    let mut sim = two_brokers();
    sim.id(S, "s [class,eq,'stock'],[price,>,10]");
    assert!(!prt_has(&sim, 0, "[class,eq,'stock'],[price,>,10]"), "held: nothing advertised yet");
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    assert!(prt_has(&sim, 0, "[class,eq,'stock'],[price,>,10]"), "pulled by the advertisement");
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,20]"), Ok(None));
    assert_eq!(sim.delivered_since(before), [(S, "[class,'stock'],[price,20]".to_owned())]);
}

#[test]
fn a_publication_before_any_subscription_reaches_nobody() {
    let mut sim = two_brokers();
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,20]"), Ok(None));
    assert!(sim.delivered_since(before).is_empty());
    // Subscribing afterwards does not replay it.
    sim.id(S, "s [class,eq,'stock']");
    assert!(sim.delivered_since(before).is_empty());
}

#[test]
fn two_subscriptions_of_one_client_get_one_copy() {
    let mut sim = two_brokers();
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    let s1 = sim.id(S, "s [class,eq,'stock'],[price,>,10]");
    let s2 = sim.id(S, "s [class,eq,'stock'],[price,<,50]");
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,20]"), Ok(None));
    let got = &sim.deliveries[before..];
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].client, S);
    assert_eq!(got[0].subs, vec![s1, s2], "the one copy names both subscriptions");
    // Only one copy crossed the link, too: B1 forwards per hop, not per subscription.
}

#[test]
fn bad_requests_get_errors_and_change_nothing() {
    let mut sim = two_brokers();
    let no_adv = sim.call(P, "p [class,'stock'],[price,20]");
    assert!(matches!(no_adv, Err((ErrorCode::NotAdvertised, _))), "{no_adv:?}");
    sim.id(P, "a [class,eq,'stock'],[price,>,0]");
    let outside = sim.call(P, "p [class,'stock'],[price,-5]");
    assert!(matches!(outside, Err((ErrorCode::NotAdvertised, _))), "{outside:?}");
    let unknown = sim.call(S, "unsub B2/999");
    assert!(matches!(unknown, Err((ErrorCode::UnknownId, _))), "{unknown:?}");
    let not_yours = sim.call(S, "unadv B1/1");
    assert!(matches!(not_yours, Err((ErrorCode::UnknownId, _))), "{not_yours:?}");
    assert_eq!(sim.routes(0).srt.len(), 1);
}

/// B1 in the centre, B2..B5 around it.
fn star() -> Sim {
    let mut sim = Sim::new(5);
    for leaf in 1..5 {
        sim.link(0, leaf, 3);
    }
    sim.attach(P, 1); // at B2
    sim.attach(S, 4); // at B5
    sim.attach(S2, 2); // at B3
    sim.run();
    sim
}

#[test]
fn star_unsubscribe_and_unadvertise_clean_every_broker_on_the_path() {
    let mut sim = star();
    let adv = "[class,eq,'stock'],[price,isPresent,0]";
    let a = sim.id(P, &format!("a {adv}"));
    for b in 0..5 {
        assert!(srt_has(&sim, b, adv), "advertisement flooded to B{}", b + 1);
    }
    let sub = "[class,eq,'stock'],[price,>,10]";
    let s = sim.id(S, &format!("s {sub}"));
    // On the path B5 -> B1 -> B2 only.
    let on_path: Vec<bool> = (0..5).map(|b| prt_has(&sim, b, sub)).collect();
    assert_eq!(on_path, [true, true, false, false, true]);

    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,20]"), Ok(None));
    assert_eq!(sim.delivered_since(before), [(S, "[class,'stock'],[price,20]".to_owned())]);

    assert_eq!(sim.call(S, &format!("unsub {s}")), Ok(None));
    for b in 0..5 {
        assert!(!prt_has(&sim, b, sub), "B{} still has the subscription", b + 1);
    }
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,30]"), Ok(None));
    assert!(sim.delivered_since(before).is_empty());

    assert_eq!(sim.call(P, &format!("unadv {a}")), Ok(None));
    for b in 0..5 {
        assert!(sim.routes(b).srt.is_empty(), "B{} still has the advertisement", b + 1);
    }
}

#[test]
fn star_client_disconnect_cleans_up_everywhere() {
    let mut sim = star();
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    sim.id(S2, "s [class,eq,'stock']");
    assert!(prt_has(&sim, 0, "[class,eq,'stock']") && prt_has(&sim, 1, "[class,eq,'stock']"));
    sim.disconnect(S2);
    sim.run();
    for b in 0..5 {
        assert!(sim.routes(b).prt.is_empty(), "B{} kept a subscription of a gone client", b + 1);
    }
    sim.disconnect(P);
    sim.run();
    for b in 0..5 {
        assert!(sim.routes(b).srt.is_empty(), "B{} kept an advertisement of a gone client", b + 1);
    }
}

#[test]
fn unadvertising_withdraws_subscriptions_no_longer_needed() {
    let mut sim = two_brokers();
    let a1 = sim.id(P, "a [class,eq,'stock'],[price,>,100]");
    let a2 = sim.id(P, "a [class,eq,'stock'],[price,<,10]");
    let sub = "[class,eq,'stock'],[price,>,50]";
    sim.id(S, &format!("s {sub}"));
    assert!(prt_has(&sim, 0, sub));
    // The other advertisement does not overlap: the subscription is withdrawn from B1.
    assert_eq!(sim.call(P, &format!("unadv {a1}")), Ok(None));
    assert!(!prt_has(&sim, 0, sub));
    assert_eq!(sim.call(P, &format!("unadv {a2}")), Ok(None));
    assert!(sim.routes(1).srt.is_empty());
}

/// B1 — B2 — B3: a publisher of stock quotes at B1, a subscriber to them at B3.
fn stock_chain() -> Sim {
    let mut sim = Sim::new(3);
    sim.link(0, 1, 2);
    sim.link(1, 2, 2);
    sim.attach(P, 0);
    sim.attach(S, 2);
    sim.run();
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    sim.id(S, "s [class,eq,'stock']");
    sim
}

#[test]
fn a_link_that_comes_back_resynchronises() {
    let mut sim = stock_chain();
    sim.unlink(0, 1);
    sim.run();
    assert!(sim.routes(2).srt.is_empty(), "the advertisement went with the link");
    assert!(!prt_has(&sim, 0, "[class,eq,'stock']"));
    sim.link(0, 1, 2);
    sim.run();
    assert!(prt_has(&sim, 0, "[class,eq,'stock']"), "pulled again by the re-sent advertisement");
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,1]"), Ok(None));
    assert_eq!(sim.delivered_since(before), [(S, "[class,'stock'],[price,1]".to_owned())]);
}

#[test]
fn covering_holds_back_covered_subscriptions_and_releases_them() {
    for covering in [Covering::Lazy, Covering::Active] {
        let mut sim = Sim::with_covering(5, covering);
        for leaf in 1..5 {
            sim.link(0, leaf, 3);
        }
        sim.attach(P, 1); // B2
        sim.attach(S, 2); // B3
        sim.attach(S2, 3); // B4
        sim.run();
        sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
        let wide = sim.id(S, "s [class,eq,'stock'],[price,>,100]");
        sim.id(S2, "s [class,eq,'stock'],[price,>,150]");
        assert!(prt_has(&sim, 0, "[class,eq,'stock'],[price,>,150]"), "{covering:?}: B1 has it");
        assert!(!prt_has(&sim, 1, "[class,eq,'stock'],[price,>,150]"), "{covering:?}: not forwarded past B1");

        let before = sim.deliveries.len();
        assert_eq!(sim.call(P, "p [class,'stock'],[price,200]"), Ok(None));
        let mut got = sim.delivered_since(before);
        got.sort();
        assert_eq!(
            got,
            [(S, "[class,'stock'],[price,200]".to_owned()), (S2, "[class,'stock'],[price,200]".to_owned())]
        );

        // The covering subscription goes: the covered one is forwarded, delivery goes on.
        assert_eq!(sim.call(S, &format!("unsub {wide}")), Ok(None));
        assert!(prt_has(&sim, 1, "[class,eq,'stock'],[price,>,150]"), "{covering:?}: re-forwarded");
        let before = sim.deliveries.len();
        assert_eq!(sim.call(P, "p [class,'stock'],[price,300]"), Ok(None));
        assert_eq!(sim.delivered_since(before), [(S2, "[class,'stock'],[price,300]".to_owned())]);
    }
}

#[test]
fn active_covering_withdraws_subscriptions_a_new_one_covers() {
    let mut sim = Sim::with_covering(5, Covering::Active);
    for leaf in 1..5 {
        sim.link(0, leaf, 3);
    }
    sim.attach(P, 1);
    sim.attach(S, 2);
    sim.attach(S2, 3);
    sim.run();
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    sim.id(S2, "s [class,eq,'stock'],[price,>,150]");
    assert!(prt_has(&sim, 1, "[class,eq,'stock'],[price,>,150]"));
    sim.id(S, "s [class,eq,'stock'],[price,>,100]");
    assert!(!prt_has(&sim, 1, "[class,eq,'stock'],[price,>,150]"), "withdrawn from B2 once covered");
    assert!(prt_has(&sim, 1, "[class,eq,'stock'],[price,>,100]"));
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,200]"), Ok(None));
    assert_eq!(sim.delivered_since(before).len(), 2);
}

#[test]
fn covered_advertisements_are_held_back_and_released() {
    const P2: u64 = 4;
    let mut sim = Sim::with_covering(3, Covering::Active);
    sim.link(0, 1, 2);
    sim.link(1, 2, 2);
    sim.attach(P, 0);
    sim.attach(P2, 0);
    sim.attach(S, 2);
    sim.run();
    let wide = sim.id(P, "a [class,eq,'stock'],[price,>,0]");
    sim.id(P2, "a [class,eq,'stock'],[price,>,10]");
    assert!(srt_has(&sim, 1, "[class,eq,'stock'],[price,>,0]"));
    assert!(!srt_has(&sim, 1, "[class,eq,'stock'],[price,>,10]"), "covered: not flooded");
    sim.id(S, "s [class,eq,'stock'],[price,>,20]");
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P2, "p [class,'stock'],[price,30]"), Ok(None));
    assert_eq!(sim.delivered_since(before), [(S, "[class,'stock'],[price,30]".to_owned())]);
    // The cover goes: the covered advertisement is flooded and delivery goes on.
    assert_eq!(sim.call(P, &format!("unadv {wide}")), Ok(None));
    assert!(srt_has(&sim, 2, "[class,eq,'stock'],[price,>,10]"));
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P2, "p [class,'stock'],[price,40]"), Ok(None));
    assert_eq!(sim.delivered_since(before), [(S, "[class,'stock'],[price,40]".to_owned())]);
}

#[test]
fn a_restarted_broker_rejoins_and_delivery_resumes() {
    let mut sim = stock_chain();
    // B2, in the middle, crashes: its state is gone; it comes back empty.
    sim.restart(1);
    sim.run();
    assert!(sim.routes(1).srt.len() == 1 && sim.routes(1).prt.len() == 1, "{:?}", sim.routes(1));
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,1]"), Ok(None));
    assert_eq!(sim.delivered_since(before), [(S, "[class,'stock'],[price,1]".to_owned())]);
}

/// PADRES's cyclic scenario: B1–B2–B3–B4–B1, plus B5–B1; a publisher at B3, subscribers
/// at B5, B1 and B4. Returns the tree entries the publisher's broker holds at the end.
fn ring_with_cycles(covering: Covering) -> usize {
    let mut sim = Sim::with_options(5, Options { cycles: true, covering, ..Options::default() });
    for (a, b) in [(0, 1), (1, 2), (2, 3), (3, 0), (4, 0)] {
        sim.link(a, b, 1 + a as u64);
    }
    const S3: u64 = 5;
    sim.attach(P, 2); // B3
    sim.attach(S, 4); // B5
    sim.attach(S2, 0); // B1
    sim.attach(S3, 3); // B4
    sim.run();
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    // The advertisement reaches every broker once; each forwards it once to every other
    // neighbour, and duplicates stop there: no loop.
    for b in 0..5 {
        assert_eq!(sim.routes(b).srt.len(), 1, "{covering:?} B{}", b + 1);
    }
    assert!(sim.advertise_messages() <= 2 * 5, "{} advertisement messages", sim.advertise_messages());
    // The cover first, so that lazy covering holds the covered one back too.
    let s2 = sim.id(S2, "s [class,eq,'stock']");
    let s = sim.id(S, "s [class,eq,'stock'],[price,>,10]");
    sim.id(S3, "s [class,eq,'stock'],[price,<,100]");
    let at_publisher = sim.routes(2).tree_prt.len();
    for (price, expected) in [(50, vec![S, S2, S3]), (5, vec![S2, S3]), (500, vec![S, S2])] {
        let before = sim.deliveries.len();
        assert_eq!(sim.call(P, &format!("p [class,'stock'],[price,{price}]")), Ok(None));
        let mut got: Vec<u64> = sim.delivered_since(before).into_iter().map(|(c, _)| c).collect();
        got.sort_unstable();
        assert_eq!(got, expected, "{covering:?} price {price}: each subscriber exactly once");
    }
    // Unsubscribing the covering subscription releases the one it covered.
    assert_eq!(sim.call(S2, &format!("unsub {s2}")), Ok(None));
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,500]"), Ok(None));
    assert_eq!(sim.delivered_since(before), [(S, "[class,'stock'],[price,500]".to_owned())], "{covering:?}");
    assert_eq!(sim.call(S, &format!("unsub {s}")), Ok(None));
    // Unadvertising removes the advertisement and its tree everywhere.
    let adv = sim.routes(2).srt[0].0.clone();
    assert_eq!(sim.call(P, &format!("unadv {adv}")), Ok(None));
    for b in 0..5 {
        let routes = sim.routes(b);
        assert!(routes.srt.is_empty() && routes.tree_prt.is_empty(), "{covering:?} B{}: {routes:?}", b + 1);
    }
    at_publisher
}

#[test]
fn a_ring_with_cycles_on_delivers_each_publication_once_in_every_covering_mode() {
    let off = ring_with_cycles(Covering::Off);
    let lazy = ring_with_cycles(Covering::Lazy);
    let active = ring_with_cycles(Covering::Active);
    // B1's [class,eq,'stock'] covers B5's [price,>,10]: with covering only the cover
    // climbs the tree past B1.
    assert!(
        lazy < off && active < off,
        "tree entries at the publisher's broker: off {off}, lazy {lazy}, active {active}"
    );
}

/// Link messages of each kind sent since `before` (a copy of `sim.kinds`).
fn kinds_since(
    sim: &Sim,
    before: &std::collections::BTreeMap<&'static str, u64>,
) -> Vec<(&'static str, u64)> {
    sim.kinds
        .iter()
        .map(|(k, n)| (*k, n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[test]
fn a_subscription_on_many_trees_takes_one_message_per_link() {
    // B1 – B2 – B3 – B4 – B1; ten advertisements at B3, all reaching B1 the same way, and
    // one subscription at B1 overlapping all of them.
    for covering in [Covering::Off, Covering::Lazy, Covering::Active] {
        let mut sim = Sim::with_options(4, Options { cycles: true, covering, ..Options::default() });
        for (a, b, ms) in [(0, 1, 1), (1, 2, 1), (2, 3, 5), (3, 0, 5)] {
            sim.link(a, b, ms);
        }
        sim.attach(P, 2);
        sim.attach(S, 0);
        sim.run();
        for n in 0..10 {
            sim.id(P, &format!("a [class,eq,'stock'],[n,=,{n}]"));
        }
        let before = sim.kinds.clone();
        let s = sim.id(S, "s [class,eq,'stock']");
        // B1 → B2 → B3 and the answers back: one message each way per link, not ten.
        assert_eq!(kinds_since(&sim, &before), [("TreeSubscribe", 2), ("TreesSettled", 2)], "{covering:?}");
        for n in 0..10 {
            let before = sim.deliveries.len();
            assert_eq!(sim.call(P, &format!("p [class,'stock'],[n,{n}]")), Ok(None));
            assert_eq!(sim.delivered_since(before).len(), 1, "{covering:?}: publication {n} once");
        }
        let before = sim.kinds.clone();
        assert_eq!(sim.call(S, &format!("unsub {s}")), Ok(None));
        assert_eq!(kinds_since(&sim, &before), [("TreeUnsubscribe", 2)], "{covering:?}");
        for b in 0..4 {
            assert!(sim.routes(b).tree_prt.is_empty(), "{covering:?} B{}: {:?}", b + 1, sim.routes(b));
        }
    }
}

fn receivers(sim: &mut Sim, client: u64, text: &str) -> Vec<u64> {
    let before = sim.deliveries.len();
    assert_eq!(sim.call(client, text), Ok(None), "{text}");
    let mut got: Vec<u64> = sim.delivered_since(before).into_iter().map(|(c, _)| c).collect();
    got.sort_unstable();
    got
}

/// B1 - B2 - B3 with the given latencies; after a first delivery the link `gone` fails
/// and B1–B3 comes up while the old path's withdrawals are still travelling.
fn rewire(latencies: (u64, u64), gone: (usize, usize)) {
    let mut sim = Sim::new(3);
    sim.link(0, 1, latencies.0);
    sim.link(1, 2, latencies.1);
    sim.attach(P, 0);
    sim.attach(S, 2);
    sim.run();
    sim.id(P, "a [class,eq,'x']");
    sim.id(S, "s [class,eq,'x']");
    assert_eq!(receivers(&mut sim, P, "p [class,'x']"), [S]);
    sim.unlink(gone.0, gone.1);
    sim.link(0, 2, 1);
    sim.run();
    assert_eq!(receivers(&mut sim, P, "p [class,'x']"), [S], "rewired {gone:?}");
}

#[test]
fn a_rewired_tree_keeps_advertisements_arriving_the_new_way() {
    // B2 - B3 - B1: B3 gets the advertisement again from B1 before B2's withdrawal.
    rewire((1, 10), (0, 1));
}

#[test]
fn a_rewired_tree_keeps_subscriptions_arriving_the_new_way() {
    // B2 - B1 - B3: B1 gets the subscription from B3 before B2's withdrawal.
    rewire((20, 1), (1, 2));
}

#[test]
fn cycles_withdrawal_racing_its_own_flood_goes_quiet() {
    let mut sim = Sim::with_options(3, Options { cycles: true, ..Options::default() });
    sim.link(0, 1, 10);
    sim.link(0, 2, 1);
    sim.link(1, 2, 1);
    sim.attach(P, 0);
    sim.attach(S, 1);
    sim.run();
    sim.id(S, "s [class,eq,'x']");
    sim.send(P, "a [class,eq,'x']"); // the flood is still in flight...
    sim.disconnect(P); // ...when the owner goes
    assert!(sim.run_bounded(100_000), "no quiet: a withdrawn advertisement keeps circling");
    for b in 0..3 {
        assert!(sim.routes(b).srt.is_empty(), "B{} kept {:?}", b + 1, sim.routes(b));
    }
}

#[test]
fn cycles_restart_of_the_publishers_broker_goes_quiet() {
    let mut sim = Sim::with_options(3, Options { cycles: true, ..Options::default() });
    sim.link(0, 1, 1);
    sim.link(1, 2, 1);
    sim.link(0, 2, 10);
    sim.attach(P, 0);
    sim.attach(S, 2);
    sim.run();
    sim.id(P, "a [class,eq,'x']");
    sim.id(S, "s [class,eq,'x']");
    assert_eq!(receivers(&mut sim, P, "p [class,'x']"), [S]);
    sim.restart(0); // the publisher goes with its broker
    assert!(sim.run_bounded(100_000), "no quiet after the restart");
    for b in 0..3 {
        assert!(sim.routes(b).srt.is_empty(), "B{} kept {:?}", b + 1, sim.routes(b));
    }
}

#[test]
fn neighbour_up_again_without_down_starts_over() {
    use padres_broker::router::{Input, Output, Router};
    let b2 = padres_lang::Name::new("B2").expect("name");
    let mut router = Router::new(padres_lang::Name::new("B1").expect("name"));
    let mut out = Vec::new();
    router.handle(0, Input::NeighbourUp(b2.clone()), &mut out);
    let adv = "a [class,eq,'x']".parse().expect("valid");
    router.handle(0, Input::Client { client: 1, req: Some(1), message: adv }, &mut out);
    let sent = |out: &[Output]| out.iter().filter(|o| matches!(o, Output::ToBroker { .. })).count();
    assert_eq!(sent(&out), 1);
    out.clear();
    // The peer restarted and reconnected; the shell reports only the new link.
    router.handle(1, Input::NeighbourUp(b2), &mut out);
    assert_eq!(sent(&out), 1, "the advertisement is sent again");
}

#[test]
fn a_limited_routes_listing_is_the_head_of_the_whole() {
    use padres_broker::router::{Input, Router};
    let mut router = Router::new(padres_lang::Name::new("B1").expect("name"));
    let mut out = Vec::new();
    for (req, text) in
        ["a [class,eq,'x']", "a [class,eq,'y']", "s [class,eq,'x']", "s [class,eq,'y']", "s [class,eq,'z']"]
            .iter()
            .enumerate()
    {
        let message = text.parse().expect("valid");
        router.handle(0, Input::Client { client: 1, req: Some(req as u64), message }, &mut out);
    }
    let whole = router.routes();
    let head = router.routes_up_to(2);
    assert_eq!((whole.srt.len(), whole.prt.len()), (2, 3));
    assert_eq!(head.srt, whole.srt[..2]);
    assert_eq!(head.prt, whole.prt[..2]);
    assert_eq!(router.routes_up_to(0).prt, []);
    assert_eq!(whole.matched, [2, 3, 0]);
}

#[test]
fn a_routes_page_skips_and_filters_before_it_limits() {
    use padres_broker::router::{Input, Router, RoutesPage};
    let mut router = Router::new(padres_lang::Name::new("B1").expect("name"));
    let mut out = Vec::new();
    let texts = [
        "s [class,eq,'stock'],[sym,eq,'IBM']",
        "s [class,eq,'job_status'],[job,eq,'J1']",
        "s [class,eq,'STOCK'],[sym,eq,'MSFT']",
        "s [class,eq,'job_status'],[job,eq,'J2']",
        "s [class,eq,'stock'],[sym,eq,'AAPL']",
        "cs {[class,eq,'stock'],[sym,eq,'IBM']} & {[class,eq,'job_status']}",
    ];
    // The composite's two leaves are subscriptions of the detectors here (ids 7 and 8).
    for (req, text) in texts.iter().enumerate() {
        let message = text.parse().expect("valid");
        router.handle(0, Input::Client { client: 7, req: Some(req as u64), message }, &mut out);
    }
    let whole = router.routes();
    assert_eq!(whole.prt.len(), 7);
    let texts_of = |routes: &padres_broker::router::Routes| -> Vec<String> {
        routes.prt.iter().map(|(_, text, _, _)| text.clone()).collect()
    };

    // The filter ignores ASCII case: four stock subscriptions, listed from the second.
    let page = router.routes_page(&RoutesPage { offset: 1, limit: 10, filter: "Stock" });
    assert_eq!(page.matched, [0, 4, 1]);
    assert_eq!(
        texts_of(&page),
        [
            "[class,eq,'STOCK'],[sym,eq,'MSFT']",
            "[class,eq,'stock'],[sym,eq,'AAPL']",
            "[class,eq,'stock'],[sym,eq,'IBM']"
        ]
    );
    assert_eq!(page.composites, [], "the one composite matched, and the offset skipped it");

    // Limit after offset, in id order.
    let page = router.routes_page(&RoutesPage { offset: 1, limit: 2, filter: "" });
    assert_eq!(page.prt, whole.prt[1..3]);
    assert_eq!(page.matched, [0, 7, 1]);

    // The origin is searched too: five rows came from client 7, two from the detectors.
    let page = router.routes_page(&RoutesPage { offset: 0, limit: 100, filter: "client 7" });
    assert_eq!(page.matched, [0, 5, 1]);
    let page = router.routes_page(&RoutesPage { offset: 0, limit: 100, filter: "detectors" });
    assert_eq!(page.prt, whole.prt[5..]);
    let page = router.routes_page(&RoutesPage { offset: 0, limit: 100, filter: "client 8" });
    assert_eq!((page.matched, page.prt.len()), ([0, 0, 0], 0));

    // Past the end: nothing listed, the count still given.
    let page = router.routes_page(&RoutesPage { offset: 9, limit: 100, filter: "job_status" });
    assert_eq!((page.matched, page.prt.len()), ([0, 3, 1], 0));
}

/// B1 — B2 — B3 — B4 with a publisher at B4 and two subscribers at B1; the second
/// subscribes while the first, which covers it, is still on its way, and the publisher
/// publishes the moment the second's reply arrives.
fn covered_while_in_flight(options: Options) -> Vec<(u64, String)> {
    let mut sim = Sim::with_options(4, options);
    for b in 0..3 {
        sim.link(b, b + 1, 10);
    }
    sim.attach(P, 3);
    sim.attach(S, 0);
    sim.attach(S2, 0);
    sim.run();
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    sim.send(S, "s [class,eq,'stock']");
    sim.id_settled(S2, "s [class,eq,'stock'],[price,>,10]");
    let before = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,20]"), Ok(None));
    let mut got = sim.delivered_since(before);
    got.sort();
    got
}

#[test]
fn a_subscription_held_back_by_a_cover_in_flight_settles_with_the_cover() {
    let expected =
        vec![(S, "[class,'stock'],[price,20]".to_owned()), (S2, "[class,'stock'],[price,20]".to_owned())];
    for covering in [Covering::Off, Covering::Lazy, Covering::Active] {
        for cycles in [false, true] {
            let got = covered_while_in_flight(Options { covering, cycles, ..Options::default() });
            assert_eq!(got, expected, "{covering:?}, cycles {cycles}");
        }
    }
}

#[test]
fn an_advertisement_is_answered_after_what_it_pulls_has_arrived() {
    // B1 — B2 — B3, subscribers at B3, publisher at B1 publishing right after its reply.
    for cycles in [false, true] {
        let mut sim = Sim::with_options(3, Options { cycles, ..Options::default() });
        sim.link(0, 1, 10);
        sim.link(1, 2, 10);
        sim.attach(P, 0);
        sim.attach(S, 2);
        sim.run();
        sim.id(S, "s [class,eq,'stock'],[price,>,100]");
        let before_reply = sim.now();
        sim.id_settled(P, "a [class,eq,'stock'],[price,isPresent,0]");
        // A round trip to the farthest broker: 2 × 2 hops × 10 ms.
        assert!(sim.now() - before_reply >= 40, "answered after {} ms", sim.now() - before_reply);
        let before = sim.deliveries.len();
        sim.send(P, "p [class,'stock'],[price,120]");
        sim.run();
        assert_eq!(
            sim.delivered_since(before),
            [(S, "[class,'stock'],[price,120]".to_owned())],
            "cycles {cycles}"
        );
    }
}

#[test]
fn an_advertisement_whose_tree_moved_is_answered_after_what_it_pulls_has_arrived() {
    // B1 advertises. Its copy reaches B3 first through B2 (1 + 4 ms), then straight over
    // the slow link (10 ms), a shorter path: B3's tree moves to B1. The subscription at
    // B5, two hops beyond B3, which the advertisement pulls, then goes from B3 to B1
    // straight (10 ms), while B3's answer goes back through B2 (4 + 1 ms): the answer must
    // not overtake the subscription (found by `SIM_SEEDS` of routing_random, seed 3401).
    for covering in [Covering::Off, Covering::Lazy, Covering::Active] {
        let mut sim = Sim::with_options(5, Options { cycles: true, covering, ..Options::default() });
        sim.link(0, 1, 1);
        sim.link(1, 2, 4);
        sim.link(0, 2, 10);
        sim.link(2, 3, 10);
        sim.link(3, 4, 5);
        sim.attach(P, 0);
        sim.attach(S, 4);
        sim.run();
        sim.id(S, "s [class,eq,'stock'],[price,>,100]");
        sim.id_settled(P, "a [class,eq,'stock'],[price,isPresent,0]");
        let before = sim.deliveries.len();
        sim.send(P, "p [class,'stock'],[price,120]");
        sim.run();
        assert_eq!(
            sim.delivered_since(before),
            [(S, "[class,'stock'],[price,120]".to_owned())],
            "{covering:?}: published as soon as the advertisement was answered"
        );
    }
}

#[test]
fn a_neighbours_path_length_at_the_maximum_does_not_overflow() {
    use padres_broker::router::{BrokerMessage, Input, Output, Router};
    let name = |n: &str| padres_lang::Name::new(n).expect("name");
    for cycles in [false, true] {
        let mut router = Router::with_options(name("B1"), Options { cycles, ..Options::default() });
        let mut out = Vec::new();
        router.handle(0, Input::NeighbourUp(name("B2")), &mut out);
        router.handle(0, Input::NeighbourUp(name("B3")), &mut out);
        let adv = std::sync::Arc::new("[class,eq,'x']".parse().expect("valid"));
        let id = padres_lang::MessageId::new(name("B2"), 1);
        let message = BrokerMessage::Advertise { id, adv, hops: u32::MAX, epoch: 0 };
        router.handle(0, Input::Broker { from: name("B2"), message }, &mut out);
        let flooded = out.iter().find_map(|o| match o {
            Output::ToBroker { message: BrokerMessage::Advertise { hops, .. }, .. } => Some(*hops),
            _ => None,
        });
        assert_eq!(flooded, Some(u32::MAX), "cycles {cycles}");
    }
}

#[test]
fn the_publishers_broker_stamps_time_and_subscriptions_select_on_it() {
    let mut sim = two_brokers();
    sim.advance(1_000);
    let since = sim.id(S, "s [class,eq,'stock'],[time,>=,1970-01-01T00:00:00.500Z]");
    let before = sim.id(S, "s [class,eq,'stock'],[time,<,1970-01-01T00:00:00.500Z]");
    sim.id(P, "a [class,eq,'stock'],[price,isPresent,0]");
    assert!(prt_has(&sim, 0, "[class,eq,'stock'],[time,>=,1970-01-01T00:00:00.500Z]"), "time is advertised");
    let at = sim.now();
    let first = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,20]"), Ok(None));
    sim.run();
    let got = &sim.deliveries[first..];
    assert_eq!(got.len(), 1, "only the subscription whose range holds now");
    assert_eq!(got[0].subs, [since]);
    assert_eq!(got[0].publication.time().map(|t| t.millis()), Some(i64::try_from(at).expect("fits")));
    // A time the publisher gave is kept, and selects as given.
    let first = sim.deliveries.len();
    assert_eq!(sim.call(P, "p [class,'stock'],[price,20],[time,1970-01-01T00:00:00.100Z]"), Ok(None));
    sim.run();
    assert_eq!(sim.deliveries[first..].iter().map(|d| d.subs.clone()).collect::<Vec<_>>(), [vec![before]]);
}

#[test]
fn a_history_filter_draws_publications_from_across_the_federation_and_answers_acked_publishers() {
    // B1 — B2 — B3: the store at B1, publishers at B1 and B3.
    let mut sim = Sim::new(3);
    sim.link(0, 1, 5);
    sim.link(1, 2, 5);
    sim.attach(P, 2);
    sim.attach(S, 0);
    sim.run();
    sim.keep_history(0, "[class,eq,'job_status'],[appl,eq,'payroll']");
    sim.run();
    sim.id(P, "a [class,eq,'job_status'],[appl,isPresent,''],[job,isPresent,'']");
    sim.id(S, "a [class,eq,'job_status'],[appl,isPresent,''],[job,isPresent,'']");
    assert!(prt_has(&sim, 2, "[class,eq,'job_status'],[appl,eq,'payroll']"), "pulled toward the publisher");
    assert_eq!(sim.call(P, "p [class,'job_status'],[appl,'payroll'],[job,'A']"), Ok(None));
    assert_eq!(sim.call(P, "p [class,'job_status'],[appl,'billing'],[job,'A']"), Ok(None));
    sim.run();
    let stored: Vec<String> =
        sim.stored.iter().map(|(b, s)| format!("B{} {}", b + 1, s.publication.without_time())).collect();
    assert_eq!(stored, ["B1 [class,'job_status'],[appl,'payroll'],[job,'A']"]);
    assert!(sim.stored[0].1.publication.time().is_some(), "stored with its time");
    // A publisher at the storing broker is answered once the store has taken it (the
    // simulated store takes it at once), and exactly once.
    assert_eq!(sim.call(S, "p [class,'job_status'],[appl,'payroll'],[job,'B']"), Ok(None));
    assert_eq!(sim.stored.len(), 2);
    assert_eq!(
        sim.call(S, "p [class,'job_status'],[appl,'other'],[job,'B']"),
        Ok(None),
        "not stored, answered"
    );
    assert_eq!(sim.stored.len(), 2);
}

/// The `n` of every publication delivered to `client` since `from`, in order.
fn delivered_ns(sim: &Sim, client: u64, from: usize) -> Vec<i64> {
    sim.deliveries[from..]
        .iter()
        .filter(|d| d.client == client)
        .filter_map(|d| match d.publication.get("n") {
            Some(padres_lang::Value::Int(n)) => Some(*n),
            _ => None,
        })
        .collect()
}

/// A ring B1 — B2 — B3 — B4 — B1 with a branch B3 — B5, a publisher at B1 and a subscriber
/// at B5. Each ring link in turn is removed for good while publications are in flight:
/// the trees that used it are rebuilt around it (the brokers cut off ask B1 to flood the
/// advertisement again), and every publication published once that has settled reaches
/// the subscriber; none ever arrives twice or out of order.
#[test]
fn a_ring_routes_around_a_link_removed_for_good() {
    let ring = [(0, 1), (1, 2), (2, 3), (3, 0)];
    for covering in [Covering::Off, Covering::Active] {
        for cut in ring {
            let mut sim = Sim::with_options(5, Options { cycles: true, covering, ..Options::default() });
            for (a, b) in ring {
                sim.link(a, b, 1 + (a + b) as u64 % 3);
            }
            sim.link(2, 4, 1);
            sim.attach(P, 0);
            sim.attach(S, 4);
            sim.run();
            sim.id(P, "a [class,eq,'stock'],[n,isPresent,0]");
            sim.id(S, "s [class,eq,'stock']");
            let start = sim.deliveries.len();
            // Publishes `ns`, delivering one message in flight after each if `step`.
            let publish = |sim: &mut Sim, ns: std::ops::Range<i64>, step: bool| {
                for n in ns {
                    sim.send(P, &format!("p [class,'stock'],[n,{n}]"));
                    if step {
                        sim.step();
                    }
                }
            };
            publish(&mut sim, 0..10, false);
            sim.run();
            // Cut with publications on the way, and publish on before anything is repaired.
            publish(&mut sim, 10..20, true);
            sim.unlink(cut.0, cut.1);
            publish(&mut sim, 20..30, false);
            sim.run();
            publish(&mut sim, 30..40, false);
            sim.run();
            let got = delivered_ns(&sim, S, start);
            let what = format!("{covering:?}, B{} — B{} cut: {got:?}", cut.0 + 1, cut.1 + 1);
            assert!(got.windows(2).all(|w| w[0] < w[1]), "once each, in order: {what}");
            assert!((0..10).chain(30..40).all(|n| got.contains(&n)), "before the cut and after: {what}");
        }
    }
}

/// B1 — B2 — B3 — B4 — B5, 2 ms a link, the publisher at B1 and the subscriber at B5,
/// publications `[class,'t'],[n,N]` published one a millisecond; every link keeps what it
/// sent in the last 20 ms unacknowledged. `crash` is called with the sim before the
/// publications numbered 100 and 200. Returns the numbers S received, in order.
fn chain_through_crashes(crash: impl Fn(&mut Sim)) -> (Sim, Vec<u64>) {
    chain_through_crashes_with(crash, false)
}

/// As [`chain_through_crashes`], with a subscriber of the same class at B3 too if
/// `at_b3`.
fn chain_through_crashes_with(crash: impl Fn(&mut Sim), at_b3: bool) -> (Sim, Vec<u64>) {
    let mut sim = Sim::new(5);
    for b in 0..4 {
        sim.link(b, b + 1, 2);
    }
    sim.keep_unacked(20);
    sim.attach(P, 0);
    sim.attach(S, 4);
    sim.id_settled(P, "a [class,eq,'t'],[n,isPresent,0]");
    sim.id_settled(S, "s [class,eq,'t']");
    if at_b3 {
        sim.attach(S2, 2);
        sim.id_settled(S2, "s [class,eq,'t']");
    }
    let first = sim.deliveries.len();
    for n in 1..=300u64 {
        if n == 100 || n == 200 {
            crash(&mut sim);
        }
        sim.send(P, &format!("p [class,'t'],[n,{n}]"));
        let next = sim.now() + 1;
        sim.run_until(next);
    }
    sim.run();
    let got = sim.deliveries[first..]
        .iter()
        .filter(|d| d.client == S)
        .map(|d| match d.publication.get("n") {
            Some(padres_lang::Value::Int(n)) => *n as u64,
            other => panic!("n: {other:?}"),
        })
        .collect();
    (sim, got)
}

#[test]
fn a_crashed_middle_broker_loses_nothing_its_neighbours_kept_and_doubles_nothing() {
    let (sim, got) = chain_through_crashes(|sim| sim.crash_and_rejoin(2));
    assert_eq!(got, (1..=300).collect::<Vec<u64>>(), "every publication once, in order");
    // B2 held what it had not had acknowledged and what it routed while B3 re-synchronised,
    // and B4 dropped what came again.
    let (b2, b4) = (sim.replays(1), sim.replays(3));
    assert_eq!(b2.restarts, 2, "{b2:?}");
    assert!(b2.sent > 0 && b2.dropped == 0, "{b2:?}");
    assert!(b4.duplicates > 0, "{b4:?}");
    // The restarted B3 holds the subscription again, and B1 never lost it.
    assert!(prt_has(&sim, 2, "[class,eq,'t']") && prt_has(&sim, 0, "[class,eq,'t']"));
}

#[test]
fn a_restarted_brokers_own_subscriptions_do_not_hold_up_what_goes_beyond_it() {
    // B3 has a subscriber of its own: its subscription dies with B3 (B3's next life gives
    // new ids), so B2 must not wait for it to come back before sending B3 what it kept.
    let (sim, got) = chain_through_crashes_with(|sim| sim.crash_and_rejoin(2), true);
    assert_eq!(got.len(), 300, "every publication once");
    let late = sim.deliveries.iter().filter(|d| d.client == S).map(|d| d.time).max().expect("deliveries");
    assert!(late < 1_000, "the last delivery at {late} ms: nothing waited for the dead subscription");
}

#[test]
fn a_crashed_middle_broker_whose_neighbours_forget_it_loses_what_was_on_the_way() {
    // The same run, the neighbours told only that B3 went and came back (what a broker did
    // before link sessions kept publications for a restarted neighbour): publications are
    // lost, which is what the test above would catch.
    let (_, got) = chain_through_crashes(|sim| sim.restart(2));
    assert!(got.len() < 300, "{} received", got.len());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "no duplicate, in order");
}

#[test]
fn a_route_a_restarted_neighbour_does_not_send_again_is_withdrawn_after_the_deadline() {
    // B1 — B2 — B3, the subscriber at B3 leaves while B2 is down: B1 holds its
    // subscription, stale, until B2 has had its window to send it again.
    let mut sim = Sim::new(3);
    sim.link(0, 1, 2);
    sim.link(1, 2, 2);
    sim.keep_unacked(20);
    sim.attach(P, 0);
    sim.attach(S, 2);
    sim.id_settled(P, "a [class,eq,'t'],[n,isPresent,0]");
    sim.id_settled(S, "s [class,eq,'t']");
    sim.crash_and_rejoin(1);
    sim.disconnect(S);
    sim.send(P, "p [class,'t'],[n,1]");
    let soon = sim.now() + 100;
    sim.run_until(soon);
    assert!(prt_has(&sim, 0, "[class,eq,'t']"), "stale but kept while B2 re-synchronises");
    sim.run();
    assert!(sim.now() >= 10_000, "the deadline is the link session window");
    assert!(!prt_has(&sim, 0, "[class,eq,'t']"), "withdrawn at the deadline");
    assert_eq!(sim.replays(0).sent, 1, "what was held went to B2 at the deadline");
}

/// A neighbour that stays up and never answers holds a request only until its settle
/// deadline: the client is answered then, and the timeout is counted.
#[test]
fn a_request_held_by_a_silent_neighbour_is_answered_at_its_deadline() {
    use padres_broker::router::{Input, Output, Router};
    let name = |n: &str| padres_lang::Name::new(n).expect("name");
    let options = Options { settle_timeout_ms: 2_000, ..Options::default() };
    let mut router = Router::with_options(name("B1"), options);
    let mut out = Vec::new();
    router.handle(0, Input::NeighbourUp(name("B2")), &mut out);
    out.clear();
    let message = "a [class,eq,'t']".parse().expect("valid");
    router.handle(100, Input::Client { client: 1, req: Some(7), message }, &mut out);
    assert!(out.iter().any(|o| matches!(o, Output::ToBroker { .. })), "the advertisement goes to B2");
    assert!(!out.iter().any(|o| matches!(o, Output::Reply { .. })), "no reply before B2 answers");
    assert_eq!(router.poll_timeout(), Some(2_100));
    out.clear();
    router.handle_timeout(2_099, &mut out);
    assert!(out.is_empty(), "nothing before the deadline: {out:?}");
    router.handle_timeout(2_100, &mut out);
    assert!(
        matches!(out.as_slice(), [Output::Reply { client: 1, req: Some(7), result: Ok(Some(_)) }]),
        "answered at the deadline: {out:?}"
    );
    assert_eq!(router.settle_timeouts(), 1);
    assert_eq!(router.unsettled(), 0);
    assert_eq!(router.poll_timeout(), None);
}
