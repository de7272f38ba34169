//! Pools (DESIGN §8, `docs/pools.md`): agents' load reports, a member's measure of its
//! own load, and the home agent's view of a pool's members with the placement policies.
//! No I/O here: the agent's loop publishes and reads the `agent_load` publications.
//!
//! Every agent announces itself when it starts, and then every `period`, with an
//! `agent_load` publication [agent, broker, pools, incarnation, state, period, capacity,
//! running, queued, delay_short, delay_long, arrivals]: `pools` lists its pools between
//! commas (`,ledger,etl,`) so that one subscription per pool (`str-contains ',P,'`) takes
//! every member's reports whatever its other pools; `incarnation` is when this run of the
//! agent started (epoch milliseconds), so a restarted agent is a new member; `state` is
//! `up`, `leaving` (draining: it finishes what it has and takes nothing new) or `left`.
//! Delays are queueing delays (from a job's arrival at the agent to its start), in
//! milliseconds, averaged over [`SHORT_WINDOW`] and [`LONG_WINDOW`], counting the jobs
//! still waiting at their age so far; `arrivals` is jobs per second over the short window.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use padres_lang::{Advertisement, InvalidMessage, Name, Publication, Value};
use padres_workflow::model::Policy;
use tokio::time::Instant;

/// The class of agents' load reports.
pub const LOAD: &str = "agent_load";

/// The short window of the delays and arrival rate.
pub const SHORT_WINDOW: Duration = Duration::from_secs(10);
/// The long window of the delays.
pub const LONG_WINDOW: Duration = Duration::from_secs(60);

/// The default period of load reports.
pub const LOAD_PERIOD: Duration = Duration::from_secs(1);

/// Reports missed before a member is considered gone, by default.
pub const SILENCE: u32 = 3;

/// The largest count (jobs, milliseconds) a load report is taken to say.
const COUNT_MOST: i64 = 1 << 40;

/// Most pool jobs a home agent holds back while every member is at its limit; beyond, a
/// job goes to the member with the most room (it waits in that member's queue).
pub const ADMISSION: usize = 10_000;

/// Where a member stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// Takes work.
    Up,
    /// Draining: finishes what it has, takes nothing new.
    Leaving,
    /// Gone, by its own word.
    Left,
}

impl MemberState {
    /// As published.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Up => "up",
            Self::Leaving => "leaving",
            Self::Left => "left",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "up" => Some(Self::Up),
            "leaving" => Some(Self::Leaving),
            "left" => Some(Self::Left),
            _ => None,
        }
    }
}

/// One `agent_load` publication.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// The agent.
    pub agent: String,
    /// The broker it is connected to, as it was given.
    pub broker: String,
    /// Its pools.
    pub pools: Vec<String>,
    /// When this run of it started (epoch milliseconds).
    pub incarnation: i64,
    /// Up, leaving or left.
    pub state: MemberState,
    /// Its report period, in milliseconds.
    pub period_ms: i64,
    /// Most jobs it runs at once.
    pub capacity: i64,
    /// Jobs running.
    pub running: i64,
    /// Jobs waiting for a slot.
    pub queued: i64,
    /// Mean queueing delay over the short window, milliseconds.
    pub delay_short_ms: f64,
    /// Mean queueing delay over the long window, milliseconds.
    pub delay_long_ms: f64,
    /// Jobs arrived per second over the short window.
    pub arrivals: f64,
}

/// The advertisement of agent `agent`'s load reports.
pub fn load_advertisement(agent: &str) -> Advertisement {
    let text = format!(
        "[class,eq,'{LOAD}'],[agent,eq,{}],[broker,isPresent,''],[pools,isPresent,''],\
         [incarnation,isPresent,0],[state,isPresent,''],[period,isPresent,0],[capacity,isPresent,0],\
         [running,isPresent,0],[queued,isPresent,0],[delay_short,isPresent,0.0],\
         [delay_long,isPresent,0.0],[arrivals,isPresent,0.0]",
        Value::str(agent)
    );
    text.parse().unwrap_or_else(|e| panic!("the agent_load advertisement {text}: {e}"))
}

/// The subscription (command form) to the load reports of pool `pool`'s members.
pub fn pool_subscription(pool: &str) -> String {
    format!("s [class,eq,'{LOAD}'],[pools,str-contains,{}]", Value::str(&format!(",{pool},")))
}

