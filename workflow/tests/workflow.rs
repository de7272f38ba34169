//! Workflow definitions: the payroll example, run terms on real dates, and every
//! validation error with its message and position.

use std::collections::HashMap;

use chrono::NaiveDate;
use padres_lang::semantics::composite::satisfied;
use padres_lang::{Message, Publication};
use padres_workflow::translate::deployment_messages;
use padres_workflow::{
    APPL_END, APPL_START, Application, Dependency, EnvelopeBody, RunTerm, StatusCondition, parse_application,
    translate,
};

use padres_workflow::examples::{MONTH_END, PAYROLL};

fn payroll() -> Application {
    parse_application(PAYROLL).unwrap_or_else(|e| panic!("payroll.xml is valid:\n{e}"))
}

fn date(text: &str) -> NaiveDate {
    text.parse().expect("a date")
}

/// The jobs of `app` that run in the generation dated `day`.
fn running(app: &Application, day: &str) -> Vec<String> {
    app.jobs.iter().filter(|j| j.schedule.runs_on(date(day), &app.calendar)).map(|j| j.name.clone()).collect()
}

#[test]
fn payroll_reads_as_the_paper_draws_it() {
    let app = payroll();
    assert_eq!(app.name, "payroll");
    assert_eq!(app.max_generations, 3);
    assert_eq!(app.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), ["A", "B", "C", "D"]);
    let d = app.job("D").expect("D");
    assert_eq!(d.predecessors(), ["B", "C"]);
    assert_eq!(d.timeout.map(|t| t.as_secs()), Some(7200));
    assert_eq!(d.retries, 0, "the job's own retries win over the defaults");
    assert_eq!(app.job("B").expect("B").retries, 1, "defaults apply");
    assert_eq!(app.job("A").expect("A").args, ["--date", "${gen.date}"]);
    assert_eq!(app.job("C").expect("C").schedule.run, "friday".parse::<RunTerm>().expect("term"));
    assert!(
        app.job("B")
            .expect("B")
            .after
            .iter()
            .all(|dep| matches!(dep, Dependency::After { status: StatusCondition::Ok, .. }))
    );
}

#[test]
fn which_payroll_jobs_run_depends_on_the_generation_date() {
    let app = payroll();
    // 2026-11-20 is a Friday, 2026-11-18 a Wednesday, 2026-11-21 a Saturday.
    assert_eq!(running(&app, "2026-11-20"), ["A", "B", "C", "D"]);
    assert_eq!(running(&app, "2026-11-18"), ["A", "B", "D"], "C is skipped on a Wednesday");
    assert_eq!(running(&app, "2026-11-21"), ["A", "B"]);
    // Christmas 2026 is a Friday and a holiday: C (previous-workday) moves to Thursday;
    // D (workdays, skip) does not run on the holiday.
    assert_eq!(running(&app, "2026-12-25"), ["A", "B"]);
    assert_eq!(running(&app, "2026-12-24"), ["A", "B", "C", "D"]);
}

/// The single error of `xml`, as "line:column message".
fn error(xml: &str) -> String {
    let errors = parse_application(xml).expect_err("invalid").0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    format!("{}:{} {}", errors[0].at.line, errors[0].at.column, errors[0].message)
}

fn app(jobs: &str) -> String {
    format!("<application name=\"t\">\n{jobs}\n</application>")
}

