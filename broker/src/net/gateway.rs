//! The HTTP gateway, for programs in other languages: advertise and publish with a POST,
//! subscribe with server-sent events, in the text syntax and the JSON shapes of `padres
//! session` ([`padres_lang::json`]). Served by the HTTP listener (`net/http.rs`).
//!
//! - `POST /api/publish`: the body is session lines, one per line (`text/plain`), or a JSON
//!   array of them (`application/json`); `a ADV`, `p PUB` and `unadv ID` are taken. Every
//!   line is parsed before anything is sent: a line that does not parse answers 400 with
//!   `{"type":"error","line":N,"message":…}` and nothing is sent. The lines then go to the
//!   broker in order, as one client that leaves when the request ends (its
//!   advertisements go with it, after its publications are routed). The answer is a JSON
//!   array of one `{"type":"reply","op":…,"line":N[,"id":…]}` or `{"type":"error",…}` per
//!   line: 200 if every line was taken, 422 if the broker refused one.
//! - `GET /api/subscribe?s=FILTER` (or `cs=PATTERN` for a composite subscription): a
//!   refused or malformed subscription answers 400 with the reason. Otherwise an event
//!   stream (`text/event-stream`): first `{"type":"reply","op":"s","id":…}`, then one
//!   `data:` event per notification, as `padres session` prints them. The subscription
//!   lasts as long as the stream. A reader that falls behind by more than
//!   `limits.max_queued_bytes_per_client` is cut off (its stream ends), as a QUIC client is;
//!   the others are not slowed.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use padres_lang::wire::Frame;
use padres_lang::{Limits, Message, MessageId, Parser, Timestamp};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::router_task::{ClientHandle, Event};
use crate::router::ClientId;

/// How long a request waits for the broker's replies.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the gateway's handlers share.
#[derive(Clone, Debug)]
pub(super) struct Gateway {
    pub(super) events: mpsc::Sender<Event>,
    /// Client ids, shared with the QUIC listener.
    pub(super) next_client: Arc<AtomicU64>,
}

/// One gateway client of the router task; leaves when dropped.
#[derive(Debug)]
struct Client {
    id: ClientId,
    events: mpsc::Sender<Event>,
    frames: mpsc::UnboundedReceiver<(Frame, usize)>,
    queued: Arc<AtomicUsize>,
}

impl Client {
    async fn open(gateway: &Gateway) -> Option<Self> {
        let id = gateway.next_client.fetch_add(1, Ordering::Relaxed) + 1;
        let (queue, frames) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let handle = ClientHandle { queue, queued: queued.clone(), connection: None };
        gateway.events.send(Event::Connected(id, handle)).await.ok()?;
        Some(Self { id, events: gateway.events.clone(), frames, queued })
    }

    async fn request(&self, req: u64, message: Message) -> bool {
        self.events.send(Event::Request(self.id, Some(req), message)).await.is_ok()
    }

    /// The next frame for this client (its queue's count taken down); `None` once the
    /// broker has let it go.
    async fn next(&mut self) -> Option<Frame> {
        let (frame, size) = self.frames.recv().await?;
        self.queued.fetch_sub(size, Ordering::Relaxed);
        Some(frame)
    }

    /// Waits for the reply to request `req`, skipping anything else.
    async fn reply(&mut self, req: u64) -> Option<Result<Option<MessageId>, String>> {
        let wait = async {
            loop {
                match self.next().await? {
                    Frame::Ok { req: r, id } if r == req => return Some(Ok(id)),
                    Frame::Error { req: Some(r), message, .. } if r == req => return Some(Err(message)),
                    _ => {}
                }
            }
        };
        tokio::time::timeout(REPLY_TIMEOUT, wait).await.ok().flatten()
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
    let body = match line {
        Some(line) => json!({ "type": "error", "line": line, "message": message }),
        None => json!({ "type": "error", "message": message }),
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn unavailable() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, None, "the broker is shutting down")
}

/// The session's name for what `message` does.
fn op(message: &Message) -> &'static str {
    match message {
        Message::Advertise(_) => "a",
        Message::Publish(_) => "p",
        Message::Unadvertise(_) => "unadv",
        Message::Subscribe(_) => "s",
        Message::CompositeSubscribe(_) => "cs",
        Message::Unsubscribe(_) => "unsub",
    }
}

