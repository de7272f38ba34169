//! The async client: one QUIC connection to a broker, requests answered by number, a
//! stream of notifications, and reconnection.
//!
//! [`Connect`] says where and how: the broker's address, whom to trust ([`Trust`]; with
//! none given, a broker on a loopback address is trusted through the certificate it left
//! in the local registry, see [`padres_transport::local`]), the client's name, and whether
//! to reconnect. A reconnecting client that loses its broker dials again with backoff
//! (0.1 s doubling to 5 s).
//!
//! **Sessions.** A client asks its broker for a session when it connects (`Resume` after
//! the hello). Both sides count the frames that carry something (the client's requests,
//! publications and queries; the broker's answers and notifications) and keep what they
//! sent until the other acknowledges it. A client that reconnects within the broker's
//! window (`client_sessions.window_ms`, 10 s by default) resumes its session: the broker
//! sends what the client had not received, the client sends again what the broker had not
//! passed on, and requests waiting for answers get them (if the broker is back within 10 s;
//! else they fail). Nothing is lost or doubled, and
//! subscriptions stay as they were. The client keeps at most [`MAX_KEPT_BYTES`] of
//! unacknowledged frames; past that (a broker that stopped acknowledging) it no longer
//! counts on resuming.
//!
//! **Starting over.** When the session cannot resume (the broker restarted, the window
//! passed), requests waiting for answers fail with [`ClientError::Closed`], what was sent
//! and not acknowledged may be lost ([`Client::last_error`] says so), and the client
//! re-issues its advertisements and subscriptions in the order they were first made. Ids
//! stay those of the first issue: the client maps them to the new ones, so `unsub` takes
//! the id the caller was given and notifications name it too.
//!
//! Requests and publications made while the link is down fail at once with
//! [`ClientError::Closed`].
//!
//! State: everything the client knows of its connection (the connection, requests waiting
//! for answers, what to re-issue and how ids map, the last error) lives in one `State`
//! behind one lock that is never held across an await, as quinn keeps its connection
//! state; the stream callers write to has its own async lock, and one driver task reads
//! frames, answers waiting requests, and reconnects.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use padres_lang::wire::codec::{DEFAULT_MAX_FRAME, FrameReader, MAX_FRAME_CEILING};
use padres_lang::wire::{BrokerStats, CloseCode, ErrorCode, Frame, Query, Report, Role, RoutesReport, Token};
use padres_lang::{
    Advertisement, CompositeSubscription, Message, MessageId, Name, ParseError, Publication, Subscription,
};
use padres_transport::{HandshakeError, Trust, handshake, local, read_frame, tls, write_frame};

use crate::notification::Notification;
use tokio::sync::{mpsc, oneshot};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The certificates to trust could not be used, or none is known.
    #[error("{0}")]
    Trust(String),
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
    /// The connection is gone (for a reconnecting client: for now).
    #[error("connection closed: {0}")]
    Closed(String),
    /// The broker answered something the request did not ask for.
    #[error("protocol: {0}")]
    Protocol(ProtocolError),
}

/// An answer from the broker that breaks the protocol.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// An answer of the wrong kind (a report to a request, routes to a stats query, …).
    #[error("the broker answered {asked} with {got}")]
    WrongAnswer {
        /// What was asked.
        asked: &'static str,
        /// What came back.
        got: &'static str,
    },
    /// An advertisement or subscription was accepted without an id.
    #[error("the broker assigned no id")]
    NoId,
    /// The answer to a pending request never came (the client's state was lost).
    #[error("no answer")]
    NoAnswer,
}

/// Bytes of frames a client keeps until its broker acknowledges them (see the module
/// docs).
pub const MAX_KEPT_BYTES: usize = 64 << 20;
/// Frames received between two acknowledgements to the broker, at most.
const ACK_EVERY: u64 = 256;
/// How often waiting acknowledgements go to the broker.
const ACK_AFTER: Duration = Duration::from_millis(100);
/// How long requests wait for their answers while the client is away from its broker
/// (the broker's default session window): then they fail.
const PENDING_WAIT: Duration = Duration::from_secs(10);

/// Whether a client's frame counts in its session (requests, publications, queries).
fn sent_counts(frame: &Frame) -> bool {
    matches!(frame, Frame::Request { .. } | Frame::Publish { .. } | Frame::Query { .. })
}

/// Whether a broker's frame counts in the client's session (answers and notifications).
fn received_counts(frame: &Frame) -> bool {
    matches!(
        frame,
        Frame::Ok { .. }
            | Frame::Error { .. }
            | Frame::Report { .. }
            | Frame::Notification { .. }
            | Frame::CompositeNotification { .. }
            | Frame::EndOfHistory { .. }
    )
}

/// This client's session with its broker (see the module docs).
#[derive(Debug, Default)]
struct Numbering {
    /// The session's id; 0: none (the broker keeps no client sessions).
    session: u64,
    /// Frames sent in the session.
    sent: u64,
    /// The encoded frames the broker has not acknowledged: numbers
    /// `sent - kept.len() + 1 ..= sent`.
    kept: VecDeque<Arc<Vec<u8>>>,
    kept_bytes: usize,
    /// The session cannot resume without loss: more than [`MAX_KEPT_BYTES`] waited, or
    /// re-issuing on it broke off, or the broker's count did not fit.
    unresumable: bool,
    /// The broker's frames received in the session.
    received: u64,
    /// `received` as last acknowledged to the broker.
    acked: u64,
    /// Frames the broker has said it passed on.
    passed: u64,
}

