//! Composite detection: the detectors of one broker, sans-IO.
//!
//! A [`Detectors`] holds one detector per composite pattern (or part of one) detected at
//! this broker. The router feeds it the publications that matched a pattern's leaves
//! ([`Detectors::publication`]), the matches of parts detected at other brokers
//! ([`Detectors::part`]) and the publications that matched a pattern's `until` filter
//! ([`Detectors::end`]); it answers with the [`Match`]es that complete the pattern. The
//! answer is the reference one (`padres_lang::semantics::composite::detect`): every
//! distinct match once, whatever order the inputs arrive in, as long as the bounds below do
//! not bite. Windows and `until` ends run on time: the owner calls
//! [`Detectors::handle_timeout`] when [`Detectors::poll_timeout`] says (the router does
//! before every input).
//!
//! # How it stores partial matches
//! Every `&` and `;` node stores the matches of both its children (a `;` stores its right
//! side's too, so that a left match stamped earlier but arriving later still pairs), keyed
//! by the values of the **join variables**: the variables both children always bind. A new
//! match looks up only the partners with its own key, never a scan of all state; the other
//! shared variables are compared pair by pair. A `Times` node stores the publications of its
//! subscription keyed by all their variables, and chains them by the stepping attribute
//! (a scan of that one binding's publications). A chain of `&`s over leaves that all bind
//! the same variables (and no others) is compiled into one node (`Op::All`, a workflow
//! job's dependencies): it stores each leaf's publications under their binding and forms
//! a match once every leaf has one, storing nothing for a part of the chain. `||` and
//! leaves store nothing. Nodes keyed by the same variables share one map, a binding's
//! lists for all of them in one bucket (`stores.rs`).
//!
//! A compiled pattern is its structure without its filters (`pattern.rs`); detectors of
//! equal structure share one (a workflow's thousands of jobs have a few shapes), so that
//! what every input reads of it stays in cache.
//!
//! # Bounds ([`Bounds`])
//! - `within`: a stored partial match is dropped once no publication can complete it inside
//!   the window: after its first stamp plus the window plus `lateness_ms` by this broker's
//!   clock ([`Counters::expired`]); a partner arriving exactly that late still completes it.
//! - Caps: at most `per_detector` stored partial matches per detector and `per_broker` in
//!   all; past a cap the longest-stored is evicted ([`Counters::evicted`]). A pattern
//!   without `within` keeps its partial matches until evicted or ended.
//! - `until`: a publication matching the filter is remembered for `lateness_ms`; while it
//!   is, no match straddling it forms. When it is forgotten, the stored partial matches of
//!   its binding that began before it are dropped ([`Counters::ended`]); until then they
//!   may still pair with publications stamped before it that arrive late, as the reference
//!   says. Partial matches that do not bind every variable of the filter are not ended,
//!   and while one that began before an end is stored, the end is not forgotten.
//! - One input forms at most `pairs_per_input` matches at each node: the partners stored
//!   most recently are tried first; the rest are dropped ([`Counters::pairs_dropped`]; an
//!   `&` chain counts one for a search cut short, by this or by examining
//!   [`TIMES_STEPS`] combinations).
//!   This is the bound on the notifications one publication causes. A `Times` input also
//!   examines at most [`TIMES_STEPS`] stored publications (chains nearest in stamp order
//!   first); a search cut short counts one dropped pair.
//! - A part's match from another broker is checked for shape before it is used
//!   (`Detector::well_formed`); a malformed one is dropped.
//!
//! Evictions, expiry by this broker's clock, and the pair limit are where an answer can
//! depart from the reference; each is counted.
//!
//! # Where publications are freed
//! The detectors hold publications a thread of the router made. Freeing one on another
//! thread writes to lines that thread keeps writing: the reference counts of its
//! attribute names and its broker's name, which every publication the router decodes or
//! stamps takes a copy of. A thread that detects beside the router calls
//! [`keep_released`]: from then on the publications the detectors on that thread let go of
//! (stored in partial matches, or carried by their inputs) are kept, and [`take_released`]
//! hands them over to be dropped by the router's thread. Elsewhere they are dropped at
//! once. Stamps the detectors keep (of `until` ends) take this thread's copy of their
//! broker name for the same reason.

mod pattern;
mod stores;

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::mem;
use std::sync::{Arc, Weak};

pub use padres_lang::Stamped;
use padres_lang::semantics::composite::stepped;
use padres_lang::{CompositeSubscription, Name, Publication, Stamp, Value};
use slab::Slab;
use smallvec::SmallVec;

use pattern::{Key, KeyPart, Op, Pattern};
use stores::{Partners, Sides, Stores};

/// A completed match: the publications used, with the leaf (numbered left to right from 0)
/// each was used for, sorted by leaf, then stamp.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// `(leaf, publication)` pairs; a `Times` leaf appears once per repetition.
    pub pubs: Vec<(u32, Arc<Stamped>)>,
}

/// The limits on what detectors store and produce (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Most partial matches one detector stores.
    pub per_detector: usize,
    /// Most partial matches the broker's detectors store in all.
    pub per_broker: usize,
    /// Most bytes the broker's stored partial matches may hold, estimated: each counts
    /// [`PARTIAL_OVERHEAD`] and the estimated size of every publication it holds (a
    /// publication held by several counts in each, so the memory used is less).
    pub max_bytes: u64,
    /// Most matches one input forms at one node.
    pub pairs_per_input: usize,
    /// How late (ms after its stamp, by this broker's clock) a publication may still arrive
    /// and be paired as the reference would.
    pub lateness_ms: u64,
}

impl Bounds {
    /// 10,000 partial matches per detector, 1,000,000 and 1 GiB (estimated) per broker, 64
    /// pairs per input per node, 10 s of lateness.
    pub const DEFAULT: Self = Self {
        per_detector: 10_000,
        per_broker: 1_000_000,
        max_bytes: 1 << 30,
        pairs_per_input: 64,
        lateness_ms: 10_000,
    };
}

impl Default for Bounds {
    /// [`Bounds::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What a stored partial match counts toward [`Bounds::max_bytes`] besides its
/// publications: about what one takes, rounded up (`padres-bench composite` measures
/// it: about 360 B).
pub const PARTIAL_OVERHEAD: u64 = 512;

/// What the detectors did, since the broker started (`stored`: now).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Partial matches stored now.
    pub stored: u64,
    /// What they hold now, estimated as [`Bounds::max_bytes`] counts it.
    pub stored_bytes: u64,
    /// Matches completed.
    pub matches: u64,
    /// Partial matches evicted by a cap.
    pub evicted: u64,
    /// Partial matches dropped because their window passed.
    pub expired: u64,
    /// Partial matches dropped by an `until` publication.
    pub ended: u64,
    /// Matches not formed because an input reached `pairs_per_input` at a node.
    pub pairs_dropped: u64,
}

/// One detector's share of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetectorDetail {
    /// Partial matches it stores now.
    pub stored: u64,
    /// What they hold, estimated as [`Bounds::max_bytes`] counts it.
    pub stored_bytes: u64,
    /// Matches it completed.
    pub matches: u64,
}

