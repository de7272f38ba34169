//! The advertisement side: which advertisements a subscription overlaps.
//!
//! Advertisements are few next to subscriptions (one per publisher and kind of message),
//! so they are partitioned by class and checked with [`padres_lang::overlaps`] after a
//! cheap filter: a subscription overlaps only advertisements that advertise every
//! attribute it constrains, tested first on 64-bit attribute signatures.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use padres_lang::{Advertisement, Predicate, Subscription};

/// One bit per attribute name (hashed); a superset test on signatures never rejects a
/// real superset.
fn signature(predicates: &[Predicate]) -> u64 {
    predicates.iter().fold(0, |acc, p| {
        let mut h = DefaultHasher::new();
        p.attr().as_str().hash(&mut h);
        acc | 1 << (h.finish() % 64)
    })
}

#[derive(Debug)]
struct Entry<K> {
    key: K,
    adv: Arc<Advertisement>,
    signature: u64,
}

/// Advertisements under keys of type `K`, partitioned by class.
#[derive(Debug)]
pub struct AdvertisementIndex<K> {
    classes: HashMap<Arc<str>, Vec<Entry<K>>>,
    len: usize,
}

impl<K> Default for AdvertisementIndex<K> {
    fn default() -> Self {
        Self { classes: HashMap::new(), len: 0 }
    }
}

impl<K: Clone + Eq> AdvertisementIndex<K> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many advertisements are indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if none is.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Indexes `adv` under `key` (keys are expected to be unique).
    pub fn insert(&mut self, key: K, adv: Arc<Advertisement>) {
        let signature = signature(adv.predicates());
        self.classes.entry(Arc::from(adv.class())).or_default().push(Entry { key, adv, signature });
        self.len += 1;
    }

    /// Removes the advertisement under `key`.
    pub fn remove(&mut self, key: &K) -> Option<Arc<Advertisement>> {
        let (class, i) = self.classes.iter().find_map(|(class, entries)| {
            Some((class.clone(), entries.iter().position(|e| e.key == *key)?))
        })?;
        let entries = self.classes.get_mut(&class)?;
        let entry = entries.swap_remove(i);
        if entries.is_empty() {
            self.classes.remove(&class);
        }
        self.len -= 1;
        Some(entry.adv)
    }

    /// The keys of the advertisements `sub` overlaps.
    pub fn overlapping(&self, sub: &Subscription) -> Vec<K> {
        let Some(entries) = self.classes.get(sub.class()) else { return Vec::new() };
        let wanted = signature(sub.predicates());
        entries
            .iter()
            .filter(|e| wanted & !e.signature == 0 && padres_lang::overlaps(sub, &e.adv))
            .map(|e| e.key.clone())
            .collect()
    }
}
