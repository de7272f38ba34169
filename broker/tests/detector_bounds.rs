//! The composite detector's bounds: caps with evictions counted, windows that expire,
//! `until` ending a binding, the pair limit, and a long run that never completes a pattern.

use std::sync::Arc;

use padres_broker::detector::{Bounds, Counters, DetectorId, Detectors, Match, Stamped};
use padres_lang::{CompositeSubscription, Name, Publication, Stamp, Value, matches};

/// Feeds publications to detectors, stamping them `time` ms apart on broker B.
struct Feed {
    detectors: Detectors,
    seq: u64,
}

impl Feed {
    fn new(bounds: Bounds) -> Self {
        Self { detectors: Detectors::new(bounds), seq: 0 }
    }

    fn add(&mut self, text: &str) -> (DetectorId, CompositeSubscription) {
        let cs: CompositeSubscription = text.parse().expect("a composite subscription");
        (self.detectors.add(&cs), cs)
    }

    /// Publishes `text` at `time` to detector `id` of pattern `cs`; the matches completed.
    fn publish(
        &mut self,
        pattern: &(DetectorId, CompositeSubscription),
        time: u64,
        text: &str,
    ) -> Vec<Match> {
        self.publish_stamped(pattern, time, time, text)
    }

    /// As [`Self::publish`], arriving at `now` with a stamp of `time`.
    fn publish_stamped(
        &mut self,
        (id, cs): &(DetectorId, CompositeSubscription),
        now: u64,
        time: u64,
        text: &str,
    ) -> Vec<Match> {
        self.seq += 1;
        let publication: Publication = text.parse().expect("a publication");
        let stamped = Arc::new(Stamped {
            stamp: Stamp::new(time, Name::new("B").expect("name"), self.seq),
            publication: Arc::new(publication),
        });
        self.detectors.handle_timeout(now);
        let mut out = Vec::new();
        for (leaf, sub) in cs.atoms().enumerate() {
            if matches(sub, &stamped.publication) {
                self.detectors.publication(*id, leaf, &stamped, &mut out);
            }
        }
        if cs.until_filter().is_some_and(|until| matches(until, &stamped.publication)) {
            self.detectors.end(now, *id, &stamped);
        }
        out
    }

    fn counters(&self) -> Counters {
        self.detectors.counters()
    }
}

#[test]
fn a_detector_cap_evicts_the_longest_stored_and_counts_it() {
    let mut feed = Feed::new(Bounds { per_detector: 3, ..Bounds::default() });
    let p = feed.add("{[class,eq,'a'],[k,eq,$S$k]}&{[class,eq,'b'],[k,eq,$S$k]}");
    for (i, k) in ["k1", "k2", "k3", "k4"].iter().enumerate() {
        assert!(feed.publish(&p, i as u64, &format!("[class,'a'],[k,'{k}']")).is_empty());
    }
    let c = feed.counters();
    assert_eq!((c.stored, c.evicted), (3, 1));
    // k1's partial match was the oldest: evicted. k4's is there.
    assert!(feed.publish(&p, 10, "[class,'b'],[k,'k1']").is_empty());
    assert_eq!(feed.publish(&p, 11, "[class,'b'],[k,'k4']").len(), 1);
}

#[test]
fn the_broker_cap_evicts_across_detectors() {
    let mut feed = Feed::new(Bounds { per_broker: 4, ..Bounds::default() });
    let first = feed.add("{[class,eq,'a']}&{[class,eq,'b']}");
    let second = feed.add("{[class,eq,'a']};{[class,eq,'c']}");
    for t in 0..3 {
        feed.publish(&first, t, "[class,'a']");
    }
    for t in 3..6 {
        feed.publish(&second, t, "[class,'a']");
    }
    let c = feed.counters();
    assert_eq!((c.stored, c.evicted), (4, 2));
    // The first detector lost its two oldest: one a is left to pair with.
    assert_eq!(feed.publish(&first, 7, "[class,'b']").len(), 1);
    assert_eq!(feed.publish(&second, 8, "[class,'c']").len(), 3);
}

#[test]
fn partial_matches_expire_after_their_window_and_the_lateness() {
    let mut feed = Feed::new(Bounds { lateness_ms: 50, ..Bounds::default() });
    let p = feed.add("{[class,eq,'a']};{[class,eq,'b']} within 100ms");
    feed.publish(&p, 1_000, "[class,'a']");
    assert_eq!(feed.detectors.poll_timeout(), Some(1_151), "the first instant nothing can complete it");
    assert_eq!(feed.publish(&p, 1_100, "[class,'b']").len(), 1, "100 ms apart: inside the window");
    assert!(feed.publish(&p, 1_101, "[class,'b']").is_empty(), "101 ms apart: outside");
    feed.detectors.handle_timeout(1_151);
    let c = feed.counters();
    assert!(c.expired >= 1, "{c:?}");
    // The a and the stored b's went when their windows passed.
    feed.detectors.handle_timeout(1_300);
    assert_eq!(feed.counters().stored, 0);
}

