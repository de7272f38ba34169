//! The matching engine: which subscriptions (and so which next hops) a publication matches.
//!
//! # Design
//!
//! Matching is done by elimination over bitsets. Each subscription gets a *slot*; a
//! publication starts with every live slot as a candidate, and each attribute crosses out
//! the slots with a predicate that fails on the publication's value. What remains matches.
//! Because "fails" is an OR over predicates, several predicates on one attribute need no
//! special handling: they are a conjunction by construction.
//!
//! - **Partitions by class.** `class` is mandatory and `eq`, so a publication only looks
//!   at the subscriptions of its own class.
//! - **Pivot groups.** Within a class, a subscription with a *rare* attribute (used by at
//!   most 1/16 of the class when it arrives) is filed under its rarest one, its pivot (the
//!   OpIndex idea). A publication only visits the groups whose pivot it carries, since
//!   every subscription needs all of its attributes present, so sparse, high-dimensional
//!   workloads touch a few small groups. Subscriptions whose attributes are all common
//!   share one group: splitting them would only multiply the per-group work.
//! - **Value pivots.** Where an attribute has more distinct `eq` string values in a class
//!   than cells can separate (512 or more: workflow leaves on `appl` or a job id), a
//!   subscription may be filed under one of its `eq` values instead, when that value is
//!   rarer than its rarest attribute: a publication visits the group of its own value
//!   only, found by one hash lookup, and that value's `eq` is not filed in the group's
//!   columns (it holds for every visitor). Without this, 10,000 workflows' leaves of one
//!   class shared one group whose `appl` cells each held hundreds of halves to compare.
//! - **Interval columns with cells** (`column.rs`). Numeric comparisons and the string
//!   operators that select an interval of the string order (`eq`, `str-lt/le/gt/ge`,
//!   `str-prefix`) are split into lower and upper halves, bucketed into cells at quantiles of
//!   their bounds. A half fails on every value of the cells on its wrong side; that is
//!   precomputed as one bit per slot per cell, so a probe is one row OR plus exact checks of
//!   the few halves whose bound shares the value's cell (the idea of bitset matchers such as
//!   HEM, with REIN's observation that counting failures beats counting successes when
//!   most predicates are broad). Rows are blocked by 4,096 slots (`bits.rs`) so an insert
//!   touches one block.
//! - **Exact list.** `neq`, `<>`, `str-postfix`, `str-contains`, `str-regex`, booleans,
//!   `$I$` variables (as type checks) and integers beyond 2^53 are checked one by one with
//!   the reference semantics. A `$S$` variable only needs a string there: it is the string
//!   kind bit below, nothing else (composite leaves joined on `$S$` are common).
//! - **Values by name.** A publication of a few attributes, visiting groups of a few
//!   columns, is not resolved to attribute ids up front: each column scans it for its
//!   name, often a pointer comparison, since names decoded on one thread share their text
//!   (`SCAN_ATTRS`). Otherwise every name is resolved once and binary-searched.
//! - **Presence and kind.** Per attribute, bitsets of the slots that constrain it at all,
//!   numerically, or as a string: a publication without the attribute, or with a value of
//!   another kind, crosses those out wholesale.
//! - **Verification.** A subscription that uses one variable twice (equal values across
//!   attributes) is confirmed with [`padres_lang::matches`] after the bitset pass.
//!
//! Inserting costs one bit per cell per half (a few hundred bits for a ten-predicate
//! subscription) and an append to one cell list per half; columns re-choose their cells
//! each time they double, so that cost is amortized. Removal is lazy (`slots.rs`): the slot
//! stops matching at once and its bits are swept in bulk later.
//!
//! [`AdvertisementIndex`] answers the advertisement side, which advertisements a
//! subscription overlaps, with the same machinery probed by intervals instead of points.
//! [`SubscriptionIndex::overlapping`] answers the reverse (which subscriptions a new
//! advertisement pulls) by checking the groups whose pivot it advertises.
//!
//! # Evidence
//!
//! `BENCHMARKS.md` has the figures (`cargo run --release -p padres-bench -- matching`).
//! Choices that measurement settled: failure rows per cell rather than counting (counting
//! increments ~5 M predicates per W1 publication); unsorted cell lists checked branch-free
//! rather than sorted ones (sorted lists made W1 inserts 8x slower for a 6% faster match);
//! pivots only on rare attributes (pivoting every subscription left W4 at 40 µs against 16 µs);
//! eight-byte string prefixes (memcmp was a third of W4's time); lazy removal (eager
//! clearing cost ~40 us per W1 removal in cache misses).

