//! Composite subscriptions in the network: where each pattern is detected (PADRES's
//! destination tree, paper Fig. 4) and how its parts and matches travel.
//!
//! A composite subscription, or a part of one, arrives from a hop (a client, or the
//! neighbour that placed it here). For each node of its pattern this broker computes a
//! **destination** from the SRT: a leaf's is the one neighbour all the advertisements it
//! overlaps came from, *here* if they came from several hops or from a local client, and
//! *nowhere* if there are none; an operator's is its children's if they agree (nowhere
//! agrees with anything), *here* otherwise. The hop the part came from is left out: its
//! publications are that hop's to handle.
//!
//! - A pattern whose root goes to one neighbour is **forwarded whole** there, under an id
//!   of this broker's; its matches come back under that id and go on to the subscribers.
//! - Otherwise its `&` and `||` chains are first regrouped so that the operands bound for
//!   one neighbour form one subtree (`Tree::regroup`; the matches are the same, leaf
//!   numbers are mapped back for the subscribers), and it is **split** and detected here (`crate::detector`): walking down from the
//!   root, a child subtree bound for one neighbour is forwarded there as a part of its own
//!   (detected there, one composite match coming back per match), and the leaves reached
//!   become ordinary subscriptions of this broker's detectors (hop [`Hop::Detector`]),
//!   routed toward their advertisements like any other, covering and cycles included.
//!   An `until` filter becomes one more such subscription.
//! - Identical patterns from the same upstream (every local client counts as the same)
//!   share one placement and one detector; each subscriber gets every match. Identical
//!   parts bound for the same neighbour, from any patterns here, are forwarded once and
//!   their matches fanned out here, so a part is detected once per neighbour it serves.
//! - When the SRT changes, every pattern's destinations are computed again, and a pattern
//!   whose placement changes is torn down and placed anew (its partial matches are lost;
//!   matches of publications published after the change are not). The copies the new
//!   placement sends are waited for by the input that caused it, so an `advertise` that
//!   moves a pattern is answered once the pattern's new parts are in place.
//! - With [`super::Options::detect_at_subscriber`] (PADRES 2.1's strategy, kept to compare
//!   with), a client's pattern is never forwarded: it is detected at the client's broker,
//!   every leaf an ordinary subscription.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use padres_lang::composite::{CompositeOp, Expr, Node};
use padres_lang::wire::{BrokerMessage, Forwarded};
use padres_lang::{CompositeSubscription, MessageId, Name, Stamped, Subscription, overlaps};

use super::detection::{Detection, DetectorOp, Subscribers};
use super::{Hop, Output, Router};
use crate::detector::{Bounds, DetectorDetail, DetectorId, Match};

/// A pattern and the upstream broker it came from (`None`: a local client); shared, since
/// every publication that feeds a detector looks its pattern up by it.
pub(super) type PartKey = Arc<(String, Option<Name>)>;

/// What a publication matching a detector subscription feeds: the pattern, the
/// subscription's role in it, and the pattern's detector here.
pub(super) type DetectorInput = (PartKey, Role, DetectorId);

/// The detector inputs one publication feeds: usually one (a leaf or an end), inline.
pub(super) type DetectorInputs = smallvec::SmallVec<[DetectorInput; 2]>;

/// A leaf reaching into the past: its number and subscription.
pub(super) type HistoricLeaf = (u32, Arc<Subscription>);

/// Where a node's publications come from, seen from this broker.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Dest {
    /// No advertisement overlaps it.
    Nowhere,
    /// All of them from this neighbour.
    Hop(Name),
    /// From several hops, or from a local client: detect here.
    Here,
}

impl Dest {
    fn combine(self, other: Self) -> Self {
        match (self, other) {
            (Self::Nowhere, d) | (d, Self::Nowhere) => d,
            (Self::Hop(a), Self::Hop(b)) if a == b => Self::Hop(a),
            _ => Self::Here,
        }
    }
}

/// What a detector subscription feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Role {
    /// Leaf number `n` of the pattern.
    Leaf(usize),
    /// The `until` filter.
    End,
}

#[derive(Debug)]
enum Placement {
    /// Not placed (being built or torn down).
    Unplaced,
    /// Forwarded whole to a neighbour under `id`.
    Whole { to: Name, id: MessageId },
    /// Detected here.
    Split {
        detector: DetectorId,
        /// The detector's subscriptions (leaves and `until`).
        subs: Vec<MessageId>,
        /// Parts forwarded: (id, neighbour, node).
        parts: Vec<(MessageId, Name, usize)>,
    },
}

