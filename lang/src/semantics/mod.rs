//! Reference semantics: what a match, a conformance, an overlap and a cover *are*.
//!
//! These functions are written to be obviously right rather than fast; every optimized
//! index is tested against them.
//!
//! - [`matches`](fn@matches): a publication matches a subscription when every predicate holds on the
//!   publication's value of its attribute (the attribute must be present), and each
//!   variable used more than once sees equal values.
//! - [`conforms`]: a publication conforms to an advertisement when every attribute it
//!   carries is advertised and its value satisfies all the advertisement's predicates on
//!   that attribute. Advertised attributes may be left out (they are what *may* appear).
//!   Every advertisement advertises the reserved `time` attribute ([`crate::time`]),
//!   with any timestamp unless it bounds `time` itself.
//! - [`intersects`]: some publication could match both subscriptions ("yes" when unsure).
//! - [`overlaps`]: some publication could both match the subscription and conform to the
//!   advertisement. When unsure this answers **yes**: a wrong "no" would stop a
//!   subscription from reaching a publisher and lose publications.
//! - [`composite::detect`]: the notifications a composite subscription fires over a stream of
//!   stamped publications; [`composite::satisfied`]: whether a history satisfies a composite
//!   subscription (AND, OR, sequence, with variables).
//! - [`covers`] / [`adv_covers`]: everything the second selects, the first selects too.
//!   When unsure this answers **no**: a wrong "yes" would suppress a subscription that is
//!   needed.
//!
//! Operators are strictly typed: a predicate holds only on a value of its own kind (a
//! string operator never holds on a number, not even `neq`), except `isPresent`, which holds
//! on any value. Numbers compare exactly across integers, floats and timestamps.

pub mod composite;
mod domain;

use std::collections::HashMap;

use crate::predicate::{Op, Operand, Predicate};
use crate::publication::Publication;
use crate::subscription::{Advertisement, Subscription};
use crate::time::TIME;
use crate::value::{Kind, Value};

pub use domain::satisfiable;

/// True if `value` satisfies `predicate`, ignoring variable bindings (a variable only asks
/// for a value of its kind).
pub fn holds(predicate: &Predicate, value: &Value) -> bool {
    let op = predicate.op();
    match predicate.operand() {
        _ if op == Op::IsPresent => true,
        Operand::Regex(pattern) => value.as_str().is_some_and(|s| pattern.is_match(s)),
        Operand::Var(_) => predicate.kind() == Some(value.kind()),
        Operand::Value(operand) => holds_value(op, operand, value),
    }
}

fn holds_value(op: Op, operand: &Value, value: &Value) -> bool {
    match (operand, value) {
        (Value::Str(x), Value::Str(v)) => {
            let (x, v) = (&**x, &**v);
            match op {
                Op::Eq => v == x,
                Op::Neq => v != x,
                Op::StrLt => v < x,
                Op::StrLe => v <= x,
                Op::StrGt => v > x,
                Op::StrGe => v >= x,
                Op::StrPrefix => v.starts_with(x),
                Op::StrPostfix => v.ends_with(x),
                Op::StrContains => v.contains(x),
                _ => false,
            }
        }
        (Value::Bool(x), Value::Bool(v)) => match op {
            Op::Eq | Op::NumEq => v == x,
            Op::Neq | Op::NumNe => v != x,
            _ => false,
        },
        _ => match (operand.as_number(), value.as_number()) {
            (Some(x), Some(v)) => {
                let order = v.cmp_exact(x);
                match op {
                    Op::NumEq => order.is_eq(),
                    Op::NumNe => order.is_ne(),
                    Op::Lt => order.is_lt(),
                    Op::Le => order.is_le(),
                    Op::Gt => order.is_gt(),
                    Op::Ge => order.is_ge(),
                    _ => false,
                }
            }
            _ => false,
        },
    }
}

/// True if `publication` matches the atomic subscription `sub` (see the module docs).
pub fn matches(sub: &Subscription, publication: &Publication) -> bool {
    let mut bindings: HashMap<&str, &Value> = HashMap::new();
    sub.predicates().iter().all(|predicate| {
        let Some(value) = publication.get(predicate.attr()) else {
            return false;
        };
        if !holds(predicate, value) {
            return false;
        }
        match predicate.variable() {
            Some(var) => match bindings.get(var.name.as_str()) {
                Some(bound) => bound.same_as(value),
                None => {
                    bindings.insert(var.name.as_str(), value);
                    true
                }
            },
            None => true,
        }
    })
}

