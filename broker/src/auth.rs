//! Who a client is (its *principal*) and what it may do: tokens, groups and permissions
//! written as filters in the routing language. Sans-IO: the shell authenticates a client
//! at its hello ([`Auth::authenticate`]) and hands the router the [`Rights`] that come out;
//! the router checks every request against them ([`Rights::allows`]).
//!
//! - **Principals.** A client that gives a token is the principal its hello names if the
//!   token matches the Argon2id hash configured for that name (`auth.tokens`, PHC strings
//!   made by `padres-broker auth hash-token`). A client that gives none is `anonymous`,
//!   accepted only with `auth.anonymous = true` (the default, which `padres-broker` warns
//!   about at start when tokens are configured).
//! - **Permissions** (`[[auth.permit]]`): each grants principals (by name, by group of
//!   `auth.groups`, `*` for every authenticated principal, `anonymous`) filters they may
//!   advertise and subscribe under, and whether they may read history. `${principal}` in
//!   a filter is the principal's name, so one permit serves every agent. With no permit
//!   configured, every client may do anything; with one, what no permit allows is denied:
//!   - an advertisement must be *within* one of its `advertise` filters (every
//!     publication it allows, carrying the filter's attributes, matches the filter), and
//!     each publication must match one of them (an advertised attribute may be left out
//!     of a publication, which the advertisement alone cannot hold);
//!   - a subscription must be covered by one of its `subscribe` filters; a composite
//!     subscription, every leaf and its `until`; one whose `time` range reaches into the
//!     past needs `history = true` too.
//!
//!   A denial names the principal, what was asked and the right it lacked.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use padres_lang::{Advertisement, Message, Publication, Subscription, adv_within, covers, matches};
use serde::{Deserialize, Serialize};

/// The principal of a client that gave no token.
pub const ANONYMOUS: &str = "anonymous";
/// In a permit's `to`: every authenticated principal (not `anonymous`).
pub const EVERYONE: &str = "*";
/// In a permit's filters: the principal's name.
pub const PRINCIPAL_VAR: &str = "${principal}";

/// Authentication and permissions as configured (`[auth]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Clients that give no token may connect, as principal `anonymous`.
    pub anonymous: bool,
    /// Principal name → Argon2id hash of its token (a PHC string, `padres-broker auth
    /// hash-token`).
    pub tokens: BTreeMap<String, String>,
    /// Group name → its principals.
    pub groups: BTreeMap<String, Vec<String>>,
    /// What principals may do; with none, anything.
    pub permit: Vec<PermitConfig>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self { anonymous: true, tokens: BTreeMap::new(), groups: BTreeMap::new(), permit: Vec::new() }
    }
}

/// One permit: what its principals may advertise, subscribe and read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermitConfig {
    /// Principals and groups it applies to (`*`: every authenticated principal;
    /// `anonymous`: clients without a token).
    pub to: Vec<String>,
    /// Filters its principals may advertise under (`${principal}`: the principal's name).
    pub advertise: Vec<String>,
    /// Filters its principals may subscribe under.
    pub subscribe: Vec<String>,
    /// Its principals may subscribe into the past (history).
    pub history: bool,
    /// Its principals may read the routing tables (`padres broker routes`), which show
    /// every client's advertisements and subscriptions at the broker.
    pub routes: bool,
    /// Most connections one of its principals may hold at once at this broker.
    pub max_connections: Option<usize>,
    /// Most subscriptions one of its principals may hold at this broker over all its
    /// connections (a composite one counts one per atomic part).
    pub max_subscriptions: Option<usize>,
    /// Most publications a second one of its principals may publish at this broker (a
    /// burst of as many at once is allowed); more are refused until the rate falls.
    pub max_publish_rate: Option<u32>,
}

/// Why a configuration's `[auth]` cannot be used, or a client is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