impl Numbering {
    /// Numbers a frame about to be written; true if it is kept to be sent again.
    fn keep(&mut self, bytes: &Arc<Vec<u8>>) -> bool {
        if self.session == 0 || self.unresumable {
            return false;
        }
        self.sent += 1;
        if self.kept_bytes + bytes.len() > MAX_KEPT_BYTES {
            self.unresumable = true;
            self.kept.clear();
            self.kept_bytes = 0;
            return false;
        }
        self.kept.push_back(bytes.clone());
        self.kept_bytes += bytes.len();
        true
    }

    /// The broker has passed on `received` of this session's frames.
    fn acked_by_broker(&mut self, received: u64) {
        self.passed = self.passed.max(received.min(self.sent));
        while self.sent - (self.kept.len() as u64) < received.min(self.sent) {
            if let Some(bytes) = self.kept.pop_front() {
                self.kept_bytes -= bytes.len();
            }
        }
    }

    /// Whether the session can resume.
    fn resumable(&self) -> bool {
        self.session != 0 && !self.unresumable
    }

    /// What to send again after the broker said it had passed on `received`; `None` if that
    /// is not a count this client can go on from.
    fn resend_after(&mut self, received: u64) -> Option<Vec<Arc<Vec<u8>>>> {
        let first_kept = self.sent - self.kept.len() as u64;
        if !(first_kept..=self.sent).contains(&received) {
            return None;
        }
        self.acked_by_broker(received);
        Some(self.kept.iter().cloned().collect())
    }

    /// A new session (0: none): returns how many frames sent were never acknowledged.
    fn restart(&mut self, session: u64) -> u64 {
        let lost = self.sent - self.passed;
        *self = Self { session, ..Self::default() };
        lost
    }
}

/// What a reply carries.
#[derive(Debug)]
enum Answer {
    Id(Option<MessageId>),
    Report(Box<Report>),
}

/// The broker's answer to a publication written by [`Client::publish_acked_later`].
#[derive(Debug)]
pub struct Ack(oneshot::Receiver<Result<Answer, ClientError>>);

impl Ack {
    /// Waits for the answer: `Ok` once the broker has taken the publication.
    ///
    /// # Errors
    /// Refused (with the reason), or no answer (the connection and its session were lost).
    pub async fn wait(self) -> Result<(), ClientError> {
        let answer = self.0.await.map_err(|_| ClientError::Protocol(ProtocolError::NoAnswer))?;
        answer.map(drop)
    }

    /// The answer if it has come, without waiting.
    pub fn now(&mut self) -> Option<Result<(), ClientError>> {
        match self.0.try_recv() {
            Ok(answer) => Some(answer.map(drop)),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => {
                Some(Err(ClientError::Protocol(ProtocolError::NoAnswer)))
            }
        }
    }
}

/// How to reach and trust a broker (see the module docs).
#[derive(Clone, Debug)]
pub struct Connect {
    addr: SocketAddr,
    server_name: String,
    trust: Option<Trust>,
    name: String,
    token: Option<Token>,
    identity: Option<tls::Identity>,
    reconnect: bool,
}

