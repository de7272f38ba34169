//! Historic subscriptions: a subscription whose `time` range reaches into the past is
//! answered from the history stores, then continues live.
//!
//! - **Stores advertise** what they keep: a broker with a store floods its filters as
//!   [`BrokerMessage::HistoryAdvertise`] (the id's broker is the store's); every broker
//!   remembers each store's filter and the hop toward it, re-offers them to a neighbour
//!   whose link comes up, and floods a [`BrokerMessage::HistoryUnadvertise`] for those it
//!   loses with a link. A store lost that way is remembered as unreachable, and named in
//!   the marker of every query it could have answered, until its broker advertises a
//!   store again.
//! - **The query** starts at the subscriber's broker once the live subscription has
//!   settled (every publisher's broker has it), so that, links being FIFO, a publication
//!   that was not delivered live reached the stores before the query does; a local store
//!   takes the query behind the publications queued for it. The query goes toward every
//!   store whose filter [`intersects`] the subscription, once per hop; each broker on the
//!   way relays the answers and reports [`BrokerMessage::HistoryDone`] once every hop
//!   beyond it has, or when its timeout passes (naming the stores that did not answer).
//! - **At the subscriber's broker** the answers are collected, sorted by `time` (ties by
//!   stamp), stripped of duplicates (a publication kept by two stores), delivered, and
//!   followed by exactly one [`Output::EndOfHistory`]. Live publications of the
//!   subscription that arrive meanwhile are held back and delivered after the marker,
//!   those already delivered from a store skipped: no gap and no duplicate at the boundary.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use padres_lang::predicate::{Op, Predicate};
use padres_lang::semantics::satisfiable;
use padres_lang::time::TIME;
use padres_lang::{MessageId, Name, Stamp, Stamped, Subscription, Timestamp, Value, intersects};

use super::composite::PartKey;
use super::cycles::Next;
use super::{BrokerMessage, ClientId, Hop, Output, Router};

/// Most stored publications per [`BrokerMessage::HistoryAnswer`].
const CHUNK: usize = 256;
/// Most bytes (estimated) per [`BrokerMessage::HistoryAnswer`].
const CHUNK_BYTES: usize = 256 << 10;

/// The bytes (estimated) of stored publications one answer carries for a broker whose
/// frames are at most `max_frame` bytes: half of it (the estimate is not the encoding), at
/// most [`CHUNK_BYTES`]. A publication larger than that goes alone, which its own frame
/// limit allowed when it was published.
pub const fn history_chunk_bytes(max_frame: usize) -> usize {
    let half = max_frame / 2;
    if half < CHUNK_BYTES { half } else { CHUNK_BYTES }
}

/// How long a broker waits for the stores beyond it, by default.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// Most stored publications delivered for one subscription, by default.
pub const DEFAULT_MAX_RESULTS: u64 = 100_000;

#[derive(Debug)]
struct StoreAd {
    filter: Arc<Subscription>,
    from: Hop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Upstream {
    Client(ClientId),
    Broker(Name),
    /// Leaf `leaf` of a client's composite pattern `key`, detected here.
    Detector {
        key: PartKey,
        leaf: u32,
    },
}

/// A query this broker forwarded (or, at the subscriber's broker, is about to).
#[derive(Debug)]
struct Pending {
    upstream: Upstream,
    sub: Arc<Subscription>,
    limit: u64,
    /// False until the live subscription has settled (subscriber's broker only).
    started: bool,
    /// Hops that have not reported done, with the stores behind each.
    waiting: BTreeMap<Hop, BTreeSet<Name>>,
    missing: BTreeSet<Name>,
    /// How long this broker waits for the hops beyond it (ms).
    timeout_ms: u64,
    deadline: u64,
    /// Subscriber's broker: stored publications collected, live ones held back.
    collected: Vec<Arc<Stamped>>,
    live: Vec<Arc<Stamped>>,
    /// A detector's leaf: the publications it has had live meanwhile (not fed twice).
    live_keys: HashSet<Stamp>,
}

/// The historic-subscription state of one router.
#[derive(Debug)]
pub(super) struct Histories {
    stores: BTreeMap<MessageId, StoreAd>,
    /// Stores lost with a link (by filter id), named as missing by the queries they meet.
    unreachable: BTreeMap<MessageId, Arc<Subscription>>,
    pending: HashMap<MessageId, Pending>,
    /// A client's composite pattern → the queries of its leaves reaching into the past.
    composite_queries: HashMap<MessageId, Vec<MessageId>>,
    timeout_ms: u64,
    max_results: u64,
    chunk_bytes: usize,
}

impl Histories {
    pub(super) fn new(timeout_ms: u64, max_results: u64, chunk_bytes: usize) -> Self {
        Self {
            stores: BTreeMap::new(),
            unreachable: BTreeMap::new(),
            pending: HashMap::new(),
            composite_queries: HashMap::new(),
            timeout_ms,
            max_results,
            chunk_bytes,
        }
    }