mod advertisements;
mod bits;
mod column;
mod conformance;
mod group;
mod keys;
mod slots;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use foldhash::HashMap as FastMap;
use padres_lang::value::SmolStr;
use padres_lang::{Advertisement, Name, Op, Publication, Subscription, Value};
use smallvec::SmallVec;

pub use advertisements::AdvertisementIndex;
pub use conformance::conforms;
use group::Group;

/// An attribute name, interned.
type AttrId = u32;

/// Where a subscription lives: 12 bytes, since there is one per subscription.
#[derive(Debug, Clone, Copy)]
struct Location {
    class: u32,
    pivot: Pivot,
    slot: u32,
}

/// A group's pivot: an attribute id (below [`VALUE_PIVOTS`]), a value pivot's number
/// (from [`VALUE_PIVOTS`] up), or [`NO_PIVOT`] for subscriptions with no rare attribute or
/// value.
type Pivot = u32;
const NO_PIVOT: Pivot = u32::MAX;
/// Value pivots are numbered from here; attribute ids stay below.
const VALUE_PIVOTS: Pivot = 1 << 31;
/// An attribute's `eq` values become pivots once the class has this many distinct ones:
/// beyond what a column's cells (at most 128) can tell apart, each probe would check
/// many halves one by one. Fewer values are better served by the columns (a value group
/// has a fixed cost per visit, which the bitsets of a shared group do not).
const VALUE_PIVOT_AFTER: usize = 512;
/// An attribute is rare, and worth a group of its own, if at most 1/`RARE` of its class's
/// subscriptions use it...
const RARE: usize = 16;
/// ...counted once the class has this many subscriptions.
const PIVOT_AFTER: usize = 256;

/// The subscriptions of one class.
#[derive(Debug)]
struct Partition<K> {
    groups: FastMap<Pivot, Group<K>>,
    /// How many subscriptions of the class constrain each attribute (for pivot choice).
    uses: HashMap<AttrId, usize>,
    /// How many subscriptions of the class have each `eq` string literal, by attribute.
    values: HashMap<AttrId, HashMap<SmolStr, usize>>,
    /// The value pivots with a group: per attribute that has some (a few at most, sorted by
    /// id), value → pivot (foldhash: the values of a publication's attributes are looked
    /// up on every match, and SipHash cost W4 8%; it is seeded per process, so clients
    /// cannot choose colliding values); and back.
    value_pivots: Vec<(AttrId, FastMap<SmolStr, Pivot>)>,
    pivot_values: HashMap<Pivot, (AttrId, SmolStr)>,
    /// The pivots other than value pivots that have a group (attribute ids, and
    /// [`NO_PIVOT`]), sorted: a publication looks up only those of its attributes that
    /// are here, usually none.
    attr_pivots: Vec<Pivot>,
    /// Attributes whose subscriptions were filed again when they reached
    /// [`VALUE_PIVOT_AFTER`] values (once each).
    refiled: Vec<AttrId>,
    /// Value pivots free for reuse, and the next never used.
    free_pivots: Vec<Pivot>,
    next_pivot: Pivot,
    /// How many subscriptions the class has.
    len: usize,
}

impl<K> Partition<K> {
    fn new() -> Self {
        Self {
            groups: FastMap::default(),
            uses: HashMap::new(),
            values: HashMap::new(),
            value_pivots: Vec::new(),
            attr_pivots: Vec::new(),
            refiled: Vec::new(),
            pivot_values: HashMap::new(),
            free_pivots: Vec::new(),
            next_pivot: VALUE_PIVOTS,
            len: 0,
        }
    }

    /// The pivot of `(attr, value)`, made if there is none (`None` if every number is in
    /// use).
    fn value_pivot(&mut self, attr: AttrId, value: &SmolStr) -> Option<Pivot> {
        if let Some(&pivot) = self.values_of(attr).and_then(|m| m.get(value)) {
            return Some(pivot);
        }
        let pivot = match self.free_pivots.pop() {
            Some(pivot) => pivot,
            None if self.next_pivot < NO_PIVOT => {
                self.next_pivot += 1;
                self.next_pivot - 1
            }
            None => return None,
        };
        let at = match self.value_attr(attr) {
            Ok(at) => at,
            Err(at) => {
                self.value_pivots.insert(at, (attr, FastMap::default()));
                at
            }
        };
        self.value_pivots[at].1.insert(value.clone(), pivot);
        self.pivot_values.insert(pivot, (attr, value.clone()));
        Some(pivot)
    }

