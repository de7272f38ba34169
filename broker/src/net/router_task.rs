//! The router task: the one owner of the [`Router`], the [`LinkPolicy`] and the link
//! [`Sessions`]. Connection tasks send it [`Event`]s over a bounded channel; it hands every
//! output to a client's queue or, through the neighbour's session, a link's; runs the
//! policy's and the sessions' timers (`poll_timeout`/`handle_timeout` on the runtime's
//! clock), carries out the policy's actions (dial, close, a link up or down) and the
//! sessions' steps (frames to write, a neighbour up or down for the router), and answers
//! queries.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use padres_lang::wire::{
    BrokerMessage, BrokerStats, CloseCode, ErrorCode, Frame, LinkTraffic, Query, Report, RouteEntry,
    RoutesReport,
};
use padres_lang::{Message, MessageId, Name, Publication, Stamped, Subscription};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::client_sessions::{ACK_AFTER_MS, ClientSessions, Left, Queued, Resumed};
use super::detection::{Batch, Detected, DetectionThread};
use super::http::{BoundsView, DetectorView, DetectorsView, HistoryView, PartView, SubscriberView};
use super::link::Dialer;
use super::{DRAIN_TIMEOUT, Limits};
use crate::auth::Rights;
use crate::history::writer::{Ack, History};
use crate::history::{Durability, Record};
use crate::links::{Action, LinkId, LinkPolicy, Target, Timers};
use crate::metrics::{LinkSnapshot, Snapshot};
use crate::monitor::{self, Federation, FederationView};
use crate::resume::{self, Received, Sessions, Step};
use crate::router::{BROKER_CLIENT, ClientId, DetectorOp, Input, Output, Router, RoutesPage};
use crate::traffic::Traffic;

/// Events the router task handles before it hands out what they produced, so that a
/// busy connection task is woken once for many frames.
const EVENT_BATCH: usize = 256;

/// The longest a client may keep a link down ([`Query::DropLink`]): an hour.
const MAX_DROP_MS: u64 = 3_600_000;

/// Most rows of each table a routes report carries, whatever is asked.
const MAX_ROUTES_LISTED: u32 = 10_000;

/// A connected client as the router task sees it.
#[derive(Debug)]
pub(super) struct ClientHandle {
    /// What waits to be written to the client, with its estimated size in bytes.
    pub(super) queue: mpsc::UnboundedSender<(Frame, usize)>,
    /// Estimated bytes queued and not yet written.
    pub(super) queued: Arc<AtomicUsize>,
    /// The client's QUIC connection; `None` for a client of the HTTP gateway, whose stream
    /// ends when its queue is dropped.
    pub(super) connection: Option<quinn::Connection>,
    /// Its principal and what it may do.
    pub(super) rights: Arc<Rights>,
}

/// A neighbour link as the router task sees it.
#[derive(Debug)]
pub(super) struct LinkHandle {
    pub(super) id: LinkId,
    pub(super) peer: Name,
    /// The target this broker dialled it for; `None` if the peer dialled.
    pub(super) target: Option<Target>,
    pub(super) queue: mpsc::UnboundedSender<Frame>,
    /// Frames queued and not yet written.
    pub(super) queued: Arc<AtomicUsize>,
    /// What the link's writer sent, per class.
    pub(super) traffic: Arc<Mutex<Traffic>>,
    pub(super) connection: quinn::Connection,
}

impl LinkHandle {
    /// Queues `frame` for the link, counted for the stuck-link rule; false if the link's
    /// task is gone.
    fn write(&self, frame: Frame) -> bool {
        let queued = self.queue.send(frame).is_ok();
        if queued {
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
        queued
    }
}

/// What connection tasks tell the router task.
#[derive(Debug)]
pub(super) enum Event {
    /// A client connection without a session (the ids of these client events are the
    /// connection's; see [`super::client_sessions`]).
    Connected(ClientId, ClientHandle),
    /// A client connection whose first frame asks for a session.
    ClientResume {
        conn: ClientId,
        handle: ClientHandle,
        session: u64,
        received: u64,
    },
    /// A client's request; `None` for a streamed publication.
    Request(ClientId, Option<u64>, Message),
    Query(ClientId, u64, Query),
    /// A client's request refused by its connection task (too large to forward, or a
    /// frame a client may not send); `counted` if it was one the client numbers.
    Refused {
        conn: ClientId,
        req: Option<u64>,
        code: ErrorCode,
        message: String,
        counted: bool,
    },
    /// A client acknowledged this many of the frames queued for it.
    ClientAck(ClientId, u64),
    /// A client is done: it finished its stream or closed its connection, or the broker
    /// closed it.
    Gone(ClientId),
    /// A client's connection was lost otherwise: its session, if any, waits for it.
    Lost(ClientId),
    LinkUp(LinkHandle),
    FromBroker {
        link: LinkId,
        seq: u64,
        message: BrokerMessage,
    },
    /// A neighbour's `Resume` (see [`crate::resume`]).
    Resume {
        link: LinkId,
        session: u64,
        received: u64,
        fresh: bool,
    },
    /// A neighbour's acknowledgement.
    Ack {
        link: LinkId,
        received: u64,
    },
    LinkDown {
        link: LinkId,
        code: CloseCode,
    },
    DialFailed(Target),
    /// A broker was refused at the hello.
    LinkRefused,
    /// A client was refused at the hello (its credentials).
    ClientRefused,
    /// A question from the HTTP listener.
    Inspect(Inspect),
    /// Close every link and client queue, then stop.
    Shutdown,
}

/// What the HTTP listener asks the router task, with where to send the answer.
#[derive(Debug)]
pub(super) enum Inspect {
    /// The counters, for `/metrics` and `/api/stats`.
    Snapshot(oneshot::Sender<Snapshot>),
    /// The routing tables, a page of each (`/api/routes`), as [`Query::Routes`] asks.
    Routes { limit: u32, offset: u32, filter: String, reply: oneshot::Sender<RoutesReport> },
    /// The brokers' latest reports (`/api/federation`).
    Federation(oneshot::Sender<FederationView>),
    /// A page of the composite detectors (`/api/detectors`).
    Detectors { limit: u32, offset: u32, reply: oneshot::Sender<DetectorsView> },
    /// The history store (`/api/history`).
    History(oneshot::Sender<HistoryView>),
}

/// What the router task runs with besides the router, its channels and the dialer.
#[derive(Debug)]
pub(super) struct Setup {
    pub(super) limits: Limits,
    /// Connections accepted and open (kept by the accepting loop).
    pub(super) open: Arc<AtomicUsize>,
    /// The history store's writer and filters, if this broker keeps history.
    pub(super) history: Option<(History, Vec<Subscription>)>,
    pub(super) reports: Reports,
    /// The link sessions' window and outbox limit.
    pub(super) sessions: resume::Settings,
    /// How long a client's session outlives a lost connection (milliseconds; 0: not at all).
    pub(super) client_window_ms: u64,
    /// Whether clients may drop links ([`Query::DropLink`], fault injection).
    pub(super) allow_drop_link: bool,
    /// The composite detection thread and what it sends back, if the router offloads
    /// detection to it.
    pub(super) detection: Option<(DetectionThread, mpsc::UnboundedReceiver<Detected>)>,
}

/// The broker's reports on itself ([`crate::monitor`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Reports {
    /// How often it publishes one, in milliseconds; 0: never.
    pub(super) interval_ms: u64,
    /// Whether it subscribes to every broker's, for `/api/federation`.
    pub(super) view: bool,
}

