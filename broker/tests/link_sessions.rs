//! Link sessions (`padres_broker::resume`) between two brokers over links that drop, with
//! frames in flight lost, frames already read arriving after a new link is up, and links
//! that come back before or after the window. Each seed is one random run; a failing seed
//! prints itself (`SEED=N` replays one).

use std::collections::{BTreeMap, VecDeque};

use padres_broker::links::LinkId;
use padres_broker::resume::{Counters, Received, Sessions, Settings, Step};
use padres_lang::wire::{BrokerMessage, Frame};
use padres_lang::{MessageId, Name};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n.max(1)
    }
}

/// One broker: its sessions and what its router saw.
struct Side {
    name: Name,
    sessions: Sessions,
    /// The router believes the neighbour is up.
    up: bool,
    /// The router's neighbour epochs: each `NeighbourUp` starts one.
    epoch: u64,
    /// Messages the router sent, by epoch; messages it received, with the sender's epoch
    /// read from the payload.
    sent: u64,
    received: Vec<(u64, u64)>,
    ups: u64,
    downs: u64,
    restarts: u64,
    settings: Settings,
}

struct Net {
    rng: Rng,
    now: u64,
    sides: [Side; 2],
    /// Frames on each link, per direction (index of the sender).
    queues: BTreeMap<(LinkId, usize), VecDeque<Frame>>,
    /// The link in use, if any.
    current: Option<LinkId>,
    /// Links dropped whose already-read frames still arrive.
    dying: Vec<LinkId>,
    next_link: LinkId,
}

fn payload(side: usize, epoch: u64, n: u64) -> BrokerMessage {
    let origin = Name::new(if side == 0 { "A" } else { "B" }).expect("name");
    BrokerMessage::Unsubscribe { id: MessageId::new(origin, (epoch << 32) | n) }
}

impl Net {
    fn new(seed: u64, window: u64) -> Self {
        let side = |name: &str, seed: u64| Side {
            name: Name::new(name).expect("name"),
            sessions: Sessions::new(
                Name::new(name).expect("name"),
                seed,
                Settings { window, max_bytes: 1 << 30, ack_every: 4, ack_after: 5 },
            ),
            up: false,
            epoch: 0,
            sent: 0,
            received: Vec::new(),
            ups: 0,
            downs: 0,
            restarts: 0,
            settings: Settings { window, max_bytes: 1 << 30, ack_every: 4, ack_after: 5 },
        };
        Self {
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            now: 0,
            sides: [side("A", seed << 20), side("B", (seed << 20) + 1000)],
            queues: BTreeMap::new(),
            current: None,
            dying: Vec::new(),
            next_link: 1,
        }
    }

    fn peer(&self, i: usize) -> Name {
        self.sides[1 - i].name.clone()
    }

    /// Carries out side `i`'s steps.
    fn steps(&mut self, i: usize) {
        while let Some(step) = self.sides[i].sessions.poll_step() {
            match step {
                Step::Send { link, frame } => self.queues.entry((link, i)).or_default().push_back(frame),
                Step::NeighbourUp(_) => {
                    let side = &mut self.sides[i];
                    assert!(!side.up, "NeighbourUp twice without NeighbourDown");
                    side.up = true;
                    side.epoch += 1;
                    side.sent = 0;
                    side.ups += 1;
                }
                Step::NeighbourDown(_) => {
                    let side = &mut self.sides[i];
                    assert!(side.up, "NeighbourDown without NeighbourUp");
                    side.up = false;
                    side.downs += 1;
                }
                Step::NeighbourRestarted { kept, .. } => {
                    // The neighbour lost its session: for the router, down and up at once.
                    // Only publications are kept, and these runs send none.
                    assert!(kept.is_empty(), "only publications are kept");
                    let side = &mut self.sides[i];
                    assert!(side.up, "NeighbourRestarted without NeighbourUp");
                    side.epoch += 1;
                    side.sent = 0;
                    side.ups += 1;
                    side.downs += 1;
                }
                Step::Cut { .. } => panic!("no gap or overflow is expected here"),
            }
        }
    }

    fn router_sends(&mut self, i: usize) {
        if !self.sides[i].up {
            return;
        }
        let side = &mut self.sides[i];
        side.sent += 1;
        let message = payload(i, side.epoch, side.sent);
        let peer = self.peer(i);
        if let Some((link, frame)) = self.sides[i].sessions.send(&peer, message) {
            self.queues.entry((link, i)).or_default().push_back(frame);
        }
        self.steps(i);
    }

