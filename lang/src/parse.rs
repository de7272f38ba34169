//! The text syntax: PADRES messages plus our extensions.
//!
//! ```text
//! subscription   [class,eq,'stock'],[symbol,eq,"IBM"],[price,<=,123.45]
//! advertisement  [class,eq,'stock'],[symbol,isPresent,''],[price,>,0]
//! publication    [class,'stock'],[symbol,'IBM'],[price,100.3] payload=0x6869
//! composite      {[class,eq,'trigger'],[appl,eq,$S$a]} & {[class,eq,'job_status'],[appl,eq,$S$a]}
//!                Times({[class,eq,'temp'],[v,>,10]},3,v,1)
//! ```
//!
//! Grammar (whitespace is allowed between any two tokens):
//!
//! ```text
//! filter      = predicate { "," predicate }
//! predicate   = "[" name "," operator "," operand "]"
//! publication = pair { "," pair } [ "payload=0x" hex ]
//! pair        = "[" name "," value "]"
//! composite   = pattern [ "within" duration ] [ "until" "{" filter "}" ]
//! pattern     = term { op term }          -- one operator per chain, left-associative
//! term        = "{" filter "}" | "{" pattern "}"
//!             | "Times(" "{" filter "}" "," count "," name "," number ")"
//! op          = "&" | "||" | ";"
//! duration    = digits ( "ms" | "s" | "m" | "h" | "d" )
//! operand     = value | "$S$" ident | "$I$" ident
//! value       = 'quoted' | "quoted" | bareword
//! ```
//!
//! A bareword is a number if it looks like one (`-10.9`, `110`, `1e6`), a boolean if it is
//! `true` or `false`, a timestamp if it is RFC 3339 (`2026-11-21T10:00:00Z`), and otherwise
//! a string (`[class,eq,stock]`, as PADRES allows). Quoted text is always a string; quotes
//! take the escapes `\\ \' \" \n \t \r \0 \u{hex}`. Errors name the column and what was
//! expected there.
//!
//! Under a numeric comparison (`= <> < <= > >=`), the string `now`, `now-DURATION` or
//! `now+DURATION` (`[time,>=,'now-1h']`) is a time relative to when the text is read: a
//! parser made with [`Parser::at`] turns it into that timestamp; any other parser refuses it
//! ([`crate::time`]).

use std::str::FromStr;

use bytes::Bytes;

use crate::composite::{CompositeOp, CompositeSubscription, Node};
use crate::error::{InvalidMessage, ParseError, ParseErrorKind};
use crate::id::MessageId;
use crate::limits::Limits;
use crate::message::Message;
use crate::name::{Name, is_ident_char, is_ident_start};
use crate::predicate::{Op, Operand, Pattern, Predicate, VarKind, Variable};
use crate::publication::Publication;
use crate::subscription::{Advertisement, Subscription};
use crate::time;
use crate::value::{Timestamp, Value};

/// Parses messages under a set of [`Limits`]. `FromStr` on each message type uses
/// `Parser::default()`.
#[derive(Clone, Debug, Default)]
pub struct Parser {
    limits: Limits,
    now: Option<Timestamp>,
}

impl Parser {
    /// A parser enforcing `limits` (clamped to the defaults, see [`Limits`]).
    pub fn new(limits: Limits) -> Self {
        Self { limits: limits.clamped(), now: None }
    }

    /// The same parser, resolving relative times (`'now-1h'`) against `now`: what a client
    /// uses when it issues a subscription.
    #[must_use]
    pub fn at(mut self, now: Timestamp) -> Self {
        self.now = Some(now);
        self
    }

    /// Parses a subscription: `[class,eq,'stock'],[price,>,100]`.
    pub fn subscription(&self, text: &str) -> Result<Subscription, ParseError> {
        self.whole(text, |c| c.subscription())
    }

    /// Parses an advertisement: `[class,eq,'stock'],[price,>,0]`.
    pub fn advertisement(&self, text: &str) -> Result<Advertisement, ParseError> {
        self.whole(text, |c| c.advertisement())
    }

