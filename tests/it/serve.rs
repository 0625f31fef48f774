//! `nightshift serve` (docs/serve.md): the live board read from the ledger.
//! The real binary, real PostgreSQL, real git, the fake GitHub, headless
//! Chromium. The board's events are compared with the ledger's own rows;
//! the page in the browser is read through its title, which the page keeps
//! as `nightshift · live · #SEQ · seen N · K workers` (Chromium lists every
//! page's title at `/json/list` of its debugging port).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::bg::wait_until;
use crate::common::{Fixture, text};
use crate::workers::{finish, second_host, spawn_drain, spawn_worker, words};

/// A `nightshift serve` in the background; killed when dropped.
struct Server {
    child: Child,
    /// `HOST:PORT` to connect to.
    addr: String,
    /// What it printed as the board's address.
    url: String,
}

impl Server {
    /// `serve --listen LISTEN` in the fixture's repository (from `dir`
    /// when given), once it printed where the board is.
    fn start(f: &Fixture, listen: &str) -> Server {
        Server::start_in(f, &f.repo, listen)
    }

    fn start_in(f: &Fixture, dir: &Path, listen: &str) -> Server {
        let mut child = f
            .cmd()
            .current_dir(dir)
            .args(["serve", "--listen", listen])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("board: ")
            .unwrap_or_else(|| panic!("serve printed {line:?}"))
            .to_string();
        // Keep reading what else it prints, so it never blocks on a pipe.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let port = url.rsplit(':').next().unwrap();
        let port: String = port.chars().take_while(char::is_ascii_digit).collect();
        Server {
            child,
            addr: format!("127.0.0.1:{port}"),
            url,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port no one listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTP answer.
struct Reply {
    status: u16,
    /// The head, header names in lower case.
    head: String,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.eq_ignore_ascii_case(name)).then(|| v.trim().to_string())
        })
    }
}

/// `METHOD path` on `addr` with `headers` (Host is `addr` unless given).
fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect to the board");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = match head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        true => unchunk(body),
        false => body.to_string(),
    };
    Reply {
        status,
        head: head.to_string(),
        body,
    }
}

fn get(addr: &str, path: &str) -> Reply {
    request(addr, "GET", path, &[])
}

/// A chunked body's data.
fn unchunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// One event as an SSE client received it: number, kind, when.
type Got = (i64, String, Instant);

/// An SSE client of `/events?after=AFTER` reading on a thread of its own.
fn listen(addr: &str, after: i64) -> Arc<Mutex<Vec<Got>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut s = TcpStream::connect(addr).expect("connect to /events");
    let req = format!(
        "GET /events?after={after} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let sink = got.clone();
    std::thread::spawn(move || {
        let mut id = None;
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { return };
            if let Some(n) = line.strip_prefix("id: ") {
                id = n.trim().parse::<i64>().ok();
            } else if let (Some(d), Some(n)) = (line.strip_prefix("data: "), id) {
                let v: serde_json::Value = serde_json::from_str(d).unwrap();
                let kind = v["kind"].as_str().unwrap_or_default().to_string();
                sink.lock().unwrap().push((n, kind, Instant::now()));
                id = None;
            }
        }
    });
    got
}

/// The ledger's events: commit sequence number and kind, in order.
fn ledger_events(f: &Fixture) -> Vec<(i64, String)> {
    f.db.sql("SELECT coalesce(string_agg(commit_seq || ' ' || kind, ',' ORDER BY commit_seq), '') FROM events")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (n, k) = s.split_once(' ').unwrap();
            (n.parse().unwrap(), k.to_string())
        })
        .collect()
}

