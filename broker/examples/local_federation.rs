//! A local federation: three brokers in a chain (B1 - B2 - B3) on loopback ports, a
//! publisher streaming stock quotes into B1, and subscribers at every broker receiving
//! only the quotes their predicates select.
//!
//! ```sh
//! cargo run --release -p padres-broker --example local_federation
//! cargo run --release -p padres-broker --example local_federation -- 5000   # more quotes
//! ```
//!
//! The brokers run in this process on real QUIC endpoints, each with its own data
//! directory and self-signed certificate; B2 and B3 find their neighbour's certificate in
//! the local registry, as brokers started by hand on one machine do. At the end every
//! subscriber's deliveries are checked against the reference semantics (`matches`), and
//! B2's routing tables are printed.

use std::error::Error;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use padres_broker::config::Config;
use padres_client::{Client, Connect, Notification};
use padres_lang::{Publication, Subscription, matches};

const SYMBOLS: [&str; 5] = ["IBM", "MSFT", "AAPL", "ORCL", "SAP"];

/// Subscribers: where they connect (index into the chain) and what they want.
const SUBSCRIBERS: [(usize, &str, &str); 4] = [
    (2, "ibm-watcher", "[class,eq,'stock'],[symbol,eq,'IBM'],[price,>,100]"),
    (2, "bargains", "[class,eq,'stock'],[price,<,20]"),
    (1, "big-volume", "[class,eq,'stock'],[volume,>=,9000]"),
    (0, "m-symbols", "[class,eq,'stock'],[symbol,str-prefix,'M'],[price,>,150]"),
];

/// A small deterministic generator, so every run publishes the same quotes.
struct Quotes(u64);

impl Quotes {
    fn next(&mut self, n: usize) -> String {
        let mut draw = |below: u64| {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below
        };
        let symbol = SYMBOLS[usize::try_from(draw(5)).unwrap_or(0)];
        let price = draw(20_000) as f64 / 100.0;
        let volume = draw(10_000);
        format!("[class,'stock'],[symbol,'{symbol}'],[price,{price}],[volume,{volume}],[seq,{n}]")
    }
}

async fn start_broker(
    name: &str,
    root: &std::path::Path,
    neighbour: Option<SocketAddr>,
) -> Result<SocketAddr, Box<dyn Error>> {
    let config = Config {
        name: name.to_owned(),
        listen: ([127, 0, 0, 1], 0).into(),
        data_dir: root.join(name),
        neighbours: neighbour.map(|a| format!("quic://{a}")).into_iter().collect(),
        ..Config::default()
    };
    let (bound, addr) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        if let Err(error) = padres_broker::net::serve_until(config, Some(bound), std::future::pending()).await
        {
            eprintln!("broker failed: {error}");
        }
    });
    Ok(addr.await?)
}

async fn connect(addr: SocketAddr, name: &str) -> Result<Client, Box<dyn Error>> {
    // No certificate given: a broker on this machine is verified against the certificate
    // it registered locally.
    Ok(Connect::new(addr).name(name).connect().await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let count: usize = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(2000);
    run(count).await
}

/// Runs the federation with `count` quotes; an error if a subscriber's deliveries differ
/// from what its subscription matches.
async fn run(count: usize) -> Result<(), Box<dyn Error>> {
    let root = std::env::temp_dir().join(format!("padres-local-federation-{}", std::process::id()));

    let b1 = start_broker("B1", &root, None).await?;
    let b2 = start_broker("B2", &root, Some(b1)).await?;
    let b3 = start_broker("B3", &root, Some(b2)).await?;
    let chain = [b1, b2, b3];
    println!("federation: B1 {b1} <- B2 {b2} <- B3 {b3}");

    let publisher = connect(b1, "quotes").await?;
    publisher
        .send("a [class,eq,'stock'],[symbol,isPresent,''],[price,>=,0],[volume,>=,0],[seq,>=,0]")
        .await?;
    let mut subscribers = Vec::new();
    for (at, name, text) in SUBSCRIBERS {
        let client = connect(chain[at], name).await?;
        let id = client.send(&format!("s {text}")).await?.ok_or("no id")?;
        println!("{name:<12} at B{} subscribes {text} as {id}", at + 1);
        subscribers.push((name, text.parse::<Subscription>()?, client));
    }
    // Let the subscriptions travel toward the advertisement before the stream starts.
    let observer = connect(b1, "observer").await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while observer.stats().await?.subscriptions < SUBSCRIBERS.len() as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut quotes = Quotes(0x5eed);
    let published: Vec<Publication> = (0..count).map(|n| quotes.next(n).parse()).collect::<Result<_, _>>()?;
    let started = Instant::now();
    for p in &published {
        publisher.request(padres_lang::Message::Publish(p.clone())).await?;
    }
    println!("\npublished {count} quotes at B1 in {:.2} s", started.elapsed().as_secs_f64());

    println!("\n{:<12} {:>9} {:>9}  first deliveries", "subscriber", "received", "expected");
    let mut all_right = true;
    for (name, sub, client) in &mut subscribers {
        let expected: Vec<&Publication> = published.iter().filter(|p| matches(sub, p)).collect();
        let mut received = Vec::new();
        while received.len() < expected.len() {
            match tokio::time::timeout(Duration::from_secs(5), client.next_notification()).await {
                Ok(Some(Notification::Publication { publication, .. })) => received.push(publication),
                _ => break,
            }
        }
        // Anything beyond the expected would be a wrong delivery.
        if let Ok(Some(Notification::Publication { publication, .. })) =
            tokio::time::timeout(Duration::from_millis(200), client.next_notification()).await
        {
            received.push(publication);
        }
        // Each came with the `time` its publisher's broker added.
        let exact = received.len() == expected.len()
            && received.iter().zip(&expected).all(|(r, e)| r.time().is_some() && r.without_time() == **e);
        all_right &= exact;
        let first: Vec<String> = received.iter().take(2).map(ToString::to_string).collect();
        println!("{name:<12} {:>9} {:>9}  {}", received.len(), expected.len(), first.join("  "));
    }

    let routes = connect(b2, "observer").await?.routes(10).await?;
    println!("\nB2's tables: {} advertisements, {} subscriptions", routes.srt_total, routes.prt_total);
    for e in &routes.prt {
        let to: Vec<String> = e.to.iter().map(ToString::to_string).collect();
        println!("  PRT {:<10} from {:<10} to [{}] {}", e.id.to_string(), e.from, to.join(" "), e.text);
    }
    let _ = std::fs::remove_dir_all(&root);
    if all_right {
        println!("\nevery subscriber received exactly the quotes its subscription matches, in order");
        Ok(())
    } else {
        Err("some deliveries differ from what the subscriptions match".into())
    }
}

#[cfg(test)]
mod tests {
    /// The brokers alone (`docs/brokers.md`'s first command), smaller: `cargo test` runs it.
    #[tokio::test]
    async fn every_subscriber_receives_exactly_what_its_subscription_matches() {
        super::run(300).await.expect("the federation delivers what each subscription matches");
    }
}
