//! The frames clients and brokers exchange, and their codec.
//!
//! A connection opens with [`Frame::Hello`] (carrying [`PROTOCOL_VERSION`]) answered by
//! [`Frame::Welcome`] or a [`Frame::Error`] with [`ErrorCode::VersionMismatch`]. A client
//! then sends [`Frame::Request`]s, each with its own request number; the broker answers each
//! with [`Frame::Ok`] (carrying the id it assigned, for adv/sub/cs) or [`Frame::Error`], and
//! pushes [`Frame::Notification`]s for matching publications. A client may also ask the
//! broker about itself with a [`Frame::Query`], answered by a [`Frame::Report`] (or an
//! error). Neighbour brokers say hello with [`Role::Broker`], agree on their link session
//! with [`Frame::Resume`], and then exchange numbered [`Frame::Broker`] routing traffic,
//! acknowledged with [`Frame::Ack`].
//!
//! On the wire a frame is a 4-byte big-endian length followed by that many bytes of
//! bincode (see [`codec`]). Every message inside is validated as it is decoded, so an
//! invalid subscription or publication never gets past the codec.
//!
//! # The format, and how it changes
//!
//! The body is bincode 2's standard configuration (variable-length integers) applied to
//! the serde derives of the types in this module and of the messages they carry. So the
//! order of enum variants (an enum is its variant's index, then its fields), the order and
//! types of struct fields, and the types inside *are* the format. `tests/wire_golden.rs`
//! pins the bytes of one sample of every [`Frame`] and [`BrokerMessage`] variant: a
//! reorder or a type change fails there. A deliberate change appends variants or fields
//! where it can, bumps [`PROTOCOL_VERSION`], and regenerates the golden bytes; peers of
//! different versions refuse each other at the hello with [`ErrorCode::VersionMismatch`].
//! Version 2 added [`BrokerMessage::Settled`]; version 3 added `within` and `until` to
//! composite subscriptions, stamps on routed publications, the composite broker messages
//! and [`Frame::CompositeNotification`]. Version 6 answers withdrawals
//! ([`Forwarded::Unadvertisement`]). Version 8 pages and filters [`Query::Routes`].
//! Version 9 numbers broker messages in link sessions ([`Frame::Resume`], [`Frame::Ack`]),
//! adds [`Query::DropLink`], and epochs and [`BrokerMessage::TreeRepair`] for cyclic
//! overlays that route around a lost link. Version 10 adds client sessions. Version 11
//! adds what each link carried per message class ([`BrokerStats`]'s `link_traffic`).
//! Version 12 adds a client's token to [`Frame::Hello`]; a hello of an earlier version no
//! longer decodes, so such a peer is refused as sending invalid input. Version 13 adds
//! `settle_timeouts` to [`BrokerStats`]. Version 14 carries a subscription on several
//! trees in one [`BrokerMessage::TreeSubscribe`] (and [`BrokerMessage::TreeUnsubscribe`]),
//! answered with one [`BrokerMessage::TreesSettled`].

pub(crate) mod bounded;
pub mod codec;

use std::fmt;

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::composite::CompositeSubscription;
use crate::id::MessageId;
use crate::message::Message;
use crate::name::Name;
use crate::publication::Publication;
use crate::stamp::{Stamp, Stamped};
use crate::subscription::{Advertisement, Subscription};

pub use codec::{DecodeError, EncodeError, FrameReader, decode, encode};

/// The longest filter [`Query::Routes`] takes whole (a filter reads every row of every
/// table, on the broker's routing task); a longer one is cut to it.
pub const MAX_ROUTES_FILTER_BYTES: usize = 256;

/// The version of this wire protocol; peers with another version are refused.
pub const PROTOCOL_VERSION: u32 = 14;

/// What a peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// A publishing and/or subscribing client.
    Client,
    /// A neighbouring broker.
    Broker,
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request is malformed or invalid.
    BadRequest,
    /// A publication conforms to none of its publisher's advertisements.
    NotAdvertised,
    /// `unsub`/`unadv` named an id that is not known.
    UnknownId,
    /// A configured limit was reached.
    LimitExceeded,
    /// The peer is not allowed to do this.
    Forbidden,
    /// The peer speaks another protocol version.
    VersionMismatch,
    /// The broker failed; the request may be retried.
    Internal,
}

