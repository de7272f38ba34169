//! The HTTP listener, off unless `http = "ADDR:PORT"` (or `--http`) is set: Prometheus
//! metrics and a read-only JSON API for operators and scripts, and, with `--http-gateway`
//! too, the gateway that publishes and subscribes (`net/gateway.rs`).
//!
//! | path | answer |
//! |---|---|
//! | `GET /` | the web monitor (`broker/assets/monitor/`, built into the binary): the overlay with each link's message rate, this broker's routing tables with a filter box, its detectors and its history store, redrawn every 2 s from the JSON API (the routing tables every 10 s, or when the filter or page changes) |
//! | `GET /metrics` | every counter in the OpenMetrics text format ([`crate::metrics`]) |
//! | `GET /api/stats` | what `padres broker stats --json` shows |
//! | `GET /api/links` | per neighbour: up or not, messages and bytes each way, frames queued |
//! | `GET /api/detectors?limit=N&offset=K` | the composite detectors running here, by number: each one's pattern, subscribers, parts sent on, partial matches stored (and their bytes) and matches; the caps and the broker's totals |
//! | `GET /api/history` | the history store: file, filters, durability, indexes, retention, rows, and what the writer stored, dropped and removed; `enabled: false` without one |
//! | `GET /api/federation` | every broker that reported recently ([`crate::monitor`]): its neighbours and counters, and the links between them |
//! | `GET /api/routes?limit=N&offset=K&filter=TEXT` | the routing tables (SRT, PRT, composites) sorted by id: of the rows containing `TEXT` (ASCII case ignored; every row without it), from the `K`-th, at most `N` of each (default 100, at most 10,000), with the tables' totals and how many rows the filter selects |
//! | `POST /api/publish`, `GET /api/subscribe?s=FILTER` | with `--http-gateway`: the gateway for other languages (`net/gateway.rs`) |
//!
//! Every answer is taken from the router task when asked, as `padres broker stats` is.
//! The listener speaks HTTP/1.1: plain, for loopback or a trusted network, or with
//! `--http-tls` over TLS 1.3 with the broker's own certificate (the one its QUIC clients
//! verify), each handshake in a task of its own with a 10 s limit. Requests are
//! authenticated by an `Authorization: Bearer NAME:TOKEN` header, and held to what their
//! principal may read (`net/http_auth.rs`): the gateway and `/api/workflows` to its
//! permits, `/api/routes` and `/api/detectors` to the `routes` right, the other views to
//! `http_views`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use padres_lang::wire::{BrokerStats, MAX_ROUTES_FILTER_BYTES, RoutesReport};
use padres_lang::{MessageId, Name};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::server::TlsStream;
use tokio_rustls::{TlsAcceptor, rustls};

use super::gateway::Gateway;
use super::http_auth::{HttpAuth, Need};
use super::router_task::{Event, Inspect};
use crate::history::Durability;
use crate::metrics::{self, LinkSnapshot};
use crate::monitor::FederationView;

/// Rows of each table `/api/routes` lists when no `limit` is given.
const DEFAULT_ROUTES_LIMIT: u32 = 100;

/// `/api/detectors`: the composite detectors running at this broker.
#[derive(Debug, Serialize)]
pub(super) struct DetectorsView {
    pub(super) broker: Name,
    /// Detectors running here.
    pub(super) total: u64,
    /// Detectors skipped, as asked.
    pub(super) offset: u64,
    /// The caps and windows they run within.
    pub(super) bounds: BoundsView,
    /// The broker's totals, as `padres broker stats` shows them.
    pub(super) stored: u64,
    pub(super) stored_bytes: u64,
    pub(super) matches: u64,
    pub(super) evicted: u64,
    pub(super) expired: u64,
    pub(super) ended: u64,
    pub(super) pairs_dropped: u64,
    /// A page of them, by number.
    pub(super) detectors: Vec<DetectorView>,
}

/// [`crate::detector::Bounds`] as JSON.
#[derive(Debug, Serialize)]
pub(super) struct BoundsView {
    pub(super) per_detector: u64,
    pub(super) per_broker: u64,
    pub(super) max_bytes: u64,
    pub(super) pairs_per_input: u64,
    pub(super) lateness_ms: u64,
}

