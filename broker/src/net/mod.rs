//! The I/O shell around the router: a QUIC endpoint, one task per client connection that
//! only frames and decodes, and one task that owns the [`Router`] and is fed events over a
//! bounded channel.
//!
//! Neighbour links use the same framing: the dialling broker says hello with
//! [`Role::Broker`] and its name, then both sides exchange [`Frame::Broker`] traffic. A link
//! coming up or going down is a `NeighbourUp`/`NeighbourDown` for the router, which
//! re-synchronises advertisements and subscriptions; a dialled link that drops is dialled
//! again with backoff (0.1 s doubling to 5 s).

pub mod cert;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{self, BrokerMessage, ErrorCode, Frame, PROTOCOL_VERSION, Role};
use padres_lang::{Message, Name};
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
    #[error("TLS: {0}")]
    Tls(String),
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

/// What connection tasks tell the router task.
#[derive(Debug)]
enum Event {
    Connected(ClientId, mpsc::Sender<Frame>),
    Request(ClientId, u64, Message),
    Gone(ClientId),
    /// A link to neighbour `Name` is up (the number tells links to the same peer apart).
    LinkUp(Name, u64, mpsc::Sender<Frame>),
    FromBroker(Name, BrokerMessage),
    LinkDown(Name, u64),
}

/// Frames waiting on one neighbour link before it is dropped and re-synchronised.
const LINK_QUEUE: usize = 65_536;

