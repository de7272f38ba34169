//! Brokers' reports on themselves, and the federation view built from them.
//!
//! Every broker publishes a report on the reserved class [`CLASS`] every
//! `monitor_interval_ms` (5 s by default; 0 turns it off), as PADRES's brokers did for its
//! monitor: its name, its neighbours (space-separated), and its main counters. The report
//! is an ordinary publication, advertised and routed like any other: any client may
//! subscribe to it (`padres sub "[class,eq,'padres_broker']"`), and a broker with an HTTP
//! listener subscribes to it itself and serves the latest report of every broker, with the
//! links they name, at `/api/federation`. So the view of the federation comes from the
//! federation, with nothing central.
//!
//! The class is reserved: only a broker publishes on it (the router refuses a client's
//! advertisement or publication of it), so a report names the broker that sent it, as far
//! as the brokers of the federation are trusted (a neighbour's reports are forwarded as
//! they come).
//!
//! Report attributes: `class`, `broker`, `neighbours`, `link_messages_out` (messages sent
//! to each of those neighbours since the broker started, space-separated in the same
//! order), `interval_ms`, `uptime_ms`, `clients`, `advertisements`, `subscriptions`,
//! `publications_in`, `notifications_out`, `broker_messages_in`, `broker_messages_out`,
//! `partial_matches`, `history_rows`, `history` (its history store's filters, a JSON
//! array of subscriptions in text syntax; empty without a store), `traffic` (what it sent to each neighbour per message
//! class, [`crate::traffic`]: a JSON array of `[neighbour, class, messages, bytes]`) (and
//! the `time` every publication carries). The view turns two successive reports of a
//! broker into its message rate on each link.

use std::collections::BTreeMap;

use padres_lang::wire::{BrokerStats, LinkTraffic};
use padres_lang::{Advertisement, Name, Publication, Subscription, Value};
use serde::Serialize;

/// The reserved class of brokers' reports.
pub const CLASS: &str = "padres_broker";

/// The counters a report carries, in order.
const COUNTERS: [&str; 10] = [
    "uptime_ms",
    "clients",
    "advertisements",
    "subscriptions",
    "publications_in",
    "notifications_out",
    "broker_messages_in",
    "broker_messages_out",
    "partial_matches",
    "history_rows",
];

/// What a broker advertises for its reports.
pub fn advertisement() -> Advertisement {
    let mut text = format!(
        "[class,eq,'{CLASS}'],[broker,isPresent,''],[neighbours,isPresent,''],[link_messages_out,isPresent,''],[interval_ms,isPresent,0],[history,isPresent,''],[traffic,isPresent,'']"
    );
    for counter in COUNTERS {
        text.push_str(&format!(",[{counter},isPresent,0]"));
    }
    text.parse().expect("the report advertisement parses")
}

/// What a broker with a federation view subscribes to.
pub fn subscription() -> Subscription {
    format!("[class,eq,'{CLASS}']").parse().expect("the report subscription parses")
}

/// The report of a broker whose counters are `stats`, sent every `interval_ms`, whose
/// history store keeps what `history` selects; `messages_out(n)` is how many messages it
/// has sent to neighbour `n`.
pub fn report(
    stats: &BrokerStats,
    interval_ms: u64,
    history: &[String],
    messages_out: impl Fn(&Name) -> u64,
) -> Publication {
    let int = |n: u64| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
    let values = [
        stats.uptime_ms,
        stats.clients,
        stats.advertisements,
        stats.subscriptions,
        stats.publications_in,
        stats.notifications_out,
        stats.broker_messages_in,
        stats.broker_messages_out,
        stats.partial_matches,
        stats.history_rows,
    ];
    let neighbours: Vec<&str> = stats.neighbours.iter().map(Name::as_str).collect();
    let sent: Vec<String> = stats.neighbours.iter().map(|n| messages_out(n).to_string()).collect();
    let name = |n: &str| Name::new(n).expect("a report attribute is a valid name");
    let mut attrs = vec![
        (name("class"), Value::str(CLASS)),
        (name("broker"), Value::str(stats.broker.as_str())),
        (name("neighbours"), Value::str(&neighbours.join(" "))),
        (name("link_messages_out"), Value::str(&sent.join(" "))),
        (name("interval_ms"), int(interval_ms)),
        (name("history"), Value::str(&serde_json::json!(history).to_string())),
        (name("traffic"), Value::str(&traffic_text(&stats.link_traffic))),
    ];
    attrs.extend(COUNTERS.iter().zip(values).map(|(counter, value)| (name(counter), int(value))));
    Publication::new(attrs).expect("a report is a valid publication")
}

/// `rows` as a report's `traffic` attribute.
fn traffic_text(rows: &[LinkTraffic]) -> String {
    let rows: Vec<serde_json::Value> =
        rows.iter().map(|r| serde_json::json!([r.peer.as_str(), r.class, r.messages, r.bytes])).collect();
    serde_json::Value::Array(rows).to_string()
}

