//! The detection stage: this broker's composite detectors and where their matches go.
//!
//! The router decides what its detectors are fed; a [`Detection`] feeds them and turns the
//! matches they complete into outputs for the subscribers (a client's
//! [`Output::CompositeNotify`], a neighbour's
//! [`padres_lang::wire::BrokerMessage::CompositeMatch`]). Every
//! decision reaches it as a [`DetectorOp`], in the router's order, with the router's time,
//! so it needs nothing else of the router's state: it can run inside the router (the
//! default) or after it, on another thread ([`super::Options::offload_detection`]: the
//! router emits [`Output::Detect`] and the caller applies them here in order). Applied in
//! the same order at the same times, the ops give the same outputs either way, provided
//! the caller runs the timers ([`Detection::handle_timeout`]) only up to a time no op
//! still to apply precedes: a timer run ahead of them could drop a partial match that one
//! of them completes. What differs is only when the outputs come out: after the outputs
//! of the input that caused them.
//!
//! Every op runs the timers up to its own time first, as the router did before each
//! input.

use std::sync::Arc;

use padres_lang::{CompositeSubscription, MessageId, Stamped};

use super::{Hop, Output};
use crate::detector::{Bounds, Counters, DetectorDetail, DetectorId, Detectors, Match};

/// Where a detector's matches go: each subscriber with the id it knows the pattern by.
pub type Subscribers = Arc<[(Hop, MessageId)]>;

/// One thing the router asks of its detectors. A detector is named by the router's number
/// for it, never reused.
#[derive(Clone, Debug, PartialEq)]
pub enum DetectorOp {
    /// Start detector `id` for `cs`, whose nodes `parts` are fed matches detected
    /// elsewhere; leaf `i` of `cs` is leaf `leaf_of[i]` of the pattern its subscribers
    /// subscribed to.
    Add {
        /// The router's number for it.
        id: DetectorId,
        /// The pattern as detected here.
        cs: Arc<CompositeSubscription>,
        /// Its nodes detected elsewhere.
        parts: Vec<usize>,
        /// Its leaves' numbers as subscribed.
        leaf_of: Arc<[u32]>,
        /// Where its matches go.
        subscribers: Subscribers,
    },
    /// Detector `id`'s matches go to these subscribers from now on.
    Subscribers {
        /// The detector.
        id: DetectorId,
        /// Where its matches go.
        subscribers: Subscribers,
    },
    /// Drop detector `id` and everything it stores.
    Remove(DetectorId),
    /// A publication matched leaf `leaf` of detector `id`.
    Publication {
        /// The detector.
        id: DetectorId,
        /// The leaf, numbered as the detector numbers them.
        leaf: usize,
        /// The publication.
        stamped: Arc<Stamped>,
    },
    /// A publication matched detector `id`'s `until` filter.
    End {
        /// The detector.
        id: DetectorId,
        /// The publication.
        stamped: Arc<Stamped>,
    },
    /// A match of node `node` of detector `id`, detected at a neighbour, its publications
    /// numbered by the detector's leaves.
    Part {
        /// The detector.
        id: DetectorId,
        /// The node.
        node: usize,
        /// The publications, by leaf.
        pubs: Vec<(u32, Arc<Stamped>)>,
    },
}

impl DetectorOp {
    /// The detector it is for, if it feeds one.
    fn detector(&self) -> Option<DetectorId> {
        match self {
            Self::Publication { id, .. } | Self::End { id, .. } | Self::Part { id, .. } => Some(*id),
            Self::Add { .. } | Self::Subscribers { .. } | Self::Remove(_) => None,
        }
    }

    /// The publication it carries, if one.
    fn publication(&self) -> Option<&Arc<Stamped>> {
        match self {
            Self::Publication { stamped, .. } | Self::End { stamped, .. } => Some(stamped),
            _ => None,
        }
    }
}

/// How many ops apart [`Detection::apply_all`]'s stages of fetching run.
const AHEAD: usize = 2;

/// A detector running here, as the stage knows it.
#[derive(Debug)]
struct Running {
    /// Its id among the [`Detectors`].
    inner: DetectorId,
    leaf_of: Arc<[u32]>,
    subscribers: Subscribers,
}

/// The detection stage (see the module docs).
#[derive(Debug)]
pub struct Detection {
    detectors: Detectors,
    /// By the router's number (foldhash: looked up by every op).
    running: foldhash::HashMap<DetectorId, Running>,
    /// The matches one op completed, reused from op to op.
    completed: Vec<Match>,
}

