//! Job agents (`padres_agent::agent`) on a real broker over QUIC: the payroll application
//! deployed through `agent_ctl` to three agents, a Friday and a Wednesday generation
//! triggered at once, each job run as a real process once, in dependency order, C
//! skipped on the Wednesday and D still after B; and a `padres-agent` process killed
//! while its job runs, restarted, reporting the job failed.

use std::path::Path;
use std::time::Duration;

use padres_agent::agent::{Options, serve};
use padres_agent::journal::Store as _;
use padres_client::{Client, Notification};
use padres_lang::Publication;
use padres_tests::broker::{client, start_broker};
use padres_workflow::control::trigger_publication;
use padres_workflow::translate::status_advertisement;
use padres_workflow::{APPL_END, parse_application, translate};

/// Payroll (DESIGN §8) whose jobs append `JOB GID DATE` to `log`.
fn payroll(log: &Path) -> String {
    let job = |name: &str, run: &str, agent: &str, after: &[&str]| {
        let after: String = after.iter().map(|a| format!("<after job=\"{a}\"/>")).collect();
        format!(
            "<job name=\"{name}\" run=\"{run}\" agent=\"{agent}\"><command>sh</command>\
             <arg>-c</arg><arg>echo \"{name} $1 $2\" &gt;&gt; {log}</arg><arg>sh</arg>\
             <arg>${{gen.gid}}</arg><arg>${{gen.date}}</arg>{after}</job>",
            log = log.display()
        )
    };
    format!(
        "<application name=\"payroll\" tz=\"UTC\" calendar=\"bank\">\
         <calendar name=\"bank\" workdays=\"mon-fri\"/>{}{}{}{}</application>",
        job("A", "daily", "agent-1", &[]),
        job("B", "daily", "agent-2", &["A"]),
        job("C", "friday", "agent-3", &["A"]),
        job("D", "workdays", "agent-1", &["B", "C"]),
    )
}

