//! `padres-bench probe`: one publisher and one subscriber against brokers that are already
//! running (anywhere: the `scripts/netns-federation` harness runs them in network
//! namespaces). Every publication is counted at the subscriber: received, lost,
//! duplicated, out of order; with throughput and latency (from the publisher's wall clock
//! to the subscriber's, so both must share a clock: one machine), and optionally a
//! historic query for the same publications afterwards. With `--drop-clients`, the
//! publisher's and the subscriber's connections are closed at random (every 0-2 s, as a
//! network fault would) while it runs: both hold client sessions, so nothing may be lost
//! or doubled.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use padres_client::{Client, Connect, Notification};
use padres_lang::Value;
use padres_transport::Trust;

use crate::quic::Pacer;

/// What to run.
#[derive(Debug)]
pub(crate) struct Probe {
    pub(crate) publish: SocketAddr,
    pub(crate) subscribe: SocketAddr,
    pub(crate) ca: Option<PathBuf>,
    pub(crate) count: usize,
    pub(crate) rate: u64,
    pub(crate) history: bool,
    /// Close the publisher's or the subscriber's connection every 0-2 s while publishing.
    pub(crate) drop_clients: bool,
}

/// How long `--drop-clients` lets the publisher be between connections: a broker keeps a
/// client's session for 10 s by default (`client_sessions.window_ms`).
const RECONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Microseconds since the Unix epoch, by the wall clock (publisher and subscriber share it).
pub(crate) fn wall_us() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

async fn connect(probe: &Probe, addr: SocketAddr, who: &str) -> Client {
    // Clients whose connections are dropped reconnect and resume their sessions.
    let mut connect = Connect::new(addr).name(who).reconnect(probe.drop_clients);
    if let Some(ca) = &probe.ca {
        connect = connect.trust(Trust::Certificates(vec![ca.clone()]));
    }
    connect.connect().await.unwrap_or_else(|e| panic!("{who} connects to {addr}: {e}"))
}

/// What the subscriber saw.
#[derive(Debug, Default)]
struct Tally {
    seen: Vec<bool>,
    received: usize,
    duplicates: usize,
    out_of_order: usize,
    last: Option<usize>,
    latencies_us: Vec<i64>,
    first_at: Option<Instant>,
    last_at: Option<Instant>,
    /// The longest time between two publications received.
    longest_gap: Duration,
}

impl Tally {
    fn take(&mut self, seq: usize, sent_us: i64) {
        let now = Instant::now();
        self.first_at.get_or_insert(now);
        if let Some(last) = self.last_at {
            self.longest_gap = self.longest_gap.max(now.duration_since(last));
        }
        self.last_at = Some(now);
        if seq >= self.seen.len() {
            return;
        }
        if self.seen[seq] {
            self.duplicates += 1;
            return;
        }
        self.seen[seq] = true;
        self.received += 1;
        if self.last.is_some_and(|last| seq < last) {
            self.out_of_order += 1;
        }
        self.last = Some(seq);
        self.latencies_us.push(wall_us() - sent_us);
    }
}

fn number(publication: &padres_lang::Publication, attr: &str) -> Option<i64> {
    match publication.get(attr) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    }
}

fn percentile(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0
}