/// Why a connection or link is closed: sent in [`Frame::Bye`] and as the QUIC
/// application close code ([`CloseCode::to_quic`]), so the peer acts on a code, never on
/// the text beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CloseCode {
    /// Done: nothing went wrong.
    Done,
    /// A second link between two brokers already linked; its dialler waits before it dials
    /// again (the link dialled by the broker with the smaller name is kept).
    DuplicateLink,
    /// The peer did not read what was sent to it fast enough.
    TooSlow,
    /// The broker is shutting down.
    ShuttingDown,
    /// The peer sent something it must not.
    ProtocolViolation,
    /// Closed on purpose to inject a fault: the other side treats the connection as lost
    /// (a client session waits for the client to return), not as ended.
    Fault,
}

impl CloseCode {
    /// The QUIC application error code for this reason.
    pub fn to_quic(self) -> u32 {
        match self {
            Self::Done => 0,
            Self::DuplicateLink => 1,
            Self::TooSlow => 2,
            Self::ShuttingDown => 3,
            Self::ProtocolViolation => 4,
            Self::Fault => 5,
        }
    }

    /// The reason for a QUIC application error code (an unknown one is a violation).
    pub fn from_quic(code: u64) -> Self {
        match code {
            0 => Self::Done,
            1 => Self::DuplicateLink,
            2 => Self::TooSlow,
            3 => Self::ShuttingDown,
            5 => Self::Fault,
            _ => Self::ProtocolViolation,
        }
    }
}