/// `[auth]`, checked and ready ([`AuthConfig::compile`]).
#[derive(Debug)]
pub struct Auth {
    /// A hash no token matches, checked for an unknown principal so that its refusal
    /// takes as long as a known one's (names cannot be told apart by timing).
    decoy: String,
    anonymous: bool,
    tokens: BTreeMap<String, String>,
    groups_of: BTreeMap<String, Vec<String>>,
    permits: Vec<PermitConfig>,
}

impl AuthConfig {
    /// Checks the configuration: every token a valid PHC string, every group member and
    /// permit target a name, every filter valid for any principal.
    pub fn compile(&self) -> Result<Auth, AuthError> {
        for (name, hash) in &self.tokens {
            valid_principal(name)?;
            argon2::password_hash::phc::PasswordHash::new(hash).map_err(|e| {
                AuthError(format!(
                    "auth.tokens.{name}: not a password hash ({e}); make one with `padres-broker auth hash-token`"
                ))
            })?;
        }
        let mut groups_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (group, members) in &self.groups {
            if group == EVERYONE || group == ANONYMOUS {
                return Err(AuthError(format!("auth.groups: '{group}' is reserved")));
            }
            for member in members {
                valid_principal(member)?;
                groups_of.entry(member.clone()).or_default().push(group.clone());
            }
        }
        for (i, permit) in self.permit.iter().enumerate() {
            if permit.to.is_empty() {
                return Err(AuthError(format!("auth.permit[{i}]: `to` names nobody")));
            }
            // Filters are parsed per principal; any name checks their syntax.
            for (right, filters) in [("advertise", &permit.advertise), ("subscribe", &permit.subscribe)] {
                for filter in filters {
                    parse_filter(filter, "x")
                        .map_err(|e| AuthError(format!("auth.permit[{i}].{right}: {e}")))?;
                }
            }
        }
        let decoy = if self.tokens.is_empty() { String::new() } else { hash_token(&new_token()?)? };
        Ok(Auth {
            decoy,
            anonymous: self.anonymous,
            tokens: self.tokens.clone(),
            groups_of,
            permits: self.permit.clone(),
        })
    }
}

/// Refuses names that cannot be a principal's (`anonymous`, `*`, quotes, `$`).
pub fn valid_principal(name: &str) -> Result<(), AuthError> {
    if name.is_empty() || name == ANONYMOUS || name == EVERYONE || name.contains(['\'', '$']) {
        return Err(AuthError(format!("'{name}' cannot name a principal")));
    }
    Ok(())
}

/// Filter `text` for principal `principal`.
fn parse_filter(text: &str, principal: &str) -> Result<Subscription, String> {
    let text = text.replace(PRINCIPAL_VAR, principal);
    let sub: Subscription = text.parse().map_err(|e| format!("{text}: {e}"))?;
    if sub.predicates().iter().any(|p| p.variable().is_some()) {
        return Err(format!("{text}: a permission cannot use variables"));
    }
    Ok(sub)
}

impl Auth {
    /// No tokens, anonymous clients allowed and no permits: every client may do anything.
    pub fn is_open(&self) -> bool {
        self.anonymous && self.tokens.is_empty() && self.permits.is_empty()
    }

    /// Anonymous clients are accepted.
    pub fn anonymous(&self) -> bool {
        self.anonymous
    }

    /// Principals with tokens.
    pub fn principals(&self) -> usize {
        self.tokens.len()
    }

    /// Permits configured.
    pub fn permits(&self) -> usize {
        self.permits.len()
    }

    /// The client named `name` in its hello, with `token` if it gave one: its rights, or
    /// why it is refused. Verifying a token costs tens of milliseconds of CPU (Argon2id):
    /// run it off the router's thread.
    pub fn authenticate(&self, name: &str, token: Option<&str>) -> Result<Rights, AuthError> {
        use argon2::password_hash::PasswordVerifier;
        let principal = match token {
            None if self.anonymous => ANONYMOUS.to_owned(),
            None => {
                return Err(AuthError(
                    "this broker does not accept clients without a token (auth.anonymous = false): give one"
                        .to_owned(),
                ));
            }
            Some(token) => {
                let refused = || AuthError(format!("no principal '{name}' with this token"));
                let hash = self.tokens.get(name);
                let checked = hash.map_or(self.decoy.as_str(), String::as_str);
                let verified = !checked.is_empty()
                    && argon2::Argon2::default().verify_password(token.as_bytes(), checked).is_ok();
                if hash.is_none() || !verified {
                    return Err(refused());
                }
                name.to_owned()
            }
        };
        Ok(self.rights_of(principal))
    }

