//! Commands to agents and their answers: the `agent_ctl` and `agent_reply` classes.
//!
//! An operator (`padres workflow`) publishes `agent_ctl` [agent, cmd, appl, ref, body, gid,
//! job] to one agent:
//! - `deploy` (and `modify`, its synonym): `body` is the agent's [`EnvelopeBody`]; a deploy
//!   whose body equals the one deployed is answered without redeploying, so an operator
//!   may repeat it until it is answered;
//! - `undeploy`: the application's jobs are withdrawn from the agent;
//! - `rerun`: job `job` of generation `gid`, which failed or timed out, runs again;
//! - `bypass`: job `job` of generation `gid` is published `succeeded` without running (with
//!   the reason `bypassed`), so that its successors proceed;
//! - `drain` (with `appl` [`ANY_APPL`]): the agent takes no new pool jobs, finishes what it
//!   has and leaves (`docs/pools.md`);
//! - `trigger`: the application's home agent (the one running `APPL_START`) publishes the
//!   trigger of generation `gid` run on `date`. Triggers come from the home agent, which
//!   advertises them for as long as the application is deployed there, rather than from
//!   short-lived clients: an advertisement that comes and goes moves the composite
//!   patterns it feeds, and a pattern moved loses its partial matches
//!   (`docs/composite.md`).
//!
//! The agent answers each that names its application and command (one that does not
//! cannot be answered to anyone; it is logged) with one `agent_reply` [agent, appl, cmd,
//! ref, outcome, reason]:
//! `outcome` is `ok` or `refused` (`reason` says why). `ref` is the operator's: it names the
//! command answered, so an operator sending the same command again (the agent may not have
//! subscribed yet) knows an answer to any copy.

use padres_lang::{Advertisement, InvalidMessage, Name, Publication, Value};

use super::translate::EnvelopeBody;

/// The class of commands to agents.
pub const CONTROL: &str = "agent_ctl";
/// The class of agents' answers.
pub const REPLY: &str = "agent_reply";

/// What an `agent_ctl` publication asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Deploy (or replace) the application's jobs on this agent.
    Deploy(Box<EnvelopeBody>),
    /// Withdraw the application's jobs.
    Undeploy,
    /// Run a failed job of a generation again.
    Rerun {
        /// The generation.
        gid: String,
        /// The job.
        job: String,
    },
    /// Mark a job of a generation done without running it.
    Bypass {
        /// The generation.
        gid: String,
        /// The job.
        job: String,
    },
    /// Start a generation (the home agent publishes its trigger).
    Trigger {
        /// The generation.
        gid: String,
        /// Its run day, YYYY-MM-DD.
        date: String,
    },
    /// Drain the agent: it takes no new pool jobs, finishes those it has, and leaves
    /// (its `appl` is [`ANY_APPL`]).
    Drain,
}

/// The `appl` of a command to the agent as a whole (`drain`).
pub const ANY_APPL: &str = "*";

impl Command {
    /// The `cmd` attribute.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Deploy(_) => "deploy",
            Self::Undeploy => "undeploy",
            Self::Rerun { .. } => "rerun",
            Self::Bypass { .. } => "bypass",
            Self::Trigger { .. } => "trigger",
            Self::Drain => "drain",
        }
    }
}

/// A command for one agent, as published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    /// The agent addressed.
    pub agent: String,
    /// The application.
    pub appl: String,
    /// The operator's reference, echoed in the reply.
    pub reference: String,
    /// What to do.
    pub command: Command,
}

fn text<'a>(publication: &'a Publication, attr: &str) -> Option<&'a str> {
    publication.get(attr).and_then(Value::as_str)
}

fn attr(name: &str, value: &str) -> Result<(Name, Value), InvalidMessage> {
    Ok((Name::interned(name)?, Value::str(value)))
}

/// The advertisement an operator issues before publishing commands.
pub fn control_advertisement() -> Advertisement {
    "[class,eq,'agent_ctl'],[agent,isPresent,''],[cmd,isPresent,''],[appl,isPresent,''],\
     [ref,isPresent,''],[body,isPresent,''],[gid,isPresent,''],[job,isPresent,''],[date,isPresent,'']"
        .parse()
        .unwrap_or_else(|e| panic!("the agent_ctl advertisement: {e}"))
}

