//! What a broker pushes to a client: a publication that matched atomic subscriptions, or a
//! match of a composite subscription.

use padres_lang::{MessageId, Publication};

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
}

impl Notification {
    /// The subscription it answers (the first, for a publication matching several).
    pub fn sub(&self) -> Option<&MessageId> {
        match self {
            Self::Publication { subs, .. } => subs.first(),
            Self::Composite { sub, .. } => Some(sub),
        }
    }

    /// The publication and the subscriptions it matched, if this is not a composite match.
    pub fn into_publication(self) -> Option<(Vec<MessageId>, Publication)> {
        match self {
            Self::Publication { subs, publication } => Some((subs, publication)),
            Self::Composite { .. } => None,
        }
    }
}