    /// The rights of `principal` (authenticated already).
    pub fn rights_of(&self, principal: String) -> Rights {
        if self.permits.is_empty() {
            return Rights { principal, permits: None };
        }
        let groups = self.groups_of.get(&principal).map_or(&[][..], Vec::as_slice);
        let applies = |to: &str| {
            to == principal || groups.iter().any(|g| g == to) || (to == EVERYONE && principal != ANONYMOUS)
        };
        let mut permits = Permits::default();
        for permit in self.permits.iter().filter(|p| p.to.iter().any(|to| applies(to))) {
            // Checked at compile time with another name; a principal's own name could
            // still make one invalid (a quote is refused in names, so it cannot).
            for text in &permit.advertise {
                if let Ok(filter) = parse_filter(text, &principal) {
                    permits.advertise.push(filter);
                }
            }
            for text in &permit.subscribe {
                if let Ok(filter) = parse_filter(text, &principal) {
                    permits.subscribe.push(filter);
                }
            }
            permits.history |= permit.history;
            permits.routes |= permit.routes;
            // Where several permits set a limit, the strictest holds.
            let strictest = |a: Option<usize>, b: Option<usize>| match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let l = &mut permits.limits;
            l.connections = strictest(l.connections, permit.max_connections);
            l.subscriptions = strictest(l.subscriptions, permit.max_subscriptions);
            l.publish_rate =
                strictest(l.publish_rate.map(|r| r as usize), permit.max_publish_rate.map(|r| r as usize))
                    .and_then(|r| u32::try_from(r).ok());
        }
        Rights { principal, permits: Some(permits) }
    }
}

/// What one principal may do.
#[derive(Clone, Debug, PartialEq)]
pub struct Rights {
    /// Who.
    pub principal: String,
    /// `None`: anything (no permit is configured).
    permits: Option<Permits>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Permits {
    advertise: Vec<Subscription>,
    subscribe: Vec<Subscription>,
    history: bool,
    routes: bool,
    limits: Limits,
}

/// What one principal may hold and do at a broker (`max_*` of its permits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once.
    pub connections: Option<usize>,
    /// Subscriptions over all its connections.
    pub subscriptions: Option<usize>,
    /// Publications a second.
    pub publish_rate: Option<u32>,
}

impl Rights {
    /// Rights to anything, for `principal`.
    pub fn unrestricted(principal: &str) -> Self {
        Self { principal: principal.to_owned(), permits: None }
    }

    /// No right at all, for `principal`.
    pub fn none(principal: &str) -> Self {
        Self { principal: principal.to_owned(), permits: Some(Permits::default()) }
    }

    /// What this principal may hold and do (no limit without permits).
    pub fn limits(&self) -> Limits {
        self.permits.as_ref().map(|p| p.limits).unwrap_or_default()
    }

    /// True if no permit restricts this principal.
    pub fn is_unrestricted(&self) -> bool {
        self.permits.is_none()
    }

    /// Whether this principal may read the routing tables (they show every client's
    /// advertisements and subscriptions); the error names the missing right.
    pub fn may_read_routes(&self) -> Result<(), String> {
        match &self.permits {
            Some(permits) if !permits.routes => Err(format!(
                "principal '{}' may not read the routing tables: no permit of it has `routes = true`",
                self.principal
            )),
            _ => Ok(()),
        }
    }

