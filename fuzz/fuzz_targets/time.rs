//! Any text as a time bound (`padres_lang::time`: durations, relative times, epoch
//! milliseconds, RFC 3339), as `padres sub --since/--until` and `'now-1h'` in subscriptions
//! take them. No panic; a duration `d` is the bound `now-d`; a relative time resolves as
//! a bound does; a timestamp read prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use padres_lang::time::{parse_bound, parse_duration, relative, resolve};
use padres_lang::value::Timestamp;

fuzz_target!(|text: &str| {
    let now = Timestamp::from_millis(1_795_000_000_000).expect("a valid time");
    let bound = parse_bound(text, now);
    if let Some(ago) = parse_duration(text) {
        let expected = i64::try_from(ago).ok().and_then(|ago| now.millis().checked_sub(ago));
        assert_eq!(bound.as_ref().ok().map(|t| t.millis()), expected.filter(|&m| Timestamp::from_millis(m).is_some()));
    } else if let Some(offset) = relative(text) {
        assert_eq!(bound.as_ref().ok(), resolve(text, now).ok().as_ref(), "{text} ({offset} ms)");
    }
    if let Ok(t) = bound {
        let printed = t.to_rfc3339();
        assert_eq!(Timestamp::parse_rfc3339(&printed).ok(), Some(t), "{printed}");
    }
});
