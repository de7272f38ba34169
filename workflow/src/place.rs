//! Locality advice: at which broker a job's agent would put the least traffic on the
//! overlay's links, by the cost model of Bauer and Dadam ("A Distributed Execution
//! Environment for Large-Scale Workflow Management Systems with Subnets and Server
//! Migration"), read for a broker federation. No I/O: `padres workflow place` gathers the
//! figures (the overlay and the bytes per message from the brokers' per-class link
//! counters, where agents are from their load reports, how often each job publishes from
//! the history stores) and prints what [`Model::advise`] says.
//!
//! # The model
//!
//! Bauer and Dadam cost each workflow step by the bytes it makes cross each subnet (F1,
//! F2): offering the step to the users who may take it, handing its input to the one who
//! does, and its result back; the control of a step belongs in the subnet with most of the
//! users it serves, and moving control pays only when the traffic it saves outweighs the
//! move (F5). Here a subnet is a broker's site and the gateways between subnets are the
//! overlay's links; a step's control is the agent that runs a job, and the users it serves
//! are the subscribers of its data. A job's data, per generation, are [`Flow`]s of
//! publications:
//!
//! - the trigger, from the home agent to every job's dependency subscription (a pool job's
//!   is at the home, which dispatches it);
//! - each job's `succeeded` and `skipped` statuses to the dependency subscriptions of the
//!   jobs after it (as met, or as refused by their `unless`), its `failed` and `timeout`
//!   statuses (one per failed attempt) only to those whose condition takes failures, and
//!   for a pool job every status, `started` too, to the home;
//! - a pool job's `dispatched` status, from the home to the member that runs it;
//! - `APPL_END`'s status, from the home to every dependency subscription (it ends their
//!   partial matches);
//! - to every history store that keeps them ([`Store`]), the statuses (`started` too)
//!   and triggers, wherever they are published.
//!
//! A publication crosses each link of the tree that joins its publisher's broker to its
//! subscribers' brokers once (routing follows the advertisement's tree; on a cyclic
//! overlay the model takes shortest paths). The cost of a placement is the sum over flows
//! of messages × bytes per message × links crossed: the link bytes of one generation,
//! the counterpart of Bauer and Dadam's summed subnet load. A job's advice is the broker,
//! among those it can run at, that minimises that sum with every other job where it is:
//! the first step of their greedy algorithm (each step to its best subnet), whose result
//! [`Advice::together`] also costs with every advised move made at once. Nothing is moved:
//! a job moves when its definition names another agent and is deployed again, between
//! generations, so there is no migration cost (F5's `MI`) to weigh.
//!
//! Not counted: live subscribers outside the application (`padres workflow watch`, other
//! monitors), which come and go; and detection inside the network, which can stop a status
//! short of its subscriber's broker (a composite dependency is counted as if detected at
//! its subscriber). With a store at every broker of a tree, every status crosses every
//! link wherever it is published: placement changes nothing of that part.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

/// The brokers and the links between them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlay {
    neighbours: BTreeMap<String, BTreeSet<String>>,
}

