//! A deterministic overlay simulator: routers wired in memory, virtual time, FIFO links
//! with latency (and optional jitter), link failures, restarts. Everything happens in one
//! thread in a fixed order, so a run is a pure function of its inputs and seed. The
//! routing tests and the composite traffic benchmark run on it.
//!
//! To see what a run does, `SIM_TRACE=1` prints every message between brokers to stderr
//! as it is sent (virtual time, sender, receiver, message); [`Sim::digest_messages`]
//! keeps a digest of them instead, so a test can tell that a seed replays message for
//! message.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::router::{
    BrokerMessage, ClientId, Covering, Detection, DetectorOp, Input, Options, Output, Replays, Router, Routes,
};
use padres_lang::wire::ErrorCode;
use padres_lang::{Message, MessageId, Name, Publication, Stamped};

/// An end-of-history marker delivered to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndOfHistory {
    /// The client.
    pub client: ClientId,
    /// Its historic subscription.
    pub sub: MessageId,
    /// Stored publications delivered before it.
    pub count: u64,
    /// Stores that did not answer in time.
    pub missing: Vec<Name>,
    /// More were stored than one subscription is given.
    pub truncated: bool,
    /// When (virtual ms).
    pub time: u64,
}

/// A publication delivered to a client.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The client.
    pub client: ClientId,
    /// Its subscriptions that matched.
    pub subs: Vec<MessageId>,
    /// The publication.
    pub publication: Arc<Publication>,
    /// When (virtual ms).
    pub time: u64,
}

/// A composite match delivered to a client.
#[derive(Clone, Debug)]
pub struct CompositeDelivery {
    /// The client.
    pub client: ClientId,
    /// The composite subscription.
    pub sub: MessageId,
    /// The publications used, by leaf.
    pub pubs: Vec<(u32, Arc<Publication>)>,
    /// When (virtual ms).
    pub time: u64,
}

/// A request's answer.
pub type Reply = Result<Option<MessageId>, (ErrorCode, String)>;

/// What happens to broker `to` at the key's time.
#[derive(Debug)]
struct Event {
    to: usize,
    what: What,
}

#[derive(Debug)]
enum What {
    /// A message in flight, or a store's answer.
    Input(Input),
    /// Its detection stage, running behind its router ([`Sim::set_detection_delay`]),
    /// applies an op its router decided at this time.
    Detect(u64, DetectorOp),
    /// Its detection stage runs its timers up to this time, which no later op precedes
    /// (a broker's router task sends its detection thread an empty batch).
    Tick(u64),
}

/// What links keep unacknowledged ([`Sim::keep_unacked`]).
#[derive(Debug)]
struct Unacked {
    /// How long a publication stays unacknowledged (ms).
    ms: u64,
    /// Per directed link, what it sent in that time, with when, oldest first.
    sent: HashMap<(usize, usize), VecDeque<(u64, Stamped)>>,
}