    /// Parses a publication: `[class,'stock'],[price,100.3]`.
    pub fn publication(&self, text: &str) -> Result<Publication, ParseError> {
        self.whole(text, |c| c.publication())
    }

    /// Parses a composite subscription: `{[class,eq,a]}&{[class,eq,b]}`.
    pub fn composite(&self, text: &str) -> Result<CompositeSubscription, ParseError> {
        self.whole(text, |c| c.composite())
    }

    /// Parses a message in its command form, e.g. `s [class,eq,'stock']` (see
    /// [`Message`]).
    pub fn message(&self, text: &str) -> Result<Message, ParseError> {
        self.whole(text, |c| c.message())
    }

    fn whole<T>(
        &self,
        text: &str,
        parse: impl FnOnce(&mut Cursor<'_>) -> Result<T, ParseError>,
    ) -> Result<T, ParseError> {
        let mut cursor = Cursor { src: text, pos: 0, limits: &self.limits, now: self.now };
        if text.len() > self.limits.max_text_len {
            return Err(cursor.error(0, ParseErrorKind::TooLong(self.limits.max_text_len)));
        }
        let value = parse(&mut cursor)?;
        cursor.skip_ws();
        if cursor.pos < text.len() {
            return Err(cursor.error(cursor.pos, ParseErrorKind::Expected("end of input")));
        }
        Ok(value)
    }
}

macro_rules! from_str_via {
    ($ty:ty, $method:ident) => {
        impl FromStr for $ty {
            type Err = ParseError;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Parser::default().$method(text)
            }
        }
    };
}
from_str_via!(Subscription, subscription);
from_str_via!(Advertisement, advertisement);
from_str_via!(Publication, publication);
from_str_via!(CompositeSubscription, composite);
from_str_via!(Message, message);

/// Characters that end a bareword.
fn ends_bareword(c: char) -> bool {
    c.is_whitespace()
        || matches!(c, ',' | '[' | ']' | '{' | '}' | '(' | ')' | '\'' | '"' | '$' | ';' | '&' | '|')
}

struct Cursor<'a> {
    src: &'a str,
    pos: usize,
    limits: &'a Limits,
    now: Option<Timestamp>,
}

impl<'a> Cursor<'a> {
    fn error(&self, pos: usize, kind: ParseErrorKind) -> ParseError {
        let column = self.src[..pos.min(self.src.len())].chars().count() + 1;
        ParseError { column, kind }
    }

    fn invalid(&self, pos: usize, why: InvalidMessage) -> ParseError {
        self.error(pos, ParseErrorKind::Invalid(why))
    }

