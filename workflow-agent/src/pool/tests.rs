//! Load reports, members and their placement, the meter, the provisioner.

use super::*;

fn load(agent: &str, capacity: i64, running: i64, delay: f64) -> Load {
    Load {
        agent: agent.to_owned(),
        broker: "quic://127.0.0.1:1".to_owned(),
        pools: vec!["p".to_owned()],
        incarnation: 1,
        state: MemberState::Up,
        period_ms: 1000,
        capacity,
        running,
        queued: 0,
        delay_short_ms: delay,
        delay_long_ms: delay,
        arrivals: 0.0,
    }
}

#[test]
fn a_load_report_reads_back_as_published() {
    let mut sent = load("a-1", 4, 2, 12.5);
    sent.pools = vec!["ledger".to_owned(), "etl".to_owned()];
    let publication = sent.publication().expect("valid");
    assert_eq!(Load::from_publication(&publication), Some(sent));
    // Its pool's subscription takes it; another pool's does not.
    let matches = |pool: &str| {
        let sub: padres_lang::Subscription =
            pool_subscription(pool).trim_start_matches("s ").parse().expect("a subscription");
        padres_lang::semantics::matches(&sub, &publication)
    };
    assert!(matches("ledger") && matches("etl"));
    assert!(!matches("led"), "a pool whose name is part of another's is not taken for it");
    assert!(padres_lang::semantics::conforms(&publication, &load_advertisement("a-1")));
}

#[test]
fn policies_choose_as_documented_and_none_when_every_member_is_full() {
    let now = Instant::now();
    let mut members = Members::default();
    members.report(load("a", 4, 3, 5.0), now, 0);
    members.report(load("b", 4, 0, 50.0), now, 0);
    members.report(load("c", 4, 2, 1.0), now, 0);
    let pick = |m: &mut Members, policy| m.choose("p", policy, now, 3, None).map(|(a, _)| a);
    // Most headroom: b (4), then, as b is given jobs, b and c tie at 2 (name order).
    assert_eq!(pick(&mut members, Policy::LeastLoaded).as_deref(), Some("b"));
    assert_eq!(pick(&mut members, Policy::LeastLoaded).as_deref(), Some("b"));
    assert_eq!(pick(&mut members, Policy::LeastLoaded).as_deref(), Some("b"));
    assert_eq!(pick(&mut members, Policy::LeastLoaded).as_deref(), Some("c"));
    // Lowest delay: c, while it has room (1 left), then a (5 ms).
    assert_eq!(pick(&mut members, Policy::LowestDelay).as_deref(), Some("c"));
    assert_eq!(pick(&mut members, Policy::LowestDelay).as_deref(), Some("a"));
    // a and c are full now; b has 1 left.
    assert_eq!(pick(&mut members, Policy::RoundRobin).as_deref(), Some("b"));
    assert_eq!(pick(&mut members, Policy::RoundRobin), None, "every member is at its limit");
    // A job of b's ends: b has room again before it reports.
    members.ended("b");
    assert_eq!(pick(&mut members, Policy::RoundRobin).as_deref(), Some("b"));
    // A new report resets what was given since the last.
    members.report(load("a", 4, 0, 5.0), now, 0);
    assert_eq!(pick(&mut members, Policy::RoundRobin).as_deref(), Some("a"));
}

#[test]
fn round_robin_takes_members_in_turn() {
    let now = Instant::now();
    let mut members = Members::default();
    for name in ["x", "y", "z"] {
        members.report(load(name, 100, 0, 0.0), now, 0);
    }
    let order: Vec<String> = (0..5)
        .filter_map(|_| members.choose("p", Policy::RoundRobin, now, 3, None))
        .map(|(a, _)| a)
        .collect();
    assert_eq!(order, ["x", "y", "z", "x", "y"]);
    // The member a job is taken from is passed over while another can take it.
    let (next, _) = members.choose("p", Policy::RoundRobin, now, 3, Some("z")).expect("one");
    assert_eq!(next, "x");
}

#[test]
fn silent_restarted_leaving_and_left_members_take_no_work() {
    let start = Instant::now();
    let mut members = Members::default();
    assert_eq!(members.report(load("a", 4, 0, 0.0), start, 0), Change::Joined);
    assert_eq!(members.report(load("b", 4, 0, 0.0), start, 0), Change::Joined);
    // Three periods (3 s) of silence and a little more: a is gone, b reported (its
    // report made 3.1 s after a's last).
    let later = start + Duration::from_millis(3100);
    members.report(load("b", 4, 0, 0.0), later, 3100);
    assert!(!members.alive("a", 1, later, 3) && members.alive("b", 1, later, 3));
    assert_eq!(
        members.choose("p", Policy::LeastLoaded, later, 3, None).map(|(a, _)| a).as_deref(),
        Some("b")
    );
    // b restarts: its earlier run is gone; a stale report of that run changes nothing.
    let mut again = load("b", 4, 0, 0.0);
    again.incarnation = 2;
    assert_eq!(members.report(again, later, 3100), Change::Restarted { was: 1 });
    assert!(!members.alive("b", 1, later, 3) && members.alive("b", 2, later, 3));
    assert_eq!(members.report(load("b", 4, 0, 0.0), later, 3100), Change::Load);
    assert!(members.alive("b", 2, later, 3));
    // b drains, then leaves.
    let mut leaving = load("b", 4, 1, 0.0);
    (leaving.incarnation, leaving.state) = (2, MemberState::Leaving);
    members.report(leaving.clone(), later, 3100);
    assert_eq!(members.choose("p", Policy::LeastLoaded, later, 3, None), None);
    assert!(members.alive("b", 2, later, 3), "a leaving member still runs what it has");
    assert!(
        members.alive("b", 2, later + Duration::from_secs(60), 3),
        "no newer report: nobody is taken for silent"
    );
    // The home agent hears its own report, made 60 s later: b has been silent.
    members.heard(63_100);
    assert!(!members.alive("b", 2, later + Duration::from_secs(60), 3));
    leaving.state = MemberState::Left;
    assert_eq!(members.report(leaving, later, 3100), Change::Left);
    assert!(!members.alive("b", 2, later, 3));
}

