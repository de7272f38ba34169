//! The broker's metrics in the Prometheus text format (OpenMetrics 1.0), as `/metrics`
//! serves them ([`crate::net`]'s HTTP listener).
//!
//! The router task owns every counter; a scrape asks it for a [`Snapshot`] and encodes
//! that, so the figures of one scrape are consistent with each other and agree with
//! `padres broker stats` taken at the same moment. Names follow Prometheus conventions:
//! a `padres_` prefix, base units in the name (`_bytes`, `_seconds`), counters ending in
//! `_total`. Encoding is `prometheus-client`'s, not formatted here.
//!
//! | metric | type | from `broker stats` |
//! |---|---|---|
//! | `padres_uptime_seconds` | gauge | `uptime_ms` |
//! | `padres_clients`, `padres_connections`, `padres_neighbours` | gauge | `clients`, `connections`, `neighbours` |
//! | `padres_client_requests_total` | counter | `client_requests` |
//! | `padres_publications_in_total` | counter | `publications_in` |
//! | `padres_class_publications_in_total{class}` | counter | `publications_in` per class: for workflows, `job_status` (job transitions published by agents here), `trigger` (generations started), `agent_load` (agents' load reports) |
//! | `padres_notifications_out_total` | counter | `notifications_out` (atomic and composite) |
//! | `padres_broker_messages_in_total`, `…_out_total` | counter | `broker_messages_in`, `…_out` |
//! | `padres_link_messages_in_total{peer}`, `…_out_total{peer}` | counter | per neighbour |
//! | `padres_link_received_bytes_total{peer}`, `padres_link_sent_bytes_total{peer}` | counter | per neighbour, UDP bytes of its QUIC connections |
//! | `padres_link_queued_frames{peer}` | gauge | frames waiting for the neighbour's link |
//! | `padres_link_class_messages_out_total{peer,class}`, `padres_link_class_sent_bytes_total{peer,class}` | counter | `link_traffic`: messages and encoded bytes sent per neighbour and message class ([`crate::traffic`]) |
//! | `padres_client_queued_bytes` | gauge | notifications waiting for clients, estimated |
//! | `padres_slow_clients_dropped_total`, `padres_links_refused_total`, `padres_links_cut_total` | counter | same names |
//! | `padres_link_sessions_resumed_total`, `padres_link_messages_resent_total`, `padres_link_duplicates_dropped_total`, `padres_link_sessions_expired_total` | counter | same names |
//! | `padres_client_sessions_resumed_total`, `padres_client_frames_resent_total`, `padres_client_sessions_expired_total` | counter | same names |
//! | `padres_clients_refused_total`, `padres_permission_denials_total` | counter | same names: clients refused at the hello, requests refused for a missing right ([`crate::auth`]) |
//! | `padres_neighbour_restarts_total`, `padres_restart_publications_sent_total`, `padres_restart_duplicates_dropped_total` | counter | same names: restarted neighbours re-synchronised (`router/rejoin.rs`) |
//! | `padres_settle_timeouts_total` | counter | `settle_timeouts`: requests answered at `limits.settle_timeout_ms` before they settled (`router/settle.rs`) |
//! | `padres_routing_table_entries{table}` | gauge | `advertisements` (`srt`), `subscriptions` (`prt`), `composites` |
//! | `padres_composite_detectors`, `padres_partial_matches`, `padres_partial_match_bytes`, `padres_partial_match_cap_bytes` | gauge | `detectors`, `partial_matches`, `partial_match_bytes`, `partial_match_bytes_cap` |
//! | `padres_composite_matches_total`, `padres_partial_matches_evicted_total`, `…_expired_total`, `…_ended_total`, `padres_composite_pairs_dropped_total` | counter | `composite_matches`, `partials_evicted`, `partials_expired`, `partials_ended`, `pairs_dropped` |
//! | `padres_history_rows_written_total`, `padres_history_dropped_total`, `padres_history_failed_total`, `padres_history_rows_removed_total` | counter | `history_stored`, `history_dropped`, `history_failed`, `history_removed` |
//! | `padres_history_queued`, `padres_history_rows` | gauge | `history_queued`, `history_rows` |
//! | `padres_history_queries_total` | counter | historic queries put to this broker's store |

use padres_lang::Name;
use padres_lang::wire::{BrokerStats, LinkTraffic};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use serde::Serialize;

/// One neighbour's link, as the router task counts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LinkSnapshot {
    /// The neighbour.
    pub peer: Name,
    /// True if a link to it is up now.
    pub up: bool,
    /// Messages received from it, since this broker started.
    pub messages_in: u64,
    /// Messages sent to it.
    pub messages_out: u64,
    /// UDP bytes received on its QUIC connections (every connection so far).
    pub bytes_in: u64,
    /// UDP bytes sent on them.
    pub bytes_out: u64,
    /// Frames waiting to be written to it now.
    pub queued_frames: u64,
}