#[test]
fn a_publication_exactly_the_allowed_lateness_late_still_completes() {
    // "A publication arriving later than the allowed lateness may miss": one arriving at
    // exactly the allowance is not later than it.
    let mut feed = Feed::new(Bounds { lateness_ms: 50, ..Bounds::default() });
    let p = feed.add("{[class,eq,'a']};{[class,eq,'b']} within 100ms");
    feed.publish(&p, 1_000, "[class,'a']");
    assert_eq!(
        feed.publish_stamped(&p, 1_150, 1_100, "[class,'b']").len(),
        1,
        "window and lateness both at their edge"
    );
    feed.detectors.handle_timeout(1_151);
    assert!(feed.publish_stamped(&p, 1_151, 1_100, "[class,'b']").is_empty(), "one ms later: gone");
    let mut feed = Feed::new(Bounds { lateness_ms: 0, ..Bounds::default() });
    let p = feed.add("{[class,eq,'a']}&{[class,eq,'b']} within 10ms");
    feed.publish(&p, 0, "[class,'a']");
    assert_eq!(
        feed.publish(&p, 10, "[class,'b']").len(),
        1,
        "10 ms apart is within 10ms, as the reference says"
    );

    let mut feed = Feed::new(Bounds { lateness_ms: 100, ..Bounds::default() });
    let p = feed.add(
        "{[class,eq,'a'],[k,eq,$S$k]};{[class,eq,'b'],[k,eq,$S$k]} until {[class,eq,'end'],[k,eq,$S$k]}",
    );
    assert!(feed.publish(&p, 10, "[class,'a'],[k,'x']").is_empty());
    assert!(feed.publish(&p, 30, "[class,'end'],[k,'x']").is_empty());
    assert_eq!(
        feed.publish_stamped(&p, 130, 20, "[class,'b'],[k,'x']").len(),
        1,
        "the end is remembered through 130"
    );
}

#[test]
fn a_generation_end_leaves_no_partial_match_behind() {
    // A workflow job's dependency: the trigger of a generation and job A's success.
    let mut feed = Feed::new(Bounds::default());
    let p = feed.add(
        "{[class,eq,'trigger'],[appl,eq,'w'],[gid,eq,$S$g]}&{[class,eq,'job_status'],[appl,eq,'w'],[gid,eq,$S$g],[job,eq,'A'],[status,eq,'SUCCESS']} \
         until {[class,eq,'job_status'],[appl,eq,'w'],[gid,eq,$S$g],[job,eq,'APPL_END']}",
    );
    let mut fired = 0;
    for g in 0..100 {
        fired += feed.publish(&p, 3 * g, &format!("[class,'trigger'],[appl,'w'],[gid,'g{g}']")).len();
        fired += feed
            .publish(
                &p,
                3 * g + 1,
                &format!("[class,'job_status'],[appl,'w'],[gid,'g{g}'],[job,'A'],[status,'SUCCESS']"),
            )
            .len();
        fired += feed
            .publish(&p, 3 * g + 2, &format!("[class,'job_status'],[appl,'w'],[gid,'g{g}'],[job,'APPL_END']"))
            .len();
    }
    assert_eq!(fired, 100);
    // The ends are remembered for the lateness allowance, then what they ended is dropped.
    let lateness = Bounds::default().lateness_ms;
    assert_eq!(feed.detectors.poll_timeout(), Some(3 + lateness), "the first end's");
    feed.detectors.handle_timeout(300 + lateness);
    let c = feed.counters();
    assert_eq!((c.stored, c.ended), (0, 200), "{c:?}");
    assert_eq!(c.stored_bytes, 0, "every byte counted in is counted out");
    assert_eq!(feed.detectors.poll_timeout(), None);
}

#[test]
fn the_broker_byte_cap_bounds_what_large_publications_hold() {
    // 100 partial matches may be stored, but 10 of these hold 10 KB each: the byte cap
    // keeps the broker near 32 KB, evicting the longest stored.
    let cap = 32_000;
    let mut feed = Feed::new(Bounds { per_broker: 100, max_bytes: cap, ..Bounds::default() });
    let p = feed.add("{[class,eq,'a'],[k,eq,$S$k]}&{[class,eq,'b'],[k,eq,$S$k]}");
    let (id, cs) = &p;
    for i in 0..50_u64 {
        feed.seq += 1;
        let publication: Publication = format!("[class,'a'],[k,'k{i}']").parse().expect("valid");
        let stamped = Arc::new(Stamped {
            stamp: Stamp::new(i, Name::new("B").expect("name"), feed.seq),
            publication: Arc::new(publication.with_payload(vec![0_u8; 10_000])),
        });
        assert!(matches(cs.atoms().next().expect("a leaf"), &stamped.publication));
        feed.detectors.publication(*id, 0, &stamped, &mut Vec::new());
        let c = feed.counters();
        assert!(c.stored_bytes <= cap, "{c:?}");
    }
    let c = feed.counters();
    assert_eq!((c.stored, c.evicted), (3, 47), "{c:?}");
    // The newest are kept: k49 still pairs, k0 does not.
    assert_eq!(feed.publish(&p, 60, "[class,'b'],[k,'k49']").len(), 1);
    assert!(feed.publish(&p, 61, "[class,'b'],[k,'k0']").is_empty());
}

