//! The reference meaning of a composite subscription over a stream of publications:
//! obviously right and slow (it enumerates every way the pattern can be satisfied), the
//! oracle for every composite detector. `docs/composite.md` explains the policy with
//! examples.
//!
//! The stream is in stamp order ([`Stamp`]): "before" always means "stamped earlier".
//!
//! - An atomic part (a leaf) is satisfied by a publication it matches, its variables bound
//!   to that publication's values (or equal to values bound elsewhere in the match).
//! - `{a} & {b}`: a match of `a` and a match of `b` under one binding of the variables, in
//!   either order. One publication may serve both sides.
//! - `{a} || {b}`: a match of `a`, or a match of `b`.
//! - `{a} ; {b}`: as `&`, with every publication used for `a` stamped before every one used
//!   for `b`.
//! - `Times(S, n, attr, step)`: `n` publications matching `S` under one binding, in stamp
//!   order, each with a numeric `attr` equal to the previous one's plus `step`.
//! - `within W`: the publications of a match are stamped at most `W` ms apart.
//! - `until {F}`: a publication `e` matching `F` ends the binding it gives `F`'s variables:
//!   no match whose binding agrees with `e`'s uses publications stamped both before and after
//!   `e` (a match entirely before `e` has fired already; one entirely after is a new start).
//!
//! **Every match fires, once**: a notification fires for each distinct match (the same
//! publications for the same leaves), when its last-stamped publication arrives, carrying its
//! publications, one per leaf (`n` for `Times`). So after a pattern fires, a later
//! publication completes it again with *every* stored partial match it is compatible with,
//! as in PADRES's rule engine and in Esper's and Siddhi's `every` patterns. The set of
//! notifications depends only on the publications and their stamps, never on the order in
//! which they reached a detector: that is what lets detection happen anywhere in the
//! network and still give this answer. Detectors bound how many notifications one
//! publication may cause, and how much they store; where those bounds bite, they say so in
//! their counters (see the broker's `detector` module).

use std::collections::HashMap;

use crate::composite::{CompositeOp, CompositeSubscription, Expr};
use crate::publication::Publication;
use crate::stamp::Stamp;
use crate::subscription::Subscription;
use crate::value::{Number, Value};

use super::holds;

type Bindings<'a> = HashMap<&'a str, &'a Value>;

/// One way a part is satisfied: the variables bound, the (leaf, position) pairs used, and
/// the first and last positions used.
struct Way<'a> {
    bindings: Bindings<'a>,
    used: Vec<(usize, usize)>,
    first: usize,
    last: usize,
}

/// The bindings under which `publication` matches `sub`, extending `bindings`.
fn bind<'a>(
    sub: &'a Subscription,
    publication: &'a Publication,
    bindings: &Bindings<'a>,
) -> Option<Bindings<'a>> {
    let mut bound = bindings.clone();
    for predicate in sub.predicates() {
        let value = publication.get(predicate.attr())?;
        if !holds(predicate, value) {
            return None;
        }
        if let Some(var) = predicate.variable() {
            match bound.get(var.name.as_str()) {
                Some(earlier) if !earlier.same_as(value) => return None,
                Some(_) => {}
                None => {
                    bound.insert(var.name.as_str(), value);
                }
            }
        }
    }
    Some(bound)
}

/// The value that follows `value` in a `Times` chain with `step`: integers add exactly
/// (`None` on overflow), anything else adds as floats. Compare it with
/// [`Number::cmp_exact`].
pub fn stepped(value: &Value, step: &Value) -> Option<Number> {
    match (value.as_number()?, step.as_number()?) {
        (Number::Int(v), Number::Int(s)) => v.checked_add(s).map(Number::Int),
        (v, s) => {
            let sum = as_f64(v) + as_f64(s);
            sum.is_finite().then_some(Number::Float(sum))
        }
    }
}

fn as_f64(n: Number) -> f64 {
    match n {
        // Precision loss is the point: a mixed step adds as floats.
        #[allow(clippy::cast_precision_loss)]
        Number::Int(i) => i as f64,
        Number::Float(f) => f,
    }
}

