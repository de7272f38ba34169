//! Property tests, 10,000 cases each: printing round-trips through the parser (and the
//! codec) for every message kind, `covers` never claims too much, and `overlaps` never
//! denies a real overlap.

use std::cell::Cell;
use std::sync::Arc;

use padres_lang::wire::codec::DEFAULT_MAX_FRAME;
use padres_lang::wire::{
    BrokerStats, CloseCode, LinkTraffic, Query, Report, RouteEntry, RoutesReport, Token,
};
use padres_lang::{
    Advertisement, CompositeOp, CompositeSubscription, ErrorCode, Frame, Limits, Message, MessageId, Name,
    Op, Operand, Pattern, Predicate, Publication, Role, Subscription, Timestamp, Value, VarKind, Variable,
    adv_covers, conforms, covers, matches, overlaps, wire,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const CASES: u32 = 10_000;

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: CASES, failure_persistence: None, ..Config::default() })
}

fn name(text: &str) -> Name {
    Name::new(text).expect("valid name")
}

// ---------------------------------------------------------------------------------------
// Broad generators, for round trips: any string, any finite number, any timestamp.

fn any_name() -> BoxedStrategy<Name> {
    "[a-zA-Z_][a-zA-Z0-9_.-]{0,8}"
        .prop_filter("class is reserved", |s| s != "class")
        .prop_map(|s| name(&s))
        .boxed()
}

fn any_string() -> BoxedStrategy<String> {
    prop_oneof![any::<String>(), "[a-z'\"\\\\ ,\\[\\]{}$&|;()\n\t]{0,12}"].boxed()
}

fn any_number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::Float),
        (Timestamp::MIN.millis()..=Timestamp::MAX.millis())
            .prop_map(|ms| Value::Time(Timestamp::from_millis(ms).expect("in range"))),
    ]
    .boxed()
}

fn any_value() -> BoxedStrategy<Value> {
    prop_oneof![any_number(), any_string().prop_map(|s| Value::str(&s)), any::<bool>().prop_map(Value::Bool)]
        .boxed()
}

const STRING_OPS: [Op; 9] = [
    Op::Eq,
    Op::Neq,
    Op::StrLt,
    Op::StrLe,
    Op::StrGt,
    Op::StrGe,
    Op::StrPrefix,
    Op::StrPostfix,
    Op::StrContains,
];
const NUMBER_OPS: [Op; 6] = [Op::NumEq, Op::NumNe, Op::Lt, Op::Le, Op::Gt, Op::Ge];
const BOOL_OPS: [Op; 4] = [Op::Eq, Op::Neq, Op::NumEq, Op::NumNe];
const PATTERNS: [&str; 4] = ["^ERR[0-9]+", "m$", "b.c", "(?i)ibm|xyz"];

fn pattern(source: &str) -> Pattern {
    Pattern::new(source, &Limits::default()).expect("valid pattern")
}

/// A predicate with a literal (or a pattern) on `attr`, drawn from `value`.
fn literal_predicate(
    attr: BoxedStrategy<Name>,
    string: BoxedStrategy<String>,
    number: BoxedStrategy<Value>,
) -> BoxedStrategy<Predicate> {
    let typed = prop_oneof![
        (proptest::sample::select(&STRING_OPS[..]), string.clone())
            .prop_map(|(op, s)| (op, Operand::Value(Value::str(&s)))),
        (proptest::sample::select(&NUMBER_OPS[..]), number.clone())
            .prop_map(|(op, v)| (op, Operand::Value(v))),
        (proptest::sample::select(&BOOL_OPS[..]), any::<bool>())
            .prop_map(|(op, b)| (op, Operand::Value(Value::Bool(b)))),
        proptest::sample::select(&PATTERNS[..]).prop_map(|p| (Op::StrRegex, Operand::Regex(pattern(p)))),
        prop_oneof![string.prop_map(|s| Value::str(&s)), number, any::<bool>().prop_map(Value::Bool)]
            .prop_map(|v| (Op::IsPresent, Operand::Value(v))),
    ];
    (attr, typed)
        .prop_map(|(attr, (op, operand))| Predicate::new(attr, op, operand).expect("type-correct"))
        .boxed()
}

