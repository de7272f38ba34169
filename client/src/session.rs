//! `padres session`: a scripted client. Commands come one per line (PADRES style), and
//! everything that happens goes out as one JSON object per line with a `"type"`:
//!
//! ```text
//! a ADV | s SUB | cs COMPOSITE | p PUB      advertise, subscribe, composite subscribe, publish
//! unsub ID | unadv ID                       withdraw (ids as replied)
//! sleep MILLIS                              wait, printing notifications meanwhile
//! quit                                      end the session (so does the end of input)
//! ```
//!
//! ```text
//! {"type":"reply","op":"s","id":"B1/1","line":2}
//! {"type":"notification","sub":"B1/1","subs":["B1/1"],"attrs":{"class":"stock","price":100}}
//! {"type":"error","line":3,"message":"..."}
//! ```
//!
//! Blank lines and lines starting with `#` are skipped. An error answers its line and the
//! session goes on.

use std::time::Duration;

use padres_lang::{Message, MessageId};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Client;

/// One parsed line.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// A message for the broker.
    Send(Message),
    /// Wait this long.
    Sleep(Duration),
    /// End the session.
    Quit,
    /// Nothing to do (blank or comment).
    Skip,
}

/// Parses one line of a session script.
pub fn parse_line(line: &str) -> Result<Command, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(Command::Skip);
    }
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    match word {
        "quit" | "exit" => Ok(Command::Quit),
        "sleep" => rest
            .trim()
            .parse::<u64>()
            .map(|ms| Command::Sleep(Duration::from_millis(ms)))
            .map_err(|_| format!("sleep takes milliseconds, e.g. 'sleep 500', not {:?}", rest.trim())),
        _ => crate::check::issuing_parser().message(line).map(Command::Send).map_err(|e| e.to_string()),
    }
}

fn error(line: usize, message: &str) -> String {
    padres_lang::json::error(Some(line), message).to_string()
}

fn reply(line: usize, op: &str, id: Option<&MessageId>) -> String {
    padres_lang::json::reply(line, op, id).to_string()
}

/// Writes one line to standard output (an error once nobody reads it any more).
fn write_line(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")?;
    stdout.flush()
}

/// Runs a session: commands from standard input, JSON lines to standard output. Ends
/// with an error of kind `BrokenPipe` when standard output is closed.
pub async fn run(mut client: Client) -> std::io::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut number = 0;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line?,
            Some(notification) = client.next_notification() => {
                write_line(&crate::json::notification(&notification))?;
                continue;
            }
        };
        let Some(line) = line else { return Ok(()) };
        number += 1;
        match parse_line(&line) {
            Ok(Command::Skip) => {}
            Ok(Command::Quit) => return Ok(()),
            Ok(Command::Sleep(pause)) => {
                let deadline = tokio::time::Instant::now() + pause;
                while let Ok(Some(notification)) =
                    tokio::time::timeout_at(deadline, client.next_notification()).await
                {
                    write_line(&crate::json::notification(&notification))?;
                }
            }
            Ok(Command::Send(message)) => {
                let op = message.command();
                match client.request(message).await {
                    Ok(id) => write_line(&reply(number, op, id.as_ref()))?,
                    Err(e) => write_line(&error(number, &e.to_string()))?,
                }
            }
            Err(message) => write_line(&error(number, &message))?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_become_commands() {
        assert_eq!(parse_line("  # a comment"), Ok(Command::Skip));
        assert_eq!(parse_line(""), Ok(Command::Skip));
        assert_eq!(parse_line("quit"), Ok(Command::Quit));
        assert_eq!(parse_line("sleep 250"), Ok(Command::Sleep(Duration::from_millis(250))));
        assert!(parse_line("sleep soon").is_err_and(|e| e.contains("milliseconds")));
        assert!(matches!(parse_line("s [class,eq,'stock']"), Ok(Command::Send(Message::Subscribe(_)))));
        assert!(matches!(parse_line("unsub B1/4"), Ok(Command::Send(Message::Unsubscribe(_)))));
        assert!(parse_line("s [class,eq").is_err());
    }

    #[test]
    fn output_lines_have_the_documented_shape() {
        let id: MessageId = "B1/3".parse().expect("id");
        let line: serde_json::Value = serde_json::from_str(&reply(2, "s", Some(&id))).expect("json");
        assert_eq!(line, json!({"type": "reply", "op": "s", "id": "B1/3", "line": 2}));
        let line: serde_json::Value = serde_json::from_str(&error(5, "bad")).expect("json");
        assert_eq!(line, json!({"type": "error", "line": 5, "message": "bad"}));
    }
}