/// Waits until `broker`'s stats (asked through `client`) hold of `check`: agents subscribe
/// and deploy asynchronously, and an `agent_ctl` publication sent before an agent's
/// subscription reaches no one.
async fn until_stats(client: &Client, what: &str, check: impl Fn(&padres_lang::wire::BrokerStats) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let stats = client.stats().await.expect("stats");
        if check(&stats) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {stats:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client of `broker` that deploys (`agent_ctl`) and triggers.
async fn operator(broker: &padres_tests::broker::Broker) -> Client {
    let operator = client(broker, "operator").await;
    operator.advertise(padres_workflow::control::control_advertisement()).await.expect("advertised");
    operator
        .send("a [class,eq,'trigger'],[appl,isPresent,''],[version,isPresent,''],[gid,isPresent,''],[date,isPresent,'']")
        .await
        .expect("advertised");
    operator
}

/// Deploys `xml`, application `appl` of one job on agent-1, through `operator` (its
/// `agent_ctl` envelopes published directly), waits for its three dependency subscriptions
/// (`APPL_START`, the job, `APPL_END`), and triggers generation g1 on 2026-11-27.
async fn deploy_one_job_and_trigger(operator: &Client, xml: &str, appl: &str) {
    let deployment = translate(&parse_application(xml).expect("valid")).expect("translates");
    for envelope in &deployment.envelopes {
        operator.publish(envelope.publication(appl).expect("an envelope")).await.expect("deployed");
    }
    until_stats(operator, "the agent did not deploy", |s| s.composites >= 3).await;
    operator
        .publish(trigger_publication(appl, &deployment.version, "g1", "2026-11-27").expect("a trigger"))
        .await
        .expect("triggered");
}

fn publication(text: &str) -> Publication {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Statuses seen by `monitor` until `done` holds of them, as `(gid, job, status)`.
async fn statuses_until(
    monitor: &mut Client,
    done: impl Fn(&[(String, String, String)]) -> bool,
) -> Vec<(String, String, String)> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(&seen) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let next = tokio::time::timeout(left, monitor.next_notification()).await;
        let Ok(Some(Notification::Publication { publication, .. })) = next else {
            panic!("statuses stopped at {seen:?}");
        };
        let text = |a: &str| publication.get(a).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        seen.push((text("gid"), text("job"), text("status")));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payroll_runs_on_three_agents_friday_and_wednesday_at_once() {
    let broker = start_broker("B1", "agent-payroll");
    let work = broker.dir.join("agents");
    let log = work.join("order.log");
    std::fs::create_dir_all(&work).expect("work dir");
    for name in ["agent-1", "agent-2", "agent-3"] {
        let agent = client(&broker, name).await;
        let options = Options { max_parallel: 4, ..Options::new(name, work.join(name)) };
        tokio::spawn(async move { serve(agent, options).await.expect("the agent serves") });
    }
    let mut monitor = client(&broker, "monitor").await;
    monitor.send("s [class,eq,'job_status'],[appl,eq,'payroll']").await.expect("subscribed");
    let operator = operator(&broker).await;
    // The three agents' agent_ctl subscriptions and the monitor's.
    until_stats(&operator, "the agents did not subscribe", |s| s.subscriptions >= 4).await;
    let app = parse_application(&payroll(&log)).expect("a valid application");
    let deployment = translate(&app).expect("translates");
    for envelope in &deployment.envelopes {
        operator.publish(envelope.publication("payroll").expect("an envelope")).await.expect("deployed");
    }
    // Every job's dependency subscribed (six, with APPL_START and APPL_END).
    until_stats(&operator, "the agents did not deploy", |s| s.composites >= 6).await;
    // 2026-11-27 is a Friday, 2026-11-25 a Wednesday.
    operator
        .publish(trigger_publication("payroll", &deployment.version, "fri", "2026-11-27").expect("a trigger"))
        .await
        .expect("triggered");
    operator
        .publish(trigger_publication("payroll", &deployment.version, "wed", "2026-11-25").expect("a trigger"))
        .await
        .expect("triggered");
    let ended = |seen: &[(String, String, String)]| {
        ["fri", "wed"].iter().all(|g| seen.iter().any(|(gid, job, _)| gid == g && job == "APPL_END"))
    };
    let seen = statuses_until(&mut monitor, ended).await;
    let final_status = |gid: &str, job: &str| {
        seen.iter().rev().find(|(g, j, s)| g == gid && j == job && s != "started").map(|(_, _, s)| s.as_str())
    };
    for gid in ["fri", "wed"] {
        for job in ["APPL_START", "A", "B", "D", "APPL_END"] {
            assert_eq!(final_status(gid, job), Some("succeeded"), "{gid}/{job}: {seen:?}");
        }
    }
    assert_eq!(final_status("fri", "C"), Some("succeeded"), "{seen:?}");
    assert_eq!(final_status("wed", "C"), Some("skipped"), "{seen:?}");
    // Each job that ran wrote its line once, in dependency order, with its generation.
    let written = std::fs::read_to_string(&log).expect("the jobs wrote");
    for (gid, date, jobs) in
        [("fri", "2026-11-27", &["A", "B", "C", "D"][..]), ("wed", "2026-11-25", &["A", "B", "D"])]
    {
        let lines: Vec<&str> = written.lines().filter(|l| l.contains(&format!(" {gid} "))).collect();
        let order: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap_or_default()).collect();
        assert_eq!(order.len(), jobs.len(), "{gid}: {written}");
        for job in jobs.iter() {
            assert_eq!(order.iter().filter(|j| *j == job).count(), 1, "{gid}/{job} ran once: {written}");
        }
        let at = |job: &str| order.iter().position(|j| *j == job).expect("ran");
        assert!(at("A") < at("B") && at("B") < at("D"), "{gid}: {written}");
        if gid == "fri" {
            assert!(at("A") < at("C") && at("C") < at("D"), "{gid}: {written}");
        }
        assert!(lines.iter().all(|l| l.ends_with(date)), "{gid}: {written}");
    }
}

/// A `padres-agent` process serving as `name` for `broker`, its work in `work`.
fn agent_process(broker: &padres_tests::broker::Broker, name: &str, work: &Path) -> std::process::Child {
    std::process::Command::new(padres_tests::binary("padres-agent"))
        .args(["--name", name, "--broker", &format!("quic://{}", broker.addr)])
        .arg("--ca")
        .arg(broker.dir.join("cert.pem"))
        .arg("--work-dir")
        .arg(work)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("padres-agent starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_job_reports_it_failed_after_restart() {
    let broker = start_broker("B1", "agent-restart");
    let work = broker.dir.join("agent");
    let marker = broker.dir.join("ran");
    let mut agent = agent_process(&broker, "agent-1", &work);
    let mut monitor = client(&broker, "monitor").await;
    monitor.send("s [class,eq,'job_status'],[appl,eq,'slow']").await.expect("subscribed");
    let operator = operator(&broker).await;
    // S records each run (its process group's id), then takes 60 s.
    let xml = format!(
        "<application name=\"slow\" tz=\"UTC\"><job name=\"S\" run=\"daily\" agent=\"agent-1\">\
         <command>sh</command><arg>-c</arg><arg>echo $$ &gt;&gt; {}; sleep 60</arg></job></application>",
        marker.display()
    );
    until_stats(&operator, "the agent did not subscribe", |s| s.subscriptions >= 2).await;
    deploy_one_job_and_trigger(&operator, &xml, "slow").await;
    statuses_until(&mut monitor, |seen| seen.iter().any(|(_, job, s)| job == "S" && s == "started")).await;
    // Its process has started too (it wrote its group's id).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&marker).is_ok_and(|m| m.ends_with('\n')) {
        assert!(tokio::time::Instant::now() < deadline, "S's process did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The job is running: the agent is killed (its job's process group with it or not).
    agent.kill().expect("killed");
    let _ = agent.wait();
    // Restarted, it finds S unfinished in its journal and reports it failed, without
    // running it (that a claimed job is not claimed again is the journal's test).
    let mut agent = agent_process(&broker, "agent-1", &work);
    let seen =
        statuses_until(&mut monitor, |seen| seen.iter().any(|(_, job, s)| job == "S" && s == "failed")).await;
    assert!(seen.iter().all(|(gid, _, _)| gid == "g1"), "{seen:?}");
    let runs = std::fs::read_to_string(&marker).expect("S ran");
    assert_eq!(runs.lines().count(), 1, "reported failed, not run: {runs}");
    let _ = agent.kill();
    let _ = agent.wait();
    // The first run's process group outlived its agent (killed with SIGKILL): stopped here.
    for group in runs.lines() {
        let _ = std::process::Command::new("kill").args(["-s", "KILL", "--", &format!("-{group}")]).status();
    }
}

/// Deploys `xml` through `operator` by `agent_ctl`, waiting for each agent's reply.
async fn deploy_acked(operator: &mut Client, xml: &str) {
    let app = parse_application(xml).expect("valid");
    let deployment = translate(&app).expect("translates");
    operator.send(&padres_workflow::control::reply_subscription(&app.name)).await.expect("subscribed");
    let mut waiting: Vec<String> = deployment.envelopes.iter().map(|e| e.agent.clone()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !waiting.is_empty() {
        for envelope in &deployment.envelopes {
            if waiting.contains(&envelope.agent) {
                let control = envelope.control(&app.name, "t1");
                operator.publish(control.publication().expect("an envelope")).await.expect("sent");
            }
        }
        let until = (tokio::time::Instant::now() + Duration::from_secs(1)).min(deadline);
        while let Ok(Some(n)) = tokio::time::timeout_at(until, operator.next_notification()).await {
            let Some((_, p)) = n.into_publication() else { continue };
            if let Some(reply) = padres_workflow::control::Reply::from_publication(&p) {
                assert_eq!(reply.refused, None, "{reply:?}");
                waiting.retain(|a| *a != reply.agent);
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no reply from {waiting:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_agent_fires_a_missed_cron_run_event_triggers_and_holds_to_max_generations() {
    let broker = start_broker("B1", "agent-triggers");
    let work = broker.dir.join("agent");
    let log = broker.dir.join("ran.log");
    std::fs::create_dir_all(&work).expect("work dir");
    // The agent was home to "nightly" before, and last fired it three days ago: the latest
    // run missed since is made up once when it starts again.
    let three_days_ago = padres_client::check::now().millis() - 3 * 86_400_000;
    padres_agent::journal::Journal::open(&work)
        .expect("journal")
        .cron_fired("nightly", "0 18 * * *", three_days_ago)
        .expect("recorded");
    let agent = client(&broker, "agent-1").await;
    let options = Options { max_parallel: 4, ..Options::new("agent-1", work.clone()) };
    tokio::spawn(async move { serve(agent, options).await.expect("the agent serves") });
    let mut monitor = client(&broker, "monitor").await;
    monitor.send("s [class,eq,'job_status'],[job,eq,'APPL_END']").await.expect("subscribed");
    let mut operator = operator(&broker).await;
    until_stats(&operator, "the agent did not subscribe", |s| s.subscriptions >= 2).await;
    let job = |appl: &str, sleep: &str| {
        format!(
            "<job name=\"J\" run=\"daily\" agent=\"agent-1\"><command>sh</command><arg>-c</arg>\
             <arg>echo \"{appl} $1 start\" &gt;&gt; {log}; sleep {sleep}; echo \"{appl} $1 end\" &gt;&gt; {log}</arg>\
             <arg>sh</arg><arg>${{gen.gid}}</arg></job>",
            log = log.display()
        )
    };
    let nightly = format!(
        "<application name=\"nightly\" tz=\"UTC\"><trigger cron=\"0 18 * * *\"/>{}</application>",
        job("nightly", "0")
    );
    deploy_acked(&mut operator, &nightly).await;
    let seen =
        statuses_until(&mut monitor, |seen| seen.iter().any(|(gid, _, _)| gid.starts_with("cron-"))).await;
    let gid = &seen.iter().find(|(gid, _, _)| gid.starts_with("cron-")).expect("a cron generation").0;
    // The latest 18:00 UTC passed, not an earlier one.
    let now = chrono::DateTime::from_timestamp_millis(padres_client::check::now().millis()).expect("now");
    let day =
        if now.format("%H").to_string().as_str() >= "18" { now } else { now - chrono::Duration::days(1) };
    assert_eq!(gid, &format!("cron-{}T1800+0000", day.format("%Y-%m-%d")), "the latest run missed");
    // An event trigger, and at most one generation at a time: three events in a row run
    // one after the other.
    let events = format!(
        "<application name=\"events\" tz=\"UTC\" max-generations=\"1\">\
         <trigger event=\"[class,eq,'file_arrived'],[dir,eq,'inbox']\"/>{}</application>",
        job("events", "0.3")
    );
    deploy_acked(&mut operator, &events).await;
    operator
        .send("a [class,eq,'file_arrived'],[dir,isPresent,''],[name,isPresent,'']")
        .await
        .expect("advertised");
    for name in ["a", "b", "c"] {
        let text = format!("[class,'file_arrived'],[dir,'inbox'],[name,'{name}']");
        operator.publish_acked(publication(&text)).await.expect("published");
    }
    operator
        .publish_acked(publication("[class,'file_arrived'],[dir,'elsewhere'],[name,'d']"))
        .await
        .expect("published");
    let events_ended = |seen: &[(String, String, String)]| {
        seen.iter().filter(|(g, _, _)| g.starts_with("event-")).count() >= 3
    };
    let later = statuses_until(&mut monitor, events_ended).await;
    // Only the one cron run was made up.
    assert!(later.iter().all(|(g, _, _)| !g.starts_with("cron-")), "{later:?}");
    let written = std::fs::read_to_string(&log).expect("the jobs wrote");
    let lines: Vec<&str> = written.lines().filter(|l| l.starts_with("events ")).collect();
    assert_eq!(lines.len(), 6, "three generations (not the event elsewhere): {written}");
    for pair in lines.chunks(2) {
        let gid = |l: &str| l.split(' ').nth(1).unwrap_or_default().to_owned();
        assert!(pair[0].ends_with(" start") && pair[1].ends_with(" end"), "one at a time: {written}");
        assert_eq!(gid(pair[0]), gid(pair[1]), "one at a time: {written}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_made_while_the_broker_is_down_is_sent_after_the_agent_restarts_too() {
    let mut broker = padres_tests::broker::start_with("B1", "agent-outbox", &[]);
    let work = broker.dir.join("agent");
    let marker = broker.dir.join("done");
    let mut agent = agent_process(&broker, "agent-1", &work);
    let mut monitor = client(&broker, "monitor").await;
    monitor.send("s [class,eq,'job_status'],[appl,eq,'late'],[job,eq,'S']").await.expect("subscribed");
    let operator = operator(&broker).await;
    until_stats(&operator, "the agent did not subscribe", |s| s.subscriptions >= 2).await;
    // S ends a second after it starts, with its broker gone by then.
    let xml = format!(
        "<application name=\"late\" tz=\"UTC\"><job name=\"S\" run=\"daily\" agent=\"agent-1\">\
         <command>sh</command><arg>-c</arg><arg>sleep 1; echo done &gt; {}</arg></job></application>",
        marker.display()
    );
    deploy_one_job_and_trigger(&operator, &xml, "late").await;
    statuses_until(&mut monitor, |seen| seen.iter().any(|(_, job, s)| job == "S" && s == "started")).await;
    // `started` has left the outbox (the broker's acknowledgement came back) before the
    // broker goes: a status the broker took but whose acknowledgement a crash cut off is
    // sent again after a restart (at least once), which is not what this test is about.
    let journal = padres_agent::journal::Journal::open(&work).expect("the agent's journal");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while journal.outbox_pending().expect("readable").iter().any(|(_, p)| p.contains("'started'")) {
        assert!(tokio::time::Instant::now() < deadline, "S's started never left the outbox");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(journal);
    broker.kill();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !marker.exists() {
        assert!(tokio::time::Instant::now() < deadline, "S did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // S has ended and its status, which cannot be sent, waits in the outbox; then the agent
    // stops too (SIGKILL).
    let journal = padres_agent::journal::Journal::open(&work).expect("the agent's journal");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !journal.outbox_pending().expect("readable").iter().any(|(_, p)| p.contains("'succeeded'")) {
        assert!(tokio::time::Instant::now() < deadline, "S's status never reached the outbox");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(journal);
    agent.kill().expect("killed");
    let _ = agent.wait();
    broker.start_again();
    let mut monitor = client(&broker, "monitor").await;
    monitor.send("s [class,eq,'job_status'],[appl,eq,'late'],[job,eq,'S']").await.expect("subscribed");
    // Restarted, the agent sends what its outbox kept: S succeeded, once, not run again.
    let mut agent = agent_process(&broker, "agent-1", &work);
    let seen =
        statuses_until(&mut monitor, |seen| seen.iter().any(|(_, job, s)| job == "S" && s == "succeeded"))
            .await;
    assert_eq!(seen, [("g1".to_owned(), "S".to_owned(), "succeeded".to_owned())]);
    assert_eq!(std::fs::read_to_string(&marker).expect("ran"), "done\n");
    let _ = agent.kill();
    let _ = agent.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_member_given_a_dispatch_it_cannot_read_says_it_failed() {
    let broker = start_broker("B1", "agent-bad-dispatch");
    let work = broker.dir.join("agent");
    let member = client(&broker, "w1").await;
    let options = Options { pools: vec!["workers".to_owned()], ..Options::new("w1", work) };
    tokio::spawn(async move { serve(member, options).await.expect("the agent serves") });
    let mut monitor = client(&broker, "monitor").await;
    // The member's incarnation, from its load report.
    let loads = monitor.send("s [class,eq,'agent_load'],[agent,eq,'w1']").await.expect("subscribed");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let incarnation = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let next = tokio::time::timeout(left, monitor.next_notification()).await;
        let Ok(Some(Notification::Publication { publication, .. })) = next else { panic!("no load report") };
        if let Some(padres_lang::Value::Int(i)) = publication.get("incarnation") {
            break *i;
        }
    };
    monitor.unsubscribe(loads.expect("an id")).await.expect("unsubscribed");
    // (Reports already on their way are read past below.)
    monitor.send("s [class,eq,'job_status'],[appl,eq,'late'],[agent,eq,'w1']").await.expect("subscribed");
    // A home agent's dispatch of job S to w1, without the job's information.
    let home = client(&broker, "home").await;
    home.advertise(status_advertisement("late", "S", "home")).await.expect("advertised");
    let dispatch = format!(
        "[class,'job_status'],[appl,'late'],[gid,'g1'],[job,'S'],[agent,'home'],[status,'dispatched'],\
         [exit,0],[attempt,1],[pool,'workers'],[to,'w1'],[incarnation,{incarnation}],[date,'2026-11-27']"
    );
    home.publish_acked(publication(&dispatch)).await.expect("dispatched");
    // Said failed, by the member, so that its home agent does not wait for it.
    let seen = statuses_until(&mut monitor, |seen| seen.iter().any(|(gid, _, _)| !gid.is_empty())).await;
    let statuses: Vec<_> = seen.into_iter().filter(|(gid, _, _)| !gid.is_empty()).collect();
    assert_eq!(statuses, [("g1".to_owned(), "S".to_owned(), "failed".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_run_made_up_when_the_agent_restarts_is_triggered_once() {
    let broker = start_broker("B1", "agent-cron-restart");
    let work = broker.dir.join("agent");
    std::fs::create_dir_all(&work).expect("work dir");
    let mut agent = agent_process(&broker, "agent-1", &work);
    let mut monitor = client(&broker, "monitor").await;
    monitor.send("s [class,eq,'trigger'],[appl,eq,'nightly']").await.expect("subscribed");
    monitor
        .send("s [class,eq,'job_status'],[appl,eq,'nightly'],[job,eq,'APPL_END']")
        .await
        .expect("subscribed");
    let mut operator = operator(&broker).await;
    until_stats(&operator, "the agent did not subscribe", |s| s.subscriptions >= 3).await;
    let xml = "<application name=\"nightly\" tz=\"UTC\"><trigger cron=\"0 18 * * *\"/>\
               <job name=\"J\" run=\"daily\" agent=\"agent-1\"><command>true</command></job></application>";
    // Deployed for the first time: nothing from the past fires.
    deploy_acked(&mut operator, xml).await;
    agent.kill().expect("killed");
    let _ = agent.wait();
    // It last fired three days ago, as the journal says when the agent starts again with
    // the deployment it kept: the latest run missed is made up, once, after what the outbox
    // kept (which is when a trigger queued twice would show).
    let three_days_ago = padres_client::check::now().millis() - 3 * 86_400_000;
    padres_agent::journal::Journal::open(&work)
        .expect("journal")
        .cron_fired("nightly", "0 18 * * *", three_days_ago)
        .expect("recorded");
    let mut agent = agent_process(&broker, "agent-1", &work);
    // Counted until the made-up generation has ended: a trigger sent twice goes out
    // before any status of its generation, the agent publishing them in order.
    let mut triggers = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Ok(Some(Notification::Publication { publication, .. })) =
            tokio::time::timeout(left, monitor.next_notification()).await
        else {
            panic!("the made-up generation did not end; triggers seen: {triggers:?}");
        };
        let text = |a: &str| publication.get(a).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        if publication.class() == "trigger" {
            triggers.push(text("gid"));
        } else if text("status") == "succeeded" {
            break;
        }
    }
    let _ = agent.kill();
    let _ = agent.wait();
    assert_eq!(triggers.len(), 1, "the made-up run's trigger, once: {triggers:?}");
    assert!(triggers[0].starts_with("cron-"), "{triggers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instant_runner_succeeds_each_attempt_and_starts_no_process() {
    let broker = start_broker("B1", "agent-instant");
    let work = broker.dir.join("agent");
    let marker = broker.dir.join("ran");
    let agent = client(&broker, "agent-1").await;
    let options =
        Options { runner: padres_agent::agent::Runner::Instant, ..Options::new("agent-1", work.clone()) };
    tokio::spawn(async move { serve(agent, options).await.expect("the agent serves") });
    let mut monitor = client(&broker, "monitor").await;
    monitor.send("s [class,eq,'job_status'],[appl,eq,'instant']").await.expect("subscribed");
    let operator = operator(&broker).await;
    // Run as a process, S would leave a file and fail.
    let xml = format!(
        "<application name=\"instant\" tz=\"UTC\"><job name=\"S\" run=\"daily\" agent=\"agent-1\" retries=\"0\">\
         <command>sh</command><arg>-c</arg><arg>touch {}; exit 3</arg></job></application>",
        marker.display()
    );
    until_stats(&operator, "the agent did not subscribe", |s| s.subscriptions >= 2).await;
    deploy_one_job_and_trigger(&operator, &xml, "instant").await;
    let seen = statuses_until(&mut monitor, |seen| seen.iter().any(|(_, job, _)| job == APPL_END)).await;
    let of_s: Vec<&str> = seen.iter().filter(|(_, job, _)| job == "S").map(|(_, _, s)| s.as_str()).collect();
    assert_eq!(of_s, ["started", "succeeded"], "{seen:?}");
    assert!(!marker.exists(), "no process ran");
    assert!(!work.join("output").join("instant").exists(), "no output kept");
}