#[derive(Debug)]
struct Part {
    cs: Arc<CompositeSubscription>,
    /// The pattern as detected here: `cs` with its `&` and `||` chains regrouped by
    /// destination, so the operands bound for one neighbour form one part.
    detected: Arc<CompositeSubscription>,
    upstream: Option<Name>,
    /// Where its matches go, each with the id that subscriber knows it by.
    subscribers: BTreeSet<(Hop, MessageId)>,
    dests: Vec<Dest>,
    placement: Placement,
    /// A client's pattern with a leaf reaching into the past: detected at the client's
    /// broker, where the stored publications of those leaves are fed in.
    historic: bool,
}

/// A part forwarded to a neighbour, shared by every pattern here that needs the same part
/// from it: sent once, its matches fanned out here.
#[derive(Debug)]
struct Outgoing {
    /// Its text and neighbour.
    key: (String, Name),
    /// The patterns (and their nodes) it stands for.
    users: Vec<(PartKey, usize)>,
}

/// The composite state of one broker.
#[derive(Debug)]
pub(super) struct Composites {
    /// By pattern (foldhash: looked up for every match a detector completes).
    parts: foldhash::HashMap<PartKey, Part>,
    /// (subscriber, its id) → the part.
    subscribers: HashMap<(Hop, MessageId), PartKey>,
    /// A part this broker forwarded, by the id it gave it.
    sent: HashMap<MessageId, Outgoing>,
    /// The id of the part forwarded with this text to this neighbour.
    outgoing: HashMap<(String, Name), MessageId>,
    /// Where the detectors run.
    pub(super) stage: Stage,
    /// The number the next detector gets.
    next_detector: DetectorId,
}

/// Where this broker's detectors run.
#[derive(Debug)]
pub(super) enum Stage {
    /// In the router: every [`DetectorOp`] is applied at once.
    Here(Box<Detection>),
    /// After it ([`super::Options::offload_detection`]): every op is an
    /// [`Output::Detect`].
    Elsewhere,
}

impl Composites {
    pub(super) fn new(bounds: Bounds, offload: bool) -> Self {
        let stage = if offload { Stage::Elsewhere } else { Stage::Here(Box::new(Detection::new(bounds))) };
        Self {
            parts: foldhash::HashMap::default(),
            subscribers: HashMap::new(),
            sent: HashMap::new(),
            outgoing: HashMap::new(),
            stage,
            next_detector: 0,
        }
    }

    /// The detection stage, if it runs here.
    pub(super) fn detection(&self) -> Option<&Detection> {
        match &self.stage {
            Stage::Here(detection) => Some(detection),
            Stage::Elsewhere => None,
        }
    }

    /// How many composite subscriptions (subscriber entries) are held.
    pub(super) fn len(&self) -> usize {
        self.subscribers.len()
    }

    /// `(id, text, from, brokers its parts went to)` for every subscriber entry.
    pub(super) fn entries(&self) -> Vec<(MessageId, String, Hop, Vec<Name>)> {
        let mut rows: Vec<_> = self
            .subscribers
            .iter()
            .filter_map(|((hop, id), key)| {
                let part = self.parts.get(key)?;
                let to = match &part.placement {
                    Placement::Whole { to, .. } => vec![to.clone()],
                    Placement::Split { parts, .. } => {
                        parts.iter().map(|(_, n, _)| n.clone()).collect::<BTreeSet<_>>().into_iter().collect()
                    }
                    Placement::Unplaced => Vec::new(),
                };
                Some((id.clone(), part.cs.to_string(), hop.clone(), to))
            })
            .collect();
        rows.sort();
        rows
    }

    /// The detectors running here, by id: how many there are, and those from the
    /// `offset`-th, at most `limit`.
    pub(super) fn detector_rows(&self, offset: usize, limit: usize) -> (usize, Vec<DetectorRow>) {
        let mut here: Vec<(DetectorId, &Part)> = self
            .parts
            .values()
            .filter_map(|part| match &part.placement {
                Placement::Split { detector, .. } => Some((*detector, part)),
                Placement::Whole { .. } | Placement::Unplaced => None,
            })
            .collect();
        here.sort_unstable_by_key(|(detector, _)| *detector);
        let rows = here
            .iter()
            .skip(offset)
            .take(limit)
            .filter_map(|&(detector, part)| {
                let Placement::Split { subs, parts, .. } = &part.placement else { return None };
                Some(DetectorRow {
                    detector,
                    pattern: part.detected.to_string(),
                    subscribers: part.subscribers.iter().map(|(hop, id)| (hop.clone(), id.clone())).collect(),
                    subscriptions: subs.len(),
                    parts: parts
                        .iter()
                        .map(|(id, to, node)| (id.clone(), to.clone(), part.detected.part(*node).to_string()))
                        .collect(),
                    detail: self.detection().and_then(|d| d.detail(detector)).unwrap_or_default(),
                })
            })
            .collect();
        (here.len(), rows)
    }
}