#[test]
fn every_problem_is_named_with_its_position() {
    let job = |name: &str, body: &str| {
        format!("<job name=\"{name}\" agent=\"a1\"><command>x</command>{body}</job>")
    };
    let pooled = "<job name=\"B\" pool=\"p\"><command>x</command></job>";
    let cases: Vec<(String, &str)> = vec![
        (app(&job("A", "<after job=\"Z\"/>")), "2:46 job 'A' depends on 'Z', which is not defined"),
        (
            app(&format!("{}\n{}", job("A", ""), job("A", ""))),
            "3:1 duplicate job 'A' (first defined at line 2)",
        ),
        (
            app(&format!("{}\n{}", job("A", "<after job=\"B\"/>"), job("B", "<after job=\"A\"/>"))),
            "2:1 dependency cycle: A -> B -> A",
        ),
        (app(&job("A", "<after job=\"A\"/>")), "2:46 job 'A' depends on itself"),
        (
            app("<job name=\"A\" agent=\"a1\" run=\"sometimes\"><command>x</command></job>"),
            "2:1 run: bad run term 'sometimes'",
        ),
        (
            app("<job name=\"A\" agent=\"a1\" run=\"cron:61 * * * *\"><command>x</command></job>"),
            "2:1 run: bad cron expression",
        ),
        (
            app("<job name=\"A\" agent=\"a1\" timeout=\"2 hours\"><command>x</command></job>"),
            "2:1 timeout: bad duration '2 hours'",
        ),
        (app("<job name=\"A\" agent=\"a1\"></job>"), "2:1 job 'A' has no <command>"),
        (app("<job name=\"A\"><command>x</command></job>"), "2:1 job 'A' has no agent"),
        (
            app("<job name=\"A\" agent=\"a1\" pool=\"p\"><command>x</command></job>"),
            "2:1 job 'A': give agent",
        ),
        (
            app(&job("A", "<after job=\"B\" status=\"done\"/>")),
            "2:46 status: 'done' is not one of ok, success, failed, any",
        ),
        (app(&job("A", "<before job=\"B\"/>")), "2:46 unknown element <before> in <job>"),
        (
            app("<job name=\"A\" agnet=\"a1\" agent=\"a1\"><command>x</command></job>"),
            "2:1 unknown attribute 'agnet' on <job>",
        ),
        (
            app("<job name=\"A\" agent=\"a1\" holiday=\"later\"><command>x</command></job>"),
            "2:1 holiday: bad holiday rule 'later'",
        ),
        (app("<trigger cron=\"every day\"/>"), "2:1 cron: bad cron expression 'every day'"),
        (app("<trigger event=\"[price,>,1]\"/>"), "2:1 event: bad subscription"),
        (
            "<!DOCTYPE application [<!ENTITY x \"y\">]><application name=\"t\"/>".to_owned(),
            "1:1 DTDs (and so entities) are not allowed",
        ),
        ("<application name=\"t\">\n  <job></jbo>\n</application>".to_owned(), "2:8 not well-formed XML"),
        ("<workflow/>".to_owned(), "1:1 the document must be an <application>"),
        (app(""), "1:1 the application has no jobs"),
        (
            app("<job name=\"A\" pool=\"p\"><command>x</command></job>"),
            "1:1 the first job, 'A', runs in pool 'p': name the agent that starts and ends the generations",
        ),
        (
            app(&format!("<pool name=\"p\" policy=\"random\"/>{}{pooled}", job("A", ""))),
            "2:1 policy: unknown placement policy 'random' (known: round-robin, least-loaded, lowest-delay)",
        ),
        (
            app(&format!("<pool name=\"q\"/>{}", job("A", ""))),
            "2:1 <pool name=\"q\"> describes a pool no job runs in",
        ),
        (
            app(&format!("<pool name=\"p\" redispatch=\"-1\"/>{}{pooled}", job("A", ""))),
            "2:1 redispatch: '-1' is not a whole number",
        ),
    ];
    for (xml, expected) in cases {
        let got = error(&xml);
        assert!(got.starts_with(expected), "expected {expected:?}\n     got {got:?}\n  for {xml}");
    }
}

#[test]
fn graph_problems_are_reported_with_the_others() {
    // B has no agent; C depends on B (defined, so not unknown) and on Z (unknown).
    let xml = app(
        "<job name=\"B\"><command>x</command></job>\n<job name=\"C\" agent=\"a1\"><command>x</command><after job=\"B\"/><after job=\"Z\"/></job>",
    );
    let errors = parse_application(&xml).expect_err("invalid").0;
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(messages[0].starts_with("job 'B' has no agent"), "{messages:?}");
    assert_eq!(messages[1], "job 'C' depends on 'Z', which is not defined");
    assert!(
        error(
            &app("<job name=\"A\" agent=\"a\"><command>x</command></job>")
                .replace("name=\"t\"", "name=\"t\" max-generations=\"0\"")
        )
        .contains("max-generations: must be at least 1")
    );
}