    /// The earliest deadline of a query waiting on stores.
    pub(super) fn poll_timeout(&self) -> Option<u64> {
        self.pending.values().filter(|p| p.started).map(|p| p.deadline).min()
    }
}

/// True if `sub` bounds `time` and its range admits a time before `now`.
pub(super) fn is_historic(sub: &Subscription, now: u64) -> bool {
    let on_time: Vec<&Predicate> = sub.predicates().iter().filter(|p| p.attr() == TIME).collect();
    if on_time.is_empty() {
        return false;
    }
    let Some(now) = i64::try_from(now).ok().and_then(Timestamp::from_millis) else { return false };
    let before = Predicate::value(TIME, Op::Lt, Value::Time(now)).expect("a valid predicate");
    satisfiable(on_time.into_iter().chain(std::iter::once(&before)))
}

/// What makes two copies of a publication one: its whole stamp. The broker and counter
/// alone are not enough: a broker that lost its incarnation file counts from where an
/// earlier run did, and stores may hold both runs' publications.
fn key_of(s: &Stamped) -> Stamp {
    s.stamp.clone()
}

impl Router {
    /// Floods the local store's filter `id` (called when the store is given it).
    pub(super) fn advertise_store(
        &mut self,
        id: MessageId,
        filter: Arc<Subscription>,
        out: &mut Vec<Output>,
    ) {
        for to in &self.neighbours {
            out.push(Output::ToBroker {
                to: to.clone(),
                message: BrokerMessage::HistoryAdvertise { id: id.clone(), filter: filter.clone() },
            });
        }
        self.histories.unreachable.retain(|gone, _| gone.origin != id.origin);
        self.histories.stores.insert(id, StoreAd { filter, from: Hop::History });
    }

    /// A neighbour's link is up: it learns every store not behind it, and the stores at
    /// that broker itself held unreachable are forgotten: it advertises again those it
    /// keeps (a store it no longer keeps is gone, not missing). A store further away that
    /// its broker gave up while cut off stays named until that broker advertises again
    /// (docs/history.md).
    pub(super) fn offer_stores(&mut self, to: &Name, out: &mut Vec<Output>) {
        self.histories.unreachable.retain(|gone, _| gone.origin != *to);
        let hop = Hop::Broker(to.clone());
        for (id, ad) in self.histories.stores.iter().filter(|(_, ad)| ad.from != hop) {
            out.push(Output::ToBroker {
                to: to.clone(),
                message: BrokerMessage::HistoryAdvertise { id: id.clone(), filter: ad.filter.clone() },
            });
        }
    }

    /// A neighbour is gone: so are the stores behind it, and its part in queries.
    pub(super) fn stores_gone(&mut self, name: &Name, out: &mut Vec<Output>) {
        let hop = Hop::Broker(name.clone());
        let gone: Vec<MessageId> =
            self.histories.stores.iter().filter(|(_, ad)| ad.from == hop).map(|(id, _)| id.clone()).collect();
        for id in gone {
            if let Some(ad) = self.histories.stores.remove(&id) {
                self.histories.unreachable.insert(id.clone(), ad.filter);
            }
            self.flood_store_withdrawal(&id, &hop, out);
        }
        self.histories.pending.retain(|_, p| p.upstream != Upstream::Broker(name.clone()));
        let waiting: Vec<MessageId> = self
            .histories
            .pending
            .iter()
            .filter(|(_, p)| p.waiting.contains_key(&hop))
            .map(|(id, _)| id.clone())
            .collect();
        for query in waiting {
            let behind = self.histories.pending.get(&query).and_then(|p| p.waiting.get(&hop)).cloned();
            self.history_done(&query, &hop, behind.into_iter().flatten().collect(), out);
        }
    }

