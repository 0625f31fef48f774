//! The filtering proxy of a sandboxed call (docs/security.md#the-network):
//! nightshift runs it outside the sandbox, on the host's network, and
//! accepts on a listening socket the sandbox made inside its own network
//! namespace and sent out (`enter.rs`). HTTPS `CONNECT host:port` is
//! tunnelled only to an allowed host and port, a plain HTTP request in
//! absolute form (`GET http://host/…`) only to an allowed host; anything
//! else is answered `403` and counted. Names are resolved here (the
//! sandbox has no resolver), so a name not allowed never resolves inside.
//! A name that resolves to a local address (loopback, private, link-local)
//! is refused too: only an entry that is itself an address or `localhost`
//! reaches one.
//!
//! Not for deciding which hosts a call needs (the run's `sandbox.rs`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// The port the proxy listens on inside every sandbox (on its own
/// loopback: each sandbox has a network namespace of its own).
pub const PROXY_PORT: u16 = 3128;

/// How long the sandbox may take to send its listening socket.
const RECEIVE_FOR: Duration = Duration::from_secs(30);
/// How long a client may take to send its request's head.
const HEAD_FOR: Duration = Duration::from_secs(30);
/// How long a name may take to resolve, and a connection to open.
const CONNECT_FOR: Duration = Duration::from_secs(10);
/// The longest request head read (request line and headers).
const HEAD_MAX: usize = 64 * 1024;

/// The variables that point a call's HTTP clients at the proxy: the upper
/// and lower case spellings (curl reads `http_proxy` only in lower case;
/// Node's and Rust's clients read either), and an empty `NO_PROXY` so that
/// nothing, a loopback address included, bypasses it (a direct connection
/// could not leave the sandbox anyway).
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut v: Vec<(&'static str, String)> = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k, url.clone()))
    .collect();
    v.extend([("NO_PROXY", String::new()), ("no_proxy", String::new())]);
    v
}

/// One allowed host: a name (lower case) or an address, and its port
/// (`None`: 443 for `CONNECT`, 80 for plain HTTP).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    host: String,
    port: Option<u16>,
}

/// The hosts a sandboxed call may reach through the proxy, and the one it
/// may not reach unless named exactly: the ledger's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allow {
    entries: Vec<Entry>,
    /// The ledger's `host:port` (from the database URL nightshift uses):
    /// refused, by name and by the addresses it resolves to, unless an
    /// entry is that same host and port (docs/security.md#the-network).
    ledger: Option<Entry>,
}

impl Allow {
    /// Adds `entry` (`name`, `name:port`, an IPv4 address with or without
    /// a port, `[v6]:port`).
    ///
    /// # Errors
    /// The entry is not a host: the text says what is expected.
    pub fn add(&mut self, entry: &str) -> Result<(), String> {
        let e = parse_entry(entry).ok_or_else(|| {
            format!("`{entry}` is not a host: write a name or address, optionally with a port (`registry.npmjs.org`, `127.0.0.1:8080`)")
        })?;
        if !self.entries.contains(&e) {
            self.entries.push(e);
            self.entries.sort();
        }
        Ok(())
    }

    /// Keeps the ledger's `host:port` out: a connection to it, or to an
    /// address its name resolves to at that port, is refused even when a
    /// local address or another name's entry would let it through, unless
    /// an entry is exactly `host:port`. A `host` that is not a host is
    /// ignored (the ledger is then reached over a socket, not TCP).
    pub fn keep_out_ledger(&mut self, host: &str, port: u16) {
        self.ledger = parse_entry(host).map(|e| Entry {
            host: e.host,
            port: Some(port),
        });
    }

    /// Whether `entry` is a host [`Allow::add`] takes.
    pub fn is_host(entry: &str) -> bool {
        parse_entry(entry).is_some()
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries as written back (`host` or `host:port`), for a person.
    pub fn shown(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| match e.port {
                Some(p) => format!("{}:{p}", e.host),
                None => e.host.clone(),
            })
            .collect()
    }

