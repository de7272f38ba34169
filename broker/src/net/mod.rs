//! The I/O shell around the router: a QUIC endpoint, one task per client connection that
//! only frames and decodes, and one task that owns the [`Router`] and is fed events over a
//! bounded channel.
//!
//! Built so far: clients on one broker. Broker links (neighbours, reconnects, resync) come
//! next; the router already handles them.

pub mod cert;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{self, ErrorCode, Frame, PROTOCOL_VERSION, Role};
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
}

/// Frames waiting for one slow client before it is cut off.
const CLIENT_QUEUE: usize = 4096;

/// Runs the broker until Ctrl-C or SIGTERM. Prints `listening on quic://ADDR` once bound.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    let (cert, key) = cert::load_or_create(&config.data_dir, std::slice::from_ref(&config.name))?;
    let server_config =
        quinn::ServerConfig::with_single_cert(vec![cert], key).map_err(|e| ServeError::Tls(e.to_string()))?;
    let endpoint = quinn::Endpoint::server(server_config, config.listen)
        .map_err(|source| ServeError::Listen { addr: config.listen, source })?;
    let addr = endpoint.local_addr().map_err(|source| ServeError::Listen { addr: config.listen, source })?;
    tracing::info!(broker = %config.name, %addr, "listening");
    println!("padres-broker {} listening on quic://{addr}", config.name);
    if !config.neighbors.is_empty() {
        tracing::warn!(neighbors = ?config.neighbors, "broker links are not built yet: neighbours are not dialled");
    }

    let name = Name::new(&config.name).map_err(|e| ServeError::Tls(e.to_string()))?;
    let router = Router::with_options(name.clone(), config.router_options()).map_err(ServeError::Tls)?;
    let (events, inbox) = mpsc::channel(1024);
    let router_task = tokio::spawn(run_router(router, inbox));
    let max_frame = config.limits.max_frame_bytes;
    let mut next_client: ClientId = 0;
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                next_client += 1;
                let events = events.clone();
                let id = next_client;
                let broker = name.clone();
                tokio::spawn(async move {
                    if let Err(error) = connection(incoming, id, &broker, events, max_frame).await {
                        tracing::debug!(client = id, %error, "connection ended");
                    }
                });
            }
            () = shutdown_signal() => {
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
                    let Some(sub) = subs.into_iter().next() else { continue };
                    (client, Frame::Notification { sub, publication: (*publication).clone() })
                }
                // Broker links are not built yet; there are no neighbours to send to.
                Output::ToBroker { .. } => continue,
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
    max_frame: usize,
) -> Result<(), String> {
    let connection = incoming.await.map_err(|e| e.to_string())?;
    let (mut send, mut recv) = connection.accept_bi().await.map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(max_frame);
    match read_frame(&mut recv, &mut reader).await? {
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