/// Runs the probe and prints its figures.
pub(crate) fn run(probe: &Probe) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let run_id = format!("r{}", wall_us());
        let started_ms = wall_us() / 1000;
        let mut subscriber = connect(probe, probe.subscribe, "probe-sub").await;
        let filter = format!("s [class,eq,'probe'],[run,eq,'{run_id}']");
        subscriber.send(&filter).await.expect("subscribed");
        // Read apart from the client, which the faults below use meanwhile.
        let mut notifications = subscriber.take_notifications();
        let publisher = connect(probe, probe.publish, "probe-pub").await;
        publisher
            .send("a [class,eq,'probe'],[run,isPresent,''],[seq,isPresent,0],[sent_us,isPresent,0]")
            .await
            .expect("advertised");

        let count = probe.count;
        let sessions = (subscriber.session().0, publisher.session().0);
        let publishing = std::sync::atomic::AtomicBool::new(true);
        // The faults: one connection or the other closed every 0-2 s, until the last
        // publication is sent.
        let drops = async {
            let (mut subscriber_drops, mut publisher_drops) = (0_usize, 0_usize);
            if !probe.drop_clients {
                return (0, 0);
            }
            let mut rng = fastrand::Rng::with_seed(11);
            loop {
                tokio::time::sleep(Duration::from_secs_f64(rng.f64() * 2.0)).await;
                if !publishing.load(std::sync::atomic::Ordering::Relaxed) {
                    return (subscriber_drops, publisher_drops);
                }
                if rng.bool() {
                    subscriber.drop_connection();
                    subscriber_drops += 1;
                } else {
                    publisher.drop_connection();
                    publisher_drops += 1;
                }
            }
        };
        let publish = async {
            let mut pace = Pacer::new(Some(probe.rate));
            let mut refused = 0_usize;
            let start = Instant::now();
            for n in 0..count {
                pace.before(n).await;
                let text = format!("[class,'probe'],[run,'{run_id}'],[seq,{n}],[sent_us,{}]", wall_us());
                let publication: padres_lang::Publication = text.parse().expect("a probe publication");
                // Between connections a publication is refused at once (docs/delivery.md):
                // it was not sent, so it is sent again once the session is back, for as
                // long as a session waits for its client.
                let mut first_refused = None;
                loop {
                    match publisher.publish(publication.clone()).await {
                        Ok(()) => break,
                        Err(padres_client::ClientError::Closed(why)) if probe.drop_clients => {
                            let since = *first_refused.get_or_insert_with(Instant::now);
                            assert!(
                                since.elapsed() < RECONNECT_WITHIN,
                                "the publisher has not reconnected in {RECONNECT_WITHIN:?}: {why}; last error: {:?}",
                                publisher.last_error()
                            );
                            refused += 1;
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(e) => panic!("publishing: {e}"),
                    }
                }
            }
            publishing.store(false, std::sync::atomic::Ordering::Relaxed);
            (start.elapsed(), refused)
        };
        let receive = async {
            let mut tally = Tally { seen: vec![false; count], ..Tally::default() };
            // Until all came, or nothing for 10 s.
            while tally.received < count {
                match tokio::time::timeout(Duration::from_secs(10), notifications.next()).await {
                    Ok(Some(Notification::Publication { publication: p, .. })) => {
                        if let (Some(seq), Some(sent)) = (number(&p, "seq"), number(&p, "sent_us")) {
                            tally.take(usize::try_from(seq).unwrap_or(usize::MAX), sent);
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            tally
        };
        let ((sending, refused), mut tally, (subscriber_drops, publisher_drops)) =
            tokio::join!(publish, receive, drops);
        tally.latencies_us.sort_unstable();
        let span = match (tally.first_at, tally.last_at) {
            (Some(first), Some(last)) => last.duration_since(first).as_secs_f64(),
            _ => 0.0,
        };
        println!(
            "sent {count} in {:.2} s ({:.0}/s, asked {}/s)",
            sending.as_secs_f64(),
            count as f64 / sending.as_secs_f64().max(1e-9),
            probe.rate
        );
        println!(
            "received {} ({:.0}/s at the subscriber), lost {}, duplicated {}, out of order {}",
            tally.received,
            tally.received as f64 / span.max(1e-9),
            count - tally.received,
            tally.duplicates,
            tally.out_of_order
        );
        println!(
            "latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; longest silence at the subscriber {:.0} ms",
            percentile(&tally.latencies_us, 0.5),
            percentile(&tally.latencies_us, 0.99),
            percentile(&tally.latencies_us, 1.0),
            tally.longest_gap.as_secs_f64() * 1000.0
        );
        if probe.drop_clients {
            // A session that could not be resumed is replaced by a new one (its id changes).
            let same = |first: u64, client: &Client| if client.session().0 == first { "kept" } else { "replaced" };
            println!(
                "connections dropped: subscriber {subscriber_drops}, publisher {publisher_drops} (one that lands while its client \
                 is still reconnecting has nothing to close); session: subscriber {}, publisher {}; publish calls refused \
                 between connections and made again: {refused} (latency counts from the first try)",
                same(sessions.0, &subscriber),
                same(sessions.1, &publisher)
            );
        }
        drop(subscriber);

        if probe.history {
            let mut reader = connect(probe, probe.subscribe, "probe-history").await;
            let asked = Instant::now();
            let historic = format!("s [class,eq,'probe'],[run,eq,'{run_id}'],[time,>=,{started_ms}]");
            reader.send(&historic).await.expect("historic subscription");
            let mut stored = 0_usize;
            loop {
                match tokio::time::timeout(Duration::from_secs(30), reader.next_notification()).await {
                    Ok(Some(Notification::Publication { .. })) => stored += 1,
                    Ok(Some(Notification::EndOfHistory { count, missing, truncated, .. })) => {
                        println!(
                            "history: {stored} stored publications in {:.1} ms (end of history: count {count}, missing {missing:?}, truncated {truncated})",
                            asked.elapsed().as_secs_f64() * 1000.0
                        );
                        break;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => {
                        println!("history: no end of history within 30 s ({stored} received)");
                        break;
                    }
                }
            }
        }
    });
}
