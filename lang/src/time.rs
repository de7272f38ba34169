//! Time in messages: the reserved `time` attribute and the ways a bound on it is written.
//!
//! Every publication carries `time`, a [`Timestamp`]: its publisher's broker adds its own
//! clock's reading (the origin time of the publication's [`Stamp`](crate::Stamp)) unless
//! the publisher gave one. Advertisements need not mention `time`: every advertisement
//! implicitly advertises it with any timestamp, so [`conforms`](crate::conforms) accepts
//! it and [`overlaps`](crate::overlaps) looks only at the subscription's own bounds on it.
//!
//! A predicate on `time` compares numbers (timestamps are numbers to the operators):
//! `[time,>=,2026-11-20T10:00:00Z]`, `[time,<,1763632800000]` (epoch milliseconds), or a
//! time relative to when the subscription is issued, `[time,>=,'now-1h']`. A relative time
//! is resolved once, by the parser that reads the subscription ([`Parser::at`]); a parser
//! without a clock refuses it, so a subscription on the wire only ever holds absolute
//! times.
//!
//! [`Parser::at`]: crate::Parser::at

use crate::error::InvalidMessage;
use crate::value::Timestamp;

/// The reserved attribute every publication carries.
pub const TIME: &str = "time";

/// A duration: digits and a unit, `ms`, `s`, `m`, `h` or `d`, in milliseconds.
pub fn parse_duration(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// The offset in milliseconds of a relative time, `now`, `now-1h` or `now+30s`; `None` if
/// `text` is not one.
pub fn relative(text: &str) -> Option<i64> {
    let rest = text.strip_prefix("now")?;
    if rest.is_empty() {
        return Some(0);
    }
    let (sign, duration) = match rest.split_at_checked(1)? {
        ("-", d) => (-1, d),
        ("+", d) => (1, d),
        _ => return None,
    };
    let millis = i64::try_from(parse_duration(duration)?).ok()?;
    Some(sign * millis)
}

/// The timestamp of relative time `text` issued at `now`.
pub fn resolve(text: &str, now: Timestamp) -> Result<Timestamp, InvalidMessage> {
    let bad = || InvalidMessage::BadTimestamp(text.chars().take(64).collect());
    let offset = relative(text).ok_or_else(bad)?;
    now.millis().checked_add(offset).and_then(Timestamp::from_millis).ok_or_else(bad)
}

/// A time bound as a command line takes it: an RFC 3339 timestamp, epoch milliseconds, a
/// relative time (`now-1h`), or a bare duration meaning that long ago (`1h` is `now-1h`).
pub fn parse_bound(text: &str, now: Timestamp) -> Result<Timestamp, InvalidMessage> {
    let bad = || InvalidMessage::BadTimeBound(text.chars().take(64).collect());
    if let Some(ago) = parse_duration(text) {
        let ago = i64::try_from(ago).map_err(|_| bad())?;
        return now.millis().checked_sub(ago).and_then(Timestamp::from_millis).ok_or_else(bad);
    }
    if relative(text).is_some() {
        return resolve(text, now).map_err(|_| bad());
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<i64>().ok().and_then(Timestamp::from_millis).ok_or_else(bad);
    }
    Timestamp::parse_rfc3339(text).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_millis(millis).expect("in range")
    }

    #[test]
    fn durations_and_relative_times() {
        assert_eq!(parse_duration("500ms"), Some(500));
        assert_eq!(parse_duration("2h"), Some(7_200_000));
        assert_eq!(parse_duration("7d"), Some(604_800_000));
        for bad in ["", "h", "10", "10x", "-1h", "1.5h", "99999999999999999999d"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(relative("now"), Some(0));
        assert_eq!(relative("now-1h"), Some(-3_600_000));
        assert_eq!(relative("now+30s"), Some(30_000));
        for bad in ["now-", "now1h", "nowish", "now - 1h", "later"] {
            assert_eq!(relative(bad), None, "{bad}");
        }
        assert_eq!(resolve("now-1s", at(10_000)), Ok(at(9_000)));
        assert!(resolve("now+1d", Timestamp::MAX).is_err());
    }

    #[test]
    fn command_line_bounds() {
        let now = at(1_763_632_800_000);
        assert_eq!(parse_bound("1h", now), Ok(at(1_763_629_200_000)));
        assert_eq!(parse_bound("now-1h", now), Ok(at(1_763_629_200_000)));
        assert_eq!(parse_bound("1763632800000", now), Ok(now));
        assert_eq!(parse_bound("2025-11-20T10:00:00Z", now), Ok(now));
        let err = parse_bound("yesterday", now).expect_err("not a bound");
        assert!(err.to_string().contains("yesterday"), "{err}");
    }
}