    /// The entry that lets a connection to `host:port` through (`tunnel`:
    /// a `CONNECT`), or why not.
    fn permits(&self, host: &str, port: u16, tunnel: bool) -> Result<&Entry, &'static str> {
        let default = if tunnel { 443 } else { 80 };
        let host = host.to_ascii_lowercase();
        let mut matching = (self.entries.iter())
            .filter(|e| e.host == host && e.port.unwrap_or(default) == port)
            .peekable();
        let first = *matching.peek().ok_or("not allowed")?;
        let Some(l) = &self.ledger else {
            return Ok(first);
        };
        // An entry naming the ledger exactly wins over a portless one.
        if let Some(exact) = matching.find(|e| self.names_ledger(e, l)) {
            return Ok(exact);
        }
        match l.host == host && l.port == Some(port) {
            true => Err("the ledger"),
            false => Ok(first),
        }
    }

    /// The ledger's `host:port` when a connection let through by `entry`
    /// must still not reach it (by address): `None` when there is no
    /// ledger to keep out or `entry` names it exactly.
    fn ledger_for(&self, entry: &Entry) -> Option<(&str, u16)> {
        let l = self
            .ledger
            .as_ref()
            .filter(|l| !self.names_ledger(entry, l))?;
        Some((l.host.as_str(), l.port?))
    }

    /// Whether `entry` is exactly the ledger's host and port.
    fn names_ledger(&self, entry: &Entry, ledger: &Entry) -> bool {
        entry.host == ledger.host && entry.port == ledger.port
    }
}

/// `entry` as an [`Entry`], or `None` when it is not a host.
fn parse_entry(entry: &str) -> Option<Entry> {
    let (host, port) = split_host_port(entry)?;
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0)?),
        None => None,
    };
    let is_name = !host.is_empty()
        && host.len() <= 253
        && !host.starts_with(['.', '-'])
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    (is_name || host.parse::<IpAddr>().is_ok()).then(|| Entry {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// `host[:port]` or `[v6][:port]` split; `None` for an unclosed bracket.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    Some(match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (s, None),
    })
}

/// The proxy of one call: accepts on the sandbox's listener until
/// [`Proxy::finish`]; each refusal is logged and kept.
#[derive(Debug)]
pub struct Proxy {
    refused: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Waits (on a task of its own, at most 30 s) for the sandbox to send
    /// its listening socket over `socket`, then serves it with `allow`.
    /// Must be called inside a tokio runtime.
    pub fn serve(socket: UnixStream, allow: Allow) -> Proxy {
        let refused = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&refused);
        let task = tokio::spawn(async move {
            let received = tokio::task::spawn_blocking(move || receive_fd(&socket)).await;
            let listener = match received {
                Ok(Ok(fd)) => listener(fd),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(io::Error::other(e)),
            };
            match listener {
                Ok(l) => accept_loop(l, Arc::new(allow), kept).await,
                Err(e) => tracing::warn!(error = %e, "the sandbox's proxy got no listener"),
            }
        });
        Proxy { refused, task }
    }

    /// Stops serving (open tunnels are closed) and returns each refused
    /// connection's host (`host:port`), in order.
    pub fn finish(self) -> Vec<String> {
        self.task.abort();
        std::mem::take(&mut *self.refused.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The tokio listener of a received descriptor.
fn listener(fd: OwnedFd) -> io::Result<TcpListener> {
    let std = std::net::TcpListener::from(fd);
    std.set_nonblocking(true)?;
    TcpListener::from_std(std)
}

/// Receives one descriptor (`SCM_RIGHTS`) over `socket`, waiting at most
/// [`RECEIVE_FOR`].
fn receive_fd(socket: &UnixStream) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    socket.set_read_timeout(Some(RECEIVE_FOR))?;
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 4];
    // SAFETY: a zeroed msghdr pointing at local buffers of the given sizes.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space) as _;
    // SAFETY: recvmsg into the buffers above; our own socket.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the control buffer recvmsg filled, read through the CMSG macros.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n == 1
            && !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let mut fd: libc::c_int = -1;
            std::ptr::copy_nonoverlapping(
                libc::CMSG_DATA(cmsg),
                (&mut fd as *mut libc::c_int).cast::<u8>(),
                4,
            );
            if fd >= 0 {
                return Ok(OwnedFd::from_raw_fd(fd));
            }
        }
    }
    Err(io::Error::other(
        "the sandbox closed the proxy's socket without sending its listener",
    ))
}