/// A message between neighbour brokers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum BrokerMessage {
    /// An advertisement, flooded.
    Advertise {
        /// Its federation-wide id.
        id: MessageId,
        /// The advertisement.
        adv: Arc<Advertisement>,
        /// Brokers between the receiver and the advertiser's broker along this copy's
        /// path, the receiver included (1 from the advertiser's broker itself). With
        /// cycles, a broker moves to a shorter path when one appears.
        hops: u32,
        /// With cycles: the flood this copy belongs to. The advertiser's broker floods
        /// again, one epoch higher, when a broker asks it to ([`BrokerMessage::TreeRepair`]);
        /// every broker then takes the first copy of the new epoch as its path. Always 0
        /// without cycles.
        epoch: u32,
    },
    /// An advertisement withdrawn.
    Unadvertise {
        /// Its id.
        id: MessageId,
        /// True if the sender lost its path to the advertisement (a link went down),
        /// false if its owner withdrew it.
        lost: bool,
    },
    /// A subscription, routed toward overlapping advertisements.
    Subscribe {
        /// Its federation-wide id.
        id: MessageId,
        /// The subscription.
        sub: Arc<Subscription>,
    },
    /// A subscription withdrawn.
    Unsubscribe {
        /// Its id.
        id: MessageId,
    },
    /// A publication, routed toward matching subscriptions.
    Publish {
        /// The publication.
        publication: Arc<Publication>,
        /// Its stamp, given by its publisher's broker.
        stamp: Stamp,
    },
    /// With cycles: a subscription routed along the spanning trees of advertisements
    /// `trees`, each a copy of its own (answered and withdrawn tree by tree), sent in one
    /// message where they take the same link (since version 14).
    TreeSubscribe {
        /// Its federation-wide id.
        id: MessageId,
        /// The advertisements whose trees carry it.
        #[serde(deserialize_with = "bounded::vec")]
        trees: Vec<MessageId>,
        /// The subscription.
        sub: Arc<Subscription>,
    },
    /// With cycles: a subscription withdrawn from trees `trees`.
    TreeUnsubscribe {
        /// Its id.
        id: MessageId,
        /// The trees.
        #[serde(deserialize_with = "bounded::vec")]
        trees: Vec<MessageId>,
    },
    /// With cycles: a publication travelling on advertisement `tree`'s spanning tree.
    TreePublish {
        /// The advertisement it conforms to.
        tree: MessageId,
        /// The publication.
        publication: Arc<Publication>,
        /// Its stamp, given by its publisher's broker.
        stamp: Stamp,
    },
    /// The answer to a forwarded advertisement or subscription: every broker it had to
    /// reach beyond the receiver has it, and what it pulled has been sent back (so, links
    /// being FIFO, has arrived before this).
    Settled {
        /// Which forwarded message settled.
        what: Forwarded,
    },
    /// A composite subscription, or a part of one, to be detected at or beyond the
    /// receiver, its matches sent back as [`BrokerMessage::CompositeMatch`] with `id`.
    CompositeSubscribe {
        /// The id the sender gave it.
        id: MessageId,
        /// The pattern.
        cs: Arc<CompositeSubscription>,
    },
    /// A composite subscription withdrawn.
    CompositeUnsubscribe {
        /// Its id.
        id: MessageId,
    },
    /// A match of composite subscription `id`, detected at the sender or beyond.
    CompositeMatch {
        /// The composite subscription's id, as the receiver gave it.
        id: MessageId,
        /// The publications used, each with the leaf (numbered in that subscription from 0)
        /// it was used for.
        #[serde(deserialize_with = "bounded::vec")]
        pubs: Vec<(u32, Arc<Stamped>)>,
    },
    /// A history store: what it keeps, flooded so that historic subscriptions can be
    /// routed toward it. Its id's broker is the store's.
    HistoryAdvertise {
        /// Its federation-wide id.
        id: MessageId,
        /// The store's filter.
        filter: Arc<Subscription>,
    },
    /// A history store no longer reachable through the sender (or gone).
    HistoryUnadvertise {
        /// Its id.
        id: MessageId,
    },
    /// Historic subscription `query`: every store beyond the receiver whose filter
    /// intersects `sub` answers with what it holds that `sub` selects.
    HistoryQuery {
        /// The historic subscription's id.
        query: MessageId,
        /// The subscription (its `time` range reaches into the past).
        sub: Arc<Subscription>,
        /// Most publications wanted.
        limit: u64,
        /// How long the sender waits for this broker's `HistoryDone` (ms): this broker
        /// gives up on the stores beyond it sooner, so that the sender learns which of them
        /// were silent instead of naming them all.
        timeout_ms: u64,
    },
    /// Stored publications answering `query`, some of them (answers come in chunks).
    HistoryAnswer {
        /// The historic subscription's id.
        query: MessageId,
        /// The stored publications, each with its stamp.
        #[serde(deserialize_with = "bounded::vec")]
        pubs: Vec<Arc<Stamped>>,
    },
    /// Every store beyond the sender has answered `query`, or timed out.
    HistoryDone {
        /// The historic subscription's id.
        query: MessageId,
        /// The stores that did not answer in time (by broker).
        #[serde(deserialize_with = "bounded::vec")]
        missing: Vec<Name>,
    },
    /// With cycles: a broker lost its path to advertisement `tree`'s advertiser (the link
    /// it came over is gone for good). Flooded, once per broker and epoch, to the
    /// advertiser's broker, which floods the advertisement again with epoch `epoch + 1`.
    TreeRepair {
        /// The advertisement.
        tree: MessageId,
        /// The epoch of the path that was lost.
        epoch: u32,
    },
    /// The answer to a [`BrokerMessage::TreeSubscribe`]: its copies on every tree it
    /// names have settled ([`BrokerMessage::Settled`] for each
    /// [`Forwarded::TreeSubscription`], in one message).
    TreesSettled {
        /// The subscription.
        id: MessageId,
        /// The trees.
        #[serde(deserialize_with = "bounded::vec")]
        trees: Vec<MessageId>,
    },
}

/// A forwarded message that is answered with [`BrokerMessage::Settled`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Forwarded {
    /// [`BrokerMessage::Advertise`] of this id.
    Advertisement(MessageId),
    /// [`BrokerMessage::Subscribe`] of this id.
    Subscription(MessageId),
    /// [`BrokerMessage::TreeSubscribe`] of this id on this tree (since version 14 answered
    /// with [`BrokerMessage::TreesSettled`], with the other trees of its message).
    TreeSubscription {
        /// The subscription.
        id: MessageId,
        /// The tree.
        tree: MessageId,
    },
    /// [`BrokerMessage::CompositeSubscribe`] of this id.
    Composite(MessageId),
    /// [`BrokerMessage::Unadvertise`] of this id (since version 6: a withdrawal is answered
    /// once the composite patterns it moved are in place).
    Unadvertisement(MessageId),
}