/// The subscription an agent named `agent` takes its commands with, in command form.
pub fn control_subscription(agent: &str) -> String {
    format!("s [class,eq,'agent_ctl'],[agent,eq,{}]", Value::str(agent))
}

impl Control {
    /// Reads an `agent_ctl` publication.
    ///
    /// # Errors
    /// A missing attribute, an unknown command or a body that is not an envelope body, in
    /// words (for the refusal).
    pub fn from_publication(publication: &Publication) -> Result<Self, String> {
        let needed = |name: &str| text(publication, name).ok_or_else(|| format!("agent_ctl without {name}"));
        let agent = needed("agent")?.to_owned();
        let appl = needed("appl")?.to_owned();
        let reference = text(publication, "ref").unwrap_or_default().to_owned();
        let generation_job = || -> Result<(String, String), String> {
            Ok((needed("gid")?.to_owned(), needed("job")?.to_owned()))
        };
        let command = match needed("cmd")? {
            "deploy" | "modify" => {
                let body = EnvelopeBody::from_json(needed("body")?)?;
                if body.appl != appl {
                    return Err(format!("the body deploys {}, not {appl}", body.appl));
                }
                Command::Deploy(Box::new(body))
            }
            "undeploy" => Command::Undeploy,
            "rerun" => {
                let (gid, job) = generation_job()?;
                Command::Rerun { gid, job }
            }
            "bypass" => {
                let (gid, job) = generation_job()?;
                Command::Bypass { gid, job }
            }
            "trigger" => {
                Command::Trigger { gid: needed("gid")?.to_owned(), date: needed("date")?.to_owned() }
            }
            "drain" => Command::Drain,
            other => {
                return Err(format!(
                    "unknown cmd '{other}' (deploy, undeploy, rerun, bypass, trigger, drain)"
                ));
            }
        };
        Ok(Self { agent, appl, reference, command })
    }

    /// The `agent_ctl` publication of this command.
    ///
    /// # Errors
    /// A name too long for a message.
    pub fn publication(&self) -> Result<Publication, InvalidMessage> {
        let mut attrs = vec![
            attr("class", CONTROL)?,
            attr("agent", &self.agent)?,
            attr("cmd", self.command.name())?,
            attr("appl", &self.appl)?,
            attr("ref", &self.reference)?,
        ];
        match &self.command {
            Command::Deploy(body) => attrs.push(attr("body", &body.to_json())?),
            Command::Undeploy | Command::Drain => {}
            Command::Rerun { gid, job } | Command::Bypass { gid, job } => {
                attrs.push(attr("gid", gid)?);
                attrs.push(attr("job", job)?);
            }
            Command::Trigger { gid, date } => {
                attrs.push(attr("gid", gid)?);
                attrs.push(attr("date", date)?);
            }
        }
        Publication::new(attrs)
    }
}

/// The advertisement of `appl`'s triggers (its home agent's).
pub fn trigger_advertisement(appl: &str) -> Advertisement {
    let text = format!(
        "[class,eq,'trigger'],[appl,eq,{}],[version,isPresent,''],[gid,isPresent,''],[date,isPresent,'']",
        Value::str(appl)
    );
    text.parse().unwrap_or_else(|e| panic!("the trigger advertisement {text}: {e}"))
}

/// The trigger of generation `gid` of version `version` of `appl`, run on `date`
/// (YYYY-MM-DD).
///
/// # Errors
/// A name too long for a message.
pub fn trigger_publication(
    appl: &str,
    version: &str,
    gid: &str,
    date: &str,
) -> Result<Publication, InvalidMessage> {
    Publication::new(vec![
        attr("class", "trigger")?,
        attr("appl", appl)?,
        attr("version", version)?,
        attr("gid", gid)?,
        attr("date", date)?,
    ])
}

/// An agent's answer to a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The agent answering.
    pub agent: String,
    /// The application.
    pub appl: String,
    /// The command answered (`deploy`, …).
    pub cmd: String,
    /// The command's reference.
    pub reference: String,
    /// `None` if done; else why it was refused.
    pub refused: Option<String>,
}

