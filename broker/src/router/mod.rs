//! The router: publish–subscribe–advertise routing as a sans-IO state machine.
//!
//! A [`Router`] is one broker's routing state: its neighbours (the overlay routing table),
//! the advertisements it knows with the hop each came from (the SRT), and the
//! subscriptions with the hop each came from and the brokers each was forwarded to (the
//! PRT). Inputs are `(time, input)`; every decision comes out as [`Output`]s to send.
//! There is no socket, clock, task or lock inside, so a test can run many routers in one
//! thread and replay any run exactly.
//!
//! Routing, after SIENA and PADRES (DESIGN §4):
//!
//! - An **advertisement** is stored and flooded to every neighbour but the one it came
//!   from; the stored subscriptions it overlaps are forwarded toward it ("late
//!   advertisement pulls subscriptions").
//! - A **subscription** is stored and forwarded, once per hop, to the hop of every
//!   advertisement it overlaps, never back where it came from.
//! - A **publication** from a client must conform to one of that client's advertisements
//!   (an error reply otherwise); it is matched against the stored subscriptions and sent
//!   once to each matching next hop, never back to its last hop. A client gets one
//!   notification per publication, naming every subscription of its that matched.
//! - **Unsubscribe** and **unadvertise** undo this along the same paths: a subscription
//!   is withdrawn from every broker it was sent to; a withdrawn advertisement also
//!   withdraws subscriptions from its hop that no remaining advertisement there overlaps.
//! - A client that disconnects is unsubscribed and unadvertised everywhere; a neighbour
//!   that goes away takes its advertisements and subscriptions with it; a neighbour that
//!   (re)appears is sent every advertisement, and pulls subscriptions as its own arrive.
//!
//! **Covering** ([`Covering`]) keeps subscriptions off links where a more general one
//! already goes: with `Lazy`, a subscription covered at a hop (by another subscription
//! already sent there, from elsewhere) is held back, and sent when the covering one goes
//! away (before the covering one's withdrawal, so a link never lacks either); `Active`
//! also withdraws, when a covering subscription is sent, the ones it covers. Deliveries
//! are the same in every mode, since each broker matches against all its subscriptions;
//! only the subscriptions on links and in upstream tables shrink.
//!
//! Matching and overlap queries use the indexes of [`crate::matching`].
//!
//! Advertisements are covered the same way (`adv_covers`): one covered at a neighbour by
//! an advertisement already flooded there is held back, and flooded when the cover is
//! withdrawn. A subscription overlapping the covered one overlaps its cover, so it still
//! finds its way to this broker, which knows both.
//!
//! **Overlay changes.** An `Unadvertise` says whether the sender *lost* its path (a link
//! went down) or the owner *withdrew* the advertisement. In a tree, a known advertisement
//! or subscription arriving from another hop means the tree was rewired while messages
//! were in flight: the router follows the copy that came the new way, so the old path's
//! late withdrawal finds nothing to remove. `NeighbourUp` for a neighbour already up
//! starts over with it (the peer may have restarted).
//!
//! **Cyclic overlays** are opt-in ([`Options::cycles`]): every advertisement then defines
//! its own spanning tree and subscriptions and publications travel tagged with it
//! (`trees.rs`), so each subscriber gets a publication once whatever the loops. Owner
//! withdrawals are remembered (late copies of a withdrawn advertisement still circling are
//! dropped) and ids carry the broker's incarnation ([`Options::incarnation`]), so a
//! restarted broker recognises, and withdraws, its own advertisements from an earlier life.
//! A lost link does not remove advertisements (their copies may still be circling, and a
//! removal racing them would never settle): the trees that used it wait for it, and when it
//! returns, subscriptions are sent up them again. Each copy of an advertisement carries
//! its path length, and a broker moves a tree onto a strictly shorter path when one
//! arrives, so a restarted broker's neighbours and the broker itself find their way back.
//! Limits: covering is not combined with cycles; one publisher's publications keep their
//! order per advertisement, not across advertisements with different trees; a tree whose
//! link never returns is not rebuilt over another path; the memory of withdrawals is not
//! yet pruned.
//!
//! Not yet here: composite subscriptions (refused with an error), the history store hop.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use padres_lang::wire::ErrorCode;
use padres_lang::{
    Advertisement, Message, MessageId, Name, Publication, Subscription, adv_covers, conforms, covers,
};

use crate::matching::{AdvertisementIndex, Scratch, SubscriptionIndex};

mod trees;
use trees::{Next, Trees};

/// A client connection, numbered by the I/O shell.
pub type ClientId = u64;

/// Where a message came from or goes to: a local client or a neighbour broker.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hop {
    /// A client connected to this broker.
    Client(ClientId),
    /// A neighbour broker.
    Broker(Name),
}

