//! The HTTP gateway, for programs in other languages: advertise and publish with a POST,
//! subscribe with server-sent events, in the text syntax and the JSON shapes of `padres
//! session` ([`padres_lang::json`]). Served by the HTTP listener (`net/http.rs`) when
//! `--http-gateway` (`http_gateway = true`) is given as well; otherwise both paths answer
//! 404 saying so. Each request acts as the principal its `Authorization: Bearer
//! NAME:TOKEN` header names (anonymous without one), held to its permits exactly as a
//! QUIC client of that principal is (`net/http_auth.rs`).
//!
//! - `POST /api/publish`: the body is session lines, one per line (`text/plain`), or a JSON
//!   array of them (`application/json`); `a ADV`, `p PUB` and `unadv ID` are taken. Every
//!   line is parsed before anything is sent: a line that does not parse answers 400 with
//!   `{"type":"error","line":N,"message":…}` and nothing is sent (so does one too large
//!   for a frame between brokers). The lines then go to the
//!   broker in order, as one client that leaves when the request ends (its
//!   advertisements go with it, after its publications are routed). The answer is a JSON
//!   array of one `{"type":"reply","op":…,"line":N[,"id":…]}` or `{"type":"error",…}` per
//!   line: 200 if every line was taken, 422 if the broker refused one, 504 (with what was
//!   taken before) if the broker did not answer one within 30 s. `unadv` can name only an
//!   advertisement of the same request.
//! - `GET /api/subscribe?s=FILTER` (or `cs=PATTERN` for a composite subscription): a
//!   malformed subscription answers 400, a refused one 422, with the reason. Otherwise an
//!   event stream (`text/event-stream`): first `{"type":"reply","op":"s","line":1,"id":…}`,
//!   then one `data:` event per notification as `padres session` prints them (and
//!   `{"type":"error","message":…}` for an error the broker reports on it). The
//!   subscription lasts as long as the stream. A reader that falls behind by more than
//!   `limits.max_queued_bytes_per_client` is cut off as a QUIC client is: the broker drops
//!   its subscription and queues nothing more for it, and the others are not slowed. Its
//!   stream ends once what was already queued is read or its connection closes; until
//!   then that (at most one allowance) is held.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use padres_lang::json;
use padres_lang::wire::Frame;
use padres_lang::{Limits, Message, MessageId, Parser, Timestamp};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::router_task::{ClientHandle, Event};
use crate::auth::Rights;
use crate::router::ClientId;

/// How long a request waits for the broker's replies.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the gateway's handlers share.
#[derive(Clone, Debug)]
pub(super) struct Gateway {
    pub(super) events: mpsc::Sender<Event>,
    /// Client ids, shared with the QUIC listener.
    pub(super) next_client: Arc<AtomicU64>,
    /// The largest frame between brokers (`limits.max_frame_bytes`).
    pub(super) max_frame: usize,
    /// Whether publishing and subscribing are served (`http_gateway`).
    pub(super) enabled: bool,
    /// Who each request is, and what it may do (`net/http_auth.rs`).
    pub(super) auth: Arc<super::http_auth::HttpAuth>,
    /// Connections open per principal, shared with the QUIC listener: a request counts as
    /// one against `max_connections` while it lasts.
    pub(super) connections: super::accept::Connections,
}

/// One gateway client of the router task; leaves when dropped.
#[derive(Debug)]
struct Client {
    id: ClientId,
    events: mpsc::Sender<Event>,
    frames: mpsc::UnboundedReceiver<(Frame, usize)>,
    queued: Arc<AtomicUsize>,
    /// Frames that came while a reply was awaited (a subscription's first notifications
    /// arrive before its reply, which waits for it to settle), in order.
    held: VecDeque<Frame>,
    /// Its place among its principal's connections, given back when it leaves.
    _counted: Option<super::accept::Counted>,
}

/// What became of a request.
#[derive(Debug)]
enum Answer {
    /// Taken, with the id given.
    Taken(Option<MessageId>),
    /// Refused, with the broker's reason.
    Refused(String),
    /// No answer within [`REPLY_TIMEOUT`].
    TimedOut,
    /// The broker let the client go (it is shutting down).
    Gone,
}

impl Client {
    /// A client acting as the principal of the request with `headers`; or the response
    /// refusing it (`net/http_auth.rs`, and [`Self::open`]).
    async fn of_request(gateway: &Gateway, headers: &HeaderMap) -> Result<Self, Response> {
        let rights = gateway.auth.principal(headers).await.map_err(IntoResponse::into_response)?;
        Self::open(gateway, rights).await
    }

