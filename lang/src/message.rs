//! The messages a client sends, in one enum with a one-line text form:
//!
//! ```text
//! a [class,eq,'stock'],[price,>,0]                    advertise
//! s [class,eq,'stock'],[price,>,100]                  subscribe
//! cs {[class,eq,'a']}&{[class,eq,'b']}                 composite subscribe
//! p [class,'stock'],[price,120]                       publish
//! unsub B1/7                                          unsubscribe (also composites)
//! unadv B1/3                                          unadvertise
//! ```

use serde::{Deserialize, Serialize};

use crate::composite::CompositeSubscription;
use crate::id::MessageId;
use crate::publication::Publication;
use crate::subscription::{Advertisement, Subscription};

/// A request from a client (or a routed message between brokers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// `a ADV`.
    Advertise(Advertisement),
    /// `s SUB`.
    Subscribe(Subscription),
    /// `cs COMPOSITE`.
    CompositeSubscribe(CompositeSubscription),
    /// `p PUB`.
    Publish(Publication),
    /// `unsub ID`: withdraws a subscription or composite subscription.
    Unsubscribe(MessageId),
    /// `unadv ID`: withdraws an advertisement.
    Unadvertise(MessageId),
}

impl Message {
    /// The command word of the text form.
    pub fn command(&self) -> &'static str {
        match self {
            Self::Advertise(_) => "a",
            Self::Subscribe(_) => "s",
            Self::CompositeSubscribe(_) => "cs",
            Self::Publish(_) => "p",
            Self::Unsubscribe(_) => "unsub",
            Self::Unadvertise(_) => "unadv",
        }
    }
}
