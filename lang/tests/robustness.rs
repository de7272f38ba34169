//! Hostile input: random text into the parser, random bytes into the frame decoder, frames
//! that announce more than they carry, and frames split into single bytes.

use std::sync::Arc;

use padres_lang::wire::CloseCode;
use padres_lang::wire::codec::{DEFAULT_MAX_FRAME, DecodeError, FrameReader, PREFIX_LEN};
use padres_lang::{Frame, Message, Parser, Publication, Subscription, wire};

/// Seeded, so failures replay from the seed.
struct Rng(fastrand::Rng);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const SEEDS: [&str; 8] = [
    "[class,eq,'stock'],[price,>,100],[symbol,isPresent,'x']",
    "[class,'stock'],[symbol,'IBM'],[price,100.3],[volume,110] payload=0x6869",
    "{{[class,eq,'stock'],[comp,eq,$S$X],[price,>,100]}&{[class,eq,'trade'],[buyer,eq,$S$X]}}",
    "{{{[class,eq,fa]}&{{[class,eq,do]}||{[class,eq,re]}}}&{[class,eq,so]}}",
    "Times({[class,eq,temp],[v,>,10]},3,v,-0.5)",
    "[class,eq,'log'],[msg,str-regex,'^ERR[0-9]+(a|b)*']",
    "s [class,eq,'t'],[at,>=,2026-11-21T10:00:00Z],[s,eq,'\\u{1F600}\\n']",
    "unsub B1/42",
];

/// Characters that matter to the grammar, plus some that do not.
const ALPHABET: [&str; 40] = [
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    ",",
    "'",
    "\"",
    "\\",
    "$",
    "$S$",
    "$I$",
    "&",
    "||",
    ";",
    "=",
    "<",
    ">",
    "<>",
    "eq",
    "str-regex",
    "isPresent",
    "class",
    "Times(",
    "0",
    "9",
    "-",
    ".",
    "e",
    "x",
    " ",
    "\n",
    "T",
    "2026-01-01T00:00:00Z",
    "\u{0}",
    "é",
    "😀",
    "payload=0x",
    "\\u{",
];

fn random_text(rng: &mut Rng) -> String {
    if rng.below(2) == 0 {
        // Pure noise from the alphabet.
        (0..rng.below(40)).map(|_| *rng.pick(&ALPHABET)).collect()
    } else {
        // A valid message, mutated a few times: a character dropped, a token inserted, or
        // the text cut short.
        let mut chars: Vec<String> = rng.pick(&SEEDS).chars().map(String::from).collect();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(chars.len() + 1);
            match rng.below(3) {
                0 if at < chars.len() => {
                    chars.remove(at);
                }
                1 => chars.insert(at, (*rng.pick(&ALPHABET)).to_owned()),
                _ => chars.truncate(at),
            }
        }
        chars.concat()
    }
}

#[test]
fn the_parser_never_panics_on_random_text() {
    let parser = Parser::default();
    let mut rng = Rng(fastrand::Rng::with_seed(0x5eed_0001));
    let mut accepted = 0;
    for _ in 0..100_000 {
        let text = random_text(&mut rng);
        let results = [
            parser.subscription(&text).is_ok(),
            parser.advertisement(&text).is_ok(),
            parser.publication(&text).is_ok(),
            parser.composite(&text).is_ok(),
            parser.message(&text).is_ok(),
        ];
        accepted += results.iter().filter(|ok| **ok).count();
        // Whatever parses must print back to the same value.
        if let Ok(m) = parser.message(&text) {
            assert_eq!(m.to_string().parse::<Message>().as_ref(), Ok(&m), "{text}");
        }
    }
    // The mutations keep some inputs valid, so the accepting paths run too.
    assert!(accepted > 1_000, "only {accepted} inputs parsed");
}

fn sample_frames() -> Vec<Frame> {
    let sub: Subscription = SEEDS[0].parse().expect("valid");
    let publication: Publication = SEEDS[1].parse().expect("valid");
    vec![
        Frame::Request { req: 1, message: Message::Subscribe(sub) },
        Frame::Request {
            req: 2,
            message: SEEDS[2]
                .parse::<padres_lang::CompositeSubscription>()
                .map(Message::CompositeSubscribe)
                .expect("valid"),
        },
        Frame::Notification {
            subs: vec!["B1/7".parse().expect("id"), "B2/1".parse().expect("id")],
            publication: Arc::new(publication),
        },
        Frame::Ok { req: 3, id: Some("B2/9".parse().expect("id")) },
        Frame::Bye { code: CloseCode::ShuttingDown, reason: "shutting down".into() },
    ]
}

