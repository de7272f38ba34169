//! `padres`: the padres-rs command-line tool.

use std::io::{self, BufRead};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use padres_client::check::{Checked, check_line, default_parser, render_error};

/// The padres-rs command-line tool.
///
/// Today it checks messages offline; publishing, subscribing and workflow commands arrive
/// with the broker transport.
#[derive(Debug, Parser)]
#[command(name = "padres", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate messages and print each in canonical form.
    ///
    /// Each message is one line in command form:
    ///   a [class,eq,'stock'],[price,>,0]                   advertisement
    ///   s [class,eq,'stock'],[price,>,100]                 subscription
    ///   cs {[class,eq,'a'],[k,eq,$S$x]}&{[class,eq,'b'],[k,eq,$S$x]}
    ///   p [class,'stock'],[price,120]                      publication
    ///   unsub B1/7     unadv B1/3
    /// Messages come from the arguments, or from standard input (one per line; blank lines
    /// and lines starting with '#' are skipped). Exits 1 if any message is invalid.
    #[command(verbatim_doc_comment)]
    Check {
        /// Messages to check; read standard input when none are given.
        messages: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { messages } => check(messages),
    }
}

fn check(messages: Vec<String>) -> ExitCode {
    let parser = default_parser();
    let mut failed = false;
    let mut report = |line: &str| match check_line(&parser, line) {
        Checked::Skipped => {}
        Checked::Ok(message) => println!("{message}"),
        Checked::Error(error) => {
            failed = true;
            eprintln!("{}", render_error(line, &error));
        }
    };
    if messages.is_empty() {
        for line in io::stdin().lock().lines() {
            match line {
                Ok(line) => report(&line),
                Err(error) => {
                    eprintln!("error: cannot read standard input: {error}");
                    return ExitCode::from(2);
                }
            }
        }
    } else {
        messages.iter().for_each(|m| report(m));
    }
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}
