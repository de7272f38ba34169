//! Prints routing table sizes and subscription traffic per link with covering off, lazy
//! and active, on a clustered workload in the deterministic simulator.
//!
//! ```sh
//! cargo run --release -p padres-broker --example covering_report
//! ```
//!
//! Topology: a binary tree of 15 brokers (B1 at the root). One publisher at B1 advertises
//! stock quotes; 600 subscribers spread over the 8 leaves each subscribe to one of 5
//! symbols with a price threshold from a small set, so most subscriptions are covered by
//! a wider one on the same symbol. Then 1,000 quotes are published and every subscriber
//! unsubscribes in turn.

#[path = "../tests/sim/mod.rs"]
mod sim;

use padres_broker::router::Covering;
use sim::Sim;

const SYMBOLS: [&str; 5] = ["IBM", "MSFT", "AAPL", "ORCL", "SAP"];

fn run(covering: Covering) -> (usize, usize, u64, u64, usize) {
    let mut sim = Sim::with_covering(15, covering);
    for child in 1..15 {
        sim.link((child - 1) / 2, child, 2);
    }
    sim.attach(0, 0);
    sim.run();
    sim.id(0, "a [class,eq,'stock'],[symbol,isPresent,''],[price,isPresent,0]");
    let mut x: u64 = 12345;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut subs = Vec::new();
    for client in 1..=600_u64 {
        sim.attach(client, 7 + (next() % 8) as usize);
        let symbol = SYMBOLS[(next() % 5) as usize];
        let threshold = 10 * (next() % 6);
        let id =
            sim.id(client, &format!("s [class,eq,'stock'],[symbol,eq,'{symbol}'],[price,>,{threshold}]"));
        subs.push((client, id));
    }
    let prt_after_subscribe: usize = (0..15).map(|b| sim.routes(b).prt.len()).sum();
    let root_prt = sim.routes(0).prt.len();
    for i in 0..1000_u64 {
        let symbol = SYMBOLS[(i % 5) as usize];
        sim.send(0, &format!("p [class,'stock'],[symbol,'{symbol}'],[price,{}]", next() % 70));
    }
    sim.run();
    let deliveries = sim.deliveries.len();
    let subscribe_traffic_before_unsub: u64 = sim.traffic.values().map(|(s, _)| s).sum();
    for (client, id) in subs {
        sim.call(client, &format!("unsub {id}")).expect("unsubscribed");
    }
    let subscribe_traffic: u64 = sim.traffic.values().map(|(s, _)| s).sum();
    (prt_after_subscribe, root_prt, subscribe_traffic_before_unsub, subscribe_traffic, deliveries)
}

fn main() {
    println!(
        "covering  PRT entries (all brokers)  PRT at root  sub msgs (subscribe)  sub msgs (total)  deliveries"
    );
    let mut baseline = None;
    for covering in [Covering::Off, Covering::Lazy, Covering::Active] {
        let (prt, root, subscribe, total, deliveries) = run(covering);
        let (base_prt, base_total) = *baseline.get_or_insert((prt, total));
        println!(
            "{:<8}  {prt:>10} ({:>5.1}% of off)  {root:>11}  {subscribe:>20}  {total:>7} ({:>5.1}%)  {deliveries:>10}",
            format!("{covering:?}"),
            100.0 * prt as f64 / base_prt as f64,
            100.0 * total as f64 / base_total as f64,
        );
    }
}
