//! Notifications as one JSON object per line, in the shapes of [`padres_lang::json`]
//! (shared with the broker's HTTP gateway).

pub use padres_lang::json::publication;

use crate::Notification;

/// Any notification as one line of JSON.
pub fn notification(notification: &Notification) -> String {
    match notification {
        Notification::Publication { subs, publication: p } => publication(subs, p),
        Notification::Composite { sub, pubs } => {
            padres_lang::json::composite(sub, pubs.iter().map(|(l, p)| (*l, p)))
        }
        Notification::EndOfHistory { sub, count, missing, truncated } => {
            padres_lang::json::end_of_history(sub, *count, missing, *truncated)
        }
    }
}