/// A detector running here ([`Router::detectors_page`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectorRow {
    /// Its number among this broker's detectors.
    pub detector: DetectorId,
    /// The pattern it detects, as regrouped here.
    pub pattern: String,
    /// Where its matches go, each with the id that subscriber knows the pattern by.
    pub subscribers: Vec<(Hop, MessageId)>,
    /// Its subscriptions here (leaves and `until` matched at this broker).
    pub subscriptions: usize,
    /// Parts detected elsewhere and sent on: the id given, the neighbour, the text.
    pub parts: Vec<(MessageId, Name, String)>,
    /// What it stores and has completed.
    pub detail: DetectorDetail,
}

fn upstream(hop: &Hop) -> Option<Name> {
    match hop {
        Hop::Broker(b) => Some(b.clone()),
        Hop::Client(_) | Hop::Detector | Hop::History => None,
    }
}

fn leaf_sub(cs: &CompositeSubscription, node: usize) -> &Subscription {
    match cs.expr(node) {
        Expr::Leaf(sub) | Expr::Times(sub, ..) => sub,
        Expr::Binary(..) => unreachable!("a leaf node"),
    }
}

fn is_leaf(cs: &CompositeSubscription, node: usize) -> bool {
    !matches!(cs.expr(node), Expr::Binary(..))
}

impl Router {
    /// Composite subscription `id` from `from` (a client, or a neighbour placing a part).
    pub(super) fn composite_subscribe(
        &mut self,
        from: Hop,
        id: MessageId,
        cs: Arc<CompositeSubscription>,
        out: &mut Vec<Output>,
    ) {
        let subscriber = (from.clone(), id);
        if self.composites.subscribers.contains_key(&subscriber) {
            return;
        }
        let historic =
            matches!(from, Hop::Client(_)) && cs.atoms().any(|s| super::history::is_historic(s, self.now));
        // A client's pattern reaching into the past is fed its leaves' stored publications
        // by queries of its own: shared, a second subscriber's answers would be stored
        // again beside the first's, and every match made twice. It gets a detector of its
        // own: its key adds its id to the text.
        let text = if historic { format!("{cs}\u{0}{}", subscriber.1) } else { cs.to_string() };
        let key: PartKey = Arc::new((text, upstream(&from)));
        self.composites.subscribers.insert(subscriber.clone(), key.clone());
        if let Some(part) = self.composites.parts.get_mut(&key) {
            part.subscribers.insert(subscriber);
            self.subscribers_changed(&key, out);
            // Shared: the reply waits for the copies the placement sent, answered or not.
            self.await_placement(&key);
            return;
        }
        let part = Part {
            detected: cs.clone(),
            cs,
            upstream: upstream(&from),
            subscribers: BTreeSet::from([subscriber]),
            dests: Vec::new(),
            placement: Placement::Unplaced,
            historic,
        };
        self.composites.parts.insert(key.clone(), part);
        self.place(&key, true, out);
    }

    /// Keeps of `outputs`, which an offloaded detection stage made
    /// ([`super::Options::offload_detection`]), what is still to be delivered: a composite
    /// notification for a subscription its client has withdrawn (or a client gone) since
    /// the publication that completed it was routed is dropped, so that none follows an
    /// acknowledged unsubscribe.
    pub fn keep_deliverable(&self, outputs: &mut Vec<Output>) {
        outputs.retain(|o| match o {
            Output::CompositeNotify { client, sub, .. } => {
                self.composites.subscribers.contains_key(&(Hop::Client(*client), sub.clone()))
            }
            _ => true,
        });
    }

    /// The leaves reaching into the past of client pattern `id` of `from`, if it has any:
    /// its key, and (leaf number, leaf subscription) for each.
    pub(super) fn historic_leaves(&self, from: &Hop, id: &MessageId) -> Option<(PartKey, Vec<HistoricLeaf>)> {
        let key = self.composites.subscribers.get(&(from.clone(), id.clone()))?;
        let part = self.composites.parts.get(key).filter(|p| p.historic)?;
        let leaves = (0_u32..)
            .zip(part.cs.atoms())
            .filter(|(_, sub)| super::history::is_historic(sub, self.now))
            .map(|(leaf, sub)| (leaf, Arc::new(sub.clone())))
            .collect();
        Some((key.clone(), leaves))
    }