/// `POST /api/publish`.
pub(super) async fn publish(State(gateway): State<Gateway>, headers: HeaderMap, body: String) -> Response {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    let lines: Vec<String> = if json_body {
        match serde_json::from_str(&body) {
            Ok(lines) => lines,
            Err(e) => {
                let why = format!("the body is not a JSON array of session lines (strings): {e}");
                return error(StatusCode::BAD_REQUEST, None, &why);
            }
        }
    } else {
        body.lines().map(str::to_owned).collect()
    };
    let parser = parser();
    let mut messages = Vec::new();
    for (at, text) in lines.iter().enumerate() {
        let (line, text) = (at + 1, text.trim());
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        match parser.message(text) {
            Ok(message @ (Message::Advertise(_) | Message::Publish(_) | Message::Unadvertise(_))) => {
                messages.push((line, message));
            }
            Ok(other) => {
                let why = format!(
                    "'{}' is not taken here: POST advertises (a), publishes (p) and unadvertises (unadv); \
                     subscribe with GET /api/subscribe?s=FILTER",
                    op(&other)
                );
                return error(StatusCode::BAD_REQUEST, Some(line), &why);
            }
            Err(e) => return error(StatusCode::BAD_REQUEST, Some(line), &e.to_string()),
        }
    }
    if messages.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            "nothing to send: give session lines such as p [class,'x']",
        );
    }
    let Some(mut client) = Client::open(&gateway).await else { return unavailable() };
    let mut answers = Vec::new();
    let mut refused = false;
    // One at a time, in order: an advertisement is in place before the publications after it.
    for (line, message) in messages {
        let op = op(&message);
        let req = line as u64;
        if !client.request(req, message).await {
            return unavailable();
        }
        match client.reply(req).await {
            Some(Ok(id)) => {
                let mut answer = json!({ "type": "reply", "op": op, "line": line });
                if let Some(id) = id {
                    answer["id"] = json!(id.to_string());
                }
                answers.push(answer);
            }
            Some(Err(message)) => {
                refused = true;
                answers.push(json!({ "type": "error", "line": line, "message": message }));
            }
            None => return unavailable(),
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
    Query(params): Query<SubscribeParams>,
) -> Response {
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
    let op = op(&message);
    let Some(mut client) = Client::open(&gateway).await else { return unavailable() };
    if !client.request(1, message).await {
        return unavailable();
    }
    let id = match client.reply(1).await {
        Some(Ok(id)) => id,
        Some(Err(message)) => return error(StatusCode::BAD_REQUEST, None, &message),
        None => return unavailable(),
    };
    let mut first = json!({ "type": "reply", "op": op, "line": 1 });
    if let Some(id) = id {
        first["id"] = json!(id.to_string());
    }
    let events =
        futures_util::stream::unfold((client, Some(first.to_string())), |(mut client, first)| async move {
            if let Some(first) = first {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(first)), (client, None)));
            }
            loop {
                let line = match client.next().await? {
                    Frame::Notification { subs, publication } => {
                        padres_lang::json::publication(&subs, &publication)
                    }
                    Frame::CompositeNotification { sub, pubs } => {
                        padres_lang::json::composite(&sub, pubs.iter().map(|(leaf, p)| (*leaf, &**p)))
                    }
                    Frame::EndOfHistory { sub, count, missing, truncated } => {
                        padres_lang::json::end_of_history(&sub, count, &missing, truncated)
                    }
                    // The broker let this client go.
                    Frame::Bye { .. } => return None,
                    _ => continue,
                };
                return Some((Ok(SseEvent::default().data(line)), (client, None)));
            }
        });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}
