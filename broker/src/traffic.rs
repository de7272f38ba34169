//! What each neighbour link carries, per message class: the messages and encoded bytes a
//! broker sends to each neighbour, counted by the link's writer as it encodes them.
//!
//! A publication counts under its `class`; messages that carry no single publication
//! count under a name in parentheses: `(advertise)` (advertisements and their
//! withdrawals), `(subscribe)` (subscriptions, their withdrawals, settlements and tree
//! repairs), `(composite)` (composite subscriptions), `(composite match)` (matches, with
//! the publications they carry), `(history)` (history stores, queries and answers) and
//! `(link)` (session resumptions, acknowledgements, goodbyes). Past [`MAX_CLASSES`]
//! names per neighbour, the rest count under [`OTHER`], so a client that publishes on
//! many classes cannot grow the table without bound.
//!
//! Only what is sent is counted: what a link carries from B to A is what B sent, so the
//! two brokers of a link together count both directions. `padres broker stats`,
//! `/metrics` and every broker report ([`crate::monitor`]) show the counts, and
//! `padres workflow place` reads them.

use std::collections::BTreeMap;

use padres_lang::Name;
use padres_lang::wire::{BrokerMessage, Frame, LinkTraffic};

/// Most message classes counted apart per neighbour.
pub const MAX_CLASSES: usize = 64;

/// What classes past [`MAX_CLASSES`] count under.
pub const OTHER: &str = "(other)";

/// Messages and bytes of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Messages sent.
    pub messages: u64,
    /// Their encoded bytes (frame headers included, QUIC's own overhead not).
    pub bytes: u64,
}

/// Per class, what was sent to one neighbour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    by_class: BTreeMap<Box<str>, Count>,
}

impl Traffic {
    /// Counts one message of `class`, of `bytes` encoded bytes.
    pub fn add(&mut self, class: &str, bytes: u64) {
        self.add_count(class, Count { messages: 1, bytes });
    }

    fn add_count(&mut self, class: &str, count: Count) {
        // One lookup for a class counted already (every message but a class's first).
        let full = self.by_class.len() >= MAX_CLASSES;
        let entry = match self.by_class.get_mut(class) {
            Some(entry) => entry,
            None => self.by_class.entry(if full { OTHER } else { class }.into()).or_default(),
        };
        entry.messages += count.messages;
        entry.bytes += count.bytes;
    }

    /// Counts everything `other` counted too.
    pub fn merge(&mut self, other: &Self) {
        for (class, count) in &other.by_class {
            self.add_count(class, *count);
        }
    }

    /// Each class counted, by name.
    pub fn classes(&self) -> impl Iterator<Item = (&str, Count)> {
        self.by_class.iter().map(|(class, count)| (&**class, *count))
    }

    /// The counts as `broker stats` rows for neighbour `peer`.
    pub fn rows(&self, peer: &Name) -> Vec<LinkTraffic> {
        self.classes()
            .map(|(class, count)| LinkTraffic {
                peer: peer.clone(),
                class: class.to_owned(),
                messages: count.messages,
                bytes: count.bytes,
            })
            .collect()
    }
}

/// The class `frame`, sent on a neighbour link, counts under.
pub fn label(frame: &Frame) -> &str {
    match frame {
        Frame::Broker { message, .. } => message_label(message),
        _ => "(link)",
    }
}

/// The class a message between brokers counts under.
pub fn message_label(message: &BrokerMessage) -> &str {
    match message {
        BrokerMessage::Publish { publication, .. } | BrokerMessage::TreePublish { publication, .. } => {
            publication.class()
        }
        BrokerMessage::Advertise { .. } | BrokerMessage::Unadvertise { .. } => "(advertise)",
        BrokerMessage::Subscribe { .. }
        | BrokerMessage::Unsubscribe { .. }
        | BrokerMessage::TreeSubscribe { .. }
        | BrokerMessage::TreeUnsubscribe { .. }
        | BrokerMessage::Settled { .. }
        | BrokerMessage::TreesSettled { .. }
        | BrokerMessage::TreeRepair { .. } => "(subscribe)",
        BrokerMessage::CompositeSubscribe { .. } | BrokerMessage::CompositeUnsubscribe { .. } => {
            "(composite)"
        }
        BrokerMessage::CompositeMatch { .. } => "(composite match)",
        BrokerMessage::HistoryAdvertise { .. }
        | BrokerMessage::HistoryUnadvertise { .. }
        | BrokerMessage::HistoryQuery { .. }
        | BrokerMessage::HistoryAnswer { .. }
        | BrokerMessage::HistoryDone { .. } => "(history)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_class_and_merge() {
        let mut a = Traffic::default();
        a.add("job_status", 100);
        a.add("job_status", 50);
        a.add("trigger", 80);
        let mut b = Traffic::default();
        b.add("job_status", 10);
        b.merge(&a);
        let classes: Vec<(&str, Count)> = b.classes().collect();
        assert_eq!(
            classes,
            [
                ("job_status", Count { messages: 3, bytes: 160 }),
                ("trigger", Count { messages: 1, bytes: 80 })
            ]
        );
    }

    #[test]
    fn classes_past_the_limit_count_as_other() {
        let mut t = Traffic::default();
        for i in 0..MAX_CLASSES + 10 {
            t.add(&format!("c{i:03}"), 1);
        }
        t.add("c000", 5);
        assert_eq!(t.classes().count(), MAX_CLASSES + 1);
        let other = t.classes().find(|(c, _)| *c == OTHER).map(|(_, n)| n);
        assert_eq!(other, Some(Count { messages: 10, bytes: 10 }));
        let first = t.classes().find(|(c, _)| *c == "c000").map(|(_, n)| n);
        assert_eq!(first, Some(Count { messages: 2, bytes: 6 }));
    }

    #[test]
    fn a_publication_counts_under_its_class() {
        let publication: padres_lang::Publication = "[class,'job_status'],[job,'A']".parse().unwrap();
        let frame = Frame::Broker {
            seq: 1,
            message: BrokerMessage::Publish {
                publication: publication.into(),
                stamp: padres_lang::Stamp::new(0, Name::new("B1").expect("a name"), 1),
            },
        };
        assert_eq!(label(&frame), "job_status");
        assert_eq!(label(&Frame::Ack { received: 3 }), "(link)");
    }
}
