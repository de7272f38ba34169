//! The agent's loop: deployments from `agent_ctl`, jobs run when their dependencies match,
//! `job_status` published (DESIGN §8, the PADRES paper §4).
//!
//! The agent subscribes to `agent_ctl` publications for its name. A `deploy` carries an
//! [`EnvelopeBody`]: for each job, the agent advertises its `job_status` and issues its
//! composite dependency subscription (the generation's trigger and its predecessors'
//! statuses, joined on the generation id, ended by the generation's `APPL_END`); a
//! `deploy` of an application already deployed replaces it; `undeploy` withdraws it.
//!
//! A match of a job's dependency carries the generation's trigger, so its `gid` and
//! `date`. The agent claims the job for that generation in its [`Journal`] (a job runs at
//! most once per generation, however often it is notified, across restarts too) and:
//! - for the virtual jobs (`APPL_START`, `APPL_END`) publishes `succeeded` at once, and
//!   after `APPL_END` forgets the generation;
//! - for a job its run term does not select on the generation's date publishes `skipped`
//!   (which satisfies its successors, DESIGN §8);
//! - else runs it ([`crate::job`]), at most `max_parallel` at once, publishing `started` for
//!   each attempt and then its outcome (`succeeded`, `failed` or `timeout`, with `exit` and
//!   `attempt`).
//!
//! Statuses are published in the order they happen, by one task. A job found running in
//! the journal when the agent starts (it stopped while the job ran) is published `failed`
//! with exit -1: its outcome is unknown, and it is not run again.
//!
//! What is not built yet: acknowledging deployments, triggers from the agent (cron,
//! events), deployments kept across agent restarts, the operator's rerun and bypass.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::NaiveDate;
use tokio::sync::{Semaphore, mpsc};

use padres_client::{Client, ClientError, Notification};
use padres_lang::{MessageId, Name, Publication, Value};
use padres_workflow::calendar::parse_weekdays;
use padres_workflow::translate::status_advertisement;
use padres_workflow::{APPL_END, Calendar, EnvelopeBody, HolidayRule, JobInfo, RunTerm, Schedule};

use crate::job::{DEFAULT_OUTPUT_CAP, Run};
use crate::journal::{Claim, Journal};

/// How an agent runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Its name: the `agent` of the `agent_ctl` publications it takes and of the
    /// `job_status` it publishes.
    pub name: String,
    /// Its work directory: the journal, the jobs' output, relative working directories.
    pub work_dir: PathBuf,
    /// Most jobs running at once.
    pub max_parallel: usize,
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The broker refused a message or the connection is gone.
    #[error("broker: {0}")]
    Broker(#[from] ClientError),
    /// The journal cannot be read or written.
    #[error("journal: {0}")]
    Journal(#[from] rusqlite::Error),
    /// The work directory cannot be created.
    #[error("work directory {0}: {1}")]
    WorkDir(PathBuf, std::io::Error),
}

/// A job deployed here.
#[derive(Debug)]
struct Deployed {
    appl: String,
    job: String,
    /// `None` for a virtual job.
    info: Option<Arc<JobInfo>>,
    schedule: Option<Schedule>,
    calendar: Arc<Calendar>,
}

/// An application deployed here: its subscriptions and advertisements.
#[derive(Debug, Default)]
struct Application {
    subscriptions: Vec<MessageId>,
    advertisements: Vec<MessageId>,
}

/// A `job_status` publication to make.
#[derive(Debug)]
struct Status {
    appl: String,
    gid: String,
    job: String,
    status: &'static str,
    exit: i64,
    attempt: u32,
}

struct Agent {
    options: Options,
    client: Arc<Client>,
    journal: Arc<Mutex<Journal>>,
    jobs: HashMap<MessageId, Deployed>,
    applications: HashMap<String, Application>,
    /// (appl, gid, job) running now.
    running: Arc<Mutex<HashSet<(String, String, String)>>>,
    slots: Arc<Semaphore>,
    statuses: mpsc::UnboundedSender<Status>,
}

/// Serves as agent `options.name` over `client` until its connection ends for good.
///
/// # Errors
/// The broker refused the agent's own subscription, or the journal cannot be opened.
pub async fn serve(mut client: Client, options: Options) -> Result<(), AgentError> {
    std::fs::create_dir_all(&options.work_dir)
        .map_err(|e| AgentError::WorkDir(options.work_dir.clone(), e))?;
    let journal = Journal::open(&options.work_dir)?;
    let mut notifications = client.take_notifications();
    let client = Arc::new(client);
    let (statuses, mut to_publish) = mpsc::unbounded_channel::<Status>();
    let name = options.name.clone();
    let publisher = {
        let client = client.clone();
        tokio::spawn(async move {
            while let Some(status) = to_publish.recv().await {
                let Ok(publication) = status_publication(&name, &status) else { continue };
                if let Err(e) = client.publish(publication).await {
                    tracing::warn!(
                        "publishing the status of {}/{}/{}: {e}",
                        status.appl,
                        status.gid,
                        status.job
                    );
                }
            }
        })
    };
    let mut agent = Agent {
        slots: Arc::new(Semaphore::new(options.max_parallel.max(1))),
        options,
        client,
        journal: Arc::new(Mutex::new(journal)),
        jobs: HashMap::new(),
        applications: HashMap::new(),
        running: Arc::default(),
        statuses,
    };
    agent.report_interrupted().await?;
    let ctl = format!("s [class,eq,'agent_ctl'],[agent,eq,{}]", Value::str(&agent.options.name));
    agent.client.send(&ctl).await?;
    while let Some(notification) = notifications.next().await {
        match notification {
            Notification::Publication { publication, .. } => agent.control(&publication).await,
            Notification::Composite { sub, pubs } => agent.dependency(&sub, &pubs),
            Notification::EndOfHistory { .. } => {}
        }
    }
    drop(agent);
    let _ = publisher.await;
    Ok(())
}

/// The `job_status` publication of `status`, by agent `agent`.
fn status_publication(agent: &str, status: &Status) -> Result<Publication, padres_lang::InvalidMessage> {
    let name = |n: &str| Name::interned(n);
    Publication::new(vec![
        (name("class")?, Value::str("job_status")),
        (name("appl")?, Value::str(&status.appl)),
        (name("gid")?, Value::str(&status.gid)),
        (name("job")?, Value::str(&status.job)),
        (name("agent")?, Value::str(agent)),
        (name("status")?, Value::str(status.status)),
        (name("exit")?, Value::Int(status.exit)),
        (name("attempt")?, Value::Int(i64::from(status.attempt))),
    ])
}

fn text<'a>(publication: &'a Publication, attr: &str) -> Option<&'a str> {
    publication.get(attr).and_then(Value::as_str)
}