/// Accepts until aborted; each connection on a task of the set (aborted
/// with it).
async fn accept_loop(l: TcpListener, allow: Arc<Allow>, refused: Arc<Mutex<Vec<String>>>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = l.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let (allow, refused) = (Arc::clone(&allow), Arc::clone(&refused));
                conns.spawn(async move {
                    if let Err(e) = handle(client, &allow, &refused).await {
                        tracing::debug!(error = %e, "a connection through the sandbox's proxy ended");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    /// `CONNECT`: a tunnel; otherwise plain HTTP.
    tunnel: bool,
    /// For plain HTTP: the head with its request line in origin form.
    head: Vec<u8>,
    /// For plain HTTP: how the request's body ends.
    body: Body,
}

/// How a plain HTTP request's body ends (RFC 9112 §6.3, as a request's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// One connection: its request read, judged, and forwarded or refused.
async fn handle(
    mut client: TcpStream,
    allow: &Allow,
    refused: &Mutex<Vec<String>>,
) -> io::Result<()> {
    let mut inbox = Inbox::default();
    let head = inbox.head(&mut client).await?;
    let Some(t) = parse_request(&head) else {
        return answer(&mut client, "400 Bad Request").await;
    };
    let Some(mut upstream) = open(&mut client, allow, refused, &t).await? else {
        return Ok(());
    };
    if t.tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        upstream.write_all(&inbox.buf).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        return Ok(());
    }
    plain((client, inbox), upstream, t, allow, refused).await
}

/// The upstream connection for `t`, or `None` once it was refused (logged,
/// kept, answered `403`).
async fn open(
    client: &mut TcpStream,
    allow: &Allow,
    refused: &Mutex<Vec<String>>,
    t: &Target,
) -> io::Result<Option<TcpStream>> {
    let entry = match allow.permits(&t.host, t.port, t.tunnel) {
        Ok(e) => e,
        Err(why) => {
            refuse(client, refused, t, why).await?;
            return Ok(None);
        }
    };
    let explicit = entry.host == "localhost" || entry.host.parse::<IpAddr>().is_ok();
    match connect(t, explicit, allow.ledger_for(entry)).await {
        Some(s) => Ok(Some(s)),
        None => {
            refuse(client, refused, t, "local, the ledger's, or unreachable").await?;
            Ok(None)
        }
    }
}

/// Plain HTTP on a kept-alive connection: each request is forwarded with
/// its body (responses flow back on their own), and each next request's
/// head is judged before it goes anywhere. A request for another host or
/// port ends the connection (the client opens a new one, judged afresh);
/// one not allowed is refused as a first request is (logged, counted,
/// answered `403` once the answers before it are relayed), then the
/// connection closes.
async fn plain(
    (client, mut inbox): (TcpStream, Inbox),
    upstream: TcpStream,
    mut t: Target,
    allow: &Allow,
    refused: &Mutex<Vec<String>>,
) -> io::Result<()> {
    let (mut up_read, mut up_write) = upstream.into_split();
    let (mut client_read, mut client_write) = client.into_split();
    let back = tokio::io::copy(&mut up_read, &mut client_write);
    let first = (t.host.clone(), t.port);
    let forth = async {
        let ended = loop {
            let sent = match up_write.write_all(&t.head).await {
                Ok(()) => {
                    inbox
                        .forward_body(&mut client_read, &mut up_write, t.body)
                        .await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                break Err(e);
            }
            let Ok(head) = inbox.head(&mut client_read).await else {
                break Ok(false);
            };
            let Some(next) = parse_request(&head).filter(|n| !n.tunnel) else {
                break Ok(false);
            };
            match allow.permits(&next.host, next.port, false) {
                Err(why) => {
                    keep_refusal(refused, &next, why);
                    break Ok(true);
                }
                Ok(_) if (next.host.clone(), next.port) != first => break Ok(false),
                Ok(_) => t = next,
            }
        };
        // No more requests: the server ends its answers and closes.
        let _ = up_write.shutdown().await;
        ended
    };
    // The answers still coming are relayed after the last request; the
    // refusal of a request after them follows them.
    let (back, forth) = tokio::join!(back, forth);
    if forth? {
        client_write
            .write_all(closing("403 Forbidden").as_bytes())
            .await?;
    }
    let _ = client_write.shutdown().await;
    back.map(|_| ())
}

/// Logs and keeps a refusal and answers `403`.
async fn refuse(
    client: &mut TcpStream,
    refused: &Mutex<Vec<String>>,
    t: &Target,
    why: &str,
) -> io::Result<()> {
    keep_refusal(refused, t, why);
    answer(client, "403 Forbidden").await
}

/// Logs and keeps a refusal of `t`.
fn keep_refusal(refused: &Mutex<Vec<String>>, t: &Target, why: &str) {
    let host = format!("{}:{}", t.host, t.port);
    tracing::warn!(host = %host, why, "the sandbox's proxy refused a connection");
    refused.lock().unwrap_or_else(|p| p.into_inner()).push(host);
}

/// A bodiless answer that closes the connection.
async fn answer(client: &mut TcpStream, status: &str) -> io::Result<()> {
    client.write_all(closing(status).as_bytes()).await?;
    client.shutdown().await
}

/// The head of a bodiless answer with `status` that closes the connection.
fn closing(status: &str) -> String {
    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

/// Resolves the target and connects to its first address that is not
/// local (any address when `explicit`) nor one of `ledger`'s addresses
/// (its host and port); `None` when none answers.
async fn connect(t: &Target, explicit: bool, ledger: Option<(&str, u16)>) -> Option<TcpStream> {
    let kept_out = match ledger {
        Some(l) => resolve(l.0, l.1).await.unwrap_or_default(),
        None => vec![],
    };
    let addrs: Vec<SocketAddr> = resolve(&t.host, t.port)
        .await?
        .into_iter()
        .filter(|a| (explicit || !is_local(a.ip())) && !kept_out.contains(a))
        .collect();
    for a in addrs {
        if let Ok(Ok(s)) = tokio::time::timeout(CONNECT_FOR, TcpStream::connect(a)).await {
            return Some(s);
        }
    }
    None
}

/// The addresses of `host:port`, waiting at most [`CONNECT_FOR`].
async fn resolve(host: &str, port: u16) -> Option<Vec<SocketAddr>> {
    let found = tokio::time::timeout(CONNECT_FOR, tokio::net::lookup_host((host, port)));
    Some(found.await.ok()?.ok()?.collect())
}

/// Loopback, private, link-local, unspecified, shared (100.64/10) or
/// unique-local: an address of this host or its local network.
fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_local(IpAddr::V4(v4)),
            None => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || (v6.segments()[0] & 0xfe00) == 0xfc00
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
            }
        },
    }
}