impl Connect {
    /// The broker at `addr`, verified as `localhost`, trusted through the local registry,
    /// as client `padres`, reconnecting.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            server_name: "localhost".to_owned(),
            trust: None,
            name: "padres".to_owned(),
            token: None,
            identity: None,
            reconnect: true,
        }
    }

    /// The broker at `uri` (`quic://HOST:PORT`, the host resolved now), verified as
    /// `HOST`, otherwise as [`Connect::new`].
    ///
    /// # Errors
    /// `uri` is not of that form, or its host does not resolve; the message says which.
    pub async fn uri(uri: &str) -> Result<Self, String> {
        const FORM: &str = "a broker must be given as quic://HOST:PORT";
        let rest = uri.strip_prefix("quic://").ok_or(FORM)?;
        let (host, _) = rest.rsplit_once(':').ok_or(FORM)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addr: SocketAddr = tokio::net::lookup_host(rest)
            .await
            .map_err(|e| format!("cannot resolve {rest}: {e}"))?
            .next()
            .ok_or_else(|| format!("no address for {rest}"))?;
        Ok(Self::new(addr).server_name(host))
    }

    /// The name the broker's certificate must carry (the host name dialled).
    pub fn server_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.server_name);
        self
    }

    /// Whom to trust: certificate files, or nobody's certificate (development only).
    pub fn trust(mut self, trust: Trust) -> Self {
        self.trust = Some(trust);
        self
    }

    /// This client's name, as the broker logs it.
    pub fn name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }

    /// The token proving this client is the principal its name says (`auth.tokens` at the
    /// broker); without one the client is anonymous, which a broker may refuse.
    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(Token(token.to_owned()));
        self
    }

    /// A client certificate (and its key) issued by the federation's CA for this client's
    /// principal (`padres-broker cert issue --client`): the broker takes the principal from
    /// it, with no token.
    ///
    /// # Errors
    /// A file cannot be read or holds no certificate or key.
    pub fn certificate(mut self, cert: &Path, key: &Path) -> Result<Self, ClientError> {
        let identity =
            tls::Identity::from_pem_files(cert, key).map_err(|e| ClientError::Trust(e.to_string()))?;
        self.identity = Some(identity);
        Ok(self)
    }

    /// Whether to reconnect and re-issue after losing the broker (on by default).
    pub fn reconnect(mut self, on: bool) -> Self {
        self.reconnect = on;
        self
    }

    /// The trust in force: the one given, or the local registry's certificate for a
    /// loopback broker.
    fn resolved_trust(&self) -> Result<Trust, ClientError> {
        if let Some(trust) = &self.trust {
            return Ok(trust.clone());
        }
        if self.addr.ip().is_loopback() {
            if let Some(path) = local::lookup(self.addr.port()) {
                return Ok(Trust::Certificates(vec![path]));
            }
            let looked = local::certificate_path(self.addr.port())
                .map_or_else(|| "the local registry".to_owned(), |p| p.display().to_string());
            return Err(ClientError::Trust(format!(
                "no certificate to trust for {}: no broker registered one at {looked}; give --ca FILE (the broker's \
                 cert.pem or the federation CA)",
                self.addr
            )));
        }
        Err(ClientError::Trust(format!(
            "no certificate to trust for {}: give --ca FILE (the broker's cert.pem or the federation CA)",
            self.addr
        )))
    }

    /// Connects and says hello. A token is never sent to a broker whose certificate is not
    /// verified ([`Trust::Insecure`]): whoever answered could keep it.
    pub async fn connect(self) -> Result<Client, ClientError> {
        if self.token.is_some() && matches!(self.trust, Some(Trust::Insecure)) {
            return Err(ClientError::Trust(
                "a token is not sent to a broker whose certificate is not verified (insecure trust): \
                 give the broker's certificate or the federation CA"
                    .to_owned(),
            ));
        }
        let config = tls::client_config(&self.resolved_trust()?, self.identity.as_ref())
            .map_err(|e| ClientError::Trust(e.to_string()))?;
        let local: SocketAddr =
            if self.addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0_u16; 8], 0).into() };
        let mut endpoint = quinn::Endpoint::client(local)
            .map_err(|e| ClientError::Connect { addr: self.addr, message: e.to_string() })?;
        endpoint.set_default_client_config(config);
        let mut link = establish(&endpoint, &self).await?;
        // A client that will not reconnect has no use for a session.
        let session = if self.reconnect { resume(&mut link, 0, 0).await?.0 } else { 0 };
        let state = State {
            connection: Some(link.connection),
            broker: link.broker,
            pending: HashMap::new(),
            issued: Issued::default(),
            next_req: 1,
            closed: false,
            last_error: None,
            numbering: Numbering { session, ..Numbering::default() },
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            send: tokio::sync::Mutex::new(Some(link.send)),
            dropped: tokio::sync::Notify::new(),
            acking: std::sync::atomic::AtomicBool::new(false),
        });
        let (notify, notifications) = mpsc::channel(4096);
        tokio::spawn(drive(shared.clone(), endpoint, self, link.recv, link.reader, notify));
        Ok(Client { shared, notifications })
    }
}

/// One established connection.
struct Link {
    connection: quinn::Connection,
    /// The broker's name, from its welcome.
    broker: Name,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    reader: FrameReader,
}

async fn establish(endpoint: &quinn::Endpoint, to: &Connect) -> Result<Link, ClientError> {
    let connect_error = |message: String| ClientError::Connect { addr: to.addr, message };
    let connection = endpoint
        .connect(to.addr, &to.server_name)
        .map_err(|e| connect_error(e.to_string()))?
        .await
        .map_err(|e| connect_error(e.to_string()))?;
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| connect_error(e.to_string()))?;
    let name = Name::new(&to.name).map_err(|e| connect_error(format!("client name: {e}")))?;
    // The broker is authenticated and may be configured for frames larger than the
    // default; read up to the ceiling any broker may use.
    let mut reader = FrameReader::new(MAX_FRAME_CEILING);
    let hello = handshake::Hello { role: Role::Client, name, token: to.token.clone() };
    match handshake::hello(&mut send, &mut recv, &mut reader, hello, DEFAULT_MAX_FRAME).await {
        Ok(broker) => Ok(Link { connection, broker, send, recv, reader }),
        Err(HandshakeError::Refused { code, message }) => Err(ClientError::Refused { code, message }),
        Err(other) => Err(connect_error(other.to_string())),
    }
}

/// Asks the broker for `session` (0: a new one), having received `received` of its frames
/// in it; returns its answer: the session, how many of this client's frames it passed on,
/// and whether the session is new.
async fn resume(link: &mut Link, session: u64, received: u64) -> Result<(u64, u64, bool), ClientError> {
    let failed = |message: String| ClientError::Closed(format!("resuming the session: {message}"));
    let ask = Frame::Resume { session, received, fresh: session == 0 };
    write_frame(&mut link.send, &ask, DEFAULT_MAX_FRAME).await.map_err(|e| failed(e.to_string()))?;
    match read_frame(&mut link.recv, &mut link.reader).await.map_err(|e| failed(e.to_string()))? {
        Some(Frame::Resume { session, received, fresh }) => Ok((session, received, fresh)),
        Some(Frame::Error { code, message, .. }) => Err(ClientError::Refused { code, message }),
        Some(other) => Err(ClientError::Protocol(ProtocolError::WrongAnswer {
            asked: "a session",
            got: frame_kind(&other),
        })),
        None => Err(failed("the broker closed the connection".to_owned())),
    }
}

/// A frame's kind, for messages.
fn frame_kind(frame: &Frame) -> &'static str {
    match frame {
        Frame::Ok { .. } => "ok",
        Frame::Error { .. } => "an error",
        Frame::Report { .. } => "a report",
        Frame::Notification { .. } | Frame::CompositeNotification { .. } | Frame::EndOfHistory { .. } => {
            "a notification"
        }
        _ => "another frame",
    }
}