    /// A stored publication for leaf `leaf` of pattern `key`, detected here.
    pub(super) fn feed_leaf(
        &mut self,
        key: &PartKey,
        leaf: u32,
        stamped: &Arc<Stamped>,
        out: &mut Vec<Output>,
    ) {
        let Some(Placement::Split { detector, .. }) = self.composites.parts.get(key).map(|p| &p.placement)
        else {
            return;
        };
        let op = DetectorOp::Publication { id: *detector, leaf: leaf as usize, stamped: stamped.clone() };
        self.detector_op(op, out);
    }

    /// Hands `op` to the detection stage: applies it now if the detectors run here.
    pub(super) fn detector_op(&mut self, op: DetectorOp, out: &mut Vec<Output>) {
        match &mut self.composites.stage {
            Stage::Here(detection) => detection.apply(self.now, op, out),
            Stage::Elsewhere => out.push(Output::Detect { now: self.now, op }),
        }
    }

    /// Pattern `key`'s subscribers changed: a detector of its here sends its matches to
    /// the new set.
    fn subscribers_changed(&mut self, key: &PartKey, out: &mut Vec<Output>) {
        let Some(part) = self.composites.parts.get(key) else { return };
        if let Placement::Split { detector, .. } = part.placement {
            let subscribers: Subscribers = part.subscribers.iter().cloned().collect();
            self.detector_op(DetectorOp::Subscribers { id: detector, subscribers }, out);
        }
    }

    /// Withdraws composite subscription `id` of `from`; false if there is none.
    pub(super) fn composite_unsubscribe(
        &mut self,
        from: &Hop,
        id: &MessageId,
        out: &mut Vec<Output>,
    ) -> bool {
        let Some(key) = self.composites.subscribers.remove(&(from.clone(), id.clone())) else { return false };
        let Some(part) = self.composites.parts.get_mut(&key) else { return true };
        part.subscribers.remove(&(from.clone(), id.clone()));
        if part.subscribers.is_empty() {
            self.tear_down(&key, out);
            self.composites.parts.remove(&key);
        } else {
            self.subscribers_changed(&key, out);
        }
        true
    }

    /// Every composite subscription of `from` (a client or neighbour gone).
    pub(super) fn composites_of_gone(&mut self, from: &Hop, out: &mut Vec<Output>) {
        let mut ids: Vec<MessageId> = self
            .composites
            .subscribers
            .keys()
            .filter(|(hop, _)| hop == from)
            .map(|(_, id)| id.clone())
            .collect();
        ids.sort();
        for id in ids {
            self.composite_unsubscribe(from, &id, out);
        }
    }

    /// The SRT changed: place again every pattern whose destinations changed (only
    /// patterns with a leaf that overlaps a changed advertisement can have).
    pub(super) fn replace_composites(&mut self, out: &mut Vec<Output>) {
        let changed = std::mem::take(&mut self.srt_changed);
        let touched = |part: &Part| part.cs.atoms().any(|sub| changed.iter().any(|adv| overlaps(sub, adv)));
        let mut keys: Vec<PartKey> = self
            .composites
            .parts
            .iter()
            .filter(|(_, part)| touched(part))
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        for key in keys {
            self.place(&key, false, out);
        }
    }

    /// Link to `name` up again: patterns with parts there are placed anew (the neighbour
    /// may have restarted and lost them), and so are patterns with a destination there
    /// (with cycles, advertisements stay while their link is down, and a pattern placed
    /// meanwhile could send that neighbour nothing).
    pub(super) fn replace_composites_at(&mut self, name: &Name, out: &mut Vec<Output>) {
        let mut keys: Vec<PartKey> = self
            .composites
            .parts
            .iter()
            .filter(|(_, part)| {
                let placed_there = match &part.placement {
                    Placement::Whole { to, .. } => to == name,
                    Placement::Split { parts, .. } => parts.iter().any(|(_, n, _)| n == name),
                    Placement::Unplaced => false,
                };
                // Placing it now would send `name` a part: the whole pattern, or an
                // operator bound there (leaves always stay here, as subscriptions, which
                // the overlay restores by itself).
                let cs = &part.cs;
                let would_send = part.dests.iter().enumerate().any(|(node, d)| {
                    matches!(d, Dest::Hop(to) if to == name) && (node == cs.root() || !is_leaf(cs, node))
                });
                placed_there || would_send
            })
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        // What was forwarded there is gone with its old life: forget it, so placing anew
        // sends every part again instead of joining one that no longer exists.
        self.composites.outgoing.retain(|(_, to), _| to != name);
        self.composites.sent.retain(|_, outgoing| outgoing.key.1 != *name);
        for key in keys {
            self.place(&key, true, out);
        }
    }

