//! The link policy in virtual time: brokers whose policies dial each other over a network
//! that is reachable or not, with a fixed latency, and links that carry a backlog. No
//! sockets and no sleeps: time is a number the harness advances.

use std::collections::{BTreeMap, HashMap};

use padres_broker::links::{Action, LinkId, LinkPolicy, Target, Timers};
use padres_lang::Name;
use padres_lang::wire::CloseCode;

const LATENCY: u64 = 10;

#[derive(Debug)]
struct Node {
    name: Name,
    policy: LinkPolicy,
    /// Target index to broker index.
    targets: Vec<usize>,
    /// Open links: peer broker and the target this end dialled it for.
    links: HashMap<LinkId, (usize, Option<Target>)>,
}

#[derive(Debug)]
enum Event {
    Dialled {
        from: usize,
        target: Target,
    },
    /// The far end of a closed link hears of it.
    Closed {
        at: usize,
        link: LinkId,
        code: CloseCode,
    },
}

#[derive(Debug)]
struct Net {
    nodes: Vec<Node>,
    now: u64,
    queue: BTreeMap<(u64, u64), Event>,
    seq: u64,
    next_link: LinkId,
    /// Whether broker j accepts dials, from this time on.
    reachable_from: Vec<u64>,
    /// (time, broker, action) for every action taken.
    log: Vec<(u64, usize, Action)>,
}

impl Net {
    /// Brokers B1..Bn, broker i dialling `targets[i]`.
    fn new(targets: Vec<Vec<usize>>) -> Self {
        let nodes = targets
            .into_iter()
            .enumerate()
            .map(|(i, targets)| {
                let name = Name::new(&format!("B{}", i + 1)).expect("name");
                let policy = LinkPolicy::new(name.clone(), targets.len(), Timers::default());
                Node { name, policy, targets, links: HashMap::new() }
            })
            .collect::<Vec<_>>();
        let n = nodes.len();
        Self {
            nodes,
            now: 0,
            queue: BTreeMap::new(),
            seq: 0,
            next_link: 1,
            reachable_from: vec![0; n],
            log: Vec::new(),
        }
    }

    fn at(&mut self, time: u64, event: Event) {
        self.seq += 1;
        self.queue.insert((time, self.seq), event);
    }

    /// Runs every timer and event up to `until`.
    fn run_until(&mut self, until: u64) {
        loop {
            let timer = self
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(i, n)| n.policy.poll_timeout().map(|t| (t, i)))
                .min();
            let event = self.queue.keys().next().map(|(t, _)| *t);
            let next = match (timer, event) {
                (Some((t, _)), Some(e)) => t.min(e),
                (Some((t, _)), None) => t,
                (None, Some(e)) => e,
                (None, None) => break,
            };
            if next > until {
                break;
            }
            self.now = self.now.max(next);
            if let Some((t, i)) = timer.filter(|(t, _)| *t == next) {
                let _ = t;
                self.nodes[i].policy.handle_timeout(self.now);
                self.drain(i);
            } else if let Some((_, event)) = self.queue.pop_first() {
                self.deliver(event);
            }
        }
        self.now = until;
    }

    fn deliver(&mut self, event: Event) {
        match event {
            Event::Dialled { from, target } => {
                let to = self.nodes[from].targets[target];
                if self.now < self.reachable_from[to] {
                    self.nodes[from].policy.handle_dial_failed(self.now, target);
                    self.drain(from);
                    return;
                }
                let link = self.next_link;
                self.next_link += 1;
                self.nodes[from].links.insert(link, (to, Some(target)));
                self.nodes[to].links.insert(link, (from, None));
                let (a, b) = (self.nodes[from].name.clone(), self.nodes[to].name.clone());
                self.nodes[from].policy.handle_link_up(self.now, b, link, Some(target));
                self.nodes[to].policy.handle_link_up(self.now, a, link, None);
                self.drain(from);
                self.drain(to);
            }
            Event::Closed { at, link, code } => self.link_down(at, link, code),
        }
    }

    fn link_down(&mut self, at: usize, link: LinkId, code: CloseCode) {
        let Some((peer, target)) = self.nodes[at].links.remove(&link) else { return };
        let peer = self.nodes[peer].name.clone();
        self.nodes[at].policy.handle_link_down(self.now, &peer, link, target, code);
        self.drain(at);
    }

    /// Link `link` drops (both ends hear it now).
    fn drop_link(&mut self, link: LinkId) {
        for i in 0..self.nodes.len() {
            self.link_down(i, link, CloseCode::Done);
        }
    }

    fn drain(&mut self, i: usize) {
        while let Some(action) = self.nodes[i].policy.poll_action() {
            self.log.push((self.now, i, action.clone()));
            match action {
                Action::Dial(target) => self.at(self.now + LATENCY, Event::Dialled { from: i, target }),
                Action::Close { link, code, .. } => {
                    if let Some(&(peer, _)) = self.nodes[i].links.get(&link) {
                        self.at(self.now + LATENCY, Event::Closed { at: peer, link, code });
                    }
                    self.link_down(i, link, code);
                }
                Action::NeighbourUp(_) | Action::NeighbourDown { .. } => {}
            }
        }
    }

    fn dials(&self, broker: usize) -> Vec<u64> {
        self.log
            .iter()
            .filter(|(_, b, a)| *b == broker && matches!(a, Action::Dial(_)))
            .map(|(t, _, _)| *t)
            .collect()
    }

    fn open_links(&self, broker: usize) -> Vec<LinkId> {
        let mut links: Vec<LinkId> = self.nodes[broker].links.keys().copied().collect();
        links.sort_unstable();
        links
    }
}

