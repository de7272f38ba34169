//! Attribute values: integers, floats, strings, booleans and timestamps.
//!
//! Integers, floats and timestamps are all *numbers* to the operators: they compare with
//! each other exactly (an `i64` is never rounded through `f64`), and a timestamp compares as
//! its milliseconds since the Unix epoch. A string never equals a number. Floats are always
//! finite: every constructor that takes untrusted input rejects NaN and infinities.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};
/// The text of a string value: up to 23 bytes held inline, longer behind an `Arc`, so
/// cloning a publication's short strings copies bytes instead of counting references.
pub use smol_str::SmolStr;

use crate::error::InvalidMessage;

/// One attribute value of a publication, or the operand of a predicate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawValue")]
pub enum Value {
    /// A signed 64-bit integer.
    Int(i64),
    /// A finite 64-bit float.
    Float(f64),
    /// A UTF-8 string.
    Str(SmolStr),
    /// `true` or `false`.
    Bool(bool),
    /// A point in time, in milliseconds since the Unix epoch (UTC).
    Time(Timestamp),
}

/// The wire shape of [`Value`], checked on the way in.
#[derive(Deserialize)]
enum RawValue {
    Int(i64),
    Float(f64),
    Str(SmolStr),
    Bool(bool),
    Time(Timestamp),
}

impl TryFrom<RawValue> for Value {
    type Error = InvalidMessage;
    fn try_from(raw: RawValue) -> Result<Self, Self::Error> {
        Ok(match raw {
            RawValue::Int(i) => Self::Int(i),
            RawValue::Float(f) if f.is_finite() => Self::Float(f),
            RawValue::Float(_) => return Err(InvalidMessage::NonFiniteFloat),
            RawValue::Str(s) => Self::Str(s),
            RawValue::Bool(b) => Self::Bool(b),
            RawValue::Time(t) => Self::Time(t),
        })
    }
}

/// The kinds of value, as operators see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Integers, floats and timestamps.
    Number,
    /// Strings.
    String,
    /// Booleans.
    Bool,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Number => "number",
            Self::String => "string",
            Self::Bool => "boolean",
        })
    }
}

impl Value {
    /// A string value.
    pub fn str(text: &str) -> Self {
        Self::Str(SmolStr::new(text))
    }

    /// A float value, or an error for NaN and infinities.
    pub fn float(f: f64) -> Result<Self, InvalidMessage> {
        if f.is_finite() { Ok(Self::Float(f)) } else { Err(InvalidMessage::NonFiniteFloat) }
    }

    /// Which kind of value this is.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Int(_) | Self::Float(_) | Self::Time(_) => Kind::Number,
            Self::Str(_) => Kind::String,
            Self::Bool(_) => Kind::Bool,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is one (a timestamp counts as its epoch milliseconds).
    pub fn as_number(&self) -> Option<Number> {
        match *self {
            Self::Int(i) => Some(Number::Int(i)),
            Self::Float(f) => Some(Number::Float(f)),
            Self::Time(t) => Some(Number::Int(t.millis())),
            _ => None,
        }
    }

    /// Equality as the operators see it: numbers numerically, strings and booleans exactly,
    /// different kinds never.
    pub fn same_as(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Str(a), Self::Str(b)) => a == b,
            (Self::Bool(a), Self::Bool(b)) => a == b,
            _ => match (self.as_number(), other.as_number()) {
                (Some(a), Some(b)) => a.cmp_exact(b) == Ordering::Equal,
                _ => false,
            },
        }
    }

    /// False only for a float that is NaN or infinite.
    pub(crate) fn is_valid(&self) -> bool {
        !matches!(self, Self::Float(f) if !f.is_finite())
    }
}

/// A number from a value, for exact mixed integer/float comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// An integer (or a timestamp's milliseconds).
    Int(i64),
    /// A float.
    Float(f64),
}

