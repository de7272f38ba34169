//! The router: publish–subscribe–advertise routing as a sans-IO state machine.
//!
//! A [`Router`] is one broker's routing state: its neighbours (the overlay routing table),
//! the advertisements it knows with the hop each came from (the SRT), and the
//! subscriptions with the hop each came from and the brokers each was forwarded to (the
//! PRT). Inputs are `(time, input)` through [`Router::handle`]; every decision comes out as
//! [`Output`]s to send. There is no socket, clock, task or lock inside, so a test can run
//! many routers in one thread and replay any run exactly. Handlers are named after what
//! happened (`client_request`, `broker_message`, `neighbour_up`, …); outputs are pushed.
//!
//! Where things live:
//!
//! - `mod.rs` (this file): the inputs and outputs, the tables, and the routing rules below.
//! - `covering.rs`: [`Covering`] and the one mechanism that sends, holds back and releases
//!   entries of the SRT and the PRT alike (`Table::offer`).
//! - `cycles.rs`: cyclic overlays, one spanning tree per advertisement, with covering per
//!   tree.
//! - `composite.rs`: where composite subscriptions are detected and how their parts travel;
//!   `detection.rs`: the detection stage ([`Detection`]) that runs the detectors on what
//!   the router decides, inside the router or, offloaded, after it.
//! - `sub_routes.rs`: what a publication's routing needs of each subscription it matched
//!   (hop, detector role), under the number the matching engine indexes it by.
//! - `rejoin.rs`: a neighbour that restarted keeps its routes here while it
//!   re-synchronises, and the publications for it wait until its subscriptions are back.
//! - `settle.rs`: settled replies: `advertise` and `subscribe` are answered once they have
//!   taken effect everywhere they must.
//!
//! The overlay's shape is a type (`Overlay::Acyclic` or `Overlay::Cyclic` with its trees),
//! so the state only cycles need exists only with cycles.
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
//!   A neighbour that restarted while its link session here lasted keeps its entries
//!   until it sends them again (`rejoin.rs`).
//!
//! Matching and overlap queries use the indexes of [`crate::matching`].
//!
//! **Overlay changes.** An `Unadvertise` says whether the sender *lost* its path (a link
//! went down) or the owner *withdrew* the advertisement. In a tree, a known advertisement
//! or subscription arriving from another hop means the tree was rewired while messages
//! were in flight: the router follows the copy that came the new way, so the old path's
//! late withdrawal finds nothing to remove. `NeighbourUp` for a neighbour already up
//! starts over with it (the peer may have restarted).
//!
//! **Cyclic overlays** are opt-in ([`Options::cycles`]). Ids carry the broker's incarnation
//! ([`Options::incarnation`]), so a restarted broker recognises, and withdraws, its own
//! advertisements from an earlier life. A lost link does not remove advertisements (their
//! copies may still be circling, and a removal racing them would never settle). Instead a
//! broker whose path to an advertiser went over the lost link asks the advertiser's broker
//! (a [`BrokerMessage::TreeRepair`] flooded once per broker) to flood the advertisement
//! again, one *epoch* higher; every broker takes the first copy of the new epoch as its
//! path, as with the first flood, and moves the tree's subscriptions there. Each copy also
//! carries its path length, and within an epoch a broker moves a tree onto a strictly
//! shorter path when one appears. While a tree moves, a publication can come over the old
//! path and the new: each broker routes a tree's publications only in their publisher's
//! broker's order (stamp numbers), so none is delivered twice or out of order; one that
//! was on the lost link, or overtaken on the new path, is lost. Limits: one publisher's
//! publications keep their order per advertisement, not across advertisements with
//! different trees. A link drop reaches the router only when its link session ends
//! ([`crate::resume`]), so a tree moves `link_sessions.window_ms` after its link is lost.
//!
//! **Composite subscriptions** (`composite.rs`): placed where their parts' publications
//! meet (PADRES's destination tree), detected there by [`crate::detector`], their leaves
//! routed as ordinary subscriptions of the local detectors ([`Hop::Detector`]). What the
//! detectors are fed, and when they start and stop, comes out as [`DetectorOp`]s applied
//! to a [`Detection`]: at once by default, or by the caller ([`Options::offload_detection`],
//! [`Output::Detect`]; a broker runs them on a thread of their own). Every
//! publication is stamped by its publisher's broker ([`padres_lang::Stamp`]), the order
//! detection uses.
//!
//! **History** (`history.rs`): the broker's history store is a hop too ([`Hop::History`]):
//! its filters ([`Input::KeepHistory`]) are its subscriptions, and a publication they match
//! here comes out as [`Output::Store`]. Stores advertise their filters; a subscription
//! whose `time` range reaches into the past is answered from every store it meets
//! ([`Output::HistoryQuery`], [`Input::HistoryAnswer`]), then continues live after one
//! [`Output::EndOfHistory`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use padres_lang::wire::{ErrorCode, Forwarded};
use padres_lang::{
    Advertisement, Message, MessageId, Name, Publication, Stamp, Stamped, Subscription, Timestamp,
};

use crate::auth::Rights;
use crate::detector::{Bounds, Counters};
use crate::matching::{AdvertisementIndex, Scratch, SubscriptionIndex, conforms};

mod composite;
mod covering;
mod cycles;
mod detection;
mod history;
mod principals;
mod rejoin;
mod settle;
mod sub_routes;

pub use composite::DetectorRow;
use composite::{Composites, Stage};
pub use detection::{Detection, DetectorOp, Subscribers};

pub use covering::Covering;
use covering::{Advertisements, Entry, Offered, Subscriptions, Table};
use cycles::{Awaited, Ctx, Cycles, Next};
use history::Histories;
pub use history::{DEFAULT_MAX_RESULTS, DEFAULT_TIMEOUT_MS, history_chunk_bytes};
use principals::Principals;
use rejoin::Rejoin;
use settle::{Settle, Waiter};
use sub_routes::SubRoutes;

/// A client connection, numbered by the I/O shell.
pub type ClientId = u64;

/// The refusal of a client's advertisement or publication of the reserved class.
fn reserved_class() -> (ErrorCode, String) {
    (
        ErrorCode::Forbidden,
        format!(
            "class '{}' is reserved for brokers' reports on themselves; clients may subscribe to it",
            crate::monitor::CLASS
        ),
    )
}

/// The client id of the broker itself, publishing its reports on the reserved class
/// [`crate::monitor::CLASS`] (and subscribing to others' for its federation view). Only it
/// may publish on that class.
pub const BROKER_CLIENT: ClientId = ClientId::MAX;

/// Where a message came from or goes to: a local client or a neighbour broker.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hop {
    /// A client connected to this broker.
    Client(ClientId),
    /// A neighbour broker.
    Broker(Name),
    /// This broker's composite detectors (their leaf and `until` subscriptions).
    Detector,
    /// This broker's history store (its filters, [`Router::keep_history`]).
    History,
}