/// A report's `traffic` attribute read back; rows that do not read are left out.
pub fn traffic_of(publication: &Publication) -> Vec<LinkTraffic> {
    let Some(text) = publication.get("traffic").and_then(Value::as_str) else { return Vec::new() };
    let Ok(rows) = serde_json::from_str::<Vec<(String, String, u64, u64)>>(text) else { return Vec::new() };
    rows.into_iter()
        .filter_map(|(peer, class, messages, bytes)| {
            Some(LinkTraffic { peer: Name::new(&peer).ok()?, class, messages, bytes })
        })
        .collect()
}

/// One broker as its latest report describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BrokerView {
    /// Its name.
    pub broker: String,
    /// Its neighbours, as it reported them.
    pub neighbours: Vec<String>,
    /// How often it reports.
    pub interval_ms: u64,
    /// Its counters, by name.
    pub counters: BTreeMap<String, u64>,
    /// Messages it has sent to each neighbour since it started.
    pub messages_out: BTreeMap<String, u64>,
    /// Messages per second it sent to each neighbour between its last two reports (empty
    /// until it has sent two, or after it restarted).
    pub rates_out: BTreeMap<String, f64>,
    /// What it has sent to each neighbour since it started, per message class.
    pub traffic: Vec<LinkTraffic>,
    /// Its history store's filters (none without a store).
    pub history: Vec<String>,
    /// When its report was received here (this broker's clock, ms since the Unix epoch).
    pub received_ms: u64,
}

/// The federation as the reports received here describe it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FederationView {
    /// Every broker heard from recently, by name.
    pub brokers: Vec<BrokerView>,
    /// Every link a broker reported, each once, its two ends sorted.
    pub links: Vec<(String, String)>,
}

/// The latest report of each broker, forgotten when it stops reporting.
#[derive(Debug, Default)]
pub struct Federation {
    latest: BTreeMap<String, BrokerView>,
}