/// What one neighbour's links carried, over every link to it so far.
#[derive(Debug, Default)]
struct LinkCounters {
    messages_in: u64,
    messages_out: u64,
    /// UDP bytes of its connections that have closed (open ones are read when asked).
    closed_bytes_in: u64,
    closed_bytes_out: u64,
    /// What its closed connections sent, per class.
    closed_traffic: Traffic,
}

/// A history store's answer to a historic query.
type HistoryAnswer = (MessageId, Result<Vec<Stamped>, String>);

/// Counters kept for `broker stats`.
#[derive(Debug, Default)]
struct Counters {
    client_requests: u64,
    publications_in: u64,
    notifications_out: u64,
    broker_messages_in: u64,
    broker_messages_out: u64,
    slow_clients_dropped: u64,
    links_refused: u64,
    clients_refused: u64,
    links_cut: u64,
    history_queries: u64,
    /// Publications received from clients, per class (messages only).
    publications_by_class: Traffic,
}

#[derive(Debug)]
struct RouterTask {
    router: Router,
    /// Where denials are logged.
    denial_log: DenialLog,
    policy: LinkPolicy,
    sessions: Sessions,
    dialer: Arc<Dialer>,
    /// For dial tasks to report back.
    events: mpsc::Sender<Event>,
    /// Dial and link tasks started here.
    tasks: JoinSet<()>,
    start: Instant,
    /// Milliseconds since the Unix epoch at `start`; see [`RouterTask::wall`].
    epoch: u64,
    /// The router's clock when last read: it never goes backwards.
    last_wall: u64,
    limits: Limits,
    clients: HashMap<ClientId, ClientHandle>,
    links: HashMap<LinkId, LinkHandle>,
    counters: Counters,
    /// Per neighbour ever linked.
    link_counters: BTreeMap<Name, LinkCounters>,
    reports: Reports,
    /// The brokers' reports received, if this broker keeps a federation view.
    federation: Federation,
    /// Connections accepted and open (kept by the accepting loop).
    open: Arc<AtomicUsize>,
    out: Vec<Output>,
    /// The history store's writer, if this broker keeps history.
    history: Option<History>,
    /// Whether clients may drop links.
    allow_drop_link: bool,
    /// Its filters, as text.
    history_filters: Vec<String>,
    /// Where the writer sends its answers to historic queries: a channel of its own,
    /// unbounded (one answer per query asked), so that the writer never waits on the
    /// router task's inbox, nor the router task on itself when the writer answers at once.
    answers: mpsc::UnboundedSender<HistoryAnswer>,
    /// When a dropped publication was last logged, and how many went since.
    history_drops_logged: Option<Instant>,
    history_drops_unlogged: u64,
    /// Clients' sessions, and which connection serves which client.
    client_sessions: ClientSessions,
    /// Where the history writer sends answers for publishers waiting on `full` durability,
    /// to be queued for them here (numbered, if they have sessions).
    store_acks: mpsc::UnboundedSender<(ClientId, Frame)>,
    /// Clients found too slow, cut off at the end of [`RouterTask::dispatch`].
    slow: Vec<ClientId>,
    /// The composite detection thread, if the router offloads detection.
    detection: Option<DetectionThread>,
    /// The detector ops handed out since the last batch went to the thread, each with
    /// the router's time.
    detect_batch: Vec<(u64, DetectorOp)>,
    /// The router's time when the last batch went ([`Batch::until`]).
    detect_until: u64,
    /// Whether the thread was found stopped (logged once).
    detection_lost: bool,
    /// Clients' stats requests waiting for the detection thread to apply what the events
    /// before them gave it (`answer_stats`), with their request numbers.
    stats_waiting: Vec<(ClientId, u64)>,
}

