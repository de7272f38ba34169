//! `padres-bench churn`: subscription churn and clients coming and going, against brokers
//! that are already running, for soak runs (`scripts/soak`). A pool of clients spread over
//! the brokers subscribes and unsubscribes at the asked rate (half each, about 100
//! subscriptions live), one client leaves and a new one connects every second, and a
//! publisher at the first broker publishes ten publications a second of the class they
//! subscribe to, so their subscriptions travel and match. Prints what it did every minute.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use padres_client::{Client, Connect};
use padres_lang::MessageId;
use padres_transport::Trust;

/// What to run.
#[derive(Debug)]
pub(crate) struct Churn {
    pub(crate) brokers: Vec<SocketAddr>,
    pub(crate) ca: Option<PathBuf>,
    /// Subscribe and unsubscribe requests per second, together.
    pub(crate) rate: u64,
    pub(crate) seconds: u64,
}

/// Clients in the pool.
const POOL: usize = 20;
/// Subscriptions kept live, about.
const LIVE: usize = 100;

async fn connect(churn: &Churn, addr: SocketAddr, who: &str) -> Client {
    let mut connect = Connect::new(addr).name(who).reconnect(false);
    if let Some(ca) = &churn.ca {
        connect = connect.trust(Trust::Certificates(vec![ca.clone()]));
    }
    connect.connect().await.unwrap_or_else(|e| panic!("{who} connects to {addr}: {e}"))
}

/// Runs the churn and prints its counts.
pub(crate) fn run(churn: &Churn) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let publisher = connect(churn, churn.brokers[0], "churn-pub").await;
        publisher.send("a [class,eq,'churn'],[k,isPresent,0]").await.expect("advertised");
        let mut next_client = 0_usize;
        let mut pool: Vec<(Client, VecDeque<MessageId>)> = Vec::new();
        for _ in 0..POOL {
            let addr = churn.brokers[next_client % churn.brokers.len()];
            pool.push((connect(churn, addr, &format!("churn-{next_client}")).await, VecDeque::new()));
            next_client += 1;
        }
        let mut rng = fastrand::Rng::with_seed(7);
        let start = Instant::now();
        let end = start + Duration::from_secs(churn.seconds);
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / churn.rate.max(1) as f64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut subscribed, mut unsubscribed, mut reconnected, mut published, mut failed) = (0, 0, 0, 0, 0);
        let mut ticks = 0_u64;
        let mut last_second = 0;
        let mut last_minute = 0;
        while Instant::now() < end {
            tick.tick().await;
            ticks += 1;
            let live: usize = pool.iter().map(|(_, subs)| subs.len()).sum();
            let i = rng.usize(..pool.len());
            let (client, subs) = &mut pool[i];
            if live >= LIVE || (live > 0 && !subs.is_empty() && ticks.is_multiple_of(2)) {
                if let Some(id) = subs.pop_front() {
                    match client.unsubscribe(id).await {
                        Ok(()) => unsubscribed += 1,
                        Err(_) => failed += 1,
                    }
                }
            } else {
                let text = format!("s [class,eq,'churn'],[k,=,{}]", rng.u32(..1000));
                match client.send(&text).await {
                    Ok(Some(id)) => {
                        subs.push_back(id);
                        subscribed += 1;
                    }
                    _ => failed += 1,
                }
            }
            let second = start.elapsed().as_secs();
            if second != last_second {
                last_second = second;
                // One client leaves (its subscriptions with it) and a new one takes its place.
                let i = rng.usize(..pool.len());
                let addr = churn.brokers[next_client % churn.brokers.len()];
                pool[i] = (connect(churn, addr, &format!("churn-{next_client}")).await, VecDeque::new());
                next_client += 1;
                reconnected += 1;
                for _ in 0..10 {
                    let text = format!("p [class,'churn'],[k,{}]", rng.u32(..1000));
                    if publisher.send(&text).await.is_ok() {
                        published += 1;
                    }
                }
            }
            if second / 60 != last_minute {
                last_minute = second / 60;
                println!(
                    "churn at {second} s: subscribed {subscribed}, unsubscribed {unsubscribed}, clients replaced {reconnected}, published {published}, failed {failed}"
                );
            }
        }
        println!(
            "churn done after {:.0} s: subscribed {subscribed}, unsubscribed {unsubscribed}, clients replaced {reconnected}, published {published}, failed {failed}",
            start.elapsed().as_secs_f64()
        );
    });
}
