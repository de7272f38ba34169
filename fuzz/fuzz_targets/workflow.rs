//! Any text as a workflow definition: no panic; what parses translates (or says why not),
//! and every envelope it makes is a valid publication whose body reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use padres_workflow::{EnvelopeBody, parse_application, translate};

fuzz_target!(|text: &str| {
    let Ok(app) = parse_application(text) else { return };
    let Ok(deployment) = translate(&app) else { return };
    for envelope in &deployment.envelopes {
        if let Ok(publication) = envelope.publication(&deployment.appl) {
            let body = publication.get("body").and_then(|v| v.as_str()).expect("a body");
            EnvelopeBody::from_json(body).expect("the body reads back");
        }
    }
});
