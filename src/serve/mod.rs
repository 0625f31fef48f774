//! `nightshift serve` (docs/serve.md): the night as a live board, read from
//! the ledger, so it works on any host that shares it and survives its own
//! restarts. An HTTP/1.1 server (hyper) with five read-only addresses:
//!
//! - `/` — the board's page; `/board.js` and `/board.css` — its script and
//!   style (no inline script or style, no other origin);
//! - `/events` — Server-Sent Events: the ledger's events after
//!   `Last-Event-ID` (or `?after=N`), then live, with the state after them
//!   (see [`sse`] and [`hub`]);
//! - `/api/state` — the state as JSON ([`state`]);
//! - `/api/item?key=K` — the masked ends of item K's recorded output.
//!
//! Access and headers: [`access`]. The server is its own process (or, for
//! `drain --serve`, its own task with its own pool): nothing it does waits
//! on the night, and the night waits on nothing it does.

pub mod access;
pub mod hub;
pub mod sse;
pub mod state;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::ledger::events;
use access::{Access, Verdict};
use hub::Hub;

/// The address `serve` binds without `--listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";
/// Connections served at once; one more is closed at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a client may take to send its request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a ledger read for one answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

const PAGE: &str = include_str!("assets/board.html");
const SCRIPT: &str = include_str!("assets/board.js");
const STYLE: &str = include_str!("assets/board.css");

type Body = BoxBody<Bytes, Infallible>;

/// A server bound to its address, not yet serving.
pub struct Bound {
    listener: TcpListener,
    addr: SocketAddr,
    access: Access,
}

/// Binds `listen` (`HOST:PORT`).
///
/// # Errors
/// Exit 2 for an address that is not one; exit 1 naming the address when
/// it cannot be bound (in use, not this host's, not permitted).
pub async fn bind(listen: &str) -> Result<Bound> {
    let addr: SocketAddr = listen.parse().map_err(|_| Error::Argument {
        problem: format!(
            "--listen {listen:?} is not an address: give HOST:PORT with an IP address, e.g. 127.0.0.1:7420 or 0.0.0.0:7420"
        ),
    })?;
    let listener = TcpListener::bind(addr).await.map_err(|e| Error::Failed {
        problem: match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "cannot listen on {addr}: the port is in use (another `nightshift serve`?); choose another with --listen"
            ),
            _ => format!("cannot listen on {addr}: {e}"),
        },
    })?;
    let addr = listener.local_addr().map_err(|e| Error::Failed {
        problem: format!("cannot read the bound address: {e}"),
    })?;
    let access = Access::for_addr(addr).map_err(|e| Error::Failed {
        problem: format!("cannot make the board's token: {e}"),
    })?;
    Ok(Bound {
        listener,
        addr,
        access,
    })
}

