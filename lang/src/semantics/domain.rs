//! Reasoning about the predicates on one attribute: are they satisfiable together, and do
//! they imply another predicate?
//!
//! Numbers and booleans are decided exactly (numbers over the reals, which contain every
//! integer, float and timestamp, so "empty" is never wrong). Strings are decided exactly
//! when an `eq` pins the value, and otherwise by rules that each prove emptiness for a
//! pair of predicates (prefix against prefix, prefix against a bound, bound against bound,
//! …); anything no rule refutes counts as satisfiable. Implication is only claimed when a
//! rule proves it.

use super::{holds, required_kind};
use crate::predicate::{Op, Operand, Predicate};
use crate::value::{Kind, Number, Value};

/// False only if no single value satisfies all of `predicates` (see the module docs).
pub fn satisfiable<'a>(predicates: impl IntoIterator<Item = &'a Predicate>) -> bool {
    let predicates: Vec<&Predicate> = predicates.into_iter().collect();
    match required_kind(predicates.iter().copied()) {
        Err(()) => false,
        Ok(None) => true,
        Ok(Some(Kind::Number)) => !NumSet::of(&predicates).is_empty(),
        Ok(Some(Kind::Bool)) => BoolSet::of(&predicates).any(),
        Ok(Some(Kind::String)) => strings_satisfiable(&predicates),
    }
}

/// True only if every value satisfying all of `given` (predicates on one attribute)
/// satisfies `wanted`.
pub(super) fn implies<'a>(given: impl IntoIterator<Item = &'a Predicate>, wanted: &Predicate) -> bool {
    let given: Vec<&Predicate> = given.into_iter().collect();
    if given.is_empty() {
        return false;
    }
    if !satisfiable(given.iter().copied()) {
        return true;
    }
    let Ok(kind) = required_kind(given.iter().copied()) else {
        return true;
    };
    if wanted.op() == Op::IsPresent {
        return true;
    }
    if wanted.kind() != kind {
        return false;
    }
    match wanted.operand() {
        Operand::Var(_) => true,
        Operand::Regex(pattern) => pinned_string(&given).map_or_else(
            || given.iter().any(|g| matches!(g.operand(), Operand::Regex(p) if p == pattern)),
            |s| pattern.is_match(s),
        ),
        Operand::Value(x) => match kind {
            Some(Kind::Number) => numbers_imply(&NumSet::of(&given), wanted.op(), x),
            Some(Kind::Bool) => BoolSet::of(&given).within(&BoolSet::of(&[wanted])),
            Some(Kind::String) => strings_imply(&given, wanted),
            None => false,
        },
    }
}

/// A bound of an interval.
#[derive(Clone, Copy, Debug)]
struct Bound {
    at: Number,
    strict: bool,
}

/// The numbers allowed by numeric predicates: an interval, points it must equal, points it
/// must not.
#[derive(Debug, Default)]
struct NumSet {
    lo: Option<Bound>,
    hi: Option<Bound>,
    eq: Vec<Number>,
    ne: Vec<Number>,
}

impl NumSet {
    fn of(predicates: &[&Predicate]) -> Self {
        let mut set = Self::default();
        for p in predicates {
            let Some(x) = p.literal().and_then(Value::as_number) else {
                continue;
            };
            match p.op() {
                Op::NumEq => set.eq.push(x),
                Op::NumNe => set.ne.push(x),
                Op::Lt => set.upper(Bound { at: x, strict: true }),
                Op::Le => set.upper(Bound { at: x, strict: false }),
                Op::Gt => set.lower(Bound { at: x, strict: true }),
                Op::Ge => set.lower(Bound { at: x, strict: false }),
                _ => {}
            }
        }
        set
    }

    fn upper(&mut self, b: Bound) {
        let tighter = self.hi.is_none_or(|h| {
            let order = b.at.cmp_exact(h.at);
            order.is_lt() || (order.is_eq() && b.strict)
        });
        if tighter {
            self.hi = Some(b);
        }
    }

    fn lower(&mut self, b: Bound) {
        let tighter = self.lo.is_none_or(|l| {
            let order = b.at.cmp_exact(l.at);
            order.is_gt() || (order.is_eq() && b.strict)
        });
        if tighter {
            self.lo = Some(b);
        }
    }

    fn in_interval(&self, x: Number) -> bool {
        let above = self.lo.is_none_or(|l| {
            let order = x.cmp_exact(l.at);
            order.is_gt() || (order.is_eq() && !l.strict)
        });
        let below = self.hi.is_none_or(|h| {
            let order = x.cmp_exact(h.at);
            order.is_lt() || (order.is_eq() && !h.strict)
        });
        above && below
    }