/// Runs the router task until [`Event::Shutdown`]. Events are taken in batches (as many as
/// are waiting, up to [`EVENT_BATCH`]) and what they produced is handed out after each.
pub(super) async fn run(
    router: Router,
    mut inbox: mpsc::Receiver<Event>,
    events: mpsc::Sender<Event>,
    dialer: Dialer,
    setup: Setup,
) {
    let Setup { limits, open, history, reports, sessions, client_window_ms, allow_drop_link, detection } =
        setup;
    let (detection, mut detected) = match detection {
        Some((thread, detected)) => (Some(thread), Some(detected)),
        None => (None, None),
    };
    let (answers, mut answered) = mpsc::unbounded_channel::<HistoryAnswer>();
    let (store_acks, mut stored) = mpsc::unbounded_channel::<(ClientId, Frame)>();
    let mut client_tick = tokio::time::interval(std::time::Duration::from_millis(ACK_AFTER_MS));
    client_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (history, filters) = match history {
        Some((history, filters)) => (Some(history), filters),
        None => (None, Vec::new()),
    };
    // What waits on a link is also in its session's outbox until acknowledged, and a link
    // that returns is sent all of it at once: the backlog that cuts a link at once is above
    // what the outbox can hold (64 bytes is the least a message counts).
    let max_backlog = (sessions.max_bytes / 64).max(Timers::default().max_backlog);
    let policy = LinkPolicy::new(
        router.name().clone(),
        dialer.targets.len(),
        Timers { max_backlog, ..Timers::default() },
    );
    let sessions = Sessions::new(router.name().clone(), random_seed(), sessions);
    let mut task = RouterTask {
        denial_log: DenialLog::default(),
        router,
        policy,
        sessions,
        dialer: Arc::new(dialer),
        events,
        tasks: JoinSet::new(),
        start: Instant::now(),
        epoch: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        last_wall: 0,
        limits,
        clients: HashMap::new(),
        links: HashMap::new(),
        counters: Counters::default(),
        link_counters: BTreeMap::new(),
        reports,
        federation: Federation::default(),
        open,
        out: Vec::new(),
        history,
        allow_drop_link,
        history_filters: filters.iter().map(ToString::to_string).collect(),
        answers,
        history_drops_logged: None,
        history_drops_unlogged: 0,
        client_sessions: ClientSessions::new(client_window_ms),
        store_acks,
        slow: Vec::new(),
        detection,
        detect_batch: Vec::new(),
        detect_until: 0,
        detection_lost: false,
        stats_waiting: Vec::new(),
    };
    for filter in filters {
        let now = task.now();
        let wall = task.wall(now);
        task.router.handle(wall, Input::KeepHistory(filter), &mut task.out);
    }
    // The broker as a client of itself: it advertises its reports and, with a federation
    // view, subscribes to everyone's.
    let mut report_timer = (reports.interval_ms > 0).then(|| {
        let mut timer = tokio::time::interval(std::time::Duration::from_millis(reports.interval_ms));
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        timer
    });
    if report_timer.is_some() {
        task.as_broker(Message::Advertise(monitor::advertisement()));
    }
    if reports.view {
        task.as_broker(Message::Subscribe(monitor::subscription()));
    }
    'run: loop {
        // What the last round gave the detectors, in one batch; waits while the thread is
        // behind.
        task.send_detection().await;
        if !task.stats_waiting.is_empty() {
            task.answer_stats().await;
        }
        // The policy's timers run on the task's clock, the router's (composite windows,
        // history queries) on the wall clock.
        let router_timer = task.router.poll_timeout().map(|at| {
            let now = task.now();
            now.saturating_add(at.saturating_sub(task.wall(now)))
        });
        // The detection thread's timers, run by the next batch (see `send_detection`).
        let detection_timer = task.detection_due().map(|at| {
            let now = task.now();
            now.saturating_add(at.saturating_sub(task.wall(now)))
        });
        let timer = [task.policy.poll_timeout(), task.sessions.poll_timeout(), router_timer, detection_timer]
            .into_iter()
            .flatten()
            .min();
        let deadline = timer.map(|ms| task.start + std::time::Duration::from_millis(ms));
        tokio::select! {
            event = inbox.recv() => {
                let now = task.now();
                let mut next = event;
                let mut handled = 0;
                loop {
                    match next {
                        None | Some(Event::Shutdown) => break 'run,
                        Some(event) => task.handle(now, event),
                    }
                    handled += 1;
                    if handled == EVENT_BATCH {
                        break;
                    }
                    match inbox.try_recv() {
                        Ok(event) => next = Some(event),
                        Err(_) => break,
                    }
                }
                task.dispatch(now);
            }
            () = sleep_until(deadline), if deadline.is_some() => {
                let now = task.now();
                task.report_backlogs(now);
                task.policy.handle_timeout(now);
                task.sessions.handle_timeout(now);
                task.apply_session_steps(now);
                let wall = task.wall(now);
                task.router.handle_timeout(wall, &mut task.out);
                task.apply_link_actions(now);
                task.dispatch(now);
            }
            Some((query, result)) = answered.recv() => {
                let now = task.now();
                let wall = task.wall(now);
                task.router.handle(wall, Input::HistoryAnswer { query, result }, &mut task.out);
                task.dispatch(now);
            }
            Some(given) = recv_detected(&mut detected), if detected.is_some() => {
                let now = task.now();
                task.detected(given);
                task.dispatch(now);
            }
            Some((client, frame)) = stored.recv() => {
                let now = task.now();
                task.send_client(now, client, frame, 0);
                task.dispatch(now);
            }
            _ = client_tick.tick(), if task.client_sessions.any() => {
                let now = task.now();
                let (acks, expired) = task.client_sessions.tick(now);
                for (client, ack) in acks {
                    if let Some(handle) = task.clients.get(&client) {
                        let _ = handle.queue.send((ack, 0));
                    }
                }
                for client in expired {
                    task.forget_client(now, client);
                }
                task.dispatch(now);
            }
            Some(_) = task.tasks.join_next(), if !task.tasks.is_empty() => {}
            _ = tick(&mut report_timer), if report_timer.is_some() => {
                let now = task.now();
                let sent = |peer: &Name| task.link_counters.get(peer).map_or(0, |c| c.messages_out);
                let report = monitor::report(&task.stats(now), task.reports.interval_ms, &task.history_filters, sent);
                // A publication is not delivered back to the client that published it:
                // this broker's own report goes into its view directly.
                if task.reports.view {
                    let wall = task.wall(now);
                    task.federation.receive(wall, &report);
                }
                task.as_broker(Message::Publish(report));
                task.dispatch(now);
            }
        }
    }
    // What the detectors were given last, and the matches it completes, go out before the
    // clients are told goodbye.
    task.stop_detection(detected).await;
    task.shut_down();
    let mut tasks = std::mem::take(&mut task.tasks);
    drop(task);
    // Keep taking events (and dropping them, with any handle they carry) while links
    // write what they hold: a task blocked sending to this one must not stall shutdown.
    let drain = async {
        loop {
            tokio::select! {
                event = inbox.recv() => if event.is_none() { break },
                joined = tasks.join_next() => if joined.is_none() { break },
            }
        }
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, drain).await.is_err() {
        tasks.abort_all();
    }
}

/// The detection thread's next outputs (never, without one).
async fn recv_detected(detected: &mut Option<mpsc::UnboundedReceiver<Detected>>) -> Option<Detected> {
    match detected {
        Some(detected) => detected.recv().await,
        None => std::future::pending().await,
    }
}

/// Random bits for the link sessions' ids (a restarted broker's differ from its last
/// run's), from the OS.
fn random_seed() -> u64 {
    crate::auth::secret_u64()
}