    fn destinations(&self, cs: &CompositeSubscription, upstream: Option<&Name>) -> Vec<Dest> {
        let mut dests: Vec<Dest> = Vec::with_capacity(cs.nodes().len());
        for node in 0..cs.nodes().len() {
            let dest = match cs.expr(node) {
                Expr::Leaf(sub) | Expr::Times(sub, ..) => self.leaf_dest(sub, upstream),
                Expr::Binary(_, left, right) => dests[left].clone().combine(dests[right].clone()),
            };
            dests.push(dest);
        }
        dests
    }

    fn leaf_dest(&self, sub: &Subscription, upstream: Option<&Name>) -> Dest {
        let mut dest = Dest::Nowhere;
        for adv in self.adv_index.overlapping(sub) {
            let Some(e) = self.advs.get(&adv) else { continue };
            match &e.last {
                Hop::Broker(b) if Some(b) == upstream => {}
                Hop::Broker(b) => dest = dest.combine(Dest::Hop(b.clone())),
                Hop::Client(_) | Hop::Detector | Hop::History => return Dest::Here,
            }
        }
        dest
    }

    /// Places pattern `key` (again if `force`, or if its destinations changed).
    fn place(&mut self, key: &PartKey, force: bool, out: &mut Vec<Output>) {
        let Some(part) = self.composites.parts.get(key) else { return };
        let cs = part.cs.clone();
        let dests = self.destinations(&cs, part.upstream.as_ref());
        if !force && dests == part.dests && !matches!(part.placement, Placement::Unplaced) {
            return;
        }
        let at_subscriber = (self.detect_at_subscriber || part.historic) && part.upstream.is_none();
        self.tear_down(key, out);
        let root = cs.root();
        let mut detected = (cs.clone(), (0..u32::try_from(cs.atoms().count()).unwrap_or(u32::MAX)).collect());
        let placement = match &dests[root] {
            Dest::Hop(to) if !at_subscriber && self.neighbours.contains(to) => {
                let id = self.send_part(key, to, root, cs.clone(), out);
                Placement::Whole { to: to.clone(), id }
            }
            _ => {
                if !at_subscriber {
                    detected = regroup(&cs, &dests);
                }
                let cs = detected.0.clone();
                let dests =
                    self.destinations(&cs, self.composites.parts.get(key).and_then(|p| p.upstream.as_ref()));
                let mut frontier = Vec::new();
                if at_subscriber {
                    frontier.extend((0..cs.nodes().len()).filter(|&n| is_leaf(&cs, n)).map(|n| (n, None)));
                } else {
                    split(&cs, &dests, root, &mut frontier, &self.neighbours);
                }
                // The nodes detected elsewhere, whose matches come back as parts.
                let remote: Vec<usize> =
                    frontier.iter().filter(|(_, to)| to.is_some()).map(|&(node, _)| node).collect();
                let detector = self.composites.next_detector;
                self.composites.next_detector += 1;
                let subscribers: Subscribers = self
                    .composites
                    .parts
                    .get(key)
                    .map(|p| p.subscribers.iter().cloned().collect())
                    .unwrap_or_default();
                let add = DetectorOp::Add {
                    id: detector,
                    cs: cs.clone(),
                    parts: remote,
                    leaf_of: Arc::from(std::mem::take(&mut detected.1)),
                    subscribers,
                };
                self.detector_op(add, out);
                let leaves = cs.leaf_numbers();
                let mut subs = Vec::new();
                let mut parts = Vec::new();
                for (node, remote) in frontier {
                    match remote {
                        Some(to) => {
                            let id = self.send_part(key, &to, node, Arc::new(cs.part(node)), out);
                            parts.push((id, to, node));
                        }
                        None => {
                            let leaf = leaves[node].expect("the frontier's local nodes are leaves");
                            let sub = Arc::new(leaf_sub(&cs, node).clone());
                            subs.push(self.detector_sub(key, Role::Leaf(leaf), detector, sub, out));
                        }
                    }
                }
                if let Some(until) = cs.until_filter() {
                    subs.push(self.detector_sub(key, Role::End, detector, Arc::new(until.clone()), out));
                }
                Placement::Split { detector, subs, parts }
            }
        };
        if let Some(part) = self.composites.parts.get_mut(key) {
            part.dests = dests;
            part.placement = placement;
            part.detected = detected.0;
        }
    }

