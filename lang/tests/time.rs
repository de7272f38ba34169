//! The reserved `time` attribute: what publications, subscriptions and advertisements may
//! say about it, relative times, and how conformance and overlap treat it.

use padres_lang::{
    Advertisement, InvalidMessage, ParseErrorKind, Parser, Publication, Subscription, Timestamp, conforms,
    overlaps,
};

fn at(text: &str) -> Timestamp {
    Timestamp::parse_rfc3339(text).expect("a timestamp")
}

#[test]
fn a_publication_time_must_be_a_timestamp() {
    let ok: Publication = "[class,'a'],[time,2026-11-20T10:00:00Z]".parse().expect("a timestamp");
    assert_eq!(ok.time(), Some(at("2026-11-20T10:00:00Z")));
    for bad in ["[class,'a'],[time,5]", "[class,'a'],[time,'yesterday']", "[class,'a'],[time,true]"] {
        let err = bad.parse::<Publication>().expect_err(bad);
        assert!(
            matches!(err.kind, ParseErrorKind::Invalid(InvalidMessage::TimeAttribute(_))),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("'time' must be a timestamp"), "{err}");
    }
}

#[test]
fn with_time_keeps_a_time_the_publisher_gave() {
    let plain: Publication = "[class,'a'],[x,1]".parse().expect("valid");
    let stamped = plain.with_time(at("2026-11-20T10:00:00Z"));
    assert_eq!(stamped.time(), Some(at("2026-11-20T10:00:00Z")));
    assert_eq!(stamped.attrs().len(), 3);
    let own: Publication = "[class,'a'],[time,2020-01-01T00:00:00Z]".parse().expect("valid");
    assert_eq!(own.with_time(at("2026-11-20T10:00:00Z")).time(), Some(at("2020-01-01T00:00:00Z")));
}

#[test]
fn predicates_on_time_compare_timestamps() {
    for ok in [
        "[class,eq,'a'],[time,>=,2026-11-20T10:00:00Z]",
        "[class,eq,'a'],[time,<,1763632800000]",
        "[class,eq,'a'],[time,isPresent,'']",
        "[class,eq,'a'],[time,=,$I$t]",
    ] {
        ok.parse::<Subscription>().expect(ok);
    }
    for bad in [
        "[class,eq,'a'],[time,eq,'2026-11-20']",
        "[class,eq,'a'],[time,str-prefix,'2026']",
        "[class,eq,'a'],[time,eq,$S$t]",
        "[class,eq,'a'],[time,=,true]",
    ] {
        let err = bad.parse::<Subscription>().expect_err(bad);
        assert!(
            err.to_string().contains("reserved attribute 'time' must compare timestamps"),
            "{bad}: {err}"
        );
    }
    let err = "[class,eq,'a'],[time,eq,'x']".parse::<Advertisement>().expect_err("a string time");
    assert!(matches!(err.kind, ParseErrorKind::Invalid(InvalidMessage::TimePredicate(_))), "{err}");
}

#[test]
fn relative_times_are_resolved_when_issued_and_print_absolute() {
    let text = "[class,eq,'a'],[time,>=,'now-1h'],[time,<,now+30m]";
    let err = text.parse::<Subscription>().expect_err("no clock");
    assert!(
        matches!(&err.kind, ParseErrorKind::Invalid(InvalidMessage::RelativeTime(t)) if t == "now-1h"),
        "{err}"
    );
    let now = at("2026-11-20T10:00:00Z");
    let sub = Parser::default().at(now).subscription(text).expect("resolved");
    assert_eq!(
        sub.to_string(),
        "[class,eq,'a'],[time,>=,2026-11-20T09:00:00.000Z],[time,<,2026-11-20T10:30:00.000Z]"
    );
    assert_eq!(sub.to_string().parse::<Subscription>(), Ok(sub));
    // Only under a numeric comparison: elsewhere 'now' is a string like any other.
    let word = Parser::default().at(now).subscription("[class,eq,'a'],[status,eq,'now']").expect("a string");
    assert_eq!(word.to_string(), "[class,eq,'a'],[status,eq,'now']");
    let composite = Parser::default()
        .at(now)
        .composite("{[class,eq,'a'],[time,>,'now-1d']} & {[class,eq,'b']}")
        .expect("resolved in a composite too");
    assert!(composite.to_string().contains("2026-11-19T10:00:00.000Z"), "{composite}");
}

