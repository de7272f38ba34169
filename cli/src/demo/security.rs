//! The demo federation's security, as `docs/security.md` sets one up: a federation CA that
//! certifies every broker (mutual TLS between them), tokens for two agents, the operator
//! and a monitor, a client certificate from the CA for the third agent, and permits that
//! hold each principal to its part. Everything is written under `DIR/security` as a real
//! deployment keeps it: `broker.toml` (what every broker reads), `ca/`, a token file per
//! principal (`NAME.token`) and the certificate's directory (`agent-3/`).
//!
//! After the run, [`Security::check`] tries what the permits forbid and prints each
//! refusal: a client without a token, an agent advertising another agent's statuses, an
//! agent subscribing to another agent's commands, the monitor triggering a generation or
//! reading deployments; and what they allow, the monitor reading statuses from history.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use padres_broker::config::Config;
use padres_client::{ClientError, Connect, Notification};
use padres_lang::Timestamp;
use padres_lang::wire::ErrorCode;

/// The agent that proves its principal with a client certificate; the others use tokens.
const CERTIFIED: &str = "agent-3";

/// The permits (the principals' tokens and the CA are added when written).
const PERMITS: &str = r#"
[auth.groups]
agents = ["agent-1", "agent-2", "agent-3"]

# An agent publishes only what names itself (its statuses, replies and load reports),
# hears only its own commands, and follows every generation.
[[auth.permit]]
to = ["agents"]
advertise = ["[class,eq,'job_status'],[agent,eq,'${principal}']",
             "[class,eq,'agent_reply'],[agent,eq,'${principal}']",
             "[class,eq,'agent_load'],[agent,eq,'${principal}']",
             "[class,eq,'trigger']"]
subscribe = ["[class,eq,'agent_ctl'],[agent,eq,'${principal}']",
             "[class,eq,'job_status']", "[class,eq,'trigger']"]
history = true

# The operator deploys and triggers through agent_ctl, and reads everything back,
# the routing tables too.
[[auth.permit]]
to = ["operator"]
advertise = ["[class,eq,'agent_ctl']", "[class,eq,'trigger']"]
subscribe = ["[class,eq,'agent_ctl']", "[class,eq,'agent_reply']", "[class,eq,'job_status']",
             "[class,eq,'trigger']", "[class,eq,'agent_load']"]
history = true
routes = true

# A monitor reads statuses, live and from history, and nothing else.
[[auth.permit]]
to = ["monitor"]
subscribe = ["[class,eq,'job_status']"]
history = true
"#;

/// Who holds a token.
const WITH_TOKENS: [&str; 4] = ["agent-1", "agent-2", "operator", "monitor"];

/// The demo's credentials and the brokers' shared configuration.
#[derive(Debug)]
pub(super) struct Security {
    /// `DIR/security`.
    dir: PathBuf,
    /// Principal → token.
    tokens: BTreeMap<&'static str, String>,
}

/// A token: 24 bytes from the operating system's random generator, in hex.
fn new_token() -> Result<String, String> {
    padres_broker::auth::new_token().map_err(|e| e.to_string())
}

/// Writes `text` into `path`, readable by its owner only.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

impl Security {
    /// Makes the CA, a certificate for each of `brokers` in its data directory under
    /// `broker_root`, the third agent's client certificate, the tokens and `broker.toml`.
    pub(super) fn create(dir: &Path, brokers: &[String], broker_root: &Path) -> Result<Self, String> {
        use padres_broker::net::cert;
        let dir = dir.join("security");
        let ca = dir.join("ca");
        cert::make_ca(&ca, "padres demo federation CA", false).map_err(|e| e.to_string())?;
        for broker in brokers {
            cert::issue(&ca, broker, &[], &broker_root.join(broker), false).map_err(|e| e.to_string())?;
        }
        cert::issue_client(&ca, CERTIFIED, &dir.join(CERTIFIED), false).map_err(|e| e.to_string())?;
        let mut tokens = BTreeMap::new();
        let mut hashes = String::new();
        for principal in WITH_TOKENS {
            let token = new_token()?;
            write_private(&dir.join(format!("{principal}.token")), &format!("{token}\n"))?;
            let hash = padres_broker::auth::hash_token(&token).map_err(|e| e.to_string())?;
            hashes.push_str(&format!("{principal} = \"{hash}\"\n"));
            tokens.insert(principal, token);
        }
        let config = format!(
            "# Read by every broker of the demo (docs/security.md).\n\
             federation_ca = {ca}\n\n\
             [auth]\n\
             anonymous = false\n\n\
             # Argon2id hashes of the tokens in {dir}/NAME.token ({CERTIFIED} has a client\n\
             # certificate from the CA instead, in {dir}/{CERTIFIED}).\n\
             [auth.tokens]\n{hashes}{PERMITS}",
            ca = toml_string(&ca.join("ca.pem")),
            dir = dir.display(),
        );
        write_private(&dir.join("broker.toml"), &config)?;
        Ok(Self { dir, tokens })
    }