    /// Delivers the next frame of a random readable queue, if any.
    fn deliver_one(&mut self) -> bool {
        let readable: Vec<(LinkId, usize)> = self
            .queues
            .iter()
            .filter(|((link, _), q)| {
                !q.is_empty() && (Some(*link) == self.current || self.dying.contains(link))
            })
            .map(|(k, _)| *k)
            .collect();
        if readable.is_empty() {
            return false;
        }
        let (link, from) = readable[self.rng.below(readable.len() as u64) as usize];
        let frame = self.queues.get_mut(&(link, from)).and_then(VecDeque::pop_front).expect("a frame");
        let to = 1 - from;
        let peer = self.peer(to);
        let now = self.now;
        match frame {
            Frame::Broker { seq, message } => {
                if self.sides[to].sessions.receive(now, &peer, link, seq) == Received::Pass {
                    let BrokerMessage::Unsubscribe { id } = message else { panic!("only payloads") };
                    self.sides[to].received.push((id.seq >> 32, id.seq & 0xffff_ffff));
                }
            }
            Frame::Resume { session, received, fresh } => {
                self.sides[to].sessions.resume(now, &peer, link, session, received, fresh);
            }
            Frame::Ack { received } => self.sides[to].sessions.acked(&peer, link, received),
            other => panic!("unexpected {other:?}"),
        }
        self.steps(to);
        self.close_drained();
        true
    }

    /// Dying links whose frames have all arrived are closed at both ends.
    fn close_drained(&mut self) {
        let drained: Vec<LinkId> = self
            .dying
            .iter()
            .copied()
            .filter(|l| (0..2).all(|i| self.queues.get(&(*l, i)).is_none_or(VecDeque::is_empty)))
            .collect();
        for link in drained {
            self.dying.retain(|l| *l != link);
            for i in 0..2 {
                let peer = self.peer(i);
                self.sides[i].sessions.link_closed(&peer, link);
            }
        }
    }

    fn link_up(&mut self) {
        let link = self.next_link;
        self.next_link += 1;
        self.current = Some(link);
        let first = self.rng.below(2) as usize;
        for i in [first, 1 - first] {
            let peer = self.peer(i);
            self.sides[i].sessions.attach(self.now, &peer, link);
            self.steps(i);
        }
    }

    /// The link breaks: what is in flight is lost except a random prefix of each direction,
    /// which was read already and still arrives.
    fn link_down(&mut self) {
        let Some(link) = self.current.take() else { return };
        for i in 0..2 {
            if let Some(q) = self.queues.get_mut(&(link, i)) {
                let keep = self.rng.below(q.len() as u64 + 1) as usize;
                q.truncate(keep);
            }
        }
        self.dying.push(link);
        for i in 0..2 {
            let peer = self.peer(i);
            self.sides[i].sessions.detach(self.now, &peer, false);
            self.steps(i);
        }
        self.close_drained();
    }

    fn advance(&mut self, ms: u64) {
        self.now += ms;
        for i in 0..2 {
            if self.sides[i].sessions.poll_timeout().is_some_and(|at| at <= self.now) {
                self.sides[i].sessions.handle_timeout(self.now);
                self.steps(i);
            }
        }
    }

    /// Side `i` crashes and starts again: the link drops, and its sessions and router are
    /// new (its router's epochs go on counting, so that what it sends stays ordered).
    fn restart(&mut self, i: usize) {
        self.link_down();
        let side = &mut self.sides[i];
        let seed = self.rng.below(u64::MAX);
        side.sessions = Sessions::new(side.name.clone(), seed, side.settings);
        side.up = false;
        side.ups = 0;
        side.downs = 0;
        side.restarts += 1;
    }

    /// Runs `rounds` random events; a link that drops returns after up to `max_down` ms;
    /// with `restarts`, a side sometimes crashes and starts again.
    fn run(&mut self, rounds: usize, max_down: u64) {
        self.run_with(rounds, max_down, false);
    }

    fn run_with(&mut self, rounds: usize, max_down: u64, restarts: bool) {
        self.link_up();
        let mut back_at: Option<u64> = None;
        for _ in 0..rounds {
            match self.rng.below(20) {
                0..=5 => self.router_sends(0),
                6..=8 => self.router_sends(1),
                9..=15 => {
                    self.deliver_one();
                }
                16 => {
                    if self.current.is_some() && self.rng.below(4) == 0 {
                        if restarts && self.rng.below(3) == 0 {
                            let i = self.rng.below(2) as usize;
                            self.restart(i);
                        } else {
                            self.link_down();
                        }
                        back_at = Some(self.now + self.rng.below(max_down + 1));
                    }
                }
                _ => {
                    let ms = 1 + self.rng.below(3);
                    self.advance(ms);
                }
            }
            if back_at.is_some_and(|at| at <= self.now) {
                back_at = None;
                self.link_up();
            }
        }
        // Quiet: the link back, everything delivered, acknowledgements sent.
        if self.current.is_none() {
            self.link_up();
        }
        for _ in 0..100 {
            while self.deliver_one() {}
            self.advance(10);
        }
        while self.deliver_one() {}
    }