/// What was read from a client past the last request head or body.
#[derive(Default)]
struct Inbox {
    buf: Vec<u8>,
}

impl Inbox {
    /// The next request's head (up to `\r\n\r\n`), waiting at most
    /// [`HEAD_FOR`]; what came after it stays buffered.
    async fn head(&mut self, read: &mut (impl AsyncReadExt + Unpin)) -> io::Result<Vec<u8>> {
        tokio::time::timeout(HEAD_FOR, read_head(read, &mut self.buf))
            .await
            .map_err(|_| io::Error::other("no request head in time"))?
    }

    /// Forwards one request's body to `up`, as `body` says it ends.
    async fn forward_body(
        &mut self,
        read: &mut OwnedReadHalf,
        up: &mut OwnedWriteHalf,
        body: Body,
    ) -> io::Result<()> {
        match body {
            Body::None => Ok(()),
            Body::Length(n) => self.forward(read, up, n).await,
            Body::Chunked => loop {
                let line = self.line(read).await?;
                up.write_all(&line).await?;
                let size = std::str::from_utf8(&line)
                    .ok()
                    .and_then(|l| l.trim().split(';').next())
                    .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
                    .ok_or_else(|| io::Error::other("a bad chunk size"))?;
                if size == 0 {
                    // The trailer, up to its empty line.
                    loop {
                        let t = self.line(read).await?;
                        up.write_all(&t).await?;
                        if t == b"\r\n" {
                            return Ok(());
                        }
                    }
                }
                self.forward(read, up, size + 2).await?;
            },
        }
    }