impl fmt::Display for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Client(BROKER_CLIENT) => f.write_str("this broker"),
            Self::Client(c) => write!(f, "client {c}"),
            Self::Broker(b) => write!(f, "broker {b}"),
            Self::Detector => f.write_str("detectors"),
            Self::History => f.write_str("history store"),
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
        /// Its request number, echoed in the reply; `None` for a streamed publication,
        /// whose success is not answered (a refusal is, without a number).
        req: Option<u64>,
        /// What it asks.
        message: Message,
    },
    /// A client connected as a principal with these rights (before its first request; a
    /// client never given any may do anything).
    ClientRights {
        /// The client.
        client: ClientId,
        /// What it may do.
        rights: Arc<Rights>,
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
    /// A neighbour that lost what this broker had sent it (it restarted) is up again with
    /// a new link session; `kept` are the publications for it that it may not have passed
    /// on, and those routed to it since it was found out, in order (`rejoin.rs`).
    NeighbourRestarted {
        /// The neighbour.
        name: Name,
        /// Publications for it, with their stamps.
        kept: Vec<(Arc<Publication>, Stamp)>,
    },
    /// This broker's history store keeps what this filter selects: it becomes a
    /// subscription of [`Hop::History`], routed like any other, and every publication it
    /// matches here comes out as an [`Output::Store`]. Given once per filter when the
    /// broker starts.
    KeepHistory(Subscription),
    /// This broker's history store answered query `query` (`Err`: it could not).
    HistoryAnswer {
        /// The historic subscription's id.
        query: MessageId,
        /// What it holds that the query selects, in time order.
        result: Result<Vec<Stamped>, String>,
    },
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
        /// The request answered (`None`: a streamed publication, refused).
        req: Option<u64>,
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
        /// A stored publication answering a historic subscription: one of a burst of up
        /// to `max_results`, already held in memory, that the client is not expected to
        /// read as fast as it comes (the shell does not count it toward a slow client's
        /// backlog).
        historic: bool,
    },
    /// Keep a publication in this broker's history store. When `ack` names a client's
    /// request, the router has not answered it: the shell does, once the publication is
    /// stored (or queued, by the store's durability setting).
    Store {
        /// Where and when the publication entered the federation.
        stamp: Stamp,
        /// The publication.
        publication: Arc<Publication>,
        /// The publishing client's request waiting on it, if the publisher is here.
        ack: Option<(ClientId, u64)>,
    },
    /// Ask this broker's history store what it holds that `sub` selects (at most `limit`),
    /// behind the publications already handed to it; the answer comes back as
    /// [`Input::HistoryAnswer`].
    HistoryQuery {
        /// The historic subscription's id.
        query: MessageId,
        /// What to select.
        sub: Arc<Subscription>,
        /// Most publications wanted.
        limit: u64,
    },
    /// Every stored publication of a client's historic subscription has been delivered.
    EndOfHistory {
        /// The client.
        client: ClientId,
        /// The subscription.
        sub: MessageId,
        /// How many stored publications were delivered.
        count: u64,
        /// Stores (by broker) that did not answer in time.
        missing: Vec<Name>,
        /// More were stored than one subscription is given.
        truncated: bool,
    },
    /// Deliver a match of a composite subscription to a client.
    CompositeNotify {
        /// The client.
        client: ClientId,
        /// The composite subscription.
        sub: MessageId,
        /// The publications used, with the leaf each was used for, sorted by leaf.
        pubs: Vec<(u32, Arc<Publication>)>,
    },
    /// Apply `op` to this broker's [`Detection`] at time `now`, after every `Detect`
    /// output before it, and handle what it outputs as this router's. Only with
    /// [`Options::offload_detection`].
    Detect {
        /// The router's time when it decided.
        now: u64,
        /// What to do.
        op: DetectorOp,
    },
}

/// How a router routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Subscription and advertisement covering.
    pub covering: Covering,
    /// Allow cycles in the overlay (per-advertisement trees, `cycles.rs`).
    pub cycles: bool,
    /// Which life of this broker this is (e.g. its start time): the high half of every
    /// id it assigns, so ids of an earlier life never come back.
    pub incarnation: u32,
    /// Most subscriptions one client may hold, a composite one counting one per atomic part
    /// (`None`: no limit); one more is refused
    /// with [`ErrorCode::LimitExceeded`].
    pub max_subscriptions_per_client: Option<usize>,
    /// Detect a client's composite subscription at its own broker, every leaf an ordinary
    /// subscription (PADRES 2.1's strategy), instead of in the network. For comparisons.
    pub detect_at_subscriber: bool,
    /// What composite detectors may store and produce.
    pub detector_bounds: Bounds,
    /// Leave composite detection to the caller: every detector operation comes out as an
    /// [`Output::Detect`] for a [`Detection`] the caller runs (on another thread, say), and
    /// the router's counters and timers leave the detectors out. Off: the router runs them.
    pub offload_detection: bool,
    /// How long a historic query waits for the stores beyond this broker (ms).
    pub history_timeout_ms: u64,
    /// Most stored publications delivered for one historic subscription.
    pub history_max_results: u64,
    /// Most bytes (estimated) of stored publications in one answer to a neighbour: under
    /// this broker's frame limit, which the brokers on the way should share
    /// ([`history_chunk_bytes`]).
    pub history_chunk_bytes: usize,
    /// How long a restarted neighbour is given to send again the routes it had sent
    /// (ms; `rejoin.rs`); what it has not sent by then is withdrawn.
    pub rejoin_ms: u64,
    /// Most bytes (estimated) of publications held for one restarted neighbour.
    pub rejoin_max_bytes: usize,
    /// How long a request or a forwarded copy waits to settle before it is answered with
    /// what has (ms; `settle.rs`).
    pub settle_timeout_ms: u64,
    /// Most bytes (estimated) of tree ids in one message carrying a subscription on several
    /// trees ([`tree_batch_bytes`]).
    pub tree_batch_bytes: usize,
}

/// Room for tree ids in one [`BrokerMessage::TreeSubscribe`] under frame limit
/// `max_frame`: a quarter of it, at most 16 KiB (over a thousand trees of brokers with
/// short names). A client's subscription must leave this room (`net/session.rs`).
pub const fn tree_batch_bytes(max_frame: usize) -> usize {
    let quarter = max_frame / 4;
    if quarter < 16 << 10 { quarter } else { 16 << 10 }
}

/// How long a request waits to settle unless configured otherwise (ms): well past a
/// round trip across a thousand brokers, short of a link session's window, so a reply
/// held up by a neighbour that never answers still comes within seconds.
pub const DEFAULT_SETTLE_TIMEOUT_MS: u64 = 5_000;

impl Options {
    /// Covering off, a tree, no limits but the defaults.
    pub const DEFAULT: Self = Self {
        covering: Covering::Off,
        cycles: false,
        incarnation: 0,
        max_subscriptions_per_client: None,
        detect_at_subscriber: false,
        detector_bounds: Bounds::DEFAULT,
        offload_detection: false,
        history_timeout_ms: DEFAULT_TIMEOUT_MS,
        history_max_results: DEFAULT_MAX_RESULTS,
        history_chunk_bytes: history_chunk_bytes(padres_lang::wire::codec::DEFAULT_MAX_FRAME),
        rejoin_ms: crate::resume::DEFAULT_WINDOW_MS,
        rejoin_max_bytes: crate::resume::DEFAULT_MAX_BYTES,
        settle_timeout_ms: DEFAULT_SETTLE_TIMEOUT_MS,
        tree_batch_bytes: tree_batch_bytes(padres_lang::wire::codec::DEFAULT_MAX_FRAME),
    };
}

impl Default for Options {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The shape of the overlay, with the state only that shape needs.
#[derive(Debug)]
enum Overlay {
    /// A tree: one path between any two brokers.
    Acyclic,
    /// Cycles allowed: every advertisement routes on a spanning tree of its own.
    Cyclic(Cycles),
}

/// The atomic parts of `cs`: its leaves and its `until` filter.
fn composite_atoms(cs: &padres_lang::CompositeSubscription) -> usize {
    cs.atoms().count() + usize::from(cs.until_filter().is_some())
}

#[derive(Debug, Default)]
struct ClientState {
    /// Its principal and what it may do; `None`: anything (a client of the broker itself,
    /// or of a caller that gives no rights).
    rights: Option<Arc<Rights>>,
    /// Its principal's `max_publish_rate`, copied here: a publication's check touches
    /// nothing else.
    publish_rate: Option<u32>,
    /// Its advertisements, each with the attributes its publications must carry (those of
    /// the permit filter that allowed it; none without permits), kept inline.
    advs: BTreeMap<MessageId, smallvec::SmallVec<[Name; 2]>>,
    subs: BTreeSet<MessageId>,
    /// Composite subscriptions, with their number of atomic parts (leaves and `until`).
    composites: BTreeMap<MessageId, usize>,
    /// The atomic parts of all of them.
    composite_atoms: usize,
}

impl ClientState {
    /// What counts against `max_subscriptions_per_client`: each subscription, and each
    /// atomic part of a composite one (each may become a routing table entry).
    fn held(&self) -> usize {
        self.subs.len() + self.composite_atoms
    }
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
    /// Composite subscriptions: id, text, hop it came from, brokers its parts went to.
    pub composites: Vec<(MessageId, String, Hop, Vec<Name>)>,
    /// How many rows of the SRT, the PRT and the composites the page's filter selects (all
    /// of them without a filter), of which `srt`, `prt` and `composites` list a page.
    pub matched: [usize; 3],
}

/// Which rows [`Router::routes_page`] lists of each table.
#[derive(Clone, Copy, Debug)]
pub struct RoutesPage<'a> {
    /// Rows skipped, of those the filter selects.
    pub offset: usize,
    /// Most rows listed.
    pub limit: usize,
    /// Rows whose id, text, origin or destinations contain it (ASCII case ignored); empty:
    /// every row.
    pub filter: &'a str,
}