#[test]
fn a_malformed_relative_time_or_a_quoted_timestamp_says_what_is_wrong_with_the_time() {
    let now = at("2026-11-20T10:00:00Z");
    for bad in ["'now-90min'", "'now-1 h'", "'now+'", "'nowish'", "now-90min"] {
        let text = format!("[class,eq,'a'],[time,>=,{bad}]");
        for parsed in [text.parse::<Subscription>(), Parser::default().at(now).subscription(&text)] {
            let err = parsed.expect_err(&text);
            assert!(
                matches!(&err.kind, ParseErrorKind::Invalid(InvalidMessage::BadRelativeTime(_))),
                "{text}: {err}"
            );
            assert!(err.to_string().contains("invalid relative time"), "{err}");
            assert!(err.to_string().contains("'now-90m'"), "the message shows the form: {err}");
        }
    }
    let text = "[class,eq,'a'],[time,>=,'2026-11-20T10:00:00Z']";
    let err = text.parse::<Subscription>().expect_err("a quoted timestamp");
    assert!(matches!(&err.kind, ParseErrorKind::Invalid(InvalidMessage::QuotedTimestamp(_))), "{err}");
    assert!(err.to_string().contains("without quotes"), "{err}");
    // A string that is neither keeps the general message.
    let err = "[class,eq,'a'],[price,>,'cheap']".parse::<Subscription>().expect_err("a string");
    assert!(err.to_string().contains("compares numbers"), "{err}");
}

#[test]
fn every_advertisement_advertises_time() {
    let adv: Advertisement = "[class,eq,'a'],[x,>,0]".parse().expect("valid");
    let p: Publication = "[class,'a'],[x,1],[time,2026-11-20T10:00:00Z]".parse().expect("valid");
    assert!(conforms(&p, &adv));
    let bounded: Advertisement =
        "[class,eq,'a'],[x,>,0],[time,>=,2026-11-21T00:00:00Z]".parse().expect("valid");
    assert!(!conforms(&p, &bounded), "the advertisement's own bound on time applies");

    let since: Subscription = "[class,eq,'a'],[time,>=,2026-11-20T00:00:00Z]".parse().expect("valid");
    assert!(overlaps(&since, &adv));
    let before: Subscription = "[class,eq,'a'],[time,<,2026-11-20T00:00:00Z]".parse().expect("valid");
    assert!(overlaps(&before, &adv));
    assert!(
        !overlaps(&before, &bounded),
        "nothing before the 20th conforms to an advertisement from the 21st"
    );
    let empty: Subscription =
        "[class,eq,'a'],[time,>,2026-11-21T00:00:00Z],[time,<,2026-11-20T00:00:00Z]".parse().expect("valid");
    assert!(!overlaps(&empty, &adv), "an empty time range overlaps nothing");
}

#[test]
fn filters_intersect_when_one_publication_could_match_both() {
    use padres_lang::intersects;
    let sub = |t: &str| t.parse::<Subscription>().expect(t);
    let store = sub("[class,eq,'log'],[level,eq,'error']");
    assert!(intersects(&sub("[class,eq,'log'],[n,>,5]"), &store), "attributes one side leaves free");
    assert!(intersects(&sub("[class,eq,'log'],[level,str-prefix,'err']"), &store));
    assert!(!intersects(&sub("[class,eq,'log'],[level,eq,'info']"), &store));
    assert!(!intersects(&sub("[class,eq,'metric']"), &store), "another class");
    assert!(intersects(&sub("[class,eq,'log'],[level,eq,$S$l]"), &store), "a variable takes any string");
    assert!(!intersects(&sub("[class,eq,'log'],[level,>,3]"), &store), "a number is never a string");
}

#[test]
fn a_publication_decoded_from_a_frame_has_room_for_its_time() {
    use std::sync::Arc;

    use padres_lang::wire::codec::DEFAULT_MAX_FRAME;
    use padres_lang::wire::{self, Frame};

    // Three attributes, and more than the decoder reserves ahead of reading (16).
    for n in [2, 30] {
        let attrs: Vec<String> = (0..n).map(|i| format!("[a{i},{i}]")).collect();
        let publication: Publication = format!("[class,'a'],{}", attrs.join(",")).parse().expect("valid");
        let mut bytes = Vec::new();
        let frame = Frame::Publish { publication: Arc::new(publication.clone()) };
        wire::encode(&frame, DEFAULT_MAX_FRAME, &mut bytes).expect("encodes");
        let Ok((Frame::Publish { publication: decoded }, _)) = wire::decode(&bytes, DEFAULT_MAX_FRAME) else {
            panic!("a publication frame");
        };
        let decoded = Arc::unwrap_or_clone(decoded);
        assert_eq!(decoded, publication);
        let before = decoded.attrs().as_ptr();
        let stamped = decoded.with_time(at("2026-11-20T10:00:00Z"));
        assert_eq!(stamped.attrs().len(), n + 2);
        // The broker adds `time` to every publication it is sent: in place, not by
        // copying the attributes to a larger allocation.
        assert_eq!(stamped.attrs().as_ptr(), before, "{n} attributes: the time moved them");
    }
}
