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
        (id, cs): &(DetectorId, CompositeSubscription),
        time: u64,
        text: &str,
    ) -> Vec<Match> {
        self.seq += 1;
        let publication: Publication = text.parse().expect("a publication");
        let stamped = Arc::new(Stamped {
            stamp: Stamp::new(time, Name::new("B").expect("name"), self.seq),
            publication: Arc::new(publication),
        });
        self.detectors.handle_timeout(time);
        let mut out = Vec::new();
        for (leaf, sub) in cs.atoms().enumerate() {
            if matches(sub, &stamped.publication) {
                self.detectors.publication(time, *id, leaf, &stamped, &mut out);
            }
        }
        if cs.until_filter().is_some_and(|until| matches(until, &stamped.publication)) {
            self.detectors.end(time, *id, &stamped);
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
    assert_eq!(feed.detectors.poll_timeout(), Some(1_150));
    assert_eq!(feed.publish(&p, 1_100, "[class,'b']").len(), 1, "100 ms apart: inside the window");
    assert!(feed.publish(&p, 1_101, "[class,'b']").is_empty(), "101 ms apart: outside");
    feed.detectors.handle_timeout(1_150);
    let c = feed.counters();
    assert!(c.expired >= 1, "{c:?}");
    // The a and the stored b's went when their windows passed.
    feed.detectors.handle_timeout(1_300);
    assert_eq!(feed.counters().stored, 0);
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
    let c = feed.counters();
    assert_eq!((c.stored, c.ended), (0, 200), "{c:?}");
    // A late success of an ended generation pairs with nothing.
    assert!(
        feed.publish(&p, 301, "[class,'job_status'],[appl,'w'],[gid,'g7'],[job,'A'],[status,'SUCCESS']")
            .is_empty()
    );
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
        detectors.publication(i / 1000, ids[(i % 4) as usize], 0, &stamped, &mut out);
        if i % 1000 == 0 {
            peak = peak.max(detectors.counters().stored);
        }
    }
    let c = detectors.counters();
    assert!(out.is_empty());
    assert!(peak <= 50_000 && c.stored <= 50_000, "{c:?}, peak {peak}");
    assert_eq!(c.evicted, 5_000_000 - c.stored, "every partial match not stored was evicted and counted");
}