/// A detector's handle in [`Detectors`].
pub type DetectorId = u64;

/// A partial match's publications: inline up to two (most stored partial matches are
/// one publication or a pair).
type Pubs = SmallVec<[(u32, Arc<Stamped>); 2]>;
/// Variable slots' values: inline up to one (one allocation less per partial match).
type Bindings = SmallVec<[Option<Value>; 1]>;

thread_local! {
    /// The publications let go of on this thread since [`take_released`], if it keeps
    /// them ([`keep_released`]).
    static RELEASED: RefCell<Option<Vec<Arc<Stamped>>>> = const { RefCell::new(None) };
}

/// From now on, the publications the detectors on this thread let go of are kept for
/// [`take_released`] instead of being dropped (see the module docs).
pub fn keep_released() {
    RELEASED.with_borrow_mut(|released| {
        released.get_or_insert_with(Vec::new);
    });
}

/// The publications kept since the last call, for the thread that made them to drop.
pub fn take_released() -> Vec<Arc<Stamped>> {
    RELEASED.with_borrow_mut(|released| {
        // About as many next time: room made here, not grown again.
        released.as_mut().map(|r| mem::replace(r, Vec::with_capacity(r.len()))).unwrap_or_default()
    })
}

/// Lets go of `publications`: kept for [`take_released`] if this thread keeps them, else
/// dropped.
pub fn release(publications: impl IntoIterator<Item = Arc<Stamped>>) {
    let mut publications = publications.into_iter();
    // Dropped (after the loop) when the thread does not keep them, or its slot is gone
    // because the thread is ending.
    let _ = RELEASED.try_with(|released| {
        if let Some(released) = released.borrow_mut().as_mut() {
            released.extend(publications.by_ref());
        }
    });
}

/// A partial match: a match of one node, stored at its parent.
#[derive(Debug)]
struct Partial {
    pubs: Pubs,
    bindings: Bindings,
    /// Indices in `pubs` of the earliest and the latest stamp.
    first: usize,
    last: usize,
}

impl Partial {
    fn first(&self) -> &Stamp {
        &self.pubs[self.first].1.stamp
    }

    fn last(&self) -> &Stamp {
        &self.pubs[self.last].1.stamp
    }

    fn single(leaf: u32, publication: Arc<Stamped>, bindings: Bindings) -> Self {
        Self { pubs: smallvec::smallvec![(leaf, publication)], bindings, first: 0, last: 0 }
    }

    fn from_pubs(pubs: Pubs, bindings: Bindings) -> Self {
        let by_stamp = |a: &&(u32, Arc<Stamped>), b: &&(u32, Arc<Stamped>)| a.1.stamp.cmp(&b.1.stamp);
        let first = pubs.iter().enumerate().min_by(|a, b| by_stamp(&a.1, &b.1)).map_or(0, |(i, _)| i);
        let last = pubs.iter().enumerate().max_by(|a, b| by_stamp(&a.1, &b.1)).map_or(0, |(i, _)| i);
        Self { pubs, bindings, first, last }
    }

    /// The values of `slots`, if all are bound.
    fn key(&self, slots: impl IntoIterator<Item = usize>) -> Option<Key> {
        slots.into_iter().map(|s| self.bindings[s].as_ref().map(KeyPart::of)).collect()
    }
}

/// A copy of `stamp` whose broker name is this thread's own ([`Name::interned`]): copying
/// the publication's would write to a reference count the router's thread writes for every
/// publication it stamps (see the module docs).
fn local_stamp(stamp: &Stamp) -> Stamp {
    let origin = Name::interned(stamp.origin.as_str()).unwrap_or_else(|_| stamp.origin.clone());
    Stamp { origin, ..*stamp }
}

/// Its publications are released ([`release`]), not dropped.
impl Drop for Partial {
    fn drop(&mut self) {
        if !self.pubs.is_empty() {
            release(self.pubs.drain(..).map(|(_, p)| p));
        }
    }
}

/// A stored partial match, in the bucket of its key.
#[derive(Debug)]
struct Stored {
    entry: usize,
    partial: Arc<Partial>,
}

/// Where a stored partial match is: its node, side and key, and its generation (entries
/// are reused; a queued reference with another generation is stale).
#[derive(Debug)]
struct Loc {
    node: u32,
    side: u32,
    /// The partial match (its key is made from its bindings when it is removed by
    /// reference: cheaper than keeping a copy of the key for every one stored).
    partial: Arc<Partial>,
    generation: u64,
    /// What it counts toward [`Bounds::max_bytes`].
    bytes: u64,
}

/// A reference to a stored partial match from the broker-wide queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ref {
    detector: DetectorId,
    entry: usize,
    generation: u64,
}

/// What one input changes beyond its detector.
#[derive(Debug)]
struct Ctx<'a> {
    bounds: &'a Bounds,
    counters: &'a mut Counters,
    next_generation: &'a mut u64,
    /// Stored during this input: (entry, generation, expiry).
    stored: Vec<(usize, u64, Option<u64>)>,
    /// Matches formed at each node of the detector during this input.
    formed: &'a mut Vec<usize>,
}

#[derive(Debug)]
struct Detector {
    /// Shared with the other detectors of an equal pattern: kept in cache by them all.
    pattern: Arc<Pattern>,
    /// Per storing node, the stored matches of each side (a join's left (0) and right (1)
    /// child, an `&` chain's leaves, a `Times`'s one), by key.
    stores: Stores,
    entries: Slab<Loc>,
    /// What its entries count toward [`Bounds::max_bytes`].
    bytes: u64,
    /// Entries in the order stored (stale ones are skipped).
    order: VecDeque<(usize, u64)>,
    /// `until` publications remembered: binding → stamps (usually one: a generation ends
    /// once). Each stamp's broker name is this thread's copy ([`local_stamp`]).
    ends: foldhash::HashMap<Key, SmallVec<[Stamp; 1]>>,
    /// When each remembered end is forgotten.
    ends_order: VecDeque<(u64, Key, Stamp)>,
    /// The first stamps of the stored partial matches that do not bind the `until`
    /// filter's variables (with how many each): an end stamped after one of them is
    /// remembered until it goes, since it could still join a partial match of that end's
    /// binding into one that straddles the end.
    unbound: BTreeMap<Stamp, usize>,
    /// Matches completed.
    matches: u64,
}

impl Detector {
    fn new(pattern: Arc<Pattern>) -> Self {
        Self {
            stores: Stores::new(&pattern),
            pattern,
            entries: Slab::new(),
            bytes: 0,
            order: VecDeque::new(),
            ends: foldhash::HashMap::default(),
            ends_order: VecDeque::new(),
            unbound: BTreeMap::new(),
            matches: 0,
        }
    }

    fn live(&self, entry: usize, generation: u64) -> bool {
        self.entries.get(entry).is_some_and(|loc| loc.generation == generation)
    }

    fn remove_entry(&mut self, entry: usize) {
        let loc = self.entries.remove(entry);
        self.bytes -= loc.bytes;
        let node = loc.node as usize;
        let key = self.stored_key(node, &loc.partial).expect("a stored partial match binds its key");
        if let Some(stored) = self.stores.remove(node, loc.side as usize, &key, entry) {
            self.forget_unbound(&stored.partial);
        }
    }