impl Load {
    /// As published.
    ///
    /// # Errors
    /// A name or value the language refuses (an agent name is validated before).
    pub fn publication(&self) -> Result<Publication, InvalidMessage> {
        let name = |n: &str| Name::interned(n);
        let pools = format!(",{},", self.pools.join(","));
        Publication::new(vec![
            (name("class")?, Value::str(LOAD)),
            (name("agent")?, Value::str(&self.agent)),
            (name("broker")?, Value::str(&self.broker)),
            (name("pools")?, Value::str(if self.pools.is_empty() { "," } else { &pools })),
            (name("incarnation")?, Value::Int(self.incarnation)),
            (name("state")?, Value::str(self.state.as_str())),
            (name("period")?, Value::Int(self.period_ms)),
            (name("capacity")?, Value::Int(self.capacity)),
            (name("running")?, Value::Int(self.running)),
            (name("queued")?, Value::Int(self.queued)),
            (name("delay_short")?, Value::Float(finite(self.delay_short_ms))),
            (name("delay_long")?, Value::Float(finite(self.delay_long_ms))),
            (name("arrivals")?, Value::Float(finite(self.arrivals))),
        ])
    }

    /// Reads an `agent_load` publication; `None` for anything else.
    pub fn from_publication(publication: &Publication) -> Option<Self> {
        if publication.class() != LOAD {
            return None;
        }
        let text = |n: &str| publication.get(n).and_then(Value::as_str);
        let int = |n: &str| match publication.get(n) {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        };
        let float = |n: &str| match publication.get(n) {
            Some(Value::Float(f)) => Some(*f),
            Some(Value::Int(i)) => Some(*i as f64),
            _ => None,
        };
        Some(Self {
            agent: text("agent")?.to_owned(),
            broker: text("broker").unwrap_or_default().to_owned(),
            pools: text("pools")?.split(',').filter(|p| !p.is_empty()).map(str::to_owned).collect(),
            incarnation: int("incarnation")?,
            state: MemberState::parse(text("state")?)?,
            // Counts from the network are held to sensible ranges: no report makes a
            // member look roomier than empty, nor overflows a sum.
            period_ms: int("period")?.clamp(1, COUNT_MOST),
            capacity: int("capacity")?.clamp(0, COUNT_MOST),
            running: int("running").unwrap_or(0).clamp(0, COUNT_MOST),
            queued: int("queued").unwrap_or(0).clamp(0, COUNT_MOST),
            delay_short_ms: float("delay_short").unwrap_or(0.0).max(0.0),
            delay_long_ms: float("delay_long").unwrap_or(0.0).max(0.0),
            arrivals: float("arrivals").unwrap_or(0.0).max(0.0),
        })
    }

    /// Capacity less the jobs it has.
    pub fn headroom(&self) -> i64 {
        self.capacity - self.running - self.queued
    }
}

fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// A member's measure of its own load: jobs arrived, waiting and running, and their
/// queueing delays.
#[derive(Debug, Default)]
pub struct Meter {
    /// Jobs waiting for a slot, by ticket: when each arrived.
    waiting: HashMap<u64, Instant>,
    next_ticket: u64,
    running: i64,
    /// Recent starts: when, and after how long a wait.
    started: VecDeque<(Instant, Duration)>,
    /// Recent arrivals.
    arrived: VecDeque<Instant>,
}

impl Meter {
    /// A job arrives (it waits for a slot): its ticket.
    pub fn arrive(&mut self, now: Instant) -> u64 {
        self.next_ticket += 1;
        self.waiting.insert(self.next_ticket, now);
        self.arrived.push_back(now);
        self.next_ticket
    }

    /// Job `ticket` got its slot and starts.
    pub fn start(&mut self, ticket: u64, now: Instant) {
        if let Some(since) = self.waiting.remove(&ticket) {
            self.started.push_back((now, now.saturating_duration_since(since)));
        }
        self.running += 1;
    }

    /// A started job ended.
    pub fn end(&mut self) {
        self.running = (self.running - 1).max(0);
    }

    /// Jobs running.
    pub fn running(&self) -> i64 {
        self.running
    }

    /// Jobs waiting.
    pub fn queued(&self) -> i64 {
        i64::try_from(self.waiting.len()).unwrap_or(i64::MAX)
    }

    /// Mean queueing delay over the last `window` (ms): of the jobs started in it, and of
    /// those still waiting at their age so far.
    pub fn delay_ms(&self, now: Instant, window: Duration) -> f64 {
        let recent = self.started.iter().filter(|(at, _)| now.saturating_duration_since(*at) <= window);
        let waits =
            recent.map(|(_, d)| *d).chain(self.waiting.values().map(|t| now.saturating_duration_since(*t)));
        let (n, sum) = waits.fold((0u32, Duration::ZERO), |(n, sum), d| (n + 1, sum + d));
        if n == 0 { 0.0 } else { sum.as_secs_f64() * 1000.0 / f64::from(n) }
    }