impl fmt::Display for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Client(c) => write!(f, "client {c}"),
            Self::Broker(b) => write!(f, "broker {b}"),
        }
    }
}

pub use padres_lang::wire::BrokerMessage;

/// What happens to a router.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A client's request, numbered by the client.
    Client {
        /// The client.
        client: ClientId,
        /// Its request number, echoed in the reply.
        req: u64,
        /// What it asks.
        message: Message,
    },
    /// A client went away.
    ClientGone(ClientId),
    /// A message from a neighbour.
    Broker {
        /// The neighbour.
        from: Name,
        /// What it sent.
        message: BrokerMessage,
    },
    /// A link to a neighbour is up (first time or again).
    NeighbourUp(Name),
    /// A link to a neighbour is down.
    NeighbourDown(Name),
}

/// What a router asks its I/O shell to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Send `message` to neighbour `to`.
    ToBroker {
        /// The neighbour.
        to: Name,
        /// The message.
        message: BrokerMessage,
    },
    /// Answer a client's request.
    Reply {
        /// The client.
        client: ClientId,
        /// The request answered.
        req: u64,
        /// The id assigned, or why the request failed.
        result: Result<Option<MessageId>, (ErrorCode, String)>,
    },
    /// Deliver a publication to a client.
    Notify {
        /// The client.
        client: ClientId,
        /// Every subscription of the client that matched.
        subs: Vec<MessageId>,
        /// The publication.
        publication: Arc<Publication>,
    },
}

#[derive(Debug)]
struct AdvEntry {
    adv: Arc<Advertisement>,
    last: Hop,
    /// Brokers to the advertiser's broker along `last` (0: a local client's).
    distance: u32,
    /// Neighbours this advertisement was flooded to.
    sent_to: BTreeSet<Name>,
    /// Neighbours it is held back from, covered by one flooded there.
    held: BTreeSet<Name>,
}

#[derive(Debug)]
struct SubEntry {
    sub: Arc<Subscription>,
    last: Hop,
    /// Brokers this subscription was forwarded to.
    sent_to: BTreeSet<Name>,
    /// Brokers it should reach but is held back from, covered by one sent there.
    held: BTreeSet<Name>,
}

/// How a router routes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Subscription and advertisement covering.
    pub covering: Covering,
    /// Allow cycles in the overlay (per-advertisement trees).
    pub cycles: bool,
    /// Which life of this broker this is (e.g. its start time): the high half of every
    /// id it assigns, so ids of an earlier life never come back.
    pub incarnation: u32,
    /// Most subscriptions one client may hold (`None`: no limit); one more is refused
    /// with [`ErrorCode::LimitExceeded`].
    pub max_subscriptions_per_client: Option<usize>,
}

/// Subscription covering (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Covering {
    /// Every subscription goes to every hop it overlaps.
    #[default]
    Off,
    /// A covered subscription is held back, and sent when its cover goes away.
    Lazy,
    /// As `Lazy`, and sending a subscription withdraws those it covers.
    Active,
}

#[derive(Debug, Default)]
struct ClientState {
    advs: BTreeSet<MessageId>,
    subs: BTreeSet<MessageId>,
}

/// A snapshot of a router's tables, for `broker routes` and for tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    /// The neighbours.
    pub neighbours: Vec<Name>,
    /// Advertisements: id, text, hop they came from.
    pub srt: Vec<(MessageId, String, Hop)>,
    /// Subscriptions: id, text, hop they came from, brokers they were sent to.
    pub prt: Vec<(MessageId, String, Hop, Vec<Name>)>,
    /// With cycles: tree, subscription id, text, hop it came from, broker it went to.
    pub tree_prt: Vec<(MessageId, MessageId, String, Hop, Option<Name>)>,
}

/// One broker's routing state (see the module docs).
#[derive(Debug)]
pub struct Router {
    name: Name,
    covering: Covering,
    cycles: bool,
    trees: Trees,
    /// With cycles: advertisements withdrawn by their owners, so late copies still
    /// travelling round a loop are not installed again.
    withdrawn: HashSet<MessageId>,
    seq: u64,
    max_subs_per_client: usize,
    neighbours: BTreeSet<Name>,
    clients: HashMap<ClientId, ClientState>,
    advs: HashMap<MessageId, AdvEntry>,
    adv_index: AdvertisementIndex<MessageId>,
    subs: HashMap<MessageId, SubEntry>,
    sub_index: SubscriptionIndex<MessageId>,
    scratch: Scratch,
}

impl Router {
    /// A router for broker `name` with no neighbours yet and covering off.
    pub fn new(name: Name) -> Self {
        Self::with_covering(name, Covering::Off)
    }

