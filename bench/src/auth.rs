//! The cost of permissions (`padres_broker::auth`): one broker's router routing
//! publications from 1,000 publishing principals, each restricted by 10 advertise rules,
//! against the same router with every principal unrestricted. Advertisements and
//! subscriptions are checked once each; each client publication is checked too (an
//! advertised attribute may be left out of a publication, so conformance alone does not
//! hold it to the permit), beside the advertisement it conforms to: this is where a
//! permission costs on the routing path. (The subscriber is unrestricted; each principal also holds 10
//! subscribe rules, which publications do not touch.)

use std::sync::Arc;
use std::time::Instant;

use padres_broker::auth::{AuthConfig, PermitConfig, Rights};
use padres_broker::router::{Input, Router};
use padres_lang::{Message, Name, Publication};

const PRINCIPALS: usize = 1_000;
const RULES: usize = 10;

/// Runs the comparison, `runs` times each way (alternating), and prints medians and the
/// ratio.
pub(crate) fn run(quick: bool, runs: usize) {
    let publications = if quick { 100_000 } else { 1_000_000 };
    println!(
        "permissions: {PRINCIPALS} principals, {RULES} advertise rules each, 1,000 subscriptions; \
         {publications} publications routed by one router, {runs} runs each way (alternating)"
    );
    let permits: Vec<PermitConfig> = (0..PRINCIPALS)
        .map(|p| PermitConfig {
            to: vec![principal(p)],
            advertise: (0..RULES).map(|k| format!("[class,eq,'c{k}'],[owner,eq,'${{principal}}']")).collect(),
            subscribe: (0..RULES).map(|k| format!("[class,eq,'c{k}']")).collect(),
            ..PermitConfig::default()
        })
        .collect();
    let auth = AuthConfig { permit: permits, ..AuthConfig::default() }.compile().expect("valid permits");
    let restricted: Vec<Arc<Rights>> =
        (0..PRINCIPALS).map(|p| Arc::new(auth.rights_of(principal(p)))).collect();
    let open: Vec<Arc<Rights>> =
        (0..PRINCIPALS).map(|p| Arc::new(Rights::unrestricted(&principal(p)))).collect();
    let stream: Vec<(u64, Publication)> = (0..publications)
        .map(|n| {
            let p = n % PRINCIPALS;
            // The rule that allows it is a different one each time (1st to 10th).
            let k = (n / PRINCIPALS) % RULES;
            let text = format!("[class,'c{k}'],[owner,'{}'],[n,{}]", principal(p), n % 1000);
            (p as u64 + 1, text.parse().expect("a publication"))
        })
        .collect();
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..runs {
        with.push(route(&restricted, &stream));
        without.push(route(&open, &stream));
    }
    let (with, without) = (median(&mut with), median(&mut without));
    println!("  unrestricted (baseline)   {without:>10.0} publications/s");
    println!("  10 rules per principal    {with:>10.0} publications/s");
    println!("  ratio                     {:>10.3} (1.000: no cost; target at least 0.900)", with / without);
}

fn principal(p: usize) -> String {
    format!("p{p}")
}

/// Publications per second through a router whose clients 1..=1,000 have `rights`, each
/// advertising its 10 classes, with one unrestricted subscriber holding 1,000
/// subscriptions.
fn route(rights: &[Arc<Rights>], stream: &[(u64, Publication)]) -> f64 {
    let mut router = Router::new(Name::new("B1").expect("name"));
    let mut out = Vec::new();
    for (i, rights) in rights.iter().enumerate() {
        let client = i as u64 + 1;
        router.handle(0, Input::ClientRights { client, rights: rights.clone() }, &mut out);
        for k in 0..RULES {
            let adv = format!("a [class,eq,'c{k}'],[owner,eq,'{}'],[n,isPresent,0]", rights.principal);
            let message: Message = adv.parse().expect("an advertisement");
            router.handle(0, Input::Client { client, req: Some(1), message }, &mut out);
        }
    }
    let subscriber = 1_000_000;
    for s in 0..1_000 {
        let sub = format!("s [class,eq,'c{}'],[n,=,{}]", s % RULES, s);
        let message: Message = sub.parse().expect("a subscription");
        router.handle(0, Input::Client { client: subscriber, req: Some(1), message }, &mut out);
    }
    let refused =
        out.iter().any(|o| matches!(o, padres_broker::router::Output::Reply { result: Err(_), .. }));
    assert!(!refused, "every advertisement and subscription is allowed");
    out.clear();
    let start = Instant::now();
    for (n, (client, publication)) in stream.iter().enumerate() {
        let message = Message::Publish(publication.clone());
        router.handle(n as u64, Input::Client { client: *client, req: None, message }, &mut out);
        assert!(
            !matches!(out.first(), Some(padres_broker::router::Output::Reply { result: Err(_), .. })),
            "every publication is allowed"
        );
        out.clear();
    }
    stream.len() as f64 / start.elapsed().as_secs_f64()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