async fn tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(timer) => {
            timer.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// `traffic`, locked: poisoned only if a link's writer panicked while counting, and the
/// counts are still counts.
fn lock(traffic: &Mutex<Traffic>) -> MutexGuard<'_, Traffic> {
    traffic.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A rough size of a notification on the wire, for the slow-client limit.
fn estimated_size(subs: usize, publication: &Publication) -> usize {
    16 + 16 * subs + publication.estimated_size()
}

/// Most denials logged in a second.
const DENIALS_LOGGED: u32 = 10;

/// Logs requests denied for want of a right, with the principal the message names, at
/// most [`DENIALS_LOGGED`] a second: a client that keeps publishing what it may not would
/// otherwise flood the log (every denial is counted all the same, `permission_denials`).
#[derive(Debug, Default)]
struct DenialLog {
    /// The second (of the router's clock) being counted.
    second: u64,
    logged: u32,
    skipped: u64,
}

impl DenialLog {
    fn warn(&mut self, now: u64, client: ClientId, message: &str) {
        let second = now / 1000;
        if second != self.second {
            if self.skipped > 0 {
                tracing::warn!(
                    skipped = self.skipped,
                    "more requests were denied than are logged (at most {DENIALS_LOGGED} a second)"
                );
            }
            *self = Self { second, logged: 0, skipped: 0 };
        }
        if self.logged < DENIALS_LOGGED {
            self.logged += 1;
            tracing::warn!(client, %message, "request denied");
        } else {
            self.skipped += 1;
        }
    }
}

impl RouterTask {
    /// Milliseconds since the task started: the router's and the policy's clock.
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The router's clock (milliseconds since the Unix epoch) at task time `now`: the later
    /// of the system clock and `epoch + now`, and never earlier than it was last read. Never
    /// behind the system clock, so a publication stamped here is not older than a client's
    /// `now` taken before it was sent (rounding `epoch` and `now` down to milliseconds, or the
    /// monotonic clock running slower than the system clock, would make it up to a few
    /// milliseconds older); never going back, so stamps and composite windows stay ordered
    /// when the system clock is stepped back.
    fn wall(&mut self, now: u64) -> u64 {
        let system = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.last_wall = self.last_wall.max(system).max(self.epoch.saturating_add(now));
        self.last_wall
    }

    fn handle(&mut self, now: u64, event: Event) {
        match event {
            Event::Connected(id, handle) => {
                self.client_sessions.connected(id);
                let rights = handle.rights.clone();
                self.clients.insert(id, handle);
                let wall = self.wall(now);
                self.router.handle(wall, Input::ClientRights { client: id, rights }, &mut self.out);
            }
            Event::ClientResume { conn, handle, session, received } => {
                // A session is resumed only by its own principal: naming another's id
                // starts a new session instead of taking that one over.
                let session = match self.client_sessions.owner(session) {
                    Some(owner)
                        if self.router.principal(owner).is_some_and(|p| p != handle.rights.principal) =>
                    {
                        tracing::warn!(conn, principal = %handle.rights.principal, "a client named another principal's session; starting a new one");
                        0
                    }
                    _ => session,
                };
                let rights = handle.rights.clone();
                match self.client_sessions.resume(conn, session, received) {
                    Resumed::Resumed { client, old, frames } => {
                        tracing::info!(client, session, resent = frames.len() - 1, "client session resumed");
                        if let Some(old) = old.and_then(|_| self.clients.remove(&client))
                            && let Some(connection) = &old.connection
                        {
                            connection.close(CloseCode::Done.to_quic().into(), b"the client connected again");
                        }
                        for frame in frames {
                            let _ = handle.queue.send((frame, 0));
                        }
                        self.clients.insert(client, handle);
                    }
                    Resumed::Fresh { frame, ended } => {
                        if let Some(ended) = ended {
                            self.forget_client(now, ended);
                        }
                        let _ = handle.queue.send((frame, 0));
                        self.clients.insert(conn, handle);
                        let input = Input::ClientRights { client: conn, rights };
                        let wall = self.wall(now);
                        self.router.handle(wall, input, &mut self.out);
                    }
                }
            }
            Event::Refused { conn, req, code, message, counted } => {
                let Some(client) = self.client_sessions.client_of(conn) else { return };
                if counted {
                    self.passed(client);
                }
                self.send_client(now, client, Frame::Error { req, code, message }, 0);
            }
            Event::ClientAck(conn, received) => {
                if let Some(client) = self.client_sessions.client_of(conn) {
                    self.client_sessions.acked(client, received);
                }
            }
            Event::Lost(conn) => match self.client_sessions.lost(now, conn) {
                Left::Stale => {}
                Left::Detached(client) => {
                    tracing::info!(client, "client connection lost; its session waits for it");
                    self.clients.remove(&client);
                }
                Left::Gone(client) => {
                    self.clients.remove(&client);
                    let wall = self.wall(now);
                    self.router.handle(wall, Input::ClientGone(client), &mut self.out);
                }
            },
            Event::Request(conn, req, message) => {
                let Some(client) = self.client_sessions.client_of(conn) else { return };
                self.passed(client);
                self.counters.client_requests += 1;
                if let Message::Publish(publication) = &message {
                    self.counters.publications_in += 1;
                    self.counters.publications_by_class.add(publication.class(), 0);
                }
                let wall = self.wall(now);
                self.router.handle(wall, Input::Client { client, req, message }, &mut self.out);
            }
            Event::Query(conn, req, query) => {
                let Some(client) = self.client_sessions.client_of(conn) else { return };
                self.passed(client);
                let frame = match query {
                    // Answered once the detection thread has applied what came before.
                    Query::Stats if self.detection.is_some() => {
                        return self.stats_waiting.push((client, req));
                    }
                    Query::Stats => Frame::Report { req, report: Report::Stats(Box::new(self.stats(now))) },
                    Query::Routes { limit, offset, filter } => {
                        match self.router.rights(client).map_or(Ok(()), Rights::may_read_routes) {
                            Ok(()) => Frame::Report {
                                req,
                                report: Report::Routes(routes(&self.router, limit, offset, filter)),
                            },
                            Err(message) => {
                                self.router.count_denial();
                                self.denial_log.warn(now, client, &message);
                                Frame::Error { req: Some(req), code: ErrorCode::Forbidden, message }
                            }
                        }
                    }
                    Query::DropLink { .. } if !self.allow_drop_link => Frame::Error {
                        req: Some(req),
                        code: ErrorCode::Forbidden,
                        message:
                            "this broker does not let clients drop links: start it with --allow-drop-link \
                                  (allow_drop_link = true) to inject faults"
                                .to_owned(),
                    },
                    Query::DropLink { peer, down_ms } => Frame::Report {
                        req,
                        report: Report::LinkDropped(self.drop_link(now, &peer, down_ms)),
                    },
                };
                self.send_client(now, client, frame, 0);
            }
            // The asker may have gone (a closed HTTP connection): the answer is dropped.
            Event::Inspect(Inspect::Snapshot(reply)) => {
                let _ = reply.send(self.snapshot(now));
            }
            Event::Inspect(Inspect::Routes { limit, offset, filter, reply }) => {
                let _ = reply.send(routes(&self.router, limit, offset, filter));
            }
            Event::Inspect(Inspect::Detectors { limit, offset, reply }) => {
                let view = detectors(&self.router, limit, offset, self.detection.as_ref());
                let _ = reply.send(view);
            }
            Event::Inspect(Inspect::History(reply)) => {
                let _ = reply.send(self.history_view());
            }
            Event::Inspect(Inspect::Federation(reply)) => {
                let wall = self.wall(now);
                let _ = reply.send(self.federation.view(wall));
            }
            Event::Gone(conn) => {
                if let Left::Gone(client) = self.client_sessions.finished(conn) {
                    self.clients.remove(&client);
                    let wall = self.wall(now);
                    self.router.handle(wall, Input::ClientGone(client), &mut self.out);
                }
            }
            Event::LinkUp(handle) => {
                // What earlier events produced goes out on the links as they were.
                self.dispatch(now);
                let (peer, link, target) = (handle.peer.clone(), handle.id, handle.target);
                tracing::info!(%peer, link, dialled = target.is_some(), "neighbour link up");
                self.link_counters.entry(peer.clone()).or_default();
                self.links.insert(link, handle);
                self.policy.handle_link_up(now, peer, link, target);
                self.apply_link_actions(now);
            }
            Event::FromBroker { link, seq, message } => {
                // The session decides: a message from a link of its own, next in number,
                // goes to the router; one received before (sent again over a returning
                // link), or from a link of an ended session, does not.
                let Some(peer) = self.peer_of(link) else { return };
                let received = self.sessions.receive(now, &peer, link, seq);
                self.apply_session_steps(now);
                if received != Received::Pass {
                    return;
                }
                self.counters.broker_messages_in += 1;
                if let Some(counters) = self.link_counters.get_mut(&peer) {
                    counters.messages_in += 1;
                }
                tracing::trace!(%peer, ?message, "from neighbour");
                let wall = self.wall(now);
                self.router.handle(wall, Input::Broker { from: peer, message }, &mut self.out);
            }
            Event::Resume { link, session, received, fresh } => {
                let Some(peer) = self.peer_of(link) else { return };
                // What earlier events produced goes into the session it was produced for,
                // before this exchange may end that session and start another.
                self.dispatch(now);
                self.sessions.resume(now, &peer, link, session, received, fresh);
                self.apply_session_steps(now);
            }
            Event::Ack { link, received } => {
                let Some(peer) = self.peer_of(link) else { return };
                self.sessions.acked(&peer, link, received);
            }
            Event::LinkDown { link, code } => {
                self.dispatch(now);
                if let Some(handle) = self.links.remove(&link) {
                    tracing::info!(peer = %handle.peer, link, ?code, "neighbour link down");
                    self.retire_link(&handle);
                    self.policy.handle_link_down(now, &handle.peer, link, handle.target, code);
                    self.apply_link_actions(now);
                }
            }
            Event::DialFailed(target) => {
                self.policy.handle_dial_failed(now, target);
                self.apply_link_actions(now);
            }
            Event::LinkRefused => self.counters.links_refused += 1,
            Event::ClientRefused => self.counters.clients_refused += 1,
            Event::Shutdown => {}
        }
    }

    /// Carries out what the link policy decided.
    fn apply_link_actions(&mut self, now: u64) {
        while let Some(action) = self.policy.poll_action() {
            match action {
                Action::Dial(target) => {
                    let dial = self.dialer.clone().dial(target, self.events.clone());
                    self.tasks.spawn(dial);
                }
                Action::Close { peer, link, code } => {
                    let Some(handle) = self.links.remove(&link) else { continue };
                    tracing::info!(%peer, link, ?code, "closing neighbour link");
                    self.retire_link(&handle);
                    if code == CloseCode::TooSlow {
                        self.counters.links_cut += 1;
                        // Its queue will not drain: close at once.
                        handle.connection.close(code.to_quic().into(), b"link too slow");
                    } else {
                        let reason = format!("{code:?}");
                        let _ = handle.queue.send(Frame::Bye { code, reason });
                    }
                    self.policy.handle_link_down(now, &peer, link, handle.target, code);
                }
                Action::NeighbourUp(peer) => {
                    if let Some(link) = self.policy.link_to(&peer) {
                        self.sessions.attach(now, &peer, link);
                        self.apply_session_steps(now);
                    }
                }
                Action::NeighbourDown { peer, code } => {
                    // A neighbour shutting down comes back, if at all, as a new broker; a
                    // link too slow to keep up would fall behind again.
                    let end = matches!(code, CloseCode::ShuttingDown | CloseCode::TooSlow);
                    self.sessions.detach(now, &peer, end);
                    self.apply_session_steps(now);
                }
            }
        }
    }

    /// Carries out what the link sessions decided.
    fn apply_session_steps(&mut self, now: u64) {
        while let Some(step) = self.sessions.poll_step() {
            match step {
                Step::Send { link, frame } => {
                    if let Some(handle) = self.links.get(&link) {
                        handle.write(frame);
                    }
                }
                Step::NeighbourUp(peer) => {
                    tracing::info!(%peer, "neighbour up: a new link session");
                    let wall = self.wall(now);
                    self.router.handle(wall, Input::NeighbourUp(peer), &mut self.out);
                }
                Step::NeighbourDown(peer) => {
                    tracing::info!(%peer, "neighbour down: its link session ended");
                    let wall = self.wall(now);
                    self.router.handle(wall, Input::NeighbourDown(peer), &mut self.out);
                }
                Step::NeighbourRestarted { peer, kept } => {
                    let kept: Vec<_> = kept
                        .into_iter()
                        .filter_map(|m| match m {
                            BrokerMessage::Publish { publication, stamp } => Some((publication, stamp)),
                            _ => None,
                        })
                        .collect();
                    tracing::info!(%peer, kept = kept.len(), "neighbour restarted: a new link session; re-synchronising before its publications go");
                    let wall = self.wall(now);
                    self.router.handle(wall, Input::NeighbourRestarted { name: peer, kept }, &mut self.out);
                }
                Step::Cut { peer, code } => {
                    self.policy.close(now, &peer, code);
                    self.apply_link_actions(now);
                }
            }
        }
    }

    /// Closes the link to `peer` at once, as a network fault would (what is queued on it
    /// is not written), and keeps it down for `down_ms` (at most [`MAX_DROP_MS`]; 0 lifts
    /// an earlier pause); true if a link was up.
    fn drop_link(&mut self, now: u64, peer: &Name, down_ms: u32) -> bool {
        let down_ms = u64::from(down_ms).min(MAX_DROP_MS);
        if let Some(handle) = self.policy.link_to(peer).and_then(|id| self.links.get(&id)) {
            tracing::info!(%peer, down_ms, "dropping the neighbour link, as asked");
            handle.connection.close(CloseCode::Done.to_quic().into(), b"link dropped by an operator");
        }
        let up = self.policy.pause(now, peer, now.saturating_add(down_ms), CloseCode::Done);
        self.apply_link_actions(now);
        up
    }

    /// Tells the policy how many frames wait on each link in use.
    fn report_backlogs(&mut self, now: u64) {
        for handle in self.links.values() {
            if self.policy.link_to(&handle.peer) == Some(handle.id) {
                self.policy.handle_backlog(now, &handle.peer, handle.queued.load(Ordering::Relaxed));
            }
        }
    }

    fn history_view(&self) -> HistoryView {
        let broker = Some(self.router.name().clone());
        let Some(history) = &self.history else { return HistoryView { broker, ..HistoryView::default() } };
        let options = history.options();
        let stats = history.stats();
        HistoryView {
            broker,
            enabled: true,
            path: Some(history.path().display().to_string()),
            filters: self.history_filters.clone(),
            durability: Some(options.durability),
            indexed: options.indexed.clone(),
            max_age_ms: options.max_age_ms,
            max_rows: options.max_rows,
            max_bytes: options.max_bytes,
            rows: stats.rows,
            stored: stats.stored,
            dropped: stats.dropped,
            failed: stats.failed,
            removed: stats.removed,
            queued: stats.queued,
            queries: self.counters.history_queries,
        }
    }

    /// When the detection thread's timers are due and no batch sent since runs them.
    fn detection_due(&self) -> Option<u64> {
        self.detection.as_ref()?.due().filter(|&at| at > self.detect_until)
    }

    /// Sends the detector ops handed out since the last call to the detection thread, as
    /// one batch; an empty one if its timers are due (a batch runs them up to its time).
    async fn send_detection(&mut self) {
        // Nothing to send (always so without a thread): no clock read either.
        let due = self.detection_due();
        if self.detect_batch.is_empty() && due.is_none() {
            return;
        }
        let now = self.now();
        let wall = self.wall(now);
        if self.detect_batch.is_empty() && due.is_some_and(|at| at > wall) {
            return;
        }
        let batch = Batch { ops: std::mem::take(&mut self.detect_batch), until: wall };
        self.detect_until = wall;
        let sent = match &self.detection {
            Some(thread) => thread.send(batch).await,
            None => false,
        };
        if !sent && !self.detection_lost {
            self.detection_lost = true;
            tracing::error!(
                "the composite detection thread has stopped: composite subscriptions are not detected here"
            );
        }
    }

    /// Answers the stats requests that waited for the detection thread to apply every
    /// batch sent before them (the last round's was just sent), so that a client's stats
    /// count what its earlier requests gave the detectors.
    async fn answer_stats(&mut self) {
        if let Some(thread) = &self.detection {
            thread.caught_up().await;
        }
        let now = self.now();
        for (client, req) in std::mem::take(&mut self.stats_waiting) {
            let frame = Frame::Report { req, report: Report::Stats(Box::new(self.stats(now))) };
            self.send_client(now, client, frame, 0);
        }
        self.dispatch(now);
    }

    /// What the detection thread gave back: its outputs, to hand out (those still
    /// deliverable: [`Router::keep_deliverable`]), and the publications it let go of,
    /// dropped here (`net::detection`, "Memory").
    fn detected(&mut self, given: Detected) {
        let Detected { mut outputs, released } = given;
        self.router.keep_deliverable(&mut outputs);
        self.out.append(&mut outputs);
        drop(released);
    }

    /// Sends the detection thread what it was last given, lets it finish, and takes the
    /// outputs it made.
    async fn stop_detection(&mut self, detected: Option<mpsc::UnboundedReceiver<Detected>>) {
        let now = self.now();
        self.dispatch(now);
        self.send_detection().await;
        let Some(thread) = self.detection.take() else { return };
        // Joining waits for the thread: not on one of the runtime's workers.
        let _ = tokio::task::spawn_blocking(move || drop(thread.stop())).await;
        if let Some(mut detected) = detected {
            while let Ok(given) = detected.try_recv() {
                self.detected(given);
            }
        }
    }

    /// The composite detectors' counters, the composite subscriptions held, and the
    /// detectors running, wherever detection runs.
    fn composite_counters(&self) -> (crate::detector::Counters, usize, usize) {
        let (counters, composites, detectors) = self.router.composite_counters();
        match &self.detection {
            Some(thread) => thread.with(|d| (d.counters(), composites, d.len())),
            None => (counters, composites, detectors),
        }
    }

    fn stats(&self, now: u64) -> BrokerStats {
        let (advertisements, subscriptions) = self.router.table_sizes();
        let (detected, composites, detectors) = self.composite_counters();
        let neighbours: Vec<Name> = self.policy.neighbours().cloned().collect();
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let counters = &self.counters;
        let history = self.history.as_ref().map(History::stats).unwrap_or_default();
        let sessions = self.sessions.counters();
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
            links_refused: counters.links_refused,
            links_cut: counters.links_cut,
            composites: count(composites),
            detectors: count(detectors),
            partial_matches: detected.stored,
            partial_match_bytes: detected.stored_bytes,
            partial_match_bytes_cap: self.router.detector_bounds().max_bytes,
            composite_matches: detected.matches,
            partials_evicted: detected.evicted,
            partials_expired: detected.expired,
            partials_ended: detected.ended,
            pairs_dropped: detected.pairs_dropped,
            history_stored: history.stored,
            history_dropped: history.dropped,
            history_failed: history.failed,
            history_removed: history.removed,
            history_queued: history.queued,
            history_rows: history.rows,
            link_sessions_resumed: sessions.resumed,
            link_messages_resent: sessions.resent,
            link_duplicates_dropped: sessions.duplicates,
            link_sessions_expired: sessions.expired,
            client_sessions_resumed: self.client_sessions.resumed,
            client_frames_resent: self.client_sessions.resent,
            client_sessions_expired: self.client_sessions.expired,
            link_traffic: self.link_traffic(),
            clients_refused: counters.clients_refused,
            permission_denials: self.router.denials(),
            neighbour_restarts: self.router.replays().restarts,
            restart_publications_sent: self.router.replays().sent,
            restart_duplicates_dropped: self.router.replays().duplicates,
            settle_timeouts: self.router.settle_timeouts(),
        }
    }

    /// The neighbour at the other end of `link`, while it is in `links`.
    fn peer_of(&self, link: LinkId) -> Option<Name> {
        self.links.get(&link).map(|l| l.peer.clone())
    }

    /// A link leaves `links`: what its connection carried so far stays in its neighbour's
    /// byte counters (which must never go down).
    /// Its session no longer takes messages from it either.
    fn retire_link(&mut self, handle: &LinkHandle) {
        self.sessions.link_closed(&handle.peer, handle.id);
        let udp = handle.connection.stats();
        let counters = self.link_counters.entry(handle.peer.clone()).or_default();
        counters.closed_bytes_in += udp.udp_rx.bytes;
        counters.closed_bytes_out += udp.udp_tx.bytes;
        counters.closed_traffic.merge(&lock(&handle.traffic));
    }

    /// What was sent to each neighbour ever linked, per class, over every connection.
    fn link_traffic(&self) -> Vec<LinkTraffic> {
        let mut rows = Vec::new();
        for (peer, counters) in &self.link_counters {
            let mut traffic = counters.closed_traffic.clone();
            for handle in self.links.values().filter(|h| h.peer == *peer) {
                traffic.merge(&lock(&handle.traffic));
            }
            rows.extend(traffic.rows(peer));
        }
        rows
    }

    /// Hands `message` to the router as the broker's own client ([`BROKER_CLIENT`]).
    fn as_broker(&mut self, message: Message) {
        let now = self.now();
        let wall = self.wall(now);
        self.router.handle(wall, Input::Client { client: BROKER_CLIENT, req: None, message }, &mut self.out);
    }

    /// The counters and per-link figures `/metrics` shows, as of now.
    fn snapshot(&self, now: u64) -> Snapshot {
        let links = self
            .link_counters
            .iter()
            .map(|(peer, counters)| {
                let mut link = LinkSnapshot {
                    peer: peer.clone(),
                    up: self.policy.link_to(peer).is_some_and(|id| self.links.contains_key(&id)),
                    messages_in: counters.messages_in,
                    messages_out: counters.messages_out,
                    bytes_in: counters.closed_bytes_in,
                    bytes_out: counters.closed_bytes_out,
                    queued_frames: 0,
                };
                // Every connection to it still in `links` (two while a duplicate is resolved).
                for handle in self.links.values().filter(|h| h.peer == *peer) {
                    let udp = handle.connection.stats();
                    link.bytes_in += udp.udp_rx.bytes;
                    link.bytes_out += udp.udp_tx.bytes;
                    link.queued_frames +=
                        u64::try_from(handle.queued.load(Ordering::Relaxed)).unwrap_or(u64::MAX);
                }
                link
            })
            .collect();
        let client_queued_bytes = self
            .clients
            .values()
            .map(|c| u64::try_from(c.queued.load(Ordering::Relaxed)).unwrap_or(u64::MAX))
            .sum();
        Snapshot {
            stats: self.stats(now),
            links,
            client_queued_bytes,
            history_queries: self.counters.history_queries,
            publications_by_class: self
                .counters
                .publications_by_class
                .classes()
                .map(|(class, count)| (class.to_owned(), count.messages))
                .collect(),
        }
    }

    /// Hands every output to its client or link; cuts off clients that fell too far
    /// behind and links the policy finds stuck (which may produce more outputs:
    /// withdrawals for the neighbours).
    fn dispatch(&mut self, now: u64) {
        while !self.out.is_empty() || !self.slow.is_empty() {
            for output in std::mem::take(&mut self.out) {
                let (client, frame, size) = match output {
                    Output::Notify { client: BROKER_CLIENT, publication, .. } => {
                        let wall = self.wall(now);
                        self.federation.receive(wall, &publication);
                        continue;
                    }
                    Output::Reply { client: BROKER_CLIENT, result: Err((code, message)), .. } => {
                        tracing::warn!(?code, %message, "the broker's own report or view was refused");
                        continue;
                    }
                    Output::Reply { client, req, result } => (
                        client,
                        match (req, result) {
                            (Some(req), Ok(id)) => Frame::Ok { req, id },
                            (req, Err((code, message))) => {
                                // Denials name the principal and the right or limit (a limit
                                // can be met at every publication: not a warning).
                                match code {
                                    ErrorCode::Forbidden => self.denial_log.warn(now, client, &message),
                                    ErrorCode::LimitExceeded => {
                                        tracing::debug!(client, %message, "request refused");
                                    }
                                    _ => {}
                                }
                                Frame::Error { req, code, message }
                            }
                            // A streamed publication's success is not answered.
                            (None, Ok(_)) => continue,
                        },
                        0,
                    ),
                    Output::Notify { client, subs, publication, historic } => {
                        self.counters.notifications_out += 1;
                        // A historic answer comes all at once, up to max_results of it: it
                        // is held in memory already, and the client is given time to read
                        // it (what follows live counts as usual).
                        let size = if historic { 0 } else { estimated_size(subs.len(), &publication) };
                        (client, Frame::Notification { subs, publication }, size)
                    }
                    Output::Store { stamp, publication, ack } => {
                        match self.store(Record { stamp, publication }, ack) {
                            Some((client, frame)) => (client, frame, 0),
                            None => continue,
                        }
                    }
                    Output::HistoryQuery { query, sub, limit } => {
                        self.history_query(now, query, sub, limit);
                        continue;
                    }
                    Output::EndOfHistory { client, sub, count, missing, truncated } => {
                        (client, Frame::EndOfHistory { sub, count, missing, truncated }, 0)
                    }
                    Output::CompositeNotify { client, sub, pubs } => {
                        self.counters.notifications_out += 1;
                        let size = pubs.iter().map(|(_, p)| estimated_size(1, p)).sum();
                        (client, Frame::CompositeNotification { sub, pubs }, size)
                    }
                    Output::Detect { now, op } => {
                        self.detect_batch.push((now, op));
                        continue;
                    }
                    Output::ToBroker { to, message } => {
                        self.counters.broker_messages_out += 1;
                        tracing::trace!(%to, ?message, "to neighbour");
                        // Numbered and kept in the session's outbox until acknowledged;
                        // written now if its link is up, or sent when it returns.
                        let sent = self.sessions.send(&to, message);
                        let link = sent.and_then(|(id, frame)| Some((self.links.get(&id)?, frame)));
                        if let Some((link, frame)) = link
                            && link.write(frame)
                            && let Some(counters) = self.link_counters.get_mut(&to)
                        {
                            counters.messages_out += 1;
                        }
                        continue;
                    }
                };
                self.send_client(now, client, frame, size);
            }
            let mut slow = std::mem::take(&mut self.slow);
            slow.sort_unstable();
            slow.dedup();
            for client in slow {
                // A client that does not keep up is cut off rather than slowing everyone. One
                // whose connection went meanwhile is not here to cut: its session (if any)
                // waits for it, or it is gone already.
                let Some(handle) = self.clients.remove(&client) else { continue };
                self.client_sessions.end(client);
                self.counters.slow_clients_dropped += 1;
                tracing::warn!(client, "client too slow, disconnecting");
                let reason = format!(
                    "too slow: more than {} bytes of notifications waited for this client \
                     (limits.max_queued_bytes_per_client)",
                    self.limits.max_queued
                );
                if let Some(connection) = &handle.connection {
                    connection.close(CloseCode::TooSlow.to_quic().into(), reason.as_bytes());
                }
                let wall = self.wall(now);
                self.router.handle(wall, Input::ClientGone(client), &mut self.out);
            }
            self.apply_session_steps(now);
            self.report_backlogs(now);
            self.apply_link_actions(now);
        }
    }

    /// Queues `frame` for `client` (numbered and kept if it has a session; written now if
    /// it is connected). A client over its queue limit is noted as too slow, cut off at the
    /// end of [`RouterTask::dispatch`].
    fn send_client(&mut self, now: u64, client: ClientId, frame: Frame, size: usize) {
        match self.client_sessions.queue(client, &frame, size, self.limits.max_queued) {
            Queued::Write => {}
            Queued::Wait => return,
            Queued::Slow => {
                self.slow.push(client);
                return;
            }
            Queued::Ended => {
                self.forget_client(now, client);
                return;
            }
        }
        if let Some(handle) = self.clients.get(&client) {
            let queued = handle.queued.fetch_add(size, Ordering::Relaxed) + size;
            if queued > self.limits.max_queued {
                self.slow.push(client);
            } else {
                // A connection task that is gone has sent, or is sending, `Lost` or `Gone`,
                // which settles the client; a session client's copy waits in its outbox.
                let _ = handle.queue.send((frame, size));
            }
        }
    }

    /// A frame from `client` was passed on: its acknowledgement goes now if one is due.
    fn passed(&mut self, client: ClientId) {
        if let Some(ack) = self.client_sessions.passed(client)
            && let Some(handle) = self.clients.get(&client)
        {
            let _ = handle.queue.send((ack, 0));
        }
    }

    /// Forgets `client`, whose session ended while it was away.
    fn forget_client(&mut self, now: u64, client: ClientId) {
        self.client_sessions.end(client);
        self.clients.remove(&client);
        let wall = self.wall(now);
        self.router.handle(wall, Input::ClientGone(client), &mut self.out);
    }

    /// Hands `record` to the history writer. With `full` durability a waiting publisher
    /// (`ack`) is answered by the writer once the record is on disk; otherwise the answer
    /// is returned, to be sent now (queued: success). A record the writer's queue has no
    /// room for is dropped, counted and logged (at most once a second); a publisher waiting
    /// on it gets an error saying it was routed but not stored.
    fn store(&mut self, record: Record, ack: Option<(ClientId, u64)>) -> Option<(ClientId, Frame)> {
        let ok = |(client, req): (ClientId, u64)| (client, Frame::Ok { req, id: None });
        let Some(history) = &self.history else { return ack.map(ok) };
        let (waiting, answer_now) = match (history.durability(), ack) {
            (Durability::Full, Some((client, req))) => {
                let queue = self.store_acks.clone();
                let ack: Option<Ack> = Some(Box::new(move |result: Result<(), String>| {
                    let frame = match result {
                        Ok(()) => Frame::Ok { req, id: None },
                        Err(why) => Frame::Error {
                            req: Some(req),
                            code: ErrorCode::Internal,
                            message: format!("routed, but the history store could not keep it: {why}"),
                        },
                    };
                    let _ = queue.send((client, frame));
                }));
                (ack, None)
            }
            (_, ack) => (None, ack),
        };
        let full = "its queue is full (history_store.queue); publish more slowly or raise it";
        if let Err(refused) = history.offer(record, waiting) {
            if let Some(ack) = refused {
                ack(Err(full.to_owned()));
            }
            self.history_drops_unlogged += 1;
            if self.history_drops_logged.is_none_or(|at| at.elapsed().as_secs() >= 1) {
                tracing::warn!(
                    dropped = self.history_drops_unlogged,
                    "history store: the writer's queue is full; publications were routed but not stored"
                );
                self.history_drops_logged = Some(Instant::now());
                self.history_drops_unlogged = 0;
            }
            return answer_now.map(|(client, req)| {
                let message = format!("routed, but the history store could not keep it: {full}");
                (client, Frame::Error { req: Some(req), code: ErrorCode::Internal, message })
            });
        }
        answer_now.map(ok)
    }

    /// Hands a historic query to the history writer, whose answer comes back as an event.
    fn history_query(&mut self, now: u64, query: MessageId, sub: Arc<Subscription>, limit: u64) {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        match &self.history {
            Some(history) => {
                self.counters.history_queries += 1;
                let answers = self.answers.clone();
                // From the writer thread, or at once here if its queue is full: never waits.
                // After shutdown nobody reads it, and the answer is dropped.
                history.query(sub, limit, Box::new(move |result| drop(answers.send((query, result)))));
            }
            None => {
                let result = Err("this broker has no history store".to_owned());
                let wall = self.wall(now);
                self.router.handle(wall, Input::HistoryAnswer { query, result }, &mut self.out);
            }
        }
    }

    /// Closes every link and says goodbye to every client; their tasks then write what
    /// was queued and end.
    fn shut_down(&mut self) {
        let now = self.now();
        self.dispatch(now);
        // Dials still connecting give up; links already up are closed below.
        self.dialer.cancel();
        self.policy.shut_down();
        self.apply_link_actions(now);
        for (_, handle) in self.clients.drain() {
            let reason = "broker shutting down".to_owned();
            let _ = handle.queue.send((Frame::Bye { code: CloseCode::ShuttingDown, reason }, 0));
        }
        self.links.clear();
        self.out.clear();
    }
}

