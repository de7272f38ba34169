//! How a predicate is filed: as interval halves on numbers or strings, as a presence test,
//! or in the exact list.

use std::cmp::Ordering;

use padres_lang::value::SmolStr;
use padres_lang::{Number, Op, Operand, Predicate, Value, VarKind};

use super::column::{Probe, Side};

/// A finite float ordered totally, with `-0.0` folded into `0.0` so that the order agrees
/// with numeric equality.
#[derive(Clone, Copy, Debug)]
pub(super) struct Num(f64);

impl Num {
    fn new(f: f64) -> Self {
        Self(if f == 0.0 { 0.0 } else { f })
    }

    pub(super) fn value(self) -> f64 {
        self.0
    }
}

impl PartialEq for Num {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Num {}
impl PartialOrd for Num {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Num {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Integers up to 2^53 in magnitude are exact as floats.
const EXACT_INT: i64 = 1 << 53;

/// The number as an exact float, if it is one.
pub(super) fn exact_float(n: Number) -> Option<f64> {
    match n {
        Number::Float(f) => Some(f),
        // The range check makes the conversion exact.
        #[allow(clippy::cast_precision_loss)]
        Number::Int(i) if (-EXACT_INT..=EXACT_INT).contains(&i) => Some(i as f64),
        Number::Int(_) => None,
    }
}

impl Probe<Num> for Number {
    fn cmp_key(&self, key: &Num) -> Ordering {
        match *self {
            Self::Float(f) => f.partial_cmp(&key.0).unwrap_or(Ordering::Equal),
            Self::Int(_) => self.cmp_exact(Self::Float(key.0)),
        }
    }
}

/// A number that is exactly a float: compared with plain float comparisons, which the
/// probe loop turns into branch-free code.
#[derive(Clone, Copy, Debug)]
pub(super) struct FloatProbe(pub(super) f64);

impl Probe<Num> for FloatProbe {
    fn cmp_key(&self, key: &Num) -> Ordering {
        self.0.partial_cmp(&key.0).unwrap_or(Ordering::Equal)
    }
    fn lt(&self, key: &Num) -> bool {
        self.0 < key.0
    }
    fn order_bits(&self, key: &Num) -> u32 {
        (u32::from(self.0 <= key.0) << 1) | u32::from(self.0 < key.0)
    }
}

/// The first eight bytes of `text`, big-endian, zero-padded. If two strings' prefixes
/// differ, they order like the strings (a zero pad sorts a shorter string first, as a
/// real byte above zero would); if equal, only a full comparison decides.
fn prefix8(text: &str) -> u64 {
    let mut bytes = [0_u8; 8];
    let n = text.len().min(8);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    u64::from_be_bytes(bytes)
}

/// Orders two strings whose [`prefix8`]s are equal. Their first eight bytes (or all of
/// the shorter one's, if it has fewer) are then equal, so a string of at most eight bytes
/// is a prefix of the other and the lengths decide; otherwise the rest does. Equal short
/// values (job names, codes) are common in columns, and this spares them a `memcmp` call.
fn cmp_after_prefix(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() <= 8 || b.len() <= 8 { a.len().cmp(&b.len()) } else { a[8..].cmp(&b[8..]) }
}

/// A string bound with its eight-byte prefix, so most comparisons are one integer compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Text {
    prefix: u64,
    text: SmolStr,
}

impl Text {
    pub(super) fn new(text: SmolStr) -> Self {
        Self { prefix: prefix8(&text), text }
    }

    pub(super) fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Text {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| cmp_after_prefix(&self.text, &other.text))
    }
}

/// A string value probing a string column.
#[derive(Debug)]
pub(super) struct TextProbe<'a> {
    prefix: u64,
    text: &'a str,
}

impl<'a> TextProbe<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self { prefix: prefix8(text), text }
    }
}

impl Probe<Text> for TextProbe<'_> {
    fn cmp_key(&self, key: &Text) -> Ordering {
        self.prefix.cmp(&key.prefix).then_with(|| cmp_after_prefix(self.text, &key.text))
    }
}

/// A probe just above (or just below) a value, for a strict bound: it orders like the
/// value against every key except the value itself, which it passes (or falls short of).
#[derive(Debug)]
pub(super) struct Nudged<'p, P> {
    inner: &'p P,
    up: bool,
}

impl<'p, P> Nudged<'p, P> {
    pub(super) fn up(inner: &'p P) -> Self {
        Self { inner, up: true }
    }

