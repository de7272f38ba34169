//! The advertisement side: which advertisements a subscription overlaps.
//!
//! The same elimination as for publications, with intervals instead of points. Per class,
//! each advertisement gets a slot; for every attribute the subscription constrains, an
//! advertisement is crossed out if it does not advertise the attribute, if its values
//! there are of the other kind, or if one of its bounds lies beyond the subscription's
//! interval on that attribute: its lower bounds are probed with the subscription's upper
//! bound and its upper bounds with the subscription's lower bound, in separate columns.
//!
//! For interval predicates on both sides that test is exactly
//! [`padres_lang::overlaps`]. Subscriptions and advertisements with other predicates
//! (`neq`, `<>`, `str-postfix`, `str-contains`, `str-regex`, booleans, variables, integers
//! beyond 2^53) or with an attribute their own predicates rule out are confirmed with
//! `overlaps` after the bitset pass, and so are subscriptions that bound the reserved
//! `time` attribute (every advertisement advertises it implicitly).

use std::collections::HashMap;
use std::sync::Arc;

use padres_lang::semantics::satisfiable;
use padres_lang::{Advertisement, Name, Predicate, Subscription};

use super::AttrId;
use super::bits::{self, Layout};
use super::column::{Column, Probe, Side};
use super::keys::{FloatProbe, Nudged, Num, Placement, Text, TextProbe, placement};
use super::slots::{Slots, clear_dead};

/// One attribute's advertised intervals, lower and upper bounds apart.
#[derive(Debug)]
struct AdvColumns {
    /// Advertisements that advertise the attribute.
    has: Vec<u64>,
    /// Advertisements with numeric bounds on it (they refuse strings).
    num_has: Vec<u64>,
    /// Advertisements with string bounds on it (they refuse numbers).
    str_has: Vec<u64>,
    /// Lower bounds, then upper bounds (indexed by [`side`]).
    num: [Column<Num>; 2],
    text: [Column<Text>; 2],
    users: usize,
}

fn side(side: Side) -> usize {
    match side {
        Side::Lower => 0,
        Side::Upper => 1,
    }
}

impl AdvColumns {
    fn new(layout: Layout) -> Self {
        Self {
            has: vec![0; layout.words],
            num_has: vec![0; layout.words],
            str_has: vec![0; layout.words],
            num: [Column::new(layout), Column::new(layout)],
            text: [Column::new(layout), Column::new(layout)],
            users: 0,
        }
    }

    fn grow(&mut self, old: Layout, new: Layout) {
        for b in [&mut self.has, &mut self.num_has, &mut self.str_has] {
            b.resize(new.words, 0);
        }
        self.num.iter_mut().for_each(|c| c.grow(old, new));
        self.text.iter_mut().for_each(|c| c.grow(old, new));
    }

    fn sweep(&mut self, layout: Layout, dead: &[u64]) {
        for b in [&mut self.has, &mut self.num_has, &mut self.str_has] {
            clear_dead(b, dead);
        }
        self.num.iter_mut().for_each(|c| c.sweep(layout, dead));
        self.text.iter_mut().for_each(|c| c.sweep(layout, dead));
    }
}

/// The advertisements of one class.
#[derive(Debug)]
struct Partition<K> {
    slots: Slots<K, Advertisement>,
    /// Advertisements to confirm with `overlaps`.
    confirm: Vec<u64>,
    columns: HashMap<AttrId, AdvColumns>,
}

/// Advertisements under keys of type `K` (see the module docs).
#[derive(Debug)]
pub struct AdvertisementIndex<K> {
    names: HashMap<Name, AttrId>,
    classes: HashMap<Arc<str>, Partition<K>>,
    locations: HashMap<K, (Arc<str>, u32)>,
}

impl<K> Default for AdvertisementIndex<K> {
    fn default() -> Self {
        Self { names: HashMap::new(), classes: HashMap::new(), locations: HashMap::new() }
    }
}

/// A subscription's interval on one attribute: the tightest lower and upper bounds of
/// one kind, with strictness.
#[derive(Debug)]
struct Hull<T> {
    lower: Option<(T, bool)>,
    upper: Option<(T, bool)>,
}