#[test]
fn the_decoder_never_panics_on_random_bytes() {
    let mut rng = Rng(fastrand::Rng::with_seed(0x5eed_0002));
    let mut valid = Vec::new();
    for frame in sample_frames() {
        let mut bytes = Vec::new();
        wire::encode(&frame, DEFAULT_MAX_FRAME, &mut bytes).expect("encodes");
        valid.push(bytes);
    }
    let mut outcomes = [0_usize; 4];
    for _ in 0..100_000 {
        let bytes: Vec<u8> = if rng.below(2) == 0 {
            // Random bytes behind a length prefix that fits them (or not).
            let len = rng.below(64);
            let mut b = ((len + rng.below(3)) as u32).to_be_bytes().to_vec();
            b.extend((0..len).map(|_| rng.0.u8(..)));
            b
        } else {
            // A valid frame with a few bytes changed.
            let mut b = rng.pick(&valid).clone();
            for _ in 0..1 + rng.below(3) {
                let at = PREFIX_LEN + rng.below(b.len() - PREFIX_LEN);
                b[at] = rng.0.u8(..);
            }
            b
        };
        let slot = match wire::decode(&bytes, DEFAULT_MAX_FRAME) {
            Ok(_) => 0,
            Err(DecodeError::Incomplete { .. }) => 1,
            Err(DecodeError::TooLarge { .. }) => 2,
            Err(_) => 3,
        };
        outcomes[slot] += 1;
    }
    assert!(outcomes[0] > 0 && outcomes[1] > 0 && outcomes[3] > 0, "{outcomes:?}");
}

#[test]
fn a_frame_announcing_4_gib_is_refused_from_its_prefix() {
    let prefix = u32::MAX.to_be_bytes();
    assert_eq!(
        wire::decode(&prefix, DEFAULT_MAX_FRAME),
        Err(DecodeError::TooLarge { len: u32::MAX as usize, max: DEFAULT_MAX_FRAME })
    );
    let mut reader = FrameReader::new(DEFAULT_MAX_FRAME);
    reader.push(&prefix);
    assert!(matches!(reader.next_frame(), Err(DecodeError::TooLarge { .. })));
    // Just over the configured maximum is refused too; exactly at it waits for the body.
    let over = ((DEFAULT_MAX_FRAME + 1) as u32).to_be_bytes();
    assert!(matches!(wire::decode(&over, DEFAULT_MAX_FRAME), Err(DecodeError::TooLarge { .. })));
    let at = (DEFAULT_MAX_FRAME as u32).to_be_bytes();
    assert_eq!(
        wire::decode(&at, DEFAULT_MAX_FRAME),
        Err(DecodeError::Incomplete { needed: PREFIX_LEN + DEFAULT_MAX_FRAME })
    );
    assert_eq!(wire::decode(&[0, 0], DEFAULT_MAX_FRAME), Err(DecodeError::Incomplete { needed: PREFIX_LEN }));
}

#[test]
fn frames_fed_one_byte_at_a_time_decode_the_same() {
    let frames = sample_frames();
    let mut stream = Vec::new();
    for frame in &frames {
        wire::encode(frame, DEFAULT_MAX_FRAME, &mut stream).expect("encodes");
    }
    let mut reader = FrameReader::new(DEFAULT_MAX_FRAME);
    let mut decoded = Vec::new();
    for byte in &stream {
        reader.push(std::slice::from_ref(byte));
        while let Some(frame) = reader.next_frame().expect("valid stream") {
            decoded.push(frame);
        }
    }
    assert_eq!(decoded, frames);
    assert_eq!(reader.buffered(), 0);
}

#[test]
fn encoding_refuses_frames_over_the_maximum() {
    let big: Publication = format!("[class,'blob'],[text,'{}']", "x".repeat(2000)).parse().expect("valid");
    let frame = Frame::Notification { subs: vec!["B1/1".parse().expect("id")], publication: Arc::new(big) };
    let mut out = vec![7];
    let error = wire::encode(&frame, 1000, &mut out).expect_err("too large");
    assert!(matches!(error, wire::EncodeError::TooLarge { max: 1000, .. }), "{error}");
    assert_eq!(out, [7], "a failed encode leaves the buffer as it was");
}

#[test]
fn frames_of_many_small_integers_decode() {
    // bincode counts each integer at its in-memory size; the decode limit must allow for
    // that (a 1-byte varint counts as 8).
    let attrs: String = (0..200).map(|i| format!(",[a{i},{}]", i % 100)).collect();
    let publication: Publication = format!("[class,'many']{attrs}").parse().expect("valid");
    let frame =
        Frame::Notification { subs: vec!["B1/1".parse().expect("id")], publication: Arc::new(publication) };
    let mut bytes = Vec::new();
    wire::encode(&frame, DEFAULT_MAX_FRAME, &mut bytes).expect("encodes");
    assert_eq!(wire::decode(&bytes, DEFAULT_MAX_FRAME).map(|(f, _)| f), Ok(frame));
}

#[test]
fn invalid_messages_do_not_get_past_the_decoder() {
    // A subscription without class, encoded by hand through the same serde shape.
    #[derive(serde::Serialize)]
    enum FakeFrame {
        _Hello,
        _Welcome,
        Request { req: u64, message: FakeMessage },
    }
    #[derive(serde::Serialize)]
    enum FakeMessage {
        _Advertise,
        Subscribe { predicates: Vec<(String, padres_lang::Op, padres_lang::Operand)> },
    }
    let operand = padres_lang::Operand::Value(padres_lang::Value::Int(1));
    let frame = FakeFrame::Request {
        req: 1,
        message: FakeMessage::Subscribe { predicates: vec![("price".into(), padres_lang::Op::Gt, operand)] },
    };
    let body = bincode::serde::encode_to_vec(&frame, bincode::config::standard()).expect("encodes");
    let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
    bytes.extend(body);
    let error = wire::decode(&bytes, DEFAULT_MAX_FRAME).expect_err("no class");
    assert!(error.to_string().contains("needs exactly one [class,eq"), "{error}");
}