/// A client's secret token: never printed (`Debug` shows `Token(..)`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(pub String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// One unit of the protocol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// First frame of a connection, from the side that connected.
    Hello {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// Client or broker.
        role: Role,
        /// The client's or broker's name.
        name: Name,
        /// A client's token, proving it is the principal `name` (since version 12); brokers
        /// and anonymous clients give none.
        token: Option<Token>,
    },
    /// The answer to a compatible [`Frame::Hello`].
    Welcome {
        /// [`PROTOCOL_VERSION`] of the broker.
        version: u32,
        /// The broker's name.
        broker: Name,
    },
    /// A message from a client, numbered so that the reply can name it.
    Request {
        /// The client's request number.
        req: u64,
        /// What is asked.
        message: Message,
    },
    /// A request succeeded.
    Ok {
        /// The request number.
        req: u64,
        /// The id assigned to an advertisement, subscription or composite subscription.
        id: Option<MessageId>,
    },
    /// A request (or the connection, without a request number) failed.
    Error {
        /// The request number, if the error answers one.
        req: Option<u64>,
        /// What kind of failure.
        code: ErrorCode,
        /// A human-readable explanation.
        message: String,
    },
    /// A publication matching the client's subscriptions: one frame per publication, naming
    /// every subscription of the client it matched.
    Notification {
        /// The subscriptions (or composite subscriptions) it matched, at least one.
        #[serde(deserialize_with = "bounded::vec")]
        subs: Vec<MessageId>,
        /// The publication, shared with the router's other copies.
        publication: Arc<Publication>,
    },
    /// The sender is closing the connection.
    Bye {
        /// Why, for the receiver to act on.
        code: CloseCode,
        /// Why, for people.
        reason: String,
    },
    /// Routing traffic on a link between neighbour brokers, numbered within the link
    /// session (from 1), so that a link that returns resumes where it broke.
    Broker {
        /// Its number in the session.
        seq: u64,
        /// The message.
        message: BrokerMessage,
    },
    /// A publication sent without waiting: no reply when it is routed; a refusal comes back
    /// as an [`Frame::Error`] without a request number. For publishers that stream.
    Publish {
        /// The publication.
        publication: Arc<Publication>,
    },
    /// A question about the broker itself, numbered like a request.
    Query {
        /// The client's request number.
        req: u64,
        /// What is asked.
        query: Query,
    },
    /// The answer to a [`Frame::Query`].
    Report {
        /// The request number.
        req: u64,
        /// The answer.
        report: Report,
    },
    /// A match of one of the client's composite subscriptions.
    CompositeNotification {
        /// The composite subscription.
        sub: MessageId,
        /// The publications used, each with the leaf (numbered from 0, left to right) it
        /// was used for, sorted by leaf.
        #[serde(deserialize_with = "bounded::vec")]
        pubs: Vec<(u32, Arc<Publication>)>,
    },
    /// The stored publications of historic subscription `sub` have all been delivered
    /// (as notifications, in time order); live ones follow, if its range is open-ended.
    EndOfHistory {
        /// The subscription.
        sub: MessageId,
        /// How many stored publications were delivered.
        count: u64,
        /// The stores (by broker) that did not answer in time.
        #[serde(deserialize_with = "bounded::vec")]
        missing: Vec<Name>,
        /// True if more were stored than the broker delivers for one subscription.
        truncated: bool,
    },
    /// Between neighbour brokers, first on every link: the broker with the smaller name
    /// names the link session it holds and how many of its neighbour's messages it has
    /// passed on; the other answers with the same session and its own count, or with
    /// `fresh` if it does not hold that session and may not start it (see
    /// `padres_broker::resume`).
    ///
    /// From a client, first after the welcome: the client session it held (0 for none) and
    /// how many of the broker's frames it has received in it. The broker answers with the
    /// session and how many of the client's frames (requests, publications, queries) it
    /// has passed on, the client then sends again those after; or with `fresh` and a new
    /// session (0: the broker keeps no client sessions), and the client starts over.
    Resume {
        /// The session's id (the leading broker's choice, never reused).
        session: u64,
        /// Messages of the session received and passed on.
        received: u64,
        /// From the leader: a session the other side has not confirmed (it may start it).
        /// From the other side: it does not hold the session (the leader starts a new one).
        fresh: bool,
    },
    /// Between neighbour brokers, or a client and its broker: every message or frame of the
    /// session up to `received` has been passed on (the sender may forget them).
    Ack {
        /// Messages of the session received and passed on.
        received: u64,
    },
}