fn variable_predicate(attr: BoxedStrategy<Name>) -> BoxedStrategy<Predicate> {
    // $S$ variables are named s*, $I$ variables n*, so kinds never conflict.
    (attr, any::<bool>(), 0..3_u8)
        .prop_map(|(attr, string, i)| {
            let (kind, op, prefix) =
                if string { (VarKind::Str, Op::Eq, "s") } else { (VarKind::Num, Op::NumEq, "n") };
            let var = Variable { kind, name: name(&format!("{prefix}{i}")) };
            Predicate::new(attr, op, Operand::Var(var)).expect("type-correct")
        })
        .boxed()
}

fn class_predicate(class: BoxedStrategy<String>) -> BoxedStrategy<Predicate> {
    class.prop_map(|c| Predicate::value("class", Op::Eq, Value::str(&c)).expect("class")).boxed()
}

/// Inserts the class predicate at position `at` (mod len + 1).
fn with_class(class: Predicate, mut others: Vec<Predicate>, at: usize) -> Vec<Predicate> {
    let at = at % (others.len() + 1);
    others.insert(at, class);
    others
}

fn any_subscription() -> BoxedStrategy<Subscription> {
    let predicate = prop_oneof![
        4 => literal_predicate(any_name(), any_string(), any_number()),
        1 => variable_predicate(any_name()),
    ];
    (class_predicate(any_string()), proptest::collection::vec(predicate, 0..6), any::<usize>())
        .prop_map(|(c, others, at)| Subscription::new(with_class(c, others, at)).expect("valid"))
        .boxed()
}

fn any_advertisement() -> BoxedStrategy<Advertisement> {
    let predicate = literal_predicate(any_name(), any_string(), any_number());
    (class_predicate(any_string()), proptest::collection::vec(predicate, 0..6), any::<usize>())
        .prop_map(|(c, others, at)| Advertisement::new(with_class(c, others, at)).expect("valid"))
        .boxed()
}

fn any_publication() -> BoxedStrategy<Publication> {
    let attrs = proptest::collection::btree_map(any_name(), any_value(), 0..6);
    let payload = proptest::option::of(proptest::collection::vec(any::<u8>(), 0..24));
    (any_string(), attrs, any::<usize>(), payload)
        .prop_map(|(class, attrs, at, payload)| {
            let mut attrs: Vec<(Name, Value)> = attrs.into_iter().collect();
            let at = at % (attrs.len() + 1);
            attrs.insert(at, (name("class"), Value::str(&class)));
            let p = Publication::new(attrs).expect("valid");
            match payload {
                Some(bytes) => p.with_payload(bytes),
                None => p,
            }
        })
        .boxed()
}

fn any_composite() -> BoxedStrategy<CompositeSubscription> {
    let times = (
        any_subscription(),
        1..10_u32,
        any_name(),
        prop_oneof![any::<i64>().prop_map(Value::Int), (-1e6..1e6_f64).prop_map(Value::Float)],
    )
        .prop_map(|(sub, n, attr, step)| CompositeSubscription::times(sub, n, attr, step).expect("valid"));
    let leaf = prop_oneof![4 => any_subscription().prop_map(CompositeSubscription::leaf), 1 => times];
    leaf.prop_recursive(5, 24, 2, |inner| {
        (
            inner.clone(),
            proptest::sample::select(&[CompositeOp::And, CompositeOp::Or, CompositeOp::Seq][..]),
            inner,
        )
            .prop_map(|(l, op, r)| l.combine(op, r).expect("within limits"))
    })
    .prop_flat_map(|cs| {
        let window =
            proptest::option::of(prop_oneof![0..100_000_u64, 0..=padres_lang::composite::MAX_WINDOW_MS]);
        (Just(cs), window, proptest::option::of(any_subscription()))
    })
    .prop_map(|(cs, window, until)| {
        let cs = match window {
            Some(ms) => cs.within(ms).expect("a window within the limit"),
            None => cs,
        };
        // An until filter whose variables the pattern does not bind is refused; keep the
        // pattern without it then.
        match until {
            Some(until) => cs.clone().until(until).unwrap_or(cs),
            None => cs,
        }
    })
    .boxed()
}

