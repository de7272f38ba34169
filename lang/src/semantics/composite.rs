//! The reference meaning of a composite subscription over a history of publications:
//! obviously right and slow (it enumerates every way the pattern can be satisfied), the
//! oracle for composite detection.
//!
//! - An atomic part is satisfied by a publication it matches, its variables bound to that
//!   publication's values (or equal to values bound elsewhere in the pattern).
//! - `{a} & {b}`: both, under one binding of the variables, in any order.
//! - `{a} || {b}`: either.
//! - `{a} ; {b}`: both, every publication used for `a` before every one used for `b`.
//! - `Times(…)` is not covered yet: [`satisfied`] answers `None` for a pattern using it.

use std::collections::HashMap;

use crate::composite::{CompositeOp, CompositeSubscription, Expr};
use crate::publication::Publication;
use crate::subscription::Subscription;
use crate::value::Value;

use super::holds;

type Bindings<'a> = HashMap<&'a str, &'a Value>;

/// One way a part is satisfied: the variables bound, and the first and last positions
/// of the publications used.
type Way<'a> = (Bindings<'a>, usize, usize);

/// The bindings under which `publication` matches `sub`, extending `bindings`.
fn atom<'a>(
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

fn ways<'a>(
    cs: &'a CompositeSubscription,
    node: usize,
    history: &'a [Publication],
    bindings: &Bindings<'a>,
) -> Option<Vec<Way<'a>>> {
    Some(match cs.expr(node) {
        Expr::Leaf(sub) => history
            .iter()
            .enumerate()
            .filter_map(|(i, p)| atom(sub, p, bindings).map(|b| (b, i, i)))
            .collect(),
        Expr::Binary(CompositeOp::Or, left, right) => {
            let mut all = ways(cs, left, history, bindings)?;
            all.extend(ways(cs, right, history, bindings)?);
            all
        }
        Expr::Binary(op, left, right) => {
            let mut all = Vec::new();
            for (b, lo, hi) in ways(cs, left, history, bindings)? {
                for (b2, lo2, hi2) in ways(cs, right, history, &b)? {
                    if op == CompositeOp::Seq && hi >= lo2 {
                        continue;
                    }
                    all.push((b2, lo.min(lo2), hi.max(hi2)));
                }
            }
            all
        }
        Expr::Times(..) => return None,
    })
}

/// True if the publications of `history` (in the order they arrived) satisfy `cs`;
/// `None` if `cs` uses `Times`, which this reference does not cover yet.
pub fn satisfied(cs: &CompositeSubscription, history: &[Publication]) -> Option<bool> {
    ways(cs, cs.root(), history, &Bindings::new()).map(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(lines: &[&str]) -> Vec<Publication> {
        lines.iter().map(|l| l.parse().expect("a publication")).collect()
    }

    fn cs(text: &str) -> CompositeSubscription {
        text.parse().expect("a composite subscription")
    }

    #[test]
    fn and_or_sequence_and_variables() {
        let h = history(&["[class,'a'],[k,'x']", "[class,'b'],[k,'y']", "[class,'b'],[k,'x']"]);
        let joined = cs("{[class,eq,'a'],[k,eq,$S$v]}&{[class,eq,'b'],[k,eq,$S$v]}");
        assert_eq!(satisfied(&joined, &h), Some(true));
        assert_eq!(satisfied(&joined, &h[..2]), Some(false), "b with k=x has not arrived");
        assert_eq!(satisfied(&cs("{[class,eq,'b']};{[class,eq,'a']}"), &h), Some(false), "b came after a");
        assert_eq!(satisfied(&cs("{[class,eq,'a']};{[class,eq,'b']}"), &h), Some(true));
        assert_eq!(satisfied(&cs("{[class,eq,'c']}||{[class,eq,'b'],[k,eq,'y']}"), &h), Some(true));
        assert_eq!(satisfied(&cs("Times({[class,eq,'b']},2,k,1)"), &h), None);
    }
}
