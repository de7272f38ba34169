//! Any text into every parser: no panic, and whatever parses prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use padres_lang::{Advertisement, CompositeSubscription, Message, Parser, Publication, Subscription};

fn round_trip<T: std::fmt::Display + std::str::FromStr + PartialEq + std::fmt::Debug>(value: T)
where
    T::Err: std::fmt::Debug,
{
    let printed = value.to_string();
    let back: T = printed.parse().expect("the canonical form parses");
    assert_eq!(back, value, "{printed}");
}

fuzz_target!(|text: &str| {
    let parser = Parser::default();
    if let Ok(x) = parser.subscription(text) {
        round_trip::<Subscription>(x);
    }
    if let Ok(x) = parser.advertisement(text) {
        round_trip::<Advertisement>(x);
    }
    if let Ok(x) = parser.publication(text) {
        round_trip::<Publication>(x);
    }
    if let Ok(x) = parser.composite(text) {
        round_trip::<CompositeSubscription>(x);
    }
    if let Ok(x) = parser.message(text) {
        round_trip::<Message>(x);
    }
});