/// The simulated federation.
#[derive(Debug)]
pub struct Sim {
    /// The brokers' routers, B1 first.
    pub routers: Vec<Router>,
    /// With [`Options::offload_detection`], each broker's detection stage, fed its
    /// router's [`Output::Detect`]s in order as they come out.
    detections: Vec<Option<Detection>>,
    names: Vec<Name>,
    /// Each broker's index by name (a scan of `names` per message grew with the brokers).
    index: HashMap<Name, usize>,
    /// Latency of each directed link that is up.
    links: HashMap<(usize, usize), u64>,
    /// Arrival time of the last message on each directed link (FIFO).
    last_arrival: HashMap<(usize, usize), u64>,
    queue: BTreeMap<(u64, u64), Event>,
    now: u64,
    seq: u64,
    clients: HashMap<ClientId, usize>,
    next_req: u64,
    /// Every answer, by client and request number.
    pub replies: HashMap<(ClientId, u64), Reply>,
    /// Every publication delivered to a client.
    pub deliveries: Vec<Delivery>,
    /// Every composite match delivered to a client.
    pub composite_deliveries: Vec<CompositeDelivery>,
    /// Every publication handed to a broker's history store: (broker, publication). The
    /// simulated store takes it at once, answering a publisher waiting on it, and answers
    /// queries from what it took (after `store_delay` ms).
    pub stored: Vec<(usize, Arc<Stamped>)>,
    /// End-of-history markers delivered to clients.
    pub ends: Vec<EndOfHistory>,
    /// How long a simulated store takes to answer a query; `None`: it never answers.
    pub store_delay: HashMap<usize, Option<u64>>,
    /// Extra delay of each message, up to this many ms (links stay FIFO).
    jitter: u64,
    rng: fastrand::Rng,
    trace: Trace,
    /// Messages sent on all links, by kind (`Publish`, `CompositeMatch`, …).
    pub kinds: BTreeMap<&'static str, u64>,
    /// Messages sent on each directed link, by kind: (subscription traffic, others).
    pub traffic: BTreeMap<(usize, usize), (u64, u64)>,
    options: Options,
    adv_messages: u64,
    restarts: u32,
    /// How long an offloaded detection stage takes to apply an op (virtual ms).
    detection_delay: u64,
    /// Per broker, whether a tick is on its way to its delayed detection stage.
    tick_pending: Vec<bool>,
    /// Each broker's next timer (its router's or its detection stage's) as last asked,
    /// and the same ordered by time: asking every router at every step grew with the
    /// brokers. Updated after every call into a broker;
    /// [`Sim::run`] asks every broker again first, for callers that handle a router
    /// directly.
    timers: Vec<Option<u64>>,
    due: std::collections::BTreeSet<(u64, usize)>,
    /// With [`Sim::keep_unacked`]: how long a publication sent on a link stays
    /// unacknowledged, and what each directed link sent in that time (send time, what).
    unacked: Option<Unacked>,
    /// Brokers crashed for good ([`Sim::crash`]): what reaches them is lost.
    dead: Vec<bool>,
    /// Wall-clock time spent inside the routers' `handle` and `handle_timeout`, and how
    /// many calls: what the routers cost, apart from the simulator's queue.
    router_time: (std::time::Duration, u64),
}

impl Sim {
    /// `n` brokers named B1..Bn with no links and covering off.
    pub fn new(n: usize) -> Self {
        Self::with_covering(n, Covering::Off)
    }

    /// `n` brokers named B1..Bn with no links, covering as given.
    pub fn with_covering(n: usize, covering: Covering) -> Self {
        Self::with_options(n, Options { covering, ..Options::default() })
    }

    /// `n` brokers named B1..Bn with no links, routing with `options`.
    pub fn with_options(n: usize, options: Options) -> Self {
        let names: Vec<Name> = (1..=n).map(|i| Name::new(&format!("B{i}")).expect("name")).collect();
        Self {
            routers: names.iter().cloned().map(|name| Router::with_options(name, options)).collect(),
            detections: names.iter().map(|_| offloaded(&options)).collect(),
            index: names.iter().cloned().enumerate().map(|(i, name)| (name, i)).collect(),
            names,
            links: HashMap::new(),
            last_arrival: HashMap::new(),
            queue: BTreeMap::new(),
            now: 0,
            seq: 0,
            clients: HashMap::new(),
            next_req: 0,
            replies: HashMap::new(),
            deliveries: Vec::new(),
            composite_deliveries: Vec::new(),
            stored: Vec::new(),
            ends: Vec::new(),
            store_delay: HashMap::new(),
            jitter: 0,
            rng: fastrand::Rng::with_seed(0),
            trace: Trace { print: std::env::var_os("SIM_TRACE").is_some(), digest: None },
            kinds: BTreeMap::new(),
            traffic: BTreeMap::new(),
            options,
            adv_messages: 0,
            restarts: 0,
            detection_delay: 0,
            tick_pending: vec![false; n],
            timers: vec![None; n],
            due: std::collections::BTreeSet::new(),
            unacked: None,
            dead: vec![false; n],
            router_time: (std::time::Duration::ZERO, 0),
        }
    }

