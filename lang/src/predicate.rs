//! Predicates `[attribute,operator,operand]`, their operators and operands.
//!
//! A predicate is type-checked when it is made: string operators take strings, numeric
//! operators take numbers, `eq`/`neq`/`=`/`<>` also take booleans, `str-regex` takes a
//! pattern compiled under [`Limits`], `isPresent` takes any value (kept for the PADRES
//! spelling `[symbol,isPresent,'']`, ignored when matching), and variables go with `eq`
//! (`$S$x`) or `=` (`$I$x`) only.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::InvalidMessage;
use crate::limits::Limits;
use crate::name::Name;
use crate::value::{Kind, Value};

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// `eq`: string (or boolean) equality.
    Eq,
    /// `neq`: string (or boolean) inequality.
    Neq,
    /// `str-lt`: lexicographically less (by Unicode scalar values).
    StrLt,
    /// `str-le`.
    StrLe,
    /// `str-gt`.
    StrGt,
    /// `str-ge`.
    StrGe,
    /// `str-prefix`: the value starts with the operand.
    StrPrefix,
    /// `str-postfix`: the value ends with the operand.
    StrPostfix,
    /// `str-contains`: the value contains the operand.
    StrContains,
    /// `str-regex`: the pattern matches somewhere in the value (anchor it with `^`/`$`).
    StrRegex,
    /// `=`: numeric (or boolean) equality.
    NumEq,
    /// `<>`: numeric (or boolean) inequality.
    NumNe,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `isPresent`: the attribute exists, with any value.
    IsPresent,
}

impl Op {
    /// Every operator, in the order the syntax documentation lists them.
    pub const ALL: [Self; 17] = [
        Self::Eq,
        Self::Neq,
        Self::StrLt,
        Self::StrLe,
        Self::StrGt,
        Self::StrGe,
        Self::StrPrefix,
        Self::StrPostfix,
        Self::StrContains,
        Self::StrRegex,
        Self::NumEq,
        Self::NumNe,
        Self::Lt,
        Self::Le,
        Self::Gt,
        Self::Ge,
        Self::IsPresent,
    ];

    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Eq => "eq",
            Self::Neq => "neq",
            Self::StrLt => "str-lt",
            Self::StrLe => "str-le",
            Self::StrGt => "str-gt",
            Self::StrGe => "str-ge",
            Self::StrPrefix => "str-prefix",
            Self::StrPostfix => "str-postfix",
            Self::StrContains => "str-contains",
            Self::StrRegex => "str-regex",
            Self::NumEq => "=",
            Self::NumNe => "<>",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Ge => ">=",
            Self::IsPresent => "isPresent",
        }
    }

    /// The operator written as `text`, if any.
    pub fn from_text(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == text)
    }

    /// What the operator takes, in words, for error messages.
    fn expects(self) -> &'static str {
        match self {
            Self::Eq | Self::Neq => "compares strings or booleans (use '=' for numbers)",
            Self::NumEq | Self::NumNe => "compares numbers or booleans (use 'eq' for strings)",
            Self::Lt | Self::Le | Self::Gt | Self::Ge => "compares numbers",
            Self::StrRegex => "takes a regular expression as a string",
            Self::IsPresent => "takes any value",
            _ => "compares strings",
        }
    }

    /// Which value kinds the operator accepts as operand.
    fn accepts(self, kind: Kind) -> bool {
        match self {
            Self::Eq | Self::Neq => matches!(kind, Kind::String | Kind::Bool),
            Self::NumEq | Self::NumNe => matches!(kind, Kind::Number | Kind::Bool),
            Self::Lt | Self::Le | Self::Gt | Self::Ge => kind == Kind::Number,
            Self::IsPresent => true,
            _ => kind == Kind::String,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of a variable: `$S$` binds strings, `$I$` binds numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VarKind {
    /// `$S$name`.
    Str,
    /// `$I$name`.
    Num,
}

/// A variable in a subscription, such as `$S$X`: it binds on first match and must have the
/// same value wherever else it appears.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Variable {
    /// String or number.
    pub kind: VarKind,
    /// The name after the second `$`.
    pub name: Name,
}

impl fmt::Display for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.kind {
            VarKind::Str => "S",
            VarKind::Num => "I",
        };
        write!(f, "${tag}${}", self.name)
    }
}

/// A compiled `str-regex` pattern. Equal when the sources are equal; on the wire only the
/// source travels and is compiled again under the default [`Limits`].
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "Arc<str>", into = "Arc<str>")]
pub struct Pattern {
    source: Arc<str>,
    regex: regex::Regex,
}

impl Pattern {
    /// Compiles `source` within the regex limits of `limits`.
    pub fn new(source: &str, limits: &Limits) -> Result<Self, InvalidMessage> {
        let regex = regex::RegexBuilder::new(source)
            .size_limit(limits.regex_size_limit)
            .nest_limit(limits.regex_nest_limit)
            .build()
            .map_err(|e| InvalidMessage::Regex(one_line(&e.to_string())))?;
        Ok(Self { source: Arc::from(source), regex })
    }

    /// The pattern as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True if the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }
}

/// The regex crate's messages span several lines; a one-line error reads better.
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    joined.trim_end_matches('.').to_owned()
}

impl TryFrom<Arc<str>> for Pattern {
    type Error = InvalidMessage;
    fn try_from(source: Arc<str>) -> Result<Self, Self::Error> {
        Self::new(&source, &Limits::default())
    }
}

