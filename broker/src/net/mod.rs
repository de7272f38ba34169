//! The I/O shell around the router, one job per file:
//!
//! - `mod.rs` (this file): serving: bind the QUIC endpoint, accept connections within
//!   `limits.max_connections`, and shut down gracefully.
//! - `accept.rs`: one accepted connection: the handshake (`padres_transport::handshake`),
//!   then a client session or a neighbour link.
//! - `router_task.rs`: the one task that owns the [`Router`](crate::router::Router) and the
//!   [`LinkPolicy`](crate::links::LinkPolicy), fed events over a bounded channel; it hands
//!   outputs to client and link queues, runs the policy's timers, and answers queries.
//! - `session.rs`: a client connection: frames in, requests to the router task,
//!   notifications and replies out; `client_sessions.rs`: what outlives a client's lost
//!   connection (numbered frames, an outbox, resuming), kept by the router task.
//! - `link.rs`: a neighbour link: dialling one target once, and serving a link either
//!   side opened.
//! - `write.rs`: batched writes shared by sessions and links.
//! - `tls.rs`, [`cert`]: whom a broker trusts when it dials, and its own identity.
//! - `http.rs`: the optional HTTP listener: `/metrics` and a read-only JSON API;
//!   `gateway.rs`: publishing and subscribing over it, for other languages, when enabled
//!   too (`--http-gateway`).
//!
//! Trust (see `tls.rs`): a neighbour is verified against `peer_certs`, the federation CA,
//! and, for a neighbour on a loopback address, the certificate its broker left in the
//! local registry ([`padres_transport::local`]). With a federation CA or pinned
//! certificates (`accept_brokers`), every peer is asked for a certificate and a broker
//! dialling in must present one of them for the name it gives, or its hello is refused
//! (`accept.rs`; the TLS handshake proves only that the peer holds the key, so that an
//! untrusted certificate is refused with the reason).
//!
//! Delivery under faults (`docs/delivery.md`): links are FIFO QUIC streams carrying
//! numbered messages of a link session ([`crate::resume`]). A link that drops and returns
//! within `link_sessions.window_ms` loses nothing: what was queued or in flight on it, and
//! what was routed to the neighbour meanwhile, is sent again from its session's outbox,
//! and what arrives twice is dropped. Past the window the router forgets the routes the
//! neighbour brought ([`Input::NeighbourDown`](crate::router::Input::NeighbourDown)), and
//! when it returns the two brokers re-synchronise. A neighbour that restarted within the
//! window keeps its routes here while it re-synchronises, and is sent the publications its
//! old session had not had acknowledged once its subscriptions are back
//! ([`Input::NeighbourRestarted`](crate::router::Input::NeighbourRestarted)). Clients hold sessions the same way
//! (`client_sessions.rs`): a client whose connection is lost keeps its client id, routes
//! and what is routed to it for `client_sessions.window_ms`, and resumes with nothing lost
//! or doubled.
//!
//! Slow clients: what waits for a client is counted in (estimated) bytes; a client whose
//! backlog passes `limits.max_queued_bytes_per_client` is disconnected with that reason,
//! so one reader that stops never holds up the router or anyone else. Slow links are the
//! link policy's (`crate::links`).
//!
//! Shutdown (Ctrl-C, SIGTERM): the endpoint stops accepting; the router task closes every
//! link with [`CloseCode::ShuttingDown`], says goodbye to every client, and drops their
//! queues; sessions and links write what was queued and finish their streams; the shell
//! waits for every task it started (at most [`DRAIN_TIMEOUT`]) before closing the
//! endpoint.

mod accept;
pub mod cert;
mod client_sessions;
pub mod detection;
mod gateway;
mod http;
pub mod http_auth;
mod link;
mod router_task;
mod session;
mod tls;
mod write;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use padres_lang::Name;
use padres_lang::wire::CloseCode;
use padres_transport::tls::PeerCertificates;
use padres_transport::{FrameError, HandshakeError};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::auth::Auth;
use crate::config::{Config, ConfigError};
use crate::history::Store;
use crate::history::writer::History;
use crate::router::{ClientId, Options, Router};