/// What to remember once the broker accepts a request, so that a reconnect re-issues
/// exactly what is in force. Applied by the task that reads the answer, so a caller that
/// stops waiting (a timeout) cannot leave it undone.
#[derive(Debug)]
enum Remember {
    /// Nothing.
    Nothing,
    /// An advertisement or subscription now in force, under the id the answer carries.
    Issued(Message),
    /// The advertisement or subscription first issued under this id is withdrawn.
    Withdrawn(MessageId),
}

/// A request waiting for its answer, and what to remember when it comes.
type Pending = HashMap<u64, (oneshot::Sender<Result<Answer, ClientError>>, Remember)>;

/// What this client issued, to re-issue after a reconnect, and how ids map.
#[derive(Debug, Default)]
struct Issued {
    /// Advertisements and subscriptions in force, by first id, in issue order.
    live: Vec<(MessageId, Message)>,
    /// First id to the id of the current connection (only where they differ).
    current: HashMap<MessageId, MessageId>,
    /// The reverse.
    first: HashMap<MessageId, MessageId>,
}

impl Issued {
    fn to_current(&self, id: MessageId) -> MessageId {
        self.current.get(&id).cloned().unwrap_or(id)
    }

    fn to_first(&self, id: MessageId) -> MessageId {
        self.first.get(&id).cloned().unwrap_or(id)
    }

    fn forget(&mut self, first: &MessageId) {
        self.live.retain(|(id, _)| id != first);
        if let Some(current) = self.current.remove(first) {
            self.first.remove(&current);
        }
    }

    fn remap(&mut self, first: &MessageId, now: MessageId) {
        if let Some(old) = self.current.remove(first) {
            self.first.remove(&old);
        }
        if &now != first {
            self.first.insert(now.clone(), first.clone());
            self.current.insert(first.clone(), now);
        }
    }
}

/// What a client shares between its handle and its driver task.
#[derive(Debug)]
struct Shared {
    /// Everything the client knows of its connection, changed under this one lock, which
    /// is never held across an await.
    state: Mutex<State>,
    /// The current connection's stream, written by callers (a write awaits flow control,
    /// so it has its own async lock); `None` while reconnecting.
    send: tokio::sync::Mutex<Option<quinn::SendStream>>,
    /// Woken when the client is dropped.
    dropped: tokio::sync::Notify,
    /// An acknowledgement is being written (by a task of its own: the task that reads
    /// must never wait on the write side).
    acking: std::sync::atomic::AtomicBool,
}

/// The client's connection state.
#[derive(Debug)]
struct State {
    /// The current connection; `None` while reconnecting.
    connection: Option<quinn::Connection>,
    /// The name of the broker it is (or was last) connected to.
    broker: Name,
    pending: Pending,
    issued: Issued,
    next_req: u64,
    /// The client was dropped.
    closed: bool,
    /// The last connection-level error the broker sent or the connection ended with.
    last_error: Option<String>,
    /// The session: what was sent and received in it.
    numbering: Numbering,
}

impl Shared {
    /// Runs `f` on the state. A poisoned lock (a panic elsewhere while it was held) still
    /// yields the state: every change under it is a single assignment or insertion.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state)
    }

    fn fail_pending(&self, why: &str) {
        let pending = self.with(|s| std::mem::take(&mut s.pending));
        for (_, (tx, _)) in pending {
            let _ = tx.send(Err(ClientError::Closed(why.to_owned())));
        }
    }

    fn set_last_error(&self, why: String) {
        self.with(|s| s.last_error = Some(why));
    }

    fn is_closed(&self) -> bool {
        self.with(|s| s.closed)
    }
}

/// The notifications of a [`Client`], read apart from it.
#[derive(Debug)]
pub struct Notifications(mpsc::Receiver<Notification>);

impl Notifications {
    /// The next notification; `None` once the client is gone for good.
    pub async fn next(&mut self) -> Option<Notification> {
        self.0.recv().await
    }
}

/// A connected client (see the module docs).
#[derive(Debug)]
pub struct Client {
    shared: Arc<Shared>,
    notifications: mpsc::Receiver<Notification>,
}

impl Drop for Client {
    fn drop(&mut self) {
        let connection = self.shared.with(|s| {
            s.closed = true;
            s.connection.take()
        });
        self.shared.dropped.notify_one();
        if let Some(connection) = connection {
            connection.close(CloseCode::Done.to_quic().into(), b"client closed");
        }
    }
}

impl Client {
    /// Connects to the broker at `addr`, trusting the certificate in `ca` (PEM) for
    /// `server_name`, and says hello as `name`; reconnects when the broker goes away.
    pub async fn connect(
        addr: SocketAddr,
        server_name: &str,
        ca: &Path,
        name: &str,
    ) -> Result<Self, ClientError> {
        Connect::new(addr)
            .server_name(server_name)
            .trust(Trust::Certificates(vec![PathBuf::from(ca)]))
            .name(name)
            .connect()
            .await
    }

    async fn call(
        &self,
        frame: impl FnOnce(u64) -> Frame,
        remember: Remember,
    ) -> Result<Answer, ClientError> {
        let rx = self.start_call(frame, remember).await?;
        rx.await.map_err(|_| ClientError::Protocol(ProtocolError::NoAnswer))?
    }

    /// Writes a request; the receiver gets its answer.
    async fn start_call(
        &self,
        frame: impl FnOnce(u64) -> Frame,
        remember: Remember,
    ) -> Result<oneshot::Receiver<Result<Answer, ClientError>>, ClientError> {
        let (tx, rx) = oneshot::channel();
        let req = self.shared.with(|s| {
            let req = s.next_req;
            s.next_req += 1;
            s.pending.insert(req, (tx, remember));
            req
        });
        let written = self.write(&frame(req)).await;
        if let Err(why) = written {
            self.shared.with(|s| s.pending.remove(&req));
            return Err(why);
        }
        Ok(rx)
    }