#[test]
fn all_problems_are_reported_at_once() {
    let xml = app(
        "<job name=\"A\" agent=\"a1\" run=\"sometimes\"><command>x</command></job>\n<job name=\"B\"><command>x</command></job>",
    );
    let errors = parse_application(&xml).expect_err("invalid").0;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!((errors[0].at.line, errors[1].at.line), (2, 3));
}

#[test]
fn size_limits_hold() {
    let huge = format!("<application name=\"t\">{}</application>", "<!-- padding -->".repeat(300_000));
    assert!(error(&huge).contains("bytes; at most"));
    let many = format!("<application name=\"t\">{}</application>", "<x/>".repeat(250_000));
    assert!(error(&many).contains("XML nodes"), "{}", error(&many));
}

fn status_publication(appl: &str, gid: &str, job: &str, agent: &str, status: &str) -> Publication {
    format!("[class,'job_status'],[appl,'{appl}'],[gid,'{gid}'],[job,'{job}'],[agent,'{agent}'],[status,'{status}'],[exit,0],[attempt,1]")
        .parse()
        .expect("a job_status publication")
}

/// Whether `dep` holds given the final statuses of one generation's jobs so far.
fn holds(dep: &Dependency, done: &HashMap<String, String>) -> bool {
    match dep {
        Dependency::After { job, status, .. } => {
            done.get(job).is_some_and(|s| status.statuses().contains(&s.as_str()))
        }
        Dependency::AnyOf(deps) => deps.iter().any(|d| holds(d, done)),
    }
}

/// Runs one generation of `app` dated `day` the way agents will: each job whose
/// translated dependency subscription is satisfied by the publications so far publishes
/// its status (succeeded if it runs that day, skipped otherwise; virtual jobs succeed).
/// After every publication, checks that each waiting job's subscription is satisfied
/// exactly when its predecessors are done. Returns the jobs in the order they finished,
/// with their statuses. A finished generation of another id is in the history from the
/// start, and so is every job's success in this generation published by an agent that
/// does not run it (but for pool jobs): neither must ever satisfy anything; nor must an
/// `APPL_END` from another agent once the generation has begun end its matches.
fn run_generation(app: &Application, day: &str) -> Vec<(String, String)> {
    let deployment = translate(app).expect("translates");
    let appl = app.name.as_str();
    let runner = |job: &str| {
        deployment.jobs.iter().find(|j| j.job == job).map(|j| j.agent.clone()).expect("a deployed job")
    };
    let mut history: Vec<Publication> = deployment
        .jobs
        .iter()
        .flat_map(|j| {
            let old = status_publication(appl, "old", &j.job, &j.agent, "succeeded");
            // A pool job is run by whichever member it is dispatched to: any agent's
            // statuses of it count.
            let intruder =
                j.pool.is_none().then(|| status_publication(appl, "g1", &j.job, "intruder", "succeeded"));
            std::iter::once(old).chain(intruder)
        })
        .collect();
    history.push(
        padres_workflow::control::trigger_publication(appl, &deployment.version, "g1", day)
            .expect("a trigger"),
    );
    let mut done: HashMap<String, String> = HashMap::new();
    let mut order = Vec::new();
    loop {
        // Every waiting job: its subscription holds exactly when its predecessors are done.
        let mut ready = None;
        for job in deployment.jobs.iter().filter(|j| !done.contains_key(&j.job)) {
            let subscribed = satisfied(&job.dependency, &history);
            let deps: Vec<Dependency> = match app.job(&job.job) {
                Some(real) if !real.after.is_empty() => real.after.clone(),
                _ => job
                    .predecessors
                    .iter()
                    .map(|p| Dependency::After {
                        job: p.clone(),
                        status: Default::default(),
                        at: Default::default(),
                    })
                    .collect(),
            };
            let expected = deps.iter().all(|d| holds(d, &done));
            assert_eq!(
                subscribed, expected,
                "{}: subscription satisfied {subscribed}, predecessors done {expected}",
                job.job
            );
            if subscribed && ready.is_none() {
                ready = Some(job.job.clone());
            }
        }
        let Some(job) = ready else { break };
        let status = match app.job(&job) {
            Some(real) if !real.schedule.runs_on(date(day), &app.calendar) => "skipped",
            _ => "succeeded",
        };
        history.push(status_publication(appl, "g1", &job, &runner(&job), status));
        done.insert(job.clone(), status.to_owned());
        order.push((job, status.to_owned()));
        if order.len() == 1 {
            // Another agent's APPL_END, mid-generation: it ends nothing (the home's does).
            history.push(status_publication(appl, "g1", APPL_END, "intruder", "succeeded"));
        }
    }
    assert_eq!(done.len(), deployment.jobs.len(), "every job finished; the generation ended");
    order
}