    /// Whether `message` is allowed; `historic` says whether a subscription reaches into
    /// the past. The error says what was asked and which right is missing. A publication
    /// is allowed if it matches an `advertise` filter; the router checks the equivalent
    /// beside the advertisement it conforms to ([`Rights::required_attributes`]), which
    /// costs less on the routing path.
    pub fn allows(&self, message: &Message, historic: impl Fn(&Subscription) -> bool) -> Result<(), String> {
        let Some(permits) = &self.permits else { return Ok(()) };
        match message {
            Message::Advertise(adv) => self.may_advertise(permits, adv),
            Message::Publish(publication) => self.may_publish(permits, publication),
            Message::Subscribe(sub) => self.may_subscribe(permits, sub, &historic, "subscribe"),
            Message::CompositeSubscribe(cs) => {
                cs.atoms().try_for_each(|leaf| {
                    self.may_subscribe(permits, leaf, &historic, "subscribe to a leaf")
                })?;
                match cs.until_filter() {
                    Some(until) => {
                        self.may_subscribe(permits, until, &historic, "subscribe to an until filter")
                    }
                    None => Ok(()),
                }
            }
            Message::Unsubscribe(_) | Message::Unadvertise(_) => Ok(()),
        }
    }

    /// The attributes a publication under `adv` must carry: those of the first
    /// `advertise` filter it lies within (empty if unrestricted or none). With the
    /// advertisement allowed, a publication that conforms to it and carries these matches
    /// that filter, which is what [`Rights::allows`] checks of a publication; the router
    /// keeps these beside the client's advertisement and checks only their presence.
    /// The names are the advertisement's own (`adv` has a predicate on each): the
    /// conformance check reads them just before, so comparing them costs no memory access.
    pub fn required_attributes(&self, adv: &Advertisement) -> Vec<padres_lang::Name> {
        let Some(permits) = &self.permits else { return Vec::new() };
        let Some(filter) = permits.advertise.iter().find(|f| adv_within(f, adv)) else { return Vec::new() };
        let mut attrs: Vec<padres_lang::Name> = Vec::new();
        for p in filter.predicates() {
            let Some(q) = adv.predicates().iter().find(|q| q.attr() == p.attr()) else { continue };
            if !attrs.contains(q.attr()) {
                attrs.push(q.attr().clone());
            }
        }
        attrs
    }

    fn may_advertise(&self, permits: &Permits, adv: &Advertisement) -> Result<(), String> {
        if permits.advertise.iter().any(|f| adv_within(f, adv)) {
            return Ok(());
        }
        Err(self.denial(&format!("advertise {adv}"), "advertise", &permits.advertise))
    }

    fn may_publish(&self, permits: &Permits, publication: &Publication) -> Result<(), String> {
        if permits.advertise.iter().any(|f| matches(f, publication)) {
            return Ok(());
        }
        Err(self.denial(&format!("publish {publication}"), "advertise", &permits.advertise))
    }

    fn may_subscribe(
        &self,
        permits: &Permits,
        sub: &Subscription,
        historic: &impl Fn(&Subscription) -> bool,
        what: &str,
    ) -> Result<(), String> {
        if !permits.subscribe.iter().any(|f| covers(f, sub)) {
            return Err(self.denial(&format!("{what} {sub}"), "subscribe", &permits.subscribe));
        }
        if historic(sub) && !permits.history {
            return Err(format!(
                "principal '{}' may not read history ({what} {sub} reaches into the past): no permit of it \
                 grants `history = true`",
                self.principal
            ));
        }
        Ok(())
    }

    fn denial(&self, asked: &str, right: &str, granted: &[Subscription]) -> String {
        let mut why =
            format!("principal '{}' may not {asked}: no `{right}` permit of it covers it", self.principal);
        if granted.is_empty() {
            let _ = write!(why, " (it has none)");
        } else {
            let list: Vec<String> = granted.iter().map(ToString::to_string).collect();
            let _ = write!(why, " (its `{right}` permits: {})", list.join("; "));
        }
        why
    }
}

/// Fills `bytes` from the operating system's random generator: every secret the broker
/// and its tools make (client session ids, link session seeds, tokens) comes from here.
///
/// # Errors
/// The generator cannot be read, in words.
pub fn os_random(bytes: &mut [u8]) -> Result<(), AuthError> {
    getrandom::fill(bytes).map_err(|e| AuthError(format!("the operating system's random generator: {e}")))
}