impl RoutesPage<'_> {
    /// The page of `rows` (each written out only if needed) that `needle`, lowercase,
    /// selects; counts every selected row in `matched`.
    fn select<R>(
        &self,
        needle: &str,
        matched: &mut usize,
        rows: impl Iterator<Item = impl FnOnce() -> R>,
        text: impl Fn(&R) -> String,
    ) -> Vec<R> {
        let mut page = Vec::new();
        for row in rows {
            if needle.is_empty() {
                if *matched >= self.offset && page.len() < self.limit {
                    page.push(row());
                }
            } else {
                let row = row();
                if !text(&row).to_ascii_lowercase().contains(needle) {
                    continue;
                }
                if *matched >= self.offset && page.len() < self.limit {
                    page.push(row);
                }
            }
            *matched += 1;
        }
        page
    }
}

/// What a routing-table row's filter looks in.
fn route_text(id: &MessageId, text: &str, from: &Hop, to: &[Name]) -> String {
    let mut all = format!("{id} {text} {from}");
    for name in to {
        all.push(' ');
        all.push_str(name.as_str());
    }
    all
}

/// One broker's routing state (see the module docs).
#[derive(Debug)]
pub struct Router {
    name: Name,
    covering: Covering,
    overlay: Overlay,
    seq: u64,
    max_subs_per_client: usize,
    neighbours: BTreeSet<Name>,
    clients: foldhash::HashMap<ClientId, ClientState>,
    /// The SRT.
    advs: Table<Advertisements>,
    adv_index: AdvertisementIndex<MessageId>,
    /// The PRT.
    subs: Table<Subscriptions>,
    /// The PRT's subscriptions, indexed under their routes' numbers.
    sub_index: SubscriptionIndex<u32>,
    routes: SubRoutes,
    scratch: Scratch,
    /// The subscriptions a publication matched, reused from one to the next.
    matched: Vec<u32>,
    settle: Settle,
    /// While the current input is handled: every copy offered to a neighbour (sent now,
    /// sent earlier, or held back behind a cover), with the copy its settling waits for.
    awaited: Vec<Awaited>,
    /// The forwarded copies the current input waits on before it is answered, by who
    /// waits (one, or one per tree of a `TreeSubscribe`).
    settling: Vec<(Copies, Waiter)>,
    /// Composite subscriptions and the detectors.
    composites: Composites,
    detect_at_subscriber: bool,
    detector_bounds: Bounds,
    /// While the current input is handled: copies sent to place composite subscriptions,
    /// which the input waits for too.
    placed: Vec<(Forwarded, Name)>,
    /// The advertisements added, removed or moved during the current input.
    srt_changed: Vec<Arc<Advertisement>>,
    /// The time of the current input.
    now: u64,
    /// The last stamp's time and counter.
    stamp_time: u64,
    stamp_seq: u64,
    /// The history store's filters (subscriptions of [`Hop::History`]).
    history_filters: Vec<MessageId>,
    /// While a client's publication is routed: its request, which the store takes over
    /// if the publication is stored here.
    publishing: Option<(ClientId, u64)>,
    /// History stores known, and historic queries under way.
    histories: Histories,
    /// Neighbours that restarted and are re-synchronising (`rejoin.rs`).
    rejoining: BTreeMap<Name, Rejoin>,
    rejoin_ms: u64,
    settle_timeout_ms: u64,
    /// [`Options::tree_batch_bytes`].
    tree_batch_bytes: usize,
    rejoin_max_bytes: usize,
    /// In a tree: per publisher's broker, the stamp counter of the last publication passed
    /// on from a neighbour (one that comes again after a neighbour's restart is dropped).
    passed: foldhash::HashMap<Name, (u64, u64)>,
    replays: Replays,
    /// Client requests refused for want of a right.
    denials: u64,
    /// What each principal holds, against its limits.
    principals: Principals,
}

/// What re-synchronising with restarted neighbours did, for `broker stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replays {
    /// Neighbours found restarted.
    pub restarts: u64,
    /// Publications held for a restarted neighbour and sent to it.
    pub sent: u64,
    /// Publications that were to be held past the limit, and dropped.
    pub dropped: u64,
    /// Publications from a neighbour passed on already (they came again after a restart),
    /// dropped.
    pub duplicates: u64,
}

/// Which forwarded copies an input is answered after.
#[derive(Debug)]
enum Copies {
    /// Copies of this message.
    One(Forwarded),
    /// A subscription's copies on every tree.
    OnEveryTree(MessageId),
    /// None of its own (a composite subscription waits only for what placing it sent).
    Nothing,
}

impl Copies {
    fn include(&self, what: &Forwarded) -> bool {
        match (self, what) {
            (Self::One(one), what) => one == what,
            (Self::OnEveryTree(id), Forwarded::TreeSubscription { id: sub, .. }) => sub == id,
            (Self::OnEveryTree(_) | Self::Nothing, _) => false,
        }
    }
}

impl Router {
    /// A router for broker `name` with no neighbours yet and covering off.
    pub fn new(name: Name) -> Self {
        Self::with_covering(name, Covering::Off)
    }

    /// A router for broker `name` with the given covering mode.
    pub fn with_covering(name: Name, covering: Covering) -> Self {
        Self::with_options(name, Options { covering, ..Options::default() })
    }

    /// A router for broker `name` with `options`.
    pub fn with_options(name: Name, options: Options) -> Self {
        Self {
            max_subs_per_client: options.max_subscriptions_per_client.unwrap_or(usize::MAX),
            seq: u64::from(options.incarnation) << 32,
            name,
            covering: options.covering,
            overlay: if options.cycles { Overlay::Cyclic(Cycles::default()) } else { Overlay::Acyclic },
            neighbours: BTreeSet::new(),
            clients: foldhash::HashMap::default(),
            advs: Table::default(),
            adv_index: AdvertisementIndex::new(),
            subs: Table::default(),
            sub_index: SubscriptionIndex::new(),
            routes: SubRoutes::default(),
            scratch: Scratch::default(),
            matched: Vec::new(),
            settle: Settle::default(),
            awaited: Vec::new(),
            settling: Vec::new(),
            composites: Composites::new(options.detector_bounds, options.offload_detection),
            detect_at_subscriber: options.detect_at_subscriber,
            detector_bounds: options.detector_bounds,
            placed: Vec::new(),
            srt_changed: Vec::new(),
            now: 0,
            stamp_time: 0,
            stamp_seq: u64::from(options.incarnation) << 32,
            history_filters: Vec::new(),
            publishing: None,
            histories: Histories::new(
                options.history_timeout_ms,
                options.history_max_results,
                options.history_chunk_bytes,
            ),
            rejoining: BTreeMap::new(),
            rejoin_ms: options.rejoin_ms,
            settle_timeout_ms: options.settle_timeout_ms,
            tree_batch_bytes: options.tree_batch_bytes,
            rejoin_max_bytes: options.rejoin_max_bytes,
            passed: foldhash::HashMap::default(),
            replays: Replays::default(),
            denials: 0,
            principals: Principals::default(),
        }
    }

    /// Client requests refused because their principal lacked the right.
    pub fn denials(&self) -> u64 {
        self.denials
    }

    /// The principal of client `client`, if it was given one.
    pub fn principal(&self, client: ClientId) -> Option<&str> {
        self.rights(client).map(|r| r.principal.as_str())
    }

    /// What client `client` may do, if it was given rights.
    pub fn rights(&self, client: ClientId) -> Option<&Rights> {
        self.clients.get(&client)?.rights.as_deref()
    }

    /// Counts a request refused outside the router (a query the principal has no right
    /// to), with those it refuses itself.
    pub fn count_denial(&mut self) {
        self.denials += 1;
    }

    /// What re-synchronising with restarted neighbours did so far.
    pub fn replays(&self) -> Replays {
        self.replays
    }

    /// The history store keeps what `filter` selects ([`Input::KeepHistory`]).
    fn keep_history(&mut self, filter: Subscription, out: &mut Vec<Output>) {
        let id = self.next_id();
        let filter = Arc::new(filter);
        self.install_sub(id.clone(), filter.clone(), Hop::History, out);
        self.advertise_store(id.clone(), filter, out);
        self.history_filters.push(id);
    }

    /// The history store's filters, by id.
    pub fn history_filters(&self) -> &[MessageId] {
        &self.history_filters
    }