impl Overlay {
    /// The overlay of these links (each given once or from both ends).
    pub fn new<'a>(links: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut overlay = Self::default();
        for (a, b) in links {
            overlay.add_link(a, b);
        }
        overlay
    }

    /// Adds a broker (without links, if it has none yet).
    pub fn add_broker(&mut self, broker: &str) {
        self.neighbours.entry(broker.to_owned()).or_default();
    }

    /// Adds the link between `a` and `b`.
    pub fn add_link(&mut self, a: &str, b: &str) {
        if a == b {
            return;
        }
        self.neighbours.entry(a.to_owned()).or_default().insert(b.to_owned());
        self.neighbours.entry(b.to_owned()).or_default().insert(a.to_owned());
    }

    /// Every broker, by name.
    pub fn brokers(&self) -> impl Iterator<Item = &str> {
        self.neighbours.keys().map(String::as_str)
    }

    /// True if `broker` is one of them.
    pub fn contains(&self, broker: &str) -> bool {
        self.neighbours.contains_key(broker)
    }

    /// How many links there are.
    pub fn link_count(&self) -> usize {
        self.neighbours.values().map(BTreeSet::len).sum::<usize>() / 2
    }

    /// The links a publication from `from` crosses to reach every broker of `to`: those of
    /// the union of shortest paths (breadth first, neighbours by name), each once. A broker
    /// it cannot reach adds nothing; [`Overlay::reaches`] tells.
    pub fn tree_links(&self, from: &str, to: &BTreeSet<&str>) -> usize {
        let parents = self.parents(from);
        let mut used: BTreeSet<(&str, &str)> = BTreeSet::new();
        for &target in to {
            let mut at = target;
            while let Some(&parent) = parents.get(at) {
                if !used.insert((parent, at)) {
                    break; // the rest of the path is in the tree already
                }
                at = parent;
            }
        }
        used.len()
    }

    /// True if a path joins `a` and `b`.
    pub fn reaches(&self, a: &str, b: &str) -> bool {
        a == b || self.parents(a).contains_key(b)
    }

    /// The breadth-first tree from `root`: each broker reached, and the one before it.
    fn parents<'a>(&'a self, root: &'a str) -> BTreeMap<&'a str, &'a str> {
        let mut parents = BTreeMap::new();
        let mut queue = VecDeque::from([root]);
        while let Some(at) = queue.pop_front() {
            for next in self.neighbours.get(at).into_iter().flatten() {
                if next != root && !parents.contains_key(next.as_str()) {
                    parents.insert(next.as_str(), at);
                    queue.push_back(next.as_str());
                }
            }
        }
        parents
    }
}

/// One job, as the model needs it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobShape {
    /// Its name.
    pub job: String,
    /// The jobs it waits for (any of its needs).
    pub after: Vec<String>,
    /// Those of them whose failures it waits for too (a `failed` or `any` condition): its
    /// subscriptions take their `failed` and `timeout` statuses, which the others' never
    /// do (every dependency takes `succeeded` and `skipped`, as met or as refused).
    pub after_failures: Vec<String>,
    /// True if it runs in a pool (its dependency subscription is at the home).
    pub pool: bool,
    /// The broker whose agent runs it now (for a pool job, the last member's).
    pub at: String,
    /// The brokers it could run at: those with an agent that could take it. Empty: it
    /// stays where it is (`APPL_START`, `APPL_END`).
    pub candidates: Vec<String>,
    /// `succeeded` and `skipped` statuses it publishes per generation.
    pub ends: f64,
    /// `failed` and `timeout` statuses per generation (one per failed attempt).
    pub failures: f64,
    /// `started` statuses per generation.
    pub starts: f64,
    /// `dispatched` statuses the home publishes for it per generation (pool jobs).
    pub dispatches: f64,
}

/// Where a flow starts or ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    /// The home agent's broker.
    Home,
    /// Wherever this job (by index) runs.
    Job(usize),
    /// Where this job's dependency subscription is: the home for a pool job, else where
    /// it runs.
    Listener(usize),
    /// A history store's broker (by index).
    Store(usize),
}

/// Publications of one kind, per generation.
#[derive(Clone, Debug, PartialEq)]
struct Flow {
    from: Node,
    to: Vec<Node>,
    /// Messages per generation.
    messages: f64,
    /// Bytes per message.
    bytes: f64,
}

/// Bytes per message, by class, as the links carried them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sizes {
    /// A `job_status` publication.
    pub status: f64,
    /// A `trigger` publication.
    pub trigger: f64,
}

/// A history store that keeps some of an application's publications: a subscriber of them
/// wherever they are published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Store {
    /// Its broker.
    pub broker: String,
    /// It keeps the application's `job_status` publications.
    pub statuses: bool,
    /// It keeps its `trigger` publications.
    pub triggers: bool,
}

/// An application's jobs and where they run, on an overlay.
#[derive(Clone, Debug)]
pub struct Model {
    overlay: Overlay,
    home: String,
    jobs: Vec<JobShape>,
    stores: Vec<Store>,
    flows: Vec<Flow>,
}

/// What the model says of one job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobAdvice {
    /// The job.
    pub job: String,
    /// The broker it runs at now.
    pub at: String,
    /// Link bytes per generation of the whole application as it is placed now.
    pub cost_here: f64,
    /// The broker that minimises them (`at` if none does better).
    pub best: String,
    /// Link bytes per generation with the job there.
    pub cost_best: f64,
    /// `cost_here - cost_best`: what moving it saves per generation.
    pub saving: f64,
    /// Per candidate broker, the link bytes per generation with the job there.
    pub costs: BTreeMap<String, f64>,
}