    /// A router for broker `name` with the given covering mode.
    pub fn with_covering(name: Name, covering: Covering) -> Self {
        Self::build(name, Options { covering, ..Options::default() })
    }

    /// A router for broker `name` with `options`; covering cannot be combined with cycles
    /// yet.
    pub fn with_options(name: Name, options: Options) -> Result<Self, String> {
        if options.cycles && options.covering != Covering::Off {
            return Err("covering cannot be combined with cycles yet: set covering off".to_owned());
        }
        Ok(Self::build(name, options))
    }

    fn build(name: Name, options: Options) -> Self {
        Self {
            max_subs_per_client: options.max_subscriptions_per_client.unwrap_or(usize::MAX),
            seq: u64::from(options.incarnation) << 32,
            withdrawn: HashSet::new(),
            name,
            covering: options.covering,
            cycles: options.cycles,
            trees: Trees::default(),
            neighbours: BTreeSet::new(),
            clients: HashMap::new(),
            advs: HashMap::new(),
            adv_index: AdvertisementIndex::new(),
            subs: HashMap::new(),
            sub_index: SubscriptionIndex::new(),
            scratch: Scratch::default(),
        }
    }

    /// The broker's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// Handles one input at time `now` (milliseconds, from the caller's clock), appending
    /// what to send to `out`.
    pub fn handle(&mut self, now: u64, input: Input, out: &mut Vec<Output>) {
        // No timers yet; the time is part of the contract for the ones to come.
        let _ = now;
        match input {
            Input::Client { client, req, message } => self.client_request(client, req, message, out),
            Input::ClientGone(client) => self.client_gone(client, out),
            Input::Broker { from, message } => self.broker_message(from, message, out),
            Input::NeighbourUp(name) => self.neighbour_up(name, out),
            Input::NeighbourDown(name) => self.neighbour_down(&name, out),
        }
    }

    /// How many advertisements and subscriptions the tables hold.
    pub fn table_sizes(&self) -> (usize, usize) {
        (self.advs.len(), self.subs.len())
    }

    /// A copy of the routing tables, sorted.
    pub fn routes(&self) -> Routes {
        self.routes_up_to(usize::MAX)
    }

    /// The first `limit` rows of the SRT and PRT by id (the neighbours and tree entries
    /// whole). Only the rows listed are written out as text, so asking a broker with a
    /// million subscriptions for ten of them costs a sort of ids, not a million strings.
    pub fn routes_up_to(&self, limit: usize) -> Routes {
        let mut adv_ids: Vec<&MessageId> = self.advs.keys().collect();
        adv_ids.sort();
        let srt = adv_ids
            .into_iter()
            .take(limit)
            .filter_map(|id| self.advs.get(id).map(|e| (id.clone(), e.adv.to_string(), e.last.clone())))
            .collect();
        let mut sub_ids: Vec<&MessageId> = self.subs.keys().collect();
        sub_ids.sort();
        let prt = sub_ids
            .into_iter()
            .take(limit)
            .filter_map(|id| {
                self.subs.get(id).map(|e| {
                    (id.clone(), e.sub.to_string(), e.last.clone(), e.sent_to.iter().cloned().collect())
                })
            })
            .collect();
        Routes {
            neighbours: self.neighbours.iter().cloned().collect(),
            srt,
            prt,
            tree_prt: self.trees.entries(),
        }
    }

    fn next_id(&mut self) -> MessageId {
        self.seq += 1;
        MessageId::new(self.name.clone(), self.seq)
    }