#[test]
fn a_partial_match_before_an_end_still_pairs_with_a_late_publication_before_it() {
    let mut feed = Feed::new(Bounds { lateness_ms: 100, ..Bounds::default() });
    let p = feed.add(
        "{[class,eq,'a'],[k,eq,$S$k]};{[class,eq,'b'],[k,eq,$S$k]} until {[class,eq,'end'],[k,eq,$S$k]}",
    );
    assert!(feed.publish(&p, 10, "[class,'a'],[k,'x']").is_empty());
    assert!(feed.publish(&p, 30, "[class,'end'],[k,'x']").is_empty());
    // A b stamped at 20 (before the end) arrives after it: the reference pairs it with a.
    assert_eq!(feed.publish_stamped(&p, 35, 20, "[class,'b'],[k,'x']").len(), 1);
    // A b stamped after the end does not: the match would straddle it.
    assert!(feed.publish(&p, 40, "[class,'b'],[k,'x']").is_empty());
    // Once the end is forgotten, what began before it is gone, and the binding starts anew.
    feed.detectors.handle_timeout(131);
    assert_eq!(feed.counters().stored, 1, "the b stamped at 40 is kept; a and the late b are not");
    assert_eq!(feed.counters().ended, 2);
    assert!(feed.publish(&p, 140, "[class,'b'],[k,'x']").is_empty(), "a is gone");
    assert!(feed.publish(&p, 150, "[class,'a'],[k,'x']").is_empty());
    assert_eq!(feed.publish(&p, 160, "[class,'b'],[k,'x']").len(), 1);
}

#[test]
fn times_keeps_the_most_recent_chains_and_counts_what_it_drops() {
    let mut feed = Feed::new(Bounds { pairs_per_input: 3, ..Bounds::default() });
    // Step 0: every earlier publication with the same value extends a chain.
    let p = feed.add("Times({[class,eq,'t'],[v,isPresent,0]},3,v,0)");
    let mut last = Vec::new();
    for t in 0..10 {
        last = feed.publish(&p, t, &format!("[class,'t'],[v,5],[n,{t}]"));
    }
    let chains: Vec<Vec<String>> = last
        .iter()
        .map(|m| m.pubs.iter().map(|(_, p)| p.publication.get("n").expect("n").to_string()).collect())
        .collect();
    assert_eq!(chains, [["7", "8", "9"], ["6", "8", "9"], ["5", "8", "9"]], "nearest first");
    assert!(feed.counters().pairs_dropped > 0);
}

#[test]
fn a_long_repetition_of_equal_values_is_searched_within_a_bound() {
    // C(1499, 999) chains end at the last publication; the search examines a bounded number
    // of candidates per input instead of enumerating them.
    let mut feed = Feed::new(Bounds::default());
    let p = feed.add("Times({[class,eq,'t'],[v,isPresent,0]},1000,v,0)");
    let mut fired = 0;
    for t in 0..1_500 {
        fired += feed.publish(&p, t, "[class,'t'],[v,5]").len();
    }
    assert!(fired > 0);
    assert!(feed.counters().pairs_dropped > 0, "cut searches are counted");
}

#[test]
fn one_input_forms_at_most_the_pair_limit_at_a_node() {
    let mut feed = Feed::new(Bounds { pairs_per_input: 5, ..Bounds::default() });
    let p = feed.add("{[class,eq,'a'],[n,isPresent,0]}&{[class,eq,'b']}");
    for n in 0..8 {
        feed.publish(&p, n, &format!("[class,'a'],[n,{n}]"));
    }
    let out = feed.publish(&p, 10, "[class,'b']");
    // The five most recently stored a's.
    let ns: Vec<String> =
        out.iter().map(|m| m.pubs[0].1.publication.get("n").expect("n").to_string()).collect();
    assert_eq!(ns, ["7", "6", "5", "4", "3"]);
    assert_eq!(feed.counters().pairs_dropped, 3);
}

