//! Outboxes give memory back after a burst.
//!
//! Link sessions ([`crate::resume`]) and client sessions keep every message a peer has not
//! acknowledged in a queue. A peer that stops reading for a few seconds (a stalled
//! subscriber, a neighbour that is not scheduled) makes its queue hold tens of thousands of
//! messages; once they are acknowledged the queue is short again, but a `VecDeque` keeps
//! the capacity it grew to: at 10,000 publications/s, a subscriber stopped for 3 s leaves
//! 30,000 frames of 208 B in a 32,768-slot queue, ~7 MB, for the life of its session
//! (`scripts/stall-memory` measured its broker ~13 MB larger after such a stall). The same
//! holds for the steps a link session queues when it resumes (one per message of its
//! outbox).
//!
//! [`release_drained`] is called after a queue is emptied in part (an acknowledgement, a
//! step taken): a queue down to a quarter of its capacity or less, and with a capacity
//! past [`KEEP`], is shrunk to twice what it holds. After a shrink the queue has room for
//! as many again as it holds, and shrinks again only after losing half of them, so each
//! copy is paid for by as many pushes or pops (amortized constant per message).

use std::collections::VecDeque;

/// Capacity (messages) a queue keeps whatever it holds: a peer that keeps up acknowledges
/// every 256 messages (or 100 ms), so at 10,000 messages/s it leaves a few hundred
/// unacknowledged, and a steady stream never shrinks and regrows.
pub const KEEP: usize = 1024;

/// Shrinks `queue` if it holds a quarter of its capacity or less and that capacity is past
/// [`KEEP`].
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