    fn expected(&self, what: &'static str) -> ParseError {
        self.error(self.pos, ParseErrorKind::Expected(what))
    }

    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// Skips whitespace, then consumes `token` if it comes next.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str, what: &'static str) -> Result<(), ParseError> {
        if self.eat(token) { Ok(()) } else { Err(self.expected(what)) }
    }

    /// Consumes characters while `keep` holds and returns them.
    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> &'a str {
        let src: &'a str = self.src;
        let rest = &src[self.pos..];
        let len = rest.find(|c| !keep(c)).unwrap_or(rest.len());
        let start = self.pos;
        self.pos += len;
        &src[start..self.pos]
    }

    fn name(&mut self, what: &'static str) -> Result<Name, ParseError> {
        self.skip_ws();
        let start = self.pos;
        if !self.peek().is_some_and(is_ident_start) {
            return Err(self.expected(what));
        }
        let text = self.take_while(is_ident_char);
        Name::interned(text).map_err(|e| self.invalid(start, e))
    }

    /// `predicate { "," predicate }`, stopping before anything that is not a `,`.
    fn filter(&mut self, variables: bool, first: &'static str) -> Result<Vec<Predicate>, ParseError> {
        let mut predicates = Vec::new();
        self.skip_ws();
        if self.peek() != Some('[') {
            return Err(self.expected(first));
        }
        loop {
            self.skip_ws();
            if predicates.len() == self.limits.max_predicates {
                let limit = self.limits.max_predicates;
                return Err(
                    self.invalid(self.pos, InvalidMessage::TooLarge { what: "number of predicates", limit })
                );
            }
            predicates.push(self.predicate(variables)?);
            self.skip_ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some('[') => return Err(self.expected("',' after predicate")),
                _ => return Ok(predicates),
            }
        }
    }

    fn predicate(&mut self, variables: bool) -> Result<Predicate, ParseError> {
        self.expect("[", "'[' to start a predicate")?;
        let attr = self.name("an attribute name after '['")?;
        self.expect(",", "',' after attribute name")?;
        self.skip_ws();
        let op_start = self.pos;
        let op_text = self.take_while(|c| !(c.is_whitespace() || matches!(c, ',' | ']' | '[')));
        if op_text.is_empty() {
            return Err(self.expected("an operator after ','"));
        }
        let op = Op::from_text(op_text)
            .ok_or_else(|| self.error(op_start, ParseErrorKind::UnknownOperator(op_text.to_owned())))?;
        self.expect(",", "',' after operator")?;
        self.skip_ws();
        let value_start = self.pos;
        let operand = if self.peek() == Some('$') {
            if !variables {
                return Err(self.invalid(value_start, InvalidMessage::VariableNotAllowed("advertisements")));
            }
            Operand::Var(self.variable()?)
        } else {
            let value = self.value("a value after the operator")?;
            match (op, value) {
                (Op::StrRegex, Value::Str(source)) => Operand::Regex(
                    Pattern::new(&source, self.limits).map_err(|e| self.invalid(value_start, e))?,
                ),
                (Op::NumEq | Op::NumNe | Op::Lt | Op::Le | Op::Gt | Op::Ge, Value::Str(text))
                    if time::relative(&text).is_some() =>
                {
                    let Some(now) = self.now else {
                        return Err(self.invalid(value_start, InvalidMessage::RelativeTime(text.to_string())));
                    };
                    let at = time::resolve(&text, now).map_err(|e| self.invalid(value_start, e))?;
                    Operand::Value(Value::Time(at))
                }
                // Strings where a number or timestamp belongs, written as if they were
                // times: say what is wrong with the time, not only that it is a string.
                (Op::NumEq | Op::NumNe | Op::Lt | Op::Le | Op::Gt | Op::Ge, Value::Str(text))
                    if text.starts_with("now") || Timestamp::parse_rfc3339(&text).is_ok() =>
                {
                    let why = if text.starts_with("now") {
                        InvalidMessage::BadRelativeTime(clip(&text))
                    } else {
                        InvalidMessage::QuotedTimestamp(clip(&text))
                    };
                    return Err(self.invalid(value_start, why));
                }
                (_, value) => Operand::Value(value),
            }
        };
        let predicate = Predicate::new(attr, op, operand).map_err(|e| self.invalid(value_start, e))?;
        self.expect("]", "']' after the value")?;
        Ok(predicate)
    }

    fn variable(&mut self) -> Result<Variable, ParseError> {
        let kind = if self.rest().starts_with("$S$") {
            VarKind::Str
        } else if self.rest().starts_with("$I$") {
            VarKind::Num
        } else {
            return Err(self.expected("a variable $S$name (string) or $I$name (number)"));
        };
        self.pos += 3;
        if !self.peek().is_some_and(is_ident_start) {
            return Err(self.expected("a variable name (a letter or '_' first) after '$S$' or '$I$'"));
        }
        let start = self.pos;
        let text = self.take_while(is_ident_char);
        let name = Name::interned(text).map_err(|e| self.invalid(start, e))?;
        Ok(Variable { kind, name })
    }

    fn value(&mut self, what: &'static str) -> Result<Value, ParseError> {
        self.skip_ws();
        let start = self.pos;
        match self.peek() {
            Some(q @ ('\'' | '"')) => self.quoted(q).map(|s| Value::Str(s.into())),
            _ => {
                let word = self.take_while(|c| !ends_bareword(c));
                if word.is_empty() {
                    return Err(self.error(start, ParseErrorKind::Expected(what)));
                }
                classify_bareword(word).map_err(|kind| self.error(start, kind))
            }
        }
    }

    fn quoted(&mut self, quote: char) -> Result<String, ParseError> {
        let open = self.pos;
        self.pos += quote.len_utf8();
        let src: &'a str = self.src;
        let mut out = String::new();
        let mut chars = src[self.pos..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.pos += i + c.len_utf8();
                    return Ok(out);
                }
                '\\' => {
                    let at = self.pos + i;
                    let bad = |why| self.error(at, ParseErrorKind::BadString(why));
                    match chars.next().map(|(_, e)| e) {
                        Some('\\') => out.push('\\'),
                        Some('\'') => out.push('\''),
                        Some('"') => out.push('"'),
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some('r') => out.push('\r'),
                        Some('0') => out.push('\0'),
                        Some('u') => {
                            if chars.next().map(|(_, c)| c) != Some('{') {
                                return Err(bad("expected '{' after \\u"));
                            }
                            let mut hex = String::new();
                            loop {
                                match chars.next().map(|(_, c)| c) {
                                    Some('}') => break,
                                    Some(h) if h.is_ascii_hexdigit() && hex.len() < 6 => hex.push(h),
                                    _ => return Err(bad("\\u{...} takes 1 to 6 hex digits")),
                                }
                            }
                            let c = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| bad("\\u{...} is not a Unicode scalar value"))?;
                            out.push(c);
                        }
                        _ => return Err(bad("unknown escape (use \\\\ \\' \\\" \\n \\t \\r \\0 \\u{hex})")),
                    }
                }
                c => out.push(c),
            }
        }
        Err(self.error(open, ParseErrorKind::BadString("missing closing quote")))
    }

    fn subscription(&mut self) -> Result<Subscription, ParseError> {
        let start = self.pos;
        let predicates = self.filter(true, "a predicate")?;
        Subscription::new(predicates).map_err(|e| self.invalid(start, e))
    }

    fn publication(&mut self) -> Result<Publication, ParseError> {
        let start = self.pos;
        let mut attrs: Vec<(Name, Value)> = Vec::new();
        loop {
            self.skip_ws();
            let pair_start = self.pos;
            if attrs.len() == self.limits.max_predicates {
                let limit = self.limits.max_predicates;
                return Err(self
                    .invalid(pair_start, InvalidMessage::TooLarge { what: "number of attributes", limit }));
            }
            self.expect("[", "'[' to start an attribute")?;
            let name = self.name("an attribute name after '['")?;
            if attrs.iter().any(|(n, _)| *n == name) {
                return Err(self.invalid(pair_start, InvalidMessage::DuplicateAttribute(name.to_string())));
            }
            self.expect(",", "',' after attribute name")?;
            let value = self.value("a value after ','")?;
            self.expect("]", "']' after the value (a publication attribute is written [name,value])")?;
            attrs.push((name, value));
            self.skip_ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some('[') => return Err(self.expected("',' after attribute")),
                _ => break,
            }
        }
        let payload = if self.eat("payload=") { Some(self.hex()?) } else { None };
        let publication = Publication::new(attrs).map_err(|e| self.invalid(start, e))?;
        Ok(match payload {
            Some(bytes) => publication.with_payload(bytes),
            None => publication,
        })
    }

    fn hex(&mut self) -> Result<Bytes, ParseError> {
        if !self.rest().starts_with("0x") {
            return Err(self.expected("0x and hex digits after 'payload='"));
        }
        self.pos += 2;
        let start = self.pos;
        let digits = self.take_while(|c| c.is_ascii_hexdigit());
        if !digits.len().is_multiple_of(2) {
            return Err(self.error(start, ParseErrorKind::Expected("an even number of hex digits")));
        }
        let bytes = digits
            .as_bytes()
            .chunks(2)
            .map(|pair| {
                // Both are ASCII hex digits, checked above.
                let text = std::str::from_utf8(pair).unwrap_or("00");
                u8::from_str_radix(text, 16).unwrap_or(0)
            })
            .collect::<Vec<u8>>();
        Ok(Bytes::from(bytes))
    }

    fn composite(&mut self) -> Result<CompositeSubscription, ParseError> {
        let start = self.pos;
        let mut nodes = Vec::new();
        self.expr(&mut nodes, 0)?;
        let mut cs =
            CompositeSubscription::with_limits(nodes, self.limits).map_err(|e| self.invalid(start, e))?;
        self.skip_ws();
        if self.eat_word("within") {
            self.skip_ws();
            let window_start = self.pos;
            let window = self.duration()?;
            cs = cs.within(window).map_err(|e| self.invalid(window_start, e))?;
            self.skip_ws();
        }
        if self.eat_word("until") {
            self.skip_ws();
            let until_start = self.pos;
            self.expect("{", "'{' before the until filter")?;
            let until = self.subscription()?;
            self.expect("}", "',' or '}' after the until filter")?;
            cs = cs.until(until).map_err(|e| self.invalid(until_start, e))?;
        }
        Ok(cs)
    }

    /// `word` followed by something that cannot continue it.
    fn eat_word(&mut self, word: &str) -> bool {
        let rest = self.rest();
        let ends =
            rest[word.len().min(rest.len())..].chars().next().is_none_or(|c| !c.is_ascii_alphanumeric());
        rest.starts_with(word) && ends && self.eat(word)
    }

    /// A duration: digits and a unit, `ms`, `s`, `m`, `h` or `d`, in milliseconds.
    fn duration(&mut self) -> Result<u64, ParseError> {
        let start = self.pos;
        let text = self.take_while(|c| c.is_ascii_alphanumeric());
        time::parse_duration(text).ok_or_else(|| {
            self.error(start, ParseErrorKind::Expected("a duration such as 500ms, 30s, 10m, 2h or 7d"))
        })
    }

    /// `term { op term }`; appends the nodes in post-order and returns the root's index.
    fn expr(&mut self, nodes: &mut Vec<Node>, depth: usize) -> Result<u32, ParseError> {
        let mut left = self.term(nodes, depth)?;
        let mut chain: Option<CompositeOp> = None;
        loop {
            self.skip_ws();
            let op_start = self.pos;
            let op = if self.eat("&") {
                CompositeOp::And
            } else if self.eat("||") {
                CompositeOp::Or
            } else if self.eat(";") {
                CompositeOp::Seq
            } else {
                return Ok(left);
            };
            if chain.is_some_and(|first| first != op) {
                return Err(self.error(op_start, ParseErrorKind::MixedOperators));
            }
            chain = Some(op);
            let right = self.term(nodes, depth)?;
            nodes.push(Node::Binary { op, left, right });
            left = self.node_index(nodes)?;
        }
    }

    fn node_index(&self, nodes: &[Node]) -> Result<u32, ParseError> {
        let limit = self.limits.max_composite_nodes;
        match u32::try_from(nodes.len() - 1) {
            Ok(i) if nodes.len() <= limit => Ok(i),
            _ => {
                Err(self
                    .invalid(self.pos, InvalidMessage::TooLarge { what: "number of composite nodes", limit }))
            }
        }
    }

    fn term(&mut self, nodes: &mut Vec<Node>, depth: usize) -> Result<u32, ParseError> {
        self.skip_ws();
        let start = self.pos;
        if self.eat("Times(") {
            return self.times(nodes);
        }
        if !self.eat("{") {
            return Err(self.expected("'{' or 'Times(' to start a composite term"));
        }
        if depth + 1 > self.limits.max_composite_depth {
            return Err(self.error(start, ParseErrorKind::TooDeep(self.limits.max_composite_depth)));
        }
        self.skip_ws();
        if self.peek() == Some('[') {
            let sub = self.subscription()?;
            nodes.push(Node::Leaf(sub));
            self.expect("}", "',' or '}' after predicate")?;
            self.node_index(nodes)
        } else {
            let index = self.expr(nodes, depth + 1)?;
            self.expect("}", "'}' to close the composite term")?;
            Ok(index)
        }
    }

    fn times(&mut self, nodes: &mut Vec<Node>) -> Result<u32, ParseError> {
        self.expect("{", "'{' before the repeated subscription in Times(...)")?;
        let sub = self.subscription()?;
        self.expect("}", "'}' after the repeated subscription")?;
        self.expect(",", "',' after the repeated subscription")?;
        self.skip_ws();
        let count_start = self.pos;
        let count = match self.value("a repetition count")? {
            Value::Int(n) => u32::try_from(n).ok().filter(|n| *n >= 1),
            _ => None,
        }
        .ok_or_else(|| {
            self.error(count_start, ParseErrorKind::Expected("a repetition count of at least 1"))
        })?;
        self.expect(",", "',' after the repetition count")?;
        let attr = self.name("the name of the stepping attribute")?;
        self.expect(",", "',' after the stepping attribute")?;
        self.skip_ws();
        let step_start = self.pos;
        let step = self.value("a numeric step")?;
        if !matches!(step, Value::Int(_) | Value::Float(_)) {
            return Err(self.error(step_start, ParseErrorKind::Expected("a numeric step")));
        }
        self.expect(")", "')' to close Times(...)")?;
        nodes.push(Node::Times { sub, count, attr, step });
        self.node_index(nodes)
    }

    fn message(&mut self) -> Result<Message, ParseError> {
        self.skip_ws();
        let word_start = self.pos;
        let word = self.take_while(|c| c.is_ascii_alphabetic());
        let message = match word {
            "a" => Message::Advertise(self.advertisement()?),
            "s" => Message::Subscribe(self.subscription()?),
            "cs" => Message::CompositeSubscribe(self.composite()?),
            "p" => Message::Publish(self.publication()?),
            "unsub" | "unadv" => {
                self.skip_ws();
                let id_start = self.pos;
                let text = self.take_while(|c| !c.is_whitespace());
                if text.is_empty() {
                    return Err(self.expected("a message id such as B1/42"));
                }
                let id = MessageId::from_str(text).map_err(|e| self.invalid(id_start, e))?;
                if word == "unsub" { Message::Unsubscribe(id) } else { Message::Unadvertise(id) }
            }
            _ => {
                return Err(self
                    .error(word_start, ParseErrorKind::Expected("a command: a, s, cs, p, unsub or unadv")));
            }
        };
        Ok(message)
    }

    fn advertisement(&mut self) -> Result<Advertisement, ParseError> {
        let start = self.pos;
        let predicates = self.filter(false, "a predicate")?;
        Advertisement::new(predicates).map_err(|e| self.invalid(start, e))
    }
}