/// Everything `/metrics` shows, taken at one moment by the router task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// What `padres broker stats` shows.
    pub stats: BrokerStats,
    /// Per neighbour ever linked, sorted by name.
    pub links: Vec<LinkSnapshot>,
    /// Estimated bytes of notifications waiting for clients.
    pub client_queued_bytes: u64,
    /// Historic queries put to the history store.
    pub history_queries: u64,
    /// Publications received from clients, per class (past [`crate::traffic::MAX_CLASSES`]
    /// classes, the rest under `(other)`).
    pub publications_by_class: Vec<(String, u64)>,
}

/// The OpenMetrics content type `/metrics` is served with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `snapshot` in the OpenMetrics text format.
pub fn encode(snapshot: Snapshot) -> String {
    let mut registry = Registry::with_prefix("padres");
    registry.register_collector(Box::new(snapshot));
    let mut text = String::new();
    // Writing into a String does not fail; the collector's own encoding does not either.
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes into a string");
    text
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.stats;
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let bytes = Some(Unit::Bytes);
        // (name, help, unit, value); the encoder appends the unit and, for counters, `_total`.
        let counters: [(&str, &str, Option<Unit>, u64); 31] = [
            ("client_requests", "Requests received from clients.", None, s.client_requests),
            ("publications_in", "Publications received from clients.", None, s.publications_in),
            (
                "notifications_out",
                "Notifications sent to clients (atomic and composite).",
                None,
                s.notifications_out,
            ),
            ("broker_messages_in", "Messages received from neighbour brokers.", None, s.broker_messages_in),
            ("broker_messages_out", "Messages sent to neighbour brokers.", None, s.broker_messages_out),
            (
                "slow_clients_dropped",
                "Clients cut off because they did not read.",
                None,
                s.slow_clients_dropped,
            ),
            ("links_refused", "Brokers refused at the hello.", None, s.links_refused),
            ("clients_refused", "Clients refused at the hello (their credentials).", None, s.clients_refused),
            (
                "permission_denials",
                "Client requests refused because their principal lacked the right.",
                None,
                s.permission_denials,
            ),
            (
                "neighbour_restarts",
                "Neighbours found restarted and re-synchronised without losing their routes here.",
                None,
                s.neighbour_restarts,
            ),
            (
                "restart_publications_sent",
                "Publications kept for a restarted neighbour and sent once it had re-synchronised.",
                None,
                s.restart_publications_sent,
            ),
            (
                "restart_duplicates_dropped",
                "Publications from neighbours passed on already (sent again after a restart), dropped.",
                None,
                s.restart_duplicates_dropped,
            ),
            (
                "settle_timeouts",
                "Requests and forwarded copies answered at their settle deadline, not settled.",
                None,
                s.settle_timeouts,
            ),
            ("links_cut", "Neighbour links cut because they did not keep up.", None, s.links_cut),
            (
                "client_sessions_resumed",
                "Client sessions that went on over a new connection after theirs was lost.",
                None,
                s.client_sessions_resumed,
            ),
            (
                "client_frames_resent",
                "Frames sent again to clients whose sessions resumed.",
                None,
                s.client_frames_resent,
            ),
            (
                "client_sessions_expired",
                "Client sessions ended because the client did not return within the window.",
                None,
                s.client_sessions_expired,
            ),
            (
                "link_sessions_resumed",
                "Link sessions that went on over a new link after theirs dropped.",
                None,
                s.link_sessions_resumed,
            ),
            (
                "link_messages_resent",
                "Broker messages sent from a link session's outbox when its link returned.",
                None,
                s.link_messages_resent,
            ),
            (
                "link_duplicates_dropped",
                "Broker messages received twice over a returning link and dropped.",
                None,
                s.link_duplicates_dropped,
            ),
            (
                "link_sessions_expired",
                "Link sessions ended: the link did not return in time, or too much waited.",
                None,
                s.link_sessions_expired,
            ),
            (
                "composite_matches",
                "Composite matches completed by this broker's detectors.",
                None,
                s.composite_matches,
            ),
            ("partial_matches_evicted", "Partial matches evicted by a cap.", None, s.partials_evicted),
            (
                "partial_matches_expired",
                "Partial matches dropped when their window passed.",
                None,
                s.partials_expired,
            ),
            (
                "partial_matches_ended",
                "Partial matches ended by an until publication.",
                None,
                s.partials_ended,
            ),
            (
                "composite_pairs_dropped",
                "Matches not formed: an input reached the pair limit.",
                None,
                s.pairs_dropped,
            ),
            ("history_rows_written", "Publications the history store wrote.", None, s.history_stored),
            (
                "history_dropped",
                "Publications not stored: the writer's queue was full.",
                None,
                s.history_dropped,
            ),
            ("history_failed", "Publications not stored: their write failed.", None, s.history_failed),
            (
                "history_rows_removed",
                "Rows deleted by the history store's retention.",
                None,
                s.history_removed,
            ),
            ("history_queries", "Historic queries put to the history store.", None, self.history_queries),
        ];
        for (name, help, unit, value) in &counters {
            one(&mut encoder, name, help, unit.as_ref(), &ConstCounter::new(*value))?;
        }
        let gauges: [(&str, &str, Option<Unit>, u64); 10] = [
            ("clients", "Clients connected now.", None, s.clients),
            (
                "connections",
                "Connections open now (clients and links other brokers dialled).",
                None,
                s.connections,
            ),
            ("neighbours", "Neighbour links up now.", None, count(s.neighbours.len())),
            ("composite_detectors", "Composite detectors running here.", None, s.detectors),
            ("partial_matches", "Partial matches the detectors store now.", None, s.partial_matches),
            ("history_queued", "Publications waiting for the history writer.", None, s.history_queued),
            (
                "history_rows",
                "Rows in the history store (as of its last retention pass).",
                None,
                s.history_rows,
            ),
            (
                "partial_match",
                "Estimated bytes the stored partial matches hold.",
                bytes.clone(),
                s.partial_match_bytes,
            ),
            (
                "partial_match_cap",
                "The cap on partial_match_bytes.",
                bytes.clone(),
                s.partial_match_bytes_cap,
            ),
            (
                "client_queued",
                "Estimated bytes of notifications waiting for clients.",
                bytes,
                self.client_queued_bytes,
            ),
        ];
        for (name, help, unit, value) in &gauges {
            one(&mut encoder, name, help, unit.as_ref(), &ConstGauge::new(*value))?;
        }
        #[allow(clippy::cast_precision_loss)] // milliseconds of uptime fit an f64 exactly for 285,000 years
        let uptime = ConstGauge::new(s.uptime_ms as f64 / 1000.0);
        one(&mut encoder, "uptime", "Time since the broker started.", Some(&Unit::Seconds), &uptime)?;

        let tables = [("srt", s.advertisements), ("prt", s.subscriptions), ("composites", s.composites)];
        let help = "Entries in the routing tables: srt (advertisements), prt (subscriptions), composites.";
        let mut family = encoder.encode_descriptor("routing_table_entries", help, None, MetricType::Gauge)?;
        for (table, value) in tables {
            ConstGauge::new(value).encode(family.encode_family(&[("table", table)].as_slice())?)?;
        }

        type PerLink = fn(&LinkSnapshot) -> u64;
        let per_link: [(&str, &str, Option<Unit>, MetricType, PerLink); 5] = [
            ("link_messages_in", "Messages received from a neighbour.", None, MetricType::Counter, |l| {
                l.messages_in
            }),
            ("link_messages_out", "Messages sent to a neighbour.", None, MetricType::Counter, |l| {
                l.messages_out
            }),
            (
                "link_received",
                "UDP bytes received on a neighbour's connections.",
                Some(Unit::Bytes),
                MetricType::Counter,
                |l| l.bytes_in,
            ),
            (
                "link_sent",
                "UDP bytes sent on a neighbour's connections.",
                Some(Unit::Bytes),
                MetricType::Counter,
                |l| l.bytes_out,
            ),
            (
                "link_queued_frames",
                "Frames waiting to be written to a neighbour.",
                None,
                MetricType::Gauge,
                |l| l.queued_frames,
            ),
        ];
        for (name, help, unit, kind, value) in &per_link {
            let mut family = encoder.encode_descriptor(name, help, unit.as_ref(), *kind)?;
            for link in &self.links {
                let labels = [("peer", link.peer.as_str())];
                let labels = labels.as_slice();
                let sample = family.encode_family(&labels)?;
                match kind {
                    MetricType::Counter => ConstCounter::new(value(link)).encode(sample)?,
                    _ => ConstGauge::new(value(link)).encode(sample)?,
                }
            }
        }

        let help = "Publications received from clients, per class: job_status counts job transitions entering here, trigger generations started, agent_load agents' load reports.";
        let mut family =
            encoder.encode_descriptor("class_publications_in", help, None, MetricType::Counter)?;
        for (class, count) in &self.publications_by_class {
            let labels = [("class", class.as_str())];
            ConstCounter::new(*count).encode(family.encode_family(&labels.as_slice())?)?;
        }

        type PerClass = fn(&LinkTraffic) -> u64;
        let per_class: [(&str, &str, Option<Unit>, PerClass); 2] = [
            ("link_class_messages_out", "Messages sent to a neighbour, per message class.", None, |t| {
                t.messages
            }),
            (
                "link_class_sent",
                "Encoded bytes of the messages sent to a neighbour, per message class.",
                Some(Unit::Bytes),
                |t| t.bytes,
            ),
        ];
        for (name, help, unit, value) in &per_class {
            let mut family = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
            for row in &s.link_traffic {
                let labels = [("peer", row.peer.as_str()), ("class", row.class.as_str())];
                ConstCounter::new(value(row)).encode(family.encode_family(&labels.as_slice())?)?;
            }
        }
        Ok(())
    }
}

/// Encodes `metric` as the one sample of its own family.
fn one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: &dyn EncodeMetric,
) -> Result<(), std::fmt::Error> {
    metric.encode(encoder.encode_descriptor(name, help, unit, metric.metric_type())?)
}
