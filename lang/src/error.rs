//! Errors of the message model and of the text syntax.

use std::fmt;

use crate::predicate::Op;
use crate::value::Kind;

/// Why a message, or a part of one, is not valid. Raised by constructors, by the parser and
/// when a decoded frame is checked, so that an invalid message never enters a broker.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidMessage {
    /// A name is not an identifier.
    #[error(
        "'{0}' is not a valid name: names start with a letter or '_' and continue with letters, digits, '_', '.' or '-'"
    )]
    BadName(String),
    /// A float is NaN or infinite.
    #[error("numbers must be finite")]
    NonFiniteFloat,
    /// A timestamp is malformed or out of range.
    #[error(
        "invalid timestamp '{0}': expected RFC 3339 such as 2026-11-21T10:00:00Z, years 0000 to 9999, at most millisecond precision"
    )]
    BadTimestamp(String),
    /// An operator was given an operand it cannot compare.
    #[error("operator '{op}' {expects}, but {found} is a {kind}")]
    OperandType {
        /// The operator.
        op: Op,
        /// What the operator takes, in words.
        expects: &'static str,
        /// The operand as written.
        found: String,
        /// The operand's kind.
        kind: Kind,
    },
    /// A variable was used with an operator other than `eq` (`$S$`) or `=` (`$I$`).
    #[error("variable {var} can only be used with '{expected}'")]
    VariableOperator {
        /// The variable as written.
        var: String,
        /// The operator it needs.
        expected: &'static str,
    },
    /// A variable appeared where none is allowed.
    #[error("variables are not allowed in {0}")]
    VariableNotAllowed(&'static str),
    /// A variable was used both as a string and as a number.
    #[error("variable '{0}' is used both as $S$ (string) and as $I$ (number)")]
    VariableKindConflict(String),
    /// A regular expression did not compile or exceeds the configured limits.
    #[error("invalid regular expression: {0}")]
    Regex(String),
    /// A subscription or advertisement lacks its `[class,eq,'…']` predicate.
    #[error("{0} needs exactly one [class,eq,'...'] predicate")]
    MissingClass(&'static str),
    /// The `class` predicate does not use `eq` with a string.
    #[error("the class predicate must be [class,eq,'name'] (operator eq, a string value)")]
    BadClass,
    /// A publication has no `class` attribute with a string value.
    #[error("a publication needs a [class,'name'] attribute with a string value")]
    PublicationClass,
    /// A publication names an attribute twice.
    #[error("attribute '{0}' appears twice")]
    DuplicateAttribute(String),
    /// A message has no predicates or attributes at all.
    #[error("{0} is empty")]
    Empty(&'static str),
    /// A size limit was exceeded.
    #[error("{what} exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The limit in force.
        limit: usize,
    },
    /// `Times(S, n, attr, step)` with a bad count or step.
    #[error("Times(S, n, attr, step) needs n of at least 1 and a finite numeric step")]
    BadRepetition,
    /// An `until` filter names a variable the pattern does not bind.
    #[error("the until filter's variable {0} is not bound by the pattern")]
    UnboundUntilVariable(String),
    /// A composite subscription's node list is not a tree in canonical post-order.
    #[error("malformed composite subscription: {0}")]
    MalformedComposite(&'static str),
    /// The reserved `time` attribute of a publication is not a timestamp.
    #[error("the reserved attribute 'time' must be a timestamp such as 2026-11-20T10:00:00Z, not {0}")]
    TimeAttribute(String),
    /// A predicate on `time` does not compare numbers or timestamps.
    #[error(
        "a predicate on the reserved attribute 'time' must compare timestamps, e.g. [time,>=,2026-11-20T10:00:00Z] or [time,>=,'now-1h'], not {0}"
    )]
    TimePredicate(String),
    /// A relative time (`'now-1h'`) where no clock resolves it.
    #[error(
        "relative time '{0}' is resolved when the subscription is issued, and this parser has no clock (use Parser::at)"
    )]
    RelativeTime(String),
    /// A string that starts like a relative time (`'now…'`) but is not one.
    #[error(
        "invalid relative time '{0}': expected 'now', 'now-DURATION' or 'now+DURATION', a duration being digits and a unit ms, s, m, h or d, e.g. 'now-90m'"
    )]
    BadRelativeTime(String),
    /// An RFC 3339 timestamp written in quotes, which makes it a string.
    #[error(
        "the timestamp '{0}' is quoted, which makes it a string: write it without quotes, e.g. [time,>=,2026-11-20T10:00:00Z]"
    )]
    QuotedTimestamp(String),
    /// A time bound on a command line that does not parse.
    #[error(
        "invalid time bound '{0}': expected a duration ago (1h, 30m, 7d), now-DURATION, epoch milliseconds, or RFC 3339 such as 2026-11-20T10:00:00Z"
    )]
    BadTimeBound(String),
    /// A message id is malformed.
    #[error("invalid message id '{0}': expected BROKER/NUMBER, e.g. B1/42")]
    BadId(String),
}

/// A syntax error: where it is, and what was wrong there.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind} at column {column}")]
pub struct ParseError {
    /// 1-based column, counted in characters.
    pub column: usize,
    /// What went wrong.
    pub kind: ParseErrorKind,
}

/// What a [`ParseError`] is about.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// Something else was expected here, e.g. `expected ',' after predicate`.
    Expected(&'static str),
    /// An operator that does not exist.
    UnknownOperator(String),
    /// A number that does not fit (`i64`, or a finite `f64`).
    NumberOutOfRange(String),
    /// A quoted string without its closing quote, or with a bad escape.
    BadString(&'static str),
    /// Composite subscriptions nested deeper than the limit.
    TooDeep(usize),
    /// The text is longer than the limit.
    TooLong(usize),
    /// `&`, `||` and `;` mixed in one chain without braces.
    MixedOperators,
    /// The message is well-formed text but not a valid message.
    Invalid(InvalidMessage),
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expected(what) => write!(f, "expected {what}"),
            Self::UnknownOperator(op) => write!(
                f,
                "unknown operator '{op}' (expected one of eq neq str-lt str-le str-gt str-ge \
                 str-prefix str-postfix str-contains str-regex = <> < <= > >= isPresent)"
            ),
            Self::NumberOutOfRange(n) => write!(f, "number '{n}' is out of range"),
            Self::BadString(why) => write!(f, "bad string: {why}"),
            Self::TooDeep(limit) => {
                write!(f, "composite subscription nested deeper than {limit} levels")
            }
            Self::TooLong(limit) => write!(f, "text longer than the limit of {limit} bytes"),
            Self::MixedOperators => {
                write!(f, "'&', '||' and ';' cannot be mixed without braces: write {{A}}&{{{{B}}||{{C}}}}")
            }
            Self::Invalid(why) => write!(f, "{why}"),
        }
    }
}
