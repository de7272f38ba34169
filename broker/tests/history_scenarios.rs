//! Historic subscriptions in the simulator: stores at two brokers of a 5-broker tree,
//! publishers at three, queries from every broker checked against the reference over all
//! publications; the boundary to live delivery while publishers go on; a store that never
//! answers. `HIST_SEED=n` runs one seed, `HIST_SEEDS=A..B` a longer range.

mod seeds;

use padres_broker::sim::{EndOfHistory, Sim};
use padres_lang::{MessageId, Publication, Subscription, Timestamp, matches};

/// A timestamp's text at `ms` after the epoch (the simulator's clock).
fn t(ms: u64) -> String {
    Timestamp::from_millis(i64::try_from(ms).expect("small")).expect("in range").to_rfc3339()
}

const STORE_ERRORS: &str = "[class,eq,'log'],[level,eq,'error']";
const STORE_APP1: &str = "[class,eq,'log'],[app,eq,'a1']";

/// B1 is the hub's parent: B1 — B2, B1 — B3, B3 — B4, B3 — B5. Stores at B2 and B4;
/// publishers (clients 11, 13, 15) at B1, B3 and B5; a client 20+b at every broker b.
fn federation(seed: u64) -> Sim {
    let mut sim = Sim::new(5);
    sim.set_jitter(3, seed);
    for (a, b) in [(0, 1), (0, 2), (2, 3), (2, 4)] {
        sim.link(a, b, 2);
    }
    for b in 0..5 {
        sim.attach(20 + b as u64, b);
    }
    for (client, broker) in [(11, 0), (13, 2), (15, 4)] {
        sim.attach(client, broker);
    }
    sim.run();
    sim.keep_history(1, STORE_ERRORS);
    sim.keep_history(3, STORE_APP1);
    sim.run();
    for p in [11, 13, 15] {
        sim.id(p, "a [class,eq,'log'],[level,isPresent,''],[app,isPresent,''],[n,isPresent,0]");
    }
    sim
}

/// Brokers B1 — B2 — … in a chain with `latency` ms links, client `subscriber` at B1,
/// client `publisher` at the last, and a store at each broker of `stores` (index, filter).
fn chain(
    options: padres_broker::router::Options,
    n: usize,
    latency: u64,
    clients: (u64, u64),
    stores: &[(usize, &str)],
) -> Sim {
    let mut sim = Sim::with_options(n, options);
    for b in 1..n {
        sim.link(b - 1, b, latency);
    }
    sim.attach(clients.0, 0);
    sim.attach(clients.1, n - 1);
    sim.run();
    for (broker, filter) in stores {
        sim.keep_history(*broker, filter);
    }
    sim.run();
    sim
}

/// Publishes `count` random logs from the three publishers, `gap` ms apart; returns them
/// (with the time their broker gave them, read back from a store or stamped here).
fn publish(sim: &mut Sim, rng: &mut fastrand::Rng, first: u64, count: u64, gap: u64) -> Vec<(u64, String)> {
    let mut sent = Vec::new();
    for n in first..first + count {
        let level = ["error", "info", "warn"][rng.usize(..3)];
        let app = ["a1", "a2", "a3"][rng.usize(..3)];
        let publisher = [11, 13, 15][rng.usize(..3)];
        let text = format!("[class,'log'],[level,'{level}'],[app,'{app}'],[n,{n}]");
        sim.send(publisher, &format!("p {text}"));
        sent.push((sim.now(), text));
        sim.advance(gap);
        for _ in 0..rng.usize(..4) {
            sim.step();
        }
    }
    sim.run();
    sent
}

/// The `n` of every publication delivered for `sub` after delivery `from`, before and
/// after its end-of-history marker.
fn numbers(sim: &Sim, sub: &MessageId, from: usize) -> Vec<i64> {
    sim.deliveries[from..]
        .iter()
        .filter(|d| d.subs.contains(sub))
        .map(|d| match d.publication.get("n") {
            Some(padres_lang::Value::Int(n)) => *n,
            other => panic!("no n: {other:?}"),
        })
        .collect()
}