impl Number {
    /// Compares two numbers exactly, without rounding an integer to a float.
    ///
    /// NaN never occurs in valid messages; should one reach here it compares equal, which
    /// errs on the side of "overlapping" in the routing checks.
    pub fn cmp_exact(self, other: Self) -> Ordering {
        match (self, other) {
            (Self::Int(a), Self::Int(b)) => a.cmp(&b),
            (Self::Float(a), Self::Float(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (Self::Int(a), Self::Float(b)) => cmp_int_float(a, b),
            (Self::Float(a), Self::Int(b)) => cmp_int_float(b, a).reverse(),
        }
    }
}

/// Orders an integer against a float exactly.
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    // 2^63 is exactly representable; every i64 is below it and at or above -2^63.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() {
        return Ordering::Equal;
    }
    if f >= TWO_63 {
        return Ordering::Less;
    }
    if f < -TWO_63 {
        return Ordering::Greater;
    }
    let whole = f.trunc();
    // In range, so the cast is exact.
    #[allow(clippy::cast_possible_truncation)]
    let whole_int = whole as i64;
    match i.cmp(&whole_int) {
        Ordering::Equal => {
            // Same integer part: the fraction decides.
            if f > whole {
                Ordering::Less
            } else if f < whole {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        other => other,
    }
}

/// Milliseconds since 1970-01-01T00:00:00Z, limited to the years 0000 to 9999 so that
/// every timestamp has an RFC 3339 form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Timestamp(i64);

impl Timestamp {
    /// 0000-01-01T00:00:00.000Z.
    pub const MIN: Self = Self(-62_167_219_200_000);
    /// 9999-12-31T23:59:59.999Z.
    pub const MAX: Self = Self(253_402_300_799_999);

    /// A timestamp from epoch milliseconds, if within [`Self::MIN`]..=[`Self::MAX`].
    pub fn from_millis(millis: i64) -> Option<Self> {
        (Self::MIN.0..=Self::MAX.0).contains(&millis).then_some(Self(millis))
    }

    /// Milliseconds since the Unix epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// Parses an RFC 3339 timestamp such as `2026-11-21T10:00:00Z` or
    /// `2026-11-21T11:00:00.250+01:00`. Precision beyond milliseconds is refused rather
    /// than silently dropped.
    pub fn parse_rfc3339(text: &str) -> Result<Self, InvalidMessage> {
        let bad = || InvalidMessage::BadTimestamp(text.chars().take(64).collect());
        let parsed = chrono::DateTime::parse_from_rfc3339(text).map_err(|_| bad())?;
        if parsed.timestamp_subsec_nanos() % 1_000_000 != 0 {
            return Err(bad());
        }
        Self::from_millis(parsed.timestamp_millis()).ok_or_else(bad)
    }

    /// The canonical RFC 3339 form, in UTC with milliseconds: `2026-11-21T10:00:00.000Z`.
    pub fn to_rfc3339(self) -> String {
        match chrono::DateTime::from_timestamp_millis(self.0) {
            Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            // Unreachable for a range-checked timestamp; keep a parseable fallback anyway.
            None => self.0.to_string(),
        }
    }
}

impl TryFrom<i64> for Timestamp {
    type Error = InvalidMessage;
    fn try_from(millis: i64) -> Result<Self, Self::Error> {
        Self::from_millis(millis).ok_or(InvalidMessage::BadTimestamp(millis.to_string()))
    }
}

impl From<Timestamp> for i64 {
    fn from(t: Timestamp) -> Self {
        t.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_comparison_is_exact() {
        use Number::{Float, Int};
        assert_eq!(Int(100).cmp_exact(Float(100.5)), Ordering::Less);
        assert_eq!(Int(100).cmp_exact(Float(100.0)), Ordering::Equal);
        assert_eq!(Int(-3).cmp_exact(Float(-3.5)), Ordering::Greater);
        assert_eq!(Float(-3.5).cmp_exact(Int(-3)), Ordering::Less);
        // 2^53 + 1 is not a float; rounding it would make these equal.
        let big = (1_i64 << 53) + 1;
        assert_eq!(Int(big).cmp_exact(Float((1_i64 << 53) as f64)), Ordering::Greater);
        assert_eq!(Int(i64::MAX).cmp_exact(Float(9.3e18)), Ordering::Less);
        assert_eq!(Int(i64::MIN).cmp_exact(Float(-9.3e18)), Ordering::Greater);
        assert_eq!(Int(i64::MIN).cmp_exact(Float(-9_223_372_036_854_775_808.0)), Ordering::Equal);
    }

    #[test]
    fn kinds_never_mix_in_equality() {
        assert!(Value::Int(100).same_as(&Value::Float(100.0)));
        assert!(!Value::str("100").same_as(&Value::Int(100)));
        assert!(!Value::Bool(true).same_as(&Value::Int(1)));
        let t = Timestamp::from_millis(5).map(Value::Time);
        assert!(t.is_some_and(|t| t.same_as(&Value::Int(5))));
    }

    #[test]
    fn timestamps_round_trip_through_rfc3339() {
        for millis in [0, 1, -1, 1_763_719_200_123, Timestamp::MIN.0, Timestamp::MAX.0] {
            let t = Timestamp::from_millis(millis).expect("in range");
            assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()).ok(), Some(t));
        }
        let t = Timestamp::parse_rfc3339("2026-11-21T11:00:00.250+01:00").expect("valid");
        assert_eq!(t.to_rfc3339(), "2026-11-21T10:00:00.250Z");
        assert!(Timestamp::parse_rfc3339("2026-11-21T10:00:00.0001Z").is_err());
        assert!(Timestamp::parse_rfc3339("2026-13-01T00:00:00Z").is_err());
        assert!(Timestamp::from_millis(Timestamp::MAX.0 + 1).is_none());
    }
}
