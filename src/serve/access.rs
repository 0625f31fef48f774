//! Who may read the board (docs/serve.md#access), and what every answer
//! carries. Bound to a loopback address the board needs no login, but a
//! request must name that address in its `Host` (a page on another site
//! cannot reach it through a DNS name that points at 127.0.0.1). Bound to
//! any other address, a request needs the session cookie, which a browser
//! gets once for the token printed at start-up (`/?token=…`): an HttpOnly,
//! SameSite=Strict cookie, so no script and no other site's page can use
//! it. Every answer sends a Content-Security-Policy that allows scripts,
//! styles and connections only from the board's own origin. The board is
//! read-only: only GET and HEAD are answered.

use std::net::SocketAddr;

use serde_json::Value;

/// The Content-Security-Policy of every answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";
/// The session cookie's name.
pub const COOKIE: &str = "nightshift_board";

/// The access rule of one server.
#[derive(Debug, Clone)]
pub enum Access {
    /// Bound to loopback: no login; `Host` must be one of these.
    Loopback {
        /// The spellings of this server's address a browser sends.
        hosts: Vec<String>,
    },
    /// Bound elsewhere: a token for a cookie.
    Token {
        /// The start-up token (64 hex digits).
        token: String,
        /// The session value its cookie carries (64 hex digits, not the
        /// token: the token may stay in a browser's history).
        session: String,
    },
}

/// What a request may do.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Answer it.
    Allow,
    /// It gave the right token: set the cookie and send it to `/`.
    Login,
    /// Refused, with the status and why (401, 403).
    Refuse(u16, &'static str),
}

impl Access {
    /// The rule for a server bound to `addr`.
    ///
    /// # Errors
    /// The system's random source failed.
    pub fn for_addr(addr: SocketAddr) -> std::io::Result<Access> {
        if addr.ip().is_loopback() {
            let port = addr.port();
            let mut hosts = vec![format!("localhost:{port}"), format!("{addr}")];
            if addr.is_ipv4() {
                hosts.push(format!("127.0.0.1:{port}"));
            }
            return Ok(Access::Loopback { hosts });
        }
        Ok(Access::Token {
            token: random_hex()?,
            session: random_hex()?,
        })
    }

    /// The token to print at start-up, if one is needed.
    pub fn token(&self) -> Option<&str> {
        match self {
            Access::Loopback { .. } => None,
            Access::Token { token, .. } => Some(token),
        }
    }

    /// Whether a request with `host`, `cookie` header and `token` query
    /// parameter may be answered.
    pub fn check(&self, host: Option<&str>, cookie: Option<&str>, token: Option<&str>) -> Verdict {
        match self {
            Access::Loopback { hosts } => match host {
                Some(h) if hosts.iter().any(|x| x.eq_ignore_ascii_case(h)) => Verdict::Allow,
                _ => Verdict::Refuse(
                    403,
                    "this board answers only at its own loopback address (Host header)",
                ),
            },
            Access::Token { token: t, session } => {
                if token.is_some_and(|g| same(g.as_bytes(), t.as_bytes())) {
                    return Verdict::Login;
                }
                let has = cookie.into_iter().flat_map(|c| c.split(';')).any(|kv| {
                    kv.trim()
                        .strip_prefix(COOKIE)
                        .and_then(|v| v.strip_prefix('='))
                        .is_some_and(|v| same(v.as_bytes(), session.as_bytes()))
                });
                match has {
                    true => Verdict::Allow,
                    false => Verdict::Refuse(
                        401,
                        "this board needs its token: open the address `nightshift serve` printed at start-up (…/?token=…)",
                    ),
                }
            }
        }
    }

    /// The `Set-Cookie` value of a login.
    pub fn cookie(&self) -> Option<String> {
        match self {
            Access::Loopback { .. } => None,
            Access::Token { session, .. } => Some(format!(
                "{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/"
            )),
        }
    }
}

/// Compares two secrets in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// 32 random bytes as hex.
fn random_hex() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(hex::encode(b))
}

/// `v` with every string masked ([`crate::secret::redact_known`]) as the
/// report masks text: the ledger keeps text masked already, this masks what
/// this process knows besides.
pub fn masked(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(crate::secret::redact_known(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(masked).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, masked(v))).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_needs_its_own_host_and_no_login() {
        let a = Access::for_addr("127.0.0.1:8080".parse().unwrap()).unwrap();
        assert_eq!(a.token(), None);
        assert_eq!(a.check(Some("127.0.0.1:8080"), None, None), Verdict::Allow);
        assert_eq!(a.check(Some("localhost:8080"), None, None), Verdict::Allow);
        assert!(matches!(
            a.check(Some("evil.example:8080"), None, None),
            Verdict::Refuse(403, _)
        ));
        assert!(matches!(a.check(None, None, None), Verdict::Refuse(403, _)));
    }

    #[test]
    fn elsewhere_a_token_buys_a_cookie_and_only_the_cookie_lets_in() {
        let a = Access::for_addr("0.0.0.0:8080".parse().unwrap()).unwrap();
        let token = a.token().unwrap().to_string();
        assert_eq!(token.len(), 64);
        assert!(matches!(
            a.check(Some("h:8080"), None, None),
            Verdict::Refuse(401, _)
        ));
        assert!(matches!(
            a.check(Some("h:8080"), None, Some("nope")),
            Verdict::Refuse(401, _)
        ));
        assert_eq!(a.check(Some("h:8080"), None, Some(&token)), Verdict::Login);
        let cookie = a.cookie().unwrap();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        let pair = cookie.split(';').next().unwrap();
        assert!(!pair.contains(&token), "the cookie is not the token");
        assert_eq!(
            a.check(None, Some(&format!("a=b; {pair}")), None),
            Verdict::Allow
        );
        assert!(matches!(
            a.check(None, Some(&format!("{COOKIE}=x")), None),
            Verdict::Refuse(401, _)
        ));
    }
}