    /// The key `partial` is stored under at `node` (removals by reference only: the
    /// slots are looked up anew).
    fn stored_key(&self, node: usize, partial: &Partial) -> Option<Key> {
        partial.key(self.pattern.key_slots(node)?)
    }

    /// True if `partial` binds every variable of the `until` filter (so an end can be
    /// matched against it).
    fn binds_until(&self, partial: &Partial) -> bool {
        self.pattern.until_vars.iter().all(|&(_, s)| partial.bindings[s].is_some())
    }

    /// `partial` is no longer stored: if it did not bind the filter's variables, it no
    /// longer holds back forgetting the ends stamped after its start.
    fn forget_unbound(&mut self, partial: &Partial) {
        if self.pattern.has_until
            && !self.binds_until(partial)
            && let Some(n) = self.unbound.get_mut(partial.first())
        {
            *n -= 1;
            if *n == 0 {
                self.unbound.remove(partial.first());
            }
        }
    }

    /// Evicts the longest-stored partial match; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        while let Some((entry, generation)) = self.order.pop_front() {
            if self.live(entry, generation) {
                self.remove_entry(entry);
                return true;
            }
        }
        false
    }

    /// Removes end `e` of binding `key` from the remembered ones.
    fn unremember(&mut self, key: Key, e: &Stamp) {
        // One lookup (the key is the queue's own copy).
        if let std::collections::hash_map::Entry::Occupied(mut stamps) = self.ends.entry(key) {
            if let Some(at) = stamps.get().iter().position(|s| s == e) {
                stamps.get_mut().remove(at);
            }
            if stamps.get().is_empty() {
                stamps.remove();
            }
        }
    }

    /// For the ends remembered until `now` or earlier: drops the stored partial matches of
    /// their bindings that began before them (from now on nothing stamped before such an
    /// end is expected to arrive, so they can no longer complete a match that does not
    /// straddle it), and forgets the end, unless a stored partial match that does not bind
    /// the filter's variables began before it: that one could still be joined with a
    /// partial match of the end's binding begun after the end, and the end must stop it.
    /// Such an end is looked at again `lateness` later. Returns how many partial matches
    /// were dropped, and when to look again, if at all.
    fn forget_ends(&mut self, now: u64, lateness: u64) -> (usize, Option<u64>) {
        let mut removed = 0;
        let mut kept = Vec::new();
        while self.ends_order.front().is_some_and(|(at, ..)| *at <= now) {
            let (_, key, e) = self.ends_order.pop_front().expect("checked");
            removed += self.drop_ended(&key, &e);
            if self.unbound.first_key_value().is_some_and(|(first, _)| *first < e) {
                kept.push((key, e));
                continue;
            }
            self.unremember(key, &e);
        }
        let again = (!kept.is_empty()).then(|| now.saturating_add(lateness.max(1)));
        for (key, e) in kept {
            self.ends_order.push_back((again.expect("set"), key, e));
        }
        (removed, again)
    }

    /// Drops the stored partial matches of `until` binding `key` that began before `e`:
    /// looked up by key where a store is keyed by exactly the filter's variables (one
    /// bucket for all its nodes), found by a scan in the others. Returns how many.
    fn drop_ended(&mut self, key: &Key, e: &Stamp) -> usize {
        let mut removed = 0;
        let mut scanned = Vec::new();
        for class in 0..self.stores.classes() {
            match self.stores.until_key(class) {
                Some(order) => {
                    let identity = order.iter().enumerate().all(|(at, &i)| at == i);
                    let permuted: Key;
                    let store_key = if identity {
                        key
                    } else {
                        permuted = order.iter().map(|&i| key[i].clone()).collect();
                        &permuted
                    };
                    prefetch_dropped(self.stores.bucket(class, store_key));
                    let (entries, bytes) = (&mut self.entries, &mut self.bytes);
                    self.stores.drop_where(class, store_key, |stored| {
                        let ended = stored.partial.first() < e;
                        if ended {
                            *bytes -= entries.remove(stored.entry).bytes;
                            removed += 1;
                        }
                        ended
                    });
                }
                None => {
                    let slots = self.pattern.until_vars.iter().map(|&(_, s)| s);
                    for stored in self.stores.class(class) {
                        let ended = stored.partial.first() < e
                            && stored.partial.key(slots.clone()).as_ref() == Some(key);
                        if ended {
                            scanned.push(stored.entry);
                        }
                    }
                }
            }
        }
        for &entry in &scanned {
            self.remove_entry(entry);
        }
        removed + scanned.len()
    }

    /// Drops stale references from `order` once they outnumber the live ones (entries also
    /// go by expiry, `until` and the broker cap, which do not pop `order`).
    fn compact_order(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order.retain(|&(entry, generation)| {
                entries.get(entry).is_some_and(|l| l.generation == generation)
            });
        }
    }

    /// The bindings `publication` gives leaf `leaf`'s variables; `None` if one variable
    /// would take two values (or an attribute is missing).
    fn bind(&self, leaf: usize, publication: &Publication, into: &mut [Option<Value>]) -> Option<()> {
        for (attr, slot) in &self.pattern.leaf_vars[leaf] {
            let value = publication.get(attr)?;
            match &into[*slot] {
                Some(bound) if !bound.same_as(value) => return None,
                Some(_) => {}
                None => into[*slot] = Some(value.clone()),
            }
        }
        Some(())
    }

    fn store(&mut self, ctx: &mut Ctx<'_>, node: usize, side: usize, key: Key, partial: Arc<Partial>) {
        let stored = self.account(ctx, node, side, partial);
        self.stores.push(node, side, key, stored);
    }

    /// Stores `partial` on `node`'s `side` and finds its partners on the other side under
    /// the same key ([`Stores::push_and_partners`]): one lookup for both.
    fn store_and_partners(
        &mut self,
        ctx: &mut Ctx<'_>,
        node: usize,
        side: usize,
        key: Key,
        partial: Arc<Partial>,
    ) -> Partners {
        let stored = self.account(ctx, node, side, partial);
        self.stores.push_and_partners(node, side, key, stored)
    }

    /// Counts `partial` in, to be stored on `node`'s `side`: its entry, bytes, place in the
    /// eviction order and expiry.
    fn account(&mut self, ctx: &mut Ctx<'_>, node: usize, side: usize, partial: Arc<Partial>) -> Stored {
        *ctx.next_generation += 1;
        let generation = *ctx.next_generation;
        let expiry = self
            .pattern
            .window
            // The first instant at which no partner can arrive in time: one stamped at the
            // window's edge may still arrive `lateness_ms` late.
            .map(|w| {
                partial
                    .first()
                    .time
                    .saturating_add(w)
                    .saturating_add(ctx.bounds.lateness_ms)
                    .saturating_add(1)
            });
        if self.pattern.has_until && !self.binds_until(&partial) {
            *self.unbound.entry(partial.first().clone()).or_default() += 1;
        }
        let bytes = PARTIAL_OVERHEAD
            + partial.pubs.iter().map(|(_, p)| p.publication.estimated_size() as u64).sum::<u64>();
        self.bytes += bytes;
        // Node and side numbers are small (a pattern has at most 4,096 nodes: `Limits`).
        #[allow(clippy::cast_possible_truncation)]
        let (n, s) = (node as u32, side as u32);
        let entry =
            self.entries.insert(Loc { node: n, side: s, partial: partial.clone(), generation, bytes });
        self.order.push_back((entry, generation));
        ctx.stored.push((entry, generation, expiry));
        Stored { entry, partial }
    }

    /// False if the match spans more than the window or across a remembered end of its
    /// binding.
    fn admissible(&self, partial: &Partial) -> bool {
        if self.pattern.window.is_some_and(|w| partial.last().time.saturating_sub(partial.first().time) > w) {
            return false;
        }
        if self.ends.is_empty() {
            return true;
        }
        let Some(key) = partial.key(self.pattern.until_vars.iter().map(|&(_, s)| s)) else { return true };
        self.ends
            .get(&key)
            .is_none_or(|stamps| !stamps.iter().any(|e| partial.first() < e && e < partial.last()))
    }

    /// A match of `node` was formed: hand it to the parent, or out if `node` is the root.
    fn propagate(&mut self, ctx: &mut Ctx<'_>, node: usize, partial: Arc<Partial>, out: &mut Vec<Match>) {
        let Some((parent, side)) = self.pattern.nodes[node].parent else {
            // Usually the match's only handle: its publications are taken, not copied.
            let pubs = Arc::try_unwrap(partial)
                .map_or_else(|shared| shared.pubs.to_vec(), |mut p| mem::take(&mut p.pubs).into_vec());
            return self.complete(ctx, pubs, out);
        };
        let (seq, key, shared) = match &self.pattern.nodes[parent].op {
            Op::Or => return self.propagate(ctx, parent, partial, out),
            Op::All { .. } => return self.all(ctx, parent, side, partial, out),
            Op::Join { seq, key, shared } => {
                // A child's match binds its parent's join variables (parts from elsewhere are
                // checked by `well_formed` first); if one did not, it could pair with nothing.
                let Some(key) = partial.key(key.iter().copied()) else { return };
                // Usually empty: cloning it allocates nothing.
                (*seq, key, shared.clone())
            }
            Op::Leaf | Op::Times { .. } => unreachable!("a leaf has no children"),
            Op::Absorbed => unreachable!("an absorbed node's children are its `All`'s"),
        };
        // Nothing stores into the other side's list while its partners are paired (only
        // ancestors of `parent` store), so many can be taken out and put back.
        let partners = self.store_and_partners(ctx, parent, side, key.clone(), partial.clone());
        for i in (0..partners.len()).rev() {
            let stored = partners.get(i);
            let (left, right) = if side == 0 { (&partial, stored) } else { (stored, &partial) };
            if seq && left.last() >= right.first() {
                continue;
            }
            let clash = shared.iter().any(|&s| match (&left.bindings[s], &right.bindings[s]) {
                (Some(a), Some(b)) => !a.same_as(b),
                _ => false,
            });
            if clash {
                continue;
            }
            if ctx.formed[parent] >= ctx.bounds.pairs_per_input {
                ctx.counters.pairs_dropped += 1;
                continue;
            }
            let bindings =
                left.bindings.iter().zip(right.bindings.iter()).map(|(l, r)| l.clone().or_else(|| r.clone()));
            let mut pubs = Pubs::with_capacity(left.pubs.len() + right.pubs.len());
            pubs.extend(left.pubs.iter().cloned());
            pubs.extend(right.pubs.iter().cloned());
            let offset = left.pubs.len();
            let first = if left.first() <= right.first() { left.first } else { offset + right.first };
            let last = if left.last() >= right.last() { left.last } else { offset + right.last };
            let combined = Partial { pubs, bindings: bindings.collect(), first, last };
            if !self.admissible(&combined) {
                continue;
            }
            ctx.formed[parent] += 1;
            self.propagate(ctx, parent, Arc::new(combined), out);
        }
        if let Partners::Taken(list) = partners {
            self.stores.put_back(parent, 1 - side, &key, list);
        }
    }

    /// A publication of leaf side `side` of [`Op::All`] node `node` (`partial`): stored under
    /// its binding; if every other leaf has publications of that binding stored, it forms
    /// a match with each combination of them (most recently stored first, at most
    /// `pairs_per_input`, and no more than [`TIMES_STEPS`] combinations examined: a search
    /// cut short counts one dropped pair).
    fn all(
        &mut self,
        ctx: &mut Ctx<'_>,
        node: usize,
        side: usize,
        partial: Arc<Partial>,
        out: &mut Vec<Match>,
    ) {
        let Op::All { key } = &self.pattern.nodes[node].op else { return };
        let Some(key) = partial.key(key.iter().copied()) else { return };
        let sides = self.pattern.sides(node);
        let stored = self.account(ctx, node, side, partial);
        let Some(lists) = self.stores.push_and_complete(node, side, sides, key, stored) else { return };
        let bindings = lists[side][0].bindings.clone();
        // An odometer over the sides' lists, each from its most recently stored.
        let mut at: SmallVec<[usize; 8]> = lists.iter().map(|list| list.len() - 1).collect();
        let mut budget = TIMES_STEPS;
        loop {
            if ctx.formed[node] >= ctx.bounds.pairs_per_input || budget == 0 {
                ctx.counters.pairs_dropped += 1;
                return;
            }
            budget -= 1;
            let mut combined = combine(&lists, &at, &bindings);
            if self.admissible(&combined) {
                ctx.formed[node] += 1;
                if self.pattern.nodes[node].parent.is_none() {
                    self.complete(ctx, mem::take(&mut combined.pubs).into_vec(), out);
                } else {
                    self.propagate(ctx, node, Arc::new(combined), out);
                }
            }
            let mut s = sides;
            loop {
                if s == 0 {
                    return;
                }
                s -= 1;
                if at[s] > 0 {
                    at[s] -= 1;
                    break;
                }
                at[s] = lists[s].len() - 1;
            }
        }
    }

    /// A match of the whole pattern, with publications `pubs`.
    fn complete(&mut self, ctx: &mut Ctx<'_>, mut pubs: Vec<(u32, Arc<Stamped>)>, out: &mut Vec<Match>) {
        ctx.counters.matches += 1;
        self.matches += 1;
        pubs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.stamp.cmp(&b.1.stamp)));
        out.push(Match { pubs });
    }

    fn leaf(&mut self, ctx: &mut Ctx<'_>, leaf: usize, publication: &Arc<Stamped>, out: &mut Vec<Match>) {
        let mut bindings: Bindings = smallvec::smallvec![None; self.pattern.slots];
        if self.bind(leaf, &publication.publication, &mut bindings).is_none() {
            return;
        }
        let node = self.pattern.leaf_node[leaf];
        #[allow(clippy::cast_possible_truncation)] // composite nodes are limited to 4096
        let single = Arc::new(Partial::single(leaf as u32, publication.clone(), bindings));
        match &self.pattern.nodes[node].op {
            Op::Leaf => self.propagate(ctx, node, single, out),
            Op::Times { count, attr, step } => {
                let (count, attr, step) = (*count, attr.clone(), step.clone());
                self.times(ctx, node, single, count, &attr, &step, out);
            }
            Op::Or | Op::Join { .. } | Op::All { .. } | Op::Absorbed => {
                unreachable!("leaf numbers name leaves")
            }
        }
    }

    /// A publication of a `Times` node: stores it, then forms every chain it is part of.
    #[allow(clippy::too_many_arguments)]
    fn times(
        &mut self,
        ctx: &mut Ctx<'_>,
        node: usize,
        single: Arc<Partial>,
        count: usize,
        attr: &str,
        step: &Value,
        out: &mut Vec<Match>,
    ) {
        let publication = single.pubs[0].1.clone();
        if publication.publication.get(attr).and_then(Value::as_number).is_none() {
            return;
        }
        if count == 1 {
            return self.propagate(ctx, node, single, out);
        }
        let leaf = self.pattern.nodes[node].leaves.0;
        let key = single
            .key(self.pattern.leaf_vars[leaf].iter().map(|&(_, s)| s))
            .expect("a leaf binds its variables");
        let bindings = single.bindings.clone();
        self.store(ctx, node, 0, key.clone(), single);
        let Some(bucket) = self.stores.take(node, 0, &key) else { return };
        let limit = ctx.bounds.pairs_per_input;
        let mut pubs: Vec<&Arc<Stamped>> = bucket.iter().map(|(_, s)| &s.partial.pubs[0].1).collect();
        pubs.sort_by(|a, b| a.stamp.cmp(&b.stamp));
        // This publication's own place (another stored one may carry an equal stamp: a
        // neighbour's duplicate; the walks skip equal stamps).
        let first_equal = pubs.partition_point(|p| p.stamp < publication.stamp);
        let at =
            (first_equal..pubs.len()).find(|&i| Arc::ptr_eq(pubs[i], &publication)).unwrap_or(first_equal);
        let chain = Chain { pubs, attr, step, limit, budget: Cell::new(TIMES_STEPS), cut: Cell::new(false) };
        let mut found = Vec::new();
        let mut dropped = 0;
        for before in 0..count {
            let mut rights = Vec::new();
            chain.walk(at, count - 1 - before, true, &mut Vec::new(), &mut rights);
            if rights.is_empty() {
                continue;
            }
            let mut lefts = Vec::new();
            chain.walk(at, before, false, &mut Vec::new(), &mut lefts);
            for left in &lefts {
                for right in &rights {
                    if found.len() >= limit {
                        dropped += 1;
                        continue;
                    }
                    let mut pubs: Vec<_> = left.iter().rev().cloned().collect();
                    pubs.push(publication.clone());
                    pubs.extend(right.iter().cloned());
                    found.push(pubs);
                }
            }
        }
        // A search cut short may have missed chains: counted once.
        ctx.counters.pairs_dropped += dropped + u64::from(chain.cut.get());
        #[allow(clippy::cast_possible_truncation)]
        let leaf = leaf as u32;
        for pubs in found {
            let last = pubs.len() - 1;
            let partial = Partial {
                pubs: pubs.into_iter().map(|p| (leaf, p)).collect(),
                bindings: bindings.clone(),
                first: 0,
                last,
            };
            if self.admissible(&partial) {
                ctx.formed[node] += 1;
                self.propagate(ctx, node, Arc::new(partial), out);
            }
        }
        self.stores.put_back(node, 0, &key, bucket);
    }

    fn part(
        &mut self,
        ctx: &mut Ctx<'_>,
        node: usize,
        mut pubs: Vec<(u32, Arc<Stamped>)>,
        out: &mut Vec<Match>,
    ) {
        pubs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.stamp.cmp(&b.1.stamp)));
        let bound = self.well_formed(node, &pubs).then(|| {
            let mut bindings: Bindings = smallvec::smallvec![None; self.pattern.slots];
            for (leaf, publication) in &pubs {
                self.bind(*leaf as usize, &publication.publication, &mut bindings)?;
            }
            Some(bindings)
        });
        let Some(bindings) = bound.flatten() else {
            return release(pubs.into_iter().map(|(_, p)| p));
        };
        let partial = Partial::from_pubs(pubs.into(), bindings);
        if self.admissible(&partial) {
            self.propagate(ctx, node, Arc::new(partial), out);
        }
    }

    /// True if `pubs` (sorted by leaf, then stamp) has the shape of a match of `node`: one
    /// publication for each leaf below an `&` or `;` (the left side's all stamped before the
    /// right side's for `;`), the publications of one side of an `||`, and a whole chain for
    /// a `Times`. A part detected elsewhere is checked with this before it is used, so that
    /// a neighbour's malformed match is dropped rather than half-used.
    fn well_formed(&self, node: usize, pubs: &[(u32, Arc<Stamped>)]) -> bool {
        let n = &self.pattern.nodes[node];
        let (lo, hi) = n.leaves;
        if pubs.is_empty() || !pubs.iter().all(|(leaf, _)| (lo..hi).contains(&(*leaf as usize))) {
            return false;
        }
        match &n.op {
            Op::Leaf => pubs.len() == 1,
            // One publication per leaf (sorted by leaf).
            Op::All { .. } => {
                pubs.len() == hi - lo
                    && pubs.iter().enumerate().all(|(i, (leaf, _))| *leaf as usize == lo + i)
            }
            Op::Absorbed => false,
            Op::Times { count, attr, step } => {
                pubs.len() == *count
                    && pubs.windows(2).all(|w| {
                        let (a, b) = (&w[0].1, &w[1].1);
                        let wanted = a.publication.get(attr).and_then(|v| stepped(v, step));
                        let got = b.publication.get(attr).and_then(Value::as_number);
                        a.stamp < b.stamp && wanted.zip(got).is_some_and(|(w, g)| g.cmp_exact(w).is_eq())
                    })
                    && pubs[0].1.publication.get(attr).and_then(Value::as_number).is_some()
            }
            Op::Or | Op::Join { .. } => {
                let (left, right) = n.children.expect("an operator has children");
                let split =
                    pubs.partition_point(|(leaf, _)| (*leaf as usize) < self.pattern.nodes[right].leaves.0);
                let (l, r) = pubs.split_at(split);
                match &n.op {
                    Op::Or => {
                        (r.is_empty() && self.well_formed(left, l))
                            || (l.is_empty() && self.well_formed(right, r))
                    }
                    Op::Join { seq, .. } => {
                        let ordered = || {
                            let l_last = l.iter().map(|p| &p.1.stamp).max();
                            let r_first = r.iter().map(|p| &p.1.stamp).min();
                            l_last.zip(r_first).is_some_and(|(a, b)| a < b)
                        };
                        self.well_formed(left, l) && self.well_formed(right, r) && (!seq || ordered())
                    }
                    Op::Leaf | Op::Times { .. } | Op::All { .. } | Op::Absorbed => {
                        unreachable!("matched above")
                    }
                }
            }
        }
    }

    /// An `until` publication: remembered for `lateness_ms`, so that no match straddling
    /// it forms (`admissible`); when it is forgotten, its binding's stored partial matches
    /// that began before it are dropped ([`Self::forget_ends`]). Until then they may still
    /// pair with publications stamped before it that arrive late. Returns when it is
    /// forgotten, or `None` if it ends nothing (an attribute of a variable is missing).
    ///
    /// At most `per_detector` ends are remembered: past that, the oldest is forgotten at
    /// once, its binding's partial matches begun before it dropped, and the longest-stored
    /// partial matches evicted until none that does not bind the filter's variables began
    /// before it (ends kept for such a partial match would otherwise pile up).
    fn end(&mut self, ctx: &mut Ctx<'_>, now: u64, publication: &Stamped) -> Option<u64> {
        let mut key = Key::with_capacity(self.pattern.until_vars.len());
        for (attr, _) in &self.pattern.until_vars {
            key.push(KeyPart::of(publication.publication.get(attr)?));
        }
        // Remembered through `now + lateness_ms`: a publication arriving then is not late.
        let forget_at = now.saturating_add(ctx.bounds.lateness_ms).saturating_add(1);
        let stamp = local_stamp(&publication.stamp);
        self.ends.entry(key.clone()).or_default().push(stamp.clone());
        self.ends_order.push_back((forget_at, key, stamp));
        while self.ends_order.len() > ctx.bounds.per_detector {
            let (_, key, e) = self.ends_order.pop_front().expect("over the cap");
            ctx.counters.ended += self.drop_ended(&key, &e) as u64;
            while self.unbound.first_key_value().is_some_and(|(first, _)| *first < e) && self.evict_oldest() {
                ctx.counters.evicted += 1;
            }
            self.unremember(key, &e);
        }
        Some(forget_at)
    }
}