    /// Writes one frame on the current connection, numbered and kept in the session if it
    /// counts there. A write abandoned half way (its caller timed out) resets the stream
    /// rather than leave half a frame on it; the client then reconnects. A frame kept in
    /// the session whose write failed is sent again when the session resumes: that is a
    /// success here.
    async fn write(&self, frame: &Frame) -> Result<(), ClientError> {
        let mut bytes = Vec::new();
        padres_lang::wire::encode(frame, DEFAULT_MAX_FRAME, &mut bytes)
            .map_err(|e| ClientError::Closed(e.to_string()))?;
        let bytes = Arc::new(bytes);
        let mut send = self.shared.send.lock().await;
        let Some(stream) = send.as_mut() else {
            return Err(ClientError::Closed("not connected (reconnecting)".to_owned()));
        };
        // Numbered under the stream's lock: in the order written.
        let kept = sent_counts(frame) && self.shared.with(|s| s.numbering.keep(&bytes));
        let mut guard = WholeWrite { stream, done: false };
        let written = guard.stream.write_all(&bytes).await;
        guard.done = true;
        match written {
            Ok(()) => Ok(()),
            Err(_) if kept => Ok(()),
            Err(e) => Err(ClientError::Closed(e.to_string())),
        }
    }

    /// Closes the client once the broker has taken everything sent before: a round trip
    /// (the broker handles a client's frames in order, so its answer comes after every
    /// publication sent before it), then a normal close, which ends the session at once.
    /// Dropping a client instead closes at once and discards what was not yet sent.
    pub async fn close(self) -> Result<(), ClientError> {
        self.stats().await.map(drop)
    }

    /// Closes the connection at once, as a network fault would, for fault-injection
    /// harnesses and tests: the broker keeps this client's session for its window, and a
    /// reconnecting client dials again and resumes it (nothing lost, nothing doubled).
    pub fn drop_connection(&self) {
        if let Some(connection) = self.shared.with(|s| s.connection.clone()) {
            connection.close(CloseCode::Fault.to_quic().into(), b"fault injected by the client");
        }
    }

    /// This client's session with its broker (0: none), and how many frames it has sent
    /// and received in it.
    pub fn session(&self) -> (u64, u64, u64) {
        self.shared.with(|s| (s.numbering.session, s.numbering.sent, s.numbering.received))
    }

    /// Sends `message` and waits for the broker's answer: the id it assigned (for
    /// advertisements and subscriptions), or why it refused.
    pub async fn request(&self, message: Message) -> Result<Option<MessageId>, ClientError> {
        // Withdrawals name the id the caller was given; the broker knows the current one.
        let (sent, remember) = self.shared.with(|s| {
            let issued = &s.issued;
            match message {
                Message::Unsubscribe(id) => {
                    (Message::Unsubscribe(issued.to_current(id.clone())), Remember::Withdrawn(id))
                }
                Message::Unadvertise(id) => {
                    (Message::Unadvertise(issued.to_current(id.clone())), Remember::Withdrawn(id))
                }
                m @ (Message::Advertise(_) | Message::Subscribe(_) | Message::CompositeSubscribe(_)) => {
                    let kept = Remember::Issued(m.clone());
                    (m, kept)
                }
                other => (other, Remember::Nothing),
            }
        });
        match self.call(|req| Frame::Request { req, message: sent }, remember).await? {
            Answer::Id(id) => Ok(id),
            Answer::Report(_) => {
                Err(ClientError::Protocol(ProtocolError::WrongAnswer { asked: "a request", got: "a report" }))
            }
        }
    }

    /// Advertises what this client will publish; returns the advertisement's id.
    pub async fn advertise(&self, adv: Advertisement) -> Result<MessageId, ClientError> {
        self.request(Message::Advertise(adv)).await.and_then(expect_id)
    }

    /// Subscribes; matching publications then arrive through
    /// [`Client::next_notification`], naming the returned id.
    pub async fn subscribe(&self, sub: Subscription) -> Result<MessageId, ClientError> {
        self.request(Message::Subscribe(sub)).await.and_then(expect_id)
    }

    /// Subscribes to a pattern of publications (AND, OR, sequence, repetition).
    pub async fn composite_subscribe(&self, cs: CompositeSubscription) -> Result<MessageId, ClientError> {
        self.request(Message::CompositeSubscribe(cs)).await.and_then(expect_id)
    }

    /// Withdraws a subscription or composite subscription.
    pub async fn unsubscribe(&self, id: MessageId) -> Result<(), ClientError> {
        self.request(Message::Unsubscribe(id)).await.map(drop)
    }

    /// Withdraws an advertisement.
    pub async fn unadvertise(&self, id: MessageId) -> Result<(), ClientError> {
        self.request(Message::Unadvertise(id)).await.map(drop)
    }

    /// Publishes and waits for the broker to accept it (or say why not).
    pub async fn publish_acked(&self, publication: Publication) -> Result<(), ClientError> {
        self.request(Message::Publish(publication)).await.map(drop)
    }

