//! Who an HTTP request is, and what it may read: the same principals, tokens and permits
//! as QUIC clients ([`crate::auth`]).
//!
//! A request names its principal and token in one header, `Authorization: Bearer
//! NAME:TOKEN` (`curl -H "Authorization: Bearer agent-1:$TOKEN"`). Without one it is
//! `anonymous`, accepted where `auth.anonymous` is (the default), and answered 401
//! otherwise; a wrong token is answered 401 too, saying so.
//!
//! - **The gateway** (`/api/publish`, `/api/subscribe`) and `/api/workflows` (which
//!   subscribes to history) act as the request's principal, held to its permits exactly as
//!   a QUIC client of that principal is.
//! - **`/api/routes`** (every client's subscriptions) needs the `routes` right, as `padres
//!   broker routes` does; 403 names the right missing.
//! - **`/api/detectors`** shows clients' composite subscriptions: the `routes` right too.
//! - **The read-only views** (`/metrics`, `/api/stats`, `links`, `federation`, `history`;
//!   the web monitor's page and scripts hold no data and are served to anyone) follow
//!   `http_views`: `open`, `clients` (a
//!   request needs what a client needs to connect: a token where anonymous clients are
//!   refused), or `auto` (the default: open when the listener is on a loopback address,
//!   as `clients` otherwise).
//!
//! A token is checked with Argon2id (tens of milliseconds), off the async threads, two at
//! a time with QUIC hellos, at most 64 waiting (more: 503); a principal and token that
//! passed are remembered (by the token's SHA-256) for
//! [`REMEMBERED`], so a script that publishes in a loop pays for the check once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::{ANONYMOUS, Auth, Rights};
use crate::config::HttpViews;

/// How long a principal and token that passed the check are taken without checking again.
pub const REMEMBERED: Duration = Duration::from_secs(300);

/// Principals and tokens remembered at most; past it, the oldest half is forgotten.
const MOST_REMEMBERED: usize = 4096;

/// A principal and the SHA-256 of a token it gave.
type Credentials = (String, [u8; 32]);

/// The HTTP listener's authentication.
#[derive(Debug)]
pub(super) struct HttpAuth {
    auth: Arc<Auth>,
    /// The read-only views need no principal.
    views_open: bool,
    /// (principal, SHA-256 of its token) → its rights, and when they were checked.
    passed: Mutex<HashMap<Credentials, (Arc<Rights>, Instant)>>,
    /// Token checks under way at once, and those waiting too (shared with QUIC hellos).
    verifying: Arc<tokio::sync::Semaphore>,
    waiting: Arc<tokio::sync::Semaphore>,
}

/// What a route asks of a request ([`HttpAuth::view`], [`HttpAuth::routes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Need {
    /// A read-only view.
    View,
    /// The `routes` right.
    Routes,
}

