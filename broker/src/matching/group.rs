//! A group: the subscriptions of one class filed under one pivot attribute, each in a slot,
//! with one set of columns per attribute they constrain.

use std::sync::Arc;

use padres_lang::semantics::holds;
use padres_lang::value::SmolStr;
use padres_lang::{Op, Subscription, Value};

use super::bits::{self, Layout};
use super::column::Column;
use super::keys::{FloatProbe, Num, Placement, Text, TextProbe, exact_float, placement};
use super::slots::{Slots, clear_dead};
use super::{AttrId, Values};

/// Everything one group knows about one attribute.
#[derive(Debug)]
struct Columns {
    /// Slots with any predicate on the attribute: they fail if it is absent.
    has: Vec<u64>,
    /// Slots with numeric halves: they fail on a value that is not a number.
    num_has: Vec<u64>,
    /// Slots with string halves: they fail on a value that is not a string.
    str_has: Vec<u64>,
    num: Column<Num>,
    text: Column<Text>,
    /// `(slot, predicate index)` of the predicates checked one by one.
    exact: Vec<(u32, u16)>,
    /// How many subscriptions constrain the attribute.
    users: usize,
    /// How many `$S$` variables were filed (their slots are in `str_has` only).
    str_kinds: usize,
}

impl Columns {
    fn new(layout: Layout) -> Self {
        Self {
            has: vec![0; layout.words],
            num_has: vec![0; layout.words],
            str_has: vec![0; layout.words],
            num: Column::new(layout),
            text: Column::new(layout),
            exact: Vec::new(),
            users: 0,
            str_kinds: 0,
        }
    }

    fn grow(&mut self, old: Layout, new: Layout) {
        for b in [&mut self.has, &mut self.num_has, &mut self.str_has] {
            b.resize(new.words, 0);
        }
        self.num.grow(old, new);
        self.text.grow(old, new);
    }
}

/// See the module docs.
#[derive(Debug)]
pub(super) struct Group<K> {
    slots: Slots<K, Subscription>,
    /// Slots to confirm with the reference semantics (a variable used twice).
    verify: Vec<u64>,
    /// Sorted by attribute.
    columns: Vec<(AttrId, Columns)>,
}

/// The distinct attributes of `sub` other than `class`, resolved to ids.
fn attributes(sub: &Subscription, resolve: &impl Fn(&str) -> Option<AttrId>) -> Vec<(AttrId, Vec<usize>)> {
    let mut out: Vec<(AttrId, Vec<usize>)> = Vec::new();
    for (i, p) in sub.predicates().iter().enumerate() {
        if p.attr() == "class" {
            continue;
        }
        let Some(id) = resolve(p.attr()) else { continue };
        match out.iter_mut().find(|(a, _)| *a == id) {
            Some((_, list)) => list.push(i),
            None => out.push((id, vec![i])),
        }
    }
    out
}

fn shares_a_variable(sub: &Subscription) -> bool {
    let vars: Vec<&str> = sub.predicates().iter().filter_map(|p| Some(p.variable()?.name.as_str())).collect();
    vars.iter().enumerate().any(|(i, v)| vars[..i].contains(v))
}

