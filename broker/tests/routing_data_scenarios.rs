//! PADRES-suite scenarios declared as data (topology, clients, steps, expectations) and
//! run in the deterministic simulator.

mod sim;

use padres_broker::router::{Covering, Options};
use padres_lang::wire::ErrorCode;
use sim::scenario::{Scenario, Step::*};

const P: u64 = 1;
const S: u64 = 2;
const S2: u64 = 3;

const TREE: Options = Options::DEFAULT;
const ACTIVE: Options = Options { covering: Covering::Active, ..Options::DEFAULT };
const CYCLES: Options = Options { cycles: true, ..Options::DEFAULT };

const TWO_BROKERS: &[(usize, usize, u64)] = &[(0, 1, 5)];
const STAR: &[(usize, usize, u64)] = &[(0, 1, 3), (0, 2, 3), (0, 3, 3), (0, 4, 3)];

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "two brokers: a subscription crosses when it overlaps",
        brokers: 2,
        links: TWO_BROKERS,
        options: TREE,
        clients: &[(P, 0), (S, 1)],
        steps: &[
            Ok(P, "a [class,eq,'stock'],[price,>,80]"),
            Ok(S, "s [class,eq,'stock'],[price,=,100]"),
            Prt(0, "[class,eq,'stock'],[price,=,100]", true),
            Ok(P, "a [class,eq,'bond'],[price,>,100]"),
            Ok(S, "s [class,eq,'bond'],[price,<,50]"),
            Prt(0, "[class,eq,'bond'],[price,<,50]", false),
            Publish(P, "p [class,'stock'],[price,100]", &[S]),
            Publish(P, "p [class,'stock'],[price,90]", &[]),
        ],
    },
    Scenario {
        name: "two brokers: held subscriptions, early publications, one copy",
        brokers: 2,
        links: TWO_BROKERS,
        options: TREE,
        clients: &[(P, 0), (S, 1)],
        steps: &[
            Ok(S, "s [class,eq,'stock'],[price,>,10]"),
            Prt(0, "[class,eq,'stock'],[price,>,10]", false),
            Issue("a", P, "a [class,eq,'stock'],[price,isPresent,0]"),
            Prt(0, "[class,eq,'stock'],[price,>,10]", true),
            Ok(S, "s [class,eq,'stock'],[price,<,50]"),
            Publish(P, "p [class,'stock'],[price,20]", &[S]),
            Fails(P, "p [class,'bond'],[price,20]", ErrorCode::NotAdvertised),
            Fails(S, "unsub B1/99", ErrorCode::UnknownId),
            Ok(P, "unadv {a}"),
            Srt(1, "[class,eq,'stock'],[price,isPresent,0]", false),
            Fails(P, "p [class,'stock'],[price,20]", ErrorCode::NotAdvertised),
        ],
    },
    Scenario {
        name: "star: unsubscribe, unadvertise and disconnect clean every broker",
        brokers: 5,
        links: STAR,
        options: TREE,
        clients: &[(P, 1), (S, 4), (S2, 2)],
        steps: &[
            Issue("a", P, "a [class,eq,'stock'],[price,isPresent,0]"),
            Issue("s", S, "s [class,eq,'stock'],[price,>,10]"),
            Prt(0, "[class,eq,'stock'],[price,>,10]", true),
            Prt(1, "[class,eq,'stock'],[price,>,10]", true),
            Prt(2, "[class,eq,'stock'],[price,>,10]", false),
            Ok(S2, "s [class,eq,'stock']"),
            Publish(P, "p [class,'stock'],[price,20]", &[S, S2]),
            Ok(S, "unsub {s}"),
            Prt(0, "[class,eq,'stock'],[price,>,10]", false),
            Prt(1, "[class,eq,'stock'],[price,>,10]", false),
            Prt(4, "[class,eq,'stock'],[price,>,10]", false),
            Disconnect(S2),
            Prt(0, "[class,eq,'stock']", false),
            Prt(1, "[class,eq,'stock']", false),
            Ok(P, "unadv {a}"),
            Srt(0, "[class,eq,'stock'],[price,isPresent,0]", false),
            Srt(3, "[class,eq,'stock'],[price,isPresent,0]", false),
        ],
    },
    Scenario {
        name: "star with active covering: >150 stays at B1 while >100 covers it",
        brokers: 5,
        links: STAR,
        options: ACTIVE,
        clients: &[(P, 1), (S, 2), (S2, 3)],
        steps: &[
            Ok(P, "a [class,eq,'stock'],[price,isPresent,0]"),
            Issue("wide", S, "s [class,eq,'stock'],[price,>,100]"),
            Ok(S2, "s [class,eq,'stock'],[price,>,150]"),
            Prt(0, "[class,eq,'stock'],[price,>,150]", true),
            Prt(1, "[class,eq,'stock'],[price,>,150]", false),
            Publish(P, "p [class,'stock'],[price,200]", &[S, S2]),
            Ok(S, "unsub {wide}"),
            Prt(1, "[class,eq,'stock'],[price,>,150]", true),
            Publish(P, "p [class,'stock'],[price,300]", &[S2]),
        ],
    },
    Scenario {
        name: "chain: a middle broker restarts, a link fails and returns",
        brokers: 3,
        links: &[(0, 1, 2), (1, 2, 2)],
        options: TREE,
        clients: &[(P, 0), (S, 2)],
        steps: &[
            Ok(P, "a [class,eq,'stock'],[price,isPresent,0]"),
            Ok(S, "s [class,eq,'stock']"),
            Restart(1),
            Publish(P, "p [class,'stock'],[price,1]", &[S]),
            Unlink(1, 2),
            Publish(P, "p [class,'stock'],[price,2]", &[]),
            Link(1, 2),
            Publish(P, "p [class,'stock'],[price,3]", &[S]),
        ],
    },
    Scenario {
        name: "ring with cycles: each publication once",
        brokers: 5,
        links: &[(0, 1, 1), (1, 2, 2), (2, 3, 3), (3, 0, 4), (4, 0, 1)],
        options: CYCLES,
        clients: &[(P, 2), (S, 4), (S2, 0)],
        steps: &[
            Ok(P, "a [class,eq,'stock'],[price,isPresent,0]"),
            Ok(S, "s [class,eq,'stock'],[price,>,10]"),
            Ok(S2, "s [class,eq,'stock']"),
            Publish(P, "p [class,'stock'],[price,50]", &[S, S2]),
            Publish(P, "p [class,'stock'],[price,5]", &[S2]),
            Disconnect(S2),
            Publish(P, "p [class,'stock'],[price,50]", &[S]),
        ],
    },
];

#[test]
fn scenarios_declared_as_data() {
    for scenario in SCENARIOS {
        scenario.run();
    }
}