    /// Jobs arrived per second over the short window.
    pub fn arrivals(&self, now: Instant) -> f64 {
        let n = self.arrived.iter().filter(|at| now.saturating_duration_since(**at) <= SHORT_WINDOW).count();
        n as f64 / SHORT_WINDOW.as_secs_f64()
    }

    /// Forgets what is older than the long window.
    pub fn prune(&mut self, now: Instant) {
        while self.started.front().is_some_and(|(at, _)| now.saturating_duration_since(*at) > LONG_WINDOW) {
            self.started.pop_front();
        }
        while self.arrived.front().is_some_and(|at| now.saturating_duration_since(*at) > SHORT_WINDOW) {
            self.arrived.pop_front();
        }
    }
}

/// One member as the home agent knows it.
#[derive(Clone, Debug)]
pub struct Member {
    /// Its latest report.
    pub load: Load,
    /// When that came.
    pub seen: Instant,
    /// When its broker took that report (epoch milliseconds).
    pub at_ms: i64,
    /// Jobs dispatched to it since (its report does not count them yet).
    pub given: i64,
}

impl Member {
    /// Capacity less the jobs it has, those dispatched since its report counted.
    pub fn headroom(&self) -> i64 {
        self.load.headroom() - self.given
    }

    /// Whether it has been silent for `misses` of its periods: none of its reports has
    /// come for that long, and the reports read are current to that much after its last
    /// (`newest_ms`: later reports of others, or [`Members::heard`]), so that a home agent
    /// that was slow to read its reports does not take every member for gone.
    fn silent(&self, now: Instant, newest_ms: i64, misses: u32) -> bool {
        let limit_ms = self.load.period_ms.saturating_mul(i64::from(misses.max(1)));
        let waited = now.saturating_duration_since(self.seen).as_millis();
        waited > u128::try_from(limit_ms).unwrap_or(0) && newest_ms - self.at_ms > limit_ms
    }
}

/// What a load report changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A member not known before (or back after it was gone).
    Joined,
    /// A known member restarted: its earlier incarnation is gone.
    Restarted {
        /// The incarnation gone.
        was: i64,
    },
    /// It said it left.
    Left,
    /// Nothing but its load.
    Load,
}

/// The members of every pool the home agent dispatches to, from their load reports.
#[derive(Debug, Default)]
pub struct Members {
    /// Each agent's latest report, by name.
    agents: BTreeMap<String, Member>,
    /// Each pool's last member given a job (round robin).
    turn: HashMap<String, String>,
    /// When the newest report taken was made (epoch milliseconds, by its broker's clock).
    newest_ms: i64,
}

impl Members {
    /// The reports this agent has read are current up to `at_ms` (it has read every
    /// notification come so far): a member that stopped reporting is seen silent even
    /// when it was the only one.
    pub fn heard(&mut self, at_ms: i64) {
        self.newest_ms = self.newest_ms.max(at_ms);
    }

    /// Takes a report, made at `at_ms` (its publication's time).
    pub fn report(&mut self, load: Load, now: Instant, at_ms: i64) -> Change {
        self.newest_ms = self.newest_ms.max(at_ms);
        let agent = load.agent.clone();
        let left = load.state == MemberState::Left;
        let change = match self.agents.get(&agent) {
            None => Change::Joined,
            Some(known) if load.incarnation < known.load.incarnation => return Change::Load,
            Some(known) if load.incarnation > known.load.incarnation => {
                Change::Restarted { was: known.load.incarnation }
            }
            Some(_) if left => Change::Left,
            Some(_) => Change::Load,
        };
        if left {
            self.agents.remove(&agent);
            return if change == Change::Joined { Change::Left } else { change };
        }
        self.agents.insert(agent, Member { load, seen: now, at_ms, given: 0 });
        change
    }

    /// Member `agent` as known, if it is.
    pub fn get(&self, agent: &str) -> Option<&Member> {
        self.agents.get(agent)
    }

    /// Whether `agent`'s incarnation `incarnation` is still there: known, the same run of
    /// it, and not silent for `misses` periods.
    pub fn alive(&self, agent: &str, incarnation: i64, now: Instant, misses: u32) -> bool {
        self.agents
            .get(agent)
            .is_some_and(|m| m.load.incarnation == incarnation && !m.silent(now, self.newest_ms, misses))
    }