/// Why the broker could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The TLS identity.
    #[error(transparent)]
    Cert(#[from] cert::CertError),
    /// TLS configuration.
    #[error(transparent)]
    Tls(#[from] padres_transport::TlsError),
    /// The configuration is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The history store.
    #[error(transparent)]
    History(#[from] crate::history::HistoryError),
    /// The HTTP listener's socket.
    #[error("cannot listen for HTTP on {addr}: {source}")]
    HttpListen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The socket.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The composite detection thread.
    #[error("cannot start the composite detection thread: {0}")]
    DetectionThread(std::io::Error),
}

/// Why a connection or a link ended, or a dial failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionError {
    /// QUIC.
    #[error("connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// Starting a connection.
    #[error("connect: {0}")]
    Connect(#[from] quinn::ConnectError),
    /// The handshake.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// Reading or writing frames.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// TLS configuration for a dial.
    #[error(transparent)]
    Tls(#[from] padres_transport::TlsError),
    /// Nothing to verify a neighbour's certificate with.
    #[error(
        "no certificate to trust for neighbour {0}: give --peer-cert FILE (its cert.pem) or a federation_ca, or \
         start that broker on this machine so that it registers its certificate"
    )]
    NoTrust(SocketAddr),
    /// A neighbour's host name.
    #[error("cannot resolve {host}: {why}")]
    Resolve {
        /// The host.
        host: String,
        /// Why.
        why: String,
    },
    /// A neighbour's certificate does not carry the name it gave.
    #[error("the neighbour says it is '{0}', but its certificate is not issued for that name")]
    NameMismatch(Name),
    /// A broker without the federation's certificate for the name it claims.
    #[error("{0}")]
    Forbidden(String),
    /// The peer broke the protocol.
    #[error("{0}")]
    Protocol(String),
    /// The peer closed the link for a reason.
    #[error("closed by the peer: {0:?}")]
    ClosedBy(CloseCode),
    /// The router task is gone (shutting down).
    #[error("the broker is shutting down")]
    ShuttingDown,
}

/// How long shutdown waits for sessions and links to write what was queued.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// What every connection task needs to know of the configuration.
#[derive(Clone, Copy, Debug)]
struct Limits {
    max_frame: usize,
    max_queued: usize,
}

/// Runs the broker until Ctrl-C or SIGTERM. Prints `listening on quic://ADDR` once bound.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    serve_until(config, None, shutdown_signal()).await
}

