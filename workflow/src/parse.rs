//! Reading a workflow definition: XML (through `roxmltree`, which keeps positions and
//! refuses DTDs, hence entities) into an [`Application`], checking everything a user can
//! get wrong and reporting each problem with its line and column.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use chrono::NaiveDate;

use super::calendar::{Calendar, HolidayRule, RunTerm, Schedule, parse_weekdays};
use super::duration::parse_duration;
use super::model::{Application, Dependency, Job, Policy, PoolSpec, Pos, Runner, StatusCondition, Trigger};

/// Largest definition accepted, in bytes.
pub const MAX_BYTES: usize = 4 << 20;
/// Most XML nodes (elements, attributes' texts, comments) accepted.
pub const MAX_NODES: u32 = 200_000;
/// Most jobs in one application.
pub const MAX_JOBS: usize = 10_000;

/// One problem in a definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowError {
    /// Where.
    pub at: Pos,
    /// What.
    pub message: String,
}

impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: {}", self.at.line, self.at.column, self.message)
    }
}

/// Every problem found in a definition, in document order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct WorkflowErrors(pub Vec<WorkflowError>);

impl fmt::Display for WorkflowErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Collects problems while reading.
struct Reader<'a, 'input> {
    doc: &'a roxmltree::Document<'input>,
    errors: Vec<WorkflowError>,
}

type Node<'a, 'input> = roxmltree::Node<'a, 'input>;

impl<'a, 'input> Reader<'a, 'input> {
    fn pos(&self, node: Node<'a, 'input>) -> Pos {
        let p = self.doc.text_pos_at(node.range().start);
        Pos { line: p.row, column: p.col }
    }

    fn error(&mut self, node: Node<'a, 'input>, message: impl Into<String>) {
        let at = self.pos(node);
        self.errors.push(WorkflowError { at, message: message.into() });
    }

    /// Reports attributes of `node` that are not in `known`.
    fn only_attributes(&mut self, node: Node<'a, 'input>, known: &[&str]) {
        for attr in node.attributes() {
            if !known.contains(&attr.name()) {
                let tag = node.tag_name().name();
                let message =
                    format!("unknown attribute '{}' on <{tag}> (known: {})", attr.name(), known.join(", "));
                self.error(node, message);
            }
        }
    }

    /// An attribute parsed with `parse`, or `None` (and a problem reported) if it fails.
    fn parsed<T>(
        &mut self,
        node: Node<'a, 'input>,
        name: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let text = node.attribute(name)?;
        match parse(text) {
            Ok(value) => Some(value),
            Err(why) => {
                self.error(node, format!("{name}: {why}"));
                None
            }
        }
    }

    fn elements(node: Node<'a, 'input>) -> impl Iterator<Item = Node<'a, 'input>> {
        node.children().filter(Node::is_element)
    }

    fn text(node: Node<'a, 'input>) -> String {
        node.text().unwrap_or_default().trim().to_owned()
    }
}

fn number(text: &str) -> Result<u32, String> {
    text.trim().parse().map_err(|_| format!("'{text}' is not a whole number"))
}

fn is_name(text: &str) -> bool {
    padres_lang::Name::new(text).is_ok()
}

/// Defaults that jobs inherit (`<defaults>`).
#[derive(Clone, Debug, Default)]
struct Defaults {
    runner: Option<Runner>,
    timeout: Option<std::time::Duration>,
    retries: Option<u32>,
    backoff: Option<std::time::Duration>,
    holiday: Option<HolidayRule>,
}