    pub(super) fn down(inner: &'p P) -> Self {
        Self { inner, up: false }
    }
}

impl<T, P: Probe<T>> Probe<T> for Nudged<'_, P> {
    fn cmp_key(&self, key: &T) -> Ordering {
        match self.inner.cmp_key(key) {
            Ordering::Equal if self.up => Ordering::Greater,
            Ordering::Equal => Ordering::Less,
            other => other,
        }
    }
}

/// Where one predicate goes.
#[derive(Debug)]
pub(super) enum Placement {
    /// `isPresent`: only the presence bit.
    Presence,
    /// Halves on the numeric column.
    Num(Vec<(Side, Num, bool)>),
    /// Halves on the string column.
    Text(Vec<(Side, Text, bool)>),
    /// A `$S$` variable: the value must be a string (the string-kind bit only; which
    /// string is the composite detector's business).
    StrKind,
    /// Checked one by one.
    Exact,
}

/// Files `p` (see the module docs).
pub(super) fn placement(p: &Predicate) -> Placement {
    use Side::{Lower, Upper};
    let op = p.op();
    if op == Op::IsPresent {
        return Placement::Presence;
    }
    let value = match p.operand() {
        Operand::Value(value) => value,
        Operand::Var(var) if var.kind == VarKind::Str => return Placement::StrKind,
        // `$I$` stays exact: a timestamp is a number to the columns but not to `$I$`.
        Operand::Var(_) | Operand::Regex(_) => return Placement::Exact,
    };
    match value {
        Value::Str(s) => {
            let s = Text::new(s.clone());
            Placement::Text(match op {
                Op::Eq => vec![(Lower, s.clone(), false), (Upper, s, false)],
                Op::StrLt => vec![(Upper, s, true)],
                Op::StrLe => vec![(Upper, s, false)],
                Op::StrGt => vec![(Lower, s, true)],
                Op::StrGe => vec![(Lower, s, false)],
                Op::StrPrefix => {
                    let mut halves = Vec::with_capacity(2);
                    if let Some(end) = prefix_end(&s.text) {
                        halves.push((Upper, Text::new(SmolStr::new(end)), true));
                    }
                    halves.push((Lower, s, false));
                    halves
                }
                _ => return Placement::Exact,
            })
        }
        Value::Int(_) | Value::Float(_) | Value::Time(_) => {
            let Some(x) = value.as_number().and_then(exact_float).map(Num::new) else {
                return Placement::Exact;
            };
            Placement::Num(match op {
                Op::NumEq => vec![(Lower, x, false), (Upper, x, false)],
                Op::Lt => vec![(Upper, x, true)],
                Op::Le => vec![(Upper, x, false)],
                Op::Gt => vec![(Lower, x, true)],
                Op::Ge => vec![(Lower, x, false)],
                _ => return Placement::Exact,
            })
        }
        Value::Bool(_) => Placement::Exact,
    }
}

/// The least string greater than every string starting with `prefix`, if any: the prefix
/// with its last character incremented (dropping characters that cannot be).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(u32::from(c) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_bound_exactly_the_extensions() {
        assert_eq!(prefix_end("ib").as_deref(), Some("ic"));
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("\u{10FFFF}"), None);
        let end = prefix_end("ib").unwrap_or_default();
        for s in ["ib", "ibm", "ib\u{10FFFF}\u{10FFFF}"] {
            assert!(s < end.as_str());
        }
        assert!("ic" >= end.as_str() && "ia" < "ib");
    }

    #[test]
    fn text_keys_order_like_strings() {
        let words = [
            "",
            "a",
            "ab",
            "ab\0",
            "ab\0x",
            "abcdefg",
            "abcdefg\0",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "abcdefghj",
            "abcdefghij",
            "abd",
            "é",
            "\u{0}",
            "\u{0}\u{0}",
        ];
        for a in words {
            for b in words {
                let (ka, kb) = (Text::new(SmolStr::new(a)), Text::new(SmolStr::new(b)));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(TextProbe::new(a).cmp_key(&kb), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn numbers_order_like_their_values() {
        assert_eq!(Num::new(-0.0), Num::new(0.0));
        assert!(Num::new(-1.0) < Num::new(0.0));
        assert_eq!(Number::Int(3).cmp_key(&Num::new(3.0)), Ordering::Equal);
        assert_eq!(Number::Int((1 << 53) + 1).cmp_key(&Num::new(9_007_199_254_740_992.0)), Ordering::Greater);
        assert_eq!(exact_float(Number::Int((1 << 53) + 1)), None);
    }
}