    /// From now on, every link keeps the publications sent on it in the last `ms` (as a
    /// link session keeps them until the neighbour acknowledges them), for
    /// [`Sim::crash_and_rejoin`].
    pub fn keep_unacked(&mut self, ms: u64) {
        self.unacked = Some(Unacked { ms, sent: HashMap::new() });
    }

    /// Broker `broker` crashes and restarts with empty tables while its neighbours hold
    /// link sessions with it (`resume.rs`, needs [`Sim::keep_unacked`]): what is in flight
    /// to and from it is lost, its clients are gone, and when the links return each
    /// neighbour learns that it lost its session ([`Input::NeighbourRestarted`]) and is
    /// given the publications it sent it and had not had acknowledged.
    pub fn crash_and_rejoin(&mut self, broker: usize) {
        let mut peers: Vec<usize> =
            self.links.keys().filter(|(a, _)| *a == broker).map(|(_, b)| *b).collect();
        peers.sort_unstable();
        let name = self.names[broker].clone();
        let names = self.names.clone();
        self.queue.retain(|_, e| {
            let from_it = matches!(&e.what, What::Input(Input::Broker { from, .. }) if *from == name);
            let to_it = e.to == broker;
            !(from_it || to_it)
        });
        for &peer in &peers {
            self.last_arrival.remove(&(peer, broker));
            self.last_arrival.remove(&(broker, peer));
        }
        self.clients.retain(|_, b| *b != broker);
        self.tick_pending[broker] = false;
        self.restarts += 1;
        let options = Options { incarnation: self.restarts, ..self.options };
        self.routers[broker] = Router::with_options(name.clone(), options);
        self.detections[broker] = offloaded(&options);
        for peer in peers {
            let kept = match &mut self.unacked {
                Some(unacked) => {
                    let since = self.now.saturating_sub(unacked.ms);
                    let log = unacked.sent.remove(&(peer, broker)).unwrap_or_default();
                    log.into_iter()
                        .filter(|(at, _)| *at >= since)
                        .map(|(_, p)| (p.publication, p.stamp))
                        .collect()
                }
                None => Vec::new(),
            };
            self.input(broker, Input::NeighbourUp(names[peer].clone()));
            self.input(peer, Input::NeighbourRestarted { name: name.clone(), kept });
        }
    }

    /// Asks broker `broker` when its next timer is due (nothing for a crashed one).
    fn refresh_timer(&mut self, b: usize) {
        let timer = if self.dead[b] {
            None
        } else {
            // A delayed stage's timer is run by a tick behind the ops before it; while one
            // is on its way, it is not due again.
            let detection = self.detections[b].as_ref().and_then(Detection::poll_timeout);
            let detection = detection.filter(|_| !self.tick_pending[b]);
            self.routers[b].poll_timeout().into_iter().chain(detection).min()
        };
        if timer != self.timers[b] {
            if let Some(old) = self.timers[b] {
                self.due.remove(&(old, b));
            }
            if let Some(new) = timer {
                self.due.insert((new, b));
            }
            self.timers[b] = timer;
        }
    }

    fn refresh_timers(&mut self) {
        for b in 0..self.routers.len() {
            self.refresh_timer(b);
        }
    }

    /// Broker `broker` crashes for good: what is in flight to it and its clients are gone,
    /// and whatever reaches it from now on is lost. Its neighbours do not
    /// know yet (a link session outlives a silent peer): [`Sim::forget`] tells them.
    pub fn crash(&mut self, broker: usize) {
        self.dead[broker] = true;
        self.queue.retain(|_, e| e.to != broker);
        self.clients.retain(|_, b| *b != broker);
        self.refresh_timer(broker);
    }