/// The id client 21's request `req` was given, and the one end-of-history marker it got.
fn id_and_marker(sim: &Sim, req: u64) -> (MessageId, EndOfHistory) {
    let id = match sim.replies.get(&(21, req)) {
        Some(Ok(Some(id))) => id.clone(),
        other => panic!("{other:?}"),
    };
    let markers: Vec<_> = sim.ends.iter().filter(|e| e.sub == id).collect();
    assert_eq!(markers.len(), 1, "exactly one marker");
    (id, markers[0].clone())
}

#[test]
fn historic_subscriptions_from_every_broker_get_what_the_stores_kept_once_in_time_order() {
    let mut total = 0;
    let seeds = seeds::seeds("HIST_SEED", "HIST_SEEDS", 40);
    let n = seeds.len();
    for seed in seeds {
        let mut sim = federation(seed);
        let mut rng = fastrand::Rng::with_seed(seed);
        let sent = publish(&mut sim, &mut rng, 0, 120, 5);
        // Every publication as its broker stamped it: with the time it was sent at.
        let all: Vec<(u64, Publication)> = sent
            .iter()
            .map(|(at, text)| {
                let p: Publication = text.parse().expect("valid");
                let at = Timestamp::from_millis(i64::try_from(*at).expect("small")).expect("in range");
                (at.millis().try_into().expect("positive"), p.with_time(at))
            })
            .collect();
        let stores: Vec<Subscription> =
            [STORE_ERRORS, STORE_APP1].iter().map(|f| f.parse().expect("valid")).collect();
        let end = sim.now();
        for b in 0..5u64 {
            let from = rng.u64(0..end / 2);
            let to = from + rng.u64(50..end);
            let filters = [
                format!("[class,eq,'log'],[time,>=,{}],[time,<,{}]", t(from), t(to)),
                format!("[class,eq,'log'],[level,eq,'error'],[time,<=,{}]", t(to)),
                format!("[class,eq,'log'],[app,neq,'a3'],[time,>,{}],[time,<,{}]", t(from), t(end)),
            ];
            let text = &filters[rng.usize(..filters.len())];
            let sub: Subscription = text.parse().expect("valid");
            let expected: Vec<i64> = {
                let mut selected: Vec<&(u64, Publication)> = all
                    .iter()
                    .filter(|(_, p)| stores.iter().any(|s| matches(s, p)) && matches(&sub, p))
                    .collect();
                selected.sort_by_key(|(at, _)| *at);
                selected
                    .iter()
                    .map(|(_, p)| match p.get("n") {
                        Some(padres_lang::Value::Int(n)) => *n,
                        _ => unreachable!(),
                    })
                    .collect()
            };
            let before = sim.deliveries.len();
            let ends = sim.ends.len();
            let id = sim.id(20 + b, &format!("s {text}"));
            sim.run();
            let got = numbers(&sim, &id, before);
            let context = format!("seed {seed}, broker B{}, {text}", b + 1);
            assert_eq!(got, expected, "{context}");
            total += expected.len();
            let markers: Vec<_> = sim.ends[ends..].iter().filter(|e| e.sub == id).collect();
            assert_eq!(markers.len(), 1, "{context}: one marker");
            assert_eq!(markers[0].count, expected.len() as u64, "{context}");
            assert!(markers[0].missing.is_empty() && !markers[0].truncated, "{context}");
        }
    }
    assert!(n < 40 || total > 2_000, "the queries select something: {total} in {n} seeds");
}