/// Fetches into the cache, all at once, what checking and dropping `stored` will read: a
/// binding's partial matches are cold by the time its end is forgotten, and each is a
/// chain of allocations (the partial match, its publications' stamps, the publications,
/// their attributes), so fetched one by one they cost a round trip to memory per link.
/// Each pass reads what the pass before fetched, for all of them.
fn prefetch_dropped<'a>(stored: impl Iterator<Item = &'a Stored> + Clone) {
    use crate::memory::prefetch;
    for s in stored.clone() {
        prefetch(Arc::as_ptr(&s.partial), 1);
    }
    for s in stored.clone() {
        for (_, p) in &s.partial.pubs {
            prefetch(Arc::as_ptr(p), 1);
        }
    }
    for s in stored.clone() {
        for (_, p) in &s.partial.pubs {
            prefetch(Arc::as_ptr(&p.publication), 1);
        }
    }
    for s in stored {
        for (_, p) in &s.partial.pubs {
            let attrs = p.publication.attrs();
            prefetch(attrs.as_ptr(), attrs.len());
        }
    }
}

/// The match of an [`Op::All`] made of the publication at `at[s]` in each side's list `s`.
fn combine(lists: &[Sides], at: &[usize], bindings: &Bindings) -> Partial {
    let pubs: Pubs = lists.iter().zip(at).map(|(list, &i)| list[i].pubs[0].clone()).collect();
    Partial::from_pubs(pubs, bindings.clone())
}