    fn client_request(&mut self, client: ClientId, req: u64, message: Message, out: &mut Vec<Output>) {
        self.clients.entry(client).or_default();
        let result = match message {
            Message::Advertise(adv) => {
                let id = self.next_id();
                self.install_adv(id.clone(), Arc::new(adv), Hop::Client(client), 0, out);
                self.clients.entry(client).or_default().advs.insert(id.clone());
                Ok(Some(id))
            }
            Message::Subscribe(_)
                if self.clients.get(&client).is_some_and(|c| c.subs.len() >= self.max_subs_per_client) =>
            {
                Err((
                    ErrorCode::LimitExceeded,
                    format!(
                        "this client holds {} subscriptions, the most this broker allows: unsubscribe first",
                        self.max_subs_per_client
                    ),
                ))
            }
            Message::Subscribe(sub) => {
                let id = self.next_id();
                self.install_sub(id.clone(), Arc::new(sub), Hop::Client(client), out);
                self.clients.entry(client).or_default().subs.insert(id.clone());
                Ok(Some(id))
            }
            Message::CompositeSubscribe(_) => Err((
                ErrorCode::BadRequest,
                "composite subscriptions are not supported by this broker yet".to_owned(),
            )),
            Message::Publish(publication) => {
                let tree = self.clients.get(&client).and_then(|c| {
                    c.advs
                        .iter()
                        .find(|id| self.advs.get(*id).is_some_and(|e| conforms(&publication, &e.adv)))
                        .cloned()
                });
                if let Some(tree) = tree {
                    let publication = Arc::new(publication);
                    if self.cycles {
                        self.route_on_tree(&tree, publication, &Hop::Client(client), out);
                    } else {
                        self.route_publication(publication, &Hop::Client(client), out);
                    }
                    Ok(None)
                } else {
                    Err((
                        ErrorCode::NotAdvertised,
                        format!(
                            "{publication} conforms to none of this client's advertisements: advertise first"
                        ),
                    ))
                }
            }
            Message::Unsubscribe(id) => {
                if self.clients.get_mut(&client).is_some_and(|c| c.subs.remove(&id)) {
                    self.remove_sub(&id, out);
                    Ok(None)
                } else {
                    Err((ErrorCode::UnknownId, format!("no subscription {id} of this client")))
                }
            }
            Message::Unadvertise(id) => {
                if self.clients.get_mut(&client).is_some_and(|c| c.advs.remove(&id)) {
                    self.withdraw_adv(&id, out);
                    Ok(None)
                } else {
                    Err((ErrorCode::UnknownId, format!("no advertisement {id} of this client")))
                }
            }
        };
        out.push(Output::Reply { client, req, result });
    }

    fn client_gone(&mut self, client: ClientId, out: &mut Vec<Output>) {
        let Some(state) = self.clients.remove(&client) else { return };
        for id in &state.subs {
            self.remove_sub(id, out);
        }
        for id in &state.advs {
            self.withdraw_adv(id, out);
        }
    }

    fn broker_message(&mut self, from: Name, message: BrokerMessage, out: &mut Vec<Output>) {
        if !self.neighbours.contains(&from) {
            // A message racing a link that is already down; its state would be dropped.
            return;
        }
        let hop = Hop::Broker(from);
        match message {
            BrokerMessage::Advertise { id, adv, hops } => self.install_adv(id, adv, hop, hops, out),
            BrokerMessage::Subscribe { id, sub } => self.install_sub(id, sub, hop, out),
            BrokerMessage::Publish { publication } => self.route_publication(publication, &hop, out),
            BrokerMessage::Unsubscribe { id } => {
                if self.subs.get(&id).is_some_and(|e| e.last == hop) {
                    self.remove_sub(&id, out);
                }
            }
            BrokerMessage::Unadvertise { id, lost: false } if self.cycles => {
                // A withdrawal by the owner: final, whichever way it arrives.
                if self.withdrawn.insert(id.clone()) {
                    self.remove_adv(&id, false, out);
                    for n in &self.neighbours {
                        if hop != Hop::Broker(n.clone()) {
                            out.push(Output::ToBroker {
                                to: n.clone(),
                                message: BrokerMessage::Unadvertise { id: id.clone(), lost: false },
                            });
                        }
                    }
                }
            }
            BrokerMessage::Unadvertise { id, lost } => {
                if self.advs.get(&id).is_some_and(|e| e.last == hop) {
                    self.remove_adv(&id, lost, out);
                }
            }
            BrokerMessage::TreeSubscribe { id, tree, sub } => {
                let root = self.advs.get(&tree).map(|e| e.last.clone());
                if let Some(root) = root {
                    self.add_to_tree(&tree, &root, &id, &sub, hop, out);
                }
            }
            BrokerMessage::TreeUnsubscribe { id, tree } => {
                let left = self.trees.leave(&tree, &id, &hop);
                self.withdraw_up(&tree, &id, left, out);
            }
            BrokerMessage::TreePublish { tree, publication } => {
                self.route_on_tree(&tree, publication, &hop, out);
            }
        }
    }

    /// Files `id` on `tree` and forwards it along the tree.
    fn add_to_tree(
        &mut self,
        tree: &MessageId,
        root: &Hop,
        id: &MessageId,
        sub: &Arc<Subscription>,
        last: Hop,
        out: &mut Vec<Output>,
    ) {
        if let Some(next) = self.trees.add(tree, root, id, sub, last) {
            out.push(Output::ToBroker {
                to: next,
                message: BrokerMessage::TreeSubscribe {
                    id: id.clone(),
                    tree: tree.clone(),
                    sub: sub.clone(),
                },
            });
        }
    }

    fn remove_from_tree(&mut self, tree: &MessageId, id: &MessageId, out: &mut Vec<Output>) {
        let removed = self.trees.remove(tree, id);
        self.withdraw_up(tree, id, removed, out);
    }