#[test]
fn an_open_ended_historic_subscription_gets_every_publication_once_across_the_boundary() {
    for seed in seeds::seeds("HIST_SEED", "HIST_SEEDS", 30) {
        let mut sim = federation(seed);
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
        let mut sent = publish(&mut sim, &mut rng, 0, 60, 3);
        let since = rng.u64(0..sim.now());
        let before = sim.deliveries.len();
        let req = sim.send(21, &format!("s [class,eq,'log'],[level,eq,'error'],[time,>=,{}]", t(since)));
        // Publishers go on while the subscription settles, the query travels and the
        // answers come back.
        sent.extend(publish(&mut sim, &mut rng, 1_000, 60, 1));
        let id = match sim.replies.get(&(21, req)) {
            Some(Ok(Some(id))) => id.clone(),
            other => panic!("seed {seed}: {other:?}"),
        };
        let got = numbers(&sim, &id, before);
        let mut expected: Vec<i64> = sent
            .iter()
            .filter(|(at, text)| *at >= since && text.contains("'error'"))
            .map(|(_, text)| {
                let p: Publication = text.parse().expect("valid");
                match p.get("n") {
                    Some(padres_lang::Value::Int(n)) => *n,
                    _ => unreachable!(),
                }
            })
            .collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        expected.sort_unstable();
        assert_eq!(sorted, expected, "seed {seed}: every error log since {since} exactly once");
        let marker = sim.ends.iter().find(|e| e.sub == id).expect("a marker");
        assert_eq!(sim.ends.iter().filter(|e| e.sub == id).count(), 1);
        // What came before the marker is the stored part, in time order.
        let stored = &got[..usize::try_from(marker.count).expect("small")];
        assert!(stored.windows(2).all(|w| w[0] < w[1] || w[0] >= 1_000), "seed {seed}: {stored:?}");
    }
}

#[test]
fn a_store_that_does_not_answer_is_named_in_the_marker_after_the_timeout() {
    let mut sim = federation(1);
    let mut rng = fastrand::Rng::with_seed(1);
    publish(&mut sim, &mut rng, 0, 40, 5);
    sim.store_delay.insert(3, None); // B4's store never answers
    let start = sim.now();
    let id = sim.id(20, &format!("s [class,eq,'log'],[time,<,{}]", t(sim.now())));
    sim.run();
    let marker = sim.ends.iter().find(|e| e.sub == id).expect("a marker, after the timeout");
    assert_eq!(marker.missing.iter().map(ToString::to_string).collect::<Vec<_>>(), ["B4"]);
    // Each broker on the way waits three quarters as long as the one before: B4 gives up
    // on its own store first and says so, and B1 is told within its timeout.
    let timeout = padres_broker::router::DEFAULT_TIMEOUT_MS;
    assert!(marker.time >= start + timeout / 4 * 3 / 4 * 3, "{} {}", marker.time, start);
    assert!(marker.time < start + timeout, "{} {}", marker.time, start);
    // B2's errors were delivered all the same.
    let got = numbers(&sim, &id, 0);
    assert_eq!(got.len() as u64, marker.count);
    assert!(marker.count > 0);
}

#[test]
fn a_store_cut_off_is_named_at_once_and_answers_again_when_its_link_returns() {
    let mut sim = federation(2);
    let mut rng = fastrand::Rng::with_seed(2);
    publish(&mut sim, &mut rng, 0, 40, 5);
    sim.unlink(2, 3); // B3 — B4: B4's store is cut off
    sim.run();
    let start = sim.now();
    let query = format!("s [class,eq,'log'],[app,eq,'a1'],[time,<,{}]", t(sim.now()));
    let id = sim.id(24, &query);
    sim.run();
    let marker = sim.ends.iter().find(|e| e.sub == id).expect("a marker").clone();
    assert_eq!(marker.missing.iter().map(ToString::to_string).collect::<Vec<_>>(), ["B4"]);
    assert!(marker.time < start + 100, "named at once, not after the timeout");
    let partial = marker.count;
    sim.link(2, 3, 2);
    sim.run();
    let id = sim.id(24, &query);
    sim.run();
    let marker = sim.ends.iter().find(|e| e.sub == id).expect("a marker");
    assert!(marker.missing.is_empty(), "{marker:?}");
    assert!(marker.count > partial, "B4's a1 logs are back: {} > {partial}", marker.count);
}