/// What the model says of an application.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Advice {
    /// Link bytes per generation as placed now.
    pub now: f64,
    /// Per job that could move, in the application's order.
    pub jobs: Vec<JobAdvice>,
    /// Link bytes per generation with every advised move made at once.
    pub together: f64,
}

impl Model {
    /// The model of `jobs` (virtual ones included) on `overlay`, the home agent at broker
    /// `home`, with messages of `sizes`, the history `stores` keeping what they keep.
    pub fn new(overlay: Overlay, home: &str, jobs: Vec<JobShape>, sizes: Sizes, stores: Vec<Store>) -> Self {
        let index: BTreeMap<&str, usize> =
            jobs.iter().enumerate().map(|(i, j)| (j.job.as_str(), i)).collect();
        let listeners: Vec<Node> = (0..jobs.len()).map(Node::Listener).collect();
        let keeping = |keeps: fn(&Store) -> bool| -> Vec<Node> {
            stores.iter().enumerate().filter(|(_, s)| keeps(s)).map(|(i, _)| Node::Store(i)).collect()
        };
        let (status_stores, trigger_stores) = (keeping(|s| s.statuses), keeping(|s| s.triggers));
        let mut flows = Vec::new();
        let to_trigger = [listeners.as_slice(), &trigger_stores].concat();
        flows.push(Flow { from: Node::Home, to: to_trigger, messages: 1.0, bytes: sizes.trigger });
        for (i, job) in jobs.iter().enumerate() {
            let names_me = |names: &[String]| names.iter().any(|a| index.get(a.as_str()) == Some(&i));
            let successors = |failures: bool| -> Vec<Node> {
                jobs.iter()
                    .enumerate()
                    .filter(|(_, s)| names_me(if failures { &s.after_failures } else { &s.after }))
                    .map(|(s, _)| Node::Listener(s))
                    .collect()
            };
            let (mut to, mut failed) = (successors(false), successors(true));
            if job.job == crate::translate::APPL_END {
                // It ends every dependency subscription's partial matches.
                to.extend(&listeners);
            }
            let mut started = status_stores.clone();
            if job.pool {
                // The home follows its pool jobs: every status comes back to it.
                to.push(Node::Home);
                failed.push(Node::Home);
                started.push(Node::Home);
                let member = [[Node::Job(i)].as_slice(), &status_stores].concat();
                flows.push(Flow {
                    from: Node::Home,
                    to: member,
                    messages: job.dispatches,
                    bytes: sizes.status,
                });
            }
            to.extend(&status_stores);
            failed.extend(&status_stores);
            flows.push(Flow { from: Node::Job(i), to: started, messages: job.starts, bytes: sizes.status });
            flows.push(Flow { from: Node::Job(i), to, messages: job.ends, bytes: sizes.status });
            flows.push(Flow { from: Node::Job(i), to: failed, messages: job.failures, bytes: sizes.status });
        }
        Self { overlay, home: home.to_owned(), jobs, stores, flows }
    }

    /// The jobs, as given.
    pub fn jobs(&self) -> &[JobShape] {
        &self.jobs
    }

    /// Link bytes per generation with job `i` at `at[i]`.
    pub fn cost(&self, at: &[&str]) -> f64 {
        let broker = |node: Node| match node {
            Node::Home => self.home.as_str(),
            Node::Job(i) => at[i],
            Node::Listener(i) if self.jobs[i].pool => self.home.as_str(),
            Node::Listener(i) => at[i],
            Node::Store(i) => self.stores[i].broker.as_str(),
        };
        self.flows
            .iter()
            .filter(|f| f.messages > 0.0)
            .map(|flow| {
                let from = broker(flow.from);
                let to: BTreeSet<&str> = flow.to.iter().map(|&n| broker(n)).filter(|b| *b != from).collect();
                flow.messages * flow.bytes * self.overlay.tree_links(from, &to) as f64
            })
            .sum()
    }