struct Walk<'a> {
    cs: &'a CompositeSubscription,
    leaves: Vec<Option<usize>>,
    history: &'a [Publication],
}

impl<'a> Walk<'a> {
    fn ways(&self, node: usize, bindings: &Bindings<'a>) -> Vec<Way<'a>> {
        match self.cs.expr(node) {
            Expr::Leaf(sub) => {
                let leaf = self.leaves[node].expect("a leaf has a number");
                self.history
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| {
                        bind(sub, p, bindings).map(|b| Way {
                            bindings: b,
                            used: vec![(leaf, i)],
                            first: i,
                            last: i,
                        })
                    })
                    .collect()
            }
            Expr::Binary(CompositeOp::Or, left, right) => {
                let mut all = self.ways(left, bindings);
                all.extend(self.ways(right, bindings));
                all
            }
            Expr::Binary(op, left, right) => {
                let mut all = Vec::new();
                for l in self.ways(left, bindings) {
                    for r in self.ways(right, &l.bindings) {
                        if op == CompositeOp::Seq && l.last >= r.first {
                            continue;
                        }
                        let mut used = l.used.clone();
                        used.extend(r.used);
                        all.push(Way {
                            bindings: r.bindings,
                            used,
                            first: l.first.min(r.first),
                            last: l.last.max(r.last),
                        });
                    }
                }
                all
            }
            Expr::Times(sub, count, attr, step) => {
                let leaf = self.leaves[node].expect("a leaf has a number");
                let mut chains = Vec::new();
                for (i, p) in self.history.iter().enumerate() {
                    let Some(b) = bind(sub, p, bindings) else { continue };
                    if p.get(attr).and_then(Value::as_number).is_none() {
                        continue;
                    }
                    let start = Way { bindings: b, used: vec![(leaf, i)], first: i, last: i };
                    self.extend_chain(sub, count, attr, step, start, &mut chains);
                }
                chains
            }
        }
    }

    /// Every way to finish the `Times` chain `chain` (its last element at `chain.last`).
    fn extend_chain(
        &self,
        sub: &'a Subscription,
        count: u32,
        attr: &'a str,
        step: &Value,
        chain: Way<'a>,
        out: &mut Vec<Way<'a>>,
    ) {
        if chain.used.len() == count as usize {
            out.push(chain);
            return;
        }
        let previous = self.history[chain.last].get(attr).expect("chain elements have the attribute");
        let Some(wanted) = stepped(previous, step) else { return };
        for (j, p) in self.history.iter().enumerate().skip(chain.last + 1) {
            let Some(value) = p.get(attr).and_then(Value::as_number) else { continue };
            if !value.cmp_exact(wanted).is_eq() {
                continue;
            }
            let Some(b) = bind(sub, p, &chain.bindings) else { continue };
            let mut used = chain.used.clone();
            used.push((chain.used[0].0, j));
            self.extend_chain(
                sub,
                count,
                attr,
                step,
                Way { bindings: b, used, first: chain.first, last: j },
                out,
            );
        }
    }

    /// False if an `until` publication strictly between the way's first and last ends the
    /// way's binding.
    fn survives(&self, way: &Way<'a>) -> bool {
        let Some(until) = self.cs.until_filter() else { return true };
        !(way.first + 1..way.last).any(|e| {
            bind(until, &self.history[e], &Bindings::new()).is_some_and(|ended| {
                ended.iter().all(|(var, value)| way.bindings.get(var).is_some_and(|v| v.same_as(value)))
            })
        })
    }
}

/// One notification of [`detect`]: the publications a match used.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fire {
    /// `(leaf, position in the stream)` for each publication used, sorted; a `Times` leaf
    /// appears `n` times. Leaves are numbered left to right from 0
    /// ([`CompositeSubscription::leaf_numbers`]).
    pub pubs: Vec<(usize, usize)>,
}