/// The advertisement of agent `agent`'s replies.
pub fn reply_advertisement(agent: &str) -> Advertisement {
    let text = format!(
        "[class,eq,'agent_reply'],[agent,eq,{}],[appl,isPresent,''],[cmd,isPresent,''],[ref,isPresent,''],\
         [outcome,isPresent,''],[reason,isPresent,'']",
        Value::str(agent)
    );
    text.parse().unwrap_or_else(|e| panic!("the agent_reply advertisement {text}: {e}"))
}

/// The subscription an operator receives the replies about `appl` with, in command form.
pub fn reply_subscription(appl: &str) -> String {
    format!("s [class,eq,'agent_reply'],[appl,eq,{}]", Value::str(appl))
}

impl Reply {
    /// The reply to `control` by its agent.
    pub fn to(control: &Control, refused: Option<String>) -> Self {
        Self {
            agent: control.agent.clone(),
            appl: control.appl.clone(),
            cmd: control.command.name().to_owned(),
            reference: control.reference.clone(),
            refused,
        }
    }

    /// The `agent_reply` publication.
    ///
    /// # Errors
    /// A name or reason too long for a message.
    pub fn publication(&self) -> Result<Publication, InvalidMessage> {
        Publication::new(vec![
            attr("class", REPLY)?,
            attr("agent", &self.agent)?,
            attr("appl", &self.appl)?,
            attr("cmd", &self.cmd)?,
            attr("ref", &self.reference)?,
            attr("outcome", if self.refused.is_some() { "refused" } else { "ok" })?,
            attr("reason", self.refused.as_deref().unwrap_or_default())?,
        ])
    }

    /// Reads an `agent_reply` publication; `None` if it is not one.
    pub fn from_publication(publication: &Publication) -> Option<Self> {
        if publication.class() != REPLY {
            return None;
        }
        let get = |name: &str| text(publication, name).map(str::to_owned);
        let refused = match text(publication, "outcome")? {
            "ok" => None,
            _ => Some(get("reason").unwrap_or_default()),
        };
        Some(Self {
            agent: get("agent")?,
            appl: get("appl")?,
            cmd: get("cmd")?,
            reference: get("ref").unwrap_or_default(),
            refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_application, translate};
    use padres_lang::semantics::conforms;

    const XML: &str = "<application name=\"p\" tz=\"UTC\"><job name=\"A\" run=\"daily\" agent=\"a1\">\
                       <command>true</command></job></application>";

    #[test]
    fn every_command_reads_back_as_published_and_conforms_to_the_advertisement() {
        let deployment = translate(&parse_application(XML).expect("valid")).expect("translates");
        let body = EnvelopeBody::from_json(&deployment.envelopes[0].body("p")).expect("a body");
        let commands = [
            Command::Deploy(Box::new(body)),
            Command::Undeploy,
            Command::Rerun { gid: "g1".into(), job: "A".into() },
            Command::Bypass { gid: "g1".into(), job: "A".into() },
            Command::Trigger { gid: "g1".into(), date: "2026-11-27".into() },
        ];
        for command in commands {
            let control = Control { agent: "a1".into(), appl: "p".into(), reference: "r1".into(), command };
            let publication = control.publication().expect("a publication");
            assert!(conforms(&publication, &control_advertisement()), "{publication}");
            assert_eq!(Control::from_publication(&publication).expect("reads back"), control);
            for refused in [None, Some("no such job".to_owned())] {
                let reply = Reply::to(&control, refused);
                let publication = reply.publication().expect("a reply");
                assert!(conforms(&publication, &reply_advertisement("a1")), "{publication}");
                assert_eq!(Reply::from_publication(&publication), Some(reply));
            }
        }
    }

    #[test]
    fn a_bad_command_is_refused_in_words() {
        let control = |text: &str| Control::from_publication(&text.parse().expect("a publication"));
        let error = control("[class,'agent_ctl'],[agent,'a1'],[appl,'p'],[cmd,'launch']").unwrap_err();
        assert!(error.contains("unknown cmd 'launch'"), "{error}");
        let error =
            control("[class,'agent_ctl'],[agent,'a1'],[appl,'p'],[cmd,'rerun'],[gid,'g']").unwrap_err();
        assert!(error.contains("without job"), "{error}");
        let error =
            control("[class,'agent_ctl'],[agent,'a1'],[appl,'p'],[cmd,'deploy'],[body,'{']").unwrap_err();
        assert!(error.contains("bad agent_ctl body"), "{error}");
    }
}
