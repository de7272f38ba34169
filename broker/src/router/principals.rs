//! What each principal holds at this broker over all its connections, against the limits
//! of its permits ([`crate::auth::Limits`]): subscriptions, and a token bucket for its
//! publication rate. Connections are counted where they are accepted (`net/accept.rs`).

use std::collections::HashMap;

use padres_lang::wire::ErrorCode;

use crate::auth::Rights;

/// Per principal, what it holds and its publication bucket.
#[derive(Debug, Default)]
pub(super) struct Principals {
    held: HashMap<String, Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// Subscriptions (a composite one counting one per atomic part).
    subscriptions: usize,
    /// Publications it may publish now, and when that was reckoned (ms); `None` before
    /// its first (a full bucket).
    bucket: Option<(f64, u64)>,
}

impl Principals {
    /// Whether `rights`' principal may take `more` subscriptions.
    pub(super) fn may_subscribe(&self, rights: &Rights, more: usize) -> Result<(), (ErrorCode, String)> {
        let Some(max) = rights.limits().subscriptions else { return Ok(()) };
        let held = self.held.get(&rights.principal).map_or(0, |h| h.subscriptions);
        if held.saturating_add(more) > max {
            return Err((
                ErrorCode::LimitExceeded,
                format!(
                    "principal '{}' holds {held} subscriptions at this broker (a composite one counts one per \
                     atomic part), and its permits allow {max} (max_subscriptions): unsubscribe first",
                    rights.principal
                ),
            ));
        }
        Ok(())
    }

    /// `rights`' principal took (`delta` > 0) or let go of subscriptions.
    pub(super) fn subscribed(&mut self, rights: &Rights, delta: isize) {
        if rights.limits().subscriptions.is_none() {
            return;
        }
        let held = self.held.entry(rights.principal.clone()).or_default();
        held.subscriptions = held.subscriptions.saturating_add_signed(delta);
    }

    /// Whether `principal` may publish one more at `now` (ms): a bucket of `rate`
    /// (`max_publish_rate`) tokens, filled at that rate.
    pub(super) fn may_publish(
        &mut self,
        principal: &str,
        rate: u32,
        now: u64,
    ) -> Result<(), (ErrorCode, String)> {
        let rate = f64::from(rate);
        let held = match self.held.get_mut(principal) {
            Some(held) => held,
            None => self.held.entry(principal.to_owned()).or_default(),
        };
        let (tokens, at) = held.bucket.unwrap_or((rate, now));
        let tokens = (tokens + now.saturating_sub(at) as f64 / 1000.0 * rate).min(rate);
        if tokens < 1.0 {
            held.bucket = Some((tokens, at.max(now)));
            return Err((
                ErrorCode::LimitExceeded,
                format!(
                    "principal '{principal}' publishes more than {rate} a second at this broker \
                     (max_publish_rate): publish more slowly"
                ),
            ));
        }
        held.bucket = Some((tokens - 1.0, at.max(now)));
        Ok(())
    }
}
