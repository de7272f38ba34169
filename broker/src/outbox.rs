//! Outboxes give memory back after a burst.
//!
//! Link sessions ([`crate::resume`]) and client sessions keep every message a peer has not
//! acknowledged in a queue. A peer that stops reading for a few seconds (a stalled
//! subscriber, a neighbour that is not scheduled) makes its queue hold tens of thousands of
//! messages; once they are acknowledged the queue is short again, but a `VecDeque` keeps
//! the capacity it grew to. Measured on a 3-broker chain at 10,000 publications/s, a
//! subscriber stopped for 3 s left its broker ~15 MB larger for good, and each later stall
//! that went further added a step: the soak's resident memory rose in steps, not a slope.
//!
//! [`release_drained`] is called after an acknowledgement empties part of a queue: a queue
//! down to a quarter of its capacity, and larger than [`KEEP`], is shrunk to twice what it
//! holds. Growing back costs the doublings again, which a queue that shrinks only at a
//! quarter pays at most once per shrink (amortized constant per message).

use std::collections::VecDeque;

/// Capacity (messages) an outbox keeps whatever it holds: at 10,000 messages/s with an
/// acknowledgement every 100 ms, about what a peer that keeps up leaves unacknowledged,
/// so a steady stream never shrinks and regrows.
pub const KEEP: usize = 1024;

/// Shrinks `queue` if it holds less than a quarter of its capacity and that capacity is
/// past [`KEEP`].
pub fn release_drained<T>(queue: &mut VecDeque<T>) {
    if queue.capacity() > KEEP && queue.len() <= queue.capacity() / 4 {
        queue.shrink_to((queue.len() * 2).max(KEEP));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_burst_gives_its_capacity_back_and_a_steady_queue_keeps_its_own() {
        let mut queue: VecDeque<u64> = VecDeque::new();
        queue.extend(0..40_000);
        let burst = queue.capacity();
        queue.drain(..39_000);
        release_drained(&mut queue);
        assert_eq!(queue.len(), 1000, "nothing held is lost");
        assert_eq!(queue.iter().next(), Some(&39_000), "in order");
        assert!(queue.capacity() < burst / 8, "{} of {burst}", queue.capacity());
        assert!(queue.capacity() >= KEEP);

        // A queue that never grew past KEEP is left alone, however empty.
        let mut small: VecDeque<u64> = VecDeque::with_capacity(KEEP);
        let capacity = small.capacity();
        small.push_back(1);
        release_drained(&mut small);
        assert_eq!(small.capacity(), capacity);

        // Above a quarter full, nothing moves.
        let mut half: VecDeque<u64> = (0..5000).collect();
        let capacity = half.capacity();
        half.truncate(capacity / 4 + 1);
        release_drained(&mut half);
        assert_eq!(half.capacity(), capacity);
    }
}