    /// Where attribute `attr` is, or would go, in `value_pivots`.
    fn value_attr(&self, attr: AttrId) -> Result<usize, usize> {
        self.value_pivots.binary_search_by_key(&attr, |(a, _)| *a)
    }

    /// The value pivots of attribute `attr`, if it has some.
    fn values_of(&self, attr: AttrId) -> Option<&FastMap<SmolStr, Pivot>> {
        Some(&self.value_pivots[self.value_attr(attr).ok()?].1)
    }

    /// Forgets the (now empty) group of `pivot`.
    fn drop_group(&mut self, pivot: Pivot) {
        self.groups.remove(&pivot);
        if let Ok(at) = self.attr_pivots.binary_search(&pivot) {
            self.attr_pivots.remove(at);
        }
        if let Some((attr, value)) = self.pivot_values.remove(&pivot) {
            if let Ok(at) = self.value_attr(attr) {
                self.value_pivots[at].1.remove(&value);
                if self.value_pivots[at].1.is_empty() {
                    self.value_pivots.remove(at);
                }
            }
            self.free_pivots.push(pivot);
        }
    }
}

/// The `eq` string literals of `sub` other than `class`'s, as (attribute, value).
fn eq_literals<'s>(
    sub: &'s Subscription,
    names: &'s FastMap<Name, AttrId>,
) -> impl Iterator<Item = (AttrId, &'s SmolStr)> + 's {
    sub.predicates().iter().filter_map(move |p| {
        if p.op() != Op::Eq || p.attr() == "class" {
            return None;
        }
        let Some(Value::Str(s)) = p.literal() else { return None };
        Some((*names.get(p.attr().as_str())?, s))
    })
}

/// Reusable buffers for matching, so that a match allocates nothing in steady state.
#[derive(Debug, Default)]
pub struct Scratch {
    mismatch: Vec<u64>,
    attrs: Vec<(AttrId, usize)>,
}

/// An index of subscriptions under keys of type `K` (see the module docs).
#[derive(Debug)]
pub struct SubscriptionIndex<K> {
    /// Attribute names and classes, looked up for every publication (foldhash, as below).
    names: FastMap<Name, AttrId>,
    /// The names by id.
    attr_names: Vec<Name>,
    class_ids: FastMap<Arc<str>, u32>,
    /// Indexed by class id; a class keeps its (possibly empty) partition once seen.
    partitions: Vec<Partition<K>>,
    locations: HashMap<K, Location>,
}

impl<K> Default for SubscriptionIndex<K> {
    fn default() -> Self {
        Self {
            names: FastMap::default(),
            attr_names: Vec::new(),
            class_ids: FastMap::default(),
            partitions: Vec::new(),
            locations: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> SubscriptionIndex<K> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many subscriptions are indexed.
    pub fn len(&self) -> usize {
        self.locations.len()
    }

    /// True if no subscription is indexed.
    pub fn is_empty(&self) -> bool {
        self.locations.is_empty()
    }

    /// Indexes `sub` under `key`, replacing whatever `key` held before.
    pub fn insert(&mut self, key: K, sub: Arc<Subscription>) {
        self.remove(&key);
        let mut attrs: Vec<AttrId> = Vec::new();
        for p in sub.predicates().iter().filter(|p| p.attr() != "class") {
            let id = match self.names.get(p.attr().as_str()) {
                Some(&id) => id,
                None => {
                    let id = AttrId::try_from(self.attr_names.len()).unwrap_or(AttrId::MAX);
                    self.names.insert(p.attr().clone(), id);
                    self.attr_names.push(p.attr().clone());
                    id
                }
            };
            if !attrs.contains(&id) {
                attrs.push(id);
            }
        }
        let class = match self.class_ids.get(sub.class()) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(self.partitions.len()).unwrap_or(u32::MAX);
                self.class_ids.insert(Arc::from(sub.class()), id);
                self.partitions.push(Partition::new());
                id
            }
        };
        let partition = &mut self.partitions[class as usize];
        // The rarest attribute, and the rarest `eq` value: a value's group is visited only
        // by publications with that value, so it wins a tie.
        let rarest = attrs
            .iter()
            .filter(|&&a| a < VALUE_PIVOTS)
            .map(|a| (partition.uses.get(a).copied().unwrap_or(0), *a))
            .min();
        let rarest_value = eq_literals(&sub, &self.names)
            .filter_map(|(a, v)| {
                // Distinct values with this one's.
                let values = partition
                    .values
                    .get(&a)
                    .filter(|m| m.len() + usize::from(!m.contains_key(v)) >= VALUE_PIVOT_AFTER)?;
                Some((values.get(v).copied().unwrap_or(0), a, v))
            })
            .min_by_key(|&(count, ..)| count);
        let len = partition.len;
        let rare = |uses: usize| len >= PIVOT_AFTER && uses * RARE <= len;
        let pivot = match (rarest, rarest_value) {
            (_, Some((count, a, v))) if rare(count) && rarest.is_none_or(|(uses, _)| count <= uses) => {
                let v = v.clone();
                match partition.value_pivot(a, &v) {
                    Some(pivot) => pivot,
                    None => rarest.filter(|&(uses, _)| rare(uses)).map_or(NO_PIVOT, |(_, a)| a),
                }
            }
            (Some((uses, a)), _) if rare(uses) => a,
            _ => NO_PIVOT,
        };
        partition.len += 1;
        for a in &attrs {
            *partition.uses.entry(*a).or_default() += 1;
        }
        let mut crossed = Vec::new();
        for (a, v) in eq_literals(&sub, &self.names) {
            let values = partition.values.entry(a).or_default();
            *values.entry(v.clone()).or_default() += 1;
            if values.len() >= VALUE_PIVOT_AFTER && !partition.refiled.contains(&a) {
                partition.refiled.push(a);
                crossed.push(a);
            }
        }
        // A value group is visited only by publications with its value: its subscriptions'
        // `eq` predicate on that value holds there, and is not filed again.
        let implied = partition.pivot_values.get(&pivot).cloned();
        if (pivot < VALUE_PIVOTS || pivot == NO_PIVOT)
            && let Err(at) = partition.attr_pivots.binary_search(&pivot)
        {
            partition.attr_pivots.insert(at, pivot);
        }
        let group = partition.groups.entry(pivot).or_insert_with(Group::new);
        let names = &self.names;
        let slot = group.insert(key.clone(), sub, implied.as_ref(), |name| names.get(name).copied());
        self.locations.insert(key, Location { class, pivot, slot });
        for a in crossed {
            self.refile(class, a);
        }
    }

    /// Attribute `a` of class `class` has just reached [`VALUE_PIVOT_AFTER`] values: the
    /// subscriptions filed before, in shared or attribute groups, with an `eq` value of
    /// `a`, are filed again (by value, where it is rarer than their rarest attribute), so
    /// that the first subscriptions of a class do not stay in the shared group for good.
    fn refile(&mut self, class: u32, a: AttrId) {
        let Some(partition) = self.partitions.get(class as usize) else { return };
        let mut moving: Vec<(K, Arc<Subscription>)> = Vec::new();
        for (&pivot, group) in &partition.groups {
            if pivot >= VALUE_PIVOTS && pivot != NO_PIVOT {
                continue;
            }
            group.for_each(|key, sub| {
                if eq_literals(sub, &self.names).any(|(attr, _)| attr == a) {
                    moving.push((key.clone(), sub.clone()));
                }
            });
        }
        for (key, sub) in moving {
            self.insert(key, sub);
        }
    }

    /// Removes the subscription under `key`, returning it.
    pub fn remove(&mut self, key: &K) -> Option<Arc<Subscription>> {
        let location = self.locations.remove(key)?;
        let partition = self.partitions.get_mut(location.class as usize)?;
        let group = partition.groups.get_mut(&location.pivot)?;
        let names = &self.names;
        let sub = group.remove(location.slot, |name| names.get(name).copied())?;
        if group.is_empty() {
            partition.drop_group(location.pivot);
        }
        partition.len -= 1;
        for (a, v) in eq_literals(&sub, &self.names) {
            if let Some(m) = partition.values.get_mut(&a) {
                if let Some(n) = m.get_mut(v) {
                    *n -= 1;
                    if *n == 0 {
                        m.remove(v);
                    }
                }
                if m.is_empty() {
                    partition.values.remove(&a);
                }
            }
        }
        let mut seen: Vec<AttrId> = Vec::new();
        for p in sub.predicates().iter().filter(|p| p.attr() != "class") {
            let Some(&id) = self.names.get(p.attr().as_str()) else { continue };
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
            if let Some(n) = partition.uses.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    partition.uses.remove(&id);
                }
            }
        }
        Some(sub)
    }

    /// The subscription under `key`.
    pub fn get(&self, key: &K) -> Option<&Arc<Subscription>> {
        let location = self.locations.get(key)?;
        self.partitions.get(location.class as usize)?.groups.get(&location.pivot)?.subscription(location.slot)
    }

    fn partition(&self, class: &str) -> Option<&Partition<K>> {
        self.partitions.get(*self.class_ids.get(class)? as usize)
    }

    /// Calls `visit` with every candidate of `publication`'s class whose pivot it carries,
    /// after the bitset pass; the callback gets the key and, when the subscription still
    /// needs confirming (shared variables), the subscription.
    fn candidates(
        &self,
        publication: &Publication,
        scratch: &mut Scratch,
        mut visit: impl FnMut(&K, Option<&Subscription>),
    ) {
        let Some(partition) = self.partition(publication.class()) else { return };
        let Scratch { mismatch, attrs } = scratch;
        // The groups to visit, each found once (a publication visits a few): the shared
        // group first, then those of the attributes it carries, by id.
        let mut groups: SmallVec<[&Group<K>; 4]> = SmallVec::new();
        let pivots = &partition.attr_pivots;
        let resolve = |attrs: &mut Vec<(AttrId, usize)>| {
            attrs.clear();
            for (i, (name, _)) in publication.attrs().iter().enumerate() {
                if let Some(&id) = self.names.get(name.as_str()) {
                    attrs.push((id, i));
                }
            }
            attrs.sort_unstable();
        };
        let mut values = if publication.attrs().len() <= SCAN_ATTRS && pivots.len() <= SCAN_ATTRS {
            let values = Values::Scan { publication, names: &self.attr_names };
            let carried = |p: &&Pivot| **p == NO_PIVOT || values.get(**p).is_some();
            let (shared, by_attr) = match pivots.split_last() {
                Some((&NO_PIVOT, rest)) => (Some(NO_PIVOT), rest),
                _ => (None, &pivots[..]),
            };
            let visited = shared.iter().chain(by_attr.iter().filter(carried));
            groups.extend(visited.filter_map(|p| partition.groups.get(p)));
            values
        } else {
            resolve(attrs);
            let has_group = |p: &Pivot| pivots.binary_search(p).is_ok();
            let visited = std::iter::once(NO_PIVOT).chain(attrs.iter().map(|&(id, _)| id));
            groups.extend(visited.filter(has_group).filter_map(|p| partition.groups.get(&p)));
            Values::Sorted { publication, attrs }
        };
        for (attr, by_value) in &partition.value_pivots {
            if let Some(s) = values.get(*attr).and_then(Value::as_str) {
                groups.extend(by_value.get(s).and_then(|p| partition.groups.get(p)));
            }
        }
        // Each column of the groups visited looks its name up: past a few, resolving every
        // name once costs less.
        if matches!(values, Values::Scan { .. })
            && groups.iter().map(|g| g.columns()).sum::<usize>() > SCAN_COLUMNS
        {
            resolve(attrs);
            values = Values::Sorted { publication, attrs };
        }
        for group in groups {
            group.candidates(values, mismatch, &mut visit);
        }
    }

    /// Appends to `out` the key of every subscription that `publication` matches.
    pub fn matches_into(&self, publication: &Publication, scratch: &mut Scratch, out: &mut Vec<K>) {
        self.candidates(publication, scratch, |key, verify| {
            if verify.is_none_or(|sub| padres_lang::matches(sub, publication)) {
                out.push(key.clone());
            }
        });
    }

    /// The keys of every subscription that `publication` matches.
    pub fn matches(&self, publication: &Publication) -> Vec<K> {
        let mut out = Vec::new();
        self.matches_into(publication, &mut Scratch::default(), &mut out);
        out
    }

    /// Appends to `out` each distinct hop (as `hop_of` maps keys to hops) with at least one
    /// matching subscription. Once a hop is chosen its other subscriptions are not
    /// confirmed, so a publication costs at most one confirmation per hop.
    pub fn hops_into<H: Eq + Clone>(
        &self,
        publication: &Publication,
        scratch: &mut Scratch,
        hop_of: impl Fn(&K) -> H,
        out: &mut Vec<H>,
    ) {
        let start = out.len();
        self.candidates(publication, scratch, |key, verify| {
            let hop = hop_of(key);
            if out[start..].contains(&hop) {
                return;
            }
            if verify.is_none_or(|sub| padres_lang::matches(sub, publication)) {
                out.push(hop);
            }
        });
    }

    /// The keys of every subscription that `adv` overlaps (see [`padres_lang::overlaps`]).
    pub fn overlapping(&self, adv: &Advertisement) -> Vec<K> {
        let Some(partition) = self.partition(adv.class()) else { return Vec::new() };
        let mut advertised: Vec<Pivot> = vec![NO_PIVOT];
        for p in adv.predicates() {
            if let Some(&id) = self.names.get(p.attr().as_str()) {
                advertised.push(id);
            }
        }
        advertised.sort_unstable();
        advertised.dedup();
        // Value groups of the advertised attributes too.
        let values: Vec<Pivot> = advertised
            .iter()
            .filter_map(|&a| partition.values_of(a))
            .flat_map(|by_value| by_value.values().copied())
            .collect();
        advertised.extend(values);
        let mut out = Vec::new();
        // A subscription's pivot is one of its attributes, which an overlapping
        // advertisement must advertise: only those groups can hold overlaps.
        for pivot in advertised {
            if let Some(group) = partition.groups.get(&pivot) {
                group.for_each(|key, sub| {
                    if padres_lang::overlaps(sub, adv) {
                        out.push(key.clone());
                    }
                });
            }
        }
        out
    }
}