fn any_id() -> BoxedStrategy<MessageId> {
    (any_name(), any::<u64>()).prop_map(|(origin, seq)| MessageId::new(origin, seq)).boxed()
}

fn any_message() -> BoxedStrategy<Message> {
    prop_oneof![
        any_advertisement().prop_map(Message::Advertise),
        any_subscription().prop_map(Message::Subscribe),
        any_composite().prop_map(Message::CompositeSubscribe),
        any_publication().prop_map(Message::Publish),
        any_id().prop_map(Message::Unsubscribe),
        any_id().prop_map(Message::Unadvertise),
    ]
    .boxed()
}

fn any_frame() -> BoxedStrategy<Frame> {
    prop_oneof![
        (any::<u32>(), any::<bool>(), any_name(), proptest::option::of("[ -~]{0,40}")).prop_map(
            |(version, broker, name, token)| Frame::Hello {
                version,
                role: if broker { Role::Broker } else { Role::Client },
                name,
                token: token.map(Token),
            }
        ),
        (any::<u32>(), any_name()).prop_map(|(version, broker)| Frame::Welcome { version, broker }),
        (any::<u64>(), any_message()).prop_map(|(req, message)| Frame::Request { req, message }),
        (any::<u64>(), proptest::option::of(any_id())).prop_map(|(req, id)| Frame::Ok { req, id }),
        (proptest::option::of(any::<u64>()), any_string()).prop_map(|(req, message)| Frame::Error {
            req,
            code: ErrorCode::NotAdvertised,
            message,
        }),
        (proptest::collection::vec(any_id(), 1..4), any_publication())
            .prop_map(|(subs, publication)| Frame::Notification { subs, publication: Arc::new(publication) }),
        any_string().prop_map(|reason| Frame::Bye { code: CloseCode::Done, reason }),
        any_publication().prop_map(|p| Frame::Publish { publication: Arc::new(p) }),
        (any_id(), proptest::collection::vec((0..8_u32, any_publication()), 1..4)).prop_map(|(sub, pubs)| {
            Frame::CompositeNotification {
                sub,
                pubs: pubs.into_iter().map(|(l, p)| (l, Arc::new(p))).collect(),
            }
        }),
        (any::<u64>(), any::<u32>()).prop_map(|(req, limit)| Frame::Query {
            req,
            query: if limit % 2 == 0 {
                Query::Stats
            } else {
                Query::Routes { limit, offset: limit / 3, filter: format!("{limit}") }
            },
        }),
        (any::<u64>(), any_name(), proptest::collection::vec(any_name(), 0..3), any::<u64>()).prop_map(
            |(req, broker, neighbours, n)| {
                let broker_peers = neighbours.clone();
                Frame::Report {
                    req,
                    report: Report::Stats(Box::new(BrokerStats {
                        broker,
                        uptime_ms: n,
                        clients: n / 2,
                        connections: n / 3,
                        neighbours,
                        advertisements: n / 3,
                        subscriptions: n / 5,
                        client_requests: n / 7,
                        publications_in: n / 11,
                        notifications_out: n / 13,
                        broker_messages_in: n / 17,
                        broker_messages_out: n / 19,
                        slow_clients_dropped: n / 23,
                        links_refused: n / 29,
                        links_cut: n / 31,
                        composites: n / 37,
                        detectors: n / 41,
                        partial_matches: n / 43,
                        partial_match_bytes: n / 101,
                        partial_match_bytes_cap: n / 103,
                        composite_matches: n / 47,
                        partials_evicted: n / 53,
                        partials_expired: n / 59,
                        partials_ended: n / 61,
                        pairs_dropped: n / 67,
                        history_stored: n / 71,
                        history_dropped: n / 73,
                        history_failed: n / 79,
                        history_removed: n / 83,
                        history_queued: n / 89,
                        history_rows: n / 97,
                        link_sessions_resumed: n / 101,
                        link_messages_resent: n / 103,
                        link_duplicates_dropped: n / 107,
                        link_sessions_expired: n / 109,
                        client_sessions_resumed: n / 113,
                        client_frames_resent: n / 127,
                        client_sessions_expired: n / 131,
                        link_traffic: broker_peers
                            .into_iter()
                            .map(|peer| LinkTraffic {
                                peer,
                                class: "job_status".into(),
                                messages: n / 137,
                                bytes: n / 139,
                            })
                            .collect(),
                        clients_refused: n / 149,
                        permission_denials: n / 151,
                        neighbour_restarts: n / 157,
                        restart_publications_sent: n / 163,
                        restart_duplicates_dropped: n / 167,
                        settle_timeouts: n / 173,
                    })),
                }
            }
        ),
        (any::<u64>(), any_name(), any::<u32>())
            .prop_map(|(req, peer, down_ms)| Frame::Query { req, query: Query::DropLink { peer, down_ms } }),
        (any::<u64>(), any::<bool>())
            .prop_map(|(req, up)| Frame::Report { req, report: Report::LinkDropped(up) }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(session, received, fresh)| Frame::Resume {
            session,
            received,
            fresh
        }),
        any::<u64>().prop_map(|received| Frame::Ack { received }),
        (any::<u64>(), any_name(), any_id(), any_subscription(), any_name()).prop_map(
            |(req, broker, id, sub, to)| Frame::Report {
                req,
                report: Report::Routes(RoutesReport {
                    broker: broker.clone(),
                    neighbours: vec![to.clone()],
                    srt: Vec::new(),
                    srt_total: 0,
                    prt: vec![RouteEntry {
                        id,
                        text: sub.to_string(),
                        from: "client 1".into(),
                        to: vec![to]
                    }],
                    prt_total: 1,
                    composites: Vec::new(),
                    composites_total: 0,
                    offset: 0,
                    filter: String::new(),
                    srt_matched: 0,
                    prt_matched: 1,
                    composites_matched: 0,
                }),
            }
        ),
    ]
    .boxed()
}