    fn flood_store_withdrawal(&self, id: &MessageId, from: &Hop, out: &mut Vec<Output>) {
        for to in &self.neighbours {
            if Hop::Broker(to.clone()) != *from {
                out.push(Output::ToBroker {
                    to: to.clone(),
                    message: BrokerMessage::HistoryUnadvertise { id: id.clone() },
                });
            }
        }
    }

    /// The history messages from neighbour `from`.
    pub(super) fn history_message(&mut self, from: &Name, message: BrokerMessage, out: &mut Vec<Output>) {
        let hop = Hop::Broker(from.clone());
        match message {
            BrokerMessage::HistoryAdvertise { id, filter } => {
                // Known already (by this path or, in a cyclic overlay, another): the first
                // path stays, and the flood stops here.
                if self.histories.stores.contains_key(&id) {
                    return;
                }
                for to in &self.neighbours {
                    if to != from {
                        out.push(Output::ToBroker {
                            to: to.clone(),
                            message: BrokerMessage::HistoryAdvertise {
                                id: id.clone(),
                                filter: filter.clone(),
                            },
                        });
                    }
                }
                // Its broker is back: what was unreachable there is not any more (a restarted
                // broker's filters come with new ids).
                self.histories.unreachable.retain(|gone, _| gone.origin != id.origin);
                self.histories.stores.insert(id, StoreAd { filter, from: hop });
            }
            BrokerMessage::HistoryUnadvertise { id }
                if self.histories.stores.get(&id).is_some_and(|ad| ad.from == hop) =>
            {
                if let Some(ad) = self.histories.stores.remove(&id) {
                    self.histories.unreachable.insert(id.clone(), ad.filter);
                }
                self.flood_store_withdrawal(&id, &hop, out);
            }
            BrokerMessage::HistoryQuery { query, sub, limit, timeout_ms } => {
                let limit = limit.min(self.histories.max_results);
                // A second copy (paths meeting in a cyclic overlay): the first one already
                // went on toward every store from here. A query this broker issued that
                // comes back around a cycle is one too, even once it has ended here (its
                // marker is out; asking the store again would only be answered to no one).
                if self.histories.pending.contains_key(&query) || query.origin == self.name {
                    out.push(Output::ToBroker {
                        to: from.clone(),
                        message: BrokerMessage::HistoryDone { query, missing: Vec::new() },
                    });
                    return;
                }
                let mut pending = self.new_pending(Upstream::Broker(from.clone()), sub, limit);
                pending.timeout_ms = pending.timeout_ms.min(timeout_ms);
                self.histories.pending.insert(query.clone(), pending);
                self.send_query(&query, out);
            }
            BrokerMessage::HistoryAnswer { query, pubs } => self.history_answer(&query, &hop, pubs, out),
            BrokerMessage::HistoryDone { query, missing } => self.history_done(&query, &hop, missing, out),
            _ => {}
        }
    }

    fn new_pending(&self, upstream: Upstream, sub: Arc<Subscription>, limit: u64) -> Pending {
        Pending {
            upstream,
            sub,
            limit,
            started: false,
            waiting: BTreeMap::new(),
            missing: BTreeSet::new(),
            timeout_ms: self.histories.timeout_ms,
            deadline: self.now.saturating_add(self.histories.timeout_ms),
            collected: Vec::new(),
            live: Vec::new(),
            live_keys: HashSet::new(),
        }
    }