impl<T: Ord> Hull<T> {
    fn new() -> Self {
        Self { lower: None, upper: None }
    }

    fn add(&mut self, side: Side, bound: T, strict: bool) {
        match side {
            Side::Lower => {
                if self.lower.as_ref().is_none_or(|(b, s)| bound > *b || (bound == *b && strict && !s)) {
                    self.lower = Some((bound, strict));
                }
            }
            Side::Upper => {
                if self.upper.as_ref().is_none_or(|(b, s)| bound < *b || (bound == *b && strict && !s)) {
                    self.upper = Some((bound, strict));
                }
            }
        }
    }
}

/// Crosses out the advertisements whose bounds exclude the subscription's interval: an
/// upper bound below the interval's lower end (probed just above it when strict), or a
/// lower bound above its upper end (just below it when strict).
fn probe_interval<T: Ord + Clone, P: Probe<T>>(
    layout: Layout,
    [lower_bounds, upper_bounds]: &[Column<T>; 2],
    from: Option<(P, bool)>,
    to: Option<(P, bool)>,
    mismatch: &mut [u64],
) {
    if let Some((p, strict)) = from {
        if strict {
            upper_bounds.probe(layout, &Nudged::up(&p), mismatch);
        } else {
            upper_bounds.probe(layout, &p, mismatch);
        }
    }
    if let Some((p, strict)) = to {
        if strict {
            lower_bounds.probe(layout, &Nudged::down(&p), mismatch);
        } else {
            lower_bounds.probe(layout, &p, mismatch);
        }
    }
}

/// The predicates of each attribute other than `class`.
fn attributes(predicates: &[Predicate]) -> Vec<(&Name, Vec<&Predicate>)> {
    let mut out: Vec<(&Name, Vec<&Predicate>)> = Vec::new();
    for p in predicates.iter().filter(|p| p.attr() != "class") {
        match out.iter_mut().find(|(a, _)| *a == p.attr()) {
            Some((_, list)) => list.push(p),
            None => out.push((p.attr(), vec![p])),
        }
    }
    out
}

