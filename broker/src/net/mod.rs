//! The I/O shell around the router: a QUIC endpoint, one task per connection that only
//! frames and decodes, and one task that owns the [`Router`] and is fed events over a
//! bounded channel.
//!
//! Neighbour links use the same framing: the dialling broker says hello with
//! [`Role::Broker`] and its name, then both sides exchange [`Frame::Broker`] traffic. A link
//! coming up or going down is a `NeighbourUp`/`NeighbourDown` for the router, which
//! re-synchronises advertisements and subscriptions; a dialled link that drops is dialled
//! again with backoff (0.1 s doubling to 5 s). Two brokers that list each other would hold
//! two links; both keep the one dialled by the broker with the smaller name, and the other
//! is closed with a [`Frame::Bye`] that tells its dialler to wait before trying again.
//!
//! Trust (see [`tls`]): a neighbour is verified against `peer_certs`, the federation CA,
//! and, for a neighbour on a loopback address, the certificate its broker left in the
//! local registry ([`padres_transport::local`]). With a federation CA, links are mutual
//! TLS and a broker's hello without a certificate from the CA is refused.
//!
//! Slow clients: what waits for a client is counted in (estimated) bytes; a client whose
//! backlog passes `limits.max_queued_bytes_per_client` is disconnected with that reason,
//! so one reader that stops never holds up the router or anyone else.

