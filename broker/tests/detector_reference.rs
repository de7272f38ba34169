//! The broker's composite detector against the reference detection stream
//! (`padres_lang::semantics::composite::detect`): random patterns (`&`, `||`, `;`, `Times`,
//! nesting, `$S$`/`$I$` variables, `within`, `until`) over random stamped streams, fed to
//! the detector in a random arrival order (an `until` publication before anything stamped
//! after it). The matches must be exactly the reference's.
//!
//! A second test delivers each publication within a lateness allowance of its stamp, so
//! that windows expire and `until` ends are forgotten (their bindings' partial matches
//! dropped) during the run: the answer must still be the reference's.
//!
//! A failure names its seed; `DETECT_SEED=n cargo test -p padres-broker --test
//! detector_reference` replays it, and `DETECT_SEEDS=A..B` runs a longer range.

mod patterns;
mod seeds;

use std::collections::HashMap;
use std::sync::Arc;

use padres_broker::detector::{Detectors, Stamped};
use padres_lang::semantics::composite::detect;
use padres_lang::{CompositeSubscription, Name, Publication, Stamp, matches};
use patterns::Rng;

fn random_publication(rng: &mut Rng) -> Publication {
    let class = rng.pick(&["a", "b", "c", "a", "b", "end"]);
    format!("[class,'{class}']{}", patterns::attributes(rng)).parse().expect("a publication")
}

/// How publications reach the detector.
#[derive(Clone, Copy, Debug)]
enum Arrival {
    /// In any order (an `until` publication before anything stamped after it), with a
    /// lateness allowance longer than the run: nothing expires or is forgotten.
    AnyOrder,
    /// Each publication at most `lateness - 1` ms after its stamp (an `until` one at its
    /// stamp), arriving at that time by the detector's clock, with that allowance: windows
    /// expire and ends are forgotten during the run, and the answer must not change.
    WithinLateness(u64),
}

/// Which patterns a run draws.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// [`patterns::pattern`]: any operator, up to four leaves.
    Any,
    /// An `&` of two to five leaves on `$S$k`, nested at random, sometimes beside an
    /// operand that binds another variable or none (a workflow job's dependencies): the
    /// detector compiles such a chain into one node.
    Chain,
}

/// `&` of `leaves` leaves on `$S$k`, split at random.
fn chain(rng: &mut Rng, leaves: u64) -> String {
    if leaves == 1 {
        return format!("{{[class,eq,'{}'],[k,eq,$S$k]}}", rng.pick(&patterns::CLASSES));
    }
    let left = 1 + rng.below(leaves - 1);
    format!("{{{}&{}}}", chain(rng, left), chain(rng, leaves - left))
}

/// One run; returns an error message on a difference.
fn run(seed: u64, mode: Arrival) -> Result<(), String> {
    run_shape(seed, mode, Shape::Any)
}

