//! What a broker pushes to a client: a publication that matched atomic subscriptions, a
//! match of a composite subscription, or the end of a historic subscription's stored part.

use padres_lang::{MessageId, Name, Publication};

/// One notification.
#[derive(Clone, Debug, PartialEq)]
pub enum Notification {
    /// A publication matching some of the client's subscriptions.
    Publication {
        /// Every subscription of the client it matched (at least one).
        subs: Vec<MessageId>,
        /// The publication.
        publication: Publication,
    },
    /// A match of one of the client's composite subscriptions.
    Composite {
        /// The composite subscription.
        sub: MessageId,
        /// The publications the match used, each with its leaf (numbered from 0, left to
        /// right in the pattern; a `Times` leaf once per repetition), sorted by leaf.
        pubs: Vec<(u32, Publication)>,
    },
    /// A historic subscription's stored publications have all been delivered (before this,
    /// in time order); live ones follow if its time range is open-ended.
    EndOfHistory {
        /// The subscription.
        sub: MessageId,
        /// How many stored publications were delivered.
        count: u64,
        /// The brokers whose stores did not answer in time.
        missing: Vec<Name>,
        /// More were stored than the broker delivers for one subscription.
        truncated: bool,
    },
}

impl Notification {
    /// The subscription it answers (the first, for a publication matching several).
    pub fn sub(&self) -> Option<&MessageId> {
        match self {
            Self::Publication { subs, .. } => subs.first(),
            Self::Composite { sub, .. } | Self::EndOfHistory { sub, .. } => Some(sub),
        }
    }

    /// The publication and the subscriptions it matched, if this is not a composite match.
    pub fn into_publication(self) -> Option<(Vec<MessageId>, Publication)> {
        match self {
            Self::Publication { subs, publication } => Some((subs, publication)),
            Self::Composite { .. } | Self::EndOfHistory { .. } => None,
        }
    }
}