pub mod cert;
mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{
    self, BrokerMessage, BrokerStats, ErrorCode, Frame, PROTOCOL_VERSION, Query, Report, Role, RouteEntry,
    RoutesReport,
};
use padres_lang::{Message, Name, Publication, Value};
use padres_transport::{read_frame, write_frame};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::router::{ClientId, Input, Output, Router};

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
    Config(#[from] crate::config::ConfigError),
    /// The socket.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What waits to be written to one client, with its estimated size in bytes.
type ClientQueue = mpsc::UnboundedSender<(Frame, usize)>;

/// A connected client as the router task sees it.
#[derive(Debug)]
struct ClientHandle {
    queue: ClientQueue,
    /// Estimated bytes queued and not yet written.
    queued: Arc<AtomicUsize>,
    connection: quinn::Connection,
}

/// One link to a neighbour, as the router task holds it.
#[derive(Debug)]
struct Link {
    /// Tells links to the same peer apart.
    id: u64,
    /// True if this broker dialled it.
    dialled: bool,
    queue: mpsc::Sender<Frame>,
    /// To close it at once when it cannot keep up.
    connection: quinn::Connection,
}

/// What a broker says when it closes a second link to a neighbour it is already linked
/// to; the dialler then waits [`DUPLICATE_REDIAL`] before trying again.
const DUPLICATE_LINK: &str = "duplicate link: the link dialled by the broker with the smaller name is kept";

/// How long a broker whose link was closed as a duplicate waits before dialling again
/// (the kept link's dialler redials at once if that link drops).
const DUPLICATE_REDIAL: Duration = Duration::from_secs(30);

/// What connection tasks tell the router task.
#[derive(Debug)]
enum Event {
    Connected(ClientId, ClientHandle),
    Request(ClientId, u64, Message),
    Query(ClientId, u64, Query),
    Gone(ClientId),
    /// A link to a neighbour is up.
    LinkUp(Name, Link),
    FromBroker(Name, BrokerMessage),
    LinkDown(Name, u64),
}

/// Frames waiting on one neighbour link before it is dropped and re-synchronised.
const LINK_QUEUE: usize = 65_536;

/// Frames queued for one peer are encoded into one write of about this many bytes.
const WRITE_BATCH: usize = 64 * 1024;

/// Events the router task handles before it hands out what they produced, so that a
/// busy connection task is woken once for many frames.
const EVENT_BATCH: usize = 256;

/// QUIC close code for a client cut off because it did not keep up.
const CLOSE_TOO_SLOW: u32 = 2;

/// The request number given to publications streamed with [`Frame::Publish`]: their
/// success is not acknowledged.
const STREAMED: u64 = 0;

/// Most rows of each table a routes report carries, whatever is asked.
const MAX_ROUTES_LISTED: u32 = 10_000;

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
    config.validate()?;
    let invalid = |why: String| ServeError::Config(crate::config::ConfigError::Invalid(why));
    let name = Name::new(&config.name).map_err(|e| invalid(format!("name: {e}")))?;
    let identity = cert::identity(&config)?;
    let fed_ca = config.federation_ca.clone().map(|ca| vec![ca]);
    let server_config = padres_transport::tls::server_config(&identity.tls, fed_ca.as_deref())?;
    let listen_error = |source| ServeError::Listen { addr: config.listen, source };
    let socket = std::net::UdpSocket::bind(config.listen).map_err(listen_error)?;
    let endpoint =
        padres_transport::tls::server_endpoint(socket, server_config, &identity.tls).map_err(listen_error)?;
    let addr = endpoint.local_addr().map_err(listen_error)?;
    let incarnation = cert::next_incarnation(&config.data_dir)?;
    let mut options = config.router_options();
    options.incarnation = incarnation;
    let router = Router::with_options(name.clone(), options);
    let registered = match padres_transport::local::register(addr.port(), identity.pem.as_bytes()) {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(%error, "cannot register the certificate for local clients");
            false
        }
    };
    tracing::info!(broker = %config.name, %addr, incarnation, "listening");
    println!("padres-broker {} listening on quic://{addr}", config.name);
    if let Some(bound) = bound {
        let _ = bound.send(addr);
    }
    let mut shutdown = std::pin::pin!(shutdown);

    let (events, inbox) = mpsc::channel(1024);
    let limits = Limits {
        max_frame: config.limits.max_frame_bytes,
        max_queued: config.limits.max_queued_bytes_per_client,
        require_broker_cert: config.federation_ca.is_some(),
    };
    let open = Arc::new(AtomicUsize::new(0));
    let router_task = tokio::spawn(run_router(router, inbox, limits, open.clone()));
    let dialer = tls::Dialer::new(&config, &identity.tls);
    if config.insecure && !config.neighbors.is_empty() {
        tracing::warn!("INSECURE: neighbours' certificates are not verified; anyone can pose as a neighbour");
        eprintln!(
            "padres-broker: WARNING: --insecure: neighbour certificates are NOT verified (development only)"
        );
    }
    let link_ids = Arc::new(AtomicU64::new(1));
    for uri in &config.neighbors {
        let neighbor = crate::config::parse_neighbor(uri)?;
        tokio::spawn(dial(
            endpoint.clone(),
            dialer.clone(),
            neighbor,
            name.clone(),
            events.clone(),
            link_ids.clone(),
            limits,
        ));
    }
    let mut next_client: ClientId = 0;
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                if open.load(Ordering::Relaxed) >= config.limits.max_connections {
                    tracing::warn!(peer = %incoming.remote_address(), "connection refused: limits.max_connections reached");
                    incoming.refuse();
                    continue;
                }
                next_client += 1;
                let guard = OpenGuard::new(open.clone());
                let events = events.clone();
                let id = next_client;
                let broker = name.clone();
                let link_ids = link_ids.clone();
                tokio::spawn(async move {
                    let _guard = guard;
                    if let Err(error) = connection(incoming, id, &broker, events, &link_ids, limits).await {
                        tracing::debug!(client = id, %error, "connection ended");
                    }
                });
            }
            () = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
        }
    }
    endpoint.close(0_u32.into(), b"broker shutting down");
    drop(events);
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    router_task.abort();
    if registered {
        padres_transport::local::unregister(addr.port(), identity.pem.as_bytes());
    }
    Ok(())
}