fn run_shape(seed: u64, mode: Arrival, shape: Shape) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let mut leaves = 0;
    let mut text = match shape {
        Shape::Any => patterns::pattern(&mut rng, 3, &mut leaves),
        Shape::Chain => {
            let leaves = 2 + rng.below(4);
            let chain = chain(&mut rng, leaves);
            match rng.below(4) {
                0 => format!("{{{chain}&{{[class,eq,'c'],[n,=,$I$n]}}}}"),
                1 => format!("{{{{[class,eq,'a']}};{chain}}}"),
                _ => chain,
            }
        }
    };
    if rng.below(3) == 0 {
        text += &format!(" within {}ms", 10 + rng.below(60));
    }
    let with_until = rng.below(3) == 0;
    if with_until {
        text += " until {[class,eq,'end'],[k,eq,$S$k]}";
    }
    let cs: CompositeSubscription = match text.parse() {
        Ok(cs) => cs,
        // An until filter naming a variable the pattern does not bind.
        Err(_) if with_until => text.split(" until").next().expect("text").parse().expect("the pattern"),
        Err(e) => panic!("seed {seed}: {text}: {e}"),
    };
    let origin = |i: u64| Name::new(if i.is_multiple_of(2) { "B1" } else { "B2" }).expect("name");
    let mut time = 1_000;
    let stream: Vec<(Stamp, Publication)> = (0..6 + rng.below(9))
        .map(|i| {
            time += rng.below(15);
            (Stamp::new(time, origin(i), i), random_publication(&mut rng))
        })
        .collect();
    let mut stream = stream;
    stream.sort_by(|a, b| a.0.cmp(&b.0));

    let expected: Vec<Vec<(usize, usize)>> = detect(&cs, &stream).into_iter().map(|f| f.pubs).collect();
    if expected.len() > 20_000 {
        return Ok(()); // too many to enumerate quickly; another seed covers the shape
    }

    // Arrival order: any order, except that an `until` publication arrives before every
    // publication stamped after it (a match it ends must not have fired already; what is
    // stamped before it may arrive later and still pair).
    let ends: Vec<usize> = (0..stream.len())
        .filter(|&i| cs.until_filter().is_some_and(|until| matches(until, &stream[i].1)))
        .collect();
    // (position, arrival time by the detector's clock)
    let (arrival, lateness): (Vec<(usize, u64)>, u64) = match mode {
        Arrival::AnyOrder => {
            let mut shuffled: Vec<usize> = (0..stream.len()).collect();
            rng.0.shuffle(&mut shuffled);
            let mut arrival: Vec<usize> = Vec::with_capacity(stream.len());
            while arrival.len() < stream.len() {
                let ready =
                    |i: usize, arrival: &[usize]| ends.iter().all(|&e| e >= i || arrival.contains(&e));
                let next = *shuffled
                    .iter()
                    .find(|&&i| !arrival.contains(&i) && ready(i, &arrival))
                    .expect("the earliest end not yet arrived is always ready");
                arrival.push(next);
            }
            // The clock: the latest stamp seen.
            let mut now = 0;
            let timed = arrival.into_iter().map(|i| {
                now = u64::max(now, stream[i].0.time);
                (i, now)
            });
            (timed.collect(), 1_000_000)
        }
        Arrival::WithinLateness(lateness) => {
            let mut timed: Vec<(usize, u64)> = (0..stream.len())
                .map(|i| {
                    let delay = if ends.contains(&i) { 0 } else { rng.below(lateness) };
                    (i, stream[i].0.time + delay)
                })
                .collect();
            timed.sort_by_key(|&(i, at)| (at, i));
            (timed, lateness)
        }
    };
    let mut detectors = Detectors::new(patterns::uncapped(lateness));
    let id = detectors.add(&cs);
    let subs: Vec<_> = cs.atoms().collect();
    let position: HashMap<Stamp, usize> =
        stream.iter().enumerate().map(|(i, (s, _))| (s.clone(), i)).collect();
    let mut got = Vec::new();
    for &(i, now) in &arrival {
        let (stamp, publication) = &stream[i];
        detectors.handle_timeout(now);
        let stamped = Arc::new(Stamped { stamp: stamp.clone(), publication: Arc::new(publication.clone()) });
        let mut out = Vec::new();
        for (leaf, sub) in subs.iter().enumerate() {
            if matches(sub, publication) {
                detectors.publication(id, leaf, &stamped, &mut out);
            }
        }
        if cs.until_filter().is_some_and(|until| matches(until, publication)) {
            detectors.end(now, id, &stamped);
        }
        for m in out {
            let mut pubs: Vec<(usize, usize)> =
                m.pubs.iter().map(|(leaf, p)| (*leaf as usize, position[&p.stamp])).collect();
            pubs.sort_unstable();
            got.push(pubs);
        }
    }
    let counters = detectors.counters();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    if got_sorted != expected_sorted {
        let lines: Vec<String> =
            stream.iter().enumerate().map(|(i, (s, p))| format!("  {i}: {s} {p}")).collect();
        return Err(format!(
            "seed {seed}: {cs}\nstream:\n{}\narrival {arrival:?}\nexpected {expected_sorted:?}\ngot      {got_sorted:?}\n{counters:?}",
            lines.join("\n")
        ));
    }
    if std::env::var_os("DETECT_STATS").is_some() {
        eprintln!(
            "seed {seed}: {} fires, until {}, within {:?}: {cs}",
            expected.len(),
            cs.until_filter().is_some(),
            cs.window()
        );
    }
    if counters.evicted + counters.pairs_dropped > 0 {
        return Err(format!("seed {seed}: a bound bit: {counters:?}"));
    }
    Ok(())
}

#[test]
fn the_detector_gives_the_reference_answer_in_any_arrival_order() {
    let seeds = seeds::seeds("DETECT_SEED", "DETECT_SEEDS", 3_000);
    let failures: Vec<String> =
        seeds.into_iter().filter_map(|seed| run(seed, Arrival::AnyOrder).err()).take(3).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn chains_of_and_on_one_binding_give_the_reference_answer() {
    let seeds = seeds::seeds("DETECT_SEED", "DETECT_SEEDS", 1_500);
    let failures: Vec<String> = seeds
        .into_iter()
        .filter_map(|seed| {
            let mode = if seed % 2 == 0 { Arrival::AnyOrder } else { Arrival::WithinLateness(1 + seed % 97) };
            run_shape(seed, mode, Shape::Chain).err()
        })
        .take(3)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_detector_gives_the_reference_answer_when_windows_expire_and_ends_are_forgotten() {
    let seeds = seeds::seeds("DETECT_SEED", "DETECT_SEEDS", 3_000);
    // Lateness from a few ms (most things expire or are forgotten during a run) to more
    // than a run's span.
    let failures: Vec<String> = seeds
        .into_iter()
        .filter_map(|seed| run(seed, Arrival::WithinLateness(1 + seed % 97)).err())
        .take(3)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