impl Agent {
    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Jobs that were running when the agent last stopped: `failed`, not run again (their
    /// status advertised first: the agent's deployments are not kept across restarts).
    async fn report_interrupted(&self) -> Result<(), AgentError> {
        let interrupted = self.journal().interrupted()?;
        for entry in interrupted {
            self.client.advertise(status_advertisement(&entry.appl, &entry.job)).await?;
            tracing::warn!(
                "{}/{}/{}: the agent stopped while it ran (attempt {}); reported failed, not run again",
                entry.appl,
                entry.gid,
                entry.job,
                entry.attempt
            );
            self.journal().end(&entry.appl, &entry.gid, &entry.job, "failed", -1, entry.attempt)?;
            let status = Status {
                appl: entry.appl,
                gid: entry.gid,
                job: entry.job,
                status: "failed",
                exit: -1,
                attempt: entry.attempt,
            };
            let _ = self.statuses.send(status);
        }
        Ok(())
    }

    /// An `agent_ctl` publication for this agent.
    async fn control(&mut self, publication: &Publication) {
        let (Some(cmd), Some(appl)) = (text(publication, "cmd"), text(publication, "appl")) else {
            tracing::warn!("an agent_ctl publication without cmd or appl: {publication}");
            return;
        };
        let appl = appl.to_owned();
        match cmd {
            "deploy" | "modify" => {
                let body = text(publication, "body").unwrap_or_default();
                match EnvelopeBody::from_json(body) {
                    Ok(body) => {
                        self.undeploy(&appl).await;
                        if let Err(e) = self.deploy(body).await {
                            tracing::warn!("deploying {appl}: {e}");
                        }
                    }
                    Err(e) => tracing::warn!("deploying {appl}: {e}"),
                }
            }
            "undeploy" => self.undeploy(&appl).await,
            other => tracing::warn!("agent_ctl for {appl}: unknown cmd '{other}'"),
        }
    }

    async fn deploy(&mut self, body: EnvelopeBody) -> Result<(), String> {
        let calendar = Arc::new(Calendar {
            name: body.appl.clone(),
            workdays: parse_weekdays(&body.workdays)?,
            holidays: body
                .holidays
                .iter()
                .map(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|e| format!("holiday {d}: {e}")))
                .collect::<Result<_, _>>()?,
        });
        let mut application = Application::default();
        let mut jobs = Vec::new();
        for job in body.jobs {
            let schedule = job.info.as_ref().map(schedule_of).transpose()?;
            let adv = self.client.send(&job.advertisement).await.map_err(|e| e.to_string())?;
            application.advertisements.extend(adv);
            let sub = self.client.send(&job.subscription).await.map_err(|e| e.to_string())?;
            let sub = sub.ok_or("the broker gave the dependency subscription no id")?;
            application.subscriptions.push(sub.clone());
            let info = job.info.map(Arc::new);
            jobs.push((
                sub,
                Deployed {
                    appl: body.appl.clone(),
                    job: job.job,
                    info,
                    schedule,
                    calendar: calendar.clone(),
                },
            ));
        }
        self.jobs.extend(jobs);
        tracing::info!("deployed {} ({} jobs here)", body.appl, application.subscriptions.len());
        self.applications.insert(body.appl, application);
        Ok(())
    }