impl Federation {
    /// Takes in a report received at `now`; false if `publication` is not a report.
    pub fn receive(&mut self, now: u64, publication: &Publication) -> bool {
        if publication.class() != CLASS {
            return false;
        }
        let Some(broker) = publication.get("broker").and_then(Value::as_str) else { return false };
        let number = |attr: &str| match publication.get(attr) {
            Some(Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        };
        let neighbours: Vec<String> = publication
            .get("neighbours")
            .and_then(Value::as_str)
            .map(|n| n.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let counters: BTreeMap<String, u64> =
            COUNTERS.iter().filter_map(|c| number(c).map(|n| ((*c).to_owned(), n))).collect();
        let sent = publication.get("link_messages_out").and_then(Value::as_str).unwrap_or_default();
        let messages_out: BTreeMap<String, u64> = neighbours
            .iter()
            .zip(sent.split_whitespace())
            .filter_map(|(n, count)| Some((n.clone(), count.parse().ok()?)))
            .collect();
        // Between this report and the last: none across a restart (uptime went back).
        let mut rates_out = BTreeMap::new();
        let before = self.latest.get(broker);
        let elapsed_ms = before
            .and_then(|b| counters.get("uptime_ms")?.checked_sub(*b.counters.get("uptime_ms")?))
            .filter(|&ms| ms > 0);
        if let (Some(before), Some(elapsed_ms)) = (before, elapsed_ms) {
            for (peer, &count) in &messages_out {
                if let Some(sent) = before.messages_out.get(peer).and_then(|&e| count.checked_sub(e)) {
                    rates_out.insert(peer.clone(), sent as f64 * 1000.0 / elapsed_ms as f64);
                }
            }
        }
        let view = BrokerView {
            broker: broker.to_owned(),
            neighbours,
            interval_ms: number("interval_ms").unwrap_or(0),
            counters,
            messages_out,
            rates_out,
            traffic: traffic_of(publication),
            history: publication
                .get("history")
                .and_then(Value::as_str)
                .and_then(|h| serde_json::from_str(h).ok())
                .unwrap_or_default(),
            received_ms: now,
        };
        self.latest.insert(broker.to_owned(), view);
        true
    }

    /// The view at `now`: brokers whose last report came within three of their intervals
    /// (three seconds at least).
    pub fn view(&mut self, now: u64) -> FederationView {
        // A report's interval comes from another broker: saturating, whatever it says.
        self.latest
            .retain(|_, b| now.saturating_sub(b.received_ms) <= b.interval_ms.max(1000).saturating_mul(3));
        let brokers: Vec<BrokerView> = self.latest.values().cloned().collect();
        let mut links: Vec<(String, String)> = brokers
            .iter()
            .flat_map(|b| {
                b.neighbours.iter().map(|n| {
                    if b.broker <= *n { (b.broker.clone(), n.clone()) } else { (n.clone(), b.broker.clone()) }
                })
            })
            .collect();
        links.sort();
        links.dedup();
        FederationView { brokers, links }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(name: &str, neighbours: &[&str]) -> BrokerStats {
        let mut stats: BrokerStats = serde_json::from_value(serde_json::json!({
            "broker": name, "uptime_ms": 1, "clients": 2, "connections": 0, "neighbours": [],
            "advertisements": 3, "subscriptions": 4, "client_requests": 0, "publications_in": 5,
            "notifications_out": 6, "broker_messages_in": 7, "broker_messages_out": 8,
            "slow_clients_dropped": 0, "links_refused": 0, "links_cut": 0, "composites": 0,
            "detectors": 0, "partial_matches": 9, "partial_match_bytes": 0,
            "partial_match_bytes_cap": 0, "composite_matches": 0, "partials_evicted": 0,
            "partials_expired": 0, "partials_ended": 0, "pairs_dropped": 0, "history_stored": 0,
            "history_dropped": 0, "history_failed": 0, "history_removed": 0, "history_queued": 0,
            "history_rows": 10, "link_sessions_resumed": 0, "link_messages_resent": 0,
            "link_duplicates_dropped": 0, "link_sessions_expired": 0, "client_sessions_resumed": 0,
            "client_frames_resent": 0, "client_sessions_expired": 0, "link_traffic": []
        }))
        .expect("stats");
        stats.neighbours = neighbours.iter().map(|n| Name::new(n).expect("name")).collect();
        let b1 = Name::new("B1").expect("name");
        stats.link_traffic =
            vec![LinkTraffic { peer: b1, class: "job_status".to_owned(), messages: 3, bytes: 480 }];
        stats
    }

    #[test]
    fn a_report_conforms_to_the_advertisement_and_reads_back() {
        let report =
            report(&stats("B2", &["B1", "B3"]), 5000, &["[class,eq,'job_status']".to_owned()], |n| {
                if n.as_str() == "B1" { 11 } else { 12 }
            });
        assert!(padres_lang::semantics::conforms(&report, &advertisement()), "{report}");
        assert!(padres_lang::matches(&subscription(), &report));
        let mut federation = Federation::default();
        assert!(federation.receive(100, &report));
        let view = federation.view(200);
        assert_eq!(view.brokers.len(), 1);
        let b2 = &view.brokers[0];
        assert_eq!((b2.broker.as_str(), b2.interval_ms), ("B2", 5000));
        assert_eq!(b2.neighbours, ["B1", "B3"]);
        assert_eq!(b2.counters["publications_in"], 5);
        assert_eq!(b2.counters["history_rows"], 10);
        assert_eq!(b2.messages_out, [("B1".to_owned(), 11), ("B3".to_owned(), 12)].into());
        assert!(b2.rates_out.is_empty(), "one report: no rate yet");
        let traffic: Vec<(&str, &str, u64, u64)> =
            b2.traffic.iter().map(|t| (t.peer.as_str(), t.class.as_str(), t.messages, t.bytes)).collect();
        assert_eq!(traffic, [("B1", "job_status", 3, 480)]);
        assert_eq!(b2.history, ["[class,eq,'job_status']"]);
        assert_eq!(view.links, [("B1".to_owned(), "B2".to_owned()), ("B2".to_owned(), "B3".to_owned())]);
    }

    #[test]
    fn links_are_listed_once_and_silent_brokers_are_forgotten() {
        let mut federation = Federation::default();
        federation.receive(0, &report(&stats("B1", &["B2"]), 1000, &[], |_| 0));
        federation.receive(2000, &report(&stats("B2", &["B1"]), 1000, &[], |_| 0));
        assert_eq!(federation.view(2500).links, [("B1".to_owned(), "B2".to_owned())]);
        // B1 last reported at 0: past three of its intervals at 3,001 it is gone.
        let view = federation.view(3001);
        assert_eq!(view.brokers.iter().map(|b| b.broker.as_str()).collect::<Vec<_>>(), ["B2"]);
        let other: Publication = "[class,'quote'],[broker,'B9']".parse().expect("publication");
        assert!(!federation.receive(3002, &other), "only reports are taken in");
    }

    #[test]
    fn two_reports_give_each_links_message_rate_and_a_restart_gives_none() {
        let mut federation = Federation::default();
        let at = |uptime_ms: u64, to_b1: u64, to_b3: u64| {
            let mut stats = stats("B2", &["B1", "B3"]);
            stats.uptime_ms = uptime_ms;
            report(&stats, 1000, &[], move |n| if n.as_str() == "B1" { to_b1 } else { to_b3 })
        };
        federation.receive(0, &at(10_000, 100, 7));
        federation.receive(2000, &at(12_000, 500, 7));
        let view = federation.view(2000);
        assert_eq!(view.brokers[0].rates_out, [("B1".to_owned(), 200.0), ("B3".to_owned(), 0.0)].into());
        // Restarted: uptime and counters start again; no rate across the restart.
        federation.receive(3000, &at(500, 3, 1));
        assert!(federation.view(3000).brokers[0].rates_out.is_empty());
    }
}
