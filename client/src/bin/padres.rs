//! `padres`: the padres-rs command-line tool.

use std::io::{self, BufRead};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use padres_client::check::{Checked, check_line, default_parser, render_error};
use padres_client::{Client, ClientError};

/// The padres-rs command-line tool: publish, subscribe and check messages.
///
/// Messages use the PADRES text syntax, e.g. subscription [class,eq,'stock'],[price,>,100]
/// and publication [class,'stock'],[price,120]. `padres check` explains the syntax.
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
    /// Subscribe and print matching publications as they arrive (until --count or Ctrl-C).
    Sub {
        /// The subscription, e.g. "[class,eq,'stock'],[price,>,100]".
        subscription: String,
        /// Stop after this many publications.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Print one JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Publish publications (advertising first with --advertise).
    Pub {
        /// Publications, e.g. "[class,'stock'],[price,120]".
        #[arg(required = true)]
        publications: Vec<String>,
        /// Advertise this first (a broker only accepts advertised publications), e.g.
        /// "[class,eq,'stock'],[price,isPresent,0]".
        #[arg(long, value_name = "ADVERTISEMENT")]
        advertise: Option<String>,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Wait until the broker answers; exit 0 once it does, 1 if it does not in time.
    Ping {
        /// How long to keep trying.
        #[arg(long, value_name = "SECS", default_value_t = 0.0)]
        wait: f64,
        #[command(flatten)]
        broker: BrokerArgs,
    },
}

/// Where the broker is and how to trust it.
#[derive(Debug, Args)]
struct BrokerArgs {
    /// The broker, quic://HOST:PORT.
    #[arg(long, value_name = "URI", default_value = "quic://127.0.0.1:7700")]
    broker: String,
    /// The broker's certificate (PEM) to trust: its data dir's cert.pem.
    #[arg(long, value_name = "FILE", default_value = "padres-data/cert.pem")]
    ca: PathBuf,
    /// This client's name, as the broker logs it.
    #[arg(long, default_value = "padres")]
    name: String,
}

impl BrokerArgs {
    async fn connect(&self) -> Result<Client, String> {
        let rest = self.broker.strip_prefix("quic://").ok_or("--broker must look like quic://HOST:PORT")?;
        let (host, _) = rest.rsplit_once(':').ok_or("--broker must look like quic://HOST:PORT")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addr: SocketAddr = tokio::net::lookup_host(rest)
            .await
            .map_err(|e| format!("cannot resolve {rest}: {e}"))?
            .next()
            .ok_or_else(|| format!("no address for {rest}"))?;
        Client::connect(addr, host, &self.ca, &self.name).await.map_err(|e| e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = || tokio::runtime::Builder::new_multi_thread().enable_all().build();
    let outcome = match cli.command {
        Command::Check { messages } => return check(messages),
        Command::Sub { subscription, count, json, broker } => runtime()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(sub(&subscription, count, json, &broker))),
        Command::Pub { publications, advertise, broker } => runtime()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(publish(&publications, advertise.as_deref(), &broker))),
        Command::Ping { wait, broker } => {
            runtime().map_err(|e| e.to_string()).and_then(|rt| rt.block_on(ping(wait, &broker)))
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("padres: {error}");
            ExitCode::from(1)
        }
    }
}

async fn sub(subscription: &str, count: Option<u64>, json: bool, broker: &BrokerArgs) -> Result<(), String> {
    let mut client = broker.connect().await?;
    let id = client.send(&format!("s {subscription}")).await.map_err(|e| e.to_string())?;
    if let Some(id) = id {
        eprintln!("subscribed as {id}");
    }
    let mut seen = 0;
    while count.is_none_or(|n| seen < n) {
        let Some((subs, publication)) = client.next_notification().await else {
            return Err("the broker closed the connection".to_owned());
        };
        if json {
            println!("{}", padres_client::json::notification(&subs, &publication));
        } else {
            println!("{publication}");
        }
        seen += 1;
    }
    Ok(())
}

async fn publish(
    publications: &[String],
    advertise: Option<&str>,
    broker: &BrokerArgs,
) -> Result<(), String> {
    let client = broker.connect().await?;
    if let Some(adv) = advertise {
        client.send(&format!("a {adv}")).await.map_err(|e| format!("advertisement refused: {e}"))?;
    }
    let mut failed = 0;
    for publication in publications {
        match client.send(&format!("p {publication}")).await {
            Ok(_) => {}
            Err(ClientError::Refused { message, .. }) => {
                failed += 1;
                eprintln!("padres: refused: {message}");
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    if failed > 0 { Err(format!("{failed} of {} publications refused", publications.len())) } else { Ok(()) }
}

async fn ping(wait: f64, broker: &BrokerArgs) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs_f64(wait.max(0.0));
    loop {
        match broker.connect().await {
            Ok(_) => {
                println!("{} answers", broker.broker);
                return Ok(());
            }
            Err(error) if Instant::now() >= deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
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