/// How many stored publications one `Times` input may examine in all while it looks for
/// the chains it completes: with a step of 0 (equal values) the chains through one binding
/// are exponentially many, and the search, not only its results, must be bounded.
pub const TIMES_STEPS: usize = 1 << 16;

/// Walks `Times` chains through one binding's stored publications.
struct Chain<'a> {
    /// The binding's stored publications, in stamp order.
    pubs: Vec<&'a Arc<Stamped>>,
    attr: &'a str,
    step: &'a Value,
    limit: usize,
    /// Candidates left to examine.
    budget: Cell<usize>,
    /// Set when the search stopped with candidates unexamined.
    cut: Cell<bool>,
}

impl Chain<'_> {
    /// Every chain of `len` more publications from `pubs[at]`, stamped after it (`forward`)
    /// or before it, the nearest in stamp order tried first; at most `limit`, and no more
    /// candidates examined than the budget allows (`cut` says when either stopped the
    /// search).
    fn walk(
        &self,
        at: usize,
        len: usize,
        forward: bool,
        path: &mut Vec<Arc<Stamped>>,
        out: &mut Vec<Vec<Arc<Stamped>>>,
    ) {
        if len == 0 {
            out.push(path.clone());
            return;
        }
        // Too few publications on that side for a chain this long.
        if (forward && self.pubs.len() - at - 1 < len) || (!forward && at < len) {
            return;
        }
        let value = |i: usize| self.pubs[i].publication.get(self.attr);
        let Some(from_value) = value(at) else { return };
        let candidates = if forward { self.pubs.len() - at - 1 } else { at };
        for k in 0..candidates {
            let i = if forward { at + 1 + k } else { at - 1 - k };
            if out.len() >= self.limit || self.budget.get() == 0 {
                self.cut.set(true);
                return;
            }
            self.budget.set(self.budget.get() - 1);
            if self.pubs[i].stamp == self.pubs[at].stamp {
                continue;
            }
            let Some(candidate_value) = value(i) else { continue };
            let (earlier, later) =
                if forward { (from_value, candidate_value) } else { (candidate_value, from_value) };
            let steps = stepped(earlier, self.step)
                .zip(later.as_number())
                .is_some_and(|(wanted, got)| got.cmp_exact(wanted).is_eq());
            if steps {
                path.push(self.pubs[i].clone());
                self.walk(i, len - 1, forward, path, out);
                path.pop();
            }
        }
    }
}