fn round_trip<T, E>(strategy: impl Strategy<Value = T>, parse: impl Fn(&str) -> Result<T, E>)
where
    T: std::fmt::Display + std::fmt::Debug + PartialEq,
    E: std::fmt::Display,
{
    runner()
        .run(&strategy, |x| {
            let text = x.to_string();
            match parse(&text) {
                Ok(back) => prop_assert_eq!(back, x, "printed as {}", text),
                Err(e) => return Err(TestCaseError::fail(format!("{text} did not parse: {e}"))),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn subscriptions_round_trip() {
    round_trip(any_subscription(), str::parse::<Subscription>);
}

#[test]
fn advertisements_round_trip() {
    round_trip(any_advertisement(), str::parse::<Advertisement>);
}

#[test]
fn publications_round_trip() {
    round_trip(any_publication(), str::parse::<Publication>);
}

#[test]
fn composites_round_trip() {
    round_trip(any_composite(), str::parse::<CompositeSubscription>);
}

#[test]
fn messages_round_trip() {
    round_trip(any_message(), str::parse::<Message>);
}

#[test]
fn frames_round_trip_through_the_codec() {
    runner()
        .run(&any_frame(), |frame| {
            let mut bytes = Vec::new();
            wire::encode(&frame, DEFAULT_MAX_FRAME, &mut bytes)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let (back, used) =
                wire::decode(&bytes, DEFAULT_MAX_FRAME).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(back, frame);
            Ok(())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// Narrow generators, for semantics: few attributes and values, so that matches, covers and
// overlaps are often true and the properties are tested, not vacuous.

const SMALL_STRINGS: [&str; 7] = ["", "ib", "bc", "abc", "ibm", "ibmstock", "xyz"];

fn small_string() -> BoxedStrategy<String> {
    proptest::sample::select(&SMALL_STRINGS[..]).prop_map(str::to_owned).boxed()
}

fn small_number() -> BoxedStrategy<Value> {
    prop_oneof![
        proptest::sample::select(&[-1_i64, 0, 80, 100, 120][..]).prop_map(Value::Int),
        proptest::sample::select(&[99.5, 100.0, 100.5][..]).prop_map(Value::Float),
        Just(Value::Time(Timestamp::from_millis(100).expect("in range"))),
    ]
    .boxed()
}

fn small_attr() -> BoxedStrategy<Name> {
    proptest::sample::select(&["x", "y", "z"][..]).prop_map(name).boxed()
}

fn small_class() -> BoxedStrategy<String> {
    proptest::sample::select(&["a", "b"][..]).prop_map(str::to_owned).boxed()
}

fn small_literal() -> BoxedStrategy<Predicate> {
    literal_predicate(small_attr(), small_string(), small_number()).boxed()
}

fn small_subscription() -> BoxedStrategy<Subscription> {
    let predicate = prop_oneof![6 => small_literal(), 1 => variable_predicate(small_attr())];
    (class_predicate(small_class()), proptest::collection::vec(predicate, 0..4))
        .prop_map(|(c, others)| Subscription::new(with_class(c, others, 0)).expect("valid"))
        .boxed()
}

fn small_advertisement() -> BoxedStrategy<Advertisement> {
    let predicate = prop_oneof![
        3 => small_literal(),
        1 => small_attr().prop_map(|a| Predicate::new(a, Op::IsPresent, Operand::Value(Value::Int(0))).expect("ok")),
    ];
    (class_predicate(small_class()), proptest::collection::vec(predicate, 0..5))
        .prop_map(|(c, others)| Advertisement::new(with_class(c, others, 0)).expect("valid"))
        .boxed()
}

fn small_publication() -> BoxedStrategy<Publication> {
    let value = prop_oneof![
        small_string().prop_map(|s| Value::str(&s)),
        small_number(),
        any::<bool>().prop_map(Value::Bool)
    ];
    (small_class(), proptest::collection::btree_map(small_attr(), value, 0..4))
        .prop_map(|(class, attrs)| {
            let mut all = vec![(name("class"), Value::str(&class))];
            all.extend(attrs);
            Publication::new(all).expect("valid")
        })
        .boxed()
}

/// A subscription and one that is likely to cover it: half the time the first with
/// predicates dropped (always covering), half the time unrelated.
fn covering_pair() -> BoxedStrategy<(Subscription, Subscription)> {
    (small_subscription(), small_subscription(), any::<bool>(), proptest::collection::vec(any::<bool>(), 4))
        .prop_map(|(b, other, derive, keep)| {
            let a = if derive {
                let kept: Vec<Predicate> = b
                    .predicates()
                    .iter()
                    .enumerate()
                    .filter(|(i, p)| p.attr() == "class" || keep.get(*i).copied().unwrap_or(true))
                    .map(|(_, p)| p.clone())
                    .collect();
                Subscription::new(kept).expect("a subset of a valid subscription")
            } else {
                other
            };
            (a, b)
        })
        .boxed()
}

#[test]
fn covers_never_claims_too_much() {
    let tested = Cell::new(0_u32);
    let strategy = (covering_pair(), proptest::collection::vec(small_publication(), 30));
    runner()
        .run(&strategy, |((a, b), publications)| {
            if covers(&a, &b) {
                for p in &publications {
                    if matches(&b, p) {
                        tested.set(tested.get() + 1);
                        prop_assert!(matches(&a, p), "covers({a}, {b}) but {p} matches only the second");
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(tested.get() > 10_000, "only {} publications tested the property", tested.get());
}

#[test]
fn overlaps_never_denies_a_real_overlap() {
    let tested = Cell::new(0_u32);
    let strategy =
        (small_subscription(), small_advertisement(), proptest::collection::vec(small_publication(), 30));
    runner()
        .run(&strategy, |(s, a, publications)| {
            for p in &publications {
                if matches(&s, p) && conforms(p, &a) {
                    tested.set(tested.get() + 1);
                    prop_assert!(overlaps(&s, &a), "{p} matches {s} and conforms to {a}, yet no overlap");
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(tested.get() > 2_000, "only {} publications tested the property", tested.get());
}

#[test]
fn adv_covers_never_claims_too_much() {
    let tested = Cell::new(0_u32);
    let pair = (small_advertisement(), small_advertisement(), any::<bool>(), small_attr()).prop_map(
        |(b, other, derive, extra)| {
            // Widening b by an extra isPresent attribute always covers it.
            let a = if derive {
                let mut predicates = b.predicates().to_vec();
                predicates
                    .push(Predicate::new(extra, Op::IsPresent, Operand::Value(Value::Int(0))).expect("ok"));
                Advertisement::new(predicates).expect("valid")
            } else {
                other
            };
            (a, b)
        },
    );
    runner()
        .run(&(pair, proptest::collection::vec(small_publication(), 30)), |((a, b), publications)| {
            if adv_covers(&a, &b) {
                for p in &publications {
                    if conforms(p, &b) {
                        tested.set(tested.get() + 1);
                        prop_assert!(
                            conforms(p, &a),
                            "adv_covers({a}, {b}) but {p} conforms only to the second"
                        );
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(tested.get() > 2_000, "only {} publications tested the property", tested.get());
}

#[test]
fn covering_is_not_trivially_false() {
    // Guards the properties above against a `covers` that always says no.
    let sub = |t: &str| t.parse::<Subscription>().expect("valid");
    assert!(covers(&sub("[class,eq,a],[x,>,100]"), &sub("[class,eq,a],[x,>,150],[y,eq,'ibm']")));
    assert!(covers(&sub("[class,eq,a],[x,str-prefix,'ib']"), &sub("[class,eq,a],[x,str-prefix,'ibm']")));
    assert!(covers(&sub("[class,eq,a],[x,<>,5]"), &sub("[class,eq,a],[x,>,5]")));
    assert!(!covers(&sub("[class,eq,a],[x,>,150]"), &sub("[class,eq,a],[x,>,100]")));
    assert!(!covers(&sub("[class,eq,b],[x,>,100]"), &sub("[class,eq,a],[x,>,150]")));
    let adv = |t: &str| t.parse::<Advertisement>().expect("valid");
    assert!(adv_covers(&adv("[class,eq,a],[x,>,0],[y,isPresent,'']"), &adv("[class,eq,a],[x,>,10]")));
    assert!(!adv_covers(&adv("[class,eq,a],[x,>,10]"), &adv("[class,eq,a],[x,>,0]")));
    assert!(!adv_covers(&adv("[class,eq,a],[x,>,0]"), &adv("[class,eq,a],[x,>,10],[y,=,1]")));
}

#[test]
fn covering_sees_repeated_variables_and_pinned_strings() {
    let sub = |t: &str| t.parse::<Subscription>().expect("valid");
    // An identical subscription with a shared variable covers itself.
    let joined = sub("[class,eq,'c'],[x,eq,$S$v],[y,eq,$S$v]");
    assert!(covers(&joined, &joined));
    assert!(covers(&joined, &sub("[class,eq,'c'],[x,eq,$S$v],[y,eq,$S$v],[z,>,1]")));
    assert!(!covers(&joined, &sub("[class,eq,'c'],[x,eq,$S$v],[y,eq,$S$w]")));
    // Equal inclusive bounds pin a string.
    assert!(covers(&sub("[class,eq,'c'],[x,eq,'a']"), &sub("[class,eq,'c'],[x,str-ge,'a'],[x,str-le,'a']")));
    let pinned_then_excluded = sub("[class,eq,'c'],[x,str-ge,'a'],[x,str-le,'a'],[x,neq,'a']");
    assert!(covers(&sub("[class,eq,'c'],[x,eq,'zzz']"), &pinned_then_excluded), "matches nothing");
    // '' is the least string.
    assert!(covers(&sub("[class,eq,'c'],[x,str-ge,'']"), &sub("[class,eq,'c'],[x,str-lt,'m']")));
    assert!(covers(&sub("[class,eq,'c'],[x,str-gt,'']"), &sub("[class,eq,'c'],[x,neq,'']")));
    assert!(covers(&sub("[class,eq,'c'],[x,str-gt,'']"), &sub("[class,eq,'c'],[x,str-postfix,'q']")));
    assert!(!covers(&sub("[class,eq,'c'],[x,str-gt,'']"), &sub("[class,eq,'c'],[x,str-lt,'q']")));
}