/// 64 random bits from the operating system's generator.
///
/// # Panics
/// The generator cannot be read: the broker cannot make a secret nobody can guess, and
/// stops rather than make one somebody could.
pub fn secret_u64() -> u64 {
    let mut bytes = [0_u8; 8];
    os_random(&mut bytes).unwrap_or_else(|e| panic!("{e}"));
    u64::from_le_bytes(bytes)
}

/// A token for a client: 24 random bytes, in hex.
///
/// # Errors
/// The generator cannot be read, in words.
pub fn new_token() -> Result<String, AuthError> {
    let mut bytes = [0_u8; 24];
    os_random(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The Argon2id hash of `token`, as a PHC string for `auth.tokens` (a random salt each
/// time).
pub fn hash_token(token: &str) -> Result<String, AuthError> {
    use argon2::password_hash::PasswordHasher;
    argon2::Argon2::default()
        .hash_password(token.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| AuthError(format!("cannot hash the token: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_48_hex_digits_from_the_os_generator_and_differ() {
        let (a, b) = (new_token().expect("a token"), new_token().expect("a token"));
        assert_eq!(a.len(), 48);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
        assert_ne!(secret_u64(), secret_u64());
    }

    fn config() -> AuthConfig {
        let hash = |t: &str| hash_token(t).expect("hashed");
        AuthConfig {
            anonymous: false,
            tokens: BTreeMap::from([
                ("agent-1".to_owned(), hash("t1")),
                ("agent-2".to_owned(), hash("t2")),
                ("monitor".to_owned(), hash("tm")),
            ]),
            groups: BTreeMap::from([("agents".to_owned(), vec!["agent-1".to_owned(), "agent-2".to_owned()])]),
            permit: vec![
                PermitConfig {
                    to: vec!["agents".to_owned()],
                    advertise: vec!["[class,eq,'job_status'],[agent,eq,'${principal}']".to_owned()],
                    subscribe: vec!["[class,eq,'agent_ctl'],[agent,eq,'${principal}']".to_owned()],
                    history: false,
                    max_subscriptions: Some(10),
                    ..PermitConfig::default()
                },
                PermitConfig {
                    to: vec!["monitor".to_owned()],
                    advertise: vec![],
                    subscribe: vec!["[class,eq,'job_status']".to_owned()],
                    history: true,
                    ..PermitConfig::default()
                },
                PermitConfig {
                    to: vec!["agent-1".to_owned()],
                    max_subscriptions: Some(4),
                    max_publish_rate: Some(20),
                    ..PermitConfig::default()
                },
            ],
        }
    }

    fn message(text: &str) -> Message {
        text.parse().expect("a message")
    }

    fn never(_: &Subscription) -> bool {
        false
    }

    #[test]
    fn tokens_name_principals_and_wrong_ones_are_refused() {
        let auth = config().compile().expect("valid");
        assert_eq!(auth.authenticate("agent-1", Some("t1")).map(|r| r.principal), Ok("agent-1".to_owned()));
        let wrong = auth.authenticate("agent-1", Some("t2")).expect_err("another's token");
        assert!(wrong.0.contains("no principal 'agent-1' with this token"), "{wrong}");
        assert!(auth.authenticate("nobody", Some("t1")).is_err());
        let anonymous = auth.authenticate("x", None).expect_err("anonymous is off");
        assert!(anonymous.0.contains("auth.anonymous = false"), "{anonymous}");
    }

    #[test]
    fn an_agent_may_use_only_its_own_status_and_commands() {
        let auth = config().compile().expect("valid");
        let agent = auth.rights_of("agent-1".to_owned());
        let ok = |m: &str| agent.allows(&message(m), never);
        assert_eq!(ok("a [class,eq,'job_status'],[agent,eq,'agent-1'],[job,isPresent,'']"), Ok(()));
        assert_eq!(ok("p [class,'job_status'],[agent,'agent-1'],[job,'B']"), Ok(()));
        assert_eq!(ok("s [class,eq,'agent_ctl'],[agent,eq,'agent-1']"), Ok(()));
        let other = ok("a [class,eq,'job_status'],[agent,eq,'agent-2']").expect_err("another agent's status");
        assert!(other.contains("principal 'agent-1' may not advertise"), "{other}");
        assert!(other.contains("no `advertise` permit"), "{other}");
        assert!(other.contains("[agent,eq,'agent-1']"), "names what it may: {other}");
        // An advertisement that does not pin the agent is not within the permit.
        assert!(ok("a [class,eq,'job_status'],[agent,isPresent,'']").is_err());
        // A publication leaving the agent out is refused even under an allowed advertisement.
        assert!(ok("p [class,'job_status'],[job,'B']").is_err());
        let spy = ok("s [class,eq,'agent_ctl'],[agent,eq,'agent-2']").expect_err("another agent's commands");
        assert!(spy.contains("may not subscribe") && spy.contains("`subscribe` permit"), "{spy}");
        assert!(ok("s [class,eq,'agent_ctl']").is_err(), "every agent's commands");
        let cs = "cs {[class,eq,'agent_ctl'],[agent,eq,'agent-1']} & {[class,eq,'agent_ctl'],[agent,eq,'agent-2']}";
        let leaf = ok(cs).expect_err("one leaf outside");
        assert!(leaf.contains("subscribe to a leaf [class,eq,'agent_ctl'],[agent,eq,'agent-2']"), "{leaf}");
        let until = "cs {[class,eq,'agent_ctl'],[agent,eq,'agent-1']} until {[class,eq,'payroll']}";
        let until = ok(until).expect_err("an until filter outside");
        assert!(until.contains("subscribe to an until filter [class,eq,'payroll']"), "{until}");
    }

    #[test]
    fn the_strictest_limit_of_a_principals_permits_holds() {
        let auth = config().compile().expect("valid");
        let limits = auth.rights_of("agent-1".to_owned()).limits();
        assert_eq!(limits, Limits { connections: None, subscriptions: Some(4), publish_rate: Some(20) });
        let limits = auth.rights_of("agent-2".to_owned()).limits();
        assert_eq!(limits, Limits { connections: None, subscriptions: Some(10), publish_rate: None });
        assert_eq!(Rights::unrestricted("x").limits(), Limits::default());
    }

    #[test]
    fn a_monitor_reads_statuses_and_history_and_publishes_nothing() {
        let auth = config().compile().expect("valid");
        let monitor = auth.rights_of("monitor".to_owned());
        let past = |_: &Subscription| true;
        assert_eq!(monitor.allows(&message("s [class,eq,'job_status'],[app,eq,'payroll']"), past), Ok(()));
        let adv = monitor.allows(&message("a [class,eq,'trigger']"), never).expect_err("no advertise permit");
        assert!(adv.contains("(it has none)"), "{adv}");
        let agent = auth.rights_of("agent-1".to_owned());
        let history = agent
            .allows(&message("s [class,eq,'agent_ctl'],[agent,eq,'agent-1']"), past)
            .expect_err("no history");
        assert!(history.contains("may not read history"), "{history}");
    }

    #[test]
    fn without_permits_anything_goes_and_bad_configurations_are_refused() {
        let open = AuthConfig::default().compile().expect("valid");
        assert!(open.is_open());
        let anyone = open.authenticate("whoever", None).expect("anonymous");
        assert!(anyone.is_unrestricted());
        assert_eq!(anyone.allows(&message("a [class,eq,'agent_ctl']"), never), Ok(()));
        let mut bad = config();
        bad.tokens.insert("x".to_owned(), "plain".to_owned());
        assert!(bad.compile().expect_err("not a hash").0.contains("hash-token"));
        let mut bad = config();
        bad.permit[0].subscribe.push("[class,eq,'x'],[n,>,$v]".to_owned());
        assert!(bad.compile().is_err(), "variables");
    }
}