impl From<Pattern> for Arc<str> {
    fn from(p: Pattern) -> Self {
        p.source
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.source)
    }
}

/// The right-hand side of a predicate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Operand {
    /// A literal value.
    Value(Value),
    /// A variable (subscriptions only).
    Var(Variable),
    /// A compiled pattern (`str-regex` only).
    Regex(Pattern),
}

/// One `[attribute,operator,operand]` test. Always type-correct (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPredicate")]
pub struct Predicate {
    attr: Name,
    op: Op,
    operand: Operand,
}

#[derive(Deserialize)]
struct RawPredicate {
    attr: Name,
    op: Op,
    operand: Operand,
}

impl TryFrom<RawPredicate> for Predicate {
    type Error = InvalidMessage;
    fn try_from(raw: RawPredicate) -> Result<Self, Self::Error> {
        Self::new(raw.attr, raw.op, raw.operand)
    }
}

impl Predicate {
    /// Makes a predicate, checking that `op` can take `operand`.
    pub fn new(attr: Name, op: Op, operand: Operand) -> Result<Self, InvalidMessage> {
        match (&operand, op) {
            (Operand::Regex(_), Op::StrRegex) => {}
            (Operand::Regex(p), _) => {
                return Err(InvalidMessage::OperandType {
                    op,
                    expects: op.expects(),
                    found: format!("pattern '{}'", p.source()),
                    kind: Kind::String,
                });
            }
            (Operand::Value(v), Op::StrRegex) => {
                // A pattern must be compiled: build it through `Pattern::new`.
                return Err(InvalidMessage::OperandType {
                    op,
                    expects: "takes a compiled pattern (Operand::Regex)",
                    found: v.to_string(),
                    kind: v.kind(),
                });
            }
            (Operand::Value(v), _) => {
                if !v.is_valid() {
                    return Err(InvalidMessage::NonFiniteFloat);
                }
                if !op.accepts(v.kind()) {
                    return Err(InvalidMessage::OperandType {
                        op,
                        expects: op.expects(),
                        found: v.to_string(),
                        kind: v.kind(),
                    });
                }
            }
            (Operand::Var(var), _) => {
                let expected = match var.kind {
                    VarKind::Str => Op::Eq,
                    VarKind::Num => Op::NumEq,
                };
                if op != expected {
                    return Err(InvalidMessage::VariableOperator {
                        var: var.to_string(),
                        expected: expected.as_str(),
                    });
                }
            }
        }
        Ok(Self { attr, op, operand })
    }

    /// Shorthand for a predicate with a literal value.
    pub fn value(attr: &str, op: Op, value: Value) -> Result<Self, InvalidMessage> {
        Self::new(Name::new(attr)?, op, Operand::Value(value))
    }

    /// The attribute tested.
    pub fn attr(&self) -> &Name {
        &self.attr
    }

    /// The operator.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The operand.
    pub fn operand(&self) -> &Operand {
        &self.operand
    }

    /// The literal value, if the operand is one.
    pub fn literal(&self) -> Option<&Value> {
        match &self.operand {
            Operand::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The variable, if the operand is one.
    pub fn variable(&self) -> Option<&Variable> {
        match &self.operand {
            Operand::Var(v) => Some(v),
            _ => None,
        }
    }

    /// The kind of value this predicate can hold for, or `None` for `isPresent` (any).
    pub fn kind(&self) -> Option<Kind> {
        match (&self.operand, self.op) {
            (_, Op::IsPresent) => None,
            (Operand::Value(v), _) => Some(v.kind()),
            (Operand::Var(v), _) => Some(match v.kind {
                VarKind::Str => Kind::String,
                VarKind::Num => Kind::Number,
            }),
            (Operand::Regex(_), _) => Some(Kind::String),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_round_trip_their_spelling() {
        for op in Op::ALL {
            assert_eq!(Op::from_text(op.as_str()), Some(op));
        }
        assert_eq!(Op::from_text("=="), None);
    }

    #[test]
    fn type_checks() {
        assert!(Predicate::value("a", Op::NumEq, Value::str("high")).is_err());
        assert!(Predicate::value("a", Op::StrLt, Value::Int(100)).is_err());
        assert!(Predicate::value("a", Op::Eq, Value::Int(1)).is_err());
        assert!(Predicate::value("a", Op::Lt, Value::Bool(true)).is_err());
        assert!(Predicate::value("a", Op::Eq, Value::Bool(true)).is_ok());
        assert!(Predicate::value("a", Op::NumNe, Value::Float(1.5)).is_ok());
        assert!(Predicate::value("a", Op::IsPresent, Value::Int(0)).is_ok());
        assert!(Predicate::value("a", Op::Gt, Value::Float(f64::NAN)).is_err());
        let var = Variable { kind: VarKind::Num, name: Name::new("g").expect("name") };
        let attr = Name::new("gid").expect("name");
        assert!(Predicate::new(attr.clone(), Op::NumEq, Operand::Var(var.clone())).is_ok());
        assert!(Predicate::new(attr, Op::Gt, Operand::Var(var)).is_err());
    }

    #[test]
    fn regex_limits_apply() {
        let small = Limits { regex_size_limit: 1000, ..Limits::default() };
        assert!(Pattern::new("^ERR[0-9]+", &small).is_ok());
        let err = Pattern::new("a{1000}", &small).expect_err("too large");
        assert!(err.to_string().contains("size limit"), "{err}");
    }
}