/// Parses and validates a workflow definition.
pub fn parse_application(xml: &str) -> Result<Application, WorkflowErrors> {
    let fail = |message: String, line: u32, column: u32| {
        WorkflowErrors(vec![WorkflowError { at: Pos { line, column }, message }])
    };
    if xml.len() > MAX_BYTES {
        return Err(fail(
            format!("the definition is {} bytes; at most {MAX_BYTES} are accepted", xml.len()),
            1,
            1,
        ));
    }
    let options =
        roxmltree::ParsingOptions { allow_dtd: false, nodes_limit: MAX_NODES, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(xml, options).map_err(|e| {
        let p = e.pos();
        let message = match e {
            roxmltree::Error::DtdDetected => {
                "DTDs (and so entities) are not allowed in workflow definitions".to_owned()
            }
            roxmltree::Error::NodesLimitReached => format!("more than {MAX_NODES} XML nodes"),
            other => format!("not well-formed XML: {other}"),
        };
        fail(message, p.row, p.col)
    })?;
    let mut r = Reader { doc: &doc, errors: Vec::new() };
    let root = doc.root_element();
    if root.tag_name().name() != "application" {
        r.error(root, format!("the document must be an <application>, not <{}>", root.tag_name().name()));
        return Err(WorkflowErrors(r.errors));
    }
    let app = read_application(&mut r, root);
    // Every job the document names, valid or not, so that a job with a problem of its own
    // is not also reported as an unknown predecessor of its successors.
    let defined: std::collections::HashSet<&str> = Reader::elements(root)
        .filter(|n| n.tag_name().name() == "job")
        .filter_map(|n| n.attribute("name"))
        .collect();
    check_graph(&mut r, &app, &defined);
    if r.errors.is_empty() {
        Ok(app)
    } else {
        r.errors.sort_by_key(|e| e.at);
        Err(WorkflowErrors(r.errors))
    }
}

fn read_application<'a, 'input>(r: &mut Reader<'a, 'input>, root: Node<'a, 'input>) -> Application {
    r.only_attributes(root, &["name", "version", "tz", "calendar", "max-generations", "home"]);
    let name = match root.attribute("name") {
        Some(n) if is_name(n) => n.to_owned(),
        Some(n) => {
            r.error(root, format!("application name '{n}' must be an identifier (letters, digits, _ . -)"));
            String::new()
        }
        None => {
            r.error(root, "the application needs a name");
            String::new()
        }
    };
    let at_least_one =
        |t: &str| number(t).and_then(|n| if n == 0 { Err("must be at least 1".to_owned()) } else { Ok(n) });
    let max_generations = r.parsed(root, "max-generations", at_least_one).unwrap_or(1);
    r.parsed(root, "tz", |tz| {
        tz.parse::<chrono_tz::Tz>()
            .map_err(|_| format!("unknown time zone '{tz}' (an IANA name such as UTC or Europe/Paris)"))
    });
    let mut calendars: Vec<(Calendar, Pos)> = Vec::new();
    let mut triggers = Vec::new();
    let mut defaults = Defaults::default();
    let mut jobs: Vec<Job> = Vec::new();
    let mut pools: Vec<(PoolSpec, Pos)> = Vec::new();
    let mut seen: HashMap<String, Pos> = HashMap::new();
    for node in Reader::elements(root) {
        match node.tag_name().name() {
            "calendar" => {
                let at = r.pos(node);
                calendars.push((read_calendar(r, node), at));
            }
            "trigger" => triggers.extend(read_trigger(r, node)),
            "defaults" => defaults = read_defaults(r, node),
            "pool" => {
                if let Some(pool) = read_pool(r, node) {
                    if pools.iter().any(|(p, _)| p.name == pool.name) {
                        r.error(node, format!("pool '{}' is described twice", pool.name));
                    } else {
                        pools.push((pool, r.pos(node)));
                    }
                }
            }
            "job" => {
                if jobs.len() == MAX_JOBS {
                    r.error(node, format!("more than {MAX_JOBS} jobs"));
                    break;
                }
                if let Some(job) = read_job(r, node, &defaults) {
                    if let Some(first) = seen.get(&job.name) {
                        let message =
                            format!("duplicate job '{}' (first defined at line {})", job.name, first.line);
                        r.error(node, message);
                    } else {
                        seen.insert(job.name.clone(), job.at);
                        jobs.push(job);
                    }
                }
            }
            other => r.error(
                node,
                format!(
                    "unknown element <{other}> in <application> (known: calendar, trigger, defaults, pool, job)"
                ),
            ),
        }
    }
    let calendar = match root.attribute("calendar") {
        Some(wanted) => match calendars.iter().find(|(c, _)| c.name == wanted) {
            Some((c, _)) => c.clone(),
            None => {
                r.error(root, format!("calendar '{wanted}' is not defined"));
                Calendar::default()
            }
        },
        None if calendars.len() == 1 => calendars.remove(0).0,
        None if calendars.is_empty() => Calendar::default(),
        None => {
            r.error(root, "several calendars: say which one with calendar=\"…\"");
            Calendar::default()
        }
    };
    if jobs.is_empty() && r.errors.is_empty() {
        r.error(root, "the application has no jobs");
    }
    let home = match root.attribute("home") {
        Some(h) if is_name(h) => Some(h.to_owned()),
        Some(h) => {
            r.error(root, format!("home agent '{h}' must be an identifier"));
            None
        }
        None => None,
    };
    if home.is_none()
        && let Some(first) = jobs.first()
        && let Runner::Pool(pool) = &first.runner
    {
        r.error(
            root,
            format!(
                "the first job, '{}', runs in pool '{pool}': name the agent that starts and ends the generations and dispatches pool jobs with home=\"…\"",
                first.name
            ),
        );
    }
    for (pool, at) in &pools {
        if !jobs.iter().any(|j| j.runner == Runner::Pool(pool.name.clone())) {
            let message = format!("<pool name=\"{}\"> describes a pool no job runs in", pool.name);
            r.errors.push(WorkflowError { at: *at, message });
        }
    }
    Application {
        home,
        pools: pools.into_iter().map(|(p, _)| p).collect(),
        name,
        version: root.attribute("version").map(str::to_owned),
        tz: root.attribute("tz").unwrap_or("UTC").to_owned(),
        max_generations,
        calendar,
        triggers,
        jobs,
    }
}

fn read_calendar<'a, 'input>(r: &mut Reader<'a, 'input>, node: Node<'a, 'input>) -> Calendar {
    r.only_attributes(node, &["name", "workdays"]);
    let mut calendar =
        Calendar { name: node.attribute("name").unwrap_or("default").to_owned(), ..Calendar::default() };
    if let Some(days) = r.parsed(node, "workdays", parse_weekdays) {
        calendar.workdays = days;
    }
    let mut holidays = BTreeSet::new();
    for child in Reader::elements(node) {
        if child.tag_name().name() != "holiday" {
            r.error(
                child,
                format!("unknown element <{}> in <calendar> (known: holiday)", child.tag_name().name()),
            );
            continue;
        }
        r.only_attributes(child, &["date", "name"]);
        match r.parsed(child, "date", |d| {
            d.parse::<NaiveDate>().map_err(|_| format!("'{d}' is not a date (YYYY-MM-DD)"))
        }) {
            Some(date) => {
                holidays.insert(date);
            }
            None if child.attribute("date").is_none() => r.error(child, "a holiday needs a date"),
            None => {}
        }
    }
    calendar.holidays = holidays;
    calendar
}

/// A cron expression as a trigger takes it: five fields (minute, hour, day of month,
/// month, day of week), or a nickname such as `@daily`; a generation per minute at most.
///
/// # Errors
/// Another number of fields, or what croner refuses, in words.
pub fn cron_expression(text: &str) -> Result<croner::Cron, String> {
    let fields = text.split_whitespace().count();
    if fields != 5 && !text.trim_start().starts_with('@') {
        return Err(format!(
            "bad cron expression '{text}': five fields (minute hour day-of-month month day-of-week), not {fields}"
        ));
    }
    text.trim().parse().map_err(|e| format!("bad cron expression '{text}': {e}"))
}

fn read_trigger<'a, 'input>(r: &mut Reader<'a, 'input>, node: Node<'a, 'input>) -> Option<Trigger> {
    r.only_attributes(node, &["cron", "event"]);
    match (node.attribute("cron"), node.attribute("event")) {
        (Some(_), None) => r.parsed(node, "cron", cron_expression).map(|c| Trigger::Cron(Box::new(c))),
        (None, Some(_)) => r
            .parsed(node, "event", |s| {
                s.parse().map_err(|e: padres_lang::ParseError| format!("bad subscription: {e}"))
            })
            .map(Trigger::Event),
        _ => {
            r.error(node, "a trigger takes either cron=\"…\" or event=\"SUBSCRIPTION\"");
            None
        }
    }
}

fn read_pool<'a, 'input>(r: &mut Reader<'a, 'input>, node: Node<'a, 'input>) -> Option<PoolSpec> {
    r.only_attributes(node, &["name", "policy", "redispatch"]);
    let name = match node.attribute("name") {
        Some(n) if is_name(n) => n.to_owned(),
        Some(n) => {
            r.error(node, format!("pool name '{n}' must be an identifier"));
            return None;
        }
        None => {
            r.error(node, "a <pool> needs a name");
            return None;
        }
    };
    let policy = r.parsed(node, "policy", |p| p.parse::<Policy>()).unwrap_or_default();
    let redispatch = r.parsed(node, "redispatch", number).unwrap_or(super::model::REDISPATCH);
    Some(PoolSpec { name, policy, redispatch })
}

fn read_defaults<'a, 'input>(r: &mut Reader<'a, 'input>, node: Node<'a, 'input>) -> Defaults {
    r.only_attributes(node, &["agent", "pool", "timeout", "retries", "backoff", "holiday"]);
    Defaults {
        runner: node
            .attribute("agent")
            .map(|a| Runner::Agent(a.to_owned()))
            .or_else(|| node.attribute("pool").map(|p| Runner::Pool(p.to_owned()))),
        timeout: r.parsed(node, "timeout", parse_duration),
        retries: r.parsed(node, "retries", number),
        backoff: r.parsed(node, "backoff", parse_duration),
        holiday: r.parsed(node, "holiday", |h| h.parse()),
    }
}

fn read_job<'a, 'input>(
    r: &mut Reader<'a, 'input>,
    node: Node<'a, 'input>,
    defaults: &Defaults,
) -> Option<Job> {
    r.only_attributes(
        node,
        &["name", "run", "except", "holiday", "agent", "pool", "timeout", "retries", "backoff"],
    );
    let at = r.pos(node);
    let errors_before = r.errors.len();
    let name = match node.attribute("name") {
        Some(n) if is_name(n) && !n.starts_with("APPL_") => n.to_owned(),
        Some(n) => {
            r.error(
                node,
                format!(
                    "job name '{n}' must be an identifier (letters, digits, _ . -) not starting with APPL_"
                ),
            );
            String::new()
        }
        None => {
            r.error(node, "a job needs a name");
            String::new()
        }
    };
    let run = match node.attribute("run") {
        Some(_) => r.parsed(node, "run", str::parse::<RunTerm>),
        None => Some(RunTerm::Daily),
    };
    let except = r.parsed(node, "except", str::parse::<RunTerm>);
    // A daily job runs every day, holidays included, unless told otherwise; any other
    // term skips holidays unless told otherwise.
    let holiday = r
        .parsed(node, "holiday", str::parse::<HolidayRule>)
        .or(defaults.holiday)
        .unwrap_or(if matches!(run, Some(RunTerm::Daily)) { HolidayRule::Run } else { HolidayRule::Skip });
    let runner = match (node.attribute("agent"), node.attribute("pool")) {
        (Some(a), None) => Some(Runner::Agent(a.to_owned())),
        (None, Some(p)) => Some(Runner::Pool(p.to_owned())),
        (Some(_), Some(_)) => {
            r.error(node, format!("job '{name}': give agent=\"…\" or pool=\"…\", not both"));
            None
        }
        (None, None) => {
            if defaults.runner.is_none() {
                r.error(
                    node,
                    format!("job '{name}' has no agent: give agent=\"…\" or pool=\"…\" (or a <defaults>)"),
                );
            }
            defaults.runner.clone()
        }
    };
    if let Some(Runner::Agent(n) | Runner::Pool(n)) = &runner
        && !is_name(n)
    {
        r.error(node, format!("agent or pool name '{n}' must be an identifier"));
    }
    let timeout = r.parsed(node, "timeout", parse_duration).or(defaults.timeout);
    let retries = r.parsed(node, "retries", number).or(defaults.retries).unwrap_or(0);
    let backoff = r.parsed(node, "backoff", parse_duration).or(defaults.backoff);
    let mut command = None;
    let mut args = Vec::new();
    let mut env = Vec::new();
    let mut workdir = None;
    let mut after = Vec::new();
    for child in Reader::elements(node) {
        match child.tag_name().name() {
            "command" => {
                r.only_attributes(child, &[]);
                let text = Reader::text(child);
                if text.is_empty() {
                    r.error(child, format!("job '{name}': <command> is empty"));
                }
                if command.replace(text).is_some() {
                    r.error(child, format!("job '{name}' has more than one <command>"));
                }
            }
            "arg" => {
                r.only_attributes(child, &[]);
                args.push(child.text().unwrap_or_default().to_owned());
            }
            "env" => {
                r.only_attributes(child, &["name", "value"]);
                match (child.attribute("name"), child.attribute("value")) {
                    (Some(n), Some(v)) if !n.is_empty() && !n.contains('=') => {
                        env.push((n.to_owned(), v.to_owned()));
                    }
                    _ => r.error(child, "<env> needs name=\"…\" (without '=') and value=\"…\""),
                }
            }
            "workdir" => {
                r.only_attributes(child, &[]);
                workdir = Some(Reader::text(child));
            }
            "after" | "any-of" => after.extend(read_dependency(r, child)),
            other => r.error(
                child,
                format!(
                    "unknown element <{other}> in <job> (known: command, arg, env, workdir, after, any-of)"
                ),
            ),
        }
    }
    if command.is_none() {
        r.error(node, format!("job '{name}' has no <command>"));
    }
    if r.errors.len() > errors_before {
        return None;
    }
    Some(Job {
        name,
        schedule: Schedule { run: run?, except, holiday },
        runner: runner?,
        command: command?,
        args,
        env,
        workdir,
        timeout,
        retries,
        backoff,
        after,
        at,
    })
}

fn read_dependency<'a, 'input>(r: &mut Reader<'a, 'input>, node: Node<'a, 'input>) -> Option<Dependency> {
    let at = r.pos(node);
    if node.tag_name().name() == "after" {
        r.only_attributes(node, &["job", "status"]);
        let status = match node.attribute("status") {
            None => StatusCondition::Ok,
            Some("ok") => StatusCondition::Ok,
            Some("success") => StatusCondition::Success,
            Some("failed") => StatusCondition::Failed,
            Some("any") => StatusCondition::Any,
            Some(other) => {
                r.error(node, format!("status: '{other}' is not one of ok, success, failed, any"));
                return None;
            }
        };
        return match node.attribute("job") {
            Some(job) => Some(Dependency::After { job: job.to_owned(), status, at }),
            None => {
                r.error(node, "<after> needs job=\"…\"");
                None
            }
        };
    }
    r.only_attributes(node, &[]);
    let mut any = Vec::new();
    for child in Reader::elements(node) {
        match child.tag_name().name() {
            "after" | "any-of" => any.extend(read_dependency(r, child)),
            other => r.error(child, format!("unknown element <{other}> in <any-of> (known: after, any-of)")),
        }
    }
    if any.is_empty() {
        r.error(node, "<any-of> needs at least one <after>");
        return None;
    }
    Some(Dependency::AnyOf(any))
}

/// Unknown predecessors, jobs depending on themselves, and cycles.
fn check_graph(r: &mut Reader<'_, '_>, app: &Application, defined: &std::collections::HashSet<&str>) {
    let errors_before = r.errors.len();
    let index: HashMap<&str, usize> =
        app.jobs.iter().enumerate().map(|(i, j)| (j.name.as_str(), i)).collect();
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); app.jobs.len()];
    for (i, job) in app.jobs.iter().enumerate() {
        let mut stack: Vec<&Dependency> = job.after.iter().collect();
        while let Some(dep) = stack.pop() {
            match dep {
                Dependency::After { job: pred, at, .. } => match index.get(pred.as_str()) {
                    Some(&p) if p == i => {
                        r.errors.push(WorkflowError {
                            at: *at,
                            message: format!("job '{pred}' depends on itself"),
                        });
                    }
                    Some(&p) => edges[i].push(p),
                    // Defined, but with a problem of its own (reported already).
                    None if defined.contains(pred.as_str()) => {}
                    None => r.errors.push(WorkflowError {
                        at: *at,
                        message: format!("job '{}' depends on '{pred}', which is not defined", job.name),
                    }),
                },
                Dependency::AnyOf(deps) => stack.extend(deps),
            }
        }
    }
    if r.errors.len() > errors_before {
        return;
    }
    // Depth-first search; a predecessor on the current path closes a cycle.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut marks = vec![Mark::New; app.jobs.len()];
    for start in 0..app.jobs.len() {
        if marks[start] != Mark::New {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        marks[start] = Mark::OnPath;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            if let Some(&pred) = edges[node].get(*next) {
                *next += 1;
                match marks[pred] {
                    Mark::New => {
                        marks[pred] = Mark::OnPath;
                        path.push((pred, 0));
                    }
                    Mark::OnPath => {
                        let from = path.iter().position(|(n, _)| *n == pred).unwrap_or(0);
                        // The path follows predecessor edges; print it in running order.
                        let mut cycle: Vec<usize> = path[from..].iter().map(|(n, _)| *n).collect();
                        cycle.reverse();
                        // Start at the job defined first, where the error is reported.
                        let earliest = (0..cycle.len()).min_by_key(|i| app.jobs[cycle[*i]].at).unwrap_or(0);
                        cycle.rotate_left(earliest);
                        let first = app.jobs[cycle[0]].at;
                        cycle.push(cycle[0]);
                        let cycle: Vec<&str> = cycle.iter().map(|n| app.jobs[*n].name.as_str()).collect();
                        r.errors.push(WorkflowError {
                            at: first,
                            message: format!("dependency cycle: {}", cycle.join(" -> ")),
                        });
                        return;
                    }
                    Mark::Done => {}
                }
            } else {
                marks[node] = Mark::Done;
                path.pop();
            }
        }
    }
}