    /// The neighbours of crashed broker `broker` give it up (their link sessions with it
    /// ended): its links are gone and each neighbour is told.
    pub fn forget(&mut self, broker: usize) {
        let mut peers: Vec<usize> =
            self.links.keys().filter(|(a, _)| *a == broker).map(|(_, b)| *b).collect();
        peers.sort_unstable();
        for peer in peers {
            // The crashed end is told too, and ignores it.
            self.unlink(broker, peer);
        }
    }

    /// True if broker `broker` crashed ([`Sim::crash`]).
    pub fn is_dead(&self, broker: usize) -> bool {
        self.dead[broker]
    }

    /// Wall-clock time spent inside the routers so far, and in how many calls.
    pub fn router_time(&self) -> (std::time::Duration, u64) {
        self.router_time
    }

    /// Delivers messages and runs timers due up to virtual time `t`, then sets the clock
    /// to `t`.
    pub fn run_until(&mut self, t: u64) {
        self.refresh_timers();
        loop {
            let next = self.queue.first_key_value().map(|((at, _), _)| *at);
            let timer = self.due.first().map(|(at, _)| *at);
            match next.into_iter().chain(timer).min() {
                Some(at) if at <= t => {
                    self.step();
                }
                _ => break,
            }
        }
        self.now = self.now.max(t);
    }

    /// Brokers `a` and `b` (0-based) linked with `latency` ms each way.
    pub fn link(&mut self, a: usize, b: usize, latency: u64) {
        self.links.insert((a, b), latency);
        self.links.insert((b, a), latency);
        let (na, nb) = (self.names[a].clone(), self.names[b].clone());
        self.input(a, Input::NeighbourUp(nb));
        self.input(b, Input::NeighbourUp(na));
    }

    /// With [`Options::offload_detection`]: each broker's detection stage applies every
    /// op `ms` after its router decided it (in order; the op keeps the router's time), as
    /// a detection thread runs behind its router. 0 (the default): at once.
    pub fn set_detection_delay(&mut self, ms: u64) {
        self.detection_delay = ms;
    }

    /// Every message from now on is delayed by up to `max` ms more (seeded), so messages
    /// on different links overtake each other; each link stays FIFO.
    pub fn set_jitter(&mut self, max: u64, seed: u64) {
        self.jitter = max;
        self.rng = fastrand::Rng::with_seed(seed);
    }

    /// Messages sent on all links so far.
    pub fn link_messages(&self) -> u64 {
        self.traffic.values().map(|(a, b)| a + b).sum()
    }

    /// The link between `a` and `b` fails: both ends are told, messages in flight are lost.
    pub fn unlink(&mut self, a: usize, b: usize) {
        self.links.remove(&(a, b));
        self.links.remove(&(b, a));
        let (na, nb) = (self.names[a].clone(), self.names[b].clone());
        self.queue.retain(|_, e| {
            let on_link = |to: usize, peer: &Name| {
                e.to == to && matches!(&e.what, What::Input(Input::Broker { from, .. }) if from == peer)
            };
            !(on_link(a, &nb) || on_link(b, &na))
        });
        self.input(a, Input::NeighbourDown(nb));
        self.input(b, Input::NeighbourDown(na));
    }