/// One detector ([`crate::router::DetectorRow`]).
#[derive(Debug, Serialize)]
pub(super) struct DetectorView {
    pub(super) detector: u64,
    /// The pattern as detected here (its operands regrouped by where they come from).
    pub(super) pattern: String,
    /// Where its matches go: `{"from": "client 3", "id": {...}}`.
    pub(super) subscribers: Vec<SubscriberView>,
    /// Its leaf and `until` subscriptions matched here.
    pub(super) subscriptions: u64,
    /// Parts sent on to neighbours, detected there.
    pub(super) parts: Vec<PartView>,
    /// Partial matches stored now, their estimated bytes, and matches completed.
    pub(super) stored: u64,
    pub(super) stored_bytes: u64,
    pub(super) matches: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct SubscriberView {
    pub(super) from: String,
    pub(super) id: MessageId,
}

#[derive(Debug, Serialize)]
pub(super) struct PartView {
    pub(super) id: MessageId,
    pub(super) to: Name,
    pub(super) text: String,
}

/// `/api/history`: this broker's history store, if it keeps one.
#[derive(Debug, Default, Serialize)]
pub(super) struct HistoryView {
    pub(super) broker: Option<Name>,
    /// False: this broker keeps no history (and the rest is empty).
    pub(super) enabled: bool,
    /// The database file.
    pub(super) path: Option<String>,
    /// The filters of what it keeps.
    pub(super) filters: Vec<String>,
    pub(super) durability: Option<Durability>,
    /// Attributes with an index of their own.
    pub(super) indexed: Vec<Name>,
    /// Retention.
    pub(super) max_age_ms: Option<u64>,
    pub(super) max_rows: Option<u64>,
    pub(super) max_bytes: Option<u64>,
    /// The writer's counters (as `padres broker stats` shows them) and historic queries
    /// put to this store.
    pub(super) rows: u64,
    pub(super) stored: u64,
    pub(super) dropped: u64,
    pub(super) failed: u64,
    pub(super) removed: u64,
    pub(super) queued: u64,
    pub(super) queries: u64,
}

/// Serves `listener` until `shutdown` completes: plain HTTP, or HTTPS with `tls`.
pub(super) async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    gateway: Gateway,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // The monitor's files hold no data: they are served to anyone, and what they show comes
    // from the views below, which `guard` keeps to who may read them.
    let files = axum::Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", MONITOR_HTML) }))
        .route("/monitor.js", get(|| async { asset("text/javascript; charset=utf-8", MONITOR_JS) }))
        .route("/monitor.css", get(|| async { asset("text/css; charset=utf-8", MONITOR_CSS) }));
    let views = axum::Router::new()
        .route("/metrics", get(metrics_text))
        .route("/api/stats", get(stats))
        .route("/api/links", get(links))
        .route("/api/federation", get(federation))
        .route("/api/history", get(history))
        .route_layer(axum::middleware::from_fn_with_state((gateway.auth.clone(), Need::View), guard))
        .with_state(gateway.events.clone());
    // What shows clients' subscriptions: the `routes` right.
    let tables = axum::Router::new()
        .route("/api/routes", get(routes))
        .route("/api/detectors", get(detectors))
        .route_layer(axum::middleware::from_fn_with_state((gateway.auth.clone(), Need::Routes), guard))
        .with_state(gateway.events.clone());
    let app = axum::Router::new()
        .route("/api/publish", post(super::gateway::publish))
        .route("/api/subscribe", get(super::gateway::subscribe))
        .route("/api/workflows", get(super::gateway::workflows))
        .with_state(gateway)
        .merge(views)
        .merge(tables)
        .merge(files);
    let served = match tls {
        Some(tls) => axum::serve(TlsListener::new(listener, tls), app).with_graceful_shutdown(shutdown).await,
        None => axum::serve(listener, app).with_graceful_shutdown(shutdown).await,
    };
    if let Err(error) = served {
        tracing::error!(%error, "the HTTP listener stopped");
    }
}

/// Keeps a router's routes to who may read them (`net/http_auth.rs`): the read-only views
/// as `http_views` says, the routing tables and detectors (every client's subscriptions)
/// to principals with the `routes` right.
async fn guard(
    State((auth, need)): State<(Arc<HttpAuth>, Need)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let allowed = match need {
        Need::View => auth.view(request.headers()).await,
        Need::Routes => auth.routes(request.headers()).await,
    };
    match allowed {
        Ok(()) => next.run(request).await,
        Err(denied) => denied.into_response(),
    }
}

/// How long a connection may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes under way at once; a connection beyond them is closed at once.
const MAX_HANDSHAKES: usize = 256;

