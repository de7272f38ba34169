//! `padres check`: parse messages written in the text syntax, print each in canonical form,
//! or show where and why it is wrong.

use std::time::{SystemTime, UNIX_EPOCH};

use padres_lang::{Limits, Message, ParseError, Parser, Timestamp};

/// The outcome of checking one line.
#[derive(Debug, PartialEq)]
pub enum Checked {
    /// The line is blank or a `#` comment.
    Skipped,
    /// The message in canonical form.
    Ok(Message),
    /// The line does not parse.
    Error(ParseError),
}

/// Checks one line in the command form of [`Message`] (`s [class,eq,'stock']`, …).
pub fn check_line(parser: &Parser, line: &str) -> Checked {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Checked::Skipped;
    }
    match parser.message(line) {
        Ok(message) => Checked::Ok(message),
        Err(error) => Checked::Error(error),
    }
}

/// A parser with the default limits.
pub fn default_parser() -> Parser {
    Parser::new(Limits::default())
}

/// A parser with the default limits that resolves relative times (`[time,>=,'now-1h']`)
/// against this machine's clock: a subscription's relative bounds are fixed when it is
/// issued.
pub fn issuing_parser() -> Parser {
    default_parser().at(now())
}

/// This machine's clock as a timestamp.
pub fn now() -> Timestamp {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    i64::try_from(millis).ok().and_then(Timestamp::from_millis).unwrap_or(Timestamp::MAX)
}

/// The error as two lines: the input, then a caret under the column, then the message.
pub fn render_error(line: &str, error: &ParseError) -> String {
    let pad: String = line
        .chars()
        .take(error.column.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("{line}\n{pad}^\nerror: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_caret_under_the_error() {
        let parser = default_parser();
        let line = "s [class,eq,'stock'] [price,<,100]";
        let Checked::Error(error) = check_line(&parser, line) else {
            panic!("should not parse");
        };
        let rendered = render_error(line, &error);
        let lines: Vec<&str> = rendered.lines().collect();
        assert_eq!(lines[1].find('^'), Some(21), "{rendered}");
        assert!(lines[2].contains("expected ',' after predicate"), "{rendered}");
        assert_eq!(check_line(&parser, "  # a comment"), Checked::Skipped);
    }
}