    fn excluded(&self, x: Number) -> bool {
        self.ne.iter().any(|n| n.cmp_exact(x).is_eq())
    }

    fn is_empty(&self) -> bool {
        if let Some(&first) = self.eq.first() {
            let all_same = self.eq.iter().all(|e| e.cmp_exact(first).is_eq());
            return !(all_same && self.in_interval(first) && !self.excluded(first));
        }
        match (self.lo, self.hi) {
            (Some(l), Some(h)) => match l.at.cmp_exact(h.at) {
                std::cmp::Ordering::Greater => true,
                std::cmp::Ordering::Equal => l.strict || h.strict || self.excluded(l.at),
                // A real interval with more than one point has infinitely many; finitely
                // many exclusions cannot empty it.
                std::cmp::Ordering::Less => false,
            },
            _ => false,
        }
    }
}

fn numbers_imply(set: &NumSet, op: Op, x: &Value) -> bool {
    let Some(xn) = x.as_number() else {
        return false;
    };
    if let Some(&e) = set.eq.first() {
        // A consistent set with an equality is exactly that point.
        return super::holds_value(op, x, &number_value(e));
    }
    let le = |a: Number, b: Number| a.cmp_exact(b).is_le();
    let lt = |a: Number, b: Number| a.cmp_exact(b).is_lt();
    match op {
        Op::Lt => set.hi.is_some_and(|h| lt(h.at, xn) || (h.strict && le(h.at, xn))),
        Op::Le => set.hi.is_some_and(|h| le(h.at, xn)),
        Op::Gt => set.lo.is_some_and(|l| lt(xn, l.at) || (l.strict && le(xn, l.at))),
        Op::Ge => set.lo.is_some_and(|l| le(xn, l.at)),
        Op::NumEq => match (set.lo, set.hi) {
            (Some(l), Some(h)) => {
                !l.strict && !h.strict && l.at.cmp_exact(xn).is_eq() && h.at.cmp_exact(xn).is_eq()
            }
            _ => false,
        },
        Op::NumNe => !set.in_interval(xn) || set.excluded(xn),
        _ => false,
    }
}

fn number_value(n: Number) -> Value {
    match n {
        Number::Int(i) => Value::Int(i),
        Number::Float(f) => Value::Float(f),
    }
}

/// Which of `false`/`true` boolean predicates allow.
#[derive(Debug, PartialEq)]
struct BoolSet {
    allow_false: bool,
    allow_true: bool,
}

impl BoolSet {
    fn of(predicates: &[&Predicate]) -> Self {
        let mut set = Self { allow_false: true, allow_true: true };
        for p in predicates {
            let Some(Value::Bool(x)) = p.literal().filter(|_| p.op() != Op::IsPresent) else {
                continue;
            };
            let keep_x = matches!(p.op(), Op::Eq | Op::NumEq);
            if *x {
                set.allow_false &= !keep_x;
                set.allow_true &= keep_x;
            } else {
                set.allow_true &= !keep_x;
                set.allow_false &= keep_x;
            }
        }
        set
    }

    fn any(&self) -> bool {
        self.allow_false || self.allow_true
    }

    fn within(&self, other: &Self) -> bool {
        (!self.allow_false || other.allow_false) && (!self.allow_true || other.allow_true)
    }
}

/// The string literal operands of `predicates`, with their operators.
fn string_literals<'a>(predicates: &[&'a Predicate]) -> Vec<(Op, &'a str)> {
    predicates
        .iter()
        .filter_map(|p| Some((p.op(), p.literal()?.as_str()?)))
        .filter(|(op, _)| *op != Op::IsPresent)
        .collect()
}

/// A string bound: the text, and whether it is strict.
type StrBound<'a> = Option<(&'a str, bool)>;

/// The tightest lower and upper bounds among string literals.
fn string_bounds<'a>(literals: &[(Op, &'a str)]) -> (StrBound<'a>, StrBound<'a>) {
    let mut lo: StrBound<'a> = None;
    let mut hi: StrBound<'a> = None;
    for &(op, s) in literals {
        match op {
            Op::StrGt | Op::StrGe => {
                let strict = op == Op::StrGt;
                if lo.is_none_or(|(l, ls)| s > l || (s == l && strict && !ls)) {
                    lo = Some((s, strict));
                }
            }
            Op::StrLt | Op::StrLe => {
                let strict = op == Op::StrLt;
                if hi.is_none_or(|(h, hs)| s < h || (s == h && strict && !hs)) {
                    hi = Some((s, strict));
                }
            }
            _ => {}
        }
    }
    (lo, hi)
}