/// Runs the broker until `shutdown` completes, sending the bound address to `bound` (for
/// brokers embedded in tests, which listen on port 0).
pub async fn serve_until(
    config: Config,
    bound: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let settings = config.validate()?;
    let auth = Arc::new(config.auth.compile().map_err(|e| ConfigError::Invalid(format!("auth: {e}")))?);
    let name = settings.name.clone();
    let identity = cert::identity(&config)?;
    // Peers are asked for a certificate where there is one to trust.
    let certificates = if config.federation_ca.is_some() || !config.accept_brokers.is_empty() {
        let trusted = PeerCertificates::new(config.federation_ca.as_deref(), &config.accept_brokers)?;
        Some(Arc::new(trusted))
    } else {
        None
    };
    let server_config = padres_transport::tls::server_config(&identity.tls, certificates.is_some())?;
    let listen_error = |source| ServeError::Listen { addr: config.listen, source };
    let socket = std::net::UdpSocket::bind(config.listen).map_err(listen_error)?;
    let endpoint =
        padres_transport::tls::server_endpoint(socket, server_config, &identity.tls).map_err(listen_error)?;
    let addr = endpoint.local_addr().map_err(listen_error)?;
    let incarnation = cert::next_incarnation(&config.data_dir)?;
    // A store that cannot be opened stops the broker here, before it serves anyone.
    let history = match settings.history {
        Some(h) => {
            let store = Store::open(&config.data_dir, h.store)?;
            tracing::info!(path = %store.path().display(), filters = h.filters.len(), "history store open");
            Some((History::start(store, h.queue), h.filters))
        }
        None => None,
    };
    let http = match config.http {
        Some(addr) => {
            let http_error = |source| ServeError::HttpListen { addr, source };
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(http_error)?;
            let bound = listener.local_addr().map_err(http_error)?;
            let tls = if config.http_tls {
                Some(padres_transport::tls::https_config(&identity.tls)?)
            } else {
                None
            };
            Some((listener, bound, tls))
        }
        None => None,
    };
    let options = Options { incarnation, ..settings.router };
    let router = Router::with_options(name.clone(), options);
    let detection = if options.offload_detection {
        let detection = crate::router::Detection::new(*router.detector_bounds());
        Some(detection::DetectionThread::spawn(detection).map_err(ServeError::DetectionThread)?)
    } else {
        None
    };
    // Local clients trust what verifies this broker's certificate: the certificate itself,
    // or, where the federation CA issued it, the CA (a pinned leaf is no trust anchor for
    // a certificate it did not sign).
    let trusted = match &config.federation_ca {
        Some(ca) => {
            std::fs::read_to_string(ca).map_err(|e| ConfigError::Invalid(format!("{}: {e}", ca.display())))?
        }
        None => identity.pem.clone(),
    };
    let registered = match padres_transport::local::register(addr.port(), trusted.as_bytes()) {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(%error, "cannot register the certificate for local clients");
            false
        }
    };
    // Before the QUIC line, which scripts and tests read first to learn the address.
    if let Some((_, http, tls)) = &http {
        let gateway = if config.http_gateway { ", gateway /api/publish, /api/subscribe" } else { "" };
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(%http, scheme, "HTTP listener: / (web monitor), /metrics, /api/stats, /api/links, /api/routes, /api/detectors, /api/history, /api/federation{gateway}");
        println!("padres-broker {} http on {scheme}://{http}", config.name);
    }
    tracing::info!(broker = %config.name, %addr, incarnation, "listening");
    println!("padres-broker {} listening on quic://{addr}", config.name);
    if let Some(bound) = bound {
        let _ = bound.send(addr);
    }
    announce_security(&config, &auth);
    if config.insecure && !config.neighbours.is_empty() {
        tracing::warn!("INSECURE: neighbours' certificates are not verified; anyone can pose as a neighbour");
        eprintln!(
            "padres-broker: WARNING: --insecure: neighbour certificates are NOT verified (development only)"
        );
    }
    let mut shutdown = std::pin::pin!(shutdown);

    let (events, inbox) = mpsc::channel(1024);
    let limits = Limits {
        max_frame: config.limits.max_frame_bytes,
        max_queued: config.limits.max_queued_bytes_per_client,
    };
    let open = Arc::new(AtomicUsize::new(0));
    let dialer = link::Dialer {
        cancelled: tokio::sync::watch::channel(false).0,
        endpoint: endpoint.clone(),
        tls: tls::Dialer::new(&config, &identity.tls),
        targets: settings.neighbours,
        me: name.clone(),
        max_frame: limits.max_frame,
    };
    let reports = router_task::Reports { interval_ms: config.monitor_interval_ms, view: http.is_some() };
    let setup = router_task::Setup {
        limits,
        open: open.clone(),
        history,
        reports,
        sessions: settings.sessions,
        client_window_ms: settings.client_window_ms,
        allow_drop_link: config.allow_drop_link,
        detection,
    };
    let router_task = tokio::spawn(router_task::run(router, inbox, events.clone(), dialer, setup));
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    // Client ids, for QUIC clients and the gateway's alike.
    let next_client = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Tokens are checked two at a time, and at most TOKENS_WAITING wait, QUIC hellos and
    // HTTP requests together.
    let verifying = Arc::new(tokio::sync::Semaphore::new(2));
    let waiting = Arc::new(tokio::sync::Semaphore::new(accept::TOKENS_WAITING));
    let connections = accept::Connections::default();
    let http_task = http.map(|(listener, bound, tls)| {
        let gateway = gateway::Gateway {
            events: events.clone(),
            next_client: next_client.clone(),
            max_frame: limits.max_frame,
            enabled: config.http_gateway,
            connections: connections.clone(),
            auth: Arc::new(http_auth::HttpAuth::new(
                auth.clone(),
                http_auth::views_open(config.http_views, bound),
                verifying.clone(),
                waiting.clone(),
            )),
        };
        tokio::spawn(http::serve(listener, tls, gateway, async move {
            let _ = http_stopped.await;
        }))
    });
    let gate = accept::Gate { auth: auth.clone(), verifying, waiting, connections, certificates };
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                if open.load(Ordering::Relaxed) >= config.limits.max_connections {
                    tracing::warn!(peer = %incoming.remote_address(), "connection refused: limits.max_connections reached");
                    incoming.refuse();
                    continue;
                }
                let guard = OpenGuard::new(open.clone());
                let events = events.clone();
                let id: ClientId = next_client.fetch_add(1, Ordering::Relaxed) + 1;
                let broker = name.clone();
                let gate = gate.clone();
                connections.spawn(async move {
                    let _guard = guard;
                    if let Err(error) = accept::connection(incoming, id, broker, events, limits, gate).await {
                        tracing::debug!(client = id, %error, "connection ended");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
        }
    }
    // The HTTP listener stops taking requests (its open ones end with 503 once the router
    // task is gone). The router task closes links and client queues; every task then
    // writes what it holds.
    let _ = stop_http.send(());
    let _ = events.send(router_task::Event::Shutdown).await;
    drop(events);
    // The router task gives its own links DRAIN_TIMEOUT; this wait is a little longer so
    // that it never cuts what the router task is still finishing.
    let drained = tokio::time::timeout(DRAIN_TIMEOUT + Duration::from_secs(1), async {
        let _ = router_task.await;
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("connections still writing after {DRAIN_TIMEOUT:?}; closing them");
        connections.abort_all();
    }
    if let Some(mut task) = http_task {
        // Requests still open (a slow scraper, a stalled event stream) do not hold the
        // broker up.
        if tokio::time::timeout(Duration::from_secs(1), &mut task).await.is_err() {
            task.abort();
        }
    }
    endpoint.close(CloseCode::ShuttingDown.to_quic().into(), b"broker shutting down");
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    if registered {
        padres_transport::local::unregister(addr.port(), trusted.as_bytes());
    }
    Ok(())
}

/// Counts a connection as open while it lives.
#[derive(Debug)]
struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Says, at start, how this broker authenticates brokers and clients, and warns of what is
/// open to anyone who can reach it.
fn announce_security(config: &Config, auth: &Auth) {
    let pinned = !config.accept_brokers.is_empty();
    let peers = match (&config.federation_ca, pinned) {
        (Some(_), false) => "brokers dialling in must present a certificate from the federation CA",
        (Some(_), true) => {
            "brokers dialling in must present a certificate from the federation CA or one pinned in accept_brokers"
        }
        (None, true) => "brokers dialling in must present a certificate pinned in accept_brokers",
        (None, false) if !auth.is_open() => {
            "brokers dialling in are refused: [auth] restricts clients and no broker certificate is trusted \
             (federation_ca, accept_brokers) to tell brokers from them"
        }
        (None, false) => {
            "brokers dialling in are not verified (no federation_ca or accept_brokers): any broker that reaches \
             this port can link in"
        }
    };
    let clients = if auth.is_open() {
        "any client may connect and do anything (no [auth] configured)".to_owned()
    } else {
        format!(
            "clients: {} principals with tokens, anonymous {}, {} permits{}",
            auth.principals(),
            if auth.anonymous() { "allowed" } else { "refused" },
            auth.permits(),
            if auth.permits() == 0 { " (authenticated clients may do anything)" } else { "" }
        )
    };
    tracing::info!(%peers, %clients, "security");
    if let Some(http) =
        config.http.filter(|http| !http.ip().is_loopback() && !config.http_tls && auth.principals() > 0)
    {
        eprintln!(
            "padres-broker: WARNING: the HTTP listener on {http} is plain HTTP and clients' tokens are configured: \
             a request's Authorization header crosses the network in clear; set http_tls = true (--http-tls)"
        );
    }
    let views_open = config.http_views == crate::config::HttpViews::Open;
    if let Some(http) = config.http.filter(|http| !http.ip().is_loopback() && !auth.is_open() && views_open) {
        eprintln!(
            "padres-broker: WARNING: the HTTP listener on {http} serves /metrics and the read-only views to \
             anyone who reaches it (http_views = open); set http_views = \"auto\" or \"clients\" to require \
             what clients need"
        );
    }
    // On stderr: scripts read stdout for the listening lines alone.
    eprintln!("padres-broker {}: {peers}; {clients}", config.name);
    if config.federation_ca.is_none() && !pinned {
        eprintln!(
            "padres-broker: WARNING: {peers}; set federation_ca (padres-broker cert) or accept_brokers (their \
             cert.pem) to require certificates"
        );
    }
    if auth.is_open()
        || (auth.anonymous()
            && auth.permits() > 0
            && auth.rights_of(crate::auth::ANONYMOUS.to_owned()).is_unrestricted())
    {
        eprintln!(
            "padres-broker: WARNING: any client may connect; configure [auth] (docs/security.md) to require tokens and permissions"
        );
    }
}