    /// Client `client`'s composite pattern `id` has leaves reaching into the past: each
    /// gets a query, sent once the pattern's placement has settled.
    pub(super) fn hold_composite_for_history(&mut self, client: ClientId, id: &MessageId) {
        let Some((key, leaves)) = self.historic_leaves(&Hop::Client(client), id) else { return };
        let limit = self.histories.max_results;
        let mut queries = Vec::new();
        for (leaf, sub) in leaves {
            let query = self.next_id();
            let pending = self.new_pending(Upstream::Detector { key: key.clone(), leaf }, sub, limit);
            self.histories.pending.insert(query.clone(), pending);
            queries.push(query);
        }
        self.histories.composite_queries.insert(id.clone(), queries);
    }

    /// The leaf queries of composite pattern `id`, taken (to be sent, or dropped).
    pub(super) fn take_composite_queries(&mut self, id: &MessageId) -> Vec<MessageId> {
        self.histories.composite_queries.remove(id).unwrap_or_default()
    }

    /// Leaf `leaf` of pattern `key` had `stamped` live while its history is on its way.
    pub(super) fn saw_live_leaf(
        &mut self,
        key: &PartKey,
        leaf: u32,
        stamped: &Stamped,
        out: &mut Vec<Output>,
    ) {
        if self.histories.pending.is_empty() {
            return;
        }
        let cap = self.histories.max_results;
        let mut over = Vec::new();
        for (query, p) in &mut self.histories.pending {
            if matches!(&p.upstream, Upstream::Detector { key: k, leaf: l } if **k == **key && *l == leaf) {
                p.live_keys.insert(key_of(stamped));
                if p.live_keys.len() as u64 > cap {
                    over.push(query.clone());
                }
            }
        }
        for query in over {
            self.cut_short(&query, out);
        }
    }

    /// Client `client`'s subscription `id` reaches into the past: its live copies are
    /// held back from now on, and the query goes out once it has settled.
    pub(super) fn hold_for_history(&mut self, client: ClientId, id: MessageId, sub: Arc<Subscription>) {
        let limit = self.histories.max_results;
        let pending = self.new_pending(Upstream::Client(client), sub, limit);
        self.histories.pending.insert(id, pending);
    }

    /// True if `id` waits for its live subscription to settle before querying.
    pub(super) fn awaits_history_start(&self, id: &MessageId) -> bool {
        self.histories.pending.get(id).is_some_and(|p| !p.started)
    }

    /// Sends query `query` toward every store its subscription meets.
    pub(super) fn send_query(&mut self, query: &MessageId, out: &mut Vec<Output>) {
        let Some(pending) = self.histories.pending.get(query) else { return };
        let (waiting, unreachable) = self.stores_met(pending);
        let (sub, limit, timeout_ms) = (pending.sub.clone(), pending.limit, pending.timeout_ms);
        // The next broker waits three quarters as long: it reports which stores beyond it
        // were silent while this one still listens (a quarter left for its report).
        let beyond = (timeout_ms / 4 * 3).max(1);
        for hop in waiting.keys() {
            match hop {
                Hop::Broker(to) => out.push(Output::ToBroker {
                    to: to.clone(),
                    message: BrokerMessage::HistoryQuery {
                        query: query.clone(),
                        sub: sub.clone(),
                        limit,
                        timeout_ms: beyond,
                    },
                }),
                Hop::History => {
                    // One row more than wanted: a store holding more says so by it, and the
                    // answer is marked truncated.
                    let limit = limit.saturating_add(1);
                    out.push(Output::HistoryQuery { query: query.clone(), sub: sub.clone(), limit });
                }
                Hop::Client(_) | Hop::Detector => {}
            }
        }
        let deadline = self.now.saturating_add(timeout_ms);
        let Some(pending) = self.histories.pending.get_mut(query) else { return };
        pending.started = true;
        pending.deadline = deadline;
        pending.waiting = waiting;
        pending.missing.extend(unreachable);
        if pending.waiting.is_empty() {
            self.finish_query(query, out);
        }
    }