    /// Forwards part `cs` (node `node` of pattern `key`) to `to`, or joins the identical
    /// part already forwarded there; returns its id.
    fn send_part(
        &mut self,
        key: &PartKey,
        to: &Name,
        node: usize,
        cs: Arc<CompositeSubscription>,
        out: &mut Vec<Output>,
    ) -> MessageId {
        let text = (cs.to_string(), to.clone());
        if let Some(id) = self.composites.outgoing.get(&text).cloned() {
            if let Some(outgoing) = self.composites.sent.get_mut(&id) {
                outgoing.users.push((key.clone(), node));
            }
            self.placed.push((Forwarded::Composite(id.clone()), to.clone()));
            return id;
        }
        let id = self.next_id();
        self.composites.outgoing.insert(text.clone(), id.clone());
        self.composites.sent.insert(id.clone(), Outgoing { key: text, users: vec![(key.clone(), node)] });
        out.push(Output::ToBroker {
            to: to.clone(),
            message: BrokerMessage::CompositeSubscribe { id: id.clone(), cs },
        });
        self.placed.push((Forwarded::Composite(id.clone()), to.clone()));
        id
    }

    /// Pattern `key` no longer needs forwarded part `id` for node `node`; the last user
    /// withdraws it.
    fn release_part(&mut self, id: &MessageId, key: &PartKey, node: usize, out: &mut Vec<Output>) {
        let Some(outgoing) = self.composites.sent.get_mut(id) else { return };
        if let Some(at) = outgoing.users.iter().position(|(k, n)| k == key && *n == node) {
            outgoing.users.swap_remove(at);
        }
        if !outgoing.users.is_empty() {
            return;
        }
        let Some(Outgoing { key: (text, to), .. }) = self.composites.sent.remove(id) else { return };
        self.composites.outgoing.remove(&(text, to.clone()));
        if self.neighbours.contains(&to) {
            out.push(Output::ToBroker {
                to,
                message: BrokerMessage::CompositeUnsubscribe { id: id.clone() },
            });
        }
    }

    /// A subscription of the detector of pattern `key`, routed like a client's.
    fn detector_sub(
        &mut self,
        key: &PartKey,
        role: Role,
        detector: DetectorId,
        sub: Arc<Subscription>,
        out: &mut Vec<Output>,
    ) -> MessageId {
        let id = self.next_id();
        let before = self.awaited.len();
        self.install_sub(id.clone(), sub, Hop::Detector, out);
        if let Some(route) = self.routes.get_mut(&id) {
            route.detector = Some((key.clone(), role, detector));
        }
        // Its copies are waited for by whatever input placed the pattern.
        let copies: Vec<(Forwarded, Name)> =
            self.awaited[before..].iter().map(|(_, waits_for, to)| (waits_for.clone(), to.clone())).collect();
        self.placed.extend(copies);
        id
    }

    /// Makes the current input wait for the copies pattern `key`'s placement sent.
    fn await_placement(&mut self, key: &PartKey) {
        let Some(part) = self.composites.parts.get(key) else { return };
        match &part.placement {
            Placement::Whole { to, id } => self.placed.push((Forwarded::Composite(id.clone()), to.clone())),
            Placement::Split { subs, parts, .. } => {
                for (id, to, _) in parts {
                    self.placed.push((Forwarded::Composite(id.clone()), to.clone()));
                }
                for id in subs {
                    if let Some(e) = self.subs.get(id) {
                        for to in e.sent_to.iter().chain(e.held.iter()) {
                            self.placed.push((Forwarded::Subscription(id.clone()), to.clone()));
                        }
                    }
                }
            }
            Placement::Unplaced => {}
        }
    }

    fn tear_down(&mut self, key: &PartKey, out: &mut Vec<Output>) {
        let Some(part) = self.composites.parts.get_mut(key) else { return };
        let placement = std::mem::replace(&mut part.placement, Placement::Unplaced);
        let root = part.cs.root();
        match placement {
            Placement::Unplaced => {}
            Placement::Whole { id, .. } => self.release_part(&id, key, root, out),
            Placement::Split { detector, subs, parts } => {
                self.detector_op(DetectorOp::Remove(detector), out);
                for id in subs {
                    self.remove_sub(&id, out);
                }
                for (id, _, node) in parts {
                    self.release_part(&id, key, node, out);
                }
            }
        }
    }