    /// The broker's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// Handles one input at time `now` (milliseconds, from the caller's clock), appending
    /// what to send to `out`.
    pub fn handle(&mut self, now: u64, input: Input, out: &mut Vec<Output>) {
        self.now = now;
        self.detection_timeout(now);
        let start = out.len();
        self.awaited.clear();
        self.placed.clear();
        self.srt_changed.clear();
        match input {
            Input::Client { client, req, message } => self.client_request(client, req, message, out),
            Input::ClientRights { client, rights } => {
                let state = self.clients.entry(client).or_default();
                state.publish_rate = rights.limits().publish_rate;
                state.rights = Some(rights);
            }
            Input::ClientGone(client) => self.client_gone(client, out),
            Input::Broker { from, message } => self.broker_message(from, message, out),
            Input::NeighbourUp(name) => self.neighbour_up(name, out),
            Input::NeighbourDown(name) => self.neighbour_down(&name, out),
            Input::NeighbourRestarted { name, kept } => self.neighbour_restarted(name, kept, out),
            Input::KeepHistory(filter) => self.keep_history(filter, out),
            Input::HistoryAnswer { query, result } => self.local_answer(&query, result, out),
        }
        if !self.srt_changed.is_empty() {
            self.replace_composites(out);
        }
        for output in &out[start..] {
            if let Output::ToBroker { to, message } = output {
                self.settle.sent(to, message);
                // A withdrawal waits for its copies wherever they were sent from.
                if let BrokerMessage::Unadvertise { id, .. } = message {
                    let what = Forwarded::Unadvertisement(id.clone());
                    self.awaited.push((what.clone(), what, to.clone()));
                }
            }
        }
        for (copies, waiter) in std::mem::take(&mut self.settling) {
            // The input is answered once its own forwarded copies, and the covers' copies
            // standing in for those it held back, have settled.
            let mut needs: BTreeSet<(Forwarded, Name)> = self
                .awaited
                .iter()
                .filter(|(copy, _, _)| copies.include(copy))
                .map(|(_, waits_for, to)| (waits_for.clone(), to.clone()))
                .collect();
            // Composite subscriptions it placed or moved, too.
            needs.extend(self.placed.iter().cloned());
            let deadline = now.saturating_add(self.settle_timeout_ms);
            self.settle.wait(needs, waiter, deadline, out);
        }
        self.start_settled_queries(start, out);
        cycles::coalesce(out, start, self.tree_batch_bytes);
    }

    /// Historic subscriptions answered (settled) during this input send their queries.
    fn start_settled_queries(&mut self, start: usize, out: &mut Vec<Output>) {
        let settled: Vec<MessageId> = out[start..]
            .iter()
            .filter_map(|o| match o {
                Output::Reply { result: Ok(Some(id)), .. } => Some(id.clone()),
                _ => None,
            })
            .collect();
        for id in settled {
            if self.awaits_history_start(&id) {
                self.send_query(&id, out);
            }
            // A composite pattern's leaves reaching into the past.
            for query in self.take_composite_queries(&id) {
                self.send_query(&query, out);
            }
        }
    }