    /// The stores `pending`'s subscription meets, by the hop toward them (not back where
    /// the query came from), and those it meets that cannot be reached now.
    fn stores_met(&self, pending: &Pending) -> (BTreeMap<Hop, BTreeSet<Name>>, BTreeSet<Name>) {
        let came_from = match &pending.upstream {
            Upstream::Broker(b) => Some(Hop::Broker(b.clone())),
            Upstream::Client(_) | Upstream::Detector { .. } => None,
        };
        let mut waiting: BTreeMap<Hop, BTreeSet<Name>> = BTreeMap::new();
        for (id, ad) in &self.histories.stores {
            if Some(&ad.from) != came_from.as_ref() && intersects(&pending.sub, &ad.filter) {
                waiting.entry(ad.from.clone()).or_default().insert(id.origin.clone());
            }
        }
        let unreachable = self
            .histories
            .unreachable
            .iter()
            .filter(|(_, filter)| intersects(&pending.sub, filter))
            .map(|(id, _)| id.origin.clone())
            .collect();
        (waiting, unreachable)
    }

    /// The local store's answer to `query` (`Err`: it could not answer).
    pub(super) fn local_answer(
        &mut self,
        query: &MessageId,
        result: Result<Vec<Stamped>, String>,
        out: &mut Vec<Output>,
    ) {
        match result {
            Ok(pubs) => {
                let mut chunk = Vec::new();
                let mut bytes = 0;
                let chunk_bytes = self.histories.chunk_bytes;
                for s in pubs {
                    let n = 32 + s.publication.estimated_size();
                    if !chunk.is_empty() && (chunk.len() == CHUNK || bytes + n > chunk_bytes) {
                        self.history_answer(query, &Hop::History, std::mem::take(&mut chunk), out);
                        bytes = 0;
                    }
                    bytes += n;
                    chunk.push(Arc::new(s));
                }
                if !chunk.is_empty() {
                    self.history_answer(query, &Hop::History, chunk, out);
                }
                self.history_done(query, &Hop::History, Vec::new(), out);
            }
            Err(why) => {
                tracing::warn!(%query, %why, "history store could not answer");
                self.history_done(query, &Hop::History, vec![self.name.clone()], out);
            }
        }
    }

    fn history_answer(
        &mut self,
        query: &MessageId,
        from: &Hop,
        pubs: Vec<Arc<Stamped>>,
        out: &mut Vec<Output>,
    ) {
        let Some(pending) = self.histories.pending.get_mut(query) else { return };
        if !pending.waiting.contains_key(from) {
            return;
        }
        match &pending.upstream {
            Upstream::Broker(to) => out.push(Output::ToBroker {
                to: to.clone(),
                message: BrokerMessage::HistoryAnswer { query: query.clone(), pubs },
            }),
            Upstream::Client(_) | Upstream::Detector { .. } => pending.collected.extend(pubs),
        }
    }

    fn history_done(&mut self, query: &MessageId, from: &Hop, missing: Vec<Name>, out: &mut Vec<Output>) {
        let Some(pending) = self.histories.pending.get_mut(query) else { return };
        if pending.waiting.remove(from).is_none() {
            return;
        }
        pending.missing.extend(missing);
        if pending.waiting.is_empty() {
            self.finish_query(query, out);
        }
    }