    /// A tree entry that is gone is withdrawn from the broker it was sent to.
    fn withdraw_up(
        &mut self,
        tree: &MessageId,
        id: &MessageId,
        gone: Option<trees::TreeSub>,
        out: &mut Vec<Output>,
    ) {
        if let Some(next) = gone.and_then(|e| e.sent_to) {
            out.push(Output::ToBroker {
                to: next,
                message: BrokerMessage::TreeUnsubscribe { id: id.clone(), tree: tree.clone() },
            });
        }
    }

    fn route_on_tree(
        &mut self,
        tree: &MessageId,
        publication: Arc<Publication>,
        last: &Hop,
        out: &mut Vec<Output>,
    ) {
        let next = self.trees.route(tree, &publication, last, &mut self.scratch);
        emit(next, &publication, Some(tree), out);
    }

    fn neighbour_up(&mut self, name: Name, out: &mut Vec<Output>) {
        if self.neighbours.contains(&name) {
            // Up again without a down in between: the peer may have restarted, so
            // start over with it.
            self.neighbour_down(&name, out);
        }
        self.neighbours.insert(name.clone());
        let hop = Hop::Broker(name.clone());
        // With cycles, the parent gets a copy too: if it has withdrawn the advertisement
        // meanwhile (the news lost with the link), it answers with the withdrawal.
        let mut advs: Vec<MessageId> = self
            .advs
            .iter()
            .filter(|(_, e)| self.cycles || e.last != hop)
            .map(|(id, _)| id.clone())
            .collect();
        advs.sort();
        for id in advs {
            self.offer_adv(&id, &name, out);
        }
        if self.cycles {
            // Trees whose path runs through it get their subscriptions back.
            let mut trees: Vec<MessageId> =
                self.advs.iter().filter(|(_, e)| e.last == hop).map(|(id, _)| id.clone()).collect();
            trees.sort();
            for tree in trees {
                for (sub_id, sub) in self.trees.resend(&tree, &name) {
                    let message = BrokerMessage::TreeSubscribe { id: sub_id, tree: tree.clone(), sub };
                    out.push(Output::ToBroker { to: name.clone(), message });
                }
            }
        }
    }

    fn neighbour_down(&mut self, name: &Name, out: &mut Vec<Output>) {
        if !self.neighbours.remove(name) {
            return;
        }
        for e in self.subs.values_mut() {
            e.sent_to.remove(name);
            e.held.remove(name);
        }
        for e in self.advs.values_mut() {
            e.sent_to.remove(name);
            e.held.remove(name);
        }
        self.trees.forget_hop(name);
        let hop = Hop::Broker(name.clone());
        for (tree, id) in self.trees.held_by(&hop) {
            let left = self.trees.leave(&tree, &id, &hop);
            self.withdraw_up(&tree, &id, left, out);
        }
        let mut subs: Vec<MessageId> =
            self.subs.iter().filter(|(_, e)| e.last == hop).map(|(id, _)| id.clone()).collect();
        subs.sort();
        for id in subs {
            self.remove_sub(&id, out);
        }
        if self.cycles {
            // Advertisements whose path used the link stay, waiting for it (or a shorter
            // path) to return; removing them would race their copies still circling.
            return;
        }
        let mut advs: Vec<MessageId> =
            self.advs.iter().filter(|(_, e)| e.last == hop).map(|(id, _)| id.clone()).collect();
        advs.sort();
        for id in advs {
            self.remove_adv(&id, true, out);
        }
    }

    fn install_adv(
        &mut self,
        id: MessageId,
        adv: Arc<Advertisement>,
        last: Hop,
        hops: u32,
        out: &mut Vec<Output>,
    ) {
        if let Some(e) = self.advs.get(&id) {
            if !self.cycles && e.last != last {
                self.rehome_adv(&id, last, out);
            } else if self.cycles && e.last != last && hops < e.distance {
                self.shorter_path(&id, last, hops, out);
            }
            return;
        }
        if self.cycles {
            if self.withdrawn.contains(&id) {
                // A copy of a withdrawn advertisement: tell the sender, which may have
                // missed the withdrawal when a link dropped it.
                if let Hop::Broker(b) = last {
                    out.push(Output::ToBroker {
                        to: b,
                        message: BrokerMessage::Unadvertise { id, lost: false },
                    });
                }
                return;
            }
            if let Hop::Broker(b) = &last {
                if id.origin == self.name {
                    // One of ours we do not know: from an earlier life of this broker,
                    // still circulating. Withdraw it for good.
                    self.withdrawn.insert(id.clone());
                    let message = BrokerMessage::Unadvertise { id, lost: false };
                    out.push(Output::ToBroker { to: b.clone(), message });
                    return;
                }
            }
        }
        self.adv_index.insert(id.clone(), adv.clone());
        let entry = AdvEntry {
            adv: adv.clone(),
            last: last.clone(),
            distance: hops,
            sent_to: BTreeSet::new(),
            held: BTreeSet::new(),
        };
        self.advs.insert(id.clone(), entry);
        let flood: Vec<Name> =
            self.neighbours.iter().filter(|n| last != Hop::Broker((*n).clone())).cloned().collect();
        for n in &flood {
            self.offer_adv(&id, n, out);
        }
        if self.cycles {
            // Every local subscription it overlaps joins its tree.
            let mut pulled = self.sub_index.overlapping(&adv);
            pulled.sort();
            for sub_id in pulled {
                let Some(e) = self.subs.get(&sub_id) else { continue };
                let sub = e.sub.clone();
                let from = e.last.clone();
                self.add_to_tree(&id, &last, &sub_id, &sub, from, out);
            }
        } else if let Hop::Broker(b) = &last {
            let mut pulled = self.sub_index.overlapping(&adv);
            pulled.sort();
            for sub_id in pulled {
                if self.subs.get(&sub_id).is_some_and(|e| e.last != last) {
                    self.offer(&sub_id, b, out);
                }
            }
        }
    }