#[test]
fn unfinished_patterns_stay_under_the_caps_over_five_million_publications() {
    // Every publication starts a partial match of its own binding and none completes:
    // the worst case for state. The broker cap is below the sum of the detector caps.
    let bounds = Bounds { per_detector: 20_000, per_broker: 50_000, ..Bounds::default() };
    let mut detectors = Detectors::new(bounds);
    let cs: CompositeSubscription =
        "{[class,eq,'start'],[k,=,$I$k]};{[class,eq,'finish'],[k,=,$I$k]}".parse().expect("pattern");
    let ids: Vec<DetectorId> = (0..4).map(|_| detectors.add(&cs)).collect();
    let origin = Name::new("B").expect("name");
    let (class, k, start) =
        (Name::new("class").expect("name"), Name::new("k").expect("name"), Value::str("start"));
    let mut out = Vec::new();
    let mut peak = 0;
    for i in 0..5_000_000_u64 {
        let attrs = vec![(class.clone(), start.clone()), (k.clone(), Value::Int(i as i64))];
        let publication = Publication::new(attrs).expect("publication");
        let stamped = Arc::new(Stamped {
            stamp: Stamp::new(i / 1000, origin.clone(), i),
            publication: Arc::new(publication),
        });
        detectors.publication(ids[(i % 4) as usize], 0, &stamped, &mut out);
        if i % 1000 == 0 {
            peak = peak.max(detectors.counters().stored);
        }
    }
    let c = detectors.counters();
    assert!(out.is_empty());
    assert!(peak <= 50_000 && c.stored <= 50_000, "{c:?}, peak {peak}");
    assert_eq!(c.evicted, 5_000_000 - c.stored, "every partial match not stored was evicted and counted");
}

#[test]
fn an_end_drops_what_began_before_it_whatever_the_stores_are_keyed_by() {
    let lateness = 100;
    let mut feed = Feed::new(Bounds { lateness_ms: lateness, ..Bounds::default() });
    // Joined on k, ended by g: the join's store is scanned for g's partial matches.
    let joined = feed.add(
        "{[class,eq,'a'],[k,eq,$S$k],[g,eq,$S$g]}&{[class,eq,'b'],[k,eq,$S$k]} until {[class,eq,'end'],[g,eq,$S$g]}",
    );
    feed.publish(&joined, 10, "[class,'a'],[k,'1'],[g,'x']");
    feed.publish(&joined, 11, "[class,'a'],[k,'1'],[g,'y']");
    feed.publish(&joined, 12, "[class,'b'],[k,'2']");
    feed.publish(&joined, 20, "[class,'end'],[g,'x']");
    // A Times keyed by g, the filter's variable: its store is looked up by key.
    let times = feed.add("Times({[class,eq,'t'],[g,eq,$S$g]},3,v,1) until {[class,eq,'end'],[g,eq,$S$g]}");
    feed.publish(&times, 30, "[class,'t'],[g,'x'],[v,1]");
    feed.publish(&times, 31, "[class,'t'],[g,'x'],[v,2]");
    feed.publish(&times, 32, "[class,'t'],[g,'y'],[v,1]");
    feed.publish(&times, 40, "[class,'end'],[g,'x']");
    assert_eq!(feed.counters().stored, 6);
    feed.detectors.handle_timeout(41 + lateness);
    let c = feed.counters();
    // Gone: a of x, and the two t's of x. Kept: a of y, b (binds no g), t of y.
    assert_eq!((c.stored, c.ended), (3, 3), "{c:?}");
    assert_eq!(feed.publish(&joined, 50, "[class,'b'],[k,'1']").len(), 1, "only y's a is left to pair");
    assert!(feed.publish(&times, 51, "[class,'t'],[g,'x'],[v,3]").is_empty(), "x's chain is gone");
}

#[test]
fn a_repeated_stamp_does_not_stand_in_for_the_publication_that_carries_it() {
    // A neighbour that repeats a stamp: the second publication must be walked from its own
    // value, not from the first one's.
    let mut detectors = Detectors::new(Bounds::default());
    let cs: CompositeSubscription = "Times({[class,eq,'t']},2,v,1)".parse().expect("pattern");
    let id = detectors.add(&cs);
    let at = |time: u64, seq: u64, text: &str| {
        let publication: Publication = text.parse().expect("publication");
        Arc::new(Stamped {
            stamp: Stamp::new(time, Name::new("B").expect("name"), seq),
            publication: Arc::new(publication),
        })
    };
    let mut out = Vec::new();
    detectors.publication(id, 0, &at(10, 1, "[class,'t'],[v,1]"), &mut out);
    detectors.publication(id, 0, &at(20, 2, "[class,'t'],[v,2]"), &mut out);
    assert_eq!(out.len(), 1, "1 then 2");
    out.clear();
    detectors.publication(id, 0, &at(10, 1, "[class,'t'],[v,7]"), &mut out);
    assert!(out.is_empty(), "7 is not followed by 2: {out:?}");
}
