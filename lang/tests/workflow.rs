//! Workflow definitions: the payroll example, run terms on real dates, and every
//! validation error with its message and position.

use chrono::NaiveDate;
use padres_lang::workflow::{Application, RunTerm, StatusCondition, parse_application};

const PAYROLL: &str = include_str!("../../examples/payroll.xml");

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
    assert!(app.job("B").expect("B").after.iter().all(|dep| matches!(
        dep,
        padres_lang::workflow::Dependency::After { status: StatusCondition::Ok, .. }
    )));
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
    ];
    for (xml, expected) in cases {
        let got = error(&xml);
        assert!(got.starts_with(expected), "expected {expected:?}\n     got {got:?}\n  for {xml}");
    }
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