    /// A client of the router task acting as `rights`' principal, counted among its
    /// connections; or the response refusing it (the most connections its permits allow
    /// are open, or the broker is shutting down).
    async fn open(gateway: &Gateway, rights: Arc<Rights>) -> Result<Self, Response> {
        let counted = super::accept::count(&gateway.connections, &rights)
            .map_err(|why| error(StatusCode::TOO_MANY_REQUESTS, None, &why))?;
        let id = gateway.next_client.fetch_add(1, Ordering::Relaxed) + 1;
        let (queue, frames) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let handle = ClientHandle { queue, queued: queued.clone(), connection: None, rights };
        gateway.events.send(Event::Connected(id, handle)).await.map_err(|_| unavailable())?;
        let events = gateway.events.clone();
        Ok(Self { id, events, frames, queued, held: VecDeque::new(), _counted: counted })
    }

    async fn request(&self, req: u64, message: Message) -> bool {
        self.events.send(Event::Request(self.id, Some(req), message)).await.is_ok()
    }

    /// The next frame for this client (its queue's count taken down); `None` once the
    /// broker has let it go.
    async fn next(&mut self) -> Option<Frame> {
        if let Some(frame) = self.held.pop_front() {
            return Some(frame);
        }
        self.received().await
    }

    async fn received(&mut self) -> Option<Frame> {
        let (frame, size) = self.frames.recv().await?;
        self.queued.fetch_sub(size, Ordering::Relaxed);
        Some(frame)
    }

    /// Waits for the reply to request `req`; what else comes meanwhile is held for
    /// [`Self::next`].
    async fn reply(&mut self, req: u64) -> Answer {
        let wait = async {
            loop {
                match self.received().await {
                    None => return Answer::Gone,
                    Some(Frame::Ok { req: r, id }) if r == req => return Answer::Taken(id),
                    Some(Frame::Error { req: Some(r), message, .. }) if r == req => {
                        return Answer::Refused(message);
                    }
                    Some(other) => self.held.push_back(other),
                }
            }
        };
        tokio::time::timeout(REPLY_TIMEOUT, wait).await.unwrap_or(Answer::TimedOut)
    }
}

impl Client {
    /// Sends request `req`, a subscription, and waits for its reply: the id it was given,
    /// or the answer to give the caller (422 refused, 504 no reply in time, 503 gone).
    async fn subscribed(&mut self, req: u64, message: Message) -> Result<Option<MessageId>, Response> {
        if !self.request(req, message).await {
            return Err(unavailable());
        }
        match self.reply(req).await {
            Answer::Taken(id) => Ok(id),
            Answer::Refused(message) => Err(error(StatusCode::UNPROCESSABLE_ENTITY, None, &message)),
            Answer::TimedOut => {
                let why = format!("no answer from the broker within {} s", REPLY_TIMEOUT.as_secs());
                Err(error(StatusCode::GATEWAY_TIMEOUT, None, &why))
            }
            Answer::Gone => Err(unavailable()),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let (events, id) = (self.events.clone(), self.id);
        if events.try_send(Event::Gone(id)).is_err()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = events.send(Event::Gone(id)).await;
            });
        }
    }
}

fn now() -> Timestamp {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    i64::try_from(millis).ok().and_then(Timestamp::from_millis).unwrap_or(Timestamp::MAX)
}

/// A parser that resolves relative times (`'now-1h'`) against this broker's clock.
fn parser() -> Parser {
    Parser::new(Limits::default()).at(now())
}

fn error(status: StatusCode, line: Option<usize>, message: &str) -> Response {
    let body = json::error(line, message).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn unavailable() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, None, "the broker is shutting down")
}

fn disabled() -> Response {
    let why = "this broker's HTTP gateway is off: start it with --http-gateway (http_gateway = true)";
    error(StatusCode::NOT_FOUND, None, why)
}