    /// Publishes and returns once the publication is written: the [`Ack`] then gives the
    /// broker's answer, as [`Client::publish_acked`] does. Publications written this way
    /// reach the broker in the order of the calls, so a publisher can have many waiting
    /// for their answers at once (pipelined) and still know which were taken.
    ///
    /// # Errors
    /// The publication could not be written (not connected).
    pub async fn publish_acked_later(&self, publication: Publication) -> Result<Ack, ClientError> {
        let frame = |req| Frame::Request { req, message: Message::Publish(publication) };
        self.start_call(frame, Remember::Nothing).await.map(Ack)
    }

    /// Publishes without waiting for the broker: returns once the publication is on its
    /// way. A refusal (no advertisement, say) comes back later as [`Client::last_error`].
    /// For publishers that stream; [`Client::request`] waits for each answer.
    pub async fn publish(&self, publication: Publication) -> Result<(), ClientError> {
        self.write(&Frame::Publish { publication: Arc::new(publication) }).await
    }

    /// Sends a message in command form (`a …`, `s …`, `p …`, `unsub ID`, …).
    pub async fn send(&self, text: &str) -> Result<Option<MessageId>, ClientError> {
        self.request(crate::check::issuing_parser().message(text)?).await
    }

    async fn query(&self, query: Query) -> Result<Report, ClientError> {
        match self.call(|req| Frame::Query { req, query }, Remember::Nothing).await? {
            Answer::Report(report) => Ok(*report),
            Answer::Id(_) => {
                Err(ClientError::Protocol(ProtocolError::WrongAnswer { asked: "a query", got: "an id" }))
            }
        }
    }

    /// The broker's counters.
    pub async fn stats(&self) -> Result<BrokerStats, ClientError> {
        match self.query(Query::Stats).await? {
            Report::Stats(stats) => Ok(*stats),
            other => Err(wrong_report("stats", &other)),
        }
    }

    /// The broker's routing tables, at most `limit` rows of each.
    pub async fn routes(&self, limit: u32) -> Result<RoutesReport, ClientError> {
        self.routes_page(limit, 0, "").await
    }

    /// One page of the broker's routing tables: of each table's rows (sorted by id) those
    /// whose id, text, origin or destinations contain `filter` (ASCII case ignored; every
    /// row if it is empty), from the `offset`-th, at most `limit`.
    pub async fn routes_page(
        &self,
        limit: u32,
        offset: u32,
        filter: &str,
    ) -> Result<RoutesReport, ClientError> {
        match self.query(Query::Routes { limit, offset, filter: filter.to_owned() }).await? {
            Report::Routes(routes) => Ok(routes),
            other => Err(wrong_report("routes", &other)),
        }
    }

    /// Makes the broker close its link to neighbour `peer` at once, as a network fault
    /// would, and keep it down for `down_ms` milliseconds; true if a link was up. For fault
    /// injection (`scripts/chaos-chain --cut`): the two brokers' link session carries on
    /// when the link returns within its window.
    pub async fn drop_link(&self, peer: &Name, down_ms: u32) -> Result<bool, ClientError> {
        match self.query(Query::DropLink { peer: peer.clone(), down_ms }).await? {
            Report::LinkDropped(found) => Ok(found),
            other => Err(wrong_report("drop-link", &other)),
        }
    }

    /// The next notification: a publication matching this client's subscriptions (with
    /// every subscription it matched) or a composite subscription's match; `None` once the
    /// connection is gone for good (or the notifications were taken with
    /// [`Client::take_notifications`]).
    ///
    /// Answers and notifications arrive on one stream, in order: while 4,096 notifications
    /// wait unread, answers wait behind them. A program that awaits requests while busy
    /// subscriptions deliver should read notifications in another task
    /// ([`Client::take_notifications`]).
    pub async fn next_notification(&mut self) -> Option<Notification> {
        self.notifications.recv().await
    }

    /// Moves the notification stream out, to be read by another task while this client
    /// (shared, e.g. in an `Arc`) makes requests.
    pub fn take_notifications(&mut self) -> Notifications {
        let (_, closed) = mpsc::channel(1);
        Notifications(std::mem::replace(&mut self.notifications, closed))
    }

    /// The name of the broker the client is connected to (or was last, while it
    /// reconnects), as the broker said in its welcome.
    pub fn broker_name(&self) -> Name {
        self.shared.with(|s| s.broker.clone())
    }

    /// The last connection-level error: what the broker said before closing (a slow
    /// client's cut-off, say), or why the connection ended.
    pub fn last_error(&self) -> Option<String> {
        self.shared.with(|s| s.last_error.clone())
    }
}

/// Resets the stream if dropped before the write it guards completed.
struct WholeWrite<'a> {
    stream: &'a mut quinn::SendStream,
    done: bool,
}

impl Drop for WholeWrite<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.stream.reset(0_u32.into());
        }
    }
}

fn expect_id(id: Option<MessageId>) -> Result<MessageId, ClientError> {
    id.ok_or(ClientError::Protocol(ProtocolError::NoId))
}