impl<K: Clone> Group<K> {
    pub(super) fn new() -> Self {
        let slots = Slots::new();
        let verify = vec![0; slots.layout().words];
        Self { slots, verify, columns: Vec::new() }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// How many attributes have columns.
    pub(super) fn columns(&self) -> usize {
        self.columns.len()
    }

    pub(super) fn subscription(&self, slot: u32) -> Option<&Arc<Subscription>> {
        self.slots.get(slot)
    }

    fn columns_mut(&mut self, id: AttrId) -> &mut Columns {
        let i = match self.columns.binary_search_by_key(&id, |(a, _)| *a) {
            Ok(i) => i,
            Err(i) => {
                self.columns.insert(i, (id, Columns::new(self.slots.layout())));
                i
            }
        };
        &mut self.columns[i].1
    }

    /// Files `sub` under `key` and returns its slot. `resolve` maps attribute names to ids
    /// (every attribute of `sub` has one). `implied`: the group's value pivot, whose `eq`
    /// predicate holds for every publication that visits the group (only its presence is
    /// filed).
    pub(super) fn insert(
        &mut self,
        key: K,
        sub: Arc<Subscription>,
        implied: Option<&(AttrId, SmolStr)>,
        resolve: impl Fn(&str) -> Option<AttrId>,
    ) -> u32 {
        let (slot, grown) = self.slots.allocate();
        if let Some((old, new)) = grown {
            self.verify.resize(new.words, 0);
            for (_, c) in &mut self.columns {
                c.grow(old, new);
            }
        }
        let layout = self.slots.layout();
        for (id, predicates) in attributes(&sub, &resolve) {
            let columns = self.columns_mut(id);
            columns.users += 1;
            bits::set(&mut columns.has, slot);
            for i in predicates {
                let p = &sub.predicates()[i];
                let is_implied = implied.is_some_and(|(attr, value)| {
                    *attr == id
                        && p.op() == Op::Eq
                        && matches!(p.literal(), Some(Value::Str(s)) if s == value)
                });
                if is_implied {
                    continue;
                }
                match placement(p) {
                    Placement::Presence => {}
                    Placement::Num(halves) => {
                        bits::set(&mut columns.num_has, slot);
                        for (side, bound, strict) in halves {
                            columns.num.insert(layout, side, slot, bound, strict);
                        }
                    }
                    Placement::Text(halves) => {
                        bits::set(&mut columns.str_has, slot);
                        for (side, bound, strict) in halves {
                            columns.text.insert(layout, side, slot, bound, strict);
                        }
                    }
                    Placement::StrKind => {
                        bits::set(&mut columns.str_has, slot);
                        columns.str_kinds += 1;
                    }
                    Placement::Exact => {
                        columns.exact.push((slot, u16::try_from(i).unwrap_or(u16::MAX)));
                    }
                }
            }
        }
        if shares_a_variable(&sub) {
            bits::set(&mut self.verify, slot);
        } else {
            bits::clear(&mut self.verify, slot);
        }
        self.slots.fill(slot, key, sub);
        slot
    }

    /// Empties `slot` and returns its subscription. Removal is lazy (see [`Slots`]): the
    /// slot's bits and halves go at the next sweep.
    pub(super) fn remove(
        &mut self,
        slot: u32,
        resolve: impl Fn(&str) -> Option<AttrId>,
    ) -> Option<Arc<Subscription>> {
        let sub = self.slots.take(slot)?;
        for (id, _) in attributes(&sub, &resolve) {
            let Ok(at) = self.columns.binary_search_by_key(&id, |(a, _)| *a) else { continue };
            let columns = &mut self.columns[at].1;
            columns.users -= 1;
            if columns.users == 0 {
                self.columns.remove(at);
            }
        }
        if self.slots.sweep_due() {
            let layout = self.slots.layout();
            let dead = self.slots.recycle();
            for (_, columns) in &mut self.columns {
                for b in [&mut columns.has, &mut columns.num_has, &mut columns.str_has] {
                    clear_dead(b, &dead);
                }
                columns.num.sweep(layout, &dead);
                columns.text.sweep(layout, &dead);
                columns.exact.retain(|&(slot, _)| !bits::get(&dead, slot));
            }
        }
        Some(sub)
    }

    /// The bitset pass (see the parent module): calls `visit` for every slot that survives,
    /// with the subscription when it still needs confirming.
    pub(super) fn candidates(
        &self,
        values: Values<'_>,
        mismatch: &mut Vec<u64>,
        visit: &mut impl FnMut(&K, Option<&Subscription>),
    ) {
        let layout = self.slots.layout();
        mismatch.clear();
        mismatch.extend(self.slots.alive().iter().map(|w| !w));
        for (id, columns) in &self.columns {
            let Some(value) = values.get(*id) else {
                bits::or_into(mismatch, &columns.has);
                continue;
            };
            if !columns.num.is_empty() {
                match value.as_number() {
                    Some(n) => match exact_float(n) {
                        Some(f) => columns.num.probe(layout, &FloatProbe(f), mismatch),
                        None => columns.num.probe(layout, &n, mismatch),
                    },
                    None => bits::or_into(mismatch, &columns.num_has),
                }
            }
            if !columns.text.is_empty() || columns.str_kinds > 0 {
                match value.as_str() {
                    Some(s) if !columns.text.is_empty() => {
                        columns.text.probe(layout, &TextProbe::new(s), mismatch);
                    }
                    Some(_) => {}
                    None => bits::or_into(mismatch, &columns.str_has),
                }
            }
            for &(slot, i) in &columns.exact {
                if bits::get(mismatch, slot) {
                    continue;
                }
                let holds_here = self
                    .subscription(slot)
                    .and_then(|sub| sub.predicates().get(usize::from(i)))
                    .is_some_and(|p| holds(p, value));
                if !holds_here {
                    bits::set(mismatch, slot);
                }
            }
        }
        self.slots.survivors(mismatch, |slot, key, sub| {
            let confirm = bits::get(&self.verify, slot).then_some(&**sub);
            visit(key, confirm);
        });
    }

    /// Calls `f` with every subscription of the group.
    pub(super) fn for_each(&self, mut f: impl FnMut(&K, &Arc<Subscription>)) {
        for (_, key, sub) in self.slots.iter() {
            f(key, sub);
        }
    }
}