    /// After a run in which sessions may have ended: each side received in order, ends
    /// linked with its router's ups and downs balanced (since its last start), and both
    /// ended in the same session, in which everything sent arrived.
    fn check_started_over(&self) {
        for i in 0..2 {
            self.check_order(i);
            let side = &self.sides[i];
            assert!(side.up, "side {i} ends linked");
            assert_eq!(side.ups, side.downs + 1, "side {i}: up and down balance since its last start");
        }
        for i in 0..2 {
            let (side, other) = (&self.sides[i], &self.sides[1 - i]);
            let last: Vec<(u64, u64)> =
                side.received.iter().copied().filter(|(epoch, _)| *epoch == other.epoch).collect();
            let expected: Vec<(u64, u64)> = (1..=other.sent).map(|n| (other.epoch, n)).collect();
            assert_eq!(last, expected, "side {i}, the last session");
        }
    }

    /// What side `i` received, in order: strictly increasing (no duplicate, no reorder)
    /// within each of the sender's epochs, epochs in order.
    fn check_order(&self, i: usize) {
        let got = &self.sides[i].received;
        for pair in got.windows(2) {
            assert!(pair[0] < pair[1], "side {i} received {:?} then {:?}", pair[0], pair[1]);
        }
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (1..=500).collect(),
    }
}

/// Runs `check` for every seed; returns the sum of both sides' session counters.
fn each_seed(check: impl Fn(u64) -> Net) -> Counters {
    let mut sum = Counters::default();
    for seed in seeds() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(seed)));
        match result {
            Ok(net) => {
                for side in &net.sides {
                    let c = side.sessions.counters();
                    sum.resumed += c.resumed;
                    sum.resent += c.resent;
                    sum.duplicates += c.duplicates;
                    sum.expired += c.expired;
                }
            }
            Err(e) => {
                eprintln!("failing seed: SEED={seed}");
                std::panic::resume_unwind(e);
            }
        }
    }
    sum
}

#[test]
fn links_that_return_within_the_window_lose_and_double_nothing() {
    let sum = each_seed(|seed| {
        let mut net = Net::new(seed, 1_000);
        net.run(3_000, 200);
        for i in 0..2 {
            let side = &net.sides[i];
            // One session for the whole run: the routers never heard the link go.
            assert_eq!((side.ups, side.downs), (1, 0), "side {i}");
            let other = &net.sides[1 - i];
            let expected: Vec<(u64, u64)> = (1..=other.sent).map(|n| (1, n)).collect();
            assert_eq!(side.received, expected, "side {i} received every message once, in order");
            assert_eq!(side.sessions.outbox_len(&other.name), 0, "side {i}: everything acknowledged");
        }
        net
    });
    // The runs did what they are for: links broke with messages in flight, which were sent
    // again, and some arrived twice (read from the old link after the new one was up).
    assert!(sum.resumed > 1_000 && sum.resent > 1_000 && sum.duplicates > 100, "{sum:?}");
    assert_eq!(sum.expired, 0);
}

#[test]
fn links_that_stay_away_past_the_window_start_over_without_duplicates() {
    let sum = each_seed(|seed| {
        let mut net = Net::new(seed, 30);
        net.run(3_000, 80);
        net.check_started_over();
        net
    });
    assert!(sum.expired > 500 && sum.resumed > 500, "{sum:?}");
}

#[test]
fn restarted_brokers_start_over_and_nothing_doubles() {
    let restarts: u64 = seeds()
        .into_iter()
        .map(|seed| {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut net = Net::new(seed, 1_000);
                net.run_with(3_000, 200, true);
                net.check_started_over();
                net.sides[0].restarts + net.sides[1].restarts
            }));
            result.unwrap_or_else(|e| {
                eprintln!("failing seed: SEED={seed}");
                std::panic::resume_unwind(e)
            })
        })
        .sum();
    assert!(restarts > 500, "the runs restarted brokers ({restarts})");
}

#[test]
fn a_window_of_zero_forgets_at_once_and_still_links() {
    let mut net = Net::new(7, 0);
    net.link_up();
    for _ in 0..20 {
        while net.deliver_one() {}
        net.advance(50);
    }
    assert!(net.sides[0].up && net.sides[1].up, "linked, with time passing");
    assert_eq!((net.sides[0].ups, net.sides[1].ups), (1, 1), "one session each");
    net.router_sends(0);
    while net.deliver_one() {}
    net.link_down();
    assert!(!net.sides[0].up && !net.sides[1].up, "both routers hear the link go at once");
    net.link_up();
    for _ in 0..20 {
        while net.deliver_one() {}
        net.advance(50);
    }
    assert!(net.sides[0].up && net.sides[1].up);
    assert_eq!((net.sides[0].ups, net.sides[1].ups), (2, 2));
}