    /// A publication fed `inputs` (detector subscriptions it matched, and `ids`, those of
    /// them known by id only): feed the detectors, send the matches they complete.
    pub(super) fn detect(
        &mut self,
        mut inputs: DetectorInputs,
        ids: &[MessageId],
        stamped: &Arc<Stamped>,
        out: &mut Vec<Output>,
    ) {
        // A detector subscription is removed with its placement: the detector it names is
        // the pattern's here.
        inputs.extend(ids.iter().filter_map(|id| self.routes.by_id(id)?.detector.clone()));
        // Leaves before ends: a publication that completes a match and ends its binding
        // does both, in that order.
        inputs.sort_unstable_by_key(|&(_, role, detector)| (role, detector));
        for (key, role, id) in inputs {
            let op = match role {
                Role::Leaf(leaf) => {
                    self.saw_live_leaf(&key, u32::try_from(leaf).unwrap_or(u32::MAX), stamped, out);
                    DetectorOp::Publication { id, leaf, stamped: stamped.clone() }
                }
                Role::End => DetectorOp::End { id, stamped: stamped.clone() },
            };
            self.detector_op(op, out);
        }
    }

    /// Neighbour `from` sent a match of part `id` this broker forwarded.
    pub(super) fn composite_match(
        &mut self,
        from: &Name,
        id: &MessageId,
        mut pubs: Vec<(u32, Arc<Stamped>)>,
        out: &mut Vec<Output>,
    ) {
        let Some(outgoing) = self.composites.sent.get(id) else { return };
        if outgoing.key.1 != *from {
            return;
        }
        pubs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.stamp.cmp(&b.1.stamp)));
        for (key, node) in outgoing.users.clone() {
            let Some(part) = self.composites.parts.get(&key) else { continue };
            match &part.placement {
                Placement::Whole { .. } => send_match(&part.subscribers, Match { pubs: pubs.clone() }, out),
                Placement::Split { detector, .. } => {
                    let detector = *detector;
                    let start = part.detected.subtree_start(node);
                    let offset = part.detected.leaf_numbers()[..start].iter().flatten().count();
                    let offset = u32::try_from(offset).expect("leaf numbers fit in u32");
                    // A leaf number past the part's is refused by the detector; one that
                    // would overflow here is refused now.
                    let Some(shifted) = pubs
                        .iter()
                        .map(|(leaf, p)| leaf.checked_add(offset).map(|l| (l, p.clone())))
                        .collect()
                    else {
                        continue;
                    };
                    self.detector_op(DetectorOp::Part { id: detector, node, pubs: shifted }, out);
                }
                Placement::Unplaced => {}
            }
        }
    }
}

/// Sends match `m` to each of `subscribers` (its leaves numbered as they subscribed).
pub(super) fn send_match<'a>(
    subscribers: impl IntoIterator<Item = &'a (Hop, MessageId)>,
    m: Match,
    out: &mut Vec<Output>,
) {
    for (hop, id) in subscribers {
        match hop {
            Hop::Client(client) => out.push(Output::CompositeNotify {
                client: *client,
                sub: id.clone(),
                pubs: m.pubs.iter().map(|(leaf, p)| (*leaf, p.publication.clone())).collect(),
            }),
            Hop::Broker(b) => out.push(Output::ToBroker {
                to: b.clone(),
                message: BrokerMessage::CompositeMatch { id: id.clone(), pubs: m.pubs.clone() },
            }),
            Hop::Detector | Hop::History => {}
        }
    }
}

/// A tree of a pattern being regrouped: a leaf (its node in the original), or an operator
/// over operands (`&` and `||` chains flattened).
enum Tree {
    Leaf(usize),
    Op(CompositeOp, Vec<Self>),
}

impl Tree {
    /// `node`'s subtree, chains of one commutative operator flattened.
    fn of(cs: &CompositeSubscription, node: usize) -> Self {
        match cs.expr(node) {
            Expr::Leaf(_) | Expr::Times(..) => Self::Leaf(node),
            Expr::Binary(op, left, right) => {
                let mut operands = Vec::new();
                for child in [left, right] {
                    match (op, Self::of(cs, child)) {
                        (CompositeOp::And | CompositeOp::Or, Self::Op(inner, more)) if inner == op => {
                            operands.extend(more);
                        }
                        (_, tree) => operands.push(tree),
                    }
                }
                Self::Op(op, operands)
            }
        }
    }

    /// Where its publications come from.
    fn dest(&self, dests: &[Dest]) -> Dest {
        match self {
            Self::Leaf(node) => dests[*node].clone(),
            Self::Op(_, operands) => {
                operands.iter().map(|t| t.dest(dests)).fold(Dest::Nowhere, Dest::combine)
            }
        }
    }