    /// Broker `broker` crashes and restarts with empty tables: its links drop (in-flight
    /// messages are lost, its neighbours clean up), its clients are gone, then the links
    /// come back.
    pub fn restart(&mut self, broker: usize) {
        let mut peers: Vec<(usize, u64)> =
            self.links.iter().filter(|((a, _), _)| *a == broker).map(|((_, b), l)| (*b, *l)).collect();
        // In a fixed order, so that a seed replays.
        peers.sort_unstable();
        for &(peer, _) in &peers {
            self.unlink(broker, peer);
        }
        self.clients.retain(|_, b| *b != broker);
        // Its detection stage dies with it, and what it had not applied yet.
        self.queue.retain(|_, e| !(e.to == broker && matches!(e.what, What::Detect(..) | What::Tick(_))));
        self.tick_pending[broker] = false;
        // A new life: ids from the old one must not come back.
        self.restarts += 1;
        let options = Options { incarnation: self.restarts, ..self.options };
        self.routers[broker] = Router::with_options(self.names[broker].clone(), options);
        self.detections[broker] = offloaded(&options);
        for (peer, latency) in peers {
            self.link(broker, peer, latency);
        }
    }

    /// From now on, keeps a digest of every message between brokers (see
    /// [`Self::messages_digest`]).
    pub fn digest_messages(&mut self) {
        self.trace.digest = Some(std::hash::DefaultHasher::new());
    }

    /// The digest of the messages sent since [`Self::digest_messages`]: equal digests, the
    /// same messages in the same order (the hasher has fixed keys, so runs compare).
    pub fn messages_digest(&self) -> Option<u64> {
        self.trace.digest.as_ref().map(std::hash::Hasher::finish)
    }

    /// Broker `broker`'s detection stage, wherever it runs.
    pub fn detection(&self, broker: usize) -> &Detection {
        match &self.detections[broker] {
            Some(detection) => detection,
            None => self.routers[broker].detection().expect("detection runs in the router"),
        }
    }