/// Why a request is not served.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Denied {
    /// No principal, or not the one it says: 401.
    Unauthenticated(String),
    /// The principal lacks the right: 403.
    Forbidden(String),
    /// Too many tokens wait to be checked: 503, to try again shortly.
    Busy(String),
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let (status, why) = match self {
            Self::Unauthenticated(why) => (StatusCode::UNAUTHORIZED, why),
            Self::Forbidden(why) => (StatusCode::FORBIDDEN, why),
            Self::Busy(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
        };
        let body = serde_json::json!({ "type": "error", "message": why }).to_string();
        let challenge = (header::WWW_AUTHENTICATE, "Bearer realm=\"padres\"");
        (status, [challenge, (header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// Whether the read-only views are open to anyone, for a listener on `addr`.
pub fn views_open(views: HttpViews, addr: SocketAddr) -> bool {
    match views {
        HttpViews::Open => true,
        HttpViews::Clients => false,
        HttpViews::Auto => addr.ip().is_loopback(),
    }
}

/// The principal and token of an `Authorization` header's value, if it has one.
///
/// # Errors
/// A header that is not `Bearer NAME:TOKEN`, in words.
pub fn credentials(value: Option<&str>) -> Result<Option<(&str, &str)>, String> {
    let Some(value) = value else { return Ok(None) };
    // The scheme's name is case-insensitive (RFC 9110).
    let bearer = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, rest)| rest)
        .ok_or_else(|| "the Authorization header takes `Bearer NAME:TOKEN`".to_owned())?;
    match bearer.trim().split_once(':') {
        Some((name, token)) if !name.is_empty() && !token.is_empty() => Ok(Some((name, token))),
        _ => Err("the Authorization header takes `Bearer NAME:TOKEN` (the principal, a colon, its token)"
            .to_owned()),
    }
}

impl HttpAuth {
    pub(super) fn new(
        auth: Arc<Auth>,
        views_open: bool,
        verifying: Arc<tokio::sync::Semaphore>,
        waiting: Arc<tokio::sync::Semaphore>,
    ) -> Self {
        Self { auth, views_open, passed: Mutex::default(), verifying, waiting }
    }

    /// The rights of the request with `headers`, or why it has none.
    pub(super) async fn principal(&self, headers: &HeaderMap) -> Result<Arc<Rights>, Denied> {
        let value = headers.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or("?"));
        let given = credentials(value).map_err(Denied::Unauthenticated)?;
        let Some((name, token)) = given else {
            if self.auth.is_open() {
                return Ok(Arc::new(Rights::unrestricted(ANONYMOUS)));
            }
            let rights = self.auth.authenticate(ANONYMOUS, None).map_err(|e| {
                Denied::Unauthenticated(format!("{e} (an Authorization: Bearer NAME:TOKEN header)"))
            })?;
            return Ok(Arc::new(rights));
        };
        // A name as a QUIC hello's must be.
        padres_lang::Name::new(name)
            .map_err(|e| e.to_string())
            .and_then(|_| crate::auth::valid_principal(name).map_err(|e| e.0))
            .map_err(|why| Denied::Unauthenticated(format!("the Authorization header's principal: {why}")))?;
        if self.auth.is_open() {
            return Ok(Arc::new(Rights::unrestricted(name)));
        }
        let key = (name.to_owned(), sha256(token));
        if let Some(rights) = self.remembered(&key) {
            return Ok(rights);
        }
        let _waiting = self.waiting.try_acquire().map_err(|_| {
            Denied::Busy("too many clients' tokens are being checked already: try again shortly".to_owned())
        })?;
        let _permit = self
            .verifying
            .acquire()
            .await
            .map_err(|_| Denied::Unauthenticated("the broker is shutting down".to_owned()))?;
        // Checked meanwhile by a request that waited before this one.
        if let Some(rights) = self.remembered(&key) {
            return Ok(rights);
        }
        let (auth, name, token) = (self.auth.clone(), name.to_owned(), token.to_owned());
        let checked = tokio::task::spawn_blocking(move || auth.authenticate(&name, Some(&token)))
            .await
            .map_err(|e| Denied::Unauthenticated(format!("checking the token failed: {e}")))?;
        let rights = Arc::new(checked.map_err(|e| Denied::Unauthenticated(e.0))?);
        self.remember(key, rights.clone());
        Ok(rights)
    }

    /// Whether the request with `headers` may read the read-only views.
    pub(super) async fn view(&self, headers: &HeaderMap) -> Result<(), Denied> {
        if self.views_open {
            return Ok(());
        }
        self.principal(headers).await.map(drop)
    }

    /// Whether the request with `headers` may read the routing tables.
    pub(super) async fn routes(&self, headers: &HeaderMap) -> Result<(), Denied> {
        self.principal(headers).await?.may_read_routes().map_err(Denied::Forbidden)
    }

    fn remembered(&self, key: &Credentials) -> Option<Arc<Rights>> {
        let passed = self.passed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        passed.get(key).filter(|(_, at)| at.elapsed() < REMEMBERED).map(|(rights, _)| rights.clone())
    }

    fn remember(&self, key: Credentials, rights: Arc<Rights>) {
        let mut passed = self.passed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if passed.len() >= MOST_REMEMBERED {
            let mut ages: Vec<Instant> = passed.values().map(|(_, at)| *at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            passed.retain(|_, (_, at)| *at > cut);
        }
        passed.insert(key, (rights, Instant::now()));
    }
}

fn sha256(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0_u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthConfig, PermitConfig, hash_token};
    use axum::http::HeaderValue;

    fn auth(anonymous: bool) -> Arc<Auth> {
        let config = AuthConfig {
            anonymous,
            tokens: [("ops".to_owned(), hash_token("t-ops").expect("hashed"))].into(),
            permit: vec![
                PermitConfig { to: vec!["ops".into()], routes: true, ..PermitConfig::default() },
                PermitConfig {
                    to: vec!["anonymous".into()],
                    subscribe: vec!["[class,eq,'news']".into()],
                    ..PermitConfig::default()
                },
            ],
            ..AuthConfig::default()
        };
        Arc::new(config.compile().expect("valid"))
    }

    fn bearer(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).expect("a header"));
        headers
    }

    #[test]
    fn the_header_names_a_principal_and_its_token() {
        assert_eq!(credentials(None), Ok(None));
        assert_eq!(credentials(Some("Bearer agent-1:abc")), Ok(Some(("agent-1", "abc"))));
        assert!(
            credentials(Some("Basic YWdlbnQ6eA==")).expect_err("not bearer").contains("Bearer NAME:TOKEN")
        );
        assert!(credentials(Some("Bearer abc")).expect_err("no name").contains("a colon"));
    }

    #[test]
    fn views_are_open_on_loopback_unless_configured_otherwise() {
        let loopback: SocketAddr = "127.0.0.1:7780".parse().expect("an address");
        let anywhere: SocketAddr = "0.0.0.0:7780".parse().expect("an address");
        assert!(views_open(HttpViews::Auto, loopback));
        assert!(!views_open(HttpViews::Auto, anywhere));
        assert!(views_open(HttpViews::Open, anywhere));
        assert!(!views_open(HttpViews::Clients, loopback));
    }

    #[tokio::test]
    async fn a_request_is_its_principal_held_to_its_permits() {
        let semaphores =
            || (Arc::new(tokio::sync::Semaphore::new(2)), Arc::new(tokio::sync::Semaphore::new(64)));
        let (verifying, waiting) = semaphores();
        let closed = HttpAuth::new(auth(false), false, verifying, waiting);
        // No header where anonymous clients are refused: 401, saying how to give one.
        let Err(Denied::Unauthenticated(why)) = closed.principal(&HeaderMap::new()).await else {
            panic!("anonymous accepted")
        };
        assert!(why.contains("Bearer NAME:TOKEN"), "{why}");
        assert!(matches!(closed.view(&HeaderMap::new()).await, Err(Denied::Unauthenticated(_))));
        // A wrong token, an unknown principal: 401.
        for value in ["Bearer ops:wrong", "Bearer nobody:t-ops"] {
            assert!(
                matches!(closed.principal(&bearer(value)).await, Err(Denied::Unauthenticated(_))),
                "{value}"
            );
        }
        // The right one: the principal, with its rights (and remembered).
        let rights = closed.principal(&bearer("Bearer ops:t-ops")).await.expect("authenticated");
        assert_eq!(rights.principal, "ops");
        assert_eq!(closed.routes(&bearer("Bearer ops:t-ops")).await, Ok(()));
        assert!(closed.remembered(&("ops".to_owned(), sha256("t-ops"))).is_some());
        // A wrong token after the right one passed: still refused (the cache keys the token).
        assert!(matches!(
            closed.principal(&bearer("Bearer ops:wrong")).await,
            Err(Denied::Unauthenticated(_))
        ));
        // The scheme's case does not matter; a name no hello could give is refused.
        assert!(closed.principal(&bearer("bearer ops:t-ops")).await.is_ok());
        assert!(matches!(
            closed.principal(&bearer("Bearer any one:t-ops")).await,
            Err(Denied::Unauthenticated(_))
        ));
        assert_eq!(closed.view(&bearer("Bearer ops:t-ops")).await, Ok(()));

        // Where anonymous clients are accepted, a request without a header is one, with
        // anonymous's permits: no `routes` right.
        let (verifying, waiting) = semaphores();
        let open = HttpAuth::new(auth(true), true, verifying, waiting.clone());
        let anonymous = open.principal(&HeaderMap::new()).await.expect("anonymous");
        assert_eq!(anonymous.principal, ANONYMOUS);
        let Err(Denied::Forbidden(why)) = open.routes(&HeaderMap::new()).await else { panic!("routes read") };
        assert!(why.contains("routes = true"), "{why}");
        assert_eq!(open.view(&HeaderMap::new()).await, Ok(()), "views open");
        // With every waiting place taken, a token is not checked: 503, to try again.
        let _taken = waiting.acquire_many(64).await.expect("the places");
        assert!(matches!(open.principal(&bearer("Bearer ops:t-ops")).await, Err(Denied::Busy(_))));
    }
}