/// What every connection task needs to know of the configuration.
#[derive(Clone, Copy, Debug)]
struct Limits {
    max_frame: usize,
    max_queued: usize,
    require_broker_cert: bool,
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

/// A rough size of a notification on the wire, for the slow-client limit: cheap to
/// compute in the router task, within a small factor of the encoded size.
fn estimated_size(subs: usize, publication: &Publication) -> usize {
    let attrs: usize = publication
        .attrs()
        .iter()
        .map(|(name, value)| {
            name.as_str().len()
                + match value {
                    Value::Str(s) => s.len() + 2,
                    _ => 9,
                }
        })
        .sum();
    16 + 16 * subs + attrs + publication.payload().map_or(0, |p| p.len())
}

/// Counters kept by the router task for `broker stats`.
#[derive(Debug, Default)]
struct Counters {
    client_requests: u64,
    publications_in: u64,
    notifications_out: u64,
    broker_messages_in: u64,
    broker_messages_out: u64,
    slow_clients_dropped: u64,
}

/// The one owner of the routing state, and the shell's view of who is connected.
#[derive(Debug)]
struct RouterTask {
    router: Router,
    start: Instant,
    limits: Limits,
    clients: HashMap<ClientId, ClientHandle>,
    links: HashMap<Name, Link>,
    counters: Counters,
    /// Connections accepted and open (kept by the accepting loop).
    open: Arc<AtomicUsize>,
    out: Vec<Output>,
}

/// Runs the router task until every event sender is gone. Events are taken in batches
/// (as many as are waiting, up to [`EVENT_BATCH`]) and what they produced is handed out
/// after each batch.
async fn run_router(
    router: Router,
    mut inbox: mpsc::Receiver<Event>,
    limits: Limits,
    open: Arc<AtomicUsize>,
) {
    let mut task = RouterTask {
        router,
        start: Instant::now(),
        limits,
        clients: HashMap::new(),
        links: HashMap::new(),
        counters: Counters::default(),
        open,
        out: Vec::new(),
    };
    while let Some(event) = inbox.recv().await {
        let now = u64::try_from(task.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        task.handle(now, event);
        for _ in 1..EVENT_BATCH {
            match inbox.try_recv() {
                Ok(event) => task.handle(now, event),
                Err(_) => break,
            }
        }
        task.dispatch(now);
    }
}

impl RouterTask {
    fn handle(&mut self, now: u64, event: Event) {
        let router = &mut self.router;
        let out = &mut self.out;
        match event {
            Event::Connected(id, handle) => {
                self.clients.insert(id, handle);
            }
            Event::Request(client, req, message) => {
                self.counters.client_requests += 1;
                if matches!(message, Message::Publish(_)) {
                    self.counters.publications_in += 1;
                }
                router.handle(now, Input::Client { client, req, message }, out);
            }
            Event::Query(client, req, query) => {
                let report = match query {
                    Query::Stats => Report::Stats(self.stats(now)),
                    Query::Routes { limit } => Report::Routes(routes(router, limit)),
                };
                if let Some(handle) = self.clients.get(&client) {
                    let _ = handle.queue.send((Frame::Report { req, report }, 0));
                }
            }
            Event::Gone(id) => {
                self.clients.remove(&id);
                router.handle(now, Input::ClientGone(id), out);
            }
            Event::LinkUp(peer, link) => {
                // Two brokers that both list each other dial twice; both keep the link
                // dialled by the one with the smaller name and close the other.
                let kept_is_dialled_by_me = router.name() < &peer;
                if let Some(current) = self.links.get(&peer) {
                    if current.dialled == kept_is_dialled_by_me && link.dialled != kept_is_dialled_by_me {
                        tracing::debug!(%peer, "second link closed as a duplicate");
                        let _ = link.queue.try_send(Frame::Bye { reason: DUPLICATE_LINK.to_owned() });
                        return;
                    }
                }
                tracing::info!(%peer, dialled = link.dialled, "neighbour link up");
                self.links.insert(peer.clone(), link);
                router.handle(now, Input::NeighbourUp(peer), out);
            }
            Event::FromBroker(from, message) => {
                self.counters.broker_messages_in += 1;
                tracing::trace!(%from, ?message, "from neighbour");
                router.handle(now, Input::Broker { from, message }, out);
            }
            Event::LinkDown(peer, link) => {
                // Only the current link's end counts: a replaced link's late news is stale.
                if self.links.get(&peer).is_some_and(|current| current.id == link) {
                    tracing::info!(%peer, "neighbour link down");
                    self.links.remove(&peer);
                    router.handle(now, Input::NeighbourDown(peer), out);
                }
            }
        }
    }

    fn stats(&self, now: u64) -> BrokerStats {
        let (advertisements, subscriptions) = self.router.table_sizes();
        let mut neighbours: Vec<Name> = self.links.keys().cloned().collect();
        neighbours.sort();
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let counters = &self.counters;
        BrokerStats {
            broker: self.router.name().clone(),
            uptime_ms: now,
            clients: count(self.clients.len()),
            connections: count(self.open.load(Ordering::Relaxed)),
            neighbours,
            advertisements: count(advertisements),
            subscriptions: count(subscriptions),
            client_requests: counters.client_requests,
            publications_in: counters.publications_in,
            notifications_out: counters.notifications_out,
            broker_messages_in: counters.broker_messages_in,
            broker_messages_out: counters.broker_messages_out,
            slow_clients_dropped: counters.slow_clients_dropped,
        }
    }

    /// Hands every output to its client or link; cuts off clients that fell too far
    /// behind (which may produce more outputs: withdrawals for the neighbours).
    fn dispatch(&mut self, now: u64) {
        while !self.out.is_empty() {
            let mut slow = Vec::new();
            for output in std::mem::take(&mut self.out) {
                let (client, frame, size) = match output {
                    // A streamed publication is not acknowledged; a refusal still says why.
                    Output::Reply { req: STREAMED, result: Ok(_), .. } => continue,
                    Output::Reply { client, req: STREAMED, result: Err((code, message)) } => {
                        (client, Frame::Error { req: None, code, message }, 0)
                    }
                    Output::Reply { client, req, result } => (
                        client,
                        match result {
                            Ok(id) => Frame::Ok { req, id },
                            Err((code, message)) => Frame::Error { req: Some(req), code, message },
                        },
                        0,
                    ),
                    Output::Notify { client, subs, publication } => {
                        self.counters.notifications_out += 1;
                        let size = estimated_size(subs.len(), &publication);
                        (client, Frame::Notification { subs, publication }, size)
                    }
                    Output::ToBroker { to, message } => {
                        self.counters.broker_messages_out += 1;
                        tracing::trace!(%to, ?message, "to neighbour");
                        let stuck = self
                            .links
                            .get(&to)
                            .is_some_and(|link| link.queue.try_send(Frame::Broker(message)).is_err());
                        if stuck {
                            // The link cannot keep up (or is gone): close it and forget the
                            // neighbour's routes now; the two re-synchronise when it is back.
                            tracing::warn!(peer = %to, "neighbour link too slow, closing it");
                            if let Some(link) = self.links.remove(&to) {
                                link.connection.close(CLOSE_TOO_SLOW.into(), b"link too slow");
                            }
                            self.router.handle(now, Input::NeighbourDown(to), &mut self.out);
                        }
                        continue;
                    }
                };
                if let Some(handle) = self.clients.get(&client) {
                    let queued = handle.queued.fetch_add(size, Ordering::Relaxed) + size;
                    if queued > self.limits.max_queued || handle.queue.send((frame, size)).is_err() {
                        slow.push(client);
                    }
                }
            }
            for client in slow {
                // A client that does not keep up is cut off rather than slowing everyone.
                let Some(handle) = self.clients.remove(&client) else { continue };
                self.counters.slow_clients_dropped += 1;
                tracing::warn!(client, "client too slow, disconnecting");
                let reason = format!(
                    "too slow: more than {} bytes of notifications waited for this client \
                     (limits.max_queued_bytes_per_client)",
                    self.limits.max_queued
                );
                handle.connection.close(CLOSE_TOO_SLOW.into(), reason.as_bytes());
                self.router.handle(now, Input::ClientGone(client), &mut self.out);
            }
        }
    }
}

fn routes(router: &Router, limit: u32) -> RoutesReport {
    let limit = usize::try_from(limit.min(MAX_ROUTES_LISTED)).unwrap_or(usize::MAX);
    let (advertisements, subscriptions) = router.table_sizes();
    let tables = router.routes_up_to(limit);
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    RoutesReport {
        broker: router.name().clone(),
        neighbours: tables.neighbours,
        srt_total: count(advertisements),
        srt: tables
            .srt
            .into_iter()
            .map(|(id, text, from)| RouteEntry { id, text, from: from.to_string(), to: Vec::new() })
            .collect(),
        prt_total: count(subscriptions),
        prt: tables
            .prt
            .into_iter()
            .map(|(id, text, from, to)| RouteEntry { id, text, from: from.to_string(), to })
            .collect(),
    }
}

/// One incoming connection: handshake, then a client session or a neighbour link.
async fn connection(
    incoming: quinn::Incoming,
    id: ClientId,
    broker: &Name,
    events: mpsc::Sender<Event>,
    link_ids: &AtomicU64,
    limits: Limits,
) -> Result<(), String> {
    let max_frame = limits.max_frame;
    let connection = incoming.await.map_err(|e| e.to_string())?;
    let (mut send, mut recv) = connection.accept_bi().await.map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(max_frame);
    let refuse = |code, message: String| Frame::Error { req: None, code, message };
    let hello = read_frame(&mut recv, &mut reader).await;
    match hello {
        Ok(Some(Frame::Hello { version, .. })) if version != PROTOCOL_VERSION => {
            let message =
                format!("protocol version {version} is not supported; this broker speaks {PROTOCOL_VERSION}");
            let _ = write_frame(&mut send, &refuse(ErrorCode::VersionMismatch, message), max_frame).await;
            finish(send).await;
            return Ok(());
        }
        Ok(Some(Frame::Hello { role: Role::Broker, name, .. })) => {
            // With a federation CA, a broker must present the CA's certificate for the
            // name it claims (any certificate reaching here passed the CA check).
            let refusal = if !limits.require_broker_cert {
                None
            } else if !padres_transport::tls::peer_has_certificate(&connection) {
                Some("this federation requires brokers to present a certificate issued by its CA".to_owned())
            } else if !padres_transport::tls::peer_names(&connection).iter().any(|n| n == name.as_str()) {
                Some(format!("the certificate presented is not issued for broker '{name}'"))
            } else {
                None
            };
            if let Some(message) = refusal {
                tracing::warn!(peer = %name, %message, "broker refused");
                let _ = write_frame(&mut send, &refuse(ErrorCode::Forbidden, message), max_frame).await;
                finish(send).await;
                return Ok(());
            }
            let welcome = Frame::Welcome { version: PROTOCOL_VERSION, broker: broker.clone() };
            write_frame(&mut send, &welcome, max_frame).await.map_err(|e| e.to_string())?;
            let link = link_ids.fetch_add(1, Ordering::Relaxed);
            return run_link(send, recv, reader, name, (link, false, connection.clone()), events, max_frame)
                .await;
        }
        Ok(Some(Frame::Hello { role: Role::Client, .. })) => {
            let welcome = Frame::Welcome { version: PROTOCOL_VERSION, broker: broker.clone() };
            write_frame(&mut send, &welcome, max_frame).await.map_err(|e| e.to_string())?;
        }
        Ok(other) => {
            let message = format!("the first frame must be Hello, not {other:?}");
            let _ = write_frame(&mut send, &refuse(ErrorCode::BadRequest, message.clone()), max_frame).await;
            finish(send).await;
            return Err(message);
        }
        Err(why) => {
            let message = format!("invalid input: {why}");
            let _ = write_frame(&mut send, &refuse(ErrorCode::BadRequest, message.clone()), max_frame).await;
            finish(send).await;
            return Err(message);
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let handle = ClientHandle { queue: tx, queued: queued.clone(), connection: connection.clone() };
    events.send(Event::Connected(id, handle)).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let result = loop {
        tokio::select! {
            frame = read_frame(&mut recv, &mut reader) => match frame {
                Ok(Some(Frame::Request { req, message })) => {
                    if events.send(Event::Request(id, req, message)).await.is_err() {
                        break Ok(());
                    }
                }
                Ok(Some(Frame::Publish { publication })) => {
                    let message = Message::Publish(Arc::unwrap_or_clone(publication));
                    if events.send(Event::Request(id, STREAMED, message)).await.is_err() {
                        break Ok(());
                    }
                }
                Ok(Some(Frame::Query { req, query })) => {
                    if events.send(Event::Query(id, req, query)).await.is_err() {
                        break Ok(());
                    }
                }
                Ok(Some(Frame::Bye { .. }) | None) => break Ok(()),
                Ok(Some(other)) => {
                    let message = format!("unexpected frame from a client: {other:?}");
                    let error = Frame::Error { req: None, code: ErrorCode::BadRequest, message };
                    let _ = write_frame(&mut send, &error, max_frame).await;
                }
                Err(why) => {
                    // Undecodable input: say why, then close; other clients are unaffected.
                    let message = format!("invalid input, closing: {why}");
                    let error = Frame::Error { req: None, code: ErrorCode::BadRequest, message: message.clone() };
                    let _ = write_frame(&mut send, &error, max_frame).await;
                    break Err(message);
                }
            },
            frame = rx.recv() => match frame {
                Some(first) => {
                    let more = || rx.try_recv().ok();
                    let written = write_batch(&mut send, &mut out, first, more, max_frame).await;
                    queued.fetch_sub(written.as_ref().map_or(0, |size| *size), Ordering::Relaxed);
                    if let Err(why) = written {
                        break Err(why);
                    }
                }
                None => break Ok(()),
            },
        }
    };
    let _ = events.send(Event::Gone(id)).await;
    finish(send).await;
    result
}

/// Writes `first` and whatever else is already queued (`more`, up to [`WRITE_BATCH`]
/// bytes) in one write. Each frame comes with its size as counted for the slow-client
/// limit; the sum is returned.
async fn write_batch(
    send: &mut quinn::SendStream,
    out: &mut Vec<u8>,
    first: (Frame, usize),
    mut more: impl FnMut() -> Option<(Frame, usize)>,
    max_frame: usize,
) -> Result<usize, String> {
    out.clear();
    let mut size = 0;
    let mut next = Some(first);
    while let Some((frame, frame_size)) = next.take() {
        size += frame_size;
        if let Err(error) = wire::encode(&frame, max_frame, out) {
            // One frame over the limit must not cost the peer its connection: say so in
            // its place where there is someone to tell, else drop it with a warning.
            tracing::warn!(%error, "a frame could not be sent");
            let message = format!("not delivered: {error}");
            let stand_in = match frame {
                Frame::Notification { .. } => {
                    Some(Frame::Error { req: None, code: ErrorCode::LimitExceeded, message })
                }
                Frame::Report { req, .. } | Frame::Ok { req, .. } => {
                    Some(Frame::Error { req: Some(req), code: ErrorCode::LimitExceeded, message })
                }
                _ => None,
            };
            if let Some(stand_in) = stand_in {
                wire::encode(&stand_in, max_frame, out).map_err(|e| e.to_string())?;
            }
        }
        if out.len() < WRITE_BATCH {
            next = more();
        }
    }
    send.write_all(out).await.map_err(|e| e.to_string())?;
    Ok(size)
}

/// Finishes `send` and gives its last frames (an error's explanation, say) a moment to
/// reach the peer before the connection is dropped with it.
async fn finish(mut send: quinn::SendStream) {
    if send.finish().is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(1), send.stopped()).await;
    }
}

/// Keeps a link to `neighbor` up: dial, say hello, serve the link, and dial again with
/// backoff when it drops.
async fn dial(
    endpoint: quinn::Endpoint,
    dialer: tls::Dialer,
    neighbor: crate::config::NeighborAddr,
    me: Name,
    events: mpsc::Sender<Event>,
    link_ids: Arc<AtomicU64>,
    limits: Limits,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match dial_once(&endpoint, &dialer, &neighbor, &me, &events, &link_ids, limits.max_frame).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(error) if error == DUPLICATE_LINK => {
                tracing::debug!(host = %neighbor.host, port = neighbor.port, "linked already; the neighbour keeps its own link");
                tokio::time::sleep(DUPLICATE_REDIAL).await;
            }
            Err(error) => {
                tracing::debug!(host = %neighbor.host, port = neighbor.port, %error, "neighbour unreachable");
            }
        }
        if events.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn dial_once(
    endpoint: &quinn::Endpoint,
    dialer: &tls::Dialer,
    neighbor: &crate::config::NeighborAddr,
    me: &Name,
    events: &mpsc::Sender<Event>,
    link_ids: &AtomicU64,
    max_frame: usize,
) -> Result<(), String> {
    let addr = tokio::net::lookup_host((neighbor.host.as_str(), neighbor.port))
        .await
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let config = dialer.client_config(addr).map_err(|e| e.to_string())?;
    let connection = endpoint
        .connect_with(config, addr, &neighbor.host)
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
    let hello = Frame::Hello { version: PROTOCOL_VERSION, role: Role::Broker, name: me.clone() };
    write_frame(&mut send, &hello, max_frame).await.map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(max_frame);
    let peer = match read_frame(&mut recv, &mut reader).await.map_err(|e| e.to_string())? {
        Some(Frame::Welcome { broker, .. }) => {
            if dialer.checks_names()
                && !padres_transport::tls::peer_names(&connection).iter().any(|n| n == broker.as_str())
            {
                return Err(format!(
                    "the neighbour says it is '{broker}', but its certificate is not issued for that name"
                ));
            }
            broker
        }
        Some(Frame::Error { code, message, .. }) => {
            tracing::warn!(host = %neighbor.host, port = neighbor.port, ?code, %message, "neighbour refused the link");
            return Err(message);
        }
        other => return Err(format!("unexpected answer to hello: {other:?}")),
    };
    let link = link_ids.fetch_add(1, Ordering::Relaxed);
    run_link(send, recv, reader, peer, (link, true, connection.clone()), events.clone(), max_frame).await
}

/// Serves an established neighbour link until either side closes it.
async fn run_link(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    mut reader: FrameReader,
    peer: Name,
    (link, dialled, connection): (u64, bool, quinn::Connection),
    events: mpsc::Sender<Event>,
    max_frame: usize,
) -> Result<(), String> {
    let (tx, mut rx) = mpsc::channel(LINK_QUEUE);
    let up = Link { id: link, dialled, queue: tx, connection };
    events.send(Event::LinkUp(peer.clone(), up)).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    // Set when this side closes the link (a duplicate): the dialler then waits.
    let mut closing: Option<String> = None;
    let result = loop {
        tokio::select! {
            frame = read_frame(&mut recv, &mut reader) => match frame {
                Ok(Some(Frame::Broker(message))) => {
                    if events.send(Event::FromBroker(peer.clone(), message)).await.is_err() {
                        break Ok(());
                    }
                }
                Ok(Some(Frame::Bye { reason })) => break Err(reason),
                Ok(None) => break Ok(()),
                Ok(Some(other)) => break Err(format!("unexpected frame on a broker link: {other:?}")),
                Err(why) => break Err(why.to_string()),
            },
            frame = rx.recv() => match frame {
                Some(first) => {
                    if let Frame::Bye { reason } = &first {
                        closing = Some(reason.clone());
                    }
                    let more = || rx.try_recv().ok().map(|frame| (frame, 0));
                    if let Err(why) = write_batch(&mut send, &mut out, (first, 0), more, max_frame).await {
                        break Err(why);
                    }
                }
                None => break closing.take().map_or(Ok(()), Err),
            },
        }
    };
    let _ = events.send(Event::LinkDown(peer, link)).await;
    finish(send).await;
    result
}