    async fn undeploy(&mut self, appl: &str) {
        let Some(application) = self.applications.remove(appl) else { return };
        for sub in application.subscriptions {
            self.jobs.remove(&sub);
            let _ = self.client.unsubscribe(sub).await;
        }
        for adv in application.advertisements {
            let _ = self.client.unadvertise(adv).await;
        }
    }

    /// A match of dependency `sub`: the job's generation is ready for it.
    fn dependency(&self, sub: &MessageId, pubs: &[(u32, Publication)]) {
        let Some(deployed) = self.jobs.get(sub) else { return };
        let Some(trigger) = pubs.iter().map(|(_, p)| p).find(|p| p.class() == "trigger") else {
            tracing::warn!("{}/{}: a dependency match without its trigger", deployed.appl, deployed.job);
            return;
        };
        let (Some(gid), date) = (text(trigger, "gid"), text(trigger, "date")) else { return };
        let key = (deployed.appl.clone(), gid.to_owned(), deployed.job.clone());
        if !self.running.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone()) {
            return;
        }
        let claim = self.journal().claim(&key.0, &key.1, &key.2);
        match claim {
            Ok(Claim::New) => {}
            Ok(Claim::Ended { .. } | Claim::Unfinished { .. }) => return self.not_running(&key),
            Err(e) => {
                tracing::error!("{}/{}/{}: the journal failed, not run: {e}", key.0, key.1, key.2);
                return self.not_running(&key);
            }
        }
        let (appl, gid, job) = key.clone();
        let end = |status: &'static str, exit: i64, attempt: u32| Status {
            appl: appl.clone(),
            gid: gid.clone(),
            job: job.clone(),
            status,
            exit,
            attempt,
        };
        let (Some(info), Some(schedule)) = (&deployed.info, &deployed.schedule) else {
            // A virtual job.
            self.finish(&key, end("succeeded", 0, 0));
            if job == APPL_END
                && let Err(e) = self.journal().forget(&appl, &gid)
            {
                tracing::warn!("{appl}/{gid}: forgetting the generation: {e}");
            }
            return self.not_running(&key);
        };
        let day = date.and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
        let Some(day) = day else {
            tracing::warn!("{appl}/{gid}/{job}: the trigger has no date (YYYY-MM-DD): failed");
            self.finish(&key, end("failed", -1, 0));
            return self.not_running(&key);
        };
        if !schedule.runs_on(day, &deployed.calendar) {
            self.finish(&key, end("skipped", 0, 0));
            return self.not_running(&key);
        }
        let (info, journal, statuses, slots, running) = (
            info.clone(),
            self.journal.clone(),
            self.statuses.clone(),
            self.slots.clone(),
            self.running.clone(),
        );
        let (work_dir, date) = (self.options.work_dir.clone(), day.format("%Y-%m-%d").to_string());
        tokio::spawn(async move {
            let _slot = slots.acquire_owned().await;
            let output = work_dir.join("output").join(&appl).join(&gid).join(&job);
            let run = Run {
                info: &info,
                date: &date,
                gid: &gid,
                work_dir: &work_dir,
                output: &output,
                output_cap: DEFAULT_OUTPUT_CAP,
            };
            let attempts = run
                .run(|n| {
                    let journal = journal.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Err(e) = journal.attempt(&appl, &gid, &job, n) {
                        tracing::warn!("{appl}/{gid}/{job}: journal: {e}");
                    }
                    let _ = statuses.send(Status {
                        appl: appl.clone(),
                        gid: gid.clone(),
                        job: job.clone(),
                        status: "started",
                        exit: 0,
                        attempt: n,
                    });
                })
                .await;
            let last = attempts.last().expect("at least one attempt");
            let status = Status {
                appl: appl.clone(),
                gid: gid.clone(),
                job: job.clone(),
                status: last.ended.status(),
                exit: last.ended.exit(),
                attempt: last.number,
            };
            let ended = journal.lock().unwrap_or_else(PoisonError::into_inner).end(
                &appl,
                &gid,
                &job,
                status.status,
                status.exit,
                status.attempt,
            );
            if let Err(e) = ended {
                tracing::warn!("{appl}/{gid}/{job}: journal: {e}");
            }
            let _ = statuses.send(status);
            running.lock().unwrap_or_else(PoisonError::into_inner).remove(&(appl, gid, job));
        });
    }

    /// `key` (appl, gid, job) is no longer running here.
    fn not_running(&self, key: &(String, String, String)) {
        self.running.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }

    /// `key` ended without running a process: journal, then status.
    fn finish(&self, key: &(String, String, String), status: Status) {
        if let Err(e) = self.journal().end(&key.0, &key.1, &key.2, status.status, status.exit, status.attempt)
        {
            tracing::warn!("{}/{}/{}: journal: {e}", key.0, key.1, key.2);
        }
        let _ = self.statuses.send(status);
    }
}

/// A job's schedule from its envelope's text.
fn schedule_of(info: &JobInfo) -> Result<Schedule, String> {
    Ok(Schedule {
        run: RunTerm::from_str(&info.run)?,
        except: info.except.as_deref().map(RunTerm::from_str).transpose()?,
        holiday: HolidayRule::from_str(&info.holiday)?,
    })
}
