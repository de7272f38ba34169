//! Scenarios as data: a topology, clients, and steps with their expected outcomes.
//!
//! Steps refer to ids returned earlier by label: `Issue("s1", …)` records the id of an
//! advertisement or subscription, and `{s1}` in a later step's text is replaced by it.

use std::collections::HashMap;

use padres_broker::router::{ClientId, Options};
use padres_lang::wire::ErrorCode;

use super::Sim;

/// One step and what it must produce.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// A request that must succeed; its id (if any) is kept under the label.
    Issue(&'static str, ClientId, &'static str),
    /// A request that must succeed.
    Ok(ClientId, &'static str),
    /// A request that must fail with this code.
    Fails(ClientId, &'static str, ErrorCode),
    /// A publication that must reach exactly these clients, once each.
    Publish(ClientId, &'static str, &'static [ClientId]),
    /// A client goes away.
    Disconnect(ClientId),
    /// A link fails, or comes (back) up with latency 2.
    Unlink(usize, usize),
    Link(usize, usize),
    /// A broker restarts with empty tables.
    Restart(usize),
    /// Broker `b`'s PRT holds (or not) a subscription with this text.
    Prt(usize, &'static str, bool),
    /// Broker `b`'s SRT holds (or not) an advertisement with this text.
    Srt(usize, &'static str, bool),
}

/// A topology, its clients and the steps to run on it.
#[derive(Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub brokers: usize,
    /// Links as `(broker, broker, latency)`, brokers counted from 0 (B1).
    pub links: &'static [(usize, usize, u64)],
    pub options: Options,
    pub clients: &'static [(ClientId, usize)],
    pub steps: &'static [Step],
}

impl Scenario {
    /// Runs every step, panicking with the scenario's name and the step on a mismatch.
    pub fn run(&self) {
        let mut sim = Sim::with_options(self.brokers, self.options);
        for &(a, b, latency) in self.links {
            sim.link(a, b, latency);
        }
        for &(client, broker) in self.clients {
            sim.attach(client, broker);
        }
        sim.run();
        let mut ids: HashMap<&str, String> = HashMap::new();
        let fill = |text: &str, ids: &HashMap<&str, String>| {
            ids.iter().fold(text.to_owned(), |t, (label, id)| t.replace(&format!("{{{label}}}"), id))
        };
        for (i, step) in self.steps.iter().enumerate() {
            let at = format!("{} step {i} {step:?}", self.name);
            match *step {
                Step::Issue(label, client, text) => match sim.call(client, &fill(text, &ids)) {
                    Ok(Some(id)) => {
                        ids.insert(label, id.to_string());
                    }
                    other => panic!("{at}: {other:?}"),
                },
                Step::Ok(client, text) => {
                    let reply = sim.call(client, &fill(text, &ids));
                    assert!(reply.is_ok(), "{at}: {reply:?}");
                }
                Step::Fails(client, text, code) => {
                    let reply = sim.call(client, &fill(text, &ids));
                    assert!(matches!(&reply, Err((c, _)) if *c == code), "{at}: {reply:?}");
                }
                Step::Publish(client, text, expected) => {
                    let before = sim.deliveries.len();
                    assert_eq!(sim.call(client, &fill(text, &ids)), Ok(None), "{at}");
                    let mut got: Vec<ClientId> = sim.deliveries[before..].iter().map(|d| d.client).collect();
                    got.sort_unstable();
                    let mut want = expected.to_vec();
                    want.sort_unstable();
                    assert_eq!(got, want, "{at}");
                }
                Step::Disconnect(client) => {
                    sim.disconnect(client);
                    sim.run();
                }
                Step::Unlink(a, b) => {
                    sim.unlink(a, b);
                    sim.run();
                }
                Step::Link(a, b) => {
                    sim.link(a, b, 2);
                    sim.run();
                }
                Step::Restart(b) => {
                    sim.restart(b);
                    sim.run();
                }
                Step::Prt(b, text, present) => {
                    let has = sim.routes(b).prt.iter().any(|(_, t, _, _)| t == text);
                    assert_eq!(has, present, "{at}: {:?}", sim.routes(b));
                }
                Step::Srt(b, text, present) => {
                    let has = sim.routes(b).srt.iter().any(|(_, t, _)| t == text);
                    assert_eq!(has, present, "{at}: {:?}", sim.routes(b));
                }
            }
        }
    }
}
