//! ISO-8601 durations as workflows write them: `PT2H`, `PT30S`, `P1DT12H`, `PT1H30M`,
//! `P2W`. Years and months are refused (their length depends on the date).
//!
//! Written here rather than taken from a crate: `iso8601` 0.6 (checked November 2026)
//! accepts what a job definition must not get wrong silently: `PT2Hx` as 2 hours,
//! `PT1M2H` as 1 minute, `PT1.5H` and `PT2` as zero. This parser refuses each of them.

use std::time::Duration;

/// Parses an ISO-8601 duration of weeks, days, hours, minutes and seconds (seconds may
/// have a fraction, e.g. `PT0.5S`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("bad duration '{text}': {why} (ISO-8601, e.g. PT2H, PT30S, P1DT12H)");
    let rest = text.strip_prefix('P').ok_or_else(|| bad("it must start with P"))?;
    if rest.is_empty() || rest == "T" {
        return Err(bad("no amount"));
    }
    let (date, time) = match rest.split_once('T') {
        Some((_, "")) => return Err(bad("nothing after T")),
        Some((date, time)) => (date, time),
        None => (rest, ""),
    };
    let mut seconds = 0.0_f64;
    for (part, units) in [
        (date, &[('W', 604_800.0), ('D', 86_400.0)][..]),
        (time, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)][..]),
    ] {
        let mut number = String::new();
        let mut last_unit = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let Some(at) = units.iter().position(|(u, _)| *u == c) else {
                let why = if c == 'Y' || (c == 'M' && std::ptr::eq(part, date)) {
                    "years and months have no fixed length; use days".to_owned()
                } else {
                    format!("unexpected '{c}'")
                };
                return Err(bad(&why));
            };
            if at < last_unit || number.is_empty() {
                return Err(bad("units out of order or without a number"));
            }
            if number.contains('.') && c != 'S' {
                return Err(bad("only seconds may have a fraction"));
            }
            let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
            seconds += value * units[at].1;
            number.clear();
            last_unit = at + 1;
        }
        if !number.is_empty() {
            return Err(bad("a number without a unit"));
        }
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| bad("too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let secs = |t: &str| parse_duration(t).map(|d| d.as_secs_f64());
        assert_eq!(secs("PT2H"), Ok(7200.0));
        assert_eq!(secs("PT30S"), Ok(30.0));
        assert_eq!(secs("PT1H30M"), Ok(5400.0));
        assert_eq!(secs("P1DT12H"), Ok(129_600.0));
        assert_eq!(secs("P2W"), Ok(1_209_600.0));
        assert_eq!(secs("PT0.5S"), Ok(0.5));
        for bad in ["", "P", "PT", "2H", "PT2", "P1M", "P1Y", "PT1M2H", "PT1.5H", "PTH", "P1DT", "PT2Hx"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("P1M").is_err_and(|e| e.contains("no fixed length")));
    }
}