/// Every state change of a `--jobs 2` night reaches an SSE client as an
/// event, once, in the ledger's commit order, numbered without a gap; the
/// replay from `after=0` and the live stream join without a seam; and
/// `/api/state` is `status --json` with the board added.
#[tokio::test(flavor = "multi_thread")]
async fn every_state_change_reaches_the_stream_once_in_commit_order() {
    let (f, _gh) = words(3, 1, "").start().await.split();
    let server = Server::start(&f, "127.0.0.1:0");
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    let got = listen(&server.addr, 0);
    let drain = spawn_drain(&f, &["--jobs", "2"]);
    let out = finish(drain, "drain");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let want = ledger_events(&f);
    let seen = || -> Vec<(i64, String)> {
        let g = got.lock().unwrap();
        g.iter().map(|(n, k, _)| (*n, k.clone())).collect()
    };
    wait_until(Duration::from_secs(10), "every event on the stream", || {
        seen().len() >= want.len()
    });
    assert_eq!(seen(), want, "the stream is the ledger's log");
    let numbers: Vec<i64> = want.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, (1..=want.len() as i64).collect::<Vec<_>>());
    for kind in [
        "approved",
        "run_started",
        "worker_joined",
        "item_started",
        "round_started",
        "phase",
        "gate_ran",
        "reviewed",
        "pushed",
        "pr_opened",
        "item_finished",
        "worker_left",
        "run_finished",
    ] {
        assert!(
            want.iter().any(|(_, k)| k == kind),
            "no {kind} event: {want:?}"
        );
    }
    // The state is cached for up to a second (src/serve/hub.rs
    // STATE_FRESH): the last events may reach it that much later.
    let mut reply = get(&server.addr, "/api/state");
    wait_until(
        Duration::from_secs(5),
        "the state to reach the last event",
        || {
            reply = get(&server.addr, "/api/state");
            serde_json::from_str::<serde_json::Value>(&reply.body)
                .is_ok_and(|v| v["last_seq"] == want.len() as i64)
        },
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("content-security-policy").is_some());
    let state: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    let status = f.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for (k, _) in status.as_object().unwrap() {
        assert!(state.get(k).is_some(), "/api/state lacks status's {k}");
    }
    let board = &state["board"];
    assert_eq!(board["finished"].as_array().unwrap().len(), 3, "{board}");
    assert_eq!(board["counts"]["prs"], 3, "{board}");
    assert!(
        board["headline"]
            .as_str()
            .unwrap()
            .starts_with("3 PRs · 0 failed")
    );
    assert_eq!(state["last_seq"], want.len() as i64);
    // The morning page is headed by the same model's line.
    let page = f.run(&["report", "--html", "-"]);
    // Each bar carries its item's number; no axis label repeats; the
    // picture scrolls at 390 px rather than shrink its text.
    let html = text(&page);
    assert!(html.matches("class=\"label\"").count() >= 3, "{html}");
    let ticks: Vec<&str> = (html.split("text-anchor=").skip(1))
        .filter_map(|t| t.split('>').nth(1)?.split('<').next())
        .collect();
    let distinct: std::collections::BTreeSet<&&str> = ticks.iter().collect();
    assert_eq!(distinct.len(), ticks.len(), "{ticks:?}");
    assert!(html.contains("<div class=\"tl\">"));
    let headline = board["headline"].as_str().unwrap();
    assert!(
        text(&page).contains(&format!("<p class=\"counts\">{headline}</p>")),
        "{}",
        text(&page)
    );
    // A start from the future, or garbage, is refused with a reason.
    let future = get(&server.addr, &format!("/events?after={}", want.len() + 5));
    assert_eq!(future.status, 400);
    assert!(
        future.body.contains("past the ledger's last event"),
        "{}",
        future.body
    );
    let garbage = request(&server.addr, "GET", "/events", &[("Last-Event-ID", "x1")]);
    assert_eq!(garbage.status, 400);
    assert!(
        garbage.body.contains("Last-Event-ID must be"),
        "{}",
        garbage.body
    );
}

/// Chromium from Debian's package, as the README's test command installs it.
fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("Chromium is missing: `bash tests/run.sh` installs it (apt-get install chromium)")
}

/// Headless Chromium driven through the DevTools protocol over a pipe
/// (`--remote-debugging-pipe`: JSON messages ended by a NUL byte, fd 3 in,
/// fd 4 out), attached to its one page. Killed when dropped.
struct Cdp {
    child: Child,
    to: std::fs::File,
    from: BufReader<std::fs::File>,
    next: u64,
    session: Option<String>,
    /// Console calls and uncaught exceptions the page reported.
    console: Vec<String>,
}