impl Fire {
    /// The position of the publication that completed the match (the last stamped).
    pub fn completed_at(&self) -> usize {
        self.pubs.iter().map(|&(_, position)| position).max().unwrap_or(0)
    }
}

/// The notifications `cs` fires over `stream`, which must be in stamp order (distinct
/// stamps, increasing): every distinct match once, in the order they complete (ties in the
/// order of their publications).
///
/// # Panics
/// If `stream` is not in increasing stamp order.
pub fn detect(cs: &CompositeSubscription, stream: &[(Stamp, Publication)]) -> Vec<Fire> {
    assert!(stream.windows(2).all(|w| w[0].0 < w[1].0), "the stream must be in increasing stamp order");
    let history: Vec<Publication> = stream.iter().map(|(_, p)| p.clone()).collect();
    let walk = Walk { cs, leaves: cs.leaf_numbers(), history: &history };
    let mut fires: Vec<Fire> = walk
        .ways(cs.root(), &Bindings::new())
        .into_iter()
        .filter(|way| cs.window().is_none_or(|w| stream[way.last].0.time - stream[way.first].0.time <= w))
        .filter(|way| walk.survives(way))
        .map(|way| {
            let mut pubs = way.used;
            pubs.sort_unstable();
            Fire { pubs }
        })
        .collect();
    fires.sort_by(|a, b| a.completed_at().cmp(&b.completed_at()).then_with(|| a.cmp(b)));
    fires.dedup();
    fires
}