fn position(order: &[(String, String)], job: &str) -> usize {
    order.iter().position(|(j, _)| j == job).unwrap_or_else(|| panic!("{job} never finished"))
}

#[test]
fn payroll_generations_follow_the_paper() {
    let app = payroll();
    // Friday: C runs; D waits for both B and C.
    let friday = run_generation(&app, "2026-11-20");
    assert_eq!(friday.first().map(|(j, _)| j.as_str()), Some(APPL_START));
    assert_eq!(friday.last().map(|(j, _)| j.as_str()), Some(APPL_END));
    assert!(friday.iter().all(|(_, s)| s == "succeeded"), "{friday:?}");
    assert!(
        position(&friday, "D") > position(&friday, "B") && position(&friday, "D") > position(&friday, "C")
    );
    // Wednesday: C is skipped (after A), and D runs after B and C's skip.
    let wednesday = run_generation(&app, "2026-11-18");
    assert!(wednesday.contains(&("C".to_owned(), "skipped".to_owned())), "{wednesday:?}");
    assert!(wednesday.contains(&("D".to_owned(), "succeeded".to_owned())));
    assert!(position(&wednesday, "C") > position(&wednesday, "A"));
    assert!(position(&wednesday, "D") > position(&wednesday, "C"));
    // Christmas Friday: C moved to Thursday the 24th; on the 25th it and D are skipped.
    let christmas = run_generation(&app, "2026-12-25");
    assert!(christmas.contains(&("C".to_owned(), "skipped".to_owned())));
    assert!(christmas.contains(&("D".to_owned(), "skipped".to_owned())));
    let eve = run_generation(&app, "2026-12-24");
    assert!(eve.contains(&("C".to_owned(), "succeeded".to_owned())), "C moved to the previous workday");
}

#[test]
fn the_large_example_runs_to_its_end_on_any_day() {
    let app = parse_application(MONTH_END).unwrap_or_else(|e| panic!("month-end.xml:\n{e}"));
    assert!(app.jobs.len() >= 40);
    // A Monday, a Saturday, and the last workday of November 2026 (Monday the 30th).
    for day in ["2026-11-16", "2026-11-21", "2026-11-30"] {
        let order = run_generation(&app, day);
        let ran = |job: &str| order.contains(&(job.to_owned(), "succeeded".to_owned()));
        assert_eq!(ran("close_books"), day == "2026-11-30", "{day}");
        assert_eq!(ran("backup_warehouse"), day == "2026-11-21", "{day}");
        assert!(position(&order, "load_warehouse") > position(&order, "validate_fx_rates"));
    }
}

#[test]
fn deployment_needs_fewer_messages_with_composite_subscriptions() {
    for (name, xml) in [("payroll", PAYROLL), ("month-end", MONTH_END)] {
        let app = parse_application(xml).expect("valid");
        let deployment = translate(&app).expect("translates");
        let (composite, primitive) = deployment_messages(&deployment);
        let saved = 100.0 * (1.0 - composite as f64 / primitive as f64);
        println!(
            "{name}: {composite} messages with composite subscriptions, {primitive} with primitive ones ({saved:.0}% fewer)"
        );
        assert!(composite < primitive);
    }
}