/// The composite detectors of one broker (see the module docs).
#[derive(Debug, Default)]
pub struct Detectors {
    bounds: Bounds,
    /// By id (a slab key; a freed key may be reused, and queued references to the old
    /// detector's entries are stale by their generation).
    detectors: Slab<Detector>,
    /// What one input stored, reused from input to input.
    just_stored: Vec<(usize, u64, Option<u64>)>,
    /// Matches one input formed at each node, reused from input to input.
    formed: Vec<usize>,
    /// The compiled patterns in use, by [`Pattern::shape_hash`]: detectors of equal
    /// patterns share one (10,000 workflow jobs have a few shapes among them). Held by
    /// the detectors; a pattern goes with the last of them.
    patterns: foldhash::HashMap<u64, SmallVec<[Weak<Pattern>; 1]>>,
    next_generation: u64,
    /// Every stored partial match, in the order stored (stale references are skipped).
    order: VecDeque<Ref>,
    /// When partial matches with a window expire.
    expiry: BinaryHeap<Reverse<(u64, Ref)>>,
    /// When a detector forgets an `until` publication (and drops what began before it).
    ends_due: BinaryHeap<Reverse<(u64, DetectorId)>>,
    stored: usize,
    /// The sum of the detectors' `bytes`.
    bytes: u64,
    counters: Counters,
}