impl Detection {
    /// No detectors yet, within `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            detectors: Detectors::new(bounds),
            running: foldhash::HashMap::default(),
            completed: Vec::new(),
        }
    }

    /// Runs the timers up to `now`, then `op`; appends the outputs for the matches it
    /// completes to `out`.
    pub fn apply(&mut self, now: u64, op: DetectorOp, out: &mut Vec<Output>) {
        self.detectors.handle_timeout(now);
        let mut matches = std::mem::take(&mut self.completed);
        let fed = match op {
            DetectorOp::Add { id, cs, parts, leaf_of, subscribers } => {
                let inner = self.detectors.add_with_parts(&cs, &parts);
                if let Some(old) = self.running.insert(id, Running { inner, leaf_of, subscribers }) {
                    self.detectors.remove(old.inner);
                }
                None
            }
            DetectorOp::Subscribers { id, subscribers } => {
                if let Some(running) = self.running.get_mut(&id) {
                    running.subscribers = subscribers;
                }
                None
            }
            DetectorOp::Remove(id) => {
                if let Some(running) = self.running.remove(&id) {
                    self.detectors.remove(running.inner);
                }
                None
            }
            DetectorOp::Publication { id, leaf, stamped } => {
                let fed = self.running.get(&id).inspect(|running| {
                    self.detectors.publication(running.inner, leaf, &stamped, &mut matches);
                });
                crate::detector::release([stamped]);
                fed
            }
            DetectorOp::End { id, stamped } => {
                if let Some(running) = self.running.get(&id) {
                    self.detectors.end(now, running.inner, &stamped);
                }
                crate::detector::release([stamped]);
                None
            }
            DetectorOp::Part { id, node, pubs } => match self.running.get(&id) {
                Some(running) => {
                    self.detectors.part(running.inner, node, pubs, &mut matches);
                    Some(running)
                }
                None => {
                    crate::detector::release(pubs.into_iter().map(|(_, p)| p));
                    None
                }
            },
        };
        if let Some(running) = fed {
            for m in matches.drain(..) {
                deliver(running, m, out);
            }
        }
        self.completed = matches;
    }

    /// [`Self::apply`] for each of `ops` in order. What an op reads that was last written
    /// far away (its publication, by the router, on another core when detection runs on
    /// its own thread; its detector, one among thousands) is fetched into the cache a few
    /// ops ahead, so that those misses overlap with the work of the ops before it.
    pub fn apply_all(&mut self, ops: Vec<(u64, DetectorOp)>, out: &mut Vec<Output>) {
        let mut ops = ops.into_iter();
        while let Some((now, op)) = ops.next() {
            let ahead = ops.as_slice();
            // Each stage reads what the stage before fetched.
            if let Some((_, op)) = ahead.get(3 * AHEAD - 1)
                && let Some(stamped) = op.publication()
            {
                crate::memory::prefetch(Arc::as_ptr(stamped), 1);
            }
            if let Some((_, op)) = ahead.get(2 * AHEAD - 1)
                && let Some(stamped) = op.publication()
            {
                crate::memory::prefetch(Arc::as_ptr(&stamped.publication), 1);
            }
            if let Some((_, op)) = ahead.get(AHEAD - 1) {
                if let Some(stamped) = op.publication() {
                    let attrs = stamped.publication.attrs();
                    crate::memory::prefetch(attrs.as_ptr(), attrs.len());
                }
                if let Some(running) = op.detector().and_then(|id| self.running.get(&id)) {
                    self.detectors.prefetch(running.inner);
                }
            }
            self.apply(now, op, out);
        }
    }

    /// When [`Self::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.detectors.poll_timeout()
    }

    /// Drops the partial matches whose window has passed at `now`, and forgets the
    /// `until` publications remembered long enough.
    pub fn handle_timeout(&mut self, now: u64) {
        self.detectors.handle_timeout(now);
    }

    /// The detectors' counters, with `stored` as of now.
    pub fn counters(&self) -> Counters {
        self.detectors.counters()
    }

    /// How many detectors run.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// True if none does.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The caps and windows the detectors apply.
    pub fn bounds(&self) -> &Bounds {
        self.detectors.bounds()
    }

    /// What detector `id` (the router's number) holds now and has completed.
    pub fn detail(&self, id: DetectorId) -> Option<DetectorDetail> {
        self.detectors.detail(self.running.get(&id)?.inner)
    }
}

/// Sends match `m` of `running` (its leaves numbered as detected here) to each of its
/// subscribers, numbered as they subscribed.
fn deliver(running: &Running, mut m: Match, out: &mut Vec<Output>) {
    for (leaf, _) in &mut m.pubs {
        *leaf = running.leaf_of.get(*leaf as usize).copied().unwrap_or(*leaf);
    }
    m.pubs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.stamp.cmp(&b.1.stamp)));
    super::composite::send_match(running.subscribers.iter(), m, out);
}