    /// The virtual time, in milliseconds.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Lets `ms` of virtual time pass (messages in flight keep their arrival times).
    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
    }

    /// The name of broker `broker` (0-based).
    pub fn name(&self, broker: usize) -> &Name {
        &self.names[broker]
    }

    /// The index of the broker named `name`.
    pub fn index_of(&self, name: &Name) -> usize {
        self.index[name]
    }

    /// Attaches client `client` to `broker`.
    pub fn attach(&mut self, client: ClientId, broker: usize) {
        self.clients.insert(client, broker);
    }

    /// Sends `text` (command form: `a …`, `s …`, `p …`, `unsub ID`, …) from `client`;
    /// returns the request number.
    pub fn send(&mut self, client: ClientId, text: &str) -> u64 {
        let message: Message = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        self.request(client, message)
    }

    /// Sends `message` from `client`; returns the request number (its answer goes to
    /// [`Sim::replies`]).
    pub fn request(&mut self, client: ClientId, message: Message) -> u64 {
        self.next_req += 1;
        let req = self.next_req;
        let broker = self.clients[&client];
        self.input(broker, Input::Client { client, req: Some(req), message });
        req
    }

    /// Whether `client` is attached (its broker has not restarted since).
    pub fn is_attached(&self, client: ClientId) -> bool {
        self.clients.contains_key(&client)
    }

    /// When the next message arrives or the next timer is due, if any.
    pub fn next_at(&mut self) -> Option<u64> {
        self.refresh_timers();
        let next = self.queue.first_key_value().map(|((at, _), _)| *at);
        let timer = self.due.first().map(|(at, _)| *at);
        next.into_iter().chain(timer).min()
    }

    /// Sends and runs until quiet; returns the reply.
    pub fn call(&mut self, client: ClientId, text: &str) -> Reply {
        let req = self.send(client, text);
        self.run();
        self.replies.get(&(client, req)).cloned().expect("every request is answered")
    }

    /// Sends and runs only until the reply arrives (messages may still be in flight);
    /// returns the reply.
    pub fn call_until_reply(&mut self, client: ClientId, text: &str) -> Reply {
        let req = self.send(client, text);
        while !self.replies.contains_key(&(client, req)) {
            assert!(self.step(), "{text}: no reply and nothing in flight");
        }
        self.replies[&(client, req)].clone()
    }

    /// The id returned for a successful `a`/`s`, as soon as the reply arrives.
    pub fn id_settled(&mut self, client: ClientId, text: &str) -> MessageId {
        match self.call_until_reply(client, text) {
            Ok(Some(id)) => id,
            other => panic!("{text}: {other:?}"),
        }
    }

    /// Delivers the next message in flight; false if there is none.
    pub fn step(&mut self) -> bool {
        // A router's timer due before the next message goes first (historic queries
        // timing out, composite windows).
        let next = self.queue.first_key_value().map(|((at, _), _)| *at);
        let timer = self.due.first().copied().filter(|(t, _)| next.is_none_or(|at| *t < at));
        if let Some((t, broker)) = timer {
            self.now = self.now.max(t);
            if self.detection_delay > 0 {
                if self.detections[broker].is_some() && !self.tick_pending[broker] {
                    self.tick_pending[broker] = true;
                    self.seq += 1;
                    let tick = Event { to: broker, what: What::Tick(self.now) };
                    self.queue.insert((self.now + self.detection_delay, self.seq), tick);
                }
            } else if let Some(detection) = &mut self.detections[broker] {
                detection.handle_timeout(self.now);
            }
            let mut out = Vec::new();
            let started = std::time::Instant::now();
            self.routers[broker].handle_timeout(self.now, &mut out);
            self.router_time.0 += started.elapsed();
            self.router_time.1 += 1;
            self.outputs(broker, out);
            self.refresh_timer(broker);
            return true;
        }
        let Some(((at, _), event)) = self.queue.pop_first() else { return false };
        self.now = self.now.max(at);
        match event.what {
            What::Detect(now, op) => self.detect(event.to, now, op),
            What::Tick(until) => {
                self.tick_pending[event.to] = false;
                if let Some(detection) = &mut self.detections[event.to] {
                    detection.handle_timeout(until);
                }
                self.refresh_timer(event.to);
            }
            What::Input(input) => self.input(event.to, input),
        }
        true
    }

    /// Requests and forwarded messages waiting to settle at `broker`.
    pub fn unsettled(&self, broker: usize) -> usize {
        self.routers[broker].unsettled()
    }

    /// The id returned for a successful `a`/`s`.
    pub fn id(&mut self, client: ClientId, text: &str) -> MessageId {
        match self.call(client, text) {
            Ok(Some(id)) => id,
            other => panic!("{text}: {other:?}"),
        }
    }

    /// Broker `broker`'s history store keeps what `filter` selects.
    pub fn keep_history(&mut self, broker: usize, filter: &str) {
        let filter = filter.parse().expect("a valid history filter");
        self.input(broker, Input::KeepHistory(filter));
    }

    /// Client `client` goes away.
    pub fn disconnect(&mut self, client: ClientId) {
        let broker = self.clients.remove(&client).expect("attached");
        self.input(broker, Input::ClientGone(client));
    }

    fn input(&mut self, broker: usize, input: Input) {
        if self.dead[broker] {
            // Lost with the crashed broker.
            return;
        }
        let mut out = Vec::new();
        let started = std::time::Instant::now();
        self.routers[broker].handle(self.now, input, &mut out);
        self.router_time.0 += started.elapsed();
        self.router_time.1 += 1;
        self.outputs(broker, out);
        self.refresh_timer(broker);
    }

    /// Carries out what broker `broker` asked for.
    fn outputs(&mut self, broker: usize, out: Vec<Output>) {
        for o in out {
            match o {
                Output::ToBroker { to, message } => {
                    let target = self.index_of(&to);
                    let Some(&latency) = self.links.get(&(broker, target)) else {
                        panic!("{} sent to {} without a link", self.names[broker], to);
                    };
                    if matches!(message, BrokerMessage::Advertise { .. }) {
                        self.adv_messages += 1;
                    }
                    *self.kinds.entry(kind(&message)).or_default() += 1;
                    let counts = self.traffic.entry((broker, target)).or_default();
                    match message {
                        BrokerMessage::Subscribe { .. }
                        | BrokerMessage::Unsubscribe { .. }
                        | BrokerMessage::TreeSubscribe { .. }
                        | BrokerMessage::TreeUnsubscribe { .. } => counts.0 += 1,
                        _ => counts.1 += 1,
                    }
                    let last = self.last_arrival.get(&(broker, target)).copied().unwrap_or(0);
                    let jitter = if self.jitter > 0 { self.rng.u64(..=self.jitter) } else { 0 };
                    let at = (self.now + latency + jitter).max(last);
                    self.last_arrival.insert((broker, target), at);
                    self.seq += 1;
                    let from = self.names[broker].clone();
                    self.trace.message(self.now, &from, &to, &message);
                    if let (Some(unacked), BrokerMessage::Publish { publication, stamp }) =
                        (&mut self.unacked, &message)
                    {
                        let log = unacked.sent.entry((broker, target)).or_default();
                        while log.front().is_some_and(|(at, _)| *at + unacked.ms < self.now) {
                            log.pop_front();
                        }
                        let sent = Stamped { stamp: stamp.clone(), publication: publication.clone() };
                        log.push_back((self.now, sent));
                    }
                    self.queue.insert(
                        (at, self.seq),
                        Event { to: target, what: What::Input(Input::Broker { from, message }) },
                    );
                }
                Output::Reply { client, req, result } => {
                    let req = req.expect("the simulator numbers every request");
                    self.replies.insert((client, req), result);
                }
                Output::Notify { client, subs, publication, .. } => {
                    self.deliveries.push(Delivery { client, subs, publication, time: self.now });
                }
                Output::HistoryQuery { query, sub, limit } => {
                    let delay = self.store_delay.get(&broker).copied().unwrap_or(Some(1));
                    let Some(delay) = delay else { continue };
                    let mut found: Vec<Stamped> = self
                        .stored
                        .iter()
                        .filter(|(b, s)| *b == broker && padres_lang::matches(&sub, &s.publication))
                        .map(|(_, s)| s.as_ref().clone())
                        .collect();
                    found.sort_by(|a, b| {
                        a.publication.time().cmp(&b.publication.time()).then_with(|| a.stamp.cmp(&b.stamp))
                    });
                    found.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                    self.seq += 1;
                    let input = Input::HistoryAnswer { query, result: Ok(found) };
                    self.queue
                        .insert((self.now + delay, self.seq), Event { to: broker, what: What::Input(input) });
                }
                Output::EndOfHistory { client, sub, count, missing, truncated } => {
                    self.ends.push(EndOfHistory { client, sub, count, missing, truncated, time: self.now });
                }
                Output::Store { stamp, publication, ack } => {
                    self.stored.push((broker, Arc::new(Stamped { stamp, publication })));
                    if let Some((client, req)) = ack {
                        self.replies.insert((client, req), Ok(None));
                    }
                }
                Output::CompositeNotify { client, sub, pubs } => {
                    self.composite_deliveries.push(CompositeDelivery { client, sub, pubs, time: self.now });
                }
                Output::Detect { now, op } if self.detection_delay > 0 => {
                    self.seq += 1;
                    let event = Event { to: broker, what: What::Detect(now, op) };
                    self.queue.insert((self.now + self.detection_delay, self.seq), event);
                }
                Output::Detect { now, op } => self.detect(broker, now, op),
            }
        }
    }

    /// Broker `broker`'s detection stage applies `op`, decided at `now`.
    fn detect(&mut self, broker: usize, now: u64, op: DetectorOp) {
        let detection = self.detections[broker].as_mut().expect("offloaded detection");
        let mut detected = Vec::new();
        detection.apply(now, op, &mut detected);
        // As a broker's router task does: nothing for a subscription withdrawn meanwhile.
        self.routers[broker].keep_deliverable(&mut detected);
        self.outputs(broker, detected);
        self.refresh_timer(broker);
    }

    /// Delivers messages in time order until none is in flight (at most a million
    /// events, or 20,000 per broker in a larger federation: one that never goes quiet is
    /// a bug).
    pub fn run(&mut self) {
        let max = 1_000_000.max(self.routers.len() * 20_000);
        assert!(self.run_bounded(max), "no quiet after {max} events; {} in flight", self.queue.len());
    }

    /// Like `run`, but gives up after `max` events; true if the federation went quiet.
    pub fn run_bounded(&mut self, max: usize) -> bool {
        self.refresh_timers();
        for _ in 0..max {
            if !self.step() {
                return true;
            }
        }
        self.queue.is_empty()
    }

    /// Advertisement messages sent on all links so far.
    pub fn advertise_messages(&self) -> u64 {
        self.adv_messages
    }

    /// What broker `broker` did re-synchronising with restarted neighbours.
    pub fn replays(&self, broker: usize) -> Replays {
        self.routers[broker].replays()
    }

    /// Broker `broker`'s routing tables.
    pub fn routes(&self, broker: usize) -> Routes {
        self.routers[broker].routes()
    }

    /// Deliveries since `from` as `(client, publication text)`.
    pub fn delivered_since(&self, from: usize) -> Vec<(ClientId, String)> {
        self.deliveries[from..].iter().map(|d| (d.client, d.publication.without_time().to_string())).collect()
    }
}