/// True if the publications of `history`, in the order given, satisfy `cs` (its `within`
/// window is not considered: the history has no stamps).
pub fn satisfied(cs: &CompositeSubscription, history: &[Publication]) -> bool {
    let walk = Walk { cs, leaves: cs.leaf_numbers(), history };
    walk.ways(cs.root(), &Bindings::new()).iter().any(|way| walk.survives(way))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::Name;

    fn history(lines: &[&str]) -> Vec<Publication> {
        lines.iter().map(|l| l.parse().expect("a publication")).collect()
    }

    /// `lines` stamped 10 ms apart on broker B.
    fn stream(lines: &[&str]) -> Vec<(Stamp, Publication)> {
        let b = Name::new("B").expect("name");
        history(lines).into_iter().zip(0u64..).map(|(p, i)| (Stamp::new(i * 10, b.clone(), i), p)).collect()
    }

    fn cs(text: &str) -> CompositeSubscription {
        text.parse().expect("a composite subscription")
    }

    fn fires(pattern: &str, lines: &[&str]) -> Vec<Vec<(usize, usize)>> {
        detect(&cs(pattern), &stream(lines)).into_iter().map(|f| f.pubs).collect()
    }

    #[test]
    fn and_or_sequence_and_variables() {
        let h = history(&["[class,'a'],[k,'x']", "[class,'b'],[k,'y']", "[class,'b'],[k,'x']"]);
        let joined = cs("{[class,eq,'a'],[k,eq,$S$v]}&{[class,eq,'b'],[k,eq,$S$v]}");
        assert!(satisfied(&joined, &h));
        assert!(!satisfied(&joined, &h[..2]), "b with k=x has not arrived");
        assert!(!satisfied(&cs("{[class,eq,'b']};{[class,eq,'a']}"), &h), "b came after a");
        assert!(satisfied(&cs("{[class,eq,'a']};{[class,eq,'b']}"), &h));
        assert!(satisfied(&cs("{[class,eq,'c']}||{[class,eq,'b'],[k,eq,'y']}"), &h));
        assert!(!satisfied(&cs("Times({[class,eq,'b']},2,k,1)"), &h), "k is not a number");
    }

    #[test]
    fn every_match_fires_once_when_its_last_publication_arrives() {
        let lines = ["[class,'a'],[n,1]", "[class,'a'],[n,2]", "[class,'b']", "[class,'b']"];
        // Two a's and two b's: four matches, two completed by each b.
        assert_eq!(
            fires("{[class,eq,'a']}&{[class,eq,'b']}", &lines),
            [vec![(0, 0), (1, 2)], vec![(0, 1), (1, 2)], vec![(0, 0), (1, 3)], vec![(0, 1), (1, 3)]]
        );
        // A sequence needs the a before the b: b;a never fires here.
        assert!(fires("{[class,eq,'b']};{[class,eq,'a']}", &lines).is_empty());
        // One publication can serve both sides of an and.
        assert_eq!(fires("{[class,eq,'b']}&{[class,eq,'b']}", &lines[2..3]), [vec![(0, 0), (1, 0)]]);
        // Or fires per leaf.
        assert_eq!(
            fires("{[class,eq,'a'],[n,=,2]}||{[class,eq,'b']}", &lines),
            [vec![(0, 1)], vec![(1, 2)], vec![(1, 3)]]
        );
    }

    #[test]
    fn times_steps_up_or_down_in_stamp_order() {
        let lines = [
            "[class,'t'],[v,1]",
            "[class,'t'],[v,3]",
            "[class,'t'],[v,2]",
            "[class,'t'],[v,3.0]",
            "[class,'t'],[v,4]",
        ];
        // 1,2,3 (the 3.0: the 3 came before the 2) and 2,3,4.
        assert_eq!(
            fires("Times({[class,eq,'t']},3,v,1)", &lines),
            [vec![(0, 0), (0, 2), (0, 3)], vec![(0, 2), (0, 3), (0, 4)]]
        );
        assert_eq!(fires("Times({[class,eq,'t']},2,v,-1)", &lines), [vec![(0, 1), (0, 2)]]);
        assert_eq!(
            fires("Times({[class,eq,'t']},2,v,0.5)", &["[class,'t'],[v,1]", "[class,'t'],[v,1.5]"]),
            [vec![(0, 0), (0, 1)]]
        );
    }

    #[test]
    fn variables_join_across_leaves_and_times() {
        let lines = [
            "[class,'t'],[s,'x'],[v,1]",
            "[class,'t'],[s,'y'],[v,2]",
            "[class,'t'],[s,'x'],[v,2]",
            "[class,'go'],[s,'y']",
            "[class,'go'],[s,'x']",
        ];
        assert_eq!(
            fires("{Times({[class,eq,'t'],[s,eq,$S$s]},2,v,1)};{[class,eq,'go'],[s,eq,$S$s]}", &lines),
            [vec![(0, 0), (0, 2), (1, 4)]]
        );
    }

    #[test]
    fn within_bounds_the_span_of_a_match() {
        // Stamps are 10 ms apart.
        let lines = ["[class,'a']", "[class,'x']", "[class,'b']"];
        assert_eq!(fires("{[class,eq,'a']}&{[class,eq,'b']} within 20ms", &lines), [vec![(0, 0), (1, 2)]]);
        assert!(fires("{[class,eq,'a']}&{[class,eq,'b']} within 19ms", &lines).is_empty());
    }

    #[test]
    fn until_ends_a_binding_between_its_publications() {
        let pattern =
            "{[class,eq,'a'],[g,eq,$S$g]}&{[class,eq,'b'],[g,eq,$S$g]} until {[class,eq,'end'],[g,eq,$S$g]}";
        let lines = [
            "[class,'a'],[g,'1']",
            "[class,'a'],[g,'2']",
            "[class,'end'],[g,'1']",
            "[class,'b'],[g,'1']",
            "[class,'b'],[g,'2']",
            "[class,'a'],[g,'1']",
        ];
        // g=1's first a is ended; its b pairs only with the a after the end. g=2 is untouched.
        assert_eq!(fires(pattern, &lines), [vec![(0, 1), (1, 4)], vec![(0, 5), (1, 3)]]);
    }

    #[test]
    #[should_panic(expected = "stamp order")]
    fn an_unordered_stream_is_refused() {
        let mut s = stream(&["[class,'a']", "[class,'b']"]);
        s.swap(0, 1);
        detect(&cs("{[class,eq,'a']}&{[class,eq,'b']}"), &s);
    }
}