    /// Broker `name`'s configuration: `broker.toml`, with its own name, data directory
    /// under `root`, neighbour and history filters.
    pub(super) fn broker_config(
        &self,
        name: &str,
        root: &Path,
        neighbour: Option<SocketAddr>,
    ) -> Result<Config, String> {
        let mut config = Config::from_file(&self.dir.join("broker.toml")).map_err(|e| e.to_string())?;
        config.name = name.to_owned();
        config.listen = ([127, 0, 0, 1], 0).into();
        config.data_dir = root.join(name);
        config.neighbours = neighbour.map(|a| format!("quic://{a}")).into_iter().collect();
        // What agents, `padres workflow status` and the summary read back.
        config.workflows = true;
        Ok(config)
    }

    /// How `principal` connects to the broker at `addr`: its token, or its certificate.
    pub(super) fn connect(&self, principal: &str, addr: SocketAddr) -> Result<Connect, String> {
        let connect = Connect::new(addr).name(principal);
        match self.tokens.get(principal) {
            Some(token) => Ok(connect.token(token)),
            None => {
                let certificate = self.dir.join(principal);
                connect
                    .certificate(&certificate.join("cert.pem"), &certificate.join("key.pem"))
                    .map_err(|e| format!("{principal}: {e}"))
            }
        }
    }

    /// `principal`'s token.
    pub(super) fn token(&self, principal: &str) -> Option<String> {
        self.tokens.get(principal).cloned()
    }

    /// Where `principal`'s token is kept.
    pub(super) fn token_file(&self, principal: &str) -> PathBuf {
        self.dir.join(format!("{principal}.token"))
    }

    /// `broker.toml`.
    pub(super) fn config_file(&self) -> PathBuf {
        self.dir.join("broker.toml")
    }

    /// Tries, at the broker at `addr`, what the permits forbid and one thing they allow
    /// (the monitor reading the statuses published since `since`), printing each outcome;
    /// returns what did not turn out as the permits say.
    pub(super) async fn check(&self, addr: SocketAddr, since: Timestamp) -> Vec<String> {
        let mut problems = Vec::new();
        out!("\npermissions (docs/security.md; {}):", self.config_file().display());
        let anonymous = Connect::new(addr).name("guest").reconnect(false).connect().await.map(|_| ());
        report("a client without a token connecting", anonymous, &mut problems);
        let forbidden: [(&str, &str, &str); 4] = [
            (
                "agent-2",
                "agent-2 advertising agent-1's statuses",
                "a [class,eq,'job_status'],[appl,eq,'payroll'],[gid,isPresent,''],[job,eq,'A'],\
                 [agent,eq,'agent-1'],[status,isPresent,'']",
            ),
            (
                "agent-3",
                "agent-3 subscribing to agent-1's commands",
                "s [class,eq,'agent_ctl'],[agent,eq,'agent-1']",
            ),
            (
                "monitor",
                "the monitor triggering payroll",
                "a [class,eq,'trigger'],[appl,eq,'payroll'],[version,isPresent,''],[gid,isPresent,''],\
                 [date,isPresent,'']",
            ),
            ("monitor", "the monitor reading deployments", "s [class,eq,'agent_ctl'],[appl,eq,'payroll']"),
        ];
        for (principal, what, request) in forbidden {
            let outcome = match self.connect(principal, addr) {
                Ok(connect) => match connect.reconnect(false).connect().await {
                    Ok(client) => client.send(request).await.map(|_| ()),
                    Err(e) => Err(e),
                },
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            report(what, outcome, &mut problems);
        }
        match self.monitor_history(addr, since).await {
            Ok(count) => out!("  the monitor reading statuses from history: allowed, {count} statuses"),
            Err(e) => {
                out!("  the monitor reading statuses from history: {e}");
                problems.push(format!("the monitor could not read statuses from history: {e}"));
            }
        }
        problems
    }

    /// How many statuses of payroll the brokers' history holds since `since`, as the
    /// monitor reads them.
    async fn monitor_history(&self, addr: SocketAddr, since: Timestamp) -> Result<u64, String> {
        let mut client =
            self.connect("monitor", addr)?.reconnect(false).connect().await.map_err(|e| e.to_string())?;
        let request =
            format!("s [class,eq,'job_status'],[appl,eq,'payroll'],[time,>=,{}]", since.to_rfc3339());
        let sub = client
            .send(&request)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the broker gave the subscription no id".to_owned())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::time::timeout_at(deadline, client.next_notification()).await {
                Ok(Some(Notification::EndOfHistory { sub: ended, count, .. })) if ended == sub => {
                    return Ok(count);
                }
                Ok(Some(_)) => {}
                Ok(None) => return Err("the broker closed the connection".to_owned()),
                Err(_) => return Err("no end of history within 10 s".to_owned()),
            }
        }
    }
}

/// Prints how `what` turned out: refused (as it should be, with the broker's reason) or
/// not (a problem).
fn report(what: &str, outcome: Result<(), ClientError>, problems: &mut Vec<String>) {
    match outcome {
        Err(ClientError::Refused { code: ErrorCode::Forbidden, message }) => {
            out!("  {what}: refused: {}", first_clause(&message));
        }
        Err(other) => {
            out!("  {what}: failed: {other}");
            problems.push(format!("{what}: expected a refusal, got {other}"));
        }
        Ok(()) => {
            out!("  {what}: ALLOWED");
            problems.push(format!("{what} was allowed"));
        }
    }
}

/// A refusal's reason up to the permits it lists (which the configuration shows).
fn first_clause(message: &str) -> &str {
    message.split(" (its ").next().unwrap_or(message)
}

/// `path` as a TOML string.
fn toml_string(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}
