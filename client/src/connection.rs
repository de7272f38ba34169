//! The async client: one QUIC connection to a broker, requests answered by number, and a
//! stream of notifications.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use padres_lang::wire::codec::{DEFAULT_MAX_FRAME, FrameReader};
use padres_lang::wire::{self, ErrorCode, Frame, PROTOCOL_VERSION, Role};
use padres_lang::{Message, MessageId, Name, ParseError, Publication};
use quinn::rustls::pki_types::CertificateDer;
use quinn::rustls::pki_types::pem::PemObject;
use tokio::sync::{mpsc, oneshot};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The broker's certificate file could not be used.
    #[error("certificate {path}: {message}")]
    Certificate {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// Connecting failed.
    #[error("cannot connect to {addr}: {message}")]
    Connect {
        /// The broker.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
    /// The broker refused the request.
    #[error("{code:?}: {message}")]
    Refused {
        /// What kind of refusal.
        code: ErrorCode,
        /// The broker's explanation.
        message: String,
    },
    /// The message text does not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The connection is gone.
    #[error("connection closed: {0}")]
    Closed(String),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Option<MessageId>, ClientError>>>>>;

/// A connected client (see the module docs).
#[derive(Debug)]
pub struct Client {
    send: tokio::sync::Mutex<quinn::SendStream>,
    pending: Pending,
    next_req: std::sync::atomic::AtomicU64,
    notifications: mpsc::Receiver<(Vec<MessageId>, Publication)>,
    _connection: quinn::Connection,
    _endpoint: quinn::Endpoint,
}

impl Client {
    /// Connects to the broker at `addr`, trusting the certificate in `ca` (PEM) for
    /// `server_name`, and says hello as `name`.
    pub async fn connect(
        addr: SocketAddr,
        server_name: &str,
        ca: &Path,
        name: &str,
    ) -> Result<Self, ClientError> {
        let cert_error =
            |message: String| ClientError::Certificate { path: ca.display().to_string(), message };
        let cert = CertificateDer::from_pem_file(ca).map_err(|e| cert_error(e.to_string()))?;
        let mut roots = quinn::rustls::RootCertStore::empty();
        roots.add(cert).map_err(|e| cert_error(e.to_string()))?;
        let connect_error = |message: String| ClientError::Connect { addr, message };
        let config = quinn::ClientConfig::with_root_certificates(Arc::new(roots))
            .map_err(|e| connect_error(e.to_string()))?;
        let local: SocketAddr =
            if addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0_u16; 8], 0).into() };
        let mut endpoint = quinn::Endpoint::client(local).map_err(|e| connect_error(e.to_string()))?;
        endpoint.set_default_client_config(config);
        let connection = endpoint
            .connect(addr, server_name)
            .map_err(|e| connect_error(e.to_string()))?
            .await
            .map_err(|e| connect_error(e.to_string()))?;
        let (mut send, mut recv) = connection.open_bi().await.map_err(|e| connect_error(e.to_string()))?;
        let hello = Frame::Hello {
            version: PROTOCOL_VERSION,
            role: Role::Client,
            name: Name::new(name).map_err(|e| connect_error(e.to_string()))?,
        };
        write_frame(&mut send, &hello).await?;
        let mut reader = FrameReader::new(DEFAULT_MAX_FRAME);
        match read_frame(&mut recv, &mut reader).await? {
            Some(Frame::Welcome { .. }) => {}
            Some(Frame::Error { code, message, .. }) => return Err(ClientError::Refused { code, message }),
            other => return Err(connect_error(format!("unexpected answer to hello: {other:?}"))),
        }
        let pending: Pending = Arc::default();
        let (notify, notifications) = mpsc::channel(4096);
        tokio::spawn(read_loop(recv, reader, pending.clone(), notify));
        Ok(Self {
            send: tokio::sync::Mutex::new(send),
            pending,
            next_req: std::sync::atomic::AtomicU64::new(1),
            notifications,
            _connection: connection,
            _endpoint: endpoint,
        })
    }

    /// Sends `message` and waits for the broker's answer: the id it assigned (for
    /// advertisements and subscriptions), or why it refused.
    pub async fn request(&self, message: Message) -> Result<Option<MessageId>, ClientError> {
        let req = self.next_req.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().map_err(|e| ClientError::Closed(e.to_string()))?.insert(req, tx);
        {
            let mut send = self.send.lock().await;
            write_frame(&mut send, &Frame::Request { req, message }).await?;
        }
        rx.await.map_err(|_| ClientError::Closed("no answer".to_owned()))?
    }

    /// Sends a message in command form (`a …`, `s …`, `p …`, `unsub ID`, …).
    pub async fn send(&self, text: &str) -> Result<Option<MessageId>, ClientError> {
        self.request(text.parse::<Message>()?).await
    }

    /// The next publication matching this client's subscriptions, with every subscription
    /// it matched; `None` once the connection is gone.
    pub async fn next_notification(&mut self) -> Option<(Vec<MessageId>, Publication)> {
        self.notifications.recv().await
    }
}

async fn read_loop(
    mut recv: quinn::RecvStream,
    mut reader: FrameReader,
    pending: Pending,
    notify: mpsc::Sender<(Vec<MessageId>, Publication)>,
) {
    while let Ok(Some(frame)) = read_frame(&mut recv, &mut reader).await {
        let answer = |req: u64, result| {
            if let Some(tx) = pending.lock().ok().and_then(|mut p| p.remove(&req)) {
                let _ = tx.send(result);
            }
        };
        match frame {
            Frame::Ok { req, id } => answer(req, Ok(id)),
            Frame::Error { req: Some(req), code, message } => {
                answer(req, Err(ClientError::Refused { code, message }));
            }
            Frame::Notification { subs, publication } => {
                let delivered = notify.send((subs, Arc::unwrap_or_clone(publication))).await;
                if delivered.is_err() {
                    break;
                }
            }
            _ => {}
        }
    }
    // Whoever still waits learns the connection is gone.
    if let Ok(mut pending) = pending.lock() {
        for (_, tx) in pending.drain() {
            let _ = tx.send(Err(ClientError::Closed("connection lost".to_owned())));
        }
    }
}

async fn read_frame(
    recv: &mut quinn::RecvStream,
    reader: &mut FrameReader,
) -> Result<Option<Frame>, ClientError> {
    let mut buf = [0_u8; 16 * 1024];
    loop {
        if let Some(frame) = reader.next_frame().map_err(|e| ClientError::Closed(e.to_string()))? {
            return Ok(Some(frame));
        }
        match recv.read(&mut buf).await {
            Ok(Some(n)) => reader.push(&buf[..n]),
            Ok(None) => return Ok(None),
            Err(e) => return Err(ClientError::Closed(e.to_string())),
        }
    }
}

async fn write_frame(send: &mut quinn::SendStream, frame: &Frame) -> Result<(), ClientError> {
    let mut bytes = Vec::new();
    wire::encode(frame, DEFAULT_MAX_FRAME, &mut bytes).map_err(|e| ClientError::Closed(e.to_string()))?;
    send.write_all(&bytes).await.map_err(|e| ClientError::Closed(e.to_string()))
}