/// What a client may ask a broker about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// Counters: connections, table sizes, messages.
    Stats,
    /// The routing tables: of each, the entries `filter` selects, from the `offset`-th
    /// (by id), at most `limit`.
    Routes {
        /// Most entries listed per table (the totals are always given).
        limit: u32,
        /// Entries skipped, of those the filter selects.
        offset: u32,
        /// Only entries whose id, text, origin or destinations contain this (ASCII case
        /// ignored); empty: every entry.
        filter: String,
    },
    /// Closes the link to neighbour `peer` at once, as if the network had broken it, and
    /// keeps it down (neither dialled nor accepted) for `down_ms` milliseconds: for fault
    /// injection (`scripts/chaos-chain --cut`).
    DropLink {
        /// The neighbour.
        peer: Name,
        /// How long the link stays down.
        down_ms: u32,
    },
}

/// A broker's answer to a [`Query`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Report {
    /// Answers [`Query::Stats`].
    Stats(Box<BrokerStats>),
    /// Answers [`Query::Routes`].
    Routes(RoutesReport),
    /// Answers [`Query::DropLink`]: whether a link to the neighbour was up and is now
    /// closed.
    LinkDropped(bool),
}

/// A broker's counters, since it started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerStats {
    /// The broker's name.
    pub broker: Name,
    /// Milliseconds since it started.
    pub uptime_ms: u64,
    /// Clients connected now.
    pub clients: u64,
    /// Connections accepted and open now: clients, and links other brokers dialled.
    pub connections: u64,
    /// Neighbour links up now.
    #[serde(deserialize_with = "bounded::vec")]
    pub neighbours: Vec<Name>,
    /// Advertisements in the SRT.
    pub advertisements: u64,
    /// Subscriptions in the PRT.
    pub subscriptions: u64,
    /// Requests received from clients.
    pub client_requests: u64,
    /// Publications received from clients.
    pub publications_in: u64,
    /// Notifications sent to clients.
    pub notifications_out: u64,
    /// Messages received from neighbours.
    pub broker_messages_in: u64,
    /// Messages sent to neighbours.
    pub broker_messages_out: u64,
    /// Clients cut off because they did not read their notifications.
    pub slow_clients_dropped: u64,
    /// Brokers refused at the hello (no certificate from the federation CA, or one for
    /// another name).
    pub links_refused: u64,
    /// Neighbour links cut because they did not keep up.
    pub links_cut: u64,
    /// Composite subscriptions and parts of them held (from clients and neighbours).
    pub composites: u64,
    /// Composite detectors running here.
    pub detectors: u64,
    /// Partial matches the detectors store now.
    pub partial_matches: u64,
    /// Their estimated size in bytes (each counts its share of the publications it holds),
    /// which the broker's `max_partial_match_bytes` caps.
    pub partial_match_bytes: u64,
    /// That cap, in bytes.
    pub partial_match_bytes_cap: u64,
    /// Composite matches the detectors completed.
    pub composite_matches: u64,
    /// Partial matches evicted by a cap.
    pub partials_evicted: u64,
    /// Partial matches dropped because their `within` window passed.
    pub partials_expired: u64,
    /// Partial matches ended by an `until` publication.
    pub partials_ended: u64,
    /// Matches not formed because one input reached the pair limit at a node.
    pub pairs_dropped: u64,
    /// Publications the history store wrote.
    pub history_stored: u64,
    /// Publications routed but not stored: the store's queue was full.
    pub history_dropped: u64,
    /// Publications not stored: their write failed.
    pub history_failed: u64,
    /// Rows deleted by the store's retention.
    pub history_removed: u64,
    /// Publications waiting to be written.
    pub history_queued: u64,
    /// Rows in the store (as of the last retention pass, once a second).
    pub history_rows: u64,
    /// Link sessions that went on over a new link after theirs dropped.
    pub link_sessions_resumed: u64,
    /// Broker messages sent from a link session's outbox when its link returned: in
    /// flight when it broke, or routed to the neighbour while it was down.
    pub link_messages_resent: u64,
    /// Broker messages received twice (sent again over a returning link) and dropped.
    pub link_duplicates_dropped: u64,
    /// Link sessions ended because their link did not return within the window, or too
    /// much waited unacknowledged.
    pub link_sessions_expired: u64,
    /// Client sessions that went on over a new connection after theirs was lost.
    pub client_sessions_resumed: u64,
    /// Frames sent again to clients whose sessions resumed: in flight when the connection
    /// was lost, or queued for the client while it was gone.
    pub client_frames_resent: u64,
    /// Client sessions ended because their client did not return within the window, or
    /// too much waited for it.
    pub client_sessions_expired: u64,
    /// What was sent to each neighbour, per message class (by neighbour, then class).
    #[serde(deserialize_with = "bounded::vec")]
    pub link_traffic: Vec<LinkTraffic>,
    /// Clients refused at the hello: a wrong token, or none where one is required (since
    /// version 12).
    #[serde(default)]
    pub clients_refused: u64,
    /// Client requests refused because their principal lacked the right.
    #[serde(default)]
    pub permission_denials: u64,
    /// Neighbours found to have restarted (holding no link session) and re-synchronised.
    #[serde(default)]
    pub neighbour_restarts: u64,
    /// Publications kept for a restarted neighbour and sent to it once it had
    /// re-synchronised.
    #[serde(default)]
    pub restart_publications_sent: u64,
    /// Publications from neighbours dropped as passed on already (sent again after a
    /// restart).
    #[serde(default)]
    pub restart_duplicates_dropped: u64,
    /// Requests and forwarded copies answered at their settle deadline instead of settled
    /// (`limits.settle_timeout_ms`).
    #[serde(default)]
    pub settle_timeouts: u64,
}