/// Why `message` cannot go to the broker from here, if it cannot: an advertisement or a
/// subscription too large to forward between brokers, or a publication too large for a
/// frame (a QUIC client's session refuses the same).
fn too_large(message: &Message, max_frame: usize) -> Option<String> {
    let fits = match message {
        Message::Publish(publication) => {
            let frame = Frame::Publish { publication: Arc::new(publication.clone()) };
            padres_lang::wire::encode(&frame, max_frame, &mut Vec::new()).is_ok()
        }
        other => super::session::forwardable(other, max_frame),
    };
    (!fits).then(|| {
        format!(
            "this {} would not fit in a {max_frame}-byte frame between brokers (limits.max_frame_bytes): make it smaller",
            message.command()
        )
    })
}

/// `POST /api/publish`.
pub(super) async fn publish(State(gateway): State<Gateway>, headers: HeaderMap, body: String) -> Response {
    if !gateway.enabled {
        return disabled();
    }
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    let messages = match json::request_lines(&body, json_body, &parser()) {
        Ok(messages) => messages,
        Err(refused) => return error(StatusCode::BAD_REQUEST, refused.line, &refused.message),
    };
    for (line, message) in &messages {
        if !matches!(message, Message::Advertise(_) | Message::Publish(_) | Message::Unadvertise(_)) {
            let why = format!(
                "'{}' is not taken here: POST advertises (a), publishes (p) and unadvertises (unadv); \
                 subscribe with GET /api/subscribe?s=FILTER",
                message.command()
            );
            return error(StatusCode::BAD_REQUEST, Some(*line), &why);
        }
        if let Some(why) = too_large(message, gateway.max_frame) {
            return error(StatusCode::BAD_REQUEST, Some(*line), &why);
        }
    }
    if messages.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            "nothing to send: give session lines such as p [class,'x']",
        );
    }
    let mut client = match Client::of_request(&gateway, &headers).await {
        Ok(client) => client,
        Err(refused) => return refused,
    };
    let mut answers = Vec::new();
    let mut refused = false;
    // One at a time, in order: an advertisement is in place before the publications after it.
    for (line, message) in messages {
        let op = message.command();
        let req = line as u64;
        if !client.request(req, message).await {
            return unavailable();
        }
        match client.reply(req).await {
            Answer::Taken(id) => answers.push(json::reply(line, op, id.as_ref())),
            Answer::Refused(message) => {
                refused = true;
                answers.push(json::error(Some(line), &message));
            }
            // What was taken so far is said, so that a caller does not send it again.
            Answer::TimedOut => {
                let why = format!(
                    "no answer from the broker within {} s; the lines before were taken",
                    REPLY_TIMEOUT.as_secs()
                );
                answers.push(json::error(Some(line), &why));
                let body = serde_json::Value::Array(answers).to_string();
                return (StatusCode::GATEWAY_TIMEOUT, [(header::CONTENT_TYPE, "application/json")], body)
                    .into_response();
            }
            Answer::Gone => return unavailable(),
        }
    }
    let status = if refused { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
    (status, [(header::CONTENT_TYPE, "application/json")], serde_json::Value::Array(answers).to_string())
        .into_response()
}

#[derive(Debug, Deserialize)]
pub(super) struct SubscribeParams {
    s: Option<String>,
    cs: Option<String>,
}

/// `GET /api/subscribe?s=FILTER` or `?cs=PATTERN`.
pub(super) async fn subscribe(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Query(params): Query<SubscribeParams>,
) -> Response {
    if !gateway.enabled {
        return disabled();
    }
    let text = match (params.s, params.cs) {
        (Some(filter), None) => format!("s {filter}"),
        (None, Some(pattern)) => format!("cs {pattern}"),
        _ => {
            let why = "give one of s=FILTER (a subscription) or cs=PATTERN (a composite subscription)";
            return error(StatusCode::BAD_REQUEST, None, why);
        }
    };
    let message = match parser().message(&text) {
        Ok(message) => message,
        Err(e) => return error(StatusCode::BAD_REQUEST, None, &e.to_string()),
    };
    if let Some(why) = too_large(&message, gateway.max_frame) {
        return error(StatusCode::BAD_REQUEST, None, &why);
    }
    let op = message.command();
    let mut client = match Client::of_request(&gateway, &headers).await {
        Ok(client) => client,
        Err(refused) => return refused,
    };
    let id = match client.subscribed(1, message).await {
        Ok(id) => id,
        Err(refused) => return refused,
    };
    let first = json::reply(1, op, id.as_ref());
    let events =
        futures_util::stream::unfold((client, Some(first.to_string())), |(mut client, first)| async move {
            if let Some(first) = first {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(first)), (client, None)));
            }
            loop {
                let line = match client.next().await? {
                    Frame::Notification { subs, publication } => json::publication(&subs, &publication),
                    Frame::CompositeNotification { sub, pubs } => {
                        json::composite(&sub, pubs.iter().map(|(leaf, p)| (*leaf, &**p)))
                    }
                    Frame::EndOfHistory { sub, count, missing, truncated } => {
                        json::end_of_history(&sub, count, &missing, truncated)
                    }
                    // An error the broker reports on the subscription (not a reply).
                    Frame::Error { req: None, message, .. } => json::error(None, &message).to_string(),
                    // The broker let this client go.
                    Frame::Bye { .. } => return None,
                    _ => continue,
                };
                return Some((Ok(SseEvent::default().data(line)), (client, None)));
            }
        });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

