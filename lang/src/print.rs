//! The canonical text form of every message: `parse(print(x)) == x`.
//!
//! Strings are single-quoted with `\\`, `\'` and control characters escaped; floats always
//! show a `.` or an exponent so they read back as floats; timestamps print as RFC 3339 in
//! UTC with milliseconds, unquoted; a publication's payload prints as ` payload=0x…` in hex.

use std::fmt::{self, Write};

use crate::composite::{CompositeSubscription, Expr};
use crate::message::Message;
use crate::predicate::{Operand, Predicate};
use crate::publication::Publication;
use crate::subscription::{Advertisement, Subscription};
use crate::value::Value;

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(i) => write!(f, "{i}"),
            // `{:?}` gives the shortest text that reads back to the same float, and keeps a
            // `.0` or an exponent, so the value stays a float.
            Self::Float(x) => write!(f, "{x:?}"),
            Self::Str(s) => write_quoted(f, s),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Time(t) => f.write_str(&t.to_rfc3339()),
        }
    }
}

/// Writes `text` in single quotes with escapes.
pub(crate) fn write_quoted(f: &mut impl Write, text: &str) -> fmt::Result {
    f.write_char('\'')?;
    for c in text.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '\'' => f.write_str("\\'")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            c if c.is_control() => write!(f, "\\u{{{:x}}}", u32::from(c))?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('\'')
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{},{},", self.attr(), self.op())?;
        match self.operand() {
            Operand::Value(v) => write!(f, "{v}")?,
            Operand::Var(v) => write!(f, "{v}")?,
            Operand::Regex(p) => write_quoted(f, p.source())?,
        }
        f.write_char(']')
    }
}

fn write_predicates(f: &mut fmt::Formatter<'_>, predicates: &[Predicate]) -> fmt::Result {
    for (i, p) in predicates.iter().enumerate() {
        if i > 0 {
            f.write_char(',')?;
        }
        write!(f, "{p}")?;
    }
    Ok(())
}

impl fmt::Display for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_predicates(f, self.predicates())
    }
}

impl fmt::Display for Advertisement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_predicates(f, self.predicates())
    }
}

impl fmt::Display for Publication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in self.attrs().iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            write!(f, "[{name},{value}]")?;
        }
        if let Some(payload) = self.payload() {
            f.write_str(" payload=0x")?;
            for byte in payload {
                write!(f, "{byte:02x}")?;
            }
        }
        Ok(())
    }
}

impl CompositeSubscription {
    fn write_node(&self, f: &mut fmt::Formatter<'_>, index: usize) -> fmt::Result {
        match self.expr(index) {
            Expr::Leaf(sub) => write!(f, "{{{sub}}}"),
            Expr::Times(sub, count, attr, step) => write!(f, "Times({{{sub}}},{count},{attr},{step})"),
            Expr::Binary(op, left, right) => {
                f.write_char('{')?;
                self.write_node(f, left)?;
                f.write_str(op.as_str())?;
                self.write_node(f, right)?;
                f.write_char('}')
            }
        }
    }
}

impl fmt::Display for CompositeSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_node(f, self.root())?;
        if let Some(window) = self.window() {
            f.write_str(" within ")?;
            write_duration(f, window)?;
        }
        if let Some(until) = self.until_filter() {
            write!(f, " until {{{until}}}")?;
        }
        Ok(())
    }
}

/// Milliseconds in the largest unit that divides them: `90s`, `10m`, `1500ms`.
fn write_duration(f: &mut fmt::Formatter<'_>, ms: u64) -> fmt::Result {
    let units = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")];
    match units.iter().find(|(scale, _)| ms > 0 && ms.is_multiple_of(*scale)) {
        Some((scale, unit)) => write!(f, "{}{unit}", ms / scale),
        None => write!(f, "{ms}ms"),
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.command())?;
        match self {
            Self::Advertise(a) => write!(f, "{a}"),
            Self::Subscribe(s) => write!(f, "{s}"),
            Self::CompositeSubscribe(c) => write!(f, "{c}"),
            Self::Publish(p) => write!(f, "{p}"),
            Self::Unsubscribe(id) | Self::Unadvertise(id) => write!(f, "{id}"),
        }
    }
}