    fn install_sub(&mut self, id: MessageId, sub: Arc<Subscription>, last: Hop, out: &mut Vec<Output>) {
        if let Some(e) = self.subs.get_mut(&id) {
            if !self.cycles && e.last != last {
                // The overlay changed under it: this copy came the current way.
                if let Hop::Broker(b) = &last {
                    e.sent_to.remove(b);
                    e.held.remove(b);
                }
                e.last = last.clone();
                let sub = e.sub.clone();
                for b in self.hops_for(&sub, &last) {
                    self.offer(&id, &b, out);
                }
            }
            return;
        }
        let hops = self.hops_for(&sub, &last);
        self.sub_index.insert(id.clone(), sub.clone());
        self.subs.insert(
            id.clone(),
            SubEntry {
                sub: sub.clone(),
                last: last.clone(),
                sent_to: BTreeSet::new(),
                held: BTreeSet::new(),
            },
        );
        if self.cycles {
            // On the tree of every advertisement it overlaps, local ones included.
            let mut trees: Vec<(MessageId, Hop)> = self
                .adv_index
                .overlapping(&sub)
                .into_iter()
                .filter_map(|a| Some((a.clone(), self.advs.get(&a)?.last.clone())))
                .collect();
            trees.sort();
            for (tree, root) in trees {
                self.add_to_tree(&tree, &root, &id, &sub, last.clone(), out);
            }
            return;
        }
        for b in &hops {
            self.offer(&id, b, out);
        }
    }

    /// Subscription `id` should reach broker `to`: send it, or hold it back if covered
    /// there; with active covering, sending it withdraws the ones it covers.
    fn offer(&mut self, id: &MessageId, to: &Name, out: &mut Vec<Output>) {
        let Some(e) = self.subs.get(id) else { return };
        if e.sent_to.contains(to) {
            return;
        }
        let sub = e.sub.clone();
        if self.covering != Covering::Off && self.covered_at(id, &sub, to) {
            if let Some(e) = self.subs.get_mut(id) {
                e.held.insert(to.clone());
            }
            return;
        }
        if let Some(e) = self.subs.get_mut(id) {
            e.held.remove(to);
            e.sent_to.insert(to.clone());
        }
        out.push(Output::ToBroker {
            to: to.clone(),
            message: BrokerMessage::Subscribe { id: id.clone(), sub: sub.clone() },
        });
        if self.covering == Covering::Active {
            let hop = Hop::Broker(to.clone());
            let mut covered: Vec<MessageId> = self
                .subs
                .iter()
                .filter(|(other, e)| {
                    *other != id && e.last != hop && e.sent_to.contains(to) && covers(&sub, &e.sub)
                })
                .map(|(other, _)| other.clone())
                .collect();
            covered.sort();
            for other in covered {
                if let Some(e) = self.subs.get_mut(&other) {
                    e.sent_to.remove(to);
                    e.held.insert(to.clone());
                }
                out.push(Output::ToBroker {
                    to: to.clone(),
                    message: BrokerMessage::Unsubscribe { id: other },
                });
            }
        }
    }

    /// True if another subscription already sent to `to`, from elsewhere, covers `sub`.
    fn covered_at(&self, id: &MessageId, sub: &Subscription, to: &Name) -> bool {
        let hop = Hop::Broker(to.clone());
        self.subs
            .iter()
            .any(|(other, e)| other != id && e.last != hop && e.sent_to.contains(to) && covers(&e.sub, sub))
    }