    /// The members of `pool` that take work: up and not silent.
    pub fn candidates(&self, pool: &str, now: Instant, misses: u32) -> impl Iterator<Item = &Member> {
        self.agents.values().filter(move |m| {
            m.load.state == MemberState::Up
                && m.load.pools.iter().any(|p| p == pool)
                && !m.silent(now, self.newest_ms, misses)
        })
    }

    /// The member of `pool` to give a job to by `policy`, among those up, not silent and
    /// with headroom (`None`: every member is at its limit, or there is none), with its
    /// incarnation; counted as given one more job. `except` is not chosen if another can
    /// be (the member a job is taken from).
    pub fn choose(
        &mut self,
        pool: &str,
        policy: Policy,
        now: Instant,
        misses: u32,
        except: Option<&str>,
    ) -> Option<(String, i64)> {
        let open: Vec<&Member> = self.candidates(pool, now, misses).filter(|m| m.headroom() > 0).collect();
        let preferred: Vec<&Member> =
            open.iter().copied().filter(|m| Some(m.load.agent.as_str()) != except).collect();
        let open = if preferred.is_empty() { open } else { preferred };
        let chosen = match policy {
            Policy::RoundRobin => {
                let last = self.turn.get(pool).map(String::as_str).unwrap_or("");
                open.iter().find(|m| m.load.agent.as_str() > last).or_else(|| open.first()).copied()
            }
            Policy::LeastLoaded => open
                .iter()
                .copied()
                .max_by(|a, b| a.headroom().cmp(&b.headroom()).then_with(|| b.load.agent.cmp(&a.load.agent))),
            Policy::LowestDelay => open.iter().copied().min_by(|a, b| {
                a.load
                    .delay_short_ms
                    .total_cmp(&b.load.delay_short_ms)
                    .then_with(|| b.headroom().cmp(&a.headroom()))
                    .then_with(|| a.load.agent.cmp(&b.load.agent))
            }),
        }?;
        let (agent, incarnation) = (chosen.load.agent.clone(), chosen.load.incarnation);
        self.turn.insert(pool.to_owned(), agent.clone());
        if let Some(member) = self.agents.get_mut(&agent) {
            member.given += 1;
        }
        Some((agent, incarnation))
    }

    /// A job given to `agent` ended (its final status came): its room is counted back
    /// before its next report says so.
    pub fn ended(&mut self, agent: &str) {
        if let Some(member) = self.agents.get_mut(agent) {
            if member.given > 0 {
                member.given -= 1;
            } else {
                member.load.running = (member.load.running - 1).max(0);
            }
        }
    }
}

/// The class of provisioning advice.
pub const ADVICE: &str = "pool_advice";

/// When a provisioner advises a pool to grow or shrink (after Tsai et al.'s dynamic
/// provisioning: add a reserved server when every server is over its limit, release one
/// when the load stays low).
#[derive(Clone, Debug, PartialEq)]
pub struct Provision {
    /// The pool watched.
    pub pool: String,
    /// How long every member must stay at or over its limit before a scale-up.
    pub over_for: Duration,
    /// How long every member must stay under `under` of its capacity before a scale-down.
    pub under_for: Duration,
    /// The share of its capacity a member's jobs must stay under for a scale-down.
    pub under: f64,
    /// Fewest members: fewer is a scale-up at once; no scale-down below.
    pub min: usize,
    /// Most members: no scale-up above.
    pub max: usize,
}

/// What a provisioner advises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Start a member: every member has been over its limit (or there are fewer than the
    /// fewest).
    ScaleUp {
        /// Members now.
        members: usize,
        /// Why, in words.
        reason: String,
    },
    /// Stop `member` (the least loaded, drained: it finishes what it has).
    ScaleDown {
        /// Members now.
        members: usize,
        /// The one to stop.
        member: String,
        /// Why, in words.
        reason: String,
    },
}

impl Advice {
    /// `scale-up` or `scale-down`.
    pub fn word(&self) -> &'static str {
        match self {
            Self::ScaleUp { .. } => "scale-up",
            Self::ScaleDown { .. } => "scale-down",
        }
    }

    /// The `pool_advice` publication of `pool`'s advice, by agent `agent`.
    ///
    /// # Errors
    /// A name or value the language refuses.
    pub fn publication(&self, pool: &str, agent: &str) -> Result<Publication, InvalidMessage> {
        let name = |n: &str| Name::interned(n);
        let (members, member, reason) = match self {
            Self::ScaleUp { members, reason } => (*members, "", reason),
            Self::ScaleDown { members, member, reason } => (*members, member.as_str(), reason),
        };
        Publication::new(vec![
            (name("class")?, Value::str(ADVICE)),
            (name("pool")?, Value::str(pool)),
            (name("advice")?, Value::str(self.word())),
            (name("members")?, Value::Int(i64::try_from(members).unwrap_or(i64::MAX))),
            (name("member")?, Value::str(member)),
            (name("reason")?, Value::str(reason)),
            (name("agent")?, Value::str(agent)),
        ])
    }
}