fn routes(router: &Router, limit: u32, offset: u32, mut filter: String) -> RoutesReport {
    let usize_of = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
    // A longer filter (from a client that did not check) is cut, and the report says so
    // by the filter it gives back.
    while filter.len() > padres_lang::wire::MAX_ROUTES_FILTER_BYTES {
        filter.pop();
    }
    let page = RoutesPage {
        offset: usize_of(offset),
        limit: usize_of(limit.min(MAX_ROUTES_LISTED)),
        filter: &filter,
    };
    let (advertisements, subscriptions) = router.table_sizes();
    let tables = router.routes_page(&page);
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
        composites_total: count(router.composite_counters().1),
        composites: tables
            .composites
            .into_iter()
            .map(|(id, text, from, to)| RouteEntry { id, text, from: from.to_string(), to })
            .collect(),
        offset: u64::from(offset),
        srt_matched: count(tables.matched[0]),
        prt_matched: count(tables.matched[1]),
        composites_matched: count(tables.matched[2]),
        filter,
    }
}

/// A page of `router`'s composite detectors, with their caps and totals.
/// What the detectors hold comes from `thread` when detection runs on its own (read
/// for the page's rows only, so that the thread waits as little as possible).
fn detectors(router: &Router, limit: u32, offset: u32, thread: Option<&DetectionThread>) -> DetectorsView {
    let usize_of = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let limit = usize_of(limit.min(MAX_ROUTES_LISTED));
    let (total, mut rows) = router.detectors_page(usize_of(offset), limit);
    let counters = match thread {
        Some(thread) => thread.with(|detection| {
            for row in &mut rows {
                row.detail = detection.detail(row.detector).unwrap_or_default();
            }
            detection.counters()
        }),
        None => router.composite_counters().0,
    };
    let bounds = router.detector_bounds();
    DetectorsView {
        broker: router.name().clone(),
        total: count(total),
        offset: u64::from(offset),
        bounds: BoundsView {
            per_detector: count(bounds.per_detector),
            per_broker: count(bounds.per_broker),
            max_bytes: bounds.max_bytes,
            pairs_per_input: count(bounds.pairs_per_input),
            lateness_ms: bounds.lateness_ms,
        },
        stored: counters.stored,
        stored_bytes: counters.stored_bytes,
        matches: counters.matches,
        evicted: counters.evicted,
        expired: counters.expired,
        ended: counters.ended,
        pairs_dropped: counters.pairs_dropped,
        detectors: rows
            .into_iter()
            .map(|row| DetectorView {
                detector: row.detector,
                pattern: row.pattern,
                subscribers: row
                    .subscribers
                    .into_iter()
                    .map(|(hop, id)| SubscriberView { from: hop.to_string(), id })
                    .collect(),
                subscriptions: count(row.subscriptions),
                parts: row.parts.into_iter().map(|(id, to, text)| PartView { id, to, text }).collect(),
                stored: row.detail.stored,
                stored_bytes: row.detail.stored_bytes,
                matches: row.detail.matches,
            })
            .collect(),
    }
}