impl Bound {
    /// The board's address a person opens (with the token, when one is
    /// needed).
    pub fn url(&self) -> String {
        let host = match self.addr.ip() {
            ip if ip.is_unspecified() => "HOST".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        match self.access.token() {
            Some(t) => format!("http://{host}:{}/?token={t}", self.addr.port()),
            None => format!("http://{host}:{}/", self.addr.port()),
        }
    }

    /// The address it is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves the board of `source` from `pool` until `stop`.
    ///
    /// # Errors
    /// The ledger does not answer at start.
    pub async fn serve(
        self,
        pool: sqlx::PgPool,
        source: state::Source,
        stop: CancellationToken,
    ) -> Result<()> {
        let hub = Hub::new(pool, source).await?;
        tokio::spawn(hub.clone().follow(stop.clone()));
        let app = Arc::new(App {
            hub,
            access: self.access,
            open: AtomicUsize::new(0),
        });
        loop {
            let (tcp, _) = tokio::select! {
                a = self.listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("serve: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = stop.cancelled() => return Ok(()),
            };
            if app.open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                app.open.fetch_sub(1, Ordering::SeqCst);
                drop(tcp);
                continue;
            }
            let app = app.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req| {
                    let app = app.clone();
                    async move { Ok::<_, Infallible>(app.answer(req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(tcp), svc);
                tokio::select! {
                    _ = conn => {}
                    () = stop.cancelled() => {}
                }
                app.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }
}

/// What every connection shares.
struct App {
    hub: Arc<Hub>,
    access: Access,
    open: AtomicUsize,
}

impl App {
    /// Answers one request, with the headers every answer carries.
    async fn answer(&self, req: Request<Incoming>) -> Response<Body> {
        let mut res = self.route(&req).await;
        let h = res.headers_mut();
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            access::CSP.parse().expect("CSP"),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            "nosniff".parse().expect("nosniff"),
        );
        h.insert(
            header::REFERRER_POLICY,
            "no-referrer".parse().expect("referrer"),
        );
        h.insert(header::X_FRAME_OPTIONS, "DENY".parse().expect("frame"));
        if !h.contains_key(header::CACHE_CONTROL) {
            h.insert(header::CACHE_CONTROL, "no-store".parse().expect("cache"));
        }
        res
    }

    /// The answer before the common headers.
    async fn route(&self, req: &Request<Incoming>) -> Response<Body> {
        if !matches!(*req.method(), Method::GET | Method::HEAD) {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "the board is read-only: GET only",
            );
        }
        let query = Query(req.uri().query().unwrap_or(""));
        let head = |n: header::HeaderName| req.headers().get(n).and_then(|v| v.to_str().ok());
        let token = query.get("token");
        match (self.access).check(head(header::HOST), head(header::COOKIE), token.as_deref()) {
            Verdict::Allow => {}
            Verdict::Login => return self.login(),
            Verdict::Refuse(code, why) => {
                return text(StatusCode::from_u16(code).expect("status"), why);
            }
        }
        match req.uri().path() {
            "/" => asset(PAGE, "text/html; charset=utf-8"),
            "/board.js" => asset(SCRIPT, "text/javascript; charset=utf-8"),
            "/board.css" => asset(STYLE, "text/css; charset=utf-8"),
            "/favicon.ico" => empty(StatusCode::NO_CONTENT),
            "/events" => self.events(req, &query).await,
            "/api/state" => self.state().await,
            "/api/item" => self.item(&query).await,
            _ => text(StatusCode::NOT_FOUND, "no such page on the board"),
        }
    }

    /// The right token: the cookie, and the page without the token in its
    /// address.
    fn login(&self) -> Response<Body> {
        let mut res = empty(StatusCode::SEE_OTHER);
        let h = res.headers_mut();
        h.insert(header::LOCATION, "/".parse().expect("location"));
        if let Some(c) = self.access.cookie().and_then(|c| c.parse().ok()) {
            h.insert(header::SET_COOKIE, c);
        }
        res
    }

    /// `/events`.
    async fn events(&self, req: &Request<Incoming>, query: &Query<'_>) -> Response<Body> {
        let last_id = (req.headers().get("last-event-id")).map(|v| v.to_str().unwrap_or("?"));
        let given = query.get("after");
        // The hub may be a few milliseconds behind the ledger.
        let last = match events::last(&self.hub.pool).await {
            Ok(n) => n.max(self.hub.last()),
            Err(_) => self.hub.last(),
        };
        let after = match sse::start_after(last_id, given.as_deref(), last) {
            Ok(a) => a,
            Err(why) => return text(StatusCode::BAD_REQUEST, &why),
        };
        let mut res = Response::new(sse::stream(self.hub.clone(), after).boxed());
        let h = res.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            "text/event-stream".parse().expect("type"),
        );
        h.insert(header::CACHE_CONTROL, "no-cache".parse().expect("cache"));
        res
    }

    /// `/api/state`.
    async fn state(&self) -> Response<Body> {
        match tokio::time::timeout(ANSWER_TIMEOUT, self.hub.state()).await {
            Ok(Ok(v)) => json(&v),
            Ok(Err(e)) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("the ledger does not answer: {e}"),
            ),
            Err(_) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the ledger did not answer in time",
            ),
        }
    }

    /// `/api/item?key=K`: the last recorded output of item K of the run
    /// the board shows.
    async fn item(&self, query: &Query<'_>) -> Response<Body> {
        let Some(key) = query.get("key").filter(|k| !k.is_empty() && k.len() <= 128) else {
            return text(StatusCode::BAD_REQUEST, "name the item: /api/item?key=KEY");
        };
        let state = match self.hub.state().await {
            Ok(s) => s,
            Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        };
        let Some(run) = state["board"]["run_id"]
            .as_str()
            .and_then(|r| r.parse().ok())
        else {
            return text(StatusCode::NOT_FOUND, "no run to show");
        };
        let read = crate::ledger::board::output(&self.hub.pool, run, &key, 6);
        match tokio::time::timeout(ANSWER_TIMEOUT, read).await {
            Ok(Ok(rows)) => {
                let v = serde_json::json!({"key": key, "output": rows});
                json(&access::masked(v))
            }
            Ok(Err(e)) => text(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            Err(_) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the ledger did not answer in time",
            ),
        }
    }
}

/// A request's query string.
struct Query<'a>(&'a str);

impl Query<'_> {
    /// The first value of parameter `name`, percent-decoded.
    fn get(&self, name: &str) -> Option<String> {
        url::form_urlencoded::parse(self.0.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

fn empty(code: StatusCode) -> Response<Body> {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = code;
    r
}

fn text(code: StatusCode, why: &str) -> Response<Body> {
    let mut r = Response::new(full(format!("{why}\n")));
    *r.status_mut() = code;
    let t = "text/plain; charset=utf-8".parse().expect("type");
    r.headers_mut().insert(header::CONTENT_TYPE, t);
    r
}

fn json(v: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(full(v.to_string()));
    let t = "application/json".parse().expect("type");
    r.headers_mut().insert(header::CONTENT_TYPE, t);
    r
}

fn asset(body: &'static str, kind: &'static str) -> Response<Body> {
    let mut r = Response::new(full(Bytes::from_static(body.as_bytes())));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, kind.parse().expect("type"));
    r
}