/// Decides what a bareword is (see the module docs).
fn classify_bareword(word: &str) -> Result<Value, ParseErrorKind> {
    let out_of_range = || ParseErrorKind::NumberOutOfRange(word.chars().take(64).collect());
    match word {
        "true" => return Ok(Value::Bool(true)),
        "false" => return Ok(Value::Bool(false)),
        _ => {}
    }
    let unsigned = word.strip_prefix(['+', '-']).unwrap_or(word);
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return word.parse::<i64>().map(Value::Int).map_err(|_| out_of_range());
    }
    if looks_like_float(unsigned) {
        return match word.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Float(f)),
            _ => Err(out_of_range()),
        };
    }
    let b = word.as_bytes();
    let looks_like_time =
        b.len() >= 11 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && word.contains(['T', 't']);
    if looks_like_time {
        return Timestamp::parse_rfc3339(word).map(Value::Time).map_err(ParseErrorKind::Invalid);
    }
    Ok(Value::str(word))
}

/// At most 64 characters of `text`, for an error message.
fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

/// `digits "." digits? | "." digits | digits`, then an optional exponent; with at least a
/// `.` or an exponent (plain digits are integers).
fn looks_like_float(text: &str) -> bool {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    });
    let (whole, frac) = match mantissa.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (mantissa, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok =
        digits(whole) && frac.is_none_or(digits) && !(whole.is_empty() && frac.is_none_or(str::is_empty));
    exponent_ok && mantissa_ok && (frac.is_some() || exponent.is_some())
}