/// Up to this many attributes in a publication (and attribute groups in its class), and up
/// to [`SCAN_COLUMNS`] columns in the groups it visits, its values are found by scanning it
/// for each name a column asks about, not by resolving every name to its id first. A scan
/// compares names, which is often a pointer comparison (names decoded on one thread share
/// their text) and otherwise usually stops at the length, where resolving hashed each name
/// (7 lookups, about 650 instructions, of a workflow leaf publication's match).
const SCAN_ATTRS: usize = 8;
/// See [`SCAN_ATTRS`].
const SCAN_COLUMNS: usize = 16;

/// A publication's values by attribute id, for one match.
#[derive(Clone, Copy)]
enum Values<'p> {
    /// Found by name (`names` by id).
    Scan { publication: &'p Publication, names: &'p [Name] },
    /// Every name resolved to its id once: sorted `(id, index)` pairs.
    Sorted { publication: &'p Publication, attrs: &'p [(AttrId, usize)] },
}

impl<'p> Values<'p> {
    /// The value of attribute `id`.
    fn get(self, id: AttrId) -> Option<&'p Value> {
        match self {
            Self::Scan { publication, names } => {
                let name = names.get(id as usize)?;
                publication.attrs().iter().find(|(n, _)| n == name).map(|(_, v)| v)
            }
            Self::Sorted { publication, attrs } => {
                let i = attrs.binary_search_by_key(&id, |&(a, _)| a).ok()?;
                publication.attrs().get(attrs[i].1).map(|(_, v)| v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_on_a_key_with_many_values_are_filed_by_value() {
        let mut index = SubscriptionIndex::new();
        for i in 0..4000_u32 {
            let sub: Subscription = format!("[class,eq,'job'],[appl,eq,'A{}'],[job,eq,'J{}']", i / 4, i % 4)
                .parse()
                .expect("sub");
            index.insert(i, Arc::new(sub));
        }
        // Until appl has VALUE_PIVOT_AFTER distinct values they share one group; then
        // they are filed again by their appl, as is every later one.
        let groups = 1000;
        let partition = &index.partitions[0];
        assert!(!partition.groups.contains_key(&NO_PIVOT));
        assert_eq!(partition.pivot_values.len(), groups);
        for (text, key) in
            [("[class,'job'],[appl,'A900'],[job,'J2']", 3602), ("[class,'job'],[appl,'A3'],[job,'J1']", 13)]
        {
            let p: Publication = text.parse().expect("publication");
            assert_eq!(index.matches(&p), [key]);
        }
        // Emptied groups give their pivots back.
        for i in 0..4000 {
            index.remove(&i).expect("indexed");
        }
        let partition = &index.partitions[0];
        assert!(
            partition.groups.is_empty() && partition.pivot_values.is_empty() && partition.values.is_empty()
        );
        assert_eq!(partition.free_pivots.len(), groups);
    }
}