/// A detection stage of its own for a router that offloads it.
fn offloaded(options: &Options) -> Option<Detection> {
    options.offload_detection.then(|| Detection::new(options.detector_bounds))
}

/// What is done with each message between brokers.
#[derive(Debug, Default)]
struct Trace {
    /// Printed to stderr (`SIM_TRACE`).
    print: bool,
    /// Hashed, in order.
    digest: Option<std::hash::DefaultHasher>,
}

impl Trace {
    fn message(&mut self, now: u64, from: &Name, to: &Name, message: &BrokerMessage) {
        if !self.print && self.digest.is_none() {
            return;
        }
        let line = format!("{now} {from} -> {to} {message:?}");
        if self.print {
            eprintln!("{line}");
        }
        if let Some(hasher) = &mut self.digest {
            std::hash::Hash::hash(&line, hasher);
        }
    }
}

/// The name of a broker message's kind.
fn kind(message: &BrokerMessage) -> &'static str {
    match message {
        BrokerMessage::Advertise { .. } => "Advertise",
        BrokerMessage::TreeRepair { .. } => "TreeRepair",
        BrokerMessage::Unadvertise { .. } => "Unadvertise",
        BrokerMessage::Subscribe { .. } => "Subscribe",
        BrokerMessage::Unsubscribe { .. } => "Unsubscribe",
        BrokerMessage::Publish { .. } => "Publish",
        BrokerMessage::TreeSubscribe { .. } => "TreeSubscribe",
        BrokerMessage::TreeUnsubscribe { .. } => "TreeUnsubscribe",
        BrokerMessage::TreePublish { .. } => "TreePublish",
        BrokerMessage::Settled { .. } => "Settled",
        BrokerMessage::TreesSettled { .. } => "TreesSettled",
        BrokerMessage::CompositeSubscribe { .. } => "CompositeSubscribe",
        BrokerMessage::CompositeUnsubscribe { .. } => "CompositeUnsubscribe",
        BrokerMessage::CompositeMatch { .. } => "CompositeMatch",
        BrokerMessage::HistoryAdvertise { .. } => "HistoryAdvertise",
        BrokerMessage::HistoryUnadvertise { .. } => "HistoryUnadvertise",
        BrokerMessage::HistoryQuery { .. } => "HistoryQuery",
        BrokerMessage::HistoryAnswer { .. } => "HistoryAnswer",
        BrokerMessage::HistoryDone { .. } => "HistoryDone",
    }
}
