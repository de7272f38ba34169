//! Any body into the HTTP gateway's request reader (`padres_lang::json::request_lines`):
//! the first byte chooses text lines or a JSON array. No panic; the line numbers given are
//! in order and within the body; every message read prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use padres_lang::json::request_lines;
use padres_lang::{Message, Parser};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let Ok(body) = std::str::from_utf8(rest) else { return };
    let json_array = first & 1 == 1;
    let parser = Parser::default();
    match request_lines(body, json_array, &parser) {
        Ok(messages) => {
            let mut last = 0;
            for (line, message) in messages {
                assert!(line > last, "line numbers rise: {line} after {last}");
                last = line;
                if !json_array {
                    assert!(line <= body.lines().count(), "line {line} is in the body");
                }
                let printed = message.to_string();
                let back: Message = parser.message(&printed).expect("the canonical form parses");
                assert_eq!(back, message, "{printed}");
            }
        }
        Err(refused) => {
            assert!(!refused.message.is_empty(), "a refusal says why");
            if !json_array {
                assert!(refused.line.is_some_and(|l| l >= 1 && l <= body.lines().count()), "{refused:?}");
            }
        }
    }
});