    /// Sends, in a stable order, the subscriptions held back at `to` that nothing sent
    /// there covers any more.
    fn release_held(&mut self, to: &Name, out: &mut Vec<Output>) {
        let mut held: Vec<MessageId> =
            self.subs.iter().filter(|(_, e)| e.held.contains(to)).map(|(id, _)| id.clone()).collect();
        held.sort();
        for id in held {
            if let Some(e) = self.subs.get_mut(&id) {
                e.held.remove(to);
            }
            self.offer(&id, to, out);
        }
    }

    fn remove_sub(&mut self, id: &MessageId, out: &mut Vec<Output>) {
        let Some(e) = self.subs.remove(id) else { return };
        self.sub_index.remove(id);
        for tree in self.trees.trees_of(id) {
            self.remove_from_tree(&tree, id, out);
        }
        for b in e.sent_to {
            // What this one covered goes first, so the link is never without either.
            if self.covering != Covering::Off {
                self.release_held(&b, out);
            }
            out.push(Output::ToBroker { to: b, message: BrokerMessage::Unsubscribe { id: id.clone() } });
        }
    }

    /// Advertisement `id` should be flooded to `to`: send it, or hold it back if one
    /// flooded there covers it; with active covering, sending it withdraws the ones it
    /// covers.
    fn offer_adv(&mut self, id: &MessageId, to: &Name, out: &mut Vec<Output>) {
        let Some(e) = self.advs.get(id) else { return };
        if e.sent_to.contains(to) {
            return;
        }
        let adv = e.adv.clone();
        let distance = e.distance;
        let hop = Hop::Broker(to.clone());
        let flooded_here = |e: &AdvEntry| e.last != hop && e.sent_to.contains(to);
        if self.covering != Covering::Off
            && self.advs.iter().any(|(other, e)| other != id && flooded_here(e) && adv_covers(&e.adv, &adv))
        {
            if let Some(e) = self.advs.get_mut(id) {
                e.held.insert(to.clone());
            }
            return;
        }
        if let Some(e) = self.advs.get_mut(id) {
            e.held.remove(to);
            e.sent_to.insert(to.clone());
        }
        out.push(Output::ToBroker {
            to: to.clone(),
            message: BrokerMessage::Advertise { id: id.clone(), adv: adv.clone(), hops: distance + 1 },
        });
        if self.covering == Covering::Active {
            let mut covered: Vec<MessageId> = self
                .advs
                .iter()
                .filter(|(other, e)| *other != id && flooded_here(e) && adv_covers(&adv, &e.adv))
                .map(|(other, _)| other.clone())
                .collect();
            covered.sort();
            for other in covered {
                if let Some(e) = self.advs.get_mut(&other) {
                    e.sent_to.remove(to);
                    e.held.insert(to.clone());
                }
                out.push(Output::ToBroker {
                    to: to.clone(),
                    message: BrokerMessage::Unadvertise { id: other, lost: true },
                });
            }
        }
    }

    /// The brokers of the advertisements `sub` overlaps, except `last`.
    fn hops_for(&self, sub: &Subscription, last: &Hop) -> BTreeSet<Name> {
        let mut hops = BTreeSet::new();
        for adv_id in self.adv_index.overlapping(sub) {
            if let Some(AdvEntry { last: Hop::Broker(b), .. }) = self.advs.get(&adv_id) {
                if *last != Hop::Broker(b.clone()) {
                    hops.insert(b.clone());
                }
            }
        }
        hops
    }

    /// The owner withdraws advertisement `id` (with cycles, for good).
    fn withdraw_adv(&mut self, id: &MessageId, out: &mut Vec<Output>) {
        if self.cycles {
            self.withdrawn.insert(id.clone());
        }
        self.remove_adv(id, false, out);
    }

    /// With cycles: a copy of a known advertisement came along a shorter path. Move its
    /// tree onto that path (subscriptions leave the old parent for the new one) and tell
    /// the neighbours, which may find their own path shorter through here. Distances only
    /// shrink, so this settles; and no offer through a broker's own subtree is ever
    /// shorter than its distance, so a tree never folds onto itself.
    fn shorter_path(&mut self, id: &MessageId, last: Hop, hops: u32, out: &mut Vec<Output>) {
        let Some(e) = self.advs.get_mut(id) else { return };
        e.last = last.clone();
        e.distance = hops;
        let adv = e.adv.clone();
        for (sub_id, sub, old, new) in self.trees.reroute(id, &last) {
            if let Some(old) = old.filter(|o| self.neighbours.contains(o)) {
                let message = BrokerMessage::TreeUnsubscribe { id: sub_id.clone(), tree: id.clone() };
                out.push(Output::ToBroker { to: old, message });
            }
            if let Some(new) = new {
                let message = BrokerMessage::TreeSubscribe { id: sub_id, tree: id.clone(), sub };
                out.push(Output::ToBroker { to: new, message });
            }
        }
        for n in &self.neighbours {
            if last != Hop::Broker(n.clone()) {
                let message = BrokerMessage::Advertise { id: id.clone(), adv: adv.clone(), hops: hops + 1 };
                out.push(Output::ToBroker { to: n.clone(), message });
            }
        }
    }