#[test]
fn brokers_that_dial_each_other_keep_the_link_dialled_by_the_smaller_name() {
    let mut net = Net::new(vec![vec![1], vec![0]]);
    net.run_until(1_000);
    let (b1, b2) = (net.open_links(0), net.open_links(1));
    assert_eq!(b1.len(), 1, "B1 holds {b1:?}");
    assert_eq!(b1, b2, "both ends keep the same link");
    let kept = b1[0];
    assert_eq!(net.nodes[0].links[&kept].1, Some(0), "the kept link is the one B1 dialled");
    assert!(
        net.log.iter().any(|(_, _, a)| matches!(a, Action::Close { code: CloseCode::DuplicateLink, .. }))
    );
    // B2, whose link was closed as a duplicate, waits 30 s before it dials again.
    net.run_until(29_000);
    assert_eq!(net.dials(1), [0], "B2 dialled again within the duplicate wait");
    net.run_until(31_000);
    assert_eq!(net.dials(1), [0, 30_010], "B2 tries again once the wait is over");
    assert_eq!(net.open_links(0), [kept], "and the kept link stays");
    // The kept link drops: its dialler, B1, redials after the first backoff.
    net.drop_link(kept);
    net.run_until(32_000);
    assert_eq!(net.dials(0), [0, 31_100]);
    assert_eq!(net.open_links(0).len(), 1);
    assert_eq!(net.open_links(0), net.open_links(1));
}

#[test]
fn an_unreachable_neighbour_is_redialled_with_doubling_backoff_up_to_five_seconds() {
    let mut net = Net::new(vec![vec![1], vec![]]);
    net.reachable_from[1] = 20_000;
    net.run_until(25_000);
    // Each dial fails after the latency; the waits are 0.1, 0.2, 0.4, … s, then 5 s.
    assert_eq!(net.dials(0), [0, 110, 320, 730, 1_540, 3_150, 6_360, 11_370, 16_380, 21_390]);
    assert_eq!(net.open_links(0).len(), 1, "linked once the neighbour is reachable");
    // A link that drops is redialled after the first backoff, not the last.
    let link = net.open_links(0)[0];
    net.drop_link(link);
    net.run_until(26_000);
    assert_eq!(net.dials(0).last(), Some(&25_100));
}

#[test]
fn a_link_with_a_lasting_backlog_is_cut_and_its_routes_forgotten() {
    let mut net = Net::new(vec![vec![1], vec![]]);
    net.run_until(1_000);
    let b2 = net.nodes[1].name.clone();
    let backlog = |net: &mut Net, frames: usize| {
        let now = net.now;
        net.nodes[0].policy.handle_backlog(now, &b2, frames);
        net.drain(0);
    };
    let cut = |net: &Net| {
        net.log.iter().find_map(|(t, b, a)| {
            (*b == 0 && matches!(a, Action::Close { code: CloseCode::TooSlow, .. })).then_some(*t)
        })
    };
    // A backlog that clears in time is no problem; one that stays is cut 5 s after it began.
    backlog(&mut net, 10_000);
    net.run_until(3_000);
    backlog(&mut net, 100);
    net.run_until(4_000);
    backlog(&mut net, 9_000);
    net.run_until(8_999);
    backlog(&mut net, 9_500);
    assert_eq!(cut(&net), None, "cut before the backlog lasted 5 s");
    net.run_until(9_500);
    assert_eq!(cut(&net), Some(9_000));
    assert!(
        net.log.iter().any(|(t, b, a)| *t == 9_000 && *b == 0 && matches!(a, Action::NeighbourDown { .. }))
    );
    // It is redialled like any link that dropped, and a backlog at the hard limit cuts at once.
    net.run_until(10_000);
    assert_eq!(net.open_links(0).len(), 1);
    let before = net.log.len();
    backlog(&mut net, Timers::default().max_backlog);
    let now = net.now;
    assert!(
        net.log[before..]
            .iter()
            .any(|(t, _, a)| *t == now && matches!(a, Action::Close { code: CloseCode::TooSlow, .. })),
        "{:?}",
        &net.log[before..]
    );
}