    /// Within `&` and `||` chains, the operands bound for one neighbour become one
    /// operand (`&` and `||` are associative and commutative, so the matches are the
    /// same); `;` keeps its order.
    fn regroup(self, dests: &[Dest]) -> Self {
        let Self::Op(op, operands) = self else { return self };
        let operands: Vec<Self> = operands.into_iter().map(|t| t.regroup(dests)).collect();
        if op == CompositeOp::Seq {
            return Self::Op(op, operands);
        }
        let mut by_neighbour: BTreeMap<Name, Vec<Self>> = BTreeMap::new();
        let mut rest = Vec::new();
        for operand in operands {
            match operand.dest(dests) {
                Dest::Hop(to) => by_neighbour.entry(to).or_default().push(operand),
                _ => rest.push(operand),
            }
        }
        let mut grouped: Vec<Self> = by_neighbour
            .into_values()
            .map(|mut group| if group.len() == 1 { group.pop().expect("one") } else { Self::Op(op, group) })
            .collect();
        grouped.extend(rest);
        if grouped.len() == 1 {
            return grouped.pop().expect("one");
        }
        Self::Op(op, grouped)
    }

    /// Appends its nodes to `nodes` in post-order (chains balanced) and its leaves'
    /// original numbers to `leaf_of`; returns its root's index.
    fn emit(
        self,
        cs: &CompositeSubscription,
        numbers: &[Option<usize>],
        nodes: &mut Vec<Node>,
        leaf_of: &mut Vec<u32>,
    ) -> u32 {
        let index = |nodes: &Vec<Node>| u32::try_from(nodes.len() - 1).expect("node indices fit in u32");
        match self {
            Self::Leaf(node) => {
                nodes.push(cs.nodes()[node].clone());
                leaf_of.push(u32::try_from(numbers[node].expect("a leaf")).expect("leaf numbers fit in u32"));
                index(nodes)
            }
            // Balanced, so a long chain stays shallow; `;` keeps its order either way.
            Self::Op(_, mut operands) if operands.len() == 1 => {
                operands.pop().expect("one").emit(cs, numbers, nodes, leaf_of)
            }
            Self::Op(op, mut operands) => {
                let right_half = operands.split_off(operands.len() / 2);
                let left = Self::Op(op, operands).emit(cs, numbers, nodes, leaf_of);
                let right = Self::Op(op, right_half).emit(cs, numbers, nodes, leaf_of);
                nodes.push(Node::Binary { op, left, right });
                index(nodes)
            }
        }
    }
}

/// `cs` with its `&` and `||` chains regrouped by destination (see [`Tree::regroup`]), and
/// the original number of each of its leaves. Falls back to `cs` itself should the
/// regrouped pattern not pass the limits again (it has the same leaves and its chains
/// are balanced, but its depth is not proven to stay within the original's).
fn regroup(cs: &Arc<CompositeSubscription>, dests: &[Dest]) -> (Arc<CompositeSubscription>, Vec<u32>) {
    let identity = || (cs.clone(), (0..u32::try_from(cs.atoms().count()).unwrap_or(u32::MAX)).collect());
    let tree = Tree::of(cs, cs.root()).regroup(dests);
    let (mut nodes, mut leaf_of) = (Vec::new(), Vec::new());
    tree.emit(cs, &cs.leaf_numbers(), &mut nodes, &mut leaf_of);
    let Ok(mut regrouped) = CompositeSubscription::new(nodes) else { return identity() };
    if let Some(window) = cs.window() {
        let Ok(within) = regrouped.within(window) else { return identity() };
        regrouped = within;
    }
    if let Some(until) = cs.until_filter() {
        let Ok(with_until) = regrouped.until(until.clone()) else { return identity() };
        regrouped = with_until;
    }
    (Arc::new(regrouped), leaf_of)
}

/// The frontier of the split below `node`: local leaves (`None`) and subtrees bound for
/// one neighbour (`Some`).
fn split(
    cs: &CompositeSubscription,
    dests: &[Dest],
    node: usize,
    frontier: &mut Vec<(usize, Option<Name>)>,
    neighbours: &BTreeSet<Name>,
) {
    let Expr::Binary(_, left, right) = cs.expr(node) else {
        frontier.push((node, None));
        return;
    };
    for child in [left, right] {
        match &dests[child] {
            Dest::Hop(to) if !is_leaf(cs, child) && neighbours.contains(to) => {
                frontier.push((child, Some(to.clone())));
            }
            _ => split(cs, dests, child, frontier, neighbours),
        }
    }
}