    /// Per job that could move, the broker that would minimise link traffic and what it
    /// would save; and all advised moves together.
    pub fn advise(&self) -> Advice {
        let now: Vec<&str> = self.jobs.iter().map(|j| j.at.as_str()).collect();
        let cost_now = self.cost(&now);
        let mut advice = Vec::new();
        let mut together = now.clone();
        for (i, job) in self.jobs.iter().enumerate() {
            if job.candidates.is_empty() {
                continue;
            }
            let mut costs = BTreeMap::new();
            let (mut best, mut cost_best) = (job.at.as_str(), cost_now);
            for candidate in &job.candidates {
                let mut at = now.clone();
                at[i] = candidate;
                let cost = self.cost(&at);
                costs.insert(candidate.clone(), cost);
                // Strictly better only (with a margin for rounding): a tie stays.
                if cost < cost_best - 1e-6 {
                    (best, cost_best) = (candidate.as_str(), cost);
                }
            }
            together[i] = best;
            advice.push(JobAdvice {
                job: job.job.clone(),
                at: job.at.clone(),
                cost_here: cost_now,
                best: best.to_owned(),
                cost_best,
                saving: cost_now - cost_best,
                costs,
            });
        }
        Advice { now: cost_now, jobs: advice, together: self.cost(&together) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Overlay {
        Overlay::new([("b1", "b2"), ("b2", "b3")])
    }

    fn job(name: &str, after: &[&str], at: &str, candidates: &[&str]) -> JobShape {
        JobShape {
            job: name.to_owned(),
            after: after.iter().map(|a| (*a).to_owned()).collect(),
            pool: false,
            at: at.to_owned(),
            candidates: candidates.iter().map(|c| (*c).to_owned()).collect(),
            after_failures: Vec::new(),
            ends: 1.0,
            failures: 0.0,
            starts: 1.0,
            dispatches: 0.0,
        }
    }

    const SIZES: Sizes = Sizes { status: 100.0, trigger: 50.0 };

    #[test]
    fn a_tree_counts_shared_links_once() {
        let star = Overlay::new([("hub", "a"), ("hub", "b"), ("hub", "c"), ("c", "d")]);
        assert_eq!(star.tree_links("a", &BTreeSet::from(["b"])), 2);
        assert_eq!(star.tree_links("a", &BTreeSet::from(["b", "d"])), 4, "a-hub is shared");
        assert_eq!(star.tree_links("a", &BTreeSet::new()), 0);
        assert_eq!(star.link_count(), 4);
        let mut apart = star.clone();
        apart.add_broker("z");
        assert!(!apart.reaches("a", "z"));
        assert_eq!(apart.tree_links("a", &BTreeSet::from(["z"])), 0);
    }

    #[test]
    fn a_job_far_from_the_jobs_it_serves_is_advised_to_move_to_them() {
        // A and C run at b3, B at b1, the home at b3: B's input and output cross both links.
        let jobs = vec![
            job("APPL_START", &[], "b3", &[]),
            job("A", &["APPL_START"], "b3", &["b1", "b3"]),
            job("B", &["A"], "b1", &["b1", "b3"]),
            job("C", &["B"], "b3", &["b1", "b3"]),
            job("APPL_END", &["C"], "b3", &[]),
        ];
        let model = Model::new(chain(), "b3", jobs, SIZES, Vec::new());
        let advice = model.advise();
        // Now: the trigger and APPL_END's status to b1 (2 links each), A's end to b1 and
        // B's end back to b3 (2 links each): 2*50 + 2*100 + 2*100 + 2*100.
        assert_eq!(advice.now, 700.0);
        let b = advice.jobs.iter().find(|j| j.job == "B").expect("B");
        assert_eq!((b.best.as_str(), b.cost_best, b.saving), ("b3", 0.0, 700.0));
        let a = advice.jobs.iter().find(|j| j.job == "A").expect("A");
        assert_eq!(a.best, "b3", "A is where it should be: {a:?}");
        assert_eq!(a.saving, 0.0);
        assert_eq!(advice.together, 0.0);
        assert!(advice.jobs.iter().all(|j| j.job != "APPL_START"), "virtual jobs stay");
    }

    #[test]
    fn a_tie_stays_where_it_is() {
        let jobs = vec![job("A", &[], "b1", &["b1", "b3"])];
        let model = Model::new(Overlay::new([("b1", "b2"), ("b2", "b3")]), "b2", jobs, SIZES, Vec::new());
        let advice = model.advise();
        assert_eq!(advice.jobs[0].best, "b1", "b1 and b3 are both one link from the home");
        assert_eq!(advice.jobs[0].saving, 0.0);
    }

    #[test]
    fn a_pool_job_listens_at_the_home_and_is_dispatched_to_its_member() {
        // P runs in a pool whose members are at b1 and b3; the home is at b3.
        let mut p = job("P", &["APPL_START"], "b1", &["b1", "b3"]);
        p.pool = true;
        p.dispatches = 1.0;
        let jobs = vec![
            job("APPL_START", &[], "b3", &[]),
            p,
            job("Q", &["P"], "b3", &["b1", "b3"]),
            job("APPL_END", &["Q"], "b3", &[]),
        ];
        let model = Model::new(chain(), "b3", jobs, SIZES, Vec::new());
        let advice = model.advise();
        // At b1: the dispatch out and the started and end statuses back, 2 links each.
        assert_eq!(advice.now, 600.0);
        let p = advice.jobs.iter().find(|j| j.job == "P").expect("P");
        assert_eq!((p.best.as_str(), p.saving), ("b3", 600.0));
        // Q listens where it runs: at b1 it would draw the trigger (2 * 50) and APPL_END's
        // status (2 * 100) over both links and send its own end back to APPL_END (2 * 100),
        // and P's status still goes to the home at b3.
        let q = advice.jobs.iter().find(|j| j.job == "Q").expect("Q");
        assert_eq!(q.costs["b1"], 600.0 + 100.0 + 200.0 + 200.0);
    }

    #[test]
    fn measured_rates_weigh_the_flows_and_failures_reach_only_their_handlers() {
        let mut b = job("B", &["A"], "b1", &["b1", "b3"]);
        b.failures = 2.0; // B fails twice a generation before it succeeds
        let end = job("APPL_END", &[], "b3", &[]);
        let jobs = vec![job("A", &[], "b3", &["b3"]), b, end.clone()];
        let model = Model::new(chain(), "b3", jobs, SIZES, Vec::new());
        // To b1: trigger 2*50, APPL_END 2*100, A's end 2*100; B's output goes nowhere.
        assert_eq!(model.advise().now, 500.0);
        // C waits for B's success: B's failures stay at b1, its success crosses.
        let c = job("C", &["B"], "b3", &["b3"]);
        let jobs = vec![job("A", &[], "b3", &["b3"]), model.jobs()[1].clone(), c.clone(), end.clone()];
        let model = Model::new(chain(), "b3", jobs.clone(), SIZES, Vec::new());
        assert_eq!(model.advise().now, 500.0 + 2.0 * 100.0);
        // A handler of B's failure at b3 takes them too.
        let mut handler = job("H", &["B"], "b3", &["b3"]);
        handler.after_failures = vec!["B".to_owned()];
        let mut with_handler = jobs;
        with_handler.insert(3, handler);
        let model = Model::new(chain(), "b3", with_handler, SIZES, Vec::new());
        assert_eq!(model.advise().now, 500.0 + 2.0 * 100.0 + 2.0 * 2.0 * 100.0);
    }

    #[test]
    fn history_stores_subscribe_to_every_status() {
        // X alone, the home at b2, a store keeping statuses (not triggers) at b1.
        let jobs = vec![job("X", &[], "b3", &["b1", "b3"])];
        let store = Store { broker: "b1".to_owned(), statuses: true, triggers: false };
        let model = Model::new(chain(), "b2", jobs.clone(), SIZES, vec![store]);
        let advice = model.advise();
        // At b3: the trigger over one link, started and end statuses over two to the store.
        assert_eq!(advice.now, 50.0 + 2.0 * 2.0 * 100.0);
        assert_eq!((advice.jobs[0].best.as_str(), advice.jobs[0].saving), ("b1", 400.0));
        // A store at every broker takes every status over every link, wherever X runs.
        let everywhere = ["b1", "b2", "b3"]
            .map(|b| Store { broker: b.to_owned(), statuses: true, triggers: true })
            .to_vec();
        let advice = Model::new(chain(), "b2", jobs, SIZES, everywhere).advise();
        assert_eq!(advice.now, 2.0 * 50.0 + 2.0 * 2.0 * 100.0);
        assert_eq!(advice.jobs[0].saving, 0.0);
    }
}