impl Cdp {
    fn open(url: &str, width: u32, profile: &Path) -> Cdp {
        use std::os::fd::FromRawFd;
        use std::os::unix::process::CommandExt;
        let (mut a, mut b) = ([0i32; 2], [0i32; 2]);
        // SAFETY: plain pipe2(2) calls on arrays of two ints.
        unsafe {
            assert_eq!(libc::pipe2(a.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert_eq!(libc::pipe2(b.as_mut_ptr(), libc::O_CLOEXEC), 0);
        }
        let (chrome_in, chrome_out) = (a[0], b[1]);
        let mut cmd = std::process::Command::new(chromium());
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--remote-debugging-pipe",
            &format!("--window-size={width},900"),
            &format!("--user-data-dir={}", profile.display()),
            url,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only dup2(2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(chrome_in, 3) < 0 || libc::dup2(chrome_out, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("chromium starts");
        // SAFETY: the fds are ours, each wrapped once; the child's ends close.
        let (to, from) = unsafe {
            libc::close(chrome_in);
            libc::close(chrome_out);
            (
                std::fs::File::from_raw_fd(a[1]),
                std::fs::File::from_raw_fd(b[0]),
            )
        };
        let mut cdp = Cdp {
            child,
            to,
            from: BufReader::new(from),
            next: 0,
            session: None,
            console: Vec::new(),
        };
        let start = Instant::now();
        let target = loop {
            let targets = cdp.call("Target.getTargets", serde_json::json!({}));
            let page = (targets["targetInfos"].as_array().unwrap().iter())
                .find(|t| t["type"] == "page")
                .map(|t| t["targetId"].as_str().unwrap().to_string());
            if let Some(p) = page {
                break p;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no page in chromium"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let attached = cdp.call(
            "Target.attachToTarget",
            serde_json::json!({"targetId": target, "flatten": true}),
        );
        cdp.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        cdp.call("Runtime.enable", serde_json::json!({}));
        cdp
    }

    /// Sends `method` and returns its result; events met meanwhile are
    /// kept (console) or dropped.
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.next += 1;
        let mut msg = serde_json::json!({"id": self.next, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = serde_json::json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let mut buf = Vec::new();
            self.from.read_until(0, &mut buf).unwrap();
            assert!(!buf.is_empty(), "chromium closed its pipe");
            buf.pop();
            let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
            match v["method"].as_str() {
                Some("Runtime.consoleAPICalled") => self.console.push(v["params"].to_string()),
                Some("Runtime.exceptionThrown") => self.console.push(v["params"].to_string()),
                _ => {}
            }
            if v["id"] == self.next {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// The value of JavaScript `expr` in the page.
    fn eval(&mut self, expr: &str) -> serde_json::Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is true in the page.
    fn wait_for(&mut self, expr: &str, limit: Duration) {
        let start = Instant::now();
        while self.eval(expr) != serde_json::json!(true) {
            assert!(
                start.elapsed() < limit,
                "timed out waiting for `{expr}` in the page"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the page's title says.
#[derive(Debug, Clone, PartialEq)]
struct Title {
    live: bool,
    seq: Option<i64>,
    missed: bool,
    workers: usize,
}

/// What the board page's title says now.
fn title(page: &mut Cdp) -> Title {
    let t = page
        .eval("document.title")
        .as_str()
        .unwrap_or_default()
        .to_string();
    let part = |pre: &str| {
        t.split(" · ")
            .find_map(|p| p.strip_prefix(pre).map(str::to_string))
    };
    Title {
        live: t.contains(" · live · "),
        seq: part("#").and_then(|n| n.parse().ok()),
        missed: t.contains("missed"),
        workers: (t.split(" · ").last())
            .and_then(|w| w.strip_suffix(" workers"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    }
}

/// The ledger's last event number.
fn last_seq(f: &Fixture) -> i64 {
    f.db.sql("SELECT last FROM event_counter").parse().unwrap()
}

/// During a live `drain --jobs 2`, with a worker of a second host (its own
/// clone and data directory, one ledger), the board in headless Chromium
/// shows every event within 2 s of the ledger's commit, with no console
/// error; each worker has its own lane; `serve` killed and started again
/// mid-night, the page says it is disconnected, then catches up with every
/// event it missed: the numbers it rendered have no gap.
#[tokio::test(flavor = "multi_thread")]
async fn the_board_in_chromium_follows_a_live_night_and_a_restart_of_serve() {
    let (f, _gh) = words(8, 4, "").start().await.split();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = Server::start(&f, &listen);
    let profile = tempfile::tempdir().unwrap();
    let mut page = Cdp::open(&server.url, 1280, profile.path());
    page.wait_for(
        "document.body.dataset.conn === 'up'",
        Duration::from_secs(30),
    );
    let drain = spawn_drain(&f, &["--jobs", "2"]);
    wait_until(Duration::from_secs(30), "a claim", || {
        f.db.sql("SELECT count(*) FROM claims") != "0"
    });
    let (clone, data) = second_host(&f);
    let worker = spawn_worker(&f, &clone, &data);
    // (ledger number seen, when) and (page number seen, when).
    let (mut ledger, mut shown) = (Vec::new(), Vec::new());
    let (mut lanes, mut hosts) = (0, 0);
    let start = Instant::now();
    // Ten seconds, and until the second host's worker has its lane (a
    // loaded machine starts it late).
    while start.elapsed() < Duration::from_secs(10)
        || (lanes < 3 && start.elapsed() < Duration::from_secs(60))
    {
        ledger.push((last_seq(&f), Instant::now()));
        let t = title(&mut page);
        if let Some(n) = t.seq {
            shown.push((n, Instant::now()));
        }
        lanes = lanes.max(t.workers);
        let pids = page
            .eval("new Set([...document.querySelectorAll('.lane')].map(l => l.dataset.pid)).size");
        hosts = hosts.max(pids.as_u64().unwrap_or(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    // The last events the ledger gave get their 2 s on the page too (the
    // sampling above may stop right after their commit).
    let grace = Instant::now() + Duration::from_secs(2);
    while Instant::now() < grace {
        if let Some(n) = title(&mut page).seq {
            shown.push((n, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The board mid-night, as docs/board.png shows it (written there when
    // NIGHTSHIFT_BOARD_PNG names a file).
    let shot = page.call(
        "Page.captureScreenshot",
        serde_json::json!({"format": "png"}),
    );
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    if let Some(to) = std::env::var_os("NIGHTSHIFT_BOARD_PNG") {
        std::fs::write(to, &png).unwrap();
    }
    assert!(
        lanes >= 3,
        "two workers of the drain and one of the second host: {lanes} lanes"
    );
    assert_eq!(
        hosts, 2,
        "the drain's process and the second host's, each its own lanes"
    );
    assert!(page.console.is_empty(), "console: {:?}", page.console);
    for (n, at) in &ledger {
        let seen = shown.iter().find(|(m, _)| m >= n).map(|(_, t)| *t);
        let seen = seen.unwrap_or_else(|| panic!("event {n} never shown: {shown:?}"));
        let late = seen.saturating_duration_since(*at);
        assert!(
            late <= Duration::from_secs(2),
            "event {n} shown {late:?} after its commit"
        );
    }
    // Kill serve mid-night: the page says so, the night goes on.
    server.kill();
    page.wait_for(
        "document.body.dataset.conn === 'down'",
        Duration::from_secs(10),
    );
    let said = page.eval("document.getElementById('conn').textContent");
    assert!(
        said.as_str().unwrap().starts_with("disconnected since "),
        "{said}"
    );
    let down_at = last_seq(&f);
    std::thread::sleep(Duration::from_secs(3));
    let server = Server::start(&f, &listen);
    page.wait_for(
        "document.body.dataset.conn === 'up'",
        Duration::from_secs(15),
    );
    let out = finish(drain, "drain");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let w = finish(worker, "worker");
    assert_eq!(w.status.code(), Some(0), "{}", text(&w));
    let end = last_seq(&f);
    assert!(end > down_at, "events were written while serve was down");
    page.wait_for(
        &format!("document.body.dataset.lastSeq === '{end}'"),
        Duration::from_secs(10),
    );
    let t = title(&mut page);
    assert!(!t.missed, "the page rendered every number: {t:?}");
    assert_eq!(page.eval("document.body.dataset.gaps"), "0");
    let finished = page.eval("document.querySelectorAll('#finished tbody tr').length");
    assert_eq!(finished, 8);
    drop(server);
}

/// Bound to an address other than loopback, the board refuses a request
/// without its token (401); the token buys an HttpOnly, SameSite=Strict
/// cookie, with which the board answers; every answer has its CSP; a
/// `<script>` in an item's title is text in a real browser; nothing but
/// GET is answered; on loopback, a foreign `Host` is refused.
#[tokio::test(flavor = "multi_thread")]
async fn elsewhere_than_loopback_the_board_needs_its_token_and_shows_text_as_text() {
    let (f, _gh) = words(1, 0, "")
        .backlog("# words\n\n- [ ] Add w1 <script>alert(1)</script>\n")
        .start()
        .await
        .split();
    let out = f.approve_and_drain(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let server = Server::start(&f, "0.0.0.0:0");
    let token = server
        .url
        .split("?token=")
        .nth(1)
        .expect("a token")
        .to_string();
    assert_eq!(token.len(), 64);
    for path in [
        "/",
        "/api/state",
        "/events",
        "/board.js",
        &format!("/?token={}", "0".repeat(64)),
    ] {
        let r = get(&server.addr, path);
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        assert!(r.header("content-security-policy").is_some(), "{path}");
    }
    let login = get(&server.addr, &format!("/?token={token}"));
    assert_eq!(login.status, 303);
    assert_eq!(login.header("location").as_deref(), Some("/"));
    let cookie = login.header("set-cookie").expect("a cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let page = request(&server.addr, "GET", "/", &[("Cookie", &pair)]);
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert!(!page.body.contains("<script>") && page.body.contains("src=\"/board.js\""));
    let state = request(&server.addr, "GET", "/api/state", &[("Cookie", &pair)]);
    assert_eq!(state.status, 200);
    let state: serde_json::Value = serde_json::from_str(&state.body).unwrap();
    assert_eq!(
        state["board"]["finished"][0]["title"],
        "Add w1 <script>alert(1)</script>"
    );
    let post = request(&server.addr, "POST", "/", &[("Cookie", &pair)]);
    assert_eq!(post.status, 405);
    // In a real browser: the token's address, then the page with the cookie.
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{}/?token={token}", server.addr);
    let mut page = Cdp::open(&url, 390, profile.path());
    page.wait_for(
        "document.querySelectorAll('#finished tbody tr').length === 1",
        Duration::from_secs(20),
    );
    let cell =
        page.eval("document.querySelector('#finished tbody tr td:nth-child(2)').textContent");
    assert_eq!(cell, "Add w1 <script>alert(1)</script>");
    assert_eq!(
        page.eval("document.querySelectorAll('main script').length"),
        0
    );
    assert_eq!(
        page.eval("location.pathname + location.search"),
        "/",
        "the token left the address"
    );
    assert_eq!(page.eval("document.cookie"), "", "the cookie is HttpOnly");
    assert!(page.console.is_empty(), "console: {:?}", page.console);
    drop(page);
    // On loopback, a page of another name is refused.
    let local = Server::start(&f, "127.0.0.1:0");
    let foreign = request(
        &local.addr,
        "GET",
        "/api/state",
        &[("Host", "evil.example")],
    );
    assert_eq!(foreign.status, 403);
    assert_eq!(get(&local.addr, "/api/state").status, 200);
}

/// An address in use is a clear error, before anything is served.
#[tokio::test(flavor = "multi_thread")]
async fn a_port_in_use_is_a_clear_error() {
    let f = Fixture::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = f.run(&["serve", "--listen", &addr]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("the port is in use"), "{}", text(&out));
    let out = f.run(&["serve", "--listen", "nowhere"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("is not an address"), "{}", text(&out));
}

/// `drain --serve ADDR` serves the board beside the drain, on its own task
/// and pool: the board answers while the night runs, and the drain ends as
/// it would without it.
#[tokio::test(flavor = "multi_thread")]
async fn drain_serve_serves_the_board_beside_the_night() {
    let (f, _gh) = words(2, 2, "").start().await.split();
    let mut drain = spawn_drain(&f, &["--jobs", "2", "--serve", "127.0.0.1:0"]);
    let mut out = BufReader::new(drain.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("board: ") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "drain ended before the board"
        );
    }
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    let port: String = (line
        .trim()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap())
    .to_string();
    let addr = format!("127.0.0.1:{port}");
    let mut running = false;
    wait_until(
        Duration::from_secs(30),
        "the board to show the running night",
        || {
            let r = get(&addr, "/api/state");
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
            running |= v["running"] == true
                && v["board"]["lanes"]
                    .as_array()
                    .is_some_and(|l| !l.is_empty());
            running
        },
    );
    let status = drain.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(f.report()["items"].as_array().unwrap().len(), 2);
}

/// `[serve] retention` holds without a `serve`: every run deletes, when
/// it ends, the events written longer ago than the retention (the first
/// night's), and keeps its own recent ones (docs/serve.md#pruning).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_prunes_events_older_than_the_configured_retention() {
    let (f, _gh) = words(1, 0, "[serve]\nretention = \"4s\"\n")
        .start()
        .await
        .split();
    crate::common::assert_ok(&f.approve_and_drain(&[]), "night 1");
    let first = f.db.sql("SELECT count(*) FROM events WHERE run_id = (SELECT id FROM runs ORDER BY started_at LIMIT 1)");
    assert_ne!(first, "0", "night 1 wrote events");
    std::thread::sleep(Duration::from_secs(5));
    crate::common::assert_ok(&f.approve_and_drain(&[]), "night 2");
    let runs = f.db.sql("SELECT count(*) FROM runs");
    assert_eq!(runs, "2");
    let (old, new) = (
        f.db.sql("SELECT count(*) FROM events WHERE run_id = (SELECT id FROM runs ORDER BY started_at LIMIT 1)"),
        f.db.sql("SELECT count(*) FROM events WHERE run_id = (SELECT id FROM runs ORDER BY started_at DESC LIMIT 1)"),
    );
    assert_eq!(old, "0", "night 1's events are older than 4 s");
    assert_ne!(new, "0", "night 2's own events are recent");
    // A retention of nothing is refused with the key's line.
    std::fs::write(
        f.repo.join(".nightshift/config.toml"),
        std::fs::read_to_string(f.repo.join(".nightshift/config.toml"))
            .unwrap()
            .replace("retention = \"4s\"", "retention = \"0s\""),
    )
    .unwrap();
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out)
            .contains("config.toml:4: `retention`: \"0s\": a duration must be longer than zero"),
        "{}",
        text(&out)
    );
}

/// While a writer's call runs (it prints, then works 8 s more), the board's
/// `/api/item` shows the end of its output as `writer (running)` — before
/// the call ends and its output is recorded — with the token masked and
/// markup kept as text; once the night is over only the recorded outputs
/// remain (docs/serve.md#live-output). The writer prints 4 KiB more: the
/// last few hundred bytes of a call's output are held back until more
/// comes or the call ends (a secret split across two reads is still
/// masked).
#[tokio::test(flavor = "multi_thread")]
async fn a_running_call_s_output_is_on_the_board_before_it_ends() {
    const TOKEN: &str = "ghp_livetoken_0123456789abcdef";
    let writer = format!(
        "#!/bin/sh\necho 'reading calc.txt <script>alert(1)</script>'\necho 'the token is {TOKEN}'\nprintf '%4096s\\n' '' | tr ' ' x\nsleep 8\necho sub >> calc.txt\necho done\n"
    );
    let f = crate::common::Night::new()
        .github_api_only()
        .token(TOKEN)
        .writer(&writer)
        .backlog("# calc\n\n- [ ] Add sub\n")
        .start()
        .await;
    let board = Server::start(&f, "127.0.0.1:0");
    let drain = spawn_drain(&f, &[]);
    let mut live: Option<serde_json::Value> = None;
    wait_until(
        Duration::from_secs(30),
        "the running writer's output on the board",
        || {
            let state: serde_json::Value =
                serde_json::from_str(&get(&board.addr, "/api/state").body).unwrap_or_default();
            let Some(key) = state["board"]["lanes"][0]["item_key"].as_str() else {
                return false;
            };
            let item: serde_json::Value =
                serde_json::from_str(&get(&board.addr, &format!("/api/item?key={key}")).body)
                    .unwrap_or_default();
            live = item["output"]
                .as_array()
                .and_then(|o| o.iter().find(|p| p["what"] == "writer (running)").cloned());
            live.is_some()
        },
    );
    let calls_then = f.db.sql("SELECT count(*) FROM agent_calls");
    let out = finish(drain, "drain");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let live = live.unwrap();
    let tail = live["tail"].as_str().unwrap();
    assert_eq!(
        calls_then, "0",
        "shown before the call ended and was recorded"
    );
    assert!(
        tail.contains("reading calc.txt <script>alert(1)</script>"),
        "{tail}"
    );
    assert!(tail.contains("the token is"), "{tail}");
    assert!(!tail.contains(TOKEN), "the token is masked: {tail}");
    // The night is over: the recorded writer output, no running one.
    let key = f.db.sql("SELECT item_key FROM run_items LIMIT 1");
    let item: serde_json::Value =
        serde_json::from_str(&get(&board.addr, &format!("/api/item?key={key}")).body).unwrap();
    let whats: Vec<&str> = item["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["what"].as_str().unwrap())
        .collect();
    assert!(
        whats.contains(&"writer") && !whats.iter().any(|w| w.ends_with("(running)")),
        "{whats:?}"
    );
}