#[derive(Debug, Deserialize)]
pub(super) struct WorkflowParams {
    since: Option<String>,
}

/// The classes `/api/workflows` reads: its key in the answer, the class, and whether all
/// of the past is read (else since `since`).
const WORKFLOW_CLASSES: [(&str, &str, bool); 3] =
    [("deployments", "agent_ctl", true), ("triggers", "trigger", false), ("statuses", "job_status", false)];

/// `GET /api/workflows?since=1d`: what the history stores hold of workflows, for the web
/// monitor: every `agent_ctl` publication (deployments and undeployments, whenever), and
/// the `trigger` and `job_status` publications since `since` (a time bound as in
/// subscriptions: `1h`, `7d`, an RFC 3339 time; 1 day by default), each as its attributes,
/// and the stores that did not answer. Served with the JSON API (it reads, and only these
/// classes), the gateway off or on.
pub(super) async fn workflows(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Query(params): Query<WorkflowParams>,
) -> Response {
    let now = now();
    let since = match padres_lang::time::parse_bound(params.since.as_deref().unwrap_or("1d"), now) {
        Ok(since) => since,
        Err(e) => return error(StatusCode::BAD_REQUEST, None, &format!("since: {e}")),
    };
    let mut client = match Client::of_request(&gateway, &headers).await {
        Ok(client) => client,
        Err(refused) => return refused,
    };
    let mut ids: Vec<(MessageId, &str)> = Vec::new();
    for (req, (key, class, always)) in (1u64..).zip(WORKFLOW_CLASSES) {
        let from = if always { Timestamp::from_millis(0).unwrap_or(since) } else { since };
        let text = format!("s [class,eq,'{class}'],[time,>=,{}]", from.to_rfc3339());
        let message = match parser().message(&text) {
            Ok(message) => message,
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, None, &e.to_string()),
        };
        match client.subscribed(req, message).await {
            Ok(Some(id)) => ids.push((id, key)),
            Ok(None) => return unavailable(),
            Err(refused) => return refused,
        }
    }
    let mut found: std::collections::BTreeMap<&str, Vec<serde_json::Value>> =
        WORKFLOW_CLASSES.iter().map(|(key, ..)| (*key, Vec::new())).collect();
    let (mut missing, mut truncated, mut ended) = (Vec::new(), false, 0);
    let key_of = |sub: &MessageId| ids.iter().find(|(id, _)| id == sub).map(|(_, key)| *key);
    let read = async {
        while ended < ids.len() {
            match client.next().await {
                Some(Frame::Notification { subs, publication }) => {
                    if let Some(key) = subs.first().and_then(key_of)
                        && let Some(list) = found.get_mut(key)
                    {
                        list.push(json::attributes(&publication));
                    }
                }
                Some(Frame::EndOfHistory { missing: gone, truncated: cut, .. }) => {
                    ended += 1;
                    missing.extend(gone.iter().map(ToString::to_string));
                    truncated |= cut;
                }
                Some(_) => {}
                None => return false,
            }
        }
        true
    };
    match tokio::time::timeout(REPLY_TIMEOUT, read).await {
        Ok(true) => {}
        Ok(false) => return unavailable(),
        Err(_) => {
            let why = format!("the history stores did not answer within {} s", REPLY_TIMEOUT.as_secs());
            return error(StatusCode::GATEWAY_TIMEOUT, None, &why);
        }
    }
    missing.sort();
    missing.dedup();
    let mut body =
        serde_json::json!({ "since": since.to_rfc3339(), "missing": missing, "truncated": truncated });
    for (key, list) in found {
        body[key] = serde_json::Value::Array(list);
    }
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