#[test]
fn the_meter_counts_waits_of_started_and_waiting_jobs() {
    let t0 = Instant::now();
    let mut meter = Meter::default();
    let first = meter.arrive(t0);
    let second = meter.arrive(t0);
    meter.start(first, t0 + Duration::from_millis(100));
    assert_eq!((meter.running(), meter.queued()), (1, 1));
    // At 300 ms: one started after 100 ms, one waiting 300 ms so far.
    let at = t0 + Duration::from_millis(300);
    assert!((meter.delay_ms(at, SHORT_WINDOW) - 200.0).abs() < 1e-6);
    meter.start(second, at);
    meter.end();
    assert_eq!((meter.running(), meter.queued()), (1, 0));
    assert!((meter.arrivals(at) - 0.2).abs() < 1e-9);
    // A minute and more later, nothing recent is left.
    let late = t0 + LONG_WINDOW + Duration::from_secs(1);
    meter.prune(late);
    assert_eq!(meter.delay_ms(late, LONG_WINDOW), 0.0);
    assert_eq!(meter.arrivals(late), 0.0);
}

#[test]
fn a_provisioner_advises_growth_after_a_full_while_and_shrinking_after_an_idle_one() {
    let spec = Provision {
        pool: "p".to_owned(),
        over_for: Duration::from_secs(5),
        under_for: Duration::from_secs(20),
        under: 0.5,
        min: 1,
        max: 3,
    };
    let mut provisioner = Provisioner::new(spec);
    let t0 = Instant::now();
    let mut members = Members::default();
    // No member: fewer than the fewest, at once; and not again before --over-for.
    assert!(matches!(provisioner.observe(&members, t0, 3, 0), Some(Advice::ScaleUp { members: 0, .. })));
    assert_eq!(provisioner.observe(&members, t0 + Duration::from_secs(1), 3, 0), None);
    members.report(load("a", 2, 2, 0.0), t0, 0);
    members.report(load("b", 2, 1, 0.0), t0, 0);
    // b has room: nothing, however long.
    assert_eq!(provisioner.observe(&members, t0 + Duration::from_secs(10), 3, 0), None);
    // Jobs waiting for room at a home agent count as every member being full.
    assert_eq!(provisioner.observe(&members, t0 + Duration::from_secs(10), 3, 4), None);
    assert!(matches!(
        provisioner.observe(&members, t0 + Duration::from_secs(15), 3, 4),
        Some(Advice::ScaleUp { members: 2, .. })
    ));
    // Both full from 10 s: advice at 15 s, not before; then the watch starts over.
    let at = |s: u64| t0 + Duration::from_secs(s);
    members.report(load("a", 2, 2, 0.0), at(10), 10_000);
    members.report(load("b", 2, 2, 0.0), at(10), 10_000);
    assert_eq!(provisioner.observe(&members, at(10), 3, 0), None);
    assert_eq!(provisioner.observe(&members, at(14), 3, 0), None);
    members.report(load("a", 2, 2, 0.0), at(14), 14_000);
    members.report(load("b", 2, 2, 0.0), at(14), 14_000);
    assert!(matches!(provisioner.observe(&members, at(15), 3, 0), Some(Advice::ScaleUp { members: 2, .. })));
    assert_eq!(provisioner.observe(&members, at(16), 3, 0), None);
    // Idle from 20 s: after 20 s of it, the least loaded (a, no job; b has none
    // either: the later name) is to go.
    for s in [20, 30, 40] {
        members.report(load("a", 2, 0, 0.0), at(s), s as i64 * 1000);
        members.report(load("b", 2, 0, 0.0), at(s), s as i64 * 1000);
        let advice = provisioner.observe(&members, at(s), 3, 0);
        if s < 40 {
            assert_eq!(advice, None, "at {s} s");
        } else {
            let Some(Advice::ScaleDown { member, members: 2, .. }) = advice else { panic!("{advice:?}") };
            assert_eq!(member, "b");
        }
    }
    let publication =
        Advice::ScaleUp { members: 2, reason: "full".to_owned() }.publication("p", "home").expect("valid");
    assert!(padres_lang::semantics::conforms(&publication, &advice_advertisement("p", "home")));
}