/// The one value the predicates allow, if they pin one: by `eq`, by equal inclusive
/// bounds, or by `str-le ''`. (They may allow none; callers check every predicate.)
fn pinned_string<'a>(predicates: &[&'a Predicate]) -> Option<&'a str> {
    let literals = string_literals(predicates);
    if let Some((_, s)) = literals.iter().find(|(op, _)| *op == Op::Eq) {
        return Some(s);
    }
    match string_bounds(&literals) {
        (_, Some(("", false))) => Some(""),
        (Some((l, false)), Some((h, false))) if l == h => Some(l),
        _ => None,
    }
}

fn strings_satisfiable(predicates: &[&Predicate]) -> bool {
    if let Some(s) = pinned_string(predicates) {
        let value = Value::str(s);
        return predicates.iter().all(|p| holds(p, &value));
    }
    let literals = string_literals(predicates);
    if literals.iter().any(|&(op, x)| op == Op::StrLt && x.is_empty()) {
        return false; // nothing sorts before the empty string
    }
    for (i, &a) in literals.iter().enumerate() {
        for &b in &literals[i + 1..] {
            if pair_empty(a, b) || pair_empty(b, a) {
                return false;
            }
        }
    }
    true
}

fn all_nul(s: &str) -> bool {
    s.chars().all(|c| c == '\0')
}

/// True if no string satisfies both `(op1, x)` and `(op2, y)`, proved by one of the rules
/// below (called both ways round).
fn pair_empty((op1, x): (Op, &str), (op2, y): (Op, &str)) -> bool {
    use Op::{Neq, StrContains, StrGe, StrGt, StrLe, StrLt, StrPostfix, StrPrefix};
    match (op1, op2) {
        (StrPrefix, StrPrefix) => !(x.starts_with(y) || y.starts_with(x)),
        (StrPostfix, StrPostfix) => !(x.ends_with(y) || y.ends_with(x)),
        // Strings with prefix x are x and its extensions; all lie below y if y neither
        // extends x nor sorts before it.
        (StrPrefix, StrGt | StrGe) => !y.starts_with(x) && x < y,
        // The smallest string with prefix x is x itself.
        (StrPrefix, StrLt) => x >= y,
        (StrPrefix, StrLe) => x > y,
        // Below a bound y with any character above NUL there are strings ending with (or
        // containing) anything: NULs then the text. Otherwise only x itself could do.
        (StrPostfix | StrContains, StrLt) => x >= y && all_nul(y),
        (StrPostfix | StrContains, StrLe) => x > y && all_nul(y),
        (StrGt | StrGe, StrLt | StrLe) => x > y || (x == y && (op1 == StrGt || op2 == StrLt)),
        (Neq, StrLe) => y.is_empty() && x.is_empty(),
        _ => false,
    }
}

fn strings_imply(given: &[&Predicate], wanted: &Predicate) -> bool {
    let Some(x) = wanted.literal().and_then(Value::as_str) else {
        return false;
    };
    if let Some(s) = pinned_string(given) {
        return holds(wanted, &Value::str(s));
    }
    let literals = string_literals(given);
    let with = |op: Op| literals.iter().filter(move |(o, _)| *o == op).map(|(_, s)| *s);
    let (lo, hi) = string_bounds(&literals);
    // `x` is excluded if some given predicate fails on it.
    let excludes = |x: &str| given.iter().any(|g| g.variable().is_none() && !holds(g, &Value::str(x)));
    match wanted.op() {
        // Equality is only implied when pinned, handled above.
        Op::Eq => false,
        Op::Neq => excludes(x),
        // Every string is >= '', and > '' exactly when it is not ''.
        Op::StrGe if x.is_empty() => true,
        Op::StrGt if x.is_empty() => excludes(""),
        op @ (Op::StrLt | Op::StrLe) => {
            hi.is_some_and(|(h, strict)| h < x || (h == x && (strict || op == Op::StrLe)))
                || with(Op::StrPrefix).any(|p| !x.starts_with(p) && x > p)
        }
        op @ (Op::StrGt | Op::StrGe) => {
            lo.is_some_and(|(l, strict)| l > x || (l == x && (strict || op == Op::StrGe)))
                || with(Op::StrPrefix).any(|p| p > x || (p == x && op == Op::StrGe))
        }
        Op::StrPrefix => x.is_empty() || with(Op::StrPrefix).any(|p| p.starts_with(x)),
        Op::StrPostfix => x.is_empty() || with(Op::StrPostfix).any(|s| s.ends_with(x)),
        Op::StrContains => {
            x.is_empty()
                || with(Op::StrPrefix)
                    .chain(with(Op::StrPostfix))
                    .chain(with(Op::StrContains))
                    .any(|c| c.contains(x))
        }
        _ => false,
    }
}