/// Reads frames until the connection ends; then, if asked, reconnects and resumes the
/// session (or re-issues, if it cannot resume).
async fn drive(
    shared: Arc<Shared>,
    endpoint: quinn::Endpoint,
    to: Connect,
    mut recv: quinn::RecvStream,
    mut reader: FrameReader,
    notify: mpsc::Sender<Notification>,
) {
    let mut ack_timer = tokio::time::interval(ACK_AFTER);
    ack_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        loop {
            let frame = tokio::select! {
                frame = read_frame(&mut recv, &mut reader) => frame,
                _ = ack_timer.tick() => {
                    spawn_ack(&shared, 1);
                    continue;
                }
                // The client was dropped (a publisher may never receive anything to notice).
                () = shared.dropped.notified() => return,
            };
            match frame {
                Ok(Some(frame)) => {
                    dispatch(&shared, frame, &notify).await;
                }
                Ok(None) => break,
                Err(e) => {
                    shared.set_last_error(e.to_string());
                    break;
                }
            }
        }
        *shared.send.lock().await = None;
        // Requests waiting for answers get them after a resumed session; otherwise never.
        let mut failed = false;
        if !to.reconnect || shared.is_closed() || !shared.with(|s| s.numbering.resumable()) {
            shared.fail_pending("connection lost");
            failed = true;
        }
        if !to.reconnect || shared.is_closed() {
            return;
        }
        let lost_at = std::time::Instant::now();
        let mut backoff = Duration::from_millis(100);
        let (link, again) = loop {
            tokio::time::sleep(backoff).await;
            if !failed && lost_at.elapsed() >= PENDING_WAIT {
                shared.fail_pending("connection lost, and the broker did not come back in time");
                failed = true;
            }
            if shared.is_closed() {
                return;
            }
            match establish(&endpoint, &to).await {
                Ok(mut link) => match carry_on(&shared, &mut link, &notify).await {
                    Ok(again) => break (link, again),
                    Err(why) => shared.set_last_error(why),
                },
                Err(e) => shared.set_last_error(e.to_string()),
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        };
        // Dropped while reconnecting: Drop found no connection to close, so close this one.
        let closed = shared.with(|s| {
            s.connection = Some(link.connection.clone());
            s.broker = link.broker.clone();
            s.closed
        });
        if closed {
            link.connection.close(CloseCode::Done.to_quic().into(), b"client closed");
            return;
        }
        if again.is_empty() {
            *shared.send.lock().await = Some(link.send);
        } else {
            // What the broker had not passed on goes first, from a task of its own while
            // this one reads: the broker may be sending at the same time what this client
            // missed, and neither side must wait for the other to read. Callers meanwhile
            // find no stream, as while reconnecting.
            let (shared, connection, mut send) = (shared.clone(), link.connection.clone(), link.send);
            tokio::spawn(async move {
                for bytes in again {
                    if send.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                let mut stream = shared.send.lock().await;
                let current = shared.with(|s| s.connection.as_ref().map(quinn::Connection::stable_id));
                if current == Some(connection.stable_id()) {
                    *stream = Some(send);
                }
            });
        }
        recv = link.recv;
        reader = link.reader;
    }
}

/// On a new connection: resumes the session, returning what to send again (what the broker
/// had not passed on); or, if the broker starts a new one, fails the requests still waiting
/// and re-issues.
async fn carry_on(
    shared: &Shared,
    link: &mut Link,
    notify: &mpsc::Sender<Notification>,
) -> Result<Vec<Arc<Vec<u8>>>, String> {
    let (asked, received) = shared.with(|s| {
        let n = &s.numbering;
        (if n.resumable() { n.session } else { 0 }, n.received)
    });
    let (session, passed, fresh) = resume(link, asked, received).await.map_err(|e| e.to_string())?;
    if !fresh && asked != 0 && session == asked {
        let Some(again) = shared.with(|s| s.numbering.resend_after(passed)) else {
            // Not a count this client can go on from: start over on the next connection.
            shared.with(|s| s.numbering.unresumable = true);
            return Err(format!(
                "the broker's count of this client's frames ({passed}) does not fit; starting over"
            ));
        };
        shared.with(|s| s.numbering.acked = s.numbering.received);
        return Ok(again);
    }
    shared.fail_pending("connection lost (the broker started a new session)");
    let lost = shared.with(|s| s.numbering.restart(session));
    if lost > 0 {
        shared.set_last_error(format!(
            "{lost} requests or publications sent before the connection was lost may not have reached the broker \
             (it started a new session)"
        ));
    }
    // Broken off half way, this session is not one to resume: the next connection starts
    // over and re-issues everything.
    reissue(shared, link, notify).await.inspect_err(|_| shared.with(|s| s.numbering.unresumable = true))?;
    Ok(Vec::new())
}

/// Sends the broker an acknowledgement of what was received, if at least `due` frames
/// wait for one, from a task of its own (after whoever is writing): the task that reads
/// must never wait on the write side, or a client that writes while the broker writes to
/// it could stop both. One at a time.
fn spawn_ack(shared: &Arc<Shared>, due: u64) {
    let Some(received) = shared.with(|s| {
        let n = &s.numbering;
        (n.session != 0 && n.received.saturating_sub(n.acked) >= due).then_some(n.received)
    }) else {
        return;
    };
    if shared.acking.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        send_ack(&shared, received).await;
        shared.acking.store(false, std::sync::atomic::Ordering::Release);
    });
}

/// Writes an acknowledgement of `received` frames on the current stream, if there is one.
async fn send_ack(shared: &Shared, received: u64) {
    let mut send = shared.send.lock().await;
    let Some(stream) = send.as_mut() else { return };
    let mut bytes = Vec::new();
    if padres_lang::wire::encode(&Frame::Ack { received }, DEFAULT_MAX_FRAME, &mut bytes).is_err() {
        return;
    }
    let mut guard = WholeWrite { stream, done: false };
    let written = guard.stream.write_all(&bytes).await;
    guard.done = true;
    if written.is_ok() {
        shared.with(|s| s.numbering.acked = s.numbering.acked.max(received));
    }
}

/// Counts a frame received in the session, and takes an acknowledgement of the client's.
fn count_received(shared: &Shared, frame: &Frame) {
    if received_counts(frame) {
        shared.with(|s| s.numbering.received += 1);
    } else if let Frame::Ack { received } = frame {
        shared.with(|s| s.numbering.acked_by_broker(*received));
    }
}