    /// When [`Self::handle_timeout`] has something to do (composite windows expiring,
    /// historic queries timing out).
    pub fn poll_timeout(&self) -> Option<u64> {
        [
            self.detection().and_then(Detection::poll_timeout),
            self.histories.poll_timeout(),
            self.rejoining.values().map(|r| r.until).min(),
            self.settle.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Drops the partial matches whose `within` window has passed at `now`, and finishes
    /// the historic queries whose stores have not all answered in time.
    pub fn handle_timeout(&mut self, now: u64, out: &mut Vec<Output>) {
        self.now = now;
        self.detection_timeout(now);
        let start = out.len();
        self.history_timeouts(now, out);
        self.srt_changed.clear();
        self.rejoin_timeouts(now, out);
        self.settle.handle_timeout(now, out);
        // A historic subscription answered at its deadline reads the stores now, as one
        // answered when its copies settle does.
        self.start_settled_queries(start, out);
        if !self.srt_changed.is_empty() {
            self.replace_composites(out);
        }
        for output in &out[start..] {
            if let Output::ToBroker { to, message } = output {
                self.settle.sent(to, message);
            }
        }
        cycles::coalesce(out, start, self.tree_batch_bytes);
    }

    fn detection_timeout(&mut self, now: u64) {
        if let Stage::Here(detection) = &mut self.composites.stage {
            detection.handle_timeout(now);
        }
    }

    /// The detection stage, unless it is offloaded ([`Options::offload_detection`]).
    pub fn detection(&self) -> Option<&Detection> {
        self.composites.detection()
    }

    /// The composite detectors' counters, the composite subscriptions held, and the
    /// detectors running; with detection offloaded, the detectors' are the caller's to
    /// count (zero here).
    pub fn composite_counters(&self) -> (Counters, usize, usize) {
        let detection = self.detection();
        (
            detection.map(Detection::counters).unwrap_or_default(),
            self.composites.len(),
            detection.map_or(0, Detection::len),
        )
    }

    /// How many composite detectors run here, and those from the `offset`-th by number, at
    /// most `limit`; with detection offloaded, what each holds is the caller's to fill in
    /// (empty here).
    pub fn detectors_page(&self, offset: usize, limit: usize) -> (usize, Vec<DetectorRow>) {
        self.composites.detector_rows(offset, limit)
    }

    /// The caps and windows the composite detectors apply.
    pub fn detector_bounds(&self) -> &Bounds {
        &self.detector_bounds
    }

    /// How many advertisements and subscriptions the tables hold.
    pub fn table_sizes(&self) -> (usize, usize) {
        (self.advs.len(), self.subs.len())
    }

    /// Requests and forwarded messages waiting to settle.
    pub fn unsettled(&self) -> usize {
        self.settle.waiting()
    }

    /// Requests and forwarded copies answered at their settle deadline, not settled.
    pub fn settle_timeouts(&self) -> u64 {
        self.settle.timeouts()
    }

    /// A copy of the routing tables, sorted.
    pub fn routes(&self) -> Routes {
        self.routes_up_to(usize::MAX)
    }

    /// The first `limit` rows of the SRT, PRT and composites by id (the neighbours and
    /// tree entries whole).
    pub fn routes_up_to(&self, limit: usize) -> Routes {
        self.routes_page(&RoutesPage { offset: 0, limit, filter: "" })
    }

    /// One page of each table, sorted by id: the rows `page` selects, and how many rows
    /// its filter selects in all ([`Routes::matched`]). Without a filter only the SRT and
    /// PRT rows listed are written out as text, so asking a broker with a million
    /// subscriptions for ten of them costs a sort of ids, not a million strings; a filter
    /// writes out and reads every row, and the composite table is always written out
    /// whole (it holds clients' patterns, not their parts).
    pub fn routes_page(&self, page: &RoutesPage<'_>) -> Routes {
        let needle = page.filter.to_ascii_lowercase();
        let mut matched = [0; 3];
        let mut adv_ids: Vec<&MessageId> = self.advs.iter().map(|(id, _)| id).collect();
        adv_ids.sort();
        let srt = page.select(
            &needle,
            &mut matched[0],
            adv_ids
                .into_iter()
                .filter_map(|id| self.advs.get(id).map(|e| (id, e)))
                .map(|(id, e)| move || (id.clone(), e.item.to_string(), e.last.clone())),
            |(id, text, from)| route_text(id, text, from, &[]),
        );
        let mut sub_ids: Vec<&MessageId> = self.subs.iter().map(|(id, _)| id).collect();
        sub_ids.sort();
        let prt = page.select(
            &needle,
            &mut matched[1],
            sub_ids.into_iter().filter_map(|id| self.subs.get(id).map(|e| (id, e))).map(|(id, e)| {
                move || {
                    (
                        id.clone(),
                        e.item.to_string(),
                        e.last.clone(),
                        e.sent_to.iter().cloned().collect::<Vec<_>>(),
                    )
                }
            }),
            |(id, text, from, to)| route_text(id, text, from, to),
        );
        let composites = page.select(
            &needle,
            &mut matched[2],
            self.composites.entries().into_iter().map(|row| move || row),
            |(id, text, from, to)| route_text(id, text, from, to),
        );
        Routes {
            neighbours: self.neighbours.iter().cloned().collect(),
            srt,
            prt,
            tree_prt: match &self.overlay {
                Overlay::Acyclic => Vec::new(),
                Overlay::Cyclic(cycles) => cycles.entries(),
            },
            composites,
            matched,
        }
    }

    fn next_id(&mut self) -> MessageId {
        self.seq += 1;
        MessageId::new(self.name.clone(), self.seq)
    }

    /// The stamp of a publication entering here now: never earlier than the last one.
    fn stamp(&mut self) -> Stamp {
        self.stamp_time = self.stamp_time.max(self.now);
        self.stamp_seq += 1;
        Stamp::new(self.stamp_time, self.name.clone(), self.stamp_seq)
    }

    /// Advertisements are covered only in trees: in a cyclic overlay each advertisement's
    /// tree carries its own publications, so none may stand in for another.
    fn adv_covering(&self) -> Covering {
        match self.overlay {
            Overlay::Acyclic => self.covering,
            Overlay::Cyclic(_) => Covering::Off,
        }
    }

    fn client_request(
        &mut self,
        client: ClientId,
        req: Option<u64>,
        message: Message,
        out: &mut Vec<Output>,
    ) {
        let state = self.clients.entry(client).or_default();
        let now = self.now;
        // A publication touches only its rate here; its permit is checked beside the
        // advertisement it conforms to (`client_publish`).
        let rights = if matches!(message, Message::Publish(_)) { None } else { state.rights.clone() };
        if let (Message::Publish(_), Some(rate), Some(rights)) = (&message, state.publish_rate, &state.rights)
            && let Err(refusal) = self.principals.may_publish(&rights.principal, rate, now)
        {
            out.push(Output::Reply { client, req, result: Err(refusal) });
            return;
        }
        if let Some(rights) = &rights {
            if let Err(why) = rights.allows(&message, |sub| history::is_historic(sub, now)) {
                self.denials += 1;
                out.push(Output::Reply { client, req, result: Err((ErrorCode::Forbidden, why)) });
                return;
            }
            let limited = match &message {
                Message::Subscribe(_) => self.principals.may_subscribe(rights, 1),
                Message::CompositeSubscribe(cs) => self.principals.may_subscribe(rights, composite_atoms(cs)),
                _ => Ok(()),
            };
            if let Err(refusal) = limited {
                out.push(Output::Reply { client, req, result: Err(refusal) });
                return;
            }
        }
        let result = match message {
            Message::Advertise(adv) if client != BROKER_CLIENT && adv.class() == crate::monitor::CLASS => {
                Err(reserved_class())
            }
            Message::Advertise(adv) => {
                let id = self.next_id();
                let required = rights.as_ref().map(|r| r.required_attributes(&adv)).unwrap_or_default();
                self.install_adv(id.clone(), Arc::new(adv), Hop::Client(client), (0, 0), out);
                self.clients.entry(client).or_default().advs.insert(id.clone(), required.into());
                let copies = Copies::One(Forwarded::Advertisement(id.clone()));
                self.settling.push((copies, Waiter::Client { client, req, id }));
                return;
            }
            Message::Subscribe(_)
                if self.clients.get(&client).is_some_and(|c| c.held() >= self.max_subs_per_client) =>
            {
                Err((
                    ErrorCode::LimitExceeded,
                    format!(
                        "this client holds {} subscriptions (a composite one counts one per atomic part), \
                         the most this broker allows: unsubscribe first",
                        self.max_subs_per_client
                    ),
                ))
            }
            Message::CompositeSubscribe(cs)
                if self.clients.get(&client).is_some_and(|c| {
                    c.held().saturating_add(composite_atoms(&cs)) > self.max_subs_per_client
                }) =>
            {
                let held = self.clients.get(&client).map_or(0, ClientState::held);
                Err((
                    ErrorCode::LimitExceeded,
                    format!(
                        "this composite subscription has {} atomic parts and this client holds {held} \
                         subscriptions (a composite one counts one per atomic part); this broker allows {}: \
                         unsubscribe first",
                        composite_atoms(&cs),
                        self.max_subs_per_client
                    ),
                ))
            }
            Message::Subscribe(sub) => {
                let id = self.next_id();
                let sub = Arc::new(sub);
                if history::is_historic(&sub, self.now) {
                    self.hold_for_history(client, id.clone(), sub.clone());
                }
                self.install_sub(id.clone(), sub, Hop::Client(client), out);
                self.clients.entry(client).or_default().subs.insert(id.clone());
                if let Some(rights) = &rights {
                    self.principals.subscribed(rights, 1);
                }
                // In a cyclic overlay it went up the tree of every advertisement it
                // overlaps, a copy on each.
                let copies = match self.overlay {
                    Overlay::Acyclic => Copies::One(Forwarded::Subscription(id.clone())),
                    Overlay::Cyclic(_) => Copies::OnEveryTree(id.clone()),
                };
                self.settling.push((copies, Waiter::Client { client, req, id }));
                return;
            }
            Message::CompositeSubscribe(cs) => {
                let id = self.next_id();
                let state = self.clients.entry(client).or_default();
                let atoms = composite_atoms(&cs);
                state.composites.insert(id.clone(), atoms);
                state.composite_atoms += atoms;
                if let Some(rights) = &rights {
                    self.principals.subscribed(rights, atoms.try_into().unwrap_or(isize::MAX));
                }
                self.composite_subscribe(Hop::Client(client), id.clone(), Arc::new(cs), out);
                self.hold_composite_for_history(client, &id);
                self.settling.push((Copies::Nothing, Waiter::Client { client, req, id }));
                return;
            }
            Message::Publish(publication) => {
                self.publishing = req.map(|req| (client, req));
                let result = self.client_publish(client, publication, out);
                // Taken: the store answers once it has the publication.
                let taken = self.publishing.take().is_none();
                if result.is_ok() && req.is_some() && taken {
                    return;
                }
                result
            }
            Message::Unsubscribe(id) => {
                if self.clients.get_mut(&client).is_some_and(|c| c.subs.remove(&id)) {
                    if let Some(rights) = &rights {
                        self.principals.subscribed(rights, -1);
                    }
                    self.drop_history(&id);
                    self.remove_sub(&id, out);
                    Ok(None)
                } else if let Some(atoms) = self
                    .clients
                    .get_mut(&client)
                    .and_then(|c| c.composites.remove(&id).inspect(|atoms| c.composite_atoms -= atoms))
                {
                    if let Some(rights) = &rights {
                        self.principals.subscribed(rights, -atoms.try_into().unwrap_or(isize::MAX));
                    }
                    for query in self.take_composite_queries(&id) {
                        self.drop_history(&query);
                    }
                    self.composite_unsubscribe(&Hop::Client(client), &id, out);
                    Ok(None)
                } else {
                    Err((ErrorCode::UnknownId, format!("no subscription {id} of this client")))
                }
            }
            Message::Unadvertise(id) => {
                if self.clients.get_mut(&client).is_some_and(|c| c.advs.remove(&id).is_some()) {
                    self.withdraw_adv(&id, out);
                    // Answered once the withdrawal has settled everywhere, with the
                    // patterns it moved (a publication published next is detected).
                    let copies = Copies::One(Forwarded::Unadvertisement(id));
                    self.settling.push((copies, Waiter::Done { client, req }));
                    return;
                } else {
                    Err((ErrorCode::UnknownId, format!("no advertisement {id} of this client")))
                }
            }
        };
        if req.is_some() || result.is_err() {
            out.push(Output::Reply { client, req, result });
        }
    }

    fn client_publish(
        &mut self,
        client: ClientId,
        publication: Publication,
        out: &mut Vec<Output>,
    ) -> Result<Option<MessageId>, (ErrorCode, String)> {
        let conforming = self.clients.get(&client).and_then(|c| {
            c.advs.iter().find(|(id, _)| self.advs.get(id).is_some_and(|e| conforms(&publication, &e.item)))
        });
        // Under permits, it must also carry what the permit that allowed the advertisement
        // names (an advertised attribute may be left out of a publication).
        if let Some((_, required)) = conforming
            && let Some(missing) = required.iter().find(|attr| publication.get(attr).is_none())
        {
            let principal = self.principal(client).unwrap_or_default().to_owned();
            self.denials += 1;
            return Err((
                ErrorCode::Forbidden,
                format!(
                    "principal '{principal}' may not publish {publication}: the `advertise` permit that allowed its \
                     advertisement names `{missing}`, which it leaves out"
                ),
            ));
        }
        let tree = conforming.map(|(id, _)| id.clone());
        let Some(tree) = tree else {
            // No client can advertise the reserved class (`client_request`), so no
            // publication of it conforms: said here, off the path of those that do.
            if publication.class() == crate::monitor::CLASS {
                return Err(reserved_class());
            }
            return Err((
                ErrorCode::NotAdvertised,
                format!("{publication} conforms to none of this client's advertisements: advertise first"),
            ));
        };
        let from = Hop::Client(client);
        let stamp = self.stamp();
        // Every publication carries its origin time unless its publisher gave one.
        let publication = match i64::try_from(stamp.time).ok().and_then(Timestamp::from_millis) {
            Some(at) => Arc::new(publication.with_time(at)),
            None => Arc::new(publication),
        };
        match &self.overlay {
            Overlay::Acyclic => self.route_publication(publication, stamp, &from, out),
            Overlay::Cyclic(_) => self.route_on_tree(&tree, publication, stamp, &from, out),
        }
        Ok(None)
    }

    fn client_gone(&mut self, client: ClientId, out: &mut Vec<Output>) {
        let Some(state) = self.clients.remove(&client) else { return };
        if let Some(rights) = &state.rights {
            self.principals.subscribed(rights, -state.held().try_into().unwrap_or(isize::MAX));
        }
        for id in state.composites.keys() {
            for query in self.take_composite_queries(id) {
                self.drop_history(&query);
            }
        }
        self.composites_of_gone(&Hop::Client(client), out);
        for id in &state.subs {
            self.drop_history(id);
            self.remove_sub(id, out);
        }
        for id in state.advs.keys() {
            self.withdraw_adv(id, out);
        }
    }

    fn broker_message(&mut self, from: Name, message: BrokerMessage, out: &mut Vec<Output>) {
        if !self.neighbours.contains(&from) {
            // A message racing a link that is already down; its state would be dropped.
            return;
        }
        for (what, waiter) in settle::waiters_for(&from, &message) {
            self.settling.push((Copies::One(what), waiter));
        }
        let hop = Hop::Broker(from.clone());
        let rejoining = self.rejoining.contains_key(&from);
        if rejoining {
            self.heard_again(&from, &message, out);
        }
        match message {
            BrokerMessage::Advertise { id, adv, hops, epoch } => {
                self.install_adv(id, adv, hop, (hops, epoch), out);
            }
            BrokerMessage::TreeRepair { tree, epoch } => self.tree_repair(&tree, epoch, &hop, out),
            BrokerMessage::Subscribe { id, sub } => self.install_sub(id, sub, hop, out),
            BrokerMessage::Publish { publication, stamp } => {
                if self.passed_already(&stamp) {
                    self.replays.duplicates += 1;
                    return;
                }
                self.route_publication(publication, stamp, &hop, out);
            }
            BrokerMessage::Unsubscribe { id } => {
                if self.subs.get(&id).is_some_and(|e| e.last == hop) {
                    self.remove_sub(&id, out);
                }
            }
            BrokerMessage::Unadvertise { id, lost: false } if matches!(self.overlay, Overlay::Cyclic(_)) => {
                self.owner_withdrew(id, &hop, out);
            }
            BrokerMessage::Unadvertise { id, lost } => {
                if self.advs.get(&id).is_some_and(|e| e.last == hop) {
                    self.remove_adv(&id, lost, out);
                }
            }
            BrokerMessage::TreeSubscribe { id, trees, sub } => {
                if let Overlay::Cyclic(cycles) = &mut self.overlay {
                    let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
                    for tree in &trees {
                        cycles.add(ctx, tree, &id, &sub, hop.clone(), out, &mut self.awaited);
                    }
                }
            }
            BrokerMessage::TreeUnsubscribe { id, trees } => {
                if let Overlay::Cyclic(cycles) = &mut self.overlay {
                    let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
                    for tree in &trees {
                        cycles.leave(ctx, tree, &id, &hop, out);
                    }
                }
            }
            BrokerMessage::TreePublish { tree, publication, stamp } => {
                self.route_on_tree(&tree, publication, stamp, &hop, out);
            }
            BrokerMessage::Settled { what } => self.settle.settled(&from, what, out),
            BrokerMessage::TreesSettled { id, trees } => {
                for tree in trees {
                    let what = Forwarded::TreeSubscription { id: id.clone(), tree };
                    self.settle.settled(&from, what, out);
                }
            }
            message @ (BrokerMessage::HistoryAdvertise { .. }
            | BrokerMessage::HistoryUnadvertise { .. }
            | BrokerMessage::HistoryQuery { .. }
            | BrokerMessage::HistoryAnswer { .. }
            | BrokerMessage::HistoryDone { .. }) => self.history_message(&from, message, out),
            BrokerMessage::CompositeSubscribe { id, cs } => self.composite_subscribe(hop, id, cs, out),
            BrokerMessage::CompositeUnsubscribe { id } => {
                self.composite_unsubscribe(&hop, &id, out);
            }
            BrokerMessage::CompositeMatch { id, pubs } => self.composite_match(&from, &id, pubs, out),
        }
        if rejoining {
            self.release_if_back(&from, out);
        }
    }

    /// With cycles: an owner's withdrawal is final, whichever way it arrives, and passed
    /// on to every neighbour (copies of the advertisement may be anywhere on a loop).
    fn owner_withdrew(&mut self, id: MessageId, hop: &Hop, out: &mut Vec<Output>) {
        let Overlay::Cyclic(cycles) = &mut self.overlay else { return };
        if !cycles.remember_withdrawn(id.clone()) {
            return;
        }
        self.remove_adv(&id, false, out);
        for n in &self.neighbours {
            if *hop != Hop::Broker(n.clone()) {
                let message = BrokerMessage::Unadvertise { id: id.clone(), lost: false };
                out.push(Output::ToBroker { to: n.clone(), message });
            }
        }
    }

    fn neighbour_up(&mut self, name: Name, out: &mut Vec<Output>) {
        if self.neighbours.contains(&name) {
            // Up again without a down in between: the peer may have restarted, so
            // start over with it.
            self.neighbour_down(&name, out);
        }
        self.neighbours.insert(name.clone());
        self.greet(name, out);
    }

    /// Sends neighbour `name` (up, or restarted) what it learns from this broker.
    fn greet(&mut self, name: Name, out: &mut Vec<Output>) {
        let hop = Hop::Broker(name.clone());
        // With cycles, the parent gets a copy too: if it has withdrawn the advertisement
        // meanwhile (the news lost with the link), it answers with the withdrawal.
        let cyclic = matches!(self.overlay, Overlay::Cyclic(_));
        for id in self.advs.select(|e| cyclic || e.last != hop) {
            self.offer_adv(&id, &name, out);
        }
        if let Overlay::Cyclic(cycles) = &mut self.overlay {
            // Trees whose path runs through it get their subscriptions back.
            let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
            cycles.neighbour_up(ctx, out);
            // Repairs asked or passed on here and not answered yet go to it too: the copy
            // sent on may have been lost with another link.
            for (tree, epoch) in cycles.repairs() {
                if self.advs.get(&tree).is_some_and(|e| e.epoch <= epoch) {
                    out.push(Output::ToBroker {
                        to: name.clone(),
                        message: BrokerMessage::TreeRepair { tree, epoch },
                    });
                }
            }
        }
        // Composite parts placed there are placed again (it may have lost them), and so
        // are patterns with a destination there placed while it was away.
        self.replace_composites_at(&name, out);
        self.offer_stores(&name, out);
    }

    fn neighbour_down(&mut self, name: &Name, out: &mut Vec<Output>) {
        if !self.neighbours.remove(name) {
            return;
        }
        self.rejoining.remove(name);
        self.subs.forget_neighbour(name);
        self.advs.forget_neighbour(name);
        self.settle.neighbour_down(name, out);
        let hop = Hop::Broker(name.clone());
        self.stores_gone(name, out);
        self.composites_of_gone(&hop, out);
        if let Overlay::Cyclic(cycles) = &mut self.overlay {
            let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
            cycles.neighbour_down(ctx, name, out);
        }
        for id in self.subs.select(|e| e.last == hop) {
            self.remove_sub(&id, out);
        }
        if let Overlay::Cyclic(cycles) = &mut self.overlay {
            // Advertisements whose path used the link stay (removing them would race their
            // copies still circling), and their advertisers' brokers are asked to flood
            // them again: the first copy of the new flood is the path around the loss.
            for id in self.advs.select(|e| e.last == hop) {
                let Some(e) = self.advs.get(&id) else { continue };
                if cycles.repair_requested(&id, e.epoch) {
                    for n in &self.neighbours {
                        let message = BrokerMessage::TreeRepair { tree: id.clone(), epoch: e.epoch };
                        out.push(Output::ToBroker { to: n.clone(), message });
                    }
                }
            }
            return;
        }
        for id in self.advs.select(|e| e.last == hop) {
            self.remove_adv(&id, true, out);
        }
    }

    /// Installs advertisement `id` arriving from `last`, `(hops, epoch)` away (see
    /// [`BrokerMessage::Advertise`]).
    fn install_adv(
        &mut self,
        id: MessageId,
        adv: Arc<Advertisement>,
        last: Hop,
        (hops, epoch): (u32, u32),
        out: &mut Vec<Output>,
    ) {
        if let Some(e) = self.advs.get(&id) {
            match self.overlay {
                Overlay::Acyclic if e.last != last => self.rehome_adv(&id, last, out),
                Overlay::Acyclic => {}
                // A new flood (a broker lost its path): its first copy is the path, as the
                // first copy of the first flood was.
                Overlay::Cyclic(_) if epoch > e.epoch => self.new_path(&id, last, hops, epoch, out),
                Overlay::Cyclic(_) if epoch == e.epoch && e.last != last && hops < e.distance => {
                    self.new_path(&id, last, hops, epoch, out);
                }
                Overlay::Cyclic(_) => {}
            }
            return;
        }
        if let (Overlay::Cyclic(cycles), Hop::Broker(b)) = (&mut self.overlay, &last) {
            // A copy of an advertisement withdrawn for good: tell the sender, which may
            // have missed the withdrawal when a link dropped it. One of ours we do not
            // know is from an earlier life of this broker, still circulating: withdraw it
            // for good.
            let stale =
                cycles.is_withdrawn(&id) || (id.origin == self.name && cycles.remember_withdrawn(id.clone()));
            if stale {
                let message = BrokerMessage::Unadvertise { id, lost: false };
                out.push(Output::ToBroker { to: b.clone(), message });
                return;
            }
        }
        self.adv_index.insert(id.clone(), adv.clone());
        let mut entry = Entry::new(adv.clone(), last.clone(), hops);
        entry.epoch = epoch;
        self.advs.insert(id.clone(), entry);
        self.srt_changed.push(adv.clone());
        let flood: Vec<Name> =
            self.neighbours.iter().filter(|n| last != Hop::Broker((*n).clone())).cloned().collect();
        for n in &flood {
            self.offer_adv(&id, n, out);
        }
        // Stored subscriptions it overlaps go toward it ("late advertisement pulls
        // subscriptions").
        let pulled = self.routes.ids(&self.sub_index.overlapping(&adv));
        match &mut self.overlay {
            Overlay::Cyclic(cycles) => {
                cycles.plant(id.clone(), last);
                let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
                for sub_id in pulled {
                    let Some(e) = self.subs.get(&sub_id) else { continue };
                    cycles.add(ctx, &id, &sub_id, &e.item, e.last.clone(), out, &mut self.awaited);
                }
            }
            Overlay::Acyclic => {
                if let Hop::Broker(b) = &last {
                    for sub_id in pulled {
                        if self.subs.get(&sub_id).is_some_and(|e| e.last != last) {
                            self.offer_sub(&sub_id, b, out);
                        }
                    }
                }
            }
        }
    }

    fn install_sub(&mut self, id: MessageId, sub: Arc<Subscription>, last: Hop, out: &mut Vec<Output>) {
        if let Some(e) = self.subs.get_mut(&id) {
            if matches!(self.overlay, Overlay::Acyclic) && e.last != last {
                // The overlay changed under it: this copy came the current way.
                if let Hop::Broker(b) = &last {
                    e.sent_to.remove(b);
                    e.held.remove(b);
                }
                e.last = last.clone();
                self.routes.add(&id, last.clone());
                let sub = e.item.clone();
                for b in self.hops_for(&sub, &last) {
                    self.offer_sub(&id, &b, out);
                }
            }
            return;
        }
        let number = self.routes.add(&id, last.clone());
        self.sub_index.insert(number, sub.clone());
        self.subs.insert(id.clone(), Entry::new(sub.clone(), last.clone(), 0));
        match &mut self.overlay {
            Overlay::Cyclic(cycles) => {
                // On the tree of every advertisement it overlaps, local ones included.
                let mut trees = self.adv_index.overlapping(&sub);
                trees.sort();
                let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
                for tree in trees {
                    cycles.add(ctx, &tree, &id, &sub, last.clone(), out, &mut self.awaited);
                }
            }
            Overlay::Acyclic => {
                for b in self.hops_for(&sub, &last) {
                    self.offer_sub(&id, &b, out);
                }
            }
        }
    }

    /// Advertisement `id` should be flooded to `to` (see [`Table::offer`]).
    fn offer_adv(&mut self, id: &MessageId, to: &Name, out: &mut Vec<Output>) {
        let covering = self.adv_covering();
        let what = Forwarded::Advertisement(id.clone());
        // A copy sent now or earlier (and maybe unanswered yet) is waited for like one
        // held back behind a cover: `Settle::wait` keeps only the unanswered.
        let waits_for = match self.advs.offer(covering, id, to, out) {
            Offered::Held(cover) => Forwarded::Advertisement(cover),
            Offered::Sent => what.clone(),
            Offered::Unknown => return,
        };
        self.awaited.push((what, waits_for, to.clone()));
    }

    /// Subscription `id` should reach `to` (see [`Table::offer`]).
    fn offer_sub(&mut self, id: &MessageId, to: &Name, out: &mut Vec<Output>) {
        let what = Forwarded::Subscription(id.clone());
        let waits_for = match self.subs.offer(self.covering, id, to, out) {
            Offered::Held(cover) => Forwarded::Subscription(cover),
            Offered::Sent => what.clone(),
            Offered::Unknown => return,
        };
        self.awaited.push((what, waits_for, to.clone()));
    }

    /// The brokers of the advertisements `sub` overlaps, except `last`.
    fn hops_for(&self, sub: &Subscription, last: &Hop) -> BTreeSet<Name> {
        let mut hops = BTreeSet::new();
        for adv_id in self.adv_index.overlapping(sub) {
            if let Some(Entry { last: Hop::Broker(b), .. }) = self.advs.get(&adv_id)
                && *last != Hop::Broker(b.clone())
            {
                hops.insert(b.clone());
            }
        }
        hops
    }

    fn remove_sub(&mut self, id: &MessageId, out: &mut Vec<Output>) {
        if self.subs.get(id).is_none() {
            return;
        }
        if let Some(number) = self.routes.remove(id) {
            self.sub_index.remove(&number);
        }
        if let Overlay::Cyclic(cycles) = &mut self.overlay {
            let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
            cycles.remove_everywhere(ctx, id, out);
        }
        // What it covered goes first, so a link is never without either.
        self.subs.remove(self.covering, id, || BrokerMessage::Unsubscribe { id: id.clone() }, out);
    }

    /// The owner withdraws advertisement `id` (with cycles, for good).
    fn withdraw_adv(&mut self, id: &MessageId, out: &mut Vec<Output>) {
        if let Overlay::Cyclic(cycles) = &mut self.overlay {
            cycles.remember_withdrawn(id.clone());
        }
        self.remove_adv(id, false, out);
    }

    /// With cycles: a copy of a known advertisement came along a shorter path. Move its
    /// tree onto that path (subscriptions leave the old parent for the new one) and tell
    /// the neighbours, which may find their own path shorter through here. Distances only
    /// shrink, so this settles; and no offer through a broker's own subtree is ever
    /// shorter than its distance, so a tree never folds onto itself.
    /// With cycles: advertisement `id`'s path is now through `last`, `hops` away, in flood
    /// `epoch` (a shorter path, or the first copy of a new flood). Its tree moves there,
    /// and the neighbours hear of it.
    fn new_path(&mut self, id: &MessageId, last: Hop, hops: u32, epoch: u32, out: &mut Vec<Output>) {
        let Some(e) = self.advs.get_mut(id) else { return };
        self.srt_changed.push(e.item.clone());
        e.last = last.clone();
        e.distance = hops;
        e.epoch = epoch;
        let Overlay::Cyclic(cycles) = &mut self.overlay else { return };
        let ctx = Ctx { covering: self.covering, neighbours: &self.neighbours };
        cycles.reroute(ctx, id, last.clone(), out);
        self.flood_path(id, &last, out);
    }

    /// With cycles: sends advertisement `id` as this broker knows it (path length and
    /// epoch) to every neighbour but `last`.
    fn flood_path(&mut self, id: &MessageId, last: &Hop, out: &mut Vec<Output>) {
        let Some(e) = self.advs.get(id) else { return };
        for n in &self.neighbours {
            if *last != Hop::Broker(n.clone()) {
                let message = BrokerMessage::Advertise {
                    id: id.clone(),
                    adv: e.item.clone(),
                    hops: e.distance.saturating_add(1),
                    epoch: e.epoch,
                };
                out.push(Output::ToBroker { to: n.clone(), message });
            }
        }
    }

    /// With cycles: a broker lost its path to advertisement `tree` in flood `epoch` (see
    /// [`BrokerMessage::TreeRepair`]). Its advertiser's broker floods it again one epoch
    /// higher; any other passes the request on, once per epoch.
    fn tree_repair(&mut self, tree: &MessageId, epoch: u32, from: &Hop, out: &mut Vec<Output>) {
        let Overlay::Cyclic(cycles) = &mut self.overlay else { return };
        let Some(e) = self.advs.get_mut(tree) else { return };
        if epoch < e.epoch {
            // Repaired already, and the asker missed the new flood (it was on a link whose
            // session ended): it gets this broker's copy, whose path cannot run through the
            // asker, which has not seen the new epoch.
            if let Hop::Broker(to) = from {
                let message = BrokerMessage::Advertise {
                    id: tree.clone(),
                    adv: e.item.clone(),
                    hops: e.distance.saturating_add(1),
                    epoch: e.epoch,
                };
                let what = Forwarded::Advertisement(tree.clone());
                self.awaited.push((what.clone(), what, to.clone()));
                out.push(Output::ToBroker { to: to.clone(), message });
            }
            return;
        }
        if matches!(e.last, Hop::Client(_)) {
            e.epoch = epoch.saturating_add(1);
            tracing::debug!(%tree, epoch = e.epoch, "a broker lost its path: flooding the advertisement again");
            let last = e.last.clone();
            self.flood_path(tree, &last, out);
            return;
        }
        if !cycles.repair_requested(tree, epoch) {
            return;
        }
        for n in &self.neighbours {
            if *from != Hop::Broker(n.clone()) {
                let message = BrokerMessage::TreeRepair { tree: tree.clone(), epoch };
                out.push(Output::ToBroker { to: n.clone(), message });
            }
        }
    }

    /// In a tree, a known advertisement arrived from another hop: the tree changed under
    /// it (a link went, another came). Follow the copy that came the current way.
    fn rehome_adv(&mut self, id: &MessageId, last: Hop, out: &mut Vec<Output>) {
        let Some(e) = self.advs.get_mut(id) else { return };
        self.srt_changed.push(e.item.clone());
        let old = std::mem::replace(&mut e.last, last.clone());
        let adv = e.item.clone();
        if let Hop::Broker(b) = &last {
            e.sent_to.remove(b);
            e.held.remove(b);
        }
        // The old side now reaches it through here.
        if let Hop::Broker(o) = &old
            && self.neighbours.contains(o)
        {
            self.offer_adv(id, &o.clone(), out);
        }
        if let Hop::Broker(b) = &last {
            let pulled = self.routes.ids(&self.sub_index.overlapping(&adv));
            for sub_id in pulled {
                if self.subs.get(&sub_id).is_some_and(|s| s.last != last) {
                    self.offer_sub(&sub_id, b, out);
                }
            }
        }
        if let Hop::Broker(o) = old {
            self.withdraw_unneeded(&o, out);
        }
    }

    fn remove_adv(&mut self, id: &MessageId, lost: bool, out: &mut Vec<Output>) {
        let covering = self.adv_covering();
        // What it covered goes first, so the neighbour never lacks either.
        let withdrawal = || BrokerMessage::Unadvertise { id: id.clone(), lost };
        let Some(e) = self.advs.remove(covering, id, withdrawal, out) else { return };
        self.adv_index.remove(id);
        self.srt_changed.push(e.item.clone());
        match &mut self.overlay {
            // Every broker drops the tree with the advertisement.
            Overlay::Cyclic(cycles) => cycles.drop_tree(id),
            Overlay::Acyclic => {
                if let Hop::Broker(b) = &e.last {
                    self.withdraw_unneeded(b, out);
                }
            }
        }
    }

    /// Withdraws from broker `b` the subscriptions sent (or held) toward it that no
    /// advertisement from `b` overlaps any more.
    fn withdraw_unneeded(&mut self, b: &Name, out: &mut Vec<Output>) {
        let from_b = Hop::Broker(b.clone());
        let candidates = self.subs.select(|s| s.sent_to.contains(b) || s.held.contains(b));
        for sub_id in candidates {
            let Some(s) = self.subs.get(&sub_id) else { continue };
            let still = self
                .adv_index
                .overlapping(&s.item)
                .iter()
                .any(|a| self.advs.get(a).is_some_and(|a| a.last == from_b));
            if still {
                continue;
            }
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

    fn route_publication(
        &mut self,
        publication: Arc<Publication>,
        stamp: Stamp,
        last: &Hop,
        out: &mut Vec<Output>,
    ) {
        let mut matched = std::mem::take(&mut self.matched);
        matched.clear();
        self.sub_index.matches_into(&publication, &mut self.scratch, &mut matched);
        let mut next = Next::default();
        for &n in &matched {
            let Some(route) = self.routes.get(n) else { continue };
            match (&route.hop, &route.detector) {
                (Hop::Detector, Some(input)) => next.inputs.push(input.clone()),
                (hop, _) => next.add(&route.id, hop, last),
            }
        }
        self.matched = matched;
        self.emit(next, publication, stamp, None, out);
    }

    fn route_on_tree(
        &mut self,
        tree: &MessageId,
        publication: Arc<Publication>,
        stamp: Stamp,
        last: &Hop,
        out: &mut Vec<Output>,
    ) {
        let Overlay::Cyclic(cycles) = &mut self.overlay else { return };
        if !cycles.first_arrival(tree, &stamp) {
            // A copy over a path the tree has just left, or arriving late over it: each
            // publication is delivered once.
            return;
        }
        let next = cycles.route(tree, &publication, last, &mut self.scratch);
        self.emit(next, publication, stamp, Some(tree), out);
    }

    /// Sends `publication` to the next hops (on `tree` if there is one) and feeds the
    /// detectors whose subscriptions it matched.
    fn emit(
        &mut self,
        mut next: Next,
        publication: Arc<Publication>,
        stamp: Stamp,
        tree: Option<&MessageId>,
        out: &mut Vec<Output>,
    ) {
        let detected = std::mem::take(&mut next.detected);
        let inputs = std::mem::take(&mut next.inputs);
        if !self.rejoining.is_empty() {
            self.hold_for_rejoining(&mut next.brokers, &publication, &stamp);
        }
        self.hold_live(
            &mut next,
            || Arc::new(Stamped { stamp: stamp.clone(), publication: publication.clone() }),
            out,
        );
        if next.stored {
            let ack = self.publishing.take();
            out.push(Output::Store { stamp: stamp.clone(), publication: publication.clone(), ack });
        }
        emit(next, &publication, &stamp, tree, out);
        if !detected.is_empty() || !inputs.is_empty() {
            self.detect(inputs, &detected, &Arc::new(Stamped { stamp, publication }), out);
        }
    }
}

/// Sends `publication` to the next hops: on `tree` if there is one.
fn emit(
    next: Next,
    publication: &Arc<Publication>,
    stamp: &Stamp,
    tree: Option<&MessageId>,
    out: &mut Vec<Output>,
) {
    // Usually one of the two is empty (and for a composite leaf, both): consuming an empty
    // B-tree still costs a visit to its (absent) root and a drop, ~80 instructions a
    // publication.
    if !next.brokers.is_empty() {
        for to in next.brokers {
            let (publication, stamp) = (publication.clone(), stamp.clone());
            let message = match tree {
                Some(tree) => BrokerMessage::TreePublish { tree: tree.clone(), publication, stamp },
                None => BrokerMessage::Publish { publication, stamp },
            };
            out.push(Output::ToBroker { to, message });
        }
    }
    if !next.clients.is_empty() {
        for (client, mut subs) in next.clients {
            subs.sort();
            out.push(Output::Notify { client, subs, publication: publication.clone(), historic: false });
        }
    }
}