/// The advertisement of the advice agent `agent` publishes for `pool`.
pub fn advice_advertisement(pool: &str, agent: &str) -> Advertisement {
    let text = format!(
        "[class,eq,'{ADVICE}'],[pool,eq,{}],[advice,isPresent,''],[members,isPresent,0],\
         [member,isPresent,''],[reason,isPresent,''],[agent,eq,{}]",
        Value::str(pool),
        Value::str(agent)
    );
    text.parse().unwrap_or_else(|e| panic!("the pool_advice advertisement {text}: {e}"))
}

/// A provisioner's watch and the commands it runs on its advice (`sh -c`, in the agent's
/// work directory, with `PADRES_POOL`, `PADRES_ADVICE`, `PADRES_MEMBERS` and, for a
/// scale-down, `PADRES_MEMBER` set).
#[derive(Clone, Debug, PartialEq)]
pub struct Provisioning {
    /// What it watches for.
    pub watch: Provision,
    /// Run on a scale-up advice (e.g. start an agent with `--pool`).
    pub scale_up: Option<String>,
    /// Run on a scale-down advice (e.g. `padres agents drain "$PADRES_MEMBER"`).
    pub scale_down: Option<String>,
}

/// Watches one pool's members and advises (see [`Provision`]).
#[derive(Debug)]
pub struct Provisioner {
    /// What it watches for.
    pub spec: Provision,
    over_since: Option<Instant>,
    under_since: Option<Instant>,
    /// When it last advised a scale-up for want of members.
    short_since: Option<Instant>,
}

impl Provisioner {
    /// A provisioner for `spec`.
    pub fn new(spec: Provision) -> Self {
        Self { spec, over_since: None, under_since: None, short_since: None }
    }

    /// Looks at `members` at `now` (members silent for `misses` periods do not count),
    /// with `waiting` of the pool's jobs held back (a home agent's admission queue: every
    /// member is at its limit): advice, if the time has come. After an advice the watch
    /// starts over, so a command that takes effect slowly is not asked again at once.
    pub fn observe(
        &mut self,
        members: &Members,
        now: Instant,
        misses: u32,
        waiting: usize,
    ) -> Option<Advice> {
        let pool = self.spec.pool.as_str();
        let live: Vec<&Member> = members.candidates(pool, now, misses).collect();
        let n = live.len();
        if n < self.spec.min {
            self.over_since = None;
            self.under_since = None;
            // Once per --over-for: a member started takes a while to report.
            if self.short_since.is_some_and(|at| now.saturating_duration_since(at) < self.spec.over_for) {
                return None;
            }
            self.short_since = Some(now);
            return Some(Advice::ScaleUp {
                members: n,
                reason: format!("{n} members, fewer than the fewest ({})", self.spec.min),
            });
        }
        let load = |m: &Member| m.load.running + m.load.queued;
        let over = n > 0 && (waiting > 0 || live.iter().all(|m| m.load.headroom() <= 0));
        let under = n > 0
            && waiting == 0
            && live.iter().all(|m| (load(m) as f64) < self.spec.under * m.load.capacity.max(1) as f64);
        self.over_since = if over { self.over_since.or(Some(now)) } else { None };
        self.under_since = if under { self.under_since.or(Some(now)) } else { None };
        if let Some(since) = self.over_since
            && now.saturating_duration_since(since) >= self.spec.over_for
            && n < self.spec.max
        {
            self.over_since = None;
            return Some(Advice::ScaleUp {
                members: n,
                reason: format!(
                    "every member has been at its limit (or jobs waited for room) for {} s",
                    self.spec.over_for.as_secs_f64()
                ),
            });
        }
        if let Some(since) = self.under_since
            && now.saturating_duration_since(since) >= self.spec.under_for
            && n > self.spec.min.max(1)
        {
            self.under_since = None;
            let idle = live
                .iter()
                .min_by(|a, b| load(a).cmp(&load(b)).then_with(|| b.load.agent.cmp(&a.load.agent)))?;
            return Some(Advice::ScaleDown {
                members: n,
                member: idle.load.agent.clone(),
                reason: format!(
                    "every member has been under {:.0}% of its capacity for {} s",
                    100.0 * self.spec.under,
                    self.spec.under_for.as_secs_f64()
                ),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests;