/// Messages of one class sent to one neighbour, since the broker started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkTraffic {
    /// The neighbour.
    pub peer: Name,
    /// The publications' `class`, or a name in parentheses for other routing traffic:
    /// `(advertise)`, `(subscribe)`, `(composite)`, `(composite match)`, `(history)`,
    /// `(link)`, and `(other)` for classes past the broker's limit per neighbour.
    pub class: String,
    /// Messages sent.
    pub messages: u64,
    /// Their encoded bytes.
    pub bytes: u64,
}

/// One row of a routing table, as text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteEntry {
    /// The advertisement's or subscription's id.
    pub id: MessageId,
    /// The advertisement or subscription, in canonical text.
    pub text: String,
    /// The hop it came from: `client N` or `broker NAME`.
    pub from: String,
    /// Brokers it was forwarded to (subscriptions; empty for advertisements).
    #[serde(deserialize_with = "bounded::vec")]
    pub to: Vec<Name>,
}

/// A broker's routing tables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesReport {
    /// The broker's name.
    pub broker: Name,
    /// Neighbour links up now.
    #[serde(deserialize_with = "bounded::vec")]
    pub neighbours: Vec<Name>,
    /// Advertisements (the SRT), sorted by id, at most the asked limit.
    #[serde(deserialize_with = "bounded::vec")]
    pub srt: Vec<RouteEntry>,
    /// How many advertisements there are in all.
    pub srt_total: u64,
    /// Subscriptions (the PRT), sorted by id, at most the asked limit.
    #[serde(deserialize_with = "bounded::vec")]
    pub prt: Vec<RouteEntry>,
    /// How many subscriptions there are in all.
    pub prt_total: u64,
    /// Composite subscriptions and parts (`to`: the brokers parts went to), sorted by id,
    /// at most the asked limit.
    #[serde(deserialize_with = "bounded::vec")]
    pub composites: Vec<RouteEntry>,
    /// How many there are in all.
    pub composites_total: u64,
    /// The entries skipped in each table, as asked.
    pub offset: u64,
    /// The filter, as asked (empty: none).
    pub filter: String,
    /// How many entries of the SRT, the PRT and the composites the filter selects (the
    /// totals without one).
    pub srt_matched: u64,
    /// See `srt_matched`.
    pub prt_matched: u64,
    /// See `srt_matched`.
    pub composites_matched: u64,
}