/// Handles one frame from the broker.
async fn dispatch(shared: &Arc<Shared>, frame: Frame, notify: &mpsc::Sender<Notification>) {
    count_received(shared, &frame);
    spawn_ack(shared, ACK_EVERY);
    let answer = |req: u64, result: Result<Answer, ClientError>| {
        let tx = shared.with(|s| {
            let (tx, remember) = s.pending.remove(&req)?;
            if let Ok(Answer::Id(id)) = &result {
                match (remember, id) {
                    (Remember::Issued(message), Some(id)) => s.issued.live.push((id.clone(), message)),
                    (Remember::Withdrawn(first), _) => s.issued.forget(&first),
                    _ => {}
                }
            }
            Some(tx)
        });
        if let Some(tx) = tx {
            let _ = tx.send(result);
        }
    };
    match frame {
        Frame::Ok { req, id } => answer(req, Ok(Answer::Id(id))),
        Frame::Report { req, report } => answer(req, Ok(Answer::Report(Box::new(report)))),
        Frame::Error { req: Some(req), code, message } => {
            answer(req, Err(ClientError::Refused { code, message }));
        }
        Frame::Error { req: None, code, message } => shared.set_last_error(format!("{code:?}: {message}")),
        Frame::Notification { .. } | Frame::CompositeNotification { .. } | Frame::EndOfHistory { .. } => {
            // Nobody reading notifications any more (they were taken and dropped) is no
            // reason to stop serving requests.
            if let Some(notification) = notification(shared, frame) {
                let _ = notify.send(notification).await;
            }
        }
        _ => {}
    }
}

/// The notification a frame carries, its ids as the caller first got them.
fn notification(shared: &Shared, frame: Frame) -> Option<Notification> {
    match frame {
        Frame::Notification { subs, publication } => Some(Notification::Publication {
            subs: first_ids(shared, subs),
            publication: Arc::unwrap_or_clone(publication),
        }),
        Frame::CompositeNotification { sub, pubs } => Some(Notification::Composite {
            sub: first_ids(shared, vec![sub]).pop()?,
            pubs: pubs.into_iter().map(|(leaf, p)| (leaf, Arc::unwrap_or_clone(p))).collect(),
        }),
        Frame::EndOfHistory { sub, count, missing, truncated } => Some(Notification::EndOfHistory {
            sub: first_ids(shared, vec![sub]).pop()?,
            count,
            missing,
            truncated,
        }),
        _ => None,
    }
}

/// The ids a notification names, as the caller first got them.
fn first_ids(shared: &Shared, subs: Vec<MessageId>) -> Vec<MessageId> {
    shared.with(|s| {
        // Nothing was re-issued (the usual case): the ids are the first ones.
        if s.issued.first.is_empty() {
            subs
        } else {
            subs.into_iter().map(|id| s.issued.to_first(id)).collect()
        }
    })
}

/// Re-issues every advertisement and subscription in force on a new connection, in the
/// order first made, and records their new ids.
///
/// A broker may notify a subscription before it replies to it (the reply waits for the
/// subscription to settle among its neighbours; a local publication matches at once), and
/// such a notification names the new id, which is known only from the reply: what arrives
/// before a request's reply is held until it, then handed on under the first ids.
async fn reissue(
    shared: &Shared,
    link: &mut Link,
    notify: &mpsc::Sender<Notification>,
) -> Result<(), String> {
    let live = shared.with(|s| s.issued.live.clone());
    let mut early = Vec::new();
    for (req, (first, message)) in (1_u64..).zip(live) {
        // Numbers from the top of the range, apart from the client's own.
        let req = u64::MAX - req;
        let mut bytes = Vec::new();
        padres_lang::wire::encode(&Frame::Request { req, message }, DEFAULT_MAX_FRAME, &mut bytes)
            .map_err(|e| e.to_string())?;
        let bytes = Arc::new(bytes);
        shared.with(|s| s.numbering.keep(&bytes));
        link.send.write_all(&bytes).await.map_err(|e| e.to_string())?;
        loop {
            let frame = read_frame(&mut link.recv, &mut link.reader).await.map_err(|e| e.to_string())?;
            if let Some(frame) = &frame {
                count_received(shared, frame);
            }
            match frame {
                Some(Frame::Ok { req: r, id }) if r == req => {
                    if let Some(id) = id {
                        shared.with(|s| s.issued.remap(&first, id));
                    }
                    break;
                }
                Some(Frame::Error { req: Some(r), message, .. }) if r == req => {
                    shared.set_last_error(format!("re-issuing {first} after reconnecting failed: {message}"));
                    shared.with(|s| s.issued.forget(&first));
                    break;
                }
                Some(
                    frame @ (Frame::Notification { .. }
                    | Frame::CompositeNotification { .. }
                    | Frame::EndOfHistory { .. }),
                ) => early.push(frame),
                Some(_) => {}
                None => return Err("the broker closed the connection while re-issuing".to_owned()),
            }
        }
        for frame in early.drain(..) {
            if let Some(notification) = notification(shared, frame) {
                let _ = notify.send(notification).await;
            }
        }
    }
    Ok(())
}

/// A report that does not answer what was asked.
fn wrong_report(asked: &'static str, got: &Report) -> ClientError {
    let got = match got {
        Report::Stats(_) => "stats",
        Report::Routes(_) => "routes",
        Report::LinkDropped(_) => "drop-link",
    };
    ClientError::Protocol(ProtocolError::WrongAnswer { asked, got })
}