    /// A known advertisement arrived from another hop: the tree changed under it (a link
    /// went, another came). Follow the copy that came the current way.
    fn rehome_adv(&mut self, id: &MessageId, last: Hop, out: &mut Vec<Output>) {
        let Some(e) = self.advs.get_mut(id) else { return };
        let old = std::mem::replace(&mut e.last, last.clone());
        let adv = e.adv.clone();
        if let Hop::Broker(b) = &last {
            e.sent_to.remove(b);
            e.held.remove(b);
        }
        // The old side now reaches it through here.
        if let Hop::Broker(o) = &old {
            if self.neighbours.contains(o) {
                self.offer_adv(id, &o.clone(), out);
            }
        }
        if let Hop::Broker(b) = &last {
            let mut pulled = self.sub_index.overlapping(&adv);
            pulled.sort();
            for sub_id in pulled {
                if self.subs.get(&sub_id).is_some_and(|s| s.last != last) {
                    self.offer(&sub_id, b, out);
                }
            }
        }
        if let Hop::Broker(o) = old {
            self.withdraw_unneeded(&o, out);
        }
    }

    fn remove_adv(&mut self, id: &MessageId, lost: bool, out: &mut Vec<Output>) {
        let Some(e) = self.advs.remove(id) else { return };
        self.adv_index.remove(id);
        for n in &e.sent_to {
            // What this one covered goes first, so the neighbour never lacks either.
            if self.covering != Covering::Off {
                let mut held: Vec<MessageId> =
                    self.advs.iter().filter(|(_, a)| a.held.contains(n)).map(|(id, _)| id.clone()).collect();
                held.sort();
                for other in held {
                    if let Some(a) = self.advs.get_mut(&other) {
                        a.held.remove(n);
                    }
                    self.offer_adv(&other, n, out);
                }
            }
            out.push(Output::ToBroker {
                to: n.clone(),
                message: BrokerMessage::Unadvertise { id: id.clone(), lost },
            });
        }
        if self.cycles {
            // Every broker drops the tree with the advertisement.
            self.trees.drop_tree(id);
            return;
        }
        if let Hop::Broker(b) = &e.last {
            self.withdraw_unneeded(b, out);
        }
    }

    /// Withdraws from broker `b` the subscriptions sent (or held) toward it that no
    /// advertisement from `b` overlaps any more.
    fn withdraw_unneeded(&mut self, b: &Name, out: &mut Vec<Output>) {
        let from_b = Hop::Broker(b.clone());
        let mut withdrawn: Vec<MessageId> = Vec::new();
        for (sub_id, s) in &self.subs {
            if s.sent_to.contains(b) || s.held.contains(b) {
                let still = self
                    .adv_index
                    .overlapping(&s.sub)
                    .iter()
                    .any(|a| self.advs.get(a).is_some_and(|a| a.last == from_b));
                if !still {
                    withdrawn.push(sub_id.clone());
                }
            }
        }
        withdrawn.sort();
        for sub_id in withdrawn {
            let Some(s) = self.subs.get_mut(&sub_id) else { continue };
            s.held.remove(b);
            if s.sent_to.remove(b) {
                out.push(Output::ToBroker {
                    to: b.clone(),
                    message: BrokerMessage::Unsubscribe { id: sub_id },
                });
            }
        }
    }

    fn route_publication(&mut self, publication: Arc<Publication>, last: &Hop, out: &mut Vec<Output>) {
        let mut matched = Vec::new();
        self.sub_index.matches_into(&publication, &mut self.scratch, &mut matched);
        let mut next = Next::default();
        for id in &matched {
            if let Some(e) = self.subs.get(id) {
                next.add(id, &e.last, last);
            }
        }
        emit(next, &publication, None, out);
    }
}

/// Sends `publication` to the next hops: on `tree` if there is one.
fn emit(next: Next, publication: &Arc<Publication>, tree: Option<&MessageId>, out: &mut Vec<Output>) {
    for to in next.brokers {
        let publication = publication.clone();
        let message = match tree {
            Some(tree) => BrokerMessage::TreePublish { tree: tree.clone(), publication },
            None => BrokerMessage::Publish { publication },
        };
        out.push(Output::ToBroker { to, message });
    }
    for (client, mut subs) in next.clients {
        subs.sort();
        out.push(Output::Notify { client, subs, publication: publication.clone() });
    }
}