    /// Forwards exactly `n` bytes: first the buffered ones, then `read`'s.
    async fn forward(
        &mut self,
        read: &mut OwnedReadHalf,
        up: &mut OwnedWriteHalf,
        mut n: u64,
    ) -> io::Result<()> {
        let from_buf = usize::try_from(n).unwrap_or(usize::MAX).min(self.buf.len());
        up.write_all(&self.buf[..from_buf]).await?;
        self.buf.drain(..from_buf);
        n -= from_buf as u64;
        let copied = tokio::io::copy(&mut (&mut *read).take(n), up).await?;
        if copied < n {
            return Err(io::Error::other("closed inside a request's body"));
        }
        Ok(())
    }

    /// One line (with its `\r\n`) of a chunked body.
    async fn line(&mut self, read: &mut OwnedReadHalf) -> io::Result<Vec<u8>> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                return Ok(self.buf.drain(..end + 2).collect());
            }
            if self.buf.len() > HEAD_MAX {
                return Err(io::Error::other("a chunk line too long"));
            }
            let n = read.read(&mut chunk).await?;
            if n == 0 {
                return Err(io::Error::other("closed inside a chunked body"));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Reads into `buf` up to the end of a head (`\r\n\r\n`); returns the
/// head and leaves whatever came after it in `buf`.
async fn read_head(
    client: &mut (impl AsyncReadExt + Unpin),
    buf: &mut Vec<u8>,
) -> io::Result<Vec<u8>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok(std::mem::replace(buf, rest));
        }
        if buf.len() > HEAD_MAX {
            return Err(io::Error::other("request head too long"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::other("closed before the end of the head"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The request of `head`: `CONNECT host:port`, or an absolute-form
/// `http://` request (rewritten to origin form, its `Proxy-` headers
/// dropped). `None` for anything else.
fn parse_request(head: &[u8]) -> Option<Target> {
    let text = std::str::from_utf8(head).ok()?;
    let (line, headers) = text.split_once("\r\n")?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/") {
        return None;
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(target)?;
        let e = parse_entry(host)?;
        return Some(Target {
            host: e.host,
            port: port?.parse().ok()?,
            tunnel: true,
            head: Vec::new(),
            body: Body::None,
        });
    }
    let rest = target.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = split_host_port(authority)?;
    let e = parse_entry(host)?;
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 80,
    };
    let mut out = format!("{method} {path} {version}\r\n");
    let mut body = Body::None;
    for h in headers.split("\r\n").filter(|h| !h.is_empty()) {
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:")
            && body != Body::Chunked
        {
            body = Body::Length(v.trim().parse().ok()?);
        }
        // Chunked wins over a length (RFC 9112 §6.3).
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            body = Body::Chunked;
        }
        if !lower.starts_with("proxy-") {
            out.push_str(h);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    Some(Target {
        host: e.host,
        port,
        tunnel: false,
        head: out.into_bytes(),
        body,
    })
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