#[test]
fn envelopes_carry_everything_an_agent_needs() {
    let app = payroll();
    let deployment = translate(&app).expect("translates");
    let agents: Vec<&str> = deployment.envelopes.iter().map(|e| e.agent.as_str()).collect();
    assert_eq!(agents, ["agent-1", "agent-2", "agent-3"]);
    let agent_1 = &deployment.envelopes[0];
    let publication = agent_1.publication("payroll").expect("an agent_ctl publication");
    assert_eq!(publication.class(), "agent_ctl");
    assert_eq!(publication.get("agent").and_then(|v| v.as_str()), Some("agent-1"));
    let body = EnvelopeBody::from_json(publication.get("body").and_then(|v| v.as_str()).expect("a body"))
        .expect("the body reads back");
    assert_eq!((body.workdays.as_str(), body.holidays.len()), ("mon,tue,wed,thu,fri", 2));
    let jobs: Vec<&str> = body.jobs.iter().map(|j| j.job.as_str()).collect();
    assert_eq!(jobs, [APPL_START, "A", "D", APPL_END], "agent-1 runs A and D, and the virtual jobs");
    for job in &body.jobs {
        let deployed = deployment.jobs.iter().find(|j| j.job == job.job).expect("deployed");
        assert_eq!(
            job.subscription.parse::<Message>(),
            Ok(Message::CompositeSubscribe(deployed.dependency.clone()))
        );
        assert_eq!(
            job.advertisement.parse::<Message>(),
            Ok(Message::Advertise(deployed.advertisement.clone()))
        );
    }
    let d = body.jobs.iter().find(|j| j.job == "D").and_then(|j| j.info.clone()).expect("D's information");
    assert_eq!(
        (d.run.as_str(), d.command.as_str(), d.timeout_ms, d.retries),
        ("workdays", "./post.sh", Some(7_200_000), 0)
    );
    assert_eq!(d.args, ["${gen.date}"]);
    assert!(body.jobs[0].info.is_none(), "virtual jobs run no command");
}

#[test]
fn the_home_agent_alone_carries_the_triggers_and_an_unknown_zone_is_refused() {
    let deployment = translate(&payroll()).expect("translates");
    for envelope in &deployment.envelopes {
        let body = envelope.envelope_body("payroll");
        let home = body.jobs.iter().any(|j| j.job == APPL_START);
        let expected =
            if home { vec![padres_workflow::TriggerSpec::Cron("0 18 * * *".to_owned())] } else { vec![] };
        assert_eq!(body.triggers, expected, "{}", envelope.agent);
        assert_eq!(body.max_generations, 3);
    }
    let bad = PAYROLL.replace("tz=\"UTC\"", "tz=\"Mars/Olympus\"");
    let errors = parse_application(&bad).expect_err("an unknown zone").to_string();
    assert!(errors.contains("unknown time zone 'Mars/Olympus'"), "{errors}");
}

#[test]
fn pool_jobs_are_deployed_to_the_home_agent_with_their_placement() {
    let xml = "<application name=\"p\" home=\"h\">\
        <pool name=\"w\" policy=\"lowest-delay\" redispatch=\"2\"/>\
        <job name=\"A\" pool=\"w\"><command>x</command></job>\
        <job name=\"B\" pool=\"v\"><command>x</command><after job=\"A\"/></job>\
        <job name=\"C\" agent=\"a\"><command>x</command><after job=\"B\"/></job></application>";
    let app = parse_application(xml).unwrap_or_else(|e| panic!("valid:\n{e}"));
    assert_eq!(app.home_agent(), "h");
    let deployment = translate(&app).expect("translates");
    // The pools get no envelope: the home agent dispatches their jobs.
    let agents: Vec<&str> = deployment.envelopes.iter().map(|e| e.agent.as_str()).collect();
    assert_eq!(agents, ["a", "h"]);
    let home = deployment.envelopes.iter().find(|e| e.agent == "h").expect("h").envelope_body("p");
    type Placed<'a> = (&'a str, Option<(&'a str, &'a str, u32)>);
    let jobs: Vec<Placed<'_>> = home
        .jobs
        .iter()
        .map(|j| {
            (j.job.as_str(), j.pool.as_ref().map(|p| (p.name.as_str(), p.policy.as_str(), p.redispatch)))
        })
        .collect();
    assert_eq!(
        jobs,
        [
            (APPL_START, None),
            ("A", Some(("w", "lowest-delay", 2))),
            ("B", Some(("v", "least-loaded", 3))),
            (APPL_END, None)
        ],
        "a pool without a <pool> takes the defaults"
    );
    // A job's information travels in a dispatch and reads back whole.
    let info = home.jobs[1].info.clone().expect("a real job");
    assert_eq!(padres_workflow::JobInfo::from_json(&info.to_json()), Ok(info));
}
