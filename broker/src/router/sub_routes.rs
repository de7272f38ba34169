//! SubRoutes: what routing a publication needs to know of each subscription it matched.
//!
//! The matching engine answers with the keys it indexed subscriptions under. Keyed by
//! message id, each matched subscription then cost a hash lookup in the PRT for its hop,
//! and one more in the composite tables for a detector's subscription, both in tables
//! far larger than the cache. Here each indexed subscription has a dense number, the
//! matcher's key, and the route under it holds the hop and, for a detector's
//! subscription, what it feeds: one array read per matched subscription.
//!
//! The PRT (`covering::Table`) stays the authority on a subscription's hop; the router
//! changes a route's hop wherever it changes the PRT's. A detector's subscription's route
//! is where its role is kept (cyclic overlays, whose trees match by id, look it up here).

use padres_lang::MessageId;

use super::Hop;
use super::composite::DetectorInput;

/// An indexed subscription, as a publication that matches it is routed.
#[derive(Debug)]
pub(super) struct Route {
    pub(super) id: MessageId,
    /// The hop it came from (its PRT entry's `last`).
    pub(super) hop: Hop,
    /// For a detector's subscription ([`Hop::Detector`]): its pattern, role and detector.
    pub(super) detector: Option<DetectorInput>,
}

/// The routes, by the number the matching engine knows each subscription by.
#[derive(Debug, Default)]
pub(super) struct SubRoutes {
    routes: Vec<Option<Route>>,
    free: Vec<u32>,
    /// A subscription's number (foldhash, as the PRT).
    numbers: foldhash::HashMap<MessageId, u32>,
}

impl SubRoutes {
    /// Numbers subscription `id` from `hop`, returning its number (the same one if it has
    /// one already, its hop updated).
    pub(super) fn add(&mut self, id: &MessageId, hop: Hop) -> u32 {
        if let Some(&n) = self.numbers.get(id) {
            if let Some(route) = self.routes[n as usize].as_mut() {
                route.hop = hop;
            }
            return n;
        }
        let route = Route { id: id.clone(), hop, detector: None };
        let n = match self.free.pop() {
            Some(n) => {
                self.routes[n as usize] = Some(route);
                n
            }
            None => {
                let n = u32::try_from(self.routes.len()).expect("fewer than 2^32 subscriptions");
                self.routes.push(Some(route));
                n
            }
        };
        self.numbers.insert(id.clone(), n);
        n
    }

    /// Forgets subscription `id`, returning the number it had.
    pub(super) fn remove(&mut self, id: &MessageId) -> Option<u32> {
        let n = self.numbers.remove(id)?;
        self.routes[n as usize] = None;
        self.free.push(n);
        Some(n)
    }

    pub(super) fn get(&self, n: u32) -> Option<&Route> {
        self.routes.get(n as usize)?.as_ref()
    }

    pub(super) fn by_id(&self, id: &MessageId) -> Option<&Route> {
        self.get(*self.numbers.get(id)?)
    }

    pub(super) fn get_mut(&mut self, id: &MessageId) -> Option<&mut Route> {
        let n = *self.numbers.get(id)?;
        self.routes.get_mut(n as usize)?.as_mut()
    }

    /// The ids of subscriptions numbered `numbers`, sorted (a stable order for what they
    /// cause).
    pub(super) fn ids(&self, numbers: &[u32]) -> Vec<MessageId> {
        let mut ids: Vec<MessageId> = numbers.iter().filter_map(|&n| Some(self.get(n)?.id.clone())).collect();
        ids.sort();
        ids
    }
}

#[cfg(test)]
mod tests {
    use padres_lang::Name;

    use super::*;

    fn id(n: u64) -> MessageId {
        MessageId::new(Name::new("B1").expect("name"), n)
    }

    #[test]
    fn numbers_are_reused_after_removal_and_stay_put_when_the_hop_changes() {
        let mut routes = SubRoutes::default();
        let a = routes.add(&id(1), Hop::Client(7));
        let b = routes.add(&id(2), Hop::Detector);
        assert_ne!(a, b);
        assert_eq!(routes.add(&id(1), Hop::Broker(Name::new("B2").expect("name"))), a);
        assert_eq!(routes.get(a).map(|r| r.hop.clone()), Some(Hop::Broker(Name::new("B2").expect("name"))));
        assert_eq!(routes.remove(&id(1)), Some(a));
        assert!(routes.get(a).is_none());
        assert!(routes.get_mut(&id(1)).is_none() && routes.by_id(&id(1)).is_none());
        assert_eq!(routes.by_id(&id(2)).map(|r| r.hop.clone()), Some(Hop::Detector));
        let c = routes.add(&id(3), Hop::History);
        assert_eq!(c, a, "a freed number is reused");
        assert_eq!(routes.ids(&[c, b]), vec![id(2), id(3)]);
    }
}
