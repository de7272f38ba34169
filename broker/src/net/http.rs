//! The HTTP listener, off unless `http = "ADDR:PORT"` (or `--http`) is set: Prometheus
//! metrics and a read-only JSON API for operators and scripts, and, with `--http-gateway`
//! too, the gateway that publishes and subscribes (`net/gateway.rs`).
//!
//! | path | answer |
//! |---|---|
//! | `GET /metrics` | every counter in the OpenMetrics text format ([`crate::metrics`]) |
//! | `GET /api/stats` | what `padres broker stats --json` shows |
//! | `GET /api/links` | per neighbour: up or not, messages and bytes each way, frames queued |
//! | `GET /api/federation` | every broker that reported recently ([`crate::monitor`]): its neighbours and counters, and the links between them |
//! | `GET /api/routes?limit=N&offset=K&filter=TEXT` | the routing tables (SRT, PRT, composites) sorted by id: of the rows containing `TEXT` (ASCII case ignored; every row without it), from the `K`-th, at most `N` of each (default 100, at most 10,000), with the tables' totals and how many rows the filter selects |
//! | `POST /api/publish`, `GET /api/subscribe?s=FILTER` | with `--http-gateway`: the gateway for other languages (`net/gateway.rs`) |
//!
//! Every answer is taken from the router task when asked, as `padres broker stats` is.
//! The listener speaks plain HTTP/1.1 and is meant for a trusted network or loopback
//! (a scraper or a script on the same host).

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use padres_lang::wire::{BrokerStats, RoutesReport};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use super::gateway::Gateway;
use super::router_task::{Event, Inspect};
use crate::metrics::{self, LinkSnapshot};
use crate::monitor::FederationView;

/// Rows of each table `/api/routes` lists when no `limit` is given.
const DEFAULT_ROUTES_LIMIT: u32 = 100;

/// Serves `listener` until `shutdown` completes.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    gateway: Gateway,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let inspect = axum::Router::new()
        .route("/metrics", get(metrics_text))
        .route("/api/stats", get(stats))
        .route("/api/links", get(links))
        .route("/api/routes", get(routes))
        .route("/api/federation", get(federation))
        .with_state(gateway.events.clone());
    let app = axum::Router::new()
        .route("/api/publish", post(super::gateway::publish))
        .route("/api/subscribe", get(super::gateway::subscribe))
        .with_state(gateway)
        .merge(inspect);
    if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(%error, "the HTTP listener stopped");
    }
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
    let limit = limit.unwrap_or(DEFAULT_ROUTES_LIMIT);
    ask(&events, |reply| Inspect::Routes { limit, offset, filter, reply })
        .await
        .map_or_else(|gone| gone, |report| Json::<RoutesReport>(report).into_response())
}