/// TLS connections for [`axum::serve`], each handshaken in a task of its own, so that a
/// client slow to finish its handshake holds up no one else.
#[derive(Debug)]
struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: io::Result<SocketAddr>,
    _accepting: AbortOnDropHandle,
}

/// Stops the accepting task with the listener.
#[derive(Debug)]
struct AbortOnDropHandle(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDropHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl TlsListener {
    fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        let local = tcp.local_addr();
        let (done, ready) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of descriptors, or the like: wait rather than spin.
                        tracing::warn!(%error, "HTTPS accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                    tracing::debug!(%peer, "{MAX_HANDSHAKES} TLS handshakes under way: connection closed");
                    continue;
                };
                let (acceptor, done) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = done.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Self { ready, local, _accepting: AbortOnDropHandle(accepting) }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task is gone (it never ends while the listener lives).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.local {
            Ok(addr) => Ok(*addr),
            Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
        }
    }
}

/// The web monitor's files, built into the binary.
const MONITOR_HTML: &str = include_str!("../../assets/monitor/index.html");
const MONITOR_JS: &str = include_str!("../../assets/monitor/monitor.js");
const MONITOR_CSS: &str = include_str!("../../assets/monitor/monitor.css");

/// One of the monitor's files.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// The broker is shutting down: nothing to answer with.
fn unavailable() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "the broker is shutting down\n").into_response()
}

/// Asks the router task `question`; the answer, or the response saying it is gone.
async fn ask<T>(
    events: &mpsc::Sender<Event>,
    question: impl FnOnce(oneshot::Sender<T>) -> Inspect,
) -> Result<T, Response> {
    let (reply, answer) = oneshot::channel();
    events.send(Event::Inspect(question(reply))).await.map_err(|_| unavailable())?;
    answer.await.map_err(|_| unavailable())
}

async fn metrics_text(State(events): State<mpsc::Sender<Event>>) -> Response {
    match ask(&events, Inspect::Snapshot).await {
        Ok(snapshot) => {
            ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], metrics::encode(snapshot)).into_response()
        }
        Err(gone) => gone,
    }
}

async fn stats(State(events): State<mpsc::Sender<Event>>) -> Response {
    ask(&events, Inspect::Snapshot)
        .await
        .map_or_else(|gone| gone, |s| Json::<BrokerStats>(s.stats).into_response())
}

async fn links(State(events): State<mpsc::Sender<Event>>) -> Response {
    ask(&events, Inspect::Snapshot)
        .await
        .map_or_else(|gone| gone, |s| Json::<Vec<LinkSnapshot>>(s.links).into_response())
}

async fn federation(State(events): State<mpsc::Sender<Event>>) -> Response {
    ask(&events, Inspect::Federation)
        .await
        .map_or_else(|gone| gone, |view| Json::<FederationView>(view).into_response())
}

#[derive(Debug, Deserialize)]
struct RoutesParams {
    limit: Option<u32>,
    #[serde(default)]
    offset: u32,
    #[serde(default)]
    filter: String,
}

async fn routes(State(events): State<mpsc::Sender<Event>>, Query(params): Query<RoutesParams>) -> Response {
    let RoutesParams { limit, offset, filter } = params;
    if filter.len() > MAX_ROUTES_FILTER_BYTES {
        let why = format!("the filter is longer than {MAX_ROUTES_FILTER_BYTES} bytes\n");
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let limit = limit.unwrap_or(DEFAULT_ROUTES_LIMIT);
    ask(&events, |reply| Inspect::Routes { limit, offset, filter, reply })
        .await
        .map_or_else(|gone| gone, |report| Json::<RoutesReport>(report).into_response())
}

#[derive(Debug, Deserialize)]
struct PageParams {
    limit: Option<u32>,
    #[serde(default)]
    offset: u32,
}

async fn detectors(State(events): State<mpsc::Sender<Event>>, Query(params): Query<PageParams>) -> Response {
    let PageParams { limit, offset } = params;
    let limit = limit.unwrap_or(DEFAULT_ROUTES_LIMIT);
    ask(&events, |reply| Inspect::Detectors { limit, offset, reply })
        .await
        .map_or_else(|gone| gone, |view| Json::<DetectorsView>(view).into_response())
}

async fn history(State(events): State<mpsc::Sender<Event>>) -> Response {
    ask(&events, Inspect::History)
        .await
        .map_or_else(|gone| gone, |view| Json::<HistoryView>(view).into_response())
}