    /// Every hop has answered (or timed out): report upstream, or deliver.
    fn finish_query(&mut self, query: &MessageId, out: &mut Vec<Output>) {
        let Some(pending) = self.histories.pending.remove(query) else { return };
        let missing: Vec<Name> = pending.missing.into_iter().collect();
        match pending.upstream {
            Upstream::Broker(to) => {
                out.push(Output::ToBroker {
                    to,
                    message: BrokerMessage::HistoryDone { query: query.clone(), missing },
                });
            }
            Upstream::Client(client) => {
                let mut stored = pending.collected;
                stored.sort_by(|a, b| {
                    a.publication.time().cmp(&b.publication.time()).then_with(|| a.stamp.cmp(&b.stamp))
                });
                let mut seen = HashSet::new();
                stored.retain(|s| seen.insert(key_of(s)));
                let limit = usize::try_from(pending.limit).unwrap_or(usize::MAX);
                let truncated = stored.len() > limit;
                if truncated {
                    // What is cut off was not delivered: a live copy of it still is.
                    for s in &stored[limit..] {
                        seen.remove(&key_of(s));
                    }
                    stored.truncate(limit);
                }
                let count = stored.len() as u64;
                for s in stored {
                    out.push(Output::Notify {
                        client,
                        subs: vec![query.clone()],
                        publication: s.publication.clone(),
                        historic: true,
                    });
                }
                out.push(Output::EndOfHistory { client, sub: query.clone(), count, missing, truncated });
                for s in pending.live {
                    if !seen.contains(&key_of(&s)) {
                        out.push(Output::Notify {
                            client,
                            subs: vec![query.clone()],
                            publication: s.publication.clone(),
                            historic: false,
                        });
                    }
                }
            }
            Upstream::Detector { key, leaf } => {
                // Fed to the detector like late publications of that leaf: in time order,
                // once each, none it already had live.
                let mut stored = pending.collected;
                stored.sort_by(|a, b| {
                    a.publication.time().cmp(&b.publication.time()).then_with(|| a.stamp.cmp(&b.stamp))
                });
                let mut seen = pending.live_keys;
                stored.retain(|s| seen.insert(key_of(s)));
                stored.truncate(usize::try_from(pending.limit).unwrap_or(usize::MAX));
                if !missing.is_empty() {
                    tracing::warn!(%query, ?missing, "stores did not answer for a composite subscription's leaf");
                }
                for s in &stored {
                    self.feed_leaf(&key, leaf, s, out);
                }
            }
        }
    }

    /// Queries whose deadline has passed finish with the stores still silent named.
    pub(super) fn history_timeouts(&mut self, now: u64, out: &mut Vec<Output>) {
        let expired: Vec<MessageId> = self
            .histories
            .pending
            .iter()
            .filter(|(_, p)| p.started && p.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for query in expired {
            if let Some(pending) = self.histories.pending.get_mut(&query) {
                let silent = std::mem::take(&mut pending.waiting);
                pending.missing.extend(silent.into_values().flatten());
            }
            self.finish_query(&query, out);
        }
    }

    /// Live copies for subscriptions still waiting for their history are held back, at
    /// most `max_results` for one query: past that it is cut short ([`Self::cut_short`]).
    pub(super) fn hold_live(
        &mut self,
        next: &mut Next,
        stamped: impl Fn() -> Arc<Stamped>,
        out: &mut Vec<Output>,
    ) {
        if self.histories.pending.is_empty() {
            return;
        }
        let cap = self.histories.max_results;
        let mut held: Option<Arc<Stamped>> = None;
        let mut over = Vec::new();
        for (client, subs) in &mut next.clients {
            subs.retain(|id| match self.histories.pending.get_mut(id) {
                Some(p) if p.upstream == Upstream::Client(*client) => {
                    p.live.push(held.get_or_insert_with(&stamped).clone());
                    if p.live.len() as u64 > cap {
                        over.push(id.clone());
                    }
                    false
                }
                _ => true,
            });
        }
        next.clients.retain(|_, subs| !subs.is_empty());
        for query in over {
            self.cut_short(&query, out);
        }
    }

    /// Query `query` has had more live publications meanwhile than `max_results`: it ends
    /// now, as if its deadline had passed, so that what it holds stays bounded. The stores
    /// that have not answered (every store it meets, if it has not gone out yet) are named
    /// in its marker; what was collected is delivered, then what was held.
    fn cut_short(&mut self, query: &MessageId, out: &mut Vec<Output>) {
        let Some(pending) = self.histories.pending.get(query) else { return };
        let silent: BTreeSet<Name> = if pending.started {
            pending.waiting.values().flatten().cloned().collect()
        } else {
            let (waiting, mut unreachable) = self.stores_met(pending);
            unreachable.extend(waiting.into_values().flatten());
            unreachable
        };
        tracing::warn!(
            %query,
            max_results = self.histories.max_results,
            ?silent,
            "a historic query was cut short: more live publications arrived while it ran than it may hold"
        );
        if let Some(pending) = self.histories.pending.get_mut(query) {
            pending.waiting.clear();
            pending.missing.extend(silent);
        }
        self.finish_query(query, out);
    }

    /// A client's subscription `id` is gone (unsubscribed, or the client left).
    pub(super) fn drop_history(&mut self, id: &MessageId) {
        self.histories.pending.remove(id);
    }
}