impl Detectors {
    /// No detectors yet, within `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        Self { bounds, ..Self::default() }
    }

    /// A detector for `cs`, whose leaves are fed publications (none of its nodes is fed
    /// matches detected elsewhere).
    pub fn add(&mut self, cs: &CompositeSubscription) -> DetectorId {
        self.add_with_parts(cs, &[])
    }

    /// A detector for `cs` whose nodes `parts` (indices into its nodes) are fed matches
    /// detected elsewhere ([`Self::part`]). A match fed to another node may be dropped as
    /// malformed: a chain of `&`s over leaves on one binding is compiled into one node.
    pub fn add_with_parts(&mut self, cs: &CompositeSubscription, parts: &[usize]) -> DetectorId {
        let pattern = Pattern::compile(cs, parts);
        let shapes = self.patterns.entry(pattern.shape_hash()).or_default();
        let pattern = match shapes.iter().filter_map(Weak::upgrade).find(|p| **p == pattern) {
            Some(shared) => shared,
            None => {
                let pattern = Arc::new(pattern);
                shapes.push(Arc::downgrade(&pattern));
                pattern
            }
        };
        self.detectors.insert(Detector::new(pattern)) as DetectorId
    }

    /// Asks the processor to bring detector `id`'s state into its cache, ahead of an input
    /// for it.
    pub fn prefetch(&self, id: DetectorId) {
        if let Some(detector) = usize::try_from(id).ok().and_then(|key| self.detectors.get(key)) {
            crate::memory::prefetch(std::ptr::from_ref(detector), 1);
        }
    }

    /// Drops detector `id` and everything it stores; false if there was none.
    pub fn remove(&mut self, id: DetectorId) -> bool {
        match usize::try_from(id).ok().and_then(|key| self.detectors.try_remove(key)) {
            Some(detector) => {
                self.stored -= detector.entries.len();
                self.bytes -= detector.bytes;
                let hash = detector.pattern.shape_hash();
                drop(detector);
                // Its pattern, if no other detector holds it, is gone: so is its entry.
                if let Some(shapes) = self.patterns.get_mut(&hash) {
                    shapes.retain(|p| p.strong_count() > 0);
                    if shapes.is_empty() {
                        self.patterns.remove(&hash);
                    }
                }
                true
            }
            None => false,
        }
    }

    /// How many detectors there are.
    pub fn len(&self) -> usize {
        self.detectors.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.detectors.is_empty()
    }

    /// The caps and windows it applies.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// What detector `id` holds now and has completed, if there is one.
    pub fn detail(&self, id: DetectorId) -> Option<DetectorDetail> {
        let detector = usize::try_from(id).ok().and_then(|key| self.detectors.get(key))?;
        Some(DetectorDetail {
            stored: detector.entries.len() as u64,
            stored_bytes: detector.bytes,
            matches: detector.matches,
        })
    }

    /// The counters, with `stored` as of now.
    pub fn counters(&self) -> Counters {
        Counters { stored: self.stored as u64, stored_bytes: self.bytes, ..self.counters }
    }

    /// Runs `input` on detector `id`, then applies the caps.
    fn input(&mut self, id: DetectorId, input: impl FnOnce(&mut Detector, &mut Ctx<'_>)) {
        let Some(detector) = usize::try_from(id).ok().and_then(|key| self.detectors.get_mut(key)) else {
            return;
        };
        self.formed.clear();
        self.formed.resize(detector.pattern.nodes.len(), 0);
        let before = detector.bytes;
        let entries_before = detector.entries.len();
        let mut ctx = Ctx {
            bounds: &self.bounds,
            counters: &mut self.counters,
            next_generation: &mut self.next_generation,
            stored: mem::take(&mut self.just_stored),
            formed: &mut self.formed,
        };
        input(detector, &mut ctx);
        let mut stored = mem::take(&mut ctx.stored);
        // What the input itself removed (an `until` ending its binding's partial matches)
        // is off the count before the broker cap is applied.
        self.stored -= entries_before + stored.len() - detector.entries.len();
        for (entry, generation, expiry) in stored.drain(..) {
            let r = Ref { detector: id, entry, generation };
            self.order.push_back(r);
            if let Some(at) = expiry {
                self.expiry.push(Reverse((at, r)));
            }
            self.stored += 1;
        }
        self.just_stored = stored;
        while detector.entries.len() > self.bounds.per_detector && detector.evict_oldest() {
            self.counters.evicted += 1;
            self.stored -= 1;
        }
        detector.compact_order();
        self.bytes = self.bytes - before + detector.bytes;
        self.apply_broker_cap();
        self.compact();
    }

    fn apply_broker_cap(&mut self) {
        while self.stored > self.bounds.per_broker || self.bytes > self.bounds.max_bytes {
            let Some(r) = self.order.pop_front() else { break };
            if self.drop_entry(r) {
                self.counters.evicted += 1;
            }
        }
    }

    /// Removes the partial match `r` refers to, if it is still stored.
    fn drop_entry(&mut self, r: Ref) -> bool {
        let detector = usize::try_from(r.detector).ok().and_then(|key| self.detectors.get_mut(key));
        match detector {
            Some(detector) if detector.live(r.entry, r.generation) => {
                let before = detector.bytes;
                detector.remove_entry(r.entry);
                self.bytes = self.bytes - before + detector.bytes;
                self.stored -= 1;
                true
            }
            _ => false,
        }
    }

    /// Drops stale references once they outnumber the live ones.
    fn compact(&mut self) {
        let live = |detectors: &Slab<Detector>, r: &Ref| {
            usize::try_from(r.detector)
                .ok()
                .and_then(|key| detectors.get(key))
                .is_some_and(|d| d.live(r.entry, r.generation))
        };
        if self.order.len() > 2 * self.stored + 1024 {
            let detectors = &self.detectors;
            self.order.retain(|r| live(detectors, r));
        }
        if self.expiry.len() > 2 * self.stored + 1024 {
            let detectors = &self.detectors;
            self.expiry.retain(|Reverse((_, r))| live(detectors, r));
        }
    }

    /// `publication` matched leaf `leaf` (numbered left to right from 0) of detector `id`;
    /// appends the matches it completes to `out`.
    pub fn publication(
        &mut self,
        id: DetectorId,
        leaf: usize,
        publication: &Arc<Stamped>,
        out: &mut Vec<Match>,
    ) {
        self.input(id, |detector, ctx| {
            if leaf < detector.pattern.leaves() {
                detector.leaf(ctx, leaf, publication, out);
            }
        });
    }

    /// A match of node `node` (an index into the pattern's post-order nodes) detected
    /// elsewhere, its publications numbered by this pattern's leaves; appends the matches
    /// it completes to `out`.
    pub fn part(
        &mut self,
        id: DetectorId,
        node: usize,
        pubs: Vec<(u32, Arc<Stamped>)>,
        out: &mut Vec<Match>,
    ) {
        let mut pubs = Some(pubs);
        self.input(id, |detector, ctx| {
            if node < detector.pattern.nodes.len() {
                detector.part(ctx, node, pubs.take().expect("given once"), out);
            }
        });
        // No such detector or node.
        release(pubs.into_iter().flatten().map(|(_, p)| p));
    }

    /// `publication` matched detector `id`'s `until` filter: its binding's partial matches
    /// stamped before it end.
    pub fn end(&mut self, now: u64, id: DetectorId, publication: &Stamped) {
        let mut forget_at = None;
        self.input(id, |detector, ctx| {
            if detector.pattern.has_until {
                forget_at = detector.end(ctx, now, publication);
            }
        });
        if let Some(at) = forget_at {
            self.ends_due.push(Reverse((at, id)));
        }
    }

    /// When [`Self::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        let expiry = self.expiry.peek().map(|Reverse((at, _))| *at);
        let ends = self.ends_due.peek().map(|Reverse((at, _))| *at);
        expiry.into_iter().chain(ends).min()
    }

    /// Drops the partial matches whose window has passed at `now`, and forgets the `until`
    /// publications remembered long enough (dropping the partial matches they ended).
    pub fn handle_timeout(&mut self, now: u64) {
        while let Some(Reverse((at, r))) = self.expiry.peek().copied() {
            if at > now {
                break;
            }
            self.expiry.pop();
            if self.drop_entry(r) {
                self.counters.expired += 1;
            }
        }
        while let Some(Reverse((at, id))) = self.ends_due.peek().copied() {
            if at > now {
                break;
            }
            self.ends_due.pop();
            // A detector removed since (or its reused slot) forgets only what is due.
            if let Some(detector) = usize::try_from(id).ok().and_then(|key| self.detectors.get_mut(key)) {
                let before = detector.bytes;
                let (forgotten, again) = detector.forget_ends(now, self.bounds.lateness_ms);
                self.bytes = self.bytes - before + detector.bytes;
                self.counters.ended += forgotten as u64;
                self.stored -= forgotten;
                if let Some(at) = again {
                    self.ends_due.push(Reverse((at, id)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use padres_lang::Name;

    #[test]
    fn remembered_ends_are_capped_and_what_holds_them_is_evicted() {
        let mut detectors = Detectors::new(Bounds { per_detector: 10, ..Bounds::default() });
        let cs: CompositeSubscription =
            "{[class,eq,'a']}&{[class,eq,'b'],[k,eq,$S$k]} until {[class,eq,'end'],[k,eq,$S$k]}"
                .parse()
                .expect("pattern");
        let id = detectors.add(&cs);
        let origin = Name::new("B").expect("name");
        let stamped = |i: u64, text: &str| {
            let publication: Publication = text.parse().expect("publication");
            Arc::new(Stamped { stamp: Stamp::new(i, origin.clone(), i), publication: Arc::new(publication) })
        };
        let mut out = Vec::new();
        // An a binds no k: while it is stored, ends after it are remembered past the lateness.
        detectors.publication(id, 0, &stamped(0, "[class,'a']"), &mut out);
        for i in 1..=50 {
            detectors.end(i, id, &stamped(i, &format!("[class,'end'],[k,'g{i}']")));
        }
        let detector = &detectors.detectors[0];
        assert!(detector.ends_order.len() <= 10, "{} ends", detector.ends_order.len());
        assert!(detector.ends.values().map(SmallVec::len).sum::<usize>() <= 10);
        let c = detectors.counters();
        assert_eq!((c.stored, c.evicted), (0, 1), "the a went with the first end over the cap: {c:?}");
    }

    #[test]
    fn detectors_of_equal_patterns_share_one_and_forget_it_with_the_last() {
        let mut detectors = Detectors::new(Bounds::default());
        let parse = |text: &str| -> CompositeSubscription { text.parse().expect("pattern") };
        let a = detectors.add(&parse("{[class,eq,'a'],[g,eq,$S$g]}&{[class,eq,'b'],[g,eq,$S$g]}"));
        let c = detectors.add(&parse("{[class,eq,'c'],[g,eq,$S$g]}&{[class,eq,'d'],[g,eq,$S$g]}"));
        // Joined on another attribute: a pattern of its own.
        let h = detectors.add(&parse("{[class,eq,'a'],[h,eq,$S$g]}&{[class,eq,'b'],[h,eq,$S$g]}"));
        // Equal but for a `Times` step: not shared, and each detects with its own step.
        let one = detectors.add(&parse("Times({[class,eq,'t'],[g,eq,$S$g]},2,x,1)"));
        let two = detectors.add(&parse("Times({[class,eq,'t'],[g,eq,$S$g]},2,x,2)"));
        let pattern = |id: DetectorId| detectors.detectors[usize::try_from(id).expect("id")].pattern.clone();
        assert!(Arc::ptr_eq(&pattern(a), &pattern(c)));
        assert!(!Arc::ptr_eq(&pattern(a), &pattern(h)));
        assert!(!Arc::ptr_eq(&pattern(one), &pattern(two)));
        let origin = Name::new("B").expect("name");
        let mut out = Vec::new();
        for (i, x) in [1, 2, 3].into_iter().enumerate() {
            let publication: Publication =
                format!("[class,'t'],[g,'g'],[x,{x}]").parse().expect("publication");
            let stamp = Stamp::new(i as u64, origin.clone(), i as u64);
            let stamped = Arc::new(Stamped { stamp, publication: Arc::new(publication) });
            for id in [one, two] {
                detectors.publication(id, 0, &stamped, &mut out);
            }
        }
        let xs: Vec<Vec<&Value>> = out
            .iter()
            .map(|m| m.pubs.iter().map(|(_, p)| p.publication.get("x").expect("x")).collect())
            .collect();
        let int = Value::Int;
        assert_eq!(xs, [vec![&int(1), &int(2)], vec![&int(2), &int(3)], vec![&int(1), &int(3)]]);
        for id in [a, c, h, one, two] {
            assert!(detectors.remove(id));
        }
        assert!(detectors.patterns.is_empty(), "{} shapes kept", detectors.patterns.len());
    }

    #[test]
    fn a_detectors_order_queue_does_not_keep_what_expired() {
        let mut detectors = Detectors::new(Bounds { lateness_ms: 0, ..Bounds::default() });
        let cs: CompositeSubscription =
            "{[class,eq,'a'],[k,=,$I$k]};{[class,eq,'b'],[k,=,$I$k]} within 10ms".parse().expect("pattern");
        let id = detectors.add(&cs);
        let origin = Name::new("B").expect("name");
        let mut out = Vec::new();
        for i in 0..100_000_u64 {
            let publication: Publication = format!("[class,'a'],[k,{i}]").parse().expect("publication");
            let stamped = Arc::new(Stamped {
                stamp: Stamp::new(i, origin.clone(), i),
                publication: Arc::new(publication),
            });
            detectors.handle_timeout(i);
            detectors.publication(id, 0, &stamped, &mut out);
        }
        let detector = &detectors.detectors[0];
        assert!(detector.entries.len() <= 12, "{}", detector.entries.len());
        assert!(detector.order.len() <= 2 * detector.entries.len() + 65, "{} queued", detector.order.len());
        assert!(detectors.order.len() <= 2 * detectors.stored + 1025);
    }
}