/// Frames waiting for one slow client before it is cut off.
const CLIENT_QUEUE: usize = 4096;

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
    let (cert, key) = cert::load_or_create(&config.data_dir, std::slice::from_ref(&config.name))?;
    let server_config =
        quinn::ServerConfig::with_single_cert(vec![cert], key).map_err(|e| ServeError::Tls(e.to_string()))?;
    let endpoint = quinn::Endpoint::server(server_config, config.listen)
        .map_err(|source| ServeError::Listen { addr: config.listen, source })?;
    let addr = endpoint.local_addr().map_err(|source| ServeError::Listen { addr: config.listen, source })?;
    tracing::info!(broker = %config.name, %addr, "listening");
    println!("padres-broker {} listening on quic://{addr}", config.name);
    if let Some(bound) = bound {
        let _ = bound.send(addr);
    }
    let mut shutdown = std::pin::pin!(shutdown);

    let invalid = |why: String| ServeError::Config(crate::config::ConfigError::Invalid(why));
    let name = Name::new(&config.name).map_err(|e| invalid(format!("name: {e}")))?;
    let router = Router::with_options(name.clone(), config.router_options()).map_err(invalid)?;
    let (events, inbox) = mpsc::channel(1024);
    let router_task = tokio::spawn(run_router(router, inbox));
    let max_frame = config.limits.max_frame_bytes;
    let mut roots = quinn::rustls::RootCertStore::empty();
    for path in &config.peer_certs {
        use quinn::rustls::pki_types::pem::PemObject;
        let cert = quinn::rustls::pki_types::CertificateDer::from_pem_file(path)
            .map_err(|e| ServeError::Tls(format!("{}: {e}", path.display())))?;
        roots.add(cert).map_err(|e| ServeError::Tls(format!("{}: {e}", path.display())))?;
    }
    let client_config = if config.neighbors.is_empty() {
        None
    } else {
        Some(
            quinn::ClientConfig::with_root_certificates(std::sync::Arc::new(roots))
                .map_err(|e| ServeError::Tls(e.to_string()))?,
        )
    };
    let link_ids = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    for uri in &config.neighbors {
        let Some(client_config) = client_config.clone() else { break };
        let neighbor = crate::config::parse_neighbor(uri)?;
        tokio::spawn(dial(
            endpoint.clone(),
            client_config,
            neighbor,
            name.clone(),
            events.clone(),
            link_ids.clone(),
            max_frame,
        ));
    }
    let mut next_client: ClientId = 0;
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                next_client += 1;
                let events = events.clone();
                let id = next_client;
                let broker = name.clone();
                let link_ids = link_ids.clone();
                tokio::spawn(async move {
                    if let Err(error) = connection(incoming, id, &broker, events, &link_ids, max_frame).await {
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
    endpoint.wait_idle().await;
    router_task.abort();
    Ok(())
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

/// The one owner of the routing state.
async fn run_router(mut router: Router, mut inbox: mpsc::Receiver<Event>) {
    let start = Instant::now();
    let mut clients: HashMap<ClientId, mpsc::Sender<Frame>> = HashMap::new();
    let mut links: HashMap<Name, (u64, mpsc::Sender<Frame>)> = HashMap::new();
    let mut out = Vec::new();
    while let Some(event) = inbox.recv().await {
        let now = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        match event {
            Event::Connected(id, tx) => {
                clients.insert(id, tx);
            }
            Event::Request(client, req, message) => {
                router.handle(now, Input::Client { client, req, message }, &mut out);
            }
            Event::Gone(id) => {
                clients.remove(&id);
                router.handle(now, Input::ClientGone(id), &mut out);
            }
            Event::LinkUp(peer, link, tx) => {
                tracing::info!(%peer, "neighbour link up");
                links.insert(peer.clone(), (link, tx));
                router.handle(now, Input::NeighbourUp(peer), &mut out);
            }
            Event::FromBroker(from, message) => {
                tracing::debug!(%from, ?message, "from neighbour");
                router.handle(now, Input::Broker { from, message }, &mut out);
            }
            Event::LinkDown(peer, link) => {
                // Only the current link's end counts: a replaced link's late news is stale.
                if links.get(&peer).is_some_and(|(current, _)| *current == link) {
                    tracing::info!(%peer, "neighbour link down");
                    links.remove(&peer);
                    router.handle(now, Input::NeighbourDown(peer), &mut out);
                }
            }
        }
        let mut slow = Vec::new();
        for output in out.drain(..) {
            let (client, frame) = match output {
                Output::Reply { client, req, result } => (
                    client,
                    match result {
                        Ok(id) => Frame::Ok { req, id },
                        Err((code, message)) => Frame::Error { req: Some(req), code, message },
                    },
                ),
                Output::Notify { client, subs, publication } => {
                    (client, Frame::Notification { subs, publication })
                }
                Output::ToBroker { to, message } => {
                    tracing::debug!(%to, ?message, "to neighbour");
                    if let Some((_, tx)) = links.get(&to) {
                        if tx.try_send(Frame::Broker(message)).is_err() {
                            // The link cannot keep up: drop it; the router re-synchronises
                            // when it is back.
                            tracing::warn!(peer = %to, "neighbour link too slow, dropping it");
                            links.remove(&to);
                        }
                    }
                    continue;
                }
            };
            if let Some(tx) = clients.get(&client) {
                if tx.try_send(frame).is_err() {
                    slow.push(client);
                }
            }
        }
        for client in slow {
            // A client that does not keep up is cut off rather than slowing everyone.
            tracing::warn!(client, "client too slow, disconnecting");
            clients.remove(&client);
            router.handle(0, Input::ClientGone(client), &mut out);
            out.clear();
        }
    }
}

/// Reads frames from `recv` until one is whole.
async fn read_frame(recv: &mut quinn::RecvStream, reader: &mut FrameReader) -> Result<Option<Frame>, String> {
    let mut buf = [0_u8; 16 * 1024];
    loop {
        match reader.next_frame() {
            Ok(Some(frame)) => return Ok(Some(frame)),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        match recv.read(&mut buf).await {
            Ok(Some(n)) => reader.push(&buf[..n]),
            Ok(None) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        }
    }
}

async fn write_frame(send: &mut quinn::SendStream, frame: &Frame, max_frame: usize) -> Result<(), String> {
    let mut bytes = Vec::new();
    wire::encode(frame, max_frame, &mut bytes).map_err(|e| e.to_string())?;
    send.write_all(&bytes).await.map_err(|e| e.to_string())
}

/// One client connection: handshake, then requests in and frames out.
async fn connection(
    incoming: quinn::Incoming,
    id: ClientId,
    broker: &Name,
    events: mpsc::Sender<Event>,
    link_ids: &std::sync::atomic::AtomicU64,
    max_frame: usize,
) -> Result<(), String> {
    let connection = incoming.await.map_err(|e| e.to_string())?;
    let (mut send, mut recv) = connection.accept_bi().await.map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(max_frame);
    match read_frame(&mut recv, &mut reader).await? {
        Some(Frame::Hello { version, role: Role::Broker, name }) if version == PROTOCOL_VERSION => {
            let welcome = Frame::Welcome { version: PROTOCOL_VERSION, broker: broker.clone() };
            write_frame(&mut send, &welcome, max_frame).await?;
            let link = link_ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return run_link(send, recv, reader, name, link, events, max_frame).await;
        }
        Some(Frame::Hello { version, role: Role::Client, .. }) if version == PROTOCOL_VERSION => {
            let welcome = Frame::Welcome { version: PROTOCOL_VERSION, broker: broker.clone() };
            write_frame(&mut send, &welcome, max_frame).await?;
        }
        Some(Frame::Hello { version, .. }) => {
            let message =
                format!("protocol version {version} is not supported; this broker speaks {PROTOCOL_VERSION}");
            let error = Frame::Error { req: None, code: ErrorCode::VersionMismatch, message };
            write_frame(&mut send, &error, max_frame).await?;
            return Ok(());
        }
        _ => return Err("no Hello".to_owned()),
    }
    let (tx, mut rx) = mpsc::channel(CLIENT_QUEUE);
    events.send(Event::Connected(id, tx)).await.map_err(|e| e.to_string())?;
    let result = loop {
        tokio::select! {
            frame = read_frame(&mut recv, &mut reader) => match frame {
                Ok(Some(Frame::Request { req, message })) => {
                    if events.send(Event::Request(id, req, message)).await.is_err() {
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
                    let error = Frame::Error { req: None, code: ErrorCode::BadRequest, message: why.clone() };
                    let _ = write_frame(&mut send, &error, max_frame).await;
                    break Err(why);
                }
            },
            frame = rx.recv() => match frame {
                Some(frame) => write_frame(&mut send, &frame, max_frame).await?,
                None => break Ok(()),
            },
        }
    };
    let _ = events.send(Event::Gone(id)).await;
    let _ = send.finish();
    result
}

/// Keeps a link to `neighbor` up: dial, say hello, serve the link, and dial again with
/// backoff when it drops.
async fn dial(
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    neighbor: crate::config::NeighborAddr,
    me: Name,
    events: mpsc::Sender<Event>,
    link_ids: std::sync::Arc<std::sync::atomic::AtomicU64>,
    max_frame: usize,
) {
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        match dial_once(&endpoint, &config, &neighbor, &me, &events, &link_ids, max_frame).await {
            Ok(()) => backoff = std::time::Duration::from_millis(100),
            Err(error) => {
                tracing::debug!(host = %neighbor.host, port = neighbor.port, %error, "neighbour unreachable");
            }
        }
        if events.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
    }
}

async fn dial_once(
    endpoint: &quinn::Endpoint,
    config: &quinn::ClientConfig,
    neighbor: &crate::config::NeighborAddr,
    me: &Name,
    events: &mpsc::Sender<Event>,
    link_ids: &std::sync::atomic::AtomicU64,
    max_frame: usize,
) -> Result<(), String> {
    let addr = tokio::net::lookup_host((neighbor.host.as_str(), neighbor.port))
        .await
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let connection = endpoint
        .connect_with(config.clone(), addr, &neighbor.host)
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
    let hello = Frame::Hello { version: PROTOCOL_VERSION, role: Role::Broker, name: me.clone() };
    write_frame(&mut send, &hello, max_frame).await?;
    let mut reader = FrameReader::new(max_frame);
    let peer = match read_frame(&mut recv, &mut reader).await? {
        Some(Frame::Welcome { broker, .. }) => broker,
        other => return Err(format!("unexpected answer to hello: {other:?}")),
    };
    let link = link_ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    run_link(send, recv, reader, peer, link, events.clone(), max_frame).await
}

/// Serves an established neighbour link until either side closes it.
async fn run_link(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    mut reader: FrameReader,
    peer: Name,
    link: u64,
    events: mpsc::Sender<Event>,
    max_frame: usize,
) -> Result<(), String> {
    let (tx, mut rx) = mpsc::channel(LINK_QUEUE);
    events.send(Event::LinkUp(peer.clone(), link, tx)).await.map_err(|e| e.to_string())?;
    let result = loop {
        tokio::select! {
            frame = read_frame(&mut recv, &mut reader) => match frame {
                Ok(Some(Frame::Broker(message))) => {
                    if events.send(Event::FromBroker(peer.clone(), message)).await.is_err() {
                        break Ok(());
                    }
                }
                Ok(Some(Frame::Bye { .. }) | None) => break Ok(()),
                Ok(Some(other)) => break Err(format!("unexpected frame on a broker link: {other:?}")),
                Err(why) => break Err(why),
            },
            frame = rx.recv() => match frame {
                Some(frame) => {
                    if let Err(why) = write_frame(&mut send, &frame, max_frame).await {
                        break Err(why);
                    }
                }
                None => break Ok(()),
            },
        }
    };
    let _ = events.send(Event::LinkDown(peer, link)).await;
    let _ = send.finish();
    result
}