/// True if `publication` conforms to `adv` (see the module docs).
pub fn conforms(publication: &Publication, adv: &Advertisement) -> bool {
    // One pass over the advertisement per attribute (the broker checks every publication
    // its clients send).
    publication.attrs().iter().all(|(name, value)| {
        let mut advertised = false;
        for p in adv.predicates().iter().filter(|p| p.attr() == name) {
            if !holds(p, value) {
                return false;
            }
            advertised = true;
        }
        advertised || name == TIME
    })
}

/// The predicates of `predicates` on attribute `attr`.
fn on<'a>(predicates: &'a [Predicate], attr: &'a str) -> impl Iterator<Item = &'a Predicate> + Clone {
    predicates.iter().filter(move |p| p.attr() == attr)
}

/// The distinct attributes of `predicates`, in order of first appearance.
fn attributes(predicates: &[Predicate]) -> Vec<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for p in predicates {
        if !seen.contains(&p.attr().as_str()) {
            seen.push(p.attr());
        }
    }
    seen
}

/// True unless no publication can both match `sub` and conform to `adv` (see the module
/// docs: "yes" when unsure).
pub fn overlaps(sub: &Subscription, adv: &Advertisement) -> bool {
    // The publication that would witness the overlap carries exactly the subscription's
    // attributes: each must be advertised, and the two sets of predicates on it must be
    // satisfiable together. Variables are relaxed to their kinds, which only widens.
    attributes(sub.predicates()).into_iter().all(|attr| {
        let from_adv = on(adv.predicates(), attr);
        (from_adv.clone().next().is_some() || attr == TIME)
            && satisfiable(on(sub.predicates(), attr).chain(from_adv))
    })
}

/// True unless no publication can match both `a` and `b` ("yes" when unsure): on every
/// attribute either constrains, their predicates together must be satisfiable (variables
/// relaxed to their kinds). Used to route a historic subscription toward the history
/// stores whose filters it meets.
pub fn intersects(a: &Subscription, b: &Subscription) -> bool {
    let all: Vec<Predicate> = a.predicates().iter().chain(b.predicates()).cloned().collect();
    attributes(&all).into_iter().all(|attr| satisfiable(on(&all, attr)))
}

/// True only if every publication matching `b` matches `a` ("no" when unsure).
pub fn covers(a: &Subscription, b: &Subscription) -> bool {
    // A variable that `a` uses twice demands equal values on several attributes. Every
    // publication matching `b` meets that demand when `b` has each of those predicates
    // verbatim (same variable, so `b`'s own binding carries over); otherwise say no.
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for var in a.predicates().iter().filter_map(Predicate::variable) {
        *uses.entry(var.name.as_str()).or_default() += 1;
    }
    let repeated = |p: &&Predicate| p.variable().is_some_and(|v| uses[v.name.as_str()] > 1);
    if !a.predicates().iter().filter(repeated).all(|p| b.predicates().contains(p)) {
        return false;
    }
    if !b_satisfiable(b.predicates()) {
        return true;
    }
    a.predicates().iter().all(|q| {
        let from_b = on(b.predicates(), q.attr());
        from_b.clone().next().is_some() && domain::implies(from_b, q)
    })
}

/// True only if every publication conforming to `b` conforms to `a` ("no" when unsure).
pub fn adv_covers(a: &Advertisement, b: &Advertisement) -> bool {
    attributes(b.predicates()).into_iter().all(|attr| {
        let mut from_a = on(a.predicates(), attr).peekable();
        from_a.peek().is_some() && from_a.all(|q| domain::implies(on(b.predicates(), attr), q))
    })
}

/// True only if every publication that conforms to `adv` and carries each attribute
/// `filter` names matches `filter` ("no" when unsure): `filter`, a permission, allows the
/// advertisement. A conforming publication may leave an advertised attribute out, which
/// this cannot see; whoever grants the permission also matches each publication against
/// it. A filter with variables allows nothing.
pub fn adv_within(filter: &Subscription, adv: &Advertisement) -> bool {
    filter.predicates().iter().all(|q| {
        let from_adv = on(adv.predicates(), q.attr());
        q.variable().is_none() && from_adv.clone().next().is_some() && domain::implies(from_adv, q)
    })
}

/// False only if some attribute's predicates are certainly unsatisfiable together.
fn b_satisfiable(predicates: &[Predicate]) -> bool {
    attributes(predicates).into_iter().all(|attr| satisfiable(on(predicates, attr)))
}

/// The kind a set of predicates on one attribute requires, `Ok(None)` if any value will do,
/// `Err(())` if they require two different kinds (nothing satisfies them).
fn required_kind<'a>(predicates: impl Iterator<Item = &'a Predicate>) -> Result<Option<Kind>, ()> {
    let mut kind = None;
    for k in predicates.filter_map(Predicate::kind) {
        match kind {
            None => kind = Some(k),
            Some(existing) if existing != k => return Err(()),
            Some(_) => {}
        }
    }
    Ok(kind)
}