impl<K: Clone + Eq + std::hash::Hash> AdvertisementIndex<K> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many advertisements are indexed.
    pub fn len(&self) -> usize {
        self.locations.len()
    }

    /// True if none is.
    pub fn is_empty(&self) -> bool {
        self.locations.is_empty()
    }

    /// Indexes `adv` under `key`, replacing whatever `key` held before.
    pub fn insert(&mut self, key: K, adv: Arc<Advertisement>) {
        self.remove(&key);
        let class: Arc<str> = Arc::from(adv.class());
        let partition = self.classes.entry(class.clone()).or_insert_with(|| Partition {
            slots: Slots::new(),
            confirm: vec![0; Layout::for_slots(1).words],
            columns: HashMap::new(),
        });
        let (slot, grown) = partition.slots.allocate();
        if let Some((old, new)) = grown {
            partition.confirm.resize(new.words, 0);
            partition.columns.values_mut().for_each(|c| c.grow(old, new));
        }
        let layout = partition.slots.layout();
        let mut confirm = false;
        for (attr, predicates) in attributes(adv.predicates()) {
            let next = AttrId::try_from(self.names.len()).unwrap_or(AttrId::MAX);
            let id = *self.names.entry(attr.clone()).or_insert(next);
            let columns = partition.columns.entry(id).or_insert_with(|| AdvColumns::new(layout));
            columns.users += 1;
            bits::set(&mut columns.has, slot);
            confirm |= !satisfiable(predicates.iter().copied());
            for p in predicates {
                match placement(p) {
                    Placement::Presence => {}
                    Placement::StrKind | Placement::Exact => confirm = true,
                    Placement::Num(halves) => {
                        bits::set(&mut columns.num_has, slot);
                        for (s, bound, strict) in halves {
                            columns.num[side(s)].insert(layout, s, slot, bound, strict);
                        }
                    }
                    Placement::Text(halves) => {
                        bits::set(&mut columns.str_has, slot);
                        for (s, bound, strict) in halves {
                            columns.text[side(s)].insert(layout, s, slot, bound, strict);
                        }
                    }
                }
            }
        }
        if confirm {
            bits::set(&mut partition.confirm, slot);
        } else {
            bits::clear(&mut partition.confirm, slot);
        }
        partition.slots.fill(slot, key.clone(), adv);
        self.locations.insert(key, (class, slot));
    }

    /// Removes the advertisement under `key`.
    pub fn remove(&mut self, key: &K) -> Option<Arc<Advertisement>> {
        let (class, slot) = self.locations.remove(key)?;
        let partition = self.classes.get_mut(&class)?;
        let adv = partition.slots.take(slot)?;
        for (attr, _) in attributes(adv.predicates()) {
            let Some(id) = self.names.get(attr.as_str()).copied() else { continue };
            if let Some(columns) = partition.columns.get_mut(&id) {
                columns.users -= 1;
                if columns.users == 0 {
                    partition.columns.remove(&id);
                }
            }
        }
        if partition.slots.is_empty() {
            self.classes.remove(&class);
        } else if partition.slots.sweep_due() {
            let layout = partition.slots.layout();
            let dead = partition.slots.recycle();
            partition.columns.values_mut().for_each(|c| c.sweep(layout, &dead));
        }
        Some(adv)
    }

    /// The keys of the advertisements `sub` overlaps.
    pub fn overlapping(&self, sub: &Subscription) -> Vec<K> {
        let mut out = Vec::new();
        self.for_each_overlapping(sub, |key| out.push(key.clone()));
        out
    }

    /// Calls `f` with the key of every advertisement `sub` overlaps.
    pub fn for_each_overlapping(&self, sub: &Subscription, mut f: impl FnMut(&K)) {
        let Some(partition) = self.classes.get(sub.class()) else { return };
        let layout = partition.slots.layout();
        let mut mismatch: Vec<u64> = partition.slots.alive().iter().map(|w| !w).collect();
        let mismatch = &mut mismatch[..];
        let mut confirm_all = false;
        for (attr, predicates) in attributes(sub.predicates()) {
            if attr == padres_lang::time::TIME {
                // Every advertisement advertises `time`, bounded or not: `overlaps` decides.
                confirm_all = true;
                continue;
            }
            let Some(columns) = self.names.get(attr.as_str()).and_then(|id| partition.columns.get(id)) else {
                return; // nobody advertises this attribute
            };
            if !satisfiable(predicates.iter().copied()) {
                return; // nothing matches the subscription at all
            }
            for (m, h) in mismatch.iter_mut().zip(&columns.has) {
                *m |= !h;
            }
            let mut num = Hull::new();
            let mut text = Hull::new();
            for p in predicates {
                match placement(p) {
                    Placement::Presence => {}
                    Placement::StrKind | Placement::Exact => confirm_all = true,
                    Placement::Num(halves) => {
                        for (side, bound, strict) in halves {
                            num.add(side, bound, strict);
                        }
                    }
                    Placement::Text(halves) => {
                        for (side, bound, strict) in halves {
                            text.add(side, bound, strict);
                        }
                    }
                }
            }
            if num.lower.is_some() || num.upper.is_some() {
                bits::or_into(mismatch, &columns.str_has);
                let probe = |(b, strict): &(Num, bool)| (FloatProbe(b.value()), *strict);
                let (from, to) = (num.lower.as_ref().map(probe), num.upper.as_ref().map(probe));
                probe_interval(layout, &columns.num, from, to, mismatch);
            }
            if text.lower.is_some() || text.upper.is_some() {
                bits::or_into(mismatch, &columns.num_has);
                let from = text.lower.as_ref().map(|(b, strict)| (TextProbe::new(b.as_str()), *strict));
                let to = text.upper.as_ref().map(|(b, strict)| (TextProbe::new(b.as_str()), *strict));
                probe_interval(layout, &columns.text, from, to, mismatch);
            }
        }
        partition.slots.survivors(mismatch, |slot, key, adv| {
            if !(confirm_all || bits::get(&partition.confirm, slot)) || padres_lang::overlaps(sub, adv) {
                f(key);
            }
        });
    }
}