#[test]
fn a_store_whose_broker_comes_back_without_it_is_no_longer_named_missing() {
    // B1 — B2 — B3, a store at B3, subscribers at B1 and B2; B3 goes away, then restarts
    // with no store.
    let mut sim = chain(padres_broker::router::Options::default(), 3, 3, (2, 1), &[(2, "[class,eq,'log']")]);
    sim.attach(4, 1);
    sim.unlink(1, 2);
    sim.run();
    let query = format!("s [class,eq,'log'],[time,<,{}]", t(sim.now()));
    let missing = |sim: &mut Sim, client: u64| {
        let id = sim.id(client, &query);
        sim.run();
        let marker = sim.ends.iter().find(|e| e.sub == id).expect("a marker");
        marker.missing.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    assert_eq!(missing(&mut sim, 2), ["B3"], "down: named two hops away");
    assert_eq!(missing(&mut sim, 4), ["B3"], "and next to it");
    sim.restart(2);
    sim.link(1, 2, 3);
    sim.run();
    assert!(missing(&mut sim, 4).is_empty(), "B3 is back and keeps no store: its neighbour knows");
    // B1, two hops away, still names it (docs/history.md: a known limit).
}

#[test]
fn a_composite_subscription_joins_a_stored_trigger_with_a_status_arriving_now() {
    // B1 — B2: the store and the publisher at B2, the subscriber at B1.
    let mut sim =
        chain(padres_broker::router::Options::default(), 2, 3, (2, 1), &[(1, "[class,eq,'trigger']")]);
    sim.id(1, "a [class,eq,'trigger'],[appl,isPresent,''],[gid,isPresent,'']");
    sim.id(1, "a [class,eq,'job_status'],[appl,isPresent,''],[gid,isPresent,''],[status,isPresent,'']");
    sim.advance(1_000);
    sim.call(1, "p [class,'trigger'],[appl,'payroll'],[gid,'g1']").expect("published");
    sim.call(1, "p [class,'trigger'],[appl,'billing'],[gid,'g2']").expect("published");
    sim.advance(60_000);
    let pattern = |since: &str| {
        format!(
            "cs {{[class,eq,'trigger'],[appl,eq,$S$a],[time,>=,{since}]}} & {{[class,eq,'job_status'],[appl,eq,$S$a],[status,eq,'FAILED']}}"
        )
    };
    let historic = sim.id(2, &pattern(&t(0)));
    // The same pattern without a past: the trigger came before it, so it never completes.
    let live_only = sim.id(2, &pattern(&t(sim.now())));
    sim.run();
    sim.advance(1_000);
    sim.call(1, "p [class,'job_status'],[appl,'payroll'],[gid,'g1'],[status,'FAILED']").expect("published");
    sim.call(1, "p [class,'job_status'],[appl,'other'],[gid,'g3'],[status,'FAILED']").expect("published");
    sim.run();
    let matched: Vec<(MessageId, Vec<String>)> = sim
        .composite_deliveries
        .iter()
        .map(|d| (d.sub.clone(), d.pubs.iter().map(|(_, p)| p.without_time().to_string()).collect()))
        .collect();
    assert_eq!(
        matched,
        [(
            historic,
            vec![
                "[class,'trigger'],[appl,'payroll'],[gid,'g1']".to_owned(),
                "[class,'job_status'],[appl,'payroll'],[gid,'g1'],[status,'FAILED']".to_owned()
            ]
        )],
        "only the pattern reaching into the past sees the stored trigger (not {live_only})"
    );
}

/// The stores `client` hears are missing, asking now for `[class,eq,'log']` from before.
fn missing_for(sim: &mut Sim, client: u64) -> Vec<String> {
    let query = format!("s [class,eq,'log'],[time,<,{}]", t(sim.now()));
    let id = sim.id(client, &query);
    sim.run();
    let marker = sim.ends.iter().find(|e| e.sub == id).expect("a marker");
    marker.missing.iter().map(ToString::to_string).collect()
}

#[test]
fn in_a_ring_a_store_cut_off_stays_named_though_the_withdrawals_cross() {
    // B1, B2, B3 in a ring, a store at B3, subscribers at B1 and B2; B3 is cut off from
    // both. Each of B1 and B2 floods the loss to the other.
    let mut sim = Sim::with_options(3, padres_broker::router::Options { cycles: true, ..Default::default() });
    for (a, b) in [(0, 1), (1, 2), (2, 0)] {
        sim.link(a, b, 2);
    }
    sim.attach(1, 0);
    sim.attach(2, 1);
    sim.run();
    sim.keep_history(2, "[class,eq,'log']");
    sim.run();
    sim.unlink(1, 2);
    sim.unlink(2, 0);
    sim.run();
    assert_eq!(missing_for(&mut sim, 1), ["B3"]);
    assert_eq!(missing_for(&mut sim, 2), ["B3"]);
    // Back on one side: reachable through B1 again, missing nowhere.
    sim.link(2, 0, 2);
    sim.run();
    assert!(missing_for(&mut sim, 1).is_empty());
    assert!(missing_for(&mut sim, 2).is_empty());
}

#[test]
fn a_store_still_down_beyond_a_link_that_drops_and_returns_stays_named() {
    // B1 — B2 — B3, a store at B3 cut off from B2; then B1 — B2 drops and returns.
    let mut sim = chain(padres_broker::router::Options::default(), 3, 3, (2, 1), &[(2, "[class,eq,'log']")]);
    sim.attach(4, 1);
    sim.unlink(1, 2);
    sim.run();
    assert_eq!(missing_for(&mut sim, 2), ["B3"]);
    sim.unlink(0, 1);
    sim.run();
    sim.link(0, 1, 3);
    sim.run();
    assert_eq!(missing_for(&mut sim, 2), ["B3"]);
    assert_eq!(missing_for(&mut sim, 4), ["B3"]);
}

#[test]
fn two_clients_with_the_same_historic_pattern_each_get_each_match_once() {
    // B1 — B2: the store and the publisher at B2, two subscribers at B1 with one text.
    let mut sim =
        chain(padres_broker::router::Options::default(), 2, 3, (2, 1), &[(1, "[class,eq,'trigger']")]);
    sim.attach(4, 0);
    sim.id(1, "a [class,eq,'trigger'],[appl,isPresent,''],[gid,isPresent,'']");
    sim.id(1, "a [class,eq,'job_status'],[appl,isPresent,''],[gid,isPresent,''],[status,isPresent,'']");
    sim.advance(1_000);
    sim.call(1, "p [class,'trigger'],[appl,'payroll'],[gid,'g1']").expect("published");
    sim.advance(60_000);
    let pattern = format!(
        "cs {{[class,eq,'trigger'],[appl,eq,$S$a],[time,>=,{}]}} & {{[class,eq,'job_status'],[appl,eq,$S$a],[status,eq,'FAILED']}}",
        t(0)
    );
    let first = sim.id(2, &pattern);
    sim.run();
    // The second comes once the first's stored trigger is in.
    let second = sim.id(4, &pattern);
    sim.run();
    sim.advance(1_000);
    sim.call(1, "p [class,'job_status'],[appl,'payroll'],[gid,'g1'],[status,'FAILED']").expect("published");
    sim.run();
    let mut got: Vec<(u64, MessageId)> =
        sim.composite_deliveries.iter().map(|d| (d.client, d.sub.clone())).collect();
    got.sort();
    assert_eq!(got, [(2, first), (4, second)], "one match each");
}

#[test]
fn in_a_ring_store_advertisements_stop_and_a_query_still_ends_with_one_marker() {
    // B1 — B2 — B3 — B1, cycles on; the store at B3, the publisher at B2, the subscriber at B1.
    let mut sim = Sim::with_options(3, padres_broker::router::Options { cycles: true, ..Default::default() });
    for (a, b) in [(0, 1), (1, 2), (2, 0)] {
        sim.link(a, b, 2);
    }
    sim.attach(1, 1);
    sim.attach(2, 0);
    sim.run();
    sim.keep_history(2, "[class,eq,'log']");
    assert!(sim.run_bounded(10_000), "the store's advertisement does not circle for ever");
    sim.id(1, "a [class,eq,'log'],[n,isPresent,0]");
    for n in 0..5 {
        sim.call(1, &format!("p [class,'log'],[n,{n}]")).expect("published");
    }
    sim.advance(10);
    let id = sim.id(2, &format!("s [class,eq,'log'],[time,<,{}]", t(sim.now())));
    assert!(sim.run_bounded(10_000));
    let markers: Vec<_> = sim.ends.iter().filter(|e| e.sub == id).collect();
    assert_eq!(markers.len(), 1);
    assert_eq!((markers[0].count, markers[0].missing.len()), (5, 0));
    assert_eq!(numbers(&sim, &id, 0), [0, 1, 2, 3, 4]);
}

#[test]
fn an_answer_cut_at_max_results_is_marked_truncated_and_live_copies_past_the_cut_still_arrive() {
    // B1 — B2; B2 keeps every log and publishes; at most 4 results per historic query.
    let options = padres_broker::router::Options { history_max_results: 4, ..Default::default() };
    let mut sim = chain(options, 2, 10, (21, 12), &[(1, "[class,eq,'log']")]);
    sim.id(12, "a [class,eq,'log'],[n,isPresent,0]");
    for n in 0..3 {
        sim.call(12, &format!("p [class,'log'],[n,{n}]")).expect("published");
        sim.advance(1);
    }
    let before = sim.deliveries.len();
    let t0 = sim.now();
    let req = sim.send(21, &format!("s [class,eq,'log'],[time,>=,{}]", t(0)));
    // Once the subscription has reached B2, two more logs: routed live to B1 (held there
    // while the query runs) and stored at B2 before the query gets there.
    while sim.now() < t0 + 10 {
        assert!(sim.step(), "the subscription travels");
    }
    for n in [100, 101] {
        sim.send(12, &format!("p [class,'log'],[n,{n}]"));
    }
    sim.run();
    let (id, marker) = id_and_marker(&sim, req);
    // The first four stored in time order, the marker, then the live copy the cut left out.
    assert_eq!(numbers(&sim, &id, before), [0, 1, 2, 100, 101]);
    assert_eq!((marker.count, marker.truncated), (4, true));
}

#[test]
fn a_silent_store_two_hops_away_is_named_alone_not_with_the_store_that_answered_on_its_way() {
    // B1 — B2 — B3, stores at B2 and B3; B3's never answers.
    let stores = [(1, "[class,eq,'log']"), (2, "[class,eq,'log']")];
    let mut sim = chain(padres_broker::router::Options::default(), 3, 2, (21, 13), &stores);
    sim.id(13, "a [class,eq,'log'],[n,isPresent,0]");
    for n in 0..5 {
        sim.call(13, &format!("p [class,'log'],[n,{n}]")).expect("published");
    }
    sim.store_delay.insert(2, None);
    let id = sim.id(21, &format!("s [class,eq,'log'],[time,>=,{}]", t(0)));
    sim.run();
    let marker = sim.ends.iter().find(|e| e.sub == id).expect("a marker");
    assert_eq!(marker.missing.iter().map(ToString::to_string).collect::<Vec<_>>(), ["B3"]);
    assert_eq!(numbers(&sim, &id, 0), [0, 1, 2, 3, 4], "B2's store answered");
}

#[test]
fn a_query_holding_more_live_copies_than_max_results_is_cut_short_and_nothing_is_lost() {
    // B1 — B2; B2 keeps every log and publishes, and its store never answers; at most 4
    // results per historic query, and so at most 4 live copies held while one runs.
    let options = padres_broker::router::Options { history_max_results: 4, ..Default::default() };
    let mut sim = chain(options, 2, 10, (21, 12), &[(1, "[class,eq,'log']")]);
    sim.id(12, "a [class,eq,'log'],[n,isPresent,0]");
    sim.store_delay.insert(1, None);
    let start = sim.now();
    let req = sim.send(21, &format!("s [class,eq,'log'],[time,>=,{}]", t(0)));
    // Once the subscription has reached B2, ten logs, routed live to B1 while the query
    // waits for B2's store.
    while sim.now() < start + 10 {
        assert!(sim.step(), "the subscription travels");
    }
    for n in 0..10 {
        sim.send(12, &format!("p [class,'log'],[n,{n}]"));
        sim.advance(1);
    }
    sim.run();
    let (id, marker) = id_and_marker(&sim, req);
    // Cut short when the fifth live copy came, not at the timeout, naming the silent store.
    assert!(marker.time < start + 100, "{} {start}", marker.time);
    assert_eq!(marker.missing.iter().map(ToString::to_string).collect::<Vec<_>>(), ["B2"]);
    assert_eq!((marker.count, marker.truncated), (0, false));
    // Every live log once, in order: the held ones after the marker, then the rest.
    assert_eq!(numbers(&sim, &id, 0), (0..10).collect::<Vec<_>>());
}

#[test]
fn a_query_cut_short_before_it_went_out_names_every_store_it_would_have_asked() {
    // B1 — B2 (50 ms), a store at B2, at most 4 results per historic query; a publisher at
    // B1 beside the subscriber publishes while the subscription is still settling at B2.
    let options = padres_broker::router::Options { history_max_results: 4, ..Default::default() };
    let mut sim = chain(options, 2, 50, (21, 12), &[(1, "[class,eq,'log']")]);
    sim.attach(11, 0);
    sim.run();
    sim.id(11, "a [class,eq,'log'],[n,isPresent,0]");
    let start = sim.now();
    let req = sim.send(21, &format!("s [class,eq,'log'],[time,>=,{}]", t(0)));
    for n in 0..10 {
        sim.send(11, &format!("p [class,'log'],[n,{n}]"));
    }
    sim.run();
    let (id, marker) = id_and_marker(&sim, req);
    assert!(marker.time < start + 50, "before the subscription settled: {} {start}", marker.time);
    assert_eq!(marker.missing.iter().map(ToString::to_string).collect::<Vec<_>>(), ["B2"]);
    assert_eq!(numbers(&sim, &id, 0), (0..10).collect::<Vec<_>>());
}

#[test]
fn a_composite_leaf_query_is_cut_short_past_max_results_live_publications_and_detection_goes_on() {
    // B1 — B2: a slow store of triggers and the publisher at B2, the subscriber at B1; at
    // most 4 results per historic query.
    let options = padres_broker::router::Options { history_max_results: 4, ..Default::default() };
    let mut sim = chain(options, 2, 3, (2, 1), &[(1, "[class,eq,'trigger']")]);
    sim.id(1, "a [class,eq,'trigger'],[appl,isPresent,'']");
    sim.id(1, "a [class,eq,'job_status'],[appl,isPresent,''],[status,isPresent,'']");
    sim.call(1, "p [class,'trigger'],[appl,'payroll']").expect("published");
    sim.advance(1_000);
    sim.store_delay.insert(1, Some(1_000));
    // Settled: the trigger leaf's query is out, its store to answer in a second.
    let id = sim.id_settled(
        2,
        &format!(
            "cs {{[class,eq,'trigger'],[appl,eq,$S$a],[time,>=,{}]}} & {{[class,eq,'job_status'],[appl,eq,$S$a],[status,eq,'FAILED']}}",
            t(0)
        ),
    );
    // Five live triggers while the trigger leaf's query waits for the store: one more than
    // the query may have had live, so it ends without the stored trigger.
    for n in 0..5 {
        sim.send(1, &format!("p [class,'trigger'],[appl,'x{n}']"));
    }
    sim.run();
    sim.call(1, "p [class,'job_status'],[appl,'payroll'],[status,'FAILED']").expect("published");
    sim.call(1, "p [class,'job_status'],[appl,'x3'],[status,'FAILED']").expect("published");
    sim.run();
    let matched: Vec<Vec<String>> = sim
        .composite_deliveries
        .iter()
        .filter(|d| d.sub == id)
        .map(|d| d.pubs.iter().map(|(_, p)| p.without_time().to_string()).collect())
        .collect();
    assert_eq!(
        matched,
        [vec![
            "[class,'trigger'],[appl,'x3']".to_owned(),
            "[class,'job_status'],[appl,'x3'],[status,'FAILED']".to_owned()
        ]],
        "live detection goes on; the stored trigger never came"
    );
}

#[test]
fn two_publications_with_the_same_broker_and_counter_but_other_times_are_both_delivered() {
    // B1 — B2, B2 keeps every log and publishes. A second run of B2 that lost its
    // incarnation counts from where the first did: its store then holds two publications
    // with the same broker and counter, stamped at different times. A copy kept twice is one
    // publication; these are two.
    let mut sim =
        chain(padres_broker::router::Options::default(), 2, 2, (21, 12), &[(1, "[class,eq,'log']")]);
    sim.id(12, "a [class,eq,'log'],[n,isPresent,0]");
    sim.call(12, "p [class,'log'],[n,1]").expect("published");
    let (_, first) = sim.stored.iter().find(|(b, _)| *b == 1).cloned().expect("stored at B2");
    let later = first.stamp.time + 1_000;
    let at = Timestamp::from_millis(i64::try_from(later).expect("small")).expect("in range");
    let other: Publication = "[class,'log'],[n,2]".parse().expect("valid");
    let again = padres_lang::Stamped {
        stamp: padres_lang::Stamp::new(later, first.stamp.origin.clone(), first.stamp.seq),
        publication: std::sync::Arc::new(other.with_time(at)),
    };
    sim.stored.push((1, std::sync::Arc::new(again)));
    sim.advance(2_000);
    let id = sim.id(21, &format!("s [class,eq,'log'],[time,<,{}]", t(sim.now())));
    sim.run();
    assert_eq!(numbers(&sim, &id, 0), [1, 2]);
}

#[test]
fn a_query_this_broker_issued_that_comes_back_from_a_neighbour_is_not_asked_of_its_store_again() {
    // In a cyclic overlay a copy of a broker's own query can come back to it after the
    // query has ended there (cut short, or timed out): the store must not be asked again
    // for an answer nobody waits for. A query issued elsewhere still is asked of it.
    use padres_broker::router::{BrokerMessage, Input, Options, Output, Router};
    let name = |n: &str| padres_lang::Name::new(n).expect("name");
    let mut router = Router::with_options(name("B1"), Options { cycles: true, ..Options::default() });
    let mut out = Vec::new();
    router.handle(0, Input::NeighbourUp(name("B2")), &mut out);
    router.handle(0, Input::KeepHistory("[class,eq,'log']".parse().expect("filter")), &mut out);
    let sub: std::sync::Arc<Subscription> =
        std::sync::Arc::new(format!("[class,eq,'log'],[time,>=,{}]", t(0)).parse().expect("subscription"));
    let mut ask = |router: &mut Router, origin: &str| {
        let query = MessageId::new(name(origin), 7);
        let message = BrokerMessage::HistoryQuery { query, sub: sub.clone(), limit: 10, timeout_ms: 1000 };
        out.clear();
        router.handle(1, Input::Broker { from: name("B2"), message }, &mut out);
        let asked_store = out.iter().any(|o| matches!(o, Output::HistoryQuery { .. }));
        let done = out.iter().any(|o| {
            matches!(o, Output::ToBroker { message: BrokerMessage::HistoryDone { missing, .. }, .. } if missing.is_empty())
        });
        (asked_store, done)
    };
    assert_eq!(ask(&mut router, "B3"), (true, false), "another broker's query is asked of the store");
    assert_eq!(ask(&mut router, "B1"), (false, true), "its own query coming back is done at once");
}

/// A historic subscription whose live part a silent neighbour holds is answered at its
/// settle deadline, and its query goes out then: the stored part and its marker still
/// come (before, the client waited for the marker for ever).
#[test]
fn a_historic_subscription_answered_at_its_settle_deadline_still_reads_the_stores() {
    let options = padres_broker::router::Options { settle_timeout_ms: 2_000, ..Default::default() };
    // B1 — B2 — B3: the store and the subscriber (21) at B1, the publisher (23) at B3.
    let mut sim = chain(options, 3, 2, (21, 23), &[(0, STORE_ERRORS)]);
    sim.id(23, "a [class,eq,'log'],[level,isPresent,''],[app,isPresent,''],[n,isPresent,0]");
    assert_eq!(sim.call(23, "p [class,'log'],[level,'error'],[app,'a1'],[n,1]"), Ok(None));
    assert_eq!(sim.stored.len(), 1);
    // B2 goes silent: B1's link to it stays up, and nothing comes back from it.
    sim.crash(1);
    let req = sim.send(21, &format!("s [class,eq,'log'],[level,eq,'error'],[time,>=,{}]", t(0)));
    sim.run();
    let (id, marker) = id_and_marker(&sim, req);
    assert!(marker.time >= 2_000, "answered at the deadline, marker at {} ms", marker.time);
    assert_eq!(marker.count, 1);
    assert_eq!(numbers(&sim, &id, 0), [1], "the stored publication");
    assert_eq!(sim.unsettled(0), 0);
}
